/*
 * sched.c — the device thread: the only user of the session. Requests wait
 * in a FIFO until one of `parallel` places is free (with slots: one of the
 * slots). The HTTP threads only queue requests and read their output
 * (ssm_job.out) under the job's lock.
 *
 * With slots (a model compiled with a batched decode program, ssmc.h "many
 * sequences in one step"), requests decode together: every round of the
 * loop advances every decoding request by one token in one step of the
 * slots, and hands each its token at once (a stream gets it as its own
 * event). A lone decoding request runs the session's one-sequence decode
 * program instead, a token a round: a step of the slots computes every
 * slot, which costs on a device that computes them one by one. It joins a
 * slot when a second request decodes, and leaves it when it is alone again.
 * After the decoding, one request that needs the session has a turn: a new
 * request's prompt is prefilled there (one chunk a turn while others
 * decode, so that their streams go on; the longest cached prefix of the
 * prompt is restored first and only the rest is prefilled), after which it
 * decodes with the others; a request with a repetition penalty (the
 * slots' sampler keeps no seen tokens) or with logprobs, which needs every
 * step's logits, decodes there too, a slice of tokens a turn. A request
 * that finishes, or whose client hung up, leaves its slot before the next
 * step; its state is taken back from the slot only to be cached. Slots
 * that no request holds step on token 0 and their ids are dropped; a slot
 * whose logits were not finite ends its request with the error (the others
 * go on) and gets a clean state.
 *
 * Without slots (a bundle compiled without them, or a model whose batched
 * program cannot be built or opened), requests take turns round-robin
 * in the session, each turn one slice (up to slice_chunks prefill chunks,
 * or up to slice_tokens decode steps, each token streamed as it is drawn).
 * Before a turn the request's state is made the session's: the one there is
 * parked in its own device snapshot, and the request's is restored.
 *
 * The prompt cache holds the state at the end of every request, keyed by
 * the tokens it covers: the prompt and the generated ids that were fed
 * (every id drawn but the last, the input of a step that never ran; when
 * the end-of-text id ends the request, it is that last one), so a next turn
 * whose prompt starts with them prefills only its new tokens, however few.
 * It also holds the state at prompts' `cache_every` boundaries and at the
 * last chunk boundary of each prompt, for prompts that share a prefix and
 * then part ways. A restored state was reached by other runs than a cold
 * start would take (decode steps, chunks from another position), and runs
 * of different lengths round differently, so a hit and a miss agree to
 * rounding, not bit for bit: within 1e-5 of the largest logit with f32
 * weights, more with 16-bit or quantized ones, whose matmuls take their
 * activations at f16's precision (a tiny difference can move a value to
 * the next f16). A slot draws what its request would draw alone.
 */
#include <math.h>
#include <string.h>

#include "serve/internal.h"

void ssm_job_release(ssm_job *j) {
  pthread_mutex_lock(&j->mu);
  int last = --j->refs == 0;
  pthread_mutex_unlock(&j->mu);
  if (last) ssm_job_free(j);
}

int ssm_sched_submit(ssm_server *srv, ssm_job *j) {
  pthread_mutex_lock(&srv->mu);
  int room = !srv->stopping && srv->nqueued + srv->nactive < (size_t)(srv->o.parallel + srv->o.queue);
  if (room) {
    j->refs++; /* the device thread's */
    j->next_in_queue = NULL;
    if (srv->tail) srv->tail->next_in_queue = j;
    else srv->head = j;
    srv->tail = j;
    srv->nqueued++;
    pthread_cond_signal(&srv->cv);
  } else {
    srv->stats.rejected_busy++;
  }
  pthread_mutex_unlock(&srv->mu);
  return room ? 0 : -1;
}

void ssm_sched_stats(ssm_server *srv, ssm_serve_stats *out) {
  pthread_mutex_lock(&srv->mu);
  *out = srv->stats;
  out->active = srv->nactive;
  out->queued = srv->nqueued;
  pthread_mutex_unlock(&srv->mu);
}

