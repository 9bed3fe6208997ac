/*
 * kernels.c — one kernel per fused group (passes/groups.c): the template of
 * the group's anchor (matmul, scan, conv1d, attention, row reductions, embed,
 * reduce; pointwise when there is none), with generated load functions that
 * evaluate the group's absorbed expressions and read through views, and an
 * epilogue applied to each result element. Shapes are compile-time constants.
 * An elementwise op's code is its row of ir/elementwise.def (ssm_op_expr).
 *
 * The same generator writes GLSL and WGSL: a group is generated once per
 * language (gctx.lang), from templates/<family>.glsl.in and .wgsl.in with the
 * same knobs, and only the few spellings that differ (memory access, float
 * literals, selects, function heads) go through the helpers below. In WGSL a
 * kernel reads tensor i through b<i>_ld / b<i>_st, which add the tensor's
 * element offset (a per-dispatch uniform) and go to its memory slot; the
 * slots' storage bindings come last (ssm_cg_wgsl_module), once the bundle's
 * layout says how many windows each needs.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "codegen/internal.h"
#include "codegen/knobs.h"

/* ---- text --------------------------------------------------------------- */

/* The text of `b` copied into the arena; empties `b`. */
static const char *sb_take(ssm_sb *b, ssm_arena *a) {
  const char *r = ssm_arena_strdup(a, ssm_sb_str(b));
  ssm_sb_free(b);
  return r;
}


/* ---- the group being generated ------------------------------------------ */

typedef struct {
  ssm_graph *g;
  ssm_lang lang;        /* the language being written */
  int id;               /* group id, or -1 with `single` */
  const ssm_node *single; /* a node generated alone (kernel tests) */
  const ssm_node *first;  /* members lie from first to root (groups.c) */
  const ssm_node *root, *anchor, *norm;
  ssm_arena *a;
  const ssm_value *bind[SSM_BUNDLE_MAX_BINDINGS];
  int nbind;
  int in_epilogue; /* emitting the epilogue: the anchor's value is `acc` */
  int touching;    /* emitting epilogue_touch: the epilogue's loads, nothing written */
  ssm_sb helpers;
  int nhelpers;
  const ssm_node *mm_node[8]; /* matmul members written as helpers, and their ids */
  int mm_id[8], nmm;
  /* a scan kernel's [T, S] matmul members computed before its time loop
   * (matmul_helper): the scan's T and S, its rows per workgroup (0: none),
   * and the helpers' ids */
  int64_t pre_t, pre_s, pre_rows;
  int pre_id[8], npre;
  const ssm_node *pre_norm[8]; /* the rmsnorm of a pre matmul's x, or NULL */
  /* a prefill scan's rmsnorm members over rows of t (Falcon-Mamba's B and
   * C norms): each row's rsqrt computed once per time chunk into shared
   * memory (rmc<id>), not by every state thread at every step */
  int64_t scan_cache; /* the scan's T when it is more than 1, else 0 */
  const char *scan_step; /* the scan's time coordinate in in_a/in_b/in_c */
  const ssm_node *rmc_node[8];
  int rmc_id[8], nrmc;
  const ssm_node *conv_done[16]; /* decode convs written into an epilogue */
  int nconv;
  int slot[SSM_BUNDLE_MAX_BINDINGS]; /* WGSL: the memory slot of each binding */
  int slot_writable[SSM_BUNDLE_MAX_BINDINGS];
  unsigned access[SSM_BUNDLE_MAX_BINDINGS];
  int nslots;
  unsigned vec4; /* GLSL: bindings also read through a uvec4 view (bit i) */
  int counted;   /* reads the run's token count (run_count) */
  ssm_status err;
} gctx;

#define I64(x) ssm_arena_printf(c->a, "%lld", (long long)(x))
#define U32(x) ssm_arena_printf(c->a, "%u", (unsigned)(x))

/* The spellings of the kernel's language (lang.def). */
static const ssm_cg_lang *lang(const gctx *c) { return &ssm_cg_langs[c->lang]; }

/* Snippet `name` of templates/<family>.<lang>.in with `kv` (template.c);
 * a failure is the group's error, and gives "". */
static const char *snippet_kv(gctx *c, const char *family, const char *name,
                              const char *const *kv) {
  char *s;
  ssm_status st = ssm_cg_snippet_expand(c->a, family, c->lang, name, kv, &s);
  if (!st) return s;
  if (!c->err) c->err = st;
  else ssm_status_free(st);
  return "";
}
/* snippet_kv with the keys and values that follow */
#define SNIPPET(c, family, name, ...) \
  snippet_kv(c, family, name, (const char *const[]){__VA_ARGS__, NULL})
/* snippet_kv of a snippet without keys */
#define SNIPPET0(c, family, name) snippet_kv(c, family, name, (const char *const[]){NULL})

static int member(const gctx *c, const ssm_node *n) {
  return c->single ? n == c->single : ssm_node_group(n) == c->id;
}

static int ungrouped_view(const gctx *c, const ssm_node *n) {
  return ssm_op_is_view(n->op) && !member(c, n) && ssm_node_group(n) < 0;
}

static int binding_of(gctx *c, const ssm_value *v) {
  for (int i = 0; i < c->nbind; i++)
    if (c->bind[i] == v) return i;
  if (c->nbind == SSM_BUNDLE_MAX_BINDINGS) {
    if (!c->err)
      c->err = ssm_status_new(SSM_ERR_UNSUPPORTED, "a fused kernel would read more than %d "
                              "tensors", SSM_BUNDLE_MAX_BINDINGS - 1);
    return 0;
  }
  c->bind[c->nbind] = v;
  return c->nbind++;
}

typedef struct {
  const char *c[SSM_MAX_RANK];
  int rank;
} coords;

static coords coords_named(const char *prefix, int rank, ssm_arena *a) {
  coords k = {.rank = rank};
  for (int d = 0; d < rank; d++) k.c[d] = ssm_arena_printf(a, "%s%d", prefix, d);
  return k;
}

/* Linear index of coordinates in a contiguous tensor of type t. */
static void linearize(ssm_sb *b, const coords *k, const ssm_type *t) {
  int64_t stride = 1;
  int any = 0;
  ssm_sb terms = {0};
  for (int d = t->rank - 1; d >= 0; d--) {
    if (t->dims[d] != 1) {
      if (stride == 1) ssm_sb_printf(&terms, "%s%s", any ? " + " : "", k->c[d]);
      else ssm_sb_printf(&terms, "%s%s * %lldu", any ? " + " : "", k->c[d], (long long)stride);
      any = 1;
    }
    stride *= t->dims[d];
  }
  if (!any) ssm_sb_printf(b, "0u");
  else ssm_sb_printf(b, "(%s)", ssm_sb_str(&terms));
  ssm_sb_free(&terms);
}

/* Coordinates in type t of the linear index expression `lin`. */
static coords delinearize(const char *lin, const ssm_type *t, ssm_arena *a) {
  coords k = {.rank = t->rank};
  int64_t stride = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    if (t->dims[d] == 1) k.c[d] = "0u";
    else if (d == 0) k.c[d] = stride == 1 ? lin : ssm_arena_printf(a, "(%s / %lldu)", lin, (long long)stride);
    else if (stride == 1) k.c[d] = ssm_arena_printf(a, "(%s %% %lldu)", lin, (long long)t->dims[d]);
    else
      k.c[d] = ssm_arena_printf(a, "((%s / %lldu) %% %lldu)", lin, (long long)stride, (long long)t->dims[d]);
    stride *= t->dims[d];
  }
  return k;
}

/* Whether types a and b have the same dims but for dims of 1. */
static int unit_reshape(const ssm_type *a, const ssm_type *b) {
  int i = 0, j = 0;
  for (;;) {
    while (i < a->rank && a->dims[i] == 1) i++;
    while (j < b->rank && b->dims[j] == 1) j++;
    if (i == a->rank || j == b->rank) return i == a->rank && j == b->rank;
    if (a->dims[i++] != b->dims[j++]) return 0;
  }
}

/* Coordinates of an operand of type `op` broadcast (numpy) into `k`. */
static coords broadcast(const coords *k, const ssm_type *op) {
  coords r = {.rank = op->rank};
  int lead = k->rank - op->rank;
  for (int d = 0; d < op->rank; d++) r.c[d] = op->dims[d] == 1 ? "0u" : k->c[d + lead];
  return r;
}

/* A float literal; inf and NaN from their bits (lang.def's from_bits). */
static const char *float_lit(const gctx *c, double v) {
  if (isnan(v)) return ssm_cg_spelled(c->a, lang(c)->from_bits, "0x7fc00000u");
  if (isinf(v)) return ssm_cg_spelled(c->a, lang(c)->from_bits, v > 0 ? "0x7f800000u" : "0xff800000u");
  return ssm_arena_printf(c->a, "%s(%.9g)", lang(c)->f32, v);
}

/* The head of a generated function returning type `ret` of `params` (names
 * separated by spaces: `acc` is an f32, the others u32 coordinates). */
static void fn_head_typed(const gctx *c, ssm_sb *b, const char *ret, const char *name,
                          const char *params) {
  const ssm_cg_lang *l = lang(c);
  ssm_cg_spell(b, l->fn_open, name, ret);
  for (const char *p = params; *p;) {
    size_t n = strcspn(p, " ");
    int is_acc = n == 3 && !strncmp(p, "acc", 3);
    ssm_cg_spell(b, l->fn_param, ssm_arena_strndup(c->a, p, n), is_acc ? l->f32 : l->u32);
    p += n;
    while (*p == ' ') p++;
    if (*p) ssm_sb_printf(b, ", ");
  }
  ssm_cg_spell(b, l->fn_close, ret);
}

/* The head of a generated f32 function (fn_head_typed). */
static void fn_head(const gctx *c, ssm_sb *b, const char *name, const char *params) {
  fn_head_typed(c, b, lang(c)->f32, name, params);
}

/* `NAME(params) { return value; }`, a constant load */
static void const_fn(const gctx *c, ssm_sb *b, const char *name, const char *params,
                     const char *value) {
  fn_head(c, b, name, params);
  ssm_sb_printf(b, "{ return %s; }\n", value);
}

/* Element `idx` of binding b as a float (or int): lang.def's load, or for a
 * 16-bit weight load_bf16 or load_f16 (the math stays f32). */
static void mem_load(const gctx *c, ssm_sb *out, int b, ssm_dtype dt, const char *idx) {
  const ssm_cg_lang *l = lang(c);
  const char *pattern = dt == SSM_BF16 ? l->load_bf16 : dt == SSM_F16 ? l->load_f16 : l->load;
  ssm_cg_spell(out, pattern, ssm_arena_printf(c->a, "%d", b), idx);
}

static void emit(gctx *c, const ssm_value *v, const coords *k, ssm_sb *out, int depth);

/* A generated function returning rsqrt(mean(x^2) + eps) over the last axis
 * of small-row rmsnorm `n`'s input at leading coordinates c0... */
static int rms_helper(gctx *c, const ssm_node *n, int depth) {
  const ssm_type *t = &n->args[0]->type;
  int r = t->rank;
  int64_t C = t->dims[r - 1];
  coords k = coords_named("c", r, c->a);
  k.c[r - 1] = "j";
  ssm_sb body = {0}, params = {0};
  emit(c, n->args[0], &k, &body, depth + 1);
  int id = c->nhelpers++;
  for (int d = 0; d < r - 1; d++) ssm_sb_printf(&params, "%sc%d", d ? " " : "", d);
  fn_head(c, &c->helpers, ssm_arena_printf(c->a, "rms%d", id), ssm_sb_str(&params));
  ssm_sb_printf(&c->helpers, "%s\n",
                SNIPPET(c, "helpers", "rms", "C", I64(C), "X", ssm_sb_str(&body), "EPS",
                        float_lit(c, ssm_node_float(n, "eps", 0))));
  ssm_sb_free(&body);
  ssm_sb_free(&params);
  return id;
}

/* The helpers of matmul member `n` (fuse.c's small matmuls, in a scan
 * kernel over their rows: c->pre_rows): mmp<id>(c0, n, k0, ks), the dot
 * product of x's row c0 with W's row n over k = k0, k0 + ks, ... in order,
 * which the scan's prologue runs for its rows (pre<id>, [T][ROWS] in
 * shared memory); and mm<id>(c0, n), the element, read from there.
 * When x is an rmsnorm member (Falcon-Mamba's dt norm), mmp<id> takes the
 * row's rsqrt(mean square + eps) as a fifth argument (named acc: fn_head's
 * float), which the prologue computes first, once per row, and sums
 * (in * rsqrt * gain) * w, the arithmetic of the norm evaluated where it
 * is read: the same order as prefill's kernels. The mean square of a small
 * row (a pointwise norm) is rms<id>'s sequential sum, as there; of a large
 * row, the row's threads sum mmq<id>(c0, k0, ks), the squares of in over
 * their k. Returns the id. */
