/* neon.c - AArch64 AdvSIMD kernels, bit-identical to scalar.c.
 * AdvSIMD (with FMA and the f16 <-> f32 conversions FCVTL/FCVTN) is baseline
 * on AArch64, so this file needs no extra flags or probe. Four float lanes;
 * tails go through a small zero-padded buffer and the same vector code, so
 * only the row's own channels are read and written. */
#include <arm_neon.h>
#include <sleef.h>
#include <string.h>

#include "kernels.h"
#include "sincos_consts.h"

/* ---- cos/sin rows ---- */

/* theta - k*2pi, k = nearbyint(theta/2pi): scalar.c's sincos_one, 2 lanes.
 * vfmsq_f64(a, b, c) = a - b*c fused, i.e. fma(-k, hi, theta). */
static inline float64x2_t reduce_2pi(float64x2_t theta) {
  float64x2_t k = vrndnq_f64(vmulq_n_f64(theta, PE_INV_2PI));
  float64x2_t r = vfmsq_f64(theta, k, vdupq_n_f64(PE_2PI_HI));
  r = vfmsq_f64(r, k, vdupq_n_f64(PE_2PI_LO));
  /* |r| <= PE_REDUCED_MAX (false for NaN): keep r, else 0 */
  uint64x2_t ok = vcaleq_f64(r, vdupq_n_f64(PE_REDUCED_MAX));
  return vreinterpretq_f64_u64(vandq_u64(vreinterpretq_u64_f64(r), ok));
}

/* cos/sin of p*freq[0..4): double reduction, SLEEF's float sincos of the
 * rounded angle, first-order fix for the rounding dr. */
static inline void sincos4(float64x2_t p, const double *freq, float scale, float *cos_out,
                           float *sin_out) {
  float64x2_t r0 = reduce_2pi(vmulq_f64(p, vld1q_f64(freq)));
  float64x2_t r1 = reduce_2pi(vmulq_f64(p, vld1q_f64(freq + 2)));
  float32x4_t rf = vcvt_high_f32_f64(vcvt_f32_f64(r0), r1);
  float64x2_t d0 = vsubq_f64(r0, vcvt_f64_f32(vget_low_f32(rf)));
  float64x2_t d1 = vsubq_f64(r1, vcvt_high_f64_f32(rf));
  float32x4_t dr = vcvt_high_f32_f64(vcvt_f32_f64(d0), d1);
  Sleef_float32x4_t_2 sc = Sleef_sincosf4_u10advsimd(rf); /* .x = sin, .y = cos */
  float32x4_t c = vfmsq_f32(sc.y, sc.x, dr);               /* fmaf(-s, dr, c) */
  float32x4_t s = vfmaq_f32(sc.x, sc.y, dr);               /* fmaf(c, dr, s) */
  if (scale != 1.0f) {
    c = vmulq_n_f32(c, scale);
    s = vmulq_n_f32(s, scale);
  }
  vst1q_f32(cos_out, c);
  vst1q_f32(sin_out, s);
}

static void rope_sincos_neon(int64_t pos0, int64_t n, const double *freq, int32_t half,
                             float scale, float *out) {
  for (int64_t r = 0; r < n; r++) {
    float64x2_t p = vdupq_n_f64((double)(pos0 + r));
    float *row = out + r * 2 * half;
    int32_t i = 0;
    for (; i + 4 <= half; i += 4) sincos4(p, freq + i, scale, row + i, row + half + i);
    if (i < half) { /* zero angles in the padding; only half - i lanes copied out */
      double f[4] = {0};
      float c[4], s[4];
      size_t m = (size_t)(half - i);
      memcpy(f, freq + i, m * sizeof(double));
      sincos4(p, f, scale, c, s);
      memcpy(row + i, c, m * sizeof(float));
      memcpy(row + half + i, s, m * sizeof(float));
    }
  }
}

/* ---- dtype conversions (4 lanes) ---- */

/* FCVTL is exact; FCVTN rounds to nearest even (FPCR default), keeps
 * subnormals and quiets NaN keeping its top payload bits: convert.h. */
