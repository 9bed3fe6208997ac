/*
 * exec.c — the Vulkan backend: a compiled bundle running on a device.
 *
 * Open: one device buffer per manifest buffer; the weights uploaded from
 * safetensors (converted to the manifest's dtype and transformed at load);
 * zeroed state; one pipeline per kernel; each program recorded once into a
 * command buffer. The manifest was checked when the bundle was read, so
 * only what depends on the device is checked here (offset alignment).
 * Run: one submission: the program copies the token ids (and the position,
 * when it reads the input "pos") from a host-visible buffer (io), runs, and
 * copies its logits to another (out) when they are wanted.
 * Generate: GEN_BATCH decode steps per submission (or 1 for the last few),
 * each followed by copies of the id its sampler drew into its own input and
 * into io, so tokens stay on the device; two submissions are in flight
 * (halves 0 and 1 of io and out), so the device never waits for the host.
 * The host hands ids (and logits) to its caller a batch at a time. When the
 * caller stops early, the steps run past the stop are undone: each batch
 * first copies the state buffers aside, and the stop restores the copy of
 * its batch and replays the steps up to the stop.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/vulkan/vulkan.h"

/* Decode steps queued in one submission by generate. */
#define GEN_BATCH 8

/* io, in int32 words: the run's tokens (chunk of them) and its position;
 * then, from byte gen_at, generate's slots (GEN_*), which the device buffer
 * `slots` mirrors at the same offsets. */
#define IO_POS(v) ((v)->chunk_words)

/* Generate's slots, one u32 each at a stride of the storage-buffer
 * alignment (each is bound on its own): the input of a batch's first step,
 * then per half the positions and the drawn ids of its steps. A step's
 * kernels read its token from the slot the step before drew into (the
 * first step from GEN_IN), its position from its slot, and the sampler
 * draws into the step's slot: no copy between steps. A batch copies its
 * positions in at its start, and its ids out and its last id to GEN_IN at
 * its end. */
#define GEN_IN 0
#define GEN_POS(h, j) (1 + (h) * GEN_BATCH + (j))
#define GEN_ID(h, j) (1 + 2 * GEN_BATCH + (h) * GEN_BATCH + (j))
#define GEN_SLOTS (1 + 4 * GEN_BATCH)

typedef struct {
  ssm_backend base;
  ssm_bundle *bundle;
  const ssm_manifest *m;
  ssm_vk *vk;
  ssm_vk_buffer *buffers[SSM_BUNDLE_MAX_BUFFERS];
  ssm_vk_kernel **kernels;
  /* per kernel: the kernel that makes its cooperative-matrix variant's x
   * ready (NULL without), and the scratch they share (scratch_bytes) */
  ssm_vk_kernel **preps;
  ssm_vk_buffer *scratch;
  unsigned char *counted; /* per kernel: gets the run's token count (record_steps) */
  ssm_vk_buffer *io;  /* host-visible: inputs and drawn ids (IO_*, GEN_*) */
  ssm_vk_buffer *slots; /* device: generate's slots (GEN_*), at their io offsets less gen_at */
  size_t gen_at, slot;  /* io's first slot, in bytes; the bytes between slots */
  ssm_vk_buffer *out; /* host-visible: logits rows (a decode run: row 0; generate: half*GEN_BATCH + step) */
  ssm_vk_buffer *run_out; /* host-visible: a prefill run's logits rows (made on first use) */
  size_t chunk_words;
  ssm_vk_buffer *backup[2][SSM_BUNDLE_MAX_BUFFERS]; /* state buffers as a batch of half h began */
  ssm_vk_program *run[2][2];       /* [prefill][logits copied out] */
  ssm_vk_buffer *feed_io;          /* host-visible: feed's chunks of ids, then their positions */
  ssm_vk_program *feed[SSM_FEED_CHUNKS + 1]; /* feed[k]: k whole chunks (made on first use) */
  ssm_vk_program *gen[2][2][2];    /* [GEN_BATCH steps (else 1)][half][logits copied out] */
  ssm_vk_program *restore[2];      /* backup[h] back into the state buffers */
  float sampler[SSM_SAMPLER_STATE_LEN]; /* the settings; written with step 0 */
  ssm_backend_state *states;
  ssm_vk_program *timed[3];    /* decode, prefill and batch with timestamps (made on first profile) */
  int *timed_step[3], timed_ops[3]; /* the step of each of their dispatches; how many */
  ssm_vk_buffer *bio;          /* host-visible: the batch program's ids (batch_generate) */
  ssm_vk_program *bgen[2];     /* BGEN_STEPS (else 1) steps of the batch program */
  uint64_t window;             /* bytes of a storage window of split tensors (fit_bindings) */
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

/* Storage bindings of kernel k: its tensors' windows (codegen.h). */
static int kernel_bindings(const ssm_mf_kernel *k) {
  int n = 0;
  for (int b = 0; b < k->nbindings; b++) n += k->glsl_windows[b];
  return n;
}

/* Whether the cooperative-matrix variants of kernels run: where the device
 * has cooperative matrices, unless env SSM_VK_COOPMAT=0 turns them off. */
static int coop_kernels(const vk_backend *v) {
  const char *env = getenv("SSM_VK_COOPMAT");
  return (ssm_vk_features(v->vk) & SSM_VK_COOPMAT) && !(env && !strcmp(env, "0"));
}

/* Kernels with a cooperative-matrix variant run it where the device has
 * cooperative matrices (where they exist it is the faster GEMM: docs/
 * performance.md), unless env SSM_VK_COOPMAT=0 asks for the portable
 * kernels; a variant with a prep kernel binds the scratch after its
 * windows, as the prep kernel does (record_steps_but). */
static ssm_status load_kernels(vk_backend *v) {
  SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)v->m->nkernels + 1, sizeof *v->kernels, (void **)&v->kernels),
                          "the kernels"));
  SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)v->m->nkernels + 1, sizeof *v->preps, (void **)&v->preps),
                          "the kernels"));
  /* the prefill program's kernels take the run's token count (those that
   * need it read it); the others get no push constant, so that decode
   * records none (lavapipe's memory grows with every push it replays) */
  SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)v->m->nkernels + 1, 1, (void **)&v->counted), "the kernels"));
  for (int i = 0; v->m->prefill.any_count && i < v->m->prefill.nsteps; i++)
    v->counted[v->m->prefill.steps[i].kernel] = 1;
  _Static_assert(SSM_BUNDLE_GLSL_WINDOW_ID == 0, "the window is specialization constant 0");
  uint32_t window_words = (uint32_t)(v->window / 4);
  int coop = coop_kernels(v);
  for (int i = 0; i < v->m->nkernels; i++) {
    const ssm_mf_kernel *k = &v->m->kernels[i];
    int n = kernel_bindings(k);
    ssm_blob spirv = coop && k->spirv_coop.size ? k->spirv_coop : k->spirv;
    int prep = coop && k->spirv_prep.size;
    ssm_vk_kernel_desc d = {.name = k->name, .spirv = ssm_bundle_blob(v->bundle, spirv),
                            .words = (size_t)spirv.size / 4, .n_bindings = n + prep,
                            .spec_values = &window_words, .n_spec = n > k->nbindings,
                            .push_bytes = v->counted[i] ? SSM_BUNDLE_RUN_PUSH_BYTES : 0};
    SSM_TRY(ssm_vk_kernel_create_desc(v->vk, &d, &v->kernels[i]));
    if (!prep) continue;
    d.spirv = ssm_bundle_blob(v->bundle, k->spirv_prep);
    d.words = (size_t)k->spirv_prep.size / 4;
    SSM_TRY(ssm_vk_kernel_create_desc(v->vk, &d, &v->preps[i]));
  }
  return NULL;
}

