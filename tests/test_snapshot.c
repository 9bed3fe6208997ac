/*
 * test_snapshot.c — snapshots and forks of sessions (ssmc.h), on both
 * backends and on a hybrid with attention KV caches (jamba_tiny) as well as
 * a pure Mamba model: a restored state generates exactly what the original
 * did, forks are independent and match sessions of their own, snapshots of
 * one model do not restore into another, and the sampler's step carries a
 * draw across calls. Sessions that step together through the batched
 * program's slots draw what each draws alone.
 */
#include <string.h>

#include "runtime/ssmc.h"
#include "testutil.h"

static ssmc_session *open_slots(const char *name, ssmc_backend backend, int slots) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/%s", ssm_test_path("tests/data"), name);
  ssmc_options o;
  ssmc_options_init(&o);
  o.backend = backend;
  o.chunk = 4;
  if (backend == SSMC_BACKEND_VULKAN) o.max_seq = 64;
  o.slots = slots;
  ssmc_session *s = NULL;
  SSM_ASSERT_OK(ssmc_session_open(dir, &o, &s));
  return s;
}

static ssmc_session *open_fixture(const char *name, ssmc_backend backend) {
  return open_slots(name, backend, 0);
}

/* Greedy ids after feeding `prompt` (on the device sampler). */
static size_t greedy(ssmc_session *s, const int32_t *prompt, size_t n, int k, int32_t *out) {
  ssmc_generate_options g;
  ssmc_generate_options_init(&g);
  size_t got = 0;
  SSM_ASSERT_OK(ssmc_session_generate(s, prompt, n, k, &g, out, &got));
  return got;
}

static const int32_t P1[] = {5, 17, 9, 33, 2, 41, 7, 8, 12, 3};
static const int32_t P2[] = {60, 1, 22, 4, 4, 19};

/* Restore gives back exactly the state: the same continuation twice, on a
 * hybrid (SSM + conv + KV) and a pure Mamba model, on both backends. */
static void restore_repeats(const char *fixture, ssmc_backend backend) {
  ssmc_session *s = open_fixture(fixture, backend);
  if (!s) return;
  SSM_ASSERT_OK(ssmc_session_feed(s, P1, 10, NULL, NULL));
  ssmc_snapshot *snap = NULL;
  SSM_ASSERT_OK(ssmc_session_snapshot(s, &snap));
  CU_ASSERT_FATAL(snap != NULL);
  CU_ASSERT_EQUAL(ssmc_snapshot_position(snap), 10);
  CU_ASSERT(ssmc_snapshot_bytes(snap) > 0);
  int32_t a[12], b[12];
  size_t na = greedy(s, P2, 6, 12, a);
  CU_ASSERT_EQUAL(ssmc_session_position(s), 10 + 6 + 11);
  SSM_ASSERT_OK(ssmc_session_restore(s, snap));
  CU_ASSERT_EQUAL(ssmc_session_position(s), 10);
  size_t nb = greedy(s, P2, 6, 12, b);
  CU_ASSERT(na == 12 && nb == 12 && !memcmp(a, b, sizeof a));
  /* snapshot_into reuses the memory and takes the new state */
  SSM_ASSERT_OK(ssmc_session_snapshot_into(s, snap));
  CU_ASSERT_EQUAL(ssmc_snapshot_position(snap), ssmc_session_position(s));
  ssmc_session_close(s); /* the snapshot keeps the model loaded */
  CU_ASSERT_EQUAL(ssmc_snapshot_position(snap), 10 + 6 + 11);
  ssmc_snapshot_free(snap);
}

static void test_restore_cpu(void) {
  restore_repeats("jamba_tiny", SSMC_BACKEND_CPU);
  restore_repeats("mamba1_tiny", SSMC_BACKEND_CPU);
}

static void test_restore_vulkan(void) {
  restore_repeats("jamba_tiny", SSMC_BACKEND_VULKAN);
  restore_repeats("mamba1_tiny", SSMC_BACKEND_VULKAN);
}

/* Two forks fed different prompts in turns generate what two sessions of
 * their own generate; the parent is untouched. */
