/*
 * bundles.c — ssmc_session_open for the runtime-only library
 * (ssmc-runtime): compiled bundles, run on Vulkan. It holds no compiler, so
 * a model directory is refused with the way to compile it; the whole
 * library links models.c in its place.
 */
#include "runtime/internal.h"

ssmc_status ssmc_session_open(const char *model, const ssmc_options *options,
                              ssmc_session **out) {
  return ssm_session_open_with(model, options, NULL, out);
}
