/*
 * test_sampling.c — generating with the decode program's sampler, through
 * the session API: the drawn token stays on the device as the next step's
 * input.
 *
 * Greedy through that path (not host_greedy, which takes the logits to the
 * host) must give transformers' greedy tokens for every fixture, on both
 * backends: it proves the feedback copy and the sampler's argmax. Sampling
 * with a seed must be reproducible and depend on the seed; a repetition
 * penalty gives transformers' greedy tokens; logits asked for
 * while sampling come for every position; bad settings are refused.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "runtime/ssmc.h"
#include "testutil.h"

static const char *const fixtures[] = {"mamba1_tiny", "mamba1_untied", "mamba1_f16_sharded",
                                       "falcon_tiny", "falcon_bf16_untied"};
#define NFIX (int)(sizeof fixtures / sizeof fixtures[0])

typedef struct {
  char prompt[512], gen[512];
  int np, ngen;
} golden;

static void join(const cJSON *arr, char *out, size_t cap, int *count) {
  size_t k = 0;
  *count = 0;
  const cJSON *it;
  out[0] = 0;
  cJSON_ArrayForEach(it, arr) k += (size_t)snprintf(out + k, cap - k, (*count)++ ? ",%d" : "%d",
                                                    it->valueint);
}

static int load_golden(const char *name, golden *g) {
  char rel[256], *text;
  size_t n;
  snprintf(rel, sizeof rel, "tests/data/%s/golden.json", name);
  ssm_status s = ssm_file_read(ssm_test_path(rel), 0, &text, &n);
  if (s) {
    ssm_status_free(s);
    return 0;
  }
  cJSON *j = cJSON_Parse(text);
  free(text);
  if (!j) return 0;
  join(cJSON_GetObjectItem(j, "prompt"), g->prompt, sizeof g->prompt, &g->np);
  join(cJSON_GetObjectItem(j, "generated"), g->gen, sizeof g->gen, &g->ngen);
  cJSON_Delete(j);
  return g->np > 0 && g->ngen > 0;
}

static ssmc_session *open_fixture(const char *name, ssmc_backend backend) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/%s", ssm_test_path("tests/data"), name);
  ssmc_options o;
  ssmc_options_init(&o);
  o.backend = backend;
  o.chunk = 4;
  o.validation = backend == SSMC_BACKEND_VULKAN;
  ssmc_session *s = NULL;
  SSM_ASSERT_OK(ssmc_session_open(dir, &o, &s));
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  return s;
}

/* Generates with `g` from "1,2,3"-style `prompt` and writes the ids the
 * same way into `out`. */
static void generate(ssmc_session *s, const char *prompt, int n, const ssmc_generate_options *g,
                     char *out, size_t cap) {
  int32_t p[64], ids[256];
  size_t np = 0, got = 0;
  for (const char *c = prompt; *c; c++)
    if (c == prompt || c[-1] == ',') p[np++] = (int32_t)atoi(c);
  SSM_ASSERT_OK(ssmc_session_generate(s, p, np, n, g, ids, &got));
  CU_ASSERT_EQUAL(got, (size_t)n);
  size_t k = 0;
  out[0] = 0;
  for (size_t i = 0; i < got; i++) k += (size_t)snprintf(out + k, cap - k, i ? ",%d" : "%d", ids[i]);
}

/* Greedy through the device sampler (the drawn id fed back on the device)
 * gives transformers' greedy tokens on both backends. */
static void test_greedy_feedback_matches_transformers(void) {
  for (int f = 0; f < NFIX; f++) {
    golden g;
    CU_ASSERT_FATAL(load_golden(fixtures[f], &g));
    char gpu[4096], cpu[4096];
    for (int be = 0; be < 2; be++) {
      ssmc_session *s = open_fixture(fixtures[f], be ? SSMC_BACKEND_CPU : SSMC_BACKEND_VULKAN);
      generate(s, g.prompt, g.ngen, NULL, be ? cpu : gpu, sizeof gpu);
      ssmc_session_close(s);
    }
    fprintf(stderr, "\n  %s: vulkan %s, cpu %s, transformers %s", fixtures[f], gpu, cpu, g.gen);
    CU_ASSERT_STRING_EQUAL(gpu, g.gen);
    CU_ASSERT_STRING_EQUAL(cpu, g.gen);
  }
}

