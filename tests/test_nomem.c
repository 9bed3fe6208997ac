/*
 * test_nomem.c — exhausted host memory on the paths whose allocations are
 * sized by the input (config.json and the model description, weights on
 * the CPU backend, tokenizer.json, bundles, state files): every
 * allocation made through ssm_alloc is failed in turn (ssm_alloc_fail_at),
 * and each time the call returns SSM_ERR_NOMEM with the size and what it
 * was for, instead of aborting, and leaks nothing (LSan builds). Then the
 * CLI prints such an error and exits 1.
 */
#include <string.h>
#include <sys/stat.h>

#include "bundle/bundle.h"
#include "frontend/frontend.h"
#include "runtime/ssmc.h"
#include "runtime/weights/weights.h"
#include "testutil.h"

#define FIX "tests/data/mamba1_tiny"
#define MAX_POINTS 100000

typedef ssm_status (*op_fn)(void *user);

/* Fails the 1st, 2nd, ... ssm_alloc of `op` until it runs with none left
 * to fail; each failure must come back as NOMEM whose message names the
 * size and, before it, what it was for ("PATH: header of 2208 bytes: out
 * of host memory (2209 bytes wanted)"). Returns how many were failed. */
static int sweep(const char *name, op_fn op, void *user) {
  int n = 1;
  for (; n < MAX_POINTS; n++) {
    ssm_alloc_fail_at(n);
    ssm_status s = op(user);
    int pending = ssm_alloc_fail_pending();
    ssm_alloc_fail_at(0);
    if (pending) { /* ran to the end without reaching allocation n */
      SSM_ASSERT_OK(s);
      break;
    }
    const char *msg = ssm_status_message(s);
    const char *oom = strstr(msg, "out of host memory (");
    int ok = ssm_status_code(s) == SSM_ERR_NOMEM && oom && oom > msg + 2 && strstr(oom, " bytes wanted)");
    if (!ok)
      fprintf(stderr, "\n  %s, allocation %d failed: %s (want NOMEM with the size and what for)\n",
              name, n, s ? msg : "it succeeded");
    CU_ASSERT(ok);
    ssm_status_free(s);
    if (!ok) break;
  }
  fprintf(stderr, "\n  %s: %d allocations failed in turn\n", name, n - 1);
  CU_ASSERT(n > 1); /* the path does allocate through ssm_alloc */
  return n - 1;
}

static ssm_status op_model(void *user) {
  (void)user;
  ssm_model *m = NULL;
  ssm_status s = ssm_model_open(ssm_test_path(FIX), NULL, &m);
  ssm_model_close(m);
  return s;
}

static ssm_status op_tokenizer(void *user) {
  (void)user;
  ssmc_tokenizer *t = NULL;
  ssm_status s = ssmc_tokenizer_open(ssm_test_path("models/pymamba/tokenizer.json"), &t);
  ssmc_tokenizer_close(t);
  return s;
}

static ssm_status op_cpu_session(void *user) {
  (void)user;
  ssmc_options o;
  ssmc_options_init(&o);
  o.backend = SSMC_BACKEND_CPU;
  ssmc_session *s = NULL;
  ssm_status st = ssmc_session_open(ssm_test_path(FIX), &o, &s);
  ssmc_session_close(s);
  return st;
}

static ssm_status op_safetensors(void *user) {
  (void)user;
  ssm_st *st = NULL;
  ssm_status s = ssm_st_open(ssm_test_path(FIX "/model.safetensors"), &st);
  ssm_st_close(st);
  return s;
}

static ssm_status op_bundle(void *user) {
  ssm_bundle *b = NULL;
  ssm_status s = ssm_bundle_open(user, &b);
  ssm_bundle_close(b);
  return s;
}

static ssm_status op_state(void *user) {
  void **u = user;
  return ssmc_session_load_state(u[0], u[1]);
}

static void test_config(void) { sweep("model", op_model, NULL); }

static void test_tokenizer(void) { sweep("tokenizer", op_tokenizer, NULL); }

static void test_safetensors(void) { sweep("safetensors", op_safetensors, NULL); }

static void test_cpu_weights(void) { sweep("cpu session", op_cpu_session, NULL); }

static void test_bundle(void) {
  ssm_model *m = NULL;
  ssm_bundle *b = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path(FIX), NULL, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  ssm_compile_opts co = {.prefill_tokens = 4};
  SSM_ASSERT_OK(ssm_compile(m, &co, &b));
  ssm_model_close(m);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  char path[600];
  snprintf(path, sizeof path, "%s/nomem.ssmb", ssm_test_tmpdir());
  SSM_ASSERT_OK(ssm_bundle_save(b, path));
  ssm_bundle_close(b);
  sweep("bundle", op_bundle, path);
}

