/*
 * tokenizer_test.h — helpers that the tokenizer's two suites share
 * (test_tokenizer.c, test_tokenizer_json.c): the golden tokenizers' paths,
 * UTF-8 wholeness, the stream decoder fed one id, ids for messages, and the
 * seeded random numbers of the randomized tests.
 */
#ifndef SSM_TOKENIZER_TEST_H
#define SSM_TOKENIZER_TEST_H

#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

static inline const char *tok_path(const char *name) {
  static char p[1024];
  snprintf(p, sizeof p, "%s/tests/data/tokenizer/%s/tokenizer.json", ssm_test_source_dir(), name);
  return p;
}

/* Whether s[0..n) is whole, valid UTF-8. */
static inline int utf8_whole(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int k = ssm_utf8_decode(s + i, n - i, &cp);
    if (k <= 0) return 0;
    i += (size_t)k;
  }
  return 1;
}

static inline void print_ids(const char *what, const int32_t *ids, size_t n) {
  fprintf(stderr, "    %s:", what);
  for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
  fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

static inline void expect_chunk(ssm_tok_stream *st, int32_t id, const char *want) {
  const char *chunk;
  size_t k;
  SSM_ASSERT_OK(ssm_tok_stream_feed(st, id, &chunk, &k));
  CU_ASSERT_EQUAL(k, strlen(want));
  CU_ASSERT(k == strlen(want) && !memcmp(chunk, want, k));
}

static inline uint32_t rng_next(uint32_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 17;
  *x ^= *x << 5;
  return *x;
}

#endif
