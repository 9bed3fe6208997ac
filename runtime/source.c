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

ssm_status ssm_bundle_weights(const ssm_bundle *b, const char **out_dir) {
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
