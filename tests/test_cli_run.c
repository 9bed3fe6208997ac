/*
 * test_cli_run.c — the ssmc command line running models end to end: the
 * forms of options and prompts, interactive turns, the compile cache,
 * bundles that remember their weights, summaries and progress; and how it
 * behaves under signals, special files and writes that are killed or cut
 * short (a file it replaces is whole, old or new, and no temporary file is
 * left).
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/ssmc.h"
#include "testutil.h"

/* Runs a shell command (printf-style) in the source tree with the ssmc
 * under test as $SSMC, and asserts its exit status; returns its output
 * (stdout and stderr, unless the command redirects them), malloc'd. */
static char *sh(int want_rc, const char *fmt, ...) SSM_PRINTF(2, 3);
static char *sh(int want_rc, const char *fmt, ...) {
  char body[8192], cmd[9000], *out;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "cd %s && SSMC=%s && %s", ssm_test_source_dir(), ssm_test_ssmc(), body);
  int rc = ssm_test_sh(cmd, &out);
  if (rc != want_rc) fprintf(stderr, "\n  %s\n  -> exit %d (want %d): %s\n", body, rc, want_rc, out);
  CU_ASSERT_EQUAL(rc, want_rc);
  return out;
}

/* The last line of `out` (freed), malloc'd. */
static char *last_line(char *out) {
  size_t n = strlen(out);
  while (n && out[n - 1] == '\n') out[--n] = 0;
  char *nl = strrchr(out, '\n'), *line = strdup(nl ? nl + 1 : out);
  free(out);
  return line;
}

/* A directory of the temp dir, made empty. */
static const char *fresh_dir(const char *name) {
  static char bufs[4][512];
  static int k;
  char *d = bufs[k++ & 3];
  snprintf(d, sizeof bufs[0], "%s/%s", ssm_test_tmpdir(), name);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", d, d);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, NULL), 0);
  return d;
}

#define FIX "tests/data/mamba1_tiny"

#define PY "models/pymamba"

#define JAMBA "tests/data/jamba_tiny"

/* --x=v and --x v, -nN and -n N, options before or after MODEL: one run. */
static void test_option_forms(void) {
  char *a = sh(0, "$SSMC run " FIX " --weights " FIX " --tokens 1,2,3 -n 5 -q");
  char *b = sh(0, "$SSMC run --weights=" FIX " --tokens=1,2,3 -n5 -q " FIX);
  char *c = sh(0, "$SSMC run -q -n 5 " FIX " --tokens 1,2,3");
  CU_ASSERT(strlen(a) > 8 && strchr(a, ',') != NULL);
  CU_ASSERT_STRING_EQUAL(a, b);
  CU_ASSERT_STRING_EQUAL(a, c); /* the weights of a model directory are its own */
  free(a);
  free(b);
  free(c);
}

/* --prompt TEXT, --prompt - (stdin) and --prompt-file FILE: the same run. */
static void test_prompt_sources(void) {
  const char *f = ssm_test_write("prompt.txt", "def fibonacci(n):", 17);
  char *a = sh(0, "$SSMC run " PY " --prompt 'def fibonacci(n):' -n 12 2>/dev/null");
  char *b = sh(0, "printf 'def fibonacci(n):' | $SSMC run " PY " --prompt - -n 12 2>/dev/null");
  char *c = sh(0, "$SSMC run " PY " --prompt-file %s -n 12 2>/dev/null", f);
  char *d = sh(0, "$SSMC run " PY " --prompt-file - -n 12 < %s 2>/dev/null", f);
  CU_ASSERT_EQUAL(strncmp(a, "def fibonacci(n):", 17), 0);
  CU_ASSERT(strlen(a) > 25);
  CU_ASSERT_STRING_EQUAL(a, b);
  CU_ASSERT_STRING_EQUAL(a, c);
  CU_ASSERT_STRING_EQUAL(a, d);
  free(a);
  free(b);
  free(c);
  free(d);
  a = sh(1, "$SSMC run " PY " --prompt-file /nonexistent/p.txt");
  CU_ASSERT_PTR_NOT_NULL(strstr(a, "--prompt-file: /nonexistent/p.txt"));
  free(a);
  a = sh(1, "$SSMC run " PY " --prompt-file %s", ssm_test_tmpdir());
  CU_ASSERT_PTR_NOT_NULL(strstr(a, "is a directory"));
  free(a);
  /* --tokenizer takes the directory that holds tokenizer.json */
  a = sh(0, "$SSMC run " PY " --prompt 'def f' -n 3 --tokenizer " PY " -q");
  b = sh(0, "$SSMC run " PY " --prompt 'def f' -n 3 --tokenizer " PY "/tokenizer.json -q");
  CU_ASSERT_STRING_EQUAL(a, b);
  free(a);
  free(b);
}

/* Drops the trailing newline of `s` (in place). */
static char *chomp(char *s) {
  size_t n = strlen(s);
  if (n && s[n - 1] == '\n') s[n - 1] = 0;
  return s;
}

/* -i: turns read from stdin continue one state. Turn 2 after turn 1 (its
 * prompt A, its K tokens g) is the run of A, g, B as ids: what ssmc prints
 * is A, g's text, B, and the continuation of that run. The CPU backend, so
 * that the chunking of the prompts cannot change a logit. */
static void test_interactive(void) {
  const char *A = "def add(a, b):\n", *B = "    return a + b\n"; /* a line each */
  char both[256];
  snprintf(both, sizeof both, "%s%s", A, B);
  const char *fa = ssm_test_write("turn_a.txt", A, strlen(A));
  const char *fb = ssm_test_write("turn_b.txt", B, strlen(B));
  const char *fab = ssm_test_write("turns.txt", both, strlen(both));
  char *ids_a = chomp(sh(0, "$SSMC tokenize --tokenizer " PY " --ids - < %s", fa));
  char *ids_b = chomp(sh(0, "$SSMC tokenize --tokenizer " PY " --ids - < %s", fb));
  char *g = chomp(sh(0, "$SSMC run " PY " --backend cpu --tokens %s -n 6 -q", ids_a));
  char *g2 = chomp(sh(0, "$SSMC run " PY " --backend cpu --tokens %s,%s,%s -n 6 -q", ids_a, g, ids_b));
  char *text_g = chomp(sh(0, "$SSMC tokenize --tokenizer " PY " --decode %s", g));
  char *text_g2 = chomp(sh(0, "$SSMC tokenize --tokenizer " PY " --decode %s", g2));
  int commas = 0;
  for (const char *p = g; *p; p++) commas += *p == ',';
  CU_ASSERT_EQUAL(commas, 5); /* 6 tokens: no end-of-text in turn 1 */
  char *got = sh(0, "$SSMC run " PY " --backend cpu -i -n 6 < %s 2>/dev/null", fab);
  char want[4096];
  snprintf(want, sizeof want, "%s%s%s%s\n", A, text_g, B, text_g2);
  if (strcmp(got, want)) fprintf(stderr, "\n  got  '%s'\n  want '%s'\n", got, want);
  CU_ASSERT_STRING_EQUAL(got, want);
  /* --prompt-file is the first turn, then stdin's */
  char *got2 = sh(0, "$SSMC run " PY " --backend cpu -i -n 6 --prompt-file %s < %s 2>/dev/null",
                  fa, fb);
  CU_ASSERT_STRING_EQUAL(got, got2);
  free(got);
  free(got2);
  free(ids_a);
  free(ids_b);
  free(g);
  free(g2);
  free(text_g);
  free(text_g2);
}

/* --stop: the text ends right before the first stop string that greedy
 * decoding writes (the earliest of several; one that spans tokens), and
 * generation ends there; bad values are refused. */
static void test_stop(void) {
  const char *run = "$SSMC run " PY " --backend cpu -q -n 30 --prompt 'def add(a, b):'";
  char *full = sh(0, "%s", run);
  static const char *const cases[][3] = {
      {"return", NULL, "return"},              /* one token */
      {"bind", "Same", "Same"},                /* the earlier of two */
      {"a % b.\"\n", NULL, "a % b.\"\n"},      /* several tokens, a newline in it */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *stop = strstr(full, cases[i][2]);
    CU_ASSERT_PTR_NOT_NULL_FATAL(stop); /* greedy decoding writes it */
    char want[1024];
    snprintf(want, sizeof want, "%.*s\n", (int)(stop - full), full);
    const char *opt2 = cases[i][1] ? " --stop '" : "", *v2 = cases[i][1] ? cases[i][1] : "";
    char *got = sh(0, "%s --stop '%s'%s%s%s", run, cases[i][0], opt2, v2, cases[i][1] ? "'" : "");
    if (strcmp(got, want)) fprintf(stderr, "\n  got  '%s'\n  want '%s'\n", got, want);
    CU_ASSERT_STRING_EQUAL(got, want);
    free(got);
  }
  char *ids = sh(0, "$SSMC tokenize --tokenizer " PY " --ids 'a %% b.\"\n'");
  CU_ASSERT_PTR_NOT_NULL(strchr(ids, ',')); /* more than one token */
  free(ids);
  /* generation ends at the stop string: fewer tokens than -n */
  char *json = sh(0, "$SSMC run " PY " --backend cpu -n 30 --prompt 'def add(a, b):' --stop return "
                  "--json 2>&1 >/dev/null");
  cJSON *j = cJSON_Parse(json);
  CU_ASSERT_PTR_NOT_NULL_FATAL(j);
  CU_ASSERT(cJSON_GetObjectItem(j, "generated_tokens")->valueint < 30);
  cJSON_Delete(j);
  free(json);
  static const char *const bad[][2] = {
      {"--stop ''", "--stop: expected a non-empty string"},
      {"--stop a --stop b --stop c --stop d --stop e", "--stop: given more than 4 times (at 'e')"},
      {"--stop", "option '--stop' needs a value"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *out = sh(2, "%s %s", run, bad[i][0]);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, bad[i][1]));
    free(out);
  }
  char *out = sh(2, "$SSMC run " PY " --tokens 1,2 --stop x");
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "--stop ends generated text: it needs --prompt or -i"));
  free(out);
  free(full);
}

