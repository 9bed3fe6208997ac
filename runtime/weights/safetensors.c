/*
 * safetensors.c — reading Hugging Face safetensors checkpoints.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON that
 * map tensor names to {dtype, shape, data_offsets}, then the data section.
 * Files stay open until ssm_st_close and tensors are read with pread, so a
 * file truncated or changed under a run is a read error, never a SIGBUS;
 * every header field is checked (with overflow-checked arithmetic) before
 * any tensor is read, so a corrupt file is an error, never a crash. The
 * header must be UTF-8, and a tensor's name may hold no NUL (a hole a C
 * string would cut the name at) nor raw control character; the WebGPU
 * host's reader (runtime/web/safetensors.mjs) refuses the same. A
 * sharded checkpoint is a model.safetensors.index.json whose weight_map names
 * the shard of each tensor. Tensors of all shards are kept in one array sorted
 * by name for binary-search lookup. The fingerprint is an XXH3-64 of every
 * tensor's name, dtype, shape and every byte, each tensor hashed as it is
 * read (so loading the weights costs no second pass).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "runtime/weights/weights.h"
#include "tokenizer/unicode.h"

#define ST_MAX_HEADER ((size_t)100 << 20)
#define ST_MAX_INT 9007199254740992.0 /* 2^53: larger JSON numbers are inexact */

#define READ_CHUNK ((size_t)1 << 20)

typedef struct {
  int fd;
  size_t size;
} st_file;

struct ssm_st {
  const char *path; /* as given to ssm_st_open, for messages */
  ssm_arena *arena; /* names and paths */
  SSM_VEC(st_file) files;
  SSM_VEC(ssm_st_tensor) tensors; /* sorted by name after open */
  uint64_t *hashes;  /* per tensor, once read (a cache: filled through a const st) */
  unsigned char *hashed;
  struct st_progress *progress; /* NULL: no reports (counted through a const st too) */
};

/* Progress reports: bytes hashed so far (each byte once) of all tensors'. */
struct st_progress {
  ssm_progress p;
  uint64_t done, total;
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
      {"F32", SSM_F32}, {"F16", SSM_F16}, {"BF16", SSM_BF16}, {"I32", SSM_I32},
      {"I8", SSM_Q8_0}, {"U8", SSM_Q4_0}}; /* weights.h: the blocks of pre-quantized weights */
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (!strcmp(s, known[i].name)) {
      *out = known[i].d;
      return 1;
    }
  return 0;
}

static const char *st_dtype_name(ssm_dtype d) {
  static const char *const names[SSM_DTYPE_COUNT] = {"F32", "F16", "BF16", "I32", "I8", "U8"};
  return names[d];
}

static char *format_dims(char *buf, size_t n, int rank, const int64_t *dims) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
  return buf;
}

/* Opens `path` (a regular file: no FIFO or device); the descriptor is owned
 * by `st` from then on. */
static ssm_status open_file(ssm_st *st, const char *path, int *out_index, size_t *out_size) {
  *out_index = -1;
  *out_size = 0;
  int fd;
  size_t size;
  SSM_TRY(ssm_file_open(path, &fd, &size));
  st_file f = {fd, size};
  ssm_status s = ssm_vec_push(&st->files, f);
  if (s) {
    close(fd);
    return ssm_status_wrap(s, "%s: the open files", path);
  }
  *out_index = (int)st->files.n - 1;
  *out_size = size;
  if (size < 8)
    return ssm_status_new(SSM_ERR_INVALID,
                          "%s: file is %zu bytes, too short for a safetensors header", path, size);
  return NULL;
}

