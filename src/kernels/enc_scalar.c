/* enc_scalar.c - reference kernels of the non-RoPE encodings: the per-element
 * definitions of enc_kernels.h applied over whole rows. The vector files must
 * reproduce these bit for bit. */
#include <string.h>

#include "../cpu.h"
#include "enc_kernels.h"

static void add_row_f32(void *row, const float *v, int64_t n) { pe__enc_add_f32(row, v, n); }
static void add_row_f16(void *row, const float *v, int64_t n) { pe__enc_add_f16(row, v, n); }
static void add_row_bf16(void *row, const float *v, int64_t n) { pe__enc_add_bf16(row, v, n); }

static void alibi_row_f32(void *row, int64_t n, int64_t qpos, float ns) {
  pe__enc_alibi_f32(row, 0, n, qpos, ns);
}
static void alibi_row_f16(void *row, int64_t n, int64_t qpos, float ns) {
  pe__enc_alibi_f16(row, 0, n, qpos, ns);
}
static void alibi_row_bf16(void *row, int64_t n, int64_t qpos, float ns) {
  pe__enc_alibi_bf16(row, 0, n, qpos, ns);
}

static void load_row_f32(float *out, const void *src, int64_t n) {
  memcpy(out, src, (size_t)n * sizeof(float));
}
static void load_row_f16(float *out, const void *src, int64_t n) { pe__enc_load_f16(out, src, n); }
static void load_row_bf16(float *out, const void *src, int64_t n) {
  pe__enc_load_bf16(out, src, n);
}

/* On x86 CPUs without FMA (where no SIMD path exists either) the FMA variant
 * cannot run: take the plain one there, whose last bit may differ. */
static void sincos_scalar(const double *angle, int32_t n, float *s, float *c) {
  int fma = 1;
#if defined(__x86_64__) || defined(__i386__)
  fma = (pe__cpu_features() & PE_CPU_AVX2) != 0;
#endif
  for (int32_t i = 0; i < n; i++) {
    if (fma) {
      pe__sincos_f64_one(angle[i], &s[i], &c[i]);
    } else {
      Sleef_double_2 r = Sleef_sincosd1_u35purec(angle[i]);
      s[i] = (float)r.x;
      c[i] = (float)r.y;
    }
  }
}

const pe_enc_kernels pe__enc_kernels_scalar = {
    .sincos = sincos_scalar,
    .name = "scalar",
    .add_row = {add_row_f32, add_row_f16, add_row_bf16},
    .alibi_row = {alibi_row_f32, alibi_row_f16, alibi_row_bf16},
    .load_row = {load_row_f32, load_row_f16, load_row_bf16},
};
