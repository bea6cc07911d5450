/* vec_avx512.h - the AVX-512 (F/BW/DQ/VL) primitives the templates are
 * written in: sixteen float lanes, eight double lanes. Included only by
 * avx512.c, compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl
 * (CMakeLists.txt) and reached only when cpu.c reports PE_CPU_AVX512; and
 * compiled a second time with -mavx512bf16 added (avx512bf16.c), the path
 * "avx512bf16", whose kernels that write bf16 round with vcvtne2ps2bf16
 * (PE_BF16_CVT below), reached when cpu.c also reports PE_CPU_AVX512BF16. Tails
 * use opmasks, so no row is read or written past its elements; the main
 * loops pass the constant VL, so the masks fold away there (masked narrowing
 * stores to memory, vpmovdw m{k} and vcvtps2ph m{k}, are slow). Every
 * primitive is lane for lane the scalar definition (scalar.c, convert.h). */
#ifndef PE_VEC_AVX512_H
#define PE_VEC_AVX512_H

#include <immintrin.h>
#include <sleef.h>

#include "base/cpu.h"
#include "kernel_common.h"

#if defined(__AVX512BF16__)
#define ISA avx512bf16
#define PE_BF16_W PE_BF16_CVT /* isa_template.h: the bf16 writers' dtype token */
#else
#define ISA avx512
#endif
#define VL 16
#define VDL 8
typedef __m512 vf;
typedef __m512d vd;

#define FULL16 ((__mmask16)0xffff)
/* Lanes [0, n): all for n >= 16, none for n <= 0. */
PE_AI __mmask16 mask_n(int32_t n) {
  return n >= 16 ? FULL16 : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* ---- float and double lanes ---- */

#define vf_load _mm512_loadu_ps
#define vf_set1 _mm512_set1_ps
#define vf_add _mm512_add_ps
#define vf_mul _mm512_mul_ps
#define vf_fma _mm512_fmadd_ps   /* a*b + c, one rounding */
#define vf_fnma _mm512_fnmadd_ps /* c - a*b, one rounding */
#define vf_fms _mm512_fmsub_ps   /* a*b - c, one rounding */
PE_AI vf vf_neg(vf a) { return _mm512_xor_ps(a, _mm512_set1_ps(-0.0f)); } /* sign flip */
PE_AI vf vf_loadn(const float *p, int32_t n) {
  return n >= VL ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(mask_n(n), p);
}
/* isa.h's stream_copy, one 64-byte line: one streaming store. */
PE_AI void stream_line(char *d, const char *s) {
  _mm512_stream_si512((void *)d, _mm512_loadu_si512(s));
}

PE_AI void vf_storen(float *p, int32_t n, vf v) {
  if (n >= VL)
    _mm512_storeu_ps(p, v);
  else
    _mm512_mask_storeu_ps(p, mask_n(n), v);
}
#define vf_store _mm512_storeu_ps

#define vd_load _mm512_loadu_pd
#define vd_set1 _mm512_set1_pd
#define vd_mul _mm512_mul_pd
#define vd_sub _mm512_sub_pd
#define vd_fnma _mm512_fnmadd_pd
#define vd_add _mm512_add_pd
#define vd_fma _mm512_fmadd_pd /* a*b + c, one rounding */
#define vd_fms _mm512_fmsub_pd /* a*b - c = fma(a, b, -c), one rounding */
/* The QK-norm's scales (isa.h's pe__norm_scale): correctly rounded, and
 * NaN lanes made +0. */
#define vd_sqrt _mm512_sqrt_pd
#define vd_div _mm512_div_pd
PE_AI vf vf_nan_to_zero(vf v) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v); }
/* 1 / sqrt(x) in the lanes [0, lanes) as the QK-norm's scale needs it: a
 * double that rounds to the same float32 as the correctly rounded
 * 1.0 / sqrt(x) of isa.h's pe__norm_scale. The exact square root and
 * divide of 8 lanes keep the divider busy ~32 cycles (3 vectors for a
 * token's 40 head rows: 8-9 % of a decode step); here rsqrt14's estimate
 * (relative error < 2^-14) takes two Newton steps, y += (y/2)(1 - (x*y)*y),
 * to within a few float64 ulps of the exact quotient (at most 2 in 2e7
 * random x from 2^-200 to 2^200; the bound is ~4.5: 2^-54 from the steps'
 * convergence, one rounding each in x*y and the fma, 1.5 ulps in the exact
 * chain). Both round to the same float32 unless a float32 rounding
 * boundary (the discarded 29 bits half of 2^29) lies between them, so
 * every lane must be at least 64 ulps from one, and x finite and at least
 * 2^-250 (a float32 sum over n elements is 0 or above 2^-213, and at most
 * FLT_MAX: the result is a normal float32; 0, Inf and NaN fail); else the
 * whole vector takes the exact square root and divide (~1 vector in 4e6).
 * Every float32 sum from 2^-10 to 2^24 with n 64, 72, 80, 96, 128 or 256
 * and eps 0, 1e-6 or 1e-5 gave the exact float32 here without it. */
