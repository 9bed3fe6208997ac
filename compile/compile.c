/*
 * compile.c — from a model to an in-memory bundle.
 *
 * Builds the decode (T=1, drawing its next token with a sampler) and prefill
 * (T=C) graphs, runs the passes on each, and lays out memory: weights and
 * states by name, shared by both programs, in their own buffers (weights
 * in buffers of at most 1 GiB, the small weights apart from the large), and
 * one activation buffer sized for the larger plan. Every fused group becomes
 * a kernel (codegen); kernels with identical source are kept once and
 * compiled to SPIR-V. Each program is its dispatches in order, with a
 * barrier where schedule asks for one. A tensor that a GLSL kernel only reads
 * and that is larger than the window is bound as several windows of it
 * (codegen.h: ssm_cg_glsl_split). Once every dispatch is laid out, each
 * kernel's WGSL gets its memory slots' windows: as many as its widest
 * dispatch needs.
 */
#include <stdlib.h>
#include <string.h>

#include "compile/compile.h"

#define WEIGHT_BUFFER_MAX ((uint64_t)1 << 30)
#define ALIGN SSM_BUNDLE_ALIGN

enum { BUF_STATE, BUF_ACT, BUF_WEIGHTS0 };

typedef struct {
  ssm_bundle *b;
  ssm_manifest *m;
  ssm_arena *arena; /* the bundle's: the manifest's strings and arrays */
  SSM_VEC(ssm_mf_buffer) buffers;
  SSM_VEC(ssm_mf_tensor) weights;
  SSM_VEC(ssm_mf_tensor) states; /* the sampler's too; it is left out of the manifest's */
  ssm_strmap by_name;            /* weight or state name -> 1 + its index in weights/states */
  SSM_VEC(ssm_mf_kernel) kernels;
  SSM_VEC(ssm_cg_kernel) kernel_src; /* each kernel as generated (its sources, its WGSL slots) */
  SSM_VEC(int) kernel_prev;          /* the previous kernel with the same GLSL, or -1 */
  ssm_strmap kernel_by_glsl;         /* a kernel's GLSL -> 1 + the last kernel with it */
  int small_weights, big_weights;    /* the weights buffers being filled, or -1 */
  int output_buffer;                 /* the buffer of an output apart (plan_buffers.c), or -1 */
  int slots_buffer;                  /* the batch program's states (SSM_BUFFER_SLOTS), or -1 */
  uint64_t window;                   /* bytes of a WGSL storage window */
  ssm_sb blobs;
  ssm_arena *tmp;     /* generated kernels, while compiling */
  uint64_t act_bytes; /* the larger activation plan */
  int uses_pos;       /* a program reads "pos" (then max_seq bounds it) */
} compiler;

