/* rope_template.h - the RoPE kernels of the vector ISAs written once: the
 * cos/sin rows (rope_sincos), the rotation of a pair vector, and the in-place
 * rows for both styles and every dtype. Included once by isa_template.h in
 * avx2.c, avx512.c and neon.c after their vec_<isa>.h, which defines the
 * primitives used here (VL float lanes, VDL = VL/2 double lanes, vf/vd and
 * the vf_/vd_ operations, vld/vst2/vstw/vst per dtype with an n-lane tail,
 * and for GPT-J either vf_deinterleave / vf_interleave / vf_gptj_cs or, with
 * VEC_LD2, vldi/vsti; optionally VEC_BF16_EO, bf16 rows in even/odd order:
 * bf16_ld_eo/bf16_st_eo_g for the dtype EO_DT names (AVX-512: PE_BF16_CVT
 * with AVX512-BF16, PE_BF16 without; AVX2: PE_BF16), VEC_GPTJ_ORDERED
 * when vf_deinterleave leaves the pairs in order (AVX-512), and
 * VEC_ROT_FAST (every even/odd row: AVX2) or VEC_NORM_ROT_FAST (only the
 * QK-normed ones, neo_rows: AVX-512 without AVX512-BF16), the rotation
 * without the sign flip, with vf_fms, vf_any_nan2/4 and bf16_st_eo_fast);
 * VEC_GPTJ_PAIRS (x86) for the normed GPT-J rows in pair order (gheld_rows)
 * with vf_swap_pairs, vf_neg_even and vf_dup_half).
 * Bit-identical to scalar.c by construction: the same operations in the
 * same order, lane by lane; lanes past a tail are computed on zeros and
 * never stored. */

/* ---- cos/sin rows ---- */

/* The reduced angle of p*f (+ p*flo when lo, a constant), isa.h's
 * algorithm: scalar.c's reduce_one lane by lane. safe (a constant): every
 * |r| is known to be <= PE_REDUCED_MAX and not NaN (FN(sincos_safe)), so
 * vd_keep_reduced would change nothing and is left out. */
PE_AI vd reduce_2pi(int safe, vd p, vd f, vd flo, int lo) {
  vd th = vd_mul(p, f);
  vd tl = vd_fms(p, f, th);                    /* fma(p, f, -th): exact */
  if (lo) tl = vd_fma(p, flo, tl);
  vd k = vd_round(vd_mul(th, vd_set1(PE_INV_2PI)));
  vd r = vd_fnma(k, vd_set1(PE_2PI_HI), th);   /* fma(-k, hi, th): exact */
  r = vd_add(r, tl);
  r = vd_fnma(k, vd_set1(PE_2PI_LO), r);       /* fma(-k, lo, r) */
  return safe ? r : vd_keep_reduced(r);
}

/* cos/sin of p*(freq[i] + freq_lo[i]) for the rows of pos0.. (isa.h): the
 * double reduction, SLEEF's float sincos of the rounded angle, then the
 * first-order fix for the rounding dr, in two passes over up to CH
 * frequencies of a row through L1 buffers: every reduced angle (and its dr),
 * then each SLEEF call with its fix and stores. SLEEF's call is out of line
 * and clobbers every vector register, so the one-step-at-a-time loop spilled
 * and reloaded its live vectors (p, the constants, dr) around each call; here
 * nothing is live across a call but pointers. The stores stay next to the
 * calls: a third pass of stores alone stalled on the write misses of a
 * table larger than the caches (AMD EPYC Zen 4, 64 frequencies, AVX-512:
 * 1.28 -> 1.17 ns/pair on L2-sized rows, 1.34 -> 1.22 in pe-bench's 64 MiB
 * table; AVX2 2.19 -> 1.93). Rows of at most CH/2 frequencies fill the
 * buffers several at a time, and the reduced angles are stored half by half
 * (vd_store_f32, vd_round_f32): joining the halves and taking the high one
 * back cost two shuffles per vector (1.20 -> 1.12 ns/pair in the 64 MiB
 * table). Non-temporal stores for that table measured slower (1.20 ->
 * 1.22-1.29). Lanes past a row's end are computed on zero angles and never
 * stored. */
PE_AI void sincos_rows(int safe, int lo, int64_t pos0, int64_t n, const double *freq,
                       const double *freq_lo, int32_t n_freq, float scale, float *out) {
  enum { CH = 256 }; /* a multiple of every VL */
  _Alignas(64) float rfa[CH], dra[CH];
  const vd z = vd_set1(0.0);
  /* Rows of at most CH/2 frequencies share a pass, nb rows at a stride of
   * whole vectors in the buffers. */
  const int32_t st = (n_freq + VL - 1) / VL * VL;
  const int64_t nb = st <= CH / 2 ? CH / st : 1;
  for (int64_t r0 = 0; r0 < n; r0 += nb) {
    const int64_t nr = n - r0 < nb ? n - r0 : nb;
    for (int32_t i0 = 0; i0 < n_freq; i0 += CH) {
      const int32_t m = n_freq - i0 < CH ? n_freq - i0 : CH;
      const double *f = freq + i0, *fl = lo ? freq_lo + i0 : NULL;
      for (int64_t j = 0; j < nr; j++) {
        const vd p = vd_set1((double)(pos0 + r0 + j));
        float *ra = rfa + j * st, *da = dra + j * st;
        for (int32_t i = 0; i < m; i += VL) {
          const int32_t k = m - i;
          vd a0 = reduce_2pi(safe, p, vd_loadn(f + i, k), lo ? vd_loadn(fl + i, k) : z, lo);
          vd a1 = reduce_2pi(safe, p, vd_loadn(f + i + VDL, k - VDL),
                             lo ? vd_loadn(fl + i + VDL, k - VDL) : z, lo);
          vd_store_f32(ra + i, a0);
          vd_store_f32(ra + i + VDL, a1);
          vd_store_f32(da + i, vd_sub(a0, vd_round_f32(a0)));
          vd_store_f32(da + i + VDL, vd_sub(a1, vd_round_f32(a1)));
        }
      }
      for (int64_t j = 0; j < nr; j++) {
        float *row = out + (r0 + j) * 2 * n_freq + i0;
        const float *ra = rfa + j * st, *da = dra + j * st;
        for (int32_t i = 0; i < m; i += VL) {
          const int32_t k = m - i < VL ? m - i : VL;
          vf a = vf_loadn(ra + i, VL);
          __typeof__(VEC_SINCOSF(a)) sc = VEC_SINCOSF(a); /* .x = sin, .y = cos */
          vf dr = vf_loadn(da + i, VL);
          vf cf = vf_fnma(sc.x, dr, sc.y); /* fmaf(-s, dr, c) */
          vf sf = vf_fma(sc.y, dr, sc.x);  /* fmaf(c, dr, s) */
          if (scale != 1.0f) {
            cf = vf_mul(cf, vf_set1(scale));
            sf = vf_mul(sf, vf_set1(scale));
          }
          vf_storen(row + i, k, cf);
          vf_storen(row + n_freq + i, k, sf);
        }
      }
    }
  }
}

/* Whether no |r| can exceed PE_REDUCED_MAX and none be NaN for these
 * positions and frequencies: every |p*f| <= 2^40 and |p*flo| <= 1 (finite,
 * so no NaN) give |r| <= pi + 2. Then the range check is skipped: it kept
 * two more constants live across SLEEF's call, each spilled and stored again
 * before every call by gcc (AMD EPYC Zen 4, table build: 1.43 -> 1.28
 * ns/pair). Its one pass over the frequencies is left to calls of >= 8 rows. */
static int FN(sincos_safe)(int64_t pos0, int64_t n, const double *freq, const double *freq_lo,
                           int32_t n_freq) {
  double a = fabs((double)pos0), b = fabs((double)(pos0 + n - 1));
  double pm = (a > b ? a : b) + 1.0, lim = 0x1p40 / pm, lim_lo = 1.0 / pm;
  for (int32_t i = 0; i < n_freq; i++)
    if (!(fabs(freq[i]) <= lim) || (freq_lo && !(fabs(freq_lo[i]) <= lim_lo))) return 0;
  return 1;
}

