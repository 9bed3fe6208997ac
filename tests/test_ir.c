/*
 * test_ir.c — the IR text form, shape rules and verifier.
 *
 * Round trips (print(parse(text)) == text) for every op in ops.def, for a
 * graph built with the builder API, for floats and escaped strings, and for
 * the golden files in tests/data/ir; parser and verifier errors with their
 * exact "file:line:col: message"; and a small deterministic fuzz (every
 * prefix of a golden file, random mutations, random junk) that must never
 * crash, which matters most under ASan.
 */
#include <math.h>
#include <string.h>

#include "ir/ir.h"
#include "testutil.h"

/* ---- helpers ----------------------------------------------------------- */

static int covered[SSM_OP_COUNT];

/* parse → verify OK → print == text; marks the ops it saw. */
static void check_roundtrip(const char *text) {
  ssm_graph *g = NULL;
  ssm_status s = ssm_graph_parse(text, "t.ssmir", &g);
  SSM_ASSERT_OK(s);
  if (!g) return;
  SSM_ASSERT_OK(ssm_graph_verify(g));
  char *out = ssm_test_print(g);
  if (strcmp(out, text)) fprintf(stderr, "\n--- want\n%s--- got\n%s", text, out);
  CU_ASSERT_STRING_EQUAL(out, text);
  for (ssm_node *n = g->first; n; n = n->next) covered[n->op] = 1;
  free(out);
  ssm_graph_destroy(g);
}

static void check_parse_err(const char *text, const char *want) {
  ssm_graph *g = (ssm_graph *)&g; /* must be cleared */
  SSM_ASSERT_ERR(ssm_graph_parse(text, "t.ssmir", &g), want);
  CU_ASSERT_PTR_NULL(g);
}

static void check_verify_err(const char *text, const char *want) {
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_graph_parse(text, "t.ssmir", &g));
  if (!g) return;
  SSM_ASSERT_ERR(ssm_graph_verify(g), want);
  ssm_graph_destroy(g);
}

/* ---- (a) every op round-trips ------------------------------------------ */

static const char *const op_texts[] = {
    "graph embed {\n"
    "  %0:i32[3] = input name=\"tokens\"\n"
    "  %1:f32[10,4] = weight name=\"emb\"\n"
    "  %2:f32[3,4] = embed %1, %0\n"
    "  %3:f32[4] = weight name=\"norm\" transform=\"1+\"\n"
    "  %4:f32[3,4] = rmsnorm %2, %3 eps=1e-05\n"
    "  %5:f32[3,4] = rmsnorm %4 eps=1e-06\n"
    "  %6:f32[6,4] = weight name=\"proj\"\n"
    "  %7:f32[3,6] = matmul %5, %6\n"
    "  %8:f32[2,3,6] = input name=\"batched\"\n"
    "  %9:f32[6,6] = weight name=\"sq\"\n"
    "  %10:f32[2,3,6] = matmul %8, %9\n"
    "  output %7, %10\n"
    "}\n",

    "graph elementwise {\n"
    "  %0:f32[2,3] = input name=\"x\"\n"
    "  %1:f32[3] = weight name=\"w\"\n"
    "  %2:f32[] = const value=0.5\n"
    "  %3:f32[2,3] = add %0, %1\n"
    "  %4:f32[2,3] = sub %3, %2\n"
    "  %5:f32[2,3] = mul %1, %4\n"
    "  %6:f32[2,3] = div %5, %0\n"
    "  %7:f32[2,3] = neg %6\n"
    "  %8:f32[2,3] = exp %7\n"
    "  %9:f32[2,3] = log %8\n"
    "  %10:f32[2,3] = softplus %9\n"
    "  %11:f32[2,3] = silu %10\n"
    "  %12:f32[2,3] = sigmoid %11\n"
    "  %13:f32[2,3] = relu %12\n"
    "  %14:f32[2,3] = sqrt %13\n"
    "  %15:f32[2,3] = rsqrt %14\n"
    "  %16:f32[2,3] = square %15\n"
    "  %17:f32[2,3] = tanh %16\n"
    "  %18:f32[4,1,3] = input name=\"y\"\n"
    "  %19:f32[4,2,3] = add %18, %17\n"
    "  output %19, %3\n"
    "}\n",

    "graph views {\n"
    "  %0:f32[2,3,4] = input name=\"x\"\n"
    "  %1:f32[2,1,4] = reduce %0 kind=\"sum\" axis=1\n"
    "  %2:f32[2,3,1] = reduce %0 kind=\"max\" axis=2\n"
    "  %3:f32[2,3,2] = slice %0 axis=2 start=1 len=2\n"
    "  %4:f32[2,3,7] = concat %0, %3, %2 axis=2\n"
    "  %5:f32[42] = reshape %4\n"
    "  %6:f32[6,7] = reshape %5\n"
    "  %7:f32[7,6] = transpose %6 perm=[1,0]\n"
    "  %8:f32[4,2,3] = transpose %0 perm=[2,0,1]\n"
    "  output %7, %8, %1\n"
    "}\n",

    "graph mixer {\n"
    "  %0:f32[2,8] = input name=\"x\"\n"
    "  %1:f32[3,8] = state name=\"conv\"\n"
    "  %2:f32[8,4] = weight name=\"conv.w\"\n"
    "  %3:f32[8] = weight name=\"conv.b\"\n"
    "  %4:f32[2,8] = conv1d_causal %0, %1, %2, %3\n"
    "  %5:f32[1,8] = state name=\"conv2\"\n"
    "  %6:f32[8,2] = weight name=\"conv2.w\"\n"
    "  %7:f32[2,8] = conv1d_causal %4, %5, %6\n"
    "  %8:f32[8,4] = state name=\"ssm\"\n"
    "  %9:f32[8,4] = weight name=\"A\" transform=\"-exp\"\n"
    "  %10:f32[2,8,1] = reshape %7\n"
    "  %11:f32[2,8,4] = mul %10, %9\n"
    "  %12:f32[2,8,4] = exp %11\n"
    "  %13:f32[2,1,4] = input name=\"B\"\n"
    "  %14:f32[2,8,4] = mul %10, %13\n"
    "  %15:f32[2,1,4] = input name=\"C\"\n"
    "  %16:f32[2,8] = scan %12, %14, %15, %8\n"
    "  output %16\n"
    "}\n",

    "graph attention {\n"
    "  %0:f32[3,6,24] = input name=\"q\"\n"
    "  %1:f32[3,2,24] = input name=\"k\"\n"
    "  %2:f32[3,2,24] = input name=\"v\"\n"
    "  %3:f32[16,2,24] = state name=\"l1.k_cache\"\n"
    "  %4:f32[16,2,24] = state name=\"l1.v_cache\"\n"
    "  %5:i32[1] = input name=\"pos\"\n"
    "  %6:f32[3,6,24] = attention %0, %1, %2, %3, %4, %5 scale=0.2041241452319315\n"
    "  output %6\n"
    "}\n",

    "graph batch {\n"
    "  %0:f32[3,6,24] = input name=\"q\"\n"
    "  %1:f32[3,2,24] = input name=\"k\"\n"
    "  %2:f32[3,2,24] = input name=\"v\"\n"
    "  %3:f32[3,16,2,24] = state name=\"slots.l1.k_cache\"\n"
    "  %4:f32[3,16,2,24] = state name=\"slots.l1.v_cache\"\n"
    "  %5:i32[3] = input name=\"pos\"\n"
    "  %6:f32[3,6,24] = rope %0, %5 theta=1e+04 dims=8 batch=1\n"
    "  %7:f32[3,6,24] = attention %6, %1, %2, %3, %4, %5 scale=0.2 window=4 batch=1\n"
    "  %8:f32[3,1] = positions %0, %5 batch=1\n"
    "  output %7, %8\n"
    "}\n",

    "graph delta {\n"
    "  %0:f32[3,2,8] = input name=\"q\"\n"
    "  %1:f32[3,2,8] = input name=\"k\"\n"
    "  %2:f32[3,4,6] = input name=\"v\"\n"
    "  %3:f32[3,4] = input name=\"g\"\n"
    "  %4:f32[3,4] = input name=\"beta\"\n"
    "  %5:f32[4,8,6] = state name=\"l0.delta\"\n"
    "  %6:f32[3,4,6] = delta_rule %0, %1, %2, %3, %4, %5\n"
    "  %7:f32[3,4,8] = input name=\"gk\"\n"
    "  %8:f32[4,8,6] = state name=\"l1.delta\"\n"
    "  %9:f32[3,4,6] = delta_rule %0, %1, %2, %7, %4, %8\n"
    "  output %6, %9\n"
    "}\n",

    "graph head {\n"
    "  %0:bf16[1,16] = input name=\"logits\"\n"
    "  %1:bf16[1,16] = softmax %0\n"
    "  %2:i32[1] = argmax %1\n"
    "  %3:f16[16] = input name=\"v\"\n"
    "  %4:i32[] = argmax %3\n"
    "  %5:f16[16] = silu %3\n"
    "  output %2, %4, %5\n"
    "}\n",

    "graph zoo {\n"
    "  %0:f32[3,4,8] = input name=\"x\"\n"
    "  %1:i32[1] = input name=\"pos\"\n"
    "  %2:f32[3,4,8] = rope %0, %1 theta=1e+04 dims=6\n"
    "  %3:f32[3,4,8] = rope %0, %1 theta=5e+05 dims=8 interleaved=1\n"
    "  %4:f32[3,1] = positions %0, %1\n"
    "  %5:f32[3,4,8] = minimum %2, %3\n"
    "  %6:f32[3,4,8] = maximum %5, %2\n"
    "  %7:f32[3,4,8] = gelu %6\n"
    "  %8:f32[3,4,8] = gelu_tanh %7\n"
    "  %9:f32[3,5] = input name=\"router\"\n"
    "  %10:i32[3,2] = topk %9 k=2\n"
    "  %11:f32[3,2] = gather %9, %10\n"
    "  %12:f32[3,6] = input name=\"h\"\n"
    "  %13:bf16[5,7,6] = weight name=\"experts.{*}.up\"\n"
    "  %14:f32[3,2,7] = matmul_sel %12, %13, %10\n"
    "  %15:f32[5,6,7] = weight name=\"experts.{*}.down\"\n"
    "  %16:f32[3,2,6] = matmul_sel %14, %15, %10\n"
    "  output %8, %4, %11, %16\n"
    "}\n",

    "graph sampler {\n"
    "  %0:f32[2,16] = input name=\"logits\"\n"
    "  %1:f32[8] = state name=\"sampler\"\n"
    "  %2:i32[1] = sample %0, %1\n"
    "  output %0, %2\n"
    "}\n",
};

