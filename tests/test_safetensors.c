/*
 * test_safetensors.c — the safetensors reader: values and dtype conversions,
 * sharded checkpoints, one test per class of corrupt header (asserting the
 * message), and a seeded mutation run that must never crash (run it under
 * SSM_SANITIZE=ON).
 */
#include <math.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "bundle/bundle.h"
#include "runtime/cpu/cpu.h"
#include "runtime/vulkan/vulkan.h"
#include "tokenizer/tokenizer.h"
#include "testutil.h"

/* Writes a safetensors file (length prefix, `header`, `n` data bytes) under
 * the temp dir; returns its path (rotating buffer of testutil). */
static const char *st_write(const char *name, const char *header, const void *data, size_t n) {
  size_t hl = strlen(header);
  uint8_t *buf = malloc(8 + hl + n + 1);
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, header, hl);
  if (n) memcpy(buf + 8 + hl, data, n);
  const char *p = ssm_test_write(name, buf, 8 + hl + n);
  free(buf);
  return p;
}

static const char *tmp_subdir(const char *name) {
  static char p[512];
  snprintf(p, sizeof p, "%s/%s", ssm_test_tmpdir(), name);
  mkdir(p, 0755);
  return p;
}

static uint32_t bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}

static float from_bits(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* Data of the valid file: a f32[2,2], h f16[4], b bf16[2], i i32[2]. */
static uint8_t valid_data[36];
/* Trailing spaces make the header length odd, so the data is unaligned. */
static const char *valid_header =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"h\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[16,24]},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
    "\"i\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[28,36]},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[24,28]}}   ";

static const char *write_valid(const char *name) {
  float a[4] = {1.0f, -2.0f, 0.5f, 3.25f};
  uint16_t h[4] = {0x3c00, 0x0001, 0x7c00, 0xc000};
  uint16_t b[2] = {0x3f80, 0xc040};
  int32_t i[2] = {7, -9};
  memcpy(valid_data, a, 16);
  memcpy(valid_data + 16, h, 8);
  memcpy(valid_data + 24, b, 4);
  memcpy(valid_data + 28, i, 8);
  CU_ASSERT_EQUAL(strlen(valid_header) % 2, 1);
  return st_write(name, valid_header, valid_data, sizeof valid_data);
}

static void test_valid_file(void) {
  const char *p = write_valid("valid.safetensors");
  ssm_st *st;
  SSM_ASSERT_OK(ssm_st_open(p, &st));
  if (!st) return;
  CU_ASSERT_EQUAL(ssm_st_count(st), 4);
  CU_ASSERT_STRING_EQUAL(ssm_st_at(st, 0)->name, "a");
  CU_ASSERT_STRING_EQUAL(ssm_st_at(st, 3)->name, "i");
  const ssm_st_tensor *t = ssm_st_find(st, "a");
  CU_ASSERT_EQUAL(t->dtype, SSM_F32);
  CU_ASSERT_EQUAL(t->rank, 2);
  CU_ASSERT_EQUAL(t->shape[1], 2);
  CU_ASSERT_EQUAL(t->nbytes, 16);
  CU_ASSERT_STRING_EQUAL(t->file, p);
  CU_ASSERT_EQUAL(ssm_st_find(st, "b")->dtype, SSM_BF16);
  CU_ASSERT_PTR_NULL(ssm_st_find(st, "zz"));

  float out[4];
  ssm_type ta = ssm_type_make(SSM_F32, 2, (int64_t[]){2, 2});
  SSM_ASSERT_OK(ssm_st_read(st, "a", &ta, out));
  CU_ASSERT(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.5f && out[3] == 3.25f);

  ssm_type th = ssm_type_make(SSM_F32, 1, (int64_t[]){4});
  SSM_ASSERT_OK(ssm_st_read(st, "h", &th, out));
  CU_ASSERT_EQUAL(out[0], 1.0f);
  CU_ASSERT_EQUAL(out[1], ldexpf(1.0f, -24));
  CU_ASSERT_DOUBLE_EQUAL(out[1], 5.96e-8, 1e-10);
  CU_ASSERT(isinf(out[2]) && out[2] > 0);
  CU_ASSERT_EQUAL(out[3], -2.0f);

  ssm_type tb = ssm_type_make(SSM_F32, 1, (int64_t[]){2});
  SSM_ASSERT_OK(ssm_st_read(st, "b", &tb, out));
  CU_ASSERT_EQUAL(out[0], 1.0f);
  CU_ASSERT_EQUAL(out[1], -3.0f);

  int32_t iv[2];
  ssm_type ti = ssm_type_make(SSM_I32, 1, (int64_t[]){2});
  SSM_ASSERT_OK(ssm_st_read(st, "i", &ti, iv));
  CU_ASSERT(iv[0] == 7 && iv[1] == -9);

  uint16_t half[4];
  ssm_type ta16 = ssm_type_make(SSM_F16, 2, (int64_t[]){2, 2});
  SSM_ASSERT_OK(ssm_st_read(st, "a", &ta16, half));
  CU_ASSERT(half[0] == 0x3c00 && half[1] == 0xc000 && half[2] == 0x3800 && half[3] == 0x4280);
  ssm_type tab = ssm_type_make(SSM_BF16, 2, (int64_t[]){2, 2});
  SSM_ASSERT_OK(ssm_st_read(st, "a", &tab, half));
  CU_ASSERT(half[0] == 0x3f80 && half[1] == 0xc000 && half[2] == 0x3f00 && half[3] == 0x4050);
  ssm_type tbb = ssm_type_make(SSM_BF16, 1, (int64_t[]){2});
  SSM_ASSERT_OK(ssm_st_read(st, "b", &tbb, half));
  CU_ASSERT(half[0] == 0x3f80 && half[1] == 0xc040);
  ssm_st_close(st);
}

static void test_bf16_rounding(void) {
  CU_ASSERT_EQUAL(ssm_bf16_to_f32(0x3f80), 1.0f);
  CU_ASSERT_EQUAL(ssm_f32_to_bf16(1.0f), 0x3f80);
  CU_ASSERT_EQUAL(ssm_f32_to_bf16(from_bits(0x3f808000)), 0x3f80); /* tie: to even */
  CU_ASSERT_EQUAL(ssm_f32_to_bf16(from_bits(0x3f818000)), 0x3f82); /* tie: to even */
  CU_ASSERT_EQUAL(ssm_f32_to_bf16(from_bits(0x3f808001)), 0x3f81); /* above the tie */
  CU_ASSERT_EQUAL(ssm_f32_to_bf16(from_bits(0x3f807fff)), 0x3f80); /* below the tie */
  CU_ASSERT_EQUAL(ssm_f32_to_bf16(from_bits(0xbf808001)), 0xbf81);
  CU_ASSERT_EQUAL(ssm_f32_to_bf16(from_bits(0x7f7fffff)), 0x7f80); /* FLT_MAX -> inf */
  CU_ASSERT_EQUAL(ssm_f32_to_bf16(INFINITY), 0x7f80);
  CU_ASSERT(isnan(ssm_bf16_to_f32(ssm_f32_to_bf16(from_bits(0x7f800001)))));
  CU_ASSERT(isnan(ssm_bf16_to_f32(ssm_f32_to_bf16(NAN))));
  float r = ssm_bf16_to_f32(ssm_f32_to_bf16(3.14159265f));
  CU_ASSERT_EQUAL(bits(r), 0x40490000);
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = ssm_bf16_to_f32((uint16_t)h);
    if (isnan(f)) continue;
    if (ssm_f32_to_bf16(f) != h) {
      CU_FAIL("bf16 -> f32 -> bf16 is not the identity");
      break;
    }
  }
}

