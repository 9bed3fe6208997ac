/*
 * fuzz_config.c — binding a config.json: the input is the config, read with
 * each embedded architecture description (Mamba-1, Falcon-Mamba, Mamba-2,
 * Jamba). A config that binds must build its decode graph, and that graph
 * must verify; one that does not must say why.
 */
#include "frontend/frontend.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (int k = 0; ssm_models_embedded_name(k); k++) {
    const char *file = ssm_models_embedded_name(k);
    const char *yaml = ssm_models_embedded(file);
    ssm_model *m = NULL;
    ssm_status s = ssm_model_open_text(file, yaml, strlen(yaml), "config.json",
                                       (const char *)data, size, &m);
    if (s) {
      fuzz_check_error(s);
      continue;
    }
    int64_t vocab = 0;
    if (!ssm_model_param(m, "vocab", &vocab) || vocab < 1)
      fuzz_fail("%s: a bound model has no vocabulary", file);
    ssm_graph *g = NULL;
    s = ssm_model_build(m, 1, &g);
    if (!s) s = ssm_graph_verify(g);
    if (s) fuzz_fail("%s: a model that loaded does not build: %s", file, ssm_status_message(s));
    ssm_graph_destroy(g);
    ssm_model_close(m);
  }
  return 0;
}
