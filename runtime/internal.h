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
  int64_t *slot_pos;      /* the position of each slot's sequence (slots.c; made when first joined) */
  float *slot_seen;       /* each slot's seen-token set, SSM_SEEN_WORDS(vocab) floats a slot: the
                           * joining session's, and every id fed or drawn in the slot since */
} ssm_loaded;

struct ssmc_snapshot {
  ssm_loaded *model;
  ssm_snapshot *snap;
  float *seen; /* the session's seen-token set when it was taken (NULL: none) */
};

/* A model directory's generation_config.json (genconfig.c). */
enum { SSM_GC_DO_SAMPLE, SSM_GC_TEMPERATURE, SSM_GC_TOP_K, SSM_GC_TOP_P, SSM_GC_MIN_P,
       SSM_GC_REPEAT_PENALTY, SSM_GC_COUNT };
#define SSM_GENCONFIG_MAX_EOS 16
typedef struct {
  char path[4224];  /* the file read; "" when there was none */
  int neos;         /* its eos_token_id: an id or a list */
  int64_t eos[SSM_GENCONFIG_MAX_EOS];
  int do_sample;
  int has[SSM_GC_COUNT];      /* the fields given (not null) */
  double value[SSM_GC_COUNT]; /* the numbers among them */
  char from[160];   /* the fields that are defaults, for people ("eos_token_id, do_sample") */
} ssm_genconfig;

/* Reads dir/generation_config.json (nothing when there is none); a field
 * of the wrong type or out of range is an error naming the file and field. */
ssm_status ssm_genconfig_read(const char *dir, int64_t vocab, ssm_genconfig *out);
/* Fills c->from. */
void ssm_genconfig_describe(ssm_genconfig *c);
/* The name of field i (SSM_GC_*) in the file. */
const char *ssm_genconfig_field(int i);

struct ssmc_session {
  ssm_loaded *model;
  ssm_snapshot *parked; /* its state while another session is resident */
  ssm_backend *b;       /* model->b */
  char *weights;        /* the checkpoint it was opened with */
  char *model_dir;      /* where its tokenizer and chat template are looked for */
  ssmc_stats stats;
  char *cache_file;
  double gen_t0;        /* when the prompt of the generate call under way was fed */
  ssmc_backend backend;       /* what it runs on (options.backend, AUTO resolved) */
  const char *backend_reason; /* why (static) */
  uint64_t backend_params;    /* the parameters AUTO counted (0: none) */
  char *tok_path;    /* where the tokenizer is (NULL: nowhere known) */
  int tok_explicit;  /* options.tokenizer named it */
  ssm_tok *tok;
  int64_t eos_option;
  int eos_known;
  int64_t eos;
  float *rows;       /* logits of one run */
  size_t rows_cap;
  /* every token fed or drawn since the last reset, for the repetition
   * penalty: SSM_SEEN_WORDS(vocab) floats (ir.h); NULL until the first */
  float *seen;
  ssm_genconfig genconfig; /* the model directory's generation_config.json */
};

/* A copy of a session's seen-token set (NULL stays NULL), malloc'd. */
ssm_status ssm_seen_copy(const ssmc_session *s, const float *from, float **out);

/* ---- the shared loaded model (loaded.c) ----------------------------------------- */

/* Makes `s`'s state the backend's (parking the resident session's state
 * first); every call that touches the state starts with it. */
ssm_status ssm_session_resident(ssmc_session *s);
/* Drops one reference; the last one closes the backend. */
void ssm_loaded_release(ssm_loaded *m);

/* ---- opening a session (session.c; runtime/open/) ------------------------------- */

/* Opens a model that is not a bundle (a model directory, an architecture
 * YAML, IR text) into s->b, and fills s->weights and the compile part of
 * s->stats. runtime/open/models.c gives one (compiling the model, or
 * interpreting it on the CPU); a runtime-only library has none. */
typedef ssm_status (*ssm_open_model_fn)(ssmc_session *s, const char *model,
                                        const ssmc_options *o);

/* ssmc_session_open, with `open_model` (may be NULL: bundles only) for
 * models that are not bundles. */
ssm_status ssm_session_open_with(const char *model, const ssmc_options *options,
                                 ssm_open_model_fn open_model, ssmc_session **out);
/* Whether `path` is a bundle: a regular file that starts with the bundle
 * magic. A FIFO, device or socket is refused here, before anything guesses
 * what the path is from its name (it could not be read as a model either),
 * and so is a file without the magic that is named .ssmb or binary (a NUL
 * among its first bytes, which no description or IR text holds): a
 * damaged bundle. */
ssm_status ssm_path_is_bundle(const char *path, int *out_bundle);
/* Opens bundle `bd` (owned by the backend from now on, also on failure) on
 * Vulkan with the weights at `weights` into s->b. */
ssm_status ssm_session_open_vulkan(ssmc_session *s, ssm_bundle *bd, const char *weights,
                                   const ssmc_options *o);
/* 1 when `path` is a directory. */
int ssm_is_dir(const char *path);

/* ---- a bundle's recorded weights (source.c) ------------------------------------- */

/* The weights of bundle `b`: the file that `ssmc compile` wrote them to
 * (ssm_manifest.weights_file) when it is beside the bundle (*out_file is
 * then 1, and the weights loaded from it must have the recorded
 * fingerprint: ssm_bundle_check_fingerprint), else the weights directory
 * it was compiled with, checked against the fingerprints it recorded: an
 * error naming the bundle and what is missing or changed, or when it
 * recorded none. *out_path is malloc'd. */
ssm_status ssm_bundle_weights(const ssm_bundle *b, char **out_path, int *out_file);
/* Whether weights of fingerprint `fp`, loaded from `path`, are the file
 * bundle `b` records: an error that says it changed. */
ssm_status ssm_bundle_check_fingerprint(const ssm_bundle *b, const char *path, uint64_t fp);
/* Writes the weights that bundle `b` reads, from the checkpoint `weights`,
 * to the file `path` beside it (runtime/weights: ssm_st_write) and
 * records it in the bundle's manifest (ssm_bundle_set_weights_file). */
ssm_status ssm_bundle_write_weights(ssm_bundle *b, const char *weights, const char *path,
                                    const ssm_progress *p);

#endif
