/* floor_avx512.c - the floor kernels (floor_vec.h) for AVX-512 F/BW/VL, 16
 * float lanes, built with -mavx512f -mavx512bw -mavx512dq -mavx512vl
 * (bench/CMakeLists.txt) and run only when the library runs its avx512
 * path. floor_avx512bf16.c builds this file again with PB_FLOOR_BF16 and
 * -mavx512bf16: bf16 narrowing by vcvtne2ps2bf16 (one instruction for 32
 * values, nearest even, NaN quieted), chosen on CPUs that have it, and
 * floor_avx512bf16_eo.c a third time with PB_FLOOR_BF16_EO: bf16 rows in
 * even/odd order narrowed by vcvtne2ps2bf16 (pe-bench takes the faster of
 * the two). docs/compute-floor.md counts each primitive's instructions. */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "floor.h"
#include "floor_q8.h"
#include "posenc.h"

#define VL 16
#if defined(PB_FLOOR_BF16_EO)
#define FLOOR_FN pb_floor_avx512bf16_eo
#elif defined(PB_FLOOR_BF16)
#define FLOOR_FN pb_floor_avx512bf16
#else
#define FLOOR_FN pb_floor_avx512
#endif
typedef __m512 vf;
#define FP static inline __attribute__((always_inline))

FP __m512i i1(int32_t x) { return _mm512_set1_epi32(x); }

/* Word indices for vpermw/vpermt2w (bf16 in and out; bf16_eo_back: the
 * even elements' words from the low half and the odd ones' from the high
 * half, back in pair order). */
#if defined(PB_FLOOR_BF16_EO)
static const uint16_t bf16_eo_back[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                          21, 6, 22, 7, 23, 8,  24, 9,  25, 10, 26,
                                          11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
#endif
static const uint16_t bf16_up[32] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7,
                                     8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15};
static const uint16_t bf16_down[32] = {1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21,
                                       23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43,
                                       45, 47, 49, 51, 53, 55, 57, 59, 61, 63};
FP __m512i words(const uint16_t *w) { return _mm512_loadu_si512(w); }

/* f16: vcvtph2ps; bf16: one vpermw with zeroing puts half i at the top of
 * 32-bit lane i. */
FP vf f_ld(int dt, const void *p) {
  if (dt == PE_F32) return _mm512_loadu_ps(p);
  if (dt == PE_F16) return _mm512_cvtph_ps(_mm256_loadu_si256(p));
  return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(
      0xaaaaaaaau, words(bf16_up), _mm512_castsi256_si512(_mm256_loadu_si256(p))));
}

/* bf16 nearest even in integer operations: u + 0x7fff + lsb (the bf16 in
 * the top half), a NaN (u | 0x400000) by a masked or taken only when the
 * vector holds one (a mask compare, kortest, a branch). */
FP __m512i bf16_rne(vf v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i r = _mm512_add_epi32(
      u, _mm512_add_epi32(i1(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), i1(1))));
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  if (__builtin_expect(nan != 0, 0)) r = _mm512_mask_or_epi32(r, nan, u, i1(0x400000));
  return r;
}

#if defined(PB_FLOOR_BF16)
/* vcvtne2ps2bf16 / vcvtneps2bf16 read a subnormal input as zero, so an
 * exact row tests what they give: a +-0 word (vptestnmw against 0x7fff, a
 * kortest, a branch: the library's test, vec_avx512.h) sends those values
 * to the integer rounding above. The benchmark's data never take the
 * branch; bench_floor_kernels checks rows of subnormals through it. */
FP __mmask32 bf16_zero_words(__m512i w) { return _mm512_testn_epi16_mask(w, _mm512_set1_epi16(0x7fff)); }
FP __m512i bf16_exact2(vf a, vf b) { /* a low, b high */
  return _mm512_permutex2var_epi16(bf16_rne(a), _mm512_loadu_si512(bf16_down), bf16_rne(b));
}
FP __m256i bf16_exact1(vf v) {
  return _mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_loadu_si512(bf16_down), bf16_rne(v)));
}
/* n <= 4 pairs of vectors rounded to bf16 at p, p + 64 bytes, ...: the +-0
 * test once for the group, as the library's grouped rows take it
 * (floor_vec.h's f_st2_g calls it for bf16; f_st2 for one pair). */
