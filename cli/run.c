/*
 * run.c — `ssmc run` and `ssmc bench`: a session on a model directory
 * (compiled once and kept in the cache), an architecture YAML or a bundle
 * (with the weights it records); a prompt of ids, text, a file, or turns
 * read from stdin (-i), the continuation streamed to stdout, and a summary
 * of the timings on stderr. bench repeats its measurement and reports the
 * spread. perplexity feeds a text and scores each of its tokens.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "chat/chat.h"
#include "cli/cli.h"
#include "frontend/frontend.h"

#define MAX_LINE ((size_t)1 << 20)

typedef struct {
  const char *model, *tokens, *prompt, *prompt_file, *dump, *state_in, *state_out, *backend,
      *dtype, *chat_template;
  long n, chunk, device, max_seq, eos, top_k, seed, reps;
  const char *stops[SSMC_STOPS_MAX];
  int nstops;
  double temperature, top_p, min_p, repeat_penalty;
  int greedy, validation, chunk_given, max_seq_given, sampling[6], no_cache, quiet, json,
      interactive;
  char *cache_dir;
  ssm_cli_backend_choice choice; /* --backend, and why */
  ssm_cli_progress progress;
  ssmc_options o;
} run_args;

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

/* Options shared by run and bench. */
#define SESSION_OPTS(r)                                                                       \
  O_STR("--weights", &(r)->o.weights), O_STR("--config", &(r)->o.config),                     \
      O_STR("--backend", &(r)->backend), O_FLAG("--validate", &(r)->validation),              \
      O_STR("--dtype", &(r)->dtype),                                                          \
      O_INT("--device", &(r)->device, 0, 1000, "a device index (see `ssmc devices`)", NULL),  \
      O_INT("-n", &(r)->n, 0, 1 << 24, "a token count from 0 to 16777216", NULL),             \
      CHUNK_OPT(&(r)->chunk, &(r)->chunk_given), MAX_SEQ_OPT(&(r)->max_seq, &(r)->max_seq_given), \
      O_FLAG("--no-cache", &(r)->no_cache), O_FLAG("--quiet", &(r)->quiet),                   \
      O_FLAG("-q", &(r)->quiet), O_FLAG("--json", &(r)->json)

/* Checks what the table cannot, and fills r->o. Returns 0 or 2. */
static int session_options(run_args *r, const char *cmd) {
  if (!r->model)
    return ssm_cli_usage_error(cmd, "missing MODEL (a model directory, an architecture YAML "
                               "with --config, or a bundle)");
  if (strcmp(r->backend, "auto") && strcmp(r->backend, "cpu") && strcmp(r->backend, "vulkan"))
    return ssm_cli_usage_error(cmd, "--backend: expected auto, cpu or vulkan, got '%s'",
                               r->backend);
  int bundle = ends_with(r->model, ".ssmb");
  if (!strcmp(r->backend, "cpu") && bundle)
    return ssm_cli_usage_error(cmd, "--backend cpu runs a model (YAML or directory), not a "
                               "bundle: %s", r->model);
  if (r->max_seq_given && bundle)
    return ssm_cli_usage_error(cmd, "--max-seq is fixed when a bundle is compiled (ssmc "
                               "compile --max-seq): %s", r->model);
  if (r->chunk_given && bundle)
    return ssm_cli_usage_error(cmd, "--chunk is fixed when a bundle is compiled (ssmc "
                               "compile --chunk): %s", r->model);
  if (r->o.config && bundle)
    return ssm_cli_usage_error(cmd, "--config: a bundle keeps the config it was compiled "
                               "with (ssmc compile --config): %s", r->model);
  static const char *const dtypes[] = {"auto", "f32", "f16", "bf16", "q8_0", "q4_0"};
  int d = 0;
  while (r->dtype && d < 6 && strcmp(r->dtype, dtypes[d])) d++;
  if (d == 6)
    return ssm_cli_usage_error(cmd, "--dtype: expected f32, f16, bf16, q8_0 or q4_0, got '%s'", r->dtype);
  if (r->dtype && bundle)
    return ssm_cli_usage_error(cmd, "--dtype is fixed when a bundle is compiled (ssmc compile "
                               "--dtype): %s", r->model);
  r->o.dtype = (ssmc_dtype)d;
  ssm_cli_backend(r->backend, &r->choice);
  r->o.backend = r->choice.backend;
  r->o.device = (int)r->device;
  r->o.validation = r->validation;
  r->o.chunk = r->chunk_given ? (int)r->chunk : 0;
  r->o.max_seq = (int)r->max_seq;
  r->o.eos = r->eos;
  r->progress.quiet = r->quiet;
  r->o.progress = ssm_cli_progress_fn;
  r->o.progress_user = &r->progress;
  return 0;
}

