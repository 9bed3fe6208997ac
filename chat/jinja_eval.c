/*
 * jinja_eval.c — renders a parsed template (jinja_parse.c) with Python's
 * value semantics where chat templates rely on them: truthiness, == across
 * int and float, str() and repr() of values, floor division and modulo,
 * negative indices and slices, and transformers' tojson (json.dumps with
 * ensure_ascii=False). Values live in one arena per render.
 *
 * Out of memory: the arena and the string builders fail stickily, and a
 * failed container or string is an empty one (no_list, no_dict, ""), so a
 * render goes on without crashing until its next step, where it stops;
 * ssm_jinja_render then returns NOMEM whatever the render made of it.
 *
 * The tables at the end list every filter, test, method and global; the
 * parser refuses any other name.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "chat/jinja_internal.h"

#define MAX_DEPTH 64                 /* nested macro calls */
#define MAX_OUTPUT ((size_t)64 << 20) /* bytes a render may produce */
#define MAX_STEPS 5000000L           /* loop iterations, calls and outputs of one render */
#define MAX_RANGE 1000000            /* items of one range() */

typedef enum { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_MACRO, V_FUNC, V_LOOP } vkind;

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jloop jloop;

typedef struct {
  vkind k;
  union {
    int64_t i;
    double f;
    struct {
      const char *p;
      size_t n;
    } s;
    jlist *l;
    jdict *d;
    const jnode *m;
    int fn;
    jloop *loop;
  } u;
  const char *name; /* V_UNDEF: what was looked up, for messages */
} jv;

struct jlist {
  jv *v;
  size_t n, cap;
};
struct jdict {
  jv *keys, *vals;
  size_t n, cap;
};
struct jloop {
  const jlist *items;
  size_t index0;
};

typedef struct frame {
  struct frame *parent;
  const char **names;
  jv *vals;
  size_t n, cap;
} frame;

typedef struct {
  const ssm_jinja *t;
  ssm_arena *a;
  ssm_sb *out;
  frame *root, *cur;
  int depth, brk, cont;
  long steps;
  unsigned long mark;   /* ssm_nomem_mark when the render began */
  jlist no_list;        /* what list_new gives once the arena failed: empty, never grown */
  jdict no_dict;        /* and dict_new */
} ctx;

static const jv UNDEF = {V_UNDEF, {0}, NULL};
static const jv NONE = {V_NONE, {0}, NULL};

static jv v_bool(int b) { return (jv){V_BOOL, {.i = b != 0}, NULL}; }
static jv v_int(int64_t i) { return (jv){V_INT, {.i = i}, NULL}; }
static jv v_float(double f) { return (jv){V_FLOAT, {.f = f}, NULL}; }
static jv v_str(const char *p, size_t n) { return (jv){V_STR, {.s = {p, n}}, NULL}; }

static ssm_status err(const ctx *c, const jnode *n, const char *fmt, ...) SSM_PRINTF(3, 4);
static ssm_status err(const ctx *c, const jnode *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ssm_sb b = {0}; /* a failed append: the render's NOMEM replaces the message */
  ssm_sb_printf(&b, "%s:%d:%d: ", c->t->name, n ? n->line : 0, n ? n->col : 0);
  ssm_sb_vprintf(&b, fmt, ap);
  va_end(ap);
  ssm_status s = ssm_status_new(SSM_ERR_INVALID, "%s", ssm_sb_str(&b));
  ssm_sb_free(&b);
  return s;
}

static ssm_status step(ctx *c, const jnode *n) {
  SSM_TRY(ssm_nomem_since(c->mark, c->t->name));
  if (++c->steps > MAX_STEPS) return err(c, n, "the template runs too long (over %ld steps)", MAX_STEPS);
  if (c->out->n > MAX_OUTPUT) return err(c, n, "the template's output passes %zu bytes", MAX_OUTPUT);
  return NULL;
}

/* ---- containers ------------------------------------------------------------------ */

static jlist *list_new(ctx *c, size_t cap) {
  jlist *l = ssm_arena_alloc(c->a, sizeof *l);
  if (!l) return &c->no_list;
  cap = cap ? cap : 4;
  l->v = ssm_arena_alloc(c->a, sizeof(jv) * cap);
  l->cap = l->v ? cap : 0;
  return l;
}

/* Appends `v`; dropped when the arena is out of memory (the render fails). */
static void list_push(ctx *c, jlist *l, jv v) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 4;
    jv *nv = ssm_arena_alloc(c->a, sizeof(jv) * cap);
    if (!nv) return;
    if (l->n) memcpy(nv, l->v, sizeof(jv) * l->n);
    l->v = nv;
    l->cap = cap;
  }
  l->v[l->n++] = v;
}

static jv v_list(jlist *l) { return (jv){V_LIST, {.l = l}, NULL}; }

static jdict *dict_new(ctx *c) {
  jdict *d = ssm_arena_alloc(c->a, sizeof *d);
  if (!d) return &c->no_dict;
  d->keys = ssm_arena_alloc(c->a, sizeof(jv) * 4);
  d->vals = ssm_arena_alloc(c->a, sizeof(jv) * 4);
  d->cap = d->keys && d->vals ? 4 : 0;
  return d;
}

static int str_eq(jv a, const char *s, size_t n) { return a.k == V_STR && a.u.s.n == n && !memcmp(a.u.s.p, s, n); }

static jv *dict_find(const jdict *d, const char *key, size_t n) {
  for (size_t i = 0; i < d->n; i++)
    if (str_eq(d->keys[i], key, n)) return &d->vals[i];
  return NULL;
}

static void dict_set(ctx *c, jdict *d, jv key, jv val) {
  if (key.k == V_STR) {
    jv *at = dict_find(d, key.u.s.p, key.u.s.n);
    if (at) {
      *at = val;
      return;
    }
  }
  if (d->n == d->cap) { /* out of memory: the item is dropped (the render fails) */
    size_t cap = d->cap ? d->cap * 2 : 4;
    jv *k = ssm_arena_alloc(c->a, sizeof(jv) * cap), *v = ssm_arena_alloc(c->a, sizeof(jv) * cap);
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

/* The arena's NOMEM status, when it failed. */
static ssm_status oom(const ctx *c) { return ssm_arena_status(c->a, c->t->name); }

static ssm_status frame_new(ctx *c, frame *parent, frame **out) {
  frame *f = *out = ssm_arena_alloc(c->a, sizeof *f);
  if (!f) return oom(c);
  f->parent = parent;
  return NULL;
}

static void frame_set(ctx *c, frame *f, const char *name, jv v) {
  for (size_t i = 0; i < f->n; i++)
    if (!strcmp(f->names[i], name)) {
      f->vals[i] = v;
      return;
    }
  if (f->n == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 8;
    const char **nn = ssm_arena_alloc(c->a, sizeof(char *) * cap);
    jv *nv = ssm_arena_alloc(c->a, sizeof(jv) * cap);
    if (!nn || !nv) return; /* dropped: the render fails */
    if (f->n) memcpy(nn, f->names, sizeof(char *) * f->n), memcpy(nv, f->vals, sizeof(jv) * f->n);
    f->names = nn;
    f->vals = nv;
    f->cap = cap;
  }
  f->names[f->n] = name;
  f->vals[f->n++] = v;
}

static jv lookup(const ctx *c, const char *name) {
  for (const frame *f = c->cur; f; f = f->parent)
    for (size_t i = f->n; i-- > 0;)
      if (!strcmp(f->names[i], name)) return f->vals[i];
  jv u = UNDEF;
  u.name = name;
  return u;
}

/* ---- conversions ------------------------------------------------------------------ */

static int truthy(jv v) {
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

static const char *type_name(jv v) {
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

static void put_str(ssm_sb *b, jv v) {
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
    for (size_t i = 0; i < v.u.l->n; i++) {
      if (i) ssm_sb_append(b, ", ", 2);
      put_repr(b, v.u.l->v[i]);
    }
    ssm_sb_append(b, "]", 1);
  } else if (v.k == V_DICT) {
    ssm_sb_append(b, "{", 1);
    for (size_t i = 0; i < v.u.d->n; i++) {
      if (i) ssm_sb_append(b, ", ", 2);
      put_repr(b, v.u.d->keys[i]);
      ssm_sb_append(b, ": ", 2);
      put_repr(b, v.u.d->vals[i]);
    }
    ssm_sb_append(b, "}", 1);
  } else {
    put_str(b, v);
  }
}

/* A copy of n bytes of text in the arena ("" once it failed). */
static jv v_copy(ctx *c, const char *p, size_t n) {
  char *d = ssm_arena_alloc(c->a, n + 1);
  if (!d) return v_str("", 0);
  memcpy(d, p, n);
  return v_str(d, n);
}

static jv to_str(ctx *c, jv v) {
  if (v.k == V_STR) return v;
  ssm_sb b = {0};
  put_str(&b, v);
  jv r = v_copy(c, ssm_sb_str(&b), b.n);
  ssm_sb_free(&b);
  return r;
}

/* json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort) */
static ssm_status put_json(ctx *c, const jnode *at, ssm_sb *b, jv v, int indent, int level, int sort) {
  switch (v.k) {
  case V_NONE: ssm_sb_append(b, "null", 4); return NULL;
  case V_BOOL: ssm_sb_printf(b, v.u.i ? "true" : "false"); return NULL;
  case V_INT: case V_FLOAT: put_str(b, v); return NULL;
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
    size_t *order = ssm_arena_alloc(c->a, sizeof(size_t) * (n + 1));
    if (!order) return oom(c);
    for (size_t i = 0; i < n; i++) order[i] = i;
    if (!is_list && sort) /* insertion sort by key bytes: dicts here are small */
      for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
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
        if (key.k != V_STR) return err(c, at, "tojson: a dict key of type %s", type_name(key));
        SSM_TRY(put_json(c, at, b, key, indent, level + 1, sort));
        ssm_sb_append(b, ": ", 2);
      }
      SSM_TRY(put_json(c, at, b, is_list ? v.u.l->v[i] : v.u.d->vals[i], indent, level + 1, sort));
    }
    if (indent >= 0 && n) {
      ssm_sb_append(b, "\n", 1);
      for (int s = 0; s < indent * level; s++) ssm_sb_append(b, " ", 1);
    }
    ssm_sb_append(b, is_list ? "]" : "}", 1);
    return NULL;
  }
  default: return err(c, at, "tojson: a value of type %s is not JSON serializable", type_name(v));
  }
}

