/*
 * test_tokenizer.c — the BPE tokenizer against the Hugging Face `tokenizers`
 * library: for every tokenizer of tests/data/tokenizer/ (made by
 * tools/gen_tokenizer_golden.py) and every case, the ids must be the
 * library's, decode must give the library's text, and the stream decoder fed
 * one id at a time must never hand out part of a UTF-8 character. Also:
 * NFC, the stream decoder's hold-back and U+FFFD rules, `ssmc tokenize`,
 * and random text through a golden tokenizer. Malformed and unsupported
 * tokenizer.json files, and each step of the pipeline on hand-made ones,
 * are test_tokenizer_json.c's.
 */
#include <cjson/cJSON.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer_test.h"

/* Every one must be there: a missing folder fails the test (the data is made
 * by tools/gen_tokenizer_golden.py; see tests/data/tokenizer/README.md). */
static const char *golden_names[] = {"gpt2",  "neox",   "falcon",    "llama3", "splitmix",
                                     "qwen2", "llama2", "metaspace", "normmix"};

enum { N_GOLDEN = sizeof golden_names / sizeof *golden_names };

static cJSON *read_json(const char *path) {
  char *text;
  size_t n;
  ssm_status s = ssm_file_read(path, 0, &text, &n);
  SSM_ASSERT_OK(s);
  if (s) return NULL;
  cJSON *j = cJSON_ParseWithLength(text, n);
  free(text);
  CU_ASSERT_PTR_NOT_NULL(j);
  return j;
}

static cJSON *load_cases(const char *name) {
  char p[1024];
  snprintf(p, sizeof p, "%s/tests/data/tokenizer/%s/cases.json", ssm_test_source_dir(), name);
  return read_json(p);
}

/* Checks one golden tokenizer; returns the number of failing cases. */
static int check_golden(const char *name, int *out_cases) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/tests/data/tokenizer/%s", ssm_test_source_dir(), name);
  if (access(dir, F_OK)) {
    fprintf(stderr, "\n  %s is missing: make it with tools/gen_tokenizer_golden.py (see "
            "tests/data/tokenizer/README.md)\n", dir);
    CU_FAIL("a golden tokenizer folder is missing");
    return 1;
  }
  ssm_tok *tok;
  ssm_status s = ssm_tok_open(tok_path(name), &tok);
  SSM_ASSERT_OK(s);
  cJSON *doc = load_cases(name);
  if (!tok || !doc) {
    ssm_tok_close(tok);
    cJSON_Delete(doc);
    return 1;
  }
  int bad = 0, idx = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases")) {
    const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
    const char *want_text = cJSON_GetObjectItem(c, "decoded")->valuestring;
    const cJSON *want = cJSON_GetObjectItem(c, "ids");
    size_t nwant = (size_t)cJSON_GetArraySize(want);
    int32_t *wids = malloc((nwant + 1) * sizeof *wids);
    for (size_t i = 0; i < nwant; i++) wids[i] = (int32_t)cJSON_GetArrayItem(want, (int)i)->valuedouble;
    int32_t *ids = NULL;
    size_t n = 0;
    s = ssm_tok_encode(tok, text, strlen(text), &ids, &n);
    SSM_ASSERT_OK(s);
    int ok = !s && n == nwant && (!n || !memcmp(ids, wids, n * sizeof *ids));
    /* decode, whole and streamed one id at a time */
    char *dec = NULL;
    size_t dlen = 0;
    SSM_ASSERT_OK(ssm_tok_decode(tok, wids, nwant, 0, &dec, &dlen));
    int dec_ok = dec && dlen == strlen(want_text) && !memcmp(dec, want_text, dlen);
    ssm_tok_stream *st = NULL;
    SSM_ASSERT_OK(ssm_tok_stream_create(tok, 0, &st));
    CU_ASSERT_PTR_NOT_NULL_FATAL(st);
    char *cat = malloc(dlen * 3 + 16);
    size_t clen = 0;
    int stream_ok = 1;
    for (size_t i = 0; i <= nwant; i++) {
      const char *chunk;
      size_t k;
      if (i < nwant) SSM_ASSERT_OK(ssm_tok_stream_feed(st, wids[i], &chunk, &k));
      else SSM_ASSERT_OK(ssm_tok_stream_flush(st, &chunk, &k));
      if (!utf8_whole(chunk, k)) stream_ok = 0;
      if (clen + k <= dlen * 3 + 16) memcpy(cat + clen, chunk, k);
      clen += k;
    }
    stream_ok = stream_ok && clen == dlen && dec && !memcmp(cat, dec, dlen);
    ssm_tok_stream_destroy(st);
    if (!ok || !dec_ok || !stream_ok) {
      bad++;
      fprintf(stderr, "\n  %s case %d %s%s%s: text '%s'\n", name, idx, ok ? "" : "[ids differ]",
              dec_ok ? "" : "[decode differs]", stream_ok ? "" : "[stream differs]", text);
      if (!ok) {
        print_ids("want", wids, nwant);
        print_ids("got ", ids, n);
      }
    }
    free(cat);
    free(dec);
    free(ids);
    free(wids);
    idx++;
  }
  *out_cases += idx;
  cJSON_Delete(doc);
  ssm_tok_close(tok);
  return bad;
}