static int matmul_helper(gctx *c, const ssm_node *n, int depth) {
  for (int i = 0; i < c->nmm; i++)
    if (c->mm_node[i] == n) return c->mm_id[i];
  const ssm_type *t = &n->args[0]->type, *rt = &n->result->type;
  int r = t->rank;
  int64_t K = t->dims[r - 1];
  const ssm_node *norm = n->args[0]->def;
  if (norm->op != SSM_OP_RMSNORM || !member(c, norm)) norm = NULL;
  coords kx = coords_named("c", r, c->a);
  kx.c[r - 1] = "j";
  coords kw = {.rank = 2, .c = {"n", "j"}}, kg = {.rank = 1, .c = {"j"}};
  ssm_sb x = {0}, w = {0}, params = {0}, in = {0};
  if (norm) { /* (in * rsqrt * gain), rsqrt the argument acc */
    emit(c, norm->args[0], &kx, &in, depth + 1);
    ssm_sb_printf(&x, "(%s * acc", ssm_sb_str(&in));
    if (norm->nargs > 1) {
      ssm_sb_printf(&x, " * ");
      emit(c, norm->args[1], &kg, &x, depth + 1);
    }
    ssm_sb_printf(&x, ")");
  } else {
    emit(c, n->args[0], &kx, &x, depth + 1);
  }
  emit(c, n->args[1], &kw, &w, depth + 1);
  int id = c->nhelpers++;
  if (c->nmm < 8) {
    c->mm_node[c->nmm] = n;
    c->mm_id[c->nmm++] = id;
  }
  for (int d = 0; d < r - 1; d++) ssm_sb_printf(&params, "c%d ", d);
  if (norm && K > SSM_SMALL_ROW) { /* the squares of the norm's input over the same k */
    fn_head(c, &c->helpers, ssm_arena_printf(c->a, "mmq%d", id),
            ssm_arena_printf(c->a, "%sk0 ks", ssm_sb_str(&params)));
    ssm_sb_printf(&c->helpers, "%s\n",
                  SNIPPET(c, "helpers", "mm_squares", "K", I64(K), "X", ssm_sb_str(&in)));
  }
  ssm_sb_printf(&params, "n");
  fn_head(c, &c->helpers, ssm_arena_printf(c->a, "mmp%d", id),
          ssm_arena_printf(c->a, "%s k0 ks%s", ssm_sb_str(&params), norm ? " acc" : ""));
  ssm_sb_printf(&c->helpers, "%s\n",
                SNIPPET(c, "helpers", "mm_dot", "K", I64(K), "X", ssm_sb_str(&x), "W",
                        ssm_sb_str(&w)));
  int pre = c->pre_rows && r == 2 && rt->rank == 2 && rt->dims[0] == c->pre_t &&
            rt->dims[1] == c->pre_s && c->npre < 8;
  if (pre) {
    int64_t size = c->pre_t * c->pre_rows;
    if (!c->npre) { /* the workgroup's first row, set by the prologue */
      ssm_cg_spell(&c->helpers, lang(c)->private_u32, "g_row0");
      ssm_sb_printf(&c->helpers, "\n");
    }
    ssm_cg_spell(&c->helpers, lang(c)->shared_f32s, ssm_arena_printf(c->a, "pre%d", id), I64(size));
    ssm_sb_printf(&c->helpers, "\n");
    fn_head(c, &c->helpers, ssm_arena_printf(c->a, "mm%d", id), "c0 n");
    ssm_sb_printf(&c->helpers, "{\n  return pre%d[c0 * %lldu + n - g_row0];\n}\n", id,
                  (long long)c->pre_rows);
    c->pre_norm[c->npre] = norm;
    c->pre_id[c->npre++] = id;
  } else if (!c->err) {
    c->err = ssm_status_new(SSM_ERR_UNSUPPORTED, "a matmul is fused into a kernel that is "
                            "not a scan over its rows");
  }
  ssm_sb_free(&x);
  ssm_sb_free(&w);
  ssm_sb_free(&in);
  ssm_sb_free(&params);
  return id;
}

/* The helper of decode conv member `n` (fuse.c's fold into a matmul's
 * epilogue, one token): cv<id>(cc, acc) returns the conv at channel cc of
 * input acc, and shifts acc into column cc of the state, the sum in the
 * conv1d template's order (bias, then k in order). Written once, for the
 * one evaluation the epilogue does per element; a channel past C (WGSL's
 * select evaluates every operand of a concat) does nothing. For
 * epilogue_touch (c->touching) it is cvt<id>: the same reads and sum, the
 * state left as it is. */
static int conv_helper(gctx *c, const ssm_node *n, int depth) {
  for (int i = 0; i < c->nconv && !c->touching; i++)
    if (c->conv_done[i] == n) {
      if (!c->err)
        c->err = ssm_status_new(SSM_ERR_INTERNAL, "a decode conv is evaluated twice in one kernel");
      return 0;
    }
  if ((c->nconv == 16 && !c->touching) || !c->in_epilogue) {
    if (!c->err)
      c->err = ssm_status_new(SSM_ERR_UNSUPPORTED, c->in_epilogue
                                  ? "a kernel would do more than 16 decode convs"
                                  : "a decode conv is fused outside an epilogue");
    return 0;
  }
  if (!c->touching) c->conv_done[c->nconv++] = n;
  int64_t C = n->args[0]->type.dims[1], K = n->args[2]->type.dims[1];
  const char *klast = ssm_arena_printf(c->a, "%lldu", (long long)(K - 1));
  coords wk = {.rank = 2, .c = {"cc", "kk"}}, wl = {.rank = 2, .c = {"cc", klast}},
         sk = {.rank = 2, .c = {"kk", "cc"}}, bk = {.rank = 1, .c = {"cc"}};
  ssm_sb w = {0}, wlast = {0}, st = {0}, bias = {0};
  emit(c, n->args[2], &wk, &w, depth + 1);
  emit(c, n->args[2], &wl, &wlast, depth + 1);
  emit(c, n->args[1], &sk, &st, depth + 1);
  if (n->nargs > 3) emit(c, n->args[3], &bk, &bias, depth + 1);
  else ssm_sb_printf(&bias, "0.0");
  int sb = binding_of(c, n->args[1]);
  int id = c->nhelpers++;
  fn_head(c, &c->helpers, ssm_arena_printf(c->a, "%s%d", c->touching ? "cvt" : "cv", id),
          "cc acc");
  /* the state's column cc shifted by one, acc last */
  const char *sbs = ssm_arena_printf(c->a, "%d", sb), *shift = "", *store = "";
  if (!c->touching) {
    const char *at = ssm_arena_printf(c->a, "(kk - 1u) * %lldu + cc", (long long)C);
    shift = ssm_arena_printf(c->a, "    if (kk > 0u) { %s }\n",
                             ssm_cg_spelled(c->a, lang(c)->store, sbs, at, "o"));
  }
  if (K > 1 && !c->touching) {
    const char *at = ssm_arena_printf(c->a, "%lldu + cc", (long long)((K - 2) * C));
    store = ssm_arena_printf(c->a, "  %s\n", ssm_cg_spelled(c->a, lang(c)->store, sbs, at, "acc"));
  }
  ssm_sb_printf(&c->helpers, "%s\n",
                SNIPPET(c, "helpers", "conv", "C", I64(C), "BIAS", ssm_sb_str(&bias), "K1",
                        I64(K - 1), "STATE", ssm_sb_str(&st), "W", ssm_sb_str(&w), "SHIFT", shift,
                        "WLAST", ssm_sb_str(&wlast), "STORE", store));
  ssm_sb_free(&w);
  ssm_sb_free(&wlast);
  ssm_sb_free(&st);
  ssm_sb_free(&bias);
  return id;
}

/* Concat `d`'s operands i.. at coordinates k: a select on the axis
 * coordinate per operand boundary, `off` being operand i's start. */
static void emit_concat(gctx *c, const ssm_node *d, const coords *k, ssm_sb *out, int depth,
                        int i, int64_t off) {
  int64_t axis = ssm_node_int(d, "axis", 0), len = d->args[i]->type.dims[axis];
  coords s = *k;
  if (off) s.c[axis] = ssm_arena_printf(c->a, "(%s - %lldu)", k->c[axis], (long long)off);
  if (i + 1 == d->nargs) {
    emit(c, d->args[i], &s, out, depth + 1);
    return;
  }
  const char *cond = ssm_arena_printf(c->a, "%s < %lldu", k->c[axis], (long long)(off + len));
  ssm_sb here = {0}, rest = {0};
  emit(c, d->args[i], &s, &here, depth + 1);
  emit_concat(c, d, k, &rest, depth, i + 1, off + len);
  ssm_cg_spell(out, lang(c)->select, cond, ssm_sb_str(&here), ssm_sb_str(&rest));
  ssm_sb_free(&here);
  ssm_sb_free(&rest);
}

/* The expression for value v at coordinates k (in v's shape). */
static void emit(gctx *c, const ssm_value *v, const coords *k, ssm_sb *out, int depth) {
  const ssm_node *d = v->def;
  if (depth > 200) {
    if (!c->err) c->err = ssm_status_new(SSM_ERR_UNSUPPORTED, "fused expression too deep");
    ssm_sb_printf(out, "0.0");
    return;
  }
  if (d->op == SSM_OP_CONST) {
    ssm_sb_printf(out, "%s", float_lit(c, ssm_node_float(d, "value", 0)));
    return;
  }
  if (member(c, d) && d == c->anchor && c->in_epilogue) {
    ssm_sb_printf(out, "acc");
    return;
  }
  if ((member(c, d) && d != c->anchor && ssm_op_is_view(d->op)) || ungrouped_view(c, d)) {
    coords s = {.rank = d->args[0]->type.rank};
    const ssm_type *st = &d->args[0]->type;
    if (d->op == SSM_OP_SLICE) {
      int64_t axis = ssm_node_int(d, "axis", 0), start = ssm_node_int(d, "start", 0);
      s = *k;
      if (start) s.c[axis] = ssm_arena_printf(c->a, "(%s + %lldu)", k->c[axis], (long long)start);
    } else if (d->op == SSM_OP_TRANSPOSE) {
      const ssm_attr *perm = ssm_node_attr(d, "perm");
      for (int i = 0; i < k->rank; i++) s.c[perm->ints[i]] = k->c[i];
    } else if (unit_reshape(st, &v->type)) {
      /* only unit dims differ: the other coordinates map directly (no
       * division by a dim, and a row stays the expression it was: the
       * scan's step t, which reads a cached norm row, below) */
      int j = 0;
      for (int i = 0; i < st->rank; i++) {
        if (st->dims[i] == 1) {
          s.c[i] = "0u";
          continue;
        }
        while (v->type.dims[j] == 1) j++;
        s.c[i] = k->c[j++];
      }
      const ssm_node *src = d->args[0]->def;
      if (!member(c, src) && !ungrouped_view(c, src) && src->op != SSM_OP_CONST) {
        ssm_sb lin = {0};
        linearize(&lin, &s, st);
        mem_load(c, out, binding_of(c, d->args[0]), d->args[0]->type.dtype, ssm_sb_str(&lin));
        ssm_sb_free(&lin);
        return;
      }
    } else { /* reshape: same linear index */
      ssm_sb lin = {0};
      linearize(&lin, k, &v->type);
      const ssm_node *src = d->args[0]->def;
      int buffer = !member(c, src) && !ungrouped_view(c, src) && src->op != SSM_OP_CONST;
      if (buffer) {
        mem_load(c, out, binding_of(c, d->args[0]), d->args[0]->type.dtype, ssm_sb_str(&lin));
        ssm_sb_free(&lin);
        return;
      }
      s = delinearize(sb_take(&lin, c->a), st, c->a);
    }
    emit(c, d->args[0], &s, out, depth + 1);
    return;
  }
  if (member(c, d) && d != c->anchor) {
    ssm_op_kind kind = ssm_op_info_get(d->op)->kind;
    if (kind == SSM_KIND_UNARY || kind == SSM_KIND_BINARY) {
      ssm_sb operand[2] = {{0}};
      for (int i = 0; i < d->nargs; i++) {
        coords ai = broadcast(k, &d->args[i]->type);
        emit(c, d->args[i], &ai, &operand[i], depth + 1);
      }
      ssm_op_expr_append(out, d->op, c->lang,
                         (const char *[]){ssm_sb_str(&operand[0]), ssm_sb_str(&operand[1])});
      ssm_sb_free(&operand[0]);
      ssm_sb_free(&operand[1]);
      return;
    }
    if (d->op == SSM_OP_CONCAT) {
      emit_concat(c, d, k, out, depth, 0, 0);
      return;
    }
    if (d->op == SSM_OP_MATMUL) {
      int h = matmul_helper(c, d, depth);
      ssm_sb_printf(out, "mm%d(", h);
      for (int i = 0; i < k->rank; i++) ssm_sb_printf(out, "%s%s", i ? ", " : "", k->c[i]);
      ssm_sb_printf(out, ")");
      return;
    }
    if (d->op == SSM_OP_CONV1D) { /* a decode conv in a matmul's epilogue */
      int h = conv_helper(c, d, depth);
      ssm_sb_printf(out, "%s%d(%s, ", c->touching ? "cvt" : "cv", h, k->c[1]);
      emit(c, d->args[0], k, out, depth + 1);
      ssm_sb_printf(out, ")");
      return;
    }
    if (d->op == SSM_OP_RMSNORM && d != c->norm) {
      const ssm_type *xt = &d->args[0]->type;
      int cached = c->scan_cache && xt->rank == 2 && xt->dims[0] == c->scan_cache, h = -1;
      for (int i = 0; cached && i < c->nrmc; i++)
        if (c->rmc_node[i] == d) h = c->rmc_id[i];
      if (cached && h < 0 && c->nrmc < 8) {
        /* rmc<h>(row): this pass's rsqrt of row t0 + i from shared memory,
         * other rows (none, where the norm's rows are the scan's steps)
         * computed as uncached */
        h = rms_helper(c, d, depth);
        if (!c->nrmc) /* the pass's first step and steps, set by CHUNK (gen_scan) */
          ssm_sb_printf(&c->helpers, "%s\n", SNIPPET0(c, "helpers", "rmc_pass"));
        ssm_sb_printf(&c->helpers, "%s\n", SNIPPET(c, "helpers", "rmc", "H", I64(h)));
        c->rmc_node[c->nrmc] = d;
        c->rmc_id[c->nrmc++] = h;
      }
      ssm_sb_printf(out, "(");
      emit(c, d->args[0], k, out, depth + 1);
      int from_cache = h >= 0;
      if (!from_cache) h = rms_helper(c, d, depth);
      if (from_cache && c->scan_step && !strcmp(k->c[0], c->scan_step)) {
        /* the row is the scan's step t (in_a/in_b/in_c's t), which the
         * pass being run holds: no fallback for rows outside it, whose
         * branch kept the compiler from reading steps ahead */
        ssm_sb_printf(out, " * rmc%d_[t - g_t0]", h);
      } else {
        ssm_sb_printf(out, " * %s%d(", from_cache ? "rmc" : "rms", h);
        for (int i = 0; i < k->rank - 1; i++) ssm_sb_printf(out, "%s%s", i ? ", " : "", k->c[i]);
        ssm_sb_printf(out, ")");
      }
      if (d->nargs > 1) {
        coords w = {.rank = 1, .c = {k->c[k->rank - 1]}};
        ssm_sb_printf(out, " * ");
        emit(c, d->args[1], &w, out, depth + 1);
      }
      ssm_sb_printf(out, ")");
      return;
    }
    if (!c->err)
      c->err = ssm_status_new(SSM_ERR_INTERNAL, "%s cannot be fused into an expression",
                              ssm_op_info_get(d->op)->name);
    ssm_sb_printf(out, "0.0");
    return;
  }
  /* memory: a weight, state, input, or another kernel's result */
  int b = binding_of(c, v);
  ssm_sb idx = {0};
  linearize(&idx, k, &v->type);
  mem_load(c, out, b, v->type.dtype, ssm_sb_str(&idx));
  ssm_sb_free(&idx);
}

