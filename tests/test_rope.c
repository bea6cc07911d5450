/* test_rope.c - the RoPE core against a float64 reference written here,
 * independently of the library: frequencies from the formula, angles and
 * rotations in double, half types converted by reference conversions written
 * below (f16 from the format's definition, bf16 by bit-level rounding).
 *
 * Tolerances (f32 outputs): the library's cos/sin are within ~1.2e-7 of the
 * exact values (float rounding of the reduced angle is corrected to first
 * order, then SLEEF's <= 1 ulp sincos), and x' = fma(x, c, -(y*s)) adds two
 * roundings of 2^-24 relative each. So |x' - ref| <= 2.5e-7 * (|x| + |y|) is
 * a bound with margin; a wrong pairing, sign or frequency gives errors of
 * order |x|, six orders of magnitude larger. Half types: the f32 result is
 * then rounded once, so the output is within one ulp of the half type of the
 * reference (the f32 error can move it across a rounding boundary).
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

#include "test_util.h"

/* ---------------------------------------------------------------------- */
/* helpers                                                                */
/* ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) {
  uint64_t x = rng_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return rng_state = x;
}
static float rng_uniform(void) { /* [-2, 2) */
  return (float)((double)(rng_next() >> 11) * 0x1p-53 * 4.0 - 2.0);
}

/* Reference IEEE binary16 conversions, written from the format's definition
 * (clang 14 has no _Float16 on x86-64). Decoding is exact; encoding rounds
 * the exact value to nearest even by comparing against the two neighbours
 * in double, a different method from the library's bit manipulation. */
static float h2f(uint16_t h) {
  int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) return m ? NAN : (sign ? -INFINITY : INFINITY);
  v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
  return (float)(sign ? -v : v);
}
static uint16_t f2h(float f) {
  if (isnan(f)) return 0x7e00;
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  double a = fabs((double)f);
  if (a >= 65520.0) return sign | 0x7c00; /* halfway to 2^16 and beyond: Inf */
  /* the spacing of binary16 around a */
  int e;
  frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
  double q = ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
  double lo = floor(a / q) * q, hi = lo + q;
  double r = (a - lo < hi - a) ? lo : (a - lo > hi - a) ? hi : (fmod(lo / q, 2.0) == 0 ? lo : hi);
  /* encode r exactly */
  if (r == 0) return sign;
  frexp(r, &e);
  if (e - 1 < -14) return sign | (uint16_t)(r / ldexp(1.0, -24)); /* subnormal */
  int m = (int)(ldexp(r, -(e - 1)) * 1024.0) - 1024;
  if (m == 1024) { m = 0; e++; }
  return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)m;
}

static size_t esize(pe_dtype d) { return d == PE_F32 ? 4 : 2; }

static float load_elem(const void *base, pe_dtype d, int64_t i) {
  if (d == PE_F32) return ((const float *)base)[i];
  uint16_t h = ((const uint16_t *)base)[i];
  return d == PE_F16 ? h2f(h) : bf16_to_f32(h);
}
static void store_elem(void *base, pe_dtype d, int64_t i, float v) {
  if (d == PE_F32)
    ((float *)base)[i] = v;
  else if (d == PE_F16)
    ((uint16_t *)base)[i] = f2h(v);
  else
    ((uint16_t *)base)[i] = bf16_rne(v);
}

/* ulp of a value in a given dtype, for the half-type tolerance. */
static double ulp_of(double v, pe_dtype d) {
  int mant = d == PE_F32 ? 23 : d == PE_F16 ? 10 : 7;
  int emin = d == PE_F32 ? -126 : d == PE_F16 ? -14 : -126;
  int e;
  frexp(fabs(v), &e); /* v = m * 2^e, m in [0.5, 1) */
  e -= 1;
  if (e < emin) e = emin;
  return ldexp(1.0, e - mant);
}

/* A dense tensor with its own buffer, in one of three layouts. */
typedef enum layout { L_BHTD, L_BTHD } layout;

typedef struct buf {
  pe_tensor t;
  void *mem;
  size_t bytes;
} buf;

static buf make_tensor(pe_dtype d, int64_t B, int64_t H, int64_t T, int64_t D, layout l) {
  buf b;
  memset(&b, 0, sizeof b);
  b.bytes = (size_t)(B * H * T * D) * esize(d);
  b.mem = malloc(b.bytes);
  assert_non_null(b.mem);
  b.t.data = b.mem;
  b.t.dtype = d;
  b.t.shape[0] = B;
  b.t.shape[1] = H;
  b.t.shape[2] = T;
  b.t.shape[3] = D;
  b.t.stride[3] = 1;
  if (l == L_BHTD) {
    b.t.stride[2] = D;
    b.t.stride[1] = T * D;
    b.t.stride[0] = H * T * D;
  } else {
    b.t.stride[1] = D;
    b.t.stride[2] = H * D;
    b.t.stride[0] = T * H * D;
  }
  int64_t n = B * H * T * D;
  for (int64_t i = 0; i < n; i++) store_elem(b.mem, d, i, rng_uniform());
  return b;
}

static int64_t offset_of(const pe_tensor *t, int64_t b, int64_t h, int64_t s, int64_t c) {
  return b * t->stride[0] + h * t->stride[1] + s * t->stride[2] + c;
}

/* float64 reference of HF's rotation: frequencies base^(-2i/d) / factor. */
typedef struct ref_params {
  int head_dim, rotary_dim;
  pe_rope_style style;
  double base, factor, attn;
} ref_params;

static void ref_rotate(const ref_params *rp, const double *x, double *out, double pos, double sign) {
  int half = rp->rotary_dim / 2;
  memcpy(out, x, sizeof(double) * (size_t)rp->head_dim);
  for (int i = 0; i < half; i++) {
    double f = pow(rp->base, -2.0 * i / rp->rotary_dim) / rp->factor;
    double c = cos(pos * f) * rp->attn, s = sign * sin(pos * f) * rp->attn;
    int xi = rp->style == PE_ROPE_NEOX ? i : 2 * i;
    int yi = rp->style == PE_ROPE_NEOX ? i + half : 2 * i + 1;
    out[xi] = x[xi] * c - x[yi] * s;
    out[yi] = x[yi] * c + x[xi] * s;
  }
}

