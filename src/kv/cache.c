/* kv_quant.c - quantized KV caches (posenc.h's pe_kv_cache, issue 17): the
 * validation of a quantized cache tensor (a tensor of bytes, rows of
 * pe__kv_row_bytes), its byte-range overlap test, the formats read from a
 * descriptor, and pe_kv_read (cache rows at slots, dequantized). The stores
 * themselves are the engine's quantizing cache sinks (rope_engine.c). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/quant_common.h"
#include "rope/engine.h"

int64_t pe__kv_row_bytes(uint32_t quant, int64_t dim, pe_dtype dt) {
  switch (quant) {
    case PE_KV_FP8_E4M3:
    case PE_KV_FP8_E5M2: return dim;
    case PE_KV_Q8_0: return dim / PE_Q8_0_BLOCK * PE_Q8_0_BYTES;
    default: return dim * (int64_t)pe__dtype_size(dt);
  }
}

static const char *quant_name(uint32_t q) {
  static const char *const n[4] = {"PE_KV_PLAIN", "PE_KV_FP8_E4M3", "PE_KV_FP8_E5M2",
                                   "PE_KV_Q8_0"};
  return q < 4 ? n[q] : "?";
}

pe_status pe__kv_format(const char *fn, const char *which, uint32_t quant, const float *scale,
                        float *out) {
  *out = 1.0f;
  if (quant > PE_KV_Q8_0)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: kv_cache %s_quant %u is not a pe_kv_quant (0 plain, 1 fp8 e4m3, 2 fp8 "
                    "e5m2, 3 q8_0)",
                    fn, which, (unsigned)quant);
  int fp8 = quant == PE_KV_FP8_E4M3 || quant == PE_KV_FP8_E5M2;
  if (!fp8) {
    if (scale)
      return pe__fail(PE_ERR_INVALID_ARGUMENT,
                      "%s: kv_cache %s_scale is set (%p) but %s has no per-tensor scale", fn, which,
                      (const void *)scale, quant_name(quant));
    return PE_OK;
  }
  if (!scale)
    return pe__fail(PE_ERR_NULL_POINTER, "%s: kv_cache %s_scale is NULL (%s needs one float)", fn,
                    which, quant_name(quant));
  float s = *scale;
  if (!isfinite(s) || !(s > 0.0f))
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: kv_cache %s_scale %g must be finite and > 0", fn,
                    which, (double)s);
  *out = s;
  return PE_OK;
}

pe_status pe__kv_check_tensor(const char *fn, const char *name, const pe_tensor *t,
                              uint32_t quant, int64_t dim) {
  if (quant == PE_KV_PLAIN) {
    pe_status st = pe__check_tensor(fn, name, t, 1);
    if (st != PE_OK) return st;
    if (dim >= 0 && t->shape[3] != dim)
      return pe__fail(PE_ERR_SHAPE, "%s: %s head_dim (shape[3]) %" PRId64 " != cache head_dim %" PRId64,
                      fn, name, t->shape[3], dim);
    return PE_OK;
  }
  if (!t) return pe__fail(PE_ERR_NULL_POINTER, "%s: %s is NULL", fn, name);
  if (!t->data) return pe__fail(PE_ERR_NULL_POINTER, "%s: %s->data is NULL", fn, name);
  for (int i = 0; i < 3; i++)
    if (t->shape[i] < 0)
      return pe__fail(PE_ERR_SHAPE, "%s: %s->shape[%d] = %" PRId64 " must be >= 0", fn, name, i,
                      t->shape[i]);
  if (t->shape[3] <= 0)
    return pe__fail(PE_ERR_SHAPE, "%s: %s->shape[3] = %" PRId64 " must be > 0", fn, name,
                    t->shape[3]);
  if (dim >= 0 && t->shape[3] != dim)
    return pe__fail(PE_ERR_SHAPE, "%s: %s head_dim (shape[3]) %" PRId64 " != cache head_dim %" PRId64,
                    fn, name, t->shape[3], dim);
  if (t->shape[3] > PE_KV_QUANT_MAX_DIM)
    return pe__fail(PE_ERR_SHAPE, "%s: %s head_dim %" PRId64 " > %d, the limit of a %s cache", fn,
                    name, t->shape[3], PE_KV_QUANT_MAX_DIM, quant_name(quant));
  if (quant == PE_KV_Q8_0 && t->shape[3] % PE_Q8_0_BLOCK)
    return pe__fail(PE_ERR_SHAPE,
                    "%s: %s head_dim %" PRId64 " is not a multiple of 32 (PE_KV_Q8_0 blocks)", fn,
                    name, t->shape[3]);
  if (t->stride[3] != 1)
    return pe__fail(PE_ERR_SHAPE, "%s: %s->stride[3] = %" PRId64 " must be 1 (unit inner stride)",
                    fn, name, t->stride[3]);
  if (!t->shape[0] || !t->shape[1] || !t->shape[2]) return PE_OK;
  int64_t lo = 0, hi = pe__kv_row_bytes(quant, t->shape[3], PE_F32);
  for (int i = 0; i < 3; i++) {
    int64_t s = t->stride[i], span;
    if (s == INT64_MIN || __builtin_mul_overflow(t->shape[i] - 1, s < 0 ? -s : s, &span) ||
        (s < 0 ? __builtin_sub_overflow(lo, span, &lo) : __builtin_add_overflow(hi, span, &hi)))
      return pe__fail(PE_ERR_OVERFLOW, "%s: %s byte extent overflows int64 (stride[%d] %" PRId64 ")",
                      fn, name, i, s);
  }
  uintptr_t base = (uintptr_t)t->data, end;
  if ((uintptr_t)(-lo) > base || __builtin_add_overflow(base, (uintptr_t)hi, &end))
    return pe__fail(PE_ERR_OVERFLOW, "%s: %s spans past the address space (strides too large)", fn,
                    name);
  /* As for a plain cache (checked writable): slots never alias, so the slot
   * count num_blocks * block_size, which callers form, cannot overflow. */
  return pe__check_no_alias(fn, name, t, pe__kv_row_bytes(quant, t->shape[3], PE_F32), "bytes");
}

