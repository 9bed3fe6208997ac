/*
 * test_passes.c — the passes and the pipeline.
 *
 * Each rewrite is checked the QBE way: IR text in, IR text out, compared
 * exactly (fold of weight transforms, CSE, DCE), plus the errors of infer and
 * of the pipeline (unknown pass, a pass that breaks the graph, the verifier
 * between passes). The load-time transforms that folding produces are
 * checked against the CPU interpreter's own unary ops, bit for bit, and every
 * golden fixture runs on the CPU before and after simplify with the same
 * logits. Attention fuses like any anchor and its caches are state it
 * writes (fuse, schedule). Finally the IR of tests/data/mamba1_tiny (T=2)
 * after each pass is compared with tests/data/ir/passes/<pass>.ssmir
 * (SSM_UPDATE_GOLDEN=1 rewrites them); each golden must parse back and
 * verify.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "compile/compile.h"
#include "passes/passes.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"
#include "testutil.h"

/* ---- helpers ---------------------------------------------------------------- */

static ssm_graph *parse(const char *text) {
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_graph_parse(text, "t.ssmir", &g));
  if (g) SSM_ASSERT_OK(ssm_graph_verify(g));
  return g;
}

/* Runs one pass on `in`; its output must verify and print as `want`, and its
 * note contain `note`. */
static void check_pass(ssm_pass_fn pass, const char *in, const char *want, const char *note) {
  ssm_graph *g = parse(in);
  if (!g) return;
  char buf[512] = "?";
  SSM_ASSERT_OK(pass(g, NULL, buf, sizeof buf));
  SSM_ASSERT_OK(ssm_graph_verify(g));
  char *out = ssm_test_print(g);
  if (want && strcmp(out, want)) fprintf(stderr, "\n--- want\n%s--- got\n%s", want, out);
  if (want) CU_ASSERT_STRING_EQUAL(out, want); /* NULL: the note says enough */
  if (!strstr(buf, note)) fprintf(stderr, "\n  note '%s' lacks '%s'\n", buf, note);
  CU_ASSERT_PTR_NOT_NULL(strstr(buf, note));
  free(out);
  ssm_graph_destroy(g);
}

static void check_simplify(const char *in, const char *want, const char *note) {
  check_pass(ssm_pass_simplify, in, want, note);
  check_pass(ssm_pass_simplify, want, want, /* a fixed point */
             "folded 0 unary ops into weight transforms, merged 0 nodes, removed 0 dead nodes");
}

/* ---- weights ------------------------------------------------------------------ */

/* q4_0: the embedding table and a weight of one row per logit (the
 * output's width) in q8_0, a weight marked keep16 (YAML `quantize: false`)
 * in bf16, the others in q4_0; the note says so. */
static void test_weights_q4_0(void) {
  ssm_graph *g = parse("graph g {\n"
                       "  %0:i32[2] = input name=\"tokens\"\n"
                       "  %1:f32[16,8] = weight name=\"emb\"\n"
                       "  %2:f32[2,8] = embed %1, %0\n"
                       "  %3:f32[32,8] = weight name=\"up\"\n"
                       "  %4:f32[2,32] = matmul %2, %3\n"
                       "  %5:f32[8,32] = weight name=\"router\" keep16=1\n"
                       "  %6:f32[2,8] = matmul %4, %5\n"
                       "  %7:f32[24,8] = weight name=\"head\"\n"
                       "  %8:f32[2,24] = matmul %6, %7\n"
                       "  output %8\n"
                       "}\n");
  if (!g) return;
  ssm_pass_opts po = {.weight_dtype = SSM_Q4_0};
  char note[512] = "";
  SSM_ASSERT_OK(ssm_pass_weights(g, &po, note, sizeof note));
  SSM_ASSERT_OK(ssm_graph_verify(g));
  ssm_dtype want[] = {SSM_Q8_0, SSM_Q4_0, SSM_BF16, SSM_Q8_0};
  int i = 0;
  for (ssm_node *n = g->first; n; n = n->next)
    if (n->op == SSM_OP_WEIGHT) CU_ASSERT_EQUAL(n->result->type.dtype, want[i++]);
  CU_ASSERT_EQUAL(i, 4);
  CU_ASSERT_PTR_NOT_NULL(strstr(note, "1 weights stored as q4_0"));
  CU_ASSERT_PTR_NOT_NULL(strstr(note, "2 of the vocabulary in q8_0; 1 kept in bf16: router (quantize: false)"));
  ssm_graph_destroy(g);
}

/* Only weights that nothing but a matmul (as its weight) or an embed (as
 * its table) reads become 16-bit, and only without a transform: %1 is
 * also added to, %3 has a transform, %6 is rank 1. The f32 results keep
 * the graph's activations f32. */
static void test_weights_pass(void) {
  const char *in = "graph g {\n"
                   "  %0:i32[2] = input name=\"tokens\"\n"
                   "  %1:f32[10,4] = weight name=\"emb\"\n"
                   "  %2:f32[2,4] = embed %1, %0\n"
                   "  %3:f32[8,4] = weight name=\"a\" transform=\"exp\"\n"
                   "  %4:f32[2,8] = matmul %2, %3\n"
                   "  %5:f32[4,8] = weight name=\"b\"\n"
                   "  %6:f32[4] = weight name=\"c\"\n"
                   "  %7:f32[2,4] = matmul %4, %5\n"
                   "  %8:f32[2,4] = add %7, %6\n"
                   "  %9:f32[10,4] = weight name=\"d\"\n"
                   "  %10:f32[2,10] = matmul %8, %9\n"
                   "  %11:f32[2,4] = embed %9, %0\n"
                   "  %12:f32[10,4] = add %1, %1\n"
                   "  output %10, %11, %12\n"
                   "}\n";
  for (int d = 0; d < 3; d++) {
    ssm_dtype dts[] = {SSM_BF16, SSM_F16, SSM_F32};
    ssm_graph *g = parse(in);
    if (!g) return;
    ssm_pass_opts po = {.weight_dtype = dts[d]};
    char note[256] = "";
    SSM_ASSERT_OK(ssm_pass_weights(g, &po, note, sizeof note));
    SSM_ASSERT_OK(ssm_graph_verify(g));
    ssm_dtype want[13] = {SSM_I32, SSM_F32, SSM_F32, SSM_F32, SSM_F32, dts[d], SSM_F32,
                          SSM_F32, SSM_F32, dts[d], SSM_F32, SSM_F32, SSM_F32};
    int i = 0;
    for (ssm_node *n = g->first; n; n = n->next)
      if (n->result) CU_ASSERT_EQUAL(n->result->type.dtype, want[i++]);
    CU_ASSERT_EQUAL(i, 13);
    if (dts[d] != SSM_F32) CU_ASSERT_PTR_NOT_NULL(strstr(note, "2 weights stored as"));
    ssm_graph_destroy(g);
  }
  ssm_graph *g = parse(in);
  ssm_pass_opts po = {.weight_dtype = SSM_I32};
  if (g) SSM_ASSERT_ERR(ssm_pass_weights(g, &po, NULL, 0), "weights: dtype i32 is not f32, f16, bf16, q8_0 or q4_0");
  ssm_graph_destroy(g);
  /* a 16-bit weight anywhere but a matmul's weight or an embed's table */
  g = NULL;
  ssm_status s = ssm_graph_parse("graph g {\n  %0:bf16[4] = weight name=\"w\"\n"
                                 "  %1:f32[4] = weight name=\"v\"\n"
                                 "  %2:f32[4] = add %1, %0\n  output %2\n}\n", "t.ssmir", &g);
  if (!s) s = ssm_graph_verify(g);
  SSM_ASSERT_ERR(s, "operand dtypes differ: f32[4] and bf16[4]");
  ssm_graph_destroy(g);
}

