/*
 * test_cli.c — the ssmc command line's messages: bad flags and bad inputs
 * give a clear message on stderr and a non-zero exit, never a crash; every
 * command answers --help and --version; the IR it prints and dumps reads
 * back. Runs end to end, their files and signals are test_cli_run.c's.
 */
#include <cjson/cJSON.h>
#include <string.h>

#include "testutil.h"

/* Runs `ssmc ARGS`; asserts exit status `want_rc` and that the output
 * contains `needle`. */
static void expect(const char *args, int want_rc, const char *needle) {
  char cmd[2048], *out;
  snprintf(cmd, sizeof cmd, "cd %s && %s %s", ssm_test_source_dir(), ssm_test_ssmc(), args);
  int rc = ssm_test_sh(cmd, &out);
  if (rc != want_rc || !strstr(out, needle))
    fprintf(stderr, "\n  ssmc %s\n  -> exit %d (want %d), output:\n%s\n  (want '%s')\n", args, rc,
            want_rc, out, needle);
  CU_ASSERT_EQUAL(rc, want_rc);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, needle));
  free(out);
}

#define FIX "tests/data/mamba1_tiny"

static void test_usage(void) {
  expect("", 2, "usage:");
  expect("frobnicate", 2, "unknown command 'frobnicate'\n");
  expect("rn", 2, "unknown command 'rn' (did you mean 'run'?)");
  expect("complie " FIX, 2, "(did you mean 'compile'?)");
  expect("hlep", 2, "(did you mean 'help'?)");
  expect("help", 0, "usage: ssmc COMMAND");
  expect("help run", 0, "usage: ssmc run MODEL");
  expect("help serve", 0, "--host ADDR");
  expect("help nope", 2, "unknown command 'nope'");
  expect("help run serve", 2, "help takes one command");
  expect("serve", 2, "serve: expected one MODEL_DIR or BUNDLE\nTry 'ssmc serve --help'.");
  /* the address is checked before the model is looked at */
  expect("serve no/such/model --host ''", 2, "--host: '' is not an address, nor a name");
  expect("version", 0, "ssmc ");
  expect("version 2", 2, "version takes no arguments");
  expect("run " FIX " --weights " FIX " --tokens 1,2 --bogus", 2, "unknown option '--bogus'");
  expect("run models/mamba1.yaml --config " FIX "/config.json --tokens 1,2", 1,
         "models/mamba1.yaml: no weights: give the checkpoint directory (--weights DIR)");
  expect("run " FIX " --weights " FIX, 2, "give --tokens IDS or --prompt TEXT");
  expect("run " FIX " --weights " FIX " --tokens 1 --prompt hi", 2, "give --tokens IDS or --prompt TEXT");
  expect("run " FIX " --prompt hi --prompt-file x", 2, "give --tokens IDS or --prompt TEXT");
  expect("run " FIX " -i --tokens 1", 2, "run: -i takes text turns from standard input");
  expect("run " FIX " -i --prompt -", 2, "so the prompt cannot come from there too");
  expect("run " FIX " --weights " FIX " --tokens 1,2 -n", 2, "run: option '-n' needs a value");
  expect("run " FIX " --tokens", 2, "run: option '--tokens' needs a value");
  expect("run " FIX " --tokens 1 --json=yes", 2, "run: option '--json' takes no value");
  expect("run " FIX " --tokens 1 -x", 2, "run: unknown option '-x'");
  expect("run " FIX " --tokens 1 --bogus", 2, "Try 'ssmc run --help'.");
  expect("compile " FIX " --bogus=1", 2, "compile: unknown option '--bogus=1'");
  expect("run " FIX " extra --tokens 1", 2, "run: a prompt after MODEL ('extra') and --tokens: give one");
  expect("run " FIX " extra --prompt-file x", 2, "and --prompt-file: give one");
  expect("run " FIX " one two", 2, "run: unexpected argument 'two'");
  expect("run " FIX " --temprature 1 x", 2, "unknown option '--temprature' (did you mean '--temperature'?)");
  expect("run " FIX " --tokenz=1", 2, "unknown option '--tokenz=1' (did you mean '--tokens'?)");
  expect("run " FIX " --zzzzzz 1", 2, "unknown option '--zzzzzz'\n");
  /* the prompt as the second argument, and -p, are --prompt */
  expect("run models/pymamba 'def f(x):' -n 6 --backend cpu -q", 0, "def f(x):\n    \"\"\"Return a list");
  expect("run models/pymamba -p 'def f(x):' -n 6 --backend cpu -q", 0, "def f(x):\n    \"\"\"Return a list");
  expect("bench " FIX " --reps 0", 2, "--reps: expected a count from 1 to 1000, got '0'");
  expect("run " FIX " --weights " FIX " --tokens 1,2 -n -3", 2, "-n: expected a token count");
  expect("run " FIX " --weights " FIX " --tokens 1,2 --chunk 0", 2, "--chunk");
  expect("ir", 2, "missing MODEL");
  expect("compile " FIX " -o x.ssmb --chunk 0", 2, "--chunk: expected a token count from 1 to 4096, got '0'");
  expect("run " FIX " --weights " FIX " --tokens 1 --chunk 99999", 2, "--chunk: expected a token count");
  expect("run " FIX " --weights " FIX " --tokens 1 --device -1", 2, "--device: expected a device index");
  expect("run " FIX " --weights " FIX " --tokens 1 --backend tpu", 2, "--backend: expected auto, cpu or vulkan, got 'tpu'");
  expect("compile " FIX " -o x.ssmb --dtype i32", 2, "--dtype: expected f32, f16, bf16, q8_0 or q4_0, got 'i32'");
  expect("ir " FIX " --seq 0", 2, "--seq: expected a token count from 1 to 1048576, got '0'");
  expect("ir " FIX " --batch 0", 2, "--batch: expected a sequence count from 1 to 256, got '0'");
  expect("ir " FIX " --batch 2 --seq 3", 2, "--batch and --seq: a batched graph takes one token a sequence");
  expect("ir " FIX " --batch 2", 0, "scan %");
  expect("ir tests/data/jamba_tiny --batch 2", 0, "= attention %");
  expect("ir tests/data/qwen3_next_tiny --batch 2", 0, "= delta_rule %");
  expect("compile " FIX " -o x.ssmb --slots 257", 2, "--slots: expected a sequence count from 1 to 256");
  expect("bench " FIX " --batch 2 -n 8 -q", 0, "batched decode: 2 sequences");
  expect("ir " FIX " --after fusee", 2, "--after: unknown pass 'fusee' (passes: verify, infer");
  expect("inspect", 2, "inspect: missing BUNDLE");
  expect("devices extra", 2, "devices: unexpected argument 'extra'");
  expect("bench " FIX " --backend cpu", 2, "bench: --backend cpu: bench times the Vulkan runtime");
  expect("perplexity " FIX, 2, "perplexity: give --file TEXT (or --tokens IDS)");
  expect("perplexity " FIX " --file x --tokens 1,2", 2, "perplexity: give --file TEXT");
  expect("perplexity " FIX " --tokens 1,2 --dtype q4", 2, "--dtype: expected f32, f16, bf16, q8_0 or q4_0, got 'q4'");
  expect("perplexity " FIX " --backend cpu --tokens 7", 1, "the text is 1 token long; it needs at least 2");
  expect("perplexity " FIX " --backend cpu --tokens 7,99999", 1, "99999");
  expect("perplexity " FIX " --backend cpu --file x.txt", 1, "--file needs a tokenizer");
  expect("perplexity models/pymamba --backend cpu --file /nonexistent/t.txt", 1, "/nonexistent/t.txt");
}

