/*
 * json.c — reading the fields of tokenizer.json that the steps of the
 * pipeline share: an object's "type", a Sequence of steps, booleans,
 * strings, single characters, and patterns ({"String"} or {"Regex"},
 * compiled by regex.c). Every error names the file and the field
 * ("tokenizer.json: normalizer.normalizers[1].pattern: ..."). The
 * normalizers, pre-tokenizers and decoders read their steps with it.
 */
#include <string.h>

#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"

const char *ssm_tok_json_type(const cJSON *j) {
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(j, "type");
  return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

ssm_status ssm_tok_json_object_type(tok_load *L, const cJSON *j, const char *where,
                                    const char **out_type) {
  *out_type = ssm_tok_json_type(j);
  if (!cJSON_IsObject(j) || !*out_type)
    return TOK_ERR(L, SSM_ERR_INVALID, "%s: expected an object with a \"type\"", where);
  return NULL;
}

ssm_status ssm_tok_json_sequence(tok_load *L, const cJSON *j, const char *key, const char *where,
                                 int depth, tok_json_fn fn, void *ctx) {
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, key);
  if (!cJSON_IsArray(list))
    return TOK_ERR(L, SSM_ERR_INVALID, "%s.%s: expected an array", where, key);
  if (depth >= 16) return TOK_ERR(L, SSM_ERR_UNSUPPORTED, "%s: Sequences nested too deeply", where);
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, list) {
    char w[512];
    snprintf(w, sizeof w, "%s.%s[%d]", where, key, i++);
    SSM_TRY(fn(L, e, w, ctx, depth + 1));
  }
  return NULL;
}

ssm_status ssm_tok_json_bool(tok_load *L, const cJSON *obj, const char *key, const char *where,
                             int dflt, int *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  *out = dflt;
  if (!v || cJSON_IsNull(v)) return NULL;
  if (!cJSON_IsBool(v))
    return TOK_ERR(L, SSM_ERR_INVALID, "%s.%s: expected true or false", where, key);
  *out = cJSON_IsTrue(v);
  return NULL;
}

ssm_status ssm_tok_json_bool_required(tok_load *L, const cJSON *obj, const char *key,
                                      const char *where, int *out) {
  if (!cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(obj, key)))
    return TOK_ERR(L, SSM_ERR_INVALID, "%s.%s: expected true or false", where, key);
  return ssm_tok_json_bool(L, obj, key, where, 0, out);
}

ssm_status ssm_tok_json_string(tok_load *L, const cJSON *obj, const char *key,
                               const char *where, const char **out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  *out = NULL;
  if (!cJSON_IsString(v))
    return TOK_ERR(L, SSM_ERR_INVALID, "%s.%s: expected a string", where, key);
  if (!ssm_utf8_valid(v->valuestring, strlen(v->valuestring)))
    return TOK_ERR(L, SSM_ERR_INVALID, "%s.%s: not valid UTF-8", where, key);
  *out = v->valuestring;
  return NULL;
}

ssm_status ssm_tok_json_char(tok_load *L, const cJSON *obj, const char *key, const char *where,
                             char *out, uint32_t *out_cp) {
  const char *s;
  SSM_TRY(ssm_tok_json_string(L, obj, key, where, &s));
  size_t n = strlen(s);
  int k = n ? ssm_utf8_decode(s, n, out_cp) : 0;
  if (k <= 0 || (size_t)k != n)
    return TOK_ERR(L, SSM_ERR_INVALID, "%s.%s: expected one character, not '%s'", where, key, s);
  memcpy(out, s, n + 1);
  return NULL;
}

ssm_status ssm_tok_json_pattern(tok_load *L, const cJSON *obj, const char *key,
                                const char *where, tok_regex **out) {
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(obj, key);
  const cJSON *str = cJSON_GetObjectItemCaseSensitive(p, "String");
  const cJSON *re = cJSON_GetObjectItemCaseSensitive(p, "Regex");
  const cJSON *v = cJSON_IsString(str) ? str : re;
  if (!cJSON_IsObject(p) || cJSON_GetArraySize(p) != 1 || !cJSON_IsString(v))
    return TOK_ERR(L, SSM_ERR_INVALID,
                   "%s.%s: expected {\"String\": \"...\"} or {\"Regex\": \"...\"}", where, key);
  if (!ssm_utf8_valid(v->valuestring, strlen(v->valuestring)))
    return TOK_ERR(L, SSM_ERR_INVALID, "%s.%s.%s: not valid UTF-8", where, key, v->string);
  ssm_status s = ssm_tok_regex_new(v->valuestring, v == str, out);
  if (s)
    return ssm_status_wrap(s, "%s: %s.%s.%s '%s'", L->path, where, key, v->string,
                           v->valuestring);
  return NULL;
}
