/* suite_qknorm.c - the qknorm suite (QK-norm + RoPE + K and V into the
 * paged cache: Qwen3-8B's per-head norm, OLMo 2's per-token one, Gemma 3's
 * unit-offset weights and Llama 4's weightless L2 norm, against the unfused
 * sequence) and the packed QKV buffer it shares with the kvquant suite. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pe_bench.h"

/* ------------------------------------------------------------------------ */
/* qknorm: QK-norm + RoPE + K and V into the paged cache                    */
/* ------------------------------------------------------------------------ */

/* Qwen3-8B's attention (32 q / 8 kv heads x 128, NeoX, theta 1e6, per-head
 * RMSNorm eps 1e-6) on a packed QKV buffer [B, T, (32 + 2*8) * 128] and an
 * NHD paged cache of the same dtype; or OLMo-2-1124-7B's (32 q / 32 kv
 * heads x 128, theta 5e5, eps 1e-6), whose q_norm and k_norm are RMSNorms
 * over each token's 4096 q and 4096 k channels (PE_QK_NORM_PER_TOKEN: one
 * scale for a token's heads, a weight per channel); or gemma-3-27b-it's
 * (32 q / 16 kv heads x 128, NeoX, per-head Gemma3RMSNorm x * r * (1 + w),
 * eps 1e-6; theta 1e6, its global layers'); or Llama-4-Scout-17B-16E's
 * (40 q / 8 kv heads x 128, interleaved (GPT-J) pairs, theta 5e5, per-head
 * Llama4TextL2Norm x * r, no weight, eps 1e-5; its llama3 rope_scaling
 * changes the table's values, not the cost, and is left out). The call is
 * pe_qk_norm_rope_store; the "x textbook loop" column ('x unfused' in the
 * narrow table) is the unfused sequence an engine runs without it, timed
 * interleaved: a plain C RMSNorm loop over each q and k head row (or each
 * token's heads, per token; in place, float32 sum), pe_apply_rope_qk, then
 * memcpy of each token's k and v rows into their slots. The bound streams
 * the bytes the fused call touches once: q read and written, k and v read,
 * their cache rows written. */
typedef struct qkn_model {
  const char *name; /* the case names' model (a pe-bench --model preset) */
  int64_t hq, hkv, hd;
  double theta;
  pe_rope_style style;
  pe_qk_norm_kind kind; /* RMS, RMS_UNIT_OFFSET or L2 */
  int per_token;        /* the norm over each token's heads (OLMo 2), else each head's row */
  float eps;
} qkn_model;
static const qkn_model qkn_models[] = {
    {"qwen3-8b", 32, 8, 128, 1000000.0, PE_ROPE_NEOX, PE_QK_NORM_RMS, 0, 1e-6f},
    {"olmo2-7b", 32, 32, 128, 500000.0, PE_ROPE_NEOX, PE_QK_NORM_RMS, 1, 1e-6f},
    {"gemma-3-27b", 32, 16, 128, 1000000.0, PE_ROPE_NEOX, PE_QK_NORM_RMS_UNIT_OFFSET, 0, 1e-6f},
    {"llama4-scout", 40, 8, 128, 500000.0, PE_ROPE_GPTJ, PE_QK_NORM_L2, 0, 1e-5f},
};
enum { QKN_MODELS = (int)(sizeof qkn_models / sizeof qkn_models[0]) };

/* The norm's name in the rows' shape and note. */
static const char *qkn_norm_name(const qkn_model *m) {
  return m->per_token                               ? "per-token RMSNorm"
         : m->kind == PE_QK_NORM_RMS_UNIT_OFFSET ? "RMSNorm (1 + w)"
         : m->kind == PE_QK_NORM_L2               ? "L2 norm"
                                                  : "RMSNorm";
}

