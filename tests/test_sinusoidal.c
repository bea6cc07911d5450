/* test_sinusoidal.c - the sinusoidal table of Vaswani et al. (interleaved,
 * DistilBERT) and of fairseq/tensor2tensor ([sin | cos], half-1 denominator,
 * zero column for odd d_model): values at chosen (pos, column) computed by
 * hand with 40-digit arithmetic, whole tables against float64, the "stripes
 * widen with the dimension index" property, in-place add over dtypes and
 * layouts, error paths and SIMD-vs-scalar bit identity. */
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
/* ---- float64 references ---- */

/* Interleaved (the paper, DistilBERT's create_sinusoidal_embeddings):
 * PE[p, j] = sin(p / base^(2*floor(j/2)/d)) for even j, cos for odd j. */
static double ref_interleaved(int64_t p, int j, int d, double base) {
  double a = (double)p / pow(base, 2.0 * (j / 2) / d);
  return j % 2 == 0 ? sin(a) : cos(a);
}
/* Concatenated (fairseq get_embedding): h = d/2, w_k = exp(-k ln(base)/(h-1)),
 * row = [sin(p w) | cos(p w)], plus a zero column when d is odd. */
static double ref_concat(int64_t p, int col, int d, double base) {
  int h = d / 2;
  if (col >= 2 * h) return 0.0;
  int k = col < h ? col : col - h;
  double a = (double)p * exp(-(double)k * log(base) / (h - 1));
  return col < h ? sin(a) : cos(a);
}
static double ref_pe(int64_t p, int col, int d, double base, int concat) {
  return concat ? ref_concat(p, col, d, base) : ref_interleaved(p, col, d, base);
}

/* Within one float32 ulp of the exact value v. */
static void assert_close_f32(float got, double v, const char *what) {
  double ulp = fabs(v) < 0x1p-126 ? 0x1p-149 : ldexp(1.0, ilogb(v) - 23);
  if (!(fabs((double)got - v) <= ulp)) fail_msg("%s: got %.9g, want %.17g", what, (double)got, v);
}

/* Values computed with mpmath at 40 significant digits from the definitions
 * above (e.g. interleaved d=512, pos 100, column 10: sin(100 / 10000^(10/512));
 * concat d=512, pos 1000, column 255: sin(1000 * exp(-255 ln(10000)/255)) =
 * sin(0.1)), printed to 17 digits. */
static void test_hand_values(void **state) {
  (void)state;
  static const struct {
    int concat, d;
    int64_t pos;
    int col;
    double v;
  } cases[] = {
      {0, 512, 1, 0, 0.84147098480789651},          /* sin(1) */
      {0, 512, 1, 1, 0.54030230586813972},          /* cos(1) */
      {0, 512, 100, 10, 0.95992849411898141},
      {0, 512, 100, 11, -0.28024504666178253},
      {0, 512, 5000, 511, 0.86865446494699424},
      {0, 512, 123456, 64, 0.34930078940212976},
      {0, 5, 3, 4, 0.0018928709030918881},          /* odd d: last column is a sin */
      {0, 5, 3, 3, 0.99716203530723704},
      {0, 768, 1000000, 2, -0.08352525355836032},   /* a float32 angle is off here */
      {1, 512, 7, 3, -0.0020345597759861027},
      {1, 512, 7, 259, 0.9999979302811171},
      {1, 512, 1000, 255, 0.099833416646828152},    /* last frequency exactly 1e-4 */
      {1, 512, 1000, 511, 0.99500416527802577},
      {1, 9, 2, 1, 0.092698500778727227},
      {1, 9, 2, 5, 0.99569422412373986},
      {1, 9, 2, 8, 0.0},                            /* zero column of odd d */
      {1, 1024, 65535, 100, -0.33847862679892354},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int d = cases[c].d;
    uint32_t fl = cases[c].concat ? PE_SINUSOIDAL_CONCAT : 0;
    char what[96];
    snprintf(what, sizeof what, "%s d %d pos %ld col %d", cases[c].concat ? "concat" : "interleaved",
             d, (long)cases[c].pos, cases[c].col);
    /* pe_sinusoidal_add on a zero row: 0 + v is v exactly */
    float *x = calloc((size_t)d, sizeof(float));
    pe_tensor xt = {x, PE_F32, {1, 1, 1, d}, {d, d, d, 1}};
    int64_t pos = cases[c].pos;
    assert_int_equal(pe_sinusoidal_add(&xt, &pos, 10000.0, fl, NULL), PE_OK);
    assert_close_f32(x[cases[c].col], cases[c].v, what);
    /* the table has the same value (small positions: the table is n x d) */
    if (pos < 10000) {
      float *t = malloc(sizeof(float) * (size_t)((pos + 1) * d));
      assert_non_null(t);
      assert_int_equal(pe_sinusoidal_table(pos + 1, d, 10000.0, fl, t), PE_OK);
      assert_true(t[pos * d + cases[c].col] == x[cases[c].col]);
      free(t);
    }
    free(x);
  }
}

