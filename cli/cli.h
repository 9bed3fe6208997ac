/*
 * cli.h — what the files of the command line (cli/) share.
 */
#ifndef SSM_CLI_H
#define SSM_CLI_H

#include <signal.h>
#include <stdio.h>

#include "base/base.h"
#include "bundle/abi.h"
#include "runtime/ssmc.h"

/* ---- usage and options (usage.c, opts.c) ---------------------------------------- */

/* The usage text of command `cmd` ("run"), or of ssmc itself for NULL. */
const char *ssm_cli_usage(const char *cmd);
/* Prints "ssmc: MESSAGE" (and the status) to stderr; returns the exit
 * status: 1, or 128 + the signal when a signal cancelled the work. */
int ssm_cli_fail(ssmc_status s);
/* Prints "ssmc: CMD: MESSAGE" and where to find the usage; returns 2. */
int ssm_cli_usage_error(const char *cmd, const char *fmt, ...) SSM_PRINTF(2, 3);

typedef enum { FLAG, STR, INT, NUM, LIST } opt_kind;

/* One option of a command's table (ended by {0}). */
typedef struct {
  const char *name;  /* "--weights", or one letter: "-n" */
  opt_kind kind;
  void *dest;        /* int* (FLAG), const char** (STR), long* (INT), double* (NUM),
                      * const char*[hi] (LIST: the option repeated, each value in turn) */
  double lo, hi;     /* INT, NUM: the accepted range; LIST: the most values */
  int open;          /* NUM: lo itself is not accepted */
  const char *what;  /* INT, NUM: "a token count from 1 to 4096", for messages */
  int *given;        /* set to 1 when the option is given (may be NULL); LIST: the
                      * number of values so far */
} opt;

#define O_FLAG(n, d) {.name = n, .kind = FLAG, .dest = d}
#define O_STR(n, d) {.name = n, .kind = STR, .dest = d}
#define O_INT(n, d, l, h, w, g) {.name = n, .kind = INT, .dest = d, .lo = l, .hi = h, .what = w, .given = g}
#define O_LIST(n, d, h, g) {.name = n, .kind = LIST, .dest = d, .hi = h, .given = g}
#define O_NUM(n, d, l, h, w, g) {.name = n, .kind = NUM, .dest = d, .lo = l, .hi = h, .what = w, .given = g}

#define MAX_SEQ_OPT(dest, given) \
  O_INT("--max-seq", dest, 1, 1 << 24, "a position count from 1 to 16777216", given)
#define CLI_STR_(x) #x
#define CLI_STR(x) CLI_STR_(x) /* a number macro as text */
#define CHUNK_OPT(dest, given)                                                          \
  O_INT("--chunk", dest, 1, SSM_CHUNK_MAX, "a token count from 1 to " CLI_STR(SSM_CHUNK_MAX), \
        given)
/* --chunk's line in a usage text */
#define CHUNK_USAGE                                                                     \
  "  --chunk T            prompt tokens per prefill run (default " CLI_STR(SSM_CHUNK_DEFAULT) \
  ", or --max-seq\n"                                                                   \
  "                       when that is smaller)\n"

/* Reads the arguments of command `cmd` (argv: those after its name) with
 * getopt_long against `opts`; the one positional argument goes to *pos
 * (when pos is not NULL). Returns 0; 2 after printing a usage error; -1
 * after printing the command's usage for --help / -h. */
int ssm_cli_parse(const char *cmd, int argc, char **argv, const opt *opts, const char **pos);

/* ssm_cli_parse with a second positional argument, into *pos2. */
int ssm_cli_parse2(const char *cmd, int argc, char **argv, const opt *opts, const char **pos,
                   const char **pos2);

/* ssm_cli_parse, returning from the calling command unless it went on. */
#define SSM_CLI_PARSE(cmd, argc, argv, opts, pos) SSM_CLI_PARSE2(cmd, argc, argv, opts, pos, NULL)
#define SSM_CLI_PARSE2(cmd, argc, argv, opts, pos, pos2)                           \
  do {                                                                             \
    int parse_rc_ = ssm_cli_parse2(cmd, argc, argv, opts, pos, pos2);              \
    if (parse_rc_) return parse_rc_ < 0 ? 0 : parse_rc_;                           \
  } while (0)

/* Levenshtein distance of `a` and `b` (up to 31 bytes of each), for "did
 * you mean". */
size_t ssm_cli_edits(const char *a, const char *b);

/* "1,2,3" to a malloc'd array; `what` names the option in messages. */
ssm_status ssm_cli_parse_ids(const char *what, const char *s, int32_t **out, size_t *out_n);

/* ---- the commands in files of their own ------------------------------------------ */

int ssm_cli_run(int argc, char **argv);      /* run.c */
int ssm_cli_bench(int argc, char **argv);    /* run.c */
int ssm_cli_perplexity(int argc, char **argv); /* run.c */
int ssm_cli_tokenize(int argc, char **argv); /* tokenize.c */

/* ---- the backend (backend.c) ----------------------------------------------------- */

typedef struct {
  ssmc_backend backend;
  const char *reason;  /* why, in words (static; NULL for auto until the session opens) */
  int automatic;       /* --backend auto: the library chooses */
  uint64_t params;     /* with automatic: the model's parameters (0: unknown) */
} ssm_cli_backend_choice;

/* The session option of --backend `backend` (auto, cpu or vulkan: checked
 * before); auto leaves the choice to the library (SSMC_BACKEND_AUTO). */