#define F_BF16_ST2_G 1
FP void f_bf16_st2_g(int n, char *p, const vf *v) {
  __m512i w[4];
  __mmask32 z = 0;
  for (int i = 0; i < 4; i++)
    if (i < n) {
      w[i] = (__m512i)_mm512_cvtne2ps_pbh(v[2 * i + 1], v[2 * i]);
      z |= bf16_zero_words(w[i]);
    }
  if (__builtin_expect(z != 0, 0))
    for (int i = 0; i < 4; i++)
      if (i < n) w[i] = bf16_exact2(v[2 * i], v[2 * i + 1]);
  for (int i = 0; i < 4; i++)
    if (i < n) _mm512_storeu_si512(p + 64 * i, w[i]);
}
#endif

FP void f_st(int dt, void *p, vf v) {
  if (dt == PE_F32)
    _mm512_storeu_ps(p, v);
  else if (dt == PE_F16)
    _mm256_storeu_si256(p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  else
#if defined(PB_FLOOR_BF16)
  {
    __m256i w = (__m256i)_mm512_cvtneps_pbh(v);
    if (__builtin_expect(_mm256_testn_epi16_mask(w, _mm256_set1_epi16(0x7fff)) != 0, 0))
      w = bf16_exact1(v);
    _mm256_storeu_si256(p, w);
  }
#else /* the top halves down by one vpermw */
    _mm256_storeu_si256(p, _mm512_castsi512_si256(
                               _mm512_permutexvar_epi16(words(bf16_down), bf16_rne(v))));
#endif
}

FP void f_st2(int dt, void *p, vf a, vf b) {
  if (dt == PE_BF16) {
#if defined(PB_FLOOR_BF16)
    f_bf16_st2_g(1, p, (const vf[2]){a, b});
#else /* the top halves of both by one vpermt2w */
    _mm512_storeu_si512(p, _mm512_permutex2var_epi16(bf16_rne(a), words(bf16_down), bf16_rne(b)));
#endif
    return;
  }
  f_st(dt, p, a);
  f_st(dt, (char *)p + VL * (dt == PE_F32 ? 4 : 2), b);
}

/* bf16 rows written as bf16 in even/odd order (FL_EO, floor_vec.h) without
 * AVX512-BF16, as the library's avx512 path takes them: 2*VL halves in one
 * 64-byte load, the 32-bit word of elements 2i and 2i+1 widened to the even
 * one's float by vpslld 16 and the odd one's by vpandd 0xffff0000 (no
 * vpermw); back, floor_avx2.c's carry trick at 512 bits: the truncated
 * bf16 t (the even floats' top halves shifted down, merged with the odd
 * ones' by a masked word move) plus bit 15 of vpavgw(l, 0x7ffe | (t & 1)),
 * l the bottom halves; 7 operations (the or and the and in one vpternlogd)
 * and a NaN test (vcmpps unordered of e and o into a mask, kortest, a
 * branch) per 2*VL halves. Intel Xeon (AVX-512 FP16/BF16), Llama-3-8B 512
 * tokens: 0.32 ms against 0.43 in the natural order.
 *
 * With AVX512-BF16 (PB_FLOOR_BF16_EO, floor_avx512bf16_eo.c) the even/odd
 * rows narrow by vcvtne2ps2bf16 (the even elements to the low 16 words,
 * the odd ones to the high) and one vpermw puts them back in pair order: a
 * vpermw per 32 values where the natural order takes 2 to widen them. On
 * that Xeon, where vpermw is one uop, the even/odd floor took 0.26 ms
 * against 0.24 in the natural order; AMD Zen 4's vpermw zmm takes several
 * cycles (the library's rows go even/odd there), so pe-bench times both
 * and takes the faster. Both test the rounded words for +-0 (f_st2). */
#if defined(PB_FLOOR_BF16_EO) /* even and odd rounded in integers, back in pair order */
FP __m512i bf16_exact_eo(vf e, vf o) {
  return _mm512_mask_mov_epi16(_mm512_srli_epi32(bf16_rne(e), 16), 0xaaaaaaaau, bf16_rne(o));
}
#endif
#if !defined(PB_FLOOR_BF16) || defined(PB_FLOOR_BF16_EO)
#define FL_EO 1
FP void f_ld_eo(const void *p, vf *e, vf *o) {
  __m512i w = _mm512_loadu_si512(p);
  *e = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  *o = _mm512_castsi512_ps(_mm512_and_si512(w, i1((int32_t)0xffff0000u)));
}
FP void f_st_eo(void *p, vf e, vf o) {
#if defined(PB_FLOOR_BF16_EO)
  __m512i w = (__m512i)_mm512_cvtne2ps_pbh(o, e);
  if (__builtin_expect(bf16_zero_words(w) != 0, 0))
    w = bf16_exact_eo(e, o);
  else
    w = _mm512_permutexvar_epi16(words(bf16_eo_back), w);
  _mm512_storeu_si512(p, w);
#else
  __m512i ue = _mm512_castps_si512(e), uo = _mm512_castps_si512(o), w;
  const __mmask32 odd = 0xaaaaaaaau;
  if (__builtin_expect(_mm512_cmp_ps_mask(e, o, _CMP_UNORD_Q) != 0, 0)) {
    w = _mm512_mask_mov_epi16(_mm512_srli_epi32(bf16_rne(e), 16), odd, bf16_rne(o));
  } else {
    __m512i t = _mm512_mask_mov_epi16(_mm512_srli_epi32(ue, 16), odd, uo);
    __m512i l = _mm512_mask_mov_epi16(ue, odd, _mm512_slli_epi32(uo, 16));
    /* (t & 1) | 0x7ffe: vpternlogd 0xf8 = A | (B & C) with A = 0x7ffe */
    __m512i v = _mm512_ternarylogic_epi32(_mm512_set1_epi16(0x7ffe), t, _mm512_set1_epi16(1), 0xf8);
    w = _mm512_add_epi16(t, _mm512_srli_epi16(_mm512_avg_epu16(l, v), 15));
  }
  _mm512_storeu_si512(p, w);
#endif
}
#endif

#if defined(PB_FLOOR_BF16_EO)
/* n <= 4 even/odd vectors to p[i], their +-0 tests taken together as the
 * library's grouped rows take them (vec_avx512.h's bf16_st_eo_g): a
 * vptestnmw each, the masks or-ed, one branch. */
#define F_ST_EO_G 1
FP void f_st_eo_g(int n, char *const *p, const vf *e, const vf *o) {
  __m512i w[4];
  __mmask32 z = 0;
  for (int i = 0; i < 4; i++)
    if (i < n) {
      w[i] = (__m512i)_mm512_cvtne2ps_pbh(o[i], e[i]);
      z |= bf16_zero_words(w[i]);
    }
  for (int i = 0; i < 4; i++)
    if (i < n)
      w[i] = __builtin_expect(z != 0, 0) ? bf16_exact_eo(e[i], o[i])
                                         : _mm512_permutexvar_epi16(words(bf16_eo_back), w[i]);
  for (int i = 0; i < 4; i++)
    if (i < n) _mm512_storeu_si512(p[i], w[i]);
}
#endif

FP vf f_ldf(const float *p) { return _mm512_loadu_ps(p); }
FP vf f_set1(float x) { return _mm512_set1_ps(x); }
FP vf f_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
FP vf f_add(vf a, vf b) { return _mm512_add_ps(a, b); }
FP vf f_div(vf a, vf b) { return _mm512_div_ps(a, b); }
FP vf f_fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
FP vf f_fmsub(vf a, vf b, vf c) { return _mm512_fmsub_ps(a, b, c); }
FP vf f_fmaddsub(vf a, vf b, vf c) { return _mm512_fmaddsub_ps(a, b, c); }
FP vf f_swap(vf v) { return _mm512_permute_ps(v, 0xb1); }
FP vf f_dup(const float *p) { /* one 32-byte load, one vpermps */
  return _mm512_permutexvar_ps(
      _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
      _mm512_castps256_ps512(_mm256_loadu_ps(p)));
}
FP float f_hsum(vf v) { return _mm512_reduce_add_ps(v); }
/* As floor_avx2.c's: vpandd, vmaxps; the largest lane. */
FP vf f_absmax(vf m, vf v) { return _mm512_max_ps(_mm512_abs_ps(v), m); }
FP float f_hmax(vf v) { return _mm512_reduce_max_ps(v); }

/* e4m3fn codes, as floor_avx2.c's, the selections by mask. */
FP __m512i fp8_code(vf y) {
  __m512i u = _mm512_castps_si512(y), a = _mm512_and_si512(u, i1(0x7fffffff));
  __mmask16 nan = _mm512_cmpgt_epu32_mask(a, i1(0x7f800000));
  a = _mm512_min_epu32(a, i1(0x43e00000));
  __mmask16 sub = _mm512_cmplt_epu32_mask(a, i1(0x3c800000));
  __m512i ms = _mm512_sub_epi32(
      _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(16384.0f))),
      i1(0x46800000));
  __m512i r = _mm512_sub_epi32(a, i1(120 << 23));
  r = _mm512_add_epi32(_mm512_add_epi32(r, i1((1 << 19) - 1)),
                       _mm512_and_si512(_mm512_srli_epi32(r, 20), i1(1)));
  __m512i m = _mm512_mask_mov_epi32(_mm512_srli_epi32(r, 20), sub, ms);
  m = _mm512_mask_mov_epi32(m, nan, i1(0x7f));
  return _mm512_or_si512(m, _mm512_srli_epi32(_mm512_xor_si512(u, a), 24));
}