/* Reads exactly `n` bytes at `offset` of file `f`. */
static ssm_status read_at(const ssm_st *st, int f, const char *path, uint64_t offset, void *dst,
                          size_t n) {
  for (size_t done = 0; done < n;) {
    ssize_t r = pread(st->files.items[f].fd, (char *)dst + done, n - done, (off_t)(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ssm_status_new(SSM_ERR_IO, "%s: read error (%s)", path, strerror(errno));
    if (r == 0)
      return ssm_status_new(SSM_ERR_IO, "%s: the file is shorter than its header says (was it "
                            "truncated or replaced while in use?)", path);
    done += (size_t)r;
  }
  return NULL;
}

/* ---- one file ------------------------------------------------------------- */

/* Validates one header entry and appends it to st->tensors. */
static ssm_status parse_entry(ssm_st *st, const char *path, const cJSON *e, int file,
                              uint64_t data_at, size_t data_size, st_range *out_range) {
  const char *name = e->string;
  if (strstr(name, "{*}"))
    return ssm_status_new(SSM_ERR_INVALID,
                          "%s: tensor '%s': the name holds \"{*}\", which names a stacked weight "
                          "(its parts are stored as name.0, name.1, ...)",
                          path, name);
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

  ssm_st_tensor t = {.name = ssm_arena_strdup(st->arena, name),
                     .dtype = dtype,
                     .rank = rank,
                     .file_index = file,
                     .offset = data_at + begin,
                     .nbytes = nbytes,
                     .file = path};
  memcpy(t.shape, dims, sizeof dims);
  SSM_TRY(ssm_arena_status(st->arena, "the tensor names"));
  SSM_TRY(ssm_status_wrap(ssm_vec_push(&st->tensors, t), "%s: the tensor table", path));
  *out_range = (st_range){begin, end, t.name};
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

static ssm_status parse_header(ssm_st *st, const char *path, const cJSON *root, int file,
                               uint64_t data_at, size_t data_size) {
  if (!cJSON_IsObject(root))
    return ssm_status_new(SSM_ERR_INVALID, "%s: header is not a JSON object", path);
  int n = cJSON_GetArraySize(root);
  void *mem;
  SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)n + 1, sizeof(st_range), &mem),
                          "%s: header of %d tensors", path, n));
  st_range *ranges = mem;
  int nr = 0;
  ssm_status s = NULL;
  for (const cJSON *e = root->child; e && !s; e = e->next) {
    if (!strcmp(e->string, "__metadata__")) {
      if (!cJSON_IsObject(e))
        s = ssm_status_new(SSM_ERR_INVALID, "%s: __metadata__ is not an object", path);
      continue;
    }
    s = parse_entry(st, path, e, file, data_at, data_size, &ranges[nr]);
    if (!s) nr++;
  }
  if (!s) s = check_overlaps(path, ranges, nr);
  free(ranges);
  return s;
}

/* The end of the JSON string that starts at s[at] (its opening quote):
 * the index just past its closing quote. */
static size_t string_end(const char *s, size_t n, size_t at) {
  for (size_t i = at + 1; i < n; i++) {
    if (s[i] == '\\') i++;
    else if (s[i] == '"') return i + 1;
  }
  return n;
}

/* The end of the JSON value that starts at s[at] (whitespace before it
 * skipped), in text the parser accepted. */
static size_t value_end(const char *s, size_t n, size_t at) {
  int depth = 0;
  for (size_t i = at; i < n; i++) {
    if (s[i] == '"') i = string_end(s, n, i) - 1;
    else if (s[i] == '{' || s[i] == '[') depth++;
    else if (s[i] == '}' || s[i] == ']') {
      if (--depth < 0) return i;
      if (!depth) return i + 1;
    } else if (s[i] == ',' && !depth) return i;
  }
  return n;
}

/* Why the raw JSON key s[0..n) (quotes included) cannot name a tensor, or
 * NULL: a NUL (escaped as \u0000, or a raw byte) would cut the name short
 * in C, a raw control character is not JSON (cJSON lets it through where
 * JSON.parse does not), and a name must be UTF-8 as the format says. */
static const char *key_problem(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    if (!s[i] || (s[i] == '\\' && i + 5 < n && s[i + 1] == 'u' && !memcmp(s + i + 2, "0000", 4)))
      return "the name holds a NUL character (\\u0000), a hole no tensor name may have";
    if ((unsigned char)s[i] < 0x20) return "the name holds a raw control character";
    if (s[i] == '\\') {
      i += 2;
      continue;
    }
    int k = ssm_utf8_decode(s + i, n - i, &cp);
    if (!k) return "the name is not valid UTF-8";
    i += (size_t)k;
  }
  return NULL;
}

