/*
 * backend.h — the one interface every backend implements (the CPU
 * interpreter in runtime/cpu/, Vulkan in runtime/vulkan/), and what the
 * runtime builds on it for every backend: state files (state.c).
 *
 * A backend holds one model with its weights and its state (SSM, conv and
 * KV tensors, and the position: the tokens fed since the last reset). It
 * feeds tokens (a run of 1 token, or of `chunk` tokens: the prefill
 * program), and it generates: each step feeds a token and draws the next
 * with its sampler, the drawn id becoming the next step's input without the
 * host. Objects are single-threaded.
 */
#ifndef SSM_BACKEND_H
#define SSM_BACKEND_H

#include "ir/ir.h"

typedef struct ssm_backend ssm_backend;

/* A copy of a backend's state: every state tensor (b->states[i]) and the
 * position, kept where the backend keeps its state (device memory for
 * Vulkan, so taking and restoring one moves no byte through the host).
 * Backends embed it first; only the backend that made one restores or
 * frees it. */
typedef struct ssm_snapshot {
  const ssm_backend *owner;
  int64_t position;
  uint64_t bytes; /* the memory it holds */
} ssm_snapshot;

/* Called after each generation step with the id drawn and, when the caller
 * asked for them, that step's logits (vocab floats; else NULL). A non-zero
 * return stops generation after this step. */
typedef int (*ssm_step_fn)(int32_t id, const float *logits, void *user);

/* One dispatch of a profiled program. */
typedef struct ssm_step_time {
  const char *kernel; /* "k3_matmul" */
  const char *family; /* the kernel template: "matmul" */
  const char *op;     /* the fused ops and knobs */
  double us;          /* mean time per run */
  uint64_t bytes;     /* the bytes of its bindings (what it may read and write) */
} ssm_step_time;

typedef struct {
  const char *name; /* "cpu", "vulkan" */
  void (*close)(ssm_backend *b);
  /* Feeds `count` tokens (1 or b->chunk, or up to b->chunk with
   * b->any_count; the CPU takes any count, but builds and keeps a graph
   * per count, so it does not set any_count and prompts end token by
   * token there) at b->position and advances it; copies count*vocab logits to `logits`
   * unless it is NULL (then the backend may skip what only makes them).
   * Ids out of range and runs past max_seq are refused before anything
   * runs. */
  ssm_status (*run)(ssm_backend *b, const int32_t *tokens, int count, float *logits);
  /* Zeroes the state and the position (not the slots of the batched
   * program); the sampler keeps its settings and restarts at step 0. */
  ssm_status (*reset)(ssm_backend *b);
  /* The sampler's settings: SSM_SAMPLER_STATE_LEN floats (ir.h). */
  ssm_status (*set_sampler)(ssm_backend *b, const float *state);
  /* Up to n steps from `first`: each feeds its input and draws the next id
   * into out_ids[*out_count]; with `want_logits`, on_step gets each step's
   * logits. Stops early when on_step returns non-zero. */
  ssm_status (*generate)(ssm_backend *b, int32_t first, int n, int want_logits, int32_t *out_ids,
                         int *out_count, ssm_step_fn on_step, void *user);
  /* Copies state tensor i (b->states[i]) out of or into the backend. */
  ssm_status (*state_read)(ssm_backend *b, int i, void *dst);
  ssm_status (*state_write)(ssm_backend *b, int i, const void *src);
  /* Problems seen while running that are not errors of one call (Vulkan
   * validation messages); NULL when none. May be NULL. */
  ssm_status (*check)(ssm_backend *b);
  /* Runs the decode (or, with `prefill` 1, the prefill program as a prompt
   * runs it, without the logits: ssm_manifest_state_steps; with 2, the
   * batch program) `runs` times
   * with a timestamp around each dispatch and gives each step's mean time
   * (*out: malloc'd, *out_n steps); resets the state after. NULL when the
   * backend cannot time its work. */
  ssm_status (*profile)(ssm_backend *b, int prefill, int runs, ssm_step_time **out, int *out_n);
  /* Copies the state and the position into *inout: a new snapshot when it
   * is NULL, else one this backend made, overwritten. */
  ssm_status (*snapshot)(ssm_backend *b, ssm_snapshot **inout);
  /* Copies a snapshot of this backend back into the state and position. */
  ssm_status (*restore)(ssm_backend *b, const ssm_snapshot *s);
  void (*snapshot_free)(ssm_backend *b, ssm_snapshot *s);
  /* The batched program, where b->slots > 0 (else these may be NULL): each
   * of the slots sequences has its state in a slot. slot_copy copies the
   * state (the sequence fed by run) into slot `slot` (to_slot), or back;
   * slot_sampler sets the slot's sampler (SSM_SAMPLER_STATE_LEN floats);
   * batch_generate runs n steps of every slot from first[slots], slot i's
   * first at position pos[i] (read by a model with attention: its step j
   * at pos[i] + j, which must be within max_seq; a slot of pos[i] < 0 holds
   * no sequence and runs every step at position 0), slot i's id of step j into out_ids[j * slots + i], and
   * *out_ran gets the steps
   * that ran, also when it fails: on a non-finite logit (ssm_slot_nonfinite)
   * the steps that ran have their ids written, -1 for each slot whose
   * logits were not finite (-2 for one whose sampler ran out of memory),
   * and those that did not run have -2 for every slot. */
  ssm_status (*slot_copy)(ssm_backend *b, int slot, int to_slot);
  ssm_status (*slot_sampler)(ssm_backend *b, int slot, const float *state);
  ssm_status (*batch_generate)(ssm_backend *b, const int32_t *first, const int64_t *pos, int n,
                               int32_t *out_ids, int *out_ran);
  /* Sets the sampler's seen-token set (SSM_SEEN_WORDS(vocab) floats, ir.h),
   * which the repetition penalty reads and each draw adds its id to; an
   * UNSUPPORTED error when the model's sampler has none. */
  ssm_status (*set_seen)(ssm_backend *b, const float *words);
  /* Feeds `count` tokens, 2 to SSM_FEED_CHUNKS whole chunks, without their
   * logits, in one submission (as run would one chunk after another, with
   * the same results). NULL: the caller runs chunk by chunk. */
  ssm_status (*feed)(ssm_backend *b, const int32_t *tokens, int count);
} ssm_backend_ops;

