/*
 * manifest.c — the bundle manifest as JSON, both ways. This file is the only
 * one that knows the keys.
 *
 * Writing is a straight walk of the struct. Reading checks everything a
 * runtime will rely on before anything is used: types and ranges of every
 * field, regions inside their buffers and aligned, blobs inside the blob
 * section, sizes that agree with shapes (computed with overflow checks),
 * kernel indices and binding counts, each kernel's WGSL memory slots and
 * every dispatch's slots (one buffer each, spanning no more than their
 * windows), and the programs' inputs and outputs against the vocabulary. A
 * message names the field by its path ("programs.decode.steps[3].bindings[1]").
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "bundle/internal.h"

#define MAX_BYTES 1e15   /* a buffer, a region, a blob */
#define MAX_DIM 1e12     /* one dimension */
#define MAX_ITEMS 1000000 /* weights, states, kernels, steps */

static const char *const usage_names[] = {"state", "activations", "weights", "output", "slots"};

/* ---- writing ------------------------------------------------------------- */

static cJSON *jnums(int n, const double *v) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
  return a;
}

static cJSON *jregion(ssm_region r) {
  return jnums(3, (double[]){r.buffer, (double)r.offset, (double)r.bytes});
}

static cJSON *jblob(ssm_blob b) { return jnums(2, (double[]){(double)b.offset, (double)b.size}); }

static cJSON *jshape(const ssm_type *t) {
  double d[SSM_MAX_RANK];
  for (int i = 0; i < t->rank; i++) d[i] = (double)t->dims[i];
  return jnums(t->rank, d);
}

static cJSON *jtensor(const ssm_mf_tensor *t, int weight) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "name", t->name);
  cJSON_AddStringToObject(j, "dtype", ssm_dtype_name(t->type.dtype));
  cJSON_AddItemToObject(j, "shape", jshape(&t->type));
  if (weight) cJSON_AddStringToObject(j, "transform", t->transform ? t->transform : "");
  cJSON_AddItemToObject(j, "region", jregion(t->region));
  return j;
}

static cJSON *jprogram(const ssm_mf_program *p, int with_steps) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "tokens", p->tokens);
  cJSON *in = cJSON_AddObjectToObject(j, "inputs");
  cJSON_AddItemToObject(in, "tokens", jregion(p->tokens_in));
  if (p->has_pos) cJSON_AddItemToObject(in, "pos", jregion(p->pos));
  cJSON_AddItemToObject(j, "output", jregion(p->output));
  if (p->has_sampler) {
    cJSON *s = cJSON_AddObjectToObject(j, "sampler");
    cJSON_AddItemToObject(s, "next", jregion(p->next));
    cJSON_AddItemToObject(s, "state", jregion(p->sampler));
    if (p->has_seen) cJSON_AddItemToObject(s, "seen", jregion(p->seen));
  }
  if (p->any_count) cJSON_AddTrueToObject(j, "any_count");
  cJSON_AddNumberToObject(j, "dispatches", p->nsteps);
  cJSON_AddNumberToObject(j, "activation_bytes", (double)p->activation_bytes);
  cJSON_AddNumberToObject(j, "activation_bytes_unplanned", (double)p->activation_bytes_unplanned);
  cJSON_AddItemToObject(j, "ir", jblob(p->ir));
  if (!with_steps) {
    cJSON *ops = cJSON_AddObjectToObject(j, "dispatches_by_op");
    for (int i = 0; i < p->nsteps; i++) {
      cJSON *c = cJSON_GetObjectItemCaseSensitive(ops, p->steps[i].op);
      if (c) cJSON_SetNumberValue(c, c->valuedouble + 1);
      else cJSON_AddNumberToObject(ops, p->steps[i].op, 1);
    }
    return j;
  }
  cJSON *steps = cJSON_AddArrayToObject(j, "steps");
  for (int i = 0; i < p->nsteps; i++) {
    const ssm_mf_step *s = &p->steps[i];
    cJSON *js = cJSON_CreateObject();
    cJSON_AddNumberToObject(js, "kernel", s->kernel);
    cJSON_AddNumberToObject(js, "barrier", s->barrier);
    cJSON_AddItemToObject(js, "groups", jnums(3, (double[]){s->groups[0], s->groups[1], s->groups[2]}));
    cJSON *b = cJSON_AddArrayToObject(js, "bindings");
    for (int k = 0; k < s->nbindings; k++) cJSON_AddItemToArray(b, jregion(s->bindings[k]));
    cJSON_AddStringToObject(js, "op", s->op);
    cJSON_AddItemToArray(steps, js);
  }
  return j;
}