/* ---- UTF-8 ---------------------------------------------------------------------- */

static size_t u8_len(const char *s, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xc0) != 0x80;
  return k;
}

/* The byte offset of code point `cp` (<= the length). */
static size_t u8_offset(const char *s, size_t n, size_t cp) {
  size_t i = 0;
  for (; i < n && cp; cp--) {
    i++;
    while (i < n && ((unsigned char)s[i] & 0xc0) == 0x80) i++;
  }
  return i;
}

static size_t length_of(jv v) {
  return v.k == V_STR ? u8_len(v.u.s.p, v.u.s.n) : v.k == V_LIST ? v.u.l->n
         : v.k == V_DICT || v.k == V_NS ? v.u.d->n : 0;
}

/* ---- comparisons ------------------------------------------------------------------ */

static int is_num(jv v) { return v.k == V_INT || v.k == V_FLOAT || v.k == V_BOOL; }
static double num(jv v) { return v.k == V_FLOAT ? v.u.f : (double)v.u.i; }

static int equal(jv a, jv b) {
  if (is_num(a) && is_num(b)) return a.k != V_FLOAT && b.k != V_FLOAT ? a.u.i == b.u.i : num(a) == num(b);
  if (a.k != b.k) return 0;
  switch (a.k) {
  case V_UNDEF: case V_NONE: return 1;
  case V_STR: return a.u.s.n == b.u.s.n && !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
  case V_LIST:
    if (a.u.l->n != b.u.l->n) return 0;
    for (size_t i = 0; i < a.u.l->n; i++)
      if (!equal(a.u.l->v[i], b.u.l->v[i])) return 0;
    return 1;
  case V_DICT:
    if (a.u.d->n != b.u.d->n) return 0;
    for (size_t i = 0; i < a.u.d->n; i++) {
      const jv *o = a.u.d->keys[i].k == V_STR ? dict_find(b.u.d, a.u.d->keys[i].u.s.p, a.u.d->keys[i].u.s.n) : NULL;
      if (!o || !equal(a.u.d->vals[i], *o)) return 0;
    }
    return 1;
  default: return a.u.d == b.u.d;
  }
}

static ssm_status order(ctx *c, const jnode *n, jv a, jv b, int *out) {
  if (is_num(a) && is_num(b)) {
    double x = num(a), y = num(b);
    *out = x < y ? -1 : x > y;
    return NULL;
  }
  if (a.k == V_STR && b.k == V_STR) {
    size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
    int r = memcmp(a.u.s.p, b.u.s.p, m);
    *out = r ? r : a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
    return NULL;
  }
  return err(c, n, "'%s' and '%s' cannot be ordered", type_name(a), type_name(b));
}

static ssm_status contains(ctx *c, const jnode *n, jv hay, jv needle, int *out) {
  if (hay.k == V_STR) {
    if (needle.k != V_STR) return err(c, n, "'in <string>' needs a string, not %s", type_name(needle));
    *out = needle.u.s.n == 0 || memmem(hay.u.s.p, hay.u.s.n, needle.u.s.p, needle.u.s.n) != NULL;
    return NULL;
  }
  if (hay.k == V_LIST) {
    *out = 0;
    for (size_t i = 0; i < hay.u.l->n && !*out; i++) *out = equal(hay.u.l->v[i], needle);
    return NULL;
  }
  if (hay.k == V_DICT || hay.k == V_NS) {
    *out = needle.k == V_STR && dict_find(hay.u.d, needle.u.s.p, needle.u.s.n);
    return NULL;
  }
  if (hay.k == V_UNDEF) return err(c, n, "'%s' is undefined", hay.name ? hay.name : "value");
  return err(c, n, "argument of type '%s' is not iterable", type_name(hay));
}

/* The items a for loop or a filter walks: a list, a dict's keys, a string's
 * characters. */
static ssm_status iterable(ctx *c, const jnode *n, jv v, jlist **out) {
  if (v.k == V_LIST) {
    *out = v.u.l;
    return NULL;
  }
  jlist *l = list_new(c, 0);
  if (v.k == V_DICT || v.k == V_NS) {
    for (size_t i = 0; i < v.u.d->n; i++) list_push(c, l, v.u.d->keys[i]);
  } else if (v.k == V_STR) {
    for (size_t i = 0; i < v.u.s.n;) {
      size_t j = i + 1;
      while (j < v.u.s.n && ((unsigned char)v.u.s.p[j] & 0xc0) == 0x80) j++;
      list_push(c, l, v_str(v.u.s.p + i, j - i));
      i = j;
    }
  } else if (v.k == V_UNDEF) {
    /* Jinja iterates an undefined value as empty */
  } else {
    return err(c, n, "'%s' object is not iterable", type_name(v));
  }
  *out = l;
  return NULL;
}

/* ---- evaluation ------------------------------------------------------------------- */

static ssm_status eval(ctx *c, const jnode *n, jv *out);
static ssm_status exec(ctx *c, const jnode *n);
static ssm_status exec_list(ctx *c, const jnodes *l);

/* Evaluated call arguments. */
typedef struct {
  jv *pos;
  int npos;
  const char **names;
  jv *kw;
  int nkw;
} args;

static ssm_status eval_args(ctx *c, const jnode *n, args *a) {
  jlist *pos = list_new(c, (size_t)n->list.n + 1);
  for (int i = 0; i < n->list.n; i++) {
    jv v;
    SSM_TRY(eval(c, n->list.items[i], &v));
    if (i == n->i) {
      jlist *l;
      SSM_TRY(iterable(c, n->list.items[i], v, &l));
      for (size_t k = 0; k < l->n; k++) list_push(c, pos, l->v[k]);
    } else {
      list_push(c, pos, v);
    }
  }
  a->pos = pos->v;
  a->npos = (int)pos->n;
  a->names = n->names;
  a->nkw = n->nnames;
  a->kw = ssm_arena_alloc(c->a, sizeof(jv) * ((size_t)n->nnames + 1));
  if (!a->kw) return oom(c);
  for (int i = 0; i < n->nnames; i++) SSM_TRY(eval(c, n->list2.items[i], &a->kw[i]));
  return NULL;
}

