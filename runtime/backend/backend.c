/*
 * backend.c — the shorthands over a backend's ops, and the checks every
 * backend makes the same way (sampler settings, room in a KV cache).
 */
#include <math.h>

#include "runtime/backend/backend.h"

void ssm_backend_close(ssm_backend *b) {
  if (b) b->ops->close(b);
}

ssm_status ssm_backend_run(ssm_backend *b, const int32_t *tokens, int count, float *logits) {
  return b->ops->run(b, tokens, count, logits);
}

ssm_status ssm_backend_reset(ssm_backend *b) { return b->ops->reset(b); }

ssm_status ssm_sampler_state(float temperature, int top_k, float top_p, float min_p, int64_t seed,
                             float out[SSM_SAMPLER_STATE_LEN]) {
  if (!(temperature >= 0) || isinf(temperature) || top_k < 0 || !(top_p > 0 && top_p <= 1) ||
      !(min_p >= 0 && min_p <= 1) || seed < 0 || seed >= (1 << 24))
    return ssm_status_new(SSM_ERR_INVALID, "sampler settings out of range: temperature %g (>= 0), "
                          "top_k %d (>= 0), top_p %g (in (0, 1]), min_p %g (in [0, 1]), seed %lld "
                          "(in [0, 2^24))",
                          temperature, top_k, top_p, min_p, (long long)seed);
  for (int i = 0; i < SSM_SAMPLER_STATE_LEN; i++) out[i] = 0;
  out[0] = temperature;
  out[1] = (float)top_k;
  out[2] = top_p;
  out[3] = (float)seed;
  out[5] = min_p;
  return NULL;
}

ssm_status ssm_sampler_penalty(float penalty, float state[SSM_SAMPLER_STATE_LEN]) {
  if (!(penalty >= 0) || isinf(penalty))
    return ssm_status_new(SSM_ERR_INVALID, "sampler settings out of range: repeat_penalty %g "
                          "(above 0 and finite; 0 or 1: off)", penalty);
  state[6] = penalty == 1 ? 0 : penalty;
  return NULL;
}

ssm_status ssm_backend_set_sampler(ssm_backend *b, float temperature, int top_k, float top_p,
                                   float min_p, int64_t seed) {
  float st[SSM_SAMPLER_STATE_LEN];
  SSM_TRY(ssm_sampler_state(temperature, top_k, top_p, min_p, seed, st));
  return b->ops->set_sampler(b, st);
}

ssm_status ssm_backend_generate(ssm_backend *b, int32_t first, int n, int want_logits,
                                int32_t *out_ids, int *out_count, ssm_step_fn on_step,
                                void *user) {
  *out_count = 0;
  if (first < 0 || first >= b->vocab)
    return ssm_status_new(SSM_ERR_INVALID, "token id %d out of range [0, %lld)", first,
                          (long long)b->vocab);
  if (n <= 0) return NULL;
  return b->ops->generate(b, first, n, want_logits, out_ids, out_count, on_step, user);
}

ssm_status ssm_backend_check(ssm_backend *b) { return b->ops->check ? b->ops->check(b) : NULL; }

ssm_status ssm_backend_snapshot(ssm_backend *b, ssm_snapshot **inout) {
  if (*inout && (*inout)->owner != b)
    return ssm_status_new(SSM_ERR_INVALID, "snapshot: it belongs to another loaded model");
  return b->ops->snapshot(b, inout);
}

ssm_status ssm_backend_restore(ssm_backend *b, const ssm_snapshot *s) {
  if (s->owner != b)
    return ssm_status_new(SSM_ERR_INVALID, "restore: the snapshot was taken from another loaded "
                          "model");
  return b->ops->restore(b, s);
}

void ssm_backend_snapshot_free(ssm_backend *b, ssm_snapshot *s) {
  if (!s) return;
  SSM_ASSERT(s->owner == b);
  b->ops->snapshot_free(b, s);
}

ssm_status ssm_backend_check_room(const ssm_backend *b, int64_t count) {
  if (!b->max_seq || b->position + count <= b->max_seq) return NULL;
  return ssm_status_new(SSM_ERR_INVALID, "position %lld is past --max-seq %lld",
                        (long long)(b->position < b->max_seq ? b->max_seq : b->position),
                        (long long)b->max_seq);
}

ssm_status ssm_sampler_nonfinite(int64_t position) {
  return ssm_status_new(SSM_ERR_INVALID, "non-finite logit at position %lld: the model or its "
                        "weights produce inf/NaN", (long long)position);
}

ssm_status ssm_slot_nonfinite(int slot) {
  return ssm_status_new(SSM_ERR_INVALID, "slot %d: non-finite logit: the model or its weights "
                        "produce inf/NaN", slot);
}
