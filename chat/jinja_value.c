/*
 * jinja_value.c — the values of a render, with Python's semantics where
 * chat templates rely on them: truthiness, == across int and float, str()
 * and repr() of values (floats as Python prints them), ordering, `in`, and
 * transformers' tojson (json.dumps with ensure_ascii=False). Values live in
 * one arena per render.
 *
 * Out of memory: the arena and the string builders fail stickily, and a
 * failed container or string is an empty one (no_list, no_dict, ""), so a
 * render goes on without crashing until its next step, where it stops. So
 * does a value past a bound of the render (jinja_value.h): bytes made, or
 * nesting.
 */
#include <math.h>
#include <stdarg.h>

#include "chat/jinja_value.h"

#define STR_(x) #x
#define STR(x) STR_(x)

ssm_status ssm_jv_err(const ctx *c, const jnode *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ssm_sb b = {0}; /* a failed append: the render's NOMEM replaces the message */
  n = n ? n : c->at;
  ssm_sb_printf(&b, "%s:%d:%d: ", c->t->name, n ? n->line : 0, n ? n->col : 0);
  ssm_sb_vprintf(&b, fmt, ap);
  va_end(ap);
  ssm_status s = ssm_status_new(SSM_ERR_INVALID, "%s", ssm_sb_str(&b));
  ssm_sb_free(&b);
  return s;
}

ssm_status ssm_jv_oom(const ctx *c, const jnode *n) {
  if (c->over) return ssm_jv_err(c, n, "%s", c->over);
  return ssm_arena_status(c->a, c->t->name);
}

ssm_status ssm_jv_work(ctx *c, const jnode *n, size_t units) {
  if (n) c->at = n;
  SSM_TRY(ssm_nomem_since(c->mark, c->t->name));
  if (c->over) return ssm_jv_err(c, n, "%s", c->over);
  c->steps += units > (size_t)MAX_WORK ? MAX_WORK : (long)units;
  if (c->steps > MAX_WORK) return ssm_jv_err(c, n, "the template runs too long (over %ld steps)", MAX_WORK);
  return NULL;
}

ssm_status ssm_jv_step(ctx *c, const jnode *n) {
  SSM_TRY(ssm_jv_work(c, n, 1));
  if (c->out->n > MAX_OUTPUT) return ssm_jv_err(c, n, "the template's output passes %zu bytes", MAX_OUTPUT);
  return NULL;
}

void *ssm_jv_alloc(ctx *c, size_t bytes) {
  if (c->over) return NULL;
  if (bytes > MAX_MADE - c->made) {
    c->over = "the template's values pass " STR(MAX_MADE_MIB) " MiB";
    return NULL;
  }
  c->made += bytes;
  return ssm_arena_alloc(c->a, bytes);
}

ssm_status ssm_jv_take(ctx *c, const jnode *n, ssm_sb *b, jv *out) {
  *out = v_str("", 0);
  size_t len = b->n;
  ssm_status s = ssm_sb_status(b, c->t->name);
  if (!s && len > MAX_OUTPUT) s = ssm_jv_err(c, n, "a string longer than %zu bytes", MAX_OUTPUT);
  if (!s) s = ssm_jv_work(c, n, len / 64);
  char *d = s ? NULL : ssm_jv_alloc(c, len + 1);
  if (!s && !d) s = ssm_jv_oom(c, n);
  if (d) {
    memcpy(d, ssm_sb_str(b), len);
    d[len] = 0;
    *out = v_str(d, len);
  }
  ssm_sb_free(b);
  return s;
}

