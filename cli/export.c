/*
 * export.c — `ssmc export-web`: a static site that runs a bundle in a
 * browser on WebGPU. The site is the page and the JavaScript host
 * (runtime/web/, compiled into the binary so the command works from any
 * directory), the bundle (its manifest and WGSL kernels), the tokenizer,
 * the weights as they are (the page reads the .safetensors by HTTP Range
 * requests; a quantized bundle's weights file where it is beside the
 * bundle, as model.safetensors), and site.json, which tells the page their names, the
 * end-of-text id and the weights directory's generation_config.json (its
 * defaults, which the page reads as the Node host does: genconfig.mjs).
 * Everything is checked before anything is written: the bundle, the
 * tokenizer, generation_config.json, and that the checkpoint holds every
 * weight the bundle needs with its shape. Every file goes through a temporary name and
 * a rename (ssm_file_write), so a failure keeps what was there.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bundle/bundle.h"
#include "runtime/internal.h"
#include "runtime/weights/weights.h"
#include "tokenizer/tokenizer.h"
#include "cli/export.h"

/* runtime/web's files, embedded by CMake (ssm_embed) */
const char *ssm_web_embedded(const char *file);

/* What the page needs of runtime/web (not the Node command line). */
static const char *const site_files[] = {"index.html",    "page.mjs",      "bundle.mjs",
                                         "gpu.mjs",       "session.mjs",   "safetensors.mjs",
                                         "tokenizer.mjs", "transform.mjs", "json.mjs",
                                         "genconfig.mjs", NULL};
/* The site's other files of fixed names. */
static const char *const data_files[] = {"model.ssmb", "tokenizer.json", "site.json", NULL};

/* Whether `name` is one of the site's own files (site_files, data_files). */
static int site_name(const char *name) {
  for (int i = 0; site_files[i]; i++)
    if (!strcmp(name, site_files[i])) return 1;
  for (int i = 0; data_files[i]; i++)
    if (!strcmp(name, data_files[i])) return 1;
  return 0;
}

static char *join(const char *dir, const char *name) {
  ssm_sb b = {0};
  ssm_sb_xprintf(&b, "%s/%s", dir, name);
  return ssm_sb_xtake(&b);
}

/* Copies `src` to `dst` (read and written in pieces, so a large checkpoint
 * never sits in the heap, and one cut short while it is copied is an
 * error rather than a SIGBUS, as a mapping would give), or links `dst` to
 * it. */
static ssm_status copy_file(const char *src, const char *dst, int link) {
  if (link) {
    char abs[PATH_MAX];
    if (!realpath(src, abs)) return ssm_status_new(SSM_ERR_IO, "%s: %s", src, strerror(errno));
    ssm_sb tmp = {0};
    ssm_sb_xprintf(&tmp, "%s.tmp-%ld", dst, (long)getpid());
    int err = symlink(abs, tmp.s) ? errno : rename(tmp.s, dst) ? errno : 0;
    if (err) unlink(tmp.s);
    ssm_sb_free(&tmp);
    return err ? ssm_status_new(SSM_ERR_IO, "%s: cannot link to %s (%s)", dst, abs, strerror(err))
               : NULL;
  }
  int in = -1, out = -1;
  size_t size = 0;
  char *tmp = NULL;
  ssm_status s = ssm_file_open(src, &in, &size);
  if (!s) s = ssm_file_temp(dst, &tmp, &out);
  static char buf[1 << 20];
  size_t done = 0;
  while (!s && done < size) {
    ssize_t r = read(in, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      s = ssm_status_new(SSM_ERR_IO, "%s: %s after %zu of %zu bytes", src,
                         r < 0 ? strerror(errno) : "cut short", done, size);
      break;
    }
    for (ssize_t w = 0; w < r && !s;) {
      ssize_t k = write(out, buf + w, (size_t)(r - w));
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) s = ssm_status_new(SSM_ERR_IO, "%s: cannot write (%s)", dst, strerror(errno));
      else w += k;
    }
    done += (size_t)r;
  }
  if (in >= 0) close(in);
  if (tmp) {
    ssm_status c = ssm_file_commit(tmp, out, dst, s != NULL);
    if (!s) s = c;
    else ssm_status_free(c);
  }
  return s;
}

typedef SSM_VEC(char *) name_vec;

/* The checkpoint's files in `dir`: model.safetensors, or the index and the
 * shards it names, in first-seen order. */