/* The bytes of the scratch that the prep kernels share where the
 * cooperative-matrix kernels run (`coop`), 0 elsewhere: their largest need,
 * at a multiple of 256, then the counters (bundle/abi.h), which start at
 * *counters_at. */
static uint64_t scratch_bytes(const ssm_manifest *m, int coop, uint64_t *counters_at) {
  uint64_t need = 0;
  for (int i = 0; coop && i < m->nkernels; i++)
    if (m->kernels[i].spirv_prep.size && m->kernels[i].scratch_bytes > need)
      need = m->kernels[i].scratch_bytes;
  need = (need + 255) & ~(uint64_t)255;
  if (counters_at) *counters_at = need;
  return need ? need + SSM_SCRATCH_COUNTERS * 4 : 0;
}

/* The weight or state at region r, or NULL (activations). */
static const char *tensor_at(const ssm_manifest *m, const ssm_region *r) {
  for (int i = 0; i < m->nweights; i++)
    if (m->weights[i].region.buffer == r->buffer && m->weights[i].region.offset == r->offset)
      return m->weights[i].name;
  for (int i = 0; i < m->nstates; i++)
    if (m->states[i].region.buffer == r->buffer && m->states[i].region.offset == r->offset)
      return m->states[i].name;
  return NULL;
}

static double mib(uint64_t bytes) { return (double)bytes / (1 << 20); }

/* Binding b of step st cannot be bound on this device: the error names the
 * tensor, the limit and the ways out. */
static ssm_status too_large(vk_backend *v, const ssm_mf_step *st, int b) {
  const ssm_mf_kernel *k = &v->m->kernels[st->kernel];
  const ssm_region *r = &st->bindings[b];
  const char *name = tensor_at(v->m, r);
  const ssm_vk_device_info *d = ssm_vk_info(v->vk);
  int writes = b == 0 || v->m->buffers[r->buffer].usage == SSM_BUFFER_STATE ||
               v->m->buffers[r->buffer].usage == SSM_BUFFER_SLOTS;
  char how[128];
  if (writes) snprintf(how, sizeof how, "writes it, so it cannot be split into windows");
  else snprintf(how, sizeof how, "reads it through %d window(s) of at most %llu bytes",
                k->glsl_windows[b], (unsigned long long)v->window);
  return ssm_status_new(
      SSM_ERR_UNSUPPORTED,
      "%s: %s%s%s (%llu bytes, %.1f MiB) does not fit device '%s': one binding holds at most "
      "%llu bytes (maxStorageBufferRange) and kernel %s %s; run it with --backend cpu%s",
      ssm_bundle_name(v->bundle), name ? "tensor '" : "an activation of kernel ",
      name ? name : k->name, name ? "'" : "", (unsigned long long)r->bytes, mib(r->bytes), d->name,
      (unsigned long long)d->max_storage_buffer_range, k->name,
      how, writes ? "" : ", or compile the bundle with --wgsl-window at most that limit");
}

/* Device buffer i of the manifest's, unless it is there; a refused one
 * names its largest tensor (or what the buffer is) and the way out. */
static ssm_status make_buffer(vk_backend *v, int i) {
  const ssm_manifest *m = v->m;
  if (v->buffers[i]) return NULL;
  ssm_status s = ssm_vk_buffer_create(v->vk, (size_t)m->buffers[i].bytes, SSM_VK_BUFFER_DEVICE,
                                      &v->buffers[i]);
  if (!s) return NULL;
  ssm_status e;
  if (m->buffers[i].usage == SSM_BUFFER_OUTPUT) {
    e = ssm_status_new(ssm_status_code(s), "%s: the prefill program's logits of every row "
                       "(%.1f MiB) do not fit device '%s': %s; compile the bundle with a smaller "
                       "--chunk, or run it with --backend cpu", ssm_bundle_name(v->bundle),
                       mib(m->buffers[i].bytes), ssm_vk_info(v->vk)->name, ssm_status_message(s));
  } else {
    const ssm_mf_tensor *big = NULL;
    for (int k = 0; k < m->nweights + m->nstates; k++) {
      const ssm_mf_tensor *t = k < m->nweights ? &m->weights[k] : &m->states[k - m->nweights];
      if (t->region.buffer == i && (!big || t->region.bytes > big->region.bytes)) big = t;
    }
    e = ssm_status_new(ssm_status_code(s), "%s: the buffer holding %s%s%s (%.1f MiB) "
                       "does not fit device '%s': %s; run it with --backend cpu",
                       ssm_bundle_name(v->bundle), big ? "tensor '" : "activations",
                       big ? big->name : "", big ? "'" : "", mib(m->buffers[i].bytes),
                       ssm_vk_info(v->vk)->name, ssm_status_message(s));
  }
  ssm_status_free(s);
  return e;
}

/* The device buffers of the manifest's but an output apart, which is made
 * when a program that binds it is first recorded (record_steps_but): only a
 * run that asks for a prefill's logits needs it. */
static ssm_status make_buffers(vk_backend *v) {
  for (int i = 0; i < v->m->nbuffers; i++)
    if (v->m->buffers[i].usage != SSM_BUFFER_OUTPUT) SSM_TRY(make_buffer(v, i));
  return NULL;
}

/* Whether the bundle's buffers together fit the device's memory (an output
 * apart is made only when asked for: make_buffer says when it does not fit),
 * with the scratch of the cooperative-matrix kernels' prep kernels where
 * they run (scratch_bytes). */
static ssm_status fit_memory(vk_backend *v) {
  const ssm_vk_device_info *d = ssm_vk_info(v->vk);
  const ssm_manifest *m = v->m;
  uint64_t total = 0, largest = 0, scratch = 0;
  for (int i = 0; i < m->nbuffers; i++) {
    if (m->buffers[i].usage == SSM_BUFFER_OUTPUT) continue;
    total += m->buffers[i].bytes;
    if (m->buffers[i].bytes > largest) largest = m->buffers[i].bytes;
  }
  scratch = scratch_bytes(m, coop_kernels(v), NULL);
  total += scratch;
  if (scratch > largest) largest = scratch;
  /* one buffer beyond the device's limits: ssm_vk_buffer_create names the
   * limit (make_buffers) */
  if (d->device_local_bytes && largest <= d->device_local_bytes && total > d->device_local_bytes)
    return ssm_status_new(SSM_ERR_DEVICE, "%s: the model needs %.1f MiB of device memory "
                          "(%.1f MiB of weights), more than device '%s' has (%.1f MiB, its "
                          "largest device-local heap); run it with --backend cpu",
                          ssm_bundle_name(v->bundle), mib(total), mib(ssm_manifest_weight_bytes(m)),
                          d->name, mib(d->device_local_bytes));
  return NULL;
}

/* Every binding of every dispatch fits the windows its kernel splits it
 * into (codegen.h), the window being the largest power of two within the
 * device's maxStorageBufferRange (read now, not assumed). */
