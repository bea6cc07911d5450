/* enc_common.h - the per-element definitions of the non-RoPE encodings
 * (ALiBi, T5, sinusoidal, learned) and the helpers alibi.c and t5.c share.
 *
 * What lives in kernels and what does not: the kernels (isa.h: add_row,
 * alibi_row, load_row, sincos) only touch tensor rows (load, one float32
 * operation per element, round once, store). Values that depend on positions
 * (sinusoidal rows, T5 bucket lookups) are computed by the portable entry
 * points, once per call or per row, so they are identical on every ISA by
 * construction. The per-element arithmetic is defined once, by the static
 * inline helpers below: scalar.c applies them to whole rows, the vector
 * templates use them for their tails and reproduce them lane by lane. */
#ifndef PE_ENC_COMMON_H
#define PE_ENC_COMMON_H

#include <math.h> /* FP_FAST_FMA, read by sleef.h too */
#include <sleef.h>
#include <stdint.h>

#include "base/internal.h"
#include "convert.h"

/* The one-angle step every ISA's tail uses. sleef.h declares the FMA variant
 * only to files compiled with FMA (FP_FAST_FMA); declare it for the others. */
#if !defined(FP_FAST_FMA)
Sleef_double_2 Sleef_sincosd1_u35purecfma(double);
#endif
static inline void pe__sincos_f64_one(double a, float *s, float *c) {
  Sleef_double_2 r = Sleef_sincosd1_u35purecfma(a);
  *s = (float)r.x;
  *c = (float)r.y;
}

/* ---- shared by the score-bias entry points (alibi.c, t5.c) ---- */

/* The position of query i of batch row b. */
static inline int64_t pe__query_pos(const int64_t *q_positions, int64_t b, int64_t i,
                                    int64_t q_len, int64_t k_len) {
  return q_positions ? q_positions[b * q_len + i] : k_len - q_len + i;
}

/* Keys [0, n) of a row get a bias, keys [n, k_len) the causal -inf. */
static inline int64_t pe__biased_keys(int64_t qpos, int64_t k_len, int causal) {
  return causal && qpos < k_len - 1 ? qpos + 1 : k_len;
}

/* ---- the per-element definitions every ISA follows ---- */

/* The ALiBi bias of distance |qpos - j|: float conversion of the exact
 * integer, then a float multiply by -slope. */
static inline float pe__alibi_bias(int64_t qpos, int64_t j, float neg_slope) {
  int64_t d = qpos >= j ? qpos - j : j - qpos;
  return neg_slope * (float)d;
}

/* Element access of a row of dtype dt (convert.h: exact widening, one
 * rounding; no quieting of signaling NaNs). Inlined with a constant dt. */
static inline __attribute__((always_inline)) float pe__elem_load(pe_dtype dt, const void *p,
                                                                  int64_t i) {
  if (dt == PE_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == PE_F16 ? pe_f16_to_f32(h) : pe_bf16_to_f32(h);
}
static inline __attribute__((always_inline)) void pe__elem_store(pe_dtype dt, void *p, int64_t i,
                                                                 float v) {
  if (dt == PE_F32)
    ((float *)p)[i] = v;
  else
    ((uint16_t *)p)[i] = dt == PE_F16 ? pe_f32_to_f16(v) : pe_f32_to_bf16(v);
}

/* The element loops: scalar.c runs them over whole rows, the vector
 * templates over their tails. Same dtype semantics as the kernels of isa.h. */
static inline __attribute__((always_inline)) void pe__enc_add(pe_dtype dt, void *row,
                                                              const float *v, int64_t n) {
  for (int64_t j = 0; j < n; j++) pe__elem_store(dt, row, j, pe__elem_load(dt, row, j) + v[j]);
}
/* j0: index of row[0] in the full row (tails start mid-row). */
static inline __attribute__((always_inline)) void pe__enc_alibi(pe_dtype dt, void *row, int64_t j0,
                                                                int64_t n, int64_t qpos, float ns) {
  for (int64_t j = 0; j < n; j++)
    pe__elem_store(dt, row, j, pe__elem_load(dt, row, j) + pe__alibi_bias(qpos, j0 + j, ns));
}
/* Widening (dt f16/bf16) or converting (any pair) element by element. */
static inline __attribute__((always_inline)) void pe__enc_convert(pe_dtype sd, const void *src,
                                                                  pe_dtype dd, void *dst,
                                                                  int64_t n) {
  for (int64_t j = 0; j < n; j++) pe__elem_store(dd, dst, j, pe__elem_load(sd, src, j));
}

/* Write -inf into n elements of a row of dtype dt (the fused causal mask):
 * scalar.c's and NEON's mask_row (isa.h); the x86 ISAs store the same bits
 * a vector at a time (enc_template.h). */
static inline void pe__enc_fill_neg_inf(void *row, pe_dtype dt, int64_t n) {
  if (dt == PE_F32) {
    float *r = row;
    for (int64_t j = 0; j < n; j++) r[j] = pe_bits_f32(0xff800000u);
  } else {
    uint16_t *r = row, v = dt == PE_F16 ? 0xfc00u : 0xff80u;
    for (int64_t j = 0; j < n; j++) r[j] = v;
  }
}

#endif
