/* rope_apply.c - the in-place rotations: pe_apply_rope_qk (one cache, or
 * pe_apply_rope_qk_multi: one per batch row), pe_rope_shift_k and
 * pe_rope_rerotate_k. Each validates, builds a plan and runs the engine. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rope/engine.h"

static int nothing_to_do(const pe_tensor *q, const pe_tensor *k) {
  return (!q || pe__tensor_empty(q)) && (!k || pe__tensor_empty(k));
}

/* pe_apply_rope_qk is this with one cache; fn names the entry point. */
static pe_status apply_rope(const char *fn, const pe_rope_cache *const *caches, int32_t n_caches,
                            const int32_t *cache_index, const pe_tensor *q, const pe_tensor *k,
                            const int64_t *positions, uint32_t flags, pe_threadpool *pool) {
  pe_status st;
  const pe_rope_cache *c0 = caches[0];
  if ((st = pe__check_qk(fn, q, k, c0->p.head_dim, 1)) != PE_OK) return st;
  if ((st = pe__check_flags(fn, flags, PE_ROPE_INVERSE)) != PE_OK) return st;
  if (!cache_index && n_caches > 1)
    return pe__fail(PE_ERR_NULL_POINTER, "%s: cache_index is NULL with n_caches %d > 1", fn,
                    (int)n_caches);
  const pe_tensor *any = q ? q : k;
  int64_t batch = any->shape[0], tokens = any->shape[2];
  if (cache_index)
    for (int64_t b = 0; b < batch; b++)
      if (cache_index[b] < 0 || cache_index[b] >= n_caches)
        return pe__fail(PE_ERR_INVALID_ARGUMENT,
                        "%s: cache_index %d at [batch %" PRId64 "] is outside [0, n_caches %d)", fn,
                        (int)cache_index[b], b, (int)n_caches);
  pe__pos_check pc = {.fn = fn, .name = "position", .axis = "", .owner = "cache",
                      .pos = positions, .batch = batch, .tokens = tokens, .null_is_index = 1,
                      .bound = pe__rope_bound(c0)};
  if (cache_index) { /* each row's own cache */
    pc.bound_of = pe__rope_bound_of;
    pc.items = (const void *const *)caches;
    pc.index = cache_index;
  }
  if ((st = pe__check_positions(&pc)) != PE_OK) return st;
  if (nothing_to_do(q, k)) return PE_OK;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  pe__rope_plan p;
  pe__rope_plan_init(&p, c0, q, k, flags, PE_SOURCE_POSITIONS);
  p.caches = caches;
  p.cache_index = cache_index;
  p.pos = positions;
  pe__rope_run(&p, pool);
  return PE_OK;
}

PE_API pe_status pe_apply_rope_qk_multi(const pe_rope_cache *const *caches, int32_t n_caches,
                                        const int32_t *cache_index, const pe_tensor *q,
                                        const pe_tensor *k, const int64_t *positions,
                                        uint32_t flags, pe_threadpool *pool) {
  static const char fn[] = "pe_apply_rope_qk_multi";
  pe_status st;
  if (!caches) return pe__fail(PE_ERR_NULL_POINTER, "%s: caches is NULL", fn);
  if (n_caches < 1)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: n_caches %d must be >= 1", fn, (int)n_caches);
  for (int32_t i = 0; i < n_caches; i++) {
    char what[32];
    if (!caches[i]) return pe__fail(PE_ERR_NULL_POINTER, "%s: caches[%d] is NULL", fn, (int)i);
    const pe_rope_cache *a = caches[0], *b = caches[i];
    if (a->p.head_dim == b->p.head_dim && a->p.rotary_dim == b->p.rotary_dim &&
        a->p.style == b->p.style)
      continue; /* the common case: no message to format */
    snprintf(what, sizeof what, "caches[%d]", (int)i);
    if ((st = pe__check_same_rotation(fn, what, a->p.head_dim, a->p.rotary_dim, a->p.style,
                                      b->p.head_dim, b->p.rotary_dim, b->p.style)) != PE_OK)
      return st;
  }
  return apply_rope(fn, caches, n_caches, cache_index, q, k, positions, flags, pool);
}

PE_API pe_status pe_apply_rope_qk(const pe_rope_cache *c, const pe_tensor *q, const pe_tensor *k,
                                  const int64_t *positions, uint32_t flags, pe_threadpool *pool) {
  static const char fn[] = "pe_apply_rope_qk";
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is NULL", fn);
  const pe_rope_cache *const caches[1] = {c};
  return apply_rope(fn, caches, 1, NULL, q, k, positions, flags, pool);
}

PE_API pe_status pe_rope_shift_k(const pe_rope_cache *c, const pe_tensor *k, const int64_t *deltas,
                                 pe_threadpool *pool) {
  static const char fn[] = "pe_rope_shift_k";
  pe_status st;
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is NULL", fn);
  if ((st = pe__check_operand(fn, "k", k, c->p.head_dim, 1)) != PE_OK) return st;
  if (!deltas) return pe__fail(PE_ERR_NULL_POINTER, "%s: deltas is NULL", fn);
  if ((st = pe__check_deltas(fn, deltas, k->shape[0], k->shape[2])) != PE_OK) return st;
  if (pe__tensor_empty(k)) return PE_OK;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  const pe_rope_cache *const caches[1] = {c};
  pe__rope_plan p;
  pe__rope_plan_init(&p, c, NULL, k, 0, PE_SOURCE_SHIFT);
  p.caches = caches;
  p.pos = deltas;
  pe__rope_run(&p, pool);
  return PE_OK;
}

PE_API pe_status pe_rope_rerotate_k(const pe_rope_cache *from, const pe_rope_cache *to,
                                    const pe_tensor *k, const int64_t *positions,
                                    pe_threadpool *pool) {
  static const char fn[] = "pe_rope_rerotate_k";
  pe_status st;
  if (!from || !to)
    return pe__fail(PE_ERR_NULL_POINTER, "%s: %s cache is NULL", fn, from ? "to" : "from");
  if ((st = pe__check_same_rotation(fn, "the `to` cache", from->p.head_dim, from->p.rotary_dim,
                                    from->p.style, to->p.head_dim, to->p.rotary_dim,
                                    to->p.style)) != PE_OK)
    return st;
  if ((st = pe__check_operand(fn, "k", k, from->p.head_dim, 1)) != PE_OK) return st;
  /* Positions are not limited by max_positions: the angles are computed on
   * the fly. */
  pe__pos_check pc = {.fn = fn, .name = "position", .axis = "", .pos = positions,
                      .batch = k->shape[0], .tokens = k->shape[2], .null_is_index = 1,
                      .bound = PE_POS_ANY};
  if ((st = pe__check_positions(&pc)) != PE_OK) return st;
  if (pe__tensor_empty(k)) return PE_OK;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  pe__rope_plan p;
  pe__rope_plan_init(&p, from, NULL, k, 0, PE_SOURCE_REROTATE);
  p.from = from;
  p.to = to;
  p.pos = positions;
  pe__rope_run(&p, pool);
  return PE_OK;
}