static void test_every_op_roundtrips(void) {
  memset(covered, 0, sizeof covered);
  for (size_t i = 0; i < sizeof op_texts / sizeof op_texts[0]; i++) check_roundtrip(op_texts[i]);
  for (int o = 0; o < SSM_OP_COUNT; o++) {
    if (!covered[o]) fprintf(stderr, "\n  op '%s' has no round-trip test\n", ssm_op_info_get(o)->name);
    CU_ASSERT_TRUE(covered[o]);
  }
}

/* ---- the op table's per-op properties ------------------------------------ */

/* ops.def's flags and states columns, as the queries read them. */
static void test_op_queries(void) {
  static const struct {
    const char *name;
    int effects, view, nstates, states[SSM_MAX_STATE_OPERANDS];
  } want[] = {
      {"scan", 1, 0, 1, {3}},         {"conv1d_causal", 1, 0, 1, {1}},
      {"attention", 1, 0, 2, {3, 4}}, {"sample", 1, 0, 1, {1}},
      {"delta_rule", 1, 0, 1, {5}},
      {"output", 1, 0, 0, {0}},       {"reshape", 0, 1, 0, {0}},
      {"slice", 0, 1, 0, {0}},        {"transpose", 0, 1, 0, {0}},
      {"matmul", 0, 0, 0, {0}},       {"add", 0, 0, 0, {0}},
      {"state", 0, 0, 0, {0}},        {"concat", 0, 0, 0, {0}},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    ssm_op op = ssm_op_lookup(want[i].name, strlen(want[i].name));
    CU_ASSERT_NOT_EQUAL_FATAL(op, SSM_OP_COUNT);
    int slots[SSM_MAX_STATE_OPERANDS] = {-1, -1};
    int ns = ssm_op_state_operands(op, slots);
    int ok = ssm_op_has_effects(op) == want[i].effects && ssm_op_is_view(op) == want[i].view &&
             ns == want[i].nstates;
    for (int j = 0; ok && j < ns; j++) ok = slots[j] == want[i].states[j];
    if (!ok) fprintf(stderr, "\n  op '%s': effects %d view %d, %d states\n", want[i].name,
                     ssm_op_has_effects(op), ssm_op_is_view(op), ns);
    CU_ASSERT(ok);
  }
  /* across the table: a state operand is an operand, and updating it is an effect */
  int effects = 0, views = 0;
  for (int o = 0; o < SSM_OP_COUNT; o++) {
    const ssm_op_info *info = ssm_op_info_get((ssm_op)o);
    int slots[SSM_MAX_STATE_OPERANDS];
    int ns = ssm_op_state_operands((ssm_op)o, slots);
    CU_ASSERT(ns == info->nstates && (!ns || info->effects));
    for (int j = 0; j < ns; j++) CU_ASSERT(slots[j] >= 0 && slots[j] < info->min_args);
    CU_ASSERT(!(info->view && info->effects));
    effects += info->effects;
    views += info->view;
  }
  CU_ASSERT_EQUAL(effects, 6);
  CU_ASSERT_EQUAL(views, 3);
}

/* ---- the elementwise table ------------------------------------------------ */

/* Occurrences of "$<name>" in an expression, and of '$' at all. */
static int marks(const char *expr, char name, int *all) {
  int k = 0;
  *all = 0;
  for (const char *p = expr; (p = strchr(p, '$')); p++) {
    ++*all;
    k += p[1] == name;
  }
  return k;
}

/* Every UNARY and BINARY op of ops.def has exactly one row of
 * elementwise.def, of its own kind, with a C expression and a GLSL and a
 * WGSL expression that each name each operand once; ssm_op_expr serves
 * those columns. */
