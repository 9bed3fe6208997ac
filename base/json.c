/*
 * json.c — reading JSON (cJSON) the one way every file ssmc reads wants it:
 * an error names the file, line and column; an object that gives a key
 * twice is refused (Python's json, and so transformers, would keep the last
 * one silently, cJSON the first: either way a reader could see another
 * model than the author meant).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "base/base.h"

#define MAX_PATH_PART 128 /* bytes of one part of a dotted key */

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

static void cut(ssm_sb *b, size_t n) {
  if (n >= b->n) return;
  b->n = n;
  if (b->s) b->s[n] = 0;
}

/* The end (after the closing quote) of the string at text[i] == '"', and
 * whether it holds a NUL. */
static size_t string_end(const char *text, size_t len, size_t i, int *out_nul) {
  *out_nul = 0;
  for (i++; i < len && text[i] != '"'; i++) {
    if (!text[i]) *out_nul = 1;
    if (text[i] != '\\') continue;
    if (i + 5 < len && text[i + 1] == 'u' && !memcmp(text + i + 2, "0000", 4)) *out_nul = 1;
    i++; /* the escaped character (\u's digits are plain ones) */
  }
  return i + 1;
}

/* ssm_json_find_nul's walk; with out_path NULL, only whether there is one
 * (nothing is allocated). */
static int find_nul(const char *text, size_t len, ssm_sb *out_path) {
  struct {
    int object;
    long index;
    size_t at; /* out_path's length before this level's part */
  } level[CJSON_NESTING_LIMIT + 1];
  int depth = 0, want_key = 0;
  ssm_sb none = {0}, *path = out_path ? out_path : &none;
  size_t base = path->n;
  for (size_t i = 0; i < len;) {
    char c = text[i];
    int open = c == '{' || c == '[', close = c == '}' || c == ']';
    if ((open && depth > CJSON_NESTING_LIMIT) || ((close || c == ',') && !depth)) break; /* not JSON */
    if (c == '"') {
      int nul;
      size_t end = string_end(text, len, i, &nul);
      if (want_key && depth && out_path) {
        cut(path, level[depth - 1].at);
        ssm_sb_printf(path, "%s%.*s", path->n > base ? "." : "", (int)(end - i - 2), text + i + 1);
      }
      want_key = 0;
      if (nul) return 1;
      i = end;
      continue;
    }
    if (open) {
      level[depth].object = c == '{';
      level[depth].index = 0;
      level[depth++].at = path->n;
      if (c == '[' && out_path) ssm_sb_printf(path, "[0]");
      want_key = c == '{';
    } else if (close) {
      cut(path, level[--depth].at);
    } else if (c == ',') {
      cut(path, level[depth - 1].at);
      if (level[depth - 1].object) want_key = 1;
      else if (out_path) ssm_sb_printf(path, "[%ld]", ++level[depth - 1].index);
    }
    i++;
  }
  cut(path, base);
  return 0;
}