ssm_status ssm_jv_int_op(ctx *c, const jnode *n, char op, int64_t a, int64_t b, int64_t *out) {
  int64_t r = 0;
  int over = 0;
  static const char *const names[] = {"+", "addition", "-", "subtraction", "*", "multiplication",
                                      "/", "floor division", "%", "modulo", "p", "power", "n", "negation", NULL};
  switch (op) {
  case '+': over = __builtin_add_overflow(a, b, &r); break;
  case '-': case 'n': over = __builtin_sub_overflow(a, b, &r); break;
  case '*': over = __builtin_mul_overflow(a, b, &r); break;
  case '/': case '%':
    if (!b) return ssm_jv_err(c, n, "division by zero");
    if (b == -1) { /* INT64_MIN / -1 does not fit; x % -1 is 0 */
      over = op == '/' && __builtin_sub_overflow((int64_t)0, a, &r);
      if (op == '%') r = 0;
      break;
    }
    r = op == '/' ? a / b : a % b;
    if (a % b && ((a < 0) != (b < 0))) r = op == '/' ? r - 1 : r + b;
    break;
  case 'p':
    if (b < 0) return ssm_jv_err(c, n, "internal: a negative integer power");
    r = 1;
    for (int64_t base = a; b && !over; b >>= 1) {
      if (b & 1) over = __builtin_mul_overflow(r, base, &r);
      if (b > 1 && !over) over = __builtin_mul_overflow(base, base, &base);
    }
    break;
  default: return ssm_jv_err(c, n, "internal: integer operator '%c'", op);
  }
  if (over) {
    const char *what = "arithmetic";
    for (int k = 0; names[k]; k += 2)
      if (names[k][0] == op) what = names[k + 1];
    return ssm_jv_err(c, n, "integer overflow in %s (the result does not fit 64 bits)", what);
  }
  *out = r;
  return NULL;
}

/* ---- containers ------------------------------------------------------------------ */

jlist *ssm_jv_list_new(ctx *c, size_t cap) {
  jlist *l = ssm_jv_alloc(c, sizeof *l);
  if (!l) return &c->no_list;
  cap = cap ? cap : 4;
  l->v = cap <= MAX_MADE / sizeof(jv) ? ssm_jv_alloc(c, sizeof(jv) * cap) : NULL;
  l->cap = l->v ? cap : 0;
  l->depth = 1;
  return l;
}

/* How deep `v` is: 1 + that of a container's items, 0 for the rest. */
static int depth_of(jv v) {
  return v.k == V_LIST ? v.u.l->depth : v.k == V_DICT || v.k == V_NS ? v.u.d->depth : 0;
}

/* Whether `v` may go into a container of depth *depth, which it deepens;
 * when not, the render fails at its next step. */
static int may_hold(ctx *c, int *depth, jv v) {
  int d = depth_of(v) + 1;
  if (d > MAX_EVAL_NEST) {
    if (!c->over) c->over = "values nested deeper than " STR(MAX_EVAL_NEST);
    return 0;
  }
  if (d > *depth) *depth = d;
  return 1;
}

/* Appends `v`; dropped when the arena is out of memory (the render fails). */
void ssm_jv_list_push(ctx *c, jlist *l, jv v) {
  if (l == &c->no_list || !may_hold(c, &l->depth, v)) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 4;
    jv *nv = ssm_jv_alloc(c, sizeof(jv) * cap);
    if (!nv) return;
    if (l->n) memcpy(nv, l->v, sizeof(jv) * l->n);
    l->v = nv;
    l->cap = cap;
  }
  l->v[l->n++] = v;
}

jdict *ssm_jv_dict_new(ctx *c) {
  jdict *d = ssm_jv_alloc(c, sizeof *d);
  if (!d) return &c->no_dict;
  d->keys = ssm_jv_alloc(c, sizeof(jv) * 4);
  d->vals = ssm_jv_alloc(c, sizeof(jv) * 4);
  d->cap = d->keys && d->vals ? 4 : 0;
  d->depth = 1;
  return d;
}

jv *ssm_jv_dict_find(const jdict *d, const char *key, size_t n) {
  for (size_t i = 0; i < d->n; i++)
    if (str_eq(d->keys[i], key, n)) return &d->vals[i];
  return NULL;
}

void ssm_jv_dict_set(ctx *c, jdict *d, jv key, jv val) {
  c->steps += (long)(d->n / 8); /* the search; counted at the next step */
  if (d == &c->no_dict || !may_hold(c, &d->depth, val)) return;
  if (key.k == V_STR) {
    jv *at = ssm_jv_dict_find(d, key.u.s.p, key.u.s.n);
    if (at) {
      *at = val;
      return;
    }
  }
  if (d->n == d->cap) { /* out of memory: the item is dropped (the render fails) */
    size_t cap = d->cap ? d->cap * 2 : 4;
    jv *k = ssm_jv_alloc(c, sizeof(jv) * cap), *v = ssm_jv_alloc(c, sizeof(jv) * cap);
    if (!k || !v) return;
    if (d->n) memcpy(k, d->keys, sizeof(jv) * d->n), memcpy(v, d->vals, sizeof(jv) * d->n);
    d->keys = k;
    d->vals = v;
    d->cap = cap;
  }
  d->keys[d->n] = key;
  d->vals[d->n++] = val;
}

