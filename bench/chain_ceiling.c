/* chain_ceiling.c — what one dependent decode dispatch costs, and what
 * decode could gain if each dispatch waited for the one before through a
 * counter in memory instead of a pipeline barrier (so that a kernel is
 * launched, and reads its weights into registers, while the kernel before
 * it is still running), or with one dispatch a layer fewer
 * (docs/performance.md).
 *
 * It runs a stand-in for L Mamba-1 decode layers of width D (bf16 weights,
 * f32 activations, as ssmc's decode): per layer
 *   in_proj   a GEMV of 2E x D (E = 2D), ROWS columns a workgroup of 256
 *             threads, 16-byte weight loads, subgroupAdd;
 *   x_proj    a GEMV of (R + 32) x E (R = dt_rank, D / 16);
 *   scan      one channel a thread: dt_proj's row (R), softplus, 16 states;
 *   out_proj  a GEMV of D x E,
 * then one kernel that zeroes the counters. The ways:
 *   barriers  a pipeline barrier between dependent dispatches (ssmc today);
 *   chain     no barriers: dispatch i spins until every workgroup of
 *             dispatch i - 1 has counted itself done, then reads its inputs
 *             (chain/N: N dependent steps of arithmetic between looks);
 *   preload   chain, with each workgroup's weights loaded into registers
 *             before it waits;
 *   none      neither barriers nor waits: wrong results, in the time the
 *             device takes when nothing holds a dispatch back;
 *   fold      barriers, and no x_proj dispatch: each in_proj workgroup of
 *             the x half writes its channels' share of x_proj, the last
 *             workgroup of each group of G sums its group's, and the scan
 *             (256 channels a workgroup) adds up the groups' sums (one
 *             dependent step fewer a layer).
 * D 256 makes every kernel almost empty: the cost of the waits alone.
 * CHAIN_WAYS=fold,none runs only those ways after barriers, in that order
 * (ways run after the spinning ones can read slow); CHAIN_PROFILE=1 adds the
 * GPU time of each kind of dispatch for barriers and fold.
 * A chain relies on the device launching a dispatch's workgroups only
 * after all of the dispatch before it have been launched (otherwise spinning
 * workgroups could hold the places of those they wait for). The spins give
 * up after 2^22 tries and count the give-ups, which are reported: a non-zero
 * count means the results of that way are wrong and its time is not valid.
 * Reported: the best host-timed run of the whole program of 5 after two
 * (µs), per layer, and whether the layers' output after the first run of a
 * way has the same bits as with barriers (fold, whose sums go in another
 * order: the largest difference over the largest value).
 *
 * Build here and run on the GPU:
 *   build/chain_ceiling [D [LAYERS]]   (2048 48: mamba-1.4b's width and depth)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/glsl_defines.h"
#include "codegen/codegen.h"
#include "runtime/vulkan/vulkan.h"

/* The wait and the count, shared by the kernels. pc.wait is the index of
 * the counter to wait on + 1 (0: none), pc.target how many workgroups it
 * must reach, pc.done this dispatch's counter. */
#define SYNC_SRC                                                                              \
  "layout(std430, binding = 7) coherent volatile buffer F { uint f[]; };\n"                   \
  "layout(push_constant) uniform P { uint wait, target, done, gave_up; } pc;\n"               \
  "void wait_for() {\n"                                                                       \
  "#if MODE == 1 || MODE == 2\n"                                                              \
  "  if (pc.wait != 0u) {\n"                                                                  \
  "    if (gl_LocalInvocationIndex == 0u) {\n"                                                \
  "      uint n = 0u;\n"                                                                      \
  "      while (f[pc.wait - 1u] < pc.target) {\n"                                             \
  "        if (++n == (1u << 22)) { atomicAdd(f[pc.gave_up], 1u); break; }\n"                 \
  "        float d = float(n);\n" /* DELAY dependent steps before the next look */           \
  "        for (int i = 0; i < DELAY; i++) d = d * 0.999 + 1.0;\n"                           \
  "        if (d < 0.0) n = 0u;\n"                                                           \
  "      }\n"                                                                                 \
  "    }\n"                                                                                   \
  "    barrier();\n"                                                                          \
  "    memoryBarrierBuffer();\n"                                                              \
  "  }\n"                                                                                     \
  "#endif\n"                                                                                  \
  "}\n"                                                                                       \
  "void count_done() {\n"                                                                     \
  "#if MODE == 1 || MODE == 2\n"                                                              \
  "  memoryBarrierBuffer();\n"                                                                \
  "  barrier();\n"                                                                            \
  "  if (gl_LocalInvocationIndex == 0u) atomicAdd(f[pc.done], 1u);\n"                         \
  "#endif\n"                                                                                  \
  "}\n"

