/*
 * test_frontend.c — the YAML frontend: mamba1 and falcon_mamba graphs built
 * from a small hand-written config.json, Hugging Face directory mode, and
 * "file:line:col: message" errors for bad descriptions.
 */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir.h"
#include "testutil.h"

static const char *tiny_config(const char *name, const char *extra) {
  char buf[1024];
  int n = snprintf(buf, sizeof buf,
                   "{%s\"model_type\": \"mamba\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
                   " \"state_size\": 16, \"time_step_rank\": 4, \"conv_kernel\": 4,\n"
                   " \"num_hidden_layers\": 2, \"vocab_size\": 1000, \"layer_norm_epsilon\": 1e-5,\n"
                   " \"tie_word_embeddings\": true}\n",
                   extra);
  return ssm_test_write(name, buf, (size_t)n);
}

static ssm_graph *build(const char *yaml, const char *config, int tokens) {
  ssm_model *m = NULL;
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_model_load(yaml, config, &m));
  if (!m) return NULL;
  SSM_ASSERT_OK(ssm_model_build(m, tokens, &g));
  ssm_model_destroy(m);
  return g;
}

static int count_op(const ssm_graph *g, ssm_op op) {
  int k = 0;
  for (ssm_node *n = g->first; n; n = n->next) k += n->op == op;
  return k;
}

static ssm_node *find_named(const ssm_graph *g, ssm_op op, const char *name) {
  for (ssm_node *n = g->first; n; n = n->next)
    if (n->op == op && !strcmp(ssm_node_str(n, "name", ""), name)) return n;
  return NULL;
}

static int type_is(const ssm_value *v, const char *want) {
  char buf[160];
  ssm_type_format(&v->type, buf, sizeof buf);
  if (strcmp(buf, want)) fprintf(stderr, "\n  type %s, expected %s\n", buf, want);
  return !strcmp(buf, want);
}

static void test_mamba1_shapes(void) {
  const char *cfg = tiny_config("config.json", "");
  const char *yaml = ssm_test_path("models/mamba1.yaml");
  for (int T = 1; T <= 5; T += 4) {
    ssm_graph *g = build(yaml, cfg, T);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_STRING_EQUAL(g->name, T == 1 ? "decode" : "prefill");
    SSM_ASSERT_OK(ssm_graph_verify(g));
    /* 10 weights per layer (no biases but the conv's), embed and norm_f */
    CU_ASSERT_EQUAL(count_op(g, SSM_OP_WEIGHT), 22);
    CU_ASSERT_EQUAL(count_op(g, SSM_OP_STATE), 4);
    CU_ASSERT_EQUAL(count_op(g, SSM_OP_INPUT), 1);
    CU_ASSERT_EQUAL(count_op(g, SSM_OP_SCAN), 2);
    CU_ASSERT_EQUAL(count_op(g, SSM_OP_RMSNORM), 3);
    CU_ASSERT_PTR_NULL(find_named(g, SSM_OP_WEIGHT, "lm_head.weight"));
    ssm_node *a_log = find_named(g, SSM_OP_WEIGHT, "backbone.layers.1.mixer.A_log");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a_log);
    CU_ASSERT(type_is(a_log->result, "f32[128,16]"));
    ssm_node *conv = find_named(g, SSM_OP_WEIGHT, "backbone.layers.0.mixer.conv1d.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(conv);
    CU_ASSERT(type_is(conv->result, "f32[128,1,4]"));
    ssm_node *st = find_named(g, SSM_OP_STATE, "l1.ssm_state");
    CU_ASSERT_PTR_NOT_NULL_FATAL(st);
    CU_ASSERT(type_is(st->result, "f32[128,16]"));
    ssm_node *cst = find_named(g, SSM_OP_STATE, "l0.conv_state");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cst);
    CU_ASSERT(type_is(cst->result, "f32[3,128]"));
    ssm_node *tok = find_named(g, SSM_OP_INPUT, "tokens");
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    CU_ASSERT(type_is(tok->result, T == 1 ? "i32[1]" : "i32[5]"));
    for (ssm_node *n = g->first; n; n = n->next)
      if (n->op == SSM_OP_SCAN) CU_ASSERT(type_is(n->result, T == 1 ? "f32[1,128]" : "f32[5,128]"));
    /* slices keep axis in [0, rank) */
    for (ssm_node *n = g->first; n; n = n->next)
      if (n->op == SSM_OP_SLICE) CU_ASSERT_EQUAL(ssm_node_int(n, "axis", -9), 1);
    ssm_node *out = g->last;
    CU_ASSERT_EQUAL(out->op, SSM_OP_OUTPUT);
    CU_ASSERT_EQUAL_FATAL(out->nargs, 1);
    CU_ASSERT(type_is(out->args[0], T == 1 ? "f32[1,1000]" : "f32[5,1000]"));
    /* tied: logits = matmul(x, embed) */
    CU_ASSERT_EQUAL(out->args[0]->def->op, SSM_OP_MATMUL);
    CU_ASSERT_EQUAL(out->args[0]->def->args[1]->def, find_named(g, SSM_OP_WEIGHT, "backbone.embeddings.weight"));
    ssm_graph_destroy(g);
  }
}

