/* store_template.h - the fused "rotate k and write it into the KV cache"
 * rows and the dtype conversion, written once for the vector ISAs (after
 * rope_template.h, whose steps they use). "Apply, then convert", computed
 * once: load the source dtype, widen exactly, rotate as isa.h says, round
 * once to the destination dtype. Only the pairs are written; the engine
 * converts any pass-through channels with `convert`. */

/* One row: src (dtype sd) -> dst (dtype dd). A cache row is written, not
 * updated: with VEC_WHOLE_LINES, NeoX takes 2*VL pairs a step and GPT-J
 * stores each full step as 2*VL contiguous elements, so every 64-byte line
 * is covered by whole stores and the CPU can skip reading it first (two
 * masked halves would each need the read). */
PE_AI void store_row(int sd, int dd, int style, const void *src, void *dst, const float *c,
                     const float *s, int32_t n, int32_t dist) {
  const char *in = src;
  char *out = dst;
  const int64_t ses = pe__esize(sd), des = pe__esize(dd);
  int32_t j = 0;
  if (style == PE_ROPE_GPTJ) {
    for (; j + VL <= n; j += VL)
      gptj_step(sd, dd, in + 2 * j * ses, out + 2 * j * des, c + j, s + j, VL, 1);
    if (j < n) gptj_step(sd, dd, in + 2 * j * ses, out + 2 * j * des, c + j, s + j, n - j, 0);
    return;
  }
  const char *iy = in + dist * ses;
  char *oy = out + dist * des;
#if VEC_WHOLE_LINES
  for (; j + 2 * VL <= n; j += 2 * VL) {
    vf xa, ya, xb, yb;
    rotate(vld(sd, PE_AT(in, j, ses), VL), vld(sd, PE_AT(iy, j, ses), VL), vf_load(c + j),
           vf_load(s + j), &xa, &ya);
    rotate(vld(sd, PE_AT(in, j + VL, ses), VL), vld(sd, PE_AT(iy, j + VL, ses), VL),
           vf_load(c + j + VL), vf_load(s + j + VL), &xb, &yb);
    vstw(dd, PE_AT(out, j, des), xa, xb);
    vstw(dd, PE_AT(oy, j, des), ya, yb);
  }
#endif
  for (; j + VL <= n; j += VL)
    neox_step(sd, dd, PE_AT(in, j, ses), PE_AT(iy, j, ses), PE_AT(out, j, des), PE_AT(oy, j, des),
              c + j, s + j, VL);
  if (j < n)
    neox_step(sd, dd, PE_AT(in, j, ses), PE_AT(iy, j, ses), PE_AT(out, j, des), PE_AT(oy, j, des),
              c + j, s + j, n - j);
}

#if defined(VEC_EO_PREP)
/* NeoX bf16 rows in even/odd order (VEC_EO_PREP) with their token's cos/sin
 * deinterleaved once into a buffer for all its heads: where token_rows_eo
 * keeps them in registers, a row here costs 2 loads of them per 2*VL pairs
 * instead of cs_eo's 2 loads and 4 shuffles. Against bf16_pair's natural
 * order: AVX2, AMD EPYC Zen 3, 128-channel rows in L1, 76 -> 59 cycles per
 * [B,T,H,D] row in place, 71 -> 60 per row written to a cache. EO_CH pairs
 * a piece (head_dim 256 in one). */
enum { EO_CH = 128 }; /* a multiple of every 2*VL */
/* The m pairs (a multiple of 2*VL) of one row from src (x at src, y dist
 * elements on) to dst, 2 bytes an element, with the prepared cos/sin ce, se
 * (eo_token) of the pairs at c, s (for a chunk with a NaN: neox_eo_fast).
 * In place when dst == src: each chunk is loaded before it is stored. */