typedef struct qkn_state {
  pe_rope_cache *cache;
  pe_qk_norm norm;
  pe_kv_cache kv;
  pe_tensor q, k, v, kc, vc;
  float *qw, *kw;
  void *qkv;
  int64_t *slots, *pos;
  fresh_slots fresh; /* --fresh-cache: each call's slots */
  pb_qknorm native; /* the one-pass C loop ('x native'), its cos/sin tables */
  float *cos_t, *sin_t;
  const qkn_model *m;
} qkn_state;

/* The next set of slots (--fresh-cache), for every side's call. */
static void qkn_advance(qkn_state *s) { s->native.slots = s->slots = (int64_t *)fresh_next(&s->fresh); }

static pe_status qkn_call(bench_case *c) {
  qkn_state *s = c->st;
  qkn_advance(s);
  return pe_qk_norm_rope_store(s->cache, &s->norm, &s->q, &s->k, &s->v, &s->kv, s->slots, s->pos,
                               pb_store_flags,
                               c->pool);
}

/* The plain RMSNorm of every head row of x, in place (Qwen3RMSNorm; with a
 * unit offset x * r * (1 + w), Gemma3RMSNorm; L2, x * r, Llama4TextL2Norm);
 * per token, of each token's heads as one row, head h's weights at w + h *
 * hd (OLMo 2's q_norm / k_norm over the projection's row). */
static void qkn_rmsnorm(const pe_tensor *x, const float *w, const qkn_model *m) {
  int dt = x->dtype, per_token = m->per_token;
  int64_t hd = x->shape[3], es = (int64_t)dtype_size(dt), nh = x->shape[1];
  int64_t rows = per_token ? nh : 1; /* rows under one scale */
  const float eps = m->eps;
  for (int64_t b = 0; b < x->shape[0]; b++)
    for (int64_t t = 0; t < x->shape[2]; t++)
      for (int64_t h0 = 0; h0 < nh; h0 += rows) {
        char *tok = (char *)x->data + (b * x->stride[0] + t * x->stride[2]) * es;
        float ss = 0;
        for (int64_t h = h0; h < h0 + rows; h++)
          for (int64_t e = 0; e < hd; e++) {
            float v = pb_load(dt, tok + h * x->stride[1] * es, e);
            ss += v * v;
          }
        float r = 1.0f / sqrtf(ss / (float)(hd * rows) + eps);
        for (int64_t h = h0; h < h0 + rows; h++) {
          char *row = tok + h * x->stride[1] * es;
          const float *wh = w + (per_token ? h * hd : 0);
          /* a loop per kind: the kind tested per element made Qwen3's loop
           * 1.3-1.7x slower (x unfused 7.2 -> 9.4 f32, 10.7 -> 18.4 bf16,
           * decode 32, Zen 5) */
          if (m->kind == PE_QK_NORM_L2)
            for (int64_t e = 0; e < hd; e++) pb_store(dt, row, e, pb_load(dt, row, e) * r);
          else if (m->kind == PE_QK_NORM_RMS_UNIT_OFFSET)
            for (int64_t e = 0; e < hd; e++)
              pb_store(dt, row, e, pb_load(dt, row, e) * r * (1.0f + wh[e]));
          else
            for (int64_t e = 0; e < hd; e++) pb_store(dt, row, e, pb_load(dt, row, e) * r * wh[e]);
        }
      }
}

/* Each token's rows of x copied to its slot of cache (same dtype). */
static void qkn_copy_rows(const pe_tensor *x, const pe_tensor *cache, const int64_t *slots) {
  size_t es = dtype_size(x->dtype), row = (size_t)x->shape[3] * es;
  for (int64_t b = 0; b < x->shape[0]; b++)
    for (int64_t t = 0; t < x->shape[2]; t++) {
      int64_t slot = slots[b * x->shape[2] + t];
      if (slot < 0) continue;
      const char *src = (const char *)x->data + (b * x->stride[0] + t * x->stride[2]) * (int64_t)es;
      char *dst = (char *)cache->data + ((slot / FUSED_BLOCK) * cache->stride[0] +
                                         (slot % FUSED_BLOCK) * cache->stride[2]) * (int64_t)es;
      for (int64_t h = 0; h < x->shape[1]; h++)
        memcpy(dst + h * cache->stride[1] * (int64_t)es, src + h * x->stride[1] * (int64_t)es, row);
    }
}

