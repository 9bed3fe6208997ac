/*
 * exec.c — the Vulkan backend: a compiled bundle running on a device.
 *
 * Open: one device buffer per manifest buffer; the weights uploaded from
 * safetensors (converted to the manifest's dtype and transformed at load);
 * zeroed state; one pipeline per kernel; each program recorded once into a
 * command buffer. The manifest was checked when the bundle was read, so
 * only what depends on the device is checked here (offset alignment).
 * Run: upload the token ids (and the position, when the program reads the
 * input "pos"), replay the program, download the logits.
 * Generate: the decode program again, followed by copies of the id its
 * sampler drew into its own input and into a host-visible ring, recorded
 * once and GEN_BATCH times, so tokens stay on the device and the host reads
 * ids several steps at a time.
 */
#include <string.h>

#include "runtime/vulkan/vulkan.h"

/* Decode steps queued in one submission by generate. */
#define GEN_BATCH 16

typedef struct {
  ssm_backend base;
  ssm_bundle *bundle;
  const ssm_manifest *m;
  ssm_vk *vk;
  ssm_vk_buffer *buffers[SSM_BUNDLE_MAX_BUFFERS];
  ssm_vk_kernel **kernels;
  ssm_vk_program *decode, *prefill;
  ssm_vk_program *gen1, *genk; /* decode + feedback copies, once and GEN_BATCH times */
  ssm_vk_buffer *ring;         /* host-visible: the ids the gen programs drew */
  float sampler[SSM_SAMPLER_STATE_LEN]; /* the settings; written with step 0 */
  ssm_backend_state *states;
  float *logits;               /* one row, for generate's on_step */
  ssm_vk_program *timed[2];    /* decode and prefill with timestamps (made on first profile) */
} vk_backend;

static ssm_status upload(vk_backend *v, ssm_region r, const void *data) {
  return ssm_vk_buffer_upload(v->vk, v->buffers[r.buffer], (size_t)r.offset, data, (size_t)r.bytes);
}

static ssm_status download(vk_backend *v, ssm_region r, void *data) {
  return ssm_vk_buffer_download(v->vk, v->buffers[r.buffer], (size_t)r.offset, data,
                                (size_t)r.bytes);
}

/* ---- opening ----------------------------------------------------------------- */

/* Every weight the bundle needs is in the checkpoint with its shape: checked
 * before any device memory is allocated. */
static ssm_status check_weights(const ssm_manifest *m, const ssm_st *st) {
  for (int i = 0; i < m->nweights; i++)
    SSM_TRY(ssm_st_check(st, m->weights[i].name, &m->weights[i].type));
  return NULL;
}

static ssm_status upload_weights(vk_backend *v, ssm_st *st) {
  ssm_status s = NULL;
  void *host = NULL;
  size_t host_cap = 0;
  for (int i = 0; i < v->m->nweights && !s; i++) {
    const ssm_mf_tensor *w = &v->m->weights[i];
    size_t bytes = (size_t)w->region.bytes;
    if (bytes > host_cap) {
      free(host);
      host_cap = 0;
      s = ssm_status_wrap(ssm_alloc(bytes, 1, &host), "weight '%s'", w->name);
      if (s) break;
      host_cap = bytes;
    }
    s = ssm_st_read(st, w->name, &w->type, host);
    if (!s && *w->transform) {
      if (w->type.dtype != SSM_F32)
        s = ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: weight '%s': load-time transform '%s' on "
                           "a %s weight (only f32 is supported)", ssm_bundle_name(v->bundle), w->name,
                           w->transform, ssm_dtype_name(w->type.dtype));
      else
        s = ssm_status_wrap(ssm_weight_transform(w->transform, host, bytes / 4), "%s: weight '%s'",
                            ssm_bundle_name(v->bundle), w->name);
    }
    if (!s) s = upload(v, w->region, host);
  }
  /* every weight read was hashed on the way: this reads only unused tensors */
  if (!s) v->base.fingerprint = ssm_st_fingerprint(st, &s);
  free(host);
  return s;
}

static ssm_status load_kernels(vk_backend *v) {
  v->kernels = ssm_xcalloc((size_t)v->m->nkernels + 1, sizeof *v->kernels);
  for (int i = 0; i < v->m->nkernels; i++) {
    const ssm_mf_kernel *k = &v->m->kernels[i];
    ssm_vk_kernel_desc d = {.name = k->name, .spirv = ssm_bundle_blob(v->bundle, k->spirv),
                            .words = (size_t)k->spirv.size / 4, .n_bindings = k->nbindings};
    SSM_TRY(ssm_vk_kernel_create_desc(v->vk, &d, &v->kernels[i]));
  }
  return NULL;
}

