/*
 * jinja_builtins.c — what a template can call, each as Jinja (and Python
 * underneath) does it: the methods of strings, dicts and the loop
 * (strip, split, replace, startswith, items, get, cycle, ...), attributes,
 * items and slices (negative indices included), the filters and tests,
 * and the global functions (range, namespace, dict, raise_exception,
 * strftime_now).
 *
 * The tables at the end list every filter, test, method and global; the
 * parser refuses any other name.
 */
#include <errno.h>
#include <math.h>
#include <time.h>

#include "chat/jinja_value.h"

#define MAX_RANGE 1000000 /* items of one range() */

/* Argument `i` or keyword `name` (NULL: none), else `dflt`. */
static jv arg(const args *a, int i, const char *name, jv dflt) {
  for (int k = 0; name && k < a->nkw; k++)
    if (!strcmp(a->names[k], name)) return a->kw[k];
  return i < a->npos ? a->pos[i] : dflt;
}

static ssm_status check_arity(ctx *c, const jnode *n, const args *a, int max, const char *const *kws,
                              const char *what) {
  if (a->npos > max) return ssm_jv_err(c, n, "%s takes at most %d positional arguments, got %d", what, max, a->npos);
  for (int k = 0; k < a->nkw; k++) {
    int ok = 0;
    for (int j = 0; kws && kws[j] && !ok; j++) ok = !strcmp(kws[j], a->names[k]);
    if (!ok) return ssm_jv_err(c, n, "%s: unexpected keyword argument '%s'", what, a->names[k]);
  }
  return NULL;
}

/* ---- strings ------------------------------------------------------------------------ */

/* A NUL-terminated copy of string `s` ("" once the render's memory failed). */
static char *cstr(ctx *c, jv s) {
  char *d = ssm_jv_alloc(c, s.u.s.n + 1);
  if (!d) return "";
  memcpy(d, s.u.s.p, s.u.s.n);
  d[s.u.s.n] = 0;
  return d;
}

static int is_space(char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= 0x1c && ch <= 0x1f); }

static jv strip(jv s, const jv *chars, int left, int right) {
  const char *p = s.u.s.p;
  size_t b = 0, e = s.u.s.n;
  unsigned char in[256] = {0}; /* the bytes to strip */
  for (int ch = 0; ch < 256 && !(chars && chars->k == V_STR); ch++) in[ch] = (unsigned char)is_space((char)ch);
  for (size_t i = 0; chars && chars->k == V_STR && i < chars->u.s.n; i++) in[(unsigned char)chars->u.s.p[i]] = 1;
  while (left && b < e && in[(unsigned char)p[b]]) b++;
  while (right && e > b && in[(unsigned char)p[e - 1]]) e--;
  return v_str(p + b, e - b);
}