/* y = W x: N rows of K (bf16, 8 a uvec4; K a multiple of 8), ROWS rows a
 * workgroup, up to PER uvec4s of a row a thread (K / 2048 rounded up). */
static const char *GEMV_SRC =
    "#version 450\n"
    "#extension GL_EXT_control_flow_attributes : require\n"
    "#extension GL_KHR_shader_subgroup_basic : require\n"
    "#extension GL_KHR_shader_subgroup_arithmetic : require\n"
    "layout(local_size_x = 256) in;\n"
    "layout(std430, binding = 0) readonly buffer W { uvec4 w[]; };\n"
    "layout(std430, binding = 1) coherent readonly buffer X { vec4 x[]; };\n"
    "layout(std430, binding = 2) coherent writeonly buffer Y { float y[]; };\n" SYNC_SRC
    "shared float red[64][ROWS];\n"
    "#if FOLD\n" /* x_proj's share of this workgroup's ROWS channels, then its group's */
    "layout(std430, binding = 3) readonly buffer WX { uvec4 wx[]; };\n"
    "layout(std430, binding = 4) coherent buffer PT { float part[]; };\n"
    "layout(std430, binding = 5) coherent buffer CN { uint cnt[]; };\n"
    "shared float yv[ROWS];\n"
    "shared bool is_last;\n"
    "#endif\n"
    "vec4 lo(uvec4 u) { return uintBitsToFloat(u << 16); }\n"
    "vec4 hi(uvec4 u) { return uintBitsToFloat(u & 0xffff0000u); }\n"
    "void main() {\n"
    "  uint t = gl_LocalInvocationIndex, r0 = gl_WorkGroupID.x * ROWS;\n"
    "  const uint KV = uint(K) / 8u;\n"
    "  uvec4 wr[ROWS][PER];\n"
    "#if FOLD\n" /* x_proj's weights of these channels, read with the rest */
    "  uvec4 wxr[XPER];\n"
    "  [[unroll]] for (int q = 0; q < XPER; q++) {\n"
    "    uint j = t + uint(q) * 256u;\n"
    "    wxr[q] = r0 < uint(E) && j < uint(NX) ? wx[(j * uint(E) + r0) / 8u] : uvec4(0);\n"
    "  }\n"
    "#endif\n"
    "#if MODE == 2\n"
    "  [[unroll]] for (int r = 0; r < ROWS; r++) [[unroll]] for (int p = 0; p < PER; p++)\n"
    "    wr[r][p] = uint(p) * 256u + t < KV ? w[(r0 + uint(r)) * KV + uint(p) * 256u + t]\n"
    "                                         : uvec4(0);\n"
    "  wait_for();\n"
    "#else\n"
    "  wait_for();\n"
    "  [[unroll]] for (int r = 0; r < ROWS; r++) [[unroll]] for (int p = 0; p < PER; p++)\n"
    "    wr[r][p] = uint(p) * 256u + t < KV ? w[(r0 + uint(r)) * KV + uint(p) * 256u + t]\n"
    "                                         : uvec4(0);\n"
    "#endif\n"
    "  float acc[ROWS];\n"
    "  [[unroll]] for (int r = 0; r < ROWS; r++) acc[r] = 0.0;\n"
    "  [[unroll]] for (int p = 0; p < PER; p++) {\n"
    "    uint i = min(uint(p) * 256u + t, KV - 1u) * 2u;\n" /* w is 0 past K */
    "    vec4 a = x[i], b = x[i + 1u];\n"
    "    [[unroll]] for (int r = 0; r < ROWS; r++) {\n"
    "      uvec4 u = wr[r][p];\n" /* elements 0..7 of the uvec4: lo/hi of each word */
    "      vec4 l = lo(u), h = hi(u);\n"
    "      acc[r] += dot(vec4(l.x, h.x, l.y, h.y), a) + dot(vec4(l.z, h.z, l.w, h.w), b);\n"
    "    }\n"
    "  }\n"
    "  [[unroll]] for (int r = 0; r < ROWS; r++) {\n"
    "    float s = subgroupAdd(acc[r]);\n"
    "    if (gl_SubgroupInvocationID == 0u) red[gl_SubgroupID][r] = s;\n"
    "  }\n"
    "  barrier();\n"
    "  if (t < uint(ROWS)) {\n"
    "    float s = 0.0;\n"
    "    for (uint g = 0u; g < gl_NumSubgroups; g++) s += red[g][t];\n"
    "    y[r0 + t] = s;\n"
    "#if FOLD\n"
    "    yv[t] = s;\n"
    "#endif\n"
    "  }\n"
    "#if FOLD\n"
    "  barrier();\n"
    "  if (r0 < uint(E)) {\n"
    "    uint wg = gl_WorkGroupID.x, g = wg / uint(G);\n"
    "    [[unroll]] for (int q = 0; q < XPER; q++) {\n"
    "      uint j = t + uint(q) * 256u;\n"
    "      vec4 l = lo(wxr[q]), h = hi(wxr[q]);\n"
    "      if (j < uint(NX))\n"
    "        part[wg * uint(NXP) + j] = l.x * yv[0] + h.x * yv[1] + l.y * yv[2] + h.y * yv[3] +\n"
    "                                  l.z * yv[4] + h.z * yv[5] + l.w * yv[6] + h.w * yv[7];\n"
    "    }\n"
    "    memoryBarrierBuffer();\n"
    "    barrier();\n"
    "    if (t == 0u) is_last = atomicAdd(cnt[g], 1u) == uint(G) - 1u;\n"
    "    barrier();\n"
    "    if (is_last) {\n" /* the group's last workgroup sums its G shares */
    "      memoryBarrierBuffer();\n"
    "      for (uint j = t; j < uint(NX); j += 256u) {\n"
    "        float s = 0.0;\n"
    "        for (uint i = 0u; i < uint(G); i++) s += part[(g * uint(G) + i) * uint(NXP) + j];\n"
    "        part[uint(GOFF) + g * uint(NXP) + j] = s;\n"
    "      }\n"
    "      if (t == 0u) cnt[g] = 0u;\n"
    "    }\n"
    "  }\n"
    "#endif\n"
    "  count_done();\n"
    "}\n";

