/*
 * shape.c — the shape and dtype rule of every op in ops.def.
 *
 * ssm_op_infer computes the result type of a node from its operands and
 * attributes, or says in a plain message (no place; callers add it) why the
 * operands do not fit the op. It checks arity and attribute presence itself,
 * so it is safe on any node, not only verified ones. Broadcasting follows
 * numpy: shapes align on the right and a size-1 or missing dim stretches.
 *
 * Dtypes: the operands of an op share one dtype, except that the weight of
 * a matmul or matmul_sel and the table of an embed may be stored in f16 or
 * bf16 (16-bit weights: the weights pass). Those ops compute in f32 and give
 * f32 whatever their weight's dtype, so every activation and state stays
 * f32. Indices (topk's result, gather's and matmul_sel's operand) are i32.
 */
#include "ir/ir.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#define FMT(t, buf) ssm_type_format((t), (buf), sizeof(buf))

static ssm_status SSM_PRINTF(1, 2) bad(const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ssm_status_new(SSM_ERR_INVALID, "%s", msg);
}

static int is_float(ssm_dtype d) { return d == SSM_F32 || d == SSM_F16 || d == SSM_BF16; }
/* a matmul's weight or an embedding table may also be quantized */
static int is_weight(ssm_dtype d) { return is_float(d) || ssm_dtype_is_quant(d); }

static const ssm_type *arg(const ssm_node *n, int i) { return &n->args[i]->type; }

/* Broadcasts a and b into out (numpy rules); 0 if they do not broadcast. */
static int broadcast(const ssm_type *a, const ssm_type *b, ssm_type *out) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  *out = (ssm_type){.dtype = a->dtype, .rank = r};
  for (int i = 0; i < r; i++) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) return 0;
    out->dims[i] = da == 1 ? db : da;
  }
  return 1;
}

static ssm_status need_float(const ssm_node *n, int i, const char *what) {
  char b[96];
  if (!is_float(arg(n, i)->dtype))
    return bad("%s must be a float tensor, got %s", what, FMT(arg(n, i), b));
  return NULL;
}

static ssm_status need_weight(const ssm_node *n, int i, const char *what) {
  char b[96];
  if (!is_weight(arg(n, i)->dtype))
    return bad("%s must be a float or quantized tensor, got %s", what, FMT(arg(n, i), b));
  return NULL;
}

static ssm_status same_dtype(const ssm_node *n, int i, int j) {
  char b1[96], b2[96];
  if (arg(n, i)->dtype != arg(n, j)->dtype)
    return bad("operand dtypes differ: %s and %s", FMT(arg(n, i), b1), FMT(arg(n, j), b2));
  return NULL;
}

static ssm_status get_int(const ssm_node *n, const char *key, int64_t *out) {
  const ssm_attr *a = ssm_node_attr(n, key);
  if (!a || a->kind != SSM_ATTR_INT) return bad("needs integer attribute '%s'", key);
  *out = a->i;
  return NULL;
}

static ssm_status get_axis(const ssm_node *n, const ssm_type *t, int64_t *out) {
  char b[96];
  SSM_TRY(get_int(n, "axis", out));
  if (*out < 0 || *out >= t->rank)
    return bad("axis %lld out of range for %s", (long long)*out, FMT(t, b));
  return NULL;
}

static ssm_status infer_src(const ssm_node *n, ssm_type *out) {
  char b[96];
  if (!n->result) return bad("defines no result");
  if (n->op != SSM_OP_CONST) {
    *out = n->result->type;
    return NULL;
  }
  if (n->result->type.rank != 0)
    return bad("a const is a scalar (rank 0), declared %s", FMT(&n->result->type, b));
  const ssm_attr *v = ssm_node_attr(n, "value");
  if (!v || v->kind != SSM_ATTR_FLOAT) return bad("needs float attribute 'value'");
  *out = (ssm_type){.dtype = n->result->type.dtype, .rank = 0};
  return NULL;
}

static ssm_status infer_binary(const ssm_node *n, ssm_type *out) {
  char b1[96], b2[96];
  const ssm_type *a = arg(n, 0), *c = arg(n, 1);
  SSM_TRY(same_dtype(n, 0, 1));
  if (!broadcast(a, c, out))
    return bad("operand shapes %s and %s do not broadcast", FMT(a, b1), FMT(c, b2));
  return NULL;
}

