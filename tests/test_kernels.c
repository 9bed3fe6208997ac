/*
 * test_kernels.c — every kernel family against the CPU interpreter, in the
 * manner of ggml's test-backend-ops. Each case is one IR node under test in a
 * graph of its own: operands are weights "w0", "w1", ... holding random data
 * (a small safetensors file written to the temp dir), token ids come from
 * the input "tokens", the state operands of conv1d_causal, scan and
 * attention are the states "s0", "s1", attention's position is the input
 * "pos", and a rank-0 operand may be a const. The CPU interpreter runs
 * the graph; the GPU runs the node's generated kernel (ssm_cg_kernel_for_node,
 * compiled to SPIR-V) as a one-dispatch program over one device buffer per
 * binding. Stateful ops run twice or more (the state carries over; "pos"
 * advances by the token count on both sides) and the final states are
 * compared too. Shapes are deliberately not round (67, 1000,
 * 1537) so that tails, grid clamps and partial workgroups are exercised.
 *
 * The error of a case is max|gpu - cpu| / max(max|cpu|, 1e-30) over the
 * result of every run and the final state; each case states its tolerance
 * (the TOL_* table of kernel_case.h) and the measured error is printed. A kernel the
 * device cannot run (workgroup size or grid beyond its limits) is listed as
 * SKIP with the reason. The validation layer is on when installed and must
 * stay silent.
 */
#include <dlfcn.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "tokenizer/tokenizer.h"
#include "kernel_case.h"


/* ---- cases ------------------------------------------------------------------ */

