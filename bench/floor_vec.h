/* floor_vec.h - the floor kernels (floor.h) written once for the vector
 * ISAs. The includer (floor_avx2.c, floor_avx512.c) defines VL (float lanes),
 * vf, FLOOR_FN (the entry point's name) and these primitives, each the
 * shortest sequence its ISA has for the operation (docs/compute-floor.md
 * counts them):
 *   vf   f_ld(dt, p)            VL elements of dtype dt widened to float32
 *   void f_st(dt, p, v)         VL floats rounded to dt (nearest even) and stored
 *   void f_st2(dt, p, a, b)     2*VL floats, a then b (narrowed together)
 *   vf   f_ldf(p), f_set1(x), f_mul, f_add, f_div
 *   vf   f_fmadd(a, b, c)       a*b + c       f_fmsub(a, b, c)  a*b - c
 *   vf   f_fmaddsub(a, b, c)    a*b - c in even lanes, a*b + c in odd lanes
 *   vf   f_swap(v)              lanes 2i and 2i+1 exchanged
 *   vf   f_dup(p)               p[0], p[0], p[1], p[1], ... (VL/2 floats)
 *   float f_hsum(v), f_hmax(v)
 *   vf   f_absmax(m, v)         max(|v|, m) per lane (a NaN lane of v leaves m)
 *   void f_fp8_st4(out, y0..y3) 4*VL e4m3 codes of y (already scaled)
 *   void f_fp8_st1(out, y)      VL codes
 *   void f_q8_block(out, v)     one Q8_0 block (34 bytes) of v[0 .. 32/VL)
 *   fq8s f_q8_scan4(v)          the scales of four blocks of v[0 .. 128/VL):
 *                               their per-block steps (amax, d, 1/d, f16 of d)
 *                               done together
 *   void f_q8_emit4(out, v, sc) the four blocks (d and qs) with those scales
 *   void f_q8_ld(in, v)         one Q8_0 block dequantized into v[0 .. 32/VL)
 *   void f_copy(dst, src, n)    n bytes (a multiple of the vector size)
 * and may define (F_BF16_ST2_G, F_ST_EO_G; else stores are made one by one):
 *   void f_bf16_st2_g(n, p, v)  n pairs v[2i], v[2i + 1] to bf16 at p, p + 2*VL, ...
 *   void f_st_eo_g(n, p, e, o)  f_st_eo(p[i], e[i], o[i]) for i < n
 * for narrowing whose exactness test can be taken once for a group (the
 * +-0 test after AVX512-BF16's rounding: floor_avx512.c).
 * Every helper here is inlined with constant dtype, style, output and norm
 * arguments (the entry point's switch), so each stage's loop is the straight
 * sequence of those primitives. */

#define FA static inline __attribute__((always_inline))

enum { O_F32 = PE_F32, O_F16 = PE_F16, O_BF16 = PE_BF16, O_FP8 = 3, O_Q8 = 4, O_DS = 5 };
enum { QV = 32 / VL }; /* vectors per Q8_0 block */

FA int64_t esz(int dt) { return dt == PE_F32 ? 4 : 2; }

/* A row's element at channel e (dtype dt), or a Q8_0 row's block. */
#define AT(p, e, dt) ((p) + (int64_t)(e) * esz(dt))

/* x normed by scale r and the weights at w (norm: floor.h's FN_*): (x * r)
 * * w, fma(x * r, w, x * r) (a unit offset) or x * r; x itself (FN_NONE). */
FA vf nrm(int norm, vf x, vf r, const float *w) {
  if (norm == FN_NONE) return x;
  const vf xr = f_mul(x, r);
  return norm == FN_MUL ? f_mul(xr, f_ldf(w)) : norm == FN_OFFSET ? f_fmadd(xr, f_ldf(w), xr) : xr;
}

/* x (optionally normed: nrm) of VL channels at e. */
FA vf ld_x(int dt, const char *row, int e, int norm, vf r, const float *w) {
  return nrm(norm, f_ld(dt, AT(row, e, dt)), r, w + e);
}

