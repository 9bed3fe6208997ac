/*
 * api.c — the OpenAI request and response bodies: a /v1/completions or
 * /v1/chat/completions body checked field by field into a job (every
 * problem is a 400 naming the parameter, a NUL character in any string
 * included), the prompt templated and
 * tokenized; and the responses, whole or as server-sent events.
 */
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "serve/internal.h"


char *ssm_api_error(int status, const char *type, const char *param, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ssm_sb m = {0};
  ssm_sb_vprintf(&m, fmt, ap);
  va_end(ap);
  cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
  cJSON_AddStringToObject(e, "message", ssm_sb_str(&m));
  cJSON_AddStringToObject(e, "type", type);
  if (param) cJSON_AddStringToObject(e, "param", param);
  else cJSON_AddNullToObject(e, "param");
  cJSON_AddNullToObject(e, "code");
  char *s = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  ssm_sb_free(&m);
  (void)status;
  return s;
}

void ssm_job_free(ssm_job *j) {
  if (!j) return;
  free(j->prompt);
  for (int i = 0; i < j->nstop; i++) free(j->stop[i]);
  free(j->stop);
  ssm_vec_free(&j->tokens);
  ssmc_decoder_destroy(j->dec);
  ssmc_snapshot_free(j->parked);
  ssm_sb_free(&j->text);
  ssm_sb_free(&j->out);
  ssm_vec_free(&j->lps);
  free(j->row);
  ssm_status_free(j->step_failed);
  pthread_mutex_destroy(&j->mu);
  pthread_cond_destroy(&j->cv);
  free(j);
}

/* ---- fields ------------------------------------------------------------------------ */

typedef struct {
  const cJSON *root;
  char *err;
  ssm_status nomem; /* out of memory: the request fails with it, not with `err` */
} body;

/* Records running out of memory (the first time); 0, as bad() returns. */
static int out_of_memory(body *b, ssm_status s) {
  if (b->nomem) ssm_status_free(s);
  else b->nomem = s;
  return 0;
}

static const cJSON *field(const body *b, const char *name) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(b->root, name);
  return cJSON_IsNull(f) ? NULL : f;
}

static int bad(body *b, const char *param, const char *fmt, ...) SSM_PRINTF(3, 4);
static int bad(body *b, const char *param, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ssm_sb m = {0};
  ssm_sb_printf(&m, "%s: ", param);
  ssm_sb_vprintf(&m, fmt, ap);
  va_end(ap);
  ssm_status s = ssm_sb_status(&m, "an error message");
  if (s) out_of_memory(b, s);
  else if (!b->err) b->err = ssm_api_error(400, "invalid_request_error", param, "%s", ssm_sb_str(&m));
  ssm_sb_free(&m);
  return 0;
}

/* A number in [lo, hi] (or absent: *out keeps its default). */
static int number(body *b, const char *name, double lo, double hi, int open_lo, int integer, double *out) {
  const cJSON *f = field(b, name);
  if (!f) return 1;
  double v = f->valuedouble;
  if (!cJSON_IsNumber(f) || !isfinite(v) || v < lo || v > hi || (open_lo && v == lo) ||
      (integer && v != floor(v)))
    return bad(b, name, "expected %s %s %g to %g%s", integer ? "an integer" : "a number",
               open_lo ? "above" : "from", lo, hi, cJSON_IsNumber(f) ? "" : ", not a number");
  *out = v;
  return 1;
}

