/* floor_avx2.c - the floor kernels (floor_vec.h) for AVX2 + FMA + F16C, 8
 * float lanes; built with -mavx2 -mfma -mf16c (bench/CMakeLists.txt) and run
 * only when the library runs its avx2 path (a CPU with those features).
 * docs/compute-floor.md counts each primitive's instructions. */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "floor.h"
#include "floor_q8.h"
#include "posenc.h"

#define VL 8
#define FLOOR_FN pb_floor_avx2
typedef __m256 vf;
#define FP static inline __attribute__((always_inline))

FP __m256i i1(int32_t x) { return _mm256_set1_epi32(x); }

/* f16: vcvtph2ps; bf16: the 8 halves broadcast to both 128-bit lanes by
 * the load (vbroadcasti128), one vpshufb puts half i at the top of lane i
 * and zeroes the bottom. */
FP vf f_ld(int dt, const void *p) {
  if (dt == PE_F32) return _mm256_loadu_ps(p);
  if (dt == PE_F16) return _mm256_cvtph_ps(_mm_loadu_si128(p));
  const __m256i top = _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7, -1,
                                       -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
  return _mm256_castsi256_ps(
      _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(p)), top));
}

/* bf16 round to nearest even without bf16 instructions: u + 0x7fff + lsb
 * (the bf16 in the top half of each 32-bit lane), a NaN made quiet (u |
 * 0x400000) by a blend taken only when the vector holds one (vcmpps,
 * vptest, a branch): 6 operations, the blend's 2 more on a NaN. */
FP __m256i bf16_rne(vf v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), i1(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(i1(0x7fff), lsb));
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  if (__builtin_expect(!_mm256_testz_si256(nan, nan), 0))
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, i1(0x400000)), nan);
  return r;
}

FP void f_st(int dt, void *p, vf v) {
  if (dt == PE_F32) {
    _mm256_storeu_ps(p, v);
  } else if (dt == PE_F16) {
    _mm_storeu_si128(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  } else { /* one vector: the top halves gathered by vpshufb, the quarters by vpermq */
    const __m256i top = _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1,
                                         -1, 2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1,
                                         -1, -1);
    __m256i k = _mm256_shuffle_epi8(bf16_rne(v), top);
    _mm_storeu_si128(p, _mm256_castsi256_si128(_mm256_permute4x64_epi64(k, 0x08)));
  }
}

FP void f_st2(int dt, void *p, vf a, vf b) {
  if (dt == PE_BF16) { /* the top halves down (vpsrld), vpackusdw, vpermq */
    __m256i k = _mm256_packus_epi32(_mm256_srli_epi32(bf16_rne(a), 16),
                                    _mm256_srli_epi32(bf16_rne(b), 16));
    _mm256_storeu_si256(p, _mm256_permute4x64_epi64(k, 0xd8));
  } else {
    f_st(dt, p, a);
    f_st(dt, (char *)p + VL * (dt == PE_F32 ? 4 : 2), b);
  }
}

/* bf16 rows in even/odd order (FL_EO, floor_vec.h): 2*VL halves in one
 * 32-byte load, the 32-bit word of elements 2i and 2i+1 widened to the even
 * one's float by vpslld 16 and the odd one's by vpand 0xffff0000. Back: in
 * 16-bit lanes, the truncated bf16 t (the even floats' top halves shifted
 * down, blended with the odd ones' in place) plus the rounding carry, bit
 * 15 of vpavgw(l, 0x7ffe | (t & 1)) where l are the bottom halves (one
 * blend with the odd floats shifted up): (l + 0x7fff + lsb) >> 16 without a
 * 17-bit lane; 9 operations and a NaN test (vcmpps unordered of e and o,
 * vmovmskps, a branch) for 2*VL halves. A NaN takes bf16_rne per float. */
#define FL_EO 1
FP void f_ld_eo(const void *p, vf *e, vf *o) {
  __m256i w = _mm256_loadu_si256(p);
  *e = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  *o = _mm256_castsi256_ps(_mm256_and_si256(w, i1((int32_t)0xffff0000u)));
}
FP void f_st_eo(void *p, vf e, vf o) {
  __m256i ue = _mm256_castps_si256(e), uo = _mm256_castps_si256(o), w;
  if (__builtin_expect(_mm256_movemask_ps(_mm256_cmp_ps(e, o, _CMP_UNORD_Q)) != 0, 0)) {
    w = _mm256_blend_epi16(_mm256_srli_epi32(bf16_rne(e), 16), bf16_rne(o), 0xaa);
  } else {
    __m256i t = _mm256_blend_epi16(_mm256_srli_epi32(ue, 16), uo, 0xaa);
    __m256i l = _mm256_blend_epi16(ue, _mm256_slli_epi32(uo, 16), 0xaa);
    __m256i v = _mm256_or_si256(_mm256_and_si256(t, _mm256_set1_epi16(1)), _mm256_set1_epi16(0x7ffe));
    w = _mm256_add_epi16(t, _mm256_srli_epi16(_mm256_avg_epu16(l, v), 15));
  }
  _mm256_storeu_si256(p, w);
}

