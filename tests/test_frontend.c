/*
 * test_frontend.c — the YAML frontend: mamba1, falcon_mamba and mamba2 graphs
 * built from a small hand-written config.json, Hugging Face directory mode, and
 * "file:line:col: message" errors for bad descriptions.
 */
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir/ir.h"
#include "frontend/frontend.h"
#include "testutil.h"

/* A mamba config.json; `extra` ("\"key\": value, ...") adds keys or
 * replaces the ones it names. */
static const char *tiny_config(const char *name, const char *extra) {
  static const char *const base[][2] = {
      {"model_type", "\"mamba\""}, {"hidden_size", "64"}, {"intermediate_size", "128"},
      {"state_size", "16"},         {"time_step_rank", "4"}, {"conv_kernel", "4"},
      {"num_hidden_layers", "2"},   {"vocab_size", "1000"}, {"layer_norm_epsilon", "1e-5"},
      {"tie_word_embeddings", "true"}};
  char buf[1024], key[64];
  int n = snprintf(buf, sizeof buf, "{%s", extra);
  size_t el = strlen(extra);
  int first = !el || (el >= 2 && !strcmp(extra + el - 2, ", ")); /* extra ends with its comma */
  for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) {
    snprintf(key, sizeof key, "\"%s\"", base[i][0]);
    if (strstr(extra, key)) continue;
    n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%s: %s", first ? "" : ", ", key, base[i][1]);
    first = 0;
  }
  n += snprintf(buf + n, sizeof buf - (size_t)n, "}\n");
  return ssm_test_write(name, buf, (size_t)n);
}

static ssm_graph *build(const char *yaml, const char *config, int tokens) {
  ssm_model *m = NULL;
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_model_open(yaml, config, &m));
  if (!m) return NULL;
  SSM_ASSERT_OK(ssm_model_build(m, tokens, &g));
  ssm_model_close(m);
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
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path("models/mamba1.yaml"), cfg, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  CU_ASSERT_STRING_EQUAL(ssm_model_arch(m), "mamba1");
  int64_t v = 0;
  CU_ASSERT_TRUE(ssm_model_param(m, "vocab", &v));
  CU_ASSERT_EQUAL(v, 1000);
  CU_ASSERT_TRUE(ssm_model_param(m, "layers", &v));
  CU_ASSERT_EQUAL(v, 2);
  CU_ASSERT_FALSE(ssm_model_param(m, "eps", &v)); /* a float */
  CU_ASSERT_FALSE(ssm_model_param(m, "nope", &v));
  ssm_model_close(m);
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

/* A Mamba-2 config.json as transformers writes it: time_step_limit holds
 * Python's non-standard Infinity. */
static const char *mamba2_config(const char *name, int heads, int head_dim, int groups) {
  char buf[1024];
  int n = snprintf(buf, sizeof buf,
                   "{\"model_type\": \"mamba2\", \"hidden_size\": 48, \"expand\": 2,\n"
                   " \"num_heads\": %d, \"head_dim\": %d, \"n_groups\": %d, \"state_size\": 8,\n"
                   " \"conv_kernel\": 4, \"num_hidden_layers\": 3, \"vocab_size\": 757,\n"
                   " \"layer_norm_epsilon\": 1e-6, \"use_bias\": true, \"use_conv_bias\": true,\n"
                   " \"tie_word_embeddings\": false, \"chunk_size\": 256,\n"
                   " \"time_step_limit\": [0.0, Infinity]}\n",
                   heads, head_dim, groups);
  return ssm_test_write(name, buf, (size_t)n);
}

/* Mamba-2: scalar A per head, B and C in groups, the scan's state
 * [groups, heads/groups, head_dim, state] and the gated norm over inner. */
