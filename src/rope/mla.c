/* mla.c - the MLA step (pe_mla_rope_store): one engine run whose sinks are
 * q's rope slices rotated in place (the engine's own q sink on a view of
 * the slices, or, under a q norm, the whole heads normed here) and the kv
 * rows normed, rotated and written into their cache rows (the MLA sink
 * below, called by the engine's block walk with the block's cos/sin rows). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "rope/engine.h"

PE_API void pe_mla_init(pe_mla *m) {
  if (m) pe__mla_defaults(m);
}

/* ---- the kv row's pieces ---- */

/* Where channel ch of a kv row goes in a cache row of order `order`
 * (rotated channels [ro, ro + R)). */
static inline int64_t cache_channel(const pe__mla_plan *m, int64_t ch) {
  const int64_t ro = m->m.kv_rope_offset, R = m->m.rope_dim;
  if (m->m.order != PE_MLA_ROPE_FIRST) return ch;
  return ch >= ro && ch < ro + R ? ch - ro : ch < ro ? ch + R : ch;
}

/* The channels of kv row src other than the rotated ones into dst (dtype
 * dd, element e of dst at dst + cache_channel(e) * des): normed with scale r
 * in [0, kv_norm_dim), converted past it. */
static void kv_rest(const pe__rope_plan *p, const pe__mla_plan *m, const char *src, char *dst,
                    pe_dtype dd, int64_t des, float r) {
  const pe_isa *isa = p->isa;
  const pe_dtype sd = m->kv.dtype;
  const int64_t ses = m->kv.esize, ro = m->m.kv_rope_offset, R = m->m.rope_dim, dim = m->kv_dim;
  const int64_t nn = m->m.kv_norm ? m->m.kv_norm_dim : 0;
  const int32_t mode = (int32_t)m->m.kv_norm;
  /* the pieces [a, e) of [0, dim) without [ro, ro + R) */
  const int64_t cut[4] = {0, ro, ro + R, dim};
  for (int piece = 0; piece < 2; piece++) {
    int64_t a = cut[2 * piece], e = cut[2 * piece + 1];
    if (a >= e) continue;
    if (a < nn) { /* the normed part of the piece */
      int64_t ne = e < nn ? e : nn;
      const float *w = m->m.kv_weight ? m->m.kv_weight + a : NULL;
      isa->norm_row[sd][dd](src + a * ses, dst + cache_channel(m, a) * des, ne - a, r, w, mode);
      a = ne;
    }
    if (a < e) isa->convert[sd][dd](src + a * ses, dst + cache_channel(m, a) * des, e - a);
  }
}

/* The kv norm's scale of the block's n rows from src (row i at src + i *
 * s_token elements; 0 without a norm) into sc: the sums of squares of every
 * row in one kernel call, each row summed in its own lanes as a call of its
 * own would sum it (isa.h), then the scales in one call. A skipped token's
 * row is summed too: it is in the kv tensor all the same. */
static void kv_scales(const pe__rope_plan *p, const pe__mla_plan *m, const char *src, int64_t n,
                      float *sc) {
  if (!m->m.kv_norm) {
    for (int64_t i = 0; i < n; i++) sc[i] = 0.0f;
    return;
  }
  p->isa->norm_sumsq[m->kv.dtype](src, m->m.kv_norm_dim, n, m->kv.s_token, 0, sc);
  p->isa->norm_scale(sc, n, m->m.kv_norm_dim, m->m.kv_eps, sc);
}

/* The rotated channels of the tokens' kv rows src[i] (+ kv_rope_offset) into
 * dst[i] (dtype dd, already at the rotated channels' place): one kernel call
 * for the tokens (n of them, cos/sin rows cosp/sinp), normed when the slice
 * lies in the normed channels. */
static void kv_rope(const pe__rope_plan *p, const pe__mla_plan *m, const void *const *src,
                    void *const *dst, pe_dtype dd, int64_t n, const float *const *cosp,
                    const float *const *sinp, const float *const *scp) {
  const int64_t ro = m->m.kv_rope_offset;
  const int normed = m->m.kv_norm && ro < m->m.kv_norm_dim;
  pe_rope_block sb = {.cos = cosp, .sin = sinp, .n_tokens = n, .n_heads = 1,
                      .n_pairs = p->half, .pair_dist = p->half, .style = p->style};
  if (normed) {
    sb.norm = (int32_t)m->m.kv_norm;
    sb.scale = scp;
    sb.weight = m->m.kv_weight ? m->m.kv_weight + ro : NULL;
  }
  p->isa->rope_store_rows[m->kv.dtype][dd](&sb, src, 0, dst, 0);
}

