/*
 * compile.h — the compiler driver: from a model description bound to its
 * config.json (frontend.h) to an in-memory bundle (bundle.h), through the
 * passes (passes.h) and the kernel generator (codegen.h); and the compile
 * cache that keeps compiled models on disk by content.
 */
#ifndef SSM_COMPILE_H
#define SSM_COMPILE_H

#include "bundle/bundle.h"
#include "codegen/codegen.h"
#include "frontend/frontend.h"

/* ---- compiling a model (compile.c) --------------------------------------- */

typedef struct {
  int prefill_tokens;   /* T of the prefill program (0: ssm_compile_chunk's default) */
  int slots;            /* sequences of the batched decode program (0: none; ssm_mf_program batch) */
  ssm_dtype dtype;      /* of the matmul and embed weights (f32, f16, bf16: the weights
                         * pass); the rest, activations and state are f32 */
  int no_fuse;          /* every op a kernel of its own (for testing fusion) */
  /* gemm_coop without the kernel that makes its x ready once a row before
   * it (codegen.h, ssm_cg_opts): the product loop then rounds x itself;
   * also asked for by env SSM_COOP_PREP=0 (ssm_compile_coop_prep) */
  int no_coop_prep;
  /* the delta rule step by step in the prefill program too (ssm_cg_opts
   * delta_steps); also asked for by env SSM_DELTA_CHUNKS=0 */
  int delta_steps;
  const char *dump_dir; /* write the IR after every pass here (--dump-ir) */
  ssm_progress progress; /* "compiling decode"/"compiling prefill": kernels made of
                            the program's; may cancel */
  uint64_t wgsl_window; /* bytes of a WGSL storage window, and of the GLSL windows
                           of larger tensors (0: SSM_BUNDLE_WINDOW; smaller ones
                           test the window split on small models) */
  /* with each pass's note on the decode program (the weights pass says how
   * many weights it retyped and which it kept in bf16, and why), when not
   * NULL */
  void (*on_note)(const char *pass, const char *note, void *user);
  void *note_user;
} ssm_compile_opts;

/* Whether ssm_compile makes gemm_coop's prep kernels with `opts`: unless
 * its no_coop_prep or env SSM_COOP_PREP=0 says not to. */
int ssm_compile_coop_prep(const ssm_compile_opts *opts);

/* Whether ssm_compile runs the delta rule step by step in every program
 * with `opts`: its delta_steps, or env SSM_DELTA_CHUNKS=0. */
int ssm_compile_delta_steps(const ssm_compile_opts *opts);

/* The prefill program's T that ssm_compile gives `m` with `opts`:
 * prefill_tokens, or when that is 0, SSM_CHUNK_DEFAULT, or the model's
 * max_seq when that is smaller (a KV cache holds a whole chunk). */
int ssm_compile_chunk(const ssm_model *m, const ssm_compile_opts *opts);

/* Builds the decode (T=1, with a sampler) and prefill graphs of `m`, runs
 * the passes, generates and compiles the kernels, and lays out the
 * buffers: an in-memory bundle. */
ssm_status ssm_compile(ssm_model *m, const ssm_compile_opts *opts, ssm_bundle **out);

/* ---- the compile cache (cache.c) ----------------------------------------- */

/* Compiles `m` with `co`, or reads the result from the cache directory
 * `dir`: the entry DIR/<key>.ssmb, where the key hashes the model's digest
 * (description, config, params), the compile options and the ssmc build
 * (version, git revision, the binary's build id). A missing or unreadable
 * entry is compiled and written (atomically; failing to write it is only
 * logged). *out_hit says whether it came from the cache, *out_path
 * (malloc'd) is the entry, *out_compile_s the time spent compiling. */
ssm_status ssm_cache_compile(ssm_model *m, const ssm_compile_opts *co, const char *dir,
                             ssm_bundle **out, int *out_hit, char **out_path,
                             double *out_compile_s);

/* Whether a regular file is at `path`, a cache entry's place, found
 * without opening it: *out_present 1 when one is, 0 when nothing is. A
 * FIFO, device, socket or link to one there is removed (and logged), so
 * that the entry written next replaces it and nothing waits on it; a
 * directory is an error. */
ssm_status ssm_cache_entry_look(const char *path, int *out_present);

#endif
