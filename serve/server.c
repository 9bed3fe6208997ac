/*
 * server.c — the HTTP side of `ssmc serve` on libmicrohttpd, one thread per
 * connection: routes, request bodies (bounded: 413 past the limit),
 * OpenAI-shaped errors, /health, /v1/models, /metrics, and the
 * completions endpoints, which queue a job for the device thread
 * (sched.c) and then either wait for its whole response or stream its
 * server-sent events as they come.
 */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netdb.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "serve/internal.h"

void ssm_serve_options_init(ssm_serve_options *o) {
  *o = (ssm_serve_options){.host = "127.0.0.1", .port = 8080, .model_id = "ssmc", .parallel = 4,
                           .queue = 32, .max_tokens = 1024, .max_prompt_tokens = 32768,
                           .slice_tokens = 8, .slice_chunks = 4, .cache_every = 512, .cache_bytes = (uint64_t)256 << 20,
                           .max_body = (size_t)1 << 20, .max_connections = 256,
                           .max_client_connections = 32, .timeout = 10};
}

/* What one connection's request carries between calls of the handler. */
typedef struct {
  ssm_sb body;
  int too_large;
} request;

/* The state of a request there was no memory for (never written). */
static request no_request;

static char out_of_memory_body[] = SSM_API_NOMEM_BODY;

/* Answers with `text` (malloc'd, taken over; NULL: out of memory, a 503). */
/* ---- browsers' pages (CORS) ------------------------------------------------------- */

/* Whether `origin` ("scheme://host[:port]") is a page of this machine:
 * http or https on localhost, 127.0.0.1 or [::1], any port. */
static int loopback_origin(const char *origin) {
  static const char *const schemes[] = {"http://", "https://"};
  static const char *const hosts[] = {"localhost", "127.0.0.1", "[::1]"};
  for (int i = 0; i < 2; i++) {
    size_t n = strlen(schemes[i]);
    if (strncmp(origin, schemes[i], n)) continue;
    for (int j = 0; j < 3; j++) {
      size_t m = strlen(hosts[j]);
      const char *rest = origin + n + m;
      if (!strncmp(origin + n, hosts[j], m) &&
          (!*rest || (*rest == ':' && rest[1] && strspn(rest + 1, "0123456789") == strlen(rest + 1))))
        return 1;
    }
  }
  return 0;
}

/* Whether a page of `origin` may call the server (ssm_serve_options.cors;
 * pages of this machine, and of the server's own address, always may). */
static int origin_allowed(const ssm_server *srv, const char *origin) {
  if (loopback_origin(origin)) return 1;
  char own[300]; /* the chat page, opened at the address the server was told to listen on */
  ssm_server_url(srv->o.host, srv->port, own, sizeof own);
  if (!strcmp(origin, own)) return 1;
  const char *list = srv->o.cors;
  for (const char *at = list; at && *at;) {
    size_t n = strcspn(at, ",");
    if ((n == 1 && *at == '*') || (n == strlen(origin) && !strncmp(at, origin, n))) return 1;
    at += n + (at[n] == ',');
  }
  return 0;
}

/* Queues response `r` (destroyed here) with, for a page of an allowed
 * origin, the headers that let it read the answer. */
static enum MHD_Result queue(ssm_server *srv, struct MHD_Connection *c, unsigned status,
                             struct MHD_Response *r) {
  const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
  if (origin && origin_allowed(srv, origin)) {
    MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
    MHD_add_response_header(r, "Vary", "Origin");
  }
  enum MHD_Result ok = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ok;
}

static enum MHD_Result reply(ssm_server *srv, struct MHD_Connection *c, int status, const char *type, char *text) {
  struct MHD_Response *r =
      text ? MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE)
           : MHD_create_response_from_buffer(strlen(out_of_memory_body), out_of_memory_body,
                                             MHD_RESPMEM_PERSISTENT);
  if (!r) {
    free(text);
    return MHD_NO;
  }
  if (!text) status = 503, type = "application/json";
  MHD_add_response_header(r, "Content-Type", type);
  return queue(srv, c, (unsigned)status, r);
}

static enum MHD_Result reply_error(ssm_server *srv, struct MHD_Connection *c, int status, const char *type,
                                   const char *message) {
  return reply(srv, c, status, "application/json", ssm_api_error(status, type, NULL, "%s", message));
}

