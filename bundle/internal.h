/*
 * internal.h — what the files of bundle/ share and nothing else sees.
 */
#ifndef SSM_BUNDLE_INTERNAL_H
#define SSM_BUNDLE_INTERNAL_H

#include "bundle/bundle.h"

struct ssm_bundle {
  const char *name;     /* in arena */
  ssm_arena *arena;     /* the manifest's strings and arrays */
  ssm_manifest manifest;
  unsigned char *data;  /* owned: the file's bytes, or the compiled blob section */
  const unsigned char *blobs;
  uint64_t blobs_size;
};

/* An empty bundle named `name`. */
ssm_status ssm_bundle_new_(const char *name, ssm_bundle **out);
/* The manifest as `ssmc inspect --json` shows it (manifest.c). */
char *ssm_manifest_summary_json(const ssm_manifest *m);
/* The bytes [*lo, *hi) of buffer *buffer that the bindings of WGSL slot
 * `slot` of dispatch `st` (of kernel `k`) cover; 0 when they lie in more
 * than one buffer (manifest.c). */
int ssm_mf_slot_span(const ssm_mf_kernel *k, const ssm_mf_step *st, int slot, int *buffer,
                     uint64_t *lo, uint64_t *hi);

#endif
