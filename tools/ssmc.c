/*
 * ssmc.c — the command-line driver. It parses flags, calls the library, and
 * is the only place that prints to the user or exits. Subcommands:
 *
 *   ssmc ir MODEL [--config config.json] [--seq T]
 *   ssmc run MODEL --weights DIR --tokens 1,2,3 [-n N] [--greedy]
 *            [--backend cpu] [--chunk C] [--dump-logits FILE] [--config F]
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
#include "runtime.h"

static const char usage[] =
    "usage:\n"
    "  ssmc ir MODEL [--config config.json] [--seq T]\n"
    "  ssmc run MODEL --weights DIR --tokens 1,2,3 [-n N] [--greedy]\n"
    "           [--backend cpu] [--chunk C] [--dump-logits FILE] [--config F]\n"
    "MODEL: an architecture YAML (needs --config), a Hugging Face model\n"
    "directory, or (ir only) an IR text file FILE.ssmir.\n";

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

static int cmd_ir(int argc, char **argv) {
  const char *model = NULL, *config = NULL;
  long seq = 1;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc) config = argv[++i];
    else if (!strcmp(argv[i], "--seq") && i + 1 < argc) {
      if (!parse_int(argv[++i], 1, 1 << 20, &seq))
        return usage_error("--seq: expected a token count from 1 to 1048576, got '%s'", argv[i]);
    } else if (argv[i][0] == '-') return usage_error("ir: unknown option '%s'", argv[i]);
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
    if (!s) s = ssm_graph_verify(g);
  } else {
    ssm_model *m = NULL;
    s = ssm_model_load(model, config, &m);
    if (!s) s = ssm_model_build(m, (int)seq, &g);
    ssm_model_destroy(m);
  }
  if (s) {
    ssm_graph_destroy(g);
    return fail(s);
  }
  char *text = ssm_graph_print(g);
  fputs(text, stdout);
  free(text);
  ssm_graph_destroy(g);
  return 0;
}

/* ---- ssmc run ----------------------------------------------------------- */

typedef struct {
  const char *model, *config, *weights, *tokens, *dump, *backend;
  long n, chunk;
} run_opts;

/* Graphs built per token count, so prefill chunks of each size are built once. */
typedef struct {
  ssm_model *model;
  ssm_graph *by_len[64];
  int len[64];
  int count;
} graph_cache;

static ssm_status cache_get(graph_cache *gc, int tokens, ssm_graph **out) {
  for (int i = 0; i < gc->count; i++)
    if (gc->len[i] == tokens) {
      *out = gc->by_len[i];
      return NULL;
    }
  SSM_ASSERT(gc->count < 64);
  SSM_TRY(ssm_model_build(gc->model, tokens, out));
  gc->by_len[gc->count] = *out;
  gc->len[gc->count++] = tokens;
  return NULL;
}

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

