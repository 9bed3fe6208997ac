/*
 * expr.c — the lexer for statements and expressions inside model YAML
 * strings, the scalar expression evaluator, and weight-name templates.
 *
 * Expressions are evaluated as they are parsed (no tree): they are short and
 * each is evaluated once per use. Integer arithmetic is checked for overflow;
 * `/` of two ints is an int when it divides exactly and a float otherwise, so
 * a shape like `inner / heads` that does not divide is caught as a non-integer
 * instead of being silently truncated.
 */
#include "frontend/expr.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

static ssm_status vsrc_error(ssm_src at, const char *fmt, va_list ap) {
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  return ssm_status_new(SSM_ERR_INVALID, "%s:%d:%d: %s", at.file, at.line, at.col, msg);
}

ssm_status ssm_src_error(ssm_src at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ssm_status s = vsrc_error(at, fmt, ap);
  va_end(ap);
  return s;
}

ssm_src ssm_lex_pos(const ssm_lex *lx, size_t off) {
  ssm_src at = lx->at;
  size_t line_start = 0;
  int nl = 0;
  for (size_t k = 0; k < off && k < lx->len; k++)
    if (lx->src[k] == '\n') {
      nl++;
      line_start = k + 1;
    }
  at.line += nl;
  at.col = nl ? 1 + (int)(off - line_start) : at.col + (int)off;
  return at;
}

ssm_status ssm_lex_error(const ssm_lex *lx, size_t off, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ssm_status s = vsrc_error(ssm_lex_pos(lx, off), fmt, ap);
  va_end(ap);
  return s;
}

static const char *const puncts2[] = {"==", "!=", "<=", ">=", "&&", "||"};

ssm_status ssm_lex_next(ssm_lex *lx) {
  const char *s = lx->src;
  size_t p = lx->pos;
  while (p < lx->len && isspace((unsigned char)s[p])) p++;
  lx->off = p;
  lx->text = s + p;
  if (p >= lx->len) {
    lx->tok = SSM_TOK_END;
    lx->tlen = 0;
    lx->pos = p;
    return NULL;
  }
  unsigned char c = (unsigned char)s[p];
  size_t q = p;
  if (isalpha(c) || c == '_') {
    while (q < lx->len && (isalnum((unsigned char)s[q]) || s[q] == '_')) q++;
    if (q - p > SSM_FE_MAX_NAME)
      return ssm_lex_error(lx, p, "name longer than %d characters", SSM_FE_MAX_NAME);
    lx->tok = SSM_TOK_IDENT;
  } else if (isdigit(c) || (c == '.' && q + 1 < lx->len && isdigit((unsigned char)s[q + 1]))) {
    int is_float = 0;
    while (q < lx->len && isdigit((unsigned char)s[q])) q++;
    if (q < lx->len && s[q] == '.') {
      is_float = 1;
      q++;
      while (q < lx->len && isdigit((unsigned char)s[q])) q++;
    }
    if (q < lx->len && (s[q] == 'e' || s[q] == 'E')) {
      size_t e = q + 1;
      if (e < lx->len && (s[e] == '+' || s[e] == '-')) e++;
      if (e < lx->len && isdigit((unsigned char)s[e])) {
        is_float = 1;
        q = e;
        while (q < lx->len && isdigit((unsigned char)s[q])) q++;
      }
    }
    if (q < lx->len && (isalpha((unsigned char)s[q]) || s[q] == '_'))
      return ssm_lex_error(lx, p, "malformed number '%.*s'", (int)(q - p + 1), s + p);
    char buf[64];
    if (q - p >= sizeof buf) return ssm_lex_error(lx, p, "number too long");
    memcpy(buf, s + p, q - p);
    buf[q - p] = 0;
    if (is_float) {
      lx->tok = SSM_TOK_FLOAT;
      lx->fval = strtod(buf, NULL);
      if (!isfinite(lx->fval)) return ssm_lex_error(lx, p, "number '%s' out of range", buf);
    } else {
      lx->tok = SSM_TOK_INT;
      int64_t v = 0;
      for (size_t k = 0; buf[k]; k++)
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, buf[k] - '0', &v))
          return ssm_lex_error(lx, p, "integer '%s' out of range", buf);
      lx->ival = v;
    }
  } else if (c == '"' || c == '\'') {
    q++;
    while (q < lx->len && s[q] != (char)c) q++;
    if (q >= lx->len) return ssm_lex_error(lx, p, "unterminated string");
    lx->tok = SSM_TOK_STR;
    lx->text = s + p + 1;
    lx->tlen = q - p - 1;
    lx->pos = q + 1;
    return NULL;
  } else {
    lx->tok = SSM_TOK_PUNCT;
    q = p + 1;
    for (size_t k = 0; k < sizeof puncts2 / sizeof *puncts2; k++)
      if (p + 1 < lx->len && s[p] == puncts2[k][0] && s[p + 1] == puncts2[k][1]) q = p + 2;
    if (q == p + 1 && !strchr("()[],=+-*/%!<>", c))
      return ssm_lex_error(lx, p, "unexpected character '%c'", isprint(c) ? c : '?');
  }
  lx->tlen = q - p;
  lx->pos = q;
  return NULL;
}

