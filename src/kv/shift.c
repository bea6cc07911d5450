/* shift.c - position operations on the keys already in a KV cache, at
 * slots: pe_rope_shift_k_cache (rotate by a delta, llama.cpp's context
 * shift) and pe_rope_rerotate_k_cache (from one rotation to another), plain
 * or quantized rows, each one engine run whose sink is the cache itself. */
#include <inttypes.h>
#include <string.h>

#include "rope/engine.h"

/* The descriptor's k cache and slots, validated; the plan's cache sink. */
static pe_status cache_plan(const char *fn, const pe_rope_cache *c, const pe_kv_cache *user,
                            const int64_t *slots, int64_t n, pe__rope_source source,
                            pe__rope_plan *p, int *empty) {
  pe_kv_cache kv;
  pe_status st = pe__copy_kv_cache(fn, user, &kv);
  if (st != PE_OK) return st;
  if (!kv.k) return pe__fail(PE_ERR_NULL_POINTER, "%s: kv_cache->k is NULL", fn);
  float scale;
  if ((st = pe__check_kv_format(fn, "k", kv.k_quant, kv.k_scale, &scale)) != PE_OK) return st;
  const pe_tensor *t = kv.k;
  if ((st = pe__check_kv_tensor(fn, "kv_cache->k", t, kv.k_quant, c->p.head_dim)) != PE_OK)
    return st;
  if (n < 0) return pe__fail(PE_ERR_SHAPE, "%s: n_slots %" PRId64 " must be >= 0", fn, n);
  if (n && (st = pe__check_slots(fn, slots, 1, n, pe__cache_slots(t), 1)) != PE_OK)
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
  if ((st = pe__check_same_rotation(fn, "the `to` cache", from->p.head_dim, from->p.rotary_dim,
                                    from->p.style, to->p.head_dim, to->p.rotary_dim,
                                    to->p.style)) != PE_OK)
    return st;
  pe__rope_plan p;
  int empty = 0;
  if ((st = cache_plan(fn, from, kv_cache, slots, n_slots, PE_SOURCE_REROTATE, &p, &empty)) != PE_OK)
    return st;
  if (empty) return PE_OK;
  if (!positions) return pe__fail(PE_ERR_NULL_POINTER, "%s: positions is NULL", fn);
  pe__pos_check pc = {.fn = fn, .name = "position", .axis = "", .pos = positions, .batch = 1,
                      .tokens = n_slots, .bound = PE_POS_ANY};
  if ((st = pe__check_positions(&pc)) != PE_OK) return st;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  p.from = from;
  p.to = to;
  p.pos = positions;
  pe__rope_run(&p, pool);
  return PE_OK;
}

