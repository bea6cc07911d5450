/* isa_template.h - the walks, the entry points and `const pe_isa
 * pe__isa_<ISA>`, written once for every ISA (libdeflate's *_template.h
 * pattern). Included once, last, by each src/kernels/<isa>.c, which first
 * defines:
 *   ISA                     the suffix token (scalar, avx2, avx512, neon)
 *   rope_row(dt, style, row, cos, sin, n, dist)           the plain pairs in place
 *   store_row(sd, dd, style, src, dst, cos, sin, n, dist) the plain pairs src -> dst
 *   nrope_row(dt, style, mode, row, cos, sin, n, dist, r, w), nstore_row(sd, dd, style,
 *     mode, src, dst, cos, sin, n, dist, r, w)   the same normed (mode a constant, not
 *     OFF): isa.h's float32 norm, then the plain rotation (scalar.c, rope_template.h)
 *   sumsq_gen(dt, src, n, rows, rs, combine, out), nscale_gen(s, count, n, eps, out),
 *   nrow_gen(sd, dd, src, dst, n, r, w, mode)   the QK-norm
 *   convert_row(sd, dd, src, dst, n)                      sd != dd
 *   amax_gen(x, n)                                        the FP8 scales' amax
 *   stream_line(dst, src)           64 bytes into a 64-byte line of dst, streamed
 *   add_row_gen(dt, ..), alibi_row_gen(dt, ..), load_row_gen(dt, ..), mask_row_gen(dt, ..)
 *   FN(rope_sincos), FN(sincos)
 * (all but the last two PE_AI, taking the dtype/style as constants), and
 * and optionally PE_BF16_W, the dtype token every kernel that writes bf16
 * (rope rows, cache-store rows, convert, norm_row, kv_dequant, add_row,
 * alibi_row) narrows with: PE_BF16 unless the TU has a rounding of its own
 * (avx512bf16.c: PE_BF16_CVT, AVX512-BF16's vcvtne2ps2bf16; the same bits).
 * The arithmetic is the TU's; this file only decides which rows go where. */

#define FN(name) PE_CAT(PE_CAT(name, _), ISA)
#ifndef PE_BF16_W
#define PE_BF16_W PE_BF16
#endif
/* The pe_dtype a dtype token stands for (PE_BF16_W may be a TU's own). */
#if defined(PE_DT)
#define PE_DT_OF(dt) PE_DT(dt)
#else
#define PE_DT_OF(dt) ((pe_dtype)(dt))
#endif

/* The elements a row of n pairs spans, from its first pair to its last
 * (GPT-J: 2n adjacent; NeoX: x's n, then y's dist on). */
PE_AI int64_t row_span(int style, int32_t n, int32_t dist) {
  return style == PE_ROPE_GPTJ ? 2 * (int64_t)n : (int64_t)dist + n;
}

/* The lines of the bytes [p, p + bytes), prefetched for reading into L1
 * (prefetch_lines) or into L2 only (prefetch_lines_l2). */
#define PREFETCH_LINES_(p, bytes, locality)                                                      \
  const uintptr_t a = (uintptr_t)(p), end = a + (uintptr_t)(bytes);                              \
  for (uintptr_t l = a & ~(uintptr_t)63; l < end; l += 64)                                       \
    __builtin_prefetch((const void *)l, 0, locality);
PE_AI void prefetch_lines(const char *p, int64_t bytes) { PREFETCH_LINES_(p, bytes, 3) }
PE_AI void prefetch_lines_l2(const char *p, int64_t bytes) { PREFETCH_LINES_(p, bytes, 2) }
#undef PREFETCH_LINES_

/* Whole rows walked token by token over a block of several tokens
 * ([B,T,H,D] in place: one stream through memory) prefetch each row's lines
 * at least STREAM_PF_BYTES further on in the walk, at the same head of a
 * token as many tokens on (stream_ahead: the bytes from a row to that one;
 * one token for Llama-3-8B's q, 8 KiB of bf16 or 16 KiB of f32 a token,
 * four for its k). From memory the hardware prefetchers alone kept one
 * stream at 0.6-0.7 of what several streams reach. Intel Xeon (Emerald
 * Rapids), Llama-3-8B q+k [B,T,H,D], 4096 tokens, each call's rows evicted
 * from the caches first, fastest of 30 calls, two rounds alternated: bf16
 * 5.0-5.4 -> 3.6-3.7 ms (f32 6.6-7.1 -> 5.8-6.0), against 3.9-4.1 ms (6.2-6.4)
 * in four streams (rows_streams, which the engine chooses only past half
 * the reported last-level cache); 512 tokens from L3 the same or faster
 * (bf16 244-256 -> 249 us, f32 471-474 -> 417). 4, 8 and 16 KiB ahead about
 * the same; the same prefetch in rows_grouped's walk of [B,H,T,D] heads,
 * four or eight streams already, no gain. */
enum { STREAM_PF_BYTES = 8192 };
PE_AI int64_t stream_ahead(int64_t ts) {
  const int64_t a = ts < 0 ? -ts : ts;
  return a ? ts * ((STREAM_PF_BYTES + a - 1) / a) : 0;
}