static void test_seeded_sampling(void) {
  const char *prompt = "852,328,421,145,37,285,697,882";
  ssmc_generate_options g;
  ssmc_generate_options_init(&g);
  g.temperature = 0.8f;
  g.top_k = 40;
  g.top_p = 0.9f;
  g.seed = 7;
  char a[4096], a2[4096], c[4096], cpu[4096], greedy[4096];
  ssmc_session *s = open_fixture("mamba1_tiny", SSMC_BACKEND_VULKAN);
  generate(s, prompt, 40, &g, a, sizeof a);
  SSM_ASSERT_OK(ssmc_session_reset(s));
  generate(s, prompt, 40, &g, a2, sizeof a2);
  SSM_ASSERT_OK(ssmc_session_reset(s));
  g.seed = 8;
  generate(s, prompt, 40, &g, c, sizeof c);
  SSM_ASSERT_OK(ssmc_session_reset(s));
  generate(s, prompt, 40, NULL, greedy, sizeof greedy);
  ssmc_session_close(s);
  g.seed = 7;
  s = open_fixture("mamba1_tiny", SSMC_BACKEND_CPU);
  generate(s, prompt, 40, &g, cpu, sizeof cpu);
  ssmc_session_close(s);
  fprintf(stderr, "\n  seed 7: %s\n  seed 7: %s\n  seed 8: %s\n  cpu 7:  %s%s", a, a2, c, cpu,
          strcmp(a, cpu) ? " (differs from vulkan: a near-tie in f32)" : " (= vulkan)");
  CU_ASSERT_STRING_EQUAL(a, a2);  /* the same seed draws the same tokens after a reset */
  CU_ASSERT_STRING_NOT_EQUAL(a, c);
  CU_ASSERT_STRING_NOT_EQUAL(a, greedy); /* sampling is not greedy decoding in disguise */
}

/* generate() after a reset, into a 4096-byte `out` */
static void afresh(ssmc_session *s, const char *prompt, int n, const ssmc_generate_options *g,
                   char *out) {
  SSM_ASSERT_OK(ssmc_session_reset(s));
  generate(s, prompt, n, g, out, 4096);
}

/* min_p keeps the tokens at least min_p times as likely as the likeliest:
 * at 1, the likeliest alone, however hot the temperature (greedy's text);
 * lower, it narrows what a hot sampler draws from. A repetition penalty of
 * 1 draws what none draws, and 1.5 draws otherwise. On both backends. */
static void test_min_p(void) {
  const char *prompt = "852,328,421,145,37,285,697,882";
  for (int be = 0; be < 2; be++) {
    ssmc_session *s = open_fixture("mamba1_tiny", be ? SSMC_BACKEND_CPU : SSMC_BACKEND_VULKAN);
    ssmc_generate_options g;
    ssmc_generate_options_init(&g);
    char greedy[4096], one[4096], hot[4096], narrowed[4096], pen_one[4096], pen[4096];
    generate(s, prompt, 30, NULL, greedy, sizeof greedy);
    g.temperature = 3;
    g.seed = 11;
    afresh(s, prompt, 30, &g, hot);
    g.repeat_penalty = 1; /* off: the same draws (the first 12 of them) */
    afresh(s, prompt, 12, &g, pen_one);
    g.repeat_penalty = 1.5f;
    afresh(s, prompt, 12, &g, pen);
    size_t n12 = strlen(pen_one);
    CU_ASSERT(!strncmp(pen_one, hot, n12) && hot[n12] == ',');
    CU_ASSERT(strncmp(pen, hot, strlen(pen)) != 0);
    g.repeat_penalty = 0;
    g.min_p = 1;
    afresh(s, prompt, 30, &g, one);
    g.min_p = 0.5f;
    afresh(s, prompt, 30, &g, narrowed);
    fprintf(stderr, "\n  %s: greedy %s\n  min_p 1: %s\n  hot: %s\n  min_p 0.5: %s",
            be ? "cpu" : "vulkan", greedy, one, hot, narrowed);
    CU_ASSERT_STRING_EQUAL(one, greedy);
    CU_ASSERT_STRING_NOT_EQUAL(hot, greedy);
    CU_ASSERT_STRING_NOT_EQUAL(narrowed, hot);
    ssmc_session_close(s);
  }
}

