/*
 * plan_buffers.c — places every value that lives in activation memory (the
 * graph's inputs and each kernel's result) at a byte offset of one pool,
 * written as ofs=N. Kernels run in group order; a value is live from its
 * kernel to the last kernel that reads it, and its memory is reused after
 * that (first fit, offsets aligned to the storage-buffer alignment). Graph
 * inputs stay live to the end (a decode program with a sampler copies the
 * drawn id into its input after the last kernel). A
 * kernel whose result is computed elementwise from a value read nowhere
 * else in it, at the same index, writes in place over that value when the
 * value dies there (the residual stream). Weights and state have pools of
 * their own and are not planned here.
 *
 * With output_apart, the graph's output (the first value of its output op),
 * when a kernel computes it, is not in the pool: it is written apart=1 ofs=0,
 * a buffer of its own. That is the prefill program's logits of every row,
 * which only a run that asks for logits reads, and which would otherwise be
 * most of the pool (chunk x vocab floats): a runtime allocates that buffer
 * only for such a run.
 */
#include <string.h>

#include "passes/passes.h"

typedef struct {
  uint64_t off, size;
  const ssm_value *owner;
} block;

/* Live blocks by offset (a growable array, with the high-water mark). */
typedef struct {
  block *items;
  size_t n, cap;
  uint64_t top;
} pool;

static void pool_add(pool *p, uint64_t off, uint64_t size, const ssm_value *owner) {
  SSM_ASSERT(p->n < p->cap); /* reserved for every value up front */
  size_t i = p->n++;
  while (i > 0 && p->items[i - 1].off > off) {
    p->items[i] = p->items[i - 1];
    i--;
  }
  p->items[i] = (block){off, size, owner};
  if (off + size > p->top) p->top = off + size;
}

/* First fit between live blocks. */
static uint64_t pool_alloc(pool *p, uint64_t size, const ssm_value *owner) {
  uint64_t at = 0;
  for (size_t i = 0; i < p->n; i++) {
    if (p->items[i].off >= at + size) break;
    if (p->items[i].off + p->items[i].size > at) at = p->items[i].off + p->items[i].size;
  }
  pool_add(p, at, size, owner);
  return at;
}

static void pool_free(pool *p, const ssm_value *owner) {
  for (size_t i = 0; i < p->n; i++)
    if (p->items[i].owner == owner) {
      memmove(&p->items[i], &p->items[i + 1], sizeof *p->items * (p->n - i - 1));
      p->n--;
      return;
    }
}

static int pool_take_over(pool *p, const ssm_value *from, const ssm_value *to) {
  for (size_t i = 0; i < p->n; i++)
    if (p->items[i].owner == from) {
      p->items[i].owner = to;
      return 1;
    }
  return 0;
}

