/*
 * test_cpu.c — the CPU reference interpreter, op by op, against values
 * computed by hand (or by the op's textbook formula, written out here
 * independently of cpu.c), plus the state carried between runs and the
 * errors a user can cause (bad token ids, wrong weight shapes, state
 * declared twice with different types, unknown transforms and inputs).
 *
 * Graphs are built with the builder API and their result types set by hand.
 * Tensors come from a small safetensors file written to the temp dir. The
 * last test builds Mamba-1 by hand (as models/mamba1.yaml describes it) and
 * checks the interpreter against the logits transformers computed for the
 * tests/data/mamba1_tiny fixture, independently of the YAML frontend.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"
#include "testutil.h"

/* ---- a tiny safetensors writer ------------------------------------------- */

typedef struct {
  const char *name;
  int rank;
  int64_t shape[SSM_MAX_RANK];
  const float *data;
} st_entry;

static st_entry st_entries[64];
static int st_n;

static void st_add(const char *name, const int64_t *shape, int rank, const float *data) {
  CU_ASSERT_FATAL(st_n < 64);
  st_entry *e = &st_entries[st_n++];
  e->name = name;
  e->rank = rank;
  for (int i = 0; i < rank; i++) e->shape[i] = shape[i];
  e->data = data;
}

/* Writes the added tensors to `file` (F32, in order), clears the list and
 * opens the result. */
static ssm_st *st_write(const char *file) {
  const char *names[64];
  ssm_type types[64];
  const float *data[64];
  for (int i = 0; i < st_n; i++) {
    names[i] = st_entries[i].name;
    types[i] = ssm_type_make(SSM_F32, st_entries[i].rank, st_entries[i].shape);
    data[i] = st_entries[i].data;
  }
  const char *path = ssm_test_write_safetensors(file, st_n, names, types, data);
  st_n = 0;
  ssm_st *st = NULL;
  SSM_ASSERT_OK(ssm_st_open(path, &st));
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  return st;
}

/* ---- graph building ------------------------------------------------------- */

#define DIMS(...) (int64_t[]){__VA_ARGS__}, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

static ssm_type f32(const int64_t *dims, int rank) { return ssm_type_make(SSM_F32, rank, dims); }
static ssm_type i32(const int64_t *dims, int rank) { return ssm_type_make(SSM_I32, rank, dims); }
static const ssm_type scalar = {SSM_F32, 0, {0}};

static ssm_value *src(ssm_graph *g, ssm_op op, const char *name, ssm_type t) {
  ssm_node *n = ssm_graph_append(g, op, &t, 0, NULL);
  ssm_node_set_str(g, n, "name", name);
  return n->result;
}
static ssm_value *weight(ssm_graph *g, const char *name, ssm_type t) {
  return src(g, SSM_OP_WEIGHT, name, t);
}
static ssm_value *state(ssm_graph *g, const char *name, ssm_type t) {
  return src(g, SSM_OP_STATE, name, t);
}
static ssm_value *constant(ssm_graph *g, double v) {
  ssm_node *n = ssm_graph_append(g, SSM_OP_CONST, &scalar, 0, NULL);
  ssm_node_set_float(g, n, "value", v);
  return n->result;
}
static ssm_node *node(ssm_graph *g, ssm_op op, ssm_type t, int nargs, ssm_value *a,
                      ssm_value *b, ssm_value *c, ssm_value *d) {
  ssm_value *args[4] = {a, b, c, d};
  return ssm_graph_append(g, op, &t, nargs, args);
}
static ssm_value *op1(ssm_graph *g, ssm_op op, ssm_type t, ssm_value *a) {
  return node(g, op, t, 1, a, NULL, NULL, NULL)->result;
}
static ssm_value *op2(ssm_graph *g, ssm_op op, ssm_type t, ssm_value *a, ssm_value *b) {
  return node(g, op, t, 2, a, b, NULL, NULL)->result;
}
static void output(ssm_graph *g, ssm_value *v) { ssm_graph_append(g, SSM_OP_OUTPUT, NULL, 1, &v); }

/* ---- checking --------------------------------------------------------------- */

static int near(double got, double want) {
  return fabs(got - want) <= 1e-6 * fmax(1.0, fabs(want));
}

/* Compares n values; `relative` demands 1e-6 relative error even near 0. */
static void check_values(const float *got, const double *want, size_t n, int relative,
                         int line) {
  for (size_t i = 0; i < n; i++) {
    int ok = relative ? fabs(got[i] - want[i]) <= 1e-6 * fabs(want[i]) : near(got[i], want[i]);
    if (!ok) fprintf(stderr, "\n  line %d: [%zu] = %.9g, want %.9g\n", line, i, got[i], want[i]);
    CU_ASSERT(ok);
  }
}

/* Outputs `v`, runs g on `c` (a fresh interpreter on `st` when NULL) and
 * compares the output with `want`. Destroys g. */
static void expect_on(ssm_cpu *c, const ssm_st *st, ssm_graph *g, ssm_value *v,
                      const int32_t *tokens, const double *want, size_t n, int relative,
                      int line) {
  ssm_cpu *own = NULL;
  if (!c) {
    SSM_ASSERT_OK(ssm_cpu_create(st, &own));
    c = own;
  }
  if (v) output(g, v);
  float got[256];
  CU_ASSERT_FATAL(n <= 256);
  ssm_status s = ssm_cpu_run(c, g, tokens, got, n);
  if (s) fprintf(stderr, "\n  line %d: %s\n", line, ssm_status_message(s));
  CU_ASSERT_PTR_NULL(s);
  if (!s) check_values(got, want, n, relative, line);
  ssm_status_free(s);
  ssm_cpu_destroy(own);
  ssm_graph_destroy(g);
}

#define EXPECT(st, g, v, ...)                                                      \
  expect_on(NULL, st, g, v, NULL, (double[]){__VA_ARGS__},                         \
            sizeof((double[]){__VA_ARGS__}) / sizeof(double), 0, __LINE__)

/* Runs g once on a fresh interpreter; returns the status. Destroys g. */
static ssm_status run_fresh(const ssm_st *st, ssm_graph *g, const int32_t *tokens,
                            float *out, size_t n) {
  ssm_cpu *c;
  SSM_ASSERT_OK(ssm_cpu_create(st, &c));
  ssm_status s = ssm_cpu_run(c, g, tokens, out, n);
  ssm_cpu_destroy(c);
  ssm_graph_destroy(g);
  return s;
}

/* Tensors most tests share. */
static const float x23[] = {1, 2, 3, 4, 5, 6};
static const float v3[] = {10, 20, 30};
static const float c21[] = {2, 3};
static const float r13[] = {5, 7, 11};
static const float m23[] = {-1, -7, 3, -4, -5, -6};