/* `NAME(p0, ...) { return <operand at those coordinates>; }`, where the
 * parameters are the coordinates named in `params` (fn_head) and `k` says
 * how they map onto the operand's own coordinates. */
static void load_fn(gctx *c, ssm_sb *loads, const char *name, const char *params,
                    const ssm_value *v, const coords *k) {
  ssm_sb e = {0};
  emit(c, v, k, &e, 0);
  const_fn(c, loads, name, params, ssm_sb_str(&e));
  ssm_sb_free(&e);
}

/* Coordinates of type t as (m, LAST): m over the leading dims, LAST the last. */
static coords row_coords(gctx *c, const ssm_type *t, const char *last) {
  ssm_type lead = *t;
  lead.rank = t->rank - 1;
  coords k = delinearize("m", &lead, c->a);
  k.rank = t->rank;
  k.c[t->rank - 1] = last;
  return k;
}

/* load of operand v of shape [.., K] as (m, k) with m over the leading dims */
static void load_rows(gctx *c, ssm_sb *loads, const char *name, const ssm_value *v) {
  coords k = row_coords(c, &v->type, "k");
  load_fn(c, loads, name, "m k", v, &k);
}

/* epilogue(acc, i): the group's value at element i from the anchor's acc.
 * With `touch`, also epilogue_touch(acc, i): the same reads and
 * arithmetic, nothing written (a decode conv's state stays), which a
 * template calls before its main loads so that the epilogue's own reads,
 * later, find their lines in cache; returns whether there is one (a group
 * that is its anchor alone reads nothing more). */
static int epilogue_fn(gctx *c, ssm_sb *loads, int touch) {
  if (c->root == c->anchor) {
    const_fn(c, loads, "epilogue", "acc i", "acc");
    return 0;
  }
  c->in_epilogue = 1;
  coords k = delinearize("i", &c->root->result->type, c->a);
  load_fn(c, loads, "epilogue", "acc i", c->root->result, &k);
  if (touch) {
    c->touching = 1;
    load_fn(c, loads, "epilogue_touch", "acc i", c->root->result, &k);
    c->touching = 0;
  }
  c->in_epilogue = 0;
  return touch;
}

/* The generated helper functions, then the load and epilogue functions, as
 * the template's LOADS; consumes `loads`. */
static const char *loads_text(gctx *c, ssm_sb *loads) {
  const char *t = ssm_arena_printf(c->a, "%s%s", ssm_sb_str(&c->helpers), ssm_sb_str(loads));
  ssm_sb_free(loads);
  return t;
}

/* WGSL's memory slots: the result and every other activation share slot 0,
 * the states share one slot, the small weights one, and each weight of at
 * least SSM_CG_WGSL_OWN_SLOT_BYTES has its own, as does a value in a buffer
 * of its own (apart: the prefill's logits, plan_buffers.c). */
static void assign_slots(gctx *c) {
  int shared[3] = {-1, -1, -1}; /* activations, states, small weights */
  c->nslots = 0;
  for (int i = 0; i < c->nbind; i++) {
    const ssm_value *v = c->bind[i];
    ssm_op op = v->def->op;
    int cls = op == SSM_OP_WEIGHT ? 2 : op == SSM_OP_STATE ? 1 : 0;
    uint64_t bytes = (uint64_t)ssm_type_numel(&v->type) * ssm_dtype_size(v->type.dtype);
    int own = (cls == 2 && bytes >= SSM_CG_WGSL_OWN_SLOT_BYTES) ||
              (cls == 0 && ssm_node_int(v->def, "apart", 0));
    if (!own && shared[cls] >= 0) {
      c->slot[i] = shared[cls];
      continue;
    }
    c->slot[i] = c->nslots;
    c->slot_writable[c->nslots] = cls != 2;
    if (!own) shared[cls] = c->nslots;
    c->nslots++;
  }
}

/* GLSL: one storage buffer per tensor, read through ld<i>(word) (and
 * ldq<i>(uvec4 index) for bit i of `vec4`). With `windows` (ssm_cg_glsl_split)
 * a tensor of windows[i] > 1 is bound as that many windows of SSM_WIN words,
 * a specialization constant: the first at binding i, the others after the
 * kernel's n bindings in order, and ld<i> picks the window by index. */
static void glsl_buffers(ssm_sb *b, int n, const ssm_value *const *bind, unsigned vec4,
                         const int *windows, uint64_t window) {
  int extra = n, split = 0;
  for (int i = 0; i < n && windows; i++) split |= windows[i] > 1;
  if (split)
    ssm_sb_printf(b, "layout(constant_id = %d) const uint SSM_WIN = %lluu; // words of a window\n",
                  SSM_BUNDLE_GLSL_WINDOW_ID, (unsigned long long)(window / 4));
  for (int i = 0; i < n; i++) {
    const ssm_value *v = bind[i];
    int state = v->def->op == SSM_OP_STATE, nw = windows ? windows[i] : 1, q = vec4 >> i & 1;
    const char *t = v->type.dtype == SSM_I32 ? "int" : v->type.dtype == SSM_F32 ? "float" : "uint";
    for (int w = 0; w < nw; w++) {
      int at = w ? extra++ : i;
      char name[32];
      if (w) snprintf(name, sizeof name, "b%dw%d", i, w);
      else snprintf(name, sizeof name, "b%d", i);
      ssm_sb_printf(b, "layout(std430, binding = %d) %sbuffer B%s { %s v[]; } %s;\n", at,
                    i == 0 ? "writeonly " : state ? "" : "readonly ", name + 1, t, name);
      if (q)
        ssm_sb_printf(b, "layout(std430, binding = %d) readonly buffer B%sq { uvec4 v[]; } %sq;\n",
                      at, name + 1, name);
    }
    for (int view = 0; view <= q; view++) {
      const char *sfx = view ? "q" : "";
      if (nw == 1) {
        ssm_sb_printf(b, "#define ld%s%d(e) b%d%s.v[e]\n", sfx, i, i, sfx);
        continue;
      }
      ssm_sb_printf(b, "%s ld%s%d(uint e) {\n  uint win = SSM_WIN%s, w = e / win, r = e - w * win;\n",
                    view ? "uvec4" : t, sfx, i, view ? " / 4u" : "");
      for (int w = 0; w < nw; w++) {
        char name[32];
        if (w) snprintf(name, sizeof name, "b%dw%d%s", i, w, sfx);
        else snprintf(name, sizeof name, "b%d%s", i, sfx);
        if (w + 1 < nw) ssm_sb_printf(b, "  if (w == %du) return %s.v[r];\n", w, name);
        else ssm_sb_printf(b, "  return %s.v[r];\n}\n", name);
      }
    }
  }
}

/* The kernel's memory: its bindings (GLSL: glsl_buffers), or with slots
 * (WGSL) the per-dispatch offsets; then tensor i's accessors b<i>_ld(e) /
 * b<i>_st(e, v) come with the slots' bindings (ssm_cg_wgsl_module). */
static const char *buffers_decl(gctx *c) {
  ssm_sb b = {0};
  if (lang(c)->slots) {
    assign_slots(c);
    for (int i = 0; i < c->nbind; i++)
      c->access[i] = (i ? SSM_CG_READ : 0) | (!i || c->bind[i]->def->op == SSM_OP_STATE ? SSM_CG_WRITE : 0) |
                     (c->bind[i]->type.dtype == SSM_I32    ? SSM_CG_I32
                      : c->bind[i]->type.dtype == SSM_F16  ? SSM_CG_F16
                      : c->bind[i]->type.dtype == SSM_BF16 ? SSM_CG_BF16 : 0);
    _Static_assert(SSM_BUNDLE_MAX_BINDINGS % 4 == 0, "offsets are vec4s");
    return ssm_arena_printf(c->a, "%s\n", SNIPPET(c, "helpers", "offsets", "N",
                                                 I64(SSM_BUNDLE_MAX_BINDINGS / 4)));
  }
  glsl_buffers(&b, c->nbind, c->bind, c->vec4, NULL, 0);
  return sb_take(&b, c->a);
}

static const char *common(gctx *c) {
  char *s;
  ssm_status st = ssm_cg_template_expand(c->a, "common", c->lang, (const char *const[]){NULL}, &s);
  int failed = st != NULL;
  SSM_ASSERT(!failed || ssm_status_code(st) == SSM_ERR_NOMEM);
  ssm_status_free(st); /* out of memory: generate_both reports it */
  return failed ? "" : s;
}