/* The connection's timeout counts the client's inactivity, not the
 * server's. libmicrohttpd checks it against the last time bytes moved, also
 * right after a stream's reader returns; queueing a response restarts the
 * timer, but a reader that waited for the device does not, so it restarts
 * the timer itself (setting a timeout on a connection that has none
 * restarts it). */
static void restart_timeout(struct MHD_Connection *c, unsigned timeout) {
  MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
  MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, timeout);
}

/* Whether the client hung up: it closed its end of the connection (a read
 * would see the end), or the connection broke. */
static int client_gone(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLRDHUP};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Waits, under j->mu, until the job is done or (`output`) has bytes the
 * client has not read. While it waits, the thread can notice nothing else,
 * so every 100 ms it looks whether the client hung up: then it cancels the
 * job (the device thread drops it at its next step, between two prefill
 * chunks at the latest) and returns 0. */
static int wait_job(ssm_job *j, int output) {
  while (!j->done && !(output && j->out_read < j->out.n)) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += 100 * 1000 * 1000;
    if (t.tv_nsec >= 1000 * 1000 * 1000) t.tv_sec++, t.tv_nsec -= 1000 * 1000 * 1000;
    if (pthread_cond_timedwait(&j->cv, &j->mu, &t) == ETIMEDOUT && client_gone(j->fd)) {
      j->cancelled = 1;
      return 0;
    }
  }
  return 1;
}

/* ---- streaming -------------------------------------------------------------------- */

/* Hands the client what the job has produced, waiting for more; ends the
 * stream when the job is done and everything was read, or when the client
 * hung up. */
static ssize_t read_events(void *cls, uint64_t pos, char *buf, size_t max) {
  ssm_job *j = cls;
  pthread_mutex_lock(&j->mu);
  if (!wait_job(j, 1)) {
    pthread_mutex_unlock(&j->mu);
    return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  size_t n = j->out.n - j->out_read;
  if (n > max) n = max;
  memcpy(buf, j->out.s + j->out_read, n);
  j->out_read += n;
  int end = !n && j->done;
  pthread_mutex_unlock(&j->mu);
  restart_timeout(j->conn, j->timeout);
  return end ? MHD_CONTENT_READER_END_OF_STREAM : (ssize_t)n;
}

/* The client is gone (or the stream ended): the device thread drops the
 * job at its next turn. */
static void stream_closed(void *cls) {
  ssm_job *j = cls;
  pthread_mutex_lock(&j->mu);
  j->cancelled = 1;
  pthread_mutex_unlock(&j->mu);
  ssm_job_release(j);
}

static enum MHD_Result completions(ssm_server *srv, struct MHD_Connection *c, int chat,
                                   const request *rq) {
  char *err = NULL;
  ssm_job *j = NULL;
  ssm_status s = ssm_sb_status(&rq->body, "the request body");
  if (!s) s = ssm_api_parse(srv->api, chat, ssm_sb_str(&rq->body), rq->body.n, &j, &err);
  if (s) { /* out of host memory: the server goes on, the client may try again */
    enum MHD_Result ok = reply_error(srv, c, 503, "server_error", ssm_status_message(s));
    ssm_status_free(s);
    return ok;
  }
  if (!j) return reply(srv, c, 400, "application/json", err);
  const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  j->conn = c;
  j->fd = fd ? fd->connect_fd : -1;
  j->timeout = (unsigned)srv->o.timeout;
  if (ssm_sched_submit(srv, j)) {
    ssm_job_release(j);
    return reply_error(srv, c, 503, "server_error", "the server is busy: every slot and the whole queue "
                       "are taken (ssmc serve --parallel, --queue); try again");
  }
  if (j->stream) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, read_events, j,
                                                               stream_closed);
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    return queue(srv, c, MHD_HTTP_OK, r);
  }
  pthread_mutex_lock(&j->mu);
  if (!wait_job(j, 0)) { /* nobody to answer: the connection closes */
    pthread_mutex_unlock(&j->mu);
    ssm_job_release(j);
    return MHD_NO;
  }
  char *body = NULL;
  ssm_status s2 = ssm_sb_status(&j->out, "the response");
  if (!s2) s2 = ssm_strndup(ssm_sb_str(&j->out), j->out.n, "the response", &body);
  int status = j->status;
  pthread_mutex_unlock(&j->mu);
  ssm_job_release(j);
  if (s2) {
    enum MHD_Result ok = reply_error(srv, c, 503, "server_error", ssm_status_message(s2));
    ssm_status_free(s2);
    return ok;
  }
  return reply(srv, c, status, "application/json", body);
}

