/* avx2.c - AVX2 + FMA + F16C kernels, bit-identical to scalar.c.
 * Compiled with -mavx2 -mfma -mf16c (CMakeLists.txt); only reached when
 * cpu.c reports PE_CPU_AVX2. Eight float lanes. AVX2 has no masked 16-bit
 * loads, so tails go through a small zero-padded buffer and the same vector
 * code: only the row's own channels are copied in and out. */
#include <immintrin.h>
#include <sleef.h>
#include <string.h>

#include "kernels.h"
#include "sincos_consts.h"

/* ---- cos/sin rows ---- */

/* theta - k*2pi, k = nearbyint(theta/2pi): scalar.c's sincos_one, 4 lanes. */
static inline __m256d reduce_2pi(__m256d theta) {
  __m256d k = _mm256_round_pd(_mm256_mul_pd(theta, _mm256_set1_pd(PE_INV_2PI)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(PE_2PI_HI), theta);
  r = _mm256_fnmadd_pd(k, _mm256_set1_pd(PE_2PI_LO), r);
  /* |r| <= PE_REDUCED_MAX, false for NaN: keep r, else 0 */
  __m256d abs = _mm256_andnot_pd(_mm256_set1_pd(-0.0), r);
  return _mm256_and_pd(r, _mm256_cmp_pd(abs, _mm256_set1_pd(PE_REDUCED_MAX), _CMP_LE_OQ));
}

/* cos/sin of p*freq[0..8): double reduction, SLEEF's float sincos of the
 * rounded angle, first-order fix for the rounding dr. */
static inline void sincos8(__m256d p, const double *freq, float scale, float *cos_out,
                           float *sin_out) {
  __m256d r0 = reduce_2pi(_mm256_mul_pd(p, _mm256_loadu_pd(freq)));
  __m256d r1 = reduce_2pi(_mm256_mul_pd(p, _mm256_loadu_pd(freq + 4)));
  __m128 f0 = _mm256_cvtpd_ps(r0), f1 = _mm256_cvtpd_ps(r1);
  __m128 d0 = _mm256_cvtpd_ps(_mm256_sub_pd(r0, _mm256_cvtps_pd(f0)));
  __m128 d1 = _mm256_cvtpd_ps(_mm256_sub_pd(r1, _mm256_cvtps_pd(f1)));
  __m256 rf = _mm256_set_m128(f1, f0), dr = _mm256_set_m128(d1, d0);
  Sleef___m256_2 sc = Sleef_sincosf8_u10avx2(rf); /* .x = sin, .y = cos */
  __m256 c = _mm256_fnmadd_ps(sc.x, dr, sc.y);    /* fmaf(-s, dr, c) */
  __m256 s = _mm256_fmadd_ps(sc.y, dr, sc.x);     /* fmaf(c, dr, s) */
  if (scale != 1.0f) {
    c = _mm256_mul_ps(c, _mm256_set1_ps(scale));
    s = _mm256_mul_ps(s, _mm256_set1_ps(scale));
  }
  _mm256_storeu_ps(cos_out, c);
  _mm256_storeu_ps(sin_out, s);
}

static void rope_sincos_avx2(int64_t pos0, int64_t n, const double *freq, int32_t half,
                             float scale, float *out) {
  for (int64_t r = 0; r < n; r++) {
    __m256d p = _mm256_set1_pd((double)(pos0 + r));
    float *row = out + r * 2 * half;
    int32_t i = 0;
    for (; i + 8 <= half; i += 8) sincos8(p, freq + i, scale, row + i, row + half + i);
    if (i < half) { /* zero angles in the padding; only half - i lanes copied out */
      double f[8] = {0};
      float c[8], s[8];
      size_t m = (size_t)(half - i);
      memcpy(f, freq + i, m * sizeof(double));
      sincos8(p, f, scale, c, s);
      memcpy(row + i, c, m * sizeof(float));
      memcpy(row + half + i, s, m * sizeof(float));
    }
  }
}

/* ---- dtype loads and stores (8 lanes) ---- */

static inline __m256 load_f32(const void *p) { return _mm256_loadu_ps(p); }
static inline void store_f32(void *p, __m256 v) { _mm256_storeu_ps(p, v); }

/* F16C widening is exact and its RNE narrowing keeps subnormals and quiets
 * NaN, which is what convert.h spells out. */
static inline __m256 load_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128(p)); }
static inline void store_f16(void *p, __m256 v) {
  _mm_storeu_si128(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static inline __m256 load_bf16(const void *p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
/* Integer round-to-nearest-even with NaN quieted, as pe_f32_to_bf16. */
static inline void store_bf16(void *p, __m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i hi = _mm256_srli_epi32(u, 16);
  __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                  _mm256_and_si256(hi, _mm256_set1_epi32(1)));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
  /* |u| and 0x7f800000 are non-negative, so the signed compare is exact */
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                   _mm256_set1_epi32(0x7f800000));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
  /* every lane is <= 0xffff, so the saturating pack is a plain narrowing */
  _mm_storeu_si128(p, _mm_packus_epi32(_mm256_castsi256_si128(r),
                                       _mm256_extracti128_si256(r, 1)));
}

/* ---- rotation ---- */

/* x' = fmaf(x, c, -(y*s)); y' = fmaf(y, c, x*s); the negation is a sign
 * flip, as C's unary minus, so NaN bits match too. */
static inline void rotate8(__m256 x, __m256 y, __m256 c, __m256 s, __m256 *xo, __m256 *yo) {
  __m256 ys = _mm256_mul_ps(y, s);
  PE_OPAQUE(ys); /* clang would move the sign onto s */
  __m256 nys = _mm256_xor_ps(ys, _mm256_set1_ps(-0.0f));
  PE_OPAQUE(nys); /* kernels.h: the negation stays a negation */
  *xo = _mm256_fmadd_ps(x, c, nys);
  *yo = _mm256_fmadd_ps(y, c, _mm256_mul_ps(x, s));
}


/* sin, negated for the inverse rotation by a -1 hidden from the compiler
 * (kernels.h); the branch is uniform over a row. */
static inline __m256 sin_sign(__m256 s, int32_t inverse) {
  if (inverse) {
    __m256 minus_one = _mm256_set1_ps(-1.0f);
    __asm__("" : "+x"(minus_one));
    s = _mm256_mul_ps(s, minus_one);
  }
  return s;
}

/* NeoX, 8 pairs: x at px[0..8), y at py[0..8). */
#define NEOX8(LOAD, STORE, px, py, c, s)                                               \
  do {                                                                                          \
    __m256 xn_, yn_;                                                                            \
    rotate8(LOAD(px), LOAD(py), _mm256_loadu_ps(c), sin_sign(_mm256_loadu_ps(s), inverse),     \
            &xn_, &yn_);                                                                        \
    STORE(px, xn_);                                                                             \
    STORE(py, yn_);                                                                             \
  } while (0)

#define DEFINE_ROW_NEOX(NAME, T, LOAD, STORE)                                                   \
  static void NAME(void *data, const float *cs, int32_t half, int32_t inverse) {                \
    T *row = data;                                                                              \
    int32_t j = 0;                                                                              \
    for (; j + 8 <= half; j += 8)                                                               \
      NEOX8(LOAD, STORE, row + j, row + half + j, cs + j, cs + half + j);              \
    if (j < half) {                                                                             \
      size_t m = (size_t)(half - j);                                                            \
      T x[8] = {0}, y[8] = {0};                                                                 \
      float c[8] = {0}, s[8] = {0};                                                             \
      memcpy(x, row + j, m * sizeof(T));                                                        \
      memcpy(y, row + half + j, m * sizeof(T));                                                 \
      memcpy(c, cs + j, m * sizeof(float));                                                     \
      memcpy(s, cs + half + j, m * sizeof(float));                                              \
      NEOX8(LOAD, STORE, x, y, c, s);                                                  \
      memcpy(row + j, x, m * sizeof(T));                                                        \
      memcpy(row + half + j, y, m * sizeof(T));                                                 \
    }                                                                                           \
  }

/* GPT-J, 8 interleaved pairs at p[0..16). The in-lane shuffles leave x and y
 * in pair order 0,1,4,5 | 2,3,6,7; cos/sin are permuted to match, and the
 * unpacks restore memory order. */
#define GPTJ8(LOAD, STORE, p, c, s)                                                    \
  do {                                                                                          \
    __m256 v0_ = LOAD(p), v1_ = LOAD((p) + 8), xn_, yn_;                                        \
    __m256 cc_ = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_loadu_ps(c)), 0xd8)); \
    __m256 ss_ = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_loadu_ps(s)), 0xd8)); \
    rotate8(_mm256_shuffle_ps(v0_, v1_, 0x88), _mm256_shuffle_ps(v0_, v1_, 0xdd), cc_,          \
            sin_sign(ss_, inverse), &xn_, &yn_);                                                \
    STORE(p, _mm256_unpacklo_ps(xn_, yn_));                                                     \
    STORE((p) + 8, _mm256_unpackhi_ps(xn_, yn_));                                               \
  } while (0)

