/*
 * items.c — the items family (items.glsl.in): ops whose output items each
 * take a little serial work and no sharing, their bodies snippets of the
 * template: rope, positions, gather, topk and matmul_sel.
 */
#include <math.h>

#include "codegen/internal.h"
#include "codegen/knobs.h"

/* `int NAME(uint m, uint j)`: element (m, j) of i32 operand v [.., k], m
 * over the leading dims; read through views like any operand. */
static void load_index(cg_ctx *c, ssm_sb *loads, const char *name, const ssm_value *v) {
  cg_coords k = ssm_cg_row_coords(c, &v->type, "j");
  ssm_sb e = {0};
  ssm_cg_emit(c, v, &k, &e, 0);
  ssm_cg_fn_head_typed(c, loads, lang(c)->i32, name, "m j");
  ssm_sb_printf(loads, "{ return %s(%s); }\n", lang(c)->i32, ssm_sb_str(&e));
  ssm_sb_free(&e);
}

/* The load of `pos` operand i of the anchor (an input) at index `at`: i32[1]
 * read at 0u, or in a batched op (batch=1) i32[T], a position a row. */
static ssm_status pos_load(cg_ctx *c, int i, const char *at, const char **out) {
  const ssm_node *pos = c->anchor->args[i]->def;
  if (ssm_cg_member(c, pos) || ssm_cg_ungrouped_view(c, pos) || pos->op == SSM_OP_CONST)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: pos must be a tensor in memory",
                          ssm_op_info_get(c->anchor->op)->name);
  *out = ssm_cg_spelled(c->a, lang(c)->load, I64(ssm_cg_binding(c, c->anchor->args[i])), at);
  return NULL;
}

