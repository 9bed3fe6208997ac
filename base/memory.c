/*
 * memory.c — checked allocation, growable arrays, and the arena, with
 * overflow-checked size arithmetic.
 */
#include <string.h>

#include "base/base.h"

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

/* ---- checked allocation ---------------------------------------------------- */

static long alloc_fail_countdown; /* ssm_alloc_fail_at: 0 is off */

void ssm_alloc_fail_at(long n) { alloc_fail_countdown = n > 0 ? n : 0; }

int ssm_alloc_fail_pending(void) { return alloc_fail_countdown > 0; }

ssm_status ssm_alloc(size_t count, size_t size, void **out) {
  size_t bytes;
  *out = NULL;
  if (!ssm_size_mul(count, size, &bytes))
    return ssm_status_new(SSM_ERR_NOMEM, "%zu elements of %zu bytes do not fit in memory",
                          count, size);
  if (alloc_fail_countdown > 0 && --alloc_fail_countdown == 0)
    return ssm_status_new(SSM_ERR_NOMEM, "out of host memory (%zu bytes wanted)", bytes);
  *out = calloc(bytes ? bytes : 1, 1);
  if (!*out)
    return ssm_status_new(SSM_ERR_NOMEM, "out of host memory (%zu bytes wanted)", bytes);
  return NULL;
}

void ssm_fatal_nomem(size_t bytes) {
  fprintf(stderr, "ssmc: out of host memory (%zu bytes wanted)\n", bytes);
  abort();
}

void *ssm_xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) ssm_fatal_nomem(n);
  return p;
}

void *ssm_xcalloc(size_t count, size_t size) {
  size_t bytes;
  if (!ssm_size_mul(count, size, &bytes)) ssm_fatal_nomem(SIZE_MAX);
  void *p = calloc(bytes ? bytes : 1, 1);
  if (!p) ssm_fatal_nomem(bytes);
  return p;
}

void *ssm_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) ssm_fatal_nomem(n);
  return q;
}

void *ssm_xreallocarray(void *p, size_t count, size_t size) {
  size_t bytes;
  if (!ssm_size_mul(count, size, &bytes)) ssm_fatal_nomem(SIZE_MAX);
  return ssm_xrealloc(p, bytes);
}

char *ssm_xstrndup(const char *s, size_t n) {
  char *d = ssm_xmalloc(n + 1);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

char *ssm_xstrdup(const char *s) { return ssm_xstrndup(s, strlen(s)); }

void *ssm_vec_grow_(void *items, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return items;
  size_t c = *cap ? *cap : 8;
  while (c < need) {
    if (c > SIZE_MAX / 2) ssm_fatal_nomem(SIZE_MAX);
    c *= 2;
  }
  items = ssm_xreallocarray(items, c, elem);
  *cap = c;
  return items;
}

/* ---- string maps --------------------------------------------------------------- */

static size_t strmap_find(const char *const *keys, size_t cap, const char *key) {
  size_t h = ssm_fnv1a(SSM_FNV_INIT, key, strlen(key)) & (cap - 1);
  while (keys[h] && strcmp(keys[h], key)) h = (h + 1) & (cap - 1);
  return h;
}

void **ssm_strmap_slot(ssm_strmap *m, const char *key, int *out_found) {
  if ((m->n + 1) * 2 > m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    const char **keys = ssm_xcalloc(cap, sizeof *keys);
    void **vals = ssm_xcalloc(cap, sizeof *vals);
    for (size_t k = 0; k < m->cap; k++)
      if (m->keys[k]) {
        size_t h = strmap_find(keys, cap, m->keys[k]);
        keys[h] = m->keys[k];
        vals[h] = m->vals[k];
      }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
  }
  size_t h = strmap_find(m->keys, m->cap, key);
  *out_found = m->keys[h] != NULL;
  if (!m->keys[h]) {
    m->keys[h] = key;
    m->n++;
  }
  return &m->vals[h];
}

void *ssm_strmap_get(const ssm_strmap *m, const char *key) {
  if (!m->cap) return NULL;
  size_t h = strmap_find(m->keys, m->cap, key);
  return m->keys[h] ? m->vals[h] : NULL;
}

void ssm_strmap_free(ssm_strmap *m) {
  free(m->keys);
  free(m->vals);
  *m = (ssm_strmap){0};
}

/* ---- arena ----------------------------------------------------------------- */

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} chunk;

struct ssm_arena {
  chunk *head;
};

ssm_arena *ssm_arena_create(void) { return ssm_xcalloc(1, sizeof(ssm_arena)); }

void ssm_arena_destroy(ssm_arena *a) {
  if (!a) return;
  for (chunk *c = a->head, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(a);
}

void *ssm_arena_alloc(ssm_arena *a, size_t size) {
  if (size > SIZE_MAX - 65536) ssm_fatal_nomem(size);
  size = (size + 15) & ~(size_t)15;
  if (!a->head || a->head->cap - a->head->used < size) {
    size_t cap = size > 65536 ? size : 65536;
    chunk *c = ssm_xmalloc(sizeof(chunk) + cap);
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
  ssm_sb b = {0};
  va_list ap;
  va_start(ap, fmt);
  ssm_sb_vprintf(&b, fmt, ap);
  va_end(ap);
  char *d = ssm_arena_strndup(a, ssm_sb_str(&b), b.n);
  ssm_sb_free(&b);
  return d;
}
