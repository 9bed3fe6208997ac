/*
 * test_soak.c — long greedy decodes on Vulkan (lavapipe when there is no
 * GPU) through the device-feedback path (ssmc_session_generate with the
 * device sampler, several steps per submit): the shipped model
 * (models/pymamba, from the README's prompt) and the Jamba fixture
 * (tests/data/jamba_tiny, compiled with a small --max-seq and reset each
 * time the KV cache is full). Each run asserts that the anonymous resident set grows
 * by less than 2 MiB after a warm-up, and that the ids are the same as a
 * run split in two at a random point by a state save and load: the state
 * is saved there while the first run goes on, then loaded and the rest
 * generated again.
 *
 * Not timed. The default lengths keep it to a few minutes on a loaded
 * 2-core machine with lavapipe (15 tokens/s for pymamba there, 70 for the
 * Jamba fixture); SSM_SOAK_FULL=1 runs the full lengths, 100,000 and
 * 20,000 tokens (hours on lavapipe: for a GPU or a nightly job).
 * SSM_SOAK_SEED=S repeats a run's split point (each run prints its seed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/ssmc.h"
#include "testutil.h"

SSM_TEST_SMALL_ASAN_QUARANTINE

#define MAX_GROWTH_KIB 2048
#define WARMUP 64      /* tokens before the first RSS reading */
#define PER_CALL 256   /* ids per ssmc_session_generate call */
#define JAMBA_MAX_SEQ 256

static int full(void) {
  const char *e = getenv("SSM_SOAK_FULL");
  return e && *e && strcmp(e, "0");
}

/* One decode: ids out[from..n), starting with `cur` as the input at the
 * session's position. A full KV cache (position max_seq) resets the state
 * first. When `save_at` is in (from, n), the state after id save_at-1 is
 * drawn is saved to `state_path` with that id as the next input. The RSS is
 * read after WARMUP ids (*rss0) and at the end (*rss1). */
typedef struct {
  ssmc_session *s;
  int64_t max_seq; /* 0: none */
  int32_t *out;
  int n;
  int save_at;
  const char *state_path;
  long rss0, rss1;
} soak;

static int decode(soak *k, int from, int32_t cur) {
  ssmc_generate_options g;
  ssmc_generate_options_init(&g); /* greedy, on the device */
  int at = from;
  while (at < k->n) {
    int64_t pos = ssmc_session_position(k->s);
    if (k->max_seq && pos >= k->max_seq) {
      ssmc_status st = ssmc_session_reset(k->s);
      SSM_ASSERT_OK(st);
      if (st) return 0;
      pos = 0;
    }
    int want = k->n - at < PER_CALL ? k->n - at : PER_CALL;
    if (k->max_seq && want > k->max_seq - pos) want = (int)(k->max_seq - pos);
    if (at < WARMUP && want > WARMUP - at) want = WARMUP - at;
    if (k->save_at > at && want > k->save_at - at) want = k->save_at - at;
    size_t got = 0;
    ssmc_status st = ssmc_session_generate(k->s, &cur, 1, want, &g, k->out + at, &got);
    if (st) fprintf(stderr, "\n  at id %d: %s\n", at, ssmc_status_message(st));
    CU_ASSERT_PTR_NULL(st);
    ssmc_status_free(st);
    CU_ASSERT_EQUAL(got, (size_t)want);
    if (st || got != (size_t)want) return 0;
    at += want;
    cur = k->out[at - 1];
    if (at == WARMUP) k->rss0 = ssm_test_rss_anon_kib();
    if (at == k->save_at) {
      st = ssmc_session_save_state(k->s, k->state_path);
      SSM_ASSERT_OK(st);
      if (st) return 0;
    }
  }
  k->rss1 = ssm_test_rss_anon_kib();
  return 1;
}

