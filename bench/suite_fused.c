/* suite_fused.c - the serving engines' fused calls against the unfused
 * sequences an engine runs without them: the fused suite (RoPE + the paged
 * cache store, M-RoPE, several frequency sets in one call) and the kvquant
 * suite (RoPE + K and V into fp8/q8_0 caches, the q8_0 context shift). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mrope_case.h"
#include "pe_bench.h"

/* ------------------------------------------------------------------------ */
/* fused: RoPE for serving engines                                          */
/* ------------------------------------------------------------------------ */

/* Each case's baseline is what an engine does without the fused entry
 * point, timed interleaved with it in the same run; its ratio is the
 * "x textbook loop" column ('x unfused' in the narrow table; baseline ns /
 * kernel ns):
 *   store   pe_apply_rope_qk_store  vs  pe_apply_rope_qk + copying k's rows
 *           into their cache slots (vLLM's rotary_embedding + reshape_and_cache);
 *   mrope   pe_apply_mrope_qk       vs  pe_apply_rope_qk (plain RoPE, same shape);
 *   multi   pe_apply_rope_qk_multi  vs  one pe_apply_rope_qk per batch row. */
#define FUSED_CACHES 4

typedef struct fused_state {
  pe_rope_cache *cache, *caches[FUSED_CACHES];
  pe_tensor q, k, kv;  /* kv: [blocks, kv_heads, FUSED_BLOCK, head_dim], NHD storage */
  pe_tensor *qp;       /* &q or NULL (k only) */
  int64_t *slots, *pos, *pos3;
  fresh_slots fresh; /* store: each call's slots (--fresh-cache) */
  int32_t *index;
  int32_t section[3];
} fused_state;

static pe_status fused_store_call(bench_case *c) {
  fused_state *s = c->st;
  s->slots = (int64_t *)fresh_next(&s->fresh);
  return pe_apply_rope_qk_store(s->cache, s->qp, &s->k, &s->kv, s->slots, s->pos, pb_store_flags,
                                c->pool);
}

/* The unfused pair: rotate k (and q) in place, then copy each token's rows
 * to its slot (same dtype: memcpy per head row). */
static void fused_store_baseline(bench_case *c) {
  fused_state *s = c->st;
  s->slots = (int64_t *)fresh_next(&s->fresh);
  pe_apply_rope_qk(s->cache, s->qp, &s->k, s->pos, 0, c->pool);
  size_t es = dtype_size(s->k.dtype), row = (size_t)s->k.shape[3] * es;
  for (int64_t b = 0; b < s->k.shape[0]; b++)
    for (int64_t t = 0; t < s->k.shape[2]; t++) {
      int64_t slot = s->slots[b * s->k.shape[2] + t];
      if (slot < 0) continue;
      const char *src = (const char *)s->k.data + (b * s->k.stride[0] + t * s->k.stride[2]) * (int64_t)es;
      char *dst = (char *)s->kv.data +
                  ((slot / FUSED_BLOCK) * s->kv.stride[0] + (slot % FUSED_BLOCK) * s->kv.stride[2]) * (int64_t)es;
      for (int64_t h = 0; h < s->k.shape[1]; h++)
        memcpy(dst + h * s->kv.stride[1] * (int64_t)es, src + h * s->k.stride[1] * (int64_t)es, row);
    }
}

static pe_status fused_mrope_call(bench_case *c) {
  fused_state *s = c->st;
  return pe_apply_mrope_qk(s->cache, &s->q, &s->k, s->pos3, s->section, 0, c->pool);
}
static void fused_mrope_baseline(bench_case *c) {
  fused_state *s = c->st;
  pe_apply_rope_qk(s->cache, &s->q, &s->k, s->pos, 0, c->pool);
}

