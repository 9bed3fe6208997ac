/*
 * exec.c — running a .ssmb bundle on a Vulkan device.
 *
 * Open: read and check the manifest, create one device buffer per manifest
 * buffer, upload the weights from safetensors (with the manifest's dtype and
 * load-time transform), the constants, and zero state; create each kernel's
 * pipeline; record each program's command buffer once. Run: upload the
 * token ids (and the position, when the program reads the input "pos"),
 * replay the program, download the logits, advance the position. The
 * position (tokens run since the last reset) is model state like the KV
 * cache it indexes; max_seq (the manifest's, when a program reads "pos")
 * bounds it.
 * Generate: the decode
 * program again, followed by copies of the id its sampler drew into its own
 * input and into a host-visible ring, recorded once and GEN_BATCH times, so
 * tokens stay on the device and the host reads ids several steps at a time.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "runtime/vulkan/vulkan.h"

#define MAX_BUFFERS 64
#define MAX_BINDINGS 32

typedef struct {
  int buffer;
  uint64_t offset, bytes;
} region;

typedef struct {
  int tokens;
  region input, output;
  int has_pos;
  region pos; /* the input "pos" when has_pos */
  ssm_vk_program *prog;
} program;

struct ssm_rt {
  ssm_bundle *bundle;
  cJSON *manifest;
  ssm_vk *vk;
  ssm_vk_buffer *buffers[MAX_BUFFERS];
  uint64_t buffer_bytes[MAX_BUFFERS];
  int nbuffers;
  ssm_vk_kernel **kernels;
  int nkernels;
  program decode, prefill;
  /* the decode program's sampler (bundles of an older ssmc have none) */
  int has_sampler;
  region next, sampler_state;
  float sampler[SSM_SAMPLER_STATE_LEN]; /* the settings; written with step 0 */
  ssm_vk_program *gen1, *genk; /* decode + feedback copies, once and GEN_BATCH times */
  ssm_vk_buffer *ring;         /* host-visible: the ids the gen programs drew */
  int64_t vocab;
  int64_t max_seq;  /* 0: no bound (no program reads "pos") */
  int64_t position; /* tokens run since the last reset */
  const char *path;
  uint64_t fingerprint; /* of the weights (ssm_st_fingerprint) */
};

/* ---- manifest reading, every field checked ----------------------------- */

static ssm_status bad(const ssm_rt *rt, const char *field, const char *what) {
  return ssm_status_new(SSM_ERR_INVALID, "%s: corrupt manifest: %s %s", rt->path, field, what);
}

static ssm_status get_item(const ssm_rt *rt, const cJSON *obj, const char *key,
                           const char *ctx, const cJSON **out) {
  *out = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
  if (!*out) {
    char f[256];
    snprintf(f, sizeof f, "%s.%s", ctx, key);
    return bad(rt, f, "is missing");
  }
  return NULL;
}

/* A JSON number that is an integer in [lo, hi]. */
static ssm_status get_uint(const ssm_rt *rt, const cJSON *obj, const char *key, const char *ctx,
                           double hi, uint64_t *out) {
  const cJSON *it;
  SSM_TRY(get_item(rt, obj, key, ctx, &it));
  char f[256];
  snprintf(f, sizeof f, "%s.%s", ctx, key);
  if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > hi ||
      it->valuedouble != floor(it->valuedouble))
    return bad(rt, f, "is not a valid count");
  *out = (uint64_t)it->valuedouble;
  return NULL;
}

static ssm_status get_uint_at(const ssm_rt *rt, const cJSON *arr, int i, const char *ctx,
                              double hi, uint64_t *out) {
  const cJSON *it = cJSON_GetArrayItem(arr, i);
  if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > hi ||
      it->valuedouble != floor(it->valuedouble))
    return bad(rt, ctx, "holds an invalid number");
  *out = (uint64_t)it->valuedouble;
  return NULL;
}

