/* scalar.c - the reference kernels: portable C, compiled for the baseline
 * CPU. Every other ISA file reproduces these bit for bit, so the arithmetic
 * here is spelled out with explicit fma/fmaf in the order the vector code
 * uses (the whole library is built with -ffp-contract=off). */
#include <math.h>
#include <sleef.h>

#include "convert.h"
#include "kernels.h"
#include "sincos_consts.h"
#include "../cpu.h"

/* sleef.h declares the FMA variant only when compiling with FMA; the library
 * always has it. It uses FMA instructions, so on x86 CPUs without FMA (where
 * no SIMD path exists either) the scalar path takes the non-FMA variant; its
 * last bit may differ, which is documented. On AArch64 FMA is baseline. */
Sleef_float_2 Sleef_sincosf1_u10purecfma(float);

static Sleef_float_2 sleef_sincosf(float x) {
#if defined(__aarch64__)
  return Sleef_sincosf1_u10purecfma(x);
#else
  return (pe__cpu_features() & PE_CPU_AVX2) ? Sleef_sincosf1_u10purecfma(x)
                                            : Sleef_sincosf1_u10purec(x);
#endif
}

static inline void sincos_one(double theta, float scale, float *c_out, float *s_out) {
  double k = nearbyint(theta * PE_INV_2PI);
  double r = fma(-k, PE_2PI_HI, theta);
  r = fma(-k, PE_2PI_LO, r);
  if (!(fabs(r) <= PE_REDUCED_MAX)) r = 0.0; /* see kernels.h */
  float rf = (float)r;
  float dr = (float)(r - (double)rf);
  Sleef_float_2 sc = sleef_sincosf(rf);
  float c = fmaf(-sc.x, dr, sc.y);
  float s = fmaf(sc.y, dr, sc.x);
  if (scale != 1.0f) {
    c *= scale;
    s *= scale;
  }
  *c_out = c;
  *s_out = s;
}

static void rope_sincos_scalar(int64_t pos0, int64_t n, const double *freq, int32_t half,
                               float scale, float *out) {
  for (int64_t r = 0; r < n; r++) {
    double p = (double)(pos0 + r);
    float *row = out + r * 2 * half;
    for (int32_t i = 0; i < half; i++) sincos_one(p * freq[i], scale, &row[i], &row[half + i]);
  }
}

/* One rotation of a pair; the definition every ISA follows. */
static inline void rotate_pair(float x, float y, float c, float s, float *xo, float *yo) {
  float ys = y * s;
  PE_OPAQUE(ys); /* clang would move the sign onto s */
  float nys = -ys;
  PE_OPAQUE(nys);
  *xo = fmaf(x, c, nys);
  *yo = fmaf(y, c, x * s);
}

/* f16 widening as the hardware does it (F16C, FCVTL): a signaling NaN comes
 * out quiet. It matters for which NaN an fma returns when x and y are both
 * NaN: Arm prefers a signaling operand. */
static inline float load_f16(uint16_t h) {
  float f = pe_f16_to_f32(h);
  return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) ? pe_bits_f32(pe_f32_bits(f) | 0x400000u) : f;
}

/* One row: pairs (xo + j*step, yo + j*step), j < half. */
#define DEFINE_ROPE_ROW(NAME, T, LOAD, STORE, XO, YO, STEP)                                      \
  static void NAME(void *data, const float *cs, int32_t half, int32_t inverse) {                 \
    T *row = data;                                                                               \
    const float *cosv = cs, *sinv = cs + half;                                                   \
    float sign = inverse ? -1.0f : 1.0f; /* multiplied always: see kernels.h */                  \
    PE_OPAQUE(sign); /* a -1 the compiler cannot fold into -(y*s) (kernels.h) */                \
    for (int32_t j = 0; j < half; j++) {                                                         \
      T *px = row + (XO) + j * (STEP), *py = row + (YO) + j * (STEP);                            \
      float xn, yn;                                                                              \
      rotate_pair(LOAD(*px), LOAD(*py), cosv[j], sign * sinv[j], &xn, &yn);                      \
      *px = STORE(xn);                                                                           \
      *py = STORE(yn);                                                                           \
    }                                                                                            \
  }

#define DEFINE_ROPE_ROWS(NAME, T, LOAD, STORE)                                                   \
  DEFINE_ROPE_ROW(NAME##_neox, T, LOAD, STORE, 0, half, 1)                                       \
  DEFINE_ROPE_ROW(NAME##_gptj, T, LOAD, STORE, 0, 1, 2)                                          \
  static void NAME(void *data, int64_t head_stride, int64_t n_heads, int64_t token_stride,       \
                   int64_t n_tokens, const float *const *cs, int32_t half, int32_t style,        \
                   int32_t inverse) {                                                            \
    pe_rope_rows_walk(data, (int64_t)sizeof(T), head_stride, n_heads, token_stride, n_tokens,    \
                      cs, half, inverse, style == PE_ROPE_GPTJ ? NAME##_gptj : NAME##_neox);     \
  }

#define LOAD_F32(v) (v)
#define STORE_F32(v) (v)
DEFINE_ROPE_ROWS(rope_rows_f32_scalar, float, LOAD_F32, STORE_F32)
DEFINE_ROPE_ROWS(rope_rows_f16_scalar, uint16_t, load_f16, pe_f32_to_f16)
DEFINE_ROPE_ROWS(rope_rows_bf16_scalar, uint16_t, pe_bf16_to_f32, pe_f32_to_bf16)

const pe_kernels pe__kernels_scalar = {
    .name = "scalar",
    .rope_sincos = rope_sincos_scalar,
    .rope_rows = {rope_rows_f32_scalar, rope_rows_f16_scalar, rope_rows_bf16_scalar},
};
