/*
 * export.h — `ssmc export-web` (export.c): a bundle as a static site that
 * runs it in a browser on WebGPU.
 */
#ifndef SSM_TOOLS_EXPORT_H
#define SSM_TOOLS_EXPORT_H

#include "base/base.h"

typedef struct {
  const char *bundle;    /* the .ssmb */
  const char *weights;   /* the checkpoint's directory */
  const char *tokenizer; /* tokenizer.json (NULL: the one in `weights`) */
  const char *out;       /* the site's directory, made if missing */
  int link_weights;      /* link the weights instead of copying them */
} ssm_export_opts;

/* Checks the bundle, the tokenizer and that the checkpoint has every weight
 * the bundle needs, then writes OUT/index.html, the page's modules,
 * model.ssmb, tokenizer.json, the weights files (a quantized bundle's
 * weights file beside it in their place) and site.json, each through a
 * temporary file and a rename. */
ssm_status ssm_export_web(const ssm_export_opts *o);

#endif
