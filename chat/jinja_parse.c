/*
 * jinja_parse.c — the Jinja subset's lexer and parser (see jinja.h): the
 * template text is cut into text, {{ }} and {% %} pieces with Jinja's
 * whitespace rules (trim_blocks, lstrip_blocks, '-' and '+' markers, one
 * trailing newline dropped), each tag's inside into tokens, and the tokens
 * into a tree (jinja_internal.h). Every construct the evaluator does not
 * implement is refused here with NAME:LINE:COL.
 *
 * The parse is linear in the text (the line and column of a place are
 * counted on from the last place asked for, which only moves forward but
 * once, and the names that calls use are sorted before they are checked),
 * and nesting is bounded (MAX_NEST) so that no template exhausts the stack.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

/* ---- pieces ------------------------------------------------------------------ */

typedef enum { P_TEXT, P_VAR, P_BLOCK } piece_kind;

typedef struct {
  piece_kind kind;
  const char *s; /* text, or the tag's inside */
  size_t n;
  int line, col; /* of the text or the tag's inside */
} piece;

typedef struct {
  const char *name, *src;
  size_t n;
  ssm_arena *arena; /* the tree's; its first failure is the parse's NOMEM */
  SSM_VEC(piece) pieces;
  size_t at; /* parser: the next piece */
  /* the tokens of the tag being parsed */
  struct tok {
    char kind; /* 'n'ame, 'i'nt, 'f'loat, 's'tring, 'o'perator, 'e'nd */
    const char *s;
    size_t n;
    int line, col;
  } * toks;
  int ntoks, tp;
  SSM_VEC(const char *) macros, assigned; /* names a call may use */
  SSM_VEC(jnode *) calls;                    /* J_CALL of a plain name, checked at the end */
  const char *what; /* the caller's name, for NOMEM */
  const char *pos_at; /* pos_of's last place, and its line and column */
  int pos_line, pos_col;
  size_t walked;      /* bytes pos_of walked */
  int nest;           /* expressions and blocks being parsed (MAX_NEST) */
} parser;

#define MAX_NEST 100

/* The arena's NOMEM status. */
static ssm_status oom(const parser *p) { return ssm_arena_status(p->arena, p->what); }

static void pos_of(parser *p, const char *at, int *line, int *col) {
  if (!p->pos_at || at < p->pos_at) p->pos_at = p->src, p->pos_line = 1, p->pos_col = 1;
  int l = p->pos_line, c = p->pos_col;
  p->walked += (size_t)(at - p->pos_at);
  for (const char *q = p->pos_at; q < at; q++) {
    if (*q == '\n') l++, c = 1;
    else if ((*q & 0xc0) != 0x80) c++;
  }
  p->pos_at = at;
  *line = p->pos_line = l;
  *col = p->pos_col = c;
}

