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
#define vf_fms _mm256_fmsub_ps   /* a*b - c, one rounding */
/* A sign flip, as C's unary minus: NaN bits follow. */
PE_AI vf vf_neg(vf a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }

/* isa.h's stream_copy, one 64-byte line: two streaming stores. */
PE_AI void stream_line(char *d, const char *s) {
  _mm256_stream_si256((__m256i *)(void *)d, _mm256_loadu_si256((const __m256i *)(const void *)s));
  _mm256_stream_si256((__m256i *)(void *)(d + 32),
                      _mm256_loadu_si256((const __m256i *)(const void *)(s + 32)));
}

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

/* ALiBi's distances (float)|q - (j + lane)| as an int32 vector stepped k
 * keys at a time (enc_template.h's alibi_row, which takes it when the query
 * and the row fit in int32; lanes past the row's end may wrap and are never
 * stored): one subtract per vector, and vcvtdq2ps rounds to nearest even as
 * (float) does. */
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

/* bf16 rounding, convert.h's integer round-to-nearest-even (not a hardware
 * conversion, which would flush subnormals): the 32-bit lane u + 0x7fff +
 * (bit 16 of u), the bf16 bits in its top half. A NaN lane takes u |
 * 0x400000 instead (its top half | 0x40: quieted), blended only when a
 * vector holds a NaN: one vcmpunordps finds the NaN lanes of two vectors
 * (unordered: either lane NaN) and one vtestps the branch; a NaN's bits can
 * carry into the exponent and sign (0x7fffffff + 0x7fff), every other
 * float's cannot (at most 0xff800000 + 0x8000). */
PE_AI __m256i bf16_round(vf v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  return _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
}
/* r (bf16_round(v)) with v's NaN lanes quieted. */
PE_AI __m256i bf16_quiet(vf v, __m256i r) {
  __m256i q = _mm256_or_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x400000));
  return _mm256_blendv_epi8(r, q, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}
/* Whether a lane of a or b (of a, b, c or d) is NaN: vmovmskps, where
 * vtestps (2 operations on Zen 3) took 2.5 cycles more per 128-channel row
 * in an L1 loop of eo_row (AMD EPYC Zen 3). */
PE_AI int vf_any_nan2(vf a, vf b) {
  return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q)) != 0;
}
PE_AI int vf_any_nan4(vf a, vf b, vf c, vf d) {
  __m256 n = _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q), _mm256_cmp_ps(c, d, _CMP_UNORD_Q));
  return _mm256_movemask_ps(n) != 0;
}
/* The bf16 bits of one vector (the encodings' rows, vst): the top halves
 * gathered by one vpshufb (bytes 2, 3 of each lane to the low 8 bytes of its
 * 128-bit half) and one vpermq. */
PE_AI __m128i bf16_narrow(vf v) {
  __m256i r = bf16_round(v);
  if (__builtin_expect(vf_any_nan2(v, v), 0)) r = bf16_quiet(v, r);
  const __m256i top = _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1,
                                       2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_shuffle_epi8(r, top), 0x08));
}
/* Two vectors at once: [a's 8 halves | b's 8 halves]. The top halves
 * shifted down (vpsrld), then one vpackusdw (in-lane: a0-3 b0-3 | a4-7
 * b4-7, values <= 0xffff, so no saturation) and one vpermq; one NaN test for
 * both. Per 8 halves 2.5 shuffles instead of 3, and half the tests. */
PE_AI __m256i bf16_pair(vf a, vf b) {
  __m256i ra = bf16_round(a), rb = bf16_round(b);
  if (__builtin_expect(vf_any_nan2(a, b), 0)) {
    ra = bf16_quiet(a, ra);
    rb = bf16_quiet(b, rb);
  }
  __m256i w = _mm256_packus_epi32(_mm256_srli_epi32(ra, 16), _mm256_srli_epi32(rb, 16));
  return _mm256_permute4x64_epi64(w, 0xd8);
}
/* vec_buffered.h's vst2 and vstw for bf16: a (na lanes) to pa and b (nb > 0
 * lanes) to pb, rounded together; 2*VL contiguous lanes a | b in one store. */
#define VEC_BF16_PAIR 1
PE_AI void bf16_st2(void *pa, int32_t na, vf a, void *pb, int32_t nb, vf b) {
  __m256i w = bf16_pair(a, b);
  if (na >= VL && nb >= VL) {
    _mm_storeu_si128(pa, _mm256_castsi256_si128(w));
    _mm_storeu_si128(pb, _mm256_extracti128_si256(w, 1));
    return;
  }
  uint16_t t[2 * VL];
  _mm256_storeu_si256((void *)t, w);
  memcpy(pa, t, (size_t)(na < VL ? (na > 0 ? na : 0) : VL) * 2);
  memcpy(pb, t + VL, (size_t)(nb < VL ? nb : VL) * 2);
}
PE_AI void bf16_stw(void *p, vf a, vf b) { _mm256_storeu_si256(p, bf16_pair(a, b)); }

