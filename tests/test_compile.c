/*
 * test_compile.c — what `ssmc compile` makes: the typed manifest of a
 * compiled bundle, what inspect shows, the manifest reader refusing bundles
 * that lie about themselves, and the Vulkan backend running a bundle.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "codegen/knobs.h"
#include "compile/compile.h"
#include "frontend/frontend.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "testutil.h"

/* the bundle format version as the manifest writes it */
#define VERSION_TEXT_(v) #v
#define VERSION_TEXT(v) VERSION_TEXT_(v)

/* Fixture `name` compiled with prefill chunk `chunk` (in memory). */
static ssm_bundle *compile(const char *name, int chunk) {
  char dir[512];
  snprintf(dir, sizeof dir, "tests/data/%s", name);
  ssm_model *m = NULL;
  ssm_bundle *b = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path(dir), NULL, &m));
  ssm_compile_opts o = {.prefill_tokens = chunk};
  if (m) SSM_ASSERT_OK(ssm_compile(m, &o, &b));
  ssm_model_close(m);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  return b;
}

/* The number of the prefill program's dispatches of template `family`. */
static int prefill_family(const ssm_manifest *m, const char *family) {
  int n = 0;
  for (int i = 0; i < m->prefill.nsteps; i++)
    n += !strcmp(m->kernels[m->prefill.steps[i].kernel].family, family);
  return n;
}

/* A matmul of up to 4 rows is gemv, up to 8 the matmul template, of more
 * the tiled gemm: the same matmuls (3 layers of 4, and the head) in each,
 * except that at up to 4 rows dt_proj (K = 7) is computed inside the scan's
 * kernel (passes/fuse.c's small matmuls), which then reads no dt buffer. */
static void test_matmul_family_by_rows(void) {
  static const struct { int chunk; const char *family; int count; } cases[] = {
      {4, "gemv", 3 * 3 + 1}, {8, "matmul", 3 * 4 + 1}, {9, "gemm", 3 * 4 + 1},
      {64, "gemm", 3 * 4 + 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ssm_bundle *b = compile("mamba1_untied", cases[i].chunk);
    const ssm_manifest *m = ssm_bundle_manifest(b);
    CU_ASSERT_EQUAL(prefill_family(m, cases[i].family), cases[i].count);
    int all = prefill_family(m, "gemv") + prefill_family(m, "matmul") + prefill_family(m, "gemm");
    CU_ASSERT_EQUAL(all, cases[i].count);
    int scans = 0;
    for (int k = 0; k < m->prefill.nsteps; k++) {
      const char *p = m->kernels[m->prefill.steps[k].kernel].params;
      scans += !strncmp(p, "matmul+", 7) && strstr(p, "+scan+") != NULL;
    }
    CU_ASSERT_EQUAL(scans, cases[i].chunk <= 4 ? 3 : 0);
    ssm_bundle_close(b);
  }
}

/* Every state and weight region used by the prefill program is the one the
 * decode program uses: both programs share one model state. */
static void test_shared_weights_and_state(void) {
  ssm_bundle *b = compile("mamba1_untied", 4);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  /* 3 layers x (norm, in_proj, in_bias, conv w/b, x_proj, dt w/b, A_log, D, out_proj, out_bias)
   * + embed, norm_f, lm_head: each exactly once */
  CU_ASSERT_EQUAL(m->nweights, 3 * 12 + 3);
  CU_ASSERT_EQUAL(m->nstates, 3 * 2); /* the sampler is not model state */
  for (int i = 0; i < m->nweights; i++)
    for (int j = 0; j < i; j++) CU_ASSERT_STRING_NOT_EQUAL(m->weights[i].name, m->weights[j].name);
  /* weights must equal the checkpoint's f32 size: it is f32 and every tensor is used */
  ssm_st *st = NULL;
  SSM_ASSERT_OK(ssm_st_open(ssm_test_path("tests/data/mamba1_untied"), &st));
  size_t ck = 0;
  for (int i = 0; st && i < ssm_st_count(st); i++) ck += ssm_st_at(st, i)->nbytes;
  CU_ASSERT_EQUAL(ssm_manifest_weight_bytes(m), ck);
  ssm_st_close(st);
  /* every binding of every step lies in a buffer of the usage it needs */
  const ssm_mf_program *progs[2] = {&m->decode, &m->prefill};
  for (int p = 0; p < 2; p++)
    for (int i = 0; i < progs[p]->nsteps; i++)
      CU_ASSERT_EQUAL(progs[p]->steps[i].nbindings, m->kernels[progs[p]->steps[i].kernel].nbindings);
  ssm_bundle_close(b);
}

/* The targets of the passes: at most `per_layer` dispatches per layer in
 * prefill and `decode_per_layer` in decode (plus the embedding and the
 * final norm + head, and the decode program's sampler), and activation
 * memory at least 3x smaller than one buffer per value.
 * Prefill: Mamba-1 and Falcon-Mamba 6; Mamba-2 4 (in_proj with its norm;
 * the conv over x|B|C; the scan with dt, exp(dt*A), dt*B*x and the D skip;
 * the gate, gated norm, out_proj and residual). Decode, where the conv is
 * done in in_proj's epilogue and dt_proj (with Falcon-Mamba's dt norm) in
 * the scan: Mamba-1 and Falcon-Mamba 4, Mamba-2 3. */
static void check_targets(const char *fixture, int layers, int per_layer, int decode_per_layer) {
  ssm_bundle *b = compile(fixture, 8);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  const ssm_mf_program *progs[2] = {&m->decode, &m->prefill};
  for (int i = 0; i < 2; i++) {
    const ssm_mf_program *p = progs[i];
    double planned = (double)p->activation_bytes, naive = (double)p->activation_bytes_unplanned;
    fprintf(stderr, "\n  %s %s: %d dispatches (%.2f per layer), activations %.0f vs %.0f (%.1fx)",
            fixture, i ? "prefill" : "decode", p->nsteps, (p->nsteps - 2.0) / layers, planned,
            naive, naive / planned);
    CU_ASSERT(p->has_sampler == (i == 0));
    CU_ASSERT(p->nsteps <= (i ? per_layer : decode_per_layer) * layers + 2 + p->has_sampler);
    CU_ASSERT(planned > 0 && planned * 3 <= naive);
  }
  ssm_bundle_close(b);
}

static void test_fusion_and_planning_targets(void) {
  check_targets("mamba1_untied", 3, 6, 4);
  check_targets("falcon_bf16_untied", 3, 6, 4);
  check_targets("falcon_wide_dt", 2, 6, 4); /* its dt norm a large row */
  check_targets("mamba1_tiny", 2, 6, 4);
  check_targets("mamba2_groups", 3, 4, 3);
  check_targets("mamba2_bigstate", 2, 4, 3);
}

static void test_describe(void) {
  ssm_bundle *b = compile("falcon_tiny", 8);
  char *text = NULL;
  SSM_ASSERT_OK(ssm_bundle_describe(b, 1, &text));
  cJSON *j = cJSON_Parse(text);
  CU_ASSERT_PTR_NOT_NULL_FATAL(j);
  const cJSON *progs = cJSON_GetObjectItem(j, "programs");
  const cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(progs, "decode"), "dispatches");
  const cJSON *pre = cJSON_GetObjectItem(cJSON_GetObjectItem(progs, "prefill"), "tokens");
  CU_ASSERT(cJSON_IsNumber(d) && d->valuedouble == ssm_bundle_manifest(b)->decode.nsteps);
  CU_ASSERT(d->valuedouble > 10);
  CU_ASSERT(cJSON_IsNumber(pre) && pre->valuedouble == 8);
  CU_ASSERT_PTR_NULL(cJSON_GetObjectItem(cJSON_GetObjectItem(progs, "decode"), "steps"));
  CU_ASSERT_PTR_NOT_NULL(cJSON_GetObjectItem(cJSON_GetObjectItem(progs, "decode"), "dispatches_by_op"));
  CU_ASSERT_EQUAL(cJSON_GetObjectItem(j, "weight_bytes")->valuedouble,
                  (double)ssm_manifest_weight_bytes(ssm_bundle_manifest(b)));
  cJSON_Delete(j);
  free(text);
  SSM_ASSERT_OK(ssm_bundle_describe(b, 0, &text));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "k0_embed"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "scan"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "architecture falcon_mamba"));
  free(text);
  ssm_bundle_close(b);
}

/* Every generated kernel names its template and parameters first, in GLSL
 * and in WGSL (gemv's WGSL is matmul's template), and the WGSL declares one storage binding per window of its
 * slots after the offsets (the JS host compiles and runs it: runtime/web). */
static void test_kernel_sources_name_their_template(void) {
  ssm_bundle *b = compile("mamba1_tiny", 2);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  for (int i = 0; i < m->nkernels; i++) {
    const ssm_mf_kernel *k = &m->kernels[i];
    char want[128], *wgsl = strndup(ssm_bundle_blob(b, k->wgsl), (size_t)k->wgsl.size);
    snprintf(want, sizeof want, "// ssmc kernel: template %s.glsl.in", k->family);
    CU_ASSERT_EQUAL(strncmp(ssm_bundle_blob(b, k->glsl), want, strlen(want)), 0);
    /* gemv's WGSL is the matmul template doing several columns (no subgroups) */
    snprintf(want, sizeof want, "// ssmc kernel: template %s.wgsl.in, ",
             strcmp(k->family, "gemv") ? k->family : "matmul");
    CU_ASSERT_EQUAL(strncmp(wgsl, want, strlen(want)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(wgsl, "@binding(0) var<uniform> ssm_u"));
    int windows = 0;
    for (int s = 0; s < k->nslots; s++) windows += k->windows[s];
    snprintf(want, sizeof want, "@binding(%d) var<storage", windows);
    CU_ASSERT_PTR_NOT_NULL(strstr(wgsl, want));
    snprintf(want, sizeof want, "@binding(%d)", windows + 1);
    CU_ASSERT_PTR_NULL(strstr(wgsl, want));
    CU_ASSERT_PTR_NULL(strstr(wgsl, "{{"));
    CU_ASSERT_EQUAL(k->slot[0], 0);
    free(wgsl);
  }
  CU_ASSERT(m->nkernels >= 8);
  ssm_bundle_close(b);
}

/* WGSL's memory slots: the activations, the states and the small weights
 * each share a slot; a weight of 1 MiB or more has one of its own. Small
 * windows (ssmc compile --wgsl-window) split a slot into several, and the
 * accessors pick the window by index. */
static void test_wgsl_slots_and_windows(void) {
  ssm_bundle *b = compile("mamba1_tiny", 4);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  CU_ASSERT_EQUAL(m->wgsl_window, SSM_BUNDLE_WINDOW);
  const ssm_mf_kernel *scan = NULL;
  for (int i = 0; i < m->nkernels; i++) {
    for (int s = 0; s < m->kernels[i].nslots; s++) CU_ASSERT_EQUAL(m->kernels[i].windows[s], 1);
    if (!strcmp(m->kernels[i].family, "scan")) scan = &m->kernels[i];
  }
  /* the scan: result, x, dt (activations), A, D (weights), its state */
  CU_ASSERT_PTR_NOT_NULL_FATAL(scan);
  CU_ASSERT_EQUAL(scan->nslots, 3);
  ssm_bundle_close(b);

  ssm_model *model = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path("tests/data/mamba1_tiny"), NULL, &model));
  ssm_compile_opts o = {.prefill_tokens = 4, .wgsl_window = 65536};
  SSM_ASSERT_OK(ssm_compile(model, &o, &b));
  m = ssm_bundle_manifest(b);
  CU_ASSERT_EQUAL(m->wgsl_window, 65536);
  int most = 0;
  for (int i = 0; i < m->nkernels; i++) {
    const ssm_mf_kernel *k = &m->kernels[i];
    for (int s = 0; s < k->nslots; s++) {
      if (k->windows[s] <= most) continue;
      most = k->windows[s];
      char *wgsl = strndup(ssm_bundle_blob(b, k->wgsl), (size_t)k->wgsl.size);
      char want[64];
      snprintf(want, sizeof want, " s%dw%d: array<u32>;", s, most - 1);
      CU_ASSERT_PTR_NOT_NULL(strstr(wgsl, want));
      CU_ASSERT(most == 1 || strstr(wgsl, "let w = g / SSM_WIN;"));
      CU_ASSERT_PTR_NOT_NULL(strstr(wgsl, "const SSM_WIN: u32 = 16384u;"));
      free(wgsl);
    }
  }
  /* the lm_head reads the tied embedding at the start of the weights and
   * the final norm's gain at their end: 517888 bytes, 8 windows of 64 KiB */
  CU_ASSERT_EQUAL(most, 8);
  /* GLSL (codegen.h): the same window splits the embedding table (256000
   * bytes, 4 windows) of the embed kernel; its result is never split; the
   * window is specialization constant 0, in words */
  int embeds = 0;
  for (int i = 0; i < m->nkernels; i++) {
    const ssm_mf_kernel *k = &m->kernels[i];
    if (strcmp(k->family, "embed")) continue;
    embeds++;
    CU_ASSERT_EQUAL(k->glsl_windows[0], 1);
    CU_ASSERT_EQUAL(k->glsl_windows[1], 4);
    char *glsl = strndup(ssm_bundle_blob(b, k->glsl), (size_t)k->glsl.size);
    CU_ASSERT_PTR_NOT_NULL(strstr(glsl, "layout(constant_id = 0) const uint SSM_WIN = 16384u;"));
    CU_ASSERT_PTR_NOT_NULL(strstr(glsl, "float ld1(uint e) {"));
    CU_ASSERT_PTR_NOT_NULL(strstr(glsl, "return b1w3.v[r];"));
    free(glsl);
  }
  CU_ASSERT_EQUAL(embeds, 2); /* decode and prefill */
  ssm_bundle_close(b);
  /* fusion off: many kernels of one source read their operands through
   * different slots (an add of two activations, an add of a bias); each
   * gets its own, and the bundle reads back */
  static const char *const unfused[] = {"falcon_tiny", "jamba_gqa", "mamba2_groups"};
  for (int f = 0; f < 3; f++) {
    ssm_model *um = NULL;
    char dir[256];
    snprintf(dir, sizeof dir, "tests/data/%s", unfused[f]);
    SSM_ASSERT_OK(ssm_model_open(ssm_test_path(dir), NULL, &um));
    ssm_compile_opts uo = {.prefill_tokens = 4, .no_fuse = 1};
    ssm_bundle *ub = NULL, *again = NULL;
    SSM_ASSERT_OK(ssm_compile(um, &uo, &ub));
    void *bytes = NULL;
    size_t n = 0;
    if (ub) SSM_ASSERT_OK(ssm_bundle_serialize(ub, &bytes, &n));
    if (bytes) SSM_ASSERT_OK(ssm_bundle_open_memory(bytes, n, unfused[f], &again));
    CU_ASSERT_PTR_NOT_NULL(again);
    free(bytes);
    ssm_bundle_close(again);
    ssm_bundle_close(ub);
    ssm_model_close(um);
  }
  o.wgsl_window = 1000;
  b = NULL;
  SSM_ASSERT_ERR(ssm_compile(model, &o, &b), "--wgsl-window 1000: expected a power of two");
  CU_ASSERT_PTR_NULL(b);
  ssm_model_close(model);
}