PE_AI void eo_row(const char *src, char *dst, int32_t m, int32_t dist, const float *ce,
                  const float *se, const float *c, const float *s) {
  for (int32_t j = 0; j < m; j += 2 * VL) {
    const char *sx = src + 2 * j, *sy = src + 2 * (j + dist);
    char *dx = dst + 2 * j, *dy = dst + 2 * (j + dist);
    vf ex, ox, ey, oy;
    bf16_ld_eo(sx, 2 * VL, &ex, &ox);
    bf16_ld_eo(sy, 2 * VL, &ey, &oy);
    neox_eo_fast(sx, sy, dx, dy, ex, ox, ey, oy, vf_load(ce + j), vf_load(ce + j + VL),
                 vf_load(se + j), vf_load(se + j + VL), c + j, s + j);
  }
}
/* The cos/sin of pairs [j0, j0 + m) (m whole chunks of 2*VL) in even/odd
 * order into ce, se (m floats each). */
PE_AI void eo_prepare(const float *c, const float *s, int32_t m, float *ce, float *se) {
  for (int32_t j = 0; j < m; j += 2 * VL) {
    vf e, o;
    cs_eo(c + j, &e, &o);
    vf_store(ce + j, e);
    vf_store(ce + j + VL, o);
    cs_eo(s + j, &e, &o);
    vf_store(se + j, e);
    vf_store(se + j + VL, o);
  }
}
/* One piece of k pairs (m of them in whole chunks, prepared in ce, se; c, s
 * the piece's own cos/sin) of n_heads rows, src -> dst as eo_token says;
 * each row's rb bytes ahead bytes on prefetched first when ahead is not 0. */
PE_AI void eo_heads(int sd, int dd, int inplace, const char *src, int64_t shs, char *dst,
                    int64_t dhs, int64_t n_heads, const float *ce, const float *se,
                    const float *c, const float *s, int32_t k, int32_t m, int32_t dist,
                    int64_t ahead, int64_t rb) {
  for (int64_t h = 0; h < n_heads; h++) {
    const char *r = src + h * shs;
    char *w = dst + h * dhs;
    if (ahead) prefetch_lines(r + ahead, rb);
    eo_row(r, w, m, dist, ce, se, c, s);
    if (m < k) { /* the pairs past the chunks (the last piece only) */
      if (inplace)
        rope_row(dd, PE_ROPE_NEOX, w + 2 * m, c + m, s + m, k - m, dist);
      else
        store_row(sd, dd, PE_ROPE_NEOX, r + 2 * m, w + 2 * m, c + m, s + m, k - m, dist);
    }
  }
}
/* The NeoX rows of one token's n_heads heads, src (dtype sd, head h at src +
 * h*shs bytes) to dst (dtype dd, dst + h*dhs), EO_PAIR(sd, dd): in place
 * (rope_row) when inplace (a constant; dst == src), else written as
 * store_row writes them. Per piece of EO_CH pairs its whole chunks of 2*VL
 * in the even/odd order, then the pairs past them as rope_row / store_row. */
PE_AI void eo_token(int sd, int dd, int inplace, const char *src, int64_t shs, char *dst,
                    int64_t dhs, int64_t n_heads, const float *c, const float *s, int32_t n,
                    int32_t dist, int64_t ahead) {
  _Alignas(32) float ce[EO_CH], se[EO_CH];
  const int64_t rb = row_span(PE_ROPE_NEOX, n, dist) * pe__esize(sd);
  for (int32_t j0 = 0; j0 < n; j0 += EO_CH) {
    const int32_t k = n - j0 < EO_CH ? n - j0 : EO_CH; /* the piece's pairs */
    const int32_t m = k / (2 * VL) * (2 * VL);         /* ... in whole chunks */
    eo_prepare(c + j0, s + j0, m, ce, se);
    eo_heads(sd, dd, inplace, src + 2 * j0, shs, dst + 2 * j0, dhs, n_heads, ce, se, c + j0,
             s + j0, k, m, dist, j0 ? 0 : ahead, rb);
  }
}
/* The rows in place of a block's tokens in streams (pe_rope_block.streams
 * > 1, as isa_template.h's rows_streams walks them: a row of each run's
 * token in turn), bf16 NeoX rows in even/odd order of n <= EO_CH pairs,
 * each token's cos/sin prepared once for all its rows, as eo_token does:
 * token t's head h at base + t*ts + h*hs (bytes); at most EO_STREAMS runs. */
