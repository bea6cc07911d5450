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

#include "enc_test_util.h"
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
  expect_error(pe_learned_add(&x, &t, NULL, NULL), PE_ERR_SHAPE, "share memory");
  assert_memory_equal(xm, keep, sizeof xm);
}

/* The call under test on a copy of the case's x. */
typedef struct learned_run {
  const tbuf *in;
  const pe_tensor *table;
  const int64_t *pos;
} learned_run;

static void run_learned(void *ctx, pe_threadpool *pool, void *out) {
  const learned_run *r = ctx;
  pe_tensor t = copy_into(r->in, out);
  assert_int_equal(pe_learned_add(&t, r->table, r->pos, pool), PE_OK);
}

static void run_simd_case(pe_dtype xd, pe_dtype td, int64_t D) {
  const int dense[3] = {0, 1, 2};
  const int64_t s[4] = {2, 1, 3, D};
  tbuf in = make_tensor(xd, s, dense, 1, -1);
  fill_special(&in);
  tbuf table = make_table(td, 8, D, 3, 50.0f);
  /* Inf and a subnormal in the table too, but no NaN: when x and the table
   * entry are both NaN, which payload survives the add is the compiler's
   * and hardware's choice (documented as unspecified). */
  set_elem(&table.t, offset_of(&table.t, 0, 0, 7, 0), INFINITY);
  set_elem(&table.t, offset_of(&table.t, 0, 0, 7, D - 1), 0x1p-135f);
  int64_t pos[6] = {7, 1, 2, 0, 7, 5};
  learned_run r = {&in, &table.t, pos};
  char what[96];
  snprintf(what, sizeof what, "pe_learned_add x %d table %d D %lld", xd, td, (long long)D);
  identity_check(what, in.bytes, run_learned, &r);
  free(in.mem);
  free(table.mem);
}

/* x [1, 1, T, D] of dtype d holding every 16-bit pattern (element e is e),
 * plus the table. */
enum { HP_T = 64, HP_D = 1024 };
typedef struct half_run {
  pe_dtype d;
  const pe_tensor *table;
} half_run;

static void run_half_patterns(void *ctx, pe_threadpool *pool, void *out) {
  const half_run *r = ctx;
  uint16_t *x = out;
  for (int e = 0; e < HP_T * HP_D; e++) x[e] = (uint16_t)e;
  pe_tensor xt = {x, r->d, {1, 1, HP_T, HP_D}, {HP_T * HP_D, HP_T * HP_D, HP_D, 1}};
  assert_int_equal(pe_learned_add(&xt, r->table, NULL, pool), PE_OK);
}

/* Every f16 and every bf16 bit pattern as x, plus table values with random
 * exponents (small ones land the sums on half-type rounding boundaries,
 * subnormals and overflow): each ISA's conversions against scalar's. */
static void test_simd_every_half_pattern(void **state) {
  (void)state;
  if (!pe_test_any_simd_path()) skip(); /* only scalar here: nothing to compare */
  float *table = malloc(sizeof(float) * HP_T * HP_D);
  assert_non_null(table);
  for (int e = 0; e < HP_T * HP_D; e++) {
    uint32_t u = (uint32_t)rng_next();
    int exp = 127 - 30 + (int)((u >> 23) % 48); /* 2^-30 .. 2^17 */
    uint32_t bits = (u & 0x807fffffu) | ((uint32_t)exp << 23);
    memcpy(&table[e], &bits, 4);
    if (e % 7 == 0) table[e] = 0.0f;
  }
  pe_tensor tt = {table, PE_F32, {1, 1, HP_T, HP_D}, {HP_T * HP_D, HP_T * HP_D, HP_D, 1}};
  for (int d = 1; d <= 2; d++) {
    half_run r = {(pe_dtype)d, &tt};
    pe_isa_compare(d == 1 ? "f16 x holding bits e at element e (byte 2e), plus table[e]"
                          : "bf16 x holding bits e at element e (byte 2e), plus table[e]",
                   2 * HP_T * HP_D, run_half_patterns, &r);
  }
  free(table);
}

static void all_identity_cases(void) {
  for (int xd = 0; xd < 3; xd++)
    for (int td = 0; td < 3; td++)
      for (int64_t D = 1; D <= 80; D += (D < 40 ? 1 : 9)) run_simd_case((pe_dtype)xd, (pe_dtype)td, D);
}

IDENTITY_TESTS(all_identity_cases)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_all_dtype_mixes_and_layouts),
      cmocka_unit_test(test_exact_f32_sum),
      cmocka_unit_test(test_errors_change_nothing),
      cmocka_unit_test(test_simd_matches_scalar),
      cmocka_unit_test(test_simd_every_half_pattern),
      cmocka_unit_test(test_pool_matches_single_thread),
  };
  return cmocka_run_group_tests(tests, NULL, destroy_pool);
}