static jv change_case(ctx *c, jv s, char how) { /* 'u'pper, 'l'ower, 't'itle, 'c'apitalize */
  char *o = ssm_jv_alloc(c, s.u.s.n + 1);
  if (!o) return v_str("", 0);
  memcpy(o, s.u.s.p, s.u.s.n);
  int start = 1;
  for (size_t i = 0; i < s.u.s.n; i++) {
    char ch = o[i];
    int alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
    int up = how == 'u' || ((how == 't' || how == 'c') && start);
    if (how == 'c') up = i == 0;
    if (alpha) o[i] = up ? (char)(ch >= 'a' && ch <= 'z' ? ch - 32 : ch) : (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
    if (how == 't') start = !alpha && !(((unsigned char)ch) & 0x80) && !(ch >= '0' && ch <= '9');
  }
  return v_str(o, s.u.s.n);
}

static ssm_status replace(ctx *c, const jnode *n, jv s, jv old, jv new_, int64_t count, jv *out) {
  ssm_sb b = {0};
  ssm_sb_append(&b, "", 0);
  size_t i = 0;
  int64_t done = 0;
  if (!old.u.s.n) { /* Python: inserts between characters */
    for (size_t k = 0; k <= s.u.s.n && b.n <= MAX_OUTPUT; k++) {
      if (count < 0 || done < count) ssm_sb_append(&b, new_.u.s.p, new_.u.s.n), done++;
      if (k < s.u.s.n) ssm_sb_append(&b, s.u.s.p + k, 1);
    }
  } else {
    while (i < s.u.s.n && b.n <= MAX_OUTPUT) {
      const char *hit = (count < 0 || done < count) ? memmem(s.u.s.p + i, s.u.s.n - i, old.u.s.p, old.u.s.n) : NULL;
      if (!hit) break;
      ssm_sb_append(&b, s.u.s.p + i, (size_t)(hit - s.u.s.p) - i);
      ssm_sb_append(&b, new_.u.s.p, new_.u.s.n);
      i = (size_t)(hit - s.u.s.p) + old.u.s.n;
      done++;
    }
    ssm_sb_append(&b, s.u.s.p + i, s.u.s.n - i);
  }
  return ssm_jv_take(c, n, &b, out);
}

static jv split(ctx *c, jv s, jv sep, int64_t maxsplit) {
  jlist *l = ssm_jv_list_new(c, 0);
  const char *p = s.u.s.p, *e = p + s.u.s.n;
  if (sep.k != V_STR) { /* runs of whitespace, none at the ends */
    while (1) {
      while (p < e && is_space(*p)) p++;
      if (p >= e) break;
      const char *w = p;
      if (maxsplit >= 0 && (int64_t)l->n >= maxsplit) {
        const char *end = e;
        while (end > p && is_space(end[-1])) end--;
        ssm_jv_list_push(c, l, v_str(w, (size_t)(end - w)));
        break;
      }
      while (p < e && !is_space(*p)) p++;
      ssm_jv_list_push(c, l, v_str(w, (size_t)(p - w)));
    }
    return v_list(l);
  }
  while (1) {
    const char *hit = (maxsplit < 0 || (int64_t)l->n < maxsplit) && sep.u.s.n
                          ? memmem(p, (size_t)(e - p), sep.u.s.p, sep.u.s.n) : NULL;
    if (!hit) {
      ssm_jv_list_push(c, l, v_str(p, (size_t)(e - p)));
      return v_list(l);
    }
    ssm_jv_list_push(c, l, v_str(p, (size_t)(hit - p)));
    p = hit + sep.u.s.n;
  }
}

static int starts_with(jv s, jv prefix, int at_end) {
  if (prefix.k != V_STR || prefix.u.s.n > s.u.s.n) return 0;
  return !memcmp(s.u.s.p + (at_end ? s.u.s.n - prefix.u.s.n : 0), prefix.u.s.p, prefix.u.s.n);
}

static ssm_status need_str(ctx *c, const jnode *n, jv v, const char *what) {
  if (v.k == V_STR) return NULL;
  if (v.k == V_UNDEF) return ssm_jv_err(c, n, "%s: '%s' is undefined", what, v.name ? v.name : "value");
  return ssm_jv_err(c, n, "%s: expected a string, got %s", what, ssm_jv_type_name(v));
}

static ssm_status join(ctx *c, const jnode *n, jv seq, jv sep, const jv *attr, jv *out) {
  jlist *l;
  SSM_TRY(ssm_jv_iterable(c, n, seq, &l));
  ssm_sb b = {0};
  ssm_sb_append(&b, "", 0);
  SSM_TRY(ssm_jv_work(c, n, l->n));
  for (size_t i = 0; i < l->n && b.n <= MAX_OUTPUT; i++) {
    if (i && sep.k == V_STR) ssm_sb_append(&b, sep.u.s.p, sep.u.s.n);
    jv item = l->v[i];
    if (attr && attr->k == V_STR && (item.k == V_DICT || item.k == V_NS)) {
      jv *f = ssm_jv_dict_find(item.u.d, attr->u.s.p, attr->u.s.n);
      item = f ? *f : UNDEF;
    }
    ssm_jv_put_str(&b, item);
  }
  return ssm_jv_take(c, n, &b, out);
}

/* ---- methods -------------------------------------------------------------------- */

ssm_status ssm_jv_call_method(ctx *c, const jnode *n, jv self, const char *name, const args *a, jv *out) {
  jv a0 = arg(a, 0, NULL, UNDEF), a1 = arg(a, 1, NULL, UNDEF);
  if (self.k == V_STR) {
    SSM_TRY(ssm_jv_work(c, n, 1 + self.u.s.n / 64)); /* each method scans the string at most once */
    int l = !strcmp(name, "lstrip"), r = !strcmp(name, "rstrip");
    if (!strcmp(name, "strip") || l || r) {
      *out = strip(self, a0.k == V_STR ? &a0 : NULL, !r, !l);
    } else if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
      jv sep = arg(a, 0, "sep", NONE), mx = arg(a, 1, "maxsplit", v_int(-1));
      if (sep.k == V_STR && !sep.u.s.n) return ssm_jv_err(c, n, "split: empty separator");
      if (!strcmp(name, "rsplit") && mx.k == V_INT && mx.u.i >= 0)
        return ssm_jv_err(c, n, "rsplit with maxsplit is not supported");
      *out = split(c, self, sep, mx.k == V_INT ? mx.u.i : -1);
    } else if (!strcmp(name, "replace")) {
      SSM_TRY(need_str(c, n, a0, "replace"));
      SSM_TRY(need_str(c, n, a1, "replace"));
      jv cnt = arg(a, 2, "count", v_int(-1));
      SSM_TRY(replace(c, n, self, a0, a1, cnt.k == V_INT ? cnt.u.i : -1, out));
    } else if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
      int end = name[0] == 'e', hit = 0;
      if (a0.k == V_LIST) SSM_TRY(ssm_jv_work(c, n, a0.u.l->n));
      if (a0.k == V_LIST)
        for (size_t i = 0; i < a0.u.l->n && !hit; i++) hit = starts_with(self, a0.u.l->v[i], end);
      else if (a0.k == V_STR)
        hit = starts_with(self, a0, end);
      else
        return ssm_jv_err(c, n, "%s: expected a string or a tuple of strings", name);
      *out = v_bool(hit);
    } else if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") ||
               !strcmp(name, "capitalize")) {
      *out = change_case(c, self, name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : name[0] == 't' ? 't' : 'c');
    } else if (!strcmp(name, "find") || !strcmp(name, "count")) {
      SSM_TRY(need_str(c, n, a0, name));
      if (name[0] == 'f') {
        const char *hit = a0.u.s.n ? memmem(self.u.s.p, self.u.s.n, a0.u.s.p, a0.u.s.n) : self.u.s.p;
        *out = v_int(hit ? (int64_t)ssm_jv_u8_len(self.u.s.p, (size_t)(hit - self.u.s.p)) : -1);
      } else {
        int64_t k = 0;
        for (const char *p = self.u.s.p, *e = p + self.u.s.n; a0.u.s.n && (p = memmem(p, (size_t)(e - p), a0.u.s.p, a0.u.s.n)); p += a0.u.s.n) k++;
        *out = v_int(a0.u.s.n ? k : (int64_t)ssm_jv_u8_len(self.u.s.p, self.u.s.n) + 1);
      }
    } else if (!strcmp(name, "join")) {
      SSM_TRY(join(c, n, a0, self, NULL, out));
    } else if (!strcmp(name, "splitlines")) {
      jlist *lines = ssm_jv_list_new(c, 0);
      const char *p = self.u.s.p, *e = p + self.u.s.n;
      while (p < e) {
        const char *q = p;
        while (q < e && *q != '\n' && *q != '\r') q++;
        ssm_jv_list_push(c, lines, v_str(p, (size_t)(q - p)));
        if (q < e && *q == '\r' && q + 1 < e && q[1] == '\n') q++;
        p = q + 1;
      }
      *out = v_list(lines);
    } else {
      return ssm_jv_err(c, n, "'str' object has no method '%s'", name);
    }
    return NULL;
  }
  if (self.k == V_DICT || self.k == V_NS) {
    SSM_TRY(ssm_jv_work(c, n, 1 + self.u.d->n));
    if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
      jlist *l = ssm_jv_list_new(c, self.u.d->n);
      for (size_t i = 0; i < self.u.d->n; i++) {
        if (name[0] == 'i') {
          jlist *pair = ssm_jv_list_new(c, 2);
          ssm_jv_list_push(c, pair, self.u.d->keys[i]);
          ssm_jv_list_push(c, pair, self.u.d->vals[i]);
          ssm_jv_list_push(c, l, v_list(pair));
        } else {
          ssm_jv_list_push(c, l, name[0] == 'k' ? self.u.d->keys[i] : self.u.d->vals[i]);
        }
      }
      *out = v_list(l);
      return NULL;
    }
    if (!strcmp(name, "get")) {
      jv *f = a0.k == V_STR ? ssm_jv_dict_find(self.u.d, a0.u.s.p, a0.u.s.n) : NULL;
      *out = f ? *f : a->npos > 1 ? a1 : NONE;
      return NULL;
    }
    return ssm_jv_err(c, n, "'dict' object has no method '%s'", name);
  }
  if (self.k == V_LOOP && !strcmp(name, "cycle")) {
    if (!a->npos) return ssm_jv_err(c, n, "loop.cycle needs at least one value");
    *out = a->pos[self.u.loop->index0 % (size_t)a->npos];
    return NULL;
  }
  if (self.k == V_UNDEF) return ssm_jv_err(c, n, "'%s' is undefined", self.name ? self.name : "value");
  return ssm_jv_err(c, n, "'%s' object has no method '%s'", ssm_jv_type_name(self), name);
}

