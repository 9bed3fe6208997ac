/*
 * shaderc.c — GLSL compute shaders to SPIR-V through libshaderc, so that the
 * runtime only ever sees SPIR-V and needs no shader compiler.
 *
 * Every float add, subtract, multiply, divide and dot product left in a
 * compiled kernel is then decorated NoContraction (what GLSL's `precise`
 * does): a driver may otherwise fuse a * b + c into one rounding where it
 * chooses, and choose differently in two kernels that compute the same
 * value, so that a prefill and the same tokens decoded one by one would no
 * longer give the same logits. The fusions SPIRV-Tools' optimizer makes
 * itself (fma() from a * b + c) are in the SPIR-V, the same on every
 * device. Compiling every kernel unoptimized instead, so that nothing is
 * fused, would lose what the optimizer gains on most kernels (a template
 * that runs better unoptimized asks for it: gemm.glsl.in). The
 * cooperative-matrix kernels are left as they are: their sums differ from
 * the portable kernels' anyway (f16 parts), and the decoration would only
 * cost them time.
 */
#include <shaderc/shaderc.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"

enum { SPV_HEADER = 5, SPV_OP_DECORATE = 71, SPV_NO_CONTRACTION = 42 };

/* Float arithmetic whose result a driver could contract with another op. */
static bool contractible(uint32_t op) {
  switch (op) {
  case 129: /* OpFAdd */
  case 131: /* OpFSub */
  case 133: /* OpFMul */
  case 136: /* OpFDiv */
  case 142: /* OpVectorTimesScalar */
  case 143: /* OpMatrixTimesScalar */
  case 144: /* OpVectorTimesMatrix */
  case 145: /* OpMatrixTimesVector */
  case 146: /* OpMatrixTimesMatrix */
  case 147: /* OpOuterProduct */
  case 148: /* OpDot */
    return true;
  default:
    return false;
  }
}

/* The instructions that may come before a module's annotations end (its
 * capabilities, extensions, imports, memory model, entry points, execution
 * modes, debug names and the annotations themselves). */
static bool preamble(uint32_t op) {
  switch (op) {
  case 2: case 3: case 4: case 5: case 6: case 7:           /* debug */
  case 10: case 11: case 14: case 15: case 16: case 17:     /* mode-setting */
  case 71: case 72: case 73: case 74: case 75: case 332:    /* annotations */
  case 330: case 331: case 5632: case 5633:
    return true;
  default:
    return false;
  }
}

ssm_status ssm_cg_spirv_no_contraction(uint32_t **words, size_t *count) {
  uint32_t *w = *words;
  size_t n = *count, at = 0, add = 0;
  if (n < SPV_HEADER || w[0] != 0x07230203u)
    return ssm_status_new(SSM_ERR_INVALID, "SPIR-V: not a module (%zu words)", n);
  for (size_t i = SPV_HEADER; i < n;) {
    uint32_t op = w[i] & 0xffffu, len = w[i] >> 16;
    if (!len || len > n - i || (contractible(op) && len < 3))
      return ssm_status_new(SSM_ERR_INVALID, "SPIR-V: malformed instruction at word %zu", i);
    if (!at && !preamble(op)) at = i; /* the decorations go here */
    if (contractible(op)) add += 3;
    i += len;
  }
  if (!add) return NULL;
  uint32_t *o = malloc((n + add) * sizeof *o);
  if (!o) return ssm_status_new(SSM_ERR_NOMEM, "SPIR-V: out of host memory");
  memcpy(o, w, at * sizeof *o);
  size_t k = at;
  for (size_t i = at; i < n; i += w[i] >> 16)
    if (contractible(w[i] & 0xffffu)) {
      o[k++] = (3u << 16) | SPV_OP_DECORATE;
      o[k++] = w[i + 2]; /* the result id */
      o[k++] = SPV_NO_CONTRACTION;
    }
  memcpy(o + k, w + at, (n - at) * sizeof *o);
  free(w);
  *words = o;
  *count = n + add;
  return NULL;
}

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
  /* A kernel goes to the driver unoptimized (its own compiler does the work
   * either way) where its source says `#pragma optimize(off)` (GLSL's own
   * pragma, which shaderc ignores), and where it uses cooperative matrices:
   * Debian 12's SPIRV-Tools (2023.1) crashes folding arithmetic on them. */
  shaderc_compile_options_set_optimization_level(
      opts, strstr(source, "#pragma optimize(off)") || strstr(source, "GL_NV_cooperative_matrix")
                ? shaderc_optimization_level_zero
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
      size_t count = bytes / 4;
      if (!strstr(source, "GL_NV_cooperative_matrix"))
        s = ssm_status_wrap(ssm_cg_spirv_no_contraction(&words, &count), "compiling '%s'", name);
      if (s) {
        free(words);
      } else {
        *out_words = words;
        *out_count = count;
      }
    }
  }
  shaderc_result_release(res);
  shaderc_compile_options_release(opts);
  shaderc_compiler_release(compiler);
  return s;
}