/* vpmovdb narrows each vector's codes to 16 bytes. */
FP void f_fp8_st1(uint8_t *out, vf y) {
  _mm_storeu_si128((__m128i *)(void *)out, _mm512_cvtepi32_epi8(fp8_code(y)));
}
FP void f_fp8_st4(uint8_t *out, vf y0, vf y1, vf y2, vf y3) {
  f_fp8_st1(out, y0);
  f_fp8_st1(out + VL, y1);
  f_fp8_st1(out + 2 * VL, y2);
  f_fp8_st1(out + 3 * VL, y3);
}

/* The qs of one block (two vectors): x * id rounded half away from zero,
 * narrowed by vpmovdb. */
FP void q8_qs(uint8_t *out, const vf *v, vf vid) {
  const __m512i half = _mm512_castps_si512(_mm512_set1_ps(0.49999997f));
  const __m512i sign = i1((int32_t)0x80000000u);
  for (int k = 0; k < 2; k++) {
    vf x = _mm512_mul_ps(v[k], vid);
    __m512i s = _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(x), sign), half);
    __m512i q = _mm512_cvttps_epi32(_mm512_add_ps(x, _mm512_castsi512_ps(s)));
    _mm_storeu_si128((__m128i *)(void *)(out + 16 * k), _mm512_cvtepi32_epi8(q));
  }
}