static pe_status fused_multi_call(bench_case *c) {
  fused_state *s = c->st;
  return pe_apply_rope_qk_multi((const pe_rope_cache *const *)s->caches, FUSED_CACHES, s->index, &s->q, &s->k,
                  s->pos, 0, c->pool);
}
static void fused_multi_baseline(bench_case *c) {
  fused_state *s = c->st;
  for (int64_t b = 0; b < s->q.shape[0]; b++) {
    pe_tensor q = s->q, k = s->k;
    q.data = (char *)q.data + b * q.stride[0] * (int64_t)dtype_size(q.dtype);
    k.data = (char *)k.data + b * k.stride[0] * (int64_t)dtype_size(k.dtype);
    q.shape[0] = k.shape[0] = 1;
    pe_apply_rope_qk(s->caches[s->index[b]], &q, &k, s->pos + b * q.shape[2], 0, c->pool);
  }
}

static void fused_free(fused_state *s) {
  free(s->q.data);
  free(s->k.data);
  free(s->kv.data);
  fresh_free(&s->fresh); /* s->slots: one of its sets */
  free(s->pos);
  free(s->pos3);
  free(s->index);
  pe_rope_cache_destroy(s->cache);
  for (int i = 0; i < FUSED_CACHES; i++) pe_rope_cache_destroy(s->caches[i]);
}