static cJSON *jmanifest(const ssm_manifest *m, int with_steps) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddNumberToObject(j, "ssmb", SSM_BUNDLE_VERSION);
  cJSON_AddStringToObject(j, "generator", m->generator);
  cJSON_AddStringToObject(j, "architecture", m->architecture);
  cJSON_AddNumberToObject(j, "vocab", (double)m->vocab);
  cJSON_AddNumberToObject(j, "max_seq", (double)m->max_seq);
  cJSON_AddNumberToObject(j, "eos_token_id", (double)m->eos);
  cJSON_AddStringToObject(j, "dtype", ssm_dtype_name(m->dtype));
  cJSON_AddNumberToObject(j, "align", m->align);
  cJSON_AddNumberToObject(j, "wgsl_window", (double)m->wgsl_window);
  cJSON *bufs = cJSON_AddArrayToObject(j, "buffers");
  for (int i = 0; i < m->nbuffers; i++) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "usage", usage_names[m->buffers[i].usage]);
    cJSON_AddNumberToObject(b, "bytes", (double)m->buffers[i].bytes);
    cJSON_AddItemToArray(bufs, b);
  }
  cJSON *ws = cJSON_AddArrayToObject(j, "weights");
  for (int i = 0; i < m->nweights; i++) cJSON_AddItemToArray(ws, jtensor(&m->weights[i], 1));
  cJSON *ss = cJSON_AddArrayToObject(j, "state");
  for (int i = 0; i < m->nstates; i++) cJSON_AddItemToArray(ss, jtensor(&m->states[i], 0));
  cJSON *ks = cJSON_AddArrayToObject(j, "kernels");
  for (int i = 0; i < m->nkernels; i++) {
    const ssm_mf_kernel *k = &m->kernels[i];
    cJSON *jk = cJSON_CreateObject();
    cJSON_AddStringToObject(jk, "name", k->name);
    cJSON_AddStringToObject(jk, "template", k->family);
    cJSON_AddStringToObject(jk, "params", k->params);
    cJSON_AddNumberToObject(jk, "bindings", k->nbindings);
    cJSON_AddItemToObject(jk, "spirv", jblob(k->spirv));
    cJSON_AddItemToObject(jk, "glsl", jblob(k->glsl));
    cJSON_AddItemToObject(jk, "wgsl", jblob(k->wgsl));
    if (k->spirv_coop.size) {
      cJSON_AddItemToObject(jk, "spirv_coop", jblob(k->spirv_coop));
      cJSON_AddItemToObject(jk, "glsl_coop", jblob(k->glsl_coop));
    }
    if (k->spirv_prep.size) {
      cJSON *jp = cJSON_AddObjectToObject(jk, "coop_prep");
      cJSON_AddItemToObject(jp, "spirv", jblob(k->spirv_prep));
      cJSON_AddItemToObject(jp, "glsl", jblob(k->glsl_prep));
      cJSON_AddItemToObject(jp, "groups", jnums(3, (double[]){k->prep_groups[0], k->prep_groups[1],
                                                              k->prep_groups[2]}));
      cJSON_AddNumberToObject(jp, "scratch_bytes", (double)k->scratch_bytes);
      if (k->coop_groups[0])
        cJSON_AddItemToObject(jp, "coop_groups", jnums(3, (double[]){k->coop_groups[0], k->coop_groups[1],
                                                                     k->coop_groups[2]}));
    }
    double slots[SSM_BUNDLE_MAX_BINDINGS], windows[SSM_BUNDLE_MAX_BINDINGS];
    for (int b = 0; b < k->nbindings; b++) slots[b] = k->slot[b];
    for (int w = 0; w < k->nslots; w++) windows[w] = k->windows[w];
    cJSON_AddItemToObject(jk, "wgsl_slots", jnums(k->nbindings, slots));
    cJSON_AddItemToObject(jk, "wgsl_windows", jnums(k->nslots, windows));
    int split = 0;
    for (int b = 0; b < k->nbindings; b++) split |= k->glsl_windows[b] > 1;
    if (split) {
      double gw[SSM_BUNDLE_MAX_BINDINGS];
      for (int b = 0; b < k->nbindings; b++) gw[b] = k->glsl_windows[b];
      cJSON_AddItemToObject(jk, "glsl_windows", jnums(k->nbindings, gw));
    }
    cJSON_AddItemToArray(ks, jk);
  }
  cJSON *ps = cJSON_AddObjectToObject(j, "programs");
  cJSON_AddItemToObject(ps, "decode", jprogram(&m->decode, with_steps));
  cJSON_AddItemToObject(ps, "prefill", jprogram(&m->prefill, with_steps));
  if (m->batch.tokens) cJSON_AddItemToObject(ps, "batch", jprogram(&m->batch, with_steps));
  if (!with_steps) cJSON_AddNumberToObject(j, "weight_bytes", (double)ssm_manifest_weight_bytes(m));
  if (m->source_dir) {
    cJSON *src = cJSON_AddObjectToObject(j, "source");
    cJSON_AddStringToObject(src, "dir", m->source_dir);
    cJSON *files = cJSON_AddArrayToObject(src, "files");
    for (int i = 0; i < m->nsource_files; i++) {
      char hex[17];
      snprintf(hex, sizeof hex, "%016llx", (unsigned long long)m->source_files[i].hash);
      cJSON *f = cJSON_CreateObject();
      cJSON_AddStringToObject(f, "name", m->source_files[i].name);
      cJSON_AddStringToObject(f, "xxh3", hex);
      cJSON_AddItemToArray(files, f);
    }
  }
  if (m->weights_file) {
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)m->weights_fingerprint);
    cJSON *wf = cJSON_AddObjectToObject(j, "weights_file");
    cJSON_AddStringToObject(wf, "name", m->weights_file);
    cJSON_AddStringToObject(wf, "xxh3", hex);
  }
  if (m->config) {
    cJSON *cfg = cJSON_Parse(m->config);
    if (!cfg || !cJSON_AddItemToObject(j, "config", cfg)) { /* out of memory: no manifest */
      cJSON_Delete(cfg);
      cJSON_Delete(j);
      return NULL;
    }
  }
  if (m->cache_key) cJSON_AddStringToObject(j, "cache_key", m->cache_key);
  return j;
}

static char *print_json(cJSON *j, int formatted) {
  char *text = formatted ? cJSON_Print(j) : cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  if (!text) return NULL;
  char *out = strdup(text); /* one allocator for the caller to free() with */
  cJSON_free(text);
  return out;
}

char *ssm_manifest_to_json(const ssm_manifest *m) { return print_json(jmanifest(m, 1), 0); }

char *ssm_manifest_summary_json(const ssm_manifest *m) { return print_json(jmanifest(m, 0), 1); }

uint64_t ssm_manifest_weight_bytes(const ssm_manifest *m) {
  uint64_t n = 0;
  for (int i = 0; i < m->nweights; i++) n += m->weights[i].region.bytes;
  return n;
}

int ssm_manifest_state_steps(const ssm_manifest *m, const ssm_mf_program *p) {
  int n = 0;
  for (int i = 0; i < p->nsteps; i++)
    for (int b = 0; b < p->steps[i].nbindings; b++)
      if (m->buffers[p->steps[i].bindings[b].buffer].usage == SSM_BUFFER_STATE) n = i + 1;
  return n;
}

int ssm_manifest_own_states(const ssm_manifest *m) {
  int n = 0;
  while (n < m->nstates && m->buffers[m->states[n].region.buffer].usage != SSM_BUFFER_SLOTS) n++;
  return n;
}