/* n pairs v[2i], v[2i + 1] narrowed to dt at p, p + 2*VL elements, ... */
FA void f_st2_g(int dt, int n, char *p, const vf *v) {
#if defined(F_BF16_ST2_G)
  if (dt == PE_BF16) {
    f_bf16_st2_g(n, p, v);
    return;
  }
#endif
  for (int i = 0; i < n; i++) f_st2(dt, p + 2 * i * VL * esz(dt), v[2 * i], v[2 * i + 1]);
}

/* Outputs of k vectors at channels e, e + VL, ...: narrowed to the dtype
 * out, or fp8 codes (scaled by y = x * inv or x / scale first). */
FA vf fp8_y(vf x, vf vs, int mul) { return mul ? f_mul(x, vs) : f_div(x, vs); }

FA void emit(int out, char *dst, int e, const vf *o, int k, vf vs, int mul) {
  if (out == O_FP8) {
    uint8_t *p = (uint8_t *)dst + e;
    int i = 0;
    for (; i + 4 <= k; i += 4)
      f_fp8_st4(p + i * VL, fp8_y(o[i], vs, mul), fp8_y(o[i + 1], vs, mul),
                fp8_y(o[i + 2], vs, mul), fp8_y(o[i + 3], vs, mul));
    for (; i < k; i++) f_fp8_st1(p + i * VL, fp8_y(o[i], vs, mul));
  } else {
    const int i = k - k % 2;
    if (i) f_st2_g(out, k / 2, AT(dst, e, out), o);
    if (i < k) f_st(out, AT(dst, e + i * VL, out), o[i]);
  }
}

/* Output vectors per step: two for float32, four for the narrower ones. */
FA int group(int out) { return out == O_F32 ? 2 : 4; }

/* Q8_0 rows, software-pipelined one row ahead: the values of row r (in
 * dtype sd at src, or float32 in a scratch row) scanned for their scales
 * (whose two dependent divides are the long chain) before the qs of row
 * r - 1 are formed from that row's values, loaded again from L1. A row is
 * width / 128 groups of four blocks (floor_supported). */
#define FL_Q8_GROUPS 32 /* groups of a row, at most (width 4096) */
typedef struct q8_pipe {
  fq8s sc[2][FL_Q8_GROUPS];
  const char *src[2];
  uint8_t *dst[2];
  int64_t n; /* rows scanned */
} q8_pipe;

FA void q8_load4(int sd, const char *src, int g, vf *v) {
  for (int k = 0; k < 4 * QV; k++) v[k] = f_ld(sd, AT(src, 128 * g + k * VL, sd));
}

FA void q8_emit_row(q8_pipe *p, int slot, int sd, int width) {
  for (int g = 0; g < width / 128; g++) {
    vf v[4 * QV];
    q8_load4(sd, p->src[slot], g, v);
    f_q8_emit4(p->dst[slot] + 136 * g, v, p->sc[slot][g]);
  }
}

/* Row r: its scales, then row r - 1's blocks. */
FA void q8_push(q8_pipe *p, int sd, const char *src, uint8_t *dst, int width) {
  const int slot = (int)(p->n & 1);
  for (int g = 0; g < width / 128; g++) {
    vf v[4 * QV];
    q8_load4(sd, src, g, v);
    p->sc[slot][g] = f_q8_scan4(v);
  }
  p->src[slot] = src, p->dst[slot] = dst;
  if (p->n++) q8_emit_row(p, slot ^ 1, sd, width);
}

FA void q8_finish(q8_pipe *p, int sd, int width) {
  if (p->n) q8_emit_row(p, (int)((p->n - 1) & 1), sd, width);
}

/* The cos and sin of k vectors of pairs from pair j (NeoX) or channel j
 * (GPT-J: each duplicated to both lanes of its pair): loaded once for all
 * the heads of a token, which share the table row. */
FA void cs_chunk(int style, const float *cs, int half, int j, int k, vf *c, vf *s) {
  for (int i = 0; i < k; i++) {
    if (style == PE_ROPE_NEOX)
      c[i] = f_ldf(cs + j + i * VL), s[i] = f_ldf(cs + half + j + i * VL);
    else
      c[i] = f_dup(cs + (j + i * VL) / 2), s[i] = f_dup(cs + half + (j + i * VL) / 2);
  }
}

