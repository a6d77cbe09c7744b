// The safetensors reader and writer: F32/BF16/I32 round trips, bf16 rounding
// (ties to even, overflow, NaN), exact widening of F16 and BF16, every
// malformed file the reader must refuse (with the file and the tensor or field
// named), and a sharded save and load of a whole model through hf_io.
#define _XOPEN_SOURCE 700

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "model/hf_io.h"
#include "model/safetensors.h"
#include "tmpdir.h"

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

// An 8-byte length field, then header, then n data bytes.
static void write_raw(const char *path, uint64_t header_len, const char *header, const void *data,
                      size_t n) {
  FILE *fp = fopen(path, "wb");
  CHECK(fp, "cannot create %s", path);
  fwrite(&header_len, sizeof header_len, 1, fp);
  fwrite(header, 1, strlen(header), fp);
  if (n) fwrite(data, 1, n, fp);
  CHECK(fclose(fp) == 0, "cannot write %s", path);
}

static void write_with_header(const char *path, const char *header, const void *data, size_t n) {
  write_raw(path, strlen(header), header, data, n);
}

// Opening path must fail with code, and the message must name the file and
// every one of the (up to two) given words.
static void expect_open_error(const char *path, int code, const char *w1, const char *w2) {
  eng_st_file f;
  eng_err e = {0};
  int rc = eng_st_open(&f, NULL, path, &e);
  CHECK(rc == code, "%s: expected %d, got %d (%s)", path, code, rc, e.msg);
  CHECK(strstr(e.msg, path), "message does not name the file: %s", e.msg);
  CHECK(!w1 || strstr(e.msg, w1), "message does not name \"%s\": %s", w1, e.msg);
  CHECK(!w2 || strstr(e.msg, w2), "message does not name \"%s\": %s", w2, e.msg);
}

// ---- round trips -------------------------------------------------------------------

static void test_roundtrip_f32(void) {
  const char *path = tmp_path("rt.safetensors");
  float a[6] = {1.5f, -2.25f, 0.0f, -0.0f, 3.0e-41f, INFINITY}, s[1] = {42.0f};
  float c[24];
  for (int i = 0; i < 24; i++) c[i] = (float)i * 0.125f - 1.0f;
  int32_t ids[5] = {0, -1, 7, INT32_MAX, INT32_MIN};
  eng_st_src src[] = {
      {.name = "a", .dtype = ENG_ST_F32, .ndim = 2, .shape = {2, 3}, .data = a},
      {.name = "scalar", .dtype = ENG_ST_F32, .ndim = 0, .data = s},
      {.name = "empty", .dtype = ENG_ST_F32, .ndim = 2, .shape = {0, 4}, .data = NULL},
      {.name = "c", .dtype = ENG_ST_F32, .ndim = 3, .shape = {2, 3, 4}, .data = c},
      {.name = "ids", .dtype = ENG_ST_I32, .ndim = 1, .shape = {5}, .data = ids},
  };
  eng_err e = {0};
  CHECK_OK(eng_st_write(path, src, 5, &e), &e);
  CHECK(!exists(tmp_path("rt.safetensors.tmp")), "temporary file left behind");

  eng_st_file f;
  CHECK_OK(eng_st_open(&f, NULL, path, &e), &e);
  CHECK(f.n_tensors == 5, "n_tensors %d", f.n_tensors);
  CHECK(f.data_off % 8 == 0, "data section not 8-byte aligned");
  const json_t *meta = json_object_get(f.header, "__metadata__");
  CHECK(meta && json_is_string(json_object_get(meta, "format")) &&
            strcmp(json_string_value(json_object_get(meta, "format")), "pt") == 0,
        "__metadata__.format is not \"pt\"");
  // Listed in data order, which is the order written.
  for (int i = 0; i < 5; i++) CHECK(strcmp(f.tensors[i].name, src[i].name) == 0, "order %d", i);

  const eng_st_tensor *t = eng_st_find(&f, "a");
  CHECK(t && t->dtype == ENG_ST_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
            t->numel == 6 && t->begin == 0 && t->end == 24,
        "tensor a described wrongly");
  float back[24];
  CHECK_OK(eng_st_read_f32(&f, t, back, &e), &e);
  CHECK(memcmp(back, a, sizeof a) == 0, "a differs after the round trip");

  t = eng_st_find(&f, "scalar");
  CHECK(t && t->ndim == 0 && t->numel == 1, "scalar described wrongly");
  CHECK_OK(eng_st_read_f32(&f, t, back, &e), &e);
  CHECK(back[0] == 42.0f, "scalar %g", (double)back[0]);

  t = eng_st_find(&f, "empty");
  CHECK(t && t->numel == 0 && t->begin == t->end, "empty described wrongly");
  CHECK_OK(eng_st_read_f32(&f, t, NULL, &e), &e);

  t = eng_st_find(&f, "c");
  CHECK(t && t->ndim == 3 && t->shape[2] == 4, "c described wrongly");
  CHECK_OK(eng_st_read_f32(&f, t, back, &e), &e);
  CHECK(memcmp(back, c, sizeof c) == 0, "c differs after the round trip");

  t = eng_st_find(&f, "ids");
  int32_t ids_back[5];
  CHECK(t && t->dtype == ENG_ST_I32, "ids described wrongly");
  CHECK_OK(eng_st_read_i32(&f, t, ids_back, &e), &e);
  CHECK(memcmp(ids_back, ids, sizeof ids) == 0, "ids differ after the round trip");
  // The wrong reader for the dtype is an error naming the tensor.
  CHECK(eng_st_read_f32(&f, t, back, &e) == ENG_EINVAL && strstr(e.msg, "\"ids\"") &&
            strstr(e.msg, path),
        "reading I32 as floats: %s", e.msg);
  CHECK(eng_st_read_i32(&f, eng_st_find(&f, "a"), ids_back, &e) == ENG_EINVAL &&
            strstr(e.msg, "\"a\""),
        "reading F32 as ints: %s", e.msg);
  CHECK(eng_st_find(&f, "nope") == NULL, "found a tensor that is not there");
  eng_st_close(&f);
  eng_st_close(&f); // a second close is harmless
}

