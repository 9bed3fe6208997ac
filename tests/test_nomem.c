/*
 * test_nomem.c — exhausted host memory on the paths a user reaches with
 * input (config.json and the model description, its IR, the passes, codegen
 * and compiling to a bundle, weights on the CPU backend, tokenizer.json,
 * bundles, state files; chat templates, the server's requests and its
 * device thread): the allocations of each path, bookkeeping included (the
 * arena, the string builder, growable arrays: every allocator counts toward
 * ssm_alloc_fail_at), are failed one at a time,
 * and each time the call returns SSM_ERR_NOMEM with the size and what it
 * was for, instead of aborting, and leaks nothing (LSan builds). Then the
 * CLI prints such an error and exits 1.
 *
 * Which allocations: a path's allocation points are counted first (a run
 * with none failed, ssm_alloc_calls). A path of at most FULL_SWEEP points
 * has every one failed in turn. A longer one has its first `contiguous`
 * points failed in turn, a contiguous range, then every stride-th point
 * after them (a stride that gives about `strided` more), and its last
 * point: deterministic, so a failing point is found again by the same run.
 * Only compiling is that long here: some 2,600 points of which each late
 * one costs a compile through shaderc (1.7 s), so it fails the first 250
 * (the model, its decode graph through every pass, the first kernels) and
 * 20 spread over the rest; every other path fails all of its points.
 */
#include <cjson/cJSON.h>
#include <string.h>
#include <sys/stat.h>

#include "compile/compile.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "runtime/ssmc.h"
#include "runtime/weights/weights.h"
#include "serve/internal.h"
#include "testutil.h"

#define FIX "tests/data/mamba1_tiny"
#define FULL_SWEEP 20000

typedef ssm_status (*op_fn)(void *user);

/* Fails allocation n of `op`: it must come back as NOMEM whose message
 * names the size and, before it, what it was for ("PATH: header of 2208
 * bytes: out of host memory (2209 bytes wanted)"). 0 when it did not. */
static int fail_one(const char *name, op_fn op, void *user, long n) {
  ssm_alloc_fail_at(n);
  ssm_status s = op(user);
  int pending = ssm_alloc_fail_pending();
  ssm_alloc_fail_at(0);
  const char *msg = ssm_status_message(s);
  const char *oom = strstr(msg, "out of host memory (");
  int ok = !pending && ssm_status_code(s) == SSM_ERR_NOMEM && oom && oom > msg + 2 &&
           strstr(oom, " bytes wanted)");
  if (!ok)
    fprintf(stderr, "\n  %s, allocation %ld failed: %s (want NOMEM with the size and what for)\n",
            name, n, pending ? "it was never reached" : s ? msg : "it succeeded");
  CU_ASSERT(ok);
  ssm_status_free(s);
  return ok;
}

/* Counts the allocation points of `op` (it must work), then fails them as
 * the top of this file says. Returns how many were failed. */
static long sweep_some(const char *name, op_fn op, void *user, long contiguous, long strided) {
  unsigned long before = ssm_alloc_calls();
  SSM_ASSERT_OK(op(user));
  long total = (long)(ssm_alloc_calls() - before);
  CU_ASSERT_FATAL(total > 0); /* the path does allocate */
  long stride = total <= contiguous + strided ? 1 : (total - contiguous + strided - 1) / strided;
  long failed = 0, n = 1;
  for (; n <= total; n += n < contiguous ? 1 : stride, failed++)
    if (!fail_one(name, op, user, n)) return failed;
  if (n - stride != total && stride > 1) {
    if (!fail_one(name, op, user, total)) return failed;
    failed++;
  }
  /* past the last point: nothing fails */
  ssm_alloc_fail_at(total + 1);
  SSM_ASSERT_OK(op(user));
  CU_ASSERT(ssm_alloc_fail_pending());
  ssm_alloc_fail_at(0);
  if (stride == 1)
    fprintf(stderr, "\n  %s: all %ld allocations failed in turn\n", name, failed);
  else
    fprintf(stderr, "\n  %s: %ld of %ld allocations failed (1..%ld, then every %ld-th, and the "
            "last)\n", name, failed, total, contiguous, stride);
  return failed;
}