static uint64_t align_up(uint64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

static uint64_t type_bytes(const ssm_type *t) { return ssm_type_bytes(t); }

static ssm_blob add_blob(compiler *c, const void *data, size_t n) {
  while (c->blobs.n % 16) ssm_sb_append(&c->blobs, "", 1);
  ssm_blob b = {c->blobs.n, n};
  ssm_sb_append(&c->blobs, data, n);
  return b;
}

static ssm_region alloc_in(compiler *c, int buffer, uint64_t bytes) {
  ssm_mf_buffer *buf = &c->buffers.items[buffer];
  ssm_region r = {buffer, align_up(buf->bytes), bytes};
  buf->bytes = r.offset + bytes;
  return r;
}

/* The weight or state named `name` (names are unique among both). */
static ssm_mf_tensor *find(compiler *c, ssm_mf_tensor *v, const char *name) {
  uintptr_t i = (uintptr_t)ssm_strmap_get(&c->by_name, name);
  return i ? &v[i - 1] : NULL;
}

static ssm_status remember(compiler *c, const char *name, size_t index) {
  int found;
  void **slot;
  SSM_TRY(ssm_status_wrap(ssm_strmap_slot(&c->by_name, name, &found, &slot),
                          "the weights and states by name"));
  *slot = (void *)(uintptr_t)(index + 1);
  return NULL;
}

/* Weights go to buffers of at most 1 GiB (a larger tensor gets one alone).
 * The small ones, which WGSL kernels read through one shared slot
 * (codegen.h), fill buffers of their own, so that the small weights of one
 * dispatch lie close together whatever large weights sit between them. */
static ssm_status place_weight(compiler *c, const ssm_node *n, ssm_region *out) {
  const char *name = ssm_node_str(n, "name", "");
  ssm_mf_tensor *w = find(c, c->weights.items, name);
  if (w) {
    *out = w->region;
    return NULL;
  }
  uint64_t bytes = type_bytes(&n->result->type);
  int *buf = bytes < SSM_CG_WGSL_OWN_SLOT_BYTES ? &c->small_weights : &c->big_weights;
  if (*buf < 0 || (c->buffers.items[*buf].bytes &&
                   align_up(c->buffers.items[*buf].bytes) + bytes > WEIGHT_BUFFER_MAX)) {
    SSM_TRY(ssm_status_wrap(ssm_vec_push(&c->buffers, ((ssm_mf_buffer){SSM_BUFFER_WEIGHTS, 0})),
                            "the bundle's buffers"));
    *buf = (int)c->buffers.n - 1;
  }
  ssm_mf_tensor t = {ssm_arena_strdup(c->arena, name), n->result->type,
                     ssm_arena_strdup(c->arena, ssm_node_str(n, "transform", "")),
                     alloc_in(c, *buf, bytes)};
  SSM_TRY(ssm_status_wrap(ssm_vec_push(&c->weights, t), "the bundle's weights"));
  *out = t.region;
  return remember(c, t.name, c->weights.n - 1);
}

static ssm_status place_state(compiler *c, const ssm_node *n, ssm_region *out) {
  const char *name = ssm_node_str(n, "name", "");
  ssm_mf_tensor *s = find(c, c->states.items, name);
  if (s) {
    if (!ssm_type_equal(&s->type, &n->result->type))
      return ssm_status_new(SSM_ERR_INVALID, "state '%s' has different types in the decode and "
                            "prefill graphs", name);
    *out = s->region;
    return NULL;
  }
  int buf = BUF_STATE;
  if (!strncmp(name, SSM_SLOTS_PREFIX, strlen(SSM_SLOTS_PREFIX))) { /* the batch program's */
    if (c->slots_buffer < 0) {
      SSM_TRY(ssm_status_wrap(ssm_vec_push(&c->buffers, ((ssm_mf_buffer){SSM_BUFFER_SLOTS, 0})),
                              "the bundle's buffers"));
      c->slots_buffer = (int)c->buffers.n - 1;
    }
    buf = c->slots_buffer;
  }
  ssm_mf_tensor t = {ssm_arena_strdup(c->arena, name), n->result->type, "",
                     alloc_in(c, buf, type_bytes(&n->result->type))};
  SSM_TRY(ssm_status_wrap(ssm_vec_push(&c->states, t), "the bundle's states"));
  *out = t.region;
  return remember(c, t.name, c->states.n - 1);
}

/* Where a bound value lives: a weight, a state, planned activations, or
 * the output buffer (a program's output apart from the pool: the prefill's
 * logits of every row, which a runtime allocates only when a run wants
 * them). */
static ssm_status region_of(compiler *c, const ssm_value *v, ssm_region *out) {
  const ssm_node *d = v->def;
  if (d->op == SSM_OP_WEIGHT) return place_weight(c, d, out);
  if (d->op == SSM_OP_STATE) return place_state(c, d, out);
  int64_t ofs = ssm_node_int(d, "ofs", -1);
  if (ofs < 0)
    return ssm_status_new(SSM_ERR_INTERNAL, "%s result has no planned memory",
                          ssm_op_info_get(d->op)->name);
  if (ssm_node_int(d, "apart", 0)) {
    if (c->output_buffer < 0) {
      SSM_TRY(ssm_status_wrap(ssm_vec_push(&c->buffers, ((ssm_mf_buffer){SSM_BUFFER_OUTPUT, 0})),
                              "the bundle's buffers"));
      c->output_buffer = (int)c->buffers.n - 1;
    }
    *out = (ssm_region){c->output_buffer, (uint64_t)ofs, type_bytes(&v->type)};
    ssm_mf_buffer *b = &c->buffers.items[c->output_buffer];
    if ((uint64_t)ofs + out->bytes > b->bytes) b->bytes = (uint64_t)ofs + out->bytes;
    return NULL;
  }
  *out = (ssm_region){BUF_ACT, (uint64_t)ofs, type_bytes(&v->type)};
  uint64_t end = (uint64_t)ofs + align_up(out->bytes);
  if (end > c->act_bytes) c->act_bytes = end;
  return NULL;
}

/* Whether two generated kernels are the same WGSL kernel: the same source
 * and the same memory slots (an add of two activations and an add of an
 * activation and a weight read their operands through different slots). */
static int same_wgsl(const ssm_cg_kernel *a, const ssm_cg_kernel *b) {
  return !strcmp(a->wgsl, b->wgsl) && a->nslots == b->nslots &&
         !memcmp(a->slot, b->slot, sizeof a->slot) && !memcmp(a->access, b->access, sizeof a->access) &&
         !memcmp(a->slot_writable, b->slot_writable, sizeof a->slot_writable);
}

/* The windows of each tensor of GLSL kernel `k` (codegen.h): a tensor it
 * only reads is split into windows of the bundle's window size; one it
 * writes never is, nor one that would need more windows than a kernel may
 * bind (the Vulkan runtime refuses those on a device that cannot bind them
 * whole, before reading weights). */
static void glsl_windows(const compiler *c, const ssm_cg_kernel *k, int *out) {
  int total = 0;
  for (int i = 0; i < SSM_BUNDLE_MAX_BINDINGS; i++) out[i] = 1;
  for (int i = 1; i < k->nbindings; i++) {
    uint64_t bytes = (type_bytes(&k->bind[i]->type) + 3) & ~(uint64_t)3;
    uint64_t n = (bytes + c->window - 1) / c->window;
    if (k->bind[i]->def->op != SSM_OP_STATE && n > 1 && n <= SSM_BUNDLE_GLSL_MAX_WINDOWS) out[i] = (int)n;
    total += out[i];
  }
  /* more windows than a kernel may bind (with the scratch of a kernel that
   * has one: codegen.h): whole, for devices that bind it so */
  if (total + 1 + (k->glsl_coop_prep != NULL) > SSM_BUNDLE_GLSL_MAX_BINDINGS)
    for (int i = 0; i < SSM_BUNDLE_MAX_BINDINGS; i++) out[i] = 1;
}

/* GLSL `src` (a cooperative-matrix variant or its prep kernel) split into
 * `windows` as kernel k's, its scratch binding numbered after them
 * (codegen.h), compiled to SPIR-V; both into the blob section. */
static ssm_status coop_source(compiler *c, const ssm_cg_kernel *k, const char *src,
                              const int *windows, const char *name, ssm_blob *out_spirv,
                              ssm_blob *out_glsl) {
  ssm_cg_kernel kc = *k;
  kc.glsl = src;
  const char *glsl;
  SSM_TRY(ssm_status_wrap(ssm_cg_glsl_split(&kc, windows, c->window, c->tmp, &glsl), "%s", name));
  int bindings = 0;
  for (int b = 0; b < k->nbindings; b++) bindings += windows[b];
  const char *tok = "SSM_SCRATCH_BINDING";
  ssm_sb sb = {0};
  for (const char *p = glsl, *at; *p; p = at + strlen(tok)) {
    if (!(at = strstr(p, tok))) {
      ssm_sb_printf(&sb, "%s", p);
      break;
    }
    ssm_sb_printf(&sb, "%.*s%d", (int)(at - p), p, bindings);
  }
  glsl = ssm_arena_strdup(c->tmp, ssm_sb_str(&sb));
  ssm_sb_free(&sb);
  uint32_t *words;
  size_t nwords;
  SSM_TRY(ssm_cg_compile_glsl(glsl, name, &words, &nwords));
  *out_spirv = add_blob(c, words, nwords * 4);
  *out_glsl = add_blob(c, glsl, strlen(glsl));
  free(words);
  return NULL;
}

/* The kernel with these sources (GLSL and WGSL), made once; GLSL is
 * compiled to SPIR-V once even when two kernels share it. */
static ssm_status kernel_index(compiler *c, const ssm_cg_kernel *k, int *out) {
  int same_glsl = (int)(uintptr_t)ssm_strmap_get(&c->kernel_by_glsl, k->glsl) - 1;
  for (int i = same_glsl; i >= 0; i = c->kernel_prev.items[i]) {
    if (same_wgsl(&c->kernel_src.items[i], k)) {
      *out = i;
      return NULL;
    }
  }
  int index = (int)c->kernels.n;
  char *name = ssm_arena_printf(c->arena, "k%d_%s", index, k->family);
  ssm_mf_kernel mk = {.name = name, .family = ssm_arena_strdup(c->arena, k->family),
                      .params = ssm_arena_strdup(c->arena, k->params),
                      .nbindings = k->nbindings};
  if (same_glsl >= 0) {
    mk.spirv = c->kernels.items[same_glsl].spirv;
    mk.glsl = c->kernels.items[same_glsl].glsl;
    mk.spirv_coop = c->kernels.items[same_glsl].spirv_coop;
    mk.glsl_coop = c->kernels.items[same_glsl].glsl_coop;
    mk.spirv_prep = c->kernels.items[same_glsl].spirv_prep;
    mk.glsl_prep = c->kernels.items[same_glsl].glsl_prep;
    memcpy(mk.prep_groups, c->kernels.items[same_glsl].prep_groups, sizeof mk.prep_groups);
    memcpy(mk.coop_groups, c->kernels.items[same_glsl].coop_groups, sizeof mk.coop_groups);
    mk.scratch_bytes = c->kernels.items[same_glsl].scratch_bytes;
    memcpy(mk.glsl_windows, c->kernels.items[same_glsl].glsl_windows, sizeof mk.glsl_windows);
  } else {
    uint32_t *words;
    size_t nwords;
    const char *glsl;
    glsl_windows(c, k, mk.glsl_windows);
    SSM_TRY(ssm_status_wrap(ssm_cg_glsl_split(k, mk.glsl_windows, c->window, c->tmp, &glsl),
                            "%s", name));
    SSM_TRY(ssm_cg_compile_glsl(glsl, name, &words, &nwords));
    mk.spirv = add_blob(c, words, nwords * 4);
    mk.glsl = add_blob(c, glsl, strlen(glsl));
    free(words);
    /* the same windows, on cooperative matrices, and the kernel before it */
    if (k->glsl_coop)
      SSM_TRY(coop_source(c, k, k->glsl_coop, mk.glsl_windows, name, &mk.spirv_coop, &mk.glsl_coop));
    if (k->glsl_coop && k->glsl_coop_prep) {
      SSM_TRY(coop_source(c, k, k->glsl_coop_prep, mk.glsl_windows,
                          ssm_arena_printf(c->arena, "%s_prep", name), &mk.spirv_prep, &mk.glsl_prep));
      memcpy(mk.prep_groups, k->prep_groups, sizeof mk.prep_groups);
      memcpy(mk.coop_groups, k->coop_groups, sizeof mk.coop_groups);
      mk.scratch_bytes = k->scratch_bytes;
    }
  }
  mk.nslots = k->nslots;
  memcpy(mk.slot, k->slot, sizeof mk.slot);
  ssm_status s = ssm_vec_reserve(&c->kernels, 1);
  if (!s) s = ssm_vec_reserve(&c->kernel_src, 1);
  if (!s) s = ssm_vec_reserve(&c->kernel_prev, 1);
  int found;
  void **slot;
  if (!s) s = ssm_strmap_slot(&c->kernel_by_glsl, k->glsl, &found, &slot);
  SSM_TRY(ssm_status_wrap(s, "the bundle's kernels"));
  *slot = (void *)(uintptr_t)(index + 1);
  c->kernels.items[c->kernels.n++] = mk;
  c->kernel_src.items[c->kernel_src.n++] = *k;
  c->kernel_prev.items[c->kernel_prev.n++] = same_glsl;
  *out = index;
  return NULL;
}

/* Windows that slot `s` of kernel `k` needs in dispatch `st`: its bindings'
 * span over the window size, rounded up; they must share a buffer. */
static ssm_status slot_windows(const ssm_mf_kernel *k, const ssm_mf_step *st, int s,
                               uint64_t window, int *out) {
  int buffer;
  uint64_t lo, hi;
  if (!ssm_mf_slot_span(k, st, s, &buffer, &lo, &hi))
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: the tensors of its WGSL memory slot %d lie "
                          "in more than one buffer", k->name, s);
  SSM_ASSERT(buffer >= 0);
  *out = (int)((hi - lo + window - 1) / window);
  return NULL;
}