/* Runs `ssmc ARGS` (in the source directory, as `expect`) with an empty
 * compile cache and an empty kernel cache; asserts exit status 1, that
 * the output names `needle`, and that the model was not compiled: both
 * caches are still empty. */
static void expect_before_compile(const char *args, const char *needle) {
  static int n;
  char dir[600], cmd[4096], *out;
  snprintf(dir, sizeof dir, "%s/early%d", ssm_test_tmpdir(), n++);
  snprintf(cmd, sizeof cmd, "mkdir -p %s/xdg %s/kernels && cd %s && XDG_CACHE_HOME=%s/xdg "
           "SSMC_KERNEL_CACHE=%s/kernels %s %s </dev/null", dir, dir, ssm_test_source_dir(), dir,
           dir, ssm_test_ssmc(), args);
  int rc = ssm_test_sh(cmd, &out);
  if (rc != 1 || !strstr(out, needle))
    fprintf(stderr, "\n  ssmc %s\n  -> exit %d (want 1), output:\n%s\n  (want '%s')\n", args, rc,
            out, needle);
  CU_ASSERT_EQUAL(rc, 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, needle));
  free(out);
  snprintf(cmd, sizeof cmd, "ls -A %s/xdg %s/kernels | grep -v '^$\\|:$'", dir, dir);
  ssm_test_sh(cmd, &out);
  if (*out) fprintf(stderr, "\n  ssmc %s\n  compiled before its error: %s\n", args, out);
  CU_ASSERT_STRING_EQUAL(out, "");
  free(out);
}

/* What a command reads besides the model (the tokenizer for text, the
 * prompt file, the state of --state-in, the chat template of -i) and
 * where it writes (--state-out, --dump-logits, compile's -o) are checked
 * before the model is compiled, on Vulkan as on the CPU: the message
 * names the file, and nothing was compiled. */