static void test_create(void) {
  SSM_ASSERT_OK(ssm_vk_open(-1, 1, &g_vk));
  CU_ASSERT_PTR_NOT_NULL_FATAL(g_vk);
  /* Keep the layer mapped after the loader's dlclose so LeakSanitizer can
   * name it in the suppressions (tests/lsan.supp). */
  dlopen("libVkLayer_khronos_validation.so", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  const ssm_vk_device_info *info = ssm_vk_info(g_vk);
  printf("\n    device: %s (%s), validation %s", info->name, info->driver,
         ssm_vk_validation_enabled(g_vk) ? "on" : "not installed");
}

static void unary(ssm_op op, const char *label, float lo, float hi, double tol) {
  kcase kc;
  kc_begin(&kc, label);
  ssm_value *x = kc_weight(&kc, F32(67, 13), lo, hi);
  kc_check(&kc, kc_op(&kc, op, 1, x, NULL, NULL, NULL), tol);
}

static void test_unary(void) {
  NEED_VK();
  unary(SSM_OP_NEG, "neg [67,13]", -1, 1, TOL_EXACT);
  unary(SSM_OP_EXP, "exp [67,13]", -1, 1, TOL_TRANS);
  unary(SSM_OP_LOG, "log [67,13] x in [0.05,2]", 0.05f, 2, TOL_TRANS);
  unary(SSM_OP_SOFTPLUS, "softplus [67,13]", -1, 1, TOL_TRANS);
  unary(SSM_OP_SOFTPLUS, "softplus [67,13] x in [-30,30]", -30, 30, TOL_TRANS);
  unary(SSM_OP_SILU, "silu [67,13]", -1, 1, TOL_TRANS);
  unary(SSM_OP_SIGMOID, "sigmoid [67,13]", -1, 1, TOL_TRANS);
  unary(SSM_OP_RELU, "relu [67,13]", -1, 1, TOL_EXACT);
  unary(SSM_OP_SQRT, "sqrt [67,13] x in [0.05,2]", 0.05f, 2, TOL_TRANS);
  unary(SSM_OP_RSQRT, "rsqrt [67,13] x in [0.05,2]", 0.05f, 2, TOL_TRANS);
  unary(SSM_OP_SQUARE, "square [67,13]", -1, 1, TOL_ARITH);
  unary(SSM_OP_TANH, "tanh [67,13]", -1, 1, TOL_TRANS);
  unary(SSM_OP_TANH, "tanh [67,13] x in [-30,30]", -30, 30, TOL_TRANS);
  unary(SSM_OP_GELU, "gelu [67,13] x in [-6,6]", -6, 6, TOL_TRANS);
  unary(SSM_OP_GELU_TANH, "gelu_tanh [67,13] x in [-6,6]", -6, 6, TOL_TRANS);
  unary(SSM_OP_GELU_TANH, "gelu_tanh [67,13] x in [-60,60]", -60, 60, TOL_TRANS);
  end_list();
}

/* op(a, b) with a and b weights of the given shapes (NULL: a const). */
static void binary(ssm_op op, const char *label, ssm_type *ta, ssm_type *tb, double tol) {
  kcase kc;
  kc_begin(&kc, label);
  ssm_value *a = ta ? kc_weight(&kc, *ta, -1, 1) : kc_const(&kc, 0.75);
  ssm_value *b = tb ? kc_weight(&kc, *tb, op == SSM_OP_DIV ? 0.5f : -1, 1)
                    : kc_const(&kc, -1.25);
  kc_check(&kc, kc_op(&kc, op, 2, a, b, NULL, NULL), tol);
}

static void test_binary(void) {
  NEED_VK();
  ssm_type r1000 = F32(1000, 13), v13 = F32(13), a67 = F32(67, 1, 13), b1000 = F32(1, 1000, 13);
  ssm_type m67 = F32(67, 13), c67 = F32(67, 1);
  binary(SSM_OP_ADD, "add [1000,13] + [13]", &r1000, &v13, TOL_ARITH);
  binary(SSM_OP_SUB, "sub [13] - [1000,13]", &v13, &r1000, TOL_ARITH);
  binary(SSM_OP_MUL, "mul [67,1,13] * [1,1000,13]", &a67, &b1000, TOL_ARITH);
  binary(SSM_OP_DIV, "div [67,13] / [67,1]", &m67, &c67, TOL_ARITH);
  binary(SSM_OP_ADD, "add [67,13] + [67,13]", &m67, &m67, TOL_ARITH);
  binary(SSM_OP_MUL, "mul [67,13] * const", &m67, NULL, TOL_ARITH);
  binary(SSM_OP_SUB, "sub const - [67,13]", NULL, &m67, TOL_ARITH);
  binary(SSM_OP_DIV, "div const / [1000,13] (x in [0.5,1])", NULL, &r1000, TOL_ARITH);
  binary(SSM_OP_MINIMUM, "minimum [67,13], [67,1]", &m67, &c67, TOL_EXACT);
  binary(SSM_OP_MAXIMUM, "maximum [67,13], const", &m67, NULL, TOL_EXACT);
  end_list();
}

/* x [.., K] times W [N, K] transposed, W held in `wdt` (the interpreter
 * reads the f32 data rounded or quantized to it; the device gets the
 * 16-bit values or the quantized bytes). */
static void matmul_dt(const char *label, ssm_type tx, int64_t N, int64_t K, ssm_dtype wdt) {
  kcase kc;
  kc_begin(&kc, label);
  ssm_value *x = kc_weight(&kc, tx, -1, 1);
  ssm_value *w = kc_weight(&kc, F32(N, K), -1, 1);
  w->type.dtype = wdt;
  kc_check(&kc, kc_op(&kc, SSM_OP_MATMUL, 2, x, w, NULL, NULL), TOL_ACCUM);
}

static void matmul(const char *label, ssm_type tx, int64_t N, int64_t K) {
  matmul_dt(label, tx, N, K, SSM_F32);
}

/* rmsnorm(x) * gain, then the matmul: the rmsnorm joins the matmul's
 * kernel as its prologue. */
static void norm_matmul(const char *label, ssm_type tx, int64_t N, int64_t K, ssm_dtype wdt) {
  kcase kc;
  kc_begin(&kc, label);
  ssm_value *x = kc_weight(&kc, tx, -1, 1);
  ssm_value *g = kc_weight(&kc, F32(K), 0.5, 1.5);
  ssm_value *w = kc_weight(&kc, F32(N, K), -1, 1);
  w->type.dtype = wdt;
  ssm_node *norm = kc_op(&kc, SSM_OP_RMSNORM, 2, x, g, NULL, NULL);
  ssm_node_set_float(kc.g, norm, "eps", 1e-5);
  SSM_ASSERT_OK(ssm_op_infer(norm, &norm->result->type));
  kc.norm = norm;
  kc_check(&kc, kc_op(&kc, SSM_OP_MATMUL, 2, norm->result, w, NULL, NULL), TOL_ACCUM);
}

static void test_matmul(void) {
  NEED_VK();
  matmul("matmul M=1 K=1537 N=67", F32(1, 1537), 67, 1537);
  matmul("matmul M=3 K=1000 N=1537", F32(3, 1000), 1537, 1000);
  matmul("matmul M=5 K=4 N=67", F32(5, 4), 67, 4);
  matmul("matmul M=1 K=64 N=2051 (gemv, 4 columns a group, last group short)", F32(1, 64), 2051,
         64);
  matmul("matmul M=4 K=24 N=515 (gemv, 2 columns a group)", F32(4, 24), 515, 24);
  /* 8192 columns and more: gemv's COLS columns a workgroup, x in registers */
  matmul("matmul M=2 K=2056 N=8197 (gemv, 8 columns a workgroup, last one short, "
         "threads past K)", F32(2, 2056), 8197, 2056);
  matmul_dt("matmul M=1 K=1032 N=16389 bf16 (gemv, 8 columns a workgroup)", F32(1, 1032),
            16389, 1032, SSM_BF16);
  /* (the largest such weight lavapipe's 128 MiB storage range holds) */
  matmul_dt("matmul M=1 K=4096 N=8192 bf16 (gemv, 32 columns a workgroup 8 at a time)",
            F32(1, 4096), 8192, 4096, SSM_BF16);
  matmul("matmul M=2 K=8200 N=2053 (gemv, 8 columns a group, last group short)", F32(2, 8200),
         2053, 8200);
  matmul("matmul M=1 K=1024 N=10243 (gemv, 8 columns a workgroup)", F32(1, 1024), 10243, 1024);
  norm_matmul("rmsnorm + matmul M=1 K=1040 N=9000 f16 (gemv's norm prologue, 8 columns)",
              F32(1, 1040), 9000, 1040, SSM_F16);
  norm_matmul("rmsnorm + matmul M=1 K=100 N=16411 (an lm_head of a short k: 8 columns a "
              "workgroup, threads past K, last one short)", F32(1, 100), 16411, 100, SSM_F32);
  norm_matmul("rmsnorm + matmul M=3 K=64 N=2051 (gemv's norm prologue, 4 columns)", F32(3, 64),
              2051, 64, SSM_F32);
  /* quantized weights: gemv's dot_w8 in both forms, with and without the
   * norm prologue, whole and partial blocks */
  matmul_dt("matmul M=1 K=4096 N=8192 q4_0 (gemv, 32 columns a workgroup 8 at a time)",
            F32(1, 4096), 8192, 4096, SSM_Q4_0);
  matmul_dt("matmul M=2 K=2080 N=8197 q8_0 (gemv, 8 columns a workgroup, threads past K)",
            F32(2, 2080), 8197, 2080, SSM_Q8_0);
  matmul_dt("matmul M=2 K=8224 N=2053 q4_0 (gemv, 8 columns a group)",
            F32(2, 8224), 2053, 8224, SSM_Q4_0);
  matmul_dt("matmul M=1 K=1032 N=515 q4_0 (gemv, a partial last block)",
            F32(1, 1032), 515, 1032, SSM_Q4_0);
  norm_matmul("rmsnorm + matmul M=1 K=1056 N=9000 q4_0 (norm prologue, 8 columns)",
              F32(1, 1056), 9000, 1056, SSM_Q4_0);
  norm_matmul("rmsnorm + matmul M=3 K=64 N=2051 q8_0 (norm prologue, 4 columns)",
              F32(3, 64), 2051, 64, SSM_Q8_0);
  matmul("matmul M=13 K=67 N=5 (two row tiles)", F32(13, 67), 5, 67);
  matmul("matmul x [2,3,67] W [13,67]", F32(2, 3, 67), 13, 67);
  /* more than 8 rows: the tiled gemm, its blocks cut by every edge */
  matmul("gemm M=33 K=131 N=97 (blocks of 64 rows)", F32(33, 131), 97, 131);
  matmul_dt("gemm M=33 K=131 N=97 bf16 weights", F32(33, 131), 97, 131, SSM_BF16);
  matmul_dt("gemm M=33 K=131 N=97 f16 weights", F32(33, 131), 97, 131, SSM_F16);
  matmul("gemm M=9 K=16 N=64 (one block of 32 rows)", F32(9, 16), 64, 16);
  matmul("gemm M=130 K=1000 N=129 (3x3 blocks)", F32(130, 1000), 129, 1000);
  matmul("gemm x [3,11,67] W [65,67]", F32(3, 11, 67), 65, 67);
  /* GLSL: fewer than 512 blocks of 32 x 32 and k of 96 or more, split-K
   * in 3 to 7 groups, each of two slices of 16 at least (gen_gemm): 7
   * groups for 125 slices (6 of 18, 1 of 17), 3 for 7 (3, 2, 2), 5 for 11
   * (3, 2, 2, 2, 2), 7 for 65 */
  matmul_dt("gemm M=40 K=2000 N=70 bf16 (split-K in 7 groups, slices uneven)", F32(40, 2000),
            70, 2000, SSM_BF16);
  matmul("gemm M=300 K=112 N=33 (split-K in 3 groups, one a slice long)", F32(300, 112), 33,
         112);
  matmul("gemm M=64 K=176 N=40 (split-K in 5 groups)", F32(64, 176), 40, 176);
  matmul("gemm M=512 K=1040 N=96 (split-K, 16 x 3 blocks)", F32(512, 1040), 96, 1040);
  end_list();
}

static void rowop(ssm_op op, const char *label, ssm_type tx, int with_weight, double tol) {
  kcase kc;
  kc_begin(&kc, label);
  ssm_value *x = kc_weight(&kc, tx, -1, 1);
  ssm_value *w = with_weight ? kc_weight(&kc, F32(tx.dims[tx.rank - 1]), -1, 1) : NULL;
  ssm_node *n = kc_op(&kc, op, with_weight ? 2 : 1, x, w, NULL, NULL);
  if (op == SSM_OP_RMSNORM) ssm_node_set_float(kc.g, n, "eps", 1e-5);
  kc_check(&kc, n, tol);
}

static void test_rowreduce(void) {
  NEED_VK();
  rowop(SSM_OP_RMSNORM, "rmsnorm rows=3 C=1537 with weight", F32(3, 1537), 1, TOL_ACCUM);
  rowop(SSM_OP_RMSNORM, "rmsnorm rows=1 C=67", F32(1, 67), 0, TOL_ACCUM);
  rowop(SSM_OP_RMSNORM, "rmsnorm rows=2 C=5 (threads without work)", F32(2, 5), 1, TOL_ACCUM);
  rowop(SSM_OP_SOFTMAX, "softmax rows=3 C=1000", F32(3, 1000), 0, TOL_ACCUM);
  rowop(SSM_OP_SOFTMAX, "softmax [2,3,67]", F32(2, 3, 67), 0, TOL_ACCUM);
  rowop(SSM_OP_SOFTMAX, "softmax rows=3 C=5 (threads without work)", F32(3, 5), 0, TOL_ACCUM);
  end_list();
}

static void test_argmax(void) {
  NEED_VK();
  kcase kc;
  kc_begin(&kc, "argmax rows=3 C=1537, ties, max at the end");
  ssm_value *x = kc_weight(&kc, F32(3, 1537), -1, 1);
  float *d = kc.wdata[0];
  /* row 1: ties in different threads and in one thread; the first wins */
  d[1537 + 1300] = d[1537 + 356] = d[1537 + 100] = d[1537 + 900] = 2.0f;
  d[2 * 1537 + 1536] = 3.0f; /* row 2: the only max is the last element */
  kc_check(&kc, kc_op(&kc, SSM_OP_ARGMAX, 1, x, NULL, NULL, NULL), TOL_EXACT);

  kc_begin(&kc, "argmax rows=4 C=67, all-equal and -inf rows");
  x = kc_weight(&kc, F32(4, 67), -1, 1);
  d = kc.wdata[0];
  for (int i = 0; i < 67; i++) {
    d[i] = 0.5f;           /* row 0: all equal: index 0 */
    d[67 + i] = -INFINITY; /* row 1: all -inf: index 0, as the op says (first on ties) */
  }
  d[2 * 67 + 66] = 2.0f; /* row 2: last */
  kc_check(&kc, kc_op(&kc, SSM_OP_ARGMAX, 1, x, NULL, NULL, NULL), TOL_EXACT);
  end_list();
}

static void test_reduce(void) {
  NEED_VK();
  static const char *kinds[] = {"sum", "mean", "max"};
  char label[3][3][48];
  for (int k = 0; k < 3; k++)
    for (int axis = 0; axis < 3; axis++) {
      snprintf(label[k][axis], sizeof label[k][axis], "reduce %s axis=%d [3,67,5]", kinds[k],
               axis);
      kcase kc;
      kc_begin(&kc, label[k][axis]);
      ssm_value *x = kc_weight(&kc, F32(3, 67, 5), -1, 1);
      ssm_node *n = kc_op(&kc, SSM_OP_REDUCE, 1, x, NULL, NULL, NULL);
      ssm_node_set_str(kc.g, n, "kind", kinds[k]);
      ssm_node_set_int(kc.g, n, "axis", axis);
      kc_check(&kc, n, k == 2 ? TOL_EXACT : TOL_ACCUM);
    }
  end_list();
}

static void slice(const char *label, int axis, int start, int len) {
  kcase kc;
  kc_begin(&kc, label);
  ssm_value *x = kc_weight(&kc, F32(5, 1537), -1, 1);
  ssm_node *n = kc_op(&kc, SSM_OP_SLICE, 1, x, NULL, NULL, NULL);
  ssm_node_set_int(kc.g, n, "axis", axis);
  ssm_node_set_int(kc.g, n, "start", start);
  ssm_node_set_int(kc.g, n, "len", len);
  kc_check(&kc, n, TOL_EXACT);
}

static void test_copy(void) {
  NEED_VK();
  slice("slice [5,1537] axis=1 start=100 len=67", 1, 100, 67);
  slice("slice [5,1537] axis=1 start=1470 len=67 (to end)", 1, 1470, 67);
  slice("slice [5,1537] axis=0 start=1 len=3", 0, 1, 3);

  kcase kc;
  kc_begin(&kc, "concat [5,67],[5,13],[5,1] axis=1");
  ssm_value *a = kc_weight(&kc, F32(5, 67), -1, 1), *b = kc_weight(&kc, F32(5, 13), -1, 1);
  ssm_value *c = kc_weight(&kc, F32(5, 1), -1, 1);
  ssm_node *n = kc_op(&kc, SSM_OP_CONCAT, 3, a, b, c, NULL);
  ssm_node_set_int(kc.g, n, "axis", 1);
  kc_check(&kc, n, TOL_EXACT);

  kc_begin(&kc, "concat [2,67],[3,67] axis=0");
  a = kc_weight(&kc, F32(2, 67), -1, 1);
  b = kc_weight(&kc, F32(3, 67), -1, 1);
  n = kc_op(&kc, SSM_OP_CONCAT, 2, a, b, NULL, NULL);
  ssm_node_set_int(kc.g, n, "axis", 0);
  kc_check(&kc, n, TOL_EXACT);

  kc_begin(&kc, "transpose [3,67,5] perm=[2,0,1]");
  a = kc_weight(&kc, F32(3, 67, 5), -1, 1);
  n = kc_op(&kc, SSM_OP_TRANSPOSE, 1, a, NULL, NULL, NULL);
  ssm_node_set_ints(kc.g, n, "perm", 3, (int64_t[]){2, 0, 1});
  kc_check(&kc, n, TOL_EXACT);

  kc_begin(&kc, "transpose [67,5] perm=[1,0]");
  a = kc_weight(&kc, F32(67, 5), -1, 1);
  n = kc_op(&kc, SSM_OP_TRANSPOSE, 1, a, NULL, NULL, NULL);
  ssm_node_set_ints(kc.g, n, "perm", 2, (int64_t[]){1, 0});
  kc_check(&kc, n, TOL_EXACT);
  end_list();
}

static void test_embed(void) {
  NEED_VK();
  kcase kc;
  kc_begin(&kc, "embed V=1000 H=67 T=5 ids 0,999,..");
  ssm_value *table = kc_weight(&kc, F32(1000, 67), -1, 1);
  ssm_value *ids = kc_tokens(&kc, 5, (int32_t[]){0, 999, 417, 0, 998});
  kc_check(&kc, kc_op(&kc, SSM_OP_EMBED, 2, table, ids, NULL, NULL), TOL_EXACT);
  end_list();
}

static void conv1d(const char *label, int64_t T, int64_t C, int64_t K, int with_bias) {
  kcase kc;
  kc_begin(&kc, label);
  ssm_value *x = kc_weight(&kc, F32(T, C), -1, 1);
  ssm_value *s = kc_state(&kc, F32(K - 1, C));
  ssm_value *w = kc_weight(&kc, F32(C, K), -1, 1);
  ssm_value *b = with_bias ? kc_weight(&kc, F32(C), -1, 1) : NULL;
  kc_check(&kc, kc_op(&kc, SSM_OP_CONV1D, with_bias ? 4 : 3, x, s, w, b), TOL_ACCUM);
}

static void test_conv1d(void) {
  NEED_VK();
  conv1d("conv1d T=5 C=1537 K=4 bias, 2 runs + state", 5, 1537, 4, 1);
  conv1d("conv1d T=1 C=67 K=2, 2 runs + state", 1, 67, 2, 0);
  conv1d("conv1d T=2 C=67 K=4 (T < K-1), 2 runs + state", 2, 67, 4, 1);
  /* several blocks of time steps (KNOB_CONV1D_STEPS, 16: codegen/knobs.h), the
   * last one short: windows that start inside x, the state by block 0 */
  conv1d("conv1d T=37 C=67 K=4 bias, 3 time blocks, 2 runs + state", 37, 67, 4, 1);
  conv1d("conv1d T=32 C=5 K=7, 2 time blocks, 2 runs + state", 32, 5, 7, 0);
  end_list();
}

/* scan with a in (0,1) of shape ta, b of tb, c of tc, state of ts. */
static void scan(const char *label, ssm_type ta, ssm_type tb, ssm_type tc, ssm_type ts) {
  kcase kc;
  kc_begin(&kc, label);
  ssm_value *a = kc_weight(&kc, ta, 0.001f, 0.999f);
  ssm_value *b = kc_weight(&kc, tb, -1, 1);
  ssm_value *c = kc_weight(&kc, tc, -1, 1);
  ssm_value *h = kc_state(&kc, ts);
  kc_check(&kc, kc_op(&kc, SSM_OP_SCAN, 4, a, b, c, h), TOL_ACCUM);
}

static void test_scan(void) {
  NEED_VK();
  scan("scan mamba1 a,b [3,67,16] c [3,1,16], 2 runs", F32(3, 67, 16), F32(3, 67, 16),
       F32(3, 1, 16), F32(67, 16));
  scan("scan mamba2 a [4,5,1,1] b [4,5,13,16] c [4,1,1,16]", F32(4, 5, 1, 1),
       F32(4, 5, 13, 16), F32(4, 1, 1, 16), F32(5, 13, 16));
  /* Mamba-2 with n_groups: state [groups, heads/group, head_dim, N]; B and C
   * per group, broadcast over the group's heads */
  scan("scan mamba2 groups a [4,3,2,1,1] b [4,3,2,13,16] c [4,3,1,1,16]", F32(4, 3, 2, 1, 1),
       F32(4, 3, 2, 13, 16), F32(4, 3, 1, 1, 16), F32(3, 2, 13, 16));
  scan("scan T=1 a,b [1,67,16] c [1,1,16], 2 runs", F32(1, 67, 16), F32(1, 67, 16),
       F32(1, 1, 16), F32(67, 16));
  scan("scan a [67,16] b [3,1,16] c [16] (stretched T)", F32(67, 16), F32(3, 1, 16), F32(16),
       F32(67, 16));
  /* a workgroup of 10 rows of 12 threads: T = 75 is a pass of 64 steps and
   * one of 11 (a group of 8, then 3 alone), and 67 rows leave the last
   * workgroup 7 */
  scan("scan N=12 a,b [75,67,12] c [75,1,12] (passes of 64 steps)", F32(75, 67, 12),
       F32(75, 67, 12), F32(75, 1, 12), F32(67, 12));
  /* a prefill scan of many rows walks each with fewer threads than its N
   * states (codegen/scan.c, scan_ch: KNOB_SCAN_CH_THREADS): 8 threads of 2
   * states (16 rows a workgroup, the last one 3), 4 of 4, and 6 of 2 (21
   * rows of 126 threads); T = 21 is two groups of 8 steps and 5 alone */
  scan("scan wide a,b [21,4099,16] c [21,1,16] (8 threads a row), 2 runs", F32(21, 4099, 16),
       F32(21, 4099, 16), F32(21, 1, 16), F32(4099, 16));
  scan("scan wide a,b [13,8195,16] c [13,1,16] (4 threads a row), 2 runs", F32(13, 8195, 16),
       F32(13, 8195, 16), F32(13, 1, 16), F32(8195, 16));
  scan("scan wide a,b [21,6000,12] c [21,1,12] (6 threads a row), 2 runs", F32(21, 6000, 12),
       F32(21, 6000, 12), F32(21, 1, 12), F32(6000, 12));
  /* a row of 200 fills a workgroup, a thread a state */
  scan("scan N=200 a,b [45,3,200] c [45,1,200]", F32(45, 3, 200), F32(45, 3, 200),
       F32(45, 1, 200), F32(3, 200));
  end_list();
}

/* The node of `op` on a..d (NULL past nargs), its result type inferred. */
static ssm_node *kc_node(kcase *kc, ssm_op op, int nargs, ssm_value *a, ssm_value *b,
                         ssm_value *c, ssm_value *d) {
  ssm_node *n = kc_op(kc, op, nargs, a, b, c, d);
  SSM_ASSERT_OK(ssm_op_infer(n, &n->result->type));
  return n;
}

/* A reshape of v to `t`. */
static ssm_value *kc_reshape(kcase *kc, ssm_value *v, ssm_type t) {
  return ssm_graph_append(kc->g, SSM_OP_RESHAPE, &t, 1, &v)->result;
}

/* Marks n a member of the case's group 0 (fuse's mark). */
static ssm_value *member(kcase *kc, ssm_node *n) {
  ssm_node_set_int(kc->g, n, "group", 0);
  return n->result;
}

/* Mamba-2's scan group over T tokens as fuse makes it (models/mamba2.yaml):
 * dt = softplus(w0 [T, H]), a = exp(dt * A) with A = w1 [H] (negative), b =
 * dt * B * x with B = w2 [T, G*N] and x = w3 [T, H*P], c = C = w4 [T, G*N],
 * the scan of state [G, H/G, P, N] and the D skip y + x * D, D = w5 [H];
 * dims = {G, H/G, P, N}. The weights of a case of T tokens; the group's root is returned, its first
 * member and anchor set in kc. */
static ssm_node *mamba2_scan(kcase *kc, int64_t T, const int64_t *dims) {
  int64_t G = dims[0], HPG = dims[1], P = dims[2], N = dims[3], H = G * HPG;
  int32_t zeros[512] = {0};
  kc_tokens(kc, (int)T, zeros); /* the program's tokens per run (ssm_cg_reads_count) */
  ssm_value *dtr = kc_weight(kc, F32(T, H), -6, 0), *A = kc_weight(kc, F32(H), -4, -0.2f);
  ssm_value *B = kc_weight(kc, F32(T, G * N), -1, 1), *x = kc_weight(kc, F32(T, H * P), -1, 1);
  ssm_value *C = kc_weight(kc, F32(T, G * N), -1, 1), *D = kc_weight(kc, F32(H), -1, 1);
  ssm_node *sp = kc_node(kc, SSM_OP_SOFTPLUS, 1, dtr, NULL, NULL, NULL);
  kc->first = sp;
  ssm_value *dt5 = kc_reshape(kc, member(kc, sp), F32(T, G, HPG, 1, 1));
  ssm_value *A4 = kc_reshape(kc, A, F32(G, HPG, 1, 1));
  ssm_value *z = member(kc, kc_node(kc, SSM_OP_MUL, 2, dt5, A4, NULL, NULL));
  ssm_value *a = member(kc, kc_node(kc, SSM_OP_EXP, 1, z, NULL, NULL, NULL));
  ssm_value *dB = member(kc, kc_node(kc, SSM_OP_MUL, 2, dt5, kc_reshape(kc, B, F32(T, G, 1, 1, N)),
                                     NULL, NULL));
  ssm_value *b = member(kc, kc_node(kc, SSM_OP_MUL, 2, dB, kc_reshape(kc, x, F32(T, G, HPG, P, 1)),
                                    NULL, NULL));
  ssm_value *c = kc_reshape(kc, C, F32(T, G, 1, 1, N));
  ssm_value *h = kc_state(kc, F32(G, HPG, P, N));
  kc->anchor = kc_node(kc, SSM_OP_SCAN, 4, a, b, c, h);
  ssm_value *y = member(kc, kc->anchor);
  ssm_value *xd = member(kc, kc_node(kc, SSM_OP_MUL, 2, kc_reshape(kc, x, F32(T, G, HPG, P)),
                                     kc_reshape(kc, D, F32(G, HPG, 1)), NULL, NULL));
  ssm_node *root = kc_node(kc, SSM_OP_ADD, 2, y, xd, NULL, NULL);
  member(kc, root);
  return root;
}

/* A group built by `build` (of T tokens, sizes `dims`) as a T-token program
 * run twice with `count` tokens (state carried) on the GPU, which must take
 * the kernel `family`, against the interpreter running a count-token graph
 * of the same weights' first rows. Compares each run's rows, and the state
 * after each run's last token; the rows past a run's count must stay
 * unwritten (NaN). */
static void chunked(const char *label, int64_t T, int count, const char *family,
                    ssm_node *(*build)(kcase *, int64_t, const int64_t *), const int64_t *dims) {
  kcase gk, ck;
  kc_begin(&gk, label);
  ssm_node *gn = build(&gk, T, dims);
  gk.count = count < T ? count : 0;
  gk.family = family;
  kc_begin(&ck, label);
  ssm_node *cn = build(&ck, count, dims);
  for (int i = 0; i < ck.nw; i++) /* the first `count` rows of each weight */
    memcpy(ck.wdata[i], gk.wdata[i], (size_t)ssm_type_numel(&ck.wval[i]->type) * sizeof(float));
  ssm_graph_append(gk.g, SSM_OP_OUTPUT, NULL, 1, &gn->result);
  ssm_graph_append(ck.g, SSM_OP_OUTPUT, NULL, 1, &cn->result);
  SSM_ASSERT_OK(ssm_graph_verify(gk.g));
  SSM_ASSERT_OK(ssm_graph_verify(ck.g));
  ssm_st *gst = kc_write_weights(&gk, g_cases), *cst = kc_write_weights(&ck, g_cases + 1000);
  int runs = 2;
  size_t row = (size_t)(ssm_type_numel(&gn->result->type) / T), scount = kc_states_count(gk.anchor);
  size_t all = (size_t)T * row, part = (size_t)count * row;
  float *cpu = calloc(runs * part + scount, sizeof(float));
  float *gpu = calloc(runs * all + scount, sizeof(float));
  float *got = calloc(runs * part + scount, sizeof(float));
  char skip[256] = "";
  g_cases++;
  ssm_status cs = cst ? kc_cpu_side(&ck, cst, cn, runs, cpu, cpu + runs * part) : NULL;
  ssm_status gs = gst && !cs ? kc_gpu_side(&gk, gn, runs, gpu, gpu + runs * all, skip, sizeof skip)
                             : NULL;
  if (cs) fprintf(stderr, "\n  %s: cpu: %s\n", label, ssm_status_message(cs));
  if (gs) fprintf(stderr, "\n  %s: gpu: %s\n", label, ssm_status_message(gs));
  CU_ASSERT_PTR_NULL(cs);
  CU_ASSERT_PTR_NULL(gs);
  if (skip[0]) {
    g_skips++;
    printf("\n    SKIP %-46s %s", label, skip);
  } else if (gst && cst && !cs && !gs) {
    int unwritten = 1;
    for (int r = 0; r < runs; r++) {
      memcpy(got + r * part, gpu + r * all, part * sizeof(float));
      for (size_t i = part; i < all; i++) unwritten &= isnan(gpu[r * all + i]);
    }
    memcpy(got + runs * part, gpu + runs * all, scount * sizeof(float));
    CU_ASSERT(unwritten);
    size_t at;
    double err = kc_compare(got, cpu, runs * part + scount, &at);
    kc_verdict(label, err, TOL_ACCUM, unwritten, got, cpu, at);
  }
  fflush(stdout);
  ssm_status_free(cs);
  ssm_status_free(gs);
  free(cpu);
  free(gpu);
  free(got);
  ssm_st_close(gst);
  ssm_st_close(cst);
  for (int i = 0; i < gk.nw; i++) free(gk.wdata[i]);
  for (int i = 0; i < ck.nw; i++) free(ck.wdata[i]);
  ssm_graph_destroy(gk.g);
  ssm_graph_destroy(ck.g);
}

/* The chunked scan (codegen/ssd.c; in GLSL chunks of up to 64 tokens,
 * slices of up to 64 channels, 32 state columns a tile: knobs.h) over
 * several chunks, the last one short, with the state carried from chunk to
 * chunk and run to run: slices of P that do not divide it, N of one tile,
 * of several, and of a partial last tile, runs shorter than the program's T. */
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define ssd(label, T, count, dims) chunked(label, T, count, "ssd", mamba2_scan, dims)
static void test_ssd(void) {
  NEED_VK();
  ssd("ssd T=300 run 250 G=2 H/G=3 P=64 N=128", 300, 250, DIMS(2, 3, 64, 128));
  ssd("ssd T=300 G=2 H/G=2 P=24 N=16", 300, 300, DIMS(2, 2, 24, 16));
  ssd("ssd T=77 run 70 G=1 H/G=3 P=80 N=48 (2 slices)", 77, 70, DIMS(1, 3, 80, 48));
  ssd("ssd T=8 run 5 G=2 H/G=1 P=40 N=64", 8, 5, DIMS(2, 1, 40, 64));
  end_list();
}

/* attention of T tokens per run, HQ query and HKV kv heads of D, a cache of
 * MAXS rows, `runs` runs (positions 0, T, 2T, ...). */
static void attention(const char *label, int64_t T, int64_t HQ, int64_t HKV, int64_t D,
                      int64_t MAXS, int runs, double scale) {
  kcase kc;
  kc_begin(&kc, label);
  int32_t ids[64] = {0};
  kc_tokens(&kc, (int)T, ids); /* the token count the CPU side advances "pos" by */
  ssm_value *args[6];
  args[0] = kc_weight(&kc, F32(T, HQ, D), -1, 1);
  args[1] = kc_weight(&kc, F32(T, HKV, D), -1, 1);
  args[2] = kc_weight(&kc, F32(T, HKV, D), -1, 1);
  args[3] = kc_state(&kc, F32(MAXS, HKV, D));
  args[4] = kc_state(&kc, F32(MAXS, HKV, D));
  args[5] = kc_pos(&kc);
  ssm_node *n = ssm_graph_append(kc.g, SSM_OP_ATTENTION, &k_scalar, 6, args);
  ssm_node_set_float(kc.g, n, "scale", scale);
  kc.runs = runs;
  kc_check(&kc, n, TOL_ACCUM);
}

static void test_attention(void) {
  NEED_VK();
  attention("attention T=1 HQ=4 HKV=2 D=16, 6 runs (pos 0..5)", 1, 4, 2, 16, 8, 6, 0.25);
  attention("attention T=4 HQ=6 HKV=2 D=24, 2 runs (prefill)", 4, 6, 2, 24, 16, 2,
            0.20412414523193154);
  attention("attention T=3 HQ=2 HKV=2 D=67 (2 dims a thread)", 3, 2, 2, 67, 7, 2, 0.5);
  attention("attention T=40 HQ=6 HKV=2 D=24, 2 runs (score chunks)", 40, 6, 2, 24, 80, 2, 1.0);
  attention("attention T=1 HQ=6 HKV=1 D=24 (one kv head), 3 runs", 1, 6, 1, 24, 3, 3, 1.0);
  end_list();
}

/* delta_rule of q, k [T,HK,DK], v [T,H,DV], the decay [T,H] (or [T,H,DK]
 * with per_channel), beta [T,H], state [H,DK,DV], over `runs` runs (the
 * state carried). k's size keeps |k|^2 under 2, so the state stays bounded. */
static void delta(const char *label, int64_t T, int64_t H, int64_t HK, int64_t DK, int64_t DV,
                  int per_channel, int runs) {
  kcase kc;
  kc_begin(&kc, label);
  float kr = 1.2f / sqrtf((float)DK);
  ssm_value *args[6];
  args[0] = kc_weight(&kc, F32(T, HK, DK), -kr, kr);
  args[1] = kc_weight(&kc, F32(T, HK, DK), -kr, kr);
  args[2] = kc_weight(&kc, F32(T, H, DV), -1, 1);
  args[3] = per_channel ? kc_weight(&kc, F32(T, H, DK), 0.5f, 1) : kc_weight(&kc, F32(T, H), 0.5f, 1);
  args[4] = kc_weight(&kc, F32(T, H), 0, 1);
  args[5] = kc_state(&kc, F32(H, DK, DV));
  ssm_node *n = ssm_graph_append(kc.g, SSM_OP_DELTA, &k_scalar, 6, args);
  kc.runs = runs;
  kc.family = "delta";
  kc_check(&kc, n, TOL_ACCUM);
}

/* Gated DeltaNet's delta_rule group as fuse makes it (models/qwen3_5.yaml):
 * q, k = w0, w1 [T,HK,DK] (|k|^2 under 2), v = w2 [T,H,DV], the decay
 * exp(w3) with w3 [T,H] in [-1.5, -0.02], beta = w4 [T,H] in [0,1], the
 * state [H,DK,DV]; dims = {H, HK, DK, DV, zeros}, and with zeros every
 * seventh decay is exp(-inf), 0. The root (the delta_rule) is
 * returned, the exp its group's first member. */
static ssm_node *gated_delta(kcase *kc, int64_t T, const int64_t *dims) {
  int64_t H = dims[0], HK = dims[1], DK = dims[2], DV = dims[3];
  int32_t zeros[512] = {0};
  kc_tokens(kc, (int)T, zeros); /* the program's tokens per run (ssm_cg_reads_count) */
  float kr = 1.2f / sqrtf((float)DK);
  ssm_value *args[6];
  args[0] = kc_weight(kc, F32(T, HK, DK), -kr, kr);
  args[1] = kc_weight(kc, F32(T, HK, DK), -kr, kr);
  args[2] = kc_weight(kc, F32(T, H, DV), -1, 1);
  ssm_value *z = kc_weight(kc, F32(T, H), -1.5f, -0.02f);
  if (dims[4])
    for (int64_t i = 0; i < T * H; i += 7) kc->wdata[kc->nw - 1][i] = -INFINITY;
  args[4] = kc_weight(kc, F32(T, H), 0, 1);
  args[5] = kc_state(kc, F32(H, DK, DV));
  ssm_node *ex = kc_node(kc, SSM_OP_EXP, 1, z, NULL, NULL, NULL);
  kc->first = ex;
  args[3] = member(kc, ex);
  kc->anchor = ssm_graph_append(kc->g, SSM_OP_DELTA, &k_scalar, 6, args);
  SSM_ASSERT_OK(ssm_op_infer(kc->anchor, &kc->anchor->result->type));
  member(kc, kc->anchor);
  return kc->anchor;
}
#define delta_chunk(label, T, count, dims) chunked(label, T, count, "delta_chunk", gated_delta, dims)

static void test_delta(void) {
  NEED_VK();
  delta("delta_rule T=1 H=4 HK=2 DK=16 DV=24, 3 runs (decode)", 1, 4, 2, 16, 24, 0, 3);
  delta("delta_rule T=5 H=2 HK=2 DK=8 DV=70 per key channel (2 workgroups a head)", 5, 2, 2, 8,
        70, 1, 2);
  delta("delta_rule T=7 H=6 HK=3 DK=32 DV=16", 7, 6, 3, 32, 16, 0, 2);
  /* a decay read whole from memory, or one a key channel: step by step at
   * any length (the chunked form needs exp(z) to take its log) */
  delta("delta_rule T=20 H=2 HK=1 DK=16 DV=8 (decay from memory)", 20, 2, 1, 16, 8, 0, 2);
  delta("delta_rule T=20 H=2 HK=2 DK=8 DV=8 per key channel", 20, 2, 2, 8, 8, 1, 2);
  end_list();
}

/* The chunked delta rule (codegen/delta.c; chunks of up to 64 tokens, fewer
 * where K, Q and the C x C tiles pass the workgroup memory: 16 in GLSL at
 * DK = 128) against the step-by-step interpreter: several chunks with a
 * short last one, the state carried from chunk to chunk and run to run,
 * several heads sharing key heads, two workgroups a head, runs shorter than
 * the program's T and than one chunk, decays that are 0 in f32 (whose log
 * the kernel takes as -128). */
static void test_delta_chunk(void) {
  NEED_VK();
  delta_chunk("delta_chunk T=150 run 140 H=4 HK=2 DK=16 DV=24", 150, 140, DIMS(4, 2, 16, 24, 0));
  delta_chunk("delta_chunk T=100 H=6 HK=3 DK=128 DV=40 (chunks of 16)", 100, 100,
              DIMS(6, 3, 128, 40, 0));
  delta_chunk("delta_chunk T=64 run 5 H=2 HK=1 DK=32 DV=70 (several workgroups a head)", 64, 5,
              DIMS(2, 1, 32, 70, 0));
  delta_chunk("delta_chunk T=8 H=4 HK=2 DK=8 DV=6", 8, 8, DIMS(4, 2, 8, 6, 0));
  delta_chunk("delta_chunk T=30 H=2 HK=1 DK=7 DV=10 (dot products' tail)", 30, 30,
              DIMS(2, 1, 7, 10, 0));
  delta_chunk("delta_chunk T=40 H=3 HK=3 DK=16 DV=12, decays of 0 (z = -inf)", 40, 40,
              DIMS(3, 3, 16, 12, 1));
  end_list();
}

/* attention over the last `window` positions only */
static void attention_window(const char *label, int64_t T, int64_t window, int runs) {
  kcase kc;
  kc_begin(&kc, label);
  int32_t ids[64] = {0};
  kc_tokens(&kc, (int)T, ids);
  ssm_value *args[6];
  args[0] = kc_weight(&kc, F32(T, 4, 16), -1, 1);
  args[1] = kc_weight(&kc, F32(T, 2, 16), -1, 1);
  args[2] = kc_weight(&kc, F32(T, 2, 16), -1, 1);
  args[3] = kc_state(&kc, F32(T * runs, 2, 16));
  args[4] = kc_state(&kc, F32(T * runs, 2, 16));
  args[5] = kc_pos(&kc);
  ssm_node *n = ssm_graph_append(kc.g, SSM_OP_ATTENTION, &k_scalar, 6, args);
  ssm_node_set_float(kc.g, n, "scale", 0.25);
  ssm_node_set_int(kc.g, n, "window", window);
  kc.runs = runs;
  kc_check(&kc, n, TOL_ACCUM);
}

/* The batched ops (batch=1): each of T rows a sequence of its own, row t
 * first at position 7t mod (MAXS - runs + 1), one more each run; attention
 * with caches [T,MAXS,HKV,D] (window 0: none), then rope and positions. */
static void batched(const char *label, int64_t T, int64_t HQ, int64_t HKV, int64_t D, int64_t MAXS,
                    int64_t window, int runs) {
  int32_t ids[64] = {0}, pos[64];
  for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)(7 * t % (MAXS - runs + 1));
  kcase kc;
  kc_begin(&kc, label);
  kc_tokens(&kc, (int)T, ids);
  ssm_value *args[6];
  args[0] = kc_weight(&kc, F32(T, HQ, D), -1, 1);
  args[1] = kc_weight(&kc, F32(T, HKV, D), -1, 1);
  args[2] = kc_weight(&kc, F32(T, HKV, D), -1, 1);
  args[3] = kc_state(&kc, F32(T, MAXS, HKV, D));
  args[4] = kc_state(&kc, F32(T, MAXS, HKV, D));
  args[5] = kc_row_pos(&kc, (int)T, pos);
  ssm_node *n = ssm_graph_append(kc.g, SSM_OP_ATTENTION, &k_scalar, 6, args);
  ssm_node_set_float(kc.g, n, "scale", 0.25);
  if (window) ssm_node_set_int(kc.g, n, "window", window);
  ssm_node_set_int(kc.g, n, "batch", 1);
  kc.runs = runs;
  kc_check(&kc, n, TOL_ACCUM);

  kc_begin(&kc, "  rope of the same rows");
  kc_tokens(&kc, (int)T, ids);
  ssm_value *x = kc_weight(&kc, F32(T, HQ, D), -1, 1);
  n = kc_op(&kc, SSM_OP_ROPE, 2, x, kc_row_pos(&kc, (int)T, pos), NULL, NULL);
  ssm_node_set_float(kc.g, n, "theta", 10000);
  ssm_node_set_int(kc.g, n, "dims", D);
  ssm_node_set_int(kc.g, n, "batch", 1);
  kc.runs = runs;
  kc_check(&kc, n, TOL_TRANS);

  kc_begin(&kc, "  positions of the same rows");
  kc_tokens(&kc, (int)T, ids);
  x = kc_weight(&kc, F32(T, 3), -1, 1);
  n = kc_op(&kc, SSM_OP_POSITIONS, 2, x, kc_row_pos(&kc, (int)T, pos), NULL, NULL);
  ssm_node_set_int(kc.g, n, "batch", 1);
  kc.runs = runs;
  kc_check(&kc, n, TOL_EXACT);
}

