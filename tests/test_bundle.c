/*
 * test_bundle.c — the .ssmb container: a compiled bundle survives the file
 * round trip, saving is atomic, and truncated, corrupt and wrong-version
 * files are refused with clear messages.
 */
#include <string.h>
#include <sys/stat.h>

#include "bundle/bundle.h"
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

int main(void) {
  CU_TestInfo tests[] = {{"roundtrip", test_roundtrip},
                         {"bad_files", test_bad_files},
                         {"manifest_not_object", test_manifest_not_object},
                         {"save_is_atomic", test_save_is_atomic},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("bundle", tests);
}