/* Opens the session with the signals caught, so that SIGINT during
 * compiling or loading cancels it cleanly. */
static ssmc_status open_session(run_args *r, ssmc_session **out) {
  ssm_cli_catch_signals();
  free(r->cache_dir); /* freed by the command */
  r->cache_dir = NULL;
  ssmc_status st = r->no_cache ? NULL : ssmc_cache_dir_default(&r->cache_dir);
  r->o.cache_dir = r->cache_dir;
  if (!st) st = ssmc_session_open(r->model, &r->o, out);
  if (!st) ssm_cli_backend_opened(*out, &r->choice);
  ssm_cli_progress_end(&r->progress);
  return st;
}

/* ---- ssmc run ------------------------------------------------------------------------- */

typedef struct {
  FILE *f;            /* --dump-logits */
  int err;
  ssmc_decoder *dec;  /* text mode: the continuation so far */
  ssm_cli_stopper out; /* text mode: this turn's continuation, up to a --stop string */
  int printed;        /* text went to stdout */
  ssmc_status failed; /* the decoder's error, which stopped generation */
} printer;

static int stop_on_signal(int32_t id, void *user) { return ssm_cli_signal != 0; }

static int dump_row(const float *logits, int64_t vocab, int64_t position, void *user) {
  printer *p = user;
  if (ssm_cli_signal) return 1;
  if (fwrite(logits, sizeof(float), (size_t)vocab, p->f) != (size_t)vocab) p->err = errno ? errno : EIO;
  return p->err != 0;
}

static int print_token(int32_t id, void *user) {
  printer *p = user;
  if (ssm_cli_signal) return 1;
  const char *text;
  size_t len;
  ssmc_status s = ssmc_decoder_feed(p->dec, id, &text, &len);
  if (s) {
    if (!p->failed) p->failed = s;
    else ssmc_status_free(s);
    return 1;
  }
  return ssm_cli_stop_add(&p->out, text, len);
}

/* The sampler: the model's generation_config.json defaults, then the
 * options given (r->sampling: temperature, top_k, top_p, seed, min_p,
 * repeat_penalty); --greedy is greedy whatever the file says. */
static void sampler_options(ssmc_session *s, const run_args *r, ssmc_generate_options *g) {
  ssmc_status_free(ssmc_session_generate_defaults(s, g, NULL)); /* checked at open: no error */
  if (r->sampling[0] || r->greedy) g->temperature = (float)r->temperature;
  if (r->sampling[1] || r->greedy) g->top_k = (int)r->top_k;
  if (r->sampling[2] || r->greedy) g->top_p = (float)r->top_p;
  if (r->sampling[4] || r->greedy) g->min_p = (float)r->min_p;
  if (r->sampling[5]) g->repeat_penalty = (float)r->repeat_penalty;
  g->seed = (uint32_t)r->seed;
  g->host_greedy = r->greedy;
}

/* Generates up to -n tokens from `ids` into gen (room for -n + 1). */
static ssmc_status generate(ssmc_session *s, run_args *r, printer *p, const int32_t *ids,
                            size_t nids, int32_t *gen, size_t *ngen) {
  ssmc_generate_options g;
  sampler_options(s, r, &g);
  g.on_logits = r->dump ? dump_row : NULL;
  g.on_token = p->dec ? print_token : stop_on_signal;
  g.stop_at_eos = p->dec != NULL;
  g.user = p;
  ssmc_status st = ssmc_session_generate(s, ids, nids, (int)r->n, &g, gen, ngen);
  if (p->failed && !st) st = p->failed;
  else ssmc_status_free(p->failed);
  p->failed = NULL;
  if (p->err && !st)
    st = ssm_status_new(SSM_ERR_IO, "--dump-logits %s: %s", r->dump, strerror(p->err));
  return st;
}

/* The end of a turn's text: what the decoder and the stop strings held
 * back, unless a stop string ended it. */
static ssmc_status flush_text(printer *p) {
  const char *rest;
  size_t len;
  ssmc_status st = ssmc_decoder_flush(p->dec, &rest, &len);
  if (!p->out.hit) ssm_cli_stop_add(&p->out, rest, len);
  ssm_cli_stop_end(&p->out);
  if (!st) st = ssm_sb_status(&p->out.text, "the generated text");
  return st;
}

/* One turn of text: `text` (printed unless `echo` is 0) after the token
 * the last turn drew but did not feed (*pending, -1 for none), and its
 * continuation. A turn with nothing to feed is skipped, or an error when
 * `required`. */
