/*
 * serve.c — `ssmc serve`: opens the model once through the library (a
 * model directory compiled with a slot for each of --parallel requests,
 * where its graphs allow slots), reads its chat template, and runs the
 * OpenAI-compatible server (serve/serve.h) until SIGINT or SIGTERM.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "frontend/frontend.h"
#include "serve/serve.h"

static const char serve_usage[] =
    "usage: ssmc serve MODEL_DIR|BUNDLE [options]\n"
    "  --host ADDR          address or name to listen on (default 127.0.0.1; ::1,\n"
    "                       0.0.0.0, localhost)\n"
    "  --port N             port (default 8080; 0: any free one, printed at start)\n"
    "  --weights DIR        the checkpoint (default: MODEL_DIR)\n"
    "  --backend auto|vulkan|cpu, --device N, --chunk T, --max-seq N, --tokenizer FILE\n"
    "  --chat-template FILE a Jinja chat template instead of the model's\n"
    "  --name ID            the model id clients see (default: the model's name)\n"
    "  --parallel N         requests running at once (default 4): a model directory\n"
    "                       is compiled with N slots, whose requests decode together\n"
    "  --queue N            requests waiting beyond those; more get 503 (default 32)\n"
    "  --max-tokens N       the most one request generates (default 1024)\n"
    "  --max-prompt-tokens N\n"
    "                       the most prompt tokens one request may have (default 32768)\n"
    "  --cache-mb N         prompt cache budget in MiB (default 256; 0: off)\n"
    "  --cache-every N      cache the prompt state every N tokens (default 512; 0: only\n"
    "                       after prompts and conversations)\n"
    "  --max-body-kb N      largest request body (default 1024)\n"
    "  --max-connections N  open connections (default 256)\n"
    "  --max-client-connections N\n"
    "                       open connections from one address (default 32; 0: no limit)\n"
    "  --cors-origin LIST   origins whose web pages may call the server, comma-separated\n"
    "                       (https://app.example,http://host:8000; '*': any); pages of\n"
    "                       this machine (localhost, 127.0.0.1, [::1]) and of the\n"
    "                       server's own address always may\n"
    "  --no-page            no chat page at / (the API only)\n"
    "  --timeout S          seconds a client may be silent while it sends its request or\n"
    "                       reads the answer; the time the answer takes to make does\n"
    "                       not count (default 10; 0: no limit)\n";

static int usage_fail(const char *fmt, const char *arg) {
  return ssm_cli_usage_error("serve", fmt, arg);
}

/* An integer option in [lo, hi]. */
static int int_arg(const char *name, const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi) {
    ssm_cli_usage_error("serve", "--%s: expected an integer from %ld to %ld, got '%s'", name, lo, hi, v);
    return 0;
  }
  *out = x;
  return 1;
}

static int is_dir(const char *p) {
  struct stat st;
  return !stat(p, &st) && S_ISDIR(st.st_mode);
}

static void log_line(const char *msg, void *user) { fprintf(stderr, "ssmc: %s\n", msg); }

/* The slots to compile model directory `model` with: `want`, or 0 when its
 * batched program cannot be built, with the reason in *out_why
 * (malloc'd). */
static int model_slots(const char *model, int want, char **out_why) {
  *out_why = NULL;
  ssm_model *m = NULL;
  ssm_graph *g = NULL;
  ssm_status s = ssm_model_open(model, NULL, &m);
  if (!s) s = ssm_model_build_batch(m, want, &g);
  ssm_graph_destroy(g);
  ssm_model_close(m);
  if (!s) return want;
  ssm_status_free(ssm_strdup(ssmc_status_message(s), "a message", out_why));
  ssmc_status_free(s);
  return 0;
}

/* Says once, at start, how requests share the device. */
static void say_slots(const char *model, int bundle, int model_slots, int used, int parallel,
                      const char *why) {
  if (used && used == parallel && model_slots == used)
    fprintf(stderr, "ssmc: serve: %d slots: up to %d requests decode together, one token each "
            "a step\n", used, used);
  else if (used && model_slots > used)
    fprintf(stderr, "ssmc: serve: %s has %d slots; --parallel %d uses %d of them (the others step "
            "unused)\n", model, model_slots, parallel, used);
  else if (used)
    fprintf(stderr, "ssmc: serve: %s has %d slots, fewer than --parallel %d: %d requests decode "
            "together and the others wait in the queue (ssmc compile --slots %d for %d)\n", model,
            model_slots, parallel, used, parallel, parallel);
  else if (bundle)
    fprintf(stderr, "ssmc: serve: %s has no slots (ssmc compile --slots %d): up to %d requests take "
            "turns on the device\n", model, parallel, parallel);
  else
    fprintf(stderr, "ssmc: serve: the model has no slots (%s): up to %d requests take turns on the "
            "device\n", why ? why : "its batched program cannot be built", parallel);
}

