/* qk_norm.c - the post-projection step: pe_qk_norm_rope (QK-norm + RoPE in
 * place) and pe_qk_norm_rope_store (QK-norm + RoPE, k and v into a paged KV
 * cache), and the cache-store validation pe_apply_rope_qk_store shares. Each
 * validates, fills one engine plan (its norm stage and cache sinks) and runs
 * the engine once. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "rope/engine.h"

PE_API void pe_qk_norm_init(pe_qk_norm *n) {
  if (!n) return;
  memset(n, 0, sizeof *n);
  n->struct_size = (uint32_t)sizeof *n;
  n->kind = PE_QK_NORM_NONE;
  n->scope = PE_QK_NORM_PER_HEAD;
  n->eps = 1e-6f;
}

PE_API void pe_kv_cache_init(pe_kv_cache *kv) {
  if (!kv) return;
  memset(kv, 0, sizeof *kv);
  kv->struct_size = (uint32_t)sizeof *kv;
}

/* ---- the norm ---- */

/* A weight of n floats as a tensor, for the overlap checks. */
static pe_tensor weight_tensor(const float *w, int64_t n) {
  pe_tensor t = {.data = (void *)w, .dtype = PE_F32, .shape = {1, 1, 1, n},
                 .stride = {n, n, n, 1}};
  return t;
}

/* One operand's weight: present when the kind has weights (and the operand
 * is given), NULL otherwise; disjoint from every written tensor. */
static pe_status check_weight(const char *fn, const char *name, const pe_qk_norm *n,
                              const float *w, const pe_tensor *t, int32_t hd,
                              const pe_tensor *const *written, const uint32_t *quant,
                              int n_written) {
  int weighted = n->kind == PE_QK_NORM_RMS || n->kind == PE_QK_NORM_RMS_UNIT_OFFSET;
  if (!weighted) {
    if (w)
      return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: norm %s is set but kind %d has no weight", fn,
                      name, (int)n->kind);
    return PE_OK;
  }
  if (!t) return PE_OK;
  if (!w)
    return pe__fail(PE_ERR_NULL_POINTER, "%s: norm %s is NULL (kind %d needs a weight)", fn, name,
                    (int)n->kind);
  int64_t len = n->scope == PE_QK_NORM_PER_TOKEN ? t->shape[1] * hd : hd;
  if (len <= 0) return PE_OK;
  if (len > INT64_MAX / 8)
    return pe__fail(PE_ERR_OVERFLOW, "%s: norm %s of %" PRId64 " floats: byte count overflows", fn,
                    name, len);
  pe_tensor wt = weight_tensor(w, len);
  for (int i = 0; i < n_written; i++)
    if (written[i] && pe__kv_overlap(&wt, 0, written[i], quant ? quant[i] : PE_KV_PLAIN))
      return pe__fail(PE_ERR_SHAPE, "%s: norm %s (%" PRId64 " floats at %p) overlaps a tensor the call writes",
                      fn, name, len, (const void *)w);
  return PE_OK;
}

/* The caller's norm (NULL: none), validated, into the plan's stage. */
static pe_status read_norm(const char *fn, const pe_qk_norm *user, const pe_tensor *q,
                           const pe_tensor *k, int32_t hd, const pe_tensor *const *written,
                           const uint32_t *quant, int n_written, pe__rope_plan *p) {
  pe_qk_norm n;
  pe_qk_norm_init(&n);
  if (user) {
    if (user->struct_size < sizeof(pe_qk_norm)) /* today's layout is the oldest */
      return pe__fail(PE_ERR_INVALID_ARGUMENT,
                      "%s: norm struct_size %u is smaller than the oldest layout (%zu bytes): call "
                      "pe_qk_norm_init()",
                      fn, (unsigned)user->struct_size, sizeof(pe_qk_norm));
    pe_status st = pe__copy_sized(fn, &n, sizeof n, user, user->struct_size);
    if (st != PE_OK) return st;
  }
  if ((unsigned)n.kind > PE_QK_NORM_L2)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: norm kind %d is not a pe_qk_norm_kind (0..3)",
                    fn, (int)n.kind);
  if ((unsigned)n.scope > PE_QK_NORM_PER_TOKEN)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: norm scope %d is not a pe_qk_norm_scope (0 per head, 1 per token)", fn,
                    (int)n.scope);
  if (!isfinite(n.eps) || n.eps < 0)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: norm eps %g must be finite and >= 0", fn,
                    (double)n.eps);
  pe_status st;
  if ((st = check_weight(fn, "q_weight", &n, n.q_weight, q, hd, written, quant, n_written)) != PE_OK)
    return st;
  if ((st = check_weight(fn, "k_weight", &n, n.k_weight, k, hd, written, quant, n_written)) != PE_OK)
    return st;
  /* isa.h's PE_NORM_* equal the kinds */
  p->norm_mode = (int32_t)n.kind;
  p->norm_per_token = n.scope == PE_QK_NORM_PER_TOKEN;
  p->norm_eps = n.eps;
  p->q_weight = n.q_weight;
  p->k_weight = n.k_weight;
  return PE_OK;
}