/* The most chunks of a prompt that one feed submits. */
#define SSM_FEED_CHUNKS 8


/* A state tensor of the model. */
typedef struct {
  const char *name;
  ssm_type type;
} ssm_backend_state;

/* What every backend has; implementations embed it first and fill it in
 * when they open. */
struct ssm_backend {
  const ssm_backend_ops *ops;
  int64_t vocab;
  int chunk;            /* the tokens of a prefill run */
  int any_count;        /* runs may also take 2..chunk-1 tokens */
  int64_t position;     /* tokens fed since the last reset */
  int64_t max_seq;      /* positions a KV cache holds; 0: no bound */
  int64_t eos;          /* the model's end-of-text id, or -1 */
  const char *arch;     /* the architecture's name */
  const char *device;   /* "cpu", or the GPU's name */
  uint64_t fingerprint; /* of the weights (ssm_st_fingerprint) */
  uint64_t weight_bytes;
  ssm_dtype dtype;      /* of the matmul and embed weights (f32, f16, bf16) */
  int nstates;
  const ssm_backend_state *states;
  int slots;            /* sequences of the batched program (ssm_backend_ops.batch_generate); 0: none */
};

/* Shorthands for the ops. ssm_backend_close takes NULL. */
void ssm_backend_close(ssm_backend *b);
ssm_status ssm_backend_run(ssm_backend *b, const int32_t *tokens, int count, float *logits);
ssm_status ssm_backend_reset(ssm_backend *b);
/* Greedy (temperature 0) unless told otherwise; values out of range (see
 * ssm_sampler_state) are an error. */
ssm_status ssm_backend_set_sampler(ssm_backend *b, float temperature, int top_k, float top_p,
                                   float min_p, int64_t seed);
ssm_status ssm_backend_generate(ssm_backend *b, int32_t first, int n, int want_logits,
                                int32_t *out_ids, int *out_count, ssm_step_fn on_step,
                                void *user);
ssm_status ssm_backend_check(ssm_backend *b);
/* The snapshot ops; restoring or freeing a snapshot of another backend is
 * an error (free: an assert). ssm_backend_snapshot_free takes NULL. */
ssm_status ssm_backend_snapshot(ssm_backend *b, ssm_snapshot **inout);
ssm_status ssm_backend_restore(ssm_backend *b, const ssm_snapshot *s);
void ssm_backend_snapshot_free(ssm_backend *b, ssm_snapshot *s);

/* The sampler state for temperature (>= 0; 0: greedy, the first largest
 * logit), top_k (>= 0; 0: off), top_p (in (0, 1]; 1: off), min_p (in
 * [0, 1]; 0: off) and seed (in [0, 2^24)), at step 0: temperature, top_k,
 * top_p, seed, step, min_p and two zeros. */
ssm_status ssm_sampler_state(float temperature, int top_k, float top_p, float min_p, int64_t seed,
                             float out[SSM_SAMPLER_STATE_LEN]);

/* Puts the repetition penalty (> 0 and finite; 0 or 1: off) into a
 * sampler state: its seventh float. */
ssm_status ssm_sampler_penalty(float penalty, float state[SSM_SAMPLER_STATE_LEN]);

/* The error for a sampler that drew -1: a logit of the step at `position`
 * was inf or NaN. */
ssm_status ssm_sampler_nonfinite(int64_t position);
/* The error of batch_generate when slot `slot` drew from logits that are
 * not finite. */
ssm_status ssm_slot_nonfinite(int slot);

/* "position 2048 is past --max-seq 2048" when `count` more tokens at the
 * backend's position would go past its max_seq; NULL otherwise. */
ssm_status ssm_backend_check_room(const ssm_backend *b, int64_t count);

/* ---- state files (state.c) ------------------------------------------------ */

/* A saved model state: "SSMS", format version, the header's length, an
 * FNV-1a 64 checksum of everything after it, a JSON header (architecture,
 * weights fingerprint, position, each tensor's name, dtype, shape, offset
 * and size), then the tensor data.
 * Loading checks all of it against the backend it is restored into:
 * another architecture, other weights, a missing, extra or differently
 * shaped tensor, a truncated or corrupt file are clear errors and change
 * nothing. Saving writes a temporary file and renames it over `path`, so a
 * failed save leaves the old file as it was. */
#define SSM_STATE_VERSION 2

ssm_status ssm_backend_state_save(ssm_backend *b, const char *path);
ssm_status ssm_backend_state_load(ssm_backend *b, const char *path);

/* The file format itself, over tensors in host memory. */
typedef struct {
  const char *name;
  ssm_type type;
  void *data; /* numel * dtype size bytes */
} ssm_state_tensor;

ssm_status ssm_state_save(const char *path, const char *arch, uint64_t fingerprint,
                          int64_t position, const ssm_state_tensor *t, int n);
/* Fills t[i].data (allocated, sized by t[i].type) from the file; on error
 * neither the tensors nor *out_position change. */
ssm_status ssm_state_load(const char *path, const char *arch, uint64_t fingerprint,
                          int64_t *out_position, ssm_state_tensor *t, int n);

#endif