static long sweep(const char *name, op_fn op, void *user) {
  return sweep_some(name, op, user, FULL_SWEEP, 0);
}

static ssm_status op_model(void *user) {
  (void)user;
  ssm_model *m = NULL;
  ssm_status s = ssm_model_open(ssm_test_path(FIX), NULL, &m);
  ssm_model_close(m);
  return s;
}

static ssm_status op_tokenizer(void *user) {
  ssmc_tokenizer *t = NULL;
  ssm_status s = ssmc_tokenizer_open(ssm_test_path(user), &t);
  ssmc_tokenizer_close(t);
  return s;
}

/* A text encoded, and its ids decoded back whole and through a streaming
 * decoder (one id at a time, then a flush), which must give the same text. */
typedef struct {
  const ssmc_tokenizer *tok;
  const char *text;
} tok_text;

static ssm_status op_encode_decode(void *user) {
  const tok_text *u = user;
  int32_t *ids = NULL;
  size_t n = 0, whole_len = 0;
  char *whole = NULL;
  ssmc_decoder *d = NULL;
  ssm_sb streamed = {0};
  ssm_status s = ssmc_tokenizer_encode(u->tok, u->text, strlen(u->text), &ids, &n);
  if (!s && !n) s = ssm_status_new(SSM_ERR_INTERNAL, "no ids for '%s'", u->text);
  if (!s) s = ssmc_tokenizer_decode(u->tok, ids, n, 0, &whole, &whole_len);
  if (!s) s = ssmc_decoder_create(u->tok, 0, &d);
  for (size_t i = 0; i <= n && !s; i++) {
    const char *piece;
    size_t k;
    s = i < n ? ssmc_decoder_feed(d, ids[i], &piece, &k) : ssmc_decoder_flush(d, &piece, &k);
    if (!s) ssm_sb_append(&streamed, piece, k);
  }
  if (!s) s = ssm_sb_status(&streamed, "the streamed text");
  if (!s && (streamed.n != whole_len || memcmp(ssm_sb_str(&streamed), whole, whole_len)))
    s = ssm_status_new(SSM_ERR_INTERNAL, "streamed '%s', decoded '%s'", ssm_sb_str(&streamed), whole);
  ssm_sb_free(&streamed);
  ssmc_decoder_destroy(d);
  free(whole);
  free(ids);
  return s;
}

static ssm_status op_cpu_session(void *user) {
  (void)user;
  ssmc_options o;
  ssmc_options_init(&o);
  o.backend = SSMC_BACKEND_CPU;
  ssmc_session *s = NULL;
  ssm_status st = ssmc_session_open(ssm_test_path(FIX), &o, &s);
  int32_t toks[3] = {1, 2, 3};
  if (!st) st = ssmc_session_feed(s, toks, 3, NULL, NULL);
  ssmc_session_close(s);
  return st;
}

/* On an open CPU session: a snapshot, a fork that generates with sampling
 * (temperature > 0: the sampler's scratch rows), and the snapshot restored. */
static ssm_status op_cpu_runtime(void *user) {
  ssmc_session *s = user, *f = NULL;
  ssmc_snapshot *snap = NULL;
  ssmc_generate_options g;
  ssmc_generate_options_init(&g);
  g.temperature = 0.8f;
  g.top_p = 0.9f;
  g.seed = 7;
  int32_t first = 1, out[4];
  size_t n = 0;
  ssm_status st = ssmc_session_snapshot(s, &snap);
  if (!st) st = ssmc_session_fork(s, &f);
  if (!st) st = ssmc_session_generate(f, &first, 1, 3, &g, out, &n);
  if (!st && n != 3) st = ssm_status_new(SSM_ERR_INTERNAL, "%zu ids generated, not 3", n);
  if (!st) st = ssmc_session_restore(s, snap);
  ssmc_session_close(f);
  ssmc_snapshot_free(snap);
  return st;
}