static ssm_status error_at(const parser *p, int line, int col, const char *fmt, ...) SSM_PRINTF(4, 5);
static ssm_status error_at(const parser *p, int line, int col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ssm_sb b = {0}; /* a failed append: ssm_jinja_parse reports NOMEM instead */
  ssm_sb_printf(&b, "%s:%d:%d: ", p->name, line, col);
  ssm_sb_vprintf(&b, fmt, ap);
  va_end(ap);
  ssm_status s = ssm_status_new(SSM_ERR_UNSUPPORTED, "%s", ssm_sb_str(&b));
  ssm_sb_free(&b);
  return s;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static ssm_status add_piece(parser *p, piece_kind k, const char *s, size_t n) {
  if (k == P_TEXT && !n) return NULL;
  piece pc = {k, s, n, 0, 0};
  pos_of(p, s, &pc.line, &pc.col);
  return ssm_vec_push(&p->pieces, pc);
}

/* The end of the tag whose inside starts at `i` ("}}" or "%}", after
 * strings and brackets), or 0 when it has none. */
static size_t tag_end(const parser *p, size_t i, char close) {
  int depth = 0;
  for (; i + 1 < p->n; i++) {
    char c = p->src[i];
    if (c == '"' || c == '\'') {
      for (i++; i < p->n && p->src[i] != c; i++)
        if (p->src[i] == '\\') i++;
      continue;
    }
    if (depth == 0 && c == close && p->src[i + 1] == '}') return i;
    if (c == '(' || c == '[' || c == '{') depth++;
    else if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
  }
  return 0;
}

/* Where "{% endraw %}" (with '-' or '+' markers) starts at or after
 * `from`; *out_end is past it, *out_lminus / *out_rminus say whether it
 * strips on either side. 0 when there is none. */
static size_t find_endraw(const parser *p, size_t from, size_t *out_end, int *out_lminus,
                          int *out_rminus) {
  for (size_t i = from; i + 1 < p->n; i++) {
    if (p->src[i] != '{' || p->src[i + 1] != '%') continue;
    size_t k = i + 2;
    int lminus = k < p->n && p->src[k] == '-';
    if (k < p->n && (p->src[k] == '-' || p->src[k] == '+')) k++;
    while (k < p->n && is_ws(p->src[k])) k++;
    if (k + 6 > p->n || memcmp(p->src + k, "endraw", 6)) continue;
    k += 6;
    while (k < p->n && is_ws(p->src[k])) k++;
    int rminus = k < p->n && p->src[k] == '-';
    if (k < p->n && (p->src[k] == '-' || p->src[k] == '+')) k++;
    if (k + 1 < p->n && p->src[k] == '%' && p->src[k + 1] == '}') {
      *out_end = k + 2;
      *out_lminus = lminus;
      *out_rminus = rminus;
      return i;
    }
  }
  return 0;
}

/* Cuts the source into pieces with Jinja's whitespace rules. */
static ssm_status cut(parser *p) {
  size_t pos = 0;
  int strip_next = 0;
  while (pos <= p->n) {
    const char *open = NULL;
    for (size_t i = pos; i + 1 < p->n; i++)
      if (p->src[i] == '{' && (p->src[i + 1] == '{' || p->src[i + 1] == '%' || p->src[i + 1] == '#')) {
        open = p->src + i;
        break;
      }
    size_t data_end = open ? (size_t)(open - p->src) : p->n;
    size_t ds = pos, de = data_end;
    if (strip_next)
      while (ds < de && is_ws(p->src[ds])) ds++;
    if (!open) {
      if (de > ds && p->src[de - 1] == '\n') de--; /* keep_trailing_newline off */
      SSM_TRY(add_piece(p, P_TEXT, p->src + ds, de - ds));
      break;
    }
    char kind = open[1], mark = data_end + 2 < p->n ? open[2] : 0;
    if (mark == '-') {
      while (de > ds && is_ws(p->src[de - 1])) de--;
    } else if (mark != '+' && kind != '{') { /* lstrip_blocks: only blanks before it on its line */
      size_t l = de;
      while (l > ds && p->src[l - 1] != '\n') l--;
      int line_starting = l > ds || ds == 0 || p->src[ds - 1] == '\n';
      int blank = l < de;
      for (size_t k = l; k < de && blank; k++) blank = p->src[k] == ' ' || p->src[k] == '\t';
      if (line_starting && blank) de = l;
    }
    SSM_TRY(add_piece(p, P_TEXT, p->src + ds, de - ds));
    size_t in = data_end + 2 + (mark == '-' || mark == '+');
    int line, col;
    pos_of(p, open, &line, &col);
    size_t end;
    if (kind == '#') {
      const char *e = strstr(p->src + in, "#}");
      if (!e) return error_at(p, line, col, "comment is not closed");
      end = (size_t)(e - p->src);
    } else {
      end = tag_end(p, in, kind == '{' ? '}' : '%');
      if (!end) return error_at(p, line, col, "'%s' is not closed", kind == '{' ? "{{" : "{%");
    }
    int rstrip = end > in && p->src[end - 1] == '-';
    size_t inner_end = end - (size_t)rstrip, after = end + 2;
    const char *inside = p->src + in;
    size_t ilen = inner_end - in;
    while (ilen && is_ws(*inside)) inside++, ilen--;
    while (ilen && is_ws(inside[ilen - 1])) ilen--;
    if (kind == '%' && ilen == 3 && !memcmp(inside, "raw", 3)) {
      size_t raw_end;
      int lminus, rminus;
      size_t r = find_endraw(p, after, &raw_end, &lminus, &rminus);
      if (!r) return error_at(p, line, col, "{%% raw %%} without {%% endraw %%}");
      size_t rs = after, re = r;
      if (rstrip)
        while (rs < re && is_ws(p->src[rs])) rs++;
      else if (rs < re && p->src[rs] == '\n')
        rs++;
      if (lminus)
        while (re > rs && is_ws(p->src[re - 1])) re--;
      SSM_TRY(add_piece(p, P_TEXT, p->src + rs, re - rs));
      after = raw_end;
      rstrip = rminus;
    } else if (kind != '#') {
      SSM_TRY(add_piece(p, kind == '{' ? P_VAR : P_BLOCK, p->src + in, inner_end - in));
    }
    strip_next = rstrip;
    if (!rstrip && kind != '{' && after < p->n && p->src[after] == '\n') after++; /* trim_blocks */
    pos = after;
  }
  return NULL;
}

/* ---- tokens of one tag --------------------------------------------------------- */

static const char *const ops2[] = {"**", "//", "==", "!=", "<=", ">=", NULL};

static ssm_status tokenize(parser *p, const piece *pc) {
  p->ntoks = p->tp = 0;
  p->toks = ssm_arena_alloc(p->arena, sizeof *p->toks * (pc->n + 1));
  if (!p->toks) return oom(p);
  const char *s = pc->s, *e = pc->s + pc->n;
  while (1) {
    while (s < e && is_ws(*s)) s++;
    struct tok t = {'e', s, 0, 0, 0};
    pos_of(p, s, &t.line, &t.col);
    if (s >= e) {
      p->toks[p->ntoks++] = t;
      return NULL;
    }
    const char *b = s;
    if (isalpha((unsigned char)*s) || *s == '_') {
      while (s < e && (isalnum((unsigned char)*s) || *s == '_')) s++;
      t.kind = 'n';
    } else if (isdigit((unsigned char)*s)) {
      while (s < e && (isdigit((unsigned char)*s) || *s == '_')) s++;
      t.kind = 'i';
      if (s + 1 < e && *s == '.' && isdigit((unsigned char)s[1])) {
        for (s++; s < e && isdigit((unsigned char)*s); s++) {}
        t.kind = 'f';
      }
      if (s < e && (*s == 'e' || *s == 'E')) {
        const char *q = s + 1;
        if (q < e && (*q == '+' || *q == '-')) q++;
        if (q < e && isdigit((unsigned char)*q)) {
          for (s = q; s < e && isdigit((unsigned char)*s); s++) {}
          t.kind = 'f';
        }
      }
    } else if (*s == '"' || *s == '\'') {
      char q = *s++;
      while (s < e && *s != q) s += *s == '\\' ? 2 : 1;
      if (s >= e) return error_at(p, t.line, t.col, "string is not closed");
      s++;
      t.kind = 's';
    } else {
      t.kind = 'o';
      s++;
      for (int k = 0; ops2[k]; k++)
        if (s < e && b[0] == ops2[k][0] && *s == ops2[k][1]) s++;
      if (!strchr("+-*/%~=!<>()[]{},.:|", *b))
        return error_at(p, t.line, t.col, "unexpected character '%c'", *b);
      if (*b == '!' && s - b == 1) return error_at(p, t.line, t.col, "unexpected character '!'");
    }
    t.s = b;
    t.n = (size_t)(s - b);
    p->toks[p->ntoks++] = t;
  }
}

static struct tok *peek(parser *p) { return &p->toks[p->tp]; }
static struct tok *next_tok(parser *p) {
  struct tok *t = &p->toks[p->tp];
  if (t->kind != 'e') p->tp++;
  return t;
}
static int is_tok(const struct tok *t, char kind, const char *s) {
  return t->kind == kind && (!s || (t->n == strlen(s) && !memcmp(t->s, s, t->n)));
}
static int accept(parser *p, char kind, const char *s) {
  if (!is_tok(peek(p), kind, s)) return 0;
  next_tok(p);
  return 1;
}

static ssm_status expect(parser *p, char kind, const char *s) {
  struct tok *t = peek(p);
  if (accept(p, kind, s)) return NULL;
  if (t->kind == 'e') return error_at(p, t->line, t->col, "expected '%s' before the end of the tag", s);
  return error_at(p, t->line, t->col, "expected '%s', got '%.*s'", s, (int)t->n, t->s);
}

/* A new node in *out. */
static ssm_status mk(parser *p, jnode_kind k, const struct tok *t, jnode **out) {
  jnode *n = *out = ssm_arena_alloc(p->arena, sizeof *n);
  if (!n) return oom(p);
  n->kind = k;
  n->line = t->line;
  n->col = t->col;
  return NULL;
}

/* The token's text ("" once the arena failed: ssm_jinja_parse then reports
 * NOMEM, whatever the parse made of it). */
static const char *tok_str(parser *p, const struct tok *t) {
  return ssm_arena_strndup(p->arena, t->s, t->n);
}

/* Lists of nodes and names grow in the arena (push_node, push_name) as
 * they are parsed, so an error on the way leaves nothing to free. */
typedef SSM_VEC(jnode *) node_vec;
typedef SSM_VEC(const char *) name_vec;

/* Room for one more of `elem` bytes in *items (n used of *cap). */
static ssm_status room(parser *p, void *items, size_t n, size_t *cap, size_t elem) {
  if (n < *cap) return NULL;
  size_t c = *cap ? *cap * 2 : 4;
  void *old, *q = ssm_arena_alloc(p->arena, c * elem);
  if (!q) return oom(p);
  memcpy(&old, items, sizeof old);
  if (n) memcpy(q, old, n * elem);
  memcpy(items, &q, sizeof q);
  *cap = c;
  return NULL;
}

static ssm_status push_node(parser *p, node_vec *v, jnode *x) {
  SSM_TRY(room(p, &v->items, v->n, &v->cap, sizeof *v->items));
  v->items[v->n++] = x;
  return NULL;
}

static ssm_status push_name(parser *p, name_vec *v, const char *x) {
  SSM_TRY(room(p, &v->items, v->n, &v->cap, sizeof *v->items));
  v->items[v->n++] = x;
  return NULL;
}

static jnodes to_nodes(node_vec *v) { return (jnodes){v->items, (int)v->n}; }

/* n->str and n->len: a copy of b's text in the arena; `b` is freed. */
static ssm_status take_text(parser *p, ssm_sb *b, jnode *n) {
  ssm_status s = ssm_sb_status(b, p->what);
  char *d = s ? NULL : ssm_arena_alloc(p->arena, b->n + 1);
  if (!s && !d) s = oom(p);
  if (!s) {
    memcpy(d, ssm_sb_str(b), b->n);
    n->str = d;
    n->len = b->n;
  }
  ssm_sb_free(b);
  return s;
}

/* A string literal's value: Python's escapes (\n \t \r \\ \' \" \xNN \uNNNN
 * \UNNNNNNNN, and others kept as written). */
static ssm_status unescape(parser *p, const struct tok *t, jnode *n) {
  ssm_sb b = {0};
  ssm_sb_append(&b, "", 0);
  for (size_t i = 1; i + 1 < t->n; i++) {
    char c = t->s[i];
    if (c != '\\') {
      ssm_sb_append(&b, &c, 1);
      continue;
    }
    char e = t->s[++i];
    const char *simple = strchr("ntr\\'\"abfv0", e);
    if (simple && e) {
      static const char to[] = "\n\t\r\\'\"\a\b\f\v";
      char o = e == '0' ? '\0' : to[simple - "ntr\\'\"abfv0"];
      ssm_sb_append(&b, &o, 1);
      continue;
    }
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (!digits || i + (size_t)digits >= t->n - 1) {
      char two[2] = {'\\', e};
      ssm_sb_append(&b, two, 2);
      continue;
    }
    uint32_t cp = 0;
    for (int k = 1; k <= digits; k++) {
      char h = t->s[i + (size_t)k];
      if (!isxdigit((unsigned char)h)) {
        ssm_sb_free(&b);
        return error_at(p, t->line, t->col, "bad \\%c escape in a string", e);
      }
      cp = cp * 16 + (uint32_t)(isdigit((unsigned char)h) ? h - '0' : (tolower(h) - 'a' + 10));
    }
    i += (size_t)digits;
    char u[4];
    int m = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (m == 1) u[0] = (char)cp;
    else if (m == 2) u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 63));
    else if (m == 3) u[0] = (char)(0xe0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 63)), u[2] = (char)(0x80 | (cp & 63));
    else u[0] = (char)(0xf0 | cp >> 18), u[1] = (char)(0x80 | ((cp >> 12) & 63)), u[2] = (char)(0x80 | ((cp >> 6) & 63)), u[3] = (char)(0x80 | (cp & 63));
    ssm_sb_append(&b, u, (size_t)m);
  }
  return take_text(p, &b, n);
}

