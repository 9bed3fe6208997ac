/*
 * fuzz_ir.c — the IR text parser, the verifier and the printer. Any input is
 * parsed; an input that parses and verifies must print to text that parses,
 * verifies and prints identically (the dump format is the input format).
 * A verified graph then goes through the pass pipeline, as `ssmc ir FILE
 * --after all` does, and its dump must round-trip too.
 */
#include "fuzz.h"
#include "ir/ir.h"
#include "passes/passes.h"

/* The text of g; a failure is a finding. */
static char *print(ssm_graph *g) {
  char *text;
  ssm_status s = ssm_graph_print(g, &text);
  if (s) fuzz_fail("printing: %s", ssm_status_message(s));
  return text;
}

/* print(g) parses, verifies and prints as itself; returns the text. */
static char *roundtrip(ssm_graph *g, const char *what) {
  char *p1 = print(g);
  ssm_graph *g2 = NULL;
  ssm_status s = ssm_graph_parse(p1, "printed.ssmir", &g2);
  if (!s) s = ssm_graph_verify(g2);
  if (s) fuzz_fail("%s: printed IR does not read back: %s\n%s", what, ssm_status_message(s), p1);
  char *p2 = print(g2);
  if (strcmp(p1, p2)) fuzz_fail("%s: print(parse(print(g))) differs:\n%s\n---\n%s", what, p1, p2);
  free(p2);
  ssm_graph_destroy(g2);
  return p1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  ssm_graph *g = NULL;
  ssm_status s = ssm_graph_parse(text, "fuzz.ssmir", &g);
  free(text);
  if (s) {
    fuzz_check_error(s);
    return 0;
  }
  s = ssm_graph_verify(g);
  if (s) {
    fuzz_check_error(s);
    ssm_graph_destroy(g);
    return 0;
  }
  free(roundtrip(g, "parsed"));
  s = ssm_passes_run(g, NULL, NULL, NULL, NULL);
  if (s) fuzz_check_error(s);
  else free(roundtrip(g, "after the passes"));
  ssm_graph_destroy(g);
  return 0;
}
