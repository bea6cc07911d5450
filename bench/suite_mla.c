/* suite_mla.c - the mla suite: DeepSeek-V3's multi-head latent attention
 * step after its projections (pe_mla_rope_store: kv_a_layernorm on the
 * latent, RoPE on k_pe and on every q head's rope slice, the [kv_c | k_pe]
 * row into a paged cache), against the unfused sequence an engine runs
 * without it. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pe_bench.h"

/* The shapes are the deepseek-v3 preset's (model.c): 128 q heads of
 * qk_nope 128 + qk_rope 64 channels, a kv_a row of kv_lora_rank 512 latent
 * channels + the 64 of k_pe, interleaved (GPT-J) pairs, YaRN x40 over 4096
 * original positions; the latent's RMSNorm eps 1e-6 (rms_norm_eps). q is
 * q_b_proj's output [B, T, 128, 192] (token-major), kv the kv_a rows [B, T,
 * 576]; the cache is vLLM's MLA cache, [blocks, 64, 576] rows of the
 * format, each sequence's slots in blocks of its own scattered through it.
 *
 * The call is pe_mla_rope_store. The 'x unfused' column is the unfused
 * sequence made of libposenc's own pieces and a plain loop, timed
 * interleaved with it:
 *   plain cache: each step its own pass - pe_apply_rope_qk on q's rope
 *     slices (a strided view, in place), a plain C RMSNorm loop (float32
 *     sum) over each token's 512 latent channels written into its cache
 *     row, converted to the cache dtype, then pe_apply_rope_qk_store of
 *     k_pe (a view of the kv rows) into the cache rows' rope slices (a
 *     view of the cache);
 *   PE_MLA_FP8_E4M3: vLLM's order - the RMSNorm loop into a staging row of
 *     the kv dtype (kv_c_normed, with k_pe copied beside it), one
 *     pe_apply_rope_qk on q's rope slices and the staged k_pe, then
 *     pe_kv_write quantizing the staged rows into the cache
 *     (concat_and_cache_mla with kv_cache_dtype "fp8", k_scale 1.0);
 *   PE_MLA_FP8_DS: none (no libposenc piece writes its per-tile scales).
 * The bound streams the bytes the fused call touches once: q's rope slices
 * read and written (laid out as in q), each kv row read and its cache row
 * written. The compute floor: q's slices rotated in place, and each kv row
 * into its cache row (FL_MLA: the latent's sum of squares, scale, weight
 * and conversion or quantization, k_pe rotated). */
#define MLA_BLOCK 64 /* the cache's block size (tokens): vLLM's MLA default */

typedef struct mla_state {
  pe_rope_cache *cache;
  pe_mla mla;
  int64_t lat, rope; /* the kv row's latent and rope channels */
  pe_tensor q, q_pe; /* q, and the view of its rope slices */
  pe_tensor kv, k_pe;
  pe_tensor kc, kc_pe; /* the MLA cache, and (plain) the view of its rows' rope slices */
  pe_tensor stage, stage_pe; /* FP8_E4M3's unfused side: the staged rows */
  pe_kv_cache kvq;           /* ... and the cache as pe_kv_write sees it */
  float *w, scale;
  int64_t *slots, *pos;
  fresh_slots fresh; /* each call's slots (--fresh-cache) */
} mla_state;

static pe_status mla_call(bench_case *c) {
  mla_state *s = c->st;
  s->slots = (int64_t *)fresh_next(&s->fresh);
  return pe_mla_rope_store(s->cache, &s->mla, &s->q, &s->kv, &s->kc, s->slots, s->pos, pb_store_flags,
                           c->pool);
}

/* The plain RMSNorm loop (DeepseekV3RMSNorm in float32: x * rsqrt(mean(x^2)
 * + eps) * w) of each token's latent into its cache row, converted to the
 * cache dtype; staged: into the token's staging row instead, its k_pe
 * channels copied after it. */
