/* scalar.c - the reference kernels: portable C, compiled for the baseline
 * CPU, written element by element (not a template instance: this file is
 * what the vector templates are checked against, so it stays readable).
 * Every other ISA reproduces it bit for bit, so the arithmetic here is
 * spelled out with explicit fma/fmaf in the order the vector code uses (the
 * whole library is built with -ffp-contract=off). The walks, the entry points
 * and the struct come from isa_template.h, as for every ISA. */
#include <math.h>
#include <sleef.h>
#if defined(__SSE2__)
#include <emmintrin.h> /* stream_line */
#endif

#include "base/cpu.h"
#include "kernel_common.h"

#define ISA scalar

/* ---- cos/sin rows ---- */

/* sleef.h declares the FMA variant only when compiling with FMA; the library
 * always has it. It uses FMA instructions, so on x86 CPUs without FMA (where
 * no SIMD path exists either) the scalar path takes the non-FMA variant; its
 * last bit may differ, which is documented. On AArch64 FMA is baseline. */
Sleef_float_2 Sleef_sincosf1_u10purecfma(float);

static Sleef_float_2 sleef_sincosf(float x) {
#if defined(__aarch64__)
  return Sleef_sincosf1_u10purecfma(x);
#else
  return (pe__cpu_features() & PE_CPU_AVX2) ? Sleef_sincosf1_u10purecfma(x)
                                            : Sleef_sincosf1_u10purec(x);
#endif
}

/* The reduced angle of p*f + p*flo (isa.h): p*f as the double-double
 * th + tl (the fma gives the product's rounding error exactly), k the
 * nearest multiple of 2pi to th, then th - k*hi (exact: see
 * sincos_consts.h), the low part, and - k*lo. */
static inline double reduce_one(double p, double f, const double *flo) {
  double th = p * f;
  double tl = fma(p, f, -th);
  if (flo) tl = fma(p, *flo, tl);
  double k = nearbyint(th * PE_INV_2PI);
  double r = fma(-k, PE_2PI_HI, th);
  r = r + tl;
  r = fma(-k, PE_2PI_LO, r);
  if (!(fabs(r) <= PE_REDUCED_MAX)) r = 0.0; /* see sincos_consts.h */
  return r;
}

static inline void sincos_one(double r, float scale, float *c_out, float *s_out) {
  float rf = (float)r;
  float dr = (float)(r - (double)rf);
  Sleef_float_2 sc = sleef_sincosf(rf);
  float c = fmaf(-sc.x, dr, sc.y);
  float s = fmaf(sc.y, dr, sc.x);
  if (scale != 1.0f) {
    c *= scale;
    s *= scale;
  }
  *c_out = c;
  *s_out = s;
}

static void rope_sincos_scalar(int64_t pos0, int64_t n, const double *freq, const double *freq_lo,
                               int32_t n_freq, float scale, float *out) {
  for (int64_t r = 0; r < n; r++) {
    double p = (double)(pos0 + r);
    float *row = out + r * 2 * n_freq;
    for (int32_t i = 0; i < n_freq; i++)
      sincos_one(reduce_one(p, freq[i], freq_lo ? freq_lo + i : NULL), scale, &row[i],
                 &row[n_freq + i]);
  }
}

/* ---- rotation ---- */

/* One rotation of a pair; the definition every ISA follows (isa.h). */
static inline void rotate_pair(float x, float y, float c, float s, float *xo, float *yo) {
  float ys = y * s;
  PE_OPAQUE(ys); /* clang would move the sign onto s */
  float nys = -ys;
  PE_OPAQUE(nys);
  *xo = fmaf(x, c, nys);
  *yo = fmaf(y, c, x * s);
}

/* The rotation's load: convert.h's exact widening, except that an f16
 * signaling NaN comes out quiet, as F16C and FCVTL do it. It matters for
 * which NaN an fma returns when x and y are both NaN: Arm prefers a
 * signaling operand. */
PE_AI float rot_load(int dt, const void *p, int64_t i) {
  if (dt == PE_F16) {
    uint16_t h = ((const uint16_t *)p)[i];
    float f = pe_f16_to_f32(h);
    return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) ? pe_bits_f32(pe_f32_bits(f) | 0x400000u) : f;
  }
  return pe__elem_load((pe_dtype)dt, p, i);
}

/* Pairs j < n: NEOX (j, dist + j), GPTJ (2j, 2j + 1); loaded from src,
 * rotated, rounded once into dst (which may be src: both of a pair are
 * loaded before either is stored). The plain rows (isa_template.h sends
 * normed rows to nstore_row). */