#define DEFINE_ROW_GPTJ(NAME, T, LOAD, STORE)                                                   \
  static void NAME(void *data, const float *cs, int32_t half, int32_t inverse) {                \
    T *row = data;                                                                              \
    int32_t j = 0;                                                                              \
    for (; j + 8 <= half; j += 8) GPTJ8(LOAD, STORE, row + 2 * j, cs + j, cs + half + j); \
    if (j < half) {                                                                             \
      size_t m = (size_t)(half - j);                                                            \
      T v[16] = {0};                                                                            \
      float c[8] = {0}, s[8] = {0};                                                             \
      memcpy(v, row + 2 * j, 2 * m * sizeof(T));                                                \
      memcpy(c, cs + j, m * sizeof(float));                                                     \
      memcpy(s, cs + half + j, m * sizeof(float));                                              \
      GPTJ8(LOAD, STORE, v, c, s);                                                     \
      memcpy(row + 2 * j, v, 2 * m * sizeof(T));                                                \
    }                                                                                           \
  }

#define DEFINE_ROWS(DT, T)                                                                      \
  DEFINE_ROW_NEOX(row_##DT##_neox, T, load_##DT, store_##DT)                                    \
  DEFINE_ROW_GPTJ(row_##DT##_gptj, T, load_##DT, store_##DT)                                    \
  static void rope_rows_##DT##_avx2(void *data, int64_t head_stride, int64_t n_heads,           \
                                    int64_t token_stride, int64_t n_tokens,                     \
                                    const float *const *cs, int32_t half, int32_t style,        \
                                    int32_t inverse) {                                          \
    if (style == PE_ROPE_GPTJ)                                                                  \
      pe_rope_rows_walk(data, (int64_t)sizeof(T), head_stride, n_heads, token_stride, n_tokens, \
                        cs, half, inverse, row_##DT##_gptj);                                    \
    else                                                                                        \
      pe_rope_rows_walk(data, (int64_t)sizeof(T), head_stride, n_heads, token_stride, n_tokens, \
                        cs, half, inverse, row_##DT##_neox);                                    \
  }

DEFINE_ROWS(f32, float)
DEFINE_ROWS(f16, uint16_t)
DEFINE_ROWS(bf16, uint16_t)

const pe_kernels pe__kernels_avx2 = {
    .name = "avx2",
    .rope_sincos = rope_sincos_avx2,
    .rope_rows = {rope_rows_f32_avx2, rope_rows_f16_avx2, rope_rows_bf16_avx2},
};