static ssm_status run_cpu(const run_opts *o, const int32_t *prompt, int np,
                          int32_t **out_gen) {
  ssm_status s = NULL;
  ssm_model *m = NULL;
  ssm_st *st = NULL;
  ssm_cpu *cpu = NULL;
  graph_cache gc = {0};
  FILE *dump = NULL;
  float *logits = NULL;
  int32_t *gen = calloc((size_t)o->n + 1, sizeof *gen);
  int64_t vocab = 0;

  if ((s = ssm_model_load(o->model, o->config, &m))) goto done;
  if (!ssm_model_param(m, "vocab", &vocab) || vocab <= 0) {
    s = ssm_status_new(SSM_ERR_INVALID, "%s: the architecture defines no 'vocab' param",
                       o->model);
    goto done;
  }
  gc.model = m;
  if ((s = ssm_st_open(o->weights, &st))) goto done;
  if ((s = ssm_cpu_create(st, &cpu))) goto done;
  if (o->dump && !(dump = fopen(o->dump, "wb"))) {
    s = ssm_status_new(SSM_ERR_IO, "--dump-logits %s: %s", o->dump, strerror(errno));
    goto done;
  }
  int chunk = (int)o->chunk;
  logits = malloc(sizeof(float) * (size_t)vocab * (size_t)chunk);
  /* prefill in chunks */
  int64_t pos = 0;
  for (int at = 0; at < np; at += chunk) {
    int len = np - at < chunk ? np - at : chunk;
    ssm_graph *g;
    if ((s = cache_get(&gc, len, &g))) goto done;
    if ((s = ssm_cpu_run(cpu, g, prompt + at, logits, (size_t)(len * vocab)))) goto done;
    if ((s = check_finite(logits, len, vocab, pos))) goto done;
    if (dump && fwrite(logits, sizeof(float) * (size_t)vocab, (size_t)len, dump) != (size_t)len) {
      s = ssm_status_new(SSM_ERR_IO, "--dump-logits %s: write failed", o->dump);
      goto done;
    }
    pos += len;
  }
  /* greedy decode: the last row picks the next token */
  const float *last = logits + (size_t)((np - 1) % chunk) * (size_t)vocab;
  for (long k = 0; k < o->n; k++) {
    gen[k] = argmax_row(last, vocab);
    if (k + 1 == o->n) break;
    ssm_graph *g;
    if ((s = cache_get(&gc, 1, &g))) goto done;
    if ((s = ssm_cpu_run(cpu, g, &gen[k], logits, (size_t)vocab))) goto done;
    if ((s = check_finite(logits, 1, vocab, pos))) goto done;
    if (dump && fwrite(logits, sizeof(float), (size_t)vocab, dump) != (size_t)vocab) {
      s = ssm_status_new(SSM_ERR_IO, "--dump-logits %s: write failed", o->dump);
      goto done;
    }
    pos++;
    last = logits;
  }
done:
  if (dump && fclose(dump) && !s)
    s = ssm_status_new(SSM_ERR_IO, "--dump-logits %s: %s", o->dump, strerror(errno));
  free(logits);
  for (int i = 0; i < gc.count; i++) ssm_graph_destroy(gc.by_len[i]);
  ssm_cpu_destroy(cpu);
  ssm_st_close(st);
  ssm_model_destroy(m);
  if (s) {
    free(gen);
    gen = NULL;
  }
  *out_gen = gen;
  return s;
}

static int cmd_run(int argc, char **argv) {
  run_opts o = {.n = 16, .chunk = 64, .backend = "cpu"};
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--greedy")) continue;
    if (a[0] == '-' && !v) return usage_error("run: option '%s' needs a value", a);
    if (!strcmp(a, "--config")) o.config = argv[++i];
    else if (!strcmp(a, "--weights")) o.weights = argv[++i];
    else if (!strcmp(a, "--tokens")) o.tokens = argv[++i];
    else if (!strcmp(a, "--dump-logits")) o.dump = argv[++i];
    else if (!strcmp(a, "--backend")) o.backend = argv[++i];
    else if (!strcmp(a, "-n")) {
      if (!parse_int(argv[++i], 0, 1 << 24, &o.n))
        return usage_error("-n: expected a token count from 0 to 16777216, got '%s'", argv[i]);
    } else if (!strcmp(a, "--chunk")) {
      if (!parse_int(argv[++i], 1, 4096, &o.chunk))
        return usage_error("--chunk: expected a token count from 1 to 4096, got '%s'", argv[i]);
    } else if (a[0] == '-') return usage_error("run: unknown option '%s'", a);
    else if (!o.model) o.model = a;
    else return usage_error("run: unexpected argument '%s'", a);
  }
  if (!o.model) return usage_error("run: missing MODEL%s", "");
  if (!o.weights) return usage_error("run: missing --weights DIR%s", "");
  if (!o.tokens) return usage_error("run: missing --tokens%s", "");
  if (strcmp(o.backend, "cpu"))
    return usage_error("--backend: '%s' is not available in this build (use cpu)", o.backend);

  int32_t *prompt, *gen;
  int np;
  ssm_status s = parse_tokens(o.tokens, &prompt, &np);
  if (s) return fail(s);
  s = run_cpu(&o, prompt, np, &gen);
  free(prompt);
  if (s) return fail(s);
  for (long k = 0; k < o.n; k++) printf(k ? ",%d" : "%d", gen[k]);
  printf("\n");
  free(gen);
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
  return usage_error("unknown command '%s'", argv[1]);
}