/* Argument `i` or keyword `name` (NULL: none), else `dflt`. */
static jv arg(const args *a, int i, const char *name, jv dflt) {
  for (int k = 0; name && k < a->nkw; k++)
    if (!strcmp(a->names[k], name)) return a->kw[k];
  return i < a->npos ? a->pos[i] : dflt;
}

static ssm_status check_arity(ctx *c, const jnode *n, const args *a, int max, const char *const *kws,
                              const char *what) {
  if (a->npos > max) return err(c, n, "%s takes at most %d positional arguments, got %d", what, max, a->npos);
  for (int k = 0; k < a->nkw; k++) {
    int ok = 0;
    for (int j = 0; kws && kws[j] && !ok; j++) ok = !strcmp(kws[j], a->names[k]);
    if (!ok) return err(c, n, "%s: unexpected keyword argument '%s'", what, a->names[k]);
  }
  return NULL;
}

static ssm_status call_macro(ctx *c, const jnode *at, const jnode *m, const args *a, jv *out) {
  if (a->npos > m->nnames)
    return err(c, at, "macro '%s' takes %d arguments, got %d", m->str, m->nnames, a->npos);
  if (c->depth >= MAX_DEPTH) return err(c, at, "macro calls nested deeper than %d", MAX_DEPTH);
  frame *f, *saved = c->cur;
  SSM_TRY(frame_new(c, c->root, &f));
  for (int k = 0; k < a->nkw; k++) {
    int ok = 0;
    for (int j = 0; j < m->nnames && !ok; j++) ok = !strcmp(m->names[j], a->names[k]);
    if (!ok) return err(c, at, "macro '%s' has no parameter '%s'", m->str, a->names[k]);
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
    frame_set(c, f, m->names[j], v);
  }
  ssm_sb body = {0}, *outer = c->out;
  c->out = &body;
  c->depth++;
  if (!s) s = exec(c, m->a);
  c->depth--;
  c->out = outer;
  c->cur = saved;
  c->brk = c->cont = 0;
  *out = v_copy(c, ssm_sb_str(&body), body.n);
  ssm_sb_free(&body);
  return s;
}

/* ---- strings ------------------------------------------------------------------------ */

static int is_space(char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= 0x1c && ch <= 0x1f); }

static jv strip(jv s, const jv *chars, int left, int right) {
  const char *p = s.u.s.p;
  size_t b = 0, e = s.u.s.n;
  int set = chars && chars->k == V_STR;
#define STRIPPED(ch) (set ? memchr(chars->u.s.p, (ch), chars->u.s.n) != NULL : is_space(ch))
  while (left && b < e && STRIPPED(p[b])) b++;
  while (right && e > b && STRIPPED(p[e - 1])) e--;
#undef STRIPPED
  return v_str(p + b, e - b);
}

static jv change_case(ctx *c, jv s, char how) { /* 'u'pper, 'l'ower, 't'itle, 'c'apitalize */
  char *o = ssm_arena_alloc(c->a, s.u.s.n + 1);
  if (!o) return v_str("", 0);
  memcpy(o, s.u.s.p, s.u.s.n);
  int start = 1;
  for (size_t i = 0; i < s.u.s.n; i++) {
    char ch = o[i];
    int alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
    int up = how == 'u' || ((how == 't' || how == 'c') && start);
    if (how == 'c') up = i == 0;
    if (alpha) o[i] = up ? (char)(ch >= 'a' && ch <= 'z' ? ch - 32 : ch) : (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
    if (how == 't') start = !alpha && !(((unsigned char)ch) & 0x80) && !(ch >= '0' && ch <= '9');
  }
  return v_str(o, s.u.s.n);
}

static jv replace(ctx *c, jv s, jv old, jv new_, int64_t count) {
  ssm_sb b = {0};
  ssm_sb_append(&b, "", 0);
  size_t i = 0;
  int64_t done = 0;
  if (!old.u.s.n) { /* Python: inserts between characters */
    for (size_t k = 0; k <= s.u.s.n; k++) {
      if (count < 0 || done < count) ssm_sb_append(&b, new_.u.s.p, new_.u.s.n), done++;
      if (k < s.u.s.n) ssm_sb_append(&b, s.u.s.p + k, 1);
    }
  } else {
    while (i < s.u.s.n) {
      const char *hit = (count < 0 || done < count) ? memmem(s.u.s.p + i, s.u.s.n - i, old.u.s.p, old.u.s.n) : NULL;
      if (!hit) break;
      ssm_sb_append(&b, s.u.s.p + i, (size_t)(hit - s.u.s.p) - i);
      ssm_sb_append(&b, new_.u.s.p, new_.u.s.n);
      i = (size_t)(hit - s.u.s.p) + old.u.s.n;
      done++;
    }
    ssm_sb_append(&b, s.u.s.p + i, s.u.s.n - i);
  }
  jv r = v_copy(c, ssm_sb_str(&b), b.n);
  ssm_sb_free(&b);
  return r;
}

static jv split(ctx *c, jv s, jv sep, int64_t maxsplit) {
  jlist *l = list_new(c, 0);
  const char *p = s.u.s.p, *e = p + s.u.s.n;
  if (sep.k != V_STR) { /* runs of whitespace, none at the ends */
    while (1) {
      while (p < e && is_space(*p)) p++;
      if (p >= e) break;
      const char *w = p;
      if (maxsplit >= 0 && (int64_t)l->n >= maxsplit) {
        const char *end = e;
        while (end > p && is_space(end[-1])) end--;
        list_push(c, l, v_str(w, (size_t)(end - w)));
        break;
      }
      while (p < e && !is_space(*p)) p++;
      list_push(c, l, v_str(w, (size_t)(p - w)));
    }
    return v_list(l);
  }
  while (1) {
    const char *hit = (maxsplit < 0 || (int64_t)l->n < maxsplit) && sep.u.s.n
                          ? memmem(p, (size_t)(e - p), sep.u.s.p, sep.u.s.n) : NULL;
    if (!hit) {
      list_push(c, l, v_str(p, (size_t)(e - p)));
      return v_list(l);
    }
    list_push(c, l, v_str(p, (size_t)(hit - p)));
    p = hit + sep.u.s.n;
  }
}

static int starts_with(jv s, jv prefix, int at_end) {
  if (prefix.k != V_STR || prefix.u.s.n > s.u.s.n) return 0;
  return !memcmp(s.u.s.p + (at_end ? s.u.s.n - prefix.u.s.n : 0), prefix.u.s.p, prefix.u.s.n);
}

static ssm_status need_str(ctx *c, const jnode *n, jv v, const char *what) {
  if (v.k == V_STR) return NULL;
  if (v.k == V_UNDEF) return err(c, n, "%s: '%s' is undefined", what, v.name ? v.name : "value");
  return err(c, n, "%s: expected a string, got %s", what, type_name(v));
}

static ssm_status join(ctx *c, const jnode *n, jv seq, jv sep, const jv *attr, jv *out) {
  jlist *l;
  SSM_TRY(iterable(c, n, seq, &l));
  ssm_sb b = {0};
  ssm_sb_append(&b, "", 0);
  for (size_t i = 0; i < l->n; i++) {
    if (i && sep.k == V_STR) ssm_sb_append(&b, sep.u.s.p, sep.u.s.n);
    jv item = l->v[i];
    if (attr && attr->k == V_STR && (item.k == V_DICT || item.k == V_NS)) {
      jv *f = dict_find(item.u.d, attr->u.s.p, attr->u.s.n);
      item = f ? *f : UNDEF;
    }
    put_str(&b, item);
  }
  *out = v_copy(c, ssm_sb_str(&b), b.n);
  ssm_sb_free(&b);
  return NULL;
}

/* ---- methods -------------------------------------------------------------------- */

static ssm_status call_method(ctx *c, const jnode *n, jv self, const char *name, const args *a, jv *out) {
  jv a0 = arg(a, 0, NULL, UNDEF), a1 = arg(a, 1, NULL, UNDEF);
  if (self.k == V_STR) {
    int l = !strcmp(name, "lstrip"), r = !strcmp(name, "rstrip");
    if (!strcmp(name, "strip") || l || r) {
      *out = strip(self, a0.k == V_STR ? &a0 : NULL, !r, !l);
    } else if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
      jv sep = arg(a, 0, "sep", NONE), mx = arg(a, 1, "maxsplit", v_int(-1));
      if (sep.k == V_STR && !sep.u.s.n) return err(c, n, "split: empty separator");
      if (!strcmp(name, "rsplit") && mx.k == V_INT && mx.u.i >= 0)
        return err(c, n, "rsplit with maxsplit is not supported");
      *out = split(c, self, sep, mx.k == V_INT ? mx.u.i : -1);
    } else if (!strcmp(name, "replace")) {
      SSM_TRY(need_str(c, n, a0, "replace"));
      SSM_TRY(need_str(c, n, a1, "replace"));
      jv cnt = arg(a, 2, "count", v_int(-1));
      *out = replace(c, self, a0, a1, cnt.k == V_INT ? cnt.u.i : -1);
    } else if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
      int end = name[0] == 'e', hit = 0;
      if (a0.k == V_LIST)
        for (size_t i = 0; i < a0.u.l->n && !hit; i++) hit = starts_with(self, a0.u.l->v[i], end);
      else if (a0.k == V_STR)
        hit = starts_with(self, a0, end);
      else
        return err(c, n, "%s: expected a string or a tuple of strings", name);
      *out = v_bool(hit);
    } else if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") ||
               !strcmp(name, "capitalize")) {
      *out = change_case(c, self, name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : name[0] == 't' ? 't' : 'c');
    } else if (!strcmp(name, "find") || !strcmp(name, "count")) {
      SSM_TRY(need_str(c, n, a0, name));
      if (name[0] == 'f') {
        const char *hit = a0.u.s.n ? memmem(self.u.s.p, self.u.s.n, a0.u.s.p, a0.u.s.n) : self.u.s.p;
        *out = v_int(hit ? (int64_t)u8_len(self.u.s.p, (size_t)(hit - self.u.s.p)) : -1);
      } else {
        int64_t k = 0;
        for (const char *p = self.u.s.p, *e = p + self.u.s.n; a0.u.s.n && (p = memmem(p, (size_t)(e - p), a0.u.s.p, a0.u.s.n)); p += a0.u.s.n) k++;
        *out = v_int(a0.u.s.n ? k : (int64_t)u8_len(self.u.s.p, self.u.s.n) + 1);
      }
    } else if (!strcmp(name, "join")) {
      SSM_TRY(join(c, n, a0, self, NULL, out));
    } else if (!strcmp(name, "splitlines")) {
      jlist *lines = list_new(c, 0);
      const char *p = self.u.s.p, *e = p + self.u.s.n;
      while (p < e) {
        const char *q = p;
        while (q < e && *q != '\n' && *q != '\r') q++;
        list_push(c, lines, v_str(p, (size_t)(q - p)));
        if (q < e && *q == '\r' && q + 1 < e && q[1] == '\n') q++;
        p = q + 1;
      }
      *out = v_list(lines);
    } else {
      return err(c, n, "'str' object has no method '%s'", name);
    }
    return NULL;
  }
  if (self.k == V_DICT || self.k == V_NS) {
    if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
      jlist *l = list_new(c, self.u.d->n);
      for (size_t i = 0; i < self.u.d->n; i++) {
        if (name[0] == 'i') {
          jlist *pair = list_new(c, 2);
          list_push(c, pair, self.u.d->keys[i]);
          list_push(c, pair, self.u.d->vals[i]);
          list_push(c, l, v_list(pair));
        } else {
          list_push(c, l, name[0] == 'k' ? self.u.d->keys[i] : self.u.d->vals[i]);
        }
      }
      *out = v_list(l);
      return NULL;
    }
    if (!strcmp(name, "get")) {
      jv *f = a0.k == V_STR ? dict_find(self.u.d, a0.u.s.p, a0.u.s.n) : NULL;
      *out = f ? *f : a->npos > 1 ? a1 : NONE;
      return NULL;
    }
    return err(c, n, "'dict' object has no method '%s'", name);
  }
  if (self.k == V_LOOP && !strcmp(name, "cycle")) {
    if (!a->npos) return err(c, n, "loop.cycle needs at least one value");
    *out = a->pos[self.u.loop->index0 % (size_t)a->npos];
    return NULL;
  }
  if (self.k == V_UNDEF) return err(c, n, "'%s' is undefined", self.name ? self.name : "value");
  return err(c, n, "'%s' object has no method '%s'", type_name(self), name);
}

