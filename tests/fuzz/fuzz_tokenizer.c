/*
 * fuzz_tokenizer.c — the tokenizer.json loader: the input is a tokenizer.json.
 * A tokenizer that loads must encode a few fixed texts (and the input itself)
 * to ids inside its vocabulary, decode them back, and stream-decode them
 * without breaking a UTF-8 character, the stream joining to what decode
 * gives; so must ids taken from the input's bytes (runs of byte tokens,
 * special tokens, anything) through whatever decoder chain it has.
 */
#include "fuzz.h"
#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"

static const char *const texts[] = {
    "def f(x):\n\treturn x  +  1  # caf\xc3\xa9 \xf0\x9f\x98\x80\n", "Hello, world! 12345 don't",
    ("\xe4\xb8\xad\xe6\x96\x87 <|endoftext|> \xcc\x81" "e   end"), ""};

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

/* decode(ids) and the stream fed the ids one at a time, then flushed:
 * whole characters only, and the same text. */
static void check_decode(const ssm_tok *tok, const int32_t *ids, size_t n, int skip) {
  char *back = NULL;
  size_t blen = 0;
  ssm_status s = ssm_tok_decode(tok, ids, n, skip, &back, &blen);
  if (s) {
    fuzz_check_error(s);
    return;
  }
  if (!utf8_complete(back, blen)) fuzz_fail("decode gave invalid UTF-8");
  ssm_tok_stream *st = NULL;
  s = ssm_tok_stream_create(tok, skip, &st);
  if (s) fuzz_fail("the stream could not be made: %s", ssm_status_message(s));
  size_t at = 0;
  for (size_t i = 0; i <= n; i++) {
    const char *out;
    size_t olen;
    if (i < n) {
      s = ssm_tok_stream_feed(st, ids[i], &out, &olen);
      if (s) fuzz_fail("the stream refused id %d that decode took", ids[i]);
    } else {
      s = ssm_tok_stream_flush(st, &out, &olen);
      if (s) fuzz_fail("the stream could not be flushed: %s", ssm_status_message(s));
    }
    if (!utf8_complete(out, olen)) fuzz_fail("the stream handed out part of a UTF-8 character");
    if (at + olen > blen || memcmp(back + at, out, olen))
      fuzz_fail("the stream differs from decode at byte %zu", at);
    at += olen;
  }
  if (at != blen) fuzz_fail("the stream gave %zu bytes, decode %zu", at, blen);
  ssm_tok_stream_destroy(st);
  free(back);
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
  check_decode(tok, ids, n, 0);
  free(ids);
}

/* Ids made from the input's bytes: each pair of bytes picks a token that
 * exists (model or added). */
static void exercise_ids(const ssm_tok *tok, const uint8_t *data, size_t size) {
  int32_t vocab = ssm_tok_vocab_size(tok), ids[64];
  size_t n = 0;
  for (size_t i = 0; i + 1 < size && n < 64; i += 2) {
    int32_t id = (int32_t)(((uint32_t)data[i] << 8 | data[i + 1]) % (uint32_t)vocab);
    if (ssm_tok_token(tok, id)) ids[n++] = id;
  }
  check_decode(tok, ids, n, 0);
  check_decode(tok, ids, n, 1);
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
  exercise_ids(tok, data + size / 2, size - size / 2);
  ssm_tok_close(tok);
  return 0;
}
