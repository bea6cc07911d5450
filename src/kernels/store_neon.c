/* store_neon.c - AArch64 AdvSIMD twins of store_scalar.c, bit-identical.
 * Four float lanes; interleaved (GPT-J) pairs split and merge with LD2/ST2;
 * tails go through zero-padded buffers and the same vector code. The
 * conversions and the rotation are those of neon.c, lane for lane. */
#include <arm_neon.h>
#include <string.h>

#include "kernels.h"
#include "store_kernels.h"

/* FCVTL is exact; FCVTN rounds to nearest even (FPCR default), keeps
 * subnormals and quiets NaN: convert.h. */
static inline float32x4_t widen_f16(uint16x4_t h) { return vcvt_f32_f16(vreinterpret_f16_u16(h)); }
static inline uint16x4_t narrow_f16(float32x4_t v) { return vreinterpret_u16_f16(vcvt_f16_f32(v)); }
static inline float32x4_t widen_bf16(uint16x4_t h) { return vreinterpretq_f32_u32(vshll_n_u16(h, 16)); }
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

/* x' = fmaf(x, c, -(y*s)); y' = fmaf(y, c, x*s), as neon.c. */
static inline void rotate4(float32x4_t x, float32x4_t y, float32x4_t c, float32x4_t s,
                           float32x4_t *xo, float32x4_t *yo) {
  float32x4_t ys = vmulq_f32(y, s);
  PE_OPAQUE(ys); /* clang would move the sign onto s */
  float32x4_t nys = vnegq_f32(ys);
  PE_OPAQUE(nys); /* kernels.h: the negation stays a negation */
  *xo = vfmaq_f32(nys, x, c);
  *yo = vfmaq_f32(vmulq_f32(x, s), y, c);
}

static inline float32x4_t load_sin(const float *p) { return vld1q_f32(p); }

#define NEOX4(SN, DN, sx, sy, dx, dy, c, s)                                                     \
  do {                                                                                          \
    float32x4_t xn_, yn_;                                                                       \
    rotate4(load_##SN(sx), load_##SN(sy), vld1q_f32(c), load_sin(s), &xn_, &yn_);      \
    store_##DN(dx, xn_);                                                                        \
    store_##DN(dy, yn_);                                                                        \
  } while (0)

#define GPTJ4(SN, DN, sp, dp, c, s)                                                             \
  do {                                                                                          \
    float32x4_t x_, y_, xn_, yn_;                                                               \
    load2_##SN(sp, &x_, &y_);                                                                   \
    rotate4(x_, y_, vld1q_f32(c), load_sin(s), &xn_, &yn_);                            \
    store2_##DN(dp, xn_, yn_);                                                                  \
  } while (0)

#define DEFINE_PAIR(SN, S, SDT, DN, D, DDT)                                                     \
  static void row_##SN##_##DN##_neox(const void *src, void *dst, const float *cs, int32_t half) { \
    const S *in = src;                                                                          \
    D *out = dst;                                                                               \
    int32_t j = 0;                                                                              \
    for (; j + 4 <= half; j += 4)                                                               \
      NEOX4(SN, DN, in + j, in + half + j, out + j, out + half + j, cs + j, cs + half + j);     \
    if (j < half) {                                                                             \
      size_t m = (size_t)(half - j);                                                            \
      S x[4] = {0}, y[4] = {0};                                                                 \
      D xo[4], yo[4];                                                                           \
      float c[4] = {0}, s[4] = {0};                                                             \
      memcpy(x, in + j, m * sizeof(S));                                                         \
      memcpy(y, in + half + j, m * sizeof(S));                                                  \
      memcpy(c, cs + j, m * sizeof(float));                                                     \
      memcpy(s, cs + half + j, m * sizeof(float));                                              \
      NEOX4(SN, DN, x, y, xo, yo, c, s);                                               \
      memcpy(out + j, xo, m * sizeof(D));                                                       \
      memcpy(out + half + j, yo, m * sizeof(D));                                                \
    }                                                                                           \
  }                                                                                             \
  static void row_##SN##_##DN##_gptj(const void *src, void *dst, const float *cs, int32_t half) { \
    const S *in = src;                                                                          \
    D *out = dst;                                                                               \
    int32_t j = 0;                                                                              \
    for (; j + 4 <= half; j += 4)                                                               \
      GPTJ4(SN, DN, in + 2 * j, out + 2 * j, cs + j, cs + half + j);                   \
    if (j < half) {                                                                             \
      size_t m = (size_t)(half - j);                                                            \
      S v[8] = {0};                                                                             \
      D o[8];                                                                                   \
      float c[4] = {0}, s[4] = {0};                                                             \
      memcpy(v, in + 2 * j, 2 * m * sizeof(S));                                                 \
      memcpy(c, cs + j, m * sizeof(float));                                                     \
      memcpy(s, cs + half + j, m * sizeof(float));                                              \
      GPTJ4(SN, DN, v, o, c, s);                                                       \
      memcpy(out + 2 * j, o, 2 * m * sizeof(D));                                                \
    }                                                                                           \
  }                                                                                             \
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

const pe_store_kernels pe__store_kernels_neon = {
    .name = "neon",
    .rope_store_rows = {{rows_f32_f32, rows_f32_f16, rows_f32_bf16},
                        {rows_f16_f32, rows_f16_f16, rows_f16_bf16},
                        {rows_bf16_f32, rows_bf16_f16, rows_bf16_bf16}},
};
