/*
 * fuse.c — decides which ops run together in one kernel, and writes it as
 * group=N on every node that does work.
 *
 * The patterns, in the order they are applied:
 *   1. norm prologue: a large-row rmsnorm whose only use is a matmul's x
 *      joins that matmul (the kernel normalizes rows as it reads them); so
 *      does an rmsnorm of any row before a small matmul that a scan computes
 *      (4: Falcon-Mamba's dt norm), going wherever that matmul goes, and
 *      one of any row before a matmul that rounds x (a 16-bit weight), with
 *      no_fuse too: what such a matmul rounds is x times the norm's gain,
 *      before the norm's scale (ops.def), which the prologue does;
 *   2. anchors: every other non-pointwise op (matmul, scan, conv1d_causal,
 *      attention, embed, reduce, softmax, argmax, sample, large-row rmsnorm) starts a
 *      group (the state operands of scan, conv1d_causal and attention must be
 *      state tensors: the kernel updates them in place);
 *   3. epilogues: an elementwise op that is the only use of a group's result,
 *      with that result's shape, joins the group (bias, softplus, residual
 *      add, SiLU after conv, the scan's D skip and gate); and a decode
 *      conv (one token) joins the matmul that computes its input, which
 *      does it in its epilogue (fold_convs, below);
 *   4. operands: walking backwards, a pointwise op (elementwise, concat,
 *      small-row rmsnorm) all of whose uses — looking through views — are in
 *      one group joins it, so it is computed where it is read (the scan's
 *      exp(dt*A) and dt*B*x, Falcon's B and C norms); so does a small
 *      matmul (at most SMALL_ROWS rows of at most SMALL_K: decode's dt_proj)
 *      whose uses all lead, through pointwise ops, to a scan and are in its
 *      group: each element a dot product of K terms there, which saves a
 *      dispatch per layer (such a matmul is not made an anchor in 2; if it
 *      cannot join, it gets a group of its own in 5); but an op that
 *      computes a GEMM's x (or its norm prologue's), more than
 *      SSM_MATMUL_MAX_ROWS rows, stays out: the GEMM reads every element of
 *      x once per block of columns, and reads it fastest from memory (Mamba-2's
 *      gate before its gated norm, an MLP's act(gate) * up);
 *   5. whatever is left gets a group of its own, and views that must exist
 *      in memory (a graph output) are materialized.
 * With no_fuse, every op that does work is a group of its own (views are
 * still read in place), but for the norm prologues of matmuls that round x
 * (1), which is what the fused result is tested against.
 *
 * Two limits keep kernels finite: a group has at most MAX_MEMBERS ops, and an
 * operand op joins (4) only while the kernel evaluates it at most MAX_EVALS
 * times per element (codegen inlines a pointwise op at every use, so a chain
 * of x = add(x, x) would otherwise grow the kernel exponentially).
 */
#include <string.h>

#include "passes/passes.h"

#define MAX_MEMBERS 64
#define MAX_EVALS 8
#define SMALL_ROWS 4
/* a scan computes such a matmul once per row and step before its time loop
 * (codegen's matmul_helper), so K up to dt_proj's 256 of falcon-mamba-7b */
#define SMALL_K 256

typedef SSM_VEC(int) int_vec;

/* A decode conv folded into the matmul before it (fold_convs). */
#define FOLD_NODES 32
typedef struct {
  const ssm_node *r;                /* the matmul's value the slices cut */
  const ssm_node *nodes[FOLD_NODES]; /* the convs and the ops after them, then the concat */
  int n;
} fold;
typedef SSM_VEC(fold) fold_vec;

typedef struct {
  ssm_graph *g;
  ssm_node **nodes; /* in order */
  int count;
  int *group;       /* per node index, -1 none */
  int *idx_of;      /* value id -> node index */
  int_vec *users;   /* value id -> node indices using it (with repeats) */
  int *evals;       /* per node index: times its group's kernel evaluates it */
  int_vec members;  /* per group: ops in it (grown as groups are made) */
  int_vec anchor;   /* per group: the node index of its anchor, -1 none */
  fold_vec folds;   /* decode convs folded into matmuls (fold_convs) */
  int *folded;      /* per node index: 1 + the fold it belongs to, 0 none */
  int *norm_of;     /* per node index: the matmul whose prologue it is, -1 none (assign) */
  ssm_status nomem; /* the first failure to grow members or anchor (join) */
} fuser;