/* Completes each kernel's WGSL: every slot gets the most windows that any
 * of the kernel's dispatches needs. */
static ssm_status wgsl_modules(compiler *c) {
  const ssm_mf_program *progs[3] = {&c->m->decode, &c->m->prefill, &c->m->batch};
  for (size_t i = 0; i < c->kernels.n; i++) {
    ssm_mf_kernel *k = &c->kernels.items[i];
    for (int s = 0; s < k->nslots; s++) k->windows[s] = 1;
    for (int p = 0; p < 3; p++)
      for (int j = 0; j < progs[p]->nsteps; j++) {
        const ssm_mf_step *st = &progs[p]->steps[j];
        for (int s = 0; s < k->nslots && st->kernel == (int)i; s++) {
          int n = 1;
          SSM_TRY(slot_windows(k, st, s, c->window, &n));
          if (n > k->windows[s]) k->windows[s] = n;
        }
      }
    const char *text;
    SSM_TRY(ssm_status_wrap(ssm_cg_wgsl_module(&c->kernel_src.items[i], k->windows, c->window,
                                               c->tmp, &text), "%s", k->name));
    k->wgsl = add_blob(c, text, strlen(text));
  }
  return NULL;
}

typedef struct {
  const char *dir, *program;
  int index;
  ssm_status err;
  const ssm_compile_opts *o; /* its on_note, for the decode program */
} dumper;