/* The largest resident size (KiB) of the processes that the shell command
 * `cmd` runs, from a child that runs it and waits for them all. */
static long peak_kib(const char *cmd) {
  int fds[2];
  CU_ASSERT_FATAL(pipe(fds) == 0);
  pid_t pid = fork();
  CU_ASSERT_FATAL(pid >= 0);
  if (!pid) {
    close(fds[0]);
    if (system(cmd) == -1) _exit(127);
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    ssize_t w = write(fds[1], &ru.ru_maxrss, sizeof ru.ru_maxrss);
    _exit(w == (ssize_t)sizeof ru.ru_maxrss ? 0 : 1);
  }
  close(fds[1]);
  long kib = -1;
  if (read(fds[0], &kib, sizeof kib) != (ssize_t)sizeof kib) kib = -1;
  close(fds[0]);
  waitpid(pid, NULL, 0);
  return kib;
}

/* -i with a line over 1 MiB: refused, and read no further than its first
 * MiB, so that a stream without newlines (64 MiB of NULs here) costs no
 * more memory than a short line does. */
static void test_interactive_long_line(void) {
  char *out = sh(1, "head -c 67108864 /dev/zero | $SSMC run " PY " --backend cpu -i -n 2 2>&1 >/dev/null");
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "-i: line 1 of standard input is longer than 1 MiB"));
  free(out);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "cd %s && echo hi | %s run " PY " --backend cpu -i -n 2 >/dev/null 2>&1",
           ssm_test_source_dir(), ssm_test_ssmc());
  long small = peak_kib(cmd);
  snprintf(cmd, sizeof cmd, "cd %s && head -c 67108864 /dev/zero | %s run " PY " --backend cpu -i "
           "-n 2 >/dev/null 2>&1", ssm_test_source_dir(), ssm_test_ssmc());
  long zeros = peak_kib(cmd);
  if (zeros > small + 16384) fprintf(stderr, "\n  peak %ld KiB, %ld KiB for a short line\n", zeros, small);
  CU_ASSERT(small > 0 && zeros > 0);
  CU_ASSERT(zeros <= small + 16384);
}

/* tokenize: `ID -> 'PIECE'` a line, escaped like llama-tokenize; --ids the
 * plain list; a tokenizer directory for --tokenizer. */
static void test_tokenize_pieces(void) {
  char *out = sh(0, "$SSMC tokenize --tokenizer " PY " \"$(printf 'def f(x):\\n\\t\"\\303\\251\" \\047')\"");
  static const char *const lines[] = {"   487 -> 'def'\n", "   289 -> ' f'\n", "   199 -> '\\n'\n",
                                      "   198 -> '\\t'\n", "   128 -> '\\xc3'\n",
                                      "   103 -> '\\xa9'\n", "   267 -> ' \\''\n"};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
    if (!strstr(out, lines[i])) fprintf(stderr, "\n  no '%s' in:\n%s", lines[i], out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, lines[i]));
  }
  char *ids = sh(0, "$SSMC tokenize --tokenizer " PY "/tokenizer.json --ids \"$(printf 'def f(x):\\n\\t\"\\303\\251\" \\047')\"");
  int nlines = 0, nids = 1;
  for (const char *p = out; *p; p++) nlines += *p == '\n';
  for (const char *p = ids; *p; p++) nids += *p == ',';
  CU_ASSERT_EQUAL(nlines, nids);
  CU_ASSERT_EQUAL(strncmp(ids, "487,289,", 8), 0);
  free(out);
  free(ids);
  /* a whole UTF-8 character is printed as it is; a control byte escaped */
  out = sh(0, "$SSMC tokenize --tokenizer tests/data/tokenizer/neox \"$(printf '\\321\\202\\001')\"");
  CU_ASSERT_STRING_EQUAL(out, "  1516 -> '\xd1\x82'\n   191 -> '\\x01'\n");
  free(out);
  /* SentencePiece-style: the space a '\u2581' stands for shows, also in the
   * text's first token (which the decoders drop when decoding the text);
   * a byte_fallback token is its byte */
  out = sh(0, "$SSMC tokenize --tokenizer tests/data/tokenizer/llama2 \"$(printf 'Hello w\303\266rld')\"");
  CU_ASSERT_STRING_EQUAL(out, "  1369 -> ' H'\n  1297 -> 'el'\n   452 -> 'lo'\n   437 -> ' w'\n"
                              "   198 -> '\\xc3'\n   185 -> '\\xb6'\n   342 -> 'r'\n   712 -> 'ld'\n");
  free(out);
}

/* The compile cache: the second run of a model directory reads the bundle
 * the first one wrote (the file untouched), with the same output; a corrupt
 * entry is compiled again and replaced; a compile asked for with
 * SSM_COOP_PREP=0 is an entry of its own; --no-cache neither reads nor
 * writes; nothing but entries is left in the directory. */
