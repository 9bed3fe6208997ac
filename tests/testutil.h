/*
 * testutil.h — helpers shared by the CUnit suites: running a suite from
 * main, paths into the source tree, temp files, and status assertions.
 */
#ifndef SSM_TESTUTIL_H
#define SSM_TESTUTIL_H

#include <CUnit/Basic.h>

#include "ir/ir.h"

/* Runs the suites registered by `add`, prints CUnit's summary, returns the
 * process exit status (non-zero when any assertion failed). */
int ssm_test_main(const char *suite, CU_TestInfo *tests);

/* The source tree (env SSM_TEST_SOURCE_DIR, else the configured one) and the
 * ssmc executable (env SSM_TEST_SSMC, else the built one), so a build can be
 * run from another place (e.g. copied to a GPU machine). */
const char *ssm_test_source_dir(void);
const char *ssm_test_ssmc(void);

/* source dir "/" rel, in a static rotating buffer. */
const char *ssm_test_path(const char *rel);

/* A fresh temporary directory (removed at exit is not guaranteed). */
const char *ssm_test_tmpdir(void);

/* Writes `n` bytes to a new file under the temp dir; returns its path. */
const char *ssm_test_write(const char *name, const void *data, size_t n);

/* Writes an F32 .safetensors file `name` in the temp dir holding n tensors
 * (names[i], types[i]'s shape, data[i]) in order; returns its path. */
const char *ssm_test_write_safetensors(const char *name, int n, const char *const *names,
                                       const ssm_type *types, const float *const *data);

/* Fails the test and returns from it when the Vulkan context `vk` (that a
 * suite's first test opens) is missing. */
#define SSM_NEED_VK(vk)                                                         \
  do {                                                                          \
    if (!(vk)) {                                                                \
      CU_FAIL("no Vulkan context");                                             \
      return;                                                                   \
    }                                                                           \
  } while (0)

/* Asserts `s` is an error whose message contains `needle`; frees it. */
#define SSM_ASSERT_ERR(s, needle)                                               \
  do {                                                                          \
    ssm_status s_ = (s);                                                        \
    CU_ASSERT_PTR_NOT_NULL(s_);                                                 \
    if (s_) {                                                                   \
      if (!strstr(ssm_status_message(s_), (needle)))                            \
        fprintf(stderr, "\n  message '%s' lacks '%s'\n", ssm_status_message(s_), \
                (needle));                                                      \
      CU_ASSERT_PTR_NOT_NULL(strstr(ssm_status_message(s_), (needle)));         \
      ssm_status_free(s_);                                                      \
    }                                                                           \
  } while (0)

/* Asserts `s` is success; prints the message otherwise. */
#define SSM_ASSERT_OK(s)                                                        \
  do {                                                                          \
    ssm_status s_ = (s);                                                        \
    if (s_) fprintf(stderr, "\n  unexpected error: %s\n", ssm_status_message(s_)); \
    CU_ASSERT_PTR_NULL(s_);                                                     \
    ssm_status_free(s_);                                                        \
  } while (0)

/* Limits the size of files this process writes to `bytes` (SIGXFSZ
 * ignored, so a write past it fails with EFBIG), or lifts the limit again
 * with 0: for tests of writes that fail half-way. */
void ssm_test_limit_file_size(size_t bytes);

/* The anonymous resident set of this process in KiB (RssAnon of
 * /proc/self/status; asserts it is read): what a leak grows. VmRSS also
 * counts the pages of mapped libraries (lavapipe's LLVM is tens of MB),
 * which a loaded machine evicts and reads back at any time. */
long ssm_test_rss_anon_kib(void);

/* In a suite that measures its resident set: under ASan, a small
 * quarantine (ASan keeps 256 MB of freed memory by default, which would
 * read as growth), smaller than the 2 MiB of growth the suites allow.
 * Write it once at file scope. */
#if defined(__SANITIZE_ADDRESS__)
#define SSM_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SSM_TEST_ASAN 1
#endif
#endif
#ifdef SSM_TEST_ASAN
#define SSM_TEST_SMALL_ASAN_QUARANTINE                                          \
  const char *__asan_default_options(void);                                     \
  const char *__asan_default_options(void) { return "quarantine_size_mb=1"; }
#else
#define SSM_TEST_SMALL_ASAN_QUARANTINE
#endif

/* Runs a shell command, captures stdout+stderr into a malloc'd string;
 * returns the exit status. */
int ssm_test_sh(const char *cmd, char **out_output);

/* The status-returning constructors and printers, for tests that expect
 * them to work: a failure is a failed assertion (fatal for the test). */
ssm_graph *ssm_test_graph(const char *name);
char *ssm_test_print(ssm_graph *g);
ssm_arena *ssm_test_arena(void);
char *ssm_test_take(ssm_sb *b);

#endif
