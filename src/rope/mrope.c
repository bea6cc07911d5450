/* mrope.c - pe_apply_mrope_qk: multi-axis RoPE (Qwen2-VL sections, Qwen3-VL
 * interleaving), the engine's gathering row source. */
#include <inttypes.h>
#include <string.h>

#include "rope/engine.h"

PE_API pe_status pe_apply_mrope_qk(const pe_rope_cache *c, const pe_tensor *q, const pe_tensor *k,
                                   const int64_t *positions, const int32_t *mrope_section,
                                   uint32_t flags, pe_threadpool *pool) {
  static const char fn[] = "pe_apply_mrope_qk";
  static const char *const axis_names[3] = {"axis 0 (t), ", "axis 1 (h), ", "axis 2 (w), "};
  pe_status st;
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is NULL", fn);
  if (!mrope_section) return pe__fail(PE_ERR_NULL_POINTER, "%s: mrope_section is NULL", fn);
  int32_t half = c->half;
  if ((st = pe__check_qk(fn, q, k, c->p.head_dim, 1)) != PE_OK) return st;
  if ((st = pe__check_flags(fn, flags, PE_ROPE_INVERSE | PE_ROPE_MROPE_INTERLEAVED)) != PE_OK)
    return st;
  const int32_t *s = mrope_section;
  if (s[0] < 0 || s[1] < 0 || s[2] < 0 || (int64_t)s[0] + s[1] + s[2] != half)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: mrope_section {%d, %d, %d} must be >= 0 and sum to rotary_dim/2 = %d", fn,
                    (int)s[0], (int)s[1], (int)s[2], (int)half);
  const pe_tensor *any = q ? q : k;
  int64_t batch = any->shape[0], tokens = any->shape[2];
  const pe_rope_cache *const caches[1] = {c};
  for (int a = 0; a < 3; a++) {
    pe__pos_check pc = {.fn = fn, .name = "position", .axis = axis_names[a], .owner = "cache",
                        .pos = positions ? positions + a * batch * tokens : NULL,
                        .batch = batch, .tokens = tokens, .null_is_index = 1,
                        .bound = pe__rope_bound(c)};
    if ((st = pe__check_positions(&pc)) != PE_OK) return st;
  }
  if ((!q || pe__tensor_empty(q)) && (!k || pe__tensor_empty(k))) return PE_OK;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  pe__rope_plan p;
  pe__rope_plan_init(&p, c, q, k, flags, PE_SOURCE_AXES);
  p.caches = caches;
  p.pos = positions;
  p.n_axes = 3;
  memcpy(p.mrope_section, s, sizeof p.mrope_section);
  p.mrope_interleaved = (flags & PE_ROPE_MROPE_INTERLEAVED) != 0;
  pe__rope_run(&p, pool);
  return PE_OK;
}
