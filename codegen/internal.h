/*
 * internal.h — what the files of codegen/ share and nothing else sees: the
 * group being generated, the language table (lang.def), the expressions
 * and load functions of emit.c, the kernel assembly of assemble.c, and each
 * family's generator.
 */
#ifndef SSM_CODEGEN_INTERNAL_H
#define SSM_CODEGEN_INTERNAL_H

#include <math.h>

#include "codegen/codegen.h"

/* ---- the spellings of a kernel language (lang.def, lang.c) ------------------- */

typedef struct {
#define SPELL(field, glsl, wgsl) const char *field;
#define HAS(field, glsl, wgsl) int field;
#include "codegen/lang.def"
#undef SPELL
#undef HAS
} ssm_cg_lang;

/* One entry per ssm_lang. */
extern const ssm_cg_lang ssm_cg_langs[SSM_LANG_COUNT];

/* Appends spelling `pattern` (a SPELL field) with $1, $2, ... replaced by
 * the strings that follow: every argument its row names, whether or not
 * this language's spelling uses it. */
void ssm_cg_spell(ssm_sb *b, const char *pattern, ...);
/* The same, as a string in `a`. */
const char *ssm_cg_spelled(ssm_arena *a, const char *pattern, ...);

/* ---- templates (template.c) ----------------------------------------------------- */

/* Expands snippet `name` of templates/<family>.<lang>.in (template.c says
 * what a snippet is) with `kv`, as ssm_cg_template_expand does a template. */
ssm_status ssm_cg_snippet_expand(ssm_arena *a, const char *family, ssm_lang lang,
                                 const char *name, const char *const *kv, char **out);

/* ---- the group being generated ----------------------------------------------- */

typedef struct {
  ssm_graph *g;
  ssm_lang lang;        /* the language being written */
  int id;               /* group id, or -1 with `single` */
  const ssm_node *single; /* a node generated alone (kernel tests) */
  const ssm_node *first;  /* members lie from first to root (groups.c) */
  const ssm_node *root, *anchor, *norm;
  ssm_arena *a;
  int coop_prep; /* gemm_coop's x made ready by a kernel of its own (ssm_cg_opts) */
  int delta_steps; /* the delta rule never in chunks (ssm_cg_opts) */
  const ssm_value *bind[SSM_BUNDLE_MAX_BINDINGS];
  int nbind;
  int in_epilogue; /* emitting the epilogue: the anchor's value is `acc` */
  int touching;    /* emitting epilogue_touch: the epilogue's loads, nothing written */
  ssm_sb helpers;
  int nhelpers;
  const ssm_node *mm_node[8]; /* matmul members written as helpers, and their ids */
  int mm_id[8], nmm;
  /* a scan kernel's [T, S] matmul members computed before its time loop
   * (matmul_helper): the scan's T and S, its rows per workgroup (0: none),
   * and the helpers' ids */
  int64_t pre_t, pre_s, pre_rows;
  int pre_id[8], npre;
  const ssm_node *pre_norm[8]; /* the rmsnorm of a pre matmul's x, or NULL */
  /* a prefill scan's rmsnorm members over rows of t (Falcon-Mamba's B and
   * C norms): each row's rsqrt computed once per time chunk into shared
   * memory (rmc<id>), not by every state thread at every step */
  int64_t scan_cache; /* the scan's T when it is more than 1, else 0 */
  const char *scan_step; /* the scan's time coordinate in in_a/in_b/in_c */
  const ssm_node *rmc_node[8];
  int rmc_id[8], nrmc;
  const ssm_node *conv_done[16]; /* decode convs written into an epilogue */
  int nconv;
  int slot[SSM_BUNDLE_MAX_BINDINGS]; /* WGSL: the memory slot of each binding */
  int slot_writable[SSM_BUNDLE_MAX_BINDINGS];
  unsigned access[SSM_BUNDLE_MAX_BINDINGS];
  int nslots;
  unsigned vec4; /* GLSL: bindings also read through a uvec4 view (bit i) */
  int counted;   /* reads the run's token count (ssm_cg_run_count) */
  const ssm_node *x16_norm; /* emitting a rounded matmul's x: this norm's x * gain is rounded */
  ssm_status err;
} cg_ctx;

/* The spellings of the language being written (lang.def). */
static inline const ssm_cg_lang *lang(const cg_ctx *c) { return &ssm_cg_langs[c->lang]; }

/* Numbers as text in the group's arena (a `cg_ctx *c` in scope). */
#define I64(x) ssm_arena_printf(c->a, "%lld", (long long)(x))
#define U32(x) ssm_arena_printf(c->a, "%u", (unsigned)(x))