static void test_golden_ids(void) {
  int cases = 0;
  for (int i = 0; i < N_GOLDEN; i++) {
    int bad = check_golden(golden_names[i], &cases);
    if (bad) fprintf(stderr, "\n  %s: %d failing cases\n", golden_names[i], bad);
    CU_ASSERT_EQUAL(bad, 0);
  }
  CU_ASSERT(cases >= N_GOLDEN * 90);
}

/* Without the library's golden file: with no normalizer and no prefix
 * space, text decodes back to itself, also a long prompt, in reasonable
 * time. */
static void test_roundtrip_long(void) {
  ssm_tok *tok;
  SSM_ASSERT_OK(ssm_tok_open(tok_path("llama3"), &tok));
  if (!tok) return;
  static const char *parts[] = {"The quick brown fox ", "jumps\tover ", "日本語 ", "👩‍👩‍👧 ",
                                "   x = f(y) + 42;\n", "naïve café ", "'s 're ", "<|endoftext|>"};
  size_t cap = 1 << 20, n = 0;
  char *text = malloc(cap + 64);
  for (unsigned k = 0; n < cap; k = k * 1103515245u + 12345u) {
    const char *p = parts[(k >> 16) % 8];
    memcpy(text + n, p, strlen(p));
    n += strlen(p);
  }
  int32_t *ids;
  size_t nids;
  clock_t t0 = clock();
  SSM_ASSERT_OK(ssm_tok_encode(tok, text, n, &ids, &nids));
  double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
  CU_ASSERT(nids > n / 16 && nids < n);
  CU_ASSERT(secs < 20.0); /* ~1 MB; well under a second in a release build */
  char *dec;
  size_t dlen;
  SSM_ASSERT_OK(ssm_tok_decode(tok, ids, nids, 0, &dec, &dlen));
  CU_ASSERT_EQUAL(dlen, n);
  CU_ASSERT(dec && !memcmp(dec, text, n));
  free(dec);
  free(ids);
  free(text);
  ssm_tok_close(tok);
}

