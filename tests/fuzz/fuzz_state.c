/*
 * fuzz_state.c — the state-file loader: the input is a state file, loaded
 * into a model with two state tensors (architecture "fuzz", weights
 * fingerprint 42). A file that loads must save again and reload to the same
 * tensors and position; one that does not must leave the tensors untouched.
 */
#include "fuzz.h"
#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"

#define NA 6
#define NB 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  float a[NA], b[NB], a2[NA], b2[NB];
  for (int i = 0; i < NA; i++) a[i] = -1;
  for (int i = 0; i < NB; i++) b[i] = -1;
  ssm_state_tensor t[2] = {{"l0.a", ssm_type_make(SSM_F32, 2, (int64_t[]){2, 3}), a},
                           {"l0.b", ssm_type_make(SSM_F32, 1, (int64_t[]){NB}), b}};
  int64_t pos = -7;
  ssm_status s = ssm_state_load(fuzz_file(data, size), "fuzz", 42, &pos, t, 2);
  if (s) {
    fuzz_check_error(s);
    for (int i = 0; i < NA; i++)
      if (a[i] != -1) fuzz_fail("a failed load changed the state");
    if (pos != -7) fuzz_fail("a failed load changed the position");
    return 0;
  }
  char path[64];
  snprintf(path, sizeof path, "/tmp/ssm-fuzz-state-%d", (int)getpid());
  s = ssm_state_save(path, "fuzz", 42, pos, t, 2);
  if (s) fuzz_fail("a loaded state does not save: %s", ssm_status_message(s));
  ssm_state_tensor u[2] = {t[0], t[1]};
  u[0].data = a2;
  u[1].data = b2;
  int64_t pos2 = -1;
  s = ssm_state_load(path, "fuzz", 42, &pos2, u, 2);
  unlink(path);
  if (s) fuzz_fail("a saved state does not load: %s", ssm_status_message(s));
  if (pos2 != pos || memcmp(a, a2, sizeof a) || memcmp(b, b2, sizeof b))
    fuzz_fail("save + load changed the state");
  return 0;
}
