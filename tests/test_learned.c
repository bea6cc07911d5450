/* test_learned.c - learned absolute position embeddings (BERT, GPT-2): rows
 * of a caller's table gathered and added in place, every x/table dtype mix,
 * strided layouts, positions past the table as a clean error with nothing
 * written, and SIMD-vs-scalar bit identity. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "posenc.h"

/* ---- helpers: rng, half types, tensors ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}
static float rng_uniform(float lo, float hi) {
  return lo + (hi - lo) * (float)((rng_next() >> 40) * (1.0 / 16777216.0));
}

/* Independent of the library's convert.h: binary16 decoded and encoded with
 * ldexp/nearbyint in double (exact scalings, the default round-to-nearest-
 * even), and bf16 as the float32 rounded to 8 significant bits by comparing
 * the two neighbours in double. */
static float h2f(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return (float)((h & 0x8000) ? -v : v);
}
static uint16_t f2h(float f) {
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  double a = fabs((double)f);
  if (isnan(f)) return (uint16_t)(sign | 0x7e00);
  if (a < 0x1p-14) return (uint16_t)(sign | (uint16_t)nearbyint(a * 0x1p24)); /* 1024 = min normal */
  int e = ilogb(a);
  double m = nearbyint(ldexp(a, 10 - e));
  if (m == 2048) m = 1024, e++;
  if (e > 15) return (uint16_t)(sign | 0x7c00);
  return (uint16_t)(sign | ((e + 15) << 10) | ((int)m - 1024));
}
static float b2f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f2b(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  float flo, fhi;
  memcpy(&flo, &lo, 4);
  memcpy(&fhi, &hi, 4);
  double dl = fabs((double)f - (double)flo), dh = fabs((double)fhi - (double)f);
  if (isinf(f)) return (uint16_t)(u >> 16);
  if (dh < dl || (dh == dl && ((lo >> 16) & 1))) return (uint16_t)(hi >> 16);
  return (uint16_t)(lo >> 16);
}

static size_t esize(pe_dtype d) { return d == PE_F32 ? 4 : 2; }
static double get_elem(const pe_tensor *t, int64_t off) {
  const char *p = (const char *)t->data + off * (int64_t)esize(t->dtype);
  if (t->dtype == PE_F32) {
    float f;
    memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, p, 2);
  return t->dtype == PE_F16 ? h2f(h) : b2f(h);
}
static void set_elem(pe_tensor *t, int64_t off, float v) {
  char *p = (char *)t->data + off * (int64_t)esize(t->dtype);
  if (t->dtype == PE_F32) {
    memcpy(p, &v, 4);
  } else {
    uint16_t h = t->dtype == PE_F16 ? f2h(v) : f2b(v);
    memcpy(p, &h, 2);
  }
}
/* Relative rounding unit of a dtype. */
static double dtype_eps(pe_dtype d) {
  return d == PE_F32 ? 0x1p-23 : d == PE_F16 ? 0x1p-10 : 0x1p-7;
}

/* A tensor of logical shape s with dimensions 0..2 laid out in the physical
 * order perm (outermost first), rows padded by pad elements, and dimension
 * `reversed` (or -1) walked backwards through a negative stride. */
typedef struct tbuf {
  pe_tensor t;
  void *mem;
  size_t bytes;
} tbuf;
static tbuf make_tensor(pe_dtype d, const int64_t s[4], const int perm[3], int64_t pad,
                        int reversed) {
  tbuf b;
  memset(&b, 0, sizeof b);
  b.t.dtype = d;
  memcpy(b.t.shape, s, sizeof b.t.shape);
  int64_t st[4];
  st[3] = 1;
  int64_t span = s[3] + pad;
  for (int k = 2; k >= 0; k--) {
    st[perm[k]] = span;
    span *= s[perm[k]];
  }
  b.bytes = (size_t)span * esize(d);
  b.mem = malloc(b.bytes);
  assert_non_null(b.mem);
  for (size_t i = 0; i < b.bytes; i++) ((unsigned char *)b.mem)[i] = (unsigned char)rng_next();
  char *base = b.mem;
  if (reversed >= 0) {
    base += (s[reversed] - 1) * st[reversed] * (int64_t)esize(d);
    st[reversed] = -st[reversed];
  }
  memcpy(b.t.stride, st, sizeof st);
  b.t.data = base;
  return b;
}
static int64_t offset_of(const pe_tensor *t, int64_t a, int64_t b, int64_t c, int64_t e) {
  return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + e * t->stride[3];
}
/* Fill every logical element with uniform values in [lo, hi). */
static void fill_uniform(tbuf *b, float lo, float hi) {
  const pe_tensor *t = &b->t;
  for (int64_t a = 0; a < t->shape[0]; a++)
    for (int64_t h = 0; h < t->shape[1]; h++)
      for (int64_t i = 0; i < t->shape[2]; i++)
        for (int64_t j = 0; j < t->shape[3]; j++)
          set_elem(&b->t, offset_of(t, a, h, i, j), rng_uniform(lo, hi));
}
static tbuf clone(const tbuf *src) {
  tbuf b = *src;
  b.mem = malloc(src->bytes);
  assert_non_null(b.mem);
  memcpy(b.mem, src->mem, src->bytes);
  b.t.data = (char *)b.mem + ((char *)src->t.data - (char *)src->mem);
  return b;
}