/* ---- attributes and items ---------------------------------------------------------- */

ssm_status ssm_jv_get_attr(ctx *c, const jnode *n, jv obj, const char *name, jv *out) {
  jv u = UNDEF;
  u.name = name;
  *out = u;
  switch (obj.k) {
  case V_UNDEF: return ssm_jv_err(c, n, "'%s' is undefined", obj.name ? obj.name : "value");
  case V_DICT: case V_NS: {
    SSM_TRY(ssm_jv_work(c, n, obj.u.d->n / 8));
    jv *f = ssm_jv_dict_find(obj.u.d, name, strlen(name));
    if (f) *out = *f;
    return NULL;
  }
  case V_LOOP: {
    const jloop *l = obj.u.loop;
    size_t len = l->items->n, i = l->index0;
    if (!strcmp(name, "index")) *out = v_int((int64_t)i + 1);
    else if (!strcmp(name, "index0")) *out = v_int((int64_t)i);
    else if (!strcmp(name, "revindex")) *out = v_int((int64_t)(len - i));
    else if (!strcmp(name, "revindex0")) *out = v_int((int64_t)(len - i - 1));
    else if (!strcmp(name, "first")) *out = v_bool(i == 0);
    else if (!strcmp(name, "last")) *out = v_bool(i + 1 == len);
    else if (!strcmp(name, "length")) *out = v_int((int64_t)len);
    else if (!strcmp(name, "previtem")) { if (i) *out = l->items->v[i - 1]; }
    else if (!strcmp(name, "nextitem")) { if (i + 1 < len) *out = l->items->v[i + 1]; }
    else if (!strcmp(name, "depth")) *out = v_int(1);
    else if (!strcmp(name, "depth0")) *out = v_int(0);
    return NULL;
  }
  default: return NULL;
  }
}

