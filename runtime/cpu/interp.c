/*
 * cpu.c — the CPU reference interpreter of the op IR.
 *
 * This is the yardstick the GPU kernels are tested against, so every op is
 * the plainest loop that states its meaning (ops.def), in f32 storage with
 * double arithmetic inside each element and double accumulation in every
 * sum. A run numbers the graph, gives each value one buffer of 4-byte
 * elements (float, or int32_t for i32 values), walks the nodes in order and
 * gives each buffer back after its last use. Buffers given back are kept as
 * spares and taken again, zeroed, by the next value of the same size (a
 * decode step of a small model makes a few hundred of them, and a fresh
 * calloc for each was most of what a served request allocated); a spare that
 * two runs in a row did not take is freed.
 *
 * The interpreter object keeps what outlives a run: weights converted to f32
 * (read on first use, keyed by name, transform and declared type) and state
 * tensors by name (zero at first use, shared by every graph run on it, updated
 * in place by conv1d_causal, scan and attention), and the position: the
 * number of tokens run since the last reset, fed to the input "pos".
 *
 * Shapes are trusted to be verified; the asserts only make sure that an
 * unverified graph cannot make a loop read or write outside a buffer.
 */
#include "runtime/cpu/cpu.h"

#include <math.h>
#include <string.h>

/* A tensor that outlives runs: a converted weight or a state. */
typedef struct {
  char *name;
  char *transform; /* weights: "" when none; states: "" */
  ssm_type type;   /* as the node declares it */
  float *data;     /* numel elements (int32_t for an i32 state) */
} cpu_tensor;

typedef SSM_VEC(cpu_tensor) cpu_tensor_list;

/* A run's buffer given back: `bytes` long, last given back by run `run`. */
typedef struct {
  void *data;
  size_t bytes;
  uint64_t run;
} cpu_spare;

typedef SSM_VEC(cpu_spare) cpu_spare_list;

struct ssm_cpu {
  const ssm_st *weights;
  cpu_tensor_list weight_cache;
  cpu_tensor_list states;
  int64_t position; /* tokens run since the last reset: the next run's input "pos" */
  const int64_t *row_pos; /* a batched graph's positions, one a row (NULL: none given) */
  int64_t nrow_pos;
  cpu_spare_list spares;
  uint64_t runs; /* runs started: stamps the spares */
  /* a run's bookkeeping by value id, kept for the next run */
  struct cpu_buf *bufs;
  int *last_use;
  size_t nscratch; /* the entries of both */
  /* a matmul's x as its products take it and each row's factor
   * (x_operand), kept for the next matmul */
  float *mm_x;
  double *mm_scale;
  size_t mm_x_cap, mm_scale_cap; /* elements */
};

/* ---- persistent tensors -------------------------------------------------- */

static void tensor_list_free(cpu_tensor_list *l) {
  for (size_t i = 0; i < l->n; i++) {
    free(l->items[i].name);
    free(l->items[i].transform);
    free(l->items[i].data);
  }
  ssm_vec_free(l);
}

/* Takes ownership of `data` (freed when this fails). */
static ssm_status tensor_list_add(cpu_tensor_list *l, const char *name, const char *transform,
                                  const ssm_type *type, float *data) {
  cpu_tensor t = {NULL, NULL, *type, data};
  ssm_status s = ssm_strdup(name, "a tensor's name", &t.name);
  if (!s) s = ssm_strdup(transform, "a tensor's transform", &t.transform);
  if (!s) s = ssm_status_wrap(ssm_vec_push(l, t), "the CPU backend's tensors");
  if (s) {
    free(t.name);
    free(t.transform);
    free(data);
  }
  return s;
}

/* Zeroed storage for `count` 4-byte elements (at least one). */
static ssm_status alloc_elems(int64_t count, void **out) {
  *out = NULL;
  if (count < 0)
    return ssm_status_new(SSM_ERR_NOMEM, "tensor of %lld elements is too large",
                          (long long)count);
  return ssm_alloc(count ? (size_t)count : 1, 4, out);
}

ssm_status ssm_cpu_create(const ssm_st *weights, ssm_cpu **out) {
  *out = NULL;
  ssm_cpu *c;
  SSM_TRY(ssm_status_wrap(ssm_alloc(1, sizeof *c, (void **)&c), "the CPU interpreter"));
  c->weights = weights;
  *out = c;
  return NULL;
}

void ssm_cpu_destroy(ssm_cpu *c) {
  if (!c) return;
  tensor_list_free(&c->weight_cache);
  tensor_list_free(&c->states);
  for (size_t i = 0; i < c->spares.n; i++) free(c->spares.items[i].data);
  ssm_vec_free(&c->spares);
  free(c->bufs);
  free(c->last_use);
  free(c->mm_x);
  free(c->mm_scale);
  free(c);
}

void ssm_cpu_reset(ssm_cpu *c) {
  c->position = 0;
  for (size_t i = 0; i < c->states.n; i++) {
    cpu_tensor *t = &c->states.items[i];
    if (strncmp(t->name, SSM_SLOTS_PREFIX, strlen(SSM_SLOTS_PREFIX))) /* the slots stay */
      memset(t->data, 0, (size_t)ssm_type_numel(&t->type) * 4);
  }
}

int64_t ssm_cpu_position(const ssm_cpu *c) { return c->position; }

/* Rounds every element to what `dtype` can hold (f16/bf16 values). */
static void round_to_dtype(float *x, int64_t n, ssm_dtype dtype) {
  for (int64_t i = 0; i < n; i++) {
    if (dtype == SSM_BF16) x[i] = ssm_bf16_to_f32(ssm_f32_to_bf16(x[i]));
    if (dtype == SSM_F16) x[i] = ssm_f16_to_f32(ssm_f32_to_f16(x[i]));
  }
}

/* Reads the checkpoint tensor at the node's declared dtype, widens it to f32,
 * then applies the node's transform (rounded back to the declared dtype). */
static ssm_status weight_read(const ssm_cpu *c, const char *name,
                              const char *transform, const ssm_type *type,
                              float *dst) {
  int64_t n = ssm_type_numel(type);
  if (!c->weights)
    return ssm_status_new(SSM_ERR_INVALID,
                          "weight '%s' is needed but no checkpoint was given", name);
  if (type->dtype == SSM_F32) {
    SSM_TRY(ssm_st_read(c->weights, name, type, dst));
  } else if (type->dtype == SSM_F16 || type->dtype == SSM_BF16) {
    void *mem;
    SSM_TRY(ssm_status_wrap(ssm_alloc(n ? (size_t)n : 1, 2, &mem), "weight '%s'", name));
    uint16_t *half = mem;
    ssm_status s = ssm_st_read(c->weights, name, type, half);
    for (int64_t i = 0; !s && i < n; i++)
      dst[i] = type->dtype == SSM_F16 ? ssm_f16_to_f32(half[i]) : ssm_bf16_to_f32(half[i]);
    free(half);
    SSM_TRY(s);
  } else if (ssm_dtype_is_quant(type->dtype)) {
    ssm_qlayout l = ssm_qlayout_of(type);
    void *mem;
    SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)l.bytes, 1, &mem), "weight '%s'", name));
    ssm_status s = ssm_st_read(c->weights, name, type, mem);
    for (int64_t i = 0; !s && i < n; i++) dst[i] = ssm_qvalue(mem, &l, i);
    free(mem);
    SSM_TRY(s);
  } else {
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "weight '%s': %s weights are not supported",
                          name, ssm_dtype_name(type->dtype));
  }
  if (transform[0]) {
    SSM_TRY(ssm_status_wrap(ssm_weight_transform(transform, dst, (size_t)n), "weight '%s'",
                            name));
    round_to_dtype(dst, n, type->dtype);
  }
  return NULL;
}