static ssm_st *common_st(const char *file) {
  st_add("x23", DIMS(2, 3), x23);
  st_add("v3", DIMS(3), v3);
  st_add("c21", DIMS(2, 1), c21);
  st_add("r13", DIMS(1, 3), r13);
  st_add("m23", DIMS(2, 3), m23);
  return st_write(file);
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_binary_broadcast(void) {
  ssm_st *st = common_st("binary.safetensors");
  ssm_graph *g = ssm_test_graph("t");
  ssm_value *v = op2(g, SSM_OP_ADD, f32(DIMS(2, 3)), weight(g, "x23", f32(DIMS(2, 3))),
                     weight(g, "v3", f32(DIMS(3))));
  EXPECT(st, g, v, 11, 22, 33, 14, 25, 36);

  g = ssm_test_graph("t");
  v = op2(g, SSM_OP_MUL, f32(DIMS(2, 3)), weight(g, "c21", f32(DIMS(2, 1))),
          weight(g, "r13", f32(DIMS(1, 3))));
  EXPECT(st, g, v, 10, 14, 22, 15, 21, 33);

  g = ssm_test_graph("t");
  v = op2(g, SSM_OP_SUB, f32(DIMS(2, 3)), weight(g, "x23", f32(DIMS(2, 3))), constant(g, 1.5));
  EXPECT(st, g, v, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5);

  g = ssm_test_graph("t");
  v = op2(g, SSM_OP_DIV, f32(DIMS(3)), constant(g, 3), weight(g, "v3", f32(DIMS(3))));
  EXPECT(st, g, v, 0.3, 0.15, 0.1);

  /* both operands stretched, and a rank-3 result from rank-2 operands */
  g = ssm_test_graph("t");
  v = op2(g, SSM_OP_SUB, f32(DIMS(1, 2, 3)), weight(g, "r13", f32(DIMS(1, 3))),
          weight(g, "c21", f32(DIMS(2, 1))));
  EXPECT(st, g, v, 3, 5, 9, 2, 4, 8);

  g = ssm_test_graph("t");
  v = op2(g, SSM_OP_MUL, scalar, constant(g, 2), constant(g, -4));
  EXPECT(st, g, v, -8);
  ssm_st_close(st);
}

static void test_unary(void) {
  static const float u[] = {-30, -1, 0, 2.5, 25};
  static const float p[] = {0.25, 1, 4, 25};
  st_add("u", DIMS(5), u);
  st_add("p", DIMS(4), p);
  ssm_st *st = st_write("unary.safetensors");
  struct {
    ssm_op op;
    int positive; /* input p rather than u */
    double want[5];
  } cases[] = {
      {SSM_OP_NEG, 0, {30, 1, 0, -2.5, -25}},
      {SSM_OP_EXP, 0, {9.357622968840175e-14, 0.36787944117144233, 1, 12.182493960703473,
                       72004899337.38588}},
      {SSM_OP_LOG, 1, {-1.3862943611198906, 0, 1.3862943611198906, 3.2188758248682006}},
      {SSM_OP_SOFTPLUS, 0, {9.357622968839737e-14, 0.31326168751822286, 0.6931471805599453,
                            2.5788897342925496, 25}},
      {SSM_OP_SILU, 0, {-2.8072868906517896e-12, -0.2689414213699951, 0, 2.3103545499468914,
                        24.9999999996528}},
      {SSM_OP_SIGMOID, 0, {9.357622968839299e-14, 0.2689414213699951, 0.5, 0.9241418199787566,
                           0.999999999986112}},
      {SSM_OP_RELU, 0, {0, 0, 0, 2.5, 25}},
      {SSM_OP_SQRT, 1, {0.5, 1, 2, 5}},
      {SSM_OP_RSQRT, 1, {2, 1, 0.5, 0.2}},
      {SSM_OP_SQUARE, 0, {900, 1, 0, 6.25, 625}},
      {SSM_OP_TANH, 0, {-1, -0.7615941559557649, 0, 0.9866142981514303, 1}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int len = cases[i].positive ? 4 : 5;
    ssm_graph *g = ssm_test_graph("t");
    ssm_type t = f32((int64_t[]){len}, 1);
    ssm_value *x = weight(g, cases[i].positive ? "p" : "u", t);
    /* relative 1e-6 even for tiny values such as softplus(-30) */
    expect_on(NULL, st, g, op1(g, cases[i].op, t, x), NULL, cases[i].want, (size_t)len, 1,
              __LINE__);
  }
  /* past 20 softplus is x, which matters where exp overflows */
  ssm_graph *g = ssm_test_graph("t");
  ssm_value *big = op1(g, SSM_OP_SOFTPLUS, scalar, constant(g, 1000));
  EXPECT(st, g, big, 1000);
  ssm_st_close(st);
}

static ssm_value *reduce(ssm_graph *g, ssm_value *x, const char *kind, int axis) {
  ssm_type t = x->type;
  t.dims[axis] = 1;
  ssm_node *n = node(g, SSM_OP_REDUCE, t, 1, x, NULL, NULL, NULL);
  ssm_node_set_str(g, n, "kind", kind);
  ssm_node_set_int(g, n, "axis", axis);
  return n->result;
}

static void test_reduce(void) {
  ssm_st *st = common_st("reduce.safetensors");
  struct {
    const char *tensor, *kind;
    int axis;
    double want[3];
  } cases[] = {
      {"x23", "sum", 0, {5, 7, 9}},        {"x23", "sum", 1, {6, 15}},
      {"x23", "mean", 0, {2.5, 3.5, 4.5}}, {"x23", "mean", 1, {2, 5}},
      {"m23", "max", 0, {-1, -5, 3}},      {"m23", "max", 1, {3, -4}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ssm_graph *g = ssm_test_graph("t");
    ssm_value *v = reduce(g, weight(g, cases[i].tensor, f32(DIMS(2, 3))), cases[i].kind,
                          cases[i].axis);
    expect_on(NULL, st, g, v, NULL, cases[i].want, cases[i].axis ? 2 : 3, 0, __LINE__);
  }
  ssm_graph *g = ssm_test_graph("t");
  output(g, reduce(g, weight(g, "x23", f32(DIMS(2, 3))), "median", 0));
  SSM_ASSERT_ERR(run_fresh(st, g, NULL, NULL, 0), "unknown reduce kind 'median'");
  ssm_st_close(st);
}

static void test_rmsnorm(void) {
  static const float x[] = {1, 2, 3, 4, -2, 0, 2, 4};
  static const float w[] = {1, 0.5, -1, 2};
  st_add("x", DIMS(2, 4), x);
  st_add("w", DIMS(4), w);
  ssm_st *st = st_write("rmsnorm.safetensors");
  ssm_graph *g = ssm_test_graph("t");
  ssm_node *n = node(g, SSM_OP_RMSNORM, f32(DIMS(2, 4)), 1, weight(g, "x", f32(DIMS(2, 4))),
                     NULL, NULL, NULL);
  ssm_node_set_float(g, n, "eps", 1e-5);
  /* row 0: mean square 7.5, row 1: 6 */
  EXPECT(st, g, n->result, 0.3651481282381064, 0.7302962564762128, 1.0954443847143192,
         1.4605925129524255, -0.8164959005147592, 0, 0.8164959005147592, 1.6329918010295184);

  g = ssm_test_graph("t");
  n = node(g, SSM_OP_RMSNORM, f32(DIMS(2, 4)), 2, weight(g, "x", f32(DIMS(2, 4))),
           weight(g, "w", f32(DIMS(4))), NULL, NULL);
  ssm_node_set_float(g, n, "eps", 0.5); /* large enough to matter */
  EXPECT(st, g, n->result, 0.35355339059327373, 0.35355339059327373, -1.0606601717798212,
         2.82842712474619, -0.7844645405527362, 0, -0.7844645405527362, 3.1378581622109447);
  ssm_st_close(st);
}

static void test_data_movement(void) {
  static float t234[24];
  for (int i = 0; i < 24; i++) t234[i] = (float)i;
  st_add("t234", DIMS(2, 3, 4), t234);
  st_add("x23", DIMS(2, 3), x23);
  st_add("c21", DIMS(2, 1), c21);
  st_add("r13", DIMS(1, 3), r13);
  ssm_st *st = st_write("movement.safetensors");

  ssm_graph *g = ssm_test_graph("t");
  ssm_node *n = node(g, SSM_OP_SLICE, f32(DIMS(2, 2)), 1, weight(g, "x23", f32(DIMS(2, 3))),
                     NULL, NULL, NULL);
  ssm_node_set_int(g, n, "axis", 1);
  ssm_node_set_int(g, n, "start", 1);
  ssm_node_set_int(g, n, "len", 2);
  EXPECT(st, g, n->result, 2, 3, 5, 6);

  g = ssm_test_graph("t");
  n = node(g, SSM_OP_SLICE, f32(DIMS(1, 3)), 1, weight(g, "x23", f32(DIMS(2, 3))), NULL,
           NULL, NULL);
  ssm_node_set_int(g, n, "axis", 0);
  ssm_node_set_int(g, n, "start", 1);
  ssm_node_set_int(g, n, "len", 1);
  EXPECT(st, g, n->result, 4, 5, 6);

  g = ssm_test_graph("t");
  n = node(g, SSM_OP_CONCAT, f32(DIMS(2, 4)), 2, weight(g, "x23", f32(DIMS(2, 3))),
           weight(g, "c21", f32(DIMS(2, 1))), NULL, NULL);
  ssm_node_set_int(g, n, "axis", 1);
  EXPECT(st, g, n->result, 1, 2, 3, 2, 4, 5, 6, 3);

  g = ssm_test_graph("t");
  n = node(g, SSM_OP_CONCAT, f32(DIMS(4, 3)), 3, weight(g, "r13", f32(DIMS(1, 3))),
           weight(g, "x23", f32(DIMS(2, 3))), weight(g, "r13", f32(DIMS(1, 3))), NULL);
  ssm_node_set_int(g, n, "axis", 0);
  EXPECT(st, g, n->result, 5, 7, 11, 1, 2, 3, 4, 5, 6, 5, 7, 11);

  g = ssm_test_graph("t");
  ssm_value *v = op1(g, SSM_OP_RESHAPE, f32(DIMS(3, 1, 2)), weight(g, "x23", f32(DIMS(2, 3))));
  v = op2(g, SSM_OP_ADD, f32(DIMS(3, 1, 2)), v, constant(g, 0)); /* uses the shape */
  EXPECT(st, g, v, 1, 2, 3, 4, 5, 6);

  g = ssm_test_graph("t");
  n = node(g, SSM_OP_TRANSPOSE, f32(DIMS(3, 2)), 1, weight(g, "x23", f32(DIMS(2, 3))), NULL,
           NULL, NULL);
  ssm_node_set_ints(g, n, "perm", 2, (int64_t[]){1, 0});
  EXPECT(st, g, n->result, 1, 4, 2, 5, 3, 6);

  /* perm [2,0,1]: y[i,j,k] = x[j,k,i] */
  g = ssm_test_graph("t");
  n = node(g, SSM_OP_TRANSPOSE, f32(DIMS(4, 2, 3)), 1, weight(g, "t234", f32(DIMS(2, 3, 4))),
           NULL, NULL, NULL);
  ssm_node_set_ints(g, n, "perm", 3, (int64_t[]){2, 0, 1});
  double want[24];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 3; k++) want[(i * 2 + j) * 3 + k] = j * 12 + k * 4 + i;
  expect_on(NULL, st, g, n->result, NULL, want, 24, 0, __LINE__);
  ssm_st_close(st);
}

static void test_embed(void) {
  static const float table[] = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32};
  static float big[2000];
  st_add("e", DIMS(4, 3), table);
  st_add("big", DIMS(1000, 2), big);
  ssm_st *st = st_write("embed.safetensors");

  ssm_graph *g = ssm_test_graph("t");
  ssm_value *ids = src(g, SSM_OP_INPUT, "tokens", i32(DIMS(3)));
  ssm_value *v = op2(g, SSM_OP_EMBED, f32(DIMS(3, 3)), weight(g, "e", f32(DIMS(4, 3))), ids);
  expect_on(NULL, st, g, v, (int32_t[]){2, 0, 3},
            (double[]){20, 21, 22, 0, 1, 2, 30, 31, 32}, 9, 0, __LINE__);

  for (int k = 0; k < 2; k++) {
    g = ssm_test_graph("t");
    ids = src(g, SSM_OP_INPUT, "tokens", i32(DIMS(2)));
    output(g, op2(g, SSM_OP_EMBED, f32(DIMS(2, 2)), weight(g, "big", f32(DIMS(1000, 2))), ids));
    float out[4];
    SSM_ASSERT_ERR(run_fresh(st, g, k ? (int32_t[]){-1, 5} : (int32_t[]){5, 1234}, out, 4),
                   k ? "token id -1 out of range [0, 1000)" : "token id 1234 out of range [0, 1000)");
  }
  ssm_st_close(st);
}

static void test_matmul(void) {
  float x[15], w[20];
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 5; k++) x[i * 5 + k] = (float)(i * 5 + k + 1);
  for (int j = 0; j < 4; j++)
    for (int k = 0; k < 5; k++) w[j * 5 + k] = (float)(j - k) * 0.5f;
  st_add("x", DIMS(3, 5), x);
  st_add("w", DIMS(4, 5), w);
  st_add("x3", DIMS(1, 3, 5), x);
  ssm_st *st = st_write("matmul.safetensors");
  ssm_graph *g = ssm_test_graph("t");
  ssm_value *v = op2(g, SSM_OP_MATMUL, f32(DIMS(3, 4)), weight(g, "x", f32(DIMS(3, 5))),
                     weight(g, "w", f32(DIMS(4, 5))));
  EXPECT(st, g, v, -20, -12.5, -5, 2.5, -45, -25, -5, 15, -70, -37.5, -5, 27.5);
  g = ssm_test_graph("t");
  v = op2(g, SSM_OP_MATMUL, f32(DIMS(1, 3, 4)), weight(g, "x3", f32(DIMS(1, 3, 5))),
          weight(g, "w", f32(DIMS(4, 5))));
  EXPECT(st, g, v, -20, -12.5, -5, 2.5, -45, -25, -5, 15, -70, -37.5, -5, 27.5);
  ssm_st_close(st);
}

