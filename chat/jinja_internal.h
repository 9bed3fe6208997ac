/*
 * jinja_internal.h — what the parser (jinja_parse.c) and the evaluator
 * (jinja_value.c, jinja_builtins.c, jinja_eval.c: jinja_value.h) share: the
 * syntax tree, and the names the evaluator implements (which the parser
 * checks every use against).
 */
#ifndef SSM_JINJA_INTERNAL_H
#define SSM_JINJA_INTERNAL_H

#include <stdint.h>

#include "chat/jinja.h"

typedef enum {
  /* statements */
  J_TEXT, J_OUT, J_IF, J_FOR, J_SET, J_SETBLOCK, J_MACRO, J_BREAK, J_CONTINUE, J_BODY,
  /* expressions */
  J_CONST_STR, J_CONST_INT, J_CONST_FLOAT, J_CONST_BOOL, J_CONST_NONE, J_NAME, J_ATTR, J_ITEM,
  J_SLICE, J_CALL, J_FILTER, J_TEST, J_NEG, J_POS, J_NOT, J_AND, J_OR, J_BINOP, J_CMP, J_COND,
  J_LIST, J_DICT, J_TUPLE,
} jnode_kind;

typedef struct jnode jnode;

/* A node list (statement bodies, arguments). */
typedef struct {
  jnode **items;
  int n;
} jnodes;

struct jnode {
  jnode_kind kind;
  int line, col;
  const char *str; /* text, a name, an attribute, an operator, a filter or test name */
  size_t len;      /* of J_TEXT and J_CONST_STR */
  int64_t i;       /* J_CONST_INT, J_CONST_BOOL; J_CALL, J_FILTER, J_TEST: index of the
                    * *args argument or -1 */
  int flag;        /* J_TEST: `is not` */
  double f;
  jnode *a, *b, *c; /* operands: J_IF cond/then(J_BODY)/else; J_FOR iter/filter/else;
                     * J_SET value; J_SLICE start/stop (list2[0]: step); J_COND then/cond/else */
  jnodes list;      /* bodies, arguments, elements, dict keys */
  jnodes list2;     /* keyword values, dict values, macro defaults, J_FOR body */
  const char **names; /* keyword argument names, macro parameters, J_FOR/J_SET targets */
  int nnames;
};

struct ssm_jinja {
  ssm_arena *arena;
  const char *name;
  jnode *root; /* J_BODY */
  size_t walked; /* bytes the parser walked to count lines and columns: linear in the text */
};

/* The evaluator's tables, for the parser to check names against. */
int ssm_jinja_has_filter(const char *name);
int ssm_jinja_has_test(const char *name);
int ssm_jinja_has_method(const char *name);
int ssm_jinja_has_global(const char *name);

#endif
