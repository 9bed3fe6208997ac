/*
 * ssmc.c — the command-line driver. It parses flags, calls the library, and
 * is the only place that prints to the user or exits. Subcommands:
 *
 *   compile, ir, run, inspect, bench, devices (see `usage` below and
 *   DESIGN.md's command line).
 *
 * MODEL is an architecture YAML (with --config), a Hugging Face model
 * directory, or (for `ir`) an IR text file ending in .ssmir.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "codegen.h"
#include "passes.h"
#include "runtime.h"
#include <unistd.h>

static const char usage[] =
    "usage:\n"
    "  ssmc compile MODEL [--config config.json] -o OUT.ssmb [--chunk T] [--dtype f32]\n"
    "               [--no-fuse] [--dump-ir DIR]\n"
    "  ssmc ir MODEL [--config config.json] [--seq T] [--after PASS|all]\n"
    "  ssmc run BUNDLE|MODEL --weights DIR --tokens 1,2,3 [-n N]\n"
    "           [--greedy | --temperature T --top-k K --top-p P --seed S]\n"
    "           [--backend vulkan|cpu] [--device N] [--chunk T] [--dump-logits FILE]\n"
    "           [--config F] [--validate] [--state-in FILE] [--state-out FILE]\n"
    "  ssmc inspect BUNDLE [--json]\n"
    "  ssmc bench BUNDLE --weights DIR [-n N] [--device N] [--json]\n"
    "  ssmc devices\n"
    "MODEL: an architecture YAML (needs --config), a Hugging Face model\n"
    "directory, or (ir only) an IR text file FILE.ssmir.\n"
    "PASS: verify, infer, simplify, fuse, plan_buffers, schedule.\n";

static int fail(ssm_status s) {
  fprintf(stderr, "ssmc: %s\n", ssm_status_message(s));
  ssm_status_free(s);
  return 1;
}

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "ssmc: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", usage);
  return 2;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

/* Parses a non-negative decimal int in [lo, hi]; returns 0 on error. */
static int parse_int(const char *s, long lo, long hi, long *out) {
  if (!s || !*s) return 0;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

/* Parses a finite number in [lo, hi] (excluding lo when `open_lo`);
 * returns 0 on error. */
static int parse_double(const char *s, double lo, double hi, int open_lo, double *out) {
  if (!s || !*s) return 0;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !(v >= lo && v <= hi) || (open_lo && v == lo)) return 0;
  *out = v;
  return 1;
}

/* Parses "1,2,3" into a malloc'd array. */
static ssm_status parse_tokens(const char *s, int32_t **out, int *out_n) {
  *out = NULL;
  *out_n = 0;
  size_t cap = 1;
  for (const char *p = s; *p; p++) cap += *p == ',';
  int32_t *ids = malloc(cap * sizeof *ids);
  int n = 0;
  const char *p = s;
  for (;;) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
      free(ids);
      return ssm_status_new(SSM_ERR_INVALID,
                            "--tokens: expected comma-separated token ids, got '%s' "
                            "(bad at character %d)", s, (int)(p - s) + 1);
    }
    ids[n++] = (int32_t)v;
    if (!*end) break;
    p = end + 1;
  }
  *out = ids;
  *out_n = n;
  return NULL;
}

/* ---- ssmc ir ------------------------------------------------------------ */

/* Prints the graph after a pass under "# after PASS: NOTE" (a comment, so
 * each section parses back as IR). */
static void print_after(const char *pass, ssm_graph *g, const char *note, void *user) {
  const char *only = user; /* NULL: every pass */
  if (only && strcmp(only, pass)) return;
  char *text = ssm_graph_print(g);
  printf("# after %s: %s\n%s", pass, note, text);
  free(text);
}

static int known_pass(const char *name) {
  for (const ssm_pass *p = ssm_passes; p->name; p++)
    if (!strcmp(p->name, name)) return 1;
  return !strcmp(name, "all");
}

