/* placeholder: replaced by the lead */
/*
 * schedule.c — the schedule pass (not implemented yet: leaves the graph unchanged).
 */
#include "passes.h"

ssm_status ssm_pass_schedule(ssm_graph *g, const ssm_pass_opts *o, char *out_note, size_t n) {
  snprintf(out_note, n, "not implemented yet");
  return NULL;
}
