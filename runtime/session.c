/*
 * session.c — the public API (ssmc.h) over the layers below: a session is
 * a backend (runtime/backend/backend.h) with the model's tokenizer and
 * end-of-text id, and the loops that feed prompts in chunks and generate,
 * with the sampler on the device or the argmax on the host.
 */
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/internal.h"
#include "runtime/vulkan/vulkan.h"

_Static_assert((int)SSMC_ERR_INVALID == (int)SSM_ERR_INVALID &&
                   (int)SSMC_ERR_IO == (int)SSM_ERR_IO &&
                   (int)SSMC_ERR_NOMEM == (int)SSM_ERR_NOMEM &&
                   (int)SSMC_ERR_UNSUPPORTED == (int)SSM_ERR_UNSUPPORTED &&
                   (int)SSMC_ERR_DEVICE == (int)SSM_ERR_DEVICE &&
                   (int)SSMC_ERR_INTERNAL == (int)SSM_ERR_INTERNAL &&
                   (int)SSMC_ERR_CANCELLED == (int)SSM_ERR_CANCELLED,
               "ssmc_code and ssm_code agree");

#define MAX_MAX_SEQ (1 << 24)


/* ---- version, errors, logging ------------------------------------------------ */

const char *ssmc_version(void) { return SSM_VERSION; }
ssmc_code ssmc_status_code(ssmc_status s) { return (ssmc_code)ssm_status_code(s); }
const char *ssmc_status_message(ssmc_status s) { return ssm_status_message(s); }
void ssmc_status_free(ssmc_status s) { ssm_status_free(s); }
void ssmc_set_log(ssmc_log_fn fn, void *user) { ssm_log_set(fn, user); }

/* ---- devices ------------------------------------------------------------------ */

ssmc_status ssmc_devices(ssmc_device **out_devices, int *out_count) {
  *out_devices = NULL;
  *out_count = 0;
  ssm_vk_device_info *info;
  int n;
  SSM_TRY(ssm_vk_list_devices(&info, &n));
  int dflt = ssm_vk_default_device(info, n);
  ssmc_device *d;
  ssm_status st = ssm_alloc((size_t)n + 1, sizeof *d, (void **)&d);
  if (st) {
    free(info);
    return ssm_status_wrap(st, "the list of devices");
  }
  for (int i = 0; i < n; i++) {
    d[i].index = info[i].index;
    snprintf(d[i].name, sizeof d[i].name, "%s", info[i].name);
    d[i].type = ssm_vk_device_type_name(info[i].type);
    snprintf(d[i].driver, sizeof d[i].driver, "%s", info[i].driver);
    d[i].api_version = info[i].api_version;
    d[i].usable = info[i].usable;
    d[i].is_default = i == dflt;
    d[i].memory_bytes = info[i].device_local_bytes;
    d[i].max_buffer_bytes = info[i].max_storage_buffer_range;
    d[i].subgroup_size = info[i].subgroup_size;
  }
  free(info);
  *out_devices = d;
  *out_count = n;
  return NULL;
}

/* ---- tokenizer ----------------------------------------------------------------- */

int ssm_is_dir(const char *path) {
  struct stat st;
  return !stat(path, &st) && S_ISDIR(st.st_mode);
}

static int exists(const char *path) {
  struct stat st;
  return !stat(path, &st);
}

/* `path`, or path/tokenizer.json when it is a directory (malloc'd). */
static ssm_status tokenizer_file(const char *path, char **out) {
  ssm_sb b = {0};
  ssm_sb_printf(&b, ssm_is_dir(path) ? "%s/tokenizer.json" : "%s", path);
  return ssm_sb_take(&b, "the tokenizer's file name", out);
}

/* The tokenizer at `path`; one the session looked for where the model's
 * files are (not named by options.tokenizer) and did not find there is
 * said so. */
