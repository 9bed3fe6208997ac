/*
 * backend.c — the CPU backend: the reference interpreter (interp.c) running
 * a model's graphs, built from its description once per token count.
 *
 * It is the yardstick, not the fast path: every run executes the IR op by
 * op. Its state tensors are the ones the decode graph declares; the sampler
 * is the decode graph with `sample` added (ssm_graph_add_sampler), exactly
 * as a bundle's decode program has it.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "passes/passes.h"
#include "runtime/cpu/cpu.h"

typedef struct {
  int tokens;
  ssm_graph *g;
} sized_graph;

typedef struct {
  ssm_backend base;
  ssm_model *model;
  ssm_st *st;
  ssm_cpu *cpu;
  SSM_VEC(sized_graph) graphs;
  ssm_graph *sampled; /* the decode graph with its sampler */
  ssm_graph *batched; /* the batched graph of b->slots rows with its sampler (made when first used) */
  float *brows;       /* its logits and ids */
  float sampler[SSM_SAMPLER_STATE_LEN];
  SSM_VEC(ssm_backend_state) states;
  float *logits; /* one row, for generate */
  ssm_dtype dtype; /* of matmul and embed weights (the weights pass) */
} cpu_backend;

/* The model's graph for `count` tokens with its weights in c->dtype: values
 * rounded to it as they load, like the 16-bit weights of a bundle. */
static ssm_status build(cpu_backend *c, int count, ssm_graph **out) {
  SSM_TRY(ssm_model_build(c->model, count, out));
  ssm_pass_opts po = {.weight_dtype = c->dtype};
  char note[160];
  ssm_status s = ssm_pass_weights(*out, &po, note, sizeof note);
  if (s) {
    ssm_graph_destroy(*out);
    *out = NULL;
  }
  return s;
}

/* The graph for `count` tokens, built once. */
static ssm_status graph_for(cpu_backend *c, int count, ssm_graph **out) {
  for (size_t i = 0; i < c->graphs.n; i++)
    if (c->graphs.items[i].tokens == count) {
      *out = c->graphs.items[i].g;
      return NULL;
    }
  SSM_TRY(build(c, count, out));
  ssm_status s = ssm_vec_push(&c->graphs, ((sized_graph){count, *out}));
  if (s) {
    ssm_graph_destroy(*out);
    *out = NULL;
  }
  return ssm_status_wrap(s, "the CPU backend's graphs");
}

static ssm_status write_sampler(cpu_backend *c) {
  ssm_type t = ssm_type_make(SSM_F32, 1, (int64_t[]){SSM_SAMPLER_STATE_LEN});
  return ssm_cpu_state_write(c->cpu, SSM_SAMPLER_STATE, &t, c->sampler);
}

static ssm_status cpu_run_tokens(ssm_backend *b, const int32_t *tokens, int count, float *logits) {
  cpu_backend *c = (cpu_backend *)b;
  if (count < 1) return ssm_status_new(SSM_ERR_INVALID, "a run needs at least one token");
  ssm_graph *g;
  SSM_TRY(graph_for(c, count, &g));
  ssm_cpu_set_position(c->cpu, b->position);
  float *out = logits;
  if (!out)
    SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)count * (size_t)b->vocab, sizeof(float), (void **)&out),
                            "the logits of %d tokens", count));
  ssm_status s = ssm_cpu_run(c->cpu, g, tokens, out, (size_t)count * (size_t)b->vocab);
  if (out != logits) free(out);
  if (!s) b->position = ssm_cpu_position(c->cpu);
  return s;
}

static ssm_status cpu_reset(ssm_backend *b) {
  cpu_backend *c = (cpu_backend *)b;
  ssm_cpu_reset(c->cpu);
  b->position = 0;
  c->sampler[4] = 0;
  return write_sampler(c);
}

static ssm_status cpu_set_sampler(ssm_backend *b, const float *state) {
  cpu_backend *c = (cpu_backend *)b;
  memcpy(c->sampler, state, sizeof c->sampler);
  return write_sampler(c);
}

static ssm_status cpu_set_seen(ssm_backend *b, const float *words) {
  cpu_backend *c = (cpu_backend *)b;
  ssm_type t = ssm_type_make(SSM_F32, 1, (int64_t[]){SSM_SEEN_WORDS(b->vocab)});
  return ssm_cpu_state_write(c->cpu, SSM_SEEN_STATE, &t, words);
}

