/* store_avx512.c - AVX-512 (F/BW/DQ/VL) twins of store_scalar.c,
 * bit-identical. Reached only when the AVX-512 RoPE table is selected.
 * Sixteen float lanes; tails use opmasks, so no row is read or written past
 * its channels. The conversions and the rotation are those of avx512.c. */
#include <immintrin.h>

#include "kernels.h"
#include "store_kernels.h"

#define FULL16 ((__mmask16)0xffff)

static inline __mmask16 mask_first(int32_t n) { /* lanes [0, n), n in [0, 16] */
  return n >= 16 ? FULL16 : (__mmask16)((1u << n) - 1u);
}

/* The main loops pass the constant FULL16, which selects plain loads. */
static inline __m512 load_f32(const void *p, __mmask16 m) {
  return m == FULL16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}
static inline __m256i load_16bit(const void *p, __mmask16 m) {
  return m == FULL16 ? _mm256_loadu_si256(p) : _mm256_maskz_loadu_epi16(m, p);
}
static inline void store_f32(void *p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }

static inline __m512 load_f16(const void *p, __mmask16 m) {
  return _mm512_cvtph_ps(load_16bit(p, m));
}
static inline __m256i narrow_f16(__m512 v) {
  return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline void store_f16(void *p, __mmask16 m, __m512 v) {
  _mm256_mask_storeu_epi16(p, m, narrow_f16(v));
}

static inline __m512 load_bf16(const void *p, __mmask16 m) {
  __m512i w = _mm512_cvtepu16_epi32(load_16bit(p, m));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
/* convert.h's integer rounding (not vcvtneps2bf16, which flushes subnormals). */
/* The rounded bf16 bits of v in the low half of each 32-bit lane. */
static inline __m512i bf16_lanes(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i hi = _mm512_srli_epi32(u, 16);
  __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                  _mm512_and_si512(hi, _mm512_set1_epi32(1)));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                          _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
}
static inline __m256i narrow_bf16(__m512 v) { return _mm512_cvtepi32_epi16(bf16_lanes(v)); }
static inline void store_bf16(void *p, __mmask16 m, __m512 v) {
  _mm256_mask_storeu_epi16(p, m, narrow_bf16(v));
}

/* 32 consecutive elements a | b in one go. A cache row is written, not
 * updated: whole 64-byte stores let the CPU skip reading the line first,
 * where two masked 32-byte halves each need it (the fused store's cost on
 * 16-bit caches was those reads). */
static inline void store32_f32(void *p, __m512 a, __m512 b) {
  _mm512_storeu_ps(p, a);
  _mm512_storeu_ps((float *)p + 16, b);
}
static inline void store32_f16(void *p, __m512 a, __m512 b) {
  _mm512_storeu_si512(p, _mm512_inserti64x4(_mm512_castsi256_si512(narrow_f16(a)), narrow_f16(b), 1));
}
/* vpackusdw works within 128-bit lanes, leaving 64-bit chunks of a and b
 * alternating; one vpermq puts a's 16 halves before b's. Two cheap shuffles
 * instead of two vpmovdw (each two uops on the shuffle port). Every lane is
 * <= 0xffff, so the unsigned saturation never bites. */
static inline void store32_bf16(void *p, __m512 a, __m512 b) {
  __m512i w = _mm512_packus_epi32(bf16_lanes(a), bf16_lanes(b));
  _mm512_storeu_si512(p, _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), w));
}

static inline void rotate16(__m512 x, __m512 y, __m512 c, __m512 s, __m512 *xo, __m512 *yo) {
  __m512 ys = _mm512_mul_ps(y, s);
  PE_OPAQUE(ys); /* clang would move the sign onto s */
  __m512 nys = _mm512_xor_ps(ys, _mm512_set1_ps(-0.0f));
  PE_OPAQUE(nys); /* kernels.h: the negation stays a negation */
  *xo = _mm512_fmadd_ps(x, c, nys);
  *yo = _mm512_fmadd_ps(y, c, _mm512_mul_ps(x, s));
}

static inline __m512 load_sin(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }

