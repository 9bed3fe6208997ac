/*
 * delta.c — the delta rule (ops.def delta_rule) in two forms: step by step
 * (templates/delta.*.in), for decode and short runs, and chunked
 * (templates/delta_chunk.*.in), for prefill programs of at least
 * KNOB_DELTA_MIN_TOKENS tokens whose decay is a scalar a head computed by
 * an exp.
 *
 * The chunked form is the WY / UT representation of the Gated DeltaNet
 * update. Per head and chunk of C tokens, with Λ_t the chunk's sum of z up to
 * t (an error-free running sum hi + lo, as ssd.c keeps it), S the state
 * before the chunk and e_t = beta_t (v_t - S_t'^T k_t) the step's correction
 * (S_t' the state decayed at step t):
 *   (I + A) E = beta (V - exp(Λ) K S),  A[t][s] = beta_t exp(Λ_t - Λ_s) k_t.k_s (s < t)
 *   o_t = exp(Λ_t) S^T q_t + sum_{s<=t} exp(Λ_t - Λ_s) (q_t.k_s) e_s
 *   S <- exp(Λ_C) S + sum_s exp(Λ_C - Λ_s) k_s e_s^T
 * E by forward substitution through the lower-triangular I + A (its inverse
 * applied to the right side: U - W S in the UT representation's names). It
 * reorders the f32 sums of the sequential form, nothing else. A workgroup is
 * a head and LOCAL of its value columns; A and the masked, decayed Q K^T are
 * computed once a chunk by all its threads in workgroup memory, and each
 * thread carries its column of the state in registers through the chunk's
 * products (its v and e, [C] a column, in workgroup memory too). The chunk C is the knob's, halved per language until the
 * chunk's tiles (K, Q [C][DK], A, Q K^T [C][C] and six rows of C) fit its
 * workgroup memory (lang.def's shared_bytes); the grid is the same in both
 * languages. The kernel needs z = log a: exp's operand where the exp is in
 * the group, else the log of exp's result read from memory (as exact as the
 * decay itself). Any other decay keeps the sequential form, since a <= 0
 * would be NaN here; so does a decay per key channel. A z below -128 (a
 * decay of 0 in f32) is taken as -128, which keeps every product across it
 * 0 and the differences of Λ finite.
 */
#include "codegen/internal.h"
#include "codegen/knobs.h"

/* The loads both forms read: in_q, in_k (t, g, i), in_v (t, h, j) and
 * in_beta (t, h); the state's binding. */
static int delta_loads(cg_ctx *c, ssm_sb *loads) {
  const ssm_node *dn = c->anchor;
  cg_coords qk = {.rank = 3, .c = {"t", "g", "i"}}, vk = {.rank = 3, .c = {"t", "h", "j"}},
            bk = {.rank = 2, .c = {"t", "h"}};
  ssm_cg_load_fn(c, loads, "in_q", "t g i", dn->args[0], &qk);
  ssm_cg_load_fn(c, loads, "in_k", "t g i", dn->args[1], &qk);
  ssm_cg_load_fn(c, loads, "in_v", "t h j", dn->args[2], &vk);
  ssm_cg_load_fn(c, loads, "in_beta", "t h", dn->args[4], &bk);
  return ssm_cg_binding(c, dn->args[5]);
}

/* in_gh(t, h): the decay [T,H] as it is in memory, and a function of it
 * written in the language's spelling (`wgsl` or `glsl`). */
static void decay_fn(cg_ctx *c, ssm_sb *loads, const char *wgsl, const char *glsl) {
  cg_coords bk = {.rank = 2, .c = {"t", "h"}};
  ssm_cg_load_fn(c, loads, "in_gh", "t h", c->anchor->args[3], &bk);
  ssm_sb_printf(loads, "%s\n", c->lang == SSM_LANG_WGSL ? wgsl : glsl);
}

/* Both forms' epilogue and grid: threads a workgroup (a value column
 * each), workgroups a head, and the kernel's groups (a head's in a row). */
