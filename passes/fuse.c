/* placeholder: replaced by the lead */
/*
 * fuse.c — the fuse pass (not implemented yet: leaves the graph unchanged).
 */
#include "passes.h"

ssm_status ssm_pass_fuse(ssm_graph *g, const ssm_pass_opts *o, char *out_note, size_t n) {
  snprintf(out_note, n, "not implemented yet");
  return NULL;
}
