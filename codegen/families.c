/*
 * families.c — the families with one template and little to decide:
 * pointwise, conv1d, attention, the row reductions (rmsnorm, softmax,
 * argmax), embed, reduce and sample.
 */
#include <math.h>
#include <string.h>

#include "codegen/internal.h"
#include "codegen/knobs.h"

ssm_status ssm_cg_gen_pointwise(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_type *t = &c->root->result->type;
  int64_t count = ssm_type_numel(t);
  cg_coords k = ssm_cg_coords_named("c", t->rank, c->a);
  ssm_sb co = {0}, ex = {0};
  cg_coords d = ssm_cg_delinearize("i", t, c->a);
  for (int i = 0; i < t->rank; i++) {
    ssm_sb_printf(&co, "    ");
    ssm_cg_spell(&co, lang(c)->let_u32, ssm_arena_printf(c->a, "c%d", i), d.c[i]);
    ssm_sb_printf(&co, "\n");
  }
  if (!t->rank) ssm_sb_printf(&co, "    // rank 0\n");
  /* the root itself, evaluated as a member (a materialized view too) */
  const ssm_node *saved = c->anchor;
  c->anchor = NULL;
  ssm_cg_emit(c, c->root->result, &k, &ex, 0);
  c->anchor = saved;
  /* ssm_cg_emit() bound the root's own value when it is a view's source; the
   * result must be binding 0, so it was reserved first */
  uint32_t local = KNOB_POINTWISE_THREADS;
  out->groups[0] = ssm_cg_groups_for(count, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[] = {"LOCAL", U32(local), "N", I64(count), "STRIDE", U32(out->groups[0] * local),
                      "BUFFERS", ssm_cg_buffers_decl(c), "COMMON", ssm_cg_common(c), "HELPERS",
                      ssm_cg_take(&c->helpers, c->a), "COORDS", ssm_cg_take(&co, c->a), "EXPR",
                      ssm_cg_take(&ex, c->a), NULL};
  return ssm_cg_finish(c, "pointwise", ssm_arena_printf(c->a, "N=%lld", (long long)count), kv, out);
}

ssm_status ssm_cg_gen_conv1d(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *cv = c->anchor;
  int64_t T = cv->args[0]->type.dims[0], C = cv->args[0]->type.dims[1];
  int64_t K = cv->args[2]->type.dims[1];
  ssm_sb loads = {0};
  cg_coords xk = {.rank = 2, .c = {"t", "c"}}, wk = {.rank = 2, .c = {"c", "k"}},
         bk = {.rank = 1, .c = {"c"}};
  ssm_cg_load_fn(c, &loads, "in_x", "t c", cv->args[0], &xk);
  ssm_cg_load_fn(c, &loads, "in_w", "c k", cv->args[2], &wk);
  if (cv->nargs > 3) ssm_cg_load_fn(c, &loads, "in_bias", "c", cv->args[3], &bk);
  else ssm_cg_const_fn(c, &loads, "in_bias", "c", "0.0");
  int state = ssm_cg_binding(c, cv->args[1]);
  ssm_cg_epilogue(c, &loads, 0);
  /* blocks of TB steps (at least K-1, the window's reach into the past),
   * doubled while the grid would pass 65535 workgroups */
  uint32_t local = KNOB_CONV1D_THREADS;
  /* batched: a block per sequence, each with its state row (conv1d.glsl.in) */
  int batch = ssm_node_int(cv, "batch", 0) != 0;
  int64_t TB = batch ? 1 : K - 1 > KNOB_CONV1D_STEPS ? K - 1 : KNOB_CONV1D_STEPS;
  while (!batch && (C * ((T + TB - 1) / TB) + local - 1) / local > 65535 && TB < T) TB *= 2;
  int64_t NB = (T + TB - 1) / TB;
  if ((C * NB + local - 1) / local > 65535)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "conv1d: %lld channels need more than 65535 "
                          "workgroups", (long long)C);
  out->groups[0] = ssm_cg_groups_for(C * NB, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[40] = {"LOCAL", U32(local), "C", I64(C), "K", I64(K), "TB", I64(TB),
                        "NB", I64(NB), "STATE", ssm_arena_printf(c->a, "b%d", state), "BUFFERS",
                        ssm_cg_buffers_decl(c), "COMMON", ssm_cg_common(c), "LOADS",
                        ssm_cg_loads_text(c, &loads), "FIRST", batch ? "true" : "b == 0u",
                        "SOFS", batch ? ssm_arena_printf(c->a, "b * %lldu", (long long)((K - 1) * C))
                                      : "0u",
                        "PWIN", batch ? "-1"
                              : ssm_arena_printf(c->a, c->lang == SSM_LANG_WGSL ? "i32(t0 + k) - %lld"
                                                                                : "int(t0 + k) - %lld",
                                                 (long long)(K - 1)), "LT", batch ? "1u" : "nt",
                        "TBASE", batch ? "b" : "0u", NULL};
  ssm_cg_run_count(c, T, kv, sizeof kv / sizeof *kv);
  return ssm_cg_finish(c, "conv1d",
                       ssm_arena_printf(c->a, "T=%lld C=%lld K=%lld TB=%lld%s", (long long)T,
                                        (long long)C, (long long)K, (long long)TB,
                                        batch ? " batch" : ""),
                       kv, out);
}

ssm_status ssm_cg_gen_attention(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *at = c->anchor;
  const ssm_type *q = &at->args[0]->type, *kc = &at->args[3]->type;
  /* batched: each token a sequence with its own caches (attention.glsl.in, SEQ) */
  int batch = ssm_node_int(at, "batch", 0) != 0;
  int64_t T = q->dims[0], HQ = q->dims[1], D = q->dims[2];
  int64_t HKV = at->args[1]->type.dims[1], MAXS = kc->dims[batch];
  const ssm_node *pos = at->args[5]->def;
  if (ssm_cg_member(c, pos) || ssm_cg_ungrouped_view(c, pos) || pos->op == SSM_OP_CONST)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "attention: pos must be a tensor in memory");
  ssm_sb loads = {0};
  cg_coords qk = {.rank = 3, .c = {"t", "h", "d"}}, kk = {.rank = 3, .c = {"t", "g", "d"}};
  ssm_cg_load_fn(c, &loads, "in_q", "t h d", at->args[0], &qk);
  ssm_cg_load_fn(c, &loads, "in_k", "t g d", at->args[1], &kk);
  ssm_cg_load_fn(c, &loads, "in_v", "t g d", at->args[2], &kk);
  int kb = ssm_cg_binding(c, at->args[3]), vb = ssm_cg_binding(c, at->args[4]);
  int pb = ssm_cg_binding(c, at->args[5]);
  ssm_cg_epilogue(c, &loads, 0);
  uint32_t local = KNOB_ATTENTION_THREADS;
  ssm_cg_grid_per_item(T * HQ, out->groups);
  const char *kv[40] = {"LOCAL", U32(local), "SEQ", batch ? "t" : "0u", "T", I64(T), "HQ", I64(HQ), "HKV", I64(HKV), "D",
                        I64(D), "MAXS", I64(MAXS), "DPT", I64((D + local - 1) / local), "SCALE",
                        ssm_cg_float_lit(c, ssm_node_float(at, "scale", 1)), "WINDOW",
                        I64(ssm_node_int(at, "window", 0)), "KCACHE",
                        ssm_arena_printf(c->a, "b%d", kb), "VCACHE",
                        ssm_arena_printf(c->a, "b%d", vb), "POS", ssm_arena_printf(c->a, "b%d", pb),
                        "BUFFERS", ssm_cg_buffers_decl(c), "COMMON", ssm_cg_common(c),
                        "LOADS", ssm_cg_loads_text(c, &loads), NULL};
  ssm_cg_run_count(c, T, kv, sizeof kv / sizeof *kv);
  return ssm_cg_finish(
      c, "attention",
      ssm_arena_printf(c->a, "T=%lld HQ=%lld HKV=%lld D=%lld MAXS=%lld WINDOW=%lld%s", (long long)T,
                       (long long)HQ, (long long)HKV, (long long)D, (long long)MAXS,
                       (long long)ssm_node_int(at, "window", 0), batch ? " batch" : ""),
      kv, out);
}

