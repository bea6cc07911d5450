/* rope_engine.c - the block walk shared by every RoPE rotation (see
 * rope_engine.h): row sources, sinks, the thread cost model, and the
 * validation the entry points share. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/cpu.h"
#include "rope/engine.h"

/* ---- row sources ---- */

/* Frequency i's axis (PE_SOURCE_AXES): the caller's map when there is one
 * (pe_apply_rope_axes_qk), else M-RoPE's rule. Sectioned (Qwen2-VL): the
 * first s[0] frequencies follow t, the next s[1] h, the rest w. Interleaved
 * (Qwen3-VL): i % 3 == 1 and i < 3*s[1] -> h, i % 3 == 2 and i < 3*s[2] -> w,
 * else t. */
static inline int axis_of(const pe__rope_plan *p, int32_t i) {
  if (p->axis_of_freq) return p->axis_of_freq[i];
  const int32_t *s = p->mrope_section;
  if (p->mrope_interleaved)
    return i % 3 == 1 && i < 3 * (int64_t)s[1] ? 1 : i % 3 == 2 && i < 3 * (int64_t)s[2] ? 2 : 0;
  return i < s[0] ? 0 : i < (int64_t)s[0] + s[1] ? 1 : 2;
}

/* Frequencies per step of the sources that compute a row piecewise. */
#define SUBCHUNK 64

static inline int64_t position(const pe__rope_plan *p, int axis, int64_t u, int64_t t) {
  return p->pos ? p->pos[axis * p->batch * p->tokens + u] : t;
}

/* cos/sin of frequencies [i0, i0+m) for token u (token index t in its
 * sequence) into row (cos at row[0..m), sin at row[m..2m)). */
static void fill_row(const pe__rope_plan *p, const pe_rope_cache *c, int64_t u, int64_t t,
                     int32_t i0, int32_t m, float *row) {
  const pe_isa *isa = p->isa;
  switch (p->source) {
    case PE_SOURCE_POSITIONS: {
      int64_t pos = position(p, 0, u, t);
      if (c->table) {
        const float *r = pe__rope_table_row(c, pos) + i0;
        memcpy(row, r, (size_t)m * sizeof(float));
        memcpy(row + m, r + p->half, (size_t)m * sizeof(float));
      } else {
        isa->rope_sincos(pos, 1, c->inv_freq + i0, NULL, m, (float)c->attention_factor, row);
      }
      return;
    }
    case PE_SOURCE_SHIFT:
      isa->rope_sincos(p->pos[u], 1, c->inv_freq + i0, NULL, m, 1.0f, row);
      return;
    case PE_SOURCE_REROTATE: {
      /* One rotation by p*(f_to - f_from), scaled by a_to/a_from: undoes
       * `from` and applies `to` with a single rounding of the data. The
       * difference is exact as a double-double (TwoSum), so the angle is
       * p*f_to - p*f_from exactly before its reduction. */
      int64_t pos = position(p, 0, u, t);
      float scale = (float)(p->to->attention_factor / p->from->attention_factor);
      double diff[SUBCHUNK], diff_lo[SUBCHUNK];
      float tmp[2 * SUBCHUNK];
      for (int32_t j = 0; j < m; j += SUBCHUNK) {
        int32_t n = m - j < SUBCHUNK ? m - j : SUBCHUNK;
        for (int32_t i = 0; i < n; i++) {
          double a = p->to->inv_freq[i0 + j + i], b = -p->from->inv_freq[i0 + j + i];
          double d = a + b, bb = d - a;
          diff[i] = d;
          diff_lo[i] = (a - (d - bb)) + (b - bb);
        }
        isa->rope_sincos(pos, 1, diff, diff_lo, n, scale, tmp);
        memcpy(row + j, tmp, (size_t)n * sizeof(float));
        memcpy(row + m + j, tmp + n, (size_t)n * sizeof(float));
      }
      return;
    }
    case PE_SOURCE_AXES: {
      const int n_axes = p->n_axes;
      int64_t ap[PE_ENGINE_MAX_AXES];
      for (int a = 0; a < n_axes; a++) ap[a] = position(p, a, u, t);
      if (c->table) {
        /* Each axis' table row found once for the token. Sectioned
         * (Qwen2-VL): three runs of frequencies, each copied from its row;
         * otherwise frequency by frequency. Finding every frequency's axis
         * and row anew was 9 % of pe_apply_mrope_qk's time (Intel Xeon,
         * Qwen2-VL-7B, 2048 tokens of which 1024 an image's, bf16
         * [B,T,H,D]). A section's run is copied by the ISA's row copy
         * (load_row), not a loop compiled for baseline x86-64's 16-byte
         * moves: AMD EPYC Zen 5, `pe-ab --case mrope --heads 28 --kv-heads
         * 4 --dtype bf16`, 1024 tokens 0.97-0.98 of the time, 2048 0.985. */
        const float *r[PE_ENGINE_MAX_AXES];
        const int32_t half = p->half;
        for (int a = 0; a < n_axes; a++) r[a] = pe__rope_table_row(c, ap[a]) + i0;
        if (!p->axis_of_freq && !p->mrope_interleaved) {
          const int64_t end[3] = {p->mrope_section[0],
                                  (int64_t)p->mrope_section[0] + p->mrope_section[1], INT64_MAX};
          int32_t lo = 0;
          for (int a = 0; a < 3 && lo < m; a++) {
            const int64_t e = end[a] - i0;
            const int32_t hi = e < lo ? lo : e > m ? m : (int32_t)e;
            if (hi > lo) {
              isa->load_row[PE_F32](row + lo, r[a] + lo, hi - lo);
              isa->load_row[PE_F32](row + m + lo, r[a] + half + lo, hi - lo);
            }
            lo = hi;
          }
          return;
        }
        for (int32_t i = 0; i < m; i++) {
          const float *ra = r[axis_of(p, i0 + i)];
          row[i] = ra[i];
          row[m + i] = ra[half + i];
        }
        return;
      }
      /* On the fly: each piece of frequencies at each distinct axis
       * position it needs (the values are elementwise, so a piece equals
       * the row's; an axis at an earlier axis' position takes its values). */
      int src[PE_ENGINE_MAX_AXES];
      for (int a = 0; a < n_axes; a++) {
        src[a] = a;
        for (int e = 0; e < a; e++)
          if (ap[e] == ap[a]) {
            src[a] = e;
            break;
          }
      }
      float tmp[2 * SUBCHUNK];
      for (int32_t j = 0; j < m; j += SUBCHUNK) {
        int32_t n = m - j < SUBCHUNK ? m - j : SUBCHUNK;
        for (int a = 0; a < n_axes; a++) {
          if (src[a] != a) continue;
          int need = 0;
          for (int32_t i = 0; i < n && !need; i++) need = src[axis_of(p, i0 + j + i)] == a;
          if (!need) continue;
          isa->rope_sincos(ap[a], 1, c->inv_freq + i0 + j, NULL, n, (float)c->attention_factor,
                           tmp);
          for (int32_t i = 0; i < n; i++) {
            if (src[axis_of(p, i0 + j + i)] != a) continue;
            row[j + i] = tmp[i];
            row[m + j + i] = tmp[n + i];
          }
        }
      }
      return;
    }
  }
}

/* The block's rows for frequencies [i0, i0+m): pointers straight into the
 * table when the source is a plain table lookup, else rows built in
 * scratch (m <= the chunk the caller sized for it). */
