/*
 * cli.c — the ssmc command line: flags, printing and files. Running
 * models goes through the public library (runtime/ssmc.h); `compile`,
 * `inspect` and `ir` use the compiler's layers (frontend, passes, bundle).
 * It is the only place that prints to the user or exits.
 *
 * Options are read from one table per command: `--name VALUE` or
 * `--name=VALUE`, numbers checked against their range with a message that
 * names the option.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bundle/bundle.h"
#include "passes/passes.h"
#include "runtime/ssmc.h"
#include "runtime/weights/weights.h"
#include "tools/cli.h"
#include "tools/export.h"

static const char usage[] =
    "usage:\n"
    "  ssmc compile MODEL [--config config.json] -o OUT.ssmb [--chunk T] [--dtype f32|f16|bf16]\n"
    "               [--max-seq N] [--no-fuse] [--dump-ir DIR] [--wgsl-window BYTES]\n"
    "  ssmc ir MODEL [--config config.json] [--seq T] [--max-seq N] [--after PASS|all]\n"
    "          [--dtype f32|f16|bf16]\n"
    "  ssmc run BUNDLE|MODEL --weights DIR (--tokens 1,2,3 | --prompt TEXT|-) [-n N]\n"
    "           [--greedy | --temperature T --top-k K --top-p P --seed S]\n"
    "           [--tokenizer tokenizer.json] [--eos ID]\n"
    "           [--backend vulkan|cpu] [--device N] [--chunk T] [--dump-logits FILE]\n"
    "           [--config F] [--max-seq N] [--validate] [--state-in FILE] [--state-out FILE]\n"
    "  ssmc inspect BUNDLE [--json]\n"
    "  ssmc bench BUNDLE --weights DIR [-n N] [--device N] [--json] [--profile]\n"
    "  ssmc devices\n"
    "  ssmc export-web BUNDLE --weights DIR -o OUTDIR [--tokenizer FILE] [--link-weights]\n"
    "  ssmc tokenize --tokenizer tokenizer.json TEXT|-   (prints the ids, comma-separated)\n"
    "  ssmc tokenize --tokenizer tokenizer.json --decode 1,2,3   (prints the text)\n"
    "  ssmc --version\n"
    "MODEL: an architecture YAML (needs --config), a Hugging Face model\n"
    "directory, or (ir only) an IR text file FILE.ssmir.\n"
    "--max-seq N: the positions a KV cache holds (default 2048); a bundle keeps\n"
    "the value it was compiled with.\n"
    "PASS: verify, infer, simplify, weights, fuse, plan_buffers, schedule.\n"
    "--wgsl-window BYTES: WGSL kernels' storage window (default 128 MiB; smaller: tests).\n"
    "export-web: a static site that runs the bundle in a browser on WebGPU.\n";

static int fail(ssmc_status s) {
  fprintf(stderr, "ssmc: %s\n", ssmc_status_message(s));
  ssmc_status_free(s);
  return 1;
}

static int usage_error(const char *cmd, const char *fmt, const char *arg) {
  fprintf(stderr, "ssmc: %s%s", cmd ? cmd : "", cmd ? ": " : "");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", usage);
  return 2;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

/* ---- options ------------------------------------------------------------------ */

typedef enum { FLAG, STR, INT, NUM } opt_kind;

typedef struct {
  const char *name;
  opt_kind kind;
  void *dest;        /* int* (FLAG), const char** (STR), long* (INT), double* (NUM) */
  double lo, hi;     /* INT, NUM: the accepted range */
  int open;          /* NUM: lo itself is not accepted */
  const char *what;  /* INT, NUM: "a token count from 1 to 4096", for messages */
  int *given;        /* set to 1 when the option is given (may be NULL) */
} opt;

/* Reads argv against `opts`; the one positional argument goes to *pos
 * (when pos is not NULL). Returns 0, or 2 after printing a usage error. */
