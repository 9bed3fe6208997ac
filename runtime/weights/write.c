/*
 * write.c — a bundle's weights as one safetensors file, quantized ones
 * stored quantized (weights.h: ssm_st_write), so that loading them is a
 * copy instead of a quantization.
 *
 * The file is planned first (every tensor's name, dtype, shape and offset,
 * from the weights' types and the source's tensor table), its header
 * written, then each weight read (ssm_st_read quantizes on every core) and
 * written at its offset, one weight in host memory at a time.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "runtime/weights/weights.h"

/* One tensor of the file: weight `owner`'s blocks (part 0) or scales
 * (part 1) when it is quantized, else the weight or part `part` of a
 * stacked one, in the weight's dtype. */
typedef struct {
  char *name;
  ssm_dtype dtype;
  int rank;
  int64_t dims[SSM_MAX_RANK];
  uint64_t offset, bytes;
  int owner;
  int64_t part;
} out_tensor;

typedef struct {
  SSM_VEC(out_tensor) t;
  uint64_t size; /* of the data section */
} plan;

static void plan_free(plan *p) {
  for (size_t i = 0; i < p->t.n; i++) free(p->t.items[i].name);
  ssm_vec_free(&p->t);
}

static const char *st_name_of(ssm_dtype d) {
  static const char *const names[SSM_DTYPE_COUNT] = {"F32", "F16", "BF16", "I32", "I8", "U8"};
  return names[d];
}

/* Adds tensor t (taking its name). A tensor of that name read before (a
 * weight read twice: tied embeddings) is written once, by its last reader
 * when that one reads it in f32 and the first in 16 bits (a read converts,
 * and f32 holds both); the shapes are the same (ssm_st_check). */
static ssm_status add(plan *p, out_tensor t) {
  for (size_t i = 0; i < p->t.n; i++) {
    out_tensor *o = &p->t.items[i];
    if (strcmp(o->name, t.name)) continue;
    if (o->dtype != SSM_F32 && t.dtype == SSM_F32 && !ssm_dtype_is_quant(o->dtype)) {
      free(o->name);
      *o = t;
    } else {
      free(t.name);
    }
    return NULL;
  }
  ssm_status s = ssm_vec_push(&p->t, t);
  if (s) free(t.name);
  return ssm_status_wrap(s, "the tensors to write");
}

/* The tensors of weight w[i]. */
static ssm_status plan_weight(plan *p, const ssm_st *src, const ssm_st_weight *w, int i) {
  SSM_TRY(ssm_st_check(src, w->name, &w->type));
  const ssm_type *t = &w->type;
  if (ssm_dtype_is_quant(t->dtype)) {
    char *qn, *dn;
    SSM_TRY(ssm_st_quant_names(w->name, t->dtype, &qn, &dn));
    ssm_qlayout l = ssm_qlayout_of(t);
    out_tensor q = {qn, t->dtype, t->rank, {0}, 0, (uint64_t)(l.rows * l.k), i, 0};
    out_tensor d = {dn, SSM_F16, t->rank, {0}, 0, (uint64_t)(l.rows * l.blocks) * 2, i, 1};
    memcpy(q.dims, t->dims, sizeof q.dims);
    memcpy(d.dims, t->dims, sizeof d.dims);
    d.dims[t->rank - 1] = l.blocks;
    if (t->dtype == SSM_Q4_0) {
      if (l.k % 2 == 0) q.dims[t->rank - 1] = l.k / 2;
      else q.rank = 1, q.dims[0] = (l.rows * l.k + 1) / 2;
      q.bytes = (q.bytes + 1) / 2;
    }
    ssm_status s = add(p, q);
    if (!s) s = add(p, d);
    else free(dn);
    return s;
  }
  const char *hole = strstr(w->name, "{*}");
  ssm_type part = *t;
  if (hole) {
    part.rank = t->rank - 1;
    for (int k = 0; k < part.rank; k++) part.dims[k] = t->dims[k + 1];
  }
  for (int64_t k = 0; k < (hole ? t->dims[0] : 1); k++) {
    ssm_sb nm = {0};
    if (hole) ssm_sb_printf(&nm, "%.*s%lld%s", (int)(hole - w->name), w->name, (long long)k, hole + 3);
    else ssm_sb_printf(&nm, "%s", w->name);
    out_tensor o = {NULL, part.dtype, part.rank, {0}, 0, ssm_type_bytes(&part), i, k};
    memcpy(o.dims, part.dims, sizeof o.dims);
    SSM_TRY(ssm_sb_take(&nm, "a tensor's name", &o.name));
    SSM_TRY(add(p, o));
  }
  return NULL;
}