static void test_tables_against_float64(void **state) {
  (void)state;
  const int dims[] = {1, 2, 3, 4, 5, 8, 64, 65, 127, 768};
  const double bases[] = {10000.0, 500.0, 1e6};
  for (int concat = 0; concat < 2; concat++)
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
      for (size_t bi = 0; bi < 3; bi++) {
        int d = dims[di];
        if (concat && d < 4) continue;
        enum { N = 300 };
        float *t = malloc(sizeof(float) * (size_t)(N * d));
        assert_int_equal(pe_sinusoidal_table(N, d, bases[bi], concat ? PE_SINUSOIDAL_CONCAT : 0, t), PE_OK);
        for (int64_t p = 0; p < N; p++)
          for (int c = 0; c < d; c++) {
            char what[96];
            snprintf(what, sizeof what, "concat %d d %d base %g pos %ld col %d", concat, d,
                     bases[bi], (long)p, c);
            assert_close_f32(t[p * d + c], ref_pe(p, c, d, bases[bi], concat), what);
          }
        if (concat && (d & 1))
          for (int64_t p = 0; p < N; p++) assert_true(t[p * d + d - 1] == 0.0f);
        free(t);
      }
}

/* The seed exercise: along the positions, a column of the table oscillates
 * ever more slowly as its dimension index grows ("the stripes widen"). The
 * number of sign changes over positions 1..4095 must not increase from one
 * frequency to the next, and must fall by orders of magnitude overall. */
static void test_stripes_widen(void **state) {
  (void)state;
  enum { N = 4096, D = 128 };
  float *t = malloc(sizeof(float) * N * D);
  for (int concat = 0; concat < 2; concat++) {
    assert_int_equal(pe_sinusoidal_table(N, D, 10000.0, concat ? PE_SINUSOIDAL_CONCAT : 0, t), PE_OK);
    int prev = N, first = -1, last = -1;
    for (int k = 0; k < D / 2; k++) {
      int col = concat ? k : 2 * k; /* the sin column of frequency k */
      int changes = 0;
      for (int p = 2; p < N; p++)
        changes += (t[p * D + col] < 0) != (t[(p - 1) * D + col] < 0);
      if (changes > prev) fail_msg("concat %d: frequency %d has %d sign changes > %d of the previous", concat, k, changes, prev);
      prev = changes;
      if (first < 0) first = changes;
      last = changes;
    }
    /* frequency 0 is 1 rad/position: 4094/pi ~ 1303 half periods; the last
     * is 1e-4 (concat) or 10000^(-126/128) ~ 1.15e-4: under half a period. */
    assert_true(first > 1200 && first < 1400);
    assert_true(last == 0);
  }
  free(t);
}

/* ---- pe_sinusoidal_add ---- */

