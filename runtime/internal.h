/*
 * internal.h — what the files of runtime/ share and nothing else sees: the
 * session behind the public API.
 */
#ifndef SSM_RUNTIME_INTERNAL_H
#define SSM_RUNTIME_INTERNAL_H

#include "runtime/backend/backend.h"
#include "runtime/ssmc.h"
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
  char *tok_path;    /* where the tokenizer is (NULL: nowhere known) */
  int tok_explicit;  /* options.tokenizer named it */
  ssm_tok *tok;
  int64_t eos_option;
  int eos_known;
  int64_t eos;
  float *rows;       /* logits of one run */
  size_t rows_cap;
};

/* Makes `s`'s state the backend's (parking the resident session's state
 * first); every call that touches the state starts with it. */
ssm_status ssm_session_resident(ssmc_session *s);
/* Drops one reference; the last one closes the backend. */
void ssm_loaded_release(ssm_loaded *m);

#endif
