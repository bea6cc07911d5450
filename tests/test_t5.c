/* test_t5.c - T5 relative position buckets against the formula of T5's
 * _relative_position_bucket evaluated in double in this file (and a few
 * values worked by hand), the bias against float64, error paths, dtypes,
 * layouts and SIMD-vs-scalar bit identity. */
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

#include "enc_test_util.h"
/* ---- buckets ---- */

/* T5 (Raffel et al.; HF T5Attention._relative_position_bucket): rel = key -
 * query. Bidirectional: half the buckets per side, keys after the query
 * offset by that half, n = |rel|; otherwise n = max(-rel, 0). Below
 * max_exact = buckets/2 the distance is its own bucket, above it
 * max_exact + ln(n/max_exact)/ln(max_distance/max_exact)*(buckets-max_exact)
 * truncated and capped at buckets-1. Double here; the library uses T5's
 * float32, which gives the same buckets on these ranges. */
static int ref_bucket(int64_t rel, int bidir, int nb, int md) {
  int ret = 0;
  int64_t n;
  if (bidir) {
    nb /= 2;
    if (rel > 0) ret += nb;
    n = rel < 0 ? -rel : rel;
  } else {
    n = rel < 0 ? -rel : 0;
  }
  int exact = nb / 2;
  if (n < exact) return ret + (int)n;
  double v = exact + log((double)n / exact) / log((double)md / exact) * (nb - exact);
  int64_t large = (int64_t)v;
  if (large > nb - 1) large = nb - 1;
  return ret + (int)large;
}

static void test_bucket_formula_table(void **state) {
  (void)state;
  const struct {
    int nb, md;
  } cfg[] = {{32, 128}, {64, 256}, {16, 64}, {32, 64}, {8, 20}, {128, 1024}, {320, 3000}};
  for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++)
    for (int bidir = 0; bidir < 2; bidir++)
      for (int64_t rel = -300; rel <= 300; rel++) {
        int want = ref_bucket(rel, bidir, cfg[c].nb, cfg[c].md);
        int got = pe_t5_bucket(rel, bidir, cfg[c].nb, cfg[c].md);
        if (got != want)
          fail_msg("bucket(%ld, bidir %d, %d, %d) = %d, formula %d", (long)rel, bidir, cfg[c].nb,
                   cfg[c].md, got, want);
      }
}

/* Values worked by hand for T5's defaults (32 buckets, max distance 128):
 * bidirectional: 16 per side, max_exact 8;
 *   rel -12: 8 + trunc(ln(1.5)/ln(16)*8 = 1.17) = 9
 *   rel -127: 8 + trunc(ln(15.875)/ln(16)*8 = 7.98) = 15; +127: 16 + 15 = 31
 * unidirectional (decoder): 32 buckets, max_exact 16, keys after the query -> 0;
 *   rel -20: 16 + trunc(ln(1.25)/ln(8)*16 = 1.72) = 17
 *   rel -100: 16 + trunc(ln(6.25)/ln(8)*16 = 14.10) = 30 */
static void test_bucket_hand_values(void **state) {
  (void)state;
  assert_int_equal(pe_t5_bucket(0, 1, 32, 128), 0);
  assert_int_equal(pe_t5_bucket(-1, 1, 32, 128), 1);
  assert_int_equal(pe_t5_bucket(-7, 1, 32, 128), 7);
  assert_int_equal(pe_t5_bucket(-8, 1, 32, 128), 8);
  assert_int_equal(pe_t5_bucket(1, 1, 32, 128), 17);
  assert_int_equal(pe_t5_bucket(-12, 1, 32, 128), 9);
  assert_int_equal(pe_t5_bucket(-127, 1, 32, 128), 15);
  assert_int_equal(pe_t5_bucket(127, 1, 32, 128), 31);
  assert_int_equal(pe_t5_bucket(-128, 1, 32, 128), 15);
  assert_int_equal(pe_t5_bucket(INT64_MIN, 1, 32, 128), 15);
  assert_int_equal(pe_t5_bucket(INT64_MAX, 1, 32, 128), 31);
  assert_int_equal(pe_t5_bucket(5, 0, 32, 128), 0);
  assert_int_equal(pe_t5_bucket(-15, 0, 32, 128), 15);
  assert_int_equal(pe_t5_bucket(-20, 0, 32, 128), 17);
  assert_int_equal(pe_t5_bucket(-100, 0, 32, 128), 30);
  assert_int_equal(pe_t5_bucket(-1000, 0, 32, 128), 31);
  assert_int_equal(pe_t5_bucket(INT64_MIN, 0, 32, 128), 31);
}