/* A matmul that may be computed where it is read (4): few rows, small K. */
static int small_matmul(const ssm_node *n) {
  if (n->op != SSM_OP_MATMUL) return 0;
  int64_t K = n->args[1]->type.dims[1];
  return K <= SMALL_K && ssm_type_numel(&n->args[0]->type) <= SMALL_ROWS * K;
}

static int is_data(const ssm_node *n) { return ssm_op_info_get(n->op)->kind == SSM_KIND_SRC; }
static int is_sink(const ssm_node *n) { return ssm_op_info_get(n->op)->kind == SSM_KIND_SINK; }
static int index_of(const fuser *f, const ssm_node *n) { return f->idx_of[n->result->id]; }

static int same_shape(const ssm_type *a, const ssm_type *b) {
  if (a->rank != b->rank) return 0;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return 0;
  return 1;
}

/* The group all users of node k belong to, looking through ungrouped views;
 * -1 if some user is ungrouped (a sink, or not decided) or they differ. */
static int users_group(const fuser *f, int k, int depth) {
  const ssm_node *n = f->nodes[k];
  if (!n->result || depth > 64) return -1;
  const int_vec *users = &f->users[n->result->id];
  int g = -2;
  if (!users->n) return -1;
  for (size_t u = 0; u < users->n; u++) {
    int j = users->items[u];
    const ssm_node *user = f->nodes[j];
    int ug = ssm_op_is_view(user->op) && f->group[j] < 0 ? users_group(f, j, depth + 1)
                                                          : f->group[j];
    if (ug < 0 || (g >= 0 && ug != g)) return -1;
    g = ug;
  }
  return g;
}

/* How often the kernel of the users' group would evaluate node k if it
 * joined: the sum over its uses (through ungrouped views) of theirs. */
static int users_evals(const fuser *f, int k, int depth) {
  const ssm_node *n = f->nodes[k];
  if (!n->result || depth > 64) return MAX_EVALS + 1;
  const int_vec *users = &f->users[n->result->id];
  int sum = 0;
  for (size_t u = 0; u < users->n && sum <= MAX_EVALS; u++) {
    int j = users->items[u];
    const ssm_node *user = f->nodes[j];
    /* a matmul member reads K of its x per element it computes */
    int64_t per = user->op == SSM_OP_MATMUL && f->group[j] >= 0 &&
                          f->anchor.items[f->group[j]] != j
                      ? user->args[1]->type.dims[1]
                      : 1;
    sum += ssm_op_is_view(user->op) && f->group[j] < 0 ? users_evals(f, j, depth + 1)
           : per > MAX_EVALS                          ? MAX_EVALS + 1
                                                      : f->evals[j] * (int)per;
  }
  return sum;
}

/* Whether node k computes the x of group gr's anchor, a matmul of more
 * than SSM_MATMUL_MAX_ROWS rows, or the x of that matmul's norm prologue
 * (step 4 keeps it out). */
static int computes_gemm_x(const fuser *f, int k, int gr) {
  int a = f->anchor.items[gr];
  const ssm_node *m = a >= 0 ? f->nodes[a] : NULL;
  if (!m || m->op != SSM_OP_MATMUL ||
      ssm_type_numel(&m->args[0]->type) / m->args[1]->type.dims[1] <= SSM_MATMUL_MAX_ROWS)
    return 0;
  const ssm_value *v = f->nodes[k]->result;
  const ssm_node *x = m->args[0]->def;
  return m->args[0] == v || (f->norm_of[index_of(f, x)] == a && x->args[0] == v);
}

/* Puts node k into group `gr` (-1: a new group). Out of memory for a new
 * group, it stays out of any and f->nomem says so. */
static void join(fuser *f, int k, int gr) {
  if (gr < 0) {
    const ssm_node *n = f->nodes[k];
    ssm_status s = ssm_vec_reserve(&f->members, 1);
    if (!s) s = ssm_vec_push(&f->anchor, ssm_node_is_pointwise(n) || ssm_op_is_view(n->op) ? -1 : k);
    if (s) {
      if (f->nomem) ssm_status_free(s);
      else f->nomem = ssm_status_wrap(s, "the kernel groups");
      return;
    }
    gr = (int)f->members.n;
    f->members.items[f->members.n++] = 0;
  }
  f->group[k] = gr;
  f->members.items[gr]++;
}

