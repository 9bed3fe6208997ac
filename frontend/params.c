/*
 * params.c — config.json and the params of a description bound to it.
 * config.json is read as Python's json module writes it (Infinity and NaN
 * included: base.h, ssm_json_parse_config); a param takes its value from a key of it (dotted for nested
 * objects, indexed for lists, or the first of a list of keys present), from
 * its default, or from an expression of the params before it.
 */
#include <ctype.h>
#include <math.h>

#include "frontend/internal.h"

#define MAX_JSON_BYTES (64u << 20)
#define MAX_PARAMS 512
#define MAX_LIST 65536

/* ---- config.json ------------------------------------------------------- */

ssm_status ssm_fe_json_read(const char *path, cJSON **out) {
  *out = NULL;
  char *data;
  size_t n;
  SSM_TRY(ssm_file_read(path, MAX_JSON_BYTES, &data, &n));
  ssm_status s = ssm_json_parse_config(path, data, n, out);
  free(data);
  return s;
}

/* ---- params ------------------------------------------------------------ */

int ssm_fe_param_find(const ssm_model *m, const char *name, size_t n, ssm_scalar *out) {
  if (n == 7 && !memcmp(name, "max_seq", 7)) {
    if (out) *out = (ssm_scalar){.kind = SSM_SC_INT, .i = m->max_seq};
    return 1;
  }
  for (int k = 0; k < m->nparams; k++)
    if (strlen(m->params[k].name) == n && !memcmp(m->params[k].name, name, n)) {
      if (out) *out = m->params[k].v;
      return 1;
    }
  return 0;
}

static int lookup_params(void *ctx, const char *name, size_t n, ssm_scalar *out) {
  return ssm_fe_param_find(ctx, name, n, out);
}

/* A config.json value as a scalar: a number, bool, string, a list of
 * those (nested lists too) or transformers 5's {"__float__": "Infinity"}.
 * Lists and strings are copied into the model's arena. NULL when `j` is
 * none of these (the caller names the key). */
static int json_scalar(ssm_model *m, const cJSON *j, ssm_scalar *out, int depth) {
  if (cJSON_IsBool(j)) {
    *out = (ssm_scalar){.kind = SSM_SC_BOOL, .i = cJSON_IsTrue(j)};
  } else if (cJSON_IsNumber(j)) {
    double d = j->valuedouble;
    if (d > -9e15 && d < 9e15 && d == (double)(int64_t)d)
      *out = (ssm_scalar){.kind = SSM_SC_INT, .i = (int64_t)d};
    else
      *out = (ssm_scalar){.kind = SSM_SC_FLOAT, .f = d};
  } else if (cJSON_IsString(j)) {
    *out = (ssm_scalar){.kind = SSM_SC_STR, .i = (int64_t)strlen(j->valuestring),
                        .s = ssm_arena_strdup(m->arena, j->valuestring)};
  } else if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "__float__"))) {
    const char *f = cJSON_GetObjectItemCaseSensitive(j, "__float__")->valuestring;
    double d = !strcmp(f, "Infinity") ? HUGE_VAL : !strcmp(f, "-Infinity") ? -HUGE_VAL : NAN;
    *out = (ssm_scalar){.kind = SSM_SC_FLOAT, .f = d};
  } else if (cJSON_IsArray(j) && depth < 4) {
    int n = cJSON_GetArraySize(j);
    if (n > MAX_LIST) return 0;
    ssm_scalar *items = ssm_arena_alloc(m->arena, sizeof *items * (size_t)(n ? n : 1));
    if (!items) return 0; /* the model's arena says why */
    int k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, j) if (!json_scalar(m, it, &items[k++], depth + 1)) return 0;
    *out = (ssm_scalar){.kind = SSM_SC_LIST, .i = n, .items = items};
  } else {
    return 0;
  }
  return 1;
}

/* Notes config key `key` (n bytes) and its value `j` (NULL or null:
 * absent) in m->config_used, once. */