/* ---- frames --------------------------------------------------------------------- */

ssm_status ssm_jv_frame_new(ctx *c, frame *parent, frame **out) {
  frame *f = *out = ssm_jv_alloc(c, sizeof *f);
  if (!f) return oom(c);
  f->parent = parent;
  return NULL;
}

void ssm_jv_frame_set(ctx *c, frame *f, const char *name, jv v) {
  for (size_t i = 0; i < f->n; i++)
    if (!strcmp(f->names[i], name)) {
      f->vals[i] = v;
      return;
    }
  if (f->n == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 8;
    const char **nn = ssm_jv_alloc(c, sizeof(char *) * cap);
    jv *nv = ssm_jv_alloc(c, sizeof(jv) * cap);
    if (!nn || !nv) return; /* dropped: the render fails */
    if (f->n) memcpy(nn, f->names, sizeof(char *) * f->n), memcpy(nv, f->vals, sizeof(jv) * f->n);
    f->names = nn;
    f->vals = nv;
    f->cap = cap;
  }
  f->names[f->n] = name;
  f->vals[f->n++] = v;
}

jv ssm_jv_lookup(const ctx *c, const char *name) {
  for (const frame *f = c->cur; f; f = f->parent)
    for (size_t i = f->n; i-- > 0;)
      if (!strcmp(f->names[i], name)) return f->vals[i];
  jv u = UNDEF;
  u.name = name;
  return u;
}

/* ---- conversions ------------------------------------------------------------------ */

int ssm_jv_truthy(jv v) {
  switch (v.k) {
  case V_UNDEF: case V_NONE: return 0;
  case V_BOOL: case V_INT: return v.u.i != 0;
  case V_FLOAT: return v.u.f != 0;
  case V_STR: return v.u.s.n > 0;
  case V_LIST: return v.u.l->n > 0;
  case V_DICT: return v.u.d->n > 0;
  default: return 1;
  }
}

const char *ssm_jv_type_name(jv v) {
  static const char *const names[] = {"undefined", "NoneType", "bool", "int", "float", "str", "list",
                                      "dict", "Namespace", "macro", "function", "LoopContext"};
  return names[v.k];
}

/* Python's repr of a float: the shortest digits that read back the same. */
static void put_float(ssm_sb *b, double f) {
  if (isnan(f)) {
    ssm_sb_printf(b, "nan");
    return;
  }
  if (isinf(f)) {
    ssm_sb_printf(b, f < 0 ? "-inf" : "inf");
    return;
  }
  char buf[64];
  int prec = 1;
  for (; prec < 17; prec++) {
    snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
    if (strtod(buf, NULL) == f) break;
  }
  snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
  char digits[32];
  int nd = 0, neg = buf[0] == '-';
  const char *q = buf + neg;
  for (; *q && *q != 'e'; q++)
    if (*q != '.') digits[nd++] = *q;
  int exp = atoi(q + 1);
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  if (neg) ssm_sb_append(b, "-", 1);
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      ssm_sb_append(b, "0.", 2);
      for (int k = 0; k < -exp - 1; k++) ssm_sb_append(b, "0", 1);
      ssm_sb_append(b, digits, (size_t)nd);
    } else {
      for (int k = 0; k <= exp; k++) ssm_sb_append(b, k < nd ? &digits[k] : "0", 1);
      ssm_sb_append(b, ".", 1);
      if (nd > exp + 1) ssm_sb_append(b, digits + exp + 1, (size_t)(nd - exp - 1));
      else ssm_sb_append(b, "0", 1);
    }
  } else {
    ssm_sb_append(b, digits, 1);
    if (nd > 1) {
      ssm_sb_append(b, ".", 1);
      ssm_sb_append(b, digits + 1, (size_t)(nd - 1));
    }
    ssm_sb_printf(b, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  }
}

static void put_repr(ssm_sb *b, jv v);