static void forks_are_independent(ssmc_backend backend) {
  ssmc_session *s = open_fixture("jamba_tiny", backend), *r1 = open_fixture("jamba_tiny", backend),
               *r2 = open_fixture("jamba_tiny", backend);
  if (!s || !r1 || !r2) return;
  SSM_ASSERT_OK(ssmc_session_feed(s, P1, 10, NULL, NULL));
  SSM_ASSERT_OK(ssmc_session_feed(r1, P1, 10, NULL, NULL));
  SSM_ASSERT_OK(ssmc_session_feed(r2, P1, 10, NULL, NULL));
  ssmc_session *f1 = NULL, *f2 = NULL;
  SSM_ASSERT_OK(ssmc_session_fork(s, &f1));
  SSM_ASSERT_OK(ssmc_session_fork(s, &f2));
  CU_ASSERT_FATAL(f1 && f2);
  CU_ASSERT_EQUAL(ssmc_session_position(f1), 10);
  int32_t x1[4], x2[4], y1[4], y2[4], z[4];
  /* interleaved: f1, f2, f1, f2 */
  greedy(f1, P2, 6, 4, x1);
  greedy(f2, P2 + 2, 4, 4, x2);
  greedy(f1, x1 + 3, 1, 4, x1);
  greedy(f2, x2 + 3, 1, 4, x2);
  greedy(r1, P2, 6, 4, y1);
  greedy(r1, y1 + 3, 1, 4, y1);
  greedy(r2, P2 + 2, 4, 4, y2);
  greedy(r2, y2 + 3, 1, 4, y2);
  CU_ASSERT(!memcmp(x1, y1, sizeof x1));
  CU_ASSERT(!memcmp(x2, y2, sizeof x2));
  CU_ASSERT_EQUAL(ssmc_session_position(f1), 10 + 6 + 3 + 4);
  CU_ASSERT_EQUAL(ssmc_session_position(s), 10);
  /* the parent still continues from its own state; closing it first
   * leaves the forks working */
  int32_t w[4];
  greedy(s, P2, 6, 4, z);
  ssmc_session *r3 = open_fixture("jamba_tiny", backend);
  SSM_ASSERT_OK(ssmc_session_feed(r3, P1, 10, NULL, NULL));
  greedy(r3, P2, 6, 4, w);
  CU_ASSERT(!memcmp(z, w, sizeof z));
  ssmc_session_close(s);
  greedy(f1, x1 + 3, 1, 4, x1);
  greedy(r1, y1 + 3, 1, 4, y1);
  CU_ASSERT(!memcmp(x1, y1, sizeof x1));
  ssmc_session_close(f1);
  ssmc_session_close(f2);
  ssmc_session_close(r1);
  ssmc_session_close(r2);
  ssmc_session_close(r3);
}

static void test_forks_cpu(void) { forks_are_independent(SSMC_BACKEND_CPU); }
static void test_forks_vulkan(void) { forks_are_independent(SSMC_BACKEND_VULKAN); }

/* A snapshot of one loaded model is refused by another, which keeps its
 * state. */
static void test_other_model_refused(void) {
  ssmc_session *a = open_fixture("jamba_tiny", SSMC_BACKEND_CPU),
               *b = open_fixture("jamba_tiny", SSMC_BACKEND_CPU);
  if (!a || !b) return;
  ssmc_snapshot *snap = NULL;
  SSM_ASSERT_OK(ssmc_session_feed(a, P1, 10, NULL, NULL));
  SSM_ASSERT_OK(ssmc_session_snapshot(a, &snap));
  SSM_ASSERT_OK(ssmc_session_feed(b, P2, 6, NULL, NULL));
  SSM_ASSERT_ERR(ssmc_session_restore(b, snap), "another loaded model");
  SSM_ASSERT_ERR(ssmc_session_snapshot_into(b, snap), "another loaded model");
  CU_ASSERT_EQUAL(ssmc_session_position(b), 6);
  ssmc_snapshot_free(snap);
  ssmc_session_close(a);
  ssmc_session_close(b);
}

/* Drawing 5 + 5 ids with step 5 on the second call gives the 10 ids of
 * one call; a step at 2^24 is refused. */