void ssm_cli_backend(const char *backend, ssm_cli_backend_choice *out);
/* Once session `s` is open: the backend it runs on, and with auto why
 * (ssmc_session_backend). */
void ssm_cli_backend_opened(const ssmc_session *s, ssm_cli_backend_choice *c);

/* ---- files (files.c) ----------------------------------------------------------------- */

/* TEXT, or all of stdin for "-" (at most 64 MiB), into *out (malloc'd);
 * `what` names the option in messages. */
ssm_status ssm_cli_text_arg(const char *what, const char *text, char **out, size_t *out_len);
/* All of file `path` (at most 64 MiB; "-" is stdin) into *out (malloc'd);
 * `what` names the option in messages. */
ssm_status ssm_cli_text_file(const char *what, const char *path, char **out, size_t *out_len);
/* Whether `path` (an input given to option `what`; "-": standard input)
 * is a regular file that opens for reading: an error naming both if not. */
ssm_status ssm_cli_readable(const char *what, const char *path);
/* Whether a file can be written at `path` (an output given to option
 * `what`), tried before the work that makes it: its directory exists and
 * takes a new file, and `path` is not a directory. Nothing is left
 * behind; an error naming both if not. */
ssm_status ssm_cli_writable(const char *what, const char *path);
/* Refuses output path `out` (NULL: nothing to check) when it names a file
 * the command reads: one of the `n` inputs (an entry NULL for an option
 * not given: the others after it are still checked), or a .json or
 * .safetensors file of the `weights` directory. `what` names the option. */
ssm_status ssm_cli_not_an_input(const char *what, const char *out, const char *const *inputs,
                                size_t n, const char *weights);
/* When `model` is a bundle: the weights directory its manifest records
 * and the weights file beside it (bundle.h: ssm_manifest.source_dir and
 * weights_file), each malloc'd or NULL when it has none, so that outputs
 * are checked against them too. Nothing when `model` is not a bundle (or
 * does not read as one: the run says why). */
ssm_status ssm_cli_bundle_inputs(const char *model, char **out_dir, char **out_file);

/* ---- progress and summaries (progress.c) ------------------------------------------- */

/* SIGINT / SIGTERM: the signal caught (0: none). Work stops at the next
 * token, kernel or chunk of weights and the command finishes cleanly; a
 * second signal ends the process at once. */
extern volatile sig_atomic_t ssm_cli_signal;
void ssm_cli_catch_signals(void);

/* A progress callback (ssmc_progress_fn) drawing a one-line bar on stderr
 * when it is a terminal (nothing otherwise, or with `quiet`); it cancels
 * the work when a signal was caught. `user` is a ssm_cli_progress. */
typedef struct {
  int quiet;
  int drawn;          /* a bar is on the line */
  double last;        /* when it was last drawn */
  char stage[64];
} ssm_cli_progress;
int ssm_cli_progress_fn(const char *stage, uint64_t done, uint64_t total, void *user);
/* Clears the bar's line, if one is drawn. */
void ssm_cli_progress_end(ssm_cli_progress *p);

/* The summary of a run, on stderr, naming the backend and why it runs:
 * as text, or (json) one JSON object on one line. */
void ssm_cli_print_summary(ssmc_session *s, const ssm_cli_backend_choice *backend, int json);

/* Prints a profiled program (`program`: "decode" or "prefill"), as text or
 * as one JSON member "program": {...} (profile.c). */
void ssm_cli_print_profile(FILE *f, const char *program, const ssmc_profile_step *s, int n,
                           int runs, int json);

/* ---- text that ends at a stop string (stop.c) ------------------------------------- */

/* One reply printed to stdout as it is decoded, up to the first of its stop
 * strings (none: all of it). Zero-initialize, then set stops and nstops. */
typedef struct {
  const char *const *stops;
  int nstops;
  ssm_sb text;  /* the text decoded so far (past `end`: the stop string and after) */
  size_t end;   /* where the reply ends: before the first stop string, or text.n */
  size_t shown; /* bytes of it printed */
  int hit;      /* a stop string ended it */
} ssm_cli_stopper;

/* Adds `len` bytes of the reply and prints what can no longer begin a stop
 * string. Returns 1 once a stop string ended the reply (or out of memory:
 * ssm_sb_status of text says so). */
int ssm_cli_stop_add(ssm_cli_stopper *s, const char *text, size_t len);
/* The end of the reply: prints what was held back, up to `end`. */
void ssm_cli_stop_end(ssm_cli_stopper *s);
/* Empties it for the next reply. */
void ssm_cli_stop_clear(ssm_cli_stopper *s);

/* ---- the chat of `ssmc run -i` on a terminal (repl.c) ------------------------------ */

typedef struct {
  ssmc_session *s;
  const ssmc_tokenizer *t;     /* the session's */
  const char *chat_template;   /* --chat-template FILE, or NULL: the model's, if any */
  const char *first;           /* the first turn (--prompt), or NULL */
  size_t first_len;
  int n;                       /* -n: the most ids of one reply */
  const char *const *stops;    /* --stop: a reply ends before the first of them */
  int nstops;
  ssmc_generate_options g;     /* the sampler (the callbacks are the chat's) */
} ssm_cli_chat_args;

/* Lines edited on the terminal, each a turn of one conversation, until
 * /quit, Ctrl-D or Ctrl-C at an empty prompt (see repl.c). */
ssmc_status ssm_cli_chat(const ssm_cli_chat_args *a);

/* `ssmc serve` (serve.c): argv after "serve"; the exit status. */
int ssm_cli_serve(int argc, char **argv);

#endif
