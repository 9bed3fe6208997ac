/*
 * groups.c — reading the fused groups that the fuse pass wrote as group=N
 * attributes: which member is the root, which the anchor. Shared by the
 * passes after fuse and by codegen, so the notion is defined once.
 */
#include <string.h>

#include "passes/passes.h"

int ssm_node_group(const ssm_node *n) { return (int)ssm_node_int(n, "group", -1); }

int ssm_node_is_pointwise(const ssm_node *n) {
  ssm_op_kind k = ssm_op_info_get(n->op)->kind;
  if (k == SSM_KIND_UNARY || k == SSM_KIND_BINARY || n->op == SSM_OP_CONCAT) return 1;
  if (n->op == SSM_OP_RMSNORM) {
    const ssm_type *t = &n->args[0]->type;
    return t->dims[t->rank - 1] <= SSM_SMALL_ROW;
  }
  return 0;
}

/* Priority of a member as the kernel's anchor: a matmul yields to another
 * anchor op (a scan that computes a small matmul where it reads it), and a
 * decode conv (one token) to the matmul whose epilogue does it (fuse.c). */
enum { RANK_NONE, RANK_NORM, RANK_DECODE_CONV, RANK_MATMUL, RANK_OTHER };
static int anchor_rank(const ssm_node *n) {
  if (n->op == SSM_OP_RMSNORM) return ssm_node_is_pointwise(n) ? RANK_NONE : RANK_NORM;
  if (n->op == SSM_OP_MATMUL) return RANK_MATMUL;
  if (n->op == SSM_OP_CONV1D && n->result->type.dims[0] == 1) return RANK_DECODE_CONV;
  return ssm_node_is_pointwise(n) || ssm_op_is_view(n->op) ? RANK_NONE : RANK_OTHER;
}

ssm_status ssm_groups_collect(ssm_graph *g, ssm_arena *a, ssm_group **out, int *out_count) {
  *out = NULL;
  *out_count = 0;
  int max = -1;
  for (ssm_node *n = g->first; n; n = n->next) {
    int k = ssm_node_group(n);
    if (k > max) max = k;
  }
  ssm_group *gs = ssm_arena_alloc(a, sizeof *gs * (size_t)(max + 2));
  if (!gs) return ssm_arena_status(a, "the kernel groups");
  for (int i = 0; i <= max; i++) gs[i].id = -1;
  for (ssm_node *n = g->first; n; n = n->next) {
    int k = ssm_node_group(n);
    if (k < 0) continue;
    ssm_group *gr = &gs[k];
    gr->id = k;
    if (!gr->first) gr->first = n;
    /* the root: the last member (members precede their group's users) */
    gr->root = n;
    int r = anchor_rank(n);
    if (r > (gr->anchor ? anchor_rank(gr->anchor) : 0)) {
      if (gr->anchor && gr->anchor->op == SSM_OP_RMSNORM) gr->norm = gr->anchor;
      gr->anchor = n;
    } else if (r == RANK_NORM && gr->anchor) {
      gr->norm = n;
    } else if (r == RANK_OTHER && gr->anchor) {
      return ssm_status_new(SSM_ERR_INTERNAL, "group %d has two anchors (%s and %s)", k,
                            ssm_op_info_get(gr->anchor->op)->name, ssm_op_info_get(n->op)->name);
    }
  }
  /* a small-row norm that is the x of a matmul rounding x is its prologue
   * too (fuse.c, 1): what the products round is x times the gain, the
   * norm's scale after the sums (ops.def), which only a prologue can do on
   * tiles of cooperative matrices */
  for (int k = 0; k <= max; k++) {
    ssm_group *gr = &gs[k];
    const ssm_node *m = gr->anchor;
    if (gr->id < 0 || gr->norm || !m || m->op != SSM_OP_MATMUL ||
        !ssm_dtype_rounds_x(m->args[1]->type.dtype))
      continue;
    ssm_node *x = m->args[0]->def;
    if (x->op == SSM_OP_RMSNORM && ssm_node_group(x) == k) gr->norm = x;
  }
  /* every member but the root is used only inside its group */
  for (ssm_node *n = g->first; n; n = n->next)
    for (int i = 0; i < n->nargs; i++) {
      const ssm_node *d = n->args[i]->def;
      int dg = ssm_node_group(d);
      if (dg < 0 || gs[dg].root == d) continue;
      /* a use through views counts as the view's users' use */
      if (ssm_op_is_view(n->op) && ssm_node_group(n) < 0) continue;
      if (ssm_node_group(n) != dg)
        return ssm_status_new(SSM_ERR_INTERNAL, "%s of group %d is used outside it",
                              ssm_op_info_get(d->op)->name, dg);
    }
  /* in root order: the order the kernels run in */
  ssm_group *ordered = ssm_arena_alloc(a, sizeof *ordered * (size_t)(max + 2));
  if (!ordered) return ssm_arena_status(a, "the kernel groups");
  int n = 0;
  for (ssm_node *x = g->first; x; x = x->next) {
    int k = ssm_node_group(x);
    if (k >= 0 && gs[k].root == x) ordered[n++] = gs[k];
  }
  gs = ordered;
  *out = gs;
  *out_count = n;
  return NULL;
}

