/*
 * shaderc.c — GLSL compute shaders to SPIR-V through libshaderc, so that the
 * runtime only ever sees SPIR-V and needs no shader compiler.
 *
 * Every float add, subtract, multiply, divide and dot product left in a
 * compiled kernel is then decorated NoContraction (what GLSL's `precise`
 * does): a driver may otherwise fuse a * b + c into one rounding where it
 * chooses, and choose differently in two kernels that compute the same
 * value, so that a prefill and the same tokens decoded one by one would no
 * longer give the same logits. The fusions SPIRV-Tools' optimizer makes
 * itself (fma() from a * b + c) are in the SPIR-V, the same on every
 * device. Compiling every kernel unoptimized instead, so that nothing is
 * fused, would lose what the optimizer gains on most kernels (a template
 * that runs better unoptimized asks for it: gemm.glsl.in). The
 * cooperative-matrix kernels are left as they are: their sums differ from
 * the portable kernels' anyway (f16 parts), and the decoration would only
 * cost them time.
 *
 * With SSMC_KERNEL_CACHE=DIR, what shaderc made of a source is kept in DIR
 * by content, so that a kernel that many compiles share (a test suite's, a
 * build farm's) goes through glslang once. An entry, DIR/<key>.spv, is
 * "SSMSPV1\0", the XXH3-64 of the words, then shaderc's words, before the
 * decoration (which runs either way). The key is an XXH3-128 over the
 * source, the options given to shaderc, shaderc's SPIR-V version and the
 * ssmc revision. An entry that does not read back whole is compiled again
 * and replaced; entries are written atomically (a temporary file renamed
 * over the entry), and a cache that cannot be read or written only logs.
 */
#include <shaderc/shaderc.h>
#include <xxhash.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codegen/codegen.h"

enum { SPV_HEADER = 5, SPV_OP_DECORATE = 71, SPV_NO_CONTRACTION = 42 };

/* Float arithmetic whose result a driver could contract with another op. */
static bool contractible(uint32_t op) {
  switch (op) {
  case 129: /* OpFAdd */
  case 131: /* OpFSub */
  case 133: /* OpFMul */
  case 136: /* OpFDiv */
  case 142: /* OpVectorTimesScalar */
  case 143: /* OpMatrixTimesScalar */
  case 144: /* OpVectorTimesMatrix */
  case 145: /* OpMatrixTimesVector */
  case 146: /* OpMatrixTimesMatrix */
  case 147: /* OpOuterProduct */
  case 148: /* OpDot */
    return true;
  default:
    return false;
  }
}

/* The instructions that may come before a module's annotations end (its
 * capabilities, extensions, imports, memory model, entry points, execution
 * modes, debug names and the annotations themselves). */
static bool preamble(uint32_t op) {
  switch (op) {
  case 2: case 3: case 4: case 5: case 6: case 7:           /* debug */
  case 10: case 11: case 14: case 15: case 16: case 17:     /* mode-setting */
  case 71: case 72: case 73: case 74: case 75: case 332:    /* annotations */
  case 330: case 331: case 5632: case 5633:
    return true;
  default:
    return false;
  }
}

ssm_status ssm_cg_spirv_no_contraction(uint32_t **words, size_t *count) {
  uint32_t *w = *words;
  size_t n = *count, at = 0, add = 0;
  if (n < SPV_HEADER || w[0] != 0x07230203u)
    return ssm_status_new(SSM_ERR_INVALID, "SPIR-V: not a module (%zu words)", n);
  for (size_t i = SPV_HEADER; i < n;) {
    uint32_t op = w[i] & 0xffffu, len = w[i] >> 16;
    if (!len || len > n - i || (contractible(op) && len < 3))
      return ssm_status_new(SSM_ERR_INVALID, "SPIR-V: malformed instruction at word %zu", i);
    if (!at && !preamble(op)) at = i; /* the decorations go here */
    if (contractible(op)) add += 3;
    i += len;
  }
  if (!add) return NULL;
  uint32_t *o = malloc((n + add) * sizeof *o);
  if (!o) return ssm_status_new(SSM_ERR_NOMEM, "SPIR-V: out of host memory");
  memcpy(o, w, at * sizeof *o);
  size_t k = at;
  for (size_t i = at; i < n; i += w[i] >> 16)
    if (contractible(w[i] & 0xffffu)) {
      o[k++] = (3u << 16) | SPV_OP_DECORATE;
      o[k++] = w[i + 2]; /* the result id */
      o[k++] = SPV_NO_CONTRACTION;
    }
  memcpy(o + k, w + at, (n - at) * sizeof *o);
  free(w);
  *words = o;
  *count = n + add;
  return NULL;
}