/* [lo, hi) of a validated non-empty tensor: strides in elements of es bytes
 * (1 for a quantized tensor), rows of row_bytes. */
static void span(const pe_tensor *t, uint32_t quant, intptr_t *lo, intptr_t *hi) {
  int64_t es = quant ? 1 : (int64_t)pe__dtype_size(t->dtype), a = 0;
  int64_t b = pe__kv_row_bytes(quant, t->shape[3], t->dtype);
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

/* The caller's descriptor, copied (size-prefixed; the first layout is the
 * oldest, so a smaller struct_size is an uninitialised struct). */
static pe_status copy_kv(const char *fn, const pe_kv_cache *user, pe_kv_cache *kv) {
  if (!user) return pe__fail(PE_ERR_NULL_POINTER, "%s: kv_cache is NULL", fn);
  if (user->struct_size < sizeof(pe_kv_cache))
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: kv_cache struct_size %u is smaller than the oldest layout (%zu bytes): "
                    "call pe_kv_cache_init()",
                    fn, (unsigned)user->struct_size, sizeof(pe_kv_cache));
  pe_kv_cache_init(kv);
  return pe__copy_sized(fn, kv, sizeof *kv, user, user->struct_size);
}

/* ---- pe_kv_read ---- */

/* One cache of the descriptor and its output, validated. */
/* The cache tensor and the tensor t its rows go to (pe_kv_read: t written)
 * or come from (pe_kv_write: t read). */
