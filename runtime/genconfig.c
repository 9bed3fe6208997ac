/*
 * genconfig.c — a model directory's generation_config.json (transformers'
 * GenerationConfig) as the session's defaults: its end-of-text ids, which
 * end generation, and the sampler settings that ssmc_session_generate_defaults
 * hands out. Fields this runtime has no use for are ignored; a field it uses
 * with a value it cannot take is an error naming the file and the field.
 */
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "runtime/internal.h"

/* transformers' GenerationConfig defaults, which sampling starts from */
#define HF_TOP_K 50

static ssm_status bad(const char *path, const char *field, const char *what) {
  return ssm_status_new(SSM_ERR_INVALID, "%s: %s: expected %s", path, field, what);
}

/* A number field in [lo, hi] (`open`: lo excluded); absent or null: *out unchanged. */
static ssm_status number(const char *path, const cJSON *j, const char *field, double lo, double hi,
                         int open, int integer, double *out, int *out_set) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, field);
  if (!f || cJSON_IsNull(f)) return NULL;
  double v = f->valuedouble;
  if (!cJSON_IsNumber(f) || !isfinite(v) || v < lo || v > hi || (open && v == lo) ||
      (integer && v != floor(v))) {
    char what[96];
    int k = snprintf(what, sizeof what, "%s %s %g", integer ? "an integer" : "a number",
                     open ? "above" : "from", lo);
    if (hi < 1e30) snprintf(what + k, sizeof what - (size_t)k, " to %g", hi);
    return bad(path, field, what);
  }
  *out = v;
  *out_set = 1;
  return NULL;
}

static ssm_status eos_ids(ssm_genconfig *c, const char *path, const cJSON *j, int64_t vocab) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id");
  if (!f || cJSON_IsNull(f)) return NULL;
  int n = cJSON_IsArray(f) ? cJSON_GetArraySize(f) : 1;
  if (n < 1 || n > SSM_GENCONFIG_MAX_EOS || (!cJSON_IsArray(f) && !cJSON_IsNumber(f)))
    return bad(path, "eos_token_id", "a token id or a list of 1 to 16 token ids");
  for (int i = 0; i < n; i++) {
    const cJSON *e = cJSON_IsArray(f) ? cJSON_GetArrayItem(f, i) : f;
    double v = e->valuedouble;
    if (!cJSON_IsNumber(e) || v != floor(v) || v < 0 || v >= (double)vocab) {
      char what[96];
      snprintf(what, sizeof what, "token ids from 0 to %lld (entry %d is not one)",
               (long long)vocab - 1, i);
      return bad(path, "eos_token_id", what);
    }
    c->eos[c->neos++] = (int64_t)v;
  }
  return NULL;
}

ssm_status ssm_genconfig_read(const char *dir, int64_t vocab, ssm_genconfig *out) {
  memset(out, 0, sizeof *out);
  char path[4200];
  snprintf(path, sizeof path, "%s/generation_config.json", dir);
  struct stat sb;
  if (stat(path, &sb)) return NULL; /* none: no defaults */
  char *text;
  size_t n;
  SSM_TRY(ssm_file_read(path, 1 << 20, &text, &n));
  cJSON *j = cJSON_ParseWithLength(text, n);
  free(text);
  if (!cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return ssm_status_new(SSM_ERR_INVALID, "%s: not a JSON object", path);
  }
  snprintf(out->path, sizeof out->path, "%s", path);
  ssm_status s = eos_ids(out, path, j, vocab);
  const cJSON *ds = cJSON_GetObjectItemCaseSensitive(j, "do_sample");
  if (!s && ds && !cJSON_IsNull(ds)) {
    if (!cJSON_IsBool(ds)) s = bad(path, "do_sample", "true or false");
    out->has[SSM_GC_DO_SAMPLE] = 1;
    out->do_sample = cJSON_IsTrue(ds);
  }
  static const struct {
    const char *name;
    double lo, hi;
    int open, integer;
  } f[SSM_GC_COUNT] = {[SSM_GC_TEMPERATURE] = {"temperature", 0, 1e38, 0, 0},
                       [SSM_GC_TOP_K] = {"top_k", 0, 2147483647, 0, 1},
                       [SSM_GC_TOP_P] = {"top_p", 0, 1, 1, 0},
                       [SSM_GC_MIN_P] = {"min_p", 0, 1, 0, 0},
                       [SSM_GC_REPEAT_PENALTY] = {"repetition_penalty", 0, 3.4e38, 1, 0}};
  for (int i = 0; i < SSM_GC_COUNT && !s; i++)
    if (f[i].name)
      s = number(path, j, f[i].name, f[i].lo, f[i].hi, f[i].open, f[i].integer, &out->value[i],
                 &out->has[i]);
  cJSON_Delete(j);
  return s;
}

const char *ssm_genconfig_field(int i) {
  static const char *const names[SSM_GC_COUNT] = {
      [SSM_GC_DO_SAMPLE] = "do_sample", [SSM_GC_TEMPERATURE] = "temperature",
      [SSM_GC_TOP_K] = "top_k",         [SSM_GC_TOP_P] = "top_p",
      [SSM_GC_MIN_P] = "min_p",         [SSM_GC_REPEAT_PENALTY] = "repetition_penalty"};
  return names[i];
}

ssmc_status ssmc_session_generate_defaults(const ssmc_session *s, ssmc_generate_options *g,
                                           const char **out_from) {
  ssmc_generate_options_init(g);
  const ssm_genconfig *c = &s->genconfig;
  if (c->has[SSM_GC_DO_SAMPLE] && c->do_sample) { /* transformers' sampling defaults, then the file's */
    g->temperature = c->has[SSM_GC_TEMPERATURE] ? (float)c->value[SSM_GC_TEMPERATURE] : 1;
    g->top_k = c->has[SSM_GC_TOP_K] ? (int)c->value[SSM_GC_TOP_K] : HF_TOP_K;
    if (c->has[SSM_GC_TOP_P]) g->top_p = (float)c->value[SSM_GC_TOP_P];
    if (c->has[SSM_GC_MIN_P]) g->min_p = (float)c->value[SSM_GC_MIN_P];
  }
  if (c->has[SSM_GC_REPEAT_PENALTY]) g->repeat_penalty = (float)c->value[SSM_GC_REPEAT_PENALTY];
  if (out_from) *out_from = c->from;
  return NULL;
}

int ssmc_session_is_eos(const ssmc_session *s, int32_t id) {
  if (s->eos_option < 0 && s->genconfig.neos) {
    for (int i = 0; i < s->genconfig.neos; i++)
      if (s->genconfig.eos[i] == id) return 1;
    return 0;
  }
  int64_t eos = ssmc_session_eos(s);
  return eos >= 0 && id == eos;
}

void ssm_genconfig_describe(ssm_genconfig *c) {
  size_t k = 0;
  c->from[0] = 0;
  int sampling = c->has[SSM_GC_DO_SAMPLE] && c->do_sample;
  if (c->neos) k += (size_t)snprintf(c->from + k, sizeof c->from - k, "eos_token_id");
  for (int i = 0; i < SSM_GC_COUNT && k < sizeof c->from; i++) {
    int used = c->has[i] && (i == SSM_GC_DO_SAMPLE || i == SSM_GC_REPEAT_PENALTY || sampling);
    if (used) k += (size_t)snprintf(c->from + k, sizeof c->from - k, "%s%s", k ? ", " : "",
                                    ssm_genconfig_field(i));
  }
}