/* ---- the kernel cache ------------------------------------------------------------ */

#define CACHE_MAGIC "SSMSPV1"
enum { CACHE_HEAD = 16, CACHE_MAX = 64 << 20 };

/* DIR/<key>.spv for `source` compiled at optimization `level`; NULL when
 * there is no cache (or no memory for the name: then no cache either). */
static char *cache_entry(const char *source, int level) {
  const char *dir = getenv("SSMC_KERNEL_CACHE");
  if (!dir || !*dir) return NULL;
  unsigned version, revision;
  shaderc_get_spv_version(&version, &revision);
  ssm_sb opts = {0};
  ssm_sb_printf(&opts, "%s vulkan1.1 spirv1.3 level %d shaderc %u.%u %s", CACHE_MAGIC, level,
                version, revision, ssm_revision());
  XXH3_state_t *h = XXH3_createState();
  char *path = NULL;
  if (h && !opts.failed && XXH3_128bits_reset(h) == XXH_OK &&
      XXH3_128bits_update(h, opts.s, strlen(opts.s) + 1) == XXH_OK &&
      XXH3_128bits_update(h, source, strlen(source)) == XXH_OK) {
    XXH128_hash_t k = XXH3_128bits_digest(h);
    ssm_sb p = {0};
    ssm_sb_printf(&p, "%s/%016llx%016llx.spv", dir, (unsigned long long)k.high64,
                  (unsigned long long)k.low64);
    ssm_status_free(ssm_sb_take(&p, "", &path));
  }
  XXH3_freeState(h);
  ssm_sb_free(&opts);
  return path;
}

/* The words entry `path` holds, or NULL (absent, damaged: logged, then
 * compiled again and replaced). */
static uint32_t *cache_read(const char *path, size_t *out_count) {
  char *data;
  size_t size;
  struct stat st;
  if (stat(path, &st)) return NULL; /* the common miss, not worth a line */
  ssm_status s = ssm_file_read(path, CACHE_MAX, &data, &size);
  if (s) {
    ssm_log("kernel cache: %s; compiling it again", ssm_status_message(s));
    ssm_status_free(s);
    return NULL;
  }
  uint64_t sum;
  uint32_t *words = NULL;
  if (size > CACHE_HEAD && (size - CACHE_HEAD) % 4 == 0 && !memcmp(data, CACHE_MAGIC, 8)) {
    memcpy(&sum, data + 8, 8);
    size_t n = (size - CACHE_HEAD) / 4;
    if (XXH3_64bits(data + CACHE_HEAD, size - CACHE_HEAD) == sum && (words = malloc(n * 4))) {
      memcpy(words, data + CACHE_HEAD, n * 4);
      *out_count = n;
      if (words[0] != 0x07230203u) {
        free(words);
        words = NULL;
      }
    }
  }
  if (!words) ssm_log("kernel cache: %s is not a whole entry; compiling it again", path);
  free(data);
  return words;
}

static void cache_write(const char *path, const uint32_t *words, size_t count) {
  char *dir, *slash, *tmp;
  int fd;
  if (ssm_strdup(path, "", &dir)) return;
  if ((slash = strrchr(dir, '/'))) *slash = 0;
  ssm_status s = slash ? ssm_file_mkdirs(dir) : NULL;
  free(dir);
  if (!s) s = ssm_file_temp(path, &tmp, &fd);
  if (!s) {
    char head[CACHE_HEAD] = CACHE_MAGIC;
    uint64_t sum = XXH3_64bits(words, count * 4);
    memcpy(head + 8, &sum, 8);
    const void *parts[2] = {head, words};
    size_t sizes[2] = {sizeof head, count * 4};
    int failed = ssm_file_write_all(fd, 2, parts, sizes) != 0;
    s = ssm_file_commit(tmp, fd, path, failed);
    if (failed && !s) s = ssm_status_new(SSM_ERR_IO, "%s: cannot write", path);
  }
  if (s) ssm_log("kernel cache: the kernel is not kept: %s", ssm_status_message(s));
  ssm_status_free(s);
}

