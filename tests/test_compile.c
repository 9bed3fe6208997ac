/*
 * test_compile.c — `ssmc compile` output: what the bundle's manifest says,
 * `ssmc inspect`, and the executor refusing bundles that are damaged or
 * lie about themselves.
 */
#include <cjson/cJSON.h>
#include <string.h>

#include "codegen/codegen.h"
#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"
#include "testutil.h"

/* Compiles fixture `name` with prefill chunk `chunk` into the temp dir. */
static const char *compile(const char *name, int chunk) {
  static char path[8][512];
  static int k;
  char *p = path[k++ & 7];
  snprintf(p, 512, "%s/%s-%d.ssmb", ssm_test_tmpdir(), name, chunk);
  char dir[512];
  snprintf(dir, sizeof dir, "tests/data/%s", name);
  ssm_model *m = NULL;
  SSM_ASSERT_OK(ssm_model_load(ssm_test_path(dir), NULL, &m));
  ssm_compile_opts o = {.prefill_tokens = chunk};
  if (m) SSM_ASSERT_OK(ssm_compile(m, &o, p));
  ssm_model_destroy(m);
  return p;
}

static cJSON *manifest(const char *path) {
  ssm_bundle *b = NULL;
  SSM_ASSERT_OK(ssm_bundle_open(path, &b));
  if (!b) return NULL;
  cJSON *j = cJSON_Parse(ssm_bundle_manifest(b));
  ssm_bundle_close(b);
  CU_ASSERT_PTR_NOT_NULL(j);
  return j;
}

/* Every state and weight region used by the prefill program is the one the
 * decode program uses: both programs share one model state. */
static void test_shared_weights_and_state(void) {
  const char *p = compile("mamba1_untied", 4);
  cJSON *m = manifest(p);
  if (!m) return;
  const cJSON *ws = cJSON_GetObjectItem(m, "weights"), *ss = cJSON_GetObjectItem(m, "state");
  /* 3 layers x (norm, in_proj, in_bias, conv w/b, x_proj, dt w/b, A_log, D, out_proj, out_bias)
   * + embed, norm_f, lm_head: each exactly once */
  CU_ASSERT_EQUAL(cJSON_GetArraySize(ws), 3 * 12 + 3);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(ss), 3 * 2); /* the sampler is not model state */
  const cJSON *a, *b;
  cJSON_ArrayForEach(a, ws) cJSON_ArrayForEach(b, ws) if (a != b)
      CU_ASSERT_STRING_NOT_EQUAL(cJSON_GetObjectItem(a, "name")->valuestring,
                                 cJSON_GetObjectItem(b, "name")->valuestring);
  /* weights + state must equal the checkpoint's f32 size + state size */
  ssm_st *st = NULL;
  SSM_ASSERT_OK(ssm_st_open(ssm_test_path("tests/data/mamba1_untied"), &st));
  size_t ck = 0;
  for (int i = 0; st && i < ssm_st_count(st); i++) ck += ssm_st_at(st, i)->nbytes;
  size_t mw = 0;
  cJSON_ArrayForEach(a, ws) mw += (size_t)cJSON_GetArrayItem(cJSON_GetObjectItem(a, "region"), 2)->valuedouble;
  CU_ASSERT_EQUAL(mw, ck); /* that checkpoint is f32 and every tensor is used */
  ssm_st_close(st);
  cJSON_Delete(m);
}

/* The targets of the passes: at most `per_layer` dispatches per layer (plus
 * the embedding and the final norm + head, and the decode program's sampler),
 * and activation memory at least 3x smaller than one buffer per value.
 * Mamba-1 and Falcon-Mamba: 6. Mamba-2: 4 (in_proj with its norm; the conv
 * over x|B|C; the scan with dt, exp(dt*A), dt*B*x and the D skip; the gate,
 * gated norm, out_proj and residual). */
