/*
 * yaml.c — reading a model description with libyaml's document API (after
 * its event API has checked how deep it nests), and checking the shape of
 * what was read: node types, names, and maps with their allowed and
 * required keys, each error naming "file:line:col".
 */
#include "frontend/internal.h"

#define MAX_YAML_DEPTH 64
#define MAX_MAP_KEYS 4096

static const char *node_kind(const yaml_node_t *n) {
  return n->type == YAML_SCALAR_NODE ? "a scalar" : n->type == YAML_SEQUENCE_NODE ? "a list" : "a map";
}

ssm_status ssm_fe_expect_type(ssm_model *m, const yaml_node_t *n, yaml_node_type_t t,
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

ssm_status ssm_fe_expect_ident(ssm_model *m, const yaml_node_t *n, const char *what) {
  SSM_TRY(ssm_fe_expect_type(m, n, YAML_SCALAR_NODE, what));
  if (!is_ident(stext(n), slen(n)))
    return ssm_src_error(node_pos(m, n), "%s '%.*s' is not a name (letters, digits, _)", what,
                         (int)(slen(n) > 40 ? 40 : slen(n)), stext(n));
  return NULL;
}

/* Checks that `map` is a mapping whose keys are distinct scalars from the
 * NULL-terminated `allowed` (NULL: any name) and that `required` ones exist. */
ssm_status ssm_fe_check_map(ssm_model *m, const yaml_node_t *map, const char *what,
                            const char *const *allowed, const char *const *required) {
  SSM_TRY(ssm_fe_expect_type(m, map, YAML_MAPPING_NODE, what));
  if (map->data.mapping.pairs.top - map->data.mapping.pairs.start > MAX_MAP_KEYS)
    return ssm_src_error(node_pos(m, map), "%s has more than %d keys", what, MAX_MAP_KEYS);
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
    yaml_node_t *k = ynode(m, p->key);
    SSM_TRY(ssm_fe_expect_type(m, k, YAML_SCALAR_NODE, "a key"));
    if (allowed) {
      int ok = 0;
      for (const char *const *a = allowed; *a; a++) ok |= scalar_is(k, *a);
      if (!ok)
        return ssm_src_error(node_pos(m, k), "unknown key '%.*s' in %s", (int)(slen(k) > 40 ? 40 : slen(k)),
                             stext(k), what);
    } else {
      SSM_TRY(ssm_fe_expect_ident(m, k, "a key"));
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
ssm_status ssm_fe_yaml_read(const char *file, const char *text, size_t len, yaml_document_t *doc) {
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