/* rope of x [T,H,D] at positions 0.., T.. (two runs) */
static void rope(const char *label, int64_t T, int64_t H, int64_t D, int64_t dims, int interleaved,
                 double theta) {
  kcase kc;
  kc_begin(&kc, label);
  int32_t ids[64] = {0};
  kc_tokens(&kc, (int)T, ids);
  ssm_value *x = kc_weight(&kc, F32(T, H, D), -1, 1);
  ssm_node *n = kc_op(&kc, SSM_OP_ROPE, 2, x, kc_pos(&kc), NULL, NULL);
  ssm_node_set_float(kc.g, n, "theta", theta);
  ssm_node_set_int(kc.g, n, "dims", dims);
  if (interleaved) ssm_node_set_int(kc.g, n, "interleaved", 1);
  kc.runs = 2;
  kc_check(&kc, n, TOL_TRANS);
}

/* The i32 [rows, k] index operand: the token ids reshaped. */
static ssm_value *kc_index(kcase *kc, int64_t rows, int64_t k, const int32_t *ids) {
  ssm_value *t = kc_tokens(kc, (int)(rows * k), ids);
  ssm_type it = ssm_type_make(SSM_I32, 2, (int64_t[]){rows, k});
  return ssm_graph_append(kc->g, SSM_OP_RESHAPE, &it, 1, &t)->result;
}

