/*
 * safetensors.c — reading Hugging Face safetensors checkpoints.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON that
 * map tensor names to {dtype, shape, data_offsets}, then the data section.
 * Files are mmap'd read-only and stay mapped until ssm_st_close; every header
 * field is checked (with overflow-checked arithmetic) before any pointer into
 * the mapping is formed, so a corrupt file is an error, never a crash. A
 * sharded checkpoint is a model.safetensors.index.json whose weight_map names
 * the shard of each tensor. Tensors of all shards are kept in one array sorted
 * by name for binary-search lookup.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/weights/weights.h"

#define ST_MAX_HEADER ((size_t)100 << 20)
#define ST_MAX_INT 9007199254740992.0 /* 2^53: larger JSON numbers are inexact */

typedef struct {
  void *map;
  size_t size;
} st_mapping;

struct ssm_st {
  const char *path; /* as given to ssm_st_open, for messages */
  ssm_arena *arena; /* names and paths */
  st_mapping *maps;
  int nmaps, capmaps;
  ssm_st_tensor *tensors; /* sorted by name after open */
  int n, cap;
};

/* One tensor's byte range in its file's data section, for the overlap check. */
typedef struct {
  size_t begin, end;
  const char *name;
} st_range;

/* ---- helpers -------------------------------------------------------------- */

static int name_cmp(const void *a, const void *b) {
  return strcmp(((const ssm_st_tensor *)a)->name, ((const ssm_st_tensor *)b)->name);
}