ssm_status ssm_jv_get_item(ctx *c, const jnode *n, jv obj, jv key, jv *out) {
  *out = UNDEF;
  if (obj.k == V_UNDEF) return ssm_jv_err(c, n, "'%s' is undefined", obj.name ? obj.name : "value");
  if (key.k == V_STR && (obj.k == V_DICT || obj.k == V_NS || obj.k == V_LOOP)) {
    char *k = cstr(c, key);
    return ssm_jv_get_attr(c, n, obj, k, out);
  }
  if ((obj.k == V_LIST || obj.k == V_STR) && (key.k == V_INT || key.k == V_BOOL)) {
    if (obj.k == V_STR) SSM_TRY(ssm_jv_work(c, n, obj.u.s.n / 16)); /* three scans */
    int64_t len = (int64_t)ssm_jv_length(obj), i = key.u.i < 0 ? key.u.i + len : key.u.i;
    if (i < 0 || i >= len) return NULL; /* Jinja: an undefined value */
    if (obj.k == V_LIST) {
      *out = obj.u.l->v[i];
    } else {
      size_t b = ssm_jv_u8_offset(obj.u.s.p, obj.u.s.n, (size_t)i),
             e = ssm_jv_u8_offset(obj.u.s.p, obj.u.s.n, (size_t)i + 1);
      *out = v_str(obj.u.s.p + b, e - b);
    }
  }
  return NULL;
}

ssm_status ssm_jv_slice(ctx *c, const jnode *n, jv obj, const jv *bounds, jv *out) {
  if (obj.k == V_UNDEF) return ssm_jv_err(c, n, "'%s' is undefined", obj.name ? obj.name : "value");
  if (obj.k != V_LIST && obj.k != V_STR)
    return ssm_jv_err(c, n, "'%s' object cannot be sliced", ssm_jv_type_name(obj));
  jlist *items; /* a string's characters: walked once, not once per index */
  SSM_TRY(ssm_jv_iterable(c, n, obj, &items));
  int64_t len = (int64_t)items->n, st = bounds[2].k == V_INT ? bounds[2].u.i : 1;
  if (st == 0) return ssm_jv_err(c, n, "slice step cannot be zero");
  int64_t lo = st > 0 ? 0 : -1, hi = st > 0 ? len : len - 1;
  int64_t b = bounds[0].k == V_INT ? bounds[0].u.i : st > 0 ? 0 : len - 1;
  int64_t e = bounds[1].k == V_INT ? bounds[1].u.i : st > 0 ? len : -len - 1;
  if (bounds[0].k == V_INT) b = b < 0 ? (b < lo - len ? lo : b + len) : (b > hi ? hi : b);
  if (bounds[1].k == V_INT) e = e < 0 ? (e < lo - len ? lo : e + len) : (e > hi ? hi : e);
  else e = st > 0 ? len : -1;
  jlist *l = ssm_jv_list_new(c, 0);
  ssm_sb s = {0};
  ssm_sb_append(&s, "", 0);
  for (int64_t i = b; st > 0 ? i < e : i > e;) {
    if (obj.k == V_LIST) ssm_jv_list_push(c, l, items->v[i]);
    else ssm_sb_append(&s, items->v[i].u.s.p, items->v[i].u.s.n);
    if (__builtin_add_overflow(i, st, &i)) break;
  }
  if (obj.k == V_STR) return ssm_jv_take(c, n, &s, out);
  ssm_sb_free(&s);
  *out = v_list(l);
  return NULL;
}


/* ---- filters and tests --------------------------------------------------------------- */

/* select / reject / selectattr / rejectattr / map */
static ssm_status filter_seq(ctx *c, const jnode *n, const char *name, jv v, const args *a, jv *out) {
  jlist *in, *res = ssm_jv_list_new(c, 0);
  SSM_TRY(ssm_jv_iterable(c, n, v, &in));
  SSM_TRY(ssm_jv_work(c, n, in->n));
  int by_attr = !strcmp(name, "selectattr") || !strcmp(name, "rejectattr");
  int keep_if = name[0] == 's', is_map = !strcmp(name, "map");
  jv attr = arg(a, 0, is_map ? "attribute" : NULL, UNDEF);
  if (is_map && a->nkw && attr.k == V_STR) { /* map(attribute='x', default=...) */
    jv dflt = arg(a, 99, "default", UNDEF);
    for (size_t i = 0; i < in->n; i++) {
      jv item;
      SSM_TRY(ssm_jv_get_attr(c, n, in->v[i], cstr(c, attr), &item));
      ssm_jv_list_push(c, res, item.k == V_UNDEF && dflt.k != V_UNDEF ? dflt : item);
    }
    *out = v_list(res);
    return NULL;
  }
  int first = by_attr ? 1 : 0;
  jv fname = arg(a, first, NULL, UNDEF);
  if ((by_attr && attr.k != V_STR) || (is_map && fname.k != V_STR && attr.k != V_STR))
    return ssm_jv_err(c, n, "%s: expected an attribute or filter name", name);
  if (is_map) fname = attr;
  char *fn = fname.k == V_STR ? cstr(c, fname) : NULL;
  if (fn && (is_map ? !ssm_jinja_has_filter(fn) : !ssm_jinja_has_test(fn)))
    return ssm_jv_err(c, n, "%s: unsupported %s '%s'", name, is_map ? "filter" : "test", fn);
  args rest = {a->pos + first + 1, a->npos > first + 1 ? a->npos - first - 1 : 0, NULL, NULL, 0};
  for (size_t i = 0; i < in->n; i++) {
    jv item = in->v[i], probe = item;
    if (by_attr) SSM_TRY(ssm_jv_get_attr(c, n, item, cstr(c, attr), &probe));
    if (is_map) {
      jv r;
      SSM_TRY(ssm_jv_filter(c, n, fn, item, &rest, &r));
      ssm_jv_list_push(c, res, r);
      continue;
    }
    int ok = ssm_jv_truthy(probe);
    if (fn) SSM_TRY(ssm_jv_test(c, n, fn, probe, &rest, &ok));
    if (ok == keep_if) ssm_jv_list_push(c, res, item);
  }
  *out = v_list(res);
  return NULL;
}