static void test_elementwise_table(void) {
  static const struct {
    ssm_op op;
    ssm_op_kind kind;
    const char *c, *expr[SSM_LANG_COUNT];
  } rows[] = {
#define UNARY(e, c, glsl, wgsl) {SSM_OP_##e, SSM_KIND_UNARY, #c, {glsl, wgsl}},
#define BINARY(e, c, glsl, wgsl) {SSM_OP_##e, SSM_KIND_BINARY, #c, {glsl, wgsl}},
#include "ir/elementwise.def"
#undef UNARY
#undef BINARY
  };
  int count[SSM_OP_COUNT] = {0};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const char *name = ssm_op_info_get(rows[i].op)->name;
    for (int l = 0; l < SSM_LANG_COUNT; l++) {
      const char *e = rows[i].expr[l];
      int all, ok = ssm_op_info_get(rows[i].op)->kind == rows[i].kind && rows[i].c[0] && e[0];
      if (rows[i].kind == SSM_KIND_UNARY) ok = ok && marks(e, 'x', &all) == 1 && all == 1;
      else ok = ok && marks(e, 'a', &all) == 1 && marks(e, 'b', &all) == 1 && all == 2;
      if (!ok) fprintf(stderr, "\n  elementwise row '%s': c '%s', language %d '%s'\n", name,
                       rows[i].c, l, e);
      CU_ASSERT(ok);
      const char *served = ssm_op_expr(rows[i].op, (ssm_lang)l);
      CU_ASSERT(served && !strcmp(served, e));
    }
    count[rows[i].op]++;
  }
  for (int o = 0; o < SSM_OP_COUNT; o++) {
    ssm_op_kind k = ssm_op_info_get((ssm_op)o)->kind;
    int want = k == SSM_KIND_UNARY || k == SSM_KIND_BINARY;
    if (count[o] != want)
      fprintf(stderr, "\n  op '%s' has %d elementwise rows\n", ssm_op_info_get(o)->name, count[o]);
    CU_ASSERT_EQUAL(count[o], want);
    for (int l = 0; !want && l < SSM_LANG_COUNT; l++)
      CU_ASSERT_PTR_NULL(ssm_op_expr((ssm_op)o, (ssm_lang)l));
  }
  /* the C column is the code of the eval functions */
  CU_ASSERT_EQUAL(ssm_binary_eval(SSM_OP_SUB, 2, 5), -3);
  CU_ASSERT_EQUAL(ssm_binary_eval(SSM_OP_DIV, 1, 4), 0.25);
  CU_ASSERT_EQUAL(ssm_unary_eval(SSM_OP_SOFTPLUS, 1000), 1000);
  CU_ASSERT_EQUAL(ssm_unary_eval(SSM_OP_SOFTPLUS, -1), log1p(exp(-1.0)));
  CU_ASSERT_EQUAL(ssm_unary_eval(SSM_OP_RELU, -2), 0);
  /* the GLSL column with operands put in */
  ssm_sb b = {0};
  ssm_op_expr_append(&b, SSM_OP_SOFTPLUS, SSM_LANG_GLSL, (const char *[]){"b1.v[i]", ""});
  ssm_op_expr_append(&b, SSM_OP_SUB, SSM_LANG_GLSL, (const char *[]){"acc", "exp(x)"});
  CU_ASSERT_STRING_EQUAL(ssm_sb_str(&b), "ssm_softplus(b1.v[i])(acc - exp(x))");
  /* and the WGSL column: its own spelling where the languages differ */
  ssm_sb_clear(&b);
  ssm_op_expr_append(&b, SSM_OP_RSQRT, SSM_LANG_WGSL, (const char *[]){"b1_ld(i)", ""});
  CU_ASSERT_STRING_EQUAL(ssm_sb_str(&b), "inverseSqrt(b1_ld(i))");
  ssm_sb_free(&b);
}

/* ---- (b) builder → print → parse → print ------------------------------- */

static void test_builder_roundtrip(void) {
  ssm_graph *g = ssm_test_graph("built");
  ssm_type tok = ssm_type_make(SSM_I32, 1, (int64_t[]){1});
  ssm_type tab = ssm_type_make(SSM_F32, 2, (int64_t[]){100, 16});
  ssm_type act = ssm_type_make(SSM_F32, 2, (int64_t[]){1, 16});
  ssm_type scal = ssm_type_make(SSM_F32, 0, NULL);
  ssm_node *in = ssm_graph_append(g, SSM_OP_INPUT, &tok, 0, NULL);
  ssm_node_set_str(g, in, "name", "tokens");
  ssm_node *w = ssm_graph_append(g, SSM_OP_WEIGHT, &tab, 0, NULL);
  ssm_node_set_str(g, w, "transform", "t");
  ssm_node_set_str(g, w, "name", "emb"); /* set out of table order on purpose */
  ssm_node *e = ssm_graph_append(g, SSM_OP_EMBED, &act, 2, (ssm_value *[]){w->result, in->result});
  ssm_node *c = ssm_graph_append(g, SSM_OP_CONST, &scal, 0, NULL);
  ssm_node_set_float(g, c, "value", 0.1);
  ssm_node *m = ssm_graph_append(g, SSM_OP_MUL, &act, 2, (ssm_value *[]){e->result, c->result});
  ssm_node *t = ssm_graph_append(g, SSM_OP_TRANSPOSE, &(ssm_type){SSM_F32, 2, {16, 1}}, 1,
                                 (ssm_value *[]){m->result});
  ssm_node_set_ints(g, t, "perm", 2, (int64_t[]){1, 0});
  ssm_graph_append(g, SSM_OP_OUTPUT, NULL, 1, (ssm_value *[]){t->result});
  SSM_ASSERT_OK(ssm_graph_verify(g));

  char *first = ssm_test_print(g);
  const char *want = "graph built {\n"
                     "  %0:i32[1] = input name=\"tokens\"\n"
                     "  %1:f32[100,16] = weight name=\"emb\" transform=\"t\"\n"
                     "  %2:f32[1,16] = embed %1, %0\n"
                     "  %3:f32[] = const value=0.1\n"
                     "  %4:f32[1,16] = mul %2, %3\n"
                     "  %5:f32[16,1] = transpose %4 perm=[1,0]\n"
                     "  output %5\n"
                     "}\n";
  CU_ASSERT_STRING_EQUAL(first, want);
  ssm_graph *g2 = NULL;
  SSM_ASSERT_OK(ssm_graph_parse(first, NULL, &g2));
  if (g2) {
    SSM_ASSERT_OK(ssm_graph_verify(g2));
    char *second = ssm_test_print(g2);
    CU_ASSERT_STRING_EQUAL(second, first);
    CU_ASSERT_PTR_NULL(g2->file);
    CU_ASSERT_EQUAL(g2->first->next->line, 3);
    CU_ASSERT_EQUAL(g2->first->next->col, 3);
    CU_ASSERT_EQUAL(g2->last->col, 3); /* the op name of a sink */
    free(second);
    ssm_graph_destroy(g2);
  }
  free(first);
  ssm_graph_destroy(g);
}

/* ---- (c) floats and strings -------------------------------------------- */

static void check_float(const char *literal, const char *printed) {
  char text[256];
  snprintf(text, sizeof text, "graph f {\n  %%0:f32[] = const value=%s\n  output %%0\n}\n",
           literal);
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_graph_parse(text, "f.ssmir", &g));
  if (!g) return;
  double want = strtod(literal, NULL);
  double got = ssm_node_float(g->first, "value", 0);
  CU_ASSERT(isnan(want) ? isnan(got) : got == want && signbit(got) == signbit(want));
  char *out = ssm_test_print(g);
  char expect[256];
  snprintf(expect, sizeof expect, "value=%s\n", printed);
  if (!strstr(out, expect)) fprintf(stderr, "\n  '%s' printed as:\n%s", literal, out);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, expect));
  ssm_graph *g2 = NULL;
  SSM_ASSERT_OK(ssm_graph_parse(out, "f.ssmir", &g2));
  if (g2) {
    double again = ssm_node_float(g2->first, "value", 0);
    CU_ASSERT(isnan(want) ? isnan(again) : again == want);
    ssm_graph_destroy(g2);
  }
  free(out);
  ssm_graph_destroy(g);
}