/* k vectors of one head's pairs with the chunk's c, s: NeoX from pair j (x
 * at channel j, y at half + j), GPT-J from channel j. */
FA void rot_chunk(int sd, int out, int style, int norm, int mul, const char *src, char *dst,
                  int half, int j, int k, const vf *c, const vf *s, const float *w, vf r, vf vs) {
  vf xo[4], yo[4];
  for (int i = 0; i < k; i++) {
    const int e = j + i * VL;
    if (style == PE_ROPE_NEOX) {
      vf x = ld_x(sd, src, e, norm, r, w), y = ld_x(sd, src, half + e, norm, r, w);
      xo[i] = f_fmsub(x, c[i], f_mul(y, s[i]));
      yo[i] = f_fmadd(y, c[i], f_mul(x, s[i]));
    } else {
      vf v = ld_x(sd, src, e, norm, r, w);
      xo[i] = f_fmaddsub(v, c[i], f_mul(f_swap(v), s[i]));
    }
  }
  emit(out, dst, j, xo, k, vs, mul);
  if (style == PE_ROPE_NEOX) emit(out, dst, half + j, yo, k, vs, mul);
}

/* bf16 to bf16 rows in even/odd order where the includer has it (FL_EO:
 * f_ld_eo gives the even and the odd elements of 2*VL, f_st_eo stores them
 * back in order), the cheapest form of the rotation without bf16
 * instructions: a pair's x and y are the lanes of two vectors in the same
 * place (GPT-J: the even and odd elements; NeoX: x's even elements and y's,
 * x's odd and y's), so no lane moves. The cos/sin and the weights are read
 * in that order (cs_eo, w_eo: prepared once, as a library prepares them
 * per token or per call). A unit is 2*VL pairs (NeoX) or channels (GPT-J). */
#if defined(FL_EO)
_Static_assert(VL == 8 || VL == 16, "cs_eo and w_eo are laid out for 8 and 16 lanes");
#define EO(sd, out) ((sd) == O_BF16 && (out) == O_BF16)
#else
#define EO(sd, out) 0
#endif
/* Whether a stage's rotated channels go in even/odd units: every unit of
 * x, y (and of their weights) starts a block of cs_eo / w_eo. */
FA int eo_fits(int style, int rot) { return rot % (style == PE_ROPE_NEOX ? 4 * VL : 2 * VL) == 0; }

#if defined(FL_EO) && !defined(F_ST_EO_G)
FA void f_st_eo_g(int n, char *const *p, const vf *e, const vf *o) {
  for (int i = 0; i < n; i++) f_st_eo(p[i], e[i], o[i]);
}
#endif
#if defined(FL_EO)
FA void cs_chunk_eo(int style, const floor_data *d, int half, int j, int k, vf *c, vf *s) {
  for (int i = 0; i < k; i++) {
    const int u = j + 2 * VL * i;
    if (style == PE_ROPE_NEOX) {
      const float *cse = d->cs_eo[FL_EO_IX(VL)];
      c[2 * i] = f_ldf(cse + u), c[2 * i + 1] = f_ldf(cse + u + VL);
      s[2 * i] = f_ldf(cse + half + u), s[2 * i + 1] = f_ldf(cse + half + u + VL);
    } else {
      c[i] = f_ldf(d->cs + u / 2), s[i] = f_ldf(d->cs + half + u / 2);
    }
  }
}
/* The even and odd elements of the unit at channel e, normed (nrm). */
FA void ld_eo_x(const char *row, int e, int norm, vf r, const float *w_eo, vf *xe, vf *xo) {
  f_ld_eo(AT(row, e, O_BF16), xe, xo);
  *xe = nrm(norm, *xe, r, w_eo + e), *xo = nrm(norm, *xo, r, w_eo + e + VL);
}
/* k units from pair (NeoX) or channel (GPT-J) j with cs_chunk_eo's c, s. */
FA void rot_chunk_eo(int style, int norm, const char *src, char *dst, int half, int j, int k,
                     const vf *c, const vf *s, const float *w_eo, vf r) {
  char *p[4]; /* k <= 2 units: at most 4 stores, made together */
  vf oe[4], oo[4];
  int n = 0;
  for (int i = 0; i < k; i++) {
    const int e = j + 2 * VL * i;
    vf xe, xo;
    ld_eo_x(src, e, norm, r, w_eo, &xe, &xo);
    if (style == PE_ROPE_NEOX) {
      vf ye, yo;
      ld_eo_x(src, half + e, norm, r, w_eo, &ye, &yo);
      const vf ce = c[2 * i], co = c[2 * i + 1], se = s[2 * i], so = s[2 * i + 1];
      p[n] = AT(dst, e, O_BF16), oe[n] = f_fmsub(xe, ce, f_mul(ye, se));
      oo[n++] = f_fmsub(xo, co, f_mul(yo, so));
      p[n] = AT(dst, half + e, O_BF16), oe[n] = f_fmadd(ye, ce, f_mul(xe, se));
      oo[n++] = f_fmadd(yo, co, f_mul(xo, so));
    } else { /* xe: the pairs' x, xo: their y */
      p[n] = AT(dst, e, O_BF16), oe[n] = f_fmsub(xe, c[i], f_mul(xo, s[i]));
      oo[n++] = f_fmadd(xo, c[i], f_mul(xe, s[i]));
    }
  }
  f_st_eo_g(n, p, oe, oo);
}
#endif