/* The address of cache row `slot` (PE_MLA_FP8_DS_V4: its token row; *scales
 * its scale bytes). */
static char *cache_row_at(const pe__mla_plan *m, int64_t slot, char **scales) {
  const int64_t blk = slot / m->block, t = slot % m->block;
  char *base = m->cache + blk * m->s_block * m->c_esize;
  if (scales)
    *scales = base + m->block * m->s_slot +
              t * pe__mla_v4_scale_bytes(m->kv_dim - m->m.rope_dim);
  return base + t * m->s_slot * m->c_esize;
}

/* One token's kv row (row: float32, kv order, normed and rotated) into its
 * quantized cache row. */
static void kv_quantize(const pe__rope_plan *p, const pe__mla_plan *m, float *row, char *dst,
                        char *scales) {
  const pe_isa *isa = p->isa;
  const int64_t dim = m->kv_dim, R = m->m.rope_dim, lat = dim - R;
  pe_kv_quant_fn e4m3 = isa->kv_quant[PE_KV_FP8_E4M3 - 1][PE_F32];
  uint16_t rope16[PE_MLA_MAX_DIM] __attribute__((aligned(64)));
  switch (m->m.format) {
    case PE_MLA_FP8_E4M3:
      e4m3(row, dst, dim, m->scale);
      return;
    case PE_MLA_FP8_DS: /* vLLM's concat_and_cache_ds_mla */
      for (int64_t k = 0; k < lat / PE_MLA_DS_TILE; k++) {
        const float *x = row + k * PE_MLA_DS_TILE;
        float scale = fmaxf(isa->amax(x, PE_MLA_DS_TILE) / 448.0f, FLT_MIN);
        e4m3(x, dst + k * PE_MLA_DS_TILE, PE_MLA_DS_TILE, scale);
        memcpy(dst + lat + 4 * k, &scale, 4); /* little-endian hosts: x86-64, aarch64 */
      }
      isa->convert[PE_F32][PE_BF16](row + lat, rope16, R);
      memcpy(dst + lat + 4 * (lat / PE_MLA_DS_TILE), rope16, (size_t)R * 2);
      return;
    case PE_MLA_FP8_DS_V4: { /* vLLM's fused_deepseek_v4_qnorm_rope_kv_insert */
      uint16_t all16[PE_MLA_MAX_DIM] __attribute__((aligned(64)));
      isa->convert[PE_F32][PE_BF16](row, all16, dim); /* every value through bf16 */
      isa->convert[PE_BF16][PE_F32](all16, row, dim);
      for (int64_t k = 0; k < lat / PE_MLA_V4_TILE; k++) {
        float *x = row + k * PE_MLA_V4_TILE;
        int e = pe__fp8_pow2_exp(isa->amax(x, PE_MLA_V4_TILE));
        float inv = ldexpf(1.0f, -e);
        for (int i = 0; i < PE_MLA_V4_TILE; i++) x[i] = fminf(fmaxf(x[i] * inv, -448.0f), 448.0f);
        scales[k] = (char)(unsigned char)(e + 127 < 0 ? 0 : e + 127 > 255 ? 255 : e + 127);
      }
      scales[lat / PE_MLA_V4_TILE] = 0;
      e4m3(row, dst, lat, 1.0f);
      memcpy(dst + lat, all16 + lat, (size_t)R * 2);
      return;
    }
  }
}

/* mla_kv's plain rows of tokens [i0, i1) of the block (sc: their scales;
 * stage: NULL, or their rows there first, then streamed). */