static ssm_status cpu_generate(ssm_backend *b, int32_t first, int n, int want_logits,
                               int32_t *out_ids, int *out_count, ssm_step_fn on_step, void *user) {
  cpu_backend *c = (cpu_backend *)b;
  if (!c->sampled) {
    SSM_TRY(build(c, 1, &c->sampled));
    SSM_TRY(ssm_graph_add_sampler(c->sampled, 0));
  }
  if (!c->logits)
    SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)b->vocab, sizeof(float), (void **)&c->logits),
                            "a row of logits"));
  float id;
  float *outs[2] = {c->logits, &id};
  size_t counts[2] = {(size_t)b->vocab, 1};
  int32_t input = first;
  while (*out_count < n) {
    ssm_cpu_set_position(c->cpu, b->position);
    SSM_TRY(ssm_cpu_run_outputs(c->cpu, c->sampled, &input, 2, outs, counts));
    b->position = ssm_cpu_position(c->cpu);
    if (id == -1) return ssm_sampler_nonfinite(b->position - 1);
    if (id == SSM_SAMPLE_NOMEM)
      return ssm_nomem((size_t)b->vocab * (sizeof(double) + sizeof(float)), "sampling");
    input = out_ids[(*out_count)++] = (int32_t)id;
    if (on_step && on_step(input, want_logits ? c->logits : NULL, user)) break;
  }
  return NULL;
}

static ssm_status cpu_state(cpu_backend *c, int i, float **out) {
  return ssm_cpu_state(c->cpu, c->states.items[i].name, &c->states.items[i].type, out);
}

static ssm_status cpu_state_read(ssm_backend *b, int i, void *dst) {
  float *p;
  SSM_TRY(cpu_state((cpu_backend *)b, i, &p));
  memcpy(dst, p, (size_t)ssm_type_numel(&b->states[i].type) * 4);
  return NULL;
}

static ssm_status cpu_state_write(ssm_backend *b, int i, const void *src) {
  float *p;
  SSM_TRY(cpu_state((cpu_backend *)b, i, &p));
  memcpy(p, src, (size_t)ssm_type_numel(&b->states[i].type) * 4);
  return NULL;
}

/* A snapshot: every state tensor, one after another, in host memory (the
 * interpreter's state lives there too). */
typedef struct {
  ssm_snapshot base;
  float *data;
} cpu_snapshot;

static uint64_t state_floats(const ssm_backend *b) {
  uint64_t n = 0;
  for (int i = 0; i < b->nstates; i++) n += (uint64_t)ssm_type_numel(&b->states[i].type);
  return n;
}

static ssm_status cpu_snapshot_take(ssm_backend *b, ssm_snapshot **inout) {
  cpu_snapshot *s = (cpu_snapshot *)*inout;
  if (!s) {
    uint64_t n = state_floats(b);
    float *data;
    SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)n, sizeof(float), (void **)&data), "snapshot"));
    ssm_status e = ssm_alloc(1, sizeof *s, (void **)&s);
    if (e) {
      free(data);
      return ssm_status_wrap(e, "snapshot");
    }
    *s = (cpu_snapshot){{b, 0, n * 4}, data};
    *inout = &s->base;
  }
  float *at = s->data;
  for (int i = 0; i < b->nstates; i++) {
    SSM_TRY(cpu_state_read(b, i, at));
    at += ssm_type_numel(&b->states[i].type);
  }
  s->base.position = b->position;
  return NULL;
}

static ssm_status cpu_restore(ssm_backend *b, const ssm_snapshot *snap) {
  const float *at = ((const cpu_snapshot *)snap)->data;
  for (int i = 0; i < b->nstates; i++) {
    SSM_TRY(cpu_state_write(b, i, at));
    at += ssm_type_numel(&b->states[i].type);
  }
  b->position = snap->position;
  return NULL;
}

static void cpu_snapshot_free(ssm_backend *b, ssm_snapshot *snap) {
  free(((cpu_snapshot *)snap)->data);
  free(snap);
}

/* ---- the batched graph: the slots are the interpreter's states named
 * SSM_SLOTS_PREFIX + a state's name, row b sequence b's ---------------------- */

/* The slots' copy of state i ([slots, its shape]), made zeroed when first used. */
static ssm_status slots_state(cpu_backend *c, const char *name, const ssm_type *one, float **out) {
  ssm_type t = *one;
  SSM_ASSERT(t.rank < SSM_MAX_RANK);
  memmove(t.dims + 1, t.dims, sizeof t.dims[0] * (size_t)t.rank);
  t.dims[0] = c->base.slots;
  t.rank++;
  char full[256];
  if (snprintf(full, sizeof full, SSM_SLOTS_PREFIX "%s", name) >= (int)sizeof full)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "state '%.64s...': a name this long has no slots", name);
  return ssm_cpu_state(c->cpu, full, &t, out);
}