/* ---- simplify: fold --------------------------------------------------------- */

static void test_fold_a_log(void) {
  check_simplify("graph t {\n"
                 "  %0:f32[2,4] = input name=\"x\"\n"
                 "  %1:f32[4] = weight name=\"A_log\"\n"
                 "  %2:f32[4] = exp %1\n"
                 "  %3:f32[4] = neg %2\n"
                 "  %4:f32[2,4] = mul %0, %3\n"
                 "  output %4\n"
                 "}\n",
                 "graph t {\n"
                 "  %0:f32[2,4] = input name=\"x\"\n"
                 "  %1:f32[4] = weight name=\"A_log\" transform=\"exp,neg\"\n"
                 "  %2:f32[2,4] = mul %0, %1\n"
                 "  output %2\n"
                 "}\n",
                 "folded 2 unary ops into weight transforms, merged 0 nodes, removed 2 dead nodes");
}

/* An intermediate with two uses keeps its value for the other use; an
 * existing transform is extended; the weight's other use stays. */
static void test_fold_shared_intermediate(void) {
  check_simplify("graph t {\n"
                 "  %0:f32[4] = weight name=\"w\" transform=\"square\"\n"
                 "  %1:f32[4] = exp %0\n"
                 "  %2:f32[4] = neg %1\n"
                 "  %3:f32[4] = add %1, %2\n"
                 "  %4:f32[4] = mul %3, %0\n"
                 "  %5:f32[4] = sqrt %3\n"
                 "  output %4, %5\n"
                 "}\n",
                 "graph t {\n"
                 "  %0:f32[4] = weight name=\"w\" transform=\"square\"\n"
                 "  %1:f32[4] = weight name=\"w\" transform=\"square,exp\"\n"
                 "  %2:f32[4] = weight name=\"w\" transform=\"square,exp,neg\"\n"
                 "  %3:f32[4] = add %1, %2\n"
                 "  %4:f32[4] = mul %3, %0\n"
                 "  %5:f32[4] = sqrt %3\n"
                 "  output %4, %5\n"
                 "}\n",
                 "folded 2 unary ops into weight transforms, merged 0 nodes, removed 0 dead nodes");
}

/* Duplicated chains on the same weight fold to the same transform and merge. */
static void test_fold_then_merge(void) {
  check_simplify("graph t {\n"
                 "  %0:f32[4] = weight name=\"w\"\n"
                 "  %1:f32[4] = weight name=\"w\"\n"
                 "  %2:f32[4] = exp %0\n"
                 "  %3:f32[4] = exp %1\n"
                 "  %4:f32[4] = add %2, %3\n"
                 "  output %4\n"
                 "}\n",
                 "graph t {\n"
                 "  %0:f32[4] = weight name=\"w\" transform=\"exp\"\n"
                 "  %1:f32[4] = add %0, %0\n"
                 "  output %1\n"
                 "}\n",
                 "folded 2 unary ops into weight transforms, merged 2 nodes, removed 1 dead node");
}

/* ---- simplify: CSE ---------------------------------------------------------- */

static void test_cse(void) {
  check_simplify(
      "graph t {\n"
      "  %0:f32[2,8] = input name=\"x\"\n"
      "  %1:f32[2,4] = slice %0 axis=1 start=0 len=4\n"
      "  %2:f32[2,4] = slice %0 axis=1 start=0 len=4\n"
      "  %3:f32[2,4] = slice %0 axis=1 start=4 len=4\n"
      "  %4:f32[2,4,1] = reshape %1\n"
      "  %5:f32[2,4,1] = reshape %2\n"
      "  %6:f32[2,1,4] = reshape %2\n"
      "  %7:f32[2,4,4] = mul %4, %6\n"
      "  %8:f32[2,4,4] = mul %5, %6\n"
      "  %9:f32[4,4] = state name=\"h\"\n"
      "  %10:f32[2,4] = scan %7, %8, %6, %9\n"
      "  %11:f32[2,4] = scan %7, %8, %6, %9\n"
      "  %12:f32[4] = weight name=\"a\"\n"
      "  %13:f32[4] = weight name=\"a\" transform=\"exp\"\n"
      "  %14:f32[4] = weight name=\"a\"\n"
      "  %15:f32[] = const value=0.5\n"
      "  %16:f32[] = const value=0.25\n"
      "  %17:f32[4] = add %12, %13\n"
      "  %18:f32[4] = add %14, %15\n"
      "  %19:f32[4] = add %17, %16\n"
      "  %20:f32[2,4] = add %10, %11\n"
      "  %21:f32[2,4] = add %20, %3\n"
      "  %22:f32[2,4] = mul %21, %18\n"
      "  %23:f32[2,4] = mul %22, %19\n"
      "  output %23\n"
      "}\n",
      "graph t {\n"
      "  %0:f32[2,8] = input name=\"x\"\n"
      "  %1:f32[2,4] = slice %0 axis=1 start=0 len=4\n"
      "  %2:f32[2,4] = slice %0 axis=1 start=4 len=4\n"
      "  %3:f32[2,4,1] = reshape %1\n"
      "  %4:f32[2,1,4] = reshape %1\n"
      "  %5:f32[2,4,4] = mul %3, %4\n"
      "  %6:f32[4,4] = state name=\"h\"\n"
      "  %7:f32[2,4] = scan %5, %5, %4, %6\n"
      "  %8:f32[2,4] = scan %5, %5, %4, %6\n"
      "  %9:f32[4] = weight name=\"a\"\n"
      "  %10:f32[4] = weight name=\"a\" transform=\"exp\"\n"
      "  %11:f32[] = const value=0.5\n"
      "  %12:f32[] = const value=0.25\n"
      "  %13:f32[4] = add %9, %10\n"
      "  %14:f32[4] = add %9, %11\n"
      "  %15:f32[4] = add %13, %12\n"
      "  %16:f32[2,4] = add %7, %8\n"
      "  %17:f32[2,4] = add %16, %2\n"
      "  %18:f32[2,4] = mul %17, %14\n"
      "  %19:f32[2,4] = mul %18, %15\n"
      "  output %19\n"
      "}\n",
      "merged 4 nodes, removed 0 dead nodes");
}

/* conv1d_causal updates its state: two identical ones are two steps in time. */
static void test_cse_keeps_effects(void) {
  const char *text = "graph t {\n"
                     "  %0:f32[1,4] = input name=\"x\"\n"
                     "  %1:f32[2,4] = state name=\"conv\"\n"
                     "  %2:f32[4,3] = weight name=\"w\"\n"
                     "  %3:f32[1,4] = conv1d_causal %0, %1, %2\n"
                     "  %4:f32[1,4] = conv1d_causal %0, %1, %2\n"
                     "  %5:f32[2,4] = reshape %1\n"
                     "  %6:f32[1,4] = sub %3, %4\n"
                     "  %7:f32[2,4] = reshape %1\n"
                     "  %8:f32[2,4] = add %5, %7\n"
                     "  %9:f32[2,4] = add %8, %6\n"
                     "  output %9\n"
                     "}\n";
  check_simplify(text, text, "merged 0 nodes, removed 0 dead nodes");
}