void ssm_jv_put_str(ssm_sb *b, jv v) {
  switch (v.k) {
  case V_UNDEF: break;
  case V_NONE: ssm_sb_append(b, "None", 4); break;
  case V_BOOL: ssm_sb_printf(b, v.u.i ? "True" : "False"); break;
  case V_INT: ssm_sb_printf(b, "%lld", (long long)v.u.i); break;
  case V_FLOAT: put_float(b, v.u.f); break;
  case V_STR: ssm_sb_append(b, v.u.s.p, v.u.s.n); break;
  case V_NS: ssm_sb_printf(b, "<Namespace>"); break;
  case V_MACRO: ssm_sb_printf(b, "<Macro '%s'>", v.u.m->str); break;
  case V_FUNC: ssm_sb_printf(b, "<function>"); break;
  case V_LOOP: ssm_sb_printf(b, "<LoopContext>"); break;
  default: put_repr(b, v);
  }
}

static void put_repr(ssm_sb *b, jv v) {
  if (v.k == V_STR) {
    int has_sq = memchr(v.u.s.p, '\'', v.u.s.n) != NULL, has_dq = memchr(v.u.s.p, '"', v.u.s.n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    ssm_sb_append(b, &q, 1);
    for (size_t i = 0; i < v.u.s.n; i++) {
      unsigned char ch = (unsigned char)v.u.s.p[i];
      if (ch == '\\' || ch == (unsigned char)q) ssm_sb_printf(b, "\\%c", ch);
      else if (ch == '\n') ssm_sb_append(b, "\\n", 2);
      else if (ch == '\r') ssm_sb_append(b, "\\r", 2);
      else if (ch == '\t') ssm_sb_append(b, "\\t", 2);
      else if (ch < 0x20 || ch == 0x7f) ssm_sb_printf(b, "\\x%02x", ch);
      else ssm_sb_append(b, &v.u.s.p[i], 1);
    }
    ssm_sb_append(b, &q, 1);
  } else if (v.k == V_LIST) {
    ssm_sb_append(b, "[", 1);
    for (size_t i = 0; i < v.u.l->n && b->n <= MAX_OUTPUT; i++) {
      if (i) ssm_sb_append(b, ", ", 2);
      put_repr(b, v.u.l->v[i]);
    }
    ssm_sb_append(b, "]", 1);
  } else if (v.k == V_DICT) {
    ssm_sb_append(b, "{", 1);
    for (size_t i = 0; i < v.u.d->n && b->n <= MAX_OUTPUT; i++) {
      if (i) ssm_sb_append(b, ", ", 2);
      put_repr(b, v.u.d->keys[i]);
      ssm_sb_append(b, ": ", 2);
      put_repr(b, v.u.d->vals[i]);
    }
    ssm_sb_append(b, "}", 1);
  } else {
    ssm_jv_put_str(b, v);
  }
}

/* A copy of n bytes of text in the arena ("" once it failed). */
jv ssm_jv_copy(ctx *c, const char *p, size_t n) {
  char *d = ssm_jv_alloc(c, n + 1);
  if (!d) return v_str("", 0);
  memcpy(d, p, n);
  return v_str(d, n);
}

jv ssm_jv_to_str(ctx *c, jv v) {
  if (v.k == V_STR) return v;
  ssm_sb b = {0};
  ssm_jv_put_str(&b, v);
  jv r;
  ssm_status s = ssm_jv_take(c, NULL, &b, &r); /* a failure: "", and the next step fails */
  if (s && !c->over) c->over = "a value's text is too long";
  ssm_status_free(s);
  return r;
}

/* json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort) */
ssm_status ssm_jv_put_json(ctx *c, const jnode *at, ssm_sb *b, jv v, int indent, int level, int sort) {
  if (level >= MAX_EVAL_NEST) /* namespaces can hold themselves */
    return ssm_jv_err(c, at, "tojson: a value nested deeper than %d (one that holds itself?)", MAX_EVAL_NEST);
  if (b->n > MAX_OUTPUT) return ssm_jv_err(c, at, "tojson: a string longer than %zu bytes", MAX_OUTPUT);
  SSM_TRY(ssm_jv_work(c, at, 1 + (v.k == V_STR ? v.u.s.n / 64 : 0)));
  switch (v.k) {
  case V_NONE: ssm_sb_append(b, "null", 4); return NULL;
  case V_BOOL: ssm_sb_printf(b, v.u.i ? "true" : "false"); return NULL;
  case V_INT: case V_FLOAT: ssm_jv_put_str(b, v); return NULL;
  case V_STR:
    ssm_sb_append(b, "\"", 1);
    for (size_t i = 0; i < v.u.s.n; i++) {
      unsigned char ch = (unsigned char)v.u.s.p[i];
      const char *e = ch == '"' ? "\\\"" : ch == '\\' ? "\\\\" : ch == '\n' ? "\\n" : ch == '\r' ? "\\r"
                      : ch == '\t' ? "\\t" : ch == '\b' ? "\\b" : ch == '\f' ? "\\f" : NULL;
      if (e) ssm_sb_printf(b, "%s", e);
      else if (ch < 0x20) ssm_sb_printf(b, "\\u%04x", ch);
      else ssm_sb_append(b, &v.u.s.p[i], 1);
    }
    ssm_sb_append(b, "\"", 1);
    return NULL;
  case V_LIST: case V_DICT: case V_NS: {
    int is_list = v.k == V_LIST;
    size_t n = is_list ? v.u.l->n : v.u.d->n;
    ssm_sb_append(b, is_list ? "[" : "{", 1);
    size_t *order = ssm_jv_alloc(c, sizeof(size_t) * (n + 1));
    if (!order) return oom(c);
    for (size_t i = 0; i < n; i++) order[i] = i;
    if (!is_list && sort) /* insertion sort by key bytes: dicts here are small */
      for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
          SSM_TRY(ssm_jv_work(c, at, 1));
          jv ka = v.u.d->keys[order[j - 1]], kb = v.u.d->keys[order[j]];
          size_t m = ka.u.s.n < kb.u.s.n ? ka.u.s.n : kb.u.s.n;
          int cmp = memcmp(ka.u.s.p, kb.u.s.p, m);
          if (cmp < 0 || (cmp == 0 && ka.u.s.n <= kb.u.s.n)) break;
          size_t t = order[j];
          order[j] = order[j - 1];
          order[j - 1] = t;
        }
    for (size_t k = 0; k < n; k++) {
      size_t i = order[k];
      if (k) ssm_sb_append(b, indent >= 0 ? "," : ", ", indent >= 0 ? 1 : 2);
      if (indent >= 0) {
        ssm_sb_append(b, "\n", 1);
        for (int s = 0; s < indent * (level + 1); s++) ssm_sb_append(b, " ", 1);
      }
      if (!is_list) {
        jv key = v.u.d->keys[i];
        if (key.k != V_STR) return ssm_jv_err(c, at, "tojson: a dict key of type %s", ssm_jv_type_name(key));
        SSM_TRY(ssm_jv_put_json(c, at, b, key, indent, level + 1, sort));
        ssm_sb_append(b, ": ", 2);
      }
      SSM_TRY(ssm_jv_put_json(c, at, b, is_list ? v.u.l->v[i] : v.u.d->vals[i], indent, level + 1, sort));
    }
    if (indent >= 0 && n) {
      ssm_sb_append(b, "\n", 1);
      for (int s = 0; s < indent * level; s++) ssm_sb_append(b, " ", 1);
    }
    ssm_sb_append(b, is_list ? "]" : "}", 1);
    return NULL;
  }
  default: return ssm_jv_err(c, at, "tojson: a value of type %s is not JSON serializable", ssm_jv_type_name(v));
  }
}

