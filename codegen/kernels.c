/*
 * kernels.c — one generator per kernel family: it reads an IR node's shapes
 * and attributes, decides the template's knobs (constants, index code,
 * expressions) and the dispatch grid, and expands the template.
 */
#include <stdarg.h>
#include <string.h>

#include "codegen.h"

/* ---- a tiny string builder --------------------------------------------- */

typedef struct {
  char *s;
  size_t n, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) SSM_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (b->s && (size_t)k < b->cap - b->n) {
      b->n += (size_t)k;
      return;
    }
    b->cap = (b->cap + (size_t)k + 1) * 2;
    b->s = realloc(b->s, b->cap);
    if (!b->s) abort();
    if (b->n == 0) b->s[0] = 0;
  }
}

static const char *sb_take(sbuf *b, ssm_arena *a) {
  const char *r = ssm_arena_strdup(a, b->s ? b->s : "");
  free(b->s);
  *b = (sbuf){0};
  return r;
}

static const char *fmt(ssm_arena *a, const char *f, ...) SSM_PRINTF(2, 3);
static const char *fmt(ssm_arena *a, const char *f, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return ssm_arena_strdup(a, buf);
}

/* ---- classification ---------------------------------------------------- */

ssm_cg_kind ssm_cg_classify(const ssm_node *n) {
  switch (n->op) {
  case SSM_OP_INPUT:
  case SSM_OP_WEIGHT:
  case SSM_OP_STATE:
  case SSM_OP_CONST: return SSM_CG_DATA;
  case SSM_OP_RESHAPE: return SSM_CG_ALIAS;
  case SSM_OP_OUTPUT: return SSM_CG_SINK;
  default: return SSM_CG_KERNEL;
  }
}

/* ---- shared pieces ----------------------------------------------------- */

static int is_state_operand(const ssm_node *n, int arg) {
  return (n->op == SSM_OP_CONV1D && arg == 1) || (n->op == SSM_OP_SCAN && arg == 3);
}

static const char *glsl_elem(ssm_dtype d) { return d == SSM_I32 ? "int" : "float"; }

/* Storage buffer declarations: b0 the result, b1.. the operands. */
static const char *buffers(const ssm_node *n, ssm_arena *a) {
  sbuf b = {0};
  sb_printf(&b, "layout(std430, binding = 0) writeonly buffer B0 { %s v[]; } b0;\n",
            glsl_elem(n->result->type.dtype));
  for (int i = 0; i < n->nargs; i++)
    sb_printf(&b, "layout(std430, binding = %d) %sbuffer B%d { %s v[]; } b%d;\n", i + 1,
              is_state_operand(n, i) ? "" : "readonly ", i + 1,
              glsl_elem(n->args[i]->type.dtype), i + 1);
  return sb_take(&b, a);
}

static uint32_t groups_for(int64_t items, uint32_t local) {
  int64_t g = (items + local - 1) / local;
  return (uint32_t)(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

/* Grid for one workgroup per item (x up to 65535, then y). */
static void grid_per_item(int64_t items, uint32_t out[3]) {
  out[0] = (uint32_t)(items < 65535 ? (items < 1 ? 1 : items) : 65535);
  out[1] = (uint32_t)((items + 65534) / 65535);
  out[2] = 1;
}

/* Strides of operand shape `op` broadcast (numpy, right-aligned) to a shape
 * of rank `rank`: 0 for stretched dims. */
static void bcast_strides(const ssm_type *op, int rank, int64_t out[SSM_MAX_RANK]) {
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; d--) {
    int od = d - (rank - op->rank);
    if (od < 0 || op->dims[od] == 1) out[d] = 0;
    else {
      out[d] = stride;
    }
    if (od >= 0) stride *= op->dims[od];
  }
}

static void contiguous_strides(const ssm_type *t, int64_t out[SSM_MAX_RANK]) {
  int64_t s = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    out[d] = s;
    s *= t->dims[d];
  }
}

