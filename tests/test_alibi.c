/* test_alibi.c - ALiBi slopes and bias against Press et al.'s reference
 * construction and BLOOM's published head interleaving, a float64 reference
 * of the bias, the BLOOM `slope*j` relation, error paths, dtypes, layouts and
 * SIMD-vs-scalar bit identity. */
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
/* ---- slopes ---- */

/* Press et al.'s reference construction (the ALiBi repository's get_slopes),
 * in double: a geometric sequence start*ratio^i with start = ratio =
 * 2^(-8/n) for powers of two, otherwise the closest power of two's slopes
 * followed by every other slope of twice that many heads. */
static void press_slopes(int n, double *out) {
  double l2 = log2((double)n);
  if (l2 == floor(l2)) {
    double start = pow(2.0, -pow(2.0, -(l2 - 3.0)));
    for (int i = 0; i < n; i++) out[i] = start * pow(start, (double)i);
    return;
  }
  int c = 1 << (int)floor(l2);
  double tmp[512];
  press_slopes(c, out);
  press_slopes(2 * c, tmp);
  for (int i = 0; i < n - c; i++) out[c + i] = tmp[2 * i];
}

static void test_slopes_press_formula(void **state) {
  (void)state;
  float got[129];
  double ref[128];
  for (int n = 1; n <= 128; n++) {
    got[n] = -7.0f; /* out holds n floats: the one after is the caller's */
    assert_int_equal(pe_alibi_slopes(n, 8.0, got), PE_OK);
    assert_true(got[n] == -7.0f);
    press_slopes(n, ref);
    for (int h = 0; h < n; h++) {
      float r = (float)ref[h];
      /* Both are the same real number rounded through double; allow the
       * float32 neighbour in case the double products land on a tie. */
      if (got[h] != r) assert_true(fabs((double)got[h] - ref[h]) <= fabs(ref[h]) * 0x1p-23);
      assert_true(got[h] > 0.0f && got[h] < 1.0f);
    }
  }
  /* n = 1 is 2^-8; n = 8 is exactly 1/2, 1/4, ..., 1/256. */
  assert_int_equal(pe_alibi_slopes(1, 8.0, got), PE_OK);
  assert_true(got[0] == 0x1p-8f);
  assert_int_equal(pe_alibi_slopes(8, 8.0, got), PE_OK);
  for (int h = 0; h < 8; h++) assert_true(got[h] == ldexpf(1.0f, -(h + 1)));
}

/* BLOOM's head order for real non-power-of-two models, written out as the
 * exponents e of slope = 2^-e: heads 0..c-1 step 8/c, then the odd
 * multiples of 4/c (BLOOM-560m has 16 heads, BLOOM-1b7 16, BLOOM-3b 32,
 * BLOOM-7b1 32, BLOOM 176B 112; 12, 24, 40, 96 are MPT/Falcon-RW-style and
 * the examples of the ALiBi paper's code). */
static void test_slopes_bloom_interleaving(void **state) {
  (void)state;
  static const double e12[12] = {1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5};
  static const double e24[24] = {0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6,
                                 6.5, 7, 7.5, 8, 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75};
  double e40[40], e96[96];
  for (int k = 0; k < 32; k++) e40[k] = 0.25 * (k + 1);
  for (int k = 0; k < 8; k++) e40[32 + k] = 0.125 * (2 * k + 1);
  for (int k = 0; k < 64; k++) e96[k] = 0.125 * (k + 1);
  for (int k = 0; k < 32; k++) e96[64 + k] = 0.0625 * (2 * k + 1);
  const struct {
    int n;
    const double *e;
  } cases[] = {{12, e12}, {24, e24}, {40, e40}, {96, e96}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    float got[96];
    assert_int_equal(pe_alibi_slopes(cases[c].n, 8.0, got), PE_OK);
    for (int h = 0; h < cases[c].n; h++) {
      double want = exp2(-cases[c].e[h]);
      assert_true(fabs((double)got[h] - want) <= want * 0x1p-24);
    }
  }
  /* MPT orders the 2^ceil(log2 n) slopes as [1::2] ++ [::2], truncated:
   * the same sequence. */
  float got[12];
  assert_int_equal(pe_alibi_slopes(12, 8.0, got), PE_OK);
  double mpt[16], ordered[16];
  for (int k = 1; k <= 16; k++) mpt[k - 1] = 1.0 / pow(2.0, k * 8.0 / 16.0);
  int o = 0;
  for (int k = 1; k < 16; k += 2) ordered[o++] = mpt[k];
  for (int k = 0; k < 16; k += 2) ordered[o++] = mpt[k];
  for (int h = 0; h < 12; h++) assert_true(fabs((double)got[h] - ordered[h]) <= ordered[h] * 0x1p-24);
  /* max_bias scales the exponents: 4 heads, max_bias 16 -> 2^-4, 2^-8, ... */
  float g4[4];
  assert_int_equal(pe_alibi_slopes(4, 16.0, g4), PE_OK);
  for (int h = 0; h < 4; h++) assert_true(g4[h] == ldexpf(1.0f, -4 * (h + 1)));
}