static void mla_rmsnorm(const mla_state *s, int staged) {
  const pe_tensor *x = &s->kv;
  const int sd = x->dtype, dd = staged ? s->stage.dtype : s->kc.dtype; /* kc: plain */
  const int64_t ses = (int64_t)dtype_size(sd), des = (int64_t)dtype_size(dd);
  const int64_t lat = s->lat, T = x->shape[2];
  const float eps = s->mla.kv_eps;
  for (int64_t b = 0; b < x->shape[0]; b++)
    for (int64_t t = 0; t < T; t++) {
      int64_t slot = s->slots[b * T + t];
      if (slot < 0) continue;
      const char *src = (const char *)x->data + (b * x->stride[0] + t * x->stride[2]) * ses;
      const pe_tensor *d = staged ? &s->stage : &s->kc;
      const int64_t at = staged ? b * d->stride[0] + t * d->stride[2]
                                : slot / MLA_BLOCK * d->stride[0] + slot % MLA_BLOCK * d->stride[2];
      char *dst = (char *)d->data + at * des;
      float ss = 0;
      for (int64_t e = 0; e < lat; e++) {
        float v = pb_load(sd, src, e);
        ss += v * v;
      }
      float r = 1.0f / sqrtf(ss / (float)lat + eps);
      for (int64_t e = 0; e < lat; e++) pb_store(dd, dst, e, pb_load(sd, src, e) * r * s->w[e]);
      if (staged) memcpy(dst + lat * des, src + lat * ses, (size_t)(s->rope * ses));
    }
}

static void mla_unfused_plain(bench_case *c) {
  mla_state *s = c->st;
  s->slots = (int64_t *)fresh_next(&s->fresh);
  pe_apply_rope_qk(s->cache, &s->q_pe, NULL, s->pos, 0, c->pool);
  mla_rmsnorm(s, 0);
  pe_apply_rope_qk_store(s->cache, NULL, &s->k_pe, &s->kc_pe, s->slots, s->pos, 0, c->pool);
}

static void mla_unfused_fp8(bench_case *c) {
  mla_state *s = c->st;
  s->slots = (int64_t *)fresh_next(&s->fresh);
  mla_rmsnorm(s, 1);
  pe_apply_rope_qk(s->cache, &s->q_pe, &s->stage_pe, s->pos, 0, c->pool);
  pe_kv_write(&s->kvq, &s->stage, NULL, s->slots);
}

/* A view of x's channels [off, off + n). */
static pe_tensor channels(const pe_tensor *x, int64_t off, int64_t n, size_t esize) {
  pe_tensor v = *x;
  v.data = (char *)x->data + off * (int64_t)esize;
  v.shape[3] = n;
  return v;
}

static uint64_t mla_rng = 0x853c49e6748fea9bull;
static uint64_t mla_next(void) { /* the slots' shuffle, its own sequence */
  mla_rng ^= mla_rng << 13;
  mla_rng ^= mla_rng >> 7;
  mla_rng ^= mla_rng << 17;
  return mla_rng;
}

static const char *fmt_name(int fmt) {
  return fmt == PE_MLA_FP8_E4M3 ? "fp8" : fmt == PE_MLA_FP8_DS ? "fp8_ds" : "";
}

