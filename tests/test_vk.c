/*
 * test_vk.c — the Vulkan base layer and GLSL→SPIR-V compilation, run on the
 * default device (lavapipe on a machine without a GPU): kernels compared
 * with the CPU exactly, recorded programs replayed, sub-buffer bindings at
 * the device's alignment, transfers through the staging path, and the error
 * messages for compile errors, bad device indices, out-of-memory and a
 * machine without a Vulkan driver. The validation layer (with
 * synchronization validation) is on for the whole suite, and the suite
 * fails if it reports anything, including while the device is destroyed.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "codegen/codegen.h"
#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#endif

#define N 1537
#define WG 64

static ssm_vk *g_vk;
static int g_log_errors;   /* validation errors/warnings seen through ssm_log */
static int g_log_muted;    /* set while a test provokes validation errors on purpose */
static char g_self[4096];  /* this executable, for the no-device child run */

/* Tests after "create" need the shared context. */
#define NEED_VK() SSM_NEED_VK(g_vk)

static char g_stats_log[1024]; /* the last SSM_VK_SHADER_STATS line (test_shader_stats) */

static void on_log(const char *msg, void *user) {
  if (strstr(msg, "SSM_VK_SHADER_STATS") || strstr(msg, "kernel 'stats.comp'"))
    snprintf(g_stats_log, sizeof g_stats_log, "%s", msg);
  if (g_log_muted || !strstr(msg, "vulkan validation")) return;
  if (g_log_errors++ < 5) fprintf(stderr, "\n  %s\n", msg);
}

static const char *AXPB_GLSL =
    "#version 450\n"
    "layout(local_size_x_id = 0) in;\n"
    "layout(std430, binding = 0) readonly buffer A { float a[]; };\n"
    "layout(std430, binding = 1) readonly buffer X { float x[]; };\n"
    "layout(std430, binding = 2) writeonly buffer Y { float y[]; };\n"
    "layout(push_constant) uniform P { float b; uint n; } pc;\n"
    "void main() {\n"
    "  uint i = gl_GlobalInvocationID.x;\n"
    "  if (i < pc.n) y[i] = a[i] * x[i] + pc.b;\n"
    "}\n";

/* Reads values written by other workgroups: needs the barrier before it. */
static const char *MIRROR_GLSL =
    "#version 450\n"
    "layout(local_size_x_id = 0) in;\n"
    "layout(std430, binding = 0) readonly buffer Y { float y[]; };\n"
    "layout(std430, binding = 1) writeonly buffer Z { float z[]; };\n"
    "layout(push_constant) uniform P { uint n; } pc;\n"
    "void main() {\n"
    "  uint i = gl_GlobalInvocationID.x;\n"
    "  if (i < pc.n) z[i] = y[i] + y[pc.n - 1u - i];\n"
    "}\n";

typedef struct {
  float b;
  uint32_t n;
} axpb_push;

static float a_at(int i) { return (float)(i % 7 - 3); }
static float x_at(int i, int rep) { return (float)(i % 101) * 0.25f + (float)rep; }

static ssm_vk_kernel *make_kernel_on(ssm_vk *vk, const char *src, const char *name,
                                     int n_bindings, uint32_t push_bytes) {
  uint32_t *words = NULL;
  size_t count = 0;
  SSM_ASSERT_OK(ssm_cg_compile_glsl(src, name, &words, &count));
  if (!words) return NULL;
  uint32_t wg = WG;
  ssm_vk_kernel_desc d = {.name = name, .spirv = words, .words = count,
                          .n_bindings = n_bindings, .push_bytes = push_bytes,
                          .spec_values = &wg, .n_spec = 1};
  ssm_vk_kernel *k = NULL;
  SSM_ASSERT_OK(ssm_vk_kernel_create_desc(vk, &d, &k));
  free(words);
  return k;
}

static ssm_vk_kernel *make_kernel(const char *src, const char *name, int n_bindings,
                                  uint32_t push_bytes) {
  return make_kernel_on(g_vk, src, name, n_bindings, push_bytes);
}

/* The child half of test_no_device: run with VK_ICD_FILENAMES=/nonexistent. */
static int no_device_child(void) {
  ssm_vk *vk = NULL;
  ssm_status s = ssm_vk_open(-1, 0, &vk);
  printf("create: %s\n", ssm_status_message(s));
  int ok = s && strstr(ssm_status_message(s), "no Vulkan device found") && !vk;
  ssm_status_free(s);
  ssm_vk_device_info *devs = NULL;
  int n = -1;
  s = ssm_vk_list_devices(&devs, &n);
  printf("list: %s\n", ssm_status_message(s));
  ok = ok && s && strstr(ssm_status_message(s), "no Vulkan device found") && n == 0 && !devs;
  ssm_status_free(s);
  return ok ? 0 : 1;
}

static void test_no_device(void) {
  char cmd[8400];
  snprintf(cmd, sizeof cmd,
           "VK_ICD_FILENAMES=/nonexistent/icd.json VK_DRIVER_FILES=/nonexistent/icd.json "
           "'%s' --no-device-child", g_self);
  char *out = NULL;
  int rc = ssm_test_sh(cmd, &out);
  if (rc != 0) fprintf(stderr, "\n  child said: %s\n", out);
  CU_ASSERT_EQUAL(rc, 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "is mesa-vulkan-drivers installed?"));
  free(out);
}