const ssm_mf_tensor *ssm_manifest_slots_state(const ssm_manifest *m, const ssm_mf_tensor *t) {
  for (int i = ssm_manifest_own_states(m); i < m->nstates; i++)
    if (!strncmp(m->states[i].name, "slots.", 6) && !strcmp(m->states[i].name + 6, t->name))
      return &m->states[i];
  return NULL;
}

/* ---- reading ------------------------------------------------------------- */

typedef struct {
  const char *name; /* the bundle, for messages */
  uint64_t blobs_size;
  ssm_arena *arena;
  ssm_manifest *m;
  char path[256];   /* the field being read */
} reader;

static ssm_status bad(const reader *r, const char *what) {
  return ssm_status_new(SSM_ERR_INVALID, "%s: corrupt manifest: %s %s", r->name,
                        r->path[0] ? r->path : "the manifest", what);
}

/* Field paths: enter() appends ".key" or "[i]" and returns the old length
 * for leave(). */
static size_t enter(reader *r, const char *key, int index) {
  size_t n = strlen(r->path);
  if (key) snprintf(r->path + n, sizeof r->path - n, "%s%s", n ? "." : "", key);
  else snprintf(r->path + n, sizeof r->path - n, "[%d]", index);
  return n;
}
static void leave(reader *r, size_t n) { r->path[n] = 0; }

static ssm_status get(reader *r, const cJSON *obj, const char *key, const cJSON **out) {
  *out = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (*out) return NULL;
  size_t n = enter(r, key, 0);
  ssm_status s = bad(r, "is missing");
  leave(r, n);
  return s;
}

/* An integer in [lo, hi]; the current path names it. */
static ssm_status num_in(reader *r, const cJSON *j, double lo, double hi, double *out) {
  if (!cJSON_IsNumber(j) || !(j->valuedouble >= lo && j->valuedouble <= hi) ||
      j->valuedouble != floor(j->valuedouble))
    return bad(r, "is not an integer in the range it must have");
  *out = j->valuedouble;
  return NULL;
}

static ssm_status field_num(reader *r, const cJSON *obj, const char *key, double lo, double hi,
                            double *out) {
  const cJSON *j;
  SSM_TRY(get(r, obj, key, &j));
  size_t n = enter(r, key, 0);
  ssm_status s = num_in(r, j, lo, hi, out);
  leave(r, n);
  return s;
}

static ssm_status field_str(reader *r, const cJSON *obj, const char *key, const char **out) {
  const cJSON *j;
  SSM_TRY(get(r, obj, key, &j));
  if (cJSON_IsString(j)) {
    *out = ssm_arena_strdup(r->arena, j->valuestring);
    return NULL;
  }
  size_t n = enter(r, key, 0);
  ssm_status s = bad(r, "is not a string");
  leave(r, n);
  return s;
}

/* A JSON array of `len` numbers in [lo, hi] (the current path names it;
 * `what` says what it should be). */
static ssm_status nums_of(reader *r, const cJSON *j, int len, double lo, double hi, double *out,
                          const char *what) {
  if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != len) return bad(r, what);
  for (int i = 0; i < len; i++) SSM_TRY(num_in(r, cJSON_GetArrayItem(j, i), lo, hi, &out[i]));
  return NULL;
}

static ssm_status nums(reader *r, const cJSON *j, int len, double lo, double hi, double *out) {
  return nums_of(r, j, len, lo, hi, out,
                 len == 3 ? "is not a [buffer, offset, bytes] region" : "is not an [offset, size] blob");
}

/* A region inside its buffer, at an aligned offset; the current path names it. */
static ssm_status region(reader *r, const cJSON *j, ssm_region *out) {
  double v[3];
  SSM_TRY(nums(r, j, 3, 0, MAX_BYTES, v));
  if (v[0] >= r->m->nbuffers) return bad(r, "names a buffer that does not exist");
  uint64_t cap = r->m->buffers[(int)v[0]].bytes;
  if ((uint64_t)v[1] > cap || (uint64_t)v[2] > cap - (uint64_t)v[1])
    return bad(r, "lies outside its buffer");
  if ((uint64_t)v[1] % r->m->align) return bad(r, "is not aligned to the manifest's align");
  *out = (ssm_region){(int)v[0], (uint64_t)v[1], (uint64_t)v[2]};
  return NULL;
}

static ssm_status field_region(reader *r, const cJSON *obj, const char *key, ssm_region *out) {
  const cJSON *j;
  SSM_TRY(get(r, obj, key, &j));
  size_t n = enter(r, key, 0);
  ssm_status s = region(r, j, out);
  leave(r, n);
  return s;
}

static ssm_status field_blob(reader *r, const cJSON *obj, const char *key, ssm_blob *out) {
  const cJSON *j;
  double v[2] = {0, 0};
  SSM_TRY(get(r, obj, key, &j));
  size_t n = enter(r, key, 0);
  ssm_status s = nums(r, j, 2, 0, MAX_BYTES, v);
  if (!s && ((uint64_t)v[0] > r->blobs_size || (uint64_t)v[1] > r->blobs_size - (uint64_t)v[0]))
    s = bad(r, "lies outside the blob section");
  leave(r, n);
  *out = (ssm_blob){(uint64_t)v[0], (uint64_t)v[1]};
  return s;
}

/* A list of at most `max` items: *out_count and arena memory of `elem`
 * bytes per item. */
static ssm_status list(reader *r, const cJSON *obj, const char *key, int min, int max,
                       size_t elem, const cJSON **out_json, int *out_count, void **out_items) {
  SSM_TRY(get(r, obj, key, out_json));
  int n = cJSON_IsArray(*out_json) ? cJSON_GetArraySize(*out_json) : -1;
  if (n < min || n > max) {
    size_t k = enter(r, key, 0);
    char what[96];
    snprintf(what, sizeof what, "is not a list of %d to %d items", min, max);
    ssm_status s = bad(r, what);
    leave(r, k);
    return s;
  }
  *out_items = ssm_arena_alloc(r->arena, elem * (size_t)(n ? n : 1));
  if (!*out_items) return ssm_arena_status(r->arena, "the manifest");
  *out_count = n;
  return NULL;
}

