/*
 * tokenizer.c — BPE tokenizers from a Hugging Face tokenizer.json, giving
 * the ids that the `tokenizers` library gives: loading, the added tokens,
 * the BPE model and the encode pipeline.
 *
 * Encoding follows the library's pipeline step for step:
 *   1. added tokens whose `normalized` is false are split out of the raw
 *      text (leftmost-longest, with single_word / lstrip / rstrip);
 *   2. the rest is normalized (normalize.c) and the `normalized` added
 *      tokens are split out of it;
 *   3. the pre-tokenizers (pretokenize.c) cut each remaining piece further;
 *   4. each piece is merged by BPE: its characters (or, with byte_fallback,
 *      the "<0xXX>" tokens of a character not in the vocab, or unk_token)
 *      merged by the pair of lowest merge rank first, leftmost among
 *      equals, through a heap (as the library's Word does).
 * Decoding is decode.c's.
 */
#include <math.h>
#include <string.h>

#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"

/* ---- the tokenizer ---------------------------------------------------------- */

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
  free(t->dec);
  free(t->dec_len);
  free(t->kind);
  free(t->special);
  free(t->vocab_hash);
  free(t->merges);
  for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
  free(t->added);
  ssm_tok_normalizers_free(&t->norm);
  ssm_tok_pre_tokenizers_free(&t->pre);
  ssm_tok_decoders_free(&t->dec_steps);
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

static int json_int(const cJSON *v, double lo, double hi, int64_t *out) {
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  if (d != floor(d) || d < lo || d > hi) return 0;
  *out = (int64_t)d;
  return 1;
}

static ssm_status check_processors(tok_load *L, const cJSON *root) {
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
  const char *ty = ssm_tok_json_type(p);
  if (p && !cJSON_IsNull(p) && !(ty && !strcmp(ty, "ByteLevel"))) {
    int ok = 0;
    if (ty && !strcmp(ty, "Sequence")) {
      const cJSON *e;
      ok = 1;
      cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(p, "processors")) {
        const char *et = ssm_tok_json_type(e);
        if (!et || strcmp(et, "ByteLevel")) ty = et, ok = 0;
      }
    }
    if (!ok)
      return TOK_ERR(L, SSM_ERR_UNSUPPORTED,
                     "post_processor.type '%s' is not supported (only null or ByteLevel: ssmc "
                     "adds no tokens around the text)",
                     ty ? ty : "?");
  }
  return NULL;
}

static ssm_status check_model_options(tok_load *L, const cJSON *model, ssm_tok *t) {
  const char *ty = ssm_tok_json_type(model);
  if (ty && strcmp(ty, "BPE"))
    return TOK_ERR(L, SSM_ERR_UNSUPPORTED, "model.type '%s' is not supported (only BPE)", ty);
  if (!ty && !cJSON_GetObjectItemCaseSensitive(model, "merges"))
    return TOK_ERR(L, SSM_ERR_INVALID, "model: no \"type\" and no \"merges\" (expected BPE)");
  SSM_TRY(ssm_tok_json_bool(L, model, "byte_fallback", "model", 0, &t->byte_fallback));
  SSM_TRY(ssm_tok_json_bool(L, model, "fuse_unk", "model", 0, &t->fuse_unk));
  SSM_TRY(ssm_tok_json_bool(L, model, "ignore_merges", "model", 0, &t->ignore_merges));
  const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
  if (unk && !cJSON_IsNull(unk) && !cJSON_IsString(unk))
    return TOK_ERR(L, SSM_ERR_INVALID, "model.unk_token: expected a string or null");
  const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
  if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
    return TOK_ERR(L, SSM_ERR_UNSUPPORTED, "model.dropout is not supported (must be null)");
  static const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
    if (a && !cJSON_IsNull(a) && !(cJSON_IsString(a) && !a->valuestring[0]))
      return TOK_ERR(L, SSM_ERR_UNSUPPORTED, "model.%s is not supported (must be null)", affixes[i]);
  }
  return NULL;
}