FP vf f_ldf(const float *p) { return _mm256_loadu_ps(p); }
FP vf f_set1(float x) { return _mm256_set1_ps(x); }
FP vf f_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
FP vf f_add(vf a, vf b) { return _mm256_add_ps(a, b); }
FP vf f_div(vf a, vf b) { return _mm256_div_ps(a, b); }
FP vf f_fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
FP vf f_fmsub(vf a, vf b, vf c) { return _mm256_fmsub_ps(a, b, c); }
FP vf f_fmaddsub(vf a, vf b, vf c) { return _mm256_fmaddsub_ps(a, b, c); }
FP vf f_swap(vf v) { return _mm256_permute_ps(v, 0xb1); }
FP vf f_dup(const float *p) { /* one 16-byte load, one vpermps */
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)),
                                  _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}
/* The running maximum of |v| (vandps, vmaxps: a NaN lane of v leaves m's,
 * as fmaxf ignores it) and the largest lane. */
FP vf f_absmax(vf m, vf v) {
  return _mm256_max_ps(_mm256_and_ps(v, _mm256_castsi256_ps(i1(0x7fffffff))), m);
}
FP float f_hmax(vf v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
FP float f_hsum(vf v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* e4m3fn codes of y in 32-bit lanes (quant_common.h's definition): the
 * magnitude saturated to 448 (Inf too), subnormals by a float add of 2^14,
 * normals by integer round to nearest even, NaN to 0x7f, the sign or-ed. */
FP __m256i fp8_code(vf y) {
  __m256i u = _mm256_castps_si256(y), a = _mm256_and_si256(u, i1(0x7fffffff));
  __m256i nan = _mm256_cmpgt_epi32(a, i1(0x7f800000));
  a = _mm256_min_epu32(a, i1(0x43e00000));
  __m256i sub = _mm256_cmpgt_epi32(i1(0x3c800000), a);
  __m256i ms = _mm256_sub_epi32(
      _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(16384.0f))),
      i1(0x46800000));
  __m256i r = _mm256_sub_epi32(a, i1(120 << 23));
  r = _mm256_add_epi32(_mm256_add_epi32(r, i1((1 << 19) - 1)),
                       _mm256_and_si256(_mm256_srli_epi32(r, 20), i1(1)));
  __m256i m = _mm256_blendv_epi8(_mm256_srli_epi32(r, 20), ms, sub);
  m = _mm256_blendv_epi8(m, i1(0x7f), nan);
  return _mm256_or_si256(m, _mm256_srli_epi32(_mm256_xor_si256(u, a), 24));
}

/* 32 codes: two vpackusdw, one vpackuswb, one vpermd. */
FP void f_fp8_st4(uint8_t *out, vf y0, vf y1, vf y2, vf y3) {
  __m256i p0 = _mm256_packus_epi32(fp8_code(y0), fp8_code(y1));
  __m256i p1 = _mm256_packus_epi32(fp8_code(y2), fp8_code(y3));
  __m256i b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p0, p1),
                                          _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256((__m256i *)(void *)out, b);
}

FP void f_fp8_st1(uint8_t *out, vf y) {
  __m256i c = fp8_code(y), p = _mm256_packus_epi32(c, c);
  __m256i b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(p, p),
                                          _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
  _mm_storel_epi64((__m128i *)(void *)out, _mm256_castsi256_si128(b));
}

/* The qs of one block: x * id rounded half away from zero, packed, stored. */
FP void q8_qs(uint8_t *out, const vf *v, vf vid) {
  const vf half = _mm256_set1_ps(0.49999997f), sign = _mm256_castsi256_ps(i1((int32_t)0x80000000u));
  __m256i q[4];
  for (int k = 0; k < 4; k++) {
    vf x = _mm256_mul_ps(v[k], vid);
    q[k] = _mm256_cvttps_epi32(_mm256_add_ps(x, _mm256_or_ps(_mm256_and_ps(x, sign), half)));
  }
  __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256((__m256i *)(void *)out, b);
}

