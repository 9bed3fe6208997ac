/*
 * simplify.c — fold weight transforms, common subexpressions, dead code.
 *
 * Three rewrites, in this order, repeated until none changes the graph:
 *
 *  fold  A unary op whose operand is a `weight` becomes a weight itself: the
 *        same tensor with the op appended to its load-time transform
 *        (neg(exp(A_log)) -> weight A_log transform="exp,neg"), so it is
 *        computed once at load instead of on every run. The new weight
 *        takes the op's place and uses; the old weight keeps its other uses
 *        (if any) and otherwise dies. Chains fold one op at a time, so an
 *        intermediate with several uses stays correct: each rewritten value
 *        is exactly the value it replaces.
 *  CSE   A node with the same op, operands, attributes (all of them, the
 *        transform of a weight included) and result type as an earlier one
 *        is replaced by it. Never merged: ops with effects (conv1d_causal,
 *        scan, output), state nodes, and nodes that read a state directly
 *        (a state changes in place, so two reads may see different values).
 *  DCE   A node whose result has no use and whose op has no effects goes.
 *
 * The note counts what each rewrite did over all rounds.
 */
#include "passes/passes.h"

#include <string.h>

/* ---- replacing uses --------------------------------------------------------- */

/* Replacements recorded during one walk of the graph in order. Every use
 * comes after its definition (the verifier's rule), so rewriting each node's
 * operands when the walk reaches it replaces every use in one walk; replacing
 * them value by value walked the whole graph each time (quadratic in the
 * number of layers). Values made during the walk get fresh ids. */
typedef struct {
  ssm_value **to; /* value id -> its replacement, or NULL */
  int cap, next_id;
} forwards;

static ssm_status fwd_begin(ssm_graph *g, forwards *out) {
  ssm_graph_number(g);
  int count = 0;
  for (const ssm_node *n = g->first; n; n = n->next) count++;
  *out = (forwards){NULL, g->nvalues + count + 1, g->nvalues};
  return ssm_status_wrap(ssm_alloc((size_t)out->cap, sizeof(ssm_value *), (void **)&out->to),
                         "the replacements of %d values", out->cap);
}

static void fwd_new_value(forwards *f, ssm_value *v) {
  SSM_ASSERT(f->next_id < f->cap);
  v->id = f->next_id++;
}

static void fwd_apply(const forwards *f, ssm_node *n) {
  for (int i = 0; i < n->nargs; i++)
    while (f->to[n->args[i]->id]) n->args[i] = f->to[n->args[i]->id];
}

/* ---- fold ----------------------------------------------------------------- */

static ssm_status fold_weight_transforms(ssm_graph *g, int *out_folded) {
  int folded = 0;
  forwards f;
  SSM_TRY(fwd_begin(g, &f));
  for (ssm_node *n = g->first; n; n = n->next) {
    fwd_apply(&f, n);
    if (ssm_op_info_get(n->op)->kind != SSM_KIND_UNARY || n->nargs != 1 || !n->result)
      continue;
    const ssm_node *w = n->args[0]->def;
    if (!w || w->op != SSM_OP_WEIGHT) continue;
    const char *op = ssm_op_info_get(n->op)->name;
    const char *old = ssm_node_str(w, "transform", "");
    const char *chain = old[0] ? ssm_arena_printf(g->arena, "%s,%s", old, op) : op;
    ssm_node *nw = ssm_graph_insert(g, n, SSM_OP_WEIGHT, &n->result->type, 0, NULL);
    if (!nw) break; /* ssm_graph_status says so */
    ssm_node_set_str(g, nw, "name", ssm_node_str(w, "name", ""));
    ssm_node_set_str(g, nw, "transform", chain);
    nw->line = n->line;
    nw->col = n->col;
    fwd_new_value(&f, nw->result);
    f.to[n->result->id] = nw->result;
    ssm_graph_remove(g, n);
    n = nw;
    folded++;
  }
  free(f.to);
  *out_folded = folded;
  return ssm_graph_status(g);
}

/* ---- CSE ------------------------------------------------------------------ */

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

static uint64_t hash_bytes(const void *p, size_t n) { return ssm_fnv1a(SSM_FNV_INIT, p, n); }

static uint64_t attr_hash(const ssm_attr *a) {
  uint64_t h = mix(hash_bytes(a->key, strlen(a->key)), (uint64_t)a->kind);
  switch (a->kind) {
  case SSM_ATTR_INT: return mix(h, (uint64_t)a->i);
  case SSM_ATTR_FLOAT: return mix(h, hash_bytes(&a->f, sizeof a->f));
  case SSM_ATTR_STR: return mix(h, hash_bytes(a->s, strlen(a->s)));
  case SSM_ATTR_INTS: return mix(h, hash_bytes(a->ints, sizeof(int64_t) * (size_t)a->n));
  }
  return h;
}