static void test_cache(void) {
  const char *home = fresh_dir("xdg");
  char env[700];
  snprintf(env, sizeof env, "XDG_CACHE_HOME=%s", home);
  static const char *const want_cache[] = {"miss", "hit", "miss", "hit"};
  char *first = NULL, path[1024] = "";
  struct stat st0 = {0};
  for (int run = 0; run < 4; run++) {
    char *out = sh(0, "%s $SSMC run " FIX " --backend vulkan --tokens 1,2,3 -n 4 --json 2>%s/err && tail -n 1 %s/err",
                   env, home, home);
    char *nl = strchr(out, '\n');
    cJSON *j = cJSON_Parse(nl ? nl + 1 : "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "cache")->valuestring, want_cache[run]);
    const cJSON *file = cJSON_GetObjectItem(j, "cache_file");
    CU_ASSERT_PTR_NOT_NULL_FATAL(file);
    CU_ASSERT_EQUAL(strncmp(file->valuestring, home, strlen(home)), 0);
    if (run == 0) {
      snprintf(path, sizeof path, "%s", file->valuestring);
      CU_ASSERT_EQUAL(stat(path, &st0), 0);
      first = out;
      if (nl) *nl = 0;
    } else {
      CU_ASSERT_STRING_EQUAL(file->valuestring, path);
      CU_ASSERT_EQUAL(strncmp(out, first, strlen(first)), 0); /* the same ids */
      free(out);
    }
    struct stat st;
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    if (run == 1) { /* read, not written */
      CU_ASSERT_EQUAL(st.st_ino, st0.st_ino);
      CU_ASSERT_EQUAL(st.st_mtim.tv_sec, st0.st_mtim.tv_sec);
      CU_ASSERT_EQUAL(st.st_mtim.tv_nsec, st0.st_mtim.tv_nsec);
      CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "compile_s")->valuedouble, 0);
      /* corrupt it: one byte of the blob section */
      FILE *f = fopen(path, "r+b");
      CU_ASSERT_PTR_NOT_NULL_FATAL(f);
      fseek(f, -5, SEEK_END);
      int c = fgetc(f);
      fseek(f, -5, SEEK_END);
      fputc(c ^ 0x10, f);
      fclose(f);
    }
    if (run == 2) CU_ASSERT_NOT_EQUAL(st.st_ino, st0.st_ino); /* replaced */
    cJSON_Delete(j);
  }
  char *ls = sh(0, "ls -A %s/ssmc", home);
  const char *slash = strrchr(path, '/');
  char want[256];
  snprintf(want, sizeof want, "%s\n", slash ? slash + 1 : path);
  CU_ASSERT_STRING_EQUAL(ls, want);
  free(ls);
  /* a compile option outside the command line (SSM_COOP_PREP=0: no gemm_coop
   * prep kernels; SSM_DELTA_CHUNKS=0: the delta rule step by step) is part
   * of the key: an entry of its own each, the same ids */
  static const char *const outside[] = {"SSM_COOP_PREP=0", "SSM_DELTA_CHUNKS=0"};
  char files[2][1024] = {"", ""};
  for (int k = 0; k < 2; k++) {
    char *prep = sh(0, "%s %s $SSMC run " FIX " --backend vulkan --tokens 1,2,3 -n 4 --json "
                    "2>%s/err && tail -n 1 %s/err", outside[k], env, home, home);
    char *pnl = strchr(prep, '\n');
    cJSON *pj = cJSON_Parse(pnl ? pnl + 1 : "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(pj);
    CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(pj, "cache")->valuestring, "miss");
    snprintf(files[k], sizeof files[k], "%s", cJSON_GetObjectItem(pj, "cache_file")->valuestring);
    CU_ASSERT_STRING_NOT_EQUAL(files[k], path);
    CU_ASSERT_EQUAL(strncmp(prep, first, strlen(first)), 0);
    cJSON_Delete(pj);
    free(prep);
  }
  CU_ASSERT_STRING_NOT_EQUAL(files[0], files[1]);
  /* an entry is this model's only when it records the key it is named by:
   * another model's entry copied there (same tensor names and shapes), or a
   * bundle of other shapes written there, is compiled again and replaced */
  char *out = sh(0, "%s $SSMC run tests/data/falcon_tiny --backend vulkan --tokens 1 -n 1 --json 2>%s/err && "
                 "tail -n 1 %s/err", env, home, home);
  cJSON *j = cJSON_Parse(strchr(out, '\n') ? strchr(out, '\n') + 1 : "");
  CU_ASSERT_PTR_NOT_NULL_FATAL(j);
  const char *falcon = cJSON_GetObjectItem(j, "cache_file")->valuestring;
  CU_ASSERT_STRING_NOT_EQUAL(falcon, path);
  const char *other[] = {"cp %s %s%.0s", "$SSMC compile tests/data/mamba1_untied -q -o %.0s%s"};
  for (int i = 0; i < 2; i++) {
    char cmd[3000];
    snprintf(cmd, sizeof cmd, other[i], falcon, path, "");
    char *o = sh(0, "%s && SSMC_VERBOSE=1 %s $SSMC run " FIX " --backend vulkan --tokens 1,2,3 -n 4 --json "
                 "2>%s/err && cat %s/err", cmd, env, home, home);
    CU_ASSERT_EQUAL(strncmp(o, first, strlen(first)), 0); /* the same ids */
    CU_ASSERT_PTR_NOT_NULL(strstr(o, "\"cache\":\"miss\""));
    char want_log[1400];
    snprintf(want_log, sizeof want_log, "compile cache: %s %s", path,
             i ? "records no key" : "holds the compile of key ");
    CU_ASSERT_PTR_NOT_NULL(strstr(o, want_log));
    free(o);
    o = sh(0, "%s $SSMC run " FIX " --backend vulkan --tokens 1,2,3 -n 4 --json 2>&1", env);
    CU_ASSERT_PTR_NOT_NULL(strstr(o, "\"cache\":\"hit\""));
    CU_ASSERT_EQUAL(strncmp(o, first, strlen(first)), 0);
    free(o);
  }
  cJSON_Delete(j);
  free(out);
  /* --no-cache: compiled, nothing read or written */
  out = sh(0, "rm -rf %s/ssmc && %s $SSMC run " FIX " --backend vulkan --tokens 1,2,3 -n 4 --json --no-cache "
                 "2>%s/err && tail -n 1 %s/err && ls -A %s", home, env, home, home, home);
  CU_ASSERT_EQUAL(strncmp(out, first, strlen(first)), 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"cache\":\"off\""));
  CU_ASSERT_PTR_NULL(strstr(out, "ssmc\n")); /* no cache directory made */
  free(out);
  /* a cache that cannot be written: the run goes on */
  out = sh(0, "touch %s/ssmc && XDG_CACHE_HOME=%s $SSMC run " FIX " --backend vulkan --tokens 1,2,3 -n 4 -q", home,
           home);
  CU_ASSERT_EQUAL(strncmp(out, first, strlen(first)), 0);
  free(out);
  free(first);
}

/* A FIFO, or a socket, where a compile-cache entry belongs (the compiled
 * model, or the quantized weights kept beside it): never opened (a FIFO
 * would wait for a writer), but removed and written anew, then read. */
static void test_cache_special_files(void) {
  const char *home = fresh_dir("xdg_special");
  char *first = sh(0, "XDG_CACHE_HOME=%s $SSMC run " FIX " --backend vulkan --tokens 1,2,3 -n 4 -q", home);
  char *names = sh(0, "XDG_CACHE_HOME=%s $SSMC run " FIX " --backend vulkan --dtype q4_0 --tokens 1,2,3 -n 4 -q "
                   ">/dev/null && cd %s/ssmc && ls", home, home);
  CU_ASSERT(strstr(names, ".ssmb\n") && strstr(names, ".safetensors\n"));
  free(names);
  static const char *const specials[] = {"mkfifo $f", "python3 -c 'import socket, sys; "
                                         "socket.socket(socket.AF_UNIX).bind(sys.argv[1])' $f"};
  for (int i = 0; i < 2; i++) {
    char *out = sh(0, "cd %s/ssmc && for f in *; do rm $f && %s && ! test -f $f || exit 1; done "
                   "&& cd - >/dev/null && SSMC_VERBOSE=1 XDG_CACHE_HOME=%s timeout 60 $SSMC run "
                   FIX " --backend vulkan --dtype q4_0 --tokens 1,2,3 -n 4 -q 2>&1 && XDG_CACHE_HOME=%s timeout 60 "
                   "$SSMC run " FIX " --backend vulkan --tokens 1,2,3 -n 4 -q >/dev/null && cd %s/ssmc && "
                   "for f in *; do test -f $f || exit 1; done", home, specials[i], home, home, home);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, i ? ", not a regular file; removed" : "was a FIFO, not a "
                                  "regular file; removed, to be written again"));
    free(out);
    out = sh(0, "XDG_CACHE_HOME=%s timeout 60 $SSMC run " FIX " --backend vulkan --tokens 1,2,3 -n 4 --json "
             "2>&1", home);
    CU_ASSERT_EQUAL(strncmp(out, first, strlen(first)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"cache\":\"hit\""));
    free(out);
  }
  free(first);
}

/* serve BUNDLE: the chat template is found where the tokenizer is, in the
 * model directory the bundle records, whether the bundle reads its
 * weights there or from the quantized file beside it. */
