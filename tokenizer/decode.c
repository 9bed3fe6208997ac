/*
 * decode.c — the decoders of tokenizer.json and the stream decoder.
 *
 * The `tokenizers` library decodes a list of token strings through a chain
 * of decoders, each turning a list of strings into another, and joins what
 * the last one gives. Supported: ByteLevel (stand-in characters back to
 * bytes, the whole list joined and made valid UTF-8 as Rust's
 * String::from_utf8_lossy does), Metaspace (the replacement character
 * becomes a space, or nothing in the first token unless prepend_scheme is
 * "never"), Replace (per token; a string or an Oniguruma regex), ByteFallback
 * (a run of "<0xXX>" tokens becomes its bytes when they are valid UTF-8,
 * else one U+FFFD per byte), Fuse (everything joined into one token),
 * Strip (up to `start` leading and `stop` trailing `content` characters of
 * each token) and a Sequence of them.
 *
 * Here the chain runs on a stream: each step takes the strings the step
 * before hands it, one at a time, and hands on what it can already tell.
 * After a Fuse or a ByteLevel the list is one token that arrives in
 * pieces; the steps that may follow (Metaspace, Strip, Fuse) work on those
 * pieces (Strip holds back trailing content characters until it knows
 * they are not the end); the steps that would need the whole text there
 * (Replace, ByteFallback, ByteLevel) are refused when loading. So the
 * concatenation of what the stream hands out is what decoding all the ids
 * at once gives, and ssm_tok_decode is that stream. ByteLevel holds back an
 * incomplete UTF-8 sequence and ByteFallback a run of byte tokens until it
 * ends, so no step hands on part of a character.
 */
#include <string.h>

#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"

static const char supported[] =
    "supported: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence";
static const char replacement_char[] = "\xEF\xBF\xBD"; /* U+FFFD */

static ssm_status get_size(tok_load *L, const cJSON *j, const char *key, const char *where,
                           size_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e9 ||
      v->valuedouble != (double)(size_t)v->valuedouble)
    return TOK_ERR(L, SSM_ERR_INVALID, "%s.%s: expected a non-negative integer", where, key);
  *out = (size_t)v->valuedouble;
  return NULL;
}

/* parse_one's state: the steps so far, and whether a Fuse or ByteLevel
 * came before. */
typedef struct {
  dec_steps *out;
  int fused;
} parse_ctx;

static ssm_status parse_one(tok_load *L, const cJSON *j, const char *where, void *ctx_,
                            int depth) {
  parse_ctx *ctx = ctx_;
  dec_steps *out = ctx->out;
  const char *ty;
  SSM_TRY(ssm_tok_json_object_type(L, j, where, &ty));
  if (!strcmp(ty, "Sequence"))
    return ssm_tok_json_sequence(L, j, "decoders", where, depth, parse_one, ctx);
  static const struct {
    const char *name;
    dec_kind kind;
    int whole; /* would need the whole text after a Fuse */
  } kinds[] = {{"ByteLevel", DEC_BYTELEVEL, 1},       {"Metaspace", DEC_METASPACE, 0},
               {"Replace", DEC_REPLACE, 1},           {"ByteFallback", DEC_BYTEFALLBACK, 1},
               {"Fuse", DEC_FUSE, 0},                 {"Strip", DEC_STRIP, 0}};
  int k = -1;
  for (int i = 0; i < (int)(sizeof kinds / sizeof *kinds); i++)
    if (!strcmp(ty, kinds[i].name)) k = i;
  if (k < 0)
    return TOK_ERR(L, SSM_ERR_UNSUPPORTED, "%s.type '%s' is not supported (%s)", where, ty,
                   supported);
  if (ctx->fused && kinds[k].whole)
    return TOK_ERR(L, SSM_ERR_UNSUPPORTED,
                   "%s: %s after Fuse or ByteLevel is not supported (it would need the whole "
                   "decoded text at once)",
                   where, ty);
  dec_step step = {.kind = kinds[k].kind, .fused = ctx->fused};
  SSM_TRY(ssm_status_wrap(ssm_vec_push(out, step), "%s: %s", L->path, where));
  dec_step *d = &out->items[out->n - 1];
  switch (d->kind) {
  case DEC_BYTELEVEL:
  case DEC_FUSE:
    ctx->fused = 1;
    break;
  case DEC_BYTEFALLBACK:
    break;
  case DEC_METASPACE: {
    pt_step m = {0};
    SSM_TRY(ssm_tok_json_metaspace(L, j, where, &m));
    memcpy(d->ch, m.repl, sizeof d->ch);
    d->ch_cp = m.repl_cp;
    d->prepend = m.prepend != PREPEND_NEVER;
    break;
  }
  case DEC_REPLACE: {
    const char *content;
    SSM_TRY(ssm_tok_json_string(L, j, "content", where, &content));
    SSM_TRY(ssm_tok_json_pattern(L, j, "pattern", where, &d->re));
    SSM_TRY(ssm_status_wrap(ssm_strdup(content, "content", &d->content), "%s: %s", L->path, where));
    break;
  }
  case DEC_STRIP:
    SSM_TRY(ssm_tok_json_char(L, j, "content", where, d->ch, &d->ch_cp));
    SSM_TRY(get_size(L, j, "start", where, &d->start));
    SSM_TRY(get_size(L, j, "stop", where, &d->stop));
    break;
  }
  return NULL;
}