ssm_status ssm_pass_plan_buffers(ssm_graph *g, const ssm_pass_opts *o, char *note,
                                 size_t note_size) {
  uint32_t align = o && o->align ? o->align : 256;
  ssm_arena *a;
  SSM_TRY(ssm_arena_create(&a));
  ssm_group *gs;
  int ng;
  ssm_status s = ssm_groups_collect(g, a, &gs, &ng);
  if (s) {
    ssm_arena_destroy(a);
    return s;
  }
  ssm_graph_number(g);
  int nv = g->nvalues;
  int *last = NULL; /* last step that reads the value */
  int *defined = NULL;
  pool p = {0};
  s = ssm_alloc((size_t)nv + 1, sizeof(int), (void **)&last);
  if (!s) s = ssm_alloc((size_t)nv + 1, sizeof(int), (void **)&defined);
  if (!s) s = ssm_vec_reserve(&p, (size_t)nv + 1); /* a block per value at most */
  if (s) {
    s = ssm_status_wrap(s, "planning buffers for %d values", nv);
    goto done;
  }
  for (int i = 0; i <= nv; i++) last[i] = defined[i] = -1;
  /* steps: 0 = inputs, 1..ng = kernels, ng+1 = the graph's outputs */
  uint64_t naive = 0;
  for (ssm_node *n = g->first; n; n = n->next) {
    if (n->op == SSM_OP_INPUT) { /* live to the end: a program may write the next input there */
      defined[n->result->id] = 0;
      last[n->result->id] = ng + 1;
    }
    if (n->result && ssm_op_info_get(n->op)->kind != SSM_KIND_SRC && n->op != SSM_OP_RESHAPE)
      naive += ssm_value_bytes(n->result, align); /* one buffer per value */
    if (n->op == SSM_OP_OUTPUT)
      for (int i = 0; i < n->nargs; i++) last[n->args[i]->id] = ng + 1;
  }
  const ssm_value *apart = NULL;
  for (ssm_node *n = g->first; n && o && o->output_apart && !apart; n = n->next)
    if (n->op == SSM_OP_OUTPUT && n->nargs > 0) apart = n->args[0];
  const ssm_value *leaves[64];
  for (int i = 0; i < ng; i++) {
    defined[gs[i].root->result->id] = i + 1;
    int nl = ssm_group_leaves(g, &gs[i], leaves, 64);
    if (nl < 0) {
      s = ssm_status_new(SSM_ERR_UNSUPPORTED, "a kernel reads more than 64 tensors");
      goto done;
    }
    for (int k = 0; k < nl; k++)
      if (last[leaves[k]->id] < i + 1) last[leaves[k]->id] = i + 1;
  }
  for (ssm_node *n = g->first; n; n = n->next)
    if (n->op == SSM_OP_INPUT) {
      uint64_t off = pool_alloc(&p, ssm_value_bytes(n->result, align), n->result);
      ssm_node_set_int(g, n, "ofs", (int64_t)off);
    }
  int inplace = 0;
  uint64_t apart_bytes = 0;
  for (int i = 0; i < ng; i++) {
    int step = i + 1;
    /* values whose last reader ran before this kernel are free */
    for (size_t b = p.n; b-- > 0;) {
      const ssm_value *v = p.items[b].owner;
      int l = last[v->id] < 0 ? defined[v->id] : last[v->id];
      if (l < step) pool_free(&p, v);
    }
    const ssm_value *out = gs[i].root->result;
    uint64_t size = ssm_value_bytes(out, align);
    if (out == apart) { /* live to the end: no other value takes it over */
      ssm_node_set_int(g, gs[i].root, "apart", 1);
      ssm_node_set_int(g, gs[i].root, "ofs", 0);
      apart_bytes = size;
      continue;
    }
    int nl = ssm_group_leaves(g, &gs[i], leaves, 64);
    int64_t off = -1;
    for (int k = 0; k < nl && off < 0; k++) {
      const ssm_value *l = leaves[k];
      if (defined[l->id] < 1 || last[l->id] != step || ssm_value_bytes(l, align) != size ||
          !ssm_group_can_overwrite(g, &gs[i], l))
        continue;
      if (pool_take_over(&p, l, out)) {
        off = ssm_node_int(l->def, "ofs", -1);
        inplace++;
      }
    }
    if (off < 0) off = (int64_t)pool_alloc(&p, size, out);
    ssm_node_set_int(g, gs[i].root, "ofs", off);
  }
  naive -= apart_bytes;
  int n = snprintf(note, note_size, "activations: %llu bytes planned, %llu bytes with one buffer "
                   "per value (%.1fx less); %d kernels write in place",
                   (unsigned long long)p.top, (unsigned long long)naive,
                   p.top ? (double)naive / (double)p.top : 0.0, inplace);
  if (apart_bytes && n > 0 && (size_t)n < note_size)
    snprintf(note + n, note_size - (size_t)n, "; the output (%llu bytes) apart",
             (unsigned long long)apart_bytes);
done:
  ssm_vec_free(&p);
  free(last);
  free(defined);
  ssm_arena_destroy(a);
  return s;
}