/* [buffer, offset, bytes] inside a known buffer. */
static ssm_status get_region(const ssm_rt *rt, const cJSON *arr, const char *ctx, region *out) {
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != 3) return bad(rt, ctx, "is not a region");
  uint64_t b, o, n;
  SSM_TRY(get_uint_at(rt, arr, 0, ctx, MAX_BUFFERS - 1, &b));
  SSM_TRY(get_uint_at(rt, arr, 1, ctx, 9e15, &o));
  SSM_TRY(get_uint_at(rt, arr, 2, ctx, 9e15, &n));
  if ((int)b >= rt->nbuffers || o > rt->buffer_bytes[b] || n > rt->buffer_bytes[b] - o)
    return bad(rt, ctx, "lies outside its buffer");
  *out = (region){(int)b, o, n};
  return NULL;
}

static ssm_status get_shape(const ssm_rt *rt, const cJSON *arr, const char *ctx, ssm_type *t) {
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) > SSM_MAX_RANK)
    return bad(rt, ctx, "is not a shape");
  t->rank = cJSON_GetArraySize(arr);
  for (int d = 0; d < t->rank; d++) {
    uint64_t v;
    SSM_TRY(get_uint_at(rt, arr, d, ctx, 1e12, &v));
    t->dims[d] = (int64_t)v;
  }
  return NULL;
}

/* ---- loading ----------------------------------------------------------- */

static ssm_status load_buffers(ssm_rt *rt) {
  const cJSON *bufs;
  SSM_TRY(get_item(rt, rt->manifest, "buffers", "manifest", &bufs));
  if (!cJSON_IsArray(bufs) || cJSON_GetArraySize(bufs) > MAX_BUFFERS || !cJSON_GetArraySize(bufs))
    return bad(rt, "buffers", "is not a list of up to 64 buffers");
  int i = 0;
  const cJSON *b;
  cJSON_ArrayForEach(b, bufs) {
    uint64_t bytes;
    SSM_TRY(get_uint(rt, b, "bytes", "buffers[]", 1e15, &bytes));
    if (!bytes) bytes = 4;
    SSM_TRY(ssm_vk_buffer_create(rt->vk, (size_t)bytes, SSM_VK_BUFFER_DEVICE, &rt->buffers[i]));
    rt->buffer_bytes[i++] = bytes;
    rt->nbuffers = i;
  }
  return NULL;
}

static ssm_status upload_weights(ssm_rt *rt, const char *weights) {
  const cJSON *ws, *w;
  SSM_TRY(get_item(rt, rt->manifest, "weights", "manifest", &ws));
  ssm_st *st;
  SSM_TRY(ssm_st_open(weights, &st));
  rt->fingerprint = ssm_st_fingerprint(st);
  ssm_status s = NULL;
  void *host = NULL;
  size_t host_cap = 0;
  cJSON_ArrayForEach(w, ws) {
    const cJSON *name, *dtype, *shape, *transform, *reg;
    region r;
    ssm_type t = {0};
    if ((s = get_item(rt, w, "name", "weights[]", &name)) ||
        (s = get_item(rt, w, "dtype", "weights[]", &dtype)) ||
        (s = get_item(rt, w, "shape", "weights[]", &shape)) ||
        (s = get_item(rt, w, "region", "weights[]", &reg)) ||
        (s = get_region(rt, reg, "weights[].region", &r)) ||
        (s = get_shape(rt, shape, "weights[].shape", &t)))
      break;
    transform = cJSON_GetObjectItemCaseSensitive(w, "transform");
    const char *tf = cJSON_IsString(transform) ? transform->valuestring : "";
    if (!cJSON_IsString(name) || !cJSON_IsString(dtype) ||
        !ssm_dtype_parse(dtype->valuestring, strlen(dtype->valuestring), &t.dtype)) {
      s = bad(rt, "weights[]", "has a bad name or dtype");
      break;
    }
    size_t bytes = (size_t)ssm_type_numel(&t) * ssm_dtype_size(t.dtype);
    if (bytes != r.bytes) {
      s = bad(rt, name->valuestring, "region size does not match its shape");
      break;
    }
    if (bytes > host_cap) {
      free(host);
      host = malloc(host_cap = bytes);
      if (!host) {
        s = ssm_status_new(SSM_ERR_NOMEM, "out of host memory for weight '%s' (%zu bytes)",
                           name->valuestring, bytes);
        break;
      }
    }
    if ((s = ssm_st_read(st, name->valuestring, &t, host))) break;
    if (*tf) {
      if (t.dtype != SSM_F32) {
        s = ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: weight '%s': load-time transform '%s' on "
                           "a %s weight (only f32 is supported)", rt->path, name->valuestring,
                           tf, ssm_dtype_name(t.dtype));
        break;
      }
      s = ssm_weight_transform(tf, host, bytes / 4);
      if (s) {
        s = ssm_status_wrap(s, "%s: weight '%s'", rt->path, name->valuestring);
        break;
      }
    }
    if ((s = ssm_vk_buffer_upload(rt->vk, rt->buffers[r.buffer], r.offset, host, bytes))) break;
  }
  free(host);
  ssm_st_close(st);
  return s;
}

