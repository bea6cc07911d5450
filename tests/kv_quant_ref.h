/* kv_quant_ref.h - the references the quantized-cache tests share, written
 * here from the formats' definitions, never from the library:
 *   - OCP FP8 e4m3fn / e5m2 from the OCP 8-bit Floating Point Specification
 *     (OFP8 rev. 1.0): every code's value from its fields, the nearest finite
 *     value with ties to the even code, saturation, NaN;
 *   - a transcription of ggml's quantize_row_q8_0_ref and
 *     dequantize_row_q8_0 (ggml-quants.c) with ggml-impl.h's fp16
 *     conversions (from the FP16 library).
 * Formats by isa.h's / posenc.h's index: E4M3 0, E5M2 1, Q8_0 2 (the public
 * pe_kv_quant minus one). Include after <cmocka.h>. */
#ifndef PE_TEST_KV_QUANT_REF_H
#define PE_TEST_KV_QUANT_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "test_util.h"

enum { E4M3 = 0, E5M2 = 1, Q8_0 = 2 };

/* ---- the OCP FP8 reference ---- */

/* Format parameters (OFP8 table 1): exponent bits, mantissa bits, bias. */
static inline int ebits(int f) { return f == E4M3 ? 4 : 5; }
static inline int mbits(int f) { return f == E4M3 ? 3 : 2; }
static inline int bias(int f) { return f == E4M3 ? 7 : 15; }

/* 0: finite, 1: Inf, 2: NaN (e4m3fn: S.1111.111 only; e5m2: exponent all
 * ones, mantissa 0 Inf, else NaN). */
static inline int code_class(int f, unsigned c) {
  unsigned e = (c >> mbits(f)) & ((1u << ebits(f)) - 1), m = c & ((1u << mbits(f)) - 1);
  if (f == E4M3) return (c & 0x7f) == 0x7f ? 2 : 0;
  if (e == 31) return m ? 2 : 1;
  return 0;
}
/* The value of a finite code: (-1)^s 2^(e-bias) (1 + m/2^M), or for e = 0
 * 2^(1-bias) m/2^M. */
static inline double code_value(int f, unsigned c) {
  unsigned e = (c >> mbits(f)) & ((1u << ebits(f)) - 1), m = c & ((1u << mbits(f)) - 1);
  double v = e ? ldexp(1.0 + m / (double)(1 << mbits(f)), (int)e - bias(f))
               : ldexp(m / (double)(1 << mbits(f)), 1 - bias(f));
  return (c & 0x80) ? -v : v;
}
static inline double max_finite(int f) { return f == E4M3 ? 448.0 : 57344.0; }

/* The code of float y: NaN -> the NaN code the header defines (e4m3fn
 * sign|0x7f, e5m2 sign|0x7e); otherwise the nearest finite magnitude to |y|
 * over all non-negative finite codes (ties: the even code), |y| beyond the
 * largest finite magnitude (Inf included) saturating to it; the sign of y. */
static inline unsigned ref_encode(int f, float y) {
  unsigned sign = (f32_bits(y) >> 24) & 0x80;
  if (isnan(y)) return sign | (f == E4M3 ? 0x7f : 0x7e);
  double a = fabs((double)y);
  if (a >= max_finite(f)) {
    for (unsigned c = 0; c < 0x80; c++)
      if (code_class(f, c) == 0 && code_value(f, c) == max_finite(f)) return sign | c;
  }
  unsigned best = 0;
  double bd = INFINITY;
  for (unsigned c = 0; c < 0x80; c++) {
    if (code_class(f, c) != 0) continue;
    /* exact for the two neighbours of a, which decide: their distance to a is
     * below a quarter of a and a multiple of a's float32 ulp */
    double d = fabs(a - code_value(f, c));
    if (d < bd || (d == bd && (c & 1) == 0)) {
      bd = d;
      best = c;
    }
  }
  return sign | best;
}