static ssm_status header_json(const plan *p, char **out) {
  *out = NULL;
  cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "__metadata__");
  cJSON_AddStringToObject(meta, "format", "ssmc");
  for (size_t i = 0; i < p->t.n; i++) {
    const out_tensor *t = &p->t.items[i];
    cJSON *e = cJSON_AddObjectToObject(root, t->name);
    cJSON_AddStringToObject(e, "dtype", st_name_of(t->dtype));
    cJSON *shape = cJSON_AddArrayToObject(e, "shape"), *off = cJSON_AddArrayToObject(e, "data_offsets");
    for (int k = 0; k < t->rank; k++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->dims[k]));
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)t->offset));
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(t->offset + t->bytes)));
  }
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!text) return ssm_status_new(SSM_ERR_NOMEM, "out of host memory for a safetensors header");
  ssm_status s = ssm_strdup(text, "a safetensors header", out);
  cJSON_free(text);
  return s;
}

static ssm_status write_at(int fd, const char *path, uint64_t at, const void *data, uint64_t n) {
  const uint8_t *p = data;
  while (n) {
    ssize_t w = pwrite(fd, p, n > (1u << 30) ? (1u << 30) : (size_t)n, (off_t)at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return ssm_status_new(SSM_ERR_IO, "%s: cannot write (%s)", path,
                                      w < 0 ? strerror(errno) : "nothing written");
    p += w, at += (uint64_t)w, n -= (uint64_t)w;
  }
  return NULL;
}

/* Writes the tensors weight i owns from its bytes in buf (ssm_st_read). */
static ssm_status write_owned(int fd, const char *path, uint64_t data_at, const plan *p, int i,
                              const ssm_type *type, const uint8_t *buf) {
  for (size_t k = 0; k < p->t.n; k++) {
    const out_tensor *t = &p->t.items[k];
    if (t->owner != i) continue;
    uint64_t from = t->bytes * (uint64_t)t->part; /* the stacked part's (blocks: 0) */
    if (ssm_dtype_is_quant(type->dtype)) from = t->part ? ssm_qlayout_of(type).scales : 0;
    SSM_TRY(write_at(fd, path, data_at + t->offset, buf + from, t->bytes));
  }
  return NULL;
}

ssm_status ssm_st_write(const ssm_st *src, const ssm_st_weight *w, int n, const char *path,
                        const ssm_progress *progress, uint64_t *out_fingerprint) {
  if (out_fingerprint) *out_fingerprint = 0;
  plan p = {0};
  ssm_status s = NULL;
  for (int i = 0; !s && i < n; i++) s = ssm_status_wrap(plan_weight(&p, src, &w[i], i), "%s", path);
  /* offsets in the order planned; the largest weight read, and all read */
  uint64_t most = 0, total = 0;
  unsigned char *owns = NULL;
  if (!s) s = ssm_alloc((size_t)n + 1, 1, (void **)&owns);
  for (size_t k = 0; !s && k < p.t.n; k++) {
    out_tensor *t = &p.t.items[k];
    t->offset = (p.size + 7) & ~(uint64_t)7;
    p.size = t->offset + t->bytes;
    owns[t->owner] = 1;
  }
  for (int i = 0; !s && i < n; i++) {
    uint64_t b = owns[i] ? ssm_type_bytes(&w[i].type) : 0;
    most = b > most ? b : most;
    total += b;
  }
  char *header = NULL;
  if (!s) s = header_json(&p, &header);
  void *buf = NULL;
  if (!s) s = ssm_status_wrap(ssm_alloc(most ? (size_t)most : 1, 1, &buf), "%s", path);
  char *tmp = NULL;
  int fd = -1;
  if (!s) s = ssm_file_temp(path, &tmp, &fd);
  if (!s) {
    size_t hlen = strlen(header), padded = (hlen + 7) & ~(size_t)7;
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    s = write_at(fd, path, 0, len, 8);
    if (!s) s = write_at(fd, path, 8, header, hlen);
    if (!s && padded > hlen) s = write_at(fd, path, 8 + hlen, "        ", padded - hlen);
    uint64_t done = 0;
    for (int i = 0; !s && i < n; i++) {
      if (!owns[i]) continue;
      s = ssm_st_read(src, w[i].name, &w[i].type, buf);
      if (!s) s = write_owned(fd, path, 8 + padded, &p, i, &w[i].type, buf);
      done += ssm_type_bytes(&w[i].type);
      if (!s && progress) s = ssm_progress_report(progress, "writing weights", done, total);
    }
    /* zeros between tensors and to the end (a file of holes where the
     * file system allows) */
    if (!s && ftruncate(fd, (off_t)(8 + padded + p.size)))
      s = ssm_status_new(SSM_ERR_IO, "%s: cannot write (%s)", path, strerror(errno));
    ssm_status cs = ssm_file_commit(tmp, fd, path, s != NULL);
    if (!s) s = cs;
    else ssm_status_free(cs);
  }
  free(buf);
  free(header);
  free(owns);
  plan_free(&p);
  if (!s && out_fingerprint) {
    ssm_st *st = NULL;
    s = ssm_st_open(path, &st);
    if (!s) *out_fingerprint = ssm_st_fingerprint(st, &s);
    ssm_st_close(st);
  }
  return s;
}