static ssm_status upload_constants(ssm_rt *rt) {
  const cJSON *cs, *c;
  SSM_TRY(get_item(rt, rt->manifest, "constants", "manifest", &cs));
  cJSON_ArrayForEach(c, cs) {
    const cJSON *v, *reg;
    region r;
    SSM_TRY(get_item(rt, c, "value", "constants[]", &v));
    SSM_TRY(get_item(rt, c, "region", "constants[]", &reg));
    SSM_TRY(get_region(rt, reg, "constants[].region", &r));
    if (!cJSON_IsNumber(v) || r.bytes != 4) return bad(rt, "constants[]", "is not an f32 scalar");
    float f = (float)v->valuedouble;
    SSM_TRY(ssm_vk_buffer_upload(rt->vk, rt->buffers[r.buffer], r.offset, &f, 4));
  }
  return NULL;
}

static ssm_status load_kernels(ssm_rt *rt) {
  const cJSON *ks, *k;
  SSM_TRY(get_item(rt, rt->manifest, "kernels", "manifest", &ks));
  if (!cJSON_IsArray(ks)) return bad(rt, "kernels", "is not a list");
  rt->nkernels = 0;
  rt->kernels = calloc((size_t)cJSON_GetArraySize(ks) + 1, sizeof *rt->kernels);
  if (!rt->kernels) abort();
  cJSON_ArrayForEach(k, ks) {
    const cJSON *spv, *name;
    uint64_t nb, off, size;
    SSM_TRY(get_item(rt, k, "spirv", "kernels[]", &spv));
    SSM_TRY(get_item(rt, k, "name", "kernels[]", &name));
    SSM_TRY(get_uint(rt, k, "bindings", "kernels[]", MAX_BINDINGS, &nb));
    if (!cJSON_IsArray(spv) || cJSON_GetArraySize(spv) != 2 || !cJSON_IsString(name))
      return bad(rt, "kernels[]", "has a bad spirv or name");
    SSM_TRY(get_uint_at(rt, spv, 0, "kernels[].spirv", 9e15, &off));
    SSM_TRY(get_uint_at(rt, spv, 1, "kernels[].spirv", 9e15, &size));
    const void *words;
    SSM_TRY(ssm_bundle_blob(rt->bundle, off, size, &words));
    if (size % 4 || size < 20 || off % 4) return bad(rt, name->valuestring, "SPIR-V blob is malformed");
    ssm_vk_kernel_desc d = {.name = name->valuestring, .spirv = words, .words = size / 4,
                            .n_bindings = (int)nb};
    SSM_TRY(ssm_vk_kernel_create_desc(rt->vk, &d, &rt->kernels[rt->nkernels]));
    rt->nkernels++;
  }
  return NULL;
}

/* Decode steps queued in one submission by ssm_rt_generate. */
#define GEN_BATCH 16

static ssm_status record_steps(ssm_rt *rt, const cJSON *steps, const char *ctx,
                               ssm_vk_program *prog);