uint64_t ssm_value_bytes(const ssm_value *v, uint32_t align) {
  uint64_t b = ssm_type_bytes(&v->type);
  return (b + align - 1) / align * align;
}

static int is_member(const ssm_node *n, const ssm_group *gr) { return ssm_node_group(n) == gr->id; }

static int add_leaf(const ssm_value *v, const ssm_value **out, int *n, int max) {
  for (int i = 0; i < *n; i++)
    if (out[i] == v) return 1;
  if (*n >= max) return 0;
  out[(*n)++] = v;
  return 1;
}

/* Adds the memory that reading `v` inside the group touches (through any
 * chain of views read in place). */
static int collect(const ssm_group *gr, const ssm_value *v, const ssm_value **out, int *n, int max) {
  while (ssm_op_is_view(v->def->op) && ssm_node_group(v->def) < 0 && !is_member(v->def, gr))
    v = v->def->args[0];
  if (is_member(v->def, gr) || v->def->op == SSM_OP_CONST) return 1;
  return add_leaf(v, out, n, max);
}

int ssm_group_leaves(ssm_graph *g, const ssm_group *gr, const ssm_value **out, int max) {
  int n = 0;
  for (ssm_node *m = gr->first; m; m = m == gr->root ? NULL : m->next) {
    if (!is_member(m, gr)) continue;
    for (int i = 0; i < m->nargs; i++)
      if (!collect(gr, m->args[i], out, &n, max)) return -1;
  }
  return n;
}

typedef struct {
  const ssm_group *gr;
  const ssm_value *leaf;
  int same_index, elsewhere;
} overwrite_walk;

/* Walks member `m`'s operands; `ident` says m is evaluated at the root's own
 * index (an epilogue member of the root's shape). */
static void walk(overwrite_walk *w, const ssm_node *m, int ident, int depth) {
  SSM_ASSERT(depth < 256);
  ssm_op_kind k = ssm_op_info_get(m->op)->kind;
  int elementwise = k == SSM_KIND_UNARY || k == SSM_KIND_BINARY;
  for (int i = 0; i < m->nargs; i++) {
    const ssm_value *v = m->args[i];
    const ssm_node *d = v->def;
    int same = ident && elementwise && ssm_type_equal(&v->type, &w->gr->root->result->type);
    if (d == w->gr->anchor && m != w->gr->anchor) continue; /* the anchor's result: acc */
    if (is_member(d, w->gr)) {
      walk(w, d, same && d != w->gr->anchor, depth + 1);
    } else if (v == w->leaf) {
      if (same) w->same_index = 1;
      else w->elsewhere = 1;
    } else if (ssm_op_is_view(d->op) && ssm_node_group(d) < 0) {
      /* read through a view: not at the root's index */
      const ssm_node *x = d;
      while (ssm_op_is_view(x->op) && ssm_node_group(x) < 0) {
        if (x->args[0] == w->leaf) w->elsewhere = 1;
        x = x->args[0]->def;
      }
    }
  }
}

int ssm_group_can_overwrite(ssm_graph *g, const ssm_group *gr, const ssm_value *leaf) {
  overwrite_walk w = {gr, leaf, 0, 0};
  if (gr->root == gr->anchor) return 0; /* no epilogue: the anchor reads it all */
  walk(&w, gr->root, 1, 0);
  if (gr->anchor) walk(&w, gr->anchor, 0, 0);
  /* members reachable from neither (cannot happen) would be missed: be safe */
  for (ssm_node *m = gr->first; m; m = m == gr->root ? NULL : m->next)
    if (is_member(m, gr) && m->op == SSM_OP_RMSNORM) walk(&w, m, 0, 0);
  return w.same_index && !w.elsewhere;
}