static void test_serve_bundle_template(void) {
  const char *d = fresh_dir("serve_bundle");
  free(sh(0, "cp -r " PY " %s/m && echo '{{ messages[0].content }}' > %s/m/chat_template.jinja && "
          "$SSMC compile %s/m -o %s/b.ssmb -q && $SSMC compile %s/m --dtype q4_0 -o %s/q.ssmb -q",
          d, d, d, d, d, d));
  static const char *const bundles[] = {"b.ssmb", "q.ssmb"};
  for (int i = 0; i < 2; i++) {
    char *out = sh(0, "$SSMC serve %s/%s --host 127.0.0.1 --port 0 2>%s/err & pid=$!; "
                   "for k in $(seq 300); do grep -q listening %s/err && break; sleep 0.1; done; "
                   "kill $pid; wait $pid; cat %s/err", d, bundles[i], d, d, d);
    char want[1024];
    snprintf(want, sizeof want, "; chat template: %s/m/chat_template.jinja\n", d);
    if (!strstr(out, want)) fprintf(stderr, "\n  %s: '%s' lacks '%s'", bundles[i], out, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    free(out);
  }
}

/* SIGINT while compiling or loading: the run stops at once (exit 130) and
 * leaves no temporary file in the cache, nor beside compile's -o. Without
 * the kernel cache, so that there is a compile to interrupt. */
static void test_sigint_while_compiling(void) {
  const char *home = fresh_dir("xdg_int");
  for (int delay = 0; delay < 3; delay++) {
    char *out = sh(0, "rm -rf %s/ssmc; (SSMC_KERNEL_CACHE= XDG_CACHE_HOME=%s $SSMC run " PY " --prompt 'def f():' "
                   "-n 100000 > /dev/null 2>%s/err & pid=$!; sleep 0.%d; kill -INT $pid; "
                   "wait $pid; echo \"rc=$?\"); ls -A %s/ssmc 2>/dev/null | grep '^\\.' ; true",
                   home, home, home, 3 + 3 * delay, home);
    CU_ASSERT_EQUAL(strncmp(out, "rc=130\n", 7), 0);
    CU_ASSERT_STRING_EQUAL(out + (strlen(out) >= 7 ? 7 : 0), ""); /* no dot files */
    free(out);
  }
  const char *dir = fresh_dir("compile_int");
  char *out = sh(0, "(SSMC_KERNEL_CACHE= $SSMC compile " PY " -o %s/m.ssmb 2>/dev/null & pid=$!; sleep 0.5; kill -INT $pid 2>/dev/null; "
                 "wait $pid; echo \"rc=$?\"); ls -A %s", dir, dir);
  CU_ASSERT(!strcmp(out, "rc=130\n") || !strcmp(out, "rc=0\nm.ssmb\n"));
  free(out);
}

/* A bundle remembers its weights directory: `run X.ssmb` needs no
 * --weights; moved or changed weights are refused, naming what changed;
 * --weights overrides; a bundle compiled without weights says so. */
/* A model directory's generation_config.json gives run its defaults, which
 * options override; run names the fields it took; unknown fields are
 * ignored; a malformed file is an error naming the file and the field. */
static void test_generation_config(void) {
  const char *dir = fresh_dir("genconfig");
  const char *run = "$SSMC run %s/m --backend cpu --tokens 852,328,421,145,37,285,697,882 -n 12 -q %s";
  free(sh(0, "cp -r " FIX " %s/m", dir));
  char *greedy = last_line(sh(0, run, dir, "")), *pen = last_line(sh(0, run, dir, "--repeat-penalty 1.3"));
  char *hot = last_line(sh(0, run, dir, "--temperature 0.8 --top-k 50 --seed 3"));
  CU_ASSERT_STRING_NOT_EQUAL(greedy, pen);
  CU_ASSERT_STRING_NOT_EQUAL(greedy, hot);
  /* the penalty as a default; --repeat-penalty 1 turns it off */
  free(sh(0, "echo '{\"repetition_penalty\": 1.3, \"new_field\": [1, {}]}' > %s/m/generation_config.json",
          dir));
  char *out = sh(0, "$SSMC run %s/m --backend cpu --tokens 1 -n 1", dir);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "defaults from generation_config.json: repetition_penalty"));
  free(out);
  char *got = last_line(sh(0, run, dir, ""));
  CU_ASSERT_STRING_EQUAL(got, pen);
  free(got);
  got = last_line(sh(0, run, dir, "--repeat-penalty 1"));
  CU_ASSERT_STRING_EQUAL(got, greedy);
  free(got);
  /* do_sample: transformers' top_k 50 and the file's temperature; options override */
  free(sh(0, "echo '{\"do_sample\": true, \"temperature\": 0.8}' > %s/m/generation_config.json", dir));
  got = last_line(sh(0, run, dir, "--seed 3"));
  CU_ASSERT_STRING_EQUAL(got, hot);
  free(got);
  got = last_line(sh(0, run, dir, "--temperature 0"));
  CU_ASSERT_STRING_EQUAL(got, greedy);
  free(got);
  got = last_line(sh(0, run, dir, "--greedy"));
  CU_ASSERT_STRING_EQUAL(got, greedy);
  free(got);
  static const char *const bad[][2] = {
      {"{\"temperature\": \"hot\"}", "generation_config.json: temperature: expected a number from 0"},
      {"{\"top_p\": 0}", "generation_config.json: top_p: expected a number above 0 to 1"},
      {"{\"do_sample\": 1}", "generation_config.json: do_sample: expected true or false"},
      {"{\"eos_token_id\": [2, \"x\"]}", "generation_config.json: eos_token_id: expected token ids from 0 to 999 (entry 1"},
      {"{\"eos_token_id\": 1000}", "generation_config.json: eos_token_id: expected token ids"},
      {"{\"repetition_penalty\": -1}", "generation_config.json: repetition_penalty: expected a number above 0"},
      {"[1, 2", "generation_config.json: not a JSON object"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    free(sh(0, "echo '%s' > %s/m/generation_config.json", bad[i][0], dir));
    out = sh(1, run, dir, "");
    if (!strstr(out, bad[i][1])) fprintf(stderr, "\n  want '%s' in: %s", bad[i][1], out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, bad[i][1]));
    free(out);
  }
  free(greedy);
  free(pen);
  free(hot);
}

static void test_bundle_weights(void) {
  const char *dir = fresh_dir("moving");
  char *out = sh(0, "cp -r " FIX " %s/m && $SSMC compile %s/m -o %s/m.ssmb && "
                 "$SSMC inspect %s/m.ssmb --json", dir, dir, dir, dir);
  cJSON *j = cJSON_Parse(out);
  CU_ASSERT_PTR_NOT_NULL_FATAL(j);
  const cJSON *src = cJSON_GetObjectItem(j, "source");
  char want_dir[600];
  snprintf(want_dir, sizeof want_dir, "%s/m", dir);
  CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(src, "dir")->valuestring, want_dir);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(src, "files")), 2);
  cJSON_Delete(j);
  free(out);
  char *a = sh(0, "$SSMC run %s/m.ssmb --tokens 1,2,3 -n 4 -q", dir);
  char *b = sh(0, "$SSMC run %s/m.ssmb --weights " FIX " --tokens 1,2,3 -n 4 -q", dir);
  CU_ASSERT_STRING_EQUAL(a, b);
  CU_ASSERT(strlen(a) > 6);
  free(b);
  out = sh(1, "mv %s/m %s/m2 && $SSMC run %s/m.ssmb --tokens 1 -n 1", dir, dir, dir);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "m.ssmb: it was compiled with the weights in "));
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "/m, which is not a directory any more"));
  free(out);
  b = sh(0, "$SSMC run %s/m.ssmb --weights %s/m2 --tokens 1,2,3 -n 4 -q", dir, dir);
  CU_ASSERT_STRING_EQUAL(a, b);
  free(b);
  /* weights given must be of the model it was compiled for: by config.json's
   * keys its description reads, so that a copy whose config.json says
   * more (a fine-tune's) still runs, another model's (same tensor names and
   * shapes) does not, and neither does a file of another model's directory */
  b = sh(0, "cp -r %s/m2 %s/ft && sed -i 's/\"dtype\"/\"_name_or_path\": \"ft\", "
         "\"dtype\"/' %s/ft/config.json && $SSMC run %s/m.ssmb --weights %s/ft --tokens "
         "1,2,3 -n 4 -q", dir, dir, dir, dir, dir);
  CU_ASSERT_STRING_EQUAL(a, b);
  free(b);
  out = sh(1, "$SSMC run %s/m.ssmb --weights tests/data/falcon_tiny --tokens 1 -n 1", dir);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "m.ssmb: the weights tests/data/falcon_tiny are not of the "
                                     "model it was compiled for: tests/data/falcon_tiny/config."
                                     "json differs from the config it was compiled with "
                                     "(model_type is \"falcon_mamba\", not \"mamba\"); compile "
                                     "a bundle for these weights"));
  free(out);
  out = sh(1, "$SSMC run %s/m.ssmb --weights tests/data/mamba1_untied/model.safetensors "
           "--tokens 1 -n 1", dir);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "(vocab_size is 757, not 1000; hidden_size is 48, not 64; "
                                     "intermediate_size is 96, not 128; and 7 more)"));
  free(out);
  out = sh(1, "$SSMC export-web %s/m.ssmb --weights tests/data/falcon_tiny -o %s/web", dir, dir);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "model_type is \"falcon_mamba\", not \"mamba\""));
  free(out);
  /* config.json edited (the same values, another layout), a tensor table
   * changed (another file's), a file added */
  out = sh(1, "mv %s/m2 %s/m && sed -i 's/,/ ,/' %s/m/config.json && $SSMC run %s/m.ssmb "
           "--tokens 1 -n 1", dir, dir, dir, dir);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "m.ssmb: the weights in "));
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "changed since it was compiled (config.json changed): "
                                     "compile it again, or give --weights DIR"));
  free(out);
  out = sh(1, "cp " FIX "/config.json %s/m/ && cp tests/data/mamba1_untied/model.safetensors %s/m/ "
           "&& $SSMC run %s/m.ssmb --tokens 1 -n 1", dir, dir, dir);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "(model.safetensors changed)"));
  free(out);
  out = sh(1, "cp " FIX "/model.safetensors %s/m/ && echo {} > %s/m/model.safetensors.index.json "
           "&& $SSMC run %s/m.ssmb --tokens 1 -n 1", dir, dir, dir);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "(model.safetensors.index.json is new)"));
  free(out);
  b = sh(0, "rm %s/m/model.safetensors.index.json && $SSMC run %s/m.ssmb --tokens 1,2,3 -n 4 -q",
         dir, dir);
  CU_ASSERT_STRING_EQUAL(a, b); /* as it was: runs again */
  free(b);
  free(a);
  out = sh(1, "$SSMC compile models/mamba1.yaml --config " FIX "/config.json -o %s/y.ssmb && "
           "$SSMC run %s/y.ssmb --tokens 1 -n 1", dir, dir);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "y.ssmb: no weights: the bundle records no weights directory"));
  free(out);
  out = sh(0, "$SSMC compile models/mamba1.yaml --config " FIX "/config.json --weights " FIX
           " -o %s/y.ssmb && $SSMC run %s/y.ssmb --tokens 1 -n 1 -q", dir, dir);
  free(out);
  out = sh(1, "$SSMC compile models/mamba1.yaml --config " FIX "/config.json --weights %s -o "
           "%s/y.ssmb", dir, dir);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "--weights: "));
  free(out);
}