static ssm_status tokenizer_load(const char *path, int is_explicit, ssm_tok **out) {
  if (!is_explicit && !exists(path))
    return ssm_status_new(SSM_ERR_INVALID, "no tokenizer: %s does not exist (give one with "
                          "--tokenizer FILE)", path);
  return ssm_tok_open(path, out);
}

/* Where a session with `o` and model directory `model_dir` finds its
 * tokenizer (malloc'd): options.tokenizer, else tokenizer.json there. */
static ssm_status tokenizer_path(const char *model_dir, const ssmc_options *o, char **out) {
  if (o->tokenizer) return tokenizer_file(o->tokenizer, out);
  ssm_sb p = {0};
  ssm_sb_printf(&p, "%s/tokenizer.json", model_dir);
  return ssm_sb_take(&p, "the tokenizer's file name", out);
}

ssmc_status ssmc_tokenizer_open(const char *path, ssmc_tokenizer **out) {
  char *file;
  SSM_TRY(tokenizer_file(path, &file));
  ssm_status s = ssm_tok_open(file, out);
  free(file);
  return s;
}

void ssmc_tokenizer_close(ssmc_tokenizer *t) { ssm_tok_close(t); }
int32_t ssmc_tokenizer_vocab_size(const ssmc_tokenizer *t) { return ssm_tok_vocab_size(t); }
int32_t ssmc_tokenizer_token_id(const ssmc_tokenizer *t, const char *token) {
  return ssm_tok_token_id(t, token);
}

ssmc_status ssmc_tokenizer_encode(const ssmc_tokenizer *t, const char *text, size_t len,
                                  int32_t **out_ids, size_t *out_count) {
  return ssm_tok_encode(t, text, len, out_ids, out_count);
}

ssmc_status ssmc_tokenizer_decode(const ssmc_tokenizer *t, const int32_t *ids, size_t count,
                                  int skip_special, char **out_text, size_t *out_len) {
  return ssm_tok_decode(t, ids, count, skip_special, out_text, out_len);
}

ssmc_status ssmc_decoder_create(const ssmc_tokenizer *t, int skip_special, ssmc_decoder **out) {
  return ssm_tok_stream_create(t, skip_special, out);
}

void ssmc_decoder_destroy(ssmc_decoder *d) { ssm_tok_stream_destroy(d); }

ssmc_status ssmc_decoder_feed(ssmc_decoder *d, int32_t id, const char **out_text,
                              size_t *out_len) {
  return ssm_tok_stream_feed(d, id, out_text, out_len);
}

ssmc_status ssmc_decoder_flush(ssmc_decoder *d, const char **out_text, size_t *out_len) {
  return ssm_tok_stream_flush(d, out_text, out_len);
}

/* ---- opening a session ------------------------------------------------------------ */

ssm_status ssmc_cache_dir_default(char **out) {
  *out = NULL;
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  ssm_sb b = {0};
  if (xdg && xdg[0] == '/') ssm_sb_printf(&b, "%s/ssmc", xdg);
  else if (home && home[0] == '/') ssm_sb_printf(&b, "%s/.cache/ssmc", home);
  else return NULL;
  return ssm_sb_take(&b, "the cache directory's name", out);
}

void ssmc_options_init(ssmc_options *o) {
  *o = (ssmc_options){.backend = SSMC_BACKEND_VULKAN, .device = -1, .eos = -1};
}

ssm_status ssm_path_is_bundle(const char *path, int *out_bundle) {
  *out_bundle = 0;
  int fd;
  size_t size;
  ssm_status s = ssm_file_open(path, &fd, &size);
  if (s) {
    struct stat st;
    if (!stat(path, &st) && !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) return s;
    ssm_status_free(s); /* absent, a directory, unreadable: said later, in context */
    return NULL;
  }
  char head[64];
  ssize_t n = read(fd, head, sizeof head);
  close(fd);
  return ssm_file_bundle_magic(path, head, (long)n, out_bundle);
}