/* Parameters this server takes only at their neutral value. */
static int neutral(body *b, int chat) {
  static const struct {
    const char *name;
    double value; /* the accepted number; NAN: only false / null */
  } only[] = {{"n", 1}, {"best_of", 1}, {"presence_penalty", 0}, {"frequency_penalty", 0},
              {"echo", NAN}, {"logprobs", NAN}, {"top_logprobs", 0}};
  for (size_t i = 0; i < sizeof only / sizeof only[0]; i++) {
    const cJSON *f = field(b, only[i].name);
    if (!f || (!chat && !strcmp(only[i].name, "logprobs"))) continue; /* logprobs_field */
    int ok = isnan(only[i].value) ? cJSON_IsFalse(f) || (cJSON_IsNumber(f) && f->valuedouble == 0)
                                  : cJSON_IsNumber(f) && f->valuedouble == only[i].value;
    if (!ok) {
      if (isnan(only[i].value)) return bad(b, only[i].name, "not supported by ssmc serve");
      return bad(b, only[i].name, "only %g is supported by ssmc serve", only[i].value);
    }
  }
  static const char *const never[] = {"tools", "functions", "suffix", NULL};
  for (int i = 0; never[i]; i++) {
    const cJSON *f = field(b, never[i]);
    if (f && !(cJSON_IsArray(f) && !cJSON_GetArraySize(f)) && !(cJSON_IsString(f) && !*f->valuestring))
      return bad(b, never[i], "not supported by ssmc serve");
  }
  const cJSON *lb = field(b, "logit_bias");
  if (lb && !(cJSON_IsObject(lb) && !lb->child)) return bad(b, "logit_bias", "not supported by ssmc serve");
  const cJSON *rf = field(b, "response_format"), *t = rf ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
  if (rf && !(cJSON_IsString(t) && !strcmp(t->valuestring, "text")))
    return bad(b, "response_format", "only {\"type\": \"text\"} is supported by ssmc serve");
  return 1;
}

/* /v1/completions' `logprobs`: the number of alternatives listed with each
 * generated token's log-probability (0 to 5), not with stream. */
static int logprobs_field(body *b, ssm_job *j, int stream) {
  double v = -1;
  j->logprobs = -1;
  if (!number(b, "logprobs", 0, SSM_MAX_LOGPROBS, 0, 1, &v)) return 0;
  if (v >= 0 && stream) return bad(b, "logprobs", "not supported with stream by ssmc serve");
  j->logprobs = (int)v;
  return 1;
}

static int stops(body *b, ssm_job *j) {
  const cJSON *f = field(b, "stop");
  if (!f) return 1;
  int n = cJSON_IsString(f) ? 1 : cJSON_IsArray(f) ? cJSON_GetArraySize(f) : -1;
  if (n < 0 || n > SSMC_STOPS_MAX) return bad(b, "stop", "expected a string or an array of up to %d strings", SSMC_STOPS_MAX);
  ssm_status st = ssm_status_wrap(ssm_alloc((size_t)n + 1, sizeof *j->stop, (void **)&j->stop), "stop");
  if (st) return out_of_memory(b, st);
  for (int i = 0; i < n; i++) {
    const cJSON *s = cJSON_IsString(f) ? f : cJSON_GetArrayItem(f, i);
    if (!cJSON_IsString(s) || !*s->valuestring || strlen(s->valuestring) > SSMC_STOP_BYTES_MAX)
      return bad(b, "stop", "item %d: expected a non-empty string of at most %d bytes", i, SSMC_STOP_BYTES_MAX);
    if ((st = ssm_strdup(s->valuestring, "stop", &j->stop[j->nstop]))) return out_of_memory(b, st);
    j->nstop++;
  }
  return 1;
}

static int tokenize(body *b, const ssm_api *api, const char *param, const char *text, ssm_job *j) {
  ssm_status s = ssmc_tokenizer_encode(api->tok, text, strlen(text), &j->prompt, &j->nprompt);
  if (ssm_status_code(s) == SSM_ERR_NOMEM) return out_of_memory(b, ssm_status_wrap(s, "%s", param));
  if (s) {
    bad(b, param, "%s", ssmc_status_message(s));
    ssmc_status_free(s);
    return 0;
  }
  return 1;
}

