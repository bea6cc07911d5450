/* avx512.c - AVX-512 (F/BW/DQ/VL) kernels, bit-identical to scalar.c.
 * Compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl (CMakeLists.txt);
 * only reached when cpu.c reports PE_CPU_AVX512. Sixteen float lanes; tails
 * use opmasks, so no row is read or written past its 2*half channels. */
#include <immintrin.h>
#include <sleef.h>

#include "kernels.h"
#include "sincos_consts.h"

#define FULL16 ((__mmask16)0xffff)

static inline __mmask16 mask_first(int32_t n) { /* lanes [0, n), n in [0, 16] */
  return n >= 16 ? FULL16 : (__mmask16)((1u << n) - 1u);
}

/* ---- cos/sin rows ---- */

/* theta - k*2pi, k = nearbyint(theta/2pi): scalar.c's sincos_one, 8 lanes. */
static inline __m512d reduce_2pi(__m512d theta) {
  __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(theta, _mm512_set1_pd(PE_INV_2PI)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(PE_2PI_HI), theta);
  r = _mm512_fnmadd_pd(k, _mm512_set1_pd(PE_2PI_LO), r);
  /* |r| <= PE_REDUCED_MAX, false for NaN: keep r, else 0 */
  __mmask8 ok = _mm512_cmp_pd_mask(_mm512_abs_pd(r), _mm512_set1_pd(PE_REDUCED_MAX), _CMP_LE_OQ);
  return _mm512_maskz_mov_pd(ok, r);
}

/* cos/sin of p*freq[0..16) (lanes outside m are computed on zeros and not
 * stored): the double reduction, SLEEF's float sincos of the rounded angle,
 * then the first-order fix for the rounding dr. */
static inline void sincos16(__m512d p, const double *freq, __mmask16 m, float scale,
                            float *cos_out, float *sin_out) {
  __m512d r0 = reduce_2pi(_mm512_mul_pd(p, _mm512_maskz_loadu_pd((__mmask8)m, freq)));
  __m512d r1 = reduce_2pi(_mm512_mul_pd(p, _mm512_maskz_loadu_pd((__mmask8)(m >> 8), freq + 8)));
  __m256 f0 = _mm512_cvtpd_ps(r0), f1 = _mm512_cvtpd_ps(r1);
  __m256 d0 = _mm512_cvtpd_ps(_mm512_sub_pd(r0, _mm512_cvtps_pd(f0)));
  __m256 d1 = _mm512_cvtpd_ps(_mm512_sub_pd(r1, _mm512_cvtps_pd(f1)));
  __m512 rf = _mm512_insertf32x8(_mm512_castps256_ps512(f0), f1, 1);
  __m512 dr = _mm512_insertf32x8(_mm512_castps256_ps512(d0), d1, 1);
  Sleef___m512_2 sc = Sleef_sincosf16_u10avx512f(rf); /* .x = sin, .y = cos */
  __m512 c = _mm512_fnmadd_ps(sc.x, dr, sc.y);        /* fmaf(-s, dr, c) */
  __m512 s = _mm512_fmadd_ps(sc.y, dr, sc.x);         /* fmaf(c, dr, s) */
  if (scale != 1.0f) {
    c = _mm512_mul_ps(c, _mm512_set1_ps(scale));
    s = _mm512_mul_ps(s, _mm512_set1_ps(scale));
  }
  _mm512_mask_storeu_ps(cos_out, m, c);
  _mm512_mask_storeu_ps(sin_out, m, s);
}

static void rope_sincos_avx512(int64_t pos0, int64_t n, const double *freq, int32_t half,
                               float scale, float *out) {
  for (int64_t r = 0; r < n; r++) {
    __m512d p = _mm512_set1_pd((double)(pos0 + r));
    float *row = out + r * 2 * half;
    for (int32_t i = 0; i < half; i += 16)
      sincos16(p, freq + i, mask_first(half - i), scale, row + i, row + half + i);
  }
}

/* ---- dtype loads and stores (16 lanes, masked) ---- */