/* bf16 rows in even/odd order (VEC_BF16_EO, rope_template.h): 16 elements
 * in one 32-byte load, a 32-bit word holding elements 2i and 2i+1 widened
 * to the float of the even one by vpslld 16 and of the odd one by vpand
 * 0xffff0000 (no shuffle); rounded back, the even lanes' bits shifted down
 * (vpsrld 16) and the odd lanes' kept in place, joined by one vpblendw
 * into one 32-byte store. Per 16 elements 2 shift/shuffle operations
 * instead of vldf's 2 vpshufb and bf16_pair's 2 vpsrld, vpackusdw and
 * vpermq, one NaN test. EO_DT(dt): the dtype the even/odd rows take. */
#define VEC_BF16_EO 1
#define EO_DT(dt) ((dt) == PE_BF16)
/* NeoX rows of more pairs than token_rows holds in registers (head_dim 128:
 * 64 pairs) take the even/odd order too, their token's cos/sin
 * deinterleaved once into a buffer for its heads (store_template.h's
 * eo_token): the [B,T,H,D] rows in place and the cache write. */
#define VEC_EO_PREP 1
/* 2*VL elements at p (n <= 2*VL of them: the rest read as 0) as they are
 * (vw), and widened: e the even elements, o the odd ones. VEC_EO_RAW: the
 * NeoX groups of rows (rope_template.h's group_step_eo) load every row's
 * words first and widen each row as they rotate it, so that 4 rows' 16
 * widened vectors are not live at once in AVX2's 16 registers (gcc spilled
 * them; AMD EPYC Zen 3, [B,H,T,D] bf16 rows in L1: 61.5-62.5 -> 59.7-61.3
 * cycles per 128-channel row). */
#define VEC_EO_RAW 1 /* with VEC_ROT_FAST's neox_eo_fast */
/* The even/odd rows rotate with rotate_fast (rope_template.h): vfmsub
 * instead of the sign flip and vfmadd, a step with a NaN result done again
 * as isa.h says. */
#define VEC_ROT_FAST 1
typedef __m256i vw;
PE_AI vw bf16_ld_w(const void *p, int32_t n) {
  if (n >= 2 * VL) return _mm256_loadu_si256(p);
  uint16_t b[2 * VL] = {0};
  memcpy(b, p, (size_t)(n > 0 ? n : 0) * 2);
  return _mm256_loadu_si256((const void *)b);
}
PE_AI void bf16_w_eo(vw w, vf *e, vf *o) {
  *e = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  *o = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
}
PE_AI void bf16_ld_eo(const void *p, int32_t n, vf *e, vf *o) { bf16_w_eo(bf16_ld_w(p, n), e, o); }
/* The 2*VL bf16 of e (even) and o (odd) interleaved, rounded as bf16_round
 * (no NaN lane: the caller knows there is none), in 16-bit lanes: the top
 * halves t (the truncated bf16) and the bottom halves l of all 2*VL floats
 * gathered by two blends, then t + carry, where carry = (l + 0x7fff +
 * (t & 1)) >> 16 is bit 15 of vpavgw(l, 0x7ffe | (t & 1)) = (l + 0x7fff +
 * (t & 1)) >> 1 (17 bits inside vpavgw). convert.h's (u + 0x7fff + lsb)
 * >> 16 is t + carry, and t + carry <= 0xffff for every float but a NaN.
 * 9 operations for 2*VL halves instead of 10, one of them on the shift
 * pipes fewer. */
PE_AI __m256i bf16_eo_bits(vf e, vf o) {
  __m256i ue = _mm256_castps_si256(e), uo = _mm256_castps_si256(o);
  __m256i t = _mm256_blend_epi16(_mm256_srli_epi32(ue, 16), uo, 0xaa);
  __m256i l = _mm256_blend_epi16(ue, _mm256_slli_epi32(uo, 16), 0xaa);
  __m256i lsb = _mm256_and_si256(t, _mm256_set1_epi16(1));
  __m256i v = _mm256_or_si256(lsb, _mm256_set1_epi16(0x7ffe));
  return _mm256_add_epi16(t, _mm256_srli_epi16(_mm256_avg_epu16(l, v), 15));
}
/* e and o (n <= 2*VL elements, no NaN lane) rounded and written to p. */
PE_AI void bf16_st_eo_fast(void *p, int32_t n, vf e, vf o) {
  __m256i w = bf16_eo_bits(e, o);
  if (n >= 2 * VL) {
    _mm256_storeu_si256(p, w);
  } else {
    uint16_t b[2 * VL];
    _mm256_storeu_si256((void *)b, w);
    memcpy(p, b, (size_t)(n > 0 ? n : 0) * 2);
  }
}
/* g vectors of 2*VL elements (e[i] even, o[i] odd) rounded (bf16_round,
 * NaN lanes quieted) and written to p[i] (n elements each, n <= 2*VL). */
