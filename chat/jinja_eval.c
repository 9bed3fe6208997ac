/*
 * jinja_eval.c — renders a parsed template (jinja_parse.c): evaluates its
 * expressions (Python's operators: floor division and modulo, string and
 * list concatenation, and/or giving the deciding operand), runs its
 * statements (output, if, for with its loop variable and else, set, set
 * blocks, macros, break and continue) and calls its macros. The values are
 * jinja_value.c's; what a template calls by name is jinja_builtins.c's.
 *
 * ssm_jinja_render returns NOMEM when an allocation failed anywhere in a
 * render, whatever the render made of it. Every render is bounded
 * (jinja_value.h): in nesting, steps of work, bytes of output and bytes of
 * values, and integers never overflow; past a bound, the render is an
 * error with the template's place, never a crash or a hang.
 */
#include <cjson/cJSON.h>
#include <math.h>

#include "chat/jinja_value.h"

#define MAX_DEPTH 64 /* nested macro calls */

/* ---- evaluation ------------------------------------------------------------------- */

static ssm_status eval(ctx *c, const jnode *n, jv *out);
static ssm_status exec(ctx *c, const jnode *n);
static ssm_status exec_list(ctx *c, const jnodes *l);

/* One more evaluation under way (leave() ends it), or an error past the
 * bound: the C stack is not the template's to exhaust. */
static ssm_status enter(ctx *c, const jnode *n) {
  if (c->nest >= MAX_EVAL_NEST)
    return ssm_jv_err(c, n, "expressions, blocks and macro calls nested deeper than %d", MAX_EVAL_NEST);
  c->nest++;
  return NULL;
}
static ssm_status leave(ctx *c, ssm_status s) {
  c->nest--;
  return s;
}

static ssm_status eval_args(ctx *c, const jnode *n, args *a) {
  jlist *pos = ssm_jv_list_new(c, (size_t)n->list.n + 1);
  for (int i = 0; i < n->list.n; i++) {
    jv v;
    SSM_TRY(eval(c, n->list.items[i], &v));
    if (i == n->i) {
      jlist *l;
      SSM_TRY(ssm_jv_iterable(c, n->list.items[i], v, &l));
      SSM_TRY(ssm_jv_work(c, n, l->n));
      for (size_t k = 0; k < l->n; k++) ssm_jv_list_push(c, pos, l->v[k]);
    } else {
      ssm_jv_list_push(c, pos, v);
    }
  }
  a->pos = pos->v;
  a->npos = (int)pos->n;
  a->names = n->names;
  a->nkw = n->nnames;
  a->kw = ssm_jv_alloc(c, sizeof(jv) * ((size_t)n->nnames + 1));
  if (!a->kw) return oom(c);
  for (int i = 0; i < n->nnames; i++) SSM_TRY(eval(c, n->list2.items[i], &a->kw[i]));
  return NULL;
}

static ssm_status call_macro(ctx *c, const jnode *at, const jnode *m, const args *a, jv *out) {
  if (a->npos > m->nnames)
    return ssm_jv_err(c, at, "macro '%s' takes %d arguments, got %d", m->str, m->nnames, a->npos);
  if (c->depth >= MAX_DEPTH) return ssm_jv_err(c, at, "macro calls nested deeper than %d", MAX_DEPTH);
  frame *f, *saved = c->cur;
  SSM_TRY(ssm_jv_frame_new(c, c->root, &f));
  for (int k = 0; k < a->nkw; k++) {
    int ok = 0;
    for (int j = 0; j < m->nnames && !ok; j++) ok = !strcmp(m->names[j], a->names[k]);
    if (!ok) return ssm_jv_err(c, at, "macro '%s' has no parameter '%s'", m->str, a->names[k]);
  }
  c->cur = f;
  ssm_status s = NULL;
  for (int j = 0; j < m->nnames && !s; j++) {
    jv v = UNDEF;
    v.name = m->names[j];
    int given = 0;
    for (int k = 0; k < a->nkw; k++)
      if (!strcmp(a->names[k], m->names[j])) v = a->kw[k], given = 1;
    if (j < a->npos) v = a->pos[j], given = 1;
    if (!given && m->list2.items[j]) s = eval(c, m->list2.items[j], &v);
    ssm_jv_frame_set(c, f, m->names[j], v);
  }
  ssm_sb body = {0}, *outer = c->out;
  c->out = &body;
  c->depth++;
  if (!s) s = exec(c, m->a);
  c->depth--;
  c->out = outer;
  c->cur = saved;
  c->brk = c->cont = 0;
  ssm_status t = ssm_jv_take(c, at, &body, out);
  if (s) ssm_status_free(t);
  return s ? s : t;
}

