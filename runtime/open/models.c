/*
 * models.c — ssmc_session_open for the whole library: besides bundles, a
 * model directory, an architecture YAML or IR text, compiled now (or found
 * in the compile cache) and run on Vulkan, or interpreted on the CPU. The
 * runtime-only library (ssmc-runtime) links bundles.c in its place.
 */
#include "compile/compile.h"
#include "runtime/cpu/cpu.h"
#include "runtime/internal.h"

static ssm_status open_model(ssmc_session *s, const char *model, const ssmc_options *o) {
  ssm_progress progress = {(ssm_progress_fn)o->progress, o->progress_user};
  const char *weights = o->weights ? o->weights : ssm_is_dir(model) ? model : NULL;
  if (!weights)
    return ssm_status_new(SSM_ERR_INVALID, "%s: no weights: give the checkpoint directory "
                          "(--weights DIR)", model);
  SSM_TRY(ssm_strdup(weights, "the weights' path", &s->weights));
  static const ssm_dtype dtypes[] = {[SSMC_DTYPE_F32] = SSM_F32, [SSMC_DTYPE_F16] = SSM_F16,
                                      [SSMC_DTYPE_BF16] = SSM_BF16, [SSMC_DTYPE_Q8_0] = SSM_Q8_0,
                                      [SSMC_DTYPE_Q4_0] = SSM_Q4_0};
  ssm_dtype dtype = SSM_F32;
  if (o->dtype == SSMC_DTYPE_AUTO) SSM_TRY(ssm_st_path_dtype(weights, &dtype));
  else dtype = dtypes[o->dtype];
  ssm_model *m;
  SSM_TRY(ssm_model_open(model, o->config, &m));
  ssm_status st = o->max_seq ? ssm_model_set_param(m, "max_seq", o->max_seq) : NULL;
  ssm_compile_opts co = {.prefill_tokens = o->chunk, .dtype = dtype, .no_fuse = o->no_fuse,
                         .progress = progress};
  if (!st && o->backend == SSMC_BACKEND_CPU)
    return ssm_cpu_backend_open(m, weights, ssm_compile_chunk(m, &co), dtype, &progress, &s->b);
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
  return ssm_session_open_vulkan(s, bd, weights, o);
}

ssmc_status ssmc_session_open(const char *model, const ssmc_options *options,
                              ssmc_session **out) {
  return ssm_session_open_with(model, options, open_model, out);
}