static void mla_case(int fmt, int64_t batch, int64_t tokens, int dt, int threads) {
  const model_preset *m = model_find("deepseek-v3");
  const int64_t H = m->heads, nope = m->mla.qk_nope_head_dim, R = m->mla.qk_rope_head_dim;
  const int64_t lat = m->mla.kv_lora_rank, kv_dim = lat + R, q_dim = nope + R;
  const int64_t n = batch * tokens, es = (int64_t)dtype_size(dt);
  mla_state s;
  memset(&s, 0, sizeof s);
  s.lat = lat, s.rope = R;
  /* the rope of the rope slices: head_dim = rotary_dim = qk_rope_head_dim */
  rope_geom g = {(int)H, 1, (int)R, (int)R, m->style, m->base, m};
  int64_t max_pos = positions_used(batch, tokens) > 8192 ? positions_used(batch, tokens) : 8192;
  char why[200] = "";
  if (rope_cache_preset(&g, max_pos, &s.cache, why, sizeof why) != PE_OK) {
    not_available("mla", why);
    return;
  }
  s.q = make_tensor(dt, batch, H, tokens, q_dim, 1);
  s.q_pe = channels(&s.q, nope, R, dtype_size(dt));
  s.kv = make_tensor(dt, batch, 1, tokens, kv_dim, 1);
  s.k_pe = channels(&s.kv, lat, R, dtype_size(dt));
  s.w = xalloc((size_t)lat * sizeof(float));
  /* Weights of magnitude 1 (random signs), as the qknorm suite's: a
   * weight's value costs nothing, and the kv rows are read only. */
  for (int64_t i = 0; i < lat; i++) s.w[i] = frand() < 0 ? -1.0f : 1.0f;
  pe_mla_init(&s.mla);
  s.mla.rope_dim = (int32_t)R;
  s.mla.kv_norm_dim = (int32_t)lat;
  s.mla.kv_rope_offset = (int32_t)lat;
  s.mla.q_rope_offset = (int32_t)nope;
  s.mla.kv_eps = 1e-6f;
  s.mla.kv_weight = s.w;
  s.mla.format = (uint32_t)fmt;
  s.scale = 1.0f; /* vLLM's k_scale without calibration */
  if (fmt == PE_MLA_FP8_E4M3) s.mla.scale = &s.scale;

  /* Positions (decode: sequence b at 4000 + 7b; prefill: 0..T-1) and their
   * slots: each sequence's blocks of MLA_BLOCK positions at physical blocks
   * shuffled through the cache, as a block table leaves them. */
  s.pos = xalloc((size_t)n * sizeof *s.pos);
  s.slots = xalloc((size_t)n * sizeof *s.slots);
  int64_t blocks = 0;
  for (int64_t b = 0; b < batch; b++) {
    for (int64_t t = 0; t < tokens; t++)
      s.pos[b * tokens + t] = (tokens == 1 ? 4000 + 7 * b : 0) + t;
    blocks += s.pos[b * tokens + tokens - 1] / MLA_BLOCK - s.pos[b * tokens] / MLA_BLOCK + 1;
  }
  int64_t *phys = xalloc((size_t)blocks * sizeof *phys);
  for (int64_t i = 0; i < blocks; i++) phys[i] = i;
  for (int64_t i = blocks - 1; i > 0; i--) {
    int64_t j = (int64_t)(mla_next() % (uint64_t)(i + 1)), tmp = phys[i];
    phys[i] = phys[j], phys[j] = tmp;
  }
  for (int64_t b = 0, next = 0; b < batch; b++) {
    const int64_t first = s.pos[b * tokens] / MLA_BLOCK;
    for (int64_t t = 0; t < tokens; t++) {
      int64_t p = s.pos[b * tokens + t];
      s.slots[b * tokens + t] = phys[next + p / MLA_BLOCK - first] * MLA_BLOCK + p % MLA_BLOCK;
    }
    next += s.pos[b * tokens + tokens - 1] / MLA_BLOCK - first + 1;
  }
  free(phys);

  /* The cache: elements of the kv dtype, or bytes */
  const int64_t row = fmt == PE_MLA_PLAIN      ? kv_dim * es
                      : fmt == PE_MLA_FP8_E4M3 ? kv_dim
                                               : lat + 4 * (lat / 128) + 2 * R; /* 656 */
  /* --fresh-cache: K sets of slots. Prefill: set r in copy r of the
   * blocks. Decode (each sequence one row of its block): set r's rows r
   * after set 0's in the same blocks, as the sequence's next steps write
   * them, then in the next copy of the blocks once a block's rows are all
   * used, so that K calls write K rows per sequence and nothing more. */
  const int64_t sets = fresh_begin((double)(n * row));
  const int64_t per_copy = tokens == 1 ? MLA_BLOCK : 1;
  s.slots = fresh_init(&s.fresh, s.slots, n, blocks * MLA_BLOCK);
  if (tokens == 1) /* set 0 holds the slots, and the formula leaves it so */
    for (int64_t r = 0; r < sets; r++)
      for (int64_t i = 0; i < n; i++) {
        const int64_t sl = s.slots[i];
        s.slots[r * n + i] = (r / MLA_BLOCK) * blocks * MLA_BLOCK + sl / MLA_BLOCK * MLA_BLOCK +
                             (sl % MLA_BLOCK + r) % MLA_BLOCK;
      }
  blocks *= (sets + per_copy - 1) / per_copy;
  size_t cache_bytes = (size_t)(blocks * MLA_BLOCK * row);
  pe_tensor kc = {xalloc(cache_bytes), (pe_dtype)dt, {blocks, 1, MLA_BLOCK, kv_dim},
                  {MLA_BLOCK * kv_dim, MLA_BLOCK * kv_dim, kv_dim, 1}};
  if (fmt != PE_MLA_PLAIN) /* strides in bytes, dtype not read */
    kc.stride[0] = kc.stride[1] = MLA_BLOCK * row, kc.stride[2] = row;
  memset(kc.data, 0, cache_bytes);
  s.kc = kc;

  bench_case c;
  memset(&c, 0, sizeof c);
  c.suite = "mla";
  snprintf(c.name, sizeof c.name, "%s%s%s %" PRId64 "x%" PRId64, fmt_name(fmt), fmt ? " " : "",
           tokens == 1 ? "decode" : "prefill", batch, tokens);
  char shape[96];
  snprintf(shape, sizeof shape, "%dq x%d rot%d gptj kv %d+%d", m->heads, (int)q_dim, (int)R,
           (int)lat, (int)R);
  snprintf(c.shape, sizeof c.shape, "%.47s", shape);
  c.dtype = dt;
  c.threads = threads;
  c.pool = pool_for(threads);
  c.st = &s;
  c.call = mla_call;
  if (fmt == PE_MLA_PLAIN) {
    s.kc_pe = channels(&s.kc, lat, R, dtype_size(dt));
    c.textbook = mla_unfused_plain;
    snprintf(c.note, sizeof c.note, "unfused: pe_apply_rope_qk (q_pe) + RMSNorm loop into the "
                                    "cache + pe_apply_rope_qk_store (k_pe)");
  } else if (fmt == PE_MLA_FP8_E4M3) {
    s.stage = make_tensor(dt, batch, 1, tokens, kv_dim, 1);
    s.stage_pe = channels(&s.stage, lat, R, dtype_size(dt));
    pe_kv_cache_init(&s.kvq);
    s.kvq.k = &s.kc;
    s.kvq.k_quant = PE_KV_FP8_E4M3;
    s.kvq.k_scale = &s.scale;
    c.textbook = mla_unfused_fp8;
    snprintf(c.note, sizeof c.note, "scale 1; unfused: RMSNorm loop + pe_apply_rope_qk + "
                                    "pe_kv_write");
  } else {
    snprintf(c.note, sizeof c.note, "per-128 tile scales, bf16 k_pe; no unfused sequence");
  }
  /* q's rope slices read and written, the kv rows read, the cache rows written */
  c.bytes = (double)n * (double)(2 * H * R * es + kv_dim * es + row);
  c.probe[0] = probe_like(&s.q, R); /* the slices' layout: 64 of every 192 channels */
  c.probe[1] = probe_sink((double)n * (double)(kv_dim * es), (double)n * (double)row);
  c.n_probe = 2;
  floor_add(&c, (floor_stage){.kind = FL_ROT, .src = dt, .dst = dt, .style = m->style,
                              .inplace = 1, .width = (int)R, .rot = (int)R, .heads = (int)H,
                              .rows = n * H});
  floor_add(&c, (floor_stage){.kind = FL_MLA, .src = dt, .dst = dt,
                              .fmt = fmt == PE_MLA_FP8_E4M3 ? FL_FP8
                                     : fmt == PE_MLA_FP8_DS ? FL_FP8_DS
                                                            : FL_NONE,
                              .fp8_mul = fmt == PE_MLA_FP8_E4M3, /* scale 1: exact reciprocal */
                              .style = m->style, .width = (int)kv_dim, .rot = (int)R,
                              .scale = s.scale, .heads = 1, .rows = n});
  progress("[%.0fs] mla %s %s %d thr", (now_ns() - run_start) / 1e9, c.name, dtype_name(dt),
           threads);
  measure(&c);
  free_probes(&c);
  free(s.q.data);
  free(s.kv.data);
  free(s.kc.data);
  free(s.stage.data);
  free(s.w);
  fresh_free(&s.fresh); /* s.slots: one of its sets */
  free(s.pos);
  pe_rope_cache_destroy(s.cache);
}