static ssm_status check_options(const char *model, const ssmc_options *o, int bundle) {
  if (o->backend != SSMC_BACKEND_VULKAN && o->backend != SSMC_BACKEND_CPU)
    return ssm_status_new(SSM_ERR_INVALID, "options.backend: %d is not VULKAN, CPU or AUTO",
                          (int)o->backend);
  if (o->chunk < 0 || o->chunk > SSM_CHUNK_MAX)
    return ssm_status_new(SSM_ERR_INVALID, "chunk: expected 1 to %d tokens, got %d", SSM_CHUNK_MAX,
                          o->chunk);
  if (o->max_seq < 0 || o->max_seq > MAX_MAX_SEQ)
    return ssm_status_new(SSM_ERR_INVALID, "max_seq: expected 1 to %d positions, got %d",
                          MAX_MAX_SEQ, o->max_seq);
  if (o->device < -1) return ssm_status_new(SSM_ERR_INVALID, "device: %d is not a device index", o->device);
  if (bundle && o->backend == SSMC_BACKEND_CPU)
    return ssm_status_new(SSM_ERR_INVALID, "%s: the CPU backend runs a model (a directory or an "
                          "architecture YAML), not a compiled bundle", model);
  if ((unsigned)o->dtype > SSMC_DTYPE_Q4_0)
    return ssm_status_new(SSM_ERR_INVALID, "options.dtype: %d is not AUTO, F32, F16, BF16, Q8_0 or Q4_0",
                          (int)o->dtype);
  if (bundle && (o->chunk || o->max_seq || o->no_fuse || o->dtype || o->config))
    return ssm_status_new(SSM_ERR_INVALID, "%s: chunk, max_seq, dtype, no_fuse and config are "
                          "fixed when a bundle is compiled (ssmc compile --chunk, --max-seq, "
                          "--dtype, --config)", model);
  if (o->validation && o->backend == SSMC_BACKEND_VULKAN && !ssm_vk_validation_available())
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "validation: VK_LAYER_KHRONOS_validation is not "
                          "installed (Debian: apt-get install vulkan-validationlayers)");
  return NULL;
}

ssm_status ssm_session_open_vulkan(ssmc_session *s, ssm_bundle *bd, const char *weights,
                                   const ssmc_options *o) {
  ssm_progress progress = {(ssm_progress_fn)o->progress, o->progress_user};
  ssm_vk_backend_opts vo = {.device = o->device, .validation = o->validation,
                            .progress = progress};
  return ssm_vk_backend_open(bd, weights, &vo, &s->b);
}

/* Where a session of `model` with `o` reads its weights (*out_weights)
 * and looks for the model's own files, its tokenizer, chat template and
 * generation_config.json (*out_model_dir): `bd` is the model's bundle,
 * NULL for a model to compile or interpret. *out_file: the weights are the
 * file written beside the bundle. Both paths are malloc'd. */
static ssm_status locate(const char *model, const ssm_bundle *bd, const ssmc_options *o,
                         char **out_weights, int *out_file, char **out_model_dir) {
  *out_weights = *out_model_dir = NULL;
  *out_file = 0;
  const char *given = o->weights ? o->weights : !bd && ssm_is_dir(model) ? model : NULL;
  if (!given && !bd)
    return ssm_status_new(SSM_ERR_INVALID, "%s: no weights: give the checkpoint directory "
                          "(--weights DIR)", model);
  SSM_TRY(given ? ssm_strdup(given, "the weights' path", out_weights)
                : ssm_bundle_weights(bd, out_weights, out_file));
  const char *w = *out_weights, *slash = strrchr(w, '/');
  const ssm_manifest *m = bd ? ssm_bundle_manifest(bd) : NULL;
  ssm_sb p = {0};
  /* the weights file beside the bundle holds no tokenizer: the model's directory does */
  if (*out_file && m->source_dir) ssm_sb_printf(&p, "%s", m->source_dir);
  else if (ssm_is_dir(w)) ssm_sb_printf(&p, "%s", w);
  else ssm_sb_printf(&p, "%.*s", slash ? (int)(slash - w) : 1, slash ? w : ".");
  ssm_status st = ssm_sb_take(&p, "the model's path", out_model_dir);
  if (st) {
    free(*out_weights);
    *out_weights = NULL;
  }
  return st;
}

