/* avx512.c - AVX-512 (F/BW/DQ/VL) kernels, bit-identical to scalar.c.
 * Compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl (CMakeLists.txt);
 * only reached when cpu.c reports PE_CPU_AVX512. Sixteen float lanes; tails
 * use opmasks, so no row is read or written past its 2*half channels. */
#include <immintrin.h>
#include <sleef.h>

#include "kernels.h"
#include "../cpu.h"
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

/* ---- dtype loads and stores ----
 * Loads widen 16 lanes; stores narrow two vectors at once (the pair's x and
 * y, or a GPT-J row's two halves) and write each to its own address. The
 * main loops pass the constant FULL16 so the masks fold away: masked
 * narrowing stores to memory (vpmovdw m{k}, vcvtps2ph m{k}) are slow. */

static inline __m512 load_f32(const void *p, __mmask16 m) {
  return m == FULL16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}
static inline void store2_f32(void *pa, __mmask16 ma, __m512 a, void *pb, __mmask16 mb, __m512 b) {
  if (ma == FULL16) _mm512_storeu_ps(pa, a); else _mm512_mask_storeu_ps(pa, ma, a);
  if (mb == FULL16) _mm512_storeu_ps(pb, b); else _mm512_mask_storeu_ps(pb, mb, b);
}

static inline __m256i load_16bit(const void *p, __mmask16 m) {
  return m == FULL16 ? _mm256_loadu_si256(p) : _mm256_maskz_loadu_epi16(m, p);
}
/* w = [a's 16 halves | b's 16 halves] */
static inline void store2_16bit(void *pa, __mmask16 ma, void *pb, __mmask16 mb, __m512i w) {
  __m256i lo = _mm512_castsi512_si256(w), hi = _mm512_extracti64x4_epi64(w, 1);
  if (ma == FULL16) _mm256_storeu_si256(pa, lo); else _mm256_mask_storeu_epi16(pa, ma, lo);
  if (mb == FULL16) _mm256_storeu_si256(pb, hi); else _mm256_mask_storeu_epi16(pb, mb, hi);
}

/* vcvtph2ps/vcvtps2ph are exact widening and RNE narrowing with subnormals
 * kept and NaN quieted, which is what convert.h spells out. */
static inline __m512 load_f16(const void *p, __mmask16 m) { return _mm512_cvtph_ps(load_16bit(p, m)); }
static inline void store2_f16(void *pa, __mmask16 ma, __m512 a, void *pb, __mmask16 mb, __m512 b) {
  /* the rounding immediate spelled out: clang needs a constant expression */
  __m512i w = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
      _mm512_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 1);
  store2_16bit(pa, ma, pb, mb, w);
}

static inline __m512 load_bf16(const void *p, __mmask16 m) {
  __m512i w = _mm512_cvtepu16_epi32(load_16bit(p, m));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
/* Integer round-to-nearest-even with NaN quieted, as pe_f32_to_bf16; not
 * vcvtneps2bf16, which flushes subnormals to zero. Lanes end in [0, 0xffff]. */
static inline __m512i bf16_bits(__m512 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i hi = _mm512_srli_epi32(u, 16);
  __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                  _mm512_and_si512(hi, _mm512_set1_epi32(1)));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                          _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
}
/* [a's 16 bf16 | b's 16 bf16] by the integer rounding. vpackusdw is in-lane:
 * 64-bit chunks alternate a, b; one vpermq sorts them (two shuffles for 32
 * halves instead of two slow vpmovdw). */
static inline __m512i bf16_pack_int(__m512 a, __m512 b) {
  __m512i w = _mm512_packus_epi32(bf16_bits(a), bf16_bits(b));
  return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), w);
}
static inline __m512 load_bf16int(const void *p, __mmask16 m) { return load_bf16(p, m); }
static inline void store2_bf16int(void *pa, __mmask16 ma, __m512 a, void *pb, __mmask16 mb,
                                  __m512 b) {
  store2_16bit(pa, ma, pb, mb, bf16_pack_int(a, b));
}

