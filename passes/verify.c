/*
 * verify.c — the first pass: the verifier (ir/verify.c) on the graph as it
 * came from the frontend or the parser. Every later pass may assume what it
 * checks.
 */
#include "passes/passes.h"

ssm_status ssm_pass_verify(ssm_graph *g, const ssm_pass_opts *o, char *out_note, size_t n) {
  if (n) out_note[0] = 0;
  SSM_TRY(ssm_graph_verify(g));
  int nodes = 0;
  for (const ssm_node *x = g->first; x; x = x->next) nodes++;
  snprintf(out_note, n, "%d node%s, %d value%s", nodes, nodes == 1 ? "" : "s", g->nvalues,
           g->nvalues == 1 ? "" : "s");
  return NULL;
}