static void test_inputs_before_compile(void) {
  static const char *const backends[] = {"vulkan", "auto"};
  for (int b = 0; b < 2; b++) {
    char args[1024];
    snprintf(args, sizeof args, "run " FIX " --backend %s --prompt hi -n 2", backends[b]);
    expect_before_compile(args, "--prompt needs a tokenizer (--tokenizer FILE, or tokenizer.json "
                          "in the weights directory): no tokenizer: " FIX "/tokenizer.json does "
                          "not exist");
  }
  expect_before_compile("run " FIX " --backend vulkan 'hi' -n 2", FIX "/tokenizer.json does not exist");
  expect_before_compile("run " FIX " --backend vulkan -i", "-i needs a tokenizer");
  expect_before_compile("run " FIX " --backend vulkan -i", FIX "/tokenizer.json does not exist");
  expect_before_compile("run " FIX " --backend vulkan --prompt-file x.txt",
                        FIX "/tokenizer.json does not exist");
  expect_before_compile("run " FIX " --backend vulkan --prompt hi --tokenizer /nonexistent/t.json",
                        "/nonexistent/t.json");
  expect_before_compile("run " FIX " --backend vulkan --prompt hi --tokenizer tests/data/ir",
                        "tests/data/ir/tokenizer.json");
  expect_before_compile("perplexity " FIX " --backend vulkan --file x.txt",
                        "--file needs a tokenizer");
  expect_before_compile("perplexity models/pymamba --backend vulkan --file /nonexistent/t.txt",
                        "--file: /nonexistent/t.txt");
  expect_before_compile("serve " FIX " --backend vulkan --port 0",
                        "ssmc serve needs the model's tokenizer: no tokenizer: " FIX
                        "/tokenizer.json does not exist");
  expect_before_compile("serve models/pymamba --backend vulkan --port 0 --chat-template "
                        "/nonexistent/t.jinja", "/nonexistent/t.jinja");
  expect_before_compile("run models/pymamba --backend vulkan --prompt-file /nonexistent/p.txt",
                        "--prompt-file: /nonexistent/p.txt");
  expect_before_compile("run models/pymamba --backend vulkan --prompt hi --state-in "
                        "/nonexistent/s.state", "--state-in: /nonexistent/s.state");
  expect_before_compile("run models/pymamba --backend vulkan --prompt hi --state-in tests/data",
                        "--state-in: tests/data");
  expect_before_compile("run models/pymamba --backend vulkan -i --chat-template "
                        "/nonexistent/t.jinja", "/nonexistent/t.jinja");
  expect_before_compile("run " FIX " --backend vulkan --tokens 1 --state-in /nonexistent/s.state",
                        "--state-in: /nonexistent/s.state");
  expect_before_compile("run " FIX " --backend vulkan --prompt hi --tokenizer " FIX "/config.json",
                        FIX "/config.json: model: missing or not an object");
  expect_before_compile("run " FIX " --backend vulkan --tokens 1 --state-out /nonexistent/s.state",
                        "--state-out: /nonexistent/s.state: cannot write");
  expect_before_compile("run " FIX " --backend vulkan --tokens 1 --state-out tests/data",
                        "--state-out tests/data: is a directory");
  expect_before_compile("run " FIX " --backend vulkan --tokens 1 --dump-logits tests/data",
                        "--dump-logits tests/data: is a directory");
  expect_before_compile("compile " FIX " -o /nonexistent/m.ssmb", "-o: /nonexistent/m.ssmb: "
                        "cannot write");
  expect_before_compile("compile " FIX " -o tests/data", "-o tests/data: is a directory");
}

/* Every command answers --help (and -h, also after other arguments) with
 * its own usage on stdout and exit 0; ssmc --help lists the commands. */
static void test_help(void) {
  static const char *const cmds[] = {"run", "compile", "bench", "inspect", "ir", "tokenize",
                                     "devices", "perplexity"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    for (int form = 0; form < 3; form++) {
      char cmd[1024], want[64], *out;
      static const char *const forms[] = {"--help", "-h", FIX " --help"};
      snprintf(cmd, sizeof cmd, "cd %s && %s %s %s 2>/dev/null", ssm_test_source_dir(),
               ssm_test_ssmc(), cmds[i], forms[form]);
      snprintf(want, sizeof want, "usage: ssmc %s", cmds[i]);
      int rc = ssm_test_sh(cmd, &out);
      size_t k = strlen(want);
      int ok = !rc && !strncmp(out, want, k) && (out[k] == ' ' || out[k] == '\n') && strlen(out) > 60;
      if (!ok) fprintf(stderr, "\n  %s -> %d: %s\n", cmd, rc, out);
      CU_ASSERT(ok);
      free(out);
    }
  char cmd[1024], *out;
  snprintf(cmd, sizeof cmd, "%s --help 2>/dev/null", ssm_test_ssmc());
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &out), 0);
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    char line[64];
    snprintf(line, sizeof line, "\n  %s ", cmds[i]);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, line));
  }
  free(out);
}

