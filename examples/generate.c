/*
 * generate.c — stream text from a model with the ssmc library.
 *
 *   cc examples/generate.c $(pkg-config --cflags --libs ssmc) -o generate
 *   ./generate models/pymamba "def fibonacci(n):" 80
 *
 * Opens MODEL_DIR (compiled in memory for the GPU, or lavapipe), encodes
 * the prompt with the model's tokenizer.json, and prints each token's text
 * as soon as it completes a character, stopping at the end-of-text token.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ssmc.h>

/* Prints each id's text; a non-zero return would stop generation. */
static int print_token(int32_t id, void *user) {
  const char *text;
  size_t len;
  ssmc_status s = ssmc_decoder_feed(user, id, &text, &len);
  if (s) {
    ssmc_status_free(s);
    return 1;
  }
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL_DIR PROMPT [TOKENS]\n", argv[0]);
    return 2;
  }
  int max_tokens = argc > 3 ? atoi(argv[3]) : 64;
  ssmc_session *session = NULL;
  ssmc_decoder *decoder = NULL;
  const ssmc_tokenizer *tokenizer;
  int32_t *prompt = NULL, *out = calloc((size_t)max_tokens + 1, sizeof *out);
  size_t n_prompt = 0, n_out = 0;

  ssmc_status s = ssmc_session_open(argv[1], NULL, &session);
  if (!s) s = ssmc_session_tokenizer(session, &tokenizer);
  if (!s) s = ssmc_tokenizer_encode(tokenizer, argv[2], strlen(argv[2]), &prompt, &n_prompt);
  if (!s) s = ssmc_decoder_create(tokenizer, 1, &decoder);
  if (!s) {
    ssmc_generate_options g;
    ssmc_generate_options_init(&g);
    g.temperature = 0;         /* greedy; try 0.8 with g.top_p = 0.95 */
    g.stop_at_eos = 1;
    g.on_token = print_token;
    g.user = decoder;
    fputs(argv[2], stdout);
    s = ssmc_session_generate(session, prompt, n_prompt, max_tokens, &g, out, &n_out);
    const char *rest;
    size_t len;
    ssmc_status f = ssmc_decoder_flush(decoder, &rest, &len);
    if (!s) s = f;
    else ssmc_status_free(f);
    fwrite(rest, 1, len, stdout);
    putchar('\n');
  }
  int rc = 0;
  if (s) {
    fprintf(stderr, "generate: %s\n", ssmc_status_message(s));
    ssmc_status_free(s);
    rc = 1;
  }
  ssmc_decoder_destroy(decoder);
  ssmc_session_close(session);
  free(prompt);
  free(out);
  return rc;
}
