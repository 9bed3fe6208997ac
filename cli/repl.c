/*
 * repl.c — `ssmc run -i` on a terminal: a chat. Lines are edited with
 * libedit (a well-kept line editor: history, arrow keys, ~/.editrc) and
 * each one is a turn; the session's state goes on from turn to turn, so a
 * turn feeds only its new tokens.
 *
 * With a chat template (the model's, or --chat-template FILE), a line is a
 * user message: the conversation is rendered again with the generation
 * prompt, and what the state already covers (the text fed and generated so
 * far) is a prefix of it, so only the rest is fed; the reply ends at the
 * end-of-text id or the template's eos_token. When the template renders
 * the past differently (one that rewrites earlier turns), the state starts
 * afresh on the whole rendering. Without a template a line continues the
 * text as it is, as piped turns do.
 *
 * Ctrl-C during a reply stops it: what was printed stays part of the
 * conversation (the state covers it) and the prompt comes back. Ctrl-C at
 * an empty prompt, Ctrl-D or /quit end the chat.
 */
#include <errno.h>
#include <histedit.h>
#include <locale.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include <cjson/cJSON.h>

#include "chat/chat.h"
#include "cli/cli.h"

#define MAX_CONVERSATION ((size_t)1 << 30)

/* Ctrl-C: SIGINT during a reply; at the prompt, a key (see key_interrupt) */
enum { SIGNALLED = 1, KEY_LINE, KEY_EMPTY };
static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig) { interrupted = SIGNALLED; }

typedef struct {
  const ssm_cli_chat_args *a;
  ssm_chat *chat;
  cJSON *messages;  /* with a template: the conversation */
  ssm_sb fed;       /* with a template: the text the state covers */
  int32_t pending;  /* without: the id drawn but not fed yet, or -1 */
  int32_t eos;      /* the template's eos_token as one id, or -1 */
  int32_t eot;      /* the template's end of turn as one id, or -1 */
  const char *stops[SSMC_STOPS_MAX + 1]; /* --stop, and the end of turn as text */
  char *eot_text;   /* the end of turn when it is text, not one special token */
  ssmc_decoder *dec;
  ssm_cli_stopper reply; /* this turn's text, up to a stop string */
  size_t covered;   /* bytes of its text that the state covers: all of it, or when a
                     * stop string ended it, the text of the ids before the last */
  int stopped;      /* the reply was stopped before its last id was printed */
  ssmc_status failed;
} repl;

static const char help[] =
    "  a line            your turn; the model's reply follows\n"
    "  /reset            a fresh conversation\n"
    "  /save FILE        the state to FILE and the conversation to FILE.chat\n"
    "  /load FILE        back to a conversation /save wrote\n"
    "  /quit             the end (Ctrl-D, or Ctrl-C at an empty prompt)\n"
    "  /help             this list\n"
    "  //TEXT            the turn /TEXT\n"
    "  Ctrl-C during a reply stops it; what was printed stays in the conversation.\n";

static int on_token(int32_t id, void *user) {
  repl *r = user;
  if (interrupted || ssm_cli_signal || id == r->eos || id == r->eot) return r->stopped = 1;
  const char *text;
  size_t len;
  ssmc_status s = ssmc_decoder_feed(r->dec, id, &text, &len);
  if (s) {
    r->failed = s;
    return r->stopped = 1;
  }
  r->covered = r->reply.text.n;
  return r->stopped = ssm_cli_stop_add(&r->reply, text, len);
}

/* Feeds `ids` and streams the reply; *out_last is the last id drawn and
 * printed but not fed (-1: none). */