/* The op's parts of the rowreduce template: its snippets <op>.part, .init,
 * .accum, .combine and .finish (templates/rowreduce.*.in). */
ssm_status ssm_cg_gen_rowreduce(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *n = c->anchor;
  const ssm_type *xt = &n->args[0]->type;
  int64_t C = xt->dims[xt->rank - 1], rows = ssm_type_numel(xt) / C;
  uint32_t local = ssm_cg_pow2_threads(C, KNOB_ROW_THREADS_MIN, KNOB_ROW_THREADS_MAX);
  ssm_sb loads = {0};
  /* in_x(row, c) */
  ssm_type lead = *xt;
  lead.rank = xt->rank - 1;
  cg_coords k = ssm_cg_delinearize("row", &lead, c->a);
  k.rank = xt->rank;
  k.c[xt->rank - 1] = "c";
  ssm_cg_load_fn(c, &loads, "in_x", "row c", n->args[0], &k);
  const char *part_t, *init, *accum, *combine, *finish_code;
  const char *C_ = I64(C), *L_ = U32(local), *ninf = NEG_INF(c);
  if (n->op == SSM_OP_RMSNORM) {
    cg_coords wk = {.rank = 1, .c = {"c"}};
    if (n->nargs > 1) ssm_cg_load_fn(c, &loads, "in_w", "c", n->args[1], &wk);
    else ssm_cg_const_fn(c, &loads, "in_w", "c", "1.0");
    part_t = SNIPPET0(c, "rowreduce", "rmsnorm.part");
    init = SNIPPET0(c, "rowreduce", "rmsnorm.init");
    accum = SNIPPET0(c, "rowreduce", "rmsnorm.accum");
    combine = SNIPPET0(c, "rowreduce", "rmsnorm.combine");
    finish_code = SNIPPET(c, "rowreduce", "rmsnorm.finish", "C", C_, "LOCAL", L_, "EPS",
                          ssm_cg_float_lit(c, ssm_node_float(n, "eps", 0)));
  } else if (n->op == SSM_OP_SOFTMAX) {
    part_t = SNIPPET0(c, "rowreduce", "softmax.part");
    init = SNIPPET(c, "rowreduce", "softmax.init", "NINF", ninf);
    accum = SNIPPET(c, "rowreduce", "softmax.accum", "NINF", ninf);
    combine = SNIPPET0(c, "rowreduce", "softmax.combine");
    finish_code = SNIPPET(c, "rowreduce", "softmax.finish", "C", C_, "LOCAL", L_);
  } else {
    part_t = SNIPPET0(c, "rowreduce", "argmax.part");
    init = SNIPPET(c, "rowreduce", "argmax.init", "NINF", ninf, "C", C_);
    accum = SNIPPET(c, "rowreduce", "argmax.accum", "C", C_);
    combine = SNIPPET(c, "rowreduce", "argmax.combine", "C", C_);
    finish_code = SNIPPET(c, "rowreduce", "argmax.finish", "CLAST", I64(C - 1));
  }
  if (n->op != SSM_OP_ARGMAX) ssm_cg_epilogue(c, &loads, 0);
  ssm_cg_grid_per_item(rows, out->groups);
  const char *kv[] = {"LOCAL", L_, "ROWS", I64(rows), "C", C_, "BUFFERS", ssm_cg_buffers_decl(c),
                      "COMMON", ssm_cg_common(c), "LOADS",
                      ssm_cg_loads_text(c, &loads), "PART_T",
                      part_t, "INIT", init, "ACCUM", accum, "COMBINE", combine, "FINISH",
                      finish_code, NULL};
  return ssm_cg_finish(c, "rowreduce",
                       ssm_arena_printf(c->a, "ROWS=%lld C=%lld", (long long)rows, (long long)C),
                       kv, out);
}

