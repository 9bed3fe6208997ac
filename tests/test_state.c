/*
 * test_state.c — state save/restore through the session API: a run that
 * stops after K tokens, saves its state, and is continued from the file by
 * another session must produce exactly the tokens an uninterrupted run
 * produces, on both backends and across them; bad state files are refused
 * with clear messages and change nothing.
 */
#include <string.h>

#include "runtime/backend/backend.h"
#include "runtime/weights/weights.h"
#include "runtime/ssmc.h"
#include "testutil.h"

#define FIX "tests/data/mamba1_untied" /* its greedy continuation is varied */
static const char *fix = FIX;
static int32_t prompt[16] = {48, 368, 579, 575, 669, 30, 119};
static size_t nprompt = 7;

static ssmc_session *open_session(const char *model, const char *backend) {
  ssmc_options o;
  ssmc_options_init(&o);
  o.backend = strcmp(backend, "cpu") ? SSMC_BACKEND_VULKAN : SSMC_BACKEND_CPU;
  o.chunk = 4;
  ssmc_session *s = NULL;
  SSM_ASSERT_OK(ssmc_session_open(ssm_test_path(model), &o, &s));
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  return s;
}

/* Greedy ids from `p` (the device sampler: the state then holds all but
 * the last id). */
static size_t gen(ssmc_session *s, const int32_t *p, size_t np, int n, int32_t *out) {
  size_t got = 0;
  SSM_ASSERT_OK(ssmc_session_generate(s, p, np, n, NULL, out, &got));
  CU_ASSERT_EQUAL(got, (size_t)n);
  return got;
}

/* Uninterrupted: 12 tokens. Interrupted: 5 tokens, the state saved by a
 * session on `first`, then a session on `second` loads it and goes on from
 * the 5th token for 7 more. */
static void check_continuation(const char *first, const char *second) {
  char path[512];
  snprintf(path, sizeof path, "%s/s-%s-%s-%d.state", ssm_test_tmpdir(), first, second,
           (int)strlen(fix));
  int32_t all[12], head[5], tail[7];
  ssmc_session *a = open_session(fix, first);
  gen(a, prompt, nprompt, 12, all);
  ssmc_session_close(a);
  ssmc_session *b = open_session(fix, first);
  gen(b, prompt, nprompt, 5, head);
  CU_ASSERT_EQUAL(ssmc_session_position(b), (int64_t)nprompt + 4);
  SSM_ASSERT_OK(ssmc_session_save_state(b, path));
  ssmc_session_close(b);
  ssmc_session *c = open_session(fix, second);
  SSM_ASSERT_OK(ssmc_session_load_state(c, path));
  CU_ASSERT_EQUAL(ssmc_session_position(c), (int64_t)nprompt + 4);
  gen(c, &head[4], 1, 7, tail);
  ssmc_session_close(c);
  int same = !memcmp(all, head, sizeof head) && !memcmp(all + 5, tail, sizeof tail);
  if (!same) fprintf(stderr, "\n  %s -> %s: the restored run differs from the uninterrupted one\n",
                     first, second);
  CU_ASSERT(same);
}

static void test_cpu_continues(void) { check_continuation("cpu", "cpu"); }
static void test_vulkan_continues(void) { check_continuation("vulkan", "vulkan"); }
static void test_across_backends(void) {
  check_continuation("cpu", "vulkan");
  check_continuation("vulkan", "cpu");
}

/* A hybrid: its attention layers' KV caches and the position are state too. */
static void test_jamba_continues(void) {
  static const int32_t jp[] = {5, 77, 300, 12, 9, 401};
  int32_t saved[16];
  memcpy(saved, prompt, sizeof saved);
  memcpy(prompt, jp, sizeof jp);
  nprompt = 6;
  fix = "tests/data/jamba_tiny";
  check_continuation("cpu", "vulkan");
  check_continuation("vulkan", "vulkan");
  fix = FIX;
  memcpy(prompt, saved, sizeof saved);
  nprompt = 7;
}

static char *slurp(const char *path, size_t *n) {
  char *d = NULL;
  ssm_status s = ssm_file_read(path, 0, &d, n);
  CU_ASSERT_PTR_NULL_FATAL(s);
  return d;
}

/* Truncated, corrupt and foreign state files are refused by both backends,
 * and the session goes on as if nothing happened. */