static ssm_status delta_grid(cg_ctx *c, ssm_sb *loads, int64_t H, int64_t DV, uint32_t threads,
                             uint32_t *out_local, int64_t *out_nj, ssm_cg_kernel *out) {
  *out_local = 0;
  *out_nj = 0;
  ssm_cg_epilogue(c, loads, 0);
  uint32_t local = threads;
  while (local > 32 && local / 2 >= (uint32_t)DV) local /= 2;
  int64_t nj = (DV + local - 1) / local;
  if (H * nj > 65535)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "delta_rule: %lld heads of %lld columns need more "
                          "than 65535 workgroups", (long long)H, (long long)DV);
  *out_local = local;
  *out_nj = nj;
  out->groups[0] = (uint32_t)(H * nj);
  out->groups[1] = out->groups[2] = 1;
  return NULL;
}

/* The delta rule step by step (delta.*.in): a workgroup per head and LOCAL
 * of its value columns, each thread a column of the state. A decay of a
 * scalar a head [T,H] is read for every key channel through in_g(t, h, i).
 * batch=1: a row of workgroups (y) per step, each its own sequence's step
 * on row t of the state. */
ssm_status ssm_cg_gen_delta(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *dn = c->anchor;
  const ssm_type *q = &dn->args[0]->type, *v = &dn->args[2]->type;
  int64_t T = q->dims[0], HK = q->dims[1], DK = q->dims[2], H = v->dims[1], DV = v->dims[2];
  ssm_sb loads = {0};
  cg_coords gk = {.rank = 3, .c = {"t", "h", "i"}};
  int state = delta_loads(c, &loads);
  if (dn->args[3]->type.rank == 3)
    ssm_cg_load_fn(c, &loads, "in_g", "t h i", dn->args[3], &gk);
  else
    decay_fn(c, &loads, "fn in_g(t: u32, h: u32, i: u32) -> f32 { return in_gh(t, h); }",
             "float in_g(uint t, uint h, uint i) { return in_gh(t, h); }");
  uint32_t local;
  int64_t nj;
  SSM_TRY(delta_grid(c, &loads, H, DV, KNOB_DELTA_THREADS, &local, &nj, out));
  int batch = ssm_node_int(dn, "batch", 0) != 0;
  if (batch) {
    if (T > 65535)
      return ssm_status_new(SSM_ERR_UNSUPPORTED, "delta_rule: %lld rows of a batched run need more "
                            "than 65535 workgroups", (long long)T);
    out->groups[1] = (uint32_t)T;
  }
  const char *kv[40] = {"LOCAL", U32(local), "H", I64(H), "HK", I64(HK), "DK", I64(DK), "DV",
                        I64(DV), "NJ", I64(nj), "BATCH", batch ? "1" : "0",
                        "STATE", ssm_arena_printf(c->a, "b%d", state),
                        "BUFFERS", ssm_cg_buffers_decl(c), "COMMON", ssm_cg_common(c), "LOADS",
                        ssm_cg_loads_text(c, &loads), NULL};
  ssm_cg_run_count(c, T, kv, sizeof kv / sizeof *kv);
  return ssm_cg_finish(c, "delta",
                       ssm_arena_printf(c->a, "T=%lld H=%lld HK=%lld DK=%lld DV=%lld%s", (long long)T,
                                        (long long)H, (long long)HK, (long long)DK, (long long)DV,
                                        batch ? " batch" : ""),
                       kv, out);
}

/* Floats of workgroup memory of a chunk of C with L threads: K and Q
 * [C][DK], A and the masked Q K^T [C][C], six rows of C (z, Λ's hi and lo,
 * exp(Λ_t), exp(Λ_C - Λ_t), beta) and each thread's v, then e, [C][L]. */
static int64_t chunk_floats(int64_t C, int64_t DK, int64_t L) {
  return 2 * C * DK + 2 * C * C + 6 * C + C * L;
}

/* The chunk of language `lang` for a run of T tokens (0: none fits). */
static int64_t chunk_for(ssm_lang lang, int64_t T, int64_t DK) {
  int64_t C = KNOB_DELTA_CHUNK;
  while (C / 2 >= T && C > KNOB_DELTA_MIN_CHUNK) C /= 2;
  const int64_t L = KNOB_DELTA_CHUNK_THREADS, bytes = ssm_cg_langs[lang].shared_bytes;
  while (C > KNOB_DELTA_MIN_CHUNK && chunk_floats(C, DK, L) * 4 > bytes) C /= 2;
  return chunk_floats(C, DK, L) * 4 <= bytes ? C : 0;
}

