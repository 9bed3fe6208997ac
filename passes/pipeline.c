/*
 * pipeline.c — the list of passes and the loop that runs them.
 *
 * ssm_passes[] is the pipeline, read top to bottom. ssm_passes_run runs it
 * on one graph, optionally stopping after a named pass, and hands the graph
 * and the pass's note to a callback after each pass (`ssmc ir --after`).
 * In builds with SSM_VERIFY_PASSES (Debug) the verifier runs after every
 * pass, so a pass that leaves a broken graph is caught at once and named:
 * "after pass fuse: graph decode: %12 (add): ...".
 */
#include "passes/passes.h"

#include <string.h>

const ssm_pass ssm_passes[] = {
    {"verify", ssm_pass_verify, "check the graph (arity, attributes, types, SSA order)"},
    {"infer", ssm_pass_infer, "recompute every result type from the shape rules"},
    {"simplify", ssm_pass_simplify, "fold unary ops on weights into load-time transforms, CSE, DCE"},
    {"weights", ssm_pass_weights, "keep matmul and embed weights in the bundle's dtype (f16, bf16)"},
    {"fuse", ssm_pass_fuse, "group ops into kernels (elementwise chains, norm prologues, scan)"},
    {"plan_buffers", ssm_pass_plan_buffers, "give activations offsets in one pool by liveness"},
    {"schedule", ssm_pass_schedule, "order the kernels into a dispatch list with barriers"},
    {NULL, NULL, NULL},
};

static ssm_status unknown_pass(const ssm_pass *list, const char *name) {
  char names[512];
  size_t k = 0;
  names[0] = 0;
  for (const ssm_pass *p = list; p->name && k < sizeof names; p++)
    k += (size_t)snprintf(names + k, sizeof names - k, k ? ", %s" : "%s", p->name);
  return ssm_status_new(SSM_ERR_INVALID, "unknown pass '%s' (passes: %s)", name, names);
}

ssm_status ssm_passes_run_list(const ssm_pass *list, ssm_graph *g, const ssm_pass_opts *o,
                               const char *stop_after, ssm_pass_after_fn after, void *user,
                               int verify_between) {
  if (stop_after) {
    const ssm_pass *p = list;
    while (p->name && strcmp(p->name, stop_after)) p++;
    if (!p->name) return unknown_pass(list, stop_after);
  }
  static const ssm_pass_opts defaults = {0};
  if (!o) o = &defaults;
  for (const ssm_pass *p = list; p->name; p++) {
    char note[512] = "";
    SSM_TRY(ssm_arena_check(g->arena, p->fn(g, o, note, sizeof note), "the IR graph"));
    if (after) after(p->name, g, note, user);
    if (verify_between) {
      ssm_status s = ssm_graph_verify(g);
      if (s) return ssm_status_wrap(s, "after pass %s", p->name);
    }
    if (stop_after && !strcmp(p->name, stop_after)) break;
  }
  return NULL;
}

ssm_status ssm_passes_run(ssm_graph *g, const ssm_pass_opts *o, const char *stop_after,
                          ssm_pass_after_fn after, void *user) {
#ifdef SSM_VERIFY_PASSES
  int verify_between = 1;
#else
  int verify_between = 0;
#endif
  return ssm_passes_run_list(ssm_passes, g, o, stop_after, after, user, verify_between);
}