static int cmd_ir(int argc, char **argv) {
  const char *model = NULL, *config = NULL, *after = NULL;
  long seq = 1;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc) config = argv[++i];
    else if (!strcmp(argv[i], "--after") && i + 1 < argc) {
      after = argv[++i];
      if (!known_pass(after)) {
        char names[512];
        size_t k = 0;
        for (const ssm_pass *p = ssm_passes; p->name && k < sizeof names; p++)
          k += (size_t)snprintf(names + k, sizeof names - k, "%s, ", p->name);
        fprintf(stderr, "ssmc: ir: --after: unknown pass '%s' (passes: %sall)\n", after, names);
        fputs(usage, stderr);
        return 2;
      }
    } else if (!strcmp(argv[i], "--seq") && i + 1 < argc) {
      if (!parse_int(argv[++i], 1, 1 << 20, &seq))
        return usage_error("--seq: expected a token count from 1 to 1048576, got '%s'", argv[i]);
    } else if (i + 1 == argc && (!strcmp(argv[i], "--after") || !strcmp(argv[i], "--config") ||
                                 !strcmp(argv[i], "--seq")))
      return usage_error("ir: option '%s' needs a value", argv[i]);
    else if (argv[i][0] == '-') return usage_error("ir: unknown option '%s'", argv[i]);
    else if (!model) model = argv[i];
    else return usage_error("ir: unexpected argument '%s'", argv[i]);
  }
  if (!model) return usage_error("ir: missing MODEL%s", "");

  ssm_graph *g = NULL;
  ssm_status s;
  if (ends_with(model, ".ssmir")) {
    char *text;
    size_t n;
    if ((s = ssm_file_read(model, 0, &text, &n))) return fail(s);
    if (strlen(text) != n) {
      free(text);
      return fail(ssm_status_new(SSM_ERR_INVALID, "%s: file contains a NUL byte", model));
    }
    s = ssm_graph_parse(text, model, &g);
    free(text);
    if (!s && !after) s = ssm_graph_verify(g);
  } else {
    ssm_model *m = NULL;
    s = ssm_model_load(model, config, &m);
    if (!s) s = ssm_model_build(m, (int)seq, &g);
    ssm_model_destroy(m);
  }
  if (!s && after) {
    int all = !strcmp(after, "all");
    s = ssm_passes_run(g, NULL, all ? NULL : after, print_after, all ? NULL : (void *)after);
  }
  if (s) {
    ssm_graph_destroy(g);
    return fail(s);
  }
  if (!after) {
    char *text = ssm_graph_print(g);
    fputs(text, stdout);
    free(text);
  }
  ssm_graph_destroy(g);
  return 0;
}

/* ---- ssmc run ----------------------------------------------------------- */

typedef struct {
  const char *model, *config, *weights, *tokens, *dump, *backend, *state_in, *state_out;
  long n, chunk, device;
  int validation;
  int greedy;   /* --greedy: logits to the host, argmax there, every step */
  int sampling; /* a sampling option was given */
  double temperature, top_p; /* the sampler (greedy when temperature is 0) */
  long top_k, seed;
} run_opts;

/* A backend feeds tokens to a model and returns their logits. `chunk` is the
 * largest count run() accepts besides 1 (the Vulkan backend takes exactly 1
 * or its prefill size). */
typedef struct backend {
  ssm_status (*run)(struct backend *b, const int32_t *tokens, int count, float *logits);
  ssm_status (*finish)(struct backend *b); /* reports problems seen while running */
  ssm_status (*state_save)(struct backend *b, const char *path);
  ssm_status (*state_load)(struct backend *b, const char *path);
  /* Sampled generation from `first` (the last prompt token): n ids into
   * out, each the next step's input without the host; each step's logits
   * go to `dump` when it is not NULL. */
  ssm_status (*generate)(struct backend *b, const run_opts *o, int32_t first, int n,
                         int32_t *out, FILE *dump, int64_t *pos);
  void (*destroy)(struct backend *b);
  int64_t vocab;
  int chunk;
} backend;

/* ---- CPU backend: the reference interpreter ----------------------------- */

