/*
 * assemble.c — what every kernel family uses to assemble its kernel: the
 * memory declarations (GLSL bindings or WGSL slots), the common helpers,
 * grids and thread counts, the run's token count, and the kernel's text
 * with its parameter line (ssm_cg_finish).
 */
#include <string.h>

#include "codegen/internal.h"

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
                      : c->bind[i]->type.dtype == SSM_BF16 ? SSM_CG_BF16
                      : c->bind[i]->type.dtype == SSM_Q8_0 ? SSM_CG_Q8
                      : c->bind[i]->type.dtype == SSM_Q4_0 ? SSM_CG_Q4 : 0);
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
  return ssm_cg_finish_from(c, family, family, params, kv, out);
}

ssm_status ssm_cg_finish_from(cg_ctx *c, const char *family, const char *tmpl, const char *params,
                              const char *const *kv, ssm_cg_kernel *out) {
  if (c->err) return c->err;
  char *src;
  SSM_TRY(ssm_cg_template_expand(c->a, tmpl, c->lang, kv, &src));
  out->family = family;
  out->params = ssm_arena_printf(c->a, "%s %s", members_list(c), params);
  const char *text = ssm_arena_printf(c->a, "// ssmc kernel: template %s.%s.in, %s\n%s", tmpl,
                                      lang(c)->name, out->params, src);
  if (c->lang == SSM_LANG_WGSL) out->wgsl = text;
  else out->glsl = text;
  out->glsl_vec4 = c->vec4;
  out->run_count = c->counted;
  out->nbindings = c->nbind;
  for (int i = 0; i < c->nbind; i++) out->bind[i] = c->bind[i], out->type[i] = c->bind[i]->type;
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
  /* a batched program (frontend.h) always runs all its sequences */
  int yes = T > 1 && T == ssm_cg_program_tokens(c->g) && strcmp(c->g->name, "batch");
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