static ssm_status op_safetensors(void *user) {
  (void)user;
  ssm_st *st = NULL;
  ssm_status s = ssm_st_open(ssm_test_path(FIX "/model.safetensors"), &st);
  ssm_st_close(st);
  return s;
}

static ssm_status op_bundle(void *user) {
  ssm_bundle *b = NULL;
  ssm_status s = ssm_bundle_open(user, &b);
  ssm_bundle_close(b);
  return s;
}

static ssm_status op_state(void *user) {
  void **u = user;
  return ssmc_session_load_state(u[0], u[1]);
}

static ssm_status op_save_state(void *user) {
  void **u = user;
  return ssmc_session_save_state(u[0], u[1]);
}

/* The decode graph of the fixture: built from YAML, then through every pass. */
static ssm_status op_passes(void *user) {
  ssm_model *m = user;
  ssm_graph *g = NULL;
  ssm_status s = ssm_model_build(m, 1, &g);
  if (!s) s = ssm_passes_run(g, NULL, NULL, NULL, NULL);
  ssm_graph_destroy(g);
  return s;
}

/* IR text parsed, verified and printed again. */
static ssm_status op_ir(void *user) {
  ssm_graph *g = NULL;
  char *text = NULL;
  ssm_status s = ssm_graph_parse(user, "nomem.ssmir", &g);
  if (!s) s = ssm_graph_verify(g);
  if (!s) s = ssm_graph_print(g, &text);
  free(text);
  ssm_graph_destroy(g);
  return s;
}

/* Compiling the fixture to a bundle, saved and described. */
static ssm_status op_compile(void *user) {
  ssm_model *m = user;
  ssm_bundle *b = NULL;
  ssm_compile_opts co = {.prefill_tokens = 4};
  char path[600], *text = NULL;
  snprintf(path, sizeof path, "%s/nomem-compile.ssmb", ssm_test_tmpdir());
  ssm_status s = ssm_compile(m, &co, &b);
  if (!s) s = ssm_bundle_save(b, path);
  if (!s) s = ssm_bundle_describe(b, 1, &text);
  free(text);
  ssm_bundle_close(b);
  return s;
}

static void test_config(void) { sweep("model", op_model, NULL); }

static ssm_model *open_fixture(void) {
  ssm_model *m = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path(FIX), NULL, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  return m;
}

static void test_passes(void) {
  ssm_model *m = open_fixture();
  sweep("build and passes", op_passes, m);
  ssm_model_close(m);
}

static void test_ir(void) {
  ssm_model *m = open_fixture();
  ssm_graph *g = NULL;
  char *text = NULL;
  SSM_ASSERT_OK(ssm_model_build(m, 1, &g));
  SSM_ASSERT_OK(ssm_graph_print(g, &text));
  ssm_graph_destroy(g);
  ssm_model_close(m);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  sweep("IR text", op_ir, text);
  free(text);
}

static void test_compile(void) {
  ssm_model *m = open_fixture();
  sweep_some("compile", op_compile, m, 250, 20);
  ssm_model_close(m);
}

/* The small fixtures, each with other normalizers, pre-tokenizers and
 * decoders, fully; pymamba's (50,000 tokens, each an allocation) in part. */
static void test_tokenizer(void) {
  static const char *const small[] = {"neox", "normmix", "metaspace"};
  for (size_t i = 0; i < sizeof small / sizeof *small; i++) {
    char path[300];
    snprintf(path, sizeof path, "tests/data/tokenizer/%s/tokenizer.json", small[i]);
    sweep(path, op_tokenizer, path);
  }
  sweep_some("pymamba tokenizer", op_tokenizer, "models/pymamba/tokenizer.json", 300, 30);
}

/* Encoding and decoding (whole and streamed) with each small fixture's
 * normalizers, pre-tokenizers and decoders, and pymamba's. */
