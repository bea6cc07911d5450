/* store_kernels.h - kernel table of the fused "rotate k and write it into the
 * KV cache" operation (pe_apply_rope_qk_store): one instance per ISA in
 * src/kernels/store_<isa>.c, selected together with the RoPE table
 * (pe__store_kernels() in rope_ext.c). Every ISA must be bit-identical to
 * store_scalar.c.
 *
 * The definition every ISA follows is "apply, then convert", computed once:
 * load the source element (its dtype) and widen it exactly to float32,
 * rotate exactly as kernels.h says (x' = fmaf(x, c, -(y*s)),
 * y' = fmaf(y, c, x*s); the inverse rotation arrives as rows with sin
 * negated, as for rope_rows), and round once to the
 * destination dtype (convert.h). Channels [2*half, head_dim) are not rotated:
 * they are converted element by element with pe__store_pass below, which is
 * plain C shared by every ISA (identical by construction; partial-rotary
 * tails are short). */
#ifndef PE_STORE_KERNELS_H
#define PE_STORE_KERNELS_H

#include <stdint.h>
#include <string.h>

#include "../internal.h"
#include "convert.h"

/* Rotate n_tokens x n_heads rows from src into dst. Token t's head-0 row is
 * src[t] (source dtype, the table's first index) and dst[t] (destination
 * dtype, the second index); head h adds h*src_head_stride / h*dst_head_stride
 * elements of the respective dtype. cs[t] = [cos half | sin half]. Each row
 * has head_dim channels: 2*half rotated (style NEOX or GPTJ), the rest
 * converted. src and dst never overlap (checked by the entry point). */
typedef void (*pe_rope_store_rows_fn)(const void *const *src, int64_t src_head_stride,
                                      void *const *dst, int64_t dst_head_stride, int64_t n_heads,
                                      int64_t n_tokens, const float *const *cs, int32_t half,
                                      int32_t head_dim, int32_t style);

/* One row's rotated channels, as each ISA file writes it per dtype pair and style. */
typedef void (*pe_rope_store_row_fn)(const void *src, void *dst, const float *cs, int32_t half);

typedef struct pe_store_kernels {
  const char *name;
  pe_rope_store_rows_fn rope_store_rows[3][3]; /* [src dtype][dst dtype] */
} pe_store_kernels;

extern PE_HIDDEN const pe_store_kernels pe__store_kernels_scalar;
/* Weak: an ISA whose store_<isa>.c is not built falls back to scalar. */
extern PE_HIDDEN const pe_store_kernels pe__store_kernels_avx2 __attribute__((weak));
extern PE_HIDDEN const pe_store_kernels pe__store_kernels_avx512 __attribute__((weak));
extern PE_HIDDEN const pe_store_kernels pe__store_kernels_neon __attribute__((weak));

/* The table of the selected ISA (same selection as pe__kernels()). */
PE_HIDDEN const pe_store_kernels *pe__store_kernels(void);

/* ---- shared by every ISA ---- */

static inline float pe__store_load(const void *p, pe_dtype dt, int64_t i) {
  if (dt == PE_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == PE_F16 ? pe_f16_to_f32(h) : pe_bf16_to_f32(h);
}

static inline void pe__store_put(void *p, pe_dtype dt, int64_t i, float v) {
  if (dt == PE_F32)
    ((float *)p)[i] = v;
  else
    ((uint16_t *)p)[i] = dt == PE_F16 ? pe_f32_to_f16(v) : pe_f32_to_bf16(v);
}

/* The channels past the rotation: a same-dtype copy keeps the bits (as the
 * in-place apply leaves them); otherwise widen exactly and round once. */
static inline void pe__store_pass(const void *src, pe_dtype sd, void *dst, pe_dtype dd,
                                  int64_t n) {
  if (n <= 0) return;
  if (sd == dd) {
    memcpy(dst, src, (size_t)n * (sd == PE_F32 ? 4u : 2u));
    return;
  }
  for (int64_t j = 0; j < n; j++) pe__store_put(dst, dd, j, pe__store_load(src, sd, j));
}

/* The walk shared by every ISA, always inlined with a constant `row`: tokens
 * outer (each goes to its own cache slot), heads inner (adjacent in both the
 * activations' [T, H, D] and the cache's slot rows of the common layouts). */
static inline __attribute__((always_inline)) void pe_rope_store_walk(
    const void *const *src, pe_dtype sd, int64_t src_head_stride, void *const *dst, pe_dtype dd,
    int64_t dst_head_stride, int64_t n_heads, int64_t n_tokens, const float *const *cs,
    int32_t half, int32_t head_dim, pe_rope_store_row_fn row) {
  int64_t ses = sd == PE_F32 ? 4 : 2, des = dd == PE_F32 ? 4 : 2;
  int64_t shs = src_head_stride * ses, dhs = dst_head_stride * des;
  int64_t rot = 2 * (int64_t)half, rest = head_dim - rot;
  for (int64_t t = 0; t < n_tokens; t++) {
    const char *s = src[t];
    char *d = dst[t];
    for (int64_t h = 0; h < n_heads; h++) {
      row(s + h * shs, d + h * dhs, cs[t], half);
      if (rest > 0) pe__store_pass(s + h * shs + rot * ses, sd, d + h * dhs + rot * des, dd, rest);
    }
  }
}

#endif
