/*
 * together.c — continue several prompts at once, one device step for all
 * of them, with the ssmc library.
 *
 *   cc examples/together.c $(pkg-config --cflags --libs ssmc) -o together
 *   ./together models/pymamba 40 "def fibonacci(n):" "class Stack:" "import os"
 *
 * Opens MODEL_DIR compiled with a slot for each prompt (ssmc_options.slots),
 * feeds each prompt to a session of its own (forks of one loaded model),
 * puts each session in its slot, steps all the slots together, and prints
 * each prompt with its greedy continuation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ssmc.h>

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL_DIR TOKENS PROMPT...\n", argv[0]);
    return 2;
  }
  int steps = atoi(argv[2]), n = argc - 3;
  ssmc_options o;
  ssmc_options_init(&o);
  o.slots = n;
  ssmc_session *model = NULL, **seq = calloc((size_t)n, sizeof *seq);
  int32_t *first = calloc((size_t)n, sizeof *first);
  int32_t *ids = calloc((size_t)(n * (steps > 0 ? steps : 1)), sizeof *ids);
  const ssmc_tokenizer *tok;
  ssmc_generate_options g;
  ssmc_generate_options_init(&g); /* greedy */
  ssmc_status s = ssmc_session_open(argv[1], &o, &model);
  if (!s) s = ssmc_session_tokenizer(model, &tok);
  int empty = 0;
  for (int i = 0; !s && !empty && i < n; i++) {
    int32_t *p = NULL;
    size_t np = 0;
    s = ssmc_tokenizer_encode(tok, argv[3 + i], strlen(argv[3 + i]), &p, &np);
    empty = !s && np == 0;
    if (!s && !empty) s = ssmc_session_fork(model, &seq[i]);
    /* all but the last token into the state; the last is the slot's first input */
    if (!s && !empty && np > 1) s = ssmc_session_feed(seq[i], p, np - 1, NULL, NULL);
    if (!s && !empty) first[i] = p[np - 1];
    if (!s && !empty) s = ssmc_session_join_slot(seq[i], i, &g);
    free(p);
  }
  if (empty) {
    fprintf(stderr, "together: a prompt is empty\n");
    return 2;
  }
  if (!s) s = ssmc_session_step_slots(model, first, steps, ids);
  for (int i = 0; !s && i < n; i++) {
    ssmc_decoder *d = NULL;
    const char *text;
    size_t len;
    s = ssmc_decoder_create(tok, 1, &d);
    fputs(argv[3 + i], stdout);
    for (int j = 0; !s && j < steps; j++) {
      s = ssmc_decoder_feed(d, ids[j * n + i], &text, &len);
      if (!s) fwrite(text, 1, len, stdout);
    }
    if (!s) s = ssmc_decoder_flush(d, &text, &len);
    if (!s) fwrite(text, 1, len, stdout);
    fputs("\n----\n", stdout);
    ssmc_decoder_destroy(d);
  }
  int rc = 0;
  if (s) {
    fprintf(stderr, "together: %s\n", ssmc_status_message(s));
    ssmc_status_free(s);
    rc = 1;
  }
  for (int i = 0; i < n; i++) ssmc_session_close(seq[i]);
  ssmc_session_close(model);
  free(seq);
  free(first);
  free(ids);
  return rc;
}