static ssm_status load_program(ssm_rt *rt, const char *which, program *p) {
  const cJSON *progs, *jp, *in, *out, *steps, *reg;
  char ctx[64];
  snprintf(ctx, sizeof ctx, "programs.%s", which);
  SSM_TRY(get_item(rt, rt->manifest, "programs", "manifest", &progs));
  SSM_TRY(get_item(rt, progs, which, "programs", &jp));
  uint64_t tokens;
  SSM_TRY(get_uint(rt, jp, "tokens", ctx, 1 << 20, &tokens));
  if (!tokens) return bad(rt, ctx, "has no tokens");
  p->tokens = (int)tokens;
  const cJSON *inputs;
  int has_tokens = 0;
  SSM_TRY(get_item(rt, jp, "inputs", ctx, &inputs));
  if (!cJSON_IsArray(inputs)) return bad(rt, ctx, "inputs is not a list");
  cJSON_ArrayForEach(in, inputs) {
    const cJSON *name;
    region r;
    SSM_TRY(get_item(rt, in, "name", "inputs[]", &name));
    SSM_TRY(get_item(rt, in, "region", "inputs[]", &reg));
    SSM_TRY(get_region(rt, reg, "inputs[].region", &r));
    if (cJSON_IsString(name) && !strcmp(name->valuestring, "tokens") && !has_tokens) {
      p->input = r;
      has_tokens = 1;
    } else if (cJSON_IsString(name) && !strcmp(name->valuestring, "pos") && !p->has_pos) {
      if (r.bytes != 4) return bad(rt, ctx, "input pos is not one i32");
      if (!rt->max_seq) return bad(rt, "max_seq", "is missing (a program reads pos)");
      p->pos = r;
      p->has_pos = 1;
    } else {
      return bad(rt, "inputs[].name", "is not \"tokens\" or \"pos\" (or repeats one)");
    }
  }
  if (!has_tokens) return bad(rt, ctx, "has no input \"tokens\"");
  SSM_TRY(get_item(rt, jp, "output", ctx, &out));
  SSM_TRY(get_item(rt, out, "region", ctx, &reg));
  SSM_TRY(get_region(rt, reg, "output.region", &p->output));
  if (p->input.bytes != tokens * 4 || p->output.bytes != tokens * (uint64_t)rt->vocab * 4)
    return bad(rt, ctx, "input/output sizes do not match tokens and vocab");
  SSM_TRY(get_item(rt, jp, "steps", ctx, &steps));
  if (!cJSON_IsArray(steps)) return bad(rt, ctx, "steps is not a list");
  SSM_TRY(ssm_vk_program_begin(rt->vk, &p->prog));
  SSM_TRY(record_steps(rt, steps, ctx, p->prog));
  return ssm_vk_program_end(p->prog);
}

/* Appends the dispatches of a program's steps to `prog`. */
static ssm_status record_steps(ssm_rt *rt, const cJSON *steps, const char *ctx,
                               ssm_vk_program *prog) {
  const cJSON *st;
  size_t align = ssm_vk_storage_alignment(rt->vk);
  cJSON_ArrayForEach(st, steps) {
    uint64_t kidx, g[3];
    const cJSON *groups, *binds, *b;
    SSM_TRY(get_uint(rt, st, "kernel", ctx, 1e9, &kidx));
    if ((int)kidx >= rt->nkernels) return bad(rt, ctx, "names a kernel that does not exist");
    SSM_TRY(get_item(rt, st, "groups", ctx, &groups));
    SSM_TRY(get_item(rt, st, "bindings", ctx, &binds));
    if (!cJSON_IsArray(groups) || cJSON_GetArraySize(groups) != 3 || !cJSON_IsArray(binds) ||
        cJSON_GetArraySize(binds) > MAX_BINDINGS)
      return bad(rt, ctx, "has a bad step");
    for (int d = 0; d < 3; d++) SSM_TRY(get_uint_at(rt, groups, d, ctx, 65535, &g[d]));
    ssm_vk_binding vb[MAX_BINDINGS];
    int nb = 0;
    cJSON_ArrayForEach(b, binds) {
      region r;
      SSM_TRY(get_region(rt, b, "steps[].bindings", &r));
      if (r.offset % align)
        return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: a binding offset (%llu) is not a multiple "
                              "of this device's minStorageBufferOffsetAlignment (%zu)", rt->path,
                              (unsigned long long)r.offset, align);
      vb[nb++] = (ssm_vk_binding){rt->buffers[r.buffer], (size_t)r.offset,
                                  (size_t)(r.bytes ? r.bytes : 4)};
    }
    /* a barrier before the dispatch when schedule asked for one (and when
     * the bundle does not say: then always) */
    const cJSON *barrier = cJSON_GetObjectItemCaseSensitive(st, "barrier");
    if (!cJSON_IsNumber(barrier) || barrier->valuedouble != 0) ssm_vk_program_add_barrier(prog);
    SSM_TRY(ssm_vk_program_add_dispatch(prog, rt->kernels[kidx], vb, NULL, (uint32_t)g[0],
                                        (uint32_t)g[1], (uint32_t)g[2]));
  }
  return NULL;
}

