/*
 * cli.c — the ssmc command line: main, which picks the command, and the
 * commands that use the compiler's layers (frontend, passes, bundle):
 * `compile`, `ir`, `inspect`; `devices`. Running models (run.c) and
 * tokenizing (tokenize.c) go through the public library
 * (runtime/ssmc.h). The command line is the only place that prints to the
 * user or exits.
 *
 * Options are read with getopt_long from one table per command (opts.c);
 * every command answers --help with its usage (usage.c) on stdout.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/export.h"
#include "compile/compile.h"
#include "passes/passes.h"
#include "runtime/internal.h"
#include "runtime/ssmc.h"
#include "runtime/weights/weights.h"

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

ssm_status ssm_cli_parse_ids(const char *what, const char *s, int32_t **out, size_t *out_n) {
  *out = malloc(sizeof(int32_t) * (strlen(s) / 2 + 1));
  *out_n = 0;
  for (const char *p = s;; p++) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
      free(*out);
      *out = NULL;
      return ssm_status_new(SSM_ERR_INVALID, "%s: expected comma-separated token ids, got '%s' "
                            "(bad at character %d)", what, s, (int)(p - s) + 1);
    }
    (*out)[(*out_n)++] = (int32_t)v;
    if (!*(p = end)) return NULL;
  }
}

/* ---- ssmc ir -------------------------------------------------------------------- */

/* Prints the graph after a pass under "# after PASS: NOTE" (a comment, so
 * each section parses back as IR). */
static void print_after(const char *pass, ssm_graph *g, const char *note, void *user) {
  const char *only = user; /* NULL: every pass */
  if (only && strcmp(only, pass)) return;
  char *text;
  ssm_status s = ssm_graph_print(g, &text);
  if (s) exit(ssm_cli_fail(s)); /* a callback cannot return it */
  printf("# after %s: %s\n%s", pass, note, text);
  free(text);
}

static ssm_status load_model(const char *model, const char *config, long max_seq,
                             ssm_model **out) {
  SSM_TRY(ssm_model_open(model, config, out));
  ssm_status s = max_seq ? ssm_model_set_param(*out, "max_seq", max_seq) : NULL;
  if (s) {
    ssm_model_close(*out);
    *out = NULL;
  }
  return s;
}

_Static_assert(SSM_MAX_SLOTS == 256, "the --batch messages say 256");

static int cmd_ir(int argc, char **argv) {
  const char *model = NULL, *config = NULL, *after = NULL, *dtype_name = "f32";
  long seq = 1, max_seq = 0, batch = 0;
  opt opts[] = {O_STR("--config", &config), O_STR("--after", &after), O_STR("--dtype", &dtype_name),
                O_INT("--seq", &seq, 1, 1 << 20, "a token count from 1 to 1048576", NULL),
                O_INT("--batch", &batch, 1, SSM_MAX_SLOTS, "a sequence count from 1 to 256", NULL),
                MAX_SEQ_OPT(&max_seq, NULL), {0}};
  SSM_CLI_PARSE("ir", argc, argv, opts, &model);
  if (!model) return ssm_cli_usage_error("ir", "missing MODEL");
  if (batch && seq != 1)
    return ssm_cli_usage_error("ir", "--batch and --seq: a batched graph takes one token a sequence");
  ssm_pass_opts po = {0};
  if (!ssm_dtype_parse(dtype_name, strlen(dtype_name), &po.weight_dtype) || po.weight_dtype == SSM_I32)
    return ssm_cli_usage_error("ir", "--dtype: expected f32, f16, bf16, q8_0 or q4_0, got '%s'", dtype_name);
  if (after && strcmp(after, "all")) {
    const ssm_pass *p = ssm_passes;
    while (p->name && strcmp(p->name, after)) p++;
    if (!p->name) {
      ssm_sb names = {0};
      for (p = ssm_passes; p->name; p++) ssm_sb_xprintf(&names, "%s, ", p->name);
      ssm_cli_usage_error("ir", "--after: unknown pass '%s' (passes: %sall)", after, names.s);
      ssm_sb_free(&names);
      return 2;
    }
  }
  ssm_graph *g = NULL;
  ssm_status s;
  if (ends_with(model, ".ssmir")) {
    char *text;
    size_t n;
    if ((s = ssm_file_read(model, 0, &text, &n))) return ssm_cli_fail(s);
    if (strlen(text) != n) s = ssm_status_new(SSM_ERR_INVALID, "%s: file contains a NUL byte", model);
    if (!s) s = ssm_graph_parse(text, model, &g);
    free(text);
    if (!s && !after) s = ssm_graph_verify(g);
  } else {
    ssm_model *m = NULL;
    s = load_model(model, config, max_seq, &m);
    if (!s) s = batch ? ssm_model_build_batch(m, (int)batch, &g) : ssm_model_build(m, (int)seq, &g);
    ssm_model_close(m);
  }
  int all = after && !strcmp(after, "all");
  if (!s && after) s = ssm_passes_run(g, &po, all ? NULL : after, print_after, all ? NULL : (void *)after);
  if (!s && !after) {
    char *text;
    s = ssm_graph_print(g, &text);
    if (!s) fputs(text, stdout);
    free(text);
  }
  ssm_graph_destroy(g);
  return s ? ssm_cli_fail(s) : 0;
}

