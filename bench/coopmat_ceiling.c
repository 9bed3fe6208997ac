/* coopmat_ceiling.c — what cooperative-matrix products reach through Vulkan on
 * this device (VK_NV_cooperative_matrix: 16 x 16 x 16 f16 operands, f32
 * accumulation), to calibrate templates/gemm_coop.glsl.in the way
 * bench/gemv_ceiling.cu calibrates the decode GEMVs (docs/performance.md).
 *
 * Each kernel runs ITERS steps in every subgroup of a grid of PER_SM
 * workgroups for each of the SMS multiprocessors (Vulkan does not say how
 * many there are: the first argument, 132 by default, an H200's), with
 * FM x FN accumulators of 16 x 16 a subgroup, over KK tiles of k a step and
 * PARTS tiles of x a tile of k (gemm_coop.glsl.in: 2 and 3):
 *   regs         operands loaded once from shared memory, then only products;
 *   smem         a step loads its operand tiles from shared memory again
 *                and adds every product straight to its accumulator;
 *   chain        gemm_coop's order: each output sums a step's KK x PARTS
 *                products in a chain of its own, then adds it, scaled, to
 *                its accumulator;
 *   interleaved  the same sums, the chains' products issued in turn;
 *   barriers     chain, with a workgroup barrier before and after a step's
 *                loads and products, as gemm_coop has around a slice;
 *   stores       and before the first barrier each thread writes two
 *                16-byte vectors to shared memory, as gemm_coop stages.
 * Then a GEMM of falcon-mamba-7b's in_proj shape whose x is already split
 * in f16 planes in memory, every tile loaded straight from memory (no
 * shared memory, no barriers: GEMM_SRC).
 * Reported: TFLOP/s of f16 products (2 x 16^3 a product), from GPU
 * timestamps, best of 5 runs.
 *
 * Build here and run on the GPU (a device with VK_NV_cooperative_matrix):
 *   build/coopmat_ceiling [SMS]   (built with the rest)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/glsl_defines.h"
#include "codegen/codegen.h"
#include "runtime/vulkan/vulkan.h"

static const char *SRC =
    "#version 450\n"
    "#extension GL_EXT_control_flow_attributes : require\n"
    "#extension GL_NV_cooperative_matrix : require\n"
    "#extension GL_KHR_memory_scope_semantics : require\n"
    "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n"
    "#extension GL_KHR_shader_subgroup_basic : require\n"
    "layout(local_size_x = NW * 32) in;\n"
    "layout(std430, binding = 0) buffer O { float o[]; };\n"
    "layout(push_constant) uniform P { uint iters; } pc;\n"
    "#define TILE fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>\n"
    "#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>\n"
    "#define RS 5u\n"
    "shared uvec4 pool[4096 / 2];\n" /* 32 KiB: 64 x-tile rows a step's parity */
    "void main() {\n"
    "  uint t = gl_LocalInvocationID.x, sg = gl_SubgroupID;\n"
    "  for (uint i = t; i < 2048u; i += NW * 32u) {\n"
    "    vec2 v = vec2(float(i % 7u) / 64.0, float(i % 5u) / 128.0);\n"
    "    pool[i] = uvec4(packHalf2x16(v), packHalf2x16(v.yx), packHalf2x16(-v), packHalf2x16(v * 0.5));\n"
    "  }\n"
    "  barrier();\n"
    "  ACC acc[FM][FN];\n"
    "  [[unroll]] for (int i = 0; i < FM; i++) [[unroll]] for (int j = 0; j < FN; j++) acc[i][j] = ACC(0.0);\n"
    "  TILE a[FM][KK][PARTS], b[FN][KK];\n"
    "  uint base = (sg % 4u) * 80u;\n"
    "#define LOADS(off) \\\n"
    "  [[unroll]] for (int i = 0; i < FM; i++) [[unroll]] for (int kk = 0; kk < KK; kk++) \\\n"
    "    [[unroll]] for (int p = 0; p < PARTS; p++) \\\n"
    "      coopMatLoadNV(a[i][kk][p], pool, base + uint((i * KK + kk) * PARTS + p) * 80u + (off), RS, false); \\\n"
    "  [[unroll]] for (int j = 0; j < FN; j++) [[unroll]] for (int kk = 0; kk < KK; kk++) \\\n"
    "    coopMatLoadNV(b[j][kk], pool, 1280u + uint(j * KK + kk) * 80u + (off), RS, true);\n"
    "#if MODE == 0\n"
    "  LOADS(0u)\n"
    "#endif\n"
    "  for (uint it = 0u; it < pc.iters; it++) {\n"
    "#if MODE == 5\n" /* each thread writes two vectors, as gemm_coop stages */
    "    pool[(t * 2u) % 1920u] = uvec4(it);\n"
    "    pool[(t * 2u + 1u) % 1920u] = uvec4(it);\n"
    "#endif\n"
    "#if MODE >= 4\n"
    "    barrier();\n"
    "#endif\n"
    "#if MODE != 0\n"
    "    LOADS((it & 1u) * 2u)\n"
    "#endif\n"
    "#if MODE == 2 || MODE >= 4\n" /* gemm_coop: a chain a product, scaled into acc */
    "    [[unroll]] for (int j = 0; j < FN; j++) [[unroll]] for (int i = 0; i < FM; i++) {\n"
    "      ACC part = ACC(0.0);\n"
    "      [[unroll]] for (int kk = 0; kk < KK; kk++) [[unroll]] for (int p = 0; p < PARTS; p++)\n"
    "        part = coopMatMulAddNV(a[i][kk][p], b[j][kk], part);\n"
    "      acc[i][j] += part * 0.5;\n"
    "    }\n"
    "#elif MODE == 3\n" /* the same sums, the chains interleaved */
    "    ACC part[FM][FN];\n"
    "    [[unroll]] for (int j = 0; j < FN; j++) [[unroll]] for (int i = 0; i < FM; i++) part[i][j] = ACC(0.0);\n"
    "    [[unroll]] for (int kk = 0; kk < KK; kk++) [[unroll]] for (int p = 0; p < PARTS; p++)\n"
    "      [[unroll]] for (int j = 0; j < FN; j++) [[unroll]] for (int i = 0; i < FM; i++)\n"
    "        part[i][j] = coopMatMulAddNV(a[i][kk][p], b[j][kk], part[i][j]);\n"
    "    [[unroll]] for (int j = 0; j < FN; j++) [[unroll]] for (int i = 0; i < FM; i++) acc[i][j] += part[i][j] * 0.5;\n"
    "#else\n"
    "    [[unroll]] for (int kk = 0; kk < KK; kk++) [[unroll]] for (int p = 0; p < PARTS; p++)\n"
    "      [[unroll]] for (int j = 0; j < FN; j++) [[unroll]] for (int i = 0; i < FM; i++)\n"
    "        acc[i][j] = coopMatMulAddNV(a[i][kk][p], b[j][kk], acc[i][j]);\n"
    "#endif\n"
    "#if MODE >= 4\n"
    "    barrier();\n"
    "#endif\n"
    "  }\n"
    "  ACC s = ACC(0.0);\n"
    "  [[unroll]] for (int i = 0; i < FM; i++) [[unroll]] for (int j = 0; j < FN; j++) s += acc[i][j];\n"
    "  uint wg = gl_WorkGroupID.x * NW + sg;\n"
    "  coopMatStoreNV(s, o, wg * 256u, 16u, false);\n"
    "}\n";