/* The decode program's sampler: "feedback": [drawn id, tokens input] and
 * "sampler" (the state). Records gen1 and genk: the decode steps, then a copy
 * of the drawn id into the tokens input (the next step's input) and into
 * slot j of the host-visible ring, once and GEN_BATCH times. */
static ssm_status load_sampler(ssm_rt *rt) {
  const cJSON *progs = cJSON_GetObjectItemCaseSensitive(rt->manifest, "programs");
  const cJSON *jp = cJSON_GetObjectItemCaseSensitive(progs, "decode");
  const cJSON *fb = cJSON_GetObjectItemCaseSensitive(jp, "feedback");
  if (!fb) return NULL;
  const cJSON *sm, *steps;
  region in;
  SSM_TRY(get_item(rt, jp, "sampler", "programs.decode", &sm));
  SSM_TRY(get_item(rt, jp, "steps", "programs.decode", &steps));
  if (!cJSON_IsArray(fb) || cJSON_GetArraySize(fb) != 2)
    return bad(rt, "programs.decode.feedback", "is not two regions");
  SSM_TRY(get_region(rt, cJSON_GetArrayItem(fb, 0), "programs.decode.feedback", &rt->next));
  SSM_TRY(get_region(rt, cJSON_GetArrayItem(fb, 1), "programs.decode.feedback", &in));
  SSM_TRY(get_region(rt, sm, "programs.decode.sampler", &rt->sampler_state));
  if (rt->next.bytes != 4 || in.offset != rt->decode.input.offset ||
      in.buffer != rt->decode.input.buffer || in.bytes != 4 ||
      rt->sampler_state.bytes != SSM_SAMPLER_STATE_LEN * 4)
    return bad(rt, "programs.decode", "feedback or sampler regions have the wrong size");
  SSM_TRY(ssm_vk_buffer_create(rt->vk, GEN_BATCH * 4, SSM_VK_BUFFER_HOST, &rt->ring));
  for (int reps = 1; reps <= GEN_BATCH; reps += GEN_BATCH - 1) {
    ssm_vk_program **p = reps == 1 ? &rt->gen1 : &rt->genk;
    SSM_TRY(ssm_vk_program_begin(rt->vk, p));
    for (int j = 0; j < reps; j++) {
      SSM_TRY(record_steps(rt, steps, "programs.decode", *p));
      SSM_TRY(ssm_vk_program_add_copy(*p, rt->buffers[rt->next.buffer], rt->next.offset,
                                      rt->buffers[in.buffer], in.offset, 4));
      SSM_TRY(ssm_vk_program_add_copy(*p, rt->buffers[rt->next.buffer], rt->next.offset, rt->ring,
                                      (size_t)j * 4, 4));
    }
    SSM_TRY(ssm_vk_program_end(*p));
  }
  rt->has_sampler = 1;
  return NULL;
}

static ssm_status write_sampler(ssm_rt *rt) {
  if (!rt->has_sampler) return NULL;
  return ssm_vk_buffer_upload(rt->vk, rt->buffers[rt->sampler_state.buffer],
                              rt->sampler_state.offset, rt->sampler, sizeof rt->sampler);
}