static int prompt_field(body *b, const ssm_api *api, ssm_job *j) {
  const cJSON *p = field(b, "prompt");
  if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child)) p = p->child;
  if (cJSON_IsString(p)) return tokenize(b, api, "prompt", p->valuestring, j);
  if (!cJSON_IsArray(p))
    return bad(b, "prompt", p ? "expected a string, one string in an array, or an array of token ids"
                              : "missing (a string or an array of token ids)");
  size_t n = (size_t)cJSON_GetArraySize(p);
  ssm_status s = ssm_status_wrap(ssm_alloc(n + 1, sizeof *j->prompt, (void **)&j->prompt), "prompt");
  if (s) return out_of_memory(b, s);
  for (const cJSON *e = p->child; e; e = e->next) {
    if (cJSON_IsString(e)) return bad(b, "prompt", "several prompts in one request are not supported");
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
        e->valuedouble >= (double)api->vocab)
      return bad(b, "prompt", "item %zu: expected a token id from 0 to %lld", j->nprompt,
                 (long long)api->vocab - 1);
    j->prompt[j->nprompt++] = (int32_t)e->valuedouble;
  }
  return 1;
}

/* messages -> the template's text -> tokens. Text parts of a content array
 * are kept as they are (templates read them); other parts are refused. */
static int messages_field(body *b, const ssm_api *api, ssm_job *j) {
  const cJSON *m = field(b, "messages");
  if (!cJSON_IsArray(m) || !cJSON_GetArraySize(m)) return bad(b, "messages", "expected a non-empty array of messages");
  int i = 0;
  for (const cJSON *e = m->child; e; e = e->next, i++) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(e, "role"), *content = cJSON_GetObjectItemCaseSensitive(e, "content");
    char param[64];
    snprintf(param, sizeof param, "messages[%d]", i);
    if (!cJSON_IsObject(e) || !cJSON_IsString(role)) return bad(b, param, "expected an object with a string 'role'");
    if (cJSON_IsArray(content)) {
      for (const cJSON *part = content->child; part; part = part->next) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type"), *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text))
          return bad(b, param, "content parts other than {\"type\": \"text\", \"text\": ...} are not supported");
      }
    } else if (!cJSON_IsString(content) && !cJSON_IsNull(content) && content) {
      return bad(b, param, "'content' must be a string, an array of text parts, or null");
    }
  }
  if (!api->chat)
    return bad(b, "messages", "this model has no chat template (none in its tokenizer_config.json); "
               "start ssmc serve with --chat-template FILE, or use /v1/completions");
  char *text = NULL;
  size_t n;
  /* on this connection's thread: a template is untrusted, but every render
   * is bounded (chat/jinja_value.h: at most 5M steps, well under a second;
   * 8 MiB of output and 32 MiB of values; nesting bounded below the thread's
   * stack), and past a bound it is this request's 400, as any template error */
  ssm_status s = ssm_chat_render(api->chat, m, NULL, NULL, 1, &text, &n);
  if (ssm_status_code(s) == SSM_ERR_NOMEM) return out_of_memory(b, ssm_status_wrap(s, "messages"));
  if (s) {
    bad(b, "messages", "%s", ssmc_status_message(s));
    ssmc_status_free(s);
    return 0;
  }
  int ok = tokenize(b, api, "messages", text, j);
  free(text);
  return ok;
}