static void test_sampler_step_continues(void) {
  ssmc_session *s = open_fixture("mamba1_tiny", SSMC_BACKEND_CPU);
  if (!s) return;
  ssmc_generate_options g;
  ssmc_generate_options_init(&g);
  g.temperature = 1.5f;
  g.seed = 7;
  int32_t one[10], two[10];
  size_t n1 = 0, n2 = 0, n3 = 0;
  SSM_ASSERT_OK(ssmc_session_generate(s, P1, 10, 10, &g, one, &n1));
  SSM_ASSERT_OK(ssmc_session_reset(s));
  SSM_ASSERT_OK(ssmc_session_generate(s, P1, 10, 5, &g, two, &n2));
  g.step = 5;
  SSM_ASSERT_OK(ssmc_session_generate(s, two + 4, 1, 5, &g, two + 5, &n3));
  CU_ASSERT(n1 == 10 && n2 == 5 && n3 == 5 && !memcmp(one, two, sizeof one));
  g.step = 1u << 24;
  SSM_ASSERT_ERR(ssmc_session_generate(s, P1, 1, 1, &g, two, &n3), "not below 2^24");
  ssmc_session_close(s);
}

/* Three forks, each fed its own prompt (3, 4 and 5 tokens: in a model with
 * attention, three positions), join slots 0..2 and step together: each
 * slot draws what its session draws alone from the same state, and a
 * session that takes its slot back covers what the lone one covers (the
 * same position, the same next ids: its KV cache came back too, and the
 * ids it saw, which a repetition penalty reads). A fourth
 * slot that no session joined steps too; a slot left is refused to take.
 * Bad slots and a model without slots are refused. */
static void slots_step_together(const char *fixture, ssmc_backend backend) {
  enum { B = 4, N = 6 };
  ssmc_session *s = open_slots(fixture, backend, B);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  CU_ASSERT_EQUAL(ssmc_session_slots(s), B);
  ssmc_generate_options g;
  ssmc_generate_options_init(&g);
  ssmc_session *f[3];
  ssmc_snapshot *at[3];
  int32_t first[B] = {7, 8, 9, 10}, ids[N * B], alone[N], more[4], more_alone[4];
  for (int i = 0; i < 3; i++) {
    SSM_ASSERT_OK(ssmc_session_fork(s, &f[i]));
    SSM_ASSERT_OK(ssmc_session_feed(f[i], i == 1 ? P2 : P1, (size_t)(3 + i), NULL, NULL));
    SSM_ASSERT_OK(ssmc_session_snapshot(f[i], &at[i]));
    SSM_ASSERT_OK(ssmc_session_join_slot(f[i], i, &g));
  }
  SSM_ASSERT_OK(ssmc_session_step_slots(s, first, N, ids));
  for (int i = 0; i < 3; i++) {
    ssmc_session *lone;
    SSM_ASSERT_OK(ssmc_session_fork(s, &lone));
    SSM_ASSERT_OK(ssmc_session_restore(lone, at[i]));
    CU_ASSERT_EQUAL(greedy(lone, &first[i], 1, N, alone), N);
    for (int j = 0; j < N; j++) CU_ASSERT_EQUAL(ids[j * B + i], alone[j]);
    /* the slot's state back: both go on alike */
    SSM_ASSERT_OK(ssmc_session_take_slot(f[i], i));
    CU_ASSERT_EQUAL(ssmc_session_position(f[i]), ssmc_session_position(lone));
    SSM_ASSERT_OK(ssmc_session_leave_slot(f[i], i));
    SSM_ASSERT_ERR(ssmc_session_take_slot(f[i], i), "holds no sequence");
    /* under a repetition penalty (on the host: the session's set of seen
     * ids, which holds those fed and drawn in the slot) */
    int32_t pen[8], pen_alone[8];
    size_t np = 0, np_alone = 0;
    ssmc_generate_options gp;
    ssmc_generate_options_init(&gp);
    gp.host_greedy = 1;
    gp.repeat_penalty = 4.0f;
    SSM_ASSERT_OK(ssmc_session_generate(f[i], &ids[(N - 1) * B + i], 1, 8, &gp, pen, &np));
    SSM_ASSERT_OK(ssmc_session_generate(lone, &alone[N - 1], 1, 8, &gp, pen_alone, &np_alone));
    CU_ASSERT(np == 8 && np_alone == 8 && !memcmp(pen, pen_alone, sizeof pen));
    CU_ASSERT_EQUAL(greedy(f[i], &pen[7], 1, 4, more), 4);
    CU_ASSERT_EQUAL(greedy(lone, &pen_alone[7], 1, 4, more_alone), 4);
    CU_ASSERT_EQUAL(memcmp(more, more_alone, sizeof more), 0);
    ssmc_session_close(lone);
    ssmc_snapshot_free(at[i]);
    ssmc_session_close(f[i]);
  }
  SSM_ASSERT_ERR(ssmc_session_join_slot(s, B, &g), "slot 4 is not one of the model's 4 slots");
  SSM_ASSERT_ERR(ssmc_session_take_slot(s, -1), "slot -1 is not one of the model's 4 slots");
  g.top_p = 0;
  SSM_ASSERT_ERR(ssmc_session_join_slot(s, 0, &g), "sampler settings out of range");
  first[3] = 100000;
  SSM_ASSERT_ERR(ssmc_session_step_slots(s, first, 1, ids), "out of range");
  ssmc_session_close(s);
  s = open_fixture(fixture, backend);
  CU_ASSERT_EQUAL(ssmc_session_slots(s), 0);
  SSM_ASSERT_ERR(ssmc_session_step_slots(s, first, 1, ids), "the model has no slots");
  ssmc_session_close(s);
}