static int parse(const char *cmd, int argc, char **argv, const opt *opts, const char **pos) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || !a[1]) { /* a positional, or "-" for stdin */
      if (!pos || *pos) return usage_error(cmd, "unexpected argument '%s'", a);
      *pos = a;
      continue;
    }
    const char *eq = strchr(a, '=');
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    const opt *o = opts;
    while (o->name && (strlen(o->name) != len || strncmp(o->name, a, len))) o++;
    if (!o->name) return usage_error(cmd, "unknown option '%s'", a);
    if (o->given) *o->given = 1;
    if (o->kind == FLAG) {
      if (eq) return usage_error(cmd, "option '%s' takes no value", o->name);
      *(int *)o->dest = 1;
      continue;
    }
    const char *v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
    if (!v) return usage_error(cmd, "option '%s' needs a value", o->name);
    if (o->kind == STR) {
      *(const char **)o->dest = v;
      continue;
    }
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (!*v || *end || errno || !(d >= o->lo && d <= o->hi) || (o->open && d == o->lo) || (o->kind == INT && d != (long)d)) {
      fprintf(stderr, "ssmc: %s: expected %s, got '%s'\n%s", o->name, o->what, v, usage);
      return 2;
    }
    if (o->kind == INT) *(long *)o->dest = (long)d;
    else *(double *)o->dest = d;
  }
  return 0;
}

