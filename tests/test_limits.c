/*
 * test_limits.c — long runs and the edges of what a model can do: thousands
 * of greedy decode steps on the CPU interpreter and on the Vulkan executor
 * (lavapipe when there is no GPU) do not grow the anonymous resident set; weights that
 * produce inf/NaN make `ssmc run` fail with "non-finite logit" instead of
 * sampling garbage, and in one slot of the batched program fail that slot
 * alone; a model whose buffers exceed the device is a clear error naming the
 * size, with nothing leaked.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "compile/compile.h"
#include "runtime/cpu/cpu.h"
#include "runtime/ssmc.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"
#include "testutil.h"

SSM_TEST_SMALL_ASAN_QUARANTINE

#define FIX "tests/data/mamba1_tiny"
#define WARMUP 200
#define MAX_GROWTH_KIB 2048 /* growth allowed after the warm-up */

static int32_t argmax(const float *row, int64_t n) {
  int32_t best = 0;
  for (int64_t j = 1; j < n; j++)
    if (row[j] > row[best]) best = (int32_t)j;
  return best;
}

static int all_finite(const float *row, int64_t n) {
  for (int64_t j = 0; j < n; j++)
    if (!isfinite(row[j])) return 0;
  return 1;
}

static void check_growth(const char *what, long before, long after, int steps) {
  fprintf(stderr, "\n  %s: RssAnon %ld KiB after %d warm-up steps, %ld KiB after %d steps\n", what,
          before, WARMUP, after, steps);
  CU_ASSERT(after - before < MAX_GROWTH_KIB);
}

static void test_cpu_long_run(void) {
  enum { STEPS = 3000 };
  ssm_model *m = NULL;
  ssm_graph *g = NULL;
  ssm_st *st = NULL;
  ssm_cpu *cpu = NULL;
  int64_t vocab = 0;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path(FIX), NULL, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  CU_ASSERT_FATAL(ssm_model_param(m, "vocab", &vocab) && vocab == 1000);
  SSM_ASSERT_OK(ssm_model_build(m, 1, &g));
  SSM_ASSERT_OK(ssm_st_open(ssm_test_path(FIX), &st));
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  SSM_ASSERT_OK(ssm_cpu_create(st, &cpu));
  CU_ASSERT_PTR_NOT_NULL_FATAL(cpu);
  float *logits = malloc(sizeof(float) * (size_t)vocab);
  int32_t tok = 1;
  long before = 0;
  int k = 0, ok = 1;
  for (; k < STEPS && ok; k++) {
    if (k == WARMUP) before = ssm_test_rss_anon_kib();
    ssm_status s = ssm_cpu_run(cpu, g, &tok, logits, (size_t)vocab);
    ok = !s && all_finite(logits, vocab);
    SSM_ASSERT_OK(s);
    tok = argmax(logits, vocab);
  }
  CU_ASSERT_EQUAL(k, STEPS);
  CU_ASSERT(ok);
  check_growth("cpu", before, ssm_test_rss_anon_kib(), k);
  free(logits);
  ssm_cpu_destroy(cpu);
  ssm_st_close(st);
  ssm_graph_destroy(g);
  ssm_model_close(m);
}

static void test_vulkan_long_run(void) {
  enum { STEPS = 2000 };
  ssm_model *m = NULL;
  ssm_bundle *bundle = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path(FIX), NULL, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  ssm_compile_opts co = {.prefill_tokens = 4};
  SSM_ASSERT_OK(ssm_compile(m, &co, &bundle));
  ssm_model_close(m);
  ssm_backend *rt = NULL;
  SSM_ASSERT_OK(ssm_vk_backend_open(bundle, ssm_test_path(FIX), NULL, &rt));
  CU_ASSERT_PTR_NOT_NULL_FATAL(rt);
  int64_t vocab = rt->vocab;
  float *logits = malloc(sizeof(float) * (size_t)vocab * 4);
  int32_t prompt[4] = {1, 2, 3, 4};
  SSM_ASSERT_OK(ssm_backend_run(rt, prompt, 4, logits));
  int32_t tok = argmax(logits + 3 * vocab, vocab);
  long before = 0;
  int k = 0, ok = 1;
  for (; k < STEPS && ok; k++) {
    if (k == WARMUP) before = ssm_test_rss_anon_kib();
    ssm_status s = ssm_backend_run(rt, &tok, 1, logits);
    ok = !s && all_finite(logits, vocab);
    SSM_ASSERT_OK(s);
    tok = argmax(logits, vocab);
  }
  CU_ASSERT_EQUAL(k, STEPS);
  CU_ASSERT(ok);
  check_growth(rt->device, before, ssm_test_rss_anon_kib(), k);
  free(logits);
  ssm_backend_close(rt);
}