/* ---- conv1d_causal: C=2, K=3 over a 5-step sequence --------------------------- */

static const float conv_x[5][2] = {{1, 2}, {3, -1}, {0.5, 4}, {-2, 1}, {2, 2}};
static const float conv_w[2][3] = {{0.5, -1, 2}, {1, 0.25, -0.5}};
static const float conv_b[2] = {0.1f, -0.2f};

/* PyTorch's conv1d with padding K-1, truncated to T: the direct formula. */
static void conv_direct(int with_bias, double y[5][2]) {
  for (int t = 0; t < 5; t++)
    for (int c = 0; c < 2; c++) {
      double acc = with_bias ? conv_b[c] : 0;
      for (int k = 0; k < 3; k++)
        if (t + k - 2 >= 0) acc += (double)conv_w[c][k] * conv_x[t + k - 2][c];
      y[t][c] = acc;
    }
}

/* Runs conv1d_causal over steps [from, from+len) of conv_x on `c`. */
static void conv_run(ssm_cpu *c, int from, int len, int with_bias, float *out) {
  char name[32];
  snprintf(name, sizeof name, "x%d%d", from, from + len);
  ssm_graph *g = ssm_test_graph("conv");
  ssm_value *x = weight(g, name, f32((int64_t[]){len, 2}, 2));
  ssm_value *s = state(g, "conv", f32(DIMS(2, 2)));
  ssm_value *w = weight(g, "w", f32(DIMS(2, 3)));
  ssm_value *b = with_bias ? weight(g, "b", f32(DIMS(2))) : NULL;
  ssm_node *n = node(g, SSM_OP_CONV1D, f32((int64_t[]){len, 2}, 2), with_bias ? 4 : 3, x, s, w, b);
  output(g, n->result);
  SSM_ASSERT_OK(ssm_cpu_run(c, g, NULL, out, (size_t)len * 2));
  ssm_graph_destroy(g);
}

