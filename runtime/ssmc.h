/*
 * ssmc.h — the ssmc library: run state-space language models (Mamba-1,
 * Falcon-Mamba, Mamba-2, and hybrids with attention such as Jamba) from a
 * Hugging Face model directory or a compiled .ssmb bundle, on any Vulkan
 * GPU or on the CPU.
 *
 * This is the one public header; link with `pkg-config --cflags --libs
 * ssmc`. Everything here is prefixed ssmc_ (the library's internal layers
 * use ssm_). A short program:
 *
 *   ssmc_options o;
 *   ssmc_options_init(&o);
 *   ssmc_session *s;
 *   ssmc_status st = ssmc_session_open("models/pymamba", &o, &s);
 *   if (st) { fprintf(stderr, "%s\n", ssmc_status_message(st)); ... }
 *   ... ssmc_tokenizer_encode(ssmc_session_tokenizer(s), ...) and
 *   ssmc_session_generate(s, ids, n, 80, &gen, out, &count) ...
 *   ssmc_session_close(s);
 *
 * Errors: every function that can fail returns an ssmc_status, NULL on
 * success. An error owns a message that says where and what ("tensor
 * 'backbone.norm_f.weight' not found in DIR"); free it with
 * ssmc_status_free. Output parameters are cleared first.
 *
 * Threads: a session, and what it hands out, belongs to one thread at a
 * time. A tokenizer is immutable once loaded and may be shared.
 *
 * Vulkan: the sessions of a process share one Vulkan instance, made by the
 * first and kept until exit (NVIDIA's driver stops making instances after
 * some tens of create/destroy cycles in one process); each session has its
 * own device. A session opened with validation has an instance of its own.
 */
#ifndef SSMC_H
#define SSMC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version, errors, logging --------------------------------------------- */

/* "0.2.0": the library's version, as `ssmc --version` prints it. */
const char *ssmc_version(void);

typedef struct ssm_status_s *ssmc_status;

typedef enum {
  SSMC_OK = 0,
  SSMC_ERR_INVALID,     /* bad input: a file, a model, an argument */
  SSMC_ERR_IO,          /* a file could not be read or written */
  SSMC_ERR_NOMEM,       /* out of host memory */
  SSMC_ERR_UNSUPPORTED, /* valid input this version does not handle */
  SSMC_ERR_DEVICE,      /* the Vulkan device failed or lacks a feature */
  SSMC_ERR_INTERNAL,    /* a bug in ssmc, reported rather than crashed */
  SSMC_ERR_CANCELLED,   /* a progress callback (ssmc_progress_fn) asked to stop */
} ssmc_code;

/* The code of `s` (SSMC_OK for NULL). */
ssmc_code ssmc_status_code(ssmc_status s);
/* The message of `s` ("ok" for NULL); owned by `s`. */
const char *ssmc_status_message(ssmc_status s);
/* Frees `s`; NULL is fine. */
void ssmc_status_free(ssmc_status s);

/* The library prints nothing; what it has to say (shader compiler warnings,
 * Vulkan validation messages, missing optional device features) goes to
 * this hook, for the whole process (NULL: dropped). */
typedef void (*ssmc_log_fn)(const char *message, void *user);
void ssmc_set_log(ssmc_log_fn fn, void *user);

/* ---- devices ----------------------------------------------------------------- */

typedef struct {
  int index;              /* what ssmc_options.device takes */
  char name[256];         /* "AMD Radeon RX 7900 XTX", "llvmpipe (LLVM 15.0.6, 256 bits)" */
  const char *type;       /* "discrete GPU", "integrated GPU", "virtual GPU", "cpu", "other" */
  char driver[256];       /* driver name and version */
  uint32_t api_version;   /* Vulkan version, VK_MAKE_API_VERSION packing */
  int usable;             /* Vulkan 1.1 or later with a compute queue */
  int is_default;         /* the device a session takes without ssmc_options.device */
  uint64_t memory_bytes;  /* the largest device-local heap */
  uint64_t max_buffer_bytes; /* maxStorageBufferRange: the largest tensor it can bind */
  uint32_t subgroup_size;
} ssmc_device;

/* The Vulkan devices, in index order, into a malloc'd array (free() it).
 * No device at all (no driver installed) is an error that says so. */
