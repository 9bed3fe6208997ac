/*
 * test_base.c — status messages, wrapping, checked arithmetic, the arena.
 */
#include <string.h>

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
  ssm_arena *a = ssm_arena_create();
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

int main(void) {
  CU_TestInfo tests[] = {{"status", test_status},
                         {"size_math", test_size_math},
                         {"arena", test_arena},
                         {"file_read_limit", test_file_read_limit},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("base", tests);
}
