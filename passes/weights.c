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
 * With q8_0 or q4_0 those weights are kept in 8 or 4 bits (ir.h:
 * ssm_qlayout) where the kernels can read them so: a weight read directly
 * (not through a view) whose rows are a multiple of 8 long (the GEMMs load
 * 8 values of a row at a time). The others are kept in bf16, and the note
 * names them, as it does a weight its architecture marks `quantize: false`
 * (IR: keep16=1). With q4_0 the vocabulary's weights, an embedding table and a
 * matmul weight of one row per logit (rows of the graph's first output),
 * are kept in q8_0: every token's logits and input go through them, and at
 * 4 bits they cost the most accuracy (docs/quantization.md).
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
  if (to != SSM_F16 && to != SSM_BF16 && !ssm_dtype_is_quant(to))
    return ssm_status_new(SSM_ERR_INVALID, "weights: dtype %s is not f32, f16, bf16, q8_0 or q4_0",
                          ssm_dtype_name(to));
  ssm_graph_number(g);
  /* per value: 1 used, 2 some use cannot read 16 bits, 4 read through a
   * view, 8 an embedding table */
  char *use;
  SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)g->nvalues + 1, 1, (void **)&use),
                          "the uses of %d values", g->nvalues));
  for (ssm_node *x = g->last; x; x = x->prev) /* a view's users come after it */
    for (int i = 0; i < x->nargs; i++)
      use[x->args[i]->id] |= reads_16bit(x, i)         ? (x->op == SSM_OP_EMBED ? 9 : 1)
                             : ssm_op_is_view(x->op) ? (use[x->result->id] | 4)
                                                     : 2;
  int64_t vocab = -1; /* the logits' width */
  for (ssm_node *x = g->first; x; x = x->next)
    if (x->op == SSM_OP_OUTPUT && x->nargs && x->args[0]->type.rank)
      vocab = x->args[0]->type.dims[x->args[0]->type.rank - 1];
  int count = 0, kept = 0, wide = 0;
  uint64_t saved = 0;
  ssm_sb why = {0};
  for (ssm_node *x = g->first; x; x = x->next) {
    ssm_value *v = x->result;
    if (ssm_op_is_view(x->op) && ssm_dtype_size(x->args[0]->type.dtype) == 2 &&
        (use[v->id] & 3) == 1) {
      v->type.dtype = x->args[0]->type.dtype; /* a view of a retyped weight */
      continue;
    }
    if (x->op != SSM_OP_WEIGHT || (use[v->id] & 3) != 1 || v->type.dtype != SSM_F32 ||
        v->type.rank < 2 || ssm_node_attr(x, "transform"))
      continue;
    ssm_dtype d = to;
    int keep16 = (int)ssm_node_int(x, "keep16", 0);
    if (ssm_dtype_is_quant(to) &&
        (keep16 || use[v->id] & 4 || v->type.dims[v->type.rank - 1] % 8)) {
      d = SSM_BF16;
      kept++;
      ssm_sb_printf(&why, "%s%s (%s)", kept > 1 ? ", " : "", ssm_node_str(x, "name", "?"),
                    keep16              ? "quantize: false"
                    : use[v->id] & 4    ? "read through a view"
                                        : "rows not a multiple of 8");
    } else if (to == SSM_Q4_0 && (use[v->id] & 8 || v->type.dims[0] == vocab)) {
      d = SSM_Q8_0;
      wide++;
    } else {
      count++;
    }
    uint64_t before = ssm_type_bytes(&v->type);
    v->type.dtype = d;
    saved += before - ssm_type_bytes(&v->type);
  }
  free(use);
  ssm_status s = ssm_sb_status(&why, "the weights kept in bf16");
  if (n && !s) {
    int k = snprintf(out_note, n, "%d weights stored as %s (%.1f MB fewer to read)", count,
                     ssm_dtype_name(to), (double)saved / 1e6);
    if (wide && k > 0 && (size_t)k < n)
      k += snprintf(out_note + k, n - (size_t)k, "; %d of the vocabulary in q8_0", wide);
    if (kept && k > 0 && (size_t)k < n)
      snprintf(out_note + k, n - (size_t)k, "; %d kept in bf16: %s", kept, ssm_sb_str(&why));
  }
  ssm_sb_free(&why);
  return s;
}