static void FN(rope_sincos)(int64_t pos0, int64_t n, const double *freq, const double *freq_lo,
                            int32_t n_freq, float scale, float *out) {
  int safe = n >= 8 && FN(sincos_safe)(pos0, n, freq, freq_lo, n_freq);
  if (freq_lo) {
    if (safe)
      sincos_rows(1, 1, pos0, n, freq, freq_lo, n_freq, scale, out);
    else
      sincos_rows(0, 1, pos0, n, freq, freq_lo, n_freq, scale, out);
  } else {
    if (safe)
      sincos_rows(1, 0, pos0, n, freq, freq_lo, n_freq, scale, out);
    else
      sincos_rows(0, 0, pos0, n, freq, freq_lo, n_freq, scale, out);
  }
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
#if defined(VEC_ROT_FAST) || defined(VEC_NORM_ROT_FAST)
/* The rotation without isa.h's sign flip (VEC_ROT_FAST, the even/odd bf16
 * rows; VEC_NORM_ROT_FAST, only the QK-normed ones: neo_rows): x' = x*c -
 * y*s as one vfmsub, which is fmaf(x, c, -(y*s)) for every result but a
 * NaN (the negation of the rounded product is exact), whose sign may
 * differ (the vfmsub keeps y*s's NaN as it is). The caller tests the
 * results for a NaN (vf_any_nan2 / vf_any_nan4) before it stores anything
 * and then does the step again with rotate(), from memory. One operation
 * fewer per step, and no sign constant held in a register. */
PE_AI void rotate_fast(vf x, vf y, vf c, vf s, vf *xo, vf *yo) {
  *xo = vf_fms(x, c, vf_mul(y, s));
  *yo = vf_fma(y, c, vf_mul(x, s));
}
#endif

/* ---- the QK-norm's sum of squares ---- */

/* The sums of squares in 16 float lanes (isa.h): 16/VL accumulators per row,
 * element e in accumulator (e % 16) / VL, lane e % VL; lanes past a tail add
 * 0*0 + acc = acc (every acc is +0, positive, Inf or NaN); the accumulators
 * are added by isa.h's tree (sumsq_tree). Each lane is one chain of
 * dependent FMAs (isa.h fixes the order), so one row alone waits on the FMA
 * latency: SQ_ROWS rows are summed at once, each in its own accumulators
 * (the same operations per row, only interleaved), and a per-token norm
 * (combine 1) adds the rows' sums as isa.h's binary counter. */
enum { SQ_ROWS = 4, SQ_NA = 16 / VL };
/* isa.h's tree of the 16 lanes (a vector ISA may define VEC_TREE16 and
 * vf_tree16(a): the same adds in registers; VEC_TREE16X4 and vf_tree16x4,
 * the trees of SQ_ROWS = 4 rows at once). */
PE_AI float sumsq_tree(const vf *a) {
#if defined(VEC_TREE16)
  return vf_tree16(a);
#else
  _Alignas(64) float l[16];
  for (int i = 0; i < SQ_NA; i++) vf_store(l + i * VL, a[i]);
  return pe__tree16f(l);
#endif
}
/* Rows [0, R) of p (stride rs bytes), their own lanes, sums to out. */
PE_AI void sumsq_rows(int dt, int R, const char *p, int64_t rs, int64_t n, float *out) {
  const int64_t es = pe__esize(dt);
  vf a[SQ_ROWS][SQ_NA];
  for (int k = 0; k < R; k++)
    for (int i = 0; i < SQ_NA; i++) a[k][i] = vf_set1(0.0f);
  int64_t e = 0;
  for (; e + 16 <= n; e += 16)
    for (int k = 0; k < R; k++)
      for (int i = 0; i < SQ_NA; i++) {
        vf x = vld(dt, PE_AT(p + k * rs, e + i * VL, es), VL);
        a[k][i] = vf_fma(x, x, a[k][i]);
      }
  if (e < n)
    for (int k = 0; k < R; k++)
      for (int i = 0; i < SQ_NA; i++) {
        int64_t left = n - e - i * VL;
        vf x = vld(dt, PE_AT(p + k * rs, e + i * VL, es), left > VL ? VL : (int32_t)left);
        a[k][i] = vf_fma(x, x, a[k][i]);
      }
#if defined(VEC_TREE16X4)
  if (R == 4) {
    vf_tree16x4(a[0], a[1], a[2], a[3], out);
    return;
  }
#endif
  for (int k = 0; k < R; k++) out[k] = sumsq_tree(a[k]);
}

PE_AI void sumsq_gen(int dt, const void *src, int64_t n, int64_t rows, int64_t row_stride,
                     int combine, float *out) {
  const char *p = src;
  const int64_t rs = row_stride * pe__esize(dt);
  if (!combine) {
    int64_t r = 0;
    for (; r + SQ_ROWS <= rows; r += SQ_ROWS) sumsq_rows(dt, SQ_ROWS, p + r * rs, rs, n, out + r);
    for (; r < rows; r++) sumsq_rows(dt, 1, p + r * rs, rs, n, out + r);
    return;
  }
  _Static_assert(SQ_ROWS == 4, "a block of SQ_ROWS rows is pushed as level 2");
  pe__sum_stack k;
  pe__sum_init(&k);
  float s[SQ_ROWS];
  int64_t r = 0;
  for (; r + SQ_ROWS <= rows; r += SQ_ROWS) {
    sumsq_rows(dt, SQ_ROWS, p + r * rs, rs, n, s);
    pe__sum_push_block(&k, (s[0] + s[1]) + (s[2] + s[3]), 2);
  }
  for (; r < rows; r++) {
    sumsq_rows(dt, 1, p + r * rs, rs, n, s);
    pe__sum_push(&k, s[0]);
  }
  out[0] = rows > 0 ? pe__sum_total(&k) : 0.0f;
}

/* isa.h's pe__norm_scale of count sums, VL at a time in float64 lanes: the
 * mean's multiply by 1/n, the add of eps, the square root and the divide
 * are correctly rounded in every lane as in the scalar definition (a square
 * root per row was ~12 % of a decode step's time, AMD EPYC Zen 3), or
 * (VEC_RSQRT_F32EQ) replaced by a cheaper 1/sqrt that rounds to the same
 * float32 in every lane. */
PE_AI void nscale_gen(const float *s, int64_t count, int64_t n, float eps, float *out) {
  const vd inv = vd_set1(1.0 / (double)n), e = vd_set1((double)eps);
#if !defined(VEC_RSQRT_F32EQ)
  const vd one = vd_set1(1.0);
#endif
  for (int64_t i = 0; i < count; i += VL) {
    const int32_t m = count - i >= VL ? VL : (int32_t)(count - i);
    vf x = vf_loadn(s + i, m);
#if defined(VEC_RSQRT_F32EQ)
    vd lo = vd_rsqrt_f32eq(vd_add(vd_mul(vd_widen_lo(x), inv), e), m);
    vd hi = m > VDL ? vd_rsqrt_f32eq(vd_add(vd_mul(vd_widen_hi(x), inv), e), m - VDL) : lo;
#else
    vd lo = vd_div(one, vd_sqrt(vd_add(vd_mul(vd_widen_lo(x), inv), e)));
    vd hi = vd_div(one, vd_sqrt(vd_add(vd_mul(vd_widen_hi(x), inv), e)));
#endif
    vf_storen(out + i, m, vf_nan_to_zero(vf_from_vd2(lo, hi)));
  }
}

/* The steps in two halves, so that a group of rows can load all its
 * vectors before it stores any (rope_group). */

/* NeoX, m <= VL pairs: x at sx, y at sy (dtype sd). */
PE_AI void neox_ld(int sd, const char *sx, const char *sy, int32_t m, vf *x, vf *y) {
  *x = vld(sd, sx, m);
  *y = vld(sd, sy, m);
}
/* ... rotated by the vectors c, s and written to dx, dy (dtype dd). */
PE_AI void neox_st(int dd, char *dx, char *dy, int32_t m, vf x, vf y, vf c, vf s) {
  vf xn, yn;
  rotate(x, y, c, s, &xn, &yn);
  vst2(dd, dx, m, xn, dy, m, yn);
}
/* Both: x at sx, y at sy written to dx, dy (the same addresses in place). */
PE_AI void neox_step(int sd, int dd, const char *sx, const char *sy, char *dx, char *dy,
                     const float *c, const float *s, int32_t m) {
  vf x, y;
  neox_ld(sd, sx, sy, m, &x, &y);
  neox_st(dd, dx, dy, m, x, y, vf_loadn(c, m), vf_loadn(s, m));
}

/* The cos (or sin) vector of a GPT-J step of m pairs, in the lane order
 * gptj_ld leaves x and y in. */
PE_AI vf gptj_cs(const float *c, int32_t m) {
#if defined(VEC_LD2)
  return vf_loadn(c, m);
#else
  return vf_gptj_cs(vf_loadn(c, m));
#endif
}

/* GPT-J, m <= VL interleaved pairs at sp (2m elements, dtype sd). */
PE_AI void gptj_ld(int sd, const char *sp, int32_t m, vf *x, vf *y) {
#if defined(VEC_LD2)
  vldi(sd, sp, m, x, y);
#else
  const int64_t ses = pe__esize(sd);
#if defined(VEC_BF16_EO) && defined(VEC_GPTJ_ORDERED)
  if (sd == PE_BF16 || EO_DT(sd)) { /* x even, y odd: in pair order */
    bf16_ld_eo(sp, 2 * m, x, y);
    return;
  }
#endif
  vf_deinterleave(vld(sd, sp, 2 * m), vld(sd, sp + VL * ses, 2 * m - VL), x, y);
#endif
}
/* ... rotated by c, s (from gptj_cs) and written to dp (dtype dd). whole (a
 * constant): a full step stores its 2*VL elements as the cache write's whole
 * lines (vstw) rather than two vectors (vst2). */
PE_AI void gptj_st(int dd, char *dp, int32_t m, int whole, vf x, vf y, vf c, vf s) {
  vf xn, yn;
  rotate(x, y, c, s, &xn, &yn);
#if defined(VEC_LD2)
  vsti(dd, dp, m, xn, yn);
  (void)whole;
#else
  const int64_t des = pe__esize(dd);
#if defined(VEC_BF16_EO) && defined(VEC_GPTJ_ORDERED)
  if (EO_DT(dd)) { /* back to pair order, one store (whole or masked) */
    bf16_st_eo_g(1, &dp, 2 * m, &xn, &yn);
    return;
  }
#endif
  vf lo, hi;
  vf_interleave(xn, yn, &lo, &hi);
  if (whole)
    vstw(dd, dp, lo, hi);
  else
    vst2(dd, dp, 2 * m, lo, dp + VL * des, 2 * m - VL, hi);
#endif
}
/* EO_PAIR(sd, dd): rows of dtype sd to dd that go in even/odd order
 * (VEC_BF16_EO): bf16 to the even/odd dtype - the plain GPT-J steps here,
 * store_template.h's NeoX rows, and the normed rows (neo_rows).
 * The plain rows' GPT-J steps (the QK-norm's rows use gptj_ld/gptj_st,
 * whose lane order does not depend on the dtype) of such a pair: x and y
 * the even and odd elements, in pair order, and cos/sin as they are,
 * without vf_deinterleave, vf_interleave and vf_gptj_cs (AVX2: 5 of a
 * step's shuffles, 2 of them lane-crossing). */
#if defined(VEC_BF16_EO)
#define EO_PAIR(sd, dd) (((sd) == PE_BF16 || EO_DT(sd)) && EO_DT(dd))
#else
#define EO_PAIR(sd, dd) 0
#endif
PE_AI vf row_gptj_cs(int sd, int dd, const float *c, int32_t m) {
  return EO_PAIR(sd, dd) ? vf_loadn(c, m) : gptj_cs(c, m);
}
PE_AI void row_gptj_ld(int sd, int dd, const char *sp, int32_t m, vf *x, vf *y) {
#if defined(VEC_BF16_EO)
  if (EO_PAIR(sd, dd)) {
    bf16_ld_eo(sp, 2 * m, x, y);
    return;
  }
#endif
  (void)dd;
  gptj_ld(sd, sp, m, x, y);
}
#if defined(VEC_ROT_FAST)
/* Pointers the compiler must take as unknown: the loads of a step's exact
 * path (gptj_eo_exact, neox_eo_exact) are then not merged with the fast
 * path's, whose vectors would stay live across its NaN test. */
#define PE_OPAQUE_PTR(p) __asm__("" : "+r"(p))
/* m <= VL GPT-J pairs at sp rotated as isa.h says and written to dp (bf16,
 * the even/odd order): the plain step's path for a step with a NaN
 * (row_gptj_st). It loads the pairs and cos/sin again, which are still in
 * memory, so that the fast path keeps no register for it. Inline: a call
 * would clobber every vector register, and gcc then rebuilt the loop's
 * constants after the test in every step. */
PE_AI void gptj_eo_exact(const char *sp, char *dp, const float *c, const float *s, int32_t m) {
  PE_OPAQUE_PTR(sp);
  PE_OPAQUE_PTR(c);
  PE_OPAQUE_PTR(s);
  vf x, y, xn, yn;
  bf16_ld_eo(sp, 2 * m, &x, &y);
  rotate(x, y, vf_loadn(c, m), vf_loadn(s, m), &xn, &yn);
  bf16_st_eo_g(1, &dp, 2 * m, &xn, &yn);
}
#endif
/* x, y (row_gptj_ld's, loaded from sp) rotated by c, s (row_gptj_cs's of
 * the m pairs at cp, sn) and written to dp. */
PE_AI void row_gptj_st(int sd, int dd, const char *sp, char *dp, int32_t m, int whole, vf x, vf y,
                       vf c, vf s, const float *cp, const float *sn) {
#if defined(VEC_BF16_EO)
  if (EO_PAIR(sd, dd)) {
    vf xn, yn;
#if defined(VEC_ROT_FAST)
    rotate_fast(x, y, c, s, &xn, &yn);
    if (__builtin_expect(vf_any_nan2(xn, yn), 0))
      gptj_eo_exact(sp, dp, cp, sn, m);
    else
      bf16_st_eo_fast(dp, 2 * m, xn, yn);
#else
    rotate(x, y, c, s, &xn, &yn);
    bf16_st_eo_g(1, &dp, 2 * m, &xn, &yn);
#endif
    return;
  }
#endif
  (void)sd, (void)sp, (void)cp, (void)sn;
  gptj_st(dd, dp, m, whole, x, y, c, s);
}
#if defined(VEC_GPTJ_IL)
/* GPT-J in pair order, the pairs as they lie (VEC_GPTJ_IL, IL_PAIR(sd, dd)):
 * v (VL/2 pairs) rotated by the duplicated cos/sin c, s (vf_dup4), isa.h's
 * operations lane by lane (vec_avx2.h). */
PE_AI vf il_rotate(vf v, vf c, vf s) {
  PE_OPAQUE(v);
  PE_OPAQUE(c);
  PE_OPAQUE(s);
  vf p = vf_mul(vf_swap_pairs(v), s); /* y*s in the even lanes, x*s in the odd */
  PE_OPAQUE(p);
  p = vf_neg_even(p); /* -(y*s) */
  PE_OPAQUE(p);
  return vf_fma(v, c, p);
}
/* m <= VL pairs' cos (or sin) at c duplicated: pairs [0, VL/2) in *lo, the
 * rest in *hi (zeros past m). */
PE_AI void il_cs(const float *c, int32_t m, vf *lo, vf *hi) {
  if (m >= VL) {
    *lo = vf_dup4(c);
    *hi = vf_dup4(c + VL / 2);
    return;
  }
  _Alignas(32) float b[VL] = {0};
  memcpy(b, c, (size_t)m * sizeof(float));
  *lo = vf_dup4(b);
  *hi = vf_dup4(b + VL / 2);
}
/* m <= VL pairs at sp (dtype sd) rotated by il_cs's c0, c1, s0, s1 and
 * written to dp (dtype dd; whole: as 2*VL contiguous elements, vstw). */
PE_AI void il_ld(int sd, const char *sp, int32_t m, vf *v0, vf *v1) {
  *v0 = vld(sd, sp, 2 * m);
  *v1 = vld(sd, sp + VL * pe__esize(sd), 2 * m - VL);
}
PE_AI void il_st(int dd, char *dp, int32_t m, int whole, vf v0, vf v1, vf c0, vf c1, vf s0,
                 vf s1) {
  v0 = il_rotate(v0, c0, s0);
  v1 = il_rotate(v1, c1, s1);
  if (whole)
    vstw(dd, dp, v0, v1);
  else
    vst2(dd, dp, 2 * m, v0, dp + VL * pe__esize(dd), 2 * m - VL, v1);
}
#endif
/* Both: the pairs at sp written to dp (the same address in place). */
PE_AI void gptj_step(int sd, int dd, const char *sp, char *dp, const float *c, const float *s,
                     int32_t m, int whole) {
#if defined(VEC_GPTJ_IL)
  if (IL_PAIR(sd, dd)) {
    vf v0, v1, c0, c1, s0, s1;
    il_ld(sd, sp, m, &v0, &v1);
    il_cs(c, m, &c0, &c1);
    il_cs(s, m, &s0, &s1);
    il_st(dd, dp, m, whole && m >= VL, v0, v1, c0, c1, s0, s1);
    return;
  }
#endif
  vf x, y;
  row_gptj_ld(sd, dd, sp, m, &x, &y);
  row_gptj_st(sd, dd, sp, dp, m, whole, x, y, row_gptj_cs(sd, dd, c, m), row_gptj_cs(sd, dd, s, m),
              c, s);
}

/* One row in place: full steps of VL pairs, then one tail step. */
PE_AI void rope_row(int dt, int style, void *row, const float *c, const float *s, int32_t n,
                    int32_t dist) {
  char *r = row;
  const int64_t es = pe__esize(dt);
  int32_t j = 0;
  if (style == PE_ROPE_GPTJ) {
    for (; j + VL <= n; j += VL)
      gptj_step(dt, dt, r + 2 * j * es, r + 2 * j * es, c + j, s + j, VL, 0);
    if (j < n) gptj_step(dt, dt, r + 2 * j * es, r + 2 * j * es, c + j, s + j, n - j, 0);
  } else {
    char *y = r + dist * es;
    for (; j + VL <= n; j += VL)
      neox_step(dt, dt, PE_AT(r, j, es), PE_AT(y, j, es), PE_AT(r, j, es), PE_AT(y, j, es), c + j,
                s + j, VL);
    if (j < n)
      neox_step(dt, dt, PE_AT(r, j, es), PE_AT(y, j, es), PE_AT(r, j, es), PE_AT(y, j, es), c + j,
                s + j, n - j);
  }
}

/* ---- rows of a group of heads ---- */

/* Heads whose rows share each step's cos/sin vectors, loaded once per step
 * instead of once per row: a row then costs its own loads and stores only
 * (cos/sin are half the loads of a row otherwise). 4 because in [B,H,T,D]
 * the group's rows are T*head_dim elements apart, often a multiple of 4 KiB:
 * the 4 rows and the cos/sin row then fall in the same L1 sets, which hold
 * 8 lines on current x86 and Arm cores, and a larger group evicts its own
 * lines (measured on AMD Zen 4: groups of 8 or 40 rows were slower than 4). */
#define PE_ROPE_GROUP 4

/* m <= VL pairs from pair j of g rows (head h's row at row + h*hs bytes)
 * sharing cos c and sin s. Every row's vectors are loaded before any is
 * stored: in [B,H,T,D] the rows are often a multiple of 4 KiB apart, and a
 * load right after a store to the same address bits 0-11 waits for it (4K
 * aliasing; Zen 4, 512 tokens: 9.8 -> 8.1 ns per row). */
PE_AI void group_step(int dt, int style, int64_t g, char *row, int64_t hs, const float *c,
                      const float *s, int32_t j, int32_t m, int32_t dist) {
  const int64_t es = pe__esize(dt);
  vf x[PE_ROPE_GROUP], y[PE_ROPE_GROUP];
  if (style == PE_ROPE_GPTJ) {
    char *p = row + 2 * j * es;
#if defined(VEC_GPTJ_IL)
    if (IL_PAIR(dt, dt)) { /* every row's pairs loaded first, cos/sin duplicated once */
      vf c0, c1, s0, s1;
      for (int64_t h = 0; h < g; h++) il_ld(dt, p + h * hs, m, &x[h], &y[h]);
      il_cs(c + j, m, &c0, &c1);
      il_cs(s + j, m, &s0, &s1);
      for (int64_t h = 0; h < g; h++) il_st(dt, p + h * hs, m, 0, x[h], y[h], c0, c1, s0, s1);
      return;
    }
#endif
    const vf vc = row_gptj_cs(dt, dt, c + j, m), vs = row_gptj_cs(dt, dt, s + j, m);
    for (int64_t h = 0; h < g; h++) row_gptj_ld(dt, dt, p + h * hs, m, &x[h], &y[h]);
    for (int64_t h = 0; h < g; h++)
      row_gptj_st(dt, dt, p + h * hs, p + h * hs, m, 0, x[h], y[h], vc, vs, c + j, s + j);
  } else {
    char *px = row + j * es, *py = px + dist * es;
    for (int64_t h = 0; h < g; h++) neox_ld(dt, px + h * hs, py + h * hs, m, &x[h], &y[h]);
    const vf vc = vf_loadn(c + j, m), vs = vf_loadn(s + j, m);
    for (int64_t h = 0; h < g; h++) neox_st(dt, px + h * hs, py + h * hs, m, x[h], y[h], vc, vs);
  }
}

#if defined(VEC_BF16_EO)
/* 2*VL consecutive cos (or sin) values split into the even and odd ones,
 * each in order (vf_gptj_cs undoes vf_deinterleave's lane order). */
PE_AI void cs_eo(const float *c, vf *e, vf *o) {
  vf_deinterleave(vf_load(c), vf_load(c + VL), e, o);
  *e = vf_gptj_cs(*e);
  *o = vf_gptj_cs(*o);
}
#if defined(VEC_ROT_FAST)
/* One NeoX chunk of 2*VL pairs, x at sx and y at sy (bf16) to dx, dy,
 * rotated by the cos/sin at c, s (pair order) as isa.h says: the fast
 * chunk's path for a NaN (neox_eo_fast), from memory as gptj_eo_exact. */
PE_AI void neox_eo_exact(const char *sx, const char *sy, char *dx, char *dy, const float *c,
                         const float *s) {
  PE_OPAQUE_PTR(sx);
  PE_OPAQUE_PTR(sy);
  PE_OPAQUE_PTR(c);
  PE_OPAQUE_PTR(s);
  vf e[2], o[2], ce, co, se, so;
  bf16_ld_eo(sx, 2 * VL, &e[0], &o[0]);
  bf16_ld_eo(sy, 2 * VL, &e[1], &o[1]);
  cs_eo(c, &ce, &co);
  cs_eo(s, &se, &so);
  rotate(e[0], e[1], ce, se, &e[0], &e[1]);
  rotate(o[0], o[1], co, so, &o[0], &o[1]);
  char *p[2] = {dx, dy};
  bf16_st_eo_g(2, p, 2 * VL, e, o);
}
/* The same chunk from its loaded halves (x: ex, ox; y: ey, oy) and cs_eo's
 * vectors of c, s, with rotate_fast: both results written if neither holds
 * a NaN, else neox_eo_exact. */
PE_AI void neox_eo_fast(const char *sx, const char *sy, char *dx, char *dy, vf ex, vf ox, vf ey,
                        vf oy, vf ce, vf co, vf se, vf so, const float *c, const float *s) {
  vf xe, xo, ye, yo;
  rotate_fast(ex, ey, ce, se, &xe, &ye);
  rotate_fast(ox, oy, co, so, &xo, &yo);
  if (__builtin_expect(vf_any_nan4(xe, xo, ye, yo), 0)) {
    neox_eo_exact(sx, sy, dx, dy, c, s);
    return;
  }
  bf16_st_eo_fast(dx, 2 * VL, xe, xo);
  bf16_st_eo_fast(dy, 2 * VL, ye, yo);
}
#endif
/* The even/odd order's step (VEC_BF16_EO) of one NeoX chunk of 2*VL pairs:
 * x at sx and y dist elements on (bf16, 2 bytes an element) loaded into
 * e[0], o[0] (x) and e[1], o[1] (y) and rotated by cos/sin deinterleaved
 * the same way (ce, co, se, so); p[0], p[1] get the addresses of x and y
 * at dx (sx for rows in place) for bf16_st_eo_g, which the caller calls
 * once for all its chunks. */
PE_AI void eo_chunk(const char *sx, char *dx, int32_t dist, vf ce, vf co, vf se, vf so, char **p,
                    vf *e, vf *o) {
  p[0] = dx;
  p[1] = dx + dist * 2;
  bf16_ld_eo(sx, 2 * VL, &e[0], &o[0]);
  bf16_ld_eo(sx + dist * 2, 2 * VL, &e[1], &o[1]);
  rotate(e[0], e[1], ce, se, &e[0], &e[1]);
  rotate(o[0], o[1], co, so, &o[0], &o[1]);
}
/* group_step for 2*VL NeoX pairs from pair j in the even/odd order:
 * cos/sin deinterleaved once for the group's rows. With VEC_EO_RAW every
 * row's words are loaded first, then each row widened, rotated and stored
 * in turn. */
PE_AI void group_step_eo(int64_t g, char *row, int64_t hs, const float *c, const float *s,
                         int32_t j, int32_t dist) {
  vf ce, co, se, so;
  cs_eo(c + j, &ce, &co);
  cs_eo(s + j, &se, &so);
#if defined(VEC_EO_RAW)
  vw w[2 * PE_ROPE_GROUP];
  memset(w, 0, sizeof w); /* rows past g: for the compiler's warning */
#pragma GCC unroll 4 /* so that w stays in registers */
  for (int h = 0; h < PE_ROPE_GROUP; h++)
    if (h < g) {
      w[2 * h] = bf16_ld_w(row + h * hs + j * 2, 2 * VL);
      w[2 * h + 1] = bf16_ld_w(row + h * hs + (j + dist) * 2, 2 * VL);
    }
#pragma GCC unroll 4
  for (int h = 0; h < PE_ROPE_GROUP; h++)
    if (h < g) {
      char *px = row + h * hs + j * 2, *py = px + dist * 2;
      vf ex, ox, ey, oy;
      bf16_w_eo(w[2 * h], &ex, &ox);
      bf16_w_eo(w[2 * h + 1], &ey, &oy);
      neox_eo_fast(px, py, px, py, ex, ox, ey, oy, ce, co, se, so, c + j, s + j);
    }
#else
  const vf z = vf_set1(0.0f); /* rows past g: for the compiler's warning */
  vf e[2 * PE_ROPE_GROUP] = {z, z, z, z, z, z, z, z};
  vf o[2 * PE_ROPE_GROUP] = {z, z, z, z, z, z, z, z};
  char *p[2 * PE_ROPE_GROUP] = {row, row, row, row, row, row, row, row};
  for (int h = 0; h < PE_ROPE_GROUP; h++)
    if (h < g)
      eo_chunk(row + h * hs + j * 2, row + h * hs + j * 2, dist, ce, co, se, so, p + 2 * h,
               e + 2 * h, o + 2 * h);
  bf16_st_eo_g(2 * (int)g, p, 2 * VL, e, o);
#endif
}
#endif
/* g <= PE_ROPE_GROUP rows of one token in place (each as scalar.c's
 * rope_row): full steps of VL pairs, then one tail step; bf16 NeoX rows in
 * chunks of 2*VL pairs in even/odd order first when eo (VEC_BF16_EO). */
PE_AI void rope_group(int dt, int style, int64_t g, char *row, int64_t hs, const float *c,
                      const float *s, int32_t n, int32_t dist, int eo) {
  int32_t j = 0;
#if defined(VEC_BF16_EO)
  if (eo && EO_DT(dt) && style != PE_ROPE_GPTJ)
    for (; j + 2 * VL <= n; j += 2 * VL) group_step_eo(g, row, hs, c, s, j, dist);
#endif
  for (; j + VL <= n; j += VL) group_step(dt, style, g, row, hs, c, s, j, VL, dist);
  if (j < n) group_step(dt, style, g, row, hs, c, s, j, n - j, dist);
}

/* The end of the run of tokens from t0 whose cos rows, and sin rows, are
 * evenly spaced: each row's pointer token t0's plus (t - t0) times one step
 * (in bytes, as integers; the steps in *cstep, *sstep). A table's rows for
 * consecutive positions are one run, as a prefill's are. */
PE_AI int64_t even_run(const pe_rope_block *b, int64_t t0, uintptr_t *cstep, uintptr_t *sstep) {
  const float *const *cosv = b->cos, *const *sinv = b->sin;
  const uintptr_t c0 = (uintptr_t)cosv[t0], s0 = (uintptr_t)sinv[t0];
  const int64_t n_tokens = b->n_tokens;
  *cstep = *sstep = 0;
  if (t0 + 1 >= n_tokens) return n_tokens;
  *cstep = (uintptr_t)cosv[t0 + 1] - c0;
  *sstep = (uintptr_t)sinv[t0 + 1] - s0;
  int64_t t = t0 + 2;
  while (t < n_tokens && (uintptr_t)cosv[t] == c0 + (uintptr_t)(t - t0) * *cstep &&
         (uintptr_t)sinv[t] == s0 + (uintptr_t)(t - t0) * *sstep)
    t++;
  return t;
}

/* Row k of a run: p0 + k * step bytes (the caller's pointer, rebuilt). */
PE_AI const float *run_row(uintptr_t p0, uintptr_t step, int64_t k) {
  return (const float *)(p0 + (uintptr_t)k * step);
}

/* The rows of a block whose heads are farther apart than its tokens
 * ([B,H,T,D]; hs and ts in bytes), and a decode step's rows: PE_ROPE_GROUP
 * heads at a time walk every token of the block, so each pass streams its
 * rows and the block's cos/sin rows (which the engine sizes to stay in L2
 * across the passes) in long runs. A single token (a decode step, its rows in
 * L1) saves the loads of cos/sin (Zen 4, 40 heads: AVX2 330-395 -> 282 ns,
 * AVX-512 unchanged). Heads as near as tokens or nearer ([B,T,H,D]) in blocks
 * of several tokens stay with rows_walk's row by row order: there the rows of
 * a token are contiguous, and the group's order (each step across the heads)
 * was slower (Zen 4, 512 tokens from L3: 8.3 against 7.0 ns per row).
 * The passes go over runs of tokens whose cos/sin rows are evenly spaced
 * (even_run: a prefill's whole block), finding each token's rows by the
 * run's step rather than through the block's pointer arrays, whose loads
 * came after the previous token's stores: the array advances 8 bytes a token
 * and the rows 512, so its address bits 0-11 keep meeting those of stores in
 * flight, and such a load waits for them (4K aliasing; a standalone copy of
 * the loop, rows by step against by pointer: 0.89-0.91 of the time). AMD
 * EPYC Zen 4, Llama-3-8B 32q+8k x 128 f32 [B,H,T,D], 512 tokens, fastest of
 * 31 calls each: 160-165 -> 152-157 us. Positions in random order (runs of
 * two tokens: any two rows are evenly spaced) 181-185 -> 167-177 us.
 * Two groups walk a run together, the second PE_ROPE_LAG tokens behind the
 * first, so each cos/sin row is read from L2 or L3 once for 8 heads and
 * again from L1 (a pass with one fixed cos/sin row took 123-126 us where
 * the table's took 170-183: those rows, not the heads' own, were the cost).
 * The lag keeps the 8 rows of a step out of each other's cache sets: with
 * both groups on the same token (8 rows a multiple of 4 KiB apart) the call
 * took 204-212 us; lags 1-3 145-158 us, 8 204-218, three groups 152-155,
 * four 169-247, prefetching the table rows 1-32 tokens ahead no gain (Zen
 * 4, 512 tokens, fastest of 31 calls, one process per variant, two or three
 * rounds). bf16 NeoX rows go in even/odd order unless the CPU has the
 * features VEC_GROUP_PAIR_ORDER names (vec_avx512.h: pair order where a
 * word permute is cheap). */
#define PE_ROPE_LAG 2
PE_AI void rows_grouped(int dt, int style, const pe_rope_block *b, char *base, int64_t hs,
                        int64_t ts) {
  enum { G = PE_ROPE_GROUP };
  const float *const *cosv = b->cos, *const *sinv = b->sin; /* in locals: see rows_walk */
  const int64_t n_tokens = b->n_tokens, n_heads = b->n_heads, full = n_heads - n_heads % G;
  const int32_t n = b->n_pairs, dist = b->pair_dist;
#if defined(VEC_GROUP_PAIR_ORDER)
  const int eo = !(pe__cpu_features() & VEC_GROUP_PAIR_ORDER);
#else
  const int eo = 1;
#endif
  for (int64_t t0 = 0, t1; t0 < n_tokens; t0 = t1) {
    uintptr_t cstep, sstep;
    t1 = even_run(b, t0, &cstep, &sstep);
    const uintptr_t c0 = (uintptr_t)cosv[t0], s0 = (uintptr_t)sinv[t0];
    char *const run = base + t0 * ts;
    const int64_t m = t1 - t0;
#define GROUP_(g, k, h0)                                                                         \
  rope_group(dt, style, g, run + (k) * ts + (h0) * hs, hs, run_row(c0, cstep, k),                \
             run_row(s0, sstep, k), n, dist, eo)
    for (int64_t h0 = 0; h0 < full; h0 += 2 * G) {
      const int64_t groups = h0 + G < full ? 2 : 1; /* the last group of an odd count alone */
      for (int64_t k = 0; k < m + (groups - 1) * PE_ROPE_LAG; k++)
        for (int64_t i = 0; i < groups; i++) { /* group i, i * PE_ROPE_LAG tokens behind */
          const int64_t kk = k - i * PE_ROPE_LAG;
          if (kk >= 0 && kk < m) GROUP_(G, kk, h0 + i * G);
        }
    }
    if (full < n_heads)
      for (int64_t k = 0; k < m; k++) GROUP_(n_heads - full, k, full);
#undef GROUP_
  }
}

/* ---- the heads of one token ---- */

/* Full steps of a row whose cos/sin vectors stay in registers across the
 * heads of a token (token_rows): n_pairs <= PE_ROPE_HELD * VL. */
#define PE_ROPE_HELD 4

/* Step k (VL pairs) of the row at r with the vectors c, s (row_pair_cs's of
 * the token's cos/sin at cp, sn). */
PE_AI void held_step(int dt, int style, char *r, int32_t k, int32_t dist, vf c, vf s,
                     const float *cp, const float *sn) {
  const int64_t es = pe__esize(dt);
  vf x, y;
  if (style == PE_ROPE_GPTJ) {
    char *p = r + 2 * k * VL * es;
    row_gptj_ld(dt, dt, p, VL, &x, &y);
    row_gptj_st(dt, dt, p, p, VL, 0, x, y, c, s, cp + k * VL, sn + k * VL);
  } else {
    char *px = r + k * VL * es, *py = px + dist * es;
    neox_ld(dt, px, py, VL, &x, &y);
    neox_st(dt, px, py, VL, x, y, c, s);
    (void)cp, (void)sn;
  }
}
/* m <= VL pairs' cos (or sin) at p as a step uses them (GPT-J: gptj_cs's
 * lane order; the plain rows of dtype dt: row_pair_cs). */
PE_AI vf pair_cs(int style, const float *p, int32_t m) {
  return style == PE_ROPE_GPTJ ? gptj_cs(p, m) : vf_loadn(p, m);
}
PE_AI vf row_pair_cs(int dt, int style, const float *p, int32_t m) {
  return style == PE_ROPE_GPTJ ? row_gptj_cs(dt, dt, p, m) : vf_loadn(p, m);
}

/* Rows that are slices of longer rows (heads more than a row's rotated
 * channels apart: MLA's q rope slices, 64 of each head's 192 channels, or a
 * partial rotary_dim) leave gaps between the lines a token's walk touches,
 * and the hardware prefetchers fall behind: token_rows prefetches the row
 * SLICE_PF_ROWS heads on (its row_span) while it rotates this one. Intel
 * Xeon, pe-bench --suite mla --tokens 512 against the build without it,
 * three rounds alternated: the DeepSeek-V3 step bf16 0.68-0.76 -> 0.87-1.02
 * x floor, f32 0.88-0.96 -> 1.00-1.06, fp8 0.64-0.72 -> 0.82-0.84, fp8_ds
 * 0.53-0.60 -> 0.66-0.70 (4 and 16 rows on: about the same); Qwen3-8B
 * heads with rotary_dim 32 about the same (bf16 1.03-1.10x faster). Rows
 * with no gap ([B,T,H,D] whole heads) prefetch a token or more on instead
 * (isa_template.h's stream_ahead); a block of one token prefetches nothing
 * (a decode step, its rows mostly in L2: the DeepSeek-V3 q's prefetched
 * there took 1.1x the time, f32). */
enum { SLICE_PF_ROWS = 8 };
/* token_rows' prefetches (pf, far as it takes them; rows of rb bytes, hs
 * apart): heads [0, *end) prefetch the row *off bytes on - slices
 * SLICE_PF_ROWS heads on, whole rows far bytes on, else none. One test per
 * row, as before far was added (a second one cost bf16 rows in L2 3 %). */
PE_AI void pf_rows(int pf, int64_t far, int64_t hs, int64_t rb, int64_t n_heads, int64_t *end,
                   int64_t *off) {
  const int slices = pf && hs > rb;
  *end = slices ? n_heads - SLICE_PF_ROWS : far ? n_heads : 0;
  *off = slices ? SLICE_PF_ROWS * hs : far;
}

#if defined(VEC_BF16_EO)
/* The cos/sin of a token's q = n / (2*VL) chunks (1 or 2) of 2*VL pairs
 * in even/odd order (cs_eo), for all its heads; returns q. */
PE_AI int32_t token_cs_eo(const float *c, const float *s, int32_t n, vf *ce, vf *co, vf *se,
                          vf *so) {
  const int32_t q = n / (2 * VL);
  for (int k = 0; k < 2; k++) {
    const int32_t o = k < q ? 2 * VL * k : 0;
    cs_eo(c + o, &ce[k], &co[k]);
    cs_eo(s + o, &se[k], &so[k]);
  }
  return q;
}
#if !defined(VEC_ROT_FAST)
/* One NeoX bf16 row of q chunks of 2*VL pairs (q 1 or 2) from r to w (r
 * itself in place) with its token's cos/sin in even/odd order
 * (token_cs_eo): each chunk by eo_chunk, one bf16_st_eo_g (one subnormal
 * check) for the row. */
PE_AI void eo_row(const char *r, char *w, int32_t q, int32_t dist, const vf *ce, const vf *co,
                  const vf *se, const vf *so) {
  const vf z = vf_set1(0.0f); /* unused when q is 1: for the compiler's warning */
  vf e[4] = {z, z, z, z}, o[4] = {z, z, z, z};
  char *p[4] = {w, w, w, w};
  for (int k = 0; k < 2; k++)
    if (k < q) /* chunk k: pairs from 2*VL*k, 2 bytes an element */
      eo_chunk(r + 2 * k * VL * 2, w + 2 * k * VL * 2, dist, ce[k], co[k], se[k], so[k], p + 2 * k,
               e + 2 * k, o + 2 * k);
  bf16_st_eo_g(2 * q, p, 2 * VL, e, o);
}
#endif
/* token_rows for NeoX rows of 2*VL or 4*VL pairs in the even/odd order
 * (VEC_BF16_EO): the token's cos/sin deinterleaved once, each row's chunks
 * of 2*VL pairs loaded, rotated and stored with one subnormal check. */
PE_AI void token_rows_eo(char *row, int64_t hs, int64_t n_heads, const float *c,
                         const float *s, int32_t n, int32_t dist, int pf, int64_t far) {
  vf ce[2], co[2], se[2], so[2];
  const int32_t q = token_cs_eo(c, s, n, ce, co, se, so); /* 1 or 2 */
  const int64_t rb = row_span(PE_ROPE_NEOX, n, dist) * 2;
  int64_t pf_end, pf_off;
  pf_rows(pf, far, hs, rb, n_heads, &pf_end, &pf_off);
  for (int64_t h = 0; h < n_heads; h++) {
    char *r = row + h * hs;
    if (h < pf_end) prefetch_lines(r + pf_off, rb);
#if defined(VEC_ROT_FAST)
    for (int k = 0; k < 2; k++)
      if (k < q) { /* chunk k: pairs from 2*VL*k, 2 bytes an element */
        char *px = r + 2 * k * VL * 2, *py = px + dist * 2;
        vf ex, ox, ey, oy;
        bf16_ld_eo(px, 2 * VL, &ex, &ox);
        bf16_ld_eo(py, 2 * VL, &ey, &oy);
        neox_eo_fast(px, py, px, py, ex, ox, ey, oy, ce[k], co[k], se[k], so[k], c + 2 * VL * k,
                     s + 2 * VL * k);
      }
#else
    eo_row(r, r, q, dist, ce, co, se, so);
#endif
  }
}
#endif
#if defined(VEC_BF16_EO) && !defined(VEC_ROT_FAST)
/* A token's n_heads NeoX bf16 rows into other rows (src head h at src +
 * h*shs, dst at dst + h*dhs bytes; a k row into its cache row), n 2*VL or
 * 4*VL pairs, in even/odd order as token_rows_eo rotates rows in place:
 * the token's cos/sin deinterleaved once for its heads, each row's units
 * widened by a shift and a mask, rotated, rounded by bf16_st_eo_g (one test
 * for the row's units) and written as whole 64-byte stores. */
PE_AI int store_eo_take(int sd, int dd, int style, int32_t n) {
  return EO_PAIR(sd, dd) && style == PE_ROPE_NEOX && n % (2 * VL) == 0 && n <= 4 * VL;
}
PE_AI void token_store_eo(const char *src, int64_t shs, char *dst, int64_t dhs, int64_t n_heads,
                          const float *c, const float *s, int32_t n, int32_t dist) {
  vf ce[2], co[2], se[2], so[2];
  const int32_t q = token_cs_eo(c, s, n, ce, co, se, so); /* 1 or 2 */
  for (int64_t h = 0; h < n_heads; h++)
    eo_row(src + h * shs, dst + h * dhs, q, dist, ce, co, se, so);
}
#endif
/* The rows of one token's n_heads heads (head h's at row + h*hs bytes), each
 * as rope_row, n a multiple of VL and <= PE_ROPE_HELD * VL: the token's cos
 * and sin vectors are loaded once and kept in registers (named, so that they
 * are not an array on the stack) across its heads, so a row costs its own
 * loads and stores only. For heads adjacent in memory ([B,T,H,D] and the
 * other heads-inner walks): AMD EPYC Zen 4, 512 tokens from L3, a
 * standalone copy of both loops: 0.84-0.86 -> 0.90-0.91 of the stream
 * bound, L2-resident 0.86-0.88 -> 1.09. pf (a block of several tokens):
 * rows of slices prefetch SLICE_PF_ROWS heads on; far (not 0): whole rows
 * (hs not above their span) prefetch their lines that many bytes on
 * (isa_template.h's stream_ahead). */
PE_AI void token_rows(int dt, int style, char *row, int64_t hs, int64_t n_heads, const float *c,
                      const float *s, int32_t n, int32_t dist, int pf, int64_t far) {
#if defined(VEC_BF16_EO)
  if (EO_DT(dt) && style != PE_ROPE_GPTJ && n % (2 * VL) == 0) {
    token_rows_eo(row, hs, n_heads, c, s, n, dist, pf, far);
    return;
  }
#endif
  const int32_t steps = n / VL;
#define HELD_(k)                                                                                 \
  const vf c##k = steps > k ? row_pair_cs(dt, style, c + k * VL, VL) : vf_set1(0.0f);            \
  const vf s##k = steps > k ? row_pair_cs(dt, style, s + k * VL, VL) : vf_set1(0.0f);
  HELD_(0) HELD_(1) HELD_(2) HELD_(3)
#undef HELD_
  const int64_t rb = row_span(style, n, dist) * pe__esize(dt);
  int64_t pf_end, pf_off;
  pf_rows(pf, far, hs, rb, n_heads, &pf_end, &pf_off);
  for (int64_t h = 0; h < n_heads; h++) {
    char *r = row + h * hs;
    if (h < pf_end) prefetch_lines(r + pf_off, rb);
    held_step(dt, style, r, 0, dist, c0, s0, c, s);
    if (steps > 1) held_step(dt, style, r, 1, dist, c1, s1, c, s);
    if (steps > 2) held_step(dt, style, r, 2, dist, c2, s2, c, s);
    if (steps > 3) held_step(dt, style, r, 3, dist, c3, s3, c, s);
  }
}

/* ---- the normed rows (isa.h's PE_NORM_*, float32) ---- */

/* m <= VL weights of a step's x and y lanes (GPT-J: in gptj_ld's lane
 * order; mode W or W1). The row's first element's weight at w. */
PE_AI void nweights(int style, const float *w, int32_t j, int32_t m, int32_t dist, vf *wx,
                    vf *wy) {
  if (style == PE_ROPE_GPTJ)
    gptj_ld(PE_F32, (const char *)(w + 2 * j), m, wx, wy);
  else
    neox_ld(PE_F32, (const char *)(w + j), (const char *)(w + dist + j), m, wx, wy);
}
/* x normed (isa.h): xr = x * r, then W: xr * w; W1: fma(xr, w, xr); UNIT:
 * xr. */
PE_AI vf nnorm(int mode, vf x, vf r, vf w) {
  vf n = vf_mul(x, r);
  if (mode == PE_NORM_W) n = vf_mul(n, w);
  if (mode == PE_NORM_W1) n = vf_fma(n, w, n);
  return n;
}

/* One step of m <= VL pairs at pair j of a normed row (nstore_row): the
 * pairs and weights loaded, normed, then rotated and stored as a plain step
 * (neox_st, gptj_st). */
PE_AI void nstep(int sd, int dd, int style, int mode, const char *in, char *out, int32_t j,
                 int32_t m, int32_t dist, vf rv, const float *c, const float *s,
                 const float *w) {
  const int64_t ses = pe__esize(sd), des = pe__esize(dd);
  const vf z = vf_set1(0.0f);
  vf x, y, wx = z, wy = z;
  if (mode != PE_NORM_UNIT) nweights(style, w, j, m, dist, &wx, &wy);
  if (style == PE_ROPE_GPTJ) {
    gptj_ld(sd, in + 2 * j * ses, m, &x, &y);
    gptj_st(dd, out + 2 * j * des, m, 0, nnorm(mode, x, rv, wx), nnorm(mode, y, rv, wy),
            gptj_cs(c + j, m), gptj_cs(s + j, m));
    return;
  }
  neox_ld(sd, PE_AT(in, j, ses), PE_AT(in, dist + j, ses), m, &x, &y);
  neox_st(dd, PE_AT(out, j, des), PE_AT(out, dist + j, des), m, nnorm(mode, x, rv, wx),
          nnorm(mode, y, rv, wy), vf_loadn(c + j, m), vf_loadn(s + j, m));
}

/* One normed row src (dtype sd) -> dst (dtype dd) of n pairs, in place when
 * dst == src (every step loads its pairs before it stores them): scale r,
 * weights w (the row's first element's; unused for UNIT). The whole steps
 * with the constant VL, then the tail. */
PE_AI void nstore_row(int sd, int dd, int style, int mode, const void *src, void *dst,
                      const float *c, const float *s, int32_t n, int32_t dist, float r,
                      const float *w) {
  const vf rv = vf_set1(r);
  int32_t j = 0;
  for (; j + VL <= n; j += VL) nstep(sd, dd, style, mode, src, dst, j, VL, dist, rv, c, s, w);
  if (j < n) nstep(sd, dd, style, mode, src, dst, j, n - j, dist, rv, c, s, w);
}

/* The lines of the `elems` elements (dtype dt) of the row pf bytes from
 * row (pe_rope_block.prefetch), prefetched for reading into L2: the next
 * block's rows, which its sums of squares read first. Into L1, a long
 * prefill from memory waited on the prefetches themselves (a third of the
 * rotation's samples on the instruction after prefetcht0: every L1 miss
 * buffer taken). Intel Xeon, `pe-ab --same-bytes --case qknorm`, Qwen3-8B
 * packed QKV, against prefetcht0: 4096 tokens f32 0.83 of the time (bf16
 * 0.98; pe-bench 8.0-8.1 against 9.5-10.0 ms), 512 tokens 0.98 (bf16
 * 1.00), 32 sequences 1.00. */
PE_AI void nprefetch(const char *row, int64_t pf, int64_t elems, int dt) {
  prefetch_lines_l2(row + pf, elems * pe__esize(dt));
}

/* count normed NeoX rows that share their cos/sin row and their weights (a
 * token's heads: one table row, one weight vector for every head), n a
 * multiple of VL pairs: 2*VL pairs at a time (the last VL alone), c, s and
 * the weights of the chunk loaded once for all the rows, each row's chunk
 * normed (nnorm) and rotated as nstep does it, the two x and the two y
 * vectors of 16-bit rows written by one store each (vstw). Row by row,
 * nstore_row loads c, s and both weights again for every step of every
 * row: with f32 rows six loads a step, where the rows themselves need two.
 * Intel Xeon (Emerald Rapids), `pe-ab --same-bytes --case qknorm`,
 * Qwen3-8B: decode 1 f32 0.88 of the time, bf16 0.95, f16 0.94; 32
 * sequences 0.87 / 0.93 / 0.90; 64 tokens bf16 0.92, f16 0.88; 512 tokens
 * bf16 0.97, f16 1.00; the avx2 path f32 0.85-0.88 (its bf16 rows go in
 * even/odd order, neo_rows). Each row's prefetch (pf) goes with its first
 * chunk, one row at a time as nstore_row issues it (all of a token's rows
 * at once took 1.07-1.13x the time at 512 tokens). Not for f32 rows of a
 * prefill block whose successor is prefetched (pf): its three tokens
 * (60 KB) outgrow L1, and a row's second chunk, 16 KB of other rows after
 * its first, took 1.03-1.04x the time at 512 and 2048 tokens. */
PE_AI int nheld_take(int sd, int style, int mode, int32_t n, int64_t cinc, int64_t wstep,
                     int64_t pf) {
  return style == PE_ROPE_NEOX && cinc == 0 && (mode == PE_NORM_UNIT || wstep == 0) &&
         n % VL == 0 && !(pf && sd == PE_F32);
}
PE_AI void nheld_rows(int sd, int dd, int mode, const char *src, int64_t sstep, char *dst,
                      int64_t dstep, const float *c, const float *s, int32_t n, int32_t dist,
                      const float *rs, int64_t rstep, const float *w, int64_t count, int64_t pf,
                      int64_t pfe) {
  const int64_t ses = pe__esize(sd), des = pe__esize(dd);
  const vf z = vf_set1(0.0f);
  int32_t j = 0;
  for (; j + 2 * VL <= n; j += 2 * VL) {
    vf wx0 = z, wy0 = z, wx1 = z, wy1 = z;
    if (mode != PE_NORM_UNIT) {
      nweights(PE_ROPE_NEOX, w, j, VL, dist, &wx0, &wy0);
      nweights(PE_ROPE_NEOX, w, j + VL, VL, dist, &wx1, &wy1);
    }
    const vf c0 = vf_load(c + j), s0 = vf_load(s + j);
    const vf c1 = vf_load(c + j + VL), s1 = vf_load(s + j + VL);
    for (int64_t h = 0; h < count; h++) {
      const char *in = src + h * sstep;
      char *out = dst + h * dstep;
      if (pf && j == 0) nprefetch(in, pf, pfe, sd);
      const vf rv = vf_set1(rs[h * rstep]);
      vf x0, y0, x1, y1, a0, b0, a1, b1;
      neox_ld(sd, PE_AT(in, j, ses), PE_AT(in, dist + j, ses), VL, &x0, &y0);
      neox_ld(sd, PE_AT(in, j + VL, ses), PE_AT(in, dist + j + VL, ses), VL, &x1, &y1);
      rotate(nnorm(mode, x0, rv, wx0), nnorm(mode, y0, rv, wy0), c0, s0, &a0, &b0);
      rotate(nnorm(mode, x1, rv, wx1), nnorm(mode, y1, rv, wy1), c1, s1, &a1, &b1);
      if (dd == PE_F32 || dd == PE_F16) { /* vst2: no insert to pack 16-bit halves */
        vst2(dd, PE_AT(out, j, des), VL, a0, PE_AT(out, dist + j, des), VL, b0);
        vst2(dd, PE_AT(out, j + VL, des), VL, a1, PE_AT(out, dist + j + VL, des), VL, b1);
      } else {
        vstw(dd, PE_AT(out, j, des), a0, a1);
        vstw(dd, PE_AT(out, dist + j, des), b0, b1);
      }
    }
  }
  if (j < n) { /* VL pairs */
    vf wx = z, wy = z;
    if (mode != PE_NORM_UNIT) nweights(PE_ROPE_NEOX, w, j, VL, dist, &wx, &wy);
    const vf cv = vf_load(c + j), sv = vf_load(s + j);
    for (int64_t h = 0; h < count; h++) {
      const char *in = src + h * sstep;
      char *out = dst + h * dstep;
      if (pf && j == 0) nprefetch(in, pf, pfe, sd);
      const vf rv = vf_set1(rs[h * rstep]);
      vf x, y;
      neox_ld(sd, PE_AT(in, j, ses), PE_AT(in, dist + j, ses), VL, &x, &y);
      neox_st(dd, PE_AT(out, j, des), PE_AT(out, dist + j, des), VL, nnorm(mode, x, rv, wx),
              nnorm(mode, y, rv, wy), cv, sv);
    }
  }
}

#if defined(VEC_GPTJ_PAIRS)
/* count normed GPT-J rows of f32/f16 that share their cos/sin row and their
 * weights (a token's heads: Llama 4's L2-normed rows), n a multiple of VL
 * pairs, with the pairs as they lie: per chunk of VL pairs (2*VL channels)
 * the cos and sin each duplicated to a pair's two lanes (vf_dup_half) and
 * the weights, in channel order, loaded once for all the rows; each row's
 * two vectors normed (nnorm) and rotated lane by lane as isa.h says - with
 * p the row with its pairs swapped times s, its even lanes negated, x' =
 * fmaf(x, c, -(y*s)) in the even lanes and y' = fmaf(y, c, x*s) in the
 * odd, one fma(row, c, p). nstore_row's steps deinterleave each row's
 * pairs, its weights and cos/sin again for every row, and interleave the
 * results (on AVX-512 six two-source permutes a step). AMD EPYC Zen 5,
 * `pe-ab --same-bytes --case qknorm --style gptj`, against nstore_row:
 * Llama-4-Scout's 40q/8kv x 128 L2-normed rows (`--heads 40 --norm l2`)
 * decode 32 f32 0.87-0.90 of the time on the AVX-512 paths, 0.89-0.92 on
 * avx2, f16 0.86 / 0.95; decode 1 f32 0.84 (avx512bf16) / 0.92 (avx2);
 * prefill 512 f16 0.86 / 0.95; weighted rows (`--norm rms`, 32q/8kv)
 * decode 32 f32 0.75 / 0.81. Not for f32 rows whose successor block is
 * prefetched (pf), as nheld_rows: taking them too, f32 prefill of 512 and
 * 2048 tokens took 1.02 / 1.17 of the time on avx512bf16, 1.15 / 1.31 on
 * avx2. */
PE_AI int gheld_take(int sd, int dd, int style, int mode, int32_t n, int64_t cinc,
                     int64_t wstep, int64_t pf) {
  return style == PE_ROPE_GPTJ && cinc == 0 && (mode == PE_NORM_UNIT || wstep == 0) &&
         n % VL == 0 && (sd == PE_F32 || sd == PE_F16) && (dd == PE_F32 || dd == PE_F16) &&
         !(pf && sd == PE_F32);
}
PE_AI vf gpair_rotate(vf v, vf c, vf s) {
  vf p = vf_mul(vf_swap_pairs(v), s); /* y*s in the even lanes, x*s in the odd */
  PE_OPAQUE(p);
  p = vf_neg_even(p); /* isa.h: the negation stays a negation */
  PE_OPAQUE(p);
  return vf_fma(v, c, p);
}
PE_AI void gheld_rows(int sd, int dd, int mode, const char *src, int64_t sstep, char *dst,
                      int64_t dstep, const float *c, const float *s, int32_t n, const float *rs,
                      int64_t rstep, const float *w, int64_t count, int64_t pf, int64_t pfe) {
  const int64_t ses = pe__esize(sd), des = pe__esize(dd);
  const vf z = vf_set1(0.0f);
  for (int32_t j = 0; j < n; j += VL) {
    vf w0 = z, w1 = z;
    if (mode != PE_NORM_UNIT) w0 = vf_load(w + 2 * j), w1 = vf_load(w + 2 * j + VL);
    const vf c0 = vf_dup_half(c + j), c1 = vf_dup_half(c + j + VL / 2);
    const vf s0 = vf_dup_half(s + j), s1 = vf_dup_half(s + j + VL / 2);
    for (int64_t h = 0; h < count; h++) {
      const char *in = src + h * sstep;
      char *out = dst + h * dstep;
      if (pf && j == 0) nprefetch(in, pf, pfe, sd);
      const vf rv = vf_set1(rs[h * rstep]);
      const vf v0 = nnorm(mode, vld(sd, PE_AT(in, 2 * j, ses), VL), rv, w0);
      const vf v1 = nnorm(mode, vld(sd, PE_AT(in, 2 * j + VL, ses), VL), rv, w1);
      vstw(dd, PE_AT(out, 2 * j, des), gpair_rotate(v0, c0, s0), gpair_rotate(v1, c1, s1));
    }
  }
}
#endif

#if defined(VEC_BF16_EO) && (defined(VEC_ROT_FAST) || defined(VEC_NORM_ROT_FAST))
/* Normed bf16 rows to bf16 in even/odd order (VEC_BF16_EO): the rows of a
 * token's heads, which share its cos/sin and the norm's weights, with both
 * deinterleaved once for all of them (cs_eo) into a stack buffer of at
 * most NEO_MAX channels; under a per-token norm (OLMo 2) each row has
 * weights of its own, put in that order as the row is normed (AMD EPYC
 * Zen 5, OLMo-2-7B bf16, `pe-ab --norm rms-token --heads 32 --kv-heads 32`
 * against the row-by-row natural order: decode 32 0.87 of the time on the
 * avx512 path and 0.89 on avx2, 512 tokens 0.94 / 0.93, one token 0.94 /
 * 0.90; the avx512bf16 path, without VEC_NORM_ROT_FAST, keeps the natural
 * order, which was faster there: 1.07-1.10 in even/odd).
 * Per 2*VL elements: one load widened by a shift
 * and a mask, normed as nnorm (the same operations per element), rotated
 * by rotate_fast with no lane moved, rounded back by bf16_st_eo_fast; a
 * unit whose results hold a NaN is done again by nstep (the exact path,
 * from memory: the unit is not stored yet). NeoX: a unit is 2*VL pairs
 * (x's even and odd elements, y's), GPT-J 2*VL channels (x even, y odd). */
#define VEC_NORM_EO 1
enum { NEO_MAX = 256 };
PE_AI int neo_take(int sd, int dd, int style, int mode, int32_t n, int64_t cinc,
                   int64_t wstep) {
  (void)mode, (void)wstep;
  return EO_PAIR(sd, dd) && cinc == 0 && 2 * n <= NEO_MAX &&
         n % (style == PE_ROPE_NEOX ? 2 * VL : VL) == 0;
}
/* The even and odd values of the 2*VL floats at v into b (even first). */
PE_AI void neo_split(const float *v, float *b) {
  vf e, o;
  cs_eo(v, &e, &o);
  vf_store(b, e);
  vf_store(b + VL, o);
}
PE_AI vf neo_norm(int mode, vf x, vf r, const float *w) {
  return nnorm(mode, x, r, mode == PE_NORM_UNIT ? r : vf_load(w));
}
/* A row's own weights (a per-token norm: wstep, each head its row of
 * them) in even/odd order, the 2*VL from element e of w: one unit's. */
PE_AI void neo_wrow(const float *w, int32_t e, vf *we, vf *wo) { cs_eo(w + e, we, wo); }
PE_AI void neo_rows(int sd, int dd, int style, int mode, const char *src, int64_t sstep, char *dst,
                    int64_t dstep, const float *c, const float *s, int32_t n, int32_t dist,
                    const float *rs, int64_t rstep, const float *w, int64_t wstep,
                    int64_t count, int64_t pf, int64_t pfe) {
  /* NeoX: cos, sin, x's weights, y's (n floats each); GPT-J: the weights
   * of the 2n channels (cos/sin are read as they are). Weights of each
   * row's own (wstep, a per-token norm) are put in order row by row, as
   * the row's units are normed: each is read once. */
  const int wrow = mode != PE_NORM_UNIT && wstep != 0;
  _Alignas(32) float b[2 * NEO_MAX];
  float *bc = b, *bs = b + n, *bwx = b + 2 * n, *bwy = b + 3 * n;
  if (style == PE_ROPE_NEOX) {
    for (int32_t j = 0; j < n; j += 2 * VL) {
      neo_split(c + j, bc + j);
      neo_split(s + j, bs + j);
      if (mode != PE_NORM_UNIT && !wrow)
        neo_split(w + j, bwx + j), neo_split(w + dist + j, bwy + j);
    }
  } else if (mode != PE_NORM_UNIT && !wrow) {
    for (int32_t e = 0; e < 2 * n; e += 2 * VL) neo_split(w + e, b + e);
  }
  for (; count > 0; count--, src += sstep, dst += dstep, rs += rstep, w = wrow ? w + wstep : w) {
    if (pf) nprefetch(src, pf, pfe, sd);
    const vf rv = vf_set1(*rs);
    if (style == PE_ROPE_NEOX) {
      for (int32_t j = 0; j < n; j += 2 * VL) {
        vf ex, ox, ey, oy, xe, xo, ye, yo;
        bf16_ld_eo(src + 2 * j, 2 * VL, &ex, &ox);
        bf16_ld_eo(src + 2 * (dist + j), 2 * VL, &ey, &oy);
        if (wrow) {
          vf wxe, wxo, wye, wyo;
          neo_wrow(w, j, &wxe, &wxo);
          neo_wrow(w, dist + j, &wye, &wyo);
          ex = nnorm(mode, ex, rv, wxe), ox = nnorm(mode, ox, rv, wxo);
          ey = nnorm(mode, ey, rv, wye), oy = nnorm(mode, oy, rv, wyo);
        } else {
          ex = neo_norm(mode, ex, rv, bwx + j), ox = neo_norm(mode, ox, rv, bwx + j + VL);
          ey = neo_norm(mode, ey, rv, bwy + j), oy = neo_norm(mode, oy, rv, bwy + j + VL);
        }
        rotate_fast(ex, ey, vf_load(bc + j), vf_load(bs + j), &xe, &ye);
        rotate_fast(ox, oy, vf_load(bc + j + VL), vf_load(bs + j + VL), &xo, &yo);
        if (__builtin_expect(vf_any_nan4(xe, xo, ye, yo), 0)) {
          nstep(sd, dd, style, mode, src, dst, j, VL, dist, rv, c, s, w);
          nstep(sd, dd, style, mode, src, dst, j + VL, VL, dist, rv, c, s, w);
          continue;
        }
        bf16_st_eo_fast(dst + 2 * j, 2 * VL, xe, xo);
        bf16_st_eo_fast(dst + 2 * (dist + j), 2 * VL, ye, yo);
      }
    } else {
      for (int32_t e = 0; e < 2 * n; e += 2 * VL) {
        vf x, y, xn, yn;
        bf16_ld_eo(src + 2 * e, 2 * VL, &x, &y);
        if (wrow) {
          vf wx, wy;
          neo_wrow(w, e, &wx, &wy);
          x = nnorm(mode, x, rv, wx), y = nnorm(mode, y, rv, wy);
        } else {
          x = neo_norm(mode, x, rv, b + e), y = neo_norm(mode, y, rv, b + e + VL);
        }
        rotate_fast(x, y, vf_load(c + e / 2), vf_load(s + e / 2), &xn, &yn);
        if (__builtin_expect(vf_any_nan2(xn, yn), 0)) {
          nstep(sd, dd, style, mode, src, dst, e / 2, VL, dist, rv, c, s, w);
          continue;
        }
        bf16_st_eo_fast(dst + 2 * e, 2 * VL, xn, yn);
      }
    }
  }
}
#endif

/* m lanes of weights at w (zeros for UNIT: not read). */
PE_AI vf nw_ld(int mode, const float *w, int32_t m) {
  return mode == PE_NORM_UNIT ? vf_set1(0.0f) : vf_loadn(w, m);
}
/* A normed row without rotation (mode not OFF): n elements src -> dst, in
 * place when dst == src (each vector is loaded before it is stored). */
PE_AI void nrow_gen(int sd, int dd, const void *src, void *dst, int64_t n, float r,
                    const float *w, int mode) {
  const char *in = src;
  char *out = dst;
  const int64_t ses = pe__esize(sd), des = pe__esize(dd);
  const vf rv = vf_set1(r);
  for (int64_t j = 0; j < n; j += VL) {
    int32_t m = n - j >= VL ? VL : (int32_t)(n - j);
    vf y = nnorm(mode, vld(sd, PE_AT(in, j, ses), m), rv, nw_ld(mode, wat(mode, w, j), m));
    vst2(dd, PE_AT(out, j, des), m, y, PE_AT(out, j, des), 0, y);
  }
}