static ssm_status fit_bindings(vk_backend *v) {
  const ssm_manifest *m = v->m;
  uint64_t range = ssm_vk_info(v->vk)->max_storage_buffer_range;
  v->window = 256;
  while (v->window * 2 <= range && v->window < ((uint64_t)1 << 31)) v->window *= 2;
  const ssm_mf_program *progs[3] = {&m->decode, &m->prefill, &m->batch};
  for (int p = 0; p < 3; p++)
    for (int i = 0; i < progs[p]->nsteps; i++) {
      const ssm_mf_step *st = &progs[p]->steps[i];
      for (int b = 0; b < st->nbindings; b++) {
        uint64_t bytes = (st->bindings[b].bytes + 3) & ~(uint64_t)3;
        int n = m->kernels[st->kernel].glsl_windows[b];
        if (n == 1 ? bytes > range : bytes > (uint64_t)n * v->window) return too_large(v, st, b);
      }
    }
  return NULL;
}

/* A region bound elsewhere by the steps recorded (generate's slots): in
 * every step, or (family) only in the steps of that kernel template. */
typedef struct {
  ssm_region from;
  const char *family;
  ssm_vk_binding to;
} vk_rebind;

static int same_region(const ssm_region *a, const ssm_region *b) {
  return a->buffer == b->buffer && a->offset == b->offset && a->bytes == b->bytes;
}

/* The dispatches of p's first nsteps steps but those of kernel template
 * `skip` (NULL: none), with the nre regions of `re` bound where they say;
 * with a bundle whose prefill runs may take fewer tokens, the prefill
 * program's kernels get `count` (the run's tokens) as their push constant
 * (load_kernels). A step whose kernel has a prep kernel (load_kernels) is
 * two dispatches. With op_step, op_step[*nops..] gets the step of each
 * dispatch recorded, *nops counting them. */
static ssm_status record_steps_but(vk_backend *v, const ssm_mf_program *p, int nsteps,
                                   uint32_t count, const char *skip, const vk_rebind *re,
                                   int nre, ssm_vk_program *prog, int *op_step, int *nops) {
  size_t align = ssm_vk_storage_alignment(v->vk);
  for (int i = 0; i < nsteps; i++) {
    const ssm_mf_step *st = &p->steps[i];
    const char *family = v->m->kernels[st->kernel].family;
    if (skip && !strcmp(family, skip)) continue;
    ssm_vk_binding vb[SSM_BUNDLE_GLSL_MAX_BINDINGS];
    int extra = st->nbindings;
    for (int b = 0; b < st->nbindings; b++) {
      const ssm_region *r = &st->bindings[b];
      int to = -1;
      for (int k = 0; k < nre && to < 0; k++)
        if (same_region(r, &re[k].from) && (!re[k].family || !strcmp(re[k].family, family)))
          to = k;
      if (to >= 0) {
        vb[b] = re[to].to;
        continue;
      }
      SSM_TRY(make_buffer(v, r->buffer));
      if (r->offset % align)
        return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: a binding offset (%llu) is not a "
                              "multiple of this device's minStorageBufferOffsetAlignment (%zu)",
                              ssm_bundle_name(v->bundle), (unsigned long long)r->offset, align);
      /* whole u32 words: 16-bit tensors are read two elements to a word, and
       * regions start on `align` boundaries, so the padding is there */
      size_t bytes = ((size_t)r->bytes + 3) & ~(size_t)3;
      int n = v->m->kernels[st->kernel].glsl_windows[b];
      if (n == 1) {
        vb[b] = (ssm_vk_binding){v->buffers[r->buffer], (size_t)r->offset, bytes};
        continue;
      }
      /* windows past the tensor's end (the device's are larger than the
       * bundle's) are never read: they repeat the first */
      for (int w = 0; w < n; w++) {
        size_t at = (size_t)v->window * (size_t)w;
        if (at >= bytes) at = 0;
        size_t left = bytes - at;
        vb[w ? extra++ : b] = (ssm_vk_binding){v->buffers[r->buffer], (size_t)r->offset + at,
                                               left < v->window ? left : (size_t)v->window};
      }
    }
    const uint32_t *push = v->counted[st->kernel] ? &count : NULL;
    ssm_vk_kernel *prep = v->preps[st->kernel];
    if (prep) {
      /* x into the scratch, behind whatever wrote x or read the scratch
       * last, then the GEMM behind it */
      const uint32_t *g = v->m->kernels[st->kernel].prep_groups;
      /* every kernel binds all of it: a GEMM split over k finds the
       * counters at its end (bundle/abi.h), zero from the start */
      uint64_t at, bytes = scratch_bytes(v->m, 1, &at);
      if (!v->scratch) {
        SSM_TRY(ssm_status_wrap(ssm_vk_buffer_create(v->vk, (size_t)bytes, SSM_VK_BUFFER_DEVICE,
                                                     &v->scratch),
                                "%s: the cooperative-matrix kernels' scratch (%.1f MiB)",
                                ssm_bundle_name(v->bundle), (double)bytes / (1 << 20)));
        SSM_TRY(ssm_vk_buffer_fill(v->vk, v->scratch, (size_t)at, (size_t)(bytes - at), 0));
      }
      vb[extra] = (ssm_vk_binding){v->scratch, 0, (size_t)bytes};
      ssm_vk_program_add_barrier(prog);
      SSM_TRY(ssm_vk_program_add_dispatch(prog, prep, vb, push, g[0], g[1], g[2]));
      if (op_step) op_step[(*nops)++] = i;
    }
    if (st->barrier || prep) ssm_vk_program_add_barrier(prog);
    /* a variant with a prep kernel may have a grid of its own */
    const uint32_t *cg = v->m->kernels[st->kernel].coop_groups;
    const uint32_t *grid = prep && cg[0] ? cg : st->groups;
    SSM_TRY(ssm_vk_program_add_dispatch(prog, v->kernels[st->kernel], vb, push, grid[0], grid[1],
                                        grid[2]));
    if (op_step) op_step[(*nops)++] = i;
  }
  return NULL;
}

static ssm_status record_steps(vk_backend *v, const ssm_mf_program *p, int nsteps,
                               uint32_t count, ssm_vk_program *prog) {
  return record_steps_but(v, p, nsteps, count, NULL, NULL, 0, prog, NULL, NULL);
}

static ssm_status add_copy(ssm_vk_program *p, ssm_vk_buffer *src, size_t src_ofs,
                           ssm_vk_buffer *dst, size_t dst_ofs, size_t bytes) {
  return ssm_vk_program_add_copy(p, src, src_ofs, dst, dst_ofs, bytes);
}

/* The bytes of `count` rows of p's logits. */
static size_t rows_bytes(const ssm_mf_program *p, int count) {
  return (size_t)p->output.bytes / (size_t)p->tokens * (size_t)count;
}

/* A run of `count` tokens of the prefill (or decode) program into `out`:
 * io's tokens (and position) in, the steps, the count rows of logits out;
 * without logits, only the steps that update the state. */