/* The float32 RMSNorm scale of a row: 1 / sqrt(sum(x^2) / width + eps),
 * in na (a constant, 2 or 4) accumulators: each is a chain of dependent
 * FMAs, and a long row's sum waits on their latency unless enough of them
 * are in flight. Two for a token's head rows of 128 channels (the rows'
 * chains overlap each other's), four for an MLA latent of 512 channels
 * (one row a token). */
FA float norm_scale(int sd, const char *src, int width, float eps, int na) {
  vf a[4] = {f_set1(0.0f), f_set1(0.0f), f_set1(0.0f), f_set1(0.0f)};
  int e = 0;
  for (; e + na * VL <= width; e += na * VL)
    for (int k = 0; k < na; k++) {
      vf x = f_ld(sd, AT(src, e + k * VL, sd));
      a[k] = f_fmadd(x, x, a[k]);
    }
  for (; e < width; e += VL) { /* width a multiple of VL only */
    vf x = f_ld(sd, AT(src, e, sd));
    a[0] = f_fmadd(x, x, a[0]);
  }
  vf t = na == 4 ? f_add(f_add(a[0], a[1]), f_add(a[2], a[3])) : f_add(a[0], a[1]);
  return 1.0f / sqrtf(f_hsum(t) / (float)width + eps);
}

/* The float32 RMSNorm scale of a token's hn rows taken as one (OLMo 2's
 * per-token q_norm / k_norm over heads * width channels): each row's
 * squares into the same two accumulators, one square root for the token. */
FA float token_scale(int sd, const char *const *rows, int hn, int width, float eps) {
  vf a[2] = {f_set1(0.0f), f_set1(0.0f)};
  for (int h = 0; h < hn; h++) {
    int e = 0;
    for (; e + 2 * VL <= width; e += 2 * VL)
      for (int k = 0; k < 2; k++) {
        vf x = f_ld(sd, AT(rows[h], e + k * VL, sd));
        a[k] = f_fmadd(x, x, a[k]);
      }
    for (; e < width; e += VL) { /* width a multiple of VL only */
      vf x = f_ld(sd, AT(rows[h], e, sd));
      a[0] = f_fmadd(x, x, a[0]);
    }
  }
  return 1.0f / sqrtf(f_hsum(f_add(a[0], a[1])) / ((float)hn * (float)width) + eps);
}

#define FL_HEADS 256 /* heads of a token sharing one load of a cos/sin chunk, at most */

/* Rows of FL_ROT / FL_NORM_ROT, cycling through the data's rows, a token's
 * heads (st->heads rows) at a time: its norms first, then each chunk of
 * group(out) vectors of pairs (then single vectors; not for Q8_0, whose
 * blocks floor_supported requires whole) with c and s loaded once for the
 * heads, then the channels past rot (normed too, or copied where the row
 * goes to another buffer). */
