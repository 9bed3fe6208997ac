/*
 * test_bundle.c — the .ssmb container: a compiled bundle survives the file
 * round trip, saving is atomic, and truncated, corrupt and wrong-version
 * files are refused with clear messages.
 */
#include <string.h>
#include <sys/stat.h>

#include "compile/compile.h"
#include "testutil.h"

static ssm_bundle *compile_tiny(void) {
  ssm_model *m = NULL;
  ssm_bundle *b = NULL;
  SSM_ASSERT_OK(ssm_model_open(ssm_test_path("tests/data/mamba1_tiny"), NULL, &m));
  ssm_compile_opts o = {.prefill_tokens = 4};
  if (m) SSM_ASSERT_OK(ssm_compile(m, &o, &b));
  ssm_model_close(m);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  return b;
}

static void test_roundtrip(void) {
  ssm_bundle *b = compile_tiny(), *c = NULL, *d = NULL;
  void *data;
  size_t size;
  SSM_ASSERT_OK(ssm_bundle_serialize(b, &data, &size));
  SSM_ASSERT_OK(ssm_bundle_open_memory(data, size, "mem.ssmb", &c));
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  CU_ASSERT_STRING_EQUAL(ssm_bundle_name(c), "mem.ssmb");
  char path[512];
  snprintf(path, sizeof path, "%s/rt.ssmb", ssm_test_tmpdir());
  SSM_ASSERT_OK(ssm_bundle_save(c, path));
  SSM_ASSERT_OK(ssm_bundle_open(path, &d));
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  void *data2;
  size_t size2;
  SSM_ASSERT_OK(ssm_bundle_serialize(d, &data2, &size2));
  CU_ASSERT_EQUAL(size, size2);
  CU_ASSERT_EQUAL(memcmp(data, data2, size), 0); /* the same bytes */
  const ssm_manifest *m = ssm_bundle_manifest(d);
  for (int i = 0; i < m->nkernels; i++)
    CU_ASSERT_EQUAL(memcmp(ssm_bundle_blob(b, m->kernels[i].spirv),
                           ssm_bundle_blob(d, m->kernels[i].spirv), (size_t)m->kernels[i].spirv.size), 0);
  free(data);
  free(data2);
  ssm_bundle_close(b);
  ssm_bundle_close(c);
  ssm_bundle_close(d);
}

static char *slurp(const char *path, size_t *n) {
  char *d;
  ssm_status s = ssm_file_read(path, 0, &d, n);
  CU_ASSERT_PTR_NULL_FATAL(s);
  return d;
}

static void test_bad_files(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/good.ssmb", ssm_test_tmpdir());
  ssm_bundle *g = compile_tiny(), *b = NULL;
  SSM_ASSERT_OK(ssm_bundle_save(g, path));
  ssm_bundle_close(g);
  size_t n;
  char *good = slurp(path, &n);

  const char *p = ssm_test_write("trunc.ssmb", good, n - 3);
  SSM_ASSERT_ERR(ssm_bundle_open(p, &b), "truncated or corrupt bundle");
  p = ssm_test_write("short.ssmb", good, 10);
  SSM_ASSERT_ERR(ssm_bundle_open(p, &b), "not an ssmc bundle");
  p = ssm_test_write("empty.ssmb", "", 0);
  SSM_ASSERT_ERR(ssm_bundle_open(p, &b), "not an ssmc bundle");

  char *bad = malloc(n);
  memcpy(bad, good, n);
  bad[n - 2] ^= 0x40;
  p = ssm_test_write("flip.ssmb", bad, n);
  SSM_ASSERT_ERR(ssm_bundle_open(p, &b), "checksum mismatch");

  memcpy(bad, good, n);
  bad[4] = 7;
  p = ssm_test_write("ver.ssmb", bad, n);
  char want[96];
  snprintf(want, sizeof want, "format version 7, but this ssmc reads version %d", SSM_BUNDLE_VERSION);
  SSM_ASSERT_ERR(ssm_bundle_open(p, &b), want);

  memcpy(bad, good, n);
  bad[16] = (char)0xff; /* manifest size */
  p = ssm_test_write("msize.ssmb", bad, n);
  SSM_ASSERT_ERR(ssm_bundle_open(p, &b), "truncated or corrupt");

  /* every bit of the reserved bytes counts */
  for (int byte = 48; byte < 64; byte++) {
    memcpy(bad, good, n);
    bad[byte] = 1;
    SSM_ASSERT_ERR(ssm_bundle_open_memory(bad, n, "r.ssmb", &b), "reserved header bytes");
  }
  /* the header is outside the checksum: every one of its 512 bits, flipped
   * alone, is refused (the manifest's length grown into the padding before
   * the blobs included) */
  int accepted = 0;
  for (int bit = 0; bit < 64 * 8; bit++) {
    memcpy(bad, good, n);
    bad[bit / 8] ^= (char)(1 << bit % 8);
    ssm_status s = ssm_bundle_open_memory(bad, n, "h.ssmb", &b);
    if (!s) {
      fprintf(stderr, "\n  header bit %d flipped: accepted\n", bit);
      accepted++;
      ssm_bundle_close(b);
      b = NULL;
    }
    ssm_status_free(s);
  }
  CU_ASSERT_EQUAL(accepted, 0);
  uint64_t mlen = 0;
  for (int i = 0; i < 8; i++) mlen |= (uint64_t)(unsigned char)good[16 + i] << 8 * i;
  if ((64 + mlen) % 16) { /* padding follows the manifest: one byte of it */
    memcpy(bad, good, n);
    bad[16] = (char)(mlen + 1);
    bad[17] = (char)((mlen + 1) >> 8);
    bad[18] = (char)((mlen + 1) >> 16);
    SSM_ASSERT_ERR(ssm_bundle_open_memory(bad, n, "pad.ssmb", &b), "does not end at its text");
  }
  CU_ASSERT_PTR_NULL(b);
  free(bad);
  free(good);
}

