/*
 * test_layers.c — the tree's layering is enforced by the build: each
 * folder's library compiles with an include root (build/layers/<lib>/) that
 * holds only its own folder and the folders of the layers under it, so an
 * upward include ("runtime/ssmc.h" from ir/) is a compile error, while
 * including its own and lower layers works; and no source reaches around
 * the roots with a relative "../" include.
 */
#include <string.h>

#include "testutil.h"

/* Compiles `#include "<header>"` with layer `lib`'s include root; returns
 * the compiler's exit status. */
static int compile_with(const char *lib, const char *header) {
  char src[600], cmd[2048];
  snprintf(src, sizeof src, "%s/inc-%s.c", ssm_test_tmpdir(), lib);
  FILE *f = fopen(src, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fprintf(f, "#include \"%s\"\nint ssm_layer_probe;\n", header);
  fclose(f);
  snprintf(cmd, sizeof cmd, "%s -std=c11 -fsyntax-only -I%s/layers/%s $(pkg-config --cflags "
           "libcjson yaml-0.1 vulkan) %s", SSM_CC, SSM_BINARY_DIR, lib, src);
  return ssm_test_sh(cmd, NULL);
}

static void test_upward_includes_fail(void) {
  static const struct {
    const char *lib, *header;
    int ok;
  } cases[] = {
      {"ssm_base", "base/base.h", 1},          {"ssm_base", "ir/ir.h", 0},
      {"ssm_ir", "ir/ir.h", 1},                {"ssm_ir", "frontend/frontend.h", 0},
      {"ssm_ir", "runtime/ssmc.h", 0},         {"ssm_ir", "bundle/bundle.h", 0},
      {"ssm_bundle", "bundle/bundle.h", 1},    {"ssm_bundle", "bundle/abi.h", 1},
      {"ssm_bundle", "codegen/codegen.h", 0},  {"ssm_bundle", "frontend/frontend.h", 0},
      {"ssm_bundle", "tokenizer/tokenizer.h", 0}, {"ssm_bundle", "runtime/backend/backend.h", 0},
      {"ssm_frontend", "frontend/frontend.h", 1}, {"ssm_frontend", "passes/passes.h", 0},
      {"ssm_passes", "passes/passes.h", 1},    {"ssm_passes", "frontend/frontend.h", 0},
      {"ssm_passes", "codegen/codegen.h", 0},  {"ssm_codegen", "codegen/codegen.h", 1},
      {"ssm_codegen", "bundle/abi.h", 1},      {"ssm_codegen", "compile/compile.h", 0},
      {"ssm_compile", "compile/compile.h", 1}, {"ssm_compile", "runtime/ssmc.h", 0},
      {"ssm_compile", "runtime/vulkan/vulkan.h", 0}, {"ssm_tokenizer", "tokenizer/tokenizer.h", 1},
      {"ssm_tokenizer", "ir/ir.h", 0},         {"ssm_weights", "runtime/weights/weights.h", 1},
      {"ssm_weights", "runtime/backend/backend.h", 0}, {"ssm_backend", "runtime/backend/backend.h", 1},
      {"ssm_backend", "runtime/weights/weights.h", 0}, {"ssm_cpu", "runtime/cpu/cpu.h", 1},
      {"ssm_cpu", "runtime/vulkan/vulkan.h", 0}, {"ssm_cpu", "runtime/ssmc.h", 0},
      {"ssm_cpu", "bundle/bundle.h", 0},       {"ssm_vulkan", "runtime/vulkan/vulkan.h", 1},
      {"ssm_vulkan", "runtime/cpu/cpu.h", 0},  {"ssm_vulkan", "runtime/ssmc.h", 0},
      {"ssm_vulkan", "codegen/codegen.h", 0},  {"ssm_runtime", "runtime/ssmc.h", 1},
      {"ssm_runtime", "runtime/internal.h", 1},
      /* the runtime half sees no compiler: bundles in, tokens out */
      {"ssm_runtime", "compile/compile.h", 0}, {"ssm_runtime", "codegen/codegen.h", 0},
      {"ssm_runtime", "frontend/frontend.h", 0}, {"ssm_runtime", "passes/passes.h", 0},
      {"ssm_runtime", "runtime/cpu/cpu.h", 0}, {"ssm_open_bundles", "compile/compile.h", 0},
      {"ssm_open_models", "compile/compile.h", 1}, {"ssm_open_models", "runtime/cpu/cpu.h", 1},
      {"ssm_runtime", "serve/serve.h", 0},     {"ssm_chat", "chat/chat.h", 1},
      {"ssm_chat", "runtime/ssmc.h", 0},       {"ssm_chat", "serve/serve.h", 0},
      {"ssm_serve", "serve/serve.h", 1},       {"ssm_serve", "chat/chat.h", 1},
      {"ssm_serve", "runtime/ssmc.h", 1},      {"ssm_serve", "bundle/bundle.h", 1},
      {"ssm_serve", "compile/compile.h", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc = compile_with(cases[i].lib, cases[i].header);
    if ((rc == 0) != cases[i].ok)
      fprintf(stderr, "\n  %s including %s: %s\n", cases[i].lib, cases[i].header,
              rc ? "does not compile" : "compiles");
    CU_ASSERT_EQUAL(rc == 0, cases[i].ok);
  }
}

/* The runtime half's sources (what libssmc-runtime holds) name no header of
 * the compiler half, so that the runtime-only library links without it. */
static void test_runtime_includes_no_compiler(void) {
  char cmd[1024], *out;
  snprintf(cmd, sizeof cmd, "cd %s && grep -nE '#include \"(compile|codegen|frontend|passes|"
           "runtime/cpu)/' base/*.[ch] ir/*.[ch] bundle/*.[ch] tokenizer/*.[ch] runtime/*.[ch] "
           "runtime/weights/*.[ch] runtime/backend/*.[ch] runtime/vulkan/*.[ch] "
           "runtime/open/bundles.c; true", ssm_test_source_dir());
  ssm_test_sh(cmd, &out);
  if (*out) fprintf(stderr, "\n  %s", out);
  CU_ASSERT_STRING_EQUAL(out, "");
  free(out);
}

static void test_no_relative_includes(void) {
  char cmd[1024], *out;
  snprintf(cmd, sizeof cmd, "cd %s && grep -rn '#include \"\\.\\./' base ir frontend passes "
           "codegen compile bundle tokenizer runtime chat serve cli bench examples tests; true", ssm_test_source_dir());
  ssm_test_sh(cmd, &out);
  if (*out) fprintf(stderr, "\n  %s", out);
  CU_ASSERT_STRING_EQUAL(out, "");
  free(out);
}

int main(void) {
  CU_TestInfo tests[] = {{"upward_includes_fail", test_upward_includes_fail},
                         {"runtime_includes_no_compiler", test_runtime_includes_no_compiler},
                         {"no_relative_includes", test_no_relative_includes},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("layers", tests);
}