static void test_zoo_ops(void) {
  NEED_VK();
  rope("rope T=3 H=5 D=16 dims=16 NeoX, 2 runs", 3, 5, 16, 16, 0, 10000);
  rope("rope T=2 H=3 D=24 dims=12 (partial) NeoX", 2, 3, 24, 12, 0, 500000);
  rope("rope T=4 H=2 D=10 dims=6 GPT-J, 2 runs", 4, 2, 10, 6, 1, 10000);
  attention_window("attention window=3 T=5, 2 runs", 5, 3, 2);
  attention_window("attention window=1 T=1, 4 runs", 1, 1, 4);
  attention_window("attention window=70 T=40 (> a chunk), 2 runs", 40, 70, 2);
  batched("attention batch=1 T=5 HQ=4 HKV=2 D=16 MAXS=20, 3 runs", 5, 4, 2, 16, 20, 0, 3);
  batched("attention batch=1 T=3 HQ=6 HKV=1 D=24 MAXS=12 window=4, 4 runs", 3, 6, 1, 24, 12, 4, 4);

  kcase kc;
  kc_begin(&kc, "positions T=7, 2 runs");
  int32_t zeros[64] = {0};
  kc_tokens(&kc, 7, zeros);
  ssm_value *x = kc_weight(&kc, F32(7, 3), -1, 1);
  kc.runs = 2;
  kc_check(&kc, kc_op(&kc, SSM_OP_POSITIONS, 2, x, kc_pos(&kc), NULL, NULL), TOL_EXACT);

  kc_begin(&kc, "topk rows=5 N=13 k=4, ties");
  x = kc_weight(&kc, F32(5, 13), -1, 1);
  float *d = kc.wdata[0];
  d[13 + 2] = d[13 + 7] = d[13 + 11] = 3.0f; /* row 1: a three-way tie at the top */
  for (int i = 0; i < 13; i++) d[3 * 13 + i] = 0.5f; /* row 3: all equal */
  ssm_node *n = kc_op(&kc, SSM_OP_TOPK, 1, x, NULL, NULL, NULL);
  ssm_node_set_int(kc.g, n, "k", 4);
  kc_check(&kc, n, TOL_EXACT);

  kc_begin(&kc, "topk [2,3,67] k=1");
  x = kc_weight(&kc, F32(2, 3, 67), -1, 1);
  n = kc_op(&kc, SSM_OP_TOPK, 1, x, NULL, NULL, NULL);
  ssm_node_set_int(kc.g, n, "k", 1);
  kc_check(&kc, n, TOL_EXACT);

  kc_begin(&kc, "gather rows=3 N=13 k=2");
  x = kc_weight(&kc, F32(3, 13), -1, 1);
  ssm_value *idx = kc_index(&kc, 3, 2, (int32_t[]){12, 0, 5, 5, 7, 1});
  kc_check(&kc, kc_op(&kc, SSM_OP_GATHER, 2, x, idx, NULL, NULL), TOL_EXACT);

  kc_begin(&kc, "matmul_sel x [3,67] w [5,13,67] k=2");
  x = kc_weight(&kc, F32(3, 67), -1, 1);
  ssm_value *w = kc_weight(&kc, F32(5, 13, 67), -1, 1);
  idx = kc_index(&kc, 3, 2, (int32_t[]){4, 0, 2, 2, 1, 3});
  kc_check(&kc, kc_op(&kc, SSM_OP_MATMUL_SEL, 3, x, w, idx, NULL), TOL_ACCUM);

  kc_begin(&kc, "matmul_sel x [2,3,13] (a row per pick) w [4,7,13] k=3");
  x = kc_weight(&kc, F32(2, 3, 13), -1, 1);
  w = kc_weight(&kc, F32(4, 7, 13), -1, 1);
  idx = kc_index(&kc, 2, 3, (int32_t[]){3, 0, 1, 1, 2, 3});
  kc_check(&kc, kc_op(&kc, SSM_OP_MATMUL_SEL, 3, x, w, idx, NULL), TOL_ACCUM);
  end_list();
}

