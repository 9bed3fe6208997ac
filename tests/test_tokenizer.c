/*
 * test_tokenizer.c — the BPE tokenizer against the Hugging Face `tokenizers`
 * library: for every tokenizer of tests/data/tokenizer/ (made by
 * tools/gen_tokenizer_golden.py) and every case, the ids must be the
 * library's, decode must give the library's text, and the stream decoder fed
 * one id at a time must never hand out part of a UTF-8 character. Also:
 * NFC, the stream decoder's hold-back and U+FFFD rules, `ssmc tokenize`,
 * one test per class of malformed or unsupported tokenizer.json (asserting
 * the message), and each normalizer, pre-tokenizer, decoder and BPE option
 * on hand-made files, with the ids or text the library's code gives.
 */
#include <cjson/cJSON.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"
#include "testutil.h"
#include "tokenizer/unicode.h"

/* Every one must be there: a missing folder fails the test (the data is made
 * by tools/gen_tokenizer_golden.py; see tests/data/tokenizer/README.md). */
static const char *golden_names[] = {"gpt2",  "neox",   "falcon",    "llama3", "splitmix",
                                     "qwen2", "llama2", "metaspace", "normmix"};
enum { N_GOLDEN = sizeof golden_names / sizeof *golden_names };

static const char *tok_path(const char *name) {
  static char p[1024];
  snprintf(p, sizeof p, "%s/tests/data/tokenizer/%s/tokenizer.json", ssm_test_source_dir(), name);
  return p;
}

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

/* Whether s[0..n) is whole, valid UTF-8. */
static int utf8_whole(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int k = ssm_utf8_decode(s + i, n - i, &cp);
    if (k <= 0) return 0;
    i += (size_t)k;
  }
  return 1;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
  fprintf(stderr, "    %s:", what);
  for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
  fprintf(stderr, n > 40 ? " ...\n" : "\n");
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

static void expect_chunk(ssm_tok_stream *st, int32_t id, const char *want) {
  const char *chunk;
  size_t k;
  SSM_ASSERT_OK(ssm_tok_stream_feed(st, id, &chunk, &k));
  CU_ASSERT_EQUAL(k, strlen(want));
  CU_ASSERT(k == strlen(want) && !memcmp(chunk, want, k));
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

/* ---- malformed and unsupported tokenizer.json ---- */

/* A small valid byte-level tokenizer: the 256 byte tokens, "Ġt", "he",
 * "Ġthe", and <|endoftext|>. */
static cJSON *base_json(void) {
  cJSON *root = cJSON_CreateObject();
  cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
  cJSON *eot = cJSON_CreateObject();
  cJSON_AddNumberToObject(eot, "id", 0);
  cJSON_AddStringToObject(eot, "content", "<|endoftext|>");
  cJSON_AddBoolToObject(eot, "special", 1);
  cJSON_AddBoolToObject(eot, "normalized", 0);
  cJSON_AddItemToArray(added, eot);
  cJSON_AddNullToObject(root, "normalizer");
  cJSON *pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
  cJSON_AddStringToObject(pt, "type", "ByteLevel");
  cJSON_AddBoolToObject(pt, "add_prefix_space", 0);
  cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "post_processor"), "type", "ByteLevel");
  cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "decoder"), "type", "ByteLevel");
  cJSON *model = cJSON_AddObjectToObject(root, "model");
  cJSON_AddStringToObject(model, "type", "BPE");
  cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
  cJSON_AddNumberToObject(vocab, "<|endoftext|>", 0);
  int id = 1;
  for (unsigned b = 0, extra = 256; b < 256; b++) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    char u[5] = {0};
    ssm_utf8_encode(printable ? b : extra++, u);
    cJSON_AddNumberToObject(vocab, u, id++);
  }
  static const char *merged[] = {"Ġt", "he", "Ġthe"};
  for (int i = 0; i < 3; i++) cJSON_AddNumberToObject(vocab, merged[i], id++);
  cJSON *merges = cJSON_AddArrayToObject(model, "merges");
  cJSON_AddItemToArray(merges, cJSON_CreateString("Ġ t"));
  static const char *pair[] = {"h", "e"};
  cJSON_AddItemToArray(merges, cJSON_CreateStringArray(pair, 2));
  cJSON_AddItemToArray(merges, cJSON_CreateString("Ġt he"));
  return root;
}

static const char *write_json(cJSON *j) {
  char *text = cJSON_PrintUnformatted(j);
  const char *p = ssm_test_write("bad_tokenizer.json", text, strlen(text));
  free(text);
  cJSON_Delete(j);
  return p;
}

/* Loads `j` (consumed) and asserts an error containing the file's path and
 * `needle`. */
static void expect_load_error(cJSON *j, const char *needle) {
  const char *p = write_json(j);
  ssm_tok *tok = NULL;
  ssm_status s = ssm_tok_open(p, &tok);
  CU_ASSERT_PTR_NULL(tok);
  CU_ASSERT(s && strstr(ssm_status_message(s), p) == ssm_status_message(s));
  SSM_ASSERT_ERR(s, needle);
  ssm_tok_close(tok);
}

static cJSON *model_of(cJSON *j) { return cJSON_GetObjectItem(j, "model"); }

static void test_base_is_valid(void) {
  ssm_tok *tok;
  SSM_ASSERT_OK(ssm_tok_open(write_json(base_json()), &tok));
  if (!tok) return;
  int32_t *ids;
  size_t n;
  SSM_ASSERT_OK(ssm_tok_encode(tok, "the the<|endoftext|>", 20, &ids, &n));
  int32_t the = ssm_tok_token_id(tok, "Ġthe"), he = ssm_tok_token_id(tok, "he");
  CU_ASSERT_EQUAL(n, 4);
  if (n == 4) {
    CU_ASSERT_EQUAL(ids[0], ssm_tok_token_id(tok, "t"));
    CU_ASSERT_EQUAL(ids[1], he);
    CU_ASSERT_EQUAL(ids[2], the);
    CU_ASSERT_EQUAL(ids[3], 0);
  }
  free(ids);
  ssm_tok_close(tok);
}