static void test_lookup(void) {
  ssm_tok *tok;
  SSM_ASSERT_OK(ssm_tok_open(tok_path("neox"), &tok));
  if (!tok) return;
  cJSON *j = read_json(tok_path("neox"));
  int32_t want_eos = -1, max_id = -1;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "added_tokens")) {
    int id = (int)cJSON_GetObjectItem(e, "id")->valuedouble;
    if (!strcmp(cJSON_GetObjectItem(e, "content")->valuestring, "<|endoftext|>")) want_eos = id;
    if (id > max_id) max_id = id;
  }
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "vocab")) {
    if ((int)e->valuedouble > max_id) max_id = (int)e->valuedouble;
  }
  CU_ASSERT(want_eos >= 0);
  CU_ASSERT_EQUAL(ssm_tok_token_id(tok, "<|endoftext|>"), want_eos);
  CU_ASSERT(ssm_tok_is_special(tok, want_eos));
  CU_ASSERT_EQUAL(ssm_tok_vocab_size(tok), max_id + 1);
  CU_ASSERT_EQUAL(ssm_tok_token_id(tok, "no such token, surely"), -1);
  int32_t t = ssm_tok_token_id(tok, "Ġ");
  CU_ASSERT(t >= 0);
  CU_ASSERT_STRING_EQUAL(ssm_tok_token(tok, t), "Ġ");
  CU_ASSERT_PTR_NULL(ssm_tok_token(tok, ssm_tok_vocab_size(tok)));
  /* skip_special drops special tokens only */
  int32_t ids[] = {want_eos, t, want_eos};
  char *text;
  size_t n;
  SSM_ASSERT_OK(ssm_tok_decode(tok, ids, 3, 1, &text, &n));
  CU_ASSERT_STRING_EQUAL(text, " ");
  free(text);
  SSM_ASSERT_OK(ssm_tok_decode(tok, ids, 3, 0, &text, &n));
  CU_ASSERT_STRING_EQUAL(text, "<|endoftext|> <|endoftext|>");
  free(text);
  int32_t bad[] = {t, ssm_tok_vocab_size(tok)};
  SSM_ASSERT_ERR(ssm_tok_decode(tok, bad, 2, 0, &text, &n), "is not in the vocabulary");
  SSM_ASSERT_ERR(ssm_tok_encode(tok, "ok \xC3\x28 bad", 9, (int32_t **)&text, &n),
                 "not valid UTF-8 (at byte 3)");
  cJSON_Delete(j);
  ssm_tok_close(tok);
}

/* The token of a single byte (its byte-level stand-in character). */
static int32_t byte_token(const ssm_tok *tok, unsigned b) {
  uint32_t cp = b;
  if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))) {
    cp = 256;
    for (unsigned x = 0; x < b; x++)
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) cp++;
  }
  char u[5] = {0};
  ssm_utf8_encode(cp, u);
  return ssm_tok_token_id(tok, u);
}

static void test_stream_utf8(void) {
  ssm_tok *tok;
  SSM_ASSERT_OK(ssm_tok_open(tok_path("gpt2"), &tok));
  if (!tok) return;
  ssm_tok_stream *st = NULL;
  SSM_ASSERT_OK(ssm_tok_stream_create(tok, 0, &st));
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  /* 日 = E6 97 A5 fed byte by byte: nothing, nothing, the character */
  expect_chunk(st, byte_token(tok, 0xE6), "");
  expect_chunk(st, byte_token(tok, 0x97), "");
  expect_chunk(st, byte_token(tok, 0xA5), "日");
  /* 👍 = F0 9F 91 8D after an ASCII byte: the ASCII comes out at once */
  expect_chunk(st, byte_token(tok, 'a'), "a");
  expect_chunk(st, byte_token(tok, 0xF0), "");
  expect_chunk(st, byte_token(tok, 0x9F), "");
  expect_chunk(st, byte_token(tok, 0x91), "");
  expect_chunk(st, byte_token(tok, 0x8D), "👍");
  /* an interrupted sequence: one U+FFFD for it, then the byte that broke it */
  expect_chunk(st, byte_token(tok, 0xE6), "");
  expect_chunk(st, byte_token(tok, 0x97), "");
  expect_chunk(st, byte_token(tok, 'b'), "\xEF\xBF\xBD" "b");
  /* stray continuation bytes and bytes never valid: one U+FFFD each */
  expect_chunk(st, byte_token(tok, 0x80), "\xEF\xBF\xBD");
  expect_chunk(st, byte_token(tok, 0xFF), "\xEF\xBF\xBD");
  expect_chunk(st, byte_token(tok, 0xC0), "\xEF\xBF\xBD");
  /* a surrogate's encoding (ED A0 80) is not a prefix: U+FFFD each */
  expect_chunk(st, byte_token(tok, 0xED), "");
  expect_chunk(st, byte_token(tok, 0xA0), "\xEF\xBF\xBD\xEF\xBF\xBD");
  /* flush turns what is held back into one U+FFFD and empties the stream */
  expect_chunk(st, byte_token(tok, 0xF0), "");
  expect_chunk(st, byte_token(tok, 0x9F), "");
  const char *chunk;
  size_t k;
  SSM_ASSERT_OK(ssm_tok_stream_flush(st, &chunk, &k));
  CU_ASSERT_EQUAL(k, 3);
  CU_ASSERT(!memcmp(chunk, "\xEF\xBF\xBD", 3));
  SSM_ASSERT_OK(ssm_tok_stream_flush(st, &chunk, &k));
  CU_ASSERT_EQUAL(k, 0);
  expect_chunk(st, byte_token(tok, 'c'), "c");
  SSM_ASSERT_ERR(ssm_tok_stream_feed(st, -1, &chunk, &k), "token id -1 is not in the vocabulary");
  /* ids past the tokenizer (a model's padded vocabulary): no text, as
   * transformers' tokenizers decode them, and the stream goes on */
  SSM_ASSERT_OK(ssm_tok_stream_feed(st, ssm_tok_vocab_size(tok), &chunk, &k));
  CU_ASSERT_EQUAL(k, 0);
  SSM_ASSERT_OK(ssm_tok_stream_feed(st, ssm_tok_vocab_size(tok) + 1000, &chunk, &k));
  CU_ASSERT_EQUAL(k, 0);
  expect_chunk(st, byte_token(tok, 'd'), "d");
  ssm_tok_stream_destroy(st);
  ssm_tok_close(tok);
}

