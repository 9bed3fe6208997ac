/*
 * loaded.c — a loaded model shared by sessions and snapshots
 * (internal.h: ssm_loaded): the references that keep its backend open, and
 * which session's state the backend holds. The backend has room for one
 * state; the sessions that share it take turns, each other one parked in a
 * snapshot on the device. Sessions (session.c) and snapshots and forks
 * (snapshot.c) build on it.
 */
#include "runtime/internal.h"

void ssm_loaded_release(ssm_loaded *m) {
  if (!m || --m->refs > 0) return;
  ssm_backend_close(m->b);
  free(m->slot_pos);
  free(m->slot_seen);
  free(m);
}

ssm_status ssm_session_resident(ssmc_session *s) {
  ssm_loaded *m = s->model;
  if (m->resident == s) return NULL;
  if (m->resident) SSM_TRY(ssm_backend_snapshot(m->b, &m->resident->parked));
  if (s->parked) SSM_TRY(ssm_backend_restore(m->b, s->parked));
  else SSM_TRY(ssm_backend_reset(m->b));
  m->resident = s;
  return NULL;
}
