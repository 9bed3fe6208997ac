/*
 * passes.h — IR passes and the pipeline that runs them.
 *
 * Each pass is one file in passes/ and one function with the common
 * signature. The pipeline is the literal list ssm_passes[] read top to
 * bottom; the verifier runs between passes in debug builds
 * (SSM_VERIFY_PASSES). `ssmc ir --after PASS|all` prints the graph after a
 * pass; `ssmc compile --dump-ir DIR` writes one file per pass.
 */
#ifndef SSM_PASSES_H
#define SSM_PASSES_H

#include "ir/ir.h"

typedef struct {
  int no_fuse;       /* 1: the fuse pass leaves every op in a kernel of its own */
  uint32_t align;    /* activation offsets are multiples of this (bytes; 0: 256) */
  ssm_dtype weight_dtype; /* f16/bf16: matmul and embed weights are kept in it (weights.c) */
  int output_apart;  /* 1: the graph's output gets memory of its own, not the pool's (plan_buffers.c) */
} ssm_pass_opts;

/* What a pass reports (dispatches before/after, bytes planned vs naive...):
 * one line, written into `out_note` (may be left empty). */
typedef ssm_status (*ssm_pass_fn)(ssm_graph *g, const ssm_pass_opts *o, char *out_note,
                                  size_t note_size);

typedef struct {
  const char *name; /* as given to --after */
  ssm_pass_fn fn;
  const char *what; /* one line for --help */
} ssm_pass;

/* The pipeline, in order; ends with {NULL}. */
extern const ssm_pass ssm_passes[];

ssm_status ssm_pass_verify(ssm_graph *g, const ssm_pass_opts *o, char *out_note, size_t n);
ssm_status ssm_pass_infer(ssm_graph *g, const ssm_pass_opts *o, char *out_note, size_t n);
ssm_status ssm_pass_simplify(ssm_graph *g, const ssm_pass_opts *o, char *out_note, size_t n);
ssm_status ssm_pass_weights(ssm_graph *g, const ssm_pass_opts *o, char *out_note, size_t n);
ssm_status ssm_pass_fuse(ssm_graph *g, const ssm_pass_opts *o, char *out_note, size_t n);
ssm_status ssm_pass_plan_buffers(ssm_graph *g, const ssm_pass_opts *o, char *out_note, size_t n);
ssm_status ssm_pass_schedule(ssm_graph *g, const ssm_pass_opts *o, char *out_note, size_t n);

/* ---- fused groups (groups.c) --------------------------------------------
 * After `fuse`, every node that does work carries group=N. A group becomes
 * one kernel. Its root is the member whose value leaves the group (the only
 * one used outside it); its anchor is the member that decides the kernel
 * family (matmul, scan, conv1d_causal, attention, embed, reduce, softmax,
 * argmax, or a large-row rmsnorm), or NULL for a pointwise group. Other members are
 * pointwise (UNARY, BINARY, concat, small-row rmsnorm) expressions evaluated
 * inside the kernel, or the rmsnorm that a matmul applies to its x operand
 * (norm). Views (ssm_op_is_view: reshape, slice, transpose) are not members:
 * kernels read through them with index arithmetic, unless a view must be
 * materialized (then it is the root of a pointwise group of its own). */

typedef struct {
  int id;
  ssm_node *first; /* the first member in graph order (members lie first..root) */
  ssm_node *root;
  ssm_node *anchor;
  ssm_node *norm;
} ssm_group;

/* Rows of at most this many elements are normalized inside the consuming
 * kernel (recomputed per use); longer rows get a kernel or a matmul prologue. */
#define SSM_SMALL_ROW 64

/* The most rows of a matmul that codegen runs a row at a time (the GEMV,
 * the small matmul); more rows make a GEMM of tiles, which reads each row
 * of x once per block of columns, straight from memory where x is there
 * (fuse.c, 4; codegen/kernels.c). */
#define SSM_MATMUL_MAX_ROWS 8

/* Can this node be evaluated as an expression inside another kernel? */
int ssm_node_is_pointwise(const ssm_node *n);
/* The node's group, or -1. */
int ssm_node_group(const ssm_node *n);
/* Collects the groups of a fused graph in root order (arena memory).
 * Checks that every member's uses stay in its group except the root's. */
ssm_status ssm_groups_collect(ssm_graph *g, ssm_arena *a, ssm_group **out, int *out_count);

/* The values group `gr`'s kernel reads from memory, in first-use order:
 * data tensors (weights, states, inputs; not consts, which are inlined) and
 * other groups' roots, found through views. Returns the count (at most max;
 * -1 if there are more). */
int ssm_group_leaves(ssm_graph *g, const ssm_group *gr, const ssm_value **out, int max);
/* Whether the kernel writes its result only where it reads `leaf`, and
 * reads `leaf` nowhere else: then the result may take leaf's memory. */
int ssm_group_can_overwrite(ssm_graph *g, const ssm_group *gr, const ssm_value *leaf);
/* Activation bytes of a value: its size rounded up to `align`. */
uint64_t ssm_value_bytes(const ssm_value *v, uint32_t align);

/* Called after each pass with its name, the graph and the pass's note. */
typedef void (*ssm_pass_after_fn)(const char *pass, ssm_graph *g, const char *note, void *user);

/* Runs the pipeline on `g`, stopping after pass `stop_after` when it is not
 * NULL (an unknown name is an error listing the passes). Calls `after` (if
 * not NULL) after every pass that ran. */
ssm_status ssm_passes_run(ssm_graph *g, const ssm_pass_opts *o, const char *stop_after,
                          ssm_pass_after_fn after, void *user);

/* ssm_passes_run over another list (ending with {NULL}), with the verifier
 * after every pass when `verify_between` is set (errors: "after pass NAME:
 * <verifier message>"). ssm_passes_run is this on ssm_passes[] with
 * verify_between = SSM_VERIFY_PASSES; tests use it to check the pipeline
 * machinery with passes of their own. */
ssm_status ssm_passes_run_list(const ssm_pass *list, ssm_graph *g, const ssm_pass_opts *o,
                               const char *stop_after, ssm_pass_after_fn after, void *user,
                               int verify_between);

#endif
