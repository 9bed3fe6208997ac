/*
 * base.h — what every layer of ssmc shares: the status type that carries
 * user-facing errors, the log hook, checked allocation, the arena that owns
 * IR memory, growable arrays, a string builder, a hash and file reading.
 *
 * A status is NULL for success. An error status owns a formatted message that
 * already names the place ("models/x.yaml:12:7: unknown op 'scna'"). Callers
 * propagate with SSM_TRY and add context with ssm_status_wrap. Broken internal
 * invariants are asserts (SSM_ASSERT), never statuses.
 *
 * Memory: exhausted host memory is a status, SSM_ERR_NOMEM, whose message says
 * what the memory was for and how much was wanted ("IR text: out of host
 * memory (4096 bytes wanted)"), never an abort. ssm_alloc, ssm_realloc and
 * ssm_strdup return it; a growable array's push returns it; the string
 * builder and the arena remember their first failure (appends after it are
 * dropped, arena strings become "", ssm_arena_alloc returns NULL) and report
 * it through ssm_sb_status and ssm_arena_status, which the code that owns
 * them checks before it uses what they built. Every allocator counts toward
 * ssm_alloc_fail_at, so a test can fail each allocation of a path in turn.
 * The ssm_x* forms, which abort instead, are for tools/ only (the
 * executable, which may exit); library code never calls them.
 *
 * Lifecycle verbs, the same across the tree: an object made from a file or
 * a device is opened and closed (ssm_st_open/ssm_st_close); any other is
 * created and destroyed (ssm_graph_create/ssm_graph_destroy). A status,
 * being a value, is made with ssm_status_new and freed with ssm_status_free.
 */
#ifndef SSM_BASE_H
#define SSM_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h> /* mode_t */

