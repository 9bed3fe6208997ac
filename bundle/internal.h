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

/* The manifest as `ssmc inspect --json` shows it (manifest.c). */
char *ssm_manifest_summary_json(const ssm_manifest *m);

#endif