static int range_cmp(const void *a, const void *b) {
  const st_range *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* 1 if `j` is a JSON integer in [0, 2^53]; stores it in *out. */
static int json_uint(const cJSON *j, size_t *out) {
  if (!cJSON_IsNumber(j)) return 0;
  double d = j->valuedouble;
  if (!(d >= 0 && d <= ST_MAX_INT) || d != floor(d)) return 0;
  if ((double)(size_t)d != d) return 0;
  *out = (size_t)d;
  return 1;
}

static int parse_st_dtype(const char *s, ssm_dtype *out) {
  static const struct { const char *name; ssm_dtype d; } known[] = {
      {"F32", SSM_F32}, {"F16", SSM_F16}, {"BF16", SSM_BF16}, {"I32", SSM_I32}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (!strcmp(s, known[i].name)) {
      *out = known[i].d;
      return 1;
    }
  return 0;
}

static const char *st_dtype_name(ssm_dtype d) {
  static const char *const names[SSM_DTYPE_COUNT] = {"F32", "F16", "BF16", "I32"};
  return names[d];
}

static char *format_dims(char *buf, size_t n, int rank, const int64_t *dims) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

static ssm_st_tensor *push_tensor(ssm_st *st) {
  if (st->n == st->cap) {
    int cap = st->cap ? st->cap * 2 : 64;
    ssm_st_tensor *t = realloc(st->tensors, (size_t)cap * sizeof *t);
    if (!t) abort();
    st->tensors = t;
    st->cap = cap;
  }
  ssm_st_tensor *t = &st->tensors[st->n++];
  memset(t, 0, sizeof *t);
  return t;
}

static void push_mapping(ssm_st *st, void *map, size_t size) {
  if (st->nmaps == st->capmaps) {
    int cap = st->capmaps ? st->capmaps * 2 : 4;
    st_mapping *m = realloc(st->maps, (size_t)cap * sizeof *m);
    if (!m) abort();
    st->maps = m;
    st->capmaps = cap;
  }
  st->maps[st->nmaps++] = (st_mapping){map, size};
}

/* Maps `path` read-only; the mapping is owned by `st` from then on. */
static ssm_status map_file(ssm_st *st, const char *path, const uint8_t **out_base,
                           size_t *out_size) {
  *out_base = NULL;
  *out_size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ssm_status_new(SSM_ERR_IO, "%s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return ssm_status_new(SSM_ERR_IO, "%s: not a regular file", path);
  }
  if ((uint64_t)sb.st_size < 8) {
    close(fd);
    return ssm_status_new(SSM_ERR_INVALID,
                          "%s: file is %lld bytes, too short for a safetensors header",
                          path, (long long)sb.st_size);
  }
  if ((uint64_t)sb.st_size > SIZE_MAX) {
    close(fd);
    return ssm_status_new(SSM_ERR_INVALID, "%s: file too large to map", path);
  }
  size_t size = (size_t)sb.st_size;
  void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  close(fd);
  if (map == MAP_FAILED)
    return ssm_status_new(SSM_ERR_IO, "%s: mmap: %s", path, strerror(err));
  push_mapping(st, map, size);
  *out_base = map;
  *out_size = size;
  return NULL;
}

/* ---- one file ------------------------------------------------------------- */

/* Validates one header entry and appends it to st->tensors. */
static ssm_status parse_entry(ssm_st *st, const char *path, const cJSON *e,
                              const uint8_t *data, size_t data_size, st_range *out_range) {
  const char *name = e->string;
  if (!cJSON_IsObject(e))
    return ssm_status_new(SSM_ERR_INVALID, "%s: tensor '%s': entry is not an object", path, name);
  const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  if (!cJSON_IsString(jd))
    return ssm_status_new(SSM_ERR_INVALID, "%s: tensor '%s': dtype missing or not a string",
                          path, name);
  ssm_dtype dtype;
  if (!parse_st_dtype(jd->valuestring, &dtype))
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: unsupported dtype '%s' for tensor '%s'",
                          path, jd->valuestring, name);

  const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
  if (!cJSON_IsArray(js))
    return ssm_status_new(SSM_ERR_INVALID, "%s: tensor '%s': shape missing or not an array",
                          path, name);
  int rank = cJSON_GetArraySize(js);
  if (rank > SSM_MAX_RANK)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: tensor '%s': rank %d exceeds %d", path,
                          name, rank, SSM_MAX_RANK);
  int64_t dims[SSM_MAX_RANK] = {0};
  size_t numel = 1, nbytes;
  int i = 0;
  for (const cJSON *d = js->child; d; d = d->next, i++) {
    size_t v;
    if (!json_uint(d, &v))
      return ssm_status_new(SSM_ERR_INVALID,
                            "%s: tensor '%s': shape must hold non-negative integers", path, name);
    if (!ssm_size_mul(numel, v, &numel))
      return ssm_status_new(SSM_ERR_INVALID, "%s: tensor '%s': shape element count overflows",
                            path, name);
    dims[i] = (int64_t)v;
  }
  if (!ssm_size_mul(numel, ssm_dtype_size(dtype), &nbytes))
    return ssm_status_new(SSM_ERR_INVALID, "%s: tensor '%s': byte size overflows", path, name);

  const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  size_t begin, end;
  if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !json_uint(jo->child, &begin) ||
      !json_uint(jo->child->next, &end))
    return ssm_status_new(SSM_ERR_INVALID,
                          "%s: tensor '%s': data_offsets must be [begin,end] integers", path,
                          name);
  if (begin > end)
    return ssm_status_new(SSM_ERR_INVALID, "%s: tensor '%s': data_offsets [%zu,%zu] decrease",
                          path, name, begin, end);
  if (end > data_size)
    return ssm_status_new(SSM_ERR_INVALID,
                          "%s: tensor '%s': data_offsets [%zu,%zu] exceed the data section "
                          "(%zu bytes)",
                          path, name, begin, end, data_size);
  if (end - begin != nbytes) {
    char sb[96];
    return ssm_status_new(SSM_ERR_INVALID,
                          "%s: tensor '%s': data_offsets [%zu,%zu] hold %zu bytes but %s %s "
                          "needs %zu",
                          path, name, begin, end, end - begin, st_dtype_name(dtype),
                          format_dims(sb, sizeof sb, rank, dims), nbytes);
  }

  ssm_st_tensor *t = push_tensor(st);
  t->name = ssm_arena_strdup(st->arena, name);
  t->dtype = dtype;
  t->rank = rank;
  memcpy(t->shape, dims, sizeof dims);
  t->data = data + begin;
  t->nbytes = nbytes;
  t->file = path;
  *out_range = (st_range){begin, end, t->name};
  return NULL;
}