/* ---- attributes and items ---------------------------------------------------------- */

static ssm_status get_attr(ctx *c, const jnode *n, jv obj, const char *name, jv *out) {
  jv u = UNDEF;
  u.name = name;
  *out = u;
  switch (obj.k) {
  case V_UNDEF: return err(c, n, "'%s' is undefined", obj.name ? obj.name : "value");
  case V_DICT: case V_NS: {
    jv *f = dict_find(obj.u.d, name, strlen(name));
    if (f) *out = *f;
    return NULL;
  }
  case V_LOOP: {
    const jloop *l = obj.u.loop;
    size_t len = l->items->n, i = l->index0;
    if (!strcmp(name, "index")) *out = v_int((int64_t)i + 1);
    else if (!strcmp(name, "index0")) *out = v_int((int64_t)i);
    else if (!strcmp(name, "revindex")) *out = v_int((int64_t)(len - i));
    else if (!strcmp(name, "revindex0")) *out = v_int((int64_t)(len - i - 1));
    else if (!strcmp(name, "first")) *out = v_bool(i == 0);
    else if (!strcmp(name, "last")) *out = v_bool(i + 1 == len);
    else if (!strcmp(name, "length")) *out = v_int((int64_t)len);
    else if (!strcmp(name, "previtem")) { if (i) *out = l->items->v[i - 1]; }
    else if (!strcmp(name, "nextitem")) { if (i + 1 < len) *out = l->items->v[i + 1]; }
    else if (!strcmp(name, "depth")) *out = v_int(1);
    else if (!strcmp(name, "depth0")) *out = v_int(0);
    return NULL;
  }
  default: return NULL;
  }
}

static ssm_status get_item(ctx *c, const jnode *n, jv obj, jv key, jv *out) {
  *out = UNDEF;
  if (obj.k == V_UNDEF) return err(c, n, "'%s' is undefined", obj.name ? obj.name : "value");
  if (key.k == V_STR && (obj.k == V_DICT || obj.k == V_NS || obj.k == V_LOOP)) {
    char *k = ssm_arena_strndup(c->a, key.u.s.p, key.u.s.n);
    return get_attr(c, n, obj, k, out);
  }
  if ((obj.k == V_LIST || obj.k == V_STR) && (key.k == V_INT || key.k == V_BOOL)) {
    int64_t len = (int64_t)length_of(obj), i = key.u.i < 0 ? key.u.i + len : key.u.i;
    if (i < 0 || i >= len) return NULL; /* Jinja: an undefined value */
    if (obj.k == V_LIST) {
      *out = obj.u.l->v[i];
    } else {
      size_t b = u8_offset(obj.u.s.p, obj.u.s.n, (size_t)i), e = u8_offset(obj.u.s.p, obj.u.s.n, (size_t)i + 1);
      *out = v_str(obj.u.s.p + b, e - b);
    }
  }
  return NULL;
}

static ssm_status slice(ctx *c, const jnode *n, jv obj, jv *out) {
  jv bounds[3] = {NONE, NONE, NONE};
  const jnode *parts[3] = {n->b, n->c, n->list2.items[0]};
  for (int k = 0; k < 3; k++) {
    if (parts[k]) SSM_TRY(eval(c, parts[k], &bounds[k]));
    if (bounds[k].k != V_NONE && bounds[k].k != V_INT)
      return err(c, n, "slice indices must be integers or none, not %s", type_name(bounds[k]));
  }
  if (obj.k == V_UNDEF) return err(c, n, "'%s' is undefined", obj.name ? obj.name : "value");
  if (obj.k != V_LIST && obj.k != V_STR) return err(c, n, "'%s' object cannot be sliced", type_name(obj));
  int64_t len = (int64_t)length_of(obj), st = bounds[2].k == V_INT ? bounds[2].u.i : 1;
  if (st == 0) return err(c, n, "slice step cannot be zero");
  int64_t lo = st > 0 ? 0 : -1, hi = st > 0 ? len : len - 1;
  int64_t b = bounds[0].k == V_INT ? bounds[0].u.i : st > 0 ? 0 : len - 1;
  int64_t e = bounds[1].k == V_INT ? bounds[1].u.i : st > 0 ? len : -len - 1;
  if (bounds[0].k == V_INT) b = b < 0 ? (b + len < lo ? lo : b + len) : (b > hi ? hi : b);
  if (bounds[1].k == V_INT) e = e < 0 ? (e + len < lo ? lo : e + len) : (e > hi ? hi : e);
  else e = st > 0 ? len : -1;
  jlist *l = list_new(c, 0);
  ssm_sb s = {0};
  ssm_sb_append(&s, "", 0);
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (obj.k == V_LIST) {
      list_push(c, l, obj.u.l->v[i]);
    } else {
      size_t x = u8_offset(obj.u.s.p, obj.u.s.n, (size_t)i), y = u8_offset(obj.u.s.p, obj.u.s.n, (size_t)i + 1);
      ssm_sb_append(&s, obj.u.s.p + x, y - x);
    }
  }
  *out = obj.k == V_LIST ? v_list(l) : v_copy(c, ssm_sb_str(&s), s.n);
  ssm_sb_free(&s);
  return NULL;
}

