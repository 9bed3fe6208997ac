/* gemm_lab.c — times GEMM kernels written as standalone GLSL files on the
 * prefill matmul's operands, to compare designs of gemm_coop.glsl.in
 * without rebuilding ssmc (docs/performance.md).
 *
 *   build/gemm_lab M K N KERNEL.glsl BM BN [PREP.glsl] [NAME=VALUE ...]
 *
 * out[m,n] = sum_k x[m,k] w[n,k]: x is f32 [M,K] (rows of mixed
 * magnitudes: row m is scaled by 2^(m % 13 - 6)), w bf16 [N,K]. The kernel
 * sees #defines GM, GK, GN and these bindings: 0 out (f32), 1 x (f32), 2 w
 * (bf16, two a word), 3 a scratch buffer of M * K halves and then M floats
 * (for PREP, which runs first, over M workgroups, with a barrier between).
 * The grid is ceil(M / BM) x ceil(N / BN) workgroups, linear, in x. Each
 * NAME=VALUE is a #define for both kernels (bench/gemm_lab/staged.glsl's
 * knobs; bench/README.md).
 * Reported: the best of 5 GPU times of the whole (PREP included), the
 * TFLOP/s that makes, and the largest error of 256 sampled outputs against
 * a double-precision sum of x rounded to f16's precision times w, relative
 * to that output's sum of |x w| (a kernel that rounds x so is within about
 * 2^-11 of it).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/glsl_defines.h"
#include "codegen/codegen.h"
#include "runtime/vulkan/vulkan.h"

static int check(ssm_status s, const char *what) {
  if (!s) return 0;
  fprintf(stderr, "gemm_lab: %s: %s\n", what, ssm_status_message(s));
  return 1;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = 0;
  fclose(f);
  return s;
}

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* f rounded to 11 significant bits (f16's precision, f32's range) */
static double x16(float f) {
  if (f == 0.0f || !isfinite(f)) return f;
  int e;
  double m = frexp(f, &e);
  return ldexp(nearbyint(m * 2048.0) / 2048.0, e);
}

static ssm_status kernel(ssm_vk *vk, const char *path, const char *defs, ssm_vk_kernel **out) {
  char *src = slurp(path);
  if (!src) return ssm_status_new(SSM_ERR_IO, "%s: cannot read", path);
  uint32_t *words = NULL;
  size_t count = 0;
  ssm_status s = glsl_spirv(src, defs, path, &words, &count);
  free(src);
  if (!s) s = ssm_vk_kernel_create(vk, words, count, 4, 0, out);
  free(words);
  return s;
}

static void log_stderr(const char *msg, void *user) {
  (void)user;
  fprintf(stderr, "%s\n", msg);
}