static void test_encode_decode(void) {
  static const char *const paths[] = {"tests/data/tokenizer/neox/tokenizer.json",
                                      "tests/data/tokenizer/normmix/tokenizer.json",
                                      "tests/data/tokenizer/metaspace/tokenizer.json",
                                      "models/pymamba/tokenizer.json"};
  for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
    ssmc_tokenizer *t = NULL;
    SSM_ASSERT_OK(ssmc_tokenizer_open(ssm_test_path(paths[i]), &t));
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    tok_text u = {t, "Hello, World!  def f(x):\n\treturn x + 12345 # caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac "
                     "\xf0\x9f\x91\x8d <|endoftext|> don't   end "};
    char name[300];
    snprintf(name, sizeof name, "%s: encode and decode", paths[i]);
    sweep(name, op_encode_decode, &u);
    ssmc_tokenizer_close(t);
  }
}

static void test_safetensors(void) { sweep("safetensors", op_safetensors, NULL); }

static void test_cpu_weights(void) { sweep("cpu session", op_cpu_session, NULL); }

/* A CPU session of the fixture fed 3 tokens. */
static ssmc_session *fed_cpu_session(void) {
  ssmc_options o;
  ssmc_options_init(&o);
  o.backend = SSMC_BACKEND_CPU;
  ssmc_session *s = NULL;
  SSM_ASSERT_OK(ssmc_session_open(ssm_test_path(FIX), &o, &s));
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  int32_t toks[3] = {1, 2, 3};
  SSM_ASSERT_OK(ssmc_session_feed(s, toks, 3, NULL, NULL));
  return s;
}

static void test_cpu_runtime(void) {
  ssmc_session *s = fed_cpu_session();
  SSM_ASSERT_OK(op_cpu_runtime(s)); /* what is made once (the sampling graph) is made */
  sweep("snapshot, fork, sampling", op_cpu_runtime, s);
  CU_ASSERT_EQUAL(ssmc_session_position(s), 3); /* the last, successful restore */
  ssmc_session_close(s);
}

static void test_bundle(void) {
  ssm_model *m = NULL;
  ssm_bundle *b = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path(FIX), NULL, &m));
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  ssm_compile_opts co = {.prefill_tokens = 4};
  SSM_ASSERT_OK(ssm_compile(m, &co, &b));
  ssm_model_close(m);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  char path[600];
  snprintf(path, sizeof path, "%s/nomem.ssmb", ssm_test_tmpdir());
  SSM_ASSERT_OK(ssm_bundle_save(b, path));
  ssm_bundle_close(b);
  sweep("bundle", op_bundle, path);
}

static void test_state(void) {
  ssmc_session *s = fed_cpu_session();
  char path[600];
  snprintf(path, sizeof path, "%s/nomem.state", ssm_test_tmpdir());
  SSM_ASSERT_OK(ssmc_session_save_state(s, path));
  SSM_ASSERT_OK(ssmc_session_reset(s));
  void *u[2] = {s, path};
  sweep("state", op_state, u);
  /* a failed load changed nothing; the last, successful one restored it */
  CU_ASSERT_EQUAL(ssmc_session_position(s), 3);
  char saved[600];
  snprintf(saved, sizeof saved, "%s/nomem-saved.state", ssm_test_tmpdir());
  u[1] = saved;
  sweep("state save", op_save_state, u);
  ssmc_session_close(s);
}

/* A shipped chat template (tests/data/chat/NAME) read and parsed, then
 * applied to its golden cases that render, each of which must still give
 * transformers' text. */
typedef struct {
  char dir[600];
  const cJSON *cases;
} chat_fixture;

