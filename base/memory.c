/*
 * memory.c — checked allocation, growable arrays, string maps and the
 * FNV-1a hash they use, and the arena, with overflow-checked size
 * arithmetic. It stands on status.c alone; text.c and json.c build on it.
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
static _Atomic unsigned long alloc_calls; /* ssm_alloc_calls */

void ssm_alloc_fail_at(long n) { alloc_fail_countdown = n > 0 ? n : 0; }

int ssm_alloc_fail_pending(void) { return alloc_fail_countdown > 0; }

unsigned long ssm_alloc_calls(void) { return alloc_calls; }

/* Whether this allocation is the one ssm_alloc_fail_at asked to fail. Every
 * allocator of this file asks, so one count reaches them all. */
static int injected_failure(void) {
  alloc_calls++;
  return alloc_fail_countdown > 0 && --alloc_fail_countdown == 0;
}

/* This thread's failed allocations so far, and the size the last one wanted. */
static _Thread_local unsigned long nomem_count;
static _Thread_local size_t nomem_bytes;

static void *failed(size_t bytes) {
  nomem_count++;
  nomem_bytes = bytes;
  return NULL;
}

unsigned long ssm_nomem_mark(void) { return nomem_count; }

ssm_status ssm_nomem_since(unsigned long mark, const char *what) {
  return nomem_count != mark ? ssm_nomem(nomem_bytes, what) : NULL;
}

ssm_status ssm_nomem_check(unsigned long mark, ssm_status s, const char *what) {
  if (nomem_count == mark || ssm_status_code(s) == SSM_ERR_NOMEM) return s;
  ssm_status_free(s);
  return ssm_nomem(nomem_bytes, what);
}

void *ssm_malloc_(size_t n) {
  void *p = injected_failure() ? NULL : malloc(n ? n : 1);
  return p ? p : failed(n);
}

void *ssm_realloc_(void *p, size_t n) {
  void *q = injected_failure() ? NULL : realloc(p, n ? n : 1);
  return q ? q : failed(n);
}

ssm_status ssm_nomem(size_t bytes, const char *what) {
  if (bytes == SIZE_MAX)
    return ssm_status_new(SSM_ERR_NOMEM, "%s: out of host memory (more than %zu bytes wanted)",
                          what, SIZE_MAX / 2);
  return ssm_status_new(SSM_ERR_NOMEM, "%s: out of host memory (%zu bytes wanted)", what, bytes);
}

ssm_status ssm_alloc(size_t count, size_t size, void **out) {
  size_t bytes;
  *out = NULL;
  if (!ssm_size_mul(count, size, &bytes)) {
    failed(SIZE_MAX);
    return ssm_status_new(SSM_ERR_NOMEM, "%zu elements of %zu bytes do not fit in memory",
                          count, size);
  }
  *out = injected_failure() ? NULL : calloc(bytes ? bytes : 1, 1);
  if (*out) return NULL;
  failed(bytes);
  return ssm_status_new(SSM_ERR_NOMEM, "out of host memory (%zu bytes wanted)", bytes);
}

ssm_status ssm_realloc(void **p, size_t count, size_t size, const char *what) {
  size_t bytes;
  if (!ssm_size_mul(count, size, &bytes)) {
    failed(SIZE_MAX);
    return ssm_nomem(SIZE_MAX, what);
  }
  void *q = ssm_realloc_(*p, bytes);
  if (!q) return ssm_nomem(bytes, what);
  *p = q;
  return NULL;
}

ssm_status ssm_strndup(const char *s, size_t n, const char *what, char **out) {
  *out = n == SIZE_MAX ? failed(n) : ssm_malloc_(n + 1);
  if (!*out) return ssm_nomem(n == SIZE_MAX ? n : n + 1, what);
  memcpy(*out, s, n);
  (*out)[n] = 0;
  return NULL;
}

ssm_status ssm_strdup(const char *s, const char *what, char **out) {
  return ssm_strndup(s, strlen(s), what, out);
}

void ssm_fatal_nomem(size_t bytes) {
  fprintf(stderr, "ssmc: out of host memory (%zu bytes wanted)\n", bytes);
  abort();
}

void *ssm_xmalloc(size_t n) {
  void *p = ssm_malloc_(n);
  if (!p) ssm_fatal_nomem(n);
  return p;
}

