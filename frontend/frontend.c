/*
 * frontend.c — builds op IR graphs from a model description
 * (models/NAME.yaml) bound to a Hugging Face config.json.
 *
 * Loading reads the YAML with libyaml's document API, checks its structure,
 * binds every param to its config.json value (cJSON), and builds the decode
 * graph once so that a bad description fails at load with "file:line:col:
 * message". Building walks the `graph` statements in order: each call
 * `name = op(args, key=value)` appends one node (nested calls append theirs
 * first), names are rebound freely (SSA underneath), `if:` maps are decided at
 * build time, `assert:` maps stop the build with their message when false,
 * and `repeat:` runs a block once per layer with the layer index as `i`; the
 * block may be chosen per layer (`block: {if: COND, then: A, else: B}`, a
 * layer schedule). Every block run is a layer with an absolute index (counted
 * across repeats) that names its states, `l<index>.<state>`. Weights and
 * states become `weight`/`state` nodes at their first use, one per distinct
 * tensor name. Built-in names: `tokens` (the run's token ids, i32[T]), `pos`
 * (the absolute position of the run's first token, i32[1]; both become
 * inputs when used), `T`, `i`, and the param `max_seq` (default 2048, set by
 * ssm_model_set_param: the rows of a KV cache). Result types come from
 * ssm_op_infer; the finished graph is verified.
 *
 * The statement mini-language (calls, operands, attributes) is parsed here;
 * the lexer, scalar expressions and name templates live in expr.c.
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "frontend/expr.h"

#define MAX_YAML_BYTES (16u << 20)
#define MAX_JSON_BYTES (64u << 20)
#define MAX_YAML_DEPTH 64
#define MAX_PARAMS 512
#define MAX_LIST 65536
#define MAX_MAP_KEYS 4096
#define MAX_REPEAT 100000
#define MAX_STMT_DEPTH 32
#define MAX_CALL_ARGS 16
#define MAX_NODES (1L << 22)
#define MAX_WORK (50L * 1000 * 1000)
#define DEFAULT_MAX_SEQ 2048
#define MAX_MAX_SEQ (1 << 24)

typedef struct {
  const char *name;
  ssm_scalar v;
  const char *key; /* the config.json key it was read from; NULL for a default or value */
} param;

struct ssm_model {
  ssm_arena *arena;
  const char *file;        /* the YAML, as named in messages */
  const char *config_path; /* config.json, as named in messages */
  yaml_document_t doc;
  int has_doc;
  const char *arch;
  yaml_node_t *blocks, *weights, *graph, *graph_key;
  param *params;
  int nparams;
  int64_t max_seq; /* the built-in param max_seq */
  int64_t eos;     /* config.json's eos_token_id (the first of a list); -1 if none */
  uint64_t source_hash; /* of the YAML text and the config (ssm_model_digest) */
};

/* ---- YAML helpers ------------------------------------------------------ */

static yaml_node_t *ynode(ssm_model *m, int index) {
  return yaml_document_get_node(&m->doc, index);
}

/* Position of the node itself (its first character, a quote included). */
static ssm_src node_pos(const ssm_model *m, const yaml_node_t *n) {
  return (ssm_src){m->file, (int)n->start_mark.line + 1, (int)n->start_mark.column + 1};
}

/* Position of a scalar's first content character. */
static ssm_src text_pos(const ssm_model *m, const yaml_node_t *n) {
  ssm_src at = node_pos(m, n);
  if (n->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
      n->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE)
    at.col++;
  return at;
}

static const char *stext(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }
static size_t slen(const yaml_node_t *n) { return n->data.scalar.length; }

static int scalar_is(const yaml_node_t *n, const char *s) {
  return n && n->type == YAML_SCALAR_NODE && slen(n) == strlen(s) && !memcmp(stext(n), s, slen(n));
}

static yaml_node_t *map_get(ssm_model *m, const yaml_node_t *map, const char *key) {
  if (!map || map->type != YAML_MAPPING_NODE) return NULL;
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++)
    if (scalar_is(ynode(m, p->key), key)) return ynode(m, p->value);
  return NULL;
}

static const char *node_kind(const yaml_node_t *n) {
  return n->type == YAML_SCALAR_NODE ? "a scalar" : n->type == YAML_SEQUENCE_NODE ? "a list" : "a map";
}

static ssm_status expect_type(ssm_model *m, const yaml_node_t *n, yaml_node_type_t t,
                              const char *what) {
  if (n->type == t) return NULL;
  const char *want = t == YAML_SCALAR_NODE ? "a scalar" : t == YAML_SEQUENCE_NODE ? "a list" : "a map";
  return ssm_src_error(node_pos(m, n), "%s must be %s, not %s", what, want, node_kind(n));
}

static int is_ident(const char *s, size_t n) {
  if (!n || n > SSM_FE_MAX_NAME) return 0;
  for (size_t k = 0; k < n; k++) {
    char c = s[k];
    int ok = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (k && c >= '0' && c <= '9');
    if (!ok) return 0;
  }
  return 1;
}

static ssm_status expect_ident(ssm_model *m, const yaml_node_t *n, const char *what) {
  SSM_TRY(expect_type(m, n, YAML_SCALAR_NODE, what));
  if (!is_ident(stext(n), slen(n)))
    return ssm_src_error(node_pos(m, n), "%s '%.*s' is not a name (letters, digits, _)", what,
                         (int)(slen(n) > 40 ? 40 : slen(n)), stext(n));
  return NULL;
}

/* Checks that `map` is a mapping whose keys are distinct scalars from the
 * NULL-terminated `allowed` (NULL: any name) and that `required` ones exist. */
static ssm_status check_map(ssm_model *m, const yaml_node_t *map, const char *what,
                            const char *const *allowed, const char *const *required) {
  SSM_TRY(expect_type(m, map, YAML_MAPPING_NODE, what));
  if (map->data.mapping.pairs.top - map->data.mapping.pairs.start > MAX_MAP_KEYS)
    return ssm_src_error(node_pos(m, map), "%s has more than %d keys", what, MAX_MAP_KEYS);
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *k = ynode(m, p->key);
    SSM_TRY(expect_type(m, k, YAML_SCALAR_NODE, "a key"));
    if (allowed) {
      int ok = 0;
      for (const char *const *a = allowed; *a; a++) ok |= scalar_is(k, *a);
      if (!ok)
        return ssm_src_error(node_pos(m, k), "unknown key '%.*s' in %s", (int)(slen(k) > 40 ? 40 : slen(k)),
                             stext(k), what);
    } else {
      SSM_TRY(expect_ident(m, k, "a key"));
    }
    for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
      yaml_node_t *k2 = ynode(m, q->key);
      if (k2->type == YAML_SCALAR_NODE && slen(k2) == slen(k) && !memcmp(stext(k2), stext(k), slen(k)))
        return ssm_src_error(node_pos(m, k), "duplicate key '%s' in %s", stext(k), what);
    }
  }
  for (const char *const *r = required; r && *r; r++)
    if (!map_get(m, map, *r)) return ssm_src_error(node_pos(m, map), "%s needs key '%s'", what, *r);
  return NULL;
}

/* Parses YAML text into `doc`, after checking with the event API that it nests
 * no deeper than MAX_YAML_DEPTH. */
static ssm_status yaml_read(const char *file, const char *text, size_t len, yaml_document_t *doc) {
  yaml_parser_t p;
  yaml_event_t ev;
  ssm_status s = NULL;
  if (!yaml_parser_initialize(&p)) return ssm_status_new(SSM_ERR_NOMEM, "%s: out of memory", file);
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  int depth = 0, done = 0;
  while (!done) {
    if (!yaml_parser_parse(&p, &ev)) break;
    if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT) depth++;
    if (ev.type == YAML_SEQUENCE_END_EVENT || ev.type == YAML_MAPPING_END_EVENT) depth--;
    if (depth > MAX_YAML_DEPTH)
      s = ssm_status_new(SSM_ERR_INVALID, "%s:%zu:%zu: YAML nested deeper than %d", file,
                         ev.start_mark.line + 1, ev.start_mark.column + 1, MAX_YAML_DEPTH);
    done = ev.type == YAML_STREAM_END_EVENT || s;
    yaml_event_delete(&ev);
  }
  if (!s && p.error != YAML_NO_ERROR) {
    s = ssm_status_new(SSM_ERR_INVALID, "%s:%zu:%zu: %s%s%s", file, p.problem_mark.line + 1,
                       p.problem_mark.column + 1, p.problem ? p.problem : "malformed YAML",
                       p.context ? " " : "", p.context ? p.context : "");
  }
  yaml_parser_delete(&p);
  if (s) return s;
  if (!yaml_parser_initialize(&p)) return ssm_status_new(SSM_ERR_NOMEM, "%s: out of memory", file);
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  if (!yaml_parser_load(&p, doc)) {
    s = ssm_status_new(SSM_ERR_INVALID, "%s:%zu:%zu: %s", file, p.problem_mark.line + 1,
                       p.problem_mark.column + 1, p.problem ? p.problem : "malformed YAML");
    yaml_parser_delete(&p);
    return s;
  }
  yaml_parser_delete(&p);
  if (!yaml_document_get_root_node(doc)) {
    yaml_document_delete(doc);
    return ssm_status_new(SSM_ERR_INVALID, "%s: empty model description", file);
  }
  return NULL;
}

