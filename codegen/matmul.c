/*
 * matmul.c — the matmul families: gemv for the few rows of decode, the
 * matmul template for a few more, the tiled gemm for prefill's many rows,
 * and its variant on cooperative matrices; which one a matmul gets is
 * decided by knobs.h's thresholds (ssm_cg_kernel_for_group).
 */
#include <string.h>

#include "codegen/internal.h"
#include "codegen/knobs.h"

/* The rmsnorm prologue of the group's matmul, or NULL. */
static const ssm_node *norm_prologue(const cg_ctx *c) {
  return c->norm && c->anchor->args[0]->def == c->norm ? c->norm : NULL;
}

/* Whether the matmul's products take x rounded (ssm_x16): its weight is
 * 16-bit. Without a norm prologue in_x rounds it; with one, the template
 * rounds x times the gain, the row's 1/rms still after the sums (its X16;
 * ops.def). */
static int rounds_x(const cg_ctx *c) { return ssm_dtype_rounds_x(c->anchor->args[1]->type.dtype); }

/* The loads of the matmul and gemm templates: in_x(m,k), gain(k),
 * in_w(n,k), epilogue(acc,i); the rmsnorm prologue's node or NULL. */
static const ssm_node *matmul_loads(cg_ctx *c, ssm_sb *loads) {
  const ssm_node *mm = c->anchor;
  const ssm_node *norm = norm_prologue(c);
  ssm_cg_load_rows(c, loads, "in_x", norm ? norm->args[0] : mm->args[0], rounds_x(c) && !norm);
  /* the gain before the weight: bindings in gemv's order (ssm_cg_gen_gemv) */
  if (norm && norm->nargs > 1) {
    cg_coords gk = {.rank = 1, .c = {"k"}};
    ssm_cg_load_fn(c, loads, "gain", "k", norm->args[1], &gk);
  } else {
    ssm_cg_const_fn(c, loads, "gain", "k", "1.0");
  }
  cg_coords wk = {.rank = 2, .c = {"n", "k"}};
  ssm_cg_load_fn(c, loads, "in_w", "n k", mm->args[1], &wk);
  ssm_cg_epilogue(c, loads, 0);
  return norm;
}

static const char *norm_eps(cg_ctx *c, const ssm_node *norm) {
  return norm ? ssm_arena_printf(c->a, "%.9g", ssm_node_float(norm, "eps", 0)) : "0";
}

/* `cols` columns per workgroup: more than 1 for the gemv of a language
 * without subgroups (ssm_cg_gen_gemv). */
static ssm_status matmul_kernel(cg_ctx *c, int64_t cols, ssm_cg_kernel *out) {
  const ssm_node *mm = c->anchor;
  const ssm_type *w = &mm->args[1]->type;
  int64_t N = w->dims[0], K = w->dims[1];
  int64_t M = ssm_type_numel(&mm->args[0]->type) / K;
  int64_t TT = M < KNOB_MATMUL_TILE_ROWS ? M : KNOB_MATMUL_TILE_ROWS;
  ssm_sb loads = {0};
  const ssm_node *norm = matmul_loads(c, &loads);
  uint32_t local = ssm_cg_pow2_threads(K, KNOB_ROW_THREADS_MIN, KNOB_ROW_THREADS_MAX);
  ssm_cg_grid_per_item((N + cols - 1) / cols, out->groups);
  /* WGSL: R of its COLS columns at once, a power of two dividing COLS whose
   * sums (TT R rows of LOCAL, beside the norm's TT) fit workgroup storage */
  int64_t r = 1;
  while (r * 2 <= KNOB_WGSL_MATMUL_COLS_AT_ONCE && cols % (r * 2) == 0 &&
         (TT * r * 2 + TT) * local * 4 <= KNOB_WGSL_WORKGROUP_BYTES)
    r *= 2;
  const char *kv[] = {"LOCAL", U32(local), "M", I64(M), "K", I64(K), "N", I64(N), "TT", I64(TT),
                      "NORM", norm ? "1" : "0", "EPS", norm_eps(c, norm),
                      "X16", norm && rounds_x(c) ? "1" : "0",
                      "BUFFERS", ssm_cg_buffers_decl(c), "COMMON", ssm_cg_common(c), "LOADS",
                      ssm_cg_loads_text(c, &loads),
                      /* the gemv of a language without subgroups (ssm_cg_gen_gemv) */
                      lang(c)->subgroups ? NULL : "COLS", I64(cols), "R", I64(r), "TTR", I64(TT * r), NULL};
  return ssm_cg_finish(c, "matmul",
                       ssm_arena_printf(c->a, "M=%lld K=%lld N=%lld TT=%lld LOCAL=%u", (long long)M,
                                        (long long)K, (long long)N, (long long)TT, local),
                       kv, out);
}

ssm_status ssm_cg_gen_matmul(cg_ctx *c, ssm_cg_kernel *out) { return matmul_kernel(c, 1, out); }

/* `void NAME(PARAMSuint k, out vec4 a, out vec4 b)`: scalar load `fn` at
 * k..k+7, zero past K when K is not a multiple of 8. */