/* kind: 0 store k, 1 store q+k, 2 mrope, 3 multi. */
static void fused_case(int kind, int64_t batch, int64_t tokens, int dt, int threads) {
  static const char *const kinds[4] = {"store k", "store q+k", "mrope", "multi"};
  fused_state s;
  memset(&s, 0, sizeof s);
  rope_geom g = geometry();
  if (kind == 2) { /* Qwen2-VL-7B's text model: 28q/4kv x 128, theta 1e6, sections 16/24/24 */
    g.heads = 28, g.kv_heads = 4, g.head_dim = 128, g.rotary_dim = 128, g.style = PE_ROPE_NEOX;
    g.base = 1000000.0, g.scaled = NULL;
  }
  int64_t max_pos = tokens + 64 > 8192 ? tokens + 64 : 8192;
  if (positions_used(batch, tokens) > max_pos) max_pos = positions_used(batch, tokens);
  char why[200] = "";
  if (rope_cache_for(&g, max_pos, &s.cache, why, sizeof why) != PE_OK) {
    not_available("fused", why);
    return;
  }
  s.q = make_tensor(dt, batch, g.heads, tokens, g.head_dim, 1);
  s.k = make_tensor(dt, batch, g.kv_heads, tokens, g.head_dim, 1);
  s.pos = xalloc((size_t)(batch * tokens) * sizeof *s.pos);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t t = 0; t < tokens; t++) s.pos[b * tokens + t] = (tokens == 1 ? 4000 + 7 * b : 0) + t;
  bench_case c;
  memset(&c, 0, sizeof c);
  c.suite = "fused";
  snprintf(c.name, sizeof c.name, "%s %s %" PRId64 "x%" PRId64, kinds[kind],
           kind == 2 ? "qwen2-vl-7b" : model_label(), batch, tokens);
  geometry_shape(&g, c.shape, sizeof c.shape);
  c.dtype = dt;
  c.threads = threads;
  c.pool = pool_for(threads);
  c.st = &s;
  double es = (double)dtype_size(dt), qb = (double)(batch * g.heads * tokens) * g.head_dim * es,
         kb = (double)(batch * g.kv_heads * tokens) * g.head_dim * es;
  if (kind <= 1) {
    /* --fresh-cache: K sets of the slots, set r's right after set r - 1 */
    const int64_t blocks = (batch * tokens * fresh_begin(kb) + FUSED_BLOCK - 1) / FUSED_BLOCK + 2;
    s.kv.data = xalloc((size_t)(blocks * FUSED_BLOCK * g.kv_heads * g.head_dim) * dtype_size(dt));
    memset(s.kv.data, 0, (size_t)(blocks * FUSED_BLOCK * g.kv_heads * g.head_dim) * dtype_size(dt));
    s.kv.dtype = (pe_dtype)dt;
    s.kv.shape[0] = blocks, s.kv.shape[1] = g.kv_heads, s.kv.shape[2] = FUSED_BLOCK;
    s.kv.shape[3] = g.head_dim;
    s.kv.stride[0] = FUSED_BLOCK * g.kv_heads * g.head_dim, s.kv.stride[1] = g.head_dim;
    s.kv.stride[2] = g.kv_heads * g.head_dim, s.kv.stride[3] = 1;
    s.slots = xalloc((size_t)(batch * tokens) * sizeof *s.slots);
    for (int64_t i = 0; i < batch * tokens; i++) s.slots[i] = FUSED_BLOCK + i; /* block 0 unused */
    s.slots = fresh_init(&s.fresh, s.slots, batch * tokens, batch * tokens);
    s.qp = kind == 1 ? &s.q : NULL;
    c.call = fused_store_call;
    c.textbook = fused_store_baseline;
    c.bytes = 2.0 * kb + (kind == 1 ? 2.0 * qb : 0.0); /* k read + cache written (+ q r/w) */
    c.probe[0] = probe_like_to(&s.k, g.head_dim); /* k read, its cache rows written */
    c.n_probe = 1;
    if (kind == 1) c.probe[c.n_probe++] = probe_like(&s.q, g.head_dim);
    /* k rotated into its cache rows (the rest of a row copied), q in place */
    floor_add(&c, (floor_stage){.kind = FL_ROT, .src = dt, .dst = dt, .style = g.style,
                                .width = g.head_dim, .rot = g.rotary_dim, .heads = g.kv_heads,
                                .rows = batch * tokens * g.kv_heads});
    if (kind == 1)
      floor_add(&c, (floor_stage){.kind = FL_ROT, .src = dt, .dst = dt, .style = g.style,
                                  .inplace = 1, .width = g.head_dim, .rot = g.rotary_dim,
                                  .heads = g.heads, .rows = batch * tokens * g.heads});
    snprintf(c.note, sizeof c.note, "unfused: pe_apply_rope_qk + copy k to the cache");
  } else if (kind == 2) {
    mrope_case_sections((int32_t)(g.rotary_dim / 2), s.section); /* 16/24/24 */
    s.pos3 = xalloc((size_t)(3 * batch * tokens) * sizeof *s.pos3);
    mrope_case_positions(s.pos3, batch, tokens); /* a 32x32 image after a text prefix */
    c.call = fused_mrope_call;
    c.textbook = fused_mrope_baseline;
    c.bytes = 2.0 * (qb + kb);
    c.probe[0] = probe_like(&s.q, g.head_dim);
    c.probe[1] = probe_like(&s.k, g.head_dim);
    c.n_probe = 2;
    snprintf(c.note, sizeof c.note, "unfused: plain RoPE (pe_apply_rope_qk); Qwen2-VL, 32x32 image");
  } else {
    static const double factors[FUSED_CACHES] = {1.0, 2.0, 4.0, 8.0};
    for (int i = 0; i < FUSED_CACHES; i++) {
      pe_rope_params p;
      pe_rope_params_init(&p);
      p.head_dim = g.head_dim, p.rotary_dim = g.rotary_dim, p.style = g.style, p.base = g.base;
      p.max_positions = max_pos;
      p.scaling = i ? PE_ROPE_SCALING_DYNAMIC : PE_ROPE_SCALING_NONE;
      p.factor = factors[i];
      p.original_max_positions = 8192;
      p.seq_len = (int64_t)(8192 * factors[i]);
      if (pe_rope_cache_create(&p, &s.caches[i]) != PE_OK) {
        not_available("fused", pe_last_error());
        fused_free(&s);
        return;
      }
    }
    s.index = xalloc((size_t)batch * sizeof *s.index);
    for (int64_t b = 0; b < batch; b++) s.index[b] = (int32_t)(b % FUSED_CACHES);
    c.call = fused_multi_call;
    c.textbook = fused_multi_baseline;
    c.bytes = 2.0 * (qb + kb);
    c.probe[0] = probe_like(&s.q, g.head_dim);
    c.probe[1] = probe_like(&s.k, g.head_dim);
    c.n_probe = 2;
    snprintf(c.note, sizeof c.note, "unfused: one pe_apply_rope_qk per row; %d dynamic-NTK caches",
             FUSED_CACHES);
  }
  if (kind >= 2) /* mrope, multi: q and k in place */
    floor_add(&c, (floor_stage){.kind = FL_ROT, .src = dt, .dst = dt, .style = g.style,
                                .inplace = 1, .width = g.head_dim, .rot = g.rotary_dim,
                                .heads = g.heads + g.kv_heads,
                                .rows = batch * tokens * (g.heads + g.kv_heads)});
  progress("[%.0fs] fused %s %s %d thr", (now_ns() - run_start) / 1e9, c.name, dtype_name(dt), threads);
  measure(&c);
  free_probes(&c);
  fused_free(&s);
}