enum { EO_STREAMS = 4 };
PE_AI void eo_streams(int dt, const pe_rope_block *b, char *base, int64_t hs, int64_t ts) {
  _Alignas(32) float ce[EO_STREAMS][EO_CH], se[EO_STREAMS][EO_CH];
  const int64_t nt = b->n_tokens, nh = b->n_heads;
  const int64_t S = b->streams < EO_STREAMS ? b->streams : EO_STREAMS, run = (nt + S - 1) / S;
  const int32_t n = b->n_pairs, m = n / (2 * VL) * (2 * VL), dist = b->pair_dist;
  for (int64_t k = 0; k < run; k++) {
    for (int64_t i = 0, t = k; i < S && t < nt; i++, t += run)
      eo_prepare(b->cos[t], b->sin[t], m, ce[i], se[i]);
    for (int64_t h = 0; h < nh; h++)
      for (int64_t i = 0, t = k; i < S && t < nt; i++, t += run) {
        char *r = base + t * ts + h * hs;
        eo_heads(dt, dt, 1, r, 0, r, 0, 1, ce[i], se[i], b->cos[t], b->sin[t], n, m, dist, 0, 0);
      }
  }
}
#endif

#if defined(VEC_GPTJ_IL)
/* GPT-J rows of IL_PAIR(sd, dd) (the pairs as they lie, rope_template.h's
 * il_rotate) with their token's cos/sin duplicated once into a buffer for
 * all its heads: per VL pairs 4 loads of them instead of il_cs's 4
 * broadcast loads and 4 shuffles (AVX2, AMD EPYC Zen 3, f16 rows in L1 in
 * a standalone loop: 55 -> 38 cycles per 128-channel row). IL_CH pairs a
 * piece; the pairs past its whole steps as rope_row / store_row (inplace:
 * dst == src, sd == dd). */
enum { IL_CH = 128 }; /* a multiple of every VL */
PE_AI void il_token(int sd, int dd, int inplace, const char *src, int64_t shs, char *dst,
                    int64_t dhs, int64_t n_heads, const float *c, const float *s, int32_t n,
                    int64_t ahead) {
  _Alignas(32) float cd[2 * IL_CH], sdp[2 * IL_CH];
  const int64_t ses = pe__esize(sd), des = pe__esize(dd);
  for (int32_t j0 = 0; j0 < n; j0 += IL_CH) {
    const int32_t k = n - j0 < IL_CH ? n - j0 : IL_CH; /* the piece's pairs */
    const int32_t m = k / VL * VL;                     /* ... in whole steps */
    for (int32_t j = 0; j < m; j += VL / 2) {
      vf_store(cd + 2 * j, vf_dup4(c + j0 + j));
      vf_store(sdp + 2 * j, vf_dup4(s + j0 + j));
    }
    for (int64_t h = 0; h < n_heads; h++) {
      const char *r = src + h * shs + 2 * j0 * ses;
      char *w = dst + h * dhs + 2 * j0 * des;
      if (ahead && !j0) prefetch_lines(r + ahead, row_span(PE_ROPE_GPTJ, n, 0) * ses);
      for (int32_t j = 0; j < m; j += VL) {
        vf v0, v1;
        il_ld(sd, r + 2 * j * ses, VL, &v0, &v1);
        il_st(dd, w + 2 * j * des, VL, 1, v0, v1, vf_load(cd + 2 * j), vf_load(cd + 2 * j + VL),
              vf_load(sdp + 2 * j), vf_load(sdp + 2 * j + VL));
      }
      if (m < k) { /* the pairs past the steps (the last piece only) */
        if (inplace)
          rope_row(dd, PE_ROPE_GPTJ, w + 2 * m * des, c + j0 + m, s + j0 + m, k - m, 0);
        else
          store_row(sd, dd, PE_ROPE_GPTJ, r + 2 * m * ses, w + 2 * m * des, c + j0 + m,
                    s + j0 + m, k - m, 0);
      }
    }
  }
}
#endif

#if defined(VEC_EO_PREP) || defined(VEC_GPTJ_IL)
/* The rows of one token's heads at a time (isa_template.h's walks of heads
 * inner and of a decode step's rows nearer than 4 KiB, and the cache
 * write), for the shapes that prepare cos/sin once per token: NeoX bf16 in
 * even/odd order (eo_token), GPT-J of IL_PAIR (il_token); GPT-J bf16 in
 * even/odd order needs nothing prepared and goes row by row. */
