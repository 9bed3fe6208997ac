/*
 * choose.c — which backend runs a model faster on this machine's devices
 * (ssmc_backend_choose), from the size of its checkpoint
 * (ssmc_weights_params). A GPU runs every model size faster than the CPU
 * interpreter; where the only Vulkan device is a CPU (Mesa's lavapipe), the
 * interpreter is faster up to a model size measured in docs/performance.md.
 * ssmc_backend_for makes that choice for a session's options (AUTO).
 */
#include <string.h>

#include "runtime/internal.h"
#include "runtime/weights/weights.h"

ssmc_status ssmc_weights_params(const char *weights, uint64_t *out_params) {
  *out_params = 0;
  ssm_st *st = NULL;
  SSM_TRY(ssm_st_open(weights, &st));
  for (int i = 0; i < ssm_st_count(st); i++) {
    const ssm_st_tensor *t = ssm_st_at(st, i);
    uint64_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= (uint64_t)t->shape[d];
    *out_params += n;
  }
  ssm_st_close(st);
  return NULL;
}

ssmc_backend ssmc_backend_choose(const ssmc_device *devices, int count, uint64_t params,
                                 const char **out_reason) {
  int cpu_device = 0;
  for (int i = 0; i < count; i++) {
    if (!devices[i].usable) continue;
    if (strcmp(devices[i].type, "cpu")) {
      *out_reason = "a GPU runs it";
      return SSMC_BACKEND_VULKAN;
    }
    cpu_device = 1;
  }
  if (!cpu_device) {
    *out_reason = "no Vulkan device can run it";
    return SSMC_BACKEND_CPU;
  }
  if (params < SSMC_CPU_FASTER_BELOW_PARAMS) {
    *out_reason = "no GPU, and the CPU interpreter is faster than lavapipe for a model of this size";
    return SSMC_BACKEND_CPU;
  }
  *out_reason = "no GPU, and lavapipe is faster than the CPU interpreter for a model of this size";
  return SSMC_BACKEND_VULKAN;
}

ssmc_backend ssmc_backend_for(const char *model, const ssmc_options *options,
                              const char **out_reason, uint64_t *out_params) {
  ssmc_options o;
  if (options) o = *options;
  else ssmc_options_init(&o);
  *out_params = 0;
  if (o.backend != SSMC_BACKEND_AUTO) {
    *out_reason = "the backend asked for";
    return o.backend;
  }
  int bundle = 0;
  ssmc_status_free(ssm_path_is_bundle(model, &bundle)); /* said when the session opens it */
  if (bundle) {
    *out_reason = "a bundle runs on Vulkan";
    return SSMC_BACKEND_VULKAN;
  }
  if (o.device >= 0) {
    *out_reason = "--device names a Vulkan device";
    return SSMC_BACKEND_VULKAN;
  }
  ssmc_device *devs = NULL;
  int n = 0;
  ssmc_status st = ssmc_devices(&devs, &n);
  if (st) n = 0; /* no Vulkan driver: no device */
  ssmc_status_free(st);
  /* weights that do not read are said when the session opens them */
  const char *weights = o.weights ? o.weights : model;
  st = ssmc_weights_params(weights, out_params);
  if (st) *out_params = 0;
  ssmc_status_free(st);
  ssmc_backend b = ssmc_backend_choose(devs, n, *out_params, out_reason);
  free(devs);
  return b;
}