static void test_slots_cpu(void) {
  slots_step_together("mamba1_tiny", SSMC_BACKEND_CPU);
  slots_step_together("jamba_tiny", SSMC_BACKEND_CPU);
}
static void test_slots_vulkan(void) {
  slots_step_together("mamba1_tiny", SSMC_BACKEND_VULKAN);
  slots_step_together("jamba_tiny", SSMC_BACKEND_VULKAN);
}

/* A model with attention: a joined slot's steps count against max_seq (a
 * step past its KV cache is refused, naming the slot, and nothing runs);
 * a slot left, or never joined, steps on at position 0 without a bound. */
static void test_slots_max_seq(void) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/jamba_tiny", ssm_test_path("tests/data"));
  ssmc_options o;
  ssmc_options_init(&o);
  o.backend = SSMC_BACKEND_CPU;
  o.max_seq = 8;
  o.slots = 2;
  ssmc_session *s = NULL;
  SSM_ASSERT_OK(ssmc_session_open(dir, &o, &s));
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  ssmc_generate_options g;
  ssmc_generate_options_init(&g);
  SSM_ASSERT_OK(ssmc_session_feed(s, P1, 5, NULL, NULL));
  SSM_ASSERT_OK(ssmc_session_join_slot(s, 0, &g));
  int32_t first[2] = {P1[5], 0}, ids[2 * 12];
  SSM_ASSERT_OK(ssmc_session_step_slots(s, first, 3, ids)); /* positions 5, 6, 7 */
  SSM_ASSERT_ERR(ssmc_session_step_slots(s, first, 1, ids), "slot 0: position 9 is past --max-seq 8");
  SSM_ASSERT_OK(ssmc_session_take_slot(s, 0));
  CU_ASSERT_EQUAL(ssmc_session_position(s), 8);
  SSM_ASSERT_OK(ssmc_session_leave_slot(s, 0));
  SSM_ASSERT_OK(ssmc_session_step_slots(s, first, 12, ids));
  SSM_ASSERT_ERR(ssmc_session_leave_slot(s, 2), "slot 2 is not one of the model's 2 slots");
  ssmc_session_close(s);
}

int main(void) {
  CU_TestInfo tests[] = {{"slots_step_together_cpu", test_slots_cpu},
                         {"slots_step_together_vulkan", test_slots_vulkan},
                         {"slots_max_seq", test_slots_max_seq},
                         {"restore_repeats_cpu", test_restore_cpu},
                         {"restore_repeats_vulkan", test_restore_vulkan},
                         {"forks_are_independent_cpu", test_forks_cpu},
                         {"forks_are_independent_vulkan", test_forks_vulkan},
                         {"other_model_refused", test_other_model_refused},
                         {"sampler_step_continues", test_sampler_step_continues},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("snapshot", tests);
}