/* A tensor read as q8_0 or q4_0 (on every core, 1,001 rows of K, odd K
 * for q4_0: rows share bytes) is the bytes of ssm_quantize of it read as
 * f32; a NaN in it is refused naming the element. */
static void quant_read(ssm_dtype dt, int K) {
  enum { R = 1001 };
  static float w[R * 41];
  for (int i = 0; i < R * K; i++) w[i] = sinf((float)i * 0.37f) * (float)(1 + i % 7);
  char header[128];
  snprintf(header, sizeof header, "{\"w\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[0,%d]}}",
           R, K, R * K * 4);
  const char *path = st_write("q.safetensors", header, w, (size_t)(R * K) * 4);
  ssm_st *st = NULL;
  SSM_ASSERT_OK(ssm_st_open(path, &st));
  if (!st) return;
  ssm_type t = ssm_type_make(dt, 2, (int64_t[]){R, K});
  ssm_qlayout l = ssm_qlayout_of(&t);
  uint8_t *got = malloc(l.bytes), *want = malloc(l.bytes);
  memset(got, 0xab, l.bytes); /* the padding too must be written */
  SSM_ASSERT_OK(ssm_st_read(st, "w", &t, got));
  CU_ASSERT_EQUAL(ssm_quantize(w, &l, want), -1);
  CU_ASSERT(!memcmp(got, want, l.bytes));
  /* stored quantized (ssm_st_write), read back as the same bytes, with
   * the tensor read as f32 too (a weight read twice) stored as it is */
  char qpath[4096];
  snprintf(qpath, sizeof qpath, "%s/qw.safetensors", ssm_test_tmpdir());
  ssm_type f = ssm_type_make(SSM_F32, 2, (int64_t[]){R, K});
  ssm_st_weight ws[] = {{"w", t}, {"w", f}};
  uint64_t fp = 0;
  SSM_ASSERT_OK(ssm_st_write(st, ws, 2, qpath, NULL, &fp));
  ssm_st_close(st);
  ssm_st *qs = NULL;
  SSM_ASSERT_OK(ssm_st_open(qpath, &qs));
  if (qs) {
    CU_ASSERT_EQUAL(ssm_st_count(qs), 3);
    char *qn, *dn;
    SSM_ASSERT_OK(ssm_st_quant_names("w", dt, &qn, &dn));
    const ssm_st_tensor *qt = ssm_st_find(qs, qn), *dt16 = ssm_st_find(qs, dn);
    CU_ASSERT(qt && dt16);
    if (qt && dt16) {
      CU_ASSERT_EQUAL(qt->nbytes, dt == SSM_Q4_0 ? (size_t)(R * K + 1) / 2 : (size_t)(R * K));
      CU_ASSERT_EQUAL(dt16->dtype, SSM_F16);
      CU_ASSERT_EQUAL(dt16->shape[1], (K + 31) / 32);
    }
    memset(got, 0xcd, l.bytes);
    SSM_ASSERT_OK(ssm_st_read(qs, "w", &t, got));
    CU_ASSERT(!memcmp(got, want, l.bytes));
    float *back = malloc((size_t)(R * K) * 4);
    SSM_ASSERT_OK(ssm_st_read(qs, "w", &f, back));
    CU_ASSERT(!memcmp(back, w, (size_t)(R * K) * 4));
    free(back);
    /* the blocks are read only as blocks */
    char err[128];
    snprintf(err, sizeof err, "tensor '%s' is %s in", qn, dt == SSM_Q4_0 ? "U8" : "I8");
    SSM_ASSERT_ERR(ssm_st_read(qs, qn, &(ssm_type){SSM_F32, qt->rank, {qt->shape[0], qt->shape[1]}}, got),
                   err);
    CU_ASSERT_EQUAL(ssm_st_fingerprint(qs, &(ssm_status){NULL}), fp);
    ssm_st_close(qs);
    /* a scale that is not finite is refused, naming it */
    FILE *fw = fopen(qpath, "r+b");
    CU_ASSERT_PTR_NOT_NULL(fw);
    if (fw) {
      ssm_st *again = NULL;
      SSM_ASSERT_OK(ssm_st_open(qpath, &again));
      const ssm_st_tensor *d = again ? ssm_st_find(again, dn) : NULL;
      if (d) {
        fseek(fw, (long)d->offset + 6, SEEK_SET);
        fputc(0x00, fw), fputc(0x7c, fw); /* scale 3: +inf */
      }
      fclose(fw);
      ssm_st_close(again);
      SSM_ASSERT_OK(ssm_st_open(qpath, &again));
      char nerr[4200];
      snprintf(nerr, sizeof nerr, "tensor '%s' in %s: scale 3 is not finite", dn, qpath);
      if (again) SSM_ASSERT_ERR(ssm_st_read(again, "w", &t, got), nerr);
      ssm_st_close(again);
    }
    free(qn);
    free(dn);
  }
  w[777 * K + 5] = NAN;
  path = st_write("qnan.safetensors", header, w, (size_t)(R * K) * 4);
  SSM_ASSERT_OK(ssm_st_open(path, &st));
  char want_err[96];
  snprintf(want_err, sizeof want_err, "tensor 'w': element %d (nan) cannot be held in %s",
           777 * K + 5, ssm_dtype_name(dt));
  if (st) SSM_ASSERT_ERR(ssm_st_read(st, "w", &t, got), want_err);
  ssm_st_close(st);
  free(got);
  free(want);
}