/* One channel a thread: dt = softplus(dt_proj row . xp[0..R)), 16 states
 * decayed and fed with B = xp[R..R+16), read out with C = xp[R+16..R+32). */
static const char *SCAN_SRC =
    "#version 450\n"
    "#extension GL_EXT_control_flow_attributes : require\n"
    "layout(local_size_x = LOCAL) in;\n"
    "layout(std430, binding = 0) readonly buffer W { uvec4 w[]; };\n"
    "layout(std430, binding = 1) coherent readonly buffer XP { float xp[]; };\n"
    "layout(std430, binding = 2) coherent readonly buffer XZ { float xz[]; };\n"
    "layout(std430, binding = 3) coherent buffer S { float st[]; };\n"
    "layout(std430, binding = 4) coherent writeonly buffer Y { float y[]; };\n" SYNC_SRC
    "#if FOLD\n"
    "shared float xs[NXP];\n"
    "#define XP(i) xs[i]\n"
    "#else\n"
    "#define XP(i) xp[i]\n"
    "#endif\n"
    "void main() {\n"
    "  uint c = gl_GlobalInvocationID.x;\n"
    "  uvec4 wr[R / 8];\n"
    "#if MODE == 2 || FOLD\n"
    "  [[unroll]] for (int j = 0; j < R / 8; j++) wr[j] = w[c * uint(R / 8) + uint(j)];\n"
    "  wait_for();\n"
    "#else\n"
    "  wait_for();\n"
    "  [[unroll]] for (int j = 0; j < R / 8; j++) wr[j] = w[c * uint(R / 8) + uint(j)];\n"
    "#endif\n"
    "#if FOLD\n" /* x_proj: the sum of the NG groups' shares, in order */
    "  for (uint j = gl_LocalInvocationIndex; j < uint(NX); j += uint(LOCAL)) {\n"
    "    float s = 0.0;\n"
    "    for (uint g = 0u; g < uint(NG); g++) s += xp[uint(GOFF) + g * uint(NXP) + j];\n"
    "    xs[j] = s;\n"
    "  }\n"
    "  barrier();\n"
    "#endif\n"
    "  float dt = 0.0;\n"
    "  [[unroll]] for (int j = 0; j < R / 8; j++) {\n"
    "    vec4 l = uintBitsToFloat(wr[j] << 16), h = uintBitsToFloat(wr[j] & 0xffff0000u);\n"
    "    uint i = uint(j) * 8u;\n"
    "    dt += dot(vec4(l.x, h.x, l.y, h.y), vec4(XP(i), XP(i + 1u), XP(i + 2u), XP(i + 3u)));\n"
    "    dt += dot(vec4(l.z, h.z, l.w, h.w), vec4(XP(i + 4u), XP(i + 5u), XP(i + 6u), XP(i + 7u)));\n"
    "  }\n"
    "  dt = log(1.0 + exp(dt));\n"
    "  float xc = xz[c], yv = 0.0;\n"
    "  [[unroll]] for (uint n = 0u; n < 16u; n++) {\n"
    "    float h = st[c * 16u + n] * exp(-dt * float(n + 1u)) + dt * XP(uint(R) + n) * xc;\n"
    "    st[c * 16u + n] = h;\n"
    "    yv += h * XP(uint(R) + 16u + n);\n"
    "  }\n"
    "  y[c] = yv + xc;\n"
    "  count_done();\n"
    "}\n";