#if defined(VL)
#include "rope_template.h"
#include "store_template.h"
#include "enc_template.h"
#include "quant_template.h"
#endif

/* ---- the walks ---- */

/* Row (t, h)'s QK-norm scale and weights (mode a constant; OFF: none). */
PE_AI float row_scale(int mode, const pe_rope_block *b, int64_t t, int64_t h) {
  return mode == PE_NORM_OFF ? 0.0f : b->scale[t][h * b->scale_head_stride];
}
PE_AI const float *row_weight(int mode, const pe_rope_block *b, int64_t h) {
  return wat(mode, b->weight, h * b->weight_head_stride);
}

/* Whether a walk puts heads innermost: their stride (bytes, either sign) is
 * the nearer one ([B,T,H,D]), so the rows stream in address order. */
PE_AI int heads_inner(int64_t hs, int64_t ts) {
  return (hs < 0 ? -hs : hs) <= (ts < 0 ? -ts : ts);
}

/* ---- the normed rows (b->norm not PE_NORM_OFF): kernels of their own ----
 * Noinline functions, one per dtype (pair), that the plain rows' entries
 * call: the norm adds no code to the plain rows (a decode step's ~40 rows,
 * where every instruction counts) and no copy of the grouped walks (clang's
 * ASan build of the kernels). Walk: the nearer of the two strides
 * innermost, as rows_walk. */
#if defined(VL)
/* The vector ISAs: one walk (noinline, style and mode read at run time) for
 * every dtype pair, calling a row kernel of its own for each dtype pair,
 * style and mode (noinline, FN(nrow_tab)): the in-place rows are the pair
 * (dt, dt) with dst == src. Heads innermost (heads_inner, or one token):
 * each token's rows in one call; otherwise ([B,H,T,D]) groups of NTG
 * tokens, each head's rows of the group in one call. Row (t, h) reads (sv ?
 * sv[t] : sb + t*sts) + h*shs and writes (dv ? dv[t] : db + t*dts) + h*dhs
 * (bytes). */
/* A row kernel: count rows, row i from src + i*sstep to dst + i*dstep
 * (bytes), its cos/sin rows cp[i*cinc], sp[i*cinc], its scale rs[i*rstep],
 * its weights at w + i*wstep (unused for UNIT); pf: the block's prefetch
 * hint, each row's lines pf bytes on prefetched before the row is rotated.
 * Rows that share one cos/sin row and one weight vector (a token's heads)
 * go chunk by chunk, every row's chunk in turn (rope_template.h's
 * nheld_rows); the others row by row (nstore_row). */
typedef void (*pe_nrow_fn)(const char *src, int64_t sstep, char *dst, int64_t dstep,
                           const float *const *cp, const float *const *sp, int64_t cinc,
                           int32_t n, int32_t dist, const float *rs, int64_t rstep,
                           const float *w, int64_t wstep, int64_t count, int64_t pf);
enum { NTG = 4 };
__attribute__((noinline)) static void FN(nwalk)(const pe_rope_block *b, pe_nrow_fn row,
                                                const char *sb, const void *const *sv,
                                                int64_t sts, int64_t shs, char *db,
                                                void *const *dv, int64_t dts, int64_t dhs,
                                                int tokens_grouped) {
  const int64_t n_tokens = b->n_tokens, n_heads = b->n_heads, ss = b->scale_head_stride;
  const int32_t n = b->n_pairs, dist = b->pair_dist;
  const float *w = b->weight; /* NULL for UNIT */
  const int64_t ws = w ? b->weight_head_stride : 0;
  if (!tokens_grouped) {
    for (int64_t t = 0; t < n_tokens; t++)
      row(sv ? (const char *)sv[t] : sb + t * sts, shs, dv ? (char *)dv[t] : db + t * dts, dhs,
          &b->cos[t], &b->sin[t], 0, n, dist, b->scale[t], ss, w, ws, n_heads, b->prefetch);
    return;
  }
  for (int64_t t0 = 0; t0 < n_tokens; t0 += NTG) { /* in place: sb, db */
    const int64_t g = n_tokens - t0 < NTG ? n_tokens - t0 : NTG;
    for (int64_t h = 0; h < n_heads; h++) {
      float rg[NTG];
      for (int64_t k = 0; k < g; k++) rg[k] = b->scale[t0 + k][h * ss];
      row(sb + t0 * sts + h * shs, sts, db + t0 * dts + h * dhs, dts, &b->cos[t0], &b->sin[t0],
          1, n, dist, rg, 1, w ? w + h * ws : NULL, 0, g, b->prefetch);
    }
  }
}
/* rope_template.h's even/odd normed rows where the ISA has them. */
#if defined(VEC_NORM_EO)
#define NEO_TAKE neo_take
#define NEO_ROWS neo_rows
#else
#define NEO_TAKE(...) 0
#define NEO_ROWS(...) (void)0
#endif
/* rope_template.h's GPT-J rows in pair order where the ISA has them. */
#if defined(VEC_GPTJ_PAIRS)
#define GHELD_TAKE gheld_take
#define GHELD_ROWS gheld_rows
#else
#define GHELD_TAKE(...) 0
#define GHELD_ROWS(...) (void)0
#endif
#define NROW_(S, sd, D, dd, ST, SN, M, MN)                                                      \
  __attribute__((noinline)) static void FN(nrow_##S##_##D##_##SN##_##MN)(                      \
      const char *src, int64_t sstep, char *dst, int64_t dstep, const float *const *cp,        \
      const float *const *sp, int64_t cinc, int32_t n, int32_t dist, const float *rs,         \
      int64_t rstep, const float *w, int64_t wstep, int64_t count, int64_t pf) {               \
    const int64_t pfe = row_span(ST, n, dist);                                                \
    if (NEO_TAKE(sd, dd, ST, M, n, cinc, wstep)) {                                             \
      NEO_ROWS(sd, dd, ST, M, src, sstep, dst, dstep, *cp, *sp, n, dist, rs, rstep, w, wstep,   \
               count, pf, pfe);                                                                \
      return;                                                                                  \
    }                                                                                          \
    if (GHELD_TAKE(sd, dd, ST, M, n, cinc, wstep, pf)) {                                       \
      GHELD_ROWS(sd, dd, M, src, sstep, dst, dstep, *cp, *sp, n, rs, rstep, w, count, pf, pfe); \
      return;                                                                                  \
    }                                                                                          \
    if (nheld_take(sd, ST, M, n, cinc, wstep, pf)) {                                           \
      nheld_rows(sd, dd, M, src, sstep, dst, dstep, *cp, *sp, n, dist, rs, rstep, w, count, pf, \
                 pfe);                                                                         \
      return;                                                                                  \
    }                                                                                          \
    for (; count > 0; count--) {                                                               \
      if (pf) nprefetch(src, pf, pfe, sd);                                                     \
      nstore_row(sd, dd, ST, M, src, dst, *cp, *sp, n, dist, *rs, w);                          \
      src += sstep, dst += dstep, cp += cinc, sp += cinc, rs += rstep;                         \
      if (M != PE_NORM_UNIT) w += wstep;                                                       \
    }                                                                                          \
  }
