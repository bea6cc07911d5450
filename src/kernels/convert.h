/* convert.h - portable float32 <-> f16/bf16 conversions, the reference every
 * ISA's vector conversions must match bit for bit: round to nearest even,
 * subnormals kept, overflow to Inf, NaN kept quiet with its sign and the top
 * bits of its payload. */
#ifndef PE_CONVERT_H
#define PE_CONVERT_H

#include <stdint.h>
#include <string.h>

static inline uint32_t pe_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float pe_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline float pe_bf16_to_f32(uint16_t h) { return pe_bits_f32((uint32_t)h << 16); }

static inline uint16_t pe_f32_to_bf16(float f) {
  uint32_t u = pe_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float pe_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return pe_bits_f32(sign | 0x7f800000u | (mant << 13)); /* Inf/NaN */
  if (exp == 0) {
    if (mant == 0) return pe_bits_f32(sign);
    /* subnormal: mant * 2^-24, exact in float */
    float v = (float)mant * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return pe_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline uint16_t pe_f32_to_f16(float f) {
  uint32_t u = pe_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* quiet NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: Inf */
  if (a < 0x38800000u) {
    /* result is subnormal or zero: value / 2^-24 rounded to nearest even */
    if (a < 0x33000000u) return sign; /* < 2^-25: rounds to 0 */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  /* normal: rebias exponent, round mantissa from 23 to 10 bits */
  uint32_t r = a - 0x38000000u; /* exponent - 112 */
  r += 0xfffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

#endif