/* Saving and reading back gives the same manifest, byte for byte. */
static void test_save_and_reopen(void) {
  ssm_bundle *b = compile("jamba_tiny", 4), *c = NULL;
  char path[512];
  snprintf(path, sizeof path, "%s/jamba.ssmb", ssm_test_tmpdir());
  SSM_ASSERT_OK(ssm_bundle_save(b, path));
  SSM_ASSERT_OK(ssm_bundle_open(path, &c));
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  char *a = ssm_manifest_to_json(ssm_bundle_manifest(b)), *d = ssm_manifest_to_json(ssm_bundle_manifest(c));
  CU_ASSERT_STRING_EQUAL(a, d);
  const ssm_manifest *m = ssm_bundle_manifest(c);
  CU_ASSERT_EQUAL(memcmp(ssm_bundle_blob(b, m->decode.ir), ssm_bundle_blob(c, m->decode.ir),
                         (size_t)m->decode.ir.size), 0);
  free(a);
  free(d);
  ssm_bundle_close(b);
  ssm_bundle_close(c);
}

/* The bytes of `good` with `from` replaced by `to` in its manifest, as a
 * well-formed file (checksum recomputed), opened from memory. */
static ssm_status open_tampered(const ssm_bundle *good, const char *from, const char *to,
                                ssm_bundle **out) {
  void *data;
  size_t size;
  SSM_ASSERT_OK(ssm_bundle_serialize(good, &data, &size));
  const unsigned char *p = data;
  uint64_t mlen = 0, boff = 0;
  for (int i = 7; i >= 0; i--) mlen = mlen << 8 | p[16 + i], boff = boff << 8 | p[24 + i];
  char *man = strndup((const char *)p + 64, (size_t)mlen);
  const char *at = strstr(man, from);
  if (!at) fprintf(stderr, "\n  '%s' is not in the manifest\n", from);
  CU_ASSERT_PTR_NOT_NULL_FATAL(at);
  ssm_sb e = {0};
  ssm_sb_printf(&e, "%.*s%s%s", (int)(at - man), man, to, at + strlen(from));
  size_t nboff = (64 + e.n + 15) & ~(size_t)15, total = nboff + (size_t)(size - boff);
  unsigned char *f = calloc(1, total);
  memcpy(f, p, 64);
  memcpy(f + 64, e.s, e.n);
  memcpy(f + nboff, p + boff, size - boff);
  uint64_t fields[3] = {e.n, nboff, size - boff};
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 8; i++) f[16 + 8 * k + i] = (unsigned char)(fields[k] >> (8 * i));
  uint64_t h = ssm_fnv1a(SSM_FNV_INIT, f + 64, total - 64);
  for (int i = 0; i < 8; i++) f[40 + i] = (unsigned char)(h >> (8 * i));
  ssm_status s = ssm_bundle_open_memory(f, total, "lie.ssmb", out);
  free(f);
  ssm_sb_free(&e);
  free(man);
  free(data);
  return s;
}

static void test_manifest_refuses_lies(void) {
  ssm_bundle *good = compile("mamba1_tiny", 4), *b = NULL;
  SSM_ASSERT_OK(open_tampered(good, "\"vocab\":1000", "\"vocab\":1000", &b));
  ssm_bundle_close(b);
  static const char *const lies[][3] = {
      {"\"kernel\":3", "\"kernel\":999", "programs.decode.steps[3].kernel is not an integer"},
      {"\"vocab\":1000", "\"vocab\":-5", "corrupt manifest: vocab is not an integer"},
      {"\"programs\"", "\"programz\"", "corrupt manifest: programs is missing"},
      {"\"region\":[2,0,256000]", "\"region\":[2,-256,256000]", "weights[0].region is not an integer"},
      {"\"region\":[2,0,256000]", "\"region\":[2,0.5,256000]", "weights[0].region is not an integer"},
      {"\"region\":[2,0,256000]", "\"region\":[2,0,1e300]", "weights[0].region is not an integer"},
      {"\"region\":[2,0,256000]", "\"region\":[2,0,99999999]", "weights[0].region lies outside its buffer"},
      {"\"region\":[2,0,256000]", "\"region\":[2,18446744073709551615,256000]",
       "weights[0].region is not an integer"},
      {"\"region\":[2,0,256000]", "\"region\":[63,0,256000]", "weights[0].region names a buffer that"},
      {"\"region\":[2,0,256000]", "\"region\":[2,0]", "weights[0].region is not a [buffer, offset, bytes]"},
      {"\"region\":[2,0,256000]", "\"region\":[2,0,255996]", "region whose size does not match its shape"},
      {"\"region\":[2,0,256000]", "\"region\":[2,4,256000]", "weights[0].region is not aligned"},
      {"{\"usage\":\"weights\"", "{\"usage\":\"state\"", "weights[0] lies outside a weights buffer"},
      {"\"shape\":[1000,64]", "\"shape\":[1000000000000,1000000000000]", "too large for any buffer"},
      {"\"shape\":[1000,64]", "\"shape\":[1,2,3,4,5,6,7]", "weights[0].shape is not a list of at most 6"},
      {"\"dtype\":\"f32\",\"shape\":[1000,64]", "\"dtype\":\"f64\",\"shape\":[1000,64]", "weights[0].dtype is not"},
      {"\"usage\":\"weights\"", "\"usage\":\"const\"", "buffers[2] has a usage other than"},
      {"\"bytes\":19968", "\"bytes\":-4", "buffers[0].bytes is not an integer"},
      {"\"bytes\":19968", "\"bytes\":\"big\"", "buffers[0].bytes is not an integer"},
      {"\"tokens\":1,", "\"tokens\":0,", "programs.decode.tokens is not an integer"},
      {"\"tokens\":1,", "\"tokens\":4,", "programs.decode does not run one token"},
      {"\"any_count\":true", "\"any_count\":1", "prefill has an any_count that is not true"},
      {"\"dispatches\":11", "\"any_count\":true,\"dispatches\":11",
       "programs.decode has an any_count that is not true, or runs one token"},
      {"\"groups\":[1,1,1]", "\"groups\":[1,1,70000]", "programs.decode.steps[0].groups is not an integer"},
      {"\"groups\":[1,1,1]", "\"groups\":[1,1]", "groups is not three workgroup counts"},
      {"\"bindings\":[[", "\"bindings\":[[1,0,256],[", "does not give one region per binding"},
      {"\"bindings\":[[1,256,256],[2,0,256000],[1,0,4]]", "\"bindings\":[[1,256,256],[2,0,256000]]",
       "programs.decode.steps[0].bindings does not give one region per binding of its kernel"},
      {"\"bindings\":[[1,256,256],[2,0,256000],[1,0,4]]", "\"bindings\":[]",
       "programs.decode.steps[0].bindings does not give one region per binding of its kernel"},
      {"\"ssmb\":" VERSION_TEXT(SSM_BUNDLE_VERSION), "\"ssmb\":1", "ssmb differs from the version in the header"},
      {"\"align\":256", "\"align\":100", "align is not a power of two"},
      {"\"spirv\":[0,", "\"spirv\":[1,", "has a malformed SPIR-V blob"},
      {"\"ir\":[", "\"ir\":[99999999999,1],\"ir0\":[", "decode.ir lies outside the blob section"},
      {"\"inputs\":{\"tokens\":", "\"inputs\":{\"pos\":[1,0,4],\"tokens\":", "reads pos, but max_seq is 0"},
      {"\"wgsl_window\":134217728", "\"wgsl_window\":1000", "wgsl_window is not a power of two"},
      {"\"wgsl_window\":134217728", "\"wgsl_window\":256",
       "programs.decode.steps[0] has a WGSL slot wider than its kernel's windows"},
      {"\"wgsl_slots\":[0,1,0]", "\"wgsl_slots\":[0,2,0]",
       "kernels[0].wgsl_slots does not number the slots in order of first use"},
      {"\"wgsl_slots\":[0,1,0]", "\"wgsl_slots\":[1,0,0]", "does not number the slots"},
      {"\"wgsl_slots\":[0,1,0]", "\"wgsl_slots\":[0,1]", "is not a list of one slot per binding"},
      {"\"wgsl_slots\":[0,1,0],\"wgsl_windows\":[1,1]", "\"wgsl_slots\":[0,1,0],\"wgsl_windows\":[1,0]",
       "kernels[0].wgsl_windows is not an integer"},
      {"\"wgsl_slots\":[0,1,0],\"wgsl_windows\":[1,1]", "\"wgsl_slots\":[0,1,0],\"wgsl_windows\":[1]",
       "is not a list of one window count per slot"},
      {"\"wgsl_slots\":[0,1,0]", "\"wgsl_slotz\":[0,1,0]", "kernels[0].wgsl_slots is missing"},
      {"\"wgsl_windows\":[1,1]", "\"wgsl_windows\":[1,1],\"glsl_windows\":[2,1,1]",
       "kernels[0].glsl_windows splits the result or binds too many windows"},
      {"\"wgsl_windows\":[1,1]", "\"wgsl_windows\":[1,1],\"glsl_windows\":[1,32,32]",
       "kernels[0].glsl_windows splits the result or binds too many windows"},
      {"\"wgsl_windows\":[1,1]", "\"wgsl_windows\":[1,1],\"glsl_windows\":[1,0,1]",
       "kernels[0].glsl_windows is not an integer"},
      {"\"wgsl_windows\":[1,1]", "\"wgsl_windows\":[1,1],\"glsl_windows\":[1,1]",
       "kernels[0].glsl_windows is not a list of one window count per binding"},
      {"[2,256000,256],[2,256256,65536],", "[2,256000,256],[0,0,256],",
       "programs.decode.steps[1] puts the bindings of one WGSL slot in two buffers"},
      {"[[1,1536,144],[1,512,1024],[2,324352,18432]]", "[[2,1536,144],[2,512,1024],[2,324352,18432]]",
       "programs.decode.steps[2] writes its result into a weights buffer"},
      {"\"wgsl\":[", "\"wgsl\":[0,0],\"wgsl0\":[", "kernels[0] has an empty WGSL blob"},
      /* the cooperative-matrix variant: both blobs or neither, SPIR-V words */
      {"\"spirv\":[0,", "\"spirv_coop\":[0,20],\"spirv\":[0,", "kernels[0].glsl_coop is missing"},
      {"\"spirv\":[0,", "\"spirv_coop\":[0,22],\"glsl_coop\":[0,1],\"spirv\":[0,",
       "kernels[0] has a malformed cooperative-matrix SPIR-V blob"},
      {"\"spirv\":[0,", "\"glsl_coop\":[0,1],\"spirv_coop\":[99999999999,20],\"spirv\":[0,",
       "kernels[0].spirv_coop lies outside the blob section"},
      /* its prep kernel: only beside it, workgroups and a scratch; its own grid */
      {"\"spirv\":[0,", "\"coop_prep\":{},\"spirv\":[0,",
       "kernels[0].coop_prep is there without a cooperative-matrix variant"},
      {"\"spirv\":[0,", "\"spirv_coop\":[0,20],\"glsl_coop\":[0,1],\"coop_prep\":{\"spirv\":[0,20],"
       "\"glsl\":[0,1],\"groups\":[1,0,1],\"scratch_bytes\":8},\"spirv\":[0,",
       "kernels[0].coop_prep.groups is not an integer in the range"},
      {"\"spirv\":[0,", "\"spirv_coop\":[0,20],\"glsl_coop\":[0,1],\"coop_prep\":{\"spirv\":[0,20],"
       "\"glsl\":[0,1],\"groups\":[1,1,1],\"scratch_bytes\":0},\"spirv\":[0,",
       "kernels[0].coop_prep.scratch_bytes is not an integer in the range"},
      {"\"spirv\":[0,", "\"spirv_coop\":[0,20],\"glsl_coop\":[0,1],\"coop_prep\":{\"spirv\":[0,21],"
       "\"glsl\":[0,1],\"groups\":[1,1,1],\"scratch_bytes\":8},\"spirv\":[0,",
       "kernels[0].coop_prep has a malformed SPIR-V blob"},
      {"\"spirv\":[0,", "\"spirv_coop\":[0,20],\"glsl_coop\":[0,1],\"coop_prep\":{\"spirv\":[0,20],"
       "\"glsl\":[0,1],\"groups\":[1,1,1],\"scratch_bytes\":8,\"coop_groups\":[70000,1,1]},\"spirv\":[0,",
       "kernels[0].coop_prep.coop_groups is not an integer in the range"},
      {"\"spirv\":[0,", "\"spirv_coop\":[0,20],\"glsl_coop\":[0,1],\"coop_prep\":{\"spirv\":[0,20],"
       "\"glsl\":[0,1],\"groups\":[1,1,1],\"scratch_bytes\":8,\"coop_groups\":[4,1]},\"spirv\":[0,",
       "kernels[0].coop_prep.coop_groups is not a list of 3 workgroup counts"},
      {"\"sampler\":{\"next\"", "\"samplez\":{\"next\"", "lie.ssmb: corrupt manifest: programs.decode"},
  };
  for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
    ssm_status s = open_tampered(good, lies[i][0], lies[i][1], &b);
    if (i == sizeof lies / sizeof lies[0] - 1) { /* no sampler: allowed, but then not for generate */
      CU_ASSERT_PTR_NULL(s);
      ssm_status_free(s);
      CU_ASSERT(b && !ssm_bundle_manifest(b)->decode.has_sampler);
      ssm_bundle_close(b);
      continue;
    }
    SSM_ASSERT_ERR(s, lies[i][2]);
    CU_ASSERT_PTR_NULL(b);
  }
  ssm_bundle_close(good);
}

