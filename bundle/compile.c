/*
 * compile.c — from a model to a .ssmb bundle.
 *
 * Builds the decode (T=1) and prefill (T=C) graphs, gives every value a place
 * in a memory pool (weights and state shared by both programs; constants;
 * activations), generates one kernel per working node, deduplicates kernels
 * with identical source, compiles them to SPIR-V, and writes the manifest
 * (cJSON) with both programs as dispatch lists.
 */
#include <cjson/cJSON.h>
#include <string.h>

#include "codegen/codegen.h"
#include "passes/passes.h"
#include "bundle/bundle.h"

#define WEIGHT_BUFFER_MAX ((uint64_t)1 << 30)

enum { POOL_STATE, POOL_CONST, POOL_ACT, POOL_WEIGHTS0 };

typedef struct {
  int buffer;
  uint64_t offset, bytes;
} region;

typedef struct {
  const char *name;
  region r;
} named_region;

typedef struct {
  /* pools */
  uint64_t pool_bytes[64];
  int npools;
  /* weights and states by name, shared by both programs */
  named_region *weights, *states;
  int nweights, nstates, cap_weights, cap_states;
  cJSON *jweights, *jstates, *jconsts, *jkernels;
  /* kernels, deduplicated by source */
  const char **kernel_src;
  int nkernels, cap_kernels;
  ssm_bundle_writer *bw;
  ssm_arena *arena;
  uint64_t act_bytes; /* largest activation need of the programs */
  int uses_pos;       /* a program reads the input "pos" (then max_seq bounds it) */
} compiler;

static uint64_t align_up(uint64_t x) { return (x + SSM_BUNDLE_ALIGN - 1) & ~(uint64_t)(SSM_BUNDLE_ALIGN - 1); }

static uint64_t type_bytes(const ssm_type *t) {
  return (uint64_t)ssm_type_numel(t) * ssm_dtype_size(t->dtype);
}

static region alloc_in(compiler *c, int pool, uint64_t bytes) {
  region r = {pool, align_up(c->pool_bytes[pool]), bytes};
  c->pool_bytes[pool] = r.offset + bytes;
  return r;
}

static cJSON *jshape(const ssm_type *t) {
  cJSON *a = cJSON_CreateArray();
  for (int d = 0; d < t->rank; d++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)t->dims[d]));
  return a;
}

static cJSON *jregion(region r) {
  cJSON *a = cJSON_CreateArray();
  cJSON_AddItemToArray(a, cJSON_CreateNumber(r.buffer));
  cJSON_AddItemToArray(a, cJSON_CreateNumber((double)r.offset));
  cJSON_AddItemToArray(a, cJSON_CreateNumber((double)r.bytes));
  return a;
}

static named_region *find_named(named_region *v, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(v[i].name, name)) return &v[i];
  return NULL;
}

static named_region *push_named(named_region **v, int *n, int *cap) {
  if (*n == *cap) {
    *cap = *cap ? *cap * 2 : 64;
    *v = realloc(*v, sizeof **v * (size_t)*cap);
    if (!*v) abort();
  }
  return &(*v)[(*n)++];
}

/* Weights go to pools of at most 1 GiB (a larger tensor gets one alone). */
static region place_weight(compiler *c, const ssm_node *n) {
  const char *name = ssm_node_str(n, "name", "");
  named_region *w = find_named(c->weights, c->nweights, name);
  if (w) return w->r;
  uint64_t bytes = type_bytes(&n->result->type);
  int pool = c->npools - 1;
  if (pool < POOL_WEIGHTS0 || (c->pool_bytes[pool] &&
                               align_up(c->pool_bytes[pool]) + bytes > WEIGHT_BUFFER_MAX))
    pool = c->npools++;
  SSM_ASSERT(c->npools <= 64);
  w = push_named(&c->weights, &c->nweights, &c->cap_weights);
  w->name = ssm_arena_strdup(c->arena, name); /* outlives the graph */
  w->r = alloc_in(c, pool, bytes);
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "name", name);
  cJSON_AddStringToObject(j, "dtype", ssm_dtype_name(n->result->type.dtype));
  cJSON_AddItemToObject(j, "shape", jshape(&n->result->type));
  cJSON_AddStringToObject(j, "transform", ssm_node_str(n, "transform", ""));
  cJSON_AddItemToObject(j, "region", jregion(w->r));
  cJSON_AddItemToArray(c->jweights, j);
  return w->r;
}

