/*
 * source.c — a cheap fingerprint of a weights directory, for bundles that
 * remember where their weights are (bundle.h: ssm_manifest.source): each
 * file a run reads there gets its own hash, so a check can say which one
 * changed. config.json and model.safetensors.index.json are hashed whole;
 * a safetensors file by its tensor table (every tensor's name, dtype,
 * shape, size and offset), which ssm_st_open reads anyway, not by its data:
 * the runtime hashes every weight byte as it loads them (ssm_st_fingerprint).
 * And the check that given weights are of the model a bundle was compiled
 * for, by the config.json keys it recorded: a path of its own does not
 * count, so the same checkpoint moved, copied or fine-tuned still runs.
 */
#include <cjson/cJSON.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "runtime/weights/weights.h"

#define MAX_JSON ((size_t)64 << 20)

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* Adds `name` with the XXH3 of the file `dir`/`name`, when it exists. */
static ssm_status add_whole_file(const char *dir, const char *name, ssm_st_source_file **v,
                                 int *n) {
  ssm_sb path = {0};
  ssm_sb_printf(&path, "%s/%s", dir, name);
  struct stat sb;
  ssm_status s = ssm_sb_status(&path, dir);
  if (!s && !stat(path.s, &sb)) {
    char *data;
    size_t size;
    s = ssm_file_read(path.s, MAX_JSON, &data, &size);
    if (!s) s = ssm_realloc((void **)v, (size_t)*n + 1, sizeof **v, "the weights' source files");
    if (!s) {
      ssm_st_source_file *f = &(*v)[(*n)++];
      snprintf(f->name, sizeof f->name, "%s", name);
      f->hash = XXH3_64bits(data, size);
      free(data);
    }
  }
  ssm_sb_free(&path);
  return s;
}

ssm_status ssm_st_source(const char *dir, ssm_st_source_file **out_files, int *out_count) {
  *out_files = NULL;
  *out_count = 0;
  struct stat sb;
  if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
    return ssm_status_new(SSM_ERR_INVALID, "%s: not a directory", dir);
  ssm_st *st;
  SSM_TRY(ssm_st_open(dir, &st));
  ssm_st_source_file *v = NULL;
  int n = 0;
  ssm_status s = add_whole_file(dir, "config.json", &v, &n);
  if (!s) s = add_whole_file(dir, "model.safetensors.index.json", &v, &n);
  int nfiles = 0;
  for (int i = 0; i < ssm_st_count(st); i++)
    if (ssm_st_at(st, i)->file_index + 1 > nfiles) nfiles = ssm_st_at(st, i)->file_index + 1;
  XXH3_state_t **h = NULL;
  const char **names = NULL;
  if (!s) s = ssm_alloc((size_t)nfiles + 1, sizeof *h, (void **)&h);
  if (!s) s = ssm_alloc((size_t)nfiles + 1, sizeof *names, (void **)&names);
  s = ssm_status_wrap(s, "%s: the hashes of %d files", dir, nfiles);
  for (int i = 0; !s && i < ssm_st_count(st); i++) { /* in name order */
    const ssm_st_tensor *t = ssm_st_at(st, i);
    XXH3_state_t **hf = &h[t->file_index];
    if (!*hf) {
      if (!(*hf = XXH3_createState())) {
        s = ssm_status_new(SSM_ERR_NOMEM, "%s: out of host memory for a hash state", dir);
        break;
      }
      XXH3_64bits_reset(*hf);
      names[t->file_index] = base_name(t->file);
    }
    int32_t meta[2] = {(int32_t)t->dtype, t->rank};
    uint64_t where[2] = {(uint64_t)t->nbytes, t->offset};
    XXH3_64bits_update(*hf, t->name, strlen(t->name) + 1);
    XXH3_64bits_update(*hf, meta, sizeof meta);
    XXH3_64bits_update(*hf, t->shape, sizeof t->shape[0] * (size_t)t->rank);
    XXH3_64bits_update(*hf, where, sizeof where);
  }
  for (int f = 0; h && f < nfiles; f++) {
    if (!s && h[f]) s = ssm_realloc((void **)&v, (size_t)n + 1, sizeof *v, "the weights' source files");
    if (!s && h[f]) {
      snprintf(v[n].name, sizeof v[n].name, "%s", names[f]);
      v[n++].hash = XXH3_64bits_digest(h[f]);
    }
    XXH3_freeState(h[f]);
  }
  free(names);
  free(h);
  ssm_st_close(st);
  if (s) {
    free(v);
    return s;
  }
  *out_files = v;
  *out_count = n;
  return NULL;
}

/* A config value as messages show it: its JSON, cut at 40 bytes; "absent". */
static void show_value(ssm_sb *b, const cJSON *v) {
  if (!v || cJSON_IsNull(v)) {
    ssm_sb_printf(b, "absent");
    return;
  }
  char *text = cJSON_PrintUnformatted(v);
  if (!text) ssm_sb_printf(b, "?");
  else if (strlen(text) > 40) ssm_sb_printf(b, "%.37s...", text);
  else ssm_sb_printf(b, "%s", text);
  cJSON_free(text);
}

ssm_status ssm_st_check_config(const char *weights, const char *config, const char *name) {
  if (!config) return NULL;
  struct stat sb;
  ssm_sb path = {0};
  const char *slash = strrchr(weights, '/');
  if (!stat(weights, &sb) && S_ISDIR(sb.st_mode)) ssm_sb_printf(&path, "%s/config.json", weights);
  else if (slash) ssm_sb_printf(&path, "%.*s/config.json", (int)(slash - weights), weights);
  else ssm_sb_printf(&path, "config.json");
  ssm_status s = ssm_sb_status(&path, "config.json's path");
  if (s || stat(path.s, &sb)) {
    ssm_sb_free(&path);
    return s;
  }
  char *text = NULL;
  size_t len;
  cJSON *now = NULL, *was = NULL;
  s = ssm_file_read(path.s, MAX_JSON, &text, &len);
  if (!s) s = ssm_json_parse_config(path.s, text, len, &now);
  free(text);
  if (!s && !(was = cJSON_Parse(config)))
    s = ssm_status_new(SSM_ERR_NOMEM, "%s: out of host memory for its recorded config", name);
  ssm_sb what = {0};
  int differ = 0;
  const cJSON *k, *recorded = s ? NULL : was;
  cJSON_ArrayForEach(k, recorded) {
    const cJSON *v = ssm_json_path(now, k->string, strlen(k->string));
    int absent = !v || cJSON_IsNull(v), was_absent = cJSON_IsNull(k);
    if (absent && was_absent) continue;
    if (!absent && !was_absent && ssm_json_config_equal(k, v)) continue;
    if (++differ > 3) continue;
    ssm_sb_printf(&what, "%s%s is ", what.n ? "; " : "", k->string);
    show_value(&what, v);
    ssm_sb_printf(&what, ", not ");
    show_value(&what, k);
  }
  if (differ > 3) ssm_sb_printf(&what, "; and %d more", differ - 3);
  cJSON_Delete(was);
  cJSON_Delete(now);
  if (!s) s = ssm_sb_status(&what, "the config's differences");
  if (!s && differ)
    s = ssm_status_new(SSM_ERR_INVALID, "%s: the weights %s are not of the model it was "
                       "compiled for: %s differs from the config it was compiled with (%s); "
                       "compile a bundle for these weights (ssmc compile DIR -o OUT.ssmb)",
                       name, weights, path.s, what.s);
  ssm_sb_free(&what);
  ssm_sb_free(&path);
  return s;
}