static ssm_status note_key(ssm_model *m, const char *key, size_t n, const cJSON *j) {
  char name[256];
  if (n >= sizeof name) return NULL; /* no such key is found either */
  memcpy(name, key, n);
  name[n] = 0;
  if (!m->config_used && !(m->config_used = cJSON_CreateObject())) goto nomem;
  if (cJSON_GetObjectItemCaseSensitive(m->config_used, name)) return NULL;
  cJSON *v = j && !cJSON_IsNull(j) ? ssm_json_config_copy(j) : cJSON_CreateNull();
  if (v && cJSON_AddItemToObject(m->config_used, name, v)) return NULL;
  cJSON_Delete(v);
nomem:
  return ssm_status_new(SSM_ERR_NOMEM, "%s: out of host memory for the config keys it reads",
                        m->file);
}

/* The first of a param's keys (one, or a list of fallbacks) that config.json
 * holds with a value other than null; *used names it. Every key looked at
 * is noted (note_key). */
static ssm_status param_lookup(ssm_model *m, yaml_node_t *key, const cJSON *cfg, const cJSON **out,
                               yaml_node_t **used) {
  *out = NULL;
  *used = key;
  if (key->type == YAML_SEQUENCE_NODE) {
    if (key->data.sequence.items.top == key->data.sequence.items.start)
      return ssm_src_error(node_pos(m, key), "a param's list of keys is empty");
    for (yaml_node_item_t *it = key->data.sequence.items.start; it < key->data.sequence.items.top; it++) {
      yaml_node_t *k = ynode(m, *it);
      SSM_TRY(ssm_fe_expect_type(m, k, YAML_SCALAR_NODE, "a config key"));
      const cJSON *j = ssm_json_path(cfg, stext(k), slen(k));
      SSM_TRY(note_key(m, stext(k), slen(k), j));
      if (*it == *key->data.sequence.items.start) *used = k;
      if (j && !cJSON_IsNull(j)) {
        *out = j;
        *used = k;
        return NULL;
      }
    }
    return NULL;
  }
  SSM_TRY(ssm_fe_expect_type(m, key, YAML_SCALAR_NODE, "a config key (or a list of them)"));
  const cJSON *j = ssm_json_path(cfg, stext(key), slen(key));
  SSM_TRY(note_key(m, stext(key), slen(key), j));
  if (j && !cJSON_IsNull(j)) *out = j;
  return NULL;
}

/* A param's default or value: an expression, or a YAML list of them. */
static ssm_status param_expr(ssm_model *m, yaml_node_t *expr, ssm_scalar *out) {
  if (expr->type == YAML_SEQUENCE_NODE) {
    int n = (int)(expr->data.sequence.items.top - expr->data.sequence.items.start);
    if (n > MAX_LIST) return ssm_src_error(node_pos(m, expr), "a list longer than %d", MAX_LIST);
    ssm_scalar *items = ssm_arena_alloc(m->arena, sizeof *items * (size_t)(n ? n : 1));
    if (!items) return ssm_arena_status(m->arena, "the model's params");
    for (int k = 0; k < n; k++) SSM_TRY(param_expr(m, ynode(m, expr->data.sequence.items.start[k]), &items[k]));
    *out = (ssm_scalar){.kind = SSM_SC_LIST, .i = n, .items = items};
    return NULL;
  }
  SSM_TRY(ssm_fe_expect_type(m, expr, YAML_SCALAR_NODE, "a param value"));
  return ssm_expr_eval_str(text_pos(m, expr), stext(expr), slen(expr), lookup_params, m, out);
}