static void block_rows(const pe__rope_plan *p, const pe_rope_cache *c, int64_t u, int64_t t0,
                       int64_t n, int32_t i0, int32_t m, int direct, float *scratch,
                       const float **cosp, const float **sinp) {
  if (direct) {
    for (int64_t i = 0; i < n; i++) {
      const float *r = pe__rope_table_row(c, position(p, 0, u + i, t0 + i)) + i0;
      cosp[i] = r;
      sinp[i] = r + p->half;
    }
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    if (p->source == PE_SOURCE_AXES && c->table && !p->inverse) {
      /* A token whose axes share one position (text in a multimodal
       * sequence) is a plain table row: no gather. */
      int64_t p0 = position(p, 0, u + i, t0 + i);
      int same = 1;
      for (int a = 1; a < p->n_axes && same; a++) same = position(p, a, u + i, t0 + i) == p0;
      if (same) {
        const float *r = pe__rope_table_row(c, p0) + i0;
        cosp[i] = r;
        sinp[i] = r + p->half;
        continue;
      }
    }
    /* A token at its predecessor's position takes its row: a context shift
     * moves every key by one delta (llama.cpp's K-shift), so a block needs
     * one row of sincos, not one per token (Zen 4, q8_0 cache, 512 keys: the
     * sincos were ~25 % of pe_rope_shift_k_cache and ~40 % of
     * pe_rope_shift_k). Only for the sources whose row is a function of
     * axis 0's position alone. */
    if (i > 0 && p->pos && p->source != PE_SOURCE_AXES &&
        position(p, 0, u + i, t0 + i) == position(p, 0, u + i - 1, t0 + i - 1)) {
      cosp[i] = cosp[i - 1];
      sinp[i] = sinp[i - 1];
      continue;
    }
    float *row = scratch + i * 2 * (int64_t)m;
    fill_row(p, c, u + i, t0 + i, i0, m, row);
    if (p->inverse)
      for (int32_t j = 0; j < m; j++) row[m + j] = -row[m + j];
    cosp[i] = row;
    sinp[i] = row + m;
  }
}

/* ---- the norm stage ---- */

/* Scales of the norm per token of a block: one per head row, or one. */
static inline int64_t norm_rows(const pe__rope_plan *p, const pe__rope_operand *op) {
  return !p->norm_mode || !op->data ? 0 : p->norm_per_token ? 1 : op->heads;
}

/* Under a norm a block's rows are read twice, their sums of squares first,
 * then the rotation, and the next block's rows are prefetched meanwhile
 * (run_block): blocks of at most this many bytes of normed rows keep both
 * blocks in L2 and the second read near, where 25 tokens (the norm stage's
 * limit) of Qwen3-8B rows (500 KB f32) read the block from memory in one
 * pass with no work to overlap, then again from L2 and L3. AMD EPYC Zen 3,
 * Qwen3-8B 32q/8kv x 128, 512 tokens, pe_qk_norm_rope_store with v, the two
 * builds' calls interleaved, first quartile of 40 each, several rounds: f32
 * 1.16-1.63 -> 0.91-1.18 ms (3-token blocks), bf16 1.16-1.40 -> 1.03-1.11
 * ms (6 tokens); blocks of 1 token were slower (1.19-1.87 ms f32). A
 * block that fits L1 (32 KiB: half of what that measured, at least 3
 * tokens, so f32 Qwen3-8B keeps its 3) is reread from L1 rather than L2:
 * bf16 4096 tokens from memory (`pe-ab --evict 512 --tokens 4096`, two
 * runs) 0.92-0.95 of the time with 3-token blocks (2 tokens the same), f32
 * 0.99-1.02; caches warm (`pe-ab --same-bytes`): bf16 512 tokens 0.98, 64
 * tokens 0.99, 8 x 16 tokens 0.97, f16 512 0.97 (Intel Xeon, Emerald
 * Rapids, 48 KiB L1D). */
#define PE_ENGINE_NORM_BLOCK_BYTES (32 * 1024)
#define PE_ENGINE_NORM_MIN_TOKENS 3

/* Bytes of a token's normed rows (q's and k's heads under a norm). */
static inline int64_t norm_row_bytes(const pe__rope_plan *p) {
  int64_t bytes = 0;
  if (norm_rows(p, &p->q)) bytes += p->q.heads * p->head_dim * p->q.esize;
  if (norm_rows(p, &p->k)) bytes += p->k.heads * p->head_dim * p->k.esize;
  return bytes;
}

static inline const char *op_row(const pe__rope_operand *op, int64_t b, int64_t t) {
  return op->data + (b * op->s_batch + t * op->s_token) * op->esize;
}

/* The scales of op's rows of tokens [t0, t0+n) of batch row b, [token][row]:
 * the sums of squares of whole rows (every head in order, per token), read
 * before anything of the block is written; one norm_sumsq call per token,
 * one norm_scale call for the block. */
static void norm_scales(const pe__rope_plan *p, const pe__rope_operand *op, int64_t b,
                        int64_t t0, int64_t n, float *out) {
  pe_norm_sumsq_fn sumsq = p->isa->norm_sumsq[op->dtype];
  const int64_t hd = p->head_dim, rows = p->norm_per_token ? 1 : op->heads;
  for (int64_t i = 0; i < n; i++)
    sumsq(op_row(op, b, t0 + i), hd, op->heads, op->s_head, (int)p->norm_per_token,
          out + i * rows);
  p->isa->norm_scale(out, n * rows, p->norm_per_token ? op->heads * hd : hd, p->norm_eps, out);
}

static inline int norm_weighted(const pe__rope_plan *p) {
  return p->norm_mode == PE_NORM_W || p->norm_mode == PE_NORM_W1;
}

/* The weight of element e of head h's row (NULL without weights). */
static inline const float *norm_weight(const pe__rope_plan *p, const float *w, int64_t h,
                                       int64_t e) {
  return norm_weighted(p) ? w + (p->norm_per_token ? h * p->head_dim : 0) + e : NULL;
}

/* ---- sinks ---- */

static inline int64_t pair_offset(const pe__rope_plan *p, int32_t i0) {
  return p->style == PE_ROPE_GPTJ ? 2 * (int64_t)i0 : i0;
}

/* The block's norm fields for op's rows (scales [token][row], w its weight). */
static void block_norm(const pe__rope_plan *p, pe_rope_block *blk, const float *scales,
                       int64_t rows, const float *w, int32_t i0, const float **sp,
                       int64_t prefetch) {
  if (!p->norm_mode) return;
  blk->prefetch = prefetch;
  for (int64_t i = 0; i < blk->n_tokens; i++) sp[i] = scales + i * rows;
  blk->norm = p->norm_mode;
  blk->scale = sp;
  blk->scale_head_stride = p->norm_per_token ? 0 : 1;
  blk->weight = norm_weight(p, w, 0, pair_offset(p, i0));
  blk->weight_head_stride = p->norm_per_token ? p->head_dim : 0;
}

static void rotate_in_place(const pe__rope_plan *p, const pe__rope_operand *op, int64_t b,
                            int64_t t0, const pe_rope_block *blk, int32_t i0) {
  char *base = op->data + (b * op->s_batch + t0 * op->s_token + pair_offset(p, i0)) * op->esize;
  p->isa->rope_rows[op->dtype](blk, base, op->s_head, op->s_token);
}

/* Channels [rotary_dim, head_dim) of normed rows in place: normed only. */
static void norm_pass_through(const pe__rope_plan *p, const pe__rope_operand *op, const float *w,
                              const float *scales, int64_t b, int64_t t0, int64_t n) {
  int64_t rot = 2 * (int64_t)p->half, rest = p->head_dim - rot, rows = norm_rows(p, op);
  if (rest <= 0) return;
  pe_norm_row_fn f = p->isa->norm_row[op->dtype][op->dtype];
  for (int64_t i = 0; i < n; i++)
    for (int64_t h = 0; h < op->heads; h++) {
      char *r = (char *)op_row(op, b, t0 + i) + (h * op->s_head + rot) * op->esize;
      f(r, r, rest, scales[i * rows + (p->norm_per_token ? 0 : h)], norm_weight(p, w, h, rot),
        p->norm_mode);
    }
}

/* Row `slot` of a paged cache: block slot / block_size, row slot % block_size. */
static inline char *slot_row(char *base, int64_t esize, int64_t block, int64_t s_block,
                             int64_t s_slot, int64_t slot) {
  return base + ((slot / block) * s_block + (slot % block) * s_slot) * esize;
}

static inline char *cache_row(const pe__rope_plan *p, int64_t slot) {
  return slot_row(p->dst, p->dst_esize, p->dst_block, p->dst_s_block, p->dst_s_slot, slot);
}

/* k's rotated pairs into the cache rows of the block's tokens that have a
 * slot. */