static ssm_status open_bundle(ssmc_session *s, const char *path, const ssmc_options *o) {
  ssm_bundle *bd;
  SSM_TRY(ssm_bundle_open(path, &bd));
  int file = 0;
  ssm_status st = locate(path, bd, o, &s->weights, &file, &s->model_dir);
  const ssm_manifest *m = ssm_bundle_manifest(bd);
  /* weights given for it must be of the model it was compiled for */
  if (!st && o->weights) st = ssm_st_check_config(o->weights, m->config, ssm_bundle_name(bd));
  if (st) {
    ssm_bundle_close(bd);
    return st;
  }
  SSM_TRY(ssm_session_open_vulkan(s, bd, s->weights, o));
  return file ? ssm_bundle_check_fingerprint(bd, s->weights, s->b->fingerprint) : NULL;
}

/* The model directory of a session of `model` with `options`, found as
 * ssmc_session_open finds it but opening no more than a bundle's manifest. */
static ssm_status find_model_dir(const char *model, const ssmc_options *options, char **out) {
  ssmc_options o;
  if (options) o = *options;
  else ssmc_options_init(&o);
  int bundle;
  SSM_TRY(ssm_path_is_bundle(model, &bundle));
  ssm_bundle *bd = NULL;
  if (bundle) SSM_TRY(ssm_bundle_open(model, &bd));
  char *weights = NULL;
  int file;
  ssm_status st = locate(model, bd, &o, &weights, &file, out);
  free(weights);
  ssm_bundle_close(bd);
  return st;
}

ssmc_status ssmc_model_dir(const char *model, const ssmc_options *options, char **out_dir) {
  *out_dir = NULL;
  return find_model_dir(model, options, out_dir);
}

ssmc_status ssmc_tokenizer_open_for(const char *model, const ssmc_options *options,
                                    ssmc_tokenizer **out) {
  *out = NULL;
  ssmc_options o;
  if (options) o = *options;
  else ssmc_options_init(&o);
  char *dir = NULL, *path = NULL;
  ssm_status st = o.tokenizer ? NULL : find_model_dir(model, &o, &dir);
  if (!st) st = tokenizer_path(dir, &o, &path);
  if (!st) st = tokenizer_load(path, o.tokenizer != NULL, out);
  free(dir);
  free(path);
  return st;
}

ssm_status ssm_session_open_with(const char *model, const ssmc_options *options,
                                 ssm_open_model_fn open_model, ssmc_session **out) {
  *out = NULL;
  double t0 = ssm_now();
  ssmc_options o;
  if (options) o = *options;
  else ssmc_options_init(&o);
  int bundle;
  SSM_TRY(ssm_path_is_bundle(model, &bundle));
  const char *reason;
  uint64_t params;
  o.backend = ssmc_backend_for(model, &o, &reason, &params);
  SSM_TRY(check_options(model, &o, bundle));
  ssmc_session *s;
  SSM_TRY(ssm_status_wrap(ssm_alloc(1, sizeof *s, (void **)&s), "a session"));
  s->backend = o.backend;
  s->backend_reason = reason;
  s->backend_params = params;
  ssm_status st;
  int file;
  if (bundle) st = open_bundle(s, model, &o);
  else if (open_model) {
    st = locate(model, NULL, &o, &s->weights, &file, &s->model_dir);
    if (!st) st = open_model(s, model, &o);
  } else st = ssm_status_new(SSM_ERR_UNSUPPORTED, "%s: not a compiled bundle, and this ssmc library "
                           "(ssmc-runtime) only runs bundles: compile the model with `ssmc compile` "
                           "first", model);
  if (!st) st = ssm_status_wrap(ssm_alloc(1, sizeof *s->model, (void **)&s->model), "a session");
  if (st) {
    ssmc_session_close(s);
    return st;
  }
  *s->model = (ssm_loaded){.b = s->b, .refs = 1, .resident = s};
  if (o.eos >= s->b->vocab) {
    st = ssm_status_new(SSM_ERR_INVALID, "eos: token id %lld is outside the vocabulary of "
                        "%lld ids (0 to %lld)", (long long)o.eos, (long long)s->b->vocab,
                        (long long)s->b->vocab - 1);
    ssmc_session_close(s);
    return st;
  }
  s->eos_option = o.eos;
  if (!st) {
    st = tokenizer_path(s->model_dir, &o, &s->tok_path);
    s->tok_explicit = o.tokenizer != NULL;
  }
  if (!st) st = ssm_genconfig_read(s->model_dir, s->b->vocab, &s->genconfig);
  if (st) {
    ssmc_session_close(s);
    return st;
  }
  ssm_genconfig_describe(&s->genconfig);
  s->stats.open_s = ssm_now() - t0;
  *out = s;
  return NULL;
}

