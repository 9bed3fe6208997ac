/*
 * base.c — status objects, the arena, the log hook and checked arithmetic.
 */
#include "base/base.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

struct ssm_status_s {
  ssm_code code;
  char *msg;
};

static char *vformat(const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  char *s = malloc((size_t)n + 1);
  if (!s) abort();
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  return s;
}

ssm_status ssm_status_new(ssm_code code, const char *fmt, ...) {
  ssm_status s = malloc(sizeof *s);
  if (!s) abort();
  va_list ap;
  va_start(ap, fmt);
  s->msg = vformat(fmt, ap);
  va_end(ap);
  s->code = code == SSM_OK ? SSM_ERR_INTERNAL : code;
  return s;
}

ssm_status ssm_status_wrap(ssm_status s, const char *fmt, ...) {
  if (!s) return NULL;
  va_list ap;
  va_start(ap, fmt);
  char *ctx = vformat(fmt, ap);
  va_end(ap);
  size_t n = strlen(ctx) + strlen(s->msg) + 3;
  char *m = malloc(n);
  if (!m) abort();
  snprintf(m, n, "%s: %s", ctx, s->msg);
  free(ctx);
  free(s->msg);
  s->msg = m;
  return s;
}

ssm_code ssm_status_code(ssm_status s) { return s ? s->code : SSM_OK; }
const char *ssm_status_message(ssm_status s) { return s ? s->msg : "ok"; }

void ssm_status_free(ssm_status s) {
  if (!s) return;
  free(s->msg);
  free(s);
}

void ssm_assert_fail(const char *cond, const char *file, int line) {
  fprintf(stderr, "ssmc: internal error: %s:%d: assertion '%s' failed\n", file,
          line, cond);
  abort();
}

static ssm_log_fn g_log_fn;
static void *g_log_user;

void ssm_log_set(ssm_log_fn fn, void *user) {
  g_log_fn = fn;
  g_log_user = user;
}

void ssm_log(const char *fmt, ...) {
  if (!g_log_fn) return;
  va_list ap;
  va_start(ap, fmt);
  char *m = vformat(fmt, ap);
  va_end(ap);
  g_log_fn(m, g_log_user);
  free(m);
}

int ssm_size_mul(size_t a, size_t b, size_t *out) {
  if (a && b > SIZE_MAX / a) return 0;
  *out = a * b;
  return 1;
}

int ssm_size_add(size_t a, size_t b, size_t *out) {
  if (b > SIZE_MAX - a) return 0;
  *out = a + b;
  return 1;
}

/* ---- arena ------------------------------------------------------------- */

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} chunk;

struct ssm_arena {
  chunk *head;
};

ssm_arena *ssm_arena_create(void) {
  ssm_arena *a = calloc(1, sizeof *a);
  if (!a) abort();
  return a;
}

void ssm_arena_destroy(ssm_arena *a) {
  if (!a) return;
  for (chunk *c = a->head, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(a);
}

void *ssm_arena_alloc(ssm_arena *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  if (!a->head || a->head->cap - a->head->used < size) {
    size_t cap = size > 65536 ? size : 65536;
    chunk *c = malloc(sizeof(chunk) + cap);
    if (!c) abort();
    c->next = a->head;
    c->used = 0;
    c->cap = cap;
    a->head = c;
  }
  void *p = a->head->data + a->head->used;
  a->head->used += size;
  memset(p, 0, size);
  return p;
}

char *ssm_arena_strndup(ssm_arena *a, const char *s, size_t n) {
  char *d = ssm_arena_alloc(a, n + 1);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

char *ssm_arena_strdup(ssm_arena *a, const char *s) {
  return ssm_arena_strndup(a, s, strlen(s));
}

char *ssm_arena_printf(ssm_arena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = vformat(fmt, ap);
  va_end(ap);
  char *d = ssm_arena_strdup(a, m);
  free(m);
  return d;
}

/* ---- files ------------------------------------------------------------- */

ssm_status ssm_file_read(const char *path, size_t max_bytes, char **out_data,
                         size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  if (!max_bytes) max_bytes = (size_t)1 << 30;
  FILE *f = fopen(path, "rb");
  if (!f) return ssm_status_new(SSM_ERR_IO, "%s: %s", path, strerror(errno));
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap + 1);
  if (!buf) abort();
  for (;;) {
    if (n == cap) {
      char *nb = realloc(buf, (cap *= 2) + 1);
      if (!nb) abort();
      buf = nb;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (n > max_bytes) {
      free(buf);
      fclose(f);
      return ssm_status_new(SSM_ERR_INVALID, "%s: file larger than %zu bytes",
                            path, max_bytes);
    }
    if (r == 0) break;
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    free(buf);
    return ssm_status_new(SSM_ERR_IO, "%s: read error", path);
  }
  buf[n] = 0;
  *out_data = buf;
  *out_size = n;
  return NULL;
}