/* Check every row of `after` against the reference rotation of `before`. */
static void check_rotation(const ref_params *rp, const buf *before_b, const buf *after_b,
                           const int64_t *pos, double sign) {
  const pe_tensor *t = &after_b->t;
  double x[1024], r[1024];
  double worst = 0;
  for (int64_t b = 0; b < t->shape[0]; b++)
    for (int64_t h = 0; h < t->shape[1]; h++)
      for (int64_t s = 0; s < t->shape[2]; s++) {
        double p = pos ? (double)pos[b * t->shape[2] + s] : (double)s;
        for (int c = 0; c < rp->head_dim; c++)
          x[c] = load_elem(before_b->t.data, t->dtype, offset_of(&before_b->t, b, h, s, c));
        ref_rotate(rp, x, r, p, sign);
        int half = rp->rotary_dim / 2;
        for (int c = 0; c < rp->head_dim; c++) {
          float got = load_elem(t->data, t->dtype, offset_of(t, b, h, s, c));
          if (c >= rp->rotary_dim) { /* pass-through: bit-identical */
            assert_memory_equal((const char *)t->data + offset_of(t, b, h, s, c) * esize(t->dtype),
                                (const char *)before_b->t.data + offset_of(&before_b->t, b, h, s, c) * esize(t->dtype),
                                esize(t->dtype));
            continue;
          }
          int pair = rp->style == PE_ROPE_NEOX ? (c < half ? c + half : c - half) : (c ^ 1);
          double mag = (fabs(x[c]) + fabs(x[pair])) * rp->attn;
          double tol = 2.5e-7 * mag + 1e-37;
          if (t->dtype != PE_F32) tol += ulp_of(r[c], t->dtype) * 1.0001;
          double err = fabs((double)got - r[c]);
          if (err > worst) worst = err;
          if (!(err <= tol)) {
            fprintf(stderr, "mismatch b%lld h%lld t%lld c%d: got %.9g want %.9g (tol %.3g)\n",
                    (long long)b, (long long)h, (long long)s, c, got, r[c], tol);
            fail();
          }
        }
      }
}

static buf clone(const buf *src) {
  buf b = *src;
  b.mem = malloc(src->bytes);
  assert_non_null(b.mem);
  memcpy(b.mem, src->mem, src->bytes);
  b.t.data = b.mem;
  return b;
}

static pe_rope_cache *make_cache(int head_dim, int rotary_dim, pe_rope_style style, double base,
                                 int64_t max_pos, pe_rope_scaling scaling, double factor,
                                 double attn) {
  pe_rope_params p = rope_params(head_dim, rotary_dim, style, base, max_pos);
  p.scaling = scaling;
  p.factor = factor;
  p.attention_factor = attn;
  return new_cache(&p);
}

/* ---------------------------------------------------------------------- */
/* version, status, params                                                */
/* ---------------------------------------------------------------------- */

static void test_version(void **state) {
  (void)state;
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", PE_VERSION_MAJOR, PE_VERSION_MINOR, PE_VERSION_PATCH);
  assert_string_equal(pe_version_string(), want);
  assert_int_equal(PE_VERSION_NUMBER, PE_VERSION_MAJOR * 10000 + PE_VERSION_MINOR * 100 + PE_VERSION_PATCH);
}

static void test_status_strings(void **state) {
  (void)state;
  static const char *const names[] = {"PE_OK", "PE_ERR_NULL_POINTER", "PE_ERR_INVALID_ARGUMENT",
                                      "PE_ERR_SHAPE", "PE_ERR_DTYPE", "PE_ERR_POSITION_OUT_OF_RANGE",
                                      "PE_ERR_OUT_OF_MEMORY", "PE_ERR_OVERFLOW", "PE_ERR_UNSUPPORTED",
                                      "PE_ERR_PARSE", "PE_ERR_BUSY"};
  _Static_assert(PE_ERR_BUSY == 10, "status values are fixed");
  for (int s = 0; s < 11; s++) {
    const char *str = pe_status_string((pe_status)s);
    assert_non_null(str);
    assert_int_equal(strncmp(str, names[s], strlen(names[s])), 0);
    assert_int_equal(str[strlen(names[s])], ':');
  }
  assert_non_null(strstr(pe_status_string((pe_status)11), "UNKNOWN"));
  assert_non_null(strstr(pe_status_string((pe_status)99), "UNKNOWN"));
  assert_non_null(pe_last_error());
}

static void test_params_init_defaults(void **state) {
  (void)state;
  pe_rope_params p;
  memset(&p, 0xab, sizeof p);
  pe_rope_params_init(&p);
  assert_int_equal(p.struct_size, sizeof p);
  assert_int_equal(p.head_dim, 128);
  assert_int_equal(p.rotary_dim, 0);
  assert_int_equal(p.style, PE_ROPE_NEOX);
  assert_true(p.base == 10000.0);
  assert_int_equal(p.scaling, PE_ROPE_SCALING_NONE);
  assert_true(p.factor == 1.0);
  assert_int_equal(p.truncate, 1);
  assert_true(p.low_freq_factor == 1.0 && p.high_freq_factor == 4.0);
  assert_null(p.short_factor);
  assert_null(p.inv_freq);
  pe_rope_params_init(NULL); /* no-op */
}

