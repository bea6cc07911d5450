/* test_rope_multi.c - pe_apply_rope_qk_multi: one call for a batch whose
 * sequences use different frequency sets.
 *
 * What is checked against what:
 * - Each batch row equals, bit for bit, pe_apply_rope_qk with that row's
 *   cache applied to that row alone (caches of different scaling types,
 *   attention factors, with and without tables; every dtype and style;
 *   PE_ROPE_INVERSE).
 * - A float64 reference written here: linear scaling (inv_freq / factor)
 *   and the default frequencies, with attention factors, per row.
 * - One cache with cache_index NULL equals pe_apply_rope_qk bit for bit.
 * - Every ISA and a pool agree with scalar bit for bit.
 * - Errors leave q and k unchanged and name the argument and value.
 */
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

#define TEST_RNG_SEED 0x3c6ef372fe94f82bull
#include "isa_compare.h"
#include "test_util.h"

/* Three frequency sets of one geometry: default, linear x4 with an attention
 * factor, dynamic NTK for a longer context; table or not as asked. */
static pe_rope_cache *make_cache(int kind, int32_t head_dim, int32_t rotary_dim, pe_rope_style style,
                                 int64_t max_positions) {
  pe_rope_params p = rope_params(head_dim, rotary_dim, style, 10000.0, max_positions);
  if (kind == 1) {
    p.scaling = PE_ROPE_SCALING_LINEAR;
    p.factor = 4.0;
    p.attention_factor = 0.8;
  } else if (kind == 2) {
    p.scaling = PE_ROPE_SCALING_DYNAMIC;
    p.factor = 2.0;
    p.original_max_positions = 256;
    p.seq_len = 1500;
  }
  return new_cache(&p);
}

static void fill(void *p, pe_dtype d, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float v = uniform();
    if (d == PE_F32) {
      ((float *)p)[i] = v;
    } else {
      uint32_t u;
      memcpy(&u, &v, 4);
      /* bf16: truncated bits; f16: a finite pattern of moderate magnitude */
      ((uint16_t *)p)[i] = d == PE_BF16 ? (uint16_t)(u >> 16) : (uint16_t)(0x3000 + (u >> 20));
    }
  }
}

static void test_multi_rows_equal_single_cache(void **state) {
  (void)state;
  const int64_t B = 5, T = 19, Hq = 4, Hk = 2;
  const pe_dtype dts[3] = {PE_F32, PE_F16, PE_BF16};
  for (int d = 0; d < 3; d++)
    for (int style = 0; style < 2; style++)
      for (int inv = 0; inv < 2; inv++) {
        const int32_t D = 96, rd = style ? 64 : 0;
        pe_rope_cache *caches[3] = {make_cache(0, D, rd, (pe_rope_style)style, 2048),
                                    make_cache(1, D, rd, (pe_rope_style)style, 0),
                                    make_cache(2, D, rd, (pe_rope_style)style, 2048)};
        const int32_t idx[5] = {2, 0, 1, 1, 0};
        size_t es = dts[d] == PE_F32 ? 4 : 2, nq = (size_t)(B * Hq * T * D), nk = (size_t)(B * Hk * T * D);
        uint8_t *q = malloc(nq * es), *k = malloc(nk * es), *q2 = malloc(nq * es), *k2 = malloc(nk * es);
        fill(q, dts[d], nq), fill(k, dts[d], nk);
        memcpy(q2, q, nq * es), memcpy(k2, k, nk * es);
        int64_t pos[5 * 19];
        for (int i = 0; i < 5 * 19; i++) pos[i] = (int64_t)(rnd() % 2048);
        pe_tensor tq = tensor_bhtd(q, dts[d], B, Hq, T, D), tk = tensor_bhtd(k, dts[d], B, Hk, T, D);
        uint32_t fl = inv ? PE_ROPE_INVERSE : 0u;
        assert_int_equal(pe_apply_rope_qk_multi((const pe_rope_cache *const *)caches, 3, idx, &tq,
                                                &tk, pos, fl, NULL),
                         PE_OK);
        for (int64_t b = 0; b < B; b++) { /* row b alone, with its cache */
          pe_tensor rq = tensor_bhtd(q2 + (size_t)(b * Hq * T * D) * es, dts[d], 1, Hq, T, D);
          pe_tensor rk = tensor_bhtd(k2 + (size_t)(b * Hk * T * D) * es, dts[d], 1, Hk, T, D);
          assert_int_equal(pe_apply_rope_qk(caches[idx[b]], &rq, &rk, pos + b * T, fl, NULL), PE_OK);
        }
        assert_memory_equal(q, q2, nq * es);
        assert_memory_equal(k, k2, nk * es);
        for (int i = 0; i < 3; i++) pe_rope_cache_destroy(caches[i]);
        free(q), free(k), free(q2), free(k2);
      }
}

