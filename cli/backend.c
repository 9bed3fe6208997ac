/*
 * backend.c — --backend auto (the default of run, perplexity and serve):
 * the backend ssmc_backend_choose picks for the model on this machine's
 * Vulkan devices, and why, for the summary. An explicit --backend, a
 * bundle (Vulkan only) or --device (a Vulkan device) decides it instead.
 */
#include <string.h>

#include "cli/cli.h"

void ssm_cli_backend(const char *backend, const char *model, const char *weights, int bundle,
                     int device_given, ssm_cli_backend_choice *out) {
  *out = (ssm_cli_backend_choice){.backend = SSMC_BACKEND_VULKAN, .reason = "--backend vulkan"};
  if (!strcmp(backend, "cpu")) {
    *out = (ssm_cli_backend_choice){.backend = SSMC_BACKEND_CPU, .reason = "--backend cpu"};
    return;
  }
  if (strcmp(backend, "auto")) return;
  if (bundle) {
    out->reason = "a bundle runs on Vulkan";
    return;
  }
  if (device_given) {
    out->reason = "--device names a Vulkan device";
    return;
  }
  ssmc_device *devs = NULL;
  int n = 0;
  ssmc_status st = ssmc_devices(&devs, &n);
  ssmc_status_free(st); /* no Vulkan driver: no device */
  if (st) n = 0;
  /* weights that do not read are said when the session opens them */
  st = ssmc_weights_params(weights ? weights : model, &out->params);
  ssmc_status_free(st);
  out->backend = ssmc_backend_choose(devs, n, out->params, &out->reason);
  out->automatic = 1;
  free(devs);
}