/* Appends the dispatches of program `p` to `prog`. */
static ssm_status record_steps(vk_backend *v, const ssm_mf_program *p, ssm_vk_program *prog) {
  size_t align = ssm_vk_storage_alignment(v->vk);
  for (int i = 0; i < p->nsteps; i++) {
    const ssm_mf_step *st = &p->steps[i];
    ssm_vk_binding vb[SSM_BUNDLE_MAX_BINDINGS];
    for (int b = 0; b < st->nbindings; b++) {
      const ssm_region *r = &st->bindings[b];
      if (r->offset % align)
        return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: a binding offset (%llu) is not a "
                              "multiple of this device's minStorageBufferOffsetAlignment (%zu)",
                              ssm_bundle_name(v->bundle), (unsigned long long)r->offset, align);
      /* whole u32 words: 16-bit tensors are read two elements to a word, and
       * regions start on `align` boundaries, so the padding is there */
      vb[b] = (ssm_vk_binding){v->buffers[r->buffer], (size_t)r->offset,
                               ((size_t)r->bytes + 3) & ~(size_t)3};
    }
    if (st->barrier) ssm_vk_program_add_barrier(prog);
    SSM_TRY(ssm_vk_program_add_dispatch(prog, v->kernels[st->kernel], vb, NULL, st->groups[0],
                                        st->groups[1], st->groups[2]));
  }
  return NULL;
}

static ssm_status record(vk_backend *v, const ssm_mf_program *p, ssm_vk_program **out) {
  SSM_TRY(ssm_vk_program_create(v->vk, out));
  SSM_TRY(record_steps(v, p, *out));
  return ssm_vk_program_end(*out);
}

/* gen1 and genk: the decode steps, then copies of the drawn id into the
 * tokens input (the next step's input) and into slot j of the ring, once
 * and GEN_BATCH times. */
static ssm_status record_generate(vk_backend *v) {
  const ssm_mf_program *d = &v->m->decode;
  if (!d->has_sampler) return NULL;
  SSM_TRY(ssm_vk_buffer_create(v->vk, GEN_BATCH * 4, SSM_VK_BUFFER_HOST, &v->ring));
  for (int reps = 1; reps <= GEN_BATCH; reps += GEN_BATCH - 1) {
    ssm_vk_program **p = reps == 1 ? &v->gen1 : &v->genk;
    SSM_TRY(ssm_vk_program_create(v->vk, p));
    for (int j = 0; j < reps; j++) {
      SSM_TRY(record_steps(v, d, *p));
      ssm_vk_buffer *next = v->buffers[d->next.buffer];
      SSM_TRY(ssm_vk_program_add_copy(*p, next, d->next.offset, v->buffers[d->tokens_in.buffer],
                                      d->tokens_in.offset, 4));
      SSM_TRY(ssm_vk_program_add_copy(*p, next, d->next.offset, v->ring, (size_t)j * 4, 4));
    }
    SSM_TRY(ssm_vk_program_end(*p));
  }
  return NULL;
}

/* ---- the ops ------------------------------------------------------------------- */

static ssm_status write_sampler(vk_backend *v) {
  if (!v->m->decode.has_sampler) return NULL;
  return upload(v, v->m->decode.sampler, v->sampler);
}

static ssm_status vk_reset(ssm_backend *b) {
  vk_backend *v = (vk_backend *)b;
  for (int i = 0; i < v->m->nstates; i++) {
    ssm_region r = v->m->states[i].region;
    SSM_TRY(ssm_vk_buffer_fill(v->vk, v->buffers[r.buffer], r.offset, r.bytes, 0));
  }
  b->position = 0;
  return write_sampler(v);
}

static ssm_status vk_set_sampler(ssm_backend *b, const float *state) {
  vk_backend *v = (vk_backend *)b;
  if (!v->m->decode.has_sampler)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: the bundle's decode program has no sampler",
                          ssm_bundle_name(v->bundle));
  memcpy(v->sampler, state, sizeof v->sampler);
  return write_sampler(v);
}

static ssm_status check_tokens(const ssm_backend *b, const int32_t *tokens, int count) {
  for (int i = 0; i < count; i++)
    if (tokens[i] < 0 || tokens[i] >= b->vocab)
      return ssm_status_new(SSM_ERR_INVALID, "token id %d out of range [0, %lld)", tokens[i],
                            (long long)b->vocab);
  return NULL;
}

static ssm_status upload_pos(vk_backend *v, const ssm_mf_program *p) {
  if (!p->has_pos) return NULL;
  int32_t pos = (int32_t)v->base.position;
  return upload(v, p->pos, &pos);
}