/* Reads model.vocab and added_tokens into the id tables. */
static ssm_status load_vocab(tok_load *L, const cJSON *root, const cJSON *model, ssm_tok *t) {
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  if (!cJSON_IsObject(vocab))
    return TOK_ERR(L, SSM_ERR_INVALID, "model.vocab: missing or not an object");
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
    return TOK_ERR(L, SSM_ERR_INVALID, "added_tokens: expected an array");
  int64_t max_id = -1;
  const cJSON *e;
  int n_vocab = 0;
  cJSON_ArrayForEach(e, vocab) {
    int64_t id;
    if (!json_int(e, 0, 0x7FFFFFFE, &id))
      return TOK_ERR(L, SSM_ERR_INVALID,
                     "model.vocab: the id of '%s' is not an integer in [0, 2147483646]",
                     e->string);
    if (!ssm_utf8_valid(e->string, strlen(e->string)))
      return TOK_ERR(L, SSM_ERR_INVALID, "model.vocab: the token of id %lld is not valid UTF-8",
                     (long long)id);
    if (id > max_id) max_id = id;
    n_vocab++;
  }
  if (!n_vocab) return TOK_ERR(L, SSM_ERR_INVALID, "model.vocab is empty");
  int i = 0;
  cJSON_ArrayForEach(e, added) {
    int64_t id;
    if (!json_int(cJSON_GetObjectItemCaseSensitive(e, "id"), 0, 0x7FFFFFFE, &id))
      return TOK_ERR(L, SSM_ERR_INVALID,
                     "added_tokens[%d].id: expected an integer in [0, 2147483646]", i);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
    if (!cJSON_IsString(c) || !c->valuestring[0])
      return TOK_ERR(L, SSM_ERR_INVALID, "added_tokens[%d].content: expected a non-empty string",
                     i);
    if (!ssm_utf8_valid(c->valuestring, strlen(c->valuestring)))
      return TOK_ERR(L, SSM_ERR_INVALID, "added_tokens[%d].content: not valid UTF-8", i);
    if (id > max_id) max_id = id;
    i++;
  }
  /* the tables are sized by the largest id: bound it by what the file
   * defines, so one id of 1e9 cannot make it allocate gigabytes */
  int64_t defined = (int64_t)n_vocab + i;
  if (max_id >= 2 * defined + 1024)
    return TOK_ERR(L, SSM_ERR_INVALID, "the largest token id, %lld, is far past the %lld tokens "
                   "the file defines (ids must be nearly dense)", (long long)max_id,
                   (long long)defined);
  t->vocab_size = (int32_t)(max_id + 1);
  size_t n = (size_t)t->vocab_size;
  for (t->vocab_cap = 16; t->vocab_cap < 2 * (size_t)n_vocab;) t->vocab_cap *= 2;
  ssm_status as = ssm_alloc(n, sizeof *t->str, (void **)&t->str);
  if (!as) as = ssm_alloc(n, sizeof *t->len, (void **)&t->len);
  if (!as) as = ssm_alloc(n, sizeof *t->dec, (void **)&t->dec);
  if (!as) as = ssm_alloc(n, sizeof *t->dec_len, (void **)&t->dec_len);
  if (!as) as = ssm_alloc(n, 1, (void **)&t->kind);
  if (!as) as = ssm_alloc(n, 1, (void **)&t->special);
  if (!as) as = ssm_alloc(t->vocab_cap, sizeof *t->vocab_hash, (void **)&t->vocab_hash);
  if (as) return ssm_status_wrap(as, "%s: the vocabulary of %zu ids", L->path, n);
  memset(t->vocab_hash, 0xFF, t->vocab_cap * sizeof *t->vocab_hash);
  cJSON_ArrayForEach(e, vocab) {
    int32_t id = (int32_t)e->valuedouble;
    if (t->str[id])
      return TOK_ERR(L, SSM_ERR_INVALID, "model.vocab: id %d is given to both '%s' and '%s'", id,
                     t->str[id], e->string);
    if (vocab_find(t, e->string, strlen(e->string)) >= 0)
      return TOK_ERR(L, SSM_ERR_INVALID, "model.vocab: token '%s' appears twice", e->string);
    SSM_TRY(ssm_status_wrap(ssm_strdup(e->string, "a token", &t->str[id]), "%s: model.vocab", L->path));
    t->len[id] = (uint32_t)strlen(e->string);
    t->kind[id] = ID_MODEL;
    vocab_insert(t, id);
  }
  int n_added = cJSON_GetArraySize(added);
  SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)n_added + 1, sizeof *t->added, (void **)&t->added),
                          "%s: added_tokens", L->path));
  t->n_added = n_added;
  i = 0;
  cJSON_ArrayForEach(e, added) {
    added_token *a = &t->added[i];
    char where[48];
    snprintf(where, sizeof where, "added_tokens[%d]", i);
    a->id = (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
    const char *content = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
    SSM_TRY(ssm_tok_json_bool(L, e, "special", where, 0, &a->special));
    SSM_TRY(ssm_tok_json_bool(L, e, "lstrip", where, 0, &a->lstrip));
    SSM_TRY(ssm_tok_json_bool(L, e, "rstrip", where, 0, &a->rstrip));
    SSM_TRY(ssm_tok_json_bool(L, e, "single_word", where, 0, &a->single_word));
    SSM_TRY(ssm_tok_json_bool(L, e, "normalized", where, !a->special, &a->normalized));
    if (t->kind[a->id] & ID_ADDED)
      return TOK_ERR(L, SSM_ERR_INVALID, "%s: id %d is already added token '%s'", where, a->id,
                     t->str[a->id]);
    if (t->str[a->id] && strcmp(t->str[a->id], content))
      return TOK_ERR(L, SSM_ERR_INVALID, "%s: id %d is '%s' in model.vocab but '%s' here", where,
                     a->id, t->str[a->id], content);
    if (!t->str[a->id]) {
      SSM_TRY(ssm_status_wrap(ssm_strdup(content, "its content", &t->str[a->id]), "%s: %s",
                              L->path, where));
      t->len[a->id] = (uint32_t)strlen(content);
    }
    t->kind[a->id] |= ID_ADDED;
    t->special[a->id] = (uint8_t)a->special;
    /* a normalized token is matched, and (as the library since 0.23 does)
     * decoded, in its normalized form */
    ssm_sb norm = {0};
    int first = 1;
    if (a->normalized) {
      ssm_status s = ssm_tok_normalize(&t->norm, content, strlen(content), &norm, &first);
      if (s) {
        ssm_sb_free(&norm);
        return ssm_status_wrap(s, "%s: %s", L->path, where);
      }
    } else {
      ssm_sb_append(&norm, content, strlen(content));
    }
    a->len = norm.n;
    SSM_TRY(ssm_status_wrap(ssm_sb_take(&norm, "its content", &a->content), "%s: %s", L->path, where));
    if (a->normalized && strcmp(a->content, content)) {
      SSM_TRY(ssm_status_wrap(ssm_strdup(a->content, "its content", &t->dec[a->id]), "%s: %s",
                              L->path, where));
      t->dec_len[a->id] = (uint32_t)a->len;
    }
    if (a->len) t->added_first[a->normalized][(unsigned char)a->content[0]] = 1;
    i++;
  }
  return NULL;
}

