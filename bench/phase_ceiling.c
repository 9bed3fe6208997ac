/* phase_ceiling.c — what a wait between two phases costs inside one
 * dispatch whose workgroups are all resident, against a dependent dispatch
 * (docs/performance.md, "Dependent dispatches").
 *
 * G workgroups of 256 threads run P phases. In phase p each thread reads
 * the values that the same thread of workgroups g - 1 and g + 1 (mod G)
 * wrote in phase p - 1 and writes the smaller plus one (three thirds of a
 * buffer in turn), so every phase depends on two other workgroups' last
 * one, and after P phases every value is P exactly when no read was stale.
 * The ways:
 *   dispatches  one dispatch a phase, a pipeline barrier between them (how
 *               ssmc's programs wait today);
 *   barrier     one dispatch; between phases a device-wide barrier: each
 *               workgroup adds itself to the phase's counter (release, at
 *               queue-family scope, the Vulkan memory model's), and waits
 *               until the counter has all G (acquire);
 *   flags       one dispatch; each workgroup sets its own flag of the phase
 *               (release) and waits only on the flags of the two workgroups
 *               it reads (acquire): per-producer counters.
 * Then each way again (+W) with a phase's share of a weight stream read in
 * every workgroup (16 MiB a phase, PHASE_WEIGHTS): flags+W reads it before
 * it waits (a GEMV's weights loaded while its producers finish), the others
 * after their wait.
 * The activations are `coherent` (made available and visible at the device
 * on every access, as the phases need). Spins give up after 2^22 tries and
 * are counted: a non-zero count means that way's results and times are not
 * valid. Reported: the best host-timed run of 5 after one, µs a phase, and
 * whether every value came out P.
 *
 * It needs all G workgroups resident at once (at most what the device holds:
 * an H200 holds 8 such workgroups on each of its 132 multiprocessors), and
 * the Vulkan memory model with device scope.
 *
 * Build here and run on the GPU:
 *   build/phase_ceiling [G ...]            (132 264 by default)
 *   PHASE_WEIGHTS=MiB build/phase_ceiling  (the weight stream of flags+W; 16)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/glsl_defines.h"
#include "codegen/codegen.h"
#include "runtime/vulkan/vulkan.h"

static const char *PHASE_SRC =
    "#version 450\n"
    "#extension GL_KHR_memory_scope_semantics : require\n"
    "#pragma use_vulkan_memory_model\n"
    "layout(local_size_x = 256) in;\n"
    "layout(std430, binding = 0) coherent buffer V { uint v[]; };\n"
    "layout(std430, binding = 1) buffer F { uint f[]; };\n" /* counters or flags, then give-ups */
    "layout(std430, binding = 2) readonly buffer W { uvec4 w[]; };\n"
    "layout(std430, binding = 3) buffer S { uint sink[]; };\n"
    "layout(push_constant) uniform P { uint phase0, phases; } pc;\n"
    "#define QF gl_ScopeQueueFamily\n"
    "#define SB gl_StorageSemanticsBuffer\n"
    "void wg_sync() { controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, SB, gl_SemanticsAcquireRelease); }\n"
    "void spin(uint i, uint target) {\n"
    "  uint n = 0u;\n"
    "  while (atomicLoad(f[i], QF, SB, gl_SemanticsAcquire) < target)\n"
    "    if (++n == (1u << 22)) { atomicAdd(f[uint(NF)], 1u); break; }\n"
    "}\n"
    /* a phase's share of the weights: WPER uvec4s a thread, summed into a word */
    "uint weights(uint p) {\n"
    "  uint s = 0u;\n"
    "  for (uint j = 0u; j < uint(WPER); j++) {\n"
    "    uvec4 u = w[((p % 4u) * gl_NumWorkGroups.x * uint(WPER) + gl_WorkGroupID.x * uint(WPER) + j) * 256u + gl_LocalInvocationIndex];\n"
    "    s += u.x ^ u.y ^ u.z ^ u.w;\n"
    "  }\n"
    "  return s;\n"
    "}\n"
    "void main() {\n"
    "  uint g = gl_WorkGroupID.x, t = gl_LocalInvocationIndex, G = gl_NumWorkGroups.x;\n"
    "  uint lo = (g + G - 1u) % G, hi = (g + 1u) % G, acc = 0u;\n"
    "  for (uint p = pc.phase0; p < pc.phase0 + pc.phases; p++) {\n"
    "#if WAY == 2\n"
    "    uint ws = weights(p);\n" /* read before the wait */
    "    if (p > 0u) {\n"
    "      if (t == 0u) { spin((p - 1u) * G + lo, 1u); spin((p - 1u) * G + hi, 1u); }\n"
    "      wg_sync();\n"
    "    }\n"
    "    acc += ws;\n"
    "#else\n"
    "    acc += weights(p);\n"
    "#endif\n"
    "    uint rd = ((p + 2u) % 3u) * G * 256u, wr = (p % 3u) * G * 256u;\n"
    "    v[wr + g * 256u + t] = min(v[rd + lo * 256u + t], v[rd + hi * 256u + t]) + 1u;\n"
    "    wg_sync();\n"
    "#if WAY == 1\n"
    "    if (t == 0u) {\n"
    "      atomicAdd(f[p], 1u, QF, SB, gl_SemanticsRelease);\n"
    "      spin(p, G);\n"
    "    }\n"
    "    wg_sync();\n"
    "#elif WAY == 2\n"
    "    if (t == 0u) atomicStore(f[p * G + g], 1u, QF, SB, gl_SemanticsRelease);\n"
    "#endif\n"
    "  }\n"
    "  if (acc == 0x9e3779b9u) sink[0] = acc;\n" /* keeps the weights' reads */
    "}\n";