ssm_status ssm_tok_decoders_parse(tok_load *L, const cJSON *root, dec_steps *out) {
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "decoder");
  if (!d || cJSON_IsNull(d))
    return TOK_ERR(L, SSM_ERR_UNSUPPORTED, "decoder.type 'null' is not supported (%s)",
                   supported);
  parse_ctx ctx = {out, 0};
  return parse_one(L, d, "decoder", &ctx, 0);
}

void ssm_tok_decoders_free(dec_steps *steps) {
  for (size_t i = 0; i < steps->n; i++) {
    ssm_tok_regex_free(steps->items[i].re);
    free(steps->items[i].content);
  }
  ssm_vec_free(steps);
}

/* ---- the stream ---- */

typedef struct {
  size_t index;                    /* Metaspace: tokens seen */
  SSM_VEC(char) run;               /* ByteFallback: the bytes of a run of byte tokens */
  char pending[4];                 /* ByteLevel: an incomplete UTF-8 sequence held back */
  int n_pending;
  size_t lead;                     /* Strip after Fuse: leading characters still to drop */
  size_t held;                     /* Strip after Fuse: trailing ones held back */
  ssm_sb a, b;                     /* what the step hands on */
} dec_state;

struct ssm_tok_stream {
  const ssm_tok *t;
  int skip_special;
  dec_state *st; /* one per decoder step */
  ssm_sb out;    /* what the last call handed out */
};

static void state_reset(const dec_step *d, dec_state *st) {
  st->index = 0;
  st->run.n = 0;
  st->n_pending = 0;
  st->lead = d->start;
  st->held = 0;
}

ssm_status ssm_tok_stream_create(const ssm_tok *t, int skip_special, ssm_tok_stream **out) {
  ssm_tok_stream *s;
  *out = NULL;
  SSM_TRY(ssm_status_wrap(ssm_alloc(1, sizeof *s, (void **)&s), "a streaming decoder"));
  ssm_status st = ssm_alloc(t->dec_steps.n + 1, sizeof *s->st, (void **)&s->st);
  if (st) {
    free(s);
    return ssm_status_wrap(st, "a streaming decoder");
  }
  s->t = t;
  s->skip_special = skip_special;
  for (size_t k = 0; k < t->dec_steps.n; k++) state_reset(&t->dec_steps.items[k], &s->st[k]);
  *out = s;
  return NULL;
}

/* Frees the builders and resets every step: the stream is as new. */
static void stream_clear(ssm_tok_stream *s) {
  for (size_t k = 0; k < s->t->dec_steps.n; k++) {
    ssm_vec_free(&s->st[k].run);
    ssm_sb_free(&s->st[k].a);
    ssm_sb_free(&s->st[k].b);
    state_reset(&s->t->dec_steps.items[k], &s->st[k]);
  }
  ssm_sb_free(&s->out);
}

void ssm_tok_stream_destroy(ssm_tok_stream *s) {
  if (!s) return;
  stream_clear(s);
  free(s->st);
  free(s);
}

/* `err`, or NOMEM when an allocation failed since `mark` (a builder
 * dropped text): then what the stream held is dropped with it, and the
 * stream starts afresh. */