static void qkn_native(bench_case *c) {
  qkn_state *s = c->st;
  qkn_advance(s);
  pb_textbook_native_qknorm_store(&s->native);
}

/* Whether the one-pass loop computes what the library does, both from the
 * same inputs (restored after): NULL, or the first element that differs by
 * more than float32 (bf16) rounding allows, as the note's text. */
static const char *qkn_native_mismatch(bench_case *c, int64_t n) {
  static char why[160];
  qkn_state *s = c->st;
  const int dt = s->q.dtype;
  const int64_t hd = s->q.shape[3], row = (s->q.shape[1] + 2 * s->k.shape[1]) * hd;
  const size_t bytes = (size_t)(n * row) * dtype_size(dt);
  const size_t kbytes = (size_t)(n * s->k.shape[1] * hd) * dtype_size(dt);
  char *orig = xalloc(bytes), *lib = xalloc(bytes), *klib = xalloc(kbytes);
  memcpy(orig, s->qkv, bytes);
  /* the rows of the n slots: FUSED_BLOCK on (block 0 unused), in order */
  char *kslots = (char *)s->kc.data + FUSED_BLOCK * s->k.shape[1] * hd * (int64_t)dtype_size(dt);
  why[0] = 0;
  s->fresh.next = 0; /* both sides into the first set of slots */
  if (qkn_call(c) != PE_OK) {
    snprintf(why, sizeof why, "pe_qk_norm_rope_store: %.100s", pe_last_error());
  } else {
    memcpy(lib, s->qkv, bytes);
    memcpy(klib, kslots, kbytes);
    memcpy(s->qkv, orig, bytes);
    s->fresh.next = 0;
    qkn_native(c);
    const double tol = dt == PE_F32 ? 0x1p-18 : dt == PE_F16 ? 0x1p-10 : 0x1p-7;
    const int64_t nq = s->q.shape[1] * hd;
    for (int64_t i = 0; i < n * (nq + s->k.shape[1] * hd) && !why[0]; i++) {
      /* q's elements of each token, then every k cache row */
      const int64_t t = i / nq, e = i % nq, kq = i - n * nq;
      const double a = i < n * nq ? pb_load(dt, s->qkv, t * row + e) : pb_load(dt, kslots, kq),
                   b = i < n * nq ? pb_load(dt, lib, t * row + e) : pb_load(dt, klib, kq);
      if (!(fabs(a - b) <= tol * (fabs(b) > 0.25 ? fabs(b) : 0.25)))
        snprintf(why, sizeof why, "%s element %" PRId64 " is %.7g, the library's %.7g",
                 i < n * nq ? "q" : "the k cache's", i < n * nq ? i : kq, a, b);
    }
  }
  memcpy(s->qkv, orig, bytes);
  free(orig);
  free(lib);
  free(klib);
  return why[0] ? why : NULL;
}

static void qkn_unfused(bench_case *c) {
  qkn_state *s = c->st;
  qkn_advance(s);
  qkn_rmsnorm(&s->q, s->qw, s->m);
  qkn_rmsnorm(&s->k, s->kw, s->m);
  pe_apply_rope_qk(s->cache, &s->q, &s->k, s->pos, 0, c->pool);
  qkn_copy_rows(&s->k, &s->kc, s->slots);
  qkn_copy_rows(&s->v, &s->vc, s->slots);
}

/* The setup the qknorm and kvquant suites share: a rope cache of head_dim
 * hd, pairing style and base theta covering `tokens` positions, and a packed QKV
 * buffer [batch, tokens, (hq + 2*hkv) * hd] of dtype dt, filled, with q, k and
 * v as [B, H, T, D] views of it. 0, or -1 after not_available(suite, ...). */
