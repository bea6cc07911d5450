/* store.c - the checks of cache formats and cache tensors, of the QK-norm
 * descriptor, of a whole norm/rotate/store call (pe__check_store: every
 * argument in one pass), and of score matrices (check.h). */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "check/check.h"
#include "kernels/kv_format.h"

/* ---- cache formats and cache tensors ---- */

pe_status pe__check_kv_format(const char *fn, const char *which, uint32_t quant,
                              const float *scale, float *out) {
  *out = 1.0f;
  if (quant > PE_KV_FP8_E4M3_ROWSCALE)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: kv_cache %s_quant %u is not a pe_kv_quant (0 plain, 1 fp8 e4m3, 2 fp8 "
                    "e5m2, 3 q8_0, 4 fp8 e4m3 with row scales)",
                    fn, which, (unsigned)quant);
  int fp8 = quant == PE_KV_FP8_E4M3 || quant == PE_KV_FP8_E5M2;
  if (!fp8) {
    if (scale)
      return pe__fail(PE_ERR_INVALID_ARGUMENT,
                      "%s: kv_cache %s_scale is set (%p) but %s has no per-tensor scale", fn, which,
                      (const void *)scale, pe__kv_quant_name(quant));
    return PE_OK;
  }
  if (!scale)
    return pe__fail(PE_ERR_NULL_POINTER, "%s: kv_cache %s_scale is NULL (%s needs one float)", fn,
                    which, pe__kv_quant_name(quant));
  float s = *scale;
  if (!isfinite(s) || !(s > 0.0f))
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: kv_cache %s_scale %g must be finite and > 0", fn,
                    which, (double)s);
  *out = s;
  return PE_OK;
}

pe_status pe__check_byte_tensor(const char *fn, const char *name, const pe_tensor *t,
                                int64_t row_bytes) {
  if (!t) return pe__fail(PE_ERR_NULL_POINTER, "%s: %s is NULL", fn, name);
  if (!t->data) return pe__fail(PE_ERR_NULL_POINTER, "%s: %s->data is NULL", fn, name);
  pe_status st = pe__check_shape(fn, name, t);
  if (st != PE_OK) return st;
  if (!t->shape[0] || !t->shape[1] || !t->shape[2]) return PE_OK;
  int64_t lo = 0, hi = row_bytes;
  if (!pe__extent_small(t, row_bytes, &lo, &hi)) {
    for (int i = 0; i < 3; i++) {
      int64_t s = t->stride[i], span;
      if (s == INT64_MIN || __builtin_mul_overflow(t->shape[i] - 1, s < 0 ? -s : s, &span) ||
          (s < 0 ? __builtin_sub_overflow(lo, span, &lo) : __builtin_add_overflow(hi, span, &hi)))
        return pe__fail(PE_ERR_OVERFLOW,
                        "%s: %s byte extent overflows int64 (stride[%d] %" PRId64 ")", fn, name, i, s);
    }
  }
  uintptr_t base = (uintptr_t)t->data, end;
  if ((uintptr_t)(-lo) > base || __builtin_add_overflow(base, (uintptr_t)hi, &end))
    return pe__fail(PE_ERR_OVERFLOW, "%s: %s spans past the address space (strides too large)", fn,
                    name);
  /* As for a plain cache (checked writable): slots never alias, so the slot
   * count num_blocks * block_size, which callers form, cannot overflow. */
  return pe__check_no_alias(fn, name, t, row_bytes, "bytes");
}

