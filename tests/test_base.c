/*
 * test_base.c — status messages, wrapping, checked arithmetic, the arena,
 * checked allocation, growable arrays, the string builder, FNV-1a and
 * reading files.
 */
#include <dirent.h>
#include <signal.h>
#include <cjson/cJSON.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static void test_status(void) {
  ssm_status s = ssm_status_new(SSM_ERR_INVALID, "x.yaml:%d:%d: bad", 3, 7);
  CU_ASSERT_EQUAL(ssm_status_code(s), SSM_ERR_INVALID);
  s = ssm_status_wrap(s, "loading %s", "m");
  CU_ASSERT_STRING_EQUAL(ssm_status_message(s), "loading m: x.yaml:3:7: bad");
  ssm_status_free(s);
  CU_ASSERT_EQUAL(ssm_status_code(NULL), SSM_OK);
  CU_ASSERT_PTR_NULL(ssm_status_wrap(NULL, "x"));
}

static void test_size_math(void) {
  size_t r;
  CU_ASSERT_FALSE(ssm_size_mul(SIZE_MAX / 2 + 1, 2, &r));
  CU_ASSERT_TRUE(ssm_size_mul(1000, 1000, &r));
  CU_ASSERT_EQUAL(r, 1000000);
  CU_ASSERT_FALSE(ssm_size_add(SIZE_MAX, 1, &r));
}

static void test_arena(void) {
  ssm_arena *a = ssm_test_arena();
  char *big = ssm_arena_alloc(a, 200000);
  CU_ASSERT_EQUAL(((uintptr_t)big) % 16, 0);
  CU_ASSERT_EQUAL(big[199999], 0);
  CU_ASSERT_STRING_EQUAL(ssm_arena_printf(a, "%s-%d", "l", 4), "l-4");
  ssm_arena_destroy(a);
}

static void test_file_read_limit(void) {
  const char *p = ssm_test_write("ten.txt", "0123456789", 10);
  char *d;
  size_t n;
  SSM_ASSERT_OK(ssm_file_read(p, 0, &d, &n));
  CU_ASSERT_EQUAL(n, 10);
  free(d);
  SSM_ASSERT_ERR(ssm_file_read(p, 4, &d, &n), "larger than 4 bytes");
  SSM_ASSERT_ERR(ssm_file_read("/nonexistent/x", 0, &d, &n), "/nonexistent/x");
}

static void test_sb(void) {
  ssm_sb b = {0};
  CU_ASSERT_STRING_EQUAL(ssm_sb_str(&b), "");
  char *empty = ssm_test_take(&b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(empty);
  CU_ASSERT_STRING_EQUAL(empty, "");
  free(empty);

  for (int i = 0; i < 1000; i++) ssm_sb_printf(&b, "%d,", i);
  CU_ASSERT(b.cap > b.n);
  CU_ASSERT_EQUAL(b.n, strlen(ssm_sb_str(&b)));
  CU_ASSERT_NSTRING_EQUAL(ssm_sb_str(&b), "0,1,2,", 6);
  CU_ASSERT_STRING_EQUAL(ssm_sb_str(&b) + b.n - 8, "998,999,");
  char *big = ssm_test_take(&b);
  CU_ASSERT_PTR_NULL(b.s);
  CU_ASSERT_EQUAL(b.n, 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(big, ",500,501,"));
  free(big);

  ssm_sb_append(&b, "a\0b", 3);
  ssm_sb_append(&b, "", 0);
  ssm_sb_printf(&b, "%s", "c");
  CU_ASSERT_EQUAL(b.n, 4);
  CU_ASSERT_EQUAL(memcmp(ssm_sb_str(&b), "a\0bc", 5), 0); /* with the terminating NUL */
  ssm_sb_free(&b);
  CU_ASSERT_PTR_NULL(b.s);
  CU_ASSERT_STRING_EQUAL(ssm_sb_str(&b), "");
}

static void test_vec(void) {
  SSM_VEC(int64_t) v = {0};
  for (int64_t i = 0; i < 100000; i++) CU_ASSERT_PTR_NULL(ssm_vec_push(&v, i * 3));
  CU_ASSERT_EQUAL_FATAL(v.n, 100000);
  CU_ASSERT(v.cap >= v.n);
  int ok = 1;
  for (size_t i = 0; i < v.n; i++) ok &= v.items[i] == (int64_t)i * 3;
  CU_ASSERT_TRUE(ok);

  CU_ASSERT_PTR_NULL(ssm_vec_reserve(&v, 50000));
  CU_ASSERT(v.cap >= v.n + 50000);
  int64_t *before = v.items;
  for (int i = 0; i < 50000; i++) CU_ASSERT_PTR_NULL(ssm_vec_push(&v, -1));
  CU_ASSERT_PTR_EQUAL(v.items, before); /* reserved: no move */
  CU_ASSERT_EQUAL(v.n, 150000);
  CU_ASSERT_EQUAL(v.items[99999], 299997);
  CU_ASSERT_EQUAL(v.items[149999], -1);
  ssm_vec_free(&v);
  CU_ASSERT_PTR_NULL(v.items);
  CU_ASSERT_EQUAL(v.n + v.cap, 0);
}

static void test_fnv1a(void) {
  CU_ASSERT_EQUAL(ssm_fnv1a(SSM_FNV_INIT, "", 0), 0xcbf29ce484222325ull);
  CU_ASSERT_EQUAL(ssm_fnv1a(SSM_FNV_INIT, "a", 1), 0xaf63dc4c8601ec8cull);
  CU_ASSERT_EQUAL(ssm_fnv1a(SSM_FNV_INIT, "foobar", 6), 0x85944171f73967e8ull);
  uint64_t h = ssm_fnv1a(ssm_fnv1a(SSM_FNV_INIT, "foo", 3), "bar", 3);
  CU_ASSERT_EQUAL(h, 0x85944171f73967e8ull);
  CU_ASSERT_NOT_EQUAL(ssm_fnv1a(SSM_FNV_INIT, "foobaR", 6), h);
}

static void test_alloc(void) {
  void *p = (void *)1;
  ssm_status s = ssm_alloc(SIZE_MAX / 2 + 1, 2, &p);
  CU_ASSERT_EQUAL(ssm_status_code(s), SSM_ERR_NOMEM);
  CU_ASSERT_PTR_NULL(p);
  CU_ASSERT_PTR_NOT_NULL(strstr(ssm_status_message(s), "do not fit"));
  ssm_status_free(s);

  SSM_ASSERT_OK(ssm_alloc(1000, 8, &p));
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CU_ASSERT_EQUAL(((const uint64_t *)p)[999], 0); /* zeroed */
  free(p);
  SSM_ASSERT_OK(ssm_alloc(0, 8, &p));
  CU_ASSERT_PTR_NOT_NULL(p);
  free(p);

  /* the failure injected for tests: the 2nd allocation from now, once */
  ssm_alloc_fail_at(2);
  SSM_ASSERT_OK(ssm_alloc(10, 1, &p));
  free(p);
  CU_ASSERT(ssm_alloc_fail_pending());
  s = ssm_alloc(10, 4, &p);
  CU_ASSERT_EQUAL(ssm_status_code(s), SSM_ERR_NOMEM);
  CU_ASSERT_PTR_NULL(p);
  CU_ASSERT_STRING_EQUAL(ssm_status_message(s), "out of host memory (40 bytes wanted)");
  ssm_status_free(s);
  CU_ASSERT(!ssm_alloc_fail_pending());
  SSM_ASSERT_OK(ssm_alloc(10, 1, &p));
  free(p);
}

static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n;
}

