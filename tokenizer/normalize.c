/*
 * normalize.c — the normalizers of tokenizer.json, as the `tokenizers`
 * library runs them on each piece of text that the added tokens leave:
 * NFC, NFD, NFKC and NFKD (libutf8proc), Lowercase (per character, as
 * Rust's char::to_lowercase), Strip (Unicode White_Space at either end),
 * Replace (a string or an Oniguruma regex; every match, empty ones too,
 * becomes the content), Prepend (before non-empty text) and Sequence of
 * them. The library's other normalizers (BertNormalizer, StripAccents,
 * Nmt, Precompiled, ByteLevel) are refused by name.
 */
#include <string.h>

#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"

static const char supported[] =
    "supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend, Sequence";

static ssm_status parse_one(tok_load *L, const cJSON *j, const char *where, void *ctx,
                            int depth) {
  norm_steps *out = ctx;
  const char *ty;
  SSM_TRY(ssm_tok_json_object_type(L, j, where, &ty));
  static const struct {
    const char *name;
    norm_kind kind;
  } simple[] = {{"NFC", NORM_NFC},   {"NFD", NORM_NFD},   {"NFKC", NORM_NFKC},
                {"NFKD", NORM_NFKD}, {"Lowercase", NORM_LOWERCASE}};
  norm_step s = {0};
  for (size_t i = 0; i < sizeof simple / sizeof *simple; i++)
    if (!strcmp(ty, simple[i].name)) {
      s.kind = simple[i].kind;
      return ssm_status_wrap(ssm_vec_push(out, s), "%s: %s", L->path, where);
    }
  if (!strcmp(ty, "Sequence"))
    return ssm_tok_json_sequence(L, j, "normalizers", where, depth, parse_one, out);
  if (!strcmp(ty, "Strip")) {
    s.kind = NORM_STRIP;
    SSM_TRY(ssm_tok_json_bool_required(L, j, "strip_left", where, &s.left));
    SSM_TRY(ssm_tok_json_bool_required(L, j, "strip_right", where, &s.right));
    return ssm_status_wrap(ssm_vec_push(out, s), "%s: %s", L->path, where);
  }
  int prepend = !strcmp(ty, "Prepend");
  if (prepend || !strcmp(ty, "Replace")) {
    const char *text;
    SSM_TRY(ssm_tok_json_string(L, j, prepend ? "prepend" : "content", where, &text));
    s.kind = prepend ? NORM_PREPEND : NORM_REPLACE;
    if (!prepend) SSM_TRY(ssm_tok_json_pattern(L, j, "pattern", where, &s.re));
    ssm_status e = ssm_strdup(text, "its text", &s.text);
    s.text_len = strlen(text);
    if (!e) e = ssm_vec_push(out, s);
    if (e) {
      free(s.text);
      ssm_tok_regex_free(s.re);
    }
    return ssm_status_wrap(e, "%s: %s", L->path, where);
  }
  return TOK_ERR(L, SSM_ERR_UNSUPPORTED, "%s.type '%s' is not supported (%s)", where, ty,
                 supported);
}

ssm_status ssm_tok_normalizers_parse(tok_load *L, const cJSON *root, norm_steps *out) {
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
  if (!n || cJSON_IsNull(n)) return NULL;
  return parse_one(L, n, "normalizer", out, 0);
}

void ssm_tok_normalizers_free(norm_steps *steps) {
  for (size_t i = 0; i < steps->n; i++) {
    ssm_tok_regex_free(steps->items[i].re);
    free(steps->items[i].text);
  }
  ssm_vec_free(steps);
}

/* Strip: White_Space at the ends. */
static void strip(const norm_step *st, const char *s, size_t n, ssm_sb *out, int *io_first) {
  size_t b = 0, e = n, len;
  if (st->left)
    while (b < n && ssm_uni_is_space(ssm_tok_cp_at(s, n, b, &len))) b += len;
  if (st->right)
    while (e > b) {
      size_t k = e - 1;
      while (k > b && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
      if (!ssm_uni_is_space(ssm_tok_cp_at(s, e, k, &len))) break;
      e = k;
    }
  if (b > 0) *io_first = 0;
  ssm_sb_append(out, s + b, e - b);
}

/* Replace: every match becomes the content. The library aligns the content
 * with the last character matched, so a match at the start keeps the
 * text's beginning only when it is empty or one character long and the
 * content is not empty. */
static ssm_status replace(const norm_step *st, const char *s, size_t n, tok_seg_vec *segs,
                          ssm_sb *out, int *io_first) {
  if (!n) return NULL; /* the library matches nothing in empty text */
  SSM_TRY(ssm_tok_regex_segments(st->re, s, n, segs));
  for (size_t k = 0; k < segs->n; k++) {
    const tok_segment *g = &segs->items[k];
    if (!g->match) {
      ssm_sb_append(out, s + g->start, g->end - g->start);
      continue;
    }
    ssm_sb_append(out, st->text, st->text_len);
    if (g->start == 0 && g->end > 0) {
      size_t len;
      ssm_tok_cp_at(s, n, 0, &len);
      if (!st->text_len || g->end > len) *io_first = 0;
    }
  }
  return NULL;
}

ssm_status ssm_tok_normalize(const norm_steps *steps, const char *s, size_t n, ssm_sb *out,
                             int *io_first) {
  if (!steps->n) {
    ssm_sb_append(out, s, n);
    return ssm_sb_status(out, "normalized text");
  }
  /* each step reads `in` and writes `buf[k % 2]`; the last writes `out` */
  ssm_sb buf[2] = {{0}, {0}};
  tok_seg_vec segs = {0};
  ssm_status err = NULL;
  const char *in = s;
  size_t in_n = n;
  for (size_t k = 0; k < steps->n && !err; k++) {
    const norm_step *st = &steps->items[k];
    ssm_sb *o = k + 1 == steps->n ? out : &buf[k % 2];
    size_t mark = o == out ? out->n : 0;
    if (o != out) ssm_sb_clear(o);
    switch (st->kind) {
    case NORM_NFC: err = ssm_uni_normalize(SSM_UNI_NFC, in, in_n, o); break;
    case NORM_NFD: err = ssm_uni_normalize(SSM_UNI_NFD, in, in_n, o); break;
    case NORM_NFKC: err = ssm_uni_normalize(SSM_UNI_NFKC, in, in_n, o); break;
    case NORM_NFKD: err = ssm_uni_normalize(SSM_UNI_NFKD, in, in_n, o); break;
    case NORM_LOWERCASE: ssm_uni_lowercase(in, in_n, o); break;
    case NORM_STRIP: strip(st, in, in_n, o, io_first); break;
    case NORM_REPLACE: err = replace(st, in, in_n, &segs, o, io_first); break;
    case NORM_PREPEND:
      if (in_n) ssm_sb_append(o, st->text, st->text_len);
      ssm_sb_append(o, in, in_n);
      break;
    }
    in = o->s ? o->s + mark : "";
    in_n = o->n - mark;
  }
  if (!err) err = ssm_sb_status(&buf[0], "normalized text");
  if (!err) err = ssm_sb_status(&buf[1], "normalized text");
  if (!err) err = ssm_sb_status(out, "normalized text");
  ssm_sb_free(&buf[0]);
  ssm_sb_free(&buf[1]);
  ssm_vec_free(&segs);
  return err;
}