/* ---- expressions ------------------------------------------------------------------ */

static ssm_status parse_expr(parser *p, jnode **out);
static ssm_status parse_or(parser *p, jnode **out);
static ssm_status parse_unary(parser *p, int with_filter, jnode **out);

static int is_name(const struct tok *t, const char *s) { return is_tok(t, 'n', s); }

/* Call arguments after '(': positional, name=value, *list. */
static ssm_status parse_args(parser *p, jnode *call) {
  node_vec pos = {0}, kw = {0};
  name_vec names = {0};
  call->i = -1;
  ssm_status s = NULL;
  while (!s && !accept(p, 'o', ")")) {
    if (pos.n + kw.n && !(s = expect(p, 'o', ",")) && accept(p, 'o', ")")) break;
    if (s) break;
    jnode *v = NULL;
    struct tok *t = peek(p);
    if (accept(p, 'o', "*")) {
      if (call->i >= 0 || kw.n) {
        s = error_at(p, t->line, t->col, "only one *args, before keyword arguments, is supported");
        break;
      }
      call->i = (int64_t)pos.n;
      if (!(s = parse_expr(p, &v))) s = push_node(p, &pos, v);
    } else if (t->kind == 'n' && is_tok(&p->toks[p->tp + 1], 'o', "=")) {
      next_tok(p);
      next_tok(p);
      if (!(s = push_name(p, &names, tok_str(p, t))) && !(s = parse_expr(p, &v))) s = push_node(p, &kw, v);
    } else if (is_tok(t, 'o', "**")) {
      s = error_at(p, t->line, t->col, "**kwargs in a call is not supported");
    } else if (kw.n) {
      s = error_at(p, t->line, t->col, "a positional argument after keyword arguments");
    } else if (!(s = parse_expr(p, &v))) {
      s = push_node(p, &pos, v);
    }
    if (!s && peek(p)->kind == 'e') s = expect(p, 'o', ")");
  }
  call->list = to_nodes(&pos);
  call->list2 = to_nodes(&kw);
  call->nnames = (int)names.n;
  call->names = names.items;
  return s;
}