/* Checks the names of the header's top-level entries as written (the
 * parsed strings end at a NUL), then that the rest of it is UTF-8 with no
 * raw control character inside a string, as JSON.parse would have it. */
static ssm_status check_names(const char *path, const char *text, size_t n) {
  size_t i = 0;
  while (i < n && text[i] != '{') i++;
  for (int entry = 0; ++i < n; entry++) {
    while (i < n && strchr(" \t\r\n", text[i]) && text[i]) i++;
    if (i >= n || text[i] != '"') break;
    size_t end = string_end(text, n, i);
    const char *why = key_problem(text + i, end - i);
    if (why)
      return ssm_status_new(SSM_ERR_INVALID, "%s: tensor entry %d of the header (at byte %zu): %s",
                            path, entry, 8 + i, why);
    i = end;
    while (i < n && text[i] != ':') i++;
    i++;
    while (i < n && strchr(" \t\r\n", text[i]) && text[i]) i++;
    i = value_end(text, n, i);
    while (i < n && text[i] != ',' && text[i] != '}') i++;
    if (i >= n || text[i] == '}') break;
  }
  int quoted = 0;
  for (size_t at = 0; at < n;) {
    uint32_t cp;
    int k = ssm_utf8_decode(text + at, n - at, &cp);
    if (!k)
      return ssm_status_new(SSM_ERR_INVALID, "%s: header is not valid UTF-8 (at byte %zu)", path,
                            8 + at);
    if (quoted && cp < 0x20)
      return ssm_status_new(SSM_ERR_INVALID, "%s: header has a raw control character in a string "
                            "(at byte %zu)", path, 8 + at);
    if (cp == '"') quoted = !quoted;
    at += (size_t)k + (quoted && cp == '\\');
  }
  return NULL;
}

/* Opens and validates one .safetensors file, appending its tensors. */
static ssm_status load_file(ssm_st *st, const char *path) {
  int file;
  size_t size;
  unsigned char prefix[8];
  SSM_TRY(open_file(st, path, &file, &size));
  SSM_TRY(read_at(st, file, path, 0, prefix, 8));
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | prefix[i];
  if (hlen > ST_MAX_HEADER)
    return ssm_status_new(SSM_ERR_INVALID,
                          "%s: header length %llu is absurd (limit %zu bytes)", path,
                          (unsigned long long)hlen, ST_MAX_HEADER);
  if (hlen > size - 8)
    return ssm_status_new(SSM_ERR_INVALID,
                          "%s: header length %llu exceeds the file (%zu bytes)", path,
                          (unsigned long long)hlen, size);
  size_t header_len = (size_t)hlen;
  void *mem;
  SSM_TRY(ssm_status_wrap(ssm_alloc(header_len + 1, 1, &mem), "%s: header of %zu bytes", path,
                          header_len));
  char *text = mem;
  ssm_status rs = read_at(st, file, path, 8, text, header_len);
  if (rs) {
    free(text);
    return rs;
  }
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
  if (!s && cJSON_IsObject(root)) s = check_names(path, text, header_len);
  if (!s) s = parse_header(st, path, root, file, 8 + header_len, size - 8 - header_len);
  cJSON_Delete(root);
  free(text);
  return s;
}

/* ---- index ----------------------------------------------------------------- */

static const ssm_st_tensor *find(const ssm_st *st, const char *name) {
  ssm_st_tensor key = {.name = name};
  if (!st->tensors.n) return NULL;
  return bsearch(&key, st->tensors.items, st->tensors.n, sizeof key, name_cmp);
}