static void test_slopes_errors(void **state) {
  (void)state;
  float out[4] = {1, 2, 3, 4}, keep[4];
  memcpy(keep, out, sizeof out);
  expect_error(pe_alibi_slopes(4, 8.0, NULL), PE_ERR_NULL_POINTER, "out");
  expect_error(pe_alibi_slopes(0, 8.0, out), PE_ERR_INVALID_ARGUMENT, "n_heads 0");
  expect_error(pe_alibi_slopes(65537, 8.0, out), PE_ERR_INVALID_ARGUMENT, "n_heads 65537");
  expect_error(pe_alibi_slopes(4, 0.0, out), PE_ERR_INVALID_ARGUMENT, "max_bias 0");
  expect_error(pe_alibi_slopes(4, -8.0, out), PE_ERR_INVALID_ARGUMENT, "max_bias -8");
  expect_error(pe_alibi_slopes(4, NAN, out), PE_ERR_INVALID_ARGUMENT, "max_bias");
  expect_error(pe_alibi_slopes(4, INFINITY, out), PE_ERR_INVALID_ARGUMENT, "max_bias");
  assert_memory_equal(out, keep, sizeof out);
}

/* ---- the bias against float64 ---- */

/* ALiBi's bias: -slope[h] * |qpos - j|. */
static double alibi_bias(const void *slopes, int64_t h, int64_t q, int64_t j) {
  return -(double)((const float *)slopes)[h] * fabs((double)(q - j));
}

static void run_bias_case(pe_dtype d, const int64_t s[4], int variant, int use_qp, int causal,
                          int own_slopes) {
  tbuf before = make_variant_tensor(d, s, variant);
  fill_uniform(&before, -4.0f, 4.0f);
  tbuf after = clone(&before);
  int64_t B = s[0], H = s[1], Q = s[2], K = s[3];
  int64_t *qp = use_qp ? random_positions(B * Q, K + 5) : NULL;
  float slopes[64];
  if (own_slopes)
    for (int h = 0; h < H; h++) slopes[h] = rng_uniform(0.001f, 1.0f);
  else
    assert_int_equal(pe_alibi_slopes((int32_t)H, 8.0, slopes), PE_OK);
  assert_int_equal(pe_alibi_add_bias(&after.t, own_slopes ? slopes : NULL, qp,
                                     causal ? PE_MASK_CAUSAL : 0, NULL),
                   PE_OK);
  check_score_bias(&before, &after, qp, causal, alibi_bias, slopes);
  free(qp);
  free(before.mem);
  free(after.mem);
}

static void test_bias_dtypes_layouts(void **state) {
  (void)state;
  const int64_t shapes[][4] = {{2, 3, 5, 37}, {1, 4, 1, 100}, {3, 2, 7, 7}, {1, 2, 1, 1},
                               {2, 2, 9, 40} /* 8+ rows a head: the shared line */};
  for (int d = 0; d < 3; d++)
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
      for (int variant = 0; variant < 6; variant++)
        run_bias_case((pe_dtype)d, shapes[si], variant, variant & 1, variant >= 2, variant == 3);
}

/* Decode with a KV cache: 1 query, 4096 keys, the query is the last
 * position, so key j gets -slope * (4095 - j); spot values by hand. */