static pe_status check_rows(const char *fn, const char *which, const pe_tensor *cache,
                            uint32_t quant, const pe_tensor *t, int write) {
  char cn[16], tn[16];
  snprintf(cn, sizeof cn, "kv_cache->%s", which);
  snprintf(tn, sizeof tn, write ? "%s_in" : "%s_out", which);
  pe_status st;
  if (!cache) return pe__fail(PE_ERR_NULL_POINTER, "%s: %s is NULL but %s is given", fn, cn, tn);
  if ((st = pe__kv_check_tensor(fn, cn, cache, quant, -1)) != PE_OK) return st;
  if ((st = pe__check_tensor(fn, tn, t, !write)) != PE_OK) return st;
  if (t->shape[1] != cache->shape[1] || t->shape[3] != cache->shape[3])
    return pe__fail(PE_ERR_SHAPE,
                    "%s: %s [heads %" PRId64 ", dim %" PRId64 "] must match %s's [%" PRId64
                    ", %" PRId64 "]",
                    fn, tn, t->shape[1], t->shape[3], cn, cache->shape[1], cache->shape[3]);
  if (pe__kv_overlap(t, 0, cache, quant))
    return pe__fail(PE_ERR_SHAPE, "%s: %s and %s overlap in memory", fn, tn, cn);
  return PE_OK;
}

/* Rows of t ([batch, heads, tokens, dim], any dtype) from (write 0) or to
 * (write 1) the cache rows at slots, dequantized/quantized or converted. */
static void move_rows(const pe_tensor *cache, uint32_t quant, float scale, const pe_tensor *t,
                      const int64_t *slots, int write) {
  const pe_isa *isa = pe__isa();
  int64_t ces = quant ? 1 : (int64_t)pe__dtype_size(cache->dtype);
  int64_t tes = (int64_t)pe__dtype_size(t->dtype), bs = cache->shape[2], dim = t->shape[3];
  int64_t batch = t->shape[0], tokens = t->shape[2], heads = t->shape[1];
  /* a slot's heads adjacent in both (t's head stride dim, the cache's one
   * row; [B,T,H,D] views, NHD caches): one kernel call for all of them (Q8_0
   * blocks never straddle rows: dim % 32 == 0), so the quantizer's per-call
   * latency (the block scales' divides) overlaps across heads */
  if (heads > 1 && pe__stride(t, 1) == dim &&
      pe__stride(cache, 1) * ces == pe__kv_row_bytes(quant, dim, cache->dtype))
    dim *= heads, heads = 1;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t tk = 0; tk < tokens; tk++) {
      int64_t s = slots[b * tokens + tk];
      if (s < 0) continue;
      char *crow = (char *)cache->data +
                   ((s / bs) * pe__stride(cache, 0) + (s % bs) * pe__stride(cache, 2)) * ces;
      char *trow = (char *)t->data + (b * pe__stride(t, 0) + tk * pe__stride(t, 2)) * tes;
      for (int64_t h = 0; h < heads; h++) {
        char *c = crow + h * pe__stride(cache, 1) * ces, *r = trow + h * pe__stride(t, 1) * tes;
        if (write && quant)
          isa->kv_quant[quant - 1][t->dtype](r, c, dim, scale);
        else if (write)
          isa->convert[t->dtype][cache->dtype](r, c, dim);
        else if (quant)
          isa->kv_dequant[quant - 1][t->dtype](c, r, dim, scale);
        else
          isa->convert[cache->dtype][t->dtype](c, r, dim);
      }
    }
}

/* pe_kv_read (write 0) and pe_kv_write (write 1): kt/vt are the rows read
 * out of the cache, or written into it. */