static ssm_status sort_and_check(ssm_st *st) {
  if (st->tensors.n) qsort(st->tensors.items, st->tensors.n, sizeof *st->tensors.items, name_cmp);
  for (size_t i = 1; i < st->tensors.n; i++) {
    const ssm_st_tensor *a = &st->tensors.items[i - 1], *b = &st->tensors.items[i];
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
  cJSON *root;
  ssm_status s = ssm_json_parse(path, text, len, &root);
  free(text);
  if (s) return s;
  const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  if (!cJSON_IsObject(wm))
    s = ssm_status_new(SSM_ERR_INVALID, "%s: no \"weight_map\" object", path);

  const char *slash = strrchr(path, '/');
  int dirlen = slash ? (int)(slash - path) : 1;
  const char *dir = slash ? path : ".";
  /* Distinct shards, in first-seen order (a checkpoint has few). */
  SSM_VEC(const char *) shards = {0};
  for (const cJSON *e = wm ? wm->child : NULL; e && !s; e = e->next) {
    if (!cJSON_IsString(e) || !e->valuestring[0])
      s = ssm_status_new(SSM_ERR_INVALID, "%s: tensor '%s': shard is not a file name", path,
                         e->string);
    else if (strchr(e->valuestring, '/') || strstr(e->valuestring, ".."))
      s = ssm_status_new(SSM_ERR_INVALID, "%s: tensor '%s': shard name '%s' may not contain "
                         "'/' or '..'", path, e->string, e->valuestring);
    if (s) break;
    size_t k = 0;
    while (k < shards.n && strcmp(shards.items[k], e->valuestring)) k++;
    if (k == shards.n) s = ssm_status_wrap(ssm_vec_push(&shards, e->valuestring), "%s: the shards", path);
  }
  for (size_t k = 0; k < shards.n && !s; k++) {
    const char *full = ssm_arena_printf(st->arena, "%.*s/%s", dirlen, dir, shards.items[k]);
    s = ssm_arena_status(st->arena, path);
    if (!s) s = ssm_status_wrap(load_file(st, full), "%s: shard '%s'", path, shards.items[k]);
  }
  ssm_vec_free(&shards);
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
  ssm_st *st;
  SSM_TRY(ssm_status_wrap(ssm_alloc(1, sizeof *st, (void **)&st), "%s", path));
  ssm_status s = ssm_arena_create(&st->arena);
  if (!s) st->path = ssm_arena_strdup(st->arena, path);
  if (!s) s = ssm_status_wrap(ssm_arena_status(st->arena, "the weights' path"), "%s", path);
  struct stat sb;
  if (s) {
  } else if (stat(path, &sb) != 0) {
    s = ssm_status_new(SSM_ERR_IO, "%s: %s", path, strerror(errno));
  } else if (S_ISDIR(sb.st_mode)) {
    const char *single = ssm_arena_printf(st->arena, "%s/model.safetensors", path);
    const char *index = ssm_arena_printf(st->arena, "%s/model.safetensors.index.json", path);
    if ((s = ssm_arena_status(st->arena, path))) {
    } else if (is_regular(single)) {
      s = load_file(st, single);
      if (!s) s = sort_and_check(st);
    } else if (is_regular(index)) {
      s = load_index(st, index);
    } else if (!stat(single, &sb)) { /* a FIFO, a device...: load_file names what it is */
      s = load_file(st, single);
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
  if (!s) s = ssm_status_wrap(ssm_alloc(st->tensors.n + 1, sizeof *st->hashes, (void **)&st->hashes),
                              "%s: the tensors' hashes", path);
  if (!s) s = ssm_status_wrap(ssm_alloc(st->tensors.n + 1, 1, (void **)&st->hashed),
                              "%s: the tensors' hashes", path);
  if (!s) s = ssm_arena_status(st->arena, "the tensor names");
  if (s) {
    ssm_st_close(st);
    return s;
  }
  *out = st;
  return NULL;
}

void ssm_st_close(ssm_st *st) {
  if (!st) return;
  for (size_t i = 0; i < st->files.n; i++) close(st->files.items[i].fd);
  ssm_vec_free(&st->files);
  free(st->hashes);
  free(st->hashed);
  free(st->progress);
  ssm_vec_free(&st->tensors);
  ssm_arena_destroy(st->arena);
  free(st);
}

int ssm_st_count(const ssm_st *st) { return (int)st->tensors.n; }

const ssm_st_tensor *ssm_st_at(const ssm_st *st, int i) {
  SSM_ASSERT(i >= 0 && (size_t)i < st->tensors.n);
  return &st->tensors.items[i];
}

const ssm_st_tensor *ssm_st_find(const ssm_st *st, const char *name) { return find(st, name); }

ssm_dtype ssm_st_float_dtype(const ssm_st *st) {
  uint64_t bytes[SSM_DTYPE_COUNT] = {0};
  for (int i = 0; i < ssm_st_count(st); i++) bytes[ssm_st_at(st, i)->dtype] += ssm_st_at(st, i)->nbytes;
  ssm_dtype best = SSM_F32;
  for (ssm_dtype d = SSM_F16; d <= SSM_BF16; d++)
    if (bytes[d] > bytes[best]) best = d;
  return best;
}

ssm_status ssm_st_path_dtype(const char *path, ssm_dtype *out) {
  ssm_st *st;
  SSM_TRY(ssm_st_open(path, &st));
  *out = ssm_st_float_dtype(st);
  ssm_st_close(st);
  return NULL;
}

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

/* Reads tensor t in chunks of at most READ_CHUNK bytes, handing each to
 * `chunk` (with its element index), and hashes every byte on the way. */
static ssm_status read_tensor(const ssm_st *st, size_t ti,
                              void (*chunk)(const uint8_t *p, size_t n, size_t at, void *u),
                              void *user) {
  const ssm_st_tensor *t = &st->tensors.items[ti];
  size_t es = ssm_dtype_size(t->dtype), step = READ_CHUNK / es * es;
  uint8_t *buf;
  SSM_TRY(ssm_status_wrap(ssm_alloc(t->nbytes < step ? t->nbytes : step, 1, (void **)&buf),
                          "tensor '%s'", t->name));
  XXH3_state_t *h = XXH3_createState();
  if (!h) {
    free(buf);
    return ssm_status_new(SSM_ERR_NOMEM, "tensor '%s': out of host memory for its hash state",
                          t->name);
  }
  XXH3_64bits_reset(h);
  ssm_status s = NULL;
  struct st_progress *pr = st->hashed[ti] ? NULL : st->progress;
  for (size_t done = 0; done < t->nbytes && !s; done += step) {
    size_t n = t->nbytes - done < step ? t->nbytes - done : step;
    s = read_at(st, t->file_index, t->file, t->offset + done, buf, n);
    if (s) break;
    XXH3_64bits_update(h, buf, n);
    if (chunk) chunk(buf, n, done / es, user);
    if (pr) s = ssm_progress_report(&pr->p, "loading weights", pr->done += n, pr->total);
  }
  if (!s) {
    st->hashes[ti] = XXH3_64bits_digest(h);
    st->hashed[ti] = 1;
  }
  XXH3_freeState(h);
  free(buf);
  return s;
}

typedef struct {
  ssm_dtype from, to;
  void *dst;
} convert;

/* Copies (same dtype) or converts (f32, f16, bf16) one chunk into dst. */
static void convert_chunk(const uint8_t *src, size_t n, size_t at, void *user) {
  const convert *c = user;
  size_t ss = ssm_dtype_size(c->from), ds = ssm_dtype_size(c->to);
  if (c->from == c->to) {
    memcpy((uint8_t *)c->dst + at * ds, src, n);
    return;
  }
  for (size_t i = 0; i < n / ss; i++) {
    float f = load_f32(src + i * ss, c->from);
    uint16_t h;
    uint8_t *d = (uint8_t *)c->dst + (at + i) * ds;
    switch (c->to) {
    case SSM_F32: memcpy(d, &f, 4); break;
    case SSM_F16: h = ssm_f32_to_f16(f); memcpy(d, &h, 2); break;
    case SSM_BF16: h = ssm_f32_to_bf16(f); memcpy(d, &h, 2); break;
    default: SSM_ASSERT(0);
    }
  }
}

static ssm_status check_one(const ssm_st *st, const char *name, const ssm_type *want) {
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
  /* f32, f16 and bf16 convert to each other and quantize; other bytes are read as they are */
  if (t->dtype != want->dtype &&
      (t->dtype == SSM_I32 || ssm_dtype_is_quant(t->dtype) || want->dtype == SSM_I32))
    return ssm_status_new(SSM_ERR_INVALID, "tensor '%s' is %s in %s but the model expects %s",
                          name, st_dtype_name(t->dtype), t->file, ssm_dtype_name(want->dtype));
  return NULL;
}

static ssm_status read_one(const ssm_st *st, const char *name, const ssm_type *want, void *dst) {
  SSM_TRY(check_one(st, name, want));
  const ssm_st_tensor *t = find(st, name);
  convert c = {t->dtype, want->dtype, dst};
  return read_tensor(st, (size_t)(t - st->tensors.items), convert_chunk, &c);
}

/* A stacked weight's parts: tensor k is the name with k in place of "{*}",
 * of want's type without its first dim. Calls `fn` on each (with its
 * destination when dst is not NULL). */
static ssm_status each_part(const ssm_st *st, const char *name, const ssm_type *want, void *dst,
                            ssm_status (*fn)(const ssm_st *, const char *, const ssm_type *, void *)) {
  const char *hole = strstr(name, "{*}");
  if (want->rank < 2)
    return ssm_status_new(SSM_ERR_INVALID, "stacked tensor '%s' needs a shape [parts, ...], not rank %d",
                          name, want->rank);
  ssm_type part = *want;
  part.rank = want->rank - 1;
  for (int i = 0; i < part.rank; i++) part.dims[i] = want->dims[i + 1];
  size_t bytes = (size_t)ssm_type_numel(&part) * ssm_dtype_size(want->dtype);
  ssm_sb nm = {0};
  ssm_status s = NULL;
  for (int64_t k = 0; k < want->dims[0] && !s; k++) {
    ssm_sb_clear(&nm);
    ssm_sb_printf(&nm, "%.*s%lld%s", (int)(hole - name), name, (long long)k, hole + 3);
    s = ssm_sb_status(&nm, "a stacked tensor's part name");
    if (!s) s = fn(st, ssm_sb_str(&nm), &part, dst ? (uint8_t *)dst + (size_t)k * bytes : NULL);
    if (s) s = ssm_status_wrap(s, "part %lld of stacked tensor '%s'", (long long)k, name);
  }
  ssm_sb_free(&nm);
  return s;
}

static ssm_status check_part(const ssm_st *st, const char *name, const ssm_type *want, void *dst) {
  return check_one(st, name, want);
}

ssm_status ssm_st_quant_names(const char *name, ssm_dtype d, char **out_q, char **out_d) {
  *out_q = *out_d = NULL;
  SSM_ASSERT(ssm_dtype_is_quant(d));
  const char *hole = strstr(name, "{*}");
  ssm_sb q = {0}, sc = {0};
  if (hole) ssm_sb_printf(&q, "%.*s*%s.%s", (int)(hole - name), name, hole + 3, ssm_dtype_name(d));
  else ssm_sb_printf(&q, "%s.%s", name, ssm_dtype_name(d));
  ssm_sb_printf(&sc, "%s.scales", ssm_sb_str(&q));
  ssm_status s = ssm_sb_take(&q, "a quantized tensor's name", out_q);
  if (!s) s = ssm_sb_take(&sc, "a quantized tensor's name", out_d);
  else ssm_sb_free(&sc);
  if (s) {
    free(*out_q);
    *out_q = NULL;
  }
  return s;
}

/* The stored types of a pre-quantized weight of type `want` (weights.h:
 * ssm_st_quant_names): its blocks (q8_0: I8 in want's shape; q4_0: U8, two
 * elements a byte, the last dim halved when it is even, else one dim of
 * all the bytes) and its scales (F16, the last dim counting blocks). */
static void quant_types(const ssm_type *want, ssm_type *q, ssm_type *d) {
  ssm_qlayout l = ssm_qlayout_of(want);
  *q = *want;
  *d = *want;
  d->dtype = SSM_F16;
  d->dims[want->rank - 1] = l.blocks;
  if (want->dtype != SSM_Q4_0) return;
  if (l.k % 2 == 0) q->dims[want->rank - 1] = l.k / 2;
  else *q = (ssm_type){.dtype = SSM_Q4_0, .rank = 1, .dims = {(l.rows * l.k + 1) / 2}};
}

/* A weight stored quantized (ssm_st_quant_names): 1 when its blocks are in
 * `st`, with their names in *qn and *dn (free() them). */
static ssm_status find_quant(const ssm_st *st, const char *name, const ssm_type *want, char **qn,
                             char **dn, int *found) {
  *found = 0;
  SSM_TRY(ssm_st_quant_names(name, want->dtype, qn, dn));
  *found = find(st, *qn) != NULL;
  return NULL;
}

static ssm_status check_quant(const ssm_st *st, const char *qn, const char *dn,
                              const ssm_type *want) {
  ssm_type q, d;
  quant_types(want, &q, &d);
  SSM_TRY(check_one(st, qn, &q));
  return check_one(st, dn, &d);
}

/* A pre-quantized weight's bytes, laid out as ir.h's ssm_qlayout: its
 * blocks, then its scales (each finite), with the layout's zero padding. */
static ssm_status read_prequant(const ssm_st *st, const char *qn, const char *dn,
                                const ssm_type *want, void *dst) {
  SSM_TRY(check_quant(st, qn, dn, want));
  ssm_type q, d;
  quant_types(want, &q, &d);
  ssm_qlayout l = ssm_qlayout_of(want);
  uint8_t *p = dst;
  size_t qbytes = find(st, qn)->nbytes, scales = (size_t)(l.rows * l.blocks);
  memset(p + qbytes, 0, (size_t)l.scales - qbytes);
  memset(p + l.scales + scales * 2, 0, (size_t)(l.bytes - l.scales) - scales * 2);
  SSM_TRY(read_one(st, qn, &q, p));
  SSM_TRY(read_one(st, dn, &d, p + l.scales));
  for (size_t i = 0; i < scales; i++) {
    uint16_t h;
    memcpy(&h, p + l.scales + i * 2, 2);
    if ((h & 0x7c00) == 0x7c00)
      return ssm_status_new(SSM_ERR_INVALID, "tensor '%s' in %s: scale %zu is not finite", dn,
                            st->path, i);
  }
  return NULL;
}

ssm_status ssm_st_check(const ssm_st *st, const char *name, const ssm_type *want) {
  if (ssm_dtype_is_quant(want->dtype)) {
    char *qn, *dn;
    int found;
    SSM_TRY(find_quant(st, name, want, &qn, &dn, &found));
    ssm_status s = found ? check_quant(st, qn, dn, want) : NULL;
    free(qn);
    free(dn);
    if (found) return s;
  }
  if (strstr(name, "{*}")) return each_part(st, name, want, NULL, check_part);
  return check_one(st, name, want);
}

/* Rows r0..r1-1 of a tensor being quantized, on a thread of their own. */
typedef struct {
  const float *src;
  const ssm_qlayout *l;
  uint8_t *dst;
  int64_t r0, r1, bad;
} q_part;

static void *quantize_part(void *arg) {
  q_part *p = arg;
  p->bad = ssm_quantize_rows(p->src, p->l, p->dst, p->r0, p->r1);
  return NULL;
}

/* ssm_quantize on up to every core (the rows split evenly at even rows;
 * the parts write disjoint bytes, so the result is the same on any count
 * of them).
 * The first element that cannot be held, or -1. */
static int64_t quantize_all(const float *src, const ssm_qlayout *l, uint8_t *dst) {
  enum { MAX_PARTS = 64, MIN_ROWS = 64 };
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t parts = cores < 1 ? 1 : cores > MAX_PARTS ? MAX_PARTS : cores;
  if (parts > l->rows / MIN_ROWS) parts = l->rows / MIN_ROWS;
  if (parts < 2) return ssm_quantize(src, l, dst);
  ssm_quantize_pad(l, dst);
  q_part p[MAX_PARTS];
  pthread_t th[MAX_PARTS];
  int started[MAX_PARTS] = {0};
  for (int64_t i = 0; i < parts; i++) {
    p[i] = (q_part){src, l, dst, l->rows * i / parts & ~(int64_t)1,
                    i + 1 < parts ? l->rows * (i + 1) / parts & ~(int64_t)1 : l->rows, -1};
    /* a part whose thread does not start runs here */
    started[i] = i > 0 && !pthread_create(&th[i], NULL, quantize_part, &p[i]);
  }
  for (int64_t i = 0; i < parts; i++) {
    if (started[i]) pthread_join(th[i], NULL);
    else quantize_part(&p[i]);
  }
  for (int64_t i = 0; i < parts; i++)
    if (p[i].bad >= 0) return p[i].bad;
  return -1;
}

/* q8_0 or q4_0: the tensor read as f32 (one tensor of host memory), then
 * quantized a row at a time on every core (ir.h: ssm_quantize). */
static ssm_status read_quant(const ssm_st *st, const char *name, const ssm_type *want, void *dst) {
  ssm_type f = *want;
  f.dtype = SSM_F32;
  int64_t n = ssm_type_numel(&f);
  void *tmp;
  SSM_TRY(ssm_status_wrap(ssm_alloc(n ? (size_t)n : 1, 4, &tmp), "tensor '%s' as f32", name));
  ssm_status s = ssm_st_read(st, name, &f, tmp);
  if (!s) {
    ssm_qlayout l = ssm_qlayout_of(want);
    int64_t bad = quantize_all(tmp, &l, dst);
    if (bad >= 0)
      s = ssm_status_new(SSM_ERR_INVALID, "tensor '%s': element %lld (%g) cannot be held in "
                         "%s (a finite weight whose block's scale fits f16); use --dtype bf16",
                         name, (long long)bad, (double)((float *)tmp)[bad],
                         ssm_dtype_name(want->dtype));
  }
  free(tmp);
  return s;
}

ssm_status ssm_st_read(const ssm_st *st, const char *name, const ssm_type *want, void *dst) {
  if (ssm_dtype_is_quant(want->dtype)) {
    char *qn, *dn;
    int found;
    SSM_TRY(find_quant(st, name, want, &qn, &dn, &found));
    ssm_status s = found ? read_prequant(st, qn, dn, want, dst) : read_quant(st, name, want, dst);
    free(qn);
    free(dn);
    return s;
  }
  if (strstr(name, "{*}")) {
    SSM_TRY(ssm_st_check(st, name, want));
    return each_part(st, name, want, dst, read_one);
  }
  return read_one(st, name, want, dst);
}

ssm_status ssm_st_set_progress(ssm_st *st, const ssm_progress *p) {
  free(st->progress);
  st->progress = NULL;
  if (!p || !p->fn) return NULL;
  SSM_TRY(ssm_status_wrap(ssm_alloc(1, sizeof *st->progress, (void **)&st->progress),
                          "the progress of reading weights"));
  st->progress->p = *p;
  for (size_t i = 0; i < st->tensors.n; i++)
    if (!st->hashed[i]) st->progress->total += st->tensors.items[i].nbytes;
  return NULL;
}

uint64_t ssm_st_fingerprint(const ssm_st *st, ssm_status *out_err) {
  *out_err = NULL;
  XXH3_state_t *h = XXH3_createState();
  if (!h) {
    *out_err = ssm_status_new(SSM_ERR_NOMEM, "out of host memory for the weights' hash state");
    return 0;
  }
  XXH3_64bits_reset(h);
  for (size_t i = 0; i < st->tensors.n && !*out_err; i++) {
    const ssm_st_tensor *t = &st->tensors.items[i];
    if (!st->hashed[i]) *out_err = read_tensor(st, i, NULL, NULL);
    int32_t dtype = (int32_t)t->dtype, rank = t->rank;
    XXH3_64bits_update(h, t->name, strlen(t->name) + 1);
    XXH3_64bits_update(h, &dtype, sizeof dtype);
    XXH3_64bits_update(h, &rank, sizeof rank);
    XXH3_64bits_update(h, t->shape, sizeof t->shape[0] * (size_t)t->rank);
    XXH3_64bits_update(h, &st->hashes[i], sizeof st->hashes[i]);
  }
  uint64_t f = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  return *out_err ? 0 : f;
}