static ssm_status weight_get(ssm_cpu *c, const ssm_node *n, void **out) {
  const char *name = ssm_node_str(n, "name", "");
  const char *transform = ssm_node_str(n, "transform", "");
  const ssm_type *type = &n->result->type;
  for (size_t i = 0; i < c->weight_cache.n; i++) {
    cpu_tensor *t = &c->weight_cache.items[i];
    if (!strcmp(t->name, name) && !strcmp(t->transform, transform) &&
        ssm_type_equal(&t->type, type)) {
      *out = t->data;
      return NULL;
    }
  }
  if (c->weights) SSM_TRY(ssm_st_check(c->weights, name, type)); /* before allocating */
  void *data;
  SSM_TRY(ssm_status_wrap(alloc_elems(ssm_type_numel(type), &data), "weight '%s'", name));
  ssm_status s = weight_read(c, name, transform, type, data);
  if (s) {
    free(data);
    return s;
  }
  SSM_TRY(tensor_list_add(&c->weight_cache, name, transform, type, data));
  *out = data;
  return NULL;
}

static ssm_status state_get(ssm_cpu *c, const ssm_node *n, void **out) {
  return ssm_cpu_state(c, ssm_node_str(n, "name", ""), &n->result->type, (float **)out);
}

void ssm_cpu_set_position(ssm_cpu *c, int64_t position) { c->position = position; }

void ssm_cpu_set_row_positions(ssm_cpu *c, const int64_t *pos, int64_t rows) {
  c->row_pos = pos;
  c->nrow_pos = pos ? rows : 0;
}

ssm_status ssm_cpu_state(ssm_cpu *c, const char *name, const ssm_type *type, float **out_f) {
  void **out = (void **)out_f;
  for (size_t i = 0; i < c->states.n; i++) {
    cpu_tensor *t = &c->states.items[i];
    if (strcmp(t->name, name)) continue;
    if (!ssm_type_equal(&t->type, type)) {
      char a[96], b[96];
      return ssm_status_new(SSM_ERR_INVALID,
                            "state '%s' is declared %s here but %s earlier", name,
                            ssm_type_format(type, a, sizeof a),
                            ssm_type_format(&t->type, b, sizeof b));
    }
    *out = t->data;
    return NULL;
  }
  void *data;
  SSM_TRY(ssm_status_wrap(alloc_elems(ssm_type_numel(type), &data), "state '%s'", name));
  SSM_TRY(tensor_list_add(&c->states, name, "", type, data));
  *out = data;
  return NULL;
}

/* ---- a run's buffers ------------------------------------------------------ */

static size_t elems_bytes(int64_t count) { return (size_t)(count ? count : 1) * 4; }

/* Zeroed storage for `count` elements: a spare of that size, or fresh. */
static ssm_status take_elems(ssm_cpu *c, int64_t count, void **out) {
  for (size_t i = 0; count >= 0 && i < c->spares.n; i++)
    if (c->spares.items[i].bytes == elems_bytes(count)) {
      *out = c->spares.items[i].data;
      c->spares.items[i] = c->spares.items[--c->spares.n];
      memset(*out, 0, elems_bytes(count));
      return NULL;
    }
  return ssm_status_wrap(alloc_elems(count, out), "a tensor of %lld elements", (long long)count);
}

/* Keeps `data` for a later take_elems; frees it when the list of spares
 * cannot grow. */
static ssm_status give_elems(ssm_cpu *c, void *data, int64_t count) {
  ssm_status s = ssm_vec_push(&c->spares, ((cpu_spare){data, elems_bytes(count), c->runs}));
  if (s) free(data);
  return ssm_status_wrap(s, "the CPU backend's spare buffers");
}

/* Frees the spares that neither this run nor the one before took. */
static void drop_stale_spares(ssm_cpu *c) {
  for (size_t i = 0; i < c->spares.n;)
    if (c->spares.items[i].run + 1 < c->runs) {
      free(c->spares.items[i].data);
      c->spares.items[i] = c->spares.items[--c->spares.n];
    } else {
      i++;
    }
}

typedef struct cpu_buf {
  void *data;
  int owned; /* 0 for weights and states, which the interpreter keeps */
} cpu_buf;

typedef struct {
  ssm_cpu *c;
  const int32_t *tokens;
  const ssm_node *output; /* the first output node */
  int nouts;              /* its operands copied out: outs[i] (NULL: skipped) */
  float *const *outs;
  const size_t *counts;
  cpu_buf *bufs; /* by value id */
} cpu_run;

static float *fbuf(const cpu_run *r, const ssm_value *v) {
  SSM_ASSERT(v->type.dtype != SSM_I32 && r->bufs[v->id].data);
  return r->bufs[v->id].data;
}

static int32_t *ibuf(const cpu_run *r, const ssm_value *v) {
  SSM_ASSERT(v->type.dtype == SSM_I32 && r->bufs[v->id].data);
  return r->bufs[v->id].data;
}

/* Either kind of element, for ops that only move data. */
static uint32_t *rawbuf(const cpu_run *r, const ssm_value *v) {
  SSM_ASSERT(r->bufs[v->id].data);
  return r->bufs[v->id].data;
}

static int64_t numel(const ssm_value *v) { return ssm_type_numel(&v->type); }
static int64_t dim(const ssm_value *v, int i) {
  SSM_ASSERT(i >= 0 && i < v->type.rank);
  return v->type.dims[i];
}
static int64_t last_dim(const ssm_value *v) { return dim(v, v->type.rank - 1); }

/* Product of dims [lo, hi). */
static int64_t dims_product(const ssm_type *t, int lo, int hi) {
  int64_t p = 1;
  for (int i = lo; i < hi; i++) p *= t->dims[i];
  return p;
}

/* ---- broadcasting ---------------------------------------------------------- */

#define BCAST_MAX_RANK (SSM_MAX_RANK + 1) /* scan's [T,S..,N] has one more */
#define BCAST_MAX_OPS 3

/* Numpy broadcasting of up to three operands to one output shape: operand
 * dims are aligned from the right; a missing or size-1 dim gets stride 0. */
typedef struct {
  int rank, nops;
  int64_t dims[BCAST_MAX_RANK];
  int64_t strides[BCAST_MAX_OPS][BCAST_MAX_RANK];
} bcast;

static void bcast_init(bcast *b, int rank, const int64_t *dims, int nops,
                       const ssm_type *const *ops) {
  SSM_ASSERT(rank <= BCAST_MAX_RANK && nops <= BCAST_MAX_OPS);
  *b = (bcast){.rank = rank, .nops = nops};
  for (int d = 0; d < rank; d++) b->dims[d] = dims[d];
  for (int k = 0; k < nops; k++) {
    int off = rank - ops[k]->rank;
    SSM_ASSERT(off >= 0);
    int64_t stride = 1;
    for (int d = rank - 1; d >= off; d--) {
      int64_t od = ops[k]->dims[d - off];
      SSM_ASSERT(od == dims[d] || od == 1);
      b->strides[k][d] = od == 1 ? 0 : stride;
      stride *= od;
    }
  }
}

/* The linear index into each operand for output linear index `i`. */
static void bcast_index(const bcast *b, int64_t i, int64_t *out_idx) {
  for (int k = 0; k < b->nops; k++) out_idx[k] = 0;
  for (int d = b->rank - 1; d >= 0; d--) {
    int64_t coord = i % b->dims[d];
    i /= b->dims[d];
    for (int k = 0; k < b->nops; k++) out_idx[k] += coord * b->strides[k][d];
  }
}

/* ---- elementwise ----------------------------------------------------------- */

static void op_binary(const cpu_run *r, const ssm_node *n) {
  const ssm_value *y = n->result;
  const ssm_type *ops[2] = {&n->args[0]->type, &n->args[1]->type};
  bcast b;
  bcast_init(&b, y->type.rank, y->type.dims, 2, ops);
  const float *a = fbuf(r, n->args[0]), *c = fbuf(r, n->args[1]);
  float *dst = fbuf(r, y);
  int64_t idx[2];
  for (int64_t i = 0; i < numel(y); i++) {
    bcast_index(&b, i, idx);
    dst[i] = (float)ssm_binary_eval(n->op, a[idx[0]], c[idx[1]]);
  }
}

static void op_unary(const cpu_run *r, const ssm_node *n) {
  SSM_ASSERT(numel(n->args[0]) == numel(n->result));
  const float *x = fbuf(r, n->args[0]);
  float *y = fbuf(r, n->result);
  for (int64_t i = 0; i < numel(n->result); i++)
    y[i] = (float)ssm_unary_eval(n->op, x[i]); /* as load-time transforms compute it */
}

