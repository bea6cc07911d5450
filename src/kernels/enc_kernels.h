/* enc_kernels.h - kernel table of the non-RoPE encodings (ALiBi, T5,
 * sinusoidal, learned): one instance per ISA in src/kernels/enc_<isa>.c,
 * selected together with the RoPE table (dispatch.c). Every ISA must be
 * bit-identical to enc_scalar.c.
 *
 * What lives in kernels and what does not: the kernels only touch tensor
 * rows (load, one float32 operation per element, round once, store). Values
 * that depend on positions (sinusoidal rows, T5 bucket lookups) are computed
 * by the portable entry points (alibi.c, t5.c, sinusoidal.c), once per call
 * or per row, so they are identical on every ISA by construction.
 *
 * The per-element arithmetic is defined once, by the static inline helpers
 * below; the vector files use them for their tails and reproduce them lane by
 * lane in their bodies. */
#ifndef PE_ENC_KERNELS_H
#define PE_ENC_KERNELS_H

#include <math.h> /* FP_FAST_FMA, read by sleef.h too */
#include <sleef.h>
#include <stdint.h>

#include "../internal.h"
#include "convert.h"

/* row[j] = round(load(row[j]) + v[j]) for j in [0, n). row is of the
 * kernel's dtype (the table index), v is float32. The add is `x + v` with x
 * the tensor element as the first operand. Used by T5 (v = gathered bias),
 * sinusoidal (v = PE row) and learned (v = table row). */
typedef void (*pe_enc_add_row_fn)(void *row, const float *v, int64_t n);

/* ALiBi on one row of scores, j in [0, n):
 *   d    = (float)|qpos - j|         (one rounding from the exact integer)
 *   bias = neg_slope * d             (float multiply; neg_slope = -slope)
 *   row[j] = round(load(row[j]) + bias)   (float add, then one rounding)
 * qpos in [0, 2^53), n <= 2^53. The causal mask (-inf for j > qpos) is not
 * the kernel's business: the caller passes n <= qpos + 1 and fills the rest. */
typedef void (*pe_enc_alibi_row_fn)(void *row, int64_t n, int64_t qpos, float neg_slope);

/* out[j] = (float)src[j] for j in [0, n): exact widening of a table row of
 * the kernel's dtype (learned embeddings whose table dtype differs from x). */
typedef void (*pe_enc_load_row_fn)(float *out, const void *src, int64_t n);

/* sin and cos of n double angles: SLEEF's double-precision sincos (u35, the
 * FMA variant, which gives the same bits on every ISA), each rounded once to
 * float32 - correctly rounded but for results within ~4e-16 of a float tie.
 * The sinusoidal tables use it: DistilBERT computes them in float64 and casts. */
typedef void (*pe_enc_sincos_fn)(const double *angle, int32_t n, float *sin_out, float *cos_out);

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

typedef struct pe_enc_kernels {
  const char *name;
  pe_enc_sincos_fn sincos;
  pe_enc_add_row_fn add_row[3];     /* indexed by pe_dtype of row */
  pe_enc_alibi_row_fn alibi_row[3]; /* indexed by pe_dtype of row */
  pe_enc_load_row_fn load_row[3];   /* indexed by pe_dtype of src */
} pe_enc_kernels;

extern PE_HIDDEN const pe_enc_kernels pe__enc_kernels_scalar;
/* Weak: an ISA whose enc_<isa>.c is not built falls back to scalar. */
extern PE_HIDDEN const pe_enc_kernels pe__enc_kernels_avx2 __attribute__((weak));
extern PE_HIDDEN const pe_enc_kernels pe__enc_kernels_avx512 __attribute__((weak));
extern PE_HIDDEN const pe_enc_kernels pe__enc_kernels_neon __attribute__((weak));

/* The table of the selected ISA (same selection as pe__kernels()). */
PE_HIDDEN const pe_enc_kernels *pe__enc_kernels(void);

/* ---- shared by the score-bias entry points (alibi.c, t5.c) ---- */

/* Check scores ([batch, heads, q_len, k_len], written in place), q_positions
 * ([batch][q_len], NULL = k_len - q_len + i, which needs q_len <= k_len) and
 * flags (PE_MASK_CAUSAL). Defined in alibi.c. */
PE_HIDDEN pe_status pe__check_scores(const char *fn, const pe_tensor *scores,
                                     const int64_t *q_positions, uint32_t flags);

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

/* Scalar loops, shared by enc_scalar.c and the tails of the vector files. */
static inline void pe__enc_add_f32(float *row, const float *v, int64_t n) {
  for (int64_t j = 0; j < n; j++) row[j] = row[j] + v[j];
}
static inline void pe__enc_add_f16(uint16_t *row, const float *v, int64_t n) {
  for (int64_t j = 0; j < n; j++) row[j] = pe_f32_to_f16(pe_f16_to_f32(row[j]) + v[j]);
}
static inline void pe__enc_add_bf16(uint16_t *row, const float *v, int64_t n) {
  for (int64_t j = 0; j < n; j++) row[j] = pe_f32_to_bf16(pe_bf16_to_f32(row[j]) + v[j]);
}

/* j0: index of row[0] in the full row (tails start mid-row). */
static inline void pe__enc_alibi_f32(float *row, int64_t j0, int64_t n, int64_t qpos, float ns) {
  for (int64_t j = 0; j < n; j++) row[j] = row[j] + pe__alibi_bias(qpos, j0 + j, ns);
}
static inline void pe__enc_alibi_f16(uint16_t *row, int64_t j0, int64_t n, int64_t qpos,
                                     float ns) {
  for (int64_t j = 0; j < n; j++)
    row[j] = pe_f32_to_f16(pe_f16_to_f32(row[j]) + pe__alibi_bias(qpos, j0 + j, ns));
}
static inline void pe__enc_alibi_bf16(uint16_t *row, int64_t j0, int64_t n, int64_t qpos,
                                      float ns) {
  for (int64_t j = 0; j < n; j++)
    row[j] = pe_f32_to_bf16(pe_bf16_to_f32(row[j]) + pe__alibi_bias(qpos, j0 + j, ns));
}

static inline void pe__enc_load_f16(float *out, const uint16_t *src, int64_t n) {
  for (int64_t j = 0; j < n; j++) out[j] = pe_f16_to_f32(src[j]);
}
static inline void pe__enc_load_bf16(float *out, const uint16_t *src, int64_t n) {
  for (int64_t j = 0; j < n; j++) out[j] = pe_bf16_to_f32(src[j]);
}

/* Write -inf into n elements of a row of dtype dt (the fused causal mask).
 * Pure stores of a constant bit pattern: the same on every ISA, so it lives
 * here rather than in the table. */
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
