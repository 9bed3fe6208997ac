/*
 * internal.h — what the files of runtime/ share and nothing else sees: the
 * session behind the public API.
 */
#ifndef SSM_RUNTIME_INTERNAL_H
#define SSM_RUNTIME_INTERNAL_H

#include "bundle/bundle.h"
#include "runtime/backend/backend.h"
#include "runtime/ssmc.h"
#include "runtime/weights/weights.h"
#include "tokenizer/tokenizer.h"

/* One loaded model (a backend) shared by a session and the sessions forked
 * from it. The backend holds one state at a time: that of `resident`; every
 * other session keeps its state in `parked`, a snapshot on the device, and
 * becomes resident (ssm_session_resident) before it runs. */
typedef struct {
  ssm_backend *b;
  int refs;               /* sessions and snapshots using it */
  ssmc_session *resident; /* NULL: the state belongs to no session */
} ssm_loaded;

struct ssmc_snapshot {
  ssm_loaded *model;
  ssm_snapshot *snap;
};

struct ssmc_session {
  ssm_loaded *model;
  ssm_snapshot *parked; /* this session's state while another is resident */
  ssm_backend *b;       /* model->b */
  char *weights;        /* the checkpoint it was opened with */
  ssmc_stats stats;
  char *cache_file;
  double gen_t0;        /* when the prompt of the generate call under way was fed */
  char *tok_path;    /* where the tokenizer is (NULL: nowhere known) */
  int tok_explicit;  /* options.tokenizer named it */
  ssm_tok *tok;
  int64_t eos_option;
  int eos_known;
  int64_t eos;
  float *rows;       /* logits of one run */
  size_t rows_cap;
};

/* Monotonic seconds. */
double ssm_rt_now(void);

/* ---- the compile cache (cache.c) --------------------------------------------- */

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

/* ---- a bundle's recorded weights (source.c) ------------------------------------- */

/* The weights directory that bundle `b` was compiled with, checked against
 * the fingerprints it recorded: an error naming the bundle and what is
 * missing or changed, or when it recorded none. */
ssm_status ssm_bundle_weights(const ssm_bundle *b, const char **out_dir);

/* Makes `s`'s state the backend's (parking the resident session's state
 * first); every call that touches the state starts with it. */
ssm_status ssm_session_resident(ssmc_session *s);
/* Drops one reference; the last one closes the backend. */
void ssm_loaded_release(ssm_loaded *m);

#endif