ssm_status ssm_lex_init(ssm_lex *lx, ssm_src at, const char *src, size_t len) {
  *lx = (ssm_lex){.at = at, .src = src, .len = len};
  return ssm_lex_next(lx);
}

int ssm_lex_is(const ssm_lex *lx, const char *p) {
  return lx->tok == SSM_TOK_PUNCT && lx->tlen == strlen(p) && !memcmp(lx->text, p, lx->tlen);
}

static const char *tok_desc(const ssm_lex *lx, char *buf, size_t n) {
  if (lx->tok == SSM_TOK_END) return "end of text";
  snprintf(buf, n, "'%.*s'", (int)(lx->tlen > 40 ? 40 : lx->tlen), lx->text);
  return buf;
}

ssm_status ssm_lex_expect(ssm_lex *lx, const char *p) {
  if (!ssm_lex_is(lx, p)) {
    char b[64];
    return ssm_lex_error(lx, lx->off, "expected '%s', found %s", p, tok_desc(lx, b, sizeof b));
  }
  return ssm_lex_next(lx);
}

const char *ssm_scalar_kind_name(ssm_scalar_kind k) {
  static const char *const names[] = {"int", "float", "bool", "string", "list"};
  return names[k];
}

int ssm_scalar_truthy(const ssm_scalar *s) {
  return s->kind == SSM_SC_FLOAT ? s->f != 0.0 : s->i != 0;
}

void ssm_scalar_format(ssm_sb *b, const ssm_scalar *v) {
  switch (v->kind) {
  case SSM_SC_FLOAT: ssm_sb_printf(b, "%g", v->f); break;
  case SSM_SC_BOOL: ssm_sb_printf(b, "%s", v->i ? "true" : "false"); break;
  case SSM_SC_STR: ssm_sb_printf(b, "'%.*s'", (int)(v->i > 80 ? 80 : v->i), v->s); break;
  case SSM_SC_LIST:
    ssm_sb_printf(b, "[");
    for (int64_t k = 0; k < v->i && k < 16; k++) {
      if (k) ssm_sb_printf(b, ", ");
      ssm_scalar_format(b, &v->items[k]);
    }
    ssm_sb_printf(b, "%s]", v->i > 16 ? ", ..." : "");
    break;
  default: ssm_sb_printf(b, "%lld", (long long)v->i);
  }
}

static double as_f(const ssm_scalar *s) { return s->kind == SSM_SC_FLOAT ? s->f : (double)s->i; }

static int is_number(const ssm_scalar *s) { return s->kind == SSM_SC_INT || s->kind == SSM_SC_FLOAT; }

/* Python's ==, for the kinds that compare: numbers with numbers, bools
 * with bools, strings with strings. -1 when the kinds do not compare. */
static int scalar_equal(const ssm_scalar *a, const ssm_scalar *b) {
  if (a->kind == SSM_SC_STR || b->kind == SSM_SC_STR) {
    if (a->kind != b->kind) return -1;
    return a->i == b->i && !memcmp(a->s, b->s, (size_t)a->i);
  }
  if (a->kind == SSM_SC_LIST || b->kind == SSM_SC_LIST) return -1;
  if (a->kind == SSM_SC_BOOL || b->kind == SSM_SC_BOOL) return a->kind == b->kind ? a->i == b->i : -1;
  if (a->kind == SSM_SC_INT && b->kind == SSM_SC_INT) return a->i == b->i;
  return as_f(a) == as_f(b);
}