/* ---- filters and tests --------------------------------------------------------------- */

static ssm_status apply_filter(ctx *c, const jnode *n, const char *name, jv v, const args *a, jv *out);
static ssm_status apply_test(ctx *c, const jnode *n, const char *name, jv v, const args *a, int *out);

/* select / reject / selectattr / rejectattr / map */
static ssm_status filter_seq(ctx *c, const jnode *n, const char *name, jv v, const args *a, jv *out) {
  jlist *in, *res = list_new(c, 0);
  SSM_TRY(iterable(c, n, v, &in));
  int by_attr = !strcmp(name, "selectattr") || !strcmp(name, "rejectattr");
  int keep_if = name[0] == 's', is_map = !strcmp(name, "map");
  jv attr = arg(a, 0, is_map ? "attribute" : NULL, UNDEF);
  if (is_map && a->nkw && attr.k == V_STR) { /* map(attribute='x', default=...) */
    jv dflt = arg(a, 99, "default", UNDEF);
    for (size_t i = 0; i < in->n; i++) {
      jv item;
      SSM_TRY(get_attr(c, n, in->v[i], ssm_arena_strndup(c->a, attr.u.s.p, attr.u.s.n), &item));
      list_push(c, res, item.k == V_UNDEF && dflt.k != V_UNDEF ? dflt : item);
    }
    *out = v_list(res);
    return NULL;
  }
  int first = by_attr ? 1 : 0;
  jv fname = arg(a, first, NULL, UNDEF);
  if ((by_attr && attr.k != V_STR) || (is_map && fname.k != V_STR && attr.k != V_STR))
    return err(c, n, "%s: expected an attribute or filter name", name);
  if (is_map) fname = attr;
  char *fn = fname.k == V_STR ? ssm_arena_strndup(c->a, fname.u.s.p, fname.u.s.n) : NULL;
  if (fn && (is_map ? !ssm_jinja_has_filter(fn) : !ssm_jinja_has_test(fn)))
    return err(c, n, "%s: unsupported %s '%s'", name, is_map ? "filter" : "test", fn);
  args rest = {a->pos + first + 1, a->npos > first + 1 ? a->npos - first - 1 : 0, NULL, NULL, 0};
  for (size_t i = 0; i < in->n; i++) {
    jv item = in->v[i], probe = item;
    if (by_attr) SSM_TRY(get_attr(c, n, item, ssm_arena_strndup(c->a, attr.u.s.p, attr.u.s.n), &probe));
    if (is_map) {
      jv r;
      SSM_TRY(apply_filter(c, n, fn, item, &rest, &r));
      list_push(c, res, r);
      continue;
    }
    int ok = truthy(probe);
    if (fn) SSM_TRY(apply_test(c, n, fn, probe, &rest, &ok));
    if (ok == keep_if) list_push(c, res, item);
  }
  *out = v_list(res);
  return NULL;
}

static ssm_status to_int(ctx *c, jv v, jv dflt, jv *out) {
  if (v.k == V_INT || v.k == V_BOOL) *out = v_int(v.u.i);
  else if (v.k == V_FLOAT) *out = isfinite(v.u.f) ? v_int((int64_t)v.u.f) : dflt;
  else if (v.k == V_STR) {
    char *s = ssm_arena_strndup(c->a, v.u.s.p, v.u.s.n), *end;
    while (*s && is_space(*s)) s++;
    long long x = strtoll(s, &end, 10);
    while (*end && is_space(*end)) end++;
    if (end != s && !*end) *out = v_int(x);
    else {
      double d = strtod(s, &end);
      while (*end && is_space(*end)) end++;
      *out = end != s && !*end && isfinite(d) ? v_int((int64_t)d) : dflt;
    }
  } else *out = dflt;
  return NULL;
}