/* dtype and shape; the element count times the dtype size, with overflow
 * checks, is the tensor's bytes (q8_0: ssm_type_bytes, its scales too). */
static ssm_status tensor_type(reader *r, const cJSON *obj, ssm_type *t, uint64_t *out_bytes) {
  const char *dt;
  const cJSON *shape;
  SSM_TRY(field_str(r, obj, "dtype", &dt));
  SSM_TRY(get(r, obj, "shape", &shape));
  *t = (ssm_type){0};
  size_t n = enter(r, "dtype", 0);
  if (!ssm_dtype_parse(dt, strlen(dt), &t->dtype)) {
    ssm_status s = bad(r, "is not f32, f16, bf16, i32, q8_0 or q4_0");
    leave(r, n);
    return s;
  }
  leave(r, n);
  n = enter(r, "shape", 0);
  ssm_status s = NULL;
  if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > SSM_MAX_RANK)
    s = bad(r, "is not a list of at most 6 dimensions");
  t->rank = s ? 0 : cJSON_GetArraySize(shape);
  size_t bytes = ssm_dtype_size(t->dtype);
  for (int d = 0; d < t->rank && !s; d++) {
    double v = 1;
    s = num_in(r, cJSON_GetArrayItem(shape, d), 1, MAX_DIM, &v);
    t->dims[d] = (int64_t)v;
    if (!s && (!ssm_size_mul(bytes, (size_t)v, &bytes) || bytes > MAX_BYTES))
      s = bad(r, "describes a tensor too large for any buffer");
  }
  leave(r, n);
  if (!s && ssm_dtype_is_quant(t->dtype)) bytes = (size_t)ssm_type_bytes(t); /* under 2 x numel */
  *out_bytes = bytes;
  return s;
}

static ssm_status tensors(reader *r, const cJSON *root, const char *key, int weight,
                          ssm_mf_tensor **out, int *out_n) {
  const cJSON *arr;
  SSM_TRY(list(r, root, key, 0, MAX_ITEMS, sizeof **out, &arr, out_n, (void **)out));
  for (int i = 0; i < *out_n; i++) {
    const cJSON *e = cJSON_GetArrayItem(arr, i);
    ssm_mf_tensor *t = &(*out)[i];
    size_t n = enter(r, key, 0);
    enter(r, NULL, i);
    uint64_t bytes = 0;
    ssm_status s = field_str(r, e, "name", &t->name);
    if (!s) s = tensor_type(r, e, &t->type, &bytes);
    if (!s) s = field_region(r, e, "region", &t->region);
    if (!s && weight) s = field_str(r, e, "transform", &t->transform);
    if (!s && !weight) t->transform = "";
    if (!s && t->region.bytes != bytes) s = bad(r, "has a region whose size does not match its shape");
    /* a batch program's state (SSM_SLOTS_PREFIX) lies in a slots buffer */
    int slots = !weight && !strncmp(t->name, "slots.", 6);
    if (!s && r->m->buffers[t->region.buffer].usage !=
                  (weight ? SSM_BUFFER_WEIGHTS : slots ? SSM_BUFFER_SLOTS : SSM_BUFFER_STATE))
      s = bad(r, weight ? "lies outside a weights buffer"
                 : slots ? "lies outside a slots buffer" : "lies outside a state buffer");
    if (!s && !weight && t->type.dtype != SSM_F32 && t->type.dtype != SSM_I32)
      s = bad(r, "is not an f32 or i32 state");
    leave(r, n);
    SSM_TRY(s);
  }
  return NULL;
}

/* A kernel's WGSL slots: one per binding, numbered in order of first use
 * from 0 (so every slot is used and binding 0 is in slot 0), and a window
 * count per slot. */
static ssm_status wgsl_slots(reader *r, const cJSON *e, ssm_mf_kernel *k) {
  const cJSON *js, *jw;
  double v[SSM_BUNDLE_MAX_BINDINGS];
  SSM_TRY(get(r, e, "wgsl_slots", &js));
  SSM_TRY(get(r, e, "wgsl_windows", &jw));
  size_t n = enter(r, "wgsl_slots", 0);
  ssm_status s = nums_of(r, js, k->nbindings, 0, k->nbindings - 1, v,
                         "is not a list of one slot per binding");
  k->nslots = 0;
  for (int b = 0; b < k->nbindings && !s; b++) {
    k->slot[b] = (int)v[b];
    if (k->slot[b] > k->nslots) s = bad(r, "does not number the slots in order of first use");
    else if (k->slot[b] == k->nslots) k->nslots++;
  }
  leave(r, n);
  if (s) return s;
  n = enter(r, "wgsl_windows", 0);
  s = nums_of(r, jw, k->nslots, 1, SSM_BUNDLE_WGSL_MAX_WINDOWS, v,
              "is not a list of one window count per slot");
  for (int w = 0; w < k->nslots && !s; w++) k->windows[w] = (int)v[w];
  leave(r, n);
  return s;
}

/* A kernel's GLSL windows (optional: one each without it): a count per
 * binding, one for binding 0 (the result), SSM_BUNDLE_GLSL_MAX_BINDINGS in all. */
static ssm_status glsl_windows(reader *r, const cJSON *e, ssm_mf_kernel *k) {
  for (int b = 0; b < SSM_BUNDLE_MAX_BINDINGS; b++) k->glsl_windows[b] = 1;
  const cJSON *jw = cJSON_GetObjectItemCaseSensitive(e, "glsl_windows");
  if (!jw) return NULL;
  double v[SSM_BUNDLE_MAX_BINDINGS];
  size_t n = enter(r, "glsl_windows", 0);
  ssm_status s = nums_of(r, jw, k->nbindings, 1, SSM_BUNDLE_GLSL_MAX_WINDOWS, v,
                         "is not a list of one window count per binding");
  int total = 0;
  for (int b = 0; b < k->nbindings && !s; b++) total += k->glsl_windows[b] = (int)v[b];
  if (!s && (v[0] != 1 || total > SSM_BUNDLE_GLSL_MAX_BINDINGS))
    s = bad(r, "splits the result or binds too many windows");
  leave(r, n);
  return s;
}

