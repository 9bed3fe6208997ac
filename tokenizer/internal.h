/*
 * internal.h — what the files of tokenizer/ share and nothing else sees:
 * the tokenizer's structure, the steps of its pipeline as read from
 * tokenizer.json (normalizers, pre-tokenizers, decoders), the work state
 * of one encode, and the regular expressions that some steps run.
 *
 * From the bottom up (each file uses only those listed before it):
 *   unicode.c      UTF-8, character classes, normalization forms, and
 *                  GPT-2's byte-level alphabet (unicode.h)
 *   regex.c        patterns through Oniguruma, matched as the library does
 *   json.c         the readers of tokenizer.json's fields that steps share
 *   normalize.c    the normalizers
 *   pretokenize.c  the pre-tokenizers and the split behaviors, and the
 *                  pieces of the encode's work buffer they cut
 *   decode.c       the decoders and the stream decoder
 *   tokenizer.c    loading, added tokens, the BPE model, encode
 */
#ifndef SSM_TOKENIZER_INTERNAL_H
#define SSM_TOKENIZER_INTERNAL_H

#include <cjson/cJSON.h>

#include "tokenizer/tokenizer.h"

/* ---- regular expressions (regex.c) ---------------------------------------- */

/* A compiled pattern: Oniguruma with the syntax, options and encoding that
 * the library's onig crate uses (ONIG_SYNTAX_ONIGURUMA, ONIG_OPTION_NONE,
 * UTF-8). Immutable; matching may run on several threads. */
typedef struct tok_regex tok_regex;

/* Compiles `pattern` (NUL-terminated UTF-8); `literal`: the pattern is a
 * plain string, escaped as Rust's regex::escape does before compiling (the
 * library's {"String": ...} patterns). An error carries Oniguruma's
 * message; the caller adds the place. */
ssm_status ssm_tok_regex_new(const char *pattern, int literal, tok_regex **out);
void ssm_tok_regex_free(tok_regex *re);

/* A stretch [start, end) of a piece; `match`: the pattern matched it. */
typedef struct {
  size_t start, end;
  int match;
} tok_segment;

typedef SSM_VEC(tok_segment) tok_seg_vec;

/* The segments of s[0..n) (n > 0): every match, empty ones too, and the
 * gaps between them, covering the text, as the library's Pattern for its
 * SysRegex makes them (onig's find_iter: an empty match right after the
 * previous match is skipped). Fails only when Oniguruma gives up (its
 * retry limit), where the library panics. */
ssm_status ssm_tok_regex_segments(const tok_regex *re, const char *s, size_t n, tok_seg_vec *out);

/* ---- reading tokenizer.json (json.c) --------------------------------------- */

typedef struct {
  const char *path;
} tok_load;

/* An error status whose message starts with the file's path. */
#define TOK_ERR(L, code, ...) ssm_status_wrap(ssm_status_new(code, __VA_ARGS__), "%s", (L)->path)

/* The "type" string of an object, or NULL. */
const char *ssm_tok_json_type(const cJSON *j);
/* The "type" of j, which must be an object that has one. */
ssm_status ssm_tok_json_object_type(tok_load *L, const cJSON *j, const char *where,
                                    const char **out_type);
/* A Sequence at `where`: calls `fn` on each element of the array j.key
 * with its place ("WHERE.KEY[i]") and depth + 1. */
typedef ssm_status (*tok_json_fn)(tok_load *L, const cJSON *e, const char *where, void *ctx,
                                  int depth);
ssm_status ssm_tok_json_sequence(tok_load *L, const cJSON *j, const char *key, const char *where,
                                 int depth, tok_json_fn fn, void *ctx);
/* A boolean field: absent or null gives `dflt` (required: absent is an
 * error); anything but a boolean is an error naming it. */
ssm_status ssm_tok_json_bool(tok_load *L, const cJSON *obj, const char *key, const char *where,
                        int dflt, int *out);
ssm_status ssm_tok_json_bool_required(tok_load *L, const cJSON *obj, const char *key,
                                 const char *where, int *out);