static ssm_status cpu_slot_copy(ssm_backend *b, int slot, int to_slot) {
  cpu_backend *c = (cpu_backend *)b;
  if (slot < 0 || slot >= b->slots)
    return ssm_status_new(SSM_ERR_INVALID, "slot %d is not one of the %d slots", slot, b->slots);
  for (int i = 0; i < b->nstates; i++) {
    float *one, *rows;
    SSM_TRY(cpu_state(c, i, &one));
    SSM_TRY(slots_state(c, b->states[i].name, &b->states[i].type, &rows));
    size_t n = (size_t)ssm_type_numel(&b->states[i].type);
    if (to_slot) memcpy(rows + (size_t)slot * n, one, n * 4);
    else memcpy(one, rows + (size_t)slot * n, n * 4);
  }
  return NULL;
}

static ssm_status cpu_slot_sampler(ssm_backend *b, int slot, const float *state) {
  cpu_backend *c = (cpu_backend *)b;
  if (slot < 0 || slot >= b->slots)
    return ssm_status_new(SSM_ERR_INVALID, "slot %d is not one of the %d slots", slot, b->slots);
  ssm_type one = ssm_type_make(SSM_F32, 1, (int64_t[]){SSM_SAMPLER_STATE_LEN});
  float *rows;
  SSM_TRY(slots_state(c, SSM_SAMPLER_STATE, &one, &rows));
  memcpy(rows + (size_t)slot * SSM_SAMPLER_STATE_LEN, state, SSM_SAMPLER_STATE_LEN * 4);
  return NULL;
}

static ssm_status cpu_batch_generate(ssm_backend *b, const int32_t *first, const int64_t *pos,
                                     int n, int32_t *out_ids, int *out_ran) {
  cpu_backend *c = (cpu_backend *)b;
  int B = b->slots;
  *out_ran = 0;
  if (!B) return ssm_status_new(SSM_ERR_UNSUPPORTED, "the backend has no slots");
  for (int i = 0; i < B; i++)
    if (first[i] < 0 || first[i] >= b->vocab)
      return ssm_status_new(SSM_ERR_INVALID, "slot %d: token id %d is out of range (vocab %lld)",
                            i, first[i], (long long)b->vocab);
  if (!c->batched) {
    ssm_graph *g;
    SSM_TRY(ssm_model_build_batch(c->model, B, &g));
    ssm_pass_opts po = {.weight_dtype = c->dtype};
    char note[160];
    ssm_status s = ssm_pass_weights(g, &po, note, sizeof note);
    if (!s) s = ssm_graph_add_sampler(g, 1);
    if (s) {
      ssm_graph_destroy(g);
      return s;
    }
    c->batched = g;
  }
  if (!c->brows)
    SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)B * ((size_t)b->vocab + 1), sizeof(float),
                                      (void **)&c->brows), "the batch's logits"));
  int32_t *in;
  int64_t *at;
  SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)B, sizeof *in + sizeof *at, (void **)&at), "the batch's ids"));
  in = (int32_t *)(at + B);
  memcpy(in, first, (size_t)B * 4);
  float *outs[2] = {c->brows, c->brows + (size_t)B * (size_t)b->vocab};
  size_t counts[2] = {(size_t)B * (size_t)b->vocab, (size_t)B};
  ssm_status s = NULL;
  for (int j = 0; j < n && !s; j++) {
    /* the slots keep their own positions: the one sequence's stays */
    for (int i = 0; i < B; i++) at[i] = pos[i] < 0 ? 0 : pos[i] + j;
    ssm_cpu_set_row_positions(c->cpu, at, B);
    s = ssm_cpu_run_outputs(c->cpu, c->batched, in, 2, outs, counts);
    ssm_cpu_set_row_positions(c->cpu, NULL, 0);
    ssm_cpu_set_position(c->cpu, b->position);
    if (s) break;
    *out_ran = j + 1;
    int bad = -1;
    for (int i = 0; i < B; i++) { /* the step ran for every slot: all its ids are written */
      float id = outs[1][i];
      if (id == -1 && bad < 0) bad = i;
      else if (id == SSM_SAMPLE_NOMEM && !s)
        s = ssm_nomem((size_t)b->vocab * (sizeof(double) + sizeof(float)), "sampling");
      in[i] = out_ids[(size_t)j * (size_t)B + (size_t)i] = id == -1 ? -1 : (int32_t)id;
    }
    if (!s && bad >= 0) s = ssm_slot_nonfinite(bad);
  }
  for (size_t k = (size_t)*out_ran * (size_t)B; s && k < (size_t)n * (size_t)B; k++) out_ids[k] = -2;
  free(at);
  return s;
}