PE_AI void bf16_st_eo_g(int g, char *const *p, int32_t n, const vf *e, const vf *o) {
  for (int i = 0; i < g; i++) {
    __m256i re = bf16_round(e[i]), ro = bf16_round(o[i]);
    if (__builtin_expect(vf_any_nan2(e[i], o[i]), 0)) {
      re = bf16_quiet(e[i], re);
      ro = bf16_quiet(o[i], ro);
    }
    __m256i w = _mm256_blend_epi16(_mm256_srli_epi32(re, 16), ro, 0xaa);
    if (n >= 2 * VL) {
      _mm256_storeu_si256((void *)p[i], w);
    } else {
      uint16_t b[2 * VL];
      _mm256_storeu_si256((void *)b, w);
      memcpy(p[i], b, (size_t)(n > 0 ? n : 0) * 2);
    }
  }
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

/* GPT-J's pairs as they lie (VEC_GPTJ_IL, rope_template.h): a vector v of
 * VL/2 pairs (x0 y0 x1 y1 ...) rotates as fma(v, c', (swap(v) * s') with
 * the even lanes' sign flipped), c' and s' each pair's cos and sin twice
 * (c0 c0 c1 c1 ...): lane 2i is fmaf(x, c, -(y*s)), lane 2i+1 fmaf(y, c,
 * x*s), isa.h's operations on the same operands in the same order. No
 * deinterleave, no interleave, and no lane-crossing vpermpd for cos/sin,
 * which on Zen 3 shares a unit with F16C's conversions (a vpermpd next to
 * each vcvtph2ps: 17 cycles per 8 of each, against 8 for either alone).
 * IL_PAIR(sd, dd): the rows that take it (a 16-bit dtype on either side but
 * not bf16 to bf16, which goes in even/odd order). */
#define VEC_GPTJ_IL 1
#define IL_PAIR(sd, dd) \
  (((sd) != PE_F32 || (dd) != PE_F32) && !((sd) == PE_BF16 && (dd) == PE_BF16))
PE_AI vf vf_swap_pairs(vf v) { return _mm256_permute_ps(v, 0xb1); }
PE_AI vf vf_neg_even(vf v) {
  return _mm256_xor_ps(v, _mm256_castsi256_ps(_mm256_set1_epi64x(0x80000000)));
}
/* The 4 floats at c each twice: c0 c0 c1 c1 | c2 c2 c3 c3 (a 16-byte
 * broadcast load and one in-lane vpermilps). */
PE_AI vf vf_dup4(const float *c) {
  return _mm256_permutevar_ps(_mm256_broadcast_ps((const __m128 *)(const void *)c),
                              _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}
/* The same for the normed rows' GPT-J pairs (VEC_GPTJ_PAIRS, rope_template.h's
 * gheld_rows): the VL/2 floats at c each twice. */
#define VEC_GPTJ_PAIRS 1
PE_AI vf vf_dup_half(const float *c) { return vf_dup4(c); }

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
/* quant_common.h's pe_fp8_from_f32 of 8 lanes (fmt a constant), the codes
 * in the low byte of each lane: quant_template.h's lane code with its two
 * selects as vpblendvb on the compare masks (gcc makes each generic select
 * three logic operations and spills the constants). The compares are
 * signed: |y|'s bits are below 2^31, as are the constants. The rounding
 * adds a's bit SHIFT, which a - REBIAS keeps (REBIAS has no bits below
 * 2^23). AMD EPYC Zen 3, pe_qk_norm_rope_store of Qwen3-8B heads into an
 * e4m3 or e5m2 cache (pe-ab --kv fp8e4m3, 512 tokens or 32 sequences of
 * one): 0.89-0.93 of the generic code's time. The bits are the generic
 * code's for every float32 (checked over all 2^32, both formats). */
#define VEC_FP8_ENCODE 1
PE_AI vbi vb_fp8_encode(int fmt, vf y) {
  const __m256i u = _mm256_castps_si256(y);
  __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
  a = _mm256_min_epu32(a, _mm256_set1_epi32((int)PE_FP8_MAXB(fmt)));
  const __m256i sub = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)PE_FP8_MINNB(fmt)), a);
  const __m256i lsb =
      _mm256_and_si256(_mm256_srli_epi32(a, PE_FP8_SHIFT(fmt)), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(
      _mm256_add_epi32(a, _mm256_set1_epi32((int)((1u << (PE_FP8_SHIFT(fmt) - 1)) - 1u -
                                                  PE_FP8_REBIAS(fmt)))),
      lsb);
  const __m256 magic = _mm256_set1_ps(PE_FP8_MAGIC(fmt)); /* bits(|y| + MAGIC) - bits(MAGIC) */
  const __m256i ms = _mm256_sub_epi32(
      _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), magic)), _mm256_castps_si256(magic));
  __m256i m = _mm256_blendv_epi8(_mm256_srli_epi32(r, PE_FP8_SHIFT(fmt)), ms, sub);
  m = _mm256_blendv_epi8(m, _mm256_set1_epi32((int)PE_FP8_NAN(fmt)), nan);
  return _mm256_or_si256(
      m, _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80)));
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