static void test_malformed(void) {
  const char *bad = "{\n  \"model\": [1, 2,, 3]\n}\n";
  const char *p = ssm_test_write("bad_tokenizer.json", bad, strlen(bad));
  ssm_tok *tok;
  SSM_ASSERT_ERR(ssm_tok_open(p, &tok), "bad_tokenizer.json:2:");
  SSM_ASSERT_ERR(ssm_tok_open(p, &tok), ": not valid JSON");
  SSM_ASSERT_ERR(ssm_tok_open("/nonexistent/tokenizer.json", &tok), "/nonexistent/tokenizer.json");

  expect_load_error(cJSON_CreateArray(), "expected a JSON object");
  cJSON *j = base_json();
  cJSON_DeleteItemFromObject(j, "model");
  expect_load_error(j, "model: missing or not an object");
  j = base_json();
  cJSON_DeleteItemFromObject(model_of(j), "vocab");
  expect_load_error(j, "model.vocab: missing or not an object");
  j = base_json();
  cJSON_AddItemToArray(cJSON_GetObjectItem(model_of(j), "merges"), cJSON_CreateString("Ġthe zz"));
  expect_load_error(j, "model.merges[3]: 'zz' is not in model.vocab");
  j = base_json();
  cJSON_AddItemToArray(cJSON_GetObjectItem(model_of(j), "merges"), cJSON_CreateString("Ġthe t"));
  expect_load_error(j, "model.merges[3]: 'Ġthet' is not in model.vocab");
  j = base_json();
  cJSON_AddItemToArray(cJSON_GetObjectItem(model_of(j), "merges"), cJSON_CreateNumber(3));
  expect_load_error(j, "model.merges[3]: expected \"A B\" or [\"A\", \"B\"]");
  j = base_json();
  cJSON_AddItemToArray(cJSON_GetObjectItem(model_of(j), "merges"), cJSON_CreateString("a b c"));
  expect_load_error(j, "model.merges[3]: expected");
  j = base_json();
  cJSON_AddNumberToObject(cJSON_GetObjectItem(model_of(j), "vocab"), "neg", -1);
  expect_load_error(j, "model.vocab: the id of 'neg' is not an integer");
  j = base_json();
  cJSON_AddNumberToObject(cJSON_GetObjectItem(model_of(j), "vocab"), "frac", 1.5);
  expect_load_error(j, "the id of 'frac' is not an integer");
  j = base_json();
  cJSON_AddStringToObject(cJSON_GetObjectItem(model_of(j), "vocab"), "str", "7");
  expect_load_error(j, "the id of 'str' is not an integer");
  j = base_json();
  cJSON_AddNumberToObject(cJSON_GetObjectItem(model_of(j), "vocab"), "dup", 5);
  expect_load_error(j, "model.vocab: id 5 is given to both");
  j = base_json();
  cJSON_AddNumberToObject(cJSON_GetObjectItem(model_of(j), "vocab"), "he", 900);
  expect_load_error(j, "the key 'he' is given twice in the object at model.vocab");
  /* one id of 1e9 among a few tokens: refused before the tables are sized */
  j = base_json();
  cJSON_AddNumberToObject(cJSON_GetObjectItem(model_of(j), "vocab"), "far", 1e9);
  expect_load_error(j, "the largest token id, 1000000000, is far past the");
  j = base_json();
  cJSON_DeleteItemFromObject(cJSON_GetObjectItem(model_of(j), "vocab"), "Ā");
  expect_load_error(j, "model.vocab lacks the byte-level token 'Ā' for byte 0x00");
  j = base_json();
  cJSON_ReplaceItemInObject(model_of(j), "type", cJSON_CreateString("Unigram"));
  expect_load_error(j, "model.type 'Unigram' is not supported (only BPE)");
  j = base_json();
  cJSON_AddNumberToObject(model_of(j), "byte_fallback", 1);
  expect_load_error(j, "model.byte_fallback: expected true or false");
  j = base_json();
  cJSON_AddStringToObject(model_of(j), "continuing_subword_prefix", "##");
  expect_load_error(j, "model.continuing_subword_prefix is not supported");
  j = base_json();
  cJSON_AddNumberToObject(model_of(j), "dropout", 0.1);
  expect_load_error(j, "model.dropout is not supported");
  j = base_json();
  cJSON_ReplaceItemInObject(j, "normalizer", cJSON_Parse("{\"type\": \"Precompiled\"}"));
  expect_load_error(j, "normalizer.type 'Precompiled' is not supported (supported: NFC, NFD, "
                       "NFKC, NFKD, Lowercase, Strip, Replace, Prepend, Sequence)");
  j = base_json();
  cJSON_ReplaceItemInObject(j, "pre_tokenizer", cJSON_Parse("{\"type\": \"Whitespace\"}"));
  expect_load_error(j, "pre_tokenizer.type 'Whitespace' is not supported (supported: ByteLevel, "
                       "Split, Punctuation, Digits, Metaspace, Sequence)");
  j = base_json();
  cJSON_ReplaceItemInObject(
      j, "pre_tokenizer",
      cJSON_Parse("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, "
                  "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\\\\w+\"}, "
                  "\"behavior\": \"Isolated\"}]}"));
  expect_load_error(j, "pre_tokenizer.pretokenizers[1].pattern.Regex '(\\w+': end pattern with "
                       "unmatched parenthesis");
  j = base_json();
  cJSON_ReplaceItemInObject(
      j, "pre_tokenizer",
      cJSON_Parse("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Punctuation\", "
                  "\"behavior\": \"Sideways\"}, {\"type\": \"ByteLevel\"}]}"));
  expect_load_error(j, "pre_tokenizer.pretokenizers[0].behavior: expected one of");
  j = base_json();
  cJSON_ReplaceItemInObject(j, "post_processor",
                            cJSON_Parse("{\"type\": \"TemplateProcessing\"}"));
  expect_load_error(j, "post_processor.type 'TemplateProcessing' is not supported");
  j = base_json();
  cJSON_ReplaceItemInObject(j, "decoder", cJSON_Parse("{\"type\": \"WordPiece\"}"));
  expect_load_error(j, "decoder.type 'WordPiece' is not supported (supported: ByteLevel, "
                       "Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence)");
  j = base_json();
  cJSON_DeleteItemFromObject(j, "decoder");
  expect_load_error(j, "decoder.type 'null' is not supported");
  j = base_json();
  cJSON_AddItemToArray(cJSON_GetObjectItem(j, "added_tokens"),
                       cJSON_Parse("{\"id\": 1, \"content\": \"<pad>\", \"special\": true}"));
  expect_load_error(j, "added_tokens[1]: id 1 is 'Ā' in model.vocab but '<pad>' here");
  j = base_json();
  cJSON_AddItemToArray(cJSON_GetObjectItem(j, "added_tokens"),
                       cJSON_Parse("{\"id\": 300, \"content\": \"\"}"));
  expect_load_error(j, "added_tokens[1].content: expected a non-empty string");
  j = base_json();
  cJSON_AddItemToArray(cJSON_GetObjectItem(j, "added_tokens"),
                       cJSON_Parse("{\"id\": \"x\", \"content\": \"<x>\"}"));
  expect_load_error(j, "added_tokens[1].id: expected an integer");
  j = base_json();
  cJSON_AddItemToArray(cJSON_GetObjectItem(j, "added_tokens"),
                       cJSON_Parse("{\"id\": 0, \"content\": \"<|endoftext|>\"}"));
  expect_load_error(j, "added_tokens[1]: id 0 is already added token '<|endoftext|>'");
  j = base_json();
  cJSON_AddItemToArray(cJSON_GetObjectItem(j, "added_tokens"),
                       cJSON_Parse("{\"id\": 300, \"content\": \"<x>\", \"lstrip\": 1}"));
  expect_load_error(j, "added_tokens[1].lstrip: expected true or false");
  j = base_json();
  cJSON_AddItemToArray(cJSON_GetObjectItem(j, "added_tokens"),
                       cJSON_Parse("{\"id\": 300, \"content\": \"<\xC3x>\"}"));
  expect_load_error(j, "added_tokens[1].content: not valid UTF-8");
}

