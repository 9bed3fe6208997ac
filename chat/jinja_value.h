/*
 * jinja_value.h — what the files of the evaluator share: the values of a
 * render (Python's kinds, in one arena per render), the render's context,
 * and the operations on them. From the bottom up:
 *
 *   jinja_value.c     values: containers, frames of names, str() and
 *                     repr(), tojson, comparisons, iteration
 *   jinja_builtins.c  what templates call: methods, filters, tests,
 *                     globals, attributes, items and slices, and the tables
 *                     of their names that the parser checks against
 *   jinja_eval.c      the renderer: expressions, statements and macros
 */
#ifndef SSM_JINJA_VALUE_H
#define SSM_JINJA_VALUE_H

#include <string.h>

#include "chat/jinja_internal.h"

/* The bounds of one render, so that a hostile template costs one request
 * its error and never the server its memory, its time or its stack: */
#define MAX_OUTPUT ((size_t)8 << 20)  /* bytes of its output, and of any one string */
#define MAX_MADE_MIB 32                /* MiB of all the values it makes */
#define MAX_MADE ((size_t)MAX_MADE_MIB << 20)
#define MAX_WORK 5000000L             /* steps: loop iterations, calls, outputs, and
                                       * the work inside filters and methods (an item
                                       * visited, 64 bytes scanned) */
#define MAX_EVAL_NEST 400             /* nested evaluations (expressions, statements,
                                       * macro calls), and nested values */

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

/* depth: 1 + that of the deepest item, at most MAX_EVAL_NEST (an item
 * that would pass it is dropped, and the render fails at its next step) */
struct jlist {
  jv *v;
  size_t n, cap;
  int depth;
};
struct jdict {
  jv *keys, *vals;
  size_t n, cap;
  int depth;
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
  int nest;             /* evaluations under way */
  long steps;
  size_t made;          /* bytes of values made (MAX_MADE) */
  const char *over;     /* the bound a dropped value passed, for the next step's message */
  const jnode *at;      /* the node of the last step: the place of an error that has none */
  unsigned long mark;   /* ssm_nomem_mark when the render began */
  jlist no_list;        /* what ssm_jv_list_new gives once the arena failed: empty, never grown */
  jdict no_dict;        /* and ssm_jv_dict_new */
} ctx;

/* Evaluated call arguments. */
typedef struct {
  jv *pos;
  int npos;
  const char **names;
  jv *kw;
  int nkw;
} args;

static const jv UNDEF = {V_UNDEF, {0}, NULL};
static const jv NONE = {V_NONE, {0}, NULL};

static inline jv v_bool(int b) { return (jv){V_BOOL, {.i = b != 0}, NULL}; }
static inline jv v_int(int64_t i) { return (jv){V_INT, {.i = i}, NULL}; }
static inline jv v_float(double f) { return (jv){V_FLOAT, {.f = f}, NULL}; }
static inline jv v_str(const char *p, size_t n) { return (jv){V_STR, {.s = {p, n}}, NULL}; }

static inline jv v_list(jlist *l) { return (jv){V_LIST, {.l = l}, NULL}; }
static inline int str_eq(jv a, const char *s, size_t n) { return a.k == V_STR && a.u.s.n == n && !memcmp(a.u.s.p, s, n); }
static inline int is_num(jv v) { return v.k == V_INT || v.k == V_FLOAT || v.k == V_BOOL; }
static inline double num(jv v) { return v.k == V_FLOAT ? v.u.f : (double)v.u.i; }

/* Why an allocation of the render failed: a bound it passed, else the
 * arena's NOMEM. */
ssm_status ssm_jv_oom(const ctx *c, const jnode *n);
static inline ssm_status oom(const ctx *c) { return ssm_jv_oom(c, NULL); }

/* ---- values (jinja_value.c) ----------------------------------------------------------- */

/* "NAME:LINE:COL: message" of the template at node `n`. */
ssm_status ssm_jv_err(const ctx *c, const jnode *n, const char *fmt, ...) SSM_PRINTF(3, 4);
/* Counts a step of the render; an error once it runs too long, its output
 * grows too large, or an allocation failed. */
ssm_status ssm_jv_step(ctx *c, const jnode *n);
/* Counts `units` steps of work inside a filter, method or operator. */
ssm_status ssm_jv_work(ctx *c, const jnode *n, size_t units);
/* `bytes` of the render's arena, counted against MAX_MADE: NULL past it
 * (or out of memory), and oom() says which. */
