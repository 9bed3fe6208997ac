/*
 * graph.c — statements to IR (ssm_model_build): each call
 * `name = op(args, key=value)` appends one node (nested calls append
 * theirs first), a block called like an op runs in the caller's layer,
 * `if:` maps are decided at build time, `assert:` maps stop the build with
 * their message when false, and `repeat:` runs a block once per layer,
 * the block chosen per layer by a schedule (`if`/`then`/`else` or
 * `switch`/`cases`). Result types come from ssm_op_infer; the finished
 * graph is verified.
 */
#include "frontend/internal.h"

#define MAX_REPEAT 100000
#define MAX_STMT_DEPTH 32
#define MAX_CALL_ARGS 16
#define MAX_WORK (50L * 1000 * 1000)

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
  SSM_TRY(ssm_expr_eval(&p->lx, ssm_fe_lookup_scope, p->sc, &v));
  if (v.kind != SSM_SC_INT && v.kind != SSM_SC_FLOAT)
    return ssm_lex_error(&p->lx, off, "a %s cannot be an operand", ssm_scalar_kind_name(v.kind));
  SSM_TRY(ssm_fe_count_node(b, ssm_lex_pos(&p->lx, off)));
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
    SSM_TRY(ssm_fe_resolve_tensor(p->sc, lx->text, lx->tlen, ssm_lex_pos(lx, off), out));
    if (*out) return ssm_lex_next(lx);
    int scalar = ssm_fe_lookup_scope(p->sc, lx->text, lx->tlen, &sv) ||
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
      SSM_TRY(ssm_expr_eval(lx, ssm_fe_lookup_scope, p->sc, &s));
      if (s.kind != SSM_SC_INT)
        return ssm_lex_error(lx, eoff, "attribute '%s' of '%s' must hold integers, not a %s", key,
                             info->name, ssm_scalar_kind_name(s.kind));
      v->ints[v->n++] = s.i;
      if (!ssm_lex_is(lx, "]")) SSM_TRY(ssm_lex_expect(lx, ","));
    }
    return ssm_lex_next(lx);
  default: {
    ssm_scalar s;
    SSM_TRY(ssm_expr_eval(lx, ssm_fe_lookup_scope, p->sc, &s));
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
    SSM_TRY(ssm_expr_eval(lx, ssm_fe_lookup_scope, p->sc, &s));
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
  SSM_TRY(ssm_fe_count_node(b, ssm_lex_pos(lx, off)));
  ssm_type t = reshape_type;
  if (op == SSM_OP_RESHAPE) t.dtype = args[0]->type.dtype;
  ssm_node *n = ssm_graph_append(b->g, op, info->kind == SSM_KIND_SINK ? NULL : &t, nargs, args);
  if (!n) return ssm_graph_status(b->g);
  if (b->batch) {
    if (op == SSM_OP_CONV1D || op == SSM_OP_SCAN || op == SSM_OP_SAMPLE || op == SSM_OP_ATTENTION ||
        op == SSM_OP_ROPE || op == SSM_OP_POSITIONS || op == SSM_OP_DELTA)
      ssm_node_set_int(b->g, n, "batch", 1);
  }
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
        ssm_fe_lookup_scope(sc, name, name_len, &(ssm_scalar){0}) ||
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
    SSM_TRY(ssm_fe_scope_bind(sc, name, name_len, v));
  }
  return NULL;
}

static ssm_status exec_list(scope *sc, yaml_node_t *list, int depth);

static ssm_status run_block(scope *caller, yaml_node_t *name, int64_t layer, ssm_value *in,
                            ssm_value **out);

