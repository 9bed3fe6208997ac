/*
 * bundle.h — the .ssmb kernel bundle: what ssmc compiles a model into and
 * what a runtime executes.
 *
 * A bundle is a typed manifest (the architecture, the buffers and where
 * every weight and state lives in them, the kernels, and the decode and
 * prefill programs as dispatch lists) and a blob section (SPIR-V, GLSL, WGSL
 * and IR text) that the manifest refers to. The compiler (compile/) builds
 * one in memory through the builder below; container.c writes and reads the file; manifest.c is the only code that
 * knows the manifest's JSON keys, and it checks every field when it reads
 * one, so code that holds an ssm_manifest may trust it: indices are in
 * range, regions lie inside their buffers, blobs inside the blob section,
 * sizes agree with shapes. inspect.c describes a bundle for people and tools.
 *
 * File layout (integers little-endian):
 *   0  "SSMB"            4  u32 format version (SSM_BUNDLE_VERSION)
 *   8  u64 manifest off  16 u64 manifest size
 *   24 u64 blobs off     32 u64 blobs size
 *   40 u64 FNV-1a 64 of bytes [64, end)       48 16 reserved zero bytes
 *   64 manifest (JSON, not NUL-terminated), zero padding to 16, blobs.
 */
#ifndef SSM_BUNDLE_H
#define SSM_BUNDLE_H

#include "bundle/abi.h"
#include "ir/ir.h"

#define SSM_BUNDLE_VERSION 6
#define SSM_BUNDLE_MAX_BUFFERS 64

/* ---- the typed manifest (manifest.c) ------------------------------------- */

/* [offset, offset+size) of the blob section. */
typedef struct {
  uint64_t offset, size;
} ssm_blob;

/* `bytes` bytes at `offset` of buffer `buffer`. */
typedef struct {
  int buffer;
  uint64_t offset, bytes;
} ssm_region;

/* OUTPUT: a program's output kept apart from the activations (the prefill's
 * logits of every row, which only a run that asks for logits reads): a
 * runtime allocates it when it first records a step that binds it. */
typedef enum {
  SSM_BUFFER_STATE,
  SSM_BUFFER_ACTIVATIONS,
  SSM_BUFFER_WEIGHTS,
  SSM_BUFFER_OUTPUT,
  SSM_BUFFER_SLOTS /* the batch program's states (ssm_manifest.batch), apart from the state */
} ssm_buffer_usage;

typedef struct {
  ssm_buffer_usage usage;
  uint64_t bytes;
} ssm_mf_buffer;

/* A weight (a checkpoint tensor, converted to `type` and transformed at
 * load) or a state tensor (zero at start, kept across runs). */
typedef struct {
  const char *name;
  ssm_type type;
  const char *transform; /* weights: the load-time transform ("" for none) */
  ssm_region region;     /* region.bytes is type's size */
} ssm_mf_tensor;

typedef struct {
  const char *name;   /* "k3_matmul" */
  const char *family; /* the template it was made from */
  const char *params; /* the fused ops and knobs, for people */
  int nbindings;      /* tensors: storage buffers at set 0, bindings 0..n-1 */
  ssm_blob spirv, glsl;
  /* optional (size 0 without): the variant on cooperative matrices
   * (codegen.h, glsl_coop), same bindings and windows, which a Vulkan
   * runtime runs instead where the device has them */
  ssm_blob spirv_coop, glsl_coop;
  /* optional, only with the variant (size 0 without): a kernel that runs
   * before it on prep_groups, making its x ready in a scratch buffer of
   * scratch_bytes that the runtime allocates (one for every kernel: the
   * largest); both bind the scratch after their windows (codegen.h) */
  ssm_blob spirv_prep, glsl_prep;
  uint32_t prep_groups[3];
  /* optional, only with the prep kernel (zeros without): the variant's
   * own grid, where it is not the step's */
  uint32_t coop_groups[3];
  uint64_t scratch_bytes;
  /* Vulkan (codegen.h, ssm_cg_glsl_split): tensor i is bound as
   * glsl_windows[i] windows of the manifest's wgsl_window bytes or more
   * (specialization constant SSM_BUNDLE_GLSL_WINDOW_ID, in words): window 0 at
   * binding i, the others at bindings nbindings.. in order. */
  int glsl_windows[SSM_BUNDLE_MAX_BINDINGS];
  /* WebGPU (codegen.h): the WGSL module; binding i of a step is read
   * through memory slot slot[i] (slot 0 holds binding 0); slot s is bound as
   * windows[s] windows of the manifest's wgsl_window bytes, starting at the
   * lowest offset of its bindings in the step, which all lie in one buffer.
   * A slot is writable when that buffer holds state or activations. */
  ssm_blob wgsl;
  int nslots;
  int slot[SSM_BUNDLE_MAX_BINDINGS];
  int windows[SSM_BUNDLE_MAX_BINDINGS];
} ssm_mf_kernel;