/* One "items" kernel of `count` items running `body`; consumes `loads`. */
static ssm_status items_kernel(cg_ctx *c, ssm_sb *loads, int64_t count, const char *body,
                               const char *params, ssm_cg_kernel *out) {
  uint32_t local = KNOB_ITEMS_THREADS;
  out->groups[0] = ssm_cg_groups_for(count, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[] = {"LOCAL", U32(local), "N", I64(count), "STRIDE", U32(out->groups[0] * local),
                      "BUFFERS", ssm_cg_buffers_decl(c), "COMMON", ssm_cg_common(c), "LOADS",
                      ssm_cg_loads_text(c, loads), "BODY", body, NULL};
  return ssm_cg_finish(c, "items", params, kv, out);
}

/* rope: the angle p * INV[j] in f32 with INV computed here exactly as the
 * interpreter computes it (1 / powf(theta, 2j/dims)), then cos and sin. */
ssm_status ssm_cg_gen_rope(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *n = c->anchor;
  const ssm_type *x = &n->args[0]->type;
  int64_t T = x->dims[0], H = x->dims[1], D = x->dims[2];
  int64_t dims = ssm_node_int(n, "dims", 0), half = dims / 2;
  int il = (int)ssm_node_int(n, "interleaved", 0);
  float theta = (float)ssm_node_float(n, "theta", 10000);
  int batch = ssm_node_int(n, "batch", 0) != 0;
  const char *pos;
  SSM_TRY(pos_load(c, 1, batch ? "t" : "0u", &pos));
  ssm_sb loads = {0};
  cg_coords xk = {.rank = 3, .c = {"t", "h", "d"}};
  ssm_cg_load_fn(c, &loads, "in_x", "t h d", n->args[0], &xk);
  ssm_sb inv = {0};
  for (int64_t j = 0; j < half; j++)
    ssm_sb_printf(&inv, "%s%.9g", j ? ", " : "", 1.0f / powf(theta, (float)(2 * j) / (float)dims));
  ssm_sb_printf(&loads, "%s\n",
                SNIPPET(c, "items", "rope.inv", "N", I64(half), "VALUES", ssm_sb_str(&inv)));
  ssm_sb_free(&inv);
  ssm_cg_epilogue(c, &loads, 0);
  const char *cond = il ? "d % 2u == 0u" : ssm_arena_printf(c->a, "d < %lldu", (long long)half);
  const char *jx = il ? "d / 2u" : ssm_arena_printf(c->a, "d %% %lldu", (long long)half);
  int64_t step = il ? 1 : half;
  const char *body = SNIPPET(c, "items", "rope", "HD", I64(H * D), "D", I64(D), "H", I64(H), "DIMS",
                             I64(dims), "LO", cond, "J", jx, "STEP", I64(step), "POS", pos, "PT", batch ? "0u" : "t");
  return items_kernel(c, &loads, T * H * D, body,
                      ssm_arena_printf(c->a, "T=%lld H=%lld D=%lld dims=%lld interleaved=%d%s", (long long)T,
                                       (long long)H, (long long)D, (long long)dims, il,
                                       batch ? " batch" : ""), out);
}

ssm_status ssm_cg_gen_positions(cg_ctx *c, ssm_cg_kernel *out) {
  int64_t T = c->anchor->result->type.dims[0];
  int batch = ssm_node_int(c->anchor, "batch", 0) != 0;
  const char *pos;
  SSM_TRY(pos_load(c, 1, batch ? "i" : "0u", &pos));
  ssm_sb loads = {0};
  ssm_cg_epilogue(c, &loads, 0);
  const char *body = SNIPPET(c, "items", "positions", "POS", pos, "PI", batch ? "0u" : "i");
  return items_kernel(c, &loads, T, body,
                      ssm_arena_printf(c->a, "T=%lld%s", (long long)T, batch ? " batch" : ""), out);
}

/* gather: an index out of range reads the nearest end (the interpreter
 * refuses it), as embed's ids do. */
ssm_status ssm_cg_gen_gather(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *n = c->anchor;
  int64_t W = n->args[0]->type.dims[n->args[0]->type.rank - 1], K = n->args[1]->type.dims[n->args[1]->type.rank - 1];
  int64_t count = ssm_type_numel(&n->result->type);
  ssm_sb loads = {0};
  ssm_cg_load_rows(c, &loads, "in_x", n->args[0], 0);
  load_index(c, &loads, "in_idx", n->args[1]);
  ssm_cg_epilogue(c, &loads, 0);
  const char *body = SNIPPET(c, "items", "gather", "K", I64(K), "WLAST", I64(W - 1));
  return items_kernel(c, &loads, count, body,
                      ssm_arena_printf(c->a, "N=%lld K=%lld", (long long)W, (long long)K), out);
}

/* topk: one row an item; pick j is the first in the order (NaN first, then
 * larger values, then lower indices) among the elements after pick j-1. */
ssm_status ssm_cg_gen_topk(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *n = c->anchor;
  const ssm_type *xt = &n->args[0]->type;
  int64_t W = xt->dims[xt->rank - 1], rows = ssm_type_numel(xt) / W;
  int64_t K = ssm_node_int(n, "k", 1);
  ssm_sb loads = {0};
  ssm_cg_load_rows(c, &loads, "in_x", n->args[0], 0);
  ssm_sb_printf(&loads, "%s\n", SNIPPET0(c, "items", "topk.before"));
  const char *body = SNIPPET(c, "items", "topk", "K", I64(K), "W", I64(W));
  return items_kernel(c, &loads, rows, body,
                      ssm_arena_printf(c->a, "ROWS=%lld N=%lld k=%lld", (long long)rows, (long long)W,
                                       (long long)K), out);
}

/* matmul_sel: one output element an item, a serial dot product over K of
 * the token's row (or its pick's row) and row o of expert idx[t,j]'s weight.
 * Only the picked experts are read, for prefill and decode alike. x is
 * rounded where the weights are 16-bit (ops.def). */
ssm_status ssm_cg_gen_matmul_sel(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *n = c->anchor;
  const ssm_type *w = &n->args[1]->type;
  int64_t E = w->dims[0], N = w->dims[1], K = w->dims[2];
  int64_t T = n->args[2]->type.dims[0], P = n->args[2]->type.dims[1];
  ssm_sb loads = {0};
  cg_coords xk = n->args[0]->type.rank == 3 ? (cg_coords){.rank = 3, .c = {"t", "j", "k"}}
                                         : (cg_coords){.rank = 2, .c = {"t", "k"}};
  ssm_cg_load_x(c, &loads, "in_x", "t j k", n->args[0], &xk, ssm_dtype_rounds_x(w->dtype));
  cg_coords wk = {.rank = 3, .c = {"e", "o", "k"}};
  ssm_cg_load_fn(c, &loads, "in_w", "e o k", n->args[1], &wk);
  load_index(c, &loads, "in_idx", n->args[2]);
  ssm_cg_epilogue(c, &loads, 0);
  const char *body = SNIPPET(c, "items", "matmul_sel", "PN", I64(P * N), "N", I64(N), "P", I64(P),
                             "ELAST", I64(E - 1), "K", I64(K));
  return items_kernel(c, &loads, T * P * N, body,
                      ssm_arena_printf(c->a, "T=%lld k=%lld E=%lld N=%lld K=%lld", (long long)T, (long long)P,
                                       (long long)E, (long long)N, (long long)K), out);
}