/* The float32 value of a code (dequantized with scale 1): the code's value,
 * Inf, or a NaN (any NaN accepted by the caller). */
static inline float ref_decode(int f, unsigned c) {
  int k = code_class(f, c);
  if (k == 2) return NAN;
  if (k == 1) return (c & 0x80) ? -INFINITY : INFINITY;
  return (float)code_value(f, c);
}

/* ---- Q8_0: a transcription of ggml ---- */

/* ggml-impl.h ggml_compute_fp32_to_fp16 (from the FP16 library): RNE,
 * overflow to Inf, NaN 0x7e00. */
static inline uint16_t ggml_fp32_to_fp16(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (fabsf(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = f32_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias_ = shl1_w & 0xff000000u;
  if (bias_ < 0x71000000u) bias_ = 0x71000000u;
  base = bits_f32((bias_ >> 1) + 0x07800000u) + base;
  const uint32_t bits = f32_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007c00u;
  const uint32_t mantissa_bits = bits & 0x00000fffu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return (uint16_t)((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}
/* ggml-impl.h ggml_compute_fp16_to_fp32 (FP16 library). */
static inline float ggml_fp16_to_fp32(uint16_t h) {
  const uint32_t w = (uint32_t)h << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xe0u << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized_value = bits_f32((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized_value = bits_f32((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = 1u << 27;
  const uint32_t result =
      sign | (two_w < denormalized_cutoff ? f32_bits(denormalized_value) : f32_bits(normalized_value));
  return bits_f32(result);
}

#define GGML_MAX(x, y) (((x) > (y)) ? (x) : (y))

/* quantize_row_q8_0_ref, for finite rows (its roundf + int8 conversion of a
 * non-finite x*id is not defined C; the header defines 0 there, which the
 * dedicated test below checks). */
static inline void ggml_quantize_row_q8_0_ref(const float *x, uint8_t *y, int64_t k) {
  const int nb = (int)(k / 32);
  for (int i = 0; i < nb; i++) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
      const float v = x[i * 32 + j];
      amax = GGML_MAX(amax, fabsf(v));
    }
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    uint16_t dh = ggml_fp32_to_fp16(d);
    y[i * 34] = (uint8_t)(dh & 0xff);
    y[i * 34 + 1] = (uint8_t)(dh >> 8);
    for (int j = 0; j < 32; ++j) {
      const float x0 = x[i * 32 + j] * id;
      y[i * 34 + 2 + j] = (uint8_t)(int8_t)roundf(x0);
    }
  }
}
/* dequantize_row_q8_0. */
static inline void ggml_dequantize_row_q8_0(const uint8_t *x, float *y, int64_t k) {
  for (int i = 0; i < k / 32; i++) {
    const float d = ggml_fp16_to_fp32((uint16_t)(x[i * 34] | x[i * 34 + 1] << 8));
    for (int j = 0; j < 32; ++j) y[i * 32 + j] = (float)(int8_t)x[i * 34 + 2 + j] * d;
  }
}


/* One row of dim floats in format f (scale for FP8) the reference way. */
static inline void ref_quant_row(int f, const float *x, uint8_t *out, int64_t dim, float scale) {
  if (f == Q8_0) {
    ggml_quantize_row_q8_0_ref(x, out, dim);
    return;
  }
  for (int64_t i = 0; i < dim; i++) out[i] = (uint8_t)ref_encode(f, x[i] / scale);
}
/* ... and read back: code value * scale (exact double product, one
 * rounding), ggml's dequantization for Q8_0. NaN codes give a NaN. */
static inline void ref_dequant_row(int f, const uint8_t *q, float *y, int64_t dim, float scale) {
  if (f == Q8_0) {
    ggml_dequantize_row_q8_0(q, y, dim);
    return;
  }
  for (int64_t i = 0; i < dim; i++) {
    float v = ref_decode(f, q[i]);
    y[i] = isfinite(v) ? (float)((double)v * (double)scale) : v;
  }
}

#endif