void suite_fused(void) {
  for (int ti = 0; ti < opt.n_threads; ti++) {
    int th = opt.threads[ti];
    int64_t T = opt.tokens ? opt.tokens : 4096;
    for (int d = 0; d < 2; d++) {
      int dt = opt.dtype >= 0 ? opt.dtype : d ? PE_BF16 : PE_F32;
      fused_case(0, opt.batch, T, dt, th);
      fused_case(1, opt.batch, T, dt, th);
      if (opt.dtype >= 0) break;
    }
    int dt = opt.dtype >= 0 ? opt.dtype : PE_BF16;
    fused_case(2, 1, opt.tokens ? opt.tokens : 2048, dt, th);
    fused_case(3, 8, 1, dt, th);     /* decode: 8 sequences, 4 frequency sets */
    fused_case(3, 4, 512, dt, th);   /* prefill chunks of 4 sequences */
  }
}

/* ------------------------------------------------------------------------ */
/* kvquant: RoPE + K and V into quantized caches                            */
/* ------------------------------------------------------------------------ */

/* Llama-3-8B's attention (32 q / 8 kv heads x 128, NeoX, theta 500000) on a
 * packed QKV buffer [B, T, (32 + 2*8) * 128] of the tensor dtype and NHD
 * paged caches of one quantized format (FP8 e4m3 with per-tensor scales, or
 * Q8_0), k and v alike. "store": pe_qk_norm_rope_store (no norm: RoPE, k
 * quantized into its rows, v quantized), against the unfused libposenc
 * sequence in the 'x textbook loop' column ('x unfused' in the narrow
 * table): pe_apply_rope_qk (q and k in place), then pe_kv_write (a separate
 * quantize pass over k and v). "shift": a
 * context shift of every cached key of one sequence on a q8_0 cache,
 * pe_rope_shift_k_cache, against pe_kv_read (dequantize to f32) +
 * pe_rope_shift_k + pe_kv_write. The bound streams the bytes the fused call
 * touches once: store: q read and written, k and v read, their quantized
 * rows written; shift: the quantized rows read and written. */
typedef struct kvq_state {
  pe_rope_cache *cache;
  pe_qk_norm norm;
  pe_kv_cache kv;
  pe_tensor q, k, v, kc, vc, tmp; /* tmp: shift's f32 rows [1, 8, n, 128] */
  void *qkv;
  int64_t *slots, *pos, *deltas, n;
  fresh_slots fresh; /* store: each call's slots (--fresh-cache) */
  int with_q; /* store: q rotated in the same call (else only the kv heads) */
  float kscale, vscale;
} kvq_state;

