/*
 * ir.h — the ssmc op IR: typed SSA over static-shape tensors.
 *
 * A graph is a list of nodes, each applying one op (ops.def) to operand values
 * and defining at most one result value. Everything a graph owns lives in its
 * arena. The text form (ssm_graph_print / ssm_graph_parse) round-trips exactly:
 *
 *   graph decode {
 *     %0:i32[1] = input name="tokens"
 *     %1:f32[1000,64] = weight name="backbone.embeddings.weight"
 *     %2:f32[1,64] = embed %1, %0
 *     %3:f32[1,64] = rmsnorm %2 eps=1e-05
 *     output %3
 *   }
 *
 * Values are printed %0, %1, ... in definition order; operands are separated
 * by ", "; attributes follow as key=value (ints, floats in shortest round-trip
 * form, "strings", [int,lists]) in the order of the op table. '#' starts a
 * comment.
 */
#ifndef SSM_IR_H
#define SSM_IR_H

#include "base/base.h"

/* ---- dtypes and types (ir.c) -------------------------------------------- */

/* SSM_Q8_0 and SSM_Q4_0: 8- and 4-bit weights in blocks of 32 along each
 * row (the last dim), with an f16 scale a block (ssm_qlayout): only matmul
 * and embed weights. */
typedef enum { SSM_F32, SSM_F16, SSM_BF16, SSM_I32, SSM_Q8_0, SSM_Q4_0, SSM_DTYPE_COUNT } ssm_dtype;

#define SSM_MAX_RANK 6

typedef struct {
  ssm_dtype dtype;
  int rank;
  int64_t dims[SSM_MAX_RANK];
} ssm_type;

const char *ssm_dtype_name(ssm_dtype d); /* "f32" ... */
/* Parses "f32", "f16", "bf16", "i32", "q8_0", "q4_0"; returns 0 if unknown. */
int ssm_dtype_parse(const char *s, size_t n, ssm_dtype *out);
/* Bytes of an element (q8_0 and q4_0: 1; ssm_type_bytes counts a
 * quantized tensor's bytes). */
size_t ssm_dtype_size(ssm_dtype d);
/* Whether d is a block-quantized dtype (q8_0, q4_0). */
int ssm_dtype_is_quant(ssm_dtype d);
/* The activation operand of a matmul whose weight is 16-bit (ops.def: the
 * products take x at f16's precision): `v` rounded to 11 significant bits,
 * to nearest even, in f32's exponent range. Every backend rounds the same
 * way (templates/common.*.in: ssm_x16). */
float ssm_round_x16(float v);
/* Whether a matmul reading weight type `w` rounds its x (ssm_round_x16):
 * 16-bit and quantized weights. */
int ssm_dtype_rounds_x(ssm_dtype w);
/* Number of elements (1 for rank 0). */
int64_t ssm_type_numel(const ssm_type *t);
/* Bytes a tensor of type t takes in memory (quantized: ssm_qlayout). */
uint64_t ssm_type_bytes(const ssm_type *t);

/* The quantized dtypes, a row (the last dim, K values) at a time in blocks
 * of 32 (the last one partial when K is not a multiple of 32), each block
 * with a scale d, an f16; an element stands for q * d, with q its integer.
 * In memory: every element's q in element order, then from byte `scales`
 * (a multiple of 4) each block's d, row by row, then zeros to a multiple
 * of 4 bytes.
 *
 * q8_0: q = round(w * (1 / d)) in [-127, 127] (f32 arithmetic, halves away
 * from zero), an int8, with d = amax / 127 of the block rounded up to 4
 * significant bits (0 for a block of zeros).
 *
 * q4_0: q in [-8, 7], stored as the 4 bits of q + 8, element e in bits
 * 4 * (e % 2) of byte e / 2 (a row of an odd K ends mid-byte; the next row
 * starts there). d is signed: of 9 candidates m / (-8 + t / 10), t in
 * -4..4, with m the block's value of largest magnitude (the first such),
 * each rounded to nearest (even) at 8 significant bits, the one whose q
 * (rounded as q8_0's, then clamped) gives the least sum of squared errors
 * (in f32; the first such t). d of a block of zeros is 0.
 *
 * q * d has 11 significant bits at most in both, so f32 and the matrix
 * units' f16 hold it exactly, and no backend rounds it. */
