/*
 * scope.c — the scopes of the graph builder: what a name means where a
 * statement runs. A scope holds its local names (rebound freely), the
 * weights and states its block declares (evaluated on entry, made into
 * `weight`/`state` nodes at first use, one per distinct tensor name), and
 * the built-in inputs `tokens` and `pos`; scalars resolve to T, i, use
 * and the params.
 */
#include "frontend/internal.h"

#include <string.h>

#define MAX_NODES (1L << 22)

/* ---- the graph builder ------------------------------------------------- */

int ssm_fe_lookup_scope(void *ctx, const char *name, size_t n, ssm_scalar *out) {
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
  return ssm_fe_param_find(sc->b->m, name, n, out);
}

ssm_status ssm_fe_count_node(builder *b, ssm_src at) {
  if (++b->nodes > MAX_NODES) return ssm_src_error(at, "graph larger than %ld nodes", MAX_NODES);
  return NULL;
}

/* A scalar as messages show it: 64, 0.5, true, 'rope'. */
const char *ssm_fe_scalar_str(const ssm_scalar *v, char *buf, size_t n) {
  ssm_sb b = {0};
  ssm_scalar_format(&b, v);
  snprintf(buf, n, "%s", ssm_sb_str(&b));
  ssm_sb_free(&b);
  return buf;
}

/* Evaluates a shape list into `t` (f32). */
static ssm_status eval_shape(scope *sc, yaml_node_t *seq, const char *what, ssm_type *t) {
  ssm_model *m = sc->b->m;
  SSM_TRY(ssm_fe_expect_type(m, seq, YAML_SEQUENCE_NODE, what));
  int rank = (int)(seq->data.sequence.items.top - seq->data.sequence.items.start);
  if (rank > SSM_MAX_RANK) return ssm_src_error(node_pos(m, seq), "%s has rank %d; at most %d", what, rank, SSM_MAX_RANK);
  *t = (ssm_type){.dtype = SSM_F32, .rank = rank};
  int64_t numel = 1;
  for (int k = 0; k < rank; k++) {
    yaml_node_t *d = ynode(m, seq->data.sequence.items.start[k]);
    SSM_TRY(ssm_fe_expect_type(m, d, YAML_SCALAR_NODE, "a dimension"));
    ssm_scalar v;
    SSM_TRY(ssm_expr_eval_str(text_pos(m, d), stext(d), slen(d), ssm_fe_lookup_scope, sc, &v));
    if (v.kind != SSM_SC_INT || v.i <= 0 || v.i > SSM_FE_MAX_DIM) {
      char vb[48];
      return ssm_src_error(text_pos(m, d), "dimension '%.*s' must be an integer in 1..2^40, got %s",
                           (int)(slen(d) > 40 ? 40 : slen(d)), stext(d), ssm_fe_scalar_str(&v, vb, sizeof vb));
    }
    if (__builtin_mul_overflow(numel, v.i, &numel) || numel > SSM_FE_MAX_DIM)
      return ssm_src_error(text_pos(m, d), "%s has more than 2^40 elements", what);
    t->dims[k] = v.i;
  }
  return NULL;
}

ssm_status ssm_fe_eval_cond(scope *sc, yaml_node_t *cond, int *out) {
  ssm_model *m = sc->b->m;
  SSM_TRY(ssm_fe_expect_type(m, cond, YAML_SCALAR_NODE, "a condition"));
  ssm_scalar v;
  SSM_TRY(ssm_expr_eval_str(text_pos(m, cond), stext(cond), slen(cond), ssm_fe_lookup_scope, sc, &v));
  *out = ssm_scalar_truthy(&v);
  return NULL;
}

static const char *const weight_keys[] = {"name", "shape", "if", "transform", "quantize", NULL};
static const char *const weight_required[] = {"name", "shape", NULL};

/* Fills `d` from one `weights:` entry. */
static ssm_status decl_weight(scope *sc, yaml_node_t *key, yaml_node_t *spec, decl *d) {
  builder *b = sc->b;
  ssm_model *m = b->m;
  *d = (decl){.key = key, .spec = spec, .present = 1};
  SSM_TRY(ssm_fe_check_map(m, spec, "a weight", weight_keys, weight_required));
  yaml_node_t *cond = map_get(m, spec, "if");
  if (cond) SSM_TRY(ssm_fe_eval_cond(sc, cond, &d->present));
  if (!d->present) return NULL;
  yaml_node_t *name = map_get(m, spec, "name"), *tr = map_get(m, spec, "transform");
  SSM_TRY(ssm_fe_expect_type(m, name, YAML_SCALAR_NODE, "a weight name"));
  SSM_TRY(ssm_expr_template(text_pos(m, name), stext(name), slen(name), ssm_fe_lookup_scope, sc,
                            b->g->arena, &d->name));
  size_t nf = m->weight_from ? strlen(m->weight_from) : 0;
  if (nf && !strncmp(d->name, m->weight_from, nf)) {
    d->name = ssm_arena_printf(b->g->arena, "%s%s", m->weight_to, d->name + nf);
    SSM_TRY(ssm_graph_status(b->g));
  }
  if (tr) {
    SSM_TRY(ssm_fe_expect_type(m, tr, YAML_SCALAR_NODE, "a transform"));
    d->transform = stext(tr);
  }
  yaml_node_t *qz = map_get(m, spec, "quantize");
  if (qz) {
    SSM_TRY(ssm_fe_expect_type(m, qz, YAML_SCALAR_NODE, "quantize: true or false"));
    if (strcmp(stext(qz), "true") && strcmp(stext(qz), "false"))
      return ssm_src_error(text_pos(m, qz), "quantize: expected true or false, got '%s'", stext(qz));
    d->keep16 = !strcmp(stext(qz), "false");
  }
  return eval_shape(sc, map_get(m, spec, "shape"), "a weight shape", &d->type);
}

