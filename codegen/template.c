/*
 * template.c — expanding kernel templates: {{KEY}} placeholders replaced by
 * values, strictly (a missing value or an unused value is an error, so a
 * typo in a template or generator cannot silently produce a wrong kernel).
 */
#include <string.h>

#include "codegen/codegen.h"

ssm_status ssm_cg_template_expand(ssm_arena *a, const char *family,
                                  const char *const *kv, char **out) {
  *out = NULL;
  char file[128];
  snprintf(file, sizeof file, "%s.glsl.in", family);
  const char *t = ssm_templates_embedded(file);
  if (!t) return ssm_status_new(SSM_ERR_INTERNAL, "no kernel template '%s'", file);
  int nkv = 0;
  while (kv[2 * nkv]) nkv++;
  char used[64] = {0};
  SSM_ASSERT(nkv <= 64);

  size_t cap = strlen(t) + 1, n = 0;
  for (int k = 0; k < nkv; k++) cap += strlen(kv[2 * k + 1]) * 8;
  char *buf = malloc(cap);
  if (!buf) abort();
  const char *p = t;
  while (*p) {
    const char *open = strstr(p, "{{");
    if (!open) open = p + strlen(p);
    size_t lit = (size_t)(open - p);
    memcpy(buf + n, p, lit);
    n += lit;
    p = open;
    if (!*p) break;
    const char *close = strstr(p + 2, "}}");
    if (!close) {
      free(buf);
      return ssm_status_new(SSM_ERR_INTERNAL, "template %s: unclosed '{{'", file);
    }
    size_t klen = (size_t)(close - p - 2);
    int found = -1;
    for (int k = 0; k < nkv; k++)
      if (strlen(kv[2 * k]) == klen && !memcmp(kv[2 * k], p + 2, klen)) found = k;
    if (found < 0) {
      free(buf);
      return ssm_status_new(SSM_ERR_INTERNAL, "template %s: no value for {{%.*s}}", file,
                            (int)klen, p + 2);
    }
    used[found] = 1;
    const char *v = kv[2 * found + 1];
    size_t vlen = strlen(v);
    if (n + vlen + strlen(close) + 1 > cap) {
      cap = (n + vlen + strlen(close) + 1) * 2;
      char *nb = realloc(buf, cap);
      if (!nb) abort();
      buf = nb;
    }
    memcpy(buf + n, v, vlen);
    n += vlen;
    p = close + 2;
  }
  buf[n] = 0;
  for (int k = 0; k < nkv; k++)
    if (!used[k]) {
      free(buf);
      return ssm_status_new(SSM_ERR_INTERNAL, "template %s: value for {{%s}} is never used",
                            file, kv[2 * k]);
    }
  *out = ssm_arena_strdup(a, buf);
  free(buf);
  return NULL;
}