/* Writes a random Mamba-1 checkpoint shaped like state-spaces/mamba-130m
 * (vocab 50280, d_model 768, 24 layers, f32, tied lm_head: 515 MB) into
 * `dir`: every tensor a prefix of one buffer of values uniform in
 * [-0.1, 0.1], written part by part (nothing copied). */
static void write_mamba130m_shape(const char *dir) {
  enum { V = 50280, D = 768, E = 1536, N = 16, R = 48, K = 4, L = 24 };
  char path[700];
  snprintf(path, sizeof path, "%s/config.json", dir);
  char config[1024];
  int nc = snprintf(config, sizeof config,
                    "{\"model_type\": \"mamba\", \"architectures\": [\"MambaForCausalLM\"], "
                    "\"vocab_size\": %d, \"hidden_size\": %d, \"intermediate_size\": %d, "
                    "\"state_size\": %d, \"time_step_rank\": %d, \"conv_kernel\": %d, "
                    "\"num_hidden_layers\": %d, \"layer_norm_epsilon\": 1e-05, \"expand\": 2, "
                    "\"hidden_act\": \"silu\", \"use_bias\": false, \"use_conv_bias\": true, "
                    "\"residual_in_fp32\": true, \"tie_word_embeddings\": true, "
                    "\"eos_token_id\": 0, \"bos_token_id\": 0, \"pad_token_id\": 0}",
                    V, D, E, N, R, K, L);
  SSM_ASSERT_OK(ssm_file_write(path, 1, (const void *const[]){config}, (size_t[]){(size_t)nc}));
  static const struct { const char *name; int64_t d0, d1, d2; } layer[] = {
      {"mixer.A_log", E, N, 0},         {"mixer.D", E, 0, 0},
      {"mixer.conv1d.bias", E, 0, 0},   {"mixer.conv1d.weight", E, 1, K},
      {"mixer.dt_proj.bias", E, 0, 0},  {"mixer.dt_proj.weight", E, R, 0},
      {"mixer.in_proj.weight", 2 * E, D, 0}, {"mixer.out_proj.weight", D, E, 0},
      {"mixer.x_proj.weight", R + 2 * N, E, 0}, {"norm.weight", D, 0, 0}};
  enum { PER = sizeof layer / sizeof layer[0], NT = 2 + L * PER };
  size_t numel = (size_t)V * D;
  float *data = malloc(numel * sizeof *data);
  CU_ASSERT_PTR_NOT_NULL_FATAL(data);
  uint64_t x = 0x9e3779b97f4a7c15u;
  for (size_t i = 0; i < numel; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    data[i] = (float)((double)(x >> 11) / 9007199254740992.0 * 0.2 - 0.1);
  }
  ssm_sb header = {0};
  const void *parts[NT + 2];
  size_t sizes[NT + 2], offset = 0;
  ssm_sb_printf(&header, "{");
  for (int t = 0; t < NT; t++) {
    char name[128];
    int64_t dims[3] = {D, 0, 0};
    if (t == 0) snprintf(name, sizeof name, "backbone.embeddings.weight"), dims[0] = V, dims[1] = D;
    else if (t == 1) snprintf(name, sizeof name, "backbone.norm_f.weight");
    else {
      int l = (t - 2) / PER, j = (t - 2) % PER;
      snprintf(name, sizeof name, "backbone.layers.%d.%s", l, layer[j].name);
      dims[0] = layer[j].d0, dims[1] = layer[j].d1, dims[2] = layer[j].d2;
    }
    size_t n = 1;
    ssm_sb_printf(&header, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[", t ? "," : "", name);
    for (int d = 0; d < 3 && dims[d]; d++) {
      ssm_sb_printf(&header, d ? ",%lld" : "%lld", (long long)dims[d]);
      n *= (size_t)dims[d];
    }
    ssm_sb_printf(&header, "],\"data_offsets\":[%zu,%zu]}", offset, offset + 4 * n);
    offset += 4 * n;
    parts[t + 2] = data;
    sizes[t + 2] = 4 * n;
  }
  ssm_sb_printf(&header, "}");
  while (header.n % 8) ssm_sb_printf(&header, " ");
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)header.n >> (8 * i));
  parts[0] = len, sizes[0] = 8;
  parts[1] = ssm_sb_str(&header), sizes[1] = header.n;
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  SSM_ASSERT_OK(ssm_file_write(path, NT + 2, parts, sizes));
  ssm_sb_free(&header);
  free(data);
}

/* The mamba-130m shape runs on lavapipe, whose storage buffers bind at
 * most 128 MiB, though its embedding and tied lm_head take 154 MB: the
 * kernels read them through two windows. A few tokens through `ssmc run`
 * (no cap), their logits those of the CPU interpreter, the greedy ids the
 * same. */
/* A quantized bundle's weights file: written by compile (the same bytes
 * each time), read instead of the checkpoint (the same logits), moved
 * with the bundle, checked against its fingerprint, and kept in the
 * compile cache for a model directory run quantized. */
static void test_weights_file(void) {
  const char *d = fresh_dir("qfile");
  char *out = sh(0, "cp -r tests/data/jamba_moe %s/m && $SSMC compile %s/m -o %s/b.ssmb --dtype q4_0 "
                 "&& $SSMC inspect %s/b.ssmb --json", d, d, d, d);
  char want[700];
  snprintf(want, sizeof want, "weights: written to %s/b.q4_0.safetensors\n", d);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
  cJSON *j = cJSON_Parse(strchr(out, '{') ? strchr(out, '{') : "");
  const cJSON *wf = cJSON_GetObjectItem(j, "weights_file");
  CU_ASSERT(cJSON_IsString(cJSON_GetObjectItem(wf, "name")) &&
            !strcmp(cJSON_GetObjectItem(wf, "name")->valuestring, "b.q4_0.safetensors"));
  cJSON_Delete(j);
  free(out);
  /* the file and the checkpoint give the same logits; moved together, the
   * bundle still finds it (the checkpoint moved away too) */
  free(sh(0, "$SSMC run %s/b.ssmb --tokens 1,2,3 -n 4 -q --dump-logits %s/a.f32 >/dev/null && "
          "$SSMC run %s/b.ssmb --weights %s/m --tokens 1,2,3 -n 4 -q --dump-logits %s/b.f32 "
          ">/dev/null && cmp %s/a.f32 %s/b.f32 && mkdir %s/x && mv %s/b.ssmb %s/b.q4_0.safetensors "
          "%s/x && mv %s/m %s/m2 && $SSMC run %s/x/b.ssmb --tokens 1,2,3 -n 4 -q --dump-logits "
          "%s/c.f32 >/dev/null && cmp %s/a.f32 %s/c.f32", d, d, d, d, d, d, d, d, d, d, d, d, d, d,
          d, d, d));
  /* one byte of its data changed: refused */
  out = sh(1, "mv %s/m2 %s/m && f=%s/x/b.q4_0.safetensors && n=$(stat -c %%s $f) && "
           "printf '\\177' | dd of=$f bs=1 seek=$((n - 100)) conv=notrunc 2>/dev/null && "
           "$SSMC run %s/x/b.ssmb --tokens 1 -n 1", d, d, d, d);
  snprintf(want, sizeof want, "x/b.ssmb: its weights file %s/x/b.q4_0.safetensors changed since "
           "it was compiled (fingerprint ", d);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
  free(out);
  /* gone: the checkpoint is read */
  free(sh(0, "rm %s/x/b.q4_0.safetensors && $SSMC run %s/x/b.ssmb --tokens 1,2,3 -n 4 -q "
          "--dump-logits %s/c.f32 >/dev/null && cmp %s/a.f32 %s/c.f32", d, d, d, d, d));
  /* the compile cache keeps the quantized file: written once (the bytes
   * compile writes), then read (the same logits) */
  out = sh(0, "$SSMC compile " FIX " -o %s/t.ssmb --dtype q4_0 -q && for i in 1 2; do "
           "XDG_CACHE_HOME=%s/xdg $SSMC run " FIX " --backend vulkan --dtype q4_0 --tokens 1,2,3 -n 4 -q "
           "--dump-logits %s/t$i.f32 >/dev/null; done && cmp %s/t1.f32 %s/t2.f32 && "
           "$SSMC run %s/t.ssmb --tokens 1,2,3 -n 4 -q --dump-logits %s/t.f32 >/dev/null && "
           "cmp %s/t.f32 %s/t1.f32 && cmp %s/t.q4_0.safetensors %s/xdg/ssmc/*.safetensors && "
           "ls %s/xdg/ssmc | sed 's/[0-9a-f]\\{16,\\}//g'", d, d, d, d, d, d, d, d, d, d, d, d);
  CU_ASSERT_STRING_EQUAL(out, ".q4_0..safetensors\n.ssmb\n");
  free(out);
}