/* ---- sources ---------------------------------------------------------------- */

static ssm_status op_input(const cpu_run *r, const ssm_node *n) {
  const char *name = ssm_node_str(n, "name", "");
  if (!strcmp(name, "pos")) {
    const ssm_cpu *c = r->c;
    int64_t rows = c->row_pos ? c->nrow_pos : 1;
    if (n->result->type.dtype != SSM_I32 || numel(n->result) != rows)
      return ssm_status_new(SSM_ERR_INVALID, "input \"pos\" must be i32[%lld]%s", (long long)rows,
                            c->row_pos ? " (a position a row of the batched run)" : "");
    for (int64_t t = 0; t < rows; t++)
      ibuf(r, n->result)[t] = (int32_t)(c->row_pos ? c->row_pos[t] : c->position);
    return NULL;
  }
  if (strcmp(name, "tokens"))
    return ssm_status_new(SSM_ERR_INVALID,
                          "unknown input '%s' (inputs are \"tokens\" and \"pos\")", name);
  if (!r->tokens)
    return ssm_status_new(SSM_ERR_INVALID, "the graph reads tokens but none were given");
  if (n->result->type.dtype == SSM_I32) {
    memcpy(ibuf(r, n->result), r->tokens, (size_t)numel(n->result) * 4);
  } else {
    float *y = fbuf(r, n->result);
    for (int64_t i = 0; i < numel(n->result); i++) y[i] = (float)r->tokens[i];
  }
  return NULL;
}

static void op_const(const cpu_run *r, const ssm_node *n) {
  double v = ssm_node_float(n, "value", 0);
  if (n->result->type.dtype == SSM_I32) {
    for (int64_t i = 0; i < numel(n->result); i++) ibuf(r, n->result)[i] = (int32_t)v;
  } else {
    for (int64_t i = 0; i < numel(n->result); i++) fbuf(r, n->result)[i] = (float)v;
  }
}

/* ---- linear algebra and norms ---------------------------------------------- */

static ssm_status op_embed(const cpu_run *r, const ssm_node *n) {
  const ssm_value *table = n->args[0], *ids = n->args[1];
  SSM_ASSERT(table->type.rank == 2);
  int64_t vocab = dim(table, 0), hidden = dim(table, 1);
  SSM_ASSERT(numel(n->result) == numel(ids) * hidden);
  const float *tab = fbuf(r, table);
  const int32_t *id = ibuf(r, ids);
  float *y = fbuf(r, n->result);
  for (int64_t t = 0; t < numel(ids); t++) {
    if (id[t] < 0 || id[t] >= vocab)
      return ssm_status_new(SSM_ERR_INVALID, "token id %d out of range [0, %lld)",
                            (int)id[t], (long long)vocab);
    memcpy(y + t * hidden, tab + id[t] * hidden, (size_t)hidden * sizeof(float));
  }
  return NULL;
}

/* Whether `v` has no use but `user`. */
static int sole_use(const ssm_node *user, const ssm_value *v) {
  const ssm_node *n = user;
  while (n->prev) n = n->prev;
  for (; n; n = n->next)
    for (int i = 0; i < n->nargs; i++)
      if (n->args[i] == v && n != user) return 0;
  return 1;
}

/* The rmsnorm whose input times gain matmul or matmul_sel `mm` rounds
 * (ops.def): mm's x where mm's weight is 16-bit and x is an rmsnorm's
 * result that only mm uses; else NULL. */
static const ssm_node *rounded_norm(const ssm_node *mm) {
  const ssm_node *d = mm->args[0]->def;
  return ssm_dtype_rounds_x(mm->args[1]->type.dtype) && d->op == SSM_OP_RMSNORM &&
                 sole_use(mm, mm->args[0])
             ? d
             : NULL;
}

/* The x of matmul or matmul_sel `mm` as its products take it (ops.def),
 * `rows` rows of k into *out_x, with each row's factor for the sums into
 * *out_scale (both the backend's, valid until the next matmul): x and 1;
 * where the weight is 16-bit, x rounded (ssm_round_x16), or where x is an
 * rmsnorm's result that only mm uses, the norm's input times its gain
 * rounded, and the norm's scale. */
static ssm_status x_operand(const cpu_run *r, const ssm_node *mm, int64_t rows, int64_t k,
                            float **out_x, double **out_scale) {
  const ssm_value *xv = mm->args[0];
  ssm_cpu *c = r->c;
  size_t n = (size_t)(rows * k), nr = (size_t)rows;
  if (n > c->mm_x_cap) {
    SSM_TRY(ssm_realloc((void **)&c->mm_x, n, sizeof *c->mm_x, "a matmul's x"));
    c->mm_x_cap = n;
  }
  if (nr > c->mm_scale_cap) {
    SSM_TRY(ssm_realloc((void **)&c->mm_scale, nr, sizeof *c->mm_scale, "a matmul's x"));
    c->mm_scale_cap = nr;
  }
  *out_x = c->mm_x;
  *out_scale = c->mm_scale;
  const float *x = fbuf(r, xv);
  int round = ssm_dtype_rounds_x(mm->args[1]->type.dtype);
  const ssm_node *norm = rounded_norm(mm);
  if (!norm) {
    for (size_t i = 0; i < n; i++) (*out_x)[i] = round ? ssm_round_x16(x[i]) : x[i];
    for (int64_t m = 0; m < rows; m++) (*out_scale)[m] = 1;
    return NULL;
  }
  const float *in = fbuf(r, norm->args[0]), *g = norm->nargs > 1 ? fbuf(r, norm->args[1]) : NULL;
  double eps = ssm_node_float(norm, "eps", 0);
  for (int64_t m = 0; m < rows; m++) {
    const float *xr = in + m * k;
    double ss = 0;
    for (int64_t i = 0; i < k; i++) ss += (double)xr[i] * xr[i];
    (*out_scale)[m] = 1 / sqrt(ss / (double)k + eps);
    for (int64_t i = 0; i < k; i++) (*out_x)[m * k + i] = ssm_round_x16(g ? xr[i] * g[i] : xr[i]);
  }
  return NULL;
}

/* y = x . w^T, double sums. */
static ssm_status op_matmul(const cpu_run *r, const ssm_node *n) {
  const ssm_value *xv = n->args[0], *wv = n->args[1];
  SSM_ASSERT(wv->type.rank == 2);
  int64_t nout = dim(wv, 0), k = dim(wv, 1);
  SSM_ASSERT(last_dim(xv) == k && last_dim(n->result) == nout);
  int64_t rows = k ? numel(xv) / k : 0;
  SSM_ASSERT(numel(n->result) == rows * nout);
  const float *w = fbuf(r, wv);
  float *y = fbuf(r, n->result), *x;
  double *scale;
  SSM_TRY(x_operand(r, n, rows, k, &x, &scale));
  for (int64_t m = 0; m < rows; m++) {
    const float *xr = x + m * k;
    for (int64_t j = 0; j < nout; j++) {
      const float *wr = w + j * k;
      double acc = 0;
      for (int64_t i = 0; i < k; i++) acc += (double)xr[i] * wr[i];
      y[m * nout + j] = (float)(acc * scale[m]);
    }
  }
  return NULL;
}

/* y[t,j,:] = x[t,(j),:] . w[idx[t,j]]^T, double sums. */
static ssm_status op_matmul_sel(const cpu_run *r, const ssm_node *n) {
  const ssm_value *xv = n->args[0], *wv = n->args[1], *iv = n->args[2];
  SSM_ASSERT(wv->type.rank == 3 && iv->type.rank == 2);
  int64_t experts = dim(wv, 0), nout = dim(wv, 1), k = dim(wv, 2);
  int64_t steps = dim(iv, 0), picks = dim(iv, 1), xrows = xv->type.rank == 3 ? picks : 1;
  SSM_ASSERT(last_dim(xv) == k && numel(xv) == steps * xrows * k &&
             numel(n->result) == steps * picks * nout);
  const float *w = fbuf(r, wv);
  const int32_t *idx = ibuf(r, iv);
  float *y = fbuf(r, n->result), *x;
  double *scale;
  SSM_TRY(x_operand(r, n, steps * xrows, k, &x, &scale));
  ssm_status s = NULL;
  for (int64_t t = 0; t < steps && !s; t++)
    for (int64_t j = 0; j < picks && !s; j++) {
      int32_t e = idx[t * picks + j];
      if (e < 0 || e >= experts) {
        s = ssm_status_new(SSM_ERR_INVALID, "expert index %d out of range [0, %lld)", (int)e,
                           (long long)experts);
        break;
      }
      int64_t row = t * xrows + (xrows > 1 ? j : 0);
      const float *xr = x + row * k;
      for (int64_t o = 0; o < nout; o++) {
        const float *wr = w + (e * nout + o) * k;
        double acc = 0;
        for (int64_t i = 0; i < k; i++) acc += (double)xr[i] * wr[i];
        y[(t * picks + j) * nout + o] = (float)(acc * scale[row]);
      }
    }
  return s;
}