static void test_quant_read(void) {
  quant_read(SSM_Q8_0, 40);
  quant_read(SSM_Q4_0, 41);
}

static void test_f16_conversion(void) {
  CU_ASSERT_EQUAL(ssm_f16_to_f32(0x3c00), 1.0f);
  CU_ASSERT_EQUAL(ssm_f16_to_f32(0x0001), ldexpf(1, -24));
  CU_ASSERT_EQUAL(ssm_f16_to_f32(0x03ff), ldexpf(1023, -24));
  CU_ASSERT_EQUAL(ssm_f16_to_f32(0x7bff), 65504.0f);
  CU_ASSERT_EQUAL(bits(ssm_f16_to_f32(0x8000)), 0x80000000);
  CU_ASSERT(isinf(ssm_f16_to_f32(0xfc00)) && ssm_f16_to_f32(0xfc00) < 0);
  CU_ASSERT(isnan(ssm_f16_to_f32(0x7e00)));
  CU_ASSERT(isnan(ssm_f16_to_f32(0x7c01)));
  CU_ASSERT_EQUAL(ssm_f32_to_f16(1.0f), 0x3c00);
  CU_ASSERT_EQUAL(ssm_f32_to_f16(65504.0f), 0x7bff);
  CU_ASSERT_EQUAL(ssm_f32_to_f16(65519.0f), 0x7bff);
  CU_ASSERT_EQUAL(ssm_f32_to_f16(65520.0f), 0x7c00);
  CU_ASSERT_EQUAL(ssm_f32_to_f16(1e10f), 0x7c00);
  CU_ASSERT_EQUAL(ssm_f32_to_f16(-INFINITY), 0xfc00);
  CU_ASSERT_EQUAL(ssm_f32_to_f16(-0.0f), 0x8000);
  CU_ASSERT_EQUAL(ssm_f32_to_f16(ldexpf(1, -24)), 0x0001);
  CU_ASSERT_EQUAL(ssm_f32_to_f16(ldexpf(1, -25)), 0x0000); /* tie: to even */
  CU_ASSERT_EQUAL(ssm_f32_to_f16(ldexpf(3, -25)), 0x0002); /* tie: to even */
  CU_ASSERT_EQUAL(ssm_f32_to_f16(ldexpf(1, -26)), 0x0000);
  CU_ASSERT_EQUAL(ssm_f32_to_f16(ldexpf(1023.5f, -24)), 0x0400); /* up into normals */
  CU_ASSERT_EQUAL(ssm_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00); /* tie: to even */
  CU_ASSERT_EQUAL(ssm_f32_to_f16(1.0f + ldexpf(3, -11)), 0x3c02); /* tie: to even */
  CU_ASSERT(isnan(ssm_f16_to_f32(ssm_f32_to_f16(NAN))));
  CU_ASSERT(isnan(ssm_f16_to_f32(ssm_f32_to_f16(from_bits(0x7f800001)))));
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = ssm_f16_to_f32((uint16_t)h);
    if (isnan(f)) continue;
    if (ssm_f32_to_f16(f) != h) {
      CU_FAIL("f16 -> f32 -> f16 is not the identity");
      break;
    }
  }
}

