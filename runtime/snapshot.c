/*
 * snapshot.c — snapshots and forks of sessions (ssmc.h): a snapshot holds
 * a session's state on the device, and a fork is a new session on the same
 * loaded model (loaded.c) that starts from the state of another.
 */
#include <string.h>

#include "runtime/internal.h"

ssmc_status ssmc_session_snapshot(ssmc_session *s, ssmc_snapshot **out) {
  *out = NULL;
  SSM_TRY(ssm_session_resident(s));
  ssm_snapshot *snap = NULL;
  SSM_TRY(ssm_backend_snapshot(s->b, &snap));
  ssmc_snapshot *c;
  ssm_status st = ssm_status_wrap(ssm_alloc(1, sizeof *c, (void **)&c), "a snapshot");
  if (st) {
    ssm_backend_snapshot_free(s->b, snap);
    return st;
  }
  *c = (ssmc_snapshot){s->model, snap, NULL};
  st = ssm_seen_copy(s, s->seen, &c->seen);
  if (st) {
    ssm_backend_snapshot_free(s->b, snap);
    free(c);
    return st;
  }
  s->model->refs++;
  *out = c;
  return NULL;
}

ssmc_status ssmc_session_snapshot_into(ssmc_session *s, ssmc_snapshot *snap) {
  if (snap->model != s->model)
    return ssm_status_new(SSM_ERR_INVALID, "snapshot: it belongs to another loaded model");
  SSM_TRY(ssm_session_resident(s));
  float *seen;
  SSM_TRY(ssm_seen_copy(s, s->seen, &seen));
  free(snap->seen);
  snap->seen = seen;
  return ssm_backend_snapshot(s->b, &snap->snap);
}

ssmc_status ssmc_session_restore(ssmc_session *s, const ssmc_snapshot *snap) {
  if (snap->model != s->model)
    return ssm_status_new(SSM_ERR_INVALID, "restore: the snapshot was taken from another loaded "
                          "model");
  SSM_TRY(ssm_session_resident(s));
  float *seen;
  SSM_TRY(ssm_seen_copy(s, snap->seen, &seen));
  SSM_TRY(ssm_backend_restore(s->b, snap->snap));
  free(s->seen);
  s->seen = seen;
  return NULL;
}

void ssmc_snapshot_free(ssmc_snapshot *snap) {
  if (!snap) return;
  ssm_backend_snapshot_free(snap->model->b, snap->snap);
  ssm_loaded_release(snap->model);
  free(snap->seen);
  free(snap);
}

int64_t ssmc_snapshot_position(const ssmc_snapshot *snap) { return snap->snap->position; }
uint64_t ssmc_snapshot_bytes(const ssmc_snapshot *snap) { return snap->snap->bytes; }

ssmc_status ssmc_session_fork(ssmc_session *s, ssmc_session **out) {
  *out = NULL;
  SSM_TRY(ssm_session_resident(s));
  ssm_snapshot *parked = NULL;
  SSM_TRY(ssm_backend_snapshot(s->b, &parked));
  ssmc_session *f;
  ssm_status st = ssm_status_wrap(ssm_alloc(1, sizeof *f, (void **)&f), "a forked session");
  if (st) {
    ssm_backend_snapshot_free(s->b, parked);
    return st;
  }
  f->model = s->model;
  f->model->refs++;
  f->parked = parked;
  f->b = s->b;
  f->tok_explicit = s->tok_explicit;
  f->eos_option = s->eos_option;
  f->genconfig = s->genconfig;
  st = s->weights ? ssm_strdup(s->weights, "a forked session", &f->weights) : NULL;
  if (!st && s->tok_path) st = ssm_strdup(s->tok_path, "a forked session", &f->tok_path);
  if (!st && s->model_dir) st = ssm_strdup(s->model_dir, "a forked session", &f->model_dir);
  if (!st) st = ssm_seen_copy(s, s->seen, &f->seen);
  if (st) {
    ssmc_session_close(f);
    return st;
  }
  *out = f;
  return NULL;
}
