/*
 * test_golden.c — whole models against Hugging Face transformers, through
 * the library's session API (runtime/ssmc.h).
 *
 * Each fixture under tests/data/<name>/ is a small random model saved by
 * transformers (tools/gen_golden.py) with the logits transformers computed
 * for prompt + generated tokens and its greedy generation. A session opened
 * on the fixture generates greedily with the logits of every position
 * handed back, and we require max |Δlogit| / max |logit| <= 1e-4 at every
 * position and the same greedy tokens; prefill in chunks and token-by-token
 * decode must agree. Both backends: the CPU interpreter and Vulkan (the
 * model compiled in memory with prefill chunks of 4 and 1, under the
 * validation layer once; lavapipe when there is no GPU), and Vulkan with
 * fusion off. The Jamba fixtures also carry attention's KV cache and
 * position across runs.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "runtime/ssmc.h"
#include "testutil.h"

static const char *const fixtures[] = {"mamba1_tiny",   "mamba1_untied",   "mamba1_f16_sharded",
                                       "falcon_tiny",   "falcon_bf16_untied",
                                       "mamba2_tiny",   "mamba2_groups",   "mamba2_bigstate",
                                       "jamba_tiny",    "jamba_gqa"};
#define NFIX (int)(sizeof fixtures / sizeof fixtures[0])

typedef struct {
  int np, ngen, rows, vocab;
  int prompt[64], gen[64];
  float *logits; /* rows * vocab */
  float max_abs;
} golden;

static int load_ints(const cJSON *arr, int *out, int cap) {
  int n = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, arr) {
    if (n < cap) out[n] = it->valueint;
    n++;
  }
  return n <= cap ? n : -1;
}

static int load_golden(const char *name, golden *g) {
  char rel[256], *text;
  size_t n;
  snprintf(rel, sizeof rel, "tests/data/%s/golden.json", name);
  ssm_status s = ssm_file_read(ssm_test_path(rel), 0, &text, &n);
  if (s) {
    fprintf(stderr, "%s\n", ssm_status_message(s));
    ssm_status_free(s);
    return 0;
  }
  cJSON *j = cJSON_Parse(text);
  free(text);
  if (!j) return 0;
  g->np = load_ints(cJSON_GetObjectItem(j, "prompt"), g->prompt, 64);
  g->ngen = load_ints(cJSON_GetObjectItem(j, "generated"), g->gen, 64);
  g->rows = cJSON_GetObjectItem(j, "rows")->valueint;
  g->vocab = cJSON_GetObjectItem(j, "vocab")->valueint;
  cJSON_Delete(j);
  snprintf(rel, sizeof rel, "tests/data/%s/logits.f32", name);
  if ((s = ssm_file_read(ssm_test_path(rel), 0, &text, &n))) {
    ssm_status_free(s);
    return 0;
  }
  if (g->np < 1 || g->ngen < 1 || n != (size_t)g->rows * (size_t)g->vocab * 4 ||
      g->rows != g->np + g->ngen - 1) {
    free(text);
    return 0;
  }
  g->logits = (float *)text;
  g->max_abs = 0;
  for (size_t k = 0; k < (size_t)g->rows * (size_t)g->vocab; k++)
    g->max_abs = fmaxf(g->max_abs, fabsf(g->logits[k]));
  return 1;
}

static char *join(const int *v, int n) {
  static char buf[1024];
  size_t k = 0;
  for (int i = 0; i < n; i++) k += (size_t)snprintf(buf + k, sizeof buf - k, i ? ",%d" : "%d", v[i]);
  return buf;
}

typedef struct {
  float *rows;
  size_t n, cap; /* floats */
} rows;

static int keep_row(const float *logits, int64_t vocab, int64_t position, void *user) {
  rows *r = user;
  if (r->n + (size_t)vocab > r->cap) r->rows = realloc(r->rows, sizeof(float) * (r->cap = 2 * (r->n + (size_t)vocab)));
  memcpy(r->rows + r->n, logits, sizeof(float) * (size_t)vocab);
  r->n += (size_t)vocab;
  return 0;
}

/* Opens fixture `name` through the library with `o` and generates greedily
 * on the host (its logits every step); checks the ids against
 * transformers'; returns the logits of every position (rows*vocab) or NULL. */