static ssm_status record_count(vk_backend *v, int prefill, int logits, int count,
                               ssm_vk_program **out) {
  const ssm_mf_program *p = prefill ? &v->m->prefill : &v->m->decode;
  SSM_TRY(ssm_vk_program_create(v->vk, out));
  SSM_TRY(add_copy(*out, v->io, 0, v->buffers[p->tokens_in.buffer], (size_t)p->tokens_in.offset,
                   (size_t)p->tokens_in.bytes));
  if (p->has_pos)
    SSM_TRY(add_copy(*out, v->io, IO_POS(v) * 4, v->buffers[p->pos.buffer], (size_t)p->pos.offset, 4));
  /* a run feeds tokens and does not draw: the sampler's step counts
   * generated tokens only, however a prompt was split into runs */
  SSM_TRY(record_steps_but(v, p, logits ? p->nsteps : ssm_manifest_state_steps(v->m, p),
                           (uint32_t)count, "sample", NULL, 0, *out, NULL, NULL));
  if (logits && prefill && !v->run_out) {
    SSM_TRY(ssm_vk_buffer_create(v->vk, rows_bytes(p, p->tokens), SSM_VK_BUFFER_HOST, &v->run_out));
    if (!ssm_vk_buffer_map(v->run_out)) { /* not kept: the next run would read through it */
      ssm_vk_buffer_destroy(v->vk, v->run_out);
      v->run_out = NULL;
      return ssm_status_new(SSM_ERR_UNSUPPORTED, "device '%s': host-visible buffers cannot be "
                            "mapped", ssm_vk_info(v->vk)->name);
    }
  }
  if (logits)
    SSM_TRY(add_copy(*out, v->buffers[p->output.buffer], (size_t)p->output.offset,
                     prefill ? v->run_out : v->out, 0, rows_bytes(p, count)));
  return ssm_vk_program_end(*out);
}

/* run[prefill][logits]: a whole run of the program, recorded once. */
static ssm_status record_run(vk_backend *v, int prefill, int logits) {
  if (v->run[prefill][logits]) return NULL;
  const ssm_mf_program *p = prefill ? &v->m->prefill : &v->m->decode;
  ssm_status s = record_count(v, prefill, logits, p->tokens, &v->run[prefill][logits]);
  if (s) { /* not kept half-recorded */
    ssm_vk_program_destroy(v->vk, v->run[prefill][logits]);
    v->run[prefill][logits] = NULL;
  }
  return s;
}

/* feed[k]: k whole prefill runs without logits, each with its ids (and
 * position) copied from feed_io: chunk c's ids at word c * chunk, its
 * position at word SSM_FEED_CHUNKS * chunk + c. */
static ssm_status record_feed(vk_backend *v, int k) {
  const ssm_mf_program *p = &v->m->prefill;
  size_t chunk = (size_t)p->tokens;
  if (!v->feed_io) {
    SSM_TRY(ssm_vk_buffer_create(v->vk, SSM_FEED_CHUNKS * (chunk + 1) * 4, SSM_VK_BUFFER_HOST,
                                 &v->feed_io));
    if (!ssm_vk_buffer_map(v->feed_io))
      return ssm_status_new(SSM_ERR_UNSUPPORTED, "device '%s': host-visible buffers cannot be "
                            "mapped", ssm_vk_info(v->vk)->name);
  }
  ssm_vk_program *f;
  SSM_TRY(ssm_vk_program_create(v->vk, &f));
  ssm_status s = NULL;
  for (int c = 0; c < k && !s; c++) {
    s = add_copy(f, v->feed_io, (size_t)c * chunk * 4, v->buffers[p->tokens_in.buffer],
                 (size_t)p->tokens_in.offset, (size_t)p->tokens_in.bytes);
    if (!s && p->has_pos)
      s = add_copy(f, v->feed_io, (SSM_FEED_CHUNKS * chunk + (size_t)c) * 4,
                   v->buffers[p->pos.buffer], (size_t)p->pos.offset, 4);
    if (!s)
      s = record_steps_but(v, p, ssm_manifest_state_steps(v->m, p), (uint32_t)chunk, "sample",
                           NULL, 0, f, NULL, NULL);
  }
  if (!s) s = ssm_vk_program_end(f);
  if (s) {
    ssm_vk_program_destroy(v->vk, f);
    return s;
  }
  v->feed[k] = f;
  return NULL;
}

/* Generate's slot i in `slots`, bound alone. */
static ssm_vk_binding slot_binding(const vk_backend *v, int i) {
  return (ssm_vk_binding){v->slots, (size_t)i * v->slot, 4};
}

/* io's copy of slot i. */
static int32_t *io_slot(const vk_backend *v, int i) {
  return (int32_t *)((char *)ssm_vk_buffer_map(v->io) + v->gen_at + (size_t)i * v->slot);
}

/* gen[batch][h][logits]: a batch of decode steps in half h, each drawing the
 * next step's token on the device: the state buffers copied aside into
 * backup[h], the steps' positions in, the steps (and each one's logits into
 * out), then the ids out and the last into GEN_IN. The kernels read and
 * write generate's slots (GEN_*) in place of the program's tokens, position
 * and drawn id: between steps there is a barrier and no copy. Two copies a
 * step (its id to the next step's input and to io) would cost 9-17 us a
 * token on a fast GPU (`ssmc bench -n 256`, decode fed back: 2% to 4% of
 * the tokens a second of mamba-130m, mamba-1.4b and falcon-mamba-7b), for
 * the same ids. */
static ssm_status record_gen(vk_backend *v, int batch, int h, int logits) {
  const ssm_mf_program *d = &v->m->decode;
  ssm_vk_program **p = &v->gen[batch][h][logits];
  if (*p) return NULL;
  SSM_TRY(ssm_vk_program_create(v->vk, p));
  for (int i = 0; i < v->m->nbuffers; i++)
    if (v->backup[h][i])
      SSM_TRY(add_copy(*p, v->buffers[i], 0, v->backup[h][i], 0, (size_t)v->m->buffers[i].bytes));
  int steps = batch ? GEN_BATCH : 1;
  size_t span = (size_t)(steps - 1) * v->slot + 4; /* a half's slots of `steps` steps */
  if (d->has_pos)
    SSM_TRY(add_copy(*p, v->io, v->gen_at + GEN_POS(h, 0) * v->slot, v->slots,
                     GEN_POS(h, 0) * v->slot, span));
  size_t row = (size_t)d->output.bytes;
  for (int j = 0; j < steps; j++) {
    vk_rebind re[3] = {{d->tokens_in, NULL, slot_binding(v, j ? GEN_ID(h, j - 1) : GEN_IN)},
                       {d->next, "sample", slot_binding(v, GEN_ID(h, j))},
                       {d->pos, NULL, slot_binding(v, GEN_POS(h, j))}};
    if (j) ssm_vk_program_add_barrier(*p); /* the step before drew its token */
    SSM_TRY(record_steps_but(v, d, d->nsteps, 1, NULL, re, d->has_pos ? 3 : 2, *p, NULL, NULL));
    if (logits)
      SSM_TRY(add_copy(*p, v->buffers[d->output.buffer], (size_t)d->output.offset, v->out,
                       (size_t)(h * GEN_BATCH + j) * row, row));
  }
  SSM_TRY(add_copy(*p, v->slots, GEN_ID(h, steps - 1) * v->slot, v->slots, GEN_IN * v->slot, 4));
  SSM_TRY(add_copy(*p, v->slots, GEN_ID(h, 0) * v->slot, v->io, v->gen_at + GEN_ID(h, 0) * v->slot,
                   span));
  return ssm_vk_program_end(*p);
}

