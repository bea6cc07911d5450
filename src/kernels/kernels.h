/* kernels.h - the kernel table: one struct of function pointers per ISA.
 * src/kernels/<isa>.c defines pe__kernels_<isa> with the same function set
 * (rope_sincos_<isa>, rope_rows_f32_<isa>, ...); dispatch.c selects one.
 * Every ISA must produce bit-identical results to scalar.c. */
#ifndef PE_KERNELS_H
#define PE_KERNELS_H

#include <stdint.h>

#include "../internal.h"

/* Rows of cos/sin for positions pos0, pos0+1, ..., pos0+n-1. Row r is
 * out[r*2*half .. +half) = cos, out[r*2*half+half .. +half) = sin of the angle
 * (double)(pos0 + r) * freq[i] (double product), times scale (float multiply,
 * skipped when scale == 1). Algorithm, identical on every ISA:
 *   theta = p * freq[i]                       (double)
 *   k = nearbyint(theta / 2pi); r = theta - k*2pi (hi/lo split, fma, double)
 *   rf = (float)r; dr = (float)(r - rf)
 *   (s, c) = SLEEF sincosf u10 (FMA variant) of rf
 *   c' = fmaf(-s, dr, c); s' = fmaf(c, dr, s) (first-order fix of rf's rounding)
 * pos0 may be negative (shift by a negative delta). */
typedef void (*pe_rope_sincos_fn)(int64_t pos0, int64_t n, const double *freq, int32_t half,
                                  float scale, float *out);

/* Rotate n_heads rows in place: row h starts at (element) data + h*head_stride.
 * cs = [cos half | sin half]. style: PE_ROPE_NEOX pairs (j, j+half), PE_ROPE_GPTJ
 * pairs (2j, 2j+1). inverse: use -sin. Per pair (x, y):
 *   x' = fmaf(x, c, -(y*s)); y' = fmaf(y, c, x*s)
 * Channels past 2*half are not touched. */
typedef void (*pe_rope_rows_fn)(void *data, int64_t head_stride, int64_t n_heads, const float *cs,
                                int32_t half, int32_t style, int32_t inverse);

typedef struct pe_kernels {
  const char *name;
  pe_rope_sincos_fn rope_sincos;
  pe_rope_rows_fn rope_rows[3]; /* indexed by pe_dtype */
} pe_kernels;

extern PE_HIDDEN const pe_kernels pe__kernels_scalar;
#if defined(PE_HAVE_AVX2)
extern PE_HIDDEN const pe_kernels pe__kernels_avx2;
#endif
#if defined(PE_HAVE_AVX512)
extern PE_HIDDEN const pe_kernels pe__kernels_avx512;
#endif
#if defined(PE_HAVE_NEON)
extern PE_HIDDEN const pe_kernels pe__kernels_neon;
#endif

/* The selected table (probed once; PE_ISA or pe_force_isa override). */
PE_HIDDEN const pe_kernels *pe__kernels(void);

#endif