/* Hands the pass's note to on_note (decode), and writes
 * DIR/<program>.<NN>-<pass>.ssmir after each pass (--dump-ir). */
static void dump_after(const char *pass, ssm_graph *g, const char *note, void *user) {
  dumper *d = user;
  if (d->o->on_note && note && *note && !strcmp(d->program, "decode"))
    d->o->on_note(pass, note, d->o->note_user);
  if (d->err || !d->dir) return;
  ssm_sb path = {0}, text = {0};
  ssm_sb_printf(&path, "%s/%s.%02d-%s.ssmir", d->dir, d->program, d->index++, pass);
  char *ir;
  d->err = ssm_graph_print(g, &ir);
  if (!d->err) ssm_sb_printf(&text, "# after %s: %s\n%s", pass, note && *note ? note : "", ir);
  free(ir);
  if (!d->err) d->err = ssm_sb_status(&path, "--dump-ir");
  if (!d->err) d->err = ssm_sb_status(&text, "--dump-ir");
  if (!d->err)
    d->err = ssm_status_wrap(ssm_file_write(path.s, 1, (const void *const[]){text.s}, &text.n),
                             "--dump-ir");
  ssm_sb_free(&path);
  ssm_sb_free(&text);
}

/* The decode program's sampler: `next` is the drawn id, `sampler` its state. */
static ssm_status add_sampler(compiler *c, ssm_mf_program *p, const ssm_value *next) {
  if (p->tokens != 1 && ssm_node_int(next->def, "batch", 0) == 0)
    return ssm_status_new(SSM_ERR_INVALID, "a sampler needs a program of one token");
  p->has_sampler = 1;
  SSM_TRY(region_of(c, next, &p->next));
  p->has_seen = next->def->nargs > 2;
  if (p->has_seen) SSM_TRY(region_of(c, next->def->args[2], &p->seen));
  return region_of(c, next->def->args[1], &p->sampler);
}