static void test_float_attrs(void) {
  check_float("1e-05", "1e-05");
  check_float("0.00001", "1e-05");
  check_float("0.1", "0.1");
  check_float("3.0e38", "3e+38");
  check_float("-2.5", "-2.5");
  check_float("1e-300", "1e-300");
  check_float("1.0", "1");
  check_float("2", "2");  /* an integer literal is a float */
  check_float("-0.0", "-0");
  check_float("0.3333333333333333", "0.3333333333333333");
  check_float("4.9406564584124654e-324", "5e-324");
  check_float("1.7976931348623157e308", "1.7976931348623157e+308");
  check_float("-inf", "-inf");
  check_float("nan", "nan");
  check_parse_err("graph f {\n  %0:f32[] = const value=1e999\n}\n",
                  "t.ssmir:2:26: attribute 'value' of 'const' must be a number");
  check_parse_err("graph f {\n  %0:f32[] = const value=1.5x\n}\n",
                  "t.ssmir:2:26: attribute 'value' of 'const' must be a number");
}

static void test_string_escapes(void) {
  const char *text = "graph s {\n"
                     "  %0:f32[2] = weight name=\"a\\\"b\\\\c\\nd\\te\\x01f\\x7f\xc3\xa9\"\n"
                     "  output %0\n"
                     "}\n";
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_graph_parse(text, "s.ssmir", &g));
  if (!g) return;
  CU_ASSERT_STRING_EQUAL(ssm_node_str(g->first, "name", ""), "a\"b\\c\nd\te\x01" "f\x7f\xc3\xa9");
  char *out = ssm_test_print(g);
  CU_ASSERT_STRING_EQUAL(out, text);
  free(out);
  ssm_graph_destroy(g);
  /* \xHH in upper case reads the same and prints lower case. */
  check_parse_err("graph s {\n  %0:f32[2] = weight name=\"a\\q\"\n}\n",
                  "t.ssmir:2:29: unknown escape '\\q' in string");
  check_parse_err("graph s {\n  %0:f32[2] = weight name=\"a\\x0\"\n}\n",
                  "t.ssmir:2:29: '\\x' needs two hex digits");
  check_parse_err("graph s {\n  %0:f32[2] = weight name=\"a\\x00\"\n}\n",
                  "t.ssmir:2:29: '\\x00' is not allowed");
  check_parse_err("graph s {\n  %0:f32[2] = weight name=\"abc\n}\n",
                  "t.ssmir:2:27: unterminated string");
  check_parse_err("graph s {\n  %0:f32[2] = weight name=\"a\x01\"\n}\n",
                  "t.ssmir:2:29: control character 0x01 in string");
}

/* Comments, blank lines, free value names, attribute order and negative
 * axes are accepted and printed canonically. */
static void test_lenient_input(void) {
  const char *text = "# leading comment\n\n"
                     "graph g {   # trailing comment\n"
                     "\n"
                     "  %tok:i32[1] = input name=\"t\"\n"
                     "\t%emb.w_1 : f32[ 8 , 4 ] = weight transform=\"x\" name=\"e\"\r\n"
                     "  %h:f32[1,4] = embed %emb.w_1,%tok\n"
                     "  %s:f32[1,2] = slice %h len=2 start=-0 axis=-1 # comment\n"
                     "  %r:f32[1,1] = reduce %s kind=\"max\" axis=-1\n"
                     "  output %r\n"
                     "}\n\n# end\n";
  const char *canon = "graph g {\n"
                      "  %0:i32[1] = input name=\"t\"\n"
                      "  %1:f32[8,4] = weight name=\"e\" transform=\"x\"\n"
                      "  %2:f32[1,4] = embed %1, %0\n"
                      "  %3:f32[1,2] = slice %2 axis=1 start=0 len=2\n"
                      "  %4:f32[1,1] = reduce %3 kind=\"max\" axis=1\n"
                      "  output %4\n"
                      "}\n";
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_graph_parse(text, "l.ssmir", &g));
  if (!g) return;
  SSM_ASSERT_OK(ssm_graph_verify(g));
  CU_ASSERT_STRING_EQUAL(g->file, "l.ssmir");
  CU_ASSERT_EQUAL(g->first->line, 5);
  CU_ASSERT_EQUAL(g->first->next->col, 2);
  char *out = ssm_test_print(g);
  CU_ASSERT_STRING_EQUAL(out, canon);
  free(out);
  ssm_graph_destroy(g);
}

/* ---- (d) errors ---------------------------------------------------------- */

#define HDR "graph g {\n  %0:f32[4] = input name=\"x\"\n"

