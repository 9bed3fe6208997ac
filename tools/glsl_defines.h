/* glsl_defines.h — for the calibration tools (coopmat_ceiling.c,
 * chain_ceiling.c): a GLSL source with #defines after its #version line. */
#ifndef SSM_TOOLS_GLSL_DEFINES_H
#define SSM_TOOLS_GLSL_DEFINES_H

#include <stdlib.h>
#include <string.h>

/* `src` (whose first line is its #version) with `defines` inserted after
 * that line, malloc'd; NULL when out of memory. */
static inline char *glsl_with_defines(const char *src, const char *defines) {
  const char *nl = strchr(src, '\n') + 1;
  char *text = malloc(strlen(src) + strlen(defines) + 1);
  if (!text) return NULL;
  memcpy(text, src, (size_t)(nl - src));
  strcpy(text + (nl - src), defines);
  strcat(text, nl);
  return text;
}

#endif
