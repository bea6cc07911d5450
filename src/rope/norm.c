/* norm.c - the QK-norm entry points: pe_qk_norm_rope (QK-norm + RoPE in
 * place) and pe_qk_norm_rope_store (QK-norm + RoPE, k and v into a paged KV
 * cache). Both are the store core (store.c) with a norm stage. */
#include "rope/engine.h"

PE_API void pe_qk_norm_init(pe_qk_norm *n) {
  if (n) pe__qk_norm_defaults(n);
}

PE_API pe_status pe_qk_norm_rope(const pe_rope_cache *c, const pe_qk_norm *norm,
                                 const pe_tensor *q, const pe_tensor *k,
                                 const int64_t *positions, uint32_t flags, pe_threadpool *pool) {
  pe__store_call call = {.fn = "pe_qk_norm_rope", .norm = norm, .norm_required = 1, .q = q,
                         .k = k, .positions = positions, .flags = flags};
  return pe__rope_store(c, &call, pool);
}

PE_API pe_status pe_qk_norm_rope_store(const pe_rope_cache *c, const pe_qk_norm *norm,
                                       const pe_tensor *q, const pe_tensor *k,
                                       const pe_tensor *v, const pe_kv_cache *kv_cache,
                                       const int64_t *slot_mapping, const int64_t *positions,
                                       uint32_t flags, pe_threadpool *pool) {
  pe__store_call call = {.fn = "pe_qk_norm_rope_store", .to_cache = 1, .kv_desc = 1, .norm = norm, .norm_required = 1, .q = q,
                         .k = k, .v = v, .kv = kv_cache, .slot_mapping = slot_mapping,
                         .positions = positions, .flags = flags};
  return pe__rope_store(c, &call, pool);
}
