/*
 * cpu.h — the CPU backend: the reference interpreter of the op IR
 * (interp.c) and the backend that runs a model on it (backend.c).
 */
#ifndef SSM_CPU_H
#define SSM_CPU_H

#include "frontend/frontend.h"
#include "runtime/backend/backend.h"
#include "runtime/weights/weights.h"

/* ---- the interpreter (interp.c) ---------------------------------------------- */

/* Executes IR graphs op by op in plain C, f32 arithmetic (double
 * accumulation in reductions). State tensors are kept by name across runs and
 * across graphs (a prefill graph and a decode graph share them). */
typedef struct ssm_cpu ssm_cpu;

ssm_status ssm_cpu_create(const ssm_st *weights, ssm_cpu **out);
void ssm_cpu_destroy(ssm_cpu *c);
/* Zeroes every state tensor and the position, but a batched graph's slots
 * (SSM_SLOTS_PREFIX), which sequences enter and leave by copies. */
void ssm_cpu_reset(ssm_cpu *c);
/* The absolute position of the next run's first token: the number of tokens
 * run since creation or the last reset (part of the model state). */
int64_t ssm_cpu_position(const ssm_cpu *c);
/* Runs `g` (verified) with its input "tokens" set to `tokens` (as many as
 * the input's shape holds) and its input "pos" (if any) set to the position,
 * then advances the position by the token count. Copies the graph's first
 * output, converted to f32, into `out` (out_count must equal its element
 * count; out may be NULL). Token ids out of range are an error, not a crash;
 * so is a run that would go past a KV cache ("position 2048 is past
 * --max-seq 2048"), checked before anything runs. */
ssm_status ssm_cpu_run(ssm_cpu *c, ssm_graph *g, const int32_t *tokens,
                       float *out, size_t out_count);
/* The state tensor `name`, created zeroed with `type` if it does not exist
 * yet; an existing one of another type is an error. */
ssm_status ssm_cpu_state(ssm_cpu *c, const char *name, const ssm_type *type, float **out);
/* Sets the position (a restored state's). */
void ssm_cpu_set_position(ssm_cpu *c, int64_t position);
/* Gives the next runs' input "pos" `rows` positions, one a row of a batched
 * graph (i32[rows]); `pos` must outlive those runs. NULL: the position. */
void ssm_cpu_set_row_positions(ssm_cpu *c, const int64_t *pos, int64_t rows);

/* ssm_cpu_run that copies the first `nouts` outputs, converted to f32, into
 * outs[i] (counts[i] elements; a NULL outs[i] is skipped). */
ssm_status ssm_cpu_run_outputs(ssm_cpu *c, ssm_graph *g, const int32_t *tokens, int nouts,
                               float *const *outs, const size_t *counts);
/* Writes state tensor `name` (created if no run has used it yet) with
 * ssm_type_numel(type) 4-byte elements from `data`. A state of that name
 * with another type is an error. */
ssm_status ssm_cpu_state_write(ssm_cpu *c, const char *name, const ssm_type *type,
                               const void *data);

/* The `sample` op on one row of `n` logits with sampler state `state`
 * (SSM_SAMPLER_STATE_LEN floats; the step is read, not incremented): the
 * interpreter's definition, which templates/sample.glsl.in follows step by
 * step. -1 when a logit is inf or NaN (the runtime reports it, naming the
 * position); SSM_SAMPLE_NOMEM when there is no host memory for its n-float
 * and n-double scratch rows (the runtime reports NOMEM). Greedy (first largest) when temperature <= 0. Otherwise x = (l -
 * max) / temperature in f32; top-k keeps x >= t for the largest t (found by
 * 32 bisection steps) with count(x >= t) >= k, so ties at the threshold may
 * keep a few more than k; p = exp(x); top-p keeps p >= u for the largest u
 * (32 bisection steps) whose kept mass is >= top_p * the total; the id is
 * the first index whose running sum of kept p exceeds r =
 * ssm_sample_uniform(seed, step) * the kept total. `out_margin` (may be
 * NULL) gets how close the decision came to flipping, relative to the total
 * (the draw, the top-p mass) or to the threshold (top-k): a GPU computing in
 * f32 may choose differently only where it is tiny. */
int32_t ssm_sample_row(const float *logits, int64_t n, const float *state, double *out_margin);
#define SSM_SAMPLE_NOMEM (-2)
/* The sampler's uniform number in [0, 1) with 24 bits, from a counter-based
 * hash of (seed, step). */
double ssm_sample_uniform(uint32_t seed, uint32_t step);

/* ---- the CPU backend (backend.c) ------------------------------------------ */

/* A backend (backend.h) that interprets `model`'s graphs (owned by the
 * backend from now on, also when opening fails) on the checkpoint at
 * `weights`. Runs take any number of tokens; `chunk` (at least 1) is what
 * it reports as its prefill size. With `dtype` f16 or bf16, matmul and embed
 * weights are rounded to it as they load (what a bundle of that dtype
 * keeps); f32 keeps them as the checkpoint has them. `progress` (may be
 * NULL) hears of the weights being read (ssm_st_set_progress) and may
 * cancel. */
ssm_status ssm_cpu_backend_open(ssm_model *model, const char *weights, int chunk,
                                ssm_dtype dtype, const ssm_progress *progress,
                                ssm_backend **out);

#endif
