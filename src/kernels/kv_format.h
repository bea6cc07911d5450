/* kv_format.h - the byte layout of a KV-cache row in each pe_kv_quant format
 * (posenc.h): the one place the formats' sizes are defined. The kernels
 * (quant_common.h) encode rows of this layout; validation and the engine
 * size and address them with it. */
#ifndef PE_KV_FORMAT_H
#define PE_KV_FORMAT_H

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
    case PE_KV_FP8_E5M2: return dim;
    case PE_KV_Q8_0: return dim / PE_Q8_0_BLOCK * PE_Q8_0_BYTES;
    default: return dim * (int64_t)pe__dtype_size(dt);
  }
}

/* The format's name in messages. */
static inline const char *pe__kv_quant_name(uint32_t q) {
  static const char *const n[4] = {"PE_KV_PLAIN", "PE_KV_FP8_E4M3", "PE_KV_FP8_E5M2",
                                   "PE_KV_Q8_0"};
  return q < 4 ? n[q] : "?";
}

#endif