ssm_status ssm_rt_set_sampler(ssm_rt *rt, float temperature, int top_k, float top_p,
                              int64_t seed) {
  if (!rt->has_sampler)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: the bundle's decode program has no sampler "
                          "(compile it again with this ssmc)", rt->path);
  if (!(temperature >= 0) || isinf(temperature) || top_k < 0 || !(top_p > 0 && top_p <= 1) ||
      seed < 0 || seed >= (1 << 24))
    return ssm_status_new(SSM_ERR_INVALID, "sampler settings out of range: temperature %g (>= 0), "
                          "top_k %d (>= 0), top_p %g (in (0, 1]), seed %lld (in [0, 2^24))",
                          temperature, top_k, top_p, (long long)seed);
  float st[SSM_SAMPLER_STATE_LEN] = {temperature, (float)top_k, top_p, (float)seed, 0};
  memcpy(rt->sampler, st, sizeof st);
  return write_sampler(rt);
}

ssm_status ssm_rt_generate(ssm_rt *rt, int32_t first_token, int n, int32_t *out_ids,
                           int (*on_token)(int32_t id, void *user), void *user) {
  if (!rt->has_sampler)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: the bundle's decode program has no sampler "
                          "(compile it again with this ssmc)", rt->path);
  if (first_token < 0 || first_token >= rt->vocab)
    return ssm_status_new(SSM_ERR_INVALID, "token id %d out of range [0, %lld)", first_token,
                          (long long)rt->vocab);
  if (n <= 0) return NULL;
  SSM_TRY(ssm_vk_buffer_upload(rt->vk, rt->buffers[rt->decode.input.buffer],
                               rt->decode.input.offset, &first_token, 4));
  const int32_t *ring = ssm_vk_buffer_map(rt->ring);
  SSM_ASSERT(ring);
  for (int done = 0; done < n;) {
    /* a program that reads "pos" (a KV cache) needs it uploaded every step */
    program *d = &rt->decode;
    int batch = !on_token && !d->has_pos && n - done >= GEN_BATCH ? GEN_BATCH : 1;
    if (d->has_pos) {
      if (rt->position + 1 > rt->max_seq)
        return ssm_status_new(SSM_ERR_INVALID, "position %lld is past --max-seq %lld",
                              (long long)rt->max_seq, (long long)rt->max_seq);
      int32_t pos = (int32_t)rt->position;
      SSM_TRY(ssm_vk_buffer_upload(rt->vk, rt->buffers[d->pos.buffer], d->pos.offset, &pos, 4));
    }
    SSM_TRY(ssm_vk_program_run(rt->vk, batch > 1 ? rt->genk : rt->gen1));
    rt->position += batch;
    for (int j = 0; j < batch; j++) {
      int32_t id = ring[j];
      if (id < 0 || id >= rt->vocab)
        return ssm_status_new(SSM_ERR_DEVICE, "the sampler drew token id %d, outside [0, %lld)",
                              id, (long long)rt->vocab);
      out_ids[done++] = id;
      if (on_token && on_token(id, user)) return NULL;
    }
  }
  return NULL;
}

ssm_status ssm_rt_read_logits(ssm_rt *rt, float *logits) {
  return ssm_vk_buffer_download(rt->vk, rt->buffers[rt->decode.output.buffer],
                                rt->decode.output.offset, logits, (size_t)rt->decode.output.bytes);
}

ssm_status ssm_rt_reset(ssm_rt *rt) {
  const cJSON *ss, *s;
  ssm_status st = get_item(rt, rt->manifest, "state", "manifest", &ss);
  if (st) return st;
  cJSON_ArrayForEach(s, ss) {
    const cJSON *reg;
    region r;
    SSM_TRY(get_item(rt, s, "region", "state[]", &reg));
    SSM_TRY(get_region(rt, reg, "state[].region", &r));
    if (r.bytes % 4) return bad(rt, "state[]", "size is not a multiple of 4");
    if (r.bytes) SSM_TRY(ssm_vk_buffer_fill(rt->vk, rt->buffers[r.buffer], r.offset, r.bytes, 0));
  }
  rt->position = 0;
  return write_sampler(rt);
}

