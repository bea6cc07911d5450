/* store_scalar.c - the reference of the fused rotate-and-store kernels:
 * portable C with the arithmetic of scalar.c (explicit fmaf in the same
 * order; the library is built with -ffp-contract=off). The vector files
 * reproduce these bit for bit. */
#include <math.h>

#include "kernels.h"
#include "store_kernels.h"

#define LOAD_F32(p) (*(const float *)(p))
/* f16 widening as the vector units do it (F16C, FCVTL): a signaling NaN
 * comes out quiet. It decides which NaN an fma returns when two operands are
 * NaN, since Arm prefers a signaling one (scalar.c's load_f16, same rule). */
static inline float widen_f16_quiet(uint16_t h) {
  float f = pe_f16_to_f32(h);
  return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) ? pe_bits_f32(pe_f32_bits(f) | 0x400000u) : f;
}
#define LOAD_F16(p) widen_f16_quiet(*(const uint16_t *)(p))
#define LOAD_BF16(p) pe_bf16_to_f32(*(const uint16_t *)(p))
#define STORE_F32(p, v) (*(float *)(p) = (v))
#define STORE_F16(p, v) (*(uint16_t *)(p) = pe_f32_to_f16(v))
#define STORE_BF16(p, v) (*(uint16_t *)(p) = pe_f32_to_bf16(v))

/* Pairs (XO + j*STEP, YO + j*STEP), j < half: scalar.c's DEFINE_ROPE_ROW with
 * the load from src and the store into dst. */
#define DEFINE_STORE_ROW(NAME, S, D, LOAD, STORE, XO, YO, STEP)                                  \
  static void NAME(const void *src, void *dst, const float *cs, int32_t half) { \
    const S *in = src;                                                                           \
    D *out = dst;                                                                                \
    const float *cosv = cs, *sinv = cs + half;                                                   \
    for (int32_t j = 0; j < half; j++) {                                                         \
      int64_t ix = (XO) + (int64_t)j * (STEP), iy = (YO) + (int64_t)j * (STEP);                  \
      float x = LOAD(in + ix), y = LOAD(in + iy), c = cosv[j], s = sinv[j];               \
      float ys = y * s;                                                                          \
      PE_OPAQUE(ys);                                                                             \
      float nys = -ys;                                                                           \
      PE_OPAQUE(nys);                                                                            \
      STORE(out + ix, fmaf(x, c, nys));                                                          \
      STORE(out + iy, fmaf(y, c, x * s));                                                        \
    }                                                                                            \
  }

#define DEFINE_STORE_ROWS(SN, S, SDT, LOAD, DN, D, DDT, STORE)                                   \
  DEFINE_STORE_ROW(row_##SN##_##DN##_neox, S, D, LOAD, STORE, 0, half, 1)                        \
  DEFINE_STORE_ROW(row_##SN##_##DN##_gptj, S, D, LOAD, STORE, 0, 1, 2)                           \
  static void rows_##SN##_##DN(const void *const *src, int64_t shs, void *const *dst,            \
                               int64_t dhs, int64_t n_heads, int64_t n_tokens,                   \
                               const float *const *cs, int32_t half, int32_t head_dim,           \
                               int32_t style) {                                 \
    pe_rope_store_walk(src, SDT, shs, dst, DDT, dhs, n_heads, n_tokens, cs, half, head_dim,      \
                       style == PE_ROPE_GPTJ ? row_##SN##_##DN##_gptj : row_##SN##_##DN##_neox); \
  }

#define DEFINE_FROM(SN, S, SDT, LOAD)                                                            \
  DEFINE_STORE_ROWS(SN, S, SDT, LOAD, f32, float, PE_F32, STORE_F32)                             \
  DEFINE_STORE_ROWS(SN, S, SDT, LOAD, f16, uint16_t, PE_F16, STORE_F16)                          \
  DEFINE_STORE_ROWS(SN, S, SDT, LOAD, bf16, uint16_t, PE_BF16, STORE_BF16)

DEFINE_FROM(f32, float, PE_F32, LOAD_F32)
DEFINE_FROM(f16, uint16_t, PE_F16, LOAD_F16)
DEFINE_FROM(bf16, uint16_t, PE_BF16, LOAD_BF16)

const pe_store_kernels pe__store_kernels_scalar = {
    .name = "scalar",
    .rope_store_rows = {{rows_f32_f32, rows_f32_f16, rows_f32_bf16},
                        {rows_f16_f32, rows_f16_f16, rows_f16_bf16},
                        {rows_bf16_f32, rows_bf16_f16, rows_bf16_bf16}},
};