static float *run_fixture(const char *name, const golden *g, const ssmc_options *o) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/%s", ssm_test_path("tests/data"), name);
  ssmc_session *s = NULL;
  SSM_ASSERT_OK(ssmc_session_open(dir, o, &s));
  if (!s) return NULL;
  rows r = {0};
  ssmc_generate_options gen;
  ssmc_generate_options_init(&gen);
  gen.host_greedy = 1;
  gen.on_logits = keep_row;
  gen.user = &r;
  int32_t prompt[64], ids[64];
  size_t n = 0;
  for (int i = 0; i < g->np; i++) prompt[i] = g->prompt[i];
  SSM_ASSERT_OK(ssmc_session_generate(s, prompt, (size_t)g->np, g->ngen, &gen, ids, &n));
  CU_ASSERT_EQUAL(ssmc_session_position(s), g->np + g->ngen - 1);
  ssmc_session_close(s);
  int same = n == (size_t)g->ngen;
  for (size_t i = 0; same && i < n; i++) same = ids[i] == g->gen[i];
  if (!same) fprintf(stderr, "\n  %s: generated %s, transformers %s\n", name,
                     join((const int *)ids, (int)n), join(g->gen, g->ngen));
  CU_ASSERT(same);
  CU_ASSERT_EQUAL(r.n, (size_t)g->rows * (size_t)g->vocab);
  if (r.n != (size_t)g->rows * (size_t)g->vocab) {
    free(r.rows);
    return NULL;
  }
  return r.rows;
}

static ssmc_options opts(ssmc_backend backend, int chunk) {
  ssmc_options o;
  ssmc_options_init(&o);
  o.backend = backend;
  o.chunk = chunk;
  return o;
}

/* max over rows of max |a-b| / max |ref| */
static double rel_err(const float *a, const float *ref, const golden *g, int *worst_row) {
  double worst = 0;
  for (int r = 0; r < g->rows; r++)
    for (int v = 0; v < g->vocab; v++) {
      double d = fabs((double)a[r * g->vocab + v] - ref[r * g->vocab + v]) / g->max_abs;
      if (!(d <= worst)) {
        worst = d;
        *worst_row = r;
      }
    }
  return worst;
}

/* Checks one way of running a fixture: a prompt in chunks (prefill) and the
 * same fed token by token must both match transformers, and each other. */
static void check_pair(const char *name, const golden *g, float *chunked, float *stepwise,
                       const char *how) {
  int row = -1;
  if (chunked) {
    double e = rel_err(chunked, g->logits, g, &row);
    fprintf(stderr, "\n  %s %s: max rel err vs transformers %.3g (row %d)", name, how, e, row);
    CU_ASSERT(e <= 1e-4);
  }
  if (stepwise) CU_ASSERT(rel_err(stepwise, g->logits, g, &row) <= 1e-4);
  if (chunked && stepwise) { /* same math, grouped differently in time */
    double e = rel_err(chunked, stepwise, g, &row);
    if (e > 1e-6) fprintf(stderr, "\n  %s %s: prefill vs decode differ by %.3g", name, how, e);
    CU_ASSERT(e <= 1e-6);
  }
  free(chunked);
  free(stepwise);
}

static void check_fixture(const char *name) {
  golden g = {0};
  if (!load_golden(name, &g)) {
    fprintf(stderr, "\n  fixture %s missing or malformed\n", name);
    CU_FAIL("fixture missing");
    return;
  }
  CU_ASSERT(g.max_abs > 0.5f); /* the fixture must not be a near-zero model */
  ssmc_options cpu = opts(SSMC_BACKEND_CPU, 0), cpu1 = opts(SSMC_BACKEND_CPU, 1);
  check_pair(name, &g, run_fixture(name, &g, &cpu), run_fixture(name, &g, &cpu1), "cpu");
  /* Vulkan: prefill programs of 4 tokens (prompts are 7-11 tokens, so both
   * full chunks and the token-by-token remainder run), and of 1 token. */
  ssmc_options vk4 = opts(SSMC_BACKEND_VULKAN, 4), vk1 = opts(SSMC_BACKEND_VULKAN, 1);
  vk4.validation = 1;
  float *chunked = run_fixture(name, &g, &vk4);
  float *stepwise = run_fixture(name, &g, &vk1);
  /* fusion off: every op its own kernel; the same logits as fused */
  ssmc_options unf = opts(SSMC_BACKEND_VULKAN, 4);
  unf.no_fuse = 1;
  float *unfused = run_fixture(name, &g, &unf);
  if (unfused && chunked) {
    int row;
    double e = rel_err(unfused, chunked, &g, &row);
    fprintf(stderr, "\n  %s vulkan: fused vs unfused %.3g", name, e);
    CU_ASSERT(e <= 1e-5);
    CU_ASSERT(rel_err(unfused, g.logits, &g, &row) <= 1e-4);
  }
  free(unfused);
  check_pair(name, &g, chunked, stepwise, "vulkan");
  free(g.logits);
}