/* Attributes are compared as a set, whatever order they were set in. */
static void test_cse_attr_order(void) {
  ssm_graph *g = ssm_test_graph("t");
  ssm_type t4 = ssm_type_make(SSM_F32, 1, (int64_t[]){4});
  ssm_node *a = ssm_graph_append(g, SSM_OP_WEIGHT, &t4, 0, NULL);
  ssm_node_set_str(g, a, "name", "w");
  ssm_node_set_str(g, a, "transform", "exp");
  ssm_node *b = ssm_graph_append(g, SSM_OP_WEIGHT, &t4, 0, NULL);
  ssm_node_set_str(g, b, "transform", "exp");
  ssm_node_set_str(g, b, "name", "w");
  ssm_value *ab[2] = {a->result, b->result};
  ssm_node *sum = ssm_graph_append(g, SSM_OP_ADD, &t4, 2, ab);
  ssm_graph_append(g, SSM_OP_OUTPUT, NULL, 1, &sum->result);
  char note[256];
  SSM_ASSERT_OK(ssm_pass_simplify(g, NULL, note, sizeof note));
  CU_ASSERT_PTR_NOT_NULL(strstr(note, "merged 1 node,"));
  CU_ASSERT(sum->args[0] == a->result && sum->args[1] == a->result);
  ssm_graph_destroy(g);
}

/* ---- simplify: DCE ---------------------------------------------------------- */

static void test_dce(void) {
  check_simplify("graph t {\n"
                 "  %0:f32[1,4] = input name=\"x\"\n"
                 "  %1:f32[2,4] = state name=\"conv\"\n"
                 "  %2:f32[4,3] = weight name=\"w\"\n"
                 "  %3:f32[1,4] = conv1d_causal %0, %1, %2\n"
                 "  %4:f32[4] = weight name=\"unused\"\n"
                 "  %5:f32[1,4] = mul %0, %4\n"
                 "  %6:f32[1,4] = silu %5\n"
                 "  %7:f32[1,4] = add %6, %0\n"
                 "  %8:f32[1,4] = sigmoid %0\n"
                 "  output %8\n"
                 "}\n",
                 "graph t {\n"
                 "  %0:f32[1,4] = input name=\"x\"\n"
                 "  %1:f32[2,4] = state name=\"conv\"\n"
                 "  %2:f32[4,3] = weight name=\"w\"\n"
                 "  %3:f32[1,4] = conv1d_causal %0, %1, %2\n"
                 "  %4:f32[1,4] = sigmoid %0\n"
                 "  output %4\n"
                 "}\n",
                 "merged 0 nodes, removed 4 dead nodes");
}

/* ---- attention: fused like any anchor, its caches are state it writes ----------- */

#define ATT_HEAD                                                                    \
  "graph t {\n"                                                                     \
  "  %0:f32[2,4,8] = input name=\"q\"\n"                                            \
  "  %1:f32[2,2,8] = input name=\"k\"\n"                                            \
  "  %2:f32[2,2,8] = input name=\"v\"\n"

static void test_fuse_attention(void) {
  /* q's scaling is computed where attention reads q; the residual add is its
   * epilogue; one kernel */
  check_pass(ssm_pass_fuse,
             ATT_HEAD
             "  %3:f32[16,2,8] = state name=\"kc\"\n"
             "  %4:f32[16,2,8] = state name=\"vc\"\n"
             "  %5:i32[1] = input name=\"pos\"\n"
             "  %6:f32[] = const value=0.5\n"
             "  %7:f32[2,4,8] = mul %0, %6\n"
             "  %8:f32[2,4,8] = attention %7, %1, %2, %3, %4, %5 scale=0.25\n"
             "  %9:f32[2,4,8] = add %8, %0\n"
             "  output %9\n"
             "}\n",
             ATT_HEAD
             "  %3:f32[16,2,8] = state name=\"kc\"\n"
             "  %4:f32[16,2,8] = state name=\"vc\"\n"
             "  %5:i32[1] = input name=\"pos\"\n"
             "  %6:f32[] = const value=0.5\n"
             "  %7:f32[2,4,8] = mul %0, %6 group=0\n"
             "  %8:f32[2,4,8] = attention %7, %1, %2, %3, %4, %5 scale=0.25 group=0\n"
             "  %9:f32[2,4,8] = add %8, %0 group=0\n"
             "  output %9\n"
             "}\n",
             "3 ops that do work -> 1 kernels");
  /* a cache must be a state tensor: the kernel writes it in place */
  ssm_graph *g = parse(ATT_HEAD
                       "  %3:f32[16,2,8] = input name=\"kc\"\n"
                       "  %4:f32[16,2,8] = state name=\"vc\"\n"
                       "  %5:i32[1] = input name=\"pos\"\n"
                       "  %6:f32[2,4,8] = attention %0, %1, %2, %3, %4, %5 scale=0.25\n"
                       "  output %6\n"
                       "}\n");
  char note[256];
  if (g) SSM_ASSERT_ERR(ssm_pass_fuse(g, NULL, note, sizeof note),
                        "attention: its state operand must be a state tensor itself, not input");
  ssm_graph_destroy(g);
  /* a kernel that reads a cache after attention wrote it waits for it; DCE
   * keeps attention for its effect even when its result is unused */
  g = parse(ATT_HEAD
            "  %3:f32[16,2,8] = state name=\"kc\"\n"
            "  %4:f32[16,2,8] = state name=\"vc\"\n"
            "  %5:i32[1] = input name=\"pos\"\n"
            "  %6:f32[2,4,8] = attention %0, %1, %2, %3, %4, %5 scale=0.25\n"
            "  %7:f32[1,2,8] = reduce %4 kind=\"sum\" axis=0\n"
            "  output %7\n"
            "}\n");
  if (!g) return;
  SSM_ASSERT_OK(ssm_passes_run(g, NULL, NULL, NULL, NULL));
  int seen = 0;
  for (ssm_node *n = g->first; n; n = n->next) {
    if (n->op == SSM_OP_ATTENTION) seen++;
    if (n->op == SSM_OP_REDUCE) CU_ASSERT_EQUAL(ssm_node_int(n, "sync", -1), 1);
  }
  CU_ASSERT_EQUAL(seen, 1);
  ssm_graph_destroy(g);
}

/* A decode conv (one token) is done in the epilogue of the matmul that
 * computes its input: the matmul's value, cut by slices, becomes a concat of
 * the conv's chain and the other slice, which the readers read slices of. */
#define CONV_HEAD                                                                   \
  "graph t {\n"                                                                     \
  "  %0:f32[1,8] = input name=\"x\"\n"                                              \
  "  %1:f32[16,8] = weight name=\"w\"\n"                                            \
  "  %2:f32[1,16] = matmul %0, %1\n"                                                \
  "  %3:f32[1,8] = slice %2 axis=1 start=8 len=8\n"                                 \
  "  %4:f32[1,8] = slice %2 axis=1 start=0 len=8\n"                                 \
  "  %5:f32[3,8] = state name=\"cs\"\n"                                             \
  "  %6:f32[8,4] = weight name=\"cw\"\n"

/* Whether fusing `text` folds a conv into a matmul (puts them in one
 * group); the result verifies either way. */
static int fuse_folds(const char *text) {
  ssm_graph *g = parse(text);
  if (!g) return -1;
  char note[256];
  SSM_ASSERT_OK(ssm_pass_fuse(g, NULL, note, sizeof note));
  SSM_ASSERT_OK(ssm_graph_verify(g));
  int64_t mm = -1, cv = -2;
  for (ssm_node *n = g->first; n; n = n->next) {
    if (n->op == SSM_OP_MATMUL) mm = ssm_node_int(n, "group", -1);
    if (n->op == SSM_OP_CONV1D) cv = ssm_node_int(n, "group", -1);
  }
  ssm_graph_destroy(g);
  return mm == cv;
}

