/*
 * internal.h — what the files of runtime/ share and nothing else sees: the
 * session behind the public API.
 */
#ifndef SSM_RUNTIME_INTERNAL_H
#define SSM_RUNTIME_INTERNAL_H

#include "runtime/backend/backend.h"
#include "runtime/ssmc.h"
#include "tokenizer/tokenizer.h"

struct ssmc_session {
  ssm_backend *b;
  char *tok_path;    /* where the tokenizer is (NULL: nowhere known) */
  int tok_explicit;  /* options.tokenizer named it */
  ssm_tok *tok;
  int64_t eos_option;
  int eos_known;
  int64_t eos;
  float *rows;       /* logits of one run */
  size_t rows_cap;
};

#endif