/* "1,2,3" to a malloc'd array. */
static ssm_status parse_ids(const char *what, const char *s, int32_t **out, size_t *out_n) {
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

#define O_FLAG(n, d) {.name = n, .kind = FLAG, .dest = d}
#define O_STR(n, d) {.name = n, .kind = STR, .dest = d}
#define O_INT(n, d, l, h, w, g) {.name = n, .kind = INT, .dest = d, .lo = l, .hi = h, .what = w, .given = g}
#define O_NUM(n, d, l, h, w, g) {.name = n, .kind = NUM, .dest = d, .lo = l, .hi = h, .what = w, .given = g}
#define MAX_SEQ_OPT(dest, given) \
  O_INT("--max-seq", dest, 1, 1 << 24, "a position count from 1 to 16777216", given)
#define CHUNK_OPT(dest, given) O_INT("--chunk", dest, 1, 4096, "a token count from 1 to 4096", given)

/* ---- ssmc ir -------------------------------------------------------------------- */

/* Prints the graph after a pass under "# after PASS: NOTE" (a comment, so
 * each section parses back as IR). */
static void print_after(const char *pass, ssm_graph *g, const char *note, void *user) {
  const char *only = user; /* NULL: every pass */
  if (only && strcmp(only, pass)) return;
  char *text = ssm_graph_print(g);
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

static int cmd_ir(int argc, char **argv) {
  const char *model = NULL, *config = NULL, *after = NULL, *dtype_name = "f32";
  long seq = 1, max_seq = 0;
  opt opts[] = {O_STR("--config", &config), O_STR("--after", &after), O_STR("--dtype", &dtype_name),
                O_INT("--seq", &seq, 1, 1 << 20, "a token count from 1 to 1048576", NULL),
                MAX_SEQ_OPT(&max_seq, NULL), {0}};
  if (parse("ir", argc, argv, opts, &model)) return 2;
  if (!model) return usage_error("ir", "missing MODEL%s", "");
  ssm_pass_opts po = {0};
  if (!ssm_dtype_parse(dtype_name, strlen(dtype_name), &po.weight_dtype) || po.weight_dtype == SSM_I32)
    return usage_error(NULL, "--dtype: expected f32, f16 or bf16, got '%s'", dtype_name);
  if (after && strcmp(after, "all")) {
    const ssm_pass *p = ssm_passes;
    while (p->name && strcmp(p->name, after)) p++;
    if (!p->name) {
      fprintf(stderr, "ssmc: ir: --after: unknown pass '%s' (passes: ", after);
      for (p = ssm_passes; p->name; p++) fprintf(stderr, "%s, ", p->name);
      fprintf(stderr, "all)\n%s", usage);
      return 2;
    }
  }
  ssm_graph *g = NULL;
  ssm_status s;
  if (ends_with(model, ".ssmir")) {
    char *text;
    size_t n;
    if ((s = ssm_file_read(model, 0, &text, &n))) return fail(s);
    if (strlen(text) != n) s = ssm_status_new(SSM_ERR_INVALID, "%s: file contains a NUL byte", model);
    if (!s) s = ssm_graph_parse(text, model, &g);
    free(text);
    if (!s && !after) s = ssm_graph_verify(g);
  } else {
    ssm_model *m = NULL;
    s = load_model(model, config, max_seq, &m);
    if (!s) s = ssm_model_build(m, (int)seq, &g);
    ssm_model_close(m);
  }
  int all = after && !strcmp(after, "all");
  if (!s && after) s = ssm_passes_run(g, &po, all ? NULL : after, print_after, all ? NULL : (void *)after);
  if (!s && !after) {
    char *text = ssm_graph_print(g);
    fputs(text, stdout);
    free(text);
  }
  ssm_graph_destroy(g);
  return s ? fail(s) : 0;
}

/* ---- ssmc compile / inspect / devices ------------------------------------------------- */

static int cmd_compile(int argc, char **argv) {
  const char *model = NULL, *config = NULL, *out = NULL, *dump = NULL, *dtype_name = NULL;
  long chunk = 32, max_seq = 0, window = 0;
  int no_fuse = 0;
  opt opts[] = {O_STR("--config", &config), O_STR("-o", &out), O_STR("--dump-ir", &dump),
                O_STR("--dtype", &dtype_name), O_FLAG("--no-fuse", &no_fuse),
                CHUNK_OPT(&chunk, NULL), MAX_SEQ_OPT(&max_seq, NULL),
                O_INT("--wgsl-window", &window, 256, 1L << 40, "a power of two", NULL), {0}};
  if (parse("compile", argc, argv, opts, &model)) return 2;
  ssm_dtype dtype = SSM_F32;
  if (dtype_name && (!ssm_dtype_parse(dtype_name, strlen(dtype_name), &dtype) || dtype == SSM_I32))
    return usage_error(NULL, "--dtype: expected f32, f16 or bf16, got '%s'", dtype_name);
  if (!model) return usage_error("compile", "missing MODEL%s", "");
  struct stat st;
  int dir = stat(model, &st) == 0 && S_ISDIR(st.st_mode);
  ssm_status ds = !dtype_name && dir ? ssm_st_path_dtype(model, &dtype) : NULL;
  if (ds) return fail(ds);
  if (!out) return usage_error("compile", "missing -o OUT.ssmb%s", "");
  ssm_model *m = NULL;
  ssm_bundle *b = NULL;
  ssm_compile_opts co = {.prefill_tokens = (int)chunk, .dtype = dtype, .no_fuse = no_fuse,
                         .dump_dir = dump, .wgsl_window = (uint64_t)window};
  const char *inputs[] = {model, config, NULL};
  ssm_status s = ssm_cli_not_an_input("-o", out, inputs, model);
  if (!s) s = load_model(model, config, max_seq, &m);
  if (!s) s = ssm_compile(m, &co, &b);
  if (!s) s = ssm_bundle_save(b, out);
  ssm_bundle_close(b);
  ssm_model_close(m);
  return s ? fail(s) : 0;
}

static int cmd_inspect(int argc, char **argv) {
  const char *path = NULL;
  int json = 0;
  opt opts[] = {O_FLAG("--json", &json), {0}};
  if (parse("inspect", argc, argv, opts, &path)) return 2;
  if (!path) return usage_error("inspect", "missing BUNDLE%s", "");
  ssm_bundle *b;
  ssm_status s = ssm_bundle_open(path, &b);
  if (s) return fail(s);
  char *text = ssm_bundle_describe(b, json);
  fputs(text, stdout);
  free(text);
  ssm_bundle_close(b);
  return 0;
}

static int cmd_devices(int argc, char **argv) {
  if (argc) return usage_error("devices", "unexpected argument '%s'", argv[0]);
  ssmc_device *d;
  int n;
  ssmc_status s = ssmc_devices(&d, &n);
  if (s) return fail(s);
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

/* ---- ssmc run / bench ------------------------------------------------------------------ */

typedef struct {
  const char *model, *tokens, *prompt, *dump, *state_in, *state_out, *backend, *dtype;
  long n, chunk, device, max_seq, eos, top_k, seed;
  double temperature, top_p;
  int greedy, validation, chunk_given, max_seq_given, sampling[4];
  ssmc_options o;
} run_args;

/* Options shared by run and bench. */
#define SESSION_OPTS(r)                                                                       \
  O_STR("--weights", &(r)->o.weights), O_STR("--config", &(r)->o.config),                     \
      O_STR("--backend", &(r)->backend), O_FLAG("--validate", &(r)->validation),              \
      O_STR("--dtype", &(r)->dtype),                                                          \
      O_INT("--device", &(r)->device, 0, 1000, "a device index (see `ssmc devices`)", NULL),        \
      O_INT("-n", &(r)->n, 0, 1 << 24, "a token count from 0 to 16777216", NULL),                   \
      CHUNK_OPT(&(r)->chunk, &(r)->chunk_given), MAX_SEQ_OPT(&(r)->max_seq, &(r)->max_seq_given)

/* Checks what the table cannot, and fills r->o. Returns 0 or 2. */
static int session_options(run_args *r, const char *cmd) {
  if (!r->model) return usage_error(cmd, "missing MODEL or BUNDLE%s", "");
  if (!r->o.weights) return usage_error(cmd, "missing --weights DIR%s", "");
  if (strcmp(r->backend, "cpu") && strcmp(r->backend, "vulkan"))
    return usage_error(NULL, "--backend: expected cpu or vulkan, got '%s'", r->backend);
  int bundle = ends_with(r->model, ".ssmb");
  if (!strcmp(r->backend, "cpu") && bundle)
    return usage_error(cmd, "--backend cpu runs a model (YAML or directory), not a bundle: %s",
                       r->model);
  if (r->max_seq_given && bundle)
    return usage_error(cmd, "--max-seq is fixed when a bundle is compiled (ssmc compile "
                       "--max-seq): %s", r->model);
  static const char *const dtypes[] = {"auto", "f32", "f16", "bf16"};
  int d = 0;
  while (r->dtype && d < 4 && strcmp(r->dtype, dtypes[d])) d++;
  if (d == 4) return usage_error(NULL, "--dtype: expected f32, f16 or bf16, got '%s'", r->dtype);
  if (r->dtype && bundle)
    return usage_error(cmd, "--dtype is fixed when a bundle is compiled (ssmc compile --dtype): "
                       "%s", r->model);
  r->o.dtype = (ssmc_dtype)d;
  r->o.backend = strcmp(r->backend, "cpu") ? SSMC_BACKEND_VULKAN : SSMC_BACKEND_CPU;
  r->o.device = (int)r->device;
  r->o.validation = r->validation;
  r->o.chunk = r->chunk_given && !bundle ? (int)r->chunk : 0;
  r->o.max_seq = (int)r->max_seq;
  r->o.eos = r->eos;
  return 0;
}

typedef struct {
  FILE *f;
  int err;
  ssmc_decoder *dec; /* --prompt: the text so far */
} printer;

/* SIGINT / SIGTERM: generation stops at the next token and the command
 * finishes its output; a second one ends the process at once. */
static volatile sig_atomic_t g_signal;

static void on_signal(int sig) { g_signal = sig; }

static void catch_signals(void) {
  struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESETHAND};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

static int stop_on_signal(int32_t id, void *user) { return g_signal != 0; }

static int dump_row(const float *logits, int64_t vocab, int64_t position, void *user) {
  printer *p = user;
  if (g_signal) return 1;
  if (fwrite(logits, sizeof(float), (size_t)vocab, p->f) != (size_t)vocab) p->err = errno ? errno : EIO;
  return p->err != 0;
}

static int print_token(int32_t id, void *user) {
  printer *p = user;
  if (g_signal) return 1;
  const char *text;
  size_t len;
  ssmc_status s = ssmc_decoder_feed(p->dec, id, &text, &len);
  if (s) {
    ssmc_status_free(s);
    return 1;
  }
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return 0;
}

/* Generates from the prompt (--tokens or --prompt) with the session. */
static ssmc_status run_session(ssmc_session *s, run_args *r, printer *p) {
  ssmc_generate_options g;
  ssmc_generate_options_init(&g);
  g.temperature = (float)r->temperature;
  g.top_k = (int)r->top_k;
  g.top_p = (float)r->top_p;
  g.seed = (uint32_t)r->seed;
  g.host_greedy = r->greedy;
  g.on_logits = r->dump ? dump_row : NULL;
  g.on_token = stop_on_signal;
  g.user = p;
  int32_t *ids = NULL, *gen = calloc((size_t)r->n + 1, sizeof *gen);
  size_t nids = 0, ngen = 0;
  char *text = NULL;
  ssmc_status st = NULL;
  if (r->tokens) {
    st = parse_ids("--tokens", r->tokens, &ids, &nids);
  } else {
    const ssmc_tokenizer *t = NULL;
    size_t len;
    st = ssmc_session_tokenizer(s, &t);
    if (st) return ssm_status_wrap(st, "--prompt needs a tokenizer (--tokenizer FILE, or "
                                   "tokenizer.json in the weights directory)");
    st = ssm_cli_text_arg("--prompt", r->prompt, &text, &len);
    if (!st) st = ssmc_tokenizer_encode(t, text, len, &ids, &nids);
    if (!st && !nids) st = ssm_status_new(SSM_ERR_INVALID, "--prompt: the text has no tokens");
    if (!st) st = ssmc_decoder_create(t, 1, &p->dec);
    if (!st) fputs(text, stdout);
    fflush(stdout);
    g.stop_at_eos = 1;
    g.on_token = print_token;
  }
  if (!st) st = ssmc_session_generate(s, ids, nids, (int)r->n, &g, gen, &ngen);
  if (p->err && !st)
    st = ssm_status_new(SSM_ERR_IO, "--dump-logits %s: %s", r->dump, strerror(p->err));
  if (p->dec) {
    const char *rest;
    size_t len;
    ssmc_decoder_flush(p->dec, &rest, &len);
    fwrite(rest, 1, len, stdout);
    fputs("\n", stdout);
  } else if (!st) {
    for (size_t k = 0; k < ngen; k++) printf(k ? ",%d" : "%d", gen[k]);
    printf("\n");
  }
  free(text);
  free(ids);
  free(gen);
  return st;
}

/* The dump goes to a temporary file renamed over FILE once the run
 * succeeded, so a failed run leaves whatever FILE was. */
static int cmd_run(int argc, char **argv) {
  run_args r = {.n = 16, .chunk = 32, .device = -1, .eos = -1, .backend = "vulkan", .top_p = 1};
  ssmc_options_init(&r.o);
  opt opts[] = {SESSION_OPTS(&r),
                O_STR("--tokens", &r.tokens), O_STR("--prompt", &r.prompt),
                O_STR("--tokenizer", &r.o.tokenizer), O_STR("--dump-logits", &r.dump),
                O_STR("--state-in", &r.state_in), O_STR("--state-out", &r.state_out),
                O_INT("--eos", &r.eos, 0, INT32_MAX, "a token id", NULL),
                O_FLAG("--greedy", &r.greedy),
                O_NUM("--temperature", &r.temperature, 0, 1e6, "a number >= 0", &r.sampling[0]),
                O_INT("--top-k", &r.top_k, 0, INT32_MAX, "a count >= 0 (0: off)", &r.sampling[1]),
                {.name = "--top-p", .kind = NUM, .dest = &r.top_p, .hi = 1, .open = 1,
                 .what = "a number in (0, 1] (1: off)", .given = &r.sampling[2]},
                O_INT("--seed", &r.seed, 0, (1 << 24) - 1, "an integer in [0, 16777215]", &r.sampling[3]),
                {0}};
  if (parse("run", argc, argv, opts, &r.model)) return 2;
  if (r.greedy && (r.sampling[0] || r.sampling[1] || r.sampling[2] || r.sampling[3]))
    return usage_error(NULL, "--greedy: cannot be combined with --temperature, --top-k, --top-p "
                       "or --seed%s", "");
  if (session_options(&r, "run")) return 2;
  if (!r.tokens == !r.prompt) return usage_error("run", "give --tokens IDS or --prompt TEXT%s", "");
  printer p = {0};
  const char *inputs[] = {r.model, r.o.weights, r.o.config, r.o.tokenizer, r.state_in, NULL};
  ssmc_status st = ssm_cli_not_an_input("--dump-logits", r.dump, inputs, r.o.weights);
  if (!st) st = ssm_cli_not_an_input("--state-out", r.state_out, inputs, r.o.weights);
  if (!st && r.dump && ssm_file_same(r.dump, r.state_out ? r.state_out : ""))
    st = ssm_status_new(SSM_ERR_INVALID, "--dump-logits and --state-out name one file");
  char *tmp = NULL;
  int fd = -1;
  if (!st && r.dump) st = ssm_status_wrap(ssm_file_temp(r.dump, &tmp, &fd), "--dump-logits");
  if (fd >= 0 && !(p.f = fdopen(fd, "wb"))) ssm_fatal_nomem(0);
  ssmc_session *s = NULL;
  if (!st) st = ssmc_session_open(r.model, &r.o, &s);
  if (!st && r.state_in) st = ssmc_session_load_state(s, r.state_in);
  if (!st) {
    catch_signals();
    st = run_session(s, &r, &p);
  }
  /* the state after every token fed; the last generated one was not fed */
  if (!st && r.state_out && !g_signal) st = ssmc_session_save_state(s, r.state_out);
  ssmc_session_close(s);
  ssmc_decoder_destroy(p.dec);
  if (p.f) { /* the dump replaces the old file only when the run succeeded */
    int failed = st || g_signal || fflush(p.f);
    ssmc_status c = ssm_file_commit(tmp, dup(fileno(p.f)), r.dump, failed);
    fclose(p.f);
    if (!st && !g_signal) st = ssm_status_wrap(c, "--dump-logits");
    else ssmc_status_free(c);
  }
  if (st) return fail(st);
  return g_signal ? 128 + g_signal : 0;
}

static int cmd_bench(int argc, char **argv) {
  run_args r = {.n = 128, .chunk = 32, .device = -1, .eos = -1, .backend = "vulkan"};
  ssmc_options_init(&r.o);
  int json = 0, profile = 0;
  opt opts[] = {SESSION_OPTS(&r), O_FLAG("--json", &json), O_FLAG("--profile", &profile), {0}};
  if (parse("bench", argc, argv, opts, &r.model)) return 2;
  if (session_options(&r, "bench")) return 2;
  if (!ends_with(r.model, ".ssmb") || strcmp(r.backend, "vulkan"))
    return usage_error("bench", "expected a compiled bundle (.ssmb), got '%s'", r.model);
  ssmc_session *s = NULL;
  ssmc_bench_result b;
  ssmc_status st = ssmc_session_open(r.model, &r.o, &s);
  if (!st) st = ssmc_session_bench(s, (int)r.n, &b);
  const char *device = st ? "" : ssmc_session_device(s);
  if (!st && json)
    printf("{\"decode_tokens_per_s\": %.2f, \"decode_ms_per_token\": %.4f, "
           "\"decode_feedback_tokens_per_s\": %.2f, \"prefill_tokens_per_s\": %.2f, "
           "\"decode_tokens\": %d, \"prefill_tokens\": %d, \"weight_bytes\": %llu, "
           "\"decode_gb_per_s\": %.2f, \"device\": \"%s\", \"ssmc_version\": \"%s\"",
           b.decode_tokens_per_s, 1e3 / b.decode_tokens_per_s, b.decode_feedback_tokens_per_s,
           b.prefill_tokens_per_s, b.decode_tokens, b.prefill_tokens,
           (unsigned long long)b.weight_bytes, b.decode_tokens_per_s * (double)b.weight_bytes / 1e9,
           device, ssmc_version());
  else if (!st)
    printf("device: %s\n"
           "decode:  %.1f tokens/s (%.3f ms/token, %d tokens; weights %.1f MB -> %.1f GB/s)\n"
           "decode, token fed back on the device: %.1f tokens/s\n"
           "prefill: %.1f tokens/s (%d tokens)\n",
           device, b.decode_tokens_per_s, 1e3 / b.decode_tokens_per_s, b.decode_tokens,
           (double)b.weight_bytes / 1e6, b.decode_tokens_per_s * (double)b.weight_bytes / 1e9,
           b.decode_feedback_tokens_per_s, b.prefill_tokens_per_s, b.prefill_tokens);
  for (int prefill = 0; profile && !st && prefill < 2; prefill++) {
    ssmc_profile_step *steps;
    int n, runs = prefill ? 8 : 64;
    st = ssmc_session_profile(s, prefill, runs, &steps, &n);
    if (st) break;
    fputs(json ? ", " : "\n", stdout);
    ssm_cli_print_profile(stdout, prefill ? "prefill" : "decode", steps, n, runs, json);
    free(steps);
  }
  if (!st && json) puts("}");
  ssmc_session_close(s);
  return st ? fail(st) : 0;
}

/* ---- ssmc export-web (export.c) ----------------------------------------------------- */

static int cmd_export_web(int argc, char **argv) {
  ssm_export_opts o = {0};
  opt opts[] = {O_STR("--weights", &o.weights), O_STR("-o", &o.out),
                O_STR("--tokenizer", &o.tokenizer), O_FLAG("--link-weights", &o.link_weights), {0}};
  if (parse("export-web", argc, argv, opts, &o.bundle)) return 2;
  const char *lack = !o.bundle ? "BUNDLE" : !o.weights ? "--weights DIR" : !o.out ? "-o OUTDIR" : NULL;
  if (lack) return usage_error("export-web", "missing %s", lack);
  ssm_status s = ssm_export_web(&o);
  if (!s) printf("%s: open index.html over http, e.g. python3 -m http.server -d %s --bind 127.0.0.1\n", o.out, o.out);
  return s ? fail(s) : 0;
}

/* ---- ssmc tokenize ----------------------------------------------------------------- */

static int cmd_tokenize(int argc, char **argv) {
  const char *path = NULL, *text = NULL, *decode = NULL;
  opt opts[] = {O_STR("--tokenizer", &path), O_STR("--decode", &decode), {0}};
  if (parse("tokenize", argc, argv, opts, &text)) return 2;
  if (!path) return usage_error("tokenize", "missing --tokenizer FILE%s", "");
  if (!text == !decode) return usage_error("tokenize", "give either TEXT or --decode IDS%s", "");
  ssmc_tokenizer *t;
  ssmc_status s = ssmc_tokenizer_open(path, &t);
  if (s) return fail(s);
  int32_t *ids = NULL;
  size_t n = 0, len;
  char *out = NULL;
  if (decode) {
    s = parse_ids("--decode", decode, &ids, &n);
    if (!s) s = ssmc_tokenizer_decode(t, ids, n, 0, &out, &len);
    if (!s) printf("%.*s\n", (int)len, out);
  } else {
    char *in = NULL;
    s = ssm_cli_text_arg("tokenize", text, &in, &len);
    if (!s) s = ssmc_tokenizer_encode(t, in, len, &ids, &n);
    for (size_t i = 0; !s && i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    if (!s) putchar('\n');
    free(in);
  }
  free(out);
  free(ids);
  ssmc_tokenizer_close(t);
  return s ? fail(s) : 0;
}

static void log_to_stderr(const char *msg, void *user) { fprintf(stderr, "ssmc: %s\n", msg); }

int main(int argc, char **argv) {
  static const struct {
    const char *name;
    int (*fn)(int, char **);
  } cmds[] = {{"compile", cmd_compile}, {"ir", cmd_ir},       {"run", cmd_run},
              {"inspect", cmd_inspect}, {"bench", cmd_bench}, {"devices", cmd_devices},
              {"tokenize", cmd_tokenize}, {"export-web", cmd_export_web}};
  if (getenv("SSMC_VERBOSE")) ssmc_set_log(log_to_stderr, NULL);
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("ssmc %s\n", ssmc_version());
    return 0;
  }
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    if (strcmp(argv[1], cmds[i].name)) continue;
    for (int k = 2; k < argc; k++)
      if (!strcmp(argv[k], "--help") || !strcmp(argv[k], "-h")) {
        fputs(usage, stdout);
        return 0;
      }
    return cmds[i].fn(argc - 2, argv + 2);
  }
  return usage_error(NULL, "unknown command '%s'", argv[1]);
}
