/*
 * tokenizer.c — byte-level BPE from a Hugging Face tokenizer.json, giving
 * the ids that the `tokenizers` library gives.
 *
 * Encoding follows the library's pipeline step for step:
 *   1. added tokens whose `normalized` is false are split out of the raw
 *      text (leftmost-longest, with single_word / lstrip / rstrip);
 *   2. the rest is normalized (null or NFC) and the `normalized` added
 *      tokens are split out of it;
 *   3. the pre-tokenizer (ByteLevel, or a Sequence of Split, Punctuation,
 *      Digits and ByteLevel) cuts each remaining piece further; ByteLevel
 *      maps every byte to its printable stand-in character;
 *   4. each piece is merged by BPE: the pair of lowest merge rank first,
 *      leftmost among equals, through a heap (as the library's Word does).
 * The regular expressions of the Split and ByteLevel pre-tokenizers are
 * hand-written matchers of the patterns real tokenizers use (GPT-2's,
 * GPT-4's / Llama-3's, Falcon's "[0-9][0-9][0-9]"); any other regex is
 * refused with a message that names it.
 *
 * Decoding maps each token back to bytes (the ByteLevel decoder); the
 * stream decoder hands out only whole UTF-8 characters and turns invalid
 * bytes into U+FFFD exactly as Rust's String::from_utf8_lossy does, so the
 * concatenated stream equals the library's decode().
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

/* ---- byte-level alphabet ------------------------------------------------- */

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others
 * for 256, 257, ... in byte order. */
static uint32_t byte_cp[256];
static uint8_t cp_byte[324]; /* inverse, for cp < 324 */
static uint8_t cp_is_byte[324];

static int printable_byte(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static void byte_table_init(void) {
  if (byte_cp['A']) return;
  uint32_t next = 256;
  for (int b = 0; b < 256; b++) {
    byte_cp[b] = printable_byte(b) ? (uint32_t)b : next++;
    cp_byte[byte_cp[b]] = (uint8_t)b;
    cp_is_byte[byte_cp[b]] = 1;
  }
}

/* ---- the tokenizer ---------------------------------------------------------- */

typedef enum { PT_BYTELEVEL, PT_SPLIT, PT_PUNCT, PT_DIGITS } pt_kind;
typedef enum { BEH_REMOVED, BEH_ISOLATED, BEH_MERGED_PREV, BEH_MERGED_NEXT, BEH_CONTIGUOUS } pt_behavior;
typedef enum { PAT_GPT2, PAT_GPT4, PAT_DIGITS3, PAT_LITERAL } pt_pattern;

typedef struct {
  pt_kind kind;
  int add_prefix_space, use_regex; /* ByteLevel */
  pt_pattern pattern;              /* Split */
  char *literal;                   /* PAT_LITERAL */
  size_t literal_len;
  int invert;
  pt_behavior behavior; /* Split, Punctuation */
  int individual;       /* Digits */
} pt_step;

typedef struct {
  char *content; /* as matched: the normalized content when `normalized` */
  size_t len;
  int32_t id;
  int special, lstrip, rstrip, single_word, normalized;
} added_token;

typedef struct {
  uint64_t key; /* left id << 32 | right id; 0 = empty (ids are < 2^31 so key 0 is (0,0)) */
  uint32_t rank;
  int32_t id;
  int used;
} merge_slot;

enum { ID_NONE = 0, ID_MODEL = 1, ID_ADDED = 2 };

struct ssm_tok {
  int32_t vocab_size;   /* largest id + 1 */
  char **str;           /* per id: the token's string (NULL: no such id) */
  uint32_t *len;        /* per id: strlen(str[id]) */
  uint8_t *kind;        /* ID_* bits */
  uint8_t *special;     /* per id: an added token marked special */
  char **dec;           /* per id: its decoded bytes */
  uint32_t *dec_len;
  int32_t *vocab_hash;  /* model vocab: open addressing over ids, -1 empty */
  size_t vocab_cap;
  merge_slot *merges;
  size_t merges_cap;
  int32_t byte_id[256]; /* the model id of each byte's stand-in character */
  added_token *added;
  int n_added;
  uint8_t added_first[2][256]; /* [normalized][byte]: some added token starts with it */
  int nfc, ignore_merges;
  pt_step *steps;
  int n_steps;
};

static uint64_t hash_u64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

/* The model id of s[0..n), or -1. */
static int32_t vocab_find(const ssm_tok *t, const char *s, size_t n) {
  size_t mask = t->vocab_cap - 1;
  for (size_t i = ssm_fnv1a(SSM_FNV_INIT, s, n) & mask;; i = (i + 1) & mask) {
    int32_t id = t->vocab_hash[i];
    if (id < 0) return -1;
    if (t->len[id] == n && !memcmp(t->str[id], s, n)) return id;
  }
}

static void vocab_insert(ssm_tok *t, int32_t id) {
  size_t mask = t->vocab_cap - 1;
  size_t i = ssm_fnv1a(SSM_FNV_INIT, t->str[id], t->len[id]) & mask;
  while (t->vocab_hash[i] >= 0) i = (i + 1) & mask;
  t->vocab_hash[i] = id;
}

static const merge_slot *merge_find(const ssm_tok *t, int32_t a, int32_t b) {
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  size_t mask = t->merges_cap - 1;
  for (size_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
    const merge_slot *m = &t->merges[i];
    if (!m->used) return NULL;
    if (m->key == key) return m;
  }
}

/* Later duplicates replace earlier ones, as in the library's HashMap. */
static void merge_insert(ssm_tok *t, int32_t a, int32_t b, uint32_t rank, int32_t id) {
  uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  size_t mask = t->merges_cap - 1;
  size_t i = hash_u64(key) & mask;
  while (t->merges[i].used && t->merges[i].key != key) i = (i + 1) & mask;
  t->merges[i] = (merge_slot){key, rank, id, 1};
}

void ssm_tok_close(ssm_tok *t) {
  if (!t) return;
  for (int32_t i = 0; i < t->vocab_size; i++) {
    free(t->str ? t->str[i] : NULL);
    free(t->dec ? t->dec[i] : NULL);
  }
  free(t->str);
  free(t->len);
  free(t->kind);
  free(t->special);
  free(t->dec);
  free(t->dec_len);
  free(t->vocab_hash);
  free(t->merges);
  for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
  free(t->added);
  for (int i = 0; i < t->n_steps; i++) free(t->steps[i].literal);
  free(t->steps);
  free(t);
}

int32_t ssm_tok_vocab_size(const ssm_tok *t) { return t->vocab_size; }

int32_t ssm_tok_token_id(const ssm_tok *t, const char *token) {
  for (int i = 0; i < t->n_added; i++)
    if (!strcmp(t->str[t->added[i].id], token)) return t->added[i].id;
  return vocab_find(t, token, strlen(token));
}

const char *ssm_tok_token(const ssm_tok *t, int32_t id) {
  return id >= 0 && id < t->vocab_size ? t->str[id] : NULL;
}

int ssm_tok_is_special(const ssm_tok *t, int32_t id) {
  return id >= 0 && id < t->vocab_size && t->special[id];
}

/* ---- loading ----------------------------------------------------------------- */

typedef struct {
  const char *path;
} load_ctx;

#define LOAD_ERR(L, code, ...) ssm_status_wrap(ssm_status_new(code, __VA_ARGS__), "%s", (L)->path)

static const char *type_of(const cJSON *j) {
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(j, "type");
  return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

/* A boolean field: absent or null gives `dflt`; anything but a boolean is
 * an error naming it. */
static ssm_status get_bool(load_ctx *L, const cJSON *obj, const char *key, const char *where,
                           int dflt, int *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  *out = dflt;
  if (!v || cJSON_IsNull(v)) return NULL;
  if (!cJSON_IsBool(v))
    return LOAD_ERR(L, SSM_ERR_INVALID, "%s.%s: expected true or false", where, key);
  *out = cJSON_IsTrue(v);
  return NULL;
}

static int json_int(const cJSON *v, double lo, double hi, int64_t *out) {
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  if (d != floor(d) || d < lo || d > hi) return 0;
  *out = (int64_t)d;
  return 1;
}

static ssm_status parse_behavior(load_ctx *L, const cJSON *j, const char *where, pt_behavior *out) {
  static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                "Contiguous"};
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "behavior");
  if (!b || cJSON_IsNull(b)) {
    *out = BEH_ISOLATED;
    return NULL;
  }
  if (cJSON_IsString(b))
    for (int i = 0; i < 5; i++)
      if (!strcmp(b->valuestring, names[i])) {
        *out = (pt_behavior)i;
        return NULL;
      }
  return LOAD_ERR(L, SSM_ERR_INVALID,
                  "%s.behavior: expected one of Removed, Isolated, MergedWithPrevious, "
                  "MergedWithNext, Contiguous",
                  where);
}