/* Code that splits the output index i into coordinates c0..c{rank-1}. */
static void emit_coords(sbuf *b, const ssm_type *out) {
  sb_printf(b, "    uint r_ = i;\n");
  for (int d = out->rank - 1; d >= 0; d--) {
    if (d > 0)
      sb_printf(b, "    uint c%d = r_ %% %lldu; r_ /= %lldu;\n", d, (long long)out->dims[d],
                (long long)out->dims[d]);
    else sb_printf(b, "    uint c0 = r_;\n");
  }
}

/* "c0 * 8u + c2 * 1u" for the given strides (skipping zeros), or "0u". */
static void emit_dot(sbuf *b, int rank, const int64_t *strides, int64_t offset) {
  int any = 0;
  for (int d = 0; d < rank; d++)
    if (strides[d]) {
      sb_printf(b, "%sc%d * %lldu", any ? " + " : "", d, (long long)strides[d]);
      any = 1;
    }
  if (offset || !any) sb_printf(b, "%s%lldu", any ? " + " : "", (long long)offset);
}

static ssm_status expand(const ssm_node *n, ssm_arena *a, const char *family,
                         const char *params, const char *const *kv, ssm_cg_kernel *out) {
  char *src;
  SSM_TRY(ssm_cg_template_expand(a, family, kv, &src));
  out->family = family;
  out->params = params;
  out->glsl = ssm_arena_printf(a, "// ssmc kernel: template %s.glsl.in, op %s, %s\n%s", family,
                               ssm_op_info_get(n->op)->name, params, src);
  out->nbindings = 1 + n->nargs;
  return NULL;
}

static const char *common(ssm_arena *a) {
  char *c;
  ssm_status s = ssm_cg_template_expand(a, "common", (const char *const[]){NULL}, &c);
  SSM_ASSERT(!s);
  /* drop the template's leading comment lines' #version-free body as is */
  return c;
}

/* ---- elementwise ------------------------------------------------------- */

static const char *unary_expr(ssm_op op) {
  switch (op) {
  case SSM_OP_NEG: return "(-%s)";
  case SSM_OP_EXP: return "exp(%s)";
  case SSM_OP_LOG: return "log(%s)";
  case SSM_OP_SOFTPLUS: return "ssm_softplus(%s)";
  case SSM_OP_SILU: return "ssm_silu(%s)";
  case SSM_OP_SIGMOID: return "ssm_sigmoid(%s)";
  case SSM_OP_RELU: return "max(%s, 0.0)";
  case SSM_OP_SQRT: return "sqrt(%s)";
  case SSM_OP_RSQRT: return "inversesqrt(%s)";
  case SSM_OP_SQUARE: return "(%1$s * %1$s)";
  default: return NULL;
  }
}

static const char *binary_sym(ssm_op op) {
  switch (op) {
  case SSM_OP_ADD: return "+";
  case SSM_OP_SUB: return "-";
  case SSM_OP_MUL: return "*";
  case SSM_OP_DIV: return "/";
  default: return NULL;
  }
}

static ssm_status gen_elementwise(const ssm_node *n, ssm_arena *a, ssm_cg_kernel *out) {
  const ssm_type *ot = &n->result->type;
  int64_t count = ssm_type_numel(ot);
  sbuf idx = {0}, ex = {0};
  int need_coords = 0;
  for (int i = 0; i < n->nargs; i++)
    if (!ssm_type_equal(&n->args[i]->type, ot) && ssm_type_numel(&n->args[i]->type) > 1)
      need_coords = 1;
  if (need_coords) emit_coords(&idx, ot);
  for (int i = 0; i < n->nargs; i++) {
    const ssm_type *t = &n->args[i]->type;
    sb_printf(&idx, "    uint j%d = ", i + 1);
    if (ssm_type_equal(t, ot)) sb_printf(&idx, "i");
    else if (ssm_type_numel(t) == 1) sb_printf(&idx, "0u");
    else {
      int64_t st[SSM_MAX_RANK];
      bcast_strides(t, ot->rank, st);
      emit_dot(&idx, ot->rank, st, 0);
    }
    sb_printf(&idx, ";\n");
  }
  if (n->nargs == 1) {
    char x[32];
    snprintf(x, sizeof x, "b1.v[j1]");
    sb_printf(&ex, unary_expr(n->op), x);
  } else {
    sb_printf(&ex, "(b1.v[j1] %s b2.v[j2])", binary_sym(n->op));
  }
  uint32_t local = 256;
  out->groups[0] = groups_for(count, local);
  out->groups[1] = out->groups[2] = 1;
  const char *N = fmt(a, "%lld", (long long)count);
  const char *kv[] = {"LOCAL", fmt(a, "%u", local), "N", N, "STRIDE",
                      fmt(a, "%u", out->groups[0] * local), "BUFFERS", buffers(n, a),
                      "COMMON", common(a), "INDEX", sb_take(&idx, a), "EXPR", sb_take(&ex, a),
                      NULL};
  return expand(n, a, "elementwise", fmt(a, "N=%lld", (long long)count), kv, out);
}

