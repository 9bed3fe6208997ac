/*
 * test_pymamba.c — the model that ships (models/pymamba, trained by
 * tools/train_tiny.py): ssmc's mean per-token log-likelihood of a held-out
 * Python file equals the one transformers computed (heldout.json) within
 * 1e-3, on both backends; our tokenizer gives the tokenizers library's ids
 * for that file; and --prompt generates text.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"
#include "testutil.h"

#define DIR "models/pymamba"

static int32_t *ref_ids;
static size_t nref;
static double ref_ll;

static int load_reference(void) {
  if (ref_ids) return 1;
  char *text;
  size_t n;
  ssm_status s = ssm_file_read(ssm_test_path(DIR "/heldout.json"), 0, &text, &n);
  if (s) {
    ssm_status_free(s);
    return 0;
  }
  cJSON *j = cJSON_Parse(text);
  free(text);
  const cJSON *ids = cJSON_GetObjectItem(j, "heldout_file_ids");
  ref_ll = cJSON_GetObjectItem(j, "heldout_file_mean_loglik")->valuedouble;
  nref = (size_t)cJSON_GetArraySize(ids);
  ref_ids = malloc(nref * sizeof *ref_ids);
  for (size_t i = 0; i < nref; i++) ref_ids[i] = cJSON_GetArrayItem(ids, (int)i)->valueint;
  cJSON_Delete(j);
  return nref > 100;
}

static void test_tokenizer_matches_library(void) {
  CU_ASSERT_FATAL(load_reference());
  ssm_tok *tok = NULL;
  SSM_ASSERT_OK(ssm_tok_open(ssm_test_path(DIR "/tokenizer.json"), &tok));
  char *text;
  size_t n;
  SSM_ASSERT_OK(ssm_file_read(ssm_test_path(DIR "/heldout.py"), 0, &text, &n));
  int32_t *ids = NULL;
  size_t m = 0;
  SSM_ASSERT_OK(ssm_tok_encode(tok, text, n, &ids, &m));
  CU_ASSERT_EQUAL(m, nref);
  CU_ASSERT(m == nref && !memcmp(ids, ref_ids, m * sizeof *ids));
  free(ids);
  free(text);
  ssm_tok_close(tok);
}

/* Mean log p(token i+1 | tokens ..i) from ssmc's dumped logits. */
static void check_loglik(const char *backend) {
  CU_ASSERT_FATAL(load_reference());
  size_t cap = nref * 8 + 64;
  char *list = malloc(cap), *cmd = malloc(cap + 1024);
  size_t k = 0;
  for (size_t i = 0; i < nref; i++) k += (size_t)snprintf(list + k, cap - k, i ? ",%d" : "%d", ref_ids[i]);
  char dump[512];
  snprintf(dump, sizeof dump, "%s/pymamba-%s.logits", ssm_test_tmpdir(), backend);
  snprintf(cmd, cap + 1024, "cd %s && %s run " DIR " --weights " DIR " --tokens %s -n 1 "
           "--backend %s --dump-logits %s", ssm_test_source_dir(), ssm_test_ssmc(), list, backend, dump);
  char *out;
  int rc = ssm_test_sh(cmd, &out);
  if (rc) fprintf(stderr, "\n  exit %d: %s\n", rc, out);
  CU_ASSERT_EQUAL(rc, 0);
  free(out);
  char *data;
  size_t n;
  ssm_status s = ssm_file_read(dump, 0, &data, &n);
  CU_ASSERT_PTR_NULL(s);
  ssm_status_free(s);
  const size_t V = 4096;
  if (!s && n == nref * V * 4) {
    const float *lg = (const float *)data;
    double sum = 0;
    for (size_t i = 0; i + 1 < nref; i++) {
      const float *row = lg + i * V;
      double mx = row[0], z = 0;
      for (size_t v = 1; v < V; v++) mx = fmax(mx, row[v]);
      for (size_t v = 0; v < V; v++) z += exp(row[v] - mx);
      sum += row[ref_ids[i + 1]] - mx - log(z);
    }
    double ll = sum / (double)(nref - 1);
    fprintf(stderr, "\n  %s: mean log-likelihood %.6f, transformers %.6f (|diff| %.2g)", backend, ll,
            ref_ll, fabs(ll - ref_ll));
    CU_ASSERT(fabs(ll - ref_ll) <= 1e-3);
  } else {
    CU_FAIL("logits dump has the wrong size");
  }
  free(data);
  free(list);
  free(cmd);
}