// Reference rounding to bf16, written independently of the library: compare
// the distances to the two neighbours in double, ties to the even one. Past
// the largest bf16 the upper neighbour is 2^128, where IEEE overflow rounding
// puts it. NaN is checked apart.
static uint16_t ref_bf16(float x) {
  uint32_t lo = bits(x) & 0xffff0000u, hi = lo + 0x10000u;
  if (isinf(x)) return (uint16_t)(lo >> 16);
  double vlo = from_bits(lo);
  double vhi = (hi & 0x7fffffffu) == 0x7f800000u ? copysign(0x1p128, x) : from_bits(hi);
  double dlo = fabs(vlo - x), dhi = fabs(vhi - x);
  if (dlo != dhi) return (uint16_t)((dlo < dhi ? lo : hi) >> 16);
  return (uint16_t)(((lo >> 16) & 1u ? hi : lo) >> 16);
}

static void test_bf16_rounding(void) {
  const uint32_t in[] = {
      0x3f800000u, // 1: exact
      0x3f808000u, // 1 + 2^-8: tie between 0x3f80 and 0x3f81, even is 0x3f80
      0x3f818000u, // tie between 0x3f81 and 0x3f82, even is 0x3f82
      0x3f808001u, // just above the tie: up
      0x3f807fffu, // just below the tie: down
      0xbf808000u, // negative tie: to even, magnitude down
      0xbf818000u, // negative tie: to even, magnitude up
      0x7f7fffffu, // FLT_MAX rounds past the largest bf16 to inf
      0x7f7f7fffu, // just under the largest bf16's upper half: stays finite
      0x7f800000u, // inf
      0xff800000u, // -inf
      0x00000001u, // smallest subnormal: to +0
      0x00008000u, // subnormal tie: to even (0)
      0x00018000u, // subnormal tie: to even (2)
      0x80000000u, // -0
      0x3fffffffu, // carry into the exponent: 2.0
  };
  const uint16_t want[] = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0x3f80, 0xbf80, 0xbf82, 0x7f80,
                           0x7f7f, 0x7f80, 0xff80, 0x0000, 0x0000, 0x0002, 0x8000, 0x4000};
  enum { N = sizeof in / sizeof in[0] };
  const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0xffc00001u, 0x7fffffffu, 0x7f80ffffu};
  enum { NN = sizeof nans / sizeof nans[0] };
  float x[N + NN + 4096];
  for (int i = 0; i < N; i++) x[i] = from_bits(in[i]);
  for (int i = 0; i < NN; i++) x[N + i] = from_bits(nans[i]);
  // A sweep of ordinary values checked against the reference rounding.
  uint32_t s = 12345;
  for (int i = 0; i < 4096; i++) {
    s = s * 1664525u + 1013904223u;
    x[N + NN + i] = from_bits((s & 0x807fffffu) | ((uint32_t)(100 + i % 60) << 23));
  }
  enum { TOTAL = N + NN + 4096 };
  const char *path = tmp_path("bf16.safetensors");
  eng_st_src src = {.name = "x", .dtype = ENG_ST_BF16, .ndim = 1, .shape = {TOTAL}, .data = x};
  eng_err e = {0};
  CHECK_OK(eng_st_write(path, &src, 1, &e), &e);
  eng_st_file f;
  CHECK_OK(eng_st_open(&f, NULL, path, &e), &e);
  const eng_st_tensor *t = eng_st_find(&f, "x");
  CHECK(t && t->dtype == ENG_ST_BF16 && t->end - t->begin == 2 * TOTAL, "x described wrongly");
  float back[TOTAL];
  CHECK_OK(eng_st_read_f32(&f, t, back, &e), &e);
  for (int i = 0; i < N; i++)
    CHECK(bits(back[i]) == (uint32_t)want[i] << 16, "0x%08x -> 0x%08x, want 0x%04x0000", in[i],
          bits(back[i]), want[i]);
  for (int i = 0; i < NN; i++)
    CHECK(isnan(back[N + i]) && signbit(back[N + i]) == signbit(x[N + i]),
          "NaN 0x%08x came back as 0x%08x", nans[i], bits(back[N + i]));
  for (int i = N + NN; i < TOTAL; i++)
    CHECK(bits(back[i]) == (uint32_t)ref_bf16(x[i]) << 16, "0x%08x -> 0x%08x, reference 0x%04x",
          bits(x[i]), bits(back[i]), ref_bf16(x[i]));
  eng_st_close(&f);
}