static void test_cache_params_roundtrip(void **state) {
  (void)state;
  pe_rope_cache *c = make_cache(96, 64, PE_ROPE_GPTJ, 5e5, 100, PE_ROPE_SCALING_LINEAR, 4.0, 0);
  pe_rope_params out;
  pe_rope_params_init(&out);
  assert_int_equal(pe_rope_cache_params(c, &out), PE_OK);
  assert_int_equal(out.head_dim, 96);
  assert_int_equal(out.rotary_dim, 64);
  assert_int_equal(out.style, PE_ROPE_GPTJ);
  assert_true(out.base == 5e5);
  assert_int_equal(out.max_positions, 100);
  assert_true(out.factor == 4.0);
  /* rotary_dim 0 resolves to head_dim */
  pe_rope_cache *c2 = make_cache(80, 0, PE_ROPE_NEOX, 1e4, 8, PE_ROPE_SCALING_NONE, 1, 0);
  assert_int_equal(pe_rope_cache_params(c2, &out), PE_OK);
  assert_int_equal(out.rotary_dim, 80);
  pe_rope_cache_destroy(c);
  pe_rope_cache_destroy(c2);
  pe_rope_cache_destroy(NULL);
}

/* ---------------------------------------------------------------------- */
/* frequencies and table                                                  */
/* ---------------------------------------------------------------------- */

static void test_inv_freq_default_and_linear(void **state) {
  (void)state;
  const double bases[] = {10000.0, 500000.0, 1e6};
  const int dims[] = {128, 64, 80, 6};
  for (size_t bi = 0; bi < 3; bi++)
    for (size_t di = 0; di < 4; di++)
      for (int lin = 0; lin < 2; lin++) {
        double factor = lin ? 8.0 : 1.0;
        pe_rope_cache *c = make_cache(dims[di], 0, PE_ROPE_NEOX, bases[bi], 16,
                                      lin ? PE_ROPE_SCALING_LINEAR : PE_ROPE_SCALING_NONE, factor, 0);
        float f[512];
        assert_int_equal(pe_rope_cache_inv_freq(c, f), PE_OK);
        for (int i = 0; i < dims[di] / 2; i++) {
          double want = 1.0 / pow(bases[bi], 2.0 * i / dims[di]) / factor;
          /* float32 rounding of the double value: half an ulp */
          assert_true(fabs(f[i] - want) <= 0.5 * ulp_of(want, PE_F32) * 1.0000001);
        }
        assert_true(pe_rope_cache_attention_factor(c) == 1.0);
        assert_true(pe_rope_cache_softmax_scale(c) == 1.0);
        pe_rope_cache_destroy(c);
      }
  /* Llama-3 (base 5e5, d 128): the lowest frequency 5e5^(-126/128) =
   * 2.455140791e-6 (evaluated by hand: exp(-0.984375 * ln 5e5)). */
  pe_rope_cache *c = make_cache(128, 0, PE_ROPE_NEOX, 5e5, 16, PE_ROPE_SCALING_NONE, 1, 0);
  float f[64];
  pe_rope_cache_inv_freq(c, f);
  assert_true(fabs(f[63] - 2.455140791e-6) < 2e-13); /* half a float ulp there */
  assert_true(f[0] == 1.0f);
  pe_rope_cache_destroy(c);
}

/* The table at large positions: double-precision angles keep |err| < 1e-6 at
 * 2^20, where float32 angles are off by ~1e-2 — checked too, so the
 * test would notice if the library fell back to float angles. */
static void test_table_accuracy_large_positions(void **state) {
  (void)state;
  const int64_t positions[] = {0, 1, 4095, 8191, 65535, 131071, 1 << 20, (1 << 20) + 12345};
  pe_rope_cache *tab = make_cache(128, 0, PE_ROPE_NEOX, 10000.0, (1 << 20) + 12346,
                                  PE_ROPE_SCALING_NONE, 1, 0);
  pe_rope_cache *fly = make_cache(128, 0, PE_ROPE_NEOX, 10000.0, 0, PE_ROPE_SCALING_NONE, 1, 0);
  double worst = 0, worst_f32_angle = 0;
  for (size_t k = 0; k < sizeof positions / sizeof positions[0]; k++) {
    float c1[64], s1[64], c2[64], s2[64];
    assert_int_equal(pe_rope_cache_cos_sin(tab, positions[k], c1, s1), PE_OK);
    assert_int_equal(pe_rope_cache_cos_sin(fly, positions[k], c2, s2), PE_OK);
    /* on the fly and table compute the same bits */
    assert_memory_equal(c1, c2, sizeof c1);
    assert_memory_equal(s1, s2, sizeof s1);
    for (int i = 0; i < 64; i++) {
      double f = pow(10000.0, -2.0 * i / 128);
      double a = (double)positions[k] * f;
      worst = fmax(worst, fmax(fabs(c1[i] - cos(a)), fabs(s1[i] - sin(a))));
      float af = (float)positions[k] * (float)f; /* what HF computes */
      worst_f32_angle = fmax(worst_f32_angle, fabs(cosf(af) - cos(a)));
    }
  }
  fprintf(stderr, "table max |err| %.3g (float32 angles: %.3g)\n", worst, worst_f32_angle);
  assert_true(worst < 1e-6);
  assert_true(worst_f32_angle > 1e-3);
  pe_rope_cache_destroy(tab);
  pe_rope_cache_destroy(fly);
}

static void test_attention_factor_scales_table(void **state) {
  (void)state;
  pe_rope_cache *c1 = make_cache(64, 0, PE_ROPE_NEOX, 1e4, 64, PE_ROPE_SCALING_NONE, 1, 0);
  pe_rope_cache *c2 = make_cache(64, 0, PE_ROPE_NEOX, 1e4, 64, PE_ROPE_SCALING_NONE, 1, 0.5);
  assert_true(pe_rope_cache_attention_factor(c2) == 0.5);
  for (int64_t p = 0; p < 64; p += 7) {
    float a[32], b[32], c[32], d[32];
    pe_rope_cache_cos_sin(c1, p, a, b);
    pe_rope_cache_cos_sin(c2, p, c, d);
    for (int i = 0; i < 32; i++) { /* times 0.5 is exact */
      assert_true(c[i] == a[i] * 0.5f);
      assert_true(d[i] == b[i] * 0.5f);
    }
  }
  pe_rope_cache_destroy(c1);
  pe_rope_cache_destroy(c2);
}