FA void rot_rows(const floor_stage *st, floor_data *d, int64_t rows, int sd, int out, int style,
                 int norm, int mul) {
  const vf vs = f_set1(mul ? 1.0f / d->scale : d->scale), one = f_set1(1.0f);
  const int rot = st->rot, width = st->width, half = rot / 2, g = group(out);
  const int n = style == PE_ROPE_NEOX ? half : rot;
  const int heads = st->heads < 1 ? 1 : st->heads > FL_HEADS ? FL_HEADS : st->heads;
  float rs[FL_HEADS];
  int i = 0;
  if (out == O_Q8) { /* each row rotated into a float32 scratch row, then quantized */
    vf c[4], s[4];
    q8_pipe pipe;
    pipe.n = 0;
    for (int64_t n0 = 0; n0 < rows; n0++) {
      const char *src = d->src + i * d->src_stride;
      char *x = (char *)(d->scratch + (n0 & 1) * width);
      for (int j = 0; j < n; j += 2 * VL) {
        cs_chunk(style, d->cs, half, j, 2, c, s);
        rot_chunk(sd, O_F32, style, norm, mul, src, x, half, j, 2, c, s, d->w, one, vs);
      }
      q8_push(&pipe, PE_F32, x, (uint8_t *)d->dst + i * d->dst_stride, width);
      if (++i == d->n_rows) i = 0;
    }
    q8_finish(&pipe, PE_F32, width);
    return;
  }
  /* The token's rows, found once per token: a modulo per row and chunk
   * (two integer divides) cost more than the rotation of a short row. */
  const char *rp[FL_HEADS];
  char *wp[FL_HEADS];
#define ROW(h) rp[h]
#define DST(h) wp[h]
  /* the weights of head h's row: its own under a per-token norm */
  const int64_t wstep = st->norm_token ? width : 0;
#define WT(h) (d->w + (h) * wstep)
#define WEO(h) (d->w_eo[FL_EO_IX(VL)] + (h) * wstep)
  for (int64_t n0 = 0; n0 < rows; n0 += heads) {
    const int hn = rows - n0 < heads ? (int)(rows - n0) : heads;
    for (int h = 0; h < hn; h++) {
      rp[h] = d->src + i * d->src_stride;
      wp[h] = st->inplace ? (char *)rp[h] : d->dst + i * d->dst_stride;
      if (++i == d->n_rows) i = 0;
    }
    if (norm && st->norm_token) {
      const float r = token_scale(sd, rp, hn, width, d->eps);
      for (int h = 0; h < hn; h++) rs[h] = r;
    } else if (norm) {
      for (int h = 0; h < hn; h++) rs[h] = norm_scale(sd, ROW(h), width, d->eps, 2);
    }
    vf c[4], s[4];
    int j = 0;
#if defined(FL_EO)
    if (EO(sd, out) && eo_fits(style, rot)) {
      for (; j + 4 * VL <= n; j += 4 * VL) {
        cs_chunk_eo(style, d, half, j, 2, c, s);
        for (int h = 0; h < hn; h++)
          rot_chunk_eo(style, norm, ROW(h), DST(h), half, j, 2, c, s, WEO(h),
                       norm ? f_set1(rs[h]) : one);
      }
      for (; j + 2 * VL <= n; j += 2 * VL) {
        cs_chunk_eo(style, d, half, j, 1, c, s);
        for (int h = 0; h < hn; h++)
          rot_chunk_eo(style, norm, ROW(h), DST(h), half, j, 1, c, s, WEO(h),
                       norm ? f_set1(rs[h]) : one);
      }
    }
#endif
    for (; j + g * VL <= n; j += g * VL) {
      cs_chunk(style, d->cs, half, j, g, c, s);
      for (int h = 0; h < hn; h++)
        rot_chunk(sd, out, style, norm, mul, ROW(h), DST(h), half, j, g, c, s, WT(h),
                  norm ? f_set1(rs[h]) : one, vs);
    }
    for (; j < n; j += VL) {
      cs_chunk(style, d->cs, half, j, 1, c, s);
      for (int h = 0; h < hn; h++)
        rot_chunk(sd, out, style, norm, mul, ROW(h), DST(h), half, j, 1, c, s, WT(h),
                  norm ? f_set1(rs[h]) : one, vs);
    }
    for (int h = 0; h < hn && rot < width; h++) {
      if (norm) {
        int e = rot;
#if defined(FL_EO)
        if (EO(sd, out) && rot % (2 * VL) == 0)
          for (; e + 2 * VL <= width; e += 2 * VL) {
            vf xe, xo;
            ld_eo_x(ROW(h), e, norm, f_set1(rs[h]), WEO(h), &xe, &xo);
            f_st_eo(AT(DST(h), e, out), xe, xo);
          }
#endif
        for (; e < width; e += VL)
          f_st(out, AT(DST(h), e, out), ld_x(sd, ROW(h), e, norm, f_set1(rs[h]), WT(h)));
      }
      else if (!st->inplace)
        f_copy(AT(DST(h), rot, out), AT(ROW(h), rot, sd), (width - rot) * esz(sd));
    }
  }
#undef ROW
#undef DST
#undef WT
#undef WEO
}