static ssm_status op_chat(void *user) {
  const chat_fixture *f = user;
  ssm_chat *chat = NULL;
  ssm_status s = ssm_chat_open(f->dir, NULL, &chat);
  for (const cJSON *c = f->cases->child; c && !s; c = c->next) {
    const cJSON *tools = cJSON_GetObjectItem(c, "tools"), *want = cJSON_GetObjectItem(c, "text");
    if (!cJSON_IsString(want)) continue; /* the template raises an exception */
    char *got = NULL;
    size_t n = 0;
    s = ssm_chat_render(chat, cJSON_GetObjectItem(c, "messages"), cJSON_IsNull(tools) ? NULL : tools,
                        NULL, cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")), &got, &n);
    if (!s && (n != strlen(want->valuestring) || memcmp(got, want->valuestring, n)))
      s = ssm_status_new(SSM_ERR_INTERNAL, "%s: case '%s' renders differently", f->dir,
                         cJSON_GetObjectItem(c, "name")->valuestring);
    free(got);
  }
  ssm_chat_close(chat);
  return s;
}

static void test_chat(void) {
  static const char *const names[] = {"granite-4.0-h-micro", "jamba-mini-1.7",
                                      "nemotron-h-8b-reasoning-128k", "nemotron-nano-9b-v2"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    chat_fixture f;
    char golden[700], *text = NULL;
    size_t n;
    snprintf(f.dir, sizeof f.dir, "%s/%s", ssm_test_path("tests/data/chat"), names[i]);
    snprintf(golden, sizeof golden, "%s/golden.json", f.dir);
    SSM_ASSERT_OK(ssm_file_read(golden, 0, &text, &n));
    cJSON *g = text ? cJSON_Parse(text) : NULL;
    free(text);
    f.cases = cJSON_GetObjectItem(g, "cases");
    CU_ASSERT_FATAL(cJSON_GetArraySize(f.cases) > 0);
    sweep(names[i], op_chat, &f);
    cJSON_Delete(g);
  }
}

/* A request to the server, turned from its body into a job (the chat
 * template, the tokenizer, stop strings), and its responses: the whole
 * one and a stream chunk. */
typedef struct {
  const ssm_api *api;
  int chat;
  const char *body;
} api_request;

static ssm_status op_api(void *user) {
  const api_request *r = user;
  ssm_job *j = NULL;
  char *err = NULL;
  ssm_status s = ssm_api_parse(r->api, r->chat, r->body, strlen(r->body), &j, &err);
  if (!s && !j) s = ssm_status_new(SSM_ERR_INTERNAL, "the request was refused: %s", err);
  if (!s && (!j->nprompt || j->nstop != 2 || strcmp(j->stop[1], "\n\n")))
    s = ssm_status_new(SSM_ERR_INTERNAL, "the job is not the request's");
  free(err);
  if (!s) {
    ssm_sb_printf(&j->text, "Hello there");
    s = ssm_sb_status(&j->text, "the generated text");
  }
  if (!s) s = ssm_api_final(j);
  if (!s) s = ssm_api_chunk(j, j->text.s, 5, NULL, 0);
  if (!s && !strstr(ssm_sb_str(&j->out), "\"Hello there\""))
    s = ssm_status_new(SSM_ERR_INTERNAL, "the response lacks the text: %s", ssm_sb_str(&j->out));
  ssm_job_free(j);
  return s;
}

static void test_api(void) {
  ssmc_tokenizer *tok = NULL;
  ssm_chat *chat = NULL;
  SSM_ASSERT_OK(ssmc_tokenizer_open(ssm_test_path("tests/data/tokenizer/neox/tokenizer.json"), &tok));
  SSM_ASSERT_OK(ssm_chat_open(ssm_test_path("tests/data/chat/granite-4.0-h-micro"), NULL, &chat));
  CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
  CU_ASSERT_PTR_NOT_NULL_FATAL(chat);
  ssm_serve_options o;
  ssm_serve_options_init(&o);
  ssm_api api = {.tok = tok, .chat = chat, .vocab = 50000, .o = &o};
  api_request chat_rq = {&api, 1, "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                                  "{\"role\": \"user\", \"content\": \"Hello, how are you?\"}], "
                                  "\"max_tokens\": 8, \"stop\": [\"</s>\", \"\\n\\n\"]}"};
  api_request text_rq = {&api, 0, "{\"prompt\": \"def fib(n):\", \"max_tokens\": 4, \"logprobs\": 2, "
                                  "\"stop\": [\"x\", \"\\n\\n\"]}"};
  sweep("chat completion request", op_api, &chat_rq);
  sweep("completion request", op_api, &text_rq);
  ssm_chat_close(chat);
  ssmc_tokenizer_close(tok);
}

/* Two requests on a server's device thread (mamba1_tiny on the CPU, no
 * prompt cache): taking turns, one decode token per turn, so each turn
 * parks the other's state in a snapshot; or, with two slots, one decoding
 * alone while the other's prompt is fed, then both in the slots. With each
 * allocation of the device thread failed in turn, each request ends,
 * either with the text it has without failures or with a 503 that says it
 * ran out of host memory, and the server goes on. */
typedef struct {
  ssm_server *srv;
  const char *body[2];
  char *want[2]; /* the responses' texts, from a run without failures */
  int served, refused;
  unsigned long calls; /* the allocations of the last run, after parsing */
} sched_run;

/* The "text" of a completion body, or NULL. */
static char *completion_text(const char *body) {
  cJSON *r = cJSON_Parse(body);
  const cJSON *t = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "choices"), 0), "text");
  char *text = cJSON_IsString(t) ? strdup(t->valuestring) : NULL;
  cJSON_Delete(r);
  return text;
}

