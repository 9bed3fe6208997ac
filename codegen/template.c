/*
 * template.c — expanding kernel templates: {{KEY}} placeholders replaced by
 * values, strictly (a missing value or an unused value is an error, so a
 * typo in a template or generator cannot silently produce a wrong kernel).
 *
 * A template file is a kernel's text, optionally followed by snippets:
 * pieces of code that the generator fills in the same way and places
 * itself (a helper function's body, an op's part of a family's template).
 * A snippet starts at a line `//@ NAME: what it is` and runs to the next
 * such line or the end of the file, less its last line breaks; the kernel's
 * text ends where the first snippet starts. templates/helpers.*.in holds
 * snippets alone.
 */
#include <string.h>

#include "codegen/internal.h"

#define SNIPPET_LINE "//@ "

/* The first of `s` in [p, end), or NULL. */
static const char *find(const char *p, const char *end, const char *s) {
  size_t n = strlen(s);
  for (; (size_t)(end - p) >= n; p++)
    if (!memcmp(p, s, n)) return p;
  return NULL;
}

/* The first line of [p, end) that starts a snippet, or end (p starts a line). */
static const char *snippet_line(const char *p, const char *end) {
  size_t n = strlen(SNIPPET_LINE);
  while (p < end) {
    if ((size_t)(end - p) >= n && !memcmp(p, SNIPPET_LINE, n)) return p;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    p = nl ? nl + 1 : end;
  }
  return end;
}

/* [t, end) with its placeholders replaced by `kv`; `what` names it in errors. */
static ssm_status expand(ssm_arena *a, const char *what, const char *t, const char *end,
                         const char *const *kv, char **out) {
  int nkv = 0;
  while (kv[2 * nkv]) nkv++;
  char used[64] = {0};
  SSM_ASSERT(nkv <= 64);

  ssm_sb buf = {0};
  ssm_status s = NULL;
  const char *p = t;
  while (p < end) {
    const char *open = find(p, end, "{{");
    if (!open) open = end;
    ssm_sb_append(&buf, p, (size_t)(open - p));
    p = open;
    if (p == end) break;
    const char *close = find(p + 2, end, "}}");
    if (!close) {
      s = ssm_status_new(SSM_ERR_INTERNAL, "template %s: unclosed '{{'", what);
      break;
    }
    size_t klen = (size_t)(close - p - 2);
    int found = -1;
    for (int k = 0; k < nkv; k++)
      if (strlen(kv[2 * k]) == klen && !memcmp(kv[2 * k], p + 2, klen)) found = k;
    if (found < 0) {
      s = ssm_status_new(SSM_ERR_INTERNAL, "template %s: no value for {{%.*s}}", what,
                         (int)klen, p + 2);
      break;
    }
    used[found] = 1;
    ssm_sb_append(&buf, kv[2 * found + 1], strlen(kv[2 * found + 1]));
    p = close + 2;
  }
  for (int k = 0; k < nkv && !s; k++)
    if (!used[k])
      s = ssm_status_new(SSM_ERR_INTERNAL, "template %s: value for {{%s}} is never used", what,
                         kv[2 * k]);
  if (!s) s = ssm_sb_status(&buf, what);
  if (!s) *out = ssm_arena_strdup(a, ssm_sb_str(&buf));
  ssm_sb_free(&buf);
  return s;
}

/* The text of templates/<family>.<lang>.in in *out (its name in `file`). */
static ssm_status template_text(const char *family, ssm_lang lang, char *file, size_t size,
                                const char **out) {
  snprintf(file, size, "%s.%s.in", family, ssm_cg_langs[lang].name);
  *out = ssm_templates_embedded(file);
  if (!*out) return ssm_status_new(SSM_ERR_INTERNAL, "no kernel template '%s'", file);
  return NULL;
}

ssm_status ssm_cg_template_expand(ssm_arena *a, const char *family, ssm_lang lang,
                                  const char *const *kv, char **out) {
  *out = NULL;
  char file[128];
  const char *t;
  SSM_TRY(template_text(family, lang, file, sizeof file, &t));
  const char *end = t + strlen(t);
  return expand(a, file, t, snippet_line(t, end), kv, out);
}

ssm_status ssm_cg_snippet_expand(ssm_arena *a, const char *family, ssm_lang lang,
                                 const char *name, const char *const *kv, char **out) {
  *out = NULL;
  char file[128];
  const char *t;
  SSM_TRY(template_text(family, lang, file, sizeof file, &t));
  const char *end = t + strlen(t);
  size_t n = strlen(name);
  for (const char *p = snippet_line(t, end); p < end;) {
    const char *at = p + strlen(SNIPPET_LINE), *nl = memchr(p, '\n', (size_t)(end - p));
    const char *body = nl ? nl + 1 : end, *next = snippet_line(body, end);
    if ((size_t)(end - at) > n && !memcmp(at, name, n) && strchr(":\n ", at[n])) {
      const char *last = next;
      while (last > body && last[-1] == '\n') last--;
      char what[256];
      snprintf(what, sizeof what, "%s, snippet %s", file, name);
      return expand(a, what, body, last, kv, out);
    }
    p = next;
  }
  return ssm_status_new(SSM_ERR_INTERNAL, "template %s has no snippet '%s'", file, name);
}

/* ---- text for the generators ------------------------------------------- */

/* The text of `b` copied into the arena; empties `b`. */
const char *ssm_cg_take(ssm_sb *b, ssm_arena *a) {
  const char *r = ssm_arena_strdup(a, ssm_sb_str(b));
  ssm_sb_free(b);
  return r;
}

/* Snippet `name` of templates/<family>.<lang>.in with `kv` (template.c);
 * a failure is the group's error, and gives "". */
const char *ssm_cg_snippet(cg_ctx *c, const char *family, const char *name,
                           const char *const *kv) {
  char *s;
  ssm_status st = ssm_cg_snippet_expand(c->a, family, c->lang, name, kv, &s);
  if (!st) return s;
  if (!c->err) c->err = st;
  else ssm_status_free(st);
  return "";
}
