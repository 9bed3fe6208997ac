/*
 * parse.c — reads the IR text form written by print.c.
 *
 * A hand-written lexer and a line-oriented recursive-descent parser with no
 * recursion deeper than one statement. Every error is a status
 * "FILE:LINE:COL: message" pointing at the offending token; nothing in the
 * input can make it crash: token lengths, operand counts and list lengths
 * are bounded, and every cursor advance checks for the terminating NUL.
 * The parser builds the graph but does not verify it (ssm_graph_verify does);
 * it does check what it needs to build nodes: op names, arity, attributes.
 */
#include "ir/ir.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#define MAX_NAME 256           /* identifiers and value names */
#define MAX_NUMBER 64          /* characters of a numeric literal */
#define MAX_STRING 65536       /* bytes of a string literal, escaped */
#define MAX_OPERANDS 64        /* more than any op takes */
#define MAX_LIST 1024          /* elements of an int list */
#define MAX_DIM ((int64_t)1 << 40)
#define MAX_NUMEL ((int64_t)1 << 60)

typedef enum { TK_EOF, TK_NL, TK_IDENT, TK_NUM, TK_VAL, TK_STR, TK_PUNCT } tok_kind;

typedef struct {
  tok_kind kind;
  const char *s; /* TK_VAL: after '%'; TK_STR: after the opening quote */
  size_t n;
  int line, col;
} token;

typedef struct {
  const char *name; /* points into the source text */
  size_t n;
  ssm_value *v;
  int line, col;
} sym;

typedef struct {
  const char *file;
  const char *p, *line_start;
  int line;
  token tok;
  ssm_graph *g;
  sym *syms;
  size_t nsyms, cap;
} parser;

static ssm_status SSM_PRINTF(4, 5)
    err_at(parser *P, int line, int col, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ssm_status_new(SSM_ERR_INVALID, "%s:%d:%d: %s", P->file, line, col, msg);
}