/* ---------------------------------------------------------------------- */
/* apply                                                                  */
/* ---------------------------------------------------------------------- */

typedef struct apply_case {
  pe_dtype dtype;
  pe_rope_style style;
  int head_dim, rotary_dim;
  int64_t batch, qh, kh, tokens;
  layout lay;
  int use_positions;
  int64_t max_pos; /* 0 = on the fly */
  double attn;
} apply_case;

static void run_apply_case(const apply_case *ac) {
  pe_rope_cache *c = make_cache(ac->head_dim, ac->rotary_dim, ac->style, 10000.0, ac->max_pos,
                                PE_ROPE_SCALING_NONE, 1, ac->attn);
  buf q = make_tensor(ac->dtype, ac->batch, ac->qh, ac->tokens, ac->head_dim, ac->lay);
  buf k = make_tensor(ac->dtype, ac->batch, ac->kh, ac->tokens, ac->head_dim, ac->lay);
  buf q0 = clone(&q), k0 = clone(&k);
  int64_t *pos = NULL;
  if (ac->use_positions) {
    pos = malloc(sizeof(int64_t) * (size_t)(ac->batch * ac->tokens));
    for (int64_t i = 0; i < ac->batch * ac->tokens; i++)
      pos[i] = (int64_t)(rng_next() % (uint64_t)(ac->max_pos ? ac->max_pos : 3000000));
  }
  assert_int_equal(pe_apply_rope_qk(c, &q.t, &k.t, pos, 0, NULL), PE_OK);
  ref_params rp = {ac->head_dim, ac->rotary_dim ? ac->rotary_dim : ac->head_dim, ac->style,
                   10000.0, 1.0, ac->attn ? ac->attn : 1.0};
  check_rotation(&rp, &q0, &q, pos, 1.0);
  check_rotation(&rp, &k0, &k, pos, 1.0);
  free(pos);
  free(q.mem);
  free(k.mem);
  free(q0.mem);
  free(k0.mem);
  pe_rope_cache_destroy(c);
}

static void test_apply_styles_dtypes_layouts(void **state) {
  (void)state;
  const pe_dtype dts[] = {PE_F32, PE_F16, PE_BF16};
  for (int d = 0; d < 3; d++)
    for (int st = 0; st < 2; st++)
      for (int l = 0; l < 2; l++) {
        apply_case ac = {dts[d], (pe_rope_style)st, 64, 0, 2, 4, 4, 9, (layout)l, 0, 64, 0};
        run_apply_case(&ac);
      }
}

static void test_apply_partial_rotary(void **state) {
  (void)state;
  /* GPT-J 6B: head_dim 256, rotary_dim 64; NeoX-20B: 96 of which 24; Phi: 80/32 */
  const int hd[] = {256, 96, 80, 6};
  const int rd[] = {64, 24, 32, 2};
  for (int i = 0; i < 4; i++)
    for (int st = 0; st < 2; st++)
      for (int d = 0; d < 3; d++) {
        apply_case ac = {(pe_dtype)d, (pe_rope_style)st, hd[i], rd[i], 1, 3, 1, 5, L_BHTD, 1, 512, 0};
        run_apply_case(&ac);
      }
}

static void test_apply_gqa_positions_onthefly(void **state) {
  (void)state;
  /* GQA 8:2 and MQA 6:1, per-token positions, table and on-the-fly (positions
   * up to 3e6 on the fly), and a non-trivial attention factor */
  apply_case a1 = {PE_F32, PE_ROPE_NEOX, 128, 0, 3, 8, 2, 7, L_BTHD, 1, 4096, 0};
  apply_case a2 = {PE_F32, PE_ROPE_NEOX, 128, 0, 2, 6, 1, 5, L_BHTD, 1, 0, 0};
  apply_case a3 = {PE_BF16, PE_ROPE_GPTJ, 64, 0, 2, 4, 2, 3, L_BHTD, 1, 0, 1.25};
  apply_case a4 = {PE_F16, PE_ROPE_NEOX, 18, 0, 1, 3, 3, 11, L_BTHD, 1, 100, 0.75};
  run_apply_case(&a1);
  run_apply_case(&a2);
  run_apply_case(&a3);
  run_apply_case(&a4);
}

/* Table and on-the-fly modes give the same bits. */
static void test_table_equals_onthefly(void **state) {
  (void)state;
  pe_rope_cache *tab = make_cache(80, 0, PE_ROPE_GPTJ, 1e4, 1000, PE_ROPE_SCALING_LINEAR, 2, 1.1);
  pe_rope_cache *fly = make_cache(80, 0, PE_ROPE_GPTJ, 1e4, 0, PE_ROPE_SCALING_LINEAR, 2, 1.1);
  buf q = make_tensor(PE_F32, 2, 3, 17, 80, L_BHTD);
  buf q2 = clone(&q);
  int64_t pos[34];
  for (int i = 0; i < 34; i++) pos[i] = (int64_t)(rng_next() % 1000);
  assert_int_equal(pe_apply_rope_qk(tab, &q.t, NULL, pos, 0, NULL), PE_OK);
  assert_int_equal(pe_apply_rope_qk(fly, &q2.t, NULL, pos, 0, NULL), PE_OK);
  assert_memory_equal(q.mem, q2.mem, q.bytes);
  free(q.mem);
  free(q2.mem);
  pe_rope_cache_destroy(tab);
  pe_rope_cache_destroy(fly);
}

/* q alone and k alone; a packed QKV buffer rotated in place without copies:
 * V (and the other channels) untouched. */
