/*
 * lang.c — the kernel languages' spellings (lang.def) as a table, one entry
 * per language, and the substitution of their arguments.
 */
#include <stdarg.h>
#include <string.h>

#include "codegen/internal.h"

const ssm_cg_lang ssm_cg_langs[SSM_LANG_COUNT] = {
    [SSM_LANG_GLSL] = {
#define SPELL(field, glsl, wgsl) .field = glsl,
#define HAS(field, glsl, wgsl) .field = glsl,
#include "codegen/lang.def"
#undef SPELL
#undef HAS
    },
    [SSM_LANG_WGSL] = {
#define SPELL(field, glsl, wgsl) .field = wgsl,
#define HAS(field, glsl, wgsl) .field = wgsl,
#include "codegen/lang.def"
#undef SPELL
#undef HAS
    },
};

static void vspell(ssm_sb *b, const char *pattern, va_list ap) {
  const char *args[9];
  int n = 0;
  for (const char *p = pattern; (p = strchr(p, '$')); p++) {
    SSM_ASSERT(p[1] >= '1' && p[1] <= '9');
    if (p[1] - '0' > n) n = p[1] - '0';
  }
  for (int i = 0; i < n; i++) args[i] = va_arg(ap, const char *);
  for (const char *mark; (mark = strchr(pattern, '$')); pattern = mark + 2) {
    ssm_sb_append(b, pattern, (size_t)(mark - pattern));
    const char *arg = args[mark[1] - '1'];
    ssm_sb_append(b, arg, strlen(arg));
  }
  ssm_sb_append(b, pattern, strlen(pattern));
}

void ssm_cg_spell(ssm_sb *b, const char *pattern, ...) {
  va_list ap;
  va_start(ap, pattern);
  vspell(b, pattern, ap);
  va_end(ap);
}

const char *ssm_cg_spelled(ssm_arena *a, const char *pattern, ...) {
  ssm_sb b = {0};
  va_list ap;
  va_start(ap, pattern);
  vspell(&b, pattern, ap);
  va_end(ap);
  const char *r = ssm_arena_strdup(a, ssm_sb_str(&b));
  ssm_sb_free(&b);
  return r;
}