/* Whether every use of node k, through views and pointwise ops, ends in a
 * scan over S rows of state (a state [S, N]; decode's dt_proj: add the bias,
 * softplus, then the scan's dt), the scan kernel's rows being what it
 * computes such a matmul for (codegen's matmul_helper). */
static int feeds_scan(const fuser *f, int k, int64_t S, int depth) {
  const ssm_node *n = f->nodes[k];
  const int_vec *users = &f->users[n->result->id];
  if (!users->n || depth > 16) return 0;
  for (size_t u = 0; u < users->n; u++) {
    int j = users->items[u];
    const ssm_node *user = f->nodes[j];
    if (user->op == SSM_OP_SCAN && user->nargs > 3 && user->args[3]->type.rank == 2 &&
        user->args[3]->type.dims[0] == S)
      continue;
    if (!(ssm_op_is_view(user->op) || ssm_node_is_pointwise(user)) || !user->result ||
        !feeds_scan(f, j, S, depth + 1))
      return 0;
  }
  return 1;
}

/* A small matmul [T, K] x [S, K] whose uses all end in a scan over S rows. */
static int scan_operand(const fuser *f, int k) {
  const ssm_node *n = f->nodes[k];
  return small_matmul(n) && n->result->type.rank == 2 && n->args[0]->type.rank == 2 &&
         feeds_scan(f, k, n->result->type.dims[1], 0);
}

/* ---- decode convs folded into the matmul before them ----------------------
 *
 * With one token, a causal conv's output at channel c needs only its input
 * at c and column c of its state, so the kernel of the matmul computing that
 * input (in_proj) can do the conv in its epilogue, on the thread that
 * finishes column c, and update column c of the state there: a dispatch
 * less per layer. A kernel has one result, so the matmul's value R, read
 * only through slices that cut its last axis in order ([x | z] in Mamba-1,
 * [z | xBC | dt] in Mamba-2), is rewritten as C = concat of one piece per
 * slice: for a slice that a conv reads, the conv and the elementwise ops
 * after it (its SiLU); for another, the slice itself. Every other reader
 * then reads a slice of C at the same place. assign() puts the conv chains
 * and C into R's group (3b); codegen evaluates the conv in the epilogue. */

#define MAX_PIECES 16

/* The uses of every value of the graph as it was before any fold (values
 * and nodes a fold adds are never asked about), with the node positions:
 * built once, so folding a graph of any depth takes linear time. */
typedef struct {
  ssm_node *node;
  int pos;
} use;
typedef SSM_VEC(use) use_vec;
typedef struct {
  use_vec *users; /* per value id */
  int *pos;       /* per value id: its node's position */
  int nvalues;
} folder;

/* The nodes that use v (up to max stored), and how many uses there are;
 * more than max for a value the index does not know. */
static int users_of(const folder *fo, const ssm_value *v, use *out, int max) {
  if (v->id < 0 || v->id >= fo->nvalues) return max + 1;
  const use_vec *u = &fo->users[v->id];
  for (size_t i = 0; i < u->n && (int)i < max; i++) out[i] = u->items[i];
  return (int)u->n;
}

static int pos_of(const folder *fo, const ssm_node *n) { return fo->pos[n->result->id]; }

/* Whether v is a weight or a constant, read through views. */
static int fixed_value(const ssm_value *v) {
  while (ssm_op_is_view(v->def->op)) v = v->def->args[0];
  return v->def->op == SSM_OP_WEIGHT || v->def->op == SSM_OP_CONST;
}

static int elementwise(const ssm_node *n) {
  ssm_op_kind k = ssm_op_info_get(n->op)->kind;
  return k == SSM_KIND_UNARY || k == SSM_KIND_BINARY;
}

/* The operand of elementwise n that is not a weight or constant (the one a
 * chain runs through), or NULL when there is not exactly one. */
static ssm_value *chain_operand(const ssm_node *n) {
  ssm_value *v = NULL;
  for (int i = 0; i < n->nargs; i++) {
    if (fixed_value(n->args[i])) continue;
    if (v) return NULL;
    v = n->args[i];
  }
  return v;
}

/* Whether R's value is a matmul's, maybe through an epilogue chain (ops
 * used once, of the same shape) that step 3 will join to it. */