/* ---- ssmc compile / inspect / devices ------------------------------------------------- */

/* Records the weights directory in the compiled bundle (see bundle.h:
 * ssm_manifest.source_dir): `weights` (--weights), or MODEL when it is a
 * directory and holds weights. */
static ssm_status record_weights(ssm_bundle *b, const char *model, const char *weights) {
  struct stat sb;
  const char *dir = weights ? weights : !stat(model, &sb) && S_ISDIR(sb.st_mode) ? model : NULL;
  if (!dir) return NULL;
  ssm_st_source_file *files;
  int n;
  ssm_status s = ssm_st_source(dir, &files, &n);
  if (s && !weights) { /* a model directory without weights: nothing to record */
    ssm_log("%s records no weights directory: %s", model, ssm_status_message(s));
    ssm_status_free(s);
    return NULL;
  }
  SSM_TRY(ssm_status_wrap(s, "--weights"));
  char abs[PATH_MAX];
  if (!realpath(dir, abs)) s = ssm_status_new(SSM_ERR_IO, "%s: %s", dir, strerror(errno));
  ssm_mf_source_file *mf = NULL;
  if (!s) s = ssm_alloc((size_t)n + 1, sizeof *mf, (void **)&mf);
  for (int i = 0; !s && i < n; i++) mf[i] = (ssm_mf_source_file){files[i].name, files[i].hash};
  if (!s) s = ssm_bundle_set_source(b, abs, mf, n);
  free(mf);
  free(files);
  return s;
}

/* The weights pass's note (what it retyped, what it kept and why) on
 * stderr, after the progress bar's line. */
static void weights_note(const char *pass, const char *note, void *user) {
  if (strcmp(pass, "weights")) return;
  ssm_cli_progress_end(user);
  fprintf(stderr, "weights: %s\n", note);
}

/* The file a quantized bundle OUT.ssmb keeps its weights in: OUT.DTYPE.safetensors
 * (ssm_bundle_write_weights). */
static ssm_status weights_file_name(const char *out, ssm_dtype d, char **path) {
  size_t n = strlen(out);
  if (n > 5 && !strcmp(out + n - 5, ".ssmb")) n -= 5;
  ssm_sb p = {0};
  ssm_sb_printf(&p, "%.*s.%s.safetensors", (int)n, out, ssm_dtype_name(d));
  return ssm_sb_take(&p, "the weights file's name", path);
}

