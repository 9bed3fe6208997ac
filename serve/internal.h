/*
 * internal.h — what the files of serve/ share: a request (job) as the HTTP
 * side and the device thread see it, the prompt cache and the counters.
 */
#ifndef SSM_SERVE_INTERNAL_H
#define SSM_SERVE_INTERNAL_H

#include <pthread.h>

#include "serve/serve.h"

struct MHD_Connection;

/* ---- the prompt cache (cache.c); used by the device thread only --------------- */

typedef struct ssm_pcache ssm_pcache;

ssm_status ssm_pcache_create(uint64_t budget, ssm_pcache **out);
void ssm_pcache_destroy(ssm_pcache *c);
/* The longest cached token sequence that is a prefix of tokens[0..n) and no
 * longer than `max_len`: its snapshot (owned by the cache, valid until the
 * next insert) and length, or NULL and 0 (also when out of host memory to
 * look: the cache only misses). */
const ssmc_snapshot *ssm_pcache_lookup(ssm_pcache *c, const int32_t *tokens, size_t n,
                                       size_t max_len, size_t *out_len);
/* Whether tokens[0..n) is cached already. */
int ssm_pcache_has(const ssm_pcache *c, const int32_t *tokens, size_t n);
/* Adds `snap` (taken over) for tokens[0..n), evicting the least recently
 * used entries to stay under the budget; a snapshot larger than the whole
 * budget, or one there is no host memory to keep track of, is freed at
 * once (the cache only misses it). */
void ssm_pcache_insert(ssm_pcache *c, const int32_t *tokens, size_t n, ssmc_snapshot *snap);
/* Entries, bytes held, evictions so far. */
void ssm_pcache_stats(const ssm_pcache *c, uint64_t *entries, uint64_t *bytes, uint64_t *evictions);

/* ---- counters (/metrics) ------------------------------------------------------ */

typedef struct {
  uint64_t requests, failed, rejected_busy;
  uint64_t cancelled; /* dropped unfinished: the client hung up */
  uint64_t prompt_tokens, cached_tokens, prefilled_tokens, generated_tokens;
  uint64_t cache_hits, cache_misses, cache_entries, cache_bytes, cache_evictions;
  uint64_t batch_steps, batch_tokens; /* steps of the slots, and the tokens they drew for requests */
  uint64_t active, queued;
} ssm_serve_stats;

/* ---- a request --------------------------------------------------------------- */

typedef struct ssm_job ssm_job;

#define SSM_MAX_LOGPROBS 5

/* A generated token's log-probability (/v1/completions' `logprobs`). */
typedef struct {
  int32_t id;
  double lp;
  size_t offset; /* where its text starts in ssm_job.text */
  int32_t top_id[SSM_MAX_LOGPROBS];
  double top_lp[SSM_MAX_LOGPROBS];
} ssm_logprob;

struct ssm_job {
  /* what was asked (set by the HTTP side before it is queued) */
  int chat, stream, include_usage;
  int32_t *prompt;
  size_t nprompt;
  int max_tokens;
  float temperature, top_p, min_p;
  float repeat_penalty; /* 0: off */
  int top_k;
  uint32_t seed;
  char **stop;
  int nstop;
  char id[64];
  long created;
  const char *model_id;
  int logprobs; /* the top alternatives to list per token; -1: no logprobs */
  const ssmc_tokenizer *tok;

  /* the HTTP side's */
  struct MHD_Connection *conn; /* the client's connection, once the job is queued */
  int fd;                      /* its socket */
  unsigned timeout;            /* its inactivity timeout (ssm_serve_options.timeout) */

  /* the device thread's */
  int started, decoding;
  int solo;        /* decodes in the session, in turns (logprobs, a repetition penalty, or a
                      model without slots) */
  int slot;        /* the slot it decodes in, or -1 */
  int64_t covered; /* in a slot: the tokens its state covers */
  size_t fed, reused;
  ssmc_snapshot *parked;
  int32_t next;
  int ngen;
  SSM_VEC(int32_t) tokens; /* the prompt and the generated ids, in order */
  ssmc_decoder *dec;
  ssm_sb text;     /* generated text */
  size_t sent;     /* bytes of `text` streamed */
  const char *finish;
  int stopped;      /* a stop string ended it */
  ssm_status failed; /* its state could not be parked */
  SSM_VEC(ssm_logprob) lps; /* with logprobs: one per generated token */
  ssm_logprob pending;      /* the step whose id is not drawn yet */
  float *row;               /* its logits */
  ssm_status step_failed;   /* what failed in a callback of ssmc_session_generate */