static ssm_status parse_primary(parser *p, jnode **out) {
  struct tok *t = next_tok(p);
  jnode *n;
  if (t->kind == 'n') {
    static const char *const consts[][2] = {{"true", "b1"}, {"True", "b1"}, {"false", "b0"},
                                            {"False", "b0"}, {"none", "n"}, {"None", "n"}};
    for (size_t k = 0; k < sizeof consts / sizeof consts[0]; k++)
      if (is_name(t, consts[k][0])) {
        SSM_TRY(mk(p, consts[k][1][0] == 'b' ? J_CONST_BOOL : J_CONST_NONE, t, &n));
        n->i = consts[k][1][1] == '1';
        *out = n;
        return NULL;
      }
    SSM_TRY(mk(p, J_NAME, t, &n));
    n->str = tok_str(p, t);
  } else if (t->kind == 'i' || t->kind == 'f') {
    char buf[64];
    size_t k = 0;
    for (size_t i = 0; i < t->n && k + 1 < sizeof buf; i++)
      if (t->s[i] != '_') buf[k++] = t->s[i];
    buf[k] = 0;
    SSM_TRY(mk(p, t->kind == 'i' ? J_CONST_INT : J_CONST_FLOAT, t, &n));
    errno = 0;
    if (t->kind == 'i') n->i = strtoll(buf, NULL, 10);
    else n->f = strtod(buf, NULL);
    if (t->kind == 'i' && (errno == ERANGE || k + 1 >= sizeof buf))
      return error_at(p, t->line, t->col, "integer %.*s does not fit 64 bits", (int)t->n, t->s);
  } else if (t->kind == 's') {
    SSM_TRY(mk(p, J_CONST_STR, t, &n));
    SSM_TRY(unescape(p, t, n));
    ssm_sb b = {0}; /* adjacent literals join */
    ssm_sb_append(&b, n->str, n->len);
    ssm_status s = NULL;
    while (!s && peek(p)->kind == 's') {
      jnode more;
      if (!(s = unescape(p, next_tok(p), &more))) ssm_sb_append(&b, more.str, more.len);
    }
    if (s) {
      ssm_sb_free(&b);
      return s;
    }
    SSM_TRY(take_text(p, &b, n));
  } else if (is_tok(t, 'o', "(")) {
    jnode *e;
    if (accept(p, 'o', ")")) {
      SSM_TRY(mk(p, J_TUPLE, t, &n));
    } else {
      SSM_TRY(parse_expr(p, &e));
      if (!is_tok(peek(p), 'o', ",")) {
        SSM_TRY(expect(p, 'o', ")"));
        *out = e;
        return NULL;
      }
      node_vec items = {0};
      SSM_TRY(push_node(p, &items, e));
      while (accept(p, 'o', ",") && !is_tok(peek(p), 'o', ")")) {
        SSM_TRY(parse_expr(p, &e));
        SSM_TRY(push_node(p, &items, e));
      }
      SSM_TRY(mk(p, J_TUPLE, t, &n));
      n->list = to_nodes(&items);
      SSM_TRY(expect(p, 'o', ")"));
    }
  } else if (is_tok(t, 'o', "[")) {
    SSM_TRY(mk(p, J_LIST, t, &n));
    node_vec items = {0};
    while (!accept(p, 'o', "]")) {
      if (items.n) SSM_TRY(expect(p, 'o', ","));
      if (accept(p, 'o', "]")) break;
      jnode *e;
      SSM_TRY(parse_expr(p, &e));
      SSM_TRY(push_node(p, &items, e));
      if (peek(p)->kind == 'e') SSM_TRY(expect(p, 'o', "]"));
    }
    n->list = to_nodes(&items);
  } else if (is_tok(t, 'o', "{")) {
    SSM_TRY(mk(p, J_DICT, t, &n));
    node_vec keys = {0}, vals = {0};
    while (!accept(p, 'o', "}")) {
      if (keys.n) SSM_TRY(expect(p, 'o', ","));
      if (accept(p, 'o', "}")) break;
      jnode *k, *v;
      SSM_TRY(parse_expr(p, &k));
      SSM_TRY(expect(p, 'o', ":"));
      SSM_TRY(parse_expr(p, &v));
      SSM_TRY(push_node(p, &keys, k));
      SSM_TRY(push_node(p, &vals, v));
      if (peek(p)->kind == 'e') SSM_TRY(expect(p, 'o', "}"));
    }
    n->list = to_nodes(&keys);
    n->list2 = to_nodes(&vals);
  } else if (t->kind == 'e') {
    return error_at(p, t->line, t->col, "expected an expression before the end of the tag");
  } else {
    return error_at(p, t->line, t->col, "unexpected '%.*s'", (int)t->n, t->s);
  }
  *out = n;
  return NULL;
}