#define VEC_RSQRT_F32EQ 1
PE_AI vd vd_rsqrt_f32eq(vd x, int32_t lanes) {
  const vd one = _mm512_set1_pd(1.0), half = _mm512_set1_pd(0.5);
  vd y = _mm512_rsqrt14_pd(x);
  y = _mm512_fmadd_pd(_mm512_mul_pd(y, half), _mm512_fnmadd_pd(_mm512_mul_pd(x, y), y, one), y);
  y = _mm512_fmadd_pd(_mm512_mul_pd(y, half), _mm512_fnmadd_pd(_mm512_mul_pd(x, y), y, one), y);
  const __mmask8 want = lanes >= 8 ? (__mmask8)0xff : (__mmask8)((1u << lanes) - 1u);
  const __m512i low = _mm512_and_si512(_mm512_castpd_si512(y), _mm512_set1_epi64(0x1fffffff));
  const __m512i off = _mm512_abs_epi64(_mm512_sub_epi64(low, _mm512_set1_epi64(1 << 28)));
  const __mmask8 ok = _mm512_cmp_pd_mask(x, _mm512_set1_pd(0x1p-250), _CMP_GE_OQ) &
                      _mm512_cmp_pd_mask(x, _mm512_set1_pd(0x1.fffffffffffffp+1023), _CMP_LE_OQ) &
                      _mm512_cmp_epi64_mask(off, _mm512_set1_epi64(64), _MM_CMPINT_GE);
  if (__builtin_expect((ok & want) != want, 0)) return _mm512_div_pd(one, _mm512_sqrt_pd(x));
  return y;
}
/* isa.h's tree of 16 lanes in registers: i += i+8 (the two 256-bit halves),
 * += i+4 (the two 128-bit halves), += i+2 (movehl), += i+1; the NaN made
 * NAN's. The sum stored to the stack and added as scalars took ~35
 * instructions a row, more than its 8 FMAs of 128 channels. */
#define VEC_TREE16 1
PE_AI float vf_tree16(const vf *a) {
  __m256 s = _mm256_add_ps(_mm512_castps512_ps256(a[0]), _mm512_extractf32x8_ps(a[0], 1));
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
  float r = _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
  return r != r ? (float)NAN : r;
}
/* The same tree of four rows' lanes at once (a[k]: row k's 16 lanes), their
 * sums to out[0..3]: each level's adds pair the lanes the tree pairs, four
 * rows to a vector (i+8: the 256-bit halves of two rows side by side; i+4:
 * the four rows' 128-bit quarters; i+2, i+1 within each quarter). */