ssmc_status ssmc_devices(ssmc_device **out_devices, int *out_count);

/* ---- tokenizer ----------------------------------------------------------------- */

/* A Hugging Face tokenizer.json (byte-level BPE: GPT-2, GPT-NeoX, Falcon,
 * Llama 3 style), giving the ids the `tokenizers` library gives. */
typedef struct ssm_tok ssmc_tokenizer;

/* Loads `path`: a tokenizer.json, or a directory that holds one. A
 * tokenizer feature it does not handle is refused with a message naming
 * the field. */
ssmc_status ssmc_tokenizer_open(const char *path, ssmc_tokenizer **out);
/* NULL is fine. Not for the session's own tokenizer. */
void ssmc_tokenizer_close(ssmc_tokenizer *t);
/* Largest id + 1. */
int32_t ssmc_tokenizer_vocab_size(const ssmc_tokenizer *t);
/* The id of a token spelled exactly `token` ("<|endoftext|>"), or -1. */
int32_t ssmc_tokenizer_token_id(const ssmc_tokenizer *t, const char *token);
/* `len` bytes of UTF-8 text to ids: a malloc'd array (free() it), nothing
 * added around the text. Text that is not UTF-8 is an error. */
ssmc_status ssmc_tokenizer_encode(const ssmc_tokenizer *t, const char *text, size_t len,
                                  int32_t **out_ids, size_t *out_count);
/* Ids to malloc'd, NUL-terminated text (free() it), skipping special
 * tokens when `skip_special`. An unknown id is an error. */
ssmc_status ssmc_tokenizer_decode(const ssmc_tokenizer *t, const int32_t *ids, size_t count,
                                  int skip_special, char **out_text, size_t *out_len);

/* Streaming decode, for printing tokens as they are generated: it hands out
 * whole UTF-8 characters only, and everything it hands out, joined, is
 * ssmc_tokenizer_decode of all the ids. */
typedef struct ssm_tok_stream ssmc_decoder;

ssmc_status ssmc_decoder_create(const ssmc_tokenizer *t, int skip_special, ssmc_decoder **out);
/* NULL is fine. Destroy a decoder before its tokenizer goes (with the
 * session that owns it). */
void ssmc_decoder_destroy(ssmc_decoder *d);
/* Adds one id; *out_text (owned by the decoder, valid until its next call)
 * gets the *out_len bytes now complete, maybe none. An id past the
 * tokenizer's vocabulary (a model's padding) gives none, as transformers'
 * tokenizers decode it; a negative id is an error. */
ssmc_status ssmc_decoder_feed(ssmc_decoder *d, int32_t id, const char **out_text,
                              size_t *out_len);
/* What is still held back (an incomplete character becomes U+FFFD); the
 * decoder is then empty. Out of host memory (here or in ssmc_decoder_feed)
 * is SSMC_ERR_NOMEM: the decoder drops what it held and starts afresh. */
ssmc_status ssmc_decoder_flush(ssmc_decoder *d, const char **out_text, size_t *out_len);

/* The most stop strings one generation takes (ssmc run --stop, the
 * server's `stop` field), and the longest one in bytes. */
#define SSMC_STOPS_MAX 4
#define SSMC_STOP_BYTES_MAX 256

/* Stop strings: generated text ends where the first of `n` non-empty,
 * NUL-terminated strings begins, and the string is left out.
 * ssmc_stop_find gives the offset in text[0..len) of the first occurrence
 * of any of them that ends past offset `from` (the text before `from` was
 * searched before; 0 searches it all), or `len` when there is none. */
size_t ssmc_stop_find(const char *text, size_t len, size_t from, const char *const *stops,
                      int n);
/* How many bytes of text[0..len) can be shown while more text may follow:
 * all but the longest tail that is the start of one of the stop strings. */
size_t ssmc_stop_safe(const char *text, size_t len, const char *const *stops, int n);

/* ---- sessions -------------------------------------------------------------------- */

/* One model loaded on one backend, with its state: the SSM, convolution
 * and attention (KV) state after every token fed so far, and the position
 * (how many tokens that is). */
typedef struct ssmc_session ssmc_session;

/* Which backend runs a model: Vulkan (a GPU, or lavapipe), the CPU
 * interpreter, or AUTO: the faster of the two for the model on this
 * machine's devices (ssmc_backend_for). */
