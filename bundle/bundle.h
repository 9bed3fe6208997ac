/*
 * bundle.h — the .ssmb kernel bundle: the container (container.c), compiling
 * a model into one (compile.c), and what `ssmc inspect` shows (inspect.c).
 */
#ifndef SSM_BUNDLE_H
#define SSM_BUNDLE_H

#include "codegen/codegen.h"
#include "frontend/frontend.h"

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

/* ---- compiling a model to a bundle (compile.c) ------------------------- */

typedef struct {
  int prefill_tokens;   /* T of the prefill program (default 32) */
  ssm_dtype dtype;      /* weight and activation dtype (f32 only for now) */
  int no_fuse;          /* every op a kernel of its own (for testing fusion) */
  const char *dump_dir; /* write the IR after every pass here (--dump-ir) */
} ssm_compile_opts;

/* Builds the decode (T=1) and prefill graphs of `m`, plans memory, generates
 * and compiles the kernels, and writes the bundle to `out_path`. */
ssm_status ssm_compile(ssm_model *m, const ssm_compile_opts *opts, const char *out_path);


/* ---- inspect and bench (inspect.c, bench.c) ------------------------------ */

/* A readable summary of a bundle (kernels, buffers, programs with their
 * dispatches), or with `json` one JSON object: the manifest without its
 * dispatch lists, plus programs.<name>.dispatches and the planned bytes.
 * malloc'd text. */
ssm_status ssm_inspect(const char *bundle, int json, char **out_text);


#endif