#define VEC_TREE16X4 1
PE_AI void vf_tree16x4(const vf *a0, const vf *a1, const vf *a2, const vf *a3, float *out) {
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0[0], a1[0], 0x44),
                                   _mm512_shuffle_f32x4(a0[0], a1[0], 0xee));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2[0], a3[0], 0x44),
                                   _mm512_shuffle_f32x4(a2[0], a3[0], 0xee));
  const __m512 t = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88),
                                 _mm512_shuffle_f32x4(s01, s23, 0xdd));
  const __m512 u = _mm512_add_ps(t, _mm512_permute_ps(t, 0xee));
  const __m512 r = _mm512_add_ps(u, _mm512_movehdup_ps(u));
  __m128 r4 = _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), r));
  r4 = _mm_blendv_ps(r4, _mm_set1_ps((float)NAN), _mm_cmpunord_ps(r4, r4));
  _mm_storeu_ps(out, r4);
}
PE_AI vd vd_loadn(const double *p, int32_t n) {
  return n >= VDL ? _mm512_loadu_pd(p) : _mm512_maskz_loadu_pd((__mmask8)mask_n(n), p);
}
PE_AI vd vd_round(vd x) {
  return _mm512_roundscale_pd(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* r where |r| <= PE_REDUCED_MAX (false for NaN), else 0. */
PE_AI vd vd_keep_reduced(vd r) {
  __mmask8 ok = _mm512_cmp_pd_mask(_mm512_abs_pd(r), _mm512_set1_pd(PE_REDUCED_MAX), _CMP_LE_OQ);
  return _mm512_maskz_mov_pd(ok, r);
}
PE_AI vf vf_from_vd2(vd lo, vd hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
}
PE_AI vd vd_widen_lo(vf v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
PE_AI vd vd_widen_hi(vf v) { return _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)); }

/* The float sincos is SLEEF's finz_ entry: in this libsleef (3.5.1) the
 * instructions and constants of Sleef_sincosf16_u10avx512f, only with the
 * argument reduction scheduled ahead of the large-argument test instead of
 * after it, and bit for bit the same results on all 2^32 inputs (checked
 * exhaustively; every ISA is also compared with scalar.c in the tests). On
 * AMD EPYC Zen 4 that order is 2 % faster alone (0.682 -> 0.667 ns/pair)
 * and 1 % in the 64 MiB table build (1.11 -> 1.10 ns/pair, 131072 x 64). */
#define VEC_SINCOSF Sleef_finz_sincosf16_u10avx512f
#define VEC_SINCOSD Sleef_sincosd8_u35avx512f
PE_AI void vd_store_f32(float *p, vd v) { _mm256_storeu_ps(p, _mm512_cvtpd_ps(v)); }
/* v rounded to float (nearest even, as (float)) and widened back. */
PE_AI vd vd_round_f32(vd v) { return _mm512_cvtps_pd(_mm512_cvtpd_ps(v)); }

/* ALiBi's distances as vec_avx2.h's, 16 lanes: one subtract per vector
 * instead of a broadcast and two per key vector (enc_template.h's alibi_row;
 * AMD EPYC Zen 4, an L1-resident f16 row 1.59 -> 1.33-1.38 ns per 16 keys). */
typedef __m512i vdist;
PE_AI vdist vdist_init(int32_t q) {
  return _mm512_sub_epi32(_mm512_set1_epi32(q),
                          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}
PE_AI vdist vdist_step(vdist d, int32_t k) { return _mm512_sub_epi32(d, _mm512_set1_epi32(k)); }
PE_AI vf vdist_f(vdist d) { return _mm512_cvtepi32_ps(_mm512_abs_epi32(d)); }

/* mask_row's stores (enc_template.h): VMASK_BYTES-byte vectors of one
 * 32-bit pattern, and a row shorter than that in one masked store of its
 * 16-bit words. */
#define VMASK_BYTES 64
typedef __m512i vmask;
PE_AI vmask vmask_set1(uint32_t w) { return _mm512_set1_epi32((int)w); }
PE_AI void vmask_store(void *p, vmask k) { _mm512_storeu_si512(p, k); }
#define VMASK_WORDS 1
PE_AI void vmask_store_words(void *p, int64_t words, vmask k) { /* words < 32 */
  _mm512_mask_storeu_epi16(p, (__mmask32)((1u << words) - 1u), k);
}

/* ---- dtypes ----
 * Loads widen 16 lanes; the 16-bit stores narrow two vectors at once (a
 * pair's x and y, or a GPT-J row's two halves) into one register, written to
 * one address (vstw) or two (vst2). PE_BF16_CVT: bf16 rounded by
 * AVX512-BF16's vcvtne2ps2bf16 (the avx512bf16 path's every kernel that
 * writes bf16); PE_DT(dt) is the pe_dtype it stands for. */
#define PE_BF16_CVT 3
#define PE_DT(dt) ((pe_dtype)((dt) == PE_BF16_CVT ? PE_BF16 : (dt)))

PE_AI __m256i ld16(const void *p, int32_t n) {
  return n >= VL ? _mm256_loadu_si256(p) : _mm256_maskz_loadu_epi16(mask_n(n), p);
}
/* vcvtph2ps: exact widening, subnormals kept, a signaling NaN quieted (the
 * rotation's load). bf16 widening puts half i in the top of lane i: one
 * zero-masked vpermw (odd words from words 0..15, even words 0), where
 * vpmovzxwd + vpslld took two operations on the loop's busy vector pipes
 * (Zen 4: 29 -> 25 cycles per in-place 128-channel row without the check). */
PE_AI vf vld(int dt, const void *p, int32_t n) {
  if (dt == PE_F32) return vf_loadn(p, n);
  if (dt == PE_F16) return _mm512_cvtph_ps(ld16(p, n));
  const __m512i idx = _mm512_setr_epi32(0, 1 << 16, 2 << 16, 3 << 16, 4 << 16, 5 << 16, 6 << 16,
                                        7 << 16, 8 << 16, 9 << 16, 10 << 16, 11 << 16, 12 << 16,
                                        13 << 16, 14 << 16, 15 << 16);
  return _mm512_castsi512_ps(
      _mm512_maskz_permutexvar_epi16(0xaaaaaaaau, idx, _mm512_castsi256_si512(ld16(p, n))));
}
/* f16 widened exactly, signaling NaNs kept: vcvtph2ps sets the quiet bit,
 * cleared again where the input had exponent 31, quiet bit 0, payload != 0. */
PE_AI vf vld_f16_exact(const void *p) {
  __m256i h = _mm256_loadu_si256(p);
  __mmask16 snan =
      _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7e00)),
                              _mm256_set1_epi16(0x7c00)) &
      _mm256_test_epi16_mask(h, _mm256_set1_epi16(0x1ff));
  __m512i w = _mm512_castps_si512(_mm512_cvtph_ps(h));
  return _mm512_castsi512_ps(_mm512_mask_xor_epi32(w, snan, w, _mm512_set1_epi32(0x400000)));
}

/* convert.h's integer round-to-nearest-even, NaN quieted (top half | 0x40),
 * not vcvtneps2bf16, which reads subnormals as zero. Lanes end in [0, 0xffff]. */
PE_AI __m512i bf16_bits(vf v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i hi = _mm512_srli_epi32(u, 16);
  __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                  _mm512_and_si512(hi, _mm512_set1_epi32(1)));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                          _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
}
/* vpackusdw is in-lane: 64-bit chunks alternate a, b; one vpermq sorts them
 * (two shuffles for 32 halves instead of two slow vpmovdw). */