/* Copies file `name` of fixture directory `fixture` into `dir`; returns its
 * bytes (malloc'd). */
static char *copy_fixture(const char *fixture, const char *name, const char *dir, size_t *out_n) {
  char src[512], dst[1100], *data = NULL;
  snprintf(src, sizeof src, "%s/%s", fixture, name);
  SSM_ASSERT_OK(ssm_file_read(ssm_test_path(src), 0, &data, out_n));
  if (!data) return NULL;
  snprintf(dst, sizeof dst, "%s/%s", dir, name);
  FILE *f = fopen(dst, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(data, 1, *out_n, f), *out_n);
  fclose(f);
  return data;
}

/* Makes `dir` (under the temp dir) a copy of model directory `fixture`
 * whose F32 tensor `tensor` has a NaN at element `at`; returns its path. */
static const char *poisoned_copy(const char *fixture, const char *name, const char *tensor,
                                 size_t at) {
  static char dir[512];
  char path[600];
  snprintf(dir, sizeof dir, "%s/%s", ssm_test_tmpdir(), name);
  mkdir(dir, 0755);
  size_t n;
  free(copy_fixture(fixture, "config.json", dir, &n));
  char *st = copy_fixture(fixture, "model.safetensors", dir, &n);
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | (unsigned char)st[i];
  cJSON *h = cJSON_ParseWithLength(st + 8, (size_t)hlen);
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, tensor);
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
  CU_ASSERT_FATAL(cJSON_IsArray(offs));
  size_t from = (size_t)cJSON_GetArrayItem(offs, 0)->valuedouble;
  CU_ASSERT_FATAL(from + 4 * at + 4 <= (size_t)cJSON_GetArrayItem(offs, 1)->valuedouble);
  cJSON_Delete(h);
  float nan = NAN;
  memcpy(st + 8 + hlen + from + 4 * at, &nan, 4);
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(st, 1, n, f), n);
  fclose(f);
  free(st);
  return dir;
}

/* Runs `ssmc ARGS`; asserts it exits 1 with `needle` in its output. */
static void expect_ssmc_fails(const char *args, const char *needle) {
  char cmd[2048], *out;
  snprintf(cmd, sizeof cmd, "cd %s && %s %s", ssm_test_source_dir(), ssm_test_ssmc(), args);
  int rc = ssm_test_sh(cmd, &out);
  if (rc != 1 || !strstr(out, needle))
    fprintf(stderr, "\n  ssmc %s\n  -> exit %d, output:\n%s\n  (want exit 1 and '%s')\n", args, rc,
            out, needle);
  CU_ASSERT_EQUAL(rc, 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, needle));
  free(out);
}

/* mamba1_tiny with one NaN in the final norm's weight: every logit is NaN,
 * and both backends refuse to sample from them. */
static void test_nonfinite_logits(void) {
  const char *dir = poisoned_copy(FIX, "nan_model", "backbone.norm_f.weight", 5);
  char args[1400];
  for (int vk = 0; vk < 2; vk++) {
    snprintf(args, sizeof args, "run %s --weights %s --tokens 1,2,3 -n 4 --backend %s", dir, dir,
             vk ? "vulkan" : "cpu");
    expect_ssmc_fails(args, "non-finite logit");
  }
}

/* A NaN in one row of the (untied) embedding, reached only when that token
 * is fed back: mamba1_untied after token 5 generates 655, 29, 684, so the
 * logits of position 3, computed from row 684, are the first NaN ones. The
 * run stops there, on Vulkan (the ids fed back on the device, or read back
 * with --greedy) and on the CPU. */