static void expect_form(ssm_uni_form form, const char *in, const char *want) {
  ssm_sb out = {0};
  SSM_ASSERT_OK(ssm_uni_normalize(form, in, strlen(in), &out));
  const char *got = ssm_sb_str(&out);
  if (strcmp(got, want)) fprintf(stderr, "\n  form %d of '%s' = '%s', want '%s'\n", form, in, got, want);
  CU_ASSERT_STRING_EQUAL(got, want);
  ssm_sb_free(&out);
}

static void expect_nfc(const char *in, const char *want) { expect_form(SSM_UNI_NFC, in, want); }

/* Expected values from Python's unicodedata.normalize("NFC", ...). */
static void test_nfc(void) {
  expect_nfc("plain ascii", "plain ascii");
  expect_nfc("cafe\xCC\x81", "caf\xC3\xA9");                           /* e + acute */
  expect_nfc("A\xCC\x8A", "\xC3\x85");                                  /* Å */
  expect_nfc("\xE2\x84\xAB", "\xC3\x85");                               /* ANGSTROM SIGN */
  expect_nfc("a\xCC\x81\xCC\xA3", "\xE1\xBA\xA1\xCC\x81");              /* marks reordered */
  expect_nfc("\xE1\xBA\x9B\xCC\xA3", "\xE1\xBA\x9B\xCC\xA3");           /* ẛ̣ stays */
  expect_nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81");   /* jamo -> 각 */
  expect_nfc("\xEF\xA4\x80", "\xE8\xB1\x88");                           /* CJK compat singleton */
  expect_nfc("e\xCC\x81\xCC\x81", "\xC3\xA9\xCC\x81");
  expect_nfc("\xCC\x81" "a", "\xCC\x81" "a");                           /* leading mark */
}

/* ---- ssmc tokenize ---- */

static int run_ssmc(const char *args, char **out) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "cd %s && %s %s", ssm_test_source_dir(), ssm_test_ssmc(), args);
  return ssm_test_sh(cmd, out);
}