static int cmd_compile(int argc, char **argv) {
  const char *model = NULL, *config = NULL, *out = NULL, *dump = NULL, *dtype_name = NULL,
             *weights = NULL;
  long chunk = 0, max_seq = 0, window = 0, slots = 0; /* 0: the default (ssm_compile_chunk) */
  int no_fuse = 0, quiet = 0;
  opt opts[] = {O_STR("--config", &config), O_STR("-o", &out), O_STR("--dump-ir", &dump),
                O_INT("--slots", &slots, 1, SSM_MAX_SLOTS, "a sequence count from 1 to 256", NULL),
                O_STR("--dtype", &dtype_name), O_FLAG("--no-fuse", &no_fuse),
                O_STR("--weights", &weights), O_FLAG("--quiet", &quiet), O_FLAG("-q", &quiet),
                CHUNK_OPT(&chunk, NULL), MAX_SEQ_OPT(&max_seq, NULL),
                O_INT("--wgsl-window", &window, 256, 1L << 40, "a power of two", NULL), {0}};
  SSM_CLI_PARSE("compile", argc, argv, opts, &model);
  ssm_dtype dtype = SSM_F32;
  if (dtype_name && (!ssm_dtype_parse(dtype_name, strlen(dtype_name), &dtype) || dtype == SSM_I32))
    return ssm_cli_usage_error("compile", "--dtype: expected f32, f16, bf16, q8_0 or q4_0, got '%s'", dtype_name);
  if (!model) return ssm_cli_usage_error("compile", "missing MODEL");
  /* without --dtype: the checkpoint's own (of --weights, or of MODEL when it is a directory) */
  struct stat st;
  const char *ckpt = weights ? weights : !stat(model, &st) && S_ISDIR(st.st_mode) ? model : NULL;
  ssm_status ds = !dtype_name && ckpt ? ssm_st_path_dtype(ckpt, &dtype) : NULL;
  if (ds) return ssm_cli_fail(weights ? ssm_status_wrap(ds, "--weights") : ds);
  if (!out) return ssm_cli_usage_error("compile", "missing -o OUT.ssmb");
  ssm_model *m = NULL;
  ssm_bundle *b = NULL;
  ssm_cli_progress bar = {.quiet = quiet};
  ssm_compile_opts co = {.prefill_tokens = (int)chunk, .slots = (int)slots, .dtype = dtype,
                         .no_fuse = no_fuse,
                         .dump_dir = dump, .progress = {ssm_cli_progress_fn, &bar},
                         .wgsl_window = (uint64_t)window,
                         .on_note = quiet ? NULL : weights_note, .note_user = &bar};
  const char *inputs[] = {model, config, weights};
  ssm_cli_catch_signals();
  ssm_status s = ssm_cli_not_an_input("-o", out, inputs, sizeof inputs / sizeof *inputs,
                                      weights ? weights : model);
  if (!s) s = ssm_cli_writable("-o", out);
  if (!s) s = load_model(model, config, max_seq, &m);
  if (!s) s = ssm_compile(m, &co, &b);
  ssm_cli_progress_end(&bar);
  if (!s) s = record_weights(b, model, weights);
  /* quantized weights are written once, beside the bundle, so that a run
   * loads them instead of quantizing them again */
  char *wfile = NULL;
  const char *src = b ? ssm_bundle_manifest(b)->source_dir : NULL;
  if (!s && src && ssm_dtype_is_quant(dtype)) {
    s = weights_file_name(out, dtype, &wfile);
    if (!s) s = ssm_cli_not_an_input("-o", wfile, inputs, sizeof inputs / sizeof *inputs, src);
    ssm_progress pr = {ssm_cli_progress_fn, &bar};
    if (!s) s = ssm_bundle_write_weights(b, src, wfile, &pr);
    ssm_cli_progress_end(&bar);
    if (!s && !quiet) fprintf(stderr, "weights: written to %s\n", wfile);
  }
  free(wfile);
  if (!s) s = ssm_bundle_save(b, out);
  ssm_bundle_close(b);
  ssm_model_close(m);
  return s ? ssm_cli_fail(s) : 0;
}

static int cmd_inspect(int argc, char **argv) {
  const char *path = NULL;
  int json = 0;
  opt opts[] = {O_FLAG("--json", &json), {0}};
  SSM_CLI_PARSE("inspect", argc, argv, opts, &path);
  if (!path) return ssm_cli_usage_error("inspect", "missing BUNDLE");
  ssm_bundle *b;
  ssm_status s = ssm_bundle_open(path, &b);
  if (s) return ssm_cli_fail(s);
  char *text;
  s = ssm_bundle_describe(b, json, &text);
  if (!s) fputs(text, stdout);
  free(text);
  ssm_bundle_close(b);
  return s ? ssm_cli_fail(s) : 0;
}

static int cmd_devices(int argc, char **argv) {
  opt opts[] = {{0}};
  SSM_CLI_PARSE("devices", argc, argv, opts, NULL);
  ssmc_device *d;
  int n;
  ssmc_status s = ssmc_devices(&d, &n);
  if (s) return ssm_cli_fail(s);
  printf("Vulkan devices: %d\n", n);
  for (int i = 0; i < n; i++)
    printf("%c %d: %s\n    %s, Vulkan %u.%u.%u, driver %s, %.1f GiB, max buffer %.1f GiB, "
           "subgroup %u%s\n", d[i].is_default ? '*' : ' ', d[i].index, d[i].name, d[i].type,
           d[i].api_version >> 22, (d[i].api_version >> 12) & 0x3ff, d[i].api_version & 0xfff,
           d[i].driver, (double)d[i].memory_bytes / (1 << 30),
           (double)d[i].max_buffer_bytes / (1 << 30), d[i].subgroup_size,
           d[i].usable ? "" : " (not usable: needs Vulkan 1.1 and a compute queue)");
  free(d);
  return 0;
}