static void test_parse_errors(void) {
  check_parse_err(HDR "  %1:f32[4] = scna %0\n  output %1\n}\n", "t.ssmir:3:15: unknown op 'scna'");
  check_parse_err(HDR "  %1:f32[4] = add %0, %0, %0\n}\n",
                  "t.ssmir:3:15: op 'add' takes 2 operands, got 3");
  check_parse_err(HDR "  %1:f32[4] = neg\n}\n", "t.ssmir:3:15: op 'neg' takes 1 operand, got 0");
  check_parse_err(HDR "  %1:f32[4] = concat %0 axis=0\n}\n",
                  "t.ssmir:3:15: op 'concat' takes 2 to 16 operands, got 1");
  check_parse_err(HDR "  %1:f32[4] = neg %7\n}\n", "t.ssmir:3:19: undefined value %7");
  check_parse_err(HDR "  %1:f32[4] = neg %1\n}\n", "t.ssmir:3:19: undefined value %1");
  check_parse_err(HDR "  %0:f32[4] = neg %0\n}\n", "t.ssmir:3:3: value %0 defined twice (first at 2:3)");
  check_parse_err(HDR "  %1:f32[2] = slice %0 axis=0 start=0\n}\n",
                  "t.ssmir:3:15: op 'slice' needs attribute 'len'");
  check_parse_err(HDR "  %1:f32[2] = slice %0 axis=0 start=0 len=2 step=1\n}\n",
                  "t.ssmir:3:45: op 'slice' has no attribute 'step'");
  check_parse_err(HDR "  %1:f32[2] = slice %0 axis=\"0\" start=0 len=2\n}\n",
                  "t.ssmir:3:29: attribute 'axis' of 'slice' must be an integer");
  check_parse_err(HDR "  %1:f32[2] = slice %0 axis=0 axis=0 start=0 len=2\n}\n",
                  "t.ssmir:3:31: attribute 'axis' given twice");
  check_parse_err(HDR "  %1:f32[4] = transpose %0 perm=[0,\n}\n",
                  "t.ssmir:3:36: list elements of 'perm' must be integers");
  check_parse_err(HDR "  %1:f32[4] = add %0 %0\n}\n", "t.ssmir:3:22: expected ',' before '%0'");
  check_parse_err("graph g {\n  %0:f64[4] = input name=\"x\"\n}\n", "t.ssmir:2:6: unknown dtype 'f64'");
  check_parse_err("graph g {\n  %0:f32(4) = input name=\"x\"\n}\n",
                  "t.ssmir:2:9: unexpected character '('");
  check_parse_err("graph g {\n  %0:f32{4} = input name=\"x\"\n}\n",
                  "t.ssmir:2:9: expected '[' after the dtype, got '{'");
  check_parse_err("graph g {\n  %0 f32[4] = input name=\"x\"\n}\n",
                  "t.ssmir:2:6: expected ':' after the result name, got 'f32'");
  check_parse_err("graph g {\n  %0:f32[1,2,3,4,5,6,7] = input name=\"x\"\n}\n",
                  "t.ssmir:2:22: too many dimensions (at most 6)");
  check_parse_err("graph g {\n  %0:f32[4,0] = input name=\"x\"\n}\n",
                  "t.ssmir:2:12: dimension 0 out of range");
  check_parse_err("graph g {\n  %0:f32[-3] = input name=\"x\"\n}\n",
                  "t.ssmir:2:10: dimension -3 out of range");
  check_parse_err("graph g {\n  %0:f32[1099511627777] = input name=\"x\"\n}\n",
                  "t.ssmir:2:10: dimension 1099511627777 out of range");
  check_parse_err("graph g {\n  %0:f32[99999999999999999999999] = input name=\"x\"\n}\n",
                  "out of range");
  check_parse_err("graph g {\n  %0:f32[1099511627776,1099511627776] = input name=\"x\"\n}\n",
                  "t.ssmir:2:24: tensor has more than 2^60 elements");
  check_parse_err("graph g {\n  output %0\n}\n", "t.ssmir:2:10: undefined value %0");
  check_parse_err(HDR "  %1:f32[4] = output %0\n}\n", "t.ssmir:3:3: op 'output' defines no value");
  check_parse_err(HDR "  neg %0\n}\n", "t.ssmir:3:3: op 'neg' defines a value");
  /* truncated input, empty input, trailing garbage, junk bytes */
  check_parse_err(HDR "  output %0\n", "t.ssmir:4:1: expected '}' at the end of graph 'g'");
  check_parse_err(HDR, "t.ssmir:3:1: expected '}'");
  check_parse_err("graph g {", "t.ssmir:1:10: expected '}'");
  check_parse_err("graph", "t.ssmir:1:6: expected a graph name, got end of input");
  check_parse_err("", "t.ssmir:1:1: expected 'graph', got end of input");
  check_parse_err("\n# only a comment\n", "t.ssmir:3:1: expected 'graph', got end of input");
  check_parse_err(HDR "  output %0\n}\nextra\n", "t.ssmir:5:1: unexpected 'extra' after the end of the graph");
  check_parse_err(HDR "  output %0\n}}", "t.ssmir:4:2: unexpected '}' after the end");
  check_parse_err("\x01\x02\xff\xfe junk", "t.ssmir:1:1: unexpected byte 0x01");
  check_parse_err("graph g {\n  \x7f\x80\n}\n", "t.ssmir:2:3: unexpected byte 0x7f");
  check_parse_err("graph g {\n  @x = 3\n}\n", "t.ssmir:2:3: unexpected character '@'");
  check_parse_err("graph g {\n  % = 3\n}\n", "t.ssmir:2:3: expected a value name after '%'");
  ssm_graph *g = NULL;
  SSM_ASSERT_ERR(ssm_graph_parse("", NULL, &g), "<ir>:1:1: expected 'graph'");
  SSM_ASSERT_ERR(ssm_graph_parse(NULL, "n.ssmir", &g), "n.ssmir:1:1: expected 'graph'");
}