/* Whether float `f` truncates to an int64. */
static int fits_int(double f) { return f > -9223372036854775808.0 - 1 && f < 9223372036854775808.0; }

static ssm_status to_int(ctx *c, jv v, jv dflt, jv *out) {
  if (v.k == V_INT || v.k == V_BOOL) *out = v_int(v.u.i);
  else if (v.k == V_FLOAT) *out = fits_int(v.u.f) ? v_int((int64_t)v.u.f) : dflt;
  else if (v.k == V_STR) {
    char *s = cstr(c, v), *end;
    while (*s && is_space(*s)) s++;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    while (*end && is_space(*end)) end++;
    if (end != s && !*end && !errno) *out = v_int(x);
    else {
      double d = strtod(s, &end);
      while (*end && is_space(*end)) end++;
      *out = end != s && !*end && fits_int(d) ? v_int((int64_t)d) : dflt;
    }
  } else *out = dflt;
  return NULL;
}

ssm_status ssm_jv_filter(ctx *c, const jnode *n, const char *name, jv v, const args *a, jv *out) {
  jv a0 = arg(a, 0, NULL, UNDEF);
  /* a string is scanned about once; the filters that walk a list count it */
  SSM_TRY(ssm_jv_work(c, n, 1 + (v.k == V_STR ? v.u.s.n / 64 : 0)));
  if (!strcmp(name, "default") || !strcmp(name, "d")) {
    jv dflt = arg(a, 0, "default_value", v_str("", 0)), boolean = arg(a, 1, "boolean", v_bool(0));
    *out = v.k == V_UNDEF || (ssm_jv_truthy(boolean) && !ssm_jv_truthy(v)) ? dflt : v;
  } else if (!strcmp(name, "length") || !strcmp(name, "count")) {
    if (v.k != V_STR && v.k != V_LIST && v.k != V_DICT && v.k != V_NS && v.k != V_UNDEF)
      return ssm_jv_err(c, n, "object of type '%s' has no len()", ssm_jv_type_name(v));
    *out = v_int((int64_t)ssm_jv_length(v));
  } else if (!strcmp(name, "tojson")) {
    static const char *const kws[] = {"indent", "sort_keys", "ensure_ascii", NULL};
    SSM_TRY(check_arity(c, n, a, 1, kws, "tojson"));
    jv indent = arg(a, 0, "indent", NONE), ea = arg(a, 99, "ensure_ascii", v_bool(0));
    if (ssm_jv_truthy(ea)) return ssm_jv_err(c, n, "tojson: ensure_ascii=True is not supported");
    if (indent.k != V_NONE && indent.k != V_INT) return ssm_jv_err(c, n, "tojson: indent must be an integer");
    ssm_sb b = {0};
    ssm_sb_append(&b, "", 0);
    if (indent.k == V_INT && (indent.u.i < 0 || indent.u.i > 64)) return ssm_jv_err(c, n, "tojson: indent must be 0 to 64");
    ssm_status s = ssm_jv_put_json(c, n, &b, v, indent.k == V_INT ? (int)indent.u.i : -1, 0,
                                   ssm_jv_truthy(arg(a, 99, "sort_keys", v_bool(0))));
    if (s) {
      ssm_sb_free(&b);
      return s;
    }
    return ssm_jv_take(c, n, &b, out);
  } else if (!strcmp(name, "string")) {
    *out = ssm_jv_to_str(c, v);
  } else if (!strcmp(name, "safe")) {
    *out = v;
  } else if (!strcmp(name, "int")) {
    return to_int(c, v, arg(a, 0, "default", v_int(0)), out);
  } else if (!strcmp(name, "float")) {
    jv i;
    if (v.k == V_FLOAT) *out = v;
    else if (v.k == V_STR) {
      char *s = cstr(c, v), *end;
      double d = strtod(s, &end);
      *out = end != s && !*end ? v_float(d) : arg(a, 0, "default", v_float(0));
    } else {
      SSM_TRY(to_int(c, v, v_int(0), &i));
      *out = v_float((double)i.u.i);
    }
  } else if (!strcmp(name, "abs")) {
    if (!is_num(v)) return ssm_jv_err(c, n, "abs: expected a number, got %s", ssm_jv_type_name(v));
    if (v.k == V_FLOAT) *out = v_float(fabs(v.u.f));
    else if (v.u.i >= 0) *out = v_int(v.u.i);
    else {
      int64_t r;
      SSM_TRY(ssm_jv_int_op(c, n, 'n', 0, v.u.i, &r));
      *out = v_int(r);
    }
  } else if (!strcmp(name, "round")) {
    if (!is_num(v)) return ssm_jv_err(c, n, "round: expected a number, got %s", ssm_jv_type_name(v));
    jv prec = arg(a, 0, "precision", v_int(0));
    double m = pow(10, (double)(prec.k == V_INT ? prec.u.i : 0));
    *out = v_float(round(num(v) * m) / m);
  } else if (!strcmp(name, "trim") || !strcmp(name, "upper") || !strcmp(name, "lower") ||
             !strcmp(name, "title") || !strcmp(name, "capitalize")) {
    jv s = ssm_jv_to_str(c, v);
    if (name[0] == 't' && name[1] == 'r') *out = strip(s, a0.k == V_STR ? &a0 : NULL, 1, 1);
    else *out = change_case(c, s, name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : name[0] == 't' ? 't' : 'c');
  } else if (!strcmp(name, "replace")) {
    jv s = ssm_jv_to_str(c, v);
    SSM_TRY(need_str(c, n, a0, "replace"));
    jv a1 = arg(a, 1, NULL, UNDEF), cnt = arg(a, 2, "count", NONE);
    SSM_TRY(need_str(c, n, a1, "replace"));
    return replace(c, n, s, a0, a1, cnt.k == V_INT ? cnt.u.i : -1, out);
  } else if (!strcmp(name, "join")) {
    jv attr = arg(a, 1, "attribute", NONE);
    SSM_TRY(join(c, n, v, arg(a, 0, "d", v_str("", 0)), &attr, out));
  } else if (!strcmp(name, "list")) {
    jlist *l, *copy = ssm_jv_list_new(c, 0);
    SSM_TRY(ssm_jv_iterable(c, n, v, &l));
    SSM_TRY(ssm_jv_work(c, n, l->n));
    for (size_t i = 0; i < l->n; i++) ssm_jv_list_push(c, copy, l->v[i]);
    *out = v_list(copy);
  } else if (!strcmp(name, "first") || !strcmp(name, "last")) {
    jlist *l;
    SSM_TRY(ssm_jv_iterable(c, n, v, &l));
    *out = l->n ? l->v[name[0] == 'f' ? 0 : l->n - 1] : UNDEF;
  } else if (!strcmp(name, "reverse")) {
    if (v.k == V_STR) {
      jv r;
      const jv bounds[3] = {NONE, NONE, v_int(-1)}; /* [::-1] */
      SSM_TRY(ssm_jv_slice(c, n, v, bounds, &r));
      *out = r;
    } else {
      jlist *l, *r = ssm_jv_list_new(c, 0);
      SSM_TRY(ssm_jv_iterable(c, n, v, &l));
      SSM_TRY(ssm_jv_work(c, n, l->n));
      for (size_t i = l->n; i-- > 0;) ssm_jv_list_push(c, r, l->v[i]);
      *out = v_list(r);
    }
  } else if (!strcmp(name, "items")) {
    if (v.k == V_UNDEF) *out = v_list(ssm_jv_list_new(c, 0));
    else if (v.k != V_DICT && v.k != V_NS)
      return ssm_jv_err(c, n, "items: expected a mapping, got %s", ssm_jv_type_name(v));
    else return ssm_jv_call_method(c, n, v, "items", a, out);
  } else if (!strcmp(name, "dictsort")) {
    if (v.k != V_DICT) return ssm_jv_err(c, n, "dictsort: expected a mapping, got %s", ssm_jv_type_name(v));
    jv items;
    SSM_TRY(ssm_jv_call_method(c, n, v, "items", a, &items));
    SSM_TRY(oom(c)); /* the pairs are whole */
    jlist *l = items.u.l;
    for (size_t i = 1; i < l->n; i++)
      for (size_t j = i; j > 0; j--) {
        SSM_TRY(ssm_jv_work(c, n, 1));
        int cmp;
        jv ka = change_case(c, ssm_jv_to_str(c, l->v[j - 1].u.l->v[0]), 'l'),
           kb = change_case(c, ssm_jv_to_str(c, l->v[j].u.l->v[0]), 'l');
        SSM_TRY(ssm_jv_order(c, n, ka, kb, &cmp));
        if (cmp <= 0) break;
        jv t = l->v[j];
        l->v[j] = l->v[j - 1];
        l->v[j - 1] = t;
      }
    *out = items;
  } else if (!strcmp(name, "unique")) {
    jlist *l, *r = ssm_jv_list_new(c, 0);
    SSM_TRY(ssm_jv_iterable(c, n, v, &l));
    for (size_t i = 0; i < l->n; i++) {
      int seen = 0;
      for (size_t k = 0; k < r->n && !seen; k++) seen = ssm_jv_equal(c, r->v[k], l->v[i]);
      SSM_TRY(ssm_jv_work(c, n, 0)); /* what the comparisons counted */
      if (!seen) ssm_jv_list_push(c, r, l->v[i]);
    }
    *out = v_list(r);
  } else if (!strcmp(name, "sum")) {
    jlist *l;
    SSM_TRY(ssm_jv_iterable(c, n, v, &l));
    SSM_TRY(ssm_jv_work(c, n, l->n));
    jv total = arg(a, 1, "start", v_int(0));
    for (size_t i = 0; i < l->n; i++) {
      if (!is_num(l->v[i]) || !is_num(total)) return ssm_jv_err(c, n, "sum: expected numbers");
      if (total.k == V_FLOAT || l->v[i].k == V_FLOAT) {
        total = v_float(num(total) + num(l->v[i]));
      } else {
        int64_t r;
        SSM_TRY(ssm_jv_int_op(c, n, '+', total.u.i, l->v[i].u.i, &r));
        total = v_int(r);
      }
    }
    *out = total;
  } else if (!strcmp(name, "escape") || !strcmp(name, "e")) {
    jv s = ssm_jv_to_str(c, v);
    ssm_sb b = {0};
    ssm_sb_append(&b, "", 0);
    for (size_t i = 0; i < s.u.s.n; i++) {
      char ch = s.u.s.p[i];
      const char *e = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;" : ch == '\'' ? "&#39;" : NULL;
      if (e) ssm_sb_printf(&b, "%s", e);
      else ssm_sb_append(&b, &ch, 1);
    }
    return ssm_jv_take(c, n, &b, out);
  } else {
    return filter_seq(c, n, name, v, a, out);
  }
  return NULL;
}