static ssm_status op_reduce(const cpu_run *r, const ssm_node *n) {
  const ssm_value *xv = n->args[0];
  const char *kind = ssm_node_str(n, "kind", "");
  int axis = (int)ssm_node_int(n, "axis", -1);
  SSM_ASSERT(axis >= 0 && axis < xv->type.rank);
  int is_sum = !strcmp(kind, "sum"), is_mean = !strcmp(kind, "mean");
  if (!is_sum && !is_mean && strcmp(kind, "max"))
    return ssm_status_new(SSM_ERR_INVALID, "unknown reduce kind '%s' (sum, mean, max)", kind);
  int64_t outer = dims_product(&xv->type, 0, axis), len = dim(xv, axis);
  int64_t inner = dims_product(&xv->type, axis + 1, xv->type.rank);
  SSM_ASSERT(numel(n->result) == outer * inner);
  const float *x = fbuf(r, xv);
  float *y = fbuf(r, n->result);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const float *p = x + o * len * inner + i;
      double acc = is_sum || is_mean ? 0 : -INFINITY;
      for (int64_t j = 0; j < len; j++)
        acc = is_sum || is_mean ? acc + p[j * inner] : fmax(acc, p[j * inner]);
      if (is_mean) acc /= (double)len;
      y[o * inner + i] = (float)acc;
    }
  return NULL;
}

static void op_rmsnorm(const cpu_run *r, const ssm_node *n) {
  const ssm_value *xv = n->args[0];
  int64_t width = last_dim(xv), rows = width ? numel(xv) / width : 0;
  SSM_ASSERT(numel(n->result) == numel(xv));
  const float *w = NULL;
  if (n->nargs > 1) {
    SSM_ASSERT(numel(n->args[1]) == width);
    w = fbuf(r, n->args[1]);
  }
  double eps = ssm_node_float(n, "eps", 0);
  const float *x = fbuf(r, xv);
  float *y = fbuf(r, n->result);
  for (int64_t m = 0; m < rows; m++) {
    const float *xr = x + m * width;
    double ss = 0;
    for (int64_t i = 0; i < width; i++) ss += (double)xr[i] * xr[i];
    double scale = 1 / sqrt(ss / (double)width + eps);
    for (int64_t i = 0; i < width; i++)
      y[m * width + i] = (float)(xr[i] * scale * (w ? w[i] : 1.0));
  }
}

/* ---- data movement (f32 or i32: 4-byte elements) -------------------------- */

static void op_slice(const cpu_run *r, const ssm_node *n) {
  const ssm_value *xv = n->args[0];
  int axis = (int)ssm_node_int(n, "axis", -1);
  int64_t start = ssm_node_int(n, "start", 0), len = ssm_node_int(n, "len", 0);
  SSM_ASSERT(axis >= 0 && axis < xv->type.rank);
  int64_t full = dim(xv, axis);
  SSM_ASSERT(start >= 0 && len >= 0 && start + len <= full);
  int64_t outer = dims_product(&xv->type, 0, axis);
  int64_t inner = dims_product(&xv->type, axis + 1, xv->type.rank);
  SSM_ASSERT(numel(n->result) == outer * len * inner);
  const uint32_t *x = rawbuf(r, xv);
  uint32_t *y = rawbuf(r, n->result);
  for (int64_t o = 0; o < outer; o++)
    memcpy(y + o * len * inner, x + (o * full + start) * inner,
           (size_t)(len * inner) * 4);
}

static void op_concat(const cpu_run *r, const ssm_node *n) {
  const ssm_type *yt = &n->result->type;
  int axis = (int)ssm_node_int(n, "axis", -1);
  SSM_ASSERT(axis >= 0 && axis < yt->rank);
  int64_t outer = dims_product(yt, 0, axis), inner = dims_product(yt, axis + 1, yt->rank);
  int64_t total = 0;
  for (int k = 0; k < n->nargs; k++) total += dim(n->args[k], axis);
  SSM_ASSERT(total == yt->dims[axis]);
  uint32_t *y = rawbuf(r, n->result);
  int64_t at = 0; /* offset along axis */
  for (int k = 0; k < n->nargs; k++) {
    const ssm_value *xv = n->args[k];
    int64_t len = dim(xv, axis);
    SSM_ASSERT(numel(xv) == outer * len * inner);
    const uint32_t *x = rawbuf(r, xv);
    for (int64_t o = 0; o < outer; o++)
      memcpy(y + (o * total + at) * inner, x + o * len * inner, (size_t)(len * inner) * 4);
    at += len;
  }
}

static void op_reshape(const cpu_run *r, const ssm_node *n) {
  SSM_ASSERT(numel(n->args[0]) == numel(n->result));
  memcpy(rawbuf(r, n->result), rawbuf(r, n->args[0]), (size_t)numel(n->result) * 4);
}

static void op_transpose(const cpu_run *r, const ssm_node *n) {
  const ssm_type *xt = &n->args[0]->type, *yt = &n->result->type;
  const ssm_attr *perm = ssm_node_attr(n, "perm");
  SSM_ASSERT(perm && perm->kind == SSM_ATTR_INTS && perm->n == yt->rank &&
             xt->rank == yt->rank);
  int rank = yt->rank;
  int64_t xstride[SSM_MAX_RANK], stride = 1;
  for (int d = rank - 1; d >= 0; d--) {
    xstride[d] = stride;
    stride *= xt->dims[d];
  }
  int64_t src_stride[SSM_MAX_RANK]; /* x stride of result dim d */
  int seen[SSM_MAX_RANK] = {0};
  for (int d = 0; d < rank; d++) {
    int64_t p = perm->ints[d];
    SSM_ASSERT(p >= 0 && p < rank && !seen[p] && xt->dims[p] == yt->dims[d]);
    seen[p] = 1;
    src_stride[d] = xstride[p];
  }
  const uint32_t *x = rawbuf(r, n->args[0]);
  uint32_t *y = rawbuf(r, n->result);
  for (int64_t i = 0; i < numel(n->result); i++) {
    int64_t rest = i, src = 0;
    for (int d = rank - 1; d >= 0; d--) {
      src += rest % yt->dims[d] * src_stride[d];
      rest /= yt->dims[d];
    }
    y[i] = x[src];
  }
}

/* ---- the recurrent ops ---------------------------------------------------------- */

/* xin = concat(state, x) along time; y[t,c] = bias[c] + sum_k w[c,k]*xin[t+k,c];
 * the state becomes the last K-1 rows of xin. */
/* One sequence's steps: y[t,c] over the window [state; x], and the state
 * then the last kw-1 inputs; xin holds (kw-1+steps)*chans floats. */
static void conv1d_seq(float *state, const float *x, int64_t steps, int64_t chans, int64_t kw,
                       const float *w, const float *bias, float *y, float *xin) {
  memcpy(xin, state, (size_t)((kw - 1) * chans) * sizeof(float));
  memcpy(xin + (kw - 1) * chans, x, (size_t)(steps * chans) * sizeof(float));
  for (int64_t t = 0; t < steps; t++)
    for (int64_t c = 0; c < chans; c++) {
      double acc = bias ? bias[c] : 0;
      for (int64_t k = 0; k < kw; k++) acc += (double)w[c * kw + k] * xin[(t + k) * chans + c];
      y[t * chans + c] = (float)acc;
    }
  memcpy(state, xin + steps * chans, (size_t)((kw - 1) * chans) * sizeof(float));
}