/* ---- evaluation by precedence climbing --------------------------------- */

typedef struct {
  ssm_lex *lx;
  ssm_scalar_lookup look;
  void *ctx;
} evaluator;

static ssm_status eval_or(evaluator *e, ssm_scalar *out);
static ssm_status eval_choice(evaluator *e, ssm_scalar *out);

static ssm_status need_number(evaluator *e, size_t off, const ssm_scalar *v, const char *op) {
  if (!is_number(v))
    return ssm_lex_error(e->lx, off, "'%s' needs numbers, not a %s", op, ssm_scalar_kind_name(v->kind));
  return NULL;
}

static const char *const functions[] = {"sqrt", "len", "int", "floor", "ceil", "min", "max", "bf16", NULL};

int ssm_expr_is_function(const char *name, size_t n) {
  for (const char *const *f = functions; *f; f++)
    if (strlen(*f) == n && !memcmp(*f, name, n)) return 1;
  return 0;
}

/* An integer result of floor/ceil/int, checked to be one. */
static ssm_status to_int(evaluator *e, size_t off, double x, ssm_scalar *out) {
  if (!(x > -9e15 && x < 9e15)) return ssm_lex_error(e->lx, off, "integer out of range");
  *out = (ssm_scalar){.kind = SSM_SC_INT, .i = (int64_t)x};
  return NULL;
}

/* NAME(args): the lexer is at NAME, which is a function followed by '('. */
static ssm_status eval_call(evaluator *e, ssm_scalar *out) {
  ssm_lex *lx = e->lx;
  size_t off = lx->off;
  char name[8];
  snprintf(name, sizeof name, "%.*s", (int)lx->tlen, lx->text);
  int two = !strcmp(name, "min") || !strcmp(name, "max");
  ssm_scalar a[2];
  if (++lx->depth > SSM_FE_MAX_DEPTH)
    return ssm_lex_error(lx, off, "expression nested deeper than %d", SSM_FE_MAX_DEPTH);
  SSM_TRY(ssm_lex_next(lx));
  SSM_TRY(ssm_lex_expect(lx, "("));
  for (int k = 0; k < 1 + two; k++) {
    if (k) SSM_TRY(ssm_lex_expect(lx, ","));
    SSM_TRY(eval_or(e, &a[k]));
  }
  if (!ssm_lex_is(lx, ")"))
    return ssm_lex_error(lx, lx->off, "%s() takes %d argument%s", name, 1 + two, two ? "s" : "");
  SSM_TRY(ssm_lex_next(lx));
  lx->depth--;
  ssm_scalar *x = &a[0];
  if (!strcmp(name, "len")) {
    if (x->kind != SSM_SC_STR && x->kind != SSM_SC_LIST)
      return ssm_lex_error(lx, off, "len() needs a string or a list, not a %s", ssm_scalar_kind_name(x->kind));
    *out = (ssm_scalar){.kind = SSM_SC_INT, .i = x->i};
    return NULL;
  }
  if (!strcmp(name, "int") && x->kind == SSM_SC_BOOL) {
    *out = (ssm_scalar){.kind = SSM_SC_INT, .i = x->i};
    return NULL;
  }
  SSM_TRY(need_number(e, off, x, name));
  if (two) {
    SSM_TRY(need_number(e, off, &a[1], name));
    int first = !strcmp(name, "min") ? as_f(&a[0]) <= as_f(&a[1]) : as_f(&a[0]) >= as_f(&a[1]);
    *out = first ? a[0] : a[1];
    if (a[0].kind != a[1].kind) *out = (ssm_scalar){.kind = SSM_SC_FLOAT, .f = as_f(out)};
    return NULL;
  }
  double v = as_f(x);
  if (!strcmp(name, "sqrt")) {
    if (!(v >= 0)) return ssm_lex_error(lx, off, "sqrt of a negative number");
    *out = (ssm_scalar){.kind = SSM_SC_FLOAT, .f = sqrt(v)};
    return NULL;
  }
  if (!strcmp(name, "bf16")) {
    *out = (ssm_scalar){.kind = SSM_SC_FLOAT, .f = ssm_bf16_to_f32(ssm_f32_to_bf16((float)v))};
    return NULL;
  }
  if (x->kind == SSM_SC_INT) {
    *out = *x;
    return NULL;
  }
  return to_int(e, off, !strcmp(name, "int") ? trunc(v) : !strcmp(name, "floor") ? floor(v) : ceil(v), out);
}