#define DEFINE_ROW_NEOX(NAME, S, D, LOAD, STORE, STORE32)                                       \
  static void NAME(const void *src, void *dst, const float *cs, int32_t half) { \
    const S *in = src;                                                                          \
    D *out = dst;                                                                               \
    int32_t j = 0;                                                                              \
    for (; j + 32 <= half; j += 32) {                                                           \
      __m512 xa, ya, xb, yb;                                                                    \
      rotate16(LOAD(in + j, FULL16), LOAD(in + half + j, FULL16), _mm512_loadu_ps(cs + j),      \
               load_sin(cs + half + j, FULL16), &xa, &ya);                             \
      rotate16(LOAD(in + j + 16, FULL16), LOAD(in + half + j + 16, FULL16),                     \
               _mm512_loadu_ps(cs + j + 16), load_sin(cs + half + j + 16, FULL16), &xb, \
               &yb);                                                                            \
      STORE32(out + j, xa, xb);                                                                 \
      STORE32(out + half + j, ya, yb);                                                          \
    }                                                                                           \
    for (; j < half; j += 16) {                                                                 \
      __mmask16 m = mask_first(half - j);                                                       \
      __m512 xn, yn;                                                                            \
      rotate16(LOAD(in + j, m), LOAD(in + half + j, m), _mm512_maskz_loadu_ps(m, cs + j),       \
               load_sin(cs + half + j, m), &xn, &yn);                                  \
      STORE(out + j, m, xn);                                                                    \
      STORE(out + half + j, m, yn);                                                             \
    }                                                                                           \
  }

/* 16 interleaved pairs are two vectors: even lanes x, odd lanes y. */
#define DEFINE_ROW_GPTJ(NAME, S, D, LOAD, STORE, STORE32)                                       \
  static void NAME(const void *src, void *dst, const float *cs, int32_t half) { \
    const S *in = src;                                                                          \
    D *out = dst;                                                                               \
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,   \
                                           28, 30);                                             \
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));                           \
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23); \
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));                              \
    int32_t j = 0;                                                                              \
    for (; j + 16 <= half; j += 16) {                                                           \
      __m512 v0 = LOAD(in + 2 * j, FULL16), v1 = LOAD(in + 2 * j + 16, FULL16);                 \
      __m512 xn, yn;                                                                            \
      rotate16(_mm512_permutex2var_ps(v0, even, v1), _mm512_permutex2var_ps(v0, odd, v1),       \
               _mm512_loadu_ps(cs + j), load_sin(cs + half + j, FULL16), &xn, &yn);    \
      STORE32(out + 2 * j, _mm512_permutex2var_ps(xn, lo, yn), _mm512_permutex2var_ps(xn, hi, yn)); \
    }                                                                                           \
    for (; j < half; j += 16) {                                                                 \
      int32_t n = 2 * (half - j);                                                               \
      __mmask16 m = mask_first(half - j), m0 = mask_first(n);                                   \
      __mmask16 m1 = n > 16 ? mask_first(n - 16) : (__mmask16)0;                                \
      __m512 v0 = LOAD(in + 2 * j, m0), v1 = LOAD(in + 2 * j + 16, m1);                         \
      __m512 xn, yn;                                                                            \
      rotate16(_mm512_permutex2var_ps(v0, even, v1), _mm512_permutex2var_ps(v0, odd, v1),       \
               _mm512_maskz_loadu_ps(m, cs + j), load_sin(cs + half + j, m), &xn, &yn); \
      STORE(out + 2 * j, m0, _mm512_permutex2var_ps(xn, lo, yn));                               \
      STORE(out + 2 * j + 16, m1, _mm512_permutex2var_ps(xn, hi, yn));                          \
    }                                                                                           \
  }

#define DEFINE_PAIR(SN, S, SDT, DN, D, DDT)                                                     \
  DEFINE_ROW_NEOX(row_##SN##_##DN##_neox, S, D, load_##SN, store_##DN, store32_##DN)           \
  DEFINE_ROW_GPTJ(row_##SN##_##DN##_gptj, S, D, load_##SN, store_##DN, store32_##DN)           \
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

const pe_store_kernels pe__store_kernels_avx512 = {
    .name = "avx512",
    .rope_store_rows = {{rows_f32_f32, rows_f32_f16, rows_f32_bf16},
                        {rows_f16_f32, rows_f16_f16, rows_f16_bf16},
                        {rows_bf16_f32, rows_bf16_f16, rows_bf16_bf16}},
};