static pe_status kvq_store_call(bench_case *c) {
  kvq_state *s = c->st;
  s->slots = (int64_t *)fresh_next(&s->fresh);
  return pe_qk_norm_rope_store(s->cache, &s->norm, s->with_q ? &s->q : NULL, &s->k, &s->v, &s->kv, s->slots,
                  s->pos, pb_store_flags, c->pool);
}
static void kvq_store_unfused(bench_case *c) {
  kvq_state *s = c->st;
  s->slots = (int64_t *)fresh_next(&s->fresh);
  pe_apply_rope_qk(s->cache, s->with_q ? &s->q : NULL, &s->k, s->pos, 0, c->pool);
  pe_kv_write(&s->kv, &s->k, &s->v, s->slots);
}
static pe_status kvq_shift_call(bench_case *c) {
  kvq_state *s = c->st;
  return pe_rope_shift_k_cache(s->cache, &s->kv, s->slots, s->deltas, s->n, c->pool);
}
static void kvq_shift_unfused(bench_case *c) {
  kvq_state *s = c->st;
  pe_kv_read(&s->kv, &s->tmp, NULL, s->slots);
  pe_rope_shift_k(s->cache, &s->tmp, s->deltas, c->pool);
  pe_kv_write(&s->kv, &s->tmp, NULL, s->slots);
}

/* kind 0: store of batch x tokens (q, k and v); 2: the same with the kv
 * heads alone (q not passed: what the quantizing store itself adds over a
 * rope pass and a quantize pass); 1: shift of `tokens` cached keys, the
 * unfused side's f32 rows head-major [1, 8, n, 128] (one pe_kv_read /
 * pe_kv_write kernel call per 128-value row); 3: the same shift with those
 * rows token-major (the cache's own order: the 8 heads of a slot adjacent,
 * one kernel call per slot each way, the faster unfused sequence). fp8_scale:
 * the fp8 k and v scales (0: 0.05 and 0.02; a power of two such as 1.0,
 * vLLM's uncalibrated k_scale, takes the vector kernels' multiply-by-
 * reciprocal path instead of the divide). */
/* A normal power of two: its reciprocal is exact, and the library
 * multiplies by it instead of dividing (quant_common.h's PE_FP8_POW2_SCALE). */
static int pow2_scale(float s) {
  uint32_t u;
  memcpy(&u, &s, 4);
  return (u & 0x807fffffu) == 0 && (u >> 23) != 0;
}