PE_AI void store_row(int sd, int dd, int style, const void *src, void *dst, const float *cosv,
                     const float *sinv, int32_t n, int32_t dist) {
  int64_t yo = style == PE_ROPE_GPTJ ? 1 : dist, step = style == PE_ROPE_GPTJ ? 2 : 1;
  for (int32_t j = 0; j < n; j++) {
    int64_t ix = j * step, iy = yo + j * step;
    float xn, yn;
    rotate_pair(rot_load(sd, src, ix), rot_load(sd, src, iy), cosv[j], sinv[j], &xn, &yn);
    pe__elem_store((pe_dtype)dd, dst, ix, xn);
    pe__elem_store((pe_dtype)dd, dst, iy, yn);
  }
}

/* ---- the QK-norm (isa.h's PE_NORM_*: float32, one rounding per operation) ---- */

/* The normed element e of a row: mode a constant (not OFF), r the row's
 * scale, w its weights (unused for UNIT). */
PE_AI float norm_one(int mode, float x, float r, const float *w, int64_t e) {
  float n = x * r;
  if (mode == PE_NORM_W) n = n * w[e];
  if (mode == PE_NORM_W1) n = fmaf(n, w[e], n); /* (x*r) * (1 + w), one rounding */
  return n;
}

/* store_row's pairs, normed (mode, r, w) first, then rotated as plain pairs. */
PE_AI void nstore_row(int sd, int dd, int style, int mode, const void *src, void *dst,
                      const float *cosv, const float *sinv, int32_t n, int32_t dist, float r,
                      const float *w) {
  int64_t yo = style == PE_ROPE_GPTJ ? 1 : dist, step = style == PE_ROPE_GPTJ ? 2 : 1;
  for (int32_t j = 0; j < n; j++) {
    int64_t ix = j * step, iy = yo + j * step;
    float xn, yn;
    rotate_pair(norm_one(mode, rot_load(sd, src, ix), r, w, ix),
                norm_one(mode, rot_load(sd, src, iy), r, w, iy), cosv[j], sinv[j], &xn, &yn);
    pe__elem_store((pe_dtype)dd, dst, ix, xn);
    pe__elem_store((pe_dtype)dd, dst, iy, yn);
  }
}

PE_AI void nrope_row(int dt, int style, int mode, void *row, const float *cosv, const float *sinv,
                     int32_t n, int32_t dist, float r, const float *w) {
  nstore_row(dt, dt, style, mode, row, row, cosv, sinv, n, dist, r, w);
}

PE_AI void rope_row(int dt, int style, void *row, const float *cosv, const float *sinv, int32_t n,
                    int32_t dist) {
  store_row(dt, dt, style, row, row, cosv, sinv, n, dist);
}

/* ---- the QK-norm's other kernels ---- */

PE_AI void sumsq_gen(int dt, const void *src, int64_t n, int64_t rows, int64_t row_stride,
                     int combine, float *out) {
  pe__sum_stack k;
  pe__sum_init(&k);
  for (int64_t r = 0; r < rows; r++) {
    const char *p = (const char *)src + r * row_stride * pe__esize(dt);
    float a[16] = {0};
    for (int64_t e = 0; e < n; e++) {
      float x = rot_load(dt, p, e);
      a[e % 16] = fmaf(x, x, a[e % 16]);
    }
    if (combine) pe__sum_push(&k, pe__tree16f(a));
    else out[r] = pe__tree16f(a);
  }
  if (combine) out[0] = rows > 0 ? pe__sum_total(&k) : 0.0f;
}

PE_AI void nscale_gen(const float *s, int64_t count, int64_t n, float eps, float *out) {
  for (int64_t i = 0; i < count; i++) out[i] = pe__norm_scale(s[i], n, eps);
}

PE_AI void nrow_gen(int sd, int dd, const void *src, void *dst, int64_t n, float r,
                    const float *w, int mode) {
  for (int64_t e = 0; e < n; e++)
    pe__elem_store((pe_dtype)dd, dst, e, norm_one(mode, rot_load(sd, src, e), r, w, e));
}

/* ---- conversions and the encodings: enc_common.h's element loops ---- */

PE_AI void convert_row(int sd, int dd, const void *src, void *dst, int64_t n) {
  pe__enc_convert((pe_dtype)sd, src, (pe_dtype)dd, dst, n);
}
PE_AI void add_row_gen(int dt, void *row, const float *v, int64_t n) {
  pe__enc_add((pe_dtype)dt, row, v, n);
}
PE_AI void alibi_row_gen(int dt, void *row, int64_t n, int64_t qpos, float ns) {
  pe__enc_alibi((pe_dtype)dt, row, 0, n, qpos, ns);
}
PE_AI void load_row_gen(int dt, float *out, const void *src, int64_t n) {
  pe__enc_convert((pe_dtype)dt, src, PE_F32, out, n);
}
PE_AI void mask_row_gen(int dt, void *row, int64_t n) {
  pe__enc_fill_neg_inf(row, (pe_dtype)dt, n);
}