/* FL_MLA: rows of an MLA step's kv rows (width channels: lat = width - rot
 * latent, then rot rope channels) into their cache rows: the latent's
 * float32 RMSNorm (norm_scale, then (x * r) * w per channel) converted to
 * the dtype out or coded as fp8 (O_FP8); the rope channels rotated (a cos/
 * sin chunk per token: each row is a token of its own) into the same
 * format. O_DS (vLLM's fp8_ds_mla): per tile of 128 latent channels the
 * normed values go through a float32 scratch row while their amax is
 * taken, the tile's scale max(amax / 448, FLT_MIN) is one scalar divide,
 * the codes x / scale (vdivps: the library divides), the scale's 4 bytes
 * after the latent's codes, then the rope channels as bf16. */
FA void mla_rows(const floor_stage *st, floor_data *d, int64_t rows, int sd, int out, int style,
                 int mul) {
  const int rot = st->rot, lat = st->width - rot, half = rot / 2;
  const int n = style == PE_ROPE_NEOX ? half : rot;
  const int lout = out == O_DS ? O_FP8 : out;            /* the latent's codes */
  const int rout = out == O_DS ? O_BF16 : out;           /* the rope channels' */
  const int g = group(lout), gr = group(rout);
  const int64_t lb = lout == O_FP8 ? 1 : esz(lout);      /* bytes of a latent output */
  const int64_t ro = out == O_DS ? lat + 4 * (lat / 128) : lat * lb; /* rope's first byte */
  const vf vs = f_set1(mul ? 1.0f / d->scale : d->scale), one = f_set1(1.0f);
  int i = 0;
  for (int64_t n0 = 0; n0 < rows; n0++) {
    const char *src = d->src + i * d->src_stride;
    char *dst = d->dst + i * d->dst_stride;
    const vf r = f_set1(norm_scale(sd, src, lat, d->eps, 4));
    if (out == O_DS) {
      float *x = d->scratch;
      for (int t = 0; t < lat; t += 128) {
        vf m = f_set1(0.0f);
        for (int e = t; e < t + 128; e += VL) {
          vf v = ld_x(sd, src, e, FN_MUL, r, d->w);
          f_st(PE_F32, x + e, v);
          m = f_absmax(m, v);
        }
        const float scale = fmaxf(f_hmax(m) / 448.0f, FLT_MIN);
        const vf vsc = f_set1(scale);
        for (int e = t; e < t + 128; e += 4 * VL)
          f_fp8_st4((uint8_t *)dst + e, f_div(f_ldf(x + e), vsc),
                    f_div(f_ldf(x + e + VL), vsc), f_div(f_ldf(x + e + 2 * VL), vsc),
                    f_div(f_ldf(x + e + 3 * VL), vsc));
        memcpy(dst + lat + 4 * (t / 128), &scale, 4);
      }
    } else {
      int e = 0;
      for (; e + g * VL <= lat; e += g * VL) {
        vf o[4];
        for (int k = 0; k < g; k++) o[k] = ld_x(sd, src, e + k * VL, FN_MUL, r, d->w);
        emit(lout, dst, e, o, g, vs, mul);
      }
      for (; e < lat; e += VL) {
        vf o = ld_x(sd, src, e, FN_MUL, r, d->w);
        emit(lout, dst, e, &o, 1, vs, mul);
      }
    }
    const char *rs = AT(src, lat, sd);
    char *rd = dst + ro;
    vf c[4], s[4];
    int j = 0;
#if defined(FL_EO)
    if (EO(sd, rout) && eo_fits(style, rot))
      for (; j + 2 * VL <= n; j += 2 * VL) {
        cs_chunk_eo(style, d, half, j, 1, c, s);
        rot_chunk_eo(style, 0, rs, rd, half, j, 1, c, s, d->w_eo[FL_EO_IX(VL)], one);
      }
#endif
    for (; j + gr * VL <= n; j += gr * VL) {
      cs_chunk(style, d->cs, half, j, gr, c, s);
      rot_chunk(sd, rout, style, 0, mul, rs, rd, half, j, gr, c, s, d->w, one, vs);
    }
    for (; j < n; j += VL) {
      cs_chunk(style, d->cs, half, j, 1, c, s);
      rot_chunk(sd, rout, style, 0, mul, rs, rd, half, j, 1, c, s, d->w, one, vs);
    }
    if (++i == d->n_rows) i = 0;
  }
}