/* ---- if, assert, repeat; blocks and layer schedules --------------------- */

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
      SSM_TRY(ssm_fe_check_map(m, block, "a block switch", switch_keys, switch_keys));
      SSM_TRY(ssm_fe_expect_type(m, map_get(m, block, "switch"), YAML_SCALAR_NODE, "a switch expression"));
      yaml_node_t *cases = map_get(m, block, "cases");
      SSM_TRY(ssm_fe_expect_type(m, cases, YAML_MAPPING_NODE, "cases"));
      for (yaml_node_pair_t *p = cases->data.mapping.pairs.start; p < cases->data.mapping.pairs.top; p++) {
        SSM_TRY(ssm_fe_expect_type(m, ynode(m, p->key), YAML_SCALAR_NODE, "a case"));
        SSM_TRY(check_block_choice(m, ynode(m, p->value), depth + 1));
      }
      return NULL;
    }
    SSM_TRY(ssm_fe_check_map(m, block, "a block choice", if_keys, if_keys));
    SSM_TRY(ssm_fe_expect_type(m, map_get(m, block, "if"), YAML_SCALAR_NODE, "a condition"));
    SSM_TRY(check_block_choice(m, map_get(m, block, "then"), depth + 1));
    return check_block_choice(m, map_get(m, block, "else"), depth + 1);
  }
  SSM_TRY(ssm_fe_expect_ident(m, block, "a block name (or {if: COND, then: NAME, else: NAME}, "
                                        "or {switch: EXPR, cases: {...}})"));
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
      SSM_TRY(ssm_fe_eval_cond(&at_i, map_get(m, block, "if"), &cond));
      block = map_get(m, block, cond ? "then" : "else");
      continue;
    }
    ssm_scalar v;
    SSM_TRY(ssm_expr_eval_str(text_pos(m, sw), stext(sw), slen(sw), ssm_fe_lookup_scope, &at_i, &v));
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
          m->config_path, (long long)i, ssm_fe_scalar_str(&v, vb, sizeof vb), m->file, at.file, at.line, at.col,
          stext(sw), ssm_sb_str(&known), ssm_fe_params_note(m, stext(sw), slen(sw), b->g->arena));
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
  SSM_TRY(ssm_fe_check_map(m, stmt, "a repeat", keys, keys));
  yaml_node_t *count = map_get(m, stmt, "repeat"), *block = map_get(m, stmt, "block"),
              *carry = map_get(m, stmt, "carry");
  SSM_TRY(ssm_fe_expect_type(m, count, YAML_SCALAR_NODE, "a repeat count"));
  ssm_scalar c;
  SSM_TRY(ssm_expr_eval_str(text_pos(m, count), stext(count), slen(count), ssm_fe_lookup_scope, sc, &c));
  if (c.kind != SSM_SC_INT || c.i < 0 || c.i > MAX_REPEAT) {
    char vb[48];
    return ssm_src_error(text_pos(m, count), "repeat count '%.*s' must be an integer in 0..%d, got %s",
                         (int)(slen(count) > 40 ? 40 : slen(count)), stext(count), MAX_REPEAT,
                         ssm_fe_scalar_str(&c, vb, sizeof vb));
  }
  SSM_TRY(check_block_choice(m, block, 0));
  SSM_TRY(ssm_fe_expect_ident(m, carry, "a carried variable"));
  ssm_value *v = NULL;
  for (size_t k = sc->locals.n; k-- > 0 && !v;)
    if (!strcmp(sc->locals.items[k].name, stext(carry))) v = sc->locals.items[k].v;
  if (!v) return ssm_src_error(node_pos(m, carry), "undefined name '%s'", stext(carry));
  for (int64_t i = 0; i < c.i; i++) {
    yaml_node_t *name = NULL;
    SSM_TRY(pick_block(b, block, i, &name));
    SSM_TRY(run_block(sc, name, i, v, &v));
  }
  SSM_TRY(ssm_fe_scope_bind(sc, stext(carry), slen(carry), v));
  return NULL;
}

/* assert: COND, message: TEXT — the build stops with TEXT (a template whose
 * {expr} holes are expanded) when COND is false: a configuration this
 * description does not handle. */
static ssm_status exec_assert(scope *sc, yaml_node_t *stmt) {
  static const char *const keys[] = {"assert", "message", NULL};
  ssm_model *m = sc->b->m;
  SSM_TRY(ssm_fe_check_map(m, stmt, "an assert", keys, keys));
  yaml_node_t *cond = map_get(m, stmt, "assert"), *msg = map_get(m, stmt, "message");
  SSM_TRY(ssm_fe_expect_type(m, msg, YAML_SCALAR_NODE, "an assert message"));
  int ok;
  SSM_TRY(ssm_fe_eval_cond(sc, cond, &ok));
  if (ok) return NULL;
  const char *text;
  SSM_TRY(ssm_expr_template(text_pos(m, msg), stext(msg), slen(msg), ssm_fe_lookup_scope, sc,
                            sc->b->g->arena, &text));
  ssm_src at = node_pos(m, cond);
  return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: %s (%s:%d:%d: %.*s)%s", m->config_path, text, at.file,
                        at.line, at.col, (int)(slen(cond) > 80 ? 80 : slen(cond)), stext(cond),
                        ssm_fe_params_note(m, stext(cond), slen(cond), sc->b->g->arena));
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
    SSM_TRY(ssm_fe_check_map(m, stmt, "an if", if_keys, if_required));
    int cond;
    SSM_TRY(ssm_fe_eval_cond(sc, map_get(m, stmt, "if"), &cond));
    yaml_node_t *branch = map_get(m, stmt, cond ? "then" : "else");
    if (!branch) return NULL;
    if (branch->type == YAML_SCALAR_NODE) return exec_stmt(sc, branch, depth + 1);
    return exec_list(sc, branch, depth + 1);
  }
  return ssm_src_error(node_pos(m, stmt), "a statement is a string \"name = op(...)\", an if: map, an assert: map or a repeat: map");
}