#define VEC_TOKEN_HEADS 1
/* Whether a block in streams of rows of dtype dt in place goes by
 * eo_streams (each token's cos/sin prepared once; else row by row). */
#if defined(VEC_EO_PREP)
PE_AI int token_streams_take(int dt, int style, int32_t n) {
  return style == PE_ROPE_NEOX && EO_PAIR(dt, dt) && n >= 2 * VL && n <= EO_CH;
}
#endif
PE_AI int token_heads_take(int sd, int dd, int style, int32_t n) {
#if defined(VEC_EO_PREP)
  if (EO_PAIR(sd, dd)) return n >= 2 * VL;
#endif
#if defined(VEC_GPTJ_IL)
  if (style == PE_ROPE_GPTJ && IL_PAIR(sd, dd)) return n >= VL;
#endif
  (void)sd, (void)dd, (void)style, (void)n;
  return 0;
}
/* Rows src -> dst of n_heads heads (head h at src + h*shs, dst + h*dhs
 * bytes); in place when inplace (a constant; dst == src, sd == dd). Each
 * source row's lines ahead bytes on prefetched first unless ahead is 0
 * (isa_template.h's stream_ahead). */
PE_AI void token_heads_(int sd, int dd, int style, int inplace, const char *src, int64_t shs,
                        char *dst, int64_t dhs, int64_t n_heads, const float *c, const float *s,
                        int32_t n, int32_t dist, int64_t ahead) {
#if defined(VEC_GPTJ_IL)
  if (style == PE_ROPE_GPTJ && IL_PAIR(sd, dd)) {
    il_token(sd, dd, inplace, src, shs, dst, dhs, n_heads, c, s, n, ahead);
    return;
  }
#endif
  if (style == PE_ROPE_GPTJ) {
    for (int64_t h = 0; h < n_heads; h++) {
      if (ahead) prefetch_lines(src + h * shs + ahead, row_span(PE_ROPE_GPTJ, n, 0) * pe__esize(sd));
      if (inplace)
        rope_row(dd, style, dst + h * dhs, c, s, n, dist);
      else
        store_row(sd, dd, style, src + h * shs, dst + h * dhs, c, s, n, dist);
    }
    return;
  }
#if defined(VEC_EO_PREP)
  eo_token(sd, dd, inplace, src, shs, dst, dhs, n_heads, c, s, n, dist, ahead);
#endif
}
/* token_heads_ in two copies: the one without prefetches tests nothing per
 * row (the test cost AVX2's bf16 rows in L2 1.5 %). */
PE_AI void token_heads(int sd, int dd, int style, int inplace, const char *src, int64_t shs,
                       char *dst, int64_t dhs, int64_t n_heads, const float *c, const float *s,
                       int32_t n, int32_t dist, int64_t ahead) {
  if (ahead)
    token_heads_(sd, dd, style, inplace, src, shs, dst, dhs, n_heads, c, s, n, dist, ahead);
  else
    token_heads_(sd, dd, style, inplace, src, shs, dst, dhs, n_heads, c, s, n, dist, 0);
}
#endif

/* VL elements of dtype dt widened as convert.h does: exactly, an f16
 * signaling NaN kept signaling (unlike the rotation's load, vld). */
PE_AI vf vld_exact(int dt, const void *p) { return dt == PE_F16 ? vld_f16_exact(p) : vld(dt, p, VL); }

/* sd != dd: VL elements a step through the exact loads and the stores, the
 * tail element by element (enc_common.h, the same semantics). */
PE_AI void convert_row(int sd, int dd, const void *src, void *dst, int64_t n) {
  const char *in = src;
  char *out = dst;
  const int64_t ses = pe__esize(sd), des = pe__esize(dd);
  int64_t j = 0;
  for (; j + VL <= n; j += VL) vst(dd, PE_AT(out, j, des), vld_exact(sd, PE_AT(in, j, ses)));
#if defined(PE_DT)
  pe__enc_convert(PE_DT(sd), PE_AT(in, j, ses), PE_DT(dd), PE_AT(out, j, des), n - j);
#else
  pe__enc_convert((pe_dtype)sd, PE_AT(in, j, ses), (pe_dtype)dd, PE_AT(out, j, des), n - j);
#endif
}
