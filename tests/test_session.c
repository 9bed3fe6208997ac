/*
 * test_session.c — what ssmc_session_open reports and keeps besides the
 * model: progress (compiling, loading weights) and cancelling through it,
 * the compile cache (ssmc_options.cache_dir) and the session's stats.
 */
#include <string.h>
#include <sys/stat.h>

#include "runtime/ssmc.h"
#include "testutil.h"

#define FIX "tests/data/mamba1_tiny"

typedef struct {
  char stages[8][32];
  int nstages;
  uint64_t last_done, last_total;
  int reports, backwards;
  const char *cancel_at; /* stop at the first report of this stage */
} recorder;

static int record(const char *stage, uint64_t done, uint64_t total, void *user) {
  recorder *r = user;
  r->reports++;
  if (!r->nstages || strcmp(r->stages[r->nstages - 1], stage)) {
    if (r->nstages < 8) snprintf(r->stages[r->nstages++], sizeof r->stages[0], "%s", stage);
  } else if (done < r->last_done) {
    r->backwards++;
  }
  if (done > total) r->backwards++;
  r->last_done = done;
  r->last_total = total;
  return r->cancel_at && !strcmp(stage, r->cancel_at);
}

static uint64_t file_size(const char *path) {
  struct stat st;
  return stat(path, &st) ? 0 : (uint64_t)st.st_size;
}

/* Vulkan: both programs compile kernel by kernel, then the weights load
 * byte by byte, up to every byte of the checkpoint's tensors. */
static void test_progress_vulkan(void) {
  recorder r = {.nstages = 0};
  ssmc_options o;
  ssmc_options_init(&o);
  o.progress = record;
  o.progress_user = &r;
  ssmc_session *s = NULL;
  SSM_ASSERT_OK(ssmc_session_open(ssm_test_path(FIX), &o, &s));
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  CU_ASSERT_EQUAL(r.nstages, 3);
  CU_ASSERT_STRING_EQUAL(r.stages[0], "compiling decode");
  CU_ASSERT_STRING_EQUAL(r.stages[1], "compiling prefill");
  CU_ASSERT_STRING_EQUAL(r.stages[2], "loading weights");
  CU_ASSERT_EQUAL(r.backwards, 0);
  CU_ASSERT_EQUAL(r.last_done, r.last_total);
  uint64_t file = file_size(ssm_test_path(FIX "/model.safetensors"));
  CU_ASSERT(r.last_total > 0 && r.last_total < file && r.last_total > file * 9 / 10);
  ssmc_stats st;
  ssmc_session_stats(s, &st);
  CU_ASSERT(st.compile_s > 0 && st.open_s >= st.compile_s);
  CU_ASSERT_EQUAL(st.cache, SSMC_CACHE_OFF);
  CU_ASSERT_PTR_NULL(st.cache_file);
  ssmc_session_close(s);
}

/* The CPU interpreter compiles nothing; its weights are read (hashed) at
 * open, and reported. */
static void test_progress_cpu(void) {
  recorder r = {.nstages = 0};
  ssmc_options o;
  ssmc_options_init(&o);
  o.backend = SSMC_BACKEND_CPU;
  o.progress = record;
  o.progress_user = &r;
  ssmc_session *s = NULL;
  SSM_ASSERT_OK(ssmc_session_open(ssm_test_path(FIX), &o, &s));
  CU_ASSERT_EQUAL(r.nstages, 1);
  CU_ASSERT_STRING_EQUAL(r.stages[0], "loading weights");
  CU_ASSERT_EQUAL(r.last_done, r.last_total);
  ssmc_stats st;
  ssmc_session_stats(s, &st);
  CU_ASSERT_EQUAL(st.compile_s, 0);
  ssmc_session_close(s);
}

/* A progress callback that returns non-zero cancels the open: a
 * SSMC_ERR_CANCELLED status naming the stage, and no session. */
static void test_cancel(void) {
  static const char *const stages[] = {"compiling decode", "compiling prefill", "loading weights"};
  for (int i = 0; i < 3; i++)
    for (int cpu = 0; cpu < (i == 2 ? 2 : 1); cpu++) {
      recorder r = {.cancel_at = stages[i]};
      ssmc_options o;
      ssmc_options_init(&o);
      o.backend = cpu ? SSMC_BACKEND_CPU : SSMC_BACKEND_VULKAN;
      o.progress = record;
      o.progress_user = &r;
      ssmc_session *s = (ssmc_session *)&r;
      ssmc_status st = ssmc_session_open(ssm_test_path(FIX), &o, &s);
      CU_ASSERT_EQUAL(ssmc_status_code(st), SSMC_ERR_CANCELLED);
      char want[64];
      snprintf(want, sizeof want, "%s: cancelled", stages[i]);
      CU_ASSERT_PTR_NOT_NULL(strstr(ssmc_status_message(st), want));
      CU_ASSERT_PTR_NULL(s);
      ssmc_status_free(st);
    }
}