int ssm_cli_serve(int argc, char **argv) {
  ssmc_options o;
  ssmc_options_init(&o);
  ssm_serve_options so;
  ssm_serve_options_init(&so);
  const char *backend = "auto", *chat_file = NULL, *model = NULL;
  long v, cache_mb = 256;
  static const struct option longs[] = {
      {"host", 1, 0, 'H'},     {"port", 1, 0, 'p'},       {"weights", 1, 0, 'w'},
      {"backend", 1, 0, 'b'},  {"device", 1, 0, 'd'},     {"chunk", 1, 0, 'c'},
      {"max-seq", 1, 0, 's'},  {"tokenizer", 1, 0, 't'},  {"chat-template", 1, 0, 'T'},
      {"name", 1, 0, 'n'},     {"parallel", 1, 0, 'P'},   {"queue", 1, 0, 'q'},
      {"max-tokens", 1, 0, 'm'}, {"cache-mb", 1, 0, 'M'}, {"cache-every", 1, 0, 'e'},
      {"max-body-kb", 1, 0, 'B'}, {"max-prompt-tokens", 1, 0, 'R'},
      {"max-connections", 1, 0, 'C'}, {"max-client-connections", 1, 0, 'I'},
      {"timeout", 1, 0, 'o'}, {"cors-origin", 1, 0, 'O'}, {"no-page", 0, 0, 'G'},
      {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
  optind = 1;
  opterr = 0;
  argv--, argc++; /* getopt starts at argv[1] */
  for (int c; (c = getopt_long(argc, argv, "h", longs, NULL)) != -1;) {
    switch (c) {
    case 'H': so.host = optarg; break;
    case 'p': if (!int_arg("port", optarg, 0, 65535, &v)) return 2; so.port = (int)v; break;
    case 'w': o.weights = optarg; break;
    case 'b': backend = optarg; break;
    case 'd': if (!int_arg("device", optarg, 0, 1000, &v)) return 2; o.device = (int)v; break;
    case 'c': if (!int_arg("chunk", optarg, 1, SSM_CHUNK_MAX, &v)) return 2; o.chunk = (int)v; break;
    case 's': if (!int_arg("max-seq", optarg, 1, 1 << 24, &v)) return 2; o.max_seq = (int)v; break;
    case 't': o.tokenizer = optarg; break;
    case 'T': chat_file = optarg; break;
    case 'n': so.model_id = optarg; break;
    case 'P': if (!int_arg("parallel", optarg, 1, 256, &v)) return 2; so.parallel = (int)v; break;
    case 'q': if (!int_arg("queue", optarg, 0, 100000, &v)) return 2; so.queue = (int)v; break;
    case 'm': if (!int_arg("max-tokens", optarg, 1, 1 << 20, &v)) return 2; so.max_tokens = (int)v; break;
    case 'M': if (!int_arg("cache-mb", optarg, 0, 1 << 24, &cache_mb)) return 2; break;
    case 'e': if (!int_arg("cache-every", optarg, 0, 1 << 24, &v)) return 2; so.cache_every = (int)v; break;
    case 'h': fputs(serve_usage, stdout); return 0;
    case 'B': if (!int_arg("max-body-kb", optarg, 1, 1 << 20, &v)) return 2; so.max_body = (size_t)v << 10; break;
    case 'R': if (!int_arg("max-prompt-tokens", optarg, 1, 1 << 24, &v)) return 2; so.max_prompt_tokens = (int)v; break;
    case 'C': if (!int_arg("max-connections", optarg, 1, 100000, &v)) return 2; so.max_connections = (int)v; break;
    case 'I': if (!int_arg("max-client-connections", optarg, 0, 100000, &v)) return 2; so.max_client_connections = (int)v; break;
    case 'o': if (!int_arg("timeout", optarg, 0, 86400, &v)) return 2; so.timeout = (int)v; break;
    case 'O': so.cors = optarg; break;
    case 'G': so.no_page = 1; break;
    default:
      return usage_fail("unknown option or missing value: '%s'", argv[optind - 1]);
    }
  }
  if (optind + 1 != argc) return usage_fail("expected one MODEL_DIR or BUNDLE%s", "");
  struct sockaddr_storage addr; /* a --host that does not resolve: said before the model loads */
  ssmc_status st = ssm_server_resolve(so.host, so.port, &addr);
  if (st) return fprintf(stderr, "ssmc: serve: %s\n", ssmc_status_message(st)), ssmc_status_free(st), 2;
  model = argv[optind];
  so.cache_bytes = (uint64_t)cache_mb << 20;
  if (strcmp(backend, "auto") && strcmp(backend, "cpu") && strcmp(backend, "vulkan"))
    return usage_fail("--backend: expected auto, cpu or vulkan, got '%s'", backend);
  ssm_cli_backend_choice choice;
  ssm_cli_backend(backend, &choice);
  o.backend = choice.backend;
  if (!strcmp(so.model_id, "ssmc")) { /* the default id: the model's name */
    const char *base = strrchr(model, '/');
    base = base && base[1] ? base + 1 : model;
    so.model_id = base;
  }
  ssmc_set_log(log_line, NULL);
  /* the tokenizer, and a template that does not parse, fail here, before the model loads */
  ssm_chat *chat = NULL;
  ssmc_tokenizer *tok = NULL;
  char *model_dir = NULL;
  st = ssm_status_wrap(ssmc_tokenizer_open_for(model, &o, &tok), "ssmc serve needs the model's "
                       "tokenizer");
  ssmc_tokenizer_close(tok);
  if (!st) st = ssmc_model_dir(model, &o, &model_dir);
  if (!st) st = ssm_chat_open(model_dir, chat_file, &chat);
  free(model_dir);
  if (st) return fprintf(stderr, "ssmc: serve: %s\n", ssmc_status_message(st)), ssmc_status_free(st), 1;
  /* the threads the server starts inherit this mask: only sigwait sees them */
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, NULL);
  signal(SIGPIPE, SIG_IGN);
  ssmc_session *s = NULL;
  ssm_server *srv = NULL;
  int bundle = !is_dir(model);
  char *why = NULL;
  if (!bundle) o.slots = model_slots(model, so.parallel, &why);
  st = ssmc_session_open(model, &o, &s);
  if (st && o.slots) {
    /* the batched program may not open where the one-sequence ones do (its
     * slots' KV caches, which no kernel reads in windows, past the device's
     * binding range): requests then take turns, and the server says why */
    ssm_sb msg = {0};
    ssm_sb_printf(&msg, "its batched program of %d slots does not open: %s", o.slots,
                  ssmc_status_message(st));
    ssmc_status_free(st);
    ssmc_session_close(s);
    s = NULL;
    free(why);
    why = ssm_sb_xtake(&msg);
    o.slots = 0;
    st = ssmc_session_open(model, &o, &s);
  }
  if (!st) ssm_cli_backend_opened(s, &choice);
  if (!st) st = ssm_server_start(s, chat, &so, &srv);
  if (st) {
    fprintf(stderr, "ssmc: serve: %s\n", ssmc_status_message(st));
    ssmc_status_free(st);
    ssmc_session_close(s);
    ssm_chat_close(chat);
    free(why);
    return 1;
  }
  fprintf(stderr, "ssmc: serve: %s (%s) on %s (%s: %s); chat template: %s\n", so.model_id,
          ssmc_session_architecture(s), ssmc_session_device(s),
          choice.backend == SSMC_BACKEND_CPU ? "cpu" : "vulkan", choice.reason,
          chat ? ssm_chat_source(chat) : "none (chat requests get 400; --chat-template FILE)");
  say_slots(model, bundle, ssmc_session_slots(s), ssm_server_slots(srv), so.parallel, why);
  free(why);
  char url[300];
  ssm_server_url(so.host, ssm_server_port(srv), url, sizeof url);
  fprintf(stderr, "ssmc: serve: listening on %s\n", url);
  if (!so.no_page) fprintf(stderr, "ssmc: serve: a chat page at %s/\n", url);
  fflush(stderr);
  int sig = 0;
  sigwait(&stop, &sig);
  fprintf(stderr, "ssmc: serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  ssm_server_stop(srv);
  ssmc_session_close(s);
  ssm_chat_close(chat);
  return 0;
}