static ssm_status infer_embed(const ssm_node *n, ssm_type *out) {
  char b1[96], b2[96];
  const ssm_type *tab = arg(n, 0), *ids = arg(n, 1);
  if (tab->rank != 2 || !is_weight(tab->dtype))
    return bad("embedding table must be a float [V,H], got %s", FMT(tab, b1));
  if (ids->rank != 1 || ids->dtype != SSM_I32)
    return bad("token ids must be i32 [T], got %s", FMT(ids, b2));
  *out = (ssm_type){.dtype = SSM_F32, .rank = 2, .dims = {ids->dims[0], tab->dims[1]}};
  return NULL;
}

static ssm_status infer_matmul(const ssm_node *n, ssm_type *out) {
  char b1[96], b2[96];
  const ssm_type *x = arg(n, 0), *w = arg(n, 1);
  SSM_TRY(need_float(n, 0, "matmul input"));
  SSM_TRY(need_weight(n, 1, "matmul weight"));
  if (x->rank < 1 || w->rank != 2 || x->dims[x->rank - 1] != w->dims[1])
    return bad("matmul needs x [..,K] and weight [N,K], got %s and %s", FMT(x, b1),
               FMT(w, b2));
  *out = *x;
  out->dtype = SSM_F32;
  out->dims[x->rank - 1] = w->dims[0];
  return NULL;
}

static ssm_status infer_reduce(const ssm_node *n, ssm_type *out) {
  const ssm_attr *k = ssm_node_attr(n, "kind");
  if (!k || k->kind != SSM_ATTR_STR) return bad("needs string attribute 'kind'");
  if (strcmp(k->s, "sum") && strcmp(k->s, "mean") && strcmp(k->s, "max"))
    return bad("reduce kind must be sum, mean or max, got '%s'", k->s);
  int64_t axis = 0;
  SSM_TRY(get_axis(n, arg(n, 0), &axis));
  *out = *arg(n, 0);
  out->dims[axis] = 1;
  return NULL;
}

static ssm_status infer_rmsnorm(const ssm_node *n, ssm_type *out) {
  char b1[96], b2[96];
  const ssm_type *x = arg(n, 0);
  SSM_TRY(need_float(n, 0, "rmsnorm input"));
  if (x->rank < 1) return bad("rmsnorm needs x [..,C], got %s", FMT(x, b1));
  const ssm_attr *eps = ssm_node_attr(n, "eps");
  if (!eps || eps->kind != SSM_ATTR_FLOAT) return bad("needs float attribute 'eps'");
  if (!(eps->f >= 0) || isinf(eps->f)) return bad("eps must be finite and >= 0");
  if (n->nargs == 2) {
    const ssm_type *w = arg(n, 1);
    SSM_TRY(same_dtype(n, 0, 1));
    if (w->rank != 1 || w->dims[0] != x->dims[x->rank - 1])
      return bad("rmsnorm weight must be [C] for x %s, got %s", FMT(x, b1), FMT(w, b2));
  }
  *out = *x;
  return NULL;
}

static ssm_status infer_slice(const ssm_node *n, ssm_type *out) {
  char b[96];
  const ssm_type *x = arg(n, 0);
  int64_t axis = 0, start = 0, len = 0;
  SSM_TRY(get_axis(n, x, &axis));
  SSM_TRY(get_int(n, "start", &start));
  SSM_TRY(get_int(n, "len", &len));
  if (start < 0 || len < 1 || start > x->dims[axis] - len)
    return bad("slice start=%lld len=%lld out of bounds of axis %lld of %s", (long long)start,
               (long long)len, (long long)axis, FMT(x, b));
  *out = *x;
  out->dims[axis] = len;
  return NULL;
}

static ssm_status infer_concat(const ssm_node *n, ssm_type *out) {
  char b1[96], b2[96];
  const ssm_type *x = arg(n, 0);
  int64_t axis = 0;
  SSM_TRY(get_axis(n, x, &axis));
  *out = *x;
  for (int i = 1; i < n->nargs; i++) {
    const ssm_type *y = arg(n, i);
    int ok = y->dtype == x->dtype && y->rank == x->rank;
    for (int d = 0; ok && d < x->rank; d++) ok = d == axis || y->dims[d] == x->dims[d];
    if (!ok)
      return bad("concat operands %s and %s differ outside axis %lld", FMT(x, b1), FMT(y, b2),
                 (long long)axis);
    out->dims[axis] += y->dims[axis];
  }
  return NULL;
}

