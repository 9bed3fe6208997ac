/*
 * elementwise.c — the elementwise ops of elementwise.def as code: their
 * values in C (the CPU interpreter and load-time weight transforms) and their
 * expressions in the kernel languages (codegen). Each function is the table
 * expanded once; nothing here names an op.
 */
#include "ir/ir.h"

#include <math.h>
#include <string.h>

double ssm_unary_eval(ssm_op op, double x) {
  switch (op) {
#define UNARY(e, c, glsl, wgsl) \
  case SSM_OP_##e: return c;
#define BINARY(e, c, glsl, wgsl)
#include "ir/elementwise.def"
#undef UNARY
#undef BINARY
  default: SSM_ASSERT(!"not a unary op"); return 0;
  }
}

double ssm_binary_eval(ssm_op op, double a, double b) {
  switch (op) {
#define UNARY(e, c, glsl, wgsl)
#define BINARY(e, c, glsl, wgsl) \
  case SSM_OP_##e: return c;
#include "ir/elementwise.def"
#undef UNARY
#undef BINARY
  default: SSM_ASSERT(!"not a binary op"); return 0;
  }
}

static const char *const exprs[SSM_OP_COUNT][SSM_LANG_COUNT] = {
#define UNARY(e, c, glsl, wgsl) [SSM_OP_##e] = {glsl, wgsl},
#define BINARY(e, c, glsl, wgsl) [SSM_OP_##e] = {glsl, wgsl},
#include "ir/elementwise.def"
#undef UNARY
#undef BINARY
};

const char *ssm_op_expr(ssm_op op, ssm_lang lang) {
  SSM_ASSERT(op >= 0 && op < SSM_OP_COUNT && lang >= 0 && lang < SSM_LANG_COUNT);
  return exprs[op][lang];
}

void ssm_op_expr_append(ssm_sb *b, ssm_op op, ssm_lang lang, const char *const *operands) {
  const char *p = ssm_op_expr(op, lang);
  SSM_ASSERT(p);
  for (const char *mark; (mark = strchr(p, '$')); p = mark + 2) {
    ssm_sb_append(b, p, (size_t)(mark - p));
    SSM_ASSERT(mark[1] == 'x' || mark[1] == 'a' || mark[1] == 'b');
    const char *operand = operands[mark[1] == 'b'];
    ssm_sb_append(b, operand, strlen(operand));
  }
  ssm_sb_append(b, p, strlen(p));
}