ssm_status ssm_api_parse(const ssm_api *api, int chat, const char *text, size_t len, ssm_job **out,
                         char **out_error) {
  *out = NULL;
  *out_error = NULL;
  cJSON *root = NULL;
  ssm_status s = ssm_json_parse("request body", text, len, &root);
  if (ssm_status_code(s) == SSM_ERR_NOMEM) return s;
  if (s) {
    *out_error = ssm_api_error(400, "invalid_request_error", NULL, "%s", ssmc_status_message(s));
    ssmc_status_free(s);
    return NULL;
  }
  /* cJSON's strings end at a NUL: a prompt, a message or a stop string
   * holding one would lose what follows it, so it is refused */
  ssm_sb where = {0};
  if (ssm_json_find_nul(text, len, &where)) {
    cJSON_Delete(root);
    s = ssm_sb_status(&where, "the place of a NUL character");
    if (!s)
      *out_error = ssm_api_error(400, "invalid_request_error", ssm_sb_str(&where),
                                 "%s: holds a NUL character (\\u0000), which ssmc serve does not "
                                 "take in a string", ssm_sb_str(&where));
    ssm_sb_free(&where);
    return s;
  }
  ssm_sb_free(&where);
  body b = {root, NULL, NULL};
  ssm_job *j;
  if ((s = ssm_status_wrap(ssm_alloc(1, sizeof *j, (void **)&j), "a request"))) {
    cJSON_Delete(root);
    return s;
  }
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cv, NULL);
  j->refs = 1;
  j->chat = chat;
  j->slot = -1;
  const ssmc_generate_options *d = &api->dflt;
  int ds = api->dflt_sampling;
  double max_tokens = chat ? api->o->max_tokens : 16, temperature = ds ? d->temperature : 1,
         top_p = ds ? d->top_p : 1, top_k = ds ? d->top_k : 0, seed = NAN, min_p = ds ? d->min_p : 0,
         penalty = d->repeat_penalty > 0 ? d->repeat_penalty : 1;
  int ok = cJSON_IsObject(root) || bad(&b, "body", "expected a JSON object");
  const cJSON *model = ok ? field(&b, "model") : NULL, *stream = ok ? field(&b, "stream") : NULL;
  const char *mt = chat && ok && field(&b, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  ok = ok && (!model || cJSON_IsString(model) || bad(&b, "model", "expected a string"));
  ok = ok && (!stream || cJSON_IsBool(stream) || bad(&b, "stream", "expected true or false"));
  ok = ok && number(&b, mt, 0, api->o->max_tokens, 0, 1, &max_tokens);
  ok = ok && number(&b, "temperature", 0, 2, 0, 0, &temperature);
  ok = ok && number(&b, "top_p", 0, 1, 1, 0, &top_p);
  ok = ok && ((float)top_p > 0 || bad(&b, "top_p", "%g is 0 in the sampler's 32-bit float: expected "
                                      "a number from %g to 1", top_p, (double)FLT_TRUE_MIN));
  ok = ok && number(&b, "top_k", 0, 1e9, 0, 1, &top_k);
  ok = ok && number(&b, "min_p", 0, 1, 0, 0, &min_p);
  /* transformers' name, and llama.cpp's */
  const char *pn = ok && !field(&b, "repetition_penalty") ? "repeat_penalty" : "repetition_penalty";
  ok = ok && number(&b, pn, 0, FLT_MAX, 1, 0, &penalty);
  ok = ok && number(&b, "seed", -9.2e18, 9.2e18, 0, 1, &seed);
  ok = ok && neutral(&b, chat) && stops(&b, j);
  ok = ok && (chat || logprobs_field(&b, j, cJSON_IsTrue(stream)));
  if (chat) j->logprobs = -1;
  j->tok = api->tok;
  const cJSON *so = ok ? field(&b, "stream_options") : NULL;
  if (ok && so) {
    const cJSON *iu = cJSON_GetObjectItemCaseSensitive(so, "include_usage");
    ok = (cJSON_IsObject(so) && (!iu || cJSON_IsBool(iu))) ||
         bad(&b, "stream_options", "expected {\"include_usage\": true|false}");
    j->include_usage = cJSON_IsTrue(iu);
  }
  if (ok && !chat && field(&b, "messages")) ok = bad(&b, "messages", "belongs to /v1/chat/completions");
  if (ok && chat && field(&b, "prompt")) ok = bad(&b, "prompt", "belongs to /v1/completions");
  ok = ok && (chat ? messages_field(&b, api, j) : prompt_field(&b, api, j));
  if (ok && !j->nprompt) ok = bad(&b, chat ? "messages" : "prompt", "the prompt has no tokens");
  /* the smaller bound is named: the positions of a KV cache, or --max-prompt-tokens */
  int by_seq = api->max_seq && api->max_seq <= api->o->max_prompt_tokens;
  if (ok && by_seq && j->nprompt > (size_t)api->max_seq)
    ok = bad(&b, chat ? "messages" : "prompt", "the prompt has %zu tokens, more than the %lld "
             "positions the model holds (ssmc serve --max-seq)", j->nprompt, (long long)api->max_seq);
  if (ok && !by_seq && j->nprompt > (size_t)api->o->max_prompt_tokens)
    ok = bad(&b, chat ? "messages" : "prompt", "the prompt has %zu tokens, more than the %d a "
             "request may have (ssmc serve --max-prompt-tokens)", j->nprompt, api->o->max_prompt_tokens);
  if (ok) {
    j->stream = cJSON_IsTrue(stream);
    j->max_tokens = (int)max_tokens;
    j->temperature = (float)temperature;
    j->top_p = (float)top_p;
    j->top_k = (int)top_k;
    j->min_p = (float)min_p;
    j->repeat_penalty = penalty == 1 ? 0 : (float)penalty;
    int64_t sd = isnan(seed) ? -1 : (int64_t)seed % 16777216; /* the sampler's seeds are 24-bit */
    if (sd < 0 && !isnan(seed)) sd += 16777216;
    if (sd < 0) {
      uint32_t r = 0;
      if (getrandom(&r, sizeof r, 0) != sizeof r) r = (uint32_t)time(NULL);
      sd = r & 0xffffff;
    }
    j->seed = (uint32_t)sd;
    j->created = (long)time(NULL);
    j->model_id = api->o->model_id;
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, 0) != sizeof r) r = (uint64_t)clock();
    snprintf(j->id, sizeof j->id, "%s-%016llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)r);
  }
  cJSON_Delete(root);
  if (b.nomem) {
    free(b.err);
    ssm_job_free(j);
    return b.nomem;
  }
  if (!ok) {
    *out_error = b.err;
    ssm_job_free(j);
    return NULL;
  }
  *out = j;
  return NULL;
}