/* Rejects two non-empty tensors of one file sharing bytes. */
static ssm_status check_overlaps(const char *path, st_range *r, int n) {
  qsort(r, (size_t)n, sizeof *r, range_cmp);
  const st_range *prev = NULL;
  for (int i = 0; i < n; i++) {
    if (r[i].begin == r[i].end) continue;
    if (prev && r[i].begin < prev->end)
      return ssm_status_new(SSM_ERR_INVALID, "%s: tensors '%s' [%zu,%zu] and '%s' [%zu,%zu] overlap",
                            path, prev->name, prev->begin, prev->end, r[i].name, r[i].begin,
                            r[i].end);
    if (!prev || r[i].end > prev->end) prev = &r[i];
  }
  return NULL;
}

static ssm_status parse_header(ssm_st *st, const char *path, const cJSON *root,
                               const uint8_t *data, size_t data_size) {
  if (!cJSON_IsObject(root))
    return ssm_status_new(SSM_ERR_INVALID, "%s: header is not a JSON object", path);
  int n = cJSON_GetArraySize(root);
  st_range *ranges = calloc((size_t)n + 1, sizeof *ranges);
  if (!ranges) abort();
  int nr = 0;
  ssm_status s = NULL;
  for (const cJSON *e = root->child; e && !s; e = e->next) {
    if (!strcmp(e->string, "__metadata__")) {
      if (!cJSON_IsObject(e))
        s = ssm_status_new(SSM_ERR_INVALID, "%s: __metadata__ is not an object", path);
      continue;
    }
    s = parse_entry(st, path, e, data, data_size, &ranges[nr]);
    if (!s) nr++;
  }
  if (!s) s = check_overlaps(path, ranges, nr);
  free(ranges);
  return s;
}

/* Maps and validates one .safetensors file, appending its tensors. */
static ssm_status load_file(ssm_st *st, const char *path) {
  const uint8_t *base;
  size_t size;
  SSM_TRY(map_file(st, path, &base, &size));
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | base[i];
  if (hlen > ST_MAX_HEADER)
    return ssm_status_new(SSM_ERR_INVALID,
                          "%s: header length %llu is absurd (limit %zu bytes)", path,
                          (unsigned long long)hlen, ST_MAX_HEADER);
  if (hlen > size - 8)
    return ssm_status_new(SSM_ERR_INVALID,
                          "%s: header length %llu exceeds the file (%zu bytes)", path,
                          (unsigned long long)hlen, size);
  size_t header_len = (size_t)hlen;
  char *text = malloc(header_len + 1);
  if (!text) abort();
  memcpy(text, base + 8, header_len);
  text[header_len] = 0;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, header_len, &end, 0);
  ssm_status s = NULL;
  if (!root) {
    size_t at = end && end >= text ? (size_t)(end - text) : 0;
    s = ssm_status_new(SSM_ERR_INVALID, "%s: header is not valid JSON (near byte %zu)", path,
                       at + 8);
  } else {
    while (end && end < text + header_len && strchr(" \t\r\n", *end) && *end) end++;
    if (end != text + header_len)
      s = ssm_status_new(SSM_ERR_INVALID, "%s: header has trailing bytes after the JSON", path);
  }
  if (!s) s = parse_header(st, path, root, base + 8 + header_len, size - 8 - header_len);
  cJSON_Delete(root);
  free(text);
  return s;
}

/* ---- index ----------------------------------------------------------------- */

static const ssm_st_tensor *find(const ssm_st *st, const char *name) {
  ssm_st_tensor key = {.name = name};
  if (!st->n) return NULL;
  return bsearch(&key, st->tensors, (size_t)st->n, sizeof key, name_cmp);
}

static ssm_status sort_and_check(ssm_st *st) {
  if (st->n) qsort(st->tensors, (size_t)st->n, sizeof *st->tensors, name_cmp);
  for (int i = 1; i < st->n; i++) {
    const ssm_st_tensor *a = &st->tensors[i - 1], *b = &st->tensors[i];
    if (strcmp(a->name, b->name)) continue;
    if (a->file == b->file)
      return ssm_status_new(SSM_ERR_INVALID, "%s: duplicate tensor '%s'", a->file, a->name);
    return ssm_status_new(SSM_ERR_INVALID, "tensor '%s' appears in both %s and %s", a->name,
                          a->file, b->file);
  }
  return NULL;
}

