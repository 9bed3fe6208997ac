/*
 * test_tokenizer_json.c — the tokenizer on tokenizer.json files made by
 * hand: one test per class of malformed or unsupported file (asserting the
 * message, which names the file), seeded mutations that must never crash,
 * and each normalizer, pre-tokenizer, decoder and BPE option, with the ids
 * or text the `tokenizers` library's code gives.
 */
#include <cjson/cJSON.h>
#include <string.h>

#include "tokenizer_test.h"

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
      {"base fixture is valid", test_base_is_valid},
      {"malformed tokenizer.json", test_malformed},
      {"mutated tokenizer.json never crashes", test_mutations},
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
  return ssm_test_main("tokenizer_json", tests);
}