static int check(ssm_status s, const char *what) {
  if (!s) return 0;
  fprintf(stderr, "phase_ceiling: %s: %s\n", what, ssm_status_message(s));
  return 1;
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

enum { PHASES = 2048 };

/* One way at G workgroups: prints its line; 1 on an error. */
static int run_way(ssm_vk *vk, const char *name, int way, int G, int wper, size_t wbytes,
                   ssm_vk_buffer *v, ssm_vk_buffer *f, ssm_vk_buffer *w, ssm_vk_buffer *sink,
                   uint32_t *host, double *base) {
  const int NF = PHASES * G; /* flags (or counters) before the give-ups */
  char defs[128];
  snprintf(defs, sizeof defs, "#define WAY %d\n#define NF %d\n#define WPER %d\n", way, NF, wper);
  uint32_t *words = NULL;
  size_t count = 0;
  ssm_vk_kernel *k = NULL;
  ssm_vk_program *p = NULL;
  int bad = check(glsl_spirv(PHASE_SRC, defs, name, &words, &count), name) ||
            check(ssm_vk_kernel_create_desc(vk, &(ssm_vk_kernel_desc){.name = name,
                                                                      .spirv = words,
                                                                      .words = count,
                                                                      .n_bindings = 4,
                                                                      .push_bytes = 8},
                                            &k),
                  name) ||
            check(ssm_vk_program_create(vk, &p), "program");
  free(words);
  ssm_vk_binding b[4] = {{v, 0, 0}, {f, 0, 0}, {w, 0, wbytes}, {sink, 0, 0}};
  if (way == 0) {
    for (uint32_t ph = 0; !bad && ph < PHASES; ph++) {
      uint32_t push[2] = {ph, 1};
      if (ph) ssm_vk_program_add_barrier(p);
      bad = check(ssm_vk_program_add_dispatch(p, k, b, push, (uint32_t)G, 1, 1), "dispatch");
    }
  } else if (!bad) {
    uint32_t push[2] = {0, PHASES};
    bad = check(ssm_vk_program_add_dispatch(p, k, b, push, (uint32_t)G, 1, 1), "dispatch");
  }
  bad = bad || check(ssm_vk_program_end(p), "end");
  double best = 1e30;
  uint32_t gave_up = 0, stale = 0;
  for (int r = 0; !bad && r < 6; r++) {
    bad = check(ssm_vk_buffer_fill(vk, v, 0, (size_t)3 * G * 256 * 4, 0), "fill") ||
          check(ssm_vk_buffer_fill(vk, f, 0, (size_t)(NF + 1) * 4, 0), "fill");
    double t0 = now_us();
    bad = bad || check(ssm_vk_program_run(vk, p), "run");
    double t = now_us() - t0;
    if (r >= 1 && t < best) best = t;
    uint32_t g = 0;
    /* the last phase wrote third (PHASES - 1) % 3 */
    const size_t last = (size_t)((PHASES - 1) % 3) * G * 256 * 4;
    bad = bad || check(ssm_vk_buffer_download(vk, f, (size_t)NF * 4, &g, 4), "give-ups") ||
          check(ssm_vk_buffer_download(vk, v, last, host, (size_t)G * 256 * 4), "v");
    gave_up += g;
    for (int i = 0; !bad && i < G * 256; i++) stale += host[i] != PHASES;
  }
  if (!bad) {
    if (way == 0) *base = best / PHASES;
    printf("%-10s %5d %10.2f %10u %8s   (%.2fx dispatches)\n", name, G, best / PHASES, gave_up,
           stale ? "NO" : "yes", *base / (best / PHASES));
  }
  ssm_vk_program_destroy(vk, p);
  ssm_vk_kernel_destroy(vk, k);
  return bad;
}

int main(int argc, char **argv) {
  int groups[16] = {132, 264}, ng = 2;
  if (argc > 1) ng = 0;
  for (int i = 1; i < argc && ng < 16; i++) {
    groups[ng] = atoi(argv[i]);
    if (groups[ng] < 1 || groups[ng] > 4096) {
      fprintf(stderr, "usage: phase_ceiling [G (1 to 4096) ...]\n");
      return 2;
    }
    ng++;
  }
  const char *mib = getenv("PHASE_WEIGHTS");
  const double wmib = mib ? atof(mib) : 16;
  ssm_vk *vk = NULL;
  if (check(ssm_vk_open(-1, 0, &vk), "open")) return 1;
  int bad = 0;
  printf("%d phases; flags+W and its companions read %.1f MiB of weights a phase\n", PHASES, wmib);
  printf("%-10s %5s %10s %10s %8s\n", "way", "G", "us/phase", "gave up", "all P");
  for (int gi = 0; !bad && gi < ng; gi++) {
    const int G = groups[gi];
    /* W: 4 phases' shares, WPER uvec4s a thread and phase */
    int wper = (int)(wmib * 1048576 / ((double)G * 256 * 16) + 0.5);
    if (wper < 1) wper = 1;
    const size_t wbytes = (size_t)4 * G * wper * 256 * 16;
    ssm_vk_buffer *v = NULL, *f = NULL, *w = NULL, *sink = NULL;
    uint32_t *host = malloc((size_t)G * 256 * 4);
    bad = !host || check(ssm_vk_buffer_create(vk, (size_t)3 * G * 256 * 4, SSM_VK_BUFFER_DEVICE, &v), "v") ||
          check(ssm_vk_buffer_create(vk, ((size_t)PHASES * G + 1) * 4, SSM_VK_BUFFER_DEVICE, &f), "f") ||
          check(ssm_vk_buffer_create(vk, wbytes, SSM_VK_BUFFER_DEVICE, &w), "w") ||
          check(ssm_vk_buffer_fill(vk, w, 0, wbytes, 0x3c003c00u), "fill w") ||
          check(ssm_vk_buffer_create(vk, 16, SSM_VK_BUFFER_DEVICE, &sink), "sink");
    double base = 0, base_w = 0;
    static const struct {
      const char *name;
      int way, weights;
    } ways[] = {{"dispatches", 0, 0}, {"barrier", 1, 0}, {"flags", 2, 0},
                {"disp+W", 0, 1},     {"barrier+W", 1, 1}, {"flags+W", 2, 1}};
    for (size_t i = 0; !bad && i < sizeof ways / sizeof ways[0]; i++)
      bad = run_way(vk, ways[i].name, ways[i].way, G, ways[i].weights ? wper : 0,
                    ways[i].weights ? wbytes : 16, v, f, w, sink, host,
                    ways[i].weights ? &base_w : &base);
    ssm_vk_buffer_destroy(vk, v);
    ssm_vk_buffer_destroy(vk, f);
    ssm_vk_buffer_destroy(vk, w);
    ssm_vk_buffer_destroy(vk, sink);
    free(host);
  }
  ssm_vk_close(vk);
  return bad;
}