static void test_mamba130m_shape(void) {
  const char *dir = fresh_dir("m130");
  write_mamba130m_shape(dir);
  char *vk = sh(0, "$SSMC run %s --backend vulkan --tokens 510,2,7 -n 3 --greedy --no-cache -q --chunk 2 "
                "--dump-logits %s/vk.f32", dir, dir);
  char *cpu = sh(0, "$SSMC run %s --backend cpu --tokens 510,2,7 -n 3 --greedy -q --chunk 2 "
                 "--dump-logits %s/cpu.f32", dir, dir);
  CU_ASSERT_STRING_EQUAL(vk, cpu);
  CU_ASSERT(strlen(vk) >= 5 && strchr(vk, ',') != NULL);
  char p[700];
  char *a = NULL, *b = NULL;
  size_t na = 0, nb = 0;
  snprintf(p, sizeof p, "%s/vk.f32", dir);
  SSM_ASSERT_OK(ssm_file_read(p, 0, &a, &na));
  snprintf(p, sizeof p, "%s/cpu.f32", dir);
  SSM_ASSERT_OK(ssm_file_read(p, 0, &b, &nb));
  CU_ASSERT_EQUAL(na, (size_t)5 * 50280 * 4); /* 3 prompt positions, then 2 generated */
  if (a && b && na == nb) {
    const float *x = (const float *)a, *y = (const float *)b;
    double worst = 0, peak = 0;
    for (size_t i = 0; i < na / 4; i++) {
      peak = fmax(peak, fabs(y[i]));
      worst = fmax(worst, fabs((double)x[i] - y[i]));
    }
    fprintf(stderr, "\n  mamba-130m shape: vulkan vs cpu max |d| %.3g of max |logit| %.3g", worst, peak);
    CU_ASSERT(peak > 0);
    CU_ASSERT(worst <= 1e-4 * peak);
  }
  free(a);
  free(b);
  free(vk);
  free(cpu);
  free(sh(0, "rm -rf %s", dir));
}

/* The summary after a run: on stderr, so stdout's last line is still the
 * ids; it names the backend and why (--backend, or what auto chose on this
 * machine's devices); --json makes it one JSON line; --quiet leaves stderr
 * empty. */
static void test_summary(void) {
  const char *dir = fresh_dir("summary");
  char *out = sh(0, "$SSMC run " FIX " --backend vulkan --tokens 1,2,3 -n 5 > %s/out 2> %s/err; "
                 "cat %s/err; echo ---; cat %s/out", dir, dir, dir, dir);
  static const char *const lines[] = {"device:     ", ", Vulkan, f32 weights\n", "load:       ", "prompt:     2 tokens, ",
                                      "generation: 5 tokens, ", " tokens/s\n",
                                      "backend:    vulkan: --backend vulkan\n"};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
    CU_ASSERT_PTR_NOT_NULL(strstr(out, lines[i]));
  const char *ids = strstr(out, "---\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(ids);
  int commas = 0;
  for (const char *p = ids + 4; *p; p++) commas += *p == ',';
  CU_ASSERT_EQUAL(commas, 4);
  free(out);
  out = sh(0, "$SSMC run " FIX " --backend cpu --tokens 1,2,3 -n 5 --json 2>&1 >/dev/null");
  cJSON *j = cJSON_Parse(out);
  CU_ASSERT_PTR_NOT_NULL_FATAL(j);
  CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "device")->valuestring, "cpu");
  CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "dtype")->valuestring, "f32");
  /* the last prompt token is the sampler's first input: generation time */
  CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "prompt_tokens")->valueint, 2);
  CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "generated_tokens")->valueint, 5);
  CU_ASSERT(cJSON_GetObjectItem(j, "generated_tokens_per_s")->valuedouble > 0);
  CU_ASSERT(cJSON_GetObjectItem(j, "load_s")->valuedouble > 0);
  CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "cache")->valuestring, "off");
  CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "backend_reason")->valuestring, "--backend cpu");
  cJSON_Delete(j);
  free(out);
  /* no --backend: auto, as ssmc_backend_choose decides for these devices */
  ssmc_device *devs = NULL;
  int n = 0;
  ssmc_status st = ssmc_devices(&devs, &n);
  ssmc_status_free(st);
  uint64_t params = 0;
  SSM_ASSERT_OK(ssmc_weights_params(FIX, &params));
  CU_ASSERT(params > 100000 && params < 200000);
  const char *why = NULL;
  ssmc_backend b = ssmc_backend_choose(devs, st ? 0 : n, params, &why);
  free(devs);
  char want[300];
  snprintf(want, sizeof want, "backend:    %s: %s (0.1M parameters)\n",
           b == SSMC_BACKEND_CPU ? "cpu" : "vulkan", why);
  out = sh(0, "$SSMC run " FIX " --tokens 1,2,3 -n 5 2>&1 >/dev/null");
  if (!strstr(out, want)) fprintf(stderr, "\n  want '%s' in\n%s", want, out);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
  free(out);
  out = sh(0, "$SSMC run " FIX " --backend vulkan --tokens 1,2,3 -n 5 -q 2>&1 >/dev/null");
  CU_ASSERT_STRING_EQUAL(out, "");
  free(out);
}

/* A progress bar on stderr when it is a terminal (script(1) gives one),
 * none otherwise. */
static void test_progress(void) {
  char *out = sh(0, "script -qec \"$SSMC run " PY " --backend vulkan --prompt x -n 2 --no-cache\" /dev/null");
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "\r\033[Kcompiling decode "));
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "\r\033[Kcompiling prefill "));
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "] 100%"));
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "\r\033[K")); /* the line cleared at the end */
  free(out);
  out = sh(0, "$SSMC run " PY " --backend vulkan --prompt x -n 2 --no-cache 2>&1 >/dev/null");
  CU_ASSERT_PTR_NULL(strstr(out, "compiling decode"));
  CU_ASSERT_PTR_NULL(strchr(out, '\r'));
  free(out);
}

/* bench --reps: means and spreads, with the device, dtype, version and git
 * revision in the JSON; bench takes a model directory too. */
static void test_bench_reps(void) {
  char *out = sh(0, "$SSMC bench " FIX " -n 8 --reps 3 --json 2>/dev/null");
  cJSON *j = cJSON_Parse(out);
  if (!j) fprintf(stderr, "\n  not JSON: %s\n", out);
  CU_ASSERT_PTR_NOT_NULL_FATAL(j);
  CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "reps")->valueint, 3);
  static const char *const keys[] = {"decode_tokens_per_s", "decode_feedback_tokens_per_s",
                                     "prefill_tokens_per_s"};
  for (int i = 0; i < 3; i++) {
    char sd[64];
    snprintf(sd, sizeof sd, "%s_stddev", keys[i]);
    CU_ASSERT(cJSON_GetObjectItem(j, keys[i])->valuedouble > 0);
    CU_ASSERT(cJSON_GetObjectItem(j, sd)->valuedouble >= 0);
    /* timings vary without bound (a loaded machine, a sanitizer), but the
     * spread of n positive samples is at most sqrt(n) times their mean */
    CU_ASSERT(cJSON_GetObjectItem(j, sd)->valuedouble <=
              sqrt(3.0) * cJSON_GetObjectItem(j, keys[i])->valuedouble * (1 + 1e-9));
  }
  CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "dtype")->valuestring, "f32");
  CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "ssmc_version")->valuestring, SSM_VERSION);
  CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(j, "git_revision")->valuestring, ssm_revision());
  CU_ASSERT(strlen(cJSON_GetObjectItem(j, "device")->valuestring) > 0);
  cJSON_Delete(j);
  free(out);
  out = sh(0, "$SSMC bench " FIX " -n 8 --reps 2 2>/dev/null");
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "means and standard deviations of 2 runs"));
  CU_ASSERT_PTR_NOT_NULL(strstr(out, " ± "));
  free(out);
}

/* SIGINT or SIGTERM during generation: the run stops at the next token,
 * finishes its line, keeps the old --dump-logits file and leaves no
 * temporary file, and exits with 128 + the signal. Killed outright
 * (SIGKILL), it still leaves the old file whole and no temporary file. */
static void test_signals(void) {
  static const char *const sigs[] = {"INT", "TERM", "KILL"};
  static const int codes[] = {130, 143, 137};
  for (int i = 0; i < 3; i++) {
    char dir[512], cmd[8192], *out;
    snprintf(dir, sizeof dir, "%s/sig%d", ssm_test_tmpdir(), i);
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s && echo old > %s/dump && cd %s && "
             "(%s run models/pymamba --weights models/pymamba --prompt 'def f(x):' -n 1000000 "
             "--dump-logits %s/dump > %s/out 2>%s/err & pid=$!; "
             "for k in $(seq 600); do [ $(wc -c < %s/out) -gt 40 ] && break; sleep 0.1; done; "
             "kill -%s $pid; wait $pid; echo \"rc=$?\"; ls -A %s; tail -c 1 %s/out | od -c | head -1)",
             dir, dir, ssm_test_source_dir(), ssm_test_ssmc(), dir, dir, dir, dir, sigs[i], dir, dir);
    ssm_test_sh(cmd, &out);
    char want[32];
    snprintf(want, sizeof want, "rc=%d\n", codes[i]);
    if (!strstr(out, want)) fprintf(stderr, "\n  SIG%s: %s\n", sigs[i], out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    /* no temporary file left (killed: the dump was an anonymous file) */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\ndump\nerr\nout\n"));
    if (i < 2) CU_ASSERT_PTR_NOT_NULL(strstr(out, "\\n")); /* caught: the line was finished */
    free(out);
    snprintf(cmd, sizeof cmd, "cat %s/dump", dir);
    ssm_test_sh(cmd, &out);
    CU_ASSERT_STRING_EQUAL(out, "old\n");
    free(out);
  }
}