/* ---- the chat page ------------------------------------------------------------------- */

/* The files of serve/page/, compiled in (cmake/embed_files.cmake): the
 * text of `file`, or NULL. */
const char *ssm_page_embedded(const char *file);

/* GET (or HEAD) `url` as one of the page's files ("/" is index.html):
 * answered, or *out_found is 0 and nothing is. */
static enum MHD_Result page_file(ssm_server *srv, struct MHD_Connection *c, const char *url,
                                 const char *method, int *out_found) {
  static const char *const types[][2] = {{".html", "text/html; charset=utf-8"},
                                         {".js", "text/javascript; charset=utf-8"},
                                         {".css", "text/css; charset=utf-8"}};
  *out_found = 0;
  if (srv->o.no_page || (strcmp(method, "GET") && strcmp(method, "HEAD")) || url[0] != '/' ||
      strchr(url + 1, '/'))
    return MHD_NO;
  const char *name = url[1] ? url + 1 : "index.html";
  const char *text = ssm_page_embedded(name), *dot = strrchr(name, '.'), *type = NULL;
  for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
    if (!strcmp(dot, types[i][0])) type = types[i][1];
  if (!text || !type) return MHD_NO;
  *out_found = 1;
  struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, "Content-Type", type);
  MHD_add_response_header(r, "Cache-Control", "no-cache");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(r, "Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
  return queue(srv, c, MHD_HTTP_OK, r);
}

/* ---- the other endpoints ------------------------------------------------------------- */

static enum MHD_Result metrics(ssm_server *srv, struct MHD_Connection *c) {
  ssm_serve_stats s;
  ssm_sched_stats(srv, &s);
  ssm_sb b = {0};
  static const char *const names[][2] = {
      {"ssmc_requests_total", "requests completed"},
      {"ssmc_requests_failed_total", "requests that ended with an error"},
      {"ssmc_requests_rejected_total", "requests refused with 503 (queue full)"},
      {"ssmc_requests_cancelled_total", "requests dropped unfinished because the client hung up"},
      {"ssmc_prompt_tokens_total", "prompt tokens of completed requests"},
      {"ssmc_prompt_tokens_cached_total", "prompt tokens restored from the prompt cache"},
      {"ssmc_prompt_tokens_prefilled_total", "prompt tokens run through the model"},
      {"ssmc_generated_tokens_total", "tokens generated by completed requests"},
      {"ssmc_cache_hits_total", "requests that started from a cached prefix"},
      {"ssmc_cache_misses_total", "requests that started from an empty state"},
      {"ssmc_cache_entries", "snapshots in the prompt cache"},
      {"ssmc_cache_bytes", "bytes of snapshots in the prompt cache"},
      {"ssmc_cache_evictions_total", "snapshots evicted to stay under the budget"},
      {"ssmc_prefill_chunk", "tokens per prefill chunk"},
      {"ssmc_slots", "slots whose requests decode together (0: requests take turns)"},
      {"ssmc_batch_steps_total", "steps of the slots"},
      {"ssmc_batch_tokens_total", "tokens the steps of the slots drew for requests"},
      {"ssmc_requests_active", "requests running on the device"},
      {"ssmc_requests_queued", "requests waiting for a place"}};
  uint64_t v[] = {s.requests, s.failed, s.rejected_busy, s.cancelled, s.prompt_tokens, s.cached_tokens,
                  s.prefilled_tokens, s.generated_tokens, s.cache_hits, s.cache_misses,
                  s.cache_entries, s.cache_bytes, s.cache_evictions,
                  (uint64_t)srv->chunk, (uint64_t)srv->slots, s.batch_steps, s.batch_tokens,
                  s.active, s.queued};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    ssm_sb_printf(&b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", names[i][0], names[i][1], names[i][0],
                  strstr(names[i][0], "_total") ? "counter" : "gauge", names[i][0],
                  (unsigned long long)v[i]);
  char *text = NULL;
  ssm_status st = ssm_sb_take(&b, "/metrics", &text);
  ssm_status_free(st); /* NULL text: a 503 */
  return reply(srv, c, 200, "text/plain; version=0.0.4", text);
}