static void run_add_case(pe_dtype d, const int64_t s[4], const int perm[3], int64_t pad,
                         int reversed, int use_pos, int concat, double base) {
  tbuf before = make_tensor(d, s, perm, pad, reversed);
  fill_uniform(&before, -2.0f, 2.0f);
  tbuf after = clone(&before);
  int64_t B = s[0], T = s[2];
  int D = (int)s[3];
  int64_t *pos = NULL;
  if (use_pos) {
    pos = malloc(sizeof(int64_t) * (size_t)(B * T));
    for (int64_t k = 0; k < B * T; k++) pos[k] = (int64_t)(rng_next() % 100000);
    pos[0] = (INT64_C(1) << 40) + 3; /* far beyond any trained context */
  }
  uint32_t fl = concat ? PE_SINUSOIDAL_CONCAT : 0;
  assert_int_equal(pe_sinusoidal_add(&after.t, pos, base, fl, NULL), PE_OK);
  double eps = dtype_eps(d);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      int64_t p = pos ? pos[b * T + t] : t;
      for (int c = 0; c < D; c++) {
        int64_t off = offset_of(&before.t, b, 0, t, c);
        double x = get_elem(&before.t, off), g = get_elem(&after.t, off);
        double want = x + ref_pe(p, c, D, base, concat);
        /* 2^40: double angle error ~1e-4 rad at most, still well inside */
        double tol = 2 * eps * (fabs(x) + 1.0) + (p > 1000000 ? 1e-3 : 0);
        if (!(fabs(g - want) <= tol))
          fail_msg("dtype %d concat %d [%ld,%ld,%d] pos %ld: got %.9g want %.9g", d, concat,
                   (long)b, (long)t, c, (long)p, g, want);
      }
    }
  free(pos);
  free(before.mem);
  free(after.mem);
}

static void test_add_dtypes_layouts(void **state) {
  (void)state;
  const int dense[3] = {0, 1, 2}, tb[3] = {2, 1, 0};
  const int64_t shapes[][4] = {{2, 1, 5, 64}, {3, 1, 4, 33}, {1, 1, 1, 4}, {2, 1, 3, 1}};
  for (int d = 0; d < 3; d++)
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
      for (int variant = 0; variant < 8; variant++) {
        int concat = variant & 1;
        if (concat && shapes[si][3] < 4) continue;
        run_add_case((pe_dtype)d, shapes[si], variant & 2 ? tb : dense, variant & 4 ? 5 : 0,
                     variant == 6 ? 0 : variant == 7 ? 2 : -1, (variant >> 1) & 1, concat,
                     variant == 5 ? 500.0 : 10000.0);
      }
}