static void check_targets(const char *fixture, int layers, int per_layer) {
  const char *p = compile(fixture, 8);
  cJSON *m = manifest(p);
  if (!m) return;
  const cJSON *progs = cJSON_GetObjectItem(m, "programs"), *prog;
  cJSON_ArrayForEach(prog, progs) {
    double disp = cJSON_GetObjectItem(prog, "dispatches")->valuedouble;
    double planned = cJSON_GetObjectItem(prog, "activation_bytes")->valuedouble;
    double naive = cJSON_GetObjectItem(prog, "activation_bytes_unplanned")->valuedouble;
    fprintf(stderr, "\n  %s %s: %.0f dispatches (%.2f per layer), activations %.0f vs %.0f (%.1fx)",
            fixture, prog->string, disp, (disp - 2) / layers, planned, naive, naive / planned);
    int sampler = cJSON_GetObjectItem(prog, "feedback") != NULL;
    CU_ASSERT(sampler == !strcmp(prog->string, "decode"));
    CU_ASSERT(disp <= per_layer * layers + 2 + sampler);
    CU_ASSERT(planned > 0 && planned * 3 <= naive);
  }
  cJSON_Delete(m);
}

static void test_fusion_and_planning_targets(void) {
  check_targets("mamba1_untied", 3, 6);
  check_targets("falcon_bf16_untied", 3, 6);
  check_targets("mamba1_tiny", 2, 6);
  check_targets("mamba2_groups", 3, 4);
  check_targets("mamba2_bigstate", 2, 4);
}

static void test_inspect_json(void) {
  const char *p = compile("falcon_tiny", 8);
  char *text = NULL;
  SSM_ASSERT_OK(ssm_inspect(p, 1, &text));
  cJSON *j = text ? cJSON_Parse(text) : NULL;
  CU_ASSERT_PTR_NOT_NULL(j);
  const cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "programs"),
                                                           "decode"), "dispatches");
  const cJSON *pre = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "programs"),
                                                             "prefill"), "tokens");
  CU_ASSERT(cJSON_IsNumber(d) && d->valuedouble > 10);
  CU_ASSERT(cJSON_IsNumber(pre) && pre->valuedouble == 8);
  CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "programs"),
                                                             "decode"), "steps"));
  cJSON_Delete(j);
  free(text);
  SSM_ASSERT_OK(ssm_inspect(p, 0, &text));
  CU_ASSERT_PTR_NOT_NULL(text ? strstr(text, "k0_embed") : NULL);
  CU_ASSERT_PTR_NOT_NULL(text ? strstr(text, "scan") : NULL);
  free(text);
}

/* Every generated kernel names its template and parameters first. */
static void test_kernel_sources_name_their_template(void) {
  const char *p = compile("mamba1_tiny", 2);
  ssm_bundle *b = NULL;
  SSM_ASSERT_OK(ssm_bundle_open(p, &b));
  if (!b) return;
  cJSON *m = cJSON_Parse(ssm_bundle_manifest(b));
  const cJSON *k;
  int n = 0;
  cJSON_ArrayForEach(k, cJSON_GetObjectItem(m, "kernels")) {
    const cJSON *g = cJSON_GetObjectItem(k, "glsl");
    const void *src;
    SSM_ASSERT_OK(ssm_bundle_blob(b, (uint64_t)cJSON_GetArrayItem(g, 0)->valuedouble,
                                  (uint64_t)cJSON_GetArrayItem(g, 1)->valuedouble, &src));
    char want[128];
    snprintf(want, sizeof want, "// ssmc kernel: template %s.glsl.in",
             cJSON_GetObjectItem(k, "template")->valuestring);
    CU_ASSERT_EQUAL(strncmp(src, want, strlen(want)), 0);
    n++;
  }
  CU_ASSERT(n >= 10);
  cJSON_Delete(m);
  ssm_bundle_close(b);
}