static ssm_status slice(ctx *c, const jnode *n, jv obj, jv *out) {
  jv bounds[3] = {NONE, NONE, NONE};
  const jnode *parts[3] = {n->b, n->c, n->list2.items[0]};
  for (int k = 0; k < 3; k++) {
    if (parts[k]) SSM_TRY(eval(c, parts[k], &bounds[k]));
    if (bounds[k].k != V_NONE && bounds[k].k != V_INT)
      return ssm_jv_err(c, n, "slice indices must be integers or none, not %s", ssm_jv_type_name(bounds[k]));
  }
  return ssm_jv_slice(c, n, obj, bounds, out);
}

/* ---- expressions -------------------------------------------------------------------- */

static ssm_status arith(ctx *c, const jnode *n, const char *op, jv a, jv b, jv *out) {
  if (op[0] == '~' || (op[0] == '+' && a.k == V_STR && b.k == V_STR)) {
    ssm_sb s = {0};
    ssm_jv_put_str(&s, a);
    ssm_jv_put_str(&s, b);
    return ssm_jv_take(c, n, &s, out);
  }
  if (op[0] == '+' && a.k == V_LIST && b.k == V_LIST) {
    SSM_TRY(ssm_jv_work(c, n, a.u.l->n + b.u.l->n));
    jlist *l = ssm_jv_list_new(c, a.u.l->n + b.u.l->n);
    for (size_t i = 0; i < a.u.l->n; i++) ssm_jv_list_push(c, l, a.u.l->v[i]);
    for (size_t i = 0; i < b.u.l->n; i++) ssm_jv_list_push(c, l, b.u.l->v[i]);
    *out = v_list(l);
    return NULL;
  }
  if (op[0] == '*' && !op[1] && ((a.k == V_STR && b.k == V_INT) || (a.k == V_INT && b.k == V_STR))) {
    jv s = a.k == V_STR ? a : b;
    int64_t k = a.k == V_INT ? a.u.i : b.u.i;
    if (k > 0 && s.u.s.n && (uint64_t)k > MAX_OUTPUT / s.u.s.n)
      return ssm_jv_err(c, n, "a string longer than %zu bytes", MAX_OUTPUT);
    SSM_TRY(ssm_jv_work(c, n, k > 0 ? (size_t)k / 16 + (size_t)k * s.u.s.n / 64 : 0));
    ssm_sb r = {0};
    ssm_sb_append(&r, "", 0);
    for (int64_t i = 0; i < k; i++) ssm_sb_append(&r, s.u.s.p, s.u.s.n);
    return ssm_jv_take(c, n, &r, out);
  }
  if (!is_num(a) || !is_num(b)) {
    if (a.k == V_UNDEF || b.k == V_UNDEF) {
      jv u = a.k == V_UNDEF ? a : b;
      return ssm_jv_err(c, n, "'%s' is undefined", u.name ? u.name : "value");
    }
    return ssm_jv_err(c, n, "unsupported operand types for %s: '%s' and '%s'", op, ssm_jv_type_name(a),
                      ssm_jv_type_name(b));
  }
  int ints = a.k != V_FLOAT && b.k != V_FLOAT;
  double x = num(a), y = num(b);
  char iop = op[1] == '*' ? 'p' : op[0];
  if (ints && (iop != '/' || op[1]) && (iop != 'p' || b.u.i >= 0)) {
    int64_t r;
    SSM_TRY(ssm_jv_int_op(c, n, iop, a.u.i, b.u.i, &r));
    *out = v_int(r);
    return NULL;
  }
  switch (op[0]) {
  case '+': *out = v_float(x + y); return NULL;
  case '-': *out = v_float(x - y); return NULL;
  case '*': *out = v_float(op[1] ? pow(x, y) : x * y); return NULL;
  default: break;
  }
  if (y == 0) return ssm_jv_err(c, n, "division by zero");
  if (op[0] == '/' && !op[1]) *out = v_float(x / y);
  else if (op[0] == '/') *out = v_float(floor(x / y));
  else {
    double r = fmod(x, y);
    *out = v_float(r && ((r < 0) != (y < 0)) ? r + y : r);
  }
  return NULL;
}

