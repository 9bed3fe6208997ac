/*
 * transform.c — load-time weight transforms.
 *
 * A weight node's `transform` attribute is a comma-separated chain of unary
 * ops of ops.def ("exp,neg" is -exp(w)); the simplify pass writes it when it
 * folds unary ops on a weight into the weight. The runtimes (the CPU
 * interpreter, the Vulkan executor) apply it once, when the weight is loaded,
 * with ssm_unary_eval (ir/elementwise.c), the CPU interpreter's numerics for
 * unary ops, so a folded graph computes exactly what the unfolded one did.
 */
#include "runtime/weights/weights.h"

#include <string.h>

/* The names of the unary ops, "neg, exp, ...", for messages. */
static void unary_names(char *buf, size_t size) {
  size_t k = 0;
  buf[0] = 0;
  for (int o = 0; o < SSM_OP_COUNT && k < size; o++) {
    const ssm_op_info *info = ssm_op_info_get((ssm_op)o);
    if (info->kind == SSM_KIND_UNARY)
      k += (size_t)snprintf(buf + k, size - k, k ? ", %s" : "%s", info->name);
  }
}

#define MAX_CHAIN 32

/* Splits `transform` into unary ops; at most MAX_CHAIN. */
static ssm_status parse_chain(const char *transform, ssm_op *ops, int *count) {
  *count = 0;
  if (!transform[0]) return NULL;
  for (const char *p = transform;; p++) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    ssm_op op = ssm_op_lookup(p, len);
    if (op == SSM_OP_COUNT || ssm_op_info_get(op)->kind != SSM_KIND_UNARY) {
      char known[256];
      unary_names(known, sizeof known);
      if (!len)
        return ssm_status_new(SSM_ERR_INVALID,
                              "transform \"%s\": empty op name (ops are separated by single "
                              "commas; known: %s)", transform, known);
      return ssm_status_new(SSM_ERR_INVALID,
                            "transform \"%s\": unknown transform op '%.*s' (known: %s)",
                            transform, (int)len, p, known);
    }
    if (*count == MAX_CHAIN)
      return ssm_status_new(SSM_ERR_INVALID, "transform \"%s\": more than %d ops", transform,
                            MAX_CHAIN);
    ops[(*count)++] = op;
    if (!end) return NULL;
    p = end;
  }
}

ssm_status ssm_weight_transform(const char *transform, float *data, size_t n) {
  ssm_op ops[MAX_CHAIN];
  int count;
  SSM_TRY(parse_chain(transform ? transform : "", ops, &count));
  for (int k = 0; k < count; k++)
    for (size_t i = 0; i < n; i++) data[i] = (float)ssm_unary_eval(ops[k], (double)data[i]);
  return NULL;
}