/* Rewrites the manifest of a good bundle with `from` replaced by `to`. */
static const char *tamper(const char *good, const char *from, const char *to, const char *name) {
  ssm_bundle *b = NULL;
  SSM_ASSERT_OK(ssm_bundle_open(good, &b));
  const char *man = ssm_bundle_manifest(b);
  const char *at = strstr(man, from);
  CU_ASSERT_PTR_NOT_NULL_FATAL(at);
  size_t n = strlen(man) + strlen(to) + 1;
  char *edited = malloc(n);
  snprintf(edited, n, "%.*s%s%s", (int)(at - man), man, to, at + strlen(from));
  /* copy the blob section as is: blob offsets stay valid */
  cJSON *j = cJSON_Parse(man);
  ssm_bundle_writer *w = ssm_bundle_writer_create();
  uint64_t off;
  const void *all;
  size_t total = 0;
  /* the largest end of any [offset, size] pair is the section size */
  const cJSON *k;
  cJSON_ArrayForEach(k, cJSON_GetObjectItem(j, "kernels")) {
    for (int f = 0; f < 2; f++) {
      const cJSON *r = cJSON_GetObjectItem(k, f ? "glsl" : "spirv");
      size_t e = (size_t)(cJSON_GetArrayItem(r, 0)->valuedouble + cJSON_GetArrayItem(r, 1)->valuedouble);
      if (e > total) total = e;
    }
  }
  const cJSON *pr;
  cJSON_ArrayForEach(pr, cJSON_GetObjectItem(j, "programs")) {
    const cJSON *r = cJSON_GetObjectItem(pr, "ir");
    size_t e = (size_t)(cJSON_GetArrayItem(r, 0)->valuedouble + cJSON_GetArrayItem(r, 1)->valuedouble);
    if (e > total) total = e;
  }
  SSM_ASSERT_OK(ssm_bundle_blob(b, 0, total, &all));
  ssm_bundle_writer_add_blob(w, all, total, &off);
  static char path[8][512];
  static int idx;
  char *p = path[idx++ & 7];
  snprintf(p, 512, "%s/%s", ssm_test_tmpdir(), name);
  SSM_ASSERT_OK(ssm_bundle_writer_save(w, edited, p));
  ssm_bundle_writer_destroy(w);
  cJSON_Delete(j);
  free(edited);
  ssm_bundle_close(b);
  return p;
}

static void test_executor_refuses_lies(void) {
  const char *good = compile("mamba1_tiny", 4);
  const char *w = ssm_test_path("tests/data/mamba1_tiny");
  ssm_rt *rt = NULL;
  SSM_ASSERT_OK(ssm_rt_open(good, w, NULL, &rt));
  ssm_rt_close(rt);
  rt = NULL;
  SSM_ASSERT_ERR(ssm_rt_open(tamper(good, "\"kernel\":3", "\"kernel\":999", "k.ssmb"), w, NULL, &rt),
                 "names a kernel that does not exist");
  SSM_ASSERT_ERR(ssm_rt_open(tamper(good, "\"vocab\":1000", "\"vocab\":-5", "v.ssmb"), w, NULL, &rt),
                 "vocab");
  SSM_ASSERT_ERR(ssm_rt_open(tamper(good, "\"bindings\":[[", "\"bindings\":[[9,", "b.ssmb"), w, NULL, &rt),
                 "corrupt manifest");
  SSM_ASSERT_ERR(ssm_rt_open(tamper(good, "\"programs\"", "\"programz\"", "p.ssmb"), w, NULL, &rt),
                 "programs");
  SSM_ASSERT_ERR(ssm_rt_open(tamper(good, "backbone.embeddings.weight", "backbone.embeddingz.weight",
                                    "n.ssmb"), w, NULL, &rt),
                 "backbone.embeddingz.weight");
  /* negative, fractional, huge and misplaced numbers in regions, buffers, programs */
  static const char *const lies[][3] = {
      {"\"region\":[3,0,256000]", "\"region\":[3,-256,256000]", "weights[].region holds an invalid number"},
      {"\"region\":[3,0,256000]", "\"region\":[3,0.5,256000]", "weights[].region holds an invalid number"},
      {"\"region\":[3,0,256000]", "\"region\":[3,0,1e300]", "weights[].region holds an invalid number"},
      {"\"region\":[3,0,256000]", "\"region\":[3,0,99999999]", "weights[].region lies outside its buffer"},
      {"\"region\":[3,0,256000]", "\"region\":[3,18446744073709551615,256000]",
       "weights[].region holds an invalid number"},
      {"\"region\":[3,0,256000]", "\"region\":[63,0,256000]", "weights[].region lies outside its buffer"},
      {"\"region\":[3,0,256000]", "\"region\":[3,0]", "weights[].region is not a region"},
      {"\"region\":[3,0,256000]", "\"region\":[3,0,255996]", "region size does not match its shape"},
      {"\"bytes\":517888", "\"bytes\":-4", "buffers[].bytes is not a valid count"},
      {"\"bytes\":517888", "\"bytes\":1e300", "buffers[].bytes is not a valid count"},
      {"\"bytes\":517888", "\"bytes\":\"big\"", "buffers[].bytes is not a valid count"},
      {"\"tokens\":1,", "\"tokens\":0,", "programs.decode has no tokens"},
      {"\"groups\":[1,1,1]", "\"groups\":[1,1,70000]", "programs.decode holds an invalid number"},
      {"\"ssmb\":1", "\"ssmb\":2", "ssmb version differs from the header"},
  };
  for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
    char name[32];
    snprintf(name, sizeof name, "lie%zu.ssmb", i);
    SSM_ASSERT_ERR(ssm_rt_open(tamper(good, lies[i][0], lies[i][1], name), w, NULL, &rt), lies[i][2]);
    CU_ASSERT_PTR_NULL(rt);
  }
  /* the right bundle with the weights of another model */
  SSM_ASSERT_ERR(ssm_rt_open(good, ssm_test_path("tests/data/mamba1_untied"), NULL, &rt),
                 "but the model expects");
  CU_ASSERT_PTR_NULL(rt);
}