static const char *shard_a_header =
    "{\"x.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
static const char *shard_b_header =
    "{\"y.weight\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[0,4]},"
    "\"z\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]}}";

/* Writes shards a/b into tmp subdir `dir` and an index with `weight_map`. */
static void write_sharded(const char *dir, const char *weight_map) {
  tmp_subdir(dir);
  char name[256], idx[1024];
  float xa[2] = {1.5f, -4.0f};
  uint8_t yb[8] = {0x80, 0x3f, 0x00, 0x40};
  float z = 9.0f;
  memcpy(yb + 4, &z, 4);
  snprintf(name, sizeof name, "%s/model-00001-of-00002.safetensors", dir);
  st_write(name, shard_a_header, xa, sizeof xa);
  snprintf(name, sizeof name, "%s/model-00002-of-00002.safetensors", dir);
  st_write(name, shard_b_header, yb, sizeof yb);
  snprintf(idx, sizeof idx, "{\"metadata\":{\"total_size\":16},\"weight_map\":%s}", weight_map);
  snprintf(name, sizeof name, "%s/model.safetensors.index.json", dir);
  ssm_test_write(name, idx, strlen(idx));
}

static const char *good_map =
    "{\"x.weight\":\"model-00001-of-00002.safetensors\","
    "\"y.weight\":\"model-00002-of-00002.safetensors\","
    "\"z\":\"model-00002-of-00002.safetensors\"}";