/* A FIFO or a device where a file is read (a state, config.json, the YAML, a
 * bundle, a tokenizer) is refused at once, naming the path and what it is:
 * never a hang waiting for a writer, never a guess from the file's name. */
static void test_special_files(void) {
  const char *d = fresh_dir("special");
  free(sh(0, "mkfifo %s/fifo %s/f.ssmb && mkdir %s/cf && cp " FIX "/model.safetensors %s/cf/ && "
          "mkfifo %s/cf/config.json", d, d, d, d, d));
  static const struct { const char *args, *path, *kind; } cases[] = {
      {"run " FIX " --backend cpu --tokens 5 -n 2 -q --state-in %s/fifo", "/fifo", "a FIFO"},
      {"run " FIX " --backend cpu --tokens 5 -n 2 -q --state-in /dev/zero%.0s", "/dev/zero",
       "a character device"},
      {"run %s/cf --backend cpu --tokens 5 -n 2 -q", "/cf/config.json", "a FIFO"},
      {"run models/mamba1.yaml --config %s/fifo --weights " FIX " --backend cpu --tokens 5 -n 2 -q",
       "/fifo", "a FIFO"},
      {"compile models/mamba1.yaml --config %s/fifo -o /dev/null", "/fifo", "a FIFO"},
      {"run %s/fifo --config " FIX "/config.json --weights " FIX " --backend cpu --tokens 5 -n 2",
       "/fifo", "a FIFO"},
      {"compile %s/fifo --config " FIX "/config.json -o /dev/null", "/fifo", "a FIFO"},
      {"ir %s/fifo", "/fifo", "a FIFO"},
      {"ir /dev/null%.0s", "/dev/null", "a character device"},
      {"run %s/f.ssmb --tokens 5 -n 2 -q", "/f.ssmb", "a FIFO"},
      {"run %s/f.ssmb --weights " FIX " --tokens 5 -n 2 -q", "/f.ssmb", "a FIFO"},
      {"inspect %s/fifo", "/fifo", "a FIFO"},
      {"tokenize --tokenizer %s/fifo hi", "/fifo", "a FIFO"},
      {"run " PY " --backend cpu --tokenizer %s/fifo --prompt hi -n 2 -q", "/fifo", "a FIFO"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char args[1024], want[256];
    snprintf(args, sizeof args, cases[i].args, d);
    snprintf(want, sizeof want, "%s: is %s, not a regular file\n", cases[i].path, cases[i].kind);
    char *out = sh(1, "timeout 20 $SSMC %s", args); /* 124 if it hung */
    if (!strstr(out, want)) fprintf(stderr, "\n  ssmc %s: '%s' lacks '%s'", args, out, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    free(out);
  }
}

/* Whether process `pid` holds a temporary file of `dir` open: an
 * anonymous one (O_TMPFILE, "DIR/#INODE (deleted)") or a dot file. */
static int holds_temp(pid_t pid, const char *dir) {
  char fds[64], link[1200], target[1200];
  snprintf(fds, sizeof fds, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(fds);
  int found = 0;
  size_t n = strlen(dir);
  for (struct dirent *e; d && !found && (e = readdir(d));) {
    snprintf(link, sizeof link, "%s/%s", fds, e->d_name);
    ssize_t k = readlink(link, target, sizeof target - 1);
    if (k <= 0) continue;
    target[k] = 0;
    found = !strncmp(target, dir, n) && target[n] == '/' && (target[n + 1] == '#' || target[n + 1] == '.');
  }
  if (d) closedir(d);
  return found;
}

/* Whether directory `dir` has a dot file: a temporary with a name. An
 * anonymous temporary is linked under one in the few calls before the
 * rename that publishes it; a kill there leaves it, as it would any
 * write-then-rename, so that moment is not one to kill in. */
static int has_dot_file(const char *dir) {
  DIR *d = opendir(dir);
  int found = 0;
  for (struct dirent *e; d && !found && (e = readdir(d));)
    found = e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  if (d) closedir(d);
  return found;
}

/* Starts `ssmc ARGS` in the source tree (after the shell commands `env`) and kills it (SIGKILL) while it
 * writes a file of `dir`: it is stopped once it holds a temporary file
 * there, and killed if it still does while the file has no name (so
 * before the link and rename that would publish it). Returns 1 when it was killed so, 0 when it ended first. */
static int kill_while_writing(const char *env, const char *args, const char *dir) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "cd %s && %s exec %s %s >/dev/null 2>&1", ssm_test_source_dir(), env,
           ssm_test_ssmc(), args);
  pid_t pid = fork();
  CU_ASSERT_FATAL(pid >= 0);
  if (!pid) {
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  int status, killed = 0;
  time_t t0 = time(NULL);
  while (!killed && waitpid(pid, &status, WNOHANG) == 0) {
    if (time(NULL) - t0 > 120) {
      kill(pid, SIGKILL); /* stuck: fail, but never hang the suite */
      break;
    }
    if (!holds_temp(pid, dir)) continue;
    kill(pid, SIGSTOP);
    if (waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status)) return 0; /* it ended */
    killed = holds_temp(pid, dir) && !has_dot_file(dir);
    kill(pid, killed ? SIGKILL : SIGCONT);
  }
  if (killed) {
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  } else {
    waitpid(pid, &status, 0);
  }
  return killed;
}

/* Killed (SIGKILL) while it writes a state over a good one, a bundle over
 * a good one, or a compile-cache entry: the good file is byte-identical
 * and nothing else is left in its directory. A 26 MB Jamba state (its KV
 * cache for --max-seq 100000), so that the write and its fsync take a
 * while; each writer is tried until it is caught writing. */
static void test_killed_while_writing(void) {
  const char *d = fresh_dir("killed");
  free(sh(0, "$SSMC run " JAMBA " --backend cpu --max-seq 100000 --tokens 1,2,3 -n 1 -q "
          "--state-out %s/s.state >/dev/null && cp %s/s.state %s/s.keep && "
          "$SSMC compile " FIX " -o %s/b.ssmb -q && cp %s/b.ssmb %s/b.keep", d, d, d, d, d, d));
  char args[2048];
  snprintf(args, sizeof args, "run " JAMBA " --backend cpu --max-seq 100000 --tokens 4,5,6,7 -n 2 "
           "-q --state-out %s/s.state", d);
  /* an attempt that ends before it is caught publishes its file, rightly:
   * the good one is put back before the next */
  int caught = 0;
  for (int k = 0; k < 5 && !caught; k++)
    if (!(caught = kill_while_writing("", args, d))) free(sh(0, "cp %s/s.keep %s/s.state", d, d));
  CU_ASSERT(caught);
  snprintf(args, sizeof args, "compile " JAMBA " -o %s/b.ssmb -q", d);
  caught = 0;
  for (int k = 0; k < 5 && !caught; k++)
    if (!(caught = kill_while_writing("", args, d))) free(sh(0, "cp %s/b.keep %s/b.ssmb", d, d));
  CU_ASSERT(caught);
  free(sh(0, "cmp %s/s.state %s/s.keep && cmp %s/b.ssmb %s/b.keep && "
          "test \"$(ls -A %s | tr '\\n' ' ')\" = 'b.keep b.ssmb s.keep s.state '", d, d, d, d, d));
  const char *home = fresh_dir("killed_xdg");
  char env[700], cache[700];
  snprintf(env, sizeof env, "export XDG_CACHE_HOME=%s;", home);
  snprintf(cache, sizeof cache, "%s/ssmc", home);
  caught = 0;
  for (int k = 0; k < 5 && !caught; k++)
    if (!(caught = kill_while_writing(env, "run " JAMBA " --backend vulkan --tokens 1 -n 1 -q", cache)))
      free(sh(0, "rm -rf %s", cache)); /* its entry would serve the next attempt */
  CU_ASSERT(caught);
  char *ls = sh(0, "ls -A %s", cache);
  CU_ASSERT_STRING_EQUAL(ls, ""); /* no entry, and no temporary */
  free(ls);
}

/* `ssmc export-web` killed (SIGKILL) while it writes a site over an older
 * one (a bundle of another chunk, so that model.ssmb differs): every file of
 * the site is then byte-identical to the older site's or to the one an
 * uninterrupted export writes, and no other file (no temporary) is there. */
static void test_export_killed_while_writing(void) {
  const char *d = fresh_dir("killed_export");
  free(sh(0, "$SSMC compile " PY " -o %s/a.ssmb -q && $SSMC compile " PY " --chunk 8 -o "
          "%s/b.ssmb -q && $SSMC export-web %s/a.ssmb --weights " PY " -o %s/site >/dev/null && "
          "cp -a %s/site %s/old && $SSMC export-web %s/b.ssmb --weights " PY " -o %s/new "
          ">/dev/null && ! cmp -s %s/old/model.ssmb %s/new/model.ssmb",
          d, d, d, d, d, d, d, d, d, d));
  char args[2048], site[700];
  snprintf(args, sizeof args, "export-web %s/b.ssmb --weights " PY " -o %s/site", d, d);
  snprintf(site, sizeof site, "%s/site", d);
  int caught = 0;
  for (int k = 0; k < 5 && !caught; k++)
    if (!(caught = kill_while_writing("", args, site)))
      free(sh(0, "rm -rf %s/site && cp -a %s/old %s/site", d, d, d));
  CU_ASSERT(caught);
  /* the same names as either site, each file one of its two versions */
  char *out = sh(0, "cd %s && test \"$(ls -A site)\" = \"$(ls -A old)\" && "
                 "test \"$(ls -A site)\" = \"$(ls -A new)\" && for f in $(ls -A site); do "
                 "cmp -s site/$f old/$f || cmp -s site/$f new/$f || echo \"$f\"; done", d);
  CU_ASSERT_STRING_EQUAL(out, "");
  free(out);
}

/* The signals process `pid` catches (SigCgt of /proc/PID/status). */
static unsigned long long caught_signals(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  unsigned long long mask = 0;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "SigCgt:", 7)) mask = strtoull(line + 7, NULL, 16);
  if (f) fclose(f);
  return mask;
}