static void test_model_params(void) {
  const char *cfg = tiny_config("config.json", "");
  ssm_model *m = NULL;
  SSM_ASSERT_OK(ssm_model_load(ssm_test_path("models/mamba1.yaml"), cfg, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  CU_ASSERT_STRING_EQUAL(ssm_model_arch(m), "mamba1");
  int64_t v = 0;
  CU_ASSERT_TRUE(ssm_model_param(m, "vocab", &v));
  CU_ASSERT_EQUAL(v, 1000);
  CU_ASSERT_TRUE(ssm_model_param(m, "layers", &v));
  CU_ASSERT_EQUAL(v, 2);
  CU_ASSERT_FALSE(ssm_model_param(m, "eps", &v)); /* a float */
  CU_ASSERT_FALSE(ssm_model_param(m, "nope", &v));
  ssm_model_destroy(m);
}

static void test_mamba1_untied_bias(void) {
  const char *cfg = tiny_config("config_untied.json", "\"use_bias\": true, \"tie_word_embeddings\": false, ");
  ssm_graph *g = build(ssm_test_path("models/mamba1.yaml"), cfg, 3);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT_EQUAL(count_op(g, SSM_OP_WEIGHT), 22 + 1 + 2 * 2);
  ssm_node *head = find_named(g, SSM_OP_WEIGHT, "lm_head.weight");
  CU_ASSERT_PTR_NOT_NULL_FATAL(head);
  CU_ASSERT(type_is(head->result, "f32[1000,64]"));
  CU_ASSERT_EQUAL(g->last->args[0]->def->args[1], head->result);
  ssm_node *bias = find_named(g, SSM_OP_WEIGHT, "backbone.layers.1.mixer.in_proj.bias");
  CU_ASSERT_PTR_NOT_NULL_FATAL(bias);
  CU_ASSERT(type_is(bias->result, "f32[256]"));
  CU_ASSERT_PTR_NOT_NULL(find_named(g, SSM_OP_WEIGHT, "backbone.layers.0.mixer.out_proj.bias"));
  ssm_graph_destroy(g);

  cfg = tiny_config("config_noconvb.json", "\"use_conv_bias\": false, ");
  g = build(ssm_test_path("models/mamba1.yaml"), cfg, 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT_EQUAL(count_op(g, SSM_OP_WEIGHT), 20);
  for (ssm_node *n = g->first; n; n = n->next)
    if (n->op == SSM_OP_CONV1D) CU_ASSERT_EQUAL(n->nargs, 3);
  ssm_graph_destroy(g);
}

static void test_falcon_mamba(void) {
  const char *cfg = tiny_config("config.json", "");
  ssm_graph *m1 = build(ssm_test_path("models/mamba1.yaml"), cfg, 5);
  ssm_graph *fm = build(ssm_test_path("models/falcon_mamba.yaml"), cfg, 5);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(fm);
  CU_ASSERT_EQUAL(count_op(fm, SSM_OP_RMSNORM), count_op(m1, SSM_OP_RMSNORM) + 3 * 2);
  CU_ASSERT_EQUAL(count_op(fm, SSM_OP_WEIGHT), count_op(m1, SSM_OP_WEIGHT));
  int weightless = 0;
  for (ssm_node *n = fm->first; n; n = n->next)
    if (n->op == SSM_OP_RMSNORM && n->nargs == 1) {
      weightless++;
      CU_ASSERT_DOUBLE_EQUAL(ssm_node_float(n, "eps", 0), 1e-6, 1e-12);
    }
  CU_ASSERT_EQUAL(weightless, 6);
  /* dt is normalized before dt_proj: its matmul reads an rmsnorm */
  int dt_proj_after_norm = 0;
  for (ssm_node *n = fm->first; n; n = n->next)
    if (n->op == SSM_OP_MATMUL && n->args[0]->def->op == SSM_OP_RMSNORM &&
        !strncmp(ssm_node_str(n->args[1]->def, "name", ""), "backbone.layers.", 16) &&
        strstr(ssm_node_str(n->args[1]->def, "name", ""), "dt_proj.weight"))
      dt_proj_after_norm++;
  CU_ASSERT_EQUAL(dt_proj_after_norm, 2);
  ssm_graph_destroy(m1);
  ssm_graph_destroy(fm);

  cfg = tiny_config("config_eps.json", "\"mixer_rms_eps\": 0.001, ");
  fm = build(ssm_test_path("models/falcon_mamba.yaml"), cfg, 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(fm);
  for (ssm_node *n = fm->first; n; n = n->next)
    if (n->op == SSM_OP_RMSNORM && n->nargs == 1) CU_ASSERT_DOUBLE_EQUAL(ssm_node_float(n, "eps", 0), 1e-3, 1e-12);
  ssm_graph_destroy(fm);
}

/* Makes DIR/config.json with the given model_type; returns DIR. */
static const char *hf_dir(const char *dir, const char *model_type) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", ssm_test_tmpdir(), dir);
  mkdir(path, 0700);
  char name[256], extra[128];
  snprintf(name, sizeof name, "%s/config.json", dir);
  snprintf(extra, sizeof extra, "\"model_type\": \"%s\", ", model_type);
  tiny_config(name, extra);
  return path;
}

static void test_hf_directory(void) {
  ssm_model *m = NULL;
  SSM_ASSERT_OK(ssm_model_load(hf_dir("hf_falcon", "falcon_mamba"), NULL, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  CU_ASSERT_STRING_EQUAL(ssm_model_arch(m), "falcon_mamba");
  ssm_model_destroy(m);
  m = NULL;
  SSM_ASSERT_OK(ssm_model_load(hf_dir("hf_mamba", "mamba"), NULL, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  CU_ASSERT_STRING_EQUAL(ssm_model_arch(m), "mamba1");
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_model_build(m, 2, &g));
  CU_ASSERT_PTR_NOT_NULL(g);
  ssm_graph_destroy(g);
  ssm_model_destroy(m);

  const char *dir = hf_dir("hf_xyz", "xyz");
  char want[600];
  snprintf(want, sizeof want, "%s/config.json: model_type 'xyz' is not supported (known: falcon_mamba, mamba)", dir);
  SSM_ASSERT_ERR(ssm_model_load(dir, NULL, &m), want);
  CU_ASSERT_PTR_NULL(m);
  /* config_path overrides the directory's config.json */
  SSM_ASSERT_OK(ssm_model_load(dir, tiny_config("cfg_override.json", ""), &m));
  CU_ASSERT_PTR_NOT_NULL(m);
  ssm_model_destroy(m);

  /* a description not on disk under models/: the embedded copy, if any */
  m = NULL;
  char cwd_model[600];
  snprintf(cwd_model, sizeof cwd_model, "%s/config.json", dir);
  if (chdir(ssm_test_tmpdir()) == 0) {
    SSM_ASSERT_OK(ssm_model_load("models/falcon_mamba.yaml", cwd_model, &m));
    CU_ASSERT_PTR_NOT_NULL(m);
    if (m) CU_ASSERT_STRING_EQUAL(ssm_model_arch(m), "falcon_mamba");
    ssm_model_destroy(m);
    SSM_ASSERT_ERR(ssm_model_load("elsewhere/falcon_mamba.yaml", cwd_model, &m), "elsewhere/falcon_mamba.yaml");
    CU_ASSERT(chdir(ssm_test_source_dir()) == 0);
  }
}

/* ---- errors -------------------------------------------------------------- */

/* A small valid description; error tests replace one marked line. */
static const char *const tiny_yaml =
    "ssmc: 1\n"
    "architecture: tiny\n"
    "model_types: [tiny]\n"
    "params:\n"
    "  hidden: hidden_size\n"
    "  vocab: vocab_size\n"
    "  layers: num_hidden_layers\n"
    "  tied: {key: tie_word_embeddings, default: true}\n"
    "  half: {value: hidden / 2}\n"
    "blocks:\n"
    "  mlp:\n"
    "    in: x\n"
    "    out: y\n"
    "    weights:\n"
    "      up: {name: \"layers.{i}.up\", shape: [half, hidden]}\n"
    "      down: {name: \"layers.{i}.down\", shape: [hidden, half]}\n"
    "    state:\n"
    "      acc: [half]\n"
    "    body:\n"
    "      - h = silu(matmul(x, up))\n"
    "      - y = add(x, matmul(h, down))\n"
    "weights:\n"
    "  embed: {name: \"embed\", shape: [vocab, hidden]}\n"
    "  odd: {name: \"odd\", shape: [3, 5]}\n"
    "  head: {name: \"head\", shape: [vocab, hidden], if: \"!tied\"}\n"
    "graph:\n"
    "  - x = embed(embed, tokens)\n"
    "  - repeat: layers\n"
    "    block: mlp\n"
    "    carry: x\n"
    "  - x = rmsnorm(x, eps=1e-5)\n"
    "  - output(matmul(x, embed))\n";

/* tiny_yaml with the first line containing `old` replaced by `line`, written
 * to NAME; *out_text gets the text for position lookups. */
static const char *tiny_variant(const char *name, const char *old, const char *line, char *text, size_t cap) {
  const char *at = strstr(tiny_yaml, old);
  CU_ASSERT_PTR_NOT_NULL_FATAL(at);
  const char *bol = at;
  while (bol > tiny_yaml && bol[-1] != '\n') bol--;
  const char *eol = strchr(at, '\n');
  int n = snprintf(text, cap, "%.*s%s%s", (int)(bol - tiny_yaml), tiny_yaml, line, eol);
  return ssm_test_write(name, text, (size_t)n);
}

/* "path:line:col" of the first `needle` in `text` (plus `delta` columns). */
static const char *where(const char *path, const char *text, const char *needle, int delta) {
  static char buf[4][600];
  static int k;
  char *b = buf[k++ & 3];
  const char *at = strstr(text, needle);
  CU_ASSERT_PTR_NOT_NULL(at);
  if (!at) return "?";
  int line = 1, col = 1;
  for (const char *c = text; c < at; c++) {
    if (*c == '\n') line++, col = 1;
    else col++;
  }
  snprintf(b, sizeof buf[0], "%s:%d:%d: ", path, line, col + delta);
  return b;
}

/* Loads a variant and asserts the error is at `needle` with `message`. */
static void expect_error(const char *old, const char *line, const char *needle, int delta, const char *message) {
  char text[4096], want[1200];
  const char *cfg = tiny_config("config.json", "");
  const char *path = tiny_variant("bad.yaml", old, line, text, sizeof text);
  snprintf(want, sizeof want, "%s%s", where(path, text, needle, delta), message);
  ssm_model *m = NULL;
  SSM_ASSERT_ERR(ssm_model_load(path, cfg, &m), want);
  CU_ASSERT_PTR_NULL(m);
}

static void test_tiny_ok(void) {
  char text[4096];
  const char *path = tiny_variant("tiny.yaml", "ssmc: 1", "ssmc: 1", text, sizeof text);
  ssm_graph *g = build(path, tiny_config("config.json", ""), 7);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT(type_is(find_named(g, SSM_OP_WEIGHT, "layers.1.up")->result, "f32[32,64]"));
  CU_ASSERT_PTR_NULL(find_named(g, SSM_OP_STATE, "l0.acc")); /* unused: never made */
  CU_ASSERT_PTR_NULL(find_named(g, SSM_OP_WEIGHT, "odd"));
  CU_ASSERT(type_is(g->last->args[0], "f32[7,1000]"));
  ssm_graph_destroy(g);
}

static void test_error_unknown_op(void) {
  expect_error("h = silu", "      - h = scna(matmul(x, up))", "scna", 0, "unknown op 'scna'");
}

static void test_error_undefined_name(void) {
  expect_error("h = silu", "      - h = silu(matmul(xz, up))", "xz,", 0, "undefined name 'xz'");
  expect_error("h = silu", "      - h = silu(matmul(x, up, foo=1))", "foo", 0, "op 'matmul' has no attribute 'foo'");
}

static void test_error_arity(void) {
  expect_error("h = silu", "      - h = silu(x, up)", "up)", 0, "op 'silu' takes at most 1 operand");
  expect_error("h = silu", "      - h = add(x)", "add", 0, "op 'add' takes 2 operands, got 1");
}

static void test_error_attrs(void) {
  expect_error("eps=1e-5", "  - x = rmsnorm(x)", "rmsnorm", 0, "op 'rmsnorm' needs attribute 'eps'");
  expect_error("eps=1e-5", "  - x = slice(x, axis=1, start=0, len=hidden / 3)", "hidden / 3", 0,
               "attribute 'len' of 'slice' must be an integer, not a float");
  expect_error("eps=1e-5", "  - x = slice(x, axis=-3, start=0, len=2)", "slice", 0,
               "slice: axis -3 out of range for rank 2");
}

static void test_error_missing_config_key(void) {
  char want[600];
  snprintf(want, sizeof want, "config.json (%s) has no key 'state_sz' (needed by param 'state')",
           tiny_config("config.json", ""));
  expect_error("hidden: hidden_size", "  state: state_sz", "state_sz", 0, want);
}

static void test_error_templates(void) {
  expect_error("up: {", "      up: {name: \"layers.{i.up\", shape: [half, hidden]}", "{i.up", 0,
               "unbalanced '{' in name template");
  expect_error("up: {", "      up: {name: \"layers.i}.up\", shape: [half, hidden]}", "}.up", 0,
               "unbalanced '}' in name template");
  expect_error("up: {", "      up: {name: \"layers.{j}.up\", shape: [half, hidden]}", "j}", 0,
               "undefined name 'j'");
  expect_error("embed: {", "  embed: {name: \"embed.{i}\", shape: [vocab, hidden]}", "embed.{i}", 7,
               "undefined name 'i'");
}

static void test_error_shapes(void) {
  expect_error("odd: {", "  odd: {name: \"odd\", shape: [3, hidden - 64]}", "hidden - 64", 0,
               "dimension 'hidden - 64' must be an integer in 1..2^40, got 0");
  expect_error("odd: {", "  odd: {name: \"odd\", shape: [1099511627776, 2]}", "2]", 0,
               "a weight shape has more than 2^40 elements");
  /* matmul with the wrong weight: the shape rule's message at the call */
  expect_error("eps=1e-5", "  - x = matmul(x, odd)", "matmul(x, odd)", 0, "matmul needs x [..,K] and weight [N,K]");
  expect_error("h = silu", "      - h = silu(matmul(x, down))", "matmul(x, down)", 0, "matmul needs x [..,K]");
  expect_error("eps=1e-5", "  - x = reshape(x, [T, 3])", "reshape", 0, "reshape: cannot reshape f32[1,64] to f32[1,3]");
  expect_error("eps=1e-5", "  - x = add(x, odd)", "add(x, odd)", 0, "add: operand shapes f32[1,64] and f32[3,5] do not broadcast");
  expect_error("eps=1e-5", "  - x = matmul(x, head)", "head)", 0, "weight 'head' is absent here (its 'if' is false)");
}

static void test_error_yaml(void) {
  /* bad indentation: libyaml's problem with its position */
  expect_error("architecture: tiny", "  architecture: tiny", ": tiny", 0, "mapping values are not allowed");
  expect_error("  - repeat: layers", "  - repeat: 100001", "100001", 0, "repeat count '100001' must be an integer in 0..100000, got 100001");
  expect_error("    block: mlp", "    block: mpl", "mpl", 0, "unknown block 'mpl'");
  expect_error("    out: y", "    out: yy", "yy", 0, "block 'mlp' never assigns its out variable 'yy'");
  expect_error("ssmc: 1", "ssmc: 2", "2", 0, "unsupported ssmc format version '2'");
  expect_error("ssmc: 1", "ssmc: 1\nextra: 3", "extra", 0, "unknown key 'extra' in the model description");
  expect_error("output(", "  - x = output(x)", "output", 0, "this op defines no value to assign to 'x'");
  expect_error("output(", "  - silu(x)", "graph:", 0, "graph: must end with output(...)");

  char nested[2048] = "ssmc: 1\narchitecture: deep\ngraph: ";
  for (int k = 0; k < 100; k++) strcat(nested, "[");
  const char *path = ssm_test_write("deep.yaml", nested, strlen(nested));
  ssm_model *m = NULL;
  SSM_ASSERT_ERR(ssm_model_load(path, tiny_config("config.json", ""), &m), "YAML nested deeper than 64");
  SSM_ASSERT_ERR(ssm_model_load(path, NULL, &m), "needs a config.json");
  const char *bad_json = ssm_test_write("bad.json", "{\"a\": 1,\n \"b\": }", 16);
  SSM_ASSERT_ERR(ssm_model_load(ssm_test_path("models/mamba1.yaml"), bad_json, &m), "bad.json:2:");
}

static void test_error_libyaml_message(void) {
  const char *text = "ssmc: 1\narchitecture: tiny\n graph:\n  - x\n";
  const char *path = ssm_test_write("indent.yaml", text, strlen(text));
  char want[600];
  snprintf(want, sizeof want, "%s:3:7: ", path);
  ssm_model *m = NULL;
  SSM_ASSERT_ERR(ssm_model_load(path, tiny_config("config.json", ""), &m), want);
}

static void test_print_roundtrip(void) {
  ssm_graph *g = build(ssm_test_path("models/mamba1.yaml"), tiny_config("config.json", ""), 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  char *text = ssm_graph_print(g);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "graph decode {"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "name=\"backbone.layers.1.mixer.A_log\""));
  ssm_graph *g2 = NULL;
  SSM_ASSERT_OK(ssm_graph_parse(text, "mamba1.ssmir", &g2));
  if (g2) {
    SSM_ASSERT_OK(ssm_graph_verify(g2));
    char *text2 = ssm_graph_print(g2);
    CU_ASSERT_STRING_EQUAL(text, text2);
    free(text2);
    ssm_graph_destroy(g2);
  }
  free(text);
  ssm_graph_destroy(g);
}

/* Bad config.json values: the message names the key or, for values that
 * are numbers of the wrong range, the YAML expression that uses them. */
static void test_config_errors(void) {
  static const char *const cases[][2] = {
      {"\"hidden_size\": \"64\", ", "key 'hidden_size' (param 'hidden') is not a number or bool"},
      {"\"hidden_size\": [64], ", "key 'hidden_size' (param 'hidden') is not a number or bool"},
      {"\"hidden_size\": {}, ", "key 'hidden_size' (param 'hidden') is not a number or bool"},
      {"\"hidden_size\": null, ", "has no key 'hidden_size' (needed by param 'hidden')"},
      {"\"hidden_size\": -64, ", "dimension 'hidden' must be an integer in 1..2^40, got -64"},
      {"\"hidden_size\": 0, ", "dimension 'hidden' must be an integer in 1..2^40, got 0"},
      {"\"hidden_size\": 64.5, ", "dimension 'hidden' must be an integer in 1..2^40, got 64.5"},
      {"\"hidden_size\": true, ", "dimension 'hidden' must be an integer in 1..2^40, got true"},
      {"\"vocab_size\": 1e300, ", "dimension 'vocab' must be an integer in 1..2^40, got 1e+300"},
      {"\"vocab_size\": 2199023255552, ", "dimension 'vocab' must be an integer in 1..2^40, got 2199023255552"},
      {"\"num_hidden_layers\": -2, ", "repeat count 'layers' must be an integer in 0..100000, got -2"},
      {"\"num_hidden_layers\": 1.5, ", "repeat count 'layers' must be an integer in 0..100000, got 1.5"},
  };
  ssm_model *m = NULL;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    SSM_ASSERT_ERR(ssm_model_load(ssm_test_path("models/mamba1.yaml"), tiny_config("bad_cfg.json", cases[i][0]), &m),
                   cases[i][1]);
    CU_ASSERT_PTR_NULL(m);
  }
  static const char *const files[][2] = {
      {"", "bad_cfg.json:1:1: malformed JSON"},
      {"garbage", "bad_cfg.json:1:1: malformed JSON"},
      {"{\"hidden_size\": 64,,}", "bad_cfg.json:1:21: malformed JSON"},
      {"[1, 2]", "bad_cfg.json: not a JSON object"},
      {"64", "bad_cfg.json: not a JSON object"},
  };
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    const char *cfg = ssm_test_write("bad_cfg.json", files[i][0], strlen(files[i][0]));
    SSM_ASSERT_ERR(ssm_model_load(ssm_test_path("models/mamba1.yaml"), cfg, &m), files[i][1]);
    CU_ASSERT_PTR_NULL(m);
  }
  /* directory mode: model_type must be a string */
  char dir[512], path[600];
  snprintf(dir, sizeof dir, "%s/hf_bad_type", ssm_test_tmpdir());
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs("{\"model_type\": 5}", f);
  fclose(f);
  SSM_ASSERT_ERR(ssm_model_load(dir, NULL, &m), "config.json: no string 'model_type'");
  CU_ASSERT_PTR_NULL(m);
}

/* The in-memory entry point builds what the file one builds, and names its
 * inputs as told in messages. */
static void test_load_text(void) {
  static const char cfg[] =
      "{\"model_type\": \"mamba\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
      " \"state_size\": 16, \"time_step_rank\": 4, \"conv_kernel\": 4,\n"
      " \"num_hidden_layers\": 2, \"vocab_size\": 1000, \"layer_norm_epsilon\": 1e-5,\n"
      " \"tie_word_embeddings\": true}\n";
  const char *yaml = ssm_models_embedded("mamba1.yaml");
  CU_ASSERT_PTR_NOT_NULL_FATAL(yaml);
  ssm_model *m = NULL;
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_model_load_text("mem.yaml", yaml, strlen(yaml), "mem.json", cfg, strlen(cfg), &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  SSM_ASSERT_OK(ssm_model_build(m, 1, &g));
  ssm_model_destroy(m);
  ssm_graph *want = build(ssm_test_path("models/mamba1.yaml"), ssm_test_write("config.json", cfg, strlen(cfg)), 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT_PTR_NOT_NULL_FATAL(want);
  char *a = ssm_graph_print(g), *b = ssm_graph_print(want);
  CU_ASSERT_STRING_EQUAL(a, b);
  free(a);
  free(b);
  ssm_graph_destroy(g);
  ssm_graph_destroy(want);

  /* lengths are honoured: nothing past them is read (ASan builds check) */
  char *cut = malloc(10);
  memcpy(cut, cfg, 10);
  SSM_ASSERT_ERR(ssm_model_load_text("mem.yaml", yaml, strlen(yaml), "mem.json", cut, 10, &m),
                 "mem.json:1:3: malformed JSON");
  free(cut);
  CU_ASSERT_PTR_NULL(m);
  SSM_ASSERT_ERR(ssm_model_load_text("mem.yaml", yaml, strlen(yaml), "mem.json", "[1]", 3, &m),
                 "mem.json: not a JSON object");
  SSM_ASSERT_ERR(ssm_model_load_text("mem.yaml", "ssmc: 1\n", 8, "mem.json", cfg, strlen(cfg), &m),
                 "mem.yaml:1:1: the model description needs key 'architecture'");
  CU_ASSERT_PTR_NULL(m);
}

int main(void) {
  CU_TestInfo tests[] = {{"mamba1_shapes", test_mamba1_shapes},
                         {"model_params", test_model_params},
                         {"mamba1_untied_bias", test_mamba1_untied_bias},
                         {"falcon_mamba", test_falcon_mamba},
                         {"hf_directory", test_hf_directory},
                         {"tiny_ok", test_tiny_ok},
                         {"error_unknown_op", test_error_unknown_op},
                         {"error_undefined_name", test_error_undefined_name},
                         {"error_arity", test_error_arity},
                         {"error_attrs", test_error_attrs},
                         {"error_missing_config_key", test_error_missing_config_key},
                         {"error_templates", test_error_templates},
                         {"error_shapes", test_error_shapes},
                         {"error_yaml", test_error_yaml},
                         {"error_libyaml_message", test_error_libyaml_message},
                         {"print_roundtrip", test_print_roundtrip},
                         {"load_text", test_load_text},
                         {"config_errors", test_config_errors},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("frontend", tests);
}