static ssmc_status text_turn(ssmc_session *s, const ssmc_tokenizer *t, run_args *r, printer *p,
                             const char *text, size_t len, int echo, int required,
                             int32_t *pending) {
  int32_t *ids = NULL, *gen = calloc((size_t)r->n + 1, sizeof *gen);
  size_t nids = 0, ngen = 0;
  ssmc_status st = ssmc_tokenizer_encode(t, text, len, &ids, &nids);
  if (!st && nids + (*pending >= 0) == 0 && required)
    st = ssm_status_new(SSM_ERR_INVALID, "--prompt: the text has no tokens");
  int32_t *all = st || nids + (*pending >= 0) == 0 ? NULL : malloc(sizeof *all * (nids + 1));
  if (all) {
    if (*pending >= 0) all[0] = *pending;
    memcpy(all + (*pending >= 0), ids, sizeof *ids * nids);
    nids += *pending >= 0;
    if (echo) fwrite(text, 1, len, stdout);
    fflush(stdout);
    p->printed = 1;
    ssm_cli_stop_clear(&p->out);
    st = generate(s, r, p, all, nids, gen, &ngen);
    ssmc_status fs = flush_text(p);
    if (!st) st = fs;
    else ssmc_status_free(fs);
    *pending = ngen == (size_t)r->n && ngen && !p->out.hit ? gen[ngen - 1] : -1;
  }
  free(all);
  free(ids);
  free(gen);
  return st;
}

/* One line of `f` (its newline kept) into *buf, grown as it fills but
 * never past MAX_LINE + 1 bytes: a longer line stops the read at that
 * point. Returns 1 for a line, 0 at the end of input, -1 for a line over
 * MAX_LINE, -2 when reading or growing fails (errno says why). */
static int read_line(FILE *f, char **buf, size_t *cap, size_t *out_len) {
  size_t n = 0;
  int c = 0;
  *out_len = 0;
  while (n <= MAX_LINE && (c = getc(f)) != EOF) {
    if (n == *cap) {
      size_t grown = *cap ? *cap * 2 : 4096;
      if (grown > MAX_LINE + 1) grown = MAX_LINE + 1;
      char *b = realloc(*buf, grown);
      if (!b) return -2;
      *buf = b;
      *cap = grown;
    }
    (*buf)[n++] = (char)c;
    if (c == '\n') break;
  }
  *out_len = n;
  if (n > MAX_LINE) return -1;
  if (c == EOF && ferror(f)) return -2;
  return n > 0;
}

/* -i on a terminal: the chat of repl.c. */
static ssmc_status chat(ssmc_session *s, const ssmc_tokenizer *t, run_args *r, const char *first,
                        size_t first_len) {
  ssm_cli_chat_args a = {.s = s, .t = t, .chat_template = r->chat_template, .first = first,
                         .first_len = first_len, .n = (int)r->n, .stops = r->stops,
                        .nstops = r->nstops};
  sampler_options(s, r, &a.g);
  return ssm_cli_chat(&a);
}

/* -i: turns read line by line from stdin until its end, the state going
 * on from one turn to the next; the first turn is --prompt when given. A
 * line over 1 MiB ends the run unread past its first MiB. On a terminal,
 * the chat of repl.c instead. */
static ssmc_status interactive(ssmc_session *s, const ssmc_tokenizer *t, run_args *r,
                               printer *p, const char *first, size_t first_len) {
  int tty = isatty(STDIN_FILENO);
  if (tty && !r->dump) return chat(s, t, r, first, first_len);
  int32_t pending = -1;
  ssmc_status st = first ? text_turn(s, t, r, p, first, first_len, 1, 0, &pending) : NULL;
  if (first && tty && !st) putchar('\n');
  char *line = NULL;
  size_t cap = 0, n = 0;
  for (long no = 1; !st && !ssm_cli_signal; no++) {
    if (tty) fputs("> ", stderr);
    errno = 0;
    int got = read_line(stdin, &line, &cap, &n);
    if (got == 0 || (got == -2 && errno == EINTR)) break;
    if (got == -2)
      st = ssm_status_new(SSM_ERR_IO, "standard input: %s", strerror(errno ? errno : EIO));
    else if (got < 0)
      st = ssm_status_new(SSM_ERR_INVALID, "-i: line %ld of standard input is longer than 1 MiB "
                          "(read stopped there)", no);
    if (!st) st = text_turn(s, t, r, p, line, n, !tty, 0, &pending);
    if (tty && !st) putchar('\n');
  }
  free(line);
  if (!tty && !st) putchar('\n');
  return st;
}