/* ---- finishing ------------------------------------------------------------------- */

/* Ends `j` with `s` (freed), a server_error: 503 when out of host memory,
 * else 500. (A request reaches the device thread only once its values
 * were checked, so what fails here is the server's or the model's: not
 * finite logits, or the device.) */
static void finish_error(ssm_server *srv, ssm_job *j, ssm_status s) {
  int status = ssmc_status_code(s) == SSMC_ERR_NOMEM ? 503 : 500;
  char *e = ssm_api_error(status, "server_error", NULL, "%s", ssmc_status_message(s));
  ssmc_status_free(s);
  /* counted before the client can see the end, so /metrics read after a
   * response includes it */
  pthread_mutex_lock(&srv->mu);
  srv->stats.failed++;
  pthread_mutex_unlock(&srv->mu);
  pthread_mutex_lock(&j->mu);
  if (j->out.failed) { /* what the client has not read yet gives way to the error */
    ssm_sb_free(&j->out);
    j->out_read = 0;
  }
  if (j->stream) ssm_sb_printf(&j->out, "data: %s\n\ndata: [DONE]\n\n", e ? e : SSM_API_NOMEM_BODY);
  else ssm_sb_printf(&j->out, "%s", e ? e : SSM_API_NOMEM_BODY);
  j->status = e ? status : 503;
  j->done = 1;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
  free(e);
}

/* Streams text[sent..) except what could still become a stop string. */
static ssm_status stream_text(ssm_job *j, int final) {
  size_t safe = final ? j->text.n
                      : ssmc_stop_safe(j->text.s, j->text.n, (const char *const *)j->stop, j->nstop);
  ssm_status s = NULL;
  if (safe > j->sent) {
    pthread_mutex_lock(&j->mu);
    s = ssm_api_chunk(j, j->text.s + j->sent, safe - j->sent, NULL, 0);
    j->sent = safe;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
  }
  return s;
}

static void cache_insert(ssm_server *srv, const int32_t *tokens, size_t n) {
  if (!srv->cache || !n || ssm_pcache_has(srv->cache, tokens, n)) return;
  ssmc_snapshot *snap = NULL;
  ssm_status s = ssmc_session_snapshot(srv->session, &snap);
  if (s) { /* out of device memory for a snapshot: the cache only misses it */
    ssmc_status_free(s);
    return;
  }
  ssm_pcache_insert(srv->cache, tokens, n, snap);
}

/* Caches the state at the end of `j` (the session's now), keyed by the
 * tokens it covers: the session's position counts them, all of them ids of
 * j->tokens. The request's parking snapshot, when it has one, takes the
 * state and goes to the cache. Nothing when out of device memory: the
 * cache only misses it. */
static void cache_conversation(ssm_server *srv, ssm_job *j) {
  int64_t covered = ssmc_session_position(srv->session);
  if (!srv->cache || covered <= 0 || (size_t)covered > j->tokens.n ||
      ssm_pcache_has(srv->cache, j->tokens.items, (size_t)covered))
    return;
  ssmc_snapshot *snap = j->parked;
  ssm_status s = snap ? ssmc_session_snapshot_into(srv->session, snap) : ssmc_session_snapshot(srv->session, &snap);
  if (s) {
    ssmc_status_free(s);
    return;
  }
  j->parked = NULL;
  ssm_pcache_insert(srv->cache, j->tokens.items, (size_t)covered, snap);
}

/* Ends `j`: the decoder's last text, the state cached (with `cache`: the
 * session holds the state at its end), the stream's last events or the
 * whole response. */
