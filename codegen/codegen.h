/*
 * codegen.h — from IR nodes to compute kernels.
 *
 * Each fused group (passes.h) becomes one kernel generated from the template
 * of its anchor's family (templates/<family>.glsl.in, compiled into the
 * binary), specialized with shapes as constants, with generated functions
 * that evaluate the group's absorbed expressions where operands are read and
 * an epilogue where results are written. GLSL is compiled to SPIR-V with
 * libshaderc at compile time, so the runtime needs no shader compiler.
 */
#ifndef SSM_CODEGEN_H
#define SSM_CODEGEN_H

#include "passes/passes.h"

#define SSM_CG_MAX_BINDINGS 32

/* A generated kernel. Strings live in the arena passed to the generator. */
typedef struct {
  const char *family;   /* template name, e.g. "matmul" */
  const char *params;   /* "matmul+add+softplus M=1 K=64 N=256 ...", also in the source */
  const char *glsl;     /* the complete GLSL source */
  int nbindings;
  /* binding i holds this value: 0 is the result, then every tensor the
   * kernel reads (weights, states, inputs, other kernels' results) */
  const ssm_value *bind[SSM_CG_MAX_BINDINGS];
  uint32_t groups[3];   /* dispatch grid */
} ssm_cg_kernel;

/* Generates the kernel of fused group `gr` (passes.h). */
ssm_status ssm_cg_kernel_for_group(ssm_graph *g, const ssm_group *gr, ssm_arena *a,
                                   ssm_cg_kernel *out);
/* Generates a kernel for node `n` alone, whatever its group (kernel tests). */
ssm_status ssm_cg_kernel_for_node(ssm_graph *g, const ssm_node *n, ssm_arena *a,
                                  ssm_cg_kernel *out);

/* Expands template `family` (templates/<family>.glsl.in) with `kv`, a
 * NULL-terminated list of key, value pairs replacing {{KEY}}. A placeholder
 * without a value, or a value for a key that does not occur, is an error. */
ssm_status ssm_cg_template_expand(ssm_arena *a, const char *family,
                                  const char *const *kv, char **out);

/* Compiles GLSL compute source to SPIR-V (Vulkan 1.1 target, optimized for
 * performance). Errors carry `name` and the compiler's messages. The caller
 * frees *out_words. */
ssm_status ssm_cg_compile_glsl(const char *source, const char *name,
                               uint32_t **out_words, size_t *out_count);

/* Embedded templates (templates/<name>.glsl.in): text or NULL. */
const char *ssm_templates_embedded(const char *file);
const char *ssm_templates_embedded_name(int i);

/* Bindings of storage buffers are aligned to this many bytes in a bundle:
 * the largest minStorageBufferOffsetAlignment Vulkan allows, so a bundle
 * works on every device. */
#define SSM_BUNDLE_ALIGN 256

#endif
