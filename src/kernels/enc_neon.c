/* enc_neon.c - AArch64 AdvSIMD twins of enc_scalar.c, 4 lanes (8 for the
 * 16-bit loads and stores, as two halves). Bit-identical to scalar: the same
 * single float operations per element (no FMA: -ffp-contract=off, and
 * vaddq/vmulq never fuse), conversions that round exactly like convert.h
 * (FPCR is left at its default: round to nearest even, no flush-to-zero, no
 * default-NaN), and the scalar helpers of enc_kernels.h for tails. */
#include <arm_neon.h>
#include <sleef.h>
#include <string.h>

#include "enc_kernels.h"

/* ---- conversions, lane for lane those of convert.h ---- */

/* f16 -> f32 (fcvtl) is exact and keeps subnormals. It quiets a signalling
 * NaN where convert.h does not, but every loaded value goes through an add
 * before it is stored, and the add quiets it the same way. */
static inline float32x4_t load4_f16(const uint16_t *p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}
static inline float32x4_t load4_bf16(const uint16_t *p) {
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
static inline float32x4_t load4_f32(const float *p) { return vld1q_f32(p); }

static inline void store4_f32(float *p, float32x4_t v) { vst1q_f32(p, v); }

/* fcvtn with FPCR's round-to-nearest-even: subnormal results kept, overflow
 * to Inf, NaN quieted keeping sign and the top payload bits, as convert.h. */
static inline void store4_f16(uint16_t *p, float32x4_t v) {
  vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v)));
}

/* convert.h's integer rounding: NaN -> top half | 0x40, else
 * (u + 0x7fff + lsb) >> 16. */
static inline void store4_bf16(uint16_t *p, float32x4_t v) {
  uint32x4_t u = vreinterpretq_u32_f32(v);
  uint32x4_t hi = vshrq_n_u32(u, 16);
  uint32x4_t lsb = vandq_u32(hi, vdupq_n_u32(1));
  uint32x4_t r = vshrq_n_u32(vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fff)), lsb), 16);
  uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
  r = vbslq_u32(nan, vorrq_u32(hi, vdupq_n_u32(0x40)), r);
  vst1_u16(p, vmovn_u32(r));
}

/* ---- row kernels: one body per dtype through a macro over the
 * conversions above, so the arithmetic is written once ---- */

#define ADD_ROW(T, SFX)                                                        \
  static void add_row_##SFX(void *row_, const float *v, int64_t n) {          \
    T *row = row_;                                                             \
    int64_t j = 0;                                                             \
    for (; j + 4 <= n; j += 4)                                                 \
      store4_##SFX(row + j, vaddq_f32(load4_##SFX(row + j), vld1q_f32(v + j))); \
    pe__enc_add_##SFX(row + j, v + j, n - j);                                  \
  }
ADD_ROW(float, f32)
ADD_ROW(uint16_t, f16)
ADD_ROW(uint16_t, bf16)

/* Distances as int32 lanes: exact when qpos and n fit in int32 (then
 * |qpos - j| < 2^31), and scvtf rounds them to nearest-even exactly as the
 * scalar (float) of the int64 does. Longer rows or farther queries take the
 * scalar helper. The bias is neg_slope * d (float multiply), then x + bias
 * (float add), as pe__alibi_bias. */
#define ALIBI_ROW(T, SFX)                                                      \
  static void alibi_row_##SFX(void *row_, int64_t n, int64_t qpos, float ns) { \
    T *row = row_;                                                             \
    int64_t j = 0;                                                             \
    if (qpos <= INT32_MAX && n <= INT32_MAX) {                                 \
      static const int32_t lanes[4] = {0, 1, 2, 3};                            \
      const int32x4_t lane = vld1q_s32(lanes);                                 \
      const int32x4_t vq = vdupq_n_s32((int32_t)qpos);                         \
      const float32x4_t vns = vdupq_n_f32(ns);                                 \
      for (; j + 4 <= n; j += 4) {                                             \
        int32x4_t vj = vaddq_s32(vdupq_n_s32((int32_t)j), lane);               \
        float32x4_t d = vcvtq_f32_s32(vabsq_s32(vsubq_s32(vq, vj)));           \
        float32x4_t bias = vmulq_f32(vns, d);                                  \
        store4_##SFX(row + j, vaddq_f32(load4_##SFX(row + j), bias));         \
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
    for (; j + 4 <= n; j += 4) vst1q_f32(out + j, load4_##SFX(src + j));      \
    pe__enc_load_##SFX(out + j, src + j, n - j);                               \
  }
LOAD_ROW(f16)
LOAD_ROW(bf16)

static void sincos_neon(const double *angle, int32_t n, float *s, float *c) {
  int32_t i = 0;
  for (; i + 2 <= n; i += 2) {
    Sleef_float64x2_t_2 r = Sleef_sincosd2_u35advsimd(vld1q_f64(angle + i));
    vst1_f32(s + i, vcvt_f32_f64(r.x)); /* rounds to nearest even, as (float) */
    vst1_f32(c + i, vcvt_f32_f64(r.y));
  }
  for (; i < n; i++) pe__sincos_f64_one(angle[i], &s[i], &c[i]);
}

const pe_enc_kernels pe__enc_kernels_neon = {
    .sincos = sincos_neon,
    .name = "neon",
    .add_row = {add_row_f32, add_row_f16, add_row_bf16},
    .alibi_row = {alibi_row_f32, alibi_row_f16, alibi_row_bf16},
    .load_row = {load_row_f32, load_row_f16, load_row_bf16},
};
