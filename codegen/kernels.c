/*
 * kernels.c — one kernel per fused group (passes/groups.c): the template of
 * the group's anchor (matmul, scan, conv1d, attention, row reductions, embed,
 * reduce; pointwise when there is none), with generated load functions that
 * evaluate the group's absorbed expressions and read through views (emit.c),
 * and an epilogue applied to each result element. Shapes are compile-time
 * constants. This file picks a group's family (the families are matmul.c,
 * scan.c and its chunked form ssd.c, families.c and items.c), generates it in both languages, and
 * holds what every family uses to assemble its kernel: memory declarations,
 * grids, the run's token count and the kernel's text.
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

/* ---- text --------------------------------------------------------------- */

/* The text of `b` copied into the arena; empties `b`. */
const char *ssm_cg_take(ssm_sb *b, ssm_arena *a) {
  const char *r = ssm_arena_strdup(a, ssm_sb_str(b));
  ssm_sb_free(b);
  return r;
}

/* Snippet `name` of templates/<family>.<lang>.in with `kv` (template.c);
 * a failure is the group's error, and gives "". */
const char *ssm_cg_snippet(cg_ctx *c, const char *family, const char *name,
                           const char *const *kv) {
  char *s;
  ssm_status st = ssm_cg_snippet_expand(c->a, family, c->lang, name, kv, &s);
  if (!st) return s;
  if (!c->err) c->err = st;
  else ssm_status_free(st);
  return "";
}

/* ---- assembling a kernel ------------------------------------------------- */

/* The kernel's memory: its bindings (GLSL: ssm_cg_glsl_buffers), or with slots
 * (WGSL) the per-dispatch offsets; then tensor i's accessors b<i>_ld(e) /
 * b<i>_st(e, v) come with the slots' bindings (ssm_cg_wgsl_module). */
const char *ssm_cg_buffers_decl(cg_ctx *c) {
  ssm_sb b = {0};
  if (lang(c)->slots) {
    ssm_cg_wgsl_slots(c);
    for (int i = 0; i < c->nbind; i++)
      c->access[i] = (i ? SSM_CG_READ : 0) | (!i || c->bind[i]->def->op == SSM_OP_STATE ? SSM_CG_WRITE : 0) |
                     (c->bind[i]->type.dtype == SSM_I32    ? SSM_CG_I32
                      : c->bind[i]->type.dtype == SSM_F16  ? SSM_CG_F16
                      : c->bind[i]->type.dtype == SSM_BF16 ? SSM_CG_BF16 : 0);
    _Static_assert(SSM_BUNDLE_MAX_BINDINGS % 4 == 0, "offsets are vec4s");
    return ssm_arena_printf(c->a, "%s\n", SNIPPET(c, "helpers", "offsets", "N",
                                                 I64(SSM_BUNDLE_MAX_BINDINGS / 4)));
  }
  ssm_cg_glsl_buffers(&b, c->nbind, c->bind, c->vec4, NULL, 0);
  return ssm_cg_take(&b, c->a);
}

const char *ssm_cg_common(cg_ctx *c) {
  char *s;
  ssm_status st = ssm_cg_template_expand(c->a, "common", c->lang, (const char *const[]){NULL}, &s);
  int failed = st != NULL;
  SSM_ASSERT(!failed || ssm_status_code(st) == SSM_ERR_NOMEM);
  ssm_status_free(st); /* out of memory: generate_both reports it */
  return failed ? "" : s;
}

uint32_t ssm_cg_groups_for(int64_t items, uint32_t local) {
  int64_t g = (items + local - 1) / local;
  return (uint32_t)(g < 1 ? 1 : g > 65535 ? 65535 : g);
}

void ssm_cg_grid_per_item(int64_t items, uint32_t out[3]) {
  out[0] = (uint32_t)(items < 65535 ? (items < 1 ? 1 : items) : 65535);
  out[1] = (uint32_t)((items + 65534) / 65535);
  out[2] = 1;
}

uint32_t ssm_cg_pow2_threads(int64_t work, uint32_t lo, uint32_t hi) {
  uint32_t l = lo;
  while (l < hi && (int64_t)l * 4 < work) l *= 2;
  return l;
}

/* The fused ops, for the kernel's parameter line: "matmul+add+softplus". */
static const char *members_list(cg_ctx *c) {
  ssm_sb b = {0};
  for (const ssm_node *n = c->first; n; n = n == c->root ? NULL : n->next)
    if (ssm_cg_member(c, n))
      ssm_sb_printf(&b, "%s%s", b.n ? "+" : "", ssm_op_info_get(n->op)->name);
  return ssm_cg_take(&b, c->a);
}

