/*
 * pretokenize.c — the pre-tokenizers of tokenizer.json, each cutting every
 * piece of text into smaller pieces as the `tokenizers` library does:
 *   ByteLevel    an optional leading space, GPT-2's split (use_regex), then
 *                every byte replaced by its printable stand-in character;
 *   Split        the matches of a pattern ({"String"} or {"Regex"}, run by
 *                Oniguruma as written) and the text between them, kept
 *                according to the behavior (Removed, Isolated,
 *                MergedWithPrevious, MergedWithNext, Contiguous), invert;
 *   Punctuation  each punctuation character a match (ASCII punctuation
 *                and Unicode P*), with a behavior;
 *   Digits       each number character (N*) a match, contiguous or not;
 *   Metaspace    spaces replaced by the replacement character, which is
 *                prepended (prepend_scheme always, first or never), then
 *                split before each replacement character;
 * and a Sequence of them. Pieces are byte ranges of the encode's work
 * buffer; a new piece that begins its parent keeps the parent's `first`.
 */
#include <string.h>

#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"

/* ---- pieces and the work buffer --------------------------------------------- */

ssm_status ssm_tok_buf_append(enc_ctx *c, const char *s, size_t n, size_t *out_off) {
  size_t from = (size_t)-1;
  if (c->buf.items && s >= c->buf.items && s < c->buf.items + c->buf.n)
    from = (size_t)(s - c->buf.items); /* inside the buffer, which may move */
  SSM_TRY(ssm_status_wrap(ssm_vec_reserve(&c->buf, n + 1), "encoding text"));
  if (from != (size_t)-1) s = c->buf.items + from;
  *out_off = c->buf.n;
  memcpy(c->buf.items + c->buf.n, s, n);
  c->buf.n += n;
  return NULL;
}

/* An out-of-memory push drops the piece: the encoder's lists drop what they
 * have no memory for, and ssm_tok_encode then returns NOMEM
 * (ssm_nomem_check), whatever the encoder made of it. */
void ssm_tok_piece_push(piece_vec *v, size_t off, size_t len, int32_t id, int first) {
  if (!len && id < 0) return;
  piece p = {off, len, id, first};
  ssm_status_free(ssm_vec_push(v, p));
}

/* ---- the pre-tokenizers -------------------------------------------------------- */

/* GPT-2's pattern, which the ByteLevel pre-tokenizer's use_regex runs. */
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const char supported[] =
    "supported: ByteLevel, Split, Punctuation, Digits, Metaspace, Sequence";

static ssm_status parse_behavior(tok_load *L, const cJSON *j, const char *where,
                                 pt_behavior *out) {
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
  return TOK_ERR(L, SSM_ERR_INVALID,
                 "%s.behavior: expected one of Removed, Isolated, MergedWithPrevious, "
                 "MergedWithNext, Contiguous",
                 where);
}

ssm_status ssm_tok_json_metaspace(tok_load *L, const cJSON *j, const char *where, pt_step *s) {
  s->kind = PT_METASPACE;
  SSM_TRY(ssm_tok_json_char(L, j, "replacement", where, s->repl, &s->repl_cp));
  SSM_TRY(ssm_tok_json_bool(L, j, "split", where, 1, &s->split));
  const cJSON *ps = cJSON_GetObjectItemCaseSensitive(j, "prepend_scheme");
  s->prepend = PREPEND_ALWAYS;
  if (ps && !cJSON_IsNull(ps)) {
    static const char *names[] = {"always", "first", "never"};
    int k = -1;
    for (int i = 0; i < 3 && cJSON_IsString(ps); i++)
      if (!strcmp(ps->valuestring, names[i])) k = i;
    if (k < 0)
      return TOK_ERR(L, SSM_ERR_INVALID,
                     "%s.prepend_scheme: expected \"always\", \"first\" or \"never\"", where);
    s->prepend = (pt_prepend)k;
  }
  int add_prefix_space;
  SSM_TRY(ssm_tok_json_bool(L, j, "add_prefix_space", where, 1, &add_prefix_space));
  if (!add_prefix_space && s->prepend != PREPEND_NEVER)
    return TOK_ERR(L, SSM_ERR_INVALID,
                   "%s.add_prefix_space: false does not match prepend_scheme \"%s\"", where,
                   s->prepend == PREPEND_ALWAYS ? "always" : "first");
  return NULL;
}