/* A Q8_0 block, as floor_avx2.c's: two vectors. */
FP void f_q8_block(uint8_t *out, const vf *v) {
  const __m512i am = i1(0x7fffffff);
  uint32_t ab = _mm512_reduce_max_epu32(
      _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(v[0]), am),
                       _mm512_and_si512(_mm512_castps_si512(v[1]), am)));
  uint16_t d16;
  float id;
  q8_scale1(ab, &d16, &id);
  memcpy(out, &d16, 2);
  q8_qs(out + 2, v, _mm512_set1_ps(id));
}

/* The scales of four Q8_0 blocks (v: 8 vectors) and their qs, as
 * floor_avx2.c's: the amax by a transposing reduction, two vdivps, one
 * vcvtps2ph. */
FP fq8s f_q8_scan4(const vf *v) {
  const __m512i am = i1(0x7fffffff);
  __m512i m[4];
  for (int b = 0; b < 4; b++)
    m[b] = _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(v[2 * b]), am),
                            _mm512_and_si512(_mm512_castps_si512(v[2 * b + 1]), am));
  __m512i ab = _mm512_max_epu32(_mm512_unpacklo_epi32(m[0], m[1]),
                                _mm512_unpackhi_epi32(m[0], m[1]));
  __m512i cd = _mm512_max_epu32(_mm512_unpacklo_epi32(m[2], m[3]),
                                _mm512_unpackhi_epi32(m[2], m[3]));
  __m512i r = _mm512_max_epu32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
  __m256i r2 = _mm256_max_epu32(_mm512_castsi512_si256(r), _mm512_extracti64x4_epi64(r, 1));
  __m128i h = _mm_max_epu32(_mm256_castsi256_si128(r2), _mm256_extracti128_si256(r2, 1));
  return q8_scale4(h);
}

FP void f_q8_emit4(uint8_t *out, const vf *v, fq8s sc) {
  if (__builtin_expect(sc.bad, 0)) {
    for (int b = 0; b < 4; b++) f_q8_block(out + 34 * b, v + 2 * b);
    return;
  }
  const __m512 id16 = _mm512_castps128_ps512(sc.id);
  for (int b = 0; b < 4; b++) {
    uint16_t w = (uint16_t)(sc.d16 >> (16 * b));
    memcpy(out + 34 * b, &w, 2);
    q8_qs(out + 34 * b + 2, v + 2 * b, _mm512_permutexvar_ps(_mm512_set1_epi32(b), id16));
  }
}

FP void f_q8_ld(const uint8_t *in, vf *v) {
  uint16_t d16;
  memcpy(&d16, in, 2);
  const vf d = _mm512_set1_ps(_cvtsh_ss(d16));
  for (int k = 0; k < 2; k++) {
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(in + 2 + 16 * k));
    v[k] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), d);
  }
}

FP void f_copy(void *dst, const void *src, int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64)
    _mm512_storeu_si512((char *)dst + i, _mm512_loadu_si512((const char *)src + i));
  if (i < n) /* 32 bytes (16 channels of f16/bf16) */
    _mm256_storeu_si256((__m256i *)(void *)((char *)dst + i),
                        _mm256_loadu_si256((const __m256i *)(const void *)((const char *)src + i)));
}

#include "floor_vec.h"