/* Every ISA path other than scalar that this build and CPU run. */
static const char *const simd_isas[] = {"avx2", "avx512", "neon"};

/* Back to the path the environment asked for (CI runs every PE_ISA), or
 * the best one. */
static void restore_isa(void) {
  const char *env = getenv("PE_ISA");
  if (!env || pe_force_isa(env) != PE_OK) assert_int_equal(pe_force_isa("auto"), PE_OK);
}

/* One 3-thread pool for the whole file (creating pools per case, with their
 * hwloc topology and threads, is slow under qemu). PE_POOL_MIN_BYTES=0 makes
 * even the small test tensors split across the threads. */
static pe_threadpool *shared_pool;
/* 1: the bit-identity cases compare pool against no pool instead of ISAs. */
static int pool_mode;
static pe_threadpool *test_pool(void) {
  if (!shared_pool) {
    setenv("PE_POOL_MIN_BYTES", "0", 1);
    assert_int_equal(pe_threadpool_create(3, &shared_pool), PE_OK);
  }
  return shared_pool;
}
static int destroy_pool(void **state) {
  (void)state;
  pe_threadpool_destroy(shared_pool);
  shared_pool = NULL;
  return 0;
}

static void expect_error(pe_status got, pe_status want, const char *needle) {
  assert_int_equal(got, want);
  const char *msg = pe_last_error();
  if (!strstr(msg, needle)) fail_msg("error \"%s\" does not mention \"%s\"", msg, needle);
}

/* Random scores with NaN, +-Inf, subnormals, zeros of both signs. */
static void fill_special(tbuf *b) {
  const pe_tensor *t = &b->t;
  static const float specials[] = {NAN, -NAN, INFINITY, -INFINITY, 0x1p-140f, -0x1p-149f,
                                   0.0f, -0.0f, 65504.0f, 1e-7f, 3e38f, -6e-5f};
  for (int64_t a = 0; a < t->shape[0]; a++)
    for (int64_t h = 0; h < t->shape[1]; h++)
      for (int64_t i = 0; i < t->shape[2]; i++)
        for (int64_t j = 0; j < t->shape[3]; j++) {
          uint64_t r = rng_next();
          float v = (r & 7) == 0 ? specials[(r >> 8) % 12] : rng_uniform(-100.0f, 100.0f);
          set_elem(&b->t, offset_of(t, a, h, i, j), v);
        }
  /* Signalling NaNs straight into the storage too. */
  if (t->dtype == PE_F32) {
    uint32_t snan = 0x7f800001u;
    memcpy(t->data, &snan, 4);
  } else {
    uint16_t snan = t->dtype == PE_F16 ? 0x7c01u : 0x7f81u;
    memcpy(t->data, &snan, 2);
  }
}

/* A [1, 1, max_len, D] table of dtype d with rows `pad` elements apart. */
static tbuf make_table(pe_dtype d, int64_t max_len, int64_t D, int64_t pad, float range) {
  const int dense[3] = {0, 1, 2};
  const int64_t s[4] = {1, 1, max_len, D};
  tbuf t = make_tensor(d, s, dense, pad, -1);
  fill_uniform(&t, -range, range);
  return t;
}