/* batch=1: row t of x is one step of sequence t, whose state is row t of
 * the [T,K-1,C] state. */
static ssm_status op_conv1d(const cpu_run *r, const ssm_node *n) {
  const ssm_value *xv = n->args[0], *sv = n->args[1], *wv = n->args[2];
  int batch = ssm_node_int(n, "batch", 0) != 0;
  SSM_ASSERT(xv->type.rank == 2 && sv->type.rank == 2 + batch && wv->type.rank == 2);
  int64_t steps = dim(xv, 0), chans = dim(xv, 1), kw = dim(wv, 1);
  SSM_ASSERT(kw >= 1 && dim(wv, 0) == chans && dim(sv, batch) == kw - 1 && dim(sv, 1 + batch) == chans);
  SSM_ASSERT(numel(n->result) == steps * chans && (!batch || dim(sv, 0) == steps));
  const float *bias = NULL;
  if (n->nargs > 3) {
    SSM_ASSERT(numel(n->args[3]) == chans);
    bias = fbuf(r, n->args[3]);
  }
  int64_t span = batch ? 1 : steps;
  void *mem;
  SSM_TRY(take_elems(r->c, (kw - 1 + span) * chans, &mem));
  float *state = fbuf(r, sv), *y = fbuf(r, n->result);
  const float *x = fbuf(r, xv), *w = fbuf(r, wv);
  if (!batch)
    conv1d_seq(state, x, steps, chans, kw, w, bias, y, mem);
  else
    for (int64_t t = 0; t < steps; t++)
      conv1d_seq(state + t * (kw - 1) * chans, x + t * chans, 1, chans, kw, w, bias, y + t * chans,
                 mem);
  return give_elems(r->c, mem, (kw - 1 + span) * chans);
}

/* a, b, c broadcast to [T,S..,N]; h[S..,N] is the state:
 * h = a_t*h + b_t, y[t,s..] = sum_n c_t[s..,n]*h[s..,n]. */
static void op_scan(const cpu_run *r, const ssm_node *n) {
  const ssm_value *yv = n->result, *hv = n->args[3];
  /* batch=1: the state has a first dim of T, step t's row */
  int rank = yv->type.rank + 1, batch = ssm_node_int(n, "batch", 0) != 0;
  SSM_ASSERT(yv->type.rank >= 1 && hv->type.rank == yv->type.rank + batch && rank <= BCAST_MAX_RANK);
  SSM_ASSERT(!batch || hv->type.dims[0] == dim(yv, 0));
  int64_t full[BCAST_MAX_RANK];
  full[0] = dim(yv, 0);
  for (int d = 0; d + batch < hv->type.rank; d++) {
    full[d + 1] = hv->type.dims[d + batch];
    if (d + 1 < yv->type.rank) SSM_ASSERT(hv->type.dims[d + batch] == yv->type.dims[d + 1]);
  }
  const ssm_type *ops[3] = {&n->args[0]->type, &n->args[1]->type, &n->args[2]->type};
  bcast b;
  bcast_init(&b, rank, full, 3, ops);
  int64_t steps = full[0], width = last_dim(hv);
  int64_t chans = width ? numel(hv) / width / (batch ? steps : 1) : 0;
  const float *a = fbuf(r, n->args[0]), *bb = fbuf(r, n->args[1]), *c = fbuf(r, n->args[2]);
  float *h = fbuf(r, hv), *y = fbuf(r, yv);
  int64_t idx[3];
  for (int64_t t = 0; t < steps; t++)
    for (int64_t s = 0; s < chans; s++) {
      double acc = 0;
      for (int64_t j = 0; j < width; j++) {
        bcast_index(&b, (t * chans + s) * width + j, idx);
        float *hj = &h[((batch ? t * chans : 0) + s) * width + j];
        *hj = (float)((double)a[idx[0]] * *hj + bb[idx[1]]);
        acc += (double)c[idx[2]] * *hj;
      }
      y[t * chans + s] = (float)acc;
    }
}

/* The delta rule, step by step and head by head (ops.def): the state's
 * rows decay, u = S^T k in double, S += k (beta (v - u))^T, o = S^T q in
 * double. batch=1: step t is a sequence of its own, state row t. */
static void op_delta(const cpu_run *r, const ssm_node *n) {
  const ssm_value *qv = n->args[0], *vv = n->args[2], *gv = n->args[3];
  int64_t steps = dim(qv, 0), hk = dim(qv, 1), dk = dim(qv, 2), h = dim(vv, 1), dv = dim(vv, 2);
  int per_channel = gv->type.rank == 3, batch = ssm_node_int(n, "batch", 0) != 0;
  SSM_ASSERT(hk > 0 && h % hk == 0 && numel(n->args[5]) == (batch ? steps : 1) * h * dk * dv);
  const float *q = fbuf(r, qv), *k = fbuf(r, n->args[1]), *v = fbuf(r, vv), *g = fbuf(r, gv),
              *beta = fbuf(r, n->args[4]);
  float *st = fbuf(r, n->args[5]), *o = fbuf(r, n->result);
  for (int64_t t = 0; t < steps; t++)
    for (int64_t hh = 0; hh < h; hh++) {
      const float *qt = q + (t * hk + hh / (h / hk)) * dk, *kt = k + (t * hk + hh / (h / hk)) * dk;
      const float *vt = v + (t * h + hh) * dv;
      float *s = st + ((batch ? t * h : 0) + hh) * dk * dv, b = beta[t * h + hh];
      for (int64_t i = 0; i < dk; i++) {
        float d = g[per_channel ? (t * h + hh) * dk + i : t * h + hh];
        for (int64_t j = 0; j < dv; j++) s[i * dv + j] *= d;
      }
      for (int64_t j = 0; j < dv; j++) {
        double u = 0;
        for (int64_t i = 0; i < dk; i++) u += (double)s[i * dv + j] * kt[i];
        float e = (float)(b * ((double)vt[j] - u));
        double y = 0;
        for (int64_t i = 0; i < dk; i++) {
          s[i * dv + j] += kt[i] * e;
          y += (double)s[i * dv + j] * qt[i];
        }
        o[(t * h + hh) * dv + j] = (float)y;
      }
    }
}

/* Writes k, v [T,Hkv,D] into the caches [MAXS,Hkv,D] at rows pos.., then
 * for each query t (position pos+t) and head h: a max-subtracted softmax of
 * scale*q.k over cache rows 0..pos+t of kv head h/(Hq/Hkv), and the weighted
 * sum of v (only the last `window` rows, window > 0). Double accumulation
 * throughout. With batch=1 row t is a sequence of its own: its token at
 * position pos[t] goes to its caches, [t] of [T,MAXS,Hkv,D], and it attends
 * to them alone. */