ssm_status ssm_jv_test(ctx *c, const jnode *n, const char *name, jv v, const args *a, int *out) {
  jv a0 = arg(a, 0, NULL, UNDEF);
  SSM_TRY(ssm_jv_work(c, n, 1 + (v.k == V_STR ? v.u.s.n / 64 : 0)));
  int cmp;
  if (!strcmp(name, "defined")) *out = v.k != V_UNDEF;
  else if (!strcmp(name, "undefined")) *out = v.k == V_UNDEF;
  else if (!strcmp(name, "none")) *out = v.k == V_NONE;
  else if (!strcmp(name, "string")) *out = v.k == V_STR;
  else if (!strcmp(name, "number")) *out = is_num(v);
  else if (!strcmp(name, "integer")) *out = v.k == V_INT;
  else if (!strcmp(name, "float")) *out = v.k == V_FLOAT;
  else if (!strcmp(name, "boolean")) *out = v.k == V_BOOL;
  else if (!strcmp(name, "true")) *out = v.k == V_BOOL && v.u.i;
  else if (!strcmp(name, "false")) *out = v.k == V_BOOL && !v.u.i;
  else if (!strcmp(name, "mapping")) *out = v.k == V_DICT || v.k == V_NS;
  else if (!strcmp(name, "iterable")) *out = v.k == V_STR || v.k == V_LIST || v.k == V_DICT || v.k == V_NS;
  else if (!strcmp(name, "sequence")) *out = v.k == V_STR || v.k == V_LIST || v.k == V_DICT;
  else if (!strcmp(name, "callable")) *out = v.k == V_MACRO || v.k == V_FUNC;
  else if (!strcmp(name, "odd") || !strcmp(name, "even")) {
    if (v.k != V_INT) return ssm_jv_err(c, n, "%s: expected an integer, got %s", name, ssm_jv_type_name(v));
    *out = (int)(((v.u.i % 2) + 2) % 2) == (name[0] == 'o');
  } else if (!strcmp(name, "divisibleby")) {
    if (v.k != V_INT || a0.k != V_INT || !a0.u.i) return ssm_jv_err(c, n, "divisibleby: expected integers");
    int64_t r;
    SSM_TRY(ssm_jv_int_op(c, n, '%', v.u.i, a0.u.i, &r));
    *out = r == 0;
  } else if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) *out = ssm_jv_equal(c, v, a0);
  else if (!strcmp(name, "ne") || !strcmp(name, "!=")) *out = !ssm_jv_equal(c, v, a0);
  else if (!strcmp(name, "sameas"))
    *out = v.k == a0.k && (v.k == V_NONE || v.k == V_UNDEF || (v.k == V_BOOL && v.u.i == a0.u.i) ||
                           ssm_jv_equal(c, v, a0));
  else if (!strcmp(name, "in")) return ssm_jv_contains(c, n, a0, v, out);
  else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
    *out = v.k == V_STR;
    for (size_t i = 0; *out && i < v.u.s.n; i++)
      if ((name[0] == 'l' && v.u.s.p[i] >= 'A' && v.u.s.p[i] <= 'Z') || (name[0] == 'u' && v.u.s.p[i] >= 'a' && v.u.s.p[i] <= 'z')) *out = 0;
  } else {
    SSM_TRY(ssm_jv_order(c, n, v, a0, &cmp));
    *out = !strcmp(name, "lt") || !strcmp(name, "<") ? cmp < 0 : !strcmp(name, "le") || !strcmp(name, "<=") ? cmp <= 0
           : !strcmp(name, "gt") || !strcmp(name, ">") ? cmp > 0 : cmp >= 0;
  }
  return NULL;
}

