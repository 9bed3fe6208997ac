/*
 * state.c — saving and restoring a model's state (SSM, conv, KV caches and
 * the token position) through the backend interface, in one checked format:
 *
 *   "SSMS"  u32 version  u64 header size  u64 checksum  header (JSON)  data
 *
 * The checksum (FNV-1a 64) covers the header and the data, so no byte that
 * decides what is loaded can change unnoticed. The header names the
 * architecture, the weights' fingerprint, the position, and every tensor
 * (name, dtype, shape, offset, bytes). Loading validates everything before
 * it changes anything.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "runtime/backend/backend.h"

#define MAX_STATE_FILE ((size_t)1 << 38)


static size_t tensor_bytes(const ssm_type *t) {
  return (size_t)ssm_type_numel(t) * ssm_dtype_size(t->dtype);
}

#define PREFIX 24 /* "SSMS", u32 version, u64 header length, u64 checksum */

static void put_le(unsigned char *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

ssm_status ssm_state_save(const char *path, const char *arch, uint64_t fingerprint,
                          int64_t position, const ssm_state_tensor *t, int n) {
  static const unsigned char zeros[16];
  /* the parts: the prefix, the header, then each tensor after padding to 16 */
  int nparts = 2 + 2 * n;
  const void **parts = NULL;
  size_t *sizes = NULL;
  ssm_status as = ssm_alloc((size_t)nparts, sizeof *parts, (void **)&parts);
  if (!as) as = ssm_alloc((size_t)nparts, sizeof *sizes, (void **)&sizes);
  if (as) {
    free(parts);
    return ssm_status_wrap(as, "%s: the parts of the state file", path);
  }
  cJSON *h = cJSON_CreateObject(), *arr = cJSON_CreateArray();
  size_t data_size = 0;
  for (int i = 0; i < n; i++) {
    size_t pad = (16 - data_size % 16) % 16, bytes = tensor_bytes(&t[i].type);
    parts[2 + 2 * i] = zeros;
    sizes[2 + 2 * i] = pad;
    parts[3 + 2 * i] = t[i].data;
    sizes[3 + 2 * i] = bytes;
    data_size += pad;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", t[i].name);
    cJSON_AddStringToObject(e, "dtype", ssm_dtype_name(t[i].type.dtype));
    cJSON *sh = cJSON_AddArrayToObject(e, "shape");
    for (int d = 0; d < t[i].type.rank; d++)
      cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].type.dims[d]));
    cJSON_AddNumberToObject(e, "offset", (double)data_size);
    cJSON_AddNumberToObject(e, "bytes", (double)bytes);
    cJSON_AddItemToArray(arr, e);
    data_size += bytes;
  }
  char hex[17];
  snprintf(hex, sizeof hex, "%016" PRIx64, fingerprint);
  cJSON_AddStringToObject(h, "architecture", arch);
  cJSON_AddStringToObject(h, "weights_fingerprint", hex);
  cJSON_AddNumberToObject(h, "position", (double)position);
  cJSON_AddItemToObject(h, "tensors", arr);
  char *json = cJSON_PrintUnformatted(h);
  cJSON_Delete(h);
  if (!json) {
    free(parts);
    free(sizes);
    return ssm_status_new(SSM_ERR_NOMEM, "%s: out of host memory for the state header", path);
  }
  unsigned char head[PREFIX];
  uint64_t hl = strlen(json), sum = ssm_fnv1a(SSM_FNV_INIT, json, hl);
  for (int i = 2; i < nparts; i++) sum = ssm_fnv1a(sum, parts[i], sizes[i]);
  memcpy(head, "SSMS", 4);
  put_le(head + 4, SSM_STATE_VERSION, 4);
  put_le(head + 8, hl, 8);
  put_le(head + 16, sum, 8);
  parts[0] = head;
  sizes[0] = PREFIX;
  parts[1] = json;
  sizes[1] = hl;
  ssm_status s = ssm_file_write(path, nparts, parts, sizes);
  cJSON_free(json);
  free(parts);
  free(sizes);
  return s;
}

static ssm_status bad(const char *path, const char *fmt, const char *a, const char *b) {
  char msg[512];
  snprintf(msg, sizeof msg, fmt, a, b);
  return ssm_status_new(SSM_ERR_INVALID, "%s: %s", path, msg);
}

