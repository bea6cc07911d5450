/* vec_avx2.h - the AVX2 + FMA + F16C primitives the templates are written
 * in (rope_template.h, store_template.h, enc_template.h): eight float lanes,
 * four double lanes. Included only by avx2.c, which is compiled with -mavx2
 * -mfma -mf16c (CMakeLists.txt) and reached only when cpu.c reports
 * PE_CPU_AVX2. AVX2 has no masked 16-bit loads: tails go through
 * vec_buffered.h. Every primitive is lane for lane the scalar definition
 * (scalar.c, convert.h). */
#ifndef PE_VEC_AVX2_H
#define PE_VEC_AVX2_H

#include <immintrin.h>
#include <sleef.h>

#include "kernel_common.h"

#define ISA avx2
#define VL 8
#define VDL 4
typedef __m256 vf;
typedef __m256d vd;

/* ---- float and double lanes ---- */

#define vf_load _mm256_loadu_ps
#define vf_store _mm256_storeu_ps
#define vf_set1 _mm256_set1_ps
#define vf_add _mm256_add_ps
#define vf_mul _mm256_mul_ps
#define vf_fma _mm256_fmadd_ps   /* a*b + c, one rounding */
#define vf_fnma _mm256_fnmadd_ps /* c - a*b, one rounding */
/* A sign flip, as C's unary minus: NaN bits follow. */
PE_AI vf vf_neg(vf a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }

#define vd_load _mm256_loadu_pd
#define vd_set1 _mm256_set1_pd
#define vd_mul _mm256_mul_pd
#define vd_sub _mm256_sub_pd
#define vd_fnma _mm256_fnmadd_pd
#define vd_add _mm256_add_pd
#define vd_fma _mm256_fmadd_pd /* a*b + c, one rounding */
#define vd_fms _mm256_fmsub_pd /* a*b - c = fma(a, b, -c), one rounding */
/* The QK-norm's scales (isa.h's pe__norm_scale): correctly rounded, and
 * NaN lanes made +0. */
#define vd_sqrt _mm256_sqrt_pd
#define vd_div _mm256_div_pd
PE_AI vf vf_nan_to_zero(vf v) { return _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q)); }
/* isa.h's tree of 16 lanes (lanes 0-7 in a[0], 8-15 in a[1]) in registers:
 * i += i+8 (the two vectors), += i+4 (the two halves), += i+2 (movehl), +=
 * i+1; the NaN made NAN's. */