/* A string field, required, valid UTF-8 (it may be empty). */
ssm_status ssm_tok_json_string(tok_load *L, const cJSON *obj, const char *key, const char *where,
                          const char **out);
/* A string field holding exactly one character: its UTF-8 into out (5
 * bytes room, NUL-terminated), its code point into *out_cp. */
ssm_status ssm_tok_json_char(tok_load *L, const cJSON *obj, const char *key, const char *where,
                        char *out, uint32_t *out_cp);
/* {"String": "..."} or {"Regex": "..."} at obj.key, compiled. */
ssm_status ssm_tok_json_pattern(tok_load *L, const cJSON *obj, const char *key, const char *where,
                           tok_regex **out);

/* ---- normalizers (normalize.c) ------------------------------------------------ */

typedef enum {
  NORM_NFC,
  NORM_NFD,
  NORM_NFKC,
  NORM_NFKD,
  NORM_LOWERCASE,
  NORM_STRIP,
  NORM_REPLACE,
  NORM_PREPEND,
} norm_kind;

typedef struct {
  norm_kind kind;
  int left, right; /* Strip */
  tok_regex *re;   /* Replace */
  char *text;      /* Replace: the content; Prepend: the prefix */
  size_t text_len;
} norm_step;

typedef SSM_VEC(norm_step) norm_steps;

/* Reads root.normalizer (null, one normalizer or a Sequence, nested
 * Sequences flattened) into `out`. */
ssm_status ssm_tok_normalizers_parse(tok_load *L, const cJSON *root, norm_steps *out);
void ssm_tok_normalizers_free(norm_steps *steps);
/* Runs the normalizers over s[0..n) (valid UTF-8), appending the result to
 * `out`. *io_first says whether the text begins at the start of the
 * original input; it is cleared when a step drops that beginning (Strip
 * of leading space, a Replace of it), as the library's alignments would
 * move it. */
ssm_status ssm_tok_normalize(const norm_steps *steps, const char *s, size_t n, ssm_sb *out,
                         int *io_first);

/* ---- pre-tokenizers (pretokenize.c) ---------------------------------------------- */

typedef enum { PT_BYTELEVEL, PT_SPLIT, PT_PUNCT, PT_DIGITS, PT_METASPACE } pt_kind;
typedef enum {
  BEH_REMOVED,
  BEH_ISOLATED,
  BEH_MERGED_PREV,
  BEH_MERGED_NEXT,
  BEH_CONTIGUOUS
} pt_behavior;
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } pt_prepend;

typedef struct {
  pt_kind kind;
  int add_prefix_space, use_regex; /* ByteLevel */
  tok_regex *re;                   /* Split; ByteLevel with use_regex: GPT-2's pattern */
  int invert;                      /* Split */
  pt_behavior behavior;            /* Split, Punctuation, Digits */
  char repl[5];                    /* Metaspace: the replacement character */
  uint32_t repl_cp;
  pt_prepend prepend;
  int split;
} pt_step;

typedef SSM_VEC(pt_step) pt_steps;

/* Reads a Metaspace object (a pre-tokenizer or a decoder): replacement,
 * prepend_scheme (or the older add_prefix_space), split. */
ssm_status ssm_tok_json_metaspace(tok_load *L, const cJSON *j, const char *where, pt_step *s);
/* Reads root.pre_tokenizer (null, one or a Sequence, flattened). */
ssm_status ssm_tok_pre_tokenizers_parse(tok_load *L, const cJSON *root, pt_steps *out);
void ssm_tok_pre_tokenizers_free(pt_steps *steps);

/* ---- decoders (decode.c) --------------------------------------------------------------- */

typedef enum {
  DEC_BYTELEVEL,
  DEC_METASPACE,
  DEC_REPLACE,
  DEC_BYTEFALLBACK,
  DEC_FUSE,
  DEC_STRIP,
} dec_kind;