/* The kernel that makes the cooperative-matrix variant's x ready: optional,
 * only beside that variant. */
static ssm_status coop_prep(reader *r, const cJSON *e, ssm_mf_kernel *k) {
  const cJSON *jp = cJSON_GetObjectItemCaseSensitive(e, "coop_prep"), *jg;
  if (!jp) return NULL;
  size_t n = enter(r, "coop_prep", 0);
  double g[3] = {0, 0, 0}, bytes = 0;
  ssm_status s = k->spirv_coop.size ? NULL : bad(r, "is there without a cooperative-matrix variant");
  if (!s) s = field_blob(r, jp, "spirv", &k->spirv_prep);
  if (!s) s = field_blob(r, jp, "glsl", &k->glsl_prep);
  if (!s && (k->spirv_prep.size % 4 || k->spirv_prep.offset % 4 || k->spirv_prep.size < 20))
    s = bad(r, "has a malformed SPIR-V blob");
  if (!s) s = get(r, jp, "groups", &jg);
  if (!s) {
    size_t m = enter(r, "groups", 0);
    s = nums_of(r, jg, 3, 1, 65535, g, "is not a list of 3 workgroup counts");
    leave(r, m);
  }
  if (!s) s = field_num(r, jp, "scratch_bytes", 4, MAX_BYTES, &bytes);
  for (int d = 0; d < 3; d++) k->prep_groups[d] = (uint32_t)g[d];
  /* the variant's own grid, optional */
  if (!s && (jg = cJSON_GetObjectItemCaseSensitive(jp, "coop_groups"))) {
    size_t m = enter(r, "coop_groups", 0);
    s = nums_of(r, jg, 3, 1, 65535, g, "is not a list of 3 workgroup counts");
    leave(r, m);
    for (int d = 0; !s && d < 3; d++) k->coop_groups[d] = (uint32_t)g[d];
  }
  k->scratch_bytes = (uint64_t)bytes;
  leave(r, n);
  return s;
}

static ssm_status kernels(reader *r, const cJSON *root) {
  const cJSON *arr;
  ssm_manifest *m = r->m;
  SSM_TRY(list(r, root, "kernels", 0, MAX_ITEMS, sizeof *m->kernels, &arr, &m->nkernels,
               (void **)&m->kernels));
  for (int i = 0; i < m->nkernels; i++) {
    const cJSON *e = cJSON_GetArrayItem(arr, i);
    ssm_mf_kernel *k = &m->kernels[i];
    size_t n = enter(r, "kernels", 0);
    enter(r, NULL, i);
    double nb = 0;
    ssm_status s = field_str(r, e, "name", &k->name);
    if (!s) s = field_str(r, e, "template", &k->family);
    if (!s) s = field_str(r, e, "params", &k->params);
    if (!s) s = field_num(r, e, "bindings", 1, SSM_BUNDLE_MAX_BINDINGS, &nb);
    k->nbindings = (int)nb;
    if (!s) s = field_blob(r, e, "spirv", &k->spirv);
    if (!s) s = field_blob(r, e, "glsl", &k->glsl);
    if (!s) s = field_blob(r, e, "wgsl", &k->wgsl);
    if (!s && (k->spirv.size % 4 || k->spirv.offset % 4 || k->spirv.size < 20))
      s = bad(r, "has a malformed SPIR-V blob");
    /* the cooperative-matrix variant: optional, both blobs or neither */
    int coop = cJSON_HasObjectItem(e, "spirv_coop") || cJSON_HasObjectItem(e, "glsl_coop");
    if (!s && coop) s = field_blob(r, e, "spirv_coop", &k->spirv_coop);
    if (!s && coop) s = field_blob(r, e, "glsl_coop", &k->glsl_coop);
    if (!s && coop &&
        (k->spirv_coop.size % 4 || k->spirv_coop.offset % 4 || k->spirv_coop.size < 20))
      s = bad(r, "has a malformed cooperative-matrix SPIR-V blob");
    if (!s) s = coop_prep(r, e, k);
    if (!s && !k->wgsl.size) s = bad(r, "has an empty WGSL blob");
    if (!s) s = wgsl_slots(r, e, k);
    if (!s) s = glsl_windows(r, e, k);
    int bound = 1; /* the scratch of a kernel with a prep kernel, after its windows */
    for (int b = 0; b < k->nbindings; b++) bound += k->glsl_windows[b];
    if (!s && k->spirv_prep.size && bound > SSM_BUNDLE_GLSL_MAX_BINDINGS)
      s = bad(r, "binds too many windows beside its scratch");
    leave(r, n);
    SSM_TRY(s);
  }
  return NULL;
}

int ssm_mf_slot_span(const ssm_mf_kernel *k, const ssm_mf_step *st, int slot, int *buffer,
                     uint64_t *lo, uint64_t *hi) {
  *buffer = -1;
  *lo = UINT64_MAX;
  *hi = 0;
  for (int b = 0; b < st->nbindings; b++) {
    const ssm_region *g = &st->bindings[b];
    if (k->slot[b] != slot) continue;
    if (*buffer >= 0 && g->buffer != *buffer) return 0;
    *buffer = g->buffer;
    if (g->offset < *lo) *lo = g->offset;
    if (g->offset + g->bytes > *hi) *hi = g->offset + g->bytes;
  }
  return 1;
}

/* Each WGSL slot of a dispatch: its bindings in one buffer, spanning no
 * more than the slot's windows (the current path names the step). */