typedef struct {
  backend base;
  ssm_model *model;
  ssm_st *st;
  ssm_cpu *cpu;
  ssm_graph *by_len[64]; /* graphs built per token count */
  int len[64], count;
  ssm_graph *sampled; /* the decode graph with its sampler */
} cpu_backend;

/* The graph for `count` tokens, built once. */
static ssm_status cpu_graph(cpu_backend *c, int count, ssm_graph **out) {
  for (int i = 0; i < c->count; i++)
    if (c->len[i] == count) {
      *out = c->by_len[i];
      return NULL;
    }
  SSM_ASSERT(c->count < 64);
  SSM_TRY(ssm_model_build(c->model, count, out));
  c->by_len[c->count] = *out;
  c->len[c->count++] = count;
  return NULL;
}

static ssm_status cpu_run(backend *b, const int32_t *tokens, int count, float *logits) {
  cpu_backend *c = (cpu_backend *)b;
  ssm_graph *g;
  SSM_TRY(cpu_graph(c, count, &g));
  return ssm_cpu_run(c->cpu, g, tokens, logits, (size_t)count * (size_t)b->vocab);
}

/* The decode graph says which state tensors the model has. */
static ssm_status cpu_state_save(backend *b, const char *path) {
  cpu_backend *c = (cpu_backend *)b;
  ssm_graph *g;
  SSM_TRY(cpu_graph(c, 1, &g));
  return ssm_cpu_state_save(c->cpu, g, ssm_model_arch(c->model), path);
}

static ssm_status cpu_state_load(backend *b, const char *path) {
  cpu_backend *c = (cpu_backend *)b;
  ssm_graph *g;
  SSM_TRY(cpu_graph(c, 1, &g));
  return ssm_cpu_state_load(c->cpu, g, ssm_model_arch(c->model), path);
}

static ssm_status check_finite(const float *rows, int64_t count, int64_t vocab,
                               int64_t first_pos);
static ssm_status dump_rows(FILE *dump, const float *logits, int64_t vocab, int count,
                            const char *path);

static ssm_status cpu_generate(backend *b, const run_opts *o, int32_t first, int n, int32_t *out,
                               FILE *dump, int64_t *pos) {
  cpu_backend *c = (cpu_backend *)b;
  if (!c->sampled) {
    SSM_TRY(ssm_model_build(c->model, 1, &c->sampled));
    SSM_TRY(ssm_graph_add_sampler(c->sampled));
  }
  float st[SSM_SAMPLER_STATE_LEN] = {(float)o->temperature, (float)o->top_k, (float)o->top_p,
                                     (float)o->seed};
  ssm_type t = ssm_type_make(SSM_F32, 1, (int64_t[]){SSM_SAMPLER_STATE_LEN});
  SSM_TRY(ssm_cpu_state_write(c->cpu, SSM_SAMPLER_STATE, &t, st));
  float *logits = malloc(sizeof(float) * (size_t)b->vocab), id;
  if (!logits) abort();
  float *outs[2] = {logits, &id};
  size_t counts[2] = {(size_t)b->vocab, 1};
  ssm_status s = NULL;
  for (int k = 0; k < n && !s; k++) {
    s = ssm_cpu_run_outputs(c->cpu, c->sampled, k ? &out[k - 1] : &first, 2, outs, counts);
    if (!s) s = check_finite(logits, 1, b->vocab, *pos);
    if (!s && dump) s = dump_rows(dump, logits, b->vocab, 1, o->dump);
    *pos += 1;
    out[k] = (int32_t)id;
  }
  free(logits);
  return s;
}

static void cpu_destroy(backend *b) {
  cpu_backend *c = (cpu_backend *)b;
  ssm_graph_destroy(c->sampled);
  for (int i = 0; i < c->count; i++) ssm_graph_destroy(c->by_len[i]);
  ssm_cpu_destroy(c->cpu);
  ssm_st_close(c->st);
  ssm_model_destroy(c->model);
  free(c);
}