static void test_packed_qkv_and_single_tensor(void **state) {
  (void)state;
  const int64_t B = 2, T = 5, QH = 4, KH = 2, D = 64;
  const int64_t row = (QH + 2 * KH) * D; /* [q heads | k heads | v heads] per token */
  size_t n = (size_t)(B * T * row);
  float *mem = malloc(n * 4), *orig = malloc(n * 4);
  for (size_t i = 0; i < n; i++) mem[i] = orig[i] = rng_uniform();
  pe_tensor q = {mem, PE_F32, {B, QH, T, D}, {T * row, D, row, 1}};
  pe_tensor k = {mem + QH * D, PE_F32, {B, KH, T, D}, {T * row, D, row, 1}};
  pe_rope_cache *c = make_cache(64, 0, PE_ROPE_NEOX, 1e4, 64, PE_ROPE_SCALING_NONE, 1, 0);
  assert_int_equal(pe_apply_rope_qk(c, &q, &k, NULL, 0, NULL), PE_OK);
  ref_params rp = {64, 64, PE_ROPE_NEOX, 1e4, 1, 1};
  buf before = {q, orig, n * 4}, after = {q, mem, n * 4};
  before.t.data = orig;
  check_rotation(&rp, &before, &after, NULL, 1.0);
  before.t = k;
  before.t.data = orig + QH * D;
  after.t = k;
  check_rotation(&rp, &before, &after, NULL, 1.0);
  for (int64_t b = 0; b < B; b++) /* V untouched */
    for (int64_t t = 0; t < T; t++) {
      size_t off = (size_t)((b * T + t) * row + (QH + KH) * D);
      assert_memory_equal(mem + off, orig + off, (size_t)(KH * D) * 4);
    }
  /* k alone */
  memcpy(mem, orig, n * 4);
  assert_int_equal(pe_apply_rope_qk(c, NULL, &k, NULL, 0, NULL), PE_OK);
  after.t = k;
  check_rotation(&rp, &before, &after, NULL, 1.0);
  for (int64_t i = 0; i < B * T; i++) /* q rows untouched */
    assert_memory_equal(mem + i * row, orig + i * row, (size_t)(QH * D) * 4);
  free(mem);
  free(orig);
  pe_rope_cache_destroy(c);
}

static void test_nan_inf_preserved(void **state) {
  (void)state;
  pe_rope_cache *c = make_cache(8, 0, PE_ROPE_NEOX, 1e4, 16, PE_ROPE_SCALING_NONE, 1, 0);
  for (int d = 0; d < 3; d++) {
    buf q = make_tensor((pe_dtype)d, 1, 1, 4, 8, L_BHTD);
    store_elem(q.mem, (pe_dtype)d, 8 + 0, NAN); /* token 1, channel 0 -> pairs with 4 */
    store_elem(q.mem, (pe_dtype)d, 16 + 1, INFINITY);
    assert_int_equal(pe_apply_rope_qk(c, &q.t, NULL, NULL, 0, NULL), PE_OK);
    assert_true(isnan(load_elem(q.mem, (pe_dtype)d, 8 + 0)));
    assert_true(isnan(load_elem(q.mem, (pe_dtype)d, 8 + 4)));
    /* Inf*cos - y*sin at a position where sin != 0: infinite or NaN, never finite */
    assert_false(isfinite(load_elem(q.mem, (pe_dtype)d, 16 + 1)));
    /* token 0 (angle 0): cos 1, sin 0 -> values unchanged */
    for (int ch = 0; ch < 8; ch++) assert_true(isfinite(load_elem(q.mem, (pe_dtype)d, ch)));
    free(q.mem);
  }
  pe_rope_cache_destroy(c);
}

/* The seed property: q at m and k at n give the same q.k as q at m+s, k at
 * n+s (RoPE encodes only the relative distance). */
static void test_relative_distance_invariance(void **state) {
  (void)state;
  for (int st = 0; st < 2; st++) {
    pe_rope_cache *c = make_cache(128, 0, (pe_rope_style)st, 1e4, 0, PE_ROPE_SCALING_NONE, 1, 0);
    float q0[128], k0[128];
    for (int i = 0; i < 128; i++) {
      q0[i] = rng_uniform();
      k0[i] = rng_uniform();
    }
    const int64_t m = 37, n = 5, shifts[] = {0, 1, 100, 4096, 100000};
    double dot0 = 0;
    for (size_t si = 0; si < 5; si++) {
      float q[128], k[128];
      memcpy(q, q0, sizeof q);
      memcpy(k, k0, sizeof k);
      pe_tensor tq = {q, PE_F32, {1, 1, 1, 128}, {128, 128, 128, 1}};
      pe_tensor tk = {k, PE_F32, {1, 1, 1, 128}, {128, 128, 128, 1}};
      int64_t pm = m + shifts[si], pn = n + shifts[si];
      assert_int_equal(pe_apply_rope_qk(c, &tq, NULL, &pm, 0, NULL), PE_OK);
      assert_int_equal(pe_apply_rope_qk(c, NULL, &tk, &pn, 0, NULL), PE_OK);
      double dot = 0, mag = 0;
      for (int i = 0; i < 128; i++) {
        dot += (double)q[i] * k[i];
        mag += fabs((double)q[i] * k[i]);
      }
      if (si == 0) dot0 = dot;
      /* each of 128 products carries ~4e-7 relative error */
      assert_true(fabs(dot - dot0) <= 1e-6 * mag);
    }
    pe_rope_cache_destroy(c);
  }
}

