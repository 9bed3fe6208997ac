/*
 * json.c — reading JSON (cJSON) the one way every file ssmc reads wants it:
 * an error names the file, line and column; an object that gives a key
 * twice is refused (Python's json, and so transformers, would keep the last
 * one silently, cJSON the first: either way a reader could see another
 * model than the author meant).
 */
#include <cjson/cJSON.h>
#include <string.h>

#include "base/base.h"

/* The first key given twice in an object under `j` in *out_dup, with its
 * place in *path ("model.vocab"); NULL when there is none. */
static ssm_status duplicate_key(const cJSON *j, ssm_sb *path, const char **out_dup) {
  *out_dup = NULL;
  if (!cJSON_IsObject(j) && !cJSON_IsArray(j)) return NULL;
  ssm_strmap seen = {0};
  ssm_status s = NULL;
  size_t at = path->n;
  int index = 0;
  for (const cJSON *c = j->child; c && !*out_dup && !s; c = c->next, index++) {
    if (cJSON_IsObject(j)) {
      int found;
      void **slot;
      s = ssm_strmap_slot(&seen, c->string ? c->string : "", &found, &slot);
      if (s) break;
      if (found) {
        *out_dup = c->string;
        break;
      }
      ssm_sb_printf(path, "%s%s", at ? "." : "", c->string);
    } else {
      ssm_sb_printf(path, "[%d]", index);
    }
    s = duplicate_key(c, path, out_dup);
    if (!*out_dup) {
      path->n = at;
      if (path->s) path->s[at] = 0;
    }
  }
  ssm_strmap_free(&seen);
  return s;
}

ssm_status ssm_json_parse(const char *name, const char *text, size_t len, cJSON **out) {
  *out = NULL;
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  while (j && end && end < text + len && (*end == ' ' || *end == '\t' || *end == '\n' ||
                                          *end == '\r'))
    end++;
  if (j && end && end < text + len && *end) { /* text after the value */
    cJSON_Delete(j);
    j = NULL;
  }
  if (!j) {
    int line = 1, col = 1;
    for (const char *c = text; end && c < end && c < text + len; c++) {
      if (*c == '\n') line++, col = 1;
      else col++;
    }
    return ssm_status_new(SSM_ERR_INVALID, "%s:%d:%d: not valid JSON", name, line, col);
  }
  ssm_sb path = {0};
  const char *dup;
  ssm_status ds = duplicate_key(j, &path, &dup);
  if (!ds) ds = ssm_sb_status(&path, "the place of a key");
  if (ds) {
    ssm_sb_free(&path);
    cJSON_Delete(j);
    return ssm_status_wrap(ds, "%s: checking for keys given twice", name);
  }
  if (dup) {
    ssm_status s = ssm_status_new(SSM_ERR_INVALID, "%s: the key '%s' is given twice in %s%s",
                                  name, dup, path.n ? "the object at " : "the top object",
                                  ssm_sb_str(&path));
    ssm_sb_free(&path);
    cJSON_Delete(j);
    return s;
  }
  ssm_sb_free(&path);
  *out = j;
  return NULL;
}
