/*
 * ssd.c — the chunked scan (state-space duality): a prefill scan whose state
 * is [H.., P, N] and whose inputs separate per head, computed chunk by chunk
 * with matrix products instead of one step a token (templates/ssd.*.in).
 *
 * The scan h_t = a_t h_{t-1} + b_t, y_t = sum_n c_t h_t is separable when
 * a is one decay a head and token (size 1 on the P and N axes), c does not
 * vary along P, and b is a product of factors each of which varies along P
 * or along N but not both: b = u(t, H, p) v(t, H, n). That is Mamba-2's
 * scan (a = exp(dt A), b = dt B x, c = C) and that of every block built
 * like it; Mamba-1's A per channel and state, and any b read whole from
 * memory, are not. Per head and chunk of L tokens, with l_t = log a_t (z
 * itself where a = exp(z)) and Λ_t the chunk's sum of l up to t:
 *   y_t[p] = sum_{s<=t} exp(Λ_t - Λ_s) (c_t . v_s) u_s[p] + exp(Λ_t) (c_t . h[p])
 *   h[p][n] <- exp(Λ_L) h[p][n] + sum_s exp(Λ_L - Λ_s) u_s[p] v_s[n]
 * which reorders the f32 sums of the sequential form, nothing else. Λ is
 * kept as an unevaluated sum hi + lo (an error-free running sum), so that a
 * difference Λ_t - Λ_s is as exact as the decay between the two tokens and
 * not rounded at the size of Λ.
 *
 * Programs of fewer than KNOB_SSD_MIN_TOKENS tokens keep the sequential
 * kernel (knobs.h says why). Only a decay written as exp(z) in the group is
 * taken: the log of an a the kernel cannot see would be NaN where a <= 0,
 * which the sequential form handles. The workgroup is a head and a slice of
 * PS of its P channels, the slice of the state in its threads' registers
 * (the grid is the same in both languages, so PS is too); the chunk L and
 * then the staged columns NK of N shrink per language until the tiles fit
 * its workgroup memory (lang.def's shared_bytes).
 */
#include "codegen/internal.h"
#include "codegen/knobs.h"

/* Size of type t's dim `back` places from its last (1 past its rank). */
static int64_t dim_back(const ssm_type *t, int back) {
  return t->rank > back ? t->dims[t->rank - 1 - back] : 1;
}

/* The product of b's factors below v (a chain of the group's muls): whether
 * each varies along P (back 1) or N (back 0) but not both. */
static int separable(const cg_ctx *c, const ssm_value *v) {
  const ssm_node *d = v->def;
  if (d->op == SSM_OP_MUL && d != c->anchor && ssm_cg_member(c, d))
    return separable(c, d->args[0]) && separable(c, d->args[1]);
  return dim_back(&v->type, 0) == 1 || dim_back(&v->type, 1) == 1;
}