/* ---- in place ---- */

PE_API pe_status pe_qk_norm_rope(const pe_rope_cache *c, const pe_qk_norm *norm,
                                 const pe_tensor *q, const pe_tensor *k,
                                 const int64_t *positions, uint32_t flags, pe_threadpool *pool) {
  static const char fn[] = "pe_qk_norm_rope";
  pe_status st;
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is NULL", fn);
  if (!norm) return pe__fail(PE_ERR_NULL_POINTER, "%s: norm is NULL (PE_QK_NORM_NONE for none)", fn);
  int32_t hd = c->p.head_dim;
  if ((st = pe__rope_check_qk(fn, q, k, hd, 1)) != PE_OK) return st;
  if ((st = pe__check_flags(fn, flags, PE_ROPE_INVERSE)) != PE_OK) return st;
  pe__rope_plan p;
  pe__rope_plan_init(&p, c, q, k, flags, PE_SOURCE_POSITIONS);
  const pe_tensor *written[2] = {q, k};
  if ((st = read_norm(fn, norm, q, k, hd, written, NULL, 2, &p)) != PE_OK) return st;
  const pe_rope_cache *const caches[1] = {c};
  if ((st = pe__rope_check_positions(fn, "", positions, p.batch, p.tokens, caches, NULL)) != PE_OK)
    return st;
  if ((!q || pe__tensor_empty(q)) && (!k || pe__tensor_empty(k))) return PE_OK;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  p.caches = caches;
  p.pos = positions;
  pe__rope_run(&p, pool);
  return PE_OK;
}

/* ---- into the cache ---- */

/* a's first three dimensions (named by dims) equal b's. */
static pe_status same_dims(const char *fn, const char *an, const pe_tensor *a, const char *bn,
                           const pe_tensor *b, const char *dims) {
  for (int d = 0; d < 3; d++)
    if (a->shape[d] != b->shape[d])
      return pe__fail(PE_ERR_SHAPE,
                      "%s: %s [%s] = [%" PRId64 ", %" PRId64 ", %" PRId64 "] must match %s's [%" PRId64
                      ", %" PRId64 ", %" PRId64 "]",
                      fn, an, dims, a->shape[0], a->shape[1], a->shape[2], bn, b->shape[0],
                      b->shape[1], b->shape[2]);
  return PE_OK;
}

/* v and its cache: present together, v's [batch, heads, tokens] k's, the v
 * cache's [num_blocks, heads, block_size] the k cache's, nothing shared with
 * what the call writes or reads into them. */
