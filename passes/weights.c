/*
 * weights.c — the dtype weights are kept in on the device.
 *
 * With opts->weight_dtype f16 or bf16, every weight that only a matmul or a
 * matmul_sel (as its weight, %1) or an embed (as its table, %0) reads,
 * directly or through views (a slice of stacked expert weights), and that
 * has no load-time transform, is retyped to that dtype, with the views that
 * read it: the runtime stores it in
 * 16 bits and the kernels widen each element to f32 as they read it (the
 * shape rules of those two ops give f32 whatever their weight's dtype).
 * These are the matrices, which are nearly all the bytes a decode step
 * reads; small vectors (norm weights, biases, conv taps, A, D) and weights
 * with a transform stay f32, as do activations and state: the math is f32.
 * With f32 (the default) the pass changes nothing.
 *
 * The note says how many weights and bytes were retyped.
 */
#include "passes/passes.h"

#include <string.h>

/* Whether operand slot `i` of `n` may read a 16-bit weight. */
static int reads_16bit(const ssm_node *n, int i) {
  return ((n->op == SSM_OP_MATMUL || n->op == SSM_OP_MATMUL_SEL) && i == 1) ||
         (n->op == SSM_OP_EMBED && i == 0);
}

ssm_status ssm_pass_weights(ssm_graph *g, const ssm_pass_opts *o, char *out_note, size_t n) {
  if (n) out_note[0] = 0;
  ssm_dtype to = o ? o->weight_dtype : SSM_F32;
  if (to == SSM_F32) return NULL;
  if (to != SSM_F16 && to != SSM_BF16)
    return ssm_status_new(SSM_ERR_INVALID, "weights: dtype %s is not f32, f16 or bf16",
                          ssm_dtype_name(to));
  ssm_graph_number(g);
  /* per value: 1 used, 2 some use cannot read 16 bits */
  char *use;
  SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)g->nvalues + 1, 1, (void **)&use),
                          "the uses of %d values", g->nvalues));
  for (ssm_node *x = g->last; x; x = x->prev) /* a view's users come after it */
    for (int i = 0; i < x->nargs; i++)
      use[x->args[i]->id] |= reads_16bit(x, i) ? 1 : ssm_op_is_view(x->op) ? use[x->result->id] : 2;
  int count = 0;
  uint64_t saved = 0;
  for (ssm_node *x = g->first; x; x = x->next) {
    ssm_value *v = x->result;
    if (ssm_op_is_view(x->op) && x->args[0]->type.dtype == to && use[v->id] == 1) {
      v->type.dtype = to; /* a view of a retyped weight */
      continue;
    }
    if (x->op != SSM_OP_WEIGHT || use[v->id] != 1 || v->type.dtype != SSM_F32 ||
        v->type.rank < 2 || ssm_node_attr(x, "transform"))
      continue;
    v->type.dtype = to;
    count++;
    saved += (uint64_t)ssm_type_numel(&v->type) * (4 - ssm_dtype_size(to));
  }
  free(use);
  if (n)
    snprintf(out_note, n, "%d weights stored as %s (%.1f MB fewer to read)", count,
             ssm_dtype_name(to), (double)saved / 1e6);
  return NULL;
}