/* A graph whose output is state `name` of type t. */
static void read_state(ssm_cpu *c, const char *name, ssm_type t, float *out) {
  ssm_graph *g = ssm_test_graph("peek");
  output(g, state(g, name, t));
  SSM_ASSERT_OK(ssm_cpu_run(c, g, NULL, out, (size_t)ssm_type_numel(&t)));
  ssm_graph_destroy(g);
}

static void test_conv1d(void) {
  static char names[5][6][32];
  for (int from = 0; from < 5; from++)
    for (int len = 1; from + len <= 5; len++) {
      snprintf(names[from][len], sizeof names[0][0], "x%d%d", from, from + len);
      st_add(names[from][len], (int64_t[]){len, 2}, 2, conv_x[from]);
    }
  st_add("w", DIMS(2, 3), &conv_w[0][0]);
  st_add("b", DIMS(2), conv_b);
  ssm_st *st = st_write("conv.safetensors");
  ssm_cpu *c;
  SSM_ASSERT_OK(ssm_cpu_create(st, &c));
  double want[5][2];
  float got[10], s[4];

  for (int with_bias = 1; with_bias >= 0; with_bias--) {
    conv_direct(with_bias, want);
    /* T=3, then T=1 twice, carrying the state */
    ssm_cpu_reset(c);
    conv_run(c, 0, 3, with_bias, got);
    conv_run(c, 3, 1, with_bias, got + 6);
    conv_run(c, 4, 1, with_bias, got + 8);
    check_values(got, &want[0][0], 10, 0, __LINE__);
    read_state(c, "conv", f32(DIMS(2, 2)), s);
    check_values(s, (double[]){-2, 1, 2, 2}, 4, 0, __LINE__);
    /* T=3 then T=2 equals T=5 in one go */
    ssm_cpu_reset(c);
    conv_run(c, 0, 3, with_bias, got);
    conv_run(c, 3, 2, with_bias, got + 6);
    check_values(got, &want[0][0], 10, 0, __LINE__);
    ssm_cpu_reset(c);
    conv_run(c, 0, 5, with_bias, got);
    check_values(got, &want[0][0], 10, 0, __LINE__);
  }
  ssm_cpu_reset(c);
  read_state(c, "conv", f32(DIMS(2, 2)), s);
  check_values(s, (double[]){0, 0, 0, 0}, 4, 0, __LINE__);
  ssm_cpu_destroy(c);
  ssm_st_close(st);
}

/* ---- scan: T=4, D=2, N=3 with a [T,D,N], b and c [T,1,N] ----------------------- */

enum { ST = 4, SD = 2, SN = 3 };
static float scan_a[ST][SD][SN], scan_b[ST][1][SN], scan_c[ST][1][SN];

/* y for steps [from, from+len) on `c`; `a_const` replaces a by a scalar. */
static void scan_run(ssm_cpu *c, int from, int len, double a_const, float *out) {
  static const char *an[] = {"a0", "a1", "a2", "a3"}, *bn[] = {"b0", "b1", "b2", "b3"},
                    *cn[] = {"c0", "c1", "c2", "c3"};
  ssm_graph *g = ssm_test_graph("scan");
  int all = len == ST;
  ssm_value *a = a_const ? constant(g, a_const)
                         : weight(g, all ? "a" : an[from], f32((int64_t[]){len, SD, SN}, 3));
  ssm_value *b = weight(g, all ? "b" : bn[from], f32((int64_t[]){len, 1, SN}, 3));
  ssm_value *cc = weight(g, all ? "c" : cn[from], f32((int64_t[]){len, 1, SN}, 3));
  ssm_value *h = state(g, "ssm", f32(DIMS(SD, SN)));
  ssm_node *n = node(g, SSM_OP_SCAN, f32((int64_t[]){len, SD}, 2), 4, a, b, cc, h);
  output(g, n->result);
  SSM_ASSERT_OK(ssm_cpu_run(c, g, NULL, out, (size_t)len * SD));
  ssm_graph_destroy(g);
}