/* ---- responses ---------------------------------------------------------------------------- */

static cJSON *usage(const ssm_job *j) {
  cJSON *u = cJSON_CreateObject();
  cJSON_AddNumberToObject(u, "prompt_tokens", (double)j->nprompt);
  cJSON_AddNumberToObject(u, "completion_tokens", j->ngen);
  cJSON_AddNumberToObject(u, "total_tokens", (double)j->nprompt + j->ngen);
  cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
  cJSON_AddNumberToObject(d, "cached_tokens", (double)j->reused);
  return u;
}

static cJSON *envelope(const ssm_job *j, int chunk) {
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "id", j->id);
  cJSON_AddStringToObject(r, "object", j->chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                : "text_completion");
  cJSON_AddNumberToObject(r, "created", (double)j->created);
  cJSON_AddStringToObject(r, "model", j->model_id);
  cJSON_AddStringToObject(r, "system_fingerprint", "ssmc-" SSM_VERSION);
  return r;
}

/* Appends `r` (freed) to j->out, as an event when `event`. */
static ssm_status emit(ssm_job *j, cJSON *r, int event) {
  char *s = cJSON_PrintUnformatted(r);
  cJSON_Delete(r);
  /* (cJSON gives no size: one node's, the least that failed) */
  if (!s) return ssm_nomem(sizeof(cJSON), "the response");
  ssm_sb_printf(&j->out, event ? "data: %s\n\n" : "%s", s);
  free(s);
  return ssm_sb_status(&j->out, "the response");
}

ssm_status ssm_api_chunk(ssm_job *j, const char *delta, size_t n, const char *finish, int with_usage) {
  char *text = NULL;
  if (!with_usage) SSM_TRY(ssm_strndup(delta ? delta : "", delta ? n : 0, "the response", &text));
  cJSON *r = envelope(j, 1), *choices = cJSON_AddArrayToObject(r, "choices");
  if (with_usage) {
    cJSON_AddItemToObject(r, "usage", usage(j));
    return emit(j, r, 1);
  }
  cJSON *c = cJSON_CreateObject();
  cJSON_AddNumberToObject(c, "index", 0);
  if (j->chat) {
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    if (!j->sent && !finish) cJSON_AddStringToObject(d, "role", "assistant");
    if (delta) cJSON_AddStringToObject(d, "content", text);
  } else {
    cJSON_AddStringToObject(c, "text", text);
  }
  free(text);
  cJSON_AddNullToObject(c, "logprobs");
  if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
  else cJSON_AddNullToObject(c, "finish_reason");
  cJSON_AddItemToArray(choices, c);
  cJSON_AddNullToObject(r, "usage");
  return emit(j, r, 1);
}