static char *type_str(const ssm_type *t, char *buf) { return ssm_type_format(t, buf, 160); }

/* Checks header entry `e` against the tensor the model expects. */
static ssm_status check_entry(const char *path, const cJSON *e, const ssm_state_tensor *want,
                              size_t data_size, size_t *out_offset) {
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "offset");
  const cJSON *by = cJSON_GetObjectItemCaseSensitive(e, "bytes");
  ssm_type t = {0};
  if (!cJSON_IsString(dt) || !ssm_dtype_parse(dt->valuestring, strlen(dt->valuestring), &t.dtype) ||
      !cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > SSM_MAX_RANK || !cJSON_IsNumber(off) ||
      !cJSON_IsNumber(by))
    return bad(path, "corrupt state file: tensor '%s' has a malformed entry%s", want->name, "");
  t.rank = cJSON_GetArraySize(sh);
  for (int d = 0; d < t.rank; d++) {
    const cJSON *x = cJSON_GetArrayItem(sh, d);
    if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > 1e12)
      return bad(path, "corrupt state file: tensor '%s' has a malformed shape%s", want->name, "");
    t.dims[d] = (int64_t)x->valuedouble;
  }
  if (!ssm_type_equal(&t, &want->type)) {
    char a[160], b[160], msg[512];
    snprintf(msg, sizeof msg, "state '%s' is %s in the file but the model has %s: the state "
             "belongs to another model", want->name, type_str(&t, a), type_str(&want->type, b));
    return ssm_status_new(SSM_ERR_INVALID, "%s: %s", path, msg);
  }
  size_t bytes = tensor_bytes(&t);
  if (off->valuedouble < 0 || by->valuedouble != (double)bytes ||
      off->valuedouble > (double)data_size || (double)bytes > (double)data_size - off->valuedouble)
    return bad(path, "truncated or corrupt state file: tensor '%s' lies outside the data%s",
               want->name, "");
  *out_offset = (size_t)off->valuedouble;
  return NULL;
}

ssm_status ssm_state_load(const char *path, const char *arch, uint64_t fingerprint,
                          int64_t *out_position, ssm_state_tensor *t, int n) {
  char *file;
  size_t size;
  SSM_TRY(ssm_file_read(path, MAX_STATE_FILE, &file, &size));
  const unsigned char *p = (const unsigned char *)file;
  ssm_status s = NULL;
  cJSON *h = NULL;
  size_t *offsets;
  s = ssm_alloc((size_t)n + 1, sizeof *offsets, (void **)&offsets);
  if (s) {
    free(file);
    return ssm_status_wrap(s, "%s: the offsets of %d tensors", path, n);
  }
  if (size < PREFIX || memcmp(p, "SSMS", 4)) {
    s = ssm_status_new(SSM_ERR_INVALID, "%s: not an ssmc state file", path);
    goto done;
  }
  uint32_t version = (uint32_t)get_le(p + 4, 4);
  uint64_t hl = get_le(p + 8, 8);
  if (version != SSM_STATE_VERSION) {
    s = ssm_status_new(SSM_ERR_INVALID, "%s: state file version %u, but this ssmc reads "
                       "version %u", path, version, SSM_STATE_VERSION);
    goto done;
  }
  if (hl > size - PREFIX) {
    s = ssm_status_new(SSM_ERR_INVALID, "%s: truncated or corrupt state file (header of %llu "
                       "bytes in a %zu-byte file)", path, (unsigned long long)hl, size);
    goto done;
  }
  if (ssm_fnv1a(SSM_FNV_INIT, p + PREFIX, size - PREFIX) != get_le(p + 16, 8)) {
    s = ssm_status_new(SSM_ERR_INVALID, "%s: truncated or corrupt state file (checksum mismatch)", path);
    goto done;
  }
  s = ssm_json_parse(path, (const char *)p + PREFIX, (size_t)hl, &h);
  if (s) goto done;
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(h, "architecture");
  const cJSON *fp = cJSON_GetObjectItemCaseSensitive(h, "weights_fingerprint");
  const cJSON *pos = cJSON_GetObjectItemCaseSensitive(h, "position");
  const cJSON *ts = cJSON_GetObjectItemCaseSensitive(h, "tensors");
  if (!cJSON_IsObject(h) || !cJSON_IsString(a) || !cJSON_IsString(fp) || !cJSON_IsNumber(pos) ||
      !cJSON_IsArray(ts) || pos->valuedouble < 0 || pos->valuedouble > 1e15) {
    s = ssm_status_new(SSM_ERR_INVALID, "%s: corrupt state file header", path);
    goto done;
  }
  if (strcmp(a->valuestring, arch)) {
    s = bad(path, "the state is of a '%s' model, not '%s'", a->valuestring, arch);
    goto done;
  }
  char want_fp[17];
  snprintf(want_fp, sizeof want_fp, "%016" PRIx64, fingerprint);
  if (strcmp(fp->valuestring, want_fp)) {
    s = bad(path, "the state was saved with other weights (fingerprint %s, these are %s)",
            fp->valuestring, want_fp);
    goto done;
  }
  const unsigned char *data = p + PREFIX + hl;
  size_t data_size = size - PREFIX - (size_t)hl;
  if (cJSON_GetArraySize(ts) != n) {
    char a1[32], b1[32];
    snprintf(a1, sizeof a1, "%d", cJSON_GetArraySize(ts));
    snprintf(b1, sizeof b1, "%d", n);
    s = bad(path, "the file holds %s state tensors but the model has %s", a1, b1);
    goto done;
  }
  for (int i = 0; i < n && !s; i++) {
    const cJSON *e = NULL, *it;
    cJSON_ArrayForEach(it, ts) {
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
      if (cJSON_IsString(nm) && !strcmp(nm->valuestring, t[i].name)) e = it;
    }
    if (!e) s = bad(path, "the file has no state '%s'%s", t[i].name, "");
    else s = check_entry(path, e, &t[i], data_size, &offsets[i]);
  }
  if (s) goto done;
  for (int i = 0; i < n; i++) memcpy(t[i].data, data + offsets[i], tensor_bytes(&t[i].type));
  *out_position = (int64_t)pos->valuedouble;
done:
  cJSON_Delete(h);
  free(offsets);
  free(file);
  return s;
}