static ssm_status eval_call(ctx *c, const jnode *n, jv *out) {
  args a;
  const jnode *f = n->a;
  if (f->kind == J_ATTR) {
    jv self;
    SSM_TRY(eval(c, f->a, &self));
    if ((self.k == V_DICT || self.k == V_NS)) {
      jv *member = ssm_jv_dict_find(self.u.d, f->str, strlen(f->str));
      if (member && (member->k == V_MACRO || member->k == V_FUNC)) goto callable;
    }
    SSM_TRY(eval_args(c, n, &a));
    return ssm_jv_call_method(c, n, self, f->str, &a, out);
  }
callable:;
  jv fn;
  SSM_TRY(eval(c, f, &fn));
  SSM_TRY(eval_args(c, n, &a));
  SSM_TRY(ssm_jv_step(c, n));
  if (fn.k == V_MACRO) return call_macro(c, n, fn.u.m, &a, out);
  if (fn.k == V_FUNC) return ssm_jv_call_global(c, n, fn.u.fn, &a, out);
  if (fn.k == V_UNDEF) return ssm_jv_err(c, n, "'%s' is undefined", fn.name ? fn.name : "value");
  return ssm_jv_err(c, n, "'%s' object is not callable", ssm_jv_type_name(fn));
}

static ssm_status eval_node(ctx *c, const jnode *n, jv *out);

static ssm_status eval(ctx *c, const jnode *n, jv *out) {
  SSM_TRY(enter(c, n));
  return leave(c, eval_node(c, n, out));
}