static inline __m512 load_f32(const void *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
static inline void store_f32(void *p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }

/* vcvtph2ps/vcvtps2ph are exact widening and RNE narrowing with subnormals
 * kept and NaN quieted, which is what convert.h spells out. */
static inline __m512 load_f16(const void *p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
static inline void store_f16(void *p, __mmask16 m, __m512 v) {
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static inline __m512 load_bf16(const void *p, __mmask16 m) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
/* Integer round-to-nearest-even with NaN quieted, as pe_f32_to_bf16; not
 * vcvtneps2bf16, which flushes subnormals to zero. */
static inline void store_bf16(void *p, __mmask16 m, __m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i hi = _mm512_srli_epi32(u, 16);
  __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                  _mm512_and_si512(hi, _mm512_set1_epi32(1)));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                          _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(r));
}

/* ---- rotation ---- */

/* x' = fmaf(x, c, -(y*s)); y' = fmaf(y, c, x*s). The negation is a sign
 * flip (xor), as C's unary minus, so NaN bits match too. */
static inline void rotate16(__m512 x, __m512 y, __m512 c, __m512 s, __m512 *xo, __m512 *yo) {
  __m512 nys = _mm512_xor_ps(_mm512_mul_ps(y, s), _mm512_set1_ps(-0.0f));
  *xo = _mm512_fmadd_ps(x, c, nys);
  *yo = _mm512_fmadd_ps(y, c, _mm512_mul_ps(x, s));
}

/* sin times sign (+-1, see kernels.h: never a branch on a constant -1) */
static inline __m512 load_sin(const float *p, __mmask16 m, __m512 sign) {
  return _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p), sign);
}

/* NeoX: x = row[j], y = row[half + j]. */
#define DEFINE_ROW_NEOX(NAME, T, LOAD, STORE)                                                   \
  static void NAME(void *data, const float *cs, int32_t half, int32_t inverse) {                \
    T *row = data;                                                                              \
    const __m512 sign = _mm512_set1_ps(inverse ? -1.0f : 1.0f);                                 \
    for (int32_t j = 0; j < half; j += 16) {                                                    \
      __mmask16 m = mask_first(half - j);                                                       \
      __m512 xn, yn;                                                                            \
      rotate16(LOAD(row + j, m), LOAD(row + half + j, m), _mm512_maskz_loadu_ps(m, cs + j),     \
               load_sin(cs + half + j, m, sign), &xn, &yn);                                  \
      STORE(row + j, m, xn);                                                                    \
      STORE(row + half + j, m, yn);                                                             \
    }                                                                                           \
  }

/* GPT-J: 16 interleaved pairs are two vectors; split them into x (even
 * lanes) and y (odd lanes), rotate, and interleave back. */
#define DEFINE_ROW_GPTJ(NAME, T, LOAD, STORE)                                                   \
  static void NAME(void *data, const float *cs, int32_t half, int32_t inverse) {                \
    T *row = data;                                                                              \
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,   \
                                           28, 30);                                             \
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));                           \
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23); \
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));                              \
    const __m512 sign = _mm512_set1_ps(inverse ? -1.0f : 1.0f);                                 \
    for (int32_t j = 0; j < half; j += 16) {                                                    \
      int32_t n = 2 * (half - j); /* elements left in this row */                               \
      __mmask16 m = mask_first(half - j), m0 = mask_first(n);                                   \
      __mmask16 m1 = n > 16 ? mask_first(n - 16) : (__mmask16)0;                                \
      __m512 v0 = LOAD(row + 2 * j, m0), v1 = LOAD(row + 2 * j + 16, m1);                       \
      __m512 xn, yn;                                                                            \
      rotate16(_mm512_permutex2var_ps(v0, even, v1), _mm512_permutex2var_ps(v0, odd, v1),       \
               _mm512_maskz_loadu_ps(m, cs + j), load_sin(cs + half + j, m, sign), &xn, &yn); \
      STORE(row + 2 * j, m0, _mm512_permutex2var_ps(xn, lo, yn));                               \
      STORE(row + 2 * j + 16, m1, _mm512_permutex2var_ps(xn, hi, yn));                          \
    }                                                                                           \
  }

#define DEFINE_ROWS(DT, T)                                                                      \
  DEFINE_ROW_NEOX(row_##DT##_neox, T, load_##DT, store_##DT)                                    \
  DEFINE_ROW_GPTJ(row_##DT##_gptj, T, load_##DT, store_##DT)                                    \
  static void rope_rows_##DT##_avx512(void *data, int64_t head_stride, int64_t n_heads,         \
                                      int64_t token_stride, int64_t n_tokens,                   \
                                      const float *const *cs, int32_t half, int32_t style,      \
                                      int32_t inverse) {                                        \
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

const pe_kernels pe__kernels_avx512 = {
    .name = "avx512",
    .rope_sincos = rope_sincos_avx512,
    .rope_rows = {rope_rows_f32_avx512, rope_rows_f16_avx512, rope_rows_bf16_avx512},
};