static uint32_t groups_for(int64_t items, uint32_t local) {
  int64_t g = (items + local - 1) / local;
  return (uint32_t)(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

static void grid_per_item(int64_t items, uint32_t out[3]) {
  out[0] = (uint32_t)(items < 65535 ? (items < 1 ? 1 : items) : 65535);
  out[1] = (uint32_t)((items + 65534) / 65535);
  out[2] = 1;
}

static uint32_t pow2_threads(int64_t work, uint32_t lo, uint32_t hi) {
  uint32_t l = lo;
  while (l < hi && (int64_t)l * 4 < work) l *= 2;
  return l;
}

/* The fused ops, for the kernel's parameter line: "matmul+add+softplus". */
static const char *members_list(gctx *c) {
  ssm_sb b = {0};
  for (const ssm_node *n = c->first; n; n = n == c->root ? NULL : n->next)
    if (member(c, n)) ssm_sb_printf(&b, "%s%s", b.n ? "+" : "", ssm_op_info_get(n->op)->name);
  return sb_take(&b, c->a);
}

static ssm_status finish(gctx *c, const char *family, const char *params, const char *const *kv,
                         ssm_cg_kernel *out) {
  if (c->err) return c->err;
  char *src;
  SSM_TRY(ssm_cg_template_expand(c->a, family, c->lang, kv, &src));
  out->family = family;
  out->params = ssm_arena_printf(c->a, "%s %s", members_list(c), params);
  const char *text = ssm_arena_printf(c->a, "// ssmc kernel: template %s.%s.in, %s\n%s", family,
                                      lang(c)->name, out->params, src);
  if (c->lang == SSM_LANG_WGSL) out->wgsl = text;
  else out->glsl = text;
  out->glsl_vec4 = c->vec4;
  out->run_count = c->counted;
  out->nbindings = c->nbind;
  for (int i = 0; i < c->nbind; i++) out->bind[i] = c->bind[i];
  out->nslots = c->nslots;
  for (int i = 0; i < c->nbind && lang(c)->slots; i++) {
    out->slot[i] = c->slot[i];
    out->access[i] = c->access[i];
  }
  for (int i = 0; i < c->nslots; i++) out->slot_writable[i] = c->slot_writable[i];
  return NULL;
}

/* The tokens per run of the kernel's program (its "tokens" input), 0 when
 * it has none. */
static int64_t program_tokens(const ssm_graph *g) {
  for (const ssm_node *n = g ? g->first : NULL; n; n = n->next)
    if (n->op == SSM_OP_INPUT && !strcmp(ssm_node_str(n, "name", ""), "tokens"))
      return n->result->type.dims[0];
  return 0;
}

/* Whether the kernel reads the run's count for an axis of T steps (a kernel
 * of a program of T > 1 tokens per run); marks it when so. */
static int reads_count(gctx *c, int64_t T) {
  int yes = T > 1 && T == program_tokens(c->g);
  c->counted |= yes;
  return yes;
}

/* min(n, T) for a kernel that reads the run's count n */
static const char *run_min(gctx *c, int64_t T) {
  return ssm_arena_printf(c->a, "min(%s, %lldu)", lang(c)->run_count, (long long)T);
}

/* The knobs NT and RUN of a kernel that carries something over time (or
 * only writes rows per token) along an axis of T steps, added to `kv`: a
 * kernel of a program of T > 1 tokens per run reads the run's token count
 * n (lang.def's run_count, declared by run_decl) and runs min(n, T) steps,
 * so that a run of fewer tokens than the program's leaves the state as
 * those tokens alone would; otherwise NT is T. */
static void run_count(gctx *c, int64_t T, const char **kv, size_t cap) {
  size_t n = 0;
  while (kv[n]) n += 2;
  SSM_ASSERT(n + 5 <= cap);
  int yes = reads_count(c, T);
  kv[n++] = "NT";
  kv[n++] = yes ? run_min(c, T) : ssm_arena_printf(c->a, "%lldu", (long long)T);
  kv[n++] = "RUN";
  kv[n++] = yes ? lang(c)->run_decl : "";
  kv[n] = NULL;
}


/* ---- families ----------------------------------------------------------- */

static ssm_status gen_pointwise(gctx *c, ssm_cg_kernel *out) {
  const ssm_type *t = &c->root->result->type;
  int64_t count = ssm_type_numel(t);
  coords k = coords_named("c", t->rank, c->a);
  ssm_sb co = {0}, ex = {0};
  coords d = delinearize("i", t, c->a);
  for (int i = 0; i < t->rank; i++) {
    ssm_sb_printf(&co, "    ");
    ssm_cg_spell(&co, lang(c)->let_u32, ssm_arena_printf(c->a, "c%d", i), d.c[i]);
    ssm_sb_printf(&co, "\n");
  }
  if (!t->rank) ssm_sb_printf(&co, "    // rank 0\n");
  /* the root itself, evaluated as a member (a materialized view too) */
  const ssm_node *saved = c->anchor;
  c->anchor = NULL;
  emit(c, c->root->result, &k, &ex, 0);
  c->anchor = saved;
  /* emit() bound the root's own value when it is a view's source; the
   * result must be binding 0, so it was reserved first */
  uint32_t local = KNOB_POINTWISE_THREADS;
  out->groups[0] = groups_for(count, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[] = {"LOCAL", U32(local), "N", I64(count), "STRIDE", U32(out->groups[0] * local),
                      "BUFFERS", buffers_decl(c), "COMMON", common(c), "HELPERS",
                      sb_take(&c->helpers, c->a), "COORDS", sb_take(&co, c->a), "EXPR",
                      sb_take(&ex, c->a), NULL};
  return finish(c, "pointwise", ssm_arena_printf(c->a, "N=%lld", (long long)count), kv, out);
}

/* The loads of the matmul and gemm templates: in_x(m,k), gain(k),
 * in_w(n,k), epilogue(acc,i); the rmsnorm prologue's node or NULL. */
static const ssm_node *matmul_loads(gctx *c, ssm_sb *loads) {
  const ssm_node *mm = c->anchor;
  const ssm_node *norm = c->norm && mm->args[0]->def == c->norm ? c->norm : NULL;
  load_rows(c, loads, "in_x", norm ? norm->args[0] : mm->args[0]);
  /* the gain before the weight: bindings in gemv's order (gen_gemv) */
  if (norm && norm->nargs > 1) {
    coords gk = {.rank = 1, .c = {"k"}};
    load_fn(c, loads, "gain", "k", norm->args[1], &gk);
  } else {
    const_fn(c, loads, "gain", "k", "1.0");
  }
  coords wk = {.rank = 2, .c = {"n", "k"}};
  load_fn(c, loads, "in_w", "n k", mm->args[1], &wk);
  epilogue_fn(c, loads, 0);
  return norm;
}

static const char *norm_eps(gctx *c, const ssm_node *norm) {
  return norm ? ssm_arena_printf(c->a, "%.9g", ssm_node_float(norm, "eps", 0)) : "0";
}

/* `cols` columns per workgroup (WGSL only: its gemv, below; GLSL has 1). */
static ssm_status matmul_kernel(gctx *c, int64_t cols, ssm_cg_kernel *out) {
  const ssm_node *mm = c->anchor;
  const ssm_type *w = &mm->args[1]->type;
  int64_t N = w->dims[0], K = w->dims[1];
  int64_t M = ssm_type_numel(&mm->args[0]->type) / K;
  int64_t TT = M < KNOB_MATMUL_TILE_ROWS ? M : KNOB_MATMUL_TILE_ROWS;
  ssm_sb loads = {0};
  const ssm_node *norm = matmul_loads(c, &loads);
  uint32_t local = pow2_threads(K, KNOB_ROW_THREADS_MIN, KNOB_ROW_THREADS_MAX);
  grid_per_item((N + cols - 1) / cols, out->groups);
  const char *kv[] = {"LOCAL", U32(local), "M", I64(M), "K", I64(K), "N", I64(N), "TT", I64(TT),
                      "NORM", norm ? "1" : "0", "EPS", norm_eps(c, norm),
                      "BUFFERS", buffers_decl(c), "COMMON", common(c), "LOADS",
                      loads_text(c, &loads),
                      /* the gemv of a language without subgroups (gen_gemv) */
                      lang(c)->subgroups ? NULL : "COLS", I64(cols), NULL};
  return finish(c, "matmul", ssm_arena_printf(c->a, "M=%lld K=%lld N=%lld TT=%lld LOCAL=%u", (long long)M,
                                 (long long)K, (long long)N, (long long)TT, local), kv, out);
}

static ssm_status gen_matmul(gctx *c, ssm_cg_kernel *out) { return matmul_kernel(c, 1, out); }

/* `void NAME(PARAMSuint k, out vec4 a, out vec4 b)`: scalar load `fn` at
 * k..k+7, zero past K when K is not a multiple of 8. */
static void load8(gctx *c, ssm_sb *loads, const char *name, const char *params, const char *args,
                  const char *fn, int64_t K) {
  ssm_sb half[2] = {{0}};
  for (int j = 0; j < 8; j++) {
    ssm_sb *h = &half[j / 4];
    if (j % 4) ssm_sb_printf(h, ", ");
    if (K % 8)
      ssm_sb_printf(h, "k + %du < %lldu ? %s(%sk + %du) : 0.0", j, (long long)K, fn, args, j);
    else
      ssm_sb_printf(h, "%s(%sk + %du)", fn, args, j);
  }
  ssm_sb_printf(loads, "%s\n",
                SNIPPET(c, "helpers", "load8", "NAME", name, "PARAMS", params, "A",
                        ssm_sb_str(&half[0]), "B", ssm_sb_str(&half[1])));
  ssm_sb_free(&half[0]);
  ssm_sb_free(&half[1]);
}

/* The tensor in memory that operand v reads at v's own linear index (v, or
 * the source of reshapes of it, which keep the index), or NULL where v is
 * computed in the kernel, sliced, transposed or a constant. */
static const ssm_value *direct_source(const gctx *c, const ssm_value *v) {
  for (;;) {
    const ssm_node *d = v->def;
    int view = (member(c, d) && d != c->anchor && ssm_op_is_view(d->op)) || ungrouped_view(c, d);
    if (view && d->op == SSM_OP_RESHAPE) {
      v = d->args[0];
      continue;
    }
    return view || member(c, d) || d->op == SSM_OP_CONST ? NULL : v;
  }
}

/* `void NAME(PARAMSuint k, out vec4 a, out vec4 b)` reading tensor v at
 * element INDEX.. (8 values, INDEX a multiple of 8) straight from memory, 16
 * bytes at a time through a uvec4 view of its binding (ldq<b>, declared
 * with the buffers): f32, or 16-bit widened. */
static void load8_direct(gctx *c, ssm_sb *loads, const char *name, const char *params,
                         const char *index, const ssm_value *v) {
  int b = binding_of(c, v);
  c->vec4 |= 1u << b;
  const char *snippet = v->type.dtype == SSM_F32   ? "load8_f32"
                        : v->type.dtype == SSM_F16 ? "load8_f16"
                                                   : "load8_bf16";
  ssm_sb_printf(loads, "%s\n",
                SNIPPET(c, "helpers", snippet, "NAME", name, "PARAMS", params, "INDEX", index, "B",
                        I64(b)));
}

/* Whether load_w can read weight w straight from memory (load8_weight):
 * a weight the kernel does not compute, k a multiple of 8. */
static int weight_direct(const gctx *c, const ssm_value *w, int64_t K) {
  return w->def->op == SSM_OP_WEIGHT && !member(c, w->def) && K % 8 == 0;
}

static void load8_weight(gctx *c, ssm_sb *loads, const ssm_value *w, int64_t K) {
  load8_direct(c, loads, "load_w", "uint n, ", ssm_arena_printf(c->a, "n * %lldu + k", (long long)K),
               w);
}

/* load_x, load_g and load_w of gemm_coop (8 values from k): straight from
 * memory where the operand is a tensor there (x as rows of K, the gain and
 * the weight) and K a multiple of 8, else through the scalar loads. */
static void coop_loads(gctx *c, ssm_sb *wide, const ssm_node *norm, int64_t K) {
  const ssm_node *mm = c->anchor;
  const ssm_value *x = direct_source(c, norm ? norm->args[0] : mm->args[0]);
  const ssm_value *g = norm && norm->nargs > 1 ? direct_source(c, norm->args[1]) : NULL;
  const char *kk = ssm_arena_printf(c->a, "%lldu", (long long)K);
  if (x && K % 8 == 0 && ssm_type_numel(&x->type) % K == 0)
    load8_direct(c, wide, "load_x", "uint m, ", ssm_arena_printf(c->a, "m * %s + k", kk), x);
  else
    load8(c, wide, "load_x", "uint m, ", "m, ", "in_x", K);
  if (g && K % 8 == 0 && ssm_type_numel(&g->type) == K)
    load8_direct(c, wide, "load_g", "", "k", g);
  else
    load8(c, wide, "load_g", "", "", "gain", K);
  if (weight_direct(c, mm->args[1], K))
    load8_weight(c, wide, mm->args[1], K);
  else
    load8(c, wide, "load_w", "uint n, ", "n, ", "in_w", K);
}

/* Many rows (chunked prefill): the tiled gemm template, the same loads and
 * epilogue as matmul. Blocks of BM x BN outputs (64 or 32 each), 4 x 4
 * (2 x 4 when BM is 32) a thread, k in slices of 16. An output's f32 sum is
 * in two levels (16 k in order, then those sums in order): not gemv's order
 * (whose last levels are subgroup and workgroup reductions), but accurate
 * enough that chunked prefill stays within 1e-6 of token-by-token decode
 * (test_golden's gemm_chunks).
 *
 * In GLSL, a matmul large enough for KNOB_GEMM_BIG_GROUPS blocks of 128 x
 * 128 (a prefill chunk's in_proj) takes those, 8 x 8 a thread, k in slices
 * of 32, on the same grid (the template's REMAP): the same matmul sums, bit
 * for bit (a fused rmsnorm's squares add in another order), with half the
 * shared-memory reads and loop overhead per product. WGSL keeps the grid's
 * blocks: its workgroup memory is 16 KiB.
 *
 * In GLSL, a matmul whose blocks of 32 x 32 are still fewer than
 * KNOB_GEMM_MIN_GROUPS (x_proj) is split over k inside the workgroup: G
 * groups of 64 threads, group g taking slices g, g + G, ..., so that a
 * workgroup walks k / G slices one after another rather than k. G grows as
 * the grid shrinks (KNOB_GEMM_SPLIT_K_THREADS over the grid), within the
 * knobs' bounds, while each group keeps two slices. The sums of the groups
 * are added in order of group: a fixed order, within f32 rounding of the
 * unsplit one.
 *
 * When the weight is stored 16-bit, GLSL also gets a variant on
 * cooperative matrices (gemm_coop.glsl.in: f16 tiles, f32 sums, x split in
 * three f16 parts so the result keeps f32 accuracy) with the same LOADS,
 * grid and epilogue, which the Vulkan runtime picks at load time where the
 * device has them (exec.c; SSM_VK_COOPMAT=0 keeps the portable kernel).
 * It runs 16 subgroups (512 invocations: device.c checks): 8 stage x (and
 * split it), 8 stage w, and all 16 multiply, each tile of x loaded once a
 * slice per subgroup; and it reads x, the norm's gain and w 16 bytes at a
 * time where they are tensors in memory (coop_loads). It takes tiles of
 * 128 x 128 where there are KNOB_COOP_BIG_TILES of them (about one wave of
 * a large GPU), else 128 x 64: a wide tile does twice the products of a
 * narrow one in less than twice the time, but too few of them leave
 * a GPU idle. Debian 12's glslang knows GL_NV_cooperative_matrix, not yet
 * GL_KHR_cooperative_matrix, hence the NV form. WGSL keeps the portable
 * variant. */
static ssm_status gen_gemm(gctx *c, ssm_cg_kernel *out) {
  const ssm_type *w = &c->anchor->args[1]->type;
  int64_t N = w->dims[0], K = w->dims[1];
  int64_t M = ssm_type_numel(&c->anchor->args[0]->type) / K;
  /* blocks halved (rows first) while the grid has fewer than
   * KNOB_GEMM_MIN_GROUPS workgroups: thin matmuls (x_proj, out_proj at a
   * chunk) otherwise leave most of a large GPU idle */
  const int64_t small = KNOB_GEMM_BLOCK_MIN;
  int64_t BM = M <= small ? small : KNOB_GEMM_BLOCK, BN = KNOB_GEMM_BLOCK;
  for (;;) {
    int64_t groups = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
    if (groups >= KNOB_GEMM_MIN_GROUPS || (BM == small && BN == small)) break;
    if (BM > small) BM = small;
    else BN = small;
  }
  const int64_t BK = KNOB_GEMM_BK, TN = KNOB_GEMM_TN, TM = BM / 16;
  const uint32_t local = (uint32_t)((BM / TM) * (BN / TN));
  if ((N + BN - 1) / BN > 65535 || (M + BM - 1) / BM > 65535) return gen_matmul(c, out);
  ssm_sb loads = {0};
  const ssm_node *norm = matmul_loads(c, &loads);
  /* GLSL's blocks of KNOB_GEMM_BIG_BLOCK (below) */
  const int64_t bigb = KNOB_GEMM_BIG_BLOCK;
  int big = ((M + bigb - 1) / bigb) * ((N + bigb - 1) / bigb) >= KNOB_GEMM_BIG_GROUPS;
  /* the cooperative-matrix variant: for 16-bit weights, in GLSL, except
   * thin matmuls of a long k (x_proj), whose few tiles of 128 rows would
   * leave most of a large GPU idle */
  const ssm_value *wv = c->anchor->args[1];
  int64_t wide_tiles = ((M + 127) / 128) * ((N + 127) / 128);
  int cbig = wide_tiles >= KNOB_COOP_BIG_TILES;
  int64_t CBN = cbig ? 128 : 64, tiles = cbig ? wide_tiles : ((M + 127) / 128) * ((N + 63) / 64);
  int coop = lang(c)->coop_matrix && (wv->type.dtype == SSM_BF16 || wv->type.dtype == SSM_F16) &&
             !(tiles < KNOB_COOP_THIN_TILES && K >= KNOB_COOP_THIN_K);
  /* its 8-wide loads, after the portable ones they call; x, the gain and w
   * straight from memory 16 bytes at a time where they can be (their vector
   * views are declared with the buffers) */
  ssm_sb wide = {0};
  if (coop) coop_loads(c, &wide, norm, K);
  out->groups[0] = (uint32_t)((N + BN - 1) / BN);
  out->groups[1] = (uint32_t)((M + BM - 1) / BM);
  out->groups[2] = 1;
  const char *buffers = buffers_decl(c), *com = common(c), *ld = loads_text(c, &loads);
  /* with the run's token count: the rows of its tokens, when the program's
   * tokens T cover the rows evenly (x is [T, ..., K]) */
  int64_t T = program_tokens(c->g);
  int counted = T > 1 && M % T == 0 && reads_count(c, T);
  const char *live = counted ? ssm_arena_printf(c->a, "%s * %lldu", run_min(c, T), (long long)(M / T))
                             : ssm_arena_printf(c->a, "%lldu", (long long)M);
  const char *run = counted ? lang(c)->run_decl : "";
  /* GLSL, where big blocks still make KNOB_GEMM_BIG_GROUPS: those, on the
   * same grid (REMAP); WGSL keeps the grid's blocks (its workgroup memory
   * is 16 KiB) */
  int64_t kbm = BM, kbn = BN, ktm = TM, ktn = TN, kbk = BK;
  uint32_t klocal = local;
  int remap = big && lang(c)->big_tiles;
  if (remap) {
    kbm = kbn = bigb, ktm = ktn = KNOB_GEMM_BIG_TILE, kbk = KNOB_GEMM_BIG_BK;
    klocal = (uint32_t)((kbm / ktm) * (kbn / ktn));
  }
  /* GLSL, where even the smallest blocks are fewer than KNOB_GEMM_MIN_GROUPS
   * (x_proj, out_proj of a small model) and k is long enough that each
   * k-group gets its slices: split-K, 4 x 4 a thread */
  int64_t groups = ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  int64_t splitk = 1;
  if (lang(c)->big_tiles && !remap && !norm && groups < KNOB_GEMM_MIN_GROUPS) {
    int64_t group_threads = (BM / 4) * (BN / TN), slices = KNOB_GEMM_SPLIT_K_SLICES;
    splitk = (KNOB_GEMM_SPLIT_K_THREADS / group_threads + groups - 1) / groups;
    splitk = splitk < KNOB_GEMM_SPLIT_K_MIN ? KNOB_GEMM_SPLIT_K_MIN
             : splitk > KNOB_GEMM_SPLIT_K_MAX ? KNOB_GEMM_SPLIT_K_MAX : splitk;
    if (K < slices * BK * splitk) splitk = K / (slices * BK);
    if (splitk < KNOB_GEMM_SPLIT_K_MIN) splitk = 1;
  }
  if (splitk > 1) {
    ktm = 4;
    klocal = (uint32_t)(splitk * (kbm / ktm) * (kbn / ktn));
    /* the sums of groups 1.. fit in the staged slices' memory */
    SSM_ASSERT((splitk - 1) * (klocal / splitk) * ktm * ktn / 4 <=
               splitk * kbk * (kbm / 4 + 1 + kbn / 4 + 1));
  }
  const char *kv[] = {"LOCAL", U32(klocal), "M", I64(M), "K", I64(K), "N", I64(N), "BM", I64(kbm),
                      "BN", I64(kbn), "BK", I64(kbk), "TM", I64(ktm), "TN", I64(ktn),
                      "NORM", norm ? "1" : "0", "EPS", norm_eps(c, norm), "LIVE", live, "RUN", run,
                      "BUFFERS", buffers, "COMMON", com, "LOADS", ld,
                      /* REMAP, or the padded rows of x of the template without big tiles */
                      lang(c)->big_tiles ? "REMAP" : "PX",
                      lang(c)->big_tiles ? (remap ? "1" : "0") : I64(BM + 1),
                      /* the k-groups, or the padded rows of w */
                      lang(c)->big_tiles ? "SPLITK" : "PW",
                      lang(c)->big_tiles ? I64(splitk) : I64(BN + 1), NULL};
  const char *glsl_form =
      big ? ssm_arena_printf(c->a, " (GLSL: BM=BN=%lld BK=%d TM=TN=%d LOCAL=%lld)", (long long)bigb,
                             KNOB_GEMM_BIG_BK, KNOB_GEMM_BIG_TILE,
                             (long long)((bigb / KNOB_GEMM_BIG_TILE) * (bigb / KNOB_GEMM_BIG_TILE)))
      : splitk > 1 ? ssm_arena_printf(c->a, " (GLSL: split-K in %lld groups, TM=4 LOCAL=%u)",
                                      (long long)splitk, klocal)
                   : "";
  const char *params = ssm_arena_printf(
      c->a, "M=%lld K=%lld N=%lld BM=%lld BN=%lld BK=%lld TM=%lld TN=%lld LOCAL=%u%s",
      (long long)M, (long long)K, (long long)N, (long long)BM, (long long)BN, (long long)BK,
      (long long)TM, (long long)TN, local, glsl_form);
  SSM_TRY(finish(c, "gemm", params, kv, out));
  if (!coop) {
    ssm_sb_free(&wide);
    return NULL;
  }
  /* w read into L2 a few slices ahead on wide tiles (the template's AHEAD),
   * where a workgroup waits for each slice of w it loads from memory;
   * narrow tiles are fewer than a wave and go without. x, the activations,
   * is in L2 already. */
  const int64_t SGN = CBN == 128 ? 4 : 2, split = KNOB_COOP_SPLIT;
  const int64_t ahead = CBN == 128 ? KNOB_COOP_AHEAD : 0;
  const char *kvc[] = {"M", I64(M), "K", I64(K), "N", I64(N), "BN", I64(CBN),
                       "SGN", I64(SGN), "AHEAD", I64(ahead),
                       "SPLIT", I64(split), "NORM", norm ? "1" : "0", "EPS", norm_eps(c, norm),
                       "LIVE", live, "RUN", run, "BUFFERS", buffers, "COMMON", com,
                       "LOADS", ssm_arena_printf(c->a, "%s%s", ld, ssm_sb_str(&wide)), NULL};
  ssm_sb_free(&wide);
  char *src;
  SSM_TRY(ssm_cg_template_expand(c->a, "gemm_coop", c->lang, kvc, &src));
  out->glsl_coop = ssm_arena_printf(c->a, "// ssmc kernel: template gemm_coop.glsl.in, %s "
                                    "(cooperative: BM=128 BN=%lld SPLIT=%lld AHEAD=%lld)\n%s",
                                    out->params, (long long)CBN, (long long)split,
                                    (long long)ahead, src);
  return NULL;
}

/* Few rows (decode): columns in groups of ROWS per workgroup, 8 values of k
 * per thread and step, subgroup reductions (gemv.glsl.in). WGSL has no
 * subgroups without an optional feature: its kernel is the matmul template
 * doing ROWS columns per workgroup, on the same grid. */
static ssm_status gen_gemv(gctx *c, ssm_cg_kernel *out) {
  const ssm_node *mm = c->anchor;
  const ssm_value *wv = mm->args[1];
  int64_t N = wv->type.dims[0], K = wv->type.dims[1];
  /* ROWS columns a workgroup share each read of x: more where there are
   * columns enough to fill the GPU still, and where x's row is long */
  int64_t rows = N >= KNOB_GEMV_ROWS4_N ? (K >= KNOB_GEMV_ROWS8_K ? 8 : 4)
                 : N >= KNOB_GEMV_ROWS2_N ? 2 : 1;
  /* wide matmuls of a long k (in_proj, lm_head): COLS columns per
   * workgroup, x held in registers across them; the others keep one group
   * of ROWS columns. COLS is a multiple of ROWS: the template steps through
   * COLS by ROWS. Up to KNOB_GEMV_COLS_ANY_K_N columns of a long k take
   * wide workgroups, about one wave of a large GPU; more columns (an
   * lm_head) go in small ones, whose waves leave less of a tail. */
  int64_t cols = 0;
  if (N >= KNOB_GEMV_COLS_N && (K >= KNOB_GEMV_COLS_K || N > KNOB_GEMV_COLS_ANY_K_N)) {
    int wide = N <= KNOB_GEMV_COLS_ANY_K_N && K >= KNOB_GEMV_WIDE_K;
    cols = wide ? KNOB_GEMV_WIDE_COLS : KNOB_GEMV_COLS;
    if (wide) rows = KNOB_GEMV_WIDE_ROWS;
  }
  if (!lang(c)->subgroups) return matmul_kernel(c, cols ? cols : rows, out);
  int64_t M = ssm_type_numel(&mm->args[0]->type) / K;
  const ssm_node *norm = c->norm && mm->args[0]->def == c->norm ? c->norm : NULL;
  ssm_sb loads = {0};
  load_rows(c, &loads, "in_x", norm ? norm->args[0] : mm->args[0]);
  load8(c, &loads, "load_x", "uint m, ", "m, ", "in_x", K);
  if (norm && norm->nargs > 1) {
    coords gk = {.rank = 1, .c = {"k"}};
    load_fn(c, &loads, "gain", "k", norm->args[1], &gk);
    load8(c, &loads, "load_g", "", "", "gain", K);
  }
  int direct = weight_direct(c, wv, K);
  if (direct) {
    load8_weight(c, &loads, wv, K);
  } else {
    coords wk = {.rank = 2, .c = {"n", "k"}};
    load_fn(c, &loads, "in_w", "n k", wv, &wk);
    load8(c, &loads, "load_w", "uint n, ", "n, ", "in_w", K);
  }
  if (norm && norm->nargs < 2)
    ssm_sb_printf(&loads, "%s\n", SNIPPET0(c, "helpers", "load8_ones"));
  /* one group of ROWS columns: the threads that will write them read their
   * epilogue's operands first (TOUCH), so that those loads (a decode conv's
   * state and weights, a residual) wait alongside the weights' rather than
   * after the sums. The COLS form keeps x in registers, which the touched
   * values would compete with, so it goes without. */
  int touch = epilogue_fn(c, &loads, KNOB_GEMV_TOUCH && !cols);
  /* at least K/8 threads (8 values of k each a step) */
  uint32_t local = pow2_threads((K + 7) / 8 * 4, KNOB_ROW_THREADS_MIN, KNOB_ROW_THREADS_MAX);
  grid_per_item(cols ? (N + cols - 1) / cols : (N + rows - 1) / rows, out->groups);
  const char *buffers = buffers_decl(c);
  const char *kv[] = {"LOCAL", U32(local), "M", I64(M), "K", I64(K), "N", I64(N), "ROWS",
                      I64(rows), "TOUCH", touch ? "1" : "0", "ITERS",
                      I64((K + local * 8 - 1) / (local * 8)), "NORM",
                      norm ? "1" : "0", "COLS", I64(cols), "EPS",
                      norm ? ssm_arena_printf(c->a, "%.9g", ssm_node_float(norm, "eps", 0)) : "0",
                      "BUFFERS", buffers, "COMMON", common(c), "LOADS", loads_text(c, &loads),
                      NULL};
  return finish(c, "gemv", ssm_arena_printf(c->a, "M=%lld K=%lld N=%lld ROWS=%lld COLS=%lld LOCAL=%u%s",
                                            (long long)M, (long long)K, (long long)N,
                                            (long long)rows, (long long)cols, local,
                                            direct ? " vec" : ""),
                kv, out);
}

/* The scan prologue's loop over the run's steps j: each state thread's
 * `value` into part[l], then the first thread of each row sums its row's N
 * parts in order of n into q and does `store`. */
static void pre_reduce(gctx *c, ssm_sb *pre, const char *value, int64_t N, const char *store) {
  ssm_sb_printf(pre, "%s\n",
                SNIPPET(c, "scan", "pre_reduce", "VALUE", value, "N", I64(N), "STORE", store));
}

static ssm_status gen_scan(gctx *c, ssm_cg_kernel *out) {
  const ssm_node *sc = c->anchor;
  const ssm_type *h = &sc->args[3]->type;
  int64_t T = sc->result->type.dims[0], N = h->dims[h->rank - 1];
  int64_t S = ssm_type_numel(h) / N;
  ssm_type full = *h; /* [T, S.., N] */
  full.rank = h->rank + 1;
  full.dims[0] = T;
  for (int d = 0; d < h->rank; d++) full.dims[d + 1] = h->dims[d];
  ssm_type srows = *h; /* the S dims */
  srows.rank = h->rank - 1;
  coords sk = delinearize("s", &srows, c->a);
  coords k = {.rank = full.rank};
  k.c[0] = "t";
  for (int d = 0; d < srows.rank; d++) k.c[d + 1] = sk.c[d];
  k.c[full.rank - 1] = "n";
  if (N > KNOB_SCAN_MAX_N)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "scan: a state of %lld elements per row exceeds "
                          "the %d of one workgroup", (long long)N, KNOB_SCAN_MAX_N);
  /* one thread per state element, ROWS rows per workgroup; the TC time
   * steps' products c*h that one pass keeps take KNOB_SCAN_SHARED floats */
  int64_t rows = N >= KNOB_SCAN_THREADS ? 1 : KNOB_SCAN_THREADS / N, local = rows * N;
  c->scan_cache = T > 1 ? T : 0;
  c->scan_step = k.c[0];
  /* matmul members over [T, S] (decode's dt_proj) are computed once per
   * row and step before the time loop, each row's N threads splitting k */
  if (srows.rank == 1) {
    c->pre_t = T;
    c->pre_s = S;
    c->pre_rows = rows;
  }
  ssm_sb loads = {0};
  static const char *names[3] = {"in_a", "in_b", "in_c"};
  for (int i = 0; i < 3; i++) {
    coords bk = broadcast(&k, &sc->args[i]->type);
    load_fn(c, &loads, names[i], "t s n", sc->args[i], &bk);
  }
  int state = binding_of(c, sc->args[3]);
  epilogue_fn(c, &loads, 0);
  ssm_sb pre = {0};
  if (c->npre) ssm_sb_printf(&pre, "  g_row0 = row0;\n");
  for (int i = 0; i < c->npre; i++) {
    int id = c->pre_id[i];
    const char *at = ssm_arena_printf(c->a, "j * %lldu + l / %lldu", (long long)rows, (long long)N);
    const char *dot = ssm_arena_printf(c->a, "mmp%d(j, s, n, %lldu)", id, (long long)N);
    const ssm_node *norm = c->pre_norm[i];
    if (norm) { /* the row's rsqrt first (matmul_helper) */
      const ssm_type *xt = &norm->args[0]->type;
      int64_t K = xt->dims[xt->rank - 1];
      ssm_cg_spell(&c->helpers, lang(c)->shared_f32s, ssm_arena_printf(c->a, "prr%d", id),
                   I64(c->pre_t * rows));
      ssm_sb_printf(&c->helpers, "\n");
      if (K <= SSM_SMALL_ROW) {
        int rh = rms_helper(c, norm, 0);
        ssm_sb_printf(&pre, "%s\n",
                      SNIPPET(c, "scan", "pre_rms", "ID", I64(id), "AT", at, "RH", I64(rh)));
      } else {
        const char *mean = ssm_arena_printf(c->a, "q / %s + %s", float_lit(c, (double)K),
                                            float_lit(c, ssm_node_float(norm, "eps", 0)));
        pre_reduce(c, &pre, ssm_arena_printf(c->a, "mmq%d(j, n, %lldu)", id, (long long)N), N,
                   ssm_arena_printf(c->a, "prr%d[%s] = %s", id, at,
                                    ssm_cg_spelled(c->a, lang(c)->rsqrt, mean)));
      }
      dot = ssm_arena_printf(c->a, "mmp%d(j, s, n, %lldu, prr%d[%s])", id, (long long)N, id, at);
    }
    pre_reduce(c, &pre, dot, N, ssm_arena_printf(c->a, "pre%d[%s] = q", id, at));
  }
  /* a time step keeps LOCAL products and a row rsqrt of each cached norm;
   * at the start of each pass of TC steps the cached norms' rows are
   * computed, one a thread (rms<id>, the sums the uncached form does) */
  int64_t tc = KNOB_SCAN_SHARED / (local + c->nrmc);
  if (tc > T) tc = T;
  /* every cached norm's rows in one loop, a row a thread (rather than one
   * norm after the other): a thread waits for one row's loads */
  const char *chunk = "";
  if (c->nrmc) {
    ssm_sb cases = {0};
    for (int i = 0; i < c->nrmc; i++)
      ssm_sb_printf(&cases, "%s\n",
                    SNIPPET(c, "scan", "chunk_norm", "ELSE", i ? "else " : "", "Q", I64(i), "H",
                            I64(c->rmc_id[i])));
    chunk = ssm_arena_printf(c->a, "%s\n",
                             SNIPPET(c, "scan", "chunk", "NORMS", I64(c->nrmc), "LOCAL", I64(local),
                                     "CASES", ssm_sb_str(&cases)));
    ssm_sb_free(&cases);
  }
  grid_per_item((S + rows - 1) / rows, out->groups);
  /* steps whose inputs a thread reads at once (scan.glsl.in) */
  int64_t unroll = tc < KNOB_SCAN_UNROLL ? tc : KNOB_SCAN_UNROLL;
  const char *kv[32] = {"LOCAL", I64(local), "ROWS", I64(rows), "TC", I64(tc), "UNROLL",
                        I64(unroll), "PART",
                        I64(tc * local), "S",
                        I64(S), "N", I64(N), "STATE", ssm_arena_printf(c->a, "b%d", state),
                        "BUFFERS", buffers_decl(c), "COMMON", common(c), "LOADS",
                        loads_text(c, &loads), "PRE", sb_take(&pre, c->a),
                        "CHUNK", chunk, NULL};
  run_count(c, T, kv, sizeof kv / sizeof *kv);
  return finish(c, "scan", ssm_arena_printf(c->a, "T=%lld S=%lld N=%lld ROWS=%lld TC=%lld",
                                            (long long)T, (long long)S, (long long)N,
                                            (long long)rows, (long long)tc), kv, out);
}

static ssm_status gen_conv1d(gctx *c, ssm_cg_kernel *out) {
  const ssm_node *cv = c->anchor;
  int64_t T = cv->args[0]->type.dims[0], C = cv->args[0]->type.dims[1];
  int64_t K = cv->args[2]->type.dims[1];
  ssm_sb loads = {0};
  coords xk = {.rank = 2, .c = {"t", "c"}}, wk = {.rank = 2, .c = {"c", "k"}},
         bk = {.rank = 1, .c = {"c"}};
  load_fn(c, &loads, "in_x", "t c", cv->args[0], &xk);
  load_fn(c, &loads, "in_w", "c k", cv->args[2], &wk);
  if (cv->nargs > 3) load_fn(c, &loads, "in_bias", "c", cv->args[3], &bk);
  else const_fn(c, &loads, "in_bias", "c", "0.0");
  int state = binding_of(c, cv->args[1]);
  epilogue_fn(c, &loads, 0);
  /* blocks of TB steps (at least K-1, the window's reach into the past),
   * doubled while the grid would pass 65535 workgroups */
  uint32_t local = KNOB_CONV1D_THREADS;
  int64_t TB = K - 1 > KNOB_CONV1D_STEPS ? K - 1 : KNOB_CONV1D_STEPS;
  while ((C * ((T + TB - 1) / TB) + local - 1) / local > 65535 && TB < T) TB *= 2;
  int64_t NB = (T + TB - 1) / TB;
  if ((C * NB + local - 1) / local > 65535)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "conv1d: %lld channels need more than 65535 "
                          "workgroups", (long long)C);
  out->groups[0] = groups_for(C * NB, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[32] = {"LOCAL", U32(local), "C", I64(C), "K", I64(K), "TB", I64(TB),
                        "NB", I64(NB), "STATE", ssm_arena_printf(c->a, "b%d", state), "BUFFERS",
                        buffers_decl(c), "COMMON", common(c), "LOADS", loads_text(c, &loads), NULL};
  run_count(c, T, kv, sizeof kv / sizeof *kv);
  return finish(c, "conv1d", ssm_arena_printf(c->a, "T=%lld C=%lld K=%lld TB=%lld", (long long)T,
                                              (long long)C, (long long)K, (long long)TB), kv, out);
}

static ssm_status gen_attention(gctx *c, ssm_cg_kernel *out) {
  const ssm_node *at = c->anchor;
  const ssm_type *q = &at->args[0]->type, *kc = &at->args[3]->type;
  int64_t T = q->dims[0], HQ = q->dims[1], D = q->dims[2];
  int64_t HKV = at->args[1]->type.dims[1], MAXS = kc->dims[0];
  const ssm_node *pos = at->args[5]->def;
  if (member(c, pos) || ungrouped_view(c, pos) || pos->op == SSM_OP_CONST)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "attention: pos must be a tensor in memory");
  ssm_sb loads = {0};
  coords qk = {.rank = 3, .c = {"t", "h", "d"}}, kk = {.rank = 3, .c = {"t", "g", "d"}};
  load_fn(c, &loads, "in_q", "t h d", at->args[0], &qk);
  load_fn(c, &loads, "in_k", "t g d", at->args[1], &kk);
  load_fn(c, &loads, "in_v", "t g d", at->args[2], &kk);
  int kb = binding_of(c, at->args[3]), vb = binding_of(c, at->args[4]);
  int pb = binding_of(c, at->args[5]);
  epilogue_fn(c, &loads, 0);
  uint32_t local = KNOB_ATTENTION_THREADS;
  grid_per_item(T * HQ, out->groups);
  const char *kv[40] = {"LOCAL", U32(local), "T", I64(T), "HQ", I64(HQ), "HKV", I64(HKV), "D",
                      I64(D), "MAXS", I64(MAXS), "DPT", I64((D + local - 1) / local), "SCALE",
                      float_lit(c, ssm_node_float(at, "scale", 1)), "WINDOW",
                      I64(ssm_node_int(at, "window", 0)), "KCACHE",
                      ssm_arena_printf(c->a, "b%d", kb), "VCACHE", ssm_arena_printf(c->a, "b%d", vb), "POS",
                      ssm_arena_printf(c->a, "b%d", pb), "BUFFERS", buffers_decl(c), "COMMON", common(c),
                      "LOADS", loads_text(c, &loads), NULL};
  run_count(c, T, kv, sizeof kv / sizeof *kv);
  return finish(c, "attention", ssm_arena_printf(c->a, "T=%lld HQ=%lld HKV=%lld D=%lld MAXS=%lld WINDOW=%lld",
                                    (long long)T, (long long)HQ, (long long)HKV, (long long)D,
                                    (long long)MAXS, (long long)ssm_node_int(at, "window", 0)), kv, out);
}

/* -inf, as float_lit writes it */
#define NEG_INF(c) float_lit(c, -INFINITY)

/* The op's parts of the rowreduce template: its snippets <op>.part, .init,
 * .accum, .combine and .finish (templates/rowreduce.*.in). */
static ssm_status gen_rowreduce(gctx *c, ssm_cg_kernel *out) {
  const ssm_node *n = c->anchor;
  const ssm_type *xt = &n->args[0]->type;
  int64_t C = xt->dims[xt->rank - 1], rows = ssm_type_numel(xt) / C;
  uint32_t local = pow2_threads(C, KNOB_ROW_THREADS_MIN, KNOB_ROW_THREADS_MAX);
  ssm_sb loads = {0};
  /* in_x(row, c) */
  ssm_type lead = *xt;
  lead.rank = xt->rank - 1;
  coords k = delinearize("row", &lead, c->a);
  k.rank = xt->rank;
  k.c[xt->rank - 1] = "c";
  load_fn(c, &loads, "in_x", "row c", n->args[0], &k);
  const char *part_t, *init, *accum, *combine, *finish_code;
  const char *C_ = I64(C), *L_ = U32(local), *ninf = NEG_INF(c);
  if (n->op == SSM_OP_RMSNORM) {
    coords wk = {.rank = 1, .c = {"c"}};
    if (n->nargs > 1) load_fn(c, &loads, "in_w", "c", n->args[1], &wk);
    else const_fn(c, &loads, "in_w", "c", "1.0");
    part_t = SNIPPET0(c, "rowreduce", "rmsnorm.part");
    init = SNIPPET0(c, "rowreduce", "rmsnorm.init");
    accum = SNIPPET0(c, "rowreduce", "rmsnorm.accum");
    combine = SNIPPET0(c, "rowreduce", "rmsnorm.combine");
    finish_code = SNIPPET(c, "rowreduce", "rmsnorm.finish", "C", C_, "LOCAL", L_, "EPS",
                          float_lit(c, ssm_node_float(n, "eps", 0)));
  } else if (n->op == SSM_OP_SOFTMAX) {
    part_t = SNIPPET0(c, "rowreduce", "softmax.part");
    init = SNIPPET(c, "rowreduce", "softmax.init", "NINF", ninf);
    accum = SNIPPET(c, "rowreduce", "softmax.accum", "NINF", ninf);
    combine = SNIPPET0(c, "rowreduce", "softmax.combine");
    finish_code = SNIPPET(c, "rowreduce", "softmax.finish", "C", C_, "LOCAL", L_);
  } else {
    part_t = SNIPPET0(c, "rowreduce", "argmax.part");
    init = SNIPPET(c, "rowreduce", "argmax.init", "NINF", ninf, "C", C_);
    accum = SNIPPET(c, "rowreduce", "argmax.accum", "C", C_);
    combine = SNIPPET(c, "rowreduce", "argmax.combine", "C", C_);
    finish_code = SNIPPET(c, "rowreduce", "argmax.finish", "CLAST", I64(C - 1));
  }
  if (n->op != SSM_OP_ARGMAX) epilogue_fn(c, &loads, 0);
  grid_per_item(rows, out->groups);
  const char *kv[] = {"LOCAL", L_, "ROWS", I64(rows), "C", C_, "BUFFERS", buffers_decl(c),
                      "COMMON", common(c), "LOADS",
                      loads_text(c, &loads), "PART_T",
                      part_t, "INIT", init, "ACCUM", accum, "COMBINE", combine, "FINISH",
                      finish_code, NULL};
  return finish(c, "rowreduce", ssm_arena_printf(c->a, "ROWS=%lld C=%lld", (long long)rows, (long long)C),
                kv, out);
}

static ssm_status gen_embed(gctx *c, ssm_cg_kernel *out) {
  const ssm_node *e = c->anchor;
  int64_t V = e->args[0]->type.dims[0], H = e->args[0]->type.dims[1];
  int64_t T = e->args[1]->type.dims[0];
  ssm_sb loads = {0};
  coords tk = {.rank = 2, .c = {"id", "h"}};
  load_fn(c, &loads, "in_table", "id h", e->args[0], &tk);
  const ssm_node *ids = e->args[1]->def;
  if (member(c, ids) || ungrouped_view(c, ids))
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "embed: token ids must be a tensor in memory");
  int ib = binding_of(c, e->args[1]);
  epilogue_fn(c, &loads, 0);
  uint32_t local = KNOB_EMBED_THREADS;
  out->groups[0] = groups_for(T * H, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[32] = {"LOCAL", U32(local), "H", I64(H), "V", I64(V), "STRIDE",
                      U32(out->groups[0] * local), "BUFFERS", buffers_decl(c), "COMMON",
                      common(c), "LOADS",
                      loads_text(c, &loads), "IDS",
                      ssm_arena_printf(c->a, "b%d", ib), NULL};
  run_count(c, T, kv, sizeof kv / sizeof *kv);
  return finish(c, "embed", ssm_arena_printf(c->a, "T=%lld H=%lld V=%lld", (long long)T, (long long)H,
                                (long long)V), kv, out);
}

static ssm_status gen_reduce(gctx *c, ssm_cg_kernel *out) {
  const ssm_node *n = c->anchor;
  const ssm_type *xt = &n->args[0]->type;
  int64_t axis = ssm_node_int(n, "axis", 0), outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= xt->dims[d];
  for (int d = (int)axis + 1; d < xt->rank; d++) inner *= xt->dims[d];
  ssm_type to = *xt, ti = *xt;
  to.rank = (int)axis;
  ti.rank = xt->rank - (int)axis - 1;
  for (int d = 0; d < ti.rank; d++) ti.dims[d] = xt->dims[axis + 1 + d];
  coords ko = delinearize("o", &to, c->a), ki = delinearize("in_", &ti, c->a), k = {.rank = xt->rank};
  for (int d = 0; d < axis; d++) k.c[d] = ko.c[d];
  k.c[axis] = "a";
  for (int d = 0; d < ti.rank; d++) k.c[axis + 1 + d] = ki.c[d];
  ssm_sb loads = {0};
  load_fn(c, &loads, "in_x", "o a in_", n->args[0], &k);
  epilogue_fn(c, &loads, 0);
  const char *kind = ssm_node_str(n, "kind", "sum");
  const char *init = "0.0", *accum = "acc += x", *final = "acc";
  if (!strcmp(kind, "max")) {
    init = NEG_INF(c);
    accum = "acc = max(acc, x)";
  } else if (!strcmp(kind, "mean")) {
    final = ssm_arena_printf(c->a, "acc / %s(%lld)", lang(c)->f32, (long long)xt->dims[axis]);
  }
  uint32_t local = KNOB_REDUCE_THREADS;
  out->groups[0] = groups_for(outer * inner, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[] = {"LOCAL", U32(local), "OUTER", I64(outer), "AXIS", I64(xt->dims[axis]),
                      "INNER", I64(inner), "STRIDE", U32(out->groups[0] * local), "BUFFERS",
                      buffers_decl(c), "COMMON", common(c), "LOADS",
                      loads_text(c, &loads), "INIT",
                      init, "ACCUM", accum, "FINAL", final, NULL};
  return finish(c, "reduce", ssm_arena_printf(c->a, "kind=%s OUTER=%lld AXIS=%lld INNER=%lld", kind,
                                 (long long)outer, (long long)xt->dims[axis], (long long)inner),
                kv, out);
}

static ssm_status gen_sample(gctx *c, ssm_cg_kernel *out) {
  const ssm_node *n = c->anchor;
  const ssm_type *xt = &n->args[0]->type;
  int64_t V = xt->dims[xt->rank - 1], rows = ssm_type_numel(xt) / V;
  const ssm_node *st = n->args[1]->def;
  if (st->op != SSM_OP_STATE)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "sample: its sampler must be a state tensor");
  /* as many threads as the language allows (the grid is one workgroup) */
  uint32_t local = pow2_threads(V, KNOB_SAMPLE_THREADS_MIN, (uint32_t)lang(c)->max_threads);
  ssm_sb loads = {0};
  ssm_type lead = *xt; /* in_x(c): element c of the last row */
  lead.rank = xt->rank - 1;
  coords k = delinearize(ssm_arena_printf(c->a, "%lldu", (long long)(rows - 1)), &lead, c->a);
  k.rank = xt->rank;
  k.c[xt->rank - 1] = "c";
  load_fn(c, &loads, "in_x", "c", n->args[0], &k);
  int sb = binding_of(c, n->args[1]);
  out->groups[0] = out->groups[1] = out->groups[2] = 1;
  const char *kv[] = {"LOCAL", U32(local), "V", I64(V), "CHUNK", I64((V + local - 1) / local),
                      "BUFFERS", buffers_decl(c), "COMMON", common(c), "LOADS",
                      loads_text(c, &loads), "STATE",
                      ssm_arena_printf(c->a, "b%d", sb), NULL};
  return finish(c, "sample", ssm_arena_printf(c->a, "V=%lld LOCAL=%u", (long long)V, local), kv, out);
}

/* ---- items: rope, positions, gather, topk, matmul_sel ------------------- */

/* `int NAME(uint m, uint j)`: element (m, j) of i32 operand v [.., k], m
 * over the leading dims; read through views like any operand. */
static void load_index(gctx *c, ssm_sb *loads, const char *name, const ssm_value *v) {
  coords k = row_coords(c, &v->type, "j");
  ssm_sb e = {0};
  emit(c, v, &k, &e, 0);
  fn_head_typed(c, loads, lang(c)->i32, name, "m j");
  ssm_sb_printf(loads, "{ return %s(%s); }\n", lang(c)->i32, ssm_sb_str(&e));
  ssm_sb_free(&e);
}

/* The binding holding i32[1] `pos` operand i of the anchor (an input). */
static ssm_status pos_binding(gctx *c, int i, const char **out) {
  const ssm_node *pos = c->anchor->args[i]->def;
  if (member(c, pos) || ungrouped_view(c, pos) || pos->op == SSM_OP_CONST)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: pos must be a tensor in memory",
                          ssm_op_info_get(c->anchor->op)->name);
  *out = ssm_cg_spelled(c->a, lang(c)->load, I64(binding_of(c, c->anchor->args[i])), "0u");
  return NULL;
}