static void test_bad_state_files(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/good.state", ssm_test_tmpdir());
  int32_t ids[2];
  ssmc_session *s = open_session(FIX, "cpu");
  gen(s, (const int32_t[]){1, 2, 3}, 3, 2, ids);
  SSM_ASSERT_OK(ssmc_session_save_state(s, path));
  ssmc_session_close(s);
  size_t n;
  char *good = slurp(path, &n), *bad = malloc(n);
  struct {
    const char *name, *want;
    size_t len;
    int flip; /* byte to change, -1 none */
  } cases[] = {
      {"trunc.state", "truncated or corrupt state file", n - 7, -1},
      {"short.state", "not an ssmc state file", 9, -1},
      {"flip.state", "checksum mismatch", n, (int)n - 3},
      {"ver.state", "state file version 9, but this ssmc reads version 2", n, 4},
  };
  /* one bit of the header's position, or of a tensor's offset */
  static const char *const fields[] = {"\"position\":", "\"offset\":768"};
  for (int f = 0; f < 2; f++) {
    memcpy(bad, good, n);
    char *at = memmem(bad, n, fields[f], strlen(fields[f]));
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    at[strlen(fields[f]) - (f ? 1 : 0)] ^= 1;
    ssmc_session *c = open_session(FIX, "cpu");
    SSM_ASSERT_ERR(ssmc_session_load_state(c, ssm_test_write("field.state", bad, n)),
                   "checksum mismatch");
    CU_ASSERT_EQUAL(ssmc_session_position(c), 0);
    ssmc_session_close(c);
  }
  for (int be = 0; be < 2; be++) {
    s = open_session(FIX, be ? "vulkan" : "cpu");
    int32_t before[4], after[4];
    gen(s, (const int32_t[]){7, 8}, 2, 4, before);
    SSM_ASSERT_OK(ssmc_session_reset(s));
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      memcpy(bad, good, n);
      if (cases[k].flip >= 0) bad[cases[k].flip] = k == 3 ? 9 : (char)(bad[cases[k].flip] ^ 0x5a);
      SSM_ASSERT_ERR(ssmc_session_load_state(s, ssm_test_write(cases[k].name, bad, cases[k].len)),
                     cases[k].want);
    }
    CU_ASSERT_EQUAL(ssmc_session_position(s), 0);
    gen(s, (const int32_t[]){7, 8}, 2, 4, after);
    CU_ASSERT_EQUAL(memcmp(before, after, sizeof before), 0);
    ssmc_session_close(s);
  }
  /* another model, and other weights */
  s = open_session("tests/data/falcon_tiny", "cpu");
  SSM_ASSERT_ERR(ssmc_session_load_state(s, path), "not 'falcon_mamba'");
  ssmc_session_close(s);
  s = open_session("tests/data/mamba1_tiny", "vulkan");
  SSM_ASSERT_ERR(ssmc_session_load_state(s, path), "saved with other weights");
  ssmc_session_close(s);
  free(bad);
  free(good);
}

/* Copies fixture `name`'s config.json and model.safetensors into `dir`. */
static void copy_fixture(const char *name, const char *dir) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/%s/config.json %s/%s/model.safetensors %s/",
           dir, ssm_test_source_dir(), name, ssm_test_source_dir(), name, dir);
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, NULL), 0);
}

/* Weights that differ from the saved state's only after the first 64 bytes
 * of each tensor (every later f32 halved): the state is refused, and the
 * message names both fingerprints. */
