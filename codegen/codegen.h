/*
 * codegen.h — from IR nodes to compute kernels.
 *
 * Each fused group (passes.h) becomes one kernel generated from the template
 * of its anchor's family (templates/<family>.glsl.in and .wgsl.in, compiled
 * into the binary), specialized with shapes as constants, with generated
 * functions that evaluate the group's absorbed expressions where operands are
 * read and an epilogue where results are written. One generator writes both
 * languages. GLSL is compiled to SPIR-V with libshaderc at compile time, so
 * the Vulkan runtime needs no shader compiler; WGSL goes into bundles as text
 * for WebGPU (runtime/web/).
 *
 * WGSL and WebGPU's limits: a WebGPU pipeline may have as few as 8 storage
 * buffers, each binding at most 128 MiB, so a WGSL kernel does not bind one
 * buffer per tensor. Its tensors share a few storage bindings ("slots"): the
 * activations one, the states one, the small weights one, and each large
 * weight one of its own; a uniform at binding 0 gives each tensor's element
 * offset in its slot for the dispatch, so one module serves every layer. A
 * slot whose tensors span more than SSM_BUNDLE_WINDOW bytes is bound as
 * several windows of that size, and its accessors pick the window by index
 * (ssm_cg_wgsl_module). Memory is read and written as u32 words: a 16-bit
 * weight is unpacked from the word holding it and its neighbour (no
 * shader-f16 needed).
 */
#ifndef SSM_CODEGEN_H
#define SSM_CODEGEN_H

#include "bundle/abi.h"
#include "passes/passes.h"

/* A weight of at least this many bytes gets a WGSL slot of its own, so
 * that the small weights' shared slot spans little memory. */
#define SSM_CG_WGSL_OWN_SLOT_BYTES ((uint64_t)1 << 20)

/* A generated kernel. Strings live in the arena passed to the generator. */
typedef struct {
  const char *family;   /* template name, e.g. "matmul" */
  const char *params;   /* "matmul+add+softplus M=1 K=64 N=256 ...", also in the source */
  const char *glsl;     /* the complete GLSL source */
  /* a variant of glsl on cooperative matrices (GL_NV_cooperative_matrix),
   * or NULL: same bindings, grid and results within f32 rounding; the
   * Vulkan runtime runs it instead where the device has them */
  const char *glsl_coop;
  /* with glsl_coop, or NULL: a kernel that the Vulkan runtime runs before
   * it, on prep_groups, to make x ready in a scratch buffer of
   * scratch_bytes of the runtime's own, which both bind after the kernel's
   * bindings (binding SSM_SCRATCH_BINDING in their source: the number is
   * the kernel's bindings with windows, set when the bundle is compiled) */
  const char *glsl_coop_prep;
  uint32_t prep_groups[3];
  /* with glsl_coop and glsl_coop_prep: the variant's own grid, or zeros
   * where it runs on the kernel's (groups) */
  uint32_t coop_groups[3];
  uint64_t scratch_bytes;
  const char *wgsl;     /* the WGSL source but its slots' storage bindings
                           (ssm_cg_wgsl_module adds them) */
  int nbindings;
  /* binding i holds this value: 0 is the result, then every tensor the
   * kernel reads (weights, states, inputs, other kernels' results) */
  const ssm_value *bind[SSM_BUNDLE_MAX_BINDINGS];
  ssm_type type[SSM_BUNDLE_MAX_BINDINGS]; /* bind[i]'s, kept when its graph is gone */
  uint32_t groups[3];   /* dispatch grid */
  /* WGSL: tensor i is read through slot slot[i]; slot 0 holds the result
   * and the other activations; writable slots hold activations or states */
  int nslots;
  int slot[SSM_BUNDLE_MAX_BINDINGS];
  int slot_writable[SSM_BUNDLE_MAX_BINDINGS];
  unsigned access[SSM_BUNDLE_MAX_BINDINGS]; /* SSM_CG_READ | SSM_CG_WRITE | its type */
  unsigned glsl_vec4; /* GLSL: bit i when tensor i is also read through a uvec4 view */
  /* the kernel reads the run's token count n (GLSL: a u32 push constant of
   * SSM_BUNDLE_RUN_PUSH_BYTES; WGSL: n.x of the per-dispatch uniform, after the
   * offsets) and does only the work of the first min(n, T)
   * tokens of its program's T; the other kernels of a run of n < T tokens
   * compute rows no one reads */
  int run_count;
} ssm_cg_kernel;