ssm_status ssm_fe_bind_params(ssm_model *m, yaml_node_t *params, const cJSON *cfg) {
  SSM_TRY(ssm_fe_check_map(m, params, "params", NULL, NULL));
  int count = (int)(params->data.mapping.pairs.top - params->data.mapping.pairs.start);
  if (count > MAX_PARAMS) return ssm_src_error(node_pos(m, params), "more than %d params", MAX_PARAMS);
  m->params = ssm_arena_alloc(m->arena, sizeof(param) * (size_t)(count ? count : 1));
  if (!m->params) return ssm_arena_status(m->arena, "the model's params");
  static const char *const keys[] = {"key", "default", "value", NULL};
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
  SSM_TRY(note_key(m, "model_type", 10, cJSON_IsString(mt) ? mt : NULL));
  for (yaml_node_pair_t *p = params->data.mapping.pairs.start; p < params->data.mapping.pairs.top; p++) {
    yaml_node_t *k = ynode(m, p->key), *v = ynode(m, p->value);
    static const char *const reserved[] = {"T", "i", "use", "in", "true", "false", "tokens", "pos", "max_seq", NULL};
    for (const char *const *r = reserved; *r; r++)
      if (scalar_is(k, *r)) return ssm_src_error(node_pos(m, k), "param name '%s' is reserved", stext(k));
    if (ssm_expr_is_function(stext(k), slen(k)))
      return ssm_src_error(node_pos(m, k), "param name '%s' is a function of expressions", stext(k));
    yaml_node_t *key = v, *dflt = NULL, *value = NULL;
    if (v->type == YAML_MAPPING_NODE) {
      SSM_TRY(ssm_fe_check_map(m, v, "a param", keys, NULL));
      key = map_get(m, v, "key");
      dflt = map_get(m, v, "default");
      value = map_get(m, v, "value");
      if (!!key == !!value)
        return ssm_src_error(node_pos(m, v), "param '%s' needs exactly one of 'key' and 'value'", stext(k));
      if (value && dflt)
        return ssm_src_error(node_pos(m, dflt), "param '%s' has a 'value'; 'default' makes no sense", stext(k));
    }
    param *pr = &m->params[m->nparams];
    pr->name = ssm_arena_strdup(m->arena, stext(k));
    yaml_node_t *expr = value;
    if (key) {
      const cJSON *j;
      yaml_node_t *used;
      SSM_TRY(param_lookup(m, key, cfg, &j, &used));
      if (!j) {
        if (!dflt)
          return ssm_src_error(text_pos(m, used), "config.json (%s) has no key '%s' (needed by param '%s')",
                               m->config_path, stext(used), pr->name);
        expr = dflt;
      } else if (!json_scalar(m, j, &pr->v, 0)) {
        return ssm_src_error(text_pos(m, used),
                             "config.json (%s): key '%s' (param '%s') is not a number, bool, string or "
                             "list of them",
                             m->config_path, stext(used), pr->name);
      } else {
        pr->key = ssm_arena_strdup(m->arena, stext(used));
      }
    }
    if (expr) SSM_TRY(param_expr(m, expr, &pr->v));
    m->nparams++;
  }
  return NULL;
}

/* What the config keys of the params that `text` names hold: "param
 * 'kinds' is config.json's 'layers_block_type' = [...]", for messages about
 * configurations a description refuses. Empty when it names none. */
const char *ssm_fe_params_note(ssm_model *m, const char *text, size_t len, ssm_arena *a) {
  ssm_sb b = {0};
  for (int k = 0; k < m->nparams; k++) {
    const param *pr = &m->params[k];
    size_t n = strlen(pr->name);
    int named = 0;
    for (size_t at = 0; at + n <= len && !named; at++) {
      int edge = (at == 0 || !(isalnum((unsigned char)text[at - 1]) || text[at - 1] == '_')) &&
                 (at + n == len || !(isalnum((unsigned char)text[at + n]) || text[at + n] == '_'));
      named = edge && !memcmp(text + at, pr->name, n);
    }
    if (!named) continue;
    ssm_sb_printf(&b, "%s%s = ", b.n ? ", " : "; ", pr->name);
    ssm_scalar_format(&b, &pr->v);
    ssm_sb_printf(&b, " (%s)", pr->key ? ssm_arena_printf(a, "config.json '%s'", pr->key) : "default");
  }
  const char *r = ssm_arena_strdup(a, ssm_sb_str(&b));
  ssm_sb_free(&b);
  return r;
}