static ssm_status load_merges(tok_load *L, const cJSON *model, ssm_tok *t) {
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  if (merges && !cJSON_IsNull(merges) && !cJSON_IsArray(merges))
    return TOK_ERR(L, SSM_ERR_INVALID, "model.merges: expected an array");
  int n = cJSON_GetArraySize(merges);
  for (t->merges_cap = 16; t->merges_cap < 2 * (size_t)n;) t->merges_cap *= 2;
  SSM_TRY(ssm_status_wrap(ssm_alloc(t->merges_cap, sizeof *t->merges, (void **)&t->merges),
                          "%s: %d merges", L->path, n));
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
      st = TOK_ERR(L, SSM_ERR_INVALID,
                    "model.merges[%d]: expected \"A B\" or [\"A\", \"B\"]", rank);
      break;
    }
    int32_t ia = vocab_find(t, a, na), ib = vocab_find(t, b, nb);
    ssm_sb_clear(&joined);
    ssm_sb_append(&joined, a, na);
    ssm_sb_append(&joined, b, nb);
    if ((st = ssm_status_wrap(ssm_sb_status(&joined, "a merge"), "%s", L->path))) break;
    int32_t ij = vocab_find(t, joined.s, joined.n);
    if (ia < 0 || ib < 0 || ij < 0) {
      const char *bad = ia < 0 ? a : ib < 0 ? b : joined.s;
      int nbad = (int)(ia < 0 ? na : ib < 0 ? nb : na + nb);
      st = TOK_ERR(L, SSM_ERR_INVALID, "model.merges[%d]: '%.*s' is not in model.vocab", rank,
                    nbad, bad);
      break;
    }
    merge_insert(t, ia, ib, (uint32_t)rank, ij);
    rank++;
  }
  ssm_sb_free(&joined);
  return st;
}

/* Every byte's stand-in character must be a token when a ByteLevel
 * pre-tokenizer makes them, or some text could not be encoded. */
