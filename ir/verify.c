/*
 * verify.c — the graph verifier.
 *
 * ssm_graph_verify checks what every pass may assume: each node has the
 * operand count and attributes its op's table entry asks for, uses only
 * values defined earlier, defines its result once, and declares the result
 * type its shape rule (shape.c) computes; source tensors are named, state
 * names are unique, and the graph ends in exactly one output node. Errors
 * point at the node: "file:line:col: " when it was parsed, "graph NAME: %id
 * (op): " when it was built.
 */
#include "ir/ir.h"

#include <stdarg.h>
#include <string.h>

/* A set of pointers (open addressing), for the values defined so far. */
typedef struct {
  const void **slots;
  size_t cap, n;
} ptrset;

static size_t ptr_hash(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)x;
}

static int ptrset_has(const ptrset *s, const void *p) {
  if (!s->cap) return 0;
  for (size_t i = ptr_hash(p) & (s->cap - 1); s->slots[i]; i = (i + 1) & (s->cap - 1))
    if (s->slots[i] == p) return 1;
  return 0;
}

static ssm_status ptrset_add(ptrset *s, const void *p) {
  if (2 * (s->n + 1) > s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    ptrset bigger = {NULL, cap, 0};
    SSM_TRY(ssm_status_wrap(ssm_alloc(cap, sizeof(void *), (void **)&bigger.slots),
                            "the verifier's set of values"));
    for (size_t i = 0; i < s->cap; i++)
      if (s->slots[i]) (void)ptrset_add(&bigger, s->slots[i]); /* no growth: cap is ample */
    free(s->slots);
    *s = bigger;
  }
  size_t i = ptr_hash(p) & (s->cap - 1);
  while (s->slots[i]) i = (i + 1) & (s->cap - 1);
  s->slots[i] = p;
  s->n++;
  return NULL;
}

typedef struct {
  ssm_graph *g;
  ptrset defined;
  SSM_VEC(const char *) states;
  const ssm_node *output;
} verifier;

static const char *op_name(const ssm_node *n) {
  return n->op >= 0 && n->op < SSM_OP_COUNT ? ssm_op_info_get(n->op)->name : "?";
}

static ssm_status SSM_PRINTF(3, 4) node_err(const verifier *V, const ssm_node *n,
                                            const char *fmt, ...) {
  char msg[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n->line > 0)
    return ssm_status_new(SSM_ERR_INVALID, "%s:%d:%d: %s", V->g->file ? V->g->file : "<ir>",
                          n->line, n->col, msg);
  if (n->result)
    return ssm_status_new(SSM_ERR_INVALID, "graph %s: %%%d (%s): %s", V->g->name,
                          n->result->id, op_name(n), msg);
  return ssm_status_new(SSM_ERR_INVALID, "graph %s: %s: %s", V->g->name, op_name(n), msg);
}

static const char *kind_name(ssm_attr_kind k) {
  switch (k) {
  case SSM_ATTR_INT: return "an integer";
  case SSM_ATTR_FLOAT: return "a float";
  case SSM_ATTR_STR: return "a string";
  case SSM_ATTR_INTS: return "an int list";
  }
  return "?";
}

static ssm_status check_attrs(verifier *V, const ssm_node *n, const ssm_op_info *info) {
  if (n->nattrs < 0 || n->nattrs > SSM_MAX_ATTRS) return node_err(V, n, "bad attribute count");
  int seen[SSM_MAX_ATTRS] = {0};
  for (int i = 0; i < n->nattrs; i++) {
    const ssm_attr *a = &n->attrs[i];
    if (!a->key) return node_err(V, n, "attribute %d has no key", i);
    int k = 0;
    while (k < info->nattrs && strcmp(info->attrs[k].key, a->key)) k++;
    if (k == info->nattrs)
      return node_err(V, n, "op '%s' has no attribute '%s'", info->name, a->key);
    if (seen[k]) return node_err(V, n, "attribute '%s' given twice", a->key);
    seen[k] = 1;
    if (a->kind != info->attrs[k].kind)
      return node_err(V, n, "attribute '%s' of '%s' must be %s", a->key, info->name,
                      kind_name(info->attrs[k].kind));
    if ((a->kind == SSM_ATTR_STR && !a->s) ||
        (a->kind == SSM_ATTR_INTS && (a->n < 0 || (a->n > 0 && !a->ints))))
      return node_err(V, n, "attribute '%s' has no value", a->key);
  }
  for (int k = 0; k < info->nattrs; k++)
    if (!seen[k] && !info->attrs[k].optional)
      return node_err(V, n, "op '%s' needs attribute '%s'", info->name, info->attrs[k].key);
  return NULL;
}