static ssm_status place_state(compiler *c, const ssm_node *n, region *out) {
  const char *name = ssm_node_str(n, "name", "");
  named_region *s = find_named(c->states, c->nstates, name);
  if (s) {
    if (s->r.bytes != type_bytes(&n->result->type))
      return ssm_status_new(SSM_ERR_INVALID, "state '%s' has different sizes in the decode and "
                            "prefill graphs", name);
    *out = s->r;
    return NULL;
  }
  s = push_named(&c->states, &c->nstates, &c->cap_states);
  s->name = ssm_arena_strdup(c->arena, name); /* outlives the graph */
  s->r = alloc_in(c, POOL_STATE, type_bytes(&n->result->type));
  /* the sampler is settings, not model state: programs.decode.sampler has it */
  if (!strcmp(name, SSM_SAMPLER_STATE)) {
    *out = s->r;
    return NULL;
  }
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "name", name);
  cJSON_AddStringToObject(j, "dtype", ssm_dtype_name(n->result->type.dtype));
  cJSON_AddItemToObject(j, "shape", jshape(&n->result->type));
  cJSON_AddItemToObject(j, "region", jregion(s->r));
  cJSON_AddItemToArray(c->jstates, j);
  *out = s->r;
  return NULL;
}

static int kernel_index(compiler *c, const char *src) {
  for (int i = 0; i < c->nkernels; i++)
    if (!strcmp(c->kernel_src[i], src)) return i;
  if (c->nkernels == c->cap_kernels) {
    c->cap_kernels = c->cap_kernels ? c->cap_kernels * 2 : 64;
    c->kernel_src = realloc(c->kernel_src, sizeof *c->kernel_src * (size_t)c->cap_kernels);
    if (!c->kernel_src) abort();
  }
  c->kernel_src[c->nkernels] = src;
  return c->nkernels++;
}

static ssm_status add_kernel_json(compiler *c, int index, const ssm_cg_kernel *k) {
  uint32_t *words;
  size_t nwords;
  char name[32];
  snprintf(name, sizeof name, "k%d_%s", index, k->family);
  SSM_TRY(ssm_cg_compile_glsl(k->glsl, name, &words, &nwords));
  uint64_t spv_off, glsl_off;
  ssm_bundle_writer_add_blob(c->bw, words, nwords * 4, &spv_off);
  free(words);
  ssm_bundle_writer_add_blob(c->bw, k->glsl, strlen(k->glsl), &glsl_off);
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "name", name);
  cJSON_AddStringToObject(j, "template", k->family);
  cJSON_AddStringToObject(j, "params", k->params);
  cJSON_AddNumberToObject(j, "bindings", k->nbindings);
  cJSON *spv = cJSON_AddArrayToObject(j, "spirv");
  cJSON_AddItemToArray(spv, cJSON_CreateNumber((double)spv_off));
  cJSON_AddItemToArray(spv, cJSON_CreateNumber((double)(nwords * 4)));
  cJSON *gl = cJSON_AddArrayToObject(j, "glsl");
  cJSON_AddItemToArray(gl, cJSON_CreateNumber((double)glsl_off));
  cJSON_AddItemToArray(gl, cJSON_CreateNumber((double)strlen(k->glsl)));
  cJSON_AddItemToArray(c->jkernels, j);
  return NULL;
}

/* Where a bound value lives: activations (planned), a weight, a state. */
static ssm_status region_of(compiler *c, const ssm_value *v, uint64_t act_align, region *out) {
  const ssm_node *d = v->def;
  if (d->op == SSM_OP_WEIGHT) {
    *out = place_weight(c, d);
    return NULL;
  }
  if (d->op == SSM_OP_STATE) return place_state(c, d, out);
  int64_t ofs = ssm_node_int(d, "ofs", -1);
  if (ofs < 0)
    return ssm_status_new(SSM_ERR_INTERNAL, "%s result has no planned memory",
                          ssm_op_info_get(d->op)->name);
  uint64_t bytes = (uint64_t)ssm_type_numel(&v->type) * ssm_dtype_size(v->type.dtype);
  *out = (region){POOL_ACT, (uint64_t)ofs, bytes};
  uint64_t end = (uint64_t)ofs + (bytes + act_align - 1) / act_align * act_align;
  if (end > c->act_bytes) c->act_bytes = end;
  return NULL;
}