static void finish(ssm_server *srv, ssm_job *j, int cache) {
  ssm_status s = NULL;
  if (j->dec && !j->stopped) {
    const char *rest;
    size_t n;
    s = ssmc_decoder_flush(j->dec, &rest, &n);
    ssm_sb_append(&j->text, rest, n);
  }
  if (!s) s = ssm_sb_status(&j->text, "the generated text");
  if (!s && cache) cache_conversation(srv, j);
  if (!s && j->stream) s = stream_text(j, 1);
  if (s) {
    finish_error(srv, j, s);
    return;
  }
  pthread_mutex_lock(&j->mu);
  if (j->stream) {
    s = ssm_api_chunk(j, NULL, 0, j->finish, 0);
    if (!s && j->include_usage) s = ssm_api_chunk(j, NULL, 0, NULL, 1);
    if (!s) ssm_sb_printf(&j->out, "data: [DONE]\n\n");
    if (!s) s = ssm_sb_status(&j->out, "the response");
  } else {
    s = ssm_api_final(j);
  }
  if (s) {
    pthread_mutex_unlock(&j->mu);
    finish_error(srv, j, s);
    return;
  }
  /* counted before the client can see the end (as in finish_error) */
  pthread_mutex_lock(&srv->mu);
  srv->stats.requests++;
  srv->stats.prompt_tokens += j->nprompt;
  srv->stats.cached_tokens += j->reused;
  srv->stats.generated_tokens += (uint64_t)j->ngen;
  pthread_mutex_unlock(&srv->mu);
  j->status = 200;
  j->done = 1;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

/* Whether the client of `j` hung up (the HTTP side sets it). */
static int cancelled(ssm_job *j) {
  pthread_mutex_lock(&j->mu);
  int c = j->cancelled;
  pthread_mutex_unlock(&j->mu);
  return c;
}

/* ---- prompts ------------------------------------------------------------------------ */

static ssm_status start(ssm_server *srv, ssm_job *j) {
  size_t len = 0;
  const ssmc_snapshot *snap = srv->cache ? ssm_pcache_lookup(srv->cache, j->prompt, j->nprompt,
                                                               j->nprompt - 1, &len) : NULL;
  if (snap) SSM_TRY(ssmc_session_restore(srv->session, snap));
  else SSM_TRY(ssmc_session_reset(srv->session));
  j->fed = j->reused = len;
  j->started = 1;
  SSM_TRY(ssm_status_wrap(ssm_vec_reserve(&j->tokens, j->nprompt), "the request's tokens"));
  for (size_t i = 0; i < j->nprompt; i++) j->tokens.items[j->tokens.n++] = j->prompt[i];
  pthread_mutex_lock(&srv->mu);
  if (snap) srv->stats.cache_hits++;
  else srv->stats.cache_misses++;
  pthread_mutex_unlock(&srv->mu);
  return NULL;
}

/* Feeds the next part of the prompt: at most `chunks` chunks, ending at a
 * `cache_every` boundary or at the prompt's last chunk boundary, where the
 * state is cached. (After a cache hit that ends between chunk boundaries,
 * the chunks start there.) */
static ssm_status prefill_slice(ssm_server *srv, ssm_job *j, int chunks) {
  size_t target = j->nprompt - 1, every = (size_t)srv->cache_every, c = (size_t)srv->chunk;
  size_t n = target - j->fed, most = (size_t)chunks * c, last = target / c * c;
  if (n > most) n = most;
  if (every && srv->cache) {
    size_t next = (j->fed / every + 1) * every;
    if (next <= target && j->fed + n > next) n = next - j->fed;
  }
  if (j->fed < last && j->fed + n > last) n = last - j->fed;
  /* one chunk per feed (the runs one feed of them all makes), so that a
   * request whose client hung up stops after the chunk it is in */
  for (size_t end = j->fed + n; j->fed < end;) {
    size_t k = end - j->fed < c ? end - j->fed : c;
    SSM_TRY(ssmc_session_feed(srv->session, j->prompt + j->fed, k, NULL, NULL));
    j->fed += k;
    pthread_mutex_lock(&srv->mu);
    srv->stats.prefilled_tokens += k;
    pthread_mutex_unlock(&srv->mu);
    if (j->fed < end && cancelled(j)) return NULL; /* the next sweep drops it */
  }
  if ((every && j->fed % every == 0) || j->fed == last) cache_insert(srv, j->prompt, j->fed);
  if (j->fed < target) return NULL;
  j->decoding = 1;
  j->next = j->prompt[j->nprompt - 1];
  return ssmc_decoder_create(srv->tok, 1, &j->dec);
}

/* ---- tokens -------------------------------------------------------------------------- */

/* The first stop string that ends past text[from], truncating the text there. */
static int cut_at_stop(ssm_job *j, size_t from) {
  size_t at = ssmc_stop_find(j->text.s, j->text.n, from, (const char *const *)j->stop, j->nstop);
  if (at == j->text.n) return 0;
  j->text.n = at;
  j->text.s[j->text.n] = 0;
  return 1;
}

/* Takes `id`, drawn for `j` (not the end-of-text id): its tokens, its text
 * (cut at a stop string, which ends it) and, streamed, the text that can no
 * longer become a stop string. With logprobs, its entry is the last one. */
static ssm_status take_token(ssm_job *j, int32_t id) {
  SSM_TRY(ssm_status_wrap(ssm_vec_push(&j->tokens, id), "the request's tokens"));
  const char *piece;
  size_t n, from = j->text.n;
  SSM_TRY(ssmc_decoder_feed(j->dec, id, &piece, &n));
  if (j->logprobs >= 0) j->lps.items[j->lps.n - 1].offset = j->text.n;
  ssm_sb_append(&j->text, piece, n);
  j->ngen++;
  if (cut_at_stop(j, from)) {
    j->stopped = 1;
    j->finish = "stop";
  }
  SSM_TRY(ssm_sb_status(&j->text, "the generated text"));
  if (!j->finish && j->ngen >= j->max_tokens) j->finish = "length";
  if (j->stream && !j->finish) return stream_text(j, 0);
  return NULL;
}

/* Keeps the log-probabilities of the tokens whose text is in the response:
 * after a stop string, those that begin inside it are left out. The one in
 * which it begins stays; ssm_api_final cuts its text at the stop string. */
static void trim_logprobs(ssm_job *j) {
  while (j->stopped && j->lps.n && j->lps.items[j->lps.n - 1].offset >= j->text.n) j->lps.n--;
}

/* With logprobs: each step's logits (ssmc_generate_options.on_logits). */
static int lp_logits(const float *logits, int64_t vocab, int64_t position, void *user) {
  ssm_job *j = user;
  (void)position;
  if (!j->row && !j->step_failed)
    j->step_failed = ssm_realloc((void **)&j->row, (size_t)vocab, sizeof *j->row, "logprobs");
  if (j->step_failed) return 1; /* decode_slice ends the request with it */
  memcpy(j->row, logits, sizeof *j->row * (size_t)vocab);
  double most = logits[0], sum = 0;
  for (int64_t i = 1; i < vocab; i++) most = logits[i] > most ? logits[i] : most;
  for (int64_t i = 0; i < vocab; i++) sum += exp((double)logits[i] - most);
  double lse = most + log(sum);
  ssm_logprob *p = &j->pending;
  int k = 0;
  for (int64_t i = 0; i < vocab && j->logprobs > 0; i++) { /* the `logprobs` likeliest, in order */
    if (k == j->logprobs && logits[i] <= logits[p->top_id[k - 1]]) continue;
    int at = k < j->logprobs ? k++ : k - 1;
    while (at > 0 && logits[p->top_id[at - 1]] < logits[i]) {
      p->top_id[at] = p->top_id[at - 1];
      at--;
    }
    p->top_id[at] = (int32_t)i;
  }
  for (int i = 0; i < k; i++) p->top_lp[i] = (double)logits[p->top_id[i]] - lse;
  p->lp = lse; /* until the id is known */
  return 0;
}

/* Each id drawn in a turn (ssmc_generate_options.on_token), as it comes:
 * generation stops after a stop string. */
static int solo_token(int32_t id, void *user) {
  ssm_job *j = user;
  if (j->step_failed) return 1;
  if (j->logprobs >= 0) {
    j->pending.id = id;
    j->pending.lp = (double)j->row[id] - j->pending.lp;
    j->step_failed = ssm_status_wrap(ssm_vec_push(&j->lps, j->pending), "logprobs");
  }
  if (!j->step_failed) j->step_failed = take_token(j, id);
  return j->step_failed || j->stopped;
}

/* The sampler of `j` from its next draw on. */
static ssmc_generate_options sampler_of(const ssm_job *j) {
  ssmc_generate_options g;
  ssmc_generate_options_init(&g);
  g.temperature = j->temperature;
  g.top_k = j->top_k;
  g.top_p = j->top_p;
  g.min_p = j->min_p;
  g.repeat_penalty = j->repeat_penalty;
  g.seed = j->seed;
  g.step = (uint32_t)j->ngen;
  return g;
}

/* A turn of decoding in the session: up to `most` steps. */
static ssm_status decode_slice(ssm_server *srv, ssm_job *j, int most) {
  int k = j->max_tokens - j->ngen;
  if (k > most) k = most;
  /* each step takes a position (the first feeds j->next): past the KV
   * cache's last one, the request ends with what it has, as at max_tokens */
  int64_t max_seq = ssmc_session_max_seq(srv->session), room = max_seq - ssmc_session_position(srv->session);
  if (max_seq && room < k) k = room > 0 ? (int)room : 0;
  if (k <= 0) {
    j->finish = "length";
    return NULL;
  }
  ssmc_generate_options g = sampler_of(j);
  g.stop_at_eos = srv->eos >= 0;
  g.on_token = solo_token;
  if (j->logprobs >= 0) g.on_logits = lp_logits;
  g.user = j;
  int32_t ids[256];
  size_t got = 0;
  int before = j->ngen;
  SSM_TRY(ssmc_session_generate(srv->session, &j->next, 1, k, &g, ids, &got));
  if (j->step_failed) {
    ssm_status s = j->step_failed;
    j->step_failed = NULL;
    return s;
  }
  if ((size_t)(j->ngen - before) != got || (j->logprobs >= 0 && j->lps.n != (size_t)j->ngen))
    return ssm_status_new(SSM_ERR_INTERNAL, "decode: %d tokens taken of %zu drawn (%zu logprobs)",
                          j->ngen - before, got, j->lps.n);
  if (j->logprobs >= 0) trim_logprobs(j);
  if (!j->finish && got < (size_t)k) j->finish = "stop"; /* the end-of-text id */
  else if (!j->finish && max_seq && got == (size_t)room) j->finish = "length";
  else if (!j->finish) j->next = ids[got - 1];
  return NULL;
}

/* ---- the device thread's loop ---------------------------------------------------------- */

typedef struct {
  ssm_server *srv;
  SSM_VEC(ssm_job *) active; /* taken from the queue, in order */
  size_t turn;               /* the next request to have a turn of the session */
  ssm_job *resident;         /* the request whose state the session holds, or NULL */
} sched;

/* Keeps the resident request's state in its own snapshot, so that the
 * session can be used for another. A request whose state could not be
 * kept ends with the error at its next turn. */
static void park(sched *d) {
  ssm_job *r = d->resident;
  d->resident = NULL;
  if (!r) return;
  ssm_status s = r->parked ? ssmc_session_snapshot_into(d->srv->session, r->parked)
                           : ssmc_session_snapshot(d->srv->session, &r->parked);
  if (s) r->failed = ssm_status_wrap(s, "parking the request's state between turns");
}

/* Removes `j` (finished, failed or dropped) from the device thread. */
static void drop(sched *d, ssm_job *j) {
  if (j->slot >= 0) {
    d->srv->slot_job[j->slot] = NULL;
    ssmc_status_free(ssmc_session_leave_slot(d->srv->session, j->slot)); /* only a bad slot fails */
  }
  j->slot = -1;
  if (d->resident == j) d->resident = NULL;
  for (size_t i = 0; i < d->active.n; i++)
    if (d->active.items[i] == j) {
      memmove(d->active.items + i, d->active.items + i + 1, sizeof(ssm_job *) * (d->active.n - i - 1));
      d->active.n--;
      if (d->turn > i) d->turn--;
      break;
    }
  pthread_mutex_lock(&d->srv->mu);
  d->srv->nactive--;
  pthread_mutex_unlock(&d->srv->mu);
  ssm_job_release(j);
}

static void fail(sched *d, ssm_job *j, ssm_status s) {
  finish_error(d->srv, j, s);
  drop(d, j);
}

/* Ends `j`, decoding in a slot: its state is taken back from the slot when
 * the cache is to keep it. */
static void finish_slot(sched *d, ssm_job *j) {
  ssm_server *srv = d->srv;
  int cache = srv->cache && j->covered > 0 &&
              !ssm_pcache_has(srv->cache, j->tokens.items, (size_t)j->covered);
  if (cache) {
    park(d);
    ssm_status s = ssmc_session_take_slot(srv->session, j->slot);
    SSM_ASSERT(s || ssmc_session_position(srv->session) == j->covered);
    if (s) { /* the cache only misses it */
      ssmc_status_free(s);
      cache = 0;
    }
  }
  finish(srv, j, cache);
  drop(d, j);
}

/* Gives slot `slot` a clean state (its logits were not finite): the reset
 * session's, joined greedily, and left (no request holds it). Nothing when
 * that fails: the slot's ids stay -1 and the next step tries again. */
static void clean_slot(sched *d, int slot) {
  park(d);
  ssmc_generate_options g;
  ssmc_generate_options_init(&g);
  ssm_status s = ssmc_session_reset(d->srv->session);
  if (!s) s = ssmc_session_join_slot(d->srv->session, slot, &g);
  if (!s) s = ssmc_session_leave_slot(d->srv->session, slot);
  ssmc_status_free(s);
}

/* Whether some request decodes in a slot. */
static int batch_busy(const ssm_server *srv) {
  for (int i = 0; i < srv->slots; i++)
    if (srv->slot_job[i]) return 1;
  return 0;
}

/* One step of every slot: each request in one gets its next token. */
static void batch_step(sched *d) {
  ssm_server *srv = d->srv;
  int B = srv->model_slots;
  int64_t max_seq = ssmc_session_max_seq(srv->session);
  for (int i = 0; i < B; i++) {
    srv->slot_in[i] = srv->slot_job[i] ? srv->slot_job[i]->next : 0;
    srv->slot_out[i] = -2;
  }
  ssm_status st = ssmc_session_step_slots(srv->session, srv->slot_in, 1, srv->slot_out);
  uint64_t drawn = 0;
  int missing = 0; /* rows without an id */
  for (int i = 0; i < B; i++) {
    drawn += srv->slot_job[i] && srv->slot_out[i] >= 0;
    missing += srv->slot_out[i] < 0;
  }
  pthread_mutex_lock(&srv->mu);
  srv->stats.batch_steps++;
  srv->stats.batch_tokens += drawn;
  pthread_mutex_unlock(&srv->mu);
  for (int i = 0; i < B; i++) {
    ssm_job *j = srv->slot_job[i];
    int32_t id = srv->slot_out[i];
    if (id == -1) { /* its logits were not finite: its state is lost */
      if (j)
        fail(d, j, ssm_status_new(SSM_ERR_INVALID, "non-finite logit at position %lld: the model "
                                  "or its weights produce inf/NaN", (long long)j->covered));
      clean_slot(d, i);
      continue;
    }
    if (!j) continue;
    /* the step did not run for it, or it ran but the device reported a
     * problem (a validation message) that no slot's id shows */
    if (id < 0 || (st && !missing)) {
      fail(d, j, st ? ssm_status_new(ssm_status_code(st), "%s", ssm_status_message(st))
                    : ssm_status_new(SSM_ERR_INTERNAL, "slot %d drew no id", i));
      continue;
    }
    j->covered++;
    int eos = srv->eos >= 0 && ssmc_session_is_eos(srv->session, id);
    ssm_status s = eos ? NULL : take_token(j, id);
    if (!s && eos) j->finish = "stop";
    /* past the KV cache's last position, as in the session (decode_slice) */
    if (!s && !j->finish && max_seq && j->covered >= max_seq) j->finish = "length";
    if (s) fail(d, j, s);
    else if (j->finish) finish_slot(d, j);
    else j->next = id;
  }
  ssmc_status_free(st);
}

/* Puts `j`, decoding in the session, in a free slot. */
static ssm_status join(sched *d, ssm_job *j) {
  ssm_server *srv = d->srv;
  if (d->resident != j) {
    park(d);
    SSM_TRY(ssmc_session_restore(srv->session, j->parked));
    d->resident = j;
  }
  int64_t max_seq = ssmc_session_max_seq(srv->session);
  if (max_seq && ssmc_session_position(srv->session) >= max_seq) {
    j->solo = 1; /* no position left to step in: it ends in the session (decode_slice) */
    return NULL;
  }
  int slot = 0;
  while (slot < srv->slots && srv->slot_job[slot]) slot++;
  SSM_ASSERT(slot < srv->slots); /* a request a slot, at most */
  ssmc_generate_options g = sampler_of(j);
  SSM_TRY(ssmc_session_join_slot(srv->session, slot, &g));
  j->slot = slot;
  j->covered = ssmc_session_position(srv->session);
  srv->slot_job[slot] = j;
  d->resident = NULL; /* its state is the slot's now */
  return NULL;
}

/* Takes `j` out of its slot: it decodes in the session from now on. */
static ssm_status leave_slot(sched *d, ssm_job *j) {
  park(d);
  SSM_TRY(ssmc_session_take_slot(d->srv->session, j->slot));
  SSM_TRY(ssmc_session_leave_slot(d->srv->session, j->slot));
  d->srv->slot_job[j->slot] = NULL;
  j->slot = -1;
  d->resident = j;
  return NULL;
}

/* Whether `j` decodes and could do it in a slot. */
static int slot_worthy(const ssm_job *j) { return j->decoding && !j->solo; }

/* With slots: requests that decode together do it in slots; a lone one
 * decodes in the session, whose decode program runs one sequence (a
 * batched step costs each slot's work on a device that computes them one
 * by one, as a CPU does). Returns the lone one, or NULL. */
static ssm_job *rebalance(sched *d) {
  ssm_server *srv = d->srv;
  ssm_job *lone = NULL;
  size_t n = 0;
  for (size_t i = 0; i < d->active.n; i++)
    if (slot_worthy(d->active.items[i])) lone = d->active.items[i], n++;
  if (n == 1 && lone->slot >= 0) {
    ssm_status s = leave_slot(d, lone);
    if (s) {
      fail(d, lone, s);
      return NULL;
    }
  }
  if (n == 1) return lone;
  for (size_t i = d->active.n; srv->slots && i-- > 0;) {
    ssm_job *j = d->active.items[i];
    ssm_status s = slot_worthy(j) && j->slot < 0 ? join(d, j) : NULL;
    if (s) fail(d, j, s);
  }
  return NULL;
}

/* A turn of the session for `j`: a part of its prompt, or a slice of its
 * decoding of up to `most` tokens. Returns 1 when `j` is finished. */
static int turn(sched *d, ssm_job *j, int most, int others_decode) {
  ssm_server *srv = d->srv;
  ssm_status s = NULL;
  if (d->resident != j) {
    park(d);
    d->resident = j;
    if (j->started) s = ssmc_session_restore(srv->session, j->parked);
  }
  if (!s && !j->started) s = start(srv, j);
  if (!s && !j->decoding) {
    s = prefill_slice(srv, j, others_decode ? 1 : srv->o.slice_chunks);
    if (!s && j->decoding && !j->max_tokens) j->finish = "length";
  } else if (!s) {
    s = decode_slice(srv, j, most);
  }
  if (s) {
    fail(d, j, s);
    return 1;
  }
  if (!j->finish) return 0;
  finish(srv, j, 1);
  drop(d, j);
  return 1;
}

/* One round of the loop: the requests whose clients hung up are dropped;
 * every request that decodes gets a token (one step of the slots, or of a
 * lone request in the session); and one other request has a turn of the
 * session: a part of its prompt, or a slice of its decoding (one token
 * when no other request needs the session, so that it streams each as it
 * is drawn; else slice_tokens, so that the cost of swapping states is
 * shared by several). */
static void round_of(sched *d) {
  ssm_server *srv = d->srv;
  for (size_t i = d->active.n; i-- > 0;) {
    ssm_job *j = d->active.items[i];
    if (j->failed) { /* its state could not be parked, so it has none to go on from */
      ssm_status f = j->failed;
      j->failed = NULL;
      fail(d, j, f);
      continue;
    }
    if (!cancelled(j)) continue;
    pthread_mutex_lock(&srv->mu);
    srv->stats.cancelled++;
    pthread_mutex_unlock(&srv->mu);
    drop(d, j);
  }
  ssm_job *lone = srv->slots ? rebalance(d) : NULL;
  int others_decode = lone || batch_busy(srv);
  if (batch_busy(srv)) batch_step(d);
  else if (lone && turn(d, lone, 1, 0)) lone = NULL;
  size_t users = 0; /* requests that need the session */
  for (size_t i = 0; i < d->active.n; i++)
    users += d->active.items[i]->slot < 0 && d->active.items[i] != lone;
  for (size_t k = 0; k < d->active.n; k++) {
    size_t at = (d->turn + k) % d->active.n;
    ssm_job *j = d->active.items[at];
    if (j->slot >= 0 || j == lone) continue;
    d->turn = at + 1;
    turn(d, j, users > 1 ? srv->o.slice_tokens : 1, others_decode);
    break;
  }
}

void *ssm_sched_main(void *arg) {
  ssm_server *srv = arg;
  sched d = {.srv = srv};
  int most = srv->slots ? srv->slots : srv->o.parallel;
  pthread_mutex_lock(&srv->mu);
  while (1) {
    while (!srv->stopping && !d.active.n && !srv->head) pthread_cond_wait(&srv->cv, &srv->mu);
    if (srv->stopping) break;
    while (d.active.n < (size_t)most && srv->head) {
      ssm_job *j = srv->head;
      srv->head = j->next_in_queue;
      if (!srv->head) srv->tail = NULL;
      srv->nqueued--;
      ssm_status s = ssm_status_wrap(ssm_vec_push(&d.active, j), "taking a request");
      if (s) { /* no room to run it: it ends with the error */
        pthread_mutex_unlock(&srv->mu);
        finish_error(srv, j, s);
        ssm_job_release(j);
        pthread_mutex_lock(&srv->mu);
        continue;
      }
      /* the slots' sampler has no seen-token set: a penalty decodes in the session */
      j->solo = !srv->slots || j->logprobs >= 0 || j->repeat_penalty > 0;
      srv->nactive++;
    }
    if (!d.active.n) continue;
    pthread_mutex_unlock(&srv->mu);
    round_of(&d);
    pthread_mutex_lock(&srv->mu);
    ssm_pcache *c = srv->cache;
    if (c) ssm_pcache_stats(c, &srv->stats.cache_entries, &srv->stats.cache_bytes, &srv->stats.cache_evictions);
  }
  /* stopping: every request still here ends with an error */
  ssm_job *queued = srv->head;
  srv->head = srv->tail = NULL;
  srv->nqueued = 0;
  pthread_mutex_unlock(&srv->mu);
  while (d.active.n)
    fail(&d, d.active.items[0], ssm_status_new(SSM_ERR_INTERNAL, "the server is shutting down"));
  for (ssm_job *j = queued, *next; j; j = next) {
    next = j->next_in_queue;
    finish_error(srv, j, ssm_status_new(SSM_ERR_INTERNAL, "the server is shutting down"));
    ssm_job_release(j);
  }
  ssm_vec_free(&d.active);
  return NULL;
}