static void test_list_devices(void) {
  ssm_vk_device_info *devs = NULL;
  int n = 0;
  SSM_ASSERT_OK(ssm_vk_list_devices(&devs, &n));
  CU_ASSERT_TRUE(n >= 1);
  int def = ssm_vk_default_device(devs, n);
  CU_ASSERT_TRUE(def >= 0 && def < n);
  for (int i = 0; i < n; i++) {
    uint64_t al = devs[i].min_storage_buffer_offset_alignment;
    CU_ASSERT_EQUAL(devs[i].index, i);
    CU_ASSERT_TRUE(devs[i].name[0] != 0);
    CU_ASSERT_TRUE(al > 0 && (al & (al - 1)) == 0);
    CU_ASSERT_TRUE(devs[i].max_storage_buffer_range > 0);
    CU_ASSERT_TRUE(devs[i].device_local_bytes > 0);
  }
  char *text = ssm_vk_format_devices(devs, n);
  CU_ASSERT_PTR_NOT_NULL(text);
  if (text && def >= 0) {
    CU_ASSERT_PTR_NOT_NULL(strstr(text, devs[def].name));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "offset alignment"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "fp16-storage"));
    char mark[300];
    snprintf(mark, sizeof mark, "* %d: %s", def, devs[def].name);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, mark));
  }
  free(text);
  free(devs);
}

static void test_create(void) {
  SSM_ASSERT_OK(ssm_vk_open(-1, 1, &g_vk));
  CU_ASSERT_PTR_NOT_NULL_FATAL(g_vk);
  CU_ASSERT_EQUAL(ssm_vk_validation_enabled(g_vk), ssm_vk_validation_available());
  /* Keep the layer mapped after the loader's dlclose so LeakSanitizer can
   * name it in the suppressions (tests/lsan.supp). */
  dlopen("libVkLayer_khronos_validation.so", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  if (!ssm_vk_validation_available())
    fprintf(stderr, "\n  note: VK_LAYER_KHRONOS_validation is not installed; running without\n");
  const ssm_vk_device_info *info = ssm_vk_info(g_vk);
  CU_ASSERT_TRUE(info->usable);
  CU_ASSERT_EQUAL(ssm_vk_storage_alignment(g_vk), info->min_storage_buffer_offset_alignment);
  size_t al = ssm_vk_storage_alignment(g_vk);
  CU_ASSERT_EQUAL(ssm_vk_align(g_vk, 0), 0);
  CU_ASSERT_EQUAL(ssm_vk_align(g_vk, 1), al);
  CU_ASSERT_EQUAL(ssm_vk_align(g_vk, al), al);
  /* Requiring what is enabled succeeds; requiring everything names what lacks. */
  SSM_ASSERT_OK(ssm_vk_require(g_vk, ssm_vk_features(g_vk), "for this test"));
  unsigned all = SSM_VK_F16_STORAGE | SSM_VK_F16 | SSM_VK_INT64 | SSM_VK_INT16 |
                 SSM_VK_INT8_STORAGE | SSM_VK_INT8 | SSM_VK_SUBGROUP_ARITH;
  if ((ssm_vk_features(g_vk) & all) != all)
    SSM_ASSERT_ERR(ssm_vk_require(g_vk, all, "for this test"), "lacks");
}

static void test_device_out_of_range(void) {
  ssm_vk_device_info *devs = NULL;
  int n = 0;
  SSM_ASSERT_OK(ssm_vk_list_devices(&devs, &n));
  free(devs);
  ssm_vk *vk = (ssm_vk *)1;
  char want[64];
  snprintf(want, sizeof want, "%d Vulkan device%s found", n, n == 1 ? "" : "s");
  ssm_status s = ssm_vk_open(n + 3, 0, &vk);
  CU_ASSERT_PTR_NULL(vk);
  CU_ASSERT_EQUAL(ssm_status_code(s), SSM_ERR_INVALID);
  SSM_ASSERT_ERR(s, want);
}

static void test_compile_error(void) {
  const char *bad = "#version 450\n"
                    "layout(local_size_x = 64) in;\n"
                    "void main() {\n"
                    "  float v = undefined_thing * 2.0;\n"
                    "}\n";
  uint32_t *words = (uint32_t *)1;
  size_t count = 7;
  ssm_status s = ssm_cg_compile_glsl(bad, "broken_kernel.comp", &words, &count);
  CU_ASSERT_PTR_NULL(words);
  CU_ASSERT_EQUAL(count, 0);
  CU_ASSERT_EQUAL(ssm_status_code(s), SSM_ERR_INVALID);
  SSM_ASSERT_ERR(s, "broken_kernel.comp:4:");
  SSM_ASSERT_ERR(ssm_cg_compile_glsl(bad, "broken_kernel.comp", &words, &count),
                 "undefined_thing");
  /* And a good one is SPIR-V. */
  SSM_ASSERT_OK(ssm_cg_compile_glsl(AXPB_GLSL, "axpb.comp", &words, &count));
  CU_ASSERT_TRUE(count > 5 && words && words[0] == 0x07230203u);
  free(words);
}

static uint32_t *mul_add_kernel(const char *pragma, const char *sum, size_t *count);

/* The one entry in kernel cache `dir` (its path into `path`): 1 if there is
 * exactly one. */
static int only_entry(const char *dir, char *path, size_t size) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (strstr(e->d_name, ".spv") && strlen(strstr(e->d_name, ".spv")) == 4) {
      snprintf(path, size, "%s/%s", dir, e->d_name);
      n++;
    }
  if (d) closedir(d);
  return n == 1;
}