/* after = before + table[pos] in double, within the rounding of x's dtype
 * (the sum is rounded once from float32). */
static void check_add(const tbuf *before, const tbuf *after, const tbuf *table,
                      const int64_t *pos) {
  const pe_tensor *t = &before->t;
  int64_t B = t->shape[0], T = t->shape[2], D = t->shape[3];
  double eps = t->dtype == PE_F32 ? 0x1p-23 : dtype_eps(t->dtype);
  for (int64_t b = 0; b < B; b++)
    for (int64_t k = 0; k < T; k++) {
      int64_t p = pos ? pos[b * T + k] : k;
      for (int64_t c = 0; c < D; c++) {
        int64_t off = offset_of(t, b, 0, k, c);
        double x = get_elem(&before->t, off), g = get_elem(&after->t, off);
        double e = get_elem(&table->t, offset_of(&table->t, 0, 0, p, c));
        double want = x + e, tol = eps * (fabs(x) + fabs(e)) + 1e-30;
        if (!(fabs(g - want) <= tol))
          fail_msg("x %d table %d [%ld,%ld,%ld] pos %ld: got %.9g want %.9g", t->dtype,
                   table->t.dtype, (long)b, (long)k, (long)c, (long)p, g, want);
      }
    }
}

static void test_all_dtype_mixes_and_layouts(void **state) {
  (void)state;
  const int dense[3] = {0, 1, 2}, tb[3] = {2, 1, 0};
  for (int xd = 0; xd < 3; xd++)
    for (int td = 0; td < 3; td++)
      for (int variant = 0; variant < 4; variant++) {
        int64_t B = 3, T = 5, D = variant == 3 ? 5000 : 37, max_len = 64; /* 5000 > one chunk */
        const int64_t s[4] = {B, 1, T, D};
        tbuf x = make_tensor((pe_dtype)xd, s, variant & 1 ? tb : dense, variant == 2 ? 7 : 0,
                             variant == 1 ? 2 : -1);
        fill_uniform(&x, -2.0f, 2.0f);
        tbuf table = make_table((pe_dtype)td, max_len, D, variant & 1 ? 11 : 0, 1.0f);
        tbuf after = clone(&x);
        int64_t pos[15];
        for (int k = 0; k < 15; k++) pos[k] = (int64_t)(rng_next() % (uint64_t)max_len);
        pos[3] = max_len - 1; /* the last row is reachable */
        const int64_t *pp = variant & 2 ? pos : NULL;
        assert_int_equal(pe_learned_add(&after.t, &table.t, pp, NULL), PE_OK);
        check_add(&x, &after, &table, pp);
        free(x.mem);
        free(after.mem);
        free(table.mem);
      }
}

/* An f32 table added to f32 x: exactly the float sum. */
static void test_exact_f32_sum(void **state) {
  (void)state;
  float x[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8}, table[3 * 4];
  for (int e = 0; e < 12; e++) table[e] = 0.25f * (float)e;
  pe_tensor xt = {x, PE_F32, {2, 1, 1, 4}, {4, 4, 4, 1}};
  pe_tensor tt = {table, PE_F32, {1, 1, 3, 4}, {12, 12, 4, 1}};
  int64_t pos[2] = {2, 0};
  assert_int_equal(pe_learned_add(&xt, &tt, pos, NULL), PE_OK);
  const float want[8] = {3.0f, 4.25f, 5.5f, 6.75f, 5.0f, 6.25f, 7.5f, 8.75f};
  assert_memory_equal(x, want, sizeof want);
}