PE_AI __m512i bf16_pack_int(vf a, vf b) {
  __m512i w = _mm512_packus_epi32(bf16_bits(a), bf16_bits(b));
  return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), w);
}
/* vcvtne2ps2bf16 rounds exactly as bf16_bits (NaN: top half | 0x40) except
 * that it reads subnormal inputs as zero. Those are rare: a subnormal comes
 * out as a +-0 word, so only when some word is +-0 (one vptestnmw on the
 * result) are the inputs classified (vfpclassps 0x20: denormal), and lanes
 * with a subnormal send the 32 values to the integer path. Not forced
 * inline: the plain avx512 TU compiles it too (target attribute) but never
 * calls it; only the avx512bf16 TU, compiled for AVX512-BF16, does. */
#define BF16_TARGET __attribute__((target("avx512bf16")))
BF16_TARGET static inline __m512i bf16_pack_cvt(vf a, vf b) {
  __m512i w = _mm512_castps_si512((__m512)_mm512_cvtne2ps_pbh(b, a)); /* b high, a low */
  if (__builtin_expect(_mm512_testn_epi16_mask(w, _mm512_set1_epi16(0x7fff)) != 0, 0) &&
      !_kortestz_mask16_u8(_mm512_fpclass_ps_mask(a, 0x20), _mm512_fpclass_ps_mask(b, 0x20)))
    return bf16_pack_int(a, b);
  return w;
}
/* bf16 rows as even and odd elements (VEC_BF16_EO: the in-place NeoX rows
 * of 32-pair chunks in token_rows and the groups, and every GPT-J step,
 * rope_template.h). A 32-bit word holding elements 2i and 2i+1 gives the
 * float of the even one by vpslld 16 and of the odd one by vpandd
 * 0xffff0000: no shuffle, where vld widens 16 halves with one vpermw. The
 * rotation is elementwise, so NeoX's x and y rotate in that order with
 * cos/sin deinterleaved the same way (once per token, or per group of 4
 * rows), and GPT-J's x and y are the even and odd elements themselves, in
 * pair order with no deinterleave at all; one vpermw per 32 rounded words
 * puts them back in place for a whole 64-byte store. AMD EPYC Zen 4 (L1
 * loops, 8 + 8 FMAs alone 8 cycles): with 8 vpermw, vextracti64x4 or
 * vpermt2ps 10.6-15 cycles, with 8 vpslld or vpandd 8.0. A 128-channel
 * in-place row (8 rows in L1, fastest of 401): NeoX 32-35 -> 28-29.5
 * cycles (4 shuffles instead of 8 vpermw + 4 vextracti64x4, 4 loads and 4
 * stores instead of 8 and 8), GPT-J 48-55 -> 28-31 (4 shuffles instead of
 * 28). */
#define VEC_BF16_EO 1
/* vf_deinterleave leaves GPT-J's pairs in order (vf_gptj_cs is the
 * identity), so gptj_ld and gptj_st themselves take the even/odd order for
 * bf16 (rope_template.h), the QK-norm's rows included. */
#define VEC_GPTJ_ORDERED 1
/* 32 elements at p (n <= 32 of them: the rest read as 0). */
PE_AI void bf16_ld_eo(const void *p, int32_t n, vf *e, vf *o) {
  __m512i w = n >= 2 * VL ? _mm512_loadu_si512(p)
                          : _mm512_maskz_loadu_epi16((__mmask32)((1ull << n) - 1u), p);
  *e = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  *o = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u)));
}
#if defined(__AVX512BF16__)
#define EO_DT(dt) ((dt) == PE_BF16_CVT) /* the dtype of the even/odd rows */
/* rows_grouped's bf16 NeoX rows ([B,H,T,D] in place) in pair order on the
 * CPUs whose features include these bits (cpu.c): AVX512-FP16 marks the
 * Intel cores (Sapphire Rapids and later) where vpermw zmm is one uop on
 * port 5, so two of them widen 32 values and vcvtne2ps2bf16 narrows them
 * straight back, against the even/odd order's vpslld + vpandd and a vpermw
 * after the rounding. Without it (AMD Zen 4: vpermw zmm several cycles;
 * Cooper Lake: BF16 on the Skylake core, two uops) the even/odd order stays;
 * on AMD Zen 5 too, where pair order measured 1.05-1.24x the time (pe-ab
 * --case rope --dtype bf16 --layout bhtd, 64 to 4096 tokens).
 * Intel Xeon (Emerald Rapids), pe-ab --case rope --dtype bf16 --layout
 * bhtd, Llama-3-8B heads, 512 tokens: 0.94 of the time. The rows of a token
 * walked heads inner (token_rows_eo, [B,T,H,D]) keep the even/odd order
 * there too (pair order 1.01-1.02x): they deinterleave each cos/sin row
 * once for all the token's heads. PE_CPU_DISABLE=avx512fp16 takes the
 * even/odd order on such a CPU, so tests reach both. */
