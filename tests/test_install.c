/*
 * test_install.c — the library as a user gets it: `cmake --install` puts
 * the static and shared libraries, the header, ssmc.pc, the ssmc binary and
 * the model YAMLs under a prefix; examples/generate.c, which includes only
 * <ssmc.h>, builds against that tree through pkg-config (and statically
 * against libssmc.a) and generates text from models/pymamba.
 */
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"

static char prefix[512];

static void install_tree(void) {
  if (prefix[0]) return;
  snprintf(prefix, sizeof prefix, "%s/prefix", ssm_test_tmpdir());
  char cmd[2048], *out;
  snprintf(cmd, sizeof cmd, "%s --install %s --prefix %s", SSM_CMAKE, SSM_BINARY_DIR, prefix);
  int rc = ssm_test_sh(cmd, &out);
  if (rc) fprintf(stderr, "\n  %s -> %d\n%s\n", cmd, rc, out);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  free(out);
}

static void test_installed_files(void) {
  install_tree();
  static const char *const files[] = {"include/ssmc.h", "lib/libssmc.a", "lib/libssmc.so",
                                      "lib/pkgconfig/ssmc.pc", "bin/ssmc",
                                      "share/ssmc/models/mamba1.yaml",
                                      "share/ssmc/models/jamba.yaml"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", prefix, files[i]);
    if (stat(path, &st)) fprintf(stderr, "\n  missing: %s\n", path);
    CU_ASSERT(!stat(path, &st) && st.st_size > 0);
  }
  /* the shared library exports the public API and nothing else */
  char cmd[1024], *out;
  snprintf(cmd, sizeof cmd, "nm -D --defined-only %s/lib/libssmc.so | awk '{print $3}' | "
           "grep -v '^ssmc_' | grep -v '^$' | grep -v '^SSMC' ; true", prefix);
  ssm_test_sh(cmd, &out);
  if (*out) fprintf(stderr, "\n  exported beyond ssmc_*: %.400s\n", out);
  CU_ASSERT_STRING_EQUAL(out, "");
  free(out);
  snprintf(cmd, sizeof cmd, "%s/bin/ssmc --version", prefix);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &out), 0);
  CU_ASSERT_EQUAL(strncmp(out, "ssmc ", 5), 0);
  free(out);
}

/* Builds examples/generate.c with `how` (a compiler command line tail) and
 * runs it on models/pymamba. */
static void check_example(const char *exe, const char *how) {
  install_tree();
  char cmd[8192], *out;
  snprintf(cmd, sizeof cmd, "cd %s && %s examples/generate.c -o %s/%s %s", ssm_test_source_dir(),
           SSM_CC, ssm_test_tmpdir(), exe, how);
  int rc = ssm_test_sh(cmd, &out);
  if (rc) fprintf(stderr, "\n  %s -> %d\n%s\n", cmd, rc, out);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  free(out);
  snprintf(cmd, sizeof cmd, "cd %s && %s/%s models/pymamba 'def fibonacci(n):' 24",
           ssm_test_source_dir(), ssm_test_tmpdir(), exe);
  rc = ssm_test_sh(cmd, &out);
  if (rc) fprintf(stderr, "\n  %s -> %d\n%s\n", cmd, rc, out);
  CU_ASSERT_EQUAL(rc, 0);
  CU_ASSERT_EQUAL(strncmp(out, "def fibonacci(n):", 17), 0);
  CU_ASSERT(strlen(out) > 17 + 10); /* it went on */
  free(out);
  /* a bad model is a message, not a crash */
  snprintf(cmd, sizeof cmd, "%s/%s /nonexistent/model hi 2", ssm_test_tmpdir(), exe);
  rc = ssm_test_sh(cmd, &out);
  CU_ASSERT_EQUAL(rc, 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "generate: /nonexistent/model"));
  free(out);
}

static void test_example_pkg_config(void) {
  char how[2048];
  install_tree();
  snprintf(how, sizeof how, "$(PKG_CONFIG_PATH=%s/lib/pkgconfig pkg-config --cflags --libs ssmc)",
           prefix);
  check_example("generate", how);
}

static void test_example_static(void) {
  char how[2048];
  install_tree();
  snprintf(how, sizeof how, "-I%s/include %s/lib/libssmc.a "
           "$(PKG_CONFIG_PATH=%s/lib/pkgconfig pkg-config --static --libs-only-other "
           "--libs-only-l ssmc | sed 's/-lssmc //')", prefix, prefix, prefix);
  check_example("generate-static", how);
}

int main(void) {
  CU_TestInfo tests[] = {{"installed_files", test_installed_files},
                         {"example_pkg_config", test_example_pkg_config},
                         {"example_static", test_example_static},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("install", tests);
}
