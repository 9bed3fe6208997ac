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

/* bf16/f16 <-> f32 conversions (round to nearest even). */
float ssm_bf16_to_f32(uint16_t h);
uint16_t ssm_f32_to_bf16(float f);
float ssm_f16_to_f32(uint16_t h);
uint16_t ssm_f32_to_f16(float f);

/* ---- CPU reference interpreter (cpu.c) --------------------------------- */

/* Executes IR graphs op by op in plain C, f32 arithmetic (double
 * accumulation in reductions). State tensors are kept by name across runs and
 * across graphs (a prefill graph and a decode graph share them). */
typedef struct ssm_cpu ssm_cpu;

ssm_status ssm_cpu_create(const ssm_st *weights, ssm_cpu **out);
void ssm_cpu_destroy(ssm_cpu *c);
/* Zeroes every state tensor. */
void ssm_cpu_reset(ssm_cpu *c);
/* Runs `g` (verified) with its input "tokens" set to `tokens` (as many as
 * the input's shape holds). Copies the graph's first output, converted to
 * f32, into `out` (out_count must equal its element count; out may be NULL).
 * Token ids out of range are an error, not a crash. */
ssm_status ssm_cpu_run(ssm_cpu *c, ssm_graph *g, const int32_t *tokens,
                       float *out, size_t out_count);

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

typedef struct ssm_vk ssm_vk;

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
/* Zeroes the model state. */
ssm_status ssm_rt_reset(ssm_rt *rt);
/* Feeds `count` tokens (1: the decode program; ssm_rt_prefill_tokens: the
 * prefill program) and copies count*vocab logits to `logits` (may be NULL). */
ssm_status ssm_rt_run(ssm_rt *rt, const int32_t *tokens, int count, float *logits);
/* The Vulkan context (for device info and validation counts). */
ssm_vk *ssm_rt_vk(ssm_rt *rt);

/* ---- inspect and bench (inspect.c, bench.c) ------------------------------ */

/* A readable summary of a bundle (kernels, buffers, programs with their
 * dispatches), or with `json` one JSON object: the manifest without its
 * dispatch lists, plus programs.<name>.dispatches and the planned bytes.
 * malloc'd text. */
ssm_status ssm_inspect(const char *bundle, int json, char **out_text);

typedef struct {
  double decode_tok_s, prefill_tok_s;
  int decode_tokens, prefill_tokens;
  uint64_t weight_bytes;
} ssm_bench_result;

/* Times `decode_tokens` greedy decode steps (logits read back, next token
 * chosen on the host, as `ssmc run` does) and several prefill runs, after a
 * warm-up. State is reset before each phase. */
ssm_status ssm_bench(ssm_rt *rt, int decode_tokens, ssm_bench_result *out);
/* Bytes of weights the bundle's device buffers hold. */
uint64_t ssm_rt_weight_bytes(const ssm_rt *rt);

#endif