static void test_multi_float64_reference(void **state) {
  (void)state;
  const int64_t B = 3, T = 11, H = 2;
  const int32_t D = 64, half = 32;
  pe_rope_cache *caches[2] = {make_cache(0, D, 0, PE_ROPE_NEOX, 0), make_cache(1, D, 0, PE_ROPE_NEOX, 512)};
  const int32_t idx[3] = {1, 0, 1};
  const double factor[2] = {1.0, 4.0}, attn[2] = {1.0, 0.8};
  size_t n = (size_t)(B * H * T * D);
  float *x = malloc(n * 4), *y = malloc(n * 4);
  fill(x, PE_F32, n);
  memcpy(y, x, n * 4);
  int64_t pos[33];
  for (int i = 0; i < 33; i++) pos[i] = (int64_t)(rnd() % 512);
  pe_tensor t = tensor_bhtd(y, PE_F32, B, H, T, D);
  assert_int_equal(pe_apply_rope_qk_multi((const pe_rope_cache *const *)caches, 2, idx, NULL, &t,
                                          pos, 0, NULL),
                   PE_OK);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t s = 0; s < T; s++) {
        int ci = idx[b];
        const float *in = x + ((b * H + h) * T + s) * D, *out = y + ((b * H + h) * T + s) * D;
        for (int32_t i = 0; i < half; i++) {
          double a = (double)pos[b * T + s] * pow(10000.0, -2.0 * i / D) / factor[ci];
          double c = cos(a) * attn[ci], sn = sin(a) * attn[ci];
          double xo = in[i] * c - in[i + half] * sn, yo = in[i + half] * c + in[i] * sn;
          double tol = 2.5e-7 * (fabs(in[i]) + fabs(in[i + half])) + 1e-30;
          assert_true(fabs(out[i] - xo) <= tol);
          assert_true(fabs(out[i + half] - yo) <= tol);
        }
      }
  free(x), free(y);
  pe_rope_cache_destroy(caches[0]);
  pe_rope_cache_destroy(caches[1]);
}

static void test_multi_one_cache_is_apply(void **state) {
  (void)state;
  const int64_t B = 2, T = 40, H = 3;
  const int32_t D = 128;
  pe_rope_cache *c = make_cache(0, D, 0, PE_ROPE_NEOX, 64);
  size_t n = (size_t)(B * H * T * D);
  uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
  fill(a, PE_BF16, n);
  memcpy(b, a, n * 2);
  pe_tensor ta = tensor_bhtd(a, PE_BF16, B, H, T, D), tb = tensor_bhtd(b, PE_BF16, B, H, T, D);
  const pe_rope_cache *one[1] = {c};
  assert_int_equal(pe_apply_rope_qk_multi(one, 1, NULL, &ta, NULL, NULL, 0, NULL), PE_OK);
  assert_int_equal(pe_apply_rope_qk(c, &tb, NULL, NULL, 0, NULL), PE_OK);
  assert_memory_equal(a, b, n * 2);
  free(a), free(b);
  pe_rope_cache_destroy(c);
}

/* ---- ISAs and pools ---- */

/* Three caches over six batch rows, f32, rotated under the path in use. */
enum { ID_B = 6, ID_T = 45, ID_H = 3, ID_D = 50, ID_N = ID_B * ID_T * ID_H * ID_D };

static void run_multi(void *ctx, pe_threadpool *pool, void *out) {
  (void)ctx;
  rng = 7;
  pe_rope_cache *caches[3] = {make_cache(0, ID_D, 0, PE_ROPE_GPTJ, 0),
                              make_cache(1, ID_D, 0, PE_ROPE_GPTJ, 300),
                              make_cache(2, ID_D, 0, PE_ROPE_GPTJ, 0)};
  const int32_t idx[ID_B] = {0, 1, 2, 2, 1, 0};
  fill(out, PE_F32, ID_N);
  int64_t pos[ID_B * ID_T];
  for (int i = 0; i < ID_B * ID_T; i++) pos[i] = (int64_t)(rnd() % 300);
  pe_tensor t = tensor_bhtd(out, PE_F32, ID_B, ID_H, ID_T, ID_D);
  assert_int_equal(pe_apply_rope_qk_multi((const pe_rope_cache *const *)caches, 3, idx, &t, NULL,
                                          pos, 0, pool),
                   PE_OK);
  for (int i = 0; i < 3; i++) pe_rope_cache_destroy(caches[i]);
}

static void test_multi_bit_identical_across_isas(void **state) {
  (void)state;
  if (!pe_test_any_simd_path()) skip(); /* only scalar here: nothing to compare */
  pe_isa_compare("three caches, f32", ID_N * 4, run_multi, NULL);
}

static void test_multi_pool_sizes(void **state) {
  (void)state;
  pe_threadpool *pool = NULL;
  assert_int_equal(pe_threadpool_create(4, &pool), PE_OK);
  pe_pool_compare("three caches, f32", ID_N * 4, run_multi, NULL, pool);
  pe_threadpool_destroy(pool);
}

/* ---- errors ---- */

