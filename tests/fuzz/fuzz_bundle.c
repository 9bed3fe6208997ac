/*
 * fuzz_bundle.c — the .ssmb container and the manifest reader, which need
 * no device: ssm_bundle_open_memory (the header, the checksum and every
 * field of the manifest), then what a reader does with an accepted bundle:
 * every blob the manifest names is readable to its end, every kernel's WGSL
 * slots and windows are in range, describe (text and JSON) works, and serializing and reading it again gives the same bytes.
 * Each input is tried as it is and, so that mutations get past the
 * checksum, with its header checksum recomputed.
 */
#include "bundle/bundle.h"
#include "fuzz.h"

static void touch(const ssm_bundle *b, ssm_blob blob) {
  if (!blob.size) return;
  const volatile uint8_t *p = ssm_bundle_blob(b, blob);
  (void)p[0];
  (void)p[blob.size - 1];
}

static void try_bundle(const uint8_t *data, size_t size) {
  ssm_bundle *b = NULL;
  ssm_status s = ssm_bundle_open_memory(data, size, "fuzz.ssmb", &b);
  if (s) {
    fuzz_check_error(s);
    return;
  }
  const ssm_manifest *m = ssm_bundle_manifest(b);
  for (int i = 0; i < m->nkernels; i++) {
    const ssm_mf_kernel *k = &m->kernels[i];
    touch(b, k->spirv);
    touch(b, k->glsl);
    touch(b, k->wgsl);
    if (k->nbindings < 1 || k->nbindings > SSM_BUNDLE_MAX_BINDINGS)
      fuzz_fail("a kernel with %d bindings was accepted", k->nbindings);
    if (k->nslots < 1 || k->nslots > k->nbindings || k->slot[0])
      fuzz_fail("a kernel with %d WGSL slots for %d bindings was accepted", k->nslots, k->nbindings);
    for (int j = 0; j < k->nbindings; j++)
      if (k->slot[j] < 0 || k->slot[j] >= k->nslots) fuzz_fail("binding %d is in slot %d", j, k->slot[j]);
    for (int j = 0; j < k->nslots; j++)
      if (k->windows[j] < 1 || k->windows[j] > SSM_BUNDLE_WGSL_MAX_WINDOWS)
        fuzz_fail("a WGSL slot of %d windows was accepted", k->windows[j]);
  }
  const ssm_mf_program *progs[2] = {&m->decode, &m->prefill};
  for (int p = 0; p < 2; p++) {
    touch(b, progs[p]->ir);
    for (int i = 0; i < progs[p]->nsteps; i++) {
      const ssm_mf_step *st = &progs[p]->steps[i];
      if (st->kernel < 0 || st->kernel >= m->nkernels) fuzz_fail("a step names kernel %d", st->kernel);
      for (int k = 0; k < st->nbindings; k++) {
        ssm_region r = st->bindings[k];
        if (r.buffer < 0 || r.buffer >= m->nbuffers || r.offset + r.bytes > m->buffers[r.buffer].bytes)
          fuzz_fail("a binding outside its buffer was accepted");
      }
    }
  }
  for (int json = 0; json < 2; json++) {
    char *text;
    ssm_status e = ssm_bundle_describe(b, json, &text);
    if (e || !*text) fuzz_fail("describe returned no text");
    free(text);
  }
  void *bytes;
  size_t n;
  s = ssm_bundle_serialize(b, &bytes, &n);
  if (s) fuzz_fail("an accepted bundle does not serialize: %s", ssm_status_message(s));
  ssm_bundle *c = NULL;
  s = ssm_bundle_open_memory(bytes, n, "again.ssmb", &c);
  if (s) fuzz_fail("a serialized bundle does not read back: %s", ssm_status_message(s));
  void *bytes2;
  size_t n2;
  s = ssm_bundle_serialize(c, &bytes2, &n2);
  if (s || n2 != n || memcmp(bytes, bytes2, n)) fuzz_fail("serialize + read changed the bundle");
  free(bytes);
  free(bytes2);
  ssm_bundle_close(c);
  ssm_bundle_close(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try_bundle(data, size);
  if (size >= 64 && !memcmp(data, "SSMB", 4)) {
    uint8_t *fixed = malloc(size);
    if (!fixed) abort();
    memcpy(fixed, data, size);
    uint64_t h = ssm_fnv1a(SSM_FNV_INIT, fixed + 64, size - 64);
    for (int i = 0; i < 8; i++) fixed[40 + i] = (uint8_t)(h >> (8 * i));
    if (memcmp(fixed, data, size)) try_bundle(fixed, size);
    free(fixed);
  }
  return 0;
}