/* One dispatch of a program. */
typedef struct {
  int kernel;       /* index into kernels */
  int barrier;      /* wait for the writes of earlier dispatches first */
  uint32_t groups[3];
  int nbindings;    /* the kernel's */
  ssm_region bindings[SSM_BUNDLE_MAX_BINDINGS];
  const char *op;   /* the kernel's params, for people */
} ssm_mf_step;

/* A program processes `tokens` tokens per run: the ids go to `tokens_in`,
 * the position of the first to `pos` (when the program reads it; the batch
 * program: i32[tokens], a position a row), and the
 * logits f32[tokens, vocab] come out at `output`. A program with a sampler
 * also draws the next id (i32) into `next` with the sampler state at
 * `sampler` (f32[SSM_SAMPLER_STATE_LEN]); a runtime copies `next` into
 * `tokens_in` to run the next step without the host. */
typedef struct {
  int tokens;
  ssm_region tokens_in;
  int has_pos;
  ssm_region pos;
  ssm_region output;
  int has_sampler;
  ssm_region next, sampler;
  /* the decode sampler's seen-token set for the repetition penalty
   * (f32[SSM_SEEN_WORDS(vocab)], ir.h), when has_seen */
  int has_seen;
  ssm_region seen;
  int nsteps;
  ssm_mf_step *steps;
  /* runs may also take 2..tokens-1 tokens (the first count ids at
   * tokens_in, the rest ignored, and only those rows of the output
   * meaningful): the kernels that need it read the count as a u32 push
   * constant, which a Vulkan runtime gives every dispatch of the bundle
   * (codegen.h, run_count; the WGSL kernels always run whole programs) */
  int any_count;
  uint64_t activation_bytes;           /* the planned activation pool */
  uint64_t activation_bytes_unplanned; /* one buffer per value */
  ssm_blob ir;                         /* the graph after every pass */
} ssm_mf_program;

/* A file of the weights directory a bundle was compiled with, and its
 * fingerprint (runtime/weights: ssm_st_source). */
typedef struct {
  const char *name; /* "config.json", "model.safetensors", a shard */
  uint64_t hash;
} ssm_mf_source_file;

typedef struct {
  const char *generator;    /* "ssmc 0.2.0" */
  const char *architecture; /* the model description's name */
  int64_t vocab;
  int64_t max_seq; /* the positions a KV cache holds; 0 when no program reads pos */
  int64_t eos;     /* config.json's eos_token_id; -1 when it has none */
  ssm_dtype dtype; /* of the matmul and embed weights (ssm_compile_opts.dtype) */
  uint32_t align;  /* every region offset is a multiple of it */
  uint64_t wgsl_window; /* bytes of a WGSL storage window (ssm_compile_opts); also
                           the size GLSL kernels' windows are counted in */
  int nbuffers;
  ssm_mf_buffer *buffers;
  int nweights;
  ssm_mf_tensor *weights;
  int nstates;
  ssm_mf_tensor *states;
  int nkernels;
  ssm_mf_kernel *kernels;
  ssm_mf_program decode, prefill; /* decode.tokens is 1 */
  /* the batched decode program (ssmc compile --slots B), or batch.tokens 0:
   * it advances batch.tokens sequences by one token each, sequence b on
   * row b of its tokens, logits and sampler (f32[B, SSM_SAMPLER_STATE_LEN]),
   * and on the states named SSM_SLOTS_PREFIX + a state's name, whose first
   * dim is B (row b: sequence b's copy of that state) */
  ssm_mf_program batch;
  /* Optional: the weights directory it was compiled with (an absolute
   * path; NULL when none was recorded) and the fingerprints of its files,
   * so that `ssmc run X.ssmb` finds the weights and notices when they
   * changed. */
  const char *source_dir;
  int nsource_files;
  ssm_mf_source_file *source_files;
  /* Optional: the file that `ssmc compile` wrote the weights to, as the
   * bundle reads them (quantized ones quantized: runtime/weights:
   * ssm_st_write), a file name in the bundle's directory (NULL: none), and
   * its fingerprint (ssm_st_fingerprint), which the weights a run loads
   * from it must have. */
  const char *weights_file;
  uint64_t weights_fingerprint;
  /* Optional (NULL: not recorded): what the compiled model depends on in
   * its config.json (frontend.h: ssm_model_config_used), the text of a
   * JSON object of config keys and their values (null: absent), which
   * the config.json beside the weights a run is given must agree with. */
  const char *config;
  /* Optional (NULL: none): the compile cache's key of the entry this
   * bundle was written as (compile/cache.c), 32 lowercase hex digits. */
  const char *cache_key;
} ssm_manifest;

/* The manifest as JSON (malloc'd); NULL when host memory is exhausted. */
char *ssm_manifest_to_json(const ssm_manifest *m);
/* Reads and checks a manifest: every field present with the right type and
 * in range (see the top of this file). `name` (the bundle) starts every
 * message: "m.ssmb: corrupt manifest: programs.decode.steps[3].kernel is
 * out of range". Strings and arrays are allocated in `arena`. */