static ssm_status load_index(ssm_st *st, const char *path) {
  char *text;
  size_t len;
  SSM_TRY(ssm_file_read(path, ST_MAX_HEADER, &text, &len));
  cJSON *root = cJSON_ParseWithLength(text, len);
  free(text);
  ssm_status s = NULL;
  const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  if (!root)
    s = ssm_status_new(SSM_ERR_INVALID, "%s: not valid JSON", path);
  else if (!cJSON_IsObject(wm))
    s = ssm_status_new(SSM_ERR_INVALID, "%s: no \"weight_map\" object", path);

  const char *slash = strrchr(path, '/');
  int dirlen = slash ? (int)(slash - path) : 1;
  const char *dir = slash ? path : ".";
  /* Distinct shards, in first-seen order (a checkpoint has few). */
  const char **shards = NULL;
  int nshards = 0;
  for (const cJSON *e = wm ? wm->child : NULL; e && !s; e = e->next) {
    if (!cJSON_IsString(e) || !e->valuestring[0])
      s = ssm_status_new(SSM_ERR_INVALID, "%s: tensor '%s': shard is not a file name", path,
                         e->string);
    else if (strchr(e->valuestring, '/') || strstr(e->valuestring, ".."))
      s = ssm_status_new(SSM_ERR_INVALID, "%s: tensor '%s': shard name '%s' may not contain "
                         "'/' or '..'", path, e->string, e->valuestring);
    if (s) break;
    int k = 0;
    while (k < nshards && strcmp(shards[k], e->valuestring)) k++;
    if (k < nshards) continue;
    const char **ns = realloc(shards, (size_t)(nshards + 1) * sizeof *ns);
    if (!ns) abort();
    shards = ns;
    shards[nshards++] = e->valuestring;
  }
  for (int k = 0; k < nshards && !s; k++) {
    const char *full = ssm_arena_printf(st->arena, "%.*s/%s", dirlen, dir, shards[k]);
    s = ssm_status_wrap(load_file(st, full), "%s: shard '%s'", path, shards[k]);
  }
  free(shards);
  if (!s) s = sort_and_check(st);
  for (const cJSON *e = wm ? wm->child : NULL; e && !s; e = e->next) {
    const ssm_st_tensor *t = find(st, e->string);
    const char *tf = t ? strrchr(t->file, '/') : NULL;
    tf = tf ? tf + 1 : t ? t->file : NULL;
    if (!t || strcmp(tf, e->valuestring))
      s = ssm_status_new(SSM_ERR_INVALID, "%s: tensor '%s' is mapped to shard '%s' but is not in it",
                         path, e->string, e->valuestring);
  }
  cJSON_Delete(root);
  return s;
}

/* ---- public API ------------------------------------------------------------ */