/* A short printable description of a token for messages. */
static const char *tok_desc(const token *t, char *buf, size_t size) {
  switch (t->kind) {
  case TK_EOF: return "end of input";
  case TK_NL: return "end of line";
  case TK_STR: return "a string";
  case TK_VAL:
    snprintf(buf, size, "'%%%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
    return buf;
  default:
    snprintf(buf, size, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
    return buf;
  }
}

static int is_name_char(int c) { return isalnum(c) || c == '_' || c == '.'; }

static int hex_value(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* ---- lexer ------------------------------------------------------------- */

static int cur_col(const parser *P, const char *at) { return (int)(at - P->line_start) + 1; }

static ssm_status lex_string(parser *P, token *t) {
  const char *q = P->p + 1;
  for (;;) {
    unsigned char c = (unsigned char)*q;
    if (c == 0 || c == '\n') return err_at(P, t->line, t->col, "unterminated string");
    if ((size_t)(q - P->p) > MAX_STRING)
      return err_at(P, t->line, t->col, "string longer than %d bytes", MAX_STRING);
    if (c == '"') break;
    if (c == '\\') {
      char e = q[1];
      if (e == '"' || e == '\\' || e == 'n' || e == 't') {
        q += 2;
        continue;
      }
      if (e == 'x') {
        int h = hex_value((unsigned char)q[2]);
        int l = h < 0 ? -1 : hex_value((unsigned char)q[3]);
        if (h < 0 || l < 0)
          return err_at(P, t->line, cur_col(P, q), "'\\x' needs two hex digits");
        if (h == 0 && l == 0)
          return err_at(P, t->line, cur_col(P, q), "'\\x00' is not allowed in strings");
        q += 4;
        continue;
      }
      if (isprint((unsigned char)e))
        return err_at(P, t->line, cur_col(P, q), "unknown escape '\\%c' in string", e);
      return err_at(P, t->line, cur_col(P, q), "unknown escape in string");
    }
    if (c < 0x20 || c == 0x7f)
      return err_at(P, t->line, cur_col(P, q),
                    "control character 0x%02x in string (write \\x%02x)", c, c);
    q++;
  }
  t->kind = TK_STR;
  t->s = P->p + 1;
  t->n = (size_t)(q - P->p - 1);
  P->p = q + 1;
  return NULL;
}

/* Reads the next token into P->tok. */
static ssm_status lex(parser *P) {
  const char *p = P->p;
  for (;;) {
    if (*p == ' ' || *p == '\t' || *p == '\r') p++;
    else if (*p == '#')
      while (*p && *p != '\n') p++;
    else break;
  }
  P->p = p;
  token *t = &P->tok;
  *t = (token){.s = p, .line = P->line, .col = cur_col(P, p)};
  unsigned char c = (unsigned char)*p;
  if (c == 0) {
    t->kind = TK_EOF;
    return NULL;
  }
  if (c == '\n') {
    t->kind = TK_NL;
    t->n = 1;
    P->p = p + 1;
    P->line_start = P->p;
    if (P->line == 0x7fffffff) return err_at(P, t->line, t->col, "too many lines");
    P->line++;
    return NULL;
  }
  if (isalpha(c) || c == '_') {
    const char *q = p;
    while (is_name_char((unsigned char)*q)) q++;
    t->kind = TK_IDENT;
    t->n = (size_t)(q - p);
    if (t->n > MAX_NAME) return err_at(P, t->line, t->col, "name longer than %d bytes", MAX_NAME);
    P->p = q;
    return NULL;
  }
  if (c == '%') {
    const char *q = p + 1;
    while (is_name_char((unsigned char)*q)) q++;
    t->kind = TK_VAL;
    t->s = p + 1;
    t->n = (size_t)(q - p - 1);
    if (t->n == 0) return err_at(P, t->line, t->col, "expected a value name after '%%'");
    if (t->n > MAX_NAME)
      return err_at(P, t->line, t->col, "value name longer than %d bytes", MAX_NAME);
    P->p = q;
    return NULL;
  }
  if (isdigit(c) || c == '-' || c == '+' || c == '.') {
    const char *q = p + 1;
    for (;;) {
      unsigned char d = (unsigned char)*q;
      if (isalnum(d) || d == '.' || d == '_') q++;
      else if ((d == '+' || d == '-') && (q[-1] == 'e' || q[-1] == 'E')) q++;
      else break;
    }
    t->kind = TK_NUM;
    t->n = (size_t)(q - p);
    if (t->n > MAX_NUMBER)
      return err_at(P, t->line, t->col, "number longer than %d characters", MAX_NUMBER);
    P->p = q;
    return NULL;
  }
  if (c == '"') return lex_string(P, t);
  if (strchr("{}[],:=", c)) {
    t->kind = TK_PUNCT;
    t->n = 1;
    P->p = p + 1;
    return NULL;
  }
  if (isprint(c)) return err_at(P, t->line, t->col, "unexpected character '%c'", c);
  return err_at(P, t->line, t->col, "unexpected byte 0x%02x", c);
}

static int is_punct(const token *t, char c) { return t->kind == TK_PUNCT && t->s[0] == c; }

static int tok_is(const token *t, const char *word) {
  return t->kind == TK_IDENT && strlen(word) == t->n && !memcmp(t->s, word, t->n);
}

static ssm_status expect_punct(parser *P, char c, const char *where) {
  if (is_punct(&P->tok, c)) return lex(P);
  char b[64];
  return err_at(P, P->tok.line, P->tok.col, "expected '%c' %s, got %s", c, where,
                tok_desc(&P->tok, b, sizeof b));
}

/* ---- literals ---------------------------------------------------------- */

static int tok_int(const token *t, int64_t *out) {
  char buf[MAX_NUMBER + 1];
  if (t->kind != TK_NUM || t->n > MAX_NUMBER) return 0;
  memcpy(buf, t->s, t->n);
  buf[t->n] = 0;
  char *end;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  if (errno || end != buf + t->n || end == buf) return 0;
  *out = (int64_t)v;
  return 1;
}

static int tok_float(const token *t, double *out) {
  if (tok_is(t, "inf")) return *out = INFINITY, 1;
  if (tok_is(t, "nan")) return *out = NAN, 1;
  char buf[MAX_NUMBER + 1];
  if (t->kind != TK_NUM || t->n > MAX_NUMBER) return 0;
  memcpy(buf, t->s, t->n);
  buf[t->n] = 0;
  char *end;
  errno = 0;
  double v = strtod(buf, &end);
  if (end != buf + t->n || end == buf) return 0;
  if (errno == ERANGE && isinf(v)) return 0; /* overflow; underflow is fine */
  *out = v;
  return 1;
}

/* Decodes a string token (validated by the lexer) into malloc'd memory. */
static ssm_status tok_string(const token *t, char **out) {
  char *s;
  SSM_TRY(ssm_status_wrap(ssm_alloc(t->n + 1, 1, (void **)&s), "a string of the IR"));
  size_t k = 0;
  for (size_t i = 0; i < t->n; i++) {
    char c = t->s[i];
    if (c == '\\' && i + 1 < t->n) {
      char e = t->s[++i];
      if (e == 'n') c = '\n';
      else if (e == 't') c = '\t';
      else if (e == 'x' && i + 2 < t->n) {
        c = (char)(hex_value((unsigned char)t->s[i + 1]) * 16 +
                   hex_value((unsigned char)t->s[i + 2]));
        i += 2;
      } else c = e;
    }
    s[k++] = c;
  }
  s[k] = 0;
  *out = s;
  return NULL;
}

/* ---- value names ------------------------------------------------------- */

static size_t sym_hash(const char *s, size_t n) { return (size_t)ssm_fnv1a(SSM_FNV_INIT, s, n); }

static sym *sym_find(parser *P, const char *s, size_t n) {
  if (!P->cap) return NULL;
  for (size_t i = sym_hash(s, n) & (P->cap - 1);; i = (i + 1) & (P->cap - 1)) {
    sym *e = &P->syms[i];
    if (!e->name) return NULL;
    if (e->n == n && !memcmp(e->name, s, n)) return e;
  }
}

static ssm_status sym_add(parser *P, const token *t, ssm_value *v) {
  if (2 * (P->nsyms + 1) > P->cap) {
    size_t cap = P->cap ? P->cap * 2 : 64;
    sym *old = P->syms, *bigger;
    size_t old_cap = P->cap;
    SSM_TRY(ssm_status_wrap(ssm_alloc(cap, sizeof *P->syms, (void **)&bigger),
                            "the value names of the IR"));
    P->syms = bigger;
    P->cap = cap;
    for (size_t j = 0; j < old_cap; j++) {
      if (!old[j].name) continue;
      size_t i = sym_hash(old[j].name, old[j].n) & (cap - 1);
      while (P->syms[i].name) i = (i + 1) & (cap - 1);
      P->syms[i] = old[j];
    }
    free(old);
  }
  size_t i = sym_hash(t->s, t->n) & (P->cap - 1);
  while (P->syms[i].name) i = (i + 1) & (P->cap - 1);
  P->syms[i] = (sym){t->s, t->n, v, t->line, t->col};
  P->nsyms++;
  return NULL;
}

/* ---- grammar ----------------------------------------------------------- */

/* DTYPE '[' (DIM (',' DIM)*)? ']' */
static ssm_status parse_type(parser *P, ssm_type *out) {
  token *t = &P->tok;
  char b[64];
  *out = (ssm_type){0};
  if (t->kind != TK_IDENT)
    return err_at(P, t->line, t->col, "expected a type such as f32[1,64], got %s",
                  tok_desc(t, b, sizeof b));
  if (!ssm_dtype_parse(t->s, t->n, &out->dtype))
    return err_at(P, t->line, t->col, "unknown dtype '%.*s'", (int)t->n, t->s);
  SSM_TRY(lex(P));
  SSM_TRY(expect_punct(P, '[', "after the dtype"));
  if (is_punct(t, ']')) return lex(P);
  int64_t numel = 1;
  for (;;) {
    int64_t d;
    if (t->kind != TK_NUM)
      return err_at(P, t->line, t->col, "expected a dimension, got %s", tok_desc(t, b, sizeof b));
    if (out->rank == SSM_MAX_RANK)
      return err_at(P, t->line, t->col, "too many dimensions (at most %d)", SSM_MAX_RANK);
    if (!tok_int(t, &d) || d < 1 || d > MAX_DIM)
      return err_at(P, t->line, t->col, "dimension %.*s out of range (1 to 2^40)",
                    (int)t->n, t->s);
    if (numel > MAX_NUMEL / d)
      return err_at(P, t->line, t->col, "tensor has more than 2^60 elements");
    numel *= d;
    out->dims[out->rank++] = d;
    SSM_TRY(lex(P));
    if (is_punct(t, ']')) return lex(P);
    SSM_TRY(expect_punct(P, ',', "or ']' in the type"));
  }
}

static ssm_status parse_attr_value(parser *P, ssm_node *n, const ssm_attr_spec *spec,
                                   const char *opname) {
  token *t = &P->tok;
  int line = t->line, col = t->col;
  switch (spec->kind) {
  case SSM_ATTR_INT: {
    int64_t v;
    if (!tok_int(t, &v))
      return err_at(P, line, col, "attribute '%s' of '%s' must be an integer", spec->key, opname);
    ssm_node_set_int(P->g, n, spec->key, v);
    return lex(P);
  }
  case SSM_ATTR_FLOAT: {
    double v;
    if (!tok_float(t, &v))
      return err_at(P, line, col, "attribute '%s' of '%s' must be a number", spec->key, opname);
    ssm_node_set_float(P->g, n, spec->key, v);
    return lex(P);
  }
  case SSM_ATTR_STR: {
    if (t->kind != TK_STR)
      return err_at(P, line, col, "attribute '%s' of '%s' must be a \"string\"", spec->key, opname);
    char *s;
    SSM_TRY(tok_string(t, &s));
    ssm_node_set_str(P->g, n, spec->key, s);
    free(s);
    return lex(P);
  }
  case SSM_ATTR_INTS: {
    if (!is_punct(t, '['))
      return err_at(P, line, col, "attribute '%s' of '%s' must be a list like [1,0,2]",
                    spec->key, opname);
    SSM_TRY(lex(P));
    int64_t *vals;
    SSM_TRY(ssm_status_wrap(ssm_alloc(MAX_LIST, sizeof *vals, (void **)&vals), "an IR list"));
    int count = 0;
    ssm_status s = NULL;
    while (!s && !is_punct(t, ']')) {
      if (count && (s = expect_punct(P, ',', "or ']' in the list"))) break;
      if (count == MAX_LIST) s = err_at(P, t->line, t->col, "list longer than %d", MAX_LIST);
      else if (!tok_int(t, &vals[count]))
        s = err_at(P, t->line, t->col, "list elements of '%s' must be integers", spec->key);
      else {
        count++;
        s = lex(P);
      }
    }
    if (!s) {
      ssm_node_set_ints(P->g, n, spec->key, count, vals);
      s = lex(P);
    }
    free(vals);
    return s;
  }
  }
  return err_at(P, line, col, "bad attribute kind");
}

/* ops.def keeps axes in [0, rank): a negative axis counts from the end of
 * operand 0, as in numpy. Axes out of range either way are left for the
 * verifier to report. */
static void normalize_axis(ssm_node *n) {
  for (int i = 0; i < n->nattrs; i++) {
    ssm_attr *a = &n->attrs[i];
    if (strcmp(a->key, "axis") || a->kind != SSM_ATTR_INT || a->i >= 0 || n->nargs < 1) continue;
    if (a->i >= -n->args[0]->type.rank) a->i += n->args[0]->type.rank;
  }
}

/* [%name ':' TYPE '='] OP [%a (',' %b)*] (key=value)* NEWLINE */
static ssm_status parse_stmt(parser *P) {
  token *t = &P->tok;
  char b[64];
  int line = t->line, col = t->col;
  token res = {0};
  ssm_type type = {0};
  if (t->kind == TK_VAL) {
    res = *t;
    sym *prev = sym_find(P, res.s, res.n);
    if (prev)
      return err_at(P, res.line, res.col, "value %%%.*s defined twice (first at %d:%d)",
                    (int)res.n, res.s, prev->line, prev->col);
    SSM_TRY(lex(P));
    SSM_TRY(expect_punct(P, ':', "after the result name"));
    SSM_TRY(parse_type(P, &type));
    SSM_TRY(expect_punct(P, '=', "after the result type"));
  }
  if (t->kind != TK_IDENT)
    return err_at(P, t->line, t->col, "expected an op name, got %s", tok_desc(t, b, sizeof b));
  token optok = *t;
  ssm_op op = ssm_op_lookup(t->s, t->n);
  if (op == SSM_OP_COUNT)
    return err_at(P, t->line, t->col, "unknown op '%.*s'", (int)t->n, t->s);
  const ssm_op_info *info = ssm_op_info_get(op);
  if (res.s && info->kind == SSM_KIND_SINK)
    return err_at(P, line, col, "op '%s' defines no value", info->name);
  if (!res.s && info->kind != SSM_KIND_SINK)
    return err_at(P, t->line, t->col, "op '%s' defines a value: write %%N:TYPE = %s ...",
                  info->name, info->name);
  SSM_TRY(lex(P));

  ssm_value *args[MAX_OPERANDS];
  int nargs = 0;
  while (t->kind == TK_VAL) {
    sym *s = sym_find(P, t->s, t->n);
    if (!s) return err_at(P, t->line, t->col, "undefined value %%%.*s", (int)t->n, t->s);
    if (nargs == MAX_OPERANDS)
      return err_at(P, t->line, t->col, "more than %d operands", MAX_OPERANDS);
    args[nargs++] = s->v;
    SSM_TRY(lex(P));
    if (!is_punct(t, ',')) break;
    SSM_TRY(lex(P));
    if (t->kind != TK_VAL)
      return err_at(P, t->line, t->col, "expected a value after ',', got %s",
                    tok_desc(t, b, sizeof b));
  }
  if (t->kind == TK_VAL)
    return err_at(P, t->line, t->col, "expected ',' before %s", tok_desc(t, b, sizeof b));
  if (nargs < info->min_args || nargs > info->max_args) {
    if (info->min_args == info->max_args)
      return err_at(P, optok.line, optok.col, "op '%s' takes %d operand%s, got %d", info->name,
                    info->min_args, info->min_args == 1 ? "" : "s", nargs);
    return err_at(P, optok.line, optok.col, "op '%s' takes %d to %d operands, got %d",
                  info->name, info->min_args, info->max_args, nargs);
  }

  ssm_node *n = ssm_graph_append(P->g, op, res.s ? &type : NULL, nargs, args);
  if (!n) return ssm_graph_status(P->g);
  n->line = line;
  n->col = col;
  int seen[SSM_MAX_ATTRS] = {0};
  while (t->kind == TK_IDENT) {
    int k = 0;
    while (k < info->nattrs && !tok_is(t, info->attrs[k].key)) k++;
    if (k == info->nattrs)
      return err_at(P, t->line, t->col, "op '%s' has no attribute '%.*s'", info->name,
                    (int)t->n, t->s);
    if (seen[k])
      return err_at(P, t->line, t->col, "attribute '%s' given twice", info->attrs[k].key);
    seen[k] = 1;
    SSM_TRY(lex(P));
    SSM_TRY(expect_punct(P, '=', "after the attribute name"));
    SSM_TRY(parse_attr_value(P, n, &info->attrs[k], info->name));
  }
  if (t->kind != TK_NL && t->kind != TK_EOF && !is_punct(t, '}'))
    return err_at(P, t->line, t->col, "expected end of line, got %s", tok_desc(t, b, sizeof b));
  for (int k = 0; k < info->nattrs; k++)
    if (!seen[k] && !info->attrs[k].optional)
      return err_at(P, optok.line, optok.col, "op '%s' needs attribute '%s'", info->name,
                    info->attrs[k].key);
  normalize_axis(n);
  if (res.s) SSM_TRY(sym_add(P, &res, n->result));
  return NULL;
}

static ssm_status skip_newlines(parser *P) {
  while (P->tok.kind == TK_NL) SSM_TRY(lex(P));
  return NULL;
}

/* 'graph' NAME '{' stmt* '}' */
static ssm_status parse_graph(parser *P, const char *file) {
  token *t = &P->tok;
  char b[64];
  SSM_TRY(lex(P));
  SSM_TRY(skip_newlines(P));
  if (!tok_is(t, "graph"))
    return err_at(P, t->line, t->col, "expected 'graph', got %s", tok_desc(t, b, sizeof b));
  SSM_TRY(lex(P));
  if (t->kind != TK_IDENT)
    return err_at(P, t->line, t->col, "expected a graph name, got %s", tok_desc(t, b, sizeof b));
  char name[MAX_NAME + 1];
  memcpy(name, t->s, t->n);
  name[t->n] = 0;
  SSM_TRY(ssm_graph_create(name, &P->g));
  if (file) P->g->file = ssm_arena_strdup(P->g->arena, file);
  SSM_TRY(lex(P));
  SSM_TRY(expect_punct(P, '{', "after the graph name"));
  for (;;) {
    SSM_TRY(skip_newlines(P));
    if (t->kind == TK_EOF)
      return err_at(P, t->line, t->col, "expected '}' at the end of graph '%s'", name);
    if (is_punct(t, '}')) break;
    SSM_TRY(parse_stmt(P));
  }
  SSM_TRY(lex(P));
  SSM_TRY(skip_newlines(P));
  if (t->kind != TK_EOF)
    return err_at(P, t->line, t->col, "unexpected %s after the end of the graph",
                  tok_desc(t, b, sizeof b));
  return NULL;
}

ssm_status ssm_graph_parse(const char *text, const char *file, ssm_graph **out) {
  *out = NULL;
  parser P = {.file = file ? file : "<ir>", .p = text ? text : "", .line = 1};
  P.line_start = P.p;
  ssm_status s = parse_graph(&P, file);
  free(P.syms);
  if (P.g) s = ssm_arena_check(P.g->arena, s, "the IR graph");
  if (s) {
    ssm_graph_destroy(P.g);
    return s;
  }
  *out = P.g;
  return NULL;
}