static int matmul_value(const folder *fo, const ssm_node *r) {
  for (int d = 0; d < 8; d++) {
    if (r->op == SSM_OP_MATMUL) return 1;
    use u[2];
    const ssm_value *v = elementwise(r) ? chain_operand(r) : NULL;
    if (!v || users_of(fo, v, u, 2) != 1 || !same_shape(&v->type, &r->result->type)) return 0;
    r = v->def;
  }
  return 0;
}

/* A decode conv reading slice s as its input, or NULL. */
static ssm_node *decode_conv(const folder *fo, const ssm_node *s) {
  use u[2];
  if (users_of(fo, s->result, u, 2) != 1) return NULL;
  ssm_node *cv = u[0].node;
  if (cv->op != SSM_OP_CONV1D || cv->args[0] != s->result) return NULL;
  const ssm_type *t = &cv->result->type;
  return t->rank == 2 && t->dims[0] == 1 && cv->args[1]->def->op == SSM_OP_STATE &&
                 !ssm_node_int(cv, "batch", 0)
             ? cv
             : NULL;
}

/* Folds the decode convs reading slices of R's value (see above); adds the
 * fold to `out` when it does. */
static ssm_status fold_at(ssm_graph *g, const folder *fo, ssm_node *r, fold_vec *out) {
  const ssm_type *rt = &r->result->type;
  if (rt->rank != 2 || rt->dims[0] != 1 || !matmul_value(fo, r)) return NULL;
  use cu[MAX_PIECES + 1];
  ssm_node *cut[MAX_PIECES];
  int ncut = users_of(fo, r->result, cu, MAX_PIECES + 1);
  if (ncut < 2 || ncut > MAX_PIECES) return NULL;
  /* slices of the last axis, put in order of start, cutting it exactly */
  for (int i = 0; i < ncut; i++) {
    cut[i] = cu[i].node;
    if (cut[i]->op != SSM_OP_SLICE || ssm_node_int(cut[i], "axis", -1) != 1) return NULL;
  }
  for (int i = 1; i < ncut; i++)
    for (int j = i; j > 0 && ssm_node_int(cut[j], "start", 0) <
                                 ssm_node_int(cut[j - 1], "start", 0); j--) {
      ssm_node *t = cut[j];
      cut[j] = cut[j - 1];
      cut[j - 1] = t;
    }
  int64_t at = 0;
  for (int i = 0; i < ncut; i++) {
    if (ssm_node_int(cut[i], "start", -1) != at) return NULL;
    at += ssm_node_int(cut[i], "len", 0);
  }
  if (at != rt->dims[1]) return NULL;
  /* each piece: the slice, or its conv and the ops after it */
  fold fd = {.r = r};
  ssm_value *piece[MAX_PIECES];
  ssm_node *last = cut[0];
  for (int i = 0; i < ncut; i++)
    if (pos_of(fo, cut[i]) > pos_of(fo, last)) last = cut[i];
  int convs = 0;
  for (int i = 0; i < ncut; i++) {
    ssm_node *p = decode_conv(fo, cut[i]);
    piece[i] = cut[i]->result;
    if (!p || fd.n + 1 >= FOLD_NODES) continue;
    convs++;
    fd.nodes[fd.n++] = p;
    for (;;) {
      use u[2];
      if (users_of(fo, p->result, u, 2) != 1 || !elementwise(u[0].node) || fd.n + 1 >= FOLD_NODES ||
          chain_operand(u[0].node) != p->result ||
          !same_shape(&u[0].node->result->type, &p->result->type))
        break;
      p = u[0].node;
      fd.nodes[fd.n++] = p;
    }
    piece[i] = p->result;
    if (pos_of(fo, p) > pos_of(fo, last)) last = p;
  }
  if (!convs) return NULL;
  /* every other reader of a piece must come after the concat */
  for (int i = 0; i < ncut; i++) {
    use u[64];
    int nu = users_of(fo, piece[i], u, 64);
    if (nu > 64) return NULL;
    for (int j = 0; j < nu; j++)
      if (u[j].pos <= pos_of(fo, last)) return NULL;
  }
  /* the reserve first: past the graph's first change, nothing may fail */
  SSM_TRY(ssm_status_wrap(ssm_vec_reserve(out, 1), "the folded convolutions"));
  ssm_node *concat = ssm_graph_insert(g, last->next, SSM_OP_CONCAT, rt, ncut, piece);
  if (!concat) return ssm_graph_status(g);
  ssm_node_set_int(g, concat, "axis", 1);
  ssm_node *before = concat->next;
  for (int i = 0; i < ncut; i++) {
    use u[64];
    int nu = users_of(fo, piece[i], u, 64);
    ssm_node *s = ssm_graph_insert(g, before, SSM_OP_SLICE, &piece[i]->type, 1, &concat->result);
    if (!s) return ssm_graph_status(g);
    ssm_node_set_int(g, s, "axis", 1);
    ssm_node_set_int(g, s, "start", ssm_node_int(cut[i], "start", 0));
    ssm_node_set_int(g, s, "len", ssm_node_int(cut[i], "len", 0));
    for (int j = 0; j < nu; j++)
      for (int a = 0; a < u[j].node->nargs; a++)
        if (u[j].node->args[a] == piece[i]) u[j].node->args[a] = s->result;
  }
  fd.nodes[fd.n++] = concat;
  out->items[out->n++] = fd;
  return NULL;
}