static ssm_backend *open_vk(ssm_bundle *b, const char *fixture) {
  char dir[256];
  snprintf(dir, sizeof dir, "tests/data/%s", fixture);
  ssm_backend *be = NULL;
  SSM_ASSERT_OK(ssm_vk_backend_open(b, ssm_test_path(dir), NULL, &be));
  CU_ASSERT_PTR_NOT_NULL_FATAL(be);
  return be;
}

static void test_backend_refuses_bad_input(void) {
  ssm_backend *be = open_vk(compile("mamba1_tiny", 4), "mamba1_tiny");
  int32_t bad[4] = {1, 2, 1000, 3};
  SSM_ASSERT_ERR(ssm_backend_run(be, bad, 4, NULL), "token id 1000 out of range [0, 1000)");
  SSM_ASSERT_ERR(ssm_backend_run(be, bad, 3, NULL), "token id 1000 out of range [0, 1000)");
  int32_t five[5] = {1, 2, 3, 4, 5};
  SSM_ASSERT_ERR(ssm_backend_run(be, five, 5, NULL), "runs take 1 to 4 tokens, not 5");
  SSM_ASSERT_ERR(ssm_backend_run(be, five, 0, NULL), "runs take 1 to 4 tokens, not 0");
  CU_ASSERT_EQUAL(be->position, 0);
  int32_t out[4];
  int n = 0;
  SSM_ASSERT_ERR(ssm_backend_generate(be, -1, 4, 0, out, &n, NULL, NULL), "token id -1 out of range");
  SSM_ASSERT_ERR(ssm_backend_set_sampler(be, -1, 0, 1, 0, 0), "sampler settings out of range");
  ssm_backend_close(be);
  /* the right bundle with the weights of another model: the tensor is named */
  be = NULL;
  SSM_ASSERT_ERR(ssm_vk_backend_open(compile("mamba1_tiny", 4),
                                     ssm_test_path("tests/data/mamba1_untied"), NULL, &be),
                 "but the model expects");
  CU_ASSERT_PTR_NULL(be);
}

/* A hybrid's bundle: its programs read "pos", the manifest bounds it with
 * max_seq, the KV caches are state of max_seq rows, and the backend keeps
 * the position (advanced per run, zeroed by reset). A Mamba bundle has no
 * position input and no bound. */
static void test_position_and_max_seq(void) {
  ssm_bundle *b = compile("jamba_tiny", 4);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  CU_ASSERT_EQUAL(m->max_seq, 2048);
  CU_ASSERT(m->decode.has_pos && m->prefill.has_pos);
  CU_ASSERT_EQUAL(m->decode.pos.bytes, 4);
  int caches = 0;
  for (int i = 0; i < m->nstates; i++)
    if (strstr(m->states[i].name, "_cache")) {
      caches++;
      CU_ASSERT_EQUAL(m->states[i].type.dims[0], 2048);
    }
  CU_ASSERT_EQUAL(caches, 4); /* k and v of layers 1 and 3 */
  ssm_backend *be = open_vk(b, "jamba_tiny");
  int32_t toks[4] = {1, 2, 3, 4};
  float *x = malloc(sizeof(float) * 512 * 4), *y = malloc(sizeof(float) * 512 * 4);
  CU_ASSERT_EQUAL(be->position, 0);
  SSM_ASSERT_OK(ssm_backend_run(be, toks, 4, NULL));
  SSM_ASSERT_OK(ssm_backend_run(be, toks, 1, x));
  CU_ASSERT_EQUAL(be->position, 5);
  /* after a reset the same tokens give the same logits: cache and position were zeroed */
  SSM_ASSERT_OK(ssm_backend_reset(be));
  CU_ASSERT_EQUAL(be->position, 0);
  SSM_ASSERT_OK(ssm_backend_run(be, toks, 4, NULL));
  SSM_ASSERT_OK(ssm_backend_run(be, toks, 1, y));
  CU_ASSERT_EQUAL(memcmp(x, y, sizeof(float) * 512), 0);
  /* the same token at another position gives other logits */
  SSM_ASSERT_OK(ssm_backend_run(be, toks, 1, y));
  CU_ASSERT_NOT_EQUAL(memcmp(x, y, sizeof(float) * 512), 0);
  free(x);
  free(y);
  ssm_backend_close(be);

  b = compile("mamba1_tiny", 4);
  m = ssm_bundle_manifest(b);
  CU_ASSERT_EQUAL(m->max_seq, 0);
  CU_ASSERT(!m->decode.has_pos && !m->prefill.has_pos);
  ssm_bundle_close(b);
}

/* mamba1 with 30 statements x = mul(add(x, x), 0.5) after the embedding
 * compiles (fused as one kernel it grew as 2^30 and never finished) and runs
 * like the CPU interpreter. */
static void test_doubling_chain_compiles(void) {
  const char *yaml = ssm_models_embedded("mamba1.yaml");
  const char *at = strstr(yaml, "  - x = embed(embed, tokens)\n");
  CU_ASSERT_PTR_NOT_NULL_FATAL(at);
  at += strlen("  - x = embed(embed, tokens)\n");
  ssm_sb text = {0};
  ssm_sb_printf(&text, "%.*s", (int)(at - yaml), yaml);
  for (int i = 0; i < 30; i++) ssm_sb_printf(&text, "  - x = mul(add(x, x), 0.5)\n");
  ssm_sb_printf(&text, "%s", at);
  const char *path = ssm_test_write("doubling.yaml", text.s, text.n);
  ssm_sb_free(&text);
  char cmd[2048], *a = NULL, *b = NULL;
  const char *fix = ssm_test_path("tests/data/mamba1_tiny");
  snprintf(cmd, sizeof cmd, "%s compile %s --config %s/config.json -o %s/doubling.ssmb && "
           "%s run %s/doubling.ssmb --weights %s --tokens 1,2,3 -n 4 -q", ssm_test_ssmc(), path, fix,
           ssm_test_tmpdir(), ssm_test_ssmc(), ssm_test_tmpdir(), fix);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &a), 0);
  snprintf(cmd, sizeof cmd, "%s run %s --config %s/config.json --weights %s --tokens 1,2,3 -n 4 "
           "--backend cpu -q", ssm_test_ssmc(), path, fix, fix);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &b), 0);
  CU_ASSERT_STRING_EQUAL(a, b);
  if (strcmp(a, b)) fprintf(stderr, "\n  vulkan: %s\n  cpu: %s\n", a, b);
  free(a);
  free(b);
}

/* Compile time is linear in the number of layers: Jamba with 2,000 layers
 * compiles in about 4x the time of 500 (a quadratic step, such as looking up
 * weights by name in a list or walking the whole graph for every kernel,
 * made it 16x: 400 layers took 9.9 s and 800 took 34 s). The bound is loose,
 * a ratio rather than a time, so a slow or busy machine does not fail it. */
static double compile_layers(int layers) {
  char *cfg;
  size_t n;
  SSM_ASSERT_OK(ssm_file_read(ssm_test_path("tests/data/jamba_tiny/config.json"), 0, &cfg, &n));
  char *at = strstr(cfg, "\"num_hidden_layers\": 4");
  CU_ASSERT_PTR_NOT_NULL_FATAL(at);
  ssm_sb edited = {0};
  ssm_sb_printf(&edited, "%.*s\"num_hidden_layers\": %d%s", (int)(at - cfg), cfg, layers,
                at + strlen("\"num_hidden_layers\": 4"));
  free(cfg);
  ssm_model *m = NULL;
  ssm_bundle *b = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  SSM_ASSERT_OK(ssm_model_open_text("models/jamba.yaml", ssm_models_embedded("jamba.yaml"),
                                    strlen(ssm_models_embedded("jamba.yaml")), "config.json",
                                    edited.s, edited.n, &m));
  ssm_compile_opts o = {.prefill_tokens = 4};
  if (m) SSM_ASSERT_OK(ssm_compile(m, &o, &b));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CU_ASSERT(b && ssm_bundle_manifest(b)->nstates >= layers); /* every layer made it */
  ssm_bundle_close(b);
  ssm_model_close(m);
  ssm_sb_free(&edited);
  return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
}

static void test_compile_time_linear(void) {
  double small = compile_layers(500), large = compile_layers(2000);
  fprintf(stderr, "\n  jamba: 500 layers %.2f s, 2000 layers %.2f s (%.1fx)", small, large,
          large / small);
  CU_ASSERT(large < 8 * small + 2);
}

/* Profiling: one time per dispatch of the program, each non-negative,
 * summing to more than nothing, with the kernel and op of the manifest. */
/* A prompt's runs (no logits wanted) dispatch the prefill steps up to the
 * last that binds state, skipping the lm_head; the state they leave is the
 * state a run with logits leaves: the next token's logits are the same
 * bits. */
static void test_prompt_without_logits(void) {
  const char *fixtures[] = {"mamba1_tiny", "jamba_tiny"};
  for (int f = 0; f < 2; f++) {
    ssm_bundle *b = compile(fixtures[f], 4);
    const ssm_manifest *m = ssm_bundle_manifest(b);
    int k = ssm_manifest_state_steps(m, &m->prefill);
    CU_ASSERT(k > 0 && k < m->prefill.nsteps);
    for (int i = k; i < m->prefill.nsteps; i++)
      for (int j = 0; j < m->prefill.steps[i].nbindings; j++)
        CU_ASSERT_NOT_EQUAL(m->buffers[m->prefill.steps[i].bindings[j].buffer].usage,
                            SSM_BUFFER_STATE);
    ssm_backend *be = open_vk(b, fixtures[f]);
    size_t V = (size_t)be->vocab;
    float *rows = malloc(sizeof(float) * V * 4), *x = malloc(sizeof(float) * V),
          *y = malloc(sizeof(float) * V), *one = malloc(sizeof(float) * V * 8);
    int32_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    /* without logits first: the buffer of the prefill's logits (made when
     * a run first asks for them) comes after runs that did not */
    for (int with = 0; with < 2; with++) {
      SSM_ASSERT_OK(ssm_backend_reset(be));
      SSM_ASSERT_OK(ssm_backend_run(be, toks, 4, with ? rows : NULL));
      SSM_ASSERT_OK(ssm_backend_run(be, toks + 4, 4, with ? rows : NULL));
      SSM_ASSERT_OK(ssm_backend_run(be, toks + 8, 1, with ? y : x));
    }
    CU_ASSERT_EQUAL(memcmp(x, y, sizeof(float) * V), 0);
    CU_ASSERT_EQUAL(be->position, 9);
    /* those rows are the second run's: as decode gives them, token by token */
    SSM_ASSERT_OK(ssm_backend_reset(be));
    for (int t = 0; t < 8; t++) SSM_ASSERT_OK(ssm_backend_run(be, toks + t, 1, one + (size_t)t * V));
    double worst = 0, top = 0;
    for (size_t i = 0; i < 4 * V; i++) {
      worst = fmax(worst, fabs((double)rows[i] - one[4 * V + i]));
      top = fmax(top, fabs((double)one[4 * V + i]));
    }
    CU_ASSERT(top > 0 && worst <= 1e-6 * top);
    free(one);
    free(rows);
    free(x);
    free(y);
    ssm_backend_close(be);
  }
}

/* A run of fewer tokens than the chunk gives the same bits whatever earlier
 * runs left in the rows past its tokens: the cooperative-matrix GEMM scales
 * 16 rows of x together, and stages the rows past the run's as zeros
 * (gemm_coop.glsl.in). A form that read them would leave the last 8 rows
 * of an 88-token run of a random 8-layer mamba-1.4b (bf16, on a GPU with
 * cooperative matrices) up to 8e-5 apart depending on the run before;
 * these fixtures' activations are too even for such a form to fail here.
 * The portable kernels keep rows apart, so on a device without cooperative
 * matrices this holds by construction. */
static void test_partial_runs_ignore_stale_rows(void) {
  ssm_bundle *b = compile("falcon_bf16_untied", 16);
  ssm_backend *be = open_vk(b, "falcon_bf16_untied");
  size_t V = (size_t)be->vocab;
  float *first = malloc(sizeof(float) * V * 16), *again = malloc(sizeof(float) * V * 16);
  int32_t toks[16], other[16];
  for (int i = 0; i < 16; i++) {
    toks[i] = (int32_t)((i * 37 + 11) % (int)V);
    other[i] = (int32_t)((i * 101 + 7) % (int)V);
  }
  for (int n = 1; n < 16; n += 6) {
    SSM_ASSERT_OK(ssm_backend_reset(be));
    SSM_ASSERT_OK(ssm_backend_run(be, toks, n, first));
    /* a whole chunk of other tokens leaves its values in every row */
    SSM_ASSERT_OK(ssm_backend_reset(be));
    SSM_ASSERT_OK(ssm_backend_run(be, other, 16, again));
    SSM_ASSERT_OK(ssm_backend_reset(be));
    SSM_ASSERT_OK(ssm_backend_run(be, toks, n, again));
    CU_ASSERT_EQUAL(memcmp(first, again, sizeof(float) * V * (size_t)n), 0);
  }
  free(first);
  free(again);
  ssm_backend_close(be);
}

/* The prefill's logits of every row (chunk x vocab floats, most of what a
 * prefill would otherwise plan) are in a buffer of their own, which runtimes
 * make only when a run asks for those logits; decode's one row, which its
 * sampler reads, stays with the activations. */
static void test_prefill_logits_apart(void) {
  ssm_bundle *b = compile("mamba1_tiny", 64);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  uint64_t logits = (uint64_t)64 * (uint64_t)m->vocab * 4;
  int outputs = 0;
  for (int i = 0; i < m->nbuffers; i++) outputs += m->buffers[i].usage == SSM_BUFFER_OUTPUT;
  CU_ASSERT_EQUAL(outputs, 1);
  CU_ASSERT_EQUAL(m->buffers[m->prefill.output.buffer].usage, SSM_BUFFER_OUTPUT);
  CU_ASSERT_EQUAL(m->prefill.output.bytes, logits);
  CU_ASSERT(m->buffers[m->prefill.output.buffer].bytes >= logits);
  CU_ASSERT_EQUAL(m->buffers[m->decode.output.buffer].usage, SSM_BUFFER_ACTIVATIONS);
  CU_ASSERT(m->prefill.activation_bytes < logits);
  /* only the steps past the state steps bind it: a run without logits never does */
  int k = ssm_manifest_state_steps(m, &m->prefill);
  for (int i = 0; i < m->prefill.nsteps; i++)
    for (int j = 0; j < m->prefill.steps[i].nbindings; j++)
      if (m->prefill.steps[i].bindings[j].buffer == m->prefill.output.buffer) CU_ASSERT(i >= k);
  char *text = NULL;
  SSM_ASSERT_OK(ssm_bundle_describe(b, 0, &text));
  CU_ASSERT_PTR_NOT_NULL(text && strstr(text, " output "));
  free(text);
  ssm_bundle_close(b);
}