/* shaderc's `words` (taken) decorated, into the caller's. */
static ssm_status finish(const char *source, const char *name, uint32_t *words, size_t count,
                         uint32_t **out_words, size_t *out_count) {
  ssm_status s = NULL;
  if (!strstr(source, "GL_NV_cooperative_matrix"))
    s = ssm_status_wrap(ssm_cg_spirv_no_contraction(&words, &count), "compiling '%s'", name);
  if (s) {
    free(words);
    return s;
  }
  *out_words = words;
  *out_count = count;
  return NULL;
}

ssm_status ssm_cg_compile_glsl(const char *source, const char *name, uint32_t **out_words,
                               size_t *out_count) {
  *out_words = NULL;
  *out_count = 0;
  if (!name) name = "shader.comp";
  /* A kernel goes to the driver unoptimized (its own compiler does the work
   * either way) where its source says `#pragma optimize(off)` (GLSL's own
   * pragma, which shaderc ignores), and where it uses cooperative matrices:
   * Debian 12's SPIRV-Tools (2023.1) crashes folding arithmetic on them. */
  int unoptimized =
      strstr(source, "#pragma optimize(off)") || strstr(source, "GL_NV_cooperative_matrix");
  char *entry = cache_entry(source, !unoptimized);
  size_t count = 0;
  uint32_t *words = entry ? cache_read(entry, &count) : NULL;
  if (words) {
    free(entry);
    return finish(source, name, words, count, out_words, out_count);
  }
  shaderc_compiler_t compiler = shaderc_compiler_initialize();
  shaderc_compile_options_t opts = shaderc_compile_options_initialize();
  if (!compiler || !opts) {
    shaderc_compile_options_release(opts);
    shaderc_compiler_release(compiler);
    free(entry);
    return ssm_status_new(SSM_ERR_NOMEM, "compiling '%s': cannot initialize shaderc", name);
  }
  shaderc_compile_options_set_source_language(opts, shaderc_source_language_glsl);
  shaderc_compile_options_set_target_env(opts, shaderc_target_env_vulkan,
                                         shaderc_env_version_vulkan_1_1);
  shaderc_compile_options_set_target_spirv(opts, shaderc_spirv_version_1_3);
  shaderc_compile_options_set_optimization_level(opts, unoptimized
                                                           ? shaderc_optimization_level_zero
                                                           : shaderc_optimization_level_performance);
  shaderc_compilation_result_t res =
      shaderc_compile_into_spv(compiler, source, strlen(source), shaderc_compute_shader, name,
                               "main", opts);
  ssm_status s = NULL;
  shaderc_compilation_status st = res ? shaderc_result_get_compilation_status(res)
                                      : shaderc_compilation_status_internal_error;
  if (st != shaderc_compilation_status_success) {
    const char *msg = res ? shaderc_result_get_error_message(res) : NULL;
    size_t len = msg ? strlen(msg) : 0;
    while (len && (msg[len - 1] == '\n' || msg[len - 1] == ' ')) len--;
    if (len)
      s = ssm_status_new(SSM_ERR_INVALID, "compiling '%s': %.*s", name, (int)len, msg);
    else /* no message: glslang gave up inside (seen when host memory runs out) */
      s = ssm_status_new(st == shaderc_compilation_status_compilation_error ? SSM_ERR_INVALID
                                                                             : SSM_ERR_INTERNAL,
                         "compiling '%s': shaderc failed without a message (status %d; is host "
                         "memory exhausted?)", name, (int)st);
  } else {
    if (shaderc_result_get_num_warnings(res))
      ssm_log("compiling '%s': %s", name, shaderc_result_get_error_message(res));
    size_t bytes = shaderc_result_get_length(res);
    count = bytes / 4;
    if (!(words = malloc(bytes ? bytes : 4)))
      s = ssm_status_new(SSM_ERR_NOMEM, "compiling '%s': out of host memory", name);
    else
      memcpy(words, shaderc_result_get_bytes(res), bytes);
  }
  shaderc_result_release(res);
  shaderc_compile_options_release(opts);
  shaderc_compiler_release(compiler);
  if (!s && entry) cache_write(entry, words, count);
  free(entry);
  return s ? s : finish(source, name, words, count, out_words, out_count);
}