pe_status pe__check_kv_tensor(const char *fn, const char *name, const pe_tensor *t,
                              uint32_t quant, int64_t dim) {
  if (quant == PE_KV_PLAIN) {
    pe_status st = pe__check_tensor(fn, name, t, 1);
    if (st != PE_OK) return st;
    if (dim >= 0 && t->shape[3] != dim)
      return pe__fail(PE_ERR_SHAPE, "%s: %s head_dim (shape[3]) %" PRId64 " != cache head_dim %" PRId64,
                      fn, name, t->shape[3], dim);
    return PE_OK;
  }
  if (t && t->data && t->shape[3] > 0) { /* the format's own limits first */
    if (dim >= 0 && t->shape[3] != dim)
      return pe__fail(PE_ERR_SHAPE, "%s: %s head_dim (shape[3]) %" PRId64 " != cache head_dim %" PRId64,
                      fn, name, t->shape[3], dim);
    if (t->shape[3] > PE_KV_QUANT_MAX_DIM)
      return pe__fail(PE_ERR_SHAPE, "%s: %s head_dim %" PRId64 " > %d, the limit of a %s cache", fn,
                      name, t->shape[3], PE_KV_QUANT_MAX_DIM, pe__kv_quant_name(quant));
    if (quant == PE_KV_Q8_0 && t->shape[3] % PE_Q8_0_BLOCK)
      return pe__fail(PE_ERR_SHAPE,
                      "%s: %s head_dim %" PRId64 " is not a multiple of 32 (PE_KV_Q8_0 blocks)", fn,
                      name, t->shape[3]);
  }
  if (quant == PE_KV_FP8_E4M3_ROWSCALE && t && t->data && t->shape[3] > 0) {
    /* block-major: the token rows at stride[2] == head_dim, then the scales */
    const int64_t hd = t->shape[3];
    if (t->shape[1] != 1)
      return pe__fail(PE_ERR_SHAPE, "%s: %s kv_heads (shape[1]) %" PRId64 " must be 1 for %s", fn,
                      name, t->shape[1], pe__kv_quant_name(quant));
    if (t->shape[2] > 1 && t->stride[2] != hd)
      return pe__fail(PE_ERR_SHAPE,
                      "%s: %s stride[2] %" PRId64 " must be head_dim %" PRId64
                      " (%s: the block's scales follow its rows)",
                      fn, name, t->stride[2], hd, pe__kv_quant_name(quant));
    int64_t block;
    if (__builtin_mul_overflow(t->shape[2], hd + 4, &block))
      return pe__fail(PE_ERR_OVERFLOW, "%s: %s block_size %" PRId64 " overflows", fn, name,
                      t->shape[2]);
    if (t->shape[0] > 1 && (t->stride[0] < 0 ? -t->stride[0] : t->stride[0]) < block)
      return pe__fail(PE_ERR_SHAPE,
                      "%s: %s stride[0] %" PRId64 " is below a block's %" PRId64
                      " bytes (block_size * (head_dim + 4))",
                      fn, name, t->stride[0], block);
    pe_status st = pe__check_byte_tensor(fn, name, t, hd);
    if (st != PE_OK || !t->shape[2]) return st;
    pe_tensor blocks = {.data = t->data, .shape = {t->shape[0], 1, 1, 1},
                        .stride = {t->stride[0], 0, 0, 1}};
    return pe__check_byte_tensor(fn, name, &blocks, block);
  }
  return pe__check_byte_tensor(fn, name, t,
                               t && t->shape[3] > 0 ? pe__kv_row_bytes(quant, t->shape[3], PE_F32) : 1);
}

/* [lo, hi) of a validated non-empty tensor: strides in elements of es bytes
 * (1 for a quantized tensor), rows of row_bytes. */
static void span(const pe_tensor *t, uint32_t quant, intptr_t *lo, intptr_t *hi) {
  int64_t es = quant ? 1 : (int64_t)pe__dtype_size(t->dtype), a = 0;
  int64_t b = pe__kv_row_bytes(quant, t->shape[3], t->dtype);
  if (quant == PE_KV_FP8_E4M3_ROWSCALE) b += 4 * t->shape[2]; /* the last block's scales */
  for (int i = 0; i < 3; i++) {
    int64_t sp = (t->shape[i] - 1) * pe__stride(t, i) * es;
    if (sp < 0) a += sp;
    else b += sp;
  }
  *lo = (intptr_t)t->data + (intptr_t)a;
  *hi = (intptr_t)t->data + (intptr_t)b;
}