/* ---- UTF-8 ---------------------------------------------------------------------- */

size_t ssm_jv_u8_len(const char *s, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xc0) != 0x80;
  return k;
}

/* The byte offset of code point `cp` (<= the length). */
size_t ssm_jv_u8_offset(const char *s, size_t n, size_t cp) {
  size_t i = 0;
  for (; i < n && cp; cp--) {
    i++;
    while (i < n && ((unsigned char)s[i] & 0xc0) == 0x80) i++;
  }
  return i;
}

size_t ssm_jv_length(jv v) {
  return v.k == V_STR ? ssm_jv_u8_len(v.u.s.p, v.u.s.n) : v.k == V_LIST ? v.u.l->n
         : v.k == V_DICT || v.k == V_NS ? v.u.d->n : 0;
}

/* ---- comparisons ------------------------------------------------------------------ */

int ssm_jv_equal(ctx *c, jv a, jv b) {
  c->steps++;
  if (is_num(a) && is_num(b)) return a.k != V_FLOAT && b.k != V_FLOAT ? a.u.i == b.u.i : num(a) == num(b);
  if (a.k != b.k) return 0;
  switch (a.k) {
  case V_UNDEF: case V_NONE: return 1;
  case V_STR: c->steps += (long)(a.u.s.n / 64); return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
  case V_LIST:
    if (a.u.l->n != b.u.l->n) return 0;
    for (size_t i = 0; i < a.u.l->n; i++)
      if (!ssm_jv_equal(c, a.u.l->v[i], b.u.l->v[i])) return 0;
    return 1;
  case V_DICT:
    if (a.u.d->n != b.u.d->n) return 0;
    for (size_t i = 0; i < a.u.d->n; i++) {
      c->steps += (long)(b.u.d->n / 8);
      const jv *o = a.u.d->keys[i].k == V_STR
                        ? ssm_jv_dict_find(b.u.d, a.u.d->keys[i].u.s.p, a.u.d->keys[i].u.s.n) : NULL;
      if (!o || !ssm_jv_equal(c, a.u.d->vals[i], *o)) return 0;
    }
    return 1;
  default: return a.u.d == b.u.d;
  }
}