typedef struct {
  const char *dir, *program;
  int index;
  ssm_status err;
} dumper;

/* Writes DIR/<program>.<NN>-<pass>.ssmir after each pass. */
static void dump_after(const char *pass, ssm_graph *g, const char *note, void *user) {
  dumper *d = user;
  if (d->err) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%02d-%s.ssmir", d->dir, d->program, d->index++, pass);
  FILE *f = fopen(path, "w");
  if (!f) {
    d->err = ssm_status_new(SSM_ERR_IO, "--dump-ir: cannot write %s", path);
    return;
  }
  char *text = ssm_graph_print(g);
  fprintf(f, "# after %s: %s\n%s", pass, note && *note ? note : "", text);
  free(text);
  if (fclose(f)) d->err = ssm_status_new(SSM_ERR_IO, "--dump-ir: cannot write %s", path);
}

/* A program with a sampler: "feedback": [region of the drawn id, region of
 * the tokens input] (the executor copies one into the other after the last
 * kernel, so the next run reads the id without the host) and "sampler": the
 * region of the sampler state. */
static ssm_status add_feedback(compiler *c, cJSON *prog, const ssm_value *next) {
  const ssm_value *in = NULL;
  for (const ssm_node *n = next->def; n && !in; n = n->prev)
    if (n->op == SSM_OP_INPUT && !strcmp(ssm_node_str(n, "name", ""), "tokens")) in = n->result;
  for (const ssm_node *n = next->def; n && !in; n = n->next)
    if (n->op == SSM_OP_INPUT && !strcmp(ssm_node_str(n, "name", ""), "tokens")) in = n->result;
  if (!in || ssm_type_numel(&in->type) != 1 || in->type.dtype != SSM_I32)
    return ssm_status_new(SSM_ERR_INVALID, "a sampler needs one i32 token input");
  region rn, ri, rs;
  SSM_TRY(region_of(c, next, SSM_BUNDLE_ALIGN, &rn));
  SSM_TRY(region_of(c, in, SSM_BUNDLE_ALIGN, &ri));
  SSM_TRY(region_of(c, next->def->args[1], SSM_BUNDLE_ALIGN, &rs));
  cJSON *fb = cJSON_AddArrayToObject(prog, "feedback");
  cJSON_AddItemToArray(fb, jregion(rn));
  cJSON_AddItemToArray(fb, jregion(ri));
  cJSON_AddItemToObject(prog, "sampler", jregion(rs));
  return NULL;
}

/* Runs the passes on one graph and turns it into a program: one dispatch
 * per fused group, in order, with a barrier where schedule asks for one. */