static ssm_status eval_node(ctx *c, const jnode *n, jv *out) {
  jv a, b;
  switch (n->kind) {
  case J_CONST_STR: *out = v_str(n->str, n->len); return NULL;
  case J_CONST_INT: *out = v_int(n->i); return NULL;
  case J_CONST_FLOAT: *out = v_float(n->f); return NULL;
  case J_CONST_BOOL: *out = v_bool((int)n->i); return NULL;
  case J_CONST_NONE: *out = NONE; return NULL;
  case J_NAME:
    *out = ssm_jv_lookup(c, n->str);
    if (out->k == V_UNDEF) {
      int fn = ssm_jv_global_index(n->str);
      if (fn >= 0) *out = (jv){V_FUNC, {.fn = fn}, NULL};
    }
    return NULL;
  case J_ATTR: SSM_TRY(eval(c, n->a, &a)); return ssm_jv_get_attr(c, n, a, n->str, out);
  case J_ITEM:
    SSM_TRY(eval(c, n->a, &a));
    SSM_TRY(eval(c, n->b, &b));
    return ssm_jv_get_item(c, n, a, b, out);
  case J_SLICE: SSM_TRY(eval(c, n->a, &a)); return slice(c, n, a, out);
  case J_CALL: return eval_call(c, n, out);
  case J_FILTER: {
    args ar;
    SSM_TRY(eval(c, n->a, &a));
    SSM_TRY(eval_args(c, n, &ar));
    return ssm_jv_filter(c, n, n->str, a, &ar, out);
  }
  case J_TEST: {
    args ar;
    int r;
    SSM_TRY(eval(c, n->a, &a));
    SSM_TRY(eval_args(c, n, &ar));
    SSM_TRY(ssm_jv_test(c, n, n->str, a, &ar, &r));
    *out = v_bool(r != n->flag);
    return NULL;
  }
  case J_NEG: case J_POS:
    SSM_TRY(eval(c, n->a, &a));
    if (!is_num(a))
      return ssm_jv_err(c, n, "bad operand type for unary %c: '%s'", n->kind == J_NEG ? '-' : '+',
                        ssm_jv_type_name(a));
    if (n->kind == J_POS || a.k == V_FLOAT) {
      *out = n->kind == J_POS ? a : v_float(-a.u.f);
      return NULL;
    }
    SSM_TRY(ssm_jv_int_op(c, n, 'n', 0, a.u.i, &b.u.i));
    *out = v_int(b.u.i);
    return NULL;
  case J_NOT: SSM_TRY(eval(c, n->a, &a)); *out = v_bool(!ssm_jv_truthy(a)); return NULL;
  case J_AND: case J_OR: /* Python: the deciding operand itself */
    SSM_TRY(eval(c, n->a, &a));
    if (ssm_jv_truthy(a) == (n->kind == J_OR)) {
      *out = a;
      return NULL;
    }
    return eval(c, n->b, out);
  case J_BINOP:
    SSM_TRY(eval(c, n->a, &a));
    SSM_TRY(eval(c, n->b, &b));
    return arith(c, n, n->str, a, b, out);
  case J_CMP: {
    SSM_TRY(eval(c, n->a, &a));
    SSM_TRY(eval(c, n->b, &b));
    int r = 0;
    const char *op = n->str;
    if (!strcmp(op, "==")) r = ssm_jv_equal(c, a, b);
    else if (!strcmp(op, "!=")) r = !ssm_jv_equal(c, a, b);
    else if (!strcmp(op, "in") || !strcmp(op, "notin")) {
      SSM_TRY(ssm_jv_contains(c, n, b, a, &r));
      r = op[0] == 'n' ? !r : r;
    } else {
      int cmp;
      SSM_TRY(ssm_jv_order(c, n, a, b, &cmp));
      r = !strcmp(op, "<") ? cmp < 0 : !strcmp(op, "<=") ? cmp <= 0 : !strcmp(op, ">") ? cmp > 0 : cmp >= 0;
    }
    *out = v_bool(r);
    return NULL;
  }
  case J_COND:
    SSM_TRY(eval(c, n->b, &a));
    if (ssm_jv_truthy(a)) return eval(c, n->a, out);
    if (n->c) return eval(c, n->c, out);
    *out = UNDEF;
    return NULL;
  case J_LIST: case J_TUPLE: {
    jlist *l = ssm_jv_list_new(c, (size_t)n->list.n);
    for (int i = 0; i < n->list.n; i++) {
      SSM_TRY(eval(c, n->list.items[i], &a));
      ssm_jv_list_push(c, l, a);
    }
    *out = v_list(l);
    return NULL;
  }
  case J_DICT: {
    jdict *d = ssm_jv_dict_new(c);
    for (int i = 0; i < n->list.n; i++) {
      SSM_TRY(eval(c, n->list.items[i], &a));
      SSM_TRY(eval(c, n->list2.items[i], &b));
      ssm_jv_dict_set(c, d, a, b);
    }
    *out = (jv){V_DICT, {.d = d}, NULL};
    return NULL;
  }
  default: return ssm_jv_err(c, n, "internal: node %d is not an expression", (int)n->kind);
  }
}