/* The text of `b` copied into the arena; empties `b`. */
const char *ssm_cg_take(ssm_sb *b, ssm_arena *a);
/* Snippet `name` of templates/<family>.<lang>.in with `kv`; a failure is
 * the group's error, and gives "". */
const char *ssm_cg_snippet(cg_ctx *c, const char *family, const char *name,
                           const char *const *kv);
/* ssm_cg_snippet with the keys and values that follow */
#define SNIPPET(c, family, name, ...) \
  ssm_cg_snippet(c, family, name, (const char *const[]){__VA_ARGS__, NULL})
/* ssm_cg_snippet of a snippet without keys */
#define SNIPPET0(c, family, name) ssm_cg_snippet(c, family, name, (const char *const[]){NULL})

/* Whether node n is a member of the group. */
int ssm_cg_member(const cg_ctx *c, const ssm_node *n);
/* Whether n is a view that no group holds: read through, like a member's. */
int ssm_cg_ungrouped_view(const cg_ctx *c, const ssm_node *n);
/* The binding of value v, bound now if it is not yet. */
int ssm_cg_binding(cg_ctx *c, const ssm_value *v);

/* ---- spellings that are not one pattern (lang.c) ------------------------------ */

/* A float literal. */
const char *ssm_cg_float_lit(const cg_ctx *c, double v);
/* -inf, as ssm_cg_float_lit writes it */
#define NEG_INF(c) ssm_cg_float_lit(c, -INFINITY)
/* The head of a function returning `ret` of the coordinates `params`. */
void ssm_cg_fn_head_typed(const cg_ctx *c, ssm_sb *b, const char *ret, const char *name,
                          const char *params);
/* The same of an f32 function. */
void ssm_cg_fn_head(const cg_ctx *c, ssm_sb *b, const char *name, const char *params);
/* `NAME(params) { return value; }` */
void ssm_cg_const_fn(const cg_ctx *c, ssm_sb *b, const char *name, const char *params,
                     const char *value);
/* Element `idx` of binding b, of dtype dt, as an f32 (or i32). */
void ssm_cg_mem_load(const cg_ctx *c, ssm_sb *out, int b, ssm_dtype dt, const char *idx);

/* ---- coordinates and expressions (emit.c) ------------------------------------- */

/* The coordinate expressions of an element, one per dim. */
typedef struct {
  const char *c[SSM_MAX_RANK];
  int rank;
} cg_coords;

/* PREFIX0, PREFIX1, ... */
cg_coords ssm_cg_coords_named(const char *prefix, int rank, ssm_arena *a);
/* The coordinates in type t of linear index expression `lin`. */
cg_coords ssm_cg_delinearize(const char *lin, const ssm_type *t, ssm_arena *a);
/* Coordinates k of a result, for an operand of type `op` broadcast into it. */
cg_coords ssm_cg_broadcast(const cg_coords *k, const ssm_type *op);
/* Appends the expression of value v at coordinates k. */
void ssm_cg_emit(cg_ctx *c, const ssm_value *v, const cg_coords *k, ssm_sb *out, int depth);
/* Writes helper rms<id>, rsqrt(mean(x^2) + eps) of rmsnorm n's rows; its id. */
int ssm_cg_rms_helper(cg_ctx *c, const ssm_node *n, int depth);

/* `NAME(params) { return <v at k>; }` */
void ssm_cg_load_fn(cg_ctx *c, ssm_sb *loads, const char *name, const char *params,
                    const ssm_value *v, const cg_coords *k);
/* Coordinates of type t as (m, LAST): m over the leading dims. */
cg_coords ssm_cg_row_coords(cg_ctx *c, const ssm_type *t, const char *last);
/* ssm_cg_load_fn of a matmul's x, rounded (ssm_x16) with `x16`: its
 * weight is 16-bit. */
void ssm_cg_load_x(cg_ctx *c, ssm_sb *loads, const char *name, const char *params,
                   const ssm_value *v, const cg_coords *k, int x16);
/* NAME(m, k) of operand v [.., K], m over the leading dims; with `x16`
 * rounded as a matmul's x where its weight is 16-bit. */
void ssm_cg_load_rows(cg_ctx *c, ssm_sb *loads, const char *name, const ssm_value *v, int x16);
/* epilogue(acc, i) (and epilogue_touch with `touch`); whether it reads anything. */
int ssm_cg_epilogue(cg_ctx *c, ssm_sb *loads, int touch);
/* The helpers and `loads`, the template's LOADS; consumes `loads`. */
const char *ssm_cg_loads_text(cg_ctx *c, ssm_sb *loads);