static void store_pairs(const pe__rope_plan *p, int64_t b, int64_t u, int64_t t0,
                        const pe_rope_block *blk, int32_t i0) {
  const void *src[PE_ENGINE_BLOCK_TOKENS];
  void *dst[PE_ENGINE_BLOCK_TOKENS];
  const float *cosp[PE_ENGINE_BLOCK_TOKENS], *sinp[PE_ENGINE_BLOCK_TOKENS];
  const float *scp[PE_ENGINE_BLOCK_TOKENS];
  int64_t m = 0, off = pair_offset(p, i0);
  for (int64_t i = 0; i < blk->n_tokens; i++) {
    int64_t s = pe__sink_slot(p, u, i);
    if (s < 0) continue; /* -1: padding, nothing stored */
    src[m] = op_row(&p->k, b, t0 + i) + off * p->k.esize;
    dst[m] = cache_row(p, s) + off * p->dst_esize;
    cosp[m] = blk->cos[i];
    sinp[m] = blk->sin[i];
    scp[m] = blk->norm ? blk->scale[i] : NULL;
    m++;
  }
  if (!m) return;
  pe_rope_block sb = *blk;
  sb.cos = cosp;
  sb.sin = sinp;
  sb.scale = scp;
  sb.n_tokens = m;
  p->isa->rope_store_rows[p->k.dtype][p->dst_dtype](&sb, src, p->k.s_head, dst, p->dst_s_head);
}

/* Channels [rotary_dim, head_dim) of stored rows: converted (normed first
 * under a norm), not rotated. */
static void store_pass_through(const pe__rope_plan *p, int64_t b, int64_t u, int64_t t0,
                               int64_t n, const float *scales) {
  int64_t rot = 2 * (int64_t)p->half, rest = p->head_dim - rot, rows = norm_rows(p, &p->k);
  if (rest <= 0) return;
  pe_convert_fn conv = p->isa->convert[p->k.dtype][p->dst_dtype];
  pe_norm_row_fn nf = p->isa->norm_row[p->k.dtype][p->dst_dtype];
  for (int64_t i = 0; i < n; i++) {
    int64_t s = pe__sink_slot(p, u, i);
    if (s < 0) continue;
    const char *src = op_row(&p->k, b, t0 + i) + rot * p->k.esize;
    char *dst = cache_row(p, s) + rot * p->dst_esize;
    for (int64_t h = 0; h < p->k.heads; h++) {
      const char *sh = src + h * p->k.s_head * p->k.esize;
      char *dh = dst + h * p->dst_s_head * p->dst_esize;
      if (p->norm_mode)
        nf(sh, dh, rest, scales[i * rows + (p->norm_per_token ? 0 : h)],
           norm_weight(p, p->k_weight, h, rot), p->norm_mode);
      else
        conv(sh, dh, rest);
    }
  }
}

/* Floats of the quantizing k sink's stack row: one token's rows of a group
 * of heads (at least one whole row: head_dim <= PE_KV_QUANT_MAX_DIM). */
#define QROW_FLOATS PE_KV_QUANT_MAX_DIM

/* k into a quantized cache: for each token of the block with a slot, the
 * rows of a group of heads rotated (and normed) in float32 into a stack row
 * - pairs by rope_store_rows, channels past rotary_dim by norm_row / convert
 * - then each row quantized into its cache row. blk holds every frequency
 * (i0 = 0, n_pairs = half: the block was sized for it). */
static void store_quant_k(const pe__rope_plan *p, int64_t b, int64_t u, int64_t t0,
                          const pe_rope_block *blk, const float *scales) {
  float row[QROW_FLOATS] __attribute__((aligned(64)));
  const int64_t hd = p->head_dim, rot = 2 * (int64_t)p->half, rest = hd - rot;
  const int64_t rows = norm_rows(p, &p->k), g_max = QROW_FLOATS / hd;
  const pe_isa *isa = p->isa;
  const int rowscale = p->dst_quant == PE_KV_FP8_E4M3_ROWSCALE; /* one head: g == 1 */
  pe_kv_quant_fn quant = isa->kv_quant[(rowscale ? PE_KV_FP8_E4M3 : p->dst_quant) - 1][PE_F32];
  const int64_t qrow = pe__kv_row_bytes(p->dst_quant, hd, PE_F32);
  for (int64_t i = 0; i < blk->n_tokens; i++) {
    int64_t s = pe__sink_slot(p, u, i);
    if (s < 0) continue;
    const char *src = op_row(&p->k, b, t0 + i);
    char *dst = cache_row(p, s);
    for (int64_t h0 = 0; h0 < p->k.heads; h0 += g_max) {
      int64_t g = p->k.heads - h0 < g_max ? p->k.heads - h0 : g_max;
      const char *sh = src + h0 * p->k.s_head * p->k.esize;
      const float *sc = blk->norm ? blk->scale[i] + h0 * blk->scale_head_stride : NULL;
      pe_rope_block sb = *blk;
      sb.cos = &blk->cos[i];
      sb.sin = &blk->sin[i];
      sb.scale = &sc;
      sb.n_tokens = 1;
      sb.n_heads = g;
      if (blk->norm && blk->weight) sb.weight = blk->weight + h0 * blk->weight_head_stride;
      const void *srcp[1] = {sh};
      void *dstp[1] = {row};
      isa->rope_store_rows[p->k.dtype][PE_F32](&sb, srcp, p->k.s_head, dstp, hd);
      for (int64_t h = 0; h < g && rest > 0; h++) {
        const char *x = sh + (h * p->k.s_head + rot) * p->k.esize;
        float *y = row + h * hd + rot;
        if (p->norm_mode)
          isa->norm_row[p->k.dtype][PE_F32](
              x, y, rest, scales[i * rows + (p->norm_per_token ? 0 : h0 + h)],
              norm_weight(p, p->k_weight, h0 + h, rot), p->norm_mode);
        else
          isa->convert[p->k.dtype][PE_F32](x, y, rest);
      }
      if (rowscale) { /* the row's own scale, after the block's rows */
        float rs = pe__kv_rowscale_of(p->isa->amax(row, hd));
        quant(row, dst, hd, rs);
        memcpy(pe__kv_rowscale_at(dst - (s % p->dst_block) * p->dst_s_slot, p->dst_block, hd,
                                  s % p->dst_block),
               &rs, 4);
      } else if (p->dst_s_head == qrow) /* adjacent cache rows: one call (kv/cache.c's move_rows) */
        quant(row, dst + h0 * p->dst_s_head, g * hd, p->dst_scale);
      else
        for (int64_t h = 0; h < g; h++)
          quant(row + h * hd, dst + (h0 + h) * p->dst_s_head, hd, p->dst_scale);
    }
  }
}

/* The cache rows of the block's slots rotated in place (plan.cache_in_place):
 * blk holds every frequency (i0 = 0). */
static void rotate_cache_rows(const pe__rope_plan *p, int64_t u, const pe_rope_block *blk) {
  /* adjacent cache rows: one call each way (kv/cache.c's move_rows) */
  const int one = p->dst_s_head == pe__kv_row_bytes(p->dst_quant, p->head_dim, PE_F32);
  const int rowscale = p->dst_quant == PE_KV_FP8_E4M3_ROWSCALE; /* one head */
  const uint32_t fmt = rowscale ? PE_KV_FP8_E4M3 : p->dst_quant;
  float row[QROW_FLOATS] __attribute__((aligned(64)));
  const int64_t hd = p->head_dim, heads = p->k.heads, g_max = QROW_FLOATS / hd;
  const pe_isa *isa = p->isa;
  for (int64_t i = 0; i < blk->n_tokens; i++) {
    int64_t s = p->slots[u + i];
    if (s < 0) continue;
    char *dst = cache_row(p, s);
    pe_rope_block sb = *blk;
    sb.cos = &blk->cos[i];
    sb.sin = &blk->sin[i];
    sb.n_tokens = 1;
    if (!p->dst_quant) {
      sb.n_heads = heads;
      isa->rope_rows[p->dst_dtype](&sb, dst, p->dst_s_head, 0);
      continue;
    }
    if (rowscale) { /* dequantized with the row's scale, quantized with its new one */
      char *sa = pe__kv_rowscale_at(dst - (s % p->dst_block) * p->dst_s_slot, p->dst_block, hd,
                                    s % p->dst_block);
      float sc;
      memcpy(&sc, sa, 4);
      isa->kv_dequant[fmt - 1][PE_F32](dst, row, hd, sc);
      sb.n_heads = 1;
      isa->rope_rows[PE_F32](&sb, row, hd, 0);
      sc = pe__kv_rowscale_of(isa->amax(row, hd));
      isa->kv_quant[fmt - 1][PE_F32](row, dst, hd, sc);
      memcpy(sa, &sc, 4);
      continue;
    }
    for (int64_t h0 = 0; h0 < heads; h0 += g_max) {
      int64_t g = heads - h0 < g_max ? heads - h0 : g_max;
      for (int64_t h = 0; h < (one ? 1 : g); h++)
        isa->kv_dequant[fmt - 1][PE_F32](dst + (h0 + h) * p->dst_s_head, row + h * hd,
                                         one ? g * hd : hd, p->dst_scale);
      sb.n_heads = g;
      isa->rope_rows[PE_F32](&sb, row, hd, 0);
      for (int64_t h = 0; h < (one ? 1 : g); h++)
        isa->kv_quant[fmt - 1][PE_F32](row + h * hd, dst + (h0 + h) * p->dst_s_head,
                                       one ? g * hd : hd, p->dst_scale);
    }
  }
}