static pe_status kv_move(const char *fn, const pe_kv_cache *kv_cache, const pe_tensor *kt,
                         const pe_tensor *vt, const int64_t *slot_mapping, int write) {
  pe_kv_cache kv;
  pe_status st = copy_kv(fn, kv_cache, &kv);
  if (st != PE_OK) return st;
  const char *io = write ? "in" : "out";
  if (!kt && !vt) return pe__fail(PE_ERR_NULL_POINTER, "%s: k_%s and v_%s are both NULL", fn, io, io);
  float ks = 1.0f, vs = 1.0f;
  if (kt) {
    if ((st = pe__kv_format(fn, "k", kv.k_quant, kv.k_scale, &ks)) != PE_OK) return st;
    if ((st = check_rows(fn, "k", kv.k, kv.k_quant, kt, write)) != PE_OK) return st;
  }
  if (vt) {
    if ((st = pe__kv_format(fn, "v", kv.v_quant, kv.v_scale, &vs)) != PE_OK) return st;
    if ((st = check_rows(fn, "v", kv.v, kv.v_quant, vt, write)) != PE_OK) return st;
  }
  if (kt && vt) {
    if (kt->shape[0] != vt->shape[0] || kt->shape[2] != vt->shape[2])
      return pe__fail(PE_ERR_SHAPE,
                      "%s: k_%s [batch %" PRId64 ", tokens %" PRId64 "] and v_%s [batch %" PRId64
                      ", tokens %" PRId64 "] must match",
                      fn, io, kt->shape[0], kt->shape[2], io, vt->shape[0], vt->shape[2]);
    if (!write && pe__tensors_overlap(kt, vt))
      return pe__fail(PE_ERR_SHAPE, "%s: k_out and v_out overlap in memory", fn);
    if (kv.k->shape[0] != kv.v->shape[0] || kv.k->shape[2] != kv.v->shape[2])
      return pe__fail(PE_ERR_SHAPE,
                      "%s: kv_cache->k and ->v differ in num_blocks or block_size", fn);
    if (write && pe__kv_overlap(kv.k, kv.k_quant, kv.v, kv.v_quant))
      return pe__fail(PE_ERR_SHAPE, "%s: kv_cache->k and ->v overlap in memory", fn);
    if (pe__kv_overlap(kt, 0, kv.v, kv.v_quant) || pe__kv_overlap(vt, 0, kv.k, kv.k_quant))
      return pe__fail(PE_ERR_SHAPE, "%s: an %s overlaps the other cache tensor", fn,
                      write ? "input" : "output");
  }
  const pe_tensor *any = kt ? kt : vt;
  const pe_tensor *cache = kt ? kv.k : kv.v;
  if (pe__tensor_empty(any)) return PE_OK;
  int64_t batch = any->shape[0], tokens = any->shape[2], n_slots = cache->shape[0] * cache->shape[2];
  if (write) { /* a slot written twice would depend on the order of writes */
    if ((st = pe__rope_check_slots(fn, slot_mapping, batch, tokens, n_slots)) != PE_OK) return st;
  } else {
    if (!slot_mapping) return pe__fail(PE_ERR_NULL_POINTER, "%s: slot_mapping is NULL", fn);
    for (int64_t u = 0; u < batch * tokens; u++)
      if (slot_mapping[u] < -1 || slot_mapping[u] >= n_slots)
        return pe__fail(PE_ERR_INVALID_ARGUMENT,
                        "%s: slot_mapping %" PRId64 " at [batch %" PRId64 ", token %" PRId64
                        "] is outside [-1, %" PRId64 ") (num_blocks * block_size)",
                        fn, slot_mapping[u], u / tokens, u % tokens, n_slots);
  }
  if (kt) move_rows(kv.k, kv.k_quant, ks, kt, slot_mapping, write);
  if (vt) move_rows(kv.v, kv.v_quant, vs, vt, slot_mapping, write);
  return PE_OK;
}

PE_API pe_status pe_kv_read(const pe_kv_cache *kv_cache, const pe_tensor *k_out,
                            const pe_tensor *v_out, const int64_t *slot_mapping) {
  return kv_move("pe_kv_read", kv_cache, k_out, v_out, slot_mapping, 0);
}

/* ---- position operations on a cache: pe_rope_shift_k_cache, pe_rope_rerotate_k_cache ---- */