static void load8(cg_ctx *c, ssm_sb *loads, const char *name, const char *params, const char *args,
                  const char *fn, int64_t K) {
  ssm_sb half[2] = {{0}};
  for (int j = 0; j < 8; j++) {
    ssm_sb *h = &half[j / 4];
    if (j % 4) ssm_sb_printf(h, ", ");
    if (K % 8)
      ssm_sb_printf(h, "k + %du < %lldu ? %s(%sk + %du) : 0.0", j, (long long)K, fn, args, j);
    else
      ssm_sb_printf(h, "%s(%sk + %du)", fn, args, j);
  }
  ssm_sb_printf(loads, "%s\n",
                SNIPPET(c, "helpers", "load8", "NAME", name, "PARAMS", params, "A",
                        ssm_sb_str(&half[0]), "B", ssm_sb_str(&half[1])));
  ssm_sb_free(&half[0]);
  ssm_sb_free(&half[1]);
}

/* The tensor in memory that operand v reads at v's own linear index (v, or
 * the source of reshapes of it, which keep the index), or NULL where v is
 * computed in the kernel, sliced, transposed or a constant. */
static const ssm_value *direct_source(const cg_ctx *c, const ssm_value *v) {
  for (;;) {
    const ssm_node *d = v->def;
    int view = (ssm_cg_member(c, d) && d != c->anchor && ssm_op_is_view(d->op)) ||
               ssm_cg_ungrouped_view(c, d);
    if (view && d->op == SSM_OP_RESHAPE) {
      v = d->args[0];
      continue;
    }
    return view || ssm_cg_member(c, d) || d->op == SSM_OP_CONST ? NULL : v;
  }
}

/* `void NAME(PARAMSuint k, out vec4 a, out vec4 b)` reading tensor v at
 * element INDEX.. (8 values, INDEX a multiple of 8) straight from memory, 16
 * bytes at a time through a uvec4 view of its binding (ldq<b>, declared
 * with the buffers): f32, or 16-bit widened. */
static void load8_direct(cg_ctx *c, ssm_sb *loads, const char *name, const char *params,
                         const char *index, const ssm_value *v) {
  int b = ssm_cg_binding(c, v);
  c->vec4 |= 1u << b;
  SSM_ASSERT(!ssm_dtype_is_quant(v->type.dtype)); /* load8_weight */
  const char *snippet = v->type.dtype == SSM_F32   ? "load8_f32"
                        : v->type.dtype == SSM_F16 ? "load8_f16"
                                                   : "load8_bf16";
  ssm_sb_printf(loads, "%s\n",
                SNIPPET(c, "helpers", snippet, "NAME", name, "PARAMS", params, "INDEX", index, "B",
                        I64(b)));
}

/* Whether load_w can read weight w straight from memory (load8_weight):
 * a weight the kernel does not compute, k a multiple of 8. */
static int weight_direct(const cg_ctx *c, const ssm_value *w, int64_t K) {
  return w->def->op == SSM_OP_WEIGHT && !ssm_cg_member(c, w->def) && K % 8 == 0;
}

static void load8_weight(cg_ctx *c, ssm_sb *loads, const ssm_value *w, int64_t K) {
  if (ssm_dtype_is_quant(w->type.dtype)) { /* the block of the 8 values known without a division */
    ssm_sb_printf(loads, "%s\n",
                  SNIPPET(c, "helpers", "load8_q", "B", I64(ssm_cg_binding(c, w)), "K", I64(K),
                          "BLOCKS", I64((K + SSM_QBLOCK - 1) / SSM_QBLOCK)));
    return;
  }
  load8_direct(c, loads, "load_w", "uint n, ", ssm_arena_printf(c->a, "n * %lldu + k", (long long)K),
               w);
}

/* load_x, load_g and load_w of gemm_coop (8 values from k): straight from
 * memory where the operand is a tensor there (x as rows of K, the gain and
 * the weight) and K a multiple of 8, else through the scalar loads. */
static void coop_loads(cg_ctx *c, ssm_sb *wide, const ssm_node *norm, int64_t K) {
  const ssm_node *mm = c->anchor;
  const ssm_value *x = direct_source(c, norm ? norm->args[0] : mm->args[0]);
  const ssm_value *g = norm && norm->nargs > 1 ? direct_source(c, norm->args[1]) : NULL;
  const char *kk = ssm_arena_printf(c->a, "%lldu", (long long)K);
  if (x && K % 8 == 0 && ssm_type_numel(&x->type) % K == 0)
    load8_direct(c, wide, "load_x", "uint m, ", ssm_arena_printf(c->a, "m * %s + k", kk), x);
  else
    load8(c, wide, "load_x", "uint m, ", "m, ", "in_x", K);
  if (g && K % 8 == 0 && ssm_type_numel(&g->type) == K)
    load8_direct(c, wide, "load_g", "", "k", g);
  else
    load8(c, wide, "load_g", "", "", "gain", K);
  if (weight_direct(c, mm->args[1], K))
    load8_weight(c, wide, mm->args[1], K);
  else
    load8(c, wide, "load_w", "uint n, ", "n, ", "in_w", K);
}

/* load_w_raw and stage_w of gemm_coop with PREP (8 values of w from k, as
 * stored; to f16 when staged): 16-bit weights straight from memory, others
 * through load_w. */
static void coop_raw_w(cg_ctx *c, ssm_sb *wide, int64_t K) {
  const ssm_value *w = c->anchor->args[1];
  int raw = weight_direct(c, w, K) && (w->type.dtype == SSM_F16 || w->type.dtype == SSM_BF16);
  const char *snippet = !raw ? "load8_raw_any" : w->type.dtype == SSM_F16 ? "load8_raw_f16"
                                                                        : "load8_raw_bf16";
  SSM_ASSERT(!raw || (c->vec4 >> ssm_cg_binding(c, w) & 1)); /* coop_loads' load_w declared it */
  ssm_sb_printf(wide, "%s\n",
                raw ? SNIPPET(c, "helpers", snippet, "B", I64(ssm_cg_binding(c, w)), "K", I64(K))
                    : SNIPPET0(c, "helpers", snippet));
}