/* ---- globals ------------------------------------------------------------------------ */

enum { F_RANGE, F_NAMESPACE, F_DICT, F_RAISE, F_STRFTIME };
static const char *const global_names[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};

ssm_status ssm_jv_call_global(ctx *c, const jnode *n, int fn, const args *a, jv *out) {
  if (fn == F_RANGE) {
    int64_t b = 0, e, st = 1;
    for (int i = 0; i < a->npos; i++)
      if (a->pos[i].k != V_INT)
        return ssm_jv_err(c, n, "range: expected integers, got %s", ssm_jv_type_name(a->pos[i]));
    if (a->npos < 1 || a->npos > 3) return ssm_jv_err(c, n, "range takes 1 to 3 arguments");
    if (a->npos == 1) e = a->pos[0].u.i;
    else b = a->pos[0].u.i, e = a->pos[1].u.i;
    if (a->npos == 3) st = a->pos[2].u.i;
    if (!st) return ssm_jv_err(c, n, "range: the step is zero");
    /* the count in unsigned 64 bits: exact, where e - b or i + st would overflow */
    uint64_t span = st > 0 ? (e > b ? (uint64_t)e - (uint64_t)b : 0) : (b > e ? (uint64_t)b - (uint64_t)e : 0);
    uint64_t stride = st > 0 ? (uint64_t)st : (uint64_t)0 - (uint64_t)st;
    uint64_t count = span ? (span - 1) / stride + 1 : 0;
    if (count > MAX_RANGE)
      return ssm_jv_err(c, n, "range of %llu items (at most %d)", (unsigned long long)count, MAX_RANGE);
    SSM_TRY(ssm_jv_work(c, n, (size_t)count));
    jlist *l = ssm_jv_list_new(c, (size_t)count);
    for (uint64_t k = 0; k < count; k++) ssm_jv_list_push(c, l, v_int((int64_t)((uint64_t)b + k * (uint64_t)st)));
    *out = v_list(l);
  } else if (fn == F_NAMESPACE || fn == F_DICT) {
    jdict *d = ssm_jv_dict_new(c);
    if (a->npos && (a->pos[0].k == V_DICT || a->pos[0].k == V_NS))
      for (size_t i = 0; i < a->pos[0].u.d->n; i++)
        ssm_jv_dict_set(c, d, a->pos[0].u.d->keys[i], a->pos[0].u.d->vals[i]);
    else if (a->npos) return ssm_jv_err(c, n, "%s: expected keyword arguments", global_names[fn]);
    for (int k = 0; k < a->nkw; k++) ssm_jv_dict_set(c, d, v_str(a->names[k], strlen(a->names[k])), a->kw[k]);
    *out = (jv){fn == F_NAMESPACE ? V_NS : V_DICT, {.d = d}, NULL};
  } else if (fn == F_RAISE) {
    jv msg = ssm_jv_to_str(c, arg(a, 0, NULL, v_str("", 0)));
    return ssm_status_new(SSM_ERR_INVALID, "the chat template refused the request: %.*s", (int)msg.u.s.n, msg.u.s.p);
  } else {
    jv fmt = arg(a, 0, NULL, UNDEF);
    SSM_TRY(need_str(c, n, fmt, "strftime_now"));
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    /* a space after the format, so that 0 from strftime only ever means
     * "no room" (the result itself may be empty); the room doubles up to
     * MAX_STRFTIME bytes, the terminating NUL included */
    enum { MAX_STRFTIME = 4096 };
    const char *spaced = ssm_arena_printf(c->a, "%.*s ", (int)fmt.u.s.n, fmt.u.s.p);
    SSM_TRY(ssm_arena_status(c->a, "strftime_now's format"));
    char *buf = NULL;
    size_t k = 0;
    for (size_t cap = 256; !k && cap <= MAX_STRFTIME; cap *= 2) {
      char *grown = realloc(buf, cap);
      if (!grown) {
        free(buf);
        return ssm_status_new(SSM_ERR_NOMEM, "out of host memory for strftime_now's result");
      }
      buf = grown;
      k = strftime(buf, cap, spaced, &tm);
    }
    if (k) *out = ssm_jv_copy(c, buf, k - 1);
    free(buf);
    if (!k) return ssm_jv_err(c, n, "strftime_now: the date is longer than %d bytes", MAX_STRFTIME - 2);
  }
  return NULL;
}

