/*
 * ssmc.c — the command-line driver. It parses flags, calls the library, and
 * is the only place that prints to the user or exits. Subcommands:
 *
 *   compile, ir, run, inspect, bench, devices, tokenize (see `usage` below and
 *   DESIGN.md's command line).
 *
 * MODEL is an architecture YAML (with --config), a Hugging Face model
 * directory, or (for `ir`) an IR text file ending in .ssmir.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "codegen/codegen.h"
#include "passes/passes.h"
#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"
#include <unistd.h>

static const char usage[] =
    "usage:\n"
    "  ssmc compile MODEL [--config config.json] -o OUT.ssmb [--chunk T] [--dtype f32]\n"
    "               [--max-seq N] [--no-fuse] [--dump-ir DIR]\n"
    "  ssmc ir MODEL [--config config.json] [--seq T] [--max-seq N] [--after PASS|all]\n"
    "  ssmc run BUNDLE|MODEL --weights DIR (--tokens 1,2,3 | --prompt TEXT) [-n N]\n"
    "           [--greedy | --temperature T --top-k K --top-p P --seed S]\n"
    "           [--tokenizer tokenizer.json] [--eos ID]\n"
    "           [--backend vulkan|cpu] [--device N] [--chunk T] [--dump-logits FILE]\n"
    "           [--config F] [--max-seq N] [--validate] [--state-in FILE] [--state-out FILE]\n"
    "  ssmc inspect BUNDLE [--json]\n"
    "  ssmc bench BUNDLE --weights DIR [-n N] [--device N] [--json]\n"
    "  ssmc devices\n"
    "  ssmc tokenize --tokenizer tokenizer.json TEXT|-   (prints the ids, comma-separated)\n"
    "  ssmc tokenize --tokenizer tokenizer.json --decode 1,2,3   (prints the text)\n"
    "MODEL: an architecture YAML (needs --config), a Hugging Face model\n"
    "directory, or (ir only) an IR text file FILE.ssmir.\n"
    "--max-seq N: the positions a KV cache holds (default 2048); a bundle keeps\n"
    "the value it was compiled with.\n"
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

#define MAX_SEQ_LIMIT (1 << 24)

/* Parses --max-seq's value into *out; returns 0 on error. */
static int parse_max_seq(const char *s, long *out) { return parse_int(s, 1, MAX_SEQ_LIMIT, out); }

/* Loads MODEL and applies --max-seq (0: the default). */
static ssm_status load_model(const char *model, const char *config, long max_seq, ssm_model **out) {
  SSM_TRY(ssm_model_load(model, config, out));
  ssm_status s = max_seq ? ssm_model_set_param(*out, "max_seq", max_seq) : NULL;
  if (s) {
    ssm_model_destroy(*out);
    *out = NULL;
  }
  return s;
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
  long seq = 1, max_seq = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc) config = argv[++i];
    else if (!strcmp(argv[i], "--max-seq") && i + 1 < argc) {
      if (!parse_max_seq(argv[++i], &max_seq))
        return usage_error("--max-seq: expected a position count from 1 to 16777216, got '%s'",
                           argv[i]);
    }
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
                                 !strcmp(argv[i], "--seq") || !strcmp(argv[i], "--max-seq")))
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
    s = load_model(model, config, max_seq, &m);
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
  const char *prompt, *tokenizer;
  long n, chunk, device, max_seq, eos;
  int validation;
  int greedy;   /* --greedy: logits to the host, argmax there, every step */
  int sampling; /* a sampling option was given */
  double temperature, top_p; /* the sampler (greedy when temperature is 0) */
  long top_k, seed;
} run_opts;

/* Called with each generated id; returns nonzero to stop (end of text). */
typedef int (*token_fn)(int32_t id, void *user);

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
                         int32_t *out, FILE *dump, int64_t *pos, token_fn on_token, void *user,
                         long *out_count);
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
                               FILE *dump, int64_t *pos, token_fn on_token, void *user,
                               long *out_count) {
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
    if (!s) *out_count = k + 1;
    if (!s && on_token && on_token(out[k], user)) break;
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
  ssm_status s = load_model(o->model, o->config, o->max_seq, &c->model);
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
  token_fn on_token; /* the caller's, may be NULL */
  void *user;
  long count;
} vk_dumper;