/* ---- data movement ----------------------------------------------------- */

static ssm_status gen_copy(const ssm_node *n, ssm_arena *a, ssm_cg_kernel *out) {
  const ssm_type *ot = &n->result->type;
  int64_t count = ssm_type_numel(ot);
  sbuf idx = {0};
  emit_coords(&idx, ot);
  const char *params;
  if (n->op == SSM_OP_SLICE) {
    int64_t axis = ssm_node_int(n, "axis", 0), start = ssm_node_int(n, "start", 0);
    int64_t st[SSM_MAX_RANK];
    contiguous_strides(&n->args[0]->type, st);
    sb_printf(&idx, "    v = b1.v[");
    emit_dot(&idx, ot->rank, st, start * st[axis]);
    sb_printf(&idx, "];\n");
    params = fmt(a, "axis=%lld start=%lld len=%lld", (long long)axis, (long long)start,
                 (long long)ot->dims[axis]);
  } else if (n->op == SSM_OP_TRANSPOSE) {
    const ssm_attr *perm = ssm_node_attr(n, "perm");
    int64_t st[SSM_MAX_RANK], pst[SSM_MAX_RANK];
    contiguous_strides(&n->args[0]->type, st);
    sbuf p = {0};
    for (int d = 0; d < ot->rank; d++) {
      pst[d] = st[perm->ints[d]];
      sb_printf(&p, d ? ",%lld" : "perm=[%lld", (long long)perm->ints[d]);
    }
    sb_printf(&p, "]");
    sb_printf(&idx, "    v = b1.v[");
    emit_dot(&idx, ot->rank, pst, 0);
    sb_printf(&idx, "];\n");
    params = sb_take(&p, a);
  } else { /* concat */
    int64_t axis = ssm_node_int(n, "axis", 0), off = 0;
    for (int i = 0; i < n->nargs; i++) {
      const ssm_type *t = &n->args[i]->type;
      int64_t st[SSM_MAX_RANK];
      contiguous_strides(t, st);
      sb_printf(&idx, "    %sif (c%lld < %lldu) v = b%d.v[", i ? "else " : "", (long long)axis,
                (long long)(off + t->dims[axis]), i + 1);
      emit_dot(&idx, ot->rank, st, -off * st[axis]);
      sb_printf(&idx, "];\n");
      off += t->dims[axis];
    }
    sb_printf(&idx, "    else v = 0.0;\n");
    params = fmt(a, "axis=%lld operands=%d", (long long)axis, n->nargs);
  }
  uint32_t local = 256;
  out->groups[0] = groups_for(count, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[] = {"LOCAL", fmt(a, "%u", local), "N", fmt(a, "%lld", (long long)count),
                      "STRIDE", fmt(a, "%u", out->groups[0] * local), "BUFFERS",
                      buffers(n, a), "INDEX", sb_take(&idx, a), NULL};
  return expand(n, a, "copy", fmt(a, "N=%lld %s", (long long)count, params), kv, out);
}

/* ---- embed, matmul ----------------------------------------------------- */

static ssm_status gen_embed(const ssm_node *n, ssm_arena *a, ssm_cg_kernel *out) {
  int64_t V = n->args[0]->type.dims[0], H = n->args[0]->type.dims[1];
  int64_t T = n->args[1]->type.dims[0];
  uint32_t local = 256;
  out->groups[0] = groups_for(T * H, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[] = {"LOCAL", fmt(a, "%u", local), "T", fmt(a, "%lld", (long long)T), "H",
                      fmt(a, "%lld", (long long)H), "V", fmt(a, "%lld", (long long)V), "STRIDE",
                      fmt(a, "%u", out->groups[0] * local), "BUFFERS", buffers(n, a), NULL};
  return expand(n, a, "embed", fmt(a, "T=%lld H=%lld V=%lld", (long long)T, (long long)H,
                                   (long long)V), kv, out);
}

static uint32_t pow2_threads(int64_t work, uint32_t lo, uint32_t hi) {
  uint32_t l = lo;
  while (l < hi && (int64_t)l * 4 < work) l *= 2;
  return l;
}

static ssm_status gen_matmul(const ssm_node *n, ssm_arena *a, ssm_cg_kernel *out) {
  const ssm_type *w = &n->args[1]->type;
  int64_t N = w->dims[0], K = w->dims[1];
  int64_t M = ssm_type_numel(&n->args[0]->type) / K;
  int64_t TT = M < 8 ? M : 8;
  uint32_t local = pow2_threads(K, 32, 256);
  grid_per_item(N, out->groups);
  const char *kv[] = {"LOCAL", fmt(a, "%u", local), "M", fmt(a, "%lld", (long long)M), "K",
                      fmt(a, "%lld", (long long)K), "N", fmt(a, "%lld", (long long)N), "TT",
                      fmt(a, "%lld", (long long)TT), "BUFFERS", buffers(n, a), NULL};
  return expand(n, a, "matmul", fmt(a, "M=%lld K=%lld N=%lld TT=%lld LOCAL=%u", (long long)M,
                                    (long long)K, (long long)N, (long long)TT, local), kv, out);
}

/* ---- row reductions: rmsnorm, softmax, argmax --------------------------- */

#define NEG_INF "uintBitsToFloat(0xff800000u)"

static ssm_status gen_rowreduce(const ssm_node *n, ssm_arena *a, ssm_cg_kernel *out) {
  const ssm_type *xt = &n->args[0]->type;
  int64_t C = xt->dims[xt->rank - 1], rows = ssm_type_numel(xt) / C;
  uint32_t local = pow2_threads(C, 32, 256);
  const char *part_t = "float", *init, *accum, *combine, *finish, *params;
  if (n->op == SSM_OP_RMSNORM) {
    double eps = ssm_node_float(n, "eps", 0);
    init = "0.0";
    accum = "p += x * x";
    combine = "part[lid] += part[lid + s]";
    finish = fmt(a,
                 "float inv = inversesqrt(r / float(%lld) + float(%.17g));\n"
                 "  for (uint c = lid; c < %lldu; c += %uu)\n"
                 "    b0.v[base + c] = b1.v[base + c] * inv%s;",
                 (long long)C, eps, (long long)C, local, n->nargs > 1 ? " * b2.v[c]" : "");
    params = fmt(a, "rmsnorm ROWS=%lld C=%lld eps=%g weight=%d", (long long)rows, (long long)C,
                 eps, n->nargs > 1);
  } else if (n->op == SSM_OP_SOFTMAX) {
    part_t = "vec2";
    init = "vec2(" NEG_INF ", 0.0)";
    accum = "{ float m = max(p.x, x); p.y = p.y * exp(p.x - m) + exp(x - m); p.x = m; }";
    combine = "vec2 o = part[lid + s], q = part[lid]; float m = max(q.x, o.x);"
              " part[lid] = vec2(m, q.y * exp(q.x - m) + o.y * exp(o.x - m))";
    finish = fmt(a,
                 "for (uint c = lid; c < %lldu; c += %uu)\n"
                 "    b0.v[base + c] = exp(b1.v[base + c] - r.x) / r.y;",
                 (long long)C, local);
    params = fmt(a, "softmax ROWS=%lld C=%lld", (long long)rows, (long long)C);
  } else { /* argmax: first index of the largest value */
    part_t = "vec2";
    init = fmt(a, "vec2(" NEG_INF ", float(%lld))", (long long)C);
    accum = "if (x > p.x) p = vec2(x, float(c))";
    combine = "vec2 o = part[lid + s], q = part[lid];"
              " if (o.x > q.x || (o.x == q.x && o.y < q.y)) part[lid] = o";
    finish = fmt(a, "if (lid == 0u) b0.v[row] = min(int(r.y), %lld);", (long long)C - 1);
    params = fmt(a, "argmax ROWS=%lld C=%lld", (long long)rows, (long long)C);
  }
  grid_per_item(rows, out->groups);
  const char *kv[] = {"LOCAL", fmt(a, "%u", local), "ROWS", fmt(a, "%lld", (long long)rows),
                      "C", fmt(a, "%lld", (long long)C), "BUFFERS", buffers(n, a), "COMMON",
                      common(a), "PART_T", part_t, "INIT", init, "ACCUM", accum, "COMBINE",
                      combine, "FINISH", finish, NULL};
  return expand(n, a, "rowreduce", params, kv, out);
}

static ssm_status gen_reduce(const ssm_node *n, ssm_arena *a, ssm_cg_kernel *out) {
  const ssm_type *xt = &n->args[0]->type;
  int64_t axis = ssm_node_int(n, "axis", 0), outer = 1, inner = 1;
  for (int d = 0; d < axis; d++) outer *= xt->dims[d];
  for (int d = (int)axis + 1; d < xt->rank; d++) inner *= xt->dims[d];
  const char *kind = ssm_node_str(n, "kind", "sum");
  const char *init = "0.0", *accum = "acc += x", *final = "acc";
  if (!strcmp(kind, "max")) {
    init = NEG_INF;
    accum = "acc = max(acc, x)";
  } else if (!strcmp(kind, "mean")) {
    final = fmt(a, "acc / float(%lld)", (long long)xt->dims[axis]);
  }
  uint32_t local = 256;
  out->groups[0] = groups_for(outer * inner, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[] = {"LOCAL", fmt(a, "%u", local), "OUTER", fmt(a, "%lld", (long long)outer),
                      "AXIS", fmt(a, "%lld", (long long)xt->dims[axis]), "INNER",
                      fmt(a, "%lld", (long long)inner), "STRIDE",
                      fmt(a, "%u", out->groups[0] * local), "BUFFERS", buffers(n, a), "INIT",
                      init, "ACCUM", accum, "FINAL", final, NULL};
  return expand(n, a, "reduce", fmt(a, "kind=%s OUTER=%lld AXIS=%lld INNER=%lld", kind,
                                    (long long)outer, (long long)xt->dims[axis],
                                    (long long)inner), kv, out);
}

/* ---- conv1d and scan ---------------------------------------------------- */

static ssm_status gen_conv1d(const ssm_node *n, ssm_arena *a, ssm_cg_kernel *out) {
  int64_t T = n->args[0]->type.dims[0], C = n->args[0]->type.dims[1];
  int64_t K = n->args[2]->type.dims[1];
  uint32_t local = 64;
  out->groups[0] = groups_for(C, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[] = {"LOCAL", fmt(a, "%u", local), "T", fmt(a, "%lld", (long long)T), "C",
                      fmt(a, "%lld", (long long)C), "K", fmt(a, "%lld", (long long)K),
                      "BUFFERS", buffers(n, a), "BIAS", n->nargs > 3 ? "b4.v[c]" : "0.0", NULL};
  return expand(n, a, "conv1d", fmt(a, "T=%lld C=%lld K=%lld bias=%d", (long long)T,
                                    (long long)C, (long long)K, n->nargs > 3), kv, out);
}

static ssm_status gen_scan(const ssm_node *n, ssm_arena *a, ssm_cg_kernel *out) {
  const ssm_type *h = &n->args[3]->type;
  int rank = h->rank + 1; /* [T, S.., N] */
  int64_t T = n->result->type.dims[0], N = h->dims[h->rank - 1];
  int64_t S = ssm_type_numel(h) / N;
  int64_t st[3][SSM_MAX_RANK];
  for (int k = 0; k < 3; k++) bcast_strides(&n->args[k]->type, rank, st[k]);
  /* coordinates of row s over the S dims (1 .. rank-2) */
  sbuf base = {0};
  sb_printf(&base, "  uint r_ = s;\n");
  for (int d = rank - 2; d >= 1; d--) {
    if (d > 1)
      sb_printf(&base, "  uint c%d = r_ %% %lldu; r_ /= %lldu;\n", d,
                (long long)h->dims[d - 1], (long long)h->dims[d - 1]);
    else sb_printf(&base, "  uint c1 = r_;\n");
  }
  static const char *names[3] = {"a0", "b0_", "c0"};
  for (int k = 0; k < 3; k++) {
    int64_t mid[SSM_MAX_RANK] = {0};
    for (int d = 1; d <= rank - 2; d++) mid[d] = st[k][d];
    sb_printf(&base, "  uint %s = ", names[k]);
    emit_dot(&base, rank - 1, mid, 0);
    sb_printf(&base, ";\n");
  }
  uint32_t local = 64;
  out->groups[0] = groups_for(S, local);
  out->groups[1] = out->groups[2] = 1;
  const char *kv[] = {"LOCAL", fmt(a, "%u", local), "T", fmt(a, "%lld", (long long)T), "S",
                      fmt(a, "%lld", (long long)S), "N", fmt(a, "%lld", (long long)N),
                      "BUFFERS", buffers(n, a), "BASE", sb_take(&base, a),
                      "TSTRIDE_A", fmt(a, "%lld", (long long)st[0][0]),
                      "TSTRIDE_B", fmt(a, "%lld", (long long)st[1][0]),
                      "TSTRIDE_C", fmt(a, "%lld", (long long)st[2][0]),
                      "NSTRIDE_A", fmt(a, "%lld", (long long)st[0][rank - 1]),
                      "NSTRIDE_B", fmt(a, "%lld", (long long)st[1][rank - 1]),
                      "NSTRIDE_C", fmt(a, "%lld", (long long)st[2][rank - 1]), NULL};
  return expand(n, a, "scan", fmt(a, "T=%lld S=%lld N=%lld", (long long)T, (long long)S,
                                  (long long)N), kv, out);
}

/* ---- dispatch by op ---------------------------------------------------- */

ssm_status ssm_cg_kernel_for_node(const ssm_node *n, ssm_arena *a, ssm_cg_kernel *out) {
  *out = (ssm_cg_kernel){0};
  for (int i = 0; i < n->nargs; i++)
    if (n->args[i]->type.dtype != SSM_F32 && n->args[i]->type.dtype != SSM_I32)
      return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: %s operands have no GPU kernel yet",
                            ssm_op_info_get(n->op)->name,
                            ssm_dtype_name(n->args[i]->type.dtype));
  switch (ssm_op_info_get(n->op)->kind) {
  case SSM_KIND_UNARY:
  case SSM_KIND_BINARY: return gen_elementwise(n, a, out);
  default: break;
  }
  switch (n->op) {
  case SSM_OP_EMBED: return gen_embed(n, a, out);
  case SSM_OP_MATMUL: return gen_matmul(n, a, out);
  case SSM_OP_RMSNORM:
  case SSM_OP_SOFTMAX:
  case SSM_OP_ARGMAX: return gen_rowreduce(n, a, out);
  case SSM_OP_REDUCE: return gen_reduce(n, a, out);
  case SSM_OP_SLICE:
  case SSM_OP_CONCAT:
  case SSM_OP_TRANSPOSE: return gen_copy(n, a, out);
  case SSM_OP_CONV1D: return gen_conv1d(n, a, out);
  case SSM_OP_SCAN: return gen_scan(n, a, out);
  default:
    return ssm_status_new(SSM_ERR_INTERNAL, "op %s has no kernel generator",
                          ssm_op_info_get(n->op)->name);
  }
}
