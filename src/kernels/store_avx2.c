/* store_avx2.c - AVX2 + FMA + F16C twins of store_scalar.c, bit-identical.
 * Compiled with -mavx2 -mfma -mf16c; reached only when the AVX2 RoPE table is
 * selected. Eight float lanes; tails go through zero-padded buffers and the
 * same vector code, so only the row's own channels are read and written.
 * The conversions and the rotation are those of avx2.c, lane for lane. */
#include <immintrin.h>
#include <string.h>

#include "kernels.h"
#include "store_kernels.h"

static inline __m256 load_f32(const void *p) { return _mm256_loadu_ps(p); }
static inline void store_f32(void *p, __m256 v) { _mm256_storeu_ps(p, v); }

/* F16C: exact widening; RNE narrowing keeping subnormals, NaN quieted. */
static inline __m256 load_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128(p)); }
static inline void store_f16(void *p, __m256 v) {
  _mm_storeu_si128(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static inline __m256 load_bf16(const void *p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
/* convert.h's integer round-to-nearest-even, NaN quieted. */
static inline void store_bf16(void *p, __m256 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i hi = _mm256_srli_epi32(u, 16);
  __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                  _mm256_and_si256(hi, _mm256_set1_epi32(1)));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                   _mm256_set1_epi32(0x7f800000));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
  _mm_storeu_si128(p, _mm_packus_epi32(_mm256_castsi256_si128(r),
                                       _mm256_extracti128_si256(r, 1)));
}

/* x' = fmaf(x, c, -(y*s)); y' = fmaf(y, c, x*s); the negation a sign flip. */
static inline void rotate8(__m256 x, __m256 y, __m256 c, __m256 s, __m256 *xo, __m256 *yo) {
  __m256 ys = _mm256_mul_ps(y, s);
  PE_OPAQUE(ys); /* clang would move the sign onto s */
  __m256 nys = _mm256_xor_ps(ys, _mm256_set1_ps(-0.0f));
  PE_OPAQUE(nys); /* kernels.h: the negation stays a negation */
  *xo = _mm256_fmadd_ps(x, c, nys);
  *yo = _mm256_fmadd_ps(y, c, _mm256_mul_ps(x, s));
}

/* NeoX, 8 pairs: x at sx/dx[0..8), y at sy/dy[0..8). */
#define NEOX8(LOAD, STORE, sx, sy, dx, dy, c, s)                                                \
  do {                                                                                          \
    __m256 xn_, yn_;                                                                            \
    rotate8(LOAD(sx), LOAD(sy), _mm256_loadu_ps(c), _mm256_loadu_ps(s), &xn_,     \
            &yn_);                                                                        \
    STORE(dx, xn_);                                                                             \
    STORE(dy, yn_);                                                                             \
  } while (0)

#define DEFINE_ROW_NEOX(NAME, S, D, LOAD, STORE)                                                \
  static void NAME(const void *src, void *dst, const float *cs, int32_t half) { \
    const S *in = src;                                                                          \
    D *out = dst;                                                                               \
    int32_t j = 0;                                                                              \
    /* 16 pairs a step: each 64-byte line of the cache row is written by two \
     * adjacent stores (a row is written, not updated). */                  \
    for (; j + 16 <= half; j += 16) {                                                           \
      __m256 xa_, ya_, xb_, yb_;                                                                \
      rotate8(LOAD(in + j), LOAD(in + half + j), _mm256_loadu_ps(cs + j),                       \
              _mm256_loadu_ps(cs + half + j), &xa_, &ya_);                                      \
      rotate8(LOAD(in + j + 8), LOAD(in + half + j + 8), _mm256_loadu_ps(cs + j + 8),           \
              _mm256_loadu_ps(cs + half + j + 8), &xb_, &yb_);                                  \
      STORE(out + j, xa_);                                                                      \
      STORE(out + j + 8, xb_);                                                                  \
      STORE(out + half + j, ya_);                                                               \
      STORE(out + half + j + 8, yb_);                                                           \
    }                                                                                           \
    for (; j + 8 <= half; j += 8)                                                               \
      NEOX8(LOAD, STORE, in + j, in + half + j, out + j, out + half + j, cs + j, cs + half + j);\
    if (j < half) {                                                                             \
      size_t m = (size_t)(half - j);                                                            \
      S x[8] = {0}, y[8] = {0};                                                                 \
      D xo[8], yo[8];                                                                           \
      float c[8] = {0}, s[8] = {0};                                                             \
      memcpy(x, in + j, m * sizeof(S));                                                         \
      memcpy(y, in + half + j, m * sizeof(S));                                                  \
      memcpy(c, cs + j, m * sizeof(float));                                                     \
      memcpy(s, cs + half + j, m * sizeof(float));                                              \
      NEOX8(LOAD, STORE, x, y, xo, yo, c, s);                                                   \
      memcpy(out + j, xo, m * sizeof(D));                                                       \
      memcpy(out + half + j, yo, m * sizeof(D));                                                \
    }                                                                                           \
  }

/* GPT-J, 8 interleaved pairs at sp/dp[0..16): avx2.c's shuffles (x and y in
 * pair order 0,1,4,5 | 2,3,6,7, cos/sin permuted to match, unpacks restore). */
#define GPTJ8(LOAD, STORE, sp, dp, c, s)                                                        \
  do {                                                                                          \
    __m256 v0_ = LOAD(sp), v1_ = LOAD((sp) + 8), xn_, yn_;                                      \
    __m256 cc_ = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_loadu_ps(c)), 0xd8)); \
    __m256 ss_ = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_loadu_ps(s)), 0xd8)); \
    rotate8(_mm256_shuffle_ps(v0_, v1_, 0x88), _mm256_shuffle_ps(v0_, v1_, 0xdd), cc_,          \
            ss_, &xn_, &yn_);                                                                 \
    STORE(dp, _mm256_unpacklo_ps(xn_, yn_));                                                    \
    STORE((dp) + 8, _mm256_unpackhi_ps(xn_, yn_));                                              \
  } while (0)