static void test_scan(void) {
  for (int t = 0; t < ST; t++)
    for (int n = 0; n < SN; n++) {
      for (int d = 0; d < SD; d++) scan_a[t][d][n] = 0.3f + 0.1f * (float)((t + 2 * d + n) % 5);
      scan_b[t][0][n] = (float)(n + 1) - 0.5f * (float)t;
      scan_c[t][0][n] = 0.25f * (float)(t + 1) - (float)n;
    }
  static const char *an[] = {"a0", "a1", "a2", "a3"}, *bn[] = {"b0", "b1", "b2", "b3"},
                    *cn[] = {"c0", "c1", "c2", "c3"};
  st_add("a", DIMS(ST, SD, SN), &scan_a[0][0][0]);
  st_add("b", DIMS(ST, 1, SN), &scan_b[0][0][0]);
  st_add("c", DIMS(ST, 1, SN), &scan_c[0][0][0]);
  for (int t = 0; t < ST; t++) {
    st_add(an[t], DIMS(1, SD, SN), &scan_a[t][0][0]);
    st_add(bn[t], DIMS(1, 1, SN), &scan_b[t][0][0]);
    st_add(cn[t], DIMS(1, 1, SN), &scan_c[t][0][0]);
  }
  ssm_st *st = st_write("scan.safetensors");

  /* the recurrence unrolled by hand */
  double h[SD][SN] = {{0}}, want[ST * SD];
  for (int t = 0; t < ST; t++)
    for (int d = 0; d < SD; d++) {
      double y = 0;
      for (int n = 0; n < SN; n++) {
        h[d][n] = scan_a[t][d][n] * h[d][n] + scan_b[t][0][n];
        y += scan_c[t][0][n] * h[d][n];
      }
      want[t * SD + d] = y;
    }

  ssm_cpu *c;
  SSM_ASSERT_OK(ssm_cpu_create(st, &c));
  float got[ST * SD], hs[SD * SN];
  scan_run(c, 0, ST, 0, got);
  check_values(got, want, ST * SD, 0, __LINE__);
  read_state(c, "ssm", f32(DIMS(SD, SN)), hs);
  check_values(hs, &h[0][0], SD * SN, 0, __LINE__);

  ssm_cpu_reset(c);
  for (int t = 0; t < ST; t++) scan_run(c, t, 1, 0, got + t * SD);
  check_values(got, want, ST * SD, 0, __LINE__);
  read_state(c, "ssm", f32(DIMS(SD, SN)), hs);
  check_values(hs, &h[0][0], SD * SN, 0, __LINE__);

  /* a rank-0 a: h = h/2 + b */
  double h2[SN] = {0}, want2[ST * SD];
  for (int t = 0; t < ST; t++) {
    double y = 0;
    for (int n = 0; n < SN; n++) {
      h2[n] = 0.5 * h2[n] + scan_b[t][0][n];
      y += scan_c[t][0][n] * h2[n];
    }
    want2[t * SD] = want2[t * SD + 1] = y;
  }
  ssm_cpu_reset(c);
  scan_run(c, 0, ST, 0.5, got);
  check_values(got, want2, ST * SD, 0, __LINE__);
  ssm_cpu_destroy(c);
  ssm_st_close(st);
}

/* ---- attention: HQ=2 query heads sharing HKV=1 kv head, D=2, a cache of 4 -------- */

/* q is the same each step (head 0 reads dim 0, head 1 dim 1); with scale 2
 * the scores are 0 or ln 3, so the softmax weights are fractions. */
static const float att_q[3][2][2] = {{{1, 0}, {0, 1}}, {{1, 0}, {0, 1}}, {{1, 0}, {0, 1}}};
#define LN3_2 0.54930614433405484f /* ln(3)/2 */
static const float att_k[3][1][2] = {{{0, 0}}, {{LN3_2, 0}}, {{0, LN3_2}}};
static const float att_v[3][1][2] = {{{1, 2}}, {{5, -2}}, {{-3, 6}}};

/* attention over steps [from, from+len); returns the status of the run. */
static char att_names[3][4][3][8]; /* [from][len][q,k,v] */

static ssm_status att_run(ssm_cpu *c, int from, int len, float *out) {
  ssm_graph *g = ssm_test_graph("attention");
  int heads[3] = {2, 1, 1};
  ssm_value *args[6];
  for (int i = 0; i < 3; i++)
    args[i] = weight(g, att_names[from][len][i], f32((int64_t[]){len, heads[i], 2}, 3));
  args[3] = state(g, "kc", f32(DIMS(4, 1, 2)));
  args[4] = state(g, "vc", f32(DIMS(4, 1, 2)));
  args[5] = src(g, SSM_OP_INPUT, "pos", i32(DIMS(1)));
  src(g, SSM_OP_INPUT, "tokens", i32((int64_t[]){len}, 1)); /* the run's token count */
  ssm_node *n = ssm_graph_append(g, SSM_OP_ATTENTION, &scalar, 6, args);
  ssm_node_set_float(g, n, "scale", 2);
  n->result->type = f32((int64_t[]){len, 2, 2}, 3);
  output(g, n->result);
  SSM_ASSERT_OK(ssm_graph_verify(g));
  static const int32_t tokens[3] = {0, 0, 0};
  ssm_status s = ssm_cpu_run(c, g, tokens, out, (size_t)len * 4);
  ssm_graph_destroy(g);
  return s;
}

static void test_attention(void) {
  for (int from = 0; from < 3; from++)
    for (int len = 1; from + len <= 3; len++) {
      char(*nm)[8] = att_names[from][len];
      snprintf(nm[0], 8, "q%d%d", from, len);
      snprintf(nm[1], 8, "k%d%d", from, len);
      snprintf(nm[2], 8, "v%d%d", from, len);
      st_add(nm[0], (int64_t[]){len, 2, 2}, 3, &att_q[from][0][0]);
      st_add(nm[1], (int64_t[]){len, 1, 2}, 3, &att_k[from][0][0]);
      st_add(nm[2], (int64_t[]){len, 1, 2}, 3, &att_v[from][0][0]);
    }
  ssm_st *st = st_write("attention.safetensors");
  /* step 0: v0 for both heads; step 1: head 0 weights 1/4, 3/4 (scores 0,
   * ln 3), head 1 1/2, 1/2; step 2: head 0 1/5, 3/5, 1/5, head 1 1/5, 1/5, 3/5 */
  static const double want[12] = {1, 2, 1, 2, 4, -1, 3, 0, 2.6, 0.4, -0.6, 3.6};
  ssm_cpu *c;
  SSM_ASSERT_OK(ssm_cpu_create(st, &c));
  float got[12], cache[8];
  /* prefill of 2, then a decode step, carrying the cache and the position */
  SSM_ASSERT_OK(att_run(c, 0, 2, got));
  CU_ASSERT_EQUAL(ssm_cpu_position(c), 2);
  SSM_ASSERT_OK(att_run(c, 2, 1, got + 8));
  CU_ASSERT_EQUAL(ssm_cpu_position(c), 3);
  check_values(got, want, 12, 0, __LINE__);
  read_state(c, "kc", f32(DIMS(4, 1, 2)), cache);
  check_values(cache, (double[]){0, 0, LN3_2, 0, 0, LN3_2, 0, 0}, 8, 0, __LINE__);
  read_state(c, "vc", f32(DIMS(4, 1, 2)), cache);
  check_values(cache, (double[]){1, 2, 5, -2, -3, 6, 0, 0}, 8, 0, __LINE__);
  /* past the cache: refused before anything runs, the position unchanged */
  SSM_ASSERT_ERR(att_run(c, 0, 2, got), "position 4 is past --max-seq 4");
  CU_ASSERT_EQUAL(ssm_cpu_position(c), 3);
  /* all three in one run, and token by token, after a reset */
  ssm_cpu_reset(c);
  CU_ASSERT_EQUAL(ssm_cpu_position(c), 0);
  SSM_ASSERT_OK(att_run(c, 0, 3, got));
  check_values(got, want, 12, 0, __LINE__);
  ssm_cpu_reset(c);
  for (int t = 0; t < 3; t++) SSM_ASSERT_OK(att_run(c, t, 1, got + 4 * t));
  check_values(got, want, 12, 0, __LINE__);
  ssm_cpu_destroy(c);
  ssm_st_close(st);
}

/* ---- delta_rule: T=3, 1 key head, 2 heads, Dk = Dv = 2 ----------------------- */