static ssm_status op_attention(const cpu_run *r, const ssm_node *n) {
  const ssm_value *qv = n->args[0], *kv = n->args[1], *vv = n->args[2];
  const ssm_value *kcv = n->args[3], *vcv = n->args[4];
  int batch = ssm_node_int(n, "batch", 0) != 0;
  SSM_ASSERT(qv->type.rank == 3 && kv->type.rank == 3 && kcv->type.rank == 3 + batch);
  int64_t steps = dim(qv, 0), hq = dim(qv, 1), d = dim(qv, 2), hkv = dim(kv, 1);
  int64_t maxs = dim(kcv, batch);
  SSM_ASSERT(hkv > 0 && hq % hkv == 0 && dim(kv, 0) == steps && dim(kv, 2) == d);
  SSM_ASSERT(numel(vv) == numel(kv) && numel(vcv) == numel(kcv) && dim(kcv, batch + 1) == hkv &&
             dim(kcv, batch + 2) == d && numel(n->result) == numel(qv));
  const int32_t *posv = ibuf(r, n->args[5]);
  for (int64_t t = 0; t < (batch ? steps : 1); t++) {
    int64_t pos = posv[t], span = batch ? 1 : steps;
    if (pos >= 0 && pos + span <= maxs) continue;
    if (batch)
      return ssm_status_new(SSM_ERR_INVALID, "row %lld: position %lld is past --max-seq %lld",
                            (long long)t, (long long)(pos < maxs ? maxs : pos), (long long)maxs);
    return ssm_status_new(SSM_ERR_INVALID, "position %lld is past --max-seq %lld",
                          (long long)(pos < maxs ? maxs : pos), (long long)maxs);
  }
  const float *q = fbuf(r, qv), *k = fbuf(r, kv), *v = fbuf(r, vv);
  float *kc = fbuf(r, kcv), *vc = fbuf(r, vcv), *y = fbuf(r, n->result);
  int64_t row = hkv * d, cache = maxs * row;
  if (batch) {
    for (int64_t t = 0; t < steps; t++) {
      memcpy(kc + t * cache + posv[t] * row, k + t * row, (size_t)row * sizeof(float));
      memcpy(vc + t * cache + posv[t] * row, v + t * row, (size_t)row * sizeof(float));
    }
  } else {
    memcpy(kc + posv[0] * row, k, (size_t)(steps * row) * sizeof(float));
    memcpy(vc + posv[0] * row, v, (size_t)(steps * row) * sizeof(float));
  }
  double scale = ssm_node_float(n, "scale", 1);
  int64_t window = ssm_node_int(n, "window", 0);
  void *mem;
  /* sized by the cache, not by len, so that every step takes the same spare;
   * doubles: two elements each */
  SSM_TRY(take_elems(r->c, 2 * (maxs + d), &mem));
  double *score = mem, *acc = score + maxs;
  for (int64_t t = 0; t < steps; t++)
    for (int64_t h = 0; h < hq; h++) {
      /* the row's sequence: its caches and the position of its query */
      int64_t base = batch ? t * cache : 0, last = batch ? posv[t] : posv[0] + t;
      int64_t g = h / (hq / hkv);
      int64_t first = window > 0 && last - window + 1 > 0 ? last - window + 1 : 0;
      const float *qr = q + (t * hq + h) * d;
      double mx = -INFINITY, sum = 0;
      for (int64_t j = first; j <= last; j++) {
        const float *kr = kc + base + j * row + g * d;
        double dot = 0;
        for (int64_t i = 0; i < d; i++) dot += (double)qr[i] * kr[i];
        score[j] = scale * dot;
        mx = fmax(mx, score[j]);
      }
      for (int64_t i = 0; i < d; i++) acc[i] = 0;
      for (int64_t j = first; j <= last; j++) {
        double p = exp(score[j] - mx);
        sum += p;
        const float *vr = vc + base + j * row + g * d;
        for (int64_t i = 0; i < d; i++) acc[i] += p * vr[i];
      }
      for (int64_t i = 0; i < d; i++) y[(t * hq + h) * d + i] = (float)(acc[i] / sum);
    }
  return give_elems(r->c, score, 2 * (maxs + d));
}

/* Rotary embedding as transformers computes it: the inverse frequency
 * 1/theta^(2j/dims) and the angle p*inv in f32, then x*cos + rot(x)*sin
 * (rot pairs channel j with j+dims/2, or 2j with 2j+1 when interleaved). */
static void op_rope(const cpu_run *r, const ssm_node *n) {
  const ssm_value *xv = n->args[0];
  SSM_ASSERT(xv->type.rank == 3 && numel(n->result) == numel(xv));
  int64_t steps = dim(xv, 0), heads = dim(xv, 1), d = dim(xv, 2);
  int64_t dims = ssm_node_int(n, "dims", 0), half = dims / 2;
  int il = (int)ssm_node_int(n, "interleaved", 0);
  SSM_ASSERT(dims >= 2 && dims <= d);
  float theta = (float)ssm_node_float(n, "theta", 10000);
  const int32_t *pos = ibuf(r, n->args[1]);
  int batch = ssm_node_int(n, "batch", 0) != 0;
  const float *x = fbuf(r, xv);
  float *y = fbuf(r, n->result);
  for (int64_t t = 0; t < steps; t++)
    for (int64_t h = 0; h < heads; h++) {
      const float *xr = x + (t * heads + h) * d;
      float *yr = y + (t * heads + h) * d;
      memcpy(yr, xr, (size_t)d * sizeof(float));
      for (int64_t j = 0; j < half; j++) {
        float inv = 1.0f / powf(theta, (float)(2 * j) / (float)dims);
        float angle = (float)(batch ? pos[t] : pos[0] + t) * inv;
        double c = cos((double)angle), sn = sin((double)angle);
        int64_t a = il ? 2 * j : j, b = il ? 2 * j + 1 : j + half;
        yr[a] = (float)(xr[a] * c - xr[b] * sn);
        yr[b] = (float)(xr[b] * c + xr[a] * sn);
      }
    }
}

static void op_positions(const cpu_run *r, const ssm_node *n) {
  const int32_t *pos = ibuf(r, n->args[1]);
  int batch = ssm_node_int(n, "batch", 0) != 0;
  float *y = fbuf(r, n->result);
  for (int64_t t = 0; t < numel(n->result); t++) y[t] = (float)(batch ? pos[t] : (int64_t)pos[0] + t);
}

/* ---- last-axis ops ---------------------------------------------------------------- */

/* The k largest of each row by repeated selection: largest first, the lower
 * index first among equals (NaN counts as the largest, as in torch). */
static ssm_status op_topk(const cpu_run *r, const ssm_node *n) {
  const ssm_value *xv = n->args[0];
  int64_t width = last_dim(xv), rows = width ? numel(xv) / width : 0, k = last_dim(n->result);
  SSM_ASSERT(k <= width && numel(n->result) == rows * k);
  const float *x = fbuf(r, xv);
  int32_t *y = ibuf(r, n->result);
  void *mem;
  SSM_TRY(take_elems(r->c, (width + 3) / 4, &mem)); /* bytes, four to an element */
  unsigned char *taken = mem;
  for (int64_t m = 0; m < rows; m++) {
    const float *xr = x + m * width;
    memset(taken, 0, (size_t)width);
    for (int64_t j = 0; j < k; j++) {
      int64_t best = -1;
      for (int64_t i = 0; i < width; i++)
        if (!taken[i] && (best < 0 || isnan(xr[i]) > isnan(xr[best]) ||
                          (!isnan(xr[best]) && xr[i] > xr[best])))
          best = i;
      taken[best] = 1;
      y[m * k + j] = (int32_t)best;
    }
  }
  return give_elems(r->c, taken, (width + 3) / 4);
}

static ssm_status op_gather(const cpu_run *r, const ssm_node *n) {
  const ssm_value *xv = n->args[0], *iv = n->args[1];
  int64_t width = last_dim(xv), k = last_dim(iv), rows = k ? numel(iv) / k : 0;
  SSM_ASSERT(numel(xv) == rows * width && numel(n->result) == rows * k);
  const float *x = fbuf(r, xv);
  const int32_t *idx = ibuf(r, iv);
  float *y = fbuf(r, n->result);
  for (int64_t m = 0; m < rows; m++)
    for (int64_t j = 0; j < k; j++) {
      int32_t i = idx[m * k + j];
      if (i < 0 || i >= width)
        return ssm_status_new(SSM_ERR_INVALID, "gather index %d out of range [0, %lld)", (int)i,
                              (long long)width);
      y[m * k + j] = x[m * width + i];
    }
  return NULL;
}


static void op_softmax(const cpu_run *r, const ssm_node *n) {
  const ssm_value *xv = n->args[0];
  int64_t width = last_dim(xv), rows = width ? numel(xv) / width : 0;
  SSM_ASSERT(numel(n->result) == numel(xv));
  const float *x = fbuf(r, xv);
  float *y = fbuf(r, n->result);
  for (int64_t m = 0; m < rows; m++) {
    const float *xr = x + m * width;
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < width; i++) mx = fmax(mx, xr[i]);
    for (int64_t i = 0; i < width; i++) sum += exp(xr[i] - mx);
    for (int64_t i = 0; i < width; i++) y[m * width + i] = (float)(exp(xr[i] - mx) / sum);
  }
}

static void op_argmax(const cpu_run *r, const ssm_node *n) {
  const ssm_value *xv = n->args[0];
  int64_t width = last_dim(xv), rows = width ? numel(xv) / width : 0;
  SSM_ASSERT(numel(n->result) == rows);
  const float *x = fbuf(r, xv);
  int32_t *y = ibuf(r, n->result);
  for (int64_t m = 0; m < rows; m++) {
    int64_t best = 0;
    for (int64_t i = 1; i < width; i++)
      if (x[m * width + i] > x[m * width + best]) best = i;
    y[m] = (int32_t)best;
  }
}