/* A process killed while it streams a file (ssm_file_temp) leaves the old
 * file whole and no temporary beside it; a commit then replaces the file. */
static void test_file_temp_killed(void) {
  char dir[512], path[600];
  snprintf(dir, sizeof dir, "%s/killed", ssm_test_tmpdir());
  CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
  snprintf(path, sizeof path, "%s/out", dir);
  const void *parts[1] = {"old"};
  size_t sizes[1] = {3};
  SSM_ASSERT_OK(ssm_file_write(path, 1, parts, sizes));
  pid_t pid = fork();
  CU_ASSERT_FATAL(pid >= 0);
  if (!pid) {
    char *tmp;
    int fd;
    ssm_status s = ssm_file_temp(path, &tmp, &fd);
    if (!s && write(fd, "new, half-written", 17) == 17) raise(SIGKILL);
    _exit(3);
  }
  int status = 0;
  CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
  CU_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  CU_ASSERT_EQUAL(dir_entries(dir), 1);
  char *data = NULL;
  size_t n = 0;
  SSM_ASSERT_OK(ssm_file_read(path, 0, &data, &n));
  CU_ASSERT(n == 3 && data && !memcmp(data, "old", 3));
  free(data);
  char *tmp;
  int fd;
  SSM_ASSERT_OK(ssm_file_temp(path, &tmp, &fd));
  CU_ASSERT_EQUAL(write(fd, "new", 3), 3);
  SSM_ASSERT_OK(ssm_file_commit(tmp, fd, path, 0));
  CU_ASSERT_EQUAL(dir_entries(dir), 1);
  SSM_ASSERT_OK(ssm_file_read(path, 0, &data, &n));
  CU_ASSERT(n == 3 && data && !memcmp(data, "new", 3));
  free(data);
  struct stat st;
  mode_t mask = umask(0);
  umask(mask);
  CU_ASSERT(!stat(path, &st) && (st.st_mode & 0777) == (0666 & ~mask));
}

/* A NUL in a JSON string or key, escaped or as a byte, is found with its
 * place; an escaped backslash before "u0000" is no NUL. */