/* One "items" kernel of `count` items running `body`; consumes `loads`. */
static ssm_status items_kernel(gctx *c, ssm_sb *loads, int64_t count, const char *body,
                               const char *params, ssm_cg_kernel *out) {
  uint32_t local = KNOB_ITEMS_THREADS;
  out->groups[0] = groups_for(count, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[] = {"LOCAL", U32(local), "N", I64(count), "STRIDE", U32(out->groups[0] * local),
                      "BUFFERS", buffers_decl(c), "COMMON", common(c), "LOADS",
                      loads_text(c, loads), "BODY", body, NULL};
  return finish(c, "items", params, kv, out);
}

/* rope: the angle p * INV[j] in f32 with INV computed here exactly as the
 * interpreter computes it (1 / powf(theta, 2j/dims)), then cos and sin. */
static ssm_status gen_rope(gctx *c, ssm_cg_kernel *out) {
  const ssm_node *n = c->anchor;
  const ssm_type *x = &n->args[0]->type;
  int64_t T = x->dims[0], H = x->dims[1], D = x->dims[2];
  int64_t dims = ssm_node_int(n, "dims", 0), half = dims / 2;
  int il = (int)ssm_node_int(n, "interleaved", 0);
  float theta = (float)ssm_node_float(n, "theta", 10000);
  const char *pos;
  SSM_TRY(pos_binding(c, 1, &pos));
  ssm_sb loads = {0};
  coords xk = {.rank = 3, .c = {"t", "h", "d"}};
  load_fn(c, &loads, "in_x", "t h d", n->args[0], &xk);
  ssm_sb inv = {0};
  for (int64_t j = 0; j < half; j++)
    ssm_sb_printf(&inv, "%s%.9g", j ? ", " : "", 1.0f / powf(theta, (float)(2 * j) / (float)dims));
  ssm_sb_printf(&loads, "%s\n",
                SNIPPET(c, "items", "rope.inv", "N", I64(half), "VALUES", ssm_sb_str(&inv)));
  ssm_sb_free(&inv);
  epilogue_fn(c, &loads, 0);
  const char *cond = il ? "d % 2u == 0u" : ssm_arena_printf(c->a, "d < %lldu", (long long)half);
  const char *jx = il ? "d / 2u" : ssm_arena_printf(c->a, "d %% %lldu", (long long)half);
  int64_t step = il ? 1 : half;
  const char *body = SNIPPET(c, "items", "rope", "HD", I64(H * D), "D", I64(D), "H", I64(H), "DIMS",
                             I64(dims), "LO", cond, "J", jx, "STEP", I64(step), "POS", pos);
  return items_kernel(c, &loads, T * H * D, body,
                      ssm_arena_printf(c->a, "T=%lld H=%lld D=%lld dims=%lld interleaved=%d", (long long)T,
                                       (long long)H, (long long)D, (long long)dims, il), out);
}

static ssm_status gen_positions(gctx *c, ssm_cg_kernel *out) {
  int64_t T = c->anchor->result->type.dims[0];
  const char *pos;
  SSM_TRY(pos_binding(c, 1, &pos));
  ssm_sb loads = {0};
  epilogue_fn(c, &loads, 0);
  const char *body = SNIPPET(c, "items", "positions", "POS", pos);
  return items_kernel(c, &loads, T, body, ssm_arena_printf(c->a, "T=%lld", (long long)T), out);
}

/* gather: an index out of range reads the nearest end (the interpreter
 * refuses it), as embed's ids do. */
static ssm_status gen_gather(gctx *c, ssm_cg_kernel *out) {
  const ssm_node *n = c->anchor;
  int64_t W = n->args[0]->type.dims[n->args[0]->type.rank - 1], K = n->args[1]->type.dims[n->args[1]->type.rank - 1];
  int64_t count = ssm_type_numel(&n->result->type);
  ssm_sb loads = {0};
  load_rows(c, &loads, "in_x", n->args[0]);
  load_index(c, &loads, "in_idx", n->args[1]);
  epilogue_fn(c, &loads, 0);
  const char *body = SNIPPET(c, "items", "gather", "K", I64(K), "WLAST", I64(W - 1));
  return items_kernel(c, &loads, count, body,
                      ssm_arena_printf(c->a, "N=%lld K=%lld", (long long)W, (long long)K), out);
}

/* topk: one row an item; pick j is the first in the order (NaN first, then
 * larger values, then lower indices) among the elements after pick j-1. */
static ssm_status gen_topk(gctx *c, ssm_cg_kernel *out) {
  const ssm_node *n = c->anchor;
  const ssm_type *xt = &n->args[0]->type;
  int64_t W = xt->dims[xt->rank - 1], rows = ssm_type_numel(xt) / W;
  int64_t K = ssm_node_int(n, "k", 1);
  ssm_sb loads = {0};
  load_rows(c, &loads, "in_x", n->args[0]);
  ssm_sb_printf(&loads, "%s\n", SNIPPET0(c, "items", "topk.before"));
  const char *body = SNIPPET(c, "items", "topk", "K", I64(K), "W", I64(W));
  return items_kernel(c, &loads, rows, body,
                      ssm_arena_printf(c->a, "ROWS=%lld N=%lld k=%lld", (long long)rows, (long long)W,
                                       (long long)K), out);
}

/* matmul_sel: one output element an item, a serial dot product over K of
 * the token's row (or its pick's row) and row o of expert idx[t,j]'s weight.
 * Only the picked experts are read, for prefill and decode alike. */
static ssm_status gen_matmul_sel(gctx *c, ssm_cg_kernel *out) {
  const ssm_node *n = c->anchor;
  const ssm_type *w = &n->args[1]->type;
  int64_t E = w->dims[0], N = w->dims[1], K = w->dims[2];
  int64_t T = n->args[2]->type.dims[0], P = n->args[2]->type.dims[1];
  ssm_sb loads = {0};
  coords xk = n->args[0]->type.rank == 3 ? (coords){.rank = 3, .c = {"t", "j", "k"}}
                                         : (coords){.rank = 2, .c = {"t", "k"}};
  load_fn(c, &loads, "in_x", "t j k", n->args[0], &xk);
  coords wk = {.rank = 3, .c = {"e", "o", "k"}};
  load_fn(c, &loads, "in_w", "e o k", n->args[1], &wk);
  load_index(c, &loads, "in_idx", n->args[2]);
  epilogue_fn(c, &loads, 0);
  const char *body = SNIPPET(c, "items", "matmul_sel", "PN", I64(P * N), "N", I64(N), "P", I64(P),
                             "ELAST", I64(E - 1), "K", I64(K));
  return items_kernel(c, &loads, T * P * N, body,
                      ssm_arena_printf(c->a, "T=%lld k=%lld E=%lld N=%lld K=%lld", (long long)T, (long long)P,
                                       (long long)E, (long long)N, (long long)K), out);
}

/* ---- entry points ------------------------------------------------------ */

static ssm_status generate(gctx *c, ssm_cg_kernel *out) {
  *out = (ssm_cg_kernel){0};
  for (const ssm_node *n = c->first; n; n = n == c->root ? NULL : n->next)
    if (member(c, n))
      for (int i = 0; i < n->nargs; i++)
        if (n->args[i]->type.dtype != SSM_F32 && n->args[i]->type.dtype != SSM_I32 &&
            n->op != SSM_OP_MATMUL && n->op != SSM_OP_MATMUL_SEL && n->op != SSM_OP_EMBED)
          return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: %s operands have no GPU kernel yet",
                                ssm_op_info_get(n->op)->name,
                                ssm_dtype_name(n->args[i]->type.dtype));
  binding_of(c, c->root->result); /* binding 0: the result */
  ssm_status s;
  if (!c->anchor) s = gen_pointwise(c, out);
  else switch (c->anchor->op) {
    case SSM_OP_MATMUL: {
      int64_t rows = ssm_type_numel(&c->anchor->args[0]->type) / c->anchor->args[1]->type.dims[1];
      s = rows <= KNOB_GEMV_MAX_ROWS     ? gen_gemv(c, out)
          : rows <= KNOB_MATMUL_MAX_ROWS ? gen_matmul(c, out)
                                         : gen_gemm(c, out);
      break;
    }
    case SSM_OP_SCAN: s = gen_scan(c, out); break;
    case SSM_OP_CONV1D: s = gen_conv1d(c, out); break;
    case SSM_OP_ATTENTION: s = gen_attention(c, out); break;
    case SSM_OP_RMSNORM:
    case SSM_OP_SOFTMAX:
    case SSM_OP_ARGMAX: s = gen_rowreduce(c, out); break;
    case SSM_OP_EMBED: s = gen_embed(c, out); break;
    case SSM_OP_REDUCE: s = gen_reduce(c, out); break;
    case SSM_OP_SAMPLE: s = gen_sample(c, out); break;
    case SSM_OP_ROPE: s = gen_rope(c, out); break;
    case SSM_OP_POSITIONS: s = gen_positions(c, out); break;
    case SSM_OP_GATHER: s = gen_gather(c, out); break;
    case SSM_OP_TOPK: s = gen_topk(c, out); break;
    case SSM_OP_MATMUL_SEL: s = gen_matmul_sel(c, out); break;
    default:
      s = ssm_status_new(SSM_ERR_INTERNAL, "no kernel family for %s",
                         ssm_op_info_get(c->anchor->op)->name);
    }
  ssm_sb_free(&c->helpers);
  return s;
}