static ssm_status cpu_open(const run_opts *o, backend **out) {
  cpu_backend *c = calloc(1, sizeof *c);
  if (!c) abort();
  c->base = (backend){cpu_run, NULL, cpu_state_save, cpu_state_load, cpu_generate, cpu_destroy,
                      0, (int)o->chunk};
  ssm_status s = ssm_model_load(o->model, o->config, &c->model);
  if (!s && (!ssm_model_param(c->model, "vocab", &c->base.vocab) || c->base.vocab <= 0))
    s = ssm_status_new(SSM_ERR_INVALID, "%s: the architecture defines no 'vocab' param", o->model);
  if (!s) s = ssm_st_open(o->weights, &c->st);
  if (!s) s = ssm_cpu_create(c->st, &c->cpu);
  if (s) {
    cpu_destroy(&c->base);
    return s;
  }
  *out = &c->base;
  return NULL;
}

/* ---- Vulkan backend: a compiled bundle ---------------------------------- */

typedef struct {
  backend base;
  ssm_rt *rt;
  char tmp[64]; /* bundle compiled on the fly from a model directory */
} vk_backend;

static ssm_status vk_run(backend *b, const int32_t *tokens, int count, float *logits) {
  return ssm_rt_run(((vk_backend *)b)->rt, tokens, count, logits);
}

static ssm_status vk_state_save(backend *b, const char *path) {
  return ssm_rt_state_save(((vk_backend *)b)->rt, path);
}

static ssm_status vk_state_load(backend *b, const char *path) {
  return ssm_rt_state_load(((vk_backend *)b)->rt, path);
}

/* With --validate, any message of the validation layer fails the run. */
static ssm_status vk_finish(backend *b) {
  ssm_vk *vk = ssm_rt_vk(((vk_backend *)b)->rt);
  if (!ssm_vk_validation_enabled(vk)) return NULL;
  int e = ssm_vk_validation_errors(vk), w = ssm_vk_validation_warnings(vk);
  if (!e && !w) return NULL;
  const char *first = ssm_vk_validation_message(vk, 0);
  return ssm_status_new(SSM_ERR_DEVICE, "the Vulkan validation layer reported %d errors and %d "
                        "warnings; first: %s", e, w, first ? first : "?");
}

typedef struct {
  ssm_rt *rt;
  float *logits;
  int64_t vocab, *pos;
  FILE *dump;
  const char *path;
  ssm_status err;
} vk_dumper;

/* Called after every step when dumping: that step's logits to the file. */
static int vk_dump_step(int32_t id, void *user) {
  vk_dumper *d = user;
  d->err = ssm_rt_read_logits(d->rt, d->logits);
  if (!d->err) d->err = check_finite(d->logits, 1, d->vocab, *d->pos);
  if (!d->err) d->err = dump_rows(d->dump, d->logits, d->vocab, 1, d->path);
  *d->pos += 1;
  return d->err != NULL;
}

static ssm_status vk_generate(backend *b, const run_opts *o, int32_t first, int n, int32_t *out,
                              FILE *dump, int64_t *pos) {
  ssm_rt *rt = ((vk_backend *)b)->rt;
  SSM_TRY(ssm_rt_set_sampler(rt, (float)o->temperature, (int)o->top_k, (float)o->top_p, o->seed));
  if (!dump) {
    *pos += n;
    return ssm_rt_generate(rt, first, n, out, NULL, NULL);
  }
  vk_dumper d = {rt, malloc(sizeof(float) * (size_t)b->vocab), b->vocab, pos, dump, o->dump, NULL};
  if (!d.logits) abort();
  ssm_status s = ssm_rt_generate(rt, first, n, out, vk_dump_step, &d);
  free(d.logits);
  if (d.err) {
    ssm_status_free(s);
    return d.err;
  }
  return s;
}

static void vk_destroy(backend *b) {
  vk_backend *v = (vk_backend *)b;
  ssm_rt_close(v->rt);
  if (v->tmp[0]) remove(v->tmp);
  free(v);
}