static void test_decode_default_position(void **state) {
  (void)state;
  enum { H = 4, K = 4096 };
  float *s = calloc(H * K, sizeof(float));
  pe_tensor t = {s, PE_F32, {1, H, 1, K}, {H * K, K, K, 1}};
  assert_int_equal(pe_alibi_add_bias(&t, NULL, NULL, 0, NULL), PE_OK);
  /* 4 heads: slopes 1/4, 1/16, 1/64, 1/256 (2^(-8k/4)). */
  assert_true(s[0 * K + 4095] == 0.0f);
  assert_true(s[0 * K + 4094] == -0.25f);
  assert_true(s[0 * K + 0] == -1023.75f);
  assert_true(s[1 * K + 95] == -250.0f);  /* -(4000 / 16) */
  assert_true(s[3 * K + 0] == -4095.0f / 256.0f);
  /* Query positions given explicitly: batch row at position 10. */
  memset(s, 0, sizeof(float) * H * K);
  int64_t qp = 10;
  assert_int_equal(pe_alibi_add_bias(&t, NULL, &qp, PE_MASK_CAUSAL, NULL), PE_OK);
  assert_true(s[10] == 0.0f && s[0] == -2.5f && s[9] == -0.25f);
  for (int j = 11; j < K; j++) assert_true(isinf(s[j]) && s[j] < 0);
  free(s);
}

/* Softmax of one row in double; masked (-inf) entries get 0. */
static void softmax(const double *x, int n, double *p) {
  double m = -INFINITY, z = 0;
  for (int j = 0; j < n; j++) if (x[j] > m) m = x[j];
  for (int j = 0; j < n; j++) z += (p[j] = isinf(x[j]) ? 0.0 : exp(x[j] - m));
  for (int j = 0; j < n; j++) p[j] /= z;
}

/* BLOOM adds +slope*j (for every query) instead of -slope*|i-j|. Under a
 * causal mask the two differ by slope*i per row, so the probabilities are
 * equal; without the mask the keys after the query are treated differently. */
static void test_bloom_relation(void **state) {
  (void)state;
  enum { H = 12, Q = 9, K = 9 };
  float base[H * Q * K], ours[H * Q * K], slopes[H];
  for (int e = 0; e < H * Q * K; e++) base[e] = rng_uniform(-2.0f, 2.0f);
  assert_int_equal(pe_alibi_slopes(H, 8.0, slopes), PE_OK);
  pe_tensor t = {ours, PE_F32, {1, H, Q, K}, {H * Q * K, Q * K, K, 1}};
  for (int causal = 0; causal < 2; causal++) {
    memcpy(ours, base, sizeof base);
    assert_int_equal(pe_alibi_add_bias(&t, slopes, NULL, causal ? PE_MASK_CAUSAL : 0, NULL), PE_OK);
    double max_diff = 0;
    for (int h = 0; h < H; h++)
      for (int i = 0; i < Q; i++) {
        double a[K], bl[K], pa[K], pb[K];
        for (int j = 0; j < K; j++) {
          a[j] = ours[(h * Q + i) * K + j];
          bl[j] = (causal && j > i) ? -INFINITY : base[(h * Q + i) * K + j] + (double)slopes[h] * j;
        }
        softmax(a, K, pa);
        softmax(bl, K, pb);
        for (int j = 0; j < K; j++) max_diff = fmax(max_diff, fabs(pa[j] - pb[j]));
      }
    if (causal)
      assert_true(max_diff < 1e-6);
    else
      assert_true(max_diff > 1e-3);
  }
}

/* ---- errors leave memory unchanged ---- */

