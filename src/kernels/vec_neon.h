/* vec_neon.h - the AArch64 AdvSIMD primitives the templates are written in:
 * four float lanes, two double lanes. AdvSIMD (with FMA and the f16 <-> f32
 * conversions FCVTL/FCVTN) is baseline on AArch64, so neon.c needs no extra
 * flags or probe. FPCR is left at its default: round to nearest even, no
 * flush-to-zero, no default NaN. Interleaved (GPT-J) pairs split and merge
 * with LD2/ST2 (VEC_LD2); tails go through vec_buffered.h. */
#ifndef PE_VEC_NEON_H
#define PE_VEC_NEON_H

#include <arm_neon.h>
#include <sleef.h>

#include "kernel_common.h"

#define ISA neon
#define VL 4
#define VDL 2
typedef float32x4_t vf;
typedef float64x2_t vd;

/* ---- float and double lanes ----
 * vfmaq_f32(a, b, c) = a + b*c fused, the addend first in NaN priority, as
 * FMADD for fmaf: vf_fma(a, b, c) = a*b + c keeps scalar.c's operand order. */
#define vf_load vld1q_f32
#define vf_store vst1q_f32
#define vf_set1 vdupq_n_f32
#define vf_add vaddq_f32
#define vf_mul vmulq_f32
#define vf_neg vnegq_f32
#define vf_fma(a, b, c) vfmaq_f32(c, a, b)
#define vf_fnma(a, b, c) vfmsq_f32(c, a, b) /* c - a*b */

#define vd_load vld1q_f64
#define vd_set1 vdupq_n_f64
#define vd_mul vmulq_f64
#define vd_sub vsubq_f64
#define vd_round vrndnq_f64
#define vd_fnma(a, b, c) vfmsq_f64(c, a, b)
#define vd_add vaddq_f64
#define vd_fma(a, b, c) vfmaq_f64(c, a, b) /* a*b + c */
#define vd_fms(a, b, c) vfmaq_f64(vnegq_f64(c), a, b) /* fma(a, b, -c) */
/* The QK-norm's scales (isa.h's pe__norm_scale): correctly rounded, and
 * NaN lanes made +0. */
#define vd_sqrt vsqrtq_f64
#define vd_div vdivq_f64
/* isa.h's stream_copy, one 64-byte line: ordinary stores (AArch64's STNP is
 * a hint that cores may ignore; not used here). */
PE_AI void stream_line(char *d, const char *s) { memcpy(d, s, 64); }

PE_AI vf vf_nan_to_zero(vf v) {
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v), vceqq_f32(v, v)));
}
/* r where |r| <= PE_REDUCED_MAX (false for NaN), else 0. */
PE_AI vd vd_keep_reduced(vd r) {
  uint64x2_t ok = vcaleq_f64(r, vdupq_n_f64(PE_REDUCED_MAX));
  return vreinterpretq_f64_u64(vandq_u64(vreinterpretq_u64_f64(r), ok));
}
PE_AI vf vf_from_vd2(vd lo, vd hi) { return vcvt_high_f32_f64(vcvt_f32_f64(lo), hi); }
PE_AI vd vd_widen_lo(vf v) { return vcvt_f64_f32(vget_low_f32(v)); }
PE_AI vd vd_widen_hi(vf v) { return vcvt_high_f64_f32(v); }

#define VEC_SINCOSF Sleef_sincosf4_u10advsimd
#define VEC_SINCOSD Sleef_sincosd2_u35advsimd
PE_AI void vd_store_f32(float *p, vd v) { vst1_f32(p, vcvt_f32_f64(v)); }
/* v rounded to float (nearest even, as (float)) and widened back. */
PE_AI vd vd_round_f32(vd v) { return vcvt_f64_f32(vcvt_f32_f64(v)); }

/* (float)|q - (j + lane)|: exact in int32 lanes, scvtf rounds as (float). */
PE_AI vf vf_alibi_dist(int32_t q, int32_t j) {
  static const int32_t lanes[4] = {0, 1, 2, 3};
  int32x4_t vj = vaddq_s32(vdupq_n_s32(j), vld1q_s32(lanes));
  return vcvtq_f32_s32(vabsq_s32(vsubq_s32(vdupq_n_s32(q), vj)));
}
/* alibi_row's distances k keys a step (enc_template.h): on NEON the key
 * index itself, each vector built by vf_alibi_dist (no faster form found). */
