/*
 * emit.c — expressions of the IR in a kernel's language: a value at
 * coordinates, through the views between it and memory (index
 * arithmetic), the elementwise ops of the group (their rows of
 * ir/elementwise.def), and the members that need helper functions: a
 * small-row rmsnorm (rms<id>, cached per pass in a prefill scan: rmc<id>),
 * a matmul computed before a scan's time loop (mm<id>) and a decode conv
 * in an epilogue (cv<id>); then the load functions and the epilogue that a
 * family's template calls, built from those expressions.
 */
#include <string.h>

#include "codegen/internal.h"

/* ---- the group's members and bindings ------------------------------------ */

int ssm_cg_member(const cg_ctx *c, const ssm_node *n) {
  return c->single ? n == c->single : ssm_node_group(n) == c->id;
}

int ssm_cg_ungrouped_view(const cg_ctx *c, const ssm_node *n) {
  return ssm_op_is_view(n->op) && !ssm_cg_member(c, n) && ssm_node_group(n) < 0;
}

int ssm_cg_binding(cg_ctx *c, const ssm_value *v) {
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

/* ---- coordinates -------------------------------------------------------- */

cg_coords ssm_cg_coords_named(const char *prefix, int rank, ssm_arena *a) {
  cg_coords k = {.rank = rank};
  for (int d = 0; d < rank; d++) k.c[d] = ssm_arena_printf(a, "%s%d", prefix, d);
  return k;
}

/* Linear index of coordinates in a contiguous tensor of type t. */
static void linearize(ssm_sb *b, const cg_coords *k, const ssm_type *t) {
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
cg_coords ssm_cg_delinearize(const char *lin, const ssm_type *t, ssm_arena *a) {
  cg_coords k = {.rank = t->rank};
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
cg_coords ssm_cg_broadcast(const cg_coords *k, const ssm_type *op) {
  cg_coords r = {.rank = op->rank};
  int lead = k->rank - op->rank;
  for (int d = 0; d < op->rank; d++) r.c[d] = op->dims[d] == 1 ? "0u" : k->c[d + lead];
  return r;
}

/* ---- expressions ---------------------------------------------------------- */

/* A generated function returning rsqrt(mean(x^2) + eps) over the last axis
 * of small-row rmsnorm `n`'s input at leading coordinates c0... */
int ssm_cg_rms_helper(cg_ctx *c, const ssm_node *n, int depth) {
  const ssm_type *t = &n->args[0]->type;
  int r = t->rank;
  int64_t C = t->dims[r - 1];
  cg_coords k = ssm_cg_coords_named("c", r, c->a);
  k.c[r - 1] = "j";
  ssm_sb body = {0}, params = {0};
  ssm_cg_emit(c, n->args[0], &k, &body, depth + 1);
  int id = c->nhelpers++;
  for (int d = 0; d < r - 1; d++) ssm_sb_printf(&params, "%sc%d", d ? " " : "", d);
  ssm_cg_fn_head(c, &c->helpers, ssm_arena_printf(c->a, "rms%d", id), ssm_sb_str(&params));
  ssm_sb_printf(&c->helpers, "%s\n",
                SNIPPET(c, "helpers", "rms", "C", I64(C), "X", ssm_sb_str(&body), "EPS",
                        ssm_cg_float_lit(c, ssm_node_float(n, "eps", 0))));
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
 * row's rsqrt(mean square + eps) as a fifth argument (named acc: ssm_cg_fn_head's
 * float), which the prologue computes first, once per row, and sums
 * (in * rsqrt * gain) * w, the arithmetic of the norm evaluated where it
 * is read: the same order as prefill's kernels. Where the weight is 16-bit
 * the dot product takes x rounded (ssm_x16): with a norm, in * gain, times
 * the rsqrt after (ops.def). The mean square of a small
 * row (a pointwise norm) is rms<id>'s sequential sum, as there; of a large
 * row, the row's threads sum mmq<id>(c0, k0, ks), the squares of in over
 * their k. Returns the id. */
static int matmul_helper(cg_ctx *c, const ssm_node *n, int depth) {
  for (int i = 0; i < c->nmm; i++)
    if (c->mm_node[i] == n) return c->mm_id[i];
  const ssm_type *t = &n->args[0]->type, *rt = &n->result->type;
  int r = t->rank;
  int64_t K = t->dims[r - 1];
  const ssm_node *norm = n->args[0]->def;
  if (norm->op != SSM_OP_RMSNORM || !ssm_cg_member(c, norm)) norm = NULL;
  cg_coords kx = ssm_cg_coords_named("c", r, c->a);
  kx.c[r - 1] = "j";
  cg_coords kw = {.rank = 2, .c = {"n", "j"}}, kg = {.rank = 1, .c = {"j"}};
  ssm_sb x = {0}, w = {0}, params = {0}, in = {0};
  int x16 = ssm_dtype_rounds_x(n->args[1]->type.dtype); /* x as the products take it (ops.def) */
  if (norm) { /* (in * rsqrt * gain), rsqrt the argument acc; rounded, (x16(in * gain) * acc) */
    ssm_cg_emit(c, norm->args[0], &kx, &in, depth + 1);
    ssm_sb_printf(&x, x16 ? "(ssm_x16(%s" : "(%s * acc", ssm_sb_str(&in));
    if (norm->nargs > 1) {
      ssm_sb_printf(&x, " * ");
      ssm_cg_emit(c, norm->args[1], &kg, &x, depth + 1);
    }
    ssm_sb_printf(&x, x16 ? ") * acc)" : ")");
  } else {
    ssm_cg_emit(c, n->args[0], &kx, &x, depth + 1);
    if (x16) {
      ssm_sb rounded = {0};
      ssm_sb_printf(&rounded, "ssm_x16(%s)", ssm_sb_str(&x));
      ssm_sb_free(&x);
      x = rounded;
    }
  }
  ssm_cg_emit(c, n->args[1], &kw, &w, depth + 1);
  int id = c->nhelpers++;
  if (c->nmm < 8) {
    c->mm_node[c->nmm] = n;
    c->mm_id[c->nmm++] = id;
  }
  for (int d = 0; d < r - 1; d++) ssm_sb_printf(&params, "c%d ", d);
  if (norm && K > SSM_SMALL_ROW) { /* the squares of the norm's input over the same k */
    ssm_cg_fn_head(c, &c->helpers, ssm_arena_printf(c->a, "mmq%d", id),
                   ssm_arena_printf(c->a, "%sk0 ks", ssm_sb_str(&params)));
    ssm_sb_printf(&c->helpers, "%s\n",
                  SNIPPET(c, "helpers", "mm_squares", "K", I64(K), "X", ssm_sb_str(&in)));
  }
  ssm_sb_printf(&params, "n");
  ssm_cg_fn_head(c, &c->helpers, ssm_arena_printf(c->a, "mmp%d", id),
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
    ssm_cg_fn_head(c, &c->helpers, ssm_arena_printf(c->a, "mm%d", id), "c0 n");
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
static int conv_helper(cg_ctx *c, const ssm_node *n, int depth) {
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
  cg_coords wk = {.rank = 2, .c = {"cc", "kk"}}, wl = {.rank = 2, .c = {"cc", klast}},
         sk = {.rank = 2, .c = {"kk", "cc"}}, bk = {.rank = 1, .c = {"cc"}};
  ssm_sb w = {0}, wlast = {0}, st = {0}, bias = {0};
  ssm_cg_emit(c, n->args[2], &wk, &w, depth + 1);
  ssm_cg_emit(c, n->args[2], &wl, &wlast, depth + 1);
  ssm_cg_emit(c, n->args[1], &sk, &st, depth + 1);
  if (n->nargs > 3) ssm_cg_emit(c, n->args[3], &bk, &bias, depth + 1);
  else ssm_sb_printf(&bias, "0.0");
  int sb = ssm_cg_binding(c, n->args[1]);
  int id = c->nhelpers++;
  ssm_cg_fn_head(c, &c->helpers, ssm_arena_printf(c->a, "%s%d", c->touching ? "cvt" : "cv", id),
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
static void emit_concat(cg_ctx *c, const ssm_node *d, const cg_coords *k, ssm_sb *out, int depth,
                        int i, int64_t off) {
  int64_t axis = ssm_node_int(d, "axis", 0), len = d->args[i]->type.dims[axis];
  cg_coords s = *k;
  if (off) s.c[axis] = ssm_arena_printf(c->a, "(%s - %lldu)", k->c[axis], (long long)off);
  if (i + 1 == d->nargs) {
    ssm_cg_emit(c, d->args[i], &s, out, depth + 1);
    return;
  }
  const char *cond = ssm_arena_printf(c->a, "%s < %lldu", k->c[axis], (long long)(off + len));
  ssm_sb here = {0}, rest = {0};
  ssm_cg_emit(c, d->args[i], &s, &here, depth + 1);
  emit_concat(c, d, k, &rest, depth, i + 1, off + len);
  ssm_cg_spell(out, lang(c)->select, cond, ssm_sb_str(&here), ssm_sb_str(&rest));
  ssm_sb_free(&here);
  ssm_sb_free(&rest);
}

/* The expression for value v at coordinates k (in v's shape). */
void ssm_cg_emit(cg_ctx *c, const ssm_value *v, const cg_coords *k, ssm_sb *out, int depth) {
  const ssm_node *d = v->def;
  if (depth > 200) {
    if (!c->err) c->err = ssm_status_new(SSM_ERR_UNSUPPORTED, "fused expression too deep");
    ssm_sb_printf(out, "0.0");
    return;
  }
  if (d->op == SSM_OP_CONST) {
    ssm_sb_printf(out, "%s", ssm_cg_float_lit(c, ssm_node_float(d, "value", 0)));
    return;
  }
  if (ssm_cg_member(c, d) && d == c->anchor && c->in_epilogue) {
    ssm_sb_printf(out, "acc");
    return;
  }
  if ((ssm_cg_member(c, d) && d != c->anchor && ssm_op_is_view(d->op)) ||
      ssm_cg_ungrouped_view(c, d)) {
    cg_coords s = {.rank = d->args[0]->type.rank};
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
      if (!ssm_cg_member(c, src) && !ssm_cg_ungrouped_view(c, src) && src->op != SSM_OP_CONST) {
        ssm_sb lin = {0};
        linearize(&lin, &s, st);
        ssm_cg_mem_load(c, out, ssm_cg_binding(c, d->args[0]), d->args[0]->type.dtype,
                        ssm_sb_str(&lin));
        ssm_sb_free(&lin);
        return;
      }
    } else { /* reshape: same linear index */
      ssm_sb lin = {0};
      linearize(&lin, k, &v->type);
      const ssm_node *src = d->args[0]->def;
      int buffer =
          !ssm_cg_member(c, src) && !ssm_cg_ungrouped_view(c, src) && src->op != SSM_OP_CONST;
      if (buffer) {
        ssm_cg_mem_load(c, out, ssm_cg_binding(c, d->args[0]), d->args[0]->type.dtype,
                        ssm_sb_str(&lin));
        ssm_sb_free(&lin);
        return;
      }
      s = ssm_cg_delinearize(ssm_cg_take(&lin, c->a), st, c->a);
    }
    ssm_cg_emit(c, d->args[0], &s, out, depth + 1);
    return;
  }
  if (ssm_cg_member(c, d) && d != c->anchor) {
    ssm_op_kind kind = ssm_op_info_get(d->op)->kind;
    if (kind == SSM_KIND_UNARY || kind == SSM_KIND_BINARY) {
      ssm_sb operand[2] = {{0}};
      for (int i = 0; i < d->nargs; i++) {
        cg_coords ai = ssm_cg_broadcast(k, &d->args[i]->type);
        ssm_cg_emit(c, d->args[i], &ai, &operand[i], depth + 1);
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
      ssm_cg_emit(c, d->args[0], k, out, depth + 1);
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
        h = ssm_cg_rms_helper(c, d, depth);
        if (!c->nrmc) /* the pass's first step and steps, set by CHUNK (scan.c) */
          ssm_sb_printf(&c->helpers, "%s\n", SNIPPET0(c, "helpers", "rmc_pass"));
        ssm_sb_printf(&c->helpers, "%s\n", SNIPPET(c, "helpers", "rmc", "H", I64(h)));
        c->rmc_node[c->nrmc] = d;
        c->rmc_id[c->nrmc++] = h;
      }
      /* (in * rsqrt * gain); a matmul's x that it rounds (ssm_cg_load_x):
       * (x16(in * gain) * rsqrt), ops.def */
      int x16 = d == c->x16_norm;
      ssm_sb_printf(out, x16 ? "(ssm_x16(" : "(");
      ssm_cg_emit(c, d->args[0], k, out, depth + 1);
      if (x16 && d->nargs > 1) {
        cg_coords w = {.rank = 1, .c = {k->c[k->rank - 1]}};
        ssm_sb_printf(out, " * ");
        ssm_cg_emit(c, d->args[1], &w, out, depth + 1);
      }
      if (x16) ssm_sb_printf(out, ")");
      int from_cache = h >= 0;
      if (!from_cache) h = ssm_cg_rms_helper(c, d, depth);
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
      if (!x16 && d->nargs > 1) {
        cg_coords w = {.rank = 1, .c = {k->c[k->rank - 1]}};
        ssm_sb_printf(out, " * ");
        ssm_cg_emit(c, d->args[1], &w, out, depth + 1);
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
  int b = ssm_cg_binding(c, v);
  ssm_sb idx = {0};
  linearize(&idx, k, &v->type);
  ssm_cg_mem_load(c, out, b, v->type.dtype, ssm_sb_str(&idx));
  ssm_sb_free(&idx);
}

/* ---- load functions and the epilogue -------------------------------------- */

/* `NAME(p0, ...) { return <operand at those coordinates>; }`, where the
 * parameters are the coordinates named in `params` (ssm_cg_fn_head) and `k` says
 * how they map onto the operand's own coordinates. */
void ssm_cg_load_fn(cg_ctx *c, ssm_sb *loads, const char *name, const char *params,
                    const ssm_value *v, const cg_coords *k) {
  ssm_sb e = {0};
  ssm_cg_emit(c, v, k, &e, 0);
  ssm_cg_const_fn(c, loads, name, params, ssm_sb_str(&e));
  ssm_sb_free(&e);
}

/* Coordinates of type t as (m, LAST): m over the leading dims, LAST the last. */
cg_coords ssm_cg_row_coords(cg_ctx *c, const ssm_type *t, const char *last) {
  ssm_type lead = *t;
  lead.rank = t->rank - 1;
  cg_coords k = ssm_cg_delinearize("m", &lead, c->a);
  k.rank = t->rank;
  k.c[t->rank - 1] = last;
  return k;
}

/* ssm_cg_load_fn of a matmul's x: with `x16` (its weight is 16-bit),
 * rounded as the products take it (ops.def; ssm_x16, templates/common.*.in):
 * x itself, or where x is a norm of the group that the matmul alone uses
 * (a small row's, inline), x times the gain, before the norm's scale */
void ssm_cg_load_x(cg_ctx *c, ssm_sb *loads, const char *name, const char *params,
                   const ssm_value *v, const cg_coords *k, int x16) {
  ssm_sb e = {0};
  const ssm_node *d = v->def;
  int norm = x16 && d->op == SSM_OP_RMSNORM && ssm_cg_member(c, d) && d != c->norm;
  if (norm) c->x16_norm = d; /* the norm's emission rounds (ssm_cg_emit) */
  int wrap = x16 && !norm;
  ssm_sb_printf(&e, wrap ? "ssm_x16(" : "");
  ssm_cg_emit(c, v, k, &e, 0);
  ssm_sb_printf(&e, wrap ? ")" : "");
  c->x16_norm = NULL;
  ssm_cg_const_fn(c, loads, name, params, ssm_sb_str(&e));
  ssm_sb_free(&e);
}

/* load of operand v of shape [.., K] as (m, k) with m over the leading
 * dims, rounded with `x16` (ssm_cg_load_x) */
void ssm_cg_load_rows(cg_ctx *c, ssm_sb *loads, const char *name, const ssm_value *v, int x16) {
  cg_coords k = ssm_cg_row_coords(c, &v->type, "k");
  ssm_cg_load_x(c, loads, name, "m k", v, &k, x16);
}

/* epilogue(acc, i): the group's value at element i from the anchor's acc.
 * With `touch`, also epilogue_touch(acc, i): the same reads and
 * arithmetic, nothing written (a decode conv's state stays), which a
 * template calls before its main loads so that the epilogue's own reads,
 * later, find their lines in cache; returns whether there is one (a group
 * that is its anchor alone reads nothing more). */
int ssm_cg_epilogue(cg_ctx *c, ssm_sb *loads, int touch) {
  if (c->root == c->anchor) {
    ssm_cg_const_fn(c, loads, "epilogue", "acc i", "acc");
    return 0;
  }
  c->in_epilogue = 1;
  cg_coords k = ssm_cg_delinearize("i", &c->root->result->type, c->a);
  ssm_cg_load_fn(c, loads, "epilogue", "acc i", c->root->result, &k);
  if (touch) {
    c->touching = 1;
    ssm_cg_load_fn(c, loads, "epilogue_touch", "acc i", c->root->result, &k);
    c->touching = 0;
  }
  c->in_epilogue = 0;
  return touch;
}

/* The generated helper functions, then the load and epilogue functions, as
 * the template's LOADS; consumes `loads`. */
const char *ssm_cg_loads_text(cg_ctx *c, ssm_sb *loads) {
  const char *t = ssm_arena_printf(c->a, "%s%s", ssm_sb_str(&c->helpers), ssm_sb_str(loads));
  ssm_sb_free(loads);
  return t;
}
