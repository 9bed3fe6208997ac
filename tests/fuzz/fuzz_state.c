/*
 * fuzz_state.c — the state-file loader: the input is a state file, loaded
 * into two models: a fixed one with two state tensors (architecture "fuzz",
 * weights fingerprint 42), and the one its own header describes
 * (architecture, fingerprint, each tensor's name, dtype and shape), so that
 * states saved by ssmc (Mamba, Mamba-2, Jamba) get past the model checks to
 * the offsets, sizes and data. A file that loads must save again and reload
 * to the same tensors and position; one that does not must leave the
 * tensors and the position untouched. Each input is tried as it is and,
 * so that mutations of the header get past the checksum, with its checksum
 * recomputed.
 */
#include <cjson/cJSON.h>

#include "fuzz.h"
#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"

#define PREFIX 24              /* "SSMS", u32 version, u64 header length, u64 checksum */
#define MAX_TENSORS 64         /* of a model taken from a header */
#define MAX_BYTES (1 << 22)    /* of its tensors together */

static size_t tensor_bytes(const ssm_state_tensor *t) {
  return (size_t)ssm_type_numel(&t->type) * ssm_dtype_size(t->type.dtype);
}

/* Loads the file `path` into tensors `t` of model (`arch`, `fingerprint`)
 * and checks the properties above. */
static void check_load(const char *path, const char *arch, uint64_t fingerprint,
                       ssm_state_tensor *t, int n) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += tensor_bytes(&t[i]);
  unsigned char *cur = malloc(total + 1), *keep = malloc(total + 1), *again = malloc(total + 1);
  if (!cur || !keep || !again) abort();
  memset(cur, 0xa5, total);
  memcpy(keep, cur, total);
  for (size_t i = 0, at = 0; i < (size_t)n; at += tensor_bytes(&t[i]), i++) t[i].data = cur + at;
  int64_t pos = -7;
  ssm_status s = ssm_state_load(path, arch, fingerprint, &pos, t, n);
  if (s) {
    fuzz_check_error(s);
    if (memcmp(cur, keep, total)) fuzz_fail("a failed load changed the state");
    if (pos != -7) fuzz_fail("a failed load changed the position");
  } else {
    char out[64];
    snprintf(out, sizeof out, "/tmp/ssm-fuzz-state-%d", (int)getpid());
    s = ssm_state_save(out, arch, fingerprint, pos, t, n);
    if (s) fuzz_fail("a loaded state does not save: %s", ssm_status_message(s));
    for (size_t i = 0, at = 0; i < (size_t)n; at += tensor_bytes(&t[i]), i++) t[i].data = again + at;
    int64_t pos2 = -1;
    s = ssm_state_load(out, arch, fingerprint, &pos2, t, n);
    unlink(out);
    if (s) fuzz_fail("a saved state does not load: %s", ssm_status_message(s));
    if (pos2 != pos || memcmp(cur, again, total)) fuzz_fail("save + load changed the state");
  }
  free(cur);
  free(keep);
  free(again);
}

/* The model the header of `data` describes, when it is one a state could
 * belong to: its tensors into `t` (names pointing into *out_h), the count
 * returned; 0 otherwise. */
static int described_model(const uint8_t *data, size_t size, cJSON **out_h, const char **out_arch,
                           uint64_t *out_fingerprint, ssm_state_tensor *t) {
  *out_h = NULL;
  if (size < PREFIX || memcmp(data, "SSMS", 4)) return 0;
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = hl << 8 | data[8 + i];
  if (hl > size - PREFIX) return 0;
  cJSON *h = cJSON_ParseWithLength((const char *)data + PREFIX, (size_t)hl);
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(h, "architecture");
  const cJSON *fp = cJSON_GetObjectItemCaseSensitive(h, "weights_fingerprint");
  const cJSON *ts = cJSON_GetObjectItemCaseSensitive(h, "tensors");
  char *end = NULL;
  if (cJSON_IsString(fp)) *out_fingerprint = strtoull(fp->valuestring, &end, 16);
  int n = cJSON_IsArray(ts) ? cJSON_GetArraySize(ts) : 0;
  int ok = cJSON_IsString(a) && end && !*end && n >= 1 && n <= MAX_TENSORS;
  size_t total = 0;
  for (int i = 0; ok && i < n; i++) {
    const cJSON *e = cJSON_GetArrayItem(ts, i);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    ssm_dtype d;
    int rank = cJSON_IsArray(sh) ? cJSON_GetArraySize(sh) : -1;
    int64_t dims[SSM_MAX_RANK];
    ok = cJSON_IsString(name) && cJSON_IsString(dt) &&
         ssm_dtype_parse(dt->valuestring, strlen(dt->valuestring), &d) && rank >= 0 &&
         rank <= SSM_MAX_RANK;
    double numel = 1;
    for (int k = 0; ok && k < rank; k++) {
      const cJSON *x = cJSON_GetArrayItem(sh, k);
      ok = cJSON_IsNumber(x) && x->valuedouble >= 1 && (numel *= x->valuedouble) <= MAX_BYTES;
      if (ok) dims[k] = (int64_t)x->valuedouble;
    }
    if (ok) t[i] = (ssm_state_tensor){name->valuestring, ssm_type_make(d, rank, dims), NULL};
    ok = ok && (total += tensor_bytes(&t[i])) <= MAX_BYTES;
  }
  if (!ok) {
    cJSON_Delete(h);
    return 0;
  }
  *out_h = h;
  *out_arch = a->valuestring;
  return n;
}

static void try_state(const uint8_t *data, size_t size) {
  const char *path = fuzz_file(data, size);
  ssm_state_tensor fixed[2] = {{"l0.a", ssm_type_make(SSM_F32, 2, (int64_t[]){2, 3}), NULL},
                               {"l0.b", ssm_type_make(SSM_F32, 1, (int64_t[]){4}), NULL}};
  check_load(path, "fuzz", 42, fixed, 2);
  ssm_state_tensor t[MAX_TENSORS];
  cJSON *h;
  const char *arch;
  uint64_t fingerprint = 0;
  int n = described_model(data, size, &h, &arch, &fingerprint, t);
  if (n) check_load(path, arch, fingerprint, t, n);
  cJSON_Delete(h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  try_state(data, size);
  if (size >= PREFIX && !memcmp(data, "SSMS", 4)) {
    uint8_t *fixed = malloc(size);
    if (!fixed) abort();
    memcpy(fixed, data, size);
    uint64_t h = ssm_fnv1a(SSM_FNV_INIT, fixed + PREFIX, size - PREFIX);
    for (int i = 0; i < 8; i++) fixed[16 + i] = (uint8_t)(h >> (8 * i));
    if (memcmp(fixed, data, size)) try_state(fixed, size);
    free(fixed);
  }
  return 0;
}
