/*
 * schedule.c — decides where kernels must wait for each other. Kernels run
 * in group order; a kernel gets sync=1 (a memory barrier before it) when it
 * reads or writes memory that a kernel since the last barrier wrote, or
 * writes memory that one since then read. Independent kernels (parallel
 * projections of attention, say) then run back to back without barriers.
 */
#include <string.h>

#include "passes/passes.h"

typedef struct {
  uint64_t lo, hi; /* byte range; states use a separate key space */
} span;

typedef SSM_VEC(span) spans;

static int spans_hit(const spans *v, span x) {
  for (size_t i = 0; i < v->n; i++)
    if (x.lo < v->items[i].hi && v->items[i].lo < x.hi) return 1;
  return 0;
}

/* Activation values by offset (an output apart, plan_buffers.c, in a range
 * of its own); states and inputs by identity (far apart). */
static span span_of(const ssm_value *v, uint32_t align) {
  int64_t ofs = ssm_node_int(v->def, "ofs", -1);
  uint64_t base = ssm_node_int(v->def, "apart", 0) ? (uint64_t)1 << 61 : 0;
  if (ofs >= 0)
    return (span){base + (uint64_t)ofs, base + (uint64_t)ofs + ssm_value_bytes(v, align)};
  uint64_t key = ((uint64_t)1 << 62) + (uint64_t)(uintptr_t)v->def * 4;
  return (span){key, key + 1};
}

ssm_status ssm_pass_schedule(ssm_graph *g, const ssm_pass_opts *o, char *note, size_t note_size) {
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
  spans rd = {0}, wr = {0};
  int barriers = 0;
  const ssm_value *leaves[64];
  for (int i = 0; i < ng && !s; i++) {
    int nl = ssm_group_leaves(g, &gs[i], leaves, 64);
    spans r = {0}, w = {0};
    for (int k = 0; k < nl && !s; k++) s = ssm_vec_push(&r, span_of(leaves[k], align));
    if (!s) s = ssm_vec_push(&w, span_of(gs[i].root->result, align));
    /* the states its members update (the anchor's, a conv in a matmul's
     * epilogue) */
    for (const ssm_node *m = gs[i].first; m; m = m == gs[i].root ? NULL : m->next) {
      int si[SSM_MAX_STATE_OPERANDS];
      int ns = ssm_node_group(m) == gs[i].id ? ssm_op_state_operands(m->op, si) : 0;
      for (int j = 0; j < ns && !s; j++) s = ssm_vec_push(&w, span_of(m->args[si[j]], align));
    }
    int need = 0;
    for (size_t k = 0; k < r.n && !need; k++) need = spans_hit(&wr, r.items[k]);
    for (size_t k = 0; k < w.n && !need; k++)
      need = spans_hit(&wr, w.items[k]) || spans_hit(&rd, w.items[k]);
    if (need) {
      ssm_node_set_int(g, gs[i].root, "sync", 1);
      barriers++;
      rd.n = wr.n = 0;
    } else {
      ssm_node_set_int(g, gs[i].root, "sync", 0);
    }
    for (size_t k = 0; k < r.n && !s; k++) s = ssm_vec_push(&rd, r.items[k]);
    for (size_t k = 0; k < w.n && !s; k++) s = ssm_vec_push(&wr, w.items[k]);
    ssm_vec_free(&r);
    ssm_vec_free(&w);
  }
  snprintf(note, note_size, "%d kernels, %d barriers", ng, barriers);
  ssm_vec_free(&rd);
  ssm_vec_free(&wr);
  ssm_arena_destroy(a);
  return ssm_status_wrap(s, "scheduling kernels");
}