/* ---- through the backend interface ----------------------------------------- */

/* Host copies of the backend's state tensors (free_tensors frees them). */
static ssm_status host_tensors(const ssm_backend *b, ssm_state_tensor **out) {
  ssm_state_tensor *t;
  SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)b->nstates + 1, sizeof *t, (void **)&t),
                          "the state tensors"));
  for (int i = 0; i < b->nstates; i++) {
    t[i].name = b->states[i].name;
    t[i].type = b->states[i].type;
    ssm_status s = ssm_alloc(tensor_bytes(&t[i].type), 1, &t[i].data);
    if (s) {
      for (int j = 0; j < i; j++) free(t[j].data);
      free(t);
      return ssm_status_wrap(s, "state '%s'", b->states[i].name);
    }
  }
  *out = t;
  return NULL;
}

static void free_tensors(ssm_state_tensor *t, int n) {
  for (int i = 0; i < n; i++) free(t[i].data);
  free(t);
}

ssm_status ssm_backend_state_save(ssm_backend *b, const char *path) {
  ssm_state_tensor *t;
  SSM_TRY(host_tensors(b, &t));
  ssm_status s = NULL;
  for (int i = 0; i < b->nstates && !s; i++) s = b->ops->state_read(b, i, t[i].data);
  if (!s) s = ssm_state_save(path, b->arch, b->fingerprint, b->position, t, b->nstates);
  free_tensors(t, b->nstates);
  return s;
}

ssm_status ssm_backend_state_load(ssm_backend *b, const char *path) {
  ssm_state_tensor *t;
  int64_t pos = 0;
  SSM_TRY(host_tensors(b, &t));
  ssm_status s = ssm_state_load(path, b->arch, b->fingerprint, &pos, t, b->nstates);
  if (!s && b->max_seq && pos > b->max_seq)
    s = ssm_status_new(SSM_ERR_INVALID, "%s: the state is at position %lld, past --max-seq %lld",
                       path, (long long)pos, (long long)b->max_seq);
  for (int i = 0; i < b->nstates && !s; i++) s = b->ops->state_write(b, i, t[i].data);
  if (!s) b->position = pos;
  free_tensors(t, b->nstates);
  return s;
}