/* The host-visible buffers of run and generate (a prefill run's logits have
 * theirs, made when first asked for: record_count). Programs are recorded
 * when first used (record_run, record_gen, gen_prepare). */
static ssm_status make_io(vk_backend *v) {
  const ssm_manifest *m = v->m;
  int chunk = m->prefill.tokens > 1 ? m->prefill.tokens : 1;
  v->chunk_words = (size_t)chunk;
  v->slot = ssm_vk_storage_alignment(v->vk);
  if (v->slot < 4) v->slot = 4;
  v->gen_at = ((v->chunk_words + 1) * 4 + v->slot - 1) / v->slot * v->slot;
  SSM_TRY(ssm_vk_buffer_create(v->vk, v->gen_at + GEN_SLOTS * v->slot, SSM_VK_BUFFER_HOST, &v->io));
  SSM_TRY(ssm_vk_buffer_create(v->vk, GEN_SLOTS * v->slot, SSM_VK_BUFFER_DEVICE, &v->slots));
  SSM_TRY(ssm_vk_buffer_create(v->vk, 2 * GEN_BATCH * (size_t)m->decode.output.bytes,
                               SSM_VK_BUFFER_HOST, &v->out));
  if (!ssm_vk_buffer_map(v->io) || !ssm_vk_buffer_map(v->out))
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "device '%s': host-visible buffers cannot be "
                          "mapped", ssm_vk_info(v->vk)->name);
  return NULL;
}

/* What generate needs: the copies of the state buffers and the programs
 * that restore them (once), and the gen programs with or without logits. */
static ssm_status gen_prepare(vk_backend *v, int logits) {
  const ssm_manifest *m = v->m;
  for (int h = 0; h < 2 && !v->restore[h]; h++) {
    ssm_vk_program *r;
    SSM_TRY(ssm_vk_program_create(v->vk, &r));
    ssm_status s = NULL;
    for (int i = 0; i < m->nbuffers && !s; i++) {
      if (m->buffers[i].usage != SSM_BUFFER_STATE) continue;
      s = ssm_vk_buffer_create(v->vk, (size_t)m->buffers[i].bytes, SSM_VK_BUFFER_DEVICE,
                               &v->backup[h][i]);
      if (!s) s = add_copy(r, v->backup[h][i], 0, v->buffers[i], 0, (size_t)m->buffers[i].bytes);
    }
    if (!s) s = ssm_vk_program_end(r);
    if (s) {
      ssm_vk_program_destroy(v->vk, r);
      return s;
    }
    v->restore[h] = r;
  }
  for (int h = 0; h < 2; h++)
    for (int batch = 0; batch < 2; batch++) SSM_TRY(record_gen(v, batch, h, logits));
  return NULL;
}

/* ---- the batch program (ssm_manifest.batch) -------------------------------------- */

/* Steps of the batch program in one submission of batch_generate. */
#define BGEN_STEPS 8

/* bgen[many]: BGEN_STEPS steps (else 1) of the batch program: bio's first
 * row of ids in, then each step, its drawn ids copied into its own input
 * and into bio's row 1 + j. A program that reads positions takes step j's
 * from bio's row BGEN_STEPS + 1 + j (a position a slot). */
static ssm_status record_bgen(vk_backend *v, int many) {
  const ssm_mf_program *p = &v->m->batch;
  ssm_vk_program **out = &v->bgen[many];
  if (*out) return NULL;
  size_t row = (size_t)p->tokens * 4;
  if (!v->bio) {
    SSM_TRY(ssm_vk_buffer_create(v->vk, row * (2 * BGEN_STEPS + 1), SSM_VK_BUFFER_HOST, &v->bio));
    if (!ssm_vk_buffer_map(v->bio))
      return ssm_status_new(SSM_ERR_UNSUPPORTED, "device '%s': host-visible buffers cannot be "
                            "mapped", ssm_vk_info(v->vk)->name);
  }
  ssm_vk_program *prog;
  SSM_TRY(ssm_vk_program_create(v->vk, &prog));
  ssm_vk_buffer *in = v->buffers[p->tokens_in.buffer], *next = v->buffers[p->next.buffer];
  ssm_status s = add_copy(prog, v->bio, 0, in, (size_t)p->tokens_in.offset, row);
  for (int j = 0; j < (many ? BGEN_STEPS : 1) && !s; j++) {
    if (p->has_pos)
      s = add_copy(prog, v->bio, row * (size_t)(BGEN_STEPS + 1 + j), v->buffers[p->pos.buffer],
                   (size_t)p->pos.offset, row);
    if (!s) s = record_steps(v, p, p->nsteps, (uint32_t)p->tokens, prog);
    if (!s) s = add_copy(prog, next, (size_t)p->next.offset, in, (size_t)p->tokens_in.offset, row);
    if (!s) s = add_copy(prog, next, (size_t)p->next.offset, v->bio, row * (size_t)(j + 1), row);
  }
  if (!s) s = ssm_vk_program_end(prog);
  if (s) {
    ssm_vk_program_destroy(v->vk, prog);
    return s;
  }
  *out = prog;
  return NULL;
}

static ssm_status vk_batch_generate(ssm_backend *b, const int32_t *first, const int64_t *pos,
                                    int n, int32_t *out_ids, int *out_ran) {
  vk_backend *v = (vk_backend *)b;
  int B = v->m->batch.tokens;
  *out_ran = 0;
  for (int i = 0; i < B; i++)
    if (first[i] < 0 || first[i] >= b->vocab)
      return ssm_status_new(SSM_ERR_INVALID, "slot %d: token id %d is out of range (vocab %lld)",
                            i, first[i], (long long)b->vocab);
  SSM_TRY(record_bgen(v, 1));
  SSM_TRY(record_bgen(v, 0));
  int32_t *io = ssm_vk_buffer_map(v->bio);
  memcpy(io, first, (size_t)B * 4);
  for (int done = 0; done < n;) {
    int many = n - done >= BGEN_STEPS, steps = many ? BGEN_STEPS : 1;
    for (int j = 0; j < steps; j++)
      for (int i = 0; i < B; i++)
        io[(size_t)(BGEN_STEPS + 1 + j) * (size_t)B + (size_t)i] =
            pos[i] < 0 ? 0 : (int32_t)(pos[i] + done + j);
    SSM_TRY(ssm_vk_program_run(v->vk, v->bgen[many]));
    /* every step of the submission ran, for every slot: a slot that drew
     * -1 fails the call once they are all written */
    int bad = -1;
    for (int j = 0; j < steps; j++) {
      const int32_t *ids = io + (size_t)(j + 1) * (size_t)B;
      for (int i = 0; i < B; i++)
        if (ids[i] < 0 && bad < 0) bad = i;
      memcpy(out_ids + (size_t)(done + j) * (size_t)B, ids, (size_t)B * 4);
    }
    memcpy(io, io + (size_t)steps * (size_t)B, (size_t)B * 4);
    done += steps;
    *out_ran = done;
    if (bad >= 0) {
      for (size_t k = (size_t)done * (size_t)B; k < (size_t)n * (size_t)B; k++) out_ids[k] = -2;
      return ssm_slot_nonfinite(bad);
    }
  }
  return NULL;
}

/* Copies every state of the backend into row `slot` of its slots state
 * (to_slot), or back. */