static inline float32x4_t widen_f16(uint16x4_t h) {
  return vcvt_f32_f16(vreinterpret_f16_u16(h));
}
static inline uint16x4_t narrow_f16(float32x4_t v) {
  return vreinterpret_u16_f16(vcvt_f16_f32(v));
}
static inline float32x4_t widen_bf16(uint16x4_t h) {
  return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}
/* Integer round-to-nearest-even with NaN quieted, as pe_f32_to_bf16. */
static inline uint16x4_t narrow_bf16(float32x4_t v) {
  uint32x4_t u = vreinterpretq_u32_f32(v);
  uint32x4_t hi = vshrq_n_u32(u, 16);
  uint32x4_t bias = vaddq_u32(vdupq_n_u32(0x7fff), vandq_u32(hi, vdupq_n_u32(1)));
  uint32x4_t r = vshrq_n_u32(vaddq_u32(u, bias), 16);
  uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
  return vmovn_u32(vbslq_u32(nan, vorrq_u32(hi, vdupq_n_u32(0x40)), r));
}

static inline float32x4_t load_f32(const void *p) { return vld1q_f32(p); }
static inline void store_f32(void *p, float32x4_t v) { vst1q_f32(p, v); }
static inline float32x4_t load_f16(const void *p) { return widen_f16(vld1_u16(p)); }
static inline void store_f16(void *p, float32x4_t v) { vst1_u16(p, narrow_f16(v)); }
static inline float32x4_t load_bf16(const void *p) { return widen_bf16(vld1_u16(p)); }
static inline void store_bf16(void *p, float32x4_t v) { vst1_u16(p, narrow_bf16(v)); }

/* Interleaved pairs: LD2/ST2 split and merge x and y for free. */
static inline void load2_f32(const void *p, float32x4_t *x, float32x4_t *y) {
  float32x4x2_t v = vld2q_f32(p);
  *x = v.val[0], *y = v.val[1];
}
static inline void store2_f32(void *p, float32x4_t x, float32x4_t y) {
  float32x4x2_t v = {{x, y}};
  vst2q_f32(p, v);
}
static inline void load2_f16(const void *p, float32x4_t *x, float32x4_t *y) {
  uint16x4x2_t v = vld2_u16(p);
  *x = widen_f16(v.val[0]), *y = widen_f16(v.val[1]);
}
static inline void store2_f16(void *p, float32x4_t x, float32x4_t y) {
  uint16x4x2_t v = {{narrow_f16(x), narrow_f16(y)}};
  vst2_u16(p, v);
}
static inline void load2_bf16(const void *p, float32x4_t *x, float32x4_t *y) {
  uint16x4x2_t v = vld2_u16(p);
  *x = widen_bf16(v.val[0]), *y = widen_bf16(v.val[1]);
}
static inline void store2_bf16(void *p, float32x4_t x, float32x4_t y) {
  uint16x4x2_t v = {{narrow_bf16(x), narrow_bf16(y)}};
  vst2_u16(p, v);
}

/* ---- rotation ---- */

/* x' = fmaf(x, c, -(y*s)); y' = fmaf(y, c, x*s). vfmaq_f32(a, b, c) = a + b*c
 * fused, with the addend first in NaN priority, as FMADD for fmaf. */
static inline void rotate4(float32x4_t x, float32x4_t y, float32x4_t c, float32x4_t s,
                           float32x4_t *xo, float32x4_t *yo) {
  float32x4_t ys = vmulq_f32(y, s);
  PE_OPAQUE(ys); /* clang would move the sign onto s */
  float32x4_t nys = vnegq_f32(ys);
  PE_OPAQUE(nys); /* kernels.h: the negation stays a negation */
  *xo = vfmaq_f32(nys, x, c);
  *yo = vfmaq_f32(vmulq_f32(x, s), y, c);
}


/* sin, negated for the inverse rotation by a -1 hidden from the compiler
 * (kernels.h); the branch is uniform over a row. */
static inline float32x4_t load_sin(const float *p, int32_t inverse) {
  float32x4_t s = vld1q_f32(p);
  if (inverse) {
    float32x4_t minus_one = vdupq_n_f32(-1.0f);
    __asm__("" : "+w"(minus_one));
    s = vmulq_f32(s, minus_one);
  }
  return s;
}