static ssm_status vk_open(const run_opts *o, backend **out) {
  vk_backend *v = calloc(1, sizeof *v);
  if (!v) abort();
  v->base = (backend){vk_run, vk_finish, vk_state_save, vk_state_load, vk_generate, vk_destroy,
                      0, 0};
  const char *bundle = o->model;
  ssm_status s = NULL;
  if (o->validation && !ssm_vk_validation_available())
    s = ssm_status_new(SSM_ERR_UNSUPPORTED, "--validate: VK_LAYER_KHRONOS_validation is not "
                       "installed (Debian: apt-get install vulkan-validationlayers)");
  if (!s && !ends_with(o->model, ".ssmb")) { /* a model: compile it first */
    snprintf(v->tmp, sizeof v->tmp, "/tmp/ssmc-%d.ssmb", (int)getpid());
    ssm_model *m = NULL;
    s = ssm_model_load(o->model, o->config, &m);
    ssm_compile_opts co = {.prefill_tokens = (int)o->chunk};
    if (!s) s = ssm_compile(m, &co, v->tmp);
    ssm_model_destroy(m);
    bundle = v->tmp;
  }
  ssm_rt_opts ro = {.device = (int)o->device, .validation = o->validation};
  if (!s) s = ssm_rt_open(bundle, o->weights, &ro, &v->rt);
  if (s) {
    vk_destroy(&v->base);
    return s;
  }
  v->base.vocab = ssm_rt_vocab(v->rt);
  v->base.chunk = ssm_rt_prefill_tokens(v->rt);
  *out = &v->base;
  return NULL;
}

static ssm_status backend_open(const run_opts *o, backend **out) {
  return !strcmp(o->backend, "cpu") ? cpu_open(o, out) : vk_open(o, out);
}

/* ---- generation loop ----------------------------------------------------- */

static int32_t argmax_row(const float *row, int64_t n) {
  int32_t best = 0;
  for (int64_t j = 1; j < n; j++)
    if (row[j] > row[best]) best = (int32_t)j;
  return best;
}

static ssm_status check_finite(const float *rows, int64_t count, int64_t vocab,
                               int64_t first_pos) {
  for (int64_t k = 0; k < count * vocab; k++)
    if (!isfinite(rows[k]))
      return ssm_status_new(SSM_ERR_INVALID,
                            "non-finite logit %g at position %lld (vocab index %lld): "
                            "the model or its weights produce inf/NaN",
                            rows[k], (long long)(first_pos + k / vocab),
                            (long long)(k % vocab));
  return NULL;
}

static ssm_status dump_rows(FILE *dump, const float *logits, int64_t vocab, int count,
                            const char *path) {
  if (fwrite(logits, sizeof(float) * (size_t)vocab, (size_t)count, dump) != (size_t)count)
    return ssm_status_new(SSM_ERR_IO, "--dump-logits %s: write failed", path);
  return NULL;
}

/* Feeds `count` tokens at position *pos, dumping their logits. */
static ssm_status feed(backend *b, const int32_t *tokens, int count, float *logits, FILE *dump,
                       const char *dump_path, int64_t *pos) {
  SSM_TRY(b->run(b, tokens, count, logits));
  SSM_TRY(check_finite(logits, count, b->vocab, *pos));
  if (dump) SSM_TRY(dump_rows(dump, logits, b->vocab, count, dump_path));
  *pos += count;
  return NULL;
}

/* Prefill in chunks the backend takes, the rest token by token, then decode
 * of o->n tokens into out_gen: with --greedy, logits come to the host and
 * the argmax is taken here; otherwise the backend's sampler draws each token
 * and feeds it to the next step itself (the last prompt token is its first
 * input, so the prompt's last logits never leave the device). */