static ssm_status vk_run(ssm_backend *b, const int32_t *tokens, int count, float *logits) {
  vk_backend *v = (vk_backend *)b;
  const ssm_mf_program *p = count == 1 ? &v->m->decode : count == b->chunk ? &v->m->prefill : NULL;
  if (!p)
    return ssm_status_new(SSM_ERR_INVALID, "%s: runs take 1 or %d tokens, not %d",
                          ssm_bundle_name(v->bundle), b->chunk, count);
  SSM_TRY(check_tokens(b, tokens, count));
  if (p->has_pos) SSM_TRY(ssm_backend_check_room(b, count));
  SSM_TRY(upload(v, p->tokens_in, tokens));
  SSM_TRY(upload_pos(v, p));
  SSM_TRY(ssm_vk_program_run(v->vk, count == 1 ? v->decode : v->prefill));
  b->position += count;
  return logits ? download(v, p->output, logits) : NULL;
}

static ssm_status vk_generate(ssm_backend *b, int32_t first, int n, int want_logits,
                              int32_t *out_ids, int *out_count, ssm_step_fn on_step, void *user) {
  vk_backend *v = (vk_backend *)b;
  const ssm_mf_program *d = &v->m->decode;
  if (!d->has_sampler)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: the bundle's decode program has no sampler",
                          ssm_bundle_name(v->bundle));
  SSM_TRY(upload(v, d->tokens_in, &first));
  const int32_t *ring = ssm_vk_buffer_map(v->ring);
  SSM_ASSERT(ring);
  if (want_logits && !v->logits)
    SSM_TRY(ssm_alloc((size_t)b->vocab, sizeof(float), (void **)&v->logits));
  while (*out_count < n) {
    /* one step per submission when someone looks at each, or when the
     * program reads "pos" (uploaded every step) */
    int batch = !on_step && !want_logits && !d->has_pos && n - *out_count >= GEN_BATCH ? GEN_BATCH : 1;
    if (d->has_pos) SSM_TRY(ssm_backend_check_room(b, 1));
    SSM_TRY(upload_pos(v, d));
    SSM_TRY(ssm_vk_program_run(v->vk, batch > 1 ? v->genk : v->gen1));
    b->position += batch;
    for (int j = 0; j < batch; j++) {
      int32_t id = ring[j];
      if (id == -1) return ssm_sampler_nonfinite(b->position - batch + j);
      if (id < 0 || id >= b->vocab)
        return ssm_status_new(SSM_ERR_DEVICE, "the sampler drew token id %d, outside [0, %lld)",
                              id, (long long)b->vocab);
      out_ids[(*out_count)++] = id;
      if (want_logits) SSM_TRY(download(v, d->output, v->logits));
      if (on_step && on_step(id, want_logits ? v->logits : NULL, user)) return NULL;
    }
  }
  return NULL;
}

static ssm_status vk_state_read(ssm_backend *b, int i, void *dst) {
  vk_backend *v = (vk_backend *)b;
  return download(v, v->m->states[i].region, dst);
}

static ssm_status vk_state_write(ssm_backend *b, int i, const void *src) {
  vk_backend *v = (vk_backend *)b;
  return upload(v, v->m->states[i].region, src);
}

/* With validation on, any message of the validation layer is an error. */
static ssm_status vk_check(ssm_backend *b) {
  ssm_vk *vk = ((vk_backend *)b)->vk;
  if (!ssm_vk_validation_enabled(vk)) return NULL;
  int e = ssm_vk_validation_errors(vk), w = ssm_vk_validation_warnings(vk);
  if (!e && !w) return NULL;
  const char *first = ssm_vk_validation_message(vk, 0);
  return ssm_status_new(SSM_ERR_DEVICE, "the Vulkan validation layer reported %d errors and %d "
                        "warnings; first: %s", e, w, first ? first : "?");
}

static ssm_status vk_profile(ssm_backend *b, int prefill, int runs, ssm_step_time **out,
                             int *out_n) {
  vk_backend *v = (vk_backend *)b;
  const ssm_mf_program *p = prefill ? &v->m->prefill : &v->m->decode;
  *out = NULL;
  *out_n = 0;
  if (!v->timed[prefill]) {
    SSM_TRY(ssm_vk_program_create(v->vk, &v->timed[prefill]));
    SSM_TRY(ssm_vk_program_profile(v->timed[prefill]));
    SSM_TRY(record_steps(v, p, v->timed[prefill]));
    SSM_TRY(ssm_vk_program_end(v->timed[prefill]));
  }
  int32_t *tokens = ssm_xcalloc((size_t)p->tokens, sizeof *tokens);
  for (int i = 0; i < p->tokens; i++) tokens[i] = (int32_t)((i * 7919 + 1) % b->vocab);
  ssm_step_time *t = ssm_xcalloc((size_t)p->nsteps + 1, sizeof *t);
  double *us = ssm_xcalloc((size_t)p->nsteps + 1, sizeof *us);
  ssm_status s = vk_reset(b);
  for (int r = 0; r < runs && !s; r++) {
    if (p->has_pos && b->position + p->tokens > b->max_seq) s = vk_reset(b);
    if (!s) s = upload(v, p->tokens_in, tokens);
    if (!s) s = upload_pos(v, p);
    if (!s) s = ssm_vk_program_run(v->vk, v->timed[prefill]);
    if (!s) s = ssm_vk_program_times(v->vk, v->timed[prefill], us);
    b->position += p->tokens;
    for (int i = 0; i < p->nsteps && !s; i++) t[i].us += us[i] / runs;
  }
  for (int i = 0; i < p->nsteps; i++) {
    const ssm_mf_step *st = &p->steps[i];
    t[i].kernel = v->m->kernels[st->kernel].name;
    t[i].family = v->m->kernels[st->kernel].family;
    t[i].op = st->op;
    for (int k = 0; k < st->nbindings; k++) t[i].bytes += st->bindings[k].bytes;
  }
  free(tokens);
  free(us);
  if (!s) s = vk_reset(b);
  if (s) {
    free(t);
    return s;
  }
  *out = t;
  *out_n = p->nsteps;
  return NULL;
}