/* The kernel in both languages: the generator runs once for GLSL and once
 * for WGSL over the same group, which must give the same bindings and grid. */
static ssm_status generate_both(const gctx *proto, ssm_cg_kernel *out) {
  /* the text is built by many builders that feed each other: one check of
   * every allocation they made, before anything reads what they built */
  unsigned long mark = ssm_nomem_mark();
  gctx c = *proto;
  c.lang = SSM_LANG_GLSL;
  SSM_TRY(ssm_nomem_check(mark, generate(&c, out), "GLSL kernel text"));
  ssm_cg_kernel w;
  c = *proto;
  c.lang = SSM_LANG_WGSL;
  SSM_TRY(ssm_nomem_check(mark, generate(&c, &w), "WGSL kernel text"));
  SSM_ASSERT(w.nbindings == out->nbindings && !memcmp(w.bind, out->bind, sizeof w.bind) &&
             !memcmp(w.groups, out->groups, sizeof w.groups) && w.run_count == out->run_count);
  out->wgsl = w.wgsl;
  out->nslots = w.nslots;
  memcpy(out->slot, w.slot, sizeof out->slot);
  memcpy(out->slot_writable, w.slot_writable, sizeof out->slot_writable);
  memcpy(out->access, w.access, sizeof out->access);
  return NULL;
}