ssm_status ssm_rt_open(const char *bundle, const char *weights, const ssm_rt_opts *opts,
                       ssm_rt **out) {
  *out = NULL;
  ssm_rt *rt = calloc(1, sizeof *rt);
  if (!rt) abort();
  rt->path = bundle;
  ssm_status s = ssm_bundle_open(bundle, &rt->bundle);
  if (!s) {
    rt->manifest = cJSON_Parse(ssm_bundle_manifest(rt->bundle));
    if (!rt->manifest) s = bad(rt, "manifest", "is not JSON");
  }
  uint64_t version = 0, vocab = 0;
  if (!s) s = get_uint(rt, rt->manifest, "ssmb", "manifest", 1e6, &version);
  if (!s && version != SSM_BUNDLE_VERSION) s = bad(rt, "ssmb", "version differs from the header");
  if (!s) s = get_uint(rt, rt->manifest, "vocab", "manifest", 1 << 30, &vocab);
  if (!s && !vocab) s = bad(rt, "vocab", "is zero");
  rt->vocab = (int64_t)vocab;
  const cJSON *ms = rt->manifest ? cJSON_GetObjectItemCaseSensitive(rt->manifest, "max_seq") : NULL;
  if (!s && ms) {
    uint64_t max_seq;
    s = get_uint(rt, rt->manifest, "max_seq", "manifest", 1 << 30, &max_seq);
    if (!s && !max_seq) s = bad(rt, "max_seq", "is zero");
    rt->max_seq = (int64_t)max_seq;
  }
  if (!s) s = ssm_vk_create(opts ? opts->device : -1, opts ? opts->validation : 0, &rt->vk);
  if (!s) s = load_buffers(rt);
  if (!s) s = upload_weights(rt, weights);
  if (!s) s = upload_constants(rt);
  if (!s) s = ssm_rt_reset(rt);
  if (!s) s = load_kernels(rt);
  if (!s) s = load_program(rt, "decode", &rt->decode);
  if (!s) s = load_program(rt, "prefill", &rt->prefill);
  if (!s) s = load_sampler(rt);
  if (s) {
    ssm_rt_close(rt);
    return s;
  }
  *out = rt;
  return NULL;
}

void ssm_rt_close(ssm_rt *rt) {
  if (!rt) return;
  if (rt->vk) {
    ssm_vk_program_destroy(rt->vk, rt->decode.prog);
    ssm_vk_program_destroy(rt->vk, rt->gen1);
    ssm_vk_program_destroy(rt->vk, rt->genk);
    ssm_vk_buffer_destroy(rt->vk, rt->ring);
    ssm_vk_program_destroy(rt->vk, rt->prefill.prog);
    for (int i = 0; i < rt->nkernels; i++) ssm_vk_kernel_destroy(rt->vk, rt->kernels[i]);
    for (int i = 0; i < rt->nbuffers; i++) ssm_vk_buffer_destroy(rt->vk, rt->buffers[i]);
    ssm_vk_destroy(rt->vk);
  }
  free(rt->kernels);
  cJSON_Delete(rt->manifest);
  ssm_bundle_close(rt->bundle);
  free(rt);
}

int64_t ssm_rt_vocab(const ssm_rt *rt) { return rt->vocab; }
int64_t ssm_rt_position(const ssm_rt *rt) { return rt->position; }
int ssm_rt_prefill_tokens(const ssm_rt *rt) { return rt->prefill.tokens; }
ssm_vk *ssm_rt_vk(ssm_rt *rt) { return rt->vk; }

uint64_t ssm_rt_weight_bytes(const ssm_rt *rt) {
  uint64_t n = 0;
  const cJSON *w, *ws = cJSON_GetObjectItemCaseSensitive(rt->manifest, "weights");
  cJSON_ArrayForEach(w, ws) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(w, "region");
    const cJSON *b = cJSON_GetArrayItem(r, 2);
    if (cJSON_IsNumber(b)) n += (uint64_t)b->valuedouble;
  }
  return n;
}