static ssm_status step_slots(reader *r, const ssm_mf_step *st) {
  const ssm_mf_kernel *k = &r->m->kernels[st->kernel];
  for (int sl = 0; sl < k->nslots; sl++) {
    int buffer;
    uint64_t lo, hi;
    if (!ssm_mf_slot_span(k, st, sl, &buffer, &lo, &hi))
      return bad(r, "puts the bindings of one WGSL slot in two buffers");
    if (hi - lo > (uint64_t)k->windows[sl] * r->m->wgsl_window)
      return bad(r, "has a WGSL slot wider than its kernel's windows");
  }
  if (r->m->buffers[st->bindings[0].buffer].usage == SSM_BUFFER_WEIGHTS)
    return bad(r, "writes its result into a weights buffer");
  return NULL;
}

static ssm_status steps(reader *r, const cJSON *jp, ssm_mf_program *p) {
  const cJSON *arr;
  SSM_TRY(list(r, jp, "steps", 0, MAX_ITEMS, sizeof *p->steps, &arr, &p->nsteps,
               (void **)&p->steps));
  for (int i = 0; i < p->nsteps; i++) {
    const cJSON *e = cJSON_GetArrayItem(arr, i), *binds, *groups;
    ssm_mf_step *st = &p->steps[i];
    size_t n = enter(r, "steps", 0);
    enter(r, NULL, i);
    double v = 0, g[3] = {1, 1, 1};
    ssm_status s = field_num(r, e, "kernel", 0, r->m->nkernels - 1, &v);
    st->kernel = (int)v;
    if (!s) s = field_num(r, e, "barrier", 0, 1, &v);
    st->barrier = (int)v;
    if (!s) s = field_str(r, e, "op", &st->op);
    if (!s) s = get(r, e, "groups", &groups);
    if (!s) {
      size_t k = enter(r, "groups", 0);
      if (cJSON_GetArraySize(groups) != 3 || !cJSON_IsArray(groups))
        s = bad(r, "is not three workgroup counts");
      for (int d = 0; d < 3 && !s; d++) s = num_in(r, cJSON_GetArrayItem(groups, d), 1, 65535, &g[d]);
      for (int d = 0; d < 3 && !s; d++) st->groups[d] = (uint32_t)g[d];
      leave(r, k);
    }
    if (!s) s = get(r, e, "bindings", &binds);
    if (!s) {
      st->nbindings = r->m->kernels[st->kernel].nbindings;
      size_t k = enter(r, "bindings", 0);
      if (!cJSON_IsArray(binds) || cJSON_GetArraySize(binds) != st->nbindings)
        s = bad(r, "does not give one region per binding of its kernel");
      for (int b = 0; b < st->nbindings && !s; b++) {
        size_t kb = enter(r, NULL, b);
        s = region(r, cJSON_GetArrayItem(binds, b), &st->bindings[b]);
        if (!s && !st->bindings[b].bytes) s = bad(r, "is empty");
        leave(r, kb);
      }
      leave(r, k);
    }
    if (!s) s = step_slots(r, st);
    leave(r, n);
    SSM_TRY(s);
  }
  return NULL;
}

/* The batch program's states follow the others, and each is a state's
 * copy a slot (ssm_manifest_slots_state). */
static ssm_status check_slots(reader *r) {
  const ssm_manifest *m = r->m;
  int own = ssm_manifest_own_states(m);
  ssm_status s = NULL;
  for (int i = own; i < m->nstates && !s; i++) {
    const ssm_mf_tensor *t = &m->states[i], *base = NULL;
    size_t n = enter(r, "state", 0);
    enter(r, NULL, i);
    for (int k = 0; k < own && !base; k++)
      if (!strcmp(m->states[k].name, t->name + 6)) base = &m->states[k];
    int ok = base && t->type.rank == base->type.rank + 1 && t->type.dims[0] == m->batch.tokens &&
             t->type.dtype == base->type.dtype;
    for (int d = 0; ok && d < base->type.rank; d++) ok = t->type.dims[d + 1] == base->type.dims[d];
    if (m->buffers[t->region.buffer].usage != SSM_BUFFER_SLOTS)
      s = bad(r, ssm_arena_printf(r->arena, "('%s') follows the batch program's states", t->name));
    else if (!ok)
      s = bad(r, ssm_arena_printf(r->arena, "('%s') is not a state of one sequence with a first "
                                  "dim of the batch program's %d slots", t->name, m->batch.tokens));
    leave(r, n);
  }
  return s;
}

static ssm_status program(reader *r, const cJSON *progs, const char *which, ssm_mf_program *p) {
  const cJSON *jp, *in, *sm;
  SSM_TRY(get(r, progs, which, &jp));
  size_t n = enter(r, which, 0);
  double tokens = 0, b[2] = {0, 0};
  ssm_status s = field_num(r, jp, "tokens", 1, 1 << 20, &tokens);
  p->tokens = (int)tokens;
  if (!s && !strcmp(which, "decode") && p->tokens != 1) s = bad(r, "does not run one token");
  if (!s) s = get(r, jp, "inputs", &in);
  if (!s) {
    size_t k = enter(r, "inputs", 0);
    s = field_region(r, in, "tokens", &p->tokens_in);
    if (!s && p->tokens_in.bytes != (uint64_t)p->tokens * 4)
      s = bad(r, "has a tokens input whose size is not tokens i32s");
    p->has_pos = cJSON_GetObjectItemCaseSensitive(in, "pos") != NULL;
    if (!s && p->has_pos) s = field_region(r, in, "pos", &p->pos);
    /* a batch program's rows each have a position */
    uint64_t npos = strcmp(which, "batch") ? 1 : (uint64_t)p->tokens;
    if (!s && p->has_pos && p->pos.bytes != 4 * npos)
      s = bad(r, npos == 1 ? "has a pos input that is not one i32" : "has a pos input that is not one i32 a row");
    if (!s && p->has_pos && !r->m->max_seq) s = bad(r, "reads pos, but max_seq is 0");
    leave(r, k);
  }
  if (!s) s = field_region(r, jp, "output", &p->output);
  if (!s && p->output.bytes != (uint64_t)p->tokens * (uint64_t)r->m->vocab * 4)
    s = bad(r, "has an output whose size is not tokens x vocab f32s");
  sm = cJSON_GetObjectItemCaseSensitive(jp, "sampler");
  p->has_sampler = sm != NULL;
  if (!s && sm) {
    size_t k = enter(r, "sampler", 0);
    s = field_region(r, sm, "next", &p->next);
    if (!s) s = field_region(r, sm, "state", &p->sampler);
    uint64_t rows = strcmp(which, "batch") ? 1 : (uint64_t)p->tokens;
    if (!s && (p->next.bytes != 4 * rows || p->sampler.bytes != SSM_SAMPLER_STATE_LEN * 4 * rows ||
               (rows == 1 && p->tokens != 1)))
      s = bad(r, "has regions of the wrong size (or a program of more than one token)");
    p->has_seen = cJSON_GetObjectItemCaseSensitive(sm, "seen") != NULL;
    if (!s && p->has_seen) s = field_region(r, sm, "seen", &p->seen);
    if (!s && p->has_seen &&
        (rows != 1 || p->seen.bytes != (uint64_t)SSM_SEEN_WORDS(r->m->vocab) * 4))
      s = bad(r, "has a seen-token set that is not f32[ceil(vocab / 24)] of one sequence");
    leave(r, k);
  }
  const cJSON *ac = cJSON_GetObjectItemCaseSensitive(jp, "any_count");
  p->any_count = ac != NULL;
  if (!s && ac && (!cJSON_IsTrue(ac) || p->tokens < 2))
    s = bad(r, "has an any_count that is not true, or runs one token");
  if (!s) s = field_num(r, jp, "activation_bytes", 0, MAX_BYTES, &b[0]);
  if (!s) s = field_num(r, jp, "activation_bytes_unplanned", 0, MAX_BYTES, &b[1]);
  p->activation_bytes = (uint64_t)b[0];
  p->activation_bytes_unplanned = (uint64_t)b[1];
  if (!s) s = field_blob(r, jp, "ir", &p->ir);
  if (!s) s = steps(r, jp, p);
  leave(r, n);
  return s;
}