int packed_qkv(const char *suite, int64_t hq, int64_t hkv, int64_t hd, pe_rope_style style,
               double theta, int64_t batch, int64_t tokens, int dt, pe_rope_cache **cache,
               void **qkv, pe_tensor *q, pe_tensor *k, pe_tensor *v) {
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = (int32_t)hd, p.style = style, p.base = theta;
  p.max_positions = tokens + 64 > 8192 ? tokens + 64 : 8192;
  if (positions_used(batch, tokens) > p.max_positions)
    p.max_positions = positions_used(batch, tokens);
  if (pe_rope_cache_create(&p, cache) != PE_OK) {
    not_available(suite, pe_last_error());
    return -1;
  }
  int64_t row = (hq + 2 * hkv) * hd, n = batch * tokens, es = (int64_t)dtype_size(dt);
  *qkv = xalloc((size_t)(n * row * es));
  fill(*qkv, dt, (size_t)(n * row));
  pe_tensor base = {*qkv, (pe_dtype)dt, {batch, hq, tokens, hd}, {tokens * row, hd, row, 1}};
  *q = *k = *v = base;
  k->shape[1] = v->shape[1] = hkv;
  k->data = (char *)*qkv + hq * hd * es;
  v->data = (char *)*qkv + (hq + hkv) * hd * es;
  return 0;
}