static void test_fuse_decode_conv(void) {
  check_pass(ssm_pass_fuse,
             CONV_HEAD
             "  %7:f32[1,8] = conv1d_causal %4, %5, %6\n"
             "  %8:f32[1,8] = silu %7\n"
             "  %9:f32[8,8] = weight name=\"w2\"\n"
             "  %10:f32[1,8] = matmul %8, %9\n"
             "  %11:f32[1,8] = mul %10, %3\n"
             "  output %11\n"
             "}\n",
             "graph t {\n"
             "  %0:f32[1,8] = input name=\"x\"\n"
             "  %1:f32[16,8] = weight name=\"w\"\n"
             "  %2:f32[1,16] = matmul %0, %1 group=0\n"
             "  %3:f32[1,8] = slice %2 axis=1 start=8 len=8\n"
             "  %4:f32[1,8] = slice %2 axis=1 start=0 len=8\n"
             "  %5:f32[3,8] = state name=\"cs\"\n"
             "  %6:f32[8,4] = weight name=\"cw\"\n"
             "  %7:f32[1,8] = conv1d_causal %4, %5, %6 group=0\n"
             "  %8:f32[1,8] = silu %7 group=0\n"
             "  %9:f32[1,16] = concat %8, %3 axis=1 group=0\n"
             "  %10:f32[1,8] = slice %9 axis=1 start=0 len=8\n"
             "  %11:f32[1,8] = slice %9 axis=1 start=8 len=8\n"
             "  %12:f32[8,8] = weight name=\"w2\"\n"
             "  %13:f32[1,8] = matmul %10, %12 group=1\n"
             "  %14:f32[1,8] = mul %13, %11 group=1\n"
             "  output %14\n"
             "}\n",
             "10 ops that do work -> 2 kernels");
  /* two tokens: the conv is a kernel of its own */
  check_pass(ssm_pass_fuse,
             "graph t {\n"
             "  %0:f32[2,8] = input name=\"x\"\n"
             "  %1:f32[16,8] = weight name=\"w\"\n"
             "  %2:f32[2,16] = matmul %0, %1\n"
             "  %3:f32[2,8] = slice %2 axis=1 start=0 len=8\n"
             "  %4:f32[2,8] = slice %2 axis=1 start=8 len=8\n"
             "  %5:f32[3,8] = state name=\"cs\"\n"
             "  %6:f32[8,4] = weight name=\"cw\"\n"
             "  %7:f32[2,8] = conv1d_causal %3, %5, %6\n"
             "  %8:f32[2,8] = mul %7, %4\n"
             "  output %8\n"
             "}\n",
             "graph t {\n"
             "  %0:f32[2,8] = input name=\"x\"\n"
             "  %1:f32[16,8] = weight name=\"w\"\n"
             "  %2:f32[2,16] = matmul %0, %1 group=0\n"
             "  %3:f32[2,8] = slice %2 axis=1 start=0 len=8\n"
             "  %4:f32[2,8] = slice %2 axis=1 start=8 len=8\n"
             "  %5:f32[3,8] = state name=\"cs\"\n"
             "  %6:f32[8,4] = weight name=\"cw\"\n"
             "  %7:f32[2,8] = conv1d_causal %3, %5, %6 group=1\n"
             "  %8:f32[2,8] = mul %7, %4 group=1\n"
             "  output %8\n"
             "}\n",
             "5 ops that do work -> 2 kernels");
  /* slices that do not cut the matmul's value exactly (a gap): no fold */
  CU_ASSERT_FALSE(fuse_folds("graph t {\n"
                             "  %0:f32[1,8] = input name=\"x\"\n"
                             "  %1:f32[16,8] = weight name=\"w\"\n"
                             "  %2:f32[1,16] = matmul %0, %1\n"
                             "  %3:f32[1,4] = slice %2 axis=1 start=0 len=4\n"
                             "  %4:f32[1,8] = slice %2 axis=1 start=8 len=8\n"
                             "  %5:f32[3,8] = state name=\"cs\"\n"
                             "  %6:f32[8,4] = weight name=\"cw\"\n"
                             "  %7:f32[1,8] = conv1d_causal %4, %5, %6\n"
                             "  %8:f32[1,1] = reduce %7 kind=\"sum\" axis=1\n"
                             "  %9:f32[1,4] = add %8, %3\n"
                             "  output %9\n"
                             "}\n"));
  /* a reader of the other slice before the conv: no fold (the concat would
   * come after it) */
  CU_ASSERT_FALSE(fuse_folds(CONV_HEAD
                             "  %7:f32[1,8] = exp %3\n"
                             "  %8:f32[1,8] = conv1d_causal %4, %5, %6\n"
                             "  %9:f32[1,8] = mul %8, %7\n"
                             "  output %9\n"
                             "}\n"));
  /* the same graph with the reader after the conv folds */
  CU_ASSERT_TRUE(fuse_folds(CONV_HEAD
                            "  %7:f32[1,8] = conv1d_causal %4, %5, %6\n"
                            "  %8:f32[1,8] = exp %3\n"
                            "  %9:f32[1,8] = mul %7, %8\n"
                            "  output %9\n"
                            "}\n"));
}

/* ---- verify and infer --------------------------------------------------------- */

static void test_verify_pass(void) {
  check_pass(ssm_pass_verify,
             "graph t {\n  %0:f32[4] = input name=\"x\"\n  output %0\n}\n",
             "graph t {\n  %0:f32[4] = input name=\"x\"\n  output %0\n}\n", "2 nodes, 1 value");
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_graph_parse("graph t {\n  %0:f32[4] = input name=\"x\"\n  %1:f32[4] = "
                                "exp %0\n}\n", "t.ssmir", &g));
  char note[64];
  SSM_ASSERT_ERR(ssm_pass_verify(g, NULL, note, sizeof note), "no output node");
  ssm_graph_destroy(g);
}

static void test_infer(void) {
  check_pass(ssm_pass_infer,
             "graph t {\n  %0:f32[2,4] = input name=\"x\"\n  %1:f32[4] = weight name=\"w\"\n"
             "  %2:f32[2,4] = add %0, %1\n  %3:f32[8] = reshape %2\n  output %3\n}\n",
             "graph t {\n  %0:f32[2,4] = input name=\"x\"\n  %1:f32[4] = weight name=\"w\"\n"
             "  %2:f32[2,4] = add %0, %1\n  %3:f32[8] = reshape %2\n  output %3\n}\n",
             "checked 4 value types");
  /* a wrong declared type, parsed: the place is file:line:col */
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_graph_parse("graph t {\n  %0:f32[2,4] = input name=\"x\"\n"
                                "  %1:f32[4] = weight name=\"w\"\n"
                                "  %2:f32[4,4] = add %0, %1\n  output %2\n}\n",
                                "t.ssmir", &g));
  char note[64];
  SSM_ASSERT_ERR(ssm_pass_infer(g, NULL, note, sizeof note),
                 "t.ssmir:4:3: declared f32[4,4] but add computes f32[2,4]");
  ssm_graph_destroy(g);
  /* built: the place is the value */
  g = ssm_test_graph("b");
  ssm_type t24 = ssm_type_make(SSM_F32, 2, (int64_t[]){2, 4});
  ssm_type wrong = ssm_type_make(SSM_F16, 2, (int64_t[]){2, 4});
  ssm_node *x = ssm_graph_append(g, SSM_OP_INPUT, &t24, 0, NULL);
  ssm_node_set_str(g, x, "name", "x");
  ssm_node *e = ssm_graph_append(g, SSM_OP_EXP, &wrong, 1, &x->result);
  ssm_graph_append(g, SSM_OP_OUTPUT, NULL, 1, &e->result);
  SSM_ASSERT_ERR(ssm_pass_infer(g, NULL, note, sizeof note),
                 "graph b: %1 (exp): declared f16[2,4] but exp computes f32[2,4]");
  ssm_graph_destroy(g);
  /* operands that fit no shape rule */
  SSM_ASSERT_OK(ssm_graph_parse("graph t {\n  %0:f32[3] = input name=\"x\"\n"
                                "  %1:f32[2,4] = input name=\"y\"\n"
                                "  %2:f32[2,4] = add %0, %1\n  output %2\n}\n",
                                "t.ssmir", &g));
  SSM_ASSERT_ERR(ssm_pass_infer(g, NULL, note, sizeof note),
                 "t.ssmir:4:3: operand shapes f32[3] and f32[2,4] do not broadcast");
  ssm_graph_destroy(g);
}