/* transformers' greedy tokens under a repetition penalty
 * (tools/gen_penalty_golden.py: penalty.json): on the CPU through its
 * sampler and the host's argmax, in one call and in two (the second going
 * on from the first's last id), and on Vulkan for one model (its sampler is
 * the same for every model). */
static void test_repeat_penalty(void) {
  static const char *const fix[] = {"mamba1_tiny", "mamba2_tiny", "jamba_tiny"};
  int runs = 0;
  for (int f = 0; f < 3; f++) {
    char rel[256], *text;
    size_t len;
    snprintf(rel, sizeof rel, "tests/data/%s/penalty.json", fix[f]);
    SSM_ASSERT_OK(ssm_file_read(ssm_test_path(rel), 0, &text, &len));
    cJSON *j = cJSON_Parse(text);
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    char prompt[512], want[512];
    int np, ngen;
    join(cJSON_GetObjectItem(j, "prompt"), prompt, sizeof prompt, &np);
    CU_ASSERT(np > 0 && cJSON_GetArraySize(cJSON_GetObjectItem(j, "runs")) >= 1);
    for (int be = f ? 1 : 0; be < 2; be++) { /* Vulkan: one model (the sampler is the same) */
      ssmc_session *s = open_fixture(fix[f], be ? SSMC_BACKEND_CPU : SSMC_BACKEND_VULKAN);
      const cJSON *run;
      cJSON_ArrayForEach(run, cJSON_GetObjectItem(j, "runs")) {
        join(cJSON_GetObjectItem(run, "generated"), want, sizeof want, &ngen);
        ssmc_generate_options g;
        ssmc_generate_options_init(&g);
        g.repeat_penalty = (float)cJSON_GetObjectItem(run, "repetition_penalty")->valuedouble;
        for (int host = 0; host < 1 + be; host++) {
          char got[4096];
          g.host_greedy = host;
          SSM_ASSERT_OK(ssmc_session_reset(s));
          generate(s, prompt, ngen, &g, got, sizeof got);
          fprintf(stderr, "\n  %s %s%s penalty %g: %s (transformers %s)", fix[f],
                  be ? "cpu" : "vulkan", host ? " host" : "", g.repeat_penalty, got, want);
          CU_ASSERT_STRING_EQUAL(got, want);
          runs++;
        }
        if (!be) continue;
        /* half, then the rest from the last id drawn: the set carries over */
        char first[4096], rest[4096], both[8192];
        g.host_greedy = 0;
        SSM_ASSERT_OK(ssmc_session_reset(s));
        generate(s, prompt, ngen / 2, &g, first, sizeof first);
        generate(s, strrchr(first, ',') + 1, ngen - ngen / 2, &g, rest, sizeof rest);
        snprintf(both, sizeof both, "%s,%s", first, rest);
        CU_ASSERT_STRING_EQUAL(both, want);
      }
      ssmc_session_close(s);
    }
    cJSON_Delete(j);
  }
  CU_ASSERT(runs >= 3 * 2); /* a near-tie may leave out runs, not all of a fixture's */
}

/* generation_config.json's eos_token_id list: each id ends generation (the
 * device sampler's and the host's); ssmc_options.eos replaces the list; its
 * sampling defaults come from ssmc_session_generate_defaults. */
