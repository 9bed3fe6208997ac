/*
 * bench.c — ssmc_session_bench, for `ssmc bench`: decode and prefill
 * throughput. Timing is wall clock around whole runs (each waits for the
 * device), so it includes every submit and copy that `ssmc run` pays.
 * Decode is timed twice: logits read back and the argmax taken on the host
 * (as `ssmc run --greedy`), and with the sampler feeding each token back on
 * the device (as `ssmc run`). Prefill is timed as a prompt is fed: no
 * logits wanted, so a backend may skip the lm_head.
 */
#include "runtime/internal.h"

#define now_s ssm_now

static ssm_status bench(ssm_backend *b, int n, float *logits, int32_t *toks, int32_t *ids,
                        ssmc_bench_result *r) {
  int64_t V = b->vocab;
  int C = b->chunk;
  int32_t tok = 1 % (int32_t)V;
  int got;
  /* warm-up */
  SSM_TRY(ssm_backend_reset(b));
  for (int i = 0; i < 8; i++) SSM_TRY(ssm_backend_run(b, &tok, 1, logits));
  SSM_TRY(ssm_backend_run(b, toks, C, logits));
  /* decode, the argmax on the host */
  SSM_TRY(ssm_backend_reset(b));
  double t0 = now_s();
  for (int i = 0; i < n; i++) {
    SSM_TRY(ssm_backend_run(b, &tok, 1, logits));
    int64_t best = 0;
    for (int64_t j = 1; j < V; j++)
      if (logits[j] > logits[best]) best = j;
    tok = (int32_t)best;
  }
  double t1 = now_s();
  /* decode, the token fed back on the device */
  SSM_TRY(ssm_backend_set_sampler(b, 0, 0, 1, 0, 0));
  SSM_TRY(ssm_backend_reset(b));
  SSM_TRY(ssm_backend_generate(b, 1 % (int32_t)V, n < 8 ? n : 8, 0, ids, &got, NULL, NULL));
  SSM_TRY(ssm_backend_reset(b));
  double t2 = now_s();
  SSM_TRY(ssm_backend_generate(b, 1 % (int32_t)V, n, 0, ids, &got, NULL, NULL));
  double t3 = now_s();
  /* prefill: enough runs for about as many tokens, at least 4 */
  int runs = n / C < 4 ? 4 : n / C;
  SSM_TRY(ssm_backend_reset(b));
  double t4 = now_s();
  for (int i = 0; i < runs; i++) SSM_TRY(ssm_backend_run(b, toks, C, NULL));
  double t5 = now_s();
  *r = (ssmc_bench_result){.decode_tokens_per_s = n / (t1 - t0),
                           .decode_feedback_tokens_per_s = n / (t3 - t2),
                           .prefill_tokens_per_s = runs * C / (t5 - t4),
                           .decode_tokens = n,
                           .prefill_tokens = runs * C,
                           .weight_bytes = b->weight_bytes};
  return ssm_backend_reset(b);
}

ssmc_status ssmc_session_bench(ssmc_session *s, int decode_tokens, ssmc_bench_result *out) {
  *out = (ssmc_bench_result){0};
  SSM_TRY(ssm_session_resident(s));
  ssm_backend *b = s->b;
  int n = decode_tokens < 1 ? 1 : decode_tokens;
  float *logits = NULL;
  int32_t *toks = NULL, *ids = NULL;
  ssm_status st = ssm_alloc((size_t)b->vocab * (size_t)b->chunk, sizeof(float), (void **)&logits);
  if (!st) st = ssm_alloc((size_t)b->chunk, sizeof(int32_t), (void **)&toks);
  if (!st) st = ssm_alloc((size_t)n, sizeof(int32_t), (void **)&ids);
  for (int i = 0; !st && i < b->chunk; i++) toks[i] = (int32_t)((i * 7919) % b->vocab);
  if (!st) st = bench(b, n, logits, toks, ids, out);
  out->dtype = ssmc_session_dtype(s);
  if (!st) st = ssm_backend_check(b);
  free(logits);
  free(toks);
  free(ids);
  return st;
}

ssmc_status ssmc_session_bench_batch(ssmc_session *s, int steps, double *out_tokens_per_s) {
  *out_tokens_per_s = 0;
  SSM_TRY(ssm_session_resident(s));
  ssm_backend *b = s->b;
  if (!b->slots || !b->ops->batch_generate)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "the model has no batched decode program: compile "
                          "it with --slots B");
  int B = b->slots, n = steps < 1 ? 1 : steps, warm = n < 8 ? n : 8;
  /* a model with attention: the warm-up's steps and then the timed ones,
   * each sequence from position 0, all within its KV cache */
  if (b->max_seq && warm + n > b->max_seq)
    return ssm_status_new(SSM_ERR_INVALID, "%d steps (and %d to warm up) are past --max-seq %lld",
                          n, warm, (long long)b->max_seq);
  int32_t *first = NULL, *ids = NULL;
  int64_t *pos = NULL;
  float greedy[SSM_SAMPLER_STATE_LEN];
  ssm_status st = ssm_alloc((size_t)B, sizeof *first, (void **)&first);
  if (!st) st = ssm_alloc((size_t)B * (size_t)n, sizeof *ids, (void **)&ids);
  if (!st) st = ssm_alloc((size_t)B, sizeof *pos, (void **)&pos);
  if (!st) st = ssm_sampler_state(0, 0, 1, 0, 0, greedy);
  if (!st) st = ssm_backend_reset(b);
  for (int i = 0; !st && i < B; i++) {
    first[i] = (int32_t)((1 + i * 7919) % b->vocab); /* each sequence its own */
    st = b->ops->slot_copy(b, i, 1);
    if (!st) st = b->ops->slot_sampler(b, i, greedy);
  }
  int ran;
  if (!st) st = b->ops->batch_generate(b, first, pos, warm, ids, &ran);
  for (int i = 0; !st && i < B; i++) pos[i] = warm;
  double t0 = ssm_now();
  if (!st) st = b->ops->batch_generate(b, first, pos, n, ids, &ran);
  double t1 = ssm_now();
  if (!st) *out_tokens_per_s = (double)B * n / (t1 - t0);
  if (!st) st = ssm_backend_check(b);
  if (!st) st = ssm_backend_reset(b);
  free(first);
  free(ids);
  free(pos);
  return st;
}

ssmc_status ssmc_session_profile(ssmc_session *s, int prefill, int runs,
                                 ssmc_profile_step **out_steps, int *out_count) {
  *out_steps = NULL;
  *out_count = 0;
  SSM_TRY(ssm_session_resident(s));
  ssm_backend *b = s->b;
  if (!b->ops->profile)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "the %s backend cannot profile its work",
                          b->ops->name);
  if (runs < 1) runs = 1;
  ssm_step_time *t;
  int n;
  SSM_TRY(b->ops->profile(b, prefill, runs, &t, &n));
  ssmc_profile_step *p;
  ssm_status st = ssm_alloc((size_t)n + 1, sizeof *p, (void **)&p);
  if (st) {
    free(t);
    return ssm_status_wrap(st, "a profile");
  }
  for (int i = 0; i < n; i++)
    p[i] = (ssmc_profile_step){t[i].kernel, t[i].family, t[i].op, t[i].us, t[i].bytes};
  free(t);
  *out_steps = p;
  *out_count = n;
  return ssm_backend_check(b);
}