static void vk_close(ssm_backend *b) {
  vk_backend *v = (vk_backend *)b;
  if (v->vk) {
    ssm_vk_program_destroy(v->vk, v->timed[0]);
    ssm_vk_program_destroy(v->vk, v->timed[1]);
    ssm_vk_program_destroy(v->vk, v->decode);
    ssm_vk_program_destroy(v->vk, v->prefill);
    ssm_vk_program_destroy(v->vk, v->gen1);
    ssm_vk_program_destroy(v->vk, v->genk);
    ssm_vk_buffer_destroy(v->vk, v->ring);
    for (int i = 0; v->kernels && i < v->m->nkernels; i++) ssm_vk_kernel_destroy(v->vk, v->kernels[i]);
    for (int i = 0; i < v->m->nbuffers; i++) ssm_vk_buffer_destroy(v->vk, v->buffers[i]);
    ssm_vk_close(v->vk);
  }
  free(v->kernels);
  free(v->states);
  free(v->logits);
  ssm_bundle_close(v->bundle);
  free(v);
}

static const ssm_backend_ops vk_ops = {"vulkan",      vk_close,       vk_run,       vk_reset,
                                       vk_set_sampler, vk_generate,    vk_state_read, vk_state_write,
                                       vk_check,      vk_profile};

ssm_status ssm_vk_backend_open(ssm_bundle *bundle, const char *weights,
                               const ssm_vk_backend_opts *opts, ssm_backend **out) {
  *out = NULL;
  vk_backend *v = ssm_xcalloc(1, sizeof *v);
  v->bundle = bundle;
  v->m = ssm_bundle_manifest(bundle);
  ssm_backend *b = &v->base;
  const ssm_manifest *m = v->m;
  *b = (ssm_backend){.ops = &vk_ops, .vocab = m->vocab, .chunk = m->prefill.tokens,
                     .max_seq = m->max_seq, .eos = m->eos, .arch = m->architecture,
                     .weight_bytes = ssm_manifest_weight_bytes(m), .dtype = m->dtype,
                     .nstates = m->nstates};
  v->states = ssm_xcalloc((size_t)m->nstates + 1, sizeof *v->states);
  for (int i = 0; i < m->nstates; i++)
    v->states[i] = (ssm_backend_state){m->states[i].name, m->states[i].type};
  b->states = v->states;
  ssm_st *st = NULL;
  ssm_status s = ssm_sampler_state(0, 0, 1, 0, v->sampler);
  if (!s) s = ssm_st_open(weights, &st);
  if (!s) s = check_weights(m, st);
  if (!s) s = ssm_vk_open(opts ? opts->device : -1, opts ? opts->validation : 0, &v->vk);
  if (!s) b->device = ssm_vk_info(v->vk)->name;
  for (int i = 0; i < m->nbuffers && !s; i++)
    s = ssm_vk_buffer_create(v->vk, (size_t)m->buffers[i].bytes, SSM_VK_BUFFER_DEVICE,
                             &v->buffers[i]);
  if (!s) s = upload_weights(v, st);
  ssm_st_close(st);
  if (!s) s = vk_reset(b);
  if (!s) s = load_kernels(v);
  if (!s) s = record(v, &m->decode, &v->decode);
  if (!s) s = record(v, &m->prefill, &v->prefill);
  if (!s) s = record_generate(v);
  if (s) {
    vk_close(b);
    return s;
  }
  *out = b;
  return NULL;
}

ssm_vk *ssm_vk_backend_device(ssm_backend *b) {
  SSM_ASSERT(b->ops == &vk_ops);
  return ((vk_backend *)b)->vk;
}
