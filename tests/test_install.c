/*
 * test_install.c — the library as a user gets it: `cmake --install` puts
 * the static and shared libraries (the whole one and the runtime-only one),
 * the header, ssmc.pc and ssmc-runtime.pc, the ssmc binary and the model
 * YAMLs under a prefix; examples/generate.c, which includes only <ssmc.h>,
 * builds against that tree through pkg-config (and statically against
 * libssmc.a) and generates text from models/pymamba; examples/together.c
 * continues three prompts in the batched program's slots, each as `ssmc
 * run` does alone; examples/run_bundle.c
 * builds against ssmc-runtime, holds no compiler, and runs a bundle. A build
 * configured with SSM_BUILD_COMPILER=OFF needs neither shaderc nor libyaml.
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
                                      "lib/pkgconfig/ssmc.pc", "lib/libssmc-runtime.a",
                                      "lib/libssmc-runtime.so", "lib/pkgconfig/ssmc-runtime.pc",
                                      "bin/ssmc",
                                      "share/ssmc/models/mamba1.yaml",
                                      "share/ssmc/models/jamba.yaml"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", prefix, files[i]);
    if (stat(path, &st)) fprintf(stderr, "\n  missing: %s\n", path);
    CU_ASSERT(!stat(path, &st) && st.st_size > 0);
  }
  /* the shared libraries export the public API and nothing else */
  char cmd[1024], *out;
  static const char *const libs[] = {"libssmc.so", "libssmc-runtime.so"};
  for (int i = 0; i < 2; i++) {
    snprintf(cmd, sizeof cmd, "nm -D --defined-only %s/lib/%s | awk '{print $3}' | "
             "grep -v '^ssmc_' | grep -v '^$' | grep -v '^SSMC' ; true", prefix, libs[i]);
    ssm_test_sh(cmd, &out);
    if (*out) fprintf(stderr, "\n  %s exports beyond ssmc_*: %.400s\n", libs[i], out);
    CU_ASSERT_STRING_EQUAL(out, "");
    free(out);
  }
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

/* `cmd` (a shell line) succeeds; its output goes to *out (may be NULL). */
static void run_ok(const char *cmd, char **out) {
  char *o;
  int rc = ssm_test_sh(cmd, &o);
  if (rc) fprintf(stderr, "\n  %s -> %d\n%s\n", cmd, rc, o);
  CU_ASSERT_EQUAL_FATAL(rc, 0);
  if (out) *out = o;
  else free(o);
}

/* examples/together.c: three prompts continued in one batched step each
 * token, each the text `ssmc run --greedy` gives it alone. */