/* ---- the pipeline ------------------------------------------------------------- */

typedef struct {
  char names[16][32];
  char notes[16][256];
  int n;
  const char *corrupt_after; /* the callback breaks the graph after this pass */
} seen;

static void record(const char *pass, ssm_graph *g, const char *note, void *user) {
  seen *s = user;
  if (s->n < 16) {
    snprintf(s->names[s->n], sizeof s->names[0], "%s", pass);
    snprintf(s->notes[s->n], sizeof s->notes[0], "%s", note);
    s->n++;
  }
  if (s->corrupt_after && !strcmp(pass, s->corrupt_after))
    g->last->prev->result->type.dims[0] = 3; /* the node before output */
}

static const char *const small =
    "graph t {\n"
    "  %0:f32[2,4] = input name=\"x\"\n"
    "  %1:f32[4] = weight name=\"A_log\"\n"
    "  %2:f32[4] = exp %1\n"
    "  %3:f32[4] = neg %2\n"
    "  %4:f32[2,4] = mul %0, %3\n"
    "  output %4\n"
    "}\n";

static void test_pipeline(void) {
  CU_ASSERT_STRING_EQUAL(ssm_passes[0].name, "verify");
  int count = 0;
  for (const ssm_pass *p = ssm_passes; p->name; p++) {
    CU_ASSERT_PTR_NOT_NULL(p->fn);
    CU_ASSERT_PTR_NOT_NULL(p->what);
    count++;
  }
  CU_ASSERT_EQUAL(count, 7);

  ssm_graph *g = parse(small);
  seen s = {0};
  SSM_ASSERT_OK(ssm_passes_run(g, NULL, "simplify", record, &s));
  CU_ASSERT_EQUAL(s.n, 3);
  CU_ASSERT_STRING_EQUAL(s.names[0], "verify");
  CU_ASSERT_STRING_EQUAL(s.names[1], "infer");
  CU_ASSERT_STRING_EQUAL(s.names[2], "simplify");
  CU_ASSERT_PTR_NOT_NULL(strstr(s.notes[2], "folded 2"));
  char *text = ssm_test_print(g);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "transform=\"exp,neg\""));
  free(text);
  ssm_graph_destroy(g);

  /* the whole pipeline, every pass reporting */
  g = parse(small);
  s = (seen){0};
  SSM_ASSERT_OK(ssm_passes_run(g, NULL, NULL, record, &s));
  CU_ASSERT_EQUAL(s.n, count);
  for (int i = 0; i < s.n && i < count; i++) CU_ASSERT_STRING_EQUAL(s.names[i], ssm_passes[i].name);
  ssm_graph_destroy(g);

  g = parse(small);
  s = (seen){0};
  SSM_ASSERT_ERR(ssm_passes_run(g, NULL, "fusion", record, &s),
                 "unknown pass 'fusion' (passes: verify, infer, simplify, weights, fuse, "
                 "plan_buffers, schedule)");
  CU_ASSERT_EQUAL(s.n, 0); /* nothing ran */
  ssm_graph_destroy(g);

  /* a graph that does not verify stops the pipeline at the first pass */
  g = parse(small);
  g->last->prev->result->type.dims[1] = 5;
  s = (seen){0};
  SSM_ASSERT_ERR(ssm_passes_run(g, NULL, NULL, record, &s),
                 "declared f32[2,5] but mul computes f32[2,4]");
  CU_ASSERT_EQUAL(s.n, 0);
  ssm_graph_destroy(g);
}

static ssm_status pass_ok(ssm_graph *g, const ssm_pass_opts *o, char *note, size_t n) {
  snprintf(note, n, "fine");
  return NULL;
}

/* Declares a wrong result type on the node before the output. */
static ssm_status pass_break(ssm_graph *g, const ssm_pass_opts *o, char *note, size_t n) {
  g->last->prev->result->type.dims[0] = 7;
  return NULL;
}

static ssm_status pass_fail(ssm_graph *g, const ssm_pass_opts *o, char *note, size_t n) {
  return ssm_status_new(SSM_ERR_UNSUPPORTED, "cannot do this");
}

static void test_verify_between_passes(void) {
  const ssm_pass list[] = {{"first", pass_ok, "-"}, {"breaker", pass_break, "-"},
                           {"last", pass_ok, "-"}, {NULL, NULL, NULL}};
  ssm_graph *g = parse(small);
  seen s = {0};
  SSM_ASSERT_ERR(ssm_passes_run_list(list, g, NULL, NULL, record, &s, 1),
                 "after pass breaker: t.ssmir:6:3: declared f32[7,4] but mul computes f32[2,4]");
  CU_ASSERT_EQUAL(s.n, 2); /* the callback saw the broken graph; "last" never ran */
  ssm_graph_destroy(g);

  /* without the verifier between passes the pipeline does not notice */
  g = parse(small);
  SSM_ASSERT_OK(ssm_passes_run_list(list, g, NULL, NULL, NULL, NULL, 0));
  ssm_graph_destroy(g);

  /* a pass's own error stops the pipeline as it is */
  const ssm_pass failing[] = {{"first", pass_ok, "-"}, {"failing", pass_fail, "-"},
                              {"last", pass_ok, "-"}, {NULL, NULL, NULL}};
  g = parse(small);
  s = (seen){0};
  ssm_status st = ssm_passes_run_list(failing, g, NULL, NULL, record, &s, 1);
  CU_ASSERT_STRING_EQUAL(ssm_status_message(st), "cannot do this");
  ssm_status_free(st);
  CU_ASSERT_EQUAL(s.n, 1);
  ssm_graph_destroy(g);

  /* stop_after names a pass of the list given */
  g = parse(small);
  s = (seen){0};
  SSM_ASSERT_OK(ssm_passes_run_list(list, g, NULL, "first", record, &s, 1));
  CU_ASSERT_EQUAL(s.n, 1);
  SSM_ASSERT_ERR(ssm_passes_run_list(list, g, NULL, "simplify", record, &s, 1),
                 "unknown pass 'simplify' (passes: first, breaker, last)");
  ssm_graph_destroy(g);

  /* the real pipeline: in debug builds (SSM_VERIFY_PASSES) a graph broken
   * after a pass is reported with that pass's name */
  g = parse(small);
  s = (seen){.corrupt_after = "infer"};
  ssm_status r = ssm_passes_run(g, NULL, NULL, record, &s);
#ifdef SSM_VERIFY_PASSES
  SSM_ASSERT_ERR(r, "after pass infer: t.ssmir:6:3: declared f32[3,4]");
  CU_ASSERT_EQUAL(s.n, 2);
#else
  SSM_ASSERT_OK(r);
#endif
  ssm_graph_destroy(g);
}

/* ---- load-time weight transforms ---------------------------------------------- */