/* Dyadic inputs, so that every value below is exact in f32; the wanted
 * values are transformers' torch_recurrent_gated_delta_rule on them, in
 * Python's exact fractions (q, k repeated to the 2 heads). */
static const float dl_q[3][1][2] = {{{1, 0.5f}}, {{0, 1}}, {{-0.5f, 1}}};
static const float dl_k[3][1][2] = {{{1, 0}}, {{0.5f, 0.5f}}, {{0, 1}}};
static const float dl_v[3][2][2] = {{{1, 2}, {-0.5f, 1}}, {{2, 0}, {1, 1}}, {{0, -1}, {1.5f, 0.5f}}};
static const float dl_g[3][2] = {{0.5f, 1}, {0.75f, 0.5f}, {1, 0.75f}};
static const float dl_gk[3][2][2] = {{{0.5f, 1}, {1, 0.5f}}, {{0.75f, 0.5f}, {1, 1}},
                                     {{1, 0.25f}, {0.5f, 0.75f}}};
static const float dl_beta[3][2] = {{1, 0.5f}, {0.5f, 1}, {1, 0.25f}};

/* o for steps [from, from+len) on `c`, the decay per key channel or not */
static void delta_run(ssm_cpu *c, int from, int len, int per_channel, float *out) {
  char nm[6][8];
  static const char *base[6] = {"dq", "dk", "dv", "dg", "dgk", "db"};
  for (int i = 0; i < 6; i++) snprintf(nm[i], sizeof nm[i], "%s%d%d", base[i], from, len);
  ssm_graph *g = ssm_test_graph("delta");
  ssm_value *q = weight(g, nm[0], f32((int64_t[]){len, 1, 2}, 3));
  ssm_value *k = weight(g, nm[1], f32((int64_t[]){len, 1, 2}, 3));
  ssm_value *v = weight(g, nm[2], f32((int64_t[]){len, 2, 2}, 3));
  ssm_value *d = per_channel ? weight(g, nm[4], f32((int64_t[]){len, 2, 2}, 3))
                             : weight(g, nm[3], f32((int64_t[]){len, 2}, 2));
  ssm_value *b = weight(g, nm[5], f32((int64_t[]){len, 2}, 2));
  ssm_value *s = state(g, "S", f32(DIMS(2, 2, 2)));
  ssm_value *args[6] = {q, k, v, d, b, s};
  ssm_type t = f32((int64_t[]){len, 2, 2}, 3);
  output(g, ssm_graph_append(g, SSM_OP_DELTA, &t, 6, args)->result);
  SSM_ASSERT_OK(ssm_cpu_run(c, g, NULL, out, (size_t)len * 4));
  ssm_graph_destroy(g);
}

static void test_delta(void) {
  static const char *base[6] = {"dq", "dk", "dv", "dg", "dgk", "db"};
  static const float *src[6] = {&dl_q[0][0][0], &dl_k[0][0][0], &dl_v[0][0][0], &dl_g[0][0],
                                &dl_gk[0][0][0], &dl_beta[0][0]};
  static const int per_step[6] = {2, 2, 4, 2, 4, 2};
  static char names[3][4][6][8];
  for (int from = 0; from < 3; from++)
    for (int len = 1; from + len <= 3; len++)
      for (int i = 0; i < 6; i++) {
        snprintf(names[from][len][i], 8, "%s%d%d", base[i], from, len);
        int64_t dims[3] = {len, i == 2 || i == 4 ? 2 : i < 2 ? 1 : 2, 2};
        int rank = i == 3 || i == 5 ? 2 : 3;
        st_add(names[from][len][i], dims, rank, src[i] + from * per_step[i]);
      }
  ssm_st *st = st_write("delta.safetensors");
  static const double want[2][12] = {
      {1, 2, -0.25, 0.5, 0.40625, -0.1875, 0.53125, 0.4375, -0.578125, -1.65625, 0.521484375,
       0.11328125},
      {1, 2, -0.25, 0.5, 0.40625, -0.1875, 0.5625, 0.375, -0.578125, -1.65625, 0.61328125,
       0.1171875}};
  static const double want_s[2][8] = {
      {1.15625, 1.3125, 0, -1, 0.3046875, 0.515625, 0.673828125, 0.37109375},
      {1.15625, 1.3125, 0, -1, 0.15625, 0.4375, 0.69140625, 0.3359375}};
  ssm_cpu *c;
  SSM_ASSERT_OK(ssm_cpu_create(st, &c));
  float got[12], s[8];
  for (int pc = 0; pc < 2; pc++) {
    /* all three steps in one run */
    ssm_cpu_reset(c);
    delta_run(c, 0, 3, pc, got);
    check_values(got, want[pc], 12, 0, __LINE__);
    read_state(c, "S", f32(DIMS(2, 2, 2)), s);
    check_values(s, want_s[pc], 8, 0, __LINE__);
    /* two, then one, the state carried */
    ssm_cpu_reset(c);
    delta_run(c, 0, 2, pc, got);
    delta_run(c, 2, 1, pc, got + 8);
    check_values(got, want[pc], 12, 0, __LINE__);
    read_state(c, "S", f32(DIMS(2, 2, 2)), s);
    check_values(s, want_s[pc], 8, 0, __LINE__);
  }
  ssm_cpu_destroy(c);
  ssm_st_close(st);
}

static void test_softmax_argmax(void) {
  static const float s[] = {1, 2, 3, 1000, 1001, 1002};
  static const float m[] = {1, 3, 3, 2, -1, -1, -1, -1};
  st_add("s", DIMS(2, 3), s);
  st_add("m", DIMS(2, 4), m);
  ssm_st *st = st_write("softmax.safetensors");
  ssm_graph *g = ssm_test_graph("t");
  ssm_value *v = op1(g, SSM_OP_SOFTMAX, f32(DIMS(2, 3)), weight(g, "s", f32(DIMS(2, 3))));
  EXPECT(st, g, v, 0.09003057317038046, 0.24472847105479767, 0.6652409557748219,
         0.09003057317038046, 0.24472847105479767, 0.6652409557748219);
  g = ssm_test_graph("t");
  v = op1(g, SSM_OP_ARGMAX, i32(DIMS(2)), weight(g, "m", f32(DIMS(2, 4))));
  EXPECT(st, g, v, 1, 0);
  ssm_st_close(st);
}