static const char *const gpt2_regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char *const gpt4_regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static ssm_status parse_step(load_ctx *L, const cJSON *j, const char *where, pt_step *s) {
  memset(s, 0, sizeof *s);
  const char *ty = type_of(j);
  if (!cJSON_IsObject(j) || !ty)
    return LOAD_ERR(L, SSM_ERR_INVALID, "%s: expected an object with a \"type\"", where);
  if (!strcmp(ty, "ByteLevel")) {
    s->kind = PT_BYTELEVEL;
    SSM_TRY(get_bool(L, j, "add_prefix_space", where, 1, &s->add_prefix_space));
    return get_bool(L, j, "use_regex", where, 1, &s->use_regex);
  }
  if (!strcmp(ty, "Punctuation")) {
    s->kind = PT_PUNCT;
    return parse_behavior(L, j, where, &s->behavior);
  }
  if (!strcmp(ty, "Digits")) {
    s->kind = PT_DIGITS;
    SSM_TRY(get_bool(L, j, "individual_digits", where, 0, &s->individual));
    s->behavior = s->individual ? BEH_ISOLATED : BEH_CONTIGUOUS;
    return NULL;
  }
  if (!strcmp(ty, "Split")) {
    s->kind = PT_SPLIT;
    SSM_TRY(parse_behavior(L, j, where, &s->behavior));
    SSM_TRY(get_bool(L, j, "invert", where, 0, &s->invert));
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pattern");
    const cJSON *str = cJSON_GetObjectItemCaseSensitive(p, "String");
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(p, "Regex");
    if (cJSON_IsString(str) && str->valuestring[0]) {
      s->pattern = PAT_LITERAL;
      s->literal = ssm_xstrdup(str->valuestring);
      s->literal_len = strlen(str->valuestring);
      return NULL;
    }
    if (!cJSON_IsString(re))
      return LOAD_ERR(L, SSM_ERR_INVALID,
                      "%s.pattern: expected {\"String\": \"...\"} or {\"Regex\": \"...\"}", where);
    if (!strcmp(re->valuestring, gpt2_regex)) s->pattern = PAT_GPT2;
    else if (!strcmp(re->valuestring, gpt4_regex)) s->pattern = PAT_GPT4;
    else if (!strcmp(re->valuestring, "[0-9][0-9][0-9]") || !strcmp(re->valuestring, "\\d{3}"))
      s->pattern = PAT_DIGITS3;
    else
      return LOAD_ERR(L, SSM_ERR_UNSUPPORTED,
                      "%s.pattern.Regex '%s' is not supported (supported: the GPT-2 and "
                      "GPT-4/Llama-3 split patterns and \"[0-9][0-9][0-9]\")",
                      where, re->valuestring);
    return NULL;
  }
  return LOAD_ERR(L, SSM_ERR_UNSUPPORTED,
                  "%s.type '%s' is not supported (supported: ByteLevel, Split, Punctuation, "
                  "Digits, Sequence)",
                  where, ty);
}

static ssm_status parse_pre_tokenizer(load_ctx *L, const cJSON *root, ssm_tok *t) {
  const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
  if (!pt || cJSON_IsNull(pt))
    return LOAD_ERR(L, SSM_ERR_UNSUPPORTED,
                    "pre_tokenizer is null: byte-level BPE needs a ByteLevel pre-tokenizer");
  const char *ty = type_of(pt);
  if (ty && !strcmp(ty, "Sequence")) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    if (!cJSON_IsArray(list))
      return LOAD_ERR(L, SSM_ERR_INVALID, "pre_tokenizer.pretokenizers: expected an array");
    int n = cJSON_GetArraySize(list);
    t->steps = ssm_xcalloc((size_t)n + 1, sizeof *t->steps);
    for (int i = 0; i < n; i++) {
      char where[64];
      snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%d]", i);
      SSM_TRY(parse_step(L, cJSON_GetArrayItem(list, i), where, &t->steps[i]));
      t->n_steps++;
    }
  } else {
    t->steps = ssm_xcalloc(1, sizeof *t->steps);
    SSM_TRY(parse_step(L, pt, "pre_tokenizer", &t->steps[0]));
    t->n_steps = 1;
  }
  int bytelevel = 0;
  for (int i = 0; i < t->n_steps; i++) bytelevel += t->steps[i].kind == PT_BYTELEVEL;
  if (bytelevel != 1)
    return LOAD_ERR(L, SSM_ERR_UNSUPPORTED,
                    "pre_tokenizer: expected exactly one ByteLevel pre-tokenizer, found %d "
                    "(only byte-level BPE is supported)",
                    bytelevel);
  return NULL;
}

