/*
 * ir.c — dtypes, types, the op table, and graph construction.
 */
#include "ir/ir.h"

#include <math.h>
#include <string.h>

static const char *const dtype_names[SSM_DTYPE_COUNT] = {"f32", "f16", "bf16", "i32", "q8_0",
                                                            "q4_0"};
static const size_t dtype_sizes[SSM_DTYPE_COUNT] = {4, 2, 2, 4, 1, 1};

const char *ssm_dtype_name(ssm_dtype d) {
  SSM_ASSERT(d >= 0 && d < SSM_DTYPE_COUNT);
  return dtype_names[d];
}

int ssm_dtype_parse(const char *s, size_t n, ssm_dtype *out) {
  for (int d = 0; d < SSM_DTYPE_COUNT; d++)
    if (strlen(dtype_names[d]) == n && !memcmp(s, dtype_names[d], n)) {
      *out = (ssm_dtype)d;
      return 1;
    }
  return 0;
}

size_t ssm_dtype_size(ssm_dtype d) {
  SSM_ASSERT(d >= 0 && d < SSM_DTYPE_COUNT);
  return dtype_sizes[d];
}

float ssm_round_x16(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  u = (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u;
  memcpy(&v, &u, 4);
  return v;
}

int ssm_dtype_is_quant(ssm_dtype d) { return d == SSM_Q8_0 || d == SSM_Q4_0; }

int ssm_dtype_rounds_x(ssm_dtype w) { return w == SSM_F16 || w == SSM_BF16 || ssm_dtype_is_quant(w); }

int64_t ssm_type_numel(const ssm_type *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

uint64_t ssm_type_bytes(const ssm_type *t) {
  if (ssm_dtype_is_quant(t->dtype)) return ssm_qlayout_of(t).bytes;
  return (uint64_t)ssm_type_numel(t) * ssm_dtype_size(t->dtype);
}

ssm_qlayout ssm_qlayout_of(const ssm_type *t) {
  ssm_qlayout l = {.dtype = t->dtype, .k = t->rank ? t->dims[t->rank - 1] : 1};
  uint64_t n = (uint64_t)ssm_type_numel(t);
  l.rows = l.k ? (int64_t)n / l.k : 0;
  l.blocks = (l.k + SSM_QBLOCK - 1) / SSM_QBLOCK;
  l.scales = ((t->dtype == SSM_Q4_0 ? (n + 1) / 2 : n) + 3) & ~(uint64_t)3;
  l.bytes = l.scales + (((uint64_t)(l.rows * l.blocks) * 2 + 3) & ~(uint64_t)3);
  return l;
}

/* x >= 0 rounded up to 4 significant bits, as an f16 (inf past 65504):
 * from 2^-21 on, 1.xxx times a power of two, exact in f16 (subnormal below
 * 2^-14); below, a multiple of 2^-24 (f16's least subnormal). */
static uint16_t f16_up4(float x) {
  if (x < 0x1p-21f) return (uint16_t)ceilf(x * 0x1p24f);
  uint32_t u;
  memcpy(&u, &x, 4);
  if (u & 0xfffffu) u = (u | 0xfffffu) + 1;
  memcpy(&x, &u, 4);
  return ssm_f32_to_f16(x);
}

void ssm_quantize_pad(const ssm_qlayout *l, uint8_t *dst) {
  uint64_t n = (uint64_t)(l->rows * l->k), end = l->scales + (uint64_t)(l->rows * l->blocks) * 2;
  if (l->dtype == SSM_Q4_0) n /= 2; /* with the last element's byte, written after */
  memset(dst + n, 0, (size_t)(l->scales - n));
  memset(dst + end, 0, (size_t)(l->bytes - end));
}

int64_t ssm_quantize(const float *src, const ssm_qlayout *l, uint8_t *dst) {
  ssm_quantize_pad(l, dst);
  return ssm_quantize_rows(src, l, dst, 0, l->rows);
}

/* q = v rounded half away from zero (as roundf; |v| < 2^31, so the
 * truncation and v - t are exact), clamped to [lo, hi] */
static int32_t round_clamp(float v, int32_t lo, int32_t hi) {
  int32_t t = (int32_t)v;
  float f = v - (float)t;
  t += (f >= 0.5f) - (f <= -0.5f);
  return t > hi ? hi : t < lo ? lo : t;
}

/* x rounded to nearest, ties to even, at 8 significant bits (x finite; f16
 * may round it again where it is subnormal or past 65504) */
static float round8(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

/* q8_0's d of the n values x (ir.h), or inf if it overflows f16 */
static uint16_t q8_scale(const float *x, int64_t n) {
  float amax = 0;
  for (int64_t k = 0; k < n; k++) amax = fabsf(x[k]) > amax ? fabsf(x[k]) : amax;
  return f16_up4(amax / 127.0f);
}

/* q4_0's d of the n values x (ir.h) */
static uint16_t q4_scale(const float *x, int64_t n) {
  float m = 0, best_err = INFINITY;
  for (int64_t k = 0; k < n; k++) m = fabsf(x[k]) > fabsf(m) ? x[k] : m;
  uint16_t best = 0;
  for (int t = -4; t <= 4 && m != 0; t++) {
    uint16_t dh = ssm_f32_to_f16(round8(m / (-8.0f + (float)t / 10.0f)));
    float d = ssm_f16_to_f32(dh), id = d != 0 ? 1.0f / d : 0.0f, err = 0;
    if (!isfinite(d)) return dh;
    for (int64_t k = 0; k < n; k++) {
      float e = x[k] - (float)round_clamp(x[k] * id, -8, 7) * d;
      err += e * e;
    }
    if (err < best_err) best_err = err, best = dh;
  }
  return best;
}

int64_t ssm_quantize_rows(const float *src, const ssm_qlayout *l, uint8_t *dst,
                          int64_t r0, int64_t r1) {
  int q4 = l->dtype == SSM_Q4_0;
  for (int64_t r = r0; r < r1; r++)
    for (int64_t b = 0; b < l->blocks; b++) {
      int64_t k0 = b * SSM_QBLOCK, k1 = k0 + SSM_QBLOCK < l->k ? k0 + SSM_QBLOCK : l->k;
      const float *x = src + r * l->k;
      for (int64_t k = k0; k < k1; k++)
        if (!isfinite(x[k])) return r * l->k + k;
      uint16_t dh = q4 ? q4_scale(x + k0, k1 - k0) : q8_scale(x + k0, k1 - k0);
      float d = ssm_f16_to_f32(dh);
      if (!isfinite(d)) return r * l->k + k0;
      memcpy(dst + l->scales + (uint64_t)(r * l->blocks + b) * 2, &dh, 2);
      float id = d != 0 ? 1.0f / d : 0.0f;
      for (int64_t k = k0; k < k1; k++) {
        uint64_t e = (uint64_t)(r * l->k + k);
        if (!q4) {
          dst[e] = (uint8_t)(int8_t)round_clamp(x[k] * id, -127, 127);
          continue;
        }
        uint8_t u = (uint8_t)(round_clamp(x[k] * id, -8, 7) + 8), sh = (uint8_t)((e & 1) * 4);
        dst[e / 2] = (uint8_t)((dst[e / 2] & ~(0xfu << sh)) | (unsigned)u << sh);
      }
    }
  return -1;
}

float ssm_qvalue(const uint8_t *q, const ssm_qlayout *l, int64_t i) {
  int64_t r = i / l->k, b = r * l->blocks + (i - r * l->k) / SSM_QBLOCK;
  uint16_t dh;
  memcpy(&dh, q + l->scales + (uint64_t)b * 2, 2);
  int v = l->dtype == SSM_Q4_0 ? (int)((q[i / 2] >> ((i & 1) * 4)) & 0xf) - 8 : (int8_t)q[i];
  return (float)v * ssm_f16_to_f32(dh);
}

int ssm_type_equal(const ssm_type *a, const ssm_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return 0;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

char *ssm_type_format(const ssm_type *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", ssm_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)t->dims[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

ssm_type ssm_type_make(ssm_dtype d, int rank, const int64_t *dims) {
  SSM_ASSERT(rank >= 0 && rank <= SSM_MAX_RANK);
  ssm_type t = {.dtype = d, .rank = rank};
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  return t;
}

/* ---- 16-bit float conversions --------------------------------------------------------- */

static uint32_t f32_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}

static float bits_f32(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}

float ssm_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t ssm_f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

float ssm_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {
    float v = ldexpf((float)mant, -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t ssm_f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00 | (uint16_t)((ax >> 13) & 0x3ff);
  if (ax >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to inf */
  if (ax >= 0x38800000u) {                      /* normal in f16 */
    ax -= (uint32_t)(127 - 15) << 23;
    ax += 0xfffu + ((ax >> 13) & 1);
    return sign | (uint16_t)(ax >> 13);
  }
  /* Subnormal or zero: adding 0.5f puts the f16 subnormal unit (2^-24) at
   * the f32 ulp, so the FPU rounds to nearest even for us. */
  float r = bits_f32(ax) + 0.5f;
  return sign | (uint16_t)(f32_bits(r) - 0x3f000000u);
}

/* ---- op table ---------------------------------------------------------- */

typedef struct {
  const char *name;
  int lo, hi;
  ssm_op_kind kind;
  const char *flags, *states, *attrs;
  const char *meaning;
} raw_op;

static const raw_op raw_ops[SSM_OP_COUNT] = {
#define X(e, name, lo, hi, kind, flags, states, attrs, meaning) \
  {name, lo, hi, SSM_KIND_##kind, flags, states, attrs, meaning},
#include "ir/ops.def"
#undef X
};

static ssm_op_info op_infos[SSM_OP_COUNT];
static int op_infos_ready;

/* The length of the space-separated word at *p (skipping spaces first). */
static size_t next_word(const char **p) {
  while (**p == ' ') (*p)++;
  return strcspn(*p, " ");
}

/* Sets the flags of the "effects view" column. */
static void parse_flags(ssm_op_info *info, const char *p) {
  for (size_t n; (n = next_word(&p)) > 0; p += n) {
    if (n == 7 && !memcmp(p, "effects", 7)) info->effects = 1;
    else if (n == 4 && !memcmp(p, "view", 4)) info->view = 1;
    else SSM_ASSERT(!"bad flag in ops.def");
  }
}

/* Reads the "3 4" column of state operand slots. */
static void parse_states(ssm_op_info *info, const char *p) {
  for (size_t n; (n = next_word(&p)) > 0; p += n) {
    int slot = 0;
    for (size_t i = 0; i < n; i++) {
      SSM_ASSERT(p[i] >= '0' && p[i] <= '9');
      slot = slot * 10 + (p[i] - '0');
    }
    SSM_ASSERT(slot < info->min_args && info->nstates < SSM_MAX_STATE_OPERANDS);
    info->states[info->nstates++] = slot;
  }
  SSM_ASSERT(!info->nstates || info->effects);
}

/* Parses each row's strings ("key:k ?key:k" into specs); the table is
 * static, so a malformed entry is a bug. */
static void init_op_infos(void) {
  for (int o = 0; o < SSM_OP_COUNT; o++) {
    const raw_op *r = &raw_ops[o];
    ssm_op_info *info = &op_infos[o];
    info->name = r->name;
    info->min_args = r->lo;
    info->max_args = r->hi;
    info->kind = r->kind;
    info->meaning = r->meaning;
    parse_flags(info, r->flags);
    parse_states(info, r->states);
    const char *p = r->attrs;
    while (*p) {
      while (*p == ' ') p++;
      if (!*p) break;
      SSM_ASSERT(info->nattrs < SSM_MAX_ATTRS);
      ssm_attr_spec *s = &info->attrs[info->nattrs++];
      if (*p == '?') {
        s->optional = 1;
        p++;
      }
      const char *colon = strchr(p, ':');
      SSM_ASSERT(colon);
      static char keys[SSM_OP_COUNT][SSM_MAX_ATTRS][24];
      size_t len = (size_t)(colon - p);
      SSM_ASSERT(len < 24);
      memcpy(keys[o][info->nattrs - 1], p, len);
      s->key = keys[o][info->nattrs - 1];
      switch (colon[1]) {
      case 'i': s->kind = SSM_ATTR_INT; break;
      case 'f': s->kind = SSM_ATTR_FLOAT; break;
      case 's': s->kind = SSM_ATTR_STR; break;
      case 'I': s->kind = SSM_ATTR_INTS; break;
      default: SSM_ASSERT(!"bad attr kind in ops.def");
      }
      p = colon + 2;
    }
    /* attributes every op accepts, written by passes */
    static const char *const universal[] = {"group", "ofs", "sync", "apart"};
    for (int u = 0; u < 4; u++) {
      SSM_ASSERT(info->nattrs < SSM_MAX_ATTRS);
      info->attrs[info->nattrs++] = (ssm_attr_spec){universal[u], SSM_ATTR_INT, 1};
    }
  }
  op_infos_ready = 1;
}

const ssm_op_info *ssm_op_info_get(ssm_op op) {
  SSM_ASSERT(op >= 0 && op < SSM_OP_COUNT);
  if (!op_infos_ready) init_op_infos();
  return &op_infos[op];
}

ssm_op ssm_op_lookup(const char *name, size_t n) {
  for (int o = 0; o < SSM_OP_COUNT; o++)
    if (strlen(raw_ops[o].name) == n && !memcmp(raw_ops[o].name, name, n))
      return (ssm_op)o;
  return SSM_OP_COUNT;
}

int ssm_op_has_effects(ssm_op op) { return ssm_op_info_get(op)->effects; }

int ssm_op_state_operands(ssm_op op, int out[SSM_MAX_STATE_OPERANDS]) {
  const ssm_op_info *info = ssm_op_info_get(op);
  for (int i = 0; i < info->nstates; i++) out[i] = info->states[i];
  return info->nstates;
}

int ssm_op_is_view(ssm_op op) { return ssm_op_info_get(op)->view; }

/* ---- graphs ------------------------------------------------------------ */

ssm_status ssm_graph_create(const char *name, ssm_graph **out) {
  *out = NULL;
  ssm_arena *a;
  SSM_TRY(ssm_status_wrap(ssm_arena_create(&a), "a graph"));
  ssm_graph *g = ssm_arena_alloc(a, sizeof *g);
  if (!g) {
    ssm_status s = ssm_arena_status(a, "a graph");
    ssm_arena_destroy(a);
    return s;
  }
  g->arena = a;
  g->name = ssm_arena_strdup(a, name ? name : "main");
  *out = g;
  return NULL;
}

ssm_status ssm_graph_status(const ssm_graph *g) { return ssm_arena_status(g->arena, "the IR graph"); }

void ssm_graph_destroy(ssm_graph *g) {
  if (g) ssm_arena_destroy(g->arena);
}

static ssm_node *new_node(ssm_graph *g, ssm_op op, const ssm_type *result_type,
                          int nargs, ssm_value *const *args) {
  ssm_node *n = ssm_arena_alloc(g->arena, sizeof *n);
  ssm_value **a = ssm_arena_alloc(g->arena, sizeof(ssm_value *) * (size_t)(nargs ? nargs : 1));
  ssm_value *r = result_type ? ssm_arena_alloc(g->arena, sizeof *n->result) : NULL;
  if (!n || !a || (result_type && !r)) return NULL;
  n->op = op;
  n->nargs = nargs;
  n->args = a;
  for (int i = 0; i < nargs; i++) n->args[i] = args[i];
  if (result_type) {
    n->result = r;
    n->result->type = *result_type;
    n->result->def = n;
    n->result->id = -1;
  }
  return n;
}

ssm_node *ssm_graph_insert(ssm_graph *g, ssm_node *before, ssm_op op,
                           const ssm_type *result_type, int nargs,
                           ssm_value *const *args) {
  ssm_node *n = new_node(g, op, result_type, nargs, args);
  if (!n) return NULL;
  if (!before) {
    n->prev = g->last;
    if (g->last) g->last->next = n;
    else g->first = n;
    g->last = n;
  } else {
    n->next = before;
    n->prev = before->prev;
    if (before->prev) before->prev->next = n;
    else g->first = n;
    before->prev = n;
  }
  return n;
}

ssm_node *ssm_graph_append(ssm_graph *g, ssm_op op, const ssm_type *result_type,
                           int nargs, ssm_value *const *args) {
  return ssm_graph_insert(g, NULL, op, result_type, nargs, args);
}

void ssm_graph_remove(ssm_graph *g, ssm_node *n) {
  if (n->prev) n->prev->next = n->next;
  else g->first = n->next;
  if (n->next) n->next->prev = n->prev;
  else g->last = n->prev;
  n->prev = n->next = NULL;
}

void ssm_graph_replace_uses(ssm_graph *g, ssm_value *from, ssm_value *to) {
  for (ssm_node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->nargs; i++)
      if (n->args[i] == from) n->args[i] = to;
}

void ssm_graph_number(ssm_graph *g) {
  int id = 0;
  for (ssm_node *n = g->first; n; n = n->next)
    if (n->result) n->result->id = id++;
  g->nvalues = id;
}

int ssm_graph_count_uses(const ssm_graph *g, const ssm_value *v) {
  int k = 0;
  for (const ssm_node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->nargs; i++) k += n->args[i] == v;
  return k;
}

static ssm_attr *attr_slot(ssm_node *n, const char *key) {
  for (int i = 0; i < n->nattrs; i++)
    if (!strcmp(n->attrs[i].key, key)) return &n->attrs[i];
  SSM_ASSERT(n->nattrs < SSM_MAX_ATTRS);
  return &n->attrs[n->nattrs++];
}

void ssm_node_set_int(ssm_graph *g, ssm_node *n, const char *key, int64_t v) {
  ssm_attr *a = attr_slot(n, key);
  *a = (ssm_attr){.key = ssm_arena_strdup(g->arena, key), .kind = SSM_ATTR_INT, .i = v};
}

void ssm_node_set_float(ssm_graph *g, ssm_node *n, const char *key, double v) {
  ssm_attr *a = attr_slot(n, key);
  *a = (ssm_attr){.key = ssm_arena_strdup(g->arena, key), .kind = SSM_ATTR_FLOAT, .f = v};
}

void ssm_node_set_str(ssm_graph *g, ssm_node *n, const char *key, const char *v) {
  ssm_attr *a = attr_slot(n, key);
  *a = (ssm_attr){.key = ssm_arena_strdup(g->arena, key), .kind = SSM_ATTR_STR,
                  .s = ssm_arena_strdup(g->arena, v)};
}

void ssm_node_set_ints(ssm_graph *g, ssm_node *n, const char *key, int count,
                       const int64_t *v) {
  ssm_attr *a = attr_slot(n, key);
  int64_t *copy = ssm_arena_alloc(g->arena, sizeof(int64_t) * (size_t)(count ? count : 1));
  if (!copy) count = 0; /* the arena failed: ssm_graph_status says so */
  for (int i = 0; i < count; i++) copy[i] = v[i];
  *a = (ssm_attr){.key = ssm_arena_strdup(g->arena, key), .kind = SSM_ATTR_INTS,
                  .n = count, .ints = copy};
}

const ssm_attr *ssm_node_attr(const ssm_node *n, const char *key) {
  for (int i = 0; i < n->nattrs; i++)
    if (!strcmp(n->attrs[i].key, key)) return &n->attrs[i];
  return NULL;
}

int64_t ssm_node_int(const ssm_node *n, const char *key, int64_t dflt) {
  const ssm_attr *a = ssm_node_attr(n, key);
  return a && a->kind == SSM_ATTR_INT ? a->i : dflt;
}

double ssm_node_float(const ssm_node *n, const char *key, double dflt) {
  const ssm_attr *a = ssm_node_attr(n, key);
  if (!a) return dflt;
  if (a->kind == SSM_ATTR_FLOAT) return a->f;
  if (a->kind == SSM_ATTR_INT) return (double)a->i;
  return dflt;
}

const char *ssm_node_str(const ssm_node *n, const char *key, const char *dflt) {
  const ssm_attr *a = ssm_node_attr(n, key);
  return a && a->kind == SSM_ATTR_STR ? a->s : dflt;
}

ssm_status ssm_graph_add_sampler(ssm_graph *g, int batch) {
  ssm_node *out = g->last;
  if (!out || out->op != SSM_OP_OUTPUT || out->nargs < 1 || out->nargs >= 16)
    return ssm_status_new(SSM_ERR_INVALID, "graph %s: no output to add a sampler to", g->name);
  ssm_value *logits = out->args[0];
  if (logits->type.rank < 1 || logits->type.dtype == SSM_I32)
    return ssm_status_new(SSM_ERR_INVALID, "graph %s: its first output is not logits", g->name);
  if (batch && logits->type.rank != 2)
    return ssm_status_new(SSM_ERR_INVALID, "graph %s: its logits are not [B,V]", g->name);
  int64_t rows = batch ? logits->type.dims[0] : 1;
  ssm_type st = batch ? ssm_type_make(SSM_F32, 2, (int64_t[]){rows, SSM_SAMPLER_STATE_LEN})
                      : ssm_type_make(SSM_F32, 1, (int64_t[]){SSM_SAMPLER_STATE_LEN});
  ssm_type id = ssm_type_make(SSM_I32, 1, (int64_t[]){rows});
  ssm_node *state = ssm_graph_insert(g, out, SSM_OP_STATE, &st, 0, NULL);
  if (!state) return ssm_graph_status(g);
  ssm_node_set_str(g, state, "name", batch ? SSM_SLOTS_SAMPLER_STATE : SSM_SAMPLER_STATE);
  ssm_value *sa[3] = {logits, state->result, NULL};
  if (!batch) {
    int64_t V = logits->type.dims[logits->type.rank - 1];
    ssm_type wt = ssm_type_make(SSM_F32, 1, (int64_t[]){SSM_SEEN_WORDS(V)});
    ssm_node *seen = ssm_graph_insert(g, out, SSM_OP_STATE, &wt, 0, NULL);
    if (!seen) return ssm_graph_status(g);
    ssm_node_set_str(g, seen, "name", SSM_SEEN_STATE);
    sa[2] = seen->result;
  }
  ssm_node *next = ssm_graph_insert(g, out, SSM_OP_SAMPLE, &id, batch ? 2 : 3, sa);
  if (!next) return ssm_graph_status(g);
  if (batch) ssm_node_set_int(g, next, "batch", 1);
  ssm_value *args[16];
  int nargs = out->nargs;
  for (int i = 0; i < nargs; i++) args[i] = out->args[i];
  args[nargs++] = next->result;
  ssm_node *outputs = ssm_graph_insert(g, out, SSM_OP_OUTPUT, NULL, nargs, args);
  if (!outputs) return ssm_graph_status(g);
  ssm_graph_remove(g, out);
  return ssm_graph_status(g);
}