/* ---- sampling ---------------------------------------------------------------------- */

/* The PCG hash (O'Neill); templates/sample.glsl.in has the same function. */
static uint32_t pcg_hash(uint32_t v) {
  uint32_t state = v * 747796405u + 2891336453u;
  uint32_t word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
  return (word >> 22u) ^ word;
}

/* A float state entry as an integer in [0, hi] (NaN and negatives: 0). */
static uint32_t param_uint(float v, uint32_t hi) {
  if (!(v > 0)) return 0;
  return v >= (float)hi ? hi : (uint32_t)v;
}

double ssm_sample_uniform(uint32_t seed, uint32_t step) {
  return (double)(pcg_hash(pcg_hash(seed) + step) >> 8) / 16777216.0;
}

static int64_t count_ge(const float *x, int64_t n, float t) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++) k += x[i] >= t;
  return k;
}

static double mass_ge(const double *p, int64_t n, double u) {
  double m = 0;
  for (int64_t i = 0; i < n; i++)
    if (p[i] >= u) m += p[i];
  return m;
}

int32_t ssm_sample_row(const float *logits, int64_t n, const float *state, double *out_margin) {
  if (out_margin) *out_margin = INFINITY;
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(logits[i])) return -1;
  int64_t best = 0;
  for (int64_t i = 1; i < n; i++)
    if (logits[i] > logits[best]) best = i;
  float temp = state[0];
  if (!(temp > 0) || n < 2) return (int32_t)best;
  /* the size of the logits row the caller already holds; no status to return, a marker */
  double *p = ssm_malloc_((size_t)n * (sizeof(double) + sizeof(float)));
  if (!p) return SSM_SAMPLE_NOMEM;
  float *x = (float *)(p + n);
  float m = logits[best], xmin = 0;
  for (int64_t i = 0; i < n; i++) {
    float d = logits[i] - m;
    x[i] = (float)((double)d / (double)temp);
    xmin = fminf(xmin, x[i]);
  }
  double margin = INFINITY;
  /* top-k: the largest t with count(x >= t) >= k, by bisection */
  float t = -INFINITY;
  int64_t k = param_uint(state[1], (uint32_t)n);
  if (k > 0 && k < n) {
    float lo = fmaxf(xmin, -3.0e38f), hi = 0;
    if (count_ge(x, n, hi) >= k) {
      lo = hi;
    } else {
      for (int it = 0; it < 32; it++) {
        float mid = lo * 0.5f + hi * 0.5f;
        if (count_ge(x, n, mid) >= k) lo = mid;
        else hi = mid;
      }
    }
    t = lo;
    float below = -INFINITY; /* the largest x left out */
    for (int64_t i = 0; i < n; i++)
      if (x[i] < t && x[i] > below) below = x[i];
    margin = fmin(margin, ((double)t - below) / fmax(fabs((double)t), 1.0));
  }
  double total = 0;
  for (int64_t i = 0; i < n; i++) {
    p[i] = x[i] >= t ? exp((double)x[i]) : 0;
    total += p[i];
  }
  /* top-p: the largest u with mass(p >= u) >= top_p * total, by bisection */
  float u = 0, top_p = state[2];
  if (top_p > 0 && top_p < 1) {
    double target = (double)top_p * total;
    float lo = 0, hi = 1;
    if (mass_ge(p, n, hi) >= target) {
      lo = hi;
      margin = fmin(margin, (mass_ge(p, n, hi) - target) / total);
    } else {
      for (int it = 0; it < 32; it++) {
        float mid = lo * 0.5f + hi * 0.5f;
        if (mass_ge(p, n, mid) >= target) lo = mid;
        else hi = mid;
      }
      double gap = fmin(mass_ge(p, n, lo) - target, target - mass_ge(p, n, hi));
      margin = fmin(margin, gap / total);
    }
    u = lo;
  }
  /* min-p: p, exp(x), is the probability over the likeliest's (x is 0 there) */
  float min_p = state[5];
  if (min_p > 0) {
    u = fmaxf(u, min_p);
    for (int64_t i = 0; i < n; i++)
      if (p[i] > 0) margin = fmin(margin, fabs(p[i] - (double)min_p));
  }
  /* the draw: the first index whose running sum of kept p exceeds r */
  double kept = 0;
  for (int64_t i = 0; i < n; i++)
    if (p[i] >= u) kept += p[i];
  double r = ssm_sample_uniform(param_uint(state[3], (1u << 24) - 1),
                                param_uint(state[4], UINT32_MAX)) * kept;
  double cum = 0;
  int64_t pick = -1, last = best;
  for (int64_t i = 0; i < n; i++) {
    if (!(p[i] >= u && p[i] > 0)) continue;
    double before = cum;
    cum += p[i];
    last = i;
    if (pick < 0 && cum > r) {
      pick = i;
      margin = fmin(margin, fmin(r - before, cum - r) / kept);
    }
  }
  free(p);
  if (out_margin) *out_margin = margin;
  return (int32_t)(pick >= 0 ? pick : last);
}

static void op_sample(const cpu_run *r, const ssm_node *n) {
  const ssm_value *xv = n->args[0];
  int64_t width = last_dim(xv);
  if (ssm_node_int(n, "batch", 0)) { /* row b by sampler b */
    int64_t rows = numel(n->result);
    SSM_ASSERT(width > 0 && numel(xv) == rows * width &&
               numel(n->args[1]) == rows * SSM_SAMPLER_STATE_LEN);
    for (int64_t b = 0; b < rows; b++) {
      float *state = fbuf(r, n->args[1]) + b * SSM_SAMPLER_STATE_LEN;
      ibuf(r, n->result)[b] = ssm_sample_row(fbuf(r, xv) + b * width, width, state, NULL);
      state[4] += 1;
    }
    return;
  }
  SSM_ASSERT(width > 0 && numel(n->args[1]) == SSM_SAMPLER_STATE_LEN && numel(n->result) == 1);
  float *state = fbuf(r, n->args[1]), *row = fbuf(r, xv) + numel(xv) - width;
  float *seen = n->nargs > 2 ? fbuf(r, n->args[2]) : NULL, pen = state[6];
  if (!seen || !(pen > 0) || pen == 1) {
    ibuf(r, n->result)[0] = ssm_sample_row(row, width, state, NULL);
    state[4] += 1;
    return;
  }
  SSM_ASSERT(numel(n->args[2]) == SSM_SEEN_WORDS(width));
  float *penalized = ssm_malloc_((size_t)width * sizeof *penalized);
  int32_t id = SSM_SAMPLE_NOMEM;
  if (penalized) {
    memcpy(penalized, row, (size_t)width * sizeof *row);
    ssm_penalize_row(penalized, width, seen, pen);
    id = ssm_sample_row(penalized, width, state, NULL);
    free(penalized);
  }
  ibuf(r, n->result)[0] = id;
  state[4] += 1;
  if (id >= 0) ssm_seen_add(seen, id);
}


ssm_status ssm_cpu_state_write(ssm_cpu *c, const char *name, const ssm_type *type,
                               const void *data) {
  ssm_graph *g;
  SSM_TRY(ssm_graph_create("state", &g));
  ssm_node *n = ssm_graph_append(g, SSM_OP_STATE, type, 0, NULL);
  if (n) ssm_node_set_str(g, n, "name", name);
  void *dst;
  ssm_status s = ssm_graph_status(g);
  if (!s) s = state_get(c, n, &dst);
  if (!s) memcpy(dst, data, (size_t)ssm_type_numel(type) * 4);
  ssm_graph_destroy(g);
  return s;
}

/* ---- the run --------------------------------------------------------------------- */

static void op_output(const cpu_run *r, const ssm_node *n) {
  if (n != r->output) return;
  for (int k = 0; k < r->nouts && k < n->nargs; k++) {
    const ssm_value *v = n->args[k];
    float *out = r->outs[k];
    if (!out) continue;
    SSM_ASSERT((size_t)numel(v) == r->counts[k]);
    for (int64_t i = 0; i < numel(v); i++)
      out[i] = v->type.dtype == SSM_I32 ? (float)ibuf(r, v)[i] : fbuf(r, v)[i];
  }
}