/* A prefill run of fewer tokens than the chunk (the bundle's prefill runs
 * take any count): for models with conv, scan and attention state, a whole
 * chunk and then a part of `tail` tokens give every row's logits as one
 * token at a time through decode does, within f32 rounding, and leave the
 * state so that the next token's logits agree too; rows past the run's are
 * not written. Chunk 64 has GEMMs of several row blocks, of which a short
 * run skips all but the first; Mamba-2's chunked scan at 128 walks two
 * chunks of 64 tokens (codegen/ssd.c), a run of 70 a chunk and 6 tokens;
 * the chunked delta rule at 64 (codegen/delta.c) two chunks of 32 in GLSL,
 * a run of 40 a chunk and 8 tokens. */
static void test_partial_runs(void) {
  static const struct { const char *fixture; int chunk, tails[3]; } cases[] = {
      {"mamba1_tiny", 16, {2, 5, 15}},  {"jamba_tiny", 16, {2, 5, 15}},
      {"mamba2_tiny", 16, {2, 5, 15}},  {"lfm2_tiny", 16, {2, 5, 15}},
      {"recurrent_gemma_tiny", 16, {2, 5, 15}}, {"mamba1_tiny", 64, {5, 40, 63}},
      {"jamba_tiny", 64, {5, 40, 63}}, {"mamba2_groups", 128, {5, 70, 127}},
      {"qwen3_next_tiny", 16, {2, 5, 15}}, {"qwen3_5_tiny", 64, {5, 40, 63}},
  };
  for (size_t f = 0; f < sizeof cases / sizeof *cases; f++) {
    int chunk = cases[f].chunk;
    ssm_bundle *b = compile(cases[f].fixture, chunk);
    CU_ASSERT(ssm_bundle_manifest(b)->prefill.any_count);
    ssm_backend *be = open_vk(b, cases[f].fixture);
    CU_ASSERT_EQUAL(be->any_count, 1);
    size_t V = (size_t)be->vocab, rows = (size_t)2 * (size_t)chunk + 1;
    float *chunked = malloc(sizeof(float) * V * rows), *single = malloc(sizeof(float) * V * rows);
    int32_t *toks = malloc(sizeof(int32_t) * rows);
    /* one token at a time once, as far as the longest run (the last tail)
     * and the token after it: every run's tokens are a start of these */
    int most = chunk + cases[f].tails[2];
    for (int i = 0; i <= most; i++) toks[i] = (int32_t)((i * 37 + 11) % (int)V);
    SSM_ASSERT_OK(ssm_backend_reset(be));
    for (int i = 0; i <= most; i++) SSM_ASSERT_OK(ssm_backend_run(be, toks + i, 1, single + (size_t)i * V));
    for (int t = 0; t < 3; t++) {
      int tail = cases[f].tails[t], n = chunk + tail;
      CU_ASSERT_FATAL(n <= most);
      SSM_ASSERT_OK(ssm_backend_reset(be));
      for (size_t i = 0; i < V * rows; i++) chunked[i] = 12345.0f; /* not a logit */
      SSM_ASSERT_OK(ssm_backend_run(be, toks, chunk, chunked));
      SSM_ASSERT_OK(ssm_backend_run(be, toks + chunk, tail, chunked + (size_t)chunk * V));
      CU_ASSERT_EQUAL(be->position, n);
      CU_ASSERT_EQUAL(chunked[(size_t)n * V], 12345.0f); /* the row after the run's */
      SSM_ASSERT_OK(ssm_backend_run(be, toks + n, 1, chunked + (size_t)n * V));
      double big = 0, diff = 0;
      for (size_t i = 0; i < (size_t)(n + 1) * V; i++) {
        big = fmax(big, fabs(single[i]));
        diff = fmax(diff, fabs((double)chunked[i] - single[i]));
      }
      fprintf(stderr, "\n  %s: %d + %d tokens, then one: max |d| %.2e of max |logit| %.3g",
              cases[f].fixture, chunk, tail, diff, big);
      CU_ASSERT(big > 0 && diff <= 1e-4 * big);
    }
    free(chunked);
    free(single);
    free(toks);
    ssm_backend_close(be);
  }
}

/* Without a chunk, the prefill program runs SSM_CHUNK_DEFAULT tokens, or
 * max_seq when that is smaller (an attention cache of 100 rows cannot hold a
 * chunk of 512: asked for explicitly, that is an error naming both). */
static void test_default_chunk(void) {
  ssm_model *m = NULL;
  ssm_bundle *b = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path("tests/data/jamba_tiny"), NULL, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  ssm_compile_opts o = {0};
  CU_ASSERT_EQUAL(ssm_compile_chunk(m, &o), SSM_CHUNK_DEFAULT);
  CU_ASSERT_EQUAL(ssm_compile_chunk(m, NULL), SSM_CHUNK_DEFAULT);
  SSM_ASSERT_OK(ssm_compile(m, &o, &b));
  CU_ASSERT_EQUAL(ssm_bundle_manifest(b)->prefill.tokens, 512);
  CU_ASSERT(ssm_bundle_manifest(b)->prefill.any_count);
  ssm_bundle_close(b);
  b = NULL;
  SSM_ASSERT_OK(ssm_model_set_param(m, "max_seq", 100));
  CU_ASSERT_EQUAL(ssm_compile_chunk(m, &o), 100);
  SSM_ASSERT_OK(ssm_compile(m, &o, &b));
  CU_ASSERT_EQUAL(ssm_bundle_manifest(b)->prefill.tokens, 100);
  ssm_bundle_close(b);
  b = NULL;
  o.prefill_tokens = 512;
  CU_ASSERT_EQUAL(ssm_compile_chunk(m, &o), 512);
  ssm_status s = ssm_compile(m, &o, &b);
  CU_ASSERT_PTR_NULL(b);
  CU_ASSERT_PTR_NOT_NULL(strstr(s ? ssm_status_message(s) : "",
                                "attention cache of 100 rows cannot hold 512 tokens"));
  ssm_status_free(s);
  ssm_model_close(m);
}

/* A model whose tokens meet outside scan, conv and attention (here a mean
 * over the tokens added to every row) gets no any_count: its prompts end
 * token by token through decode, and a part of a chunk is refused. */
static void test_rows_that_mix_take_whole_chunks(void) {
  char *yaml = NULL;
  size_t n = 0;
  SSM_ASSERT_OK(ssm_file_read(ssm_test_path("models/mamba1.yaml"), 1 << 20, &yaml, &n));
  CU_ASSERT_PTR_NOT_NULL_FATAL(yaml);
  const char *at = "  - x = rmsnorm(x, norm_f, eps=eps)";
  char *cut = strstr(yaml, at);
  CU_ASSERT_PTR_NOT_NULL_FATAL(cut);
  char *mixed = malloc(n + 100);
  snprintf(mixed, n + 100, "%.*s  - x = add(x, reduce(x, kind=mean, axis=0))\n%s", (int)(cut - yaml),
           yaml, cut);
  const char *path = ssm_test_write("mixed.yaml", mixed, strlen(mixed));
  ssm_model *m = NULL;
  ssm_bundle *b = NULL;
  SSM_ASSERT_OK(ssm_model_open(path, ssm_test_path("tests/data/mamba1_tiny/config.json"), &m));
  ssm_compile_opts o = {.prefill_tokens = 4};
  if (m) SSM_ASSERT_OK(ssm_compile(m, &o, &b));
  ssm_model_close(m);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  CU_ASSERT_FALSE(ssm_bundle_manifest(b)->prefill.any_count);
  ssm_backend *be = open_vk(b, "mamba1_tiny");
  CU_ASSERT_EQUAL(be->any_count, 0);
  int32_t toks[3] = {1, 2, 3};
  SSM_ASSERT_ERR(ssm_backend_run(be, toks, 3, NULL), "runs take 1 or 4 tokens, not 3");
  ssm_backend_close(be);
  free(mixed);
  free(yaml);
}

static void test_profile(void) {
  ssm_bundle *b = compile("jamba_tiny", 4);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  /* prefill as a prompt runs it: without the lm_head */
  int nsteps[2] = {m->decode.nsteps, ssm_manifest_state_steps(m, &m->prefill)};
  ssm_backend *be = open_vk(b, "jamba_tiny");
  for (int prefill = 0; prefill < 2; prefill++) {
    ssm_step_time *t = NULL;
    int n = 0;
    SSM_ASSERT_OK(be->ops->profile(be, prefill, 3, &t, &n));
    CU_ASSERT_EQUAL(n, nsteps[prefill]);
    double sum = 0;
    for (int i = 0; t && i < n; i++) {
      CU_ASSERT(t[i].us >= 0);
      CU_ASSERT(t[i].bytes > 0);
      CU_ASSERT_PTR_NOT_NULL(strstr(t[i].kernel, t[i].family));
      sum += t[i].us;
    }
    CU_ASSERT(sum > 0);
    free(t);
    CU_ASSERT_EQUAL(be->position, 0); /* reset after */
  }
  ssm_backend_close(be);
}

/* The source of kernel k (GLSL, or WGSL with `wgsl`), malloc'd. */
static char *kernel_source(ssm_bundle *b, const ssm_mf_kernel *k, int wgsl) {
  ssm_blob blob = wgsl ? k->wgsl : k->glsl;
  return strndup(ssm_bundle_blob(b, blob), (size_t)blob.size);
}

/* A gemm with at least 256 blocks of 128 x 128 (the lm_head of a chunk of
 * 4096 tokens of a vocabulary of 1000: 32 x 8 blocks) takes them in GLSL,
 * 8 x 8 a thread, on the grid of the smaller blocks (REMAP); WGSL keeps
 * those blocks; a smaller gemm (the in_proj: 32 x 2) keeps them in GLSL too.
 * test_golden's gemm_big_blocks runs it. */
static void test_gemm_big_blocks(void) {
  ssm_bundle *b = compile("mamba1_tiny", 4096);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  const ssm_mf_kernel *first = NULL, *last = NULL;
  for (int i = 0; i < m->prefill.nsteps; i++) {
    const ssm_mf_kernel *k = &m->kernels[m->prefill.steps[i].kernel];
    if (strcmp(k->family, "gemm")) continue;
    if (!first) first = k;
    last = k;
  }
  CU_ASSERT_PTR_NOT_NULL_FATAL(first);
  CU_ASSERT_PTR_NOT_NULL_FATAL(last);
  CU_ASSERT_PTR_NOT_NULL(strstr(last->params, "N=1000"));
  CU_ASSERT_PTR_NOT_NULL(strstr(last->params, "(GLSL: BM=BN=128 BK=32 TM=TN=8 LOCAL=256)"));
  CU_ASSERT_PTR_NULL(strstr(first->params, "GLSL:"));
  char *big = kernel_source(b, last, 0), *big_wgsl = kernel_source(b, last, 1);
  char *small = kernel_source(b, first, 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(big, "#define REMAP 1"));
  CU_ASSERT_PTR_NOT_NULL(strstr(big, "#define TM 8"));
  CU_ASSERT_PTR_NOT_NULL(strstr(big, "layout(local_size_x = 256)"));
  CU_ASSERT_PTR_NOT_NULL(strstr(big_wgsl, "const BM: u32 = 64u;"));
  CU_ASSERT_PTR_NOT_NULL(strstr(small, "#define REMAP 0"));
  free(big);
  free(big_wgsl);
  free(small);
  ssm_bundle_close(b);
}

/* A thin gemm of a long k (mamba1_tiny's x_proj at a chunk of 16: 1 x 2
 * blocks of 32 x 32, k of 128) is split over k in GLSL: as many groups of
 * 64 threads as give each two slices of 16 (4: at most 8 for so small a
 * grid); WGSL keeps one group. The in_proj and the lm_head (k of 64,
 * each after a norm of its own kernel: a GEMM's x is not computed in it)
 * are not split, nor the dt_proj (k of 4). test_kernels and test_golden's
 * gemm_chunks run them. */
static void test_gemm_split_k(void) {
  ssm_bundle *b = compile("mamba1_tiny", 16);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  int split = 0, whole = 0;
  for (int i = 0; i < m->prefill.nsteps; i++) {
    const ssm_mf_kernel *k = &m->kernels[m->prefill.steps[i].kernel];
    if (strcmp(k->family, "gemm")) continue;
    char *glsl = kernel_source(b, k, 0), *wgsl = kernel_source(b, k, 1);
    CU_ASSERT_PTR_NULL(strstr(wgsl, "SPLITK"));
    if (strstr(k->params, "K=128 N=36")) {
      split++;
      CU_ASSERT_PTR_NOT_NULL(strstr(k->params, "(GLSL: split-K in 4 groups, TM=4 LOCAL=256)"));
      CU_ASSERT_PTR_NOT_NULL(strstr(glsl, "#define SPLITK 4"));
      CU_ASSERT_PTR_NOT_NULL(strstr(glsl, "layout(local_size_x = 256)"));
    } else if (strstr(k->params, "K=64 ") || strstr(k->params, "K=4 ")) {
      whole++;
      CU_ASSERT_PTR_NOT_NULL(strstr(glsl, "#define SPLITK 1"));
      CU_ASSERT_PTR_NULL(strstr(k->params, "split-K"));
    }
    free(glsl);
    free(wgsl);
  }
  CU_ASSERT_EQUAL(split, 2); /* x_proj of 2 layers */
  CU_ASSERT(whole >= 4);
  ssm_bundle_close(b);
}

/* The text of function NAME in src, up to its closing brace at the start
 * of a line (malloc'd; NULL when src has none). */
static char *function_text(const char *src, const char *name) {
  const char *a = strstr(src, name), *e = a ? strstr(a, "\n}\n") : NULL;
  return e ? strndup(a, (size_t)(e - a)) : NULL;
}