/* Called after every step: that step's logits to the dump file (when
 * dumping), then the caller's callback. */
static int vk_dump_step(int32_t id, void *user) {
  vk_dumper *d = user;
  if (d->dump) {
    d->err = ssm_rt_read_logits(d->rt, d->logits);
    if (!d->err) d->err = check_finite(d->logits, 1, d->vocab, *d->pos);
    if (!d->err) d->err = dump_rows(d->dump, d->logits, d->vocab, 1, d->path);
  }
  *d->pos += 1;
  d->count++;
  if (d->err) return 1;
  return d->on_token ? d->on_token(id, d->user) : 0;
}

static ssm_status vk_generate(backend *b, const run_opts *o, int32_t first, int n, int32_t *out,
                              FILE *dump, int64_t *pos, token_fn on_token, void *user,
                              long *out_count) {
  ssm_rt *rt = ((vk_backend *)b)->rt;
  SSM_TRY(ssm_rt_set_sampler(rt, (float)o->temperature, (int)o->top_k, (float)o->top_p, o->seed));
  int64_t before = ssm_rt_position(rt);
  if (!dump && !on_token) {
    ssm_status s = ssm_rt_generate(rt, first, n, out, NULL, NULL);
    *pos += ssm_rt_position(rt) - before;
    *out_count = s ? 0 : n;
    return s;
  }
  vk_dumper d = {rt, dump ? malloc(sizeof(float) * (size_t)b->vocab) : NULL, b->vocab, pos,
                 dump, o->dump, NULL, on_token, user, 0};
  if (dump && !d.logits) abort();
  ssm_status s = ssm_rt_generate(rt, first, n, out, vk_dump_step, &d);
  free(d.logits);
  *out_count = d.count;
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
    s = load_model(o->model, o->config, o->max_seq, &m);
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
 * of up to o->n tokens into gen (*out_count says how many): with --greedy,
 * logits come to the host and the argmax is taken here; otherwise the
 * backend's sampler draws each token and feeds it to the next step itself
 * (the last prompt token is its first input, so the prompt's last logits
 * never leave the device). */
static ssm_status generate(backend *b, const run_opts *o, const int32_t *prompt, int np,
                           int32_t *gen, token_fn on_token, void *user, long *out_count) {
  ssm_status s = NULL;
  FILE *dump = NULL;
  *out_count = 0;
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
    if (!s) s = b->generate(b, o, prompt[np], (int)o->n, gen, dump, &pos, on_token, user, out_count);
  }
  for (long k = 0; k < o->n && !s && !sampled; k++) {
    gen[k] = argmax_row(last, b->vocab);
    *out_count = k + 1;
    if (k + 1 == o->n || (on_token && on_token(gen[k], user))) break;
    s = feed(b, &gen[k], 1, logits, dump, o->dump, &pos);
    last = logits;
  }
  if (dump && fclose(dump) && !s)
    s = ssm_status_new(SSM_ERR_IO, "--dump-logits %s: %s", o->dump, strerror(errno));
  free(logits);
  return s;
}

/* ---- text in, text out --------------------------------------------------- */

typedef struct {
  ssm_tok_stream *stream;
  long eos;
} text_out;

/* Prints each token's text as soon as it completes a UTF-8 character; stops
 * at the end-of-text token, which is not printed. */
static int print_token(int32_t id, void *user) {
  text_out *t = user;
  if (t->eos >= 0 && id == t->eos) return 1;
  const char *text;
  size_t len;
  ssm_status s = ssm_tok_stream_feed(t->stream, id, &text, &len);
  if (s) {
    ssm_status_free(s);
    return 1;
  }
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return 0;
}

/* The end-of-text id: --eos, else eos_token_id of the weights directory's
 * config.json, else the tokenizer's <|endoftext|>, else none (-1). */
