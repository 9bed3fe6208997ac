/*
 * test_bundle.c — the .ssmb container: round trip, and refusal of truncated,
 * corrupt and wrong-version files with clear messages.
 */
#include <string.h>

#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"
#include "testutil.h"


static void test_roundtrip(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/rt.ssmb", ssm_test_tmpdir());
  ssm_bundle_writer *w = ssm_bundle_writer_create();
  uint64_t a, b;
  ssm_bundle_writer_add_blob(w, "hello", 5, &a);
  ssm_bundle_writer_add_blob(w, "world!", 6, &b);
  SSM_ASSERT_OK(ssm_bundle_writer_save(w, "{\"k\":1}", path));
  ssm_bundle_writer_destroy(w);
  ssm_bundle *bd;
  SSM_ASSERT_OK(ssm_bundle_open(path, &bd));
  if (!bd) return;
  CU_ASSERT_STRING_EQUAL(ssm_bundle_manifest(bd), "{\"k\":1}");
  const void *p;
  SSM_ASSERT_OK(ssm_bundle_blob(bd, b, 6, &p));
  CU_ASSERT_EQUAL(memcmp(p, "world!", 6), 0);
  SSM_ASSERT_ERR(ssm_bundle_blob(bd, b, 7, &p), "outside the");
  SSM_ASSERT_ERR(ssm_bundle_blob(bd, UINT64_MAX, 2, &p), "outside the");
  ssm_bundle_close(bd);
}

static char *slurp(const char *path, size_t *n) {
  char *d;
  ssm_status s = ssm_file_read(path, 0, &d, n);
  CU_ASSERT_PTR_NULL(s);
  ssm_status_free(s);
  return d;
}

static void test_bad_files(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/good.ssmb", ssm_test_tmpdir());
  ssm_bundle_writer *w = ssm_bundle_writer_create();
  uint64_t a;
  ssm_bundle_writer_add_blob(w, "payload-bytes", 13, &a);
  SSM_ASSERT_OK(ssm_bundle_writer_save(w, "{\"x\":[1,2,3]}", path));
  ssm_bundle_writer_destroy(w);
  size_t n;
  char *good = slurp(path, &n);
  ssm_bundle *b = NULL;

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
  SSM_ASSERT_ERR(ssm_bundle_open(p, &b), "format version 7, but this ssmc reads version 1");

  memcpy(bad, good, n);
  bad[16] = (char)0xff; /* manifest size */
  p = ssm_test_write("msize.ssmb", bad, n);
  SSM_ASSERT_ERR(ssm_bundle_open(p, &b), "truncated or corrupt");
  CU_ASSERT_PTR_NULL(b);
  free(bad);
  free(good);
}

/* A manifest that is JSON but not an object ("48,..." parses as 48): a
 * clear error, and nothing leaks (fuzz_bundle found the leak). */
static void test_inspect_manifest_not_object(void) {
  static const char *const manifests[] = {"48,256]}", "[1,2]", "\"text\"", "null", "{\"vocab\": 5"};
  for (int i = 0; i < 5; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/m%d.ssmb", ssm_test_tmpdir(), i);
    ssm_bundle_writer *w = ssm_bundle_writer_create();
    SSM_ASSERT_OK(ssm_bundle_writer_save(w, manifests[i], path));
    ssm_bundle_writer_destroy(w);
    char *text = NULL;
    for (int json = 0; json < 2; json++)
      SSM_ASSERT_ERR(ssm_inspect(path, json, &text), "corrupt manifest: not a JSON object");
    CU_ASSERT_PTR_NULL(text);
  }
}

/* inspect reads whatever shape a manifest has: programs given as a list
 * have no names, and are shown as '?'. */
static void test_inspect_odd_manifest(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/odd.ssmb", ssm_test_tmpdir());
  ssm_bundle_writer *w = ssm_bundle_writer_create();
  SSM_ASSERT_OK(ssm_bundle_writer_save(w, "{\"programs\":[{\"tokens\":3,\"steps\":[{\"op\":5}]}],"
                                          "\"buffers\":7,\"kernels\":[\"x\"]}", path));
  ssm_bundle_writer_destroy(w);
  char *text = NULL;
  SSM_ASSERT_OK(ssm_inspect(path, 0, &text));
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "  ?          3 tokens"));
  free(text);
  SSM_ASSERT_OK(ssm_inspect(path, 1, &text));
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"dispatches_by_op\""));
  free(text);
}

int main(void) {

  CU_TestInfo tests[] = {{"roundtrip", test_roundtrip}, {"bad_files", test_bad_files},
                         {"inspect_manifest_not_object", test_inspect_manifest_not_object},
                         {"inspect_odd_manifest", test_inspect_odd_manifest},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("bundle", tests);
}