/* v's rows converted (or quantized) into the v cache rows of the block's
 * tokens' slots. */
static void store_v(const pe__rope_plan *p, int64_t b, int64_t u, int64_t t0, int64_t n) {
  if (p->v_dst_quant == PE_KV_FP8_E4M3_ROWSCALE) { /* one head: via a float32 row */
    float row[QROW_FLOATS] __attribute__((aligned(64)));
    for (int64_t i = 0; i < n; i++) {
      int64_t s = pe__sink_slot(p, u, i);
      if (s < 0) continue;
      char *dst = slot_row(p->v_dst, 1, p->dst_block, p->v_dst_s_block, p->v_dst_s_slot, s);
      p->isa->convert[p->v.dtype][PE_F32](op_row(&p->v, b, t0 + i), row, p->v_dim);
      float sc = pe__kv_rowscale_of(p->isa->amax(row, p->v_dim));
      p->isa->kv_quant[PE_KV_FP8_E4M3 - 1][PE_F32](row, dst, p->v_dim, sc);
      memcpy(pe__kv_rowscale_at(dst - (s % p->dst_block) * p->v_dst_s_slot, p->dst_block, p->v_dim,
                                s % p->dst_block),
             &sc, 4);
    }
    return;
  }
  if (p->v_dst_quant) {
    pe_kv_quant_fn quant = p->isa->kv_quant[p->v_dst_quant - 1][p->v.dtype];
    const int one = p->v.s_head == p->v_dim &&
                    p->v_dst_s_head == pe__kv_row_bytes(p->v_dst_quant, p->v_dim, PE_F32);
    for (int64_t i = 0; i < n; i++) {
      int64_t s = pe__sink_slot(p, u, i);
      if (s < 0) continue;
      const char *src = op_row(&p->v, b, t0 + i);
      char *dst = slot_row(p->v_dst, 1, p->dst_block, p->v_dst_s_block, p->v_dst_s_slot, s);
      if (one) /* adjacent rows on both sides: one call (kv/cache.c's move_rows) */
        quant(src, dst, p->v.heads * p->v_dim, p->v_dst_scale);
      else
        for (int64_t h = 0; h < p->v.heads; h++)
          quant(src + h * p->v.s_head * p->v.esize, dst + h * p->v_dst_s_head, p->v_dim,
                p->v_dst_scale);
    }
    return;
  }
  pe_convert_fn conv = p->isa->convert[p->v.dtype][p->v_dst_dtype];
  /* a token's heads adjacent on both sides (a packed QKV row into an NHD
   * cache): one call for all of them */
  const int one = p->v.s_head == p->v_dim && p->v_dst_s_head == p->v_dim;
  for (int64_t i = 0; i < n; i++) {
    int64_t s = pe__sink_slot(p, u, i);
    if (s < 0) continue;
    const char *src = op_row(&p->v, b, t0 + i);
    char *dst = slot_row(p->v_dst, p->v_dst_esize, p->dst_block, p->v_dst_s_block,
                         p->v_dst_s_slot, s);
    if (one) {
      conv(src, dst, p->v.heads * p->v_dim);
      continue;
    }
    for (int64_t h = 0; h < p->v.heads; h++)
      conv(src + h * p->v.s_head * p->v.esize, dst + h * p->v_dst_s_head * p->v_dst_esize,
           p->v_dim);
  }
}

/* The runs of tokens a block's rows in place walk together
 * (pe_rope_block.streams; pe__rope_run sets plan.streams once). */
static inline int32_t block_streams(const pe__rope_plan *p, int64_t n) {
  return n < 2 ? 1 : p->streams;
}
static inline int32_t block_stream_pf(const pe__rope_plan *p, int64_t n) {
  return n < 2 ? 0 : p->stream_pf;
}

/* ---- the walk ---- */

static const pe_rope_cache *row_cache(const pe__rope_plan *p, int64_t b) {
  if (p->source == PE_SOURCE_REROTATE) return p->from;
  return p->caches[p->cache_index ? p->cache_index[b] : 0];
}

/* The block of a chunk of m pairs of n tokens for rows of `heads` heads,
 * each operand's built field by field where it is used: a copy of one
 * shared block (vector moves of fields just stored one by one) waited on
 * store forwarding (Intel Xeon, perf: the copy's line 5 % of the samples of
 * a 190 ns one-token k store; pe-ab, built in place: one-token q+k store f32
 * 0.97 of the time, 32 sequences 0.98, the QK-norm step 0.98-0.99). */
static inline __attribute__((always_inline)) pe_rope_block
chunk_block(const pe__rope_plan *p, const float **cosp, const float **sinp, int64_t n,
            int32_t m, int64_t heads) {
  return (pe_rope_block){.cos = cosp, .sin = sinp, .n_tokens = n, .n_heads = heads,
                         .n_pairs = m, .pair_dist = p->half, .style = p->style,
                         .streams = block_streams(p, n), .stream_pf = block_stream_pf(p, n)};
}

/* Tokens [u, u+n) of one sequence: the norm stage, the rows chunk by chunk
 * and their sinks, then the channels past rotary_dim and v. */
static void run_block_rows(const pe__rope_plan *p, int64_t u, int64_t n, int64_t next,
                           float *scratch, float *scales, const float **cosp,
                           const float **sinp, char *stage) {
  const float *qsp[PE_ENGINE_BLOCK_TOKENS], *ksp[PE_ENGINE_BLOCK_TOKENS];
  const int32_t half = p->half;
  int64_t b = u / p->tokens, t0 = u % p->tokens;
  int64_t rq = norm_rows(p, &p->q), rk = norm_rows(p, &p->k);
  /* Under a norm the next block of the sequence (unit next, -1: none) has
   * its q and k rows prefetched by the kernels while they rotate this
   * block's: the bytes from each row here to its counterpart there. (Into
   * another sequence it did not pay: a decode step of 32 sequences, one
   * token each, 1-2 % slower.) */
  int64_t pfq = 0, pfk = 0;
  if ((rq || rk) && p->norm_pf && next >= 0 && next / p->tokens == b) {
    if (rq) pfq = n * p->q.s_token * p->q.esize;
    if (rk) pfk = n * p->k.s_token * p->k.esize;
  }
  float *qs = scales, *ks = scales + n * rq;
  if (rq) norm_scales(p, &p->q, b, t0, n, qs);
  if (rk) norm_scales(p, &p->k, b, t0, n, ks);
  if (p->q.data || p->k.data || p->mla) {
    const pe_rope_cache *c = row_cache(p, b);
    int direct = p->source == PE_SOURCE_POSITIONS && c->table && !p->inverse;
    int32_t chunk = direct ? half : (int32_t)(PE_ENGINE_SCRATCH_FLOATS / (2 * n));
    if (chunk > half) chunk = half;
    for (int32_t i0 = 0; i0 < half; i0 += chunk) {
      int32_t m = half - i0 < chunk ? half - i0 : chunk;
      block_rows(p, c, u, t0, n, i0, m, direct, scratch, cosp, sinp);
      if (p->q.data) {
        pe_rope_block qb = chunk_block(p, cosp, sinp, n, m, p->q.heads);
        block_norm(p, &qb, qs, rq, p->q_weight, i0, qsp, pfq);
        rotate_in_place(p, &p->q, b, t0, &qb, i0);
      }
      if (p->k.data) {
        pe_rope_block kb = chunk_block(p, cosp, sinp, n, m, p->k.heads);
        block_norm(p, &kb, ks, rk, p->k_weight, i0, ksp, pfk);
        if (p->cache_in_place) rotate_cache_rows(p, u, &kb);
        else if (p->slots && p->dst_quant) store_quant_k(p, b, u, t0, &kb, ks);
        else if (p->slots) store_pairs(p, b, u, t0, &kb, i0);
        else rotate_in_place(p, &p->k, b, t0, &kb, i0);
      }
      if (p->mla) { /* one chunk: every frequency */
        pe_rope_block mb = chunk_block(p, cosp, sinp, n, m, 0);
        pe__mla_block(p, b, u, t0, &mb, stage);
      }
    }
    if (rq) norm_pass_through(p, &p->q, p->q_weight, qs, b, t0, n);
    if (rk && !p->slots) norm_pass_through(p, &p->k, p->k_weight, ks, b, t0, n);
    if (p->k.data && p->slots && !p->dst_quant && !p->cache_in_place)
      store_pass_through(p, b, u, t0, n, ks);
  }
  if (p->v.data && p->slots) store_v(p, b, u, t0, n);
}