// Half and bf16 bytes written by hand widen exactly.
static void test_half_widening(void) {
  const uint16_t h[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0xc000,
                        0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0x8001, 0x3555};
  const float want[] = {0.0f, -0.0f, 0x1p-24f,  1023 * 0x1p-24f, 0x1p-14f,
                        1.0f, -2.0f, 65504.0f,  INFINITY,        -INFINITY,
                        NAN,  NAN,   -0x1p-24f, 0x1.554p-2f};
  enum { N = sizeof h / sizeof h[0] };
  const uint16_t b[] = {0x3f80, 0xc0a0, 0x0001, 0x7f80, 0x7fc1};
  uint8_t data[2 * N + 10];
  memcpy(data, h, sizeof h);
  memcpy(data + sizeof h, b, sizeof b);
  char header[256];
  snprintf(header, sizeof header,
           "{\"h\":{\"dtype\":\"F16\",\"shape\":[%d],\"data_offsets\":[0,%d]},"
           "\"b\":{\"dtype\":\"BF16\",\"shape\":[5],\"data_offsets\":[%d,%d]}}",
           N, 2 * N, 2 * N, 2 * N + 10);
  const char *path = tmp_path("half.safetensors");
  write_with_header(path, header, data, sizeof data);
  eng_st_file f;
  eng_err e = {0};
  CHECK_OK(eng_st_open(&f, NULL, path, &e), &e);
  float out[N];
  CHECK_OK(eng_st_read_f32(&f, eng_st_find(&f, "h"), out, &e), &e);
  for (int i = 0; i < N; i++) {
    if (isnan(want[i]))
      CHECK(isnan(out[i]), "half 0x%04x -> %g, want NaN", h[i], (double)out[i]);
    else
      CHECK(bits(out[i]) == bits(want[i]), "half 0x%04x -> %a, want %a", h[i], (double)out[i],
            (double)want[i]);
  }
  CHECK_OK(eng_st_read_f32(&f, eng_st_find(&f, "b"), out, &e), &e);
  CHECK(out[0] == 1.0f && out[1] == -5.0f && out[2] == 0x1p-133f && isinf(out[3]) && isnan(out[4]),
        "bf16 widening wrong");
  eng_st_close(&f);
}