static void test_verify_errors(void) {
  const char *scan = "graph s {\n"
                     "  %0:f32[1,64,4] = input name=\"a\"\n"
                     "  %1:f32[1,1,4] = input name=\"c\"\n"
                     "  %2:f32[64,4] = state name=\"h\"\n"
                     "  %3:f32[1,65] = scan %0, %0, %1, %2\n"
                     "  output %3\n"
                     "}\n";
  check_verify_err(scan, "t.ssmir:5:3: declared f32[1,65] but scan computes f32[1,64]");
  static const char *const attn_head =
      "graph g {\n  %0:f32[2,5,8] = input name=\"q\"\n  %1:f32[2,2,8] = input name=\"k\"\n"
      "  %2:f32[4,2,8] = state name=\"kc\"\n  %3:i32[1] = input name=\"pos\"\n"
      "  %4:f32[2,5,8] = attention %0, %1, %1, %2, %2, %3 scale=1\n  output %4\n}\n";
  check_verify_err(attn_head, "t.ssmir:6:3: attention: 5 query heads are not a multiple of 2 kv heads");
  check_verify_err("graph g {\n  %0:f32[2,4,8] = input name=\"q\"\n  %1:f32[2,2,8] = input name=\"k\"\n"
                   "  %2:f32[4,2,8] = state name=\"kc\"\n  %3:f32[1] = input name=\"pos\"\n"
                   "  %4:f32[2,4,8] = attention %0, %1, %1, %2, %2, %3 scale=1\n  output %4\n}\n",
                   "t.ssmir:6:3: attention pos must be i32[1], got f32[1]");
  /* batch=1: a position a row, and caches [T,MAXS,Hkv,D] */
  check_verify_err("graph g {\n  %0:f32[2,4,8] = input name=\"q\"\n  %1:f32[2,2,8] = input name=\"k\"\n"
                   "  %2:f32[2,4,2,8] = state name=\"kc\"\n  %3:i32[1] = input name=\"pos\"\n"
                   "  %4:f32[2,4,8] = attention %0, %1, %1, %2, %2, %3 scale=1 batch=1\n  output %4\n}\n",
                   "t.ssmir:6:3: attention batch=1 pos must be i32[2] (a position a row), got i32[1]");
  check_verify_err("graph g {\n  %0:f32[2,4,8] = input name=\"q\"\n  %1:f32[2,2,8] = input name=\"k\"\n"
                   "  %2:f32[4,2,8] = state name=\"kc\"\n  %3:i32[2] = input name=\"pos\"\n"
                   "  %4:f32[2,4,8] = attention %0, %1, %1, %2, %2, %3 scale=1 batch=1\n  output %4\n}\n",
                   "t.ssmir:6:3: attention batch=1 caches must be [T,MAXS,2,8] with T = 2, got f32[4,2,8] and f32[4,2,8]");
  check_verify_err("graph g {\n  %0:f32[2,4,8] = input name=\"x\"\n  %1:i32[1] = input name=\"pos\"\n"
                   "  %2:f32[2,4,8] = rope %0, %1 theta=1e+04 dims=8 batch=1\n  output %2\n}\n",
                   "t.ssmir:4:3: rope batch=1 pos must be i32[2] (a position a row), got i32[1]");
  /* the delta rule's shapes: v's heads a multiple of q's, the state [H,Dk,Dv] */
  static const char delta_pre[] =
      "graph g {\n  %0:f32[2,2,8] = input name=\"q\"\n  %1:f32[2,3,6] = input name=\"v\"\n"
      "  %2:f32[2,3] = input name=\"g\"\n";
  char text[512];
  snprintf(text, sizeof text, "%s  %%3:f32[3,8,6] = state name=\"s\"\n"
           "  %%4:f32[2,3,6] = delta_rule %%0, %%0, %%1, %%2, %%2, %%3\n  output %%4\n}\n", delta_pre);
  check_verify_err(text, "t.ssmir:6:3: delta_rule needs v [T,H,Dv] with T = 2 and H a multiple of 2 "
                         "key heads, got f32[2,3,6]");
  check_verify_err("graph g {\n  %0:f32[2,2,8] = input name=\"q\"\n  %1:f32[2,4,6] = input name=\"v\"\n"
                   "  %2:f32[2,4] = input name=\"g\"\n  %3:f32[4,6,8] = state name=\"s\"\n"
                   "  %4:f32[2,4,6] = delta_rule %0, %0, %1, %2, %2, %3\n  output %4\n}\n",
                   "t.ssmir:6:3: delta_rule state must be [H,Dk,Dv] = [4,8,6], got f32[4,6,8] (v f32[2,4,6])");
  check_verify_err("graph g {\n  %0:f32[2,2,8] = input name=\"q\"\n  %1:f32[2,4,6] = input name=\"v\"\n"
                   "  %2:f32[2,4,6] = input name=\"g\"\n  %3:f32[4,8,6] = state name=\"s\"\n"
                   "  %4:f32[2,4,6] = delta_rule %0, %0, %1, %2, %1, %3\n  output %4\n}\n",
                   "t.ssmir:6:3: delta_rule needs the decay [T,H] or [T,H,Dk] = [2,4(,8)] and beta [T,H], "
                   "got f32[2,4,6] and f32[2,4,6]");
  /* batch=1: a state a step, [T,H,Dk,Dv]; one of one sequence is refused */
  static const char delta_batch[] =
      "graph g {\n  %0:f32[2,2,8] = input name=\"q\"\n  %1:f32[2,4,6] = input name=\"v\"\n"
      "  %2:f32[2,4] = input name=\"g\"\n";
  snprintf(text, sizeof text, "%s  %%3:f32[4,8,6] = state name=\"s\"\n"
           "  %%4:f32[2,4,6] = delta_rule %%0, %%0, %%1, %%2, %%2, %%3 batch=1\n  output %%4\n}\n",
           delta_batch);
  check_verify_err(text, "t.ssmir:6:3: delta_rule batch=1 state must be [T,H,Dk,Dv] = [2,4,8,6], "
                         "got f32[4,8,6] (v f32[2,4,6])");
  snprintf(text, sizeof text, "%s  %%3:f32[3,4,8,6] = state name=\"s\"\n"
           "  %%4:f32[2,4,6] = delta_rule %%0, %%0, %%1, %%2, %%2, %%3 batch=1\n  output %%4\n}\n",
           delta_batch);
  check_verify_err(text, "t.ssmir:6:3: delta_rule batch=1 state must be [T,H,Dk,Dv] = [2,4,8,6], "
                         "got f32[3,4,8,6] (v f32[2,4,6])");
  snprintf(text, sizeof text, "%s  %%3:f32[2,4,8,6] = state name=\"s\"\n"
           "  %%4:f32[2,4,6] = delta_rule %%0, %%0, %%1, %%2, %%2, %%3 batch=2\n  output %%4\n}\n",
           delta_batch);
  check_verify_err(text, "t.ssmir:6:3: delta_rule batch must be 0 or 1, got 2");
  ssm_graph *dg = NULL;
  snprintf(text, sizeof text, "%s  %%3:f32[2,4,8,6] = state name=\"s\"\n"
           "  %%4:f32[2,4,6] = delta_rule %%0, %%0, %%1, %%2, %%2, %%3 batch=1\n  output %%4\n}\n",
           delta_batch);
  SSM_ASSERT_OK(ssm_graph_parse(text, "t.ssmir", &dg));
  if (dg) SSM_ASSERT_OK(ssm_graph_verify(dg));
  ssm_graph_destroy(dg);
  check_verify_err(HDR "  %1:f32[3] = weight name=\"w\"\n  %2:f32[4] = add %0, %1\n  output %2\n}\n",
                   "t.ssmir:4:3: operand shapes f32[4] and f32[3] do not broadcast");
  check_verify_err("graph g {\n  %0:f32[2,3] = input name=\"x\"\n  %1:f32[4] = weight name=\"w\"\n"
                   "  %2:f32[2,3] = mul %0, %1\n  output %2\n}\n",
                   "t.ssmir:4:3: operand shapes f32[2,3] and f32[4] do not broadcast");
  check_verify_err(HDR "  %1:i32[4] = input name=\"y\"\n  %2:f32[4] = add %0, %1\n  output %2\n}\n",
                   "t.ssmir:4:3: operand dtypes differ: f32[4] and i32[4]");
  check_verify_err(HDR "  %1:f32[4] = neg %0\n}\n", "t.ssmir: graph g has no output node");
  check_verify_err(HDR "  output %0\n  output %0\n}\n",
                   "t.ssmir:4:3: second output node after the output node");
  check_verify_err(HDR "  output %0\n  %1:f32[4] = neg %0\n}\n", "t.ssmir:4:3: node after the output node");
  check_verify_err(HDR "  %1:f32[4] = state name=\"s\"\n  %2:f32[4] = state name=\"s\"\n  output %0\n}\n",
                   "t.ssmir:4:3: state name 's' used twice");
  check_verify_err(HDR "  %1:f32[4] = weight name=\"\"\n  output %1\n}\n",
                   "t.ssmir:3:3: weight needs a non-empty name");
  check_verify_err(HDR "  %1:i32[4] = exp %0\n  output %1\n}\n",
                   "t.ssmir:3:3: declared i32[4] but exp computes f32[4]");
  check_verify_err("graph g {\n  %0:i32[4] = input name=\"x\"\n  %1:i32[4] = exp %0\n  output %1\n}\n",
                   "t.ssmir:3:3: the operand must be a float tensor, got i32[4]");
  check_verify_err(HDR "  %1:f32[2] = const value=1\n  output %1\n}\n",
                   "t.ssmir:3:3: a const is a scalar (rank 0), declared f32[2]");
  check_verify_err(HDR "  %1:f32[4] = reduce %0 kind=\"min\" axis=0\n  output %1\n}\n",
                   "reduce kind must be sum, mean or max, got 'min'");
  check_verify_err(HDR "  %1:f32[1] = reduce %0 kind=\"sum\" axis=1\n  output %1\n}\n",
                   "t.ssmir:3:3: axis 1 out of range for f32[4]");
  check_verify_err(HDR "  %1:f32[1] = reduce %0 kind=\"sum\" axis=-2\n  output %1\n}\n",
                   "t.ssmir:3:3: axis -2 out of range for f32[4]");
  check_verify_err(HDR "  %1:f32[2] = slice %0 axis=0 start=3 len=2\n  output %1\n}\n",
                   "slice start=3 len=2 out of bounds of axis 0 of f32[4]");
  check_verify_err(HDR "  %1:f32[5] = reshape %0\n  output %1\n}\n", "cannot reshape f32[4] to f32[5]");
  check_verify_err(HDR "  %1:f32[4] = transpose %0 perm=[1]\n  output %1\n}\n",
                   "perm is not a permutation of the 1 axes of f32[4]");
  check_verify_err("graph g {\n  %0:f32[2,3] = input name=\"x\"\n  %1:f32[3,3] = input name=\"y\"\n"
                   "  %2:f32[2,6] = concat %0, %1 axis=1\n  output %2\n}\n",
                   "t.ssmir:4:3: concat operands f32[2,3] and f32[3,3] differ outside axis 1");
  check_verify_err("graph g {\n  %0:f32[2,8] = input name=\"x\"\n  %1:f32[2,8] = state name=\"c\"\n"
                   "  %2:f32[8,4] = weight name=\"w\"\n  %3:f32[2,8] = conv1d_causal %0, %1, %2\n"
                   "  output %3\n}\n",
                   "conv1d_causal state must be [K-1,C] = [3,8]");
  check_verify_err("graph g {\n  %0:f32[1,8,4] = input name=\"a\"\n  %1:f32[8,3] = state name=\"h\"\n"
                   "  %2:f32[1,8] = scan %0, %0, %0, %1\n  output %2\n}\n",
                   "scan operands a, b, c broadcast to f32[1,8,4], which is not [T,S..,N] for state f32[8,3]");
  check_verify_err("graph g {\n  %0:f32[2,4] = input name=\"x\"\n  %1:f32[3,5] = weight name=\"w\"\n"
                   "  %2:f32[2,3] = matmul %0, %1\n  output %2\n}\n",
                   "matmul needs x [..,K] and weight [N,K], got f32[2,4] and f32[3,5]");
  check_verify_err("graph g {\n  %0:f32[4] = input name=\"x\"\n  %1:f32[10,4] = weight name=\"w\"\n"
                   "  %2:f32[1,4] = embed %1, %0\n  output %2\n}\n",
                   "token ids must be i32 [T], got f32[4]");
}