/* ---- PE_ROPE_STREAM_CACHE ---- */

/* Bytes of one head's k / v cache row. */
static inline int64_t k_row_bytes(const pe__rope_plan *p) {
  return pe__kv_row_bytes(p->dst_quant, p->head_dim, p->dst_dtype);
}
static inline int64_t v_row_bytes(const pe__rope_plan *p) {
  return pe__kv_row_bytes(p->v_dst_quant, p->v_dim, p->v_dst_dtype);
}

/* Bytes of one token's k and v cache rows in the stage. */
static int64_t stage_token_bytes(const pe__rope_plan *p) {
  return (p->k.data && p->slots ? p->k.heads * k_row_bytes(p) : 0) +
         (p->v.data && p->slots ? p->v.heads * v_row_bytes(p) : 0);
}

/* heads rows of `row` bytes, adjacent at src, into dst's rows dst_head
 * bytes apart, by streaming stores. */
static void stream_rows(const pe_isa *isa, char *dst, int64_t dst_head, const char *src,
                        int64_t row, int64_t heads) {
  if (dst_head == row) {
    isa->stream_copy(dst, src, heads * row);
    return;
  }
  for (int64_t h = 0; h < heads; h++) isa->stream_copy(dst + h * dst_head, src + h * row, row);
}

/* PE_ROPE_STREAM_CACHE's plans of a thread's range, made once: q's rows
 * alone (in place, as ever), and k's and v's rows into the stage - a cache
 * of one block of `per` slots, slot i the sub-block's token i, each
 * token's k rows (heads adjacent), then after the sub-block's k rows its
 * v rows - from which each token's rows go to their cache rows by
 * streaming stores. */
typedef struct stream_walk {
  pe__rope_plan q, kv;
  int64_t kr, vr, kt, vt, per; /* a head's row bytes, a token's, tokens the stage holds */
} stream_walk;

static void stream_walk_init(stream_walk *w, const pe__rope_plan *p, char *stage) {
  w->kr = k_row_bytes(p), w->vr = v_row_bytes(p);
  w->kt = p->k.data ? p->k.heads * w->kr : 0, w->vt = p->v.data ? p->v.heads * w->vr : 0;
  w->per = PE_ENGINE_STAGE_BYTES / (w->kt + w->vt); /* >= 1: stream_ok */
  if (w->per > PE_ENGINE_BLOCK_TOKENS) w->per = PE_ENGINE_BLOCK_TOKENS;
  w->q = *p;
  w->q.k.data = NULL;
  w->q.v.data = NULL;
  pe__rope_plan *g = &w->kv;
  *g = *p;
  g->q.data = NULL;
  g->staged = 1;
  g->dst = stage;
  g->dst_block = w->per;
  g->dst_s_block = 0;
  g->dst_s_head = w->kr / p->dst_esize;
  g->dst_s_slot = p->k.heads * g->dst_s_head;
  g->v_dst = stage + w->per * w->kt;
  g->v_dst_s_block = 0;
  g->v_dst_s_head = w->vr / (p->v.data ? p->v_dst_esize : 1);
  g->v_dst_s_slot = p->v.heads * g->v_dst_s_head;
}

/* The block's rows as run_block_rows computes them; with w
 * (PE_ROPE_STREAM_CACHE), q's rows over the whole block, then k's and v's
 * a stage at a time, each stage's rows streamed to their cache rows. */
static void run_block(const pe__rope_plan *p, int64_t u, int64_t n, int64_t next, float *scratch,
                      float *scales, const float **cosp, const float **sinp, char *stage,
                      const stream_walk *w) {
  if (!w) {
    run_block_rows(p, u, n, next, scratch, scales, cosp, sinp, stage);
    return;
  }
  if (p->q.data) run_block_rows(&w->q, u, n, next, scratch, scales, cosp, sinp, NULL);
  for (int64_t j = 0; j < n; j += w->per) {
    const int64_t m = n - j < w->per ? n - j : w->per;
    run_block_rows(&w->kv, u + j, m, j + m < n ? u + j + m : next, scratch, scales, cosp, sinp,
                   NULL);
    for (int64_t i = 0; i < m; i++) {
      const int64_t s = p->slots[u + j + i];
      if (s < 0) continue;
      if (w->kt)
        stream_rows(p->isa, cache_row(p, s), p->dst_s_head * p->dst_esize, stage + i * w->kt,
                    w->kr, p->k.heads);
      if (w->vt)
        stream_rows(p->isa,
                    slot_row(p->v_dst, p->v_dst_esize, p->dst_block, p->v_dst_s_block,
                             p->v_dst_s_slot, s),
                    p->v_dst_s_head * p->v_dst_esize, w->kv.v_dst + i * w->vt, w->vr, p->v.heads);
    }
  }
}

/* A call that writes fewer cache bytes than this writes them as usual: a
 * streamed call ends waiting for its stores to reach memory (the fence),
 * which a few KiB of ordinary stores into cold rows do not cost. Intel Xeon,
 * pe-bench --fresh-cache auto --stream-cache, one token of one sequence:
 * Qwen3-8B's QK-norm step f32 (8 KiB of k and v rows) 0.85 of the time,
 * bf16 (4 KiB) 1.03, DeepSeek-V3's MLA row f32 (2.3 KiB) 1.10, bf16 1.13. */
#define PE_STREAM_MIN_BYTES 8192

/* Whether plan p's cache rows are streamed (PE_ROPE_STREAM_CACHE): plain
 * rows (f32, f16, bf16; an MLA step's plain rows: mla.c, a token's row at
 * most 4 KiB) whose cos/sin come from the cache's table (the stage is then
 * the scratch, which only rows computed on the fly use), a token's k and v
 * rows within the stage, PE_STREAM_MIN_BYTES of them in the call. FP8 and
 * Q8_0 rows are written as usual: streamed (through the stage) they took
 * 1.09-1.10x the time of ordinary stores into cold rows, where plain rows
 * took 0.62-0.87x (Intel Xeon, pe-ab
 * --fresh-cache, Qwen3-8B's shapes: q8_0 decode of 32 sequences, fp8 e4m3
 * prefill of 512 tokens bf16; f32 decode of 32, bf16 prefill of 512). */
static int stream_ok(const pe__rope_plan *p) {
  if (p->source != PE_SOURCE_POSITIONS || p->inverse || !p->caches[0]->table) return 0;
  const int64_t tokens = p->batch * p->tokens;
  if (p->mla) {
    const pe__mla_plan *m = p->mla;
    return m->m.format == PE_MLA_PLAIN && m->kv.data &&
           tokens * m->kv_dim * m->c_esize >= PE_STREAM_MIN_BYTES;
  }
  const int64_t t = stage_token_bytes(p);
  return p->slots && !p->cache_in_place && t > 0 && t <= PE_ENGINE_STAGE_BYTES &&
         tokens * t >= PE_STREAM_MIN_BYTES && p->dst_quant == PE_KV_PLAIN &&
         (!p->v.data || p->v_dst_quant == PE_KV_PLAIN);
}