/* The prompt's text: --prompt TEXT|- or --prompt-file FILE|-. */
static ssmc_status prompt_text(run_args *r, char **out, size_t *out_len) {
  if (r->prompt) return ssm_cli_text_arg("--prompt", r->prompt, out, out_len);
  return ssm_cli_text_file("--prompt-file", r->prompt_file, out, out_len);
}

/* A tokenizer's error, said as what `what` (an option) needs. */
static ssmc_status needs_tokenizer(ssmc_status st, const char *what) {
  return st ? ssm_status_wrap(st, "%s needs a tokenizer (--tokenizer FILE, or tokenizer.json in "
                              "the weights directory)", what) : NULL;
}

/* The files a command reads besides the model, checked before the model
 * is compiled or loaded, where a mistake would otherwise show only after
 * that: the tokenizer (for `what`, the option that makes text; NULL for
 * --tokens), the state of --state-in, and for -i the chat template. */
static ssmc_status check_inputs(run_args *r, const char *what) {
  ssmc_tokenizer *t = NULL;
  ssmc_status st = what ? needs_tokenizer(ssmc_tokenizer_open_for(r->model, &r->o, &t), what) : NULL;
  ssmc_tokenizer_close(t);
  if (!st && r->state_in) st = ssm_cli_readable("--state-in", r->state_in);
  char *dir = NULL;
  if (!st && r->interactive) st = ssmc_model_dir(r->model, &r->o, &dir);
  ssm_chat *chat = NULL;
  if (dir) st = ssm_chat_open(dir, r->chat_template, &chat);
  ssm_chat_close(chat);
  free(dir);
  return st;
}

/* Runs the prompt (--tokens, text, or -i turns) through the session. */
static ssmc_status run_session(ssmc_session *s, run_args *r, printer *p, const char *text,
                               size_t len) {
  if (r->tokens) {
    int32_t *ids = NULL, *gen = calloc((size_t)r->n + 1, sizeof *gen);
    size_t nids = 0, ngen = 0;
    ssmc_status st = ssm_cli_parse_ids("--tokens", r->tokens, &ids, &nids);
    if (!st) st = generate(s, r, p, ids, nids, gen, &ngen);
    for (size_t k = 0; !st && k < ngen; k++) printf(k ? ",%d" : "%d", gen[k]);
    if (!st) printf("\n");
    free(ids);
    free(gen);
    return st;
  }
  const ssmc_tokenizer *t = NULL;
  ssmc_status st = needs_tokenizer(ssmc_session_tokenizer(s, &t), r->interactive ? "-i" : "--prompt");
  if (!st) st = ssmc_decoder_create(t, 1, &p->dec);
  if (!st && r->interactive) {
    st = interactive(s, t, r, p, text, len);
  } else if (!st) {
    int32_t pending = -1;
    st = text_turn(s, t, r, p, text, len, 1, 1, &pending);
    if (p->printed) fputs("\n", stdout);
  }
  return st;
}

/* The dump goes to a temporary file renamed over FILE once the run
 * succeeded, so a failed run leaves whatever FILE was. */