static ssm_status parse_normalizer(load_ctx *L, const cJSON *root, ssm_tok *t) {
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
  if (!n || cJSON_IsNull(n)) return NULL;
  const char *ty = type_of(n);
  if (ty && !strcmp(ty, "NFC")) {
    t->nfc = 1;
    return NULL;
  }
  if (ty && !strcmp(ty, "Sequence")) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
    int k = cJSON_GetArraySize(list);
    const char *inner = k == 1 ? type_of(cJSON_GetArrayItem(list, 0)) : NULL;
    if (cJSON_IsArray(list) && k == 0) return NULL;
    if (inner && !strcmp(inner, "NFC")) {
      t->nfc = 1;
      return NULL;
    }
    return LOAD_ERR(L, SSM_ERR_UNSUPPORTED,
                    "normalizer: a Sequence other than [] or [NFC] is not supported");
  }
  return LOAD_ERR(L, SSM_ERR_UNSUPPORTED, "normalizer.type '%s' is not supported (only null or NFC)",
                  ty ? ty : "?");
}

static ssm_status check_processors(load_ctx *L, const cJSON *root) {
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
  const char *ty = type_of(p);
  if (p && !cJSON_IsNull(p) && !(ty && !strcmp(ty, "ByteLevel"))) {
    int ok = 0;
    if (ty && !strcmp(ty, "Sequence")) {
      const cJSON *e;
      ok = 1;
      cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(p, "processors")) {
        const char *et = type_of(e);
        if (!et || strcmp(et, "ByteLevel")) ty = et, ok = 0;
      }
    }
    if (!ok)
      return LOAD_ERR(L, SSM_ERR_UNSUPPORTED,
                      "post_processor.type '%s' is not supported (only null or ByteLevel: ssmc "
                      "adds no tokens around the text)",
                      ty ? ty : "?");
  }
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "decoder");
  ty = type_of(d);
  if (!ty || strcmp(ty, "ByteLevel"))
    return LOAD_ERR(L, SSM_ERR_UNSUPPORTED,
                    "decoder.type '%s' is not supported (only ByteLevel)",
                    d && !cJSON_IsNull(d) ? (ty ? ty : "?") : "null");
  return NULL;
}

static ssm_status check_model_options(load_ctx *L, const cJSON *model, ssm_tok *t) {
  const char *ty = type_of(model);
  if (ty && strcmp(ty, "BPE"))
    return LOAD_ERR(L, SSM_ERR_UNSUPPORTED, "model.type '%s' is not supported (only BPE)", ty);
  if (!ty && !cJSON_GetObjectItemCaseSensitive(model, "merges"))
    return LOAD_ERR(L, SSM_ERR_INVALID, "model: no \"type\" and no \"merges\" (expected BPE)");
  int bf;
  SSM_TRY(get_bool(L, model, "byte_fallback", "model", 0, &bf));
  if (bf)
    return LOAD_ERR(L, SSM_ERR_UNSUPPORTED,
                    "model.byte_fallback true is not supported (only byte-level BPE)");
  SSM_TRY(get_bool(L, model, "ignore_merges", "model", 0, &t->ignore_merges));
  const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
  if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
    return LOAD_ERR(L, SSM_ERR_UNSUPPORTED, "model.dropout is not supported (must be null)");
  static const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
    if (a && !cJSON_IsNull(a) && !(cJSON_IsString(a) && !a->valuestring[0]))
      return LOAD_ERR(L, SSM_ERR_UNSUPPORTED, "model.%s is not supported (must be null)", affixes[i]);
  }
  return NULL;
}

static int utf8_valid(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int k = ssm_utf8_decode(s + i, n - i, &cp);
    if (k <= 0) return 0;
    i += (size_t)k;
  }
  return 1;
}