static uint32_t rng_next(uint32_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 17;
  *x ^= *x << 5;
  return *x;
}

/* Seeded mutations of a valid tokenizer.json (bytes replaced, the file
 * cut): loading never crashes, and a failure names the file. */
static void test_mutations(void) {
  cJSON *j = base_json();
  char *base = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  size_t n = strlen(base);
  char *buf = malloc(n + 1);
  uint32_t seed = 12345;
  int failed = 0, bad_msg = 0;
  for (int iter = 0; iter < 300; iter++) {
    memcpy(buf, base, n);
    size_t len = n;
    if (iter % 3 == 0) len = rng_next(&seed) % n;
    for (int k = 0, m = 1 + (int)(rng_next(&seed) % 4); k < m; k++)
      buf[rng_next(&seed) % len] = "{}[]\",:0-9a \"\xC3"[rng_next(&seed) % 15];
    const char *p = ssm_test_write("mutated.json", buf, len);
    ssm_tok *tok = NULL;
    ssm_status s = ssm_tok_open(p, &tok);
    if (s) {
      failed++;
      bad_msg += strstr(ssm_status_message(s), p) != ssm_status_message(s);
      ssm_status_free(s);
    } else {
      int32_t *ids;
      size_t nids;
      SSM_ASSERT_OK(ssm_tok_encode(tok, "the the <|endoftext|>", 21, &ids, &nids));
      free(ids);
    }
    ssm_tok_close(tok);
  }
  CU_ASSERT(failed > 100);
  CU_ASSERT_EQUAL(bad_msg, 0);
  free(buf);
  free(base);
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

/* ---- the pipeline steps, on hand-made tokenizer.json files ---- */

#define LB "\xE2\x96\x81" /* U+2581, SentencePiece's space */

/* Loads `j` (consumed); NULL after a failed assertion when it does not. */
static ssm_tok *load_json(cJSON *j) {
  ssm_tok *tok = NULL;
  SSM_ASSERT_OK(ssm_tok_open(write_json(j), &tok));
  return tok;
}

static void expect_ids(const ssm_tok *tok, const char *text, const int32_t *want, size_t nwant) {
  int32_t *ids = NULL;
  size_t n = 0;
  SSM_ASSERT_OK(ssm_tok_encode(tok, text, strlen(text), &ids, &n));
  int ok = n == nwant && (!n || !memcmp(ids, want, n * sizeof *ids));
  if (!ok) {
    fprintf(stderr, "\n  encode('%s'):\n", text);
    print_ids("want", want, nwant);
    print_ids("got ", ids, n);
  }
  CU_ASSERT(ok);
  free(ids);
}

/* Feeds ids to a new stream one at a time, then flushes it, appending
 * what it hands out to `cat`; returns how many chunks were not whole UTF-8. */
static int stream_all(const ssm_tok *tok, const int32_t *ids, size_t n, int skip, ssm_sb *cat) {
  ssm_tok_stream *st = NULL;
  SSM_ASSERT_OK(ssm_tok_stream_create(tok, skip, &st));
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  int partial = 0;
  for (size_t i = 0; i <= n; i++) {
    const char *chunk;
    size_t k;
    if (i < n) SSM_ASSERT_OK(ssm_tok_stream_feed(st, ids[i], &chunk, &k));
    else SSM_ASSERT_OK(ssm_tok_stream_flush(st, &chunk, &k));
    partial += !utf8_whole(chunk, k);
    ssm_sb_append(cat, chunk, k);
  }
  ssm_tok_stream_destroy(st);
  return partial;
}

/* decode(ids) is `want`, and so is the stream fed one id at a time, which
 * hands out only whole UTF-8 characters. */
static void expect_decode(const ssm_tok *tok, const int32_t *ids, size_t n, int skip,
                          const char *want) {
  char *text = NULL;
  size_t len = 0;
  SSM_ASSERT_OK(ssm_tok_decode(tok, ids, n, skip, &text, &len));
  if (text && strcmp(text, want)) fprintf(stderr, "\n  decode: '%s', want '%s'\n", text, want);
  CU_ASSERT(text && len == strlen(want) && !strcmp(text, want));
  free(text);
  ssm_sb cat = {0};
  CU_ASSERT_EQUAL(stream_all(tok, ids, n, skip, &cat), 0);
  CU_ASSERT_STRING_EQUAL(ssm_sb_str(&cat), want);
  ssm_sb_free(&cat);
}

/* What the normalizer `norm` (JSON) makes of `text`: with the ByteLevel
 * base fixture, decode(encode(text)) is exactly the normalized text. */
static void expect_normalized(const char *norm, const char *text, const char *want) {
  cJSON *j = base_json();
  cJSON_ReplaceItemInObject(j, "normalizer", cJSON_Parse(norm));
  ssm_tok *tok = load_json(j);
  if (!tok) return;
  int32_t *ids = NULL;
  size_t n = 0;
  SSM_ASSERT_OK(ssm_tok_encode(tok, text, strlen(text), &ids, &n));
  expect_decode(tok, ids, n, 0, want);
  free(ids);
  ssm_tok_close(tok);
}

/* Expected values from Python's unicodedata.normalize and, for Lowercase,
 * Rust's char::to_lowercase (per character: no final sigma). */
static void test_normalizers(void) {
  expect_normalized("{\"type\": \"NFD\"}", "caf\xC3\xA9 \xEA\xB0\x81",
                    "cafe\xCC\x81 \xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8");
  expect_normalized("{\"type\": \"NFKC\"}", "\xEF\xAC\x81 \xE2\x91\xA0 \xE2\x84\xAB \xE1\xBA\x9B\xCC\xA3",
                    "fi 1 \xC3\x85 \xE1\xB9\xA9");
  expect_normalized("{\"type\": \"NFKD\"}", "\xEF\xAC\x81\xC3\xA9 \xE2\x81\xB5\xC2\xBD",
                    "fie\xCC\x81 51\xE2\x81\x84" "2");
  expect_normalized("{\"type\": \"Lowercase\"}",
                    "HeLLo \xC3\x80\xC3\x89 \xC4\xB0 \xCE\xA3\xCE\xA3",
                    "hello \xC3\xA0\xC3\xA9 i\xCC\x87 \xCF\x83\xCF\x83");
  const char *strip_both = "{\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": true}";
  expect_normalized(strip_both, " \t hi there \xE3\x80\x80", "hi there");
  expect_normalized(strip_both, " \n ", "");
  expect_normalized("{\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": false}",
                    "  hi  ", "hi  ");
  expect_normalized("{\"type\": \"Strip\", \"strip_left\": false, \"strip_right\": true}",
                    "  hi  ", "  hi");
  expect_normalized("{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"_\"}",
                    "a b  c", "a_b__c");
  /* a string pattern is literal: its "." is not a regex */
  expect_normalized("{\"type\": \"Replace\", \"pattern\": {\"String\": \"a.b\"}, \"content\": \"X\"}",
                    "a.b axb", "X axb");
  expect_normalized("{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"content\": \" \"}",
                    "a \t\n b\xE3\x80\x80" "c", "a b c");
  /* empty matches are replaced too, as onig's find_iter finds them */
  expect_normalized("{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"x*\"}, \"content\": \"-\"}",
                    "ab", "-a-b-");
  expect_normalized("{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"(?i)the\"}, \"content\": \"\"}",
                    "The theme", " me");
  expect_normalized("{\"type\": \"Prepend\", \"prepend\": \"" LB "\"}", "hi", LB "hi");
  expect_normalized(
      "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKD\"}, {\"type\": \"Lowercase\"}, "
      "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Strip\", \"strip_left\": true, "
      "\"strip_right\": true}]}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, "
      "\"content\": \"_\"}, {\"type\": \"Prepend\", \"prepend\": \"" LB "\"}]}",
      " \xEF\xBC\xA8\xEF\xBC\xA9 \xEF\xAC\x81 ", LB "hi_fi");
  expect_normalized("{\"type\": \"Sequence\", \"normalizers\": []}", "As Is", "As Is");
}