static ssm_status program_io(compiler *c, ssm_graph *g, ssm_mf_program *p) {
  int has_tokens = 0, has_output = 0;
  for (ssm_node *n = g->first; n; n = n->next) {
    if (n->op == SSM_OP_INPUT) {
      const char *name = ssm_node_str(n, "name", "");
      int is_tokens = !strcmp(name, "tokens"), is_pos = !strcmp(name, "pos");
      if (!is_tokens && !is_pos)
        return ssm_status_new(SSM_ERR_UNSUPPORTED, "graph %s: unknown input '%s' (inputs are "
                              "\"tokens\" and \"pos\")", g->name, name);
      if (is_tokens && (n->result->type.dtype != SSM_I32 ||
                        ssm_type_numel(&n->result->type) != p->tokens))
        return ssm_status_new(SSM_ERR_INVALID, "graph %s: its tokens input is not i32[%d]",
                              g->name, p->tokens);
      SSM_TRY(region_of(c, n->result, is_tokens ? &p->tokens_in : &p->pos));
      has_tokens |= is_tokens;
      p->has_pos |= is_pos;
    } else if (n->op == SSM_OP_OUTPUT) {
      const ssm_value *v = n->args[0];
      if (v->type.dtype != SSM_F32)
        return ssm_status_new(SSM_ERR_INVALID, "graph %s: its first output is not f32 logits",
                              g->name);
      SSM_TRY(region_of(c, v, &p->output));
      has_output = 1;
      if (n->nargs > 1 && n->args[1]->def->op == SSM_OP_SAMPLE)
        SSM_TRY(add_sampler(c, p, n->args[1]));
    }
  }
  if (!has_tokens || !has_output)
    return ssm_status_new(SSM_ERR_INVALID, "graph %s needs an input 'tokens' and an output", g->name);
  c->uses_pos |= p->has_pos;
  return NULL;
}

