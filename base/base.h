/*
 * base.h — the few things every layer of ssmc shares: the status type that
 * carries user-facing errors, the arena that owns IR memory, and the log hook.
 *
 * A status is NULL for success. An error status owns a formatted message that
 * already names the place ("models/x.yaml:12:7: unknown op 'scna'"). Callers
 * propagate with SSM_TRY and add context with ssm_status_wrap. Broken internal
 * invariants are asserts (SSM_ASSERT), never statuses.
 */
#ifndef SSM_BASE_H
#define SSM_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum {
  SSM_OK = 0,
  SSM_ERR_INVALID,     /* bad user input: YAML, IR text, files, flags */
  SSM_ERR_IO,          /* open/read/write/mmap failed */
  SSM_ERR_NOMEM,       /* host allocation failed */
  SSM_ERR_UNSUPPORTED, /* valid input we do not handle (yet) */
  SSM_ERR_DEVICE,      /* Vulkan/device failure */
  SSM_ERR_INTERNAL,    /* should not happen; still reported, not crashed */
} ssm_code;

typedef struct ssm_status_s *ssm_status;

#if defined(__GNUC__)
#define SSM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SSM_PRINTF(a, b)
#endif

/* Creates an error status with a printf-formatted message. Never returns NULL. */
ssm_status ssm_status_new(ssm_code code, const char *fmt, ...) SSM_PRINTF(2, 3);
/* Prefixes "<context>: " to the message of `s` (NULL passes through). */
ssm_status ssm_status_wrap(ssm_status s, const char *fmt, ...) SSM_PRINTF(2, 3);
/* The code of `s` (SSM_OK for NULL). */
ssm_code ssm_status_code(ssm_status s);
/* The message of `s` ("ok" for NULL). Owned by the status. */
const char *ssm_status_message(ssm_status s);
/* Frees `s`; NULL is fine. */
void ssm_status_free(ssm_status s);

/* Returns the status of `expr` from the calling function if it is an error. */
#define SSM_TRY(expr)                                                          \
  do {                                                                         \
    ssm_status ssm_try_s_ = (expr);                                            \
    if (ssm_try_s_) return ssm_try_s_;                                         \
  } while (0)

/* Internal invariant; names file and line, then aborts. */
#define SSM_ASSERT(cond)                                                       \
  do {                                                                         \
    if (!(cond)) ssm_assert_fail(#cond, __FILE__, __LINE__);                   \
  } while (0)
void ssm_assert_fail(const char *cond, const char *file, int line);

/* Log hook: library code never prints; it calls ssm_log, which forwards to
 * the hook installed by the tool (default: none). */
typedef void (*ssm_log_fn)(const char *msg, void *user);
void ssm_log_set(ssm_log_fn fn, void *user);
void ssm_log(const char *fmt, ...) SSM_PRINTF(1, 2);

/* Checked size arithmetic: return 0 on overflow, 1 otherwise. */
int ssm_size_mul(size_t a, size_t b, size_t *out);
int ssm_size_add(size_t a, size_t b, size_t *out);

/* ---- arena ------------------------------------------------------------- */

/* An arena hands out memory that is freed all at once by ssm_arena_destroy. */
typedef struct ssm_arena ssm_arena;

ssm_arena *ssm_arena_create(void);
void ssm_arena_destroy(ssm_arena *a);
/* Zeroed, 16-byte aligned memory; aborts on exhaustion of host memory. */
void *ssm_arena_alloc(ssm_arena *a, size_t size);
char *ssm_arena_strdup(ssm_arena *a, const char *s);
char *ssm_arena_strndup(ssm_arena *a, const char *s, size_t n);
char *ssm_arena_printf(ssm_arena *a, const char *fmt, ...) SSM_PRINTF(2, 3);

/* ---- files ------------------------------------------------------------- */

/* Reads a whole file into malloc'd memory with a terminating NUL.
 * `max_bytes` bounds what is accepted (0: 1 GiB). */
ssm_status ssm_file_read(const char *path, size_t max_bytes, char **out_data,
                         size_t *out_size);

#endif