static void test_errors_change_nothing(void **state) {
  (void)state;
  float out[64], keep[64];
  for (int e = 0; e < 64; e++) out[e] = (float)e;
  memcpy(keep, out, sizeof out);
  expect_error(pe_sinusoidal_table(4, 16, 1e4, 0, NULL), PE_ERR_NULL_POINTER, "out");
  expect_error(pe_sinusoidal_table(-1, 16, 1e4, 0, out), PE_ERR_INVALID_ARGUMENT, "n_positions -1");
  expect_error(pe_sinusoidal_table(4, 0, 1e4, 0, out), PE_ERR_SHAPE, "d_model 0");
  expect_error(pe_sinusoidal_table(1, 16385, 1e4, 0, out), PE_ERR_SHAPE, "d_model 16385");
  expect_error(pe_sinusoidal_table(4, 3, 1e4, PE_SINUSOIDAL_CONCAT, out), PE_ERR_SHAPE, "d_model 3");
  expect_error(pe_sinusoidal_table(4, 16, 0.0, 0, out), PE_ERR_INVALID_ARGUMENT, "base 0");
  expect_error(pe_sinusoidal_table(4, 16, -1e4, 0, out), PE_ERR_INVALID_ARGUMENT, "base -10000");
  expect_error(pe_sinusoidal_table(4, 16, NAN, 0, out), PE_ERR_INVALID_ARGUMENT, "base");
  expect_error(pe_sinusoidal_table(4, 16, INFINITY, 0, out), PE_ERR_INVALID_ARGUMENT, "base");
  expect_error(pe_sinusoidal_table(4, 16, 1e4, 6, out), PE_ERR_INVALID_ARGUMENT, "flags");
  assert_memory_equal(out, keep, sizeof out);

  const pe_tensor good = {out, PE_F32, {2, 1, 4, 8}, {32, 32, 8, 1}};
  pe_tensor t;
  int64_t pos[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  expect_error(pe_sinusoidal_add(NULL, NULL, 1e4, 0, NULL), PE_ERR_NULL_POINTER, "x");
  t = good; t.data = NULL;
  expect_error(pe_sinusoidal_add(&t, NULL, 1e4, 0, NULL), PE_ERR_NULL_POINTER, "x->data");
  t = good; t.dtype = (pe_dtype)9;
  expect_error(pe_sinusoidal_add(&t, NULL, 1e4, 0, NULL), PE_ERR_DTYPE, "dtype 9");
  t = good; t.shape[0] = 1; t.shape[1] = 2;
  expect_error(pe_sinusoidal_add(&t, NULL, 1e4, 0, NULL), PE_ERR_SHAPE, "shape[1] = 2");
  t = good; t.stride[2] = 4;
  expect_error(pe_sinusoidal_add(&t, NULL, 1e4, 0, NULL), PE_ERR_SHAPE, "alias");
  t = good; t.shape[3] = 16385; t.stride[0] = t.stride[1] = t.stride[2] = 0; t.shape[0] = t.shape[2] = 1;
  expect_error(pe_sinusoidal_add(&t, NULL, 1e4, 0, NULL), PE_ERR_SHAPE, "16385");
  t = good; t.shape[3] = 2;
  expect_error(pe_sinusoidal_add(&t, NULL, 1e4, PE_SINUSOIDAL_CONCAT, NULL), PE_ERR_SHAPE, "d_model 2");
  t = good;
  expect_error(pe_sinusoidal_add(&t, NULL, -2.0, 0, NULL), PE_ERR_INVALID_ARGUMENT, "base -2");
  expect_error(pe_sinusoidal_add(&t, NULL, 1e4, 0x80, NULL), PE_ERR_INVALID_ARGUMENT, "flags");
  pos[6] = -9;
  expect_error(pe_sinusoidal_add(&t, pos, 1e4, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE, "-9 at [batch 1, token 2]");
  pos[6] = INT64_MAX;
  expect_error(pe_sinusoidal_add(&t, pos, 1e4, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE, "2^53");
  assert_memory_equal(out, keep, sizeof out);
}

/* The call under test on a copy of the case's x. */
typedef struct sin_run {
  const tbuf *in;
  const int64_t *pos;
  uint32_t flags;
} sin_run;

static void run_sinusoidal(void *ctx, pe_threadpool *pool, void *out) {
  const sin_run *r = ctx;
  pe_tensor t = copy_into(r->in, out);
  assert_int_equal(pe_sinusoidal_add(&t, r->pos, 10000.0, r->flags, pool), PE_OK);
}

static void run_simd_case(pe_dtype d, int64_t D, int concat) {
  const int dense[3] = {0, 1, 2};
  const int64_t s[4] = {2, 1, 3, D};
  tbuf in = make_tensor(d, s, dense, 1, -1);
  fill_special(&in);
  int64_t pos[6] = {0, 1, 77, 4096, 123456789, 5};
  sin_run r = {&in, pos, concat ? PE_SINUSOIDAL_CONCAT : 0};
  char what[96];
  snprintf(what, sizeof what, "pe_sinusoidal_add dtype %d D %lld concat %d", d, (long long)D, concat);
  identity_check(what, in.bytes, run_sinusoidal, &r);
  free(in.mem);
}

static void all_identity_cases(void) {
  for (int d = 0; d < 3; d++)
    for (int64_t D = 4; D <= 80; D += (D < 40 ? 1 : 9))
      for (int concat = 0; concat < 2; concat++) run_simd_case((pe_dtype)d, D, concat);
}

IDENTITY_TESTS(all_identity_cases)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hand_values),
      cmocka_unit_test(test_tables_against_float64),
      cmocka_unit_test(test_stripes_widen),
      cmocka_unit_test(test_add_dtypes_layouts),
      cmocka_unit_test(test_errors_change_nothing),
      cmocka_unit_test(test_simd_matches_scalar),
      cmocka_unit_test(test_pool_matches_single_thread),
  };
  return cmocka_run_group_tests(tests, NULL, destroy_pool);
}