int ssm_cli_run(int argc, char **argv) {
  run_args r = {.n = 16, .device = -1, .eos = -1, .backend = "auto", .top_p = 1};
  ssmc_options_init(&r.o);
  opt opts[] = {SESSION_OPTS(&r),
                O_STR("--tokens", &r.tokens), O_STR("--prompt", &r.prompt), O_STR("-p", &r.prompt),
                O_STR("--prompt-file", &r.prompt_file), O_FLAG("-i", &r.interactive),
                O_FLAG("--interactive", &r.interactive), O_STR("--chat-template", &r.chat_template),
                O_STR("--tokenizer", &r.o.tokenizer), O_STR("--dump-logits", &r.dump),
                O_LIST("--stop", r.stops, SSMC_STOPS_MAX, &r.nstops),
                O_STR("--state-in", &r.state_in), O_STR("--state-out", &r.state_out),
                O_INT("--eos", &r.eos, 0, INT32_MAX, "a token id", NULL),
                O_FLAG("--greedy", &r.greedy),
                O_NUM("--temperature", &r.temperature, 0, 1e6, "a number >= 0", &r.sampling[0]),
                O_INT("--top-k", &r.top_k, 0, INT32_MAX, "a count >= 0 (0: off)", &r.sampling[1]),
                {.name = "--top-p", .kind = NUM, .dest = &r.top_p, .hi = 1, .open = 1,
                 .what = "a number in (0, 1] (1: off)", .given = &r.sampling[2]},
                O_NUM("--min-p", &r.min_p, 0, 1, "a number in [0, 1] (0: off)", &r.sampling[4]),
                {.name = "--repeat-penalty", .kind = NUM, .dest = &r.repeat_penalty, .hi = FLT_MAX,
                 .open = 1, .what = "a number above 0 (1: off)", .given = &r.sampling[5]},
                O_INT("--seed", &r.seed, 0, (1 << 24) - 1, "an integer in [0, 16777215]", &r.sampling[3]),
                {0}};
  const char *text = NULL; /* ssmc run MODEL "PROMPT" */
  SSM_CLI_PARSE2("run", argc, argv, opts, &r.model, &text);
  if (text && (r.prompt || r.prompt_file || r.tokens))
    return ssm_cli_usage_error("run", "a prompt after MODEL ('%.40s') and %s: give one", text,
                               r.tokens ? "--tokens" : r.prompt ? "--prompt" : "--prompt-file");
  if (text) r.prompt = text;
  if (r.greedy && (r.sampling[0] || r.sampling[1] || r.sampling[2] || r.sampling[3] ||
                   r.sampling[4]))
    return ssm_cli_usage_error("run", "--greedy: cannot be combined with --temperature, "
                               "--top-k, --top-p, --min-p or --seed");
  if (session_options(&r, "run")) return 2;
  int texts = !!r.prompt + !!r.prompt_file;
  int stdin_prompt = (r.prompt && !strcmp(r.prompt, "-")) ||
                     (r.prompt_file && !strcmp(r.prompt_file, "-"));
  if (r.interactive && (r.tokens || texts > 1))
    return ssm_cli_usage_error("run", "-i takes text turns from standard input, after at most "
                               "one --prompt or --prompt-file (not --tokens)");
  if (r.interactive && stdin_prompt)
    return ssm_cli_usage_error("run", "-i reads its turns from standard input, so the prompt "
                               "cannot come from there too");
  if (r.chat_template && !r.interactive)
    return ssm_cli_usage_error("run", "--chat-template is for the chat of -i");
  if (r.nstops && r.tokens)
    return ssm_cli_usage_error("run", "--stop ends generated text: it needs --prompt or -i, not "
                               "--tokens");
  for (int i = 0; i < r.nstops; i++)
    if (!*r.stops[i] || strlen(r.stops[i]) > SSMC_STOP_BYTES_MAX)
      return ssm_cli_usage_error("run", "--stop: expected a non-empty string of at most %d bytes, "
                                 "got %zu bytes", SSMC_STOP_BYTES_MAX, strlen(r.stops[i]));
  printer p = {.out = {.stops = r.stops, .nstops = r.nstops}};
  if (!r.interactive && !!r.tokens + texts != 1)
    return ssm_cli_usage_error("run", "give --tokens IDS or --prompt TEXT (or --prompt-file "
                               "FILE, or -i for turns from standard input)");
  const char *weights = r.o.weights ? r.o.weights : r.model;
  char *rec_dir = NULL, *rec_file = NULL; /* a bundle's */
  ssmc_status st = ssm_cli_bundle_inputs(r.model, &rec_dir, &rec_file);
  const char *inputs[] = {r.model, weights, r.o.config, r.o.tokenizer, r.state_in, r.prompt_file,
                          rec_file, r.chat_template};
  size_t ninputs = sizeof inputs / sizeof *inputs;
  const char *outs[][2] = {{"--dump-logits", r.dump}, {"--state-out", r.state_out}};
  for (int i = 0; i < 2 && !st; i++) {
    st = ssm_cli_not_an_input(outs[i][0], outs[i][1], inputs, ninputs, weights);
    if (!st) st = ssm_cli_not_an_input(outs[i][0], outs[i][1], NULL, 0, rec_dir);
    if (!st && outs[i][1]) st = ssm_cli_writable(outs[i][0], outs[i][1]);
  }
  free(rec_dir);
  free(rec_file);
  if (!st && r.dump && ssm_file_same(r.dump, r.state_out ? r.state_out : ""))
    st = ssm_status_new(SSM_ERR_INVALID, "--dump-logits and --state-out name one file");
  char *tmp = NULL;
  int fd = -1;
  if (!st && r.dump) st = ssm_status_wrap(ssm_file_temp(r.dump, &tmp, &fd), "--dump-logits");
  if (fd >= 0 && !(p.f = fdopen(fd, "wb"))) ssm_fatal_nomem(0);
  char *prompt = NULL;
  size_t prompt_len = 0;
  if (!st) st = check_inputs(&r, r.tokens ? NULL : r.interactive ? "-i" : "--prompt");
  if (!st && (r.prompt || r.prompt_file)) st = prompt_text(&r, &prompt, &prompt_len);
  ssmc_session *s = NULL;
  if (!st) st = open_session(&r, &s);
  if (!st && r.state_in) st = ssmc_session_load_state(s, r.state_in);
  if (!st) st = run_session(s, &r, &p, prompt, prompt_len);
  free(prompt);
  /* the state after every token fed; the last generated one was not fed */
  if (!st && r.state_out && !ssm_cli_signal) st = ssmc_session_save_state(s, r.state_out);
  if (!st && !r.quiet) {
    ssm_cli_print_summary(s, &r.choice, r.json);
    ssmc_generate_options g;
    const char *from;
    ssmc_status_free(ssmc_session_generate_defaults(s, &g, &from));
    if (*from && !r.json)
      fprintf(stderr, "defaults from generation_config.json: %s (options given override them)\n", from);
  }
  ssmc_decoder_destroy(p.dec); /* before the session: it uses the session's tokenizer */
  ssm_sb_free(&p.out.text);
  ssmc_session_close(s);
  if (p.f) { /* the dump replaces the old file only when the run succeeded */
    int failed = st || ssm_cli_signal || fflush(p.f);
    ssmc_status c = ssm_file_commit(tmp, dup(fileno(p.f)), r.dump, failed);
    fclose(p.f);
    if (!st && !ssm_cli_signal) st = ssm_status_wrap(c, "--dump-logits");
    else ssmc_status_free(c);
  }
  free(r.cache_dir);
  if (st) return ssm_cli_fail(st);
  return ssm_cli_signal ? 128 + ssm_cli_signal : 0;
}