static ssm_status parse_postfix(parser *p, jnode *n, jnode **out) {
  while (1) {
    struct tok *t = peek(p);
    if (accept(p, 'o', ".")) {
      struct tok *name = next_tok(p);
      if (name->kind != 'n' && name->kind != 'i')
        return error_at(p, name->line, name->col, "expected an attribute name after '.'");
      jnode *a;
      SSM_TRY(mk(p, J_ATTR, t, &a));
      a->a = n;
      a->str = tok_str(p, name);
      n = a;
    } else if (accept(p, 'o', "[")) {
      jnode *parts[3] = {0};
      int colons = 0;
      for (int k = 0; k < 3; k++) {
        if (!is_tok(peek(p), 'o', ":") && !is_tok(peek(p), 'o', "]")) SSM_TRY(parse_expr(p, &parts[k]));
        if (k < 2 && accept(p, 'o', ":")) colons++;
        else break;
      }
      SSM_TRY(expect(p, 'o', "]"));
      jnode *s;
      SSM_TRY(mk(p, colons ? J_SLICE : J_ITEM, t, &s));
      s->a = n;
      s->b = parts[0];
      if (!colons && !parts[0]) return error_at(p, t->line, t->col, "empty subscript");
      if (colons) { /* start, stop, step (each may be NULL) */
        s->c = parts[1];
        s->list2.items = ssm_arena_alloc(p->arena, sizeof(jnode *));
        if (!s->list2.items) return oom(p);
        s->list2.items[0] = parts[2];
        s->list2.n = 1;
      }
      n = s;
    } else if (accept(p, 'o', "(")) {
      jnode *c;
      SSM_TRY(mk(p, J_CALL, t, &c));
      c->a = n;
      SSM_TRY(parse_args(p, c));
      if (n->kind == J_ATTR && !ssm_jinja_has_method(n->str))
        return error_at(p, n->line, n->col, "unsupported method '%s'", n->str);
      if (n->kind == J_NAME) SSM_TRY(ssm_vec_push(&p->calls, c));
      n = c;
    } else {
      *out = n;
      return NULL;
    }
  }
}

/* `is [not] name [(args) | arg]` */
static ssm_status parse_test(parser *p, jnode *n, jnode **out) {
  struct tok *is = next_tok(p);
  jnode *t;
  SSM_TRY(mk(p, J_TEST, is, &t));
  t->a = n;
  t->i = -1;
  t->flag = accept(p, 'n', "not");
  struct tok *name = next_tok(p);
  if (name->kind != 'n') return error_at(p, name->line, name->col, "expected a test name after 'is'");
  t->str = tok_str(p, name);
  if (!ssm_jinja_has_test(t->str)) return error_at(p, name->line, name->col, "unsupported test '%s'", t->str);
  struct tok *nx = peek(p);
  if (accept(p, 'o', "(")) {
    SSM_TRY(parse_args(p, t));
    if (t->i >= 0 || t->nnames) return error_at(p, nx->line, nx->col, "tests take positional arguments only");
  } else if ((nx->kind == 'n' || nx->kind == 'i' || nx->kind == 'f' || nx->kind == 's' ||
              is_tok(nx, 'o', "[") || is_tok(nx, 'o', "{")) &&
             !is_name(nx, "else") && !is_name(nx, "or") && !is_name(nx, "and") &&
             !is_name(nx, "if") && !is_name(nx, "in") && !is_name(nx, "not") && !is_name(nx, "is")) {
    jnode *arg;
    SSM_TRY(parse_primary(p, &arg));
    SSM_TRY(parse_postfix(p, arg, &arg));
    t->list.items = ssm_arena_alloc(p->arena, sizeof(jnode *));
    if (!t->list.items) return oom(p);
    t->list.items[0] = arg;
    t->list.n = 1;
  }
  *out = t;
  return NULL;
}

static ssm_status parse_filter_expr(parser *p, jnode *n, jnode **out) {
  while (1) {
    struct tok *t = peek(p);
    if (accept(p, 'o', "|")) {
      struct tok *name = next_tok(p);
      if (name->kind != 'n') return error_at(p, name->line, name->col, "expected a filter name after '|'");
      jnode *f;
      SSM_TRY(mk(p, J_FILTER, name, &f));
      f->a = n;
      f->str = tok_str(p, name);
      if (!ssm_jinja_has_filter(f->str))
        return error_at(p, name->line, name->col, "unsupported filter '%s'", f->str);
      if (accept(p, 'o', "(")) SSM_TRY(parse_args(p, f));
      else f->i = -1;
      if (f->i >= 0) return error_at(p, t->line, t->col, "*args in a filter is not supported");
      n = f;
    } else if (is_name(t, "is")) {
      SSM_TRY(parse_test(p, n, &n));
    } else if (accept(p, 'o', "(")) {
      jnode *c;
      SSM_TRY(mk(p, J_CALL, t, &c));
      c->a = n;
      SSM_TRY(parse_args(p, c));
      n = c;
    } else {
      *out = n;
      return NULL;
    }
  }
}

/* One more level of nesting (p->nest-- ends it), or an error past MAX_NEST. */
static ssm_status nest(parser *p, const struct tok *t) {
  if (++p->nest > MAX_NEST)
    return error_at(p, t->line, t->col, "expressions and blocks nested deeper than %d", MAX_NEST);
  return NULL;
}

static ssm_status parse_unary_(parser *p, int with_filter, jnode **out);

static ssm_status parse_unary(parser *p, int with_filter, jnode **out) {
  SSM_TRY(nest(p, peek(p)));
  SSM_TRY(parse_unary_(p, with_filter, out));
  p->nest--;
  return NULL;
}

static ssm_status parse_unary_(parser *p, int with_filter, jnode **out) {
  struct tok *t = peek(p);
  jnode *n;
  if (accept(p, 'o', "-") || accept(p, 'o', "+")) {
    SSM_TRY(mk(p, t->s[0] == '-' ? J_NEG : J_POS, t, &n));
    SSM_TRY(parse_unary(p, 0, &n->a));
  } else {
    SSM_TRY(parse_primary(p, &n));
  }
  SSM_TRY(parse_postfix(p, n, &n));
  if (with_filter) SSM_TRY(parse_filter_expr(p, n, &n));
  *out = n;
  return NULL;
}

/* *out = `a op b`. */
static ssm_status binop(parser *p, const struct tok *t, const char *op, jnode *a, jnode *b, jnode **out) {
  jnode *n;
  SSM_TRY(mk(p, J_BINOP, t, &n));
  n->str = op;
  n->a = a;
  n->b = b;
  *out = n;
  return NULL;
}