/* The power of two at least x. */
static int64_t pow2_at_least(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

/* How one language runs the chunked form: chunk, staged columns, threads. */
typedef struct {
  int64_t L, NK, local, tiles, shared; /* shared: floats */
} ssd_plan;

/* Floats of workgroup memory: a tile of the state [NK][PS+1], C and B
 * staged [NK][L+1] each (later the masked G [L][L+1] in their room), u
 * [L][PS], and five rows of L (z, Λ's hi and lo, exp(Λ_t), exp(Λ_L - Λ_s)). */
static int64_t ssd_floats(int64_t L, int64_t PS, int64_t NK) {
  int64_t cv = 2 * NK * (L + 1), m = L * (L + 1);
  return NK * (PS + 1) + (cv > m ? cv : m) + L * PS + 5 * L;
}

/* The plan of language `lang` for a slice of PS, or 0 if nothing fits: the
 * longest chunk that fits with the narrowest tile, then the widest tile. */
static int ssd_plan_for(ssm_lang lang, int64_t T, int64_t PS, int64_t N, ssd_plan *out) {
  const ssm_cg_lang *l = &ssm_cg_langs[lang];
  int64_t L = KNOB_SSD_CHUNK, NK = KNOB_SSD_TILE_N;
  if (L > pow2_at_least(T)) L = pow2_at_least(T);
  if (NK > pow2_at_least(N)) NK = pow2_at_least(N);
  int64_t narrow = NK < KNOB_SSD_MIN ? NK : KNOB_SSD_MIN;
  int64_t shortest = L < KNOB_SSD_MIN ? L : KNOB_SSD_MIN;
  while (L > shortest && ssd_floats(L, PS, narrow) * 4 > l->shared_bytes) L /= 2;
  while (NK > narrow && ssd_floats(L, PS, NK) * 4 > l->shared_bytes) NK /= 2;
  if (ssd_floats(L, PS, NK) * 4 > l->shared_bytes) return 0;
  int64_t local = KNOB_SSD_THREADS, tiles = (N + NK - 1) / NK;
  if (local > l->max_threads) local = l->max_threads;
  if (local > L * L) local = L * L;
  if (local > L * PS) local = L * PS;
  if (local > PS * NK) local = PS * NK;
  if (PS * NK * tiles / local > KNOB_SSD_STATE_REGS) return 0;
  *out = (ssd_plan){.L = L, .NK = NK, .local = local, .tiles = tiles,
                    .shared = ssd_floats(L, PS, NK)};
  return 1;
}

/* The slice of P a workgroup takes: the knob's, halved until both
 * languages' tiles fit (0: none fits). */
static int64_t ssd_slice(int64_t T, int64_t P, int64_t N) {
  ssd_plan plan = {0};
  for (int64_t PS = KNOB_SSD_SLICE < pow2_at_least(P) ? KNOB_SSD_SLICE : pow2_at_least(P);
       PS >= 1; PS /= 2)
    if (ssd_plan_for(SSM_LANG_GLSL, T, PS, N, &plan) && ssd_plan_for(SSM_LANG_WGSL, T, PS, N, &plan))
      return PS;
  return 0;
}

int ssm_cg_ssd_applies(const cg_ctx *c) {
  const ssm_node *sc = c->anchor;
  if (!sc || sc->op != SSM_OP_SCAN || ssm_node_int(sc, "batch", 0)) return 0;
  const ssm_type *h = &sc->args[3]->type;
  int64_t T = sc->result->type.dims[0];
  if (h->rank < 3 || T < KNOB_SSD_MIN_TOKENS) return 0;
  const ssm_type *ta = &sc->args[0]->type, *tc = &sc->args[2]->type;
  if (dim_back(ta, 0) != 1 || dim_back(ta, 1) != 1 || dim_back(tc, 1) != 1) return 0;
  const ssm_node *a = sc->args[0]->def;
  if (a->op != SSM_OP_EXP || !ssm_cg_member(c, a)) return 0;
  if (!separable(c, sc->args[1])) return 0;
  /* members only the sequential template computes: matmuls before its time
   * loop, decode convs */
  for (const ssm_node *n = c->first; n; n = n == c->root ? NULL : n->next)
    if (ssm_cg_member(c, n) && (n->op == SSM_OP_MATMUL || n->op == SSM_OP_CONV1D)) return 0;
  return ssd_slice(T, h->dims[h->rank - 2], h->dims[h->rank - 1]) > 0;
}

/* Appends ` * (factor)` for each factor of b below v (separable's chain) at
 * coordinates k (v's) that varies along N (`on_n`) or not; counts them. */
static void emit_factors(cg_ctx *c, const ssm_value *v, const cg_coords *k, int on_n, ssm_sb *out,
                         int *count) {
  const ssm_node *d = v->def;
  if (d->op == SSM_OP_MUL && d != c->anchor && ssm_cg_member(c, d)) {
    for (int i = 0; i < 2; i++) {
      cg_coords ki = ssm_cg_broadcast(k, &d->args[i]->type);
      emit_factors(c, d->args[i], &ki, on_n, out, count);
    }
    return;
  }
  if ((dim_back(&v->type, 0) != 1) != on_n) return;
  ssm_sb_printf(out, "%s(", (*count)++ ? " * " : "");
  ssm_cg_emit(c, v, k, out, 1);
  ssm_sb_printf(out, ")");
}

/* NAME(t, hd, COORD): the product of b's factors along P (COORD p) or N. */
static void factors_fn(cg_ctx *c, ssm_sb *loads, const char *name, const cg_coords *k, int on_n) {
  const ssm_node *sc = c->anchor;
  cg_coords kb = ssm_cg_broadcast(k, &sc->args[1]->type);
  ssm_sb e = {0};
  int count = 0;
  emit_factors(c, sc->args[1], &kb, on_n, &e, &count);
  if (!count) ssm_sb_printf(&e, "%s", ssm_cg_float_lit(c, 1.0));
  ssm_cg_const_fn(c, loads, name, on_n ? "t hd n" : "t hd p", ssm_sb_str(&e));
  ssm_sb_free(&e);
}

/* Threads over a rows x cols block of work (powers of two, rows * cols at
 * least `local`): tr x tc of them, so that a thread's items (rows / tr x
 * cols / tc) are as square as they can be, which makes the most products of
 * the words it reads; the rows take the larger side, the columns (the
 * side a warp reads consecutive words of) keep more threads. */
static void split(int64_t rows, int64_t cols, int64_t local, int64_t *tr, int64_t *tc) {
  int64_t br = 1, bc = 1, items = rows * cols / local;
  while (br * bc < items) {
    if ((br <= bc && br < rows) || bc == cols) br *= 2;
    else bc *= 2;
  }
  *tr = rows / br;
  *tc = cols / bc;
}

ssm_status ssm_cg_gen_ssd(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *sc = c->anchor;
  const ssm_type *h = &sc->args[3]->type;
  int r = h->rank;
  int64_t T = sc->result->type.dims[0], P = h->dims[r - 2], N = h->dims[r - 1];
  int64_t H = ssm_type_numel(h) / (P * N);
  int64_t PS = ssd_slice(T, P, N), slices = (P + PS - 1) / PS;
  ssd_plan plan = {0};
  SSM_ASSERT(PS > 0 && ssd_plan_for(c->lang, T, PS, N, &plan));
  int64_t L = plan.L, NK = plan.NK, local = plan.local;
  /* coordinates [t, H.., p, n] of the scan's broadcast, the heads from hd */
  ssm_type heads = *h;
  heads.rank = r - 2;
  cg_coords hk = ssm_cg_delinearize("hd", &heads, c->a);
  cg_coords kp = {.rank = r + 1}, kn = {.rank = r + 1};
  kp.c[0] = kn.c[0] = "t";
  for (int d = 0; d < r - 2; d++) kp.c[d + 1] = kn.c[d + 1] = hk.c[d];
  kp.c[r - 1] = "p";
  kp.c[r] = "0u";
  kn.c[r - 1] = "0u";
  kn.c[r] = "n";
  ssm_sb loads = {0};
  /* in_z(t, hd): the log of the decay, exp's operand */
  const ssm_node *ex = sc->args[0]->def;
  cg_coords ka = ssm_cg_broadcast(&kp, &sc->args[0]->type);
  cg_coords kz = ssm_cg_broadcast(&ka, &ex->args[0]->type);
  ssm_cg_load_fn(c, &loads, "in_z", "t hd", ex->args[0], &kz);
  factors_fn(c, &loads, "in_u", &kp, 0);
  factors_fn(c, &loads, "in_v", &kn, 1);
  cg_coords kc = ssm_cg_broadcast(&kn, &sc->args[2]->type);
  ssm_cg_load_fn(c, &loads, "in_c", "t hd n", sc->args[2], &kc);
  int state = ssm_cg_binding(c, sc->args[3]);
  ssm_cg_epilogue(c, &loads, 0);
  /* the threads of each product: G [L][L], y [L][PS], the state's tile
   * [NK][PS]; a thread's items are strided by the threads along each side */
  int64_t gtr, gtc, ytr, ytc, htr, htc;
  split(L, L, local, &gtr, &gtc);
  split(L, PS, local, &ytr, &ytc);
  split(NK, PS, local, &htr, &htc);
  /* workgroup memory (ssd_floats): offsets of the state's tile, C and B
   * (and the masked G), u, z, Λ (hi, lo), exp(Λ_t), exp(Λ_L - Λ_s) */
  int64_t lp = L + 1, psp = PS + 1, oc = NK * psp;
  int64_t cv = 2 * NK * lp, ou = oc + (cv > L * lp ? cv : L * lp);
  int64_t oz = ou + L * PS;
  SSM_ASSERT(oz + 5 * L == plan.shared);
  ssm_cg_grid_per_item(H * slices, out->groups);
  const char *kv[112] = {
      "LOCAL", I64(local), "L", I64(L), "PS", I64(PS), "PSP", I64(psp), "LP", I64(lp),
      "NK", I64(NK), "TILES", I64(plan.tiles), "N", I64(N), "P", I64(P), "S", I64(H * P),
      "SLICES", I64(slices), "SHARED", I64(plan.shared), "OC", I64(oc), "OV", I64(oc + NK * lp),
      "OU", I64(ou), "OZ", I64(oz), "OLH", I64(oz + L), "OLL", I64(oz + 2 * L), "OEX",
      I64(oz + 3 * L), "OW", I64(oz + 4 * L), "GTR", I64(gtr), "GTC", I64(gtc), "GT",
      I64(L / gtr), "GS", I64(L / gtc), "GN", I64((L / gtr) * (L / gtc)), "YTR", I64(ytr), "YTC",
      I64(ytc), "YT", I64(L / ytr), "YP", I64(PS / ytc), "YN", I64((L / ytr) * (PS / ytc)),
      "HTR", I64(htr), "HTC", I64(htc), "HN", I64(NK / htr), "HP", I64(PS / htc), "HNN",
      I64((NK / htr) * (PS / htc)), "HREGS", I64(plan.tiles * (NK / htr) * (PS / htc)),
      "STATE", ssm_arena_printf(c->a, "b%d", state), "BUFFERS", ssm_cg_buffers_decl(c),
      "COMMON", ssm_cg_common(c), "LOADS", ssm_cg_loads_text(c, &loads), NULL};
  ssm_cg_run_count(c, T, kv, sizeof kv / sizeof *kv);
  return ssm_cg_finish(c, "ssd",
                       ssm_arena_printf(c->a, "T=%lld H=%lld P=%lld N=%lld L=%lld PS=%lld NK=%lld "
                                        "LOCAL=%lld",
                                        (long long)T, (long long)H, (long long)P, (long long)N,
                                        (long long)L, (long long)PS, (long long)NK,
                                        (long long)local),
                       kv, out);
}