static long find_eos(const run_opts *o, const ssm_tok *tok) {
  if (o->eos >= 0) return o->eos;
  char path[4096], *text;
  size_t n;
  snprintf(path, sizeof path, "%s/config.json", o->weights);
  ssm_status s = ssm_file_read(path, 1 << 24, &text, &n);
  long eos = -1;
  if (!s) {
    cJSON *j = cJSON_Parse(text);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id");
    if (cJSON_IsNumber(e) && e->valuedouble >= 0) eos = (long)e->valuedouble;
    cJSON_Delete(j);
    free(text);
  }
  ssm_status_free(s);
  if (eos < 0) eos = ssm_tok_token_id(tok, "<|endoftext|>");
  return eos;
}

static ssm_status run_prompt(backend *b, const run_opts *o) {
  char path[4096];
  const char *tp = o->tokenizer;
  if (!tp) {
    snprintf(path, sizeof path, "%s/tokenizer.json", o->weights);
    tp = path;
  }
  ssm_tok *tok;
  ssm_status s = ssm_tok_load(tp, &tok);
  if (s && !o->tokenizer)
    return ssm_status_wrap(s, "--prompt needs a tokenizer (--tokenizer FILE, or tokenizer.json "
                           "in the weights directory)");
  if (s) return s;
  int32_t *ids = NULL;
  size_t n = 0;
  s = ssm_tok_encode(tok, o->prompt, strlen(o->prompt), &ids, &n);
  if (!s && !n) s = ssm_status_new(SSM_ERR_INVALID, "--prompt: the text has no tokens");
  int32_t *gen = calloc((size_t)o->n + 1, sizeof *gen);
  text_out t = {ssm_tok_stream_new(tok, 1), find_eos(o, tok)};
  long count = 0;
  if (!s) {
    fputs(o->prompt, stdout);
    fflush(stdout);
    s = generate(b, o, ids, (int)n, gen, print_token, &t, &count);
    const char *rest;
    size_t len;
    ssm_tok_stream_flush(t.stream, &rest, &len);
    fwrite(rest, 1, len, stdout);
    fputs("\n", stdout);
  }
  ssm_tok_stream_free(t.stream);
  free(gen);
  free(ids);
  ssm_tok_free(tok);
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
                                         "--backend", "-n", "--chunk", "--device", "--max-seq",
                                         "--state-in", "--state-out", "--prompt", "--tokenizer",
                                         "--eos", "--temperature", "--top-k", "--top-p", "--seed",
                                         NULL};
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
    else if (!strcmp(a, "--prompt")) o->prompt = argv[++i];
    else if (!strcmp(a, "--tokenizer")) o->tokenizer = argv[++i];
    else if (!strcmp(a, "--eos")) {
      if (!parse_int(argv[++i], 0, INT32_MAX, &o->eos))
        return usage_error("--eos: expected a token id, got '%s'", argv[i]);
    }
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
    } else if (!strcmp(a, "--max-seq")) {
      if (!parse_max_seq(argv[++i], &o->max_seq))
        return usage_error("--max-seq: expected a position count from 1 to 16777216, got '%s'",
                           argv[i]);
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
  if (o->max_seq && ends_with(o->model, ".ssmb"))
    return usage_error("--max-seq is fixed when a bundle is compiled (ssmc compile --max-seq): %s",
                       o->model);
  return 0;
}

