/*
 * text.c — the string builder, and reading and writing whole files.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

/* Room for `more` bytes and a NUL after the text; 0 when the growth fails,
 * which is remembered and drops every later append. */
static int sb_room(ssm_sb *b, size_t more) {
  if (b->failed) return 0;
  if (more < SIZE_MAX - b->n) {
    if (ssm_vec_room_(&b->s, &b->cap, b->n + more + 1, 1)) return 1;
    b->failed = b->n + more + 1;
  } else {
    b->failed = SIZE_MAX;
  }
  return 0;
}

void ssm_sb_vprintf(ssm_sb *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int k = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (k < 0) k = 0;
  if (!sb_room(b, (size_t)k)) return;
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
  if (!sb_room(b, n)) return;
  if (n) memcpy(b->s + b->n, data, n);
  b->n += n;
  b->s[b->n] = 0;
}

const char *ssm_sb_str(const ssm_sb *b) { return b->s ? b->s : ""; }

ssm_status ssm_sb_status(const ssm_sb *b, const char *what) {
  return b->failed ? ssm_nomem(b->failed, what) : NULL;
}

ssm_status ssm_sb_take(ssm_sb *b, const char *what, char **out) {
  *out = NULL;
  ssm_status s = ssm_sb_status(b, what);
  if (!s && !b->s) s = ssm_strdup("", what, out);
  else if (!s) *out = b->s;
  else free(b->s);
  *b = (ssm_sb){0};
  return s;
}

void ssm_sb_xprintf(ssm_sb *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ssm_sb_vprintf(b, fmt, ap);
  va_end(ap);
  if (b->failed) ssm_fatal_nomem(b->failed);
}