/* FL_QUANT: width channels of src quantized (v into a quantized cache). */
FA void quant_rows(const floor_stage *st, floor_data *d, int64_t rows, int sd, int out, int mul) {
  const vf vs = f_set1(mul ? 1.0f / d->scale : d->scale);
  const int g = group(out);
  q8_pipe pipe;
  pipe.n = 0;
  int i = 0;
  for (int64_t n = 0; n < rows; n++) {
    const char *src = d->src + i * d->src_stride;
    char *dst = d->dst + i * d->dst_stride;
    if (out == O_Q8) {
      q8_push(&pipe, sd, src, (uint8_t *)dst, st->width);
    } else {
      int e = 0;
      for (; e + g * VL <= st->width; e += g * VL) {
        vf o[4];
        for (int k = 0; k < g; k++) o[k] = f_ld(sd, AT(src, e + k * VL, sd));
        emit(out, dst, e, o, g, vs, mul);
      }
      for (; e < st->width; e += VL) {
        vf o = f_ld(sd, AT(src, e, sd));
        emit(out, dst, e, &o, 1, vs, mul);
      }
    }
    if (++i == d->n_rows) i = 0;
  }
  if (out == O_Q8) q8_finish(&pipe, sd, st->width);
}

/* FL_SHIFT: Q8_0 rows in place: each chunk of 32 pairs' blocks (NeoX: x's
 * block and y's; GPT-J: one block) dequantized and rotated into a float32
 * scratch row, the row then quantized again (pipelined as above). */
FA void shift_rows(const floor_stage *st, floor_data *d, int64_t rows, int style) {
  const int half = st->rot / 2, n = style == PE_ROPE_NEOX ? half : st->rot;
  q8_pipe pipe;
  pipe.n = 0;
  int i = 0;
  for (int64_t n0 = 0; n0 < rows; n0++) {
    uint8_t *row = (uint8_t *)d->src + i * d->src_stride;
    float *x = d->scratch + (n0 & 1) * st->width;
    for (int j = 0; j < n; j += 32) {
      vf c[QV], s[QV], a[QV], b[QV];
      cs_chunk(style, d->cs, half, j, QV, c, s);
      f_q8_ld(row + j / 32 * 34, a);
      if (style == PE_ROPE_NEOX) f_q8_ld(row + (half + j) / 32 * 34, b);
      for (int k = 0; k < QV; k++) {
        const int e = j + k * VL;
        if (style == PE_ROPE_NEOX) {
          f_st(PE_F32, x + e, f_fmsub(a[k], c[k], f_mul(b[k], s[k])));
          f_st(PE_F32, x + half + e, f_fmadd(b[k], c[k], f_mul(a[k], s[k])));
        } else {
          f_st(PE_F32, x + e, f_fmaddsub(a[k], c[k], f_mul(f_swap(a[k]), s[k])));
        }
      }
    }
    q8_push(&pipe, PE_F32, (const char *)x, row, st->width);
    if (++i == d->n_rows) i = 0;
  }
  q8_finish(&pipe, PE_F32, st->width);
}

#include "floor_entry.h"
