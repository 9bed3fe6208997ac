/*
 * weights.h — the checkpoint side of the runtime: safetensors files (mmap'd,
 * single or sharded) and the load-time weight transforms that the IR's
 * weight op names.
 */
#ifndef SSM_WEIGHTS_H
#define SSM_WEIGHTS_H

#include "ir/ir.h"

/* ---- safetensors (safetensors.c) --------------------------------------- */

/* One tensor of a checkpoint (its bytes are read with ssm_st_read). */
typedef struct {
  const char *name;
  ssm_dtype dtype; /* F32, F16, BF16 in the file (I32 for "I32") */
  int rank;
  int64_t shape[SSM_MAX_RANK];
  size_t nbytes;
  const char *file; /* the shard it lives in */
  int file_index;   /* which of the open files */
  uint64_t offset;  /* of its first byte in that file */
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
/* The dtype (f32, f16, bf16) that holds most of the checkpoint's float
 * bytes: what a model is compiled to when no dtype is asked for. */
ssm_dtype ssm_st_float_dtype(const ssm_st *st);
/* ssm_st_float_dtype of the checkpoint at `path` (only its headers are read). */
ssm_status ssm_st_path_dtype(const char *path, ssm_dtype *out);
/* The checks ssm_st_read makes before it reads: the tensor exists, with
 * want's shape and a dtype it converts to want's. A name holding "{*}" is a
 * stacked tensor (the experts of a mixture-of-experts layer): want's first
 * dim counts its parts, and part k is the tensor named with k in place of
 * "{*}", of want's shape without that dim; both functions treat each part
 * as a tensor of its own and place them one after another (ssm_st_open
 * refuses a stored name holding "{*}"). */
ssm_status ssm_st_check(const ssm_st *st, const char *name, const ssm_type *want);
/* Copies tensor `name` into `dst`, converting to want->dtype (f32, f16, bf16
 * from f32, f16, bf16; or q8_0, ssm_type_bytes(want) bytes: ir.h). Errors name the tensor: missing ("tensor 'x' not
 * found in DIR"), or a shape other than want's ("tensor 'x' has shape
 * [4,8] in the checkpoint but the model expects [8,4]"). */
ssm_status ssm_st_read(const ssm_st *st, const char *name, const ssm_type *want,
                       void *dst);

/* Quantized weights may be stored quantized (ssm_st_write writes them so):
 * a weight `name` of type q8_0 or q4_0 is then two tensors, its blocks
 * *out_q (`name` with "{*}" as "*", then ".q8_0" or ".q4_0") and its
 * scales *out_d (that, then ".scales"; malloc'd, free() both). The blocks
 * are I8 (q8_0's q, in the weight's shape) or U8 (q4_0's bytes of two
 * elements, low nibble first: the weight's shape with the last dim halved
 * when it is even, else one dim of all the bytes), the scales F16 (the
 * weight's shape with the last dim counting blocks): ir.h's ssm_qlayout in
 * two parts. ssm_st_check and ssm_st_read take a weight so stored when the
 * blocks are there (each scale must be finite), and quantize it from its
 * float tensor when they are not. I8 and U8 tensors are read only so. */
ssm_status ssm_st_quant_names(const char *name, ssm_dtype d, char **out_q, char **out_d);

/* One weight a bundle reads: its name in the checkpoint (stacked: "{*}")
 * and its type. */
typedef struct {
  const char *name;
  ssm_type type;
} ssm_st_weight;

/* Writes the `n` weights `w` as read from `src` into the safetensors file
 * `path`: a quantized one as its blocks and scales (ssm_st_quant_names),
 * every other as `src` holds it (a stacked one part by part), each once.
 * Streams weight by weight (host memory of about one weight as f32),
 * quantizing on every core; deterministic (the same weights and types give
 * the same bytes); atomic (a temporary file renamed over `path`). Reports
 * to `p` ("quantizing weights", bytes written of all). *out_fingerprint
 * (may be NULL) is the written file's ssm_st_fingerprint. */
ssm_status ssm_st_write(const ssm_st *src, const ssm_st_weight *w, int n, const char *path,
                        const ssm_progress *p, uint64_t *out_fingerprint);

/* A fingerprint of the checkpoint: XXH3-64 over every tensor's name, dtype,
 * shape and all of its bytes. State files carry it so a state is not
 * restored into other weights. Tensors already read (ssm_st_read hashes what
 * it reads) are not read again; the others are. A read error goes to
 * *out_err (and 0 is returned). */
uint64_t ssm_st_fingerprint(const ssm_st *st, ssm_status *out_err);

/* Reports reading to `p` (NULL: no reports): "loading weights", bytes of
 * the checkpoint hashed so far (each byte counts once, whether ssm_st_read
 * or ssm_st_fingerprint read it) of the bytes not yet hashed. When the
 * callback asks to stop, the read in progress fails with SSM_ERR_CANCELLED. */
ssm_status ssm_st_set_progress(ssm_st *st, const ssm_progress *p) SSM_MUST_CHECK;

/* ---- the files of a weights directory (source.c) ----------------------- */

/* One file a run reads in a weights directory, and its fingerprint. */
typedef struct {
  char name[256]; /* "config.json", "model.safetensors", a shard's name */
  uint64_t hash;  /* XXH3-64: of the whole file (JSON), or of its tensor table */
} ssm_st_source_file;

/* Fingerprints the weights directory `dir` cheaply, file by file:
 * config.json and model.safetensors.index.json (when present) whole, and
 * each safetensors file by its tensor table (names, dtypes, shapes, sizes,
 * offsets; not the data). *out_files is malloc'd (free() it). A directory
 * that ssm_st_open refuses is that error. */
ssm_status ssm_st_source(const char *dir, ssm_st_source_file **out_files, int *out_count);
/* Checks that the weights at `weights` (a directory, or a file in one)
 * are of the model a bundle was compiled for: the config.json there must
 * agree with `config`, the keys and values the bundle recorded
 * (bundle.h: ssm_manifest.config; null: absent). A difference is an error
 * that names the keys, starting with `name` (the bundle). Nothing to
 * compare (no `config`, or no config.json there) passes: the weights'
 * names and shapes are still checked as they load. */
ssm_status ssm_st_check_config(const char *weights, const char *config, const char *name);

/* ---- load-time weight transforms (transform.c) ------------------------- */

/* Applies `transform` (the weight op's attribute: comma-separated names of
 * unary ops of ops.def, applied in order, e.g. "exp,neg" is -exp(w); "" does
 * nothing) to the `n` floats of `data` in place, with the CPU interpreter's
 * numerics (each op in double, stored as float). The whole string is checked
 * before any element changes: an empty or unknown op name is an error naming
 * it. */
ssm_status ssm_weight_transform(const char *transform, float *data, size_t n);

#endif