ssm_status ssm_jv_order(ctx *c, const jnode *n, jv a, jv b, int *out) {
  if (is_num(a) && is_num(b)) {
    double x = num(a), y = num(b);
    *out = x < y ? -1 : x > y;
    return NULL;
  }
  if (a.k == V_STR && b.k == V_STR) {
    size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
    SSM_TRY(ssm_jv_work(c, n, m / 64));
    int r = memcmp(a.u.s.p, b.u.s.p, m);
    *out = r ? r : a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
    return NULL;
  }
  return ssm_jv_err(c, n, "'%s' and '%s' cannot be ordered", ssm_jv_type_name(a), ssm_jv_type_name(b));
}

ssm_status ssm_jv_contains(ctx *c, const jnode *n, jv hay, jv needle, int *out) {
  if (hay.k == V_STR) {
    if (needle.k != V_STR) return ssm_jv_err(c, n, "'in <string>' needs a string, not %s", ssm_jv_type_name(needle));
    SSM_TRY(ssm_jv_work(c, n, hay.u.s.n / 64));
    *out = needle.u.s.n == 0 || memmem(hay.u.s.p, hay.u.s.n, needle.u.s.p, needle.u.s.n) != NULL;
    return NULL;
  }
  if (hay.k == V_LIST) {
    *out = 0;
    for (size_t i = 0; i < hay.u.l->n && !*out; i++) *out = ssm_jv_equal(c, hay.u.l->v[i], needle);
    return ssm_jv_work(c, n, 0);
  }
  if (hay.k == V_DICT || hay.k == V_NS) {
    SSM_TRY(ssm_jv_work(c, n, hay.u.d->n / 8));
    *out = needle.k == V_STR && ssm_jv_dict_find(hay.u.d, needle.u.s.p, needle.u.s.n);
    return NULL;
  }
  if (hay.k == V_UNDEF) return ssm_jv_err(c, n, "'%s' is undefined", hay.name ? hay.name : "value");
  return ssm_jv_err(c, n, "argument of type '%s' is not iterable", ssm_jv_type_name(hay));
}

/* The items a for loop or a filter walks: a list, a dict's keys, a string's
 * characters. */
ssm_status ssm_jv_iterable(ctx *c, const jnode *n, jv v, jlist **out) {
  if (v.k == V_LIST) {
    *out = v.u.l;
    return NULL;
  }
  SSM_TRY(ssm_jv_work(c, n, ssm_jv_length(v)));
  jlist *l = ssm_jv_list_new(c, 0);
  if (v.k == V_DICT || v.k == V_NS) {
    for (size_t i = 0; i < v.u.d->n; i++) ssm_jv_list_push(c, l, v.u.d->keys[i]);
  } else if (v.k == V_STR) {
    for (size_t i = 0; i < v.u.s.n;) {
      size_t j = i + 1;
      while (j < v.u.s.n && ((unsigned char)v.u.s.p[j] & 0xc0) == 0x80) j++;
      ssm_jv_list_push(c, l, v_str(v.u.s.p + i, j - i));
      i = j;
    }
  } else if (v.k == V_UNDEF) {
    /* Jinja iterates an undefined value as empty */
  } else {
    return ssm_jv_err(c, n, "'%s' object is not iterable", ssm_jv_type_name(v));
  }
  *out = l;
  return NULL;
}