static ssm_status generate(backend *b, const run_opts *o, const int32_t *prompt, int np,
                           int32_t *gen) {
  ssm_status s = NULL;
  FILE *dump = NULL;
  if (o->dump && !(dump = fopen(o->dump, "wb")))
    return ssm_status_new(SSM_ERR_IO, "--dump-logits %s: %s", o->dump, strerror(errno));
  int chunk = b->chunk > 0 ? b->chunk : 1;
  float *logits = malloc(sizeof(float) * (size_t)b->vocab * (size_t)chunk);
  if (!logits) abort();
  int64_t pos = 0;
  const float *last = logits;
  int sampled = !o->greedy && o->n > 0 && np > 0;
  if (sampled) np--; /* the sampler's first input */
  for (int at = 0; at < np && !s;) {
    int len = np - at >= chunk ? chunk : 1;
    s = feed(b, prompt + at, len, logits, dump, o->dump, &pos);
    last = logits + (size_t)(len - 1) * (size_t)b->vocab;
    at += len;
  }
  if (sampled) {
    if (!s) s = b->generate(b, o, prompt[np], (int)o->n, gen, dump, &pos);
  }
  for (long k = 0; k < o->n && !s && !sampled; k++) {
    gen[k] = argmax_row(last, b->vocab);
    if (k + 1 == o->n) break;
    s = feed(b, &gen[k], 1, logits, dump, o->dump, &pos);
    last = logits;
  }
  if (dump && fclose(dump) && !s)
    s = ssm_status_new(SSM_ERR_IO, "--dump-logits %s: %s", o->dump, strerror(errno));
  free(logits);
  return s;
}

/* Parses the options shared by run and bench. Returns 0 or a usage exit code. */
static int parse_run_opts(int argc, char **argv, run_opts *o, const char *cmd) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--greedy")) {
      o->greedy = 1;
      continue;
    }
    if (!strcmp(a, "--validate")) {
      o->validation = 1;
      continue;
    }
    static const char *const valued[] = {"--config", "--weights", "--tokens", "--dump-logits",
                                         "--backend", "-n", "--chunk", "--device", "--state-in",
                                         "--state-out", "--temperature", "--top-k", "--top-p",
                                         "--seed", NULL};
    int known = 0;
    for (int k = 0; valued[k]; k++) known |= !strcmp(a, valued[k]);
    if (a[0] == '-' && !known) {
      fprintf(stderr, "ssmc: %s: ", cmd);
      return usage_error("unknown option '%s'", a);
    }
    if (known && !v) return usage_error("option '%s' needs a value", a);
    if (!strcmp(a, "--config")) o->config = argv[++i];
    else if (!strcmp(a, "--weights")) o->weights = argv[++i];
    else if (!strcmp(a, "--tokens")) o->tokens = argv[++i];
    else if (!strcmp(a, "--dump-logits")) o->dump = argv[++i];
    else if (!strcmp(a, "--state-in")) o->state_in = argv[++i];
    else if (!strcmp(a, "--state-out")) o->state_out = argv[++i];
    else if (!strcmp(a, "--backend")) {
      o->backend = argv[++i];
      if (strcmp(o->backend, "cpu") && strcmp(o->backend, "vulkan"))
        return usage_error("--backend: expected cpu or vulkan, got '%s'", o->backend);
    } else if (!strcmp(a, "-n")) {
      if (!parse_int(argv[++i], 0, 1 << 24, &o->n))
        return usage_error("-n: expected a token count from 0 to 16777216, got '%s'", argv[i]);
    } else if (!strcmp(a, "--chunk")) {
      if (!parse_int(argv[++i], 1, 4096, &o->chunk))
        return usage_error("--chunk: expected a token count from 1 to 4096, got '%s'", argv[i]);
    } else if (!strcmp(a, "--device")) {
      if (!parse_int(argv[++i], 0, 1000, &o->device))
        return usage_error("--device: expected a device index (see `ssmc devices`), got '%s'", argv[i]);
    } else if (!strcmp(a, "--temperature")) {
      o->sampling = 1;
      if (!parse_double(argv[++i], 0, 1e6, 0, &o->temperature))
        return usage_error("--temperature: expected a number >= 0, got '%s'", argv[i]);
    } else if (!strcmp(a, "--top-k")) {
      o->sampling = 1;
      if (!parse_int(argv[++i], 0, INT32_MAX, &o->top_k))
        return usage_error("--top-k: expected a count >= 0 (0: off), got '%s'", argv[i]);
    } else if (!strcmp(a, "--top-p")) {
      o->sampling = 1;
      if (!parse_double(argv[++i], 0, 1, 1, &o->top_p))
        return usage_error("--top-p: expected a number in (0, 1] (1: off), got '%s'", argv[i]);
    } else if (!strcmp(a, "--seed")) {
      o->sampling = 1;
      if (!parse_int(argv[++i], 0, (1 << 24) - 1, &o->seed))
        return usage_error("--seed: expected an integer in [0, 16777215], got '%s'", argv[i]);
    } else if (!o->model) o->model = a;
    else return usage_error("unexpected argument '%s'", a);
  }
  if (o->greedy && o->sampling)
    return usage_error("--greedy: cannot be combined with --temperature, --top-k, --top-p or "
                       "--seed%s", "");
  if (!o->model) return usage_error("missing MODEL or BUNDLE%s", "");
  if (!o->weights) return usage_error("missing --weights DIR%s", "");
  if (!strcmp(o->backend, "cpu") && ends_with(o->model, ".ssmb"))
    return usage_error("--backend cpu runs a model (YAML or directory), not a bundle: %s", o->model);
  return 0;
}