/* options.cache_dir: the first open compiles and stores, the second reads
 * the entry back; both generate the same tokens; stats count prompts and
 * generated tokens. */
static void test_cache_and_stats(void) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/api_cache/sub", ssm_test_tmpdir());
  int32_t out[2][6];
  char *entry = NULL;
  for (int run = 0; run < 2; run++) {
    ssmc_options o;
    ssmc_options_init(&o);
    o.cache_dir = dir;
    ssmc_session *s = NULL;
    SSM_ASSERT_OK(ssmc_session_open(ssm_test_path(FIX), &o, &s));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    ssmc_stats st;
    ssmc_session_stats(s, &st);
    CU_ASSERT_EQUAL(st.cache, run ? SSMC_CACHE_HIT : SSMC_CACHE_MISS);
    CU_ASSERT_PTR_NOT_NULL_FATAL(st.cache_file);
    CU_ASSERT_EQUAL(strncmp(st.cache_file, dir, strlen(dir)), 0);
    CU_ASSERT(file_size(st.cache_file) > 1000);
    if (!run) entry = strdup(st.cache_file);
    else CU_ASSERT_STRING_EQUAL(st.cache_file, entry);
    CU_ASSERT(run ? st.compile_s == 0 : st.compile_s > 0);
    const int32_t prompt[] = {1, 2, 3, 4, 5};
    size_t n = 0;
    SSM_ASSERT_OK(ssmc_session_feed(s, prompt, 2, NULL, NULL));
    SSM_ASSERT_OK(ssmc_session_generate(s, prompt + 2, 3, 6, NULL, out[run], &n));
    CU_ASSERT_EQUAL(n, 6);
    ssmc_session_stats(s, &st);
    CU_ASSERT_EQUAL(st.prompt_tokens, 2 + 2); /* fed, and the prompt but its last */
    CU_ASSERT_EQUAL(st.generated_tokens, 6);
    CU_ASSERT(st.prompt_s > 0 && st.generate_s > 0);
    ssmc_session_close(s);
  }
  CU_ASSERT_EQUAL(memcmp(out[0], out[1], sizeof out[0]), 0);
  free(entry);
  char *d;
  SSM_ASSERT_OK(ssmc_cache_dir_default(&d));
  char want[600];
  snprintf(want, sizeof want, "%s/ssmc", getenv("XDG_CACHE_HOME"));
  CU_ASSERT_STRING_EQUAL(d, want);
  free(d);
}

/* Copies the last logits row it is called with into `user` (vocab floats). */
static int keep_row(const float *logits, int64_t vocab, int64_t position, void *user) {
  (void)position;
  memcpy(user, logits, sizeof *logits * (size_t)vocab);
  return 0;
}

/* A prompt of whole chunks and more, fed without its logits, goes to
 * Vulkan up to SSM_FEED_CHUNKS chunks a submission; fed with them, a chunk
 * a run. Both leave the same state, bit for bit: the logits of the token
 * after the prompt are equal. jamba_tiny reads each chunk's position (its
 * attention). Chunks of 4: 23 tokens are a submission of 5 chunks and 3
 * tokens; 43 are one of 8 (the most), then 2 and 3 tokens. */
static void test_feed_chunks_at_once(void) {
  static const char *const fixtures[] = {"tests/data/mamba1_tiny", "tests/data/jamba_tiny"};
  static const size_t counts[] = {23, 43};
  int32_t prompt[44];
  for (int i = 0; i < 44; i++) prompt[i] = (i * 37 + 11) % 200 + 1;
  for (int f = 0; f < 2; f++) {
    ssmc_options o;
    ssmc_options_init(&o);
    o.chunk = 4;
    ssmc_session *s = NULL;
    SSM_ASSERT_OK(ssmc_session_open(ssm_test_path(fixtures[f]), &o, &s));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(ssmc_session_chunk(s), 4);
    size_t V = (size_t)ssmc_session_vocab(s);
    float *row[2] = {calloc(V, sizeof(float)), calloc(V, sizeof(float))};
    float *scratch = calloc(V, sizeof(float));
    for (int c = 0; c < 2; c++) {
      for (int way = 0; way < 2; way++) {
        SSM_ASSERT_OK(ssmc_session_reset(s));
        SSM_ASSERT_OK(ssmc_session_feed(s, prompt, counts[c], way ? keep_row : NULL, scratch));
        SSM_ASSERT_OK(ssmc_session_feed(s, prompt + counts[c], 1, keep_row, row[way]));
      }
      CU_ASSERT(V > 0 && memcmp(row[0], row[1], sizeof(float) * V) == 0);
    }
    free(scratch);
    free(row[0]);
    free(row[1]);
    ssmc_session_close(s);
  }
}

