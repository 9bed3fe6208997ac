/*
 * status.c — error statuses, the assert that names its place, the log
 * hook, and progress reports.
 */
#include <stdarg.h>
#include <string.h>

#include "base/base.h"

struct ssm_status_s {
  ssm_code code;
  char *msg;
};

static char *vformat(const char *fmt, va_list ap) {
  ssm_sb b = {0};
  ssm_sb_vprintf(&b, fmt, ap);
  return ssm_sb_take(&b);
}

ssm_status ssm_status_new(ssm_code code, const char *fmt, ...) {
  ssm_status s = ssm_xmalloc(sizeof *s);
  va_list ap;
  va_start(ap, fmt);
  s->msg = vformat(fmt, ap);
  va_end(ap);
  s->code = code == SSM_OK ? SSM_ERR_INTERNAL : code;
  return s;
}

ssm_status ssm_status_wrap(ssm_status s, const char *fmt, ...) {
  if (!s) return NULL;
  ssm_sb b = {0};
  va_list ap;
  va_start(ap, fmt);
  ssm_sb_vprintf(&b, fmt, ap);
  va_end(ap);
  ssm_sb_printf(&b, ": %s", s->msg);
  free(s->msg);
  s->msg = ssm_sb_take(&b);
  return s;
}

ssm_code ssm_status_code(ssm_status s) { return s ? s->code : SSM_OK; }
const char *ssm_status_message(ssm_status s) { return s ? s->msg : "ok"; }

void ssm_status_free(ssm_status s) {
  if (!s) return;
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
  g_log_fn(m, g_log_user);
  free(m);
}

ssm_status ssm_progress_report(const ssm_progress *p, const char *what, uint64_t done,
                               uint64_t total) {
  if (!p || !p->fn || !p->fn(what, done, total, p->user)) return NULL;
  return ssm_status_new(SSM_ERR_CANCELLED, "%s: cancelled", what);
}