ssm_status ssm_cg_kernel_for_group(ssm_graph *g, const ssm_group *gr, ssm_arena *a,
                                   ssm_cg_kernel *out) {
  gctx c = {.g = g, .id = gr->id, .first = gr->first, .root = gr->root, .anchor = gr->anchor,
            .norm = gr->norm, .a = a};
  return generate_both(&c, out);
}

ssm_status ssm_cg_kernel_for_node(ssm_graph *g, const ssm_node *n, ssm_arena *a,
                                  ssm_cg_kernel *out) {
  gctx c = {.g = g, .id = -1, .single = n, .first = n, .root = n, .a = a};
  c.anchor = ssm_node_is_pointwise(n) || ssm_op_is_view(n->op) ? NULL : n;
  return generate_both(&c, out);
}

/* ---- WGSL memory slots ---------------------------------------------------- */

ssm_status ssm_cg_wgsl_module(const ssm_cg_kernel *k, const int *windows, uint64_t window,
                              ssm_arena *a, const char **out) {
  *out = NULL;
  unsigned long mark = ssm_nomem_mark();
  ssm_sb b = {0};
  ssm_sb_printf(&b, "%s// memory: binding 0 holds the offsets; the slots' windows of SSM_WIN "
                "words follow\nconst SSM_WIN: u32 = %lluu;\n", k->wgsl,
                (unsigned long long)(window / 4));
  int binding = 1;
  for (int s = 0; s < k->nslots; s++) {
    int n = windows[s], rw = k->slot_writable[s];
    if (n < 1 || n > SSM_BUNDLE_WGSL_MAX_WINDOWS) {
      ssm_sb_free(&b);
      return ssm_status_new(SSM_ERR_UNSUPPORTED, "a WGSL memory slot would need %d windows of "
                            "%llu bytes (at most %d)", n, (unsigned long long)window,
                            SSM_BUNDLE_WGSL_MAX_WINDOWS);
    }
    for (int w = 0; w < n; w++)
      ssm_sb_printf(&b, "@group(0) @binding(%d) var<storage, %s> s%dw%d: array<u32>;\n",
                    binding++, rw ? "read_write" : "read", s, w);
    if (n == 1) continue;
    /* several windows: the window by index */
    for (int st = 0; st <= rw; st++) {
      ssm_sb_printf(&b, st ? "fn s%d_st(g: u32, v: u32) {\n" : "fn s%d_ld(g: u32) -> u32 {\n", s);
      ssm_sb_printf(&b, "  let w = g / SSM_WIN;\n  let r = g - w * SSM_WIN;\n");
      for (int w = 0; w < n; w++) {
        ssm_sb_printf(&b, w + 1 < n ? "  if (w == %du) { " : "  { ", w);
        ssm_sb_printf(&b, st ? "s%dw%d[r] = v;%s }\n" : "return s%dw%d[r];%s }\n", s, w,
                      st && w + 1 < n ? " return;" : "");
      }
      ssm_sb_printf(&b, "}\n");
    }
  }
  for (int i = 0; i < k->nbindings; i++) {
    int s = k->slot[i];
    unsigned half = k->access[i] & (SSM_CG_F16 | SSM_CG_BF16);
    const char *t = k->access[i] & SSM_CG_I32 ? "i32" : "f32";
    /* the word holding element e: s<s>w0[at] with one window, else through
     * s<s>_ld; a 16-bit element is half of word e / 2 */
    const char *at = ssm_arena_printf(a, "ssm_u.o[%d][%d] + %s", i / 4, i % 4, half ? "(e >> 1u)" : "e");
    const char *word = windows[s] == 1 ? ssm_arena_printf(a, "s%dw0[%s]", s, at)
                                       : ssm_arena_printf(a, "s%d_ld(%s)", s, at);
    if (half && (k->access[i] & SSM_CG_WRITE)) {
      ssm_sb_free(&b);
      return ssm_status_new(SSM_ERR_UNSUPPORTED, "a WGSL kernel writes a 16-bit tensor");
    }
    if (k->access[i] & SSM_CG_READ) {
      if (half == SSM_CG_BF16)
        ssm_sb_printf(&b, "fn b%d_ld(e: u32) -> f32 { return bitcast<f32>(((%s >> ((e & 1u) << 4u)) "
                      "& 0xffffu) << 16u); }\n", i, word);
      else if (half == SSM_CG_F16)
        ssm_sb_printf(&b, "fn b%d_ld(e: u32) -> f32 { return unpack2x16float(%s >> ((e & 1u) << 4u)).x; }\n",
                      i, word);
      else
        ssm_sb_printf(&b, "fn b%d_ld(e: u32) -> %s { return bitcast<%s>(%s); }\n", i, t, t, word);
    }
    if (!(k->access[i] & SSM_CG_WRITE)) continue;
    if (windows[s] == 1)
      ssm_sb_printf(&b, "fn b%d_st(e: u32, v: %s) { %s = bitcast<u32>(v); }\n", i, t, word);
    else
      ssm_sb_printf(&b, "fn b%d_st(e: u32, v: %s) { s%d_st(%s, bitcast<u32>(v)); }\n", i, t, s, at);
  }
  *out = sb_take(&b, a);
  return ssm_nomem_since(mark, "a WGSL module");
}

