/*
 * serve.h — `ssmc serve`: an OpenAI-compatible HTTP server (libmicrohttpd)
 * on one loaded model.
 *
 * Endpoints: POST /v1/completions and /v1/chat/completions (stream: true
 * as server-sent events), GET /v1/models, /health and /metrics
 * (Prometheus text), and a chat page at / (serve/page/; no_page turns it
 * off). Errors have OpenAI's shape, {"error": {"message",
 * "type", "param", "code"}}: 400 for bad JSON or parameters, 404, 405, 413
 * for a body over the limit, 503 when the queue is full; a request that
 * fails while it runs gets a server_error (503 out of host memory, else
 * 500). A request that runs out of the model's positions (--max-seq)
 * ends with what it generated, finish_reason "length".
 *
 * HTTP threads parse, template and tokenize a request and queue it; one
 * device thread runs every request (sched.c). With a model that has slots
 * (a batched decode program), decoding requests advance together, one
 * token each per step of the slots, and prompts are prefilled between
 * steps; otherwise requests take turns (a prefill chunk or a few decode
 * tokens each), swapping each one's state in and out with device
 * snapshots (ssmc_session_snapshot_into / restore), so requests progress
 * together and fairly. Every token is streamed as it is drawn. A prompt
 * cache keeps snapshots of the state at the
 * end of every request (the conversation so far: the prompt and the
 * generated tokens fed), at the last chunk boundary of each prompt, and
 * every `cache_every` prompt tokens, under a byte budget with LRU eviction:
 * a request whose prompt starts with a cached token sequence prefills only
 * the rest (usage.prompt_tokens_details.cached_tokens says how many were
 * reused), so a chat's next turn prefills only its new message. A hit
 * agrees with a miss to rounding (sched.c says why not bit for bit).
 */
#ifndef SSM_SERVE_H
#define SSM_SERVE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "chat/chat.h"
#include "runtime/ssmc.h"

typedef struct {
  const char *host;     /* address or name to listen on ("127.0.0.1", "::1", "localhost") */
  int port;             /* 0: any free port (ssm_server_port says which) */
  const char *model_id; /* the name /v1/models lists and responses carry */
  int parallel;         /* requests running at once (default 4): with slots, the slots used */
  int queue;            /* requests waiting beyond those; more get 503 (default 32) */
  int max_tokens;       /* the most a request may generate (default 1024); chat's default */
  int max_prompt_tokens; /* the most prompt tokens a request may have (default 32768); with
                          * a KV cache, its positions bound them too */
  int slice_tokens;     /* decode tokens per turn in the session (default 8) */
  int slice_chunks;     /* prefill chunks per turn (default 4; 1 while others decode with slots) */
  int cache_every;      /* a prompt checkpoint every N tokens (rounded to the chunk); 0: only
                         * at the end of prompts and conversations */
  uint64_t cache_bytes; /* the prompt cache's budget (default 256 MiB; 0: no cache) */
  size_t max_body;      /* bytes of a request body (default 1 MiB) */
  int max_connections;  /* open connections (default 256) */
  int max_client_connections; /* open connections from one address (default 32; 0: no limit) */
  int timeout;          /* seconds a connection may stay inactive while the client sends its
                         * request or reads the response (default 10; 0: no limit) */
  const char *cors;     /* origins whose pages may call the server, comma-separated
                         * ("https://a.example,http://b.example:8000"; "*": any); pages of
                         * this machine (localhost, 127.0.0.1, [::1]) always may, and so
                         * may the page of the server's own address (http://HOST:PORT) */
  int no_page;          /* 1: no chat page at / (its paths are 404) */
} ssm_serve_options;

void ssm_serve_options_init(ssm_serve_options *o);
/* The address `host` names (numeric, or a name such as localhost: its first
 * address) with `port`, for listening; an error names the host. */
ssm_status ssm_server_resolve(const char *host, int port, struct sockaddr_storage *out);
/* "http://HOST:PORT", the host in brackets when it is an IPv6 address. */
void ssm_server_url(const char *host, int port, char *out, size_t size);

typedef struct ssm_server ssm_server;

/* Starts serving `s` (and `chat`, which may be NULL: chat requests then get
 * an error) until ssm_server_stop. Both stay the caller's and must outlive
 * the server; the server is the only user of `s` meanwhile. */
ssm_status ssm_server_start(ssmc_session *s, const ssm_chat *chat, const ssm_serve_options *o,
                            ssm_server **out);
/* The port it listens on. */
int ssm_server_port(const ssm_server *srv);
/* The slots its requests decode in together: the smaller of `parallel`
 * and the model's slots (ssmc_session_slots); 0 when the model has none,
 * and requests take turns. */
int ssm_server_slots(const ssm_server *srv);
/* Ends queued and running requests with an error, stops listening, waits
 * for the threads, frees the server. NULL is fine. */
void ssm_server_stop(ssm_server *srv);

#endif