static void soak_model(const char *what, const char *model, int max_seq, int n, int prompt_text) {
  const char *seed_env = getenv("SSM_SOAK_SEED");
  unsigned seed = seed_env ? (unsigned)strtoul(seed_env, NULL, 10) : (unsigned)time(NULL);
  srand(seed);
  int save_at = WARMUP + 1 + rand() % (n - WARMUP - 1); /* in (WARMUP, n) */
  fprintf(stderr, "\n  %s: %d ids, the state saved and loaded after %d (SSM_SOAK_SEED=%u)\n",
          what, n, save_at, seed);
  ssmc_options o;
  ssmc_options_init(&o);
  o.backend = SSMC_BACKEND_VULKAN;
  o.max_seq = max_seq;
  ssmc_session *s = NULL;
  ssmc_status st = ssmc_session_open(ssm_test_path(model), &o, &s);
  SSM_ASSERT_OK(st);
  if (!s) return;
  int32_t *prompt = NULL;
  size_t np = 0;
  if (prompt_text) {
    const ssmc_tokenizer *t = NULL;
    SSM_ASSERT_OK(ssmc_session_tokenizer(s, &t));
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    static const char text[] = "def fibonacci(n):";
    SSM_ASSERT_OK(ssmc_tokenizer_encode(t, text, strlen(text), &prompt, &np));
  } else {
    prompt = malloc(4 * sizeof *prompt);
    for (np = 0; np < 4; np++) prompt[np] = (int32_t)np + 1;
  }
  CU_ASSERT_FATAL(prompt && np > 0);
  /* the prompt but its last token, which is the first generate input */
  if (np > 1) SSM_ASSERT_OK(ssmc_session_feed(s, prompt, np - 1, NULL, NULL));
  char state_path[600];
  snprintf(state_path, sizeof state_path, "%s/soak_%s.state", ssm_test_tmpdir(), what);
  int32_t *whole = calloc((size_t)n, sizeof *whole), *split = calloc((size_t)n, sizeof *split);
  soak a = {s, max_seq, whole, n, save_at, state_path, 0, 0};
  int ok = decode(&a, 0, prompt[np - 1]);
  CU_ASSERT(ok);
  fprintf(stderr, "  %s: RssAnon %ld KiB after %d ids, %ld KiB after %d\n", what, a.rss0, WARMUP,
          a.rss1, n);
  CU_ASSERT(a.rss1 - a.rss0 < MAX_GROWTH_KIB);
  if (ok) {
    /* the second half again, from the saved state, in the same session */
    st = ssmc_session_load_state(s, state_path);
    SSM_ASSERT_OK(st);
    int64_t period = max_seq ? max_seq : (int64_t)n + 1024, pos = (int64_t)np - 1 + save_at;
    CU_ASSERT_EQUAL(ssmc_session_position(s) % period, pos % period);
    memcpy(split, whole, sizeof *split * (size_t)save_at);
    soak b = {s, max_seq, split, n, 0, NULL, 0, 0};
    CU_ASSERT(!st && decode(&b, save_at, whole[save_at - 1]));
    int first_diff = -1;
    for (int i = 0; i < n && first_diff < 0; i++)
      if (whole[i] != split[i]) first_diff = i;
    if (first_diff >= 0)
      fprintf(stderr, "  %s: the split run differs first at id %d (%d, not %d)\n", what,
              first_diff, split[first_diff], whole[first_diff]);
    CU_ASSERT_EQUAL(first_diff, -1);
    CU_ASSERT(b.rss1 - a.rss0 < MAX_GROWTH_KIB);
    /* not a degenerate run: greedy pymamba and the fixture do not repeat one id */
    int distinct = 0;
    for (int i = 1; i < n; i++) distinct += whole[i] != whole[0];
    CU_ASSERT(distinct > 0);
  }
  remove(state_path);
  free(whole);
  free(split);
  free(prompt);
  ssmc_session_close(s);
}

static void test_pymamba(void) {
  soak_model("pymamba", "models/pymamba", 0, full() ? 100000 : 1000, 1);
}

static void test_jamba(void) {
  soak_model("jamba_tiny", "tests/data/jamba_tiny", JAMBA_MAX_SEQ, full() ? 20000 : 3000, 0);
}

int main(void) {
  CU_TestInfo tests[] = {{"pymamba", test_pymamba}, {"jamba_reset", test_jamba}, CU_TEST_INFO_NULL};
  return ssm_test_main("soak", tests);
}