static ssm_status eval_primary(evaluator *e, ssm_scalar *out) {
  ssm_lex *lx = e->lx;
  char b[64];
  size_t off = lx->off;
  switch (lx->tok) {
  case SSM_TOK_INT:
    *out = (ssm_scalar){.kind = SSM_SC_INT, .i = lx->ival};
    return ssm_lex_next(lx);
  case SSM_TOK_FLOAT:
    *out = (ssm_scalar){.kind = SSM_SC_FLOAT, .f = lx->fval};
    return ssm_lex_next(lx);
  case SSM_TOK_STR:
    *out = (ssm_scalar){.kind = SSM_SC_STR, .i = (int64_t)lx->tlen, .s = lx->text};
    return ssm_lex_next(lx);
  case SSM_TOK_IDENT:
    if (ssm_expr_is_function(lx->text, lx->tlen)) {
      ssm_lex peek = *lx;
      ssm_status ps = ssm_lex_next(&peek);
      int call = !ps && ssm_lex_is(&peek, "(");
      ssm_status_free(ps);
      if (call) return eval_call(e, out);
    }
    if (lx->tlen == 4 && !memcmp(lx->text, "true", 4))
      *out = (ssm_scalar){.kind = SSM_SC_BOOL, .i = 1};
    else if (lx->tlen == 5 && !memcmp(lx->text, "false", 5))
      *out = (ssm_scalar){.kind = SSM_SC_BOOL, .i = 0};
    else if (!e->look || !e->look(e->ctx, lx->text, lx->tlen, out))
      return ssm_lex_error(lx, off, "undefined name '%.*s'", (int)lx->tlen, lx->text);
    return ssm_lex_next(lx);
  case SSM_TOK_PUNCT:
    if (ssm_lex_is(lx, "(")) {
      if (++lx->depth > SSM_FE_MAX_DEPTH)
        return ssm_lex_error(lx, off, "expression nested deeper than %d", SSM_FE_MAX_DEPTH);
      SSM_TRY(ssm_lex_next(lx));
      SSM_TRY(eval_choice(e, out));
      lx->depth--;
      return ssm_lex_expect(lx, ")");
    }
    break;
  default: break;
  }
  return ssm_lex_error(lx, off, "expected an expression, found %s", tok_desc(lx, b, sizeof b));
}

/* A primary followed by any number of [index] (lists and strings; a
 * negative index counts from the end, as in Python). */
static ssm_status eval_postfix(evaluator *e, ssm_scalar *out) {
  ssm_lex *lx = e->lx;
  SSM_TRY(eval_primary(e, out));
  while (ssm_lex_is(lx, "[")) {
    size_t off = lx->off;
    if (out->kind != SSM_SC_LIST && out->kind != SSM_SC_STR)
      return ssm_lex_error(lx, off, "a %s cannot be indexed", ssm_scalar_kind_name(out->kind));
    ssm_scalar ix;
    if (++lx->depth > SSM_FE_MAX_DEPTH)
      return ssm_lex_error(lx, off, "expression nested deeper than %d", SSM_FE_MAX_DEPTH);
    SSM_TRY(ssm_lex_next(lx));
    size_t ioff = lx->off;
    SSM_TRY(eval_or(e, &ix));
    SSM_TRY(ssm_lex_expect(lx, "]"));
    lx->depth--;
    if (ix.kind != SSM_SC_INT)
      return ssm_lex_error(lx, ioff, "an index must be an integer, not a %s", ssm_scalar_kind_name(ix.kind));
    int64_t k = ix.i < 0 ? ix.i + out->i : ix.i;
    if (k < 0 || k >= out->i) {
      ssm_sb v = {0};
      ssm_scalar_format(&v, out);
      ssm_status s = ssm_lex_error(lx, ioff, "index %lld is out of range for %s (length %lld)",
                                   (long long)ix.i, ssm_sb_str(&v), (long long)out->i);
      ssm_sb_free(&v);
      return s;
    }
    if (out->kind == SSM_SC_LIST) *out = out->items[k];
    else *out = (ssm_scalar){.kind = SSM_SC_STR, .i = 1, .s = out->s + k};
  }
  return NULL;
}