/* Waits up to `seconds` for `done(pid)`; returns it. */
static int wait_until(int (*done)(pid_t), pid_t pid, int seconds) {
  for (int k = 0; k < seconds * 1000; k++) {
    if (done(pid)) return 1;
    usleep(1000);
  }
  return done(pid);
}

/* Whether `pid` catches SIGINT and is blocked writing to a pipe. Where
 * the kernel hides wait channels ("0" or nothing), after it has caught
 * SIGINT for 3 s (its first text fills the pipe at once). */
static int catching_and_blocked(pid_t pid) {
  static pid_t since_pid;
  static time_t since;
  char path[64], wchan[128] = "";
  snprintf(path, sizeof path, "/proc/%d/wchan", (int)pid);
  FILE *f = fopen(path, "r");
  if (f) {
    if (!fgets(wchan, sizeof wchan, f)) wchan[0] = 0;
    fclose(f);
  }
  if (!(caught_signals(pid) & (1ull << (SIGINT - 1)))) return 0;
  if (strstr(wchan, "pipe_write")) return 1;
  if (wchan[0] && strcmp(wchan, "0")) return 0; /* known, and not blocked yet */
  if (since_pid != pid) {
    since_pid = pid;
    since = time(NULL);
  }
  return time(NULL) - since >= 3;
}

static int sigint_handled(pid_t pid) {
  return !(caught_signals(pid) & (1ull << (SIGINT - 1)));
}

/* A second SIGINT ends the process at once, even where the first cannot:
 * here its stdout is a full pipe that nobody reads, so after the first it
 * stops generating but stays blocked writing its text. It dies by
 * SIGINT, keeps the old --dump-logits file and leaves no temporary file. */
static void test_second_sigint(void) {
  const char *d = fresh_dir("sigint2");
  free(sh(0, "echo old > %s/dump", d));
  int p[2];
  CU_ASSERT_EQUAL_FATAL(pipe(p), 0);
  int size = fcntl(p[0], F_SETPIPE_SZ, 4096);
  CU_ASSERT_FATAL(size > 0);
  char *fill = calloc(1, (size_t)size);
  CU_ASSERT_EQUAL_FATAL(write(p[1], fill, (size_t)size), size); /* full before it starts */
  free(fill);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "cd %s && exec %s run " PY " --backend cpu --prompt 'def f(x):' "
           "-n 1000000 -q --dump-logits %s/dump 2>/dev/null", ssm_test_source_dir(), ssm_test_ssmc(), d);
  pid_t pid = fork();
  CU_ASSERT_FATAL(pid >= 0);
  if (!pid) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  int status = 0;
  CU_ASSERT(wait_until(catching_and_blocked, pid, 60));
  kill(pid, SIGINT);
  CU_ASSERT(wait_until(sigint_handled, pid, 10));
  usleep(200 * 1000);
  CU_ASSERT_EQUAL(waitpid(pid, &status, WNOHANG), 0); /* the first did not end it */
  kill(pid, SIGINT);
  int k = 0;
  while (waitpid(pid, &status, WNOHANG) == 0 && k++ < 10000) usleep(1000);
  if (k > 10000) { /* still there: fail, and end it */
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  CU_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT);
  close(p[0]);
  char *out = sh(0, "cat %s/dump && ls -A %s", d, d);
  CU_ASSERT_STRING_EQUAL(out, "old\ndump\n");
  free(out);
}

/* The rename that makes a written file visible is made durable too: right
 * after it, the directory that holds the file is synced (seen through
 * strace, where it is installed). */
static void test_rename_is_synced(void) {
  if (ssm_test_sh("command -v strace >/dev/null", NULL)) {
    fprintf(stderr, "\n  no strace: not checked");
    return;
  }
  const char *d = fresh_dir("dirsync");
  /* LeakSanitizer cannot run under ptrace; every other test checks leaks */
  char *out = sh(0, "ASAN_OPTIONS=\"${ASAN_OPTIONS:-}:detect_leaks=0\" "
                 "strace -o %s/trace -e trace=rename,openat,fsync $SSMC run " FIX " --backend cpu "
                 "--tokens 1,2 -n 1 -q --state-out %s/s.state >/dev/null && "
                 "grep -A2 '^rename(.*/s.state\")' %s/trace | sed 's/ *= .*//'", d, d, d);
  char want[1200];
  snprintf(want, sizeof want, "/s.state\")\nopenat(AT_FDCWD, \"%s\", O_RDONLY|O_CLOEXEC|O_DIRECTORY)\n"
           "fsync(", d);
  if (!strstr(out, want)) fprintf(stderr, "\n  '%s' lacks '%s'", out, want);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
  free(out);
}

/* Under a file-size limit (ulimit -f) a write that cannot finish is an
 * error naming the file, exit 1 (not death by SIGXFSZ), and the good file it
 * was to replace is untouched, with no temporary left beside it. */
static void test_file_size_limit(void) {
  const char *d = fresh_dir("fsize");
  free(sh(0, "$SSMC compile " FIX " -o %s/b.ssmb -q && cp %s/b.ssmb %s/b.keep && "
          "$SSMC run " PY " --backend cpu --tokens 1,2 -n 1 -q --state-out %s/s.state >/dev/null && "
          "cp %s/s.state %s/s.keep", d, d, d, d, d, d));
  char *out = sh(1, "ulimit -f 64 && $SSMC compile tests/data/jamba_tiny -o %s/b.ssmb -q", d);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "b.ssmb: cannot write (File too large)"));
  free(out);
  out = sh(1, "ulimit -f 64 && $SSMC run " PY " --backend cpu --tokens 3,4 -n 1 -q "
           "--state-out %s/s.state >/dev/null", d);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "s.state: cannot write (File too large)"));
  free(out);
  free(sh(0, "cmp %s/b.ssmb %s/b.keep && cmp %s/s.state %s/s.keep && "
          "test $(ls -A %s | wc -l) -eq 4", d, d, d, d, d));
}

int main(void) {
  CU_TestInfo tests[] = {{"mamba130m_shape", test_mamba130m_shape},
                         {"signals", test_signals},
                         {"second_sigint", test_second_sigint},
                         {"rename_is_synced", test_rename_is_synced},
                         {"special_files", test_special_files},
                         {"killed_while_writing", test_killed_while_writing},
                         {"export_killed_while_writing", test_export_killed_while_writing},
                         {"file_size_limit", test_file_size_limit},
                         {"option_forms", test_option_forms},
                         {"prompt_sources", test_prompt_sources},
                         {"interactive", test_interactive},
                         {"interactive_long_line", test_interactive_long_line},
                         {"stop", test_stop},
                         {"tokenize_pieces", test_tokenize_pieces},
                         {"cache", test_cache},
                         {"cache_special_files", test_cache_special_files},
                         {"serve_bundle_template", test_serve_bundle_template},
                         {"sigint_while_compiling", test_sigint_while_compiling},
                         {"bundle_weights", test_bundle_weights}, {"weights_file", test_weights_file},
                         {"generation_config", test_generation_config},
                         {"summary", test_summary},
                         {"progress", test_progress},
                         {"bench_reps", test_bench_reps},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("cli_run", tests);
}