static void test_mamba2_shapes(void) {
  const char *cfg = mamba2_config("config_m2.json", 4, 24, 2);
  const char *yaml = ssm_test_path("models/mamba2.yaml");
  for (int T = 1; T <= 5; T += 4) {
    ssm_graph *g = build(yaml, cfg, T);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    SSM_ASSERT_OK(ssm_graph_verify(g));
    /* per layer: norm, in_proj(+bias), conv w+b, dt_bias, A_log, D, gated norm,
     * out_proj(+bias) = 11; embed, norm_f, lm_head */
    CU_ASSERT_EQUAL(count_op(g, SSM_OP_WEIGHT), 3 * 11 + 3);
    CU_ASSERT_EQUAL(count_op(g, SSM_OP_SCAN), 3);
    CU_ASSERT_EQUAL(count_op(g, SSM_OP_RMSNORM), 3 * 2 + 1);
    ssm_node *in = find_named(g, SSM_OP_WEIGHT, "backbone.layers.2.mixer.in_proj.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(in);
    CU_ASSERT(type_is(in->result, "f32[228,48]")); /* z 96 | x 96, B 16, C 16 | dt 4 */
    CU_ASSERT(type_is(find_named(g, SSM_OP_WEIGHT, "backbone.layers.0.mixer.A_log")->result, "f32[4]"));
    CU_ASSERT(type_is(find_named(g, SSM_OP_STATE, "l1.conv_state")->result, "f32[3,128]"));
    CU_ASSERT(type_is(find_named(g, SSM_OP_STATE, "l1.ssm_state")->result, "f32[2,2,24,8]"));
    for (ssm_node *n = g->first; n; n = n->next) {
      if (n->op == SSM_OP_SCAN) {
        CU_ASSERT(type_is(n->result, T == 1 ? "f32[1,2,2,24]" : "f32[5,2,2,24]"));
        /* B and C: one row of N per group, broadcast over the group's heads */
        CU_ASSERT(type_is(n->args[2], T == 1 ? "f32[1,2,1,1,8]" : "f32[5,2,1,1,8]"));
      }
      if (n->op == SSM_OP_RMSNORM && n->nargs == 2 && !strcmp(ssm_node_str(n->args[1]->def, "name", ""),
                                                             "backbone.layers.0.mixer.norm.weight"))
        CU_ASSERT(type_is(n->result, T == 1 ? "f32[1,96]" : "f32[5,96]"));
    }
    ssm_graph_destroy(g);
  }
  /* heads * head_dim must be expand * hidden */
  ssm_model *m = NULL;
  SSM_ASSERT_ERR(ssm_model_open(yaml, mamba2_config("config_m2_bad.json", 4, 20, 2), &m),
                 "cannot reshape f32[1,96] to f32[1,2,2,20,1]");
  CU_ASSERT_PTR_NULL(m);
  /* heads not divisible by groups: heads/groups is not an integer */
  m = NULL;
  SSM_ASSERT_ERR(ssm_model_open(yaml, mamba2_config("config_m2_bad2.json", 4, 24, 3), &m),
                 "dimension 'hpg' must be an integer");
  CU_ASSERT_PTR_NULL(m);
}

/* A config.json with Python's Infinity, -Infinity and NaN in it (outside and
 * inside strings) and hidden_size `hidden`. */
static const char *py_config(const char *name, const char *hidden) {
  char buf[1024];
  int n = snprintf(buf, sizeof buf,
                   "{\"model_type\": \"mamba\", \"hidden_size\": %s, \"intermediate_size\": 128,\n"
                   " \"state_size\": 16, \"time_step_rank\": 4, \"conv_kernel\": 4, \"lim\": [-Infinity, Infinity],\n"
                   " \"note\": \"Infinity NaN \\\" NaN\", \"nan\": NaN, \"num_hidden_layers\": 2,\n"
                   " \"vocab_size\": 1000, \"layer_norm_epsilon\": 1e-5, \"tie_word_embeddings\": true}\n",
                   hidden);
  return ssm_test_write(name, buf, (size_t)n);
}

/* config.json may hold Python's Infinity, -Infinity and NaN: they are read as
 * numbers (NaN as null) outside strings, left alone inside them, and positions
 * in later errors stay exact. */
static void test_config_python_tokens(void) {
  const char *yaml = ssm_test_path("models/mamba1.yaml");
  ssm_model *m = NULL;
  SSM_ASSERT_OK(ssm_model_open(yaml, py_config("config_py.json", "64"), &m));
  CU_ASSERT_PTR_NOT_NULL(m);
  ssm_model_close(m);
  m = NULL;
  /* a param bound to Infinity is a float, refused as a dimension */
  SSM_ASSERT_ERR(ssm_model_open(yaml, py_config("config_py_inf.json", "Infinity"), &m),
                 "dimension 'hidden' must be an integer in 1..2^40, got inf");
  CU_ASSERT_PTR_NULL(m);
  /* the error after an Infinity is where it is with an 8-character number there */
  const char *same = "{\"model_type\": \"mamba\", \"a\": [12345678], \"hidden_size\": 12345678 x}\n";
  const char *bad = "{\"model_type\": \"mamba\", \"a\": [Infinity], \"hidden_size\": Infinity x}\n";
  char want[600];
  const char *cfg = ssm_test_write("config_py_same.json", same, strlen(same));
  snprintf(want, sizeof want, "%s:1:66: not valid JSON", cfg);
  SSM_ASSERT_ERR(ssm_model_open(yaml, cfg, &m), want);
  cfg = ssm_test_write("config_py_bad.json", bad, strlen(bad));
  snprintf(want, sizeof want, "%s:1:66: not valid JSON", cfg);
  SSM_ASSERT_ERR(ssm_model_open(yaml, cfg, &m), want);
  CU_ASSERT_PTR_NULL(m);
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

/* A config.json that keeps the model's config under text_config (a
 * multimodal checkpoint's; qwen3_5.yaml's `nested:`): its text model's
 * weights are read as model.language_model.*; without the nested config, or
 * with one of another family, it is refused with the key and the value. */
static void test_nested_config(void) {
  char *text = NULL;
  size_t n = 0;
  SSM_ASSERT_OK(ssm_file_read(ssm_test_path("tests/data/qwen3_5_tiny/config.json"), 0, &text, &n));
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  static const char *const outer[] = {"qwen3_5", "qwen3_5_moe"};
  for (int k = 0; k < 2; k++) {
    ssm_sb sb = {0};
    ssm_sb_printf(&sb, "{\"model_type\": \"%s\", \"text_config\": %s, \"eos_token_id\": 5}", outer[k], text);
    const char *dir = hf_dir("hf_nested", "unused");
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    ssm_test_write("hf_nested/config.json", ssm_sb_str(&sb), sb.n);
    ssm_sb_free(&sb);
    ssm_model *m = NULL;
    SSM_ASSERT_OK(ssm_model_open(dir, NULL, &m));
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_STRING_EQUAL(ssm_model_arch(m), "qwen3_5");
    ssm_graph *g = NULL;
    SSM_ASSERT_OK(ssm_model_build(m, 2, &g));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    int prefixed = 0, plain = 0;
    for (ssm_node *nd = g->first; nd; nd = nd->next) {
      if (nd->op != SSM_OP_WEIGHT) continue;
      const char *w = ssm_node_str(nd, "name", NULL);
      prefixed += w && !strncmp(w, "model.language_model.", 21);
      plain += w && !strncmp(w, "model.", 6) && strncmp(w, "model.language_model.", 21);
    }
    CU_ASSERT(prefixed > 10);
    CU_ASSERT_EQUAL(plain, 0);
    ssm_graph_destroy(g);
    ssm_model_close(m);
  }
  static const struct { const char *cfg, *want; } bad[] = {
      {"{\"model_type\": \"qwen3_5\", \"vision_config\": {}}",
       "model_type 'qwen3_5' keeps the model's config under 'text_config', which it lacks"},
      {"{\"model_type\": \"qwen3_5_moe\", \"text_config\": [1]}",
       "model_type 'qwen3_5_moe' keeps the model's config under 'text_config', which it does not hold as an object"},
      {"{\"model_type\": \"qwen3_5\", \"text_config\": {\"model_type\": \"mamba\"}}",
       "text_config.model_type 'mamba' is not one models/qwen3_5.yaml describes"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    const char *dir = hf_dir("hf_nested", "unused");
    ssm_test_write("hf_nested/config.json", bad[k].cfg, strlen(bad[k].cfg));
    ssm_model *m = NULL;
    SSM_ASSERT_ERR(ssm_model_open(dir, NULL, &m), bad[k].want);
    CU_ASSERT_PTR_NULL(m);
  }
  free(text);
}

static void test_hf_directory(void) {
  ssm_model *m = NULL;
  SSM_ASSERT_OK(ssm_model_open(hf_dir("hf_falcon", "falcon_mamba"), NULL, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  CU_ASSERT_STRING_EQUAL(ssm_model_arch(m), "falcon_mamba");
  ssm_model_close(m);
  m = NULL;
  SSM_ASSERT_OK(ssm_model_open(hf_dir("hf_mamba", "mamba"), NULL, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  CU_ASSERT_STRING_EQUAL(ssm_model_arch(m), "mamba1");
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_model_build(m, 2, &g));
  CU_ASSERT_PTR_NOT_NULL(g);
  ssm_graph_destroy(g);
  ssm_model_close(m);

  const char *dir = hf_dir("hf_xyz", "xyz");
  char want[1024];
  snprintf(want, sizeof want, "%s/config.json: model_type 'xyz' is not supported (known: bamba, falcon_h1, falcon_mamba, granitemoehybrid, jamba, lfm2, lfm2_moe, mamba, mamba2, minimax, nemotron_h, olmo_hybrid, qwen3_5_text, qwen3_5_moe_text, qwen3_next, recurrent_gemma, zamba, zamba2)", dir);
  SSM_ASSERT_ERR(ssm_model_open(dir, NULL, &m), want);
  CU_ASSERT_PTR_NULL(m);
  /* config_path overrides the directory's config.json */
  SSM_ASSERT_OK(ssm_model_open(dir, tiny_config("cfg_override.json", ""), &m));
  CU_ASSERT_PTR_NOT_NULL(m);
  ssm_model_close(m);

  /* a description not on disk under models/: the embedded copy, if any */
  m = NULL;
  char cwd_model[600];
  snprintf(cwd_model, sizeof cwd_model, "%s/config.json", dir);
  if (chdir(ssm_test_tmpdir()) == 0) {
    SSM_ASSERT_OK(ssm_model_open("models/falcon_mamba.yaml", cwd_model, &m));
    CU_ASSERT_PTR_NOT_NULL(m);
    if (m) CU_ASSERT_STRING_EQUAL(ssm_model_arch(m), "falcon_mamba");
    ssm_model_close(m);
    SSM_ASSERT_ERR(ssm_model_open("elsewhere/falcon_mamba.yaml", cwd_model, &m), "elsewhere/falcon_mamba.yaml");
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
  SSM_ASSERT_ERR(ssm_model_open(path, cfg, &m), want);
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

/* A call of an expression function (bf16, max, ...) as an operand is a
 * constant, like a param or a number there. */
static void test_function_operands(void) {
  char text[4096];
  const char *path = tiny_variant("funcs.yaml", "h = silu",
                                  "      - h = silu(mul(mul(matmul(x, up), bf16(0.1)), max(2, half)))", text,
                                  sizeof text);
  ssm_graph *g = build(path, tiny_config("config.json", ""), 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  int bf = 0, mx = 0;
  for (ssm_node *n = g->first; n; n = n->next) {
    if (n->op != SSM_OP_CONST) continue;
    bf += ssm_node_float(n, "value", 0) == 0.10009765625; /* 0.1 rounded to bfloat16 */
    mx += ssm_node_float(n, "value", 0) == 32;             /* max(2, half) */
  }
  CU_ASSERT(bf >= 1);
  CU_ASSERT(mx >= 1);
  ssm_graph_destroy(g);
}

/* Every unary op of ops.def is reachable from YAML by its name (tanh, for
 * logit soft-capping, was added to the table alone). */
static void test_unary_ops_by_name(void) {
  for (int o = 0; o < SSM_OP_COUNT; o++) {
    const ssm_op_info *info = ssm_op_info_get((ssm_op)o);
    if (info->kind != SSM_KIND_UNARY) continue;
    char text[4096], line[128];
    snprintf(line, sizeof line, "      - h = %s(matmul(x, up))", info->name);
    const char *path = tiny_variant("unary.yaml", "h = silu", line, text, sizeof text);
    ssm_graph *g = build(path, tiny_config("config.json", ""), 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    if (count_op(g, (ssm_op)o) != 2) fprintf(stderr, "\n  %s: not in the graph\n", info->name);
    CU_ASSERT_EQUAL(count_op(g, (ssm_op)o), 2); /* one per layer */
    ssm_graph_destroy(g);
  }
}

/* ---- hybrids: models/jamba.yaml and the layer schedule ---------------------- */

static const char *jamba_config(const char *name, int experts) {
  char buf[1024];
  int n = snprintf(buf, sizeof buf,
                   "{\"model_type\": \"jamba\", \"vocab_size\": 512, \"hidden_size\": 32,\n"
                   " \"intermediate_size\": 64, \"num_hidden_layers\": 4, \"attn_layer_period\": 2,\n"
                   " \"attn_layer_offset\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
                   " \"num_experts\": %d, \"mamba_d_state\": 16, \"mamba_d_conv\": 4,\n"
                   " \"mamba_expand\": 2, \"mamba_dt_rank\": 2, \"mamba_conv_bias\": true,\n"
                   " \"mamba_proj_bias\": false, \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": false}\n",
                   experts);
  return ssm_test_write(name, buf, (size_t)n);
}

static void test_jamba_schedule(void) {
  const char *cfg = jamba_config("jamba.json", 1);
  ssm_model *m = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path("models/jamba.yaml"), cfg, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  int64_t v = 0;
  CU_ASSERT_TRUE(ssm_model_param(m, "max_seq", &v));
  CU_ASSERT_EQUAL(v, 2048);
  SSM_ASSERT_OK(ssm_model_set_param(m, "max_seq", 64));
  SSM_ASSERT_ERR(ssm_model_set_param(m, "max_seq", 0), "--max-seq must be in 1..16777216, got 0");
  SSM_ASSERT_ERR(ssm_model_set_param(m, "nope", 1), "no param 'nope' to set");
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_model_build(m, 3, &g));
  ssm_model_close(m);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  /* attention at layers 1 and 3 (i % 2 == 1), Mamba at 0 and 2; an MLP in each */
  CU_ASSERT_EQUAL(count_op(g, SSM_OP_ATTENTION), 2);
  CU_ASSERT_EQUAL(count_op(g, SSM_OP_SCAN), 2);
  for (int i = 0; i < 4; i++) {
    char q[96], a[96], up[96];
    snprintf(q, sizeof q, "model.layers.%d.self_attn.q_proj.weight", i);
    snprintf(a, sizeof a, "model.layers.%d.mamba.A_log", i);
    snprintf(up, sizeof up, "model.layers.%d.feed_forward.up_proj.weight", i);
    CU_ASSERT_EQUAL(!!find_named(g, SSM_OP_WEIGHT, q), i % 2 == 1);
    CU_ASSERT_EQUAL(!!find_named(g, SSM_OP_WEIGHT, a), i % 2 == 0);
    CU_ASSERT_PTR_NOT_NULL(find_named(g, SSM_OP_WEIGHT, up));
  }
  CU_ASSERT(type_is(find_named(g, SSM_OP_WEIGHT, "model.layers.3.self_attn.k_proj.weight")->result,
                    "f32[16,32]"));
  CU_ASSERT(type_is(find_named(g, SSM_OP_WEIGHT, "model.layers.2.mamba.b_layernorm.weight")->result,
                    "f32[16]"));
  CU_ASSERT_PTR_NOT_NULL(find_named(g, SSM_OP_WEIGHT, "lm_head.weight"));
  /* KV caches of max_seq rows, named by layer */
  ssm_node *kc = find_named(g, SSM_OP_STATE, "l3.k_cache");
  CU_ASSERT_PTR_NOT_NULL_FATAL(kc);
  CU_ASSERT(type_is(kc->result, "f32[64,2,8]"));
  CU_ASSERT_PTR_NOT_NULL(find_named(g, SSM_OP_STATE, "l1.v_cache"));
  CU_ASSERT_PTR_NOT_NULL(find_named(g, SSM_OP_STATE, "l2.ssm_state"));
  CU_ASSERT_PTR_NULL(find_named(g, SSM_OP_STATE, "l1.ssm_state"));
  /* the built-in input pos, one for the graph */
  ssm_node *pos = find_named(g, SSM_OP_INPUT, "pos");
  CU_ASSERT_PTR_NOT_NULL_FATAL(pos);
  CU_ASSERT(type_is(pos->result, "i32[1]"));
  CU_ASSERT_EQUAL(count_op(g, SSM_OP_INPUT), 2);
  for (ssm_node *n = g->first; n; n = n->next)
    if (n->op == SSM_OP_ATTENTION) {
      CU_ASSERT(type_is(n->result, "f32[3,4,8]"));
      CU_ASSERT_EQUAL(n->args[5], pos->result);
      CU_ASSERT_DOUBLE_EQUAL(ssm_node_float(n, "scale", 0), 1 / sqrt(8.0), 1e-15);
    }
  ssm_graph_destroy(g);
}

/* num_experts > 1: the layers i % expert_layer_period == expert_layer_offset
 * (default 2, 1) route each token to its top num_experts_per_tok experts. */
static void test_jamba_experts(void) {
  const char *cfg = jamba_config("jamba_moe.json", 16);
  ssm_model *m = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path("models/jamba.yaml"), cfg, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_model_build(m, 3, &g));
  ssm_model_close(m);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  /* layers 1 and 3 are MoE: gate, up and down of the picked experts each */
  CU_ASSERT_EQUAL(count_op(g, SSM_OP_TOPK), 2);
  CU_ASSERT_EQUAL(count_op(g, SSM_OP_MATMUL_SEL), 6);
  for (ssm_node *n = g->first; n; n = n->next) {
    if (n->op == SSM_OP_TOPK) CU_ASSERT(type_is(n->result, "i32[3,2]"));
    if (n->op == SSM_OP_MATMUL_SEL && n->args[1]->type.rank == 3 && n->args[1]->type.dims[1] == 64)
      CU_ASSERT(type_is(n->args[1], "f32[16,64,32]"));
  }
  ssm_graph_destroy(g);
}

/* A layer cannot pick more experts than it has: the error names both keys
 * and their values. */
static void test_jamba_experts_topk_refused(void) {
  const char *base = jamba_config("jamba_moe_bad.json", 4);
  char *text = NULL;
  size_t len = 0;
  SSM_ASSERT_OK(ssm_file_read(base, 0, &text, &len));
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  char buf[1200];
  char *brace = strrchr(text, '}');
  CU_ASSERT_PTR_NOT_NULL_FATAL(brace);
  int n = snprintf(buf, sizeof buf, "%.*s, \"num_experts_per_tok\": 5}\n", (int)(brace - text), text);
  free(text);
  const char *cfg = ssm_test_write("jamba_moe_bad.json", buf, (size_t)n);
  ssm_model *m = NULL;
  ssm_status s = ssm_model_open(ssm_test_path("models/jamba.yaml"), cfg, &m);
  ssm_graph *g = NULL;
  if (!s) {
    s = ssm_model_build(m, 3, &g);
    ssm_model_close(m);
  }
  CU_ASSERT_PTR_NULL(g);
  CU_ASSERT_EQUAL(ssm_status_code(s), SSM_ERR_UNSUPPORTED);
  const char *msg = s ? ssm_status_message(s) : "";
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "num_experts_per_tok = 5 with num_experts = 4"));
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "top_k = 5 (config.json 'num_experts_per_tok')"));
  if (!strstr(msg, "top_k = 5 (config.json")) fprintf(stderr, "\n  got: %s\n", msg);
  ssm_status_free(s);
}

/* Two repeats of blocks chosen per layer: i restarts in each repeat, while
 * states are named by the absolute layer index. */
static const char sched_yaml[] =
    "ssmc: 1\n"
    "architecture: sched\n"
    "params:\n"
    "  hidden: hidden_size\n"
    "  vocab: vocab_size\n"
    "blocks:\n"
    "  a:\n"
    "    in: x\n"
    "    out: y\n"
    "    weights:\n"
    "      w: {name: \"a.{i}\", shape: [hidden]}\n"
    "    state:\n"
    "      s: [hidden]\n"
    "    body:\n"
    "      - y = add(mul(x, w), s)\n"
    "  b:\n"
    "    in: x\n"
    "    out: y\n"
    "    state:\n"
    "      s: [2, hidden]\n"
    "    body:\n"
    "      - y = add(x, reduce(s, kind=sum, axis=0))\n"
    "weights:\n"
    "  embed: {name: \"embed\", shape: [vocab, hidden]}\n"
    "graph:\n"
    "  - x = embed(embed, tokens)\n"
    "  - repeat: 3\n"
    "    block: {if: \"i % 2 == 0\", then: a, else: {if: \"i == 1\", then: b, else: a}}\n"
    "    carry: x\n"
    "  - repeat: 2\n"
    "    block: a\n"
    "    carry: x\n"
    "  - output(x)\n";

static void test_layer_schedule(void) {
  const char *path = ssm_test_write("sched.yaml", sched_yaml, sizeof sched_yaml - 1);
  ssm_graph *g = build(path, tiny_config("config.json", ""), 2);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  static const char *const want[5] = {"f32[64]", "f32[2,64]", "f32[64]", "f32[64]", "f32[64]"};
  for (int l = 0; l < 5; l++) {
    char name[16];
    snprintf(name, sizeof name, "l%d.s", l);
    ssm_node *st = find_named(g, SSM_OP_STATE, name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(st);
    CU_ASSERT(type_is(st->result, want[l]));
  }
  CU_ASSERT_EQUAL(count_op(g, SSM_OP_STATE), 5);
  /* weights follow i, which restarts: a.0, a.2 (first repeat), a.0, a.1 */
  CU_ASSERT_EQUAL(count_op(g, SSM_OP_WEIGHT), 1 + 3);
  CU_ASSERT_PTR_NOT_NULL(find_named(g, SSM_OP_WEIGHT, "a.2"));
  ssm_graph_destroy(g);

  /* an unknown block name in a choice is an error where it is written, even
   * when no layer picks it */
  char text[4096], msg[1200];
  const char *cfg = tiny_config("config.json", "");
  size_t n = sizeof sched_yaml - 1;
  memcpy(text, sched_yaml, n + 1);
  char *at = strstr(text, "else: a}}");
  memcpy(at, "else: c}}", 9);
  path = ssm_test_write("sched_bad.yaml", text, n);
  snprintf(msg, sizeof msg, "%sunknown block 'c'", where(path, text, "c}}", 0));
  ssm_model *m = NULL;
  SSM_ASSERT_ERR(ssm_model_open(path, cfg, &m), msg);
  memcpy(text, sched_yaml, n + 1);
  at = strstr(text, "then: a, else");
  memcpy(at, "than", 4);
  path = ssm_test_write("sched_bad2.yaml", text, n);
  snprintf(msg, sizeof msg, "%sunknown key 'than' in a block choice", where(path, text, "than", 0));
  SSM_ASSERT_ERR(ssm_model_open(path, cfg, &m), msg);
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
  expect_error("up: {", "      up: {name: \"layers.{i}.up\", shape: [half, hidden], quantize: no}",
               "no}", 0, "quantize: expected true or false, got 'no'");
}

/* `quantize: false` on a weight: the IR weight's keep16=1 (which the
 * weights pass keeps in bf16: test_passes). */
static void test_quantize_false(void) {
  char text[4096];
  const char *path = tiny_variant("keep.yaml", "up: {",
                                  "      up: {name: \"layers.{i}.up\", shape: [half, hidden], quantize: false}",
                                  text, sizeof text);
  ssm_graph *g = build(path, tiny_config("config.json", ""), 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT_EQUAL(ssm_node_int(find_named(g, SSM_OP_WEIGHT, "layers.1.up"), "keep16", 0), 1);
  CU_ASSERT_EQUAL(ssm_node_int(find_named(g, SSM_OP_WEIGHT, "layers.0.up"), "keep16", 0), 1);
  ssm_graph_destroy(g);
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
  SSM_ASSERT_ERR(ssm_model_open(path, tiny_config("config.json", ""), &m), "YAML nested deeper than 64");
  SSM_ASSERT_ERR(ssm_model_open(path, NULL, &m), "needs a config.json");
  const char *bad_json = ssm_test_write("bad.json", "{\"a\": 1,\n \"b\": }", 16);
  SSM_ASSERT_ERR(ssm_model_open(ssm_test_path("models/mamba1.yaml"), bad_json, &m), "bad.json:2:");
}

static void test_error_libyaml_message(void) {
  const char *text = "ssmc: 1\narchitecture: tiny\n graph:\n  - x\n";
  const char *path = ssm_test_write("indent.yaml", text, strlen(text));
  char want[600];
  snprintf(want, sizeof want, "%s:3:7: ", path);
  ssm_model *m = NULL;
  SSM_ASSERT_ERR(ssm_model_open(path, tiny_config("config.json", ""), &m), want);
}

static void test_print_roundtrip(void) {
  ssm_graph *g = build(ssm_test_path("models/mamba1.yaml"), tiny_config("config.json", ""), 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  char *text = ssm_test_print(g);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "graph decode {"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "name=\"backbone.layers.1.mixer.A_log\""));
  ssm_graph *g2 = NULL;
  SSM_ASSERT_OK(ssm_graph_parse(text, "mamba1.ssmir", &g2));
  if (g2) {
    SSM_ASSERT_OK(ssm_graph_verify(g2));
    char *text2 = ssm_test_print(g2);
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
      {"\"hidden_size\": \"64\", ", "dimension 'hidden' must be an integer in 1..2^40, got '64'"},
      {"\"hidden_size\": [64], ", "dimension 'hidden' must be an integer in 1..2^40, got [64]"},
      {"\"hidden_size\": {}, ", "key 'hidden_size' (param 'hidden') is not a number, bool, string or list of them"},
      {"\"hidden_size\": [{}], ", "key 'hidden_size' (param 'hidden') is not a number, bool, string or list of them"},
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
    SSM_ASSERT_ERR(ssm_model_open(ssm_test_path("models/mamba1.yaml"), tiny_config("bad_cfg.json", cases[i][0]), &m),
                   cases[i][1]);
    CU_ASSERT_PTR_NULL(m);
  }
  static const char *const files[][2] = {
      {"", "bad_cfg.json:1:1: not valid JSON"},
      {"garbage", "bad_cfg.json:1:1: not valid JSON"},
      {"{\"hidden_size\": 64,,}", "bad_cfg.json:1:21: not valid JSON"},
      {"[1, 2]", "bad_cfg.json: not a JSON object"},
      {"{\"hidden_size\": 64, \"vocab_size\": 9, \"hidden_size\": 32}",
       "bad_cfg.json: the key 'hidden_size' is given twice in the top object"},
      {"{\"text_config\": {\"a\": 1, \"a\": 2}}",
       "bad_cfg.json: the key 'a' is given twice in the object at text_config"},
      {"64", "bad_cfg.json: not a JSON object"},
  };
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    const char *cfg = ssm_test_write("bad_cfg.json", files[i][0], strlen(files[i][0]));
    SSM_ASSERT_ERR(ssm_model_open(ssm_test_path("models/mamba1.yaml"), cfg, &m), files[i][1]);
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
  SSM_ASSERT_ERR(ssm_model_open(dir, NULL, &m), "config.json: no string 'model_type'");
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
  SSM_ASSERT_OK(ssm_model_open_text("mem.yaml", yaml, strlen(yaml), "mem.json", cfg, strlen(cfg), &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  SSM_ASSERT_OK(ssm_model_build(m, 1, &g));
  ssm_model_close(m);
  ssm_graph *want = build(ssm_test_path("models/mamba1.yaml"), ssm_test_write("config.json", cfg, strlen(cfg)), 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT_PTR_NOT_NULL_FATAL(want);
  char *a = ssm_test_print(g), *b = ssm_test_print(want);
  CU_ASSERT_STRING_EQUAL(a, b);
  free(a);
  free(b);
  ssm_graph_destroy(g);
  ssm_graph_destroy(want);

  /* lengths are honoured: nothing past them is read (ASan builds check) */
  char *cut = malloc(10);
  memcpy(cut, cfg, 10);
  SSM_ASSERT_ERR(ssm_model_open_text("mem.yaml", yaml, strlen(yaml), "mem.json", cut, 10, &m),
                 "mem.json:1:3: not valid JSON");
  free(cut);
  CU_ASSERT_PTR_NULL(m);
  SSM_ASSERT_ERR(ssm_model_open_text("mem.yaml", yaml, strlen(yaml), "mem.json", "[1]", 3, &m),
                 "mem.json: not a JSON object");
  SSM_ASSERT_ERR(ssm_model_open_text("mem.yaml", "ssmc: 1\n", 8, "mem.json", cfg, strlen(cfg), &m),
                 "mem.yaml:1:1: the model description needs key 'architecture'");
  CU_ASSERT_PTR_NULL(m);
}

/* The hybrid zoo's descriptions on their transformers fixtures' config.json,
 * once as given (it must build) and once with one key changed to a value the
 * description does not handle: refused, naming the key and the value. */
static void test_zoo_configs_refused(void) {
  static const struct {
    const char *fixture, *yaml, *from, *to, *want;
  } cases[] = {
      {"falcon_h1_tiny", "falcon_h1.yaml", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"",
       "hidden_act = 'gelu' is not supported (only 'silu')"},
      {"falcon_h1_tiny", "falcon_h1.yaml", "\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"",
       "rope_parameters.rope_type = 'yarn' is not supported"},
      {"falcon_h1_tiny", "falcon_h1.yaml", "\"attention_bias\": false", "\"attention_bias\": true",
       "attention_bias = true, mlp_bias = false: biases are not supported"},
      {"falcon_h1_tiny", "falcon_h1.yaml", "\"mamba_d_head\": 12", "\"mamba_d_head\": 7",
       "mamba_n_heads = 4, mamba_d_head = 7, mamba_n_groups = 2: the heads must fill mamba_d_ssm = 48"},
      {"falcon_h1_tiny", "falcon_h1.yaml", "\"mlp_multipliers\": [", "\"mlp_multipliers\": [2, ",
       "ssm_multipliers needs 5 values and mlp_multipliers 2"},
      {"zamba2_tiny", "zamba2.yaml", "\"hidden_act\": \"gelu\"", "\"hidden_act\": \"silu\"",
       "hidden_act = 'silu' is not supported (only 'gelu')"},
      {"zamba2_tiny", "zamba2.yaml", "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false",
       "tie_word_embeddings = false is not supported"},
      {"zamba2_tiny", "zamba2.yaml", "\"add_bias_linear\": false", "\"add_bias_linear\": true",
       "add_bias_linear = true is not supported"},
      {"zamba2_tiny", "zamba2.yaml", "\"hybrid_layer_ids\": [\n    1,\n    3,", "\"hybrid_layer_ids\": [\n    1,\n    2,",
       "hybrid_layer_ids = [1, 2, 4] does not list layer 3, the hybrid layer number 1 of layers_block_type"},
      {"zamba2_tiny", "zamba2.yaml", "\"linear_attention\",\n    \"hybrid\",\n    \"linear_attention\"",
       "\"linear_attention\",\n    \"hybrid\",\n    \"full_attention\"", "layer 2 is 'full_attention', which"},
      {"recurrent_gemma_tiny", "recurrent_gemma.yaml", "\"gelu_pytorch_tanh\"", "\"gelu\"",
       "hidden_activation = 'gelu' is not supported (only 'gelu_pytorch_tanh')"},
      {"recurrent_gemma_tiny", "recurrent_gemma.yaml", "\"lru_width\": 64", "\"lru_width\": 66",
       "lru_width = 66 does not divide into num_attention_heads = 4 gate blocks"},
      {"recurrent_gemma_tiny", "recurrent_gemma.yaml", "\"attention_window_size\": 5", "\"attention_window_size\": 0",
       "attention_window_size = 0 is not supported"},
      {"recurrent_gemma_tiny", "recurrent_gemma.yaml", "\"attention\"\n  ],", "\"mlp\"\n  ],",
       "layer 2 is 'mlp', which"},
      {"qwen3_5_moe_tiny", "qwen3_5.yaml", "\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 0",
       "num_experts = 4, num_experts_per_tok = 0, moe_intermediate_size = 16, shared_expert_intermediate_size = 24: a layer picks 1 to num_experts experts"},
      {"lfm2_moe_tiny", "lfm2.yaml", "\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 5",
       "num_experts = 4, num_experts_per_tok = 5, moe_intermediate_size = 16: a layer picks 1 to num_experts experts"},
      {"zamba_tiny", "zamba.yaml", "\"hidden_mamba_act\": \"silu\"", "\"hidden_mamba_act\": \"gelu\"",
       "hidden_mamba_act = 'gelu' is not supported (only 'silu')"},
      {"zamba_tiny", "zamba.yaml", "\"mamba_proj_bias\": false", "\"mamba_proj_bias\": true",
       "mamba_proj_bias = true is not supported"},
      {"zamba_tiny", "zamba.yaml", "\"attn_layer_offset\": 1", "\"attn_layer_offset\": 0",
       "layers_block_type[3] is not 'hybrid', but attn_layer_period = 2 and attn_layer_offset = 0 make layer 3 a hybrid layer"},
      {"minimax_tiny", "minimax.yaml", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"",
       "hidden_act = 'gelu' is not supported (only 'silu')"},
      {"minimax_tiny", "minimax.yaml", "\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 5",
       "num_experts_per_tok = 5 with num_local_experts = 4: a layer cannot pick more experts than it has"},
      {"minimax_tiny", "minimax.yaml", "\"linear_attention\"\n  ],", "\"linear_attention\",\n    \"full_attention\"\n  ],",
       "layer_types has 5 entries for num_hidden_layers = 4"},
      {"olmo_hybrid_tiny", "olmo_hybrid.yaml", "\"linear_num_value_heads\": 4", "\"linear_num_value_heads\": 3",
       "linear_num_value_heads = 3 is not a multiple of linear_num_key_heads = 2"},
      {"olmo_hybrid_tiny", "olmo_hybrid.yaml", "\"attention_bias\": false", "\"attention_bias\": true",
       "attention_bias = true is not supported"},
      {"olmo_hybrid_tiny", "olmo_hybrid.yaml", "\"rope_theta\": 10000.0", "\"rope_theta\": null",
       "rope_parameters has no rope_theta: attention without RoPE is not supported"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char rel[256], yaml[256], *text = NULL;
    size_t len = 0;
    snprintf(rel, sizeof rel, "tests/data/%s/config.json", cases[k].fixture);
    snprintf(yaml, sizeof yaml, "%s", ssm_test_path("models/"));
    snprintf(yaml + strlen(yaml), sizeof yaml - strlen(yaml), "%s", cases[k].yaml);
    SSM_ASSERT_OK(ssm_file_read(ssm_test_path(rel), 0, &text, &len));
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    for (int bad = 0; bad < 2; bad++) {
      ssm_sb sb = {0};
      const char *at = strstr(text, cases[k].from);
      CU_ASSERT_PTR_NOT_NULL_FATAL(at);
      if (bad) ssm_sb_printf(&sb, "%.*s%s%s", (int)(at - text), text, cases[k].to, at + strlen(cases[k].from));
      else ssm_sb_printf(&sb, "%s", text);
      const char *cfg = ssm_test_write("zoo_config.json", ssm_sb_str(&sb), sb.n);
      ssm_sb_free(&sb);
      ssm_model *m = NULL;
      ssm_graph *g = NULL;
      ssm_status s = ssm_model_open(yaml, cfg, &m);
      if (!s) {
        s = ssm_model_build(m, 2, &g);
        ssm_model_close(m);
      }
      if (!bad) {
        SSM_ASSERT_OK(s);
        CU_ASSERT_PTR_NOT_NULL(g);
      } else {
        CU_ASSERT_PTR_NULL(g);
        const char *msg = s ? ssm_status_message(s) : "";
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, cases[k].want));
        if (!strstr(msg, cases[k].want)) fprintf(stderr, "\n  %s: got: %s\n", cases[k].to, msg);
        ssm_status_free(s);
      }
      ssm_graph_destroy(g);
    }
    free(text);
  }
}

int main(void) {
  CU_TestInfo tests[] = {{"mamba1_shapes", test_mamba1_shapes},
                         {"jamba_schedule", test_jamba_schedule},
                         {"jamba_experts", test_jamba_experts},
                         {"jamba_experts_topk_refused", test_jamba_experts_topk_refused},
                         {"layer_schedule", test_layer_schedule},
                         {"model_params", test_model_params},
                         {"mamba1_untied_bias", test_mamba1_untied_bias},
                         {"falcon_mamba", test_falcon_mamba},
                         {"mamba2_shapes", test_mamba2_shapes},
                         {"config_python_tokens", test_config_python_tokens},
                         {"hf_directory", test_hf_directory},
                         {"tiny_ok", test_tiny_ok},
                         {"unary_ops_by_name", test_unary_ops_by_name},
                         {"function_operands", test_function_operands},
                         {"error_unknown_op", test_error_unknown_op},
                         {"error_undefined_name", test_error_undefined_name},
                         {"error_arity", test_error_arity},
                         {"error_attrs", test_error_attrs},
                         {"error_missing_config_key", test_error_missing_config_key},
                         {"error_templates", test_error_templates},
                         {"quantize_false", test_quantize_false},
                         {"error_shapes", test_error_shapes},
                         {"error_yaml", test_error_yaml},
                         {"error_libyaml_message", test_error_libyaml_message},
                         {"print_roundtrip", test_print_roundtrip},
                         {"load_text", test_load_text},
                         {"config_errors", test_config_errors},
                         {"zoo_configs_refused", test_zoo_configs_refused},
                         {"nested_config", test_nested_config},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("frontend", tests);
}
