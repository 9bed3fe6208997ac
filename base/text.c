/*
 * text.c — the string builder, FNV-1a hashing, and reading whole files.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

void ssm_sb_clear(ssm_sb *b) {
  b->n = 0;
  if (b->s) b->s[0] = 0;
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

/* Writes the parts to an open descriptor; 0 or an errno. */
static int write_all(int fd, int n, const void *const *parts, const size_t *sizes) {
  for (int i = 0; i < n; i++)
    for (size_t done = 0; done < sizes[i];) {
      ssize_t w = write(fd, (const char *)parts[i] + done, sizes[i] - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return w < 0 ? errno : EIO;
      done += (size_t)w;
    }
  return 0;
}

ssm_status ssm_file_write(const char *path, int n, const void *const *parts,
                          const size_t *sizes) {
  struct stat st;
  int err = 0;
  if (!stat(path, &st) && !S_ISREG(st.st_mode)) {
    /* a device or a pipe (/dev/null, /dev/stdout): written in place */
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    err = fd < 0 ? errno : write_all(fd, n, parts, sizes);
    if (fd >= 0 && close(fd) && !err) err = errno;
  } else {
    ssm_sb tmp = {0};
    ssm_sb_printf(&tmp, "%s.tmp-%ld", path, (long)getpid());
    int fd = open(tmp.s, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    err = fd < 0 ? errno : write_all(fd, n, parts, sizes);
    if (!err && fsync(fd)) err = errno;
    if (fd >= 0 && close(fd) && !err) err = errno;
    if (!err && rename(tmp.s, path)) err = errno;
    if (err && fd >= 0) unlink(tmp.s);
    ssm_sb_free(&tmp);
  }
  if (err) return ssm_status_new(SSM_ERR_IO, "%s: cannot write (%s)", path, strerror(err));
  return NULL;
}