/* Whether the graph's T tokens meet only in the ops that carry state over
 * time (scan, conv1d_causal, attention), so that a run may stop after its
 * first n: every value computed from the tokens is token-major ([T, ...]),
 * and no op mixes its rows (reduce, concat and slice not along axis 0, a
 * transpose keeping axis 0 first, a matmul whose weight does not depend on
 * the tokens, no sampler). Values made from states and weights alone are
 * the same whatever n is. */
static int rows_independent(ssm_graph *g, int64_t T) {
  ssm_graph_number(g);
  unsigned char *dep = calloc((size_t)g->nvalues + 1, 1);
  if (!dep) return 0;
  int ok = 1;
  for (ssm_node *n = g->first; n && ok; n = n->next) {
    if (!n->result) continue;
    int d = n->op == SSM_OP_INPUT && !strcmp(ssm_node_str(n, "name", ""), "tokens");
    for (int i = 0; i < n->nargs; i++) d |= dep[n->args[i]->id];
    dep[n->result->id] = (unsigned char)d;
    if (!d) continue;
    const ssm_type *t = &n->result->type;
    if (t->rank < 1 || t->dims[0] != T) ok = 0;
    switch (n->op) {
      case SSM_OP_REDUCE:
      case SSM_OP_CONCAT:
      case SSM_OP_SLICE: ok &= ssm_node_int(n, "axis", 0) != 0; break;
      case SSM_OP_TRANSPOSE: {
        const ssm_attr *perm = ssm_node_attr(n, "perm");
        ok &= perm && perm->n > 0 && perm->ints[0] == 0;
        break;
      }
      case SSM_OP_MATMUL:
      case SSM_OP_MATMUL_SEL: ok &= !dep[n->args[1]->id]; break;
      case SSM_OP_SAMPLE: ok = 0; break;
      default: break;
    }
  }
  free(dep);
  return ok;
}

/* Runs the passes on one graph and makes it a program: one dispatch per
 * fused group, in order. */
/* Copies a growable array into the bundle's arena; NULL when that fails
 * (the arena says so). */
static void *to_arena(compiler *c, const void *items, size_t n, size_t elem) {
  void *p = ssm_arena_alloc(c->arena, elem * (n ? n : 1));
  if (p && n) memcpy(p, items, elem * n);
  return p;
}

int ssm_compile_coop_prep(const ssm_compile_opts *opts) {
  const char *e = getenv("SSM_COOP_PREP");
  return !opts->no_coop_prep && !(e && !strcmp(e, "0"));
}

int ssm_compile_delta_steps(const ssm_compile_opts *opts) {
  const char *e = getenv("SSM_DELTA_CHUNKS");
  return opts->delta_steps || (e && !strcmp(e, "0"));
}