int pe__kv_overlap(const pe_tensor *a, uint32_t qa, const pe_tensor *b, uint32_t qb) {
  if (!a || !b || pe__tensor_empty(a) || pe__tensor_empty(b)) return 0;
  if (!qa && !qb) return pe__tensors_overlap(a, b);
  intptr_t alo, ahi, blo, bhi;
  span(a, qa, &alo, &ahi);
  span(b, qb, &blo, &bhi);
  return alo < bhi && blo < ahi;
}

/* A validated tensor (or NULL) of a store call with its byte range, found
 * once: a call tests up to 14 pairs of its tensors and weights, and a
 * decode step's whole check was a fifth of its time when each test found
 * both ranges again (AMD EPYC Zen 3). */
typedef struct region {
  const pe_tensor *t;
  uint32_t quant;
  int none; /* NULL or empty: overlaps nothing */
  intptr_t lo, hi;
} region;

/* *r for t, its fields written in place. Never a region returned or
 * copied: a 40-byte struct built field by field and then copied goes
 * through 16-byte loads of the fields just stored, which store forwarding
 * cannot serve (Intel Xeon, one-token Qwen3-8B pe_qk_norm_rope_store, f32:
 * pe__check_store 10.2 -> 7.7 % of the call's `perf` samples without the
 * copies and the memset of *out, pe-ab 0.98 of the time). */
static inline __attribute__((always_inline)) void region_set(region *r, const pe_tensor *t,
                                                             uint32_t quant) {
  r->t = t;
  r->quant = quant;
  r->none = !t || pe__tensor_empty(t);
  r->lo = r->hi = 0;
  if (!r->none) span(t, quant, &r->lo, &r->hi);
}

/* pe__kv_overlap(a, b) from the ranges found once: ranges apart never
 * meet, meeting ranges of a quantized tensor (bytes) do, and two plain
 * tensors take the exact test (the elements of views of one packed
 * buffer). */
static int regions_overlap(const region *a, const region *b) {
  if (a->none || b->none || !(a->lo < b->hi && b->lo < a->hi)) return 0;
  return a->quant || b->quant || pe__tensors_overlap(a->t, b->t);
}

pe_status pe__copy_kv_cache(const char *fn, const pe_kv_cache *user, pe_kv_cache *kv) {
  if (!user) return pe__fail(PE_ERR_NULL_POINTER, "%s: kv_cache is NULL", fn);
  if (user->struct_size < sizeof(pe_kv_cache))
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: kv_cache struct_size %u is smaller than the oldest layout (%zu bytes): "
                    "call pe_kv_cache_init()",
                    fn, (unsigned)user->struct_size, sizeof(pe_kv_cache));
  pe__kv_cache_defaults(kv);
  return pe__copy_sized(fn, kv, sizeof *kv, user, user->struct_size);
}

/* ---- the QK-norm descriptor ---- */

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
                              const region *const *written, int n_written) {
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
  region rw;
  region_set(&rw, &wt, PE_KV_PLAIN);
  for (int i = 0; i < n_written; i++)
    if (regions_overlap(&rw, written[i]))
      return pe__fail(PE_ERR_SHAPE, "%s: norm %s (%" PRId64 " floats at %p) overlaps a tensor the call writes",
                      fn, name, len, (const void *)w);
  return PE_OK;
}

/* The caller's norm (NULL: none), validated, into *out. */
static pe_status read_norm(const char *fn, const pe_qk_norm *user, const pe_tensor *q,
                           const pe_tensor *k, int32_t hd, const region *const *written, int n_written,
                           pe_qk_norm *out) {
  pe_qk_norm n;
  pe__qk_norm_defaults(&n);
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
  if ((st = check_weight(fn, "q_weight", &n, n.q_weight, q, hd, written, n_written)) != PE_OK)
    return st;
  if ((st = check_weight(fn, "k_weight", &n, n.k_weight, k, hd, written, n_written)) != PE_OK)
    return st;
  *out = n;
  return PE_OK;
}