static int same_words(const uint32_t *a, size_t na, const uint32_t *b, size_t nb) {
  return a && b && na == nb && !memcmp(a, b, na * 4);
}

/* SSMC_KERNEL_CACHE: a compile writes one entry, the next one reads it
 * (shown by an entry that holds another kernel's words: what comes back is
 * that kernel, decorated as a compile would), and an entry that is damaged,
 * cut short, a directory or a FIFO is compiled again without a hang. */
static void test_kernel_cache(void) {
  const char *was = getenv("SSMC_KERNEL_CACHE");
  char *saved = was ? strdup(was) : NULL, dir[4096], entry[4200];
  snprintf(dir, sizeof dir, "%s/kernel-cache-test/new", ssm_test_tmpdir());
  uint32_t *ref = NULL, *other = NULL, *w = NULL;
  size_t nref = 0, nother = 0, nw = 0;
  unsetenv("SSMC_KERNEL_CACHE");
  SSM_ASSERT_OK(ssm_cg_compile_glsl(AXPB_GLSL, "axpb.comp", &ref, &nref));
  setenv("SSMC_KERNEL_CACHE", dir, 1);
  SSM_ASSERT_OK(ssm_cg_compile_glsl(AXPB_GLSL, "axpb.comp", &w, &nw));
  CU_ASSERT_TRUE(same_words(ref, nref, w, nw));
  free(w);
  CU_ASSERT_TRUE_FATAL(only_entry(dir, entry, sizeof entry));
  char *good = NULL;
  size_t ngood = 0;
  SSM_ASSERT_OK(ssm_file_read(entry, 0, &good, &ngood));
  CU_ASSERT_TRUE(ngood > 16 && !memcmp(good, "SSMSPV1", 8));

  /* what the entry holds is what comes back: here a kernel of another
   * source, taken from a second cache */
  char dir2[4200], entry2[4300];
  snprintf(dir2, sizeof dir2, "%s/kernel-cache-test/other", ssm_test_tmpdir());
  setenv("SSMC_KERNEL_CACHE", dir2, 1);
  other = mul_add_kernel("", "p + pc.b", &nother);
  CU_ASSERT_TRUE_FATAL(only_entry(dir2, entry2, sizeof entry2));
  CU_ASSERT_EQUAL(rename(entry2, entry), 0);
  setenv("SSMC_KERNEL_CACHE", dir, 1);
  SSM_ASSERT_OK(ssm_cg_compile_glsl(AXPB_GLSL, "axpb.comp", &w, &nw));
  CU_ASSERT_TRUE(same_words(other, nother, w, nw));
  free(w);

  /* a byte of the words changed, the words cut short, the header alone */
  size_t cuts[3] = {ngood, ngood - 4, 16};
  for (int i = 0; i < 3; i++) {
    char *bad = malloc(ngood);
    memcpy(bad, good, ngood);
    if (i == 0) bad[ngood - 1] ^= 1;
    const void *parts[1] = {bad};
    SSM_ASSERT_OK(ssm_file_write(entry, 1, parts, &cuts[i]));
    free(bad);
    SSM_ASSERT_OK(ssm_cg_compile_glsl(AXPB_GLSL, "axpb.comp", &w, &nw));
    CU_ASSERT_TRUE(same_words(ref, nref, w, nw));
    free(w);
    char *now = NULL;
    size_t nnow = 0;
    SSM_ASSERT_OK(ssm_file_read(entry, 0, &now, &nnow)); /* written again, whole */
    CU_ASSERT_TRUE(nnow == ngood && !memcmp(now, good, ngood));
    free(now);
  }

  /* a directory, then a FIFO, where the entry belongs */
  CU_ASSERT_EQUAL(unlink(entry), 0);
  CU_ASSERT_EQUAL(mkdir(entry, 0700), 0);
  SSM_ASSERT_OK(ssm_cg_compile_glsl(AXPB_GLSL, "axpb.comp", &w, &nw));
  CU_ASSERT_TRUE(same_words(ref, nref, w, nw));
  free(w);
  CU_ASSERT_EQUAL(rmdir(entry), 0);
  CU_ASSERT_EQUAL(mkfifo(entry, 0600), 0);
  SSM_ASSERT_OK(ssm_cg_compile_glsl(AXPB_GLSL, "axpb.comp", &w, &nw));
  CU_ASSERT_TRUE(same_words(ref, nref, w, nw));
  free(w);
  struct stat st;
  CU_ASSERT_TRUE(!stat(entry, &st) && S_ISREG(st.st_mode)); /* replaced by the entry */

  if (saved) setenv("SSMC_KERNEL_CACHE", saved, 1);
  else unsetenv("SSMC_KERNEL_CACHE");
  free(saved);
  free(good);
  free(ref);
  free(other);
}