static ssm_status compile_program(compiler *c, ssm_graph *g, const ssm_compile_opts *o,
                                  const char *name, ssm_mf_program *p) {
  /* the prefill's logits of every row go apart (plan_buffers.c); decode's
   * one row is read by its sampler at every step */
  ssm_pass_opts po = {.no_fuse = o->no_fuse, .align = ALIGN, .weight_dtype = o->dtype,
                      .output_apart = p->tokens > 1 && strcmp(name, "batch")};
  dumper d = {o->dump_dir, name, 0, NULL, o};
  ssm_status s = ssm_passes_run(g, &po, NULL, o->dump_dir || o->on_note ? dump_after : NULL, &d);
  if (!s) s = d.err;
  if (!s) s = program_io(c, g, p);
  if (s) return s;
  ssm_arena *a;
  SSM_TRY(ssm_arena_create(&a));
  ssm_group *gs;
  int ng;
  s = ssm_groups_collect(g, a, &gs, &ng);
  SSM_VEC(ssm_mf_step) steps = {0};
  char *stage = ssm_arena_printf(a, "compiling %s", name);
  /* a run may take fewer tokens than the program's when every kernel that
   * writes state does only the first count tokens' work (codegen.h) */
  int any_count = p->tokens > 1 && rows_independent(g, p->tokens);
  for (int i = 0; i < ng && !s; i++) {
    ssm_cg_kernel k;
    if ((s = ssm_progress_report(&o->progress, stage, (uint64_t)i, (uint64_t)ng))) break;
    ssm_mf_step st = {.barrier = ssm_node_int(gs[i].root, "sync", 1) != 0};
    ssm_cg_opts cgo = {.coop_prep = ssm_compile_coop_prep(o),
                       .delta_steps = ssm_compile_delta_steps(o)};
    if ((s = ssm_cg_kernel_for_group_opts(g, &gs[i], &cgo, c->tmp, &k))) break;
    if ((s = kernel_index(c, &k, &st.kernel))) break;
    memcpy(st.groups, k.groups, sizeof st.groups);
    st.nbindings = k.nbindings;
    for (int j = 0; j < k.nbindings && !s; j++) s = region_of(c, k.bind[j], &st.bindings[j]);
    for (int j = 0; j < k.nbindings && !s; j++)
      if (c->buffers.items[st.bindings[j].buffer].usage == SSM_BUFFER_STATE && !k.run_count)
        any_count = 0;
    st.op = ssm_arena_strdup(c->arena, k.params);
    if (!s) s = ssm_status_wrap(ssm_vec_push(&steps, st), "the dispatches of %s", name);
  }
  if (!s) s = ssm_progress_report(&o->progress, stage, (uint64_t)ng, (uint64_t)ng);
  ssm_arena_destroy(a);
  if (!s) {
    p->any_count = any_count;
    p->nsteps = (int)steps.n;
    p->steps = to_arena(c, steps.items, steps.n, sizeof *p->steps);
    for (ssm_node *n = g->first; n; n = n->next) {
      if (!n->result) continue;
      uint64_t bytes = align_up(type_bytes(&n->result->type));
      int64_t ofs = ssm_node_int(n, "ofs", -1);
      if (ssm_node_int(n, "apart", 0)) continue; /* not activations (plan_buffers.c) */
      if (ofs >= 0 && (uint64_t)ofs + bytes > p->activation_bytes)
        p->activation_bytes = (uint64_t)ofs + bytes;
      if (ssm_op_info_get(n->op)->kind != SSM_KIND_SRC && n->op != SSM_OP_RESHAPE)
        p->activation_bytes_unplanned += bytes;
    }
    char *ir;
    s = ssm_graph_print(g, &ir);
    if (!s) p->ir = add_blob(c, ir, strlen(ir));
    free(ir);
  }
  ssm_vec_free(&steps);
  return s;
}

static ssm_status finish(compiler *c, ssm_model *m, const ssm_compile_opts *o) {
  ssm_manifest *mf = c->m;
  int64_t v = 0;
  mf->generator = "ssmc " SSM_VERSION;
  mf->architecture = ssm_arena_strdup(c->arena, ssm_model_arch(m));
  mf->vocab = ssm_model_param(m, "vocab", &v) ? v : 0;
  mf->max_seq = c->uses_pos && ssm_model_param(m, "max_seq", &v) ? v : 0;
  mf->eos = ssm_model_eos(m);
  char *config;
  SSM_TRY(ssm_model_config_used(m, &config));
  mf->config = ssm_arena_strdup(c->arena, config);
  free(config);
  mf->dtype = o->dtype;
  mf->align = ALIGN;
  mf->wgsl_window = c->window;
  c->buffers.items[BUF_ACT].bytes = c->act_bytes;
  for (size_t i = 0; i < c->buffers.n; i++)
    c->buffers.items[i].bytes = align_up(c->buffers.items[i].bytes ? c->buffers.items[i].bytes : 4);
  mf->nbuffers = (int)c->buffers.n;
  mf->buffers = to_arena(c, c->buffers.items, c->buffers.n, sizeof *mf->buffers);
  mf->nweights = (int)c->weights.n;
  mf->weights = to_arena(c, c->weights.items, c->weights.n, sizeof *mf->weights);
  /* the sampler and its seen-token set are not model state:
   * programs.decode.sampler has them */
  mf->states = ssm_arena_alloc(c->arena, sizeof *mf->states * (c->states.n + 1));
  for (size_t i = 0; i < c->states.n && mf->states; i++)
    if (strcmp(c->states.items[i].name, SSM_SAMPLER_STATE) &&
        strcmp(c->states.items[i].name, SSM_SLOTS_SAMPLER_STATE) &&
        strcmp(c->states.items[i].name, SSM_SEEN_STATE))
      mf->states[mf->nstates++] = c->states.items[i];
  mf->nkernels = (int)c->kernels.n;
  mf->kernels = to_arena(c, c->kernels.items, c->kernels.n, sizeof *mf->kernels);
  SSM_TRY(ssm_arena_status(c->arena, "the bundle's manifest"));
  size_t size = c->blobs.n;
  char *blobs;
  SSM_TRY(ssm_sb_take(&c->blobs, "the bundle's kernels", &blobs));
  ssm_bundle_set_blobs(c->b, blobs, size);
  return NULL;
}