static ssmc_status reply(repl *r, const int32_t *ids, size_t nids, int32_t *out_last) {
  *out_last = -1;
  int32_t *gen = calloc((size_t)r->a->n + 1, sizeof *gen);
  if (!gen) ssm_fatal_nomem(0);
  size_t ngen = 0;
  ssmc_generate_options g = r->a->g;
  g.on_token = on_token;
  g.stop_at_eos = 1;
  g.user = r;
  r->stopped = 0;
  r->covered = 0;
  ssm_cli_stop_clear(&r->reply);
  ssmc_status st = ssmc_session_generate(r->a->s, ids, nids, r->a->n, &g, gen, &ngen);
  if (r->failed && !st) st = r->failed;
  else ssmc_status_free(r->failed);
  r->failed = NULL;
  const char *rest;
  size_t len;
  int hit = r->reply.hit; /* by the last id drawn, which was not fed */
  ssmc_status fs = ssmc_decoder_flush(r->dec, &rest, &len);
  ssm_cli_stop_add(&r->reply, rest, len);
  ssm_cli_stop_end(&r->reply);
  if (!hit) r->covered = r->reply.text.n;
  fputs(interrupted ? " [stopped]\n" : "\n", stdout);
  fflush(stdout);
  if (!st) st = fs;
  else ssmc_status_free(fs);
  if (!st) st = ssm_sb_status(&r->reply.text, "the reply");
  if (!st && !r->stopped && ngen == (size_t)r->a->n && ngen) *out_last = gen[ngen - 1];
  free(gen);
  return st;
}

static ssmc_status encode(repl *r, const char *text, size_t len, int32_t first, int32_t **out,
                          size_t *out_n) {
  int32_t *ids = NULL;
  size_t n = 0;
  SSM_TRY(ssmc_tokenizer_encode(r->a->t, text, len, &ids, &n));
  int32_t *all = malloc(sizeof *all * (n + 1));
  if (!all) ssm_fatal_nomem(0);
  *out_n = 0;
  if (first >= 0) all[(*out_n)++] = first;
  memcpy(all + *out_n, ids, sizeof *ids * n);
  *out_n += n;
  free(ids);
  *out = all;
  return NULL;
}

static void add_message(cJSON *messages, const char *role, const char *content) {
  cJSON *m = cJSON_CreateObject();
  if (!m || !cJSON_AddStringToObject(m, "role", role) ||
      !cJSON_AddStringToObject(m, "content", content) || !cJSON_AddItemToArray(messages, m))
    ssm_fatal_nomem(0);
}

/* One user line (its newline kept, for the turns without a template). */
static ssmc_status turn(repl *r, const char *line, size_t len) {
  int32_t *ids = NULL, last = -1;
  size_t nids = 0;
  ssmc_status st = NULL;
  if (!r->chat) {
    SSM_TRY(encode(r, line, len, r->pending, &ids, &nids));
    st = nids ? reply(r, ids, nids, &last) : NULL;
    if (nids && !st) r->pending = last;
    free(ids);
    return st;
  }
  char *content = NULL, *text = NULL;
  size_t n = 0;
  SSM_TRY(ssm_strndup(line, len - (len && line[len - 1] == '\n'), "the turn", &content));
  add_message(r->messages, "user", content);
  free(content);
  st = ssm_chat_render(r->chat, r->messages, NULL, NULL, 1, &text, &n);
  if (!st && (n < r->fed.n || memcmp(text, ssm_sb_str(&r->fed), r->fed.n))) {
    st = ssmc_session_reset(r->a->s); /* the template rewrote the past */
    ssm_sb_clear(&r->fed);
    r->pending = -1;
  }
  /* the last id of a reply cut at -n was printed but not fed: it goes first */
  if (!st) st = encode(r, text + r->fed.n, n - r->fed.n, r->pending, &ids, &nids);
  if (!st && nids) st = reply(r, ids, nids, &last);
  if (!st) {
    r->pending = last;
    ssm_sb_clear(&r->fed);
    ssm_sb_append(&r->fed, text, n);
    ssm_sb_append(&r->fed, ssm_sb_str(&r->reply.text), r->covered);
    st = ssm_sb_status(&r->fed, "the conversation");
    char *said = NULL;
    if (!st) st = ssm_strndup(ssm_sb_str(&r->reply.text), r->reply.end, "the reply", &said);
    if (!st) add_message(r->messages, "assistant", said);
    free(said);
  } else {
    cJSON_DeleteItemFromArray(r->messages, cJSON_GetArraySize(r->messages) - 1);
  }
  free(ids);
  free(text);
  return st;
}