static void mla_kv_plain(const pe__rope_plan *p, const pe__mla_plan *m, int64_t u, const char *x0,
                         const pe_rope_block *blk, const float *scales, int64_t i0, int64_t i1,
                         char *stage) {
  const int64_t ro = m->m.kv_rope_offset, rb = m->kv_dim * m->c_esize;
  const char *src[PE_ENGINE_BLOCK_TOKENS];
  char *dst[PE_ENGINE_BLOCK_TOKENS], *out[PE_ENGINE_BLOCK_TOKENS];
  const float *cosp[PE_ENGINE_BLOCK_TOKENS], *sinp[PE_ENGINE_BLOCK_TOKENS];
  float sc[PE_ENGINE_BLOCK_TOKENS];
  const float *scp[PE_ENGINE_BLOCK_TOKENS];
  int64_t k = 0;
  for (int64_t i = i0; i < i1; i++) {
    int64_t s = p->slots[u + i];
    if (s < 0) continue;
    src[k] = x0 + i * m->kv.s_token * m->kv.esize;
    out[k] = cache_row_at(m, s, NULL);
    dst[k] = stage ? stage + k * rb : out[k];
    sc[k] = scales[i];
    scp[k] = &sc[k];
    cosp[k] = blk->cos[i];
    sinp[k] = blk->sin[i];
    kv_rest(p, m, src[k], dst[k], m->cache_dtype, m->c_esize, sc[k]);
    k++;
  }
  if (!k) return;
  const void *rs[PE_ENGINE_BLOCK_TOKENS];
  void *rd[PE_ENGINE_BLOCK_TOKENS];
  for (int64_t i = 0; i < k; i++) {
    rs[i] = src[i] + ro * m->kv.esize;
    rd[i] = dst[i] + cache_channel(m, ro) * m->c_esize;
  }
  kv_rope(p, m, rs, rd, m->cache_dtype, k, cosp, sinp, scp);
  if (stage)
    for (int64_t i = 0; i < k; i++) p->isa->stream_copy(out[i], dst[i], rb);
}

/* The block's kv rows into their cache rows (plan.stream, plain rows: each
 * through the stage, then streamed there). */
static void mla_kv(const pe__rope_plan *p, const pe__mla_plan *m, int64_t b, int64_t u,
                   int64_t t0, const pe_rope_block *blk, char *stage) {
  const int64_t n = blk->n_tokens, ro = m->m.kv_rope_offset;
  float sc[PE_ENGINE_BLOCK_TOKENS];
  const float *scp[1];
  const char *x0 = m->kv.data + (b * m->kv.s_batch + t0 * m->kv.s_token) * m->kv.esize;
  kv_scales(p, m, x0, n, sc);
  if (m->m.format != PE_MLA_PLAIN) { /* one token at a time through a float32 row */
    float row[PE_MLA_MAX_DIM] __attribute__((aligned(64)));
    for (int64_t i = 0; i < n; i++) {
      int64_t s = p->slots[u + i];
      if (s < 0) continue;
      const char *x = x0 + i * m->kv.s_token * m->kv.esize;
      scp[0] = &sc[i];
      /* staged in the cache row's channel order */
      const void *sx[1] = {x + ro * m->kv.esize};
      void *dx[1] = {row + cache_channel(m, ro)};
      kv_rope(p, m, sx, dx, PE_F32, 1, &blk->cos[i], &blk->sin[i], scp);
      kv_rest(p, m, x, (char *)row, PE_F32, 4, sc[i]);
      char *scales = NULL;
      char *d = cache_row_at(m, s, m->m.format == PE_MLA_FP8_DS_V4 ? &scales : NULL);
      kv_quantize(p, m, row, d, scales); /* FP8 rows: never streamed (engine.c's stream_ok) */
    }
    return;
  }
  /* plain rows: the rotated channels of the block's tokens in one kernel
   * call; streamed, as many as the stage holds at a time */
  const int64_t rb = m->kv_dim * m->c_esize;
  int64_t i0 = 0;
  while (i0 < n) {
    const int64_t i1 = p->stream && n - i0 > PE_ENGINE_STAGE_BYTES / rb
                           ? i0 + PE_ENGINE_STAGE_BYTES / rb : n;
    mla_kv_plain(p, m, u, x0, blk, sc, i0, i1, p->stream ? stage : NULL);
    i0 = i1;
  }
}

/* q's heads normed (q_norm, no weight) and their rope slices rotated, in
 * place, token by token. */