static ssm_status apply_filter(ctx *c, const jnode *n, const char *name, jv v, const args *a, jv *out) {
  jv a0 = arg(a, 0, NULL, UNDEF);
  if (!strcmp(name, "default") || !strcmp(name, "d")) {
    jv dflt = arg(a, 0, "default_value", v_str("", 0)), boolean = arg(a, 1, "boolean", v_bool(0));
    *out = v.k == V_UNDEF || (truthy(boolean) && !truthy(v)) ? dflt : v;
  } else if (!strcmp(name, "length") || !strcmp(name, "count")) {
    if (v.k != V_STR && v.k != V_LIST && v.k != V_DICT && v.k != V_NS && v.k != V_UNDEF)
      return err(c, n, "object of type '%s' has no len()", type_name(v));
    *out = v_int((int64_t)length_of(v));
  } else if (!strcmp(name, "tojson")) {
    static const char *const kws[] = {"indent", "sort_keys", "ensure_ascii", NULL};
    SSM_TRY(check_arity(c, n, a, 1, kws, "tojson"));
    jv indent = arg(a, 0, "indent", NONE), ea = arg(a, 99, "ensure_ascii", v_bool(0));
    if (truthy(ea)) return err(c, n, "tojson: ensure_ascii=True is not supported");
    if (indent.k != V_NONE && indent.k != V_INT) return err(c, n, "tojson: indent must be an integer");
    ssm_sb b = {0};
    ssm_sb_append(&b, "", 0);
    ssm_status s = put_json(c, n, &b, v, indent.k == V_INT ? (int)indent.u.i : -1, 0,
                            truthy(arg(a, 99, "sort_keys", v_bool(0))));
    *out = v_copy(c, ssm_sb_str(&b), b.n);
    ssm_sb_free(&b);
    return s;
  } else if (!strcmp(name, "string")) {
    *out = to_str(c, v);
  } else if (!strcmp(name, "safe")) {
    *out = v;
  } else if (!strcmp(name, "int")) {
    return to_int(c, v, arg(a, 0, "default", v_int(0)), out);
  } else if (!strcmp(name, "float")) {
    jv i;
    if (v.k == V_FLOAT) *out = v;
    else if (v.k == V_STR) {
      char *s = ssm_arena_strndup(c->a, v.u.s.p, v.u.s.n), *end;
      double d = strtod(s, &end);
      *out = end != s && !*end ? v_float(d) : arg(a, 0, "default", v_float(0));
    } else {
      SSM_TRY(to_int(c, v, v_int(0), &i));
      *out = v_float((double)i.u.i);
    }
  } else if (!strcmp(name, "abs")) {
    if (!is_num(v)) return err(c, n, "abs: expected a number, got %s", type_name(v));
    *out = v.k == V_FLOAT ? v_float(fabs(v.u.f)) : v_int(v.u.i < 0 ? -v.u.i : v.u.i);
  } else if (!strcmp(name, "round")) {
    if (!is_num(v)) return err(c, n, "round: expected a number, got %s", type_name(v));
    jv prec = arg(a, 0, "precision", v_int(0));
    double m = pow(10, (double)(prec.k == V_INT ? prec.u.i : 0));
    *out = v_float(round(num(v) * m) / m);
  } else if (!strcmp(name, "trim") || !strcmp(name, "upper") || !strcmp(name, "lower") ||
             !strcmp(name, "title") || !strcmp(name, "capitalize")) {
    jv s = to_str(c, v);
    if (name[0] == 't' && name[1] == 'r') *out = strip(s, a0.k == V_STR ? &a0 : NULL, 1, 1);
    else *out = change_case(c, s, name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : name[0] == 't' ? 't' : 'c');
  } else if (!strcmp(name, "replace")) {
    jv s = to_str(c, v);
    SSM_TRY(need_str(c, n, a0, "replace"));
    jv a1 = arg(a, 1, NULL, UNDEF), cnt = arg(a, 2, "count", NONE);
    SSM_TRY(need_str(c, n, a1, "replace"));
    *out = replace(c, s, a0, a1, cnt.k == V_INT ? cnt.u.i : -1);
  } else if (!strcmp(name, "join")) {
    jv attr = arg(a, 1, "attribute", NONE);
    SSM_TRY(join(c, n, v, arg(a, 0, "d", v_str("", 0)), &attr, out));
  } else if (!strcmp(name, "list")) {
    jlist *l, *copy = list_new(c, 0);
    SSM_TRY(iterable(c, n, v, &l));
    for (size_t i = 0; i < l->n; i++) list_push(c, copy, l->v[i]);
    *out = v_list(copy);
  } else if (!strcmp(name, "first") || !strcmp(name, "last")) {
    jlist *l;
    SSM_TRY(iterable(c, n, v, &l));
    *out = l->n ? l->v[name[0] == 'f' ? 0 : l->n - 1] : UNDEF;
  } else if (!strcmp(name, "reverse")) {
    if (v.k == V_STR) {
      jv r;
      jnode stepn = {.kind = J_CONST_INT, .i = -1};
      jnode *steps[1] = {&stepn};
      jnode sl = {.kind = J_SLICE, .line = n->line, .col = n->col, .list2 = {steps, 1}};
      SSM_TRY(slice(c, &sl, v, &r));
      *out = r;
    } else {
      jlist *l, *r = list_new(c, 0);
      SSM_TRY(iterable(c, n, v, &l));
      for (size_t i = l->n; i-- > 0;) list_push(c, r, l->v[i]);
      *out = v_list(r);
    }
  } else if (!strcmp(name, "items")) {
    if (v.k == V_UNDEF) *out = v_list(list_new(c, 0));
    else if (v.k != V_DICT && v.k != V_NS) return err(c, n, "items: expected a mapping, got %s", type_name(v));
    else return call_method(c, n, v, "items", a, out);
  } else if (!strcmp(name, "dictsort")) {
    if (v.k != V_DICT) return err(c, n, "dictsort: expected a mapping, got %s", type_name(v));
    jv items;
    SSM_TRY(call_method(c, n, v, "items", a, &items));
    SSM_TRY(oom(c)); /* the pairs are whole */
    jlist *l = items.u.l;
    for (size_t i = 1; i < l->n; i++)
      for (size_t j = i; j > 0; j--) {
        int cmp;
        jv ka = change_case(c, to_str(c, l->v[j - 1].u.l->v[0]), 'l'), kb = change_case(c, to_str(c, l->v[j].u.l->v[0]), 'l');
        SSM_TRY(order(c, n, ka, kb, &cmp));
        if (cmp <= 0) break;
        jv t = l->v[j];
        l->v[j] = l->v[j - 1];
        l->v[j - 1] = t;
      }
    *out = items;
  } else if (!strcmp(name, "unique")) {
    jlist *l, *r = list_new(c, 0);
    SSM_TRY(iterable(c, n, v, &l));
    for (size_t i = 0; i < l->n; i++) {
      int seen = 0;
      for (size_t k = 0; k < r->n && !seen; k++) seen = equal(r->v[k], l->v[i]);
      if (!seen) list_push(c, r, l->v[i]);
    }
    *out = v_list(r);
  } else if (!strcmp(name, "sum")) {
    jlist *l;
    SSM_TRY(iterable(c, n, v, &l));
    jv total = arg(a, 1, "start", v_int(0));
    for (size_t i = 0; i < l->n; i++) {
      if (!is_num(l->v[i]) || !is_num(total)) return err(c, n, "sum: expected numbers");
      total = total.k == V_FLOAT || l->v[i].k == V_FLOAT ? v_float(num(total) + num(l->v[i]))
                                                          : v_int(total.u.i + l->v[i].u.i);
    }
    *out = total;
  } else if (!strcmp(name, "escape") || !strcmp(name, "e")) {
    jv s = to_str(c, v);
    ssm_sb b = {0};
    ssm_sb_append(&b, "", 0);
    for (size_t i = 0; i < s.u.s.n; i++) {
      char ch = s.u.s.p[i];
      const char *e = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;" : ch == '\'' ? "&#39;" : NULL;
      if (e) ssm_sb_printf(&b, "%s", e);
      else ssm_sb_append(&b, &ch, 1);
    }
    *out = v_copy(c, ssm_sb_str(&b), b.n);
    ssm_sb_free(&b);
  } else {
    return filter_seq(c, n, name, v, a, out);
  }
  return NULL;
}

static ssm_status apply_test(ctx *c, const jnode *n, const char *name, jv v, const args *a, int *out) {
  jv a0 = arg(a, 0, NULL, UNDEF);
  int cmp;
  if (!strcmp(name, "defined")) *out = v.k != V_UNDEF;
  else if (!strcmp(name, "undefined")) *out = v.k == V_UNDEF;
  else if (!strcmp(name, "none")) *out = v.k == V_NONE;
  else if (!strcmp(name, "string")) *out = v.k == V_STR;
  else if (!strcmp(name, "number")) *out = is_num(v);
  else if (!strcmp(name, "integer")) *out = v.k == V_INT;
  else if (!strcmp(name, "float")) *out = v.k == V_FLOAT;
  else if (!strcmp(name, "boolean")) *out = v.k == V_BOOL;
  else if (!strcmp(name, "true")) *out = v.k == V_BOOL && v.u.i;
  else if (!strcmp(name, "false")) *out = v.k == V_BOOL && !v.u.i;
  else if (!strcmp(name, "mapping")) *out = v.k == V_DICT || v.k == V_NS;
  else if (!strcmp(name, "iterable")) *out = v.k == V_STR || v.k == V_LIST || v.k == V_DICT || v.k == V_NS;
  else if (!strcmp(name, "sequence")) *out = v.k == V_STR || v.k == V_LIST || v.k == V_DICT;
  else if (!strcmp(name, "callable")) *out = v.k == V_MACRO || v.k == V_FUNC;
  else if (!strcmp(name, "odd") || !strcmp(name, "even")) {
    if (v.k != V_INT) return err(c, n, "%s: expected an integer, got %s", name, type_name(v));
    *out = (int)(((v.u.i % 2) + 2) % 2) == (name[0] == 'o');
  } else if (!strcmp(name, "divisibleby")) {
    if (v.k != V_INT || a0.k != V_INT || !a0.u.i) return err(c, n, "divisibleby: expected integers");
    *out = v.u.i % a0.u.i == 0;
  } else if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) *out = equal(v, a0);
  else if (!strcmp(name, "ne") || !strcmp(name, "!=")) *out = !equal(v, a0);
  else if (!strcmp(name, "sameas")) *out = v.k == a0.k && (v.k == V_NONE || v.k == V_UNDEF || (v.k == V_BOOL && v.u.i == a0.u.i) || equal(v, a0));
  else if (!strcmp(name, "in")) return contains(c, n, a0, v, out);
  else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
    *out = v.k == V_STR;
    for (size_t i = 0; *out && i < v.u.s.n; i++)
      if ((name[0] == 'l' && v.u.s.p[i] >= 'A' && v.u.s.p[i] <= 'Z') || (name[0] == 'u' && v.u.s.p[i] >= 'a' && v.u.s.p[i] <= 'z')) *out = 0;
  } else {
    SSM_TRY(order(c, n, v, a0, &cmp));
    *out = !strcmp(name, "lt") || !strcmp(name, "<") ? cmp < 0 : !strcmp(name, "le") || !strcmp(name, "<=") ? cmp <= 0
           : !strcmp(name, "gt") || !strcmp(name, ">") ? cmp > 0 : cmp >= 0;
  }
  return NULL;
}

/* ---- globals ------------------------------------------------------------------------ */

enum { F_RANGE, F_NAMESPACE, F_DICT, F_RAISE, F_STRFTIME };
static const char *const global_names[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};