#define SSM_QBLOCK 32
typedef struct {
  ssm_dtype dtype;         /* SSM_Q8_0 or SSM_Q4_0 */
  int64_t k, rows, blocks; /* blocks a row */
  uint64_t scales, bytes;  /* offset of the scales; the whole tensor */
} ssm_qlayout;
ssm_qlayout ssm_qlayout_of(const ssm_type *t);
/* Quantizes the rows x k floats of src into dst (layout.bytes). Returns -1,
 * or the index of the first element that the dtype cannot hold: not
 * finite, or in a block whose scale overflows f16 (dst is then not to be
 * used). */
int64_t ssm_quantize(const float *src, const ssm_qlayout *l, uint8_t *dst);
/* The same in parts: the padding of dst (first), then rows r0..r1-1 of src
 * (their q and scales), parts that may run at once when they start at even
 * rows (q4_0's rows of odd k share a byte). ssm_quantize is both. */
int64_t ssm_quantize_rows(const float *src, const ssm_qlayout *l, uint8_t *dst,
                          int64_t r0, int64_t r1);
void ssm_quantize_pad(const ssm_qlayout *l, uint8_t *dst);
/* Element i's value (above). */
float ssm_qvalue(const uint8_t *q, const ssm_qlayout *l, int64_t i);
int ssm_type_equal(const ssm_type *a, const ssm_type *b);
/* Writes "f32[1,64]" into buf; returns buf. 160 bytes always suffice. */
char *ssm_type_format(const ssm_type *t, char *buf, size_t n);
/* Convenience constructor: ssm_type_make(SSM_F32, 2, (int64_t[]){1, 64}). */
ssm_type ssm_type_make(ssm_dtype d, int rank, const int64_t *dims);

/* bf16/f16 <-> f32 conversions (round to nearest even). */
float ssm_bf16_to_f32(uint16_t h);
uint16_t ssm_f32_to_bf16(float f);
float ssm_f16_to_f32(uint16_t h);
uint16_t ssm_f32_to_f16(float f);

/* ---- the op table (ops.def) ------------------------------------------- */

typedef enum {
#define X(e, name, lo, hi, kind, flags, states, attrs, meaning) SSM_OP_##e,
#include "ir/ops.def"
#undef X
  SSM_OP_COUNT
} ssm_op;

typedef enum {
  SSM_KIND_SRC,
  SSM_KIND_UNARY,
  SSM_KIND_BINARY,
  SSM_KIND_OTHER,
  SSM_KIND_SINK
} ssm_op_kind;

typedef enum { SSM_ATTR_INT, SSM_ATTR_FLOAT, SSM_ATTR_STR, SSM_ATTR_INTS } ssm_attr_kind;

#define SSM_MAX_ATTRS 8
#define SSM_MAX_STATE_OPERANDS 2

typedef struct {
  const char *key;
  ssm_attr_kind kind;
  int optional;
} ssm_attr_spec;

/* One row of ops.def, its strings parsed. */
typedef struct {
  const char *name;
  int min_args, max_args;
  ssm_op_kind kind;
  int effects; /* flag "effects" */
  int view;    /* flag "view" */
  int nstates; /* column states: the operand slots it updates in place */
  int states[SSM_MAX_STATE_OPERANDS];
  int nattrs;
  ssm_attr_spec attrs[SSM_MAX_ATTRS];
  const char *meaning;
} ssm_op_info;

const ssm_op_info *ssm_op_info_get(ssm_op op);
/* Looks an op up by name; returns SSM_OP_COUNT if there is none. */
ssm_op ssm_op_lookup(const char *name, size_t n);
/* 1 if the op writes one of its operands (a state) or is the graph's output
 * (ops.def flag "effects"): never removed by DCE. */
int ssm_op_has_effects(ssm_op op);
/* The operand slots of `op` that are states it updates (ops.def column
 * states; conv1d_causal: 1; scan: 3; attention: 3 and 4; sample: 1), written
 * to out[0..]; returns how many (at most SSM_MAX_STATE_OPERANDS). */
int ssm_op_state_operands(ssm_op op, int out[SSM_MAX_STATE_OPERANDS]);
/* 1 if the op's result is operand 0's memory read in place (ops.def flag
 * "view": reshape, slice, transpose): kernels read through it with index
 * arithmetic instead of running it. */