typedef enum { SSMC_BACKEND_VULKAN, SSMC_BACKEND_CPU, SSMC_BACKEND_AUTO } ssmc_backend;

/* Below this many parameters the CPU interpreter runs a model faster than
 * lavapipe (Mesa's CPU Vulkan driver) does; docs/performance.md has the
 * measurements. */
#define SSMC_CPU_FASTER_BELOW_PARAMS 200000000ull

/* The number of parameters (elements of every tensor) of the checkpoint at
 * `weights` (as ssmc_options.weights takes it); only its headers are read. */
ssmc_status ssmc_weights_params(const char *weights, uint64_t *out_params);

/* The backend that runs a model of `params` parameters faster, given the
 * Vulkan devices (ssmc_devices; none: count 0): Vulkan when a usable GPU
 * is there; the CPU interpreter when no device is usable, or when the only
 * ones are CPUs (lavapipe) and the model is smaller than
 * SSMC_CPU_FASTER_BELOW_PARAMS; else Vulkan. *out_reason says why, in
 * words ("no GPU, and ..."): a static string. */
ssmc_backend ssmc_backend_choose(const ssmc_device *devices, int count, uint64_t params,
                                 const char **out_reason);


/* Progress of a long step of ssmc_session_open: `stage` is "compiling
 * decode", "compiling prefill" (units: kernels) or "loading weights"
 * (units: bytes), `done` of `total`. A non-zero return cancels: the open
 * fails with SSMC_ERR_CANCELLED and leaves nothing behind (a signal
 * handler can set a flag that this returns). */
typedef int (*ssmc_progress_fn)(const char *stage, uint64_t done, uint64_t total, void *user);

/* How the matmul and embedding weights are kept on the device (activations,
 * state and all arithmetic are f32 either way). */
typedef enum {
  SSMC_DTYPE_AUTO, /* the checkpoint's own: bf16 for a bf16 checkpoint */
  SSMC_DTYPE_F32,
  SSMC_DTYPE_F16,
  SSMC_DTYPE_BF16,
  SSMC_DTYPE_Q8_0, /* 8 bits in blocks of 32 with an f16 scale (docs/quantization.md) */
  SSMC_DTYPE_Q4_0  /* 4 bits in blocks of 32 with an f16 scale (docs/quantization.md) */
} ssmc_dtype;

typedef struct {
  ssmc_backend backend;  /* VULKAN (the GPU, or lavapipe), CPU (the reference interpreter) or
                          * AUTO (ssmc_backend_for); ssmc_options_init sets VULKAN */
  int device;            /* Vulkan device index (ssmc_devices); -1 picks a discrete GPU first */
  int validation;        /* run under VK_LAYER_KHRONOS_validation; any message is an error */
  const char *weights;   /* the checkpoint: a directory or .safetensors; NULL: MODEL when it is a directory */
  const char *config;    /* config.json, for a MODEL that is an architecture YAML */
  const char *tokenizer; /* tokenizer.json or its directory; NULL: the weights directory's, if any */
  int chunk;             /* prompt tokens per prefill run when compiling (0: 512, or
                          * max_seq when that is smaller) */
  int max_seq;           /* positions an attention KV cache holds when compiling (0: 2048) */
  int slots;             /* when compiling: also a batched decode program of this many
                          * sequences (0: none; ssmc_session_bench_batch) */
  int no_fuse;           /* compile every op as a kernel of its own (for testing fusion) */
  ssmc_dtype dtype;      /* when compiling (and on the CPU backend); a bundle keeps its own */
  int64_t eos;           /* the end-of-text id; -1: the ids of the model directory's
                          * generation_config.json eos_token_id, else config.json's, else
                          * the tokenizer's <|endoftext|>; an id past the vocabulary is
                          * refused */
  /* Where compiled models are kept, by content (NULL: a model is compiled in
   * memory at every open and nothing is written). A model compiled before
   * with the same description, config.json, options and ssmc build is read
   * from there instead; a corrupt entry, or one that does not record the key
   * it is named by, is compiled again and replaced.
   * ssmc_cache_dir_default() gives the directory the ssmc tool uses. */
  const char *cache_dir;
  ssmc_progress_fn progress; /* may be NULL */
  void *progress_user;
} ssmc_options;