/* Reads model.vocab and added_tokens into the id tables. */
static ssm_status load_vocab(load_ctx *L, const cJSON *root, const cJSON *model, ssm_tok *t) {
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  if (!cJSON_IsObject(vocab))
    return LOAD_ERR(L, SSM_ERR_INVALID, "model.vocab: missing or not an object");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
    return LOAD_ERR(L, SSM_ERR_INVALID, "added_tokens: expected an array");
  int64_t max_id = -1;
  const cJSON *e;
  int n_vocab = 0;
  cJSON_ArrayForEach(e, vocab) {
    int64_t id;
    if (!json_int(e, 0, 0x7FFFFFFE, &id))
      return LOAD_ERR(L, SSM_ERR_INVALID,
                      "model.vocab: the id of '%s' is not an integer in [0, 2147483646]",
                      e->string);
    if (id > max_id) max_id = id;
    n_vocab++;
  }
  if (!n_vocab) return LOAD_ERR(L, SSM_ERR_INVALID, "model.vocab is empty");
  int i = 0;
  cJSON_ArrayForEach(e, added) {
    int64_t id;
    if (!json_int(cJSON_GetObjectItemCaseSensitive(e, "id"), 0, 0x7FFFFFFE, &id))
      return LOAD_ERR(L, SSM_ERR_INVALID,
                      "added_tokens[%d].id: expected an integer in [0, 2147483646]", i);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
    if (!cJSON_IsString(c) || !c->valuestring[0])
      return LOAD_ERR(L, SSM_ERR_INVALID, "added_tokens[%d].content: expected a non-empty string",
                      i);
    if (!utf8_valid(c->valuestring, strlen(c->valuestring)))
      return LOAD_ERR(L, SSM_ERR_INVALID, "added_tokens[%d].content: not valid UTF-8", i);
    if (id > max_id) max_id = id;
    i++;
  }
  /* the tables are sized by the largest id: bound it by what the file
   * defines, so one id of 1e9 cannot make it allocate gigabytes */
  int64_t defined = (int64_t)n_vocab + i;
  if (max_id >= 2 * defined + 1024)
    return LOAD_ERR(L, SSM_ERR_INVALID, "the largest token id, %lld, is far past the %lld tokens "
                    "the file defines (ids must be nearly dense)", (long long)max_id,
                    (long long)defined);
  t->vocab_size = (int32_t)(max_id + 1);
  size_t n = (size_t)t->vocab_size;
  t->str = calloc(n, sizeof *t->str);
  t->len = calloc(n, sizeof *t->len);
  t->kind = calloc(n, 1);
  t->special = calloc(n, 1);
  t->dec = calloc(n, sizeof *t->dec);
  t->dec_len = calloc(n, sizeof *t->dec_len);
  for (t->vocab_cap = 16; t->vocab_cap < 2 * (size_t)n_vocab;) t->vocab_cap *= 2;
  t->vocab_hash = malloc(t->vocab_cap * sizeof *t->vocab_hash);
  if (!t->str || !t->len || !t->kind || !t->special || !t->dec || !t->dec_len || !t->vocab_hash)
    return LOAD_ERR(L, SSM_ERR_NOMEM, "out of memory for a vocab of %zu ids", n);
  memset(t->vocab_hash, 0xFF, t->vocab_cap * sizeof *t->vocab_hash);
  cJSON_ArrayForEach(e, vocab) {
    int32_t id = (int32_t)e->valuedouble;
    if (t->str[id])
      return LOAD_ERR(L, SSM_ERR_INVALID, "model.vocab: id %d is given to both '%s' and '%s'", id,
                      t->str[id], e->string);
    if (vocab_find(t, e->string, strlen(e->string)) >= 0)
      return LOAD_ERR(L, SSM_ERR_INVALID, "model.vocab: token '%s' appears twice", e->string);
    t->str[id] = ssm_xstrdup(e->string);
    t->len[id] = (uint32_t)strlen(e->string);
    t->kind[id] = ID_MODEL;
    vocab_insert(t, id);
  }
  t->n_added = cJSON_GetArraySize(added);
  t->added = ssm_xcalloc((size_t)t->n_added + 1, sizeof *t->added);
  i = 0;
  cJSON_ArrayForEach(e, added) {
    added_token *a = &t->added[i];
    char where[48];
    snprintf(where, sizeof where, "added_tokens[%d]", i);
    a->id = (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
    const char *content = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
    SSM_TRY(get_bool(L, e, "special", where, 0, &a->special));
    SSM_TRY(get_bool(L, e, "lstrip", where, 0, &a->lstrip));
    SSM_TRY(get_bool(L, e, "rstrip", where, 0, &a->rstrip));
    SSM_TRY(get_bool(L, e, "single_word", where, 0, &a->single_word));
    SSM_TRY(get_bool(L, e, "normalized", where, !a->special, &a->normalized));
    if (t->kind[a->id] & ID_ADDED)
      return LOAD_ERR(L, SSM_ERR_INVALID, "%s: id %d is already added token '%s'", where, a->id,
                      t->str[a->id]);
    if (t->str[a->id] && strcmp(t->str[a->id], content))
      return LOAD_ERR(L, SSM_ERR_INVALID, "%s: id %d is '%s' in model.vocab but '%s' here", where,
                      a->id, t->str[a->id], content);
    if (!t->str[a->id]) {
      t->str[a->id] = ssm_xstrdup(content);
      t->len[a->id] = (uint32_t)strlen(content);
    }
    t->kind[a->id] |= ID_ADDED;
    t->special[a->id] = (uint8_t)a->special;
    if (a->normalized && t->nfc) ssm_uni_nfc(content, strlen(content), &a->content, &a->len);
    else a->content = ssm_xstrdup(content), a->len = strlen(content);
    t->added_first[a->normalized][(unsigned char)a->content[0]] = 1;
    i++;
  }
  return NULL;
}

static ssm_status load_merges(load_ctx *L, const cJSON *model, ssm_tok *t) {
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  if (merges && !cJSON_IsNull(merges) && !cJSON_IsArray(merges))
    return LOAD_ERR(L, SSM_ERR_INVALID, "model.merges: expected an array");
  int n = cJSON_GetArraySize(merges);
  for (t->merges_cap = 16; t->merges_cap < 2 * (size_t)n;) t->merges_cap *= 2;
  t->merges = calloc(t->merges_cap, sizeof *t->merges);
  if (!t->merges) return LOAD_ERR(L, SSM_ERR_NOMEM, "out of memory for %d merges", n);
  ssm_sb joined = {0};
  int rank = 0;
  const cJSON *e;
  ssm_status st = NULL;
  cJSON_ArrayForEach(e, merges) {
    const char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (cJSON_IsString(e)) {
      const char *sp = strchr(e->valuestring, ' ');
      if (sp && !strchr(sp + 1, ' ')) {
        a = e->valuestring, na = (size_t)(sp - a);
        b = sp + 1, nb = strlen(b);
      }
    } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
               cJSON_IsString(cJSON_GetArrayItem(e, 0)) && cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
      a = cJSON_GetArrayItem(e, 0)->valuestring, na = strlen(a);
      b = cJSON_GetArrayItem(e, 1)->valuestring, nb = strlen(b);
    }
    if (!a) {
      st = LOAD_ERR(L, SSM_ERR_INVALID,
                    "model.merges[%d]: expected \"A B\" or [\"A\", \"B\"]", rank);
      break;
    }
    int32_t ia = vocab_find(t, a, na), ib = vocab_find(t, b, nb);
    ssm_sb_clear(&joined);
    ssm_sb_append(&joined, a, na);
    ssm_sb_append(&joined, b, nb);
    int32_t ij = vocab_find(t, joined.s, joined.n);
    if (ia < 0 || ib < 0 || ij < 0) {
      const char *bad = ia < 0 ? a : ib < 0 ? b : joined.s;
      int nbad = (int)(ia < 0 ? na : ib < 0 ? nb : na + nb);
      st = LOAD_ERR(L, SSM_ERR_INVALID, "model.merges[%d]: '%.*s' is not in model.vocab", rank,
                    nbad, bad);
      break;
    }
    merge_insert(t, ia, ib, (uint32_t)rank, ij);
    rank++;
  }
  ssm_sb_free(&joined);
  return st;
}

/* Every byte's stand-in character must be a token, or some text could not
 * be encoded. */
static ssm_status check_bytes(load_ctx *L, ssm_tok *t) {
  for (int b = 0; b < 256; b++) {
    char u[4];
    int k = ssm_utf8_encode(byte_cp[b], u);
    t->byte_id[b] = vocab_find(t, u, (size_t)k);
    if (t->byte_id[b] < 0)
      return LOAD_ERR(L, SSM_ERR_INVALID,
                      "model.vocab lacks the byte-level token '%.*s' for byte 0x%02X (a "
                      "byte-level BPE vocab covers all 256 bytes)",
                      k, u, b);
  }
  return NULL;
}