static ssm_status weight_files(const char *dir, name_vec *out) {
  char *single = join(dir, "model.safetensors"), *index = join(dir, "model.safetensors.index.json");
  struct stat st;
  ssm_status s = NULL;
  if (!stat(single, &st)) {
    ssm_vec_xpush(out, ssm_xstrdup("model.safetensors"));
  } else if (!stat(index, &st)) {
    char *text;
    size_t n;
    s = ssm_file_read(index, 0, &text, &n);
    cJSON *root = s ? NULL : cJSON_ParseWithLength(text, n);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map"), *e;
    if (!s && !cJSON_IsObject(wm))
      s = ssm_status_new(SSM_ERR_INVALID, "%s: no \"weight_map\" object", index);
    ssm_vec_xpush(out, ssm_xstrdup("model.safetensors.index.json"));
    if (!s) cJSON_ArrayForEach(e, wm) {
        size_t k = 1;
        while (cJSON_IsString(e) && k < out->n && strcmp(out->items[k], e->valuestring)) k++;
        if (cJSON_IsString(e) && k == out->n) ssm_vec_xpush(out, ssm_xstrdup(e->valuestring));
      }
    /* a shard is copied into the site under its own name: one of the
     * page's files, the index's, or a path, would replace a file of the
     * site or land outside it */
    for (size_t k = 1; !s && k < out->n; k++) {
      const char *name = out->items[k];
      if (site_name(name) || !strcmp(name, out->items[0]))
        s = ssm_status_new(SSM_ERR_INVALID, "%s: the shard '%s' has the name of one of the "
                           "exported site's own files; rename the shard (and its weight_map "
                           "entries)", index, name);
      else if (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
        s = ssm_status_new(SSM_ERR_INVALID, "%s: the shard '%s' is not a file name in the "
                           "checkpoint's directory", index, name);
    }
    cJSON_Delete(root);
    if (!s) free(text);
  } else {
    s = ssm_status_new(SSM_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json", dir);
  }
  free(single);
  free(index);
  return s;
}

/* Every weight of the bundle is in the checkpoint with its shape and a
 * dtype the page reads it as (runtime/weights: ssm_st_check). */
static ssm_status check_weights(const ssm_manifest *m, const char *path) {
  ssm_st *st;
  SSM_TRY(ssm_st_open(path, &st));
  ssm_status s = NULL;
  for (int i = 0; i < m->nweights && !s; i++)
    s = ssm_status_wrap(ssm_st_check(st, m->weights[i].name, &m->weights[i].type), "%s", path);
  ssm_st_close(st);
  return s;
}

/* A quantized bundle's weights file (ssm_manifest.weights_file) when it is
 * beside the bundle: its path (malloc'd), else NULL. */
static char *weights_file(const char *bundle, const ssm_manifest *m) {
  if (!m->weights_file) return NULL;
  const char *slash = strrchr(bundle, '/');
  ssm_sb p = {0};
  if (slash) ssm_sb_xprintf(&p, "%.*s/%s", (int)(slash - bundle), bundle, m->weights_file);
  else ssm_sb_xprintf(&p, "%s", m->weights_file);
  char *path = ssm_sb_xtake(&p);
  struct stat st;
  if (!stat(path, &st)) return path;
  free(path);
  return NULL;
}

static ssm_status write_text(const char *dir, const char *name, const char *text) {
  char *path = join(dir, name);
  size_t n = strlen(text);
  ssm_status s = ssm_file_write(path, 1, (const void *const[]){text}, &n);
  free(path);
  return s;
}

/* Refuses an export that would write over a file it reads: -o naming the
 * weights' directory (with --link-weights the checkpoint would become a
 * link to itself), or the bundle's or tokenizer's own file. */
static ssm_status outputs_not_inputs(const ssm_export_opts *o, const char *tok_path,
                                     const name_vec *weights, const name_vec *srcs) {
  ssm_status s = NULL;
  size_t nin = 2 + weights->n, nout = 0;
  while (site_files[nout]) nout++;
  for (size_t i = 0; i < nout + 3 + weights->n && !s; i++) {
    const char *name = i < nout ? site_files[i] : i < nout + 3 ? data_files[i - nout]
                                                               : weights->items[i - nout - 3];
    char *dst = join(o->out, name);
    for (size_t j = 0; j < nin && !s; j++) {
      char *src = j == 0 ? ssm_xstrdup(o->bundle) : j == 1 ? ssm_xstrdup(tok_path)
                                                           : ssm_xstrdup(srcs->items[j - 2]);
      /* (a link at dst, from an export with --link-weights, is replaced
       * itself, never what it points to) */
      struct stat ls;
      if (!lstat(dst, &ls) && !S_ISLNK(ls.st_mode) && ssm_file_same(dst, src))
        s = ssm_status_new(SSM_ERR_INVALID, "export-web -o %s: %s would be written over %s, an "
                           "input of this command", o->out, dst, src);
      free(src);
    }
    free(dst);
  }
  return s;
}

ssm_status ssm_export_web(const ssm_export_opts *o) {
  ssm_bundle *b = NULL;
  ssm_tok *tok = NULL;
  name_vec weights = {0}, srcs = {0}; /* the site's names of the weights' files, and their sources */
  char *tok_path = o->tokenizer ? ssm_xstrdup(o->tokenizer) : join(o->weights, "tokenizer.json");
  struct stat st;
  ssm_status s = ssm_bundle_open(o->bundle, &b);
  if (!s) s = ssm_st_check_config(o->weights, ssm_bundle_manifest(b)->config, o->bundle);
  if (!s) s = ssm_status_wrap(ssm_tok_open(tok_path, &tok), "export-web needs the tokenizer for "
                              "the page's text (--tokenizer FILE, or tokenizer.json in --weights)");
  /* generation_config.json, checked as a session checks it, for site.json */
  ssm_genconfig gc = {0};
  cJSON *gen = NULL;
  if (!s) s = ssm_genconfig_read(o->weights, ssm_bundle_manifest(b)->vocab, &gc);
  if (!s && gc.path[0]) {
    char *text;
    size_t n;
    s = ssm_file_read(gc.path, 1 << 20, &text, &n);
    if (!s && !(gen = cJSON_ParseWithLength(text, n))) ssm_fatal_nomem(0); /* parsed before */
    if (!s) free(text);
  }
  /* a quantized bundle's weights file ships as the site's checkpoint (a
   * quarter to a half of the 16-bit bytes, nothing to quantize in the page) */
  char *qfile = s ? NULL : weights_file(o->bundle, ssm_bundle_manifest(b));
  if (!s && qfile) {
    ssm_vec_xpush(&weights, ssm_xstrdup("model.safetensors"));
    ssm_vec_xpush(&srcs, ssm_xstrdup(qfile));
  } else if (!s) {
    s = weight_files(o->weights, &weights);
    for (size_t i = 0; !s && i < weights.n; i++) ssm_vec_xpush(&srcs, join(o->weights, weights.items[i]));
  }
  if (!s) s = check_weights(ssm_bundle_manifest(b), qfile ? qfile : o->weights);
  free(qfile);
  if (!s) s = outputs_not_inputs(o, tok_path, &weights, &srcs);
  if (!s && stat(o->out, &st) && mkdir(o->out, 0755))
    s = ssm_status_new(SSM_ERR_IO, "%s: cannot create (%s)", o->out, strerror(errno));
  else if (!s && !stat(o->out, &st) && !S_ISDIR(st.st_mode))
    s = ssm_status_new(SSM_ERR_IO, "%s: exists and is not a directory", o->out);
  for (int i = 0; site_files[i] && !s; i++) {
    const char *text = ssm_web_embedded(site_files[i]);
    SSM_ASSERT(text);
    s = write_text(o->out, site_files[i], text);
  }
  /* the bundle, the tokenizer and the weights, as they are */
  const char *srcs0[] = {o->bundle, tok_path}, *names[] = {"model.ssmb", "tokenizer.json"};
  for (size_t i = 0; i < 2 + weights.n && !s; i++) {
    char *src = ssm_xstrdup(i < 2 ? srcs0[i] : srcs.items[i - 2]);
    char *dst = join(o->out, i < 2 ? names[i] : weights.items[i - 2]);
    s = copy_file(src, dst, i >= 2 && o->link_weights);
    free(src);
    free(dst);
  }
  if (!s) { /* last: the page looks for it first */
    const ssm_manifest *m = ssm_bundle_manifest(b);
    const char *slash = strrchr(o->weights, '/');
    cJSON *j = cJSON_CreateObject(), *w = cJSON_AddArrayToObject(j, "weights");
    cJSON_AddStringToObject(j, "generator", "ssmc " SSM_VERSION);
    cJSON_AddStringToObject(j, "title", slash && slash[1] ? slash + 1 : o->weights);
    cJSON_AddStringToObject(j, "architecture", m->architecture);
    cJSON_AddStringToObject(j, "bundle", "model.ssmb");
    cJSON_AddStringToObject(j, "tokenizer", "tokenizer.json");
    for (size_t i = 0; i < weights.n; i++) cJSON_AddItemToArray(w, cJSON_CreateString(weights.items[i]));
    cJSON_AddNumberToObject(j, "eos", (double)(m->eos >= 0 ? m->eos : ssm_tok_token_id(tok, "<|endoftext|>")));
    if (gen) cJSON_AddItemToObject(j, "generation_config", gen);
    gen = NULL;
    char *text = cJSON_Print(j);
    if (!text) ssm_fatal_nomem(0);
    s = write_text(o->out, "site.json", text);
    cJSON_free(text);
    cJSON_Delete(j);
  }
  for (size_t i = 0; i < weights.n; i++) free(weights.items[i]);
  for (size_t i = 0; i < srcs.n; i++) free(srcs.items[i]);
  ssm_vec_free(&weights);
  ssm_vec_free(&srcs);
  cJSON_Delete(gen);
  free(tok_path);
  ssm_tok_close(tok);
  ssm_bundle_close(b);
  return s;
}
