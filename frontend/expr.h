/*
 * expr.h — the small language inside model YAML strings, shared by the
 * files of the frontend and its expression evaluator (expr.c). Internal to
 * frontend/: nothing outside the frontend includes it.
 *
 * A lexer walks one YAML scalar and knows where that scalar sits in its file,
 * so every error names "file:line:col" of the offending character. Scalar
 * expressions (shapes, attribute values, conditions) are evaluated while they
 * are parsed: ints, floats, bools, strings ("rope", 'M') and lists (from
 * config.json) with + - * / % unary -, comparisons (strings compare with ==
 * and !=), && || ! parentheses, indexing (list[i], string[i]), membership
 * (x in list), Python's `A if C else B`, and the functions sqrt, len, int
 * (truncates), floor, ceil, min, max and bf16 (the float nearest x that
 * bfloat16 holds). Values of different kinds are never equal ("auto" == 64
 * is false). Names resolve through a callback.
 */
#ifndef SSM_EXPR_H
#define SSM_EXPR_H

#include "frontend/frontend.h"

/* Bounds on what a description may ask for. */
#define SSM_FE_MAX_NAME 128         /* identifier length */
#define SSM_FE_MAX_DEPTH 64         /* nesting of parentheses and calls */
#define SSM_FE_MAX_DIM (1LL << 40)  /* one dimension, and a tensor's numel */
#define SSM_FE_MAX_TEMPLATE 512     /* expanded weight name length */

typedef enum { SSM_SC_INT, SSM_SC_FLOAT, SSM_SC_BOOL, SSM_SC_STR, SSM_SC_LIST } ssm_scalar_kind;

/* A compile-time value: a param, T, i, or the result of an expression.
 * Bools keep 0/1 in `i`; a string or a list keeps its length in `i` and
 * points at text (not NUL-terminated) or items that outlive the
 * expression (the model's arena or its YAML text). */
typedef struct ssm_scalar ssm_scalar;
struct ssm_scalar {
  ssm_scalar_kind kind;
  int64_t i;
  double f;
  const char *s;           /* SSM_SC_STR */
  const ssm_scalar *items; /* SSM_SC_LIST */
};

/* Looks a name up; returns 1 and fills *out when it is a scalar. */
typedef int (*ssm_scalar_lookup)(void *ctx, const char *name, size_t n, ssm_scalar *out);

typedef enum {
  SSM_TOK_END,
  SSM_TOK_IDENT,
  SSM_TOK_INT,
  SSM_TOK_FLOAT,
  SSM_TOK_STR,   /* "..." or '...', text without the quotes */
  SSM_TOK_PUNCT, /* one of ( ) [ ] , = + - * / % ! < > == != <= >= && || */
} ssm_tok_kind;

/* Where a scalar's text starts: file name, 1-based line and column. */
typedef struct {
  const char *file;
  int line, col;
} ssm_src;

typedef struct {
  ssm_src at;
  const char *src;
  size_t len, pos;
  /* the current token */
  ssm_tok_kind tok;
  const char *text; /* points into src */
  size_t tlen, off; /* length and offset in src */
  int64_t ival;
  double fval;
  int depth;
} ssm_lex;

/* Starts lexing `src` and reads the first token. */
ssm_status ssm_lex_init(ssm_lex *lx, ssm_src at, const char *src, size_t len);
/* Advances to the next token. */
ssm_status ssm_lex_next(ssm_lex *lx);
/* 1 if the current token is the punctuation `p`. */
int ssm_lex_is(const ssm_lex *lx, const char *p);
/* Consumes punctuation `p` or fails with "expected 'p'". */
ssm_status ssm_lex_expect(ssm_lex *lx, const char *p);
/* An INVALID status "file:line:col: message" for byte `off` of the source. */
ssm_status ssm_lex_error(const ssm_lex *lx, size_t off, const char *fmt, ...)
    SSM_PRINTF(3, 4);
/* The position of byte `off`: exact for single-line scalars, approximate
 * (the column inside the folded text) for multi-line ones. */
ssm_src ssm_lex_pos(const ssm_lex *lx, size_t off);
/* An INVALID status for a position given directly. */
ssm_status ssm_src_error(ssm_src at, const char *fmt, ...) SSM_PRINTF(2, 3);

/* Parses and evaluates one expression starting at the current token. */
ssm_status ssm_expr_eval(ssm_lex *lx, ssm_scalar_lookup look, void *ctx, ssm_scalar *out);
/* Evaluates all of `src` as one expression. */
ssm_status ssm_expr_eval_str(ssm_src at, const char *src, size_t len,
                             ssm_scalar_lookup look, void *ctx, ssm_scalar *out);
/* Expands a name template: literal text with {expr} holes (a string as it
 * is, any other value as messages show it: 3, 0.5, true). A hole `{*}` is kept as it is: the name of a stacked weight
 * (runtime/weights/weights.h). The result is allocated in `arena`. */
ssm_status ssm_expr_template(ssm_src at, const char *src, size_t len,
                             ssm_scalar_lookup look, void *ctx, ssm_arena *arena,
                             const char **out);
/* 1 if `s` is true as a condition (bools; numbers are true when non-zero;
 * strings and lists when not empty). */
int ssm_scalar_truthy(const ssm_scalar *s);
/* "int", "float", "bool", "string", "list". */
const char *ssm_scalar_kind_name(ssm_scalar_kind k);
/* Appends `v` as messages show it: 64, 0.5, true, 'rope', [1, 3]. */
void ssm_scalar_format(ssm_sb *b, const ssm_scalar *v);
/* 1 if `name` is a function of the expression language (sqrt, len, ...):
 * a call of it in an operand is a constant, not an op. */
int ssm_expr_is_function(const char *name, size_t n);

#endif