static ssm_status call_global(ctx *c, const jnode *n, int fn, const args *a, jv *out) {
  if (fn == F_RANGE) {
    int64_t b = 0, e, st = 1;
    for (int i = 0; i < a->npos; i++)
      if (a->pos[i].k != V_INT) return err(c, n, "range: expected integers, got %s", type_name(a->pos[i]));
    if (a->npos < 1 || a->npos > 3) return err(c, n, "range takes 1 to 3 arguments");
    if (a->npos == 1) e = a->pos[0].u.i;
    else b = a->pos[0].u.i, e = a->pos[1].u.i;
    if (a->npos == 3) st = a->pos[2].u.i;
    if (!st) return err(c, n, "range: the step is zero");
    double count = ceil(((double)e - (double)b) / (double)st);
    if (count > MAX_RANGE) return err(c, n, "range of %.0f items (at most %d)", count, MAX_RANGE);
    jlist *l = list_new(c, 0);
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st) list_push(c, l, v_int(i));
    *out = v_list(l);
  } else if (fn == F_NAMESPACE || fn == F_DICT) {
    jdict *d = dict_new(c);
    if (a->npos && (a->pos[0].k == V_DICT || a->pos[0].k == V_NS))
      for (size_t i = 0; i < a->pos[0].u.d->n; i++) dict_set(c, d, a->pos[0].u.d->keys[i], a->pos[0].u.d->vals[i]);
    else if (a->npos) return err(c, n, "%s: expected keyword arguments", global_names[fn]);
    for (int k = 0; k < a->nkw; k++) dict_set(c, d, v_str(a->names[k], strlen(a->names[k])), a->kw[k]);
    *out = (jv){fn == F_NAMESPACE ? V_NS : V_DICT, {.d = d}, NULL};
  } else if (fn == F_RAISE) {
    jv msg = to_str(c, arg(a, 0, NULL, v_str("", 0)));
    return ssm_status_new(SSM_ERR_INVALID, "the chat template refused the request: %.*s", (int)msg.u.s.n, msg.u.s.p);
  } else {
    jv fmt = arg(a, 0, NULL, UNDEF);
    SSM_TRY(need_str(c, n, fmt, "strftime_now"));
    char buf[256];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    size_t k = strftime(buf, sizeof buf, ssm_arena_strndup(c->a, fmt.u.s.p, fmt.u.s.n), &tm);
    *out = v_copy(c, buf, k);
  }
  return NULL;
}

/* ---- expressions -------------------------------------------------------------------- */

static ssm_status arith(ctx *c, const jnode *n, const char *op, jv a, jv b, jv *out) {
  if (op[0] == '~') {
    ssm_sb s = {0};
    put_str(&s, a);
    put_str(&s, b);
    *out = v_copy(c, ssm_sb_str(&s), s.n);
    ssm_sb_free(&s);
    return NULL;
  }
  if (op[0] == '+' && a.k == V_STR && b.k == V_STR) {
    char *p = ssm_arena_alloc(c->a, a.u.s.n + b.u.s.n + 1);
    if (!p) return oom(c);
    memcpy(p, a.u.s.p, a.u.s.n);
    memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
    *out = v_str(p, a.u.s.n + b.u.s.n);
    return NULL;
  }
  if (op[0] == '+' && a.k == V_LIST && b.k == V_LIST) {
    jlist *l = list_new(c, a.u.l->n + b.u.l->n);
    for (size_t i = 0; i < a.u.l->n; i++) list_push(c, l, a.u.l->v[i]);
    for (size_t i = 0; i < b.u.l->n; i++) list_push(c, l, b.u.l->v[i]);
    *out = v_list(l);
    return NULL;
  }
  if (op[0] == '*' && !op[1] && ((a.k == V_STR && b.k == V_INT) || (a.k == V_INT && b.k == V_STR))) {
    jv s = a.k == V_STR ? a : b;
    int64_t k = a.k == V_INT ? a.u.i : b.u.i;
    ssm_sb r = {0};
    ssm_sb_append(&r, "", 0);
    for (int64_t i = 0; i < k; i++) {
      SSM_TRY(step(c, n));
      ssm_sb_append(&r, s.u.s.p, s.u.s.n);
      if (r.n > MAX_OUTPUT) {
        ssm_sb_free(&r);
        return err(c, n, "a string longer than %zu bytes", MAX_OUTPUT);
      }
    }
    *out = v_copy(c, ssm_sb_str(&r), r.n);
    ssm_sb_free(&r);
    return NULL;
  }
  if (!is_num(a) || !is_num(b)) {
    if (a.k == V_UNDEF || b.k == V_UNDEF) {
      jv u = a.k == V_UNDEF ? a : b;
      return err(c, n, "'%s' is undefined", u.name ? u.name : "value");
    }
    return err(c, n, "unsupported operand types for %s: '%s' and '%s'", op, type_name(a), type_name(b));
  }
  int ints = a.k != V_FLOAT && b.k != V_FLOAT;
  double x = num(a), y = num(b);
  switch (op[0]) {
  case '+': *out = ints ? v_int(a.u.i + b.u.i) : v_float(x + y); return NULL;
  case '-': *out = ints ? v_int(a.u.i - b.u.i) : v_float(x - y); return NULL;
  case '*':
    if (op[1]) {
      *out = ints && b.u.i >= 0 ? v_int((int64_t)llround(pow(x, y))) : v_float(pow(x, y));
      return NULL;
    }
    *out = ints ? v_int(a.u.i * b.u.i) : v_float(x * y);
    return NULL;
  default: break;
  }
  if (y == 0) return err(c, n, "division by zero");
  if (op[0] == '/' && !op[1]) *out = v_float(x / y);
  else if (op[0] == '/') *out = ints ? v_int((int64_t)floor(x / y)) : v_float(floor(x / y));
  else if (ints) {
    int64_t r = a.u.i % b.u.i;
    *out = v_int(r && ((r < 0) != (b.u.i < 0)) ? r + b.u.i : r);
  } else {
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
      jv *member = dict_find(self.u.d, f->str, strlen(f->str));
      if (member && (member->k == V_MACRO || member->k == V_FUNC)) goto callable;
    }
    SSM_TRY(eval_args(c, n, &a));
    return call_method(c, n, self, f->str, &a, out);
  }
callable:;
  jv fn;
  SSM_TRY(eval(c, f, &fn));
  SSM_TRY(eval_args(c, n, &a));
  SSM_TRY(step(c, n));
  if (fn.k == V_MACRO) return call_macro(c, n, fn.u.m, &a, out);
  if (fn.k == V_FUNC) return call_global(c, n, fn.u.fn, &a, out);
  if (fn.k == V_UNDEF) return err(c, n, "'%s' is undefined", fn.name ? fn.name : "value");
  return err(c, n, "'%s' object is not callable", type_name(fn));
}

