/* rope_template.h - the RoPE kernels of the vector ISAs written once: the
 * cos/sin rows (rope_sincos), the rotation of a pair vector, and the in-place
 * rows for both styles and every dtype. Included once by isa_template.h in
 * avx2.c, avx512.c and neon.c after their vec_<isa>.h, which defines the
 * primitives used here (VL float lanes, VDL = VL/2 double lanes, vf/vd and
 * the vf_/vd_ operations, vld/vst2/vstw/vst per dtype with an n-lane tail,
 * and for GPT-J either vf_deinterleave / vf_interleave / vf_gptj_cs or, with
 * VEC_LD2, vldi/vsti). Bit-identical to
 * scalar.c by construction: the same operations in the same order, lane by
 * lane; lanes past a tail are computed on zeros and never stored. */

/* ---- cos/sin rows ---- */

/* Units of VL frequencies whose cos/sin are computed side by side, at most
 * (vec_<isa>.h may set it, up to 8; AVX-512: 8, 32 registers). */
#ifndef SINCOS_UNITS
#define SINCOS_UNITS 4
#endif

#include "sincosf_template.h"

/* The reduced angle of p*f (+ p*flo when lo, a constant), isa.h's
 * algorithm: scalar.c's reduce_one lane by lane. */
PE_AI vd reduce_2pi(vd p, vd f, vd flo, int lo) {
  vd th = vd_mul(p, f);
  vd tl = vd_fms(p, f, th);                    /* fma(p, f, -th): exact */
  if (lo) tl = vd_fma(p, flo, tl);
  vd k = vd_round(vd_mul(th, vd_set1(PE_INV_2PI)));
  vd r = vd_fnma(k, vd_set1(PE_2PI_HI), th);   /* fma(-k, hi, th): exact */
  r = vd_add(r, tl);
  r = vd_fnma(k, vd_set1(PE_2PI_LO), r);       /* fma(-k, lo, r) */
  return vd_keep_reduced(r);
}

/* One step of N (a constant) units: unit i is the m frequencies from
 * freq[i] (+ freq_lo[i]) at position p[i] (m <= VL; lanes past m are
 * computed on zero angles and not stored), its cos stored to co[i] and its
 * sin to so[i]: the double reduction, SLEEF's float sincos of the rounded
 * angle, then the first-order fix for the rounding dr. */
PE_AI void sincos_step(int N, const vd *p, const double *const *freq,
                       const double *const *freq_lo, int lo, int32_t m, float scale,
                       float *const *co, float *const *so) {
  vd z = vd_set1(0.0);
  vf rf[SINCOS_UNITS], dr[SINCOS_UNITS], sn[SINCOS_UNITS], cs[SINCOS_UNITS];
  PE_EACH_(i) {
    vd r0 = reduce_2pi(p[i], vd_loadn(freq[i], m), lo ? vd_loadn(freq_lo[i], m) : z, lo);
    vd r1 = reduce_2pi(p[i], vd_loadn(freq[i] + VDL, m - VDL),
                       lo ? vd_loadn(freq_lo[i] + VDL, m - VDL) : z, lo);
    rf[i] = vf_from_vd2(r0, r1);
    dr[i] = vf_from_vd2(vd_sub(r0, vd_widen_lo(rf[i])), vd_sub(r1, vd_widen_hi(rf[i])));
  }
  vf_sincosf_u10(N, rf, sn, cs); /* SLEEF's sincosf u10, inlined: |rf| <= 8 */
  PE_EACH_(i) {
    vf cf = vf_fnma(sn[i], dr[i], cs[i]); /* fmaf(-s, dr, c) */
    vf sf = vf_fma(cs[i], dr[i], sn[i]);  /* fmaf(c, dr, s) */
    if (scale != 1.0f) {
      cf = vf_mul(cf, vf_set1(scale));
      sf = vf_mul(sf, vf_set1(scale));
    }
    vf_storen(co[i], m, cf);
    vf_storen(so[i], m, sf);
  }
}

/* The rows as units of VL frequencies (then the tails of m < VL, one per
 * row), G (a constant) at a time, then 4, 2, 1 for the rest: independent chains side by side for the
 * out-of-order core (one unit is ~100 operations, most of them in one
 * dependent chain: one at a time, the table build was latency-bound). A
 * unit's values depend only on its own positions and frequencies. */