/* The cooperative-matrix variant of a batched program's matmul of gemv's
 * rows (gemv_coop.glsl.in), for the kernel whose grid has `grid` workgroups
 * and whose loads `ld` give load_x, load_g and load_w (8 values from k):
 * tiles of 16 columns a workgroup, as many as keep KNOB_COOP_FEW_GROUPS
 * workgroups (more where the grid is smaller), and subgroups that split k,
 * as many as shared memory holds while each gets two steps. */
static ssm_status coop_few(cg_ctx *c, int64_t M, int64_t K, int64_t N, const ssm_node *norm,
                           int64_t grid, const char *buffers, const char *ld, ssm_cg_kernel *out) {
  int64_t mt = (M + 15) / 16, fn = mt <= 2 ? KNOB_COOP_FEW_COLS : KNOB_COOP_FEW_COLS / 2;
  while (fn > 1 && (N + 16 * fn - 1) / (16 * fn) < KNOB_COOP_FEW_GROUPS) fn /= 2;
  while ((N + 16 * fn - 1) / (16 * fn) > grid) fn *= 2; /* the portable kernel's grid is the limit */
  int64_t nw = KNOB_COOP_FEW_SUBGROUPS, steps = (K + 15) / 16, pool;
  for (;;) {
    /* 16-byte vectors: each subgroup's staging (rows of 3), or the sums */
    int64_t stage = nw * (mt + fn) * 16 * 3, red = nw * fn * 64;
    pool = stage > red ? stage : red;
    int64_t bytes = pool * 16 + (norm ? nw * mt * 16 * 4 : 0);
    if (nw == 1 || (bytes <= KNOB_COOP_FEW_SHARED && steps >= 2 * nw)) break;
    nw /= 2;
  }
  /* steps of w in flight a subgroup: KNOB_COOP_FEW_AHEAD loads of 8 a thread */
  int64_t pd = KNOB_COOP_FEW_AHEAD / fn, mine = (steps + nw - 1) / nw;
  pd = pd < 1 ? 1 : pd > mine ? mine : pd;
  const char *kv[] = {"M", I64(M), "K", I64(K), "N", I64(N), "MT", I64(mt), "FN", I64(fn),
                      "NW", I64(nw), "PD", I64(pd), "POOL", I64(pool), "NORM", norm ? "1" : "0", "EPS", norm_eps(c, norm),
                      "BUFFERS", buffers, "COMMON", ssm_cg_common(c), "LOADS", ld, NULL};
  char *src;
  SSM_TRY(ssm_cg_template_expand(c->a, "gemv_coop", c->lang, kv, &src));
  out->glsl_coop = ssm_arena_printf(c->a, "// ssmc kernel: template gemv_coop.glsl.in, %s "
                                    "(cooperative: MT=%lld FN=%lld NW=%lld PD=%lld)\n%s",
                                    out->params, (long long)mt, (long long)fn, (long long)nw,
                                    (long long)pd, src);
  return NULL;
}

/* Whether a matmul of a batched program's rows (not counted: every row a
 * sequence) gets a variant on cooperative matrices: GLSL, more rows than
 * gemv takes alone, a weight whose products take x at f16's precision. */
static int coop_batch(const cg_ctx *c, int64_t M) {
  return lang(c)->coop_matrix && !strcmp(c->g->name, "batch") && M > KNOB_GEMV_MAX_ROWS &&
         ssm_dtype_rounds_x(c->anchor->args[1]->type.dtype);
}

/* The kernel that makes a gemm_coop or gemm_few's x ready
 * (gemm_coop_prep.glsl.in) on M rows, those from `live` on zeros: its
 * source, grid (a workgroup a row) and scratch (f16 rows, then a float a
 * row), with the variant's loads. */
static ssm_status coop_prep_kernel(cg_ctx *c, int64_t M, int64_t K, const ssm_node *norm,
                                   const char *live, const char *run, const char *buffers,
                                   const char *loads, ssm_cg_kernel *out) {
  const char *kvp[] = {"M", I64(M), "K", I64(K), "NORM", norm ? "1" : "0", "EPS", norm_eps(c, norm),
                       "LIVE", live, "RUN", run, "BUFFERS", buffers, "COMMON", ssm_cg_common(c),
                       "LOADS", loads, NULL};
  char *src;
  SSM_TRY(ssm_cg_template_expand(c->a, "gemm_coop_prep", c->lang, kvp, &src));
  out->glsl_coop_prep = ssm_arena_printf(c->a, "// ssmc kernel: template gemm_coop_prep.glsl.in, "
                                         "M=%lld K=%lld NORM=%d\n%s", (long long)M, (long long)K,
                                         norm != NULL, src);
  ssm_cg_grid_per_item(M, out->prep_groups);
  out->scratch_bytes = (uint64_t)M * (uint64_t)K * 2 + (uint64_t)M * 4;
  return NULL;
}

