/*
 * fuzz_tokenizer.c — the tokenizer.json loader: the input is a tokenizer.json.
 * A tokenizer that loads must encode a few fixed texts (and the input itself)
 * to ids inside its vocabulary, decode them back, and stream-decode them
 * without breaking a UTF-8 character.
 */
#include "fuzz.h"
#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"

static const char *const texts[] = {
    "def f(x):\n\treturn x  +  1  # caf\xc3\xa9 \xf0\x9f\x98\x80\n", "Hello, world! 12345 don't",
    "\xe4\xb8\xad\xe6\x96\x87 <|endoftext|> \xcc\x81" "e   end", ""};

static int utf8_complete(const char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || i + len > n) return 0;
    i += len;
  }
  return 1;
}

static void exercise(const ssm_tok *tok, const char *text, size_t len) {
  int32_t *ids = NULL;
  size_t n = 0;
  ssm_status s = ssm_tok_encode(tok, text, len, &ids, &n);
  if (s) {
    fuzz_check_error(s);
    return;
  }
  int32_t vocab = ssm_tok_vocab_size(tok);
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab) fuzz_fail("id %d outside the vocabulary of %d", ids[i], vocab);
  char *back = NULL;
  size_t blen = 0;
  s = ssm_tok_decode(tok, ids, n, 0, &back, &blen);
  if (s) fuzz_check_error(s);
  free(back);
  ssm_tok_stream *st = ssm_tok_stream_create(tok, 0);
  for (size_t i = 0; i < n; i++) {
    const char *out;
    size_t olen;
    s = ssm_tok_stream_feed(st, ids[i], &out, &olen);
    if (s) {
      fuzz_check_error(s);
      break;
    }
    if (!utf8_complete(out, olen)) fuzz_fail("the stream handed out part of a UTF-8 character");
  }
  ssm_tok_stream_destroy(st);
  free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ssm_tok *tok = NULL;
  ssm_status s = ssm_tok_open(fuzz_file(data, size), &tok);
  if (s) {
    fuzz_check_error(s);
    return 0;
  }
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) exercise(tok, texts[i], strlen(texts[i]));
  exercise(tok, (const char *)data, size < 2048 ? size : 2048);
  ssm_tok_close(tok);
  return 0;
}
