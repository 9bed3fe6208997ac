/*
 * infer.c — shape and dtype inference.
 *
 * Recomputes the result type of every node, in order, from its operands'
 * types with the op's shape rule (ssm_op_infer; reshape keeps the shape it
 * declares, which is what defines it). A declared type that disagrees with
 * the computed one is an error at the node's place, so a graph written by
 * hand or by a pass can be trusted to carry the types its ops compute.
 */
#include "passes/passes.h"

/* "file:line:col: " for parsed nodes, "graph NAME: %id (op): " for built ones. */
static ssm_status at(const ssm_graph *g, const ssm_node *n, ssm_status s) {
  const char *op = ssm_op_info_get(n->op)->name;
  if (n->line > 0) return ssm_status_wrap(s, "%s:%d:%d", g->file ? g->file : "<ir>", n->line, n->col);
  if (n->result) return ssm_status_wrap(s, "graph %s: %%%d (%s)", g->name, n->result->id, op);
  return ssm_status_wrap(s, "graph %s: %s", g->name, op);
}

ssm_status ssm_pass_infer(ssm_graph *g, const ssm_pass_opts *o, char *out_note, size_t n) {
  if (n) out_note[0] = 0;
  ssm_graph_number(g);
  int checked = 0;
  for (ssm_node *x = g->first; x; x = x->next) {
    if (x->op < 0 || x->op >= SSM_OP_COUNT)
      return ssm_status_new(SSM_ERR_INVALID, "graph %s: invalid op %d", g->name, (int)x->op);
    ssm_type t;
    ssm_status s = ssm_op_infer(x, &t);
    if (s) return at(g, x, s);
    if (!x->result) continue;
    if (!ssm_type_equal(&x->result->type, &t)) {
      char b1[160], b2[160];
      return at(g, x, ssm_status_new(SSM_ERR_INVALID, "declared %s but %s computes %s",
                                     ssm_type_format(&x->result->type, b1, sizeof b1),
                                     ssm_op_info_get(x->op)->name,
                                     ssm_type_format(&t, b2, sizeof b2)));
    }
    x->result->type = t;
    checked++;
  }
  snprintf(out_note, n, "checked %d value types", checked);
  return NULL;
}
