/*
 * regex.c — the regular expressions of tokenizer.json through Oniguruma,
 * the engine the `tokenizers` library itself runs them with (its SysRegex
 * is the onig crate's Regex). To match it exactly, a pattern is compiled
 * as onig::Regex::new does: UTF-8, ONIG_OPTION_NONE and Oniguruma's
 * default syntax, ONIG_SYNTAX_ONIGURUMA (named here, so that no other
 * user of the library can change it under us); a {"String": ...} pattern
 * is first escaped as Rust's regex::escape does. Matches are found as
 * onig's find_iter finds them: each search starts where the last match
 * ended, over the whole text (so look-behind sees what came before), and
 * an empty match right at the end of the previous one is skipped by one
 * character.
 */
#include <oniguruma.h>
#include <pthread.h>
#include <string.h>

#include "tokenizer/internal.h"
#include "tokenizer/unicode.h"

struct tok_regex {
  OnigRegex re;
};

static pthread_once_t onig_once = PTHREAD_ONCE_INIT;
/* onig_new is not safe to call from two threads at once (the onig crate
 * holds a lock around it too). */
static pthread_mutex_t onig_new_lock = PTHREAD_MUTEX_INITIALIZER;

static void regex_lib_init(void) {
  OnigEncoding enc = ONIG_ENCODING_UTF8;
  onig_initialize(&enc, 1);
}

/* regex::escape's metacharacters. */
static int is_meta(char ch) { return ch && strchr("\\.+*?()|[]{}^$#&-~", ch); }

ssm_status ssm_tok_regex_new(const char *pattern, int literal, tok_regex **out) {
  *out = NULL;
  pthread_once(&onig_once, regex_lib_init);
  ssm_sb esc = {0};
  if (literal) {
    for (const char *p = pattern; *p; p++) {
      if (is_meta(*p)) ssm_sb_append(&esc, "\\", 1);
      ssm_sb_append(&esc, p, 1);
    }
    pattern = ssm_sb_str(&esc);
    ssm_status s = ssm_sb_status(&esc, "a literal pattern");
    if (s) {
      ssm_sb_free(&esc);
      return s;
    }
  }
  OnigRegex re = NULL;
  OnigErrorInfo einfo;
  const OnigUChar *p = (const OnigUChar *)pattern;
  pthread_mutex_lock(&onig_new_lock);
  int r = onig_new(&re, p, p + strlen(pattern), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                   ONIG_SYNTAX_ONIGURUMA, &einfo);
  pthread_mutex_unlock(&onig_new_lock);
  ssm_sb_free(&esc);
  if (r != ONIG_NORMAL) {
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, r, &einfo);
    return ssm_status_new(r == ONIGERR_MEMORY ? SSM_ERR_NOMEM : SSM_ERR_INVALID, "%s",
                          (const char *)msg);
  }
  tok_regex *t;
  ssm_status s = ssm_alloc(1, sizeof *t, (void **)&t);
  if (s) {
    onig_free(re);
    return ssm_status_wrap(s, "a pattern");
  }
  t->re = re;
  *out = t;
  return NULL;
}

void ssm_tok_regex_free(tok_regex *re) {
  if (!re) return;
  onig_free(re->re);
  free(re);
}

static ssm_status seg_push(tok_seg_vec *v, size_t start, size_t end, int match) {
  tok_segment sg = {start, end, match};
  return ssm_status_wrap(ssm_vec_push(v, sg), "the matches of a pattern");
}

ssm_status ssm_tok_regex_segments(const tok_regex *re, const char *s, size_t n,
                                  tok_seg_vec *out) {
  out->n = 0;
  const OnigUChar *str = (const OnigUChar *)s, *end = str + n;
  OnigRegion *region = onig_region_new();
  if (!region)
    return ssm_status_new(SSM_ERR_NOMEM, "out of host memory for a regular expression match "
                          "(%zu bytes)", sizeof(OnigRegion));
  size_t from = 0, prev = 0, last_match_end = 0;
  int have_last = 0;
  ssm_status st = NULL;
  while (!st && from <= n) {
    onig_region_clear(region);
    int r = onig_search(re->re, str, end, str + from, end, region, ONIG_OPTION_NONE);
    if (r == ONIG_MISMATCH) break;
    if (r < 0) {
      OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
      onig_error_code_to_str(msg, r);
      st = ssm_status_new(r == ONIGERR_MEMORY ? SSM_ERR_NOMEM : SSM_ERR_INVALID,
                          "regular expression search failed at byte %zu: %s", from,
                          (const char *)msg);
      break;
    }
    size_t ms = (size_t)region->beg[0], me = (size_t)region->end[0];
    if (ms == me && have_last && last_match_end == me) {
      size_t len = 1;
      if (from < n) ssm_tok_cp_at(s, n, from, &len);
      from += len;
      continue;
    }
    from = last_match_end = me;
    have_last = 1;
    if (prev != ms) st = seg_push(out, prev, ms, 0);
    if (!st) st = seg_push(out, ms, me, 1);
    prev = me;
  }
  if (!st && prev != n) st = seg_push(out, prev, n, 0);
  onig_region_free(region, 1);
  return st;
}