/* Buckets never decrease with the distance on each side, up to far
 * distances (the float32 log must not wobble across a boundary). */
static void test_bucket_monotone(void **state) {
  (void)state;
  for (int bidir = 0; bidir < 2; bidir++) {
    int prev_neg = -1, prev_pos = -1;
    for (int64_t n = 0; n < 200000; n++) {
      int a = pe_t5_bucket(-n, bidir, 64, 100000), b = pe_t5_bucket(n, bidir, 64, 100000);
      assert_true(a >= prev_neg && b >= prev_pos);
      prev_neg = a;
      prev_pos = b;
    }
    assert_int_equal(prev_neg, bidir ? 31 : 63);
  }
}

static void test_bucket_invalid(void **state) {
  (void)state;
  assert_int_equal(pe_t5_bucket(0, 1, 33, 128), -1);
  assert_non_null(strstr(pe_last_error(), "num_buckets 33"));
  assert_int_equal(pe_t5_bucket(0, 1, 2, 128), -1);
  assert_int_equal(pe_t5_bucket(0, 0, 1, 128), -1);
  assert_non_null(strstr(pe_last_error(), "num_buckets 1"));
  assert_int_equal(pe_t5_bucket(0, 1, 32, 8), -1); /* max_exact is 8 */
  assert_non_null(strstr(pe_last_error(), "max_distance 8"));
  assert_int_equal(pe_t5_bucket(0, 0, 32, 16), -1); /* max_exact is 16 */
  assert_int_equal(pe_t5_bucket(0, 0, 32, -5), -1);
  /* Small decoder setups: 3 buckets, max_exact 1, max_distance 2 ... */
  assert_int_equal(pe_t5_bucket(0, 0, 3, 2), 0);
  assert_int_equal(pe_t5_bucket(-1, 0, 3, 2), 1);
  assert_int_equal(pe_t5_bucket(-3, 0, 3, 2), 2);
  /* ... and the smallest of each kind, by T5's formula: 2 buckets one way
   * (distance 0, or more), 4 both ways (0, 1 before, 0 after, 1 after). */
  assert_int_equal(pe_t5_bucket(0, 0, 2, 2), 0);
  assert_int_equal(pe_t5_bucket(5, 0, 2, 2), 0); /* a later key: distance 0 */
  assert_int_equal(pe_t5_bucket(-1, 0, 2, 2), 1);
  assert_int_equal(pe_t5_bucket(-1000, 0, 2, 2), 1);
  assert_int_equal(pe_t5_bucket(0, 1, 4, 2), 0);
  assert_int_equal(pe_t5_bucket(-1, 1, 4, 2), 1);
  assert_int_equal(pe_t5_bucket(-9, 1, 4, 2), 1);
  assert_int_equal(pe_t5_bucket(1, 1, 4, 2), 3);
  assert_int_equal(pe_t5_bucket(9, 1, 4, 2), 3);
}

/* ---- the bias against float64 ---- */

/* T5's bias: the learned table entry of the relative position's bucket. */
typedef struct t5_table {
  const float *table;
  int64_t heads;
  int bidir, nb, md;
} t5_table;

static double t5_bias(const void *ctx, int64_t h, int64_t q, int64_t j) {
  const t5_table *t = ctx;
  return t->table[ref_bucket(j - q, t->bidir, t->nb, t->md) * t->heads + h];
}

static void run_bias_case(pe_dtype d, const int64_t s[4], int variant, int use_qp, int causal,
                          int bidir, int nb, int md) {
  tbuf before = make_variant_tensor(d, s, variant);
  fill_uniform(&before, -4.0f, 4.0f);
  tbuf after = clone(&before);
  int64_t B = s[0], H = s[1], Q = s[2], K = s[3];
  int64_t *qp = use_qp ? random_positions(B * Q, K + 5) : NULL;
  float *table = malloc(sizeof(float) * (size_t)(nb * H + 1));
  for (int64_t e = 0; e < nb * H; e++) table[e] = rng_uniform(-3.0f, 3.0f);
  table[nb * H] = NAN; /* after the table: never read (a read would refuse it as not finite) */
  assert_int_equal(pe_t5_add_bias(&after.t, table, bidir, nb, md, qp, causal ? PE_MASK_CAUSAL : 0,
                                  NULL),
                   PE_OK);
  t5_table tt = {table, H, bidir, nb, md};
  check_score_bias(&before, &after, qp, causal, t5_bias, &tt);
  free(table);
  free(qp);
  free(before.mem);
  free(after.mem);
}