static void kvq_case(int kind, uint32_t fmt, int64_t batch, int64_t tokens, int dt, int threads,
                     float fp8_scale) {
  const int with_q = kind == 0, tok_major = kind == 3;
  if (kind == 2) kind = 0;
  if (kind == 3) kind = 1;
  enum { HQ = 32, HKV = 8, HD = 128 };
  kvq_state s;
  memset(&s, 0, sizeof s);
  if (packed_qkv("kvquant", HQ, HKV, HD, PE_ROPE_NEOX, 500000.0, batch, tokens, dt, &s.cache,
                 &s.qkv, &s.q, &s.k, &s.v))
    return;
  int64_t n = batch * tokens, es = (int64_t)dtype_size(dt);
  int64_t rb = fmt == PE_KV_Q8_0 ? HD / 32 * 34 : HD;
  /* --fresh-cache (store cases): K sets of the slots, set r's right after
   * set r - 1; the shift rewrites the rows of one sequence */
  const int64_t sets = fresh_begin(kind == 0 ? (double)(n * 2 * HKV * rb) : 0.0);
  const int64_t blocks = (n * sets + FUSED_BLOCK - 1) / FUSED_BLOCK + 2;
  size_t cache_bytes = (size_t)(blocks * FUSED_BLOCK * HKV * rb);
  pe_tensor kc = {xalloc(cache_bytes), PE_F32, {blocks, HKV, FUSED_BLOCK, HD},
                  {FUSED_BLOCK * HKV * rb, rb, HKV * rb, 1}}; /* bytes: dtype not read */
  memset(kc.data, 0, cache_bytes);
  s.kc = s.vc = kc;
  s.vc.data = xalloc(cache_bytes);
  memset(s.vc.data, 0, cache_bytes);
  pe_qk_norm_init(&s.norm);
  s.kscale = fp8_scale > 0 ? fp8_scale : 0.05f, s.vscale = fp8_scale > 0 ? fp8_scale : 0.02f;
  pe_kv_cache_init(&s.kv);
  s.kv.k = &s.kc;
  s.kv.v = &s.vc;
  s.kv.k_quant = s.kv.v_quant = fmt;
  if (fmt != PE_KV_Q8_0) s.kv.k_scale = &s.kscale, s.kv.v_scale = &s.vscale;
  s.n = n;
  s.with_q = with_q;
  s.slots = xalloc((size_t)n * sizeof *s.slots);
  s.pos = xalloc((size_t)n * sizeof *s.pos);
  s.deltas = xalloc((size_t)n * sizeof *s.deltas);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t t = 0; t < tokens; t++) {
      s.slots[b * tokens + t] = FUSED_BLOCK + b * tokens + t; /* block 0 unused */
      s.pos[b * tokens + t] = (tokens == 1 ? 4000 + 7 * b : 0) + t;
      s.deltas[b * tokens + t] = -256;
    }
  s.slots = fresh_init(&s.fresh, s.slots, n, n); /* the shift: one set */
  /* the cache holds real rows (the shift reads them) */
  if (pe_qk_norm_rope_store(s.cache, &s.norm, NULL, &s.k, &s.v, &s.kv, s.slots, s.pos, 0, NULL) != PE_OK) {
    not_available("kvquant", pe_last_error());
    goto out;
  }
  pe_tensor tmp = {NULL, PE_F32, {1, HKV, n, HD}, {HKV * n * HD, n * HD, HD, 1}};
  if (tok_major) tmp.stride[1] = HD, tmp.stride[2] = HKV * HD;
  if (kind == 1) tmp.data = xalloc((size_t)(HKV * n * HD) * sizeof(float));
  s.tmp = tmp;
  bench_case c;
  memset(&c, 0, sizeof c);
  c.suite = "kvquant";
  const char *fname = fmt == PE_KV_Q8_0 ? "q8_0" : "fp8e4m3";
  char sc_name[24] = "";
  if (fmt != PE_KV_Q8_0 && fp8_scale > 0) snprintf(sc_name, sizeof sc_name, " scale %g", fp8_scale);
  if (kind == 0)
    snprintf(c.name, sizeof c.name, "store %s %s %" PRId64 "x%" PRId64 "%s%s", fname,
             tokens == 1 ? "decode" : "prefill", batch, tokens, with_q ? "" : " kv", sc_name);
  else
    snprintf(c.name, sizeof c.name, "shift %s %" PRId64 " keys%s", fname, n,
             tok_major ? " tok-major" : "");
  if (with_q)
    snprintf(c.shape, sizeof c.shape, "%dq/%dkv x%d neox", HQ, HKV, HD);
  else
    snprintf(c.shape, sizeof c.shape, "%dkv x%d neox", HKV, HD);
  c.dtype = dt;
  c.threads = threads;
  c.pool = pool_for(threads);
  c.st = &s;
  c.call = kind == 0 ? kvq_store_call : kvq_shift_call;
  c.textbook = kind == 0 ? kvq_store_unfused : kvq_shift_unfused;
  c.bytes = kind == 0 ? (double)(n * ((with_q ? 2 * HQ * HD * es : 0) + 2 * HKV * HD * es +
                                       2 * HKV * rb))
                      : (double)(2 * n * HKV * rb);
  if (kind == 0 && pb_fresh > 1) { /* q in place; k, v read, their rows written cold */
    c.n_probe = 0;
    if (with_q) c.probe[c.n_probe++] = probe_flat((double)(n * 2 * HQ * HD * es));
    c.probe[c.n_probe++] = probe_sink((double)(n * 2 * HKV * HD * es), (double)(n * 2 * HKV * rb));
  } else {
    c.probe[0] = probe_flat(c.bytes);
    c.n_probe = 1;
  }
  const int fl_fmt = fmt == PE_KV_Q8_0 ? FL_Q8_0 : FL_FP8;
  if (kind == 0) { /* q in place (with_q), k rotated into its quantized rows, v quantized */
    if (with_q)
      floor_add(&c, (floor_stage){.kind = FL_ROT, .src = dt, .dst = dt, .style = PE_ROPE_NEOX,
                                  .inplace = 1, .width = HD, .rot = HD, .heads = HQ,
                                  .rows = n * HQ});
    floor_add(&c, (floor_stage){.kind = FL_ROT, .src = dt, .fmt = fl_fmt,
                                .fp8_mul = pow2_scale(s.kscale), .style = PE_ROPE_NEOX,
                                .width = HD, .rot = HD, .scale = s.kscale, .heads = HKV,
                                .rows = n * HKV});
    floor_add(&c, (floor_stage){.kind = FL_QUANT, .src = dt, .fmt = fl_fmt,
                                .fp8_mul = pow2_scale(s.vscale), .width = HD,
                                .scale = s.vscale, .rows = n * HKV});
  } else if (fmt == PE_KV_Q8_0) { /* each cached key dequantized, rotated, requantized */
    floor_add(&c, (floor_stage){.kind = FL_SHIFT, .style = PE_ROPE_NEOX, .width = HD, .rot = HD,
                                .heads = (int)(n * HKV), .rows = n * HKV}); /* one delta */
  }
  snprintf(c.note, sizeof c.note, "%s",
           kind == 0 ? (with_q ? "unfused: pe_apply_rope_qk + pe_kv_write (k, v)"
                               : "kv heads only (q NULL); unfused: pe_apply_rope_qk(k) "
                                 "+ pe_kv_write (k, v)")
                     : tok_major ? "unfused: pe_kv_read + pe_rope_shift_k + pe_kv_write, "
                                   "f32 rows token-major [n, 8, 128]"
                                 : "unfused: pe_kv_read + pe_rope_shift_k + pe_kv_write, "
                                   "f32 rows head-major [8, n, 128]");
  progress("[%.0fs] kvquant %s %s %d thr", (now_ns() - run_start) / 1e9, c.name, dtype_name(dt),
           threads);
  measure(&c);
  free_probes(&c);
  free(s.tmp.data);