static ssm_status parse_step(tok_load *L, const cJSON *j, const char *where, void *ctx,
                             int depth) {
  pt_steps *out = ctx;
  const char *ty;
  SSM_TRY(ssm_tok_json_object_type(L, j, where, &ty));
  if (!strcmp(ty, "Sequence"))
    return ssm_tok_json_sequence(L, j, "pretokenizers", where, depth, parse_step, out);
  /* pushed first, so that what it owns is freed with the others on error */
  pt_step blank = {0};
  SSM_TRY(ssm_status_wrap(ssm_vec_push(out, blank), "%s: %s", L->path, where));
  pt_step *s = &out->items[out->n - 1];
  if (!strcmp(ty, "ByteLevel")) {
    s->kind = PT_BYTELEVEL;
    SSM_TRY(ssm_tok_json_bool(L, j, "add_prefix_space", where, 1, &s->add_prefix_space));
    SSM_TRY(ssm_tok_json_bool(L, j, "use_regex", where, 1, &s->use_regex));
    if (s->use_regex) SSM_TRY(ssm_tok_regex_new(gpt2_regex, 0, &s->re));
    return NULL;
  }
  if (!strcmp(ty, "Punctuation")) {
    s->kind = PT_PUNCT;
    return parse_behavior(L, j, where, &s->behavior);
  }
  if (!strcmp(ty, "Digits")) {
    int individual;
    s->kind = PT_DIGITS;
    SSM_TRY(ssm_tok_json_bool(L, j, "individual_digits", where, 0, &individual));
    s->behavior = individual ? BEH_ISOLATED : BEH_CONTIGUOUS;
    return NULL;
  }
  if (!strcmp(ty, "Split")) {
    s->kind = PT_SPLIT;
    SSM_TRY(parse_behavior(L, j, where, &s->behavior));
    SSM_TRY(ssm_tok_json_bool(L, j, "invert", where, 0, &s->invert));
    return ssm_tok_json_pattern(L, j, "pattern", where, &s->re);
  }
  if (!strcmp(ty, "Metaspace")) return ssm_tok_json_metaspace(L, j, where, s);
  return TOK_ERR(L, SSM_ERR_UNSUPPORTED, "%s.type '%s' is not supported (%s)", where, ty,
                 supported);
}

ssm_status ssm_tok_pre_tokenizers_parse(tok_load *L, const cJSON *root, pt_steps *out) {
  const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
  if (!pt || cJSON_IsNull(pt)) return NULL;
  return parse_step(L, pt, "pre_tokenizer", out, 0);
}

void ssm_tok_pre_tokenizers_free(pt_steps *steps) {
  for (size_t i = 0; i < steps->n; i++) ssm_tok_regex_free(steps->items[i].re);
  ssm_vec_free(steps);
}

/* ---- applying them ---- */

/* Dropped when out of memory, as ssm_tok_piece_push drops a piece. */
static void seg_push(tok_seg_vec *v, size_t start, size_t end, int match) {
  tok_segment sg = {start, end, match};
  ssm_status_free(ssm_vec_push(v, sg));
}