static void test_bias_errors_change_nothing(void **state) {
  (void)state;
  enum { N = 2 * 3 * 4 * 5 };
  float mem[N], keep[N];
  for (int e = 0; e < N; e++) mem[e] = (float)e;
  memcpy(keep, mem, sizeof mem);
  const pe_tensor good = {mem, PE_F32, {2, 3, 4, 5}, {60, 20, 5, 1}};
  pe_tensor t;
  float slopes[3] = {0.5f, 0.25f, 0.125f};
  int64_t qp[8] = {0, 1, 2, 3, 4, 5, 6, 7};

  expect_error(pe_alibi_add_bias(NULL, NULL, NULL, 0, NULL), PE_ERR_NULL_POINTER, "scores");
  t = good; t.data = NULL;
  expect_error(pe_alibi_add_bias(&t, NULL, NULL, 0, NULL), PE_ERR_NULL_POINTER, "scores->data");
  t = good; t.dtype = (pe_dtype)7;
  expect_error(pe_alibi_add_bias(&t, NULL, NULL, 0, NULL), PE_ERR_DTYPE, "dtype 7");
  t = good; t.shape[3] = 0; /* k_len 0 stays an error */
  expect_error(pe_alibi_add_bias(&t, NULL, NULL, 0, NULL), PE_ERR_SHAPE, "shape[3] = 0");
  t = good; t.stride[3] = 2;
  expect_error(pe_alibi_add_bias(&t, NULL, NULL, 0, NULL), PE_ERR_SHAPE, "stride[3]");
  t = good; t.stride[1] = 4; /* heads overlap rows */
  expect_error(pe_alibi_add_bias(&t, NULL, NULL, 0, NULL), PE_ERR_SHAPE, "alias");
  t = good;
  expect_error(pe_alibi_add_bias(&t, NULL, NULL, 2, NULL), PE_ERR_INVALID_ARGUMENT, "flags");
  t = good; t.shape[3] = 3; t.stride[2] = 5; /* q_len 4 > k_len 3 with default positions */
  expect_error(pe_alibi_add_bias(&t, NULL, NULL, 0, NULL), PE_ERR_SHAPE, "q_len 4 <= k_len 3");
  t = good;
  qp[5] = -1;
  expect_error(pe_alibi_add_bias(&t, NULL, qp, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE, "-1");
  qp[5] = INT64_C(1) << 53;
  expect_error(pe_alibi_add_bias(&t, NULL, qp, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE, "2^53");
  qp[5] = 5;
  slopes[2] = NAN;
  expect_error(pe_alibi_add_bias(&t, slopes, qp, 0, NULL), PE_ERR_INVALID_ARGUMENT, "slopes[2]");
  slopes[2] = INFINITY;
  expect_error(pe_alibi_add_bias(&t, slopes, qp, 0, NULL), PE_ERR_INVALID_ARGUMENT, "slopes[2]");
  assert_memory_equal(mem, keep, sizeof mem);
  t = good; t.shape[2] = 0; /* no queries: an empty call, nothing touched */
  assert_int_equal(pe_alibi_add_bias(&t, NULL, NULL, 0, NULL), PE_OK);
  assert_memory_equal(mem, keep, sizeof mem);
}

/* ---- bit identity: pool sizes and ISA paths ---- */

typedef struct simd_case {
  pe_dtype d;
  int64_t shape[4];
  int64_t qbase; /* query positions from here (large: exercises wide distances) */
  int causal;
} simd_case;

/* The call under test on a copy of the case's scores. */
typedef struct alibi_run {
  const tbuf *in;
  const float *slopes;
  const int64_t *qp;
  uint32_t flags;
} alibi_run;

static void run_alibi(void *ctx, pe_threadpool *pool, void *out) {
  const alibi_run *r = ctx;
  pe_tensor t = copy_into(r->in, out);
  assert_int_equal(pe_alibi_add_bias(&t, r->slopes, r->qp, r->flags, pool), PE_OK);
}

static void run_simd_case(const simd_case *c) {
  const int dense[3] = {0, 1, 2};
  tbuf in = make_tensor(c->d, c->shape, dense, 1, -1);
  fill_special(&in);
  int64_t nq = c->shape[0] * c->shape[2];
  int64_t *qp = malloc(sizeof(int64_t) * (size_t)nq);
  for (int64_t k = 0; k < nq; k++) qp[k] = c->qbase + (int64_t)(rng_next() % (uint64_t)(c->shape[3] + 3));
  float slopes[8];
  for (int h = 0; h < c->shape[1]; h++) slopes[h] = rng_uniform(0.0f, 3.0f);
  slopes[0] = 0x1p-130f; /* a subnormal slope */
  alibi_run r = {&in, slopes, qp, c->causal ? PE_MASK_CAUSAL : 0};
  char what[128];
  snprintf(what, sizeof what, "pe_alibi_add_bias dtype %d k_len %lld qbase %lld causal %d", c->d,
           (long long)c->shape[3], (long long)c->qbase, c->causal);
  identity_check(what, in.bytes, run_alibi, &r);
  free(qp);
  free(in.mem);
}

static void all_identity_cases(void) {
  for (int d = 0; d < 3; d++)
    for (int64_t k = 1; k <= 70; k += (k < 20 ? 1 : 7))
      for (int causal = 0; causal < 2; causal++) {
        simd_case c = {(pe_dtype)d, {2, 3, 3, k}, 0, causal};
        run_simd_case(&c);
        c.qbase = (INT64_C(1) << 24) - 5; /* distances near float's exact-integer limit */
        run_simd_case(&c);
        c.qbase = (INT64_C(1) << 31) - 20; /* past int32 */
        run_simd_case(&c);
        c.qbase = (INT64_C(1) << 53) - 200;
        run_simd_case(&c);
      }
}

IDENTITY_TESTS(all_identity_cases)

static void line_matches_rows(void *ctx, const char *path) {
  (void)ctx;
  static const int64_t ks[] = {1, 7, 37, 300, 2048, 2049};
  static const int64_t qbases[] = {-1, 0, 2030, 2048};
  const int dense[3] = {0, 1, 2};
  for (int d = 0; d < 3; d++)
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
      for (size_t qi = 0; qi < sizeof qbases / sizeof qbases[0]; qi++)
        for (int causal = 0; causal < 2; causal++) {
          const int64_t K = ks[ki], Q = ki % 2 ? 8 : 11, H = 2;
          const int64_t s[4] = {2, H, Q, K};
          if (qbases[qi] < 0 && Q > K) continue; /* default positions need q_len <= k_len */
          tbuf all = make_tensor((pe_dtype)d, s, dense, 3, -1);
          fill_special(&all);
          tbuf one = clone(&all);
          int64_t qp[2 * 11];
          for (int64_t k = 0; k < 2 * Q; k++)
            qp[k] = qbases[qi] < 0 ? K - Q + k % Q
                                   : qbases[qi] + (int64_t)(rng_next() % (uint64_t)(K + 20));
          float slopes[2] = {rng_uniform(0.0f, 3.0f), 0x1p-130f}; /* a subnormal slope */
          uint32_t fl = causal ? PE_MASK_CAUSAL : 0;
          assert_int_equal(
              pe_alibi_add_bias(&all.t, slopes, qbases[qi] < 0 ? NULL : qp, fl, NULL), PE_OK);
          for (int64_t b = 0; b < 2; b++)
            for (int64_t i = 0; i < Q; i++) {
              pe_tensor r = one.t;
              r.data = (char *)one.t.data + offset_of(&one.t, b, 0, i, 0) * (int64_t)esize(r.dtype);
              r.shape[0] = 1;
              r.shape[2] = 1;
              assert_int_equal(pe_alibi_add_bias(&r, slopes, &qp[b * Q + i], fl, NULL), PE_OK);
            }
          if (memcmp(all.mem, one.mem, all.bytes))
            fail_msg("%s dtype %d k_len %lld q_len %lld qbase %lld causal %d: the rows of one "
                     "call differ from the rows alone",
                     path, d, (long long)K, (long long)Q, (long long)qbases[qi], causal);
          free(all.mem);
          free(one.mem);
        }
}

/* A head's rows in one call share a line of biases (alibi.c, from 8 rows
 * with keys and queries below 2048); each row alone takes the row kernel.
 * Both must give the same bits: every query of a call compared with the
 * same query as a one-row call, on every path, over rows with NaN
 * (quiet/signaling), Inf, subnormals and +-0, causal and not, queries
 * below, across and past 2048, and k_len up to and past 2048. */
static void test_line_matches_rows(void **state) {
  (void)state;
  pe_on_every_path(line_matches_rows, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slopes_press_formula),
      cmocka_unit_test(test_slopes_bloom_interleaving),
      cmocka_unit_test(test_slopes_errors),
      cmocka_unit_test(test_bias_dtypes_layouts),
      cmocka_unit_test(test_decode_default_position),
      cmocka_unit_test(test_bloom_relation),
      cmocka_unit_test(test_bias_errors_change_nothing),
      cmocka_unit_test(test_simd_matches_scalar),
      cmocka_unit_test(test_line_matches_rows),
      cmocka_unit_test(test_pool_matches_single_thread),
  };
  return cmocka_run_group_tests(tests, NULL, destroy_pool);
}