static ssm_status eval(ctx *c, const jnode *n, jv *out) {
  jv a, b;
  switch (n->kind) {
  case J_CONST_STR: *out = v_str(n->str, n->len); return NULL;
  case J_CONST_INT: *out = v_int(n->i); return NULL;
  case J_CONST_FLOAT: *out = v_float(n->f); return NULL;
  case J_CONST_BOOL: *out = v_bool((int)n->i); return NULL;
  case J_CONST_NONE: *out = NONE; return NULL;
  case J_NAME:
    *out = lookup(c, n->str);
    if (out->k == V_UNDEF)
      for (int k = 0; global_names[k]; k++)
        if (!strcmp(global_names[k], n->str)) *out = (jv){V_FUNC, {.fn = k}, NULL};
    return NULL;
  case J_ATTR: SSM_TRY(eval(c, n->a, &a)); return get_attr(c, n, a, n->str, out);
  case J_ITEM:
    SSM_TRY(eval(c, n->a, &a));
    SSM_TRY(eval(c, n->b, &b));
    return get_item(c, n, a, b, out);
  case J_SLICE: SSM_TRY(eval(c, n->a, &a)); return slice(c, n, a, out);
  case J_CALL: return eval_call(c, n, out);
  case J_FILTER: {
    args ar;
    SSM_TRY(eval(c, n->a, &a));
    SSM_TRY(eval_args(c, n, &ar));
    return apply_filter(c, n, n->str, a, &ar, out);
  }
  case J_TEST: {
    args ar;
    int r;
    SSM_TRY(eval(c, n->a, &a));
    SSM_TRY(eval_args(c, n, &ar));
    SSM_TRY(apply_test(c, n, n->str, a, &ar, &r));
    *out = v_bool(r != n->flag);
    return NULL;
  }
  case J_NEG: case J_POS:
    SSM_TRY(eval(c, n->a, &a));
    if (!is_num(a)) return err(c, n, "bad operand type for unary %c: '%s'", n->kind == J_NEG ? '-' : '+', type_name(a));
    *out = n->kind == J_POS ? a : a.k == V_FLOAT ? v_float(-a.u.f) : v_int(-a.u.i);
    return NULL;
  case J_NOT: SSM_TRY(eval(c, n->a, &a)); *out = v_bool(!truthy(a)); return NULL;
  case J_AND: case J_OR: /* Python: the deciding operand itself */
    SSM_TRY(eval(c, n->a, &a));
    if (truthy(a) == (n->kind == J_OR)) {
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
    if (!strcmp(op, "==")) r = equal(a, b);
    else if (!strcmp(op, "!=")) r = !equal(a, b);
    else if (!strcmp(op, "in") || !strcmp(op, "notin")) {
      SSM_TRY(contains(c, n, b, a, &r));
      r = op[0] == 'n' ? !r : r;
    } else {
      int cmp;
      SSM_TRY(order(c, n, a, b, &cmp));
      r = !strcmp(op, "<") ? cmp < 0 : !strcmp(op, "<=") ? cmp <= 0 : !strcmp(op, ">") ? cmp > 0 : cmp >= 0;
    }
    *out = v_bool(r);
    return NULL;
  }
  case J_COND:
    SSM_TRY(eval(c, n->b, &a));
    if (truthy(a)) return eval(c, n->a, out);
    if (n->c) return eval(c, n->c, out);
    *out = UNDEF;
    return NULL;
  case J_LIST: case J_TUPLE: {
    jlist *l = list_new(c, (size_t)n->list.n);
    for (int i = 0; i < n->list.n; i++) {
      SSM_TRY(eval(c, n->list.items[i], &a));
      list_push(c, l, a);
    }
    *out = v_list(l);
    return NULL;
  }
  case J_DICT: {
    jdict *d = dict_new(c);
    for (int i = 0; i < n->list.n; i++) {
      SSM_TRY(eval(c, n->list.items[i], &a));
      SSM_TRY(eval(c, n->list2.items[i], &b));
      dict_set(c, d, a, b);
    }
    *out = (jv){V_DICT, {.d = d}, NULL};
    return NULL;
  }
  default: return err(c, n, "internal: node %d is not an expression", (int)n->kind);
  }
}

/* ---- statements ---------------------------------------------------------------------- */

static ssm_status assign(ctx *c, const jnode *n, const char *const *names, int nnames, jv v) {
  if (nnames == 1) {
    frame_set(c, c->cur, names[0], v);
    return NULL;
  }
  jlist *l;
  SSM_TRY(iterable(c, n, v, &l));
  if (l->n != (size_t)nnames)
    return err(c, n, "cannot unpack %zu values into %d names", l->n, nnames);
  for (int i = 0; i < nnames; i++) frame_set(c, c->cur, names[i], l->v[i]);
  return NULL;
}

static ssm_status exec_for(ctx *c, const jnode *n) {
  jv seq;
  jlist *all, *items;
  SSM_TRY(eval(c, n->a, &seq));
  SSM_TRY(iterable(c, n->a, seq, &all));
  frame *f, *saved = c->cur;
  SSM_TRY(frame_new(c, c->cur, &f));
  c->cur = f;
  items = all;
  ssm_status s = NULL;
  if (n->b) { /* `for x in xs if cond`: filtered before loop counts */
    items = list_new(c, 0);
    for (size_t i = 0; i < all->n && !s; i++) {
      jv cond;
      s = assign(c, n, n->names, n->nnames, all->v[i]);
      if (!s) s = eval(c, n->b, &cond);
      if (!s && truthy(cond)) list_push(c, items, all->v[i]);
    }
  }
  jloop *loop = s ? NULL : ssm_arena_alloc(c->a, sizeof *loop);
  if (!s && !loop) s = oom(c);
  if (loop) loop->items = items;
  for (size_t i = 0; i < items->n && !s; i++) {
    s = step(c, n);
    loop->index0 = i;
    frame_set(c, f, "loop", (jv){V_LOOP, {.loop = loop}, NULL});
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

static ssm_status exec(ctx *c, const jnode *n) {
  jv v;
  switch (n->kind) {
  case J_BODY: return exec_list(c, &n->list);
  case J_TEXT: ssm_sb_append(c->out, n->str, n->len); return step(c, n);
  case J_OUT:
    SSM_TRY(eval(c, n->a, &v));
    put_str(c->out, v);
    return step(c, n);
  case J_IF:
    SSM_TRY(eval(c, n->a, &v));
    if (truthy(v)) return exec(c, n->b);
    return n->c ? exec(c, n->c) : NULL;
  case J_FOR: return exec_for(c, n);
  case J_SET:
    SSM_TRY(eval(c, n->a, &v));
    if (n->str) { /* ns.attr = value */
      jv ns = lookup(c, n->names[0]);
      if (ns.k != V_NS) return err(c, n, "cannot set attribute '%s' of '%s' (a %s, not a namespace)", n->str, n->names[0], type_name(ns));
      dict_set(c, ns.u.d, v_str(n->str, strlen(n->str)), v);
      return NULL;
    }
    return assign(c, n, n->names, n->nnames, v);
  case J_SETBLOCK: {
    ssm_sb body = {0}, *outer = c->out;
    c->out = &body;
    ssm_status s = exec(c, n->a);
    c->out = outer;
    frame_set(c, c->cur, n->names[0], v_copy(c, ssm_sb_str(&body), body.n));
    ssm_sb_free(&body);
    return s;
  }
  case J_MACRO: frame_set(c, c->cur, n->str, (jv){V_MACRO, {.m = n}, NULL}); return NULL;
  case J_BREAK: c->brk = 1; return NULL;
  case J_CONTINUE: c->cont = 1; return NULL;
  default: return err(c, n, "internal: node %d is not a statement", (int)n->kind);
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
    jlist *l = list_new(c, (size_t)cJSON_GetArraySize(j));
    for (const cJSON *e = j->child; e; e = e->next) list_push(c, l, from_json(c, e));
    return v_list(l);
  }
  if (cJSON_IsObject(j)) {
    jdict *d = dict_new(c);
    for (const cJSON *e = j->child; e; e = e->next) dict_set(c, d, v_str(e->string, strlen(e->string)), from_json(c, e));
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
  if (!s) s = frame_new(&c, NULL, &globals);
  for (const cJSON *e = vars && !s ? vars->child : NULL; e; e = e->next)
    frame_set(&c, globals, e->string, from_json(&c, e));
  if (!s) s = frame_new(&c, globals, &c.root);
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

/* ---- the tables ------------------------------------------------------------------------ */

static int in_table(const char *const *t, const char *name) {
  for (; *t; t++)
    if (!strcmp(*t, name)) return 1;
  return 0;
}

int ssm_jinja_has_filter(const char *name) {
  static const char *const t[] = {"default", "d", "length", "count", "tojson", "string", "safe", "int",
                                  "float", "abs", "round", "trim", "upper", "lower", "title",
                                  "capitalize", "replace", "join", "list", "first", "last", "reverse",
                                  "items", "dictsort", "unique", "sum", "escape", "e", "select",
                                  "reject", "selectattr", "rejectattr", "map", NULL};
  return in_table(t, name);
}

int ssm_jinja_has_test(const char *name) {
  static const char *const t[] = {"defined", "undefined", "none", "string", "number", "integer",
                                  "float", "boolean", "true", "false", "mapping", "iterable",
                                  "sequence", "callable", "odd", "even", "divisibleby", "eq",
                                  "equalto", "==", "ne", "!=", "sameas", "in", "lower", "upper",
                                  "lt", "<", "le", "<=", "gt", ">", "ge", ">=", NULL};
  return in_table(t, name);
}

int ssm_jinja_has_method(const char *name) {
  static const char *const t[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "replace",
                                  "startswith", "endswith", "upper", "lower", "title", "capitalize",
                                  "find", "count", "join", "splitlines", "items", "keys", "values",
                                  "get", "cycle", NULL};
  return in_table(t, name);
}

int ssm_jinja_has_global(const char *name) { return in_table(global_names, name); }