static ssm_status vk_slot_copy(ssm_backend *b, int slot, int to_slot) {
  vk_backend *v = (vk_backend *)b;
  const ssm_manifest *m = v->m;
  ssm_vk_copy *c;
  SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)b->nstates + 1, sizeof *c, (void **)&c), "slot"));
  int n = 0;
  for (int i = 0; i < b->nstates; i++) {
    const ssm_mf_tensor *t = &m->states[i], *row = ssm_manifest_slots_state(m, t);
    if (!row) continue;
    ssm_vk_buffer *state = v->buffers[t->region.buffer], *slots = v->buffers[row->region.buffer];
    size_t at = (size_t)row->region.offset + (size_t)slot * (size_t)t->region.bytes;
    c[n++] = to_slot ? (ssm_vk_copy){state, slots, (size_t)t->region.offset, at, (size_t)t->region.bytes}
                     : (ssm_vk_copy){slots, state, at, (size_t)t->region.offset, (size_t)t->region.bytes};
  }
  ssm_status s = ssm_vk_buffer_copy(v->vk, c, n);
  free(c);
  return s;
}

static ssm_status vk_slot_sampler(ssm_backend *b, int slot, const float *state) {
  vk_backend *v = (vk_backend *)b;
  ssm_region r = v->m->batch.sampler;
  r.offset += (uint64_t)slot * SSM_SAMPLER_STATE_LEN * 4;
  r.bytes = SSM_SAMPLER_STATE_LEN * 4;
  return upload(v, r, state);
}

/* ---- the ops ------------------------------------------------------------------- */

static ssm_status write_sampler(vk_backend *v) {
  if (!v->m->decode.has_sampler) return NULL;
  return upload(v, v->m->decode.sampler, v->sampler);
}

static ssm_status vk_reset(ssm_backend *b) {
  vk_backend *v = (vk_backend *)b;
  for (int i = 0; i < v->base.nstates; i++) {
    ssm_region r = v->m->states[i].region;
    SSM_TRY(ssm_vk_buffer_fill(v->vk, v->buffers[r.buffer], r.offset, r.bytes, 0));
  }
  b->position = 0;
  return write_sampler(v);
}

static ssm_status vk_set_seen(ssm_backend *b, const float *words) {
  vk_backend *v = (vk_backend *)b;
  if (!v->m->decode.has_seen)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: the bundle's sampler has no seen-token set "
                          "for the repetition penalty: compile it again with this ssmc",
                          ssm_bundle_name(v->bundle));
  return upload(v, v->m->decode.seen, words);
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
  int prefill = count != 1;
  const ssm_mf_program *p = prefill ? &v->m->prefill : &v->m->decode;
  int whole = !prefill || count == b->chunk;
  if (prefill && (count < 1 || count > b->chunk || (!whole && !b->any_count)))
    return ssm_status_new(SSM_ERR_INVALID, b->any_count ? "%s: runs take 1 to %d tokens, not %d"
                                                        : "%s: runs take 1 or %d tokens, not %d",
                          ssm_bundle_name(v->bundle), b->chunk, count);
  SSM_TRY(check_tokens(b, tokens, count));
  if (p->has_pos) SSM_TRY(ssm_backend_check_room(b, count));
  /* a part of a chunk: a program recorded for its count, used once */
  ssm_vk_program *part = NULL;
  if (whole) SSM_TRY(record_run(v, prefill, logits != NULL));
  ssm_status s = whole ? NULL : record_count(v, prefill, logits != NULL, count, &part);
  if (!s) {
    int32_t *io = ssm_vk_buffer_map(v->io);
    memcpy(io, tokens, sizeof *tokens * (size_t)count);
    /* the ids past count are read (valid ids) but change nothing kept */
    memset(io + count, 0, sizeof *io * (size_t)(p->tokens - count));
    io[IO_POS(v)] = (int32_t)b->position;
    s = ssm_vk_program_run(v->vk, whole ? v->run[prefill][logits != NULL] : part);
  }
  ssm_vk_program_destroy(v->vk, part);
  SSM_TRY(s);
  b->position += count;
  if (logits) memcpy(logits, ssm_vk_buffer_map(prefill ? v->run_out : v->out), rows_bytes(p, count));
  return NULL;
}

static ssm_status vk_feed(ssm_backend *b, const int32_t *tokens, int count) {
  vk_backend *v = (vk_backend *)b;
  int chunk = b->chunk, k = chunk > 1 ? count / chunk : 0;
  if (k < 2 || k > SSM_FEED_CHUNKS || count % chunk)
    return ssm_status_new(SSM_ERR_INVALID, "%s: a feed takes 2 to %d runs of %d tokens, not %d "
                          "tokens", ssm_bundle_name(v->bundle), SSM_FEED_CHUNKS, chunk, count);
  SSM_TRY(check_tokens(b, tokens, count));
  if (v->m->prefill.has_pos) SSM_TRY(ssm_backend_check_room(b, count));
  if (!v->feed[k]) SSM_TRY(record_feed(v, k));
  int32_t *io = ssm_vk_buffer_map(v->feed_io);
  memcpy(io, tokens, sizeof *tokens * (size_t)count);
  for (int c = 0; c < k; c++)
    io[SSM_FEED_CHUNKS * chunk + c] = (int32_t)(b->position + (int64_t)c * chunk);
  SSM_TRY(ssm_vk_program_run(v->vk, v->feed[k]));
  b->position += count;
  return NULL;
}

/* A batch of generate's steps on its way: half h of io and out. */
typedef struct {
  int64_t start; /* the position of its first step */
  int steps;     /* 0: none in flight */
  int32_t input; /* its first step's input */
} gen_batch;

static ssm_status gen_wait_all(vk_backend *v, gen_batch *q) {
  ssm_status s = NULL;
  for (int h = 0; h < 2; h++)
    for (int b = 0; b < 2; b++)
      for (int l = 0; l < 2; l++) {
        if (!v->gen[b][h][l]) continue;
        ssm_status e = ssm_vk_program_wait(v->vk, v->gen[b][h][l]);
        if (!s) s = e;
        else ssm_status_free(e);
      }
  q[0].steps = q[1].steps = 0;
  return s;
}

/* The caller stopped after step `j` of the batch in half h: the state is
 * made what it was after that step. The batch queued after it (if any)
 * began there when j is the batch's last step; otherwise half h's copy is
 * restored and its steps up to j replayed with the ids they drew. */
static ssm_status gen_stop(vk_backend *v, gen_batch *q, int h, int j) {
  ssm_backend *b = &v->base;
  gen_batch done = q[h], after = q[!h];
  SSM_TRY(gen_wait_all(v, q));
  if (!after.steps && j + 1 == done.steps) return NULL; /* nothing ran past it */
  int from = after.steps && j + 1 == done.steps ? !h : h;
  SSM_TRY(ssm_vk_program_run(v->vk, v->restore[from]));
  b->position = from == h ? done.start : after.start;
  if (from != h) return NULL;
  for (int i = 0; i <= j; i++) {
    int32_t t = i ? *io_slot(v, GEN_ID(h, i - 1)) : done.input;
    SSM_TRY(vk_run(b, &t, 1, NULL));
  }
  return NULL;
}

