/*
 * progress.c — what the command line says about time: a one-line
 * progress bar on stderr while a model compiles and its weights load (only
 * when stderr is a terminal), the summary after a run (device, weights'
 * dtype, load time, prompt and generated tokens with their rates), and the
 * signals that stop long work cleanly.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

/* ---- signals ---------------------------------------------------------------------- */

volatile sig_atomic_t ssm_cli_signal;

static void on_signal(int sig) { ssm_cli_signal = sig; }

void ssm_cli_catch_signals(void) {
  /* no SA_RESTART: a read of stdin (ssmc run -i) ends with EINTR */
  struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESETHAND};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* ---- the progress bar --------------------------------------------------------------- */

#define BAR 24

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int ssm_cli_progress_fn(const char *stage, uint64_t done, uint64_t total, void *user) {
  ssm_cli_progress *p = user;
  if (ssm_cli_signal) return 1;
  if (p->quiet || !isatty(STDERR_FILENO)) return 0;
  int same = !strcmp(p->stage, stage);
  double t = now();
  if (same && done < total && t - p->last < 0.1) return 0; /* at most 10 redraws a second */
  p->last = t;
  snprintf(p->stage, sizeof p->stage, "%s", stage);
  double f = total ? (double)done / (double)total : 1;
  char bar[BAR + 1];
  for (int i = 0; i < BAR; i++) bar[i] = i < (int)(f * BAR + 0.5) ? '#' : '.';
  bar[BAR] = 0;
  int bytes = !strcmp(stage, "loading weights");
  if (bytes)
    fprintf(stderr, "\r\033[K%-18s [%s] %3.0f%%  %.1f / %.1f MB", stage, bar, 100 * f,
            (double)done / 1e6, (double)total / 1e6);
  else
    fprintf(stderr, "\r\033[K%-18s [%s] %3.0f%%  %llu / %llu", stage, bar, 100 * f,
            (unsigned long long)done, (unsigned long long)total);
  fflush(stderr);
  p->drawn = 1;
  return 0;
}

void ssm_cli_progress_end(ssm_cli_progress *p) {
  if (!p->drawn) return;
  fputs("\r\033[K", stderr);
  fflush(stderr);
  p->drawn = 0;
  p->stage[0] = 0;
}

/* ---- the summary of a run ---------------------------------------------------------------- */

static double rate(int64_t n, double s) { return s > 0 ? (double)n / s : 0; }

/* Seconds to the microsecond, rates to the hundredth: JSON without noise. */
static double us(double s) { return round(s * 1e6) / 1e6; }
static double hundredths(double x) { return round(x * 100) / 100; }

void ssm_cli_print_summary(ssmc_session *s, const ssm_cli_backend_choice *b, int json) {
  const char *backend = b->backend == SSMC_BACKEND_CPU ? "cpu" : "vulkan";
  ssmc_stats st;
  ssmc_session_stats(s, &st);
  static const char *const cache[] = {"off", "hit", "miss"};
  const char *device = ssmc_session_device(s);
  fflush(stdout); /* the output first, where both go to one place */
  if (json) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "device", device);
    cJSON_AddStringToObject(j, "backend", backend);
    cJSON_AddStringToObject(j, "backend_reason", b->reason);
    cJSON_AddStringToObject(j, "dtype", ssmc_session_dtype(s));
    cJSON_AddNumberToObject(j, "load_s", us(st.open_s));
    cJSON_AddNumberToObject(j, "compile_s", us(st.compile_s));
    cJSON_AddStringToObject(j, "cache", cache[st.cache]);
    if (st.cache_file) cJSON_AddStringToObject(j, "cache_file", st.cache_file);
    cJSON_AddNumberToObject(j, "prompt_tokens", (double)st.prompt_tokens);
    cJSON_AddNumberToObject(j, "prompt_s", us(st.prompt_s));
    cJSON_AddNumberToObject(j, "prompt_tokens_per_s",
                            hundredths(rate(st.prompt_tokens, st.prompt_s)));
    cJSON_AddNumberToObject(j, "generated_tokens", (double)st.generated_tokens);
    cJSON_AddNumberToObject(j, "generate_s", us(st.generate_s));
    cJSON_AddNumberToObject(j, "generated_tokens_per_s",
                            hundredths(rate(st.generated_tokens, st.generate_s)));
    char *text = cJSON_PrintUnformatted(j);
    if (!text) ssm_fatal_nomem(0);
    fprintf(stderr, "%s\n", text);
    cJSON_free(text);
    cJSON_Delete(j);
    return;
  }
  fprintf(stderr, "device:     %s, %s, %s weights\n", device,
          strcmp(backend, "cpu") ? "Vulkan" : "the reference interpreter", ssmc_session_dtype(s));
  fprintf(stderr, "backend:    %s: %s", backend, b->reason);
  if (b->automatic && b->params)
    fprintf(stderr, " (%.1fM parameters)", (double)b->params / 1e6);
  fputc('\n', stderr);
  fprintf(stderr, "load:       %.2f s", st.open_s);
  if (st.cache == SSMC_CACHE_HIT) fprintf(stderr, " (the compiled model from the cache)\n");
  else if (st.compile_s > 0) fprintf(stderr, " (compiling %.2f s%s)\n", st.compile_s,
                                     st.cache == SSMC_CACHE_MISS ? ", now cached" : "");
  else fputc('\n', stderr);
  fprintf(stderr, "prompt:     %lld tokens, %.3f s, %.1f tokens/s\n", (long long)st.prompt_tokens,
          st.prompt_s, rate(st.prompt_tokens, st.prompt_s));
  fprintf(stderr, "generation: %lld tokens, %.3f s, %.1f tokens/s\n",
          (long long)st.generated_tokens, st.generate_s, rate(st.generated_tokens, st.generate_s));
}