/* ---- ssmc bench ---------------------------------------------------------------------- */

typedef struct {
  double mean, sd;
} spread;

/* The spread of n doubles `stride` bytes apart from `first`. */
static spread spread_at(const void *first, size_t stride, int n) {
  const char *p = first;
  double sum = 0, sq = 0;
  for (int i = 0; i < n; i++) sum += *(const double *)(p + (size_t)i * stride);
  double mean = sum / n;
  for (int i = 0; i < n; i++) {
    double d = *(const double *)(p + (size_t)i * stride) - mean;
    sq += d * d;
  }
  return (spread){mean, n > 1 ? sqrt(sq / (n - 1)) : 0};
}

static spread spread_of(const ssmc_bench_result *v, int n, size_t field) {
  return spread_at((const char *)v + field, sizeof *v, n);
}

/* `s` as a JSON string (quoted, escaped). */
static void json_str(const char *key, const char *s) {
  cJSON *j = cJSON_CreateString(s);
  char *text = j ? cJSON_PrintUnformatted(j) : NULL;
  if (!text) ssm_fatal_nomem(0);
  printf(", \"%s\": %s", key, text);
  cJSON_free(text);
  cJSON_Delete(j);
}

static void print_bench(ssmc_session *s, const ssmc_bench_result *v, int reps, int json) {
  spread dec = spread_of(v, reps, offsetof(ssmc_bench_result, decode_tokens_per_s));
  spread fb = spread_of(v, reps, offsetof(ssmc_bench_result, decode_feedback_tokens_per_s));
  spread pre = spread_of(v, reps, offsetof(ssmc_bench_result, prefill_tokens_per_s));
  const ssmc_bench_result *b = &v[0];
  double gbs = dec.mean * (double)b->weight_bytes / 1e9;
  if (json) {
    printf("{\"decode_tokens_per_s\": %.2f, \"decode_tokens_per_s_stddev\": %.2f, "
           "\"decode_ms_per_token\": %.4f, \"decode_feedback_tokens_per_s\": %.2f, "
           "\"decode_feedback_tokens_per_s_stddev\": %.2f, \"prefill_tokens_per_s\": %.2f, "
           "\"prefill_tokens_per_s_stddev\": %.2f, \"reps\": %d, \"decode_tokens\": %d, "
           "\"prefill_tokens\": %d, \"weight_bytes\": %llu, \"decode_gb_per_s\": %.2f",
           dec.mean, dec.sd, 1e3 / dec.mean, fb.mean, fb.sd, pre.mean, pre.sd, reps,
           b->decode_tokens, b->prefill_tokens, (unsigned long long)b->weight_bytes, gbs);
    json_str("device", ssmc_session_device(s));
    json_str("dtype", b->dtype);
    json_str("ssmc_version", ssmc_version());
    json_str("git_revision", ssm_revision());
    return;
  }
  char sd[3][32] = {"", "", ""};
  if (reps > 1) {
    snprintf(sd[0], sizeof sd[0], " ± %.1f", dec.sd);
    snprintf(sd[1], sizeof sd[1], " ± %.1f", fb.sd);
    snprintf(sd[2], sizeof sd[2], " ± %.1f", pre.sd);
  }
  printf("device: %s, %s weights; ssmc %s (%s)%s\n", ssmc_session_device(s), b->dtype,
         ssmc_version(), ssm_revision(), reps > 1 ? "" : "; --reps N for the spread");
  if (reps > 1) printf("means and standard deviations of %d runs\n", reps);
  printf("decode:  %.1f%s tokens/s (%.3f ms/token, %d tokens; weights %.1f MB -> %.1f GB/s)\n"
         "decode, token fed back on the device: %.1f%s tokens/s\n"
         "prefill: %.1f%s tokens/s (%d tokens)\n",
         dec.mean, sd[0], 1e3 / dec.mean, b->decode_tokens, (double)b->weight_bytes / 1e6, gbs,
         fb.mean, sd[1], pre.mean, sd[2], b->prefill_tokens);
}