static ssm_status infer_reshape(const ssm_node *n, ssm_type *out) {
  char b1[96], b2[96];
  if (!n->result) return bad("reshape needs a declared result type");
  const ssm_type *x = arg(n, 0), *r = &n->result->type;
  if (x->dtype != r->dtype || ssm_type_numel(x) != ssm_type_numel(r))
    return bad("cannot reshape %s to %s", FMT(x, b1), FMT(r, b2));
  *out = *r;
  return NULL;
}

static ssm_status infer_transpose(const ssm_node *n, ssm_type *out) {
  char b[96];
  const ssm_type *x = arg(n, 0);
  const ssm_attr *p = ssm_node_attr(n, "perm");
  if (!p || p->kind != SSM_ATTR_INTS) return bad("needs int list attribute 'perm'");
  int used[SSM_MAX_RANK] = {0};
  int ok = p->n == x->rank;
  for (int i = 0; ok && i < p->n; i++) {
    ok = p->ints[i] >= 0 && p->ints[i] < x->rank && !used[p->ints[i]];
    if (ok) used[p->ints[i]] = 1;
  }
  if (!ok) return bad("perm is not a permutation of the %d axes of %s", x->rank, FMT(x, b));
  *out = *x;
  for (int i = 0; i < x->rank; i++) out->dims[i] = x->dims[p->ints[i]];
  return NULL;
}

/* The optional batch attribute: 0 (one sequence of T tokens) or 1 (T
 * sequences of one token, each with its own state row and position). */
static ssm_status need_batch_flag(const ssm_node *n) {
  int64_t b = ssm_node_int(n, "batch", 0);
  if (b != 0 && b != 1)
    return bad("%s batch must be 0 or 1, got %lld", ssm_op_info_get(n->op)->name, (long long)b);
  return NULL;
}

static ssm_status infer_conv1d(const ssm_node *n, ssm_type *out) {
  char b1[96], b2[96], b3[96];
  const ssm_type *x = arg(n, 0), *st = arg(n, 1), *w = arg(n, 2);
  SSM_TRY(need_float(n, 0, "conv1d_causal input"));
  for (int i = 1; i < n->nargs; i++) SSM_TRY(same_dtype(n, 0, i));
  if (x->rank != 2) return bad("conv1d_causal needs x [T,C], got %s", FMT(x, b1));
  int64_t c = x->dims[1];
  if (w->rank != 2 || w->dims[0] != c || w->dims[1] < 2)
    return bad("conv1d_causal weight must be [C,K] with C=%lld and K>=2, got %s", (long long)c,
               FMT(w, b1));
  int64_t k = w->dims[1];
  SSM_TRY(need_batch_flag(n));
  if (ssm_node_int(n, "batch", 0)) {
    if (st->rank != 3 || st->dims[0] != x->dims[0] || st->dims[1] != k - 1 || st->dims[2] != c)
      return bad("conv1d_causal batch=1 state must be [T,K-1,C] = [%lld,%lld,%lld] for x %s and "
                 "weight %s, got %s", (long long)x->dims[0], (long long)(k - 1), (long long)c,
                 FMT(x, b1), FMT(w, b2), FMT(st, b3));
  } else if (st->rank != 2 || st->dims[0] != k - 1 || st->dims[1] != c)
    return bad("conv1d_causal state must be [K-1,C] = [%lld,%lld] for x %s and weight %s, got %s",
               (long long)(k - 1), (long long)c, FMT(x, b1), FMT(w, b2), FMT(st, b3));
  if (n->nargs == 4) {
    const ssm_type *bias = arg(n, 3);
    if (bias->rank != 1 || bias->dims[0] != c)
      return bad("conv1d_causal bias must be [%lld], got %s", (long long)c, FMT(bias, b1));
  }
  *out = *x;
  return NULL;
}

