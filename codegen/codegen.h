/*
 * codegen.h — the codegen layer: turning kernels into code a device runs.
 * For now it holds the GLSL → SPIR-V step (shaderc.c); kernel templates and
 * WGSL emission join it here.
 */
#ifndef SSM_CODEGEN_H
#define SSM_CODEGEN_H

#include "base.h"

/* ---- GLSL → SPIR-V (shaderc.c) ------------------------------------------ */

/* Compiles the GLSL compute shader `source` with libshaderc for Vulkan 1.1 /
 * SPIR-V 1.3, optimized for performance, entry point "main". `name` (e.g.
 * "axpb.comp") appears in diagnostics. On success *out_words is a malloc'd
 * SPIR-V module (free() it) of *out_count 32-bit words; on failure the status
 * (SSM_ERR_INVALID) says "compiling 'NAME': " followed by the compiler's
 * messages, which start with NAME:LINE. */
ssm_status ssm_cg_compile_glsl(const char *source, const char *name, uint32_t **out_words,
                               size_t *out_count);

#endif