static void test_run_rejects_bad_tokens(void) {
  const char *good = compile("mamba1_tiny", 4);
  ssm_rt *rt = NULL;
  SSM_ASSERT_OK(ssm_rt_open(good, ssm_test_path("tests/data/mamba1_tiny"), NULL, &rt));
  if (!rt) return;
  int32_t bad[4] = {1, 2, 1000, 3};
  SSM_ASSERT_ERR(ssm_rt_run(rt, bad, 4, NULL), "token id 1000 out of range [0, 1000)");
  SSM_ASSERT_ERR(ssm_rt_run(rt, bad, 3, NULL), "runs take 1 or 4 tokens, not 3");
  ssm_rt_close(rt);
}

/* A hybrid's bundle: its programs read "pos", the manifest bounds it with
 * max_seq, the KV caches are state of max_seq rows, and the executor keeps
 * the position (advanced per run, zeroed by reset). A Mamba bundle has no
 * position input and no bound. */
static void test_position_and_max_seq(void) {
  const char *p = compile("jamba_tiny", 4);
  cJSON *m = manifest(p);
  if (!m) return;
  CU_ASSERT_EQUAL(cJSON_GetObjectItem(m, "max_seq")->valueint, 2048);
  const char *progs[2] = {"decode", "prefill"};
  for (int i = 0; i < 2; i++) {
    const cJSON *in, *ins = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "programs"),
                                                                      progs[i]), "inputs");
    int tokens = 0, pos = 0;
    cJSON_ArrayForEach(in, ins) {
      const char *name = cJSON_GetObjectItem(in, "name")->valuestring;
      tokens += !strcmp(name, "tokens");
      pos += !strcmp(name, "pos");
      if (!strcmp(name, "pos"))
        CU_ASSERT_EQUAL(cJSON_GetArrayItem(cJSON_GetObjectItem(in, "region"), 2)->valueint, 4);
    }
    CU_ASSERT_EQUAL(tokens, 1);
    CU_ASSERT_EQUAL(pos, 1);
  }
  const cJSON *st;
  int caches = 0;
  cJSON_ArrayForEach(st, cJSON_GetObjectItem(m, "state")) {
    const char *name = cJSON_GetObjectItem(st, "name")->valuestring;
    if (strstr(name, "_cache")) {
      caches++;
      CU_ASSERT_EQUAL(cJSON_GetArrayItem(cJSON_GetObjectItem(st, "shape"), 0)->valueint, 2048);
    }
  }
  CU_ASSERT_EQUAL(caches, 4); /* k and v of layers 1 and 3 */
  cJSON_Delete(m);

  ssm_rt *rt = NULL;
  SSM_ASSERT_OK(ssm_rt_open(p, ssm_test_path("tests/data/jamba_tiny"), NULL, &rt));
  if (!rt) return;
  int32_t toks[4] = {1, 2, 3, 4};
  float *a = malloc(sizeof(float) * 512 * 4), *b = malloc(sizeof(float) * 512 * 4);
  CU_ASSERT_EQUAL(ssm_rt_position(rt), 0);
  SSM_ASSERT_OK(ssm_rt_run(rt, toks, 4, NULL));
  SSM_ASSERT_OK(ssm_rt_run(rt, toks, 1, a));
  CU_ASSERT_EQUAL(ssm_rt_position(rt), 5);
  /* after a reset the same tokens give the same logits: cache and position were zeroed */
  SSM_ASSERT_OK(ssm_rt_reset(rt));
  CU_ASSERT_EQUAL(ssm_rt_position(rt), 0);
  SSM_ASSERT_OK(ssm_rt_run(rt, toks, 4, NULL));
  SSM_ASSERT_OK(ssm_rt_run(rt, toks, 1, b));
  CU_ASSERT_EQUAL(memcmp(a, b, sizeof(float) * 512), 0);
  /* the same token at another position gives other logits */
  SSM_ASSERT_OK(ssm_rt_run(rt, toks, 1, b));
  CU_ASSERT_NOT_EQUAL(memcmp(a, b, sizeof(float) * 512), 0);
  free(a);
  free(b);
  ssm_rt_close(rt);
  rt = NULL;
  /* a program that reads pos in a bundle without a bound is refused */
  SSM_ASSERT_ERR(ssm_rt_open(tamper(p, "\"max_seq\":2048", "\"max_seqq\":2048", "ms.ssmb"),
                             ssm_test_path("tests/data/jamba_tiny"), NULL, &rt),
                 "max_seq is missing");
  CU_ASSERT_PTR_NULL(rt);

  m = manifest(compile("mamba1_tiny", 4));
  if (!m) return;
  CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(m, "max_seq"));
  const cJSON *ins = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "programs"),
                                                              "decode"), "inputs");
  CU_ASSERT_EQUAL(cJSON_GetArraySize(ins), 1);
  cJSON_Delete(m);
}