PE_AI void sincos_units(int lo, int64_t pos0, int64_t n, const double *freq,
                        const double *freq_lo, int32_t n_freq, float scale, float *out,
                        int32_t first, int32_t per_row, int32_t m, int G) {
  const int64_t units = n * per_row;
  int64_t r = 0;
  int32_t c = 0; /* unit (r, c) covers frequencies first + c*VL .. + m */
  vd p[SINCOS_UNITS];
  const double *f[SINCOS_UNITS], *fl[SINCOS_UNITS];
  float *co[SINCOS_UNITS], *so[SINCOS_UNITS];
#define UNIT_(i)                                                                                 \
  do {                                                                                           \
    int32_t k = first + c * VL;                                                                  \
    float *row = out + r * 2 * n_freq;                                                           \
    p[i] = vd_set1((double)(pos0 + r));                                                          \
    f[i] = freq + k;                                                                             \
    fl[i] = lo ? freq_lo + k : NULL;                                                             \
    co[i] = row + k;                                                                             \
    so[i] = row + n_freq + k;                                                                    \
    if (++c == per_row) c = 0, r++;                                                              \
  } while (0)
#define GROUP_(N)                                                                                \
  for (; u + (N) <= units; u += (N)) {                                                           \
    for (int i = 0; i < (N); i++) UNIT_(i);                                                      \
    sincos_step((N), p, f, fl, lo, m, scale, co, so);                                            \
  }
  int64_t u = 0;
  if (G > 4) GROUP_(G)
  if (G >= 4) GROUP_(4) /* a decode row of 64 frequencies is 4 units of 16 */
  GROUP_(2)
  GROUP_(1)
#undef GROUP_
#undef UNIT_
}

PE_AI void sincos_rows(int lo, int64_t pos0, int64_t n, const double *freq,
                       const double *freq_lo, int32_t n_freq, float scale, float *out) {
  int32_t full = n_freq / VL, tail = n_freq - full * VL;
  if (full)
    sincos_units(lo, pos0, n, freq, freq_lo, n_freq, scale, out, 0, full, VL, SINCOS_UNITS);
  if (tail) sincos_units(lo, pos0, n, freq, freq_lo, n_freq, scale, out, full * VL, 1, tail, 2);
}

static void FN(rope_sincos)(int64_t pos0, int64_t n, const double *freq, const double *freq_lo,
                            int32_t n_freq, float scale, float *out) {
  if (freq_lo)
    sincos_rows(1, pos0, n, freq, freq_lo, n_freq, scale, out);
  else
    sincos_rows(0, pos0, n, freq, freq_lo, n_freq, scale, out);
}

/* ---- rotation ---- */

/* x' = fmaf(x, c, -(y*s)); y' = fmaf(y, c, x*s), isa.h's definition. */
PE_AI void rotate(vf x, vf y, vf c, vf s, vf *xo, vf *yo) {
  /* Each operand in a register, loaded once: gcc otherwise folds y and c
   * into two instructions each as memory operands, six loads instead of
   * four, and on Zen 4 (512-bit loads issued as two halves) the loads are
   * what bound the loop (13 -> 7.5 ns per f32 row of 128 channels). */
  PE_OPAQUE(x);
  PE_OPAQUE(y);
  PE_OPAQUE(c);
  PE_OPAQUE(s);
  vf ys = vf_mul(y, s);
  PE_OPAQUE(ys); /* clang would move the sign onto s */
  vf nys = vf_neg(ys);
  PE_OPAQUE(nys); /* isa.h: the negation stays a negation */
  *xo = vf_fma(x, c, nys);
  *yo = vf_fma(y, c, vf_mul(x, s));
}

/* ---- the QK-norm (isa.h's pe_norm_apply) ---- */

/* mode a constant; w (mode W/W1) the weights of x's lanes, already loaded. */
PE_AI vf norm_v(int mode, vf x, vf r, vf w) {
  if (mode == PE_NORM_OFF) return x;
  vf n = vf_mul(x, r);
  if (mode == PE_NORM_W) n = vf_mul(n, w);
  if (mode == PE_NORM_W1) n = vf_mul(n, vf_add(vf_set1(1.0f), w));
  return n;
}
/* The same with the weights of m lanes loaded from w (none for OFF, UNIT). */
PE_AI vf norm_ld(int mode, vf x, vf r, const float *w, int32_t m) {
  int weighted = mode == PE_NORM_W || mode == PE_NORM_W1;
  return norm_v(mode, x, r, weighted ? vf_loadn(w, m) : x);
}

/* The sums of squares in 16 lanes (isa.h): VL-lane accumulators, 16/VL of
 * them, element e in accumulator (e % 16) / VL, lane e % VL; lanes past a
 * tail add fmaf(0, 0, acc) = acc (every acc is +0, positive, Inf or NaN);
 * vf_tree16 (vec_<isa>.h) adds the lanes in isa.h's order. */