static void qkn_case(const qkn_model *m, int64_t batch, int64_t tokens, int dt, int threads) {
  const int64_t HQ = m->hq, HKV = m->hkv, HD = m->hd;
  qkn_state s;
  memset(&s, 0, sizeof s);
  s.m = m;
  if (packed_qkv("qknorm", HQ, HKV, HD, m->style, m->theta, batch, tokens, dt, &s.cache, &s.qkv,
                 &s.q, &s.k, &s.v))
    return;
  int64_t row = (HQ + 2 * HKV) * HD, n = batch * tokens, es = (int64_t)dtype_size(dt);
  /* --fresh-cache: K sets of the n slots, set r's right after set r - 1 */
  int64_t blocks = (n * fresh_begin((double)(n * 2 * HKV * HD * es)) + FUSED_BLOCK - 1) / FUSED_BLOCK + 2;
  size_t cache_elems = (size_t)(blocks * FUSED_BLOCK * HKV * HD);
  pe_tensor kc = {xalloc(cache_elems * (size_t)es), (pe_dtype)dt, {blocks, HKV, FUSED_BLOCK, HD},
                  {FUSED_BLOCK * HKV * HD, HD, HKV * HD, 1}};
  memset(kc.data, 0, cache_elems * (size_t)es);
  s.kc = s.vc = kc;
  s.vc.data = xalloc(cache_elems * (size_t)es);
  memset(s.vc.data, 0, cache_elems * (size_t)es);
  /* per head: one row of weights for every head; per token: each head's own */
  const int64_t nqw = m->per_token ? HQ * HD : HD, nkw = m->per_token ? HKV * HD : HD;
  s.qw = xalloc((size_t)nqw * sizeof(float));
  s.kw = xalloc((size_t)nkw * sizeof(float));
  /* Weights of magnitude 1 (random signs): every timed call norms the same
   * tensors again in place, and weights 1 + rand/8 multiplied the channels'
   * ratios call after call until half the bf16 values were subnormal (4000
   * calls), which sent the bf16 rounding to its slow exact path: a figure of
   * the benchmark's data, not of a layer's (0.074 vs 0.11-0.13 of the bound
   * on fresh data, Zen 4 bf16 decode). A weight's value costs nothing.
   * Gemma 3's weights w multiply by 1 + w: 0 or -2. */
  const float w0 = m->kind == PE_QK_NORM_RMS_UNIT_OFFSET ? -1.0f : 0.0f;
  for (int64_t i = 0; i < nqw; i++) s.qw[i] = w0 + (frand() < 0 ? -1.0f : 1.0f);
  for (int64_t i = 0; i < nkw; i++) s.kw[i] = w0 + (frand() < 0 ? -1.0f : 1.0f);
  pe_qk_norm_init(&s.norm);
  s.norm.kind = m->kind;
  s.norm.scope = m->per_token ? PE_QK_NORM_PER_TOKEN : PE_QK_NORM_PER_HEAD;
  s.norm.eps = m->eps;
  if (m->kind != PE_QK_NORM_L2) { /* L2: no weight */
    s.norm.q_weight = s.qw;
    s.norm.k_weight = s.kw;
  }
  pe_kv_cache_init(&s.kv);
  s.kv.k = &s.kc;
  s.kv.v = &s.vc;
  s.slots = xalloc((size_t)n * sizeof *s.slots);
  s.pos = xalloc((size_t)n * sizeof *s.pos);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t t = 0; t < tokens; t++) {
      s.slots[b * tokens + t] = FUSED_BLOCK + b * tokens + t; /* block 0 unused */
      s.pos[b * tokens + t] = (tokens == 1 ? 4000 + 7 * b : 0) + t;
    }
  s.slots = fresh_init(&s.fresh, s.slots, n, n); /* the first set; each call takes the next */
  bench_case c;
  memset(&c, 0, sizeof c);
  c.suite = "qknorm";
  snprintf(c.name, sizeof c.name, "%s %s %" PRId64 "x%" PRId64, m->name,
           tokens == 1 ? "decode" : "prefill", batch, tokens);
  c.dtype = dt;
  c.threads = threads;
  c.pool = pool_for(threads);
  c.st = &s;
  c.call = qkn_call;
  c.textbook = qkn_unfused;
  /* q read + written, k and v read, their cache rows written: q's bytes
   * in place, k's and v's into as many others */
  c.bytes = 2.0 * (double)(n * row * es);
  c.probe[0] = probe_flat(2.0 * (double)(n * HQ * HD * es));
  c.probe[1] = probe_flat_to(2.0 * (double)(n * 2 * HKV * HD * es));
  c.n_probe = 2;
  /* q normed and rotated in place, k into its cache rows, v copied; the
   * weight's use (bench.h) for the floor's stages and the native loop */
  const int nw = m->kind == PE_QK_NORM_L2                   ? PB_QKN_L2
                 : m->kind == PE_QK_NORM_RMS_UNIT_OFFSET ? PB_QKN_OFFSET
                                                          : PB_QKN_RMS;
  floor_add(&c, (floor_stage){.kind = FL_NORM_ROT, .src = dt, .dst = dt, .style = m->style,
                              .inplace = 1, .width = (int)HD, .rot = (int)HD, .heads = (int)HQ,
                              .norm_token = m->per_token, .norm_w = nw, .rows = n * HQ});
  floor_add(&c, (floor_stage){.kind = FL_NORM_ROT, .src = dt, .dst = dt, .style = m->style,
                              .width = (int)HD, .rot = (int)HD, .heads = (int)HKV,
                              .norm_token = m->per_token, .norm_w = nw, .rows = n * HKV});
  floor_add(&c, (floor_stage){.kind = FL_COPY, .src = dt, .dst = dt, .width = (int)HD,
                              .rows = n * HKV});
  snprintf(c.shape, sizeof c.shape, "%" PRId64 "q/%" PRId64 "kv x%" PRId64 " %s%s", HQ, HKV, HD,
           m->style == PE_ROPE_NEOX ? "neox" : "gptj",
           m->per_token                               ? " per-token norm"
           : m->kind == PE_QK_NORM_RMS_UNIT_OFFSET ? " norm (1 + w)"
           : m->kind == PE_QK_NORM_L2               ? " L2 norm"
                                                    : "");
  snprintf(c.note, sizeof c.note, "unfused: %s loop + pe_apply_rope_qk + copy k, v",
           qkn_norm_name(m));
  /* 'x native': the step as one C loop per token, built -march=native, on
   * a float cos/sin table of the positions used (the library's values) */
  int64_t tb_pos = 0;
  for (int64_t i = 0; i < n; i++)
    if (s.pos[i] + 1 > tb_pos) tb_pos = s.pos[i] + 1;
  s.cos_t = xalloc((size_t)(tb_pos * HD / 2) * sizeof(float));
  s.sin_t = xalloc((size_t)(tb_pos * HD / 2) * sizeof(float));
  float cs[HD];
  for (int64_t p = 0; p < tb_pos; p++) {
    pe_rope_cache_cos_sin(s.cache, p, cs, cs + HD / 2);
    memcpy(s.cos_t + p * (HD / 2), cs, HD / 2 * sizeof(float));
    memcpy(s.sin_t + p * (HD / 2), cs + HD / 2, HD / 2 * sizeof(float));
  }
  s.native = (pb_qknorm){.qkv = s.qkv, .batch = batch, .tokens = tokens, .hq = HQ, .hkv = HKV,
                         .hd = HD, .dtype = dt, .k_cache = s.kc.data,
                         .v_cache = s.vc.data, .slots = s.slots, .pos = s.pos,
                         .q_weight = s.qw, .k_weight = s.kw, .cos_t = s.cos_t,
                         .sin_t = s.sin_t, .eps = s.norm.eps,
                         .per_token = m->per_token,
                         .norm = nw,
                         .gptj = m->style == PE_ROPE_GPTJ};
  const char *bad = qkn_native_mismatch(&c, n);
  if (bad) {
    size_t l = strlen(c.note);
    snprintf(c.note + l, sizeof c.note - l, "; no native: %s", bad);
  } else {
    c.textbook_native = qkn_native;
  }
  progress("[%.0fs] qknorm %s %s %d thr", (now_ns() - run_start) / 1e9, c.name, dtype_name(dt),
           threads);
  measure(&c);
  free_probes(&c);
  free(s.qkv);
  free(s.kc.data);
  free(s.vc.data);
  free(s.qw);
  free(s.kw);
  fresh_free(&s.fresh);
  free(s.pos);
  free(s.cos_t);
  free(s.sin_t);
  pe_rope_cache_destroy(s.cache);
}