static void test_weight_transform(void) {
  float x[4] = {0, 1, -1, 0.6931471805599453f};
  SSM_ASSERT_OK(ssm_weight_transform("exp,neg", x, 4));
  CU_ASSERT(x[0] == -1.0f && x[1] == (float)-exp(1.0) && x[2] == (float)-exp(-1.0) &&
            fabsf(x[3] + 2) < 1e-6f);
  float y[3] = {4, 9, 0.25f};
  SSM_ASSERT_OK(ssm_weight_transform("", y, 3));
  CU_ASSERT(y[0] == 4 && y[1] == 9 && y[2] == 0.25f);
  SSM_ASSERT_OK(ssm_weight_transform("sqrt", y, 3));
  CU_ASSERT(y[0] == 2 && y[1] == 3 && y[2] == 0.5f);
  SSM_ASSERT_OK(ssm_weight_transform("square,rsqrt,neg,relu", y, 3));
  CU_ASSERT(y[0] == 0 && y[1] == 0 && y[2] == 0);

  float z[2] = {1, 2};
  ssm_sb known = {0}; /* every unary op of the table, in its order */
  ssm_sb_printf(&known, "transform \"exp,cube\": unknown transform op 'cube' (known: ");
  int nunary = 0;
  for (int o = 0; o < SSM_OP_COUNT; o++)
    if (ssm_op_info_get((ssm_op)o)->kind == SSM_KIND_UNARY)
      ssm_sb_printf(&known, "%s%s", nunary++ ? ", " : "", ssm_op_info_get((ssm_op)o)->name);
  ssm_sb_printf(&known, ")");
  CU_ASSERT(nunary >= 11);
  SSM_ASSERT_ERR(ssm_weight_transform("exp,cube", z, 2), known.s);
  ssm_sb_free(&known);
  CU_ASSERT(z[0] == 1 && z[1] == 2); /* checked before anything changes */
  SSM_ASSERT_ERR(ssm_weight_transform("add", z, 2), "unknown transform op 'add'");
  SSM_ASSERT_ERR(ssm_weight_transform("neg_exp", z, 2), "unknown transform op 'neg_exp'");
  SSM_ASSERT_ERR(ssm_weight_transform("exp,,neg", z, 2), "empty op name");
  SSM_ASSERT_ERR(ssm_weight_transform("exp,", z, 2), "empty op name");
  CU_ASSERT(z[0] == 1 && z[1] == 2);
}

/* Each unary op as a transform gives, bit for bit, what the CPU interpreter
 * computes for the op in a graph: folding changes no value. */
static void test_transform_matches_cpu(void) {
  enum { N = 9 };
  int32_t tokens[N] = {0, 1, 2, 3, 5, 8, 13, 40, 70};
  ssm_cpu *c;
  SSM_ASSERT_OK(ssm_cpu_create(NULL, &c));
  int ops = 0;
  for (int op = 0; op < SSM_OP_COUNT; op++) {
    if (ssm_op_info_get((ssm_op)op)->kind != SSM_KIND_UNARY) continue;
    ops++;
    for (int sign = -1; sign <= 1; sign += 2) {
      /* x = tokens * (sign * 0.37), then the op */
      ssm_graph *g = ssm_test_graph("u");
      ssm_type tn = ssm_type_make(SSM_F32, 1, (int64_t[]){N}), ts = {SSM_F32, 0, {0}};
      ssm_node *in = ssm_graph_append(g, SSM_OP_INPUT, &tn, 0, NULL);
      ssm_node_set_str(g, in, "name", "tokens");
      ssm_node *k = ssm_graph_append(g, SSM_OP_CONST, &ts, 0, NULL);
      ssm_node_set_float(g, k, "value", sign * 0.37);
      ssm_value *ik[2] = {in->result, k->result};
      ssm_node *x = ssm_graph_append(g, SSM_OP_MUL, &tn, 2, ik);
      ssm_node *y = ssm_graph_append(g, (ssm_op)op, &tn, 1, &x->result);
      ssm_graph_append(g, SSM_OP_OUTPUT, NULL, 1, &y->result);
      SSM_ASSERT_OK(ssm_graph_verify(g));
      float want[N], got[N];
      SSM_ASSERT_OK(ssm_cpu_run(c, g, tokens, want, N));
      for (int i = 0; i < N; i++)
        got[i] = (float)((double)(float)tokens[i] * (double)(float)(sign * 0.37));
      SSM_ASSERT_OK(ssm_weight_transform(ssm_op_info_get((ssm_op)op)->name, got, N));
      for (int i = 0; i < N; i++) {
        int same = !memcmp(&got[i], &want[i], sizeof(float));
        if (!same)
          fprintf(stderr, "\n  %s(%d*%g): transform %.9g, cpu %.9g",
                  ssm_op_info_get((ssm_op)op)->name, tokens[i], sign * 0.37, got[i], want[i]);
        CU_ASSERT(same);
      }
      ssm_graph_destroy(g);
    }
  }
  CU_ASSERT(ops >= 11); /* every unary op of the table was tried */
  ssm_cpu_destroy(c);
}

/* ---- whole models on the CPU: simplify changes no logit ------------------------- */

static const char *const fixtures[] = {"mamba1_tiny", "mamba1_untied", "mamba1_f16_sharded",
                                       "falcon_tiny", "falcon_bf16_untied"};

/* The tokens of golden.json (prompt, then all generated but the last) and
 * the logits transformers computed for them. */
static int load_fixture(const char *name, int32_t *tokens, int cap, float **logits, int *vocab) {
  char rel[256], *text;
  size_t n;
  snprintf(rel, sizeof rel, "tests/data/%s/golden.json", name);
  ssm_status s = ssm_file_read(ssm_test_path(rel), 0, &text, &n);
  if (s) {
    fprintf(stderr, "\n  %s\n", ssm_status_message(s));
    ssm_status_free(s);
    return 0;
  }
  cJSON *j = cJSON_Parse(text);
  free(text);
  if (!j) return 0;
  int count = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "prompt")) if (count < cap) tokens[count++] = it->valueint;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "generated")) if (count < cap) tokens[count++] = it->valueint;
  count--; /* the last generated token is never fed */
  int rows = cJSON_GetObjectItem(j, "rows")->valueint;
  *vocab = cJSON_GetObjectItem(j, "vocab")->valueint;
  cJSON_Delete(j);
  snprintf(rel, sizeof rel, "tests/data/%s/logits.f32", name);
  if ((s = ssm_file_read(ssm_test_path(rel), 0, &text, &n))) {
    ssm_status_free(s);
    return 0;
  }
  if (rows != count || n != (size_t)rows * (size_t)*vocab * 4) {
    free(text);
    return 0;
  }
  *logits = (float *)text;
  return count;
}

static double max_abs_diff(const float *a, const float *b, size_t n, double *max_ref) {
  double d = 0;
  *max_ref = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - b[i]);
    if (!(e <= d)) d = e;
    if (fabs(b[i]) > *max_ref) *max_ref = fabs(b[i]);
  }
  return d;
}

static void check_fixture_simplified(const char *name) {
  int32_t tokens[128];
  float *golden = NULL;
  int vocab = 0;
  int count = load_fixture(name, tokens, 128, &golden, &vocab);
  if (!count) {
    fprintf(stderr, "\n  fixture %s missing or malformed\n", name);
    CU_FAIL("fixture missing");
    return;
  }
  char rel[256];
  snprintf(rel, sizeof rel, "tests/data/%s", name);
  ssm_model *m = NULL;
  ssm_graph *before = NULL, *after = NULL;
  ssm_st *st = NULL;
  ssm_cpu *c = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path(rel), NULL, &m));
  if (m) SSM_ASSERT_OK(ssm_model_build(m, count, &before));
  if (m) SSM_ASSERT_OK(ssm_model_build(m, count, &after));
  if (after) SSM_ASSERT_OK(ssm_passes_run(after, NULL, "simplify", NULL, NULL));
  SSM_ASSERT_OK(ssm_st_open(ssm_test_path(rel), &st));
  if (st) SSM_ASSERT_OK(ssm_cpu_create(st, &c));
  size_t n = (size_t)count * (size_t)vocab;
  float *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
  if (before && after && c) {
    char *text = ssm_test_print(after);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "transform=\"exp,neg\""));
    free(text);
    SSM_ASSERT_OK(ssm_cpu_run(c, before, tokens, a, n));
    ssm_cpu_reset(c);
    SSM_ASSERT_OK(ssm_cpu_run(c, after, tokens, b, n));
    double ref, d = max_abs_diff(b, a, n, &ref);
    fprintf(stderr, "\n  %s: simplified vs not: max |diff| %.3g (max |logit| %.3g)", name, d, ref);
    CU_ASSERT(ref > 0.5 && d <= 1e-6 * ref);
    d = max_abs_diff(b, golden, n, &ref);
    CU_ASSERT(d <= 1e-4 * ref); /* and both still match transformers */
  }
  free(a);
  free(b);
  free(golden);
  ssm_cpu_destroy(c);
  ssm_st_close(st);
  ssm_graph_destroy(before);
  ssm_graph_destroy(after);
  ssm_model_close(m);
}