/* ---- statements ---------------------------------------------------------------------- */

static ssm_status assign(ctx *c, const jnode *n, const char *const *names, int nnames, jv v) {
  if (nnames == 1) {
    ssm_jv_frame_set(c, c->cur, names[0], v);
    return NULL;
  }
  jlist *l;
  SSM_TRY(ssm_jv_iterable(c, n, v, &l));
  if (l->n != (size_t)nnames)
    return ssm_jv_err(c, n, "cannot unpack %zu values into %d names", l->n, nnames);
  for (int i = 0; i < nnames; i++) ssm_jv_frame_set(c, c->cur, names[i], l->v[i]);
  return NULL;
}

static ssm_status exec_for(ctx *c, const jnode *n) {
  jv seq;
  jlist *all, *items;
  SSM_TRY(eval(c, n->a, &seq));
  SSM_TRY(ssm_jv_iterable(c, n->a, seq, &all));
  frame *f, *saved = c->cur;
  SSM_TRY(ssm_jv_frame_new(c, c->cur, &f));
  c->cur = f;
  items = all;
  ssm_status s = NULL;
  if (n->b) { /* `for x in xs if cond`: filtered before loop counts */
    items = ssm_jv_list_new(c, 0);
    for (size_t i = 0; i < all->n && !s; i++) {
      jv cond;
      s = ssm_jv_work(c, n, 1);
      if (!s) s = assign(c, n, n->names, n->nnames, all->v[i]);
      if (!s) s = eval(c, n->b, &cond);
      if (!s && ssm_jv_truthy(cond)) ssm_jv_list_push(c, items, all->v[i]);
    }
  }
  jloop *loop = s ? NULL : ssm_jv_alloc(c, sizeof *loop);
  if (!s && !loop) s = oom(c);
  if (loop) loop->items = items;
  for (size_t i = 0; i < items->n && !s; i++) {
    s = ssm_jv_step(c, n);
    loop->index0 = i;
    ssm_jv_frame_set(c, f, "loop", (jv){V_LOOP, {.loop = loop}, NULL});
    if (!s) s = assign(c, n, n->names, n->nnames, items->v[i]);
    if (!s) s = exec_list(c, &n->list2);
    c->cont = 0;
    if (c->brk) {
      c->brk = 0;
      break;
    }
  }
  c->cur = saved;
  if (!s && !items->n && n->c) s = exec(c, n->c);
  return s;
}

static ssm_status exec_node(ctx *c, const jnode *n);

static ssm_status exec(ctx *c, const jnode *n) {
  SSM_TRY(enter(c, n));
  return leave(c, exec_node(c, n));
}

static ssm_status exec_node(ctx *c, const jnode *n) {
  jv v;
  size_t was = c->out->n;
  switch (n->kind) {
  case J_BODY: return exec_list(c, &n->list);
  case J_TEXT:
    ssm_sb_append(c->out, n->str, n->len);
    SSM_TRY(ssm_jv_work(c, n, n->len / 64));
    return ssm_jv_step(c, n);
  case J_OUT:
    SSM_TRY(eval(c, n->a, &v));
    ssm_jv_put_str(c->out, v);
    SSM_TRY(ssm_jv_work(c, n, (c->out->n - was) / 64));
    return ssm_jv_step(c, n);
  case J_IF:
    while (n && n->kind == J_IF) { /* an elif chain is a loop, not a recursion */
      SSM_TRY(eval(c, n->a, &v));
      if (ssm_jv_truthy(v)) return exec(c, n->b);
      n = n->c;
    }
    return n ? exec(c, n) : NULL;
  case J_FOR: return exec_for(c, n);
  case J_SET:
    SSM_TRY(eval(c, n->a, &v));
    if (n->str) { /* ns.attr = value */
      jv ns = ssm_jv_lookup(c, n->names[0]);
      if (ns.k != V_NS)
        return ssm_jv_err(c, n, "cannot set attribute '%s' of '%s' (a %s, not a namespace)", n->str,
                          n->names[0], ssm_jv_type_name(ns));
      ssm_jv_dict_set(c, ns.u.d, v_str(n->str, strlen(n->str)), v);
      return NULL;
    }
    return assign(c, n, n->names, n->nnames, v);
  case J_SETBLOCK: {
    ssm_sb body = {0}, *outer = c->out;
    c->out = &body;
    ssm_status s = exec(c, n->a);
    c->out = outer;
    jv text;
    ssm_status t = ssm_jv_take(c, n, &body, &text);
    if (s) ssm_status_free(t);
    else s = t;
    if (!s) ssm_jv_frame_set(c, c->cur, n->names[0], text);
    return s;
  }
  case J_MACRO: ssm_jv_frame_set(c, c->cur, n->str, (jv){V_MACRO, {.m = n}, NULL}); return NULL;
  case J_BREAK: c->brk = 1; return NULL;
  case J_CONTINUE: c->cont = 1; return NULL;
  default: return ssm_jv_err(c, n, "internal: node %d is not a statement", (int)n->kind);
  }
}