/* The defaults: Vulkan, device -1, eos -1, the rest 0/NULL (chunk 0: 512, or
 * max_seq when that is smaller). */
void ssmc_options_init(ssmc_options *o);

/* The backend that ssmc_session_open(model, options) runs on: options->
 * backend, or for AUTO a bundle and a Vulkan device named by options->
 * device take Vulkan, and a model otherwise gets ssmc_backend_choose's
 * pick on this machine's devices for the parameters of its checkpoint
 * (*out_params; 0 when they were not counted, or the checkpoint does not
 * read, which the session then says). *out_reason says why: a static
 * string. */
ssmc_backend ssmc_backend_for(const char *model, const ssmc_options *options,
                              const char **out_reason, uint64_t *out_params);

/* $XDG_CACHE_HOME/ssmc, else $HOME/.cache/ssmc in *out (malloc'd; free()
 * it); NULL when neither variable is set to an absolute path. */
ssmc_status ssmc_cache_dir_default(char **out);

/* Opens `model`: a Hugging Face model directory (its config.json's
 * model_type picks the architecture), an architecture YAML with
 * options->config, or a compiled bundle (.ssmb, Vulkan only). A model is
 * compiled in memory, or found in options->cache_dir; nothing else is
 * written to disk. The weights are loaded and the state is zero. Without
 * options->weights, the weights are MODEL when it is a directory, and for a
 * bundle the directory it was compiled with (`ssmc compile` records it with
 * a fingerprint of its config.json and tensor tables): a directory that is
 * gone or has changed since is an error that says which file changed. */
ssmc_status ssmc_session_open(const char *model, const ssmc_options *options,
                              ssmc_session **out);
/* NULL is fine. */
void ssmc_session_close(ssmc_session *s);

int64_t ssmc_session_vocab(const ssmc_session *s);
/* The prompt tokens one prefill run processes (ssmc_options.chunk, or the
 * bundle's): feeding a multiple of it runs only whole chunks. */
int ssmc_session_chunk(const ssmc_session *s);
/* The end-of-text id (see ssmc_options.eos), or -1 when there is none:
 * ssmc_options.eos, else the first of the model directory's
 * generation_config.json eos_token_id, else config.json's, else the
 * tokenizer's <|endoftext|>. */
int64_t ssmc_session_eos(const ssmc_session *s);
/* Whether `id` ends generation (stop_at_eos): ssmc_options.eos when given,
 * else every id of generation_config.json's eos_token_id (an id or a
 * list), else ssmc_session_eos. */
int ssmc_session_is_eos(const ssmc_session *s, int32_t id);
/* How the matmul and embedding weights are kept: "f32", "f16", "bf16",
 * "q8_0" or "q4_0". */
const char *ssmc_session_dtype(const ssmc_session *s);
/* Tokens fed since the session was opened or reset (or restored). */
int64_t ssmc_session_position(const ssmc_session *s);
/* The most positions the session holds (an attention layer's KV cache has
 * that many rows: ssmc_options.max_seq, or the bundle's); feeding or
 * generating past it is an error. 0: no bound (a model without attention). */
int64_t ssmc_session_max_seq(const ssmc_session *s);
/* The architecture's name ("mamba", "falcon_mamba", "jamba", ...). */
const char *ssmc_session_architecture(const ssmc_session *s);
/* "cpu", or the GPU's name. */
const char *ssmc_session_device(const ssmc_session *s);
/* The backend the session runs on (never AUTO), and why (*out_reason, may
 * be NULL: ssmc_backend_for's words) for the parameters counted
 * (*out_params, may be NULL; 0 when not counted). */
ssmc_backend ssmc_session_backend(const ssmc_session *s, const char **out_reason,
                                  uint64_t *out_params);
/* The directory where the model's own files (tokenizer.json, the chat
 * template) are looked for: the checkpoint directory, the one that holds
 * the weights file, or, for a bundle whose weights file is beside it, the
 * model directory it was compiled from. */
const char *ssmc_session_model_dir(const ssmc_session *s);
/* The tokenizer (see ssmc_options.tokenizer), loaded on first use and owned
 * by the session; an error when there is none or it does not load. */
