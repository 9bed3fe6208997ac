/*
 * cache.c — the prompt cache: state snapshots keyed by the token sequence
 * they cover, under a byte budget with least-recently-used eviction.
 *
 * An entry keeps its tokens and an FNV-1a hash of them. A lookup hashes
 * every prefix of the prompt once (O(prompt)) and compares each entry's
 * hash with the prefix of its length, confirming a match with memcmp
 * (O(entries)); the longest match wins. The entry count is bounded by
 * budget / snapshot size, so a scan is cheap next to one prefill chunk.
 */
#include <string.h>

#include "serve/internal.h"

typedef struct {
  int32_t *tokens;
  size_t n;
  uint64_t hash, used;
  ssmc_snapshot *snap;
  uint64_t bytes;
} entry;

struct ssm_pcache {
  SSM_VEC(entry) e;
  uint64_t budget, held, tick, evictions;
  uint64_t *prefix; /* scratch: hash of each prefix */
  size_t prefix_cap;
};

static uint64_t mix(uint64_t h, int32_t t) { return ssm_fnv1a(h, &t, sizeof t); }

ssm_status ssm_pcache_create(uint64_t budget, ssm_pcache **out) {
  SSM_TRY(ssm_status_wrap(ssm_alloc(1, sizeof **out, (void **)out), "the prompt cache"));
  (*out)->budget = budget;
  return NULL;
}

static void drop(ssm_pcache *c, size_t i) {
  c->held -= c->e.items[i].bytes;
  ssmc_snapshot_free(c->e.items[i].snap);
  free(c->e.items[i].tokens);
  c->e.items[i] = c->e.items[--c->e.n];
}

void ssm_pcache_destroy(ssm_pcache *c) {
  if (!c) return;
  while (c->e.n) drop(c, 0);
  ssm_vec_free(&c->e);
  free(c->prefix);
  free(c);
}

static int find(const ssm_pcache *c, const int32_t *tokens, size_t n, uint64_t h) {
  for (size_t i = 0; i < c->e.n; i++)
    if (c->e.items[i].n == n && c->e.items[i].hash == h && !memcmp(c->e.items[i].tokens, tokens, n * 4))
      return (int)i;
  return -1;
}

static uint64_t hash_of(const int32_t *tokens, size_t n) {
  uint64_t h = SSM_FNV_INIT;
  for (size_t i = 0; i < n; i++) h = mix(h, tokens[i]);
  return h;
}

const ssmc_snapshot *ssm_pcache_lookup(ssm_pcache *c, const int32_t *tokens, size_t n,
                                       size_t max_len, size_t *out_len) {
  *out_len = 0;
  if (max_len > n) max_len = n;
  if (!c->e.n || !max_len) return NULL;
  if (c->prefix_cap < max_len + 1) {
    ssm_status s = ssm_realloc((void **)&c->prefix, max_len + 1, sizeof *c->prefix, "the prompt cache");
    if (s) { /* a miss */
      ssm_status_free(s);
      return NULL;
    }
    c->prefix_cap = max_len + 1;
  }
  c->prefix[0] = SSM_FNV_INIT;
  for (size_t i = 0; i < max_len; i++) c->prefix[i + 1] = mix(c->prefix[i], tokens[i]);
  entry *best = NULL;
  for (size_t i = 0; i < c->e.n; i++) {
    entry *e = &c->e.items[i];
    if (e->n <= max_len && (!best || e->n > best->n) && e->hash == c->prefix[e->n] &&
        !memcmp(e->tokens, tokens, e->n * 4))
      best = e;
  }
  if (!best) return NULL;
  best->used = ++c->tick;
  *out_len = best->n;
  return best->snap;
}

int ssm_pcache_has(const ssm_pcache *c, const int32_t *tokens, size_t n) {
  return find(c, tokens, n, hash_of(tokens, n)) >= 0;
}

void ssm_pcache_insert(ssm_pcache *c, const int32_t *tokens, size_t n, ssmc_snapshot *snap) {
  uint64_t bytes = ssmc_snapshot_bytes(snap), h = hash_of(tokens, n);
  int old = find(c, tokens, n, h);
  if (old >= 0) drop(c, (size_t)old);
  if (bytes > c->budget) {
    ssmc_snapshot_free(snap);
    return;
  }
  while (c->held + bytes > c->budget && c->e.n) {
    size_t lru = 0;
    for (size_t i = 1; i < c->e.n; i++)
      if (c->e.items[i].used < c->e.items[lru].used) lru = i;
    drop(c, lru);
    c->evictions++;
  }
  entry e = {ssm_malloc_(n * 4 + 4), n, h, ++c->tick, snap, bytes};
  ssm_status s = e.tokens ? ssm_vec_push(&c->e, e) : NULL;
  if (!e.tokens || s) { /* no room to keep it: the cache only misses it */
    ssm_status_free(s);
    free(e.tokens);
    ssmc_snapshot_free(snap);
    return;
  }
  memcpy(e.tokens, tokens, n * 4);
  c->held += bytes;
}

void ssm_pcache_stats(const ssm_pcache *c, uint64_t *entries, uint64_t *bytes, uint64_t *evictions) {
  *entries = c->e.n;
  *bytes = c->held;
  *evictions = c->evictions;
}