static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A manifest that is not a JSON object: a clear error, nothing leaks (as
 * fuzz_bundle once found). */
static void test_manifest_not_object(void) {
  static const char *const manifests[] = {"48,256]}", "[1,2]", "\"text\"", "null", "{\"vocab\": 5"};
  for (int i = 0; i < 5; i++) {
    size_t mlen = strlen(manifests[i]), boff = (64 + mlen + 15) & ~(size_t)15;
    unsigned char *f = calloc(1, boff);
    memcpy(f, "SSMB", 4);
    f[4] = SSM_BUNDLE_VERSION;
    put64(f + 8, 64);
    put64(f + 16, mlen);
    put64(f + 24, boff);
    memcpy(f + 64, manifests[i], mlen);
    put64(f + 40, ssm_fnv1a(SSM_FNV_INIT, f + 64, boff - 64));
    ssm_bundle *b = NULL;
    SSM_ASSERT_ERR(ssm_bundle_open_memory(f, boff, "m.ssmb", &b), "m.ssmb: corrupt manifest: ");
    CU_ASSERT_PTR_NULL(b);
    free(f);
  }
}

/* A save that fails half-way (the file-size limit) leaves the old file as
 * it was, and no temporary file behind. */
static void test_save_is_atomic(void) {
  char dir[512], path[600];
  snprintf(dir, sizeof dir, "%s/atomic", ssm_test_tmpdir());
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/b.ssmb", dir);
  const char *old = "an older file";
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs(old, f);
  fclose(f);
  ssm_bundle *b = compile_tiny();
  ssm_test_limit_file_size(4096);
  ssm_status s = ssm_bundle_save(b, path);
  ssm_test_limit_file_size(0);
  SSM_ASSERT_ERR(s, "b.ssmb: cannot write (File too large)");
  size_t n;
  char *after = slurp(path, &n);
  CU_ASSERT_EQUAL(n, strlen(old));
  CU_ASSERT_EQUAL(memcmp(after, old, n), 0);
  free(after);
  char cmd[700], *out;
  snprintf(cmd, sizeof cmd, "ls %s", dir);
  CU_ASSERT_EQUAL(ssm_test_sh(cmd, &out), 0);
  CU_ASSERT_STRING_EQUAL(out, "b.ssmb\n");
  free(out);
  /* to a device it writes in place, not over it */
  SSM_ASSERT_OK(ssm_bundle_save(b, "/dev/null"));
  struct stat st;
  CU_ASSERT(!stat("/dev/null", &st) && S_ISCHR(st.st_mode));
  ssm_bundle_close(b);
}

/* The bundle file `good` (n bytes) with its manifest replaced by `json`:
 * sections and checksum redone, so only the manifest's checks can refuse it. */
