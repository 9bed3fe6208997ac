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
#include <stdarg.h>
#include <string.h>

typedef struct {
  char *p;
  size_t n, cap;
} strbuf;

static void buf_reserve(strbuf *b, size_t extra) {
  if (b->cap - b->n > extra) return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap - b->n <= extra) {
    SSM_ASSERT(cap < SIZE_MAX / 2);
    cap *= 2;
  }
  char *p = realloc(b->p, cap);
  SSM_ASSERT(p);
  b->p = p;
  b->cap = cap;
}

static void buf_put(strbuf *b, const char *s, size_t n) {
  buf_reserve(b, n);
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void buf_puts(strbuf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void SSM_PRINTF(2, 3) buf_printf(strbuf *b, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int k = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (k > 0) {
    buf_reserve(b, (size_t)k);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    b->n += (size_t)k;
  }
  va_end(ap);
}

/* Shortest %g form that strtod reads back to `v`. */
static void put_float(strbuf *b, double v) {
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

static void put_string(strbuf *b, const char *s) {
  buf_put(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': buf_puts(b, "\\\""); break;
    case '\\': buf_puts(b, "\\\\"); break;
    case '\n': buf_puts(b, "\\n"); break;
    case '\t': buf_puts(b, "\\t"); break;
    default:
      if (*p < 0x20 || *p == 0x7f) buf_printf(b, "\\x%02x", *p);
      else buf_put(b, (const char *)p, 1);
    }
  }
  buf_put(b, "\"", 1);
}

static void put_attr(strbuf *b, const ssm_attr *a) {
  buf_printf(b, " %s=", a->key);
  switch (a->kind) {
  case SSM_ATTR_INT: buf_printf(b, "%lld", (long long)a->i); break;
  case SSM_ATTR_FLOAT: put_float(b, a->f); break;
  case SSM_ATTR_STR: put_string(b, a->s ? a->s : ""); break;
  case SSM_ATTR_INTS:
    buf_put(b, "[", 1);
    for (int i = 0; i < a->n; i++)
      buf_printf(b, i ? ",%lld" : "%lld", (long long)a->ints[i]);
    buf_put(b, "]", 1);
    break;
  }
}

static void put_node(strbuf *b, const ssm_node *n) {
  int valid_op = n->op >= 0 && n->op < SSM_OP_COUNT;
  const ssm_op_info *info = valid_op ? ssm_op_info_get(n->op) : NULL;
  buf_puts(b, "  ");
  if (n->result) {
    char tb[96];
    buf_printf(b, "%%%d:%s = ", n->result->id,
               ssm_type_format(&n->result->type, tb, sizeof tb));
  }
  buf_puts(b, info ? info->name : "<bad-op>");
  for (int i = 0; i < n->nargs; i++) {
    buf_puts(b, i ? ", " : " ");
    if (n->args[i]) buf_printf(b, "%%%d", n->args[i]->id);
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
  buf_put(b, "\n", 1);
}

char *ssm_graph_print(ssm_graph *g) {
  strbuf b = {0};
  ssm_graph_number(g);
  buf_printf(&b, "graph %s {\n", g->name ? g->name : "main");
  for (const ssm_node *n = g->first; n; n = n->next) put_node(&b, n);
  buf_puts(&b, "}\n");
  return b.p;
}