/* A token with more normed head rows than the stage holds: q's heads, then
 * k's, in groups of PE_ENGINE_NORM_ROWS, each group a plan of its own (the
 * per-head weight is shared by every head, so only the tensors move), then
 * v. */
static void run_head_groups(const pe__rope_plan *p, int64_t u, float *scratch, float *scales,
                            const float **cosp, const float **sinp, char *stage) {
  pe__rope_plan g = *p;
  g.k.data = NULL;
  g.v.data = NULL;
  for (int64_t h0 = 0; h0 < p->q.heads; h0 += PE_ENGINE_NORM_ROWS) {
    g.q.data = p->q.data + h0 * p->q.s_head * p->q.esize;
    g.q.heads = p->q.heads - h0 < PE_ENGINE_NORM_ROWS ? p->q.heads - h0 : PE_ENGINE_NORM_ROWS;
    run_block(&g, u, 1, -1, scratch, scales, cosp, sinp, stage, NULL);
  }
  g = *p;
  g.q.data = NULL;
  g.v.data = NULL;
  for (int64_t h0 = 0; h0 < p->k.heads; h0 += PE_ENGINE_NORM_ROWS) {
    g.k.data = p->k.data + h0 * p->k.s_head * p->k.esize;
    g.k.heads = p->k.heads - h0 < PE_ENGINE_NORM_ROWS ? p->k.heads - h0 : PE_ENGINE_NORM_ROWS;
    if (p->slots) g.dst = p->dst + h0 * p->dst_s_head * p->dst_esize;
    run_block(&g, u, 1, -1, scratch, scales, cosp, sinp, stage, NULL);
  }
  if (p->v.data) {
    g = *p;
    g.q.data = g.k.data = NULL;
    run_block(&g, u, 1, -1, scratch, scales, cosp, sinp, stage, NULL);
  }
}

/* The scratch: one block's computed rows, or, for a direct walk, which
 * computes none, the row pointers of its long blocks. */
typedef union engine_scratch {
  float rows[PE_ENGINE_SCRATCH_FLOATS];
  const float *ptr[PE_ENGINE_SCRATCH_FLOATS * sizeof(float) / sizeof(const float *)];
} engine_scratch;
#define DIRECT_MAX_TOKENS (PE_ENGINE_SCRATCH_FLOATS * sizeof(float) / (2 * sizeof(const float *)))

/* Heads farther apart than tokens: [B,H,T,D], walked a group of heads at a
 * time (rope_template.h's rows_grouped). */
static inline int heads_far(const pe__rope_operand *op) {
  return op->data && op->heads > 1 &&
         (op->s_head < 0 ? -op->s_head : op->s_head) > (op->s_token < 0 ? -op->s_token : op->s_token);
}

/* Tokens per block of a direct walk (q and/or k rotated in place from table
 * rows, no norm: the rows are the table's, the scratch holds their
 * pointers; run_direct), 0 when the plan is not one (a range of `units`
 * tokens). In [B,H,T,D] every group of heads of the kernel walk reads the
 * block's cos/sin rows again, walking the block's tokens in one run, so the
 * rows must stay in L2 while the group's rows stream through it: a quarter
 * of this core's L2 (read at run time). Long runs per head are what the
 * hardware prefetchers need when heads are T*head_dim apart (Zen 4, 4096
 * tokens: 0.5 -> ~1.0 of the stream bound against 32-token blocks). */
static int64_t direct_block(const pe__rope_plan *p, int64_t units) {
  if (p->source != PE_SOURCE_POSITIONS || p->inverse || p->norm_mode || p->slots ||
      p->cache_in_place || p->v.data || p->mla)
    return 0;
  /* Heads nearer than tokens ([B,T,H,D]) are walked token by token: a block
   * of PE_ENGINE_BLOCK_TOKENS keeps its cos/sin rows in L1 for q and k. */
  if (units <= PE_ENGINE_BLOCK_TOKENS || (!heads_far(&p->q) && !heads_far(&p->k)))
    return PE_ENGINE_BLOCK_TOKENS;
  int64_t n = pe__cpu_l2_bytes() / 4 / (2 * (int64_t)p->half * (int64_t)sizeof(float));
  if (n < PE_ENGINE_BLOCK_TOKENS) n = PE_ENGINE_BLOCK_TOKENS;
  if (n > (int64_t)DIRECT_MAX_TOKENS) n = (int64_t)DIRECT_MAX_TOKENS;
  return n;
}

/* Tokens [u, u+n) of one sequence of a direct plan: the table rows'
 * pointers, then q's and k's rows (run_block's work without its stages,
 * sources and sinks: a decode step is ~40 rows, where each of those costs). */
static void run_direct(const pe__rope_plan *p, int64_t u, int64_t n, const pe_rope_cache *c,
                       const float **cosp, const float **sinp) {
  const int64_t b = p->batch == 1 ? 0 : u / p->tokens, t0 = u - b * p->tokens;
  for (int64_t i = 0; i < n; i++) {
    cosp[i] = pe__rope_table_row(c, p->pos ? p->pos[u + i] : t0 + i);
    sinp[i] = cosp[i] + p->half;
  }
  pe_rope_block blk = {.cos = cosp, .sin = sinp, .n_tokens = n, .n_pairs = p->half,
                       .pair_dist = p->half, .style = p->style,
                       .streams = block_streams(p, n), .stream_pf = block_stream_pf(p, n)};
  const pe__rope_operand *op = &p->q;
  for (int o = 0; o < 2; o++, op = &p->k) {
    if (!op->data) continue;
    blk.n_heads = op->heads;
    p->isa->rope_rows[op->dtype](&blk, op->data + (b * op->s_batch + t0 * op->s_token) * op->esize,
                                 op->s_head, op->s_token);
  }
}

static void engine_range(void *ctx, int64_t begin, int64_t end) {
  const pe__rope_plan *p = ctx;
  engine_scratch scratch __attribute__((aligned(64)));
  float scales[PE_ENGINE_NORM_ROWS];
  const float *cosp[PE_ENGINE_BLOCK_TOKENS], *sinp[PE_ENGINE_BLOCK_TOKENS];
  /* A direct walk (table rows, no scratch rows) takes long blocks
   * (direct_block); the others (block, set on first use): their rows
   * (2*half floats each) are reused by every head of q and k, so they must
   * stay in L1 (the scratch size); rows larger than that alone are computed
   * in chunks of frequencies. Under a norm the block's scales must fit too. */
  const int64_t dblock = direct_block(p, end - begin);
  int64_t block = 0;
  int grouped = 0;
  stream_walk stream, *sw = NULL; /* PE_ROPE_STREAM_CACHE: the stage is the scratch */
  if (p->stream && !p->mla && (p->k.data || p->v.data)) {
    stream_walk_init(&stream, p, (char *)scratch.rows);
    sw = &stream;
  }
  for (int64_t u = begin; u < end;) {
    int64_t t0 = p->batch == 1 ? u : u % p->tokens;
    const pe_rope_cache *dc = dblock ? row_cache(p, p->batch == 1 ? 0 : u / p->tokens) : NULL;
    const float *table = dc ? dc->table : NULL;
    if (!table && !block) {
      block = PE_ENGINE_SCRATCH_FLOATS / (2 * (int64_t)p->half);
      if (block > PE_ENGINE_BLOCK_TOKENS) block = PE_ENGINE_BLOCK_TOKENS;
      int64_t rows = norm_rows(p, &p->q) + norm_rows(p, &p->k);
      grouped = rows > PE_ENGINE_NORM_ROWS;
      if (rows && block > PE_ENGINE_NORM_ROWS / rows) block = PE_ENGINE_NORM_ROWS / rows;
      const int64_t nbytes = norm_row_bytes(p);
      int64_t most = nbytes ? PE_ENGINE_NORM_BLOCK_BYTES / nbytes : block;
      if (most < PE_ENGINE_NORM_MIN_TOKENS) most = PE_ENGINE_NORM_MIN_TOKENS;
      if (block > most) block = most;
      if (block < 1) block = 1;
    }
    int64_t n = table ? dblock : block;
    if (n > p->tokens - t0) n = p->tokens - t0; /* a block never crosses a sequence */
    if (n > end - u) n = end - u;
    if (table) run_direct(p, u, n, dc, scratch.ptr, scratch.ptr + dblock);
    /* PE_ROPE_STREAM_CACHE's stage: the scratch, whose rows a plan with a
     * table (the only one streamed, stream_ok) never computes */
    else if (grouped) run_head_groups(p, u, scratch.rows, scales, cosp, sinp, (char *)scratch.rows);
    else run_block(p, u, n, u + n < end ? u + n : -1, scratch.rows, scales, cosp, sinp,
                   (char *)scratch.rows, sw);
    u += n;
  }
  if (p->stream) pe__stream_fence();
}