/* A GEMM of falcon-mamba-7b's in_proj shape (M 512, K 4,096, N 16,384) whose
 * x is already split in PARTS f16 planes in memory and whose w is f16: each
 * subgroup loads its tiles straight from memory (no shared memory, no
 * barrier), 16 subgroups a tile of 128 x 128 as gemm_coop; CHAIN 1 sums
 * gemm_coop's way (a chain an output and slice of 32, scaled). */
static const char *GEMM_SRC =
    "#version 450\n"
    "#extension GL_EXT_control_flow_attributes : require\n"
    "#extension GL_NV_cooperative_matrix : require\n"
    "#extension GL_KHR_memory_scope_semantics : require\n"
    "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n"
    "#extension GL_KHR_shader_subgroup_basic : require\n"
    "layout(local_size_x = 512) in;\n"
    "layout(std430, binding = 0) buffer O { float o[]; };\n"
    "layout(std430, binding = 1) readonly buffer X { uvec4 xq[]; };\n"
    "layout(std430, binding = 2) readonly buffer W { uvec4 wq[]; };\n"
    "#define TILE fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>\n"
    "#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>\n"
    "#define GM 512u\n#define GK 4096u\n"
    "void main() {\n"
    "  uint sg = gl_SubgroupID, id = gl_WorkGroupID.x;\n"
    "  uint wm = (id % (GM / 128u)) * 128u + (sg / 4u) * 32u;\n"
    "  uint wn = (id / (GM / 128u)) * 128u + (sg % 4u) * 32u;\n"
    "  ACC acc[2][2];\n"
    "  [[unroll]] for (int i = 0; i < 2; i++) [[unroll]] for (int j = 0; j < 2; j++) acc[i][j] = ACC(0.0);\n"
    "  for (uint k0 = 0u; k0 < GK; k0 += 32u) {\n"
    "    TILE a[2][2][PARTS], b[2][2];\n"
    "    [[unroll]] for (uint i = 0u; i < 2u; i++) [[unroll]] for (uint kk = 0u; kk < 2u; kk++)\n"
    "      [[unroll]] for (uint p = 0u; p < uint(PARTS); p++)\n"
    "        coopMatLoadNV(a[i][kk][p], xq, ((p * GM + wm + 16u * i) * GK + k0 + 16u * kk) / 8u, GK / 8u, false);\n"
    "    [[unroll]] for (uint j = 0u; j < 2u; j++) [[unroll]] for (uint kk = 0u; kk < 2u; kk++)\n"
    "      coopMatLoadNV(b[j][kk], wq, ((wn + 16u * j) * GK + k0 + 16u * kk) / 8u, GK / 8u, true);\n"
    "#if CHAIN\n"
    "    [[unroll]] for (int j = 0; j < 2; j++) [[unroll]] for (int i = 0; i < 2; i++) {\n"
    "      ACC part = ACC(0.0);\n"
    "      [[unroll]] for (int kk = 0; kk < 2; kk++) [[unroll]] for (int p = 0; p < PARTS; p++)\n"
    "        part = coopMatMulAddNV(a[i][kk][p], b[j][kk], part);\n"
    "      acc[i][j] += part * 0.5;\n"
    "    }\n"
    "#else\n"
    "    [[unroll]] for (int kk = 0; kk < 2; kk++) [[unroll]] for (int p = 0; p < PARTS; p++)\n"
    "      [[unroll]] for (int j = 0; j < 2; j++) [[unroll]] for (int i = 0; i < 2; i++)\n"
    "        acc[i][j] = coopMatMulAddNV(a[i][kk][p], b[j][kk], acc[i][j]);\n"
    "#endif\n"
    "  }\n"
    "  ACC s = acc[0][0] + acc[0][1] + acc[1][0] + acc[1][1];\n"
    "  coopMatStoreNV(s, o, (id * 16u + sg) * 256u, 16u, false);\n"
    "}\n";

