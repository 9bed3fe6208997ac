/*
 * container.c — the .ssmb file (layout in bundle.h): writing it atomically,
 * and reading it with every header field checked before the manifest is
 * parsed.
 */
#include <string.h>

#include "bundle/bundle.h"
#include "bundle/internal.h"

#define HEADER_SIZE 64
#define MAX_BUNDLE ((uint64_t)1 << 40)

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

ssm_status ssm_bundle_new(const char *name, ssm_bundle **out) {
  ssm_bundle *b;
  *out = NULL;
  SSM_TRY(ssm_status_wrap(ssm_alloc(1, sizeof *b, (void **)&b), "%s", name));
  ssm_status s = ssm_arena_create(&b->arena);
  if (!s) b->name = ssm_arena_strdup(b->arena, name);
  if (!s) s = ssm_arena_status(b->arena, "the bundle");
  if (s) {
    ssm_bundle_close(b);
    return ssm_status_wrap(s, "%s", name);
  }
  *out = b;
  return NULL;
}

void ssm_bundle_close(ssm_bundle *b) {
  if (!b) return;
  free(b->data);
  ssm_arena_destroy(b->arena);
  free(b);
}

const char *ssm_bundle_name(const ssm_bundle *b) { return b->name; }
const ssm_manifest *ssm_bundle_manifest(const ssm_bundle *b) { return &b->manifest; }
ssm_manifest *ssm_bundle_manifest_mut(ssm_bundle *b) { return &b->manifest; }
ssm_arena *ssm_bundle_arena(ssm_bundle *b) { return b->arena; }

void ssm_bundle_set_blobs(ssm_bundle *b, void *blobs, uint64_t size) {
  free(b->data);
  b->data = blobs;
  b->blobs = blobs;
  b->blobs_size = size;
}

const void *ssm_bundle_blob(const ssm_bundle *b, ssm_blob blob) {
  SSM_ASSERT(blob.offset <= b->blobs_size && blob.size <= b->blobs_size - blob.offset);
  return b->blobs + blob.offset;
}

ssm_status ssm_bundle_set_source(ssm_bundle *b, const char *dir, const ssm_mf_source_file *files,
                                 int n) {
  ssm_manifest *m = &b->manifest;
  const char *sdir = ssm_arena_strdup(b->arena, dir);
  ssm_mf_source_file *sf = ssm_arena_alloc(b->arena, sizeof *files * (size_t)(n ? n : 1));
  if (!sf) return ssm_arena_status(b->arena, "the bundle's source files");
  m->source_dir = sdir;
  m->nsource_files = n;
  m->source_files = sf;
  for (int i = 0; i < n; i++)
    m->source_files[i] = (ssm_mf_source_file){ssm_arena_strdup(b->arena, files[i].name),
                                              files[i].hash};
  return ssm_arena_status(b->arena, "the bundle's source files");
}

ssm_status ssm_bundle_set_weights_file(ssm_bundle *b, const char *name, uint64_t fingerprint) {
  b->manifest.weights_file = ssm_arena_strdup(b->arena, name);
  b->manifest.weights_fingerprint = fingerprint;
  return ssm_arena_status(b->arena, "the bundle's weights file");
}

ssm_status ssm_bundle_serialize(const ssm_bundle *b, void **out_data, size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  char *json = ssm_manifest_to_json(&b->manifest);
  if (!json)
    return ssm_status_new(SSM_ERR_NOMEM, "%s: out of host memory for the manifest text", b->name);
  size_t mlen = strlen(json);
  size_t blobs_off = (HEADER_SIZE + mlen + 15) & ~(size_t)15;
  size_t total = blobs_off + b->blobs_size;
  unsigned char *buf;
  ssm_status s = ssm_alloc(total, 1, (void **)&buf);
  if (s) {
    free(json);
    return ssm_status_wrap(s, "%s", b->name);
  }
  memcpy(buf, "SSMB", 4);
  put_u32(buf + 4, SSM_BUNDLE_VERSION);
  put_u64(buf + 8, HEADER_SIZE);
  put_u64(buf + 16, mlen);
  put_u64(buf + 24, blobs_off);
  put_u64(buf + 32, b->blobs_size);
  memcpy(buf + HEADER_SIZE, json, mlen);
  if (b->blobs_size) memcpy(buf + blobs_off, b->blobs, b->blobs_size);
  put_u64(buf + 40, ssm_fnv1a(SSM_FNV_INIT, buf + HEADER_SIZE, total - HEADER_SIZE));
  free(json);
  *out_data = buf;
  *out_size = total;
  return NULL;
}