out:
  free(s.qkv);
  free(s.kc.data);
  free(s.vc.data);
  fresh_free(&s.fresh); /* s.slots: one of its sets */
  free(s.pos);
  free(s.deltas);
  pe_rope_cache_destroy(s.cache);
}

void suite_kvquant(void) {
  static const uint32_t fmts[2] = {PE_KV_FP8_E4M3, PE_KV_Q8_0};
  for (int ti = 0; ti < opt.n_threads; ti++) {
    int dt = opt.dtype >= 0 ? opt.dtype : PE_BF16;
    for (int f = 0; f < 2; f++) {
      if (opt.tokens) {
        kvq_case(0, fmts[f], opt.batch, opt.tokens, dt, opt.threads[ti], 0);
        continue;
      }
      kvq_case(0, fmts[f], 32, 1, dt, opt.threads[ti], 0);  /* decode, a batch of 32 */
      kvq_case(0, fmts[f], 1, 512, dt, opt.threads[ti], 0); /* prefill */
      kvq_case(2, fmts[f], 32, 1, dt, opt.threads[ti], 0);  /* the same, kv heads alone */
      kvq_case(2, fmts[f], 1, 512, dt, opt.threads[ti], 0);
      if (fmts[f] != PE_KV_Q8_0) /* a power-of-two scale (vLLM's default 1.0) */
        kvq_case(2, fmts[f], 1, 512, dt, opt.threads[ti], 1.0f);
    }
    if (!opt.tokens) {
      kvq_case(1, PE_KV_Q8_0, 1, 512, dt, opt.threads[ti], 0);  /* shift 512 keys */
      kvq_case(3, PE_KV_Q8_0, 1, 512, dt, opt.threads[ti], 0);  /* f32 rows token-major */
      kvq_case(1, PE_KV_Q8_0, 1, 4096, dt, opt.threads[ti], 0); /* shift a 4096 context */
      kvq_case(3, PE_KV_Q8_0, 1, 4096, dt, opt.threads[ti], 0);
    }
  }
}