static void test_example_together(void) {
  install_tree();
  char cmd[8192], *out, *want;
  const char *tmp = ssm_test_tmpdir();
  snprintf(cmd, sizeof cmd, "cd %s && %s examples/together.c -o %s/together "
           "$(PKG_CONFIG_PATH=%s/lib/pkgconfig pkg-config --cflags --libs ssmc)",
           ssm_test_source_dir(), SSM_CC, tmp, prefix);
  run_ok(cmd, NULL);
  snprintf(cmd, sizeof cmd, "cd %s && %s/together models/pymamba 20 'def fibonacci(n):' "
           "'class Stack:' 'import os'", ssm_test_source_dir(), tmp);
  run_ok(cmd, &out);
  snprintf(cmd, sizeof cmd, "cd %s && for p in 'def fibonacci(n):' 'class Stack:' 'import os'; do "
           "%s/bin/ssmc run models/pymamba --prompt \"$p\" -n 20 -q --greedy; echo ----; done",
           ssm_test_source_dir(), prefix);
  run_ok(cmd, &want);
  CU_ASSERT_STRING_EQUAL(out, want);
  free(out);
  free(want);
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

/* Symbols of the compiler half: shaderc, glslang, SPIRV-Tools, libyaml and
 * the compiler's own layers. */
#define COMPILER_SYMBOLS "'shaderc|glslang|spvtools|yaml_parser|ssm_compile|ssm_cg_|ssm_model_open'"

static void test_runtime_example(void) {
  install_tree();
  char cmd[8192], *out;
  const char *tmp = ssm_test_tmpdir();
  snprintf(cmd, sizeof cmd, "cd %s && %s/bin/ssmc compile models/pymamba -o %s/pymamba.ssmb -q",
           ssm_test_source_dir(), prefix, tmp);
  run_ok(cmd, NULL);
  snprintf(cmd, sizeof cmd, "cd %s && %s examples/run_bundle.c -o %s/run_bundle "
           "$(PKG_CONFIG_PATH=%s/lib/pkgconfig pkg-config --cflags --libs ssmc-runtime)",
           ssm_test_source_dir(), SSM_CC, tmp, prefix);
  run_ok(cmd, NULL);
  /* no compiler in the binary or the library it loads, and no libyaml */
  snprintf(cmd, sizeof cmd, "nm %s/run_bundle; nm -D %s/lib/libssmc-runtime.so; "
           "nm %s/lib/libssmc-runtime.a 2>/dev/null; ldd %s/run_bundle",
           tmp, prefix, prefix, tmp);
  run_ok(cmd, &out);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "ssmc_session_open"));
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "libssmc-runtime.so"));
  free(out);
  snprintf(cmd, sizeof cmd, "(nm %s/run_bundle; nm %s/lib/libssmc-runtime.so; "
           "nm %s/lib/libssmc-runtime.a; ldd %s/run_bundle) 2>&1 | grep -iE " COMPILER_SYMBOLS
           "; true", tmp, prefix, prefix, tmp);
  run_ok(cmd, &out);
  if (*out) fprintf(stderr, "\n  the runtime holds the compiler: %.400s\n", out);
  CU_ASSERT_STRING_EQUAL(out, "");
  free(out);
  snprintf(cmd, sizeof cmd, "cd %s && %s/run_bundle %s/pymamba.ssmb models/pymamba "
           "'def fibonacci(n):' 24", ssm_test_source_dir(), tmp, tmp);
  run_ok(cmd, &out);
  CU_ASSERT_EQUAL(strncmp(out, "def fibonacci(n):", 17), 0);
  CU_ASSERT(strlen(out) > 17 + 10); /* it went on */
  /* the same text as the whole library's ssmc gives */
  char *want;
  snprintf(cmd, sizeof cmd, "cd %s && %s/bin/ssmc run %s/pymamba.ssmb --weights models/pymamba "
           "--prompt 'def fibonacci(n):' -n 24 -q --greedy", ssm_test_source_dir(), prefix, tmp);
  run_ok(cmd, &want);
  CU_ASSERT_STRING_EQUAL(out, want);
  free(want);
  free(out);
  /* a model directory needs the compiler: a message that says so */
  snprintf(cmd, sizeof cmd, "cd %s && %s/run_bundle models/pymamba models/pymamba hi 2",
           ssm_test_source_dir(), tmp);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &out), 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "models/pymamba: not a compiled bundle"));
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "ssmc compile"));
  free(out);
}

/* SSM_BUILD_COMPILER=OFF configures and builds the runtime library with
 * neither shaderc nor libyaml looked for or linked. */
static void test_runtime_only_build(void) {
  char cmd[4096], *out;
  const char *tmp = ssm_test_tmpdir();
  snprintf(cmd, sizeof cmd, "%s -S %s -B %s/rt-build -DSSM_BUILD_COMPILER=OFF 2>&1 && "
           "%s --build %s/rt-build -j2 2>&1", SSM_CMAKE, ssm_test_source_dir(), tmp,
           SSM_CMAKE, tmp);
  run_ok(cmd, &out);
  free(out);
  snprintf(cmd, sizeof cmd, "grep -E '^(SHADERC|YAML|CUNIT)_' %s/rt-build/CMakeCache.txt; "
           "ls %s/rt-build | grep -E '^(ssmc|test_[a-z]+)$' ; "
           "(nm %s/rt-build/libssmc-runtime.a; ldd %s/rt-build/libssmc-runtime.so) 2>&1 | "
           "grep -iE " COMPILER_SYMBOLS "; true", tmp, tmp, tmp, tmp);
  run_ok(cmd, &out);
  if (*out) fprintf(stderr, "\n  a runtime-only build has: %.400s\n", out);
  CU_ASSERT_STRING_EQUAL(out, "");
  free(out);
}

int main(void) {
  CU_TestInfo tests[] = {{"installed_files", test_installed_files},
                         {"example_pkg_config", test_example_pkg_config},
                         {"example_static", test_example_static},
                         {"example_together", test_example_together},
                         {"runtime_example", test_runtime_example},
                         {"runtime_only_build", test_runtime_only_build},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("install", tests);
}