/* gemm_coop of a bf16 checkpoint (falcon_bf16_untied at a chunk of 64):
 * 16 subgroups in SGM x SGN; with coop_prep and k a multiple of 8, a prep
 * kernel (gemm_coop_prep) that makes x ready in the scratch (bound after
 * the kernel's bindings, its bytes M K 2 + M 4, a workgroup a row), w
 * loaded raw and converted when staged, and two slices' staging; elsewhere
 * and by default, two slices' staging but where a narrow tile has a norm
 * prologue (knobs.h),
 * and load_x and load_w read memory through
 * vector views (ldq) where x is a tensor in memory and k a multiple of 8
 * (x_proj: k of 80; out_proj; in_proj, whose small-row norm is the
 * kernel's prologue: x times the gain rounded, the norm's scale after the
 * sums, so its gain through load_g too), the scalar loads elsewhere
 * (dt_proj: k of 5). test_golden runs these kernels on a device with
 * cooperative matrices. */
static void gemm_coop_loads(int coop_prep) {
  ssm_model *model = NULL;
  ssm_bundle *b = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path("tests/data/falcon_bf16_untied"), NULL, &model));
  ssm_compile_opts o = {.prefill_tokens = 64, .dtype = SSM_BF16, .no_coop_prep = !coop_prep};
  if (model) SSM_ASSERT_OK(ssm_compile(model, &o, &b));
  ssm_model_close(model);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  int direct = 0, scalar = 0, forms = 0, preps = 0;
  for (int i = 0; i < m->nkernels; i++) {
    const ssm_mf_kernel *k = &m->kernels[i];
    if (!k->glsl_coop.size) continue;
    char *src = strndup(ssm_bundle_blob(b, k->glsl_coop), (size_t)k->glsl_coop.size);
    char *lx = function_text(src, "void load_x("), *lw = function_text(src, "void load_w(");
    CU_ASSERT_PTR_NOT_NULL_FATAL(lx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lw);
    CU_ASSERT_PTR_NOT_NULL(strstr(src, "#define NW 16\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(src, "layout(local_size_x = NW * 32) in;"));
    /* two slices' staging, except on narrow tiles with a norm prologue */
    int normed = strstr(src, "#define NORM 1\n") != NULL;
    int prep = coop_prep && strstr(k->params, " K=5 ") == NULL;
    /* tiles of 128 x 64 here, but of 128 x 128 with w read ahead where there is a prep kernel */
    CU_ASSERT_PTR_NOT_NULL(strstr(src, prep ? "#define SGN 4\n" : "#define SGN 2\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(src, prep ? "BN=128 AHEAD=2 " : "BN=64 AHEAD=0 "));
    CU_ASSERT_PTR_NOT_NULL(strstr(src, prep ? "#define PREP 1\n" : "#define PREP 0\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(src, normed && !prep ? "#define DB 0 " : "#define DB 1 "));
    CU_ASSERT_EQUAL(k->spirv_prep.size > 0, prep);
    CU_ASSERT_PTR_NULL(strstr(src, "SSM_SCRATCH_BINDING"));
    if (prep) {
      char at[64];
      snprintf(at, sizeof at, "layout(std430, binding = %d) readonly buffer BS {", k->nbindings);
      CU_ASSERT_PTR_NOT_NULL(strstr(src, at));
      char *lr = function_text(src, "uvec4 load_w_raw(uint n"),
           *sw = function_text(src, "uvec4 stage_w(uvec4 q)");
      CU_ASSERT(lr && strstr(lr, "ldq") && !strstr(lr, "load_w("));
      CU_ASSERT(sw && strstr(sw, "packHalf2x16")); /* bf16 to f16 when staged */
      free(lr);
      free(sw);
      int K = strstr(k->params, " K=80 ") ? 80 : 40;
      CU_ASSERT_EQUAL(k->scratch_bytes, (uint64_t)64 * K * 2 + 64 * 4);
      CU_ASSERT(k->prep_groups[0] == 64 && k->prep_groups[1] == 1 && k->prep_groups[2] == 1);
      char *ps = strndup(ssm_bundle_blob(b, k->glsl_prep), (size_t)k->glsl_prep.size);
      snprintf(at, sizeof at, "layout(std430, binding = %d) writeonly buffer BS {", k->nbindings);
      CU_ASSERT_PTR_NOT_NULL(strstr(ps, at));
      CU_ASSERT_PTR_NOT_NULL(strstr(ps, "template gemm_coop_prep.glsl.in"));
      CU_ASSERT_PTR_NOT_NULL(strstr(ps, normed ? "#define NORM 1\n" : "#define NORM 0\n"));
      char *plx = function_text(ps, "void load_x(");
      CU_ASSERT(plx && strstr(plx, "ldq1"));
      free(plx);
      free(ps);
      preps++;
    }
    forms |= normed ? 1 : 2;
    if (strstr(k->params, "matmul M=64 K=80 N=29 ") || strstr(k->params, "matmul+add+add M=64 K=80")) {
      direct++;
      CU_ASSERT_PTR_NOT_NULL(strstr(lx, "uint i = (m * 80u + k) >> 2u;"));
      CU_ASSERT_PTR_NOT_NULL(strstr(lx, "uintBitsToFloat(ldq1(i))"));
      CU_ASSERT_PTR_NOT_NULL(strstr(lw, "ldq"));
    } else if (strstr(k->params, "rmsnorm+matmul+add M=64 K=40")) {
      direct++;
      char *lg = function_text(src, "void load_g(");
      CU_ASSERT_PTR_NOT_NULL(strstr(src, "#define NORM 1\n"));
      CU_ASSERT_PTR_NOT_NULL(strstr(lx, "uint i = (m * 40u + k) >> 2u;"));
      CU_ASSERT_PTR_NOT_NULL(lg && strstr(lg, "ldq"));
      free(lg);
    } else if (strstr(k->params, " K=5 ")) {
      scalar++;
      CU_ASSERT_PTR_NULL(strstr(lx, "ldq"));
      CU_ASSERT_PTR_NOT_NULL(strstr(lx, "in_x(m, k + 7u)"));
      CU_ASSERT_PTR_NULL(strstr(lw, "ldq"));
    }
    free(lx);
    free(lw);
    free(src);
  }
  CU_ASSERT_EQUAL(direct, 3); /* x_proj, out_proj and in_proj (one kernel for every layer) */
  CU_ASSERT_EQUAL(forms, 3); /* a normed kernel and one without */
  CU_ASSERT_EQUAL(scalar, 1); /* dt_proj */
  CU_ASSERT_EQUAL(preps, coop_prep ? 4 : 0); /* in_proj, x_proj, out_proj, lm_head */
  ssm_bundle_close(b);
}

static void test_gemm_coop_loads(void) {
  gemm_coop_loads(0);
  gemm_coop_loads(1);
}

/* gemm_coop of quantized weights (falcon_bf16_untied in q8_0 and q4_0, a
 * chunk of 64) with its prep kernels: w dequantized by load_w as it is
 * loaded (qx8_), packed to f16 by load_w_raw, staged as it is; the bundle
 * compiles (a snippet of the variant that fails is an error of the
 * compile, not a kernel without its functions). test_golden runs them on
 * a device with cooperative matrices. */
static void test_gemm_coop_prep_quant(void) {
  const ssm_dtype dts[] = {SSM_Q8_0, SSM_Q4_0};
  for (int d = 0; d < 2; d++) {
    ssm_model *model = NULL;
    ssm_bundle *b = NULL;
    SSM_ASSERT_OK(ssm_model_open(ssm_test_path("tests/data/falcon_bf16_untied"), NULL, &model));
    ssm_compile_opts o = {.prefill_tokens = 64, .dtype = dts[d]};
    if (model) SSM_ASSERT_OK(ssm_compile(model, &o, &b));
    ssm_model_close(model);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    const ssm_manifest *m = ssm_bundle_manifest(b);
    int quant = 0;
    for (int i = 0; i < m->nkernels; i++) {
      const ssm_mf_kernel *k = &m->kernels[i];
      if (!k->glsl_coop.size || !k->spirv_prep.size) continue;
      char *src = strndup(ssm_bundle_blob(b, k->glsl_coop), (size_t)k->glsl_coop.size);
      char *lw = function_text(src, "void load_w("), *lr = function_text(src, "uvec4 load_w_raw(uint n"),
           *sw = function_text(src, "uvec4 stage_w(uvec4 q)");
      CU_ASSERT_PTR_NOT_NULL(strstr(src, "#define PREP 1\n"));
      CU_ASSERT(lw && lr && sw);
      if (lw && lr && sw && strstr(lw, "qx8_")) {
        quant++;
        CU_ASSERT_PTR_NOT_NULL(strstr(lr, "load_w(n, k, a, b);"));
        CU_ASSERT_PTR_NOT_NULL(strstr(lr, "packHalf2x16"));
        CU_ASSERT_PTR_NOT_NULL(strstr(sw, "return q;"));
      }
      free(lw);
      free(lr);
      free(sw);
      free(src);
    }
    CU_ASSERT(quant >= 2); /* in_proj and out_proj at least */
    ssm_bundle_close(b);
  }
}

/* Runs prep kernel of prefill step st of bundle b (compiled with
 * coop_prep) on its own, on any device (it is plain GLSL), with every
 * binding of the step filled with x (binding 1: rows of K whose
 * magnitudes span 2^-30 to 2^20, some of them zero) or a gain (binding 2,
 * when `normed`), for a run of `count` tokens; asserts the scratch holds
 * each row of x16(x g) s as f16, s the power of two that puts the row's
 * largest in [2^13, 2^14), and the row's factor 1/s (normed: times the
 * rmsnorm's 1/rms of x, to f32's rounding), rows past count zeros. */
static void check_prep(ssm_bundle *b, const ssm_mf_step *st, int normed, uint32_t count) {
  const ssm_manifest *m = ssm_bundle_manifest(b);
  const ssm_mf_kernel *k = &m->kernels[st->kernel];
  int64_t M = k->prep_groups[0], K = (int64_t)(st->bindings[1].bytes / 4 / (uint64_t)M);
  CU_ASSERT_FATAL(K > 0 && K % 8 == 0 && k->scratch_bytes == (uint64_t)(M * K * 2 + M * 4));
  ssm_vk *vk = NULL;
  SSM_ASSERT_OK(ssm_vk_open(-1, 0, &vk));
  CU_ASSERT_PTR_NOT_NULL_FATAL(vk);
  ssm_vk_buffer *bufs[SSM_BUNDLE_MAX_BINDINGS + 1] = {0};
  ssm_vk_binding vb[SSM_BUNDLE_MAX_BINDINGS + 1];
  float *x = malloc(sizeof(float) * (size_t)(M * K)), g[4096];
  CU_ASSERT_FATAL(K <= 4096);
  uint32_t seed = 7;
  for (int64_t i = 0; i < M * K; i++) {
    seed = seed * 1664525u + 1013904223u;
    int64_t r = i / K;
    float u = (float)(seed >> 8) / (float)(1 << 24) - 0.5f;
    x[i] = r % 7 == 3 ? 0.0f : ldexpf(u, (int)(r % 51) - 30) * (i % 13 == 0 ? 1e-6f : 1.0f);
  }
  for (int64_t j = 0; j < K; j++) g[j] = normed ? 0.5f + (float)(j % 5) * 0.25f : 1.0f;
  for (int i = 0; i <= st->nbindings; i++) {
    size_t bytes = i < st->nbindings ? ((size_t)st->bindings[i].bytes + 15) & ~(size_t)15
                                     : (size_t)k->scratch_bytes;
    SSM_ASSERT_OK(ssm_vk_buffer_create(vk, bytes, SSM_VK_BUFFER_HOST, &bufs[i]));
    CU_ASSERT_PTR_NOT_NULL_FATAL(bufs[i]);
    memset(ssm_vk_buffer_map(bufs[i]), 0x7f, bytes); /* whatever was there */
    if (i == 1) memcpy(ssm_vk_buffer_map(bufs[i]), x, sizeof(float) * (size_t)(M * K));
    if (i == 2 && normed) memcpy(ssm_vk_buffer_map(bufs[i]), g, sizeof(float) * (size_t)K);
    vb[i] = (ssm_vk_binding){bufs[i], 0, bytes};
  }
  ssm_vk_kernel *kern = NULL;
  ssm_vk_program *p = NULL;
  SSM_ASSERT_OK(ssm_vk_kernel_create(vk, (const uint32_t *)ssm_bundle_blob(b, k->spirv_prep),
                                     (size_t)k->spirv_prep.size / 4, st->nbindings + 1,
                                     m->prefill.any_count ? SSM_BUNDLE_RUN_PUSH_BYTES : 0, &kern));
  SSM_ASSERT_OK(ssm_vk_program_create(vk, &p));
  SSM_ASSERT_OK(ssm_vk_program_add_dispatch(p, kern, vb, m->prefill.any_count ? &count : NULL,
                                            k->prep_groups[0], k->prep_groups[1], k->prep_groups[2]));
  SSM_ASSERT_OK(ssm_vk_program_end(p));
  SSM_ASSERT_OK(ssm_vk_program_run(vk, p));
  const uint16_t *h = ssm_vk_buffer_map(bufs[st->nbindings]);
  const float *factor = (const float *)(h + M * K);
  int bad = 0;
  uint32_t live = m->prefill.any_count ? count : (uint32_t)M;
  double eps = 0; /* the norm's, as the kernel has it */
  char *src = strndup(ssm_bundle_blob(b, k->glsl_prep), (size_t)k->glsl_prep.size);
  const char *at = strstr(src, "inversesqrt(ssq / float(GK) + float(");
  CU_ASSERT_FATAL(!normed || at);
  if (at) eps = strtod(at + strlen("inversesqrt(ssq / float(GK) + float("), NULL);
  CU_ASSERT(!normed || (eps > 0 && eps < 1e-3));
  free(src);
  for (int64_t r = 0; r < M && bad < 5; r++) {
    float mx = 0;
    double ss = 0;
    for (int64_t j = 0; j < K; j++) {
      mx = fmaxf(mx, fabsf(ssm_round_x16(x[r * K + j] * g[j])));
      ss += (double)x[r * K + j] * x[r * K + j];
    }
    int e;
    frexpf(mx, &e);
    float s = mx > 0 ? ldexpf(1.0f, 14 - e < -100 ? -100 : 14 - e > 100 ? 100 : 14 - e) : 1.0f;
    double want_f = r < live ? 1.0 / s / (normed ? sqrt(ss / (double)K + eps) : 1.0) : 0.0;
    if (fabs(factor[r] - want_f) > 2e-6 * fabs(want_f)) {
      fprintf(stderr, "\n  row %lld: factor %.9g, want %.9g", (long long)r, factor[r], want_f);
      bad++;
    }
    for (int64_t j = 0; j < K && bad < 5; j++) {
      float v = ssm_round_x16(x[r * K + j] * g[j]) * s;
      float got = ssm_f16_to_f32(h[r * K + j]);
      /* exact, but for f16's subnormals (below 2^-14), which round */
      float want = r < live ? ssm_f16_to_f32(ssm_f32_to_f16(v)) : 0.0f;
      if (got != want && !(fabsf(v) < 0x1p-14f && fabsf(got - v) <= 0x1p-24f)) {
        fprintf(stderr, "\n  row %lld, k %lld: %.9g, want %.9g", (long long)r, (long long)j, got, want);
        bad++;
      }
    }
  }
  CU_ASSERT_EQUAL(bad, 0);
  ssm_vk_program_destroy(vk, p);
  ssm_vk_kernel_destroy(vk, kern);
  for (int i = 0; i <= st->nbindings; i++) ssm_vk_buffer_destroy(vk, bufs[i]);
  ssm_vk_close(vk);
  free(x);
}

/* gemm_coop_prep's scratch, on whatever device there is: the normed
 * in_proj and out_proj of falcon_bf16_untied (bf16, a chunk of 64) for a
 * whole run and one of 37 tokens. (The GEMM that reads it needs
 * cooperative matrices: test_golden runs both where the device has them.)
 * Where the device has none, the bundle runs its portable kernels: the
 * same logits as the bundle compiled without prep kernels. */
static void test_gemm_coop_prep(void) {
  ssm_model *model = NULL;
  ssm_bundle *b = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path("tests/data/falcon_bf16_untied"), NULL, &model));
  ssm_compile_opts o = {.prefill_tokens = 64, .dtype = SSM_BF16};
  if (model) SSM_ASSERT_OK(ssm_compile(model, &o, &b));
  ssm_model_close(model);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  int seen = 0;
  for (int i = 0; i < m->prefill.nsteps; i++) {
    const ssm_mf_step *st = &m->prefill.steps[i];
    const ssm_mf_kernel *k = &m->kernels[st->kernel];
    int normed = strstr(k->params, "rmsnorm+matmul+add M=64 K=40") != NULL;
    int plain = strstr(k->params, "matmul+add+add M=64 K=80") != NULL;
    if (!k->spirv_prep.size || !(normed || plain) || (seen & (normed ? 1 : 2))) continue;
    seen |= normed ? 1 : 2;
    check_prep(b, st, normed, 64);
    check_prep(b, st, normed, 37);
  }
  CU_ASSERT_EQUAL(seen, 3);
  ssm_bundle *plain = NULL;
  o.no_coop_prep = 1;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path("tests/data/falcon_bf16_untied"), NULL, &model));
  if (model) SSM_ASSERT_OK(ssm_compile(model, &o, &plain));
  ssm_model_close(model);
  CU_ASSERT_PTR_NOT_NULL_FATAL(plain);
  ssm_backend *with = open_vk(b, "falcon_bf16_untied"), *without = open_vk(plain, "falcon_bf16_untied");
  if (!(ssm_vk_features(ssm_vk_backend_device(with)) & SSM_VK_COOPMAT)) {
    int32_t prompt[5] = {3, 14, 15, 92, 65};
    size_t n = (size_t)with->vocab * 5;
    float *a = malloc(sizeof(float) * n), *c = malloc(sizeof(float) * n);
    SSM_ASSERT_OK(ssm_backend_run(with, prompt, 5, a));
    SSM_ASSERT_OK(ssm_backend_run(without, prompt, 5, c));
    CU_ASSERT_EQUAL(memcmp(a, c, sizeof(float) * n), 0);
    free(a);
    free(c);
  }
  ssm_backend_close(with);
  ssm_backend_close(without);
}

/* The scan kernels of program p (0: decode, 1: prefill) in step order, at
 * most 16; asserts there is one. */
static int scan_kernels(const ssm_manifest *m, int p, const ssm_mf_kernel **out) {
  const ssm_mf_program *prog = p ? &m->prefill : &m->decode;
  int n = 0;
  for (int i = 0; i < prog->nsteps && n < 16; i++)
    if (!strcmp(m->kernels[prog->steps[i].kernel].family, "scan"))
      out[n++] = &m->kernels[prog->steps[i].kernel];
  CU_ASSERT(n > 0);
  return n;
}

/* A prefill scan computes Falcon-Mamba's B and C norms once per step at
 * the start of each pass (rmc<id>, in both languages) and reads step t's
 * from shared memory; decode's scan (one step) keeps them inline. The
 * pass's rows of both norms are computed in one loop, a row a thread. */
static void test_scan_caches_norms(void) {
  ssm_bundle *b = compile("falcon_tiny", 8);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  for (int p = 0; p < 2; p++) {
    const ssm_mf_kernel *ks[16];
    int scans = scan_kernels(m, p, ks);
    for (int i = 0; i < scans; i++) {
      const ssm_mf_kernel *k = ks[i];
      for (int w = 0; w < 2; w++) {
        char *src = kernel_source(b, k, w);
        if (p) {
          /* both norms' rows in one loop over tn * 2 */
          CU_ASSERT_PTR_NOT_NULL(strstr(src, "i < tn * 2u;"));
          CU_ASSERT_PTR_NOT_NULL(strstr(src, "if (q == 0u) rmc0_[r] = rms0(t0 + r);") ||
                                 strstr(src, "if (q == 0u) { rmc0_[r] = rms0(t0 + r); }"));
          CU_ASSERT_PTR_NOT_NULL(strstr(src, "else if (q == 1u) rmc1_[r] = rms1(t0 + r);") ||
                                 strstr(src, "else if (q == 1u) { rmc1_[r] = rms1(t0 + r); }"));
          /* a row read at the scan's step, straight from the pass's rows
           * (a call's fallback for other rows kept steps from being read
           * ahead) */
          CU_ASSERT_PTR_NOT_NULL(strstr(src, "* rmc0_[t - g_t0]"));
          CU_ASSERT_PTR_NOT_NULL(strstr(src, "* rmc1_[t - g_t0]"));
          CU_ASSERT_PTR_NULL(strstr(src, "* rmc0("));
        } else {
          CU_ASSERT_PTR_NULL(strstr(src, "rmc0_"));
          CU_ASSERT_PTR_NOT_NULL(strstr(src, " * rms")); /* inline */
        }
        free(src);
      }
    }
  }
  ssm_bundle_close(b);
}

/* A prefill scan (template scan_ch) reads the inputs of 8 time steps
 * (SCAN_UNROLL) before it advances its state by them, and the run's last
 * steps (a chunk of 12: one group of 8, then 4) one at a time, in passes of
 * a multiple of 8 steps; mamba1_tiny's few rows take a thread per state
 * (G = N = 16). The decode scan (one step, template scan) reads one.
 * test_golden runs both forms (chunks of 9, 4 and 4096). */
static void test_scan_reads_ahead(void) {
  ssm_bundle *b = compile("mamba1_tiny", 12);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  static const char *const knob[2][2] = {{"#define U 1u", "const SSM_SCAN_U: u32 = 1u;"},
                                         {"#define U 8u", "const SSM_SCAN_U: u32 = 8u;"}};
  for (int p = 0; p < 2; p++) {
    const ssm_mf_kernel *ks[16];
    int scans = scan_kernels(m, p, ks);
    for (int i = 0; i < scans; i++) {
      const ssm_mf_kernel *k = ks[i];
      const char *tc = strstr(k->params, "TC=");
      CU_ASSERT(tc && atoi(tc + 3) == (p ? 16 : 1));
      CU_ASSERT_EQUAL(strstr(k->params, " G=16 ") != NULL, p);
      for (int w = 0; w < 2; w++) {
        char *src = kernel_source(b, k, w);
        CU_ASSERT_PTR_NOT_NULL(strstr(src, knob[p][w]));
        CU_ASSERT_PTR_NOT_NULL(strstr(src, p ? "template scan_ch." : "template scan."));
        free(src);
      }
    }
  }
  ssm_bundle_close(b);
}

/* The number of program p's (0: decode, 1: prefill) dispatches of template `family`. */
static int program_family(const ssm_manifest *m, int p, const char *family) {
  const ssm_mf_program *prog = p ? &m->prefill : &m->decode;
  int n = 0;
  for (int i = 0; i < prog->nsteps; i++)
    n += !strcmp(m->kernels[prog->steps[i].kernel].family, family);
  return n;
}

/* Every kernel of bundle b from template `family` says so in both
 * languages, and its params hold `member` (the anchor's op). */
static void expect_template(ssm_bundle *b, const char *family, const char *member) {
  const ssm_manifest *m = ssm_bundle_manifest(b);
  char head[2][128];
  snprintf(head[0], sizeof head[0], "// ssmc kernel: template %s.glsl.in, ", family);
  snprintf(head[1], sizeof head[1], "// ssmc kernel: template %s.wgsl.in, ", family);
  for (int i = 0; i < m->nkernels; i++) {
    const ssm_mf_kernel *k = &m->kernels[i];
    if (strcmp(k->family, family)) continue;
    for (int w = 0; w < 2; w++) {
      char *src = kernel_source(b, k, w);
      CU_ASSERT_PTR_NOT_NULL(strstr(src, head[w]));
      free(src);
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(k->params, member));
  }
}

/* The chunked scan (codegen/ssd.c) is what Mamba-2's prefill scans become,
 * and those of the hybrids built on its block, named so in both languages;
 * decode's one-token scans, Mamba-1's and Falcon-Mamba's (A per channel and
 * state: a decay that varies along N), Mamba-2's with fusion off (b then a
 * whole [T, G, H/G, P, N] tensor in memory) and those of programs of fewer
 * than 8 tokens (knobs.h) keep the sequential kernel. */
static void test_ssd_chosen(void) {
  static const struct { const char *fixture; int chunked; } cases[] = {
      {"mamba2_tiny", 1},     {"mamba2_groups", 1}, {"mamba2_dt_limit", 1},
      {"bamba_tiny", 1},      {"nemotron_h_tiny", 1}, {"falcon_h1_tiny", 1},
      {"zamba2_tiny", 1},     {"granitemoe_hybrid_moe", 1}, {"mamba1_tiny", 0},
      {"falcon_tiny", 0},     {"jamba_tiny", 0}};
  for (size_t f = 0; f < sizeof cases / sizeof *cases; f++) {
    ssm_bundle *b = compile(cases[f].fixture, 8);
    const ssm_manifest *m = ssm_bundle_manifest(b);
    int ssd = program_family(m, 1, "ssd"), scans = program_family(m, 1, "scan");
    CU_ASSERT(cases[f].chunked ? ssd > 0 && scans == 0 : ssd == 0 && scans > 0);
    CU_ASSERT_EQUAL(program_family(m, 0, "ssd"), 0);
    CU_ASSERT(program_family(m, 0, "scan") > 0);
    expect_template(b, "ssd", "+scan+");
    ssm_bundle_close(b);
  }
  ssm_model *um = NULL;
  ssm_bundle *ub = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path("tests/data/mamba2_groups"), NULL, &um));
  ssm_compile_opts uo = {.prefill_tokens = 8, .no_fuse = 1};
  if (um) SSM_ASSERT_OK(ssm_compile(um, &uo, &ub));
  CU_ASSERT_PTR_NOT_NULL_FATAL(ub);
  CU_ASSERT_EQUAL(prefill_family(ssm_bundle_manifest(ub), "ssd"), 0);
  CU_ASSERT(prefill_family(ssm_bundle_manifest(ub), "scan") > 0);
  ssm_bundle_close(ub);
  ssm_model_close(um);
  ssm_bundle *b = compile("mamba2_groups", 7);
  CU_ASSERT_EQUAL(prefill_family(ssm_bundle_manifest(b), "ssd"), 0);
  ssm_bundle_close(b);
}