static void mla_q_normed(const pe__rope_plan *p, const pe__mla_plan *m, int64_t b, int64_t t0,
                         const pe_rope_block *blk) {
  const pe_isa *isa = p->isa;
  const pe__rope_operand *q = &m->qh;
  const int64_t dim = m->q_dim, ro = m->m.q_rope_offset, R = m->m.rope_dim;
  const int32_t mode = (int32_t)m->m.q_norm;
  float scales[PE_ENGINE_NORM_ROWS];
  for (int64_t i = 0; i < blk->n_tokens; i++) {
    char *row = q->data + (b * q->s_batch + (t0 + i) * q->s_token) * q->esize;
    for (int64_t h0 = 0; h0 < q->heads; h0 += PE_ENGINE_NORM_ROWS) {
      int64_t g = q->heads - h0 < PE_ENGINE_NORM_ROWS ? q->heads - h0 : PE_ENGINE_NORM_ROWS;
      char *r0 = row + h0 * q->s_head * q->esize;
      isa->norm_sumsq[q->dtype](r0, dim, g, q->s_head, 0, scales);
      isa->norm_scale(scales, g, dim, m->m.q_eps, scales);
      const float *scp[1] = {scales};
      pe_rope_block sb = {.cos = &blk->cos[i], .sin = &blk->sin[i], .n_tokens = 1, .n_heads = g,
                          .n_pairs = p->half, .pair_dist = p->half, .style = p->style,
                          .norm = mode, .scale = scp, .scale_head_stride = 1};
      isa->rope_rows[q->dtype](&sb, r0 + ro * q->esize, q->s_head, 0);
      pe_norm_row_fn nf = isa->norm_row[q->dtype][q->dtype];
      for (int64_t h = 0; h < g; h++) {
        char *x = r0 + h * q->s_head * q->esize;
        if (ro > 0) nf(x, x, ro, scales[h], NULL, mode);
        if (ro + R < dim) nf(x + (ro + R) * q->esize, x + (ro + R) * q->esize, dim - ro - R, scales[h], NULL, mode);
      }
    }
  }
}

void pe__mla_block(const pe__rope_plan *p, int64_t b, int64_t u, int64_t t0,
                   const pe_rope_block *blk, char *stage) {
  const pe__mla_plan *m = p->mla;
  if (m->qh.data) mla_q_normed(p, m, b, t0, blk);
  if (m->kv.data) mla_kv(p, m, b, u, t0, blk, stage);
}

/* ---- the entry point ---- */

PE_API pe_status pe_mla_rope_store(const pe_rope_cache *c, const pe_mla *mla, const pe_tensor *q,
                                   const pe_tensor *kv, const pe_tensor *cache,
                                   const int64_t *slot_mapping, const int64_t *positions,
                                   uint32_t flags, pe_threadpool *pool) {
  static const char fn[] = "pe_mla_rope_store";
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is NULL", fn);
  pe__mla_call call = {.fn = fn, .head_dim = c->p.head_dim, .rotary_dim = c->p.rotary_dim,
                       .bound = pe__rope_bound(c), .mla = mla, .q = q, .kv = kv, .cache = cache,
                       .slot_mapping = slot_mapping, .positions = positions, .flags = flags};
  pe__mla_checked ok;
  pe_status st = pe__check_mla(&call, &ok);
  if (st != PE_OK || ok.empty) return st;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  pe__mla_plan m;
  memset(&m, 0, sizeof m);
  m.m = ok.mla;
  m.scale = ok.scale;
  /* q: its rope slices as the engine's q operand; under a q norm, the whole
   * heads for the MLA sink instead */
  pe_tensor slice;
  const pe_tensor *qop = NULL;
  if (q && !pe__tensor_empty(q)) {
    if (m.m.q_norm) {
      pe__rope_operand_from(&m.qh, q);
      m.q_dim = q->shape[3];
    } else {
      slice = *q;
      slice.data = (char *)q->data + m.m.q_rope_offset * (int64_t)pe__dtype_size(q->dtype);
      slice.shape[3] = m.m.rope_dim;
      qop = &slice;
    }
  }
  const pe_rope_cache *const caches[1] = {c};
  pe__rope_plan p;
  pe__rope_plan_init(&p, c, qop, NULL, flags & PE_ROPE_STREAM_CACHE, PE_SOURCE_POSITIONS);
  p.batch = ok.batch;
  p.tokens = ok.tokens;
  p.caches = caches;
  p.pos = positions;
  if (kv && !pe__tensor_empty(kv)) {
    pe__rope_operand_from(&m.kv, kv);
    m.kv_dim = kv->shape[3];
    m.cache = cache->data;
    m.cache_dtype = cache->dtype;
    m.c_esize = m.m.format == PE_MLA_PLAIN ? (int64_t)pe__dtype_size(cache->dtype) : 1;
    m.block = cache->shape[2];
    m.s_block = pe__stride(cache, 0);
    /* PE_MLA_FP8_DS_V4: the format fixes the token rows' stride */
    m.s_slot = m.m.format == PE_MLA_FP8_DS_V4
                   ? pe__mla_row_bytes(PE_MLA_FP8_DS_V4, m.kv_dim - m.m.rope_dim, m.m.rope_dim, PE_F32)
                   : pe__stride(cache, 2);
    p.slots = slot_mapping;
  }
  if (m.qh.data || m.kv.data) p.mla = &m;
  pe__rope_run(&p, pool);
  return PE_OK;
}