int ssm_json_find_nul(const char *text, size_t len, ssm_sb *out_path) {
  return find_nul(text, len, NULL) && find_nul(text, len, out_path);
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

/* Python's json module writes the non-standard tokens Infinity, -Infinity and
 * NaN: config.json files saved by transformers 4.x hold Mamba-2's
 * time_step_limit as [0.0, Infinity] (5.x writes {"__float__": "Infinity"}).
 * Rewrites them, outside strings, as JSON that cJSON reads: 1e999 (which
 * parses as infinity, padded to the same width so positions stay exact) and
 * null. Gives a new buffer in *out and its length in *n. */
static ssm_status python_tokens(const char *data, size_t *n, char **out) {
  void *buf;
  SSM_TRY(ssm_alloc(*n + *n / 3 + 1, 1, &buf));
  char *o = buf;
  size_t k = 0;
  int in_str = 0;
  for (size_t i = 0; i < *n; i++) {
    char c = data[i];
    if (in_str) {
      o[k++] = c;
      if (c == '\\' && i + 1 < *n) o[k++] = data[++i];
      else if (c == '"') in_str = 0;
      continue;
    }
    if (c == '"') in_str = 1;
    if (c == 'I' && *n - i >= 8 && !memcmp(data + i, "Infinity", 8)) {
      memcpy(o + k, "1e999   ", 8);
      k += 8;
      i += 7;
    } else if (c == 'N' && *n - i >= 3 && !memcmp(data + i, "NaN", 3)) {
      memcpy(o + k, "null", 4);
      k += 4;
      i += 2;
    } else {
      o[k++] = c;
    }
  }
  *n = k;
  *out = o;
  return NULL;
}

/* Parses config.json text; `name` names it in messages. Python's
 * non-standard tokens are rewritten first (python_tokens). */
ssm_status ssm_json_parse_config(const char *name, const char *text, size_t len, cJSON **out) {
  *out = NULL;
  size_t n = len;
  char *data = NULL;
  SSM_TRY(ssm_status_wrap(python_tokens(text, &n, &data), "%s", name));
  cJSON *j;
  ssm_status s = ssm_json_parse(name, data, n, &j);
  free(data);
  if (s) return s;
  if (!cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return ssm_status_new(SSM_ERR_INVALID, "%s: not a JSON object", name);
  }
  *out = j;
  return NULL;
}

/* Looks up a possibly dotted key ("text_config.hidden_size"); a part that
 * is a number indexes a list ("time_step_limit.1"). */
const cJSON *ssm_json_path(const cJSON *root, const char *key, size_t n) {
  const cJSON *cur = root;
  while (cur) {
    const char *dot = memchr(key, '.', n);
    size_t part = dot ? (size_t)(dot - key) : n;
    char buf[MAX_PATH_PART + 1];
    if (part > MAX_PATH_PART || part == 0) return NULL;
    memcpy(buf, key, part);
    buf[part] = 0;
    if (cJSON_IsArray(cur)) {
      if (strspn(buf, "0123456789") != part || part > 6) return NULL;
      cur = cJSON_GetArrayItem(cur, atoi(buf));
    } else if (cJSON_IsObject(cur)) {
      cur = cJSON_GetObjectItemCaseSensitive(cur, buf);
    } else {
      return NULL;
    }
    if (!dot) return cur;
    key += part + 1;
    n -= part + 1;
  }
  return NULL;
}

cJSON *ssm_json_config_copy(const cJSON *v) {
  if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) {
    cJSON *o = cJSON_CreateObject();
    const char *f = isnan(v->valuedouble) ? "NaN" : v->valuedouble > 0 ? "Infinity" : "-Infinity";
    if (o && cJSON_AddStringToObject(o, "__float__", f)) return o;
    cJSON_Delete(o);
    return NULL;
  }
  int list = cJSON_IsArray(v);
  if (!list && !cJSON_IsObject(v)) return cJSON_Duplicate(v, 1);
  cJSON *a = list ? cJSON_CreateArray() : cJSON_CreateObject();
  for (const cJSON *e = v->child; a && e; e = e->next) {
    cJSON *c = ssm_json_config_copy(e);
    if (!c || !(list ? cJSON_AddItemToArray(a, c) : cJSON_AddItemToObject(a, e->string, c))) {
      cJSON_Delete(c);
      cJSON_Delete(a);
      return NULL;
    }
  }
  return a;
}

/* A number, or transformers 5's {"__float__": "Infinity"} form of one, into *out. */
static int config_number(const cJSON *v, double *out) {
  const cJSON *f = cJSON_IsObject(v) && cJSON_GetArraySize(v) == 1
                       ? cJSON_GetObjectItemCaseSensitive(v, "__float__") : NULL;
  if (cJSON_IsNumber(v)) *out = v->valuedouble;
  else if (!cJSON_IsString(f)) return 0;
  else if (!strcmp(f->valuestring, "Infinity")) *out = HUGE_VAL;
  else if (!strcmp(f->valuestring, "-Infinity")) *out = -HUGE_VAL;
  else if (!strcmp(f->valuestring, "NaN")) *out = NAN;
  else return 0;
  return 1;
}

int ssm_json_config_equal(const cJSON *a, const cJSON *b) {
  double x, y;
  if (config_number(a, &x) && config_number(b, &y)) return x == y || (isnan(x) && isnan(y));
  if (cJSON_IsArray(a) && cJSON_IsArray(b)) {
    const cJSON *i = a->child, *j = b->child;
    for (; i && j; i = i->next, j = j->next)
      if (!ssm_json_config_equal(i, j)) return 0;
    return !i && !j;
  }
  return cJSON_Compare(a, b, 1);
}