/* Runs both requests; 0 when one ended otherwise than the top says. */
static int run_two(sched_run *r, int failing) {
  ssm_job *j[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) {
    char *err = NULL;
    SSM_ASSERT_OK(ssm_api_parse(r->srv->api, 0, r->body[i], strlen(r->body[i]), &j[i], &err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(j[i]);
  }
  unsigned long before = ssm_alloc_calls();
  if (failing) ssm_alloc_fail_at(failing);
  /* the first turn waits for the second request: the turns are the same each run */
  pthread_mutex_lock(&j[0]->mu);
  CU_ASSERT_EQUAL(ssm_sched_submit(r->srv, j[0]), 0);
  CU_ASSERT_EQUAL(ssm_sched_submit(r->srv, j[1]), 0);
  pthread_mutex_unlock(&j[0]->mu);
  int ok = 1;
  for (int i = 0; i < 2; i++) {
    pthread_mutex_lock(&j[i]->mu);
    while (!j[i]->done) pthread_cond_wait(&j[i]->cv, &j[i]->mu);
    pthread_mutex_unlock(&j[i]->mu);
  }
  ssm_alloc_fail_at(0);
  r->calls = ssm_alloc_calls() - before;
  for (int i = 0; i < 2; i++) {
    const char *body = ssm_sb_str(&j[i]->out);
    char *text = j[i]->status == 200 ? completion_text(body) : NULL;
    if (!failing && text && !r->want[i]) r->want[i] = strdup(text);
    int good = j[i]->status == 200 ? text && r->want[i] && !strcmp(text, r->want[i])
                                   : j[i]->status == 503 && strstr(body, "out of host memory (");
    if (!good)
      fprintf(stderr, "\n  allocation %d failed: request %d ended with %d: %s\n", failing, i,
              j[i]->status, body);
    ok &= good;
    r->served += j[i]->status == 200;
    r->refused += j[i]->status == 503;
    free(text);
    ssm_job_release(j[i]);
  }
  CU_ASSERT(ok);
  return ok;
}

static void sched_failing(int slots) {
  ssmc_options o;
  ssmc_options_init(&o);
  o.backend = SSMC_BACKEND_CPU;
  o.chunk = 4;
  o.slots = slots;
  o.tokenizer = ssm_test_path("models/pymamba/tokenizer.json"); /* ids up to the fixture's vocab */
  ssmc_session *s = NULL;
  SSM_ASSERT_OK(ssmc_session_open(ssm_test_path(FIX), &o, &s));
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  ssm_serve_options so;
  ssm_serve_options_init(&so);
  so.port = 0;
  so.cache_bytes = 0;
  so.slice_tokens = 1;
  sched_run r = {.body = {"{\"prompt\": [1, 2, 3], \"max_tokens\": 2, \"temperature\": 0}",
                          "{\"prompt\": [4, 5], \"max_tokens\": 2, \"temperature\": 0}"}};
  SSM_ASSERT_OK(ssm_server_start(s, NULL, &so, &r.srv));
  CU_ASSERT_PTR_NOT_NULL_FATAL(r.srv);
  CU_ASSERT_EQUAL(ssm_server_slots(r.srv), slots);
  run_two(&r, 0); /* the device thread's first allocations, made once */
  CU_ASSERT_FATAL(run_two(&r, 0));
  long total = (long)r.calls;
  CU_ASSERT_FATAL(total > 0 && r.want[0] && r.want[1]);
  r.served = r.refused = 0;
  for (long n = 1; n <= total && run_two(&r, (int)n); n++) {}
  fprintf(stderr, "\n  two requests %s: %ld allocations failed in turn (%d requests served, %d "
          "refused)", slots ? "in slots" : "taking turns", total, r.served, r.refused);
  CU_ASSERT(r.served > 0 && r.refused > 0);
  CU_ASSERT(run_two(&r, 0)); /* and the server goes on */
  ssm_server_stop(r.srv);
  ssmc_session_close(s);
  free(r.want[0]);
  free(r.want[1]);
}

static void test_sched(void) { sched_failing(0); }
static void test_sched_slots(void) { sched_failing(2); }

/* The CLI prints the error and exits 1 (SSMC_TEST_ALLOC_FAIL_AT fails its
 * N-th allocation, bookkeeping included), for allocations of a CPU run with
 * a saved state: the first 40 in turn, then every 50th up to the 1000th,
 * then each power of two, until the run works. */
static void test_cli(void) {
  char state[600], cmd[2048], *out = NULL;
  snprintf(state, sizeof state, "%s/cli.state", ssm_test_tmpdir());
  snprintf(cmd, sizeof cmd, "cd %s && %s run " FIX " --backend cpu --tokens 1,2 -n 2 --state-out %s",
           ssm_test_source_dir(), ssm_test_ssmc(), state);
  CU_ASSERT_EQUAL_FATAL(ssm_test_sh(cmd, &out), 0);
  free(out);
  int failed = 0, rc = 1;
  for (int n = 1; rc == 1; n = n < 40 ? n + 1 : n < 1000 ? (n + 50) / 50 * 50 : 2 * n) {
    snprintf(cmd, sizeof cmd, "cd %s && SSMC_TEST_ALLOC_FAIL_AT=%d %s run " FIX " --backend cpu "
             "--tokens 1,2 -n 2 --state-in %s", ssm_test_source_dir(), n, ssm_test_ssmc(), state);
    rc = ssm_test_sh(cmd, &out);
    if (rc == 1) {
      failed++;
      int ok = strstr(out, "ssmc: ") && strstr(out, "out of host memory (") &&
               strstr(out, " bytes wanted)");
      if (!ok) fprintf(stderr, "\n  allocation %d failed, output:\n%s\n", n, out);
      CU_ASSERT(ok);
    } else {
      CU_ASSERT_EQUAL(rc, 0); /* past the last allocation: the run works */
    }
    free(out);
  }
  fprintf(stderr, "\n  ssmc run: %d allocations failed in turn, each an exit 1\n", failed);
  CU_ASSERT(failed > 2);
}

/* `ssmc compile` too: a failure in the compiler (the model, the passes,
 * kernel text, the bundle) is an "ssmc: ... out of host memory (N bytes
 * wanted)" and an exit 1, and no bundle is left behind. */
static void test_cli_compile(void) {
  static const int at[] = {1, 7, 60, 150, 300, 600, 1200, 2400};
  char out_path[600];
  snprintf(out_path, sizeof out_path, "%s/cli-nomem.ssmb", ssm_test_tmpdir());
  for (size_t i = 0; i < sizeof at / sizeof *at; i++) {
    char cmd[2048], *out = NULL;
    remove(out_path);
    snprintf(cmd, sizeof cmd, "cd %s && SSMC_TEST_ALLOC_FAIL_AT=%d %s compile " FIX " -o %s -q",
             ssm_test_source_dir(), at[i], ssm_test_ssmc(), out_path);
    int rc = ssm_test_sh(cmd, &out);
    int ok = rc == 1 && strstr(out, "ssmc: ") && strstr(out, "out of host memory (") &&
             strstr(out, " bytes wanted)");
    if (!ok) fprintf(stderr, "\n  compile, allocation %d failed: exit %d, output:\n%s\n", at[i], rc, out);
    CU_ASSERT(ok);
    struct stat st;
    CU_ASSERT(stat(out_path, &st) != 0);
    free(out);
  }
}

/* Address-space limits (ulimit -v) from too small for the program's own
 * libraries up to enough: `ssmc compile` and a CPU run from text (config,
 * tokenizer, weights, generation) each either work or exit 1 with an
 * "ssmc: " message, never die by a signal (an abort on a failed small
 * allocation, a NULL dereferenced). The Vulkan path is left out: lavapipe
 * itself crashes in pipeline creation when memory runs out. Not under ASan,
 * whose shadow memory needs terabytes of address space. */
static void test_address_space_limits(void) {
#ifdef SSM_TEST_ASAN
  fprintf(stderr, "\n  skipped under ASan\n");
#else
  static const int mib[] = {16, 24, 32, 40, 48, 56, 64, 72, 80, 96, 128, 256};
  const char *what[] = {"compile", "cpu run"};
  int worked[2] = {0}, refused[2] = {0};
  for (size_t i = 0; i < sizeof mib / sizeof *mib; i++)
    for (int w = 0; w < 2; w++) {
      char cmd[2048], *out = NULL;
      if (w == 0)
        snprintf(cmd, sizeof cmd, "cd %s && ulimit -v %d && %s compile " FIX " -o %s/limit.ssmb -q",
                 ssm_test_source_dir(), mib[i] * 1024, ssm_test_ssmc(), ssm_test_tmpdir());
      else
        snprintf(cmd, sizeof cmd, "cd %s && ulimit -v %d && %s run models/pymamba --backend cpu "
                 "--prompt 'def f(x):' -n 3 -q", ssm_test_source_dir(), mib[i] * 1024,
                 ssm_test_ssmc());
      int rc = ssm_test_sh(cmd, &out);
      /* 127: the dynamic loader could not map a library, before main */
      int ok = rc == 0 || rc == 127 || (rc == 1 && strstr(out, "ssmc: "));
      if (!ok) fprintf(stderr, "\n  %s under %d MiB: exit %d\n%s\n", what[w], mib[i], rc, out);
      CU_ASSERT(ok);
      worked[w] += rc == 0;
      refused[w] += rc == 1;
      free(out);
    }
  for (int w = 0; w < 2; w++) {
    fprintf(stderr, "\n  %s: refused under %d limits, worked under %d", what[w], refused[w], worked[w]);
    CU_ASSERT(refused[w] > 0 && worked[w] > 0); /* the range covers both */
  }
#endif
}

int main(void) {
  CU_TestInfo tests[] = {{"config", test_config},
                         {"passes", test_passes},
                         {"ir", test_ir},
                         {"compile", test_compile},
                         {"tokenizer", test_tokenizer},
                         {"encode_decode", test_encode_decode},
                         {"safetensors", test_safetensors},
                         {"cpu_weights", test_cpu_weights},
                         {"cpu_runtime", test_cpu_runtime},
                         {"bundle", test_bundle},
                         {"state", test_state},
                         {"chat", test_chat},
                         {"api", test_api},
                         {"sched", test_sched},
                         {"sched_slots", test_sched_slots},
                         {"cli", test_cli},
                         {"cli_compile", test_cli_compile},
                         {"address_space_limits", test_address_space_limits},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("nomem", tests);
}
