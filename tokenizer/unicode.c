/*
 * unicode.c — UTF-8, character classes and NFC for the tokenizer (see
 * unicode.h). NFC is the standard algorithm: full canonical decomposition
 * (Hangul algorithmically, the rest from the generated table, recursively),
 * canonical ordering of combining marks, then canonical composition with
 * the primary composites. The composition table is built once, on first
 * use, from the decomposition table.
 */
#include "tokenizer/unicode.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

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

/* Whether s[0..n) (n < the sequence's length) is a well-formed start of a
 * multi-byte sequence: the lead byte and the second byte's range rules. */
static int utf8_valid_prefix(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (!len || n >= len) return 0;
  for (size_t i = 1; i < n; i++) {
    unsigned lo = 0x80, hi = 0xBF;
    if (i == 1) {
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    if (s[i] < lo || s[i] > hi) return 0;
  }
  return 1;
}

int ssm_utf8_incomplete_tail(const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  for (size_t k = 1; k <= 3 && k <= n; k++) {
    size_t start = n - k;
    if ((s[start] & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
    return utf8_valid_prefix(s + start, k) ? (int)k : 0;
  }
  return 0;
}

static uint32_t range_lookup(const ssm_uni_range *r, int n, uint32_t cp) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (cp < r[mid].lo) hi = mid - 1;
    else if (cp > r[mid].hi) lo = mid + 1;
    else return r[mid].value;
  }
  return 0;
}

int ssm_uni_class(uint32_t cp) {
  if (cp < 0x80) {
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return SSM_UNI_L;
    if (cp >= '0' && cp <= '9') return SSM_UNI_N;
    if (cp <= 0x20 || cp == 0x7F) return SSM_UNI_OTHER;
    /* ASCII punctuation by category: $ + < = > ^ ` | ~ are symbols */
    return strchr("$+<=>^`|~", (int)cp) ? SSM_UNI_OTHER : SSM_UNI_P;
  }
  return (int)range_lookup(ssm_uni_classes, ssm_uni_classes_n, cp);
}

int ssm_uni_is_space(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

int ssm_uni_ccc_of(uint32_t cp) {
  if (cp < 0x300) return 0;
  return (int)range_lookup(ssm_uni_ccc, ssm_uni_ccc_n, cp);
}

/* ---- NFC ------------------------------------------------------------------ */

enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7 };
enum { LCOUNT = 19, VCOUNT = 21, TCOUNT = 28, NCOUNT = VCOUNT * TCOUNT, SCOUNT = LCOUNT * NCOUNT };

static const ssm_uni_decomp *decomp_find(uint32_t cp) {
  int lo = 0, hi = ssm_uni_decomps_n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (cp < ssm_uni_decomps[mid].cp) hi = mid - 1;
    else if (cp > ssm_uni_decomps[mid].cp) lo = mid + 1;
    else return &ssm_uni_decomps[mid];
  }
  return NULL;
}

typedef SSM_VEC(uint32_t) cpvec;

static void decompose(cpvec *out, uint32_t cp) {
  if (cp >= SBASE && cp < SBASE + SCOUNT) {
    uint32_t s = cp - SBASE;
    ssm_vec_push(out, LBASE + s / NCOUNT);
    ssm_vec_push(out, VBASE + s % NCOUNT / TCOUNT);
    if (s % TCOUNT) ssm_vec_push(out, TBASE + s % TCOUNT);
    return;
  }
  const ssm_uni_decomp *d = cp >= 0xC0 ? decomp_find(cp) : NULL;
  if (!d) {
    ssm_vec_push(out, cp);
    return;
  }
  decompose(out, d->a);
  uint32_t b = d->b & ~SSM_UNI_PRIMARY;
  if (b) decompose(out, b);
}

typedef struct {
  uint64_t key; /* a << 32 | b */
  uint32_t cp;
} comp_entry;

static comp_entry *comp_table;
static int comp_n;
static pthread_once_t comp_once = PTHREAD_ONCE_INIT;

static int comp_cmp(const void *x, const void *y) {
  uint64_t a = ((const comp_entry *)x)->key, b = ((const comp_entry *)y)->key;
  return a < b ? -1 : a > b;
}

static void comp_build(void) {
  comp_table = ssm_xcalloc((size_t)ssm_uni_decomps_n, sizeof *comp_table);
  for (int i = 0; i < ssm_uni_decomps_n; i++) {
    const ssm_uni_decomp *d = &ssm_uni_decomps[i];
    if (!(d->b & SSM_UNI_PRIMARY)) continue;
    comp_table[comp_n].key = (uint64_t)d->a << 32 | (d->b & ~SSM_UNI_PRIMARY);
    comp_table[comp_n++].cp = d->cp;
  }
  qsort(comp_table, (size_t)comp_n, sizeof *comp_table, comp_cmp);
}

/* The primary composite of a b, or 0. */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
    return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
  if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE &&
      b < TBASE + TCOUNT)
    return a + (b - TBASE);
  pthread_once(&comp_once, comp_build);
  uint64_t key = (uint64_t)a << 32 | b;
  int lo = 0, hi = comp_n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (key < comp_table[mid].key) hi = mid - 1;
    else if (key > comp_table[mid].key) lo = mid + 1;
    else return comp_table[mid].cp;
  }
  return 0;
}

void ssm_uni_nfc(const char *s, size_t n, char **out, size_t *out_n) {
  cpvec c = {0};
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int k = ssm_utf8_decode(s + i, n - i, &cp);
    SSM_ASSERT(k > 0);
    decompose(&c, cp);
    i += (size_t)k;
  }
  /* canonical ordering: stable insertion sort of each run of non-starters */
  for (size_t i = 1; i < c.n; i++) {
    int ci = ssm_uni_ccc_of(c.items[i]);
    if (!ci) continue;
    size_t j = i;
    uint32_t x = c.items[i];
    while (j > 0) {
      int cj = ssm_uni_ccc_of(c.items[j - 1]);
      if (cj <= ci) break;
      c.items[j] = c.items[j - 1];
      j--;
    }
    c.items[j] = x;
  }
  /* canonical composition */
  size_t w = 0;
  long starter = -1;
  int last_ccc = -1; /* ccc of the last character kept after the starter */
  for (size_t i = 0; i < c.n; i++) {
    uint32_t cp = c.items[i];
    int cc = ssm_uni_ccc_of(cp);
    if (starter >= 0) {
      int blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= cc);
      uint32_t comp = blocked ? 0 : compose_pair(c.items[starter], cp);
      if (comp) {
        c.items[starter] = comp;
        continue;
      }
    }
    if (cc == 0) {
      starter = (long)w;
      last_ccc = -1;
    } else {
      last_ccc = cc;
    }
    c.items[w++] = cp;
  }
  char *buf = ssm_xmalloc(w * 4 + 1);
  size_t k = 0;
  for (size_t i = 0; i < w; i++) k += (size_t)ssm_utf8_encode(c.items[i], buf + k);
  buf[k] = 0;
  ssm_vec_free(&c);
  *out = buf;
  *out_n = k;
}