ssmc_status ssmc_session_tokenizer(ssmc_session *s, const ssmc_tokenizer **out);

/* ssmc_session_model_dir of a session that ssmc_session_open(model,
 * options) would open, found without compiling or loading anything (of a
 * bundle only its manifest is read), so that a program can check the
 * model's files first. *out_dir is malloc'd (free() it). An error when
 * the session could not find its weights either. */
ssmc_status ssmc_model_dir(const char *model, const ssmc_options *options, char **out_dir);
/* Loads the tokenizer that ssmc_session_tokenizer of a session opened
 * with (model, options) would give, without compiling or loading the
 * model: options.tokenizer, else tokenizer.json in ssmc_model_dir. The
 * same error when there is none or it does not load; close it with
 * ssmc_tokenizer_close. */
ssmc_status ssmc_tokenizer_open_for(const char *model, const ssmc_options *options,
                                    ssmc_tokenizer **out);

/* Called with the logits of each position the model processes, in order
 * (`vocab` floats, valid during the call), and that position. A non-zero
 * return stops the feed or generation after that position. */
typedef int (*ssmc_logits_fn)(const float *logits, int64_t vocab, int64_t position, void *user);
/* Called with each generated id; a non-zero return stops generation. */
typedef int (*ssmc_token_fn)(int32_t id, void *user);

/* Feeds `count` tokens: whole prefill chunks, then the rest in one run when
 * the bundle's prefill runs take any count (else one at a time). With
 * `on_logits`, their logits come back to the host (else they stay on the
 * device). Ids out of range, and positions past max_seq, are refused
 * before they run; logits that are not finite are an error. */
ssmc_status ssmc_session_feed(ssmc_session *s, const int32_t *tokens, size_t count,
                              ssmc_logits_fn on_logits, void *user);

typedef struct {
  /* the sampler: greedy (the first largest logit) when temperature is 0 */
  float temperature; /* >= 0 */
  int top_k;         /* 0: off */
  float top_p;       /* in (0, 1]; 1: off */
  uint32_t seed;     /* in [0, 2^24): the same seed draws the same tokens */
  /* greedy on the host: the logits of every step come to the host and the
   * argmax is taken there (otherwise the sampler draws on the device and
   * the next step's input never leaves it) */
  int host_greedy;
  /* the sampler's counter for the first draw (< 2^24): 0, or the number of
   * ids drawn so far to go on with the same draws as one longer call */
  uint32_t step;
  int stop_at_eos;   /* stop when the end-of-text id is drawn (it is not returned) */
  ssmc_token_fn on_token;   /* each id, as it is drawn (may be NULL) */
  ssmc_logits_fn on_logits; /* the logits of every position processed (may be NULL) */
  void *user;
  /* in [0, 1]; 0: off. After temperature, top_k and top_p, the tokens whose
   * probability is below min_p times the likeliest one's are left out (as
   * transformers' min_p) */
  float min_p;
  /* above 0 and finite; 0 or 1: off. Before anything else (temperature,
   * top_k, top_p, min_p or the greedy choice), the logit of every token
   * already in the sequence (fed or drawn since the last reset, or since a
   * state file was loaded) is divided by it when positive and multiplied by
   * it when negative (transformers' repetition_penalty). Not in the
   * batched program's slots (ssmc_session_join_slot refuses it) */
  float repeat_penalty;
} ssmc_generate_options;

/* Greedy, top_p 1, no callbacks. */
void ssmc_generate_options_init(ssmc_generate_options *g);
/* ssmc_generate_options_init's values with the defaults of the model
 * directory's generation_config.json (read when the session opened; a
 * malformed one fails the open, naming the file and the field): with
 * do_sample true, temperature (default 1), top_k (default 50, as
 * transformers), top_p and min_p; repetition_penalty in any case; do_sample
 * false or absent leaves decoding greedy. *out_from (may be NULL) gets the
 * fields that were taken from the file, comma-separated ("" for none), valid
 * while the session is open. */
ssmc_status ssmc_session_generate_defaults(const ssmc_session *s, ssmc_generate_options *g,
                                           const char **out_from);

/* Feeds `prompt` (at least one token) and generates up to `max_tokens` ids
 * into `out_ids` (room for max_tokens), *out_count of them. The state then
 * covers the prompt and every generated id but the last: pass that one as
 * the next call's prompt (or its first token) to go on. */