/* A kernel that stores a product p = y[i] * a and, at y[i + 64], `sum`;
 * `pragma` goes after #version ("" for none). NULL (and a failed assert)
 * if it does not compile. */
static uint32_t *mul_add_kernel(const char *pragma, const char *sum, size_t *count) {
  char src[600];
  snprintf(src, sizeof src,
           "#version 450\n%s"
           "layout(local_size_x = 64) in;\n"
           "layout(std430, binding = 0) buffer Y { float y[]; };\n"
           "layout(push_constant) uniform P { float a, b; } pc;\n"
           "void main() {\n"
           "  uint i = gl_GlobalInvocationID.x;\n"
           "  float p = y[i] * pc.a;\n"
           "  y[i] = p;\n"
           "  y[i + 64u] = %s;\n"
           "}\n",
           pragma, sum);
  uint32_t *words = NULL;
  *count = 0;
  SSM_ASSERT_OK(ssm_cg_compile_glsl(src, "mul_add.comp", &words, count));
  return words;
}

/* Every float multiply and add left in a compiled kernel is decorated
 * NoContraction (so no driver fuses a product into a sum where the source
 * rounds it first: here the product is also stored), and the pass names
 * what is wrong with words that are not a module. */
static void test_no_contraction(void) {
  size_t count;
  uint32_t *words = mul_add_kernel("", "y[i + 128u] + pc.b", &count);
  if (!words) return;
  uint32_t arith[16], decorated[64];
  int narith = 0, ndec = 0;
  for (size_t i = 5; i < count && words[i] >> 16;) {
    uint32_t op = words[i] & 0xffffu, len = words[i] >> 16;
    if ((op == 129 || op == 133) && narith < 16) arith[narith++] = words[i + 2];
    if (op == 71 && len == 3 && words[i + 2] == 42u && ndec < 64)
      decorated[ndec++] = words[i + 1];
    i += len;
  }
  CU_ASSERT(narith >= 2); /* the multiply and the add */
  for (int a = 0; a < narith; a++) {
    int found = 0;
    for (int d = 0; d < ndec; d++) found |= decorated[d] == arith[a];
    CU_ASSERT(found);
  }
  free(words);
  uint32_t *bad = malloc(8 * sizeof *bad);
  memcpy(bad, (uint32_t[]){0x07230203u, 0x10300, 0, 10, 0, (7u << 16) | 17u, 1, 0}, 32);
  size_t n = 8;
  SSM_ASSERT_ERR(ssm_cg_spirv_no_contraction(&bad, &n), "malformed instruction at word 5");
  bad[0] = 0x12345678u;
  SSM_ASSERT_ERR(ssm_cg_spirv_no_contraction(&bad, &n), "not a module");
  CU_ASSERT_EQUAL(n, 8);
  free(bad);
}

/* `#pragma optimize(off)` sends a kernel to the driver as glslang wrote it:
 * p + b is not turned into fma(y, a, b) (the optimizer does that; its
 * operands would then be rounded once where the source rounds p first). */
static void test_optimize_off(void) {
  size_t count;
  uint32_t *words = mul_add_kernel("#pragma optimize(off)\n", "p + pc.b", &count);
  if (!words) return;
  int fmul = 0, fadd = 0, ext = 0;
  for (size_t i = 5; i < count && words[i] >> 16; i += words[i] >> 16) {
    uint32_t op = words[i] & 0xffffu;
    fmul += op == 133;
    fadd += op == 129;
    ext += op == 12; /* OpExtInst: Fma would be one */
  }
  CU_ASSERT_EQUAL(fmul, 1);
  CU_ASSERT_EQUAL(fadd, 1);
  CU_ASSERT_EQUAL(ext, 0);
  free(words);
}