static ssm_status parse_pow(parser *p, jnode **out) {
  SSM_TRY(parse_unary(p, 1, out));
  struct tok *t = peek(p);
  while (accept(p, 'o', "**")) {
    jnode *r;
    SSM_TRY(parse_unary(p, 1, &r));
    SSM_TRY(binop(p, t, "**", *out, r, out));
    t = peek(p);
  }
  return NULL;
}

static ssm_status parse_math2(parser *p, jnode **out) {
  SSM_TRY(parse_pow(p, out));
  while (1) {
    struct tok *t = peek(p);
    const char *op = is_tok(t, 'o', "*") ? "*" : is_tok(t, 'o', "/") ? "/" : is_tok(t, 'o', "//") ? "//"
                     : is_tok(t, 'o', "%") ? "%" : NULL;
    if (!op) return NULL;
    next_tok(p);
    jnode *r;
    SSM_TRY(parse_pow(p, &r));
    SSM_TRY(binop(p, t, op, *out, r, out));
  }
}

static ssm_status parse_concat(parser *p, jnode **out) {
  SSM_TRY(parse_math2(p, out));
  while (1) {
    struct tok *t = peek(p);
    if (!accept(p, 'o', "~")) return NULL;
    jnode *r;
    SSM_TRY(parse_math2(p, &r));
    SSM_TRY(binop(p, t, "~", *out, r, out));
  }
}

static ssm_status parse_math1(parser *p, jnode **out) {
  SSM_TRY(parse_concat(p, out));
  while (1) {
    struct tok *t = peek(p);
    const char *op = is_tok(t, 'o', "+") ? "+" : is_tok(t, 'o', "-") ? "-" : NULL;
    if (!op) return NULL;
    next_tok(p);
    jnode *r;
    SSM_TRY(parse_concat(p, &r));
    SSM_TRY(binop(p, t, op, *out, r, out));
  }
}

static ssm_status parse_compare(parser *p, jnode **out) {
  SSM_TRY(parse_math1(p, out));
  while (1) {
    struct tok *t = peek(p);
    const char *op = NULL;
    static const char *const cmps[] = {"==", "!=", "<", "<=", ">", ">=", NULL};
    for (int k = 0; cmps[k]; k++)
      if (is_tok(t, 'o', cmps[k])) op = cmps[k];
    if (op) next_tok(p);
    else if (accept(p, 'n', "in")) op = "in";
    else if (is_name(t, "not") && is_name(&p->toks[p->tp + 1], "in")) {
      next_tok(p);
      next_tok(p);
      op = "notin";
    } else {
      return NULL;
    }
    jnode *r, *n;
    SSM_TRY(mk(p, J_CMP, t, &n));
    SSM_TRY(parse_math1(p, &r));
    n->str = op;
    n->a = *out;
    n->b = r;
    *out = n;
  }
}

static ssm_status parse_not(parser *p, jnode **out) {
  struct tok *t = peek(p);
  if (accept(p, 'n', "not")) {
    jnode *n;
    SSM_TRY(nest(p, t));
    SSM_TRY(mk(p, J_NOT, t, &n));
    SSM_TRY(parse_not(p, &n->a));
    p->nest--;
    *out = n;
    return NULL;
  }
  return parse_compare(p, out);
}

static ssm_status parse_and(parser *p, jnode **out) {
  SSM_TRY(parse_not(p, out));
  struct tok *t = peek(p);
  while (accept(p, 'n', "and")) {
    jnode *n;
    SSM_TRY(mk(p, J_AND, t, &n));
    n->a = *out;
    SSM_TRY(parse_not(p, &n->b));
    *out = n;
    t = peek(p);
  }
  return NULL;
}

static ssm_status parse_or(parser *p, jnode **out) {
  SSM_TRY(parse_and(p, out));
  struct tok *t = peek(p);
  while (accept(p, 'n', "or")) {
    jnode *n;
    SSM_TRY(mk(p, J_OR, t, &n));
    n->a = *out;
    SSM_TRY(parse_and(p, &n->b));
    *out = n;
    t = peek(p);
  }
  return NULL;
}

/* or-expression [if or-expression [else expression]] */
static ssm_status parse_expr(parser *p, jnode **out) {
  SSM_TRY(parse_or(p, out));
  struct tok *t = peek(p);
  while (accept(p, 'n', "if")) {
    jnode *n;
    SSM_TRY(mk(p, J_COND, t, &n));
    n->a = *out;
    SSM_TRY(parse_or(p, &n->b));
    SSM_TRY(nest(p, t));
    if (accept(p, 'n', "else")) SSM_TRY(parse_expr(p, &n->c));
    p->nest--;
    *out = n;
    t = peek(p);
  }
  return NULL;
}

/* An expression list: `a, b` is a tuple. */
static ssm_status parse_tuple(parser *p, jnode **out) {
  struct tok *t = peek(p);
  SSM_TRY(parse_expr(p, out));
  if (!is_tok(peek(p), 'o', ",")) return NULL;
  node_vec items = {0};
  SSM_TRY(push_node(p, &items, *out));
  while (accept(p, 'o', ",") && peek(p)->kind != 'e') {
    jnode *e;
    SSM_TRY(parse_expr(p, &e));
    SSM_TRY(push_node(p, &items, e));
  }
  jnode *n;
  SSM_TRY(mk(p, J_TUPLE, t, &n));
  n->list = to_nodes(&items);
  *out = n;
  return NULL;
}

static ssm_status expect_end(parser *p) {
  struct tok *t = peek(p);
  if (t->kind == 'e') return NULL;
  return error_at(p, t->line, t->col, "unexpected '%.*s' (expected the end of the tag)", (int)t->n, t->s);
}

/* ---- statements ------------------------------------------------------------------- */

static ssm_status parse_body(parser *p, const piece *opened, const char *const *stops, jnode **out,
                             const char **out_stop);