static void test_errors_change_nothing(void **state) {
  (void)state;
  float xm[2 * 4 * 8], keep[2 * 4 * 8], table[16 * 8];
  for (int e = 0; e < 64; e++) xm[e] = (float)e;
  for (int e = 0; e < 128; e++) table[e] = 1.0f;
  memcpy(keep, xm, sizeof xm);
  const pe_tensor gx = {xm, PE_F32, {2, 1, 4, 8}, {32, 32, 8, 1}};
  const pe_tensor gt = {table, PE_F32, {1, 1, 16, 8}, {128, 128, 8, 1}};
  pe_tensor x, t;
  int64_t pos[8] = {0, 1, 2, 3, 4, 5, 6, 7};

  x = gx; t = gt;
  pos[5] = 16; /* == max_len: the embedding does not exist */
  expect_error(pe_learned_add(&x, &t, pos, NULL), PE_ERR_POSITION_OUT_OF_RANGE,
               "position 16 at [batch 1, token 1] >= table max_len 16");
  pos[5] = 1000000;
  expect_error(pe_learned_add(&x, &t, pos, NULL), PE_ERR_POSITION_OUT_OF_RANGE, "1000000");
  pos[5] = -1;
  expect_error(pe_learned_add(&x, &t, pos, NULL), PE_ERR_POSITION_OUT_OF_RANGE, "-1");
  pos[5] = 5;
  t.shape[2] = 3; /* 4 tokens at 0..3 by default, table of 3 rows */
  expect_error(pe_learned_add(&x, &t, NULL, NULL), PE_ERR_POSITION_OUT_OF_RANGE, "max_len 3");
  t = gt;
  expect_error(pe_learned_add(NULL, &t, NULL, NULL), PE_ERR_NULL_POINTER, "x");
  expect_error(pe_learned_add(&x, NULL, NULL, NULL), PE_ERR_NULL_POINTER, "table");
  t.data = NULL;
  expect_error(pe_learned_add(&x, &t, NULL, NULL), PE_ERR_NULL_POINTER, "table->data");
  t = gt; t.dtype = (pe_dtype)5;
  expect_error(pe_learned_add(&x, &t, NULL, NULL), PE_ERR_DTYPE, "table->dtype 5");
  t = gt; t.shape[0] = 2;
  expect_error(pe_learned_add(&x, &t, NULL, NULL), PE_ERR_SHAPE, "[1, 1, max_len, d_model]");
  t = gt; t.shape[1] = 2;
  expect_error(pe_learned_add(&x, &t, NULL, NULL), PE_ERR_SHAPE, "[1, 1, max_len, d_model]");
  t = gt; t.shape[3] = 7; t.stride[2] = 8;
  expect_error(pe_learned_add(&x, &t, NULL, NULL), PE_ERR_SHAPE, "d_model (shape[3]) 7 != x d_model 8");
  t = gt; t.stride[3] = 0;
  expect_error(pe_learned_add(&x, &t, NULL, NULL), PE_ERR_SHAPE, "stride[3]");
  t = gt;
  x.shape[0] = 1; x.shape[1] = 2;
  expect_error(pe_learned_add(&x, &t, NULL, NULL), PE_ERR_SHAPE, "x->shape[1] = 2");
  x = gx; x.stride[2] = 2;
  expect_error(pe_learned_add(&x, &t, NULL, NULL), PE_ERR_SHAPE, "alias");
  x = gx; t.data = xm;
  expect_error(pe_learned_add(&x, &t, NULL, NULL), PE_ERR_INVALID_ARGUMENT, "same address");
  assert_memory_equal(xm, keep, sizeof xm);
}

static void run_simd_case(pe_dtype xd, pe_dtype td, int64_t D) {
  const int dense[3] = {0, 1, 2};
  const int64_t s[4] = {2, 1, 3, D};
  tbuf ref = make_tensor(xd, s, dense, 1, -1);
  fill_special(&ref);
  tbuf orig = clone(&ref);
  tbuf table = make_table(td, 8, D, 3, 50.0f);
  /* Inf and a subnormal in the table too, but no NaN: when x and the table
   * entry are both NaN, which payload survives the add is the compiler's
   * and hardware's choice (documented as unspecified). */
  set_elem(&table.t, offset_of(&table.t, 0, 0, 7, 0), INFINITY);
  set_elem(&table.t, offset_of(&table.t, 0, 0, 7, D - 1), 0x1p-135f);
  int64_t pos[6] = {7, 1, 2, 0, 7, 5};
  assert_int_equal(pe_force_isa("scalar"), PE_OK);
  assert_int_equal(pe_learned_add(&ref.t, &table.t, pos, NULL), PE_OK);
  if (pool_mode) {
    tbuf p = clone(&orig);
    pe_threadpool *pool = test_pool();
    assert_int_equal(pe_learned_add(&p.t, &table.t, pos, pool), PE_OK);
    assert_memory_equal(p.mem, ref.mem, ref.bytes);
    free(p.mem);
  }
  for (size_t k = 0; !pool_mode && k < sizeof simd_isas / sizeof simd_isas[0]; k++) {
    pe_status st = pe_force_isa(simd_isas[k]);
    if (st == PE_ERR_UNSUPPORTED) continue;
    assert_int_equal(st, PE_OK);
    tbuf v = clone(&orig);
    assert_int_equal(pe_learned_add(&v.t, &table.t, pos, NULL), PE_OK);
    if (memcmp(v.mem, ref.mem, ref.bytes))
      fail_msg("%s x %d table %d D %ld differs from scalar", simd_isas[k], xd, td, (long)D);
    free(v.mem);
  }
  restore_isa();
  free(ref.mem);
  free(orig.mem);
  free(table.mem);
}