static ssm_status decl_state(scope *sc, yaml_node_t *key, yaml_node_t *shape, decl *d) {
  *d = (decl){.key = key, .spec = shape, .present = 1, .is_state = 1};
  d->name = ssm_arena_printf(sc->b->g->arena, "l%lld.%s", (long long)sc->abs_layer, stext(key));
  return eval_shape(sc, shape, "a state shape", &d->type);
}

/* Fills decls from a `weights:` map (and a `state:` map, may be NULL). */
ssm_status ssm_fe_decls_make(scope *sc, yaml_node_t *weights, yaml_node_t *state,
                             decl **out, int *out_n) {
  ssm_model *m = sc->b->m;
  *out = NULL;
  *out_n = 0;
  int n = 0;
  if (weights) {
    SSM_TRY(ssm_fe_check_map(m, weights, "weights", NULL, NULL));
    n += (int)(weights->data.mapping.pairs.top - weights->data.mapping.pairs.start);
  }
  if (state) {
    SSM_TRY(ssm_fe_check_map(m, state, "state", NULL, NULL));
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
    SSM_TRY(ssm_fe_count_node(b, at));
    ssm_type t = d->type;
    if (d->is_state && b->batch) { /* a row of state per sequence */
      if (t.rank >= SSM_MAX_RANK)
        return ssm_src_error(at, "state '%s' has %d dims: a batched program adds one, past the "
                             "%d an IR tensor has", d->name, t.rank, SSM_MAX_RANK);
      memmove(t.dims + 1, t.dims, sizeof t.dims[0] * (size_t)t.rank);
      t.dims[0] = b->T;
      t.rank++;
    }
    ssm_node *n = ssm_graph_append(b->g, d->is_state ? SSM_OP_STATE : SSM_OP_WEIGHT, &t, 0, NULL);
    if (!n) return ssm_graph_status(b->g);
    /* a batched graph's states are other tensors: slots.<name> (frontend.h) */
    if (d->is_state && b->batch)
      ssm_node_set_str(b->g, n, "name", ssm_arena_printf(b->g->arena, SSM_SLOTS_PREFIX "%s", d->name));
    else
      ssm_node_set_str(b->g, n, "name", d->name);
    if (d->transform) ssm_node_set_str(b->g, n, "transform", d->transform);
    if (d->keep16) ssm_node_set_int(b->g, n, "keep16", 1);
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

ssm_status ssm_fe_scope_bind(scope *sc, const char *name, size_t n, ssm_value *v) {
  for (size_t k = 0; k < sc->locals.n; k++)
    if (strlen(sc->locals.items[k].name) == n && !memcmp(sc->locals.items[k].name, name, n)) {
      sc->locals.items[k].v = v;
      return NULL;
    }
  binding bd = {ssm_arena_strndup(sc->b->g->arena, name, n), v};
  SSM_TRY(ssm_graph_status(sc->b->g));
  return ssm_status_wrap(ssm_vec_push(&sc->locals, bd), "the names of a scope");
}

void ssm_fe_scope_free(scope *sc) {
  ssm_vec_free(&sc->locals);
  free(sc->decls);
}

/* A built-in input (tokens, pos), made at first use. */
static ssm_status builtin_input(builder *b, const char *name, ssm_type t, ssm_src at,
                                ssm_value **slot) {
  if (!*slot) {
    SSM_TRY(ssm_fe_count_node(b, at));
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
ssm_status ssm_fe_resolve_tensor(scope *sc, const char *name, size_t n, ssm_src at, ssm_value **out) {
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
    /* a batched graph's rows each have their own position */
    SSM_TRY(builtin_input(b, "pos", ssm_type_make(SSM_I32, 1, (int64_t[]){b->batch ? b->T : 1}),
                          at, &b->pos));
    *out = b->pos;
  }
  return NULL;
}