static void test_other_weights_refused(void) {
  char dir[512], st_path[600], path[600];
  snprintf(dir, sizeof dir, "%s/halved", ssm_test_tmpdir());
  copy_fixture("tests/data/mamba1_untied", dir);
  snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
  ssm_st *st = NULL;
  SSM_ASSERT_OK(ssm_st_open(st_path, &st));
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  size_t n;
  char *bytes = slurp(st_path, &n);
  for (int i = 0; i < ssm_st_count(st); i++) {
    const ssm_st_tensor *t = ssm_st_at(st, i);
    for (size_t b = 64; b + 4 <= t->nbytes; b += 4) {
      float f;
      memcpy(&f, bytes + t->offset + b, 4);
      f *= 0.5f;
      memcpy(bytes + t->offset + b, &f, 4);
    }
  }
  ssm_st_close(st);
  FILE *f = fopen(st_path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fwrite(bytes, 1, n, f);
  fclose(f);
  free(bytes);
  snprintf(path, sizeof path, "%s/first.state", ssm_test_tmpdir());
  int32_t ids[2];
  ssmc_session *s = open_session(FIX, "cpu");
  gen(s, (const int32_t[]){1, 2, 3}, 3, 2, ids);
  SSM_ASSERT_OK(ssmc_session_save_state(s, path));
  ssmc_session_close(s);
  for (int be = 0; be < 2; be++) {
    ssmc_options o;
    ssmc_options_init(&o);
    o.backend = be ? SSMC_BACKEND_VULKAN : SSMC_BACKEND_CPU;
    ssmc_session *h = NULL;
    SSM_ASSERT_OK(ssmc_session_open(dir, &o, &h));
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    ssm_status st2 = ssmc_session_load_state(h, path);
    CU_ASSERT_PTR_NOT_NULL(st2);
    const char *m = ssm_status_message(st2);
    const char *a = strstr(m, "fingerprint "), *b = a ? strstr(a, ", these are ") : NULL;
    CU_ASSERT(a && b && strncmp(a + 12, b + 12, 16)); /* two different fingerprints */
    if (!(a && b)) fprintf(stderr, "\n  %s\n", m);
    ssm_status_free(st2);
    ssmc_session_close(h);
  }
}

/* The file format refuses a file whose tensors do not match, and changes
 * nothing. */
static void test_mismatch_changes_nothing(void) {
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0};
  ssm_state_tensor t = {"l0.x", ssm_type_make(SSM_F32, 2, (int64_t[]){2, 3}), a};
  const char *p = ssm_test_write("lib.state", "", 0);
  SSM_ASSERT_OK(ssm_state_save(p, "arch", 42, 7, &t, 1));
  int64_t pos = -1;
  ssm_state_tensor u = {"l0.x", ssm_type_make(SSM_F32, 2, (int64_t[]){3, 2}), b};
  SSM_ASSERT_ERR(ssm_state_load(p, "arch", 42, &pos, &u, 1),
                 "state 'l0.x' is f32[2,3] in the file but the model has f32[3,2]");
  CU_ASSERT_EQUAL(b[0], 0);
  CU_ASSERT_EQUAL(pos, -1);
  ssm_state_tensor w = {"l0.y", t.type, b};
  SSM_ASSERT_ERR(ssm_state_load(p, "arch", 42, &pos, &w, 1), "the file has no state 'l0.y'");
  SSM_ASSERT_ERR(ssm_state_load(p, "arch", 43, &pos, &t, 1), "saved with other weights");
  t.data = b;
  SSM_ASSERT_OK(ssm_state_load(p, "arch", 42, &pos, &t, 1));
  CU_ASSERT_EQUAL(b[5], 6);
  CU_ASSERT_EQUAL(pos, 7);
}

/* A save that fails half-way (the file-size limit) leaves the good file
 * that was there. */
static void test_failed_save_keeps_file(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/keep.state", ssm_test_tmpdir());
  ssmc_session *s = open_session(FIX, "cpu");
  int32_t ids[3];
  gen(s, (const int32_t[]){1, 2, 3}, 3, 3, ids);
  SSM_ASSERT_OK(ssmc_session_save_state(s, path));
  size_t n0, n1;
  char *before = slurp(path, &n0);
  CU_ASSERT_FATAL(n0 > 2048);
  gen(s, (const int32_t[]){9}, 1, 3, ids); /* another state */
  ssm_test_limit_file_size(1024);
  ssm_status st = ssmc_session_save_state(s, path);
  ssm_test_limit_file_size(0);
  SSM_ASSERT_ERR(st, "keep.state: cannot write (File too large)");
  char *after = slurp(path, &n1);
  CU_ASSERT(n0 == n1 && !memcmp(before, after, n0));
  free(before);
  free(after);
  ssmc_session_close(s);
}

int main(void) {
  CU_TestInfo tests[] = {{"cpu_continues", test_cpu_continues},
                         {"vulkan_continues", test_vulkan_continues},
                         {"across_backends", test_across_backends},
                         {"jamba_continues", test_jamba_continues},
                         {"bad_state_files", test_bad_state_files},
                         {"mismatch_changes_nothing", test_mismatch_changes_nothing},
                         {"other_weights_refused", test_other_weights_refused},
                         {"failed_save_keeps_file", test_failed_save_keeps_file},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("state", tests);
}