static void test_cli(void) {
  cJSON *doc = load_cases("neox");
  if (!doc) return;
  const cJSON *c, *found = NULL;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(doc, "cases"))
    if (!strcmp(cJSON_GetObjectItem(c, "text")->valuestring, "Hello, world!")) found = c;
  CU_ASSERT_PTR_NOT_NULL(found);
  if (!found) {
    cJSON_Delete(doc);
    return;
  }
  char want[1024] = "";
  size_t k = 0;
  const cJSON *id;
  cJSON_ArrayForEach(id, cJSON_GetObjectItem(found, "ids"))
    k += (size_t)snprintf(want + k, sizeof want - k, k ? ",%d" : "%d", (int)id->valuedouble);
  char *out;
  const char *tj = "tests/data/tokenizer/neox/tokenizer.json";
  char args[2048];
  snprintf(args, sizeof args, "tokenize --tokenizer %s --ids 'Hello, world!'", tj);
  CU_ASSERT_EQUAL(run_ssmc(args, &out), 0);
  CU_ASSERT(!strncmp(out, want, k) && out[k] == '\n' && !out[k + 1]);
  if (strncmp(out, want, k)) fprintf(stderr, "\n  got '%s', want '%s'\n", out, want);
  free(out);
  snprintf(args, sizeof args, "tokenize --tokenizer %s --decode %s", tj, want);
  CU_ASSERT_EQUAL(run_ssmc(args, &out), 0);
  CU_ASSERT_STRING_EQUAL(out, "Hello, world!\n");
  free(out);
  snprintf(args, sizeof args, "tokenize --tokenizer %s --ids - < /dev/null", tj);
  CU_ASSERT_EQUAL(run_ssmc(args, &out), 0);
  CU_ASSERT_STRING_EQUAL(out, "\n");
  free(out);
  snprintf(args, sizeof args, "tokenize --tokenizer %s --decode 1,x", tj);
  CU_ASSERT_EQUAL(run_ssmc(args, &out), 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "--decode: expected comma-separated token ids"));
  free(out);
  snprintf(args, sizeof args, "tokenize --tokenizer %s --decode 99999999", tj);
  CU_ASSERT_EQUAL(run_ssmc(args, &out), 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "token id 99999999 is not in the vocabulary"));
  free(out);
  CU_ASSERT_EQUAL(run_ssmc("tokenize hello", &out), 2);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "missing --tokenizer"));
  free(out);
  CU_ASSERT_EQUAL(run_ssmc("tokenize --tokenizer /nonexistent/tokenizer.json hi", &out), 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "/nonexistent/tokenizer.json"));
  free(out);
  cJSON_Delete(doc);
}

/* Random valid UTF-8 (every plane, controls, marks, spaces): encoding then
 * decoding gives the text back (llama3: no normalizer, no prefix space),
 * and invalid UTF-8 is refused, never crashes. */
static void test_random_text(void) {
  ssm_tok *tok;
  SSM_ASSERT_OK(ssm_tok_open(tok_path("llama3"), &tok));
  if (!tok) return;
  static const uint32_t ranges[][2] = {{0x00, 0x7F},     {0x80, 0x7FF},      {0x300, 0x36F},
                                       {0x2000, 0x206F}, {0x3000, 0x9FFF},   {0xAC00, 0xD7A3},
                                       {0xE000, 0xFFFD}, {0x1F300, 0x1FAFF}, {0x10000, 0x10FFFF}};
  uint32_t seed = 777;
  char text[2048];
  int mismatches = 0;
  for (int iter = 0; iter < 200; iter++) {
    size_t n = 0;
    int chars = 1 + (int)(rng_next(&seed) % 300);
    for (int k = 0; k < chars; k++) {
      const uint32_t *r = ranges[rng_next(&seed) % 9];
      uint32_t cp = r[0] + rng_next(&seed) % (r[1] - r[0] + 1);
      if (cp >= 0xD800 && cp <= 0xDFFF) cp = ' ';
      n += (size_t)ssm_utf8_encode(cp, text + n);
    }
    int32_t *ids;
    size_t nids;
    SSM_ASSERT_OK(ssm_tok_encode(tok, text, n, &ids, &nids));
    char *dec;
    size_t dlen;
    SSM_ASSERT_OK(ssm_tok_decode(tok, ids, nids, 0, &dec, &dlen));
    mismatches += dlen != n || memcmp(dec, text, n);
    free(dec);
    free(ids);
    /* the same bytes with one replaced by a random byte */
    text[rng_next(&seed) % n] = (char)(0x80 + rng_next(&seed) % 0x80);
    ssm_status s = ssm_tok_encode(tok, text, n, &ids, &nids);
    if (!s) free(ids);
    else CU_ASSERT_PTR_NOT_NULL(strstr(ssm_status_message(s), "not valid UTF-8"));
    ssm_status_free(s);
  }
  CU_ASSERT_EQUAL(mismatches, 0);
  ssm_tok_close(tok);
}

int main(void) {
  CU_TestInfo tests[] = {
      {"golden ids, decode and stream vs tokenizers", test_golden_ids},
      {"long prompt round trip", test_roundtrip_long},
      {"token lookup and decode options", test_lookup},
      {"stream decoder never splits a character", test_stream_utf8},
      {"NFC", test_nfc},
      {"ssmc tokenize", test_cli},
      {"random text round trip", test_random_text},
      CU_TEST_INFO_NULL,
  };
  return ssm_test_main("tokenizer", tests);
}