static ssm_status infer_scan(const ssm_node *n, ssm_type *out) {
  char b1[96], b2[96], b3[96];
  const ssm_type *h = arg(n, 3);
  SSM_TRY(need_float(n, 0, "scan input a"));
  for (int i = 1; i < 4; i++) SSM_TRY(same_dtype(n, 0, i));
  ssm_type ab, abc;
  if (!broadcast(arg(n, 0), arg(n, 1), &ab) || !broadcast(&ab, arg(n, 2), &abc))
    return bad("scan operands a %s, b %s and c %s do not broadcast", FMT(arg(n, 0), b1),
               FMT(arg(n, 1), b2), FMT(arg(n, 2), b3));
  SSM_TRY(need_batch_flag(n));
  /* batch=1: the state's first dim is the steps' (one state row a step) */
  int batch = (int)ssm_node_int(n, "batch", 0), hr = h->rank - batch;
  int ok = hr >= 1 && abc.rank == hr + 1 && (!batch || h->dims[0] == abc.dims[0]);
  for (int i = 0; ok && i < hr; i++)
    ok = abc.dims[i + 1] == h->dims[i + batch] || abc.dims[i + 1] == 1;
  if (!ok)
    return bad(batch ? "scan batch=1 operands a, b, c broadcast to %s, which is not [T,S..,N] for "
                       "state [T,S..,N] %s"
                     : "scan operands a, b, c broadcast to %s, which is not [T,S..,N] for state %s",
               FMT(&abc, b1), FMT(h, b2));
  *out = (ssm_type){.dtype = abc.dtype, .rank = hr};
  out->dims[0] = abc.dims[0];
  for (int i = 0; i + 1 < hr; i++) out->dims[i + 1] = h->dims[i + batch];
  return NULL;
}

/* q and k [T,Hk,Dk], v [T,H,Dv] (H a multiple of Hk), g [T,H] or
 * [T,H,Dk], beta [T,H], state [H,Dk,Dv] (batch=1: [T,H,Dk,Dv], a state
 * a step) -> [T,H,Dv]. */
static ssm_status infer_delta(const ssm_node *n, ssm_type *out) {
  char b1[96], b2[96], b3[96];
  const ssm_type *q = arg(n, 0), *k = arg(n, 1), *v = arg(n, 2), *g = arg(n, 3), *be = arg(n, 4),
                 *s = arg(n, 5);
  SSM_TRY(need_float(n, 0, "delta_rule q"));
  for (int i = 1; i < 6; i++) SSM_TRY(same_dtype(n, 0, i));
  if (q->rank != 3 || !ssm_type_equal(q, k))
    return bad("delta_rule needs q and k [T,Hk,Dk] alike, got %s and %s", FMT(q, b1), FMT(k, b2));
  int64_t T = q->dims[0], hk = q->dims[1], dk = q->dims[2];
  if (v->rank != 3 || v->dims[0] != T || v->dims[1] < 1 || v->dims[1] % hk)
    return bad("delta_rule needs v [T,H,Dv] with T = %lld and H a multiple of %lld key heads, "
               "got %s",
               (long long)T, (long long)hk, FMT(v, b1));
  int64_t h = v->dims[1], dv = v->dims[2];
  int gok = (g->rank == 2 || (g->rank == 3 && g->dims[2] == dk)) && g->dims[0] == T &&
            g->dims[1] == h;
  if (!gok || be->rank != 2 || be->dims[0] != T || be->dims[1] != h)
    return bad("delta_rule needs the decay [T,H] or [T,H,Dk] = [%lld,%lld(,%lld)] and beta "
               "[T,H], got %s and %s",
               (long long)T, (long long)h, (long long)dk, FMT(g, b1), FMT(be, b2));
  SSM_TRY(need_batch_flag(n));
  int batch = (int)ssm_node_int(n, "batch", 0);
  if (s->rank != 3 + batch || (batch && s->dims[0] != T) || s->dims[batch] != h ||
      s->dims[batch + 1] != dk || s->dims[batch + 2] != dv) {
    if (batch)
      return bad("delta_rule batch=1 state must be [T,H,Dk,Dv] = [%lld,%lld,%lld,%lld], got %s "
                 "(v %s)",
                 (long long)T, (long long)h, (long long)dk, (long long)dv, FMT(s, b1), FMT(v, b3));
    return bad("delta_rule state must be [H,Dk,Dv] = [%lld,%lld,%lld], got %s (v %s)",
               (long long)h, (long long)dk, (long long)dv, FMT(s, b1), FMT(v, b3));
  }
  *out = *v;
  return NULL;
}

/* q [T,Hq,D], k and v [T,Hkv,D], caches [MAXS,Hkv,D], pos i32[1]; Hq a
 * multiple of Hkv. */