/* ssmc --version: "ssmc VERSION (git REVISION)", the revision baked in by
 * the build (a git describe, or "unknown" outside a checkout). */
static void test_version(void) {
  char cmd[1024], want[256], *out;
  snprintf(cmd, sizeof cmd, "%s --version", ssm_test_ssmc());
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &out), 0);
  snprintf(want, sizeof want, "ssmc %s (git %s)\n", SSM_VERSION, ssm_revision());
  CU_ASSERT_STRING_EQUAL(out, want);
  CU_ASSERT(strlen(ssm_revision()) >= 7 && !strpbrk(ssm_revision(), " \n\""));
  free(out);
  /* in a git checkout, the revision is that of HEAD (with -dirty when changed) */
  snprintf(cmd, sizeof cmd, "git -C %s rev-parse --short=12 HEAD 2>/dev/null", ssm_test_source_dir());
  if (!ssm_test_sh(cmd, &out) && strlen(out) > 7) {
    out[strlen(out) - 1] = 0;
    if (!strstr(ssm_revision(), out))
      fprintf(stderr, "\n  revision %s is not HEAD %s (configured before a commit?)", ssm_revision(), out);
  }
  free(out);
}

/* --device N past the last device: the error lists the devices there are. */
static void test_bad_device(void) {
  char *list = NULL, cmd[1024], path[512];
  snprintf(cmd, sizeof cmd, "%s devices", ssm_test_ssmc());
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, &list), 0);
  snprintf(path, sizeof path, "%s/tiny.ssmb", ssm_test_tmpdir());
  snprintf(cmd, sizeof cmd, "cd %s && %s compile " FIX " -o %s", ssm_test_source_dir(),
           ssm_test_ssmc(), path);
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, NULL), 0);
  /* the first device's name, as `ssmc devices` shows it ("* 0: NAME") */
  const char *q = strstr(list, " 0: ");
  const char *e = q ? strchr(q, '\n') : NULL;
  CU_ASSERT_PTR_NOT_NULL_FATAL(e);
  char want[400], args[1024];
  snprintf(want, sizeof want, "device index 99 out of range: %s found: 0 '%.*s'",
           strstr(list, "Vulkan devices: 1\n") ? "1 Vulkan device" : "", (int)(e - q - 4), q + 4);
  snprintf(args, sizeof args, "run %s --weights " FIX " --tokens 1 -n 1 --device 99", path);
  expect(args, 1, strstr(list, "Vulkan devices: 1\n") ? want : strstr(want, " found: 0 '"));
  expect(args, 1, "(see 'ssmc devices')");
  free(list);
}

static void test_bad_tokens(void) {
  expect("run " FIX " --weights " FIX " --tokens 1,,2", 1, "bad at character 3");
  expect("run " FIX " --weights " FIX " --tokens abc", 1, "--tokens: expected comma-separated");
  expect("run " FIX " --weights " FIX " --tokens 1,99999 -n 1", 1,
         "token id 99999 out of range [0, 1000)");
  expect("run " FIX " --tokens 1 -n 1 --eos 1000", 1,
         "eos: token id 1000 is outside the vocabulary of 1000 ids (0 to 999)");
  expect("run " FIX " --tokens 1 -n 1 --eos 999 -q", 0, "");
}

/* What a bundle fixed when it was compiled is refused with it, and a
 * bundle whose magic is damaged is called that, not a description. */
static void test_bundle_options(void) {
  char b[512], args[2048];
  snprintf(b, sizeof b, "%s/opts.ssmb", ssm_test_tmpdir());
  snprintf(args, sizeof args, "compile " FIX " -o %s -q", b);
  expect(args, 0, "");
  snprintf(args, sizeof args, "run %s --tokens 1 -n 1 --chunk 4", b);
  expect(args, 2, "--chunk is fixed when a bundle is compiled");
  snprintf(args, sizeof args, "run %s --tokens 1 -n 1 --config " FIX "/config.json", b);
  expect(args, 2, "--config: a bundle keeps the config it was compiled with");
  snprintf(args, sizeof args, "bench %s --chunk 4", b);
  expect(args, 2, "--chunk is fixed when a bundle is compiled");
  snprintf(args, sizeof args, "cd %s && cp opts.ssmb bad.ssmb && printf X | dd of=bad.ssmb "
           "conv=notrunc 2>/dev/null && cp bad.ssmb bad.bin", ssm_test_tmpdir());
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(args, NULL), 0);
  snprintf(args, sizeof args, "run %s/bad.ssmb --tokens 1 -n 1", ssm_test_tmpdir());
  expect(args, 1, "bad.ssmb: not a bundle (its first bytes are not \"SSMB\"), nor a model "
         "description or IR text: a damaged bundle?");
  snprintf(args, sizeof args, "run %s/bad.bin --tokens 1 -n 1", ssm_test_tmpdir());
  expect(args, 1, "bad.bin: not a bundle");
  snprintf(args, sizeof args, "run %s/bad.bin --config " FIX "/config.json --tokens 1 -n 1",
           ssm_test_tmpdir());
  expect(args, 1, "a damaged bundle?");
  /* a whole bundle where a description is read */
  snprintf(args, sizeof args, "compile %s -o %s/again.ssmb", b, ssm_test_tmpdir());
  expect(args, 1, "opts.ssmb: a compiled bundle, not a model description");
  snprintf(args, sizeof args, "compile %s/bad.bin -o %s/again.ssmb", ssm_test_tmpdir(), ssm_test_tmpdir());
  expect(args, 1, "bad.bin: not a bundle (its first bytes are not \"SSMB\")");
}

