/* enc_avx2.c - AVX2 twins of enc_scalar.c, 8 lanes. Bit-identical to scalar:
 * the same single float operations per element (no FMA; the build uses
 * -ffp-contract=off and these intrinsics never fuse), conversions that round
 * exactly like convert.h, and the scalar helpers of enc_kernels.h for tails.
 * Compiled with -mavx2 -mfma -mf16c. */
#include <immintrin.h>
#include <sleef.h>
#include <string.h>

#include "enc_kernels.h"

/* ---- conversions, lane for lane those of convert.h ---- */

static inline __m256 load8_f32(const float *p) { return _mm256_loadu_ps(p); }

/* f16 -> f32 is exact and keeps subnormals. vcvtph2ps quiets a signalling
 * NaN where convert.h does not, but every loaded value goes through an add
 * before it is stored, and the add quiets it the same way. */
static inline __m256 load8_f16(const uint16_t *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256 load8_bf16(const uint16_t *p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

static inline void store8_f32(float *p, __m256 v) { _mm256_storeu_ps(p, v); }

/* vcvtps2ph with round-to-nearest-even: subnormal results kept, overflow to
 * Inf, NaN quieted keeping sign and the top 9 payload bits, as convert.h. */
static inline void store8_f16(uint16_t *p, __m256 v) {
  _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* convert.h's integer rounding: NaN -> top half | 0x40, else
 * (u + 0x7fff + lsb) >> 16. |u| > 0x7f800000 compares as signed int32
 * safely: both sides are below 2^31. */
static inline void store8_bf16(uint16_t *p, __m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i hi = _mm256_srli_epi32(u, 16);
  __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                   _mm256_set1_epi32(0x7f800000));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
  /* every lane is <= 0xffff, so the unsigned-saturating pack is exact */
  __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128((__m128i *)p, packed);
}

/* ---- row kernels: one body per dtype through a macro over the
 * conversions above, so the arithmetic is written once ---- */

#define ADD_ROW(T, SFX)                                                        \
  static void add_row_##SFX(void *row_, const float *v, int64_t n) {          \
    T *row = row_;                                                             \
    int64_t j = 0;                                                             \
    for (; j + 8 <= n; j += 8)                                                 \
      store8_##SFX(row + j, _mm256_add_ps(load8_##SFX(row + j), _mm256_loadu_ps(v + j))); \
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
      const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);          \
      const __m256i vq = _mm256_set1_epi32((int32_t)qpos);                     \
      const __m256 vns = _mm256_set1_ps(ns);                                   \
      for (; j + 8 <= n; j += 8) {                                             \
        __m256i vj = _mm256_add_epi32(_mm256_set1_epi32((int32_t)j), lane);    \
        __m256 d = _mm256_cvtepi32_ps(_mm256_abs_epi32(_mm256_sub_epi32(vq, vj))); \
        __m256 bias = _mm256_mul_ps(vns, d);                                   \
        store8_##SFX(row + j, _mm256_add_ps(load8_##SFX(row + j), bias));     \
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
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(out + j, load8_##SFX(src + j)); \
    pe__enc_load_##SFX(out + j, src + j, n - j);                               \
  }
LOAD_ROW(f16)
LOAD_ROW(bf16)

static void sincos_avx2(const double *angle, int32_t n, float *s, float *c) {
  int32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    Sleef___m256d_2 r = Sleef_sincosd4_u35avx2(_mm256_loadu_pd(angle + i));
    _mm_storeu_ps(s + i, _mm256_cvtpd_ps(r.x)); /* rounds to nearest even, as (float) */
    _mm_storeu_ps(c + i, _mm256_cvtpd_ps(r.y));
  }
  for (; i < n; i++) pe__sincos_f64_one(angle[i], &s[i], &c[i]);
}

const pe_enc_kernels pe__enc_kernels_avx2 = {
    .sincos = sincos_avx2,
    .name = "avx2",
    .add_row = {add_row_f32, add_row_f16, add_row_bf16},
    .alibi_row = {alibi_row_f32, alibi_row_f16, alibi_row_bf16},
    .load_row = {load_row_f32, load_row_f16, load_row_bf16},
};