/* A Q8_0 block (ggml's quantize_row_q8_0): amax as the integer maximum of
 * the magnitudes' bits (vpand, vpmaxud: NaN and Inf come out largest), d =
 * amax / 127 and id = 1 / d (two scalar divides: ggml's roundings), d as
 * f16, q = x * id rounded half away from zero (vcvttps2dq of q plus
 * copysign(0.49999997, q)), packed to bytes. */
FP void f_q8_block(uint8_t *out, const vf *v) {
  const __m256i am = i1(0x7fffffff);
  __m256i m = _mm256_max_epu32(
      _mm256_max_epu32(_mm256_and_si256(_mm256_castps_si256(v[0]), am),
                       _mm256_and_si256(_mm256_castps_si256(v[1]), am)),
      _mm256_max_epu32(_mm256_and_si256(_mm256_castps_si256(v[2]), am),
                       _mm256_and_si256(_mm256_castps_si256(v[3]), am)));
  __m128i h = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0x4e));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0xb1));
  uint32_t ab = (uint32_t)_mm_cvtsi128_si32(h);
  uint16_t d16;
  float id;
  q8_scale1(ab, &d16, &id);
  memcpy(out, &d16, 2);
  q8_qs(out + 2, v, _mm256_set1_ps(id));
}

/* The scales of four Q8_0 blocks (v: 16 vectors), their per-block steps
 * done together as 4-lane vectors: the four amax by one transposing
 * reduction (vpunpck{l,h}dq, vpunpck{l,h}qdq, vpmaxud), d = amax / 127 and
 * id = 1 / d by two vdivps for the four, the four d to f16 by one
 * vcvtps2ph; bad: a block holds a NaN or an Inf (one vmovmskps). */
FP fq8s f_q8_scan4(const vf *v) {
  const __m256i am = i1(0x7fffffff);
  __m256i m[4];
  for (int b = 0; b < 4; b++)
    m[b] = _mm256_max_epu32(
        _mm256_max_epu32(_mm256_and_si256(_mm256_castps_si256(v[4 * b]), am),
                         _mm256_and_si256(_mm256_castps_si256(v[4 * b + 1]), am)),
        _mm256_max_epu32(_mm256_and_si256(_mm256_castps_si256(v[4 * b + 2]), am),
                         _mm256_and_si256(_mm256_castps_si256(v[4 * b + 3]), am)));
  __m256i ab = _mm256_max_epu32(_mm256_unpacklo_epi32(m[0], m[1]),
                                _mm256_unpackhi_epi32(m[0], m[1]));
  __m256i cd = _mm256_max_epu32(_mm256_unpacklo_epi32(m[2], m[3]),
                                _mm256_unpackhi_epi32(m[2], m[3]));
  __m256i r = _mm256_max_epu32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
  __m128i h = _mm_max_epu32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  return q8_scale4(h);
}

/* The four blocks with their scales: each d, each block's qs. */
FP void f_q8_emit4(uint8_t *out, const vf *v, fq8s sc) {
  if (__builtin_expect(sc.bad, 0)) {
    for (int b = 0; b < 4; b++) f_q8_block(out + 34 * b, v + 4 * b);
    return;
  }
  const __m256 id8 = _mm256_castps128_ps256(sc.id);
  for (int b = 0; b < 4; b++) {
    uint16_t w = (uint16_t)(sc.d16 >> (16 * b));
    memcpy(out + 34 * b, &w, 2);
    q8_qs(out + 34 * b + 2, v + 4 * b, _mm256_permutevar8x32_ps(id8, _mm256_set1_epi32(b)));
  }
}

/* Dequantized: (float)qs * (float)d (vpmovsxbd, vcvtdq2ps, vmulps). */
FP void f_q8_ld(const uint8_t *in, vf *v) {
  uint16_t d16;
  memcpy(&d16, in, 2);
  const vf d = _mm256_set1_ps(_cvtsh_ss(d16));
  for (int k = 0; k < 4; k++) {
    __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(in + 2 + 8 * k));
    v[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), d);
  }
}

FP void f_copy(void *dst, const void *src, int64_t n) {
  for (int64_t i = 0; i < n; i += 32)
    _mm256_storeu_si256((__m256i *)(void *)((char *)dst + i),
                        _mm256_loadu_si256((const __m256i *)(const void *)((const char *)src + i)));
}

#include "floor_vec.h"
