/*
 * inspect.c — `ssmc inspect`: what a bundle holds, for people (text) and
 * for tools and tests (--json).
 */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <string.h>

#include "bundle/bundle.h"

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : "?";
}

typedef struct {
  char *s;
  size_t n, cap;
} text;

static void add(text *t, const char *fmt, ...) SSM_PRINTF(2, 3);
static void add(text *t, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int k = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
    va_end(ap);
    if (t->s && (size_t)k < t->cap - t->n) {
      t->n += (size_t)k;
      return;
    }
    t->cap = (t->cap + (size_t)k + 1) * 2;
    t->s = realloc(t->s, t->cap);
    if (!t->s) abort();
    if (!t->n) t->s[0] = 0;
  }
}

ssm_status ssm_inspect(const char *path, int json, char **out_text) {
  *out_text = NULL;
  ssm_bundle *b;
  SSM_TRY(ssm_bundle_open(path, &b));
  cJSON *m = cJSON_Parse(ssm_bundle_manifest(b));
  ssm_bundle_close(b);
  if (!m || !cJSON_IsObject(m)) {
    cJSON_Delete(m);
    return ssm_status_new(SSM_ERR_INVALID, "%s: corrupt manifest: not a JSON object", path);
  }
  cJSON *progs = cJSON_GetObjectItemCaseSensitive(m, "programs");
  double weight_bytes = 0;
  const cJSON *w, *bufs = cJSON_GetObjectItemCaseSensitive(m, "buffers");
  cJSON_ArrayForEach(w, bufs) if (!strcmp(str(w, "usage"), "weights")) weight_bytes += num(w, "bytes");
  if (json) {
    /* the manifest minus the bulky dispatch lists */
    cJSON *p;
    cJSON_ArrayForEach(p, progs) {
      cJSON *steps = cJSON_DetachItemFromObjectCaseSensitive(p, "steps");
      cJSON *ops = cJSON_CreateObject();
      cJSON *st;
      cJSON_ArrayForEach(st, steps) {
        const char *op = str(st, "op");
        cJSON *c = cJSON_GetObjectItemCaseSensitive(ops, op);
        if (c) cJSON_SetNumberValue(c, c->valuedouble + 1);
        else cJSON_AddNumberToObject(ops, op, 1);
      }
      cJSON_AddItemToObject(p, "dispatches_by_op", ops);
      cJSON_Delete(steps);
    }
    cJSON_AddNumberToObject(m, "weight_bytes", weight_bytes);
    *out_text = cJSON_Print(m);
    size_t n = strlen(*out_text);
    *out_text = realloc(*out_text, n + 2);
    strcpy(*out_text + n, "\n");
    cJSON_Delete(m);
    return NULL;
  }
  text t = {0};
  add(&t, "bundle %s: architecture %s, vocab %.0f, dtype %s, format %.0f\n", path,
      str(m, "architecture"), num(m, "vocab"), str(m, "dtype"), num(m, "ssmb"));
  add(&t, "\nbuffers:\n");
  int i = 0;
  cJSON_ArrayForEach(w, bufs) add(&t, "  %2d %-12s %14.0f bytes\n", i++, str(w, "usage"), num(w, "bytes"));
  const cJSON *ws = cJSON_GetObjectItemCaseSensitive(m, "weights");
  const cJSON *ss = cJSON_GetObjectItemCaseSensitive(m, "state");
  add(&t, "\nweights: %d tensors, %.0f bytes\nstate: %d tensors\n", cJSON_GetArraySize(ws),
      weight_bytes, cJSON_GetArraySize(ss));
  add(&t, "\nkernels:\n");
  const cJSON *k, *ks = cJSON_GetObjectItemCaseSensitive(m, "kernels");
  cJSON_ArrayForEach(k, ks) add(&t, "  %-18s %-11s %s\n", str(k, "name"), str(k, "template"), str(k, "params"));
  add(&t, "\nprograms:\n");
  const cJSON *p;
  cJSON_ArrayForEach(p, progs) {
    add(&t, "  %-8s %3.0f tokens  %5.0f dispatches  activations %.0f bytes (unplanned %.0f)\n",
        p->string ? p->string : "?", num(p, "tokens"), num(p, "dispatches"), num(p, "activation_bytes"),
        num(p, "activation_bytes_unplanned"));
  }
  cJSON_Delete(m);
  *out_text = t.s;
  return NULL;
}