/* ---- GLSL storage windows ------------------------------------------------- */

ssm_status ssm_cg_glsl_split(const ssm_cg_kernel *k, const int *windows, uint64_t window,
                             ssm_arena *a, const char **out) {
  *out = k->glsl;
  int extra = 0;
  for (int i = 0; i < k->nbindings; i++) {
    if (windows[i] < 1 || windows[i] > SSM_BUNDLE_GLSL_MAX_WINDOWS)
      return ssm_status_new(SSM_ERR_UNSUPPORTED, "a GLSL tensor would need %d windows of %llu "
                            "bytes (at most %d)", windows[i], (unsigned long long)window,
                            SSM_BUNDLE_GLSL_MAX_WINDOWS);
    if (windows[i] > 1 && (i == 0 || k->bind[i]->def->op == SSM_OP_STATE))
      return ssm_status_new(SSM_ERR_UNSUPPORTED, "a GLSL kernel writes a tensor split into "
                            "windows");
    extra += windows[i] - 1;
  }
  if (!extra) return NULL;
  if (k->nbindings + extra > SSM_BUNDLE_GLSL_MAX_BINDINGS)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "a GLSL kernel would bind %d storage windows of "
                          "%llu bytes (at most %d): use larger windows", k->nbindings + extra,
                          (unsigned long long)window, SSM_BUNDLE_GLSL_MAX_BINDINGS);
  unsigned long mark = ssm_nomem_mark();
  ssm_sb old = {0}, split = {0}, b = {0};
  glsl_buffers(&old, k->nbindings, k->bind, k->glsl_vec4, NULL, 0);
  glsl_buffers(&split, k->nbindings, k->bind, k->glsl_vec4, windows, window);
  ssm_status s = ssm_nomem_since(mark, "a GLSL kernel's storage windows");
  if (s) {
    ssm_sb_free(&old);
    ssm_sb_free(&split);
    return s;
  }
  const char *at = strstr(k->glsl, ssm_sb_str(&old));
  SSM_ASSERT(at && !strstr(at + 1, ssm_sb_str(&old)));
  ssm_sb_append(&b, k->glsl, (size_t)(at - k->glsl));
  ssm_sb_printf(&b, "%s%s", ssm_sb_str(&split), at + old.n);
  ssm_sb_free(&old);
  ssm_sb_free(&split);
  *out = sb_take(&b, a);
  return ssm_nomem_since(mark, "a GLSL kernel's storage windows");
}