  /* shared, under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  ssm_sb out;      /* bytes for the client: SSE events, or the final body */
  size_t out_read; /* how much of `out` the HTTP side has taken */
  int done, status, refs;
  int cancelled; /* the client hung up: the device thread drops the job at its next step */
  ssm_job *next_in_queue;
};

/* ---- the server (server.c) and its device thread (sched.c) ----------------------- */

struct ssm_server {
  ssm_serve_options o;
  ssmc_session *session;
  int slots;           /* the slots requests decode in together (ssm_server_slots); 0: turns */
  int model_slots;     /* the model's (ssmc_session_slots): each steps, used or not */
  ssm_job **slot_job;  /* [model_slots]: the request in each slot, or NULL */
  int32_t *slot_in, *slot_out; /* [model_slots]: each step's inputs and ids */
  const ssmc_tokenizer *tok;
  int64_t eos;
  int chunk, cache_every;
  struct MHD_Daemon *mhd;
  int port;
  void *api; /* ssm_api */
  ssm_pcache *cache;
  pthread_t worker;
  pthread_mutex_t mu; /* the queue, the counts, the counters */
  pthread_cond_t cv;
  ssm_job *head, *tail;
  size_t nqueued, nactive;
  int stopping;
  ssm_serve_stats stats;
};

/* Queues `j` (taking a reference for the device thread); -1 when the queue
 * is full or the server stopping. */
int ssm_sched_submit(ssm_server *srv, ssm_job *j);
/* The device thread. */
void *ssm_sched_main(void *srv);
void ssm_sched_stats(ssm_server *srv, ssm_serve_stats *out);
/* Drops a reference; the last one frees the job. */
void ssm_job_release(ssm_job *j);

/* ---- the requests' JSON (api.c) ------------------------------------------------- */

/* What the HTTP side needs to turn a body into a job. */
typedef struct {
  const ssmc_tokenizer *tok;
  const ssm_chat *chat;
  int64_t vocab;
  const ssm_serve_options *o;
  int64_t max_seq; /* the positions a request may use (ssmc_session_max_seq); 0: no bound */
  /* the model's generation_config.json defaults (ssmc_session_generate_defaults):
   * the sampler's when it says do_sample (else OpenAI's temperature 1), and its
   * repetition_penalty */
  ssmc_generate_options dflt;
  int dflt_sampling;
} ssm_api;

/* The error body of a request when even its own could not be made (503). */
#define SSM_API_NOMEM_BODY                                                                 \
  "{\"error\":{\"message\":\"the server is out of host memory\",\"type\":\"server_error\","  \
  "\"param\":null,\"code\":null}}"

/* An OpenAI error body (NULL when out of host memory: see SSM_API_NOMEM_BODY). */
char *ssm_api_error(int status, const char *type, const char *param, const char *fmt, ...)
    SSM_PRINTF(4, 5);
/* Parses a /v1/completions (chat 0) or /v1/chat/completions (chat 1) body
 * into a new job (refs 1) in *out. A bad request is no error: *out is NULL
 * and *out_error gets the error body (status 400). Running out of host
 * memory (templating, tokenizing, the job) is the NOMEM status. */
ssm_status ssm_api_parse(const ssm_api *api, int chat, const char *body, size_t len, ssm_job **out,
                         char **out_error);
void ssm_job_free(ssm_job *j);
/* Appends to j->out (under j->mu): a stream chunk with `delta` text
 * (NULL: none), the finish reason (NULL: none), or the usage. NOMEM when
 * it could not (j->out may then have failed: see ssm_sb_status). */
ssm_status ssm_api_chunk(ssm_job *j, const char *delta, size_t n, const char *finish, int usage);
/* The whole response of a finished non-streamed job, the same way. */
ssm_status ssm_api_final(ssm_job *j);
/* The models list (/v1/models), or with `one` the model's object alone
 * (/v1/models/ID). */
char *ssm_api_models(const char *model_id, int one);

#endif