int ssm_compile_chunk(const ssm_model *m, const ssm_compile_opts *opts) {
  if (opts && opts->prefill_tokens > 0) return opts->prefill_tokens;
  int64_t max_seq = 0;
  if (ssm_model_param(m, "max_seq", &max_seq) && max_seq > 0 && max_seq < SSM_CHUNK_DEFAULT)
    return (int)max_seq;
  return SSM_CHUNK_DEFAULT;
}

ssm_status ssm_compile(ssm_model *m, const ssm_compile_opts *opts, ssm_bundle **out) {
  *out = NULL;
  ssm_compile_opts o = opts ? *opts : (ssm_compile_opts){0};
  o.prefill_tokens = ssm_compile_chunk(m, opts);
  if (o.dtype != SSM_F32 && o.dtype != SSM_F16 && o.dtype != SSM_BF16 && !ssm_dtype_is_quant(o.dtype))
    return ssm_status_new(SSM_ERR_INVALID, "--dtype %s: expected f32, f16, bf16, q8_0 or q4_0",
                          ssm_dtype_name(o.dtype));
  if (!o.wgsl_window) o.wgsl_window = SSM_BUNDLE_WINDOW;
  if (o.wgsl_window < ALIGN || o.wgsl_window & (o.wgsl_window - 1))
    return ssm_status_new(SSM_ERR_INVALID, "--wgsl-window %llu: expected a power of two of at "
                          "least %d bytes", (unsigned long long)o.wgsl_window, ALIGN);
  int64_t vocab = 0;
  if (!ssm_model_param(m, "vocab", &vocab) || vocab < 1)
    return ssm_status_new(SSM_ERR_INVALID, "%s: the architecture defines no 'vocab' param",
                          ssm_model_arch(m));
  /* every allocation of a compile is checked at its end, once more: kernel
   * text and blobs are built by builders that remember a failure */
  unsigned long mark = ssm_nomem_mark();
  compiler c = {.small_weights = -1, .big_weights = -1, .output_buffer = -1, .slots_buffer = -1,
                .window = o.wgsl_window};
  SSM_TRY(ssm_bundle_new("(compiled)", &c.b));
  ssm_status s = ssm_arena_create(&c.tmp);
  c.m = ssm_bundle_manifest_mut(c.b);
  c.arena = ssm_bundle_arena(c.b);
  if (!s) s = ssm_vec_push(&c.buffers, ((ssm_mf_buffer){SSM_BUFFER_STATE, 0}));
  if (!s) s = ssm_vec_push(&c.buffers, ((ssm_mf_buffer){SSM_BUFFER_ACTIVATIONS, 0}));
  if (o.slots < 0 || o.slots > SSM_MAX_SLOTS)
    s = ssm_status_new(SSM_ERR_INVALID, "--slots %d: expected 0 to %d", o.slots, SSM_MAX_SLOTS);
  const char *names[3] = {"decode", "prefill", "batch"};
  ssm_mf_program *progs[3] = {&c.m->decode, &c.m->prefill, &c.m->batch};
  int tokens[3] = {1, o.prefill_tokens, o.slots};
  for (int p = 0; p < 3 && !s; p++) {
    ssm_graph *g = NULL;
    if (!tokens[p]) continue;
    progs[p]->tokens = tokens[p];
    s = p == 2 ? ssm_model_build_batch(m, tokens[p], &g) : ssm_model_build(m, tokens[p], &g);
    /* decode and batch draw their next tokens */
    if (!s && p != 1) s = ssm_graph_add_sampler(g, p == 2);
    if (!s) s = compile_program(&c, g, &o, names[p], progs[p]);
    ssm_graph_destroy(g);
  }
  if (!s) s = wgsl_modules(&c);
  if (!s) s = finish(&c, m, &o);
  s = ssm_nomem_check(mark, s, "compiling");
  ssm_vec_free(&c.buffers);
  ssm_vec_free(&c.weights);
  ssm_vec_free(&c.states);
  ssm_vec_free(&c.kernels);
  ssm_vec_free(&c.kernel_src);
  ssm_vec_free(&c.kernel_prev);
  ssm_strmap_free(&c.kernel_by_glsl);
  ssm_strmap_free(&c.by_name);
  ssm_sb_free(&c.blobs);
  ssm_arena_destroy(c.tmp);
  if (s) {
    ssm_bundle_close(c.b);
    return s;
  }
  *out = c.b;
  return NULL;
}