/* ---- sample: the kernel against the interpreter's op ---------------------- */

/* One `sample` node over logits w0 [rows,V] and sampler state s0 f32[8], on
 * both sides: the interpreter (cpu) and the generated kernel (gpu) as a
 * one-dispatch program. The state is set on both with smp_set. */
typedef struct {
  kcase kc;
  ssm_node *n;
  ssm_st *st;
  ssm_cpu *cpu;
  ssm_arena *arena;
  ssm_vk_kernel *k;
  ssm_vk_program *p;
  ssm_vk_buffer *bufs[3];
  int state_binding;
  int64_t V;
  const float *row; /* the last row of the logits */
} smp;

static const ssm_type k_sampler = {SSM_F32, 1, {8}};

/* Random logits in [-6, 6] (or `fixed`, V values, in the last row). */
static int smp_open(smp *t, const char *label, int64_t rows, int64_t V, const float *fixed) {
  *t = (smp){.V = V};
  kc_begin(&t->kc, label);
  ssm_value *x = kc_weight(&t->kc, F32(rows, V), -6, 6);
  if (fixed) memcpy(t->kc.wdata[0] + (rows - 1) * V, fixed, sizeof(float) * (size_t)V);
  t->row = t->kc.wdata[0] + (rows - 1) * V;
  ssm_node *sn = ssm_graph_append(t->kc.g, SSM_OP_STATE, &k_sampler, 0, NULL);
  ssm_node_set_str(t->kc.g, sn, "name", "s0");
  t->n = kc_op(&t->kc, SSM_OP_SAMPLE, 2, x, sn->result, NULL, NULL);
  SSM_ASSERT_OK(ssm_op_infer(t->n, &t->n->result->type));
  ssm_graph_append(t->kc.g, SSM_OP_OUTPUT, NULL, 1, &t->n->result);
  SSM_ASSERT_OK(ssm_graph_verify(t->kc.g));
  t->st = kc_write_weights(&t->kc, g_cases++);
  SSM_ASSERT_OK(ssm_cpu_create(t->st, &t->cpu));
  t->arena = ssm_test_arena();
  ssm_cg_kernel kern;
  ssm_status s = ssm_cg_kernel_for_node(t->kc.g, t->n, t->arena, &kern);
  uint32_t *words = NULL;
  size_t nwords = 0;
  if (!s) s = ssm_cg_compile_glsl(kern.glsl, label, &words, &nwords);
  if (!s) {
    const char *ls = strstr(kern.glsl, "local_size_x = ");
    if (ls && (unsigned)atoi(ls + 15) > ssm_vk_info(g_vk)->max_workgroup_invocations) {
      printf("\n    SKIP %-46s workgroup of %d invocations", label, atoi(ls + 15));
      g_skips++;
      free(words);
      return 0;
    }
    CU_ASSERT_EQUAL_FATAL(kern.nbindings, 3);
    ssm_vk_kernel_desc d = {.name = label, .spirv = words, .words = nwords, .n_bindings = 3,
                            .push_bytes = kern.run_count ? SSM_BUNDLE_RUN_PUSH_BYTES : 0};
    s = ssm_vk_kernel_create_desc(g_vk, &d, &t->k);
  }
  free(words);
  ssm_vk_binding binds[3];
  for (int b = 0; !s && b < 3; b++) {
    const ssm_value *v = kern.bind[b];
    size_t bytes = (size_t)ssm_type_numel(&v->type) * 4;
    s = ssm_vk_buffer_create(g_vk, bytes, SSM_VK_BUFFER_DEVICE, &t->bufs[b]);
    if (!s && v == x) s = ssm_vk_buffer_upload(g_vk, t->bufs[b], 0, t->kc.wdata[0], bytes);
    if (v == sn->result) t->state_binding = b;
    binds[b] = (ssm_vk_binding){t->bufs[b], 0, 0};
  }
  if (!s) s = ssm_vk_program_create(g_vk, &t->p);
  uint32_t whole = UINT32_MAX; /* the run count of a whole run: min(n, T) = T */
  if (!s) s = ssm_vk_program_add_dispatch(t->p, t->k, binds, kern.run_count ? &whole : NULL, 1, 1, 1);
  if (!s) s = ssm_vk_program_end(t->p);
  SSM_ASSERT_OK(s);
  CU_ASSERT_EQUAL(kern.bind[0], t->n->result);
  return !s;
}