/* Added tokens with `normalized` are matched in the normalized text in
 * their normalized form, and decoded in it (tokenizers >= 0.23). */
static void test_normalized_added_token(void) {
  cJSON *j = base_json();
  cJSON_ReplaceItemInObject(j, "normalizer", cJSON_Parse("{\"type\": \"Lowercase\"}"));
  cJSON_AddItemToArray(cJSON_GetObjectItem(j, "added_tokens"),
                       cJSON_Parse("{\"id\": 260, \"content\": \"HeLLo\", \"normalized\": true}"));
  ssm_tok *tok = load_json(j);
  if (!tok) return;
  int32_t want[] = {ssm_tok_token_id(tok, "h"), ssm_tok_token_id(tok, "i"),
                    ssm_tok_token_id(tok, "Ġ"), 260, 260};
  expect_ids(tok, "Hi HELLOhello", want, 5);
  expect_decode(tok, want, 5, 0, "hi hellohello");
  CU_ASSERT_STRING_EQUAL(ssm_tok_token(tok, 260), "HeLLo");
  ssm_tok_close(tok);
}

/* One bad value of a pipeline field each: `key` of the fixture replaced by
 * the JSON, refused with the message. */
typedef struct {
  const char *json, *msg;
} bad_field;

static void expect_field_errors(cJSON *(*fixture)(void), const char *key, const bad_field *bad,
                                size_t n) {
  for (size_t i = 0; i < n; i++) {
    cJSON *j = fixture();
    cJSON_ReplaceItemInObject(j, key, cJSON_Parse(bad[i].json));
    expect_load_error(j, bad[i].msg);
  }
}