#define VEC_GROUP_PAIR_ORDER PE_CPU_AVX512FP16
/* g <= 8 vectors of 32 elements (e[i] even, o[i] odd) rounded as
 * bf16_pack_cvt and written to p[i] (n elements each, n <= 32), with one
 * subnormal check for all of them: a vptestnmw per 32 words (on Zen 4 it
 * runs on the FMA pipes: 8 with 8 FMAs take 16 cycles), the masks or-ed,
 * one branch, and only if some word is +-0 each vector checked as
 * bf16_pack_cvt does. The loops run to the constant 8 so that the arrays
 * stay in registers. */
BF16_TARGET static inline void bf16_st_eo_g(int g, char *const *p, int32_t n, const vf *e,
                                            const vf *o) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                       8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  __m512i w[8];
  __mmask32 z = 0;
  for (int i = 0; i < 8; i++) w[i] = _mm512_setzero_si512(); /* i >= g: for gcc's warning */
  for (int i = 0; i < 8; i++)
    if (i < g) {
      w[i] = _mm512_castps_si512((__m512)_mm512_cvtne2ps_pbh(o[i], e[i])); /* e low, o high */
      z |= _mm512_testn_epi16_mask(w[i], _mm512_set1_epi16(0x7fff));
    }
  if (__builtin_expect(z != 0, 0))
    for (int i = 0; i < 8; i++)
      if (i < g) w[i] = bf16_pack_cvt(e[i], o[i]);
  for (int i = 0; i < 8; i++)
    if (i < g) {
      __m512i v = _mm512_permutexvar_epi16(idx, w[i]);
      if (n >= 2 * VL)
        _mm512_storeu_si512(p[i], v);
      else
        _mm512_mask_storeu_epi16(p[i], (__mmask32)((1ull << n) - 1u), v);
    }
}
#else
/* Without AVX512-BF16 the plain bf16 rows take the even/odd order too. A
 * GPT-J step written that way needs no vf_interleave (2 vpermt2ps) and no
 * bf16_pack_int's vpackusdw and vpermq, a NeoX chunk no vpermw to widen. */
#define EO_DT(dt) ((dt) == PE_BF16) /* the dtype of the even/odd rows */
/* The 32 bf16 of e (even) and o (odd) interleaved and rounded as bf16_bits,
 * for vectors without a NaN: vec_avx2.h's bf16_eo_bits at 512 bits. In
 * 16-bit lanes the truncated bf16 t (the even floats' top halves shifted
 * down, the odd ones' merged in place by a masked word move) and the bottom
 * halves l (the odd floats' shifted up, merged with the even ones'), then t
 * + carry, the carry of (u + 0x7fff + lsb) >> 16 being bit 15 of
 * vpavgw(l, 0x7ffe | (t & 1)) (17 bits inside vpavgw; the or and the and
 * one vpternlogd): 7 operations for 32 values where bf16_bits twice and
 * their join take 17. */
PE_AI __m512i bf16_eo_bits(vf e, vf o) {
  const __mmask32 odd = 0xaaaaaaaau;
  __m512i ue = _mm512_castps_si512(e), uo = _mm512_castps_si512(o);
  __m512i t = _mm512_mask_mov_epi16(_mm512_srli_epi32(ue, 16), odd, uo);
  __m512i l = _mm512_mask_mov_epi16(ue, odd, _mm512_slli_epi32(uo, 16));
  __m512i v = _mm512_ternarylogic_epi32(_mm512_set1_epi16(0x7ffe), t, _mm512_set1_epi16(1),
                                        0xf8); /* A | (B & C) */
  return _mm512_add_epi16(t, _mm512_srli_epi16(_mm512_avg_epu16(l, v), 15));
}
PE_AI void bf16_st_eo1(char *p, int32_t n, __m512i v) {
  if (n >= 2 * VL)
    _mm512_storeu_si512(p, v);
  else
    _mm512_mask_storeu_epi16(p, (__mmask32)((1ull << n) - 1u), v);
}
/* g <= 8 vectors of 32 elements rounded and written to p[i] (n elements
 * each, n <= 32): one NaN test for all of them (vcmpps unordered of e and
 * o, the masks or-ed, one branch); a NaN takes bf16_bits (quieted) for the
 * group, the even element's bits or-ed with the odd one's shifted up. */
PE_AI void bf16_st_eo_g(int g, char *const *p, int32_t n, const vf *e, const vf *o) {
  __mmask16 nan = 0;
  for (int i = 0; i < 8; i++)
    if (i < g) nan |= _mm512_cmp_ps_mask(e[i], o[i], _CMP_UNORD_Q);
  if (__builtin_expect(nan == 0, 1)) {
    for (int i = 0; i < 8; i++)
      if (i < g) bf16_st_eo1(p[i], n, bf16_eo_bits(e[i], o[i]));
  } else {
    for (int i = 0; i < 8; i++)
      if (i < g)
        bf16_st_eo1(p[i], n,
                    _mm512_or_si512(bf16_bits(e[i]), _mm512_slli_epi32(bf16_bits(o[i]), 16)));
  }
}
/* e and o (n <= 2*VL elements, no NaN lane: rotate_fast's caller has
 * tested) rounded and written to p. */