static void smp_close(smp *t) {
  ssm_vk_program_destroy(g_vk, t->p);
  ssm_vk_kernel_destroy(g_vk, t->k);
  for (int b = 0; b < 3; b++) ssm_vk_buffer_destroy(g_vk, t->bufs[b]);
  ssm_arena_destroy(t->arena);
  ssm_cpu_destroy(t->cpu);
  ssm_st_close(t->st);
  for (int i = 0; i < t->kc.nw; i++) free(t->kc.wdata[i]);
  ssm_graph_destroy(t->kc.g);
}

/* temperature, top_k, top_p, seed, min_p; step 0 */
static void smp_set(smp *t, float temp, float top_k, float top_p, float seed, float min_p) {
  float st[8] = {temp, top_k, top_p, seed, 0, min_p, 0, 0};
  SSM_ASSERT_OK(ssm_cpu_state_write(t->cpu, "s0", &k_sampler, st));
  SSM_ASSERT_OK(ssm_vk_buffer_upload(g_vk, t->bufs[t->state_binding], 0, st, sizeof st));
}

static int32_t smp_gpu(smp *t) {
  int32_t id = -1;
  SSM_ASSERT_OK(ssm_vk_program_run(g_vk, t->p));
  SSM_ASSERT_OK(ssm_vk_buffer_download(g_vk, t->bufs[0], 0, &id, 4));
  return id;
}