#define VEC_TREE16 1
PE_AI float vf_tree16(const vf *a) {
  __m256 s = _mm256_add_ps(a[0], a[1]);
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
  float r = _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
  return r != r ? (float)NAN : r;
}
PE_AI vd vd_round(vd x) { return _mm256_round_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* r where |r| <= PE_REDUCED_MAX (false for NaN), else 0. */
PE_AI vd vd_keep_reduced(vd r) {
  __m256d abs = _mm256_andnot_pd(_mm256_set1_pd(-0.0), r);
  return _mm256_and_pd(r, _mm256_cmp_pd(abs, _mm256_set1_pd(PE_REDUCED_MAX), _CMP_LE_OQ));
}
/* [lo | hi] rounded to float (nearest even), and the halves widened back. */
PE_AI vf vf_from_vd2(vd lo, vd hi) { return _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo)); }
PE_AI vd vd_widen_lo(vf v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
PE_AI vd vd_widen_hi(vf v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }

/* SLEEF: float sincos u10 of VL lanes, double sincos u35 of VDL lanes (.x
 * sin, .y cos); VDL doubles rounded to float (to nearest even, as (float)). */
#define VEC_SINCOSF Sleef_sincosf8_u10avx2
#define VEC_SINCOSD Sleef_sincosd4_u35avx2
PE_AI void vd_store_f32(float *p, vd v) { _mm_storeu_ps(p, _mm256_cvtpd_ps(v)); }
/* v rounded to float (nearest even, as (float)) and widened back. */
PE_AI vd vd_round_f32(vd v) { return _mm256_cvtps_pd(_mm256_cvtpd_ps(v)); }

/* (float)|q - (j + lane)| from int32 lanes: exact when q and j + 7 fit in
 * int32, and vcvtdq2ps rounds to nearest even as (float) of the int64 does. */
PE_AI vf vf_alibi_dist(int32_t q, int32_t j) {
  __m256i vj = _mm256_add_epi32(_mm256_set1_epi32(j), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_cvtepi32_ps(_mm256_abs_epi32(_mm256_sub_epi32(_mm256_set1_epi32(q), vj)));
}
/* The same distances as an int32 vector stepped k keys at a time (wrapping
 * like the subtraction above, so the same lanes): one subtract per vector
 * instead of a broadcast and two (enc_template.h's alibi_row). */
typedef __m256i vdist;
PE_AI vdist vdist_init(int32_t q) {
  return _mm256_sub_epi32(_mm256_set1_epi32(q), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
PE_AI vdist vdist_step(vdist d, int32_t k) { return _mm256_sub_epi32(d, _mm256_set1_epi32(k)); }
PE_AI vf vdist_f(vdist d) { return _mm256_cvtepi32_ps(_mm256_abs_epi32(d)); }

/* mask_row's stores (enc_template.h): VMASK_BYTES-byte vectors of one
 * 32-bit pattern. */
#define VMASK_BYTES 32
typedef __m256i vmask;
PE_AI vmask vmask_set1(uint32_t w) { return _mm256_set1_epi32((int)w); }
PE_AI void vmask_store(void *p, vmask k) { _mm256_storeu_si256((__m256i *)p, k); }

/* ---- dtypes: full vectors ---- */

/* bf16 bits of 8 floats: convert.h's integer round-to-nearest-even, NaN
 * quieted (top half | 0x40, i.e. the top half of u | 0x400000, blended only
 * when the vector holds a NaN); not a hardware conversion, which would
 * flush subnormals. The top halves are gathered by one vpshufb (bytes 2, 3
 * of each lane to the low 8 bytes of its 128-bit half) and one vpermq,
 * instead of a shift, an extract and a pack. */
PE_AI __m128i bf16_narrow(vf v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                  _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)));
  __m256i r = _mm256_add_epi32(u, bias);
  /* |u| and 0x7f800000 are non-negative, so the signed compare is exact */
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                   _mm256_set1_epi32(0x7f800000));
  if (__builtin_expect(!_mm256_testz_si256(nan, nan), 0))
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
  const __m256i top = _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1,
                                       2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_shuffle_epi8(r, top), 0x08));
}

/* F16C: exact widening (a signaling NaN comes out quiet: the rotation's
 * load, scalar.c) and RNE narrowing keeping subnormals, NaN quieted with its
 * top payload bits (convert.h). bf16 widening is a shift. */
PE_AI vf vldf(int dt, const void *p) {
  if (dt == PE_F32) return _mm256_loadu_ps(p);
  if (dt == PE_F16) return _mm256_cvtph_ps(_mm_loadu_si128(p));
  /* bf16: the 8 halves in both 128-bit lanes (a broadcast load), one vpshufb
   * moves half i to the top of lane i and zeroes the bottom (instead of
   * vpmovzxwd + vpslld) */
  const __m256i idx = _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7, -1,
                                       -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
  return _mm256_castsi256_ps(
      _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(p)), idx));
}
PE_AI void vstf(int dt, void *p, vf v) {
  if (dt == PE_F32)
    _mm256_storeu_ps(p, v);
  else if (dt == PE_F16)
    _mm_storeu_si128(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  else
    _mm_storeu_si128(p, bf16_narrow(v));
}

/* f16 widened exactly, signaling NaNs kept signaling (convert.h; the
 * `convert` kernel): F16C sets the quiet bit, cleared again where the input
 * was a signaling NaN (exponent 31, quiet bit 0, payload non-zero). */
PE_AI vf vld_f16_exact(const void *p) {
  __m128i h = _mm_loadu_si128(p);
  __m128i snan = _mm_andnot_si128(_mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x1ff)),
                                                  _mm_setzero_si128()),
                                  _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7e00)),
                                                  _mm_set1_epi16(0x7c00)));
  __m256i quiet = _mm256_slli_epi32(
      _mm256_cvtepu16_epi32(_mm_and_si128(snan, _mm_set1_epi16(0x40))), 16);
  return _mm256_xor_ps(_mm256_cvtph_ps(h), _mm256_castsi256_ps(quiet));
}