/* ssmc_backend_choose on made-up device lists: a usable GPU of any kind
 * takes Vulkan; no usable device, the CPU interpreter; only CPU devices
 * (lavapipe), the interpreter below SSMC_CPU_FASTER_BELOW_PARAMS and
 * Vulkan from there. ssmc_weights_params counts a checkpoint's elements. */
static void test_backend_choice(void) {
  const uint64_t small = SSMC_CPU_FASTER_BELOW_PARAMS - 1, big = SSMC_CPU_FASTER_BELOW_PARAMS;
  static const char *const cpu_faster = "no GPU, and the CPU interpreter is faster than lavapipe "
                                        "for a model of this size";
  static const struct {
    ssmc_device devs[2];
    int n;
    uint64_t params;
    ssmc_backend want;
    const char *why;
  } cases[] = {
      {{{0}}, 0, small, SSMC_BACKEND_CPU, "no Vulkan device can run it"},
      {{{0}}, 0, big, SSMC_BACKEND_CPU, "no Vulkan device can run it"},
      {{{.type = "discrete GPU", .usable = 0}}, 1, big, SSMC_BACKEND_CPU, "no Vulkan device can run it"},
      {{{.type = "cpu", .usable = 1}}, 1, small, SSMC_BACKEND_CPU, NULL},
      {{{.type = "cpu", .usable = 1}}, 1, big, SSMC_BACKEND_VULKAN,
       "no GPU, and lavapipe is faster than the CPU interpreter for a model of this size"},
      {{{.type = "cpu", .usable = 1}, {.type = "discrete GPU", .usable = 1}}, 2, small,
       SSMC_BACKEND_VULKAN, "a GPU runs it"},
      {{{.type = "integrated GPU", .usable = 1}}, 1, 1, SSMC_BACKEND_VULKAN, "a GPU runs it"},
      {{{.type = "cpu", .usable = 1}, {.type = "discrete GPU", .usable = 0}}, 2, small,
       SSMC_BACKEND_CPU, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *why = NULL;
    ssmc_backend b = ssmc_backend_choose(cases[i].devs, cases[i].n, cases[i].params, &why);
    if (b != cases[i].want) fprintf(stderr, "\n  case %zu: %d, want %d (%s)", i, b, cases[i].want, why);
    CU_ASSERT_EQUAL(b, cases[i].want);
    CU_ASSERT_STRING_EQUAL(why, cases[i].why ? cases[i].why : cpu_faster);
  }
  uint64_t params = 0;
  /* tests/data/mamba1_tiny: 1000x64 embedding, 2 layers, the final norm */
  SSM_ASSERT_OK(ssmc_weights_params(FIX, &params));
  uint64_t layer = 2 * 128 * 64 + 128 * 4 + 128 + (4 + 32) * 128 + 128 * 4 + 128 + 128 * 16 + 128 +
                   64 * 128 + 64;
  CU_ASSERT_EQUAL(params, 1000 * 64 + 2 * layer + 64);
  SSM_ASSERT_ERR(ssmc_weights_params("/nonexistent", &params), "/nonexistent");

  /* options.backend AUTO: ssmc_backend_choose's pick for the checkpoint on
   * this machine's devices, which the session then runs on */
  SSM_ASSERT_OK(ssmc_weights_params(FIX, &params));
  ssmc_device *devs = NULL;
  int n = 0;
  ssmc_status st = ssmc_devices(&devs, &n);
  if (st) n = 0;
  ssmc_status_free(st);
  const char *want_why = NULL, *why = NULL;
  ssmc_backend want = ssmc_backend_choose(devs, n, params, &want_why);
  free(devs);
  ssmc_options o;
  ssmc_options_init(&o);
  o.backend = SSMC_BACKEND_AUTO;
  uint64_t counted = 1;
  CU_ASSERT_EQUAL(ssmc_backend_for(FIX, &o, &why, &counted), want);
  CU_ASSERT_STRING_EQUAL(why, want_why);
  CU_ASSERT_EQUAL(counted, params);
  ssmc_session *s = NULL;
  SSM_ASSERT_OK(ssmc_session_open(FIX, &o, &s));
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  why = NULL;
  counted = 0;
  CU_ASSERT_EQUAL(ssmc_session_backend(s, &why, &counted), want);
  CU_ASSERT_STRING_EQUAL(why, want_why);
  CU_ASSERT_EQUAL(counted, params);
  CU_ASSERT_EQUAL(!strcmp(ssmc_session_device(s), "cpu"), want == SSMC_BACKEND_CPU);
  ssmc_session_close(s);
  /* a bundle, or a Vulkan device named, takes Vulkan; a backend asked for is kept */
  const char *bundle = ssm_test_write("auto.ssmb", "SSMB\0\0\0\0", 8);
  CU_ASSERT_EQUAL(ssmc_backend_for(bundle, &o, &why, &counted), SSMC_BACKEND_VULKAN);
  CU_ASSERT_STRING_EQUAL(why, "a bundle runs on Vulkan");
  CU_ASSERT_EQUAL(counted, 0);
  o.device = 0;
  CU_ASSERT_EQUAL(ssmc_backend_for(FIX, &o, &why, &counted), SSMC_BACKEND_VULKAN);
  CU_ASSERT_STRING_EQUAL(why, "--device names a Vulkan device");
  o.device = -1;
  o.backend = SSMC_BACKEND_CPU;
  CU_ASSERT_EQUAL(ssmc_backend_for(FIX, &o, &why, &counted), SSMC_BACKEND_CPU);
  CU_ASSERT_STRING_EQUAL(why, "the backend asked for");
  o.backend = (ssmc_backend)7;
  SSM_ASSERT_ERR(ssmc_session_open(FIX, &o, &s), "options.backend: 7 is not VULKAN, CPU or AUTO");
}

/* ssmc_model_dir and ssmc_tokenizer_open_for find, before anything is
 * compiled or loaded, what the session opened with the same options finds:
 * the directory of the weights, and its tokenizer or the error naming it. */
static void test_files_before_open(void) {
  ssmc_options o;
  ssmc_options_init(&o);
  o.backend = SSMC_BACKEND_CPU;
  char *dir = NULL;
  SSM_ASSERT_OK(ssmc_model_dir("models/pymamba", &o, &dir));
  ssmc_session *s = NULL;
  SSM_ASSERT_OK(ssmc_session_open("models/pymamba", &o, &s));
  CU_ASSERT_STRING_EQUAL(dir, "models/pymamba");
  if (s) CU_ASSERT_STRING_EQUAL(dir, ssmc_session_model_dir(s));
  free(dir);
  ssmc_tokenizer *t = NULL;
  const ssmc_tokenizer *st = NULL;
  SSM_ASSERT_OK(ssmc_tokenizer_open_for("models/pymamba", &o, &t));
  if (s) SSM_ASSERT_OK(ssmc_session_tokenizer(s, &st));
  CU_ASSERT_PTR_NOT_NULL_FATAL(t);
  CU_ASSERT_EQUAL(ssmc_tokenizer_vocab_size(t), 4096);
  if (st) CU_ASSERT_EQUAL(ssmc_tokenizer_vocab_size(t), ssmc_tokenizer_vocab_size(st));
  ssmc_tokenizer_close(t);
  ssmc_session_close(s);
  /* a YAML with the weights file: the directory that holds it */
  o.weights = FIX "/model.safetensors";
  o.config = FIX "/config.json";
  SSM_ASSERT_OK(ssmc_model_dir("models/mamba1.yaml", &o, &dir));
  CU_ASSERT_STRING_EQUAL(dir, FIX);
  free(dir);
  SSM_ASSERT_ERR(ssmc_tokenizer_open_for("models/mamba1.yaml", &o, &t),
                 "no tokenizer: " FIX "/tokenizer.json does not exist");
  CU_ASSERT_PTR_NULL(t);
  o.tokenizer = "models/pymamba";
  SSM_ASSERT_OK(ssmc_tokenizer_open_for("models/mamba1.yaml", &o, &t));
  CU_ASSERT_PTR_NOT_NULL(t);
  ssmc_tokenizer_close(t);
  o.tokenizer = "/nonexistent/tokenizer.json";
  SSM_ASSERT_ERR(ssmc_tokenizer_open_for("models/mamba1.yaml", &o, &t), "/nonexistent/tokenizer.json");
  /* no weights: the session's own error */
  o.weights = NULL;
  SSM_ASSERT_ERR(ssmc_model_dir("models/mamba1.yaml", &o, &dir),
                 "models/mamba1.yaml: no weights: give the checkpoint directory");
  CU_ASSERT_PTR_NULL(dir);
  SSM_ASSERT_ERR(ssmc_model_dir("/nonexistent/model", NULL, &dir), "/nonexistent/model");
}

int main(void) {
  CU_TestInfo tests[] = {{"progress_vulkan", test_progress_vulkan},
                         {"progress_cpu", test_progress_cpu},
                         {"cancel", test_cancel},
                         {"cache_and_stats", test_cache_and_stats},
                         {"backend_choice", test_backend_choice},
                         {"files_before_open", test_files_before_open},
                         {"feed_chunks_at_once", test_feed_chunks_at_once},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("session", tests);
}