ssm_status ssm_cg_gen_embed(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *e = c->anchor;
  int64_t V = e->args[0]->type.dims[0], H = e->args[0]->type.dims[1];
  int64_t T = e->args[1]->type.dims[0];
  ssm_sb loads = {0};
  cg_coords tk = {.rank = 2, .c = {"id", "h"}};
  ssm_cg_load_fn(c, &loads, "in_table", "id h", e->args[0], &tk);
  const ssm_node *ids = e->args[1]->def;
  if (ssm_cg_member(c, ids) || ssm_cg_ungrouped_view(c, ids))
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "embed: token ids must be a tensor in memory");
  int ib = ssm_cg_binding(c, e->args[1]);
  ssm_cg_epilogue(c, &loads, 0);
  uint32_t local = KNOB_EMBED_THREADS;
  out->groups[0] = ssm_cg_groups_for(T * H, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[32] = {"LOCAL", U32(local), "H", I64(H), "V", I64(V), "STRIDE",
                      U32(out->groups[0] * local), "BUFFERS", ssm_cg_buffers_decl(c), "COMMON",
                      ssm_cg_common(c), "LOADS",
                      ssm_cg_loads_text(c, &loads), "IDS",
                      ssm_arena_printf(c->a, "b%d", ib), NULL};
  ssm_cg_run_count(c, T, kv, sizeof kv / sizeof *kv);
  return ssm_cg_finish(c, "embed",
                       ssm_arena_printf(c->a, "T=%lld H=%lld V=%lld", (long long)T, (long long)H,
                                        (long long)V),
                       kv, out);
}