static void roundtrip(ssm_vk *vk, ssm_vk_buffer_kind kind, int expect_mapped) {
  enum { BYTES = N * 4 + 3 };
  ssm_vk_buffer *b = NULL;
  SSM_ASSERT_OK(ssm_vk_buffer_create(vk, BYTES + 64, kind, &b));
  if (!b) return;
  CU_ASSERT_EQUAL(ssm_vk_buffer_size(b), BYTES + 64);
  if (expect_mapped >= 0) CU_ASSERT_EQUAL(ssm_vk_buffer_map(b) != NULL, expect_mapped);
  unsigned char *src = malloc(BYTES), *dst = malloc(BYTES);
  for (int i = 0; i < BYTES; i++) src[i] = (unsigned char)(i * 131 + 7);
  SSM_ASSERT_OK(ssm_vk_buffer_upload(vk, b, 5, src, BYTES));
  memset(dst, 0, BYTES);
  SSM_ASSERT_OK(ssm_vk_buffer_download(vk, b, 5, dst, BYTES));
  CU_ASSERT_EQUAL(memcmp(src, dst, BYTES), 0);
  /* A partial read at another offset. */
  SSM_ASSERT_OK(ssm_vk_buffer_download(vk, b, 105, dst, 10));
  CU_ASSERT_EQUAL(memcmp(src + 100, dst, 10), 0);
  /* Fill, then read. */
  SSM_ASSERT_OK(ssm_vk_buffer_fill(vk, b, 16, 32, 0xdeadbeefu));
  uint32_t words[8];
  SSM_ASSERT_OK(ssm_vk_buffer_download(vk, b, 16, words, sizeof words));
  for (int i = 0; i < 8; i++) CU_ASSERT_EQUAL(words[i], 0xdeadbeefu);
  SSM_ASSERT_ERR(ssm_vk_buffer_fill(vk, b, 2, 32, 0), "multiples of 4");
  SSM_ASSERT_ERR(ssm_vk_buffer_upload(vk, b, 65, src, BYTES), "outside the buffer");
  SSM_ASSERT_ERR(ssm_vk_buffer_download(vk, b, SIZE_MAX - 2, dst, 8), "outside the buffer");
  free(src);
  free(dst);
  ssm_vk_buffer_destroy(vk, b);
}

static void test_buffer_roundtrip(void) {
  NEED_VK();
  roundtrip(g_vk, SSM_VK_BUFFER_DEVICE, -1);
  roundtrip(g_vk, SSM_VK_BUFFER_HOST, 1);
  SSM_ASSERT_ERR(ssm_vk_buffer_create(g_vk, 0, SSM_VK_BUFFER_DEVICE, &(ssm_vk_buffer *){0}),
                 "0 bytes");
}

/* The staging path, forced on a unified-memory device; its own context. */
static void test_buffer_staging(void) {
  NEED_VK();
  setenv("SSM_VK_FORCE_STAGING", "1", 1);
  ssm_vk *vk = NULL;
  SSM_ASSERT_OK(ssm_vk_open(-1, 1, &vk));
  unsetenv("SSM_VK_FORCE_STAGING");
  if (!vk) return;
  roundtrip(vk, SSM_VK_BUFFER_DEVICE, 0);
  CU_ASSERT_EQUAL(ssm_vk_validation_errors(vk), 0);
  ssm_vk_close(vk);
}

/* SSM_VK_SHADER_STATS: where the device has pipelineExecutableInfo each
 * pipeline's statistics are logged by kernel name; where it has not (lavapipe)
 * the log says so once; either way the context and its kernels work. */
static void test_shader_stats(void) {
  NEED_VK();
  setenv("SSM_VK_SHADER_STATS", "1", 1);
  ssm_vk *vk = NULL;
  g_stats_log[0] = 0;
  SSM_ASSERT_OK(ssm_vk_open(-1, 1, &vk));
  unsetenv("SSM_VK_SHADER_STATS");
  if (!vk) return;
  int lacks = strstr(g_stats_log, "lacks pipelineExecutableInfo") != NULL;
  ssm_vk_kernel *k = make_kernel_on(vk, AXPB_GLSL, "stats.comp", 3, sizeof(axpb_push));
  CU_ASSERT_PTR_NOT_NULL(k);
  if (lacks) {
    CU_ASSERT_PTR_NULL(strstr(g_stats_log, "kernel 'stats.comp'"));
  } else {
    CU_ASSERT_PTR_NOT_NULL(strstr(g_stats_log, "vulkan: kernel 'stats.comp'"));
    printf("\n  %s\n", g_stats_log);
  }
  CU_ASSERT_EQUAL(ssm_vk_validation_errors(vk), 0);
  ssm_vk_kernel_destroy(vk, k);
  ssm_vk_close(vk);
}

static void test_out_of_memory(void) {
  NEED_VK();
  uint64_t heap = ssm_vk_info(g_vk)->device_local_bytes;
  size_t huge = heap > SIZE_MAX / 4 ? SIZE_MAX / 2 : (size_t)heap * 4;
  ssm_vk_buffer *b = (ssm_vk_buffer *)1;
  ssm_status s = ssm_vk_buffer_create(g_vk, huge, SSM_VK_BUFFER_DEVICE, &b);
  CU_ASSERT_PTR_NULL(b);
  CU_ASSERT_EQUAL(ssm_status_code(s), SSM_ERR_DEVICE);
  if (s) fprintf(stderr, "\n  (%s)\n", ssm_status_message(s));
  CU_ASSERT_PTR_NOT_NULL(s && strstr(ssm_status_message(s), "device-local"));
  SSM_ASSERT_ERR(s, "VK_ERROR_OUT_OF_DEVICE_MEMORY");
}

#define SENTINEL 0x5a5a5a5au

typedef struct {
  ssm_vk_buffer *buf;
  size_t off_a, off_x, off_y, off_z, total;
} layout;