PE_AI void bf16_st_eo_fast(void *p, int32_t n, vf e, vf o) { bf16_st_eo1(p, n, bf16_eo_bits(e, o)); }
#endif
/* Whether a lane of a or b (of a, b, c or d) is NaN: vcmpps unordered into
 * a mask (two or-ed), one test. */
PE_AI int vf_any_nan2(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q) != 0; }
PE_AI int vf_any_nan4(vf a, vf b, vf c, vf d) {
  return (_mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(c, d, _CMP_UNORD_Q)) != 0;
}
/* Without AVX512-BF16 the QK-normed bf16 rows of a token rotate in
 * even/odd order with rotate_fast (rope_template.h's neo_rows: vfmsub
 * instead of the sign flip and vfmadd, a unit with a NaN result done again
 * as isa.h says): Intel Xeon, pe-ab --dtype bf16, Qwen3-8B 512 tokens and
 * one, 0.85-0.90 of the time. The avx512bf16 path does not (1.01-1.03x
 * there: vcvtne2ps2bf16 leaves even/odd results for a vpermw, as the
 * natural order's widening does), and the plain rows keep rotate() and
 * bf16_st_eo_g's one test per group on both (with rotate_fast, as AVX2's
 * VEC_ROT_FAST: NeoX [B,T,H,D] 512 tokens 1.14x and 1.26x the time, the
 * store 1.11-1.16x). */
#if !defined(__AVX512BF16__)
#define VEC_NORM_ROT_FAST 1
#endif
/* One vector the same way (vcvtneps2bf16), 16 words. */
BF16_TARGET static inline __m256i bf16_cvt1(vf a) {
  __m256i w = (__m256i)_mm512_cvtneps_pbh(a);
  if (__builtin_expect(_mm256_testn_epi16_mask(w, _mm256_set1_epi16(0x7fff)) != 0, 0) &&
      _mm512_fpclass_ps_mask(a, 0x20) != 0)
    return _mm512_cvtepi32_epi16(bf16_bits(a));
  return w;
}

/* The first m (in [1, VL)) elements of v stored at p in dtype dt (a
 * PE_BF16_CVT row rounds with vcvtneps2bf16): one masked store, the
 * narrowing done in a register - GCC 12 otherwise folds it into the store,
 * and vcvtps2ph m256{k} took 1.63 ns per 16 halves in an L1 loop against
 * 1.03 for the register form + vmovdqu16 m256{k} (AMD EPYC Zen 4). The
 * tails of the encodings' rows (enc_template.h). */
#define VEC_PART_STORE 1
PE_AI void vst_part(int dt, void *p, int32_t m, vf v) {
  if (m <= 0 || m >= VL) __builtin_unreachable(); /* the callers' tails */
  if (dt == PE_F32) {
    vf_storen(p, m, v);
    return;
  }
  __m256i h;
  if (dt == PE_F16)
    h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  else if (dt == PE_BF16)
    h = _mm512_cvtepi32_epi16(bf16_bits(v));
  else
    h = bf16_cvt1(v);
  __asm__("" : "+v"(h));
  _mm256_mask_storeu_epi16(p, mask_n(m), h);
}
/* [a's 16 halves | b's 16 halves]; vcvtps2ph rounds to nearest even keeping
 * subnormals, NaN quieted with its top payload bits (convert.h). The rounding
 * immediate is spelled out: clang needs a constant expression. */
PE_AI __m512i pack16(int dt, vf a, vf b) {
  if (dt == PE_F16)
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
        _mm512_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 1);
  if (dt == PE_BF16) return bf16_pack_int(a, b);
  return bf16_pack_cvt(a, b);
}

