/*
 * fuzz_safetensors.c — the safetensors reader: the input is a .safetensors
 * file. A file that opens must index every tensor by name, and every tensor
 * must read back (as stored and converted to f32) inside its mapping; a
 * name is UTF-8.
 */
#include "fuzz.h"
#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ssm_st *st = NULL;
  ssm_status s = ssm_st_open(fuzz_file(data, size), &st);
  if (s) {
    fuzz_check_error(s);
    return 0;
  }
  for (int i = 0; i < ssm_st_count(st); i++) {
    const ssm_st_tensor *t = ssm_st_at(st, i);
    if (ssm_st_find(st, t->name) != t) fuzz_fail("tensor '%s' is not found by name", t->name);
    if (!ssm_utf8_valid(t->name, strlen(t->name))) fuzz_fail("tensor '%s': its name is not UTF-8", t->name);
    if (t->nbytes > size) fuzz_fail("tensor '%s' is larger than the file", t->name);
    ssm_type want = {.dtype = t->dtype, .rank = t->rank};
    memcpy(want.dims, t->shape, sizeof want.dims);
    size_t numel = t->nbytes / ssm_dtype_size(t->dtype);
    float *buf = malloc(numel * 4 + 1);
    if (!buf) abort();
    s = ssm_st_read(st, t->name, &want, buf);
    if (s) fuzz_fail("tensor '%s' does not read as stored: %s", t->name, ssm_status_message(s));
    want.dtype = SSM_F32;
    s = ssm_st_read(st, t->name, &want, buf);
    if (s) fuzz_check_error(s); /* I32 -> f32 is refused */
    free(buf);
  }
  ssm_st_close(st);
  return 0;
}
