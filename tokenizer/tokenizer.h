/*
 * tokenizer.h — Hugging Face tokenizer.json: BPE, byte-level or
 * SentencePiece-style.
 */
#ifndef SSM_TOKENIZER_H
#define SSM_TOKENIZER_H

#include "base/base.h"

/* ---- tokenizer (tokenizer.c, normalize.c, pretokenize.c, decode.c) ------ */

/* A BPE tokenizer read from a Hugging Face tokenizer.json: byte-level
 * (GPT-2, GPT-NeoX / Mamba, Falcon, Llama 3, Qwen2) or SentencePiece-style
 * (Llama 2, Mistral). It gives the ids that the `tokenizers` library
 * gives. Supported: model.type "BPE" (merges as "a b" strings or
 * ["a", "b"] pairs, ignore_merges, byte_fallback, unk_token, fuse_unk; no
 * dropout or subword affixes); normalizer null, NFC, NFD, NFKC, NFKD,
 * Lowercase, Strip, Replace (a string or a regex), Prepend, or a Sequence
 * of them; pre_tokenizer null, ByteLevel (add_prefix_space, use_regex),
 * Split (a string or any regex, run by Oniguruma as the library runs it;
 * every behavior; invert), Punctuation, Digits, Metaspace (replacement,
 * prepend_scheme, split), or a Sequence of them; added_tokens with special,
 * normalized, lstrip, rstrip and single_word; post_processor null or
 * ByteLevel; decoder ByteLevel, Metaspace, Replace, ByteFallback, Fuse,
 * Strip, or a Sequence of them (after a Fuse or ByteLevel only Metaspace,
 * Strip and Fuse). truncation and padding are ignored. Anything else is
 * refused with an error naming the file and the field. Immutable after
 * loading, so it may be shared between threads. */
typedef struct ssm_tok ssm_tok;

/* Loads and checks `path`. Errors name the file and what is wrong: not JSON
 * ("FILE:LINE:COL: not valid JSON"), an unsupported feature ("FILE:
 * model.type 'Unigram' is not supported (only BPE)"), a missing model.vocab,
 * a merge naming an unknown token, a vocab id out of range or given twice,
 * a token that is not UTF-8, a regex Oniguruma refuses (with its message),
 * a byte without its byte-level token when a ByteLevel pre-tokenizer makes
 * them. */
ssm_status ssm_tok_open(const char *path, ssm_tok **out);
/* NULL is fine. */
void ssm_tok_close(ssm_tok *t);
/* Largest token id + 1 (model vocab and added tokens). */
int32_t ssm_tok_vocab_size(const ssm_tok *t);
/* The id of the token spelled `token` (an added token such as
 * "<|endoftext|>", or a model token as model.vocab spells it: "Ġthe",
 * "▁the", "<0x0A>"), or -1. */
int32_t ssm_tok_token_id(const ssm_tok *t, const char *token);
/* The spelling of token `id` as in tokenizer.json; NULL for an unused id. */
const char *ssm_tok_token(const ssm_tok *t, int32_t id);
/* Whether `id` is an added token marked special. */
int ssm_tok_is_special(const ssm_tok *t, int32_t id);

/* Encodes `len` bytes of UTF-8 `text` into a malloc'd array of ids (free()
 * it; never NULL on success, even for no ids). Added tokens in the text
 * (special ones too) become their ids, as the library does; nothing is
 * added around the text. Text that is not valid UTF-8 is an error, and so
 * is a regex search that Oniguruma gives up on (its retry limit; the
 * library panics there). */
ssm_status ssm_tok_encode(const ssm_tok *t, const char *text, size_t len, int32_t **out_ids,
                          size_t *out_n);

/* Decodes ids into malloc'd, NUL-terminated text (the library's
 * decode(ids, skip_special_tokens), through the decoder of the file).
 * Invalid UTF-8 that tokens produce becomes U+FFFD, as the library's
 * decoders make it. An unknown id is an error. */
ssm_status ssm_tok_decode(const ssm_tok *t, const int32_t *ids, size_t n, int skip_special,
                          char **out_text, size_t *out_len);

/* Streaming decoder for generation: feed one id at a time and print what
 * comes back. It never returns part of a multi-byte UTF-8 character: an
 * incomplete one is held until the bytes that complete it arrive (or
 * flush), a run of ByteFallback "<0xXX>" tokens until it ends, and a
 * trailing character that a Strip decoder may still remove until more
 * comes. The concatenation of everything returned up to a flush equals
 * ssm_tok_decode of those ids. */
typedef struct ssm_tok_stream ssm_tok_stream;

ssm_status ssm_tok_stream_create(const ssm_tok *t, int skip_special, ssm_tok_stream **out);
/* NULL is fine. */
void ssm_tok_stream_destroy(ssm_tok_stream *s);
/* Adds token `id`; *out_text (owned by the stream, valid until its next
 * call) gets the bytes that are now complete, *out_len of them (maybe 0).
 * An id the tokenizer lacks (past its vocabulary, or a hole in it) gives
 * no text and changes nothing, as transformers' tokenizers decode it: a
 * model's vocabulary is often padded past its tokenizer's (Mamba: 50,280
 * logits for 50,277 tokens), and a sampled padding id is not an error. A
 * negative id is. */
ssm_status ssm_tok_stream_feed(ssm_tok_stream *s, int32_t id, const char **out_text,
                               size_t *out_len);
/* Ends the stream: returns what is still held back (an incomplete sequence
 * becomes U+FFFD) and leaves the stream empty, ready for more, as if new:
 * the next id is decoded as the first of a text. Out of host memory, here
 * or in ssm_tok_stream_feed, is NOMEM: what the stream held is dropped
 * and it starts afresh, as after a flush. */
ssm_status ssm_tok_stream_flush(ssm_tok_stream *s, const char **out_text, size_t *out_len);

/* ---- pieces (for `ssmc tokenize`) ---------------------------------------- */

/* The bytes token `id` stands for, as llama-tokenize shows them (malloc'd,
 * *out_len of them): a byte-fallback token's byte, a byte-level token's
 * bytes (maybe part of a UTF-8 character), else the token's text as it
 * reads after another token (with the leading space that Metaspace or a
 * Strip decoder drops from a text's first token).
 * An id that names no token is an error. */
ssm_status ssm_tok_piece(const ssm_tok *t, int32_t id, char **out_piece, size_t *out_len);

#endif