static void test_generation_config(void) {
  char dir[600], *out;
  snprintf(dir, sizeof dir, "%s/genconfig", ssm_test_tmpdir());
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s && echo '{\"eos_token_id\": [999, 618], "
           "\"do_sample\": true, \"top_p\": 0.9, \"min_p\": 0.1, \"pad_token_id\": 0}' > "
           "%s/generation_config.json", dir, ssm_test_path("tests/data/mamba1_tiny"), dir, dir);
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, &out), 0);
  free(out);
  for (int eos_option = 0; eos_option < 2; eos_option++) {
    ssmc_options o;
    ssmc_options_init(&o);
    o.backend = SSMC_BACKEND_CPU;
    if (eos_option) o.eos = 598;
    ssmc_session *s = NULL;
    SSM_ASSERT_OK(ssmc_session_open(dir, &o, &s));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(ssmc_session_eos(s), eos_option ? 598 : 999);
    CU_ASSERT_EQUAL(ssmc_session_is_eos(s, 618), !eos_option);
    CU_ASSERT_EQUAL(ssmc_session_is_eos(s, 999), !eos_option);
    CU_ASSERT_EQUAL(ssmc_session_is_eos(s, 598), eos_option);
    /* greedy: 598 four times, then 618 (test_min_p's prompt) */
    int32_t p[] = {852, 328, 421, 145, 37, 285, 697, 882}, ids[16];
    for (int host = 0; host < 2; host++) {
      ssmc_generate_options g;
      ssmc_generate_options_init(&g);
      g.stop_at_eos = 1;
      g.host_greedy = host;
      size_t n = 0;
      SSM_ASSERT_OK(ssmc_session_reset(s));
      SSM_ASSERT_OK(ssmc_session_generate(s, p, 8, 12, &g, ids, &n));
      CU_ASSERT_EQUAL(n, eos_option ? 0u : 4u);
      CU_ASSERT(n < 1 || ids[0] == 598);
    }
    ssmc_generate_options g;
    const char *from;
    SSM_ASSERT_OK(ssmc_session_generate_defaults(s, &g, &from));
    CU_ASSERT(g.temperature == 1 && g.top_k == 50 && g.top_p == 0.9f && g.min_p == 0.1f &&
              g.repeat_penalty == 0);
    CU_ASSERT_STRING_EQUAL(from, "eos_token_id, do_sample, top_p, min_p");
    ssmc_session_close(s);
  }
}

static int count_row(const float *logits, int64_t vocab, int64_t position, void *user) {
  int *rows = user;
  CU_ASSERT_EQUAL(position, *rows); /* in order, one per position */
  (*rows)++;
  return 0;
}

/* Logits while sampling: a row per position (prompt, then every generated
 * token but the last), and the same ids as without them. */
static void test_sampling_logits(void) {
  ssmc_session *s = open_fixture("falcon_tiny", SSMC_BACKEND_VULKAN);
  ssmc_generate_options g;
  ssmc_generate_options_init(&g);
  g.temperature = 1.2f;
  g.seed = 3;
  char with[4096], without[4096];
  int rows = 0;
  generate(s, "5,17,9,1,2,3", 25, &g, without, sizeof without);
  SSM_ASSERT_OK(ssmc_session_reset(s));
  g.on_logits = count_row;
  g.user = &rows;
  generate(s, "5,17,9,1,2,3", 25, &g, with, sizeof with);
  CU_ASSERT_STRING_EQUAL(with, without);
  CU_ASSERT_EQUAL(rows, 6 + 25 - 1);
  ssmc_session_close(s);
}

/* Settings out of range are refused by the library (the CLI's usage errors
 * are test_cli's), and leave the session usable. */