void ssmc_session_close(ssmc_session *s) {
  if (!s) return;
  if (s->model) {
    if (s->model->resident == s) s->model->resident = NULL;
    ssm_backend_snapshot_free(s->b, s->parked);
    ssm_loaded_release(s->model);
  } else {
    ssm_backend_close(s->b); /* opened but not yet shared, or NULL */
  }
  ssm_tok_close(s->tok);
  free(s->weights);
  free(s->model_dir);
  free(s->cache_file);
  free(s->tok_path);
  free(s->rows);
  free(s->seen);
  free(s);
}

int64_t ssmc_session_vocab(const ssmc_session *s) { return s->b->vocab; }
int ssmc_session_chunk(const ssmc_session *s) { return s->b->chunk > 0 ? s->b->chunk : 1; }
int64_t ssmc_session_position(const ssmc_session *s) {
  return s->model->resident == s || !s->parked ? s->b->position : s->parked->position;
}
int64_t ssmc_session_max_seq(const ssmc_session *s) { return s->b->max_seq; }
const char *ssmc_session_architecture(const ssmc_session *s) { return s->b->arch; }
const char *ssmc_session_device(const ssmc_session *s) { return s->b->device; }
ssmc_backend ssmc_session_backend(const ssmc_session *s, const char **out_reason,
                                  uint64_t *out_params) {
  if (out_reason) *out_reason = s->backend_reason;
  if (out_params) *out_params = s->backend_params;
  return s->backend;
}
const char *ssmc_session_model_dir(const ssmc_session *s) { return s->model_dir; }

const char *ssmc_session_dtype(const ssmc_session *s) { return ssm_dtype_name(s->b->dtype); }

ssmc_status ssmc_session_tokenizer(ssmc_session *s, const ssmc_tokenizer **out) {
  *out = NULL;
  if (!s->tok) {
    SSM_TRY(tokenizer_load(s->tok_path, s->tok_explicit, &s->tok));
  }
  *out = s->tok;
  return NULL;
}

int64_t ssmc_session_eos(const ssmc_session *cs) {
  ssmc_session *s = (ssmc_session *)cs; /* resolved once, on first use */
  if (!s->eos_known) {
    s->eos_known = 1;
    s->eos = s->eos_option >= 0       ? s->eos_option
             : s->genconfig.neos > 0 ? s->genconfig.eos[0]
                                     : s->b->eos;
    const ssmc_tokenizer *t;
    if (s->eos < 0 && exists(s->tok_path)) {
      ssm_status st = ssmc_session_tokenizer(s, &t);
      if (!st) s->eos = ssm_tok_token_id(t, "<|endoftext|>");
      ssm_status_free(st);
    }
  }
  return s->eos;
}

/* ---- feeding and generating ----------------------------------------------------------- */

