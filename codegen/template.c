/*
 * template.c — expanding kernel templates: {{KEY}} placeholders replaced by
 * values, strictly (a missing value or an unused value is an error, so a
 * typo in a template or generator cannot silently produce a wrong kernel).
 */
#include <string.h>

#include "codegen/codegen.h"

ssm_status ssm_cg_template_expand(ssm_arena *a, const char *family, ssm_lang lang,
                                  const char *const *kv, char **out) {
  *out = NULL;
  char file[128];
  snprintf(file, sizeof file, "%s.%s.in", family, lang == SSM_LANG_WGSL ? "wgsl" : "glsl");
  const char *t = ssm_templates_embedded(file);
  if (!t) return ssm_status_new(SSM_ERR_INTERNAL, "no kernel template '%s'", file);
  int nkv = 0;
  while (kv[2 * nkv]) nkv++;
  char used[64] = {0};
  SSM_ASSERT(nkv <= 64);

  ssm_sb buf = {0};
  ssm_status s = NULL;
  const char *p = t;
  while (*p) {
    const char *open = strstr(p, "{{");
    if (!open) open = p + strlen(p);
    ssm_sb_append(&buf, p, (size_t)(open - p));
    p = open;
    if (!*p) break;
    const char *close = strstr(p + 2, "}}");
    if (!close) {
      s = ssm_status_new(SSM_ERR_INTERNAL, "template %s: unclosed '{{'", file);
      break;
    }
    size_t klen = (size_t)(close - p - 2);
    int found = -1;
    for (int k = 0; k < nkv; k++)
      if (strlen(kv[2 * k]) == klen && !memcmp(kv[2 * k], p + 2, klen)) found = k;
    if (found < 0) {
      s = ssm_status_new(SSM_ERR_INTERNAL, "template %s: no value for {{%.*s}}", file,
                         (int)klen, p + 2);
      break;
    }
    used[found] = 1;
    ssm_sb_append(&buf, kv[2 * found + 1], strlen(kv[2 * found + 1]));
    p = close + 2;
  }
  for (int k = 0; k < nkv && !s; k++)
    if (!used[k])
      s = ssm_status_new(SSM_ERR_INTERNAL, "template %s: value for {{%s}} is never used", file,
                         kv[2 * k]);
  if (!s) s = ssm_sb_status(&buf, file);
  if (!s) *out = ssm_arena_strdup(a, ssm_sb_str(&buf));
  ssm_sb_free(&buf);
  return s;
}