ssm_status ssm_manifest_parse(const char *json, size_t len, const char *name,
                              uint64_t blobs_size, ssm_arena *arena, ssm_manifest *out);
/* Bytes of all weights (the sum of their regions). */
uint64_t ssm_manifest_weight_bytes(const ssm_manifest *m);
/* The steps of `p` a run must dispatch when its logits are not wanted: up
 * to the last step that binds state memory. Activations do not outlive a
 * run, so what comes after (the last layer's output projection, the final
 * norm, the lm_head) only makes the logits. */
int ssm_manifest_state_steps(const ssm_manifest *m, const ssm_mf_program *p);
/* The states of one sequence: the first this many of m->states; the batch
 * program's (in a slots buffer, named "slots." + a state's name) follow. */
int ssm_manifest_own_states(const ssm_manifest *m);
/* The batch program's copy of state `t` ([B, t's shape]), or NULL. */
const ssm_mf_tensor *ssm_manifest_slots_state(const ssm_manifest *m, const ssm_mf_tensor *t);
/* The bytes [*lo, *hi) of buffer *buffer that the bindings of WGSL slot
 * `slot` of dispatch `st` (of kernel `k`) cover; 0 when they lie in more
 * than one buffer (manifest.c). */
int ssm_mf_slot_span(const ssm_mf_kernel *k, const ssm_mf_step *st, int slot, int *buffer,
                     uint64_t *lo, uint64_t *hi);

/* ---- the container (container.c) ---------------------------------------- */

typedef struct ssm_bundle ssm_bundle;

/* Reads and checks a bundle file: magic, version (another one is refused
 * with both numbers), extents inside the file, reserved bytes zero,
 * checksum, and the manifest (ssm_manifest_parse). */
ssm_status ssm_bundle_open(const char *path, ssm_bundle **out);
/* The same from `size` bytes in memory (copied); `name` stands for them in
 * messages. */
ssm_status ssm_bundle_open_memory(const void *data, size_t size, const char *name,
                                  ssm_bundle **out);
/* NULL is fine. */
void ssm_bundle_close(ssm_bundle *b);
/* The path it was opened from, or the name it was given. */
const char *ssm_bundle_name(const ssm_bundle *b);
const ssm_manifest *ssm_bundle_manifest(const ssm_bundle *b);
/* The bytes of a blob of the manifest (checked when the bundle was read). */
const void *ssm_bundle_blob(const ssm_bundle *b, ssm_blob blob);
/* Records the weights directory `dir` (absolute) and its files'
 * fingerprints in the manifest (copied; see ssm_manifest.source_dir). NOMEM
 * when the copies do not fit. */
ssm_status ssm_bundle_set_source(ssm_bundle *b, const char *dir, const ssm_mf_source_file *files,
                                 int n) SSM_MUST_CHECK;
/* Records the weights file `name` (a file name) and its fingerprint in the
 * manifest (see ssm_manifest.weights_file). */
ssm_status ssm_bundle_set_weights_file(ssm_bundle *b, const char *name,
                                       uint64_t fingerprint) SSM_MUST_CHECK;
/* The file's bytes (malloc'd). */
ssm_status ssm_bundle_serialize(const ssm_bundle *b, void **out_data, size_t *out_size);
/* Writes the file: to a temporary file next to `path`, then renamed over
 * it, so a failed write leaves whatever was at `path` untouched. */
ssm_status ssm_bundle_save(const ssm_bundle *b, const char *path);

/* ---- building one (container.c) -------------------------------------------- */

/* An empty bundle named `name`, for a compiler to fill: its manifest
 * (ssm_bundle_manifest_mut), whose strings and arrays live in
 * ssm_bundle_arena(b), and its blob section (ssm_bundle_set_blobs). Nothing
 * checks what a builder writes until the bundle is serialized and read. */
ssm_status ssm_bundle_new(const char *name, ssm_bundle **out) SSM_MUST_CHECK;
ssm_arena *ssm_bundle_arena(ssm_bundle *b);
ssm_manifest *ssm_bundle_manifest_mut(ssm_bundle *b);
/* Hands the bundle its blob section: `size` bytes at `blobs`, malloc'd,
 * owned by the bundle from now on. */
void ssm_bundle_set_blobs(ssm_bundle *b, void *blobs, uint64_t size);

/* ---- describing a bundle (inspect.c) ------------------------------------- */

/* For people: the architecture, buffers, weights and state, each kernel
 * with its fused ops, and each program with its dispatches and activation
 * bytes. With `json`: one JSON object, the manifest without the dispatch
 * lists plus programs.<name>.dispatches, programs.<name>.dispatches_by_op
 * and weight_bytes. malloc'd in *out. */
ssm_status ssm_bundle_describe(const ssm_bundle *b, int json, char **out) SSM_MUST_CHECK;

#endif