static void test_loglik_cpu(void) { check_loglik("cpu"); }
static void test_loglik_vulkan(void) { check_loglik("vulkan"); }

/* `ssmc perplexity --json` of the held-out file on Vulkan, weights in
 * `dtype`; fills *nll (the mean negative log-likelihood). */
static double perplexity(const char *dtype, double *nll) {
  char cmd[2048], *out;
  snprintf(cmd, sizeof cmd, "cd %s && %s perplexity " DIR " --backend vulkan --file " DIR "/heldout.py --dtype %s "
           "--json -q 2>&1", ssm_test_source_dir(), ssm_test_ssmc(), dtype);
  int rc = ssm_test_sh(cmd, &out);
  CU_ASSERT_EQUAL(rc, 0);
  cJSON *j = rc ? NULL : cJSON_Parse(out);
  if (!j) fprintf(stderr, "\n  exit %d: %s\n", rc, out);
  free(out);
  double p = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "perplexity"));
  *nll = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "nll"));
  CU_ASSERT_EQUAL(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "tokens")), (double)nref);
  CU_ASSERT_STRING_EQUAL(cJSON_GetStringValue(cJSON_GetObjectItem(j, "dtype")), dtype);
  cJSON_Delete(j);
  return p;
}

/* ssmc perplexity of the held-out file: with f32 weights its mean
 * negative log-likelihood is transformers' (heldout.json) within 1e-3, and
 * the perplexity is exp of it; a q8_0 bundle (docs/quantization.md) is
 * within +0.5% of the f32 perplexity, a q4_0 one within +6%. */
static void test_perplexity(void) {
  CU_ASSERT_FATAL(load_reference());
  double nll[3];
  double f32 = perplexity("f32", &nll[0]), q8 = perplexity("q8_0", &nll[1]),
         q4 = perplexity("q4_0", &nll[2]);
  fprintf(stderr, "\n  perplexity f32 %.4f (nll %.6f, transformers %.6f), q8_0 %.4f (%+.2f%%), "
          "q4_0 %.4f (%+.2f%%)", f32, nll[0], -ref_ll, q8, 100 * (q8 / f32 - 1), q4,
          100 * (q4 / f32 - 1));
  CU_ASSERT(fabs(nll[0] + ref_ll) <= 1e-3);
  CU_ASSERT(fabs(f32 - exp(nll[0])) <= 1e-4 * f32);
  CU_ASSERT(q8 <= f32 * 1.005);
  CU_ASSERT(q4 <= f32 * 1.06);
}

static void test_prompt_generates_text(void) {
  char cmd[2048], *out;
  snprintf(cmd, sizeof cmd, "cd %s && %s run " DIR " --weights " DIR
           " --prompt 'def fibonacci(n):' -n 24", ssm_test_source_dir(), ssm_test_ssmc());
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &out), 0);
  CU_ASSERT_EQUAL(strncmp(out, "def fibonacci(n):", 17), 0);
  CU_ASSERT(strlen(out) > 40); /* it went on */
  free(out);
  /* the model's weights in a directory without its tokenizer.json */
  snprintf(cmd, sizeof cmd, "mkdir -p %s/notok && cd %s && cp " DIR "/config.json "
           DIR "/model.safetensors %s/notok/ && %s run " DIR " --weights %s/notok "
           "--prompt hi -n 2 --backend cpu", ssm_test_tmpdir(), ssm_test_source_dir(),
           ssm_test_tmpdir(), ssm_test_ssmc(), ssm_test_tmpdir());
  CU_ASSERT_NOT_EQUAL(ssm_test_sh(cmd, &out), 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "--prompt needs a tokenizer"));
  free(out);
}

int main(void) {
  CU_TestInfo tests[] = {{"tokenizer_matches_library", test_tokenizer_matches_library},
                         {"loglik_cpu", test_loglik_cpu},
                         {"loglik_vulkan", test_loglik_vulkan},
                         {"perplexity", test_perplexity},
                         {"prompt_generates_text", test_prompt_generates_text},
                         CU_TEST_INFO_NULL};
  int rc = ssm_test_main("pymamba", tests);
  free(ref_ids);
  return rc;
}