static void test_bad_paths(void) {
  expect("run " FIX " --weights /nonexistent/w --tokens 1 -n 1", 1, "/nonexistent/w");
  expect("run /nonexistent/m --weights " FIX " --tokens 1 -n 1", 1, "/nonexistent/m");
  expect("run models/mamba1.yaml --weights " FIX " --tokens 1 -n 1", 1, "config");
  expect("ir /nonexistent/x.ssmir", 1, "/nonexistent/x.ssmir");
  /* weights of another model: a shape mismatch names the tensor */
  expect("run " FIX " --weights tests/data/mamba1_untied --tokens 1 -n 1", 1, "backbone.");
}

#define JAMBA "tests/data/jamba_tiny"

/* A KV cache holds --max-seq positions: going past it is a clear error from
 * both runtimes, checked before the run. */
static void test_max_seq(void) {
  /* 3 prompt tokens and 6 fed back: positions 0..8, one past 8 */
  expect("run " JAMBA " --weights " JAMBA " --tokens 1,2,3 -n 7 --max-seq 8 --backend cpu", 1,
         "position 8 is past --max-seq 8");
  expect("run " JAMBA " --weights " JAMBA " --tokens 1,2,3 -n 6 --max-seq 8 --backend cpu", 0, "");
  expect("run " JAMBA " --weights " JAMBA " --tokens 1,2,3 -n 7 --max-seq 8 --chunk 4", 1,
         "position 8 is past --max-seq 8");
  /* a prefill chunk that would cross the end is refused as a whole */
  expect("run " JAMBA " --weights " JAMBA " --tokens 1,2,3,4,5,6,7,8,9 -n 1 --max-seq 6 --chunk 4"
         " --backend cpu", 1, "position 6 is past --max-seq 6");
  char bundle[512], args[2048];
  snprintf(bundle, sizeof bundle, "%s/jamba_ms8.ssmb", ssm_test_tmpdir());
  snprintf(args, sizeof args, "compile " JAMBA " -o %s --chunk 4 --max-seq 8", bundle);
  expect(args, 0, "");
  snprintf(args, sizeof args, "run %s --weights " JAMBA " --tokens 1,2,3,4,5 -n 5", bundle);
  expect(args, 1, "position 8 is past --max-seq 8");
  snprintf(args, sizeof args, "run %s --weights " JAMBA " --tokens 1,2,3,4,5 -n 4", bundle);
  expect(args, 0, "");
  snprintf(args, sizeof args, "run %s --weights " JAMBA " --tokens 1 --max-seq 4", bundle);
  expect(args, 2, "--max-seq is fixed when a bundle is compiled");
  expect("run " JAMBA " --weights " JAMBA " --tokens 1 --max-seq 0", 2, "--max-seq: expected");
  expect("compile " JAMBA " -o /dev/null --max-seq x", 2, "--max-seq: expected");
}

/* Files of the wrong kind or with bad bytes, one per input class. */
static void test_bad_files(void) {
  char args[1024];
  const char *nul = ssm_test_write("nul.ssmir", "graph g {\0}\n", 12);
  snprintf(args, sizeof args, "ir %s", nul);
  expect(args, 1, "nul.ssmir: file contains a NUL byte");
  const char *junk = ssm_test_write("junk.yaml", "\x01\x02ssmc: 1\n", 10);
  snprintf(args, sizeof args, "ir %s --config " FIX "/config.json", junk);
  expect(args, 1, "junk.yaml:1:1: control characters are not allowed");
  snprintf(args, sizeof args, "inspect %s", junk);
  expect(args, 1, "junk.yaml: not an ssmc bundle");
  snprintf(args, sizeof args, "run " FIX " --weights %s --tokens 1 -n 1 --backend cpu", ssm_test_tmpdir());
  expect(args, 1, "no model.safetensors or model.safetensors.index.json");
  snprintf(args, sizeof args, "run " FIX " --weights %s --tokens 1 -n 1 --backend cpu", junk);
  expect(args, 1, "junk.yaml: header length 2322277879602414081 is absurd");
  expect("run " FIX "/golden.json --weights " FIX " --tokens 1 -n 1 --backend cpu", 1,
         "needs a config.json (--config)");
}

