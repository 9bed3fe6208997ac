/*
 * models.c — ssmc_session_open for the whole library: besides bundles, a
 * model directory, an architecture YAML or IR text, compiled now (or found
 * in the compile cache) and run on Vulkan, or interpreted on the CPU. The
 * runtime-only library (ssmc-runtime) links bundles.c in its place.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "compile/compile.h"
#include "runtime/cpu/cpu.h"
#include "runtime/internal.h"

/* An XXH3-64 of which checkpoint `dir` holds: its path, and each file a
 * run reads there by its fingerprint (ssm_st_source) and its identity on
 * disk (device, inode, size, time of the last change), so that weights
 * rewritten in place are told apart. */
static ssm_status checkpoint_id(const char *dir, uint64_t *out) {
  ssm_st_source_file *f;
  int n;
  SSM_TRY(ssm_st_source(dir, &f, &n));
  char abs[PATH_MAX];
  if (!realpath(dir, abs)) snprintf(abs, sizeof abs, "%s", dir);
  XXH3_state_t *h = XXH3_createState();
  ssm_status s = h ? NULL : ssm_status_new(SSM_ERR_NOMEM, "out of host memory for a hash state");
  if (h) XXH3_64bits_reset(h);
  if (h) XXH3_64bits_update(h, abs, strlen(abs) + 1);
  for (int i = 0; !s && i < n; i++) {
    ssm_sb p = {0};
    ssm_sb_printf(&p, "%s/%s", dir, f[i].name);
    struct stat sb = {0};
    s = ssm_sb_status(&p, "a weights file's path");
    if (!s && stat(p.s, &sb)) memset(&sb, 0, sizeof sb);
    int64_t id[6] = {(int64_t)sb.st_dev, (int64_t)sb.st_ino, (int64_t)sb.st_size,
                     (int64_t)sb.st_ctim.tv_sec, (int64_t)sb.st_ctim.tv_nsec, (int64_t)f[i].hash};
    XXH3_64bits_update(h, f[i].name, strlen(f[i].name) + 1);
    XXH3_64bits_update(h, id, sizeof id);
    ssm_sb_free(&p);
  }
  if (!s) *out = XXH3_64bits_digest(h);
  if (h) XXH3_freeState(h);
  free(f);
  return s;
}

/* Quantized weights kept in the compile cache beside the compiled model
 * (CACHE/KEY.ssmb): KEY.DTYPE.ID.safetensors, ID of the checkpoint
 * (checkpoint_id), written the first time (ssm_bundle_write_weights).
 * *path is that file, or the checkpoint where it cannot be written. */
static ssm_status cached_weights(ssm_bundle *bd, const char *entry, const char *weights,
                                 const ssm_progress *progress, char **path) {
  uint64_t id;
  SSM_TRY(checkpoint_id(weights, &id));
  size_t n = strlen(entry);
  if (n > 5 && !strcmp(entry + n - 5, ".ssmb")) n -= 5;
  ssm_sb p = {0};
  ssm_sb_printf(&p, "%.*s.%s.%016llx.safetensors", (int)n, entry,
                ssm_dtype_name(ssm_bundle_manifest(bd)->dtype), (unsigned long long)id);
  SSM_TRY(ssm_sb_take(&p, "a cached weights file's name", path));
  int present = 0;
  ssm_status s = ssm_cache_entry_look(*path, &present);
  if (!s && present) return NULL;
  if (!s) s = ssm_bundle_write_weights(bd, weights, *path, progress);
  if (s && ssm_status_code(s) != SSM_ERR_CANCELLED) {
    ssm_log("compile cache: the quantized weights are not kept: %s", ssm_status_message(s));
    ssm_status_free(s);
    free(*path);
    return ssm_strdup(weights, "the weights' path", path);
  }
  return s;
}

static ssm_status open_model(ssmc_session *s, const char *model, const ssmc_options *o) {
  ssm_progress progress = {(ssm_progress_fn)o->progress, o->progress_user};
  const char *weights = s->weights;
  static const ssm_dtype dtypes[] = {[SSMC_DTYPE_F32] = SSM_F32, [SSMC_DTYPE_F16] = SSM_F16,
                                      [SSMC_DTYPE_BF16] = SSM_BF16, [SSMC_DTYPE_Q8_0] = SSM_Q8_0,
                                      [SSMC_DTYPE_Q4_0] = SSM_Q4_0};
  ssm_dtype dtype = SSM_F32;
  if (o->dtype == SSMC_DTYPE_AUTO) SSM_TRY(ssm_st_path_dtype(weights, &dtype));
  else dtype = dtypes[o->dtype];
  if (o->slots < 0 || o->slots > SSM_MAX_SLOTS)
    return ssm_status_new(SSM_ERR_INVALID, "slots %d: expected 0 to %d", o->slots, SSM_MAX_SLOTS);
  ssm_model *m;
  SSM_TRY(ssm_model_open(model, o->config, &m));
  ssm_status st = o->max_seq ? ssm_model_set_param(m, "max_seq", o->max_seq) : NULL;
  ssm_compile_opts co = {.prefill_tokens = o->chunk, .slots = o->slots, .dtype = dtype,
                         .no_fuse = o->no_fuse,
                         .progress = progress};
  if (!st && o->backend == SSMC_BACKEND_CPU) {
    SSM_TRY(ssm_cpu_backend_open(m, weights, ssm_compile_chunk(m, &co), dtype, &progress, &s->b));
    s->b->slots = o->slots; /* the batched graph is built when first run */
    return NULL;
  }
  ssm_bundle *bd = NULL;
  if (!st && o->cache_dir) {
    int hit;
    st = ssm_cache_compile(m, &co, o->cache_dir, &bd, &hit, &s->cache_file, &s->stats.compile_s);
    s->stats.cache = hit ? SSMC_CACHE_HIT : SSMC_CACHE_MISS;
    s->stats.cache_file = s->cache_file;
  } else if (!st) {
    double t0 = ssm_now();
    st = ssm_compile(m, &co, &bd);
    s->stats.compile_s = ssm_now() - t0;
  }
  ssm_model_close(m);
  if (st) return st;
  if (s->cache_file && ssm_dtype_is_quant(dtype)) {
    char *file;
    st = cached_weights(bd, s->cache_file, weights, &progress, &file);
    if (st) {
      ssm_bundle_close(bd);
      return st;
    }
    free(s->weights);
    s->weights = file;
  }
  return ssm_session_open_vulkan(s, bd, s->weights, o);
}

ssmc_status ssmc_session_open(const char *model, const ssmc_options *options,
                              ssmc_session **out) {
  return ssm_session_open_with(model, options, open_model, out);
}
