/* avx512.c - the AVX-512 (F/BW/DQ/VL) kernels: the templates instantiated
 * over vec_avx512.h. Compiled with -mavx512f -mavx512bw -mavx512dq
 * -mavx512vl (CMakeLists.txt); reached only when cpu.c reports
 * PE_CPU_AVX512. Every kernel that writes bf16 (in-place rows, cache-store
 * rows, convert, norm_row, kv_dequant, add_row, alibi_row) rounds with AVX512-BF16's conversion when the CPU
 * has it (probed apart from the base AVX-512 set; on Zen 4 it halves the
 * cost of the rounding: 69 -> 37 cycles per 128-channel in-place row), with
 * the integer rounding otherwise; both give the same bits. */
#include "../cpu.h"
#include "vec_avx512.h"

/* The struct's bf16-writing entries: name##_sel picks the variant per call
 * (one load of the probed features). */
#define ISA_BF16_OUT(f) PE_CAT(f, _sel)
static void rope_rows_bf16_sel(const pe_rope_block *b, void *data, int64_t hs, int64_t ts);
#define STORE_DECL_(S)                                                                           \
  static void store_##S##_bf16_sel(const pe_rope_block *b, const void *const *src, int64_t shs, \
                                   void *const *dst, int64_t dhs);                               \
  static void convert_##S##_bf16_sel(const void *src, void *dst, int64_t n);                     \
  static void norm_row_##S##_bf16_sel(const void *src, void *dst, int64_t n, double r,           \
                                      const float *w, int32_t mode);
STORE_DECL_(f32)
STORE_DECL_(f16)
STORE_DECL_(bf16)
#undef STORE_DECL_
static void add_row_bf16_sel(void *row, const float *v, int64_t n);
static void alibi_row_bf16_sel(void *row, int64_t n, int64_t qpos, float ns);
#define KVD_DECL_(F) static void kvd_##F##_bf16_sel(const void *s, void *d, int64_t n, float sc);
KVD_DECL_(e4m3)
KVD_DECL_(e5m2)
KVD_DECL_(q8_0)
#undef KVD_DECL_

#include "isa_template.h"

PE_AI int has_bf16(void) { return (pe__cpu_features() & PE_CPU_AVX512BF16) != 0; }

BF16_TARGET static void rope_rows_bf16_cvt(const pe_rope_block *b, void *data, int64_t hs,
                                           int64_t ts) {
  rows_gen(PE_BF16_CVT, b, data, hs, ts);
}
static void rope_rows_bf16_sel(const pe_rope_block *b, void *data, int64_t hs, int64_t ts) {
  if (has_bf16())
    rope_rows_bf16_cvt(b, data, hs, ts);
  else
    rope_rows_bf16_avx512(b, data, hs, ts);
}

#define STORE_DEF_(S, sd)                                                                        \
  BF16_TARGET static void store_##S##_bf16_cvt(const pe_rope_block *b, const void *const *src,  \
                                               int64_t shs, void *const *dst, int64_t dhs) {     \
    store_gen(sd, PE_BF16_CVT, b, src, shs, dst, dhs);                                           \
  }                                                                                              \
  static void store_##S##_bf16_sel(const pe_rope_block *b, const void *const *src, int64_t shs, \
                                   void *const *dst, int64_t dhs) {                              \
    if (has_bf16())                                                                              \
      store_##S##_bf16_cvt(b, src, shs, dst, dhs);                                               \
    else                                                                                         \
      store_##S##_bf16_avx512(b, src, shs, dst, dhs);                                            \
  }                                                                                              \
  BF16_TARGET static void convert_##S##_bf16_cvt(const void *src, void *dst, int64_t n) {        \
    convert_row(sd, PE_BF16_CVT, src, dst, n);                                                   \
  }                                                                                              \
  static void convert_##S##_bf16_sel(const void *src, void *dst, int64_t n) {                    \
    if (sd != PE_BF16 && has_bf16()) /* bf16 -> bf16 copies the bits */                          \
      convert_##S##_bf16_cvt(src, dst, n);                                                       \
    else                                                                                         \
      convert_##S##_bf16_avx512(src, dst, n);                                                    \
  }                                                                                              \
  BF16_TARGET static void norm_row_##S##_bf16_cvt(const void *src, void *dst, int64_t n,         \
                                                  double r, const float *w, int32_t mode) {      \
    if (mode == PE_NORM_W)                                                                       \
      nrow_gen(sd, PE_BF16_CVT, src, dst, n, r, w, PE_NORM_W);                                   \
    else if (mode == PE_NORM_W1)                                                                 \
      nrow_gen(sd, PE_BF16_CVT, src, dst, n, r, w, PE_NORM_W1);                                  \
    else                                                                                         \
      nrow_gen(sd, PE_BF16_CVT, src, dst, n, r, w, PE_NORM_UNIT);                                \
  }                                                                                              \
  static void norm_row_##S##_bf16_sel(const void *src, void *dst, int64_t n, double r,           \
                                      const float *w, int32_t mode) {                            \
    if (has_bf16())                                                                              \
      norm_row_##S##_bf16_cvt(src, dst, n, r, w, mode);                                          \
    else                                                                                         \
      norm_row_##S##_bf16_avx512(src, dst, n, r, w, mode);                                       \
  }
STORE_DEF_(f32, PE_F32)
STORE_DEF_(f16, PE_F16)
STORE_DEF_(bf16, PE_BF16)
#undef STORE_DEF_

#define KVD_DEF_(F, call)                                                                        \
  BF16_TARGET static void kvd_##F##_bf16_cvt(const void *s, void *d, int64_t n, float sc) {      \
    (void)sc;                                                                                    \
    call;                                                                                        \
  }                                                                                              \
  static void kvd_##F##_bf16_sel(const void *s, void *d, int64_t n, float sc) {                  \
    if (has_bf16())                                                                              \
      kvd_##F##_bf16_cvt(s, d, n, sc);                                                           \
    else                                                                                         \
      kvd_##F##_bf16_avx512(s, d, n, sc);                                                        \
  }
KVD_DEF_(e4m3, kvd_fp8_gen(PE_KVQ_E4M3, PE_BF16_CVT, s, d, n, sc))
KVD_DEF_(e5m2, kvd_fp8_gen(PE_KVQ_E5M2, PE_BF16_CVT, s, d, n, sc))
KVD_DEF_(q8_0, kvd_q8_gen(PE_BF16_CVT, s, d, n))
#undef KVD_DEF_

/* The score biases and embeddings (ALiBi, T5, sinusoidal, learned) in bf16. */
BF16_TARGET static void add_row_bf16_cvt(void *row, const float *v, int64_t n) {
  add_row_gen(PE_BF16_CVT, row, v, n);
}
static void add_row_bf16_sel(void *row, const float *v, int64_t n) {
  if (has_bf16())
    add_row_bf16_cvt(row, v, n);
  else
    add_row_bf16_avx512(row, v, n);
}
BF16_TARGET static void alibi_row_bf16_cvt(void *row, int64_t n, int64_t qpos, float ns) {
  alibi_row_gen(PE_BF16_CVT, row, n, qpos, ns);
}
static void alibi_row_bf16_sel(void *row, int64_t n, int64_t qpos, float ns) {
  if (has_bf16())
    alibi_row_bf16_cvt(row, n, qpos, ns);
  else
    alibi_row_bf16_avx512(row, n, qpos, ns);
}