ssmc_status ssmc_session_generate(ssmc_session *s, const int32_t *prompt, size_t prompt_count,
                                  int max_tokens, const ssmc_generate_options *g,
                                  int32_t *out_ids, size_t *out_count);

/* Zeroes the state and the position. */
ssmc_status ssmc_session_reset(ssmc_session *s);
/* Saves the state (and position) to `path`, atomically: a failed save
 * leaves the file that was there. */
ssmc_status ssmc_session_save_state(ssmc_session *s, const char *path);
/* Restores a saved state. A file of another architecture or other weights,
 * or a truncated or corrupt one, is refused and changes nothing. States
 * move between backends. */
ssmc_status ssmc_session_load_state(ssmc_session *s, const char *path);

/* What a session has done and how long it took, for a summary. */
typedef enum {
  SSMC_CACHE_OFF,  /* no cache_dir, or not a model that is compiled (a bundle, the CPU) */
  SSMC_CACHE_HIT,  /* the compiled model was read from the cache */
  SSMC_CACHE_MISS, /* it was compiled (and stored, unless the cache could not be written) */
} ssmc_cache_use;

typedef struct {
  double open_s;            /* all of ssmc_session_open */
  double compile_s;         /* of which compiling the model (0 when nothing was compiled) */
  ssmc_cache_use cache;
  const char *cache_file;   /* the cache entry (valid while the session is open), or NULL */
  int64_t prompt_tokens;    /* fed before the first token was drawn (every prompt, and
                             * ssmc_session_feed) */
  double prompt_s;
  int64_t generated_tokens; /* drawn by ssmc_session_generate */
  double generate_s;        /* from the end of each prompt to the last token drawn */
} ssmc_stats;

/* The totals since the session was opened. */
void ssmc_session_stats(const ssmc_session *s, ssmc_stats *out);

/* ---- snapshots and forks ----------------------------------------------------------- */

/* A copy of a session's state (SSM, convolution and attention KV tensors,
 * and the position), kept where the model runs: in device memory on
 * Vulkan, so taking and restoring one is a copy on the device, never a
 * round trip through the host. A snapshot belongs to the loaded model, not
 * to one session: it restores into the session it came from or into any
 * session forked from the same one. It keeps the model loaded until freed.
 * Its size is the state's: ssmc_snapshot_bytes (an attention layer's KV
 * cache counts whole, max_seq rows). */
typedef struct ssmc_snapshot ssmc_snapshot;

/* A new snapshot of `s`'s state. */
ssmc_status ssmc_session_snapshot(ssmc_session *s, ssmc_snapshot **out);
/* Overwrites `snap` (of the same loaded model) with `s`'s state, reusing
 * its memory. */
ssmc_status ssmc_session_snapshot_into(ssmc_session *s, ssmc_snapshot *snap);
/* Sets `s`'s state and position to the snapshot's; one of another loaded
 * model is refused and changes nothing. */
ssmc_status ssmc_session_restore(ssmc_session *s, const ssmc_snapshot *snap);
/* NULL is fine. */
void ssmc_snapshot_free(ssmc_snapshot *snap);
int64_t ssmc_snapshot_position(const ssmc_snapshot *snap);
uint64_t ssmc_snapshot_bytes(const ssmc_snapshot *snap);

/* A new session on the same loaded model (weights, kernels and device are
 * shared, nothing is loaded again) whose state starts as a copy of `s`'s
 * and then goes its own way. The backend holds one state at a time: the
 * session that runs swaps its state in (a device-side snapshot of the
 * other, then a restore), so sessions that take turns pay two state copies
 * per turn. A session and its forks must be used from one thread at a
 * time, all together; close them in any order. */
ssmc_status ssmc_session_fork(ssmc_session *s, ssmc_session **out);

/* ---- many sequences in one step --------------------------------------------------- */

/* A model compiled with slots (ssmc_options.slots, `ssmc compile --slots B`)
 * has a batched decode program that advances its B slots by one token each
 * in one step, reading each weight once for all of them. The sessions of
 * one loaded model (a session and its forks) step together through it:
 * each joins a slot (its state is copied there, on the device), the slots
 * step, and a session takes its slot's state back when it wants to go on
 * alone (save it, feed it a prompt). A slot's state stays until another
 * session joins it. In a model with attention each slot has its own
 * position and KV cache, copied with the rest of the state; a slot that a
 * session joined counts its steps against max_seq until it is left
 * (ssmc_session_leave_slot). */