static enum MHD_Result route(ssm_server *srv, struct MHD_Connection *c, const char *url,
                             const char *method, const request *rq) {
  static const struct {
    const char *path, *method;
    int what; /* 0 health, 1 models, 2 metrics, 3 completions, 4 chat */
  } routes[] = {{"/health", "GET", 0},          {"/v1/models", "GET", 1},
                {"/metrics", "GET", 2},         {"/v1/completions", "POST", 3},
                {"/v1/chat/completions", "POST", 4}};
  const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
  if (origin && !origin_allowed(srv, origin)) {
    char msg[400];
    snprintf(msg, sizeof msg, "a page of origin '%.200s' may not call this server (ssmc serve "
             "--cors-origin ORIGIN allows it)", origin);
    return reply_error(srv, c, 403, "invalid_request_error", msg);
  }
  const char *model = !strncmp(url, "/v1/models/", 11) ? url + 11 : NULL;
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
    if (strcmp(url, routes[i].path) && !(model && routes[i].what == 1)) continue;
    if (!strcmp(method, "OPTIONS")) { /* a browser's preflight, or a plain OPTIONS */
      struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
      if (!r) return MHD_NO;
      char allow[32];
      snprintf(allow, sizeof allow, "%s, OPTIONS", routes[i].method);
      MHD_add_response_header(r, "Allow", allow);
      if (origin) {
        const char *asked = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", allow);
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                asked && strlen(asked) < 1024 ? asked : "Content-Type, Authorization");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
      }
      return queue(srv, c, 204, r);
    }
    if (strcmp(method, routes[i].method)) {
      char msg[160];
      snprintf(msg, sizeof msg, "%s %s: method not allowed (use %s)", method, url, routes[i].method);
      char *body = ssm_api_error(405, "invalid_request_error", NULL, "%s", msg);
      if (!body) return reply(srv, c, 503, NULL, NULL);
      struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
      if (!r) {
        free(body);
        return MHD_NO;
      }
      MHD_add_response_header(r, "Content-Type", "application/json");
      MHD_add_response_header(r, "Allow", routes[i].method);
      return queue(srv, c, 405, r);
    }
    if (rq->too_large) {
      char msg[128];
      snprintf(msg, sizeof msg, "the request body is larger than %zu bytes (ssmc serve --max-body)",
               srv->o.max_body);
      return reply_error(srv, c, 413, "invalid_request_error", msg);
    }
    switch (routes[i].what) {
    case 0: {
      char *ok = NULL;
      ssm_status_free(ssm_strdup("{\"status\":\"ok\"}", "/health", &ok)); /* NULL: a 503 */
      return reply(srv, c, 200, "application/json", ok);
    }
    case 1:
      if (model && strcmp(model, srv->o.model_id)) {
        char msg[400];
        snprintf(msg, sizeof msg, "The model '%.200s' does not exist (this server has '%.60s')",
                 model, srv->o.model_id);
        return reply_error(srv, c, 404, "invalid_request_error", msg);
      }
      return reply(srv, c, 200, "application/json", ssm_api_models(srv->o.model_id, model != NULL));
    case 2: return metrics(srv, c);
    default: return completions(srv, c, routes[i].what == 4, rq);
    }
  }
  int found;
  enum MHD_Result ok = page_file(srv, c, url, method, &found);
  if (found) return ok;
  char msg[300];
  snprintf(msg, sizeof msg, "Invalid URL (%s %.200s)", method, url);
  return reply_error(srv, c, 404, "invalid_request_error", msg);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **state) {
  ssm_server *srv = cls;
  request *rq = *state;
  if (rq == &no_request) { /* out of memory for the request: its body is dropped, then a 503 */
    if (*upload_size) {
      *upload_size = 0;
      return MHD_YES;
    }
    return reply(srv, c, 503, NULL, NULL);
  }
  if (!rq) { /* the headers: refuse a declared oversized body before it comes */
    ssm_status s = ssm_alloc(1, sizeof *rq, (void **)&rq);
    if (s) {
      ssm_status_free(s);
      *state = &no_request;
      return MHD_YES;
    }
    *state = rq;
    const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (len && strtoull(len, NULL, 10) > srv->o.max_body) {
      rq->too_large = 1;
      return route(srv, c, url, method, rq); /* answered before the body is read */
    }
    return MHD_YES;
  }
  if (*upload_size) {
    if (!rq->too_large && rq->body.n + *upload_size > srv->o.max_body) {
      rq->too_large = 1;
      ssm_sb_free(&rq->body);
    }
    if (!rq->too_large) ssm_sb_append(&rq->body, upload, *upload_size); /* a failure: a 503 */
    *upload_size = 0;
    return MHD_YES;
  }
  return route(srv, c, url, method, rq);
}