#define NROW_M_(S, sd, D, dd, ST, SN)                                                           \
  NROW_(S, sd, D, dd, ST, SN, PE_NORM_W, w)                                                     \
  NROW_(S, sd, D, dd, ST, SN, PE_NORM_W1, w1)                                                   \
  NROW_(S, sd, D, dd, ST, SN, PE_NORM_UNIT, u)
#define NROW_S_(S, sd, D, dd)                                                                   \
  NROW_M_(S, sd, D, dd, PE_ROPE_NEOX, neox) NROW_M_(S, sd, D, dd, PE_ROPE_GPTJ, gptj)
#define NROW_D_(S, sd)                                                                          \
  NROW_S_(S, sd, f32, PE_F32) NROW_S_(S, sd, f16, PE_F16) NROW_S_(S, sd, bf16, PE_BF16_W)
NROW_D_(f32, PE_F32)
NROW_D_(f16, PE_F16)
NROW_D_(bf16, PE_BF16)
#define NT_M_(S, D, SN)                                                                         \
  {FN(nrow_##S##_##D##_##SN##_w), FN(nrow_##S##_##D##_##SN##_w1), FN(nrow_##S##_##D##_##SN##_u)}
#define NT_S_(S, D) { NT_M_(S, D, neox), NT_M_(S, D, gptj) }
#define NT_D_(S) { NT_S_(S, f32), NT_S_(S, f16), NT_S_(S, bf16) }
/* [src dtype][dst dtype][GPT-J][W, W1, UNIT] */
static const pe_nrow_fn FN(nrow_tab)[3][3][2][3] = {NT_D_(f32), NT_D_(f16), NT_D_(bf16)};
#undef NT_D_
#undef NT_S_
#undef NT_M_
#undef NROW_D_
#undef NROW_S_
#undef NROW_M_
#undef NROW_
/* The row kernel of a block of dtypes sd -> dd (an ISA's private bf16
 * variant, dt > PE_BF16, takes the table's bf16 entry: the same bits). */
PE_AI pe_nrow_fn nrow_pick(int sd, int dd, const pe_rope_block *b) {
#define IX_(dt) ((dt) == PE_F32 ? 0 : (dt) == PE_F16 ? 1 : 2)
  return FN(nrow_tab)[IX_(sd)][IX_(dd)][b->style == PE_ROPE_GPTJ]
                     [b->norm == PE_NORM_W ? 0 : b->norm == PE_NORM_W1 ? 1 : 2];
#undef IX_
}
PE_AI void nrows_call(int dt, const pe_rope_block *b, void *data, int64_t head_stride,
                      int64_t token_stride) {
  const int64_t es = pe__esize(dt), hs = head_stride * es, ts = token_stride * es;
  const int grouped = !(b->n_tokens == 1 || heads_inner(hs, ts));
  FN(nwalk)(b, nrow_pick(dt, dt, b), data, NULL, ts, hs, data, NULL, ts, hs, grouped);
}
PE_AI void nstore_call(int sd, int dd, const pe_rope_block *b, const void *const *src,
                       int64_t shs, void *const *dst, int64_t dhs) {
  FN(nwalk)(b, nrow_pick(sd, dd, b), NULL, src, 0, shs * pe__esize(sd), NULL, dst, 0,
            dhs * pe__esize(dd), 0);
}
#else
PE_AI void nrows_walk(int dt, int style, int mode, const pe_rope_block *b, void *data,
                      int64_t head_stride, int64_t token_stride) {
  char *base = data;
  const int64_t hs = head_stride * pe__esize(dt), ts = token_stride * pe__esize(dt);
  const int64_t n_tokens = b->n_tokens, n_heads = b->n_heads;
  const int32_t n = b->n_pairs, dist = b->pair_dist;
  if (n_tokens == 1 || heads_inner(hs, ts)) {
    for (int64_t t = 0; t < n_tokens; t++)
      for (int64_t h = 0; h < n_heads; h++)
        nrope_row(dt, style, mode, base + t * ts + h * hs, b->cos[t], b->sin[t], n, dist,
                  row_scale(mode, b, t, h), row_weight(mode, b, h));
  } else {
    for (int64_t h = 0; h < n_heads; h++)
      for (int64_t t = 0; t < n_tokens; t++)
        nrope_row(dt, style, mode, base + t * ts + h * hs, b->cos[t], b->sin[t], n, dist,
                  row_scale(mode, b, t, h), row_weight(mode, b, h));
  }
}

PE_AI void nstore_walk(int sd, int dd, int style, int mode, const pe_rope_block *b,
                       const void *const *src, int64_t src_head_stride, void *const *dst,
                       int64_t dst_head_stride) {
  int64_t shs = src_head_stride * pe__esize(sd), dhs = dst_head_stride * pe__esize(dd);
  for (int64_t t = 0; t < b->n_tokens; t++)
    for (int64_t h = 0; h < b->n_heads; h++)
      nstore_row(sd, dd, style, mode, (const char *)src[t] + h * shs, (char *)dst[t] + h * dhs,
                 b->cos[t], b->sin[t], b->n_pairs, b->pair_dist, row_scale(mode, b, t, h),
                 row_weight(mode, b, h));
}

#define NBY_MODE_(walk, style, ...)                                                              \
  switch (b->norm) {                                                                             \
    case PE_NORM_W: walk(__VA_ARGS__, style, PE_NORM_W, b, ARGS_); break;                        \
    case PE_NORM_W1: walk(__VA_ARGS__, style, PE_NORM_W1, b, ARGS_); break;                      \
    default: walk(__VA_ARGS__, style, PE_NORM_UNIT, b, ARGS_); break;                            \
  }
#define NBY_STYLE_(walk, ...)                                                                    \
  if (b->style == PE_ROPE_GPTJ) {                                                                \
    NBY_MODE_(walk, PE_ROPE_GPTJ, __VA_ARGS__)                                                   \
  } else {                                                                                       \
    NBY_MODE_(walk, PE_ROPE_NEOX, __VA_ARGS__)                                                   \
  }
#define NROWS_(S, sd)                                                                            \
  __attribute__((noinline)) static void FN(nrows_##S)(const pe_rope_block *b, void *data,       \
                                                      int64_t hs, int64_t ts) {                  \
    NBY_STYLE_(nrows_walk, sd)                                                                   \
  }
#define ARGS_ data, hs, ts
NROWS_(f32, PE_F32)
NROWS_(f16, PE_F16)
NROWS_(bf16, PE_BF16)
#undef ARGS_
#undef NROWS_
#define NPAIR_(S, sd, D, dd)                                                                     \
  __attribute__((noinline)) static void FN(nstore_##S##_##D)(                                    \
      const pe_rope_block *b, const void *const *src, int64_t shs, void *const *dst,             \
      int64_t dhs) {                                                                             \
    NBY_STYLE_(nstore_walk, sd, dd)                                                              \
  }
#define NFROM_(S, sd) NPAIR_(S, sd, f32, PE_F32) NPAIR_(S, sd, f16, PE_F16) NPAIR_(S, sd, bf16, PE_BF16)
#define ARGS_ src, shs, dst, dhs
NFROM_(f32, PE_F32)
NFROM_(f16, PE_F16)
NFROM_(bf16, PE_BF16)
#undef ARGS_
#undef NFROM_
#undef NPAIR_
#undef NBY_STYLE_
#undef NBY_MODE_

/* The normed kernel of dtype dt (an ISA's private bf16 variant, dt > PE_BF16,
 * takes the plain bf16 one: the same bits). */
PE_AI void nrows_call(int dt, const pe_rope_block *b, void *data, int64_t hs, int64_t ts) {
  if (dt == PE_F32) FN(nrows_f32)(b, data, hs, ts);
  else if (dt == PE_F16) FN(nrows_f16)(b, data, hs, ts);
  else FN(nrows_bf16)(b, data, hs, ts);
}
#define NSTORE_D_(S)                                                                             \
  if (dd == PE_F32) FN(nstore_##S##_f32)(b, src, shs, dst, dhs);                                 \
  else if (dd == PE_F16) FN(nstore_##S##_f16)(b, src, shs, dst, dhs);                            \
  else FN(nstore_##S##_bf16)(b, src, shs, dst, dhs);
PE_AI void nstore_call(int sd, int dd, const pe_rope_block *b, const void *const *src,
                       int64_t shs, void *const *dst, int64_t dhs) {
  if (sd == PE_F32) {
    NSTORE_D_(f32)
  } else if (sd == PE_F16) {
    NSTORE_D_(f16)
  } else {
    NSTORE_D_(bf16)
  }
}
#undef NSTORE_D_
#endif /* VL */

/* In place: the nearer of the two strides goes innermost, so the rows stream
 * in address order whatever the layout ([B,T,H,D] or [B,H,T,D]) while the
 * block's cos/sin stay in L1. On the vector ISAs, rows of up to
 * PE_ROPE_HELD vectors of pairs walked heads inner (and a decode step's rows
 * nearer than 4 KiB) keep each token's cos/sin vectors in registers across
 * its heads (token_rows); heads farther apart than tokens, and the other
 * decode steps, go in groups that share each step's cos/sin vectors
 * (rows_grouped). */
PE_AI void rows_walk(int dt, int style, const pe_rope_block *b, void *data, int64_t head_stride,
                     int64_t token_stride) {
  char *base = data;
  int64_t es = pe__esize(dt), hs = head_stride * es, ts = token_stride * es;
  const int64_t n_tokens = b->n_tokens, n_heads = b->n_heads;
  const int32_t n = b->n_pairs, dist = b->pair_dist;
  /* whole rows (heads not farther apart than a row's span) of a block the
   * engine marks (stream_pf): their lines prefetched a few KiB on */
  const int64_t far =
      b->stream_pf && (hs < 0 ? -hs : hs) <= row_span(style, n, dist) * es ? stream_ahead(ts) : 0;
#define ROW_(t, h) rope_row(dt, style, base + (t) * ts + (h) * hs, b->cos[t], b->sin[t], n, dist)
#if defined(PE_ROPE_HELD)
  /* Heads inner, or a decode step whose rows are nearer than 4 KiB (a
   * [B,H,1,D] q or k; Zen 4, AVX-512, Llama-3-8B q+k, min of 20000: 270 ->
   * 250 ns against rows_grouped): the token's cos/sin in registers across
   * every head (token_rows). A decode step's rows 4 KiB apart or more share
   * address bits 0-11, so a row's loads would wait on the previous row's
   * stores (4K aliasing): they keep rows_grouped's order. One call site, so
   * that token_rows is expanded once per (dtype, style). */
  if (n > 0 && n % VL == 0 && n <= PE_ROPE_HELD * VL &&
      (n_tokens == 1 ? (hs < 0 ? -hs : hs) < 4096 : heads_inner(hs, ts))) {
    for (int64_t t = 0; t < n_tokens; t++)
      token_rows(dt, style, base + t * ts, hs, n_heads, b->cos[t], b->sin[t], n, dist,
                 n_tokens > 1, far);
    return;
  }
#endif
#if defined(VEC_TOKEN_HEADS)
  /* The shapes that prepare a token's cos/sin once for its heads
   * (store_template.h's token_heads: AVX2's bf16 rows in even/odd order
   * and its GPT-J rows of f16), walked as token_rows' (heads inner, or a
   * decode step's rows nearer than 4 KiB). */
  if (token_heads_take(dt, dt, style, n) &&
      (n_tokens == 1 ? (hs < 0 ? -hs : hs) < 4096 : heads_inner(hs, ts))) {
    for (int64_t t = 0; t < n_tokens; t++)
      token_heads(dt, dt, style, 1, base + t * ts, hs, base + t * ts, hs, n_heads, b->cos[t],
                  b->sin[t], n, dist, far);
    return;
  }
#endif
#if defined(PE_ROPE_GROUP)
  /* A decode step and heads farther apart than tokens: rope_template.h (one
   * call site, so that rows_grouped is expanded once per (dtype, style)). */
  if (n_tokens == 1 || !heads_inner(hs, ts)) {
    rows_grouped(dt, style, b, base, hs, ts);
    return;
  }
#endif
  if (n_tokens == 1 || heads_inner(hs, ts)) {
    const int64_t rb = row_span(style, n, dist) * es;
    for (int64_t t = 0; t < n_tokens; t++) {
      /* in locals: the rows' stores (may_alias vectors) would otherwise
       * make the compiler reload them for every head */
      const float *c = b->cos[t], *s = b->sin[t];
      char *row = base + t * ts;
      for (int64_t h = 0; h < n_heads; h++) {
        if (far) prefetch_lines(row + h * hs + far, rb);
        rope_row(dt, style, row + h * hs, c, s, n, dist);
      }
    }
  } else {
    for (int64_t h = 0; h < n_heads; h++)
      for (int64_t t = 0; t < n_tokens; t++) ROW_(t, h);
  }
#undef ROW_
}

/* The block's style as a constant: one loop per style (plain rows: a
 * normed block went to its own kernel before, nrows_call / nstore_call). */
#define BY_STYLE_(walk, ...)                                                                     \
  if (b->style == PE_ROPE_GPTJ) {                                                                \
    walk(__VA_ARGS__, PE_ROPE_GPTJ, b, ARGS_);                                                   \
  } else {                                                                                       \
    walk(__VA_ARGS__, PE_ROPE_NEOX, b, ARGS_);                                                   \
  }

PE_AI void rows_gen(int dt, const pe_rope_block *b, void *data, int64_t hs, int64_t ts) {
  if (b->norm != PE_NORM_OFF) {
    nrows_call(dt, b, data, hs, ts);
    return;
  }
#define ARGS_ data, hs, ts
  BY_STYLE_(rows_walk, dt)
#undef ARGS_
}

/* The cache write: tokens outer (each goes to its own cache slot), heads
 * inner (adjacent in both the activations' [T, H, D] and the cache's slot
 * rows of the common layouts). */
PE_AI void store_walk(int sd, int dd, int style, const pe_rope_block *b,
                      const void *const *src, int64_t src_head_stride, void *const *dst,
                      int64_t dst_head_stride) {
  int64_t shs = src_head_stride * pe__esize(sd), dhs = dst_head_stride * pe__esize(dd);
#if defined(VEC_TOKEN_HEADS)
  /* A block the engine marks (stream_pf: rows beyond L2) prefetches each
   * source row's lines a few KiB on, as rows_walk's in-place rows do: the
   * token's rows one token stride apart (its source rows come from one
   * tensor, so the first two give the stride). Intel Xeon (Emerald Rapids),
   * AVX2 path, `pe-bench --suite fused --tokens 4096 --isa avx2`,
   * Llama-3-8B k bf16 into its cache: 930-937 -> 856-880 us (0.72 -> 0.77-0.78
   * x floor, four runs alternated); on the AVX-512 path's rows (no
   * token_heads) the same prefetch made q+k f32 1.1x slower, so those keep
   * the hardware's. AMD EPYC Zen 5 agrees: k alone into its cache, 4096
   * tokens, `pe-ab --case store --no-q`, the source rows prefetched per
   * head 1.16-1.17x the time (f32, bf16), with a prefetchw of the cache rows
   * a token ahead 1.18-1.29x, from memory (--evict 96) 1.18-1.20x. */
  const int64_t ahead = b->stream_pf && b->n_tokens > 1
                            ? stream_ahead((const char *)src[1] - (const char *)src[0])
                            : 0;
#endif
  for (int64_t t = 0; t < b->n_tokens; t++) {
    const char *s = src[t];
    char *d = dst[t];
    const float *c = b->cos[t], *sn = b->sin[t]; /* in locals: see rows_walk */
    const int64_t n_heads = b->n_heads;
    const int32_t n = b->n_pairs, dist = b->pair_dist;
#if defined(VEC_TOKEN_HEADS)
    if (token_heads_take(sd, dd, style, n)) { /* store_template.h */
      token_heads(sd, dd, style, 0, s, shs, d, dhs, n_heads, c, sn, n, dist, ahead);
      continue;
    }
#endif
#if defined(VEC_BF16_EO) && !defined(VEC_ROT_FAST)
    if (store_eo_take(sd, dd, style, n)) { /* rope_template.h */
      token_store_eo(s, shs, d, dhs, n_heads, c, sn, n, dist);
      continue;
    }
#endif
    for (int64_t h = 0; h < n_heads; h++)
      store_row(sd, dd, style, s + h * shs, d + h * dhs, c, sn, n, dist);
  }
}

PE_AI void store_gen(int sd, int dd, const pe_rope_block *b, const void *const *src, int64_t shs,
                     void *const *dst, int64_t dhs) {
  if (b->norm != PE_NORM_OFF) {
    nstore_call(sd, dd, b, src, shs, dst, dhs);
    return;
  }
#define ARGS_ src, shs, dst, dhs
  BY_STYLE_(store_walk, sd, dd)
#undef ARGS_
}

/* ---- a block in several memory streams (pe_rope_block.streams > 1) ----
 * Whole rows in place whose tokens' heads are adjacent: the block's tokens
 * cut into `streams` runs of consecutive tokens, and each step takes one
 * row of the k-th token of every run in turn, so that memory sees several
 * streams at once rather than one. The engine asks for it when a call's
 * tensors take more than half the last-level cache (engine.c's
 * block_streams): such a call then moves its bytes faster. AMD
 * EPYC Zen 3, an in-place x*a+b over 84 MiB, fastest of 5: one stream
 * 30-43 GB/s, four taking turns every 256 bytes to 1 KiB 51-66 GB/s, every
 * 5 KiB 29-31; prefetching one stream 0.5-16 KiB ahead gained nothing.
 * Llama-3-8B f32 [B,T,H,D] 4096 tokens in place, both builds alternated in
 * one process (pe-ab): four runs, a row at a turn, 0.73-0.79 of the time;
 * two rows at a turn 0.86-1.11, two runs 0.88, six or eight 1.14-1.39.
 * Noinline, and called from the entry points: the walks a decode step
 * runs keep their code (inlined into them, the unused branch made a bf16
 * decode step 1.07x slower, the same instructions). */
PE_AI void rows_streams(int dt, int style, const pe_rope_block *b, char *base, int64_t hs,
                        int64_t ts) {
  const int64_t nt = b->n_tokens, nh = b->n_heads, run = (nt + b->streams - 1) / b->streams;
  const int32_t n = b->n_pairs, dist = b->pair_dist;
#if defined(VEC_EO_PREP)
  if (token_streams_take(dt, style, n)) { /* each token's cos/sin prepared once */
    eo_streams(dt, b, base, hs, ts);
    return;
  }
#endif
  for (int64_t k = 0; k < run; k++)
    for (int64_t h = 0; h < nh; h++)
      for (int64_t t = k; t < nt; t += run)
        rope_row(dt, style, base + t * ts + h * hs, b->cos[t], b->sin[t], n, dist);
}
/* Whether a block goes in streams: plain rows of several tokens whose
 * heads are adjacent, each rotated whole (hs, ts in bytes; es the element
 * size). Slices of rows (an MLA step's rope channels, 64 of each 192; a
 * partial rotary dimension) stay in token order: as four streams of 256
 * bytes in every 768, DeepSeek-V3's q at 512 tokens took 2.1x the time
 * (AMD EPYC Zen 3, f32). */
PE_AI int streams_take(const pe_rope_block *b, int64_t hs, int64_t ts, int64_t es) {
  const int64_t extent = row_span(b->style, b->n_pairs, b->pair_dist);
  return b->streams > 1 && b->n_tokens > 1 && b->norm == PE_NORM_OFF &&
         (hs == extent * es || hs == -extent * es) && heads_inner(hs, ts);
}
#undef BY_STYLE_

/* ---- the entry points, one per dtype (pair) ---- */

#define ROWS_(S, sd)                                                                             \
  __attribute__((noinline)) static void FN(rows_streams_##S)(const pe_rope_block *b, char *data, \
                                                             int64_t hs, int64_t ts) {           \
    if (b->style == PE_ROPE_GPTJ)                                                                \
      rows_streams(sd, PE_ROPE_GPTJ, b, data, hs, ts);                                           \
    else                                                                                         \
      rows_streams(sd, PE_ROPE_NEOX, b, data, hs, ts);                                           \
  }                                                                                              \
  static void FN(rope_rows_##S)(const pe_rope_block *b, void *data, int64_t hs, int64_t ts) {   \
    const int64_t es_ = pe__esize(sd);                                                           \
    if (streams_take(b, hs * es_, ts * es_, es_)) {                                              \
      FN(rows_streams_##S)(b, data, hs * es_, ts * es_);                                         \
      return;                                                                                    \
    }                                                                                            \
    rows_gen(sd, b, data, hs, ts);                                                               \
  }
ROWS_(f32, PE_F32)
ROWS_(f16, PE_F16)
ROWS_(bf16, PE_BF16_W)
#undef ROWS_

#define PAIR_(S, sd, D, dd)                                                                      \
  static void FN(store_##S##_##D)(const pe_rope_block *b, const void *const *src, int64_t shs,  \
                                  void *const *dst, int64_t dhs) {                               \
    store_gen(sd, dd, b, src, shs, dst, dhs);                                                    \
  }                                                                                              \
  static void FN(convert_##S##_##D)(const void *src, void *dst, int64_t n) {                     \
    if (PE_DT_OF(sd) == PE_DT_OF(dd)) /* the bits, NaN payloads kept */                         \
      memcpy(dst, src, (size_t)n * (size_t)pe__esize(PE_DT_OF(sd)));                             \
    else                                                                                         \
      convert_row(sd, dd, src, dst, n);                                                          \
  }
#define FROM_(S, sd) PAIR_(S, sd, f32, PE_F32) PAIR_(S, sd, f16, PE_F16) PAIR_(S, sd, bf16, PE_BF16_W)
FROM_(f32, PE_F32)
FROM_(f16, PE_F16)
FROM_(bf16, PE_BF16)
#undef FROM_
#undef PAIR_

#define NORM_(S, sd)                                                                             \
  static void FN(norm_sumsq_##S)(const void *src, int64_t n, int64_t rows, int64_t rs,          \
                                 int combine, float *out) {                                      \
    sumsq_gen(sd, src, n, rows, rs, combine, out);                                               \
  }
NORM_(f32, PE_F32)
NORM_(f16, PE_F16)
NORM_(bf16, PE_BF16)
#undef NORM_

#define NPAIR_(S, sd, D, dd)                                                                     \
  static void FN(norm_row_##S##_##D)(const void *src, void *dst, int64_t n, float r,             \
                                     const float *w, int32_t mode) {                             \
    if (mode == PE_NORM_W)                                                                       \
      nrow_gen(sd, dd, src, dst, n, r, w, PE_NORM_W);                                            \
    else if (mode == PE_NORM_W1)                                                                 \
      nrow_gen(sd, dd, src, dst, n, r, w, PE_NORM_W1);                                           \
    else                                                                                         \
      nrow_gen(sd, dd, src, dst, n, r, w, PE_NORM_UNIT);                                         \
  }
#define NFROM_(S, sd) NPAIR_(S, sd, f32, PE_F32) NPAIR_(S, sd, f16, PE_F16) NPAIR_(S, sd, bf16, PE_BF16_W)
NFROM_(f32, PE_F32)
NFROM_(f16, PE_F16)
NFROM_(bf16, PE_BF16)
#undef NFROM_
#undef NPAIR_

static void FN(norm_scale)(const float *s, int64_t count, int64_t n, float eps, float *out) {
  nscale_gen(s, count, n, eps, out);
}

static float FN(amax)(const float *x, int64_t n) { return amax_gen(x, n); }

/* isa.h's stream_copy: the partial lines at the ends by memcpy, each whole
 * line of dst by the TU's stream_line(dst, src) (64 bytes). */
static void FN(stream_copy)(void *dst, const void *src, int64_t bytes) {
  char *d = dst;
  const char *s = src;
  int64_t head = (int64_t)(-(uintptr_t)d & 63);
  if (head > bytes) head = bytes;
  memcpy(d, s, (size_t)head);
  d += head, s += head, bytes -= head;
  for (; bytes >= 64; d += 64, s += 64, bytes -= 64) stream_line(d, s);
  memcpy(d, s, (size_t)bytes);
}

#define ENC_(S, dt, dw)                                                                              \
  static void FN(add_row_##S)(void *row, const float *v, int64_t n) { add_row_gen(dw, row, v, n); } \
  static void FN(alibi_row_##S)(void *row, int64_t n, int64_t qpos, float ns) {                  \
    alibi_row_gen(dw, row, n, qpos, ns);                                                         \
  }                                                                                              \
  static void FN(mask_row_##S)(void *row, int64_t n) { mask_row_gen(dt, row, n); }              \
  static void FN(load_row_##S)(float *out, const void *src, int64_t n) {                         \
    if (dt == PE_F32)                                                                            \
      memcpy(out, src, (size_t)n * sizeof(float));                                               \
    else                                                                                         \
      load_row_gen(dt, out, src, n);                                                             \
  }
ENC_(f32, PE_F32, PE_F32)
ENC_(f16, PE_F16, PE_F16)
ENC_(bf16, PE_BF16, PE_BF16_W)
#undef ENC_

/* The quantized cache rows: [format][dtype of the float side]. */
#define KVQ_(S, dt, dw)                                                                              \
  static void FN(kvq_e4m3_##S)(const void *s, void *d, int64_t n, float sc) {                   \
    kvq_fp8_gen(PE_KVQ_E4M3, dt, s, d, n, sc);                                                   \
  }                                                                                              \
  static void FN(kvq_e5m2_##S)(const void *s, void *d, int64_t n, float sc) {                   \
    kvq_fp8_gen(PE_KVQ_E5M2, dt, s, d, n, sc);                                                   \
  }                                                                                              \
  static void FN(kvq_q8_0_##S)(const void *s, void *d, int64_t n, float sc) {                   \
    (void)sc;                                                                                    \
    kvq_q8_gen(dt, s, d, n);                                                                     \
  }                                                                                              \
  static void FN(kvd_e4m3_##S)(const void *s, void *d, int64_t n, float sc) {                   \
    kvd_fp8_gen(PE_KVQ_E4M3, dw, s, d, n, sc);                                                   \
  }                                                                                              \
  static void FN(kvd_e5m2_##S)(const void *s, void *d, int64_t n, float sc) {                   \
    kvd_fp8_gen(PE_KVQ_E5M2, dw, s, d, n, sc);                                                   \
  }                                                                                              \
  static void FN(kvd_q8_0_##S)(const void *s, void *d, int64_t n, float sc) {                   \
    (void)sc;                                                                                    \
    kvd_q8_gen(dw, s, d, n);                                                                     \
  }
KVQ_(f32, PE_F32, PE_F32)
KVQ_(f16, PE_F16, PE_F16)
KVQ_(bf16, PE_BF16, PE_BF16_W)
#undef KVQ_

#define ROW3_(f) {FN(f##_f32), FN(f##_f16), FN(f##_bf16)}
const pe_isa PE_CAT(pe__isa_, ISA) = {
    .name = PE_STR(ISA),
    .rope_sincos = FN(rope_sincos),
    .rope_rows = {FN(rope_rows_f32), FN(rope_rows_f16), FN(rope_rows_bf16)},
    .rope_store_rows = {ROW3_(store_f32), ROW3_(store_f16), ROW3_(store_bf16)},
    .convert = {ROW3_(convert_f32), ROW3_(convert_f16), ROW3_(convert_bf16)},
    .sincos = FN(sincos),
    .add_row = ROW3_(add_row),
    .alibi_row = ROW3_(alibi_row),
    .mask_row = ROW3_(mask_row),
    .load_row = ROW3_(load_row),
    .norm_sumsq = ROW3_(norm_sumsq),
    .norm_row = {ROW3_(norm_row_f32), ROW3_(norm_row_f16), ROW3_(norm_row_bf16)},
    .norm_scale = FN(norm_scale),
    .kv_quant = {ROW3_(kvq_e4m3), ROW3_(kvq_e5m2), ROW3_(kvq_q8_0)},
    .kv_dequant = {ROW3_(kvd_e4m3), ROW3_(kvd_e5m2), ROW3_(kvd_q8_0)},
    .amax = FN(amax),
    .stream_copy = FN(stream_copy),
};
#undef ROW3_