/* The descriptor's k cache and slots, validated; the plan's cache sink. */
static pe_status cache_plan(const char *fn, const pe_rope_cache *c, const pe_kv_cache *user,
                            const int64_t *slots, int64_t n, pe__rope_source source,
                            pe__rope_plan *p, int *empty) {
  pe_kv_cache kv;
  pe_status st = copy_kv(fn, user, &kv);
  if (st != PE_OK) return st;
  if (!kv.k) return pe__fail(PE_ERR_NULL_POINTER, "%s: kv_cache->k is NULL", fn);
  float scale;
  if ((st = pe__kv_format(fn, "k", kv.k_quant, kv.k_scale, &scale)) != PE_OK) return st;
  const pe_tensor *t = kv.k;
  if ((st = pe__kv_check_tensor(fn, "kv_cache->k", t, kv.k_quant, c->p.head_dim)) != PE_OK)
    return st;
  if (n < 0) return pe__fail(PE_ERR_SHAPE, "%s: n_slots %" PRId64 " must be >= 0", fn, n);
  if (n && (st = pe__rope_check_slots(fn, slots, 1, n, t->shape[0] * t->shape[2])) != PE_OK)
    return st;
  *empty = !n || pe__tensor_empty(t);
  memset(p, 0, sizeof *p);
  p->isa = pe__isa();
  p->half = c->half;
  p->head_dim = c->p.head_dim;
  p->style = c->p.style;
  p->batch = 1;
  p->tokens = n;
  p->source = source;
  p->cache_in_place = 1;
  p->slots = slots;
  p->k.data = t->data; /* non-NULL: the engine's k sinks run; rows come from dst */
  p->k.dtype = kv.k_quant ? PE_F32 : t->dtype;
  p->k.esize = kv.k_quant ? 1 : (int64_t)pe__dtype_size(t->dtype);
  p->k.heads = t->shape[1];
  p->dst = t->data;
  p->dst_dtype = p->k.dtype;
  p->dst_esize = p->k.esize;
  p->dst_block = t->shape[2];
  p->dst_s_block = pe__stride(t, 0);
  p->dst_s_head = pe__stride(t, 1);
  p->dst_s_slot = pe__stride(t, 2);
  p->dst_quant = kv.k_quant;
  p->dst_scale = scale;
  return PE_OK;
}

PE_API pe_status pe_rope_shift_k_cache(const pe_rope_cache *c, const pe_kv_cache *kv_cache,
                                       const int64_t *slots, const int64_t *deltas,
                                       int64_t n_slots, pe_threadpool *pool) {
  static const char fn[] = "pe_rope_shift_k_cache";
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is NULL", fn);
  pe__rope_plan p;
  int empty = 0;
  pe_status st = cache_plan(fn, c, kv_cache, slots, n_slots, PE_SOURCE_SHIFT, &p, &empty);
  if (st != PE_OK) return st;
  if (empty) return PE_OK;
  if (!deltas) return pe__fail(PE_ERR_NULL_POINTER, "%s: deltas is NULL", fn);
  if ((st = pe__check_deltas(fn, deltas, 1, n_slots)) != PE_OK) return st;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  const pe_rope_cache *const caches[1] = {c};
  p.caches = caches;
  p.pos = deltas;
  pe__rope_run(&p, pool);
  return PE_OK;
}

PE_API pe_status pe_rope_rerotate_k_cache(const pe_rope_cache *from, const pe_rope_cache *to,
                                          const pe_kv_cache *kv_cache, const int64_t *slots,
                                          const int64_t *positions, int64_t n_slots,
                                          pe_threadpool *pool) {
  static const char fn[] = "pe_rope_rerotate_k_cache";
  if (!from || !to)
    return pe__fail(PE_ERR_NULL_POINTER, "%s: %s cache is NULL", fn, from ? "to" : "from");
  pe_status st;
  if ((st = pe__rope_check_same_geometry(fn, "the `to` cache", from, to)) != PE_OK) return st;
  pe__rope_plan p;
  int empty = 0;
  if ((st = cache_plan(fn, from, kv_cache, slots, n_slots, PE_SOURCE_REROTATE, &p, &empty)) != PE_OK)
    return st;
  if (empty) return PE_OK;
  if (!positions) return pe__fail(PE_ERR_NULL_POINTER, "%s: positions is NULL", fn);
  if ((st = pe__rope_check_positions(fn, "", positions, 1, n_slots, NULL, NULL)) != PE_OK) return st;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  p.from = from;
  p.to = to;
  p.pos = positions;
  pe__rope_run(&p, pool);
  return PE_OK;
}

/* ---- pe_kv_write ---- */


PE_API pe_status pe_kv_write(const pe_kv_cache *kv_cache, const pe_tensor *k_in,
                             const pe_tensor *v_in, const int64_t *slot_mapping) {
  return kv_move("pe_kv_write", kv_cache, k_in, v_in, slot_mapping, 1);
}
