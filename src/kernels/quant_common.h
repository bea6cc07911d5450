/* quant_common.h - the element definitions of the quantized KV-cache
 * formats (isa.h's kv_quant / kv_dequant kernels): OCP FP8 e4m3fn and e5m2
 * with a per-tensor scale, and ggml's Q8_0 blocks. scalar.c applies them to
 * whole rows; the vector template (quant_template.h) reproduces them lane by
 * lane with integer and float operations (no CPU here has FP8 instructions)
 * and calls the per-block scalar steps below itself, so those are the same
 * code on every ISA.
 *
 * References: the OCP 8-bit Floating Point Specification (OFP8) rev. 1.0
 * (e4m3fn: bias 7, no Inf, S.1111.111 NaN; e5m2: bias 15, IEEE-like
 * Inf/NaN), and ggml's quantize_row_q8_0_ref / dequantize_row_q8_0
 * (ggml-quants.c). */
#ifndef PE_QUANT_COMMON_H
#define PE_QUANT_COMMON_H

#include <math.h>
#include <stdint.h>

#include "convert.h"
#include "kv_format.h"

/* Kernel format indices (isa.h): the public PE_KV_* value minus one. */
#define PE_KVQ_E4M3 0
#define PE_KVQ_E5M2 1
#define PE_KVQ_Q8_0 2

/* ---- FP8 ---- */

/* Per-format constants: the float32 bits of the largest finite magnitude and
 * of the smallest normal, the exponent rebias (127 - bias) << 23, the
 * mantissa shift 23 - m, the subnormal "magic" 2^(23 + log2(subnormal step))
 * and the canonical NaN magnitude stored. */
#define PE_FP8_MAXB(f) ((f) == PE_KVQ_E4M3 ? 0x43e00000u : 0x47600000u)    /* 448, 57344 */
#define PE_FP8_MINNB(f) ((f) == PE_KVQ_E4M3 ? 0x3c800000u : 0x38800000u)   /* 2^-6, 2^-14 */
#define PE_FP8_REBIAS(f) ((f) == PE_KVQ_E4M3 ? (120u << 23) : (112u << 23))
#define PE_FP8_SHIFT(f) ((f) == PE_KVQ_E4M3 ? 20 : 21)
#define PE_FP8_MAGIC(f) ((f) == PE_KVQ_E4M3 ? 16384.0f : 128.0f)          /* 2^14, 2^7 */
#define PE_FP8_NAN(f) ((f) == PE_KVQ_E4M3 ? 0x7fu : 0x7eu)

/* The code of float32 y (already divided by the scale), isa.h:
 *   NaN            -> sign | 0x7f (e4m3fn) / sign | 0x7e (e5m2, quiet)
 *   |y| > max      -> sign | max code (0x7e = 448, 0x7b = 57344; Inf too)
 *   |y| < min normal: m = bits(|y| + MAGIC) - bits(MAGIC)  (float add: RNE
 *                  to a multiple of the subnormal step; m may be the
 *                  smallest normal code)
 *   otherwise      r = bits(|y|) - REBIAS; r += (1 << (SHIFT-1)) - 1 +
 *                  ((r >> SHIFT) & 1); m = r >> SHIFT  (integer RNE)
 * and the code is sign | m. */
static inline uint8_t pe_fp8_from_f32(int fmt, float y) {
  uint32_t u = pe_f32_bits(y), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu, m;
  if (a > 0x7f800000u) return (uint8_t)(sign | PE_FP8_NAN(fmt));
  if (a > PE_FP8_MAXB(fmt)) a = PE_FP8_MAXB(fmt);
  if (a < PE_FP8_MINNB(fmt)) {
    m = pe_f32_bits(pe_bits_f32(a) + PE_FP8_MAGIC(fmt)) - pe_f32_bits(PE_FP8_MAGIC(fmt));
  } else {
    uint32_t r = a - PE_FP8_REBIAS(fmt);
    r += (1u << (PE_FP8_SHIFT(fmt) - 1)) - 1u + ((r >> PE_FP8_SHIFT(fmt)) & 1u);
    m = r >> PE_FP8_SHIFT(fmt);
  }
  return (uint8_t)(sign | m);
}

/* Whether scale is a normal power of two (2^-126 .. 2^127: its reciprocal
 * 2^-127 .. 2^126 is a float, exactly), for which the vector kernels
 * multiply by 1/scale instead of dividing (the same value: quant_template.h's
 * kvq_fp8_rows). vLLM's uncalibrated k_scale / v_scale is 1.0. */
#define PE_FP8_POW2_SCALE(s) ((pe_f32_bits(s) & 0x807fffffu) == 0 && (pe_f32_bits(s) >> 23) != 0)

/* The exact float32 value of a code (before the scale), isa.h:
 *   e4m3fn: m = c & 0x7f; 0x7f NaN -> sign | 0x7fc00000; m < 8 -> m * 2^-9;
 *           else bits (m << 20) + (120 << 23)
 *   e5m2:   m >= 0x7d NaN -> sign | 0x7fc00000; 0x7c -> sign | Inf;
 *           m < 4 -> m * 2^-16; else bits (m << 21) + (112 << 23)
 * with the sign bit or-ed in (c & 0x80 -> bit 31). */
static inline float pe_fp8_to_f32(int fmt, uint8_t c) {
  uint32_t sign = (uint32_t)(c & 0x80u) << 24, m = c & 0x7fu, b;
  if (fmt == PE_KVQ_E4M3) {
    if (m == 0x7fu) return pe_bits_f32(sign | 0x7fc00000u);
    b = m < 8u ? pe_f32_bits((float)m * 0x1p-9f) : (m << 20) + (120u << 23);
  } else {
    if (m > 0x7cu) return pe_bits_f32(sign | 0x7fc00000u);
    if (m == 0x7cu) return pe_bits_f32(sign | 0x7f800000u);
    b = m < 4u ? pe_f32_bits((float)m * 0x1p-16f) : (m << 21) + (112u << 23);
  }
  return pe_bits_f32(sign | b);
}

/* ---- Q8_0: the per-block scalar steps (every ISA calls these) ---- */

/* From a block's amax (ggml's MAX(amax, fabsf(x)) over its 32 values; only
 * called for finite blocks, where the order does not matter):
 *   d = amax / 127.0f; id = d != 0 ? 1.0f / d : 0.0f; stored d = f16 RNE of
 *   d (convert.h, overflow to Inf as ggml's GGML_FP32_TO_FP16). */
static inline float pe_q8_0_inv(float amax, uint16_t *d16) {
  float d = amax / 127.0f;
  *d16 = pe_f32_to_f16(d);
  return d != 0.0f ? 1.0f / d : 0.0f;
}

/* qs of one value: q = x * id (float); 0 when q is not finite (id = Inf when
 * d underflows 1/d's range: what ggml's roundf + int8 conversion gives on
 * x86-64); else roundf(q) (half away from zero), |q| < 128. */
static inline int8_t pe_q8_0_q(float x, float id) {
  float q = x * id;
  if (!(fabsf(q) <= 0x1.fffffep127f)) return 0;
  return (int8_t)roundf(q);
}

/* The stored d of a block holding a NaN or an Inf (every qs 0): f16 NaN, so
 * the whole block reads back as NaN. */
#define PE_Q8_0_NONFINITE_D 0x7e00u

#endif