int ssm_op_is_view(ssm_op op);

/* ---- elementwise ops (elementwise.def, elementwise.c) --------------------- */

/* The value of UNARY op `op` at x (elementwise.def column c), in double: the
 * one definition that the CPU interpreter and load-time weight transforms
 * share. */
double ssm_unary_eval(ssm_op op, double x);
/* The value of BINARY op `op` at (a, b) (elementwise.def column c), in
 * double, as the CPU interpreter computes it. */
double ssm_binary_eval(ssm_op op, double a, double b);

/* The kernel languages: each is a string column of elementwise.def. */
typedef enum { SSM_LANG_GLSL, SSM_LANG_WGSL, SSM_LANG_COUNT } ssm_lang;

/* The expression of UNARY or BINARY op `op` in `lang`, its operands written
 * $x, or $a and $b: "ssm_softplus($x)", "($a + $b)". NULL for other ops. */
const char *ssm_op_expr(ssm_op op, ssm_lang lang);
/* Appends the expression of elementwise op `op` in `lang` to `b` with
 * operands[0] in place of $x or $a, and operands[1] in place of $b. */
void ssm_op_expr_append(ssm_sb *b, ssm_op op, ssm_lang lang, const char *const *operands);

/* ---- graphs (ir.c) ------------------------------------------------------ */

typedef struct ssm_value ssm_value;
typedef struct ssm_node ssm_node;

typedef struct {
  const char *key;
  ssm_attr_kind kind;
  int64_t i;
  double f;
  const char *s;
  int n;          /* SSM_ATTR_INTS: count */
  int64_t *ints;  /* SSM_ATTR_INTS: values */
} ssm_attr;

struct ssm_value {
  ssm_type type;
  ssm_node *def; /* the node that defines it */
  int id;        /* printed as %id; set by ssm_graph_number */
};

struct ssm_node {
  ssm_op op;
  ssm_value *result; /* NULL for SINK ops */
  int nargs;
  ssm_value **args;
  int nattrs;
  ssm_attr attrs[SSM_MAX_ATTRS];
  int line, col; /* source position when parsed (0 when built) */
  ssm_node *prev, *next;
};

typedef struct {
  ssm_arena *arena;
  const char *name;
  const char *file; /* where it was parsed from, for messages (may be NULL) */
  ssm_node *first, *last;
  int nvalues; /* after ssm_graph_number */
} ssm_graph;

/* An empty graph. Its arena (g->arena) holds every node and attribute;
 * when one of its allocations fails the graph is incomplete and
 * ssm_graph_status reports it (see ssm_arena_status). */
ssm_status ssm_graph_create(const char *name, ssm_graph **out) SSM_MUST_CHECK;
void ssm_graph_destroy(ssm_graph *g);

/* Appends a node. `result_type` is NULL for SINK ops. Operands are copied.
 * The result type is taken as given; ssm_graph_verify checks it. NULL when
 * out of memory (then ssm_graph_status says so). */
ssm_node *ssm_graph_append(ssm_graph *g, ssm_op op, const ssm_type *result_type,
                           int nargs, ssm_value *const *args);
/* Inserts a new node before `before` (or appends when NULL). */
ssm_node *ssm_graph_insert(ssm_graph *g, ssm_node *before, ssm_op op,
                           const ssm_type *result_type, int nargs,
                           ssm_value *const *args);
/* NULL, or the NOMEM status of the graph's first failed allocation. */
ssm_status ssm_graph_status(const ssm_graph *g);
/* Unlinks `n` (its memory stays in the arena). */
void ssm_graph_remove(ssm_graph *g, ssm_node *n);
/* Replaces every use of `from` by `to` in nodes after from's definition. */
void ssm_graph_replace_uses(ssm_graph *g, ssm_value *from, ssm_value *to);
/* Assigns ids 0..n-1 in order and sets g->nvalues. */
void ssm_graph_number(ssm_graph *g);
/* The sampler state that ssm_graph_add_sampler adds: f32[8] holding
 * temperature (0: argmax), top_k (0: off), top_p (1: off), seed (an integer
 * below 2^24), the step counter that `sample` increments, min_p (0: off),
 * the repetition penalty (0 or 1: off) and 1 reserved. */
