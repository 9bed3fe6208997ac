/*
 * scan.c — the scan family: the diagonal linear recurrence (scan.glsl.in),
 * with the group's matmul members computed before its time loop (PRE) and
 * the rows of its cached norms computed at the start of each pass (CHUNK).
 */
#include <string.h>

#include "codegen/internal.h"
#include "codegen/knobs.h"

/* The scan prologue's loop over the run's steps j: each state thread's
 * `value` into part[l], then the first thread of each row sums its row's N
 * parts in order of n into q and does `store`. */
static void pre_reduce(cg_ctx *c, ssm_sb *pre, const char *value, int64_t N, const char *store) {
  ssm_sb_printf(pre, "%s\n",
                SNIPPET(c, "scan", "pre_reduce", "VALUE", value, "N", I64(N), "STORE", store));
}

/* A prefill run's scan (scan_ch.glsl.in): G threads a row of N states,
 * G the fewest (a divisor of N) that give the run KNOB_SCAN_CH_THREADS
 * threads, so that a wide state keeps its states in registers and a narrow
 * one still fills the device; the steps' inputs read U at a time, U*NP of
 * each within KNOB_SCAN_CH_INPUTS registers. */
static ssm_status scan_channels(cg_ctx *c, int64_t T, int64_t S, int64_t N, int state,
                                ssm_sb *loads, const char *chunk, ssm_cg_kernel *out) {
  int64_t G = 1;
  while (G < N && (N % G || S * G < KNOB_SCAN_CH_THREADS)) G++;
  int64_t np = N / G, cpw = G >= KNOB_SCAN_THREADS ? 1 : KNOB_SCAN_THREADS / G, local = cpw * G;
  int64_t u = KNOB_SCAN_CH_INPUTS / np;
  if (u > KNOB_SCAN_UNROLL) u = KNOB_SCAN_UNROLL;
  if (u < 1) u = 1;
  /* passes of TC steps, a multiple of U: the cached norms' rows a pass */
  int64_t tc = KNOB_SCAN_CH_PASS < T ? KNOB_SCAN_CH_PASS : T;
  tc = (tc + u - 1) / u * u;
  if (c->nrmc) chunk = ssm_arena_printf(c->a, "%s%s", SNIPPET0(c, "scan_ch", "wait"), chunk);
  ssm_cg_grid_per_item((S + cpw - 1) / cpw, out->groups);
  const char *kv[40] = {"LOCAL", I64(local), "CPW", I64(cpw), "G", I64(G), "NP", I64(np),
                        "U", I64(u), "UNP", I64(u * np), "TC", I64(tc), "PART",
                        I64(2 * u * local), "S", I64(S), "N", I64(N), "STATE",
                        ssm_arena_printf(c->a, "b%d", state), "BUFFERS", ssm_cg_buffers_decl(c),
                        "COMMON", ssm_cg_common(c), "LOADS", ssm_cg_loads_text(c, loads),
                        "CHUNK", chunk, NULL};
  ssm_cg_run_count(c, T, kv, sizeof kv / sizeof *kv);
  return ssm_cg_finish_from(c, "scan", "scan_ch",
                            ssm_arena_printf(c->a, "T=%lld S=%lld N=%lld G=%lld U=%lld TC=%lld",
                                             (long long)T, (long long)S, (long long)N,
                                             (long long)G, (long long)u, (long long)tc),
                            kv, out);
}