/* The ByteLevel decoder: a token made only of stand-in characters becomes
 * their bytes; any other token (an added token such as "   ") its own
 * UTF-8. */
static void build_decoded(ssm_tok *t) {
  for (int32_t id = 0; id < t->vocab_size; id++) {
    const char *s = t->str[id];
    if (!s) continue;
    size_t n = strlen(s), k = 0;
    char *d = ssm_xmalloc(n + 1);
    int all = 1;
    for (size_t i = 0; i < n;) {
      uint32_t cp;
      int len = ssm_utf8_decode(s + i, n - i, &cp);
      if (len <= 0 || cp >= 324 || !cp_is_byte[cp]) {
        all = 0;
        break;
      }
      d[k++] = (char)cp_byte[cp];
      i += (size_t)len;
    }
    if (!all) memcpy(d, s, k = n);
    d[k] = 0;
    t->dec[id] = d;
    t->dec_len[id] = (uint32_t)k;
  }
}

ssm_status ssm_tok_open(const char *path, ssm_tok **out) {
  *out = NULL;
  byte_table_init();
  char *text;
  size_t size;
  SSM_TRY(ssm_file_read(path, 0, &text, &size));
  load_ctx L = {path};
  cJSON *root;
  ssm_status ps = ssm_json_parse(path, text, size, &root);
  free(text);
  if (ps) return ps;
  ssm_tok *t = ssm_xcalloc(1, sizeof *t);
  ssm_status s = NULL;
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (!cJSON_IsObject(root)) s = LOAD_ERR(&L, SSM_ERR_INVALID, "expected a JSON object");
  else if (!cJSON_IsObject(model))
    s = LOAD_ERR(&L, SSM_ERR_INVALID, "model: missing or not an object");
  if (!s) s = check_model_options(&L, model, t);
  if (!s) s = parse_normalizer(&L, root, t);
  if (!s) s = parse_pre_tokenizer(&L, root, t);
  if (!s) s = check_processors(&L, root);
  if (!s) s = load_vocab(&L, root, model, t);
  if (!s) s = load_merges(&L, model, t);
  if (!s) s = check_bytes(&L, t);
  cJSON_Delete(root);
  if (s) {
    ssm_tok_close(t);
    return s;
  }
  build_decoded(t);
  *out = t;
  return NULL;
}

/* ---- encoding ------------------------------------------------------------------ */

/* A piece of text being encoded: bytes [off, off+len) of the work buffer,
 * or (id >= 0) an added token already decided. */
typedef struct {
  size_t off, len;
  int32_t id;
} piece;

typedef SSM_VEC(piece) piece_vec;

typedef struct {
  size_t start, end;
  int match;
} segment;

typedef SSM_VEC(segment) seg_vec;

typedef struct {
  int32_t id;
  int prev, next;
  int alive;
} bpe_sym;

typedef struct {
  uint32_t rank;
  int pos;
  int32_t id;
} bpe_merge;

typedef struct {
  const ssm_tok *t;
  SSM_VEC(char) buf; /* the work bytes (not a string); pieces hold offsets into it */
  SSM_VEC(int32_t) ids;
  SSM_VEC(bpe_sym) syms;   /* the piece being merged */
  SSM_VEC(bpe_merge) heap; /* its candidate merges */
  seg_vec segs;
} enc_ctx;

/* Appends s[0..n) to the work buffer (allocated even when n is 0); returns
 * its offset. */
static size_t buf_append(enc_ctx *c, const char *s, size_t n) {
  ssm_vec_reserve(&c->buf, n + 1);
  size_t off = c->buf.n;
  memcpy(c->buf.items + off, s, n);
  c->buf.n += n;
  return off;
}

static void piece_push(piece_vec *v, size_t off, size_t len, int32_t id) {
  if (!len && id < 0) return;
  piece p = {off, len, id};
  ssm_vec_push(v, p);
}

static void seg_push(seg_vec *v, size_t start, size_t end, int match) {
  segment sg = {start, end, match};
  ssm_vec_push(v, sg);
}

static void emit(enc_ctx *c, int32_t id) { ssm_vec_push(&c->ids, id); }

static uint32_t cp_at(const char *s, size_t n, size_t i, size_t *len) {
  uint32_t cp;
  int k = ssm_utf8_decode(s + i, n - i, &cp);
  SSM_ASSERT(k > 0);
  *len = (size_t)k;
  return cp;
}

static int is_word_char(uint32_t cp) {
  int c = ssm_uni_class(cp);
  return c == SSM_UNI_L || c == SSM_UNI_N || c == SSM_UNI_M || cp == '_' || cp == 0x200C ||
         cp == 0x200D;
}

/* The last character before s[i] (i > 0). */
static uint32_t cp_before(const char *s, size_t i, size_t *len) {
  size_t k = i - 1;
  while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
  return cp_at(s, i, k, len);
}

/* Splits s[0..n) (a piece at `off` of the buffer) by the added tokens whose
 * `normalized` is `normalized`: leftmost-longest matches, then the
 * single_word, lstrip and rstrip rules of the library's AddedVocabulary. */
static void split_added(enc_ctx *c, size_t off, size_t n, int normalized, piece_vec *out) {
  const ssm_tok *t = c->t;
  size_t start_offset = 0, i = 0;
  while (i < n) {
    const char *s = c->buf.items + off;
    int best = -1;
    size_t best_len = 0;
    for (; i < n && best < 0; i++) {
      if (!t->added_first[normalized][(unsigned char)s[i]]) continue;
      for (int k = 0; k < t->n_added; k++) {
        const added_token *a = &t->added[k];
        if (a->normalized != normalized || a->len > n - i || a->len <= best_len) continue;
        if (!memcmp(s + i, a->content, a->len)) best = k, best_len = a->len;
      }
    }
    if (best < 0) break;
    size_t start = --i, stop = i + best_len;
    i = stop;
    const added_token *a = &t->added[best];
    size_t len;
    if (a->single_word) {
      int before = start > 0 && is_word_char(cp_before(s, start, &len));
      int after = stop < n && is_word_char(cp_at(s, n, stop, &len));
      if (before || after) continue;
    }
    if (a->lstrip) {
      size_t ns = start;
      while (ns > 0) {
        uint32_t cp = cp_before(s, ns, &len);
        if (!ssm_uni_is_space(cp)) break;
        ns -= len;
      }
      start = ns > start_offset ? ns : start_offset;
    }
    if (a->rstrip)
      while (stop < n && ssm_uni_is_space(cp_at(s, n, stop, &len))) stop += len;
    if (start_offset < start) piece_push(out, off + start_offset, start - start_offset, -1);
    piece_push(out, off + start, stop - start, a->id);
    start_offset = stop;
  }
  if (start_offset < n) piece_push(out, off + start_offset, n - start_offset, -1);
}