static ssm_status check_bytes(tok_load *L, ssm_tok *t) {
  int byte_level = 0;
  for (size_t i = 0; i < t->pre.n; i++) byte_level |= t->pre.items[i].kind == PT_BYTELEVEL;
  for (int b = 0; b < 256 && byte_level; b++) {
    char u[4];
    int k = ssm_utf8_encode(ssm_tok_byte_cp[b], u);
    if (vocab_find(t, u, (size_t)k) < 0)
      return TOK_ERR(L, SSM_ERR_INVALID,
                     "model.vocab lacks the byte-level token '%.*s' for byte 0x%02X (a "
                     "byte-level BPE vocab covers all 256 bytes)",
                     k, u, b);
  }
  return NULL;
}

/* The ids BPE starts from: single characters (cached for the first code
 * points), the "<0xXX>" byte tokens, unk_token. */
static ssm_status find_model_ids(tok_load *L, const cJSON *model, ssm_tok *t) {
  for (uint32_t cp = 0; cp < TOK_FAST_CHARS; cp++) {
    char u[4];
    int k = ssm_utf8_encode(cp, u);
    t->char_id[cp] = vocab_find(t, u, (size_t)k);
  }
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    t->byte_token[b] = t->byte_fallback ? vocab_find(t, name, 6) : -1;
  }
  t->unk_id = -1;
  const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
  if (cJSON_IsString(unk)) {
    t->unk_id = vocab_find(t, unk->valuestring, strlen(unk->valuestring));
    if (t->unk_id < 0)
      return TOK_ERR(L, SSM_ERR_INVALID, "model.unk_token '%s' is not in model.vocab",
                     unk->valuestring);
  }
  return NULL;
}

ssm_status ssm_tok_open(const char *path, ssm_tok **out) {
  *out = NULL;
  ssm_tok_byte_table_init();
  char *text;
  size_t size;
  SSM_TRY(ssm_file_read(path, 0, &text, &size));
  tok_load L = {path};
  cJSON *root;
  ssm_status ps = ssm_json_parse(path, text, size, &root);
  free(text);
  if (ps) return ps;
  /* the text the builders made (normalized added tokens) is checked once
   * more at the end: a failure inside them is a failure to load */
  unsigned long mark = ssm_nomem_mark();
  ssm_tok *t;
  ssm_status s = ssm_status_wrap(ssm_alloc(1, sizeof *t, (void **)&t), "%s", path);
  if (s) {
    cJSON_Delete(root);
    return s;
  }
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (!cJSON_IsObject(root)) s = TOK_ERR(&L, SSM_ERR_INVALID, "expected a JSON object");
  else if (!cJSON_IsObject(model))
    s = TOK_ERR(&L, SSM_ERR_INVALID, "model: missing or not an object");
  if (!s) s = check_model_options(&L, model, t);
  if (!s) s = ssm_tok_normalizers_parse(&L, root, &t->norm);
  if (!s) s = ssm_tok_pre_tokenizers_parse(&L, root, &t->pre);
  if (!s) s = check_processors(&L, root);
  if (!s) s = ssm_tok_decoders_parse(&L, root, &t->dec_steps);
  if (!s) s = load_vocab(&L, root, model, t);
  if (!s) s = load_merges(&L, model, t);
  if (!s) s = check_bytes(&L, t);
  if (!s) s = find_model_ids(&L, model, t);
  s = ssm_nomem_check(mark, s, path);
  cJSON_Delete(root);
  if (s) {
    ssm_tok_close(t);
    return s;
  }
  *out = t;
  return NULL;
}

/* ---- encoding ------------------------------------------------------------------ */

/* The encoder's lists drop what they have no memory for; ssm_tok_encode
 * then returns NOMEM (ssm_nomem_check), whatever the encoder made of it. */
#define PUSH_OR_DROP(v, x) ssm_status_free(ssm_vec_push(v, x))

static void emit(enc_ctx *c, int32_t id) { PUSH_OR_DROP(&c->ids, id); }

static int is_word_char(uint32_t cp) {
  int c = ssm_uni_class(cp);
  return c == SSM_UNI_L || c == SSM_UNI_N || c == SSM_UNI_M || cp == '_' || cp == 0x200C ||
         cp == 0x200D;
}

/* The last character before s[i] (i > 0). */
static uint32_t cp_before(const char *s, size_t i, size_t *len) {
  size_t k = i - 1;
  while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
  return ssm_tok_cp_at(s, i, k, len);
}