static int is_punct(uint32_t cp) {
  if (cp < 0x80) return cp > 0x20 && cp < 0x7F && !((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') &&
                        !(cp >= '0' && cp <= '9');
  return ssm_uni_class(cp) == SSM_UNI_P;
}

/* The segments of s[0..n) when each character for which the step's test
 * holds is a match (the library's Pattern for a char or a char predicate). */
static void char_segments(const pt_step *st, const char *s, size_t n, tok_seg_vec *out) {
  out->n = 0;
  size_t i = 0, gap = 0, len;
  while (i < n) {
    uint32_t cp = ssm_tok_cp_at(s, n, i, &len);
    int hit = st->kind == PT_PUNCT    ? is_punct(cp)
              : st->kind == PT_DIGITS ? ssm_uni_class(cp) == SSM_UNI_N
                                      : cp == st->repl_cp;
    if (hit) {
      if (gap < i) seg_push(out, gap, i, 0);
      seg_push(out, i, i + len, 1);
      gap = i + len;
    }
    i += len;
  }
  if (gap < n) seg_push(out, gap, n, 0);
}

/* Applies a split behavior to the segments of the piece at `off`, pushing
 * the resulting pieces (empty ones are dropped, as the library drops them). */
static void split_by(pt_behavior behavior, int invert, tok_seg_vec *sv, size_t off, int first,
                     piece_vec *out) {
  tok_segment *v = sv->items;
  size_t n = sv->n, w = 0;
  if (invert)
    for (size_t k = 0; k < n; k++) v[k].match = !v[k].match;
  switch (behavior) {
  case BEH_ISOLATED:
    w = n;
    break;
  case BEH_REMOVED:
    for (size_t k = 0; k < n; k++)
      if (!v[k].match) v[w++] = v[k];
    break;
  case BEH_CONTIGUOUS:
  case BEH_MERGED_PREV: {
    int prev = 0;
    for (size_t k = 0; k < n; k++) {
      int merge = behavior == BEH_CONTIGUOUS ? v[k].match == prev : v[k].match && !prev;
      if (merge && w) v[w - 1].end = v[k].end;
      else v[w++] = v[k];
      prev = v[k].match;
    }
    break;
  }
  case BEH_MERGED_NEXT: {
    /* from the right: a match joins the piece after it */
    size_t r = n;
    int prev = 0;
    for (size_t k = n; k-- > 0;) {
      if (v[k].match && !prev && r < n) v[r].start = v[k].start;
      else v[--r] = v[k];
      prev = v[k].match;
    }
    memmove(v, v + r, (n - r) * sizeof *v);
    w = n - r;
    break;
  }
  }
  for (size_t k = 0; k < w; k++)
    ssm_tok_piece_push(out, off + v[k].start, v[k].end - v[k].start, -1,
                       first && v[k].start == 0);
}

/* ByteLevel on one piece: an optional leading space, the GPT-2 split, then
 * every byte replaced by its stand-in character. */
static ssm_status byte_level(enc_ctx *c, const pt_step *st, const piece *p, piece_vec *out) {
  size_t off = p->off, n = p->len;
  if (st->add_prefix_space && c->buf.items[off] != ' ') {
    size_t at, rest;
    SSM_TRY(ssm_tok_buf_append(c, " ", 1, &at));
    SSM_TRY(ssm_tok_buf_append(c, c->buf.items + off, n, &rest));
    off = at, n++;
  }
  tok_seg_vec *sv = &c->segs;
  if (st->use_regex) {
    SSM_TRY(ssm_tok_regex_segments(st->re, c->buf.items + off, n, sv));
  } else {
    sv->n = 0;
    seg_push(sv, 0, n, 0);
  }
  for (size_t k = 0; k < sv->n; k++) {
    size_t start = c->buf.n, a = sv->items[k].start, b = sv->items[k].end;
    SSM_TRY(ssm_status_wrap(ssm_vec_reserve(&c->buf, 2 * (b - a)), /* each byte becomes at most 2 */
                            "encoding text"));
    for (size_t i = a; i < b; i++) {
      int len = ssm_utf8_encode(ssm_tok_byte_cp[(unsigned char)c->buf.items[off + i]],
                                c->buf.items + c->buf.n);
      c->buf.n += (size_t)len;
    }
    ssm_tok_piece_push(out, start, c->buf.n - start, -1, p->first && a == 0);
  }
  return NULL;
}

/* Metaspace on one piece: spaces become the replacement, which is
 * prepended as the scheme says, then the piece is split before each
 * replacement character (MergedWithNext). */
static ssm_status metaspace(enc_ctx *c, const pt_step *st, const piece *p, piece_vec *out) {
  size_t rl = strlen(st->repl), n = p->len;
  SSM_TRY(ssm_status_wrap(ssm_vec_reserve(&c->buf, rl + n * rl), /* the source stays put */
                          "encoding text"));
  const char *s = c->buf.items + p->off;
  int starts = s[0] == ' ' || (n >= rl && !memcmp(s, st->repl, rl));
  int prepend = !starts && (st->prepend == PREPEND_ALWAYS ||
                            (st->prepend == PREPEND_FIRST && p->first));
  size_t at = c->buf.n;
  char *o = c->buf.items + at;
  if (prepend) memcpy(o, st->repl, rl), o += rl;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == ' ') memcpy(o, st->repl, rl), o += rl;
    else *o++ = s[i];
  }
  c->buf.n = (size_t)(o - c->buf.items);
  if (!st->split) {
    ssm_tok_piece_push(out, at, c->buf.n - at, -1, p->first);
    return NULL;
  }
  char_segments(st, c->buf.items + at, c->buf.n - at, &c->segs);
  split_by(BEH_MERGED_NEXT, 0, &c->segs, at, p->first, out);
  return NULL;
}

ssm_status ssm_tok_pre_tokenize(enc_ctx *c, const pt_step *st, const piece *p, piece_vec *out) {
  switch (st->kind) {
  case PT_BYTELEVEL:
    return byte_level(c, st, p, out);
  case PT_METASPACE:
    return metaspace(c, st, p, out);
  case PT_PUNCT:
  case PT_DIGITS:
    char_segments(st, c->buf.items + p->off, p->len, &c->segs);
    break;
  case PT_SPLIT:
    SSM_TRY(ssm_tok_regex_segments(st->re, c->buf.items + p->off, p->len, &c->segs));
    break;
  }
  split_by(st->behavior, st->invert, &c->segs, p->off, p->first, out);
  return NULL;
}
