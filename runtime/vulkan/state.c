/*
 * state.c — state files (backend.h) for a running bundle.
 */
#include <string.h>

#include "runtime/vulkan/vulkan.h"

static size_t tensor_bytes(const ssm_type *t) {
  return (size_t)ssm_type_numel(t) * ssm_dtype_size(t->dtype);
}

/* ---- the Vulkan runtime -------------------------------------------------- */

/* Describes rt's state tensors with host buffers (freed by free_tensors). */
static ssm_status rt_tensors(ssm_rt *rt, ssm_state_tensor **out, int *out_n) {
  int n = ssm_rt_state_count(rt);
  ssm_state_tensor *t = calloc((size_t)n + 1, sizeof *t);
  if (!t) abort();
  for (int i = 0; i < n; i++) {
    ssm_status s = ssm_rt_state_info(rt, i, &t[i].name, &t[i].type);
    if (!s && !(t[i].data = malloc(tensor_bytes(&t[i].type) + 1)))
      s = ssm_status_new(SSM_ERR_NOMEM, "out of memory for state '%s'", t[i].name);
    if (s) {
      for (int j = 0; j <= i; j++) free(t[j].data);
      free(t);
      return s;
    }
  }
  *out = t;
  *out_n = n;
  return NULL;
}

static void free_tensors(ssm_state_tensor *t, int n) {
  for (int i = 0; i < n; i++) free(t[i].data);
  free(t);
}

ssm_status ssm_rt_state_save(ssm_rt *rt, const char *path) {
  ssm_state_tensor *t;
  int n;
  SSM_TRY(rt_tensors(rt, &t, &n));
  ssm_status s = NULL;
  for (int i = 0; i < n && !s; i++) s = ssm_rt_state_read(rt, i, t[i].data);
  if (!s) s = ssm_state_save(path, ssm_rt_arch(rt), ssm_rt_fingerprint(rt), ssm_rt_position(rt), t, n);
  free_tensors(t, n);
  return s;
}

ssm_status ssm_rt_state_load(ssm_rt *rt, const char *path) {
  ssm_state_tensor *t;
  int n;
  int64_t pos = 0;
  SSM_TRY(rt_tensors(rt, &t, &n));
  ssm_status s = ssm_state_load(path, ssm_rt_arch(rt), ssm_rt_fingerprint(rt), &pos, t, n);
  for (int i = 0; i < n && !s; i++) s = ssm_rt_state_write(rt, i, t[i].data);
  if (!s) ssm_rt_set_position(rt, pos);
  free_tensors(t, n);
  return s;
}