/* bench --batch B: the batched decode program's aggregate tokens a second. */
static ssmc_status bench_batch(ssmc_session *s, run_args *r, long batch) {
  if (ssmc_session_slots(s) != batch)
    return ssm_status_new(SSM_ERR_INVALID, "%s: --batch %ld: the model's batched decode program "
                          "advances %d sequences (compile it with --slots %ld)", r->model, batch,
                          ssmc_session_slots(s), batch);
  double *v = calloc((size_t)r->reps, sizeof *v);
  if (!v) ssm_fatal_nomem(0);
  ssmc_status st = NULL;
  for (int i = 0; !st && i < r->reps; i++) st = ssmc_session_bench_batch(s, (int)r->n, &v[i]);
  if (!st) {
    spread a = spread_at(v, sizeof *v, (int)r->reps);
    if (r->json)
      printf("{\"batch\": %ld, \"batch_tokens_per_s\": %.2f, \"batch_tokens_per_s_stddev\": %.2f, "
             "\"steps\": %ld, \"reps\": %ld", batch, a.mean, a.sd, r->n, r->reps);
    else
      printf("device: %s; ssmc %s (%s)\nbatched decode: %ld sequences, %.1f tokens/s in all "
             "(%.1f each, %ld steps)\n", ssmc_session_device(s), ssmc_version(), ssm_revision(),
             batch, a.mean, a.mean / (double)batch, r->n);
  }
  free(v);
  return st;
}

int ssm_cli_bench(int argc, char **argv) {
  run_args r = {.n = 128, .device = -1, .eos = -1, .backend = "vulkan", .reps = 1};
  ssmc_options_init(&r.o);
  int profile = 0;
  long batch = 0;
  opt opts[] = {SESSION_OPTS(&r), O_FLAG("--profile", &profile),
                O_INT("--batch", &batch, 1, SSM_MAX_SLOTS, "a sequence count from 1 to 256", NULL),
                O_INT("--reps", &r.reps, 1, 1000, "a count from 1 to 1000", NULL), {0}};
  SSM_CLI_PARSE("bench", argc, argv, opts, &r.model);
  if (strcmp(r.backend, "vulkan"))
    return ssm_cli_usage_error("bench", "--backend %s: bench times the Vulkan runtime",
                               r.backend);
  if (session_options(&r, "bench")) return 2;
  if (!ends_with(r.model, ".ssmb")) r.o.slots = (int)batch; /* compiled with the batch program */
  ssmc_session *s = NULL;
  ssmc_bench_result *v = calloc((size_t)r.reps, sizeof *v);
  ssmc_status st = open_session(&r, &s);
  if (!st && batch) st = bench_batch(s, &r, batch);
  for (int done = 0; !st && !batch && done < r.reps; done++) {
    if (r.reps > 1 && ssm_cli_progress_fn("benchmarking", (uint64_t)done, (uint64_t)r.reps,
                                          &r.progress))
      st = ssm_status_new(SSM_ERR_CANCELLED, "bench: cancelled");
    if (!st) st = ssmc_session_bench(s, (int)r.n, &v[done]);
  }
  ssm_cli_progress_end(&r.progress);
  if (!st && !batch) print_bench(s, v, (int)r.reps, r.json);
  /* the programs timed: decode and prefill, or the batch program (2) */
  static const struct {
    const char *name, *json;
    int runs;
  } progs[3] = {{"decode", "decode", 64}, {"prefill", "prefill", 8}, {"batch", "batch_program", 16}};
  for (int p = batch ? 2 : 0; profile && !st && p < (batch ? 3 : 2); p++) {
    ssmc_profile_step *steps;
    int n;
    st = ssmc_session_profile(s, p, progs[p].runs, &steps, &n);
    if (st) break;
    fputs(r.json ? ", " : "\n", stdout);
    ssm_cli_print_profile(stdout, r.json ? progs[p].json : progs[p].name, steps, n, progs[p].runs,
                          r.json);
    free(steps);
  }
  if (!st && r.json) puts("}");
  ssmc_session_close(s);
  free(v);
  free(r.cache_dir);
  return st ? ssm_cli_fail(st) : 0;
}

