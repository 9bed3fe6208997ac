/*
 * runtime.h — running models: safetensors weights (mmap'd), the CPU
 * reference interpreter of the IR, and (vk.c) the Vulkan runtime.
 */
#ifndef SSM_RUNTIME_H
#define SSM_RUNTIME_H

#include "ir.h"

/* ---- safetensors (safetensors.c) --------------------------------------- */

/* One tensor of a checkpoint; `data` points into the mmap'd file. */
typedef struct {
  const char *name;
  ssm_dtype dtype; /* F32, F16, BF16 in the file (I32 for "I32") */
  int rank;
  int64_t shape[SSM_MAX_RANK];
  const void *data;
  size_t nbytes;
  const char *file; /* the shard it lives in */
} ssm_st_tensor;

/* A checkpoint: one .safetensors file, or the shards that a
 * model.safetensors.index.json names. */
typedef struct ssm_st ssm_st;

/* Opens `path`: a .safetensors file, a model.safetensors.index.json, or a
 * directory holding model.safetensors or model.safetensors.index.json. Every
 * header field is validated (sizes, offsets inside the data section and not
 * overlapping, dtype known, shape product matching the byte size). */
ssm_status ssm_st_open(const char *path, ssm_st **out);
void ssm_st_close(ssm_st *st);
int ssm_st_count(const ssm_st *st);
const ssm_st_tensor *ssm_st_at(const ssm_st *st, int i);
/* NULL if there is no tensor of that name. */
const ssm_st_tensor *ssm_st_find(const ssm_st *st, const char *name);
/* Copies tensor `name` into `dst`, converting to want->dtype (f32, f16, bf16
 * from f32, f16, bf16). Errors name the tensor: missing ("tensor 'x' not
 * found in DIR"), or a shape other than want's ("tensor 'x' has shape
 * [4,8] in the checkpoint but the model expects [8,4]"). */
ssm_status ssm_st_read(const ssm_st *st, const char *name, const ssm_type *want,
                       void *dst);

/* A fingerprint of the checkpoint: FNV-1a 64 over every tensor's name,
 * dtype, shape and first 64 bytes of data. State files carry it so a state
 * is not restored into other weights. */
uint64_t ssm_st_fingerprint(const ssm_st *st);

/* bf16/f16 <-> f32 conversions (round to nearest even). */
float ssm_bf16_to_f32(uint16_t h);
uint16_t ssm_f32_to_bf16(float f);
float ssm_f16_to_f32(uint16_t h);
uint16_t ssm_f32_to_f16(float f);

/* ---- load-time weight transforms (transform.c) ------------------------- */

/* Applies `transform` (the weight op's attribute: comma-separated names of
 * unary ops of ops.def, applied in order, e.g. "exp,neg" is -exp(w); "" does
 * nothing) to the `n` floats of `data` in place, with the CPU interpreter's
 * numerics (each op in double, stored as float). The whole string is checked
 * before any element changes: an empty or unknown op name is an error naming
 * it. */
ssm_status ssm_weight_transform(const char *transform, float *data, size_t n);

/* The value of unary op `op` (SSM_KIND_UNARY) at x, as the CPU interpreter
 * computes it. */
double ssm_unary_eval(ssm_op op, double x);

/* ---- CPU reference interpreter (cpu.c) --------------------------------- */

/* Executes IR graphs op by op in plain C, f32 arithmetic (double
 * accumulation in reductions). State tensors are kept by name across runs and
 * across graphs (a prefill graph and a decode graph share them). */
typedef struct ssm_cpu ssm_cpu;