/* GPT-J's interleaved pairs: the in-lane shuffles leave x and y in pair
 * order 0,1,4,5 | 2,3,6,7; cos/sin are permuted to match (vf_gptj_cs), and
 * the unpacks restore memory order. */
PE_AI void vf_deinterleave(vf v0, vf v1, vf *x, vf *y) {
  *x = _mm256_shuffle_ps(v0, v1, 0x88);
  *y = _mm256_shuffle_ps(v0, v1, 0xdd);
}
PE_AI void vf_interleave(vf x, vf y, vf *lo, vf *hi) {
  *lo = _mm256_unpacklo_ps(x, y);
  *hi = _mm256_unpackhi_ps(x, y);
}
PE_AI vf vf_gptj_cs(vf v) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), 0xd8));
}

/* bf16 GPT-J pairs (VEC_BF16_PAIRS, rope_template.h's gptj_ld/gptj_st for
 * a full step of VL pairs): a pair's x and y are the low and high halves of
 * one 32-bit word, so the step is one vector of words. One vpermq puts the
 * pairs in vf_deinterleave's lane order (0, 1, 4, 5 | 2, 3, 6, 7: every
 * other step, and vf_gptj_cs's cos/sin, agree), then x = w << 16 and y = w
 * & 0xffff0000 are the widened floats. The store rounds both as
 * bf16_narrow does (one NaN test for the two: vcmpps unordered of x and y),
 * joins the halves (vpsrld, vpblendw) and puts the pairs back in memory
 * order (vpermq): 4 operations to load a step and 13 to store it where
 * the two vld/vst2 of halves and the (de)interleaving took 6 and 24, and
 * gcc kept fewer of the narrowings' constants in registers across a token's
 * heads (AMD EPYC Zen 3, DeepSeek-V3's 128 q rope slices of 64 channels in
 * place: 206 -> 130 instructions a row; 512 tokens 1.22 -> 0.82 ms). */
#define VEC_BF16_PAIRS 1
PE_AI void bf16_ld_pairs(const void *p, vf *x, vf *y) {
  __m256i w = _mm256_permute4x64_epi64(_mm256_loadu_si256(p), 0xd8);
  *x = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  *y = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
}
/* bf16_narrow's rounding of u's lanes, the bf16 in each top half. */
PE_AI __m256i bf16_rne32(__m256i u) {
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  return _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
}
/* bf16_narrow's NaN lanes of u quieted (u | 0x400000) in r. */
PE_AI __m256i bf16_quiet(__m256i u, __m256i r) {
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                   _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
}
PE_AI void bf16_st_pairs(void *p, vf x, vf y) {
  __m256i ux = _mm256_castps_si256(x), uy = _mm256_castps_si256(y);
  __m256i rx = bf16_rne32(ux), ry = bf16_rne32(uy);
  __m256 nan = _mm256_cmp_ps(x, y, _CMP_UNORD_Q);
  if (__builtin_expect(!_mm256_testz_ps(nan, nan), 0)) {
    rx = bf16_quiet(ux, rx);
    ry = bf16_quiet(uy, ry);
  }
  __m256i w = _mm256_blend_epi16(_mm256_srli_epi32(rx, 16), ry, 0xaa);
  _mm256_storeu_si256(p, _mm256_permute4x64_epi64(w, 0xd8));
}

/* The cache write's NEOX rows take 2*VL pairs a step: each 64-byte line of
 * the row is written by two adjacent stores (a row is written, not updated). */
#define VEC_WHOLE_LINES 1

/* ---- bytes <-> int32 lanes (quant_template.h) ---- */

/* VL bytes zero- / sign-extended to VL int32 lanes, and the low byte of each
 * lane (values in 0..255) stored as VL bytes. */