static void test_cpu_simplified(void) {
  for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
    check_fixture_simplified(fixtures[i]);
}

/* ---- golden IR after each pass ---------------------------------------------------- */

#define NOT_YET "not implemented yet"

typedef struct {
  char *text[16]; /* "# after PASS: NOTE\n" + graph, per pass in order */
  char note[16][512];
  int n;
} dumps;

static void dump_after(const char *pass, ssm_graph *g, const char *note, void *user) {
  dumps *d = user;
  if (d->n >= 16) return;
  char *graph = ssm_test_print(g);
  size_t len = strlen(pass) + strlen(note) + strlen(graph) + 16;
  d->text[d->n] = malloc(len);
  snprintf(d->text[d->n], len, "# after %s: %s\n%s", pass, note, graph);
  snprintf(d->note[d->n], sizeof d->note[0], "%s", note);
  d->n++;
  free(graph);
}

/* The text after the header line parses, verifies and prints back unchanged. */
static void check_parses_back(const char *file, const char *text) {
  const char *body = strchr(text, '\n');
  CU_ASSERT_FATAL(body != NULL);
  body++;
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_graph_parse(text, file, &g));
  if (!g) return;
  SSM_ASSERT_OK(ssm_graph_verify(g));
  char *again = ssm_test_print(g);
  if (strcmp(again, body)) fprintf(stderr, "\n  %s does not print back unchanged\n", file);
  CU_ASSERT_STRING_EQUAL(again, body);
  free(again);
  ssm_graph_destroy(g);
}

static void test_golden_ir(void) {
  ssm_model *m = NULL;
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path("tests/data/mamba1_tiny"), NULL, &m));
  if (m) SSM_ASSERT_OK(ssm_model_build(m, 2, &g));
  ssm_model_close(m);
  if (!g) return;
  dumps d;
  memset(&d, 0, sizeof d);
  /* with bf16 weights, so that the weights pass has something to do */
  ssm_pass_opts po = {.weight_dtype = SSM_BF16};
  SSM_ASSERT_OK(ssm_passes_run(g, &po, NULL, dump_after, &d));
  ssm_graph_destroy(g);
  const char *update = getenv("SSM_UPDATE_GOLDEN");
  int updating = update && !strcmp(update, "1");
  CU_ASSERT_EQUAL(d.n, 7);
  for (int i = 0; i < d.n; i++) {
    const char *pass = ssm_passes[i].name;
    char rel[256];
    snprintf(rel, sizeof rel, "tests/data/ir/passes/%s.ssmir", pass);
    const char *path = ssm_test_path(rel);
    int placeholder = !strcmp(d.note[i], NOT_YET);
    if (updating && !placeholder) {
      FILE *f = fopen(path, "wb");
      CU_ASSERT_PTR_NOT_NULL_FATAL(f);
      fputs(d.text[i], f);
      fclose(f);
      fprintf(stderr, "\n  wrote %s", rel);
    }
    char *want = NULL;
    size_t n;
    ssm_status s = ssm_file_read(path, 0, &want, &n);
    if (s) {
      ssm_status_free(s);
      if (placeholder) {
        fprintf(stderr, "\n  %s: pass %s is not implemented yet; no golden", rel, pass);
      } else {
        fprintf(stderr, "\n  %s is missing, but pass %s reports \"%s\": create it with "
                "SSM_UPDATE_GOLDEN=1 build/test_passes (or `ssmc ir tests/data/mamba1_tiny "
                "--seq 2 --dtype bf16 --after %s > %s`) and review it\n", rel, pass, d.note[i], pass, rel);
        CU_FAIL("golden IR file missing for an implemented pass");
      }
      continue;
    }
    if (strcmp(want, d.text[i]))
      fprintf(stderr, "\n  %s differs from the IR after pass %s (SSM_UPDATE_GOLDEN=1 rewrites "
              "it); got:\n%s", rel, pass, d.text[i]);
    CU_ASSERT_STRING_EQUAL(want, d.text[i]);
    check_parses_back(rel, want);
    free(want);
  }

  /* after simplify, A = -exp(A_log) is a load-time transform: no unary op
   * reads a weight any more, and no neg is left */
  if (d.n >= 3) {
    CU_ASSERT_PTR_NOT_NULL(strstr(d.text[2], "# after simplify: "));
    CU_ASSERT_PTR_NOT_NULL(strstr(d.text[2], "A_log\" transform=\"exp,neg\""));
    g = NULL;
    SSM_ASSERT_OK(ssm_graph_parse(d.text[2], "simplify.ssmir", &g));
    int transformed = 0;
    for (const ssm_node *n = g ? g->first : NULL; n; n = n->next) {
      CU_ASSERT(n->op != SSM_OP_NEG);
      if (ssm_op_info_get(n->op)->kind == SSM_KIND_UNARY)
        CU_ASSERT(n->args[0]->def->op != SSM_OP_WEIGHT);
      if (n->op == SSM_OP_WEIGHT && strstr(ssm_node_str(n, "name", ""), "A_log")) {
        CU_ASSERT_STRING_EQUAL(ssm_node_str(n, "transform", ""), "exp,neg");
        transformed++;
      }
    }
    CU_ASSERT_EQUAL(transformed, 2);
    ssm_graph_destroy(g);
  }
  for (int i = 0; i < d.n; i++) free(d.text[i]);
}

/* `ssmc ir --after` prints the same text, and `--after all` all of it. */
static void test_cli(void) {
  char cmd[2048], *out = NULL;
  snprintf(cmd, sizeof cmd, "cd %s && %s ir tests/data/mamba1_tiny --seq 2 --after simplify",
           ssm_test_source_dir(), ssm_test_ssmc());
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &out), 0);
  char *want = NULL;
  size_t n;
  SSM_ASSERT_OK(ssm_file_read(ssm_test_path("tests/data/ir/passes/simplify.ssmir"), 0, &want, &n));
  if (want) CU_ASSERT_STRING_EQUAL(out, want);
  free(out);

  /* a .ssmir input runs the pipeline too: simplify is a fixed point */
  snprintf(cmd, sizeof cmd, "cd %s && %s ir tests/data/ir/passes/simplify.ssmir --after simplify",
           ssm_test_source_dir(), ssm_test_ssmc());
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &out), 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "# after simplify: folded 0 unary ops into weight "
                                     "transforms, merged 0 nodes, removed 0 dead nodes\n"));
  if (want) CU_ASSERT_STRING_EQUAL(strchr(out, '\n'), strchr(want, '\n'));
  free(out);

  snprintf(cmd, sizeof cmd, "cd %s && %s ir tests/data/mamba1_tiny --seq 2 --after all",
           ssm_test_source_dir(), ssm_test_ssmc());
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &out), 0);
  if (want) CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
  int headers = 0;
  for (const char *p = out; (p = strstr(p, "# after ")); p++) headers++;
  CU_ASSERT_EQUAL(headers, 7);
  free(out);
  free(want);

  snprintf(cmd, sizeof cmd, "cd %s && %s ir tests/data/mamba1_tiny --after fusion",
           ssm_test_source_dir(), ssm_test_ssmc());
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &out), 2);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "unknown pass 'fusion' (passes: verify, infer, simplify, "
                                     "weights, fuse, plan_buffers, schedule, all)"));
  free(out);
  snprintf(cmd, sizeof cmd, "cd %s && %s ir tests/data/mamba1_tiny --after",
           ssm_test_source_dir(), ssm_test_ssmc());
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &out), 2);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "'--after' needs a value"));
  free(out);
}