static ssm_status check_finite(const float *rows, int64_t count, int64_t vocab,
                               int64_t first_pos) {
  for (int64_t k = 0; k < count * vocab; k++)
    if (!isfinite(rows[k]))
      return ssm_status_new(SSM_ERR_INVALID, "non-finite logit %g at position %lld (vocab index "
                            "%lld): the model or its weights produce inf/NaN", rows[k],
                            (long long)(first_pos + k / vocab), (long long)(k % vocab));
  return NULL;
}

static ssm_status rows_for(ssmc_session *s, int count) {
  size_t need = (size_t)count * (size_t)s->b->vocab;
  if (need <= s->rows_cap) return NULL;
  free(s->rows);
  s->rows = NULL;
  s->rows_cap = 0;
  SSM_TRY(ssm_alloc(need, sizeof(float), (void **)&s->rows));
  s->rows_cap = need;
  return NULL;
}

ssm_status ssm_seen_copy(const ssmc_session *s, const float *from, float **out) {
  *out = NULL;
  if (!from) return NULL;
  size_t words = (size_t)SSM_SEEN_WORDS(s->b->vocab);
  SSM_TRY(ssm_status_wrap(ssm_alloc(words, sizeof(float), (void **)out), "the seen-token set"));
  memcpy(*out, from, words * sizeof(float));
  return NULL;
}

/* Adds tokens to the session's seen-token set. */
static ssm_status seen_mark(ssmc_session *s, const int32_t *tokens, size_t count) {
  if (!s->seen && count)
    SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)SSM_SEEN_WORDS(s->b->vocab), sizeof(float),
                                      (void **)&s->seen), "the seen-token set"));
  for (size_t i = 0; i < count; i++)
    if (tokens[i] >= 0 && tokens[i] < s->b->vocab) ssm_seen_add(s->seen, tokens[i]);
  return NULL;
}

static void seen_clear(ssmc_session *s) {
  if (s->seen) memset(s->seen, 0, (size_t)SSM_SEEN_WORDS(s->b->vocab) * sizeof(float));
}

/* Feeds tokens in chunks; with `want_rows`, their logits come to the host,
 * are checked, handed to on_logits, and the last row stays in s->rows.
 * *out_stopped is set when on_logits asked to stop. */
static ssm_status feed(ssmc_session *s, const int32_t *tokens, size_t count, int want_rows,
                       ssmc_logits_fn on_logits, void *user, int *out_stopped) {
  ssm_backend *b = s->b;
  int chunk = b->chunk > 0 ? b->chunk : 1;
  int64_t V = b->vocab;
  *out_stopped = 0;
  if (want_rows) SSM_TRY(rows_for(s, chunk));
  for (size_t at = 0; at < count;) {
    /* whole chunks, then the rest in one run where the backend takes any
     * count up to a chunk (else one token at a time, through decode) */
    int len = count - at >= (size_t)chunk ? chunk : b->any_count ? (int)(count - at) : 1;
    int64_t pos = b->position;
    /* without rows, whole chunks go up to SSM_FEED_CHUNKS a submission */
    size_t whole = chunk > 1 ? (count - at) / (size_t)chunk : 0;
    if (!want_rows && whole >= 2 && b->ops->feed) {
      len = chunk * (int)(whole < SSM_FEED_CHUNKS ? whole : SSM_FEED_CHUNKS);
      SSM_TRY(b->ops->feed(b, tokens + at, len));
      SSM_TRY(seen_mark(s, tokens + at, (size_t)len));
      at += (size_t)len;
      continue;
    }
    SSM_TRY(ssm_backend_run(b, tokens + at, len, want_rows ? s->rows : NULL));
    SSM_TRY(seen_mark(s, tokens + at, (size_t)len));
    at += (size_t)len;
    if (!want_rows) continue;
    SSM_TRY(check_finite(s->rows, len, V, pos));
    for (int r = 0; r < len && on_logits; r++)
      if (on_logits(s->rows + (size_t)r * (size_t)V, V, pos + r, user)) {
        *out_stopped = 1;
        return NULL;
      }
    if (len > 1) memmove(s->rows, s->rows + (size_t)(len - 1) * (size_t)V, sizeof(float) * (size_t)V);
  }
  return NULL;
}