/* ---- assembling a kernel (assemble.c, wgsl.c, glsl_windows.c) -------------------- */

/* The template's BUFFERS. */
const char *ssm_cg_buffers_decl(cg_ctx *c);
/* WGSL: each binding's memory slot. */
void ssm_cg_wgsl_slots(cg_ctx *c);
/* GLSL: the storage buffers of n bindings, with `windows` (or NULL) split. */
void ssm_cg_glsl_buffers(ssm_sb *b, int n, const ssm_value *const *bind, unsigned vec4,
                         const int *windows, uint64_t window);
/* The template's COMMON (templates/common.*.in). */
const char *ssm_cg_common(cg_ctx *c);
/* Workgroups of `local` threads for `items` (at most 65535). */
uint32_t ssm_cg_groups_for(int64_t items, uint32_t local);
/* A grid of one workgroup per item, over x and y. */
void ssm_cg_grid_per_item(int64_t items, uint32_t out[3]);
/* A power of two in [lo, hi], from lo up while a thread would have more than 4 of `work`. */
uint32_t ssm_cg_pow2_threads(int64_t work, uint32_t lo, uint32_t hi);
/* Expands template `family` with `kv` into the kernel `out`. */
ssm_status ssm_cg_finish(cg_ctx *c, const char *family, const char *params,
                         const char *const *kv, ssm_cg_kernel *out);
/* The same, a kernel of `family` from template `tmpl` (a second form of the family). */
ssm_status ssm_cg_finish_from(cg_ctx *c, const char *family, const char *tmpl, const char *params,
                              const char *const *kv, ssm_cg_kernel *out);
/* The tokens per run of graph g's program (0: it has none). */
int64_t ssm_cg_program_tokens(const ssm_graph *g);
/* Whether the kernel reads the run's count for an axis of T steps; marks it. */
int ssm_cg_reads_count(cg_ctx *c, int64_t T);
/* min(n, T), n the run's count. */
const char *ssm_cg_run_min(cg_ctx *c, int64_t T);
/* Adds the knobs NT and RUN of an axis of T steps to `kv` (room for `cap`). */
void ssm_cg_run_count(cg_ctx *c, int64_t T, const char **kv, size_t cap);

/* ---- the families ------------------------------------------------------------ */

ssm_status ssm_cg_gen_pointwise(cg_ctx *c, ssm_cg_kernel *out);  /* families.c */
ssm_status ssm_cg_gen_conv1d(cg_ctx *c, ssm_cg_kernel *out);
ssm_status ssm_cg_gen_attention(cg_ctx *c, ssm_cg_kernel *out);
ssm_status ssm_cg_gen_rowreduce(cg_ctx *c, ssm_cg_kernel *out);
ssm_status ssm_cg_gen_embed(cg_ctx *c, ssm_cg_kernel *out);
ssm_status ssm_cg_gen_reduce(cg_ctx *c, ssm_cg_kernel *out);
ssm_status ssm_cg_gen_sample(cg_ctx *c, ssm_cg_kernel *out);
ssm_status ssm_cg_gen_gemv(cg_ctx *c, ssm_cg_kernel *out);       /* matmul.c */
ssm_status ssm_cg_gen_matmul(cg_ctx *c, ssm_cg_kernel *out);
ssm_status ssm_cg_gen_gemm(cg_ctx *c, ssm_cg_kernel *out);
ssm_status ssm_cg_gen_scan(cg_ctx *c, ssm_cg_kernel *out);       /* scan.c */
/* Whether the group's scan takes the chunked form (ssd.c says when). */
int ssm_cg_ssd_applies(const cg_ctx *c);
ssm_status ssm_cg_gen_ssd(cg_ctx *c, ssm_cg_kernel *out);        /* ssd.c */
ssm_status ssm_cg_gen_delta(cg_ctx *c, ssm_cg_kernel *out);      /* delta.c */
/* Whether the group's delta rule takes the chunked form (delta.c says when). */
int ssm_cg_delta_chunk_applies(const cg_ctx *c);
ssm_status ssm_cg_gen_delta_chunk(cg_ctx *c, ssm_cg_kernel *out);
ssm_status ssm_cg_gen_rope(cg_ctx *c, ssm_cg_kernel *out);       /* items.c */
ssm_status ssm_cg_gen_positions(cg_ctx *c, ssm_cg_kernel *out);
ssm_status ssm_cg_gen_gather(cg_ctx *c, ssm_cg_kernel *out);
ssm_status ssm_cg_gen_topk(cg_ctx *c, ssm_cg_kernel *out);
ssm_status ssm_cg_gen_matmul_sel(cg_ctx *c, ssm_cg_kernel *out);

#endif
