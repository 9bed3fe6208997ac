/*
 * shaderc.c — GLSL compute shaders to SPIR-V through libshaderc, so that the
 * runtime only ever sees SPIR-V and needs no shader compiler.
 */
#include <shaderc/shaderc.h>
#include <string.h>

#include "codegen/codegen.h"

ssm_status ssm_cg_compile_glsl(const char *source, const char *name, uint32_t **out_words,
                               size_t *out_count) {
  *out_words = NULL;
  *out_count = 0;
  if (!name) name = "shader.comp";
  shaderc_compiler_t compiler = shaderc_compiler_initialize();
  shaderc_compile_options_t opts = shaderc_compile_options_initialize();
  if (!compiler || !opts) {
    shaderc_compile_options_release(opts);
    shaderc_compiler_release(compiler);
    return ssm_status_new(SSM_ERR_NOMEM, "compiling '%s': cannot initialize shaderc", name);
  }
  shaderc_compile_options_set_source_language(opts, shaderc_source_language_glsl);
  shaderc_compile_options_set_target_env(opts, shaderc_target_env_vulkan,
                                         shaderc_env_version_vulkan_1_1);
  shaderc_compile_options_set_target_spirv(opts, shaderc_spirv_version_1_3);
  /* Debian 12's SPIRV-Tools (2023.1) crashes folding arithmetic on
   * cooperative matrices: those kernels go to the driver unoptimized (its
   * own compiler does the work either way) */
  shaderc_compile_options_set_optimization_level(
      opts, strstr(source, "GL_NV_cooperative_matrix") ? shaderc_optimization_level_zero
                                                       : shaderc_optimization_level_performance);
  shaderc_compilation_result_t res =
      shaderc_compile_into_spv(compiler, source, strlen(source), shaderc_compute_shader, name,
                               "main", opts);
  ssm_status s = NULL;
  shaderc_compilation_status st = res ? shaderc_result_get_compilation_status(res)
                                      : shaderc_compilation_status_internal_error;
  if (st != shaderc_compilation_status_success) {
    const char *msg = res ? shaderc_result_get_error_message(res) : NULL;
    size_t len = msg ? strlen(msg) : 0;
    while (len && (msg[len - 1] == '\n' || msg[len - 1] == ' ')) len--;
    if (len)
      s = ssm_status_new(SSM_ERR_INVALID, "compiling '%s': %.*s", name, (int)len, msg);
    else /* no message: glslang gave up inside (seen when host memory runs out) */
      s = ssm_status_new(st == shaderc_compilation_status_compilation_error ? SSM_ERR_INVALID
                                                                             : SSM_ERR_INTERNAL,
                         "compiling '%s': shaderc failed without a message (status %d; is host "
                         "memory exhausted?)", name, (int)st);
  } else {
    if (shaderc_result_get_num_warnings(res))
      ssm_log("compiling '%s': %s", name, shaderc_result_get_error_message(res));
    size_t bytes = shaderc_result_get_length(res);
    uint32_t *words = malloc(bytes ? bytes : 4);
    if (!words) {
      s = ssm_status_new(SSM_ERR_NOMEM, "compiling '%s': out of host memory", name);
    } else {
      memcpy(words, shaderc_result_get_bytes(res), bytes);
      *out_words = words;
      *out_count = bytes / 4;
    }
  }
  shaderc_result_release(res);
  shaderc_compile_options_release(opts);
  shaderc_compiler_release(compiler);
  return s;
}