static int is_file_name(const char *n) {
  return n[0] && !strchr(n, '/') && strcmp(n, ".") && strcmp(n, "..") && strlen(n) <= 255;
}

static int is_hex16(const char *hex) {
  return strlen(hex) == 16 && strspn(hex, "0123456789abcdef") == 16;
}

/* The optional "weights_file": {"name": "m.q4_0.safetensors", "xxh3": "16
 * hex digits"}: the weights as the bundle reads them, beside it. */
static ssm_status weights_file(reader *r, const cJSON *root) {
  ssm_manifest *m = r->m;
  const cJSON *wf = cJSON_GetObjectItemCaseSensitive(root, "weights_file");
  if (!wf) return NULL;
  size_t n = enter(r, "weights_file", 0);
  const char *hex = NULL;
  ssm_status s = cJSON_IsObject(wf) ? NULL : bad(r, "is not an object");
  if (!s) s = field_str(r, wf, "name", &m->weights_file);
  if (!s && !is_file_name(m->weights_file)) s = bad(r, "has a name that is not a file name");
  if (!s) s = field_str(r, wf, "xxh3", &hex);
  if (!s && !is_hex16(hex)) s = bad(r, "has an xxh3 that is not 16 lowercase hex digits");
  if (!s) m->weights_fingerprint = strtoull(hex, NULL, 16);
  leave(r, n);
  if (s) m->weights_file = NULL;
  return s;
}

/* The optional "config": an object of config.json keys and their values
 * (bundle.h: ssm_manifest.config), kept as its text, and the optional
 * "cache_key": 32 hex digits. */
static ssm_status config_and_key(reader *r, const cJSON *root) {
  ssm_manifest *m = r->m;
  const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
  ssm_status s = NULL;
  if (cfg && (!cJSON_IsObject(cfg) || cJSON_GetArraySize(cfg) > 4096)) {
    size_t n = enter(r, "config", 0);
    s = bad(r, "is not an object (of at most 4096 keys)");
    leave(r, n);
  }
  if (!s && cfg) {
    char *text = cJSON_PrintUnformatted(cfg);
    m->config = text ? ssm_arena_strdup(r->arena, text) : NULL;
    cJSON_free(text);
    if (!m->config) s = ssm_status_new(SSM_ERR_NOMEM, "%s: out of host memory for the manifest's "
                                       "config", r->name);
  }
  if (!s && cJSON_GetObjectItemCaseSensitive(root, "cache_key")) {
    s = field_str(r, root, "cache_key", &m->cache_key);
    if (!s && (strlen(m->cache_key) != 32 || strspn(m->cache_key, "0123456789abcdef") != 32)) {
      size_t n = enter(r, "cache_key", 0);
      s = bad(r, "is not 32 lowercase hex digits");
      leave(r, n);
    }
  }
  if (s) m->config = m->cache_key = NULL;
  return s;
}

/* The optional "source": {"dir": "/abs/dir", "files": [{"name": "config.json",
 * "xxh3": "16 hex digits"}, ...]}: the weights directory it was compiled with. */
static ssm_status source(reader *r, const cJSON *root) {
  ssm_manifest *m = r->m;
  const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "source"), *arr;
  if (!src) return NULL;
  size_t n = enter(r, "source", 0);
  ssm_status s = cJSON_IsObject(src) ? NULL : bad(r, "is not an object");
  if (!s) s = field_str(r, src, "dir", &m->source_dir);
  if (!s && (m->source_dir[0] != '/' || strlen(m->source_dir) >= 4096)) {
    size_t k = enter(r, "dir", 0);
    s = bad(r, "is not an absolute path (of at most 4095 bytes)");
    leave(r, k);
  }
  if (!s) s = list(r, src, "files", 0, 1024, sizeof *m->source_files, &arr, &m->nsource_files,
                   (void **)&m->source_files);
  for (int i = 0; !s && i < m->nsource_files; i++) {
    const cJSON *e = cJSON_GetArrayItem(arr, i);
    ssm_mf_source_file *f = &m->source_files[i];
    const char *hex = NULL;
    size_t k = enter(r, "files", 0);
    enter(r, NULL, i);
    s = field_str(r, e, "name", &f->name);
    if (!s && !is_file_name(f->name))
      s = bad(r, "has a name that is not a file name");
    for (int j = 0; !s && j < i; j++)
      if (!strcmp(m->source_files[j].name, f->name)) s = bad(r, "names a file given before");
    if (!s) s = field_str(r, e, "xxh3", &hex);
    if (!s && !is_hex16(hex)) s = bad(r, "has an xxh3 that is not 16 lowercase hex digits");
    if (!s) f->hash = strtoull(hex, NULL, 16);
    leave(r, k);
  }
  leave(r, n);
  if (s) {
    m->source_dir = NULL;
    m->nsource_files = 0;
  }
  return s;
}