static ssm_status fold_convs(ssm_graph *g, fold_vec *out) {
  ssm_graph_number(g);
  folder fo = {.nvalues = g->nvalues};
  ssm_status st = ssm_alloc((size_t)g->nvalues + 1, sizeof *fo.users, (void **)&fo.users);
  if (!st) st = ssm_alloc((size_t)g->nvalues + 1, sizeof(int), (void **)&fo.pos);
  int pos = 0;
  for (ssm_node *n = g->first; n && !st; n = n->next, pos++) {
    if (n->result) fo.pos[n->result->id] = pos;
    for (int i = 0; i < n->nargs && !st; i++) st = ssm_vec_push(&fo.users[n->args[i]->id], ((use){n, pos}));
  }
  st = ssm_status_wrap(st, "the uses of values");
  const ssm_node *done = NULL; /* the R last folded (its other convs went with it) */
  for (ssm_node *n = g->first; n && !st; n = n->next) {
    if (n->op != SSM_OP_CONV1D || !n->result || n->result->id < 0) continue;
    const ssm_node *s = n->args[0]->def;
    if (s->op != SSM_OP_SLICE || decode_conv(&fo, s) != n || s->args[0]->def == done) continue;
    size_t before = out->n;
    st = fold_at(g, &fo, s->args[0]->def, out);
    if (out->n > before) done = s->args[0]->def;
  }
  for (int i = 0; fo.users && i <= g->nvalues; i++) ssm_vec_free(&fo.users[i]);
  free(fo.users);
  free(fo.pos);
  return st;
}

static ssm_status build(fuser *f, ssm_graph *g) {
  ssm_graph_number(g);
  f->g = g;
  for (ssm_node *n = g->first; n; n = n->next) f->count++;
  size_t count = (size_t)f->count, nv = (size_t)g->nvalues + 1;
  ssm_status s = ssm_alloc(count, sizeof *f->nodes, (void **)&f->nodes);
  if (!s) s = ssm_alloc(count, sizeof(int), (void **)&f->group);
  if (!s) s = ssm_alloc(count, sizeof(int), (void **)&f->evals);
  if (!s) s = ssm_alloc(nv, sizeof(int), (void **)&f->idx_of);
  if (!s) s = ssm_alloc(count, sizeof(int), (void **)&f->folded);
  if (!s) s = ssm_alloc(count, sizeof(int), (void **)&f->norm_of);
  if (!s) s = ssm_alloc(nv, sizeof *f->users, (void **)&f->users);
  SSM_TRY(ssm_status_wrap(s, "the fusion pass's tables of %d ops", f->count));
  int k = 0;
  for (ssm_node *n = g->first; n; n = n->next, k++) {
    f->nodes[k] = n;
    f->group[k] = -1;
    f->evals[k] = 1;
    if (n->result) f->idx_of[n->result->id] = k;
  }
  for (k = 0; k < f->count; k++) {
    const ssm_node *n = f->nodes[k];
    for (int i = 0; i < n->nargs; i++)
      SSM_TRY(ssm_status_wrap(ssm_vec_push(&f->users[n->args[i]->id], k), "the uses of values"));
  }
  for (size_t i = 0; i < f->folds.n; i++)
    for (int j = 0; j < f->folds.items[i].n; j++)
      f->folded[index_of(f, f->folds.items[i].nodes[j])] = (int)i + 1;
  return NULL;
}