static void test_i64_narrowing(void) {
  const int64_t v[] = {0, -5, INT32_MAX, INT32_MIN, (int64_t)INT32_MAX + 1};
  const char *path = tmp_path("i64.safetensors");
  write_with_header(path,
                    "{\"ok\":{\"dtype\":\"I64\",\"shape\":[4],\"data_offsets\":[0,32]},"
                    "\"big\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[32,40]}}",
                    v, sizeof v);
  eng_st_file f;
  eng_err e = {0};
  CHECK_OK(eng_st_open(&f, NULL, path, &e), &e);
  int32_t out[4];
  CHECK_OK(eng_st_read_i32(&f, eng_st_find(&f, "ok"), out, &e), &e);
  CHECK(out[0] == 0 && out[1] == -5 && out[2] == INT32_MAX && out[3] == INT32_MIN, "I64 -> I32");
  CHECK(eng_st_read_i32(&f, eng_st_find(&f, "big"), out, &e) == ENG_EINVAL &&
            strstr(e.msg, "\"big\"") && strstr(e.msg, "2147483648") && strstr(e.msg, path),
        "out-of-range I64: %s", e.msg);
  eng_st_close(&f);
}

// ---- malformed files ---------------------------------------------------------------

static void test_malformed(void) {
  const char *path = tmp_path("bad.safetensors");
  uint8_t data[64] = {0};

  FILE *fp = fopen(path, "wb");
  fwrite("\x01\x02\x03\x04\x05", 1, 5, fp);
  fclose(fp);
  expect_open_error(path, ENG_EINVAL, "5 bytes", "header length");
  fp = fopen(path, "wb");
  fclose(fp);
  expect_open_error(path, ENG_EINVAL, "0 bytes", "header length");

  write_raw(path, 1000, "{}", NULL, 0);
  expect_open_error(path, ENG_EINVAL, "header length 1000", "past the end");
  write_raw(path, UINT64_MAX, "{}", NULL, 0);
  expect_open_error(path, ENG_EINVAL, "header length", "past the end");

  write_with_header(path, "{\"a\": {\"dtype\": ", NULL, 0);
  expect_open_error(path, ENG_EINVAL, "header", "JSON");
  write_with_header(path, "[1, 2]", NULL, 0);
  expect_open_error(path, ENG_EINVAL, "header", "JSON object");
  write_with_header(path, "", NULL, 0);
  expect_open_error(path, ENG_EINVAL, "header", "JSON");
  // A repeated tensor name is malformed, not "last one wins".
  write_with_header(path,
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                    data, 8);
  expect_open_error(path, ENG_EINVAL, "header", "duplicate");

  write_with_header(path, "{\"w\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", data,
                    8);
  expect_open_error(path, ENG_EINVAL, "\"w\"", "\"dtype\" is \"Q7\"");
  write_with_header(path, "{\"w\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", data,
                    8);
  expect_open_error(path, ENG_ENOTSUP, "\"w\"", "F64");
  write_with_header(path, "{\"w\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
  expect_open_error(path, ENG_EINVAL, "\"w\"", "\"dtype\"");

  write_with_header(path, "{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", data, 8);
  expect_open_error(path, ENG_EINVAL, "\"w\"", "\"dtype\" is missing");
  write_with_header(path, "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", data, 8);
  expect_open_error(path, ENG_EINVAL, "\"w\"", "\"shape\" is missing");
  write_with_header(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", data, 8);
  expect_open_error(path, ENG_EINVAL, "\"w\"", "\"data_offsets\" is missing");
  write_with_header(path, "{\"w\":[1,2]}", data, 8);
  expect_open_error(path, ENG_EINVAL, "\"w\"", "object");
  write_with_header(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", data,
                    8);
  expect_open_error(path, ENG_EINVAL, "\"w\"", "\"shape\"");
  write_with_header(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", data,
                    8);
  expect_open_error(path, ENG_EINVAL, "\"w\"", "\"shape\"");
  write_with_header(path,
                    "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                    "\"data_offsets\":[0,8]}}",
                    data, 8);
  expect_open_error(path, ENG_EINVAL, "\"w\"", "\"shape\"");
  write_with_header(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", data,
                    8);
  expect_open_error(path, ENG_EINVAL, "\"w\"", "\"data_offsets\"");
  write_with_header(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", data,
                    8);
  expect_open_error(path, ENG_EINVAL, "\"w\"", "\"data_offsets\"");
  write_with_header(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":\"0-8\"}}",
                    data, 8);
  expect_open_error(path, ENG_EINVAL, "\"w\"", "\"data_offsets\"");
  write_with_header(path,
                    "{\"__metadata__\":[],\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                    "\"data_offsets\":[0,8]}}",
                    data, 8);
  expect_open_error(path, ENG_EINVAL, "\"__metadata__\"", NULL);
  write_with_header(path, "{\"__metadata__\":{\"format\":1}}", NULL, 0);
  expect_open_error(path, ENG_EINVAL, "\"__metadata__.format\"", NULL);

  // Offsets that disagree with shape x dtype size.
  write_with_header(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}", data,
                    12);
  expect_open_error(path, ENG_EINVAL, "\"w\"", "\"data_offsets\" [0, 12]");
  // Truncated data: the header is consistent, the file is short.
  write_with_header(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", data,
                    10);
  expect_open_error(path, ENG_EINVAL, "\"w\"", "truncated");
  write_with_header(path,
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[8],\"data_offsets\":[8,24]}}",
                    data, 20);
  expect_open_error(path, ENG_EINVAL, "\"b\"", "truncated");
  // Overlap, hole, bytes after the last tensor.
  write_with_header(path,
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
                    data, 24);
  expect_open_error(path, ENG_EINVAL, "\"b\"", "overlaps tensor \"a\"");
  write_with_header(path,
                    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}",
                    data, 24);
  expect_open_error(path, ENG_EINVAL, "\"b\"", "belong to no tensor");
  write_with_header(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", data,
                    12);
  expect_open_error(path, ENG_EINVAL, "\"a\"", "belong to no tensor");
  write_with_header(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", data,
                    16);
  expect_open_error(path, ENG_EINVAL, "\"a\"", "8 bytes after the last tensor");

  expect_open_error(tmp_path("absent.safetensors"), ENG_EIO, "cannot open", NULL);

  // A header padded with spaces, as writers align the data, is fine.
  write_with_header(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}    ",
                    data, 8);
  eng_st_file f;
  eng_err e = {0};
  CHECK_OK(eng_st_open(&f, NULL, path, &e), &e);
  eng_st_close(&f);
}