/* The chunked delta rule (codegen/delta.c) is what the Gated DeltaNet
 * fixtures' prefill delta rules become from 8 tokens on, named so in both
 * languages, with the decay's exp in the group (qwen3_next_tiny) or read
 * from memory (qwen3_5_tiny, whose exp is a matmul's epilogue, and both
 * with fusion off); decode's and those of programs of 7 tokens keep the
 * step-by-step kernel. */
static void test_delta_chunk_chosen(void) {
  static const char *const fixtures[] = {"qwen3_5_tiny", "qwen3_next_tiny"};
  for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) {
    for (int no_fuse = 0; no_fuse < 2; no_fuse++) {
      ssm_model *m = NULL;
      ssm_bundle *b = NULL;
      char dir[256];
      snprintf(dir, sizeof dir, "tests/data/%s", fixtures[f]);
      SSM_ASSERT_OK(ssm_model_open(ssm_test_path(dir), NULL, &m));
      ssm_compile_opts o = {.prefill_tokens = 8, .no_fuse = no_fuse};
      if (m) SSM_ASSERT_OK(ssm_compile(m, &o, &b));
      ssm_model_close(m);
      CU_ASSERT_PTR_NOT_NULL_FATAL(b);
      const ssm_manifest *mf = ssm_bundle_manifest(b);
      CU_ASSERT(program_family(mf, 1, "delta_chunk") > 0);
      CU_ASSERT_EQUAL(program_family(mf, 1, "delta"), 0);
      CU_ASSERT_EQUAL(program_family(mf, 0, "delta_chunk"), 0);
      CU_ASSERT(program_family(mf, 0, "delta") > 0);
      expect_template(b, "delta_chunk", "delta_rule T=");
      ssm_bundle_close(b);
    }
    ssm_bundle *b = compile(fixtures[f], 7);
    CU_ASSERT_EQUAL(prefill_family(ssm_bundle_manifest(b), "delta_chunk"), 0);
    CU_ASSERT(prefill_family(ssm_bundle_manifest(b), "delta") > 0);
    ssm_bundle_close(b);
  }
}

/* The bundle of architecture `yaml` on config.json text `cfg` (written to
 * the temp dir as `name`), compiled with `o`; NULL (asserted) on failure. */
static ssm_bundle *compile_config(const char *yaml, const char *name, const char *cfg,
                                  const ssm_compile_opts *o) {
  const char *path = ssm_test_write(name, cfg, strlen(cfg));
  ssm_model *model = NULL;
  ssm_bundle *b = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path(yaml), path, &model));
  if (model) SSM_ASSERT_OK(ssm_compile(model, o, &b));
  ssm_model_close(model);
  return b;
}

/* The workgroup memory (floats) a kernel's source declares as `decl`N. */
static long shared_floats(const char *src, const char *decl) {
  const char *at = strstr(src, decl);
  return at ? atol(at + strlen(decl)) : -1;
}