static ssm_status eval_unary(evaluator *e, ssm_scalar *out) {
  ssm_lex *lx = e->lx;
  size_t off = lx->off;
  if (ssm_lex_is(lx, "-") || ssm_lex_is(lx, "!")) {
    int neg = ssm_lex_is(lx, "-");
    if (++lx->depth > SSM_FE_MAX_DEPTH)
      return ssm_lex_error(lx, off, "expression nested deeper than %d", SSM_FE_MAX_DEPTH);
    SSM_TRY(ssm_lex_next(lx));
    SSM_TRY(eval_unary(e, out));
    lx->depth--;
    if (!neg) {
      *out = (ssm_scalar){.kind = SSM_SC_BOOL, .i = !ssm_scalar_truthy(out)};
      return NULL;
    }
    SSM_TRY(need_number(e, off, out, "-"));
    if (out->kind == SSM_SC_FLOAT) out->f = -out->f;
    else if (__builtin_sub_overflow((int64_t)0, out->i, &out->i))
      return ssm_lex_error(lx, off, "integer overflow");
    return NULL;
  }
  return eval_postfix(e, out);
}

static ssm_status arith(evaluator *e, size_t off, char op, const ssm_scalar *a,
                        const ssm_scalar *b, ssm_scalar *out) {
  char name[2] = {op, 0};
  SSM_TRY(need_number(e, off, a, name));
  SSM_TRY(need_number(e, off, b, name));
  if (a->kind == SSM_SC_INT && b->kind == SSM_SC_INT) {
    int64_t x = a->i, y = b->i, r = 0;
    int ovf = 0;
    switch (op) {
    case '+': ovf = __builtin_add_overflow(x, y, &r); break;
    case '-': ovf = __builtin_sub_overflow(x, y, &r); break;
    case '*': ovf = __builtin_mul_overflow(x, y, &r); break;
    case '/':
    case '%':
      if (y == 0) return ssm_lex_error(e->lx, off, "division by zero");
      if (x == INT64_MIN && y == -1) return ssm_lex_error(e->lx, off, "integer overflow");
      if (op == '/' && x % y) {
        *out = (ssm_scalar){.kind = SSM_SC_FLOAT, .f = (double)x / (double)y};
        return NULL;
      }
      r = op == '/' ? x / y : x % y;
      break;
    }
    if (ovf) return ssm_lex_error(e->lx, off, "integer overflow");
    *out = (ssm_scalar){.kind = SSM_SC_INT, .i = r};
    return NULL;
  }
  if (op == '%') return ssm_lex_error(e->lx, off, "'%%' needs integers");
  double x = as_f(a), y = as_f(b), r;
  switch (op) {
  case '+': r = x + y; break;
  case '-': r = x - y; break;
  case '*': r = x * y; break;
  default:
    if (y == 0.0) return ssm_lex_error(e->lx, off, "division by zero");
    r = x / y;
  }
  if (!isfinite(r)) return ssm_lex_error(e->lx, off, "result out of range");
  *out = (ssm_scalar){.kind = SSM_SC_FLOAT, .f = r};
  return NULL;
}

static ssm_status eval_mul(evaluator *e, ssm_scalar *out) {
  SSM_TRY(eval_unary(e, out));
  while (ssm_lex_is(e->lx, "*") || ssm_lex_is(e->lx, "/") || ssm_lex_is(e->lx, "%")) {
    char op = e->lx->text[0];
    size_t off = e->lx->off;
    ssm_scalar rhs;
    SSM_TRY(ssm_lex_next(e->lx));
    SSM_TRY(eval_unary(e, &rhs));
    SSM_TRY(arith(e, off, op, out, &rhs, out));
  }
  return NULL;
}

static ssm_status eval_add(evaluator *e, ssm_scalar *out) {
  SSM_TRY(eval_mul(e, out));
  while (ssm_lex_is(e->lx, "+") || ssm_lex_is(e->lx, "-")) {
    char op = e->lx->text[0];
    size_t off = e->lx->off;
    ssm_scalar rhs;
    SSM_TRY(ssm_lex_next(e->lx));
    SSM_TRY(eval_mul(e, &rhs));
    SSM_TRY(arith(e, off, op, out, &rhs, out));
  }
  return NULL;
}