static void test_normalizer_errors(void) {
  static const bad_field bad[] = {
      {"{\"type\": \"Strip\", \"strip_left\": true}", "normalizer.strip_right: expected true or false"},
      {"{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": \"Nmt\"}]}",
       "normalizer.normalizers[1].type 'Nmt' is not supported"},
      {"{\"type\": \"Sequence\", \"normalizers\": {}}", "normalizer.normalizers: expected an array"},
      {"{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"[a-\"}, \"content\": \"x\"}",
       "normalizer.pattern.Regex '[a-': premature end of char-class"},
      {"{\"type\": \"Replace\", \"pattern\": {\"Glob\": \"*\"}, \"content\": \"x\"}",
       "normalizer.pattern: expected {\"String\": \"...\"} or {\"Regex\": \"...\"}"},
      {"{\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}}", "normalizer.content: expected a string"},
      {"{\"type\": \"Prepend\", \"prepend\": 7}", "normalizer.prepend: expected a string"},
      {"[\"NFC\"]", "normalizer: expected an object with a \"type\""},
  };
  expect_field_errors(base_json, "normalizer", bad, sizeof bad / sizeof *bad);
}

/* The base fixture with pre_tokenizer `pre` (JSON) and a "1 2" merge. */
static ssm_tok *base_with_pre(const char *pre) {
  cJSON *j = base_json();
  cJSON_AddNumberToObject(cJSON_GetObjectItem(model_of(j), "vocab"), "12", 260);
  cJSON_AddItemToArray(cJSON_GetObjectItem(model_of(j), "merges"), cJSON_CreateString("1 2"));
  cJSON_ReplaceItemInObject(j, "pre_tokenizer", pre ? cJSON_Parse(pre) : cJSON_CreateNull());
  return load_json(j);
}

/* Split(pattern) then ByteLevel without its own regex. */
static ssm_tok *base_with_split(const char *pattern, const char *behavior, int invert) {
  char pre[1024];
  snprintf(pre, sizeof pre,
           "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": %s, "
           "\"behavior\": \"%s\", \"invert\": %s}, {\"type\": \"ByteLevel\", "
           "\"add_prefix_space\": false, \"use_regex\": false}]}",
           pattern, behavior, invert ? "true" : "false");
  return base_with_pre(pre);
}

static void test_split_regexes(void) {
  ssm_tok *tok = base_with_split("{\"Regex\": \"x\"}", "Isolated", 0);
  if (!tok) return;
  int32_t t = ssm_tok_token_id(tok, "t"), h = ssm_tok_token_id(tok, "h"),
          e = ssm_tok_token_id(tok, "e"), he = ssm_tok_token_id(tok, "he"),
          sp = ssm_tok_token_id(tok, "Ġ"), the = ssm_tok_token_id(tok, "Ġthe"),
          one = ssm_tok_token_id(tok, "1"), two = ssm_tok_token_id(tok, "2"), twelve = 260;
  ssm_tok_close(tok);
  static const char qwen2[] =
      "{\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|"
      "\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}";
  static const char gpt4_digits[] = "{\"Regex\": \"\\\\p{N}{1,3}\"}";
  struct {
    const char *pattern, *behavior;
    int invert;
    const char *text;
    int32_t want[8];
    size_t n;
  } cases[] = {
      /* Qwen2's \p{N} takes digits one at a time; GPT-4's \p{N}{1,3} together */
      {qwen2, "Isolated", 0, "12 the", {one, two, the}, 3},
      {gpt4_digits, "Isolated", 0, "12", {twelve}, 1},
      /* an empty-matching regex splits before every character */
      {"{\"Regex\": \"x*\"}", "Isolated", 0, " the", {sp, t, h, e}, 4},
      {"{\"String\": \"\"}", "Isolated", 0, " the", {sp, t, h, e}, 4},
      /* a string is literal: "." is not any character */
      {"{\"String\": \".\"}", "Removed", 0, "the.the", {t, he, t, he}, 4},
      /* invert: the letters are kept, what is between them removed */
      {"{\"Regex\": \"[a-z]+\"}", "Removed", 1, " the  the", {t, he, t, he}, 4},
      /* look-behind sees the text before where the search starts */
      {"{\"Regex\": \"(?<=t)h\"}", "Isolated", 0, "the", {t, h, e}, 3},
      {"{\"Regex\": \"h\"}", "MergedWithPrevious", 0, "the", {t, h, e}, 3},
      {"{\"Regex\": \"h\"}", "MergedWithNext", 0, "the", {t, he}, 2},
      {"{\"Regex\": \"[th]\"}", "Contiguous", 0, "the", {t, h, e}, 3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    tok = base_with_split(cases[i].pattern, cases[i].behavior, cases[i].invert);
    if (!tok) continue;
    expect_ids(tok, cases[i].text, cases[i].want, cases[i].n);
    ssm_tok_close(tok);
  }
  /* no pre-tokenizer: no byte-level mapping, and a character without a
   * token (the space; no byte_fallback, no unk_token) is dropped, as the
   * library drops it: "the12" is one word */
  tok = base_with_pre(NULL);
  if (tok) {
    int32_t want[] = {t, he, twelve};
    expect_ids(tok, "the 12", want, 3);
    ssm_tok_close(tok);
  }
  /* ByteLevel need not be last, nor there at all */
  tok = base_with_pre("{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
                      "\"individual_digits\": false}]}");
  if (tok) {
    int32_t want[] = {t, he, twelve};
    expect_ids(tok, "the12", want, 3);
    ssm_tok_close(tok);
  }
}

static void test_pre_tokenizer_errors(void) {
  static const bad_field bad[] = {
      {"{\"type\": \"Metaspace\", \"replacement\": \"ab\"}",
       "pre_tokenizer.replacement: expected one character, not 'ab'"},
      {"{\"type\": \"Metaspace\", \"replacement\": \"\"}",
       "pre_tokenizer.replacement: expected one character"},
      {"{\"type\": \"Metaspace\"}", "pre_tokenizer.replacement: expected a string"},
      {"{\"type\": \"Metaspace\", \"replacement\": \"_\", \"prepend_scheme\": \"sometimes\"}",
       "pre_tokenizer.prepend_scheme: expected \"always\", \"first\" or \"never\""},
      {"{\"type\": \"Metaspace\", \"replacement\": \"_\", \"add_prefix_space\": false}",
       "pre_tokenizer.add_prefix_space: false does not match prepend_scheme \"always\""},
      {"{\"type\": \"Metaspace\", \"replacement\": \"_\", \"split\": \"yes\"}",
       "pre_tokenizer.split: expected true or false"},
      {"{\"type\": \"Split\", \"behavior\": \"Isolated\"}",
       "pre_tokenizer.pattern: expected {\"String\": \"...\"} or {\"Regex\": \"...\"}"},
      {"{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\p{Nope}\"}}",
       "pre_tokenizer.pattern.Regex '\\p{Nope}': invalid character property name {Nope}"},
      {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Sequence\", \"pretokenizers\": "
       "[{\"type\": \"WhitespaceSplit\"}]}]}",
       "pre_tokenizer.pretokenizers[0].pretokenizers[0].type 'WhitespaceSplit' is not supported"},
  };
  expect_field_errors(base_json, "pre_tokenizer", bad, sizeof bad / sizeof *bad);
}

/* A SentencePiece-style BPE (Llama 2, Mistral): <unk> <s> </s>, the 256
 * "<0xXX>" byte tokens, then ▁ a b c h i ▁a a▁ a▁b hi ▁hi, merged by
 * "▁ a", "h i", "▁ hi", "a ▁", "a▁ b" in that order. Normalizer
 * Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer, decoder
 * Replace("▁", " ") + ByteFallback + Fuse + Strip(" ", 1, 0); byte_fallback,
 * unk_token "<unk>", fuse_unk. */
enum { SP_UNK = 0, SP_BOS = 1, SP_BYTE0 = 3, SP_SP = 259, SP_A, SP_B, SP_C, SP_H, SP_I, SP_SPA,
       SP_ASP, SP_ASPB, SP_HI, SP_SPHI };

static cJSON *sp_json(void) {
  cJSON *root = cJSON_CreateObject();
  cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
  static const char *special[] = {"<unk>", "<s>", "</s>"};
  cJSON *model = cJSON_CreateObject();
  cJSON_AddStringToObject(model, "type", "BPE");
  cJSON_AddNullToObject(model, "dropout");
  cJSON_AddStringToObject(model, "unk_token", "<unk>");
  cJSON_AddBoolToObject(model, "fuse_unk", 1);
  cJSON_AddBoolToObject(model, "byte_fallback", 1);
  cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
  for (int i = 0; i < 3; i++) {
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", i);
    cJSON_AddStringToObject(a, "content", special[i]);
    cJSON_AddBoolToObject(a, "special", 1);
    cJSON_AddBoolToObject(a, "normalized", 0);
    cJSON_AddItemToArray(added, a);
    cJSON_AddNumberToObject(vocab, special[i], i);
  }
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    cJSON_AddNumberToObject(vocab, name, SP_BYTE0 + b);
  }
  static const char *tokens[] = {LB, "a", "b", "c", "h", "i", LB "a", "a" LB, "a" LB "b", "hi",
                                 LB "hi"};
  for (int i = 0; i < 11; i++) cJSON_AddNumberToObject(vocab, tokens[i], SP_SP + i);
  static const char *merges[] = {LB " a", "h i", LB " hi", "a " LB, "a" LB " b"};
  cJSON *m = cJSON_AddArrayToObject(model, "merges");
  for (int i = 0; i < 5; i++) cJSON_AddItemToArray(m, cJSON_CreateString(merges[i]));
  cJSON_AddItemToObject(
      root, "normalizer",
      cJSON_Parse("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": "
                  "\"" LB "\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, "
                  "\"content\": \"" LB "\"}]}"));
  cJSON_AddNullToObject(root, "pre_tokenizer");
  cJSON_AddNullToObject(root, "post_processor");
  cJSON_AddItemToObject(
      root, "decoder",
      cJSON_Parse("{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": "
                  "{\"String\": \"" LB "\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, "
                  "{\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, "
                  "\"stop\": 0}]}"));
  cJSON_AddItemToObject(root, "model", model);
  return root;
}

static void set_json(cJSON *j, const char *key, const char *json) {
  cJSON_ReplaceItemInObject(j, key, json ? cJSON_Parse(json) : cJSON_CreateNull());
}

/* é is C3 A9, 日 E6 97 A5 */
#define SP_BYTE(b) (SP_BYTE0 + (b))

static void test_sentencepiece_bpe(void) {
  ssm_tok *tok = load_json(sp_json());
  if (!tok) return;
  expect_ids(tok, "hi", (int32_t[]){SP_SPHI}, 1);
  expect_ids(tok, "a b", (int32_t[]){SP_SPA, SP_SP, SP_B}, 3);
  /* the normalizer runs on each piece the added tokens leave */
  expect_ids(tok, "<s>hi</s>hi", (int32_t[]){SP_BOS, SP_SPHI, 2, SP_SPHI}, 4);
  /* characters not in the vocab fall back to their bytes */
  expect_ids(tok, "h\xC3\xA9", (int32_t[]){SP_SP, SP_H, SP_BYTE(0xC3), SP_BYTE(0xA9)}, 4);
  expect_ids(tok, "", NULL, 0);
  expect_decode(tok, (int32_t[]){SP_SPHI}, 1, 0, "hi");
  expect_decode(tok, (int32_t[]){SP_SPA, SP_SP, SP_B}, 3, 0, "a b");
  expect_decode(tok, (int32_t[]){SP_BOS, SP_SPHI, 2}, 3, 0, "<s> hi</s>");
  expect_decode(tok, (int32_t[]){SP_BOS, SP_SPHI, 2}, 3, 1, "hi");
  expect_decode(tok, (int32_t[]){SP_SP, SP_H, SP_BYTE(0xC3), SP_BYTE(0xA9)}, 4, 0, "h\xC3\xA9");
  /* a run of byte tokens that is not valid UTF-8: one U+FFFD per byte */
  expect_decode(tok, (int32_t[]){SP_BYTE(0xE6), SP_BYTE(0x97), SP_SPHI}, 3, 0,
                "\xEF\xBF\xBD\xEF\xBF\xBD hi");
  expect_decode(tok, (int32_t[]){SP_BYTE('a'), SP_BYTE(0xFF)}, 2, 0, "\xEF\xBF\xBD\xEF\xBF\xBD");
  /* the stream holds a run of byte tokens back until it ends */
  ssm_tok_stream *st = NULL;
  SSM_ASSERT_OK(ssm_tok_stream_create(tok, 0, &st));
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  expect_chunk(st, SP_SPHI, "hi");
  expect_chunk(st, SP_BYTE(0xE6), "");
  expect_chunk(st, SP_BYTE(0x97), "");
  expect_chunk(st, SP_BYTE(0xA5), "");
  expect_chunk(st, SP_SPA, "\xE6\x97\xA5 a");
  expect_chunk(st, SP_BYTE(0xC3), "");
  const char *chunk;
  size_t k;
  SSM_ASSERT_OK(ssm_tok_stream_flush(st, &chunk, &k));
  CU_ASSERT(k == 3 && !memcmp(chunk, "\xEF\xBF\xBD", 3));
  /* after a flush the stream starts again: the leading space is stripped */
  expect_chunk(st, SP_SPHI, "hi");
  ssm_tok_stream_destroy(st);
  ssm_tok_close(tok);
}

/* The SentencePiece fixture with these model options (unk: NULL for none). */
static ssm_tok *sp_model(int byte_fallback, int fuse_unk, const char *unk) {
  cJSON *j = sp_json();
  cJSON_ReplaceItemInObject(model_of(j), "byte_fallback", cJSON_CreateBool(byte_fallback));
  cJSON_ReplaceItemInObject(model_of(j), "fuse_unk", cJSON_CreateBool(fuse_unk));
  cJSON_ReplaceItemInObject(model_of(j), "unk_token",
                            unk ? cJSON_CreateString(unk) : cJSON_CreateNull());
  return load_json(j);
}

static void test_bpe_unk(void) {
  /* no byte_fallback: unk_token, fused */
  ssm_tok *tok = sp_model(0, 1, "<unk>");
  if (tok) {
    expect_ids(tok, "h\xC3\xA9\xC3\xA9" "a", (int32_t[]){SP_SP, SP_H, SP_UNK, SP_A}, 4);
    expect_decode(tok, (int32_t[]){SP_SP, SP_H, SP_UNK, SP_A}, 4, 0, "h<unk>a");
    ssm_tok_close(tok);
  }
  /* not fused: one unk per character */
  tok = sp_model(0, 0, "<unk>");
  if (tok) {
    expect_ids(tok, "h\xC3\xA9\xC3\xA9" "a", (int32_t[]){SP_SP, SP_H, SP_UNK, SP_UNK, SP_A}, 5);
    ssm_tok_close(tok);
  }
  /* neither byte_fallback nor unk_token: the character is dropped, as the
   * library drops it */
  tok = sp_model(0, 1, NULL);
  if (tok) {
    expect_ids(tok, "h\xC3\xA9i", (int32_t[]){SP_SPHI}, 1);
    ssm_tok_close(tok);
  }
  /* byte_fallback, but a byte token is missing: unk_token, which (as in
   * the library) waits for the next character that has a token, so the
   * bytes of è come first */
  cJSON *j = sp_json();
  cJSON_DeleteItemFromObject(cJSON_GetObjectItem(model_of(j), "vocab"), "<0xA9>");
  tok = load_json(j);
  if (tok) {
    expect_ids(tok, "\xC3\xA9\xC3\xA8", (int32_t[]){SP_SP, SP_BYTE(0xC3), SP_BYTE(0xA8), SP_UNK}, 4);
    expect_ids(tok, "\xC3\xA9" "a", (int32_t[]){SP_SP, SP_UNK, SP_A}, 3);
    ssm_tok_close(tok);
  }
  j = sp_json();
  cJSON_ReplaceItemInObject(model_of(j), "unk_token", cJSON_CreateString("<nope>"));
  expect_load_error(j, "model.unk_token '<nope>' is not in model.vocab");
  j = sp_json();
  cJSON_ReplaceItemInObject(model_of(j), "unk_token", cJSON_CreateNumber(0));
  expect_load_error(j, "model.unk_token: expected a string or null");
  j = sp_json();
  cJSON_ReplaceItemInObject(model_of(j), "fuse_unk", cJSON_CreateString("yes"));
  expect_load_error(j, "model.fuse_unk: expected true or false");
  j = sp_json();
  cJSON_AddNumberToObject(cJSON_GetObjectItem(model_of(j), "vocab"), "\xC3", 300);
  expect_load_error(j, "model.vocab: the token of id 300 is not valid UTF-8");
}

static void test_metaspace(void) {
  static const char *pre = "{\"type\": \"Metaspace\", \"replacement\": \"" LB "\", "
                           "\"prepend_scheme\": \"%s\", \"split\": %s}";
  char buf[512];
  struct {
    const char *scheme, *split, *text;
    int32_t want[6];
    size_t n;
  } cases[] = {
      {"first", "true", "hi a", {SP_SPHI, SP_SPA}, 2},
      /* "first": only the piece at the start of the text gets the prefix */
      {"first", "true", "<s>hi a", {SP_BOS, SP_HI, SP_SPA}, 3},
      {"always", "true", "<s>hi a", {SP_BOS, SP_SPHI, SP_SPA}, 3},
      {"never", "true", "hi a", {SP_HI, SP_SPA}, 2},
      /* split: cut before each ▁, so "a▁b" cannot merge; unsplit it does */
      {"never", "true", "a b", {SP_A, SP_SP, SP_B}, 3},
      {"never", "false", "a b", {SP_ASPB}, 1},
      {"always", "true", LB "hi", {SP_SPHI}, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    cJSON *j = sp_json();
    set_json(j, "normalizer", NULL);
    snprintf(buf, sizeof buf, pre, cases[i].scheme, cases[i].split);
    set_json(j, "pre_tokenizer", buf);
    snprintf(buf, sizeof buf, pre, cases[i].scheme, cases[i].split);
    set_json(j, "decoder", buf);
    ssm_tok *tok = load_json(j);
    if (!tok) continue;
    expect_ids(tok, cases[i].text, cases[i].want, cases[i].n);
    ssm_tok_close(tok);
  }
  /* the decoder: ▁ becomes a space, except in the first token, where every
   * ▁ goes (prepend_scheme not "never") */
  cJSON *j = sp_json();
  snprintf(buf, sizeof buf, pre, "first", "true");
  set_json(j, "decoder", buf);
  ssm_tok *tok = load_json(j);
  if (tok) {
    expect_decode(tok, (int32_t[]){SP_SPHI, SP_SPA, SP_ASP}, 3, 0, "hi aa ");
    expect_decode(tok, (int32_t[]){SP_SP, SP_SPHI}, 2, 0, " hi");
    expect_decode(tok, (int32_t[]){SP_BOS, SP_SPHI}, 2, 0, "<s> hi");
    expect_decode(tok, (int32_t[]){SP_BOS, SP_SPHI}, 2, 1, "hi");
    /* byte tokens are text to this decoder */
    expect_decode(tok, (int32_t[]){SP_SPHI, SP_BYTE(0xC3)}, 2, 0, "hi<0xC3>");
    ssm_tok_close(tok);
  }
  j = sp_json();
  snprintf(buf, sizeof buf, pre, "never", "true");
  set_json(j, "decoder", buf);
  tok = load_json(j);
  if (tok) {
    expect_decode(tok, (int32_t[]){SP_SPHI, SP_SPA}, 2, 0, " hi a");
    ssm_tok_close(tok);
  }
}

/* The decoders one by one on the SentencePiece fixture (decoder `dec`). */
static ssm_tok *sp_with_decoder(const char *dec) {
  cJSON *j = sp_json();
  set_json(j, "decoder", dec);
  return load_json(j);
}

static void test_decoders(void) {
  static const char *rep = "{\"type\": \"Replace\", \"pattern\": {\"String\": \"" LB "\"}, "
                           "\"content\": \" \"}";
  char buf[1024];
  /* Strip after Fuse: the leading space of the text and a trailing one,
   * which the stream holds back until it knows it is the end */
  snprintf(buf, sizeof buf, "{\"type\": \"Sequence\", \"decoders\": [%s, {\"type\": \"Fuse\"}, "
           "{\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 1}]}", rep);
  ssm_tok *tok = sp_with_decoder(buf);
  if (tok) {
    expect_decode(tok, (int32_t[]){SP_SPHI, SP_SP}, 2, 0, "hi");
    expect_decode(tok, (int32_t[]){SP_SP, SP_SPHI, SP_SP, SP_SP}, 4, 0, " hi ");
    expect_decode(tok, (int32_t[]){SP_SP}, 1, 0, "");
    ssm_tok_stream *st = NULL;
    SSM_ASSERT_OK(ssm_tok_stream_create(tok, 0, &st));
    CU_ASSERT_PTR_NOT_NULL_FATAL(st);
    expect_chunk(st, SP_SPHI, "hi");
    expect_chunk(st, SP_SP, "");
    expect_chunk(st, SP_SPA, "  a");
    ssm_tok_stream_destroy(st);
    ssm_tok_close(tok);
  }
  /* Strip without Fuse: every token */
  snprintf(buf, sizeof buf, "{\"type\": \"Sequence\", \"decoders\": [%s, {\"type\": \"Strip\", "
           "\"content\": \" \", \"start\": 1, \"stop\": 0}]}", rep);
  tok = sp_with_decoder(buf);
  if (tok) {
    expect_decode(tok, (int32_t[]){SP_SPHI, SP_SPA, SP_ASP}, 3, 0, "hiaa ");
    ssm_tok_close(tok);
  }
  /* Replace with a regex, per token */
  tok = sp_with_decoder("{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"" LB "+|h\"}, "
                        "\"content\": \"_\"}");
  if (tok) {
    expect_decode(tok, (int32_t[]){SP_SP, SP_SP, SP_SPHI}, 3, 0, "____i");
    ssm_tok_close(tok);
  }
  /* ByteFallback alone: runs of byte tokens become text, others stay */
  tok = sp_with_decoder("{\"type\": \"ByteFallback\"}");
  if (tok) {
    expect_decode(tok, (int32_t[]){SP_BYTE(0xE6), SP_BYTE(0x97), SP_BYTE(0xA5), SP_SPHI}, 4, 0,
                  "\xE6\x97\xA5" LB "hi");
    expect_decode(tok, (int32_t[]){SP_BYTE(0xE6), SP_BYTE(0x97)}, 2, 0,
                  "\xEF\xBF\xBD\xEF\xBF\xBD");
    ssm_tok_close(tok);
  }
  /* Metaspace after ByteFallback: a run counts as one token */
  snprintf(buf, sizeof buf, "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, "
           "{\"type\": \"Metaspace\", \"replacement\": \"" LB "\", \"prepend_scheme\": \"always\"}]}");
  tok = sp_with_decoder(buf);
  if (tok) {
    expect_decode(tok, (int32_t[]){SP_BYTE(0xE2), SP_BYTE(0x96), SP_BYTE(0x81), SP_SPHI}, 4, 0,
                  " hi");
    expect_decode(tok, (int32_t[]){SP_BYTE('x'), SP_SPHI}, 2, 0, "x hi");
    ssm_tok_close(tok);
  }
}

static void test_decoder_errors(void) {
  static const bad_field bad[] = {
      {"{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Fuse\"}, {\"type\": \"Replace\", "
       "\"pattern\": {\"String\": \"a\"}, \"content\": \"b\"}]}",
       "decoder.decoders[1]: Replace after Fuse or ByteLevel is not supported"},
      {"{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteLevel\"}, {\"type\": "
       "\"ByteFallback\"}]}",
       "decoder.decoders[1]: ByteFallback after Fuse or ByteLevel is not supported"},
      {"{\"type\": \"Strip\", \"content\": \" \", \"start\": -1, \"stop\": 0}",
       "decoder.start: expected a non-negative integer"},
      {"{\"type\": \"Strip\", \"content\": \"  \", \"start\": 1, \"stop\": 0}",
       "decoder.content: expected one character, not '  '"},
      {"{\"type\": \"Metaspace\", \"replacement\": 5}", "decoder.replacement: expected a string"},
      {"{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"(?<x\"}, \"content\": \"\"}",
       "decoder.pattern.Regex '(?<x': "},
      {"{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"CTC\"}]}",
       "decoder.decoders[0].type 'CTC' is not supported"},
  };
  expect_field_errors(sp_json, "decoder", bad, sizeof bad / sizeof *bad);
}

/* Random ids through every decoder chain above: the stream hands out whole
 * characters only, and what it hands out joins to decode(). */
static void test_stream_equals_decode(void) {
  static const char *decoders[] = {
      NULL, /* the fixture's own */
      "{\"type\": \"ByteFallback\"}",
      "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, {\"type\": "
      "\"Metaspace\", \"replacement\": \"" LB "\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", "
      "\"content\": \" \", \"start\": 2, \"stop\": 2}]}",
      "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteLevel\"}, {\"type\": "
      "\"Metaspace\", \"replacement\": \"" LB "\", \"prepend_scheme\": \"never\"}, {\"type\": "
      "\"Strip\", \"content\": \"" LB "\", \"start\": 0, \"stop\": 3}]}",
  };
  uint32_t seed = 4242;
  for (size_t d = 0; d < sizeof decoders / sizeof *decoders; d++) {
    cJSON *j = sp_json();
    if (decoders[d]) set_json(j, "decoder", decoders[d]);
    ssm_tok *tok = load_json(j);
    if (!tok) continue;
    int bad = 0;
    for (int round = 0; round < 200; round++) {
      int32_t ids[24];
      size_t n = rng_next(&seed) % 24;
      for (size_t i = 0; i < n; i++) {
        uint32_t r = rng_next(&seed) % 4;
        /* bytes of UTF-8 lead and continuation ranges, ASCII, and the rest */
        ids[i] = r == 0   ? SP_BYTE((int32_t)(0x80 + rng_next(&seed) % 0x80))
                 : r == 1 ? SP_BYTE((int32_t)(rng_next(&seed) % 0x80))
                          : (int32_t)(rng_next(&seed) % (SP_SPHI + 1));
      }
      int skip = (int)(rng_next(&seed) % 2);
      char *text;
      size_t len;
      SSM_ASSERT_OK(ssm_tok_decode(tok, ids, n, skip, &text, &len));
      ssm_sb cat = {0};
      bad += stream_all(tok, ids, n, skip, &cat);
      bad += cat.n != len || memcmp(ssm_sb_str(&cat), text, len);
      bad += !utf8_whole(text, len);
      ssm_sb_free(&cat);
      free(text);
    }
    CU_ASSERT_EQUAL(bad, 0);
    ssm_tok_close(tok);
  }
}

int main(void) {
  CU_TestInfo tests[] = {
      {"golden ids, decode and stream vs tokenizers", test_golden_ids},
      {"long prompt round trip", test_roundtrip_long},
      {"token lookup and decode options", test_lookup},
      {"stream decoder never splits a character", test_stream_utf8},
      {"NFC", test_nfc},
      {"ssmc tokenize", test_cli},
      {"base fixture is valid", test_base_is_valid},
      {"malformed tokenizer.json", test_malformed},
      {"mutated tokenizer.json never crashes", test_mutations},
      {"random text round trip", test_random_text},
      {"normalizers", test_normalizers},
      {"normalized added tokens", test_normalized_added_token},
      {"normalizer errors", test_normalizer_errors},
      {"Split with any regex, and no ByteLevel", test_split_regexes},
      {"pre-tokenizer errors", test_pre_tokenizer_errors},
      {"SentencePiece-style BPE: byte_fallback", test_sentencepiece_bpe},
      {"BPE unk_token and fuse_unk", test_bpe_unk},
      {"Metaspace pre-tokenizer and decoder", test_metaspace},
      {"decoders", test_decoders},
      {"decoder errors", test_decoder_errors},
      {"stream equals decode for every decoder chain", test_stream_equals_decode},
      CU_TEST_INFO_NULL,
  };
  return ssm_test_main("tokenizer", tests);
}