static ssm_status exec_list(scope *sc, yaml_node_t *list, int depth) {
  ssm_model *m = sc->b->m;
  SSM_TRY(ssm_fe_expect_type(m, list, YAML_SEQUENCE_NODE, "a statement list"));
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
    SSM_TRY(ssm_fe_scope_bind(sc, stext(in_spec), slen(in_spec), in));
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
    SSM_TRY(ssm_fe_scope_bind(sc, stext(nm), slen(nm), v));
  }
  return NULL;
}

static ssm_status run_block_in(scope *sc, scope *caller, yaml_node_t *name, yaml_node_t *spec,
                               ssm_value *in, ssm_value **out) {
  ssm_model *m = sc->b->m;
  yaml_node_t *out_name = map_get(m, spec, "out");
  SSM_TRY(ssm_fe_decls_make(sc, map_get(m, spec, "weights"), map_get(m, spec, "state"), &sc->decls, &sc->ndecls));
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
  ssm_fe_scope_free(&sc);
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
  ssm_status s = ssm_fe_decls_make(&sc, map_get(m, spec, "weights"), map_get(m, spec, "state"),
                                   &sc.decls, &sc.ndecls);
  for (int k = 0; k < nargs && !s; k++) {
    yaml_node_t *nm = in->type == YAML_SEQUENCE_NODE ? ynode(m, in->data.sequence.items.start[k]) : in;
    s = ssm_fe_scope_bind(&sc, stext(nm), slen(nm), args[k]);
  }
  if (!s) s = exec_list(&sc, map_get(m, spec, "body"), 0);
  yaml_node_t *out_name = map_get(m, spec, "out");
  *out = NULL;
  for (size_t k = 0; !s && k < sc.locals.n; k++)
    if (!strcmp(sc.locals.items[k].name, stext(out_name))) *out = sc.locals.items[k].v;
  if (!s && !*out)
    s = ssm_src_error(node_pos(m, out_name), "block '%s' never assigns its out variable '%s'", stext(name),
                      stext(out_name));
  ssm_fe_scope_free(&sc);
  return s;
}

static ssm_status build_in(builder *b, scope *sc) {
  ssm_model *m = b->m;
  SSM_TRY(ssm_fe_decls_make(sc, m->weights, NULL, &b->top, &b->ntop));
  SSM_TRY(exec_list(sc, m->graph, 0));
  if (!b->g->last || b->g->last->op != SSM_OP_OUTPUT)
    return ssm_src_error(node_pos(m, m->graph_key), "graph: must end with output(...)");
  return NULL;
}

static ssm_status build(ssm_model *m, int tokens, int batch, ssm_graph **out) {
  *out = NULL;
  if (tokens < 1 || tokens > (1 << 24))
    return ssm_status_new(SSM_ERR_INVALID, "%s: tokens per run must be in 1..%d, got %d", m->file, 1 << 24, tokens);
  builder b = {.m = m, .T = tokens, .batch = batch};
  SSM_TRY(ssm_graph_create(batch ? "batch" : tokens == 1 ? "decode" : "prefill", &b.g));
  b.g->file = ssm_arena_strdup(b.g->arena, m->file);
  scope sc = {.b = &b};
  ssm_status s = build_in(&b, &sc);
  ssm_fe_scope_free(&sc);
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

ssm_status ssm_model_build(ssm_model *m, int tokens, ssm_graph **out) {
  return build(m, tokens, 0, out);
}

ssm_status ssm_model_build_batch(ssm_model *m, int rows, ssm_graph **out) {
  return build(m, rows, 1, out);
}