ssm_status ssm_cg_gen_reduce(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *n = c->anchor;
  const ssm_type *xt = &n->args[0]->type;
  int64_t axis = ssm_node_int(n, "axis", 0), outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= xt->dims[d];
  for (int d = (int)axis + 1; d < xt->rank; d++) inner *= xt->dims[d];
  ssm_type to = *xt, ti = *xt;
  to.rank = (int)axis;
  ti.rank = xt->rank - (int)axis - 1;
  for (int d = 0; d < ti.rank; d++) ti.dims[d] = xt->dims[axis + 1 + d];
  cg_coords ko = ssm_cg_delinearize("o", &to, c->a), ki = ssm_cg_delinearize("in_", &ti, c->a);
  cg_coords k = {.rank = xt->rank};
  for (int d = 0; d < axis; d++) k.c[d] = ko.c[d];
  k.c[axis] = "a";
  for (int d = 0; d < ti.rank; d++) k.c[axis + 1 + d] = ki.c[d];
  ssm_sb loads = {0};
  ssm_cg_load_fn(c, &loads, "in_x", "o a in_", n->args[0], &k);
  ssm_cg_epilogue(c, &loads, 0);
  const char *kind = ssm_node_str(n, "kind", "sum");
  const char *init = "0.0", *accum = "acc += x", *final = "acc";
  if (!strcmp(kind, "max")) {
    init = NEG_INF(c);
    accum = "acc = max(acc, x)";
  } else if (!strcmp(kind, "mean")) {
    final = ssm_arena_printf(c->a, "acc / %s(%lld)", lang(c)->f32, (long long)xt->dims[axis]);
  }
  uint32_t local = KNOB_REDUCE_THREADS;
  out->groups[0] = ssm_cg_groups_for(outer * inner, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[] = {"LOCAL", U32(local), "OUTER", I64(outer), "AXIS", I64(xt->dims[axis]),
                      "INNER", I64(inner), "STRIDE", U32(out->groups[0] * local), "BUFFERS",
                      ssm_cg_buffers_decl(c), "COMMON", ssm_cg_common(c), "LOADS",
                      ssm_cg_loads_text(c, &loads), "INIT",
                      init, "ACCUM", accum, "FINAL", final, NULL};
  return ssm_cg_finish(c, "reduce",
                       ssm_arena_printf(c->a, "kind=%s OUTER=%lld AXIS=%lld INNER=%lld", kind,
                                        (long long)outer, (long long)xt->dims[axis],
                                        (long long)inner),
                       kv, out);
}

ssm_status ssm_cg_gen_sample(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *n = c->anchor;
  const ssm_type *xt = &n->args[0]->type;
  int64_t V = xt->dims[xt->rank - 1], rows = ssm_type_numel(xt) / V;
  const ssm_node *st = n->args[1]->def;
  if (st->op != SSM_OP_STATE)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "sample: its sampler must be a state tensor");
  /* as many threads as the language allows (the grid is one workgroup) */
  uint32_t local = ssm_cg_pow2_threads(V, KNOB_SAMPLE_THREADS_MIN, (uint32_t)lang(c)->max_threads);
  ssm_sb loads = {0};
  /* batched: a workgroup a row, the row srow (sample.glsl.in) */
  int batch = ssm_node_int(n, "batch", 0) != 0;
  ssm_type lead = *xt; /* in_x(c): element c of the last row */
  lead.rank = xt->rank - 1;
  const char *last = batch ? "srow" : ssm_arena_printf(c->a, "%lldu", (long long)(rows - 1));
  cg_coords k = ssm_cg_delinearize(last, &lead, c->a);
  k.rank = xt->rank;
  k.c[xt->rank - 1] = "c";
  ssm_cg_load_fn(c, &loads, "in_x", "c", n->args[0], &k);
  int sb = ssm_cg_binding(c, n->args[1]);
  /* the seen-token set's word w, and its store (a sampler without one: no token seen) */
  int wgsl = c->lang == SSM_LANG_WGSL;
  const char *seen;
  if (n->nargs > 2) {
    int wb = ssm_cg_binding(c, n->args[2]);
    seen = wgsl ? ssm_arena_printf(c->a, "fn seen_word(w: u32) -> f32 { return b%d_ld(w); }\n"
                                         "fn seen_put(w: u32, v: f32) { b%d_st(w, v); }", wb, wb)
                : ssm_arena_printf(c->a, "float seen_word(uint w) { return b%d.v[w]; }\n"
                                         "void seen_put(uint w, float v) { b%d.v[w] = v; }", wb, wb);
  } else {
    seen = wgsl ? "fn seen_word(w: u32) -> f32 { return 0.0; }\nfn seen_put(w: u32, v: f32) {}"
                : "float seen_word(uint w) { return 0.0; }\nvoid seen_put(uint w, float v) {}";
  }
  if (batch && rows > 65535)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "sample: %lld rows need more than 65535 workgroups",
                          (long long)rows);
  out->groups[0] = batch ? (uint32_t)rows : 1;
  out->groups[1] = out->groups[2] = 1;
  const char *kv[] = {"LOCAL", U32(local), "V", I64(V), "CHUNK", I64((V + local - 1) / local),
                      "BUFFERS", ssm_cg_buffers_decl(c), "COMMON", ssm_cg_common(c), "LOADS",
                      ssm_cg_loads_text(c, &loads), "STATE",
                      ssm_arena_printf(c->a, "b%d", sb), "ROW",
                      !batch ? "0u" : c->lang == SSM_LANG_WGSL ? "wid.x" : "gl_WorkGroupID.x",
                      "SEEN", seen, NULL};
  return ssm_cg_finish(c, "sample", ssm_arena_printf(c->a, "V=%lld LOCAL=%u%s%s", (long long)V, local,
                                                     batch ? " batch" : "",
                                                     n->nargs > 2 ? " seen" : ""),
                       kv, out);
}