static int32_t smp_cpu(smp *t) {
  float id = -1;
  SSM_ASSERT_OK(ssm_cpu_run(t->cpu, t->kc.g, NULL, &id, 1));
  return (int32_t)id;
}

static float smp_gpu_step(smp *t) {
  float st[8] = {0};
  SSM_ASSERT_OK(ssm_vk_buffer_download(g_vk, t->bufs[t->state_binding], 0, st, sizeof st));
  return st[4];
}

/* Draws `steps` ids on both sides with the same settings. Ids must match,
 * except where the interpreter's decision was a near-tie (margin < 1e-4 of
 * the mass, or of the top-k threshold), which is counted in *near. */
static void sample_case(int64_t V, float temp, float top_k, float top_p, float min_p, int steps,
                        int *near) {
  char label[96];
  snprintf(label, sizeof label, "sample V=%lld T=%g k=%g p=%g min_p=%g, %d steps", (long long)V,
           temp, top_k, top_p, min_p, steps);
  smp t;
  if (!smp_open(&t, label, 2, V, NULL)) {
    smp_close(&t);
    return;
  }
  smp_set(&t, temp, top_k, top_p, 7, min_p);
  int same = 0, ties = 0, bad = 0, distinct = 0;
  int64_t best = 0; /* the likeliest: all that min_p 1 keeps */
  for (int64_t i = 1; i < V; i++)
    if (t.row[i] > t.row[best]) best = i;
  int32_t prev = -1;
  for (int i = 0; i < steps; i++) {
    float st[8] = {temp, top_k, top_p, 7, (float)i, min_p, 0, 0};
    double margin;
    int32_t want = ssm_sample_row(t.row, V, st, &margin);
    if (min_p >= 1) CU_ASSERT_EQUAL(want, best);
    int32_t cpu = smp_cpu(&t), gpu = smp_gpu(&t);
    CU_ASSERT_EQUAL(cpu, want); /* the op is ssm_sample_row at the current step */
    CU_ASSERT(gpu >= 0 && gpu < V);
    /* min_p leaves out what is less likely than min_p times the likeliest */
    if (min_p > 0 && gpu >= 0 && gpu < V)
      CU_ASSERT((t.row[gpu] - t.row[best]) / temp >= logf(min_p) - 1e-5f);
    distinct += gpu != prev;
    prev = gpu;
    if (gpu == cpu) same++;
    else if (temp > 0 && margin < 1e-4) ties++;
    else {
      bad++;
      printf("\n      step %d: gpu %d cpu %d (margin %.2e)", i, gpu, cpu, margin);
    }
  }
  CU_ASSERT_EQUAL(smp_gpu_step(&t), (float)steps);
  CU_ASSERT_EQUAL(bad, 0);
  if (temp > 0 && (top_k == 0 || top_k > 1) && min_p < 1) CU_ASSERT(distinct > 1); /* it samples */
  g_failures += bad > 0;
  *near += ties;
  printf("\n    %-4s %-46s %d/%d same, %d near-ties", bad ? "FAIL" : "ok", label, same, steps, ties);
  smp_close(&t);
}

