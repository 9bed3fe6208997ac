/*
 * print.c — the text form of a graph (see ir.h for the format).
 *
 * Every dump in ssmc goes through ssm_graph_print, and ssm_graph_parse reads
 * exactly what it writes: floats are printed in the shortest decimal form
 * that reads back to the same double, strings are escaped, attributes come in
 * the order of the op table.
 */
#include "ir/ir.h"

#include <math.h>
#include <string.h>

static void buf_puts(ssm_sb *b, const char *s) { ssm_sb_append(b, s, strlen(s)); }

/* Shortest %g form that strtod reads back to `v`. */
static void put_float(ssm_sb *b, double v) {
  if (isnan(v)) {
    buf_puts(b, "nan");
    return;
  }
  if (isinf(v)) {
    buf_puts(b, v < 0 ? "-inf" : "inf");
    return;
  }
  char tmp[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*g", prec, v);
    if (strtod(tmp, NULL) == v) break;
  }
  buf_puts(b, tmp);
}

static void put_string(ssm_sb *b, const char *s) {
  buf_puts(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': buf_puts(b, "\\\""); break;
    case '\\': buf_puts(b, "\\\\"); break;
    case '\n': buf_puts(b, "\\n"); break;
    case '\t': buf_puts(b, "\\t"); break;
    default:
      if (*p < 0x20 || *p == 0x7f) ssm_sb_printf(b, "\\x%02x", *p);
      else ssm_sb_append(b, p, 1);
    }
  }
  buf_puts(b, "\"");
}

static void put_attr(ssm_sb *b, const ssm_attr *a) {
  ssm_sb_printf(b, " %s=", a->key);
  switch (a->kind) {
  case SSM_ATTR_INT: ssm_sb_printf(b, "%lld", (long long)a->i); break;
  case SSM_ATTR_FLOAT: put_float(b, a->f); break;
  case SSM_ATTR_STR: put_string(b, a->s ? a->s : ""); break;
  case SSM_ATTR_INTS:
    buf_puts(b, "[");
    for (int i = 0; i < a->n; i++)
      ssm_sb_printf(b, i ? ",%lld" : "%lld", (long long)a->ints[i]);
    buf_puts(b, "]");
    break;
  }
}

static void put_node(ssm_sb *b, const ssm_node *n) {
  int valid_op = n->op >= 0 && n->op < SSM_OP_COUNT;
  const ssm_op_info *info = valid_op ? ssm_op_info_get(n->op) : NULL;
  buf_puts(b, "  ");
  if (n->result) {
    char tb[96];
    ssm_sb_printf(b, "%%%d:%s = ", n->result->id,
                  ssm_type_format(&n->result->type, tb, sizeof tb));
  }
  buf_puts(b, info ? info->name : "<bad-op>");
  for (int i = 0; i < n->nargs; i++) {
    buf_puts(b, i ? ", " : " ");
    if (n->args[i]) ssm_sb_printf(b, "%%%d", n->args[i]->id);
    else buf_puts(b, "%<null>");
  }
  /* Table order first, then any keys the table does not know (so a broken
   * graph still shows everything it holds; the verifier rejects those). */
  int printed[SSM_MAX_ATTRS] = {0};
  for (int s = 0; info && s < info->nattrs; s++)
    for (int i = 0; i < n->nattrs; i++)
      if (!printed[i] && !strcmp(n->attrs[i].key, info->attrs[s].key)) {
        put_attr(b, &n->attrs[i]);
        printed[i] = 1;
        break;
      }
  for (int i = 0; i < n->nattrs; i++)
    if (!printed[i]) put_attr(b, &n->attrs[i]);
  buf_puts(b, "\n");
}

ssm_status ssm_graph_print(ssm_graph *g, char **out) {
  ssm_sb b = {0};
  ssm_graph_number(g);
  ssm_sb_printf(&b, "graph %s {\n", g->name ? g->name : "main");
  for (const ssm_node *n = g->first; n; n = n->next) put_node(&b, n);
  buf_puts(&b, "}\n");
  return ssm_sb_take(&b, "IR text", out);
}