static layout make_layout(void) {
  layout l = {0};
  l.off_a = 0;
  l.off_x = ssm_vk_align(g_vk, l.off_a + N * 4);
  l.off_y = ssm_vk_align(g_vk, l.off_x + N * 4);
  l.off_z = ssm_vk_align(g_vk, l.off_y + N * 4);
  l.total = l.off_z + N * 4;
  size_t al = ssm_vk_storage_alignment(g_vk);
  CU_ASSERT_EQUAL(l.off_x % al, 0);
  CU_ASSERT_EQUAL(l.off_z % al, 0);
  if (al > 4) CU_ASSERT_NOT_EQUAL(l.off_x, N * 4); /* 1537 floats need padding */
  SSM_ASSERT_OK(ssm_vk_buffer_create(g_vk, l.total, SSM_VK_BUFFER_DEVICE, &l.buf));
  SSM_ASSERT_OK(ssm_vk_buffer_fill(g_vk, l.buf, 0, l.total, SENTINEL));
  float *a = malloc(N * 4);
  for (int i = 0; i < N; i++) a[i] = a_at(i);
  SSM_ASSERT_OK(ssm_vk_buffer_upload(g_vk, l.buf, l.off_a, a, N * 4));
  free(a);
  return l;
}

static void upload_x(layout *l, int rep) {
  float *x = malloc(N * 4);
  for (int i = 0; i < N; i++) x[i] = x_at(i, rep);
  SSM_ASSERT_OK(ssm_vk_buffer_upload(g_vk, l->buf, l->off_x, x, N * 4));
  free(x);
}

static void test_axpb(void) {
  NEED_VK();
  ssm_vk_kernel *k = make_kernel(AXPB_GLSL, "axpb.comp", 3, sizeof(axpb_push));
  CU_ASSERT_PTR_NOT_NULL_FATAL(k);
  layout l = make_layout();
  upload_x(&l, 0);
  ssm_vk_binding bind[3] = {{l.buf, l.off_a, N * 4}, {l.buf, l.off_x, N * 4},
                            {l.buf, l.off_y, N * 4}};
  axpb_push pc = {0.5f, N};
  ssm_vk_program *p = NULL;
  SSM_ASSERT_OK(ssm_vk_program_create(g_vk, &p));
  SSM_ASSERT_OK(ssm_vk_program_add_dispatch(p, k, bind, &pc, (N + WG - 1) / WG, 1, 1));
  SSM_ASSERT_OK(ssm_vk_program_end(p));
  CU_ASSERT_EQUAL(ssm_vk_program_dispatches(p), 1);
  SSM_ASSERT_OK(ssm_vk_program_run(g_vk, p));
  float *y = calloc(N, 4);
  SSM_ASSERT_OK(ssm_vk_buffer_download(g_vk, l.buf, l.off_y, y, N * 4));
  int bad = 0;
  for (int i = 0; i < N; i++) bad += y[i] != a_at(i) * x_at(i, 0) + 0.5f;
  CU_ASSERT_EQUAL(bad, 0);
  /* The padding after y and the z region were not touched. */
  uint32_t pad = 0;
  if (l.off_z > l.off_y + N * 4) {
    SSM_ASSERT_OK(ssm_vk_buffer_download(g_vk, l.buf, l.off_y + N * 4, &pad, 4));
    CU_ASSERT_EQUAL(pad, SENTINEL);
  }
  SSM_ASSERT_OK(ssm_vk_buffer_download(g_vk, l.buf, l.off_z, &pad, 4));
  CU_ASSERT_EQUAL(pad, SENTINEL);
  free(y);
  ssm_vk_program_destroy(g_vk, p);
  ssm_vk_buffer_destroy(g_vk, l.buf);
  ssm_vk_kernel_destroy(g_vk, k);
}

