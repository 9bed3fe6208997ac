/* glsl_defines.h — for the calibration tools (coopmat_ceiling.c,
 * chain_ceiling.c): a GLSL source compiled with #defines after its #version
 * line. */
#ifndef SSM_TOOLS_GLSL_DEFINES_H
#define SSM_TOOLS_GLSL_DEFINES_H

#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"

/* `src` (whose first line is its #version) with `defines` inserted after
 * that line, compiled to SPIR-V as ssm_cg_compile_glsl does (*words is the
 * caller's to free). */
static inline ssm_status glsl_spirv(const char *src, const char *defines, const char *name,
                                    uint32_t **words, size_t *count) {
  const char *nl = strchr(src, '\n') + 1;
  char *text = malloc(strlen(src) + strlen(defines) + 1);
  if (!text) return ssm_status_new(SSM_ERR_NOMEM, "%s: out of memory for its source", name);
  memcpy(text, src, (size_t)(nl - src));
  strcpy(text + (nl - src), defines);
  strcat(text, nl);
  ssm_status s = ssm_cg_compile_glsl(text, name, words, count);
  free(text);
  return s;
}

#endif
