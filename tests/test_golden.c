/*
 * test_golden.c — whole models against Hugging Face transformers.
 *
 * Each fixture under tests/data/<name>/ is a small random model saved by
 * transformers (tools/gen_golden.py) with the logits transformers computed
 * for prompt + generated tokens and its greedy generation. We run
 * `ssmc run DIR --weights DIR --tokens PROMPT -n N --dump-logits F` and
 * require max |Δlogit| / max |logit| <= 1e-4 at every position and the same
 * greedy tokens; prefill in chunks and token-by-token decode must agree.
 * Both backends: the CPU interpreter (`--backend cpu`) and Vulkan, through
 * `ssmc compile DIR -o X.ssmb --chunk C` then `ssmc run X.ssmb` (lavapipe
 * when there is no GPU). The Jamba fixtures also carry attention's KV cache
 * and position across runs.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

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

/* Runs `ssmc run MODEL` on fixture `name` with `extra` options; checks the
 * generated ids printed on the last line; returns the dumped logits
 * (rows*vocab) or NULL. */
static float *run_ssmc(const char *name, const char *model, const golden *g, const char *extra) {
  static int seq;
  char cmd[4096], dump[512], *out;
  const char *dir = ssm_test_path("tests/data");
  snprintf(dump, sizeof dump, "%s/%s.%d.logits", ssm_test_tmpdir(), name, seq++);
  snprintf(cmd, sizeof cmd, "%s run %s --weights %s/%s --tokens %s -n %d --greedy %s --dump-logits %s",
           ssm_test_ssmc(), model, dir, name, join(g->prompt, g->np), g->ngen, extra, dump);
  int rc = ssm_test_sh(cmd, &out);
  if (rc) fprintf(stderr, "\n  %s\n  -> exit %d: %s\n", cmd, rc, out);
  CU_ASSERT_EQUAL(rc, 0);
  size_t len = strlen(out);
  while (len && out[len - 1] == '\n') out[--len] = 0;
  const char *last = strrchr(out, '\n');
  last = last ? last + 1 : out;
  const char *want = join(g->gen, g->ngen);
  if (strcmp(last, want)) fprintf(stderr, "\n  %s: generated %s, transformers %s\n", name, last, want);
  CU_ASSERT_STRING_EQUAL(last, want);
  free(out);
  char *data;
  size_t n;
  ssm_status s = ssm_file_read(dump, 0, &data, &n);
  if (s) {
    ssm_status_free(s);
    CU_FAIL("no logits dump");
    return NULL;
  }
  CU_ASSERT_EQUAL(n, (size_t)g->rows * (size_t)g->vocab * 4);
  if (n != (size_t)g->rows * (size_t)g->vocab * 4) {
    free(data);
    return NULL;
  }
  return (float *)data;
}

/* `ssmc compile` of fixture `name` with prefill chunk `chunk` and `extra`
 * options; returns the bundle path (static buffer) or NULL. */
static const char *compile_fixture(const char *name, int chunk, const char *extra) {
  static char bundle[512];
  char cmd[2048], *out;
  snprintf(bundle, sizeof bundle, "%s/%s.c%d%s.ssmb", ssm_test_tmpdir(), name, chunk,
           *extra ? ".x" : "");
  snprintf(cmd, sizeof cmd, "%s compile %s/%s -o %s --chunk %d %s", ssm_test_ssmc(),
           ssm_test_path("tests/data"), name, bundle, chunk, extra);
  int rc = ssm_test_sh(cmd, &out);
  if (rc) fprintf(stderr, "\n  %s\n  -> exit %d: %s\n", cmd, rc, out);
  CU_ASSERT_EQUAL(rc, 0);
  free(out);
  return rc ? NULL : bundle;
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
  char dir[512];
  snprintf(dir, sizeof dir, "%s/%s", ssm_test_path("tests/data"), name);
  check_pair(name, &g, run_ssmc(name, dir, &g, "--backend cpu"),
             run_ssmc(name, dir, &g, "--backend cpu --chunk 1"), "cpu");
  /* Vulkan: prefill programs of 4 tokens (prompts are 7-11 tokens, so both
   * full chunks and the token-by-token remainder run), and of 1 token. */
  const char *b4 = compile_fixture(name, 4, "");
  float *chunked = b4 ? run_ssmc(name, b4, &g, "--backend vulkan --validate") : NULL;
  const char *b1 = compile_fixture(name, 1, "");
  float *stepwise = b1 ? run_ssmc(name, b1, &g, "--backend vulkan") : NULL;
  /* fusion off: every op its own kernel; the same logits as fused */
  const char *bu = compile_fixture(name, 4, "--no-fuse");
  float *unfused = bu ? run_ssmc(name, bu, &g, "--backend vulkan") : NULL;
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
                         CU_TEST_INFO_NULL};
  return ssm_test_main("golden", tests);
}