static void release(fuser *f) {
  if (f->users)
    for (int i = 0; i <= f->g->nvalues; i++) ssm_vec_free(&f->users[i]);
  free(f->users);
  free(f->idx_of);
  free(f->group);
  free(f->evals);
  free(f->folded);
  free(f->norm_of);
  ssm_status_free(f->nomem);
  ssm_vec_free(&f->folds);
  ssm_vec_free(&f->members);
  ssm_vec_free(&f->anchor);
  free(f->nodes);
}

static void assign(fuser *f, int no_fuse) {
  int *norm_of = f->norm_of;
  for (int k = 0; k < f->count; k++) norm_of[k] = -1;
  /* 1. norm prologues: of a large row; or of any row, before a matmul that
   * a scan computes (Falcon-Mamba's dt norm), which goes where it goes; or
   * of any row before a matmul that rounds x, even with no_fuse: the pair
   * defines what is rounded (ops.def: x times the gain) */
  for (int k = 0; k < f->count; k++) {
    const ssm_node *m = f->nodes[k];
    if (m->op != SSM_OP_MATMUL) continue;
    const ssm_node *x = m->args[0]->def;
    int rounds = ssm_dtype_rounds_x(m->args[1]->type.dtype);
    if (x->op == SSM_OP_RMSNORM && f->users[x->result->id].n == 1 &&
        (rounds || (!no_fuse && (!ssm_node_is_pointwise(x) || scan_operand(f, k)))))
      norm_of[index_of(f, x)] = k;
  }
  /* 2. anchors (and, with no_fuse, every op that does work) */
  for (int k = 0; k < f->count; k++) {
    const ssm_node *n = f->nodes[k];
    if (is_data(n) || is_sink(n) || ssm_op_is_view(n->op) || norm_of[k] >= 0 ||
        (f->folded[k] && !no_fuse))
      continue;
    /* a matmul that a scan computes (with its norm prologue, if any) is
     * not an anchor: it joins the scan in 4 */
    if (no_fuse || (!ssm_node_is_pointwise(n) && !scan_operand(f, k))) join(f, k, -1);
  }
  for (int k = 0; k < f->count; k++) /* the others' join them in 4 */
    if (norm_of[k] >= 0 && f->group[norm_of[k]] >= 0) join(f, k, f->group[norm_of[k]]);
  if (no_fuse) {
    return;
  }
  /* 3. epilogues */
  for (int k = 0; k < f->count; k++) {
    const ssm_node *a = f->nodes[k];
    if (f->group[k] < 0 || ssm_node_is_pointwise(a) || a->op == SSM_OP_ARGMAX ||
        a->op == SSM_OP_SAMPLE || a->op == SSM_OP_TOPK)
      continue;
    if (a->op == SSM_OP_RMSNORM) { /* a norm prologue is not a group's result */
      int mine = 1;
      for (int j = k + 1; j < f->count; j++)
        if (f->group[j] == f->group[k]) mine = 0;
      if (!mine) continue;
    }
    const ssm_node *r = a;
    for (;;) {
      const int_vec *users = &f->users[r->result->id];
      if (users->n != 1) break;
      int j = users->items[0];
      const ssm_node *u = f->nodes[j];
      ssm_op_kind kind = ssm_op_info_get(u->op)->kind;
      if ((kind != SSM_KIND_UNARY && kind != SSM_KIND_BINARY) || f->group[j] >= 0 ||
          !same_shape(&u->result->type, &r->result->type) ||
          f->members.items[f->group[k]] >= MAX_MEMBERS)
        break;
      join(f, j, f->group[k]);
      r = u;
    }
  }
  /* 3b. decode convs into the matmul's epilogue: R must end its group as
   * step 3 left it; else the conv is a kernel of its own after all */
  for (size_t i = 0; i < f->folds.n; i++) {
    const fold *fd = &f->folds.items[i];
    int r = index_of(f, fd->r), gr = f->group[r];
    int ok = gr >= 0 && f->anchor.items[gr] >= 0 &&
             f->nodes[f->anchor.items[gr]]->op == SSM_OP_MATMUL &&
             f->members.items[gr] + fd->n <= MAX_MEMBERS;
    for (int k = r + 1; k < f->count && ok; k++) ok = f->group[k] != gr;
    for (int j = 0; j < fd->n; j++) {
      int k = index_of(f, fd->nodes[j]);
      const ssm_node *n = f->nodes[k];
      if (ok) join(f, k, gr);
      else if (n->op == SSM_OP_CONV1D) join(f, k, -1);
      else if (n->op != SSM_OP_CONCAT) join(f, k, f->group[index_of(f, chain_operand(n)->def)]);
    }
  }
  /* 4. operands, backwards; 5. the rest */
  for (int k = f->count - 1; k >= 0; k--) {
    const ssm_node *n = f->nodes[k];
    if (is_data(n) || is_sink(n) || ssm_op_is_view(n->op) || f->group[k] >= 0) continue;
    if (norm_of[k] >= 0) { /* its matmul's prologue, wherever that went */
      join(f, k, f->group[norm_of[k]]);
      continue;
    }
    int ug = users_group(f, k, 0), evals = ug >= 0 ? users_evals(f, k, 0) : 1;
    if (ug >= 0 && n->op == SSM_OP_MATMUL &&
        (f->anchor.items[ug] < 0 || f->nodes[f->anchor.items[ug]]->op != SSM_OP_SCAN))
      ug = -1;
    if (ug >= 0 && computes_gemm_x(f, k, ug)) ug = -1;
    if (ug < 0 || f->members.items[ug] >= MAX_MEMBERS || evals > MAX_EVALS) {
      join(f, k, -1);
    } else {
      join(f, k, ug);
      f->evals[k] = evals;
    }
  }
}