static void test_weights(void) {
  static const float a[] = {0, 1, -1, 0.6931471805599453f};
  static const float h[] = {1.00390625f, 3, -2}; /* 1 + 2^-8 rounds to 1 in bf16 */
  st_add("A_log", DIMS(2, 2), a);
  st_add("h", DIMS(3), h);
  st_add("x23", DIMS(2, 3), x23);
  ssm_st *st = st_write("weights.safetensors");
  ssm_cpu *c;
  SSM_ASSERT_OK(ssm_cpu_create(st, &c));

  ssm_graph *g = ssm_test_graph("t");
  ssm_value *v = weight(g, "A_log", f32(DIMS(2, 2)));
  ssm_node_set_str(g, v->def, "transform", "exp,neg");
  expect_on(c, st, g, v, NULL, (double[]){-1, -2.718281828459045, -0.36787944117144233, -2},
            4, 0, __LINE__);
  /* the untransformed tensor is kept apart from the transformed one */
  g = ssm_test_graph("t");
  expect_on(c, st, g, weight(g, "A_log", f32(DIMS(2, 2))), NULL,
            (double[]){0, 1, -1, 0.6931471805599453}, 4, 0, __LINE__);
  /* declared bf16: read at that dtype; the f32 declaration stays exact */
  g = ssm_test_graph("t");
  expect_on(c, st, g, weight(g, "h", ssm_type_make(SSM_BF16, 1, (int64_t[]){3})), NULL,
            (double[]){1, 3, -2}, 3, 1, __LINE__);
  g = ssm_test_graph("t");
  expect_on(c, st, g, weight(g, "h", f32(DIMS(3))), NULL, (double[]){1.00390625, 3, -2}, 3, 1,
            __LINE__);

  g = ssm_test_graph("t");
  output(g, weight(g, "x23", f32(DIMS(3, 2))));
  SSM_ASSERT_ERR(ssm_cpu_run(c, g, NULL, NULL, 0), "'x23'");
  ssm_graph_destroy(g);

  g = ssm_test_graph("t");
  output(g, weight(g, "missing.weight", f32(DIMS(3, 2))));
  SSM_ASSERT_ERR(ssm_cpu_run(c, g, NULL, NULL, 0), "missing.weight");
  ssm_graph_destroy(g);

  g = ssm_test_graph("t");
  v = weight(g, "A_log", f32(DIMS(2, 2)));
  ssm_node_set_str(g, v->def, "transform", "exp,cube");
  output(g, v);
  SSM_ASSERT_ERR(ssm_cpu_run(c, g, NULL, NULL, 0), "unknown transform op 'cube'");
  ssm_graph_destroy(g);
  ssm_cpu_destroy(c);

  g = ssm_test_graph("t");
  output(g, weight(g, "x23", f32(DIMS(2, 3))));
  SSM_ASSERT_ERR(run_fresh(NULL, g, NULL, NULL, 0), "no checkpoint");
  ssm_st_close(st);
}

static void test_run_errors(void) {
  ssm_cpu *c;
  SSM_ASSERT_OK(ssm_cpu_create(NULL, &c));
  ssm_graph *g = ssm_test_graph("one");
  output(g, state(g, "s", f32(DIMS(2, 2))));
  float out[6];
  SSM_ASSERT_OK(ssm_cpu_run(c, g, NULL, out, 4));
  SSM_ASSERT_ERR(ssm_cpu_run(c, g, NULL, out, 6), "output has 4 elements");
  ssm_graph_destroy(g);
  g = ssm_test_graph("two");
  output(g, state(g, "s", f32(DIMS(3, 2))));
  SSM_ASSERT_ERR(ssm_cpu_run(c, g, NULL, out, 6), "state 's' is declared f32[3,2] here but f32[2,2]");
  ssm_graph_destroy(g);

  g = ssm_test_graph("t");
  output(g, src(g, SSM_OP_INPUT, "positions", i32(DIMS(1))));
  SSM_ASSERT_ERR(ssm_cpu_run(c, g, (int32_t[]){0}, out, 1), "unknown input 'positions'");
  ssm_graph_destroy(g);

  g = ssm_test_graph("t");
  output(g, src(g, SSM_OP_INPUT, "tokens", i32(DIMS(2))));
  SSM_ASSERT_ERR(ssm_cpu_run(c, g, NULL, out, 2), "none were given");
  SSM_ASSERT_OK(ssm_cpu_run(c, g, (int32_t[]){7, -3}, out, 2));
  CU_ASSERT(out[0] == 7 && out[1] == -3);
  ssm_graph_destroy(g);
  ssm_cpu_destroy(c);
}

/* ---- a whole Mamba-1 against transformers ------------------------------------- */

typedef struct {
  ssm_graph *g;
  int64_t T;
} mb;

static ssm_type mt(int rank, int64_t d0, int64_t d1, int64_t d2) {
  return f32((int64_t[]){d0, d1, d2}, rank);
}
static ssm_value *mw(mb *m, const char *fmt, int layer, ssm_type t) {
  char name[128];
  snprintf(name, sizeof name, fmt, layer);
  return weight(m->g, name, t);
}
static ssm_value *mslice(mb *m, ssm_value *x, int64_t start, int64_t len) {
  ssm_node *n = node(m->g, SSM_OP_SLICE, mt(2, m->T, len, 0), 1, x, NULL, NULL, NULL);
  ssm_node_set_int(m->g, n, "axis", 1);
  ssm_node_set_int(m->g, n, "start", start);
  ssm_node_set_int(m->g, n, "len", len);
  return n->result;
}
static ssm_value *mrmsnorm(mb *m, ssm_value *x, ssm_value *w) {
  ssm_node *n = node(m->g, SSM_OP_RMSNORM, x->type, 2, x, w, NULL, NULL);
  ssm_node_set_float(m->g, n, "eps", 1e-5);
  return n->result;
}