static void check_sharded(ssm_st *st) {
  CU_ASSERT_EQUAL(ssm_st_count(st), 3);
  const ssm_st_tensor *t = ssm_st_find(st, "y.weight");
  CU_ASSERT_PTR_NOT_NULL(strstr(t->file, "/model-00002-of-00002.safetensors"));
  float out[2];
  ssm_type tx = ssm_type_make(SSM_F32, 1, (int64_t[]){2});
  SSM_ASSERT_OK(ssm_st_read(st, "x.weight", &tx, out));
  CU_ASSERT(out[0] == 1.5f && out[1] == -4.0f);
  ssm_type ty = ssm_type_make(SSM_F32, 2, (int64_t[]){1, 2});
  SSM_ASSERT_OK(ssm_st_read(st, "y.weight", &ty, out));
  CU_ASSERT(out[0] == 1.0f && out[1] == 2.0f);
  ssm_type tz = ssm_type_make(SSM_F32, 0, NULL);
  SSM_ASSERT_OK(ssm_st_read(st, "z", &tz, out));
  CU_ASSERT_EQUAL(out[0], 9.0f);
}

static void test_sharded(void) {
  write_sharded("sharded", good_map);
  char path[512];
  ssm_st *st;
  snprintf(path, sizeof path, "%s/sharded", ssm_test_tmpdir());
  SSM_ASSERT_OK(ssm_st_open(path, &st));
  if (st) check_sharded(st);
  ssm_st_close(st);
  snprintf(path, sizeof path, "%s/sharded/model.safetensors.index.json", ssm_test_tmpdir());
  SSM_ASSERT_OK(ssm_st_open(path, &st));
  if (st) check_sharded(st);
  ssm_st_close(st);
}

static void test_directory(void) {
  const char *d = tmp_subdir("single");
  write_valid("single/model.safetensors");
  ssm_st *st;
  SSM_ASSERT_OK(ssm_st_open(d, &st));
  CU_ASSERT(st && ssm_st_count(st) == 4);
  char msg[600];
  ssm_type t = ssm_type_make(SSM_F32, 1, (int64_t[]){1});
  snprintf(msg, sizeof msg, "tensor 'nope' not found in %s", d);
  if (st) SSM_ASSERT_ERR(ssm_st_read(st, "nope", &t, NULL), msg);
  ssm_st_close(st);

  d = tmp_subdir("empty");
  snprintf(msg, sizeof msg, "%s: no model.safetensors or model.safetensors.index.json", d);
  SSM_ASSERT_ERR(ssm_st_open(d, &st), msg);
  CU_ASSERT_PTR_NULL(st);
  /* a FIFO named model.safetensors is said to be one, and not opened (no hang) */
  snprintf(msg, sizeof msg, "%s/model.safetensors", d);
  CU_ASSERT_EQUAL_FATAL(mkfifo(msg, 0644), 0);
  snprintf(msg, sizeof msg, "%s/model.safetensors: is a FIFO, not a regular file", d);
  SSM_ASSERT_ERR(ssm_st_open(d, &st), msg);
  CU_ASSERT_PTR_NULL(st);
  SSM_ASSERT_ERR(ssm_st_open("/nonexistent/m.safetensors", &st), "/nonexistent/m.safetensors");
}

/* Opens a file with `header` and 64 zero data bytes; asserts the error
 * starts with the path and contains `needle`. */
static void expect_header_error(const char *header, const char *needle) {
  static uint8_t zeros[64];
  const char *p = st_write("bad.safetensors", header, zeros, sizeof zeros);
  ssm_st *st = (ssm_st *)1;
  ssm_status s = ssm_st_open(p, &st);
  CU_ASSERT_PTR_NULL(st);
  CU_ASSERT_PTR_NOT_NULL(s);
  if (s) CU_ASSERT_EQUAL(strncmp(ssm_status_message(s), p, strlen(p)), 0);
  SSM_ASSERT_ERR(s, needle);
}

