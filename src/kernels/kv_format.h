/* kv_format.h - the byte layout of a KV-cache row in each pe_kv_quant format
 * (posenc.h): the one place the formats' sizes are defined. The kernels
 * (quant_common.h) encode rows of this layout; validation and the engine
 * size and address them with it. */
#ifndef PE_KV_FORMAT_H
#define PE_KV_FORMAT_H

#include <math.h>
#include <string.h>

#include "base/internal.h"

/* Q8_0 (ggml's block_q8_0): 32 values per block, 2 bytes of f16 d then 32
 * int8 qs. */
#define PE_Q8_0_BLOCK 32
#define PE_Q8_0_BYTES 34

/* Longest quantized row: a token's whole cos/sin row fits the engine's
 * scratch, so a row is rotated in float32 in one piece before it is
 * quantized. */
#define PE_KV_QUANT_MAX_DIM 4096

/* Bytes of one cache row of dim channels in format quant (dtype dt when
 * PE_KV_PLAIN). */
static inline int64_t pe__kv_row_bytes(uint32_t quant, int64_t dim, pe_dtype dt) {
  switch (quant) {
    case PE_KV_FP8_E4M3:
    case PE_KV_FP8_E5M2:
    case PE_KV_FP8_E4M3_ROWSCALE: return dim;
    case PE_KV_Q8_0: return dim / PE_Q8_0_BLOCK * PE_Q8_0_BYTES;
    default: return dim * (int64_t)pe__dtype_size(dt);
  }
}

/* The format's name in messages. */
static inline const char *pe__kv_quant_name(uint32_t q) {
  static const char *const n[5] = {"PE_KV_PLAIN", "PE_KV_FP8_E4M3", "PE_KV_FP8_E5M2",
                                   "PE_KV_Q8_0", "PE_KV_FP8_E4M3_ROWSCALE"};
  return q < 5 ? n[q] : "?";
}

/* The smallest e with 2^e >= y (y > 0 and finite): DeepSeek's exact ceil of
 * log2, which the power-of-two (UE8M0) scales of its FP8 caches use. */
static inline int pe__ceil_log2(float y) {
  int ex;
  float f = frexpf(y, &ex); /* y = f * 2^ex, f in [0.5, 1) */
  return f == 0.5f ? ex - 1 : ex;
}

/* The largest |x_i| of n floats, NaN ignored (fmaxf's rule, from +0), as the
 * FP8 formats' per-row and per-tile scales take it: the maximum of the
 * magnitudes' bits, which order as the magnitudes do up to +Inf
 * (0x7f800000), NaN lanes (above it) left out; as int32 (a magnitude's bits
 * are below 2^31), a max reduction the compiler vectorizes with the
 * baseline's SSE2, where fmaxf is a libm call per value (AMD EPYC Zen 3,
 * DeepSeek-V3's fp8_ds kv rows alone, 512 tokens: 851-853 -> 357-358 us). */
static inline float pe__amax(const float *x, int64_t n) {
  int32_t m = 0;
  for (int64_t i = 0; i < n; i++) {
    int32_t a;
    memcpy(&a, &x[i], 4);
    a &= 0x7fffffff;
    a = a <= 0x7f800000 ? a : 0;
    m = a > m ? a : m;
  }
  float f;
  memcpy(&f, &m, 4);
  return f;
}

/* The exponent e of a power-of-two FP8 e4m3 scale 2^e from the amax of the
 * values it scales (pe__amax; the ISA's amax kernel): the smallest with
 * amax / 2^e <= 448, amax taken as at least 1e-4 - DeepSeek-V4's UE8M0
 * tiles and PE_KV_FP8_E4M3_ROWSCALE rows alike. */
static inline int pe__fp8_pow2_exp(float amax) {
  return pe__ceil_log2(fmaxf(amax, 1e-4f) / 448.0f);
}

/* PE_KV_FP8_E4M3_ROWSCALE: the scale of a row from its amax, and where
 * token t of a block's scale is (block: the block's first byte, bs tokens of
 * dim channels). */
static inline float pe__kv_rowscale_of(float amax) { return ldexpf(1.0f, pe__fp8_pow2_exp(amax)); }
static inline char *pe__kv_rowscale_at(char *block, int64_t bs, int64_t dim, int64_t t) {
  return block + bs * dim + 4 * t;
}

/* MLA cache rows (posenc.h's pe_mla_format), lat latent (non-rotated)
 * channels and rope rotated ones, the row order the library writes:
 *   PE_MLA_PLAIN      (lat + rope) elements of the tensor's dtype
 *   PE_MLA_FP8_E4M3   (lat + rope) e4m3 codes
 *   PE_MLA_FP8_DS     lat codes, lat / 128 float32 tile scales, rope bf16
 *   PE_MLA_FP8_DS_V4  token rows of lat codes + rope bf16; after a block's
 *                     rows, per token lat / 64 UE8M0 bytes and a zero byte */
#define PE_MLA_DS_TILE 128
/* The longest kv row of a quantized MLA format (a row is staged in float32
 * on the stack; DeepSeek's are 576 and 512). */
#define PE_MLA_MAX_DIM 1024
#define PE_MLA_V4_TILE 64

/* Bytes of one MLA cache row (PE_MLA_FP8_DS_V4: of the token's codes and
 * rope, without its scale bytes). */
static inline int64_t pe__mla_row_bytes(uint32_t format, int64_t lat, int64_t rope,
                                        pe_dtype dt) {
  switch (format) {
    case PE_MLA_FP8_E4M3: return lat + rope;
    case PE_MLA_FP8_DS: return lat + 4 * (lat / PE_MLA_DS_TILE) + 2 * rope;
    case PE_MLA_FP8_DS_V4: return lat + 2 * rope;
    default: return (lat + rope) * (int64_t)pe__dtype_size(dt);
  }
}
/* PE_MLA_FP8_DS_V4: the scale bytes of one token. */
static inline int64_t pe__mla_v4_scale_bytes(int64_t lat) { return lat / PE_MLA_V4_TILE + 1; }

#endif