static void test_inverse_round_trip(void **state) {
  (void)state;
  for (int d = 0; d < 3; d++)
    for (int st = 0; st < 2; st++) {
      pe_rope_cache *c = make_cache(64, 48, (pe_rope_style)st, 1e4, 300, PE_ROPE_SCALING_NONE, 1, 0);
      buf q = make_tensor((pe_dtype)d, 2, 3, 6, 64, L_BTHD);
      buf q0 = clone(&q);
      int64_t pos[12];
      for (int i = 0; i < 12; i++) pos[i] = (int64_t)(rng_next() % 300);
      assert_int_equal(pe_apply_rope_qk(c, &q.t, NULL, pos, 0, NULL), PE_OK);
      /* inverse alone is the reference rotation by -angle */
      buf q1 = clone(&q);
      assert_int_equal(pe_apply_rope_qk(c, &q.t, NULL, pos, PE_ROPE_INVERSE, NULL), PE_OK);
      ref_params rp = {64, 48, (pe_rope_style)st, 1e4, 1, 1};
      check_rotation(&rp, &q1, &q, pos, -1.0);
      /* and the round trip returns the input: channels past rotary_dim
       * exactly; rotated ones within two rotations of two roundings each
       * plus (half types) two roundings to the storage type of values as
       * large as the pair's magnitude |x| + |y|. */
      for (int64_t i = 0; i < 2 * 3 * 6 * 64; i++) {
        int64_t ch = i % 64, row0 = i - ch;
        double a = load_elem(q.mem, (pe_dtype)d, i), b = load_elem(q0.mem, (pe_dtype)d, i);
        if (ch >= 48) {
          assert_true(a == b);
          continue;
        }
        int64_t pc = st == PE_ROPE_NEOX ? (ch < 24 ? ch + 24 : ch - 24) : (ch ^ 1);
        double mag = fabs(b) + fabs(load_elem(q0.mem, (pe_dtype)d, row0 + pc));
        double tol = d == PE_F32 ? 1e-6 * mag : 2 * ulp_of(mag, (pe_dtype)d) + 1e-6 * mag;
        if (!(fabs(a - b) <= tol))
          fprintf(stderr, "round trip %s [%lld]: %.9g vs %.9g\n", d == 0 ? "f32" : d == 1 ? "f16" : "bf16",
                  (long long)i, a, b);
        assert_true(fabs(a - b) <= tol);
      }
      free(q.mem);
      free(q0.mem);
      free(q1.mem);
      pe_rope_cache_destroy(c);
    }
}

/* shift_k(delta) == applying at p + delta, and the attention factor is not
 * applied twice (a factor of 1.5 would show as a 50% error). Two shapes: 4
 * tokens of 64 channels, and 3 tokens of 8192, whose 4096 frequencies are
 * more than one row's cos/sin scratch holds: computed in two chunks. */
static void test_shift_k(void **state) {
  (void)state;
  static const int shapes[2][2] = {{64, 4}, {8192, 3}}; /* head_dim, tokens */
  for (int sh = 0; sh < 2; sh++)
    for (int st = 0; st < 2; st++) {
      const int D = shapes[sh][0], T = shapes[sh][1], n = 2 * T;
      pe_rope_cache *c = make_cache(D, 0, (pe_rope_style)st, 1e4, 0, PE_ROPE_SCALING_NONE, 1, 1.5);
      buf k = make_tensor(PE_F32, 2, 2, T, D, L_BHTD);
      buf k_new = clone(&k);
      int64_t pos[8], delta[8], moved[8];
      for (int i = 0; i < n; i++) {
        pos[i] = 1000 + (int64_t)(rng_next() % 5000);
        delta[i] = -(int64_t)(rng_next() % 900);
        moved[i] = pos[i] + delta[i];
      }
      assert_int_equal(pe_apply_rope_qk(c, NULL, &k.t, pos, 0, NULL), PE_OK);
      assert_int_equal(pe_rope_shift_k(c, &k.t, delta, NULL), PE_OK);
      assert_int_equal(pe_apply_rope_qk(c, NULL, &k_new.t, moved, 0, NULL), PE_OK);
      for (int64_t i = 0; i < 2 * 2 * (int64_t)T * D; i++) {
        float a = ((float *)k.mem)[i], b = ((float *)k_new.mem)[i];
        if (!(fabs(a - b) <= 2e-6 * (fabs(b) + 1.0)))
          fail_msg("head_dim %d, %d tokens, style %d: element %lld %.9g vs %.9g", D, T, st,
                   (long long)i, a, b);
      }
      free(k.mem);
      free(k_new.mem);
      pe_rope_cache_destroy(c);
    }
}

/* rerotate_k(from, to) == applying `to` to the unrotated keys; also with
 * 8192 channels (the frequencies in two chunks, as for the shift). */
static void test_rerotate_k(void **state) {
  (void)state;
  /* head_dim, tokens, the two caches' max_positions (8192 channels: on the
   * fly, not 64 MiB tables) */
  static const int shapes[2][4] = {{128, 9, 2048, 8192}, {8192, 3, 0, 0}};
  for (int sh = 0; sh < 2; sh++) {
    const int D = shapes[sh][0], T = shapes[sh][1];
    pe_rope_cache *from = make_cache(D, 0, PE_ROPE_NEOX, 1e4, shapes[sh][2], PE_ROPE_SCALING_NONE, 1, 0);
    pe_rope_cache *to = make_cache(D, 0, PE_ROPE_NEOX, 1e4, shapes[sh][3], PE_ROPE_SCALING_LINEAR, 4, 1.2);
    buf k = make_tensor(PE_F32, 1, 2, T, D, L_BHTD);
    buf k_direct = clone(&k);
    int64_t pos[9];
    for (int i = 0; i < T; i++) pos[i] = (int64_t)(rng_next() % 2048);
    assert_int_equal(pe_apply_rope_qk(from, NULL, &k.t, pos, 0, NULL), PE_OK);
    assert_int_equal(pe_rope_rerotate_k(from, to, &k.t, pos, NULL), PE_OK);
    assert_int_equal(pe_apply_rope_qk(to, NULL, &k_direct.t, pos, 0, NULL), PE_OK);
    for (int64_t i = 0; i < 2 * (int64_t)T * D; i++) {
      float a = ((float *)k.mem)[i], b = ((float *)k_direct.mem)[i];
      if (!(fabs(a - b) <= 2e-6 * (fabs(b) + 1.0)))
        fail_msg("head_dim %d, %d tokens: element %lld %.9g vs %.9g", D, T, (long long)i, a, b);
    }
    if (sh == 0) { /* mismatched geometry is refused */
      pe_rope_cache *other = make_cache(64, 0, PE_ROPE_NEOX, 1e4, 16, PE_ROPE_SCALING_NONE, 1, 0);
      assert_int_equal(pe_rope_rerotate_k(from, other, &k.t, pos, NULL), PE_ERR_SHAPE);
      pe_rope_cache_destroy(other);
    }
    free(k.mem);
    free(k_direct.mem);
    pe_rope_cache_destroy(from);
    pe_rope_cache_destroy(to);
  }
}