/* `ssmc ir FIX ARGS` printed, parsed back and printed again: the same
 * text, returned (malloc'd). */
static char *ir_roundtrip(const char *args) {
  char cmd[2048], *a, *b;
  const char *ir = ssm_test_write("m.ssmir", "", 0);
  snprintf(cmd, sizeof cmd, "cd %s && %s ir " FIX "%s > %s", ssm_test_source_dir(), ssm_test_ssmc(),
           args, ir);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, NULL), 0);
  snprintf(cmd, sizeof cmd, "cat %s", ir);
  ssm_test_sh(cmd, &a);
  snprintf(cmd, sizeof cmd, "%s ir %s", ssm_test_ssmc(), ir);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &b), 0);
  CU_ASSERT_STRING_EQUAL(a, b);
  free(b);
  return a;
}

static void test_ir_roundtrip_cli(void) {
  char *a = ir_roundtrip("");
  CU_ASSERT(strlen(a) > 100);
  CU_ASSERT_PTR_NOT_NULL(strstr(a, "scan"));
  free(a);
  /* the batched graph too: states with a slot dim, batch=1 ops */
  a = ir_roundtrip(" --batch 3");
  CU_ASSERT_PTR_NOT_NULL(strstr(a, "graph batch {"));
  CU_ASSERT_PTR_NOT_NULL(strstr(a, "scan %"));
  CU_ASSERT_PTR_NOT_NULL(strstr(a, " batch=1"));
  CU_ASSERT_PTR_NOT_NULL(strstr(a, "name=\"slots.l0.ssm_state\""));
  free(a);
}

/* compile --dump-ir writes one file per pass and program; each parses back
 * and prints identically (after its "# after PASS: note" header line). */
static void test_dump_ir(void) {
  static const char *const passes[] = {"verify", "infer",        "simplify", "weights",
                                        "fuse",   "plan_buffers", "schedule"};
  char cmd[4096], *out;
  const char *dir = ssm_test_tmpdir();
  snprintf(cmd, sizeof cmd, "cd %s && %s compile " FIX " -o %s/d.ssmb --dump-ir %s",
           ssm_test_source_dir(), ssm_test_ssmc(), dir, dir);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, NULL), 0);
  for (int prog = 0; prog < 2; prog++)
    for (int i = 0; i < 7; i++) {
      snprintf(cmd, sizeof cmd, "f=%s/%s.%02d-%s.ssmir; head -1 $f | grep -q '^# after %s: ' && "
               "tail -n +2 $f > $f.body && %s ir $f | cmp - $f.body && echo SAME", dir,
               prog ? "prefill" : "decode", i, passes[i], passes[i], ssm_test_ssmc());
      int rc = ssm_test_sh(cmd, &out);
      if (rc || !strstr(out, "SAME")) fprintf(stderr, "\n  %s -> %d: %s\n", cmd, rc, out);
      CU_ASSERT_PTR_NOT_NULL(strstr(out, "SAME"));
      free(out);
    }
  snprintf(cmd, sizeof cmd, "cd %s && %s compile " FIX " -o %s/d.ssmb --dump-ir /nonexistent/dir",
           ssm_test_source_dir(), ssm_test_ssmc(), dir);
  CU_ASSERT_NOT_EQUAL(ssm_test_sh(cmd, &out), 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "--dump-ir: /nonexistent/dir/"));
  free(out);
}

/* A config value ssmc cannot honour is refused, not ignored: an empty
 * Mamba-2 time_step_limit (read through a list index; transformers 5 writes
 * the default's infinity as {"__float__": "Infinity"}), with the key and its
 * values in the message. */
static void test_refuses_unsupported_config(void) {
  char *cfg, args[1024];
  size_t n;
  SSM_ASSERT_OK(ssm_file_read(ssm_test_path("tests/data/mamba2_tiny/config.json"), 0, &cfg, &n));
  char *at = strstr(cfg, "\"time_step_limit\"");
  CU_ASSERT_PTR_NOT_NULL_FATAL(at);
  char *end = strchr(at, ']');
  CU_ASSERT_PTR_NOT_NULL_FATAL(end);
  char edited[65536];
  snprintf(edited, sizeof edited, "%.*s\"time_step_limit\": [0.5, 0.1%s", (int)(at - cfg), cfg, end);
  const char *p = ssm_test_write("m2limit.json", edited, strlen(edited));
  snprintf(args, sizeof args, "compile models/mamba2.yaml --config %s -o %s/x.ssmb", p,
           ssm_test_tmpdir());
  expect(args, 1, "time_step_limit [0.5, 0.1] is empty");
  free(cfg);
  expect("compile tests/data/mamba2_tiny -o /dev/null", 0, "");
}

