/* enc_avx512.c - AVX-512 twins of enc_scalar.c, 16 lanes. Bit-identical to
 * scalar: the same single float operations per element (no FMA; the build
 * uses -ffp-contract=off and these intrinsics never fuse), conversions that
 * round exactly like convert.h, and the scalar helpers of enc_kernels.h for
 * tails. Compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl. */
#include <immintrin.h>
#include <sleef.h>
#include <string.h>

#include "enc_kernels.h"

/* ---- conversions, lane for lane those of convert.h ---- */

static inline __m512 load16_f32(const float *p) { return _mm512_loadu_ps(p); }

/* f16 -> f32 is exact; vcvtph2ps also keeps subnormals (it ignores DAZ for
 * f16 inputs). It quiets a signalling NaN where convert.h does not, but every
 * loaded value goes through an add before it is stored, and the add quiets
 * it the same way. */
static inline __m512 load16_f16(const uint16_t *p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

static inline __m512 load16_bf16(const uint16_t *p) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

static inline void store16_f32(float *p, __m512 v) { _mm512_storeu_ps(p, v); }

/* vcvtps2ph with round-to-nearest-even: subnormal results kept, overflow to
 * Inf, NaN quieted keeping sign and the top 9 payload bits, as convert.h. */
static inline void store16_f16(uint16_t *p, __m512 v) {
  _mm256_storeu_si256((__m256i *)p,
                      _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* convert.h's integer rounding (not AVX512-BF16's vcvtneps2bf16, which
 * flushes subnormals): NaN -> top half | 0x40, else (u + 0x7fff + lsb) >> 16. */
static inline void store16_bf16(uint16_t *p, __m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i hi = _mm512_srli_epi32(u, 16);
  __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                          _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
  _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(r));
}

/* ---- row kernels: one body per dtype through a macro over the
 * conversions above, so the arithmetic is written once ---- */

#define ADD_ROW(T, SFX)                                                        \
  static void add_row_##SFX(void *row_, const float *v, int64_t n) {          \
    T *row = row_;                                                             \
    int64_t j = 0;                                                             \
    for (; j + 16 <= n; j += 16)                                               \
      store16_##SFX(row + j, _mm512_add_ps(load16_##SFX(row + j), _mm512_loadu_ps(v + j))); \
    pe__enc_add_##SFX(row + j, v + j, n - j);                                  \
  }
ADD_ROW(float, f32)
ADD_ROW(uint16_t, f16)
ADD_ROW(uint16_t, bf16)

/* Distances as int32 lanes: exact when qpos and n fit in int32 (then
 * |qpos - j| < 2^31), and vcvtdq2ps rounds them to nearest-even exactly as
 * the scalar (float) of the int64 does. Longer rows or farther queries take
 * the scalar helper. The bias is neg_slope * d (float multiply), then
 * x + bias (float add), as pe__alibi_bias. */
#define ALIBI_ROW(T, SFX)                                                      \
  static void alibi_row_##SFX(void *row_, int64_t n, int64_t qpos, float ns) { \
    T *row = row_;                                                             \
    int64_t j = 0;                                                             \
    if (qpos <= INT32_MAX && n <= INT32_MAX) {                                 \
      const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); \
      const __m512i vq = _mm512_set1_epi32((int32_t)qpos);                     \
      const __m512 vns = _mm512_set1_ps(ns);                                   \
      for (; j + 16 <= n; j += 16) {                                           \
        __m512i vj = _mm512_add_epi32(_mm512_set1_epi32((int32_t)j), lane);    \
        __m512 d = _mm512_cvtepi32_ps(_mm512_abs_epi32(_mm512_sub_epi32(vq, vj))); \
        __m512 bias = _mm512_mul_ps(vns, d);                                   \
        store16_##SFX(row + j, _mm512_add_ps(load16_##SFX(row + j), bias));   \
      }                                                                        \
    }                                                                          \
    pe__enc_alibi_##SFX(row + j, j, n - j, qpos, ns);                          \
  }
ALIBI_ROW(float, f32)
ALIBI_ROW(uint16_t, f16)
ALIBI_ROW(uint16_t, bf16)

static void load_row_f32(float *out, const void *src, int64_t n) {
  memcpy(out, src, (size_t)n * sizeof(float));
}

#define LOAD_ROW(SFX)                                                          \
  static void load_row_##SFX(float *out, const void *src_, int64_t n) {       \
    const uint16_t *src = src_;                                                \
    int64_t j = 0;                                                             \
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(out + j, load16_##SFX(src + j)); \
    pe__enc_load_##SFX(out + j, src + j, n - j);                               \
  }
LOAD_ROW(f16)
LOAD_ROW(bf16)

static void sincos_avx512(const double *angle, int32_t n, float *s, float *c) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Sleef___m512d_2 r = Sleef_sincosd8_u35avx512f(_mm512_loadu_pd(angle + i));
    _mm256_storeu_ps(s + i, _mm512_cvtpd_ps(r.x)); /* rounds to nearest even, as (float) */
    _mm256_storeu_ps(c + i, _mm512_cvtpd_ps(r.y));
  }
  for (; i < n; i++) pe__sincos_f64_one(angle[i], &s[i], &c[i]);
}

const pe_enc_kernels pe__enc_kernels_avx512 = {
    .sincos = sincos_avx512,
    .name = "avx512",
    .add_row = {add_row_f32, add_row_f16, add_row_bf16},
    .alibi_row = {alibi_row_f32, alibi_row_f16, alibi_row_bf16},
    .load_row = {load_row_f32, load_row_f16, load_row_bf16},
};