static void test_json_find_nul(void) {
  static const struct {
    const char *text;
    size_t len; /* 0: strlen */
    const char *place; /* NULL: none */
  } cases[] = {
      {"{\"prompt\": \"a\\u0000b\"}", 0, "prompt"},
      {"{\"prompt\": \"a\\\\u0000b\"}", 0, NULL},
      {"{\"a\": 1, \"stop\": [\"x\", \"y\\u0000\"]}", 0, "stop[1]"},
      {"{\"m\": [{\"r\": \"u\"}, {\"c\": [{\"t\": \"\\u0000\"}]}]}", 0, "m[1].c[0].t"},
      {"{\"k\\u0000\": true}", 0, "k\\u0000"},
      {"[[1, {\"a\": [2, \"\\u0000\"]}]]", 0, "[0][1].a[1]"},
      {"{\"a\": {\"b\": \"x\"}, \"c\": \"\\u00001\"}", 0, "c"},
      {"{\"p\": \"a\0b\"}", 12, "p"},
      {"{\"p\": \"a\\u0001\", \"q\": [\"\\u1000\", {}]}", 0, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ssm_sb place = {0};
    ssm_sb_printf(&place, "x"); /* appended to */
    size_t len = cases[i].len ? cases[i].len : strlen(cases[i].text);
    int found = ssm_json_find_nul(cases[i].text, len, &place);
    CU_ASSERT_EQUAL(found, cases[i].place != NULL);
    if (found && cases[i].place) CU_ASSERT_STRING_EQUAL(ssm_sb_str(&place) + 1, cases[i].place);
    if (!found) CU_ASSERT_STRING_EQUAL(ssm_sb_str(&place), "x");
    CU_ASSERT_PTR_NULL(ssm_sb_status(&place, "place"));
    ssm_sb_free(&place);
  }
}

static void test_file_read_directory(void) {
  const char *dir = ssm_test_tmpdir();
  char *d = (char *)1;
  size_t n = 1;
  ssm_status s = ssm_file_read(dir, 0, &d, &n);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  CU_ASSERT_NOT_EQUAL(ssm_status_code(s), SSM_OK);
  CU_ASSERT_PTR_NOT_NULL(strstr(ssm_status_message(s), dir));
  CU_ASSERT_PTR_NULL(d);
  CU_ASSERT_EQUAL(n, 0);
  ssm_status_free(s);
}

/* config.json values: Python's Infinity, as read, prints in transformers
 * 5's form, and compares equal to it (in lists too); other values as
 * cJSON compares them. */
static void test_json_config_values(void) {
  cJSON *py = NULL, *t5 = NULL;
  const char *a = "{\"l\": [0.0, Infinity], \"x\": -Infinity, \"s\": \"mamba\"}";
  const char *b = "{\"l\": [0, {\"__float__\": \"Infinity\"}], \"x\": {\"__float__\": "
                  "\"-Infinity\"}, \"s\": \"mamba\"}";
  SSM_ASSERT_OK(ssm_json_parse_config("a", a, strlen(a), &py));
  SSM_ASSERT_OK(ssm_json_parse_config("b", b, strlen(b), &t5));
  CU_ASSERT_PTR_NOT_NULL_FATAL(py);
  CU_ASSERT_PTR_NOT_NULL_FATAL(t5);
  cJSON *copy = ssm_json_config_copy(py);
  char *text = cJSON_PrintUnformatted(copy);
  CU_ASSERT_STRING_EQUAL(text, "{\"l\":[0,{\"__float__\":\"Infinity\"}],\"x\":{\"__float__\":"
                               "\"-Infinity\"},\"s\":\"mamba\"}");
  const char *keys[] = {"l", "x", "s"};
  for (int i = 0; i < 3; i++) {
    const cJSON *p = cJSON_GetObjectItem(py, keys[i]), *q = cJSON_GetObjectItem(t5, keys[i]);
    CU_ASSERT(ssm_json_config_equal(p, q));
    CU_ASSERT(ssm_json_config_equal(q, p));
    CU_ASSERT(ssm_json_config_equal(cJSON_GetObjectItem(copy, keys[i]), p));
  }
  CU_ASSERT(!ssm_json_config_equal(cJSON_GetObjectItem(py, "l"), cJSON_GetObjectItem(py, "x")));
  CU_ASSERT(!ssm_json_config_equal(cJSON_GetObjectItem(py, "x"), cJSON_GetObjectItem(t5, "l")));
  CU_ASSERT(!ssm_json_config_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(py, "l"), 0),
                                   cJSON_GetObjectItem(py, "x")));
  cJSON_free(text);
  cJSON_Delete(copy);
  cJSON_Delete(py);
  cJSON_Delete(t5);
}

int main(void) {
  CU_TestInfo tests[] = {{"status", test_status},
                         {"size_math", test_size_math},
                         {"arena", test_arena},
                         {"file_read_limit", test_file_read_limit},
                         {"sb", test_sb},
                         {"vec", test_vec},
                         {"fnv1a", test_fnv1a},
                         {"alloc", test_alloc},
                         {"file_read_directory", test_file_read_directory},
                         {"json_find_nul", test_json_find_nul},
                         {"json_config_values", test_json_config_values},
                         {"file_temp_killed", test_file_temp_killed},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("base", tests);
}