typedef struct {
  const char *name;
  int mode, nw, fm, fn, parts, kk, per_sm;
} variant;

static int check(ssm_status s, const char *what) {
  if (!s) return 0;
  fprintf(stderr, "coopmat_ceiling: %s: %s\n", what, ssm_status_message(s));
  return 1;
}

/* Compiles `src` with `defines` after its #version line, dispatches it over
 * `groups` workgroups with `nb` bindings (and `push`, one word, when not
 * NULL), and sets *us to the best GPU time of 5 runs. 1 on an error (named
 * on stderr). */
static int best_us(ssm_vk *vk, const char *src, const char *defines, const char *name,
                   const ssm_vk_binding *b, int nb, const uint32_t *push, uint32_t groups,
                   double *us) {
  uint32_t *words = NULL;
  size_t count = 0;
  ssm_vk_kernel *k = NULL;
  ssm_vk_program *p = NULL;
  int bad = check(glsl_spirv(src, defines, name, &words, &count), "compile") ||
            check(ssm_vk_kernel_create(vk, words, count, nb, push ? 4 : 0, &k), "kernel") ||
            check(ssm_vk_program_create(vk, &p), "program") ||
            check(ssm_vk_program_add_dispatch(p, k, b, push, groups, 1, 1), "dispatch") ||
            check(ssm_vk_program_profile(p), "profile") || check(ssm_vk_program_end(p), "end");
  *us = 1e30;
  for (int r = 0; !bad && r < 5; r++) {
    double t = 0;
    bad = check(ssm_vk_program_run(vk, p), "run") ||
          check(ssm_vk_program_times(vk, p, &t), "times");
    if (t < *us) *us = t;
  }
  ssm_vk_program_destroy(vk, p);
  ssm_vk_kernel_destroy(vk, k);
  free(words);
  return bad;
}