#define SSM_SAMPLER_STATE "sampler"
#define SSM_SLOTS_SAMPLER_STATE "slots.sampler" /* a batched graph's (frontend.h) */
#define SSM_SAMPLER_STATE_LEN 8
/* The seen-token set that ssm_graph_add_sampler gives a one-sequence
 * sampler, for the repetition penalty (the state's seventh float): bit b of
 * float w (an integer below 2^24) is token 24 * w + b. */
#define SSM_SEEN_STATE "sampler.seen"
#define SSM_SEEN_BITS 24
#define SSM_SEEN_WORDS(vocab) (((vocab) + SSM_SEEN_BITS - 1) / SSM_SEEN_BITS)
/* Whether token `id` is in a seen-token set; adds it. */
static inline int ssm_seen_has(const float *seen, int64_t id) {
  return (int)(((uint32_t)seen[id / SSM_SEEN_BITS] >> (id % SSM_SEEN_BITS)) & 1u);
}
static inline void ssm_seen_add(float *seen, int64_t id) {
  float *w = &seen[id / SSM_SEEN_BITS];
  *w = (float)((uint32_t)*w | 1u << (id % SSM_SEEN_BITS));
}
/* The repetition penalty on a row of n logits, as transformers'
 * RepetitionPenaltyLogitsProcessor: the logit of each token in the seen set
 * is divided by `penalty` when positive and multiplied by it otherwise. */
static inline void ssm_penalize_row(float *logits, int64_t n, const float *seen, float penalty) {
  for (int64_t i = 0; i < n; i++)
    if (ssm_seen_has(seen, i)) logits[i] = logits[i] > 0 ? logits[i] / penalty : logits[i] * penalty;
}
/* Adds `%next = sample %logits, %sampler` (a state named SSM_SAMPLER_STATE)
 * before the output node, where %logits is the first output, and appends
 * %next to the outputs: a decode graph that also draws the next token,
 * with the seen-token set (a state named SSM_SEEN_STATE) as a third operand.
 * With `batch` (a batched graph, logits [B,V]): one id per row, each row
 * with its own sampler state (f32[B,8]). */
ssm_status ssm_graph_add_sampler(ssm_graph *g, int batch);
/* Number of operand slots that use `v`. */
int ssm_graph_count_uses(const ssm_graph *g, const ssm_value *v);

/* Attribute setters replace an existing attribute with the same key. */
void ssm_node_set_int(ssm_graph *g, ssm_node *n, const char *key, int64_t v);
void ssm_node_set_float(ssm_graph *g, ssm_node *n, const char *key, double v);
void ssm_node_set_str(ssm_graph *g, ssm_node *n, const char *key, const char *v);
void ssm_node_set_ints(ssm_graph *g, ssm_node *n, const char *key, int count,
                       const int64_t *v);
/* NULL if absent. */
const ssm_attr *ssm_node_attr(const ssm_node *n, const char *key);
int64_t ssm_node_int(const ssm_node *n, const char *key, int64_t dflt);
double ssm_node_float(const ssm_node *n, const char *key, double dflt);
const char *ssm_node_str(const ssm_node *n, const char *key, const char *dflt);

/* ---- shape rules, verifier, text form (shape.c, verify.c, print.c, parse.c) */

/* The result type an op computes from its operands and attributes. Ops whose
 * shape is given by the result type (reshape) read
 * n->result->type. The message names no place; callers add it. */
ssm_status ssm_op_infer(const ssm_node *n, ssm_type *out_type);

/* Checks arity, attributes (presence and kind), dtypes, the result type
 * against ssm_op_infer, single definition, use after definition, exactly one
 * output node at the end. Errors are "file:line:col: message" for parsed
 * nodes and "graph NAME: %id (op): message" for built ones. */
ssm_status ssm_graph_verify(ssm_graph *g);

/* The text form of `g` (numbers it first). malloc'd; the caller frees. */
ssm_status ssm_graph_print(ssm_graph *g, char **out) SSM_MUST_CHECK;

/* Parses the text form. `file` names the source in messages
 * ("f.ssmir:3:14: undefined value %7"). Does not verify. */
ssm_status ssm_graph_parse(const char *text, const char *file, ssm_graph **out);

#endif