/* a to pa (na lanes), b to pb (nb lanes). */
PE_AI void vst2(int dt, void *pa, int32_t na, vf a, void *pb, int32_t nb, vf b) {
  if (dt == PE_F32) {
    vf_storen(pa, na, a);
    vf_storen(pb, nb, b);
    return;
  }
  __m256i lo, hi;
  if (dt == PE_F16) { /* two narrowings stored as they are: no insert + extract */
    lo = _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    hi = _mm512_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {
    __m512i w = pack16(dt, a, b);
    lo = _mm512_castsi512_si256(w);
    hi = _mm512_extracti64x4_epi64(w, 1);
  }
  if (na >= VL) _mm256_storeu_si256(pa, lo); else _mm256_mask_storeu_epi16(pa, mask_n(na), lo);
  if (nb >= VL) _mm256_storeu_si256(pb, hi); else _mm256_mask_storeu_epi16(pb, mask_n(nb), hi);
}
/* 32 contiguous elements a | b as whole 64-byte stores (the cache write: a
 * row is written, not updated, and a whole-line store needs no read of it). */
PE_AI void vstw(int dt, void *p, vf a, vf b) {
  if (dt == PE_F32) {
    _mm512_storeu_ps(p, a);
    _mm512_storeu_ps((float *)p + VL, b);
    return;
  }
  _mm512_storeu_si512(p, pack16(dt, a, b));
}
/* One full vector (the encodings' rows). */
PE_AI void vst(int dt, void *p, vf v) {
  if (dt == PE_F32)
    _mm512_storeu_ps(p, v);
  else if (dt == PE_F16)
    _mm256_storeu_si256(p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  else if (dt == PE_BF16)
    _mm256_storeu_si256(p, _mm512_cvtepi32_epi16(bf16_bits(v)));
  else
    _mm256_storeu_si256(p, bf16_cvt1(v));
}

/* GPT-J's interleaved pairs: x = even lanes of v0 | v1, y = odd lanes. */
PE_AI void vf_deinterleave(vf v0, vf v1, vf *x, vf *y) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  *x = _mm512_permutex2var_ps(v0, even, v1);
  *y = _mm512_permutex2var_ps(v0, _mm512_add_epi32(even, _mm512_set1_epi32(1)), v1);
}
PE_AI void vf_interleave(vf x, vf y, vf *lo, vf *hi) {
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  *lo = _mm512_permutex2var_ps(x, first, y);
  *hi = _mm512_permutex2var_ps(x, _mm512_add_epi32(first, _mm512_set1_epi32(8)), y);
}
PE_AI vf vf_gptj_cs(vf v) { return v; } /* x and y come out in pair order */
/* GPT-J's pairs as they lie (VEC_GPTJ_PAIRS, rope_template.h's gheld_rows):
 * a pair's lanes swapped (in-lane), the even lanes' sign flipped, and the
 * 8 floats at c each twice (c0 c0 c1 c1 ... c7 c7: one vpermps). */
#define VEC_GPTJ_PAIRS 1
PE_AI vf vf_swap_pairs(vf v) { return _mm512_permute_ps(v, 0xb1); }
PE_AI vf vf_neg_even(vf v) {
  return _mm512_xor_ps(v, _mm512_castsi512_ps(_mm512_set1_epi64(0x80000000)));
}
PE_AI vf vf_dup_half(const float *c) {
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
                               _mm512_castps256_ps512(_mm256_loadu_ps(c)));
}

#define VEC_WHOLE_LINES 1

/* ---- bytes <-> int32 lanes (quant_template.h) ---- */

/* VL bytes zero- / sign-extended to VL int32 lanes, and the low byte of each
 * lane (values in 0..255) stored as VL bytes. */
typedef __m512i vbi;
/* quant_common.h's pe_fp8_from_f32 of 16 lanes (fmt a constant), the codes in
 * the low byte of each lane: the generic lane code of quant_template.h with
 * the compares kept in opmasks (gcc widens each generic compare to a vector,
 * vpmovm2d, and selects with two vpternlogd) and the sign or-ed by one
 * vpternlogd: 16 operations instead of 22, 14 -> 11 cycles per 16 lanes
 * with the divide on Zen 4. The bits are the generic code's for every
 * float32 (checked over all 2^32). */
#define VEC_FP8_ENCODE 1
PE_AI vbi vb_fp8_encode(int fmt, vf y) {
  __m512i u = _mm512_castps_si512(y);
  __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  __mmask16 nan = _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000));
  a = _mm512_min_epu32(a, _mm512_set1_epi32((int)PE_FP8_MAXB(fmt)));
  __mmask16 sub = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32((int)PE_FP8_MINNB(fmt)));
  /* RNE on the bits: REBIAS has no bits below 2^23, so the kept lsb is a's */
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, PE_FP8_SHIFT(fmt)), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(
      _mm512_add_epi32(a, _mm512_set1_epi32((int)((1u << (PE_FP8_SHIFT(fmt) - 1)) - 1u -
                                                  PE_FP8_REBIAS(fmt)))),
      lsb);
  __m512i m = _mm512_srli_epi32(r, PE_FP8_SHIFT(fmt));
  __m512 magic = _mm512_set1_ps(PE_FP8_MAGIC(fmt)); /* subnormal: bits(|y| + MAGIC) - bits(MAGIC) */
  m = _mm512_mask_sub_epi32(m, sub, _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), magic)),
                            _mm512_castps_si512(magic));
  m = _mm512_mask_mov_epi32(m, nan, _mm512_set1_epi32((int)PE_FP8_NAN(fmt)));
  return _mm512_ternarylogic_epi32(m, _mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80),
                                   0xf8); /* m | ((u >> 24) & 0x80) */
}
PE_AI vbi vb_load_u8(const void *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(p)); }
PE_AI vbi vb_load_s8(const void *p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(p)); }
PE_AI void vb_store_u8(void *p, vbi v) { _mm_storeu_si128(p, _mm512_cvtepi32_epi8(v)); }
/* Unsigned 32-bit lane minimum, and the largest lane. */
PE_AI vbi vb_min_u32(vbi a, vbi b) { return _mm512_min_epu32(a, b); }
PE_AI uint32_t vb_hmax_u32(vbi v) { return (uint32_t)_mm512_reduce_max_epu32(v); }