char *ssm_xstrndup(const char *s, size_t n) {
  char *d = ssm_xmalloc(n + 1);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

char *ssm_xstrdup(const char *s) { return ssm_xstrndup(s, strlen(s)); }

/* ---- growable arrays ----------------------------------------------------------- */

int ssm_vec_room_(void *items_field, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 1;
  size_t c = *cap ? *cap : 8, bytes = SIZE_MAX;
  while (c < need && c <= SIZE_MAX / 2) c *= 2;
  void *items, *q = NULL;
  memcpy(&items, items_field, sizeof items);
  if (c >= need && ssm_size_mul(c, elem, &bytes)) q = ssm_realloc_(items, bytes);
  if (!q) {
    if (bytes == SIZE_MAX) failed(bytes);
    return 0;
  }
  memcpy(items_field, &q, sizeof q);
  *cap = c;
  return 1;
}

void ssm_vec_fatal_(void) { ssm_fatal_nomem(nomem_bytes); }

ssm_status ssm_vec_nomem_(void) { return ssm_nomem(nomem_bytes, "growing a list"); }

/* ---- hashing ------------------------------------------------------------------- */

uint64_t ssm_fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* ---- string maps --------------------------------------------------------------- */

static size_t strmap_find(const char *const *keys, size_t cap, const char *key) {
  size_t h = ssm_fnv1a(SSM_FNV_INIT, key, strlen(key)) & (cap - 1);
  while (keys[h] && strcmp(keys[h], key)) h = (h + 1) & (cap - 1);
  return h;
}

ssm_status ssm_strmap_slot(ssm_strmap *m, const char *key, int *out_found, void ***out_slot) {
  *out_found = 0;
  *out_slot = NULL;
  if ((m->n + 1) * 2 > m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    const char **keys;
    void **vals;
    SSM_TRY(ssm_status_wrap(ssm_alloc(cap, sizeof *keys, (void **)&keys), "a map of %zu names", cap));
    ssm_status s = ssm_alloc(cap, sizeof *vals, (void **)&vals);
    if (s) {
      free(keys);
      return ssm_status_wrap(s, "a map of %zu names", cap);
    }
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
  *out_slot = &m->vals[h];
  return NULL;
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
  size_t failed; /* the bytes the first failed allocation wanted; 0: none failed */
};

ssm_status ssm_arena_create(ssm_arena **out) {
  return ssm_status_wrap(ssm_alloc(1, sizeof(ssm_arena), (void **)out), "an arena");
}

void ssm_arena_destroy(ssm_arena *a) {
  if (!a) return;
  for (chunk *c = a->head, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(a);
}

static void *arena_failed(ssm_arena *a, size_t size) {
  if (size == SIZE_MAX) failed(size);
  if (!a->failed) a->failed = size ? size : 1;
  return NULL;
}

void *ssm_arena_alloc(ssm_arena *a, size_t size) {
  if (a->failed) return NULL;
  if (size > SIZE_MAX - 65536 - sizeof(chunk)) return arena_failed(a, SIZE_MAX);
  size = (size + 15) & ~(size_t)15;
  if (!a->head || a->head->cap - a->head->used < size) {
    size_t cap = size > 65536 ? size : 65536;
    chunk *c = ssm_malloc_(sizeof(chunk) + cap);
    if (!c) return arena_failed(a, sizeof(chunk) + cap);
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

ssm_status ssm_arena_status(const ssm_arena *a, const char *what) {
  return a->failed ? ssm_nomem(a->failed, what) : NULL;
}

ssm_status ssm_arena_check(const ssm_arena *a, ssm_status s, const char *what) {
  if (!a->failed || ssm_status_code(s) == SSM_ERR_NOMEM) return s;
  ssm_status_free(s);
  return ssm_arena_status(a, what);
}

/* What the string functions give once the arena has failed. */
static char arena_no_text[1];

char *ssm_arena_strndup(ssm_arena *a, const char *s, size_t n) {
  char *d = n < SIZE_MAX ? ssm_arena_alloc(a, n + 1) : arena_failed(a, SIZE_MAX);
  if (!d) return arena_no_text;
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

char *ssm_arena_strdup(ssm_arena *a, const char *s) {
  return ssm_arena_strndup(a, s, strlen(s));
}

char *ssm_arena_printf(ssm_arena *a, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int k = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  char *d = k < 0 ? NULL : ssm_arena_alloc(a, (size_t)k + 1);
  if (d) vsnprintf(d, (size_t)k + 1, fmt, ap);
  va_end(ap);
  return d ? d : arena_no_text;
}