static ssm_status vk_generate(ssm_backend *b, int32_t first, int n, int want_logits,
                              int32_t *out_ids, int *out_count, ssm_step_fn on_step, void *user) {
  vk_backend *v = (vk_backend *)b;
  const ssm_mf_program *d = &v->m->decode;
  if (!d->has_sampler)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: the bundle's decode program has no sampler",
                          ssm_bundle_name(v->bundle));
  SSM_TRY(gen_prepare(v, want_logits != 0));
  SSM_TRY(ssm_vk_buffer_upload(v->vk, v->slots, GEN_IN * v->slot, &first, 4));
  const float *out = ssm_vk_buffer_map(v->out);
  size_t vocab = (size_t)b->vocab;
  gen_batch q[2] = {{0}};
  int next = 0;                   /* the half the next batch goes to */
  int64_t queued = b->position;   /* the position after every queued step */
  int submitted = *out_count;     /* ids asked for so far */
  int32_t input = first;          /* the first input of the oldest batch not yet queued */
  ssm_status s = NULL;
  for (int h = 0; !s;) {
    /* keep two batches queued */
    while (!s && !q[next].steps && submitted < n) {
      int steps = n - submitted >= GEN_BATCH ? GEN_BATCH : 1;
      if (d->has_pos && b->max_seq && queued + steps > b->max_seq) {
        if (queued < b->max_seq) steps = 1;
        else if (q[!next].steps) break; /* what is queued runs first */
        else {
          s = ssm_backend_check_room(b, 1);
          break;
        }
      }
      for (int j = 0; j < steps; j++) *io_slot(v, GEN_POS(next, j)) = (int32_t)(queued + j);
      s = ssm_vk_program_submit(v->vk, v->gen[steps > 1][next][want_logits != 0]);
      if (s) break;
      q[next] = (gen_batch){queued, steps, 0};
      queued += steps;
      submitted += steps;
      next = !next;
    }
    if (s || !q[h].steps) break;
    s = ssm_vk_program_wait(v->vk, v->gen[q[h].steps > 1][h][want_logits != 0]);
    q[h].input = input;
    for (int j = 0; j < q[h].steps && !s; j++) {
      int32_t id = *io_slot(v, GEN_ID(h, j));
      if (id == -1) s = ssm_sampler_nonfinite(q[h].start + j);
      else if (id < 0 || id >= b->vocab)
        s = ssm_status_new(SSM_ERR_DEVICE, "the sampler drew token id %d, outside [0, %lld)", id,
                           (long long)b->vocab);
      if (s) {
        b->position = q[h].start + j;
        break;
      }
      out_ids[(*out_count)++] = id;
      const float *row = want_logits ? out + (size_t)(h * GEN_BATCH + j) * vocab : NULL;
      if (on_step && on_step(id, row, user)) {
        b->position = q[h].start + j + 1;
        return gen_stop(v, q, h, j);
      }
    }
    if (s) break;
    b->position = q[h].start + q[h].steps;
    input = *io_slot(v, GEN_ID(h, q[h].steps - 1));
    q[h].steps = 0;
    h = !h;
  }
  ssm_status w = gen_wait_all(v, q);
  if (s) {
    ssm_status_free(w);
    return s;
  }
  return w;
}

static ssm_status vk_state_read(ssm_backend *b, int i, void *dst) {
  vk_backend *v = (vk_backend *)b;
  return download(v, v->m->states[i].region, dst);
}

static ssm_status vk_state_write(ssm_backend *b, int i, const void *src) {
  vk_backend *v = (vk_backend *)b;
  return upload(v, v->m->states[i].region, src);
}

/* ---- snapshots: the state regions copied into one device buffer ---------- */

typedef struct {
  ssm_snapshot base;
  ssm_vk_buffer *buffer;
} vk_snapshot;

/* The copies between the state regions and a snapshot's buffer. */
static ssm_status snapshot_copy(vk_backend *v, ssm_vk_buffer *buf, int to_snapshot) {
  ssm_vk_copy *c;
  SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)v->base.nstates + 1, sizeof *c, (void **)&c), "snapshot"));
  size_t at = 0;
  for (int i = 0; i < v->base.nstates; i++) {
    ssm_region r = v->m->states[i].region;
    ssm_vk_buffer *state = v->buffers[r.buffer];
    c[i] = to_snapshot ? (ssm_vk_copy){state, buf, (size_t)r.offset, at, (size_t)r.bytes}
                       : (ssm_vk_copy){buf, state, at, (size_t)r.offset, (size_t)r.bytes};
    at += (size_t)r.bytes;
  }
  ssm_status s = ssm_vk_buffer_copy(v->vk, c, v->base.nstates);
  free(c);
  return s;
}

static ssm_status vk_snapshot_take(ssm_backend *b, ssm_snapshot **inout) {
  vk_backend *v = (vk_backend *)b;
  vk_snapshot *s = (vk_snapshot *)*inout;
  if (!s) {
    uint64_t bytes = 0;
    for (int i = 0; i < v->base.nstates; i++) bytes += v->m->states[i].region.bytes;
    ssm_vk_buffer *buf;
    SSM_TRY(ssm_status_wrap(ssm_vk_buffer_create(v->vk, bytes ? (size_t)bytes : 4,
                                                 SSM_VK_BUFFER_DEVICE, &buf), "snapshot"));
    ssm_status st = ssm_alloc(1, sizeof *s, (void **)&s);
    if (st) {
      ssm_vk_buffer_destroy(v->vk, buf);
      return ssm_status_wrap(st, "snapshot");
    }
    *s = (vk_snapshot){{b, 0, bytes}, buf};
    *inout = &s->base;
  }
  SSM_TRY(snapshot_copy(v, s->buffer, 1));
  s->base.position = b->position;
  return NULL;
}

static ssm_status vk_restore(ssm_backend *b, const ssm_snapshot *snap) {
  SSM_TRY(snapshot_copy((vk_backend *)b, ((const vk_snapshot *)snap)->buffer, 0));
  b->position = snap->position;
  return NULL;
}