/* Sampler settings out of range, or combined with --greedy, are usage
 * errors (exit 2). */
static void test_bad_settings(void) {
  static const char *const bad[] = {"--temperature -1", "--temperature x", "--top-k -3",
                                    "--top-p 0",        "--top-p 1.5",     "--seed -1",
                                    "--seed 16777216",  "--min-p -0.1",    "--min-p 1.5",
                                    "--repeat-penalty 0", "--repeat-penalty nan",
                                    "--greedy --temperature 0.5", "--greedy --min-p 0.1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char args[512];
    snprintf(args, sizeof args, "run " FIX " --weights " FIX " --tokens 1 -n 2 %s", bad[i]);
    expect(args, 2, i >= 11 ? "cannot be combined" : bad[i][2] == 't' && bad[i][4] == 'e'
                                                       ? "--temperature: expected"
                                                       : "expected");
  }
}

/* An output that would overwrite one of the command's inputs is refused,
 * and the input is untouched; stdin larger than the bound is refused. */
static void test_outputs_are_not_inputs(void) {
  char dir[512], cmd[4096], *out;
  snprintf(dir, sizeof dir, "%s/io", ssm_test_tmpdir());
  snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/" FIX "/config.json %s/" FIX
           "/model.safetensors models/mamba1.yaml %s/ && cd %s && %s compile %s -o %s/m.ssmb",
           dir, ssm_test_source_dir(), ssm_test_source_dir(), dir, ssm_test_source_dir(),
           ssm_test_ssmc(), dir, dir);
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, NULL), 0);
  /* a state, a prompt file and a tokenizer to name as inputs, and copies */
  snprintf(cmd, sizeof cmd, "cd %s && %s run . --backend cpu --tokens 1,2 -n 1 -q --state-out "
           "s.state > /dev/null && printf hi > p.txt && cp %s/models/pymamba/tokenizer.json t.json "
           "&& mkdir -p keep && cp s.state p.txt t.json keep/", dir, ssm_test_ssmc(),
           ssm_test_source_dir());
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, NULL), 0);
  /* a quantized bundle elsewhere, with its weights file beside it */
  snprintf(cmd, sizeof cmd, "cd %s && mkdir -p q && %s compile . --dtype q8_0 -o q/q.ssmb -q && "
           "cp q/q.q8_0.safetensors keep/", dir, ssm_test_ssmc());
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, NULL), 0);
  struct { const char *args, *want; } cases[] = {
      {"compile %s/mamba1.yaml --config %s/config.json -o %s/mamba1.yaml", "-o "},
      {"compile %s -o %s/config.json%.0s", "a file of the weights directory"},
      {"run %s --weights %s --tokens 1 -n 2 --dump-logits %s/model.safetensors", "--dump-logits "},
      {"run %s/m.ssmb --weights %s --tokens 1 -n 2 --state-out %s/m.ssmb", "--state-out "},
      /* inputs after an option not given (here --config) are checked too */
      {"run %s --backend cpu --tokens 1 -n 2 --state-in %s/s.state --dump-logits %s/s.state",
       "--dump-logits "},
      {"run %s --backend cpu --tokens 1 -n 2 --state-in %s/s.state --state-out %s/s.state",
       "--state-out "},
      {"run %s --backend cpu --prompt-file %s/p.txt -n 2 --state-out %s/p.txt", "--state-out "},
      {"run %s --backend cpu --tokenizer %s/t.json --prompt hi -n 2 --dump-logits %s/t.json",
       "--dump-logits "},
      /* a bundle's inputs: the weights directory it records, the weights file beside it */
      {"run %s/m.ssmb --tokens 1 -n 2 --dump-logits %s/model.safetensors%.0s",
       "a file of the weights directory"},
      {"run %s/m.ssmb --tokens 1 -n 2 --state-out %s/config.json%.0s",
       "a file of the weights directory"},
      {"run %s/m.ssmb --weights %s --tokens 1 -n 2 --state-out %s/config.json", "--state-out "},
      {"run %s/q/q.ssmb --tokens 1 -n 2 --dump-logits %s/q/q.q8_0.safetensors%.0s",
       "--dump-logits "},
      {"run %s/q/q.ssmb --tokens 1 -n 2 --state-out %s/q/q.q8_0.safetensors%.0s",
       "--state-out "},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char args[2048];
    snprintf(args, sizeof args, cases[i].args, dir, dir, dir);
    expect(args, 1, "an input of this command");
    expect(args, 1, cases[i].want);
  }
  snprintf(cmd, sizeof cmd, "cmp %s/mamba1.yaml %s/models/mamba1.yaml && cmp %s/config.json "
           "%s/" FIX "/config.json && cmp %s/model.safetensors %s/" FIX "/model.safetensors && "
           "%s inspect %s/m.ssmb > /dev/null", dir, ssm_test_source_dir(), dir,
           ssm_test_source_dir(), dir, ssm_test_source_dir(), ssm_test_ssmc(), dir);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, NULL), 0); /* every input as it was */
  snprintf(cmd, sizeof cmd, "cd %s && cmp s.state keep/s.state && cmp p.txt keep/p.txt && "
           "cmp t.json keep/t.json && cmp q/q.q8_0.safetensors keep/q.q8_0.safetensors", dir);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, NULL), 0);
  snprintf(cmd, sizeof cmd, "head -c 70000000 /dev/zero | %s tokenize --tokenizer "
           "%s/models/pymamba -", ssm_test_ssmc(), ssm_test_source_dir());
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &out), 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "tokenize -: standard input is larger than 64 MiB"));
  free(out);
}