/* A pool's split of a direct [B,H,T,D] plan (q and k each with heads
 * farther apart than tokens, one cache with a table): by groups of heads
 * rather than by tokens. Units: sequence-major, then group (PE_HEAD_GROUP
 * heads of q, then of k), then direct_block's token block, so that each
 * thread's contiguous run of units is a range of whole heads and each of
 * its heads a run of every token. Cut by tokens, each head's run was the
 * thread's share of the tokens, and two threads streaming 40 short runs at
 * once lost against one (AMD EPYC Zen 4, 2 threads, f32 32q+8k x 128, NeoX,
 * min of 200, both threads started together on a share each: 128 tokens
 * 1.70x cut by tokens, 2.0x by heads; 512 tokens 1.61-1.65x, 1.96-1.98x). A
 * chunk walks its blocks outer and its groups inner, as one thread walks
 * the whole call, so the block's cos/sin rows are read once per chunk. */
#define PE_HEAD_GROUP 4 /* rope_template.h's PE_ROPE_GROUP: a whole kernel group */

typedef struct group_walk {
  const pe__rope_plan *plan;
  const pe_rope_cache *cache; /* with a table */
  int64_t q_groups, groups, block, blocks; /* per sequence: groups x blocks units */
} group_walk;

static void group_range(void *ctx, int64_t begin, int64_t end) {
  const group_walk *w = ctx;
  const pe__rope_plan *p = w->plan;
  engine_scratch scratch __attribute__((aligned(64)));
  const int64_t nb = w->blocks, per = w->groups * nb;
  pe__rope_plan g = *p;
  for (int64_t u = begin; u < end;) {
    const int64_t b = u / per, r0 = u - b * per, r1 = end - b * per < per ? end - b * per : per;
    const int64_t g0 = r0 / nb, g1 = (r1 - 1) / nb;
    for (int64_t blk = 0; blk < nb; blk++) {
      /* the chunk's groups of this block: units g * nb + blk in [r0, r1) */
      const int64_t ga = g0 + (g0 * nb + blk < r0), gb = g1 - (g1 * nb + blk >= r1);
      if (ga > gb) continue;
      const int64_t t0 = blk * w->block;
      const int64_t n = p->tokens - t0 < w->block ? p->tokens - t0 : w->block;
      const int64_t qa = ga * PE_HEAD_GROUP, qb = (gb + 1) * PE_HEAD_GROUP;
      const int64_t ka = (ga - w->q_groups) * PE_HEAD_GROUP, kb = (gb + 1 - w->q_groups) * PE_HEAD_GROUP;
      g.q.data = NULL;
      g.k.data = NULL;
      if (ga < w->q_groups) {
        g.q.data = p->q.data + qa * p->q.s_head * p->q.esize;
        g.q.heads = (qb < p->q.heads ? qb : p->q.heads) - qa;
      }
      if (gb >= w->q_groups) {
        int64_t k0 = ka > 0 ? ka : 0;
        g.k.data = p->k.data + k0 * p->k.s_head * p->k.esize;
        g.k.heads = (kb < p->k.heads ? kb : p->k.heads) - k0;
      }
      run_direct(&g, b * p->tokens + t0, n, w->cache, scratch.ptr, scratch.ptr + w->block);
    }
    u = b * per + r1;
  }
}

/* Whether a pool splits plan p by head groups (group_range), and how: *w. */
static int group_split(const pe__rope_plan *p, group_walk *w) {
  if (p->cache_index || p->source != PE_SOURCE_POSITIONS || !p->caches[0]->table) return 0;
  if ((p->q.data && !heads_far(&p->q)) || (p->k.data && !heads_far(&p->k))) return 0;
  if (!direct_block(p, p->tokens)) return 0;
  w->plan = p;
  w->cache = p->caches[0];
  w->q_groups = p->q.data ? (p->q.heads + PE_HEAD_GROUP - 1) / PE_HEAD_GROUP : 0;
  w->groups = w->q_groups + (p->k.data ? (p->k.heads + PE_HEAD_GROUP - 1) / PE_HEAD_GROUP : 0);
  w->block = direct_block(p, p->tokens);
  w->blocks = (p->tokens + w->block - 1) / w->block;
  return w->groups > 0;
}

/* Bytes one token costs, for the pool's cut-over: what the sinks read and
 * write - the rotated channels in place (every channel under a norm), every
 * channel of a stored row. */
static int64_t bytes_per_token(const pe__rope_plan *p) {
  int64_t rot = p->norm_mode ? p->head_dim : 2 * (int64_t)p->half, bytes = 0;
  if (p->q.data) bytes += p->q.heads * rot * p->q.esize * 2;
  if (p->k.data)
    bytes += p->slots ? p->k.heads * (p->head_dim * p->k.esize +
                                      pe__kv_row_bytes(p->dst_quant, p->head_dim, p->dst_dtype))
                      : p->k.heads * rot * p->k.esize * 2;
  if (p->v.data)
    bytes += p->v.heads * (p->v_dim * p->v.esize +
                           pe__kv_row_bytes(p->v_dst_quant, p->v_dim, p->v_dst_dtype));
  if (p->mla) { /* q's whole heads read and written; a kv row read, a cache row written */
    const pe__mla_plan *m = p->mla;
    bytes += m->qh.heads * m->q_dim * m->qh.esize * 2 +
             m->kv_dim * (m->kv.esize + (m->m.format == PE_MLA_PLAIN ? m->c_esize : 1));
  }
  return bytes;
}

/* The streams of a call (plan.streams): on AMD Zen 1 to 4 (families 0x17 to
 * 0x19), a call whose tensors take more than half the last-level cache
 * streams them from and to memory, where several streams at once go faster
 * than one (isa_template.h's rows_streams) - four in all, shared out among
 * the pool's threads; a smaller call, whose rows the caches may hold, goes
 * token by token. AMD EPYC Zen 3 (32 MiB L3), Llama-3-8B [B,T,H,D],
 * pe_apply_rope_qk in place / pe_apply_rope_qk_store (q in place), both
 * builds alternated in one process (pe-ab), 4096 tokens: f32 0.73-0.81 /
 * 0.78-0.84 of the time, f16 0.78 / 0.84, bf16 0.92-0.95 / 0.94-0.98; f32
 * 1024 tokens 0.70-0.85, bf16 2048 0.94-0.97. In streams while the rows
 * were in L3 (f32 128-512 tokens, bf16 1024): 1.04-1.21x. Two threads of
 * four streams each took 2.95-3.18 ms where token order took 2.49-2.90 and
 * two streams each 2.32-2.37 (f32 4096 tokens). Normed blocks keep their
 * order: the norm reads a few tokens' rows twice, from L2. Other CPUs take
 * such calls token by token, their rows prefetched (plan.stream_pf), which
 * went faster there. AMD EPYC Zen 5 (family 0x1a, 32 MiB L3), Llama-3-8B
 * [B,T,H,D] 4096 tokens in place, pe-bench --threads 1, both builds
 * alternated: f32 4.6-5.7 -> 2.7-3.1 ms (0.52-0.58 -> 0.89-1.05 of the
 * stream bound), bf16 3.3-3.6 -> 1.3-1.7 ms, pe_apply_rope_qk_store q+k
 * bf16 4.3-4.4 -> 1.4-1.5 ms, four sequences of 512 tokens bf16 0.96-1.27
 * -> 0.49-0.54 ms; token order without the prefetch 3.3-3.7 ms f32, two
 * streams 3.1-4.5. Intel Xeon (Emerald Rapids, isa_template.h's
 * stream_ahead): 5.8-6.0 ms f32 against 6.2-6.4 in four streams (its 260
 * MiB L3 never chose them). Zen 3 and 4 keep the streams: on Zen 3, one
 * stream prefetched ahead gained nothing over the hardware's prefetch
 * (rows_streams). */