static void test_bad_settings(void) {
  ssmc_session *s = open_fixture("mamba1_tiny", SSMC_BACKEND_CPU);
  ssmc_generate_options g;
  struct { float temperature; int top_k; float top_p; uint32_t seed; float min_p, penalty; } bad[] = {
      {-1, 0, 1, 0, 0, 0},          {0.5f, -3, 1, 0, 0, 0},      {0.5f, 0, 0, 0, 0, 0},
      {0.5f, 0, 1.5f, 0, 0, 0},     {0.5f, 0, 1, 1u << 24, 0, 0}, {0.5f, 0, 1, 0, -0.1f, 0},
      {0.5f, 0, 1, 0, 1.5f, 0},     {0.5f, 0, 1, 0, NAN, 0},     {0.5f, 0, 1, 0, 0, -1},
      {0, 0, 1, 0, 0, NAN},         {0, 0, 1, 0, 0, INFINITY}};
  int32_t p = 1, ids[2];
  size_t n;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ssmc_generate_options_init(&g);
    g.temperature = bad[i].temperature;
    g.top_k = bad[i].top_k;
    g.top_p = bad[i].top_p;
    g.seed = bad[i].seed;
    g.min_p = bad[i].min_p;
    g.repeat_penalty = bad[i].penalty;
    SSM_ASSERT_ERR(ssmc_session_generate(s, &p, 1, 2, &g, ids, &n), "sampler settings out of range");
  }
  CU_ASSERT_EQUAL(ssmc_session_position(s), 0);
  SSM_ASSERT_OK(ssmc_session_generate(s, &p, 1, 2, NULL, ids, &n));
  CU_ASSERT_EQUAL(n, 2);
  ssmc_session_close(s);
}

/* Stop strings (ssmc_stop_find, ssmc_stop_safe): the earliest of several,
 * one that began before the text searched last and ends in the new text;
 * what can be shown holds back exactly the tail that may begin one. */
static void test_stop_strings(void) {
  const char *const stops[] = {"<|im_end|>", "\n\n", "end"};
  const char *t = "a\nb<|im_end|>c\n\nd";
  size_t n = strlen(t);
  CU_ASSERT_EQUAL(ssmc_stop_find(t, n, 0, stops, 3), 3);
  CU_ASSERT_EQUAL(ssmc_stop_find(t, n, 0, stops + 1, 1), 14);
  CU_ASSERT_EQUAL(ssmc_stop_find(t, n, 0, stops + 1, 2), 8); /* "end" in "<|im_end|>" */
  CU_ASSERT_EQUAL(ssmc_stop_find(t, n, 8, stops, 1), 3);  /* began before offset 8 */
  CU_ASSERT_EQUAL(ssmc_stop_find(t, n, 13, stops, 1), n); /* ended before 13: searched */
  CU_ASSERT_EQUAL(ssmc_stop_find(t, n, 0, stops, 0), n);
  CU_ASSERT_EQUAL(ssmc_stop_find("", 0, 0, stops, 3), 0);
  static const struct {
    const char *text;
    size_t safe;
  } cases[] = {{"abc", 3}, {"abc<|im", 3}, {"abc<|im_", 3}, {"abc<|im_end|", 3}, {"ab<x", 4},
               {"x\n", 1}, {"x<|im_end|>", 11}, {"hello e", 6}, {"hello en", 6}, {"<", 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t got = ssmc_stop_safe(cases[i].text, strlen(cases[i].text), stops, 3);
    if (got != cases[i].safe) fprintf(stderr, "\n  '%s': %zu, want %zu\n", cases[i].text, got, cases[i].safe);
    CU_ASSERT_EQUAL(got, cases[i].safe);
  }
}

int main(void) {
  CU_TestInfo tests[] = {{"greedy_feedback_matches_transformers",
                          test_greedy_feedback_matches_transformers},
                         {"seeded_sampling", test_seeded_sampling},
                         {"sampling_logits", test_sampling_logits},
                         {"min_p", test_min_p},
                         {"repeat_penalty", test_repeat_penalty},
                         {"generation_config", test_generation_config},
                         {"bad_settings", test_bad_settings},
                         {"stop_strings", test_stop_strings},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("sampling", tests);
}