/* Verifier messages for built graphs name the graph, value and op. */
static void test_verify_built(void) {
  ssm_graph *g = ssm_test_graph("b");
  ssm_type t4 = ssm_type_make(SSM_F32, 1, (int64_t[]){4});
  ssm_type t5 = ssm_type_make(SSM_F32, 1, (int64_t[]){5});
  ssm_node *x = ssm_graph_append(g, SSM_OP_INPUT, &t4, 0, NULL);
  ssm_node_set_str(g, x, "name", "x");
  ssm_node *y = ssm_graph_append(g, SSM_OP_NEG, &t5, 1, &x->result);
  ssm_node *o = ssm_graph_append(g, SSM_OP_OUTPUT, NULL, 1, &y->result);
  SSM_ASSERT_ERR(ssm_graph_verify(g), "graph b: %1 (neg): declared f32[5] but neg computes f32[4]");
  y->result->type = t4;
  SSM_ASSERT_OK(ssm_graph_verify(g));
  ssm_node_set_int(g, y, "axis", 0);
  SSM_ASSERT_ERR(ssm_graph_verify(g), "graph b: %1 (neg): op 'neg' has no attribute 'axis'");
  y->nattrs = 0;
  ssm_node_set_int(g, x, "name", 3);
  SSM_ASSERT_ERR(ssm_graph_verify(g), "graph b: %0 (input): attribute 'name' of 'input' must be a string");
  ssm_node_set_str(g, x, "name", "x");
  /* use before definition: move the output's operand to a later value */
  ssm_node *late = ssm_graph_append(g, SSM_OP_NEG, &t4, 1, &x->result);
  o->args[0] = late->result;
  SSM_ASSERT_ERR(ssm_graph_verify(g), "graph b: output: operand 0 (%2) is not defined before its use");
  ssm_graph_remove(g, late);
  o->args[0] = y->result;
  ssm_graph_remove(g, o);
  SSM_ASSERT_ERR(ssm_graph_verify(g), "graph b: no output node");
  ssm_graph_destroy(g);
}

/* ---- golden files ------------------------------------------------------ */

static const char *const goldens[] = {"tests/data/ir/mamba1_layer.ssmir",
                                      "tests/data/ir/mamba2_layer.ssmir",
                                      "tests/data/ir/sample_head.ssmir"};

static void test_golden_files(void) {
  for (size_t i = 0; i < sizeof goldens / sizeof goldens[0]; i++) {
    char *text;
    size_t n;
    SSM_ASSERT_OK(ssm_file_read(ssm_test_path(goldens[i]), 0, &text, &n));
    if (!text) continue;
    check_roundtrip(text);
    free(text);
  }
}

/* ---- never crash ------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Parses `text`; an error must name the file, a success must verify (either
 * way) and print without crashing. */
static void survive(const char *text) {
  ssm_graph *g = NULL;
  ssm_status s = ssm_graph_parse(text, "z.ssmir", &g);
  if (s) {
    CU_ASSERT_PTR_NULL(g);
    CU_ASSERT_EQUAL(strncmp(ssm_status_message(s), "z.ssmir:", 8), 0);
    ssm_status_free(s);
    return;
  }
  ssm_status_free(ssm_graph_verify(g));
  free(ssm_test_print(g));
  ssm_graph_destroy(g);
}

/* q8_0 (ir.h): the layout of a [3, 40] weight (two blocks a row, the last
 * of 8), the quantized bytes of known rows (d rounded up to 4 significant
 * bits), the values every backend takes (q * d, exact in f16), a block of
 * zeros, and the weights q8_0 cannot hold (not finite, or a scale beyond
 * f16) reported by index. */
static void test_q8_0(void) {
  ssm_type t = ssm_type_make(SSM_Q8_0, 2, (int64_t[]){3, 40});
  ssm_qlayout l = ssm_qlayout_of(&t);
  CU_ASSERT_EQUAL(l.k, 40);
  CU_ASSERT_EQUAL(l.rows, 3);
  CU_ASSERT_EQUAL(l.blocks, 2);
  CU_ASSERT_EQUAL(l.scales, 120);
  CU_ASSERT_EQUAL(l.bytes, 120 + 12);
  CU_ASSERT_EQUAL(ssm_type_bytes(&t), 132);
  CU_ASSERT(ssm_dtype_rounds_x(SSM_Q8_0));
  float w[120] = {0};
  for (int k = 0; k < 40; k++) w[k] = (float)(k - 20); /* row 0: -20 .. 19 */
  w[40] = 1.0f / 3;                                      /* row 1: one value a block */
  w[72] = -0.5f;
  uint8_t q[132];
  CU_ASSERT_EQUAL(ssm_quantize(w, &l, q), -1);
  /* row 0, block 0: amax 20, 20 / 127 = 1.2598 * 2^-3 up to 1.375 * 2^-3 */
  uint16_t d0;
  memcpy(&d0, q + 120, 2);
  CU_ASSERT_EQUAL(ssm_f16_to_f32(d0), 0.171875f);
  CU_ASSERT_EQUAL((int8_t)q[0], -116); /* round(-20 / d) */
  CU_ASSERT_EQUAL((int8_t)q[10], -58);
  for (int k = 0; k < 40; k++) {
    uint16_t dh;
    memcpy(&dh, q + 120 + 2 * (k / 32), 2);
    float v = ssm_qvalue(q, &l, k);
    CU_ASSERT_EQUAL(v, (float)(int8_t)q[k] * ssm_f16_to_f32(dh));
    CU_ASSERT_EQUAL(v, ssm_f16_to_f32(ssm_f32_to_f16(v))); /* an f16, exactly */
    CU_ASSERT(fabsf(v - w[k]) <= ssm_f16_to_f32(dh) / 2);
  }
  /* the partial block of row 0 (k 32..39): amax 19, d = 1.25 * 2^-3 */
  uint16_t d1;
  memcpy(&d1, q + 122, 2);
  CU_ASSERT_EQUAL(ssm_f16_to_f32(d1), 0.15625f);
  CU_ASSERT_EQUAL((int8_t)q[39], 122);
  /* a block's only value: q at least 113 */
  CU_ASSERT_EQUAL((int8_t)q[40], 124);
  CU_ASSERT(fabsf(ssm_qvalue(q, &l, 40) - 1.0f / 3) < 1e-3f);
  CU_ASSERT_EQUAL((int8_t)q[72], -114);
  CU_ASSERT(fabsf(ssm_qvalue(q, &l, 72) + 0.5f) < 2.5e-3f);
  /* row 2: zeros, scale 0, every value 0 */
  for (int k = 80; k < 120; k++) CU_ASSERT_EQUAL(ssm_qvalue(q, &l, k), 0.0f);
  w[45] = NAN;
  CU_ASSERT_EQUAL(ssm_quantize(w, &l, q), 45);
  w[45] = 0;
  w[90] = INFINITY;
  CU_ASSERT_EQUAL(ssm_quantize(w, &l, q), 90);
  w[90] = 1e7f; /* d = 1e7 / 127 > 65504: the block starting at 80 */
  CU_ASSERT_EQUAL(ssm_quantize(w, &l, q), 80);
}