int main(int argc, char **argv) {
  if (getenv("SSMC_VERBOSE")) ssm_log_set(log_stderr, NULL);
  if (argc < 7) {
    fprintf(stderr, "usage: gemm_lab M K N KERNEL.glsl BM BN [PREP.glsl] [NAME=VALUE ...]\n");
    return 2;
  }
  const size_t M = strtoul(argv[1], NULL, 10), K = strtoul(argv[2], NULL, 10),
               N = strtoul(argv[3], NULL, 10), BM = strtoul(argv[5], NULL, 10),
               BN = strtoul(argv[6], NULL, 10);
  if (!M || !K || !N || !BM || !BN || K % 32) {
    fprintf(stderr, "gemm_lab: M, K, N, BM, BN must be positive and K a multiple of 32\n");
    return 2;
  }
  float *x = malloc(M * K * 4);
  uint16_t *w = malloc(N * K * 2);
  float *o = malloc(M * N * 4);
  if (!x || !w || !o) return 1;
  uint64_t r = 0x9e3779b97f4a7c15u;
  for (size_t m = 0; m < M; m++)
    for (size_t k = 0; k < K; k++) {
      r = r * 6364136223846793005u + 1442695040888963407u;
      x[m * K + k] = ldexpf((float)((r >> 40) & 0xffff) / 32768.0f - 1.0f, (int)(m % 13) - 6);
    }
  for (size_t i = 0; i < N * K; i++) {
    r = r * 6364136223846793005u + 1442695040888963407u;
    w[i] = to_bf16(((float)((r >> 40) & 0xffff) / 32768.0f - 1.0f) * 0.05f);
  }
  ssm_vk *vk = NULL;
  if (check(ssm_vk_open(-1, 0, &vk), "open")) return 1;
  ssm_vk_buffer *ob = NULL, *xb = NULL, *wb = NULL, *sb = NULL;
  ssm_vk_kernel *kg = NULL, *kp = NULL;
  ssm_vk_program *p = NULL;
  char defs[1024];
  const char *prep = NULL;
  int at = snprintf(defs, sizeof defs, "#define GM %zuu\n#define GK %zuu\n#define GN %zuu\n", M, K, N);
  for (int i = 7; i < argc; i++) {
    const char *eq = strchr(argv[i], '=');
    if (!eq) {
      prep = argv[i];
      continue;
    }
    at += snprintf(defs + at, sizeof defs - (size_t)at, "#define %.*s %s\n", (int)(eq - argv[i]),
                   argv[i], eq + 1);
    if (at >= (int)sizeof defs) {
      fprintf(stderr, "gemm_lab: too many defines\n");
      return 2;
    }
  }
  uint32_t groups = (uint32_t)(((M + BM - 1) / BM) * ((N + BN - 1) / BN));
  int bad = check(ssm_vk_buffer_create(vk, M * N * 4, SSM_VK_BUFFER_DEVICE, &ob), "out") ||
            check(ssm_vk_buffer_create(vk, M * K * 4, SSM_VK_BUFFER_DEVICE, &xb), "x") ||
            check(ssm_vk_buffer_create(vk, N * K * 2, SSM_VK_BUFFER_DEVICE, &wb), "w") ||
            check(ssm_vk_buffer_create(vk, M * K * 2 + M * 4, SSM_VK_BUFFER_DEVICE, &sb), "scratch") ||
            check(ssm_vk_buffer_upload(vk, xb, 0, x, M * K * 4), "upload x") ||
            check(ssm_vk_buffer_upload(vk, wb, 0, w, N * K * 2), "upload w") ||
            check(kernel(vk, argv[4], defs, &kg), argv[4]) ||
            (prep && check(kernel(vk, prep, defs, &kp), prep)) ||
            check(ssm_vk_program_create(vk, &p), "program");
  ssm_vk_binding b[4] = {{ob, 0, 0}, {xb, 0, 0}, {wb, 0, 0}, {sb, 0, 0}};
  if (!bad && kp) {
    bad = check(ssm_vk_program_add_dispatch(p, kp, b, NULL, (uint32_t)M, 1, 1), "prep");
    ssm_vk_program_add_barrier(p);
  }
  bad = bad || check(ssm_vk_program_add_dispatch(p, kg, b, NULL, groups, 1, 1), "dispatch") ||
        check(ssm_vk_program_profile(p), "profile") || check(ssm_vk_program_end(p), "end");
  double best = 1e30, first = 0; /* the whole; its first dispatch's (PREP's) */
  for (int i = 0; !bad && i < 5; i++) {
    double t[2] = {0, 0}; /* each dispatch's */
    bad = check(ssm_vk_program_run(vk, p), "run") || check(ssm_vk_program_times(vk, p, t), "times");
    if (t[0] + t[1] < best) best = t[0] + t[1], first = kp ? t[0] : 0;
  }
  bad = bad || check(ssm_vk_buffer_download(vk, ob, 0, o, M * N * 4), "download");
  double worst = 0;
  for (int i = 0; !bad && i < 256; i++) {
    r = r * 6364136223846793005u + 1442695040888963407u;
    size_t m = (size_t)(r >> 33) % M, n = (size_t)(r >> 13) % N;
    double sum = 0, mag = 0;
    for (size_t k = 0; k < K; k++) {
      double t = x16(x[m * K + k]) * from_bf16(w[n * K + k]);
      sum += t;
      mag += fabs(t);
    }
    double e = fabs(o[m * N + n] - sum) / (mag > 0 ? mag : 1);
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
  }
  if (!bad)
    printf("%-28s M=%zu K=%zu N=%zu %9.1f us (prep %5.1f) %6.1f TFLOP/s  err %.2e\n", argv[4], M,
           K, N, best, first, 2.0 * M * K * N / best * 1e-6, worst);
  ssm_vk_program_destroy(vk, p);
  ssm_vk_kernel_destroy(vk, kg);
  if (kp) ssm_vk_kernel_destroy(vk, kp);
  ssm_vk_buffer_destroy(vk, ob);
  ssm_vk_buffer_destroy(vk, xb);
  ssm_vk_buffer_destroy(vk, wb);
  ssm_vk_buffer_destroy(vk, sb);
  ssm_vk_close(vk);
  free(x);
  free(w);
  free(o);
  return bad;
}