static pe_status check_v(const char *fn, const pe_tensor *q, const pe_tensor *k,
                         const pe_tensor *v, const pe_tensor *kc, const pe_tensor *vc,
                         uint32_t kq, uint32_t vq) {
  pe_status st;
  if (!v && !vc) return PE_OK;
  if (!v) return pe__fail(PE_ERR_NULL_POINTER, "%s: v is NULL but the v cache is given", fn);
  if (!vc) return pe__fail(PE_ERR_NULL_POINTER, "%s: v is given but the v cache is NULL", fn);
  if ((st = pe__check_tensor(fn, "v", v, 0)) != PE_OK) return st;
  if ((st = pe__kv_check_tensor(fn, "v_cache", vc, vq, -1)) != PE_OK) return st;
  if ((st = same_dims(fn, "v", v, "k", k, "batch, heads, tokens")) != PE_OK) return st;
  if ((st = same_dims(fn, "v_cache", vc, "k_cache", kc, "num_blocks, heads, block_size")) != PE_OK)
    return st;
  if (vc->shape[3] != v->shape[3])
    return pe__fail(PE_ERR_SHAPE, "%s: v_cache head_dim (shape[3]) %" PRId64 " != v's %" PRId64,
                    fn, vc->shape[3], v->shape[3]);
  const pe_tensor *other[4] = {q, k, v, kc};
  const uint32_t oq[4] = {0, 0, 0, kq};
  static const char *const names[4] = {"q", "k", "v", "k_cache"};
  for (int i = 0; i < 4; i++)
    if (other[i] && pe__kv_overlap(vc, vq, other[i], oq[i]))
      return pe__fail(PE_ERR_SHAPE, "%s: v_cache and %s overlap in memory", fn, names[i]);
  if (pe__kv_overlap(kc, kq, v, 0)) return pe__fail(PE_ERR_SHAPE, "%s: k_cache and v overlap in memory", fn);
  if (q && pe__tensors_overlap(q, v))
    return pe__fail(PE_ERR_SHAPE, "%s: q and v overlap in memory: v would be read after q is written", fn);
  return PE_OK;
}

static void plan_dst(char **data, pe_dtype *dtype, int64_t *esize, int64_t *s_block,
                     int64_t *s_head, int64_t *s_slot, const pe_tensor *t) {
  *data = t->data;
  *dtype = t->dtype;
  *esize = (int64_t)pe__dtype_size(t->dtype);
  *s_block = pe__stride(t, 0);
  *s_head = pe__stride(t, 1);
  *s_slot = pe__stride(t, 2);
}