/* Splits s[0..n) (a piece at `off` of the buffer) by the added tokens whose
 * `normalized` is `normalized`: leftmost-longest matches, then the
 * single_word, lstrip and rstrip rules of the library's AddedVocabulary.
 * The piece that begins s keeps `first`. */
static void split_added(enc_ctx *c, size_t off, size_t n, int normalized, int first,
                        piece_vec *out) {
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
      int after = stop < n && is_word_char(ssm_tok_cp_at(s, n, stop, &len));
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
      while (stop < n && ssm_uni_is_space(ssm_tok_cp_at(s, n, stop, &len))) stop += len;
    if (start_offset < start)
      ssm_tok_piece_push(out, off + start_offset, start - start_offset, -1, first && !start_offset);
    ssm_tok_piece_push(out, off + start, stop - start, a->id, first && !start);
    start_offset = stop;
  }
  if (start_offset < n)
    ssm_tok_piece_push(out, off + start_offset, n - start_offset, -1, first && !start_offset);
}

/* Heap of merges ordered by (rank, pos), smallest first. */
static int merge_less(const bpe_merge *a, const bpe_merge *b) {
  return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(enc_ctx *c, bpe_merge m) {
  ssm_status s = ssm_vec_reserve(&c->heap, 1);
  if (s) { /* dropped, as PUSH_OR_DROP */
    ssm_status_free(s);
    return;
  }
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

static void sym_push(enc_ctx *c, int32_t id) {
  int at = (int)c->syms.n;
  bpe_sym sym = {id, at - 1, at + 1, 1};
  PUSH_OR_DROP(&c->syms, sym);
}

/* The model id of the character s[0..n), or -1. */
static int32_t char_id(const ssm_tok *t, const char *s, size_t n, uint32_t cp) {
  return cp < TOK_FAST_CHARS ? t->char_id[cp] : vocab_find(t, s, n);
}

/* The symbols BPE starts from, as the library's merge_word makes them: each
 * character's token; else, with byte_fallback, the "<0xXX>" tokens of its
 * bytes when all exist; else unk_token (consecutive ones fused with
 * fuse_unk); else nothing. */
static void initial_symbols(enc_ctx *c, const char *s, size_t n) {
  const ssm_tok *t = c->t;
  int32_t unk = -1; /* an unk symbol not yet pushed */
  size_t len;
  c->syms.n = 0;
  for (size_t i = 0; i < n; i += len) {
    uint32_t cp = ssm_tok_cp_at(s, n, i, &len);
    int32_t id = char_id(t, s + i, len, cp);
    if (id >= 0) {
      if (unk >= 0) sym_push(c, unk), unk = -1;
      sym_push(c, id);
      continue;
    }
    if (t->byte_fallback) {
      size_t k = 0;
      while (k < len && t->byte_token[(unsigned char)s[i + k]] >= 0) k++;
      if (k == len) {
        /* like the library, a pending unk stays pending across these */
        for (k = 0; k < len; k++) sym_push(c, t->byte_token[(unsigned char)s[i + k]]);
        continue;
      }
    }
    if (t->unk_id >= 0) {
      if (unk >= 0 && !t->fuse_unk) sym_push(c, unk);
      unk = t->unk_id;
    }
  }
  if (unk >= 0) sym_push(c, unk);
}

/* BPE over one piece, as the library's Word::merge_all: a heap of
 * candidate merges; stale entries are skipped. */
static void bpe(enc_ctx *c, size_t off, size_t n) {
  const ssm_tok *t = c->t;
  if (t->ignore_merges) {
    int32_t id = vocab_find(t, c->buf.items + off, n);
    if (id >= 0) {
      emit(c, id);
      return;
    }
  }
  initial_symbols(c, c->buf.items + off, n);
  bpe_sym *syms = c->syms.items;
  size_t ns = c->syms.n;
  if (!ns) return;
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
  size_t off;
  SSM_TRY(ssm_tok_buf_append(c, text, len, &off));
  ssm_status err = NULL;
  split_added(c, off, len, 0, 1, &a);
  for (size_t k = 0; k < a.n && !err; k++) {
    piece p = a.items[k];
    if (p.id >= 0) {
      ssm_tok_piece_push(&b, p.off, p.len, p.id, p.first);
      continue;
    }
    if (t->norm.n) {
      ssm_sb_clear(&c->norm);
      err = ssm_tok_normalize(&t->norm, c->buf.items + p.off, p.len, &c->norm, &p.first);
      if (!err) err = ssm_sb_status(&c->norm, "encoding text");
      if (!err) err = ssm_tok_buf_append(c, ssm_sb_str(&c->norm), c->norm.n, &p.off);
      if (err) break;
      p.len = c->norm.n;
    }
    split_added(c, p.off, p.len, 1, p.first, &b);
  }
  for (size_t st = 0; st < t->pre.n && !err; st++) {
    const pt_step *step = &t->pre.items[st];
    a.n = 0;
    for (size_t k = 0; k < b.n && !err; k++) {
      piece p = b.items[k];
      if (p.id >= 0) ssm_tok_piece_push(&a, p.off, p.len, p.id, p.first);
      else err = ssm_tok_pre_tokenize(c, step, &p, &a);
    }
    piece_vec tmp = a;
    a = b, b = tmp;
  }
  for (size_t k = 0; k < b.n && !err; k++) {
    if (b.items[k].id >= 0) emit(c, b.items[k].id);
    else bpe(c, b.items[k].off, b.items[k].len);
  }
  ssm_vec_free(&a);
  ssm_vec_free(&b);
  return err;
}

ssm_status ssm_tok_encode(const ssm_tok *t, const char *text, size_t len, int32_t **out_ids,
                          size_t *out_n) {
  *out_ids = NULL;
  *out_n = 0;
  enc_ctx c = {.t = t};
  unsigned long mark = ssm_nomem_mark();
  ssm_status s = ssm_nomem_check(mark, encode(&c, text, len), "encoding text");
  if (!s) s = ssm_status_wrap(ssm_vec_reserve(&c.ids, 1), "encoding text"); /* never NULL, even for no ids */
  ssm_vec_free(&c.buf);
  ssm_vec_free(&c.syms);
  ssm_vec_free(&c.heap);
  ssm_vec_free(&c.segs);
  ssm_sb_free(&c.norm);
  if (s) {
    ssm_vec_free(&c.ids);
    return s;
  }
  *out_ids = c.ids.items;
  *out_n = c.ids.n;
  return NULL;
}

/* ---- pieces (for `ssmc tokenize`) ---------------------------------------- */

ssm_status ssm_tok_piece(const ssm_tok *t, int32_t id, char **out_piece, size_t *out_len) {
  *out_piece = NULL;
  *out_len = 0;
  if (id < 0 || id >= t->vocab_size || !t->str[id])
    return ssm_status_new(SSM_ERR_INVALID, "token id %d is not in the vocabulary (size %d)", id,
                          t->vocab_size);
  ssm_sb b = {0};
  for (int v = 0; t->byte_fallback && v < 256 && !b.n; v++)
    if (t->byte_token[v] == id) ssm_sb_append(&b, &(char){(char)v}, 1);
  int bytelevel = 0;
  for (size_t k = 0; k < t->dec_steps.n; k++) bytelevel |= t->dec_steps.items[k].kind == DEC_BYTELEVEL;
  const char *x = t->dec[id] ? t->dec[id] : t->str[id];
  size_t n = t->dec[id] ? t->dec_len[id] : t->len[id], len;
  if (bytelevel && !b.n) { /* stand-in characters to their bytes, when all are */
    for (size_t i = 0; i < n && bytelevel; i += len) {
      uint32_t cp = ssm_tok_cp_at(x, n, i, &len);
      bytelevel = cp < 324 && ssm_tok_cp_is_byte[cp];
      if (bytelevel) ssm_sb_append(&b, &(char){(char)ssm_tok_cp_byte[cp]}, 1);
    }
    if (!bytelevel) ssm_sb_free(&b);
  }
  if (!b.n) { /* as it reads after a token (a decoder may drop the first one's leading
               * space: Metaspace, Strip): what decoding it twice adds to it once */
    char *once, *twice;
    size_t n1, n2;
    const int32_t ids[2] = {id, id};
    SSM_TRY(ssm_tok_decode(t, ids, 1, 0, &once, &n1));
    ssm_status s = ssm_tok_decode(t, ids, 2, 0, &twice, &n2);
    if (!s && n2 >= n1 && !memcmp(twice, once, n1)) ssm_sb_append(&b, twice + n1, n2 - n1);
    else if (!s) ssm_sb_append(&b, once, n1);
    free(once);
    free(twice);
    SSM_TRY(s);
  }
  *out_len = b.n;
  return ssm_sb_take(&b, "a token's text", out_piece);
}