/* Squared error of the n values x taken as q4_0 with scale d. */
static float q4_err(const float *x, int n, float d) {
  float e = 0;
  for (int k = 0; k < n; k++) {
    float q = roundf(x[k] / d);
    float v = (q < -8 ? -8 : q > 7 ? 7 : q) * d;
    e += (x[k] - v) * (x[k] - v);
  }
  return e;
}

/* q4_0 (ir.h): the layout of a [3, 41] weight (rows of odd k share a byte),
 * the scales the search picks (signed, 8 significant bits; figures from an
 * independent model of the format), the nibbles, the values every backend
 * takes (exact in f16), no worse than the plain amax / 8 scale, a block of
 * zeros, and the weights q4_0 cannot hold. */
static void test_q4_0(void) {
  ssm_type t = ssm_type_make(SSM_Q4_0, 2, (int64_t[]){3, 41});
  ssm_qlayout l = ssm_qlayout_of(&t);
  CU_ASSERT_EQUAL(l.dtype, SSM_Q4_0);
  CU_ASSERT_EQUAL(l.blocks, 2);
  CU_ASSERT_EQUAL(l.scales, 64); /* 62 bytes of q, to a multiple of 4 */
  CU_ASSERT_EQUAL(l.bytes, 64 + 12);
  CU_ASSERT_EQUAL(ssm_type_bytes(&t), 76);
  CU_ASSERT(ssm_dtype_rounds_x(SSM_Q4_0) && ssm_dtype_is_quant(SSM_Q4_0));
  CU_ASSERT(!ssm_dtype_is_quant(SSM_BF16));
  float w[123] = {0};
  for (int k = 0; k < 41; k++) w[k] = (float)(k - 20); /* row 0: -20 .. 20 */
  w[41] = 1.0f / 3;                                      /* row 1: one value a block */
  w[73] = -0.5f;
  uint8_t q[76];
  memset(q, 0xab, sizeof q);
  CU_ASSERT_EQUAL(ssm_quantize(w, &l, q), -1);
  float d[6];
  for (int j = 0; j < 6; j++) {
    uint16_t dh;
    memcpy(&dh, q + 64 + 2 * j, 2);
    d[j] = ssm_f16_to_f32(dh);
  }
  CU_ASSERT_EQUAL(d[0], 2.375f);           /* -20 / -8.4, t = -4 */
  CU_ASSERT_EQUAL(d[1], -2.4375f);         /* 20 / -8.2, t = -2 */
  CU_ASSERT_EQUAL(d[2], -0.041748046875f); /* (1/3) / -8 */
  CU_ASSERT_EQUAL(d[3], 0.0625f);          /* 0.5 / 8 */
  CU_ASSERT_EQUAL(d[4], 0.0f);
  CU_ASSERT_EQUAL(d[5], 0.0f);
  static const uint8_t head[] = {0x00, 0x10, 0x21, 0x32};
  CU_ASSERT(!memcmp(q, head, 4));
  CU_ASSERT_EQUAL(q[20], 0x00); /* element 40 (q -8) and row 1's first (q -8) */
  CU_ASSERT_EQUAL(q[21], 0x88); /* two zeros */
  CU_ASSERT_EQUAL(q[62], 0);    /* padding */
  CU_ASSERT_EQUAL(q[63], 0);
  for (int k = 0; k < 82; k++) {
    float v = ssm_qvalue(q, &l, k), dk = d[(k / 41) * 2 + (k % 41) / 32];
    CU_ASSERT_EQUAL(v, (float)(((q[k / 2] >> (k % 2 * 4)) & 15) - 8) * dk);
    CU_ASSERT_EQUAL(v, ssm_f16_to_f32(ssm_f32_to_f16(v))); /* an f16, exactly */
  }
  /* the search is no worse than the scale of the largest value over -8 */
  CU_ASSERT(q4_err(w, 32, d[0]) <= q4_err(w, 32, -20.0f / -8.0f));
  CU_ASSERT(q4_err(w + 32, 9, d[1]) <= q4_err(w + 32, 9, 20.0f / -8.0f));
  CU_ASSERT_EQUAL(ssm_qvalue(q, &l, 41), -8 * d[2]);
  CU_ASSERT_EQUAL(ssm_qvalue(q, &l, 73), -8 * d[3]);
  for (int k = 82; k < 123; k++) CU_ASSERT_EQUAL(ssm_qvalue(q, &l, k), 0.0f);
  w[45] = NAN;
  CU_ASSERT_EQUAL(ssm_quantize(w, &l, q), 45);
  w[45] = 0;
  w[90] = 1e6f; /* d = 1e6 / -8 beyond f16: the block starting at 82 */
  CU_ASSERT_EQUAL(ssm_quantize(w, &l, q), 82);
}

static void test_fuzz(void) {
  char *text;
  size_t n;
  SSM_ASSERT_OK(ssm_file_read(ssm_test_path(goldens[1]), 0, &text, &n));
  if (!text) return;
  char *buf = malloc(n + 64);
  for (size_t cut = 0; cut <= n; cut++) { /* every prefix */
    memcpy(buf, text, cut);
    buf[cut] = 0;
    survive(buf);
  }
  static const char alphabet[] = "%:=,[]{}\"\\#\n -0123456789.eaxf_\x01\x80\xff";
  for (int iter = 0; iter < 3000; iter++) { /* mutations */
    memcpy(buf, text, n + 1);
    int edits = 1 + (int)(rng() % 4);
    for (int e = 0; e < edits; e++) {
      size_t at = (size_t)(rng() % n);
      buf[at] = alphabet[rng() % (sizeof alphabet - 1)];
    }
    survive(buf);
  }
  for (int iter = 0; iter < 500; iter++) { /* junk */
    size_t len = (size_t)(rng() % 64);
    for (size_t i = 0; i < len; i++) {
      char c = (char)(rng() & 0xff);
      buf[i] = c ? c : 'x';
    }
    buf[len] = 0;
    survive(buf);
  }
  free(buf);
  free(text);
  /* long tokens and many values are bounded, not crashes */
  size_t big = 300000;
  char *huge = malloc(big + 1);
  memset(huge, 'a', big);
  huge[big] = 0;
  survive(huge);
  memcpy(huge, "graph g {\n  %", 13);
  survive(huge);
  memcpy(huge, "graph g {\n  %0:f32[1] = input name=\"", 36);
  survive(huge);
  free(huge);
}

int main(void) {
  CU_TestInfo tests[] = {{"every_op_roundtrips", test_every_op_roundtrips},
                         {"op_queries", test_op_queries},
                         {"elementwise_table", test_elementwise_table},
                         {"builder_roundtrip", test_builder_roundtrip},
                         {"float_attrs", test_float_attrs},
                         {"string_escapes", test_string_escapes},
                         {"lenient_input", test_lenient_input},
                         {"parse_errors", test_parse_errors},
                         {"verify_errors", test_verify_errors},
                         {"verify_built", test_verify_built},
                         {"golden_files", test_golden_files},
                         {"q8_0", test_q8_0},
                         {"q4_0", test_q4_0},
                         {"fuzz", test_fuzz},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("ir", tests);
}
