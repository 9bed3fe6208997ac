/*
 * status.c — error statuses, the assert that names its place, the log
 * hook, and progress reports.
 */
#include <stdarg.h>
#include <string.h>
#include <time.h>

#include "base/base.h"

struct ssm_status_s {
  ssm_code code;
  char *msg;
};

/* Statuses allocate with plain malloc, outside the count of
 * ssm_alloc_fail_at: reporting a failure must not be the next failure.
 * When even that fails, the status is this one, which is never freed. */
static char nomem_msg[] = "out of host memory (while reporting an error)";
static struct ssm_status_s nomem_status = {SSM_ERR_NOMEM, nomem_msg};

/* The text of `fmt`, malloc'd; NULL when out of memory. */
static char *vformat(const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int k = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (k < 0) k = 0;
  char *m = malloc((size_t)k + 1);
  if (m) vsnprintf(m, (size_t)k + 1, fmt, ap);
  return m;
}

ssm_status ssm_status_new(ssm_code code, const char *fmt, ...) {
  ssm_status s = malloc(sizeof *s);
  if (!s) return &nomem_status;
  va_list ap;
  va_start(ap, fmt);
  s->msg = vformat(fmt, ap);
  va_end(ap);
  if (!s->msg) {
    free(s);
    return &nomem_status;
  }
  s->code = code == SSM_OK ? SSM_ERR_INTERNAL : code;
  return s;
}

static char *format(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = vformat(fmt, ap);
  va_end(ap);
  return m;
}

ssm_status ssm_status_wrap(ssm_status s, const char *fmt, ...) {
  if (!s || s == &nomem_status) return s;
  va_list ap;
  va_start(ap, fmt);
  char *context = vformat(fmt, ap);
  va_end(ap);
  char *m = context ? format("%s: %s", context, s->msg) : NULL;
  free(context);
  if (m) {
    free(s->msg);
    s->msg = m;
  }
  return s;
}

ssm_code ssm_status_code(ssm_status s) { return s ? s->code : SSM_OK; }
const char *ssm_status_message(ssm_status s) { return s ? s->msg : "ok"; }

void ssm_status_free(ssm_status s) {
  if (!s || s == &nomem_status) return;
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
  if (!m) return;
  g_log_fn(m, g_log_user);
  free(m);
}

ssm_status ssm_progress_report(const ssm_progress *p, const char *what, uint64_t done,
                               uint64_t total) {
  if (!p || !p->fn || !p->fn(what, done, total, p->user)) return NULL;
  return ssm_status_new(SSM_ERR_CANCELLED, "%s: cancelled", what);
}

double ssm_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