ssm_status ssm_cpu_create(const ssm_st *weights, ssm_cpu **out);
void ssm_cpu_destroy(ssm_cpu *c);
/* Zeroes every state tensor and the position. */
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
/* Tokens fed since the last reset (or since the restored state). */
int64_t ssm_cpu_position(const ssm_cpu *c);
void ssm_cpu_set_position(ssm_cpu *c, int64_t position);
/* ssm_st_fingerprint of the interpreter's weights (0 without weights). */
uint64_t ssm_cpu_fingerprint(const ssm_cpu *c);

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
 * step. Greedy (first largest) when temperature <= 0. Otherwise x = (l -
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
/* The sampler's uniform number in [0, 1) with 24 bits, from a counter-based
 * hash of (seed, step). */
double ssm_sample_uniform(uint32_t seed, uint32_t step);

/* ---- Vulkan (vk.c) ------------------------------------------------------ */

/* The Vulkan base layer: device discovery and selection, buffers, compute
 * kernels (SPIR-V), and programs — lists of dispatches recorded once into one
 * command buffer and replayed on every run. Every Vulkan failure comes back
 * as an SSM_ERR_DEVICE status naming the call and the VkResult. Objects are
 * single-threaded: use one ssm_vk from one thread at a time. */
typedef struct ssm_vk ssm_vk;
typedef struct ssm_vk_buffer ssm_vk_buffer;
typedef struct ssm_vk_kernel ssm_vk_kernel;
typedef struct ssm_vk_program ssm_vk_program;

typedef enum {
  SSM_VK_TYPE_OTHER,
  SSM_VK_TYPE_INTEGRATED,
  SSM_VK_TYPE_DISCRETE,
  SSM_VK_TYPE_VIRTUAL,
  SSM_VK_TYPE_CPU,
} ssm_vk_device_type;

/* Optional device capabilities (bits of ssm_vk_device_info.features). */
enum {
  SSM_VK_F16_STORAGE = 1 << 0,   /* storageBuffer16BitAccess */
  SSM_VK_F16 = 1 << 1,           /* shaderFloat16 */
  SSM_VK_INT64 = 1 << 2,         /* shaderInt64 */
  SSM_VK_INT16 = 1 << 3,         /* shaderInt16 */
  SSM_VK_INT8_STORAGE = 1 << 4,  /* storageBuffer8BitAccess */
  SSM_VK_INT8 = 1 << 5,          /* shaderInt8 */
  SSM_VK_SUBGROUP_ARITH = 1 << 6 /* subgroup arithmetic in compute shaders */
};

/* What `ssmc devices` shows about one physical device. */
typedef struct {
  int index; /* position in ssm_vk_list_devices' order (the --device N) */
  char name[256];
  ssm_vk_device_type type;
  char driver[256];          /* driver name and info, e.g. "llvmpipe (Mesa 22.3.6)" */
  uint32_t api_version;      /* VK_MAKE_API_VERSION packing */
  uint32_t vendor_id, device_id;
  int usable;                /* Vulkan >= 1.1 and a compute queue */
  uint64_t min_storage_buffer_offset_alignment;
  uint64_t max_storage_buffer_range;
  uint64_t max_memory_allocation_size; /* 0 if unknown */
  uint64_t device_local_bytes;         /* size of the largest device-local heap */
  uint32_t max_push_constants_size;
  uint32_t max_workgroup_invocations;
  uint32_t max_workgroup_count[3];
  uint32_t subgroup_size;
  unsigned features; /* SSM_VK_* bits the device supports */
} ssm_vk_device_info;

/* Enumerates the physical devices into a malloc'd array (free() it). No
 * Vulkan loader driver or no device is an error: "no Vulkan device found
 * (is mesa-vulkan-drivers installed?)". */
ssm_status ssm_vk_list_devices(ssm_vk_device_info **out_devices, int *out_count);
/* The index ssm_vk_create(-1, ...) picks: the first usable discrete GPU, then
 * integrated, virtual, CPU, other; -1 if none is usable. */
int ssm_vk_default_device(const ssm_vk_device_info *devices, int count);
/* "discrete GPU", "integrated GPU", "virtual GPU", "cpu", "other". */
const char *ssm_vk_device_type_name(ssm_vk_device_type t);
/* Formats the list for `ssmc devices`, marking the default; malloc'd text. */
char *ssm_vk_format_devices(const ssm_vk_device_info *devices, int count);

/* Opens device `device_index` (-1: ssm_vk_default_device). With
 * `validation` (or env SSM_VK_VALIDATION=1) enables VK_LAYER_KHRONOS_validation
 * with synchronization validation when the layer is installed; its messages
 * are counted, the first few kept, and each is passed to ssm_log as
 * "vulkan validation error: ..." (so messages emitted while destroying are
 * seen too). Enables storageBuffer16BitAccess, shaderFloat16, shaderInt64,
 * shaderInt16, 8-bit storage/arith where the device has them and logs the
 * ones it lacks. An index out of range is an error that says how many
 * devices exist. Env SSM_VK_FORCE_STAGING=1 makes device buffers go through
 * the staging path even on unified-memory devices (for tests). */
ssm_status ssm_vk_create(int device_index, int validation, ssm_vk **out);
/* Waits for the device to be idle, then frees everything the context owns
 * except buffers, kernels and programs, which must be destroyed first. */
void ssm_vk_destroy(ssm_vk *vk);
/* The opened device. */
const ssm_vk_device_info *ssm_vk_info(const ssm_vk *vk);
/* SSM_VK_* bits enabled on the opened device. */
unsigned ssm_vk_features(const ssm_vk *vk);
/* Error naming the device and each missing SSM_VK_* bit of `needed`
 * ("device 'X' lacks shaderFloat16 (needed for f16 kernels)"); NULL if
 * all are enabled. `why` completes the sentence. */
ssm_status ssm_vk_require(const ssm_vk *vk, unsigned needed, const char *why);
/* minStorageBufferOffsetAlignment of the device (a power of two). */
size_t ssm_vk_storage_alignment(const ssm_vk *vk);
/* `offset` rounded up to ssm_vk_storage_alignment. */
size_t ssm_vk_align(const ssm_vk *vk, size_t offset);

/* Whether VK_LAYER_KHRONOS_validation is installed (needs no device). */
int ssm_vk_validation_available(void);
/* Whether this context runs with the validation layer. */
int ssm_vk_validation_enabled(const ssm_vk *vk);
/* Validation messages of error / warning severity seen so far. */
int ssm_vk_validation_errors(const ssm_vk *vk);
int ssm_vk_validation_warnings(const ssm_vk *vk);
/* The i-th recorded validation message (the first 8 are kept); NULL past
 * the end. */
const char *ssm_vk_validation_message(const ssm_vk *vk, int i);

typedef enum {
  SSM_VK_BUFFER_DEVICE, /* device-local storage buffer */
  SSM_VK_BUFFER_HOST,   /* host-visible, coherent storage buffer (staging, readback) */
} ssm_vk_buffer_kind;

/* A storage buffer of `bytes` (> 0) with its own memory, usable as the
 * source and destination of transfers. A size beyond the device's heap or
 * allocation limit, or a failed allocation, is a clear error naming the
 * size ("vkAllocateMemory(1.2 GiB device-local): VK_ERROR_OUT_OF_DEVICE_MEMORY")
 * and nothing stays allocated. */
ssm_status ssm_vk_buffer_create(ssm_vk *vk, size_t bytes, ssm_vk_buffer_kind kind,
                                ssm_vk_buffer **out);
/* NULL is fine. The buffer must not be in use by a pending program. */
void ssm_vk_buffer_destroy(ssm_vk *vk, ssm_vk_buffer *b);
size_t ssm_vk_buffer_size(const ssm_vk_buffer *b);
/* The persistent host mapping of a HOST buffer (or of a DEVICE buffer on a
 * unified-memory device); NULL when the buffer is not mapped. */
void *ssm_vk_buffer_map(const ssm_vk_buffer *b);
/* Copies `n` bytes between host memory and [offset, offset+n) of `b`,
 * through a reusable staging buffer when `b` is not mapped. Synchronous: the
 * data is in place (or read) when they return. Ranges are checked. */
ssm_status ssm_vk_buffer_upload(ssm_vk *vk, ssm_vk_buffer *b, size_t offset,
                                const void *data, size_t n);
ssm_status ssm_vk_buffer_download(ssm_vk *vk, ssm_vk_buffer *b, size_t offset,
                                  void *data, size_t n);
/* Fills [offset, offset+n) with the 32-bit `value` (offset and n multiples
 * of 4); synchronous. */
ssm_status ssm_vk_buffer_fill(ssm_vk *vk, ssm_vk_buffer *b, size_t offset, size_t n,
                              uint32_t value);

/* A compute kernel: SPIR-V with entry point "main", storage buffers at set
 * 0, bindings 0..n_bindings-1, and `push_bytes` of push constants. */
typedef struct {
  const char *name; /* for messages; NULL: "kernel" */
  const uint32_t *spirv;
  size_t words;
  int n_bindings;
  uint32_t push_bytes;         /* multiple of 4, <= maxPushConstantsSize */
  const uint32_t *spec_values; /* 32-bit specialization constant i = constant_id i */
  int n_spec;                  /* e.g. {64} sets local_size_x_id = 0 to 64 */
} ssm_vk_kernel_desc;

/* Creates the descriptor set layout, pipeline layout and compute pipeline
 * once. Bad SPIR-V or limits are errors naming the kernel. */
ssm_status ssm_vk_kernel_create_desc(ssm_vk *vk, const ssm_vk_kernel_desc *desc,
                                     ssm_vk_kernel **out);
/* Shorthand for a nameless kernel without specialization constants. */
ssm_status ssm_vk_kernel_create(ssm_vk *vk, const uint32_t *spirv, size_t words,
                                int n_bindings, uint32_t push_bytes,
                                ssm_vk_kernel **out);
/* NULL is fine. No program using it may still exist. */
void ssm_vk_kernel_destroy(ssm_vk *vk, ssm_vk_kernel *k);

/* One storage-buffer binding of a dispatch: `offset` must be a multiple of
 * ssm_vk_storage_alignment; `range` 0 means to the end of the buffer; the
 * range must not exceed maxStorageBufferRange. */
typedef struct {
  ssm_vk_buffer *buffer;
  size_t offset;
  size_t range;
} ssm_vk_binding;

/* Starts an empty program. Dispatches and barriers are collected, then
 * ssm_vk_program_end builds every descriptor set and records one command
 * buffer; ssm_vk_program_run replays it without allocating anything. Each
 * run begins after all earlier work of the queue, memory included, and its
 * writes are visible to the host and to transfers when it completes. */
ssm_status ssm_vk_program_begin(ssm_vk *vk, ssm_vk_program **out);
/* Appends a dispatch of `k` over groups gx*gy*gz, with k's n_bindings
 * `bindings` and k's push_bytes from `push` (copied). Checked against the
 * device limits; on error nothing is appended. */
ssm_status ssm_vk_program_add_dispatch(ssm_vk_program *p, ssm_vk_kernel *k,
                                       const ssm_vk_binding *bindings,
                                       const void *push, uint32_t gx, uint32_t gy,
                                       uint32_t gz);
/* Appends a full compute-to-compute memory barrier: dispatches after it see
 * the writes of the dispatches before it. */
void ssm_vk_program_add_barrier(ssm_vk_program *p);
/* Appends a copy of `bytes` (a multiple of 4, as the offsets) from `src` at
 * `src_offset` to `dst` at `dst_offset` (vkCmdCopyBuffer). It waits for every
 * dispatch and copy before it; the dispatches after it see what it wrote.
 * Ranges are checked; on error nothing is appended. */
ssm_status ssm_vk_program_add_copy(ssm_vk_program *p, ssm_vk_buffer *src, size_t src_offset,
                                   ssm_vk_buffer *dst, size_t dst_offset, size_t bytes);
/* Builds the descriptor sets and records the command buffer. */
ssm_status ssm_vk_program_end(ssm_vk_program *p);
/* Number of dispatches recorded. */
int ssm_vk_program_dispatches(const ssm_vk_program *p);
/* Submits the recorded program; returns without waiting. A program already
 * in flight is waited for first. */
ssm_status ssm_vk_program_submit(ssm_vk *vk, ssm_vk_program *p);
/* Waits until the last submission of `p` has completed. */
ssm_status ssm_vk_program_wait(ssm_vk *vk, ssm_vk_program *p);
/* Submit, then wait. */
ssm_status ssm_vk_program_run(ssm_vk *vk, ssm_vk_program *p);
/* Waits for it if in flight, then frees it. NULL is fine. */
void ssm_vk_program_destroy(ssm_vk *vk, ssm_vk_program *p);
/* ---- bundle container (bundle.c) --------------------------------------- */

/* A .ssmb file: a 64-byte header ("SSMB", format version, manifest and blob
 * section extents, FNV-1a 64 checksum of everything after the header), a
 * JSON manifest, and a blob section (SPIR-V, WGSL, IR text) that the manifest
 * refers to by [offset, size]. The container knows nothing of models; the
 * manifest's meaning is codegen's and the executor's. */

#define SSM_BUNDLE_VERSION 1

typedef struct ssm_bundle_writer ssm_bundle_writer;

ssm_bundle_writer *ssm_bundle_writer_create(void);
void ssm_bundle_writer_destroy(ssm_bundle_writer *w);
/* Appends a blob (16-byte aligned); *out_offset is its offset in the blob
 * section. */
void ssm_bundle_writer_add_blob(ssm_bundle_writer *w, const void *data, size_t n,
                                uint64_t *out_offset);
/* Writes the file: header, `manifest_json` (not copied), blobs. */
ssm_status ssm_bundle_writer_save(ssm_bundle_writer *w, const char *manifest_json,
                                  const char *path);

typedef struct ssm_bundle ssm_bundle;

/* Reads and checks a bundle: magic, version (a different one is refused
 * with both numbers), extents inside the file, checksum, manifest is JSON. */
ssm_status ssm_bundle_open(const char *path, ssm_bundle **out);
void ssm_bundle_close(ssm_bundle *b);
const char *ssm_bundle_path(const ssm_bundle *b);
/* The manifest text (NUL-terminated) */
const char *ssm_bundle_manifest(const ssm_bundle *b);
/* Bounds-checked view of [offset, offset+size) of the blob section. */
ssm_status ssm_bundle_blob(const ssm_bundle *b, uint64_t offset, uint64_t size,
                           const void **out);

/* ---- bundle executor (exec.c) ------------------------------------------ */

/* Runs a compiled bundle on a Vulkan device: buffers sized from the
 * manifest, weights uploaded once from safetensors (converted as the
 * manifest says), pipelines and command buffers created once, state kept on
 * the device across runs. */
typedef struct ssm_rt ssm_rt;

typedef struct {
  int device;     /* --device N; -1 picks (discrete GPU first) */
  int validation; /* enable VK_LAYER_KHRONOS_validation */
} ssm_rt_opts;

/* Loads `bundle` with the checkpoint at `weights`. Every manifest field is
 * checked (indices, regions inside their buffers, kernel blobs inside the
 * bundle); errors name the bundle and the field. */
ssm_status ssm_rt_open(const char *bundle, const char *weights, const ssm_rt_opts *opts,
                       ssm_rt **out);
void ssm_rt_close(ssm_rt *rt);
int64_t ssm_rt_vocab(const ssm_rt *rt);
/* Tokens per run of the prefill program. */
int ssm_rt_prefill_tokens(const ssm_rt *rt);
/* Zeroes the model state (state tensors and the position); the sampler (not
 * part of it) keeps its settings and restarts at step 0. */
ssm_status ssm_rt_reset(ssm_rt *rt);
/* The absolute position of the next run's first token: tokens run since
 * opening or the last reset (part of the model state). */
int64_t ssm_rt_position(const ssm_rt *rt);
/* Feeds `count` tokens (1: the decode program; ssm_rt_prefill_tokens: the
 * prefill program) at the current position, which the program reads as its
 * input "pos" (if it has one), then advances the position by `count`.
 * Copies count*vocab logits to `logits` (may be NULL). A run that would go
 * past the bundle's max_seq is refused before it starts ("position 2048 is
 * past --max-seq 2048"). */
ssm_status ssm_rt_run(ssm_rt *rt, const int32_t *tokens, int count, float *logits);
/* The Vulkan context (for device info and validation counts). */
ssm_vk *ssm_rt_vk(ssm_rt *rt);
/* Tokens fed since the last reset (or since the restored state). */
int64_t ssm_rt_position(const ssm_rt *rt);
/* The model's state tensors (SSM, conv, KV caches), in manifest order. */
int ssm_rt_state_count(const ssm_rt *rt);
ssm_status ssm_rt_state_info(const ssm_rt *rt, int i, const char **out_name, ssm_type *out_type);
ssm_status ssm_rt_state_read(ssm_rt *rt, int i, void *dst);
ssm_status ssm_rt_state_write(ssm_rt *rt, int i, const void *src);
void ssm_rt_set_position(ssm_rt *rt, int64_t position);
/* The architecture name and the weights' fingerprint (ssm_st_fingerprint). */
const char *ssm_rt_arch(const ssm_rt *rt);
uint64_t ssm_rt_fingerprint(const ssm_rt *rt);

/* ---- state files (statefile.c) ----------------------------------------- */

/* A saved model state: "SSMS", format version, a JSON header (architecture,
 * weights fingerprint, position, each tensor's name, dtype, shape, offset,
 * size, and an FNV-1a 64 checksum of the data), then the tensor data.
 * Loading checks all of it against the model it is restored into: another
 * architecture, other weights, a missing/extra/differently shaped tensor, a
 * truncated or corrupt file are clear errors and change nothing. */
#define SSM_STATE_VERSION 1

typedef struct {
  const char *name;
  ssm_type type;
  void *data; /* numel * dtype size bytes */
} ssm_state_tensor;

ssm_status ssm_state_save(const char *path, const char *arch, uint64_t fingerprint,
                          int64_t position, const ssm_state_tensor *t, int n);
/* Fills t[i].data (already allocated, sized by t[i].type) from the file. */
ssm_status ssm_state_load(const char *path, const char *arch, uint64_t fingerprint,
                          int64_t *out_position, ssm_state_tensor *t, int n);

/* The same for a running bundle, and for the CPU interpreter with the state
 * tensors that graph `g` declares. */
ssm_status ssm_rt_state_save(ssm_rt *rt, const char *path);
ssm_status ssm_rt_state_load(ssm_rt *rt, const char *path);
ssm_status ssm_cpu_state_save(ssm_cpu *c, ssm_graph *g, const char *arch, const char *path);
ssm_status ssm_cpu_state_load(ssm_cpu *c, ssm_graph *g, const char *arch, const char *path);
/* Sets the decode program's sampler (its state, step 0): temperature (0:
 * greedy, the first largest logit), top_k (0: off), top_p (1: off), seed
 * (in [0, 2^24)); kept across ssm_rt_reset, which restarts its step. Out of
 * range values are an error. Until set, the sampler is greedy. A bundle
 * without a sampler (an older ssmc) is an error. */
ssm_status ssm_rt_set_sampler(ssm_rt *rt, float temperature, int top_k, float top_p,
                              int64_t seed);
/* Generates `n` tokens on the device: uploads `first_token` once, then runs
 * the decode program n times, each run drawing the next id with the sampler
 * and copying it into the next run's input on the device, without the host.
 * Ids are read back from a host-visible ring after each submission, which
 * holds several decode steps when `on_token` is NULL. With `on_token`, it is
 * called after every step, before the next is submitted (ssm_rt_read_logits
 * then reads that step's logits); a non-zero return stops generation.
 * out_ids gets the ids in order (as many as on_token saw). */
ssm_status ssm_rt_generate(ssm_rt *rt, int32_t first_token, int n, int32_t *out_ids,
                           int (*on_token)(int32_t id, void *user), void *user);
/* Copies the logits of the last decode run (vocab floats). */
ssm_status ssm_rt_read_logits(ssm_rt *rt, float *logits);

/* ---- inspect and bench (inspect.c, bench.c) ------------------------------ */

/* A readable summary of a bundle (kernels, buffers, programs with their
 * dispatches), or with `json` one JSON object: the manifest without its
 * dispatch lists, plus programs.<name>.dispatches and the planned bytes.
 * malloc'd text. */
ssm_status ssm_inspect(const char *bundle, int json, char **out_text);

typedef struct {
  double decode_tok_s, prefill_tok_s;
  double decode_feedback_tok_s; /* ssm_rt_generate (0: the bundle has no sampler) */
  int decode_tokens, prefill_tokens;
  uint64_t weight_bytes;
} ssm_bench_result;

/* Times `decode_tokens` greedy decode steps (logits read back, next token
 * chosen on the host, as `ssmc run --greedy` does), the same with the token
 * fed back on the device (ssm_rt_generate), and several prefill runs, after
 * a warm-up. State is reset before each phase; the sampler is left greedy. */
ssm_status ssm_bench(ssm_rt *rt, int decode_tokens, ssm_bench_result *out);
/* Bytes of weights the bundle's device buffers hold. */
uint64_t ssm_rt_weight_bytes(const ssm_rt *rt);

/* ---- tokenizer (tokenizer.c) ------------------------------------------- */

/* A byte-level BPE tokenizer read from a Hugging Face tokenizer.json (the
 * format of GPT-2, GPT-NeoX / Mamba and Falcon / Falcon-Mamba tokenizers).
 * It gives the ids that the `tokenizers` library gives. Supported:
 * model.type "BPE" (merges as "a b" strings or ["a", "b"] pairs,
 * ignore_merges; no byte_fallback, dropout or subword affixes); normalizer
 * null or NFC; pre_tokenizer ByteLevel (add_prefix_space, use_regex) or a
 * Sequence of Split (a literal string, or the GPT-2, GPT-4/Llama-3 or
 * "[0-9][0-9][0-9]" regex; every behavior; invert), Punctuation, Digits and
 * exactly one ByteLevel; added_tokens with special, normalized, lstrip,
 * rstrip and single_word; post_processor null or ByteLevel; decoder
 * ByteLevel. truncation and padding are ignored. Anything else is refused
 * with an error naming the file and the field. Immutable after loading, so
 * it may be shared between threads. */
typedef struct ssm_tok ssm_tok;

/* Loads and checks `path`. Errors name the file and what is wrong: not JSON
 * ("FILE:LINE:COL: not valid JSON"), an unsupported feature ("FILE:
 * model.type 'Unigram' is not supported (only BPE)"), a missing model.vocab,
 * a merge naming an unknown token, a vocab id out of range or given twice,
 * a byte without its byte-level token. */
ssm_status ssm_tok_load(const char *path, ssm_tok **out);
/* NULL is fine. */
void ssm_tok_free(ssm_tok *t);
/* Largest token id + 1 (model vocab and added tokens). */
int32_t ssm_tok_vocab_size(const ssm_tok *t);
/* The id of the token spelled `token` (an added token such as
 * "<|endoftext|>", or a model token in its byte-level spelling), or -1. */
int32_t ssm_tok_token_id(const ssm_tok *t, const char *token);
/* The spelling of token `id` as in tokenizer.json; NULL for an unused id. */
const char *ssm_tok_token(const ssm_tok *t, int32_t id);
/* Whether `id` is an added token marked special. */
int ssm_tok_is_special(const ssm_tok *t, int32_t id);

/* Encodes `len` bytes of UTF-8 `text` into a malloc'd array of ids (free()
 * it; never NULL on success, even for no ids). Added tokens in the text
 * (special ones too) become their ids, as the library does; nothing is
 * added around the text. Text that is not valid UTF-8 is an error. */
ssm_status ssm_tok_encode(const ssm_tok *t, const char *text, size_t len, int32_t **out_ids,
                          size_t *out_n);

/* Decodes ids into malloc'd, NUL-terminated text (the library's
 * decode(ids, skip_special_tokens)). Invalid UTF-8 that tokens produce
 * becomes U+FFFD, as the library does. An unknown id is an error. */
ssm_status ssm_tok_decode(const ssm_tok *t, const int32_t *ids, size_t n, int skip_special,
                          char **out_text, size_t *out_len);

/* Streaming decoder for generation: feed one id at a time and print what
 * comes back. It never returns part of a multi-byte UTF-8 character: an
 * incomplete one is held until the bytes that complete it arrive (or
 * flush). The concatenation of everything returned equals ssm_tok_decode of
 * all the ids. */
typedef struct ssm_tok_stream ssm_tok_stream;

ssm_tok_stream *ssm_tok_stream_new(const ssm_tok *t, int skip_special);
/* NULL is fine. */
void ssm_tok_stream_free(ssm_tok_stream *s);
/* Adds token `id`; *out_text (owned by the stream, valid until its next
 * call) gets the bytes that are now complete, *out_len of them (maybe 0).
 * An unknown id is an error and changes nothing. */
ssm_status ssm_tok_stream_feed(ssm_tok_stream *s, int32_t id, const char **out_text,
                               size_t *out_len);
/* Ends the stream: returns what is still held back (an incomplete sequence
 * becomes U+FFFD) and leaves the stream empty, ready for more. */
void ssm_tok_stream_flush(ssm_tok_stream *s, const char **out_text, size_t *out_len);

#endif
