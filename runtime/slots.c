/*
 * slots.c — sessions that step together: the batched decode program's
 * slots (ssmc.h, "many sequences in one step"). A session joins a slot by a
 * device-side copy of its state into the slot's rows, the slots step
 * together, and a session takes a slot's state back the same way. The
 * loaded model keeps each slot's position (what its sequence has covered;
 * -1 while no sequence holds the slot), which the batched program reads in
 * a model with attention, and each slot's seen-token set (the repetition
 * penalty's), which a session that takes the slot back goes on with.
 */
#include <string.h>

#include "runtime/internal.h"

int ssmc_session_slots(const ssmc_session *s) { return s->b->slots; }

/* Slot `slot` exists; the positions are made. */
static ssm_status slot_check(ssmc_session *s, int slot) {
  ssm_backend *b = s->b;
  if (!b->slots || !b->ops->batch_generate)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "the model has no slots: compile it with --slots B "
                          "(ssmc_options.slots)");
  if (slot < 0 || slot >= b->slots)
    return ssm_status_new(SSM_ERR_INVALID, "slot %d is not one of the model's %d slots", slot,
                          b->slots);
  if (!s->model->slot_seen)
    SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)b->slots * (size_t)SSM_SEEN_WORDS(b->vocab),
                                      sizeof(float), (void **)&s->model->slot_seen),
                            "the slots' seen-token sets"));
  if (!s->model->slot_pos) {
    SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)b->slots, sizeof *s->model->slot_pos,
                                      (void **)&s->model->slot_pos), "the slots"));
    for (int i = 0; i < b->slots; i++) s->model->slot_pos[i] = -1;
  }
  return NULL;
}

/* Slot `slot`'s seen-token set. */
static float *slot_seen(ssmc_session *s, int slot) {
  return s->model->slot_seen + (size_t)slot * (size_t)SSM_SEEN_WORDS(s->b->vocab);
}

ssmc_status ssmc_session_join_slot(ssmc_session *s, int slot, const ssmc_generate_options *g) {
  SSM_TRY(slot_check(s, slot));
  float st[SSM_SAMPLER_STATE_LEN];
  SSM_TRY(ssm_sampler_state(g->temperature, g->top_k, g->top_p, g->min_p, g->seed, st));
  SSM_TRY(ssm_sampler_penalty(g->repeat_penalty, st));
  if (st[6] > 0)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "slot %d: the batched program's sampler has no "
                          "repetition penalty (decode the request in its session)", slot);
  if (g->step >= 1u << 24)
    return ssm_status_new(SSM_ERR_INVALID, "sampler step %u is past 2^24", g->step);
  st[4] = (float)g->step;
  SSM_TRY(ssm_session_resident(s));
  SSM_TRY(s->b->ops->slot_copy(s->b, slot, 1));
  SSM_TRY(s->b->ops->slot_sampler(s->b, slot, st));
  size_t words = (size_t)SSM_SEEN_WORDS(s->b->vocab);
  if (s->seen) memcpy(slot_seen(s, slot), s->seen, words * sizeof(float));
  else memset(slot_seen(s, slot), 0, words * sizeof(float));
  s->model->slot_pos[slot] = s->b->position;
  return ssm_backend_check(s->b);
}

ssmc_status ssmc_session_take_slot(ssmc_session *s, int slot) {
  SSM_TRY(slot_check(s, slot));
  SSM_TRY(ssm_session_resident(s));
  if (s->model->slot_pos[slot] < 0)
    return ssm_status_new(SSM_ERR_INVALID, "slot %d holds no sequence (no session joined it, or "
                          "it was left since)", slot);
  size_t words = (size_t)SSM_SEEN_WORDS(s->b->vocab);
  if (!s->seen)
    SSM_TRY(ssm_status_wrap(ssm_alloc(words, sizeof(float), (void **)&s->seen), "the seen-token set"));
  SSM_TRY(s->b->ops->slot_copy(s->b, slot, 0));
  memcpy(s->seen, slot_seen(s, slot), words * sizeof(float));
  s->b->position = s->model->slot_pos[slot];
  return ssm_backend_check(s->b);
}

ssmc_status ssmc_session_leave_slot(ssmc_session *s, int slot) {
  SSM_TRY(slot_check(s, slot));
  s->model->slot_pos[slot] = -1;
  return NULL;
}

ssmc_status ssmc_session_step_slots(ssmc_session *s, const int32_t *first, int steps,
                                    int32_t *out_ids) {
  SSM_TRY(slot_check(s, 0));
  if (steps < 0) return ssm_status_new(SSM_ERR_INVALID, "steps %d is negative", steps);
  ssm_backend *b = s->b;
  int64_t *pos = s->model->slot_pos;
  for (int i = 0; i < b->slots; i++)
    if (b->max_seq && pos[i] >= 0 && pos[i] + steps > b->max_seq)
      return ssm_status_new(SSM_ERR_INVALID, "slot %d: position %lld is past --max-seq %lld", i,
                            (long long)(pos[i] + steps), (long long)b->max_seq);
  if (!steps) return NULL;
  int ran = 0;
  ssm_status st = b->ops->batch_generate(b, first, pos, steps, out_ids, &ran);
  /* the steps that ran count, also when one failed: the other slots go on;
   * each slot's ids, fed and drawn, are seen */
  for (int i = 0; i < b->slots; i++) {
    if (pos[i] < 0) continue;
    pos[i] += ran;
    float *seen = slot_seen(s, i);
    if (ran && first[i] >= 0 && first[i] < b->vocab) ssm_seen_add(seen, first[i]);
    for (int j = 0; j < ran; j++) {
      int32_t id = out_ids[(size_t)j * (size_t)b->slots + (size_t)i];
      if (id >= 0 && id < b->vocab) ssm_seen_add(seen, id);
    }
  }
  for (int j = 0; st && j < ran; j++)
    for (int i = 0; i < b->slots; i++)
      if (out_ids[(size_t)j * (size_t)b->slots + (size_t)i] == -1) {
        ssm_status_free(st);
        return ssm_status_new(SSM_ERR_INVALID, "slot %d: non-finite logit at position %lld: the "
                              "model or its weights produce inf/NaN", i,
                              (long long)(pos[i] < 0 ? j : pos[i] - ran + j));
      }
  SSM_TRY(st);
  return ssm_backend_check(b);
}