static ssmc_status reset(repl *r) {
  cJSON_Delete(r->messages);
  if (!(r->messages = cJSON_CreateArray())) ssm_fatal_nomem(0);
  ssm_sb_clear(&r->fed);
  r->pending = -1;
  return ssmc_session_reset(r->a->s);
}

static char *sidecar(const char *path) {
  ssm_sb p = {0};
  ssm_sb_xprintf(&p, "%s.chat", path);
  return ssm_sb_xtake(&p);
}

/* /save FILE: the state to FILE, the conversation to FILE.chat (JSON:
 * messages, the text fed, the pending id). */
static ssmc_status save(repl *r, const char *path) {
  cJSON *j = cJSON_CreateObject();
  if (!j || !cJSON_AddItemToObject(j, "messages", cJSON_Duplicate(r->messages, 1)) ||
      !cJSON_AddStringToObject(j, "fed", ssm_sb_str(&r->fed)) ||
      !cJSON_AddNumberToObject(j, "pending", r->pending))
    ssm_fatal_nomem(0);
  char *text = cJSON_Print(j), *side = sidecar(path);
  if (!text) ssm_fatal_nomem(0);
  ssmc_status st = ssmc_session_save_state(r->a->s, path);
  size_t len = strlen(text);
  const void *parts[] = {text};
  if (!st) st = ssm_file_write(side, 1, parts, &len);
  if (st) st = ssm_status_wrap(st, "/save %s", path);
  cJSON_free(text);
  cJSON_Delete(j);
  free(side);
  return st;
}

/* /load FILE: nothing changes unless both files read. */
static ssmc_status load(repl *r, const char *path) {
  char *side = sidecar(path), *text = NULL;
  size_t len = 0;
  ssmc_status st = ssm_file_read(side, MAX_CONVERSATION, &text, &len);
  cJSON *j = st ? NULL : cJSON_ParseWithLength(text, len);
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "messages"),
              *fed = cJSON_GetObjectItemCaseSensitive(j, "fed"),
              *pending = cJSON_GetObjectItemCaseSensitive(j, "pending");
  if (!st && (!cJSON_IsArray(m) || !cJSON_IsString(fed) || !cJSON_IsNumber(pending) ||
              pending->valuedouble < -1 ||
              pending->valuedouble >= ssmc_tokenizer_vocab_size(r->a->t)))
    st = ssm_status_new(SSM_ERR_INVALID, "%s: not a conversation that /save wrote", side);
  if (!st) st = ssmc_session_load_state(r->a->s, path);
  if (!st) {
    cJSON_Delete(r->messages);
    r->messages = cJSON_Duplicate(m, 1);
    if (!r->messages) ssm_fatal_nomem(0);
    ssm_sb_clear(&r->fed);
    ssm_sb_append(&r->fed, fed->valuestring, strlen(fed->valuestring));
    st = ssm_sb_status(&r->fed, "the conversation");
    r->pending = (int32_t)pending->valuedouble;
  }
  if (st) st = ssm_status_wrap(st, "/load %s", path);
  cJSON_Delete(j);
  free(text);
  free(side);
  return st;
}

/* A line that starts with '/'. Returns 1 for /quit. A failed /save or
 * /load is said and the chat goes on; *fatal gets an error that ends it. */