static ssm_status parse_targets(parser *p, name_vec *names) {
  do {
    struct tok *t = next_tok(p);
    if (t->kind != 'n') return error_at(p, t->line, t->col, "expected a variable name");
    SSM_TRY(push_name(p, names, tok_str(p, t)));
  } while (accept(p, 'o', ","));
  return NULL;
}

static ssm_status note_assigned(parser *p, const char *name) { return ssm_vec_push(&p->assigned, name); }

static ssm_status parse_statement(parser *p, const piece *pc, jnode **out) {
  struct tok *kw = next_tok(p);
  static const char *const unsupported[] = {"call", "filter", "include", "extends", "block",
                                            "import", "from", "with", "autoescape", "do", NULL};
  for (int k = 0; unsupported[k]; k++)
    if (is_name(kw, unsupported[k]))
      return error_at(p, kw->line, kw->col, "unsupported Jinja statement '%s'", unsupported[k]);
  jnode *n;
  if (is_name(kw, "if")) {
    SSM_TRY(mk(p, J_IF, kw, &n));
    SSM_TRY(parse_expr(p, &n->a));
    SSM_TRY(expect_end(p));
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    const char *stop;
    SSM_TRY(parse_body(p, pc, stops, &n->b, &stop));
    jnode *cur = n;
    while (!strcmp(stop, "elif")) { /* elif: a nested if in the else branch */
      jnode *e;
      SSM_TRY(mk(p, J_IF, peek(p), &e));
      SSM_TRY(parse_expr(p, &e->a));
      SSM_TRY(expect_end(p));
      SSM_TRY(parse_body(p, pc, stops, &e->b, &stop));
      cur->c = e;
      cur = e;
    }
    if (!strcmp(stop, "else")) {
      SSM_TRY(expect_end(p));
      static const char *const end[] = {"endif", NULL};
      SSM_TRY(parse_body(p, pc, end, &cur->c, &stop));
    }
  } else if (is_name(kw, "for")) {
    SSM_TRY(mk(p, J_FOR, kw, &n));
    name_vec names = {0};
    SSM_TRY(parse_targets(p, &names));
    n->nnames = (int)names.n;
    n->names = names.items;
    SSM_TRY(expect(p, 'n', "in"));
    SSM_TRY(parse_or(p, &n->a)); /* not parse_expr: `if` filters */
    if (accept(p, 'n', "if")) SSM_TRY(parse_expr(p, &n->b));
    if (is_name(peek(p), "recursive"))
      return error_at(p, peek(p)->line, peek(p)->col, "unsupported 'for ... recursive'");
    SSM_TRY(expect_end(p));
    static const char *const stops[] = {"else", "endfor", NULL};
    const char *stop;
    jnode *body;
    SSM_TRY(parse_body(p, pc, stops, &body, &stop));
    n->list2 = body->list;
    if (!strcmp(stop, "else")) {
      SSM_TRY(expect_end(p));
      static const char *const end[] = {"endfor", NULL};
      SSM_TRY(parse_body(p, pc, end, &n->c, &stop));
    }
  } else if (is_name(kw, "set")) {
    struct tok *t1 = peek(p);
    if (t1->kind == 'n' && is_tok(&p->toks[p->tp + 1], 'o', ".")) { /* ns.attr = */
      SSM_TRY(mk(p, J_SET, kw, &n));
      next_tok(p);
      next_tok(p);
      struct tok *attr = next_tok(p);
      if (attr->kind != 'n') return error_at(p, attr->line, attr->col, "expected an attribute name");
      n->names = ssm_arena_alloc(p->arena, sizeof(char *) * 2);
      if (!n->names) return oom(p);
      n->names[0] = tok_str(p, t1);
      n->str = tok_str(p, attr);
      n->nnames = 1;
    } else {
      name_vec names = {0};
      SSM_TRY(parse_targets(p, &names));
      for (size_t k = 0; k < names.n; k++) SSM_TRY(note_assigned(p, names.items[k]));
      if (peek(p)->kind == 'e' && names.n == 1) { /* {% set x %}...{% endset %} */
        SSM_TRY(mk(p, J_SETBLOCK, kw, &n));
        n->nnames = 1;
        n->names = names.items;
        static const char *const end[] = {"endset", NULL};
        const char *stop;
        SSM_TRY(parse_body(p, pc, end, &n->a, &stop));
        *out = n;
        return NULL;
      }
      SSM_TRY(mk(p, J_SET, kw, &n));
      n->nnames = (int)names.n;
      n->names = names.items;
    }
    SSM_TRY(expect(p, 'o', "="));
    SSM_TRY(parse_tuple(p, &n->a));
    SSM_TRY(expect_end(p));
  } else if (is_name(kw, "macro")) {
    SSM_TRY(mk(p, J_MACRO, kw, &n));
    struct tok *name = next_tok(p);
    if (name->kind != 'n') return error_at(p, name->line, name->col, "expected a macro name");
    n->str = tok_str(p, name);
    SSM_TRY(ssm_vec_push(&p->macros, n->str));
    SSM_TRY(expect(p, 'o', "("));
    name_vec params = {0};
    node_vec defaults = {0};
    while (!accept(p, 'o', ")")) {
      if (params.n) SSM_TRY(expect(p, 'o', ","));
      struct tok *t = next_tok(p);
      if (t->kind != 'n') return error_at(p, t->line, t->col, "expected a parameter name");
      SSM_TRY(push_name(p, &params, tok_str(p, t)));
      jnode *d = NULL;
      if (accept(p, 'o', "=")) SSM_TRY(parse_expr(p, &d));
      SSM_TRY(push_node(p, &defaults, d));
      if (peek(p)->kind == 'e') SSM_TRY(expect(p, 'o', ")"));
    }
    SSM_TRY(expect_end(p));
    n->nnames = (int)params.n;
    n->names = params.items;
    n->list2 = to_nodes(&defaults);
    static const char *const end[] = {"endmacro", NULL};
    const char *stop;
    SSM_TRY(parse_body(p, pc, end, &n->a, &stop));
  } else if (is_name(kw, "generation")) { /* transformers' AssistantTracker: no effect here */
    SSM_TRY(expect_end(p));
    static const char *const end[] = {"endgeneration", NULL};
    const char *stop;
    SSM_TRY(parse_body(p, pc, end, &n, &stop));
  } else if (is_name(kw, "break") || is_name(kw, "continue")) {
    SSM_TRY(mk(p, is_name(kw, "break") ? J_BREAK : J_CONTINUE, kw, &n));
    SSM_TRY(expect_end(p));
  } else if (kw->kind == 'e') {
    return error_at(p, pc->line, pc->col, "empty {%% %%} tag");
  } else {
    return error_at(p, kw->line, kw->col, "unsupported Jinja statement '%.*s'", (int)kw->n, kw->s);
  }
  *out = n;
  return NULL;
}

