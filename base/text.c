/*
 * text.c — the string builder, FNV-1a hashing, and reading whole files.
 */
#include <errno.h>
#include <string.h>

#include "base/base.h"

void ssm_sb_vprintf(ssm_sb *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int k = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (k < 0) k = 0;
  b->s = ssm_vec_grow_(b->s, &b->cap, b->n + (size_t)k + 1, 1);
  vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
  b->n += (size_t)k;
}

void ssm_sb_printf(ssm_sb *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ssm_sb_vprintf(b, fmt, ap);
  va_end(ap);
}

void ssm_sb_append(ssm_sb *b, const void *data, size_t n) {
  b->s = ssm_vec_grow_(b->s, &b->cap, b->n + n + 1, 1);
  if (n) memcpy(b->s + b->n, data, n);
  b->n += n;
  b->s[b->n] = 0;
}

const char *ssm_sb_str(const ssm_sb *b) { return b->s ? b->s : ""; }

char *ssm_sb_take(ssm_sb *b) {
  char *s = b->s ? b->s : ssm_xstrdup("");
  *b = (ssm_sb){0};
  return s;
}

void ssm_sb_free(ssm_sb *b) {
  free(b->s);
  *b = (ssm_sb){0};
}

uint64_t ssm_fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

ssm_status ssm_file_read(const char *path, size_t max_bytes, char **out_data,
                         size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  if (!max_bytes) max_bytes = (size_t)1 << 30;
  FILE *f = fopen(path, "rb");
  if (!f) return ssm_status_new(SSM_ERR_IO, "%s: %s", path, strerror(errno));
  ssm_sb b = {0};
  char chunk[65536];
  size_t r;
  while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (r > max_bytes - b.n) {
      ssm_sb_free(&b);
      fclose(f);
      return ssm_status_new(SSM_ERR_INVALID, "%s: file larger than %zu bytes", path,
                            max_bytes);
    }
    ssm_sb_append(&b, chunk, r);
  }
  int err = ferror(f) ? (errno ? errno : EIO) : 0;
  fclose(f);
  if (err) {
    ssm_sb_free(&b);
    return ssm_status_new(SSM_ERR_IO, "%s: read error (%s)", path, strerror(err));
  }
  *out_size = b.n;
  *out_data = ssm_sb_take(&b);
  return NULL;
}