static int cmd_run(int argc, char **argv) {
  run_opts o = {.n = 16, .chunk = 32, .device = -1, .backend = "vulkan", .top_p = 1};
  int rc = parse_run_opts(argc, argv, &o, "run");
  if (rc) return rc;
  if (!o.tokens) return usage_error("run: missing --tokens%s", "");
  int32_t *prompt, *gen = calloc((size_t)o.n + 1, sizeof *gen);
  int np;
  backend *b = NULL;
  ssm_status s = parse_tokens(o.tokens, &prompt, &np);
  if (s) {
    free(gen);
    return fail(s);
  }
  s = backend_open(&o, &b);
  if (!s && o.state_in) s = b->state_load(b, o.state_in);
  if (!s) s = generate(b, &o, prompt, np, gen);
  /* the state after every token fed; the last generated one was not fed */
  if (!s && o.state_out) s = b->state_save(b, o.state_out);
  if (!s && b->finish) s = b->finish(b);
  if (b) b->destroy(b);
  free(prompt);
  if (s) {
    free(gen);
    return fail(s);
  }
  for (long k = 0; k < o.n; k++) printf(k ? ",%d" : "%d", gen[k]);
  printf("\n");
  free(gen);
  return 0;
}

/* ---- ssmc compile / inspect / devices / bench ---------------------------- */

static int cmd_compile(int argc, char **argv) {
  const char *model = NULL, *config = NULL, *out = NULL, *dump = NULL;
  long prefill = 32;
  int no_fuse = 0;
  ssm_dtype dtype = SSM_F32;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--no-fuse")) {
      no_fuse = 1;
      continue;
    }
    if (a[0] == '-' && i + 1 >= argc) return usage_error("option '%s' needs a value", a);
    if (!strcmp(a, "--config")) config = argv[++i];
    else if (!strcmp(a, "--dump-ir")) dump = argv[++i];
    else if (!strcmp(a, "-o")) out = argv[++i];
    else if (!strcmp(a, "--chunk")) {
      if (!parse_int(argv[++i], 1, 4096, &prefill))
        return usage_error("--chunk: expected a token count from 1 to 4096, got '%s'", argv[i]);
    } else if (!strcmp(a, "--dtype")) {
      const char *d = argv[++i];
      if (!ssm_dtype_parse(d, strlen(d), &dtype) || dtype == SSM_I32)
        return usage_error("--dtype: expected f32, f16 or bf16, got '%s'", d);
    } else if (a[0] == '-') return usage_error("compile: unknown option '%s'", a);
    else if (!model) model = a;
    else return usage_error("compile: unexpected argument '%s'", a);
  }
  if (!model) return usage_error("compile: missing MODEL%s", "");
  if (!out) return usage_error("compile: missing -o OUT.ssmb%s", "");
  ssm_model *m = NULL;
  ssm_status s = ssm_model_load(model, config, &m);
  ssm_compile_opts co = {.prefill_tokens = (int)prefill, .dtype = dtype, .no_fuse = no_fuse,
                         .dump_dir = dump};
  if (!s) s = ssm_compile(m, &co, out);
  ssm_model_destroy(m);
  return s ? fail(s) : 0;
}