static const char *RESET_SRC =
    "#version 450\n"
    "layout(local_size_x = 64) in;\n"
    "layout(std430, binding = 0) buffer F { uint f[]; };\n"
    "layout(push_constant) uniform P { uint n; } pc;\n"
    "void main() { if (gl_GlobalInvocationID.x < pc.n) f[gl_GlobalInvocationID.x] = 0u; }\n";

static int check(ssm_status s, const char *what) {
  if (!s) return 0;
  fprintf(stderr, "chain_ceiling: %s: %s\n", what, ssm_status_message(s));
  return 1;
}

/* `src` with `defines` after its #version line, compiled into a kernel of
 * `nb` bindings and `push` bytes. 1 on an error (named on stderr). */
static int kernel(ssm_vk *vk, const char *src, const char *defines, const char *name, int nb,
                  uint32_t push, ssm_vk_kernel **k) {
  uint32_t *words = NULL;
  size_t count = 0;
  int bad = check(glsl_spirv(src, defines, name, &words, &count), name) ||
            check(ssm_vk_kernel_create_desc(vk, &(ssm_vk_kernel_desc){.name = name,
                                                                      .spirv = words,
                                                                      .words = count,
                                                                      .n_bindings = nb,
                                                                      .push_bytes = push},
                                            k),
                  name);
  free(words);
  return bad;
}

/* Two bf16 words of the power of two at or just below 1 / n: sums of n
 * products keep their size. */