pe_status pe__rope_store(const char *fn, const pe_rope_cache *c, const pe_qk_norm *norm,
                         const pe_tensor *q, const pe_tensor *k, const pe_tensor *v,
                         const pe_tensor *k_cache, const pe_tensor *v_cache,
                         const int64_t *slot_mapping, const int64_t *positions, uint32_t flags,
                         pe_threadpool *pool, const pe_kv_cache *formats) {
  pe_status st;
  uint32_t kq = formats ? formats->k_quant : PE_KV_PLAIN;
  uint32_t vq = formats ? formats->v_quant : PE_KV_PLAIN;
  float ks = 1.0f, vs = 1.0f;
  if (formats) {
    if ((st = pe__kv_format(fn, "k", kq, formats->k_scale, &ks)) != PE_OK) return st;
    if ((st = pe__kv_format(fn, "v", vq, formats->v_scale, &vs)) != PE_OK) return st;
  }
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is NULL", fn);
  if (!k) return pe__fail(PE_ERR_NULL_POINTER, "%s: k is NULL (rotate q alone in place)", fn);
  if (!k_cache) return pe__fail(PE_ERR_NULL_POINTER, "%s: k_cache is NULL", fn);
  int32_t hd = c->p.head_dim;
  if ((st = pe__rope_check_qk(fn, q, k, hd, 0)) != PE_OK) return st;
  if ((st = pe__kv_check_tensor(fn, "k_cache", k_cache, kq, hd)) != PE_OK) return st;
  if (k_cache->shape[1] != k->shape[1])
    return pe__fail(PE_ERR_SHAPE, "%s: k_cache heads (shape[1]) %" PRId64 " != k heads %" PRId64,
                    fn, k_cache->shape[1], k->shape[1]);
  if (pe__kv_overlap(k_cache, kq, k, 0))
    return pe__fail(PE_ERR_SHAPE, "%s: k_cache and k overlap in memory", fn);
  if (q && pe__kv_overlap(k_cache, kq, q, 0))
    return pe__fail(PE_ERR_SHAPE, "%s: k_cache and q overlap in memory", fn);
  if ((st = check_v(fn, q, k, v, k_cache, v_cache, kq, vq)) != PE_OK) return st;
  if ((st = pe__check_flags(fn, flags, PE_ROPE_INVERSE)) != PE_OK) return st;
  if (!slot_mapping) return pe__fail(PE_ERR_NULL_POINTER, "%s: slot_mapping is NULL", fn);
  pe__rope_plan p;
  pe__rope_plan_init(&p, c, q, k, flags, PE_SOURCE_POSITIONS);
  const pe_tensor *written[3] = {q, k_cache, v_cache};
  const uint32_t written_quant[3] = {PE_KV_PLAIN, kq, vq}; /* quantized rows are bytes */
  if ((st = read_norm(fn, norm, q, k, hd, written, written_quant, 3, &p)) != PE_OK) return st;
  int64_t batch = k->shape[0], tokens = k->shape[2];
  const pe_rope_cache *const caches[1] = {c};
  if ((st = pe__rope_check_positions(fn, "", positions, batch, tokens, caches, NULL)) != PE_OK)
    return st;
  if ((st = pe__rope_check_slots(fn, slot_mapping, batch, tokens,
                                 k_cache->shape[0] * k_cache->shape[2])) != PE_OK)
    return st;
  /* An empty call returns only now: every argument has been checked. */
  if (pe__tensor_empty(k) && (!q || pe__tensor_empty(q)) && (!v || pe__tensor_empty(v)))
    return PE_OK;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  p.caches = caches;
  p.pos = positions;
  p.slots = slot_mapping;
  p.dst_block = k_cache->shape[2];
  plan_dst(&p.dst, &p.dst_dtype, &p.dst_esize, &p.dst_s_block, &p.dst_s_head, &p.dst_s_slot,
           k_cache);
  p.dst_quant = kq;
  p.dst_scale = ks;
  if (kq) p.dst_esize = 1; /* strides in bytes; dtype not read */
  if (v) {
    pe__rope_operand_from(&p.v, v);
    p.v_dim = v->shape[3];
    plan_dst(&p.v_dst, &p.v_dst_dtype, &p.v_dst_esize, &p.v_dst_s_block, &p.v_dst_s_head,
             &p.v_dst_s_slot, v_cache);
    p.v_dst_quant = vq;
    p.v_dst_scale = vs;
    if (vq) p.v_dst_esize = 1;
  }
  pe__rope_run(&p, pool);
  return PE_OK;
}

PE_API pe_status pe_qk_norm_rope_store(const pe_rope_cache *c, const pe_qk_norm *norm,
                                       const pe_tensor *q, const pe_tensor *k,
                                       const pe_tensor *v, const pe_kv_cache *kv_cache,
                                       const int64_t *slot_mapping, const int64_t *positions,
                                       uint32_t flags, pe_threadpool *pool) {
  static const char fn[] = "pe_qk_norm_rope_store";
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is NULL", fn);
  if (!norm) return pe__fail(PE_ERR_NULL_POINTER, "%s: norm is NULL (PE_QK_NORM_NONE for none)", fn);
  if (!kv_cache) return pe__fail(PE_ERR_NULL_POINTER, "%s: kv_cache is NULL", fn);
  if (kv_cache->struct_size < sizeof(pe_kv_cache)) /* today's layout is the oldest */
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: kv_cache struct_size %u is smaller than the oldest layout (%zu bytes): "
                    "call pe_kv_cache_init()",
                    fn, (unsigned)kv_cache->struct_size, sizeof(pe_kv_cache));
  pe_kv_cache kv;
  pe_kv_cache_init(&kv);
  pe_status st = pe__copy_sized(fn, &kv, sizeof kv, kv_cache, kv_cache->struct_size);
  if (st != PE_OK) return st;
  if (!kv.k) return pe__fail(PE_ERR_NULL_POINTER, "%s: kv_cache->k is NULL", fn);
  return pe__rope_store(fn, c, norm, q, k, v, kv.k, kv.v, slot_mapping, positions, flags, pool,
                        &kv);
}