static ssm_status exec_list(ctx *c, const jnodes *l) {
  for (int i = 0; i < l->n && !c->brk && !c->cont; i++) SSM_TRY(exec(c, l->items[i]));
  return NULL;
}

/* ---- the variables --------------------------------------------------------------------- */

static jv from_json(ctx *c, const cJSON *j) {
  if (cJSON_IsNull(j)) return NONE;
  if (cJSON_IsBool(j)) return v_bool(cJSON_IsTrue(j));
  if (cJSON_IsNumber(j)) {
    double d = j->valuedouble;
    return d == floor(d) && fabs(d) < 9007199254740992.0 ? v_int((int64_t)d) : v_float(d);
  }
  if (cJSON_IsString(j)) return v_str(j->valuestring, strlen(j->valuestring));
  if (cJSON_IsArray(j)) {
    jlist *l = ssm_jv_list_new(c, (size_t)cJSON_GetArraySize(j));
    for (const cJSON *e = j->child; e; e = e->next) ssm_jv_list_push(c, l, from_json(c, e));
    return v_list(l);
  }
  if (cJSON_IsObject(j)) {
    jdict *d = ssm_jv_dict_new(c);
    /* dict_set counts its search: past the render's steps, the first step fails */
    for (const cJSON *e = j->child; e && c->steps <= MAX_WORK; e = e->next)
      ssm_jv_dict_set(c, d, v_str(e->string, strlen(e->string)), from_json(c, e));
    return (jv){V_DICT, {.d = d}, NULL};
  }
  return UNDEF;
}

ssm_status ssm_jinja_render(const ssm_jinja *t, const cJSON *vars, char **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  ssm_sb b = {0};
  ssm_sb_append(&b, "", 0);
  ctx c = {.t = t, .out = &b, .mark = ssm_nomem_mark()};
  ssm_status s = ssm_status_wrap(ssm_arena_create(&c.a), "%s", t->name);
  frame *globals = NULL;
  if (!s) s = ssm_jv_frame_new(&c, NULL, &globals);
  for (const cJSON *e = vars && !s ? vars->child : NULL; e; e = e->next)
    ssm_jv_frame_set(&c, globals, e->string, from_json(&c, e));
  if (!s) s = ssm_jv_frame_new(&c, globals, &c.root);
  c.cur = c.root;
  if (!s) s = exec(&c, t->root);
  ssm_arena_destroy(c.a);
  /* whatever a render made of dropped items and cut text is not to be trusted */
  s = ssm_nomem_check(c.mark, s, t->name);
  size_t n = b.n;
  if (!s) s = ssm_sb_take(&b, t->name, out);
  ssm_sb_free(&b);
  if (!s) *out_len = n;
  return s;
}