static int cmd_run(int argc, char **argv) {
  run_opts o = {.n = 16, .chunk = 32, .device = -1, .eos = -1, .backend = "vulkan", .top_p = 1};
  int rc = parse_run_opts(argc, argv, &o, "run");
  if (rc) return rc;
  if (!o.tokens == !o.prompt) return usage_error("run: give --tokens IDS or --prompt TEXT%s", "");
  int32_t *prompt = NULL, *gen = calloc((size_t)o.n + 1, sizeof *gen);
  int np = 0;
  long count = 0;
  backend *b = NULL;
  ssm_status s = o.tokens ? parse_tokens(o.tokens, &prompt, &np) : NULL;
  if (!s) s = backend_open(&o, &b);
  if (!s && o.state_in) s = b->state_load(b, o.state_in);
  if (!s) s = o.prompt ? run_prompt(b, &o) : generate(b, &o, prompt, np, gen, NULL, NULL, &count);
  /* the state after every token fed; the last generated one was not fed */
  if (!s && o.state_out) s = b->state_save(b, o.state_out);
  if (!s && b->finish) s = b->finish(b);
  if (b) b->destroy(b);
  free(prompt);
  if (s) {
    free(gen);
    return fail(s);
  }
  if (o.tokens) {
    for (long k = 0; k < count; k++) printf(k ? ",%d" : "%d", gen[k]);
    printf("\n");
  }
  free(gen);
  return 0;
}

/* ---- ssmc compile / inspect / devices / bench ---------------------------- */

static int cmd_compile(int argc, char **argv) {
  const char *model = NULL, *config = NULL, *out = NULL, *dump = NULL;
  long prefill = 32, max_seq = 0;
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
    } else if (!strcmp(a, "--max-seq")) {
      if (!parse_max_seq(argv[++i], &max_seq))
        return usage_error("--max-seq: expected a position count from 1 to 16777216, got '%s'",
                           argv[i]);
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
  ssm_status s = load_model(model, config, max_seq, &m);
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

/* ---- ssmc tokenize ------------------------------------------------------ */

/* Reads all of stdin (for TEXT "-"). */
static char *read_stdin(size_t *out_n) {
  size_t cap = 4096, n = 0, r;
  char *buf = malloc(cap);
  while (buf && (r = fread(buf + n, 1, cap - n, stdin)) > 0)
    if ((n += r) == cap) buf = realloc(buf, cap *= 2);
  *out_n = n;
  return buf;
}

static int cmd_tokenize(int argc, char **argv) {
  const char *path = NULL, *text = NULL, *decode = NULL;
  for (int i = 0; i < argc; i++) {
    if ((!strcmp(argv[i], "--tokenizer") || !strcmp(argv[i], "--decode")) && i + 1 == argc)
      return usage_error("tokenize: option '%s' needs a value", argv[i]);
    if (!strcmp(argv[i], "--tokenizer")) path = argv[++i];
    else if (!strcmp(argv[i], "--decode")) decode = argv[++i];
    else if (argv[i][0] == '-' && argv[i][1]) return usage_error("tokenize: unknown option '%s'", argv[i]);
    else if (!text) text = argv[i];
    else return usage_error("tokenize: unexpected argument '%s'", argv[i]);
  }
  if (!path) return usage_error("tokenize: missing --tokenizer FILE%s", "");
  if (!text == !decode) return usage_error("tokenize: give either TEXT or --decode IDS%s", "");
  ssm_tok *tok;
  ssm_status s = ssm_tok_load(path, &tok);
  if (s) return fail(s);
  if (decode) {
    int32_t *ids;
    int n;
    if ((s = parse_tokens(decode, &ids, &n))) {
      ssm_status_free(s);
      ssm_tok_free(tok);
      return fail(ssm_status_new(SSM_ERR_INVALID,
                                 "--decode: expected comma-separated token ids, got '%s'", decode));
    }
    char *out;
    size_t len;
    s = ssm_tok_decode(tok, ids, (size_t)n, 0, &out, &len);
    free(ids);
    ssm_tok_free(tok);
    if (s) return fail(s);
    fwrite(out, 1, len, stdout);
    putchar('\n');
    free(out);
    return 0;
  }
  size_t len = strlen(text);
  char *owned = !strcmp(text, "-") ? read_stdin(&len) : NULL;
  int32_t *ids;
  size_t n;
  s = ssm_tok_encode(tok, owned ? owned : text, len, &ids, &n);
  free(owned);
  ssm_tok_free(tok);
  if (s) return fail(s);
  for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
  putchar('\n');
  free(ids);
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
  if (!strcmp(argv[1], "tokenize")) return cmd_tokenize(argc - 2, argv + 2);
  return usage_error("unknown command '%s'", argv[1]);
}
