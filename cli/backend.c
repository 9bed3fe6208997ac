/*
 * backend.c — --backend auto|cpu|vulkan (auto: the default of run,
 * perplexity and serve): the session's option, and once the session is
 * open, which backend it runs on and why, for the summary. The library
 * makes the automatic choice (ssmc_backend_for: a bundle or --device takes
 * Vulkan, a model the faster backend on this machine's devices).
 */
#include <string.h>

#include "cli/cli.h"

void ssm_cli_backend(const char *backend, ssm_cli_backend_choice *out) {
  if (!strcmp(backend, "cpu"))
    *out = (ssm_cli_backend_choice){.backend = SSMC_BACKEND_CPU, .reason = "--backend cpu"};
  else if (!strcmp(backend, "vulkan"))
    *out = (ssm_cli_backend_choice){.backend = SSMC_BACKEND_VULKAN, .reason = "--backend vulkan"};
  else
    *out = (ssm_cli_backend_choice){.backend = SSMC_BACKEND_AUTO, .automatic = 1};
}

void ssm_cli_backend_opened(const ssmc_session *s, ssm_cli_backend_choice *c) {
  const char *why;
  uint64_t params;
  c->backend = ssmc_session_backend(s, &why, &params);
  if (!c->automatic) return;
  c->reason = why;
  c->params = params;
}