static void cpu_close(ssm_backend *b) {
  cpu_backend *c = (cpu_backend *)b;
  ssm_graph_destroy(c->sampled);
  ssm_graph_destroy(c->batched);
  free(c->brows);
  for (size_t i = 0; i < c->graphs.n; i++) ssm_graph_destroy(c->graphs.items[i].g);
  ssm_vec_free(&c->graphs);
  ssm_vec_free(&c->states);
  ssm_cpu_destroy(c->cpu);
  ssm_st_close(c->st);
  ssm_model_close(c->model);
  free(c->logits);
  free(c);
}

static const ssm_backend_ops cpu_ops = {"cpu",           cpu_close,       cpu_run_tokens,
                                        cpu_reset,       cpu_set_sampler, cpu_generate,
                                        cpu_state_read,  cpu_state_write, NULL, NULL,
                                        cpu_snapshot_take, cpu_restore,   cpu_snapshot_free,
                                        cpu_slot_copy,   cpu_slot_sampler, cpu_batch_generate,
                                        cpu_set_seen,    NULL};

/* What the decode graph says about the model: its states, whether it reads
 * "pos", the bytes of its weights. */
static ssm_status describe(cpu_backend *c, ssm_graph *g) {
  ssm_backend *b = &c->base;
  int64_t max_seq = 0;
  for (ssm_node *n = g->first; n; n = n->next) {
    if (n->op == SSM_OP_STATE)
      SSM_TRY(ssm_status_wrap(ssm_vec_push(&c->states, ((ssm_backend_state){ssm_node_str(n, "name", ""),
                                                                             n->result->type})),
                              "the CPU backend's states"));
    if (n->op == SSM_OP_WEIGHT)
      b->weight_bytes += (uint64_t)ssm_type_numel(&n->result->type) * 4;
    if (n->op == SSM_OP_INPUT && !strcmp(ssm_node_str(n, "name", ""), "pos") &&
        ssm_model_param(c->model, "max_seq", &max_seq))
      b->max_seq = max_seq;
  }
  b->nstates = (int)c->states.n;
  b->states = c->states.items;
  return NULL;
}

/* Every weight is in the checkpoint with its shape, and the weights (as
 * f32) and the state fit in this machine's memory: checked before anything
 * is read or allocated. */
static ssm_status fits(cpu_backend *c, ssm_graph *g) {
  uint64_t need = c->base.weight_bytes;
  for (ssm_node *n = g->first; n; n = n->next) {
    if (n->op == SSM_OP_WEIGHT)
      SSM_TRY(ssm_st_check(c->st, ssm_node_str(n, "name", ""), &n->result->type));
    if (n->op == SSM_OP_STATE) need += (uint64_t)ssm_type_numel(&n->result->type) * 4;
  }
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t have = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  if (have && need > have)
    return ssm_status_new(SSM_ERR_NOMEM, "%s: the CPU backend needs %.1f GiB of host memory for "
                          "the weights (as f32) and the state, and this machine has %.1f GiB",
                          c->base.arch, (double)need / (1 << 30), (double)have / (1 << 30));
  return NULL;
}

ssm_status ssm_cpu_backend_open(ssm_model *model, const char *weights, int chunk,
                                ssm_dtype dtype, const ssm_progress *progress,
                                ssm_backend **out) {
  *out = NULL;
  SSM_ASSERT(chunk >= 1);
  cpu_backend *c;
  ssm_status as = ssm_alloc(1, sizeof *c, (void **)&c);
  if (as) {
    ssm_model_close(model); /* it is the backend's, even when opening fails */
    return ssm_status_wrap(as, "the CPU backend");
  }
  c->model = model;
  c->dtype = dtype;
  ssm_backend *b = &c->base;
  *b = (ssm_backend){.ops = &cpu_ops, .chunk = chunk, .eos = ssm_model_eos(model),
                     .arch = ssm_model_arch(model), .device = "cpu", .dtype = dtype};
  ssm_graph *decode = NULL;
  ssm_status s = NULL;
  if (!ssm_model_param(model, "vocab", &b->vocab) || b->vocab <= 0)
    s = ssm_status_new(SSM_ERR_INVALID, "%s: the architecture defines no 'vocab' param",
                       ssm_model_arch(model));
  if (!s) s = ssm_st_open(weights, &c->st);
  if (!s) s = ssm_st_set_progress(c->st, progress);
  if (!s) s = ssm_cpu_create(c->st, &c->cpu);
  if (!s) s = graph_for(c, 1, &decode);
  if (!s) s = describe(c, decode);
  if (!s) s = fits(c, decode);
  if (!s) b->fingerprint = ssm_st_fingerprint(c->st, &s);
  if (!s) {
    s = ssm_sampler_state(0, 0, 1, 0, 0, c->sampler);
  }
  if (!s) s = write_sampler(c);
  if (s) {
    cpu_close(b);
    return s;
  }
  *out = b;
  return NULL;
}
