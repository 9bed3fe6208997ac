/*
 * fuzz_bundle.c — the .ssmb container and the manifest readers that need no
 * device: ssm_bundle_open, ssm_bundle_blob and ssm_inspect (text and JSON).
 * (ssm_rt_open's manifest checks run against a Vulkan device's buffers, so
 * they are not fuzzed here.) Each input is tried as it is and, so that
 * mutations get past the checksum, with its header checksum recomputed.
 */
#include "fuzz.h"
#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"

static void try_bundle(const uint8_t *data, size_t size) {
  const char *path = fuzz_file(data, size);
  ssm_bundle *b = NULL;
  ssm_status s = ssm_bundle_open(path, &b);
  if (s) {
    fuzz_check_error(s);
    return;
  }
  if (strlen(ssm_bundle_manifest(b)) > size) fuzz_fail("manifest longer than the file");
  const void *p;
  uint64_t probes[][2] = {{0, 0}, {0, 4}, {16, 64}, {size, 0}, {UINT64_MAX, 2}, {4, UINT64_MAX}};
  for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
    s = ssm_bundle_blob(b, probes[i][0], probes[i][1], &p);
    if (s) fuzz_check_error(s);
    else if (probes[i][1]) { /* the view is readable to its end */
      volatile uint8_t first = ((const uint8_t *)p)[0], last = ((const uint8_t *)p)[probes[i][1] - 1];
      (void)first;
      (void)last;
    }
  }
  ssm_bundle_close(b);
  for (int json = 0; json < 2; json++) {
    char *text = NULL;
    s = ssm_inspect(path, json, &text);
    if (s) fuzz_check_error(s);
    else if (!text || !*text) fuzz_fail("inspect returned no text");
    free(text);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try_bundle(data, size);
  if (size >= 64 && !memcmp(data, "SSMB", 4)) {
    uint8_t *fixed = ssm_xmalloc(size);
    memcpy(fixed, data, size);
    uint64_t h = ssm_fnv1a(SSM_FNV_INIT, fixed + 64, size - 64);
    for (int i = 0; i < 8; i++) fixed[40 + i] = (uint8_t)(h >> (8 * i));
    if (memcmp(fixed, data, size)) try_bundle(fixed, size);
    free(fixed);
  }
  return 0;
}