static ssm_status compile_program(compiler *c, ssm_graph *g, int tokens, const ssm_compile_opts *o,
                                  const char *name, cJSON **out) {
  ssm_pass_opts po = {.no_fuse = o->no_fuse, .align = SSM_BUNDLE_ALIGN};
  dumper d = {o->dump_dir, name, 0, NULL};
  ssm_status s = ssm_passes_run(g, &po, NULL, o->dump_dir ? dump_after : NULL, &d);
  if (!s) s = d.err;
  if (s) return s;
  ssm_arena *a = ssm_arena_create();
  ssm_group *gs;
  int ng;
  s = ssm_groups_collect(g, a, &gs, &ng);
  cJSON *prog = cJSON_CreateObject(), *steps = cJSON_CreateArray();
  cJSON_AddNumberToObject(prog, "tokens", tokens);
  cJSON *inputs = cJSON_AddArrayToObject(prog, "inputs");
  int has_tokens = 0;
  uint64_t naive = 0;
  for (ssm_node *n = g->first; n && !s; n = n->next) {
    if (n->result && ssm_op_info_get(n->op)->kind != SSM_KIND_SRC && n->op != SSM_OP_RESHAPE)
      naive += align_up((uint64_t)ssm_type_numel(&n->result->type) *
                        ssm_dtype_size(n->result->type.dtype));
    region r;
    if (n->op == SSM_OP_INPUT) {
      if ((s = region_of(c, n->result, SSM_BUNDLE_ALIGN, &r))) break;
      const char *iname = ssm_node_str(n, "name", "");
      if (strcmp(iname, "tokens") && strcmp(iname, "pos")) {
        s = ssm_status_new(SSM_ERR_UNSUPPORTED, "graph %s: unknown input '%s' (inputs are "
                           "\"tokens\" and \"pos\")", g->name, iname);
        break;
      }
      has_tokens |= !strcmp(iname, "tokens");
      c->uses_pos |= !strcmp(iname, "pos");
      cJSON *in = cJSON_CreateObject();
      cJSON_AddStringToObject(in, "name", iname);
      cJSON_AddItemToObject(in, "region", jregion(r));
      cJSON_AddItemToArray(inputs, in);
    } else if (n->op == SSM_OP_OUTPUT) {
      const ssm_value *v = n->args[0];
      if ((s = region_of(c, v, SSM_BUNDLE_ALIGN, &r))) break;
      cJSON *ob = cJSON_CreateObject();
      cJSON_AddItemToObject(ob, "shape", jshape(&v->type));
      cJSON_AddStringToObject(ob, "dtype", ssm_dtype_name(v->type.dtype));
      cJSON_AddItemToObject(ob, "region", jregion(r));
      cJSON_AddItemToObject(prog, "output", ob);
      if (n->nargs > 1 && n->args[1]->def->op == SSM_OP_SAMPLE)
        s = add_feedback(c, prog, n->args[1]);
    }
  }
  for (int i = 0; i < ng && !s; i++) {
    ssm_cg_kernel k;
    if ((s = ssm_cg_kernel_for_group(g, &gs[i], c->arena, &k))) break;
    int nk = c->nkernels, idx = kernel_index(c, k.glsl);
    if (idx == nk && (s = add_kernel_json(c, idx, &k))) break;
    cJSON *st = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "kernel", idx);
    cJSON_AddNumberToObject(st, "barrier", (double)ssm_node_int(gs[i].root, "sync", 1));
    cJSON *gr = cJSON_AddArrayToObject(st, "groups");
    for (int dd = 0; dd < 3; dd++) cJSON_AddItemToArray(gr, cJSON_CreateNumber(k.groups[dd]));
    cJSON *b = cJSON_AddArrayToObject(st, "bindings");
    for (int j = 0; j < k.nbindings && !s; j++) {
      region r;
      if (!(s = region_of(c, k.bind[j], SSM_BUNDLE_ALIGN, &r))) cJSON_AddItemToArray(b, jregion(r));
    }
    cJSON_AddStringToObject(st, "op", k.params);
    cJSON_AddItemToArray(steps, st);
  }
  ssm_arena_destroy(a);
  if (!s && (!has_tokens || !cJSON_GetObjectItem(prog, "output")))
    s = ssm_status_new(SSM_ERR_INVALID, "graph %s needs an input 'tokens' and an output", g->name);
  if (s) {
    cJSON_Delete(steps);
    cJSON_Delete(prog);
    return s;
  }
  uint64_t planned = 0;
  for (ssm_node *n = g->first; n; n = n->next) {
    int64_t ofs = ssm_node_int(n, "ofs", -1);
    if (ofs >= 0 && n->result) {
      uint64_t e = (uint64_t)ofs + align_up((uint64_t)ssm_type_numel(&n->result->type) *
                                            ssm_dtype_size(n->result->type.dtype));
      if (e > planned) planned = e;
    }
  }
  cJSON_AddNumberToObject(prog, "dispatches", cJSON_GetArraySize(steps));
  cJSON_AddNumberToObject(prog, "activation_bytes", (double)planned);
  cJSON_AddNumberToObject(prog, "activation_bytes_unplanned", (double)naive);
  cJSON_AddItemToObject(prog, "steps", steps);
  char *ir = ssm_graph_print(g);
  uint64_t off;
  ssm_bundle_writer_add_blob(c->bw, ir, strlen(ir), &off);
  cJSON *jir = cJSON_AddArrayToObject(prog, "ir");
  cJSON_AddItemToArray(jir, cJSON_CreateNumber((double)off));
  cJSON_AddItemToArray(jir, cJSON_CreateNumber((double)strlen(ir)));
  free(ir);
  *out = prog;
  return NULL;
}