/* Operand i, the position: i32[1], or with batch=1 i32[T] (a position a
 * row, T the rows of operand 0). */
static ssm_status need_pos(const ssm_node *n, int i, const char *op) {
  char b[96];
  SSM_TRY(need_batch_flag(n));
  const ssm_type *pos = arg(n, i);
  int batch = (int)ssm_node_int(n, "batch", 0);
  int64_t rows = batch ? arg(n, 0)->dims[0] : 1;
  if (pos->dtype == SSM_I32 && pos->rank == 1 && pos->dims[0] == rows) return NULL;
  if (batch)
    return bad("%s batch=1 pos must be i32[%lld] (a position a row), got %s", op, (long long)rows,
               FMT(pos, b));
  return bad("%s pos must be i32[1], got %s", op, FMT(pos, b));
}
static ssm_status infer_attention(const ssm_node *n, ssm_type *out) {
  char b1[96], b2[96], b3[96];
  const ssm_type *q = arg(n, 0), *k = arg(n, 1), *v = arg(n, 2), *kc = arg(n, 3),
                 *vc = arg(n, 4);
  SSM_TRY(need_float(n, 0, "attention q"));
  for (int i = 1; i < 5; i++) SSM_TRY(same_dtype(n, 0, i));
  if (q->rank != 3) return bad("attention needs q [T,Hq,D], got %s", FMT(q, b1));
  int64_t T = q->dims[0], hq = q->dims[1], d = q->dims[2];
  if (k->rank != 3 || k->dims[0] != T || k->dims[2] != d || !ssm_type_equal(k, v))
    return bad("attention needs k and v [T,Hkv,D] = [%lld,Hkv,%lld] for q %s, got %s and %s",
               (long long)T, (long long)d, FMT(q, b1), FMT(k, b2), FMT(v, b3));
  int64_t hkv = k->dims[1];
  if (hkv < 1 || hq % hkv)
    return bad("attention: %lld query heads are not a multiple of %lld kv heads", (long long)hq,
               (long long)hkv);
  SSM_TRY(need_batch_flag(n));
  /* batch=1: a cache of [MAXS,Hkv,D] a row, the row's sequence's */
  int batch = (int)ssm_node_int(n, "batch", 0), cr = 3 + batch;
  if (kc->rank != cr || (batch && kc->dims[0] != T) || kc->dims[batch + 1] != hkv ||
      kc->dims[batch + 2] != d || !ssm_type_equal(kc, vc))
    return batch ? bad("attention batch=1 caches must be [T,MAXS,%lld,%lld] with T = %lld, got %s and %s",
                       (long long)hkv, (long long)d, (long long)T, FMT(kc, b1), FMT(vc, b2))
                 : bad("attention caches must be [MAXS,%lld,%lld], got %s and %s", (long long)hkv,
                       (long long)d, FMT(kc, b1), FMT(vc, b2));
  if (batch && kc->dims[1] < 1)
    return bad("attention batch=1 caches of no rows, got %s", FMT(kc, b1));
  if (!batch && kc->dims[0] < T)
    return bad("attention cache of %lld rows cannot hold %lld tokens", (long long)kc->dims[0],
               (long long)T);
  SSM_TRY(need_pos(n, 5, "attention"));
  if (ssm_node_int(n, "window", 0) < 0)
    return bad("attention window must be >= 0 (0: none), got %lld", (long long)ssm_node_int(n, "window", 0));
  *out = *q;
  return NULL;
}


/* x %0 [T,K] or [T,k,K], w %1 [E,N,K] (f32, f16 or bf16), idx %2 i32 [T,k] -> f32 [T,k,N] */
static ssm_status infer_matmul_sel(const ssm_node *n, ssm_type *out) {
  char b1[96], b2[96], b3[96];
  const ssm_type *x = arg(n, 0), *w = arg(n, 1), *idx = arg(n, 2);
  SSM_TRY(need_float(n, 0, "matmul_sel input"));
  SSM_TRY(need_weight(n, 1, "matmul_sel weight"));
  if (idx->dtype != SSM_I32 || idx->rank != 2)
    return bad("matmul_sel needs i32 indices [T,k], got %s", FMT(idx, b1));
  int64_t T = idx->dims[0], k = idx->dims[1];
  if (w->rank != 3) return bad("matmul_sel needs stacked weights [E,N,K], got %s", FMT(w, b1));
  int ok = (x->rank == 2 || (x->rank == 3 && x->dims[1] == k)) && x->dims[0] == T &&
           x->dims[x->rank - 1] == w->dims[2];
  if (!ok)
    return bad("matmul_sel needs x [T,K] or [T,k,K] for indices %s and weights %s, got %s", FMT(idx, b1),
               FMT(w, b2), FMT(x, b3));
  *out = (ssm_type){.dtype = SSM_F32, .rank = 3, .dims = {T, k, w->dims[1]}};
  return NULL;
}

