/*
 * internal.h — what the files of frontend/ share and nothing else sees: the
 * model behind ssm_model, the YAML accessors every file uses, the graph
 * builder's scopes, and the functions one file gives another. From the
 * bottom up (each file uses only those listed before it):
 *
 *   expr.c      the language inside YAML strings (expr.h)
 *   yaml.c      reading the YAML document and checking its shape
 *   params.c    config.json, and the params bound to it
 *   scope.c     the builder's scopes: names, weights and states
 *   graph.c     statements to IR: calls, if/assert/repeat, blocks and
 *               layer schedules (ssm_model_build)
 *   frontend.c  loading a model: its files, the embedded YAMLs, the
 *               public accessors
 */
#ifndef SSM_FRONTEND_INTERNAL_H
#define SSM_FRONTEND_INTERNAL_H

#include <cjson/cJSON.h>
#include <string.h>
#include <yaml.h>

#include "frontend/expr.h"

/* A param of the description, bound to its config.json value. */
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
  cJSON *config_used;   /* the config keys the params read (ssm_model_config_used) */
  /* a nested config (the description's `nested:`): weight names that begin
   * with weight_from begin with weight_to in the checkpoint; NULL if none */
  const char *weight_from, *weight_to;
};

/* ---- YAML accessors ----------------------------------------------------- */

static inline yaml_node_t *ynode(ssm_model *m, int index) {
  return yaml_document_get_node(&m->doc, index);
}

/* Position of the node itself (its first character, a quote included). */
static inline ssm_src node_pos(const ssm_model *m, const yaml_node_t *n) {
  return (ssm_src){m->file, (int)n->start_mark.line + 1, (int)n->start_mark.column + 1};
}

/* Position of a scalar's first content character. */
static inline ssm_src text_pos(const ssm_model *m, const yaml_node_t *n) {
  ssm_src at = node_pos(m, n);
  if (n->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
      n->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE)
    at.col++;
  return at;
}

static inline const char *stext(const yaml_node_t *n) { return (const char *)n->data.scalar.value; }
static inline size_t slen(const yaml_node_t *n) { return n->data.scalar.length; }

static inline int scalar_is(const yaml_node_t *n, const char *s) {
  return n && n->type == YAML_SCALAR_NODE && slen(n) == strlen(s) && !memcmp(stext(n), s, slen(n));
}

static inline yaml_node_t *map_get(ssm_model *m, const yaml_node_t *map, const char *key) {
  if (!map || map->type != YAML_MAPPING_NODE) return NULL;
  for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++)
    if (scalar_is(ynode(m, p->key), key)) return ynode(m, p->value);
  return NULL;
}

/* ---- reading and checking YAML (yaml.c) ----------------------------------- */

/* Parses YAML text into `doc`, after checking with the event API that it
 * nests no deeper than it may. */
ssm_status ssm_fe_yaml_read(const char *file, const char *text, size_t len, yaml_document_t *doc);
/* "WHAT must be a map, not a list" unless `n` has type `t`. */
ssm_status ssm_fe_expect_type(ssm_model *m, const yaml_node_t *n, yaml_node_type_t t,
                              const char *what);
/* A scalar that is a name (letters, digits, _). */
ssm_status ssm_fe_expect_ident(ssm_model *m, const yaml_node_t *n, const char *what);
/* Checks that `map` is a mapping whose keys are distinct scalars from the
 * NULL-terminated `allowed` (NULL: any name) and that `required` ones exist. */
ssm_status ssm_fe_check_map(ssm_model *m, const yaml_node_t *map, const char *what,
                            const char *const *allowed, const char *const *required);

/* ---- config.json and params (params.c) ------------------------------------ */

/* Reads and parses config.json at `path`. */
ssm_status ssm_fe_json_read(const char *path, cJSON **out);
/* The param `name` (or the built-in max_seq) into *out (may be NULL); 0
 * when there is none. */
int ssm_fe_param_find(const ssm_model *m, const char *name, size_t n, ssm_scalar *out);
/* Binds the `params:` map to config.json `cfg` into m->params. */
ssm_status ssm_fe_bind_params(ssm_model *m, yaml_node_t *params, const cJSON *cfg);
/* What the config keys of the params that `text` names hold, for messages
 * about configurations a description refuses; "" when it names none. */
const char *ssm_fe_params_note(ssm_model *m, const char *text, size_t len, ssm_arena *a);

/* ---- the graph builder's scopes (scope.c) --------------------------------- */

typedef struct {
  const char *name;
  ssm_value *v;
} binding;

/* A weight or state a scope may use: evaluated on scope entry, made into a
 * node at first use. */
typedef struct {
  yaml_node_t *key;
  yaml_node_t *spec;
  int present, is_state, keep16; /* keep16: quantize: false */
  const char *name;
  const char *transform;
  ssm_type type;
  ssm_value *v;
} decl;

typedef struct {
  ssm_model *m;
  ssm_graph *g;
  int64_t T;
  int batch;        /* the T rows are T sequences of one token (ssm_model_build_batch) */
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

/* Looks a scalar name up in scope `ctx`: T, i, use, then the params. */
int ssm_fe_lookup_scope(void *ctx, const char *name, size_t n, ssm_scalar *out);
/* Counts a node toward the bound on a graph's size. */
ssm_status ssm_fe_count_node(builder *b, ssm_src at);
/* A scalar as messages show it (64, 0.5, true, 'rope'), into buf. */
const char *ssm_fe_scalar_str(const ssm_scalar *v, char *buf, size_t n);
/* Evaluates a condition in scope `sc`. */
ssm_status ssm_fe_eval_cond(scope *sc, yaml_node_t *cond, int *out);
/* The declarations of a `weights:` map and a `state:` map (either may be
 * NULL), evaluated in `sc`; *out is malloc'd. */
ssm_status ssm_fe_decls_make(scope *sc, yaml_node_t *weights, yaml_node_t *state, decl **out,
                             int *out_n);
/* Binds (or rebinds) a local name of `sc` to `v`. */
ssm_status ssm_fe_scope_bind(scope *sc, const char *name, size_t n, ssm_value *v);
void ssm_fe_scope_free(scope *sc);
/* Resolves a tensor name: locals, the scope's weights and states, the
 * top-level weights, `tokens`, `pos`. Returns NULL with *out NULL when
 * none matches. */
ssm_status ssm_fe_resolve_tensor(scope *sc, const char *name, size_t n, ssm_src at,
                                 ssm_value **out);

#endif