/* mamba1 with 30 statements x = mul(add(x, x), 0.5) after the embedding
 * compiles (fused as one kernel it grew as 2^30 and never finished) and runs
 * like the CPU interpreter. */
static void test_doubling_chain_compiles(void) {
  const char *yaml = ssm_models_embedded("mamba1.yaml");
  const char *at = strstr(yaml, "  - x = embed(embed, tokens)\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(at);
  at += strlen("  - x = embed(embed, tokens)\n");
  size_t cap = strlen(yaml) + 30 * 40 + 1, n = 0;
  char *text = malloc(cap);
  n += (size_t)snprintf(text, cap, "%.*s", (int)(at - yaml), yaml);
  for (int i = 0; i < 30; i++) n += (size_t)snprintf(text + n, cap - n, "  - x = mul(add(x, x), 0.5)\n");
  snprintf(text + n, cap - n, "%s", at);
  const char *path = ssm_test_write("doubling.yaml", text, strlen(text));
  free(text);
  char cmd[2048], *a = NULL, *b = NULL;
  const char *fix = ssm_test_path("tests/data/mamba1_tiny");
  snprintf(cmd, sizeof cmd, "%s compile %s --config %s/config.json -o %s/doubling.ssmb && "
           "%s run %s/doubling.ssmb --weights %s --tokens 1,2,3 -n 4", ssm_test_ssmc(), path, fix,
           ssm_test_tmpdir(), ssm_test_ssmc(), ssm_test_tmpdir(), fix);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &a), 0);
  snprintf(cmd, sizeof cmd, "%s run %s --config %s/config.json --weights %s --tokens 1,2,3 -n 4 "
           "--backend cpu", ssm_test_ssmc(), path, fix, fix);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &b), 0);
  CU_ASSERT_STRING_EQUAL(a, b);
  if (strcmp(a, b)) fprintf(stderr, "\n  vulkan: %s\n  cpu: %s\n", a, b);
  free(a);
  free(b);
}

int main(void) {
  CU_TestInfo tests[] = {{"shared_weights_and_state", test_shared_weights_and_state},
                         {"fusion_and_planning_targets", test_fusion_and_planning_targets},
                         {"inspect_json", test_inspect_json},
                         {"kernel_sources_name_their_template", test_kernel_sources_name_their_template},
                         {"executor_refuses_lies", test_executor_refuses_lies},
                         {"run_rejects_bad_tokens", test_run_rejects_bad_tokens},
                         {"position_and_max_seq", test_position_and_max_seq},
                         {"doubling_chain_compiles", test_doubling_chain_compiles},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("compile", tests);
}