/* x [T,H,D], pos i32[1]; 2 <= dims <= D, dims even */
static ssm_status infer_rope(const ssm_node *n, ssm_type *out) {
  char b[96];
  const ssm_type *x = arg(n, 0);
  SSM_TRY(need_float(n, 0, "rope input"));
  if (x->rank != 3) return bad("rope needs x [T,H,D], got %s", FMT(x, b));
  SSM_TRY(need_pos(n, 1, "rope"));
  int64_t dims = 0;
  SSM_TRY(get_int(n, "dims", &dims));
  if (dims < 2 || dims % 2 || dims > x->dims[2])
    return bad("rope dims=%lld must be even and in 2..%lld (D of %s)", (long long)dims,
               (long long)x->dims[2], FMT(x, b));
  const ssm_attr *theta = ssm_node_attr(n, "theta");
  if (!theta || theta->kind != SSM_ATTR_FLOAT) return bad("needs float attribute 'theta'");
  if (!(theta->f > 1) || isinf(theta->f)) return bad("rope theta must be finite and > 1, got %g", theta->f);
  int64_t il = ssm_node_int(n, "interleaved", 0);
  if (il != 0 && il != 1) return bad("rope interleaved must be 0 or 1, got %lld", (long long)il);
  *out = *x;
  return NULL;
}

static ssm_status infer_positions(const ssm_node *n, ssm_type *out) {
  char b[96];
  const ssm_type *x = arg(n, 0);
  if (x->rank < 1) return bad("positions needs x [T,..], got %s", FMT(x, b));
  SSM_TRY(need_pos(n, 1, "positions"));
  *out = (ssm_type){.dtype = SSM_F32, .rank = 2, .dims = {x->dims[0], 1}};
  return NULL;
}

static ssm_status infer_topk(const ssm_node *n, ssm_type *out) {
  char b[96];
  const ssm_type *x = arg(n, 0);
  SSM_TRY(need_float(n, 0, "topk input"));
  if (x->rank < 1) return bad("topk needs x [..,N], got %s", FMT(x, b));
  int64_t k = 0;
  SSM_TRY(get_int(n, "k", &k));
  if (k < 1 || k > x->dims[x->rank - 1])
    return bad("topk k=%lld must be in 1..%lld for %s", (long long)k, (long long)x->dims[x->rank - 1],
               FMT(x, b));
  *out = *x;
  out->dtype = SSM_I32;
  out->dims[x->rank - 1] = k;
  return NULL;
}

static ssm_status infer_gather(const ssm_node *n, ssm_type *out) {
  char b1[96], b2[96];
  const ssm_type *x = arg(n, 0), *idx = arg(n, 1);
  SSM_TRY(need_float(n, 0, "gather input"));
  int ok = idx->dtype == SSM_I32 && idx->rank == x->rank && x->rank >= 1;
  for (int d = 0; ok && d + 1 < x->rank; d++) ok = idx->dims[d] == x->dims[d];
  if (!ok) return bad("gather needs x [..,N] and i32 indices [..,k] with the same leading dims, got %s and %s",
                      FMT(x, b1), FMT(idx, b2));
  *out = *x;
  out->dims[x->rank - 1] = idx->dims[x->rank - 1];
  return NULL;
}

static ssm_status infer_last_axis(const ssm_node *n, ssm_type *out) {
  char b[96];
  const ssm_type *x = arg(n, 0);
  if (x->rank < 1) return bad("needs an operand of rank >= 1, got %s", FMT(x, b));
  *out = *x;
  if (n->op == SSM_OP_SOFTMAX) return need_float(n, 0, "softmax input");
  out->dtype = SSM_I32;
  out->rank--;
  return NULL;
}