static void test_writer_errors(void) {
  float x[2] = {1, 2};
  eng_err e = {0};
  const char *path = tmp_path("w.safetensors");
  eng_st_src twice[2] = {{.name = "a", .dtype = ENG_ST_F32, .ndim = 1, .shape = {2}, .data = x},
                         {.name = "a", .dtype = ENG_ST_F32, .ndim = 1, .shape = {2}, .data = x}};
  CHECK(eng_st_write(path, twice, 2, &e) == ENG_EINVAL && strstr(e.msg, "\"a\""), "dup: %s", e.msg);
  eng_st_src f16 = {.name = "h", .dtype = ENG_ST_F16, .ndim = 1, .shape = {2}, .data = x};
  CHECK(eng_st_write(path, &f16, 1, &e) == ENG_EINVAL && strstr(e.msg, "F16"), "f16: %s", e.msg);
  eng_st_src meta = {
      .name = "__metadata__", .dtype = ENG_ST_F32, .ndim = 1, .shape = {2}, .data = x};
  CHECK(eng_st_write(path, &meta, 1, &e) == ENG_EINVAL, "reserved name accepted");
  CHECK(!exists(path) && !exists(tmp_path("w.safetensors.tmp")), "refused write left a file");
  const char *nodir = tmp_path("no/such/dir/w.safetensors");
  CHECK(eng_st_write(nodir, &twice[0], 1, &e) == ENG_EIO && strstr(e.msg, "no/such/dir"),
        "missing directory: %s", e.msg);
}

// ---- sharded model save and load ---------------------------------------------------

static float **alloc_shards(const eng_layout *lo, uint32_t seed) {
  float **s = malloc(sizeof *s * (size_t)lo->n_shards);
  for (int i = 0; i < lo->n_shards; i++) {
    size_t n = eng_layout_shard_numel(lo, i);
    s[i] = malloc(sizeof **s * (n ? n : 1));
    for (size_t j = 0; j < n; j++) {
      seed = seed * 1664525u + 1013904223u;
      s[i][j] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.1f;
    }
  }
  return s;
}