/* The cooperative-matrix variant of a batched program's matmul of the
 * gemm's rows, up to KNOB_COOP_ROWS_MAX (gemm_few.glsl.in), and the kernel
 * before it that makes x ready (gemm_coop_prep.glsl.in, on the rows padded
 * to 16 MT), with the loads `ld` (load_x, load_g and load_w, 8 values from
 * k; load_w_raw and stage_w are added here) and a grid of its own: column
 * groups of one or two tiles of 16 a subgroup, each with subgroups that
 * split k, as many as make about KNOB_COOP_ROWS_SUBGROUPS in all, within
 * shared memory. */
static ssm_status coop_rows(cg_ctx *c, int64_t M, int64_t K, int64_t N, const ssm_node *norm,
                            const char *buffers, const char *ld, ssm_cg_kernel *out) {
  int64_t mt = (M + 15) / 16, mp = mt * 16, steps = K / 16, tiles = (N + 15) / 16;
  int64_t fn = tiles >= KNOB_COOP_ROWS_WIDE_TILES ? 2 : 1, groups = (tiles + fn - 1) / fn;
  int64_t ks = 1;
  while (ks < KNOB_COOP_ROWS_SPLIT && groups * ks < KNOB_COOP_ROWS_SUBGROUPS &&
         steps / (ks * 2) >= KNOB_COOP_ROWS_MIN_STEPS)
    ks *= 2;
  int64_t cg = 1;
  while (cg * ks < KNOB_COOP_ROWS_GROUP_SUBGROUPS && cg * 2 <= groups) cg *= 2;
  /* a subgroup's staging (16 rows of 3 vectors a tile) and k-sums (256 floats a tile) */
  for (;;) {
    int64_t bytes = cg * ks * fn * (16 * 3 * 16 + 256 * 4);
    if (bytes <= KNOB_COOP_FEW_SHARED) break;
    if (ks > 1) ks /= 2;
    else if (cg > 1) cg /= 2;
    else if (fn > 1) fn = 1;
    else return NULL; /* none: the portable kernel */
  }
  groups = (tiles + fn - 1) / fn;
  int64_t pd = fn == 1 ? 4 : 2, mine = (steps + ks - 1) / ks;
  if (pd > mine) pd = mine;
  ssm_sb w = {0};
  coop_raw_w(c, &w, K);
  const char *lw = ssm_arena_printf(c->a, "%s%s", ld, ssm_sb_str(&w));
  ssm_sb_free(&w);
  const char *com = ssm_cg_common(c);
  const char *kv[] = {"M", I64(M), "MP", I64(mp), "K", I64(K), "N", I64(N), "MT", I64(mt),
                      "FN", I64(fn), "CG", I64(cg), "KS", I64(ks), "PD", I64(pd),
                      "BUFFERS", buffers, "COMMON", com, "LOADS", lw, NULL};
  char *src;
  SSM_TRY(ssm_cg_template_expand(c->a, "gemm_few", c->lang, kv, &src));
  /* the prep kernel's rows past M are zeros, their x not read */
  SSM_TRY(coop_prep_kernel(c, mp, K, norm, I64(M), "", buffers, lw, out));
  out->glsl_coop = ssm_arena_printf(c->a, "// ssmc kernel: template gemm_few.glsl.in, %s "
                                    "(cooperative: MT=%lld FN=%lld CG=%lld KS=%lld PD=%lld)\n%s",
                                    out->params, (long long)mt, (long long)fn, (long long)cg,
                                    (long long)ks, (long long)pd, src);
  ssm_cg_grid_per_item((groups + cg - 1) / cg, out->coop_groups);
  return NULL;
}

/* Many rows (chunked prefill): the tiled gemm template, the same loads and
 * epilogue as matmul. Blocks of BM x BN outputs (64 or 32 each), 4 x 4
 * (2 x 4 when BM is 32) a thread, k in slices of 16. An output's f32 sum is
 * in two levels (16 k in order, then those sums in order): not gemv's order
 * (whose last levels are subgroup and workgroup reductions), but accurate
 * enough that chunked prefill stays within 1e-6 of token-by-token decode
 * (test_golden's gemm_chunks).
 *
 * In GLSL, a matmul large enough for KNOB_GEMM_BIG_GROUPS blocks of 128 x
 * 128 (a prefill chunk's in_proj) takes those, 8 x 8 a thread, k in slices
 * of 32, on the same grid (the template's REMAP): the same matmul sums, bit
 * for bit (a fused rmsnorm's squares add in another order), with half the
 * shared-memory reads and loop overhead per product. WGSL keeps the grid's
 * blocks: its workgroup memory is 16 KiB.
 *
 * In GLSL, a matmul whose blocks of 32 x 32 are still fewer than
 * KNOB_GEMM_MIN_GROUPS (x_proj) is split over k inside the workgroup: G
 * groups of 64 threads, group g taking slices g, g + G, ..., so that a
 * workgroup walks k / G slices one after another rather than k. G grows as
 * the grid shrinks (KNOB_GEMM_SPLIT_K_THREADS over the grid), within the
 * knobs' bounds, while each group keeps two slices. The sums of the groups
 * are added in order of group: a fixed order, within f32 rounding of the
 * unsplit one.
 *
 * When the weight is stored 16-bit or q8_0, GLSL also gets a variant on
 * cooperative matrices (gemm_coop.glsl.in: f16 tiles of w and of x, which
 * such a matmul takes at f16's precision (ops.def), f32 sums) with the
 * same LOADS, grid and epilogue, which the Vulkan runtime picks at load
 * time where the device has them (exec.c; SSM_VK_COOPMAT=0 keeps the
 * portable kernel). It runs 16 subgroups (512 invocations: device.c
 * checks): 8 stage x, 8 stage w, and all 16 multiply, each tile of x loaded once a
 * slice per subgroup; and it reads x, the norm's gain and w 16 bytes at a
 * time where they are tensors in memory (coop_loads). Shared memory holds
 * two slices, one staged while the other is multiplied (DB), except for
 * narrow tiles with a norm prologue (KNOB_COOP_DOUBLE_NARROW_NORM: slower
 * there). It takes tiles of
 * 128 x 128 where there are KNOB_COOP_BIG_TILES of them (about one wave of
 * a large GPU), else 128 x 64: a wide tile does twice the products of a
 * narrow one in less than twice the time, but too few of them leave
 * a GPU idle. Debian 12's glslang knows GL_NV_cooperative_matrix, not yet
 * GL_KHR_cooperative_matrix, hence the NV form. WGSL keeps the portable
 * variant. A batched program's rows (up to KNOB_COOP_ROWS_MAX) take
 * coop_rows's variant instead, where k is a multiple of 16 and x is made
 * ready first: every row in a workgroup, k split between its subgroups. */