char *ssm_sb_xtake(ssm_sb *b) {
  if (b->failed) ssm_fatal_nomem(b->failed);
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

const char *ssm_file_kind(mode_t m) {
  return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

ssm_status ssm_file_open(const char *path, int *out_fd, size_t *out_size) {
  *out_fd = -1;
  *out_size = 0;
  /* O_NONBLOCK: opening a FIFO must not wait for a writer */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return ssm_status_new(SSM_ERR_IO, "%s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st)) {
    int err = errno;
    close(fd);
    return ssm_status_new(SSM_ERR_IO, "%s: %s", path, strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return ssm_status_new(SSM_ERR_INVALID, "%s: is %s, not a regular file", path,
                          ssm_file_kind(st.st_mode));
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *out_fd = fd;
  *out_size = (size_t)st.st_size;
  return NULL;
}

ssm_status ssm_file_read(const char *path, size_t max_bytes, char **out_data,
                         size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  if (!max_bytes) max_bytes = (size_t)1 << 30;
  int fd;
  size_t size;
  SSM_TRY(ssm_file_open(path, &fd, &size));
  if (size > max_bytes) {
    close(fd);
    return ssm_status_new(SSM_ERR_INVALID, "%s: file larger than %zu bytes (it has %zu)", path,
                          max_bytes, size);
  }
  char *buf;
  ssm_status s = ssm_alloc(size + 1, 1, (void **)&buf);
  if (s) {
    close(fd);
    return ssm_status_wrap(s, "%s", path);
  }
  size_t n = 0;
  int err = 0;
  while (n <= size) { /* one byte more than expected: the file grew */
    ssize_t r = read(fd, buf + n, size + 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      err = r < 0 ? errno : 0;
      break;
    }
    n += (size_t)r;
  }
  close(fd);
  if (!err && n != size)
    s = ssm_status_new(SSM_ERR_IO, "%s: the file changed size while it was read", path);
  else if (err)
    s = ssm_status_new(SSM_ERR_IO, "%s: read error (%s)", path, strerror(err));
  if (s) {
    free(buf);
    return s;
  }
  buf[n] = 0;
  *out_data = buf;
  *out_size = n;
  return NULL;
}

int ssm_file_same(const char *a, const char *b) {
  struct stat sa, sb;
  return !stat(a, &sa) && !stat(b, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int ssm_file_write_all(int fd, int n, const void *const *parts, const size_t *sizes) {
  for (int i = 0; i < n; i++)
    for (size_t done = 0; done < sizes[i];) {
      ssize_t w = write(fd, (const char *)parts[i] + done, sizes[i] - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return w < 0 ? errno : EIO;
      done += (size_t)w;
    }
  return 0;
}

/* A temporary file is anonymous where the file system allows (O_TMPFILE):
 * it has no name until ssm_file_commit links it, so a process killed while
 * it writes leaves nothing behind. Its `tmp` is then ANON followed by the
 * template of the name it is linked under; otherwise `tmp` names it. */
#define ANON '\x01'

ssm_status ssm_file_temp(const char *path, char **out_tmp, int *out_fd) {
  *out_tmp = NULL;
  *out_fd = -1;
  const char *slash = strrchr(path, '/');
  ssm_sb t = {0};
  int fd = -1;
#ifdef O_TMPFILE
  ssm_sb dir = {0};
  ssm_sb_printf(&dir, "%.*s", slash ? (int)(slash - path) + 1 : 1, slash ? path : ".");
  ssm_status ds = ssm_sb_status(&dir, path);
  if (!ds) fd = open(dir.s, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666); /* the mode as the umask allows */
  ssm_sb_free(&dir);
  SSM_TRY(ds);
  if (fd >= 0) ssm_sb_append(&t, (char[]){ANON}, 1);
#endif
  if (slash) ssm_sb_printf(&t, "%.*s/.%s.XXXXXX", (int)(slash - path), path, slash + 1);
  else ssm_sb_printf(&t, ".%s.XXXXXX", path);
  ssm_status s = ssm_sb_status(&t, path);
  if (s) {
    if (fd >= 0) close(fd);
    ssm_sb_free(&t);
    return s;
  }
  if (fd < 0) {
    fd = mkostemp(t.s, O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      ssm_sb_free(&t);
      return ssm_status_new(SSM_ERR_IO, "%s: cannot write (%s)", path, strerror(err));
    }
    mode_t mask = umask(0); /* what open(..., 0666) would give */
    umask(mask);
    fchmod(fd, 0666 & ~mask);
  }
  *out_tmp = t.s;
  *out_fd = fd;
  return NULL;
}

/* Links the anonymous file `fd` under `name`, a template ending in
 * XXXXXX that is filled in (a fresh name each try); 0 or an errno. */
static int link_anonymous(int fd, char *name) {
  static unsigned counter;
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  char *x = name + strlen(name) - 6;
  for (int attempt = 0; attempt < 100; attempt++) {
    uint64_t h = ssm_fnv1a(SSM_FNV_INIT, &fd, sizeof fd);
    unsigned pid = (unsigned)getpid(), k = counter++;
    h = ssm_fnv1a(h, &pid, sizeof pid);
    h = ssm_fnv1a(h, &k, sizeof k);
    for (int i = 0; i < 6; i++, h >>= 6)
      x[i] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"[h & 63];
    if (!linkat(AT_FDCWD, proc, AT_FDCWD, name, AT_SYMLINK_FOLLOW)) return 0;
    if (errno != EEXIST) return errno;
  }
  return EEXIST;
}

/* Makes the rename that published `path` durable: an fsync of the
 * directory that holds it. Best-effort, on purpose: by now the file is
 * complete and in place under its name (its data was synced before the
 * rename), so a directory that cannot be opened or synced (some file
 * systems refuse fsync on a directory) is not an error. Reporting one would
 * tell the user the write failed, and that the old file is kept, when the
 * new one is there; all that is at stake is a crash in the next moments. */
static void sync_dir(const char *path) {
  /* (the name in a buffer of its own, not allocated: a step that cannot
   * fail, so the file's write has the allocations it had) */
  char dir[PATH_MAX];
  const char *slash = strrchr(path, '/');
  size_t n = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
  if (n >= sizeof dir) return;
  memcpy(dir, slash ? path : ".", slash ? n : 1);
  dir[slash ? n : 1] = 0;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

ssm_status ssm_file_commit(char *tmp, int fd, const char *path, int failed) {
  int anon = tmp[0] == ANON;
  char *name = tmp + anon;
  int err = failed ? 0 : fsync(fd) ? errno : 0;
  int linked = !anon;
  if (!err && !failed && anon) linked = !(err = link_anonymous(fd, name));
  if (close(fd) && !err && !failed) err = errno;
  if (!err && !failed && rename(name, path)) err = errno;
  if (!err && !failed) sync_dir(path);
  if ((err || failed) && linked) unlink(name);
  free(tmp);
  if (err) return ssm_status_new(SSM_ERR_IO, "%s: cannot write (%s)", path, strerror(err));
  return NULL;
}

ssm_status ssm_file_write(const char *path, int n, const void *const *parts,
                          const size_t *sizes) {
  struct stat st;
  if (!stat(path, &st) && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode))
      return ssm_status_new(SSM_ERR_INVALID, "%s: is a directory", path);
    /* a device or a pipe (/dev/null, /dev/stdout): written in place */
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    int err = fd < 0 ? errno : ssm_file_write_all(fd, n, parts, sizes);
    if (fd >= 0 && close(fd) && !err) err = errno;
    if (err) return ssm_status_new(SSM_ERR_IO, "%s: cannot write (%s)", path, strerror(err));
    return NULL;
  }
  char *tmp;
  int fd;
  SSM_TRY(ssm_file_temp(path, &tmp, &fd));
  int err = ssm_file_write_all(fd, n, parts, sizes);
  ssm_status s = ssm_file_commit(tmp, fd, path, err != 0);
  if (err) {
    ssm_status_free(s);
    return ssm_status_new(SSM_ERR_IO, "%s: cannot write (%s)", path, strerror(err));
  }
  return s;
}

ssm_status ssm_file_bundle_magic(const char *path, const char *head, long n, int *out_bundle) {
  *out_bundle = n >= 4 && !memcmp(head, "SSMB", 4);
  size_t len = strlen(path);
  int named = len > 5 && !strcmp(path + len - 5, ".ssmb");
  if (*out_bundle || (!named && (n <= 0 || !memchr(head, 0, (size_t)n)))) return NULL;
  return ssm_status_new(SSM_ERR_INVALID, "%s: not a bundle (its first bytes are not \"SSMB\"), "
                        "nor a model description or IR text: a damaged bundle? Compile it again",
                        path);
}

ssm_status ssm_file_mkdirs(const char *dir) {
  char *p;
  SSM_TRY(ssm_strdup(dir, "a directory's name", &p));
  int err = 0;
  for (char *c = p + 1; !err; c++) {
    if (*c && *c != '/') continue;
    char was = *c;
    *c = 0;
    if (mkdir(p, 0700) && errno != EEXIST) err = errno;
    *c = was;
    if (!was) break;
  }
  free(p);
  struct stat sb;
  if (!err && (stat(dir, &sb) || !S_ISDIR(sb.st_mode))) err = ENOTDIR;
  return err ? ssm_status_new(SSM_ERR_IO, "%s: cannot create (%s)", dir, strerror(err)) : NULL;
}