/* ---- config.json ------------------------------------------------------- */

/* Python's json module writes the non-standard tokens Infinity, -Infinity and
 * NaN: config.json files saved by transformers 4.x hold Mamba-2's
 * time_step_limit as [0.0, Infinity] (5.x writes {"__float__": "Infinity"}).
 * Rewrites them, outside strings, as JSON that cJSON reads: 1e999 (which
 * parses as infinity, padded to the same width so positions stay exact) and
 * null. Gives a new buffer in *out and its length in *n. */
static ssm_status json_python_tokens(const char *data, size_t *n, char **out) {
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
 * non-standard tokens are rewritten first (json_python_tokens). */
static ssm_status json_parse(const char *name, const char *text, size_t len, cJSON **out) {
  *out = NULL;
  size_t n = len;
  char *data = NULL;
  SSM_TRY(ssm_status_wrap(json_python_tokens(text, &n, &data), "%s", name));
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

static ssm_status json_read(const char *path, cJSON **out) {
  *out = NULL;
  char *data;
  size_t n;
  SSM_TRY(ssm_file_read(path, MAX_JSON_BYTES, &data, &n));
  ssm_status s = json_parse(path, data, n, out);
  free(data);
  return s;
}

/* Looks up a possibly dotted key ("text_config.hidden_size"); a part that
 * is a number indexes a list ("time_step_limit.1"). */
static const cJSON *json_get(const cJSON *root, const char *key, size_t n) {
  const cJSON *cur = root;
  while (cur) {
    const char *dot = memchr(key, '.', n);
    size_t part = dot ? (size_t)(dot - key) : n;
    char buf[SSM_FE_MAX_NAME + 1];
    if (part > SSM_FE_MAX_NAME || part == 0) return NULL;
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

/* ---- params ------------------------------------------------------------ */

static int param_find(const ssm_model *m, const char *name, size_t n, ssm_scalar *out) {
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
  return param_find(ctx, name, n, out);
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

/* The first of a param's keys (one, or a list of fallbacks) that config.json
 * holds with a value other than null; *used names it. */
static ssm_status param_lookup(ssm_model *m, yaml_node_t *key, const cJSON *cfg, const cJSON **out,
                               yaml_node_t **used) {
  *out = NULL;
  *used = key;
  if (key->type == YAML_SEQUENCE_NODE) {
    if (key->data.sequence.items.top == key->data.sequence.items.start)
      return ssm_src_error(node_pos(m, key), "a param's list of keys is empty");
    for (yaml_node_item_t *it = key->data.sequence.items.start; it < key->data.sequence.items.top; it++) {
      yaml_node_t *k = ynode(m, *it);
      SSM_TRY(expect_type(m, k, YAML_SCALAR_NODE, "a config key"));
      const cJSON *j = json_get(cfg, stext(k), slen(k));
      if (*it == *key->data.sequence.items.start) *used = k;
      if (j && !cJSON_IsNull(j)) {
        *out = j;
        *used = k;
        return NULL;
      }
    }
    return NULL;
  }
  SSM_TRY(expect_type(m, key, YAML_SCALAR_NODE, "a config key (or a list of them)"));
  const cJSON *j = json_get(cfg, stext(key), slen(key));
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
  SSM_TRY(expect_type(m, expr, YAML_SCALAR_NODE, "a param value"));
  return ssm_expr_eval_str(text_pos(m, expr), stext(expr), slen(expr), lookup_params, m, out);
}

static ssm_status bind_params(ssm_model *m, yaml_node_t *params, const cJSON *cfg) {
  SSM_TRY(check_map(m, params, "params", NULL, NULL));
  int count = (int)(params->data.mapping.pairs.top - params->data.mapping.pairs.start);
  if (count > MAX_PARAMS) return ssm_src_error(node_pos(m, params), "more than %d params", MAX_PARAMS);
  m->params = ssm_arena_alloc(m->arena, sizeof(param) * (size_t)(count ? count : 1));
  if (!m->params) return ssm_arena_status(m->arena, "the model's params");
  static const char *const keys[] = {"key", "default", "value", NULL};
  for (yaml_node_pair_t *p = params->data.mapping.pairs.start; p < params->data.mapping.pairs.top; p++) {
    yaml_node_t *k = ynode(m, p->key), *v = ynode(m, p->value);
    static const char *const reserved[] = {"T", "i", "use", "in", "true", "false", "tokens", "pos", "max_seq", NULL};
    for (const char *const *r = reserved; *r; r++)
      if (scalar_is(k, *r)) return ssm_src_error(node_pos(m, k), "param name '%s' is reserved", stext(k));
    if (ssm_expr_is_function(stext(k), slen(k)))
      return ssm_src_error(node_pos(m, k), "param name '%s' is a function of expressions", stext(k));
    yaml_node_t *key = v, *dflt = NULL, *value = NULL;
    if (v->type == YAML_MAPPING_NODE) {
      SSM_TRY(check_map(m, v, "a param", keys, NULL));
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
static const char *params_note(ssm_model *m, const char *text, size_t len, ssm_arena *a) {
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

/* ---- the graph builder ------------------------------------------------- */

typedef struct {
  const char *name;
  ssm_value *v;
} binding;

/* A weight or state a scope may use: evaluated on scope entry, made into a
 * node at first use. */
typedef struct {
  yaml_node_t *key;
  yaml_node_t *spec;
  int present, is_state;
  const char *name;
  const char *transform;
  ssm_type type;
  ssm_value *v;
} decl;

typedef struct {
  ssm_model *m;
  ssm_graph *g;
  int64_t T;
  ssm_value *tokens, *pos;
  int64_t layers_run; /* block runs so far: the next layer's absolute index */
  ssm_strmap uses;    /* block name -> its runs so far (as intptr_t) */
  decl *top;        /* top-level weights */
  int ntop;
  ssm_strmap made;  /* tensor name -> its weight/state value */
  long work, nodes;
} builder;

typedef struct {
  builder *b;
  int has_layer;
  int64_t layer;     /* `i`: the index within its repeat */
  int64_t abs_layer; /* the index among all block runs: names states */
  int64_t use;       /* `use`: the earlier runs of the same block */
  SSM_VEC(binding) locals;
  decl *decls;
  int ndecls;
} scope;

static int lookup_scope(void *ctx, const char *name, size_t n, ssm_scalar *out) {
  scope *sc = ctx;
  if (n == 1 && name[0] == 'T') {
    *out = (ssm_scalar){.kind = SSM_SC_INT, .i = sc->b->T};
    return 1;
  }
  if (n == 1 && name[0] == 'i' && sc->has_layer) {
    *out = (ssm_scalar){.kind = SSM_SC_INT, .i = sc->layer};
    return 1;
  }
  if (n == 3 && !memcmp(name, "use", 3) && sc->has_layer) {
    *out = (ssm_scalar){.kind = SSM_SC_INT, .i = sc->use};
    return 1;
  }
  return param_find(sc->b->m, name, n, out);
}

static ssm_status count_node(builder *b, ssm_src at) {
  if (++b->nodes > MAX_NODES) return ssm_src_error(at, "graph larger than %ld nodes", MAX_NODES);
  return NULL;
}

/* A scalar as messages show it: 64, 0.5, true, 'rope'. */
static const char *scalar_str(const ssm_scalar *v, char *buf, size_t n) {
  ssm_sb b = {0};
  ssm_scalar_format(&b, v);
  snprintf(buf, n, "%s", ssm_sb_str(&b));
  ssm_sb_free(&b);
  return buf;
}

/* Evaluates a shape list into `t` (f32). */
static ssm_status eval_shape(scope *sc, yaml_node_t *seq, const char *what, ssm_type *t) {
  ssm_model *m = sc->b->m;
  SSM_TRY(expect_type(m, seq, YAML_SEQUENCE_NODE, what));
  int rank = (int)(seq->data.sequence.items.top - seq->data.sequence.items.start);
  if (rank > SSM_MAX_RANK) return ssm_src_error(node_pos(m, seq), "%s has rank %d; at most %d", what, rank, SSM_MAX_RANK);
  *t = (ssm_type){.dtype = SSM_F32, .rank = rank};
  int64_t numel = 1;
  for (int k = 0; k < rank; k++) {
    yaml_node_t *d = ynode(m, seq->data.sequence.items.start[k]);
    SSM_TRY(expect_type(m, d, YAML_SCALAR_NODE, "a dimension"));
    ssm_scalar v;
    SSM_TRY(ssm_expr_eval_str(text_pos(m, d), stext(d), slen(d), lookup_scope, sc, &v));
    if (v.kind != SSM_SC_INT || v.i <= 0 || v.i > SSM_FE_MAX_DIM) {
      char vb[48];
      return ssm_src_error(text_pos(m, d), "dimension '%.*s' must be an integer in 1..2^40, got %s",
                           (int)(slen(d) > 40 ? 40 : slen(d)), stext(d), scalar_str(&v, vb, sizeof vb));
    }
    if (__builtin_mul_overflow(numel, v.i, &numel) || numel > SSM_FE_MAX_DIM)
      return ssm_src_error(text_pos(m, d), "%s has more than 2^40 elements", what);
    t->dims[k] = v.i;
  }
  return NULL;
}

static ssm_status eval_cond(scope *sc, yaml_node_t *cond, int *out) {
  ssm_model *m = sc->b->m;
  SSM_TRY(expect_type(m, cond, YAML_SCALAR_NODE, "a condition"));
  ssm_scalar v;
  SSM_TRY(ssm_expr_eval_str(text_pos(m, cond), stext(cond), slen(cond), lookup_scope, sc, &v));
  *out = ssm_scalar_truthy(&v);
  return NULL;
}

static const char *const weight_keys[] = {"name", "shape", "if", "transform", NULL};
static const char *const weight_required[] = {"name", "shape", NULL};

/* Fills `d` from one `weights:` entry. */
static ssm_status decl_weight(scope *sc, yaml_node_t *key, yaml_node_t *spec, decl *d) {
  builder *b = sc->b;
  ssm_model *m = b->m;
  *d = (decl){.key = key, .spec = spec, .present = 1};
  SSM_TRY(check_map(m, spec, "a weight", weight_keys, weight_required));
  yaml_node_t *cond = map_get(m, spec, "if");
  if (cond) SSM_TRY(eval_cond(sc, cond, &d->present));
  if (!d->present) return NULL;
  yaml_node_t *name = map_get(m, spec, "name"), *tr = map_get(m, spec, "transform");
  SSM_TRY(expect_type(m, name, YAML_SCALAR_NODE, "a weight name"));
  SSM_TRY(ssm_expr_template(text_pos(m, name), stext(name), slen(name), lookup_scope, sc,
                            b->g->arena, &d->name));
  if (tr) {
    SSM_TRY(expect_type(m, tr, YAML_SCALAR_NODE, "a transform"));
    d->transform = stext(tr);
  }
  return eval_shape(sc, map_get(m, spec, "shape"), "a weight shape", &d->type);
}

static ssm_status decl_state(scope *sc, yaml_node_t *key, yaml_node_t *shape, decl *d) {
  *d = (decl){.key = key, .spec = shape, .present = 1, .is_state = 1};
  d->name = ssm_arena_printf(sc->b->g->arena, "l%lld.%s", (long long)sc->abs_layer, stext(key));
  return eval_shape(sc, shape, "a state shape", &d->type);
}

/* Fills decls from a `weights:` map (and a `state:` map, may be NULL). */
static ssm_status decls_make(scope *sc, yaml_node_t *weights, yaml_node_t *state,
                             decl **out, int *out_n) {
  ssm_model *m = sc->b->m;
  *out = NULL;
  *out_n = 0;
  int n = 0;
  if (weights) {
    SSM_TRY(check_map(m, weights, "weights", NULL, NULL));
    n += (int)(weights->data.mapping.pairs.top - weights->data.mapping.pairs.start);
  }
  if (state) {
    SSM_TRY(check_map(m, state, "state", NULL, NULL));
    n += (int)(state->data.mapping.pairs.top - state->data.mapping.pairs.start);
  }
  decl *ds;
  SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)(n ? n : 1), sizeof *ds, (void **)&ds),
                          "%d weight and state declarations", n));
  *out = ds;
  for (yaml_node_pair_t *p = weights ? weights->data.mapping.pairs.start : NULL;
       weights && p < weights->data.mapping.pairs.top; p++)
    SSM_TRY(decl_weight(sc, ynode(m, p->key), ynode(m, p->value), &ds[(*out_n)++]));
  for (yaml_node_pair_t *p = state ? state->data.mapping.pairs.start : NULL;
       state && p < state->data.mapping.pairs.top; p++)
    SSM_TRY(decl_state(sc, ynode(m, p->key), ynode(m, p->value), &ds[(*out_n)++]));
  return NULL;
}

/* The node of a weight or state, made at first use. */
static ssm_status decl_value(builder *b, decl *d, ssm_src at, ssm_value **out) {
  if (!d->present)
    return ssm_src_error(at, "weight '%s' is absent here (its 'if' is false)", stext(d->key));
  if (d->v) {
    *out = d->v;
    return NULL;
  }
  int found;
  void **slot;
  SSM_TRY(ssm_status_wrap(ssm_strmap_slot(&b->made, d->name, &found, &slot),
                          "the weights and states made so far"));
  if (found && d->is_state && ((ssm_value *)*slot)->def->op == SSM_OP_STATE)
    return ssm_src_error(at, "state '%s' is declared twice in one layer (a block and a block it calls?)",
                         d->name);
  if (found) {
    ssm_node *prev = ((ssm_value *)*slot)->def;
    char t1[160], t2[160];
    if ((prev->op == SSM_OP_STATE) != d->is_state || !ssm_type_equal(&prev->result->type, &d->type))
      return ssm_src_error(at, "'%s' is used as %s %s and as %s %s", d->name,
                           prev->op == SSM_OP_STATE ? "state" : "weight",
                           ssm_type_format(&prev->result->type, t1, sizeof t1),
                           d->is_state ? "state" : "weight", ssm_type_format(&d->type, t2, sizeof t2));
    d->v = *slot;
  } else {
    SSM_TRY(count_node(b, at));
    ssm_node *n = ssm_graph_append(b->g, d->is_state ? SSM_OP_STATE : SSM_OP_WEIGHT, &d->type, 0, NULL);
    if (!n) return ssm_graph_status(b->g);
    ssm_node_set_str(b->g, n, "name", d->name);
    if (d->transform) ssm_node_set_str(b->g, n, "transform", d->transform);
    *slot = n->result;
    d->v = n->result;
  }
  *out = d->v;
  return NULL;
}

static decl *decl_find(decl *ds, int n, const char *name, size_t len) {
  for (int k = 0; k < n; k++)
    if (slen(ds[k].key) == len && !memcmp(stext(ds[k].key), name, len)) return &ds[k];
  return NULL;
}

static ssm_status scope_bind(scope *sc, const char *name, size_t n, ssm_value *v) {
  for (size_t k = 0; k < sc->locals.n; k++)
    if (strlen(sc->locals.items[k].name) == n && !memcmp(sc->locals.items[k].name, name, n)) {
      sc->locals.items[k].v = v;
      return NULL;
    }
  binding bd = {ssm_arena_strndup(sc->b->g->arena, name, n), v};
  SSM_TRY(ssm_graph_status(sc->b->g));
  return ssm_status_wrap(ssm_vec_push(&sc->locals, bd), "the names of a scope");
}

static void scope_free(scope *sc) {
  ssm_vec_free(&sc->locals);
  free(sc->decls);
}

/* A built-in input (tokens, pos), made at first use. */
static ssm_status builtin_input(builder *b, const char *name, ssm_type t, ssm_src at,
                                ssm_value **slot) {
  if (!*slot) {
    SSM_TRY(count_node(b, at));
    ssm_node *in = ssm_graph_append(b->g, SSM_OP_INPUT, &t, 0, NULL);
    if (!in) return ssm_graph_status(b->g);
    ssm_node_set_str(b->g, in, "name", name);
    *slot = in->result;
  }
  return NULL;
}

/* Resolves a tensor name: locals, the scope's weights and states, the
 * top-level weights, `tokens`, `pos`. Returns 0 with *out NULL when none
 * matches. */
static ssm_status resolve_tensor(scope *sc, const char *name, size_t n, ssm_src at, ssm_value **out) {
  builder *b = sc->b;
  *out = NULL;
  for (size_t k = sc->locals.n; k-- > 0;)
    if (strlen(sc->locals.items[k].name) == n && !memcmp(sc->locals.items[k].name, name, n)) {
      *out = sc->locals.items[k].v;
      return NULL;
    }
  decl *d = decl_find(sc->decls, sc->ndecls, name, n);
  if (!d) d = decl_find(b->top, b->ntop, name, n);
  if (d) return decl_value(b, d, at, out);
  if (n == 6 && !memcmp(name, "tokens", 6)) {
    SSM_TRY(builtin_input(b, "tokens", ssm_type_make(SSM_I32, 1, (int64_t[]){b->T}), at,
                          &b->tokens));
    *out = b->tokens;
  } else if (n == 3 && !memcmp(name, "pos", 3)) {
    SSM_TRY(builtin_input(b, "pos", ssm_type_make(SSM_I32, 1, (int64_t[]){1}), at, &b->pos));
    *out = b->pos;
  }
  return NULL;
}

/* ---- statements: name = op(args, key=value) ---------------------------- */

typedef struct {
  scope *sc;
  ssm_lex lx;
  int depth;
} stmt_parser;

static int peek_is(const ssm_lex *lx, const char *p) {
  ssm_lex copy = *lx;
  ssm_status s = ssm_lex_next(&copy);
  if (s) {
    ssm_status_free(s);
    return 0;
  }
  return ssm_lex_is(&copy, p);
}

static ssm_status parse_call(stmt_parser *p, ssm_value **out);
static ssm_status call_block(stmt_parser *p, yaml_node_t *name, size_t off, ssm_value **out);

static ssm_status make_const(stmt_parser *p, size_t off, ssm_value **out) {
  builder *b = p->sc->b;
  ssm_scalar v;
  SSM_TRY(ssm_expr_eval(&p->lx, lookup_scope, p->sc, &v));
  if (v.kind != SSM_SC_INT && v.kind != SSM_SC_FLOAT)
    return ssm_lex_error(&p->lx, off, "a %s cannot be an operand", ssm_scalar_kind_name(v.kind));
  SSM_TRY(count_node(b, ssm_lex_pos(&p->lx, off)));
  ssm_type t = {.dtype = SSM_F32, .rank = 0};
  ssm_node *n = ssm_graph_append(b->g, SSM_OP_CONST, &t, 0, NULL);
  if (!n) return ssm_graph_status(b->g);
  ssm_node_set_float(b->g, n, "value", v.kind == SSM_SC_INT ? (double)v.i : v.f);
  *out = n->result;
  return NULL;
}

/* One operand: a nested call, a tensor name, or a scalar expression (which
 * becomes a `const`). */
static ssm_status parse_operand(stmt_parser *p, ssm_value **out) {
  ssm_lex *lx = &p->lx;
  size_t off = lx->off;
  if (lx->tok == SSM_TOK_IDENT && peek_is(lx, "(") &&
      (ssm_op_lookup(lx->text, lx->tlen) != SSM_OP_COUNT || !ssm_expr_is_function(lx->text, lx->tlen))) {
    int name_len = (int)lx->tlen;
    SSM_TRY(parse_call(p, out));
    if (!*out)
      return ssm_lex_error(lx, off, "op '%.*s' defines no value to use as an operand", name_len, lx->src + off);
    return NULL;
  }
  if (lx->tok == SSM_TOK_IDENT && !(peek_is(lx, "(") && ssm_expr_is_function(lx->text, lx->tlen))) {
    ssm_scalar sv;
    SSM_TRY(resolve_tensor(p->sc, lx->text, lx->tlen, ssm_lex_pos(lx, off), out));
    if (*out) return ssm_lex_next(lx);
    int scalar = lookup_scope(p->sc, lx->text, lx->tlen, &sv) ||
                 (lx->tlen == 4 && !memcmp(lx->text, "true", 4)) ||
                 (lx->tlen == 5 && !memcmp(lx->text, "false", 5));
    if (!scalar) return ssm_lex_error(lx, off, "undefined name '%.*s'", (int)lx->tlen, lx->text);
  }
  return make_const(p, off, out);
}

typedef struct {
  int set;
  int64_t i;
  double f;
  const char *s;
  int n;
  int64_t ints[MAX_CALL_ARGS];
} attr_val;

static ssm_status parse_attr(stmt_parser *p, ssm_op op, attr_val *vals) {
  ssm_lex *lx = &p->lx;
  const ssm_op_info *info = ssm_op_info_get(op);
  size_t off = lx->off;
  int a = -1;
  for (int k = 0; k < info->nattrs; k++)
    if (strlen(info->attrs[k].key) == lx->tlen && !memcmp(info->attrs[k].key, lx->text, lx->tlen)) a = k;
  if (a < 0)
    return ssm_lex_error(lx, off, "op '%s' has no attribute '%.*s'", info->name, (int)lx->tlen, lx->text);
  const char *key = info->attrs[a].key;
  if (vals[a].set) return ssm_lex_error(lx, off, "attribute '%s' given twice", key);
  SSM_TRY(ssm_lex_next(lx));
  SSM_TRY(ssm_lex_expect(lx, "="));
  attr_val *v = &vals[a];
  v->set = 1;
  size_t voff = lx->off;
  switch (info->attrs[a].kind) {
  case SSM_ATTR_STR:
    if (lx->tok != SSM_TOK_STR && lx->tok != SSM_TOK_IDENT)
      return ssm_lex_error(lx, voff, "attribute '%s' of '%s' must be a word or a quoted string", key, info->name);
    v->s = ssm_arena_strndup(p->sc->b->g->arena, lx->text, lx->tlen);
    return ssm_lex_next(lx);
  case SSM_ATTR_INTS:
    SSM_TRY(ssm_lex_expect(lx, "["));
    while (!ssm_lex_is(lx, "]")) {
      if (v->n == MAX_CALL_ARGS) return ssm_lex_error(lx, lx->off, "list longer than %d", MAX_CALL_ARGS);
      ssm_scalar s;
      size_t eoff = lx->off;
      SSM_TRY(ssm_expr_eval(lx, lookup_scope, p->sc, &s));
      if (s.kind != SSM_SC_INT)
        return ssm_lex_error(lx, eoff, "attribute '%s' of '%s' must hold integers, not a %s", key,
                             info->name, ssm_scalar_kind_name(s.kind));
      v->ints[v->n++] = s.i;
      if (!ssm_lex_is(lx, "]")) SSM_TRY(ssm_lex_expect(lx, ","));
    }
    return ssm_lex_next(lx);
  default: {
    ssm_scalar s;
    SSM_TRY(ssm_expr_eval(lx, lookup_scope, p->sc, &s));
    if (info->attrs[a].kind == SSM_ATTR_INT) {
      if (s.kind != SSM_SC_INT)
        return ssm_lex_error(lx, voff, "attribute '%s' of '%s' must be an integer, not a %s", key,
                             info->name, ssm_scalar_kind_name(s.kind));
      v->i = s.i;
    } else {
      if (s.kind == SSM_SC_BOOL)
        return ssm_lex_error(lx, voff, "attribute '%s' of '%s' must be a number, not a bool", key, info->name);
      v->f = s.kind == SSM_SC_INT ? (double)s.i : s.f;
    }
    return NULL;
  }
  }
}

/* reshape(x, [dims]): the result type is given. */
static ssm_status parse_reshape_shape(stmt_parser *p, ssm_type *t) {
  ssm_lex *lx = &p->lx;
  SSM_TRY(ssm_lex_expect(lx, "["));
  t->rank = 0;
  int64_t numel = 1;
  while (!ssm_lex_is(lx, "]")) {
    size_t off = lx->off;
    if (t->rank == SSM_MAX_RANK) return ssm_lex_error(lx, off, "shape has more than %d dimensions", SSM_MAX_RANK);
    ssm_scalar s;
    SSM_TRY(ssm_expr_eval(lx, lookup_scope, p->sc, &s));
    if (s.kind != SSM_SC_INT || s.i <= 0 || s.i > SSM_FE_MAX_DIM)
      return ssm_lex_error(lx, off, "dimension must be an integer in 1..2^40");
    if (__builtin_mul_overflow(numel, s.i, &numel) || numel > SSM_FE_MAX_DIM)
      return ssm_lex_error(lx, off, "shape has more than 2^40 elements");
    t->dims[t->rank++] = s.i;
    if (!ssm_lex_is(lx, "]")) SSM_TRY(ssm_lex_expect(lx, ","));
  }
  return ssm_lex_next(lx);
}

static ssm_status parse_call(stmt_parser *p, ssm_value **out) {
  ssm_lex *lx = &p->lx;
  builder *b = p->sc->b;
  *out = NULL;
  size_t off = lx->off;
  if (lx->tok != SSM_TOK_IDENT) {
    char b2[64];
    snprintf(b2, sizeof b2, "%.*s", (int)(lx->tlen > 40 ? 40 : lx->tlen), lx->text);
    return ssm_lex_error(lx, off, lx->tok == SSM_TOK_END ? "expected an op call" : "expected an op call, found '%s'", b2);
  }
  ssm_op op = ssm_op_lookup(lx->text, lx->tlen);
  if (op == SSM_OP_COUNT && b->m->blocks) { /* a block called like an op */
    char nm[SSM_FE_MAX_NAME + 1];
    snprintf(nm, sizeof nm, "%.*s", (int)lx->tlen, lx->text);
    for (yaml_node_pair_t *q = b->m->blocks->data.mapping.pairs.start; q < b->m->blocks->data.mapping.pairs.top; q++)
      if (scalar_is(ynode(b->m, q->key), nm)) return call_block(p, ynode(b->m, q->key), off, out);
  }
  if (op == SSM_OP_COUNT) return ssm_lex_error(lx, off, "unknown op '%.*s' (and no block of that name)", (int)lx->tlen, lx->text);
  const ssm_op_info *info = ssm_op_info_get(op);
  if (info->kind == SSM_KIND_SRC)
    return ssm_lex_error(lx, off, "op '%s' cannot be called; declare weights and state, or use a number", info->name);
  if (++p->depth > SSM_FE_MAX_DEPTH) return ssm_lex_error(lx, off, "calls nested deeper than %d", SSM_FE_MAX_DEPTH);
  SSM_TRY(ssm_lex_next(lx));
  SSM_TRY(ssm_lex_expect(lx, "("));
  ssm_value *args[MAX_CALL_ARGS];
  int nargs = 0;
  attr_val vals[SSM_MAX_ATTRS] = {{0}};
  ssm_type reshape_type = {0};
  while (!ssm_lex_is(lx, ")")) {
    size_t aoff = lx->off;
    if (op == SSM_OP_RESHAPE && nargs == 1) {
      SSM_TRY(parse_reshape_shape(p, &reshape_type));
      nargs++;
    } else if (lx->tok == SSM_TOK_IDENT && peek_is(lx, "=")) {
      SSM_TRY(parse_attr(p, op, vals));
    } else {
      if (nargs == MAX_CALL_ARGS || nargs >= info->max_args + (op == SSM_OP_RESHAPE))
        return ssm_lex_error(lx, aoff, "op '%s' takes at most %d operand%s", info->name,
                             info->max_args + (op == SSM_OP_RESHAPE), info->max_args == 1 ? "" : "s");
      SSM_TRY(parse_operand(p, &args[nargs++]));
    }
    if (!ssm_lex_is(lx, ")")) SSM_TRY(ssm_lex_expect(lx, ","));
  }
  SSM_TRY(ssm_lex_next(lx));
  p->depth--;
  if (op == SSM_OP_RESHAPE) {
    if (nargs != 2) return ssm_lex_error(lx, off, "reshape takes an operand and a shape: reshape(x, [dims])");
    nargs = 1;
  } else if (nargs < info->min_args) {
    if (info->min_args == info->max_args)
      return ssm_lex_error(lx, off, "op '%s' takes %d operand%s, got %d", info->name, info->min_args,
                           info->min_args == 1 ? "" : "s", nargs);
    return ssm_lex_error(lx, off, "op '%s' takes %d to %d operands, got %d", info->name, info->min_args,
                         info->max_args, nargs);
  }
  for (int k = 0; k < info->nattrs; k++)
    if (!vals[k].set && !info->attrs[k].optional)
      return ssm_lex_error(lx, off, "op '%s' needs attribute '%s'", info->name, info->attrs[k].key);
  for (int k = 0; k < info->nattrs; k++) {
    if (!vals[k].set || strcmp(info->attrs[k].key, "axis") || info->attrs[k].kind != SSM_ATTR_INT) continue;
    int rank = args[0]->type.rank;
    if (vals[k].i < -rank || vals[k].i >= rank)
      return ssm_lex_error(lx, off, "%s: axis %lld out of range for rank %d", info->name, (long long)vals[k].i, rank);
    if (vals[k].i < 0) vals[k].i += rank;
  }
  SSM_TRY(count_node(b, ssm_lex_pos(lx, off)));
  ssm_type t = reshape_type;
  if (op == SSM_OP_RESHAPE) t.dtype = args[0]->type.dtype;
  ssm_node *n = ssm_graph_append(b->g, op, info->kind == SSM_KIND_SINK ? NULL : &t, nargs, args);
  if (!n) return ssm_graph_status(b->g);
  for (int k = 0; k < info->nattrs; k++) {
    if (!vals[k].set) continue;
    const char *key = info->attrs[k].key;
    switch (info->attrs[k].kind) {
    case SSM_ATTR_INT: ssm_node_set_int(b->g, n, key, vals[k].i); break;
    case SSM_ATTR_FLOAT: ssm_node_set_float(b->g, n, key, vals[k].f); break;
    case SSM_ATTR_STR: ssm_node_set_str(b->g, n, key, vals[k].s); break;
    case SSM_ATTR_INTS: ssm_node_set_ints(b->g, n, key, vals[k].n, vals[k].ints); break;
    }
  }
  if (n->result) {
    ssm_status s = ssm_op_infer(n, &t);
    if (s) {
      const char *msg = ssm_status_message(s);
      size_t nl = strlen(info->name);
      int named = !strncmp(msg, info->name, nl) && (msg[nl] == ' ' || msg[nl] == ':');
      ssm_status e = ssm_lex_error(lx, off, "%s%s%s", named ? "" : info->name, named ? "" : ": ", msg);
      ssm_status_free(s);
      ssm_graph_remove(b->g, n);
      return e;
    }
    n->result->type = t;
  }
  *out = n->result;
  return NULL;
}

static ssm_status exec_string(scope *sc, yaml_node_t *stmt) {
  ssm_model *m = sc->b->m;
  stmt_parser p = {.sc = sc};
  ssm_lex *lx = &p.lx;
  SSM_TRY(ssm_lex_init(lx, text_pos(m, stmt), stext(stmt), slen(stmt)));
  const char *name = NULL;
  size_t name_len = 0, off = lx->off;
  if (lx->tok == SSM_TOK_IDENT && peek_is(lx, "=")) {
    name = lx->text;
    name_len = lx->tlen;
    if ((name_len == 6 && !memcmp(name, "tokens", 6)) || (name_len == 3 && !memcmp(name, "pos", 3)) ||
        lookup_scope(sc, name, name_len, &(ssm_scalar){0}) ||
        (name_len == 4 && !memcmp(name, "true", 4)) || (name_len == 5 && !memcmp(name, "false", 5)))
      return ssm_lex_error(lx, off, "cannot assign to '%.*s': it names a param or built-in", (int)name_len, name);
    SSM_TRY(ssm_lex_next(lx));
    SSM_TRY(ssm_lex_next(lx));
  }
  ssm_value *v;
  size_t call_off = lx->off;
  SSM_TRY(parse_call(&p, &v));
  if (lx->tok != SSM_TOK_END)
    return ssm_lex_error(lx, lx->off, "unexpected '%.*s' after the call", (int)(lx->tlen > 40 ? 40 : lx->tlen), lx->text);
  if (name) {
    if (!v) return ssm_lex_error(lx, call_off, "this op defines no value to assign to '%.*s'", (int)name_len, name);
    SSM_TRY(scope_bind(sc, name, name_len, v));
  }
  return NULL;
}

static ssm_status exec_list(scope *sc, yaml_node_t *list, int depth);

static ssm_status run_block(scope *caller, yaml_node_t *name, int64_t layer, ssm_value *in,
                            ssm_value **out);

/* Checks a repeat's `block:`: a block name, {if: COND, then: B, else: B},
 * or {switch: EXPR, cases: {VALUE: B, ...}}, where each B is again one of
 * these. */
static ssm_status check_block_choice(ssm_model *m, yaml_node_t *block, int depth) {
  static const char *const if_keys[] = {"if", "then", "else", NULL};
  static const char *const switch_keys[] = {"switch", "cases", NULL};
  if (block->type == YAML_MAPPING_NODE) {
    if (depth >= MAX_STMT_DEPTH)
      return ssm_src_error(node_pos(m, block), "block choice nested deeper than %d", MAX_STMT_DEPTH);
    if (map_get(m, block, "switch")) {
      SSM_TRY(check_map(m, block, "a block switch", switch_keys, switch_keys));
      SSM_TRY(expect_type(m, map_get(m, block, "switch"), YAML_SCALAR_NODE, "a switch expression"));
      yaml_node_t *cases = map_get(m, block, "cases");
      SSM_TRY(expect_type(m, cases, YAML_MAPPING_NODE, "cases"));
      for (yaml_node_pair_t *p = cases->data.mapping.pairs.start; p < cases->data.mapping.pairs.top; p++) {
        SSM_TRY(expect_type(m, ynode(m, p->key), YAML_SCALAR_NODE, "a case"));
        SSM_TRY(check_block_choice(m, ynode(m, p->value), depth + 1));
      }
      return NULL;
    }
    SSM_TRY(check_map(m, block, "a block choice", if_keys, if_keys));
    SSM_TRY(expect_type(m, map_get(m, block, "if"), YAML_SCALAR_NODE, "a condition"));
    SSM_TRY(check_block_choice(m, map_get(m, block, "then"), depth + 1));
    return check_block_choice(m, map_get(m, block, "else"), depth + 1);
  }
  SSM_TRY(expect_ident(m, block, "a block name (or {if: COND, then: NAME, else: NAME}, or {switch: EXPR, cases: {...}})"));
  if (!map_get(m, m->blocks, stext(block)))
    return ssm_src_error(node_pos(m, block), "unknown block '%s'", stext(block));
  return NULL;
}

/* The case of a checked switch that its value selects (the value's text:
 * a string as it is, a number or bool as written); NULL when none does.
 * Lists the cases into `known`. */
static yaml_node_t *switch_case(ssm_model *m, yaml_node_t *cases, const ssm_scalar *v, ssm_sb *known) {
  ssm_sb text = {0}; /* a failure to build it fails `known` too (see pick_block) */
  if (v->kind == SSM_SC_STR) ssm_sb_append(&text, v->s, (size_t)v->i);
  else ssm_scalar_format(&text, v);
  yaml_node_t *hit = NULL;
  for (yaml_node_pair_t *p = cases->data.mapping.pairs.start; p < cases->data.mapping.pairs.top; p++) {
    yaml_node_t *k = ynode(m, p->key);
    ssm_sb_printf(known, "%s'%s'", known->n ? ", " : "", stext(k));
    if (!hit && slen(k) == text.n && !memcmp(stext(k), ssm_sb_str(&text), text.n)) hit = ynode(m, p->value);
  }
  if (text.failed && !known->failed) known->failed = text.failed;
  ssm_sb_free(&text);
  return hit;
}

/* The block layer i runs: decides a checked block choice with `i` bound. */
static ssm_status pick_block(builder *b, yaml_node_t *block, int64_t i, yaml_node_t **out) {
  ssm_model *m = b->m;
  while (block->type == YAML_MAPPING_NODE) {
    scope at_i = {.b = b, .has_layer = 1, .layer = i};
    yaml_node_t *sw = map_get(m, block, "switch");
    if (!sw) {
      int cond;
      SSM_TRY(eval_cond(&at_i, map_get(m, block, "if"), &cond));
      block = map_get(m, block, cond ? "then" : "else");
      continue;
    }
    ssm_scalar v;
    SSM_TRY(ssm_expr_eval_str(text_pos(m, sw), stext(sw), slen(sw), lookup_scope, &at_i, &v));
    ssm_sb known = {0};
    yaml_node_t *next = switch_case(m, map_get(m, block, "cases"), &v, &known);
    ssm_status ks = ssm_sb_status(&known, "a switch's cases");
    if (ks) {
      ssm_sb_free(&known);
      return ks;
    }
    if (!next) {
      char vb[160];
      ssm_src at = text_pos(m, sw);
      ssm_status s = ssm_status_new(
          SSM_ERR_UNSUPPORTED, "%s: layer %lld is %s, which %s does not handle (%s:%d:%d: %s has cases %s)%s",
          m->config_path, (long long)i, scalar_str(&v, vb, sizeof vb), m->file, at.file, at.line, at.col,
          stext(sw), ssm_sb_str(&known), params_note(m, stext(sw), slen(sw), b->g->arena));
      ssm_sb_free(&known);
      return s;
    }
    ssm_sb_free(&known);
    block = next;
  }
  *out = block;
  return NULL;
}

static ssm_status exec_repeat(scope *sc, yaml_node_t *stmt) {
  static const char *const keys[] = {"repeat", "block", "carry", NULL};
  builder *b = sc->b;
  ssm_model *m = b->m;
  if (sc->has_layer) return ssm_src_error(node_pos(m, stmt), "repeat is only allowed in graph:, not inside a block");
  SSM_TRY(check_map(m, stmt, "a repeat", keys, keys));
  yaml_node_t *count = map_get(m, stmt, "repeat"), *block = map_get(m, stmt, "block"),
              *carry = map_get(m, stmt, "carry");
  SSM_TRY(expect_type(m, count, YAML_SCALAR_NODE, "a repeat count"));
  ssm_scalar c;
  SSM_TRY(ssm_expr_eval_str(text_pos(m, count), stext(count), slen(count), lookup_scope, sc, &c));
  if (c.kind != SSM_SC_INT || c.i < 0 || c.i > MAX_REPEAT) {
    char vb[48];
    return ssm_src_error(text_pos(m, count), "repeat count '%.*s' must be an integer in 0..%d, got %s",
                         (int)(slen(count) > 40 ? 40 : slen(count)), stext(count), MAX_REPEAT,
                         scalar_str(&c, vb, sizeof vb));
  }
  SSM_TRY(check_block_choice(m, block, 0));
  SSM_TRY(expect_ident(m, carry, "a carried variable"));
  ssm_value *v = NULL;
  for (size_t k = sc->locals.n; k-- > 0 && !v;)
    if (!strcmp(sc->locals.items[k].name, stext(carry))) v = sc->locals.items[k].v;
  if (!v) return ssm_src_error(node_pos(m, carry), "undefined name '%s'", stext(carry));
  for (int64_t i = 0; i < c.i; i++) {
    yaml_node_t *name = NULL;
    SSM_TRY(pick_block(b, block, i, &name));
    SSM_TRY(run_block(sc, name, i, v, &v));
  }
  SSM_TRY(scope_bind(sc, stext(carry), slen(carry), v));
  return NULL;
}

/* assert: COND, message: TEXT — the build stops with TEXT (a template whose
 * {expr} holes are expanded) when COND is false: a configuration this
 * description does not handle. */
static ssm_status exec_assert(scope *sc, yaml_node_t *stmt) {
  static const char *const keys[] = {"assert", "message", NULL};
  ssm_model *m = sc->b->m;
  SSM_TRY(check_map(m, stmt, "an assert", keys, keys));
  yaml_node_t *cond = map_get(m, stmt, "assert"), *msg = map_get(m, stmt, "message");
  SSM_TRY(expect_type(m, msg, YAML_SCALAR_NODE, "an assert message"));
  int ok;
  SSM_TRY(eval_cond(sc, cond, &ok));
  if (ok) return NULL;
  const char *text;
  SSM_TRY(ssm_expr_template(text_pos(m, msg), stext(msg), slen(msg), lookup_scope, sc,
                            sc->b->g->arena, &text));
  ssm_src at = node_pos(m, cond);
  return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: %s (%s:%d:%d: %.*s)%s", m->config_path, text, at.file,
                        at.line, at.col, (int)(slen(cond) > 80 ? 80 : slen(cond)), stext(cond),
                        params_note(m, stext(cond), slen(cond), sc->b->g->arena));
}

static ssm_status exec_stmt(scope *sc, yaml_node_t *stmt, int depth) {
  static const char *const if_keys[] = {"if", "then", "else", NULL};
  static const char *const if_required[] = {"if", "then", NULL};
  builder *b = sc->b;
  ssm_model *m = b->m;
  if (++b->work > MAX_WORK) return ssm_src_error(node_pos(m, stmt), "description expands to too many statements");
  if (stmt->type == YAML_SCALAR_NODE) return exec_string(sc, stmt);
  if (stmt->type == YAML_MAPPING_NODE && map_get(m, stmt, "repeat")) return exec_repeat(sc, stmt);
  if (stmt->type == YAML_MAPPING_NODE && map_get(m, stmt, "assert")) return exec_assert(sc, stmt);
  if (stmt->type == YAML_MAPPING_NODE && map_get(m, stmt, "if")) {
    if (depth >= MAX_STMT_DEPTH) return ssm_src_error(node_pos(m, stmt), "if: nested deeper than %d", MAX_STMT_DEPTH);
    SSM_TRY(check_map(m, stmt, "an if", if_keys, if_required));
    int cond;
    SSM_TRY(eval_cond(sc, map_get(m, stmt, "if"), &cond));
    yaml_node_t *branch = map_get(m, stmt, cond ? "then" : "else");
    if (!branch) return NULL;
    if (branch->type == YAML_SCALAR_NODE) return exec_stmt(sc, branch, depth + 1);
    return exec_list(sc, branch, depth + 1);
  }
  return ssm_src_error(node_pos(m, stmt), "a statement is a string \"name = op(...)\", an if: map, an assert: map or a repeat: map");
}

static ssm_status exec_list(scope *sc, yaml_node_t *list, int depth) {
  ssm_model *m = sc->b->m;
  SSM_TRY(expect_type(m, list, YAML_SEQUENCE_NODE, "a statement list"));
  for (yaml_node_item_t *it = list->data.sequence.items.start; it < list->data.sequence.items.top; it++)
    SSM_TRY(exec_stmt(sc, ynode(m, *it), depth));
  return NULL;
}

/* Binds a block's inputs: `in` is one name (the carried value) or a list
 * whose first name is the carried value and whose other names are read
 * from the calling scope (the graph's values, such as the embeddings). */
static ssm_status bind_inputs(scope *sc, scope *caller, yaml_node_t *in_spec, ssm_value *in) {
  ssm_model *m = sc->b->m;
  if (in_spec->type == YAML_SCALAR_NODE) {
    SSM_TRY(scope_bind(sc, stext(in_spec), slen(in_spec), in));
    return NULL;
  }
  for (yaml_node_item_t *it = in_spec->data.sequence.items.start; it < in_spec->data.sequence.items.top; it++) {
    yaml_node_t *nm = ynode(m, *it);
    ssm_value *v = in;
    if (it != in_spec->data.sequence.items.start) {
      v = NULL;
      for (size_t k = caller->locals.n; k-- > 0 && !v;)
        if (!strcmp(caller->locals.items[k].name, stext(nm))) v = caller->locals.items[k].v;
      if (!v)
        return ssm_src_error(node_pos(m, nm), "block input '%s' is not a value where the block is repeated",
                             stext(nm));
    }
    SSM_TRY(scope_bind(sc, stext(nm), slen(nm), v));
  }
  return NULL;
}

static ssm_status run_block_in(scope *sc, scope *caller, yaml_node_t *name, yaml_node_t *spec,
                               ssm_value *in, ssm_value **out) {
  ssm_model *m = sc->b->m;
  yaml_node_t *out_name = map_get(m, spec, "out");
  SSM_TRY(decls_make(sc, map_get(m, spec, "weights"), map_get(m, spec, "state"), &sc->decls, &sc->ndecls));
  SSM_TRY(bind_inputs(sc, caller, map_get(m, spec, "in"), in));
  SSM_TRY(exec_list(sc, map_get(m, spec, "body"), 0));
  *out = NULL;
  for (size_t k = 0; k < sc->locals.n; k++)
    if (!strcmp(sc->locals.items[k].name, stext(out_name))) *out = sc->locals.items[k].v;
  if (!*out)
    return ssm_src_error(node_pos(m, out_name), "block '%s' never assigns its out variable '%s'", stext(name),
                         stext(out_name));
  return NULL;
}

/* The number of earlier runs of block `name` (its `use`), counting this one. */
static ssm_status next_use(builder *b, yaml_node_t *name, int64_t *out) {
  int found;
  void **uses;
  SSM_TRY(ssm_status_wrap(ssm_strmap_slot(&b->uses, stext(name), &found, &uses),
                          "the runs of each block"));
  intptr_t use = (intptr_t)*uses;
  *uses = (void *)(use + 1);
  *out = use;
  return NULL;
}

static ssm_status run_block(scope *caller, yaml_node_t *name, int64_t layer, ssm_value *in,
                            ssm_value **out) {
  builder *b = caller->b;
  scope sc = {.b = b, .has_layer = 1, .layer = layer, .abs_layer = b->layers_run++};
  SSM_TRY(next_use(b, name, &sc.use));
  ssm_status s = run_block_in(&sc, caller, name, map_get(b->m, b->m->blocks, stext(name)), in, out);
  scope_free(&sc);
  return s;
}

/* `y = NAME(a, b)` where NAME is a block: runs it with its inputs bound to
 * the operands in order, in the caller's layer (the same `i` and state
 * prefix; at graph level, a layer of its own), and gives its out value. */
static ssm_status call_block(stmt_parser *p, yaml_node_t *name, size_t off, ssm_value **out) {
  ssm_lex *lx = &p->lx;
  scope *caller = p->sc;
  builder *b = caller->b;
  ssm_model *m = b->m;
  yaml_node_t *spec = map_get(m, m->blocks, stext(name)), *in = map_get(m, spec, "in");
  int want = in->type == YAML_SEQUENCE_NODE ? (int)(in->data.sequence.items.top - in->data.sequence.items.start) : 1;
  if (++p->depth > MAX_STMT_DEPTH)
    return ssm_lex_error(lx, off, "block calls nested deeper than %d", MAX_STMT_DEPTH);
  SSM_TRY(ssm_lex_next(lx));
  SSM_TRY(ssm_lex_expect(lx, "("));
  ssm_value *args[MAX_CALL_ARGS];
  int nargs = 0;
  while (!ssm_lex_is(lx, ")")) {
    if (nargs == want || nargs == MAX_CALL_ARGS)
      return ssm_lex_error(lx, lx->off, "block '%s' takes %d input%s", stext(name), want, want == 1 ? "" : "s");
    SSM_TRY(parse_operand(p, &args[nargs++]));
    if (!ssm_lex_is(lx, ")")) SSM_TRY(ssm_lex_expect(lx, ","));
  }
  SSM_TRY(ssm_lex_next(lx));
  p->depth--;
  if (nargs != want)
    return ssm_lex_error(lx, off, "block '%s' takes %d input%s, got %d", stext(name), want, want == 1 ? "" : "s", nargs);
  scope sc = {.b = b, .has_layer = 1};
  SSM_TRY(next_use(b, name, &sc.use));
  sc.layer = caller->has_layer ? caller->layer : 0;
  sc.abs_layer = caller->has_layer ? caller->abs_layer : b->layers_run++;
  ssm_status s = decls_make(&sc, map_get(m, spec, "weights"), map_get(m, spec, "state"), &sc.decls, &sc.ndecls);
  for (int k = 0; k < nargs && !s; k++) {
    yaml_node_t *nm = in->type == YAML_SEQUENCE_NODE ? ynode(m, in->data.sequence.items.start[k]) : in;
    s = scope_bind(&sc, stext(nm), slen(nm), args[k]);
  }
  if (!s) s = exec_list(&sc, map_get(m, spec, "body"), 0);
  yaml_node_t *out_name = map_get(m, spec, "out");
  *out = NULL;
  for (size_t k = 0; !s && k < sc.locals.n; k++)
    if (!strcmp(sc.locals.items[k].name, stext(out_name))) *out = sc.locals.items[k].v;
  if (!s && !*out)
    s = ssm_src_error(node_pos(m, out_name), "block '%s' never assigns its out variable '%s'", stext(name),
                      stext(out_name));
  scope_free(&sc);
  return s;
}

static ssm_status build_in(builder *b, scope *sc) {
  ssm_model *m = b->m;
  SSM_TRY(decls_make(sc, m->weights, NULL, &b->top, &b->ntop));
  SSM_TRY(exec_list(sc, m->graph, 0));
  if (!b->g->last || b->g->last->op != SSM_OP_OUTPUT)
    return ssm_src_error(node_pos(m, m->graph_key), "graph: must end with output(...)");
  return NULL;
}

ssm_status ssm_model_build(ssm_model *m, int tokens, ssm_graph **out) {
  *out = NULL;
  if (tokens < 1 || tokens > (1 << 24))
    return ssm_status_new(SSM_ERR_INVALID, "%s: tokens per run must be in 1..%d, got %d", m->file, 1 << 24, tokens);
  builder b = {.m = m, .T = tokens};
  SSM_TRY(ssm_graph_create(tokens == 1 ? "decode" : "prefill", &b.g));
  b.g->file = ssm_arena_strdup(b.g->arena, m->file);
  scope sc = {.b = &b};
  ssm_status s = build_in(&b, &sc);
  scope_free(&sc);
  free(b.top);
  ssm_strmap_free(&b.made);
  ssm_strmap_free(&b.uses);
  s = ssm_arena_check(b.g->arena, s, "the IR graph");
  if (!s) s = ssm_graph_verify(b.g);
  if (s) {
    ssm_graph_destroy(b.g);
    return s;
  }
  *out = b.g;
  return NULL;
}

/* ---- loading ----------------------------------------------------------- */

static ssm_status check_blocks(ssm_model *m) {
  static const char *const keys[] = {"in", "out", "weights", "state", "body", NULL};
  static const char *const required[] = {"in", "out", "body", NULL};
  if (!m->blocks) return NULL;
  SSM_TRY(check_map(m, m->blocks, "blocks", NULL, NULL));
  for (yaml_node_pair_t *p = m->blocks->data.mapping.pairs.start; p < m->blocks->data.mapping.pairs.top; p++) {
    yaml_node_t *spec = ynode(m, p->value);
    SSM_TRY(check_map(m, spec, "a block", keys, required));
    yaml_node_t *in = map_get(m, spec, "in");
    if (in->type == YAML_SEQUENCE_NODE) {
      if (in->data.sequence.items.top == in->data.sequence.items.start)
        return ssm_src_error(node_pos(m, in), "a block's in list is empty");
      for (yaml_node_item_t *it = in->data.sequence.items.start; it < in->data.sequence.items.top; it++)
        SSM_TRY(expect_ident(m, ynode(m, *it), "a block's input"));
    } else {
      SSM_TRY(expect_ident(m, in, "a block's in (a name, or a list of names)"));
    }
    SSM_TRY(expect_ident(m, map_get(m, spec, "out"), "a block's out"));
    SSM_TRY(expect_type(m, map_get(m, spec, "body"), YAML_SEQUENCE_NODE, "a block's body"));
  }
  return NULL;
}

static ssm_status model_types_of(ssm_model *m, yaml_node_t **out) {
  yaml_node_t *root = yaml_document_get_root_node(&m->doc);
  *out = map_get(m, root, "model_types");
  if (*out && (*out)->type != YAML_SEQUENCE_NODE) SSM_TRY(expect_type(m, *out, YAML_SEQUENCE_NODE, "model_types"));
  return NULL;
}

static ssm_status model_init(ssm_model *m, const cJSON *cfg) {
  static const char *const keys[] = {"ssmc", "architecture", "model_types", "params", "blocks", "weights", "graph", NULL};
  static const char *const required[] = {"ssmc", "architecture", "graph", NULL};
  yaml_node_t *root = yaml_document_get_root_node(&m->doc);
  SSM_TRY(check_map(m, root, "the model description", keys, required));
  yaml_node_t *ver = map_get(m, root, "ssmc");
  if (!scalar_is(ver, "1"))
    return ssm_src_error(node_pos(m, ver), "unsupported ssmc format version '%s' (this build reads 1)",
                         ver->type == YAML_SCALAR_NODE ? stext(ver) : "?");
  yaml_node_t *arch = map_get(m, root, "architecture"), *types;
  SSM_TRY(expect_ident(m, arch, "architecture"));
  m->arch = ssm_arena_strdup(m->arena, stext(arch));
  SSM_TRY(model_types_of(m, &types));
  for (yaml_node_item_t *it = types ? types->data.sequence.items.start : NULL; types && it < types->data.sequence.items.top; it++)
    SSM_TRY(expect_type(m, ynode(m, *it), YAML_SCALAR_NODE, "a model type"));
  char *cfg_text = cJSON_PrintUnformatted(cfg);
  if (!cfg_text)
    return ssm_status_new(SSM_ERR_NOMEM, "%s: out of host memory for the config text", m->config_path);
  m->source_hash = ssm_fnv1a(m->source_hash, cfg_text, strlen(cfg_text) + 1);
  cJSON_free(cfg_text);
  yaml_node_t *params = map_get(m, root, "params");
  if (params) SSM_TRY(bind_params(m, params, cfg));
  const cJSON *eos = cJSON_GetObjectItemCaseSensitive(cfg, "eos_token_id");
  if (cJSON_IsArray(eos)) eos = cJSON_GetArrayItem(eos, 0);
  if (cJSON_IsNumber(eos) && eos->valuedouble >= 0 && eos->valuedouble < (1 << 30) &&
      eos->valuedouble == floor(eos->valuedouble))
    m->eos = (int64_t)eos->valuedouble;
  m->blocks = map_get(m, root, "blocks");
  m->weights = map_get(m, root, "weights");
  m->graph = map_get(m, root, "graph");
  for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++)
    if (scalar_is(ynode(m, p->key), "graph")) m->graph_key = ynode(m, p->key);
  SSM_TRY(check_blocks(m));
  SSM_TRY(expect_type(m, m->graph, YAML_SEQUENCE_NODE, "graph"));
  ssm_graph *g;
  SSM_TRY(ssm_model_build(m, 1, &g));
  ssm_graph_destroy(g);
  return NULL;
}

static ssm_status model_new(const char *file, const char *config_path, ssm_model **out) {
  ssm_arena *a;
  SSM_TRY(ssm_status_wrap(ssm_arena_create(&a), "%s", file));
  ssm_model *m = ssm_arena_alloc(a, sizeof *m);
  if (!m) {
    ssm_status s = ssm_arena_status(a, "the model");
    ssm_arena_destroy(a);
    return ssm_status_wrap(s, "%s", file);
  }
  m->arena = a;
  m->file = ssm_arena_strdup(a, file);
  m->config_path = ssm_arena_strdup(a, config_path ? config_path : "");
  m->max_seq = DEFAULT_MAX_SEQ;
  m->eos = -1;
  *out = m;
  return NULL;
}

void ssm_model_close(ssm_model *m) {
  if (!m) return;
  if (m->has_doc) yaml_document_delete(&m->doc);
  ssm_arena_destroy(m->arena);
}

/* Reads YAML text into a new model (no config bound yet). */
static ssm_status model_read(const char *file, const char *text, size_t len, const char *config_path,
                             ssm_model **out) {
  ssm_model *m = NULL;
  SSM_TRY(model_new(file, config_path, &m));
  ssm_status s = yaml_read(file, text, len, &m->doc);
  if (s) {
    ssm_model_close(m);
    return s;
  }
  m->has_doc = 1;
  m->source_hash = ssm_fnv1a(SSM_FNV_INIT, text, len);
  *out = m;
  return NULL;
}

static int model_handles(ssm_model *m, const char *type) {
  yaml_node_t *types;
  ssm_status s = model_types_of(m, &types);
  if (s) {
    ssm_status_free(s);
    return 0;
  }
  for (yaml_node_item_t *it = types ? types->data.sequence.items.start : NULL; types && it < types->data.sequence.items.top; it++)
    if (scalar_is(ynode(m, *it), type)) return 1;
  return 0;
}

/* Picks the embedded YAML whose model_types lists the config's model_type. */
static ssm_status pick_embedded(const char *config_path, const cJSON *cfg, ssm_model **out) {
  *out = NULL;
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
  if (!cJSON_IsString(mt)) return ssm_status_new(SSM_ERR_INVALID, "%s: no string 'model_type'", config_path);
  char known[1024] = "";
  for (int k = 0; ssm_models_embedded_name(k); k++) {
    const char *fname = ssm_models_embedded_name(k);
    char file[256];
    snprintf(file, sizeof file, "models/%s", fname);
    const char *text = ssm_models_embedded(fname);
    ssm_model *m;
    SSM_TRY(model_read(file, text, strlen(text), config_path, &m));
    if (model_handles(m, mt->valuestring)) {
      *out = m;
      return NULL;
    }
    yaml_node_t *types = NULL;
    ssm_status_free(model_types_of(m, &types));
    if (types && types->type != YAML_SEQUENCE_NODE) types = NULL;
    for (yaml_node_item_t *it = types ? types->data.sequence.items.start : NULL;
         types && it < types->data.sequence.items.top; it++) {
      yaml_node_t *t = ynode(m, *it);
      if (t->type != YAML_SCALAR_NODE) continue;
      size_t used = strlen(known);
      snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", stext(t));
    }
    ssm_model_close(m);
  }
  return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: model_type '%.64s' is not supported (known: %s)", config_path,
                        mt->valuestring, known);
}

ssm_status ssm_model_open(const char *model, const char *config_path, ssm_model **out) {
  *out = NULL;
  struct stat st;
  cJSON *cfg = NULL;
  ssm_model *m = NULL;
  ssm_status s = NULL;
  char *text = NULL;
  if (!stat(model, &st) && S_ISDIR(st.st_mode)) {
    ssm_sb path = {0};
    if (!config_path) ssm_sb_printf(&path, "%s/config.json", model);
    const char *cp = config_path ? config_path : ssm_sb_str(&path);
    s = ssm_sb_status(&path, model);
    if (!s) s = json_read(cp, &cfg);
    if (!s) s = pick_embedded(cp, cfg, &m);
    ssm_sb_free(&path);
  } else {
    if (!stat(model, &st) && !S_ISREG(st.st_mode)) { /* a FIFO or device: say so, not "needs a config" */
      int fd;
      size_t size;
      SSM_TRY(ssm_file_open(model, &fd, &size));
      close(fd); /* replaced by a regular file meanwhile: read below */
    }
    if (!config_path)
      return ssm_status_new(SSM_ERR_INVALID, "%s: a model description needs a config.json (--config)", model);
    SSM_TRY(json_read(config_path, &cfg));
    /* "NAME.yaml" or "models/NAME.yaml" that is not on disk: the embedded copy */
    const char *base = strncmp(model, "models/", 7) ? model : model + 7;
    const char *embedded = !strchr(base, '/') && stat(model, &st) ? ssm_models_embedded(base) : NULL;
    size_t len = 0;
    if (embedded) {
      char file[256];
      snprintf(file, sizeof file, "models/%s", base);
      s = model_read(file, embedded, strlen(embedded), config_path, &m);
    } else {
      s = ssm_file_read(model, MAX_YAML_BYTES, &text, &len);
      if (!s) s = model_read(model, text, len, config_path, &m);
      free(text);
    }
  }
  if (!s) s = model_init(m, cfg);
  if (m) s = ssm_arena_check(m->arena, s, "the model");
  cJSON_Delete(cfg);
  if (s) {
    ssm_model_close(m);
    return s;
  }
  *out = m;
  return NULL;
}

ssm_status ssm_model_open_text(const char *yaml_name, const char *yaml, size_t yaml_len,
                               const char *config_name, const char *config, size_t config_len,
                               ssm_model **out) {
  *out = NULL;
  if (yaml_len > MAX_YAML_BYTES)
    return ssm_status_new(SSM_ERR_INVALID, "%s: larger than %u bytes", yaml_name, MAX_YAML_BYTES);
  cJSON *cfg;
  SSM_TRY(json_parse(config_name, config, config_len, &cfg));
  ssm_model *m = NULL;
  ssm_status s = model_read(yaml_name, yaml, yaml_len, config_name, &m);
  if (!s) s = model_init(m, cfg);
  if (m) s = ssm_arena_check(m->arena, s, "the model");
  cJSON_Delete(cfg);
  if (s) {
    ssm_model_close(m);
    return s;
  }
  *out = m;
  return NULL;
}

const char *ssm_model_arch(const ssm_model *m) { return m->arch; }
int64_t ssm_model_eos(const ssm_model *m) { return m->eos; }

ssm_status ssm_model_set_param(ssm_model *m, const char *name, int64_t v) {
  if (!strcmp(name, "max_seq")) {
    if (v < 1 || v > MAX_MAX_SEQ)
      return ssm_status_new(SSM_ERR_INVALID, "--max-seq must be in 1..%d, got %lld", MAX_MAX_SEQ,
                            (long long)v);
    m->max_seq = v;
    return NULL;
  }
  for (int k = 0; k < m->nparams; k++)
    if (!strcmp(m->params[k].name, name)) {
      m->params[k].v = (ssm_scalar){.kind = SSM_SC_INT, .i = v};
      return NULL;
    }
  return ssm_status_new(SSM_ERR_INVALID, "%s: no param '%s' to set", m->file, name);
}

uint64_t ssm_model_digest(const ssm_model *m) {
  uint64_t h = ssm_fnv1a(SSM_FNV_INIT, &m->source_hash, sizeof m->source_hash);
  h = ssm_fnv1a(h, &m->max_seq, sizeof m->max_seq);
  for (int k = 0; k < m->nparams; k++) {
    const ssm_scalar *v = &m->params[k].v;
    int32_t kind = (int32_t)v->kind;
    h = ssm_fnv1a(h, m->params[k].name, strlen(m->params[k].name) + 1);
    h = ssm_fnv1a(h, &kind, sizeof kind);
    h = v->kind == SSM_SC_FLOAT ? ssm_fnv1a(h, &v->f, sizeof v->f) : ssm_fnv1a(h, &v->i, sizeof v->i);
  }
  return h;
}

int ssm_model_param(const ssm_model *m, const char *name, int64_t *out) {
  ssm_scalar v;
  if (!param_find(m, name, strlen(name), &v) || v.kind == SSM_SC_FLOAT) return 0;
  *out = v.i;
  return 1;
}
