/*
 * inspect.c — `ssmc inspect`: what a bundle holds, for people (text) and
 * for tools and tests (JSON, made by manifest.c).
 */
#include "bundle/internal.h"

static const char *usage_name(ssm_buffer_usage u) {
  return u == SSM_BUFFER_STATE         ? "state"
         : u == SSM_BUFFER_ACTIVATIONS ? "activations"
         : u == SSM_BUFFER_OUTPUT      ? "output"
         : u == SSM_BUFFER_SLOTS       ? "slots"
                                       : "weights";
}

static void program_line(ssm_sb *t, const char *name, const ssm_mf_program *p) {
  ssm_sb_printf(t, "  %-8s %3d tokens  %5d dispatches  activations %llu bytes (unplanned %llu)\n",
                name, p->tokens, p->nsteps, (unsigned long long)p->activation_bytes,
                (unsigned long long)p->activation_bytes_unplanned);
}

ssm_status ssm_bundle_describe(const ssm_bundle *b, int json, char **out) {
  const ssm_manifest *m = &b->manifest;
  *out = NULL;
  if (json) {
    ssm_sb t = {0};
    char *j = ssm_manifest_summary_json(m);
    if (!j) return ssm_status_new(SSM_ERR_NOMEM, "%s: out of host memory for the summary", b->name);
    ssm_sb_printf(&t, "%s\n", j);
    free(j);
    return ssm_sb_take(&t, "the bundle's summary", out);
  }
  ssm_sb t = {0};
  ssm_sb_printf(&t, "bundle %s: architecture %s, vocab %lld, dtype %s, format %d, made by %s\n",
                b->name, m->architecture, (long long)m->vocab, ssm_dtype_name(m->dtype),
                SSM_BUNDLE_VERSION, m->generator);
  if (m->max_seq) ssm_sb_printf(&t, "max_seq %lld\n", (long long)m->max_seq);
  ssm_sb_printf(&t, "\nbuffers:\n");
  for (int i = 0; i < m->nbuffers; i++)
    ssm_sb_printf(&t, "  %2d %-12s %14llu bytes\n", i, usage_name(m->buffers[i].usage),
                  (unsigned long long)m->buffers[i].bytes);
  ssm_sb_printf(&t, "\nweights: %d tensors, %llu bytes\nstate: %d tensors\n", m->nweights,
                (unsigned long long)ssm_manifest_weight_bytes(m), m->nstates);
  ssm_sb_printf(&t, "\nkernels:\n");
  for (int i = 0; i < m->nkernels; i++)
    ssm_sb_printf(&t, "  %-18s %-11s %s\n", m->kernels[i].name, m->kernels[i].family,
                  m->kernels[i].params);
  ssm_sb_printf(&t, "\nprograms:\n");
  program_line(&t, "decode", &m->decode);
  program_line(&t, "prefill", &m->prefill);
  if (m->batch.tokens) program_line(&t, "batch", &m->batch);
  return ssm_sb_take(&t, "the bundle's description", out);
}