/* ---- the split patterns ---- */

static int cls_at(const char *s, size_t n, size_t i, size_t *len, uint32_t *cp) {
  *cp = cp_at(s, n, i, len);
  if (ssm_uni_is_space(*cp)) return -1;
  int c = ssm_uni_class(*cp);
  return c == SSM_UNI_L || c == SSM_UNI_N ? c : 0; /* 0: neither space, letter nor number */
}

/* End of the run of characters of class `cls` starting at i. */
static size_t run_end(const char *s, size_t n, size_t i, int cls, int max) {
  size_t len;
  uint32_t cp;
  for (int k = 0; i < n && (max <= 0 || k < max); k++) {
    if (cls_at(s, n, i, &len, &cp) != cls) break;
    i += len;
  }
  return i;
}

static size_t newline_run_end(const char *s, size_t n, size_t i) {
  while (i < n && (s[i] == '\r' || s[i] == '\n')) i++;
  return i;
}

/* The whitespace alternatives shared by both patterns: \s+(?!\S)|\s+ */
static size_t match_spaces(const char *s, size_t n, size_t i) {
  size_t j = i, last = i, len;
  uint32_t cp;
  while (j < n && cls_at(s, n, j, &len, &cp) == -1) last = j, j += len;
  if (j == n || last == i) return j;
  return last;
}

static int lower_ascii(int ch) { return ch >= 'A' && ch <= 'Z' ? ch + 32 : ch; }

/* 's 't 're 've 'm 'll 'd at s[i] (case-insensitive when `fold`); returns
 * the match end or 0. */