/* ---- a cache store's v ---- */

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
 * what the call writes or reads into them (rq, rk, rkc: q, k and the k
 * cache's regions). Their regions into *rv, *rvc. */
static pe_status check_v(const char *fn, const region *rq, const region *rk, const pe_tensor *v,
                         const region *rkc, const pe_tensor *vc, uint32_t vq, region *rv,
                         region *rvc) {
  pe_status st;
  const pe_tensor *k = rk->t, *kc = rkc->t;
  region_set(rv, NULL, PE_KV_PLAIN);
  region_set(rvc, NULL, PE_KV_PLAIN);
  if (!v && !vc) return PE_OK;
  if (!v) return pe__fail(PE_ERR_NULL_POINTER, "%s: v is NULL but the v cache is given", fn);
  if (!vc) return pe__fail(PE_ERR_NULL_POINTER, "%s: v is given but the v cache is NULL", fn);
  if ((st = pe__check_tensor(fn, "v", v, 0)) != PE_OK) return st;
  if ((st = pe__check_kv_tensor(fn, "v_cache", vc, vq, -1)) != PE_OK) return st;
  if ((st = same_dims(fn, "v", v, "k", k, "batch, heads, tokens")) != PE_OK) return st;
  if ((st = same_dims(fn, "v_cache", vc, "k_cache", kc, "num_blocks, heads, block_size")) != PE_OK)
    return st;
  if (vc->shape[3] != v->shape[3])
    return pe__fail(PE_ERR_SHAPE, "%s: v_cache head_dim (shape[3]) %" PRId64 " != v's %" PRId64,
                    fn, vc->shape[3], v->shape[3]);
  region_set(rv, v, PE_KV_PLAIN);
  region_set(rvc, vc, vq);
  const region *other[4] = {rq, rk, rv, rkc};
  static const char *const names[4] = {"q", "k", "v", "k_cache"};
  for (int i = 0; i < 4; i++)
    if (regions_overlap(rvc, other[i]))
      return pe__fail(PE_ERR_SHAPE, "%s: v_cache and %s overlap in memory", fn, names[i]);
  if (regions_overlap(rkc, rv)) return pe__fail(PE_ERR_SHAPE, "%s: k_cache and v overlap in memory", fn);
  if (regions_overlap(rq, rv))
    return pe__fail(PE_ERR_SHAPE, "%s: q and v overlap in memory: v would be read after q is written", fn);
  return PE_OK;
}

/* ---- the whole call ---- */

pe_status pe__check_store(const pe__store_call *c, pe__store_checked *out) {
  const char *fn = c->fn;
  const pe_tensor *q = c->q, *k = c->k, *kc = c->k_cache, *vc = c->v_cache;
  const int32_t hd = c->head_dim;
  pe_status st;
  /* Each field set where it is known (no memset of the whole struct: a
   * rep stos at every call); the caller reads *out only after PE_OK. */
  out->k_quant = out->v_quant = PE_KV_PLAIN;
  out->k_scale = out->v_scale = 1.0f;
  if (c->norm_required && !c->norm)
    return pe__fail(PE_ERR_NULL_POINTER, "%s: norm is NULL (PE_QK_NORM_NONE for none)", fn);
  if (c->kv_desc) { /* the caller's descriptor: its caches and formats */
    pe_kv_cache kv;
    if ((st = pe__copy_kv_cache(fn, c->kv, &kv)) != PE_OK) return st;
    if (!kv.k) return pe__fail(PE_ERR_NULL_POINTER, "%s: kv_cache->k is NULL", fn);
    kc = kv.k;
    vc = kv.v;
    out->k_quant = kv.k_quant;
    out->v_quant = kv.v_quant;
    if ((st = pe__check_kv_format(fn, "k", kv.k_quant, kv.k_scale, &out->k_scale)) != PE_OK)
      return st;
    if ((st = pe__check_kv_format(fn, "v", kv.v_quant, kv.v_scale, &out->v_scale)) != PE_OK)
      return st;
  }
  const uint32_t kq = out->k_quant, vq = out->v_quant;
  const int store = c->to_cache;
  if (store) {
    if (!k) return pe__fail(PE_ERR_NULL_POINTER, "%s: k is NULL (rotate q alone in place)", fn);
    if (!kc) return pe__fail(PE_ERR_NULL_POINTER, "%s: k_cache is NULL", fn);
  }
  if ((st = pe__check_qk(fn, q, k, hd, !store)) != PE_OK) return st;
  region rq, rk, rkc, rv, rvc, none; /* rkc, rv, rvc: set and read only if store */
  region_set(&rq, q, PE_KV_PLAIN);
  region_set(&rk, k, PE_KV_PLAIN);
  if (store) {
    if ((st = pe__check_kv_tensor(fn, "k_cache", kc, kq, hd)) != PE_OK) return st;
    if (kc->shape[1] != k->shape[1])
      return pe__fail(PE_ERR_SHAPE, "%s: k_cache heads (shape[1]) %" PRId64 " != k heads %" PRId64,
                      fn, kc->shape[1], k->shape[1]);
    region_set(&rkc, kc, kq);
    if (regions_overlap(&rkc, &rk))
      return pe__fail(PE_ERR_SHAPE, "%s: k_cache and k overlap in memory", fn);
    if (regions_overlap(&rkc, &rq))
      return pe__fail(PE_ERR_SHAPE, "%s: k_cache and q overlap in memory", fn);
    if ((st = check_v(fn, &rq, &rk, c->v, &rkc, vc, vq, &rv, &rvc)) != PE_OK) return st;
  }
  if ((st = pe__check_flags(fn, c->flags, PE_ROPE_INVERSE | (store ? PE_ROPE_STREAM_CACHE : 0u))) !=
      PE_OK)
    return st;
  if (store && !c->slot_mapping)
    return pe__fail(PE_ERR_NULL_POINTER, "%s: slot_mapping is NULL", fn);
  /* The norm's weights are read while q and the caches are written (in
   * place: q and k). Quantized rows are bytes. */
  region_set(&none, NULL, PE_KV_PLAIN);
  const region *const written[3] = {&rq, store ? &rkc : &rk, store ? &rvc : &none};
  if ((st = read_norm(fn, c->norm, q, k, hd, written, 3, &out->norm)) != PE_OK) return st;
  const pe_tensor *any = k ? k : q;
  out->batch = any->shape[0];
  out->tokens = any->shape[2];
  pe__pos_check pc = {.fn = fn, .name = "position", .axis = "", .owner = "cache",
                      .pos = c->positions,
                      .batch = out->batch, .tokens = out->tokens, .null_is_index = 1,
                      .bound = c->bound};
  if ((st = pe__check_positions(&pc)) != PE_OK) return st;
  if (store &&
      (st = pe__check_slots(fn, c->slot_mapping, out->batch, out->tokens,
                            pe__cache_slots(kc), 1)) != PE_OK)
    return st;
  out->k_cache = store ? kc : NULL;
  out->v_cache = store && c->v ? vc : NULL;
  /* An empty call is known only now: every argument has been checked. */
  out->empty = (!k || pe__tensor_empty(k)) && (!q || pe__tensor_empty(q)) &&
               (!c->v || pe__tensor_empty(c->v));
  return PE_OK;
}

/* ---- score matrices ---- */

pe_status pe__check_scores(const char *fn, const pe_tensor *scores, const int64_t *q_positions,
                           uint32_t flags) {
  pe_status st = pe__check_tensor(fn, "scores", scores, 1);
  if (st != PE_OK) return st;
  if ((st = pe__check_flags(fn, flags, PE_MASK_CAUSAL)) != PE_OK) return st;
  int64_t q_len = scores->shape[2], k_len = scores->shape[3];
  if (!q_positions && q_len > k_len)
    return pe__fail(PE_ERR_SHAPE,
                    "%s: q_positions NULL means query i sits at k_len - q_len + i, which needs "
                    "q_len %" PRId64 " <= k_len %" PRId64,
                    fn, q_len, k_len);
  /* Keys are at 0..k_len-1 and k_len <= 2^53 is implied by the byte extent;
   * queries anywhere in [0, 2^53) keep every distance exact in int64. */
  pe__pos_check pc = {.fn = fn, .name = "q_position", .axis = "", .pos = q_positions,
                      .batch = scores->shape[0], .tokens = q_len, .bound = PE_POS_ANY};
  return pe__check_positions(&pc);
}