/* mamba2-2.7b's scan (80 heads of 64 channels, a state of 128, one group;
 * its inner width of 5120 from a hidden of 128, so the matmuls compile
 * quickly) at a chunk of 512: a workgroup a head, 256 threads, chunks of 32
 * tokens and tiles of 32 state columns in GLSL within its 32 KiB of
 * workgroup memory, of 32 and 8 in WGSL within its 16 KiB (lang.def's
 * shared_bytes). */
static void test_ssd_big_state(void) {
  static const char cfg[] =
      "{\"model_type\": \"mamba2\", \"vocab_size\": 256, \"hidden_size\": 128, "
      "\"expand\": 40, \"state_size\": 128, \"num_heads\": 80, \"head_dim\": 64, "
      "\"n_groups\": 1, \"conv_kernel\": 4, \"num_hidden_layers\": 1, "
      "\"layer_norm_epsilon\": 1e-5, \"tie_word_embeddings\": true}";
  ssm_compile_opts o = {.prefill_tokens = 512};
  ssm_bundle *b = compile_config("models/mamba2.yaml", "mamba2_2.7b.json", cfg, &o);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  int found = 0;
  for (int i = 0; i < m->prefill.nsteps; i++) {
    const ssm_mf_step *st = &m->prefill.steps[i];
    const ssm_mf_kernel *k = &m->kernels[st->kernel];
    if (strcmp(k->family, "ssd")) continue;
    found++;
    CU_ASSERT_PTR_NOT_NULL(strstr(k->params, "T=512 H=80 P=64 N=128 L=32 PS=64 NK=32 LOCAL=256"));
    CU_ASSERT_EQUAL(st->groups[0] * st->groups[1] * st->groups[2], 80);
    char *glsl = kernel_source(b, k, 0), *wgsl = kernel_source(b, k, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(wgsl, "L=32 PS=64 NK=8 LOCAL=256\n"));
    long gs = shared_floats(glsl, "shared float sm["), ws = shared_floats(wgsl, "var<workgroup> sm: array<f32, ");
    fprintf(stderr, "\n  ssd workgroup memory: GLSL %ld bytes, WGSL %ld bytes", gs * 4, ws * 4);
    CU_ASSERT(gs > 0 && gs * 4 <= 32768);
    CU_ASSERT(ws > 0 && ws * 4 <= 16384);
    free(glsl);
    free(wgsl);
  }
  CU_ASSERT_EQUAL(found, 1);
  ssm_bundle_close(b);
}

/* falcon-mamba-7b's x_proj (k of 8,192, 288 columns) with bf16 weights at a
 * chunk of 512 and x made ready first: gemm_coop split over k in 12 parts
 * of 704 (the portable grid's 144 workgroups over its 12 tiles of 128 x
 * 128), its parts' sums in the scratch after the prep kernel's rows and
 * factors, the counters at the scratch's end through the Vulkan memory
 * model; out_proj to a hidden of 128 (4 tiles) is split too, in_proj (a k
 * of 128) is not. A device with cooperative matrices runs it
 * (bench/sweep.py); this one compiles it. */
static void test_gemm_coop_split(void) {
  static const char cfg[] =
      "{\"model_type\": \"mamba\", \"vocab_size\": 256, \"hidden_size\": 128, "
      "\"intermediate_size\": 8192, \"state_size\": 16, \"time_step_rank\": 256, "
      "\"conv_kernel\": 4, \"num_hidden_layers\": 1, \"layer_norm_epsilon\": 1e-5, "
      "\"use_bias\": false, \"use_conv_bias\": true, \"tie_word_embeddings\": true}";
  ssm_compile_opts o = {.prefill_tokens = 512, .dtype = SSM_BF16};
  ssm_bundle *b = compile_config("models/mamba1.yaml", "mamba1_7b.json", cfg, &o);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  int split = 0, whole = 0;
  for (int i = 0; i < m->prefill.nsteps; i++) {
    const ssm_mf_step *st = &m->prefill.steps[i];
    const ssm_mf_kernel *k = &m->kernels[st->kernel];
    if (!k->glsl_coop.size) continue;
    char *src = strndup(ssm_bundle_blob(b, k->glsl_coop), (size_t)k->glsl_coop.size);
    if (strstr(k->params, "M=512 K=8192 N=288 ")) {
      split++;
      CU_ASSERT_PTR_NOT_NULL(strstr(src, "#define SPLIT 12\n"));
      CU_ASSERT_PTR_NOT_NULL(strstr(src, "#define KP 704u\n"));
      CU_ASSERT_PTR_NOT_NULL(strstr(src, "#pragma use_vulkan_memory_model"));
      CU_ASSERT_PTR_NOT_NULL(strstr(src, " - 1024u + id;"));
      CU_ASSERT(k->spirv_prep.size > 0);
      CU_ASSERT(st->groups[0] * st->groups[1] * st->groups[2] >= 12 * 12);
      uint64_t pb = (512 * 8192 / 2 + 512 + 3) / 4 * 4;
      CU_ASSERT_EQUAL(k->scratch_bytes, pb * 4 + 12 * 512 * 384 * 4);
    } else if (strstr(k->params, "M=512 K=128 N=16384 ")) {
      whole++;
      CU_ASSERT_PTR_NOT_NULL(strstr(src, "#define SPLIT 1\n"));
    } else if (strstr(k->params, "M=512 K=8192 N=128 ")) {
      split++;
      CU_ASSERT_PTR_NULL(strstr(src, "#define SPLIT 1\n"));
      CU_ASSERT_PTR_NOT_NULL(strstr(src, "#define SPLIT "));
    }
    free(src);
  }
  CU_ASSERT_EQUAL(split, 2);
  CU_ASSERT_EQUAL(whole, 1);
  ssm_bundle_close(b);
}

/* A decode gemv of one group of columns reads its epilogue's operands
 * first (gemv.glsl.in, TOUCH) through epilogue_touch, which writes nothing:
 * the in_proj's decode conv has a cvt helper that reads the state and
 * leaves it, beside the cv helper that shifts it. A group that is its
 * matmul alone (the lm_head after its norm) has nothing to read. The same
 * bits either way: test_golden's decode fixtures run these kernels. */
/* The batched decode program: each slot, fed its own prompt by the
 * one-sequence programs and copied in, draws the greedy tokens that the
 * decode program draws for that sequence alone, whatever the others do;
 * copying a slot back gives the state decode reaches (every state: the KV
 * caches of a model with attention too). Sequence i has a prompt of i + 2
 * tokens, so the slots are at different positions; the first one joins its
 * slot after BATCH_LATE steps of the others, during which its slot holds
 * no sequence. The ids of step j, slot i go to got[j * B + i] (-3 for the
 * first slot's steps before it joins). Every slot runs more batched steps
 * than the fixtures' conv_kernel of 4 (the late one BATCH_STEPS -
 * BATCH_LATE), so that its last steps read conv states (and scan states)
 * that the batched program alone wrote. */
enum { BATCH_STEPS = 8, BATCH_MAX = 24, BATCH_LATE = 3 };
static void batch_matches_alone(ssm_backend *be, int32_t *got) {
  int B = be->slots, late = 0;
  int32_t first[BATCH_MAX], want[BATCH_MAX][BATCH_STEPS];
  int64_t pos[BATCH_MAX];
  float greedy[SSM_SAMPLER_STATE_LEN], *alone[64] = {0};
  ssm_snapshot *at_late = NULL;
  CU_ASSERT_FATAL(be->nstates <= 64 && B >= 2);
  SSM_ASSERT_OK(ssm_sampler_state(0, 0, 1, 0, 0, greedy));
  /* alone: prompt i (i + 2 tokens), then BATCH_STEPS greedy steps; the
   * backend keeps the state of the last, B - 1 */
  for (int i = 0; i < B; i++) {
    int32_t prompt[BATCH_MAX + 2];
    for (int k = 0; k < i + 2; k++) prompt[k] = (int32_t)((i * 37 + k * 11 + 5) % be->vocab);
    SSM_ASSERT_OK(ssm_backend_reset(be));
    for (int k = 0; k < i + 2; k++) SSM_ASSERT_OK(ssm_backend_run(be, &prompt[k], 1, NULL));
    if (i == late) SSM_ASSERT_OK(ssm_backend_snapshot(be, &at_late)); /* it joins later */
    else SSM_ASSERT_OK(be->ops->slot_copy(be, i, 1)); /* slot i starts where sequence i is */
    SSM_ASSERT_OK(be->ops->slot_sampler(be, i, greedy));
    first[i] = (int32_t)((i * 13 + 1) % be->vocab);
    pos[i] = i + 2;
    int n = 0;
    SSM_ASSERT_OK(ssm_backend_generate(be, first[i], BATCH_STEPS, 0, want[i], &n, NULL, NULL));
    CU_ASSERT_EQUAL(n, BATCH_STEPS);
  }
  for (int k = 0; k < be->nstates; k++) {
    alone[k] = malloc((size_t)ssm_type_numel(&be->states[k].type) * 4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(alone[k]);
    SSM_ASSERT_OK(be->ops->state_read(be, k, alone[k]));
  }
  /* the others together, the first slot holding no sequence; then it joins */
  int ran = 0;
  int64_t at[BATCH_MAX];
  memcpy(at, pos, sizeof at);
  at[late] = -1;
  SSM_ASSERT_OK(be->ops->batch_generate(be, first, at, BATCH_LATE, got, &ran));
  CU_ASSERT_EQUAL(ran, BATCH_LATE);
  SSM_ASSERT_OK(ssm_backend_restore(be, at_late));
  SSM_ASSERT_OK(be->ops->slot_copy(be, late, 1));
  int32_t next[BATCH_MAX];
  for (int i = 0; i < B; i++) {
    next[i] = i == late ? first[i] : got[(BATCH_LATE - 1) * B + i];
    at[i] = i == late ? pos[i] : pos[i] + BATCH_LATE;
    for (int j = 0; j < BATCH_LATE && i == late; j++) got[j * B + i] = -3;
  }
  int32_t *rest = got + BATCH_LATE * B;
  SSM_ASSERT_OK(be->ops->batch_generate(be, next, at, BATCH_STEPS - BATCH_LATE, rest, &ran));
  CU_ASSERT_EQUAL(ran, BATCH_STEPS - BATCH_LATE);
  for (int i = 0; i < B; i++)
    for (int j = 0; j < BATCH_STEPS; j++)
      if (i != late) CU_ASSERT_EQUAL(got[j * B + i], want[i][j]);
  for (int j = 0; j + BATCH_LATE < BATCH_STEPS; j++) CU_ASSERT_EQUAL(rest[j * B + late], want[late][j]);
  /* slot B-1 back: every state generate left for its sequence */
  SSM_ASSERT_OK(ssm_backend_reset(be));
  SSM_ASSERT_OK(be->ops->slot_copy(be, B - 1, 0));
  double worst = 0;
  for (int k = 0; k < be->nstates; k++) {
    size_t n = (size_t)ssm_type_numel(&be->states[k].type);
    float *back = malloc(n * 4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(back);
    SSM_ASSERT_OK(be->ops->state_read(be, k, back));
    double w = 0;
    for (size_t e = 0; e < n; e++) w = fmax(w, fabs((double)alone[k][e] - back[e]));
    if (w >= 1e-5) fprintf(stderr, "\n  slot %d's %s: %g from decode's", B - 1, be->states[k].name, w);
    worst = fmax(worst, w);
    free(back);
    free(alone[k]);
  }
  CU_ASSERT(worst < 1e-5);
  int32_t bad[BATCH_MAX];
  memcpy(bad, first, sizeof bad);
  bad[B - 1] = (int32_t)be->vocab;
  int32_t none[BATCH_MAX];
  SSM_ASSERT_ERR(be->ops->batch_generate(be, bad, pos, 1, none, &ran), "is out of range");
  CU_ASSERT_EQUAL(ran, 0);
  ssm_backend_snapshot_free(be, at_late);
}

/* The matmuls of a batched program with 16-bit weights get a variant on
 * cooperative matrices (batch_matches_decode runs them where the device
 * has them), from 6 rows on, tiles of 16 rows enough for the slots, within
 * the 48 KiB of shared memory device.c asks of such a device. Up to 16 rows
 * (the portable gemv) gemv_coop.glsl.in, for matmuls of at least
 * KNOB_COOP_FEW_MIN_COLS columns; beyond (the portable gemm)
 * gemm_few.glsl.in where k is a multiple of 16, with a prep kernel on the
 * rows padded to tiles and a grid of its own that covers every column.
 * f32 weights have none (their products take x at f32). */
static long define_of(const char *src, const char *name) {
  char key[32];
  snprintf(key, sizeof key, "#define %s ", name);
  const char *at = strstr(src, key);
  return at ? atol(at + strlen(key)) : -1;
}

static void test_batch_coop_variant(void) {
  const struct {
    int slots;
    ssm_dtype dtype;
    const char *mt; /* the variant's tiles of rows, or NULL: no variant */
  } cases[] = {{12, SSM_BF16, "#define MT 1\n"}, {24, SSM_BF16, "#define MT 2\n"},
               {24, SSM_Q8_0, "#define MT 2\n"}, {3, SSM_BF16, NULL}, {24, SSM_F32, NULL}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    ssm_model *model = NULL;
    ssm_bundle *b = NULL;
    SSM_ASSERT_OK(ssm_model_open(ssm_test_path("tests/data/mamba1_tiny"), NULL, &model));
    ssm_compile_opts o = {.prefill_tokens = 4, .slots = cases[c].slots, .dtype = cases[c].dtype};
    if (model) SSM_ASSERT_OK(ssm_compile(model, &o, &b));
    ssm_model_close(model);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    const ssm_manifest *m = ssm_bundle_manifest(b);
    int matmuls = 0, variants = 0, want = 0, gemv = cases[c].slots <= 16;
    for (int i = 0; i < m->batch.nsteps; i++) {
      const ssm_mf_kernel *k = &m->kernels[m->batch.steps[i].kernel];
      if (!strstr(k->params, "matmul")) continue;
      matmuls++;
      const char *kk = strstr(k->params, " K="), *n = strstr(k->params, " N=");
      CU_ASSERT_PTR_NOT_NULL_FATAL(kk);
      CU_ASSERT_PTR_NOT_NULL_FATAL(n);
      int wanted = cases[c].mt && (gemv ? atol(n + 3) >= KNOB_COOP_FEW_MIN_COLS : atol(kk + 3) % 16 == 0);
      want += wanted;
      CU_ASSERT_EQUAL(k->glsl_coop.size != 0, wanted);
      if (!k->glsl_coop.size) continue;
      variants++;
      char *src = strndup(ssm_bundle_blob(b, k->glsl_coop), (size_t)k->glsl_coop.size);
      CU_ASSERT_PTR_NOT_NULL_FATAL(src);
      CU_ASSERT_PTR_NOT_NULL(cases[c].mt ? strstr(src, cases[c].mt) : NULL);
      if (gemv) {
        CU_ASSERT_EQUAL(strncmp(src, "// ssmc kernel: template gemv_coop.glsl.in, ", 44), 0);
        long words = shared_floats(src, "shared uvec4 pool[") * 4; /* uvec4s, in 4-byte words */
        CU_ASSERT(words > 0 && words * 4 <= 48 * 1024);
        CU_ASSERT_EQUAL(k->spirv_prep.size, 0);
      } else {
        CU_ASSERT_EQUAL(strncmp(src, "// ssmc kernel: template gemm_few.glsl.in, ", 43), 0);
        long fn = define_of(src, "FN"), cg = define_of(src, "CG"), ks = define_of(src, "KS");
        CU_ASSERT(fn > 0 && cg > 0 && ks > 0 && cg * ks * fn * (16 * 3 * 16 + 256 * 4) <= 48 * 1024);
        /* its own grid covers the columns; the prep kernel takes a row of 16 MT each */
        CU_ASSERT(k->spirv_prep.size > 0);
        CU_ASSERT(k->coop_groups[0] > 0 && k->coop_groups[1] > 0 && k->coop_groups[2] == 1);
        CU_ASSERT((long)k->coop_groups[0] * k->coop_groups[1] * cg * fn * 16 >= atol(n + 3));
        CU_ASSERT_EQUAL((long)k->prep_groups[0], define_of(src, "MT") * 16);
      }
      free(src);
    }
    CU_ASSERT(matmuls >= 4); /* in_proj, x_proj, dt_proj, out_proj, lm_head */
    CU_ASSERT_EQUAL(variants, want);
    /* 12 rows: in_proj (256 columns), lm_head; 24: all but dt_proj (a k of 4) */
    CU_ASSERT(cases[c].mt ? want >= (gemv ? 2 : 4) : want == 0);
    ssm_bundle_close(b);
  }
}

/* On Vulkan (B = 3: the gemv of few rows, 6 and 12: in tiles of rows, 24:
 * the gemm), with weights in `dtype`, and on the CPU interpreter, which
 * draw the same tokens. */
static void batch_matches_decode(const char *fixture, int B, ssm_dtype dtype) {
  char dir[512];
  snprintf(dir, sizeof dir, "tests/data/%s", fixture);
  ssm_model *m = NULL;
  ssm_bundle *b = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path(dir), NULL, &m));
  ssm_compile_opts o = {.prefill_tokens = 4, .slots = B, .dtype = dtype};
  if (m) SSM_ASSERT_OK(ssm_compile(m, &o, &b));
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  CU_ASSERT_EQUAL(ssm_bundle_manifest(b)->batch.tokens, B);
  ssm_backend *vk = open_vk(b, fixture), *cpu = NULL;
  CU_ASSERT_EQUAL(vk->slots, B);
  int32_t on_vk[BATCH_STEPS * BATCH_MAX], on_cpu[BATCH_STEPS * BATCH_MAX];
  batch_matches_alone(vk, on_vk);
  ssm_backend_close(vk);
  SSM_ASSERT_OK(ssm_cpu_backend_open(m, ssm_test_path(dir), 4, dtype, NULL, &cpu));
  CU_ASSERT_PTR_NOT_NULL_FATAL(cpu);
  cpu->slots = B;
  batch_matches_alone(cpu, on_cpu);
  CU_ASSERT_EQUAL(memcmp(on_vk, on_cpu, sizeof(int32_t) * (size_t)(BATCH_STEPS * B)), 0);
  ssm_backend_close(cpu);
}