PE_AI void sumsq_gen(int dt, const void *src, int64_t n, int64_t rows, int64_t row_stride,
                     int combine, float *out) {
  enum { NA = 16 / VL };
  const int64_t es = pe__esize(dt);
  vf a[NA];
  for (int i = 0; i < NA; i++) a[i] = vf_set1(0.0f);
  for (int64_t r = 0; r < rows; r++) {
    const char *p = (const char *)src + r * row_stride * es;
    if (r > 0 && !combine)
      for (int i = 0; i < NA; i++) a[i] = vf_set1(0.0f);
    int64_t e = 0;
    for (; e + 16 <= n; e += 16)
      for (int i = 0; i < NA; i++) {
        vf x = vld(dt, PE_AT(p, e + i * VL, es), VL);
        a[i] = vf_fma(x, x, a[i]);
      }
    if (e < n)
      for (int i = 0; i < NA; i++) {
        int64_t left = n - e - i * VL;
        vf x = vld(dt, PE_AT(p, e + i * VL, es), left > VL ? VL : (int32_t)left);
        a[i] = vf_fma(x, x, a[i]);
      }
    if (!combine) out[r] = vf_tree16(a);
  }
  if (combine) out[0] = vf_tree16(a);
}

/* NeoX, m <= VL pairs: x at sx, y at sy (dtype sd), written to dx, dy
 * (dtype dd; the same addresses in place); normed first (mode, r, the
 * weights of x at wx and of y at wy). */
PE_AI void neox_step(int sd, int dd, const char *sx, const char *sy, char *dx, char *dy,
                     const float *c, const float *s, int32_t m, int mode, vf r, const float *wx,
                     const float *wy) {
  vf xn, yn;
  rotate(norm_ld(mode, vld(sd, sx, m), r, wx, m), norm_ld(mode, vld(sd, sy, m), r, wy, m),
         vf_loadn(c, m), vf_loadn(s, m), &xn, &yn);
  vst2(dd, dx, m, xn, dy, m, yn);
}

/* GPT-J, m <= VL interleaved pairs at sp (2m elements), written to dp.
 * whole (a constant): a full step stores its 2*VL elements as the cache
 * write's whole lines (vstw) rather than two vectors (vst2). */
PE_AI void gptj_step(int sd, int dd, const char *sp, char *dp, const float *c, const float *s,
                     int32_t m, int whole, int mode, vf r, const float *w) {
  vf x, y, xn, yn;
#if defined(VEC_LD2)
  vldi(sd, sp, m, &x, &y);
  if (mode == PE_NORM_W || mode == PE_NORM_W1) {
    vf wx, wy;
    vldi(PE_F32, w, m, &wx, &wy);
    x = norm_v(mode, x, r, wx);
    y = norm_v(mode, y, r, wy);
  } else {
    x = norm_v(mode, x, r, x);
    y = norm_v(mode, y, r, y);
  }
  rotate(x, y, vf_loadn(c, m), vf_loadn(s, m), &xn, &yn);
  vsti(dd, dp, m, xn, yn);
  (void)whole;
#else
  const int64_t ses = pe__esize(sd), des = pe__esize(dd);
  /* the norm is elementwise: applied to the interleaved vectors */
  vf_deinterleave(norm_ld(mode, vld(sd, sp, 2 * m), r, w, 2 * m),
                  norm_ld(mode, vld(sd, sp + VL * ses, 2 * m - VL), r, wat(mode, w, VL), 2 * m - VL), &x,
                  &y);
  rotate(x, y, vf_gptj_cs(vf_loadn(c, m)), vf_gptj_cs(vf_loadn(s, m)), &xn, &yn);
  vf lo, hi;
  vf_interleave(xn, yn, &lo, &hi);
  if (whole)
    vstw(dd, dp, lo, hi);
  else
    vst2(dd, dp, 2 * m, lo, dp + VL * des, 2 * m - VL, hi);
#endif
}

/* One row in place: full steps of VL pairs, then one tail step; normed
 * first (mode, scale rs, weights w of the row's elements). */
PE_AI void rope_row(int dt, int style, void *row, const float *c, const float *s, int32_t n,
                    int32_t dist, int mode, float rs, const float *w) {
  char *r = row;
  const int64_t es = pe__esize(dt);
  const vf rv = vf_set1(rs);
  int32_t j = 0;
  if (style == PE_ROPE_GPTJ) {
    for (; j + VL <= n; j += VL)
      gptj_step(dt, dt, r + 2 * j * es, r + 2 * j * es, c + j, s + j, VL, 0, mode, rv, wat(mode, w, 2 * j));
    if (j < n)
      gptj_step(dt, dt, r + 2 * j * es, r + 2 * j * es, c + j, s + j, n - j, 0, mode, rv,
                wat(mode, w, 2 * j));
  } else {
    char *y = r + dist * es;
    const float *wy = wat(mode, w, dist);
    for (; j + VL <= n; j += VL)
      neox_step(dt, dt, PE_AT(r, j, es), PE_AT(y, j, es), PE_AT(r, j, es), PE_AT(y, j, es), c + j,
                s + j, VL, mode, rv, wat(mode, w, j), wat(mode, wy, j));
    if (j < n)
      neox_step(dt, dt, PE_AT(r, j, es), PE_AT(y, j, es), PE_AT(r, j, es), PE_AT(y, j, es), c + j,
                s + j, n - j, mode, rv, wat(mode, w, j), wat(mode, wy, j));
  }
}