/* ---------------------------------------------------------------------- */
/* errors: status, a sentence naming the argument, and no byte changed    */
/* ---------------------------------------------------------------------- */

static void expect_error(pe_status got, pe_status want, const char *needle) {
  if (got != want || !strstr(pe_last_error(), needle))
    fprintf(stderr, "status %d (want %d), message \"%s\" (want \"%s\")\n", got, want,
            pe_last_error(), needle);
  assert_int_equal(got, want);
  assert_non_null(strstr(pe_last_error(), needle));
}

static void test_create_errors(void **state) {
  (void)state;
  pe_rope_cache *sentinel = (pe_rope_cache *)(uintptr_t)0x1234, *out = sentinel;
  pe_rope_params p;
#define CASE(field_stmt, want, needle)                                   \
  do {                                                                   \
    pe_rope_params_init(&p);                                             \
    field_stmt;                                                          \
    expect_error(pe_rope_cache_create(&p, &out), want, needle);          \
    assert_ptr_equal(out, sentinel);                                     \
  } while (0)
  CASE(p.head_dim = 0, PE_ERR_SHAPE, "head_dim 0");
  CASE(p.head_dim = -4, PE_ERR_SHAPE, "head_dim -4");
  CASE(p.rotary_dim = 63, PE_ERR_SHAPE, "rotary_dim 63");
  CASE(p.rotary_dim = 130, PE_ERR_SHAPE, "rotary_dim 130");
  CASE(p.head_dim = 1 << 20, PE_ERR_SHAPE, "head_dim 1048576");
  CASE(p.base = 0, PE_ERR_INVALID_ARGUMENT, "base 0");
  CASE(p.base = -1, PE_ERR_INVALID_ARGUMENT, "base -1");
  CASE(p.base = NAN, PE_ERR_INVALID_ARGUMENT, "base nan");
  CASE(p.base = INFINITY, PE_ERR_INVALID_ARGUMENT, "base inf");
  CASE(p.max_positions = -1, PE_ERR_INVALID_ARGUMENT, "max_positions -1");
  CASE(p.max_positions = INT64_C(1) << 53; p.head_dim = 16384, PE_ERR_OVERFLOW, "max_positions");
  CASE(p.style = (pe_rope_style)7, PE_ERR_INVALID_ARGUMENT, "style 7");
  CASE(p.scaling = (pe_rope_scaling)99, PE_ERR_UNSUPPORTED, "scaling 99");
  CASE(p.scaling = PE_ROPE_SCALING_LINEAR; p.factor = 0.5, PE_ERR_INVALID_ARGUMENT, "factor");
  CASE(p.scaling = PE_ROPE_SCALING_LINEAR; p.factor = NAN, PE_ERR_INVALID_ARGUMENT, "factor");
  CASE(p.attention_factor = -1, PE_ERR_INVALID_ARGUMENT, "attention_factor -1");
  CASE(p.struct_size = 8, PE_ERR_INVALID_ARGUMENT, "struct_size 8");
  /* a size that ends inside a pointer would copy half a pointer */
  float sf[64], lf[64];
  CASE(p.scaling = PE_ROPE_SCALING_LONGROPE; p.short_factor = sf; p.long_factor = lf;
       p.struct_size = (uint32_t)(offsetof(pe_rope_params, short_factor) + 2),
       PE_ERR_INVALID_ARGUMENT, "ends inside a field");
#undef CASE
  expect_error(pe_rope_cache_create(NULL, &out), PE_ERR_NULL_POINTER, "params");
  pe_rope_params_init(&p);
  expect_error(pe_rope_cache_create(&p, NULL), PE_ERR_NULL_POINTER, "out");
  assert_ptr_equal(out, sentinel);
}