static int cmd_export_web(int argc, char **argv) {
  ssm_export_opts o = {0};
  opt opts[] = {O_STR("--weights", &o.weights), O_STR("-o", &o.out),
                O_STR("--tokenizer", &o.tokenizer), O_FLAG("--link-weights", &o.link_weights), {0}};
  SSM_CLI_PARSE("export-web", argc, argv, opts, &o.bundle);
  const char *lack = !o.bundle ? "BUNDLE" : !o.out ? "-o OUTDIR" : NULL;
  if (lack) return ssm_cli_usage_error("export-web", "missing %s", lack);
  /* the weights directory the bundle records, unless --weights names one */
  char *rec_dir = NULL, *rec_file = NULL;
  ssm_status s = o.weights ? NULL : ssm_cli_bundle_inputs(o.bundle, &rec_dir, &rec_file);
  free(rec_file);
  if (s) return ssm_cli_fail(s);
  if (!o.weights && !(o.weights = rec_dir))
    return ssm_cli_usage_error("export-web", "missing --weights DIR (%s records no weights "
                               "directory)", o.bundle);
  s = ssm_export_web(&o);
  free(rec_dir);
  if (!s) printf("%s: open index.html over http, e.g. python3 -m http.server -d %s --bind 127.0.0.1\n",
                 o.out, o.out);
  return s ? ssm_cli_fail(s) : 0;
}

static void log_to_stderr(const char *msg, void *user) { fprintf(stderr, "ssmc: %s\n", msg); }

static const struct {
  const char *name;
  int (*fn)(int, char **);
} cmds[] = {{"run", ssm_cli_run},         {"compile", cmd_compile},
            {"bench", ssm_cli_bench},     {"inspect", cmd_inspect},
            {"ir", cmd_ir},               {"tokenize", ssm_cli_tokenize},
            {"devices", cmd_devices},     {"export-web", cmd_export_web},
            {"serve", ssm_cli_serve},     {"perplexity", ssm_cli_perplexity}};

/* The command that `name` most likely misspells (at most 2 edits, and
 * fewer than its length), or NULL. */
static const char *nearest_command(const char *name) {
  static const char *const more[] = {"help", "version"};
  const size_t ncmds = sizeof cmds / sizeof cmds[0];
  const char *best = NULL;
  size_t least = 3, len = strlen(name);
  for (size_t i = 0; i < ncmds + 2; i++) {
    const char *c = i < ncmds ? cmds[i].name : more[i - ncmds];
    size_t d = ssm_cli_edits(name, c);
    if (d < least && d < len) {
      least = d;
      best = c;
    }
  }
  return best;
}

int main(int argc, char **argv) {
  if (getenv("SSMC_VERBOSE")) ssmc_set_log(log_to_stderr, NULL);
  /* a write past the file-size limit (ulimit -f) fails with EFBIG, and is
   * reported with the file's name, instead of killing the process */
  signal(SIGXFSZ, SIG_IGN);
  /* for tests of exhausted memory (tests/test_nomem.c): the N-th input-sized allocation fails */
  if (getenv("SSMC_TEST_ALLOC_FAIL_AT")) ssm_alloc_fail_at(atol(getenv("SSMC_TEST_ALLOC_FAIL_AT")));
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    fputs(ssm_cli_usage(NULL), argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
    printf("ssmc %s (git %s)\n", ssmc_version(), ssm_revision());
    return 0;
  }
  if (!strcmp(argv[1], "version")) {
    if (argc > 2) return ssm_cli_usage_error(NULL, "version takes no arguments");
    printf("ssmc %s (git %s)\n", ssmc_version(), ssm_revision());
    return 0;
  }
  /* ssmc help [CMD]: what ssmc --help or ssmc CMD --help print */
  int help = !strcmp(argv[1], "help");
  if (help && argc == 2) {
    fputs(ssm_cli_usage(NULL), stdout);
    return 0;
  }
  if (help && argc > 3) return ssm_cli_usage_error(NULL, "help takes one command");
  const char *name = argv[help ? 2 : 1];
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
    if (!strcmp(name, cmds[i].name)) {
      char *ask[] = {"--help", NULL};
      return help ? cmds[i].fn(1, ask) : cmds[i].fn(argc - 2, argv + 2);
    }
  const char *near = nearest_command(name);
  if (near) return ssm_cli_usage_error(NULL, "unknown command '%s' (did you mean '%s'?)", name, near);
  return ssm_cli_usage_error(NULL, "unknown command '%s'", name);
}