int ssm_cg_delta_chunk_applies(const cg_ctx *c) {
  const ssm_node *dn = c->anchor;
  if (!dn || dn->op != SSM_OP_DELTA || ssm_node_int(dn, "batch", 0) || c->delta_steps) return 0;
  int64_t T = dn->result->type.dims[0], DK = dn->args[0]->type.dims[2];
  if (T < KNOB_DELTA_MIN_TOKENS || dn->args[3]->type.rank != 2) return 0;
  if (dn->args[3]->def->op != SSM_OP_EXP) return 0;
  /* members only the sequential template computes: matmuls, decode convs */
  for (const ssm_node *n = c->first; n; n = n == c->root ? NULL : n->next)
    if (ssm_cg_member(c, n) && (n->op == SSM_OP_MATMUL || n->op == SSM_OP_CONV1D)) return 0;
  return chunk_for(SSM_LANG_GLSL, T, DK) && chunk_for(SSM_LANG_WGSL, T, DK);
}

ssm_status ssm_cg_gen_delta_chunk(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *dn = c->anchor;
  const ssm_type *q = &dn->args[0]->type, *v = &dn->args[2]->type;
  int64_t T = q->dims[0], HK = q->dims[1], DK = q->dims[2], H = v->dims[1], DV = v->dims[2];
  int64_t C = chunk_for(c->lang, T, DK);
  SSM_ASSERT(C > 0);
  ssm_sb loads = {0};
  int state = delta_loads(c, &loads);
  /* in_z(t, h): the log of the decay, exp's operand in the group, or the
   * log of the exp's result read from memory */
  const ssm_node *ex = dn->args[3]->def;
  if (ssm_cg_member(c, ex)) {
    cg_coords bk = {.rank = 2, .c = {"t", "h"}};
    cg_coords kz = ssm_cg_broadcast(&bk, &ex->args[0]->type);
    ssm_cg_load_fn(c, &loads, "in_z", "t h", ex->args[0], &kz);
  } else {
    decay_fn(c, &loads, "fn in_z(t: u32, h: u32) -> f32 { return log(in_gh(t, h)); }",
             "float in_z(uint t, uint h) { return log(in_gh(t, h)); }");
  }
  uint32_t local;
  int64_t nj;
  SSM_TRY(delta_grid(c, &loads, H, DV, KNOB_DELTA_CHUNK_THREADS, &local, &nj, out));
  int64_t oa = 2 * C * DK, om = oa + C * C, oz = om + C * C;
  SSM_ASSERT(oz + 6 * C + C * local == chunk_floats(C, DK, local));
  const char *kv[64] = {"LOCAL", U32(local), "C", I64(C), "H", I64(H), "HK", I64(HK), "DK",
                        I64(DK), "DV", I64(DV), "NJ", I64(nj), "SHARED",
                        I64(chunk_floats(C, DK, local)),
                        "OQ", I64(C * DK), "OA", I64(oa), "OM", I64(om), "OZ", I64(oz), "OLH",
                        I64(oz + C), "OLL", I64(oz + 2 * C), "OEX", I64(oz + 3 * C), "OW",
                        I64(oz + 4 * C), "OB", I64(oz + 5 * C), "OE", I64(oz + 6 * C), "STATE",
                        ssm_arena_printf(c->a, "b%d", state), "BUFFERS", ssm_cg_buffers_decl(c),
                        "COMMON", ssm_cg_common(c), "LOADS", ssm_cg_loads_text(c, &loads), NULL};
  ssm_cg_run_count(c, T, kv, sizeof kv / sizeof *kv);
  return ssm_cg_finish(c, "delta_chunk",
                       ssm_arena_printf(c->a, "T=%lld H=%lld HK=%lld DK=%lld DV=%lld C=%lld",
                                        (long long)T, (long long)H, (long long)HK, (long long)DK,
                                        (long long)DV, (long long)C),
                       kv, out);
}