static int command(repl *r, const char *line, ssmc_status *fatal) {
  char name[32] = "", arg[4096] = "";
  int k = sscanf(line, "/%31s %4095[^\n]", name, arg);
  ssmc_status st = NULL;
  if (k >= 1 && !strcmp(name, "quit")) return 1;
  if (k >= 1 && !strcmp(name, "help")) {
    fputs(help, stderr);
  } else if (k >= 1 && !strcmp(name, "reset")) {
    *fatal = reset(r);
    if (!*fatal) fputs("a fresh conversation\n", stderr);
  } else if (k >= 1 && (!strcmp(name, "save") || !strcmp(name, "load"))) {
    if (k < 2) {
      fprintf(stderr, "/%s FILE: which file?\n", name);
      return 0;
    }
    st = name[0] == 's' ? save(r, arg) : load(r, arg);
    if (!st) fprintf(stderr, "%s %s\n", name[0] == 's' ? "saved to" : "loaded from", arg);
  } else {
    fprintf(stderr, "unknown command '/%s' (/help lists them)\n", name);
  }
  if (st) {
    fprintf(stderr, "%s\n", ssmc_status_message(st));
    ssmc_status_free(st);
  }
  return 0;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Whether `id` is a special token: text that decoding leaves out. */
static int special(const ssmc_tokenizer *t, int32_t id) {
  char *kept = NULL, *skipped = NULL;
  size_t nk = 0, ns = 0;
  ssmc_status st = ssmc_tokenizer_decode(t, &id, 1, 0, &kept, &nk);
  if (!st) st = ssmc_tokenizer_decode(t, &id, 1, 1, &skipped, &ns);
  int is = !st && nk && !ns;
  ssmc_status_free(st);
  free(kept);
  free(skipped);
  return is;
}

/* The template's end of turn: what it renders after an assistant message
 * (one user and one assistant message, no generation prompt), trailing
 * whitespace left out. When a special token begins it (after whitespace),
 * a reply ends at that id (<|im_end|>, <|eot_id|>); otherwise the text is
 * one more stop string. Nothing when the template renders no such end. */
static ssmc_status end_of_turn(repl *r) {
  static const char mark[] = "ssmc-end-of-turn-mark";
  cJSON *m = cJSON_CreateArray();
  if (!m) ssm_fatal_nomem(0);
  add_message(m, "user", "hi");
  add_message(m, "assistant", mark);
  char *text = NULL;
  size_t n = 0;
  ssmc_status st = ssm_chat_render(r->chat, m, NULL, NULL, 0, &text, &n);
  cJSON_Delete(m);
  const char *at = st ? NULL : strstr(text, mark), *after;
  while (at && (after = strstr(at + 1, mark))) at = after;
  ssmc_status_free(st); /* a template that wants other turns: no end of turn */
  st = NULL;
  if (!at) {
    free(text);
    return NULL;
  }
  const char *e = at + strlen(mark), *end = text + n, *word = e;
  while (end > e && is_space(end[-1])) end--;
  while (word < end && is_space(*word)) word++;
  int32_t *ids = NULL;
  size_t nids = 0;
  st = word < end ? ssmc_tokenizer_encode(r->a->t, word, (size_t)(end - word), &ids, &nids) : NULL;
  if (!st && nids && special(r->a->t, ids[0])) r->eot = ids[0];
  else if (!st && end > e && (size_t)(end - e) <= SSMC_STOP_BYTES_MAX)
    st = ssm_strndup(e, (size_t)(end - e), "the end of turn", &r->eot_text);
  free(ids);
  free(text);
  return st;
}

static char *prompt(EditLine *el) { return "> "; }

/* Ctrl-C at the prompt (the line editor reads it as a key): the read ends
 * as at Enter with a line typed (which `interrupted` says to drop), else as
 * at Ctrl-D. */
static unsigned char key_interrupt(EditLine *el, int ch) {
  const LineInfo *li = el_line(el);
  interrupted = li->lastchar > li->buffer ? KEY_LINE : KEY_EMPTY;
  return interrupted == KEY_LINE ? CC_NEWLINE : CC_EOF;
}

ssmc_status ssm_cli_chat(const ssm_cli_chat_args *a) {
  repl r = {.a = a, .pending = -1, .eos = -1, .eot = -1};
  ssmc_status st = ssm_chat_open(ssmc_session_model_dir(a->s), a->chat_template, &r.chat);
  if (!st) st = ssmc_decoder_create(a->t, 1, &r.dec);
  if (st) {
    ssm_chat_close(r.chat);
    return st;
  }
  if (!(r.messages = cJSON_CreateArray())) ssm_fatal_nomem(0);
  const char *eos = r.chat ? ssm_chat_token(r.chat, "eos_token") : NULL;
  if (eos) r.eos = ssmc_tokenizer_token_id(a->t, eos);
  if (r.chat) st = end_of_turn(&r);
  for (int i = 0; i < a->nstops; i++) r.stops[i] = a->stops[i];
  r.reply.stops = r.stops;
  r.reply.nstops = a->nstops;
  if (r.eot_text) r.stops[r.reply.nstops++] = r.eot_text;
  if (r.chat)
    fprintf(stderr, "ssmc: chat template: %s; /help for commands\n", ssm_chat_source(r.chat));
  else
    fprintf(stderr, "ssmc: no chat template (--chat-template FILE for one): each line continues "
            "the text as it is; /help for commands\n");
  /* SIGINT (^C while the terminal is cooked, during a reply) stops the reply */
  struct sigaction sa = {.sa_handler = on_interrupt}, old;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old);
  /* the terminal's character set, for the editor to take UTF-8 as characters
   * (in the C locale it drops every byte past ASCII); the C locale again
   * after the chat */
  setlocale(LC_CTYPE, "");
  EditLine *el = el_init("ssmc", stdin, stderr, stderr);
  History *h = history_init();
  HistEvent ev;
  if (!el || !h) ssm_fatal_nomem(0);
  history(h, &ev, H_SETSIZE, 1000);
  history(h, &ev, H_SETUNIQUE, 1);
  el_set(el, EL_EDITOR, "emacs");
  el_set(el, EL_HIST, history, h);
  el_set(el, EL_PROMPT, prompt);
  /* wide strings: libedit keeps them as given (narrow ones it copies and never frees) */
  el_wset(el, EL_ADDFN, L"ssmc-interrupt", L"drop the line, or end at an empty prompt",
          key_interrupt);
  el_set(el, EL_BIND, "^C", "ssmc-interrupt", NULL);
  el_set(el, EL_SETTY, "-d", "-isig", NULL); /* at the prompt ^C is that key, not SIGINT */
  el_source(el, NULL);
  if (a->first && a->first_len) {
    fprintf(stderr, "> %.*s%s", (int)a->first_len, a->first,
            a->first[a->first_len - 1] == '\n' ? "" : "\n");
    st = turn(&r, a->first, a->first_len);
  }
  while (!st && !ssm_cli_signal) {
    interrupted = 0;
    int count = 0;
    errno = 0;
    const char *line = el_gets(el, &count);
    if (interrupted >= KEY_LINE) fputc('\n', stderr);
    if (interrupted == KEY_LINE) continue; /* the line typed is dropped */
    if (!line && interrupted == KEY_EMPTY) break;
    interrupted = 0; /* a SIGINT while the editor set the terminal up */
    if (!line || count <= 0) { /* Ctrl-D, or the end of input */
      fputc('\n', stderr);
      break;
    }
    size_t len = (size_t)count;
    if (len == 1 && line[0] == '\n') continue;
    history(h, &ev, H_ENTER, line);
    if (line[0] == '/' && line[1] != '/') {
      if (command(&r, line, &st)) break;
      continue;
    }
    if (line[0] == '/') line++, len--;
    st = turn(&r, line, len);
  }
  el_end(el);
  history_end(h);
  setlocale(LC_CTYPE, "C");
  sigaction(SIGINT, &old, NULL);
  cJSON_Delete(r.messages);
  ssm_sb_free(&r.fed);
  ssm_sb_free(&r.reply.text);
  free(r.eot_text);
  ssmc_decoder_destroy(r.dec);
  ssm_chat_close(r.chat);
  return st;
}
