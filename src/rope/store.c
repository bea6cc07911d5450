/* store.c - the cache store core every norm/store entry point runs
 * (pe__rope_store: the checks in one pass, one plan, one engine run), and
 * pe_apply_rope_qk_store: q rotated in place and the rotated k written
 * straight into a (paged) KV cache, converted to the cache's dtype or
 * quantized, in one pass of the engine (its cache sink). */
#include "rope/engine.h"

/* The plan's sink fields for cache tensor t (format quant: strides in bytes,
 * dtype not read). */
static void plan_dst(char **data, pe_dtype *dtype, int64_t *esize, int64_t *s_block,
                     int64_t *s_head, int64_t *s_slot, const pe_tensor *t, uint32_t quant) {
  *data = t->data;
  *dtype = t->dtype;
  *esize = quant ? 1 : (int64_t)pe__dtype_size(t->dtype);
  *s_block = pe__stride(t, 0);
  *s_head = pe__stride(t, 1);
  *s_slot = pe__stride(t, 2);
}

pe_status pe__rope_store(const pe_rope_cache *c, pe__store_call *call, pe_threadpool *pool) {
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is NULL", call->fn);
  call->head_dim = c->p.head_dim;
  call->bound = pe__rope_bound(c);
  pe__store_checked ok;
  pe_status st = pe__check_store(call, &ok);
  if (st != PE_OK || ok.empty) return st;
  if ((st = pe__pool_acquire(call->fn, pool)) != PE_OK) return st;
  const pe_rope_cache *const caches[1] = {c};
  pe__rope_plan p;
  pe__rope_plan_init(&p, c, call->q, call->k, call->flags, PE_SOURCE_POSITIONS);
  p.caches = caches;
  p.pos = call->positions;
  /* the norm stage: isa.h's PE_NORM_* equal the kinds */
  p.norm_mode = (int32_t)ok.norm.kind;
  p.norm_per_token = ok.norm.scope == PE_QK_NORM_PER_TOKEN;
  p.norm_eps = ok.norm.eps;
  p.q_weight = ok.norm.q_weight;
  p.k_weight = ok.norm.k_weight;
  if (ok.k_cache) { /* the cache sinks */
    const pe_tensor *kc = ok.k_cache, *v = call->v;
    p.slots = call->slot_mapping;
    p.dst_block = kc->shape[2];
    plan_dst(&p.dst, &p.dst_dtype, &p.dst_esize, &p.dst_s_block, &p.dst_s_head, &p.dst_s_slot,
             kc, ok.k_quant);
    p.dst_quant = ok.k_quant;
    p.dst_scale = ok.k_scale;
    if (v && ok.v_cache) {
      pe__rope_operand_from(&p.v, v);
      p.v_dim = v->shape[3];
      plan_dst(&p.v_dst, &p.v_dst_dtype, &p.v_dst_esize, &p.v_dst_s_block, &p.v_dst_s_head,
               &p.v_dst_s_slot, ok.v_cache, ok.v_quant);
      p.v_dst_quant = ok.v_quant;
      p.v_dst_scale = ok.v_scale;
    }
  }
  pe__rope_run(&p, pool);
  return PE_OK;
}

PE_API pe_status pe_apply_rope_qk_store(const pe_rope_cache *c, const pe_tensor *q,
                                        const pe_tensor *k, const pe_tensor *k_cache,
                                        const int64_t *slot_mapping, const int64_t *positions,
                                        uint32_t flags, pe_threadpool *pool) {
  pe__store_call call = {.fn = "pe_apply_rope_qk_store", .to_cache = 1, .q = q, .k = k,
                         .k_cache = k_cache, .slot_mapping = slot_mapping,
                         .positions = positions, .flags = flags};
  return pe__rope_store(c, &call, pool);
}