ssm_status ssm_cg_gen_gemm(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_type *w = &c->anchor->args[1]->type;
  int64_t N = w->dims[0], K = w->dims[1];
  int64_t M = ssm_type_numel(&c->anchor->args[0]->type) / K;
  /* blocks halved (rows first) while the grid has fewer than
   * KNOB_GEMM_MIN_GROUPS workgroups: thin matmuls (x_proj, out_proj at a
   * chunk) otherwise leave most of a large GPU idle */
  const int64_t small = KNOB_GEMM_BLOCK_MIN;
  int64_t BM = M <= small ? small : KNOB_GEMM_BLOCK, BN = KNOB_GEMM_BLOCK;
  for (;;) {
    int64_t groups = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
    if (groups >= KNOB_GEMM_MIN_GROUPS || (BM == small && BN == small)) break;
    if (BM > small) BM = small;
    else BN = small;
  }
  const int64_t BK = KNOB_GEMM_BK, TN = KNOB_GEMM_TN, TM = BM / 16;
  const uint32_t local = (uint32_t)((BM / TM) * (BN / TN));
  if ((N + BN - 1) / BN > 65535 || (M + BM - 1) / BM > 65535) return ssm_cg_gen_matmul(c, out);
  ssm_sb loads = {0};
  const ssm_node *norm = matmul_loads(c, &loads);
  /* GLSL's blocks of KNOB_GEMM_BIG_BLOCK (below) */
  const int64_t bigb = KNOB_GEMM_BIG_BLOCK;
  int big = ((M + bigb - 1) / bigb) * ((N + bigb - 1) / bigb) >= KNOB_GEMM_BIG_GROUPS;
  /* the cooperative-matrix variant: for 16-bit weights, in GLSL, except
   * thin matmuls of a long k (x_proj), whose few tiles of 128 rows would
   * leave most of a large GPU idle */
  const ssm_value *wv = c->anchor->args[1];
  /* x made ready by a kernel of its own (gemm_coop_prep.glsl.in) where K
   * is a multiple of 8, when asked for (ssm_cg_opts): w then loads raw
   * (coop_raw_w), and the tiles are 128 x 128 at any count (knobs.h) */
  const int prep = c->coop_prep && K % 8 == 0;
  int64_t wide_tiles = ((M + 127) / 128) * ((N + 127) / 128);
  int cbig = prep || wide_tiles >= KNOB_COOP_BIG_TILES;
  int64_t CBN = cbig ? 128 : 64, tiles = wide_tiles >= KNOB_COOP_BIG_TILES
                                             ? wide_tiles : ((M + 127) / 128) * ((N + 63) / 64);
  /* a batched program's rows: coop_rows, where it applies */
  int few = coop_batch(c, M) && M <= KNOB_COOP_ROWS_MAX && K % 16 == 0 && c->coop_prep;
  /* with a prep kernel, fewer wide tiles than about a wave over a long k
   * (x_proj; mamba-1.4b's out_proj, 64 tiles): split over k across the
   * grid's workgroups (the template's SPLIT), parts of KP values of k, each
   * at least KNOB_COOP_SPLIT_SLICES slices, enough parts for about
   * KNOB_COOP_SPLIT_GROUPS workgroups */
  int thin = tiles < KNOB_COOP_THIN_TILES && K >= KNOB_COOP_THIN_K;
  int64_t grid = ((M + BM - 1) / BM) * ((N + BN - 1) / BN), parts = 1, kp = K;
  if (prep && !few && wide_tiles < KNOB_COOP_BIG_TILES && K >= KNOB_COOP_THIN_K) {
    int64_t most = K / (32 * KNOB_COOP_SPLIT_SLICES);
    int64_t want = (KNOB_COOP_SPLIT_GROUPS + wide_tiles - 1) / wide_tiles;
    if (want < most) most = want;
    parts = grid / wide_tiles < most ? grid / wide_tiles : most;
    if (parts >= 2) {
      kp = (K + parts - 1) / parts;
      kp = (kp + 31) / 32 * 32;
      parts = (K + kp - 1) / kp;
    }
    if (parts < 2 || wide_tiles > SSM_SCRATCH_COUNTERS) parts = 1, kp = K;
  }
  /* (a batched program's matmul of rows that coop_rows takes, where it does not, keeps
   * the portable kernel) */
  int coop = few || (lang(c)->coop_matrix && ssm_dtype_rounds_x(wv->type.dtype) &&
                     (!thin || parts > 1) && (strcmp(c->g->name, "batch") || M > KNOB_COOP_ROWS_MAX));
  /* its 8-wide loads, after the portable ones they call; x, the gain and w
   * straight from memory 16 bytes at a time where they can be (their vector
   * views are declared with the buffers) */
  ssm_sb wide = {0};
  if (coop) coop_loads(c, &wide, norm, K);
  out->groups[0] = (uint32_t)((N + BN - 1) / BN);
  out->groups[1] = (uint32_t)((M + BM - 1) / BM);
  out->groups[2] = 1;
  const char *buffers = ssm_cg_buffers_decl(c), *com = ssm_cg_common(c);
  const char *ld = ssm_cg_loads_text(c, &loads);
  /* with the run's token count: the rows of its tokens, when the program's
   * tokens T cover the rows evenly (x is [T, ..., K]) */
  int64_t T = ssm_cg_program_tokens(c->g);
  int counted = T > 1 && M % T == 0 && ssm_cg_reads_count(c, T);
  const char *live =
      counted ? ssm_arena_printf(c->a, "%s * %lldu", ssm_cg_run_min(c, T), (long long)(M / T))
              : ssm_arena_printf(c->a, "%lldu", (long long)M);
  const char *run = counted ? lang(c)->run_decl : "";
  /* GLSL, where big blocks still make KNOB_GEMM_BIG_GROUPS: those, on the
   * same grid (REMAP); WGSL keeps the grid's blocks (its workgroup memory
   * is 16 KiB) */
  int64_t kbm = BM, kbn = BN, ktm = TM, ktn = TN, kbk = BK;
  uint32_t klocal = local;
  int remap = big && lang(c)->big_tiles;
  if (remap) {
    kbm = kbn = bigb, ktm = ktn = KNOB_GEMM_BIG_TILE, kbk = KNOB_GEMM_BIG_BK;
    klocal = (uint32_t)((kbm / ktm) * (kbn / ktn));
  }
  /* GLSL, where even the smallest blocks are fewer than KNOB_GEMM_MIN_GROUPS
   * (x_proj, out_proj of a small model) and k is long enough that each
   * k-group gets its slices: split-K, 4 x 4 a thread */
  int64_t groups = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  int64_t splitk = 1;
  if (lang(c)->big_tiles && !remap && !norm && groups < KNOB_GEMM_MIN_GROUPS) {
    int64_t group_threads = (BM / 4) * (BN / TN), slices = KNOB_GEMM_SPLIT_K_SLICES;
    splitk = (KNOB_GEMM_SPLIT_K_THREADS / group_threads + groups - 1) / groups;
    splitk = splitk < KNOB_GEMM_SPLIT_K_MIN ? KNOB_GEMM_SPLIT_K_MIN
             : splitk > KNOB_GEMM_SPLIT_K_MAX ? KNOB_GEMM_SPLIT_K_MAX : splitk;
    if (K < slices * BK * splitk) splitk = K / (slices * BK);
    if (splitk < KNOB_GEMM_SPLIT_K_MIN) splitk = 1;
  }
  if (splitk > 1) {
    ktm = 4;
    klocal = (uint32_t)(splitk * (kbm / ktm) * (kbn / ktn));
    /* the sums of groups 1.. fit in the staged slices' memory */
    SSM_ASSERT((splitk - 1) * (klocal / splitk) * ktm * ktn / 4 <=
               splitk * kbk * (kbm / 4 + 1 + kbn / 4 + 1));
  }
  const char *kv[] = {"LOCAL", U32(klocal), "M", I64(M), "K", I64(K), "N", I64(N), "BM", I64(kbm),
                      "BN", I64(kbn), "BK", I64(kbk), "TM", I64(ktm), "TN", I64(ktn),
                      "NORM", norm ? "1" : "0", "X16", norm && rounds_x(c) ? "1" : "0",
                      "EPS", norm_eps(c, norm), "LIVE", live, "RUN", run,
                      "BUFFERS", buffers, "COMMON", com, "LOADS", ld,
                      /* REMAP, or the padded rows of x of the template without big tiles */
                      lang(c)->big_tiles ? "REMAP" : "PX",
                      lang(c)->big_tiles ? (remap ? "1" : "0") : I64(BM + 1),
                      /* the k-groups, or the padded rows of w */
                      lang(c)->big_tiles ? "SPLITK" : "PW",
                      lang(c)->big_tiles ? I64(splitk) : I64(BN + 1), NULL};
  const char *glsl_form =
      big ? ssm_arena_printf(c->a, " (GLSL: BM=BN=%lld BK=%d TM=TN=%d LOCAL=%lld)", (long long)bigb,
                             KNOB_GEMM_BIG_BK, KNOB_GEMM_BIG_TILE,
                             (long long)((bigb / KNOB_GEMM_BIG_TILE) * (bigb / KNOB_GEMM_BIG_TILE)))
      : splitk > 1 ? ssm_arena_printf(c->a, " (GLSL: split-K in %lld groups, TM=4 LOCAL=%u)",
                                      (long long)splitk, klocal)
                   : "";
  const char *params = ssm_arena_printf(
      c->a, "M=%lld K=%lld N=%lld BM=%lld BN=%lld BK=%lld TM=%lld TN=%lld LOCAL=%u%s",
      (long long)M, (long long)K, (long long)N, (long long)BM, (long long)BN, (long long)BK,
      (long long)TM, (long long)TN, local, glsl_form);
  SSM_TRY(ssm_cg_finish(c, "gemm", params, kv, out));
  if (!coop) {
    ssm_sb_free(&wide);
    return NULL;
  }
  if (few) {
    const char *lw = ssm_arena_printf(c->a, "%s%s", ld, ssm_sb_str(&wide));
    ssm_sb_free(&wide);
    return coop_rows(c, M, K, N, norm, buffers, lw, out);
  }
  /* w read into L2 a few slices ahead on wide tiles (the template's AHEAD),
   * where a workgroup waits for each slice of w it loads from memory;
   * narrow tiles are fewer than a wave and go without. x, the activations,
   * is in L2 already. */
  const int64_t SGN = CBN == 128 ? 4 : 2;
  const int64_t ahead = CBN == 128 ? KNOB_COOP_AHEAD : 0;
  if (prep) coop_raw_w(c, &wide, K);
  const int db = CBN == 64 && norm && !prep ? KNOB_COOP_DOUBLE_NARROW_NORM : KNOB_COOP_DOUBLE;
  /* the parts' sums after the prep kernel's rows and factors, 16-byte aligned */
  const int64_t prows = (M + 127) / 128 * 128, pcols = (N + CBN - 1) / CBN * CBN;
  const uint64_t pb = ((uint64_t)M * (uint64_t)K / 2 + (uint64_t)M + 3) / 4 * 4;
  const char *kvc[] = {"M", I64(M), "K", I64(K), "N", I64(N), "BN", I64(CBN),
                       "SPLIT", I64(parts), "KP", I64(kp), "PB", I64((int64_t)pb),
                       "PROWS", I64(prows), "PCOLS", I64(pcols),
                       "COUNTERS", I64(SSM_SCRATCH_COUNTERS),
                       "SGN", I64(SGN), "AHEAD", I64(ahead), "DB", db ? "1" : "0",
                       "NORM", norm ? "1" : "0", "PREP", prep ? "1" : "0",
                       "EPS", norm_eps(c, norm),
                       "LIVE", live, "RUN", run, "BUFFERS", buffers, "COMMON", com,
                       "LOADS", ssm_arena_printf(c->a, "%s%s", ld, ssm_sb_str(&wide)), NULL};
  char *src;
  ssm_status s = ssm_cg_template_expand(c->a, "gemm_coop", c->lang, kvc, &src);
  if (!s)
    out->glsl_coop = ssm_arena_printf(c->a, "// ssmc kernel: template gemm_coop.glsl.in, %s "
                                      "(cooperative: BM=128 BN=%lld AHEAD=%lld DB=%d PREP=%d "
                                      "SPLIT=%lld)\n%s",
                                      out->params, (long long)CBN, (long long)ahead, db, prep,
                                      (long long)parts, src);
  if (!s && prep) {
    s = coop_prep_kernel(c, M, K, norm, live, run, buffers,
                         ssm_arena_printf(c->a, "%s%s", ld, ssm_sb_str(&wide)), out);
    /* with SPLIT, the parts' sums after the rows and factors */
    if (!s && parts > 1)
      out->scratch_bytes = pb * 4 + (uint64_t)parts * (uint64_t)prows * (uint64_t)pcols * 4;
  }
  ssm_sb_free(&wide);
  /* a snippet of the cooperative variant that failed (ssm_cg_snippet) */
  return s ? s : c->err;
}