/* The type flags: none is f32; 16-bit weights are read two per u32 word. */
enum { SSM_CG_READ = 1, SSM_CG_WRITE = 2, SSM_CG_I32 = 4, SSM_CG_F16 = 8, SSM_CG_BF16 = 16, SSM_CG_Q8 = 32,
       SSM_CG_Q4 = 64 };

/* Generates the kernel of fused group `gr` (passes.h), GLSL and WGSL. */
ssm_status ssm_cg_kernel_for_group(ssm_graph *g, const ssm_group *gr, ssm_arena *a,
                                   ssm_cg_kernel *out);

/* Choices of the generated code that are not the IR's. */
typedef struct {
  /* gemm_coop's x made ready once a row by a kernel before it
   * (glsl_coop_prep) where K is a multiple of 8 */
  int coop_prep;
  /* the delta rule step by step in every program, also where its chunked
   * form applies (ssm_cg_delta_chunk_applies): a baseline to measure it by */
  int delta_steps;
} ssm_cg_opts;

/* The same with options `o` (NULL: the defaults, all zero). */
ssm_status ssm_cg_kernel_for_group_opts(ssm_graph *g, const ssm_group *gr, const ssm_cg_opts *o,
                                        ssm_arena *a, ssm_cg_kernel *out);
/* Generates a kernel for node `n` alone, whatever its group (kernel tests). */
ssm_status ssm_cg_kernel_for_node(ssm_graph *g, const ssm_node *n, ssm_arena *a,
                                  ssm_cg_kernel *out);

/* The complete WGSL module of `k`: its source followed by the storage
 * bindings of its slots, slot s bound as windows[s] windows of `window`
 * bytes (a power of two, at least 256; bindings 1.. in slot order), and the
 * accessors of its tensors, b<i>_ld(e) and b<i>_st(e, v), which read the
 * window directly when their slot has one (compilers that do not inline,
 * such as SwiftShader's, pay for every call). A count outside
 * [1, SSM_BUNDLE_WGSL_MAX_WINDOWS] is an error. */
ssm_status ssm_cg_wgsl_module(const ssm_cg_kernel *k, const int *windows, uint64_t window,
                              ssm_arena *a, const char **out);

/* The GLSL of `k` with tensor i bound as windows[i] windows of `window`
 * bytes (the default of specialization constant SSM_BUNDLE_GLSL_WINDOW_ID):
 * window 0 at binding i, the others at bindings k->nbindings.. in order of
 * tensor and window. All ones give k->glsl itself. A split tensor that the
 * kernel writes, a count outside [1, SSM_BUNDLE_GLSL_MAX_WINDOWS], or more than
 * SSM_BUNDLE_GLSL_MAX_BINDINGS bindings in all is an error. */
ssm_status ssm_cg_glsl_split(const ssm_cg_kernel *k, const int *windows, uint64_t window,
                             ssm_arena *a, const char **out);

/* Expands template `family` in `lang` (templates/<family>.glsl.in or
 * .wgsl.in) with `kv`, a NULL-terminated list of key, value pairs replacing
 * {{KEY}}. A placeholder without a value, or a value for a key that does not
 * occur, is an error. */
ssm_status ssm_cg_template_expand(ssm_arena *a, const char *family, ssm_lang lang,
                                  const char *const *kv, char **out);

/* Compiles GLSL compute source to SPIR-V (Vulkan 1.1 target, optimized for
 * performance), its float arithmetic not contracted (below) unless it uses
 * cooperative matrices. Errors carry `name` and the compiler's messages. The
 * caller frees *out_words. */
ssm_status ssm_cg_compile_glsl(const char *source, const char *name,
                               uint32_t **out_words, size_t *out_count);

/* Decorates every float add, subtract, multiply, divide and dot product of
 * a SPIR-V module NoContraction, so that no driver fuses one with another
 * into a single rounding (a kernel computes what its source says). fma()
 * is left undecorated (SPIR-V then promises nothing of its rounding; NVIDIA's
 * driver fuses it, as the portable GEMM wants). Replaces *words
 * (allocated with malloc) and *count; an error if the words are not a
 * well-formed module. */
ssm_status ssm_cg_spirv_no_contraction(uint32_t **words, size_t *count);

/* Embedded templates (templates/<name>.glsl.in, .wgsl.in): text or NULL. */
const char *ssm_templates_embedded(const char *file);
const char *ssm_templates_embedded_name(int i);

#endif
