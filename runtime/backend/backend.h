/*
 * backend.h — what every backend shares: state files (the saved SSM, conv
 * and KV state of a model, with its position).
 */
#ifndef SSM_BACKEND_H
#define SSM_BACKEND_H

#include "ir/ir.h"

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

#endif