ssm_status ssm_cg_gen_scan(cg_ctx *c, ssm_cg_kernel *out) {
  const ssm_node *sc = c->anchor;
  /* batched: the state's first dim is the steps' (scan.glsl.in, BATCH) */
  int batch = ssm_node_int(sc, "batch", 0) != 0;
  ssm_type h0 = sc->args[3]->type, *h = &h0;
  if (batch) { /* one step's state: [S.., N] */
    memmove(h0.dims, h0.dims + 1, sizeof h0.dims[0] * (size_t)(h0.rank - 1));
    h0.rank--;
  }
  int64_t T = sc->result->type.dims[0], N = h->dims[h->rank - 1];
  int64_t S = ssm_type_numel(h) / N;
  ssm_type full = *h; /* [T, S.., N] */
  full.rank = h->rank + 1;
  full.dims[0] = T;
  for (int d = 0; d < h->rank; d++) full.dims[d + 1] = h->dims[d];
  ssm_type srows = *h; /* the S dims */
  srows.rank = h->rank - 1;
  cg_coords sk = ssm_cg_delinearize("s", &srows, c->a);
  cg_coords k = {.rank = full.rank};
  k.c[0] = "t";
  for (int d = 0; d < srows.rank; d++) k.c[d + 1] = sk.c[d];
  k.c[full.rank - 1] = "n";
  if (N > KNOB_SCAN_MAX_N)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "scan: a state of %lld elements per row exceeds "
                          "the %d of one workgroup", (long long)N, KNOB_SCAN_MAX_N);
  /* one thread per state element, ROWS rows per workgroup; the TC time
   * steps' products c*h that one pass keeps take KNOB_SCAN_SHARED floats */
  int64_t rows = N >= KNOB_SCAN_THREADS ? 1 : KNOB_SCAN_THREADS / N, local = rows * N;
  c->scan_cache = T > 1 ? T : 0;
  c->scan_step = k.c[0];
  /* matmul members over [T, S] (decode's dt_proj) are computed once per
   * row and step before the time loop, each row's N threads splitting k */
  if (srows.rank == 1) {
    c->pre_t = T;
    c->pre_s = S;
    c->pre_rows = rows;
  }
  ssm_sb loads = {0};
  static const char *names[3] = {"in_a", "in_b", "in_c"};
  for (int i = 0; i < 3; i++) {
    cg_coords bk = ssm_cg_broadcast(&k, &sc->args[i]->type);
    ssm_cg_load_fn(c, &loads, names[i], "t s n", sc->args[i], &bk);
  }
  int state = ssm_cg_binding(c, sc->args[3]);
  ssm_cg_epilogue(c, &loads, 0);
  ssm_sb pre = {0};
  if (c->npre) ssm_sb_printf(&pre, "  g_row0 = row0;\n");
  for (int i = 0; i < c->npre; i++) {
    int id = c->pre_id[i];
    const char *at = ssm_arena_printf(c->a, "j * %lldu + l / %lldu", (long long)rows, (long long)N);
    const char *dot = ssm_arena_printf(c->a, "mmp%d(j, s, n, %lldu)", id, (long long)N);
    const ssm_node *norm = c->pre_norm[i];
    if (norm) { /* the row's rsqrt first (matmul_helper) */
      const ssm_type *xt = &norm->args[0]->type;
      int64_t K = xt->dims[xt->rank - 1];
      ssm_cg_spell(&c->helpers, lang(c)->shared_f32s, ssm_arena_printf(c->a, "prr%d", id),
                   I64(c->pre_t * rows));
      ssm_sb_printf(&c->helpers, "\n");
      if (K <= SSM_SMALL_ROW) {
        int rh = ssm_cg_rms_helper(c, norm, 0);
        ssm_sb_printf(&pre, "%s\n",
                      SNIPPET(c, "scan", "pre_rms", "ID", I64(id), "AT", at, "RH", I64(rh)));
      } else {
        const char *mean = ssm_arena_printf(c->a, "q / %s + %s", ssm_cg_float_lit(c, (double)K),
                                            ssm_cg_float_lit(c, ssm_node_float(norm, "eps", 0)));
        pre_reduce(c, &pre, ssm_arena_printf(c->a, "mmq%d(j, n, %lldu)", id, (long long)N), N,
                   ssm_arena_printf(c->a, "prr%d[%s] = %s", id, at,
                                    ssm_cg_spelled(c->a, lang(c)->rsqrt, mean)));
      }
      dot = ssm_arena_printf(c->a, "mmp%d(j, s, n, %lldu, prr%d[%s])", id, (long long)N, id, at);
    }
    pre_reduce(c, &pre, dot, N, ssm_arena_printf(c->a, "pre%d[%s] = q", id, at));
  }
  /* a time step keeps LOCAL products and a row rsqrt of each cached norm;
   * at the start of each pass of TC steps the cached norms' rows are
   * computed, one a thread (rms<id>, the sums the uncached form does) */
  int64_t tc = KNOB_SCAN_SHARED / (local + c->nrmc);
  if (tc > T) tc = T;
  /* every cached norm's rows in one loop, a row a thread (rather than one
   * norm after the other): a thread waits for one row's loads */
  const char *chunk = "";
  if (c->nrmc) {
    ssm_sb cases = {0};
    for (int i = 0; i < c->nrmc; i++)
      ssm_sb_printf(&cases, "%s\n",
                    SNIPPET(c, "scan", "chunk_norm", "ELSE", i ? "else " : "", "Q", I64(i), "H",
                            I64(c->rmc_id[i])));
    chunk = ssm_arena_printf(c->a, "%s\n",
                             SNIPPET(c, "scan", "chunk", "NORMS", I64(c->nrmc), "LOCAL", I64(local),
                                     "CASES", ssm_sb_str(&cases)));
    ssm_sb_free(&cases);
  }
  if (!batch && T > 1 && !c->npre)
    return scan_channels(c, T, S, N, state, &loads, chunk, out);
  ssm_cg_grid_per_item((S + rows - 1) / rows, out->groups);
  /* steps whose inputs a thread reads at once (scan.glsl.in) */
  int64_t unroll = tc < KNOB_SCAN_UNROLL ? tc : KNOB_SCAN_UNROLL;
  const char *kv[40] = {"LOCAL", I64(local), "ROWS", I64(rows), "TC", I64(tc), "UNROLL",
                        I64(unroll), "PART",
                        I64(tc * local), "S",
                        I64(S), "N", I64(N), "STATE", ssm_arena_printf(c->a, "b%d", state),
                        "BUFFERS", ssm_cg_buffers_decl(c), "COMMON", ssm_cg_common(c), "LOADS",
                        ssm_cg_loads_text(c, &loads), "PRE", ssm_cg_take(&pre, c->a),
                        "CHUNK", chunk, "BATCH", batch ? "1" : "0", NULL};
  ssm_cg_run_count(c, T, kv, sizeof kv / sizeof *kv);
  return ssm_cg_finish(c, "scan",
                       ssm_arena_printf(c->a, "T=%lld S=%lld N=%lld ROWS=%lld TC=%lld%s",
                                        (long long)T, (long long)S, (long long)N,
                                        (long long)rows, (long long)tc, batch ? " batch" : ""),
                       kv, out);
}