static ssm_status check_names(verifier *V, const ssm_node *n) {
  if (n->op != SSM_OP_INPUT && n->op != SSM_OP_WEIGHT && n->op != SSM_OP_STATE) return NULL;
  const char *name = ssm_node_str(n, "name", "");
  if (!name[0]) return node_err(V, n, "%s needs a non-empty name", op_name(n));
  if (n->op != SSM_OP_STATE) return NULL;
  for (size_t i = 0; i < V->states.n; i++)
    if (!strcmp(V->states.items[i], name))
      return node_err(V, n, "state name '%s' used twice", name);
  return ssm_status_wrap(ssm_vec_push(&V->states, name), "the verifier's list of states");
}

static ssm_status verify_node(verifier *V, const ssm_node *n) {
  if (n->op < 0 || n->op >= SSM_OP_COUNT) return node_err(V, n, "invalid op %d", (int)n->op);
  const ssm_op_info *info = ssm_op_info_get(n->op);
  if (V->output)
    return node_err(V, n, "%s after the output node (output must be the last node)",
                    n->op == SSM_OP_OUTPUT ? "second output node" : "node");
  if (n->op == SSM_OP_OUTPUT) V->output = n;
  if (n->nargs < info->min_args || n->nargs > info->max_args) {
    if (info->min_args == info->max_args)
      return node_err(V, n, "op '%s' takes %d operand%s, got %d", info->name, info->min_args,
                      info->min_args == 1 ? "" : "s", n->nargs);
    return node_err(V, n, "op '%s' takes %d to %d operands, got %d", info->name,
                    info->min_args, info->max_args, n->nargs);
  }
  SSM_TRY(check_attrs(V, n, info));
  for (int i = 0; i < n->nargs; i++) {
    if (!n->args[i]) return node_err(V, n, "operand %d is missing", i);
    if (!ptrset_has(&V->defined, n->args[i]))
      return node_err(V, n, "operand %d (%%%d) is not defined before its use", i,
                      n->args[i]->id);
  }
  if (info->kind == SSM_KIND_SINK) {
    if (n->result) return node_err(V, n, "op '%s' must not define a value", info->name);
  } else {
    if (!n->result) return node_err(V, n, "op '%s' must define a value", info->name);
    if (n->result->def != n) return node_err(V, n, "result value belongs to another node");
    if (ptrset_has(&V->defined, n->result))
      return node_err(V, n, "value %%%d defined twice", n->result->id);
    const ssm_type *t = &n->result->type;
    if ((int)t->dtype < 0 || t->dtype >= SSM_DTYPE_COUNT || t->rank < 0 ||
        t->rank > SSM_MAX_RANK)
      return node_err(V, n, "malformed result type");
    for (int i = 0; i < t->rank; i++)
      if (t->dims[i] < 1) return node_err(V, n, "result dimension %d is %lld", i,
                                          (long long)t->dims[i]);
  }
  SSM_TRY(check_names(V, n));
  ssm_type want;
  ssm_status s = ssm_op_infer(n, &want);
  if (s) {
    ssm_status e = node_err(V, n, "%s", ssm_status_message(s));
    ssm_status_free(s);
    return e;
  }
  if (n->result && !ssm_type_equal(&n->result->type, &want)) {
    char b1[96], b2[96];
    return node_err(V, n, "declared %s but %s computes %s",
                    ssm_type_format(&n->result->type, b1, sizeof b1), info->name,
                    ssm_type_format(&want, b2, sizeof b2));
  }
  if (n->result) return ptrset_add(&V->defined, n->result);
  return NULL;
}

ssm_status ssm_graph_verify(ssm_graph *g) {
  verifier V = {.g = g};
  ssm_graph_number(g);
  ssm_status s = NULL;
  for (const ssm_node *n = g->first; n && !s; n = n->next) s = verify_node(&V, n);
  if (!s && !V.output)
    s = g->file ? ssm_status_new(SSM_ERR_INVALID, "%s: graph %s has no output node", g->file,
                                 g->name)
                : ssm_status_new(SSM_ERR_INVALID, "graph %s: no output node", g->name);
  free(V.defined.slots);
  ssm_vec_free(&V.states);
  return s;
}