/* Few rows (decode): columns in groups of ROWS per workgroup, 8 values of k
 * per thread and step, subgroup reductions (gemv.glsl.in). WGSL has no
 * subgroups without an optional feature: its kernel is the matmul template
 * doing ROWS columns per workgroup, on the same grid. */
ssm_status ssm_cg_gen_gemv(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *mm = c->anchor;
  const ssm_value *wv = mm->args[1];
  int64_t N = wv->type.dims[0], K = wv->type.dims[1];
  /* ROWS columns a workgroup share each read of x: more where there are
   * columns enough to fill the GPU still, and where x's row is long */
  int64_t rows = N >= KNOB_GEMV_ROWS4_N ? (K >= KNOB_GEMV_ROWS8_K ? 8 : 4)
                 : N >= KNOB_GEMV_ROWS2_N ? 2 : 1;
  /* wide matmuls of a long k (in_proj, lm_head): COLS columns per
   * workgroup, x held in registers across them; the others keep one group
   * of ROWS columns. COLS is a multiple of ROWS: the template steps through
   * COLS by ROWS. Up to KNOB_GEMV_COLS_ANY_K_N columns of a long k take
   * wide workgroups, about one wave of a large GPU; more columns (an
   * lm_head) go in small ones, whose waves leave less of a tail. */
  int64_t cols = 0;
  if (N >= KNOB_GEMV_COLS_N && (K >= KNOB_GEMV_COLS_K || N > KNOB_GEMV_COLS_ANY_K_N)) {
    int wide = N <= KNOB_GEMV_COLS_ANY_K_N && K >= KNOB_GEMV_WIDE_K;
    cols = wide ? KNOB_GEMV_WIDE_COLS : KNOB_GEMV_COLS;
    if (wide) rows = KNOB_GEMV_WIDE_ROWS;
  }
  int64_t M = ssm_type_numel(&mm->args[0]->type) / K;
  /* many rows (a batched program's): tiles of MT rows, a power of two of
   * at most KNOB_GEMV_TILE_ROWS, the workgroup's threads split between
   * them and slices of k; ROWS columns a workgroup, by N (and with 16-bit
   * weights, from KNOB_GEMV_MAX_ROWS rows on, coop_few's variant) */
  int64_t mt = 0;
  if (M > KNOB_GEMV_MAX_ROWS) {
    for (mt = 1; mt < M && mt < KNOB_GEMV_TILE_ROWS; mt *= 2) {}
    cols = 0;
    rows = N >= KNOB_GEMV_ROWS4_N ? KNOB_GEMV_TILE_COLS : N >= KNOB_GEMV_ROWS2_N ? 4 : 2;
  }
  if (!lang(c)->subgroups) return matmul_kernel(c, cols ? cols : rows, out);
  const ssm_node *norm = norm_prologue(c);
  int x16 = norm && rounds_x(c); /* x times the gain rounded: the template's X16 */
  ssm_sb loads = {0};
  ssm_cg_load_rows(c, &loads, "in_x", norm ? norm->args[0] : mm->args[0], rounds_x(c) && !norm);
  load8(c, &loads, "load_x", "uint m, ", "m, ", "in_x", K);
  if (norm && norm->nargs > 1) {
    cg_coords gk = {.rank = 1, .c = {"k"}};
    ssm_cg_load_fn(c, &loads, "gain", "k", norm->args[1], &gk);
    load8(c, &loads, "load_g", "", "", "gain", K);
  }
  int direct = weight_direct(c, wv, K);
  /* a quantized weight: its products through dot_w8 (the template's QDOT) */
  int qdot = direct && ssm_dtype_is_quant(wv->type.dtype);
  if (qdot)
    ssm_sb_printf(&loads, "%s\n",
                  SNIPPET(c, "helpers", wv->type.dtype == SSM_Q4_0 ? "dot8_q4" : "dot8_q8", "B",
                          I64(ssm_cg_binding(c, wv)), "K", I64(K), "BLOCKS",
                          I64((K + SSM_QBLOCK - 1) / SSM_QBLOCK)));
  if (direct) {
    load8_weight(c, &loads, wv, K);
  } else {
    cg_coords wk = {.rank = 2, .c = {"n", "k"}};
    ssm_cg_load_fn(c, &loads, "in_w", "n k", wv, &wk);
    load8(c, &loads, "load_w", "uint n, ", "n, ", "in_w", K);
  }
  /* the cooperative-matrix variant (coop_few) reads a gain of ones
   * without a norm */
  int few = mt && coop_batch(c, M) && N >= KNOB_COOP_FEW_MIN_COLS;
  if ((norm && norm->nargs < 2) || (few && !norm))
    ssm_sb_printf(&loads, "%s\n", SNIPPET0(c, "helpers", "load8_ones"));
  /* one group of ROWS columns: the threads that will write them read their
   * epilogue's operands first (TOUCH), so that those loads (a decode conv's
   * state and weights, a residual) wait alongside the weights' rather than
   * after the sums. The COLS form, which keeps x in registers, gains
   * nothing from it and goes without. */
  int touch = ssm_cg_epilogue(c, &loads, KNOB_GEMV_TOUCH && !cols && !mt);
  /* at least K/8 threads (8 values of k each a step) */
  uint32_t local = ssm_cg_pow2_threads((K + 7) / 8 * 4, KNOB_ROW_THREADS_MIN, KNOB_ROW_THREADS_MAX);
  /* MT rows by LOCAL / MT slices of k, each ITERS steps of 8, MU at once */
  int64_t iters = (K + local * 8 - 1) / (local * 8), mu = 1;
  if (mt) {
    local = KNOB_ROW_THREADS_MAX;
    int64_t ks = local / mt;
    iters = (K + ks * 8 - 1) / (ks * 8);
    mu = iters < KNOB_GEMV_TILE_AHEAD ? iters : KNOB_GEMV_TILE_AHEAD;
    iters = (iters + mu - 1) / mu * mu;
  }
  ssm_cg_grid_per_item(cols ? (N + cols - 1) / cols : (N + rows - 1) / rows, out->groups);
  const char *buffers = ssm_cg_buffers_decl(c), *ld = ssm_cg_loads_text(c, &loads);
  const char *kv[] = {"LOCAL", U32(local), "M", I64(M), "K", I64(K), "N", I64(N), "ROWS",
                      I64(rows), "TOUCH", touch ? "1" : "0", "QDOT", qdot ? "1" : "0", "ITERS",
                      I64(iters), "MU", I64(mu), "NORM",
                      norm ? "1" : "0", "X16", x16 ? "1" : "0", "COLS", I64(cols), "MT", I64(mt),
                      "EPS",
                      norm ? ssm_arena_printf(c->a, "%.9g", ssm_node_float(norm, "eps", 0)) : "0",
                      "BUFFERS", buffers, "COMMON", ssm_cg_common(c), "LOADS", ld, NULL};
  SSM_TRY(ssm_cg_finish(c, "gemv",
                        ssm_arena_printf(c->a, "M=%lld K=%lld N=%lld ROWS=%lld COLS=%lld%s LOCAL=%u%s",
                                         (long long)M, (long long)K, (long long)N, (long long)rows,
                                         (long long)cols,
                                         mt ? ssm_arena_printf(c->a, " MT=%lld", (long long)mt) : "",
                                         local, direct ? " vec" : ""),
                        kv, out));
  if (!few) return NULL;
  return coop_few(c, M, K, N, norm, (int64_t)out->groups[0] * out->groups[1], buffers, ld, out);
}