void suite_mla(void) {
  for (int ti = 0; ti < opt.n_threads; ti++) {
    const int th = opt.threads[ti];
    for (int d = 0; d < 2; d++) {
      int dt = opt.dtype >= 0 ? opt.dtype : d ? PE_BF16 : PE_F32;
      if (opt.tokens) {
        mla_case(PE_MLA_PLAIN, opt.batch, opt.tokens, dt, th);
      } else {
        mla_case(PE_MLA_PLAIN, 1, 1, dt, th);    /* decode, one sequence */
        mla_case(PE_MLA_PLAIN, 32, 1, dt, th);   /* decode, a batch of 32 */
        mla_case(PE_MLA_PLAIN, 1, 512, dt, th);  /* prefill */
      }
      if (opt.dtype >= 0) break;
    }
    /* the FP8 caches, from bf16 activations (DeepSeek-V3's) */
    int dt = opt.dtype >= 0 ? opt.dtype : PE_BF16;
    for (int fmt = PE_MLA_FP8_E4M3; fmt <= PE_MLA_FP8_DS; fmt++) {
      if (opt.tokens) {
        mla_case(fmt, opt.batch, opt.tokens, dt, th);
      } else {
        mla_case(fmt, 32, 1, dt, th);
        mla_case(fmt, 1, 512, dt, th);
      }
    }
  }
}
