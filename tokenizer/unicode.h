/*
 * unicode.h — the Unicode the tokenizer needs, inside tokenizer/ only:
 * UTF-8 decoding and encoding, the character classes its pre-tokenizers
 * and added tokens test, the normalization forms and lowercase mapping of
 * its normalizers, and GPT-2's byte-level alphabet. Classes, forms and
 * case come from libutf8proc's tables; White_Space is a fixed list here.
 */
#ifndef SSM_UNICODE_H
#define SSM_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* Decodes the UTF-8 character at s[0..n) (n > 0) into *cp and returns its
 * length, or 0 if it is not well-formed (overlong, surrogate, > U+10FFFF,
 * truncated). */
int ssm_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Encodes cp into out (4 bytes room); returns the length. */
int ssm_utf8_encode(uint32_t cp, char *out);
/* Whether s[0..n) is whole, well-formed UTF-8. */
int ssm_utf8_valid(const char *s, size_t n);

/* The general-category group of a code point. */
enum { SSM_UNI_OTHER = 0, SSM_UNI_L = 1, SSM_UNI_N = 2, SSM_UNI_P = 3, SSM_UNI_M = 4 };
int ssm_uni_class(uint32_t cp);
/* Unicode White_Space (Rust's char::is_whitespace, Oniguruma's \s). */
int ssm_uni_is_space(uint32_t cp);

/* The normalization forms. */
typedef enum { SSM_UNI_NFC, SSM_UNI_NFD, SSM_UNI_NFKC, SSM_UNI_NFKD } ssm_uni_form;

/* Appends the normalization `form` of the valid UTF-8 s[0..n) to `out`. */
ssm_status ssm_uni_normalize(ssm_uni_form form, const char *s, size_t n, ssm_sb *out);
/* Appends the lowercase of the valid UTF-8 s[0..n) to `out`, character by
 * character as Rust's char::to_lowercase does (the simple mappings, and
 * U+0130 to "i\u0307"). */
void ssm_uni_lowercase(const char *s, size_t n, ssm_sb *out);

/* The code point at s[i] of valid UTF-8 s[0..n); *len its length. */
uint32_t ssm_tok_cp_at(const char *s, size_t n, size_t i, size_t *len);

/* GPT-2's bytes_to_unicode: byte_cp[b] stands for byte b; cp_byte inverts
 * it for the code points below 324 that cp_is_byte marks. The tables are
 * filled by ssm_tok_byte_table_init (once; any thread may call it). */
extern uint32_t ssm_tok_byte_cp[256];
extern uint8_t ssm_tok_cp_byte[324];
extern uint8_t ssm_tok_cp_is_byte[324];
void ssm_tok_byte_table_init(void);

#endif