static void free_shards(const eng_layout *lo, float **s) {
  for (int i = 0; i < lo->n_shards; i++) free(s[i]);
  free(s);
}

static void check_same(const eng_layout *lo, float **a, float **b, int bf16) {
  for (int i = 0; i < lo->n_shards; i++)
    for (size_t j = 0; j < eng_layout_shard_numel(lo, i); j++) {
      uint32_t want = bf16 ? (uint32_t)ref_bf16(a[i][j]) << 16 : bits(a[i][j]);
      CHECK(bits(b[i][j]) == want, "shard %d element %zu: 0x%08x, want 0x%08x", i, j, bits(b[i][j]),
            want);
    }
}

static void test_sharded_model(void) {
  const eng_config c = {.arch = ENG_ARCH_QWEN2,
                        .vocab = 96,
                        .d_model = 32,
                        .n_layers = 3,
                        .n_heads = 4,
                        .n_kv_heads = 2,
                        .head_dim = 8,
                        .d_ff = 48,
                        .max_pos = 64,
                        .rope_theta = 10000.0f,
                        .rms_eps = 1e-6f,
                        .init_std = 0.02f,
                        .tie_embeddings = 0,
                        .qkv_bias = 1,
                        .qk_norm = 0};
  eng_layout lo;
  eng_layout_init(&lo, &c);
  float **w = alloc_shards(&lo, 7), **r = alloc_shards(&lo, 99);
  char dir[512];
  snprintf(dir, sizeof dir, "%s", tmp_path("model"));
  eng_err e = {0};

  // Single file first, then sharded into the same directory: the single file
  // must go, or it would shadow the shards.
  CHECK_OK(eng_hf_save(dir, &c, &lo, (const float *const *)w, 0, 0, NULL, NULL, &e), &e);
  CHECK(exists(tmp_path("model/model.safetensors")), "no model.safetensors");
  const size_t cap = 20000; // bytes: the embedding (12288) alone, layers ~2 per file
  CHECK_OK(eng_hf_save(dir, &c, &lo, (const float *const *)w, 0, cap, NULL, NULL, &e), &e);
  CHECK(!exists(tmp_path("model/model.safetensors")), "stale model.safetensors kept");
  CHECK(exists(tmp_path("model/config.json")), "no config.json");

  json_error_t jerr;
  json_t *index = json_load_file(tmp_path("model/model.safetensors.index.json"), 0, &jerr);
  CHECK(index, "index: %s", jerr.text);
  json_t *map = json_object_get(index, "weight_map");
  CHECK(json_integer_value(json_object_get(json_object_get(index, "metadata"), "total_size")) ==
            (json_int_t)(lo.total_numel * 4),
        "metadata.total_size is not the parameter bytes");
  CHECK(json_object_size(map) == 1 + 3 * 12 + 2, "weight_map has %zu entries",
        json_object_size(map));
  // Files model-0000k-of-0000N.safetensors, k = 1..N all used, each within
  // the cap and holding the tensors the map places there.
  int n_files = 0;
  unsigned used = 0;
  const char *name;
  json_t *v;
  json_object_foreach(map, name, v) {
    int k, n;
    CHECK(sscanf(json_string_value(v), "model-%05d-of-%05d.safetensors", &k, &n) == 2 && k >= 1 &&
              k <= n && n < 32 && (!n_files || n == n_files),
          "shard file name %s", json_string_value(v));
    n_files = n;
    used |= 1u << k;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(v));
    eng_st_file f;
    CHECK_OK(eng_st_open(&f, NULL, path, &e), &e);
    CHECK(eng_st_find(&f, name), "%s is not in %s", name, path);
    CHECK(f.data_size <= cap, "%s holds %zu bytes, over the cap", path, f.data_size);
    eng_st_close(&f);
  }
  CHECK(n_files >= 3 && used == ((1u << (n_files + 1)) - 2), "%d shard files, used 0x%x", n_files,
        used);
  json_decref(index);

  CHECK_OK(eng_hf_load_weights(NULL, dir, &lo, r, &e), &e);
  check_same(&lo, w, r, 0);

  // bf16, sharded, then back to a single file: the index must go.
  CHECK_OK(eng_hf_save(dir, &c, &lo, (const float *const *)w, 1, cap, NULL, NULL, &e), &e);
  CHECK_OK(eng_hf_load_weights(NULL, dir, &lo, r, &e), &e);
  check_same(&lo, w, r, 1);
  CHECK_OK(eng_hf_save(dir, &c, &lo, (const float *const *)w, 1, 0, NULL, NULL, &e), &e);
  CHECK(!exists(tmp_path("model/model.safetensors.index.json")), "stale index kept");
  CHECK_OK(eng_hf_load_weights(NULL, dir, &lo, r, &e), &e);
  check_same(&lo, w, r, 1);

  eng_config back;
  CHECK_OK(eng_config_load(NULL, tmp_path("model/config.json"), &back, &e), &e);
  CHECK(memcmp(&back, &c, sizeof c) == 0, "config.json does not round-trip");
  free_shards(&lo, w);
  free_shards(&lo, r);
}