typedef enum {
  SSM_OK = 0,
  SSM_ERR_INVALID,     /* bad user input: YAML, IR text, files, flags */
  SSM_ERR_IO,          /* open/read/write/mmap failed */
  SSM_ERR_NOMEM,       /* host allocation failed */
  SSM_ERR_UNSUPPORTED, /* valid input we do not handle (yet) */
  SSM_ERR_DEVICE,      /* Vulkan/device failure */
  SSM_ERR_INTERNAL,    /* should not happen; still reported, not crashed */
  SSM_ERR_CANCELLED,   /* a progress callback asked to stop (ssm_progress) */
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

/* ---- progress (status.c) ------------------------------------------------- */

/* Progress of a long job (compiling, loading weights): `done` of `total`
 * units of the stage `what` ("compiling decode", "loading weights"). A
 * non-zero return asks the job to stop: it then fails with
 * SSM_ERR_CANCELLED, leaving nothing half-written. */
typedef int (*ssm_progress_fn)(const char *what, uint64_t done, uint64_t total, void *user);
typedef struct {
  ssm_progress_fn fn; /* NULL: no reports */
  void *user;
} ssm_progress;

/* Calls p->fn (nothing when `p` or its fn is NULL); the SSM_ERR_CANCELLED
 * status "WHAT: cancelled" when it asks to stop. */
ssm_status ssm_progress_report(const ssm_progress *p, const char *what, uint64_t done,
                               uint64_t total);
/* Monotonic seconds, for the timings that jobs report. */
double ssm_now(void);

/* The git revision ssmc was built from (`git describe --always --dirty`,
 * refreshed at every build), or "unknown" outside a git checkout. */
const char *ssm_revision(void);

/* Checked size arithmetic: return 0 on overflow, 1 otherwise. */
int ssm_size_mul(size_t a, size_t b, size_t *out);
int ssm_size_add(size_t a, size_t b, size_t *out);

/* ---- checked allocation (memory.c) -------------------------------------- */

#if defined(__GNUC__)
#define SSM_MUST_CHECK __attribute__((warn_unused_result))
#else
#define SSM_MUST_CHECK
#endif

/* `count` zeroed elements of `size` bytes (at least one byte is allocated).
 * An overflowing size or exhausted host memory is an SSM_ERR_NOMEM status
 * that names the size; callers add what it was for with ssm_status_wrap. */
ssm_status ssm_alloc(size_t count, size_t size, void **out) SSM_MUST_CHECK;
/* Resizes *p (NULL: a new block) to `count` elements of `size`; on failure
 * *p is left as it was and the status says "WHAT: out of host memory (N
 * bytes wanted)". */
ssm_status ssm_realloc(void **p, size_t count, size_t size, const char *what) SSM_MUST_CHECK;
/* A malloc'd copy of `s` (of its first `n` bytes, then a NUL). */
ssm_status ssm_strdup(const char *s, const char *what, char **out) SSM_MUST_CHECK;
ssm_status ssm_strndup(const char *s, size_t n, const char *what, char **out) SSM_MUST_CHECK;
/* The SSM_ERR_NOMEM status "WHAT: out of host memory (BYTES bytes wanted)". */
ssm_status ssm_nomem(size_t bytes, const char *what);
/* For code that builds much from many builders (codegen's kernel text): a
 * mark of this thread's allocation failures so far, and, when one failed
 * since `mark`, "WHAT: out of host memory (N bytes wanted)" with the size
 * the last one wanted. */
unsigned long ssm_nomem_mark(void);
ssm_status ssm_nomem_since(unsigned long mark, const char *what);
/* `s` when no allocation failed since `mark` or `s` is NOMEM already;
 * else `s` is freed and ssm_nomem_since's status returned instead (see
 * ssm_arena_check). */
ssm_status ssm_nomem_check(unsigned long mark, ssm_status s, const char *what);
/* malloc and realloc that count toward ssm_alloc_fail_at; NULL on failure. */
void *ssm_malloc_(size_t n);
void *ssm_realloc_(void *p, size_t n);
/* For tests of the out-of-memory paths: the n-th allocation from now (n >=
 * 1), by any allocator of this file, the string builder or the arena,
 * fails as exhausted memory would; 0 turns it off. Not thread-safe. */
void ssm_alloc_fail_at(long n);
/* Whether the failure set by ssm_alloc_fail_at is still to come. */
int ssm_alloc_fail_pending(void);
/* How many allocations ssm_alloc_fail_at could have failed so far (for
 * tests that count a path's allocation points). Not thread-safe. */
unsigned long ssm_alloc_calls(void);

/* Allocators that abort on exhausted memory (ssm_fatal_nomem): for tools/
 * only; never NULL. */
void *ssm_xmalloc(size_t n);
char *ssm_xstrdup(const char *s);
char *ssm_xstrndup(const char *s, size_t n);
/* Reports exhausted host memory (`bytes` wanted) and aborts. */
void ssm_fatal_nomem(size_t bytes);

/* ---- growable arrays (memory.c) ------------------------------------------ */

/* A growable array is any struct with `items` (T *), `n` and `cap`
 * (size_t), zero-initialized; SSM_VEC(T) declares one. Storage grows by
 * doubling. */
#define SSM_VEC(T) struct { T *items; size_t n, cap; }
/* Makes room for `extra` more items: NULL, or the NOMEM status (the array
 * is left as it was). */
#define ssm_vec_reserve(v, extra)                                               \
  (ssm_vec_room_(&(v)->items, &(v)->cap, (v)->n + (extra), sizeof *(v)->items) \
       ? (ssm_status)NULL : ssm_vec_nomem_())
/* Appends `x`: NULL, or the NOMEM status (the array is left as it was). */
#define ssm_vec_push(v, x)                                                     \
  (ssm_vec_room_(&(v)->items, &(v)->cap, (v)->n + 1, sizeof *(v)->items)       \
       ? ((v)->items[(v)->n++] = (x), (ssm_status)NULL) : ssm_vec_nomem_())
/* ssm_vec_reserve and ssm_vec_push that abort on exhausted memory, like
 * the ssm_x* allocators: for tools/ only. */
#define ssm_vec_xreserve(v, extra)                                              \
  ((void)(ssm_vec_room_(&(v)->items, &(v)->cap, (v)->n + (extra), sizeof *(v)->items) || \
          (ssm_vec_fatal_(), 0)))
#define ssm_vec_xpush(v, x) (ssm_vec_xreserve(v, 1), (v)->items[(v)->n++] = (x))
void ssm_vec_fatal_(void);
/* Frees the storage and empties the array. */
#define ssm_vec_free(v) (free((v)->items), (v)->items = NULL, (v)->n = (v)->cap = 0)
/* For the macros above: grows the array whose `items` field is at
 * `items_field` to hold `need`; 0 when that fails, whose status
 * ssm_vec_nomem_ then makes (per thread). */
int ssm_vec_room_(void *items_field, size_t *cap, size_t need, size_t elem);
ssm_status ssm_vec_nomem_(void);

/* ---- string maps (memory.c) ------------------------------------------------ */

/* A hash map from strings to void pointers (open addressing, FNV-1a). Keys
 * are not copied: they must outlive the map. Zero-initialize. */
typedef struct {
  const char **keys;
  void **vals;
  size_t n, cap;
} ssm_strmap;

/* The value slot of `key` in *out_slot, created (NULL) when absent;
 * *out_found says whether it was there. The pointer is valid until the
 * next insertion. Growing the map can fail (NOMEM; the map is unchanged). */
ssm_status ssm_strmap_slot(ssm_strmap *m, const char *key, int *out_found,
                           void ***out_slot) SSM_MUST_CHECK;
/* The value of `key`, or NULL. */
void *ssm_strmap_get(const ssm_strmap *m, const char *key);
void ssm_strmap_free(ssm_strmap *m);

/* ---- string builder (text.c) ---------------------------------------------- */

/* Appends formatted text to a growing NUL-terminated string. Zero-initialize
 * (ssm_sb b = {0}); `s` is NULL until the first append. When growing fails,
 * `failed` keeps the size wanted, that append and every later one are
 * dropped (the text so far stays valid), and ssm_sb_status reports it. */
typedef struct {
  char *s;
  size_t n, cap;
  size_t failed; /* bytes the failed growth wanted; 0: none failed */
} ssm_sb;

void ssm_sb_printf(ssm_sb *b, const char *fmt, ...) SSM_PRINTF(2, 3);
void ssm_sb_vprintf(ssm_sb *b, const char *fmt, va_list ap);
void ssm_sb_append(ssm_sb *b, const void *data, size_t n);
/* The text so far ("" before the first append). */
const char *ssm_sb_str(const ssm_sb *b);
/* NULL, or when an append failed "WHAT: out of host memory (N bytes wanted)". */
ssm_status ssm_sb_status(const ssm_sb *b, const char *what);
/* Hands the malloc'd text to the caller in *out and empties `b`; if an
 * append failed, frees it instead and returns ssm_sb_status. */
ssm_status ssm_sb_take(ssm_sb *b, const char *what, char **out) SSM_MUST_CHECK;
/* ssm_sb_take and ssm_sb_printf that abort (ssm_fatal_nomem) when an
 * append failed: for tools/ only. Never NULL. */
char *ssm_sb_xtake(ssm_sb *b);
void ssm_sb_xprintf(ssm_sb *b, const char *fmt, ...) SSM_PRINTF(2, 3);
/* Empties `b`, keeping its memory (and a failure) for the next appends. */
void ssm_sb_clear(ssm_sb *b);
void ssm_sb_free(ssm_sb *b);

/* ---- hashing (memory.c) ---------------------------------------------------- */

/* FNV-1a 64 of `n` bytes, continuing from `h` (start with SSM_FNV_INIT). */
#define SSM_FNV_INIT 0xcbf29ce484222325ull
uint64_t ssm_fnv1a(uint64_t h, const void *data, size_t n);

/* ---- arena (memory.c) ----------------------------------------------------- */

/* An arena hands out memory that is freed all at once by ssm_arena_destroy.
 * Its first failure is remembered: from then on ssm_arena_alloc returns
 * NULL, the string functions return "" (a shared empty string, not to be
 * written), and ssm_arena_status reports it. */
typedef struct ssm_arena ssm_arena;

ssm_status ssm_arena_create(ssm_arena **out) SSM_MUST_CHECK;
void ssm_arena_destroy(ssm_arena *a);
/* Zeroed, 16-byte aligned memory; NULL when out of memory. */
void *ssm_arena_alloc(ssm_arena *a, size_t size);
char *ssm_arena_strdup(ssm_arena *a, const char *s);
char *ssm_arena_strndup(ssm_arena *a, const char *s, size_t n);
char *ssm_arena_printf(ssm_arena *a, const char *fmt, ...) SSM_PRINTF(2, 3);
/* NULL, or when an allocation failed "WHAT: out of host memory (N bytes wanted)". */
ssm_status ssm_arena_status(const ssm_arena *a, const char *what);
/* `s` when no allocation of `a` failed or `s` is NOMEM already; else `s`
 * is freed and the arena's NOMEM status returned instead (what was built
 * from a failed arena, and any error that came of it, is not to be
 * trusted). */
ssm_status ssm_arena_check(const ssm_arena *a, ssm_status s, const char *what);

/* ---- JSON (json.c) ---------------------------------------------------------- */

struct cJSON;
/* Parses `len` bytes of JSON; `name` stands for them in messages. Not JSON:
 * "NAME:LINE:COL: not valid JSON". An object that gives a key twice is
 * refused, naming the key and where it is. The caller cJSON_Deletes *out. */
ssm_status ssm_json_parse(const char *name, const char *text, size_t len, struct cJSON **out);
/* Whether a string or key of the JSON text[0..len) (one ssm_json_parse
 * took) holds a NUL character, as \u0000 or as a byte, which cJSON's
 * strings end at; when one does, its place is appended to *out_path
 * ("messages[0].content", "stop[1]"; a key's place ends with the key).
 * Nothing is allocated unless one does; the caller checks out_path with
 * ssm_sb_status. */
int ssm_json_find_nul(const char *text, size_t len, ssm_sb *out_path);
/* Parses a Hugging Face config.json's text as ssm_json_parse does, after
 * rewriting the non-standard tokens Python's json module writes (Infinity,
 * -Infinity, NaN); anything but an object is refused. */
ssm_status ssm_json_parse_config(const char *name, const char *text, size_t len,
                                 struct cJSON **out);
/* The value at a possibly dotted key of `root` ("text_config.hidden_size";
 * a part that is a number indexes a list: "time_step_limit.1"), the first
 * `n` bytes of `key`; NULL when there is none. */
const struct cJSON *ssm_json_path(const struct cJSON *root, const char *key, size_t n);
/* A copy of config.json value `v` that prints as it reads: a non-finite
 * number (Python's Infinity), in lists and objects too, as transformers
 * 5's {"__float__": "Infinity"} (cJSON would print null). NULL when host
 * memory is exhausted. */
struct cJSON *ssm_json_config_copy(const struct cJSON *v);
/* Whether two config.json values are equal, a number and its
 * {"__float__": ...} form alike, in lists too. */
int ssm_json_config_equal(const struct cJSON *a, const struct cJSON *b);

/* ---- files (text.c) ----------------------------------------------------------- */

/* Opens `path` for reading when it is a regular file; a directory, FIFO,
 * device or socket is an error that says which, given without blocking.
 * *out_size is its size. The caller closes *out_fd. */
ssm_status ssm_file_open(const char *path, int *out_fd, size_t *out_size);
/* What a file of mode `m` is, for messages: "a directory", "a FIFO", "a
 * character device", ... */
const char *ssm_file_kind(mode_t m);
/* Reads a whole regular file into malloc'd memory with a terminating NUL.
 * `max_bytes` bounds what is accepted (0: 1 GiB), checked before reading. */
ssm_status ssm_file_read(const char *path, size_t max_bytes, char **out_data,
                         size_t *out_size);
/* Writes the `n` parts one after another to `path`, atomically: into a new
 * temporary file beside it (ssm_file_temp), flushed, then renamed over it.
 * On any failure `path` keeps what it had and the temporary file is
 * removed. A device or pipe (/dev/null, /dev/stdout) is written in place. */
ssm_status ssm_file_write(const char *path, int n, const void *const *parts,
                          const size_t *sizes);
/* The two halves of ssm_file_write, for writers that stream: a new file
 * beside `path`, anonymous where the file system allows (O_TMPFILE: a
 * process killed while writing leaves nothing), else ".NAME.XXXXXX"
 * (mkostemp), mode as the umask allows; and its end: flushed, linked as
 * ".NAME.XXXXXX" if anonymous, and renamed over `path`, or (with `failed`,
 * or when flushing fails) removed. Both take ownership of `tmp` and `fd`. */
/* Writes the `n` parts to `fd` whole, retrying after EINTR: 0, or the
 * errno of the failure (EIO for a write of nothing). */
int ssm_file_write_all(int fd, int n, const void *const *parts, const size_t *sizes);
ssm_status ssm_file_temp(const char *path, char **out_tmp, int *out_fd);
ssm_status ssm_file_commit(char *tmp, int fd, const char *path, int failed);
/* What the first `n` bytes `head` (n < 0: none read) of file `path` say it
 * is: *out_bundle 1 when they start with the bundle magic "SSMB"; without
 * it, a file named .ssmb or holding a NUL byte there (which no YAML or IR
 * text holds) is an error that calls it a damaged bundle. */
ssm_status ssm_file_bundle_magic(const char *path, const char *head, long n, int *out_bundle);
/* mkdir -p: creates `dir` and its missing parents, private to the user
 * (0700) where it creates; an error when `dir` is then not a directory. */
ssm_status ssm_file_mkdirs(const char *dir);
/* 1 when `a` and `b` name the same existing file (one device, one inode). */
int ssm_file_same(const char *a, const char *b);

#endif