static void test_header_errors(void) {
  expect_header_error("{not json", "header is not valid JSON");
  expect_header_error("", "header is not valid JSON");
  expect_header_error("[1,2]", "header is not a JSON object");
  expect_header_error("{} x", "trailing bytes");
  expect_header_error("{\"__metadata__\":3}", "__metadata__ is not an object");
  expect_header_error("{\"x\":5}", "tensor 'x': entry is not an object");
  expect_header_error("{\"a.{*}.w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                      "tensor 'a.{*}.w': the name holds \"{*}\"");
  /* names that C cannot carry whole, or that are not UTF-8: the entry and
   * its place in the file */
  expect_header_error("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                      "tensor entry 0 of the header (at byte 9): the name holds a NUL character");
  expect_header_error("{\"__metadata__\":{\"k\":\"v\"}, \"\\u0000\":{\"dtype\":\"F32\",\"shape\":[1],"
                      "\"data_offsets\":[0,4]}}",
                      "tensor entry 1 of the header (at byte 35): the name holds a NUL character");
  expect_header_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"w\xff\":{"
                      "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      "tensor entry 1 of the header (at byte 62): the name is not valid UTF-8");
  expect_header_error("{\"__metadata__\":{\"k\":\"\xc3\"}}", "header is not valid UTF-8 (at byte 30)");
  expect_header_error("{\"a\tb\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                      "tensor entry 0 of the header (at byte 9): the name holds a raw control");
  expect_header_error("{\"__metadata__\":{\"k\":\"\\\"\n\"}}",
                      "header has a raw control character in a string (at byte 32)");
  expect_header_error("{\"x\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}",
                      "unsupported dtype 'F64' for tensor 'x'");
  expect_header_error("{\"x\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}",
                      "unsupported dtype 'I64' for tensor 'x'");
  expect_header_error("{\"x\":{\"shape\":[1],\"data_offsets\":[0,4]}}",
                      "tensor 'x': dtype missing");
  expect_header_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
                      "tensor 'x': shape must hold non-negative integers");
  expect_header_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}",
                      "tensor 'x': shape must hold non-negative integers");
  expect_header_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}",
                      "tensor 'x': shape must hold non-negative integers");
  expect_header_error("{\"x\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,12]}}",
                      "tensor 'x': shape missing or not an array");
  expect_header_error(
      "{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
      "tensor 'x': rank 7 exceeds 6");
  expect_header_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
                      "\"data_offsets\":[0,4]}}",
                      "tensor 'x': shape element count overflows");
  expect_header_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[4503599627370496,2048],"
                      "\"data_offsets\":[0,4]}}",
                      "tensor 'x': byte size overflows");
  expect_header_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}",
                      "tensor 'x': data_offsets must be [begin,end] integers");
  expect_header_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}",
                      "tensor 'x': data_offsets must be [begin,end] integers");
  expect_header_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}",
                      "tensor 'x': data_offsets [8,4] decrease");
  expect_header_error("{\"a.weight\":{\"dtype\":\"F32\",\"shape\":[25],"
                      "\"data_offsets\":[0,100]}}",
                      "tensor 'a.weight': data_offsets [0,100] exceed the data section (64 bytes)");
  expect_header_error("{\"x\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,8]}}",
                      "tensor 'x': data_offsets [0,8] hold 8 bytes but F32 [2,2] needs 16");
  expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                      "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
                      "tensors 'a' [0,16] and 'b' [8,24] overlap");
  expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      "tensors 'a' [0,32] and 'b' [4,8] overlap");
  expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      "duplicate tensor 'a'");
}

static void test_file_errors(void) {
  ssm_st *st;
  const char *p = ssm_test_write("short.safetensors", "\x10\0\0\0\0", 5);
  SSM_ASSERT_ERR(ssm_st_open(p, &st), "short.safetensors: file is 5 bytes, too short");

  uint8_t over[50] = {0xe8, 0x03}; /* header length 1000 */
  p = ssm_test_write("over.safetensors", over, sizeof over);
  SSM_ASSERT_ERR(ssm_st_open(p, &st),
                 "over.safetensors: header length 1000 exceeds the file (50 bytes)");

  uint8_t absurd[16] = {0, 0, 0, 0, 0, 1}; /* 2^40 */
  p = ssm_test_write("absurd.safetensors", absurd, sizeof absurd);
  SSM_ASSERT_ERR(ssm_st_open(p, &st), "absurd.safetensors: header length 1099511627776 is absurd");

  uint8_t huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  p = ssm_test_write("huge.safetensors", huge, sizeof huge);
  SSM_ASSERT_ERR(ssm_st_open(p, &st), "is absurd");
}

