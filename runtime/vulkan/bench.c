/*
 * bench.c — `ssmc bench`: decode and prefill throughput of a loaded bundle.
 * Timing is wall clock around whole runs (each run waits for the device),
 * so it includes every submit and copy that `ssmc run` pays. Decode is
 * timed twice: logits read back and the argmax taken on the host (as `ssmc
 * run --greedy`), and with the sampler feeding each token back on the
 * device (ssm_rt_generate, as `ssmc run` without --greedy).
 */
#include <stdlib.h>
#include <time.h>

#include "runtime/vulkan/vulkan.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int32_t argmax(const float *v, int64_t n) {
  int32_t b = 0;
  for (int64_t i = 1; i < n; i++)
    if (v[i] > v[b]) b = (int32_t)i;
  return b;
}

ssm_status ssm_bench(ssm_rt *rt, int decode_tokens, ssm_bench_result *out) {
  *out = (ssm_bench_result){0};
  if (decode_tokens < 1) decode_tokens = 1;
  int64_t V = ssm_rt_vocab(rt);
  int C = ssm_rt_prefill_tokens(rt);
  float *logits = malloc(sizeof(float) * (size_t)V * (size_t)C);
  int32_t *toks = malloc(sizeof(int32_t) * (size_t)C);
  if (!logits || !toks) abort();
  for (int i = 0; i < C; i++) toks[i] = (int32_t)((i * 7919) % V);
  ssm_status s = ssm_rt_reset(rt);
  /* warm-up */
  int32_t tok = 1 % (int32_t)V;
  for (int i = 0; i < 8 && !s; i++) s = ssm_rt_run(rt, &tok, 1, logits);
  if (!s) s = ssm_rt_run(rt, toks, C, logits);
  /* decode */
  if (!s) s = ssm_rt_reset(rt);
  double t0 = now_s();
  for (int i = 0; i < decode_tokens && !s; i++) {
    s = ssm_rt_run(rt, &tok, 1, logits);
    tok = argmax(logits, V);
  }
  double t1 = now_s();
  /* decode with the sampler feeding each token back on the device */
  double tf0 = 0, tf1 = 0;
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)decode_tokens);
  if (!ids) abort();
  int feedback = ssm_rt_set_sampler(rt, 0, 0, 1, 0) == NULL;
  if (!s && feedback) {
    s = ssm_rt_reset(rt);
    if (!s) s = ssm_rt_generate(rt, 1 % (int32_t)V, decode_tokens < 8 ? decode_tokens : 8, ids,
                                NULL, NULL); /* warm-up */
    if (!s) s = ssm_rt_reset(rt);
    tf0 = now_s();
    if (!s) s = ssm_rt_generate(rt, 1 % (int32_t)V, decode_tokens, ids, NULL, NULL);
    tf1 = now_s();
  }
  free(ids);
  /* prefill: enough runs for about as many tokens, at least 4 */
  int runs = decode_tokens / C < 4 ? 4 : decode_tokens / C;
  if (!s) s = ssm_rt_reset(rt);
  double t2 = now_s();
  for (int i = 0; i < runs && !s; i++) s = ssm_rt_run(rt, toks, C, logits);
  double t3 = now_s();
  free(logits);
  free(toks);
  if (s) return s;
  out->decode_tokens = decode_tokens;
  out->prefill_tokens = runs * C;
  out->decode_tok_s = decode_tokens / (t1 - t0);
  out->decode_feedback_tok_s = feedback ? decode_tokens / (tf1 - tf0) : 0;
  out->prefill_tok_s = runs * C / (t3 - t2);
  out->weight_bytes = ssm_rt_weight_bytes(rt);
  return NULL;
}