ssm_status ssm_cg_finish(cg_ctx *c, const char *family, const char *params, const char *const *kv,
                         ssm_cg_kernel *out) {
  if (c->err) return c->err;
  char *src;
  SSM_TRY(ssm_cg_template_expand(c->a, family, c->lang, kv, &src));
  out->family = family;
  out->params = ssm_arena_printf(c->a, "%s %s", members_list(c), params);
  const char *text = ssm_arena_printf(c->a, "// ssmc kernel: template %s.%s.in, %s\n%s", family,
                                      lang(c)->name, out->params, src);
  if (c->lang == SSM_LANG_WGSL) out->wgsl = text;
  else out->glsl = text;
  out->glsl_vec4 = c->vec4;
  out->run_count = c->counted;
  out->nbindings = c->nbind;
  for (int i = 0; i < c->nbind; i++) out->bind[i] = c->bind[i];
  out->nslots = c->nslots;
  for (int i = 0; i < c->nbind && lang(c)->slots; i++) {
    out->slot[i] = c->slot[i];
    out->access[i] = c->access[i];
  }
  for (int i = 0; i < c->nslots; i++) out->slot_writable[i] = c->slot_writable[i];
  return NULL;
}

/* The tokens per run of the kernel's program (its "tokens" input), 0 when
 * it has none. */
int64_t ssm_cg_program_tokens(const ssm_graph *g) {
  for (const ssm_node *n = g ? g->first : NULL; n; n = n->next)
    if (n->op == SSM_OP_INPUT && !strcmp(ssm_node_str(n, "name", ""), "tokens"))
      return n->result->type.dims[0];
  return 0;
}

/* Whether the kernel reads the run's count for an axis of T steps (a kernel
 * of a program of T > 1 tokens per run); marks it when so. */
int ssm_cg_reads_count(cg_ctx *c, int64_t T) {
  int yes = T > 1 && T == ssm_cg_program_tokens(c->g);
  c->counted |= yes;
  return yes;
}

/* min(n, T) for a kernel that reads the run's count n */
const char *ssm_cg_run_min(cg_ctx *c, int64_t T) {
  return ssm_arena_printf(c->a, "min(%s, %lldu)", lang(c)->run_count, (long long)T);
}

/* The knobs NT and RUN of a kernel that carries something over time (or
 * only writes rows per token) along an axis of T steps, added to `kv`: a
 * kernel of a program of T > 1 tokens per run reads the run's token count
 * n (lang.def's run_count, declared by run_decl) and runs min(n, T) steps,
 * so that a run of fewer tokens than the program's leaves the state as
 * those tokens alone would; otherwise NT is T. */
void ssm_cg_run_count(cg_ctx *c, int64_t T, const char **kv, size_t cap) {
  size_t n = 0;
  while (kv[n]) n += 2;
  SSM_ASSERT(n + 5 <= cap);
  int yes = ssm_cg_reads_count(c, T);
  kv[n++] = "NT";
  kv[n++] = yes ? ssm_cg_run_min(c, T) : ssm_arena_printf(c->a, "%lldu", (long long)T);
  kv[n++] = "RUN";
  kv[n++] = yes ? lang(c)->run_decl : "";
  kv[n] = NULL;
}

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
      s = rows <= KNOB_GEMV_MAX_ROWS     ? ssm_cg_gen_gemv(c, out)
          : rows <= KNOB_MATMUL_MAX_ROWS ? ssm_cg_gen_matmul(c, out)
                                         : ssm_cg_gen_gemm(c, out);
      break;
    }
    case SSM_OP_SCAN:
      s = ssm_cg_ssd_applies(c) ? ssm_cg_gen_ssd(c, out) : ssm_cg_gen_scan(c, out);
      break;
    case SSM_OP_CONV1D: s = ssm_cg_gen_conv1d(c, out); break;
    case SSM_OP_ATTENTION: s = ssm_cg_gen_attention(c, out); break;
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
  cg_ctx c = {.g = g, .id = gr->id, .first = gr->first, .root = gr->root, .anchor = gr->anchor,
              .norm = gr->norm, .a = a};
  return generate_both(&c, out);
}

ssm_status ssm_cg_kernel_for_node(ssm_graph *g, const ssm_node *n, ssm_arena *a,
                                  ssm_cg_kernel *out) {
  cg_ctx c = {.g = g, .id = -1, .single = n, .first = n, .root = n, .a = a};
  c.anchor = ssm_node_is_pointwise(n) || ssm_op_is_view(n->op) ? NULL : n;
  return generate_both(&c, out);
}