static int cmd_inspect(int argc, char **argv) {
  const char *path = NULL;
  int json = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (argv[i][0] == '-') return usage_error("inspect: unknown option '%s'", argv[i]);
    else if (!path) path = argv[i];
    else return usage_error("inspect: unexpected argument '%s'", argv[i]);
  }
  if (!path) return usage_error("inspect: missing BUNDLE%s", "");
  char *text;
  ssm_status s = ssm_inspect(path, json, &text);
  if (s) return fail(s);
  fputs(text, stdout);
  free(text);
  return 0;
}

static int cmd_devices(int argc, char **argv) {
  if (argc) return usage_error("devices: unexpected argument '%s'", argv[0]);
  ssm_vk_device_info *devs;
  int n;
  ssm_status s = ssm_vk_list_devices(&devs, &n);
  if (s) return fail(s);
  char *text = ssm_vk_format_devices(devs, n);
  fputs(text, stdout);
  free(text);
  free(devs);
  return 0;
}

static int cmd_bench(int argc, char **argv) {
  run_opts o = {.n = 128, .chunk = 32, .device = -1, .backend = "vulkan", .top_p = 1};
  int json = 0, k = 0;
  char **rest = malloc(sizeof(char *) * (size_t)(argc + 1));
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--json")) json = 1;
    else rest[k++] = argv[i];
  int rc = parse_run_opts(k, rest, &o, "bench");
  free(rest);
  if (rc) return rc;
  if (!ends_with(o.model, ".ssmb") || strcmp(o.backend, "vulkan"))
    return usage_error("bench: expected a compiled bundle (.ssmb), got '%s'", o.model);
  backend *b = NULL;
  ssm_status s = backend_open(&o, &b);
  if (s) return fail(s);
  ssm_bench_result r;
  s = ssm_bench(((vk_backend *)b)->rt, (int)o.n, &r);
  b->destroy(b);
  if (s) return fail(s);
  if (json)
    printf("{\"decode_tokens_per_s\": %.2f, \"decode_ms_per_token\": %.4f, "
           "\"decode_feedback_tokens_per_s\": %.2f, "
           "\"prefill_tokens_per_s\": %.2f, \"decode_tokens\": %d, \"prefill_tokens\": %d, "
           "\"weight_bytes\": %llu, \"decode_gb_per_s\": %.2f}\n",
           r.decode_tok_s, 1e3 / r.decode_tok_s, r.decode_feedback_tok_s, r.prefill_tok_s,
           r.decode_tokens,
           r.prefill_tokens, (unsigned long long)r.weight_bytes,
           r.decode_tok_s * (double)r.weight_bytes / 1e9);
  else
    printf("decode:  %.1f tokens/s (%.3f ms/token, %d tokens; weights %.1f MB -> %.1f GB/s)\n"
           "decode, token fed back on the device: %.1f tokens/s\n"
           "prefill: %.1f tokens/s (%d tokens)\n",
           r.decode_tok_s, 1e3 / r.decode_tok_s, r.decode_tokens, (double)r.weight_bytes / 1e6,
           r.decode_tok_s * (double)r.weight_bytes / 1e9, r.decode_feedback_tok_s,
           r.prefill_tok_s, r.prefill_tokens);
  return 0;
}

static void log_to_stderr(const char *msg, void *user) {
  fprintf(stderr, "ssmc: %s\n", msg);
}

int main(int argc, char **argv) {
  if (getenv("SSMC_VERBOSE")) ssm_log_set(log_to_stderr, NULL);
  if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
    fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "ir")) return cmd_ir(argc - 2, argv + 2);
  if (!strcmp(argv[1], "run")) return cmd_run(argc - 2, argv + 2);
  if (!strcmp(argv[1], "compile")) return cmd_compile(argc - 2, argv + 2);
  if (!strcmp(argv[1], "inspect")) return cmd_inspect(argc - 2, argv + 2);
  if (!strcmp(argv[1], "devices")) return cmd_devices(argc - 2, argv + 2);
  if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 2, argv + 2);
  return usage_error("unknown command '%s'", argv[1]);
}
