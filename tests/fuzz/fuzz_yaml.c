/*
 * fuzz_yaml.c — the YAML frontend: the input is a model description bound to
 * a fixed, valid config.json (Falcon-Mamba's keys, a superset of Mamba's).
 * A description that loads is built for a 3-token prefill as well, run
 * through the pass pipeline, and its IR must print and read back.
 */
#include "fuzz.h"
#include "frontend/frontend.h"
#include "ir/ir.h"
#include "passes/passes.h"

static const char config[] =
    "{\"model_type\": \"falcon_mamba\", \"hidden_size\": 64, \"intermediate_size\": 128,\n"
    " \"state_size\": 16, \"time_step_rank\": 4, \"conv_kernel\": 4, \"expand\": 2,\n"
    " \"num_hidden_layers\": 2, \"vocab_size\": 1000, \"layer_norm_epsilon\": 1e-5,\n"
    " \"mixer_rms_eps\": 1e-6, \"tie_word_embeddings\": true, \"use_bias\": false,\n"
    " \"use_conv_bias\": true, \"residual_in_fp32\": true, \"time_step_scale\": 1.0}\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ssm_model *m = NULL;
  ssm_status s = ssm_model_open_text("fuzz.yaml", (const char *)data, size, "config.json", config,
                                     sizeof config - 1, &m);
  if (s) {
    fuzz_check_error(s);
    return 0;
  }
  int64_t v;
  ssm_model_param(m, "vocab", &v);
  if (!ssm_model_arch(m)) fuzz_fail("a loaded model has no architecture name");
  ssm_graph *g = NULL;
  s = ssm_model_build(m, 3, &g);
  ssm_model_close(m);
  if (s) {
    fuzz_check_error(s);
    return 0;
  }
  char *text;
  s = ssm_graph_print(g, &text);
  if (s) fuzz_fail("printing: %s", ssm_status_message(s));
  ssm_graph *g2 = NULL;
  s = ssm_graph_parse(text, "printed.ssmir", &g2);
  if (!s) s = ssm_graph_verify(g2);
  if (s) fuzz_fail("the built graph does not read back: %s\n%s", ssm_status_message(s), text);
  free(text);
  ssm_graph_destroy(g2);
  s = ssm_passes_run(g, NULL, NULL, NULL, NULL);
  if (s) fuzz_check_error(s);
  ssm_graph_destroy(g);
  return 0;
}