static unsigned char *with_manifest(const unsigned char *good, size_t n, const char *json,
                                    size_t *out_n) {
  uint64_t boff = 0, blen = 0;
  for (int i = 7; i >= 0; i--) {
    boff = boff << 8 | good[24 + i];
    blen = blen << 8 | good[32 + i];
  }
  CU_ASSERT_FATAL(boff + blen == n);
  size_t mlen = strlen(json), boff2 = (64 + mlen + 15) & ~(size_t)15;
  unsigned char *f = calloc(1, boff2 + blen);
  memcpy(f, good, 8);
  put64(f + 8, 64);
  put64(f + 16, mlen);
  put64(f + 24, boff2);
  put64(f + 32, blen);
  memcpy(f + 64, json, mlen);
  memcpy(f + boff2, good + boff, blen);
  put64(f + 40, ssm_fnv1a(SSM_FNV_INIT, f + 64, boff2 + blen - 64));
  *out_n = boff2 + blen;
  return f;
}

/* The optional record of the weights directory (manifest "source"): it
 * survives the round trip, a bundle without it has none, and each of its
 * fields is checked. */
static void test_source(void) {
  ssm_bundle *b = compile_tiny(), *c = NULL;
  CU_ASSERT_PTR_NULL(ssm_bundle_manifest(b)->source_dir);
  const ssm_mf_source_file files[] = {{"config.json", 0x0123456789abcdefull},
                                      {"model.safetensors", 0xfedcba9876543210ull}};
  SSM_ASSERT_OK(ssm_bundle_set_source(b, "/w/model dir", files, 2));
  void *data;
  size_t size;
  SSM_ASSERT_OK(ssm_bundle_serialize(b, &data, &size));
  SSM_ASSERT_OK(ssm_bundle_open_memory(data, size, "s.ssmb", &c));
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  const ssm_manifest *m = ssm_bundle_manifest(c);
  CU_ASSERT_STRING_EQUAL(m->source_dir, "/w/model dir");
  CU_ASSERT_EQUAL(m->nsource_files, 2);
  for (int i = 0; i < 2 && m->nsource_files == 2; i++) {
    CU_ASSERT_STRING_EQUAL(m->source_files[i].name, files[i].name);
    CU_ASSERT_EQUAL(m->source_files[i].hash, files[i].hash);
  }
  char *summary = NULL;
  SSM_ASSERT_OK(ssm_bundle_describe(c, 1, &summary));
  CU_ASSERT_PTR_NOT_NULL(strstr(summary, "\"xxh3\":\t\"0123456789abcdef\""));
  free(summary);
  ssm_bundle_close(c);
  /* the manifest as written, with its "source" replaced */
  uint64_t mlen = 0;
  for (int i = 7; i >= 0; i--) mlen = mlen << 8 | ((unsigned char *)data)[16 + i];
  char *json = strndup((char *)data + 64, (size_t)mlen);
  char *at = strstr(json, ",\"source\":");
  CU_ASSERT_PTR_NOT_NULL_FATAL(at);
  struct { const char *source, *error; } bad[] = {
      {"5", "source is not an object"},
      {"{\"files\":[]}", "source.dir is missing"},
      {"{\"dir\":\"rel/dir\",\"files\":[]}", "source.dir is not an absolute path"},
      {"{\"dir\":\"/d\"}", "source.files is missing"},
      {"{\"dir\":\"/d\",\"files\":{}}", "source.files is not a list"},
      {"{\"dir\":\"/d\",\"files\":[{\"name\":\"a/b\",\"xxh3\":\"0123456789abcdef\"}]}",
       "source.files[0] has a name that is not a file name"},
      {"{\"dir\":\"/d\",\"files\":[{\"name\":\"..\",\"xxh3\":\"0123456789abcdef\"}]}",
       "source.files[0] has a name that is not a file name"},
      {"{\"dir\":\"/d\",\"files\":[{\"name\":\"a\",\"xxh3\":\"0123\"}]}",
       "source.files[0] has an xxh3 that is not 16 lowercase hex digits"},
      {"{\"dir\":\"/d\",\"files\":[{\"name\":\"a\",\"xxh3\":\"0123456789ABCDEF\"}]}",
       "has an xxh3 that is not 16 lowercase hex digits"},
      {"{\"dir\":\"/d\",\"files\":[{\"name\":\"a\",\"xxh3\":\"0123456789abcdef\"},"
       "{\"name\":\"a\",\"xxh3\":\"0123456789abcdef\"}]}",
       "source.files[1] names a file given before"},
      {"{\"dir\":\"/d\",\"files\":[{\"xxh3\":\"0123456789abcdef\"}]}",
       "source.files[0].name is missing"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[65536];
    snprintf(text, sizeof text, "%.*s,\"source\":%s}", (int)(at - json), json, bad[i].source);
    size_t n;
    unsigned char *f = with_manifest(data, size, text, &n);
    ssm_bundle *d = NULL;
    SSM_ASSERT_ERR(ssm_bundle_open_memory(f, n, "s.ssmb", &d), bad[i].error);
    CU_ASSERT_PTR_NULL(d);
    free(f);
  }
  /* and without "source" at all: fine, nothing recorded */
  char text[65536];
  snprintf(text, sizeof text, "%.*s}", (int)(at - json), json);
  size_t n;
  unsigned char *f = with_manifest(data, size, text, &n);
  SSM_ASSERT_OK(ssm_bundle_open_memory(f, n, "s.ssmb", &c));
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  CU_ASSERT_PTR_NULL(ssm_bundle_manifest(c)->source_dir);
  ssm_bundle_close(c);
  free(f);
  free(json);
  free(data);
  ssm_bundle_close(b);
}

/* The config keys a bundle was compiled with (manifest "config") and the
 * compile cache's key: they survive the round trip and are checked. */
static void test_config(void) {
  ssm_bundle *b = compile_tiny(), *c = NULL;
  const char *cfg = ssm_bundle_manifest(b)->config;
  CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
  CU_ASSERT_PTR_NOT_NULL(strstr(cfg, "\"model_type\":\"mamba\""));
  CU_ASSERT_PTR_NOT_NULL(strstr(cfg, "\"vocab_size\":1000"));
  void *data;
  size_t size;
  SSM_ASSERT_OK(ssm_bundle_serialize(b, &data, &size));
  SSM_ASSERT_OK(ssm_bundle_open_memory(data, size, "c.ssmb", &c));
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  CU_ASSERT_STRING_EQUAL(ssm_bundle_manifest(c)->config, cfg);
  CU_ASSERT_PTR_NULL(ssm_bundle_manifest(c)->cache_key);
  ssm_bundle_close(c);
  uint64_t mlen = 0;
  for (int i = 7; i >= 0; i--) mlen = mlen << 8 | ((unsigned char *)data)[16 + i];
  char *json = strndup((char *)data + 64, (size_t)mlen);
  char *at = strstr(json, ",\"config\":");
  CU_ASSERT_PTR_NOT_NULL_FATAL(at);
  struct { const char *tail, *error; } cases[] = {
      {",\"config\":5", "config is not an object"},
      {",\"config\":{},\"cache_key\":\"0123\"", "cache_key is not 32 lowercase hex digits"},
      {",\"cache_key\":7", "cache_key is not a string"},
      {",\"cache_key\":\"0123456789abcdef0123456789abcdef\"", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[65536];
    snprintf(text, sizeof text, "%.*s%s}", (int)(at - json), json, cases[i].tail);
    size_t n;
    unsigned char *f = with_manifest(data, size, text, &n);
    ssm_bundle *d = NULL;
    if (cases[i].error) {
      SSM_ASSERT_ERR(ssm_bundle_open_memory(f, n, "c.ssmb", &d), cases[i].error);
      CU_ASSERT_PTR_NULL(d);
    } else {
      SSM_ASSERT_OK(ssm_bundle_open_memory(f, n, "c.ssmb", &d));
      CU_ASSERT_PTR_NOT_NULL_FATAL(d);
      CU_ASSERT_PTR_NULL(ssm_bundle_manifest(d)->config);
      CU_ASSERT_STRING_EQUAL(ssm_bundle_manifest(d)->cache_key, "0123456789abcdef0123456789abcdef");
      ssm_bundle_close(d);
    }
    free(f);
  }
  free(json);
  free(data);
  ssm_bundle_close(b);
}

int main(void) {
  CU_TestInfo tests[] = {{"roundtrip", test_roundtrip},
                         {"bad_files", test_bad_files},
                         {"manifest_not_object", test_manifest_not_object},
                         {"save_is_atomic", test_save_is_atomic},
                         {"source", test_source},
                         {"config", test_config},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("bundle", tests);
}