typedef struct vdist {
  int32_t q;
  uint32_t j; /* wraps past n like the lanes; read only below n */
} vdist;
PE_AI vdist vdist_init(int32_t q) { return (vdist){q, 0}; }
PE_AI vdist vdist_step(vdist d, int32_t k) { return (vdist){d.q, d.j + (uint32_t)k}; }
PE_AI vf vdist_f(vdist d) { return vf_alibi_dist(d.q, (int32_t)d.j); }

/* ---- dtypes ---- */

/* FCVTL is exact (a signaling NaN comes out quiet: the rotation's load);
 * FCVTN rounds to nearest even, keeps subnormals and quiets NaN keeping its
 * top payload bits (convert.h). bf16 widening is a shift; its narrowing is
 * convert.h's integer round-to-nearest-even, NaN quieted. */
PE_AI vf widen16(int dt, uint16x4_t h) {
  return dt == PE_F16 ? vcvt_f32_f16(vreinterpret_f16_u16(h))
                      : vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}
PE_AI uint16x4_t narrow16(int dt, vf v) {
  if (dt == PE_F16) return vreinterpret_u16_f16(vcvt_f16_f32(v));
  uint32x4_t u = vreinterpretq_u32_f32(v);
  uint32x4_t hi = vshrq_n_u32(u, 16);
  uint32x4_t bias = vaddq_u32(vdupq_n_u32(0x7fff), vandq_u32(hi, vdupq_n_u32(1)));
  uint32x4_t r = vshrq_n_u32(vaddq_u32(u, bias), 16);
  uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
  return vmovn_u32(vbslq_u32(nan, vorrq_u32(hi, vdupq_n_u32(0x40)), r));
}

PE_AI vf vldf(int dt, const void *p) { return dt == PE_F32 ? vld1q_f32(p) : widen16(dt, vld1_u16(p)); }
PE_AI void vstf(int dt, void *p, vf v) {
  if (dt == PE_F32)
    vst1q_f32(p, v);
  else
    vst1_u16(p, narrow16(dt, v));
}

/* f16 widened exactly, signaling NaNs kept: FCVTL sets the quiet bit,
 * cleared again where the input had exponent 31, quiet bit 0, payload != 0. */
PE_AI vf vld_f16_exact(const void *p) {
  uint16x4_t h = vld1_u16(p);
  uint16x4_t snan = vand_u16(vceq_u16(vand_u16(h, vdup_n_u16(0x7e00)), vdup_n_u16(0x7c00)),
                             vtst_u16(h, vdup_n_u16(0x1ff)));
  uint32x4_t quiet = vshll_n_u16(vand_u16(snan, vdup_n_u16(0x40)), 16);
  return vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(widen16(PE_F16, h)), quiet));
}

/* VL interleaved pairs: LD2/ST2 split and merge x and y for free. */
PE_AI void vldif(int dt, const void *p, vf *x, vf *y) {
  if (dt == PE_F32) {
    float32x4x2_t v = vld2q_f32(p);
    *x = v.val[0], *y = v.val[1];
  } else {
    uint16x4x2_t v = vld2_u16(p);
    *x = widen16(dt, v.val[0]), *y = widen16(dt, v.val[1]);
  }
}
PE_AI void vstif(int dt, void *p, vf x, vf y) {
  if (dt == PE_F32) {
    float32x4x2_t v = {{x, y}};
    vst2q_f32(p, v);
  } else {
    uint16x4x2_t v = {{narrow16(dt, x), narrow16(dt, y)}};
    vst2_u16(p, v);
  }
}
#define VEC_LD2 1

/* Four lanes: the cache write's rows need no wider step. */
#define VEC_WHOLE_LINES 0

#include "vec_buffered.h"

/* ---- bytes <-> int32 lanes (quant_template.h) ---- */

/* VL bytes zero- / sign-extended to VL int32 lanes, and the low byte of each
 * lane (values in 0..255) stored as VL bytes. */