#define PE_ENGINE_STREAMS 4
/* The AMD families (cpuid, base + extended) that take the four streams, and
 * the first that takes the near-L3 prefetch rule below (run_walk). Build
 * knobs for measuring one rule against the other on a CPU
 * (scripts/walk-ab.sh builds the library with other values), not settings:
 * the defaults are what was measured. */
#ifndef PE_STREAMS_AMD_MIN
#define PE_STREAMS_AMD_MIN 0x17 /* Zen 1 */
#endif
#ifndef PE_STREAMS_AMD_MAX
#define PE_STREAMS_AMD_MAX 0x19 /* Zen 3 and 4 */
#endif
#ifndef PE_NEAR_L3_AMD_MIN
#define PE_NEAR_L3_AMD_MIN 0x1a /* Zen 5 */
#endif
/* The rows' software prefetch: whole rows walked token by token prefetch
 * a few KiB on (plan.stream_pf; isa_template.h's stream_ahead says why and
 * what it gains), a normed block its successor's rows (plan.norm_pf;
 * run_block_rows). Where it pays depends on how near the caches the rows
 * sit in are. On Intel's Xeon, whose L3 is far (a mesh), it paid from L3
 * and cost in L2: on when a thread's share of the call is more than its
 * core's L2 holds, normed blocks always (Llama-3-8B [B,T,H,D] in place, 64
 * tokens: bf16 29-31 -> 32-36 us, f32 29-30 -> 30-32 with it). On AMD Zen
 * 5, whose L3 is near (the core complex's own) and whose hardware
 * prefetchers keep up from it, it cost for every call the L3 holds and paid
 * only from memory: on from half the last-level cache. AMD EPYC Zen 5 (1
 * MiB L2, 32 MiB L3), Qwen3-8B heads, `pe-ab` against prefetching, tokens
 * (bytes the call touches): in place f32 128 (2.5 MiB) 0.89 of the time,
 * 512 (10 MiB) 0.75, 768 (15 MiB) 0.98, 1024 (20 MiB) 1.32, 2048 1.50; bf16
 * 1024 (10 MiB) 0.94, 2048 1.12, 4096 1.32; into the cache f32 512 0.75,
 * 1024 1.18; QK-norm step with v, f32 64 (2 MiB) 0.76, 128 0.78, 256 0.78,
 * 512 (16 MiB) 0.92, 1024 1.05, 2048 1.05; bf16 128 0.94, 512 1.02, 1024
 * (16 MiB) 1.17, 2048 1.57. Zen 1 to 4 keep the Xeon's rule, unmeasured
 * against this one. */
static void run_walk(pe__rope_plan *p, const pe_threadpool *pool) {
  p->streams = 1;
  p->stream_pf = 0;
  p->norm_pf = 0;
  /* a block of one token neither streams nor prefetches (block_streams,
   * block_stream_pf; a normed block's successor is in another sequence):
   * decode steps skip the sums below (3 % of a QK-norm step of one token) */
  if (p->tokens < 2) return;
  /* the memory the call touches: bytes_per_token counts a row rotated in
   * place twice (read and written), a row read into a cache row once each */
  int64_t bytes = bytes_per_token(p),
          rot = p->norm_mode ? p->head_dim : 2 * (int64_t)p->half;
  if (p->q.data) bytes -= p->q.heads * rot * p->q.esize;
  if (p->k.data && !p->slots) bytes -= p->k.heads * rot * p->k.esize;
  bytes *= p->batch * p->tokens;
  int32_t threads = pool ? pe_threadpool_size(pool) : 1;
  if (threads < 1) threads = 1;
  const int amd = pe__cpu_amd_family(), near_l3 = amd >= PE_NEAR_L3_AMD_MIN; /* Zen 5 on */
  const int64_t half_llc = pe__cpu_llc_bytes() / 2;
  p->norm_pf = near_l3 ? bytes >= half_llc : 1;
  if (p->norm_mode) return;
  p->stream_pf = near_l3 ? bytes >= half_llc : bytes / threads > pe__cpu_l2_bytes();
  if (amd >= PE_STREAMS_AMD_MIN && amd <= PE_STREAMS_AMD_MAX && bytes > half_llc &&
      threads < PE_ENGINE_STREAMS)
    p->streams = PE_ENGINE_STREAMS / threads; /* Zen 1 to 4 */
}

void pe__rope_run(pe__rope_plan *plan, pe_threadpool *pool) {
  /* One token of a direct plan (a decode step of one sequence: one unit,
   * which no pool splits): its rows straight away, without engine_range's
   * block loop and the pool's cost model (113 of the ~1150 instructions a
   * call runs around the rows' kernel; Zen 4, 32q/8kv x 128 f32: 305-316 ->
   * 297-304 ns per call, fastest of 100). The pool is released as
   * pe__pool_run releases it for an empty range. */
  const pe_rope_cache *c;
  if (plan->batch * plan->tokens == 1 && direct_block(plan, 1) &&
      (c = row_cache(plan, 0))->table != NULL) {
    const float *cosp[1], *sinp[1];
    run_direct(plan, 0, 1, c, cosp, sinp);
    if (pool) pe__pool_run(pool, 0, 1, 0, engine_range, (void *)plan);
    return;
  }
  if (plan->stream && !stream_ok(plan)) plan->stream = 0;
  run_walk(plan, pool);
  if (!pool) { /* what pe__pool_run does without a pool, minus the cost model */
    if (plan->batch * plan->tokens > 0) engine_range((void *)plan, 0, plan->batch * plan->tokens);
    return;
  }
  group_walk w;
  if (pe_threadpool_size(pool) > 1 && group_split(plan, &w)) {
    int64_t units = plan->batch * w.groups * w.blocks;
    int64_t bytes = bytes_per_token(plan) * plan->tokens / (w.groups * w.blocks) + 1;
    pe__pool_run(pool, units, 1, bytes, group_range, &w);
    return;
  }
  pe__pool_run(pool, plan->batch * plan->tokens, 1, bytes_per_token(plan), engine_range,
               (void *)plan);
}

void pe__rope_plan_init(pe__rope_plan *p, const pe_rope_cache *c, const pe_tensor *q,
                        const pe_tensor *k, uint32_t flags, pe__rope_source source) {
  const pe_tensor *any = q ? q : k; /* NULL: the caller sets batch and tokens */
  /* Through the C library's memset (the size hidden from the compiler):
   * gcc expands the plan's constant size inline as `rep stosq`, whose
   * start-up cost is ~3 % of a decode step (Zen 4, 32q/8kv x 128 f32,
   * fastest of 100: 294-300 -> 285-289 ns per call). */
  volatile size_t size = sizeof *p;
  memset(p, 0, size);
  p->isa = pe__isa();
  p->half = c->half;
  p->head_dim = c->p.head_dim;
  p->style = c->p.style;
  p->inverse = (flags & PE_ROPE_INVERSE) != 0;
  p->stream = (flags & PE_ROPE_STREAM_CACHE) != 0;
  p->batch = any ? any->shape[0] : 0;
  p->tokens = any ? any->shape[2] : 0;
  p->source = source;
  pe__rope_operand_from(&p->q, q);
  pe__rope_operand_from(&p->k, k);
}

/* ---- building a plan ---- */

void pe__rope_operand_from(pe__rope_operand *op, const pe_tensor *t) {
  memset(op, 0, sizeof *op);
  /* An empty tensor is absent: its strides were never validated (the other
   * operand of the call may still have rows). */
  if (!t || pe__tensor_empty(t)) return;
  op->data = t->data;
  op->dtype = t->dtype;
  op->esize = (int64_t)pe__dtype_size(t->dtype);
  op->heads = t->shape[1];
  op->s_batch = pe__stride(t, 0);
  op->s_head = pe__stride(t, 1);
  op->s_token = pe__stride(t, 2);
}