/* Whether the default Vulkan device has cooperative matrices. */
static int coop_device(void) {
  ssm_vk *vk = NULL;
  SSM_ASSERT_OK(ssm_vk_open(-1, 0, &vk));
  int coop = vk && (ssm_vk_features(vk) & SSM_VK_COOPMAT);
  if (vk) ssm_vk_close(vk);
  return coop;
}

static void test_batch_matches_decode(void) {
  batch_matches_decode("mamba1_tiny", 3, SSM_F32);
  batch_matches_decode("mamba1_tiny", 6, SSM_F32);
  batch_matches_decode("mamba1_tiny", 12, SSM_F32);
  batch_matches_decode("mamba1_tiny", 24, SSM_F32);
  batch_matches_decode("mamba1_tiny", 12, SSM_BF16); /* the rmsnorm prologue, x rounded */
  /* two tiles of rows, the gemm's: gemm_few.glsl.in where the device has
   * cooperative matrices. (The portable gemm, at these rows in bf16, leaves
   * the last slot's states about 1e-4 from decode's: not yet held here.) */
  if (coop_device()) batch_matches_decode("mamba1_tiny", 24, SSM_BF16);
  batch_matches_decode("mamba1_tiny", 24, SSM_Q8_0); /* the same, quantized: every device */
  batch_matches_decode("mamba1_tiny", 12, SSM_Q8_0);  /* quantized weights: dot_w8 */
  batch_matches_decode("mamba1_tiny", 3, SSM_Q4_0);
  batch_matches_decode("mamba2_tiny", 5, SSM_F32);
  batch_matches_decode("falcon_tiny", 12, SSM_F32);
  /* attention: a position and a KV cache a slot (rope, GQA; Mamba-2 with
   * attention; RecurrentGemma's window of 5 positions, which the slots pass) */
  batch_matches_decode("jamba_tiny", 3, SSM_F32);
  batch_matches_decode("bamba_tiny", 3, SSM_F32);
  batch_matches_decode("recurrent_gemma_tiny", 3, SSM_F32);
  /* the delta rule a slot: Gated DeltaNet with a decay a head (Qwen3-Next,
   * whose decode fuses its conv into the kernel), with negative eigenvalues
   * (OLMo Hybrid) */
  batch_matches_decode("qwen3_next_tiny", 3, SSM_F32);
  batch_matches_decode("olmo_hybrid_tiny", 3, SSM_F32);
}

/* What a batched program refuses: more slots than
 * SSM_MAX_SLOTS, and a manifest whose batch program or slots lie (its
 * positions too: a model with attention has one a slot). */
static void test_batch_refusals(void) {
  ssm_bundle *good = NULL, *bad = NULL;
  {
    ssm_model *m = NULL;
    SSM_ASSERT_OK(ssm_model_open(ssm_test_path("tests/data/mamba1_tiny"), NULL, &m));
    ssm_compile_opts o = {.prefill_tokens = 4, .slots = 3};
    if (m) SSM_ASSERT_OK(ssm_compile(m, &o, &good));
    ssm_model_close(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(good);
  }
  static const char *const lies[][3] = {
      {"\"name\":\"slots.l0.conv_state\",\"dtype\":\"f32\",\"shape\":[3,3,128]",
       "\"name\":\"slots.l0.conv_state\",\"dtype\":\"f32\",\"shape\":[1,9,128]",
       "state[4] ('slots.l0.conv_state') is not a state of one sequence with a first dim of the "
       "batch program's 3 slots"},
      {"\"name\":\"slots.l0.conv_state\"", "\"name\":\"slots.l9.conv_state\"",
       "state[4] ('slots.l9.conv_state') is not a state of one sequence"},
      {"\"name\":\"slots.l0.conv_state\"", "\"name\":\"l9.conv_state\"",
       "lies outside a state buffer"},
      {"\"usage\":\"slots\"", "\"usage\":\"slot\"",
       "has a usage other than state, activations, weights, output or slots"},
      {"\"batch\":{\"tokens\":3", "\"batch\":{\"tokens\":2", "programs.batch.inputs has a tokens input whose size is not tokens i32s"},
      {"\"sampler\":{\"next\":[1,256,12],\"state\":[4,0,96]}",
       "\"sampler\":{\"next\":[1,256,12],\"state\":[4,0,32]}", "programs.batch.sampler has regions of the wrong size"},
  };
  for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
    SSM_ASSERT_ERR(open_tampered(good, lies[i][0], lies[i][1], &bad), lies[i][2]);
    CU_ASSERT_PTR_NULL(bad);
  }
  ssm_bundle_close(good);

  ssm_model *m = NULL;
  ssm_compile_opts o = {.prefill_tokens = 4, .slots = 2};
  /* attention: the batch program's pos holds a position a slot */
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path("tests/data/jamba_tiny"), NULL, &m));
  if (m) SSM_ASSERT_OK(ssm_compile(m, &o, &good));
  CU_ASSERT_PTR_NOT_NULL_FATAL(good);
  const ssm_region *pos = &ssm_bundle_manifest(good)->batch.pos;
  CU_ASSERT_FATAL(ssm_bundle_manifest(good)->batch.has_pos && pos->bytes == 8);
  char from[96], to[96];
  snprintf(from, sizeof from, "\"pos\":[%d,%llu,8]", pos->buffer, (unsigned long long)pos->offset);
  snprintf(to, sizeof to, "\"pos\":[%d,%llu,4]", pos->buffer, (unsigned long long)pos->offset);
  SSM_ASSERT_ERR(open_tampered(good, from, to, &bad), "programs.batch.inputs has a pos input that is not one i32 a row");
  CU_ASSERT_PTR_NULL(bad);
  ssm_bundle_close(good);
  o.slots = SSM_MAX_SLOTS + 1;
  ssm_model_close(m);
  m = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path("tests/data/mamba1_tiny"), NULL, &m));
  ssm_bundle *b = NULL;
  if (m) SSM_ASSERT_ERR(ssm_compile(m, &o, &b), "--slots 257: expected 0 to 256");
  CU_ASSERT_PTR_NULL(b);
  ssm_model_close(m);
}

static void test_gemv_touches_epilogue(void) {
  ssm_bundle *b = compile("mamba1_tiny", 4);
  const ssm_manifest *m = ssm_bundle_manifest(b);
  int conv = 0, bare = 0;
  for (int i = 0; i < m->decode.nsteps; i++) {
    const ssm_mf_kernel *k = &m->kernels[m->decode.steps[i].kernel];
    if (strcmp(k->family, "gemv") || !strstr(k->params, "COLS=0")) continue;
    char *src = kernel_source(b, k, 0);
    if (strstr(k->params, "conv1d_causal")) {
      conv++;
      CU_ASSERT_PTR_NOT_NULL(strstr(src, "#if 1\n  if (lid < ROWS && n0 + lid < "));
      CU_ASSERT_PTR_NOT_NULL(strstr(src, "float epilogue_touch(float acc, uint i)"));
      const char *cvt = strstr(src, "float cvt"), *cv = strstr(src, "float cv");
      while (cv && !isdigit((unsigned char)cv[8])) cv = strstr(cv + 1, "float cv");
      CU_ASSERT_PTR_NOT_NULL_FATAL(cvt);
      CU_ASSERT_PTR_NOT_NULL_FATAL(cv);
      const char *end = strstr(cvt, "\n}\n");
      CU_ASSERT_PTR_NOT_NULL_FATAL(end);
      char *body = strndup(cvt, (size_t)(end - cvt));
      CU_ASSERT_PTR_NULL(strstr(body, "] ="));   /* nothing written */
      CU_ASSERT_PTR_NOT_NULL(strstr(body, "ld")); /* but the state and weights read */
      free(body);
      CU_ASSERT_PTR_NOT_NULL(strstr(cv, "] = o;")); /* the conv itself shifts the state */
    } else if (!strncmp(k->params, "rmsnorm+matmul ", 15)) {
      bare++;
      CU_ASSERT_PTR_NOT_NULL(strstr(src, "#if 0\n  if (lid < ROWS && n0 + lid < "));
      CU_ASSERT_PTR_NULL(strstr(src, "epilogue_touch(float"));
    }
    free(src);
  }
  CU_ASSERT_EQUAL(conv, 2); /* one a layer */
  CU_ASSERT_EQUAL(bare, 1); /* the lm_head */
  ssm_bundle_close(b);
}

int main(void) {
  CU_TestInfo tests[] = {{"shared_weights_and_state", test_shared_weights_and_state},
                         {"fusion_and_planning_targets", test_fusion_and_planning_targets},
                         {"matmul_family_by_rows", test_matmul_family_by_rows},
                         {"describe", test_describe},
                         {"kernel_sources_name_their_template", test_kernel_sources_name_their_template},
                         {"wgsl_slots_and_windows", test_wgsl_slots_and_windows},
                         {"save_and_reopen", test_save_and_reopen},
                         {"manifest_refuses_lies", test_manifest_refuses_lies},
                         {"backend_refuses_bad_input", test_backend_refuses_bad_input},
                         {"position_and_max_seq", test_position_and_max_seq},
                         {"doubling_chain_compiles", test_doubling_chain_compiles},
                         {"compile_time_linear", test_compile_time_linear},
                         {"prompt_without_logits", test_prompt_without_logits},
                         {"prefill_logits_apart", test_prefill_logits_apart},
                         {"partial_runs_ignore_stale_rows", test_partial_runs_ignore_stale_rows},
                         {"partial_runs", test_partial_runs},
                         {"default_chunk", test_default_chunk},
                         {"rows_that_mix_take_whole_chunks", test_rows_that_mix_take_whole_chunks},
                         {"profile", test_profile},
                         {"gemm_big_blocks", test_gemm_big_blocks},
                         {"gemm_split_k", test_gemm_split_k},
                         {"gemm_coop_loads", test_gemm_coop_loads},
                         {"gemm_coop_prep_quant", test_gemm_coop_prep_quant},
                         {"gemm_coop_prep", test_gemm_coop_prep},
                         {"gemm_coop_split", test_gemm_coop_split},
                         {"scan_caches_norms", test_scan_caches_norms},
                         {"scan_reads_ahead", test_scan_reads_ahead},
                         {"ssd_chosen", test_ssd_chosen},
                         {"delta_chunk_chosen", test_delta_chunk_chosen},
                         {"ssd_big_state", test_ssd_big_state},
                         {"gemv_touches_epilogue", test_gemv_touches_epilogue},
                         {"batch_coop_variant", test_batch_coop_variant},
                         {"batch_matches_decode", test_batch_matches_decode},
                         {"batch_refusals", test_batch_refusals},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("compile", tests);
}