/* sample: logits [..,V] (float), sampler state f32[8] -> i32[1] */
static ssm_status infer_sample(const ssm_node *n, ssm_type *out) {
  char b1[96], b2[96];
  const ssm_type *x = arg(n, 0), *st = arg(n, 1);
  if (x->rank < 1 || !is_float(x->dtype) || !x->dims[x->rank - 1])
    return bad("sample needs float logits [..,V], got %s", FMT(x, b1));
  SSM_TRY(need_batch_flag(n));
  if (ssm_node_int(n, "batch", 0)) {
    if (n->nargs > 2) return bad("sample batch=1 takes no seen-token set");
    if (x->rank != 2 || st->dtype != SSM_F32 || st->rank != 2 || st->dims[0] != x->dims[0] ||
        st->dims[1] != 8)
      return bad("sample batch=1 needs logits [B,V] and a sampler state f32[B,8], got %s and %s",
                 FMT(x, b1), FMT(st, b2));
    *out = (ssm_type){.dtype = SSM_I32, .rank = 1, .dims = {x->dims[0]}};
    return NULL;
  }
  if (st->dtype != SSM_F32 || st->rank != 1 || st->dims[0] != 8)
    return bad("sample needs a sampler state f32[8], got %s", FMT(st, b2));
  if (n->nargs > 2) {
    const ssm_type *seen = arg(n, 2);
    int64_t words = SSM_SEEN_WORDS(x->dims[x->rank - 1]);
    if (seen->dtype != SSM_F32 || seen->rank != 1 || seen->dims[0] != words)
      return bad("sample needs a seen-token set f32[%lld], got %s", (long long)words, FMT(seen, b2));
  }
  *out = (ssm_type){.dtype = SSM_I32, .rank = 1, .dims = {1}};
  return NULL;
}

ssm_status ssm_op_infer(const ssm_node *n, ssm_type *out_type) {
  if (n->op < 0 || n->op >= SSM_OP_COUNT) return bad("invalid op %d", (int)n->op);
  const ssm_op_info *info = ssm_op_info_get(n->op);
  if (n->nargs < info->min_args || n->nargs > info->max_args)
    return bad("op '%s' takes %d to %d operands, got %d", info->name, info->min_args,
               info->max_args, n->nargs);
  for (int i = 0; i < n->nargs; i++)
    if (!n->args[i]) return bad("operand %d is missing", i);
  if (n->op == SSM_OP_OUTPUT) return NULL;
  ssm_type t = {0};
  ssm_status s;
  switch (info->kind) {
  case SSM_KIND_SRC: s = infer_src(n, &t); break;
  case SSM_KIND_UNARY:
    s = need_float(n, 0, "the operand");
    t = *arg(n, 0);
    break;
  case SSM_KIND_BINARY: s = infer_binary(n, &t); break;
  default:
    switch (n->op) {
    case SSM_OP_EMBED: s = infer_embed(n, &t); break;
    case SSM_OP_MATMUL: s = infer_matmul(n, &t); break;
    case SSM_OP_MATMUL_SEL: s = infer_matmul_sel(n, &t); break;
    case SSM_OP_ROPE: s = infer_rope(n, &t); break;
    case SSM_OP_POSITIONS: s = infer_positions(n, &t); break;
    case SSM_OP_TOPK: s = infer_topk(n, &t); break;
    case SSM_OP_GATHER: s = infer_gather(n, &t); break;
    case SSM_OP_REDUCE: s = infer_reduce(n, &t); break;
    case SSM_OP_RMSNORM: s = infer_rmsnorm(n, &t); break;
    case SSM_OP_SLICE: s = infer_slice(n, &t); break;
    case SSM_OP_CONCAT: s = infer_concat(n, &t); break;
    case SSM_OP_RESHAPE: s = infer_reshape(n, &t); break;
    case SSM_OP_TRANSPOSE: s = infer_transpose(n, &t); break;
    case SSM_OP_CONV1D: s = infer_conv1d(n, &t); break;
    case SSM_OP_SCAN: s = infer_scan(n, &t); break;
    case SSM_OP_DELTA: s = infer_delta(n, &t); break;
    case SSM_OP_ATTENTION: s = infer_attention(n, &t); break;
    case SSM_OP_SOFTMAX:
    case SSM_OP_ARGMAX: s = infer_last_axis(n, &t); break;
    case SSM_OP_SAMPLE: s = infer_sample(n, &t); break;
    default: s = bad("op '%s' has no shape rule", info->name);
    }
  }
  if (!s) *out_type = t;
  return s;
}