static void test_state(void) {
  ssmc_options o;
  ssmc_options_init(&o);
  o.backend = SSMC_BACKEND_CPU;
  ssmc_session *s = NULL;
  SSM_ASSERT_OK(ssmc_session_open(ssm_test_path(FIX), &o, &s));
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  int32_t toks[3] = {1, 2, 3};
  SSM_ASSERT_OK(ssmc_session_feed(s, toks, 3, NULL, NULL));
  char path[600];
  snprintf(path, sizeof path, "%s/nomem.state", ssm_test_tmpdir());
  SSM_ASSERT_OK(ssmc_session_save_state(s, path));
  SSM_ASSERT_OK(ssmc_session_reset(s));
  void *u[2] = {s, path};
  sweep("state", op_state, u);
  /* a failed load changed nothing; the last, successful one restored it */
  CU_ASSERT_EQUAL(ssmc_session_position(s), 3);
  ssmc_session_close(s);
}

/* The CLI prints the error and exits 1 (SSMC_TEST_ALLOC_FAIL_AT fails its
 * N-th allocation), for each allocation of a CPU run with a saved state. */
static void test_cli(void) {
  char state[600], cmd[2048], *out = NULL;
  snprintf(state, sizeof state, "%s/cli.state", ssm_test_tmpdir());
  snprintf(cmd, sizeof cmd, "cd %s && %s run " FIX " --backend cpu --tokens 1,2 -n 2 --state-out %s",
           ssm_test_source_dir(), ssm_test_ssmc(), state);
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, &out), 0);
  free(out);
  int failed = 0, rc = 1;
  for (int n = 1; n <= 60 && rc == 1; n++) {
    snprintf(cmd, sizeof cmd, "cd %s && SSMC_TEST_ALLOC_FAIL_AT=%d %s run " FIX " --backend cpu "
             "--tokens 1,2 -n 2 --state-in %s", ssm_test_source_dir(), n, ssm_test_ssmc(), state);
    rc = ssm_test_sh(cmd, &out);
    if (rc == 1) {
      failed++;
      int ok = strstr(out, "ssmc: ") && strstr(out, "out of host memory (") &&
               strstr(out, " bytes wanted)");
      if (!ok) fprintf(stderr, "\n  allocation %d failed, output:\n%s\n", n, out);
      CU_ASSERT(ok);
    } else {
      CU_ASSERT_EQUAL(rc, 0); /* past the last allocation: the run works */
    }
    free(out);
  }
  fprintf(stderr, "\n  ssmc run: %d allocations failed in turn, each an exit 1\n", failed);
  CU_ASSERT(failed > 2);
}

/* Address-space limits (ulimit -v) from too small for the program's own
 * libraries up to enough: `ssmc compile` and a CPU run from text (config,
 * tokenizer, weights, generation) each either work or exit 1 with an
 * "ssmc: " message, never die by a signal (an abort on a failed small
 * allocation, a NULL dereferenced). The Vulkan path is left out: lavapipe
 * itself crashes in pipeline creation when memory runs out. Not under ASan,
 * whose shadow memory needs terabytes of address space. */
static void test_address_space_limits(void) {
#ifdef SSM_TEST_ASAN
  fprintf(stderr, "\n  skipped under ASan\n");
#else
  static const int mib[] = {16, 24, 32, 40, 48, 56, 64, 72, 80, 96, 128, 256};
  const char *what[] = {"compile", "cpu run"};
  int worked[2] = {0}, refused[2] = {0};
  for (size_t i = 0; i < sizeof mib / sizeof *mib; i++)
    for (int w = 0; w < 2; w++) {
      char cmd[2048], *out = NULL;
      if (w == 0)
        snprintf(cmd, sizeof cmd, "cd %s && ulimit -v %d && %s compile " FIX " -o %s/limit.ssmb -q",
                 ssm_test_source_dir(), mib[i] * 1024, ssm_test_ssmc(), ssm_test_tmpdir());
      else
        snprintf(cmd, sizeof cmd, "cd %s && ulimit -v %d && %s run models/pymamba --backend cpu "
                 "--prompt 'def f(x):' -n 3 -q", ssm_test_source_dir(), mib[i] * 1024,
                 ssm_test_ssmc());
      int rc = ssm_test_sh(cmd, &out);
      /* 127: the dynamic loader could not map a library, before main */
      int ok = rc == 0 || rc == 127 || (rc == 1 && strstr(out, "ssmc: "));
      if (!ok) fprintf(stderr, "\n  %s under %d MiB: exit %d\n%s\n", what[w], mib[i], rc, out);
      CU_ASSERT(ok);
      worked[w] += rc == 0;
      refused[w] += rc == 1;
      free(out);
    }
  for (int w = 0; w < 2; w++) {
    fprintf(stderr, "\n  %s: refused under %d limits, worked under %d", what[w], refused[w], worked[w]);
    CU_ASSERT(refused[w] > 0 && worked[w] > 0); /* the range covers both */
  }
#endif
}

int main(void) {
  CU_TestInfo tests[] = {{"config", test_config},
                         {"tokenizer", test_tokenizer},
                         {"safetensors", test_safetensors},
                         {"cpu_weights", test_cpu_weights},
                         {"bundle", test_bundle},
                         {"state", test_state},
                         {"cli", test_cli},
                         {"address_space_limits", test_address_space_limits},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("nomem", tests);
}