/* The slots of the model (0: none). */
int ssmc_session_slots(const ssmc_session *s);
/* Copies the state of `s` (its conversation so far) into slot `slot`, with
 * the sampler settings of `g` (temperature, top_k, top_p, seed, step; the
 * callbacks are not used). */
ssmc_status ssmc_session_join_slot(ssmc_session *s, int slot, const ssmc_generate_options *g);
/* Copies slot `slot`'s state into `s`, which then covers what it covered
 * when it joined and every id fed to that slot since. A slot that no
 * session joined, or that was left since, is refused. */
ssmc_status ssmc_session_take_slot(ssmc_session *s, int slot);
/* Marks slot `slot` as holding no sequence until a session joins it: it
 * steps on (its ids to be ignored) at position 0, so that in a model with
 * attention it never reaches max_seq. */
ssmc_status ssmc_session_leave_slot(ssmc_session *s, int slot);
/* Runs `steps` steps of every slot: slot i is fed first[i] and then each id
 * it draws; the id slot i draws at step j goes to out_ids[j * slots + i].
 * Slots that no session joined step too (on whatever they hold, zeros at
 * first): ignore their ids. A logit that is not finite in a slot fails the
 * call, naming the slot; the steps that ran still count for every slot
 * (their positions, their ids in out_ids) and the others go on from there:
 * a slot whose logits were not finite has id -1 at that step (what it
 * draws after it means nothing, and its state is lost: join it again), and
 * a slot without an id has -2: every slot in the steps that did not run
 * (on Vulkan the steps after a failing one run in groups of up to 8), or a
 * slot whose sampler ran out of memory. */
ssmc_status ssmc_session_step_slots(ssmc_session *s, const int32_t *first, int steps,
                                    int32_t *out_ids);

/* ---- benchmarks -------------------------------------------------------------------- */

typedef struct {
  double decode_tokens_per_s;          /* logits to the host and the argmax there each step */
  double decode_feedback_tokens_per_s; /* the sampler feeding tokens back on the device */
  double prefill_tokens_per_s;
  int decode_tokens, prefill_tokens;   /* how many were timed */
  uint64_t weight_bytes;               /* read by every decode step */
  const char *dtype;                   /* of the weights on the device: "f32", "f16", "bf16", "q8_0", "q4_0" */
} ssmc_bench_result;

/* Times `decode_tokens` decode steps both ways and about as many prefill
 * tokens, after a warm-up, from a reset state (the state is reset after). */
ssmc_status ssmc_session_bench(ssmc_session *s, int decode_tokens, ssmc_bench_result *out);

/* Times `steps` steps of the batched decode program, every slot starting
 * from the state after `s`'s reset and drawing greedily, after a warm-up:
 * the aggregate tokens a second of all its slots in *out_tokens_per_s (the
 * state is reset after; the slots' states and samplers are overwritten). */
ssmc_status ssmc_session_bench_batch(ssmc_session *s, int steps, double *out_tokens_per_s);

/* One dispatch of a profiled program. */
typedef struct {
  const char *kernel; /* "k3_matmul" (valid while the session is open) */
  const char *family; /* its kernel template: "matmul", "scan", ... */
  const char *op;     /* the fused ops and knobs: "rmsnorm+matmul M=1 K=768 N=3072 ..." */
  double us;          /* mean GPU time per run, from the end of the dispatch before */
  uint64_t bytes;     /* the bytes of its bindings: what it may read and write */
} ssmc_profile_step;

/* Runs the decode program (or, with `prefill` 1, the prefill program; with
 * 2, the batched decode program of ssmc_session_slots) `runs`
 * times with GPU timestamps around every dispatch: *out_steps (malloc'd;
 * free() it) gets each dispatch's mean time. The state is reset after. An
 * error on the CPU backend or a device without compute timestamps. */
ssmc_status ssmc_session_profile(ssmc_session *s, int prefill, int runs,
                                 ssmc_profile_step **out_steps, int *out_count);

#ifdef __cplusplus
}
#endif

#endif
