/* TEMPORARY (lead's engine bring-up; replaced by the kernels branch). */
#include <math.h>
#include <string.h>

#include "convert.h"
#include "enc_kernels.h"
#include "isa.h"
#include "../internal.h"
#include "sincos_consts.h"
pe_rope_sincos_fn pe__tmp_sincos(void);

static inline float ld(const void *p, int dt, int64_t i) {
  if (dt == PE_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  if (dt == PE_BF16) return pe_bf16_to_f32(h);
  float f = pe_f16_to_f32(h);
  return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) ? pe_bits_f32(pe_f32_bits(f) | 0x400000u) : f;
}
static inline float ld_plain(const void *p, int dt, int64_t i) {
  if (dt == PE_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == PE_BF16 ? pe_bf16_to_f32(h) : pe_f16_to_f32(h);
}
static inline void st(void *p, int dt, int64_t i, float v) {
  if (dt == PE_F32) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = dt == PE_F16 ? pe_f32_to_f16(v) : pe_f32_to_bf16(v);
}
static inline int64_t esz(int dt) { return dt == PE_F32 ? 4 : 2; }

static void rot_row(const pe_rope_block *b, const void *src, int sd, void *dst, int dd,
                    const float *c, const float *s) {
  for (int32_t j = 0; j < b->n_pairs; j++) {
    int64_t ix = b->style == PE_ROPE_GPTJ ? 2 * (int64_t)j : j;
    int64_t iy = b->style == PE_ROPE_GPTJ ? 2 * (int64_t)j + 1 : b->pair_dist + j;
    float x = ld(src, sd, ix), y = ld(src, sd, iy);
    float ys = y * s[j];
    PE_OPAQUE(ys);
    float nys = -ys;
    PE_OPAQUE(nys);
    float xn = fmaf(x, c[j], nys), yn = fmaf(y, c[j], x * s[j]);
    st(dst, dd, ix, xn);
    st(dst, dd, iy, yn);
  }
}

#define ROWS(DT)                                                                          \
  static void rows_##DT(const pe_rope_block *b, void *data, int64_t hs, int64_t ts) {     \
    for (int64_t t = 0; t < b->n_tokens; t++)                                             \
      for (int64_t h = 0; h < b->n_heads; h++) {                                          \
        char *r = (char *)data + (t * ts + h * hs) * esz(DT);                             \
        rot_row(b, r, DT, r, DT, b->cos[t], b->sin[t]);                                   \
      }                                                                                   \
  }
ROWS(0)
ROWS(1)
ROWS(2)

#define SROWS(S, D)                                                                       \
  static void srows_##S##_##D(const pe_rope_block *b, const void *const *src, int64_t shs, \
                              void *const *dst, int64_t dhs) {                            \
    for (int64_t t = 0; t < b->n_tokens; t++)                                             \
      for (int64_t h = 0; h < b->n_heads; h++)                                            \
        rot_row(b, (const char *)src[t] + h * shs * esz(S), S,                            \
                (char *)dst[t] + h * dhs * esz(D), D, b->cos[t], b->sin[t]);              \
  }                                                                                       \
  static void conv_##S##_##D(const void *src, void *dst, int64_t n) {                    \
    if (S == D) { memcpy(dst, src, (size_t)(n * esz(S))); return; }                       \
    for (int64_t i = 0; i < n; i++) st(dst, D, i, ld_plain(src, S, i));                  \
  }
SROWS(0, 0) SROWS(0, 1) SROWS(0, 2) SROWS(1, 0) SROWS(1, 1) SROWS(1, 2) SROWS(2, 0) SROWS(2, 1) SROWS(2, 2)

static pe_isa tmp_isa;
const pe_isa *pe__isa(void) {
  if (!tmp_isa.name) {
    const pe_enc_kernels *e = pe__enc_kernels();
    pe_isa t = {.name = "scalar",
                .rope_sincos = pe__tmp_sincos(),
                .rope_rows = {rows_0, rows_1, rows_2},
                .rope_store_rows = {{srows_0_0, srows_0_1, srows_0_2},
                                    {srows_1_0, srows_1_1, srows_1_2},
                                    {srows_2_0, srows_2_1, srows_2_2}},
                .convert = {{conv_0_0, conv_0_1, conv_0_2},
                            {conv_1_0, conv_1_1, conv_1_2},
                            {conv_2_0, conv_2_1, conv_2_2}},
                .sincos = e->sincos};
    memcpy(t.add_row, e->add_row, sizeof t.add_row);
    memcpy(t.alibi_row, e->alibi_row, sizeof t.alibi_row);
    memcpy(t.load_row, e->load_row, sizeof t.load_row);
    tmp_isa = t;
  }
  return &tmp_isa;
}
