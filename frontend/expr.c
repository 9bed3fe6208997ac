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
  return k == SSM_SC_INT ? "int" : k == SSM_SC_FLOAT ? "float" : "bool";
}

int ssm_scalar_truthy(const ssm_scalar *s) {
  return s->kind == SSM_SC_FLOAT ? s->f != 0.0 : s->i != 0;
}

static double as_f(const ssm_scalar *s) { return s->kind == SSM_SC_FLOAT ? s->f : (double)s->i; }

/* ---- evaluation by precedence climbing --------------------------------- */

typedef struct {
  ssm_lex *lx;
  ssm_scalar_lookup look;
  void *ctx;
} evaluator;

static ssm_status eval_or(evaluator *e, ssm_scalar *out);

static ssm_status need_number(evaluator *e, size_t off, const ssm_scalar *v, const char *op) {
  if (v->kind == SSM_SC_BOOL)
    return ssm_lex_error(e->lx, off, "'%s' needs numbers, not a bool", op);
  return NULL;
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
  case SSM_TOK_IDENT:
    if (lx->tlen == 4 && !memcmp(lx->text, "sqrt", 4)) { /* sqrt(x): the one function */
      ssm_lex peek = *lx;
      ssm_status ps = ssm_lex_next(&peek);
      int call = !ps && ssm_lex_is(&peek, "(");
      ssm_status_free(ps);
      if (call) {
        SSM_TRY(ssm_lex_next(lx));
        SSM_TRY(eval_primary(e, out)); /* the parenthesized argument */
        SSM_TRY(need_number(e, off, out, "sqrt"));
        double x = as_f(out);
        if (!(x >= 0)) return ssm_lex_error(lx, off, "sqrt of a negative number");
        *out = (ssm_scalar){.kind = SSM_SC_FLOAT, .f = sqrt(x)};
        return NULL;
      }
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
      SSM_TRY(eval_or(e, out));
      lx->depth--;
      return ssm_lex_expect(lx, ")");
    }
    break;
  default: break;
  }
  return ssm_lex_error(lx, off, "expected an expression, found %s", tok_desc(lx, b, sizeof b));
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
  return eval_primary(e, out);
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

static ssm_status eval_cmp(evaluator *e, ssm_scalar *out) {
  static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
  SSM_TRY(eval_add(e, out));
  for (int k = 0; k < 6; k++) {
    if (!ssm_lex_is(e->lx, ops[k])) continue;
    size_t off = e->lx->off;
    ssm_scalar rhs;
    SSM_TRY(ssm_lex_next(e->lx));
    SSM_TRY(eval_add(e, &rhs));
    int r;
    if (out->kind == SSM_SC_BOOL || rhs.kind == SSM_SC_BOOL) {
      if (out->kind != rhs.kind || k > 1)
        return ssm_lex_error(e->lx, off, "cannot compare %s with %s using '%s'",
                             ssm_scalar_kind_name(out->kind), ssm_scalar_kind_name(rhs.kind), ops[k]);
      r = k == 0 ? out->i == rhs.i : out->i != rhs.i;
    } else if (out->kind == SSM_SC_INT && rhs.kind == SSM_SC_INT) {
      int64_t x = out->i, y = rhs.i;
      r = k == 0 ? x == y : k == 1 ? x != y : k == 2 ? x < y : k == 3 ? x <= y : k == 4 ? x > y : x >= y;
    } else {
      double x = as_f(out), y = as_f(&rhs);
      r = k == 0 ? x == y : k == 1 ? x != y : k == 2 ? x < y : k == 3 ? x <= y : k == 4 ? x > y : x >= y;
    }
    *out = (ssm_scalar){.kind = SSM_SC_BOOL, .i = r};
    if (ssm_lex_is(e->lx, "==") || ssm_lex_is(e->lx, "!=") || ssm_lex_is(e->lx, "<") ||
        ssm_lex_is(e->lx, "<=") || ssm_lex_is(e->lx, ">") || ssm_lex_is(e->lx, ">="))
      return ssm_lex_error(e->lx, e->lx->off, "comparisons do not chain; use parentheses");
    break;
  }
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

ssm_status ssm_expr_eval(ssm_lex *lx, ssm_scalar_lookup look, void *ctx, ssm_scalar *out) {
  evaluator e = {lx, look, ctx};
  return eval_or(&e, out);
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
  char buf[SSM_FE_MAX_TEMPLATE + 1];
  size_t n = 0;
  ssm_lex pos = {.at = at, .src = src, .len = len};
  for (size_t k = 0; k < len;) {
    char piece[32];
    const char *add = src + k;
    size_t addn = 1;
    if (src[k] == '}') return ssm_lex_error(&pos, k, "unbalanced '}' in name template");
    if (src[k] == '{') {
      size_t close = k + 1;
      while (close < len && src[close] != '}' && src[close] != '{') close++;
      if (close >= len || src[close] == '{')
        return ssm_lex_error(&pos, k, "unbalanced '{' in name template");
      ssm_src inner = at;
      ssm_src hole = ssm_lex_pos(&pos, k + 1);
      inner.line = hole.line;
      inner.col = hole.col;
      ssm_scalar v;
      SSM_TRY(ssm_expr_eval_str(inner, src + k + 1, close - k - 1, look, ctx, &v));
      if (v.kind != SSM_SC_INT)
        return ssm_lex_error(&pos, k, "name template hole must be an integer, not a %s",
                             ssm_scalar_kind_name(v.kind));
      addn = (size_t)snprintf(piece, sizeof piece, "%lld", (long long)v.i);
      add = piece;
      k = close + 1;
    } else {
      k++;
    }
    if (n + addn > SSM_FE_MAX_TEMPLATE)
      return ssm_lex_error(&pos, 0, "expanded name longer than %d characters", SSM_FE_MAX_TEMPLATE);
    memcpy(buf + n, add, addn);
    n += addn;
  }
  *out = ssm_arena_strndup(arena, buf, n);
  return NULL;
}