/* vcvtne2ps2bf16 rounds exactly as bf16_bits (RNE, NaN | 0x40) except that
 * it reads subnormal inputs as zero. Those are rare: lanes with a zero
 * exponent and a non-zero mantissa send the 32 values to the integer path. */
#define BF16_TARGET __attribute__((target("avx512bf16")))
BF16_TARGET static inline __m512i bf16_pack_cvt(__m512 a, __m512 b) {
  /* vfpclassps class 0x20: denormal */
  __mmask16 sa = _mm512_fpclass_ps_mask(a, 0x20), sb = _mm512_fpclass_ps_mask(b, 0x20);
  if (__builtin_expect((sa | sb) != 0, 0)) return bf16_pack_int(a, b);
  return _mm512_castps_si512((__m512)_mm512_cvtne2ps_pbh(b, a)); /* b high, a low */
}
static inline __m512 load_bf16cvt(const void *p, __mmask16 m) { return load_bf16(p, m); }
BF16_TARGET static inline void store2_bf16cvt(void *pa, __mmask16 ma, __m512 a, void *pb,
                                              __mmask16 mb, __m512 b) {
  store2_16bit(pa, ma, pb, mb, bf16_pack_cvt(a, b));
}

/* ---- rotation ---- */

/* x' = fmaf(x, c, -(y*s)); y' = fmaf(y, c, x*s). The negation is a sign
 * flip (xor), as C's unary minus, so NaN bits match too. */
static inline void rotate16(__m512 x, __m512 y, __m512 c, __m512 s, __m512 *xo, __m512 *yo) {
  __m512 ys = _mm512_mul_ps(y, s);
  PE_OPAQUE(ys); /* clang would move the sign onto s */
  __m512 nys = _mm512_xor_ps(ys, _mm512_set1_ps(-0.0f));
  PE_OPAQUE(nys); /* kernels.h: the negation stays a negation */
  *xo = _mm512_fmadd_ps(x, c, nys);
  *yo = _mm512_fmadd_ps(y, c, _mm512_mul_ps(x, s));
}


/* NeoX, 16 pairs: x = row[j..], y = row[half + j..]; lanes outside m are
 * neither read nor written. */
/* sin, negated for the inverse rotation by a -1 hidden from the compiler
 * (kernels.h); the branch is uniform over a row. */
static inline __m512 load_sin(const float *p, __mmask16 m, int32_t inverse) {
  __m512 s = load_f32(p, m);
  if (inverse) {
    __m512 minus_one = _mm512_set1_ps(-1.0f);
    __asm__("" : "+v"(minus_one));
    s = _mm512_mul_ps(s, minus_one);
  }
  return s;
}

#define NEOX16(DT, row, cs, half, j, m)                                                   \
  do {                                                                                          \
    __m512 xn_, yn_;                                                                            \
    rotate16(load_##DT((row) + (j), m), load_##DT((row) + (half) + (j), m),                     \
             load_f32((cs) + (j), m), load_sin((cs) + (half) + (j), m, inverse), &xn_, &yn_);      \
    store2_##DT((row) + (j), m, xn_, (row) + (half) + (j), m, yn_);                             \
  } while (0)

/* GPT-J, 16 interleaved pairs = two vectors: split into x (even lanes) and y
 * (odd lanes), rotate, interleave back. m: pairs, m0/m1: the two vectors. */