/* `x in L`: L a list (an item equal to x) or a string (x a substring). */
static ssm_status eval_in(evaluator *e, size_t off, const ssm_scalar *x, const ssm_scalar *l,
                          ssm_scalar *out) {
  int r = 0;
  if (l->kind == SSM_SC_LIST) {
    for (int64_t k = 0; k < l->i && !r; k++) r = scalar_equal(x, &l->items[k]) == 1;
  } else if (l->kind == SSM_SC_STR && x->kind == SSM_SC_STR) {
    for (int64_t k = 0; k + x->i <= l->i && !r; k++) r = !memcmp(l->s + k, x->s, (size_t)x->i);
  } else {
    return ssm_lex_error(e->lx, off, "'in' needs a list (or a string in a string), not %s in %s",
                         ssm_scalar_kind_name(x->kind), ssm_scalar_kind_name(l->kind));
  }
  *out = (ssm_scalar){.kind = SSM_SC_BOOL, .i = r};
  return NULL;
}

static int at_cmp(const ssm_lex *lx) {
  return ssm_lex_is(lx, "==") || ssm_lex_is(lx, "!=") || ssm_lex_is(lx, "<") || ssm_lex_is(lx, "<=") ||
         ssm_lex_is(lx, ">") || ssm_lex_is(lx, ">=") ||
         (lx->tok == SSM_TOK_IDENT && lx->tlen == 2 && !memcmp(lx->text, "in", 2));
}

static ssm_status eval_cmp(evaluator *e, ssm_scalar *out) {
  static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
  SSM_TRY(eval_add(e, out));
  if (!at_cmp(e->lx)) return NULL;
  size_t off = e->lx->off;
  ssm_scalar rhs;
  if (e->lx->tok == SSM_TOK_IDENT) { /* in */
    SSM_TRY(ssm_lex_next(e->lx));
    SSM_TRY(eval_add(e, &rhs));
    SSM_TRY(eval_in(e, off, out, &rhs, out));
  } else {
    int k = 0;
    while (!ssm_lex_is(e->lx, ops[k])) k++;
    SSM_TRY(ssm_lex_next(e->lx));
    SSM_TRY(eval_add(e, &rhs));
    int r, eq = scalar_equal(out, &rhs);
    if (!is_number(out) || !is_number(&rhs)) {
      if (k > 1 || (eq < 0 && (out->kind == SSM_SC_LIST || rhs.kind == SSM_SC_LIST)))
        return ssm_lex_error(e->lx, off, "cannot compare %s with %s using '%s'",
                             ssm_scalar_kind_name(out->kind), ssm_scalar_kind_name(rhs.kind), ops[k]);
      eq = eq == 1; /* values of different kinds are not equal */
      r = k == 0 ? eq : !eq;
    } else if (out->kind == SSM_SC_INT && rhs.kind == SSM_SC_INT) {
      int64_t x = out->i, y = rhs.i;
      r = k == 0 ? x == y : k == 1 ? x != y : k == 2 ? x < y : k == 3 ? x <= y : k == 4 ? x > y : x >= y;
    } else {
      double x = as_f(out), y = as_f(&rhs);
      r = k == 0 ? x == y : k == 1 ? x != y : k == 2 ? x < y : k == 3 ? x <= y : k == 4 ? x > y : x >= y;
    }
    *out = (ssm_scalar){.kind = SSM_SC_BOOL, .i = r};
  }
  if (at_cmp(e->lx))
    return ssm_lex_error(e->lx, e->lx->off, "comparisons do not chain; use parentheses");
  return NULL;
}

static ssm_status eval_and(evaluator *e, ssm_scalar *out) {
  SSM_TRY(eval_cmp(e, out));
  while (ssm_lex_is(e->lx, "&&")) {
    ssm_scalar rhs;
    SSM_TRY(ssm_lex_next(e->lx));
    SSM_TRY(eval_cmp(e, &rhs));
    *out = (ssm_scalar){.kind = SSM_SC_BOOL, .i = ssm_scalar_truthy(out) && ssm_scalar_truthy(&rhs)};
  }
  return NULL;
}