#define DEFINE_ROW_GPTJ(NAME, S, D, LOAD, STORE)                                                \
  static void NAME(const void *src, void *dst, const float *cs, int32_t half) { \
    const S *in = src;                                                                          \
    D *out = dst;                                                                               \
    int32_t j = 0;                                                                              \
    for (; j + 8 <= half; j += 8)                                                               \
      GPTJ8(LOAD, STORE, in + 2 * j, out + 2 * j, cs + j, cs + half + j);                       \
    if (j < half) {                                                                             \
      size_t m = (size_t)(half - j);                                                            \
      S v[16] = {0};                                                                            \
      D o[16];                                                                                  \
      float c[8] = {0}, s[8] = {0};                                                             \
      memcpy(v, in + 2 * j, 2 * m * sizeof(S));                                                 \
      memcpy(c, cs + j, m * sizeof(float));                                                     \
      memcpy(s, cs + half + j, m * sizeof(float));                                              \
      GPTJ8(LOAD, STORE, v, o, c, s);                                                           \
      memcpy(out + 2 * j, o, 2 * m * sizeof(D));                                                \
    }                                                                                           \
  }

#define DEFINE_PAIR(SN, S, SDT, DN, D, DDT)                                                     \
  DEFINE_ROW_NEOX(row_##SN##_##DN##_neox, S, D, load_##SN, store_##DN)                          \
  DEFINE_ROW_GPTJ(row_##SN##_##DN##_gptj, S, D, load_##SN, store_##DN)                          \
  static void rows_##SN##_##DN(const void *const *src, int64_t shs, void *const *dst,           \
                               int64_t dhs, int64_t n_heads, int64_t n_tokens,                  \
                               const float *const *cs, int32_t half, int32_t head_dim,          \
                               int32_t style) {                                \
    if (style == PE_ROPE_GPTJ)                                                                  \
      pe_rope_store_walk(src, SDT, shs, dst, DDT, dhs, n_heads, n_tokens, cs, half, head_dim,   \
                         row_##SN##_##DN##_gptj);                                      \
    else                                                                                        \
      pe_rope_store_walk(src, SDT, shs, dst, DDT, dhs, n_heads, n_tokens, cs, half, head_dim,   \
                         row_##SN##_##DN##_neox);                                      \
  }

#define DEFINE_FROM(SN, S, SDT)                                                                 \
  DEFINE_PAIR(SN, S, SDT, f32, float, PE_F32)                                                   \
  DEFINE_PAIR(SN, S, SDT, f16, uint16_t, PE_F16)                                                \
  DEFINE_PAIR(SN, S, SDT, bf16, uint16_t, PE_BF16)

DEFINE_FROM(f32, float, PE_F32)
DEFINE_FROM(f16, uint16_t, PE_F16)
DEFINE_FROM(bf16, uint16_t, PE_BF16)

const pe_store_kernels pe__store_kernels_avx2 = {
    .name = "avx2",
    .rope_store_rows = {{rows_f32_f32, rows_f32_f16, rows_f32_bf16},
                        {rows_f16_f32, rows_f16_f16, rows_f16_bf16},
                        {rows_bf16_f32, rows_bf16_f16, rows_bf16_bf16}},
};