void *ssm_jv_alloc(ctx *c, size_t bytes);
/* A string value of b's text (counted as work and as bytes made); `b` is
 * freed. An error when it is longer than MAX_OUTPUT. */
ssm_status ssm_jv_take(ctx *c, const jnode *n, ssm_sb *b, jv *out);
/* a op b on integers as Python computes it ('+', '-', '*', '/' floor
 * division, '%' modulo with the divisor's sign, 'p' power, 'n' negation: 0 - b), or an error
 * naming the operation when the result does not fit 64 bits or b is 0. */
ssm_status ssm_jv_int_op(ctx *c, const jnode *n, char op, int64_t a, int64_t b, int64_t *out);

/* Lists and dicts in the render's arena. Out of memory, a new container is
 * an empty one that never grows, and an item is dropped: the render fails
 * at its next step. dict_set replaces the value of a string key it has. */
jlist *ssm_jv_list_new(ctx *c, size_t cap);
void ssm_jv_list_push(ctx *c, jlist *l, jv v);
jdict *ssm_jv_dict_new(ctx *c);
jv *ssm_jv_dict_find(const jdict *d, const char *key, size_t n);
void ssm_jv_dict_set(ctx *c, jdict *d, jv key, jv val);

/* Frames of names: a new one under `parent`, a name set in one, and a
 * name looked up from the current frame outwards (undefined when absent). */
ssm_status ssm_jv_frame_new(ctx *c, frame *parent, frame **out);
void ssm_jv_frame_set(ctx *c, frame *f, const char *name, jv v);
jv ssm_jv_lookup(const ctx *c, const char *name);

/* Python's truthiness and type name of a value. */
int ssm_jv_truthy(jv v);
const char *ssm_jv_type_name(jv v);
/* Appends str(v). */
void ssm_jv_put_str(ssm_sb *b, jv v);
/* A copy of n bytes of text in the arena ("" once it failed). */
jv ssm_jv_copy(ctx *c, const char *p, size_t n);
/* str(v) as a string value. */
jv ssm_jv_to_str(ctx *c, jv v);
/* json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort);
 * indent < 0: none. */
ssm_status ssm_jv_put_json(ctx *c, const jnode *at, ssm_sb *b, jv v, int indent, int level,
                           int sort);

/* Code points of UTF-8 text, the byte offset of code point `cp` (<= the
 * length), and len() of a string, list or dict. */
size_t ssm_jv_u8_len(const char *s, size_t n);
size_t ssm_jv_u8_offset(const char *s, size_t n, size_t cp);
size_t ssm_jv_length(jv v);

/* ==, ordering (-1, 0, 1; an error for kinds that do not order), `in`.
 * equal counts its work as steps; the next step checks them. */
int ssm_jv_equal(ctx *c, jv a, jv b);
ssm_status ssm_jv_order(ctx *c, const jnode *n, jv a, jv b, int *out);
ssm_status ssm_jv_contains(ctx *c, const jnode *n, jv hay, jv needle, int *out);
/* The items a for loop or a filter walks: a list, a dict's keys, a
 * string's characters. */
ssm_status ssm_jv_iterable(ctx *c, const jnode *n, jv v, jlist **out);

/* ---- what templates call (jinja_builtins.c) ------------------------------------------ */

/* self.name(args): the methods of strings, dicts and the loop. */
ssm_status ssm_jv_call_method(ctx *c, const jnode *n, jv self, const char *name, const args *a,
                              jv *out);
/* obj.name and obj[key]: undefined where Jinja gives undefined. */
ssm_status ssm_jv_get_attr(ctx *c, const jnode *n, jv obj, const char *name, jv *out);
ssm_status ssm_jv_get_item(ctx *c, const jnode *n, jv obj, jv key, jv *out);
/* obj[start:stop:step] of a list or a string, the bounds evaluated (none
 * or integers). */
ssm_status ssm_jv_slice(ctx *c, const jnode *n, jv obj, const jv *bounds, jv *out);
/* v | name(args), and v is name(args). */
ssm_status ssm_jv_filter(ctx *c, const jnode *n, const char *name, jv v, const args *a, jv *out);
ssm_status ssm_jv_test(ctx *c, const jnode *n, const char *name, jv v, const args *a, int *out);
/* The global function `fn` (ssm_jv_global_index) called with `a`. */
ssm_status ssm_jv_call_global(ctx *c, const jnode *n, int fn, const args *a, jv *out);
/* The index of global function `name` (range, namespace, ...), or -1. */
int ssm_jv_global_index(const char *name);

#endif