static ssm_status eval_or(evaluator *e, ssm_scalar *out) {
  SSM_TRY(eval_and(e, out));
  while (ssm_lex_is(e->lx, "||")) {
    ssm_scalar rhs;
    SSM_TRY(ssm_lex_next(e->lx));
    SSM_TRY(eval_and(e, &rhs));
    *out = (ssm_scalar){.kind = SSM_SC_BOOL, .i = ssm_scalar_truthy(out) || ssm_scalar_truthy(&rhs)};
  }
  return NULL;
}

static int at_word(const ssm_lex *lx, const char *w) {
  return lx->tok == SSM_TOK_IDENT && lx->tlen == strlen(w) && !memcmp(lx->text, w, lx->tlen);
}

/* A if C else B (as Python's; both A and B are evaluated). */
static ssm_status eval_choice(evaluator *e, ssm_scalar *out) {
  SSM_TRY(eval_or(e, out));
  if (!at_word(e->lx, "if")) return NULL;
  size_t off = e->lx->off;
  if (++e->lx->depth > SSM_FE_MAX_DEPTH)
    return ssm_lex_error(e->lx, off, "expression nested deeper than %d", SSM_FE_MAX_DEPTH);
  ssm_scalar cond, other;
  SSM_TRY(ssm_lex_next(e->lx));
  SSM_TRY(eval_or(e, &cond));
  if (!at_word(e->lx, "else")) return ssm_lex_error(e->lx, e->lx->off, "expected 'else' after 'A if C'");
  SSM_TRY(ssm_lex_next(e->lx));
  SSM_TRY(eval_choice(e, &other));
  e->lx->depth--;
  if (!ssm_scalar_truthy(&cond)) *out = other;
  return NULL;
}

ssm_status ssm_expr_eval(ssm_lex *lx, ssm_scalar_lookup look, void *ctx, ssm_scalar *out) {
  evaluator e = {lx, look, ctx};
  return eval_choice(&e, out);
}

ssm_status ssm_expr_eval_str(ssm_src at, const char *src, size_t len,
                             ssm_scalar_lookup look, void *ctx, ssm_scalar *out) {
  ssm_lex lx;
  SSM_TRY(ssm_lex_init(&lx, at, src, len));
  SSM_TRY(ssm_expr_eval(&lx, look, ctx, out));
  if (lx.tok != SSM_TOK_END) {
    char b[64];
    return ssm_lex_error(&lx, lx.off, "unexpected %s after the expression",
                         tok_desc(&lx, b, sizeof b));
  }
  return NULL;
}

ssm_status ssm_expr_template(ssm_src at, const char *src, size_t len,
                             ssm_scalar_lookup look, void *ctx, ssm_arena *arena,
                             const char **out) {
  ssm_sb buf = {0};
  ssm_lex pos = {.at = at, .src = src, .len = len};
  ssm_status s = NULL;
  for (size_t k = 0; k < len && !s;) {
    if (src[k] == '}') {
      s = ssm_lex_error(&pos, k, "unbalanced '}' in name template");
    } else if (src[k] != '{') {
      ssm_sb_append(&buf, src + k++, 1);
    } else {
      size_t close = k + 1;
      while (close < len && src[close] != '}' && src[close] != '{') close++;
      if (close >= len || src[close] == '{') {
        s = ssm_lex_error(&pos, k, "unbalanced '{' in name template");
      } else if (close == k + 2 && src[k + 1] == '*') { /* a stacked weight's index: kept */
        ssm_sb_append(&buf, "{*}", 3);
      } else {
        ssm_src inner = at, hole = ssm_lex_pos(&pos, k + 1);
        inner.line = hole.line;
        inner.col = hole.col;
        ssm_scalar v;
        s = ssm_expr_eval_str(inner, src + k + 1, close - k - 1, look, ctx, &v);
        if (!s && v.kind == SSM_SC_STR) ssm_sb_append(&buf, v.s, (size_t)v.i);
        else if (!s) ssm_scalar_format(&buf, &v);
      }
      k = close + 1;
    }
    if (!s && buf.n > SSM_FE_MAX_TEMPLATE)
      s = ssm_lex_error(&pos, 0, "expanded name longer than %d characters", SSM_FE_MAX_TEMPLATE);
  }
  if (!s) s = ssm_sb_status(&buf, "a name template's expansion");
  if (!s) *out = ssm_arena_strndup(arena, ssm_sb_str(&buf), buf.n);
  ssm_sb_free(&buf);
  return s;
}
