/*
 * testutil.c — see testutil.h.
 */
#include "testutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Every suite: driver/layer-internal leaks are suppressed by tests/lsan.supp
 * (see there), in this process and (through the environment) in children. */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void) {
  return "suppressions=" SSM_SOURCE_DIR "/tests/lsan.supp:print_suppressions=0";
}

/* mkdir -p: whether `path` is (now) a directory. */
static int make_dirs(const char *path) {
  char p[4096];
  snprintf(p, sizeof p, "%s", path);
  for (char *s = p + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      if (mkdir(p, 0755) && errno != EEXIST) return 0;
      *s = '/';
    }
  struct stat st;
  return (!mkdir(p, 0755) || errno == EEXIST) && !stat(p, &st) && S_ISDIR(st.st_mode);
}

/* Whether `name` holds one of the comma-separated parts of `list`. */
static int name_in(const char *name, const char *list) {
  for (const char *p = list; *p;) {
    size_t n = strcspn(p, ",");
    char part[256];
    snprintf(part, sizeof part, "%.*s", (int)(n < 255 ? n : 255), p);
    if (n && strstr(name, part)) return 1;
    p += n + (p[n] == ',');
  }
  return 0;
}

int ssm_test_main(const char *suite, CU_TestInfo *tests) {
#ifdef __SANITIZE_ADDRESS__
  /* lavapipe (Mesa 22.3, Debian 12) keeps a few small blocks past
   * vkDestroyInstance, after which the loader unloads it: LeakSanitizer then
   * sees them unreferenced, in an unknown module that no suppression can
   * name. Loaded here first and never unloaded, it keeps them reachable.
   * Seen on some machines and not others (128 bytes from realloc, also at
   * 64a6d7d); not found is fine (another driver, or none). */
  (void)dlopen("libvulkan_lvp.so", RTLD_LAZY | RTLD_NODELETE);
#endif
  /* child processes (ssmc) of a sanitizer build: driver/layer leaks are
   * suppressed as in tests/lsan.supp */
  char supp[4096];
  snprintf(supp, sizeof supp, "suppressions=%s/tests/lsan.supp:print_suppressions=0",
           ssm_test_source_dir());
  setenv("LSAN_OPTIONS", supp, 0);
  /* ssmc's compile cache goes to a directory of this run, never the user's;
   * Mesa's shader cache stays where it was (it too follows XDG_CACHE_HOME).
   * Mesa creates only the last component of MESA_SHADER_CACHE_DIR and says
   * so on stderr when it cannot (a fresh machine has no ~/.cache), which
   * would mix into the output tests compare: it is made here first, and
   * the cache is off when it cannot be. */
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  char dir[4096];
  if (!getenv("MESA_SHADER_CACHE_DIR") && (xdg || home)) {
    snprintf(dir, sizeof dir, xdg ? "%s/mesa_shader_cache" : "%s/.cache/mesa_shader_cache",
             xdg ? xdg : home);
    if (make_dirs(dir)) setenv("MESA_SHADER_CACHE_DIR", dir, 1);
    else setenv("MESA_SHADER_CACHE_DISABLE", "true", 1);
  }
  snprintf(dir, sizeof dir, "%s/cache", ssm_test_tmpdir());
  setenv("XDG_CACHE_HOME", dir, 1);
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  /* SSM_TEST_ONLY=a,b runs only the tests whose names hold a or b;
   * SSM_TEST_SKIP=a,b all but those (ctest splits long suites with them) */
  const char *only = getenv("SSM_TEST_ONLY"), *skip = getenv("SSM_TEST_SKIP");
  int kept = 0;
  for (int i = 0; tests[i].pName; i++)
    if ((!only || !*only || name_in(tests[i].pName, only)) && (!skip || !name_in(tests[i].pName, skip)))
      tests[kept++] = tests[i];
  tests[kept] = (CU_TestInfo)CU_TEST_INFO_NULL;
  CU_SuiteInfo suites[] = {{(char *)suite, NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
  if (CU_register_suites(suites) != CUE_SUCCESS) return 2;
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
  unsigned ran = CU_get_number_of_tests_run();
  CU_cleanup_registry();
  return failed || ran == 0 ? 1 : 0;
}

const char *ssm_test_source_dir(void) {
  const char *e = getenv("SSM_TEST_SOURCE_DIR");
  return e && *e ? e : SSM_SOURCE_DIR;
}

const char *ssm_test_ssmc(void) {
  const char *e = getenv("SSM_TEST_SSMC");
  return e && *e ? e : SSMC_EXE;
}

const char *ssm_test_path(const char *rel) {
  static char bufs[8][4096];
  static int k;
  char *b = bufs[k++ & 7];
  snprintf(b, sizeof bufs[0], "%s/%s", ssm_test_source_dir(), rel);
  return b;
}

const char *ssm_test_tmpdir(void) {
  static char dir[256];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/ssmtest.XXXXXX");
    if (!mkdtemp(dir)) abort();
  }
  return dir;
}

const char *ssm_test_write(const char *name, const void *data, size_t n) {
  static char bufs[8][512];
  static int k;
  char *p = bufs[k++ & 7];
  snprintf(p, sizeof bufs[0], "%s/%s", ssm_test_tmpdir(), name);
  FILE *f = fopen(p, "wb");
  if (!f) abort();
  if (n && fwrite(data, 1, n, f) != n) abort();
  fclose(f);
  return p;
}

int ssm_test_sh(const char *cmd, char **out_output) {
  char *full = malloc(strlen(cmd) + 16);
  sprintf(full, "(%s) 2>&1", cmd);
  FILE *p = popen(full, "r");
  free(full);
  if (!p) abort();
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  size_t r;
  while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
    n += r;
    if (cap - n < 2) buf = realloc(buf, cap *= 2);
  }
  buf[n] = 0;
  int st = pclose(p);
  if (out_output) *out_output = buf;
  else free(buf);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

const char *ssm_test_write_safetensors(const char *name, int n, const char *const *names,
                                       const ssm_type *types, const float *const *data) {
  size_t cap = 256, h = 0, offset = 0;
  for (int i = 0; i < n; i++) cap += strlen(names[i]) + 64 + 24 * (size_t)types[i].rank;
  char *header = malloc(cap);
  if (!header) abort();
  h += (size_t)snprintf(header + h, cap - h, "{");
  for (int i = 0; i < n; i++) {
    size_t bytes = (size_t)ssm_type_numel(&types[i]) * 4;
    h += (size_t)snprintf(header + h, cap - h, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[",
                          i ? "," : "", names[i]);
    for (int d = 0; d < types[i].rank; d++)
      h += (size_t)snprintf(header + h, cap - h, d ? ",%lld" : "%lld", (long long)types[i].dims[d]);
    h += (size_t)snprintf(header + h, cap - h, "],\"data_offsets\":[%zu,%zu]}", offset,
                          offset + bytes);
    offset += bytes;
  }
  h += (size_t)snprintf(header + h, cap - h, "}");
  while (h % 8) header[h++] = ' ';
  if (h >= cap) abort();
  unsigned char *buf = malloc(8 + h + offset);
  if (!buf) abort();
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
  memcpy(buf + 8, header, h);
  size_t at = 8 + h;
  for (int i = 0; i < n; i++) {
    size_t bytes = (size_t)ssm_type_numel(&types[i]) * 4;
    memcpy(buf + at, data[i], bytes);
    at += bytes;
  }
  const char *path = ssm_test_write(name, buf, at);
  free(buf);
  free(header);
  return path;
}

void ssm_test_limit_file_size(size_t bytes) {
  static struct rlimit saved;
  static int limited;
  if (bytes && !limited) {
    getrlimit(RLIMIT_FSIZE, &saved);
    struct rlimit small = {bytes, saved.rlim_max};
    signal(SIGXFSZ, SIG_IGN);
    limited = !setrlimit(RLIMIT_FSIZE, &small);
  } else if (!bytes && limited) {
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, SIG_DFL);
    limited = 0;
  }
}

long ssm_test_rss_anon_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "RssAnon:", 8)) kib = strtol(line + 8, NULL, 10);
  fclose(f);
  CU_ASSERT(kib > 0);
  return kib;
}

ssm_graph *ssm_test_graph(const char *name) {
  ssm_graph *g = NULL;
  SSM_ASSERT_OK(ssm_graph_create(name, &g));
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  return g;
}

char *ssm_test_print(ssm_graph *g) {
  char *text = NULL;
  SSM_ASSERT_OK(ssm_graph_print(g, &text));
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  return text;
}

ssm_arena *ssm_test_arena(void) {
  ssm_arena *a = NULL;
  SSM_ASSERT_OK(ssm_arena_create(&a));
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  return a;
}

char *ssm_test_take(ssm_sb *b) {
  char *text = NULL;
  SSM_ASSERT_OK(ssm_sb_take(b, "a test's text", &text));
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  return text;
}