ssm_status ssm_rt_run(ssm_rt *rt, const int32_t *tokens, int count, float *logits) {
  program *p = count == 1 ? &rt->decode : count == rt->prefill.tokens ? &rt->prefill : NULL;
  if (!p)
    return ssm_status_new(SSM_ERR_INVALID, "%s: runs take 1 or %d tokens, not %d", rt->path,
                          rt->prefill.tokens, count);
  for (int i = 0; i < count; i++)
    if (tokens[i] < 0 || tokens[i] >= rt->vocab)
      return ssm_status_new(SSM_ERR_INVALID, "token id %d out of range [0, %lld)", tokens[i],
                            (long long)rt->vocab);
  if (p->has_pos && rt->position + count > rt->max_seq)
    return ssm_status_new(SSM_ERR_INVALID, "position %lld is past --max-seq %lld",
                          (long long)(rt->position < rt->max_seq ? rt->max_seq : rt->position),
                          (long long)rt->max_seq);
  SSM_TRY(ssm_vk_buffer_upload(rt->vk, rt->buffers[p->input.buffer], p->input.offset, tokens,
                               (size_t)count * 4));
  if (p->has_pos) {
    int32_t pos = (int32_t)rt->position;
    SSM_TRY(ssm_vk_buffer_upload(rt->vk, rt->buffers[p->pos.buffer], p->pos.offset, &pos, 4));
  }
  SSM_TRY(ssm_vk_program_run(rt->vk, p->prog));
  rt->position += count;
  if (logits)
    SSM_TRY(ssm_vk_buffer_download(rt->vk, rt->buffers[p->output.buffer], p->output.offset,
                                   logits, (size_t)p->output.bytes));
  return NULL;
}

/* ---- state access (statefile.c saves and restores through these) ------- */

void ssm_rt_set_position(ssm_rt *rt, int64_t position) { rt->position = position; }
const char *ssm_rt_arch(const ssm_rt *rt) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(rt->manifest, "architecture");
  return cJSON_IsString(a) ? a->valuestring : "?";
}
uint64_t ssm_rt_fingerprint(const ssm_rt *rt) { return rt->fingerprint; }

int ssm_rt_state_count(const ssm_rt *rt) {
  return cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(rt->manifest, "state"));
}

/* The i-th state entry's name, type and region (checked at open by reset). */
static ssm_status state_entry(const ssm_rt *rt, int i, const char **name, ssm_type *type,
                              region *r) {
  const cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rt->manifest, "state"), i);
  const cJSON *n, *dt, *shape, *reg;
  SSM_TRY(get_item(rt, e, "name", "state[]", &n));
  SSM_TRY(get_item(rt, e, "dtype", "state[]", &dt));
  SSM_TRY(get_item(rt, e, "shape", "state[]", &shape));
  SSM_TRY(get_item(rt, e, "region", "state[]", &reg));
  SSM_TRY(get_region(rt, reg, "state[].region", r));
  *type = (ssm_type){0};
  SSM_TRY(get_shape(rt, shape, "state[].shape", type));
  if (!cJSON_IsString(n) || !cJSON_IsString(dt) ||
      !ssm_dtype_parse(dt->valuestring, strlen(dt->valuestring), &type->dtype) ||
      (uint64_t)ssm_type_numel(type) * ssm_dtype_size(type->dtype) != r->bytes)
    return bad(rt, "state[]", "has a bad name, dtype or size");
  *name = n->valuestring;
  return NULL;
}

ssm_status ssm_rt_state_info(const ssm_rt *rt, int i, const char **out_name, ssm_type *out_type) {
  region r;
  return state_entry(rt, i, out_name, out_type, &r);
}

ssm_status ssm_rt_state_read(ssm_rt *rt, int i, void *dst) {
  const char *name;
  ssm_type t;
  region r;
  SSM_TRY(state_entry(rt, i, &name, &t, &r));
  return ssm_vk_buffer_download(rt->vk, rt->buffers[r.buffer], (size_t)r.offset, dst,
                                (size_t)r.bytes);
}

ssm_status ssm_rt_state_write(ssm_rt *rt, int i, const void *src) {
  const char *name;
  ssm_type t;
  region r;
  SSM_TRY(state_entry(rt, i, &name, &t, &r));
  return ssm_vk_buffer_upload(rt->vk, rt->buffers[r.buffer], (size_t)r.offset, src,
                              (size_t)r.bytes);
}