typedef uint32x4_t vbi;
PE_AI uint8x8_t vb_load4(const void *p) {
  uint32_t u;
  memcpy(&u, p, 4);
  return vreinterpret_u8_u32(vdup_n_u32(u));
}
PE_AI vbi vb_load_u8(const void *p) { return vmovl_u16(vget_low_u16(vmovl_u8(vb_load4(p)))); }
PE_AI vbi vb_load_s8(const void *p) {
  int8x8_t b = vreinterpret_s8_u8(vb_load4(p));
  return vreinterpretq_u32_s32(vmovl_s16(vget_low_s16(vmovl_s8(b))));
}
PE_AI void vb_store_u8(void *p, vbi v) {
  uint16x4_t h = vmovn_u32(v);
  uint8x8_t b = vmovn_u16(vcombine_u16(h, h));
  uint32_t u = vget_lane_u32(vreinterpret_u32_u8(b), 0);
  memcpy(p, &u, 4);
}
/* Unsigned 32-bit lane minimum, and the largest lane. */
PE_AI vbi vb_min_u32(vbi a, vbi b) { return vminq_u32(a, b); }
PE_AI uint32_t vb_hmax_u32(vbi v) { return vmaxvq_u32(v); }
/* Q8_0 (quant_template.h): the unsigned lane maximum; the largest lane of
 * each of four vectors as four lanes (three pairwise maxima); the f16 bits
 * of four floats (FCVTN, FPCR's round to nearest even: pe_f32_to_f16 for
 * every finite float); one block's QV = 8 vectors of int32 in [-128, 127]
 * stored as 32 int8 (UZP1 keeps the low halves, then the low bytes). */
PE_AI vbi vb_max_u32(vbi a, vbi b) { return vmaxq_u32(a, b); }
PE_AI uint32x4_t vb_hmax4_u32(vbi a0, vbi a1, vbi a2, vbi a3) {
  return vpmaxq_u32(vpmaxq_u32(a0, a1), vpmaxq_u32(a2, a3));
}
typedef float32x4_t vf4; /* four float lanes */
PE_AI uint64_t vb_f16x4(vf4 d) {
  return vget_lane_u64(vreinterpret_u64_f16(vcvt_f16_f32(d)), 0);
}
/* Four f16 (h, little-endian) widened exactly. */
PE_AI vf4 vb_f32x4_f16(uint64_t h) { return vcvt_f32_f16(vreinterpret_f16_u64(vcreate_u64(h))); }
PE_AI void vb_store_q8(void *p, const vbi *q) {
  for (int h = 0; h < 2; h++) {
    uint16x8_t a = vuzp1q_u16(vreinterpretq_u16_u32(q[4 * h]), vreinterpretq_u16_u32(q[4 * h + 1]));
    uint16x8_t b =
        vuzp1q_u16(vreinterpretq_u16_u32(q[4 * h + 2]), vreinterpretq_u16_u32(q[4 * h + 3]));
    vst1q_u8((uint8_t *)p + 16 * h, vuzp1q_u8(vreinterpretq_u8_u16(a), vreinterpretq_u8_u16(b)));
  }
}

/* FP8 decoding (quant_template.h): VL bytes zero-extended to VL 16-bit
 * lanes, and VL f16 widened exactly to float. */
typedef uint16x4_t vh;
PE_AI vh vh_load_u8(const void *p) { return vget_low_u16(vmovl_u8(vb_load4(p))); }
PE_AI vf vf_from_f16(vh h) { return vcvt_f32_f16(vreinterpret_f16_u16(h)); }

/* 4 * VL codes (lanes in 0..255) of four vectors stored as bytes. */
PE_AI void vb_store_u8x4(void *p, vbi a, vbi b, vbi c, vbi d) {
  uint16x8_t x = vuzp1q_u16(vreinterpretq_u16_u32(a), vreinterpretq_u16_u32(b));
  uint16x8_t y = vuzp1q_u16(vreinterpretq_u16_u32(c), vreinterpretq_u16_u32(d));
  vst1q_u8((uint8_t *)p, vuzp1q_u8(vreinterpretq_u8_u16(x), vreinterpretq_u8_u16(y)));
}

#endif