/* ---- 16-bit weights ------------------------------------------------------- */

/* Feeds prompt + generated[:-1] through a session opened with `o` and returns
 * the logits of every position (rows*vocab), or NULL. `dtype` is what the
 * session must say it keeps its weights in. */
static float *feed_rows(const char *name, const golden *g, const ssmc_options *o,
                        const char *dtype) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/%s", ssm_test_path("tests/data"), name);
  ssmc_session *s = NULL;
  SSM_ASSERT_OK(ssmc_session_open(dir, o, &s));
  if (!s) return NULL;
  CU_ASSERT_STRING_EQUAL(ssmc_session_dtype(s), dtype);
  int32_t ids[128];
  for (int i = 0; i < g->np; i++) ids[i] = g->prompt[i];
  for (int i = 0; i + 1 < g->ngen; i++) ids[g->np + i] = g->gen[i];
  rows r = {0};
  SSM_ASSERT_OK(ssmc_session_feed(s, ids, (size_t)g->rows, keep_row, &r));
  ssmc_session_close(s);
  CU_ASSERT_EQUAL(r.n, (size_t)g->rows * (size_t)g->vocab);
  if (r.n == (size_t)g->rows * (size_t)g->vocab) return r.rows;
  free(r.rows);
  return NULL;
}

/* A 16-bit checkpoint is kept in its own dtype by default (half the bytes
 * of f32), and gives the f32 bundle's logits up to the order of the f32
 * sums: the widened values are the same numbers. */
static void test_checkpoint_dtype(void) {
  static const struct { const char *fixture, *dtype; } cases[] = {
      {"falcon_bf16_untied", "bf16"}, {"mamba1_f16_sharded", "f16"}, {"mamba1_tiny", "f32"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    golden g = {0};
    CU_ASSERT_FATAL(load_golden(cases[i].fixture, &g));
    for (int be = 0; be < 2; be++) {
      ssmc_options o = opts(be ? SSMC_BACKEND_CPU : SSMC_BACKEND_VULKAN, 4);
      float *native = feed_rows(cases[i].fixture, &g, &o, cases[i].dtype);
      o.dtype = SSMC_DTYPE_F32;
      float *wide = feed_rows(cases[i].fixture, &g, &o, "f32");
      int row;
      if (native && wide) {
        double e = rel_err(native, wide, &g, &row);
        fprintf(stderr, "\n  %s %s: %s vs f32 %.3g", cases[i].fixture, be ? "cpu" : "vulkan",
                cases[i].dtype, e);
        CU_ASSERT(e <= 1e-5);
        CU_ASSERT(rel_err(native, g.logits, &g, &row) <= 1e-4);
      }
      free(native);
      free(wide);
    }
    free(g.logits);
  }
}

static void test_mamba1_tiny(void) { check_fixture(fixtures[0]); }
static void test_mamba1_untied(void) { check_fixture(fixtures[1]); }
static void test_mamba1_f16_sharded(void) { check_fixture(fixtures[2]); }
static void test_falcon_tiny(void) { check_fixture(fixtures[3]); }
static void test_falcon_bf16_untied(void) { check_fixture(fixtures[4]); }
static void test_mamba2_tiny(void) { check_fixture(fixtures[5]); }
static void test_mamba2_groups(void) { check_fixture(fixtures[6]); }
static void test_mamba2_bigstate(void) { check_fixture(fixtures[7]); }
static void test_jamba_tiny(void) { check_fixture(fixtures[8]); }
static void test_jamba_gqa(void) { check_fixture(fixtures[9]); }

int main(void) {
  CU_TestInfo tests[] = {{"mamba1_tiny", test_mamba1_tiny},
                         {"mamba1_untied", test_mamba1_untied},
                         {"mamba1_f16_sharded", test_mamba1_f16_sharded},
                         {"falcon_tiny", test_falcon_tiny},
                         {"falcon_bf16_untied", test_falcon_bf16_untied},
                         {"mamba2_tiny", test_mamba2_tiny},
                         {"mamba2_groups", test_mamba2_groups},
                         {"mamba2_bigstate", test_mamba2_bigstate},
                         {"jamba_tiny", test_jamba_tiny},
                         {"jamba_gqa", test_jamba_gqa},
                         {"checkpoint_dtype", test_checkpoint_dtype},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("golden", tests);
}