static void test_nonfinite_by_feedback(void) {
  char cmd[1400], *out;
  snprintf(cmd, sizeof cmd, "cd %s && %s run tests/data/mamba1_untied --backend vulkan --tokens 5 -n 6 -q",
           ssm_test_source_dir(), ssm_test_ssmc());
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &out), 0);
  CU_ASSERT_EQUAL(strncmp(out, "655,29,684,", 11), 0);
  free(out);
  const char *dir = poisoned_copy("tests/data/mamba1_untied", "nan_row", "backbone.embeddings.weight",
                                  684 * 48 + 7);
  static const struct { const char *opts, *want; } runs[] = {
      {"--backend vulkan", "non-finite logit at position 3: the model or its weights produce inf/NaN"},
      {"--backend vulkan --greedy", "non-finite logit nan at position 3 (vocab index 0)"},
      {"--backend cpu", "non-finite logit at position 3: the model or its weights produce inf/NaN"},
      {"--backend cpu --greedy", "non-finite logit nan at position 3 (vocab index 0)"},
  };
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    snprintf(cmd, sizeof cmd, "run %s --tokens 5 -n 6 -q %s", dir, runs[i].opts);
    expect_ssmc_fails(cmd, runs[i].want);
  }
}

/* The same NaN row reached by one slot of the batched program: the step
 * that draws from it fails naming the slot and its position, the other slot
 * goes on drawing what it draws alone (the failing step's id included, and
 * its position counts the step), and the failing slot steps again once a
 * clean state joins it. On both backends. */
static void test_nonfinite_in_a_slot(void) {
  const char *dir = poisoned_copy("tests/data/mamba1_untied", "nan_slot", "backbone.embeddings.weight",
                                  684 * 48 + 7);
  for (int vk = 0; vk < 2; vk++) {
    ssmc_options o;
    ssmc_options_init(&o);
    o.backend = vk ? SSMC_BACKEND_VULKAN : SSMC_BACKEND_CPU;
    o.chunk = 4;
    o.slots = 2;
    ssmc_session *s = NULL, *alone = NULL, *other = NULL;
    SSM_ASSERT_OK(ssmc_session_open(dir, &o, &s));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    SSM_ASSERT_OK(ssmc_session_fork(s, &alone));
    SSM_ASSERT_OK(ssmc_session_fork(s, &other));
    ssmc_generate_options g;
    ssmc_generate_options_init(&g);
    int32_t seven = 7, want[6];
    size_t n = 0;
    SSM_ASSERT_OK(ssmc_session_generate(alone, (int32_t[]){7, 8}, 2, 6, &g, want, &n));
    CU_ASSERT_EQUAL_FATAL(n, 6);
    for (int j = 0; j < 6; j++) CU_ASSERT_NOT_EQUAL(want[j], 684); /* it never reads the NaN row */
    SSM_ASSERT_OK(ssmc_session_join_slot(s, 0, &g)); /* slot 0: token 5, from an empty state */
    SSM_ASSERT_OK(ssmc_session_feed(other, &seven, 1, NULL, NULL));
    SSM_ASSERT_OK(ssmc_session_join_slot(other, 1, &g));
    int32_t first[2] = {5, 8}, ids[2];
    for (int j = 0; j < 6; j++) {
      ssmc_status st = ssmc_session_step_slots(s, first, 1, ids);
      if (j == 3) { /* 5 -> 655, 29, 684: the logits of position 3 read row 684 */
        CU_ASSERT_EQUAL(ids[0], -1);
        SSM_ASSERT_ERR(st, "slot 0: non-finite logit at position 3");
        SSM_ASSERT_OK(ssmc_session_reset(s));
        SSM_ASSERT_OK(ssmc_session_join_slot(s, 0, &g));
        ids[0] = 5;
      } else {
        SSM_ASSERT_OK(st);
        int32_t drawn = j < 3 ? ((int32_t[]){655, 29, 684})[j] : ((int32_t[]){655, 29})[j - 4];
        CU_ASSERT_EQUAL(ids[0], drawn); /* after step 3: from the clean state */
      }
      CU_ASSERT_EQUAL(ids[1], want[j]);
      memcpy(first, ids, sizeof first);
    }
    SSM_ASSERT_OK(ssmc_session_take_slot(other, 1));
    CU_ASSERT_EQUAL(ssmc_session_position(other), ssmc_session_position(alone));
    ssmc_session_close(other);
    ssmc_session_close(alone);
    ssmc_session_close(s);
  }
}

/* A model whose weights outgrow every device (hidden 2^25: a 128 GiB
 * embedding): ssm_vk_backend_open fails while creating buffers, before it reads any
 * weights, with the size in the message; nothing leaks (LSan builds). The
 * CPU backend refuses it before it allocates, naming the memory it needs. */