/* OpenAI's completions logprobs: tokens (each one's text), token_logprobs,
 * top_logprobs ({text: logprob} of the `logprobs` likeliest) and
 * text_offset (into the completion's text), for the tokens whose text is
 * in the response (sched.c leaves out those of a stop string): a token's
 * text runs to the next one's offset or the end of the text, so the
 * token in which a stop string begins is cut there, and the tokens join to
 * the text. */
static ssm_status logprobs(const ssm_job *j, cJSON **out) {
  *out = NULL;
  cJSON *r = cJSON_CreateObject(), *tokens = cJSON_AddArrayToObject(r, "tokens"),
        *lps = cJSON_AddArrayToObject(r, "token_logprobs"), *tops = cJSON_AddArrayToObject(r, "top_logprobs"),
        *offsets = cJSON_AddArrayToObject(r, "text_offset");
  for (size_t i = 0; i < j->lps.n; i++) {
    const ssm_logprob *l = &j->lps.items[i];
    size_t end = i + 1 < j->lps.n ? j->lps.items[i + 1].offset : j->text.n;
    SSM_ASSERT(l->offset <= end && end <= j->text.n);
    char *piece;
    ssm_status s = ssm_strndup(j->text.s ? j->text.s + l->offset : "", end > l->offset ? end - l->offset : 0,
                               "logprobs", &piece);
    if (s) {
      cJSON_Delete(r);
      return s;
    }
    cJSON_AddItemToArray(tokens, cJSON_CreateString(piece));
    free(piece);
    cJSON_AddItemToArray(lps, cJSON_CreateNumber(l->lp));
    cJSON *top = cJSON_CreateObject();
    cJSON_AddItemToArray(tops, top);
    for (int k = 0; k < j->logprobs; k++) {
      char *t = NULL;
      size_t n;
      s = ssmc_tokenizer_decode(j->tok, &l->top_id[k], 1, 0, &t, &n);
      if (!s && !cJSON_GetObjectItemCaseSensitive(top, t)) cJSON_AddNumberToObject(top, t, l->top_lp[k]);
      free(t);
      if (ssm_status_code(s) == SSM_ERR_NOMEM) {
        cJSON_Delete(r);
        return ssm_status_wrap(s, "logprobs");
      }
      ssmc_status_free(s);
    }
    cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)l->offset));
  }
  *out = r;
  return NULL;
}

ssm_status ssm_api_final(ssm_job *j) {
  char *text;
  cJSON *lp = NULL;
  SSM_TRY(ssm_strndup(ssm_sb_str(&j->text), j->text.n, "the response", &text));
  ssm_status s = j->logprobs >= 0 ? logprobs(j, &lp) : NULL;
  if (s) {
    free(text);
    return s;
  }
  cJSON *r = envelope(j, 0), *choices = cJSON_AddArrayToObject(r, "choices"), *c = cJSON_CreateObject();
  cJSON_AddNumberToObject(c, "index", 0);
  if (j->chat) {
    cJSON *m = cJSON_AddObjectToObject(c, "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "content", text);
  } else {
    cJSON_AddStringToObject(c, "text", text);
  }
  free(text);
  if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
  else cJSON_AddNullToObject(c, "logprobs");
  cJSON_AddStringToObject(c, "finish_reason", j->finish ? j->finish : "stop");
  cJSON_AddItemToArray(choices, c);
  cJSON_AddItemToObject(r, "usage", usage(j));
  return emit(j, r, 0);
}

char *ssm_api_models(const char *model_id, int one) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "id", model_id);
  cJSON_AddStringToObject(m, "object", "model");
  cJSON_AddNumberToObject(m, "created", 0);
  cJSON_AddStringToObject(m, "owned_by", "ssmc");
  cJSON *r = m;
  if (!one) {
    if (!(r = cJSON_CreateObject())) {
      cJSON_Delete(m);
      return NULL;
    }
    cJSON_AddStringToObject(r, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(r, "data"), m);
  }
  char *s = cJSON_PrintUnformatted(r);
  cJSON_Delete(r);
  return s;
}