ssm_status ssm_bundle_save(const ssm_bundle *b, const char *path) {
  void *data;
  size_t size;
  SSM_TRY(ssm_bundle_serialize(b, &data, &size));
  ssm_status s = ssm_file_write(path, 1, (const void *const[]){data}, &size);
  free(data);
  return s;
}

static int zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

/* Takes `data` (malloc'd, `size` bytes) and checks it as a bundle. */
static ssm_status from_bytes(unsigned char *data, size_t size, const char *name,
                             ssm_bundle **out) {
  *out = NULL;
  const unsigned char *p = data;
  ssm_status s = NULL;
  if (size < HEADER_SIZE || memcmp(p, "SSMB", 4)) {
    free(data);
    return ssm_status_new(SSM_ERR_INVALID, "%s: not an ssmc bundle (bad magic or shorter than "
                          "its 64-byte header)", name);
  }
  uint32_t version = get_u32(p + 4);
  uint64_t moff = get_u64(p + 8), mlen = get_u64(p + 16);
  uint64_t boff = get_u64(p + 24), blen = get_u64(p + 32);
  int reserved = 0;
  for (int i = 48; i < HEADER_SIZE; i++) reserved |= p[i];
  if (version != SSM_BUNDLE_VERSION)
    s = ssm_status_new(SSM_ERR_INVALID, "%s: bundle format version %u, but this ssmc reads "
                       "version %u; compile it again with `ssmc compile`", name, version,
                       SSM_BUNDLE_VERSION);
  else if (moff != HEADER_SIZE || mlen > size - moff || boff > size || blen != size - boff ||
           boff != ((moff + mlen + 15) & ~(uint64_t)15))
    s = ssm_status_new(SSM_ERR_INVALID, "%s: truncated or corrupt bundle (sections "
                       "[%llu,+%llu) and [%llu,+%llu) do not fit its %zu bytes)", name,
                       (unsigned long long)moff, (unsigned long long)mlen,
                       (unsigned long long)boff, (unsigned long long)blen, size);
  else if (reserved)
    s = ssm_status_new(SSM_ERR_INVALID, "%s: corrupt bundle (reserved header bytes are not "
                       "zero)", name);
  /* the header is outside the checksum: every field is checked exactly,
   * the manifest's length too (grown into the zero padding after it, the
   * JSON would still parse) */
  else if (memchr(p + moff, 0, (size_t)mlen) || !zero(p + moff + mlen, boff - moff - mlen))
    s = ssm_status_new(SSM_ERR_INVALID, "%s: corrupt bundle (the manifest's length, %llu bytes, "
                       "does not end at its text)", name, (unsigned long long)mlen);
  else if (ssm_fnv1a(SSM_FNV_INIT, p + HEADER_SIZE, size - HEADER_SIZE) != get_u64(p + 40))
    s = ssm_status_new(SSM_ERR_INVALID, "%s: corrupt bundle (checksum mismatch)", name);
  if (s) {
    free(data);
    return s;
  }
  ssm_bundle *b;
  s = ssm_bundle_new(name, &b);
  if (s) {
    free(data);
    return s;
  }
  b->data = data;
  b->blobs = data + boff;
  b->blobs_size = blen;
  s = ssm_manifest_parse((const char *)p + moff, (size_t)mlen, b->name, blen, b->arena,
                         &b->manifest);
  s = ssm_arena_check(b->arena, s, "the bundle's manifest");
  if (s) {
    ssm_bundle_close(b);
    return s;
  }
  *out = b;
  return NULL;
}

ssm_status ssm_bundle_open(const char *path, ssm_bundle **out) {
  *out = NULL;
  char *data;
  size_t size;
  SSM_TRY(ssm_file_read(path, (size_t)MAX_BUNDLE, &data, &size));
  return from_bytes((unsigned char *)data, size, path, out);
}

ssm_status ssm_bundle_open_memory(const void *data, size_t size, const char *name,
                                  ssm_bundle **out) {
  *out = NULL;
  unsigned char *copy;
  SSM_TRY(ssm_status_wrap(ssm_alloc(size, 1, (void **)&copy), "%s", name));
  if (size) memcpy(copy, data, size);
  return from_bytes(copy, size, name, out);
}