static void test_apply_errors_change_nothing(void **state) {
  (void)state;
  pe_rope_cache *c = make_cache(64, 0, PE_ROPE_NEOX, 1e4, 100, PE_ROPE_SCALING_NONE, 1, 0);
  buf q = make_tensor(PE_F32, 2, 4, 8, 64, L_BHTD);
  buf k = make_tensor(PE_BF16, 2, 2, 8, 64, L_BHTD);
  buf q0 = clone(&q), k0 = clone(&k);
  int64_t pos[16];
  for (int i = 0; i < 16; i++) pos[i] = i;
  pe_tensor bq, bk;
  int64_t bpos[16];
#define CASE(setup, call, want, needle)                                  \
  do {                                                                   \
    bq = q.t;                                                            \
    bk = k.t;                                                            \
    memcpy(bpos, pos, sizeof pos);                                       \
    setup;                                                               \
    expect_error(call, want, needle);                                    \
    assert_memory_equal(q.mem, q0.mem, q.bytes);                         \
    assert_memory_equal(k.mem, k0.mem, k.bytes);                         \
  } while (0)
#define APPLY pe_apply_rope_qk(c, &bq, &bk, bpos, 0, NULL)
  CASE((void)0, pe_apply_rope_qk(NULL, &bq, &bk, bpos, 0, NULL), PE_ERR_NULL_POINTER, "cache");
  CASE((void)0, pe_apply_rope_qk(c, NULL, NULL, bpos, 0, NULL), PE_ERR_NULL_POINTER, "q and k");
  CASE(bq.data = NULL, APPLY, PE_ERR_NULL_POINTER, "q->data");
  CASE(bq.shape[3] = 0, APPLY, PE_ERR_SHAPE, "q->shape[3] = 0");
  CASE(bq.shape[3] = -4, APPLY, PE_ERR_SHAPE, "q->shape[3] = -4 must be > 0");
  CASE(bq.shape[1] = -3, APPLY, PE_ERR_SHAPE, "q->shape[1] = -3");
  CASE(bq.shape[3] = 32, APPLY, PE_ERR_SHAPE, "q head_dim (shape[3]) 32 != cache head_dim 64");
  CASE(bq.stride[3] = 2, APPLY, PE_ERR_SHAPE, "q->stride[3] = 2");
  CASE(bq.dtype = (pe_dtype)5, APPLY, PE_ERR_DTYPE, "q->dtype 5");
  CASE(bk.shape[0] = 1, APPLY, PE_ERR_SHAPE, "must match");
  CASE(bk.shape[2] = 7, APPLY, PE_ERR_SHAPE, "must match");
  CASE(bpos[13] = -2, APPLY, PE_ERR_POSITION_OUT_OF_RANGE, "position -2 at [batch 1, token 5]");
  CASE(bpos[9] = 100, APPLY, PE_ERR_POSITION_OUT_OF_RANGE,
       "position 100 at [batch 1, token 1] >= cache max_positions 100");
  CASE((void)0, pe_apply_rope_qk(c, &bq, &bk, bpos, 4u, NULL), PE_ERR_INVALID_ARGUMENT, "flags");
  CASE(bq.stride[1] = 8, APPLY, PE_ERR_SHAPE, "alias");      /* heads overlap */
  CASE(bq.stride[2] = 0, APPLY, PE_ERR_SHAPE, "alias");      /* tokens broadcast */
  CASE(bk = bq, APPLY, PE_ERR_SHAPE, "overlap in memory");        /* rotated twice */
  CASE(bq.data = (char *)q.mem + 2, APPLY, PE_ERR_INVALID_ARGUMENT, "not aligned");
  CASE(bk.data = (char *)k.mem + 1, APPLY, PE_ERR_INVALID_ARGUMENT, "not aligned");
  CASE(bq.stride[0] = INT64_MAX / 2, APPLY, PE_ERR_OVERFLOW, "q");
  CASE(bq.shape[0] = INT64_MAX; bk.shape[0] = INT64_MAX, APPLY, PE_ERR_OVERFLOW, "q");
  CASE(bq.stride[0] = -(INT64_MAX / 4), APPLY, PE_ERR_OVERFLOW, "q");
  /* NULL positions mean 0..T-1: with T > max_positions it is an error */
  pe_rope_cache *small = make_cache(64, 0, PE_ROPE_NEOX, 1e4, 4, PE_ROPE_SCALING_NONE, 1, 0);
  CASE((void)0, pe_apply_rope_qk(small, &bq, &bk, NULL, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE,
       "max_positions 4");
  /* shift and rerotate */
  CASE((void)0, pe_rope_shift_k(c, &bk, NULL, NULL), PE_ERR_NULL_POINTER, "deltas");
  CASE(bpos[3] = INT64_C(1) << 53, pe_rope_shift_k(c, &bk, bpos, NULL), PE_ERR_POSITION_OUT_OF_RANGE,
       "delta");
  CASE(bk.shape[3] = 32, pe_rope_shift_k(c, &bk, bpos, NULL), PE_ERR_SHAPE, "head_dim");
  CASE((void)0, pe_rope_rerotate_k(c, NULL, &bk, bpos, NULL), PE_ERR_NULL_POINTER, "to cache");
  CASE(bpos[0] = -1, pe_rope_rerotate_k(c, c, &bk, bpos, NULL), PE_ERR_POSITION_OUT_OF_RANGE,
       "position -1");
  /* k without tokens while q has some: a mismatch (both empty is PE_OK:
   * test_contract.c) */
  CASE(bk.shape[2] = 0, APPLY, PE_ERR_SHAPE, "must match");
#undef APPLY
#undef CASE
  /* cos_sin accessor */
  float cs[32], sn[32];
  expect_error(pe_rope_cache_cos_sin(c, 100, cs, sn), PE_ERR_POSITION_OUT_OF_RANGE, "100");
  expect_error(pe_rope_cache_cos_sin(c, -1, cs, sn), PE_ERR_POSITION_OUT_OF_RANGE, "-1");
  expect_error(pe_rope_cache_cos_sin(c, 0, NULL, sn), PE_ERR_NULL_POINTER, "cos_out");
  expect_error(pe_rope_cache_inv_freq(NULL, cs), PE_ERR_NULL_POINTER, "cache");
  assert_true(isnan(pe_rope_cache_attention_factor(NULL)));
  free(q.mem);
  free(k.mem);
  free(q0.mem);
  free(k0.mem);
  pe_rope_cache_destroy(c);
  pe_rope_cache_destroy(small);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version),
      cmocka_unit_test(test_status_strings),
      cmocka_unit_test(test_params_init_defaults),
      cmocka_unit_test(test_cache_params_roundtrip),
      cmocka_unit_test(test_inv_freq_default_and_linear),
      cmocka_unit_test(test_table_accuracy_large_positions),
      cmocka_unit_test(test_attention_factor_scales_table),
      cmocka_unit_test(test_apply_styles_dtypes_layouts),
      cmocka_unit_test(test_apply_partial_rotary),
      cmocka_unit_test(test_apply_gqa_positions_onthefly),
      cmocka_unit_test(test_table_equals_onthefly),
      cmocka_unit_test(test_packed_qkv_and_single_tensor),
      cmocka_unit_test(test_nan_inf_preserved),
      cmocka_unit_test(test_relative_distance_invariance),
      cmocka_unit_test(test_inverse_round_trip),
      cmocka_unit_test(test_shift_k),
      cmocka_unit_test(test_rerotate_k),
      cmocka_unit_test(test_create_errors),
      cmocka_unit_test(test_apply_errors_change_nothing),
  };
  return cmocka_run_group_tests_name("rope", tests, NULL, NULL);
}