/* Qwen3-8B's cases, then the other models' decode 32 and prefill 512 (the
 * per-token norm, the unit offset, L2); --model M (one of qkn_models):
 * that model's cases alone, decode 1 too; --tokens N: one case of the
 * model (Qwen3-8B unless --model names another of them). */
void suite_qknorm(void) {
  const qkn_model *m = &qkn_models[0];
  for (int i = 0; i < QKN_MODELS && opt.model_given; i++)
    if (!strcmp(opt.model->name, qkn_models[i].name)) m = &qkn_models[i];
  for (int ti = 0; ti < opt.n_threads; ti++)
    for (int d = 0; d < 2; d++) {
      int dt = opt.dtype >= 0 ? opt.dtype : d ? PE_BF16 : PE_F32;
      if (opt.tokens) {
        qkn_case(m, opt.batch, opt.tokens, dt, opt.threads[ti]);
      } else {
        qkn_case(m, 1, 1, dt, opt.threads[ti]);     /* decode, one sequence */
        qkn_case(m, 32, 1, dt, opt.threads[ti]);    /* decode, a batch of 32 */
        qkn_case(m, 1, 512, dt, opt.threads[ti]);   /* prefill */
        for (int i = 1; i < QKN_MODELS && !opt.model_given; i++) {
          qkn_case(&qkn_models[i], 32, 1, dt, opt.threads[ti]);
          qkn_case(&qkn_models[i], 1, 512, dt, opt.threads[ti]);
        }
      }
      if (opt.dtype >= 0) break;
    }
}