#define NEOX4(DT, px, py, c, s)                                                        \
  do {                                                                                          \
    float32x4_t xn_, yn_;                                                                       \
    rotate4(load_##DT(px), load_##DT(py), vld1q_f32(c), load_sin(s, inverse), &xn_, &yn_);      \
    store_##DT(px, xn_);                                                                        \
    store_##DT(py, yn_);                                                                        \
  } while (0)

#define GPTJ4(DT, p, c, s)                                                             \
  do {                                                                                          \
    float32x4_t x_, y_, xn_, yn_;                                                               \
    load2_##DT(p, &x_, &y_);                                                                    \
    rotate4(x_, y_, vld1q_f32(c), load_sin(s, inverse), &xn_, &yn_);                            \
    store2_##DT(p, xn_, yn_);                                                                   \
  } while (0)

#define DEFINE_ROWS(DT, T)                                                                      \
  static void row_##DT##_neox(void *data, const float *cs, int32_t half, int32_t inverse) {     \
    T *row = data;                                                                              \
    int32_t j = 0;                                                                              \
    for (; j + 4 <= half; j += 4) NEOX4(DT, row + j, row + half + j, cs + j, cs + half + j); \
    if (j < half) {                                                                             \
      size_t m = (size_t)(half - j);                                                            \
      T x[4] = {0}, y[4] = {0};                                                                 \
      float c[4] = {0}, s[4] = {0};                                                             \
      memcpy(x, row + j, m * sizeof(T));                                                        \
      memcpy(y, row + half + j, m * sizeof(T));                                                 \
      memcpy(c, cs + j, m * sizeof(float));                                                     \
      memcpy(s, cs + half + j, m * sizeof(float));                                              \
      NEOX4(DT, x, y, c, s);                                                           \
      memcpy(row + j, x, m * sizeof(T));                                                        \
      memcpy(row + half + j, y, m * sizeof(T));                                                 \
    }                                                                                           \
  }                                                                                             \
  static void row_##DT##_gptj(void *data, const float *cs, int32_t half, int32_t inverse) {     \
    T *row = data;                                                                              \
    int32_t j = 0;                                                                              \
    for (; j + 4 <= half; j += 4) GPTJ4(DT, row + 2 * j, cs + j, cs + half + j);       \
    if (j < half) {                                                                             \
      size_t m = (size_t)(half - j);                                                            \
      T v[8] = {0};                                                                             \
      float c[4] = {0}, s[4] = {0};                                                             \
      memcpy(v, row + 2 * j, 2 * m * sizeof(T));                                                \
      memcpy(c, cs + j, m * sizeof(float));                                                     \
      memcpy(s, cs + half + j, m * sizeof(float));                                              \
      GPTJ4(DT, v, c, s);                                                              \
      memcpy(row + 2 * j, v, 2 * m * sizeof(T));                                                \
    }                                                                                           \
  }                                                                                             \
  static void rope_rows_##DT##_neon(void *data, int64_t head_stride, int64_t n_heads,           \
                                    int64_t token_stride, int64_t n_tokens,                     \
                                    const float *const *cs, int32_t half, int32_t style,        \
                                    int32_t inverse) {                                          \
    if (style == PE_ROPE_GPTJ)                                                                  \
      pe_rope_rows_walk(data, (int64_t)sizeof(T), head_stride, n_heads, token_stride, n_tokens, \
                        cs, half, inverse, row_##DT##_gptj);                                    \
    else                                                                                        \
      pe_rope_rows_walk(data, (int64_t)sizeof(T), head_stride, n_heads, token_stride, n_tokens, \
                        cs, half, inverse, row_##DT##_neox);                                    \
  }

DEFINE_ROWS(f32, float)
DEFINE_ROWS(f16, uint16_t)
DEFINE_ROWS(bf16, uint16_t)

const pe_kernels pe__kernels_neon = {
    .name = "neon",
    .rope_sincos = rope_sincos_neon,
    .rope_rows = {rope_rows_f32_neon, rope_rows_f16_neon, rope_rows_bf16_neon},
};