/* Mamba-1 with H=64, I=128, N=16, R=4, K=4, V=1000, 2 layers, tied, conv bias. */
static ssm_graph *mamba1_graph(int64_t T) {
  enum { H = 64, I = 128, N = 16, R = 4, K = 4, V = 1000, L = 2 };
  mb m = {ssm_test_graph("mamba1"), T};
  ssm_graph *g = m.g;
  ssm_value *emb = weight(g, "backbone.embeddings.weight", mt(2, V, H, 0));
  ssm_value *x = op2(g, SSM_OP_EMBED, mt(2, T, H, 0), emb,
                     src(g, SSM_OP_INPUT, "tokens", i32(&m.T, 1)));
  for (int l = 0; l < L; l++) {
    const char *p = "backbone.layers.%d.";
    char f[160];
#define W(suffix, t) (snprintf(f, sizeof f, "%s%s", p, suffix), mw(&m, f, l, t))
    ssm_value *h = mrmsnorm(&m, x, W("norm.weight", mt(1, H, 0, 0)));
    ssm_value *xz = op2(g, SSM_OP_MATMUL, mt(2, T, 2 * I, 0), h,
                        W("mixer.in_proj.weight", mt(2, 2 * I, H, 0)));
    ssm_value *u = mslice(&m, xz, 0, I), *z = mslice(&m, xz, I, I);
    ssm_value *cw = op1(g, SSM_OP_RESHAPE, mt(2, I, K, 0),
                        W("mixer.conv1d.weight", mt(3, I, 1, K)));
    char sname[32];
    snprintf(sname, sizeof sname, "l%d.conv", l);
    ssm_value *conv_state = state(g, sname, mt(2, K - 1, I, 0));
    u = node(g, SSM_OP_CONV1D, mt(2, T, I, 0), 4, u, conv_state, cw,
             W("mixer.conv1d.bias", mt(1, I, 0, 0)))->result;
    u = op1(g, SSM_OP_SILU, u->type, u);
    ssm_value *dbc = op2(g, SSM_OP_MATMUL, mt(2, T, R + 2 * N, 0), u,
                         W("mixer.x_proj.weight", mt(2, R + 2 * N, I, 0)));
    ssm_value *dt = mslice(&m, dbc, 0, R), *B = mslice(&m, dbc, R, N);
    ssm_value *C = mslice(&m, dbc, R + N, N);
    dt = op2(g, SSM_OP_MATMUL, mt(2, T, I, 0), dt, W("mixer.dt_proj.weight", mt(2, I, R, 0)));
    dt = op2(g, SSM_OP_ADD, dt->type, dt, W("mixer.dt_proj.bias", mt(1, I, 0, 0)));
    dt = op1(g, SSM_OP_SOFTPLUS, dt->type, dt);
    /* layer 0 spells A = -exp(A_log) as ops, layer 1 as a load-time transform */
    ssm_value *A = W("mixer.A_log", mt(2, I, N, 0));
    if (l == 0) A = op1(g, SSM_OP_NEG, A->type, op1(g, SSM_OP_EXP, A->type, A));
    else ssm_node_set_str(g, A->def, "transform", "exp,neg");
    ssm_type tin = mt(3, T, I, N);
    ssm_value *dt3 = op1(g, SSM_OP_RESHAPE, mt(3, T, I, 1), dt);
    ssm_value *a = op1(g, SSM_OP_EXP, tin, op2(g, SSM_OP_MUL, tin, dt3, A));
    ssm_value *b = op2(g, SSM_OP_MUL, tin, dt3, op1(g, SSM_OP_RESHAPE, mt(3, T, 1, N), B));
    b = op2(g, SSM_OP_MUL, tin, b, op1(g, SSM_OP_RESHAPE, mt(3, T, I, 1), u));
    ssm_value *c3 = op1(g, SSM_OP_RESHAPE, mt(3, T, 1, N), C);
    snprintf(sname, sizeof sname, "l%d.ssm", l);
    ssm_value *y = node(g, SSM_OP_SCAN, mt(2, T, I, 0), 4, a, b, c3,
                        state(g, sname, mt(2, I, N, 0)))->result;
    ssm_value *du = op2(g, SSM_OP_MUL, u->type, u, W("mixer.D", mt(1, I, 0, 0)));
    y = op2(g, SSM_OP_MUL, y->type, op2(g, SSM_OP_ADD, y->type, y, du),
            op1(g, SSM_OP_SILU, z->type, z));
    ssm_value *o = op2(g, SSM_OP_MATMUL, mt(2, T, H, 0), y,
                       W("mixer.out_proj.weight", mt(2, H, I, 0)));
    x = op2(g, SSM_OP_ADD, x->type, x, o);
#undef W
  }
  x = mrmsnorm(&m, x, weight(g, "backbone.norm_f.weight", mt(1, H, 0, 0)));
  output(g, op2(g, SSM_OP_MATMUL, mt(2, T, V, 0), x, emb));
  return g;
}

static int argmax_row(const float *row, int n) {
  int best = 0;
  for (int j = 1; j < n; j++)
    if (row[j] > row[best]) best = j;
  return best;
}

/* Prefill the prompt, then decode each generated token but the last: every
 * row of logits within 1e-4 of transformers' (relative to max |logit|) and
 * the greedy tokens equal to model.generate's. */
static void test_mamba1_golden(void) {
  enum { V = 1000 };
  char *text, *raw;
  size_t n, nraw;
  SSM_ASSERT_OK(ssm_file_read(ssm_test_path("tests/data/mamba1_tiny/golden.json"), 0, &text, &n));
  SSM_ASSERT_OK(ssm_file_read(ssm_test_path("tests/data/mamba1_tiny/logits.f32"), 0, &raw, &nraw));
  cJSON *j = cJSON_Parse(text);
  CU_ASSERT_PTR_NOT_NULL_FATAL(j);
  int32_t prompt[64], gen[64];
  int np = 0, ng = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "prompt")) if (np < 64) prompt[np++] = it->valueint;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "generated")) if (ng < 64) gen[ng++] = it->valueint;
  cJSON_Delete(j);
  free(text);
  CU_ASSERT_FATAL(np > 0 && ng > 1 && nraw == (size_t)(np + ng - 1) * V * 4);
  const float *want = (const float *)raw;
  double max_abs = 0;
  for (size_t k = 0; k < nraw / 4; k++) max_abs = fmax(max_abs, fabs(want[k]));

  ssm_st *st;
  SSM_ASSERT_OK(ssm_st_open(ssm_test_path("tests/data/mamba1_tiny"), &st));
  ssm_cpu *c;
  SSM_ASSERT_OK(ssm_cpu_create(st, &c));
  float *got = malloc(sizeof(float) * (size_t)(np + ng) * V);
  ssm_graph *prefill = mamba1_graph(np), *decode = mamba1_graph(1);
  SSM_ASSERT_OK(ssm_cpu_run(c, prefill, prompt, got, (size_t)np * V));
  int32_t next = argmax_row(got + (np - 1) * V, V);
  for (int k = 0; k + 1 < ng; k++) {
    CU_ASSERT_EQUAL(next, gen[k]);
    SSM_ASSERT_OK(ssm_cpu_run(c, decode, &gen[k], got + (np + k) * V, V));
    next = argmax_row(got + (np + k) * V, V);
  }
  CU_ASSERT_EQUAL(next, gen[ng - 1]);
  double worst = 0;
  for (size_t k = 0; k < (size_t)(np + ng - 1) * V; k++)
    worst = fmax(worst, fabs(got[k] - want[k]) / max_abs);
  if (worst > 1e-4) fprintf(stderr, "\n  max relative logit error %g\n", worst);
  CU_ASSERT(worst <= 1e-4);

  /* token by token from a reset state gives the same logits as prefill */
  ssm_cpu_reset(c);
  float row[V];
  for (int k = 0; k < np; k++) {
    SSM_ASSERT_OK(ssm_cpu_run(c, decode, &prompt[k], row, V));
    double d = 0;
    for (int v = 0; v < V; v++) d = fmax(d, fabs(row[v] - got[k * V + v]) / max_abs);
    CU_ASSERT(d <= 1e-5);
  }
  ssm_graph_destroy(prefill);
  ssm_graph_destroy(decode);
  ssm_cpu_destroy(c);
  ssm_st_close(st);
  free(got);
  free(raw);
}

int main(void) {
  CU_TestInfo tests[] = {{"binary_broadcast", test_binary_broadcast},
                         {"unary", test_unary},
                         {"reduce", test_reduce},
                         {"rmsnorm", test_rmsnorm},
                         {"data_movement", test_data_movement},
                         {"embed", test_embed},
                         {"matmul", test_matmul},
                         {"conv1d_causal", test_conv1d},
                         {"scan", test_scan},
                         {"attention", test_attention}, {"delta_rule", test_delta},
                         {"softmax_argmax", test_softmax_argmax},
                         {"weights", test_weights},
                         {"run_errors", test_run_errors},
                         {"mamba1_golden", test_mamba1_golden},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("cpu", tests);
}