/* ---- ssmc perplexity ----------------------------------------------------------------- */

typedef struct {
  const int32_t *ids;
  size_t n, row; /* row i's logits predict ids[i + 1] */
  double nll;    /* the sum of -log p over the rows scored */
  size_t scored;
} scorer;

static int score_row(const float *logits, int64_t vocab, int64_t position, void *user) {
  scorer *sc = user;
  size_t i = sc->row++;
  if (i + 1 < sc->n) {
    double mx = logits[0], z = 0;
    for (int64_t v = 1; v < vocab; v++) mx = fmax(mx, logits[v]);
    for (int64_t v = 0; v < vocab; v++) z += exp(logits[v] - mx);
    sc->nll -= logits[sc->ids[i + 1]] - mx - log(z);
    sc->scored++;
  }
  return ssm_cli_signal != 0;
}

/* The text's tokens (--file, through the session's tokenizer) or --tokens. */
static ssmc_status text_ids(ssmc_session *s, run_args *r, int32_t **ids, size_t *n) {
  if (r->tokens) return ssm_cli_parse_ids("--tokens", r->tokens, ids, n);
  const ssmc_tokenizer *t = NULL;
  ssmc_status st = needs_tokenizer(ssmc_session_tokenizer(s, &t), "--file");
  char *text = NULL;
  size_t len = 0;
  if (!st) st = ssm_cli_text_file("--file", r->prompt_file, &text, &len);
  if (!st) st = ssmc_tokenizer_encode(t, text, len, ids, n);
  free(text);
  return st;
}

/* Feeds the whole text from a fresh state, as one sequence (a model with a
 * KV cache needs --max-seq at least its length), and reports
 * exp(mean -log p(token i+1 | tokens ..i)) over its tokens but the first. */
int ssm_cli_perplexity(int argc, char **argv) {
  run_args r = {.device = -1, .eos = -1, .backend = "auto"};
  ssmc_options_init(&r.o);
  opt opts[] = {SESSION_OPTS(&r), O_STR("--file", &r.prompt_file), O_STR("--tokens", &r.tokens),
                O_STR("--tokenizer", &r.o.tokenizer), {0}};
  SSM_CLI_PARSE("perplexity", argc, argv, opts, &r.model);
  if (session_options(&r, "perplexity")) return 2;
  if (!!r.prompt_file + !!r.tokens != 1)
    return ssm_cli_usage_error("perplexity", "give --file TEXT (or --tokens IDS): the text to "
                               "score");
  ssmc_session *s = NULL;
  int32_t *ids = NULL;
  size_t n = 0;
  ssmc_status st = check_inputs(&r, r.tokens ? NULL : "--file");
  if (!st && r.prompt_file) st = ssm_cli_readable("--file", r.prompt_file);
  if (!st) st = open_session(&r, &s);
  if (!st) st = text_ids(s, &r, &ids, &n);
  if (!st && n < 2)
    st = ssm_status_new(SSM_ERR_INVALID, "perplexity: the text is %zu token%s long; it needs "
                        "at least 2", n, n == 1 ? "" : "s");
  scorer sc = {.ids = ids, .n = n};
  if (!st) st = ssmc_session_feed(s, ids, n, score_row, &sc);
  if (!st && ssm_cli_signal) st = ssm_status_new(SSM_ERR_CANCELLED, "perplexity: cancelled");
  if (!st) {
    double mean = sc.nll / (double)sc.scored;
    if (r.json)
      printf("{\"perplexity\": %.6f, \"nll\": %.6f, \"tokens\": %zu, \"dtype\": \"%s\"}\n",
             exp(mean), mean, n, ssmc_session_dtype(s));
    else
      printf("perplexity %.4f over %zu tokens (mean negative log-likelihood %.6f, %s weights)\n",
             exp(mean), sc.scored, mean, ssmc_session_dtype(s));
  }
  if (!st && !r.quiet) ssm_cli_print_summary(s, &r.choice, 0);
  ssmc_session_close(s);
  free(ids);
  free(r.cache_dir);
  return st ? ssm_cli_fail(st) : 0;
}