static ssm_status stream_check(ssm_tok_stream *s, unsigned long mark, ssm_status err) {
  err = ssm_nomem_check(mark, err, "decoded text");
  if (ssm_status_code(err) == SSM_ERR_NOMEM) stream_clear(s);
  return err;
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

/* Appends in[0..n) to `out` as from_utf8_lossy would, except that a
 * trailing incomplete sequence is kept in st->pending. */
static void lossy_append(dec_state *st, const unsigned char *in, size_t n, ssm_sb *out) {
  for (size_t i = 0; i < n;) {
    size_t need, k = utf8_prefix(in + i, n - i, &need);
    if (need && k == need) {
      ssm_sb_append(out, in + i, k);
      i += k;
    } else if (need && i + k == n) { /* incomplete so far: hold it back */
      memcpy(st->pending, in + i, k);
      st->n_pending = (int)k;
      break;
    } else {
      ssm_sb_append(out, replacement_char, 3);
      i += k ? k : 1;
    }
  }
}

/* The byte of a "<0xXX>" token (as the library reads it: u8::from_str_radix
 * of the two characters, which also takes "+X"), or -1. */
static int byte_of_token(const char *x, size_t n) {
  if (n != 6 || memcmp(x, "<0x", 3) || x[5] != '>') return -1;
  const char *h = x + 3;
  int digits = 2;
  if (h[0] == '+') h++, digits = 1;
  int v = 0;
  for (int i = 0; i < digits; i++) {
    char c = h[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

static ssm_status push(ssm_tok_stream *s, size_t k, const char *x, size_t n);

/* ByteFallback: hands on the run of byte tokens held so far. */
static ssm_status flush_run(ssm_tok_stream *s, size_t k) {
  dec_state *st = &s->st[k];
  if (!st->run.n) return NULL;
  ssm_sb *o = &st->a;
  ssm_sb_clear(o);
  ssm_sb_append(o, st->run.items, st->run.n);
  size_t nbytes = st->run.n;
  st->run.n = 0;
  if (ssm_utf8_valid(o->s, o->n)) return push(s, k + 1, o->s, o->n);
  for (size_t i = 0; i < nbytes; i++) SSM_TRY(push(s, k + 1, replacement_char, 3));
  return NULL;
}

/* Strip of one whole token. */
static void strip_token(const dec_step *d, const char *x, size_t n, ssm_sb *o) {
  size_t cl = strlen(d->ch), b = 0, e = n;
  for (size_t i = 0; i < d->start && b + cl <= n && !memcmp(x + b, d->ch, cl); i++) b += cl;
  for (size_t i = 0; i < d->stop && e >= b + cl && !memcmp(x + e - cl, d->ch, cl); i++) e -= cl;
  ssm_sb_append(o, x + b, e - b);
}

/* Strip of a piece of the one token left after a Fuse. */
static void strip_piece(const dec_step *d, dec_state *st, const char *x, size_t n, ssm_sb *o) {
  size_t len;
  for (size_t i = 0; i < n; i += len) {
    uint32_t cp = ssm_tok_cp_at(x, n, i, &len);
    if (st->lead) {
      if (cp == d->ch_cp) {
        st->lead--;
        continue;
      }
      st->lead = 0;
    }
    if (cp == d->ch_cp && d->stop) {
      if (++st->held > d->stop) {
        ssm_sb_append(o, x + i, len);
        st->held--;
      }
      continue;
    }
    for (; st->held; st->held--) ssm_sb_append(o, d->ch, strlen(d->ch));
    ssm_sb_append(o, x + i, len);
  }
}

/* Hands x[0..n) to decoder step k (past the last: the output). */
static ssm_status push(ssm_tok_stream *s, size_t k, const char *x, size_t n) {
  const dec_steps *ds = &s->t->dec_steps;
  if (k == ds->n) {
    ssm_sb_append(&s->out, x, n);
    return NULL;
  }
  const dec_step *d = &ds->items[k];
  dec_state *st = &s->st[k];
  ssm_sb *o = &st->a;
  ssm_sb_clear(o);
  size_t len;
  switch (d->kind) {
  case DEC_FUSE:
    return push(s, k + 1, x, n);
  case DEC_BYTELEVEL: {
    /* stand-in characters to bytes, unless some character is not one */
    ssm_sb *bytes = &st->b;
    ssm_sb_clear(bytes);
    ssm_sb_append(bytes, st->pending, (size_t)st->n_pending);
    st->n_pending = 0;
    size_t mark = bytes->n;
    for (size_t i = 0; i < n; i += len) {
      uint32_t cp = ssm_tok_cp_at(x, n, i, &len);
      if (cp >= 324 || !ssm_tok_cp_is_byte[cp]) {
        bytes->n = mark;
        ssm_sb_append(bytes, x, n);
        break;
      }
      char b = (char)ssm_tok_cp_byte[cp];
      ssm_sb_append(bytes, &b, 1);
    }
    lossy_append(st, (const unsigned char *)ssm_sb_str(bytes), bytes->n, o);
    break;
  }
  case DEC_METASPACE: {
    size_t index = d->fused ? 0 : st->index++;
    for (size_t i = 0; i < n; i += len) {
      uint32_t cp = ssm_tok_cp_at(x, n, i, &len);
      if (cp != d->ch_cp) ssm_sb_append(o, x + i, len);
      else if (index || !d->prepend) ssm_sb_append(o, " ", 1);
    }
    break;
  }
  case DEC_REPLACE: {
    if (n) {
      tok_seg_vec segs = {0};
      ssm_status err = ssm_tok_regex_segments(d->re, x, n, &segs);
      for (size_t i = 0; i < segs.n && !err; i++) {
        const tok_segment *g = &segs.items[i];
        if (g->match) ssm_sb_append(o, d->content, strlen(d->content));
        else ssm_sb_append(o, x + g->start, g->end - g->start);
      }
      ssm_vec_free(&segs);
      SSM_TRY(err);
    }
    break;
  }
  case DEC_BYTEFALLBACK: {
    int b = byte_of_token(x, n);
    if (b >= 0) {
      return ssm_vec_push(&st->run, (char)b);
    }
    SSM_TRY(flush_run(s, k));
    return push(s, k + 1, x, n);
  }
  case DEC_STRIP:
    if (d->fused) strip_piece(d, st, x, n, o);
    else strip_token(d, x, n, o);
    break;
  }
  return push(s, k + 1, ssm_sb_str(o), o->n);
}

/* Ends the list at step k: hands on what each step still holds, then
 * resets them. */
static ssm_status finish(ssm_tok_stream *s, size_t k) {
  const dec_steps *ds = &s->t->dec_steps;
  if (k == ds->n) return NULL;
  const dec_step *d = &ds->items[k];
  dec_state *st = &s->st[k];
  ssm_status err = NULL;
  if (d->kind == DEC_BYTEFALLBACK) err = flush_run(s, k);
  if (d->kind == DEC_BYTELEVEL && st->n_pending) err = push(s, k + 1, replacement_char, 3);
  state_reset(d, st);
  ssm_status rest = finish(s, k + 1);
  if (!err) return rest;
  ssm_status_free(rest);
  return err;
}

ssm_status ssm_tok_stream_feed(ssm_tok_stream *s, int32_t id, const char **out_text,
                               size_t *out_len) {
  const ssm_tok *t = s->t;
  *out_text = "";
  *out_len = 0;
  if (id < 0)
    return ssm_status_new(SSM_ERR_INVALID, "token id %d is not in the vocabulary (size %d)", id,
                          t->vocab_size);
  if (id >= t->vocab_size || !t->str[id]) return NULL; /* tokenizer.h: no text */
  if (s->skip_special && t->special[id]) return NULL;
  ssm_sb_clear(&s->out);
  const char *x = t->dec[id] ? t->dec[id] : t->str[id];
  size_t n = t->dec[id] ? t->dec_len[id] : t->len[id];
  unsigned long mark = ssm_nomem_mark();
  SSM_TRY(stream_check(s, mark, push(s, 0, x, n)));
  *out_text = ssm_sb_str(&s->out);
  *out_len = s->out.n;
  return NULL;
}

ssm_status ssm_tok_stream_flush(ssm_tok_stream *s, const char **out_text, size_t *out_len) {
  *out_text = "";
  *out_len = 0;
  unsigned long mark = ssm_nomem_mark();
  ssm_sb_clear(&s->out);
  ssm_status err = stream_check(s, mark, finish(s, 0));
  if (ssm_status_code(err) == SSM_ERR_NOMEM) return err;
  if (err) { /* only a Replace whose regex gives up; what it held is dropped */
    ssm_log("tokenizer: decoding: %s", ssm_status_message(err));
    ssm_status_free(err);
  }
  *out_text = ssm_sb_str(&s->out);
  *out_len = s->out.n;
  return NULL;
}

ssm_status ssm_tok_decode(const ssm_tok *t, const int32_t *ids, size_t n, int skip_special,
                          char **out_text, size_t *out_len) {
  *out_text = NULL;
  *out_len = 0;
  /* strict, unlike the stream: these ids were asked for, not sampled */
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= t->vocab_size || !t->str[ids[i]])
      return ssm_status_new(SSM_ERR_INVALID, "token id %d is not in the vocabulary (size %d)",
                            ids[i], t->vocab_size);
  unsigned long mark = ssm_nomem_mark(); /* the stream's builders, and text */
  ssm_tok_stream *s;
  SSM_TRY(ssm_tok_stream_create(t, skip_special, &s));
  ssm_sb text = {0};
  const char *chunk;
  size_t k;
  for (size_t i = 0; i <= n; i++) {
    ssm_status st = i < n ? ssm_tok_stream_feed(s, ids[i], &chunk, &k)
                          : ssm_tok_stream_flush(s, &chunk, &k);
    if (st) {
      ssm_sb_free(&text);
      ssm_tok_stream_destroy(s);
      return st;
    }
    ssm_sb_append(&text, chunk, k);
  }
  ssm_tok_stream_destroy(s);
  ssm_status st = ssm_nomem_since(mark, "decoded text");
  if (st) {
    ssm_sb_free(&text);
    return st;
  }
  *out_len = text.n;
  return ssm_sb_take(&text, "decoded text", out_text);
}
