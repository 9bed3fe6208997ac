/*
 * fuzz.h — shared by the libFuzzer targets of tests/fuzz: the input bytes as
 * a file (an in-memory memfd, reached through /proc/self/fd) for loaders that
 * take a path, a NUL-terminated copy for parsers that take text, and the
 * abort that turns a broken property into a crash libFuzzer records.
 */
#ifndef SSM_FUZZ_H
#define SSM_FUZZ_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/base.h"

/* Replaces the contents of this process's one memfd by `data`; returns a
 * path that opens it. */
static inline const char *fuzz_file(const uint8_t *data, size_t size) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("ssm-fuzz", MFD_CLOEXEC);
    if (fd < 0) abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) abort();
  return path;
}

/* A malloc'd NUL-terminated copy. */
static inline char *fuzz_text(const uint8_t *data, size_t size) {
  char *t = malloc(size + 1);
  if (!t) abort();
  if (size) memcpy(t, data, size);
  t[size] = 0;
  return t;
}

/* Prints the broken property and aborts (libFuzzer saves the input). */
static inline void fuzz_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fuzz property broken: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  abort();
}

/* An error status must carry a message; frees it. */
static inline void fuzz_check_error(ssm_status s) {
  const char *m = ssm_status_message(s);
  if (!m || !*m) fuzz_fail("error status with an empty message");
  ssm_status_free(s);
}

#endif