static int is_regular(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

ssm_status ssm_st_open(const char *path, ssm_st **out) {
  *out = NULL;
  ssm_st *st = calloc(1, sizeof *st);
  if (!st) abort();
  st->arena = ssm_arena_create();
  st->path = ssm_arena_strdup(st->arena, path);
  struct stat sb;
  ssm_status s = NULL;
  if (stat(path, &sb) != 0) {
    s = ssm_status_new(SSM_ERR_IO, "%s: %s", path, strerror(errno));
  } else if (S_ISDIR(sb.st_mode)) {
    const char *single = ssm_arena_printf(st->arena, "%s/model.safetensors", path);
    const char *index = ssm_arena_printf(st->arena, "%s/model.safetensors.index.json", path);
    if (is_regular(single)) {
      s = load_file(st, single);
      if (!s) s = sort_and_check(st);
    } else if (is_regular(index)) {
      s = load_index(st, index);
    } else {
      s = ssm_status_new(SSM_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json",
                         path);
    }
  } else if (ends_with(path, ".json")) {
    s = load_index(st, st->path);
  } else {
    s = load_file(st, st->path);
    if (!s) s = sort_and_check(st);
  }
  if (s) {
    ssm_st_close(st);
    return s;
  }
  *out = st;
  return NULL;
}

void ssm_st_close(ssm_st *st) {
  if (!st) return;
  for (int i = 0; i < st->nmaps; i++) munmap(st->maps[i].map, st->maps[i].size);
  free(st->maps);
  free(st->tensors);
  ssm_arena_destroy(st->arena);
  free(st);
}

int ssm_st_count(const ssm_st *st) { return st->n; }

const ssm_st_tensor *ssm_st_at(const ssm_st *st, int i) {
  SSM_ASSERT(i >= 0 && i < st->n);
  return &st->tensors[i];
}

const ssm_st_tensor *ssm_st_find(const ssm_st *st, const char *name) { return find(st, name); }

static float load_f32(const uint8_t *p, ssm_dtype d) {
  uint16_t h;
  float f;
  switch (d) {
  case SSM_F32: memcpy(&f, p, 4); return f;
  case SSM_F16: memcpy(&h, p, 2); return ssm_f16_to_f32(h);
  case SSM_BF16: memcpy(&h, p, 2); return ssm_bf16_to_f32(h);
  default: SSM_ASSERT(0); return 0;
  }
}

ssm_status ssm_st_read(const ssm_st *st, const char *name, const ssm_type *want, void *dst) {
  const ssm_st_tensor *t = find(st, name);
  if (!t) return ssm_status_new(SSM_ERR_INVALID, "tensor '%s' not found in %s", name, st->path);
  int same = t->rank == want->rank;
  for (int i = 0; same && i < t->rank; i++) same = t->shape[i] == want->dims[i];
  if (!same) {
    char a[96], b[96];
    return ssm_status_new(SSM_ERR_INVALID,
                          "tensor '%s' has shape %s in the checkpoint but the model expects %s",
                          name, format_dims(a, sizeof a, t->rank, t->shape),
                          format_dims(b, sizeof b, want->rank, want->dims));
  }
  if (t->dtype == want->dtype) {
    if (t->nbytes) memcpy(dst, t->data, t->nbytes);
    return NULL;
  }
  if (t->dtype == SSM_I32 || want->dtype == SSM_I32)
    return ssm_status_new(SSM_ERR_INVALID, "tensor '%s' is %s in %s but the model expects %s",
                          name, st_dtype_name(t->dtype), t->file, ssm_dtype_name(want->dtype));
  size_t n = t->nbytes / ssm_dtype_size(t->dtype), ss = ssm_dtype_size(t->dtype);
  const uint8_t *src = t->data;
  for (size_t i = 0; i < n; i++) {
    float f = load_f32(src + i * ss, t->dtype);
    uint16_t h;
    switch (want->dtype) {
    case SSM_F32: memcpy((uint8_t *)dst + 4 * i, &f, 4); break;
    case SSM_F16: h = ssm_f32_to_f16(f); memcpy((uint8_t *)dst + 2 * i, &h, 2); break;
    case SSM_BF16: h = ssm_f32_to_bf16(f); memcpy((uint8_t *)dst + 2 * i, &h, 2); break;
    default: SSM_ASSERT(0);
    }
  }
  return NULL;
}

uint64_t ssm_st_fingerprint(const ssm_st *st) {
  uint64_t h = 0xcbf29ce484222325ull;
#define MIX(p, n)                                                              \
  for (size_t i_ = 0; i_ < (n); i_++) h = (h ^ ((const unsigned char *)(p))[i_]) * 0x100000001b3ull
  for (int i = 0; i < ssm_st_count(st); i++) {
    const ssm_st_tensor *t = ssm_st_at(st, i);
    MIX(t->name, strlen(t->name) + 1);
    MIX(&t->dtype, sizeof t->dtype);
    MIX(t->shape, sizeof t->shape[0] * (size_t)t->rank);
    MIX(t->data, t->nbytes < 64 ? t->nbytes : 64);
  }
#undef MIX
  return h;
}
