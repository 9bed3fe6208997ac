/*
 * run_bundle.c — run a compiled bundle with the runtime-only library,
 * which holds no compiler (no shaderc, glslang or libyaml).
 *
 *   ssmc compile models/pymamba -o pymamba.ssmb
 *   cc examples/run_bundle.c $(pkg-config --cflags --libs ssmc-runtime) -o run_bundle
 *   ./run_bundle pymamba.ssmb models/pymamba "def fibonacci(n):" 80
 *
 * Opens BUNDLE on Vulkan (a GPU, or lavapipe) with the safetensors weights
 * and tokenizer.json of WEIGHTS_DIR, and prints the prompt and N greedy
 * tokens of continuation as their text completes, stopping at the
 * end-of-text token.
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
  if (argc != 5) {
    fprintf(stderr, "usage: %s BUNDLE WEIGHTS_DIR PROMPT N\n", argv[0]);
    return 2;
  }
  int max_tokens = atoi(argv[4]);
  if (max_tokens < 1) {
    fprintf(stderr, "run_bundle: N: expected a token count of at least 1, got '%s'\n", argv[4]);
    return 2;
  }
  ssmc_session *session = NULL;
  ssmc_decoder *decoder = NULL;
  const ssmc_tokenizer *tokenizer;
  int32_t *prompt = NULL, *out = calloc((size_t)max_tokens, sizeof *out);
  size_t n_prompt = 0, n_out = 0;
  if (!out) {
    fprintf(stderr, "run_bundle: out of memory\n");
    return 1;
  }

  ssmc_options o;
  ssmc_options_init(&o);
  o.weights = argv[2]; /* also where tokenizer.json is */
  ssmc_status s = ssmc_session_open(argv[1], &o, &session);
  if (!s) s = ssmc_session_tokenizer(session, &tokenizer);
  if (!s) s = ssmc_tokenizer_encode(tokenizer, argv[3], strlen(argv[3]), &prompt, &n_prompt);
  if (!s) s = ssmc_decoder_create(tokenizer, 1, &decoder);
  if (!s) {
    ssmc_generate_options g;
    ssmc_generate_options_init(&g); /* greedy */
    g.stop_at_eos = 1;
    g.on_token = print_token;
    g.user = decoder;
    fputs(argv[3], stdout);
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
    fprintf(stderr, "run_bundle: %s\n", ssmc_status_message(s));
    ssmc_status_free(s);
    rc = 1;
  }
  ssmc_decoder_destroy(decoder);
  ssmc_session_close(session);
  free(prompt);
  free(out);
  return rc;
}
