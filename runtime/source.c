/*
 * source.c — finding a bundle's weights: the directory it was compiled
 * with, as its manifest records it, checked file by file against the
 * fingerprints recorded with it (runtime/weights: ssm_st_source), so that
 * moved or changed weights are an error that says what happened rather
 * than a shape mismatch (or, worse, a run on other weights).
 */
#include <string.h>
#include <sys/stat.h>

#include "runtime/internal.h"

static const ssm_st_source_file *find_now(const ssm_st_source_file *v, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(v[i].name, name)) return &v[i];
  return NULL;
}

/* `name` in the directory of file `beside` (malloc'd) */
static ssm_status beside(const char *file, const char *name, char **out) {
  const char *slash = strrchr(file, '/');
  ssm_sb p = {0};
  if (slash) ssm_sb_printf(&p, "%.*s/%s", (int)(slash - file), file, name);
  else ssm_sb_printf(&p, "%s", name);
  return ssm_sb_take(&p, "the weights file's path", out);
}

static ssm_status recorded_dir(const ssm_bundle *b, const char **out_dir);

ssm_status ssm_bundle_weights(const ssm_bundle *b, char **out_path, int *out_file) {
  *out_path = NULL;
  *out_file = 0;
  const ssm_manifest *m = ssm_bundle_manifest(b);
  if (m->weights_file) {
    char *path;
    SSM_TRY(beside(ssm_bundle_name(b), m->weights_file, &path));
    struct stat sb;
    if (!stat(path, &sb)) {
      *out_path = path;
      *out_file = 1;
      return NULL;
    }
    ssm_log("%s: its weights file %s is not there: reading the weights it was compiled from",
            ssm_bundle_name(b), path);
    free(path);
  }
  const char *dir;
  SSM_TRY(recorded_dir(b, &dir));
  return ssm_strdup(dir, "the weights' path", out_path);
}

ssm_status ssm_bundle_check_fingerprint(const ssm_bundle *b, const char *path, uint64_t fp) {
  const ssm_manifest *m = ssm_bundle_manifest(b);
  if (fp == m->weights_fingerprint) return NULL;
  return ssm_status_new(SSM_ERR_INVALID, "%s: its weights file %s changed since it was "
                        "compiled (fingerprint %016llx, recorded %016llx): compile it again",
                        ssm_bundle_name(b), path, (unsigned long long)fp,
                        (unsigned long long)m->weights_fingerprint);
}

ssm_status ssm_bundle_write_weights(ssm_bundle *b, const char *weights, const char *path,
                                    const ssm_progress *p) {
  const ssm_manifest *m = ssm_bundle_manifest(b);
  ssm_st_weight *w;
  SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)m->nweights + 1, sizeof *w, (void **)&w),
                          "the weights to write"));
  for (int i = 0; i < m->nweights; i++) w[i] = (ssm_st_weight){m->weights[i].name, m->weights[i].type};
  ssm_st *st = NULL;
  uint64_t fp = 0;
  ssm_status s = ssm_st_open(weights, &st);
  if (!s) s = ssm_st_write(st, w, m->nweights, path, p, &fp);
  ssm_st_close(st);
  free(w);
  const char *slash = strrchr(path, '/');
  if (!s) s = ssm_bundle_set_weights_file(b, slash ? slash + 1 : path, fp);
  return s;
}

static ssm_status recorded_dir(const ssm_bundle *b, const char **out_dir) {
  *out_dir = NULL;
  const ssm_manifest *m = ssm_bundle_manifest(b);
  const char *name = ssm_bundle_name(b), *dir = m->source_dir;
  if (!dir)
    return ssm_status_new(SSM_ERR_INVALID, "%s: no weights: the bundle records no weights "
                          "directory (it was compiled from a description without --weights); "
                          "give the checkpoint directory (--weights DIR)", name);
  struct stat sb;
  if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
    return ssm_status_new(SSM_ERR_INVALID, "%s: it was compiled with the weights in %s, which "
                          "is not a directory any more (moved or deleted?): give the weights "
                          "with --weights DIR, or compile it again", name, dir);
  ssm_st_source_file *now;
  int n;
  SSM_TRY(ssm_status_wrap(ssm_st_source(dir, &now, &n), "%s: its weights directory", name));
  ssm_sb what = {0};
  for (int i = 0; i < m->nsource_files; i++) {
    const ssm_st_source_file *f = find_now(now, n, m->source_files[i].name);
    if (!f || f->hash != m->source_files[i].hash)
      ssm_sb_printf(&what, "%s%s %s", what.n ? ", " : "", m->source_files[i].name,
                    f ? "changed" : "is gone");
  }
  for (int i = 0; i < n; i++) {
    int known = 0;
    for (int k = 0; k < m->nsource_files && !known; k++)
      known = !strcmp(m->source_files[k].name, now[i].name);
    if (!known) ssm_sb_printf(&what, "%s%s is new", what.n ? ", " : "", now[i].name);
  }
  free(now);
  ssm_status ws = ssm_sb_status(&what, "the weights' changes");
  if (ws) {
    ssm_sb_free(&what);
    return ssm_status_wrap(ws, "%s", name);
  }
  if (what.n) {
    ssm_status s = ssm_status_new(SSM_ERR_INVALID, "%s: the weights in %s changed since it was "
                                  "compiled (%s): compile it again, or give --weights DIR to "
                                  "run it on them anyway", name, dir, what.s);
    ssm_sb_free(&what);
    return s;
  }
  *out_dir = dir;
  return NULL;
}