typedef __m256i vbi;
PE_AI vbi vb_load_u8(const void *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(p)); }
PE_AI vbi vb_load_s8(const void *p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64(p)); }
PE_AI void vb_store_u8(void *p, vbi v) {
  __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  _mm_storel_epi64(p, _mm_packus_epi16(w, w));
}
/* Unsigned 32-bit lane minimum, and the largest lane. */
PE_AI vbi vb_min_u32(vbi a, vbi b) { return _mm256_min_epu32(a, b); }
PE_AI uint32_t vb_hmax_u32(vbi v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
  return (uint32_t)_mm_cvtsi128_si32(m);
}

/* Q8_0 (quant_template.h): the unsigned lane maximum; the largest lane of
 * each of four vectors as four lanes, reduced together (one 128-bit exchange
 * per pair, then two in-lane passes for all four); the f16 bits of four
 * floats (F16C, round to nearest even: pe_f32_to_f16 for every finite
 * float); one block's QV = 4 vectors of int32 in [-128, 127] stored as 32
 * int8 (two vpackssdw, one vpacksswb, one vpermd). */
PE_AI vbi vb_max_u32(vbi a, vbi b) { return _mm256_max_epu32(a, b); }
PE_AI __m128i vb_hmax4_u32(vbi a0, vbi a1, vbi a2, vbi a3) {
  __m256i t0 = _mm256_max_epu32(_mm256_permute2x128_si256(a0, a1, 0x20),
                                _mm256_permute2x128_si256(a0, a1, 0x31)); /* a0 | a1 */
  __m256i t1 = _mm256_max_epu32(_mm256_permute2x128_si256(a2, a3, 0x20),
                                _mm256_permute2x128_si256(a2, a3, 0x31)); /* a2 | a3 */
  __m256 f0 = _mm256_castsi256_ps(t0), f1 = _mm256_castsi256_ps(t1);
  __m256i m = _mm256_max_epu32(_mm256_castps_si256(_mm256_shuffle_ps(f0, f1, 0x88)),
                               _mm256_castps_si256(_mm256_shuffle_ps(f0, f1, 0xdd)));
  m = _mm256_max_epu32(m, _mm256_shuffle_epi32(m, 0xb1)); /* [a0 a0 a2 a2 | a1 a1 a3 a3] */
  return _mm_blend_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1), 0xa);
}
typedef __m128 vf4; /* four float lanes */
PE_AI uint64_t vb_f16x4(vf4 d) {
  return (uint64_t)_mm_cvtsi128_si64(_mm_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* Four f16 (h, little-endian) widened exactly. */
PE_AI vf4 vb_f32x4_f16(uint64_t h) { return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h)); }
PE_AI void vb_store_q8(void *p, const vbi *q) {
  __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  _mm256_storeu_si256(p, _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* Two blocks' qs from 16-bit lanes (quant_template.h's bf16 pairs: w[0..1]
 * the first block's 32 qs in element order, w[2..3] the second's): per
 * block one vpacksswb, one vpermq to order, one store. */
#define VEC_Q8_PAIRS 1
PE_AI void vb_store_q8w2(void *p0, void *p1, const vbi *w) {
  _mm256_storeu_si256(p0, _mm256_permute4x64_epi64(_mm256_packs_epi16(w[0], w[1]), 0xd8));
  _mm256_storeu_si256(p1, _mm256_permute4x64_epi64(_mm256_packs_epi16(w[2], w[3]), 0xd8));
}

/* FP8 decoding (quant_template.h): VL bytes zero-extended to VL 16-bit
 * lanes, and VL f16 widened exactly to float. */
typedef __m128i vh;
PE_AI vh vh_load_u8(const void *p) { return _mm_cvtepu8_epi16(_mm_loadl_epi64(p)); }
PE_AI vf vf_from_f16(vh h) { return _mm256_cvtph_ps(h); }

/* 4 * VL codes (lanes in 0..255) of four vectors stored as bytes: two
 * vpackusdw, one vpackuswb, one vpermd. */
PE_AI void vb_store_u8x4(void *p, vbi a, vbi b, vbi c, vbi d) {
  __m256i w = _mm256_packus_epi16(_mm256_packus_epi32(a, b), _mm256_packus_epi32(c, d));
  _mm256_storeu_si256(p, _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

#include "vec_buffered.h"

#endif