static void vk_snapshot_free(ssm_backend *b, ssm_snapshot *snap) {
  ssm_vk_buffer_destroy(((vk_backend *)b)->vk, ((vk_snapshot *)snap)->buffer);
  free(snap);
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
  /* prefill 2: the batch program */
  const ssm_mf_program *p = prefill == 2 ? &v->m->batch : prefill ? &v->m->prefill : &v->m->decode;
  if (!p->tokens)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: the bundle has no batch program",
                          ssm_bundle_name(v->bundle));
  /* prefill as a prompt runs it: without the logits */
  int nsteps = prefill == 1 ? ssm_manifest_state_steps(v->m, p) : p->nsteps;
  *out = NULL;
  *out_n = 0;
  if (!v->timed[prefill]) {
    if (!v->timed_step[prefill])
      SSM_TRY(ssm_status_wrap(ssm_alloc(2 * (size_t)p->nsteps + 1, sizeof(int),
                                        (void **)&v->timed_step[prefill]), "a profile"));
    v->timed_ops[prefill] = 0;
    SSM_TRY(ssm_vk_program_create(v->vk, &v->timed[prefill]));
    SSM_TRY(ssm_vk_program_profile(v->timed[prefill]));
    SSM_TRY(record_steps_but(v, p, nsteps, (uint32_t)p->tokens, NULL, NULL, 0, v->timed[prefill],
                             v->timed_step[prefill], &v->timed_ops[prefill]));
    SSM_TRY(ssm_vk_program_end(v->timed[prefill]));
  }
  const int *op_step = v->timed_step[prefill], nops = v->timed_ops[prefill];
  int32_t *tokens = NULL;
  ssm_step_time *t = NULL;
  double *us = NULL;
  ssm_status s = ssm_alloc((size_t)p->tokens + 1, sizeof *tokens, (void **)&tokens);
  if (!s) s = ssm_alloc((size_t)p->nsteps + 1, sizeof *t, (void **)&t);
  if (!s) s = ssm_alloc((size_t)nops + 1, sizeof *us, (void **)&us);
  if (s) {
    free(tokens);
    free(t);
    return ssm_status_wrap(s, "a profile");
  }
  for (int i = 0; i < p->tokens; i++) tokens[i] = (int32_t)((i * 7919 + 1) % b->vocab);
  s = vk_reset(b);
  for (int r = 0; r < runs && !s; r++) {
    if (p->has_pos && b->position + p->tokens > b->max_seq) s = vk_reset(b);
    if (!s) s = upload(v, p->tokens_in, tokens);
    if (!s) s = upload_pos(v, p);
    if (!s) s = ssm_vk_program_run(v->vk, v->timed[prefill]);
    if (!s) s = ssm_vk_program_times(v->vk, v->timed[prefill], us);
    b->position += p->tokens;
    for (int o = 0; o < nops && !s; o++) t[op_step[o]].us += us[o] / runs;
  }
  for (int i = 0; i < nsteps; i++) {
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
  *out_n = nsteps;
  return NULL;
}

static void vk_close(ssm_backend *b) {
  vk_backend *v = (vk_backend *)b;
  if (v->vk) {
    for (int i = 0; i < 3; i++) ssm_vk_program_destroy(v->vk, v->timed[i]);
    for (int i = 0; i < 3; i++) free(v->timed_step[i]);
    for (int i = 0; i < 8; i++) {
      ssm_vk_program_destroy(v->vk, (&v->gen[0][0][0])[i]);
      if (i < 4) ssm_vk_program_destroy(v->vk, (&v->run[0][0])[i]);
      if (i < 2) ssm_vk_program_destroy(v->vk, v->restore[i]);
    }
    for (int i = 0; i <= SSM_FEED_CHUNKS; i++) ssm_vk_program_destroy(v->vk, v->feed[i]);
    ssm_vk_buffer_destroy(v->vk, v->feed_io);
    for (int h = 0; h < 2; h++)
      for (int i = 0; i < v->m->nbuffers; i++) ssm_vk_buffer_destroy(v->vk, v->backup[h][i]);
    for (int i = 0; i < 2; i++) ssm_vk_program_destroy(v->vk, v->bgen[i]);
    ssm_vk_buffer_destroy(v->vk, v->bio);
    ssm_vk_buffer_destroy(v->vk, v->io);
    ssm_vk_buffer_destroy(v->vk, v->slots);
    ssm_vk_buffer_destroy(v->vk, v->out);
    ssm_vk_buffer_destroy(v->vk, v->run_out);
    for (int i = 0; v->kernels && i < v->m->nkernels; i++) ssm_vk_kernel_destroy(v->vk, v->kernels[i]);
    for (int i = 0; v->preps && i < v->m->nkernels; i++) ssm_vk_kernel_destroy(v->vk, v->preps[i]);
    ssm_vk_buffer_destroy(v->vk, v->scratch);
    for (int i = 0; i < v->m->nbuffers; i++) ssm_vk_buffer_destroy(v->vk, v->buffers[i]);
    ssm_vk_close(v->vk);
  }
  free(v->kernels);
  free(v->preps);
  free(v->counted);
  free(v->states);
  ssm_bundle_close(v->bundle);
  free(v);
}

static const ssm_backend_ops vk_ops = {"vulkan",      vk_close,       vk_run,       vk_reset,
                                       vk_set_sampler, vk_generate,    vk_state_read, vk_state_write,
                                       vk_check,      vk_profile,     vk_snapshot_take,
                                       vk_restore,    vk_snapshot_free, vk_slot_copy,
                                       vk_slot_sampler, vk_batch_generate, vk_set_seen,
                                       vk_feed};

ssm_status ssm_vk_backend_open(ssm_bundle *bundle, const char *weights,
                               const ssm_vk_backend_opts *opts, ssm_backend **out) {
  *out = NULL;
  vk_backend *v;
  ssm_status s = ssm_status_wrap(ssm_alloc(1, sizeof *v, (void **)&v), "the Vulkan backend");
  if (s) {
    ssm_bundle_close(bundle); /* as vk_close does on any other error */
    return s;
  }
  v->bundle = bundle;
  v->m = ssm_bundle_manifest(bundle);
  ssm_backend *b = &v->base;
  const ssm_manifest *m = v->m;
  *b = (ssm_backend){.ops = &vk_ops, .vocab = m->vocab, .chunk = m->prefill.tokens,
                     .any_count = m->prefill.any_count,
                     .max_seq = m->max_seq, .eos = m->eos, .arch = m->architecture,
                     .weight_bytes = ssm_manifest_weight_bytes(m), .dtype = m->dtype,
                     .nstates = ssm_manifest_own_states(m), .slots = m->batch.tokens};
  s = ssm_status_wrap(ssm_alloc((size_t)m->nstates + 1, sizeof *v->states, (void **)&v->states),
                      "the Vulkan backend");
  for (int i = 0; !s && i < m->nstates; i++)
    v->states[i] = (ssm_backend_state){m->states[i].name, m->states[i].type};
  b->states = v->states;
  ssm_st *st = NULL;
  if (!s) s = ssm_sampler_state(0, 0, 1, 0, 0, v->sampler);
  if (!s) s = ssm_st_open(weights, &st);
  if (!s && opts) s = ssm_st_set_progress(st, &opts->progress);
  if (!s) s = check_weights(m, st);
  if (!s) s = ssm_vk_open(opts ? opts->device : -1, opts ? opts->validation : 0, &v->vk);
  if (!s) b->device = ssm_vk_info(v->vk)->name;
  /* what does not fit is refused before any weight is read */
  if (!s) s = fit_memory(v);
  if (!s) s = make_buffers(v);
  if (!s) s = fit_bindings(v);
  double t0 = ssm_now();
  if (!s) s = upload_weights(v, st);
  ssm_st_close(st);
  double t1 = ssm_now();
  if (!s) ssm_log("vulkan: %.2f GB of weights read and uploaded in %.2f s", (double)b->weight_bytes / 1e9, t1 - t0);
  if (!s) s = vk_reset(b);
  /* the slots start zeroed (a reset leaves them), each with a greedy sampler */
  for (int i = 0; !s && i < m->nbuffers; i++)
    if (m->buffers[i].usage == SSM_BUFFER_SLOTS)
      s = ssm_vk_buffer_fill(v->vk, v->buffers[i], 0, (size_t)m->buffers[i].bytes, 0);
  for (int i = 0; !s && i < b->slots; i++) s = vk_slot_sampler(b, i, v->sampler);
  if (!s) s = load_kernels(v);
  if (!s) ssm_log("vulkan: %d kernels made in %.2f s", m->nkernels, ssm_now() - t1);
  if (!s) s = make_io(v);
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