/* Q8_0 (quant_template.h). The unsigned 32-bit lane maximum (|x| bits:
 * float order, NaN and Inf above every finite value); the largest lane of
 * each of four vectors as four lanes, reduced together (two 256-bit and two
 * 128-bit exchanges and one in-lane pass for all four, instead of four
 * horizontal reductions); the f16 bits of four floats (vcvtps2ph, round to
 * nearest even: convert.h's pe_f32_to_f16 for every finite float); one
 * block's QV = 2 vectors of int32 in [-128, 127] stored as 32 int8
 * (vpackssdw + vpacksswb in-lane, one vpermd to order: cheaper than two
 * vpmovdb, which Zen 4 splits); roundf (quant_template.h's q_roundf) with
 * its copysign in one vpternlogd. */
PE_AI vbi vb_max_u32(vbi a, vbi b) { return _mm512_max_epu32(a, b); }
PE_AI __m128i vb_hmax4_u32(vbi a0, vbi a1, vbi a2, vbi a3) {
  __m512i t01 = _mm512_max_epu32(_mm512_shuffle_i64x2(a0, a1, 0x44), _mm512_shuffle_i64x2(a0, a1, 0xee));
  __m512i t23 = _mm512_max_epu32(_mm512_shuffle_i64x2(a2, a3, 0x44), _mm512_shuffle_i64x2(a2, a3, 0xee));
  __m512i u = _mm512_max_epu32(_mm512_shuffle_i64x2(t01, t23, 0x88),
                               _mm512_shuffle_i64x2(t01, t23, 0xdd)); /* 128-bit chunk k: a_k */
  u = _mm512_max_epu32(u, _mm512_shuffle_epi32(u, (_MM_PERM_ENUM)0x4e));
  u = _mm512_max_epu32(u, _mm512_shuffle_epi32(u, (_MM_PERM_ENUM)0xb1));
  const __m512i first = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castsi512_si128(_mm512_permutexvar_epi32(first, u));
}
typedef __m128 vf4; /* four float lanes */
PE_AI uint64_t vb_f16x4(vf4 d) {
  return (uint64_t)_mm_cvtsi128_si64(_mm_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* Four f16 (h, little-endian) widened exactly. */
PE_AI vf4 vb_f32x4_f16(uint64_t h) { return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)h)); }
PE_AI void vb_store_q8(void *p, const vbi *q) {
  __m512i b = _mm512_packs_epi16(_mm512_packs_epi32(q[0], q[1]), _mm512_setzero_si512());
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  _mm256_storeu_si256(p, _mm512_castsi512_si256(_mm512_permutexvar_epi32(idx, b)));
}
/* Two blocks' qs (q[0..1] the first's, q[2..3] the second's) narrowed
 * together: two vpackssdw, one vpacksswb, one vpermd (half of the packs and
 * permutes of two vb_store_q8), one 256-bit store to each block. */
#define VEC_Q8_STORE2 1
PE_AI void vb_store_q8x2(void *p0, void *p1, const vbi *q) {
  __m512i w = _mm512_packs_epi16(_mm512_packs_epi32(q[0], q[1]), _mm512_packs_epi32(q[2], q[3]));
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  w = _mm512_permutexvar_epi32(idx, w);
  _mm256_storeu_si256(p0, _mm512_castsi512_si256(w));
  _mm256_storeu_si256(p1, _mm512_extracti64x4_epi64(w, 1));
}
/* Two blocks' qs from 16-bit lanes (quant_template.h's bf16 pairs: w[0]
 * the first block's 32 qs in element order, w[1] the second's): one
 * vpacksswb, one vpermq to order, one 256-bit store to each block. */
#define VEC_Q8_PAIRS 1
PE_AI void vb_store_q8w2(void *p0, void *p1, const vbi *w) {
  __m512i b = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7),
                                       _mm512_packs_epi16(w[0], w[1]));
  _mm256_storeu_si256(p0, _mm512_castsi512_si256(b));
  _mm256_storeu_si256(p1, _mm512_extracti64x4_epi64(b, 1));
}
#define VEC_Q8_ROUND 1
PE_AI vbi vb_q8_round(vf q) {
  __m512i h = _mm512_ternarylogic_epi32(_mm512_castps_si512(q), _mm512_set1_epi32((int)0x80000000u),
                                        _mm512_set1_epi32(0x3effffff), 0xea); /* (q & sign) | 0.49999997 */
  return _mm512_cvttps_epi32(_mm512_add_ps(q, _mm512_castsi512_ps(h)));
}

/* FP8 decoding (quant_template.h): VL bytes zero-extended to VL 16-bit
 * lanes, and VL f16 widened exactly to float. */
typedef __m256i vh;
PE_AI vh vh_load_u8(const void *p) { return _mm256_cvtepu8_epi16(_mm_loadu_si128(p)); }
PE_AI vf vf_from_f16(vh h) { return _mm512_cvtph_ps(h); }

/* 4 * VL codes (lanes in 0..255) of four vectors stored as bytes: vpackusdw +
 * vpackuswb in-lane, one vpermd to order (four vpmovdb cost twice the uops). */
PE_AI void vb_store_u8x4(void *p, vbi a, vbi b, vbi c, vbi d) {
  __m512i w = _mm512_packus_epi16(_mm512_packus_epi32(a, b), _mm512_packus_epi32(c, d));
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_si512(p, _mm512_permutexvar_epi32(idx, w));
}

#endif
