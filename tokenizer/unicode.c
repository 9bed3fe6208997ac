/*
 * unicode.c — UTF-8, character classes, normalization forms and lowercase
 * for the tokenizer, and GPT-2's byte-level alphabet (see unicode.h). The Unicode data is libutf8proc's:
 * utf8proc_category for the classes, utf8proc_map for NFC, NFD, NFKC and
 * NFKD (the standard algorithms), utf8proc_tolower for case.
 */
#include "tokenizer/unicode.h"

#include <pthread.h>
#include <string.h>
#include <utf8proc.h>

int ssm_utf8_decode(const char *str, size_t n, uint32_t *cp) {
  const unsigned char *s = (const unsigned char *)str;
  unsigned c = s[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  int len;
  uint32_t v, min;
  if (c >= 0xC2 && c <= 0xDF) len = 2, v = c & 0x1F, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, v = c & 0x0F, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, v = c & 0x07, min = 0x10000;
  else return 0;
  if (n < (size_t)len) return 0;
  for (int i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    v = v << 6 | (s[i] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

int ssm_utf8_encode(uint32_t cp, char *out) {
  unsigned char *o = (unsigned char *)out;
  if (cp < 0x80) {
    o[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | cp >> 6);
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | cp >> 12);
    o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | cp >> 18);
  o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

int ssm_utf8_valid(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int k = ssm_utf8_decode(s + i, n - i, &cp);
    if (k <= 0) return 0;
    i += (size_t)k;
  }
  return 1;
}

int ssm_uni_class(uint32_t cp) {
  switch (utf8proc_category((utf8proc_int32_t)cp)) {
  case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
  case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
    return SSM_UNI_L;
  case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
    return SSM_UNI_N;
  case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
  case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
  case UTF8PROC_CATEGORY_PO:
    return SSM_UNI_P;
  case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    return SSM_UNI_M;
  default:
    return SSM_UNI_OTHER;
  }
}

int ssm_uni_is_space(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

ssm_status ssm_uni_normalize(ssm_uni_form form, const char *s, size_t n, ssm_sb *out) {
  static const utf8proc_option_t opts[] = {
      [SSM_UNI_NFC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE,
      [SSM_UNI_NFD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
      [SSM_UNI_NFKC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
      [SSM_UNI_NFKD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
  };
  if (!n) return NULL;
  if ((utf8proc_ssize_t)n < 0)
    return ssm_status_new(SSM_ERR_INVALID, "text of %zu bytes is too long to normalize", n);
  utf8proc_uint8_t *dst = NULL;
  utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                    opts[form]);
  if (k < 0) {
    free(dst);
    return ssm_status_new(k == UTF8PROC_ERROR_NOMEM ? SSM_ERR_NOMEM : SSM_ERR_INTERNAL,
                          "normalizing %zu bytes: %s", n, utf8proc_errmsg(k));
  }
  ssm_sb_append(out, dst, (size_t)k);
  free(dst);
  return NULL;
}

void ssm_uni_lowercase(const char *s, size_t n, ssm_sb *out) {
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int k = ssm_utf8_decode(s + i, n - i, &cp);
    SSM_ASSERT(k > 0);
    i += (size_t)k;
    char u[8];
    int len;
    if (cp == 0x130) { /* the one unconditional multi-character lowercase */
      memcpy(u, "i\xCC\x87", 3);
      len = 3;
    } else {
      len = ssm_utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), u);
    }
    ssm_sb_append(out, u, (size_t)len);
  }
}

uint32_t ssm_tok_cp_at(const char *s, size_t n, size_t i, size_t *len) {
  uint32_t cp;
  int k = ssm_utf8_decode(s + i, n - i, &cp);
  SSM_ASSERT(k > 0);
  *len = (size_t)k;
  return cp;
}

/* ---- byte-level alphabet ------------------------------------------------- */

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others
 * for 256, 257, ... in byte order. */
uint32_t ssm_tok_byte_cp[256];
uint8_t ssm_tok_cp_byte[324];
uint8_t ssm_tok_cp_is_byte[324];

static int printable_byte(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static void byte_table_build(void) {
  uint32_t next = 256;
  for (int b = 0; b < 256; b++) {
    ssm_tok_byte_cp[b] = printable_byte(b) ? (uint32_t)b : next++;
    ssm_tok_cp_byte[ssm_tok_byte_cp[b]] = (uint8_t)b;
    ssm_tok_cp_is_byte[ssm_tok_byte_cp[b]] = 1;
  }
}

void ssm_tok_byte_table_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, byte_table_build);
}