static void test_bias_dtypes_layouts(void **state) {
  (void)state;
  const int64_t shapes[][4] = {{2, 3, 5, 37}, {1, 4, 1, 300}, {3, 2, 7, 7}, {1, 2, 1, 1}};
  for (int d = 0; d < 3; d++)
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
      for (int variant = 0; variant < 6; variant++)
        run_bias_case((pe_dtype)d, shapes[si], variant, variant & 1, variant >= 2,
                      variant % 2 == 0, variant == 5 ? 16 : 32, variant == 5 ? 20 : 128);
}

/* Rows longer than the library's internal chunk of keys. */
static void test_bias_long_rows(void **state) {
  (void)state;
  const int64_t s[4] = {1, 2, 2, 5000};
  run_bias_case(PE_F32, s, 0, 0, 0, 1, 32, 128);
  run_bias_case(PE_BF16, s, 0, 1, 1, 0, 32, 128);
  /* the widest near window of the per-head bias line (max_distance 512), and
   * past it (the per-row runs): both directions, causal and not */
  run_bias_case(PE_F32, s, 0, 0, 0, 1, 64, 512);
  run_bias_case(PE_F16, s, 0, 1, 1, 0, 64, 512);
  run_bias_case(PE_F32, s, 0, 1, 0, 1, 320, 3000);
  run_bias_case(PE_BF16, s, 0, 0, 1, 0, 320, 3000);
}

/* The smallest max_distance for 32 buckets (one past max_exact): the near
 * window is the exact buckets alone, and every key farther than it takes the
 * last bucket of its side - which the next-to-last distance inside the
 * window does not share (bidirectional: bucket 23 at +7, 31 from +9). */
static void test_bias_smallest_max_distance(void **state) {
  (void)state;
  const int64_t s[4] = {2, 2, 3, 40};
  for (int d = 0; d < 3; d++)
    for (int v = 0; v < 4; v++) {
      run_bias_case((pe_dtype)d, s, 0, v & 1, v >= 2, 1, 32, 9);
      run_bias_case((pe_dtype)d, s, 0, v & 1, v >= 2, 0, 32, 17);
    }
  /* Rows longer than the library's 512-key pieces, a query at every
   * position: some piece starts exactly max_distance - 1 keys after its
   * query (the window's last distance, 8 here, bucket 24 - not the far 31). */
  const int64_t square[4] = {1, 1, 1100, 1100};
  run_bias_case(PE_F32, square, 0, 0, 0, 1, 32, 9);
  /* and the widest window (max_distance 512): pieces past it on both sides */
  run_bias_case(PE_F32, square, 0, 0, 0, 1, 64, 512);
}