enum { CHAIN_VIEWS, CHAIN_NEGS, CHAIN_DOUBLING };

/* IR text: %4 = matmul(embed(tokens), w) [1,4], then `count` ops on it —
 * reshapes between [4] and [1,4] (CHAIN_VIEWS), negs (CHAIN_NEGS) or
 * x = add(x, x) (CHAIN_DOUBLING) — then a residual add of %2 and the output. */
static char *chain_ir(int kind, int count) {
  size_t cap = 512 + (size_t)count * 64, n = 0;
  char *t = malloc(cap);
  n += (size_t)snprintf(t + n, cap - n,
                        "graph g {\n  %%0:i32[1] = input name=\"tokens\"\n"
                        "  %%1:f32[10,4] = weight name=\"e\"\n  %%2:f32[1,4] = embed %%1, %%0\n"
                        "  %%3:f32[4,4] = weight name=\"w\"\n  %%4:f32[1,4] = matmul %%2, %%3\n");
  int v = 4;
  for (int i = 0; i < count; i++, v++) {
    if (kind == CHAIN_VIEWS)
      n += (size_t)snprintf(t + n, cap - n, "  %%%d:%s = reshape %%%d\n", v + 1,
                            i % 2 ? "f32[1,4]" : "f32[4]", v);
    else if (kind == CHAIN_NEGS)
      n += (size_t)snprintf(t + n, cap - n, "  %%%d:f32[1,4] = neg %%%d\n", v + 1, v);
    else
      n += (size_t)snprintf(t + n, cap - n, "  %%%d:f32[1,4] = add %%%d, %%%d\n", v + 1, v, v);
  }
  if (count % 2 && kind == CHAIN_VIEWS) {
    n += (size_t)snprintf(t + n, cap - n, "  %%%d:f32[1,4] = reshape %%%d\n", v + 1, v);
    v++;
  }
  snprintf(t + n, cap - n, "  %%%d:f32[1,4] = add %%2, %%%d\n  output %%%d\n}\n", v + 1, v, v + 1);
  return t;
}

/* Runs every pass over IR text; returns the graph (NULL on error). */
static ssm_graph *run_all(const char *text) {
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_graph_parse(text, "chain.ssmir", &g));
  if (g) SSM_ASSERT_OK(ssm_passes_run(g, NULL, NULL, NULL, NULL));
  return g;
}

/* 301 reshapes in a row, read in place by one kernel: the passes follow the
 * chain without a depth limit (plan_buffers asserted at 256; fuzz_ir seed
 * regress_view_chain.ssmir). */
static void test_long_view_chain(void) {
  char *t = chain_ir(CHAIN_VIEWS, 301);
  ssm_graph *g = run_all(t);
  CU_ASSERT_PTR_NOT_NULL(g);
  ssm_graph_destroy(g);
  free(t);
}

/* The largest group=N membership of a graph, and the number of groups. */
static int largest_group(const ssm_graph *g, int *out_groups) {
  int count[4096] = {0}, max = 0, groups = 0;
  for (const ssm_node *n = g->first; n; n = n->next) {
    int k = (int)ssm_node_int(n, "group", -1);
    if (k < 0 || k >= 4096) continue;
    if (!count[k]++) groups++;
    if (count[k] > max) max = count[k];
  }
  *out_groups = groups;
  return max;
}

/* 300 negs after a matmul: the epilogue stops at 64 ops a kernel (the
 * in-place check walked them recursively and asserted at depth 256; fuzz_ir
 * seed regress_long_epilogue.ssmir). */
static void test_long_epilogue(void) {
  char *t = chain_ir(CHAIN_NEGS, 300);
  ssm_graph *g = run_all(t);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  int groups, largest = largest_group(g, &groups);
  CU_ASSERT(largest <= 64);
  CU_ASSERT(groups >= 300 / 64 + 1);
  ssm_graph_destroy(g);
  free(t);
}

/* x = add(x, x) 30 times: codegen inlines a fused operand at each use, so
 * one kernel would evaluate the first add 2^30 times per element (ssmc
 * compile hung). A kernel now evaluates an operand op at most 8 times, which
 * here is a kernel every few adds. */
static void test_doubling_chain(void) {
  char *t = chain_ir(CHAIN_DOUBLING, 30);
  ssm_graph *g = run_all(t);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  int groups, largest = largest_group(g, &groups);
  CU_ASSERT(largest <= 5);
  CU_ASSERT(groups >= 30 / 5);
  ssm_graph_destroy(g);
  free(t);
}

/* mamba1 with 2000 layers (86,000 nodes) through every pass: the passes
 * are linear in the graph (folding, CSE and the per-kernel walks were
 * quadratic: this took about half a minute); 15 s is ample even under ASan. */
static void test_many_layers(void) {
  const char *yaml = ssm_models_embedded("mamba1.yaml");
  const char *at = strstr(yaml, "repeat: layers");
  CU_ASSERT_PTR_NOT_NULL_FATAL(at);
  size_t cap = strlen(yaml) + 16;
  char *text = malloc(cap);
  snprintf(text, cap, "%.*srepeat: 2000%s", (int)(at - yaml), yaml, at + strlen("repeat: layers"));
  static const char cfg[] =
      "{\"hidden_size\": 16, \"intermediate_size\": 32, \"state_size\": 4, \"time_step_rank\": 2,"
      " \"conv_kernel\": 4, \"num_hidden_layers\": 1, \"vocab_size\": 50,"
      " \"layer_norm_epsilon\": 1e-5, \"tie_word_embeddings\": true}";
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ssm_model *m = NULL;
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_model_open_text("many.yaml", text, strlen(text), "config.json", cfg, strlen(cfg), &m));
  free(text);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  SSM_ASSERT_OK(ssm_model_build(m, 1, &g));
  ssm_model_close(m);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  SSM_ASSERT_OK(ssm_passes_run(g, NULL, NULL, NULL, NULL));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  fprintf(stderr, "\n  2000 layers: %.2f s\n", secs);
  CU_ASSERT(secs < 15);
  ssm_graph_destroy(g);
}

int main(void) {
  CU_TestInfo tests[] = {{"long_view_chain", test_long_view_chain},
                         {"long_epilogue", test_long_epilogue},
                         {"doubling_chain", test_doubling_chain},
                         {"many_layers", test_many_layers},
                         {"fold_a_log", test_fold_a_log},
                         {"fold_shared_intermediate", test_fold_shared_intermediate},
                         {"fold_then_merge", test_fold_then_merge},
                         {"cse", test_cse},
                         {"cse_keeps_effects", test_cse_keeps_effects},
                         {"cse_attr_order", test_cse_attr_order},
                         {"dce", test_dce},
                         {"fuse_attention", test_fuse_attention},
                         {"fuse_decode_conv", test_fuse_decode_conv},
                         {"verify_pass", test_verify_pass},
                         {"infer", test_infer},
                         {"pipeline", test_pipeline},
                         {"verify_between_passes", test_verify_between_passes},
                         {"weight_transform", test_weight_transform},
                         {"transform_matches_cpu", test_transform_matches_cpu},
                         {"cpu_simplified", test_cpu_simplified},
                         {"golden_ir", test_golden_ir},
                         {"weights_pass", test_weights_pass},
                         {"weights_q4_0", test_weights_q4_0},
                         {"cli", test_cli},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("passes", tests);
}