static void test_sample(void) {
  NEED_VK();
  int near = 0;
  /* temperature, top_k, top_p, min_p */
  static const float combos[][4] = {{0, 0, 1, 0},      {1, 0, 1, 0},      {0.8f, 40, 0.9f, 0},
                                    {1.5f, 0, 0.5f, 0}, {0.7f, 5, 1, 0},   {1, 1, 1, 0},
                                    {2, 100, 0.95f, 0}, {0.5f, 0, 0.99f, 0}, {1.2f, 0, 1, 0.05f},
                                    {1, 40, 0.9f, 0.2f}, {2, 0, 1, 1}};
  for (int v = 0; v < 2; v++)
    for (size_t c = 0; c < sizeof combos / sizeof combos[0]; c++)
      sample_case(v ? 50280 : 1000, combos[c][0], combos[c][1], combos[c][2], combos[c][3],
                  v ? 12 : 40, &near);
  printf("\n    near-ties tolerated: %d", near);
  end_list();
}

/* A NaN or an infinity anywhere in the row: -1 on both sides, whatever the
 * settings (the runtime reports the position). */
static void test_sample_nonfinite(void) {
  NEED_VK();
  const float bad[3] = {NAN, INFINITY, -INFINITY};
  for (int b = 0; b < 3; b++)
    for (int where = 0; where < 2; where++) {
      enum { V = 3000 };
      float row[V];
      for (int i = 0; i < V; i++) row[i] = (float)((i * 37) % 101) / 17.0f - 3.0f;
      row[where ? V - 1 : 1234] = bad[b];
      smp t;
      if (!smp_open(&t, "sample with a non-finite logit", 1, V, row)) {
        smp_close(&t);
        continue;
      }
      for (int greedy = 0; greedy < 2; greedy++) {
        smp_set(&t, greedy ? 0 : 0.9f, 0, 1, 3, 0);
        float st[8] = {greedy ? 0 : 0.9f, 0, 1, 3, 0, 0, 0, 0};
        CU_ASSERT_EQUAL(ssm_sample_row(t.row, V, st, NULL), -1);
        CU_ASSERT_EQUAL(smp_cpu(&t), -1);
        CU_ASSERT_EQUAL(smp_gpu(&t), -1);
      }
      smp_close(&t);
    }
}

/* Softmax frequencies, top-k and top-p support, seeds. */
static void test_sample_distribution(void) {
  NEED_VK();
  static const double probs[8] = {0.3, 0.2, 0.15, 0.1, 0.1, 0.08, 0.05, 0.02};
  float logits[8];
  for (int i = 0; i < 8; i++) logits[i] = (float)log(probs[i]) + 3.0f;
  smp t;
  if (smp_open(&t, "sample 8-way, 20000 draws", 1, 8, logits)) {
    smp_set(&t, 1, 0, 1, 123, 0);
    int counts[8] = {0};
    enum { DRAWS = 20000 };
    for (int i = 0; i < DRAWS; i++) {
      int32_t id = smp_gpu(&t);
      CU_ASSERT_FATAL(id >= 0 && id < 8);
      counts[id]++;
    }
    double worst = 0, chi2 = 0;
    for (int i = 0; i < 8; i++) {
      double f = (double)counts[i] / DRAWS;
      worst = fmax(worst, fabs(f - probs[i]));
      chi2 += (counts[i] - DRAWS * probs[i]) * (counts[i] - DRAWS * probs[i]) / (DRAWS * probs[i]);
    }
    printf("\n    %-4s %-46s max |freq - p| %.4f, chi2 %.2f (7 dof)", worst < 0.01 ? "ok" : "FAIL",
           "sample 8-way, 20000 draws", worst, chi2);
    CU_ASSERT(worst < 0.01);
    CU_ASSERT(chi2 < 24.3); /* p = 0.001 */
  }
  smp_close(&t);

  enum { V = 1000, DRAWS = 200 };
  if (smp_open(&t, "sample top-k=3 / top-p=0.5 support", 1, V, NULL)) {
    /* the top 3, and the nucleus: the fewest largest p holding half the mass */
    int order[V];
    for (int i = 0; i < V; i++) order[i] = i;
    for (int i = 0; i < V; i++)
      for (int j = i + 1; j < V; j++)
        if (t.row[order[j]] > t.row[order[i]]) {
          int tmp = order[i];
          order[i] = order[j];
          order[j] = tmp;
        }
    double total = 0, mass = 0;
    for (int i = 0; i < V; i++) total += exp((double)t.row[i] - t.row[order[0]]);
    int nucleus = 0;
    while (mass < 0.5 * total) mass += exp((double)t.row[order[nucleus++]] - t.row[order[0]]);
    char in_top3[V] = {0}, in_nucleus[V] = {0};
    for (int i = 0; i < 3; i++) in_top3[order[i]] = 1;
    for (int i = 0; i < nucleus; i++) in_nucleus[order[i]] = 1;
    int outside_k = 0, outside_p = 0, seen_k = 0, seen_p = 0;
    char hit_k[V] = {0}, hit_p[V] = {0};
    smp_set(&t, 1, 3, 1, 5, 0);
    for (int i = 0; i < DRAWS; i++) {
      int32_t id = smp_gpu(&t);
      outside_k += !in_top3[id];
      seen_k += !hit_k[id];
      hit_k[id] = 1;
    }
    smp_set(&t, 1, 0, 0.5f, 5, 0);
    for (int i = 0; i < DRAWS; i++) {
      int32_t id = smp_gpu(&t);
      outside_p += !in_nucleus[id];
      seen_p += !hit_p[id];
      hit_p[id] = 1;
    }
    printf("\n    %-4s %-46s top-3: %d outside, %d seen; nucleus of %d: %d outside, %d seen",
           outside_k + outside_p ? "FAIL" : "ok", "sample top-k=3 / top-p=0.5 support", outside_k,
           seen_k, nucleus, outside_p, seen_p);
    CU_ASSERT_EQUAL(outside_k, 0);
    CU_ASSERT_EQUAL(outside_p, 0);
    CU_ASSERT(seen_k >= 2);
    CU_ASSERT(seen_p >= 2 || nucleus == 1);

    /* the same seed gives the same ids; another seed others */
    int32_t a[20], b[20], c[20];
    smp_set(&t, 1, 0, 1, 7, 0);
    for (int i = 0; i < 20; i++) a[i] = smp_gpu(&t);
    smp_set(&t, 1, 0, 1, 7, 0);
    for (int i = 0; i < 20; i++) b[i] = smp_gpu(&t);
    smp_set(&t, 1, 0, 1, 8, 0);
    for (int i = 0; i < 20; i++) c[i] = smp_gpu(&t);
    CU_ASSERT(!memcmp(a, b, sizeof a));
    CU_ASSERT(memcmp(a, c, sizeof a) != 0);
  }
  smp_close(&t);
  end_list();
}

static struct timespec g_t0;

static void test_validation_clean(void) {
  NEED_VK();
  int errors = ssm_vk_validation_errors(g_vk), warnings = ssm_vk_validation_warnings(g_vk);
  for (int i = 0; ssm_vk_validation_message(g_vk, i); i++)
    fprintf(stderr, "\n  %s\n", ssm_vk_validation_message(g_vk, i));
  CU_ASSERT_EQUAL(errors, 0);
  CU_ASSERT_EQUAL(warnings, 0);
  ssm_vk_close(g_vk);
  g_vk = NULL;
  CU_ASSERT_EQUAL(g_log_errors, 0);
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - g_t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - g_t0.tv_nsec);
  printf("\n    %d cases, %d failed, %d skipped; worst passing error %.2e; %.2f s\n", g_cases,
         g_failures, g_skips, g_worst, secs);
}

int main(void) {
  clock_gettime(CLOCK_MONOTONIC, &g_t0);
  ssm_log_set(on_log, NULL);
  CU_TestInfo tests[] = {{"create", test_create},
                         {"unary", test_unary},
                         {"binary", test_binary},
                         {"matmul", test_matmul},
                         {"rowreduce", test_rowreduce},
                         {"argmax", test_argmax},
                         {"reduce", test_reduce},
                         {"copy", test_copy},
                         {"embed", test_embed},
                         {"conv1d", test_conv1d},
                         {"scan", test_scan},
                         {"ssd", test_ssd},
                         {"attention", test_attention},
                         {"delta_rule", test_delta},
                         {"delta_chunk", test_delta_chunk},
                         {"zoo_ops", test_zoo_ops},
                         {"sample", test_sample},
                         {"sample_distribution", test_sample_distribution},
                         {"sample_nonfinite", test_sample_nonfinite},
                         {"validation_clean", test_validation_clean},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("kernels", tests);
}