int main(int argc, char **argv) {
  static const variant vs[] = {
      {"regs 16 sg, 2x4", 0, 16, 2, 4, 1, 1, 1},
      {"regs 8 sg, 4x4", 0, 8, 4, 4, 1, 1, 1},
      {"regs 4 sg, 4x4, 4/SM", 0, 4, 4, 4, 1, 1, 4},
      {"smem 16 sg, 2x2", 1, 16, 2, 2, 1, 1, 1},
      {"smem 8 sg, 4x4", 1, 8, 4, 4, 1, 1, 1},
      {"smem 16 sg, 2x2, 3 parts, k 32", 1, 16, 2, 2, 3, 2, 1},
      {"chain 16 sg, 2x2, 3 parts, k 32 (gemm_coop)", 2, 16, 2, 2, 3, 2, 1},
      {"interleaved 16 sg, 2x2, 3 parts, k 32", 3, 16, 2, 2, 3, 2, 1},
      {"chain 16 sg, 2x4, 3 parts, k 32", 2, 16, 2, 4, 3, 2, 1},
      {"interleaved 16 sg, 2x4, 3 parts, k 32", 3, 16, 2, 4, 3, 2, 1},
      {"chain 8 sg, 4x4, 3 parts, k 16", 2, 8, 4, 4, 3, 1, 1},
      {"interleaved 8 sg, 4x4, 3 parts, k 16", 3, 8, 4, 4, 3, 1, 1},
      {"smem 16 sg, 2x2, 2 parts, k 32", 1, 16, 2, 2, 2, 2, 1},
      {"chain 16 sg, 2x2, 2 parts, k 32", 2, 16, 2, 2, 2, 2, 1},
      {"interleaved 16 sg, 2x2, 2 parts, k 32", 3, 16, 2, 2, 2, 2, 1},
      {"barriers: chain + 2 barriers a step", 4, 16, 2, 2, 3, 2, 1},
      {"stores: + 2 vector stores a thread", 5, 16, 2, 2, 3, 2, 1},
      {"barriers, 8 sg, 2 workgroups an SM", 4, 8, 2, 2, 3, 2, 2},
      {"stores, 8 sg, 2 workgroups an SM", 5, 8, 2, 2, 3, 2, 2},
  };
  const int sms = argc > 1 ? atoi(argv[1]) : 132, iters = 4096;
  if (sms < 1 || sms > 1024) {
    fprintf(stderr, "usage: coopmat_ceiling [SMS (1 to 1024; 132)]\n");
    return 2;
  }
  ssm_vk *vk = NULL;
  if (check(ssm_vk_open(-1, 0, &vk), "open")) return 1;
  if (!(ssm_vk_features(vk) & SSM_VK_COOPMAT)) {
    fprintf(stderr, "coopmat_ceiling: the device has no cooperative matrices\n");
    ssm_vk_close(vk);
    return 1;
  }
  ssm_vk_buffer *out = NULL;
  /* 256 floats a subgroup of 16 in up to 4 workgroups an SM, or the GEMM's 512 */
  size_t wgs = (size_t)(sms * 4 > 512 ? sms * 4 : 512);
  if (check(ssm_vk_buffer_create(vk, wgs * 16 * 256 * 4, SSM_VK_BUFFER_DEVICE, &out), "buffer"))
    return 1;
  printf("%-40s %10s %10s\n", "variant", "us", "TFLOP/s");
  int bad = 0;
  for (size_t v = 0; !bad && v < sizeof vs / sizeof vs[0]; v++) {
    char defs[256];
    snprintf(defs, sizeof defs, "#define MODE %d\n#define NW %d\n#define FM %d\n#define FN %d\n"
             "#define PARTS %d\n#define KK %d\n", vs[v].mode, vs[v].nw, vs[v].fm, vs[v].fn,
             vs[v].parts, vs[v].kk);
    int groups = sms * vs[v].per_sm;
    double us;
    bad = best_us(vk, SRC, defs, vs[v].name, &(ssm_vk_binding){out, 0, 0}, 1,
                  &(uint32_t){iters}, (uint32_t)groups, &us);
    if (!bad)
      printf("%-40s %10.1f %10.1f\n", vs[v].name, us,
             2.0 * 4096 * groups * vs[v].nw * (double)iters * vs[v].fm * vs[v].fn *
                 vs[v].parts * vs[v].kk / us * 1e-6);
  }
  /* the GEMM from memory */
  ssm_vk_buffer *xb = NULL, *wb = NULL;
  const size_t M = 512, K = 4096, N = 16384;
  bad = bad || check(ssm_vk_buffer_create(vk, 3 * M * K * 2, SSM_VK_BUFFER_DEVICE, &xb), "x") ||
        check(ssm_vk_buffer_create(vk, N * K * 2, SSM_VK_BUFFER_DEVICE, &wb), "w") ||
        check(ssm_vk_buffer_fill(vk, xb, 0, 3 * M * K * 2, 0x2c003c00u), "fill x") ||
        check(ssm_vk_buffer_fill(vk, wb, 0, N * K * 2, 0x3c002c00u), "fill w");
  static const struct {
    const char *name;
    int parts, chain;
  } gs[] = {{"gemm from memory, 3 planes, chains", 3, 1},
            {"gemm from memory, 3 planes, straight sums", 3, 0},
            {"gemm from memory, 2 planes, chains", 2, 1},
            {"gemm from memory, 1 plane, straight sums", 1, 0}};
  for (size_t v = 0; !bad && v < sizeof gs / sizeof gs[0]; v++) {
    char defs[128];
    snprintf(defs, sizeof defs, "#define PARTS %d\n#define CHAIN %d\n", gs[v].parts, gs[v].chain);
    ssm_vk_binding b[3] = {{out, 0, 0}, {xb, 0, 0}, {wb, 0, 0}};
    double us;
    bad = best_us(vk, GEMM_SRC, defs, gs[v].name, b, 3, NULL,
                  (uint32_t)((M / 128) * (N / 128)), &us);
    if (!bad)
      printf("%-40s %10.1f %10.1f\n", gs[v].name, us, 2.0 * M * K * N * gs[v].parts / us * 1e-6);
  }
  ssm_vk_buffer_destroy(vk, xb);
  ssm_vk_buffer_destroy(vk, wb);
  ssm_vk_buffer_destroy(vk, out);
  ssm_vk_close(vk);
  return bad;
}