static void test_too_large_for_device(void) {
  char dir[512], cfg[600], bundle[600];
  snprintf(dir, sizeof dir, "%s/huge_model", ssm_test_tmpdir());
  mkdir(dir, 0755);
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  static const char text[] =
      "{\"model_type\": \"mamba\", \"hidden_size\": 33554432, \"intermediate_size\": 128,\n"
      " \"state_size\": 16, \"time_step_rank\": 4, \"conv_kernel\": 4,\n"
      " \"num_hidden_layers\": 1, \"vocab_size\": 1000, \"layer_norm_epsilon\": 1e-5,\n"
      " \"tie_word_embeddings\": true}\n";
  FILE *f = fopen(cfg, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs(text, f);
  fclose(f);
  snprintf(bundle, sizeof bundle, "%s/huge.ssmb", dir);
  ssm_model *m = NULL;
  SSM_ASSERT_OK(ssm_model_open(dir, NULL, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  ssm_compile_opts co = {.prefill_tokens = 2};
  ssm_bundle *b = NULL;
  SSM_ASSERT_OK(ssm_compile(m, &co, &b));
  ssm_model_close(m);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  SSM_ASSERT_OK(ssm_bundle_save(b, bundle));
  /* a checkpoint with every weight at its full size: a sparse file, whose
   * header is right and whose data is never read */
  const ssm_manifest *mf = ssm_bundle_manifest(b);
  ssm_sb h = {0};
  uint64_t at = 0;
  ssm_sb_printf(&h, "{");
  for (int i = 0; i < mf->nweights; i++) {
    const ssm_mf_tensor *w = &mf->weights[i];
    ssm_sb_printf(&h, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[", i ? "," : "", w->name);
    for (int d = 0; d < w->type.rank; d++)
      ssm_sb_printf(&h, "%s%lld", d ? "," : "", (long long)w->type.dims[d]);
    ssm_sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                  (unsigned long long)(at + w->region.bytes));
    at += w->region.bytes;
  }
  ssm_sb_printf(&h, "}");
  char st_path[700];
  snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
  f = fopen(st_path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  uint64_t hl = h.n;
  for (int i = 0; i < 8; i++) fputc((int)(hl >> (8 * i)) & 0xff, f);
  fwrite(h.s, 1, h.n, f);
  fclose(f);
  ssm_sb_free(&h);
  CU_ASSERT_EQUAL_FATAL(truncate(st_path, (off_t)(8 + hl + at)), 0);
  ssm_backend *rt = NULL;
  ssm_status s = ssm_vk_backend_open(b, dir, NULL, &rt);
  CU_ASSERT_PTR_NULL(rt);
  CU_ASSERT_EQUAL(ssm_status_code(s), SSM_ERR_DEVICE);
  const char *msg = ssm_status_message(s);
  if (!strstr(msg, "GiB device-local): VK_ERROR_OUT_OF_DEVICE_MEMORY"))
    fprintf(stderr, "\n  message: %s\n", msg);
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "vkAllocateMemory("));
  CU_ASSERT_PTR_NOT_NULL(strstr(msg, "GiB device-local): VK_ERROR_OUT_OF_DEVICE_MEMORY"));
  ssm_status_free(s);
  char args[1400];
  snprintf(args, sizeof args, "run %s --weights %s --tokens 1 -n 1", bundle, dir);
  expect_ssmc_fails(args, "GiB device-local): VK_ERROR_OUT_OF_DEVICE_MEMORY");
  /* the same weights on the CPU: refused before anything is allocated */
  snprintf(args, sizeof args, "run %s --weights %s --tokens 1 -n 1 --backend cpu", dir, dir);
  expect_ssmc_fails(args, "needs");
  unlink(st_path);
}

int main(void) {
  CU_TestInfo tests[] = {{"cpu_long_run", test_cpu_long_run},
                         {"vulkan_long_run", test_vulkan_long_run},
                         {"nonfinite_logits", test_nonfinite_logits},
                         {"nonfinite_by_feedback", test_nonfinite_by_feedback},
                         {"nonfinite_in_a_slot", test_nonfinite_in_a_slot},
                         {"too_large_for_device", test_too_large_for_device},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("limits", tests);
}