static void request_done(void *cls, struct MHD_Connection *c, void **state,
                         enum MHD_RequestTerminationCode why) {
  request *rq = *state;
  if (!rq || rq == &no_request) {
    *state = NULL;
    return;
  }
  ssm_sb_free(&rq->body);
  free(rq);
  *state = NULL;
}

/* ---- start and stop ------------------------------------------------------------------- */

static ssm_status check_options(const ssm_serve_options *o) {
  if (o->port < 0 || o->port > 65535) return ssm_status_new(SSM_ERR_INVALID, "--port: %d is not a port", o->port);
  if (o->parallel < 1 || o->parallel > 256) return ssm_status_new(SSM_ERR_INVALID, "--parallel: expected 1 to 256");
  if (o->queue < 0 || o->queue > 100000) return ssm_status_new(SSM_ERR_INVALID, "--queue: expected 0 to 100000");
  if (o->slice_tokens < 1 || o->slice_tokens > 256) return ssm_status_new(SSM_ERR_INVALID, "slice_tokens: expected 1 to 256");
  if (o->slice_chunks < 1) return ssm_status_new(SSM_ERR_INVALID, "slice_chunks: expected at least 1");
  if (o->max_tokens < 1) return ssm_status_new(SSM_ERR_INVALID, "--max-tokens: expected at least 1");
  if (o->max_prompt_tokens < 1) return ssm_status_new(SSM_ERR_INVALID, "--max-prompt-tokens: expected at least 1");
  if (o->cache_every < 0) return ssm_status_new(SSM_ERR_INVALID, "--cache-every: expected 0 or more");
  if (o->max_connections < 1) return ssm_status_new(SSM_ERR_INVALID, "--max-connections: expected at least 1");
  if (o->max_client_connections < 0) return ssm_status_new(SSM_ERR_INVALID, "--max-client-connections: expected 0 or more");
  if (o->timeout < 0) return ssm_status_new(SSM_ERR_INVALID, "--timeout: expected 0 or more");
  return NULL;
}

ssm_status ssm_server_resolve(const char *host, int port, struct sockaddr_storage *out) {
  memset(out, 0, sizeof *out);
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)out;
  struct sockaddr_in *a4 = (struct sockaddr_in *)out;
  if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)port);
    return NULL;
  }
  if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)port);
    return NULL;
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int err = getaddrinfo(host, NULL, &hints, &res);
  if (err || !res)
    return ssm_status_new(SSM_ERR_INVALID, "--host: '%s' is not an address, nor a name this machine "
                          "resolves (%s)", host, err ? gai_strerror(err) : "no address");
  const struct addrinfo *pick = res; /* IPv4 where the name has it: ::1 may not be there */
  for (const struct addrinfo *r = res; r; r = r->ai_next)
    if (r->ai_family == AF_INET) {
      pick = r;
      break;
    }
  memcpy(out, pick->ai_addr, pick->ai_addrlen < sizeof *out ? pick->ai_addrlen : sizeof *out);
  freeaddrinfo(res);
  if (out->ss_family == AF_INET6) a6->sin6_port = htons((uint16_t)port);
  else a4->sin_port = htons((uint16_t)port);
  return NULL;
}

void ssm_server_url(const char *host, int port, char *out, size_t size) {
  snprintf(out, size, strchr(host, ':') ? "http://[%s]:%d" : "http://%s:%d", host, port);
}

static void free_slots(ssm_server *srv) {
  free(srv->slot_job);
  free(srv->slot_in);
  free(srv->slot_out);
}

