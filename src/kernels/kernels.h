/* kernels.h - the kernel table: one struct of function pointers per ISA.
 * src/kernels/<isa>.c defines pe__kernels_<isa> with the same function set
 * (rope_sincos_<isa>, rope_rows_f32_<isa>, ...); dispatch.c selects one.
 * Every ISA must produce bit-identical results to scalar.c. */
#ifndef PE_KERNELS_H
#define PE_KERNELS_H

#include <stdint.h>

#include "../internal.h"

/* PE_OPAQUE(v): an empty asm that claims to change v. Every ISA computes
 * x' = fmaf(x, c, -(y*s)) with the negation applied to the product as
 * written; clang (LLVM treats a NaN's sign as unspecified) would otherwise
 * fold the negation into the FMA (vfmsub/fmls), which propagates y*s's NaN
 * without the sign flip, so the paths would disagree on the sign bit of a
 * NaN. gcc does not fold it; the barrier costs nothing there. */
#if defined(__x86_64__) || defined(__i386__)
#define PE_OPAQUE(v) __asm__("" : "+v"(v))
#elif defined(__aarch64__)
#define PE_OPAQUE(v) __asm__("" : "+w"(v))
#else
#define PE_OPAQUE(v) ((void)0)
#endif

/* Rows of cos/sin for positions pos0, pos0+1, ..., pos0+n-1. Row r is
 * out[r*2*half .. +half) = cos, out[r*2*half+half .. +half) = sin of the angle
 * (double)(pos0 + r) * freq[i] (double product), times scale (float multiply,
 * skipped when scale == 1). Algorithm, identical on every ISA:
 *   theta = p * freq[i]                       (double)
 *   k = nearbyint(theta / 2pi); r = theta - k*2pi (hi/lo split, fma, double)
 *   if !(|r| <= PE_REDUCED_MAX) r = 0 (see sincos_consts.h)
 *   rf = (float)r; dr = (float)(r - rf)
 *   (s, c) = SLEEF sincosf u10 (FMA variant) of rf
 *   c' = fmaf(-s, dr, c); s' = fmaf(c, dr, s) (first-order fix of rf's rounding)
 * pos0 may be negative (shift by a negative delta). */
typedef void (*pe_rope_sincos_fn)(int64_t pos0, int64_t n, const double *freq, int32_t half,
                                  float scale, float *out);

/* Rotate a block of n_tokens x n_heads rows in place: the row of token t,
 * head h starts at (element) data + t*token_stride + h*head_stride, and its
 * cos/sin are cs[t] = [cos half | sin half]. Taking a block of tokens (not
 * one row) lets the kernel walk the rows in memory order whatever the layout
 * ([B,T,H,D] or [B,H,T,D]) while the block's cos/sin stay in L1.
 * style: PE_ROPE_NEOX pairs (j, j+half), PE_ROPE_GPTJ pairs (2j, 2j+1).
 * inverse: s = -1.0f * sin, a multiply by a -1 the compiler cannot see
 * (an empty asm in the SIMD files): a visible constant lets it fold
 * -(y*(-s)) into y*s, which differs in the sign of a NaN y. The forward
 * rotation skips the multiply.
 * Per pair (x, y):
 *   x' = fmaf(x, c, -(y*s)); y' = fmaf(y, c, x*s)
 * Half types are widened exactly and rounded once on store (convert.h).
 * Channels past 2*half are neither read nor written. */
typedef void (*pe_rope_rows_fn)(void *data, int64_t head_stride, int64_t n_heads,
                                int64_t token_stride, int64_t n_tokens, const float *const *cs,
                                int32_t half, int32_t style, int32_t inverse);

/* One row's rotation, as each ISA file writes it per dtype and style. */
typedef void (*pe_rope_row_fn)(void *row, const float *cs, int32_t half, int32_t inverse);

/* The walk over a block shared by every ISA: the nearer of the two strides
 * goes innermost so the rows stream in address order. Always inlined with a
 * constant `row`, so each kernel gets its own loop with the row body inlined. */
static inline __attribute__((always_inline)) void pe_rope_rows_walk(
    void *data, int64_t esize, int64_t head_stride, int64_t n_heads, int64_t token_stride,
    int64_t n_tokens, const float *const *cs, int32_t half, int32_t inverse, pe_rope_row_fn row) {
  char *base = data;
  int64_t hs = head_stride * esize, ts = token_stride * esize;
  int64_t ahs = hs < 0 ? -hs : hs, ats = ts < 0 ? -ts : ts;
  if (n_tokens == 1 || ahs <= ats) {
    for (int64_t t = 0; t < n_tokens; t++)
      for (int64_t h = 0; h < n_heads; h++) row(base + t * ts + h * hs, cs[t], half, inverse);
  } else {
    for (int64_t h = 0; h < n_heads; h++)
      for (int64_t t = 0; t < n_tokens; t++) row(base + t * ts + h * hs, cs[t], half, inverse);
  }
}

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