/* Statements up to one of `stops` (whose name goes to *out_stop, its tag's
 * tokens left to read), or to the end of the template when stops is NULL;
 * `opened` is the tag of the statement whose body it is (NULL: none). */
static ssm_status parse_body(parser *p, const piece *opened, const char *const *stops, jnode **out,
                             const char **out_stop) {
  node_vec items = {0};
  jnode *body;
  SSM_TRY(nest(p, &(struct tok){.line = opened ? opened->line : 1, .col = opened ? opened->col : 1}));
  SSM_TRY(mk(p, J_BODY, &(struct tok){0}, &body));
  ssm_status s = NULL;
  while (!s) {
    if (p->at >= p->pieces.n) {
      const char *end = NULL; /* the stop that ends the block: "endif" of an if */
      for (int k = 0; stops && stops[k]; k++)
        if (!strncmp(stops[k], "end", 3)) end = stops[k];
      if (end)
        s = error_at(p, opened ? opened->line : 1, opened ? opened->col : 1,
                     "{%% %s %%} is not closed (expected {%% %s %%})", end + 3, end);
      break;
    }
    const piece *pc = &p->pieces.items[p->at++];
    jnode *n = NULL;
    if (pc->kind == P_TEXT) {
      if ((s = mk(p, J_TEXT, &(struct tok){.line = pc->line, .col = pc->col}, &n))) break;
      n->str = pc->s;
      n->len = pc->n;
    } else {
      if ((s = tokenize(p, pc))) break;
      if (pc->kind == P_VAR) {
        if (!(s = mk(p, J_OUT, peek(p), &n)) && !(s = parse_tuple(p, &n->a))) s = expect_end(p);
      } else {
        struct tok *kw = peek(p);
        int stopped = 0;
        for (int k = 0; stops && stops[k] && !stopped; k++)
          if (is_name(kw, stops[k])) {
            next_tok(p);
            *out_stop = stops[k];
            if (!strncmp(stops[k], "end", 3)) s = expect_end(p);
            stopped = 1;
          }
        if (stopped) break;
        static const char *const ends[] = {"endif", "endfor", "endmacro", "endset", "endgeneration",
                                           "elif", "else", "endraw", NULL};
        for (int k = 0; ends[k] && !s; k++)
          if (is_name(kw, ends[k])) s = error_at(p, kw->line, kw->col, "unexpected {%% %s %%}", ends[k]);
        if (!s) s = parse_statement(p, pc, &n);
      }
    }
    if (!s && n) s = push_node(p, &items, n);
  }
  body->list = to_nodes(&items);
  *out = body;
  p->nest--;
  return s;
}

/* A call of a plain name must name a macro of the template, a variable it
 * assigns, or a global the evaluator has. */
static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static ssm_status check_calls(parser *p) {
  for (size_t k = 0; k < p->macros.n; k++) SSM_TRY(ssm_vec_push(&p->assigned, p->macros.items[k]));
  if (p->assigned.n) qsort(p->assigned.items, p->assigned.n, sizeof *p->assigned.items, by_name);
  for (size_t i = 0; i < p->calls.n; i++) {
    const jnode *c = p->calls.items[i];
    const char *name = c->a->str;
    int known = ssm_jinja_has_global(name) ||
                (p->assigned.n && bsearch(&name, p->assigned.items, p->assigned.n, sizeof *p->assigned.items, by_name));
    if (!known) return error_at(p, c->a->line, c->a->col, "unsupported function '%s'", name);
  }
  return NULL;
}

ssm_status ssm_jinja_parse(const char *name, const char *text, size_t len, ssm_jinja **out) {
  *out = NULL;
  unsigned long mark = ssm_nomem_mark();
  ssm_arena *a;
  SSM_TRY(ssm_status_wrap(ssm_arena_create(&a), "%s", name));
  /* newlines normalized to \n, as Jinja's lexer does */
  char *src = len < SIZE_MAX ? ssm_arena_alloc(a, len + 1) : NULL;
  jnode *root = NULL;
  ssm_jinja *t = NULL;
  parser p = {.name = ssm_arena_strdup(a, name), .src = src, .arena = a, .what = name};
  if (!src || !(t = ssm_arena_alloc(a, sizeof *t))) {
    ssm_status s = ssm_arena_status(a, name);
    ssm_arena_destroy(a);
    return s;
  }
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    if (text[i] == '\r') {
      src[n++] = '\n';
      if (i + 1 < len && text[i + 1] == '\n') i++;
    } else {
      src[n++] = text[i];
    }
  }
  p.n = n;
  ssm_status s = memchr(src, 0, n) ? ssm_status_new(SSM_ERR_INVALID, "%s: contains a NUL byte", name)
                                   : cut(&p);
  if (!s) s = parse_body(&p, NULL, NULL, &root, NULL);
  /* what was parsed after an allocation failed (a name that became "", a
   * message cut short) is not to be trusted */
  s = ssm_nomem_check(mark, s, name);
  if (!s) s = check_calls(&p);
  ssm_vec_free(&p.pieces);
  ssm_vec_free(&p.macros);
  ssm_vec_free(&p.assigned);
  ssm_vec_free(&p.calls);
  s = ssm_nomem_check(mark, s, name);
  if (s) {
    ssm_arena_destroy(a);
    return s;
  }
  *t = (ssm_jinja){a, p.name, root, p.walked};
  *out = t;
  return NULL;
}

void ssm_jinja_destroy(ssm_jinja *t) {
  if (t) ssm_arena_destroy(t->arena);
}