ssmc_status ssmc_session_feed(ssmc_session *s, const int32_t *tokens, size_t count,
                              ssmc_logits_fn on_logits, void *user) {
  int stopped;
  double t0 = ssm_now();
  SSM_TRY(ssm_session_resident(s));
  SSM_TRY(feed(s, tokens, count, on_logits != NULL, on_logits, user, &stopped));
  s->stats.prompt_tokens += (int64_t)count;
  s->stats.prompt_s += ssm_now() - t0;
  return ssm_backend_check(s->b);
}

void ssmc_generate_options_init(ssmc_generate_options *g) {
  *g = (ssmc_generate_options){.top_p = 1};
}

typedef struct {
  ssmc_session *s;
  const ssmc_generate_options *g;
  int64_t pos, eos;
  ssm_status err;
  int hit_eos;
} step_ctx;

/* Each step of the device sampler: its logits (when asked for), then the
 * end-of-text check, then the caller's callback. */
static int on_step(int32_t id, const float *logits, void *user) {
  step_ctx *c = user;
  int64_t V = c->s->b->vocab, pos = c->pos++;
  if (logits) {
    c->err = check_finite(logits, 1, V, pos);
    if (c->err) return 1;
    if (c->g->on_logits && c->g->on_logits(logits, V, pos, c->g->user)) return 1;
  }
  if (c->g->stop_at_eos && c->eos >= 0 && ssmc_session_is_eos(c->s, id)) return c->hit_eos = 1;
  return c->g->on_token && c->g->on_token(id, c->g->user);
}

static int32_t argmax(const float *v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; i++)
    if (v[i] > v[best]) best = i;
  return (int32_t)best;
}

/* The argmax of the last row, after the repetition penalty (> 0, not 1)
 * when there is one. */
static ssm_status host_pick(ssmc_session *s, float penalty, int32_t *out) {
  if (penalty > 0 && s->seen) {
    float *row;
    SSM_TRY(ssm_status_wrap(ssm_alloc((size_t)s->b->vocab, sizeof *row, (void **)&row),
                            "the penalized logits"));
    memcpy(row, s->rows, (size_t)s->b->vocab * sizeof *row);
    ssm_penalize_row(row, s->b->vocab, s->seen, penalty);
    *out = argmax(row, s->b->vocab);
    free(row);
    return NULL;
  }
  *out = argmax(s->rows, s->b->vocab);
  return NULL;
}

