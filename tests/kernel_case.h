/*
 * kernel_case.h — the harness of test_kernels.c: a case is one IR node
 * under test in a graph of its own, run by the CPU interpreter and as its
 * generated kernel on the GPU, and compared (kernel_case.c).
 */
#ifndef SSM_KERNEL_CASE_H
#define SSM_KERNEL_CASE_H

#include "codegen/codegen.h"
#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "testutil.h"

/* Tolerances (max|gpu - cpu| / max|cpu|):
 *   TOL_EXACT  data movement (slice, concat, transpose, embed), neg, relu,
 *              argmax: the same bits.
 *   TOL_ARITH  add, sub, mul, div, square: one rounding (GLSL allows 2.5 ulp
 *              for division).
 *   TOL_TRANS  exp, log, softplus, silu, sigmoid, sqrt, rsqrt, tanh: GLSL's
 *              exp/log/inversesqrt/tanh are a few ulp, the CPU works in double.
 *   TOL_ACCUM  matmul, reduce, rmsnorm, softmax, conv1d, scan: f32 sums in
 *              another order than the CPU's double sums. */
#define TOL_EXACT 0.0
#define TOL_ARITH 1e-6
#define TOL_TRANS 1e-5
#define TOL_ACCUM 1e-5

#define MAXW 16

typedef struct {
  const char *label;
  ssm_graph *g;
  int nw;
  ssm_value *wval[MAXW];
  float *wdata[MAXW];
  char wname[MAXW][8];
  int32_t tokens[512];
  int ntokens;
  int nstates;
  char sname[2][8];
  int runs; /* 0: 2 for stateful ops, else 1 */
  ssm_node *norm; /* an rmsnorm that the node under test applies as its prologue */
  /* a fused group from `first` to the node under test, around `anchor`
   * (whose states are compared), its members marked group 0 by the case */
  ssm_node *first, *anchor;
  int count; /* tokens of each GPU run, fewer than the program's (0: all) */
  /* a batched (batch=1) case's positions: row t's at run r is row_pos[t] + r
   * (kc_row_pos; nrows 0: the one sequence's, r * ntokens) */
  int32_t row_pos[64];
  int nrows;
  const char *family; /* the kernel template the case must get (NULL: any) */
} kcase;

/* Tests after "create" need the shared context. */
#define NEED_VK() SSM_NEED_VK(g_vk)


/* The device every case runs on (test_kernels.c's `create` opens it), and
 * the tallies its last test prints. */
extern ssm_vk *g_vk;
extern int g_log_errors, g_cases, g_skips, g_failures;
extern double g_worst;

extern const ssm_type k_scalar;
ssm_type kc_f32(int rank, const int64_t *dims);
#define F32(...) kc_f32((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

/* ssm_log's sink: counts (and prints the first of) validation messages. */
void on_log(const char *msg, void *user);

void kc_begin(kcase *kc, const char *label);
/* A weight "w<i>" of type t, uniform in [lo, hi]; kc->wdata[i] may be edited. */
ssm_value *kc_weight(kcase *kc, ssm_type t, float lo, float hi);
ssm_value *kc_const(kcase *kc, double v);
ssm_value *kc_state(kcase *kc, ssm_type t);
ssm_value *kc_pos(kcase *kc);
/* The input "pos" of a batched case: i32[rows], row t first at pos[t]. */
ssm_value *kc_row_pos(kcase *kc, int rows, const int32_t *pos);
ssm_value *kc_tokens(kcase *kc, int count, const int32_t *ids);
ssm_node *kc_op(kcase *kc, ssm_op op, int nargs, ssm_value *a, ssm_value *b, ssm_value *c,
                ssm_value *d);
ssm_st *kc_write_weights(kcase *kc, int index);

/* Elements of all the node's states together. */
size_t kc_states_count(const ssm_node *n);
/* Runs the graph `runs` times on the interpreter: out gets runs * numel
 * results, state (if any) the final states, one after another. */
ssm_status kc_cpu_side(kcase *kc, const ssm_st *st, const ssm_node *n, int runs, float *out,
                       float *state);
/* The node's kernel on the GPU, `runs` times; a kernel the device cannot
 * run writes why into skip. */
ssm_status kc_gpu_side(kcase *kc, const ssm_node *n, int runs, float *out, float *state,
                       char *skip, size_t skip_size);
/* max|g - c| / max(max|c|, 1e-30) over n values, the index of the largest
 * difference in *at. */
double kc_compare(const float *g, const float *c, size_t n, size_t *at);
/* Prints a case's line (ok where err <= tol and `also`, else FAIL with
 * the values at `at`), tallies and asserts it. */
void kc_verdict(const char *label, double err, double tol, int also, const float *gpu,
                const float *cpu, size_t at);
/* Completes the graph around `n`, runs both sides, compares, prints the
 * measured error against `tol` and frees the case. */
void kc_check(kcase *kc, ssm_node *n, double tol);
/* Ends a test's list of case lines, so CUnit's verdict gets its own line. */
void end_list(void);

#endif