static size_t match_contraction(const char *s, size_t n, size_t i, int fold) {
  if (s[i] != '\'' || i + 1 >= n) return 0;
  int a = fold ? lower_ascii((unsigned char)s[i + 1]) : s[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (fold && i + 2 < n && (unsigned char)s[i + 1] == 0xC5 && (unsigned char)s[i + 2] == 0xBF)
    return i + 3; /* U+017F LONG S folds to s */
  if (i + 2 >= n) return 0;
  int b = fold ? lower_ascii((unsigned char)s[i + 2]) : s[i + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  return 0;
}

/* The end of GPT-2's match at s[i]:
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t match_gpt2(const char *s, size_t n, size_t i) {
  size_t e = match_contraction(s, n, i, 0), len, len1;
  if (e) return e;
  uint32_t cp;
  int c0 = cls_at(s, n, i, &len, &cp);
  if (cp == ' ' && i + len < n) {
    int c1 = cls_at(s, n, i + len, &len1, &cp);
    if (c1 != -1) return run_end(s, n, i + len, c1, 0);
  }
  if (c0 != -1) return run_end(s, n, i, c0, 0);
  return match_spaces(s, n, i);
}

/* The end of GPT-4's (cl100k, Llama 3) match at s[i]:
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t match_gpt4(const char *s, size_t n, size_t i) {
  size_t e = match_contraction(s, n, i, 1), len, len1;
  if (e) return e;
  uint32_t cp, cp1;
  int c0 = cls_at(s, n, i, &len, &cp);
  if (c0 != SSM_UNI_L && c0 != SSM_UNI_N && cp != '\r' && cp != '\n' && i + len < n &&
      cls_at(s, n, i + len, &len1, &cp1) == SSM_UNI_L)
    return run_end(s, n, i + len, SSM_UNI_L, 0);
  if (c0 == SSM_UNI_L) return run_end(s, n, i, SSM_UNI_L, 0);
  if (c0 == SSM_UNI_N) return run_end(s, n, i, SSM_UNI_N, 3);
  if (cp == ' ' && i + len < n && cls_at(s, n, i + len, &len1, &cp1) == 0)
    return newline_run_end(s, n, run_end(s, n, i + len, 0, 0));
  if (c0 == 0) return newline_run_end(s, n, run_end(s, n, i, 0, 0));
  /* whitespace: \s*[\r\n]+ ends after the run's last newline */
  size_t j = i, nl = 0;
  while (j < n && cls_at(s, n, j, &len, &cp) == -1) {
    if (cp == '\r' || cp == '\n') nl = j + 1;
    j += len;
  }
  if (nl) return nl;
  return match_spaces(s, n, i);
}

static int is_punct(uint32_t cp) {
  if (cp < 0x80) return cp > 0x20 && cp < 0x7F && !((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') &&
                        !(cp >= '0' && cp <= '9');
  return ssm_uni_class(cp) == SSM_UNI_P;
}

/* The segments of s[0..n) for a step's pattern: matches and the gaps
 * between them, covering the whole piece, as the library's Pattern does. */
static void find_matches(const pt_step *st, const char *s, size_t n, seg_vec *out) {
  out->n = 0;
  size_t i = 0, gap = 0, len;
  if (st->kind == PT_PUNCT || st->kind == PT_DIGITS) {
    while (i < n) {
      uint32_t cp = cp_at(s, n, i, &len);
      int hit = st->kind == PT_PUNCT ? is_punct(cp) : ssm_uni_class(cp) == SSM_UNI_N;
      if (hit) {
        if (gap < i) seg_push(out, gap, i, 0);
        seg_push(out, i, i + len, 1);
        gap = i + len;
      }
      i += len;
    }
  } else {
    while (i < n) {
      size_t e = 0;
      switch (st->pattern) {
      case PAT_GPT2: e = match_gpt2(s, n, i); break;
      case PAT_GPT4: e = match_gpt4(s, n, i); break;
      case PAT_DIGITS3:
        if (n - i >= 3 && s[i] >= '0' && s[i] <= '9' && s[i + 1] >= '0' && s[i + 1] <= '9' &&
            s[i + 2] >= '0' && s[i + 2] <= '9')
          e = i + 3;
        break;
      case PAT_LITERAL:
        if (n - i >= st->literal_len && !memcmp(s + i, st->literal, st->literal_len))
          e = i + st->literal_len;
        break;
      }
      if (e > i) {
        if (gap < i) seg_push(out, gap, i, 0);
        seg_push(out, i, e, 1);
        gap = i = e;
      } else {
        cp_at(s, n, i, &len);
        i += len;
      }
    }
  }
  if (gap < n) seg_push(out, gap, n, 0);
}

/* Applies a split behavior to the segments, pushing the resulting pieces
 * (offsets relative to `off`). */
static void split_by(const pt_step *st, seg_vec *sv, size_t off, piece_vec *out) {
  segment *v = sv->items;
  size_t n = sv->n;
  if (st->invert)
    for (size_t k = 0; k < n; k++) v[k].match = !v[k].match;
  switch (st->behavior) {
  case BEH_ISOLATED:
    for (size_t k = 0; k < n; k++) piece_push(out, off + v[k].start, v[k].end - v[k].start, -1);
    break;
  case BEH_REMOVED:
    for (size_t k = 0; k < n; k++)
      if (!v[k].match) piece_push(out, off + v[k].start, v[k].end - v[k].start, -1);
    break;
  case BEH_CONTIGUOUS:
  case BEH_MERGED_PREV: {
    size_t w = 0;
    int prev = 0;
    for (size_t k = 0; k < n; k++) {
      int merge = st->behavior == BEH_CONTIGUOUS ? v[k].match == prev : v[k].match && !prev;
      if (merge && w) v[w - 1].end = v[k].end;
      else v[w++] = v[k];
      prev = v[k].match;
    }
    for (size_t k = 0; k < w; k++) piece_push(out, off + v[k].start, v[k].end - v[k].start, -1);
    break;
  }
  case BEH_MERGED_NEXT: {
    /* from the right: a match joins the piece after it */
    size_t w = n;
    int prev = 0;
    for (size_t k = n; k-- > 0;) {
      if (v[k].match && !prev && w < n) v[w].start = v[k].start;
      else v[--w] = v[k];
      prev = v[k].match;
    }
    for (size_t k = w; k < n; k++) piece_push(out, off + v[k].start, v[k].end - v[k].start, -1);
    break;
  }
  }
}

/* The ByteLevel pre-tokenizer on one piece: an optional leading space, the
 * GPT-2 split, then every byte replaced by its stand-in character. */
static void byte_level(enc_ctx *c, const pt_step *st, const piece *p, piece_vec *out) {
  size_t off = p->off, n = p->len;
  if (st->add_prefix_space && c->buf.items[off] != ' ') {
    size_t at = buf_append(c, " ", 1);
    ssm_vec_reserve(&c->buf, n); /* the source is in the buffer: grow before copying */
    memcpy(c->buf.items + c->buf.n, c->buf.items + off, n);
    c->buf.n += n;
    off = at, n++;
  }
  seg_vec *sv = &c->segs;
  if (st->use_regex) {
    find_matches(&(pt_step){.kind = PT_SPLIT, .pattern = PAT_GPT2}, c->buf.items + off, n, sv);
  } else {
    sv->n = 0;
    seg_push(sv, 0, n, 0);
  }
  for (size_t k = 0; k < sv->n; k++) {
    size_t start = c->buf.n;
    for (size_t i = sv->items[k].start; i < sv->items[k].end; i++) {
      char u[4];
      int len = ssm_utf8_encode(byte_cp[(unsigned char)c->buf.items[off + i]], u);
      buf_append(c, u, (size_t)len);
    }
    piece_push(out, start, c->buf.n - start, -1);
  }
}

/* Heap of merges ordered by (rank, pos), smallest first. */
static int merge_less(const bpe_merge *a, const bpe_merge *b) {
  return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(enc_ctx *c, bpe_merge m) {
  ssm_vec_reserve(&c->heap, 1);
  bpe_merge *h = c->heap.items;
  size_t i = c->heap.n++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!merge_less(&m, &h[parent])) break;
    h[i] = h[parent];
    i = parent;
  }
  h[i] = m;
}

static bpe_merge heap_pop(enc_ctx *c) {
  bpe_merge *h = c->heap.items;
  size_t n = --c->heap.n;
  bpe_merge top = h[0], last = h[n];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    const bpe_merge *best = &last;
    if (l < n && merge_less(&h[l], best)) m = l, best = &h[l];
    if (r < n && merge_less(&h[r], best)) m = r;
    if (m == i) break;
    h[i] = h[m];
    i = m;
  }
  if (n) h[i] = last;
  return top;
}

static void push_pair(enc_ctx *c, int pos) {
  const bpe_sym *a = &c->syms.items[pos];
  if (a->next < 0) return;
  const merge_slot *m = merge_find(c->t, a->id, c->syms.items[a->next].id);
  if (m) heap_push(c, (bpe_merge){m->rank, pos, m->id});
}

/* BPE over one byte-level piece (stand-in characters), as the library's
 * Word::merge_all: a heap of candidate merges; stale entries are skipped. */
static void bpe(enc_ctx *c, size_t off, size_t n) {
  const ssm_tok *t = c->t;
  if (t->ignore_merges) {
    int32_t id = vocab_find(t, c->buf.items + off, n);
    if (id >= 0) {
      emit(c, id);
      return;
    }
  }
  size_t len;
  c->syms.n = 0;
  for (size_t i = 0; i < n; i += len) {
    uint32_t cp = cp_at(c->buf.items + off, n, i, &len);
    SSM_ASSERT(cp < 324 && cp_is_byte[cp]);
    int at = (int)c->syms.n;
    bpe_sym sym = {t->byte_id[cp_byte[cp]], at - 1, at + 1, 1};
    ssm_vec_push(&c->syms, sym);
  }
  bpe_sym *syms = c->syms.items;
  size_t ns = c->syms.n;
  syms[ns - 1].next = -1;
  c->heap.n = 0;
  for (size_t i = 0; i + 1 < ns; i++) push_pair(c, (int)i);
  while (c->heap.n) {
    bpe_merge top = heap_pop(c);
    bpe_sym *a = &syms[top.pos];
    if (!a->alive || a->next < 0) continue;
    bpe_sym *b = &syms[a->next];
    const merge_slot *m = merge_find(t, a->id, b->id);
    if (!m || m->id != top.id) continue;
    a->id = top.id;
    b->alive = 0;
    a->next = b->next;
    if (a->next >= 0) syms[a->next].prev = top.pos;
    if (a->prev >= 0) push_pair(c, a->prev);
    push_pair(c, top.pos);
  }
  for (int i = 0; i >= 0; i = syms[i].next) emit(c, syms[i].id);
}

static ssm_status encode(enc_ctx *c, const char *text, size_t len) {
  const ssm_tok *t = c->t;
  for (size_t i = 0; i < len;) {
    uint32_t cp;
    int k = ssm_utf8_decode(text + i, len - i, &cp);
    if (k <= 0)
      return ssm_status_new(SSM_ERR_INVALID, "text is not valid UTF-8 (at byte %zu)", i);
    i += (size_t)k;
  }
  piece_vec a = {0}, b = {0};
  buf_append(c, text, len);
  split_added(c, 0, len, 0, &a);
  for (size_t k = 0; k < a.n; k++) {
    piece p = a.items[k];
    if (p.id >= 0) {
      piece_push(&b, p.off, p.len, p.id);
      continue;
    }
    if (t->nfc) {
      char *norm;
      size_t nn;
      ssm_uni_nfc(c->buf.items + p.off, p.len, &norm, &nn);
      p.off = buf_append(c, norm, nn);
      p.len = nn;
      free(norm);
    }
    split_added(c, p.off, p.len, 1, &b);
  }
  for (int st = 0; st < t->n_steps; st++) {
    const pt_step *step = &t->steps[st];
    a.n = 0;
    for (size_t k = 0; k < b.n; k++) {
      piece p = b.items[k];
      if (p.id >= 0) piece_push(&a, p.off, p.len, p.id);
      else if (step->kind == PT_BYTELEVEL) byte_level(c, step, &p, &a);
      else {
        find_matches(step, c->buf.items + p.off, p.len, &c->segs);
        split_by(step, &c->segs, p.off, &a);
      }
    }
    piece_vec tmp = a;
    a = b, b = tmp;
  }
  for (size_t k = 0; k < b.n; k++) {
    if (b.items[k].id >= 0) emit(c, b.items[k].id);
    else bpe(c, b.items[k].off, b.items[k].len);
  }
  ssm_vec_free(&a);
  ssm_vec_free(&b);
  return NULL;
}

ssm_status ssm_tok_encode(const ssm_tok *t, const char *text, size_t len, int32_t **out_ids,
                          size_t *out_n) {
  *out_ids = NULL;
  *out_n = 0;
  enc_ctx c = {.t = t};
  ssm_status s = encode(&c, text, len);
  ssm_vec_free(&c.buf);
  ssm_vec_free(&c.syms);
  ssm_vec_free(&c.heap);
  ssm_vec_free(&c.segs);
  if (s) {
    ssm_vec_free(&c.ids);
    return s;
  }
  ssm_vec_reserve(&c.ids, 1); /* never NULL, even for no ids */
  *out_ids = c.ids.items;
  *out_n = c.ids.n;
  return NULL;
}

/* ---- decoding ------------------------------------------------------------------ */

struct ssm_tok_stream {
  const ssm_tok *t;
  int skip_special;
  char pending[4]; /* an incomplete UTF-8 sequence held back */
  int n_pending;
  ssm_sb out; /* what the last call handed out */
};

ssm_tok_stream *ssm_tok_stream_create(const ssm_tok *t, int skip_special) {
  ssm_tok_stream *s = ssm_xcalloc(1, sizeof *s);
  s->t = t;
  s->skip_special = skip_special;
  return s;
}

void ssm_tok_stream_destroy(ssm_tok_stream *s) {
  if (!s) return;
  ssm_sb_free(&s->out);
  free(s);
}

/* How many bytes at s[0..n) (n >= 1) are a well-formed start of a UTF-8
 * character: its whole length when complete; for a bad lead byte, 0. */
static size_t utf8_prefix(const unsigned char *s, size_t n, size_t *need) {
  unsigned c = s[0];
  *need = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
          : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (!*need) return 0;
  size_t k = 1;
  for (; k < *need && k < n; k++) {
    unsigned lo = 0x80, hi = 0xBF;
    if (k == 1) {
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    if (s[k] < lo || s[k] > hi) break;
  }
  return k;
}

/* Appends the bytes in[0..n) to the output as from_utf8_lossy would, except
 * that a trailing incomplete sequence is kept in `pending`. */
static void lossy_append(ssm_tok_stream *s, const unsigned char *in, size_t n) {
  for (size_t i = 0; i < n;) {
    size_t need, k = utf8_prefix(in + i, n - i, &need);
    if (need && k == need) {
      ssm_sb_append(&s->out, in + i, k);
      i += k;
    } else if (need && i + k == n) { /* incomplete so far: hold it back */
      memcpy(s->pending, in + i, k);
      s->n_pending = (int)k;
      break;
    } else {
      ssm_sb_append(&s->out, "\xEF\xBF\xBD", 3);
      i += k ? k : 1;
    }
  }
}

ssm_status ssm_tok_stream_feed(ssm_tok_stream *s, int32_t id, const char **out_text,
                               size_t *out_len) {
  const ssm_tok *t = s->t;
  *out_text = "";
  *out_len = 0;
  if (id < 0 || id >= t->vocab_size || !t->str[id])
    return ssm_status_new(SSM_ERR_INVALID, "token id %d is not in the vocabulary (size %d)", id,
                          t->vocab_size);
  if (s->skip_special && t->special[id]) return NULL;
  size_t n = (size_t)s->n_pending + t->dec_len[id];
  unsigned char small[64], *in = n <= sizeof small ? small : ssm_xmalloc(n);
  memcpy(in, s->pending, (size_t)s->n_pending);
  memcpy(in + s->n_pending, t->dec[id], t->dec_len[id]);
  s->n_pending = 0;
  ssm_sb_clear(&s->out);
  lossy_append(s, in, n);
  if (in != small) free(in);
  *out_text = ssm_sb_str(&s->out);
  *out_len = s->out.n;
  return NULL;
}

void ssm_tok_stream_flush(ssm_tok_stream *s, const char **out_text, size_t *out_len) {
  ssm_sb_clear(&s->out);
  if (s->n_pending) ssm_sb_append(&s->out, "\xEF\xBF\xBD", 3);
  s->n_pending = 0;
  *out_text = ssm_sb_str(&s->out);
  *out_len = s->out.n;
}

ssm_status ssm_tok_decode(const ssm_tok *t, const int32_t *ids, size_t n, int skip_special,
                          char **out_text, size_t *out_len) {
  *out_text = NULL;
  *out_len = 0;
  ssm_tok_stream *s = ssm_tok_stream_create(t, skip_special);
  ssm_sb text = {0};
  const char *chunk;
  size_t k;
  for (size_t i = 0; i <= n; i++) {
    if (i < n) {
      ssm_status st = ssm_tok_stream_feed(s, ids[i], &chunk, &k);
      if (st) {
        ssm_sb_free(&text);
        ssm_tok_stream_destroy(s);
        return st;
      }
    } else {
      ssm_tok_stream_flush(s, &chunk, &k);
    }
    ssm_sb_append(&text, chunk, k);
  }
  ssm_tok_stream_destroy(s);
  *out_len = text.n;
  *out_text = ssm_sb_take(&text);
  return NULL;
}