int ssm_jv_global_index(const char *name) {
  for (int k = 0; global_names[k]; k++)
    if (!strcmp(global_names[k], name)) return k;
  return -1;
}

/* ---- the tables ------------------------------------------------------------------------ */

static int in_table(const char *const *t, const char *name) {
  for (; *t; t++)
    if (!strcmp(*t, name)) return 1;
  return 0;
}

int ssm_jinja_has_filter(const char *name) {
  static const char *const t[] = {"default", "d", "length", "count", "tojson", "string", "safe", "int",
                                  "float", "abs", "round", "trim", "upper", "lower", "title",
                                  "capitalize", "replace", "join", "list", "first", "last", "reverse",
                                  "items", "dictsort", "unique", "sum", "escape", "e", "select",
                                  "reject", "selectattr", "rejectattr", "map", NULL};
  return in_table(t, name);
}

int ssm_jinja_has_test(const char *name) {
  static const char *const t[] = {"defined", "undefined", "none", "string", "number", "integer",
                                  "float", "boolean", "true", "false", "mapping", "iterable",
                                  "sequence", "callable", "odd", "even", "divisibleby", "eq",
                                  "equalto", "==", "ne", "!=", "sameas", "in", "lower", "upper",
                                  "lt", "<", "le", "<=", "gt", ">", "ge", ">=", NULL};
  return in_table(t, name);
}

int ssm_jinja_has_method(const char *name) {
  static const char *const t[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "replace",
                                  "startswith", "endswith", "upper", "lower", "title", "capitalize",
                                  "find", "count", "join", "splitlines", "items", "keys", "values",
                                  "get", "cycle", NULL};
  return in_table(t, name);
}

int ssm_jinja_has_global(const char *name) { return in_table(global_names, name); }