/* bench --profile --json: one JSON object with each program's dispatches
 * (as many as inspect counts) and its totals per family. */
/* compile says which weights q8_0 keeps in bf16, and why (unless -q);
 * q4_0 keeps the vocabulary's in q8_0, and a router its architecture marks
 * `quantize: false` in bf16. */
static void test_weights_note(void) {
  char args[1024];
  snprintf(args, sizeof args, "compile %s/tests/data/jamba_moe -o %s/q4.ssmb --dtype q4_0",
           ssm_test_source_dir(), ssm_test_tmpdir());
  expect(args, 0, "weights: 25 weights stored as q4_0 (0.3 MB fewer to read); 2 of the vocabulary "
         "in q8_0; 5 kept in bf16: model.layers.0.mamba.dt_proj.weight (rows not a multiple of "
         "8), model.layers.1.feed_forward.router.weight (quantize: false)");
  snprintf(args, sizeof args, "compile " FIX " -o %s/q8.ssmb --dtype q8_0", ssm_test_tmpdir());
  expect(args, 0, "weights: 7 weights stored as q8_0");
  expect(args, 0, "kept in bf16: backbone.layers.0.mixer.dt_proj.weight (rows not a multiple of 8)");
  char cmd[2048], *out;
  snprintf(cmd, sizeof cmd, "cd %s && %s %s -q", ssm_test_source_dir(), ssm_test_ssmc(), args);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &out), 0);
  CU_ASSERT_PTR_NULL(strstr(out, "weights:"));
  free(out);
}

static void test_bench_profile(void) {
  char cmd[2048], *out;
  snprintf(cmd, sizeof cmd, "cd %s && %s compile " FIX " -o %s/p.ssmb --chunk 4 && %s bench "
           "%s/p.ssmb --weights " FIX " -n 8 --profile --json", ssm_test_source_dir(),
           ssm_test_ssmc(), ssm_test_tmpdir(), ssm_test_ssmc(), ssm_test_tmpdir());
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, &out), 0);
  cJSON *j = cJSON_Parse(out);
  if (!j) fprintf(stderr, "\n  not JSON: %s\n", out);
  CU_ASSERT_PTR_NOT_NULL_FATAL(j);
  for (int p = 0; p < 2; p++) {
    const cJSON *prog = cJSON_GetObjectItem(j, p ? "prefill" : "decode");
    CU_ASSERT(cJSON_GetArraySize(cJSON_GetObjectItem(prog, "steps")) > 5);
    CU_ASSERT_EQUAL(cJSON_GetArraySize(cJSON_GetObjectItem(prog, "steps")),
                    cJSON_GetObjectItem(prog, "dispatches")->valueint);
    CU_ASSERT(cJSON_GetArraySize(cJSON_GetObjectItem(prog, "families")) >= 3);
    CU_ASSERT(cJSON_GetObjectItem(prog, "us")->valuedouble > 0);
  }
  CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItem(j, "device"));
  cJSON_Delete(j);
  free(out);
  expect("bench " FIX " --backend cpu --profile", 2, "bench times the Vulkan runtime");
}

int main(void) {
  CU_TestInfo tests[] = {{"usage", test_usage},
                         {"bad_tokens", test_bad_tokens},
                         {"bad_device", test_bad_device},
                         {"bad_paths", test_bad_paths},
                         {"inputs_before_compile", test_inputs_before_compile},
                         {"bundle_options", test_bundle_options},
                         {"max_seq", test_max_seq},
                         {"bad_files", test_bad_files},
                         {"ir_roundtrip_cli", test_ir_roundtrip_cli},
                         {"dump_ir", test_dump_ir},
                         {"refuses_unsupported_config", test_refuses_unsupported_config},
                         {"bad_settings", test_bad_settings},
                         {"outputs_are_not_inputs", test_outputs_are_not_inputs},
                         {"bench_profile", test_bench_profile},
                         {"weights_note", test_weights_note},
                         {"help", test_help},
                         {"version", test_version},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("cli", tests);
}
