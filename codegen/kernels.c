/*
 * kernels.c — one kernel per fused group (passes/groups.c): the template of
 * the group's anchor (matmul, scan, conv1d, attention, row reductions, embed,
 * reduce; pointwise when there is none), with generated load functions that
 * evaluate the group's absorbed expressions and read through views (emit.c),
 * and an epilogue applied to each result element. Shapes are compile-time
 * constants. This file picks a group's family (the families are matmul.c,
 * scan.c and its chunked form ssd.c, delta.c, families.c and items.c) and generates
 * it in both languages; what every family uses to assemble its kernel
 * (memory declarations, grids, the run's token count, the kernel's text)
 * is assemble.c's.
 *
 * The same generator writes GLSL and WGSL: a group is generated once per
 * language (cg_ctx.lang), from templates/<family>.glsl.in and .wgsl.in with the
 * same knobs (knobs.h); what the generator spells itself is looked up in
 * lang.def, and helper bodies are snippets of the templates. In WGSL a
 * kernel reads tensor i through b<i>_ld / b<i>_st, which add the tensor's
 * element offset (a per-dispatch uniform) and go to its memory slot; the
 * slots' storage bindings come last (ssm_cg_wgsl_module, wgsl.c), once the
 * bundle's layout says how many windows each needs.
 */
#include <string.h>

#include "codegen/internal.h"
#include "codegen/knobs.h"

/* ---- entry points ------------------------------------------------------ */

static ssm_status generate(cg_ctx *c, ssm_cg_kernel *out) {
  *out = (ssm_cg_kernel){0};
  for (const ssm_node *n = c->first; n; n = n == c->root ? NULL : n->next)
    if (ssm_cg_member(c, n))
      for (int i = 0; i < n->nargs; i++)
        if (n->args[i]->type.dtype != SSM_F32 && n->args[i]->type.dtype != SSM_I32 &&
            n->op != SSM_OP_MATMUL && n->op != SSM_OP_MATMUL_SEL && n->op != SSM_OP_EMBED)
          return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: %s operands have no GPU kernel yet",
                                ssm_op_info_get(n->op)->name,
                                ssm_dtype_name(n->args[i]->type.dtype));
  ssm_cg_binding(c, c->root->result); /* binding 0: the result */
  ssm_status s;
  if (!c->anchor) s = ssm_cg_gen_pointwise(c, out);
  else switch (c->anchor->op) {
    case SSM_OP_MATMUL: {
      int64_t rows = ssm_type_numel(&c->anchor->args[0]->type) / c->anchor->args[1]->type.dims[1];
      /* a batched program's many rows: each a sequence, weights once for all */
      int batch = !strcmp(c->g->name, "batch") && rows <= KNOB_GEMV_BATCH_MAX_ROWS;
      s = rows <= KNOB_GEMV_MAX_ROWS || batch ? ssm_cg_gen_gemv(c, out)
          : rows <= KNOB_MATMUL_MAX_ROWS ? ssm_cg_gen_matmul(c, out)
                                         : ssm_cg_gen_gemm(c, out);
      break;
    }
    case SSM_OP_SCAN:
      s = ssm_cg_ssd_applies(c) ? ssm_cg_gen_ssd(c, out) : ssm_cg_gen_scan(c, out);
      break;
    case SSM_OP_CONV1D: s = ssm_cg_gen_conv1d(c, out); break;
    case SSM_OP_ATTENTION: s = ssm_cg_gen_attention(c, out); break;
    case SSM_OP_DELTA:
      s = ssm_cg_delta_chunk_applies(c) ? ssm_cg_gen_delta_chunk(c, out) : ssm_cg_gen_delta(c, out);
      break;
    case SSM_OP_RMSNORM:
    case SSM_OP_SOFTMAX:
    case SSM_OP_ARGMAX: s = ssm_cg_gen_rowreduce(c, out); break;
    case SSM_OP_EMBED: s = ssm_cg_gen_embed(c, out); break;
    case SSM_OP_REDUCE: s = ssm_cg_gen_reduce(c, out); break;
    case SSM_OP_SAMPLE: s = ssm_cg_gen_sample(c, out); break;
    case SSM_OP_ROPE: s = ssm_cg_gen_rope(c, out); break;
    case SSM_OP_POSITIONS: s = ssm_cg_gen_positions(c, out); break;
    case SSM_OP_GATHER: s = ssm_cg_gen_gather(c, out); break;
    case SSM_OP_TOPK: s = ssm_cg_gen_topk(c, out); break;
    case SSM_OP_MATMUL_SEL: s = ssm_cg_gen_matmul_sel(c, out); break;
    default:
      s = ssm_status_new(SSM_ERR_INTERNAL, "no kernel family for %s",
                         ssm_op_info_get(c->anchor->op)->name);
    }
  ssm_sb_free(&c->helpers);
  return s;
}

/* The kernel in both languages: the generator runs once for GLSL and once
 * for WGSL over the same group, which must give the same bindings and grid. */
static ssm_status generate_both(const cg_ctx *proto, ssm_cg_kernel *out) {
  /* the text is built by many builders that feed each other: one check of
   * every allocation they made, before anything reads what they built */
  unsigned long mark = ssm_nomem_mark();
  cg_ctx c = *proto;
  c.lang = SSM_LANG_GLSL;
  SSM_TRY(ssm_nomem_check(mark, generate(&c, out), "GLSL kernel text"));
  ssm_cg_kernel w;
  c = *proto;
  c.lang = SSM_LANG_WGSL;
  SSM_TRY(ssm_nomem_check(mark, generate(&c, &w), "WGSL kernel text"));
  SSM_ASSERT(w.nbindings == out->nbindings && !memcmp(w.bind, out->bind, sizeof w.bind) &&
             !memcmp(w.groups, out->groups, sizeof w.groups) && w.run_count == out->run_count);
  out->wgsl = w.wgsl;
  out->nslots = w.nslots;
  memcpy(out->slot, w.slot, sizeof out->slot);
  memcpy(out->slot_writable, w.slot_writable, sizeof out->slot_writable);
  memcpy(out->access, w.access, sizeof out->access);
  return NULL;
}

ssm_status ssm_cg_kernel_for_group(ssm_graph *g, const ssm_group *gr, ssm_arena *a,
                                   ssm_cg_kernel *out) {
  return ssm_cg_kernel_for_group_opts(g, gr, NULL, a, out);
}

ssm_status ssm_cg_kernel_for_group_opts(ssm_graph *g, const ssm_group *gr, const ssm_cg_opts *o,
                                        ssm_arena *a, ssm_cg_kernel *out) {
  cg_ctx c = {.g = g, .id = gr->id, .first = gr->first, .root = gr->root, .anchor = gr->anchor,
              .norm = gr->norm, .a = a, .coop_prep = o && o->coop_prep,
              .delta_steps = o && o->delta_steps};
  return generate_both(&c, out);
}

ssm_status ssm_cg_kernel_for_node(ssm_graph *g, const ssm_node *n, ssm_arena *a,
                                  ssm_cg_kernel *out) {
  cg_ctx c = {.g = g, .id = -1, .single = n, .first = n, .root = n, .a = a};
  c.anchor = ssm_node_is_pointwise(n) || ssm_op_is_view(n->op) ? NULL : n;
  return generate_both(&c, out);
}