ssm_status ssm_server_start(ssmc_session *s, const ssm_chat *chat, const ssm_serve_options *opts,
                            ssm_server **out) {
  *out = NULL;
  SSM_TRY(check_options(opts));
  const ssmc_tokenizer *tok;
  SSM_TRY(ssm_status_wrap(ssmc_session_tokenizer(s, &tok), "ssmc serve needs the model's tokenizer"));
  struct sockaddr_storage addr;
  SSM_TRY(ssm_server_resolve(opts->host, opts->port, &addr));
  int v6 = addr.ss_family == AF_INET6;
  ssm_server *srv;
  ssm_api *api = NULL;
  ssm_status st = ssm_status_wrap(ssm_alloc(1, sizeof *srv, (void **)&srv), "the server");
  if (st) return st;
  st = ssm_status_wrap(ssm_alloc(1, sizeof *api, (void **)&api), "the server");
  if (!st && opts->cache_bytes) st = ssm_pcache_create(opts->cache_bytes, &srv->cache);
  if (st) {
    free(api);
    free(srv);
    return st;
  }
  srv->o = *opts;
  srv->session = s;
  srv->model_slots = ssmc_session_slots(s);
  srv->slots = srv->model_slots < opts->parallel ? srv->model_slots : opts->parallel;
  if (srv->model_slots) {
    size_t n = (size_t)srv->model_slots;
    st = ssm_status_wrap(ssm_alloc(n, sizeof *srv->slot_job, (void **)&srv->slot_job), "the slots");
    if (!st) st = ssm_status_wrap(ssm_alloc(n, sizeof *srv->slot_in, (void **)&srv->slot_in), "the slots");
    if (!st) st = ssm_status_wrap(ssm_alloc(n, sizeof *srv->slot_out, (void **)&srv->slot_out), "the slots");
    if (st) {
      free_slots(srv);
      ssm_pcache_destroy(srv->cache);
      free(api);
      free(srv);
      return st;
    }
  }
  srv->tok = tok;
  srv->eos = ssmc_session_eos(s);
  srv->chunk = ssmc_session_chunk(s);
  srv->cache_every = opts->cache_every ? (opts->cache_every + srv->chunk - 1) / srv->chunk * srv->chunk : 0;
  *api = (ssm_api){.tok = tok, .chat = chat, .vocab = ssmc_session_vocab(s), .o = &srv->o,
                   .max_seq = ssmc_session_max_seq(s)};
  const char *from;
  ssmc_status_free(ssmc_session_generate_defaults(s, &api->dflt, &from)); /* checked at open */
  api->dflt_sampling = strstr(from, "do_sample") != NULL;
  srv->api = api;
  pthread_mutex_init(&srv->mu, NULL);
  pthread_cond_init(&srv->cv, NULL);
  if (pthread_create(&srv->worker, NULL, ssm_sched_main, srv)) {
    free_slots(srv);
    ssm_pcache_destroy(srv->cache);
    free(api);
    free(srv);
    return ssm_status_new(SSM_ERR_INTERNAL, "could not start the device thread");
  }
  /* poll, not select: a connection's socket may be past FD_SETSIZE */
  srv->mhd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
                                  (v6 ? MHD_USE_IPv6 : 0),
                              (uint16_t)opts->port, NULL, NULL, handle, srv, MHD_OPTION_SOCK_ADDR, &addr,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)opts->max_connections,
                              MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)opts->max_client_connections,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)opts->timeout,
                              MHD_OPTION_NOTIFY_COMPLETED, request_done, srv, MHD_OPTION_END);
  if (!srv->mhd) {
    ssm_server_stop(srv);
    return ssm_status_new(SSM_ERR_IO, "cannot listen on %s port %d (in use, or not an address of "
                          "this machine)", opts->host, opts->port);
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
  srv->port = info ? info->port : opts->port;
  *out = srv;
  return NULL;
}

int ssm_server_port(const ssm_server *srv) { return srv->port; }

int ssm_server_slots(const ssm_server *srv) { return srv->slots; }

void ssm_server_stop(ssm_server *srv) {
  if (!srv) return;
  pthread_mutex_lock(&srv->mu);
  srv->stopping = 1;
  pthread_cond_broadcast(&srv->cv);
  pthread_mutex_unlock(&srv->mu);
  pthread_join(srv->worker, NULL); /* every job ends, so every connection can finish */
  if (srv->mhd) MHD_stop_daemon(srv->mhd);
  ssm_pcache_destroy(srv->cache);
  free_slots(srv);
  pthread_mutex_destroy(&srv->mu);
  pthread_cond_destroy(&srv->cv);
  free(srv->api);
  free(srv);
}