/* Every f16 and every bf16 bit pattern as x, plus table values with random
 * exponents (small ones land the sums on half-type rounding boundaries,
 * subnormals and overflow): each ISA's conversions against scalar's. */
static void test_simd_every_half_pattern(void **state) {
  (void)state;
  enum { T = 64, D = 1024 };
  float *table = malloc(sizeof(float) * T * D);
  for (int e = 0; e < T * D; e++) {
    uint32_t u = (uint32_t)rng_next();
    int exp = 127 - 30 + (int)((u >> 23) % 48); /* 2^-30 .. 2^17 */
    uint32_t bits = (u & 0x807fffffu) | ((uint32_t)exp << 23);
    memcpy(&table[e], &bits, 4);
    if (e % 7 == 0) table[e] = 0.0f;
  }
  pe_tensor tt = {table, PE_F32, {1, 1, T, D}, {T * D, T * D, D, 1}};
  uint16_t *ref = malloc(2 * T * D), *v = malloc(2 * T * D);
  for (int d = 1; d <= 2; d++) {
    for (int e = 0; e < T * D; e++) ref[e] = (uint16_t)e;
    pe_tensor xt = {ref, (pe_dtype)d, {1, 1, T, D}, {T * D, T * D, D, 1}};
    assert_int_equal(pe_force_isa("scalar"), PE_OK);
    assert_int_equal(pe_learned_add(&xt, &tt, NULL, NULL), PE_OK);
    for (size_t k = 0; k < sizeof simd_isas / sizeof simd_isas[0]; k++) {
      pe_status st = pe_force_isa(simd_isas[k]);
      if (st == PE_ERR_UNSUPPORTED) continue;
      assert_int_equal(st, PE_OK);
      for (int e = 0; e < T * D; e++) v[e] = (uint16_t)e;
      xt.data = v;
      assert_int_equal(pe_learned_add(&xt, &tt, NULL, NULL), PE_OK);
      xt.data = ref;
      for (int e = 0; e < T * D; e++)
        if (v[e] != ref[e])
          fail_msg("%s dtype %d: x bits 0x%04x + %a -> 0x%04x, scalar 0x%04x", simd_isas[k], d, e,
                   (double)table[e], v[e], ref[e]);
    }
  }
  restore_isa();
  free(ref);
  free(v);
  free(table);
}

static void all_identity_cases(void) {
  for (int xd = 0; xd < 3; xd++)
    for (int td = 0; td < 3; td++)
      for (int64_t D = 1; D <= 80; D += (D < 40 ? 1 : 9)) run_simd_case((pe_dtype)xd, (pe_dtype)td, D);
}

static void test_simd_matches_scalar(void **state) {
  (void)state;
  pool_mode = 0;
  all_identity_cases();
}

/* Kept apart from the ISA checks so PE_TEST_FILTER can leave it out where
 * threads are slow (qemu). */
static void test_pool_matches_single_thread(void **state) {
  (void)state;
  pool_mode = 1;
  all_identity_cases();
  pool_mode = 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_dtype_mixes_and_layouts),
      cmocka_unit_test(test_exact_f32_sum),
      cmocka_unit_test(test_errors_change_nothing),
      cmocka_unit_test(test_simd_matches_scalar),
      cmocka_unit_test(test_simd_every_half_pattern),
      cmocka_unit_test(test_pool_matches_single_thread),
  };
  /* e.g. PE_TEST_FILTER='*scalar*' to run a part (under qemu) */
  if (getenv("PE_TEST_FILTER")) cmocka_set_test_filter(getenv("PE_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, destroy_pool);
}