static void test_bias_errors_change_nothing(void **state) {
  (void)state;
  enum { N = 2 * 3 * 4 * 5 };
  float mem[N], keep[N];
  for (int e = 0; e < N; e++) mem[e] = (float)e;
  memcpy(keep, mem, sizeof mem);
  const pe_tensor good = {mem, PE_F32, {2, 3, 4, 5}, {60, 20, 5, 1}};
  pe_tensor t;
  float table[32 * 3];
  for (int e = 0; e < 96; e++) table[e] = 0.5f;
  int64_t qp[8] = {0, 1, 2, 3, 4, 5, 6, 7};

  expect_error(pe_t5_add_bias(NULL, table, 1, 32, 128, NULL, 0, NULL), PE_ERR_NULL_POINTER, "scores");
  t = good;
  expect_error(pe_t5_add_bias(&t, NULL, 1, 32, 128, NULL, 0, NULL), PE_ERR_NULL_POINTER, "table");
  t = good; t.data = NULL;
  expect_error(pe_t5_add_bias(&t, table, 1, 32, 128, NULL, 0, NULL), PE_ERR_NULL_POINTER, "scores->data");
  t = good; t.dtype = (pe_dtype)3;
  expect_error(pe_t5_add_bias(&t, table, 1, 32, 128, NULL, 0, NULL), PE_ERR_DTYPE, "dtype 3");
  t = good; t.shape[0] = -1;
  expect_error(pe_t5_add_bias(&t, table, 1, 32, 128, NULL, 0, NULL), PE_ERR_SHAPE, "shape[0]");
  t = good; t.stride[2] = 4;
  expect_error(pe_t5_add_bias(&t, table, 1, 32, 128, NULL, 0, NULL), PE_ERR_SHAPE, "alias");
  t = good;
  expect_error(pe_t5_add_bias(&t, table, 1, 32, 128, NULL, 0x10, NULL), PE_ERR_INVALID_ARGUMENT, "flags");
  expect_error(pe_t5_add_bias(&t, table, 1, 31, 128, NULL, 0, NULL), PE_ERR_INVALID_ARGUMENT, "num_buckets 31");
  expect_error(pe_t5_add_bias(&t, table, 0, 32, 16, NULL, 0, NULL), PE_ERR_INVALID_ARGUMENT, "max_distance 16");
  qp[7] = -4;
  expect_error(pe_t5_add_bias(&t, table, 1, 32, 128, qp, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE, "-4");
  qp[7] = 7;
  table[50] = NAN;
  expect_error(pe_t5_add_bias(&t, table, 1, 32, 128, qp, 0, NULL), PE_ERR_INVALID_ARGUMENT, "bucket 16][head 2]");
  table[50] = -INFINITY;
  expect_error(pe_t5_add_bias(&t, table, 1, 32, 128, qp, 0, NULL), PE_ERR_INVALID_ARGUMENT, "not finite");
  t = good; t.shape[3] = 3; t.stride[2] = 5;
  table[50] = 0.5f;
  expect_error(pe_t5_add_bias(&t, table, 1, 32, 128, NULL, 0, NULL), PE_ERR_SHAPE, "q_len 4 <= k_len 3");
  assert_memory_equal(mem, keep, sizeof mem);
}

typedef struct simd_case {
  pe_dtype d;
  int64_t shape[4];
  int causal, bidir;
} simd_case;

/* The call under test on a copy of the case's scores. */
typedef struct t5_run {
  const tbuf *in;
  const float *table;
  const int64_t *qp;
  int32_t bidir;
  uint32_t flags;
} t5_run;

static void run_t5(void *ctx, pe_threadpool *pool, void *out) {
  const t5_run *r = ctx;
  pe_tensor t = copy_into(r->in, out);
  assert_int_equal(pe_t5_add_bias(&t, r->table, r->bidir, 32, 128, r->qp, r->flags, pool), PE_OK);
}

static void run_simd_case(const simd_case *c) {
  const int dense[3] = {0, 1, 2};
  tbuf in = make_tensor(c->d, c->shape, dense, 1, -1);
  fill_special(&in);
  int64_t nq = c->shape[0] * c->shape[2];
  int64_t *qp = malloc(sizeof(int64_t) * (size_t)nq);
  for (int64_t k = 0; k < nq; k++) qp[k] = (int64_t)(rng_next() % (uint64_t)(c->shape[3] + 3));
  float table[32 * 4];
  for (int e = 0; e < 32 * 4; e++) table[e] = rng_uniform(-30.0f, 30.0f);
  table[3] = 0x1p-140f; /* subnormal bias */
  table[5] = -0.0f;
  t5_run r = {&in, table, qp, c->bidir, c->causal ? PE_MASK_CAUSAL : 0};
  char what[96];
  snprintf(what, sizeof what, "pe_t5_add_bias dtype %d k_len %lld causal %d", c->d,
           (long long)c->shape[3], c->causal);
  identity_check(what, in.bytes, run_t5, &r);
  free(qp);
  free(in.mem);
}

static void all_identity_cases(void) {
  for (int d = 0; d < 3; d++)
    for (int64_t k = 1; k <= 70; k += (k < 20 ? 1 : 7))
      for (int causal = 0; causal < 2; causal++) {
        simd_case c = {(pe_dtype)d, {2, 4, 3, k}, causal, causal};
        run_simd_case(&c);
      }
}

IDENTITY_TESTS(all_identity_cases)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bucket_formula_table),
      cmocka_unit_test(test_bucket_hand_values),
      cmocka_unit_test(test_bucket_monotone),
      cmocka_unit_test(test_bucket_invalid),
      cmocka_unit_test(test_bias_dtypes_layouts),
      cmocka_unit_test(test_bias_long_rows),
      cmocka_unit_test(test_bias_smallest_max_distance),
      cmocka_unit_test(test_bias_errors_change_nothing),
      cmocka_unit_test(test_simd_matches_scalar),
      cmocka_unit_test(test_pool_matches_single_thread),
  };
  return cmocka_run_group_tests(tests, NULL, destroy_pool);
}
