/*
 * state.c — state files (backend.h) for the CPU interpreter.
 */
#include <string.h>

#include "runtime/cpu/cpu.h"

static size_t tensor_bytes(const ssm_type *t) {
  return (size_t)ssm_type_numel(t) * ssm_dtype_size(t->dtype);
}

/* ---- the CPU interpreter -------------------------------------------------- */

static ssm_status cpu_tensors(ssm_cpu *c, ssm_graph *g, ssm_state_tensor **out, int *out_n) {
  int n = 0;
  for (ssm_node *x = g->first; x; x = x->next) n += x->op == SSM_OP_STATE;
  ssm_state_tensor *t = calloc((size_t)n + 1, sizeof *t);
  if (!t) abort();
  int i = 0;
  for (ssm_node *x = g->first; x; x = x->next) {
    if (x->op != SSM_OP_STATE) continue;
    t[i].name = ssm_node_str(x, "name", "");
    t[i].type = x->result->type;
    float *data;
    ssm_status s = ssm_cpu_state(c, t[i].name, &t[i].type, &data);
    if (s) {
      free(t);
      return s;
    }
    t[i++].data = data; /* the interpreter's own memory */
  }
  *out = t;
  *out_n = n;
  return NULL;
}

ssm_status ssm_cpu_state_save(ssm_cpu *c, ssm_graph *g, const char *arch, const char *path) {
  ssm_state_tensor *t;
  int n;
  SSM_TRY(cpu_tensors(c, g, &t, &n));
  ssm_status s = ssm_state_save(path, arch, ssm_cpu_fingerprint(c), ssm_cpu_position(c), t, n);
  free(t);
  return s;
}

ssm_status ssm_cpu_state_load(ssm_cpu *c, ssm_graph *g, const char *arch, const char *path) {
  ssm_state_tensor *t;
  int n;
  int64_t pos = 0;
  SSM_TRY(cpu_tensors(c, g, &t, &n));
  /* load into copies first: a bad file must change nothing */
  ssm_state_tensor *tmp = calloc((size_t)n + 1, sizeof *tmp);
  if (!tmp) abort();
  ssm_status s = NULL;
  for (int i = 0; i < n; i++) {
    tmp[i] = t[i];
    if (!(tmp[i].data = malloc(tensor_bytes(&t[i].type) + 1))) abort();
  }
  s = ssm_state_load(path, arch, ssm_cpu_fingerprint(c), &pos, tmp, n);
  for (int i = 0; i < n; i++) {
    if (!s) memcpy(t[i].data, tmp[i].data, tensor_bytes(&t[i].type));
    free(tmp[i].data);
  }
  if (!s) ssm_cpu_set_position(c, pos);
  free(tmp);
  free(t);
  return s;
}