static uint32_t pow2_bf16(int n) {
  int e = 0;
  while ((1 << e) < n) e++;
  uint32_t h = (uint32_t)(127 - e) << 7;
  return h << 16 | h;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

int main(int argc, char **argv) {
  const int D = argc > 1 ? atoi(argv[1]) : 2048, L = argc > 2 ? atoi(argv[2]) : 48;
  if (D < 256 || D > 8192 || D % 256 || L < 1 || L > 128) {
    fprintf(stderr, "usage: chain_ceiling [D (256 to 8192, a multiple of 256)] [LAYERS (1 to 128)]\n");
    return 2;
  }
  const int E = 2 * D, R = D / 16, NX = R + 32, ROWS = 8;
  ssm_vk *vk = NULL;
  if (check(ssm_vk_open(-1, 0, &vk), "open")) return 1;
  /* weights: one buffer a layer, in_proj | x_proj | dt_proj | out_proj */
  const size_t b_in = (size_t)2 * E * D * 2, b_x = (size_t)NX * E * 2, b_dt = (size_t)E * R * 2,
               b_out = (size_t)D * E * 2, b_layer = b_in + b_x + b_dt + b_out;
  ssm_vk_buffer **wl = calloc((size_t)L, sizeof *wl);
  ssm_vk_buffer *xin = NULL, *xz = NULL, *xp = NULL, *y = NULL, *st = NULL, *fl = NULL;
  /* fold: P workgroups of in_proj's x half, in groups of G; NXP floats a share */
  const int P = E / ROWS, G = D <= 2048 ? 16 : 32, NG = P / G, NXP = NX;
  ssm_vk_buffer *part = NULL, *cnt = NULL;
  const int nflags = 4 * L + 1; /* one a dispatch, then the give-ups */
  int bad = !wl;
  for (int l = 0; !bad && l < L; l++)
    bad = check(ssm_vk_buffer_create(vk, b_layer, SSM_VK_BUFFER_DEVICE, &wl[l]), "weights") ||
          check(ssm_vk_buffer_fill(vk, wl[l], 0, b_in, pow2_bf16(D)), "fill") ||
          check(ssm_vk_buffer_fill(vk, wl[l], b_in, b_x + b_dt, pow2_bf16(E)), "fill") ||
          check(ssm_vk_buffer_fill(vk, wl[l], b_in + b_x + b_dt, b_out, pow2_bf16(E)), "fill");
  bad = bad || check(ssm_vk_buffer_create(vk, (size_t)D * 4, SSM_VK_BUFFER_DEVICE, &xin), "x") ||
        check(ssm_vk_buffer_create(vk, (size_t)2 * E * 4, SSM_VK_BUFFER_DEVICE, &xz), "xz") ||
        check(ssm_vk_buffer_create(vk, 1024 * 4, SSM_VK_BUFFER_DEVICE, &xp), "xp") ||
        check(ssm_vk_buffer_create(vk, (size_t)E * 4, SSM_VK_BUFFER_DEVICE, &y), "y") ||
        check(ssm_vk_buffer_create(vk, (size_t)E * 16 * 4, SSM_VK_BUFFER_DEVICE, &st), "state") ||
        check(ssm_vk_buffer_create(vk, (size_t)nflags * 4, SSM_VK_BUFFER_DEVICE, &fl), "flags") ||
        check(ssm_vk_buffer_create(vk, (size_t)(P + NG) * NXP * 4, SSM_VK_BUFFER_DEVICE, &part),
              "shares") ||
        check(ssm_vk_buffer_create(vk, (size_t)NG * 4, SSM_VK_BUFFER_DEVICE, &cnt), "counts") ||
        check(ssm_vk_buffer_fill(vk, cnt, 0, (size_t)NG * 4, 0), "fill counts");
  float *first = malloc((size_t)D * 4), *out = malloc((size_t)D * 4);
  bad = bad || !first || !out;
  static const struct {
    const char *name;
    int mode, delay;
  } ways[] = {{"barriers", 0, 0},   {"chain", 1, 0},     {"chain/32", 1, 32}, {"chain/256", 1, 256},
              {"preload/32", 2, 32}, {"preload/256", 2, 256}, {"none", 3, 0},
              {"fold", 4, 0}};
  printf("D %d, E %d, dt_rank %d, %d layers, %.1f MB of weights a layer\n", D, E, R, L,
         b_layer / 1e6);
  printf("%-12s %12s %12s %10s %7s\n", "way", "us a token", "us a layer", "gave up", "same");
  double base = 0;
  /* CHAIN_WAYS=a,b,...: only those ways, in that order (barriers first
   * always: the others are compared with it) */
  const char *only = getenv("CHAIN_WAYS");
  size_t order[16], nways = 0;
  order[nways++] = 0;
  for (size_t w = 1; w < sizeof ways / sizeof ways[0]; w++)
    if (!only) order[nways++] = w;
  for (const char *o = only; o && *o;) {
    size_t len = strcspn(o, ",");
    for (size_t w = 1; w < sizeof ways / sizeof ways[0]; w++)
      if (strlen(ways[w].name) == len && !strncmp(o, ways[w].name, len) && nways < 16)
        order[nways++] = w;
    o += len + (o[len] == ',');
  }
  for (size_t oi = 0; !bad && oi < nways; oi++) {
    const size_t way = order[oi];
    const int mode = ways[way].mode;
    char sync[64];
    snprintf(sync, sizeof sync, "#define MODE %d\n#define DELAY %d\n", mode, ways[way].delay);
    char defs[320];
    const int fold = mode == 4;
    ssm_vk_kernel *g_in = NULL, *g_x = NULL, *g_out = NULL, *scan = NULL, *reset = NULL;
    ssm_vk_program *p = NULL;
    snprintf(defs, sizeof defs,
             "%s#define ROWS %d\n#define K %d\n#define PER %d\n#define FOLD %d\n#define E %d\n"
             "#define NX %d\n#define NXP %d\n#define G %d\n#define GOFF %d\n#define XPER %d\n",
             sync, ROWS, D, (D + 2047) / 2048, fold, E, NX, NXP, G, P * NXP, (NX + 255) / 256);
    bad = kernel(vk, GEMV_SRC, defs, "in_proj", 8, 16, &g_in);
    snprintf(defs, sizeof defs, "%s#define ROWS 2\n#define K %d\n#define PER %d\n#define FOLD 0\n",
             sync, E, (E + 2047) / 2048);
    bad = bad || kernel(vk, GEMV_SRC, defs, "x_proj", 8, 16, &g_x);
    snprintf(defs, sizeof defs, "%s#define ROWS %d\n#define K %d\n#define PER %d\n#define FOLD 0\n",
             sync, ROWS, E, (E + 2047) / 2048);
    bad = bad || kernel(vk, GEMV_SRC, defs, "out_proj", 8, 16, &g_out);
    snprintf(defs, sizeof defs,
             "%s#define R %d\n#define FOLD %d\n#define LOCAL %d\n#define NX %d\n#define NXP %d\n"
             "#define NG %d\n#define GOFF %d\n",
             sync, R, fold, fold ? 256 : 64, NX, NXP, NG, P * NXP);
    bad = bad || kernel(vk, SCAN_SRC, defs, "scan", 8, 16, &scan) ||
          kernel(vk, RESET_SRC, "", "reset", 1, 4, &reset) ||
          check(ssm_vk_program_create(vk, &p), "program");
    ssm_vk_binding fb = {fl, 0, 0};
    uint32_t prev_groups = 0;
    for (int l = 0; !bad && l < L; l++) {
      const struct {
        ssm_vk_kernel *k;
        size_t w, wbytes;
        ssm_vk_buffer *b1, *b2, *b3, *b4;
        uint32_t groups;
      } d[4] = {
          {g_in, 0, b_in, xin, xz, NULL, NULL, (uint32_t)(2 * E / ROWS)},
          {g_x, b_in, b_x, xz, xp, NULL, NULL, (uint32_t)(NX / 2)},
          {scan, b_in + b_x, b_dt, fold ? part : xp, xz, st, y, (uint32_t)(E / (fold ? 256 : 64))},
          {g_out, b_in + b_x + b_dt, b_out, y, xin, NULL, NULL, (uint32_t)(D / ROWS)},
      };
      for (int i = 0; !bad && i < 4; i++) {
        if (fold && i == 1) continue; /* x_proj is in in_proj and the scan */
        int at = 4 * l + i;
        ssm_vk_binding b[8] = {{wl[l], d[i].w, d[i].wbytes},
                               {d[i].b1, 0, 0},
                               {d[i].b2, 0, 0},
                               {d[i].b3 ? d[i].b3 : d[i].b2, 0, 0},
                               {d[i].b4 ? d[i].b4 : d[i].b2, 0, 0},
                               {d[i].b2, 0, 0},
                               {d[i].b2, 0, 0},
                               fb};
        if (fold && i == 0) { /* x_proj's weights, the shares, the group counts */
          b[3] = (ssm_vk_binding){wl[l], b_in, b_x};
          b[4] = (ssm_vk_binding){part, 0, 0};
          b[5] = (ssm_vk_binding){cnt, 0, 0};
        }
        uint32_t push[4] = {at ? (uint32_t)at : 0, prev_groups, (uint32_t)at,
                            (uint32_t)(nflags - 1)};
        if ((mode == 0 || fold) && at) ssm_vk_program_add_barrier(p);
        bad = check(ssm_vk_program_add_dispatch(p, d[i].k, b, push, d[i].groups, 1, 1), "dispatch");
        prev_groups = d[i].groups;
      }
    }
    if (!bad) ssm_vk_program_add_barrier(p);
    /* CHAIN_PROFILE=1: GPU time of each kind of dispatch, for the ways with
     * barriers (timestamps between dispatches would order the others) */
    const int prof = getenv("CHAIN_PROFILE") && (mode == 0 || fold);
    if (prof && !bad) bad = check(ssm_vk_program_profile(p), "profile");
    uint32_t n = (uint32_t)(nflags - 1);
    bad = bad || check(ssm_vk_program_add_dispatch(p, reset, &fb, &n, (n + 63) / 64, 1, 1), "reset") ||
          check(ssm_vk_program_end(p), "end") ||
          check(ssm_vk_buffer_fill(vk, xin, 0, (size_t)D * 4, 0x3c000000u), "fill x") ||
          check(ssm_vk_buffer_fill(vk, st, 0, (size_t)E * 64, 0), "fill state") ||
          check(ssm_vk_buffer_fill(vk, fl, 0, (size_t)nflags * 4, 0), "fill flags");
    bad = bad || check(ssm_vk_program_run(vk, p), "run") ||
          check(ssm_vk_buffer_download(vk, xin, 0, mode ? out : first, (size_t)D * 4), "x");
    double best = 1e30;
    for (int r = 0; !bad && r < 6; r++) {
      double t0 = now_us();
      bad = check(ssm_vk_program_run(vk, p), "run");
      double t = now_us() - t0;
      if (r >= 1 && t < best) best = t; /* with the checked run, two warm up */
    }
    if (prof && !bad) {
      int nd = ssm_vk_program_dispatches(p), per = fold ? 3 : 4;
      double *t = calloc((size_t)nd, sizeof *t), sum[4] = {0};
      bad = !t || check(ssm_vk_program_times(vk, p, t), "times");
      for (int i = 0; !bad && i < nd - 1; i++) sum[i % per] += t[i];
      if (!bad && fold)
        printf("  %s: us a dispatch: in_proj %.2f, scan %.2f, out_proj %.2f\n", ways[way].name,
               sum[0] / L, sum[1] / L, sum[2] / L);
      else if (!bad)
        printf("  %s: us a dispatch: in_proj %.2f, x_proj %.2f, scan %.2f, out_proj %.2f\n",
               ways[way].name, sum[0] / L, sum[1] / L, sum[2] / L, sum[3] / L);
      free(t);
    }
    uint32_t gave_up = 0;
    bad = bad || check(ssm_vk_buffer_download(vk, fl, (size_t)(nflags - 1) * 4, &gave_up, 4),
                       "download");
    if (!bad) {
      if (mode == 0) base = best;
      char same[32] = "yes";
      if (fold) { /* sums in another order: how far from the barriers' */
        double dmax = 0, bmax = 0;
        for (int i = 0; i < D; i++) {
          double dd = fabs((double)out[i] - first[i]);
          if (!isfinite(out[i]) || !isfinite(first[i])) dd = INFINITY; /* not a number to compare */
          dmax = dd > dmax ? dd : dmax;
          bmax = first[i] > bmax ? first[i] : -first[i] > bmax ? -first[i] : bmax;
        }
        snprintf(same, sizeof same, "%.1e", bmax > 0 ? dmax / bmax : dmax);
      } else if (mode && memcmp(first, out, (size_t)D * 4)) {
        strcpy(same, "NO");
      }
      printf("%-12s %12.1f %12.2f %10u %7s   (%.2fx barriers)\n", ways[way].name, best, best / L,
             gave_up, same, base / best);
    }
    ssm_vk_program_destroy(vk, p);
    ssm_vk_kernel_destroy(vk, g_in);
    ssm_vk_kernel_destroy(vk, g_x);
    ssm_vk_kernel_destroy(vk, g_out);
    ssm_vk_kernel_destroy(vk, scan);
    ssm_vk_kernel_destroy(vk, reset);
  }
  for (int l = 0; wl && l < L; l++) ssm_vk_buffer_destroy(vk, wl[l]);
  free(wl);
  free(first);
  free(out);
  ssm_vk_buffer_destroy(vk, xin);
  ssm_vk_buffer_destroy(vk, xz);
  ssm_vk_buffer_destroy(vk, xp);
  ssm_vk_buffer_destroy(vk, y);
  ssm_vk_buffer_destroy(vk, st);
  ssm_vk_buffer_destroy(vk, fl);
  ssm_vk_buffer_destroy(vk, part);
  ssm_vk_buffer_destroy(vk, cnt);
  ssm_vk_close(vk);
  return bad;
}