static int attr_equal(const ssm_attr *a, const ssm_attr *b) {
  if (strcmp(a->key, b->key) || a->kind != b->kind) return 0;
  switch (a->kind) {
  case SSM_ATTR_INT: return a->i == b->i;
  case SSM_ATTR_FLOAT: return !memcmp(&a->f, &b->f, sizeof a->f); /* -0 != 0, NaN == NaN */
  case SSM_ATTR_STR: return !strcmp(a->s, b->s);
  case SSM_ATTR_INTS:
    return a->n == b->n && !memcmp(a->ints, b->ints, sizeof(int64_t) * (size_t)a->n);
  }
  return 0;
}

/* Attributes are compared as sets: the order they were set in does not matter. */
static uint64_t node_hash(const ssm_node *n) {
  uint64_t h = mix((uint64_t)n->op, (uint64_t)n->nargs);
  for (int i = 0; i < n->nargs; i++) h = mix(h, (uint64_t)(uintptr_t)n->args[i]);
  const ssm_type *t = &n->result->type;
  h = mix(mix(h, (uint64_t)t->dtype), (uint64_t)t->rank);
  for (int i = 0; i < t->rank; i++) h = mix(h, (uint64_t)t->dims[i]);
  uint64_t attrs = 0;
  for (int i = 0; i < n->nattrs; i++) attrs += attr_hash(&n->attrs[i]);
  return mix(h, attrs);
}

static int node_equal(const ssm_node *a, const ssm_node *b) {
  if (a->op != b->op || a->nargs != b->nargs || a->nattrs != b->nattrs ||
      !ssm_type_equal(&a->result->type, &b->result->type))
    return 0;
  for (int i = 0; i < a->nargs; i++)
    if (a->args[i] != b->args[i]) return 0;
  for (int i = 0; i < a->nattrs; i++) {
    const ssm_attr *other = ssm_node_attr(b, a->attrs[i].key);
    if (!other || !attr_equal(&a->attrs[i], other)) return 0;
  }
  return 1;
}

static int cse_candidate(const ssm_node *n) {
  if (!n->result || ssm_op_has_effects(n->op) || n->op == SSM_OP_STATE) return 0;
  for (int i = 0; i < n->nargs; i++)
    if (n->args[i]->def && n->args[i]->def->op == SSM_OP_STATE) return 0;
  return 1;
}

static ssm_status eliminate_common(ssm_graph *g, int *out_merged) {
  size_t count = 0, cap = 16;
  for (const ssm_node *n = g->first; n; n = n->next) count++;
  while (cap < 2 * count) cap *= 2;
  ssm_node **table;
  SSM_TRY(ssm_status_wrap(ssm_alloc(cap, sizeof *table, (void **)&table), "the CSE table"));
  int merged = 0;
  forwards f;
  ssm_status s = fwd_begin(g, &f);
  if (s) {
    free(table);
    return s;
  }
  for (ssm_node *n = g->first, *next; n; n = next) {
    next = n->next;
    fwd_apply(&f, n);
    if (!cse_candidate(n)) continue;
    size_t i = (size_t)node_hash(n) & (cap - 1);
    while (table[i] && !node_equal(table[i], n)) i = (i + 1) & (cap - 1);
    if (!table[i]) {
      table[i] = n;
      continue;
    }
    f.to[n->result->id] = table[i]->result;
    ssm_graph_remove(g, n);
    merged++;
  }
  free(f.to);
  free(table);
  *out_merged = merged;
  return NULL;
}

/* ---- DCE ------------------------------------------------------------------ */

static ssm_status eliminate_dead(ssm_graph *g, int *out_removed) {
  ssm_graph_number(g);
  int *uses;
  SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)g->nvalues + 1, sizeof *uses, (void **)&uses),
                          "the use counts of %d values", g->nvalues));
  for (const ssm_node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->nargs; i++) {
      SSM_ASSERT(n->args[i]->id >= 0 && n->args[i]->id < g->nvalues);
      uses[n->args[i]->id]++;
    }
  int removed = 0;
  for (ssm_node *n = g->last, *prev; n; n = prev) { /* backwards: whole dead chains go at once */
    prev = n->prev;
    if (!n->result || ssm_op_has_effects(n->op) || uses[n->result->id]) continue;
    for (int i = 0; i < n->nargs; i++) uses[n->args[i]->id]--;
    ssm_graph_remove(g, n);
    removed++;
  }
  free(uses);
  *out_removed = removed;
  return NULL;
}

/* ---- the pass ------------------------------------------------------------- */

ssm_status ssm_pass_simplify(ssm_graph *g, const ssm_pass_opts *o, char *out_note, size_t n) {
  if (n) out_note[0] = 0;
  int folded = 0, merged = 0, removed = 0;
  for (;;) {
    int f, m, d;
    SSM_TRY(fold_weight_transforms(g, &f));
    SSM_TRY(eliminate_common(g, &m));
    SSM_TRY(eliminate_dead(g, &d));
    folded += f;
    merged += m;
    removed += d;
    if (!f && !m && !d) break;
  }
  ssm_graph_number(g);
  snprintf(out_note, n, "folded %d unary op%s into weight transforms, merged %d node%s, "
           "removed %d dead node%s", folded, folded == 1 ? "" : "s", merged,
           merged == 1 ? "" : "s", removed, removed == 1 ? "" : "s");
  return NULL;
}
