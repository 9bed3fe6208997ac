/*
 * test_example_variant.c — the made-up variant of docs/adding-a-variant.md
 * (models/examples/rglru.yaml, an RG-LRU-style gated recurrence written in
 * YAML only) compiles, and its GPU result equals the CPU interpreter's
 * (there is no transformers model for a made-up variant, so the reference
 * is the interpreter), with chunked prefill equal to token-by-token decode.
 */
#include <math.h>
#include <string.h>

#include "testutil.h"

#define YAML "models/examples/rglru.yaml"
#define W "models/examples/rglru_tiny"
#define V 300
#define PROMPT "3,141,59,26,53,58,97,93,23"
#define N 12
#define ROWS (9 + N - 1)

static float *run(const char *how, char *ids, size_t ids_size) {
  static int seq;
  char cmd[2048], dump[512], *out;
  snprintf(dump, sizeof dump, "%s/rg%d.logits", ssm_test_tmpdir(), seq++);
  snprintf(cmd, sizeof cmd, "cd %s && %s %s --weights " W " --tokens " PROMPT " -n %d --dump-logits %s -q",
           ssm_test_source_dir(), ssm_test_ssmc(), how, N, dump);
  int rc = ssm_test_sh(cmd, &out);
  if (rc) fprintf(stderr, "\n  %s -> %d: %s\n", cmd, rc, out);
  CU_ASSERT_EQUAL(rc, 0);
  size_t len = strlen(out);
  while (len && out[len - 1] == '\n') out[--len] = 0;
  const char *last = strrchr(out, '\n');
  snprintf(ids, ids_size, "%s", last ? last + 1 : out);
  free(out);
  char *data;
  size_t n;
  ssm_status s = ssm_file_read(dump, 0, &data, &n);
  CU_ASSERT_PTR_NULL(s);
  ssm_status_free(s);
  CU_ASSERT_EQUAL(n, (size_t)ROWS * V * 4);
  if (n != (size_t)ROWS * V * 4) {
    free(data);
    return NULL;
  }
  return (float *)data;
}

static double rel(const float *a, const float *b) {
  double d = 0, m = 0;
  for (int i = 0; i < ROWS * V; i++) {
    d = fmax(d, fabs((double)a[i] - b[i]));
    m = fmax(m, fabs((double)b[i]));
  }
  return d / m;
}

static void test_gpu_equals_interpreter(void) {
  char cmd[2048], bundle[512], *out;
  snprintf(bundle, sizeof bundle, "%s/rglru.ssmb", ssm_test_tmpdir());
  snprintf(cmd, sizeof cmd, "cd %s && %s compile " YAML " --config " W "/config.json -o %s --chunk 4",
           ssm_test_source_dir(), ssm_test_ssmc(), bundle);
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, &out), 0);
  free(out);
  char how[1024], ids_cpu[256], ids_cpu1[256], ids_gpu[256];
  snprintf(how, sizeof how, "run " YAML " --config " W "/config.json --backend cpu");
  float *cpu = run(how, ids_cpu, sizeof ids_cpu);
  snprintf(how, sizeof how, "run " YAML " --config " W "/config.json --backend cpu --chunk 1");
  float *cpu1 = run(how, ids_cpu1, sizeof ids_cpu1);
  snprintf(how, sizeof how, "run %s --backend vulkan", bundle);
  float *gpu = run(how, ids_gpu, sizeof ids_gpu);
  if (cpu && cpu1 && gpu) {
    double e = rel(gpu, cpu), e1 = rel(cpu1, cpu);
    fprintf(stderr, "\n  rglru: gpu vs interpreter %.3g, token-by-token vs prefill %.3g", e, e1);
    CU_ASSERT(e <= 1e-5);
    CU_ASSERT(e1 <= 1e-6);
    double mx = 0;
    for (int i = 0; i < ROWS * V; i++) mx = fmax(mx, fabs(cpu[i]));
    CU_ASSERT(mx > 0.5); /* the model computes something */
  }
  CU_ASSERT_STRING_EQUAL(ids_gpu, ids_cpu);
  CU_ASSERT_STRING_EQUAL(ids_cpu1, ids_cpu);
  free(cpu);
  free(cpu1);
  free(gpu);
}

int main(void) {
  CU_TestInfo tests[] = {{"gpu_equals_interpreter", test_gpu_equals_interpreter}, CU_TEST_INFO_NULL};
  return ssm_test_main("example_variant", tests);
}