static void test_multi_errors_change_nothing(void **state) {
  (void)state;
  const int64_t B = 3, T = 4, H = 2;
  const int32_t D = 32;
  pe_rope_cache *big = make_cache(0, D, 0, PE_ROPE_NEOX, 1000);
  pe_rope_cache *small = make_cache(1, D, 0, PE_ROPE_NEOX, 10);
  pe_rope_cache *other_dim = make_cache(0, D, 16, PE_ROPE_NEOX, 10);
  pe_rope_cache *other_style = make_cache(0, D, 0, PE_ROPE_GPTJ, 10);
  size_t n = (size_t)(B * H * T * D);
  float *x = malloc(n * 4), *x0 = malloc(n * 4);
  fill(x, PE_F32, n);
  memcpy(x0, x, n * 4);
  pe_tensor t = tensor_bhtd(x, PE_F32, B, H, T, D);
  int64_t pos[12] = {0, 1, 2, 3, 500, 501, 502, 503, 4, 5, 6, 7};
  const pe_rope_cache *two[2] = {big, small};
  const pe_rope_cache *with_null[2] = {big, NULL};
  const pe_rope_cache *mixed_dim[2] = {big, other_dim};
  const pe_rope_cache *mixed_style[2] = {big, other_style};
  const int32_t idx_ok[3] = {1, 0, 1}, idx_bad[3] = {0, 1, 2}, idx_small_row1[3] = {0, 1, 0};
#define EXPECT(call, status, needle)                                                        \
  do {                                                                                      \
    pe_status st_ = (call);                                                                 \
    if (st_ != (status) || !strstr(pe_last_error(), needle))                                \
      print_error("got %d \"%s\", wanted %d \"%s\"\n", st_, pe_last_error(), status, needle); \
    assert_int_equal(st_, status);                                                          \
    assert_non_null(strstr(pe_last_error(), needle));                                       \
    assert_memory_equal(x, x0, n * 4);                                                      \
  } while (0)
  EXPECT(pe_apply_rope_qk_multi(NULL, 2, idx_ok, &t, NULL, pos, 0, NULL), PE_ERR_NULL_POINTER,
         "caches is NULL");
  EXPECT(pe_apply_rope_qk_multi(two, 0, idx_ok, &t, NULL, pos, 0, NULL), PE_ERR_INVALID_ARGUMENT,
         "n_caches 0 must be >= 1");
  EXPECT(pe_apply_rope_qk_multi(with_null, 2, idx_ok, &t, NULL, pos, 0, NULL), PE_ERR_NULL_POINTER,
         "caches[1] is NULL");
  EXPECT(pe_apply_rope_qk_multi(mixed_dim, 2, idx_ok, &t, NULL, pos, 0, NULL), PE_ERR_SHAPE,
         "caches[1] has head_dim 32 rotary_dim 16");
  EXPECT(pe_apply_rope_qk_multi(mixed_style, 2, idx_ok, &t, NULL, pos, 0, NULL),
         PE_ERR_INVALID_ARGUMENT, "caches[1] has style 1");
  EXPECT(pe_apply_rope_qk_multi(two, 2, NULL, &t, NULL, pos, 0, NULL), PE_ERR_NULL_POINTER,
         "cache_index is NULL with n_caches 2");
  EXPECT(pe_apply_rope_qk_multi(two, 2, idx_bad, &t, NULL, pos, 0, NULL), PE_ERR_INVALID_ARGUMENT,
         "cache_index 2 at [batch 2] is outside [0, n_caches 2)");
  /* row 1 (positions 500..) uses the 10-row table */
  EXPECT(pe_apply_rope_qk_multi(two, 2, idx_small_row1, &t, NULL, pos, 0, NULL),
         PE_ERR_POSITION_OUT_OF_RANGE, "position 500 at [batch 1, token 0] >= cache 1 max_positions 10");
  EXPECT(pe_apply_rope_qk_multi(two, 2, idx_ok, &t, NULL, pos, 2u, NULL), PE_ERR_INVALID_ARGUMENT,
         "unknown bits 0x2");
  EXPECT(pe_apply_rope_qk_multi(two, 2, idx_ok, NULL, NULL, pos, 0, NULL), PE_ERR_NULL_POINTER,
         "q and k are both NULL");
  pos[4] = 5, pos[5] = 6, pos[6] = 7, pos[7] = 8; /* now every row fits */
  assert_int_equal(pe_apply_rope_qk_multi(two, 2, idx_small_row1, &t, NULL, pos, 0, NULL), PE_OK);
#undef EXPECT
  free(x), free(x0);
  pe_rope_cache_destroy(big);
  pe_rope_cache_destroy(small);
  pe_rope_cache_destroy(other_dim);
  pe_rope_cache_destroy(other_style);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_multi_rows_equal_single_cache),
      cmocka_unit_test(test_multi_float64_reference),
      cmocka_unit_test(test_multi_one_cache_is_apply),
      cmocka_unit_test(test_multi_bit_identical_across_isas),
      cmocka_unit_test(test_multi_pool_sizes),
      cmocka_unit_test(test_multi_errors_change_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