// A tied model writes no lm_head; saving into a missing nested directory works.
static void test_tied_save(void) {
  const eng_config c = {.arch = ENG_ARCH_LLAMA,
                        .vocab = 64,
                        .d_model = 16,
                        .n_layers = 1,
                        .n_heads = 2,
                        .n_kv_heads = 1,
                        .head_dim = 8,
                        .d_ff = 24,
                        .max_pos = 32,
                        .rope_theta = 10000.0f,
                        .rms_eps = 1e-5f,
                        .init_std = 0.02f,
                        .tie_embeddings = 1};
  eng_layout lo;
  eng_layout_init(&lo, &c);
  float **w = alloc_shards(&lo, 3), **r = alloc_shards(&lo, 4);
  eng_err e = {0};
  char dir[512];
  snprintf(dir, sizeof dir, "%s", tmp_path("nested/a/b"));
  CHECK_OK(eng_hf_save(dir, &c, &lo, (const float *const *)w, 0, 0, NULL, NULL, &e), &e);
  eng_st_file f;
  CHECK_OK(eng_st_open(&f, NULL, tmp_path("nested/a/b/model.safetensors"), &e), &e);
  CHECK(!eng_st_find(&f, "lm_head.weight"), "tied lm_head was written");
  CHECK(f.n_tensors == 1 + 9 + 1, "%d tensors", f.n_tensors);
  CHECK(strcmp(f.tensors[0].name, "model.embed_tokens.weight") == 0 &&
            strcmp(f.tensors[f.n_tensors - 1].name, "model.norm.weight") == 0,
        "not in Hugging Face order");
  eng_st_close(&f);
  CHECK_OK(eng_hf_load_weights(NULL, dir, &lo, r, &e), &e);
  check_same(&lo, w, r, 0);
  free_shards(&lo, w);
  free_shards(&lo, r);
}

// A file truncated while open: the next read fails naming both sizes (a
// mapping would have been SIGBUS).
static void test_shrunk(void) {
  const char *path = tmp_path("shrink.safetensors");
  float x[1024];
  for (int i = 0; i < 1024; i++) x[i] = (float)i;
  eng_st_src src = {.name = "x", .dtype = ENG_ST_F32, .ndim = 1, .shape = {1024}, .data = x};
  eng_err e = {0};
  CHECK_OK(eng_st_write(path, &src, 1, &e), &e);
  eng_st_file f;
  CHECK_OK(eng_st_open(&f, NULL, path, &e), &e);
  CHECK(truncate(path, (off_t)f.data_off) == 0, "truncate %s", path);
  char want[64];
  snprintf(want, sizeof want, "shrank from %zu to %zu bytes", f.size, f.data_off);
  CHECK(eng_st_read_f32(&f, &f.tensors[0], x, &e) == ENG_EIO && strstr(e.msg, want), "%s", e.msg);
  eng_st_close(&f);
}

int main(void) {
  tmp_make();
  test_shrunk();
  test_roundtrip_f32();
  test_bf16_rounding();
  test_half_widening();
  test_i64_narrowing();
  test_malformed();
  test_writer_errors();
  test_sharded_model();
  test_tied_save();
  tmp_cleanup();
  printf("test_safetensors: ok\n");
  return 0;
}