static void test_read_errors(void) {
  static uint8_t data[128];
  const char *p = st_write("m.safetensors",
                           "{\"w\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[0,128]},"
                           "\"ids\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,0]}}",
                           data, sizeof data);
  ssm_st *st;
  SSM_ASSERT_ERR(ssm_st_open(p, &st), "'ids': data_offsets [0,0] hold 0 bytes but I32 [2] needs 8");
  p = st_write("m.safetensors",
               "{\"w\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[0,120]},"
               "\"ids\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[120,128]}}",
               data, sizeof data);
  SSM_ASSERT_ERR(ssm_st_open(p, &st), "hold 120 bytes but F32 [4,8] needs 128");
  p = st_write("m.safetensors",
               "{\"w\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[0,128]}}", data,
               sizeof data);
  SSM_ASSERT_OK(ssm_st_open(p, &st));
  if (!st) return;
  float buf[32];
  char msg[600];
  ssm_type t84 = ssm_type_make(SSM_F32, 2, (int64_t[]){8, 4});
  snprintf(msg, sizeof msg, "tensor 'missing' not found in %s", p);
  SSM_ASSERT_ERR(ssm_st_read(st, "missing", &t84, buf), msg);
  SSM_ASSERT_ERR(ssm_st_read(st, "w", &t84, buf),
                 "tensor 'w' has shape [4,8] in the checkpoint but the model expects [8,4]");
  ssm_type t32 = ssm_type_make(SSM_F32, 1, (int64_t[]){32});
  SSM_ASSERT_ERR(ssm_st_read(st, "w", &t32, buf),
                 "tensor 'w' has shape [4,8] in the checkpoint but the model expects [32]");
  ssm_type ti = ssm_type_make(SSM_I32, 2, (int64_t[]){4, 8});
  SSM_ASSERT_ERR(ssm_st_read(st, "w", &ti, buf), "tensor 'w' is F32 in");
  ssm_st_close(st);
}

static void test_index_errors(void) {
  ssm_st *st;
  char dir[512];
  write_sharded("noshard", "{\"x.weight\":\"model-00001-of-00002.safetensors\","
                           "\"q\":\"missing.safetensors\"}");
  snprintf(dir, sizeof dir, "%s/noshard", ssm_test_tmpdir());
  SSM_ASSERT_ERR(ssm_st_open(dir, &st), "model.safetensors.index.json: shard "
                                        "'missing.safetensors': ");
  SSM_ASSERT_ERR(ssm_st_open(dir, &st), "missing.safetensors: No such file");

  write_sharded("ghost", "{\"x.weight\":\"model-00001-of-00002.safetensors\","
                         "\"ghost\":\"model-00002-of-00002.safetensors\"}");
  snprintf(dir, sizeof dir, "%s/ghost", ssm_test_tmpdir());
  SSM_ASSERT_ERR(ssm_st_open(dir, &st), "model.safetensors.index.json: tensor 'ghost' is mapped "
                                        "to shard 'model-00002-of-00002.safetensors' but is not "
                                        "in it");

  write_sharded("wrong", "{\"x.weight\":\"model-00002-of-00002.safetensors\","
                         "\"z\":\"model-00001-of-00002.safetensors\"}");
  snprintf(dir, sizeof dir, "%s/wrong", ssm_test_tmpdir());
  SSM_ASSERT_ERR(ssm_st_open(dir, &st), "tensor 'x.weight' is mapped to shard "
                                        "'model-00002-of-00002.safetensors' but is not in it");

  write_sharded("escape", "{\"x.weight\":\"../valid.safetensors\"}");
  snprintf(dir, sizeof dir, "%s/escape", ssm_test_tmpdir());
  SSM_ASSERT_ERR(ssm_st_open(dir, &st), "shard name '../valid.safetensors' may not contain");

  write_sharded("nomap", "3");
  snprintf(dir, sizeof dir, "%s/nomap", ssm_test_tmpdir());
  SSM_ASSERT_ERR(ssm_st_open(dir, &st), "no \"weight_map\" object");

  tmp_subdir("dup");
  st_write("dup/s1.safetensors", shard_a_header, (float[2]){0}, 8);
  st_write("dup/s2.safetensors", shard_a_header, (float[2]){0}, 8);
  const char *idx = "{\"weight_map\":{\"x.weight\":\"s1.safetensors\",\"y\":\"s2.safetensors\"}}";
  const char *p = ssm_test_write("dup/model.safetensors.index.json", idx, strlen(idx));
  SSM_ASSERT_ERR(ssm_st_open(p, &st), "tensor 'x.weight' appears in both");
}

