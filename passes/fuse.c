/*
 * fuse.c — decides which ops run together in one kernel, and writes it as
 * group=N on every node that does work.
 *
 * The patterns, in the order they are applied:
 *   1. norm prologue: an rmsnorm whose only use is a matmul's x joins that
 *      matmul (the kernel normalizes rows as it reads them);
 *   2. anchors: every other non-pointwise op (matmul, scan, conv1d_causal,
 *      attention, embed, reduce, softmax, argmax, sample, large-row rmsnorm) starts a
 *      group (the state operands of scan, conv1d_causal and attention must be
 *      state tensors: the kernel updates them in place);
 *   3. epilogues: an elementwise op that is the only use of a group's result,
 *      with that result's shape, joins the group (bias, softplus, residual
 *      add, SiLU after conv, the scan's D skip and gate);
 *   4. operands: walking backwards, a pointwise op (elementwise, concat,
 *      small-row rmsnorm) all of whose uses — looking through views — are in
 *      one group joins it, so it is computed where it is read (the scan's
 *      exp(dt*A) and dt*B*x, Falcon's B and C norms); so does a small
 *      matmul (at most SMALL_ROWS rows of at most SMALL_K: decode's dt_proj)
 *      whose uses all lead, through pointwise ops, to a scan and are in its
 *      group: each element a dot product of K terms there, which saves a
 *      dispatch per layer (such a matmul is not made an anchor in 2; if it
 *      cannot join, it gets a group of its own in 5);
 *   5. whatever is left gets a group of its own, and views that must exist
 *      in memory (a graph output) are materialized.
 * With no_fuse, every op that does work is a group of its own (views are
 * still read in place), which is what the fused result is tested against.
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

/* Puts node k into group `gr` (-1: a new group); returns the group. */
static int join(fuser *f, int k, int gr) {
  if (gr < 0) {
    gr = (int)f->members.n;
    ssm_vec_push(&f->members, 0);
    const ssm_node *n = f->nodes[k];
    ssm_vec_push(&f->anchor, ssm_node_is_pointwise(n) || ssm_op_is_view(n->op) ? -1 : k);
  }
  f->group[k] = gr;
  f->members.items[gr]++;
  return gr;
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

static ssm_status build(fuser *f, ssm_graph *g) {
  ssm_graph_number(g);
  f->g = g;
  for (ssm_node *n = g->first; n; n = n->next) f->count++;
  f->nodes = ssm_xcalloc((size_t)f->count, sizeof *f->nodes);
  f->group = ssm_xcalloc((size_t)f->count, sizeof(int));
  f->evals = ssm_xcalloc((size_t)f->count, sizeof(int));
  f->idx_of = ssm_xcalloc((size_t)g->nvalues + 1, sizeof(int));
  f->users = ssm_xcalloc((size_t)g->nvalues + 1, sizeof *f->users);
  int k = 0;
  for (ssm_node *n = g->first; n; n = n->next, k++) {
    f->nodes[k] = n;
    f->group[k] = -1;
    f->evals[k] = 1;
    if (n->result) f->idx_of[n->result->id] = k;
  }
  for (k = 0; k < f->count; k++) {
    const ssm_node *n = f->nodes[k];
    for (int i = 0; i < n->nargs; i++) ssm_vec_push(&f->users[n->args[i]->id], k);
  }
  return NULL;
}

static void release(fuser *f) {
  if (f->users)
    for (int i = 0; i <= f->g->nvalues; i++) ssm_vec_free(&f->users[i]);
  free(f->users);
  free(f->idx_of);
  free(f->group);
  free(f->evals);
  ssm_vec_free(&f->members);
  ssm_vec_free(&f->anchor);
  free(f->nodes);
}

static void assign(fuser *f, int no_fuse) {
  int *norm_of = ssm_xcalloc((size_t)f->count, sizeof(int));
  for (int k = 0; k < f->count; k++) norm_of[k] = -1;
  /* 1. norm prologues */
  for (int k = 0; k < f->count && !no_fuse; k++) {
    const ssm_node *m = f->nodes[k];
    if (m->op != SSM_OP_MATMUL) continue;
    const ssm_node *x = m->args[0]->def;
    if (x->op == SSM_OP_RMSNORM && !ssm_node_is_pointwise(x) && f->users[x->result->id].n == 1)
      norm_of[index_of(f, x)] = k;
  }
  /* 2. anchors (and, with no_fuse, every op that does work) */
  for (int k = 0; k < f->count; k++) {
    const ssm_node *n = f->nodes[k];
    if (is_data(n) || is_sink(n) || ssm_op_is_view(n->op) || norm_of[k] >= 0) continue;
    /* a matmul with a norm prologue is always an anchor */
    int prologue = n->op == SSM_OP_MATMUL && n->args[0]->def->result &&
                   norm_of[index_of(f, n->args[0]->def)] == k;
    if (no_fuse ||
        (!ssm_node_is_pointwise(n) && (prologue || !scan_operand(f, k))))
      join(f, k, -1);
  }
  for (int k = 0; k < f->count; k++)
    if (norm_of[k] >= 0) join(f, k, f->group[norm_of[k]]);
  free(norm_of);
  if (no_fuse) return;
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
  /* 4. operands, backwards; 5. the rest */
  for (int k = f->count - 1; k >= 0; k--) {
    const ssm_node *n = f->nodes[k];
    if (is_data(n) || is_sink(n) || ssm_op_is_view(n->op) || f->group[k] >= 0) continue;
    int ug = users_group(f, k, 0), evals = ug >= 0 ? users_evals(f, k, 0) : 1;
    if (ug >= 0 && n->op == SSM_OP_MATMUL &&
        (f->anchor.items[ug] < 0 || f->nodes[f->anchor.items[ug]]->op != SSM_OP_SCAN))
      ug = -1;
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
  ssm_status s = build(&f, g);
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
  int *root = ssm_xcalloc((size_t)ngroups + 1, sizeof(int));
  int *renum = ssm_xcalloc((size_t)ngroups + 1, sizeof(int));
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
