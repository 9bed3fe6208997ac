/*
 * test_state.c — state save/restore: a run that stops after K tokens, saves
 * its state, and is continued from the file must produce exactly the tokens
 * an uninterrupted run produces, on both backends and across them; bad
 * state files are refused with clear messages and change nothing.
 */
#include <string.h>

#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"
#include "testutil.h"

#define FIX "tests/data/mamba1_untied" /* its greedy continuation is varied */
#define PROMPT "48,368,579,575,669,30,119"
static const char *fix = FIX, *prompt = PROMPT;

static char *ssmc(const char *args, int want_rc) {
  char cmd[4096], *out;
  snprintf(cmd, sizeof cmd, "cd %s && %s %s", ssm_test_source_dir(), ssm_test_ssmc(), args);
  int rc = ssm_test_sh(cmd, &out);
  if (rc != want_rc) fprintf(stderr, "\n  ssmc %s\n  -> exit %d: %s\n", args, rc, out);
  CU_ASSERT_EQUAL(rc, want_rc);
  size_t n = strlen(out);
  while (n && out[n - 1] == '\n') out[--n] = 0;
  return out;
}

static const char *last_line(const char *s) {
  const char *l = strrchr(s, '\n');
  return l ? l + 1 : s;
}

/* Uninterrupted: 12 tokens. Interrupted: 5 tokens with --state-out (saved by
 * `first`), then --state-in with the 5th token and 7 more (by `second`). */
static void check_continuation(const char *first, const char *second) {
  char args[2048], path[512];
  snprintf(path, sizeof path, "%s/s-%s-%s-%d.state", ssm_test_tmpdir(), first, second,
           (int)strlen(fix));
  snprintf(args, sizeof args, "run %s --weights %s --tokens %s -n 12 --backend %s", fix, fix,
           prompt, first);
  char *all = ssmc(args, 0);
  snprintf(args, sizeof args, "run %s --weights %s --tokens %s -n 5 --backend %s --state-out %s",
           fix, fix, prompt, first, path);
  char *head = ssmc(args, 0);
  const char *ids = last_line(head);
  const char *fifth = strrchr(ids, ',');
  fifth = fifth ? fifth + 1 : ids;
  snprintf(args, sizeof args, "run %s --weights %s --tokens %s -n 7 --backend %s --state-in %s",
           fix, fix, fifth, second, path);
  char *tail = ssmc(args, 0);
  char joined[1024];
  snprintf(joined, sizeof joined, "%s,%s", last_line(head), last_line(tail));
  if (strcmp(joined, last_line(all)))
    fprintf(stderr, "\n  %s -> %s: restored %s, uninterrupted %s\n", first, second, joined,
            last_line(all));
  CU_ASSERT_STRING_EQUAL(joined, last_line(all));
  free(all);
  free(head);
  free(tail);
}

static void test_cpu_continues(void) { check_continuation("cpu", "cpu"); }
static void test_vulkan_continues(void) { check_continuation("vulkan", "vulkan"); }
static void test_across_backends(void) {
  check_continuation("cpu", "vulkan");
  check_continuation("vulkan", "cpu");
}

static char *slurp(const char *path, size_t *n) {
  char *d = NULL;
  ssm_status s = ssm_file_read(path, 0, &d, n);
  CU_ASSERT_PTR_NULL(s);
  ssm_status_free(s);
  return d;
}

/* A hybrid: its attention layers' KV caches and the position are state too. */
static void test_jamba_continues(void) {
  fix = "tests/data/jamba_tiny";
  prompt = "5,77,300,12,9,401";
  check_continuation("cpu", "vulkan");
  check_continuation("vulkan", "vulkan");
  fix = FIX;
  prompt = PROMPT;
}

static void test_bad_state_files(void) {
  char args[2048], path[512];
  snprintf(path, sizeof path, "%s/good.state", ssm_test_tmpdir());
  snprintf(args, sizeof args, "run " FIX " --weights " FIX " --tokens 1,2,3 -n 2 --state-out %s", path);
  free(ssmc(args, 0));
  size_t n;
  char *good = slurp(path, &n);
  if (!good) return;
  char *bad = malloc(n);
  struct {
    const char *name, *want;
    size_t len;
    int flip; /* byte to change, -1 none */
  } cases[] = {
      {"trunc.state", "truncated or corrupt state file", n - 7, -1},
      {"short.state", "not an ssmc state file", 9, -1},
      {"flip.state", "checksum mismatch", n, (int)n - 3},
      {"ver.state", "state file version 9, but this ssmc reads version 1", n, 4},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    memcpy(bad, good, n);
    if (cases[k].flip >= 0) bad[cases[k].flip] = k == 3 ? 9 : (char)(bad[cases[k].flip] ^ 0x5a);
    const char *p = ssm_test_write(cases[k].name, bad, cases[k].len);
    for (int be = 0; be < 2; be++) {
      snprintf(args, sizeof args, "run " FIX " --weights " FIX " --tokens 1 -n 1 --state-in %s "
               "--backend %s", p, be ? "vulkan" : "cpu");
      char *out = ssmc(args, 1);
      if (!strstr(out, cases[k].want)) fprintf(stderr, "\n  want '%s' in: %s\n", cases[k].want, out);
      CU_ASSERT_PTR_NOT_NULL(strstr(out, cases[k].want));
      free(out);
    }
  }
  /* another model */
  snprintf(args, sizeof args, "run tests/data/falcon_tiny --weights tests/data/falcon_tiny "
           "--tokens 1 -n 1 --state-in %s", path);
  char *out = ssmc(args, 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "not 'falcon_mamba'"));
  free(out);
  snprintf(args, sizeof args, "run tests/data/mamba1_tiny --weights tests/data/mamba1_tiny "
           "--tokens 1 -n 1 --state-in %s --backend cpu", path);
  out = ssmc(args, 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "saved with other weights"));
  free(out);
  free(bad);
  free(good);
}

/* The library refuses a file whose tensors do not match, and changes nothing. */
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

int main(void) {
  CU_TestInfo tests[] = {{"cpu_continues", test_cpu_continues},
                         {"vulkan_continues", test_vulkan_continues},
                         {"across_backends", test_across_backends},
                         {"jamba_continues", test_jamba_continues},
                         {"bad_state_files", test_bad_state_files},
                         {"mismatch_changes_nothing", test_mismatch_changes_nothing},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("state", tests);
}