static ssm_status read_root(reader *r, const cJSON *root) {
  ssm_manifest *m = r->m;
  double v = 0;
  const char *dtype;
  if (!cJSON_IsObject(root)) return bad(r, "is not a JSON object");
  SSM_TRY(field_num(r, root, "ssmb", 0, 1e9, &v));
  if (v != SSM_BUNDLE_VERSION) {
    size_t n = enter(r, "ssmb", 0);
    ssm_status s = bad(r, "differs from the version in the header");
    leave(r, n);
    return s;
  }
  SSM_TRY(field_str(r, root, "generator", &m->generator));
  SSM_TRY(field_str(r, root, "architecture", &m->architecture));
  SSM_TRY(field_num(r, root, "vocab", 1, 1 << 30, &v));
  m->vocab = (int64_t)v;
  SSM_TRY(field_num(r, root, "max_seq", 0, 1 << 24, &v));
  m->max_seq = (int64_t)v;
  SSM_TRY(field_num(r, root, "eos_token_id", -1, 1 << 30, &v));
  m->eos = (int64_t)v;
  SSM_TRY(field_str(r, root, "dtype", &dtype));
  if (!ssm_dtype_parse(dtype, strlen(dtype), &m->dtype) || m->dtype == SSM_I32) {
    size_t n = enter(r, "dtype", 0);
    ssm_status s = bad(r, "is not f32, f16 or bf16");
    leave(r, n);
    return s;
  }
  SSM_TRY(field_num(r, root, "align", 4, 1 << 16, &v));
  m->align = (uint32_t)v;
  if (m->align & (m->align - 1)) {
    size_t n = enter(r, "align", 0);
    ssm_status s = bad(r, "is not a power of two");
    leave(r, n);
    return s;
  }
  SSM_TRY(field_num(r, root, "wgsl_window", 256, MAX_BYTES, &v));
  m->wgsl_window = (uint64_t)v;
  if (m->wgsl_window & (m->wgsl_window - 1) || m->wgsl_window < m->align) {
    size_t n = enter(r, "wgsl_window", 0);
    ssm_status s = bad(r, "is not a power of two of at least align bytes");
    leave(r, n);
    return s;
  }
  const cJSON *arr;
  SSM_TRY(list(r, root, "buffers", 1, SSM_BUNDLE_MAX_BUFFERS, sizeof *m->buffers, &arr,
               &m->nbuffers, (void **)&m->buffers));
  for (int i = 0; i < m->nbuffers; i++) {
    const cJSON *e = cJSON_GetArrayItem(arr, i);
    const char *usage;
    size_t n = enter(r, "buffers", 0);
    enter(r, NULL, i);
    ssm_status s = field_str(r, e, "usage", &usage);
    if (!s) s = field_num(r, e, "bytes", 4, MAX_BYTES, &v);
    m->buffers[i].bytes = (uint64_t)v;
    int u = 0;
    while (!s && u < 5 && strcmp(usage, usage_names[u])) u++;
    if (!s && u == 5)
      s = bad(r, "has a usage other than state, activations, weights, output or slots");
    m->buffers[i].usage = (ssm_buffer_usage)u;
    leave(r, n);
    SSM_TRY(s);
  }
  SSM_TRY(tensors(r, root, "weights", 1, &m->weights, &m->nweights));
  SSM_TRY(tensors(r, root, "state", 0, &m->states, &m->nstates));
  SSM_TRY(kernels(r, root));
  const cJSON *progs;
  SSM_TRY(get(r, root, "programs", &progs));
  size_t n = enter(r, "programs", 0);
  ssm_status s = program(r, progs, "decode", &m->decode);
  if (!s) s = program(r, progs, "prefill", &m->prefill);
  if (!s && m->prefill.has_sampler) s = bad(r, "gives the prefill program a sampler");
  if (!s && m->decode.has_sampler &&
      (m->buffers[m->decode.sampler.buffer].usage != SSM_BUFFER_STATE ||
       m->buffers[m->decode.next.buffer].usage != SSM_BUFFER_ACTIVATIONS))
    s = bad(r, "places the decode program's sampler outside the state and activations");
  if (!s && cJSON_GetObjectItemCaseSensitive(progs, "batch")) {
    s = program(r, progs, "batch", &m->batch);
    if (!s && (!m->batch.has_sampler || m->batch.any_count ||
               m->buffers[m->batch.sampler.buffer].usage != SSM_BUFFER_SLOTS ||
               m->buffers[m->batch.next.buffer].usage != SSM_BUFFER_ACTIVATIONS))
      s = bad(r, "gives the batch program no sampler, any_count or a sampler outside the slots "
                 "and activations");
  }
  leave(r, n);
  if (!s) s = check_slots(r);
  if (!s) s = source(r, root);
  if (!s) s = weights_file(r, root);
  if (!s) s = config_and_key(r, root);
  return s;
}

ssm_status ssm_manifest_parse(const char *json, size_t len, const char *name,
                              uint64_t blobs_size, ssm_arena *arena, ssm_manifest *out) {
  *out = (ssm_manifest){0};
  reader r = {.name = name, .blobs_size = blobs_size, .arena = arena, .m = out};
  cJSON *root;
  SSM_TRY(ssm_status_wrap(ssm_json_parse("manifest", json, len, &root), "%s: corrupt manifest",
                          name));
  ssm_status s = read_root(&r, root);
  cJSON_Delete(root);
  if (s) *out = (ssm_manifest){0};
  return s;
}