typedef struct {
  dec_kind kind;
  int fused;          /* a Fuse or ByteLevel came before: the text is one token */
  tok_regex *re;      /* Replace */
  char *content;      /* Replace */
  char ch[5];         /* Metaspace: the replacement; Strip: the content */
  uint32_t ch_cp;
  int prepend;        /* Metaspace: prepend_scheme is not "never" */
  size_t start, stop; /* Strip */
} dec_step;

typedef SSM_VEC(dec_step) dec_steps;

/* Reads root.decoder (one or a Sequence, flattened). */
ssm_status ssm_tok_decoders_parse(tok_load *L, const cJSON *root, dec_steps *out);
void ssm_tok_decoders_free(dec_steps *steps);

/* ---- the tokenizer (tokenizer.c) --------------------------------------------------------- */

typedef struct {
  char *content; /* as matched: the normalized content when `normalized` */
  size_t len;
  int32_t id;
  int special, lstrip, rstrip, single_word, normalized;
} added_token;

typedef struct {
  uint64_t key; /* left id << 32 | right id */
  uint32_t rank;
  int32_t id;
  int used;
} merge_slot;

enum { ID_NONE = 0, ID_MODEL = 1, ID_ADDED = 2 };
enum { TOK_FAST_CHARS = 512 }; /* code points below this have their model id cached */

struct ssm_tok {
  int32_t vocab_size;  /* largest id + 1 */
  char **str;          /* per id: the token's string (NULL: no such id) */
  uint32_t *len;       /* per id: strlen(str[id]) */
  char **dec;          /* per id: what the decoder gets when not str[id] (a
                        * normalized added token), else NULL */
  uint32_t *dec_len;
  uint8_t *kind;       /* ID_* bits */
  uint8_t *special;    /* per id: an added token marked special */
  int32_t *vocab_hash; /* model vocab: open addressing over ids, -1 empty */
  size_t vocab_cap;
  merge_slot *merges;
  size_t merges_cap;
  int32_t char_id[TOK_FAST_CHARS]; /* model id of each such character alone, or -1 */
  int32_t byte_token[256];         /* byte_fallback: the id of "<0xXX>", or -1 */
  int byte_fallback, fuse_unk, ignore_merges;
  int32_t unk_id; /* -1: no unk_token */
  added_token *added;
  int n_added;
  uint8_t added_first[2][256]; /* [normalized][byte]: some added token starts with it */
  norm_steps norm;
  pt_steps pre;
  dec_steps dec_steps;
};

/* A piece of text being encoded: bytes [off, off+len) of the work buffer,
 * or (id >= 0) an added token already decided. `first`: it begins at the
 * start of the input (what Metaspace's prepend_scheme "first" asks). */
typedef struct {
  size_t off, len;
  int32_t id;
  int first;
} piece;

typedef SSM_VEC(piece) piece_vec;

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

/* The work state of one encode. */
typedef struct {
  const ssm_tok *t;
  SSM_VEC(char) buf; /* the work bytes (not a string); pieces hold offsets into it */
  SSM_VEC(int32_t) ids;
  SSM_VEC(bpe_sym) syms;   /* the piece being merged */
  SSM_VEC(bpe_merge) heap; /* its candidate merges */
  tok_seg_vec segs;
  ssm_sb norm; /* normalizer output */
} enc_ctx;

/* ---- pieces and the work buffer (pretokenize.c) ---------------------------------------- */

/* Appends s[0..n) to the work buffer; *out_off gets its offset. s may
 * point into the buffer itself. */
ssm_status ssm_tok_buf_append(enc_ctx *c, const char *s, size_t n, size_t *out_off);
/* Appends a piece unless it is empty text. Out of memory, the piece is
 * dropped: ssm_tok_encode returns NOMEM when any allocation failed. */
void ssm_tok_piece_push(piece_vec *v, size_t off, size_t len, int32_t id, int first);
/* Runs pre-tokenizer `st` on piece `p`, pushing its pieces to `out`. */
ssm_status ssm_tok_pre_tokenize(enc_ctx *c, const pt_step *st, const piece *p, piece_vec *out);

#endif