/* Views that a sink reads get materialized by a copy kernel of their own. */
static void materialize_sink_views(fuser *f) {
  for (int k = 0; k < f->count; k++) {
    const ssm_node *n = f->nodes[k];
    if (!is_sink(n)) continue;
    for (int i = 0; i < n->nargs; i++) {
      const ssm_node *d = n->args[i]->def;
      int j = index_of(f, d);
      if (ssm_op_is_view(d->op) && f->group[j] < 0) join(f, j, -1);
    }
  }
}

static ssm_status check_state_operands(const fuser *f) {
  for (int k = 0; k < f->count; k++) {
    const ssm_node *n = f->nodes[k];
    int si[2], ns = ssm_op_state_operands(n->op, si);
    for (int j = 0; j < ns; j++)
      if (n->args[si[j]]->def->op != SSM_OP_STATE)
        return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: its state operand must be a state "
                              "tensor itself, not %s", ssm_op_info_get(n->op)->name,
                              ssm_op_info_get(n->args[si[j]]->def->op)->name);
  }
  return NULL;
}

ssm_status ssm_pass_fuse(ssm_graph *g, const ssm_pass_opts *o, char *note, size_t note_size) {
  fuser f = {0};
  ssm_status s = o && o->no_fuse ? NULL : fold_convs(g, &f.folds);
  if (!s) s = build(&f, g);
  if (!s) s = check_state_operands(&f);
  if (s) {
    release(&f);
    return s;
  }
  int work = 0;
  for (int k = 0; k < f.count; k++) {
    const ssm_node *n = f.nodes[k];
    work += !is_data(n) && !is_sink(n) && n->op != SSM_OP_RESHAPE;
  }
  assign(&f, o && o->no_fuse);
  materialize_sink_views(&f);
  /* number groups in the order their roots (last members) run */
  int ngroups = (int)f.members.n;
  int *root = NULL, *renum = NULL;
  s = f.nomem;
  f.nomem = NULL;
  if (!s) s = ssm_alloc((size_t)ngroups + 1, sizeof(int), (void **)&root);
  if (!s) s = ssm_alloc((size_t)ngroups + 1, sizeof(int), (void **)&renum);
  if (s) {
    free(root);
    release(&f);
    return ssm_status_wrap(s, "numbering the kernel groups");
  }
  for (int i = 0; i < ngroups; i++) root[i] = -1;
  for (int k = 0; k < f.count; k++)
    if (f.group[k] >= 0) root[f.group[k]] = k;
  int next = 0;
  for (int k = 0; k < f.count; k++)
    if (f.group[k] >= 0 && root[f.group[k]] == k) renum[f.group[k]] = next++;
  for (int k = 0; k < f.count; k++)
    if (f.group[k] >= 0) ssm_node_set_int(g, f.nodes[k], "group", renum[f.group[k]]);
  snprintf(note, note_size, "%d ops that do work -> %d kernels%s", work, next,
           o && o->no_fuse ? " (fusion off)" : "");
  free(root);
  free(renum);
  release(&f);
  return NULL;
}