static ssm_status generate(ssmc_session *s, const int32_t *prompt, size_t np, int max_tokens,
                           const ssmc_generate_options *g, int32_t *out, size_t *out_count) {
  ssm_backend *b = s->b;
  if (!np) return ssm_status_new(SSM_ERR_INVALID, "generate: the prompt has no tokens");
  if (max_tokens < 0)
    return ssm_status_new(SSM_ERR_INVALID, "generate: max_tokens %d is negative", max_tokens);
  int64_t eos = g->stop_at_eos ? ssmc_session_eos(s) : -1;
  int sampled = !g->host_greedy && max_tokens > 0;
  if (g->step >= (1u << 24))
    return ssm_status_new(SSM_ERR_INVALID, "generate: sampler step %u is not below 2^24", g->step);
  float st[SSM_SAMPLER_STATE_LEN];
  SSM_TRY(ssm_sampler_state(g->temperature, g->top_k, g->top_p, g->min_p, (int64_t)g->seed, st));
  SSM_TRY(ssm_sampler_penalty(g->repeat_penalty, st));
  float penalty = st[6];
  if (sampled && penalty > 0 && !b->ops->set_seen)
    return ssm_status_new(SSM_ERR_UNSUPPORTED, "the %s backend has no repetition penalty",
                          b->ops->name);
  if (sampled) {
    st[4] = (float)g->step; /* the draw's counter (templates/sample.glsl.in) */
    SSM_TRY(b->ops->set_sampler(b, st));
  }
  int stopped = 0;
  /* With the sampler, the last prompt token is its first input (and the
   * sampler itself reports inf/NaN logits: they need not come to the host).
   * Greedy on the host, only the last prompt token's logits come back,
   * unless on_logits asks for every row: the others are not computed. */
  size_t fed = sampled ? np - 1 : np, quiet = g->on_logits ? 0 : sampled ? fed : np - 1;
  double t0 = ssm_now();
  SSM_TRY(feed(s, prompt, quiet, 0, NULL, NULL, &stopped));
  if (fed > quiet)
    SSM_TRY(feed(s, prompt + quiet, fed - quiet, 1, g->on_logits, g->user, &stopped));
  s->gen_t0 = ssm_now();
  s->stats.prompt_tokens += (int64_t)fed;
  s->stats.prompt_s += s->gen_t0 - t0;
  if (stopped || !max_tokens) return NULL;
  if (sampled) {
    /* the last prompt token is the first step's input: seen before it draws */
    SSM_TRY(seen_mark(s, prompt + np - 1, 1));
    if (penalty > 0) SSM_TRY(b->ops->set_seen(b, s->seen));
    step_ctx c = {s, g, b->position, eos, NULL, 0};
    int n = 0;
    ssm_status err = ssm_backend_generate(b, prompt[np - 1], max_tokens, g->on_logits != NULL,
                                          out, &n, on_step, &c);
    ssm_status_free(seen_mark(s, out, (size_t)n)); /* the set exists: nothing to fail */
    *out_count = (size_t)n - (size_t)c.hit_eos;
    if (c.err) {
      ssm_status_free(err);
      return c.err;
    }
    return err;
  }
  for (int k = 0; k < max_tokens; k++) {
    int32_t id;
    SSM_TRY(host_pick(s, penalty, &id));
    if (g->stop_at_eos && eos >= 0 && ssmc_session_is_eos(s, id)) break;
    out[(*out_count)++] = id;
    SSM_TRY(seen_mark(s, &id, 1));
    if ((g->on_token && g->on_token(id, g->user)) || k + 1 == max_tokens) break;
    SSM_TRY(feed(s, &id, 1, 1, g->on_logits, g->user, &stopped));
    if (stopped) break;
  }
  return NULL;
}

ssmc_status ssmc_session_generate(ssmc_session *s, const int32_t *prompt, size_t prompt_count,
                                  int max_tokens, const ssmc_generate_options *g,
                                  int32_t *out_ids, size_t *out_count) {
  *out_count = 0;
  ssmc_generate_options dflt;
  if (!g) {
    ssmc_generate_options_init(&dflt);
    g = &dflt;
  }
  SSM_TRY(ssm_session_resident(s));
  s->gen_t0 = 0;
  ssm_status st = generate(s, prompt, prompt_count, max_tokens, g, out_ids, out_count);
  if (s->gen_t0 > 0) {
    s->stats.generated_tokens += (int64_t)*out_count;
    s->stats.generate_s += ssm_now() - s->gen_t0;
  }
  SSM_TRY(st);
  return ssm_backend_check(s->b);
}

void ssmc_session_stats(const ssmc_session *s, ssmc_stats *out) { *out = s->stats; }

ssmc_status ssmc_session_reset(ssmc_session *s) {
  SSM_TRY(ssm_session_resident(s));
  seen_clear(s);
  return ssm_backend_reset(s->b);
}

ssmc_status ssmc_session_save_state(ssmc_session *s, const char *path) {
  SSM_TRY(ssm_session_resident(s));
  SSM_TRY(ssm_backend_state_save(s->b, path));
  return ssm_backend_check(s->b);
}

ssmc_status ssmc_session_load_state(ssmc_session *s, const char *path) {
  SSM_TRY(ssm_session_resident(s));
  SSM_TRY(ssm_backend_state_load(s->b, path));
  seen_clear(s); /* a state file holds no tokens: the set restarts */
  return ssm_backend_check(s->b);
}