#define GPTJ16(DT, row, cs, half, j, m, m0, m1)                                           \
  do {                                                                                          \
    const __m512i even_ = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,  \
                                            28, 30);                                            \
    const __m512i odd_ = _mm512_add_epi32(even_, _mm512_set1_epi32(1));                         \
    const __m512i lo_ = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7,   \
                                          23);                                                  \
    const __m512i hi_ = _mm512_add_epi32(lo_, _mm512_set1_epi32(8));                            \
    __m512 v0_ = load_##DT((row) + 2 * (j), m0), v1_ = load_##DT((row) + 2 * (j) + 16, m1);    \
    __m512 xn_, yn_;                                                                            \
    rotate16(_mm512_permutex2var_ps(v0_, even_, v1_), _mm512_permutex2var_ps(v0_, odd_, v1_),   \
             load_f32((cs) + (j), m), load_sin((cs) + (half) + (j), m, inverse), &xn_, &yn_);      \
    store2_##DT((row) + 2 * (j), m0, _mm512_permutex2var_ps(xn_, lo_, yn_),                     \
                (row) + 2 * (j) + 16, m1, _mm512_permutex2var_ps(xn_, hi_, yn_));               \
  } while (0)

/* Inlined into the walk: a decode step is 40 rows of 4 iterations, where a
 * call and the per-row setup per row cost as much as the rotation. */
#define ROW_INLINE static inline __attribute__((always_inline))

#define DEFINE_ROW_NEOX(DT, T, ATTR)                                                            \
  ATTR ROW_INLINE void row_##DT##_neox(void *data, const float *cs, int32_t half, int32_t inverse) { \
    T *row = data;                                                                              \
    int32_t j = 0;                                                                              \
    for (; j + 16 <= half; j += 16) NEOX16(DT, row, cs, half, j, FULL16);                 \
    if (j < half) NEOX16(DT, row, cs, half, j, mask_first(half - j));                     \
  }

#define DEFINE_ROW_GPTJ(DT, T, ATTR)                                                            \
  ATTR ROW_INLINE void row_##DT##_gptj(void *data, const float *cs, int32_t half, int32_t inverse) { \
    T *row = data;                                                                              \
    int32_t j = 0;                                                                              \
    for (; j + 16 <= half; j += 16) GPTJ16(DT, row, cs, half, j, FULL16, FULL16, FULL16); \
    if (j < half) {                                                                             \
      int32_t n = 2 * (half - j); /* elements left in this row, < 32 */                         \
      __mmask16 m1 = n > 16 ? mask_first(n - 16) : (__mmask16)0;                                \
      GPTJ16(DT, row, cs, half, j, mask_first(half - j), mask_first(n), m1);              \
    }                                                                                           \
  }

#define DEFINE_ROWS(DT, T, ATTR)                                                                \
  DEFINE_ROW_NEOX(DT, T, ATTR)                                                                  \
  DEFINE_ROW_GPTJ(DT, T, ATTR)                                                                  \
  ATTR static void rope_rows_##DT##_avx512(void *data, int64_t head_stride, int64_t n_heads,         \
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

#define NO_ATTR
DEFINE_ROWS(f32, float, NO_ATTR)
DEFINE_ROWS(f16, uint16_t, NO_ATTR)
DEFINE_ROWS(bf16int, uint16_t, NO_ATTR)
DEFINE_ROWS(bf16cvt, uint16_t, BF16_TARGET)

/* The bf16 rows: AVX512-BF16's conversion when the CPU has it (probed apart
 * from the base AVX-512 set), the integer rounding otherwise. */
static void rope_rows_bf16_avx512(void *data, int64_t head_stride, int64_t n_heads,
                                  int64_t token_stride, int64_t n_tokens, const float *const *cs,
                                  int32_t half, int32_t style, int32_t inverse) {
  if (pe__cpu_features() & PE_CPU_AVX512BF16)
    rope_rows_bf16cvt_avx512(data, head_stride, n_heads, token_stride, n_tokens, cs, half, style,
                             inverse);
  else
    rope_rows_bf16int_avx512(data, head_stride, n_heads, token_stride, n_tokens, cs, half, style,
                             inverse);
}

const pe_kernels pe__kernels_avx512 = {
    .name = "avx512",
    .rope_sincos = rope_sincos_avx512,
    .rope_rows = {rope_rows_f32_avx512, rope_rows_f16_avx512, rope_rows_bf16_avx512},
};