ssm_status ssm_compile(ssm_model *m, const ssm_compile_opts *opts, const char *out_path) {
  ssm_compile_opts o = opts ? *opts : (ssm_compile_opts){0};
  if (o.prefill_tokens <= 0) o.prefill_tokens = 32;
  if (o.dtype != SSM_F32)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "--dtype %s: only f32 bundles are supported so far",
                          ssm_dtype_name(o.dtype));
  compiler c = {.npools = POOL_WEIGHTS0, .bw = ssm_bundle_writer_create(),
                .arena = ssm_arena_create()};
  c.jweights = cJSON_CreateArray();
  c.jstates = cJSON_CreateArray();
  c.jconsts = cJSON_CreateArray();
  c.jkernels = cJSON_CreateArray();
  cJSON *root = cJSON_CreateObject(), *progs = cJSON_CreateObject();
  ssm_status s = NULL;
  const char *names[2] = {"decode", "prefill"};
  int tokens[2] = {1, o.prefill_tokens};
  for (int p = 0; p < 2 && !s; p++) {
    ssm_graph *g = NULL;
    cJSON *prog = NULL;
    s = ssm_model_build(m, tokens[p], &g);
    if (!s && p == 0) s = ssm_graph_add_sampler(g); /* decode draws its next token */
    if (!s) s = compile_program(&c, g, tokens[p], &o, names[p], &prog);
    if (!s) cJSON_AddItemToObject(progs, names[p], prog);
    ssm_graph_destroy(g);
  }
  if (!s) {
    int64_t vocab = 0;
    ssm_model_param(m, "vocab", &vocab);
    cJSON_AddNumberToObject(root, "ssmb", SSM_BUNDLE_VERSION);
    cJSON_AddStringToObject(root, "generator", "ssmc");
    cJSON_AddStringToObject(root, "architecture", ssm_model_arch(m));
    cJSON_AddNumberToObject(root, "vocab", (double)vocab);
    int64_t max_seq = 0;
    if (c.uses_pos && ssm_model_param(m, "max_seq", &max_seq))
      cJSON_AddNumberToObject(root, "max_seq", (double)max_seq);
    cJSON_AddStringToObject(root, "dtype", ssm_dtype_name(o.dtype));
    cJSON_AddNumberToObject(root, "align", SSM_BUNDLE_ALIGN);
    c.pool_bytes[POOL_ACT] = c.act_bytes;
    cJSON *bufs = cJSON_AddArrayToObject(root, "buffers");
    for (int i = 0; i < c.npools; i++) {
      cJSON *b = cJSON_CreateObject();
      cJSON_AddStringToObject(b, "usage", i == POOL_STATE ? "state" : i == POOL_CONST ? "const"
                                          : i == POOL_ACT ? "activations" : "weights");
      cJSON_AddNumberToObject(b, "bytes", (double)align_up(c.pool_bytes[i] ? c.pool_bytes[i] : 4));
      cJSON_AddItemToArray(bufs, b);
    }
    cJSON_AddItemToObject(root, "weights", c.jweights);
    cJSON_AddItemToObject(root, "state", c.jstates);
    cJSON_AddItemToObject(root, "constants", c.jconsts);
    cJSON_AddItemToObject(root, "kernels", c.jkernels);
    cJSON_AddItemToObject(root, "programs", progs);
    c.jweights = c.jstates = c.jconsts = c.jkernels = NULL;
    progs = NULL;
    char *text = cJSON_PrintUnformatted(root);
    s = ssm_bundle_writer_save(c.bw, text, out_path);
    free(text);
  }
  cJSON_Delete(progs);
  cJSON_Delete(root);
  cJSON_Delete(c.jweights);
  cJSON_Delete(c.jstates);
  cJSON_Delete(c.jconsts);
  cJSON_Delete(c.jkernels);
  free(c.weights);
  free(c.states);
  free(c.kernel_src);
  ssm_bundle_writer_destroy(c.bw);
  ssm_arena_destroy(c.arena);
  return s;
}