/* Gives the node's result its buffer: the kept tensor for weights and states,
 * fresh zeroed memory otherwise. */
static ssm_status bind_result(const cpu_run *r, const ssm_node *n) {
  cpu_buf *b = &r->bufs[n->result->id];
  if (n->op == SSM_OP_WEIGHT) {
    if (n->result->type.dtype == SSM_I32)
      return ssm_status_new(SSM_ERR_UNSUPPORTED, "i32 weights are not supported");
    return weight_get(r->c, n, &b->data);
  }
  if (n->op == SSM_OP_STATE) return state_get(r->c, n, &b->data);
  SSM_TRY(take_elems(r->c, numel(n->result), &b->data));
  b->owned = 1;
  return NULL;
}

static ssm_status exec_node(const cpu_run *r, const ssm_node *n) {
  for (int i = 0; i < n->nargs; i++) SSM_ASSERT(n->args[i]->id >= 0);
  if (n->result) SSM_TRY(bind_result(r, n));
  switch (ssm_op_info_get(n->op)->kind) {
  case SSM_KIND_UNARY: op_unary(r, n); return NULL;
  case SSM_KIND_BINARY: op_binary(r, n); return NULL;
  default: break;
  }
  switch (n->op) {
  case SSM_OP_INPUT: return op_input(r, n);
  case SSM_OP_WEIGHT:
  case SSM_OP_STATE: return NULL;
  case SSM_OP_CONST: op_const(r, n); return NULL;
  case SSM_OP_EMBED: return op_embed(r, n);
  case SSM_OP_MATMUL: return op_matmul(r, n);
  case SSM_OP_MATMUL_SEL: return op_matmul_sel(r, n);
  case SSM_OP_ROPE: op_rope(r, n); return NULL;
  case SSM_OP_POSITIONS: op_positions(r, n); return NULL;
  case SSM_OP_TOPK: return op_topk(r, n);
  case SSM_OP_GATHER: return op_gather(r, n);
  case SSM_OP_REDUCE: return op_reduce(r, n);
  case SSM_OP_RMSNORM: op_rmsnorm(r, n); return NULL;
  case SSM_OP_SLICE: op_slice(r, n); return NULL;
  case SSM_OP_CONCAT: op_concat(r, n); return NULL;
  case SSM_OP_RESHAPE: op_reshape(r, n); return NULL;
  case SSM_OP_TRANSPOSE: op_transpose(r, n); return NULL;
  case SSM_OP_CONV1D: return op_conv1d(r, n);
  case SSM_OP_SCAN: op_scan(r, n); return NULL;
  case SSM_OP_DELTA: op_delta(r, n); return NULL;
  case SSM_OP_ATTENTION: return op_attention(r, n);
  case SSM_OP_SOFTMAX: op_softmax(r, n); return NULL;
  case SSM_OP_ARGMAX: op_argmax(r, n); return NULL;
  case SSM_OP_SAMPLE: op_sample(r, n); return NULL;
  case SSM_OP_OUTPUT: op_output(r, n); return NULL;
  default:
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "op '%s' is not implemented on the CPU",
                          ssm_op_info_get(n->op)->name);
  }
}

/* Adds where the node is: "file:line:col" when parsed, else the value id. */
static ssm_status at_node(const ssm_graph *g, const ssm_node *n, ssm_status s) {
  if (!s) return NULL;
  const char *op = ssm_op_info_get(n->op)->name;
  if (n->line) return ssm_status_wrap(s, "%s:%d:%d", g->file ? g->file : g->name, n->line, n->col);
  if (n->result) return ssm_status_wrap(s, "graph %s: %%%d (%s)", g->name, n->result->id, op);
  return ssm_status_wrap(s, "graph %s: %s", g->name, op);
}

ssm_status ssm_cpu_run(ssm_cpu *c, ssm_graph *g, const int32_t *tokens,
                       float *out, size_t out_count) {
  return ssm_cpu_run_outputs(c, g, tokens, 1, &out, &out_count);
}

ssm_status ssm_cpu_run_outputs(ssm_cpu *c, ssm_graph *g, const int32_t *tokens, int nouts,
                               float *const *outs, const size_t *counts) {
  ssm_graph_number(g);
  const ssm_node *output = NULL;
  for (const ssm_node *n = g->first; n && !output; n = n->next)
    if (n->op == SSM_OP_OUTPUT) output = n;
  if (!output || output->nargs < 1)
    return ssm_status_new(SSM_ERR_INVALID, "graph %s has no output", g->name);
  if (nouts > output->nargs)
    return ssm_status_new(SSM_ERR_INVALID, "graph %s has %d outputs, not %d", g->name,
                          output->nargs, nouts);
  for (int k = 0; k < nouts; k++)
    if (outs[k] && (size_t)numel(output->args[k]) != counts[k])
      return ssm_status_new(SSM_ERR_INVALID,
                            "graph %s: output has %lld elements but the caller expects %zu "
                            "(output operand %d)", g->name, (long long)numel(output->args[k]),
                            counts[k], k);

  /* the run's token count, and the KV caches' bound, checked before anything runs */
  int64_t count = 0;
  for (const ssm_node *n = g->first; n; n = n->next) {
    if (n->op == SSM_OP_INPUT && !strcmp(ssm_node_str(n, "name", ""), "tokens"))
      count = numel(n->result);
    if (n->op == SSM_OP_ATTENTION && !ssm_node_int(n, "batch", 0)) { /* batch=1: each row's, as it runs */
      int64_t maxs = dim(n->args[3], 0), steps = dim(n->args[0], 0);
      if (c->position + steps > maxs)
        return ssm_status_new(SSM_ERR_INVALID, "position %lld is past --max-seq %lld",
                              (long long)(c->position < maxs ? maxs : c->position),
                              (long long)maxs);
    }
  }

  size_t nvalues = (size_t)(g->nvalues ? g->nvalues : 1);
  if (nvalues > c->nscratch) {
    SSM_TRY(ssm_realloc((void **)&c->bufs, nvalues, sizeof *c->bufs, "a run's buffer table"));
    SSM_TRY(ssm_realloc((void **)&c->last_use, nvalues, sizeof *c->last_use, "a run's buffer table"));
    c->nscratch = nvalues;
  }
  memset(c->bufs, 0, nvalues * sizeof *c->bufs);
  memset(c->last_use, 0, nvalues * sizeof *c->last_use);
  cpu_run r = {c, tokens, output, nouts, outs, counts, c->bufs};
  int *last_use = c->last_use;
  ssm_status s = NULL;
  c->runs++;

  int step = 0;
  for (const ssm_node *n = g->first; !s && n; n = n->next, step++) {
    if (n->result) last_use[n->result->id] = step;
    for (int i = 0; i < n->nargs; i++) last_use[n->args[i]->id] = step;
    /* a matmul that rounds a norm's input reads it too (x_operand) */
    const ssm_node *norm = n->op == SSM_OP_MATMUL || n->op == SSM_OP_MATMUL_SEL ? rounded_norm(n) : NULL;
    for (int i = 0; norm && i < norm->nargs; i++) last_use[norm->args[i]->id] = step;
  }
  step = 0;
  for (const ssm_node *n = g->first; !s && n; n = n->next, step++) {
    s = at_node(g, n, exec_node(&r, n));
    for (int i = 0; i < n->nargs; i++) {
      cpu_buf *b = &r.bufs[n->args[i]->id];
      if (last_use[n->args[i]->id] == step && b->owned) {
        ssm_status e = give_elems(c, b->data, numel(n->args[i]));
        if (s) ssm_status_free(e);
        else s = e;
        *b = (cpu_buf){0};
      }
    }
  }
  for (const ssm_node *n = g->first; n; n = n->next)
    if (n->result && r.bufs[n->result->id].owned) {
      ssm_status e = give_elems(c, r.bufs[n->result->id].data, numel(n->result));
      if (s) ssm_status_free(e);
      else s = e;
    }
  drop_stale_spares(c);

  if (!s) c->position += count;
  return s;
}