/* xorshift64*: a fixed-seed generator so failures reproduce. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

static void test_mutations(void) {
  write_valid("orig.safetensors");
  size_t hl = strlen(valid_header), n = 8 + hl + sizeof valid_data;
  uint8_t *orig = malloc(n), *buf = malloc(n);
  for (int i = 0; i < 8; i++) orig[i] = (uint8_t)((uint64_t)hl >> (8 * i));
  memcpy(orig + 8, valid_header, hl);
  memcpy(orig + 8 + hl, valid_data, sizeof valid_data);
  int opened = 0, failed = 0, bad_prefix = 0;
  for (int iter = 0; iter < 2000; iter++) {
    memcpy(buf, orig, n);
    size_t len = n;
    int mode = (int)(rng() % 4);
    if (mode == 0 || mode == 3) { /* flip bytes, mostly in the header */
      int k = 1 + (int)(rng() % 4);
      for (int j = 0; j < k; j++) buf[rng() % (8 + hl)] ^= (uint8_t)(1u << (rng() % 8));
    }
    if (mode == 1) { /* replace a digit of the header by another digit */
      for (int tries = 0; tries < 50; tries++) {
        size_t at = 8 + rng() % hl;
        if (buf[at] >= '0' && buf[at] <= '9') {
          buf[at] = (uint8_t)('0' + rng() % 10);
          break;
        }
      }
    }
    if (mode == 2 || mode == 3) len = rng() % (n + 1);
    const char *p = ssm_test_write("mut.safetensors", buf, len);
    ssm_st *st = NULL;
    ssm_status s = ssm_st_open(p, &st);
    if (s) {
      failed++;
      bad_prefix += strncmp(ssm_status_message(s), p, strlen(p)) != 0;
      CU_ASSERT_PTR_NULL(st);
      ssm_status_free(s);
      continue;
    }
    opened++;
    for (int i = 0; i < ssm_st_count(st); i++) { /* touch every byte of every tensor */
      const ssm_st_tensor *t = ssm_st_at(st, i);
      ssm_type want = ssm_type_make(t->dtype == SSM_I32 ? SSM_I32 : SSM_F32, t->rank, t->shape);
      void *dst = malloc(t->nbytes * 2 + 1);
      SSM_ASSERT_OK(ssm_st_read(st, t->name, &want, dst));
      free(dst);
    }
    ssm_st_close(st);
  }
  CU_ASSERT(opened > 20);
  CU_ASSERT(failed > 500);
  CU_ASSERT_EQUAL(bad_prefix, 0);
  free(orig);
  free(buf);
}

/* A file truncated after it was opened: reading a tensor that is gone is
 * an error (a mapping would have died of SIGBUS). */
static void test_truncated_while_open(void) {
  const char *p = write_valid("trunc-open.safetensors");
  ssm_st *st = NULL;
  SSM_ASSERT_OK(ssm_st_open(p, &st));
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  CU_ASSERT_EQUAL_FATAL(truncate(p, (off_t)(8 + strlen(valid_header) + 8)), 0);
  float a[4];
  ssm_type t = ssm_type_make(SSM_F32, 2, (int64_t[]){2, 2});
  SSM_ASSERT_ERR(ssm_st_read(st, "a", &t, a), "shorter than its header says");
  ssm_status s = NULL;
  CU_ASSERT_EQUAL(ssm_st_fingerprint(st, &s), 0);
  SSM_ASSERT_ERR(s, "shorter than its header says");
  ssm_st_close(st);
}

int main(void) {
  CU_TestInfo tests[] = {{"truncated_while_open", test_truncated_while_open},
                         {"valid_file", test_valid_file},
                         {"bf16_rounding", test_bf16_rounding},
                         {"quant_read", test_quant_read},
                         {"f16_conversion", test_f16_conversion},
                         {"sharded", test_sharded},
                         {"directory", test_directory},
                         {"header_errors", test_header_errors},
                         {"file_errors", test_file_errors},
                         {"read_errors", test_read_errors},
                         {"index_errors", test_index_errors},
                         {"mutations", test_mutations},
                         CU_TEST_INFO_NULL};
  return ssm_test_main("safetensors", tests);
}
