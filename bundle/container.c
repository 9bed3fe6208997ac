/*
 * bundle.c — the .ssmb container: header, JSON manifest, blob section.
 *
 * Layout (all integers little-endian):
 *   0  "SSMB"            4  u32 format version
 *   8  u64 manifest off  16 u64 manifest size
 *   24 u64 blobs off     32 u64 blobs size
 *   40 u64 FNV-1a 64 of bytes [64, end)       48 16 reserved zero bytes
 *   64 manifest (JSON, not NUL-terminated), zero padding to 16, blobs.
 */
#include <errno.h>
#include <string.h>

#include "bundle/bundle.h"

#define HEADER_SIZE 64
#define MAX_BUNDLE ((uint64_t)1 << 40)

struct ssm_bundle_writer {
  unsigned char *blobs;
  size_t size, cap;
};

struct ssm_bundle {
  char *path;
  unsigned char *data;
  size_t size;
  char *manifest;
  uint64_t blobs_off, blobs_size;
};

static uint64_t fnv1a(const unsigned char *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

static void put_u32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

ssm_bundle_writer *ssm_bundle_writer_create(void) {
  ssm_bundle_writer *w = calloc(1, sizeof *w);
  if (!w) abort();
  return w;
}

void ssm_bundle_writer_destroy(ssm_bundle_writer *w) {
  if (!w) return;
  free(w->blobs);
  free(w);
}

void ssm_bundle_writer_add_blob(ssm_bundle_writer *w, const void *data, size_t n,
                                uint64_t *out_offset) {
  size_t at = (w->size + 15) & ~(size_t)15;
  size_t need = at + n;
  if (need > w->cap) {
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < need) cap *= 2;
    unsigned char *nb = realloc(w->blobs, cap);
    if (!nb) abort();
    w->blobs = nb;
    w->cap = cap;
  }
  memset(w->blobs + w->size, 0, at - w->size);
  if (n) memcpy(w->blobs + at, data, n);
  w->size = need;
  *out_offset = at;
}

ssm_status ssm_bundle_writer_save(ssm_bundle_writer *w, const char *manifest_json,
                                  const char *path) {
  size_t mlen = strlen(manifest_json);
  size_t blobs_off = (HEADER_SIZE + mlen + 15) & ~(size_t)15;
  size_t total = blobs_off + w->size;
  unsigned char *buf = calloc(1, total);
  if (!buf) return ssm_status_new(SSM_ERR_NOMEM, "%s: out of memory (%zu bytes)", path, total);
  memcpy(buf, "SSMB", 4);
  put_u32(buf + 4, SSM_BUNDLE_VERSION);
  put_u64(buf + 8, HEADER_SIZE);
  put_u64(buf + 16, mlen);
  put_u64(buf + 24, blobs_off);
  put_u64(buf + 32, w->size);
  memcpy(buf + HEADER_SIZE, manifest_json, mlen);
  if (w->size) memcpy(buf + blobs_off, w->blobs, w->size);
  put_u64(buf + 40, fnv1a(buf + HEADER_SIZE, total - HEADER_SIZE));
  ssm_status s = NULL;
  FILE *f = fopen(path, "wb");
  if (!f) s = ssm_status_new(SSM_ERR_IO, "%s: %s", path, strerror(errno));
  else {
    if (fwrite(buf, 1, total, f) != total)
      s = ssm_status_new(SSM_ERR_IO, "%s: write failed", path);
    if (fclose(f) && !s) s = ssm_status_new(SSM_ERR_IO, "%s: %s", path, strerror(errno));
  }
  free(buf);
  return s;
}

ssm_status ssm_bundle_open(const char *path, ssm_bundle **out) {
  *out = NULL;
  char *data;
  size_t size;
  SSM_TRY(ssm_file_read(path, (size_t)MAX_BUNDLE, &data, &size));
  const unsigned char *p = (const unsigned char *)data;
  ssm_status s = NULL;
  if (size < HEADER_SIZE || memcmp(p, "SSMB", 4)) {
    s = ssm_status_new(SSM_ERR_INVALID, "%s: not an ssmc bundle (bad magic or shorter than "
                       "its 64-byte header)", path);
    goto fail;
  }
  uint32_t version = get_u32(p + 4);
  if (version != SSM_BUNDLE_VERSION) {
    s = ssm_status_new(SSM_ERR_INVALID, "%s: bundle format version %u, but this ssmc reads "
                       "version %u; recompile it with `ssmc compile`", path, version,
                       SSM_BUNDLE_VERSION);
    goto fail;
  }
  uint64_t moff = get_u64(p + 8), mlen = get_u64(p + 16);
  uint64_t boff = get_u64(p + 24), blen = get_u64(p + 32);
  if (moff != HEADER_SIZE || mlen > size - moff || boff < moff + mlen || boff > size ||
      blen != size - boff) {
    s = ssm_status_new(SSM_ERR_INVALID, "%s: truncated or corrupt bundle (sections "
                       "[%llu,+%llu) and [%llu,+%llu) do not fit its %zu bytes)", path,
                       (unsigned long long)moff, (unsigned long long)mlen,
                       (unsigned long long)boff, (unsigned long long)blen, size);
    goto fail;
  }
  if (fnv1a(p + HEADER_SIZE, size - HEADER_SIZE) != get_u64(p + 40)) {
    s = ssm_status_new(SSM_ERR_INVALID, "%s: corrupt bundle (checksum mismatch)", path);
    goto fail;
  }
  ssm_bundle *b = calloc(1, sizeof *b);
  if (!b) abort();
  b->path = strdup(path);
  b->data = (unsigned char *)data;
  b->size = size;
  b->manifest = malloc(mlen + 1);
  if (!b->path || !b->manifest) abort();
  memcpy(b->manifest, p + moff, mlen);
  b->manifest[mlen] = 0;
  b->blobs_off = boff;
  b->blobs_size = blen;
  if (strlen(b->manifest) != mlen) {
    ssm_bundle_close(b);
    return ssm_status_new(SSM_ERR_INVALID, "%s: corrupt bundle (NUL byte in manifest)", path);
  }
  *out = b;
  return NULL;
fail:
  free(data);
  return s;
}

void ssm_bundle_close(ssm_bundle *b) {
  if (!b) return;
  free(b->path);
  free(b->data);
  free(b->manifest);
  free(b);
}

const char *ssm_bundle_path(const ssm_bundle *b) { return b->path; }
const char *ssm_bundle_manifest(const ssm_bundle *b) { return b->manifest; }

ssm_status ssm_bundle_blob(const ssm_bundle *b, uint64_t offset, uint64_t size,
                           const void **out) {
  *out = NULL;
  if (offset > b->blobs_size || size > b->blobs_size - offset)
    return ssm_status_new(SSM_ERR_INVALID, "%s: blob [%llu,+%llu) lies outside the %llu-byte "
                          "blob section", b->path, (unsigned long long)offset,
                          (unsigned long long)size, (unsigned long long)b->blobs_size);
  *out = b->data + b->blobs_off + offset;
  return NULL;
}