/* ---- quantized cache rows: quant_common.h's element definitions ---- */

PE_AI void kvq_fp8_gen(int fmt, int sd, const void *src, void *dst, int64_t n, float scale) {
  uint8_t *out = dst;
  for (int64_t i = 0; i < n; i++) out[i] = pe_fp8_from_f32(fmt, pe__elem_load((pe_dtype)sd, src, i) / scale);
}
PE_AI void kvd_fp8_gen(int fmt, int dd, const void *src, void *dst, int64_t n, float scale) {
  const uint8_t *in = src;
  for (int64_t i = 0; i < n; i++) pe__elem_store((pe_dtype)dd, dst, i, pe_fp8_to_f32(fmt, in[i]) * scale);
}

/* ggml's quantize_row_q8_0_ref (isa.h), block by block. */
PE_AI void kvq_q8_gen(int sd, const void *src, void *dst, int64_t n) {
  uint8_t *out = dst;
  for (int64_t b = 0; b < n / PE_Q8_0_BLOCK; b++) {
    uint8_t *blk = out + b * PE_Q8_0_BYTES;
    float x[PE_Q8_0_BLOCK], amax = 0.0f;
    int finite = 1;
    for (int j = 0; j < PE_Q8_0_BLOCK; j++) {
      x[j] = pe__elem_load((pe_dtype)sd, src, b * PE_Q8_0_BLOCK + j);
      float a = fabsf(x[j]);
      if (!(a <= 0x1.fffffep127f)) finite = 0;
      amax = amax > a ? amax : a; /* ggml's MAX(amax, fabsf(v)) */
    }
    if (!finite) {
      blk[0] = PE_Q8_0_NONFINITE_D & 0xffu;
      blk[1] = PE_Q8_0_NONFINITE_D >> 8;
      memset(blk + 2, 0, PE_Q8_0_BLOCK);
      continue;
    }
    uint16_t d16;
    float id = pe_q8_0_inv(amax, &d16);
    blk[0] = (uint8_t)(d16 & 0xffu);
    blk[1] = (uint8_t)(d16 >> 8);
    for (int j = 0; j < PE_Q8_0_BLOCK; j++) blk[2 + j] = (uint8_t)pe_q8_0_q(x[j], id);
  }
}
PE_AI void kvd_q8_gen(int dd, const void *src, void *dst, int64_t n) {
  const uint8_t *in = src;
  for (int64_t b = 0; b < n / PE_Q8_0_BLOCK; b++) {
    const uint8_t *blk = in + b * PE_Q8_0_BYTES;
    float d = pe_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
    for (int j = 0; j < PE_Q8_0_BLOCK; j++)
      pe__elem_store((pe_dtype)dd, dst, b * PE_Q8_0_BLOCK + j, (float)(int8_t)blk[2 + j] * d);
  }
}

/* isa.h's amax: the definition itself. */
PE_AI float amax_gen(const float *x, int64_t n) { return pe__amax(x, n); }

/* isa.h's stream_copy, one line: SSE2's 16-byte streaming stores on x86-64
 * (its baseline), ordinary stores elsewhere. */
PE_AI void stream_line(char *d, const char *s) {
#if defined(__SSE2__)
  for (int i = 0; i < 64; i += 16)
    _mm_stream_si128((__m128i *)(void *)(d + i), _mm_loadu_si128((const __m128i *)(const void *)(s + i)));
#else
  memcpy(d, s, 64);
#endif
}

/* On x86 CPUs without FMA (where no SIMD path exists either) the FMA variant
 * cannot run: take the plain one there, whose last bit may differ. */
static void sincos_scalar(const double *angle, int32_t n, float *s, float *c) {
  int fma_ok = 1;
#if defined(__x86_64__) || defined(__i386__)
  fma_ok = (pe__cpu_features() & PE_CPU_AVX2) != 0;
#endif
  for (int32_t i = 0; i < n; i++) {
    if (fma_ok) {
      pe__sincos_f64_one(angle[i], &s[i], &c[i]);
    } else {
      Sleef_double_2 r = Sleef_sincosd1_u35purec(angle[i]);
      s[i] = (float)r.x;
      c[i] = (float)r.y;
    }
  }
}

#include "isa_template.h"