static void test_program_replay(void) {
  NEED_VK();
  ssm_vk_kernel *k1 = make_kernel(AXPB_GLSL, "axpb.comp", 3, sizeof(axpb_push));
  ssm_vk_kernel *k2 = make_kernel(MIRROR_GLSL, "mirror.comp", 2, 4);
  CU_ASSERT_PTR_NOT_NULL_FATAL(k1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(k2);
  layout l = make_layout();
  ssm_vk_binding b1[3] = {{l.buf, l.off_a, N * 4}, {l.buf, l.off_x, N * 4},
                          {l.buf, l.off_y, N * 4}};
  ssm_vk_binding b2[2] = {{l.buf, l.off_y, N * 4}, {l.buf, l.off_z, 0 /* to the end */}};
  axpb_push pc = {-1.25f, N};
  uint32_t n = N;
  ssm_vk_program *p = NULL;
  SSM_ASSERT_OK(ssm_vk_program_create(g_vk, &p));
  SSM_ASSERT_OK(ssm_vk_program_add_dispatch(p, k1, b1, &pc, (N + WG - 1) / WG, 1, 1));
  ssm_vk_program_add_barrier(p);
  SSM_ASSERT_OK(ssm_vk_program_add_dispatch(p, k2, b2, &n, (N + WG - 1) / WG, 1, 1));
  SSM_ASSERT_OK(ssm_vk_program_end(p));
  CU_ASSERT_EQUAL(ssm_vk_program_dispatches(p), 2);
  float *z = calloc(N, 4);
  for (int rep = 0; rep < 3; rep++) {
    upload_x(&l, rep);
    SSM_ASSERT_OK(ssm_vk_program_run(g_vk, p));
    SSM_ASSERT_OK(ssm_vk_buffer_download(g_vk, l.buf, l.off_z, z, N * 4));
    int bad = 0;
    for (int i = 0; i < N; i++) {
      float yi = a_at(i) * x_at(i, rep) - 1.25f;
      float yj = a_at(N - 1 - i) * x_at(N - 1 - i, rep) - 1.25f;
      bad += z[i] != yi + yj;
    }
    CU_ASSERT_EQUAL(bad, 0);
  }
  /* submit/wait split: two submits in a row are queued in order. */
  upload_x(&l, 7);
  SSM_ASSERT_OK(ssm_vk_program_submit(g_vk, p));
  SSM_ASSERT_OK(ssm_vk_program_submit(g_vk, p));
  SSM_ASSERT_OK(ssm_vk_program_wait(g_vk, p));
  SSM_ASSERT_OK(ssm_vk_buffer_download(g_vk, l.buf, l.off_z, z, N * 4));
  CU_ASSERT_EQUAL(z[0], (a_at(0) * x_at(0, 7) - 1.25f) + (a_at(N - 1) * x_at(N - 1, 7) - 1.25f));
  free(z);
  ssm_vk_program_destroy(g_vk, p);
  ssm_vk_buffer_destroy(g_vk, l.buf);
  ssm_vk_kernel_destroy(g_vk, k1);
  ssm_vk_kernel_destroy(g_vk, k2);
}

static void test_binding_errors(void) {
  NEED_VK();
  ssm_vk_kernel *k = make_kernel(MIRROR_GLSL, "mirror.comp", 2, 4);
  CU_ASSERT_PTR_NOT_NULL_FATAL(k);
  ssm_vk_buffer *b = NULL;
  SSM_ASSERT_OK(ssm_vk_buffer_create(g_vk, 4096, SSM_VK_BUFFER_DEVICE, &b));
  uint32_t n = 16;
  ssm_vk_program *p = NULL;
  SSM_ASSERT_OK(ssm_vk_program_create(g_vk, &p));
  size_t al = ssm_vk_storage_alignment(g_vk);
  if (al > 1) {
    ssm_vk_binding mis[2] = {{b, 0, 64}, {b, al / 2 + al, 64}};
    SSM_ASSERT_ERR(ssm_vk_program_add_dispatch(p, k, mis, &n, 1, 1, 1),
                   "minStorageBufferOffsetAlignment");
  }
  ssm_vk_binding out[2] = {{b, 0, 64}, {b, 4096 - al, 2 * al}};
  SSM_ASSERT_ERR(ssm_vk_program_add_dispatch(p, k, out, &n, 1, 1, 1), "outside the buffer");
  ssm_vk_binding ok[2] = {{b, 0, 64}, {b, ssm_vk_align(g_vk, 64), 64}};
  SSM_ASSERT_ERR(ssm_vk_program_add_dispatch(p, k, ok, &n, 0, 1, 1), "workgroups");
  SSM_ASSERT_ERR(ssm_vk_program_add_dispatch(p, k, ok, NULL, 1, 1, 1), "push constants");
  CU_ASSERT_EQUAL(ssm_vk_program_dispatches(p), 0);
  SSM_ASSERT_OK(ssm_vk_program_add_dispatch(p, k, ok, &n, 1, 1, 1));
  SSM_ASSERT_OK(ssm_vk_program_end(p));
  SSM_ASSERT_OK(ssm_vk_program_run(g_vk, p));
  ssm_vk_program_destroy(g_vk, p);
  ssm_vk_buffer_destroy(g_vk, b);
  uint32_t junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ssm_vk_kernel *bad = NULL;
  SSM_ASSERT_ERR(ssm_vk_kernel_create(g_vk, junk, 8, 1, 0, &bad), "not SPIR-V");
  CU_ASSERT_PTR_NULL(bad);
  ssm_vk_kernel_destroy(g_vk, k);
}

/* Synchronization validation sees a missing barrier: proof that the
 * counters this suite asserts on can become non-zero. Own context. */
static void test_validation_catches_missing_barrier(void) {
  NEED_VK();
  if (!ssm_vk_validation_available()) return;
  ssm_vk *main_vk = g_vk;
  SSM_ASSERT_OK(ssm_vk_open(-1, 1, &g_vk));
  if (!g_vk) {
    g_vk = main_vk;
    return;
  }
  g_log_muted = 1;
  ssm_vk_kernel *k1 = make_kernel(AXPB_GLSL, "axpb.comp", 3, sizeof(axpb_push));
  ssm_vk_kernel *k2 = make_kernel(MIRROR_GLSL, "mirror.comp", 2, 4);
  layout l = make_layout();
  ssm_vk_binding b1[3] = {{l.buf, l.off_a, N * 4}, {l.buf, l.off_x, N * 4},
                          {l.buf, l.off_y, N * 4}};
  ssm_vk_binding b2[2] = {{l.buf, l.off_y, N * 4}, {l.buf, l.off_z, N * 4}};
  axpb_push pc = {1, N};
  uint32_t n = N;
  ssm_vk_program *p = NULL;
  SSM_ASSERT_OK(ssm_vk_program_create(g_vk, &p));
  SSM_ASSERT_OK(ssm_vk_program_add_dispatch(p, k1, b1, &pc, (N + WG - 1) / WG, 1, 1));
  SSM_ASSERT_OK(ssm_vk_program_add_dispatch(p, k2, b2, &n, (N + WG - 1) / WG, 1, 1));
  SSM_ASSERT_OK(ssm_vk_program_end(p));
  SSM_ASSERT_OK(ssm_vk_program_run(g_vk, p));
  CU_ASSERT_TRUE(ssm_vk_validation_errors(g_vk) > 0);
  const char *m = ssm_vk_validation_message(g_vk, 0);
  CU_ASSERT_PTR_NOT_NULL(m && strstr(m, "READ_AFTER_WRITE"));
  CU_ASSERT_PTR_NULL(ssm_vk_validation_message(g_vk, 1000));
  ssm_vk_program_destroy(g_vk, p);
  ssm_vk_buffer_destroy(g_vk, l.buf);
  ssm_vk_kernel_destroy(g_vk, k1);
  ssm_vk_kernel_destroy(g_vk, k2);
  ssm_vk_close(g_vk);
  g_log_muted = 0;
  g_vk = main_vk;
}

/* Sessions without validation, and device listings, share one instance
 * that the process keeps (NVIDIA's driver stops making instances after
 * some 30 create/destroy cycles in one process): 40 of them make at most
 * one more; each session with validation makes its own. */
static void test_shared_instance(void) {
  int before = ssm_vk_instances_made();
  for (int i = 0; i < 40; i++) {
    ssm_vk *vk = NULL;
    SSM_ASSERT_OK(ssm_vk_open(-1, 0, &vk));
    CU_ASSERT_PTR_NOT_NULL_FATAL(vk);
    CU_ASSERT_FALSE(ssm_vk_validation_enabled(vk));
    ssm_vk_close(vk);
    ssm_vk_device_info *devs = NULL;
    int n = 0;
    SSM_ASSERT_OK(ssm_vk_list_devices(&devs, &n));
    CU_ASSERT(n > 0);
    free(devs);
  }
  int shared = ssm_vk_instances_made() - before;
  CU_ASSERT(shared == 0 || shared == 1);
  if (!ssm_vk_validation_available()) return;
  for (int i = 0; i < 2; i++) {
    ssm_vk *vk = NULL;
    SSM_ASSERT_OK(ssm_vk_open(-1, 1, &vk));
    CU_ASSERT_PTR_NOT_NULL_FATAL(vk);
    CU_ASSERT_TRUE(ssm_vk_validation_enabled(vk));
    ssm_vk_close(vk);
  }
  CU_ASSERT_EQUAL(ssm_vk_instances_made() - before, shared + 2);
}

static void test_validation_clean(void) {
  NEED_VK();
  int errors = ssm_vk_validation_errors(g_vk), warnings = ssm_vk_validation_warnings(g_vk);
  for (int i = 0; ssm_vk_validation_message(g_vk, i); i++)
    fprintf(stderr, "\n  %s\n", ssm_vk_validation_message(g_vk, i));
  CU_ASSERT_EQUAL(errors, 0);
  CU_ASSERT_EQUAL(warnings, 0);
  ssm_vk_close(g_vk); /* leaked objects would be reported here, via ssm_log */
  g_vk = NULL;
  CU_ASSERT_EQUAL(g_log_errors, 0);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--no-device-child")) return no_device_child();
  if (argc > 1 && !strcmp(argv[1], "--devices")) { /* diagnostic: what `ssmc devices` shows */
    ssm_vk_device_info *devs = NULL;
    int n = 0;
    ssm_status s = ssm_vk_list_devices(&devs, &n);
    char *text = s ? NULL : ssm_vk_format_devices(devs, n);
    printf("%s", s ? ssm_status_message(s) : text);
    free(text);
    free(devs);
    ssm_status_free(s);
    return 0;
  }
  ssize_t len = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  if (len > 0) g_self[len] = 0;
  ssm_log_set(on_log, NULL);
  CU_TestInfo tests[] = {{"no_device", test_no_device},
                         {"list_devices", test_list_devices},
                         {"create", test_create},
                         {"device_out_of_range", test_device_out_of_range},
                         {"compile_error", test_compile_error},
                         {"kernel_cache", test_kernel_cache},
                         {"no_contraction", test_no_contraction},
                         {"optimize_off", test_optimize_off},
                         {"buffer_roundtrip", test_buffer_roundtrip},
                         {"buffer_staging", test_buffer_staging},
                         {"shader_stats", test_shader_stats},
                         {"out_of_memory", test_out_of_memory},
                         {"axpb", test_axpb},
                         {"program_replay", test_program_replay},
                         {"binding_errors", test_binding_errors},
                         {"validation_catches_missing_barrier",
                          test_validation_catches_missing_barrier},
                         {"shared_instance", test_shared_instance},
                         {"validation_clean", test_validation_clean},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("vk", tests);
}
