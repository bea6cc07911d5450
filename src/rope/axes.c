/* rope_axes.c - pe_apply_rope_axes_qk (multi-axis RoPE with any
 * per-frequency axis map, the engine's PE_SOURCE_AXES row source) and the
 * helpers that build the maps of the published layouts. */
#include <inttypes.h>
#include <stdio.h>

#include "rope/engine.h"

PE_API pe_status pe_apply_rope_axes_qk(const pe_rope_cache *c, const pe_tensor *q,
                                       const pe_tensor *k, const int64_t *positions,
                                       int32_t n_axes, const uint8_t *axis_of_freq,
                                       uint32_t flags, pe_threadpool *pool) {
  static const char fn[] = "pe_apply_rope_axes_qk";
  pe_status st;
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is NULL", fn);
  if (!axis_of_freq) return pe__fail(PE_ERR_NULL_POINTER, "%s: axis_of_freq is NULL", fn);
  if ((st = pe__check_qk(fn, q, k, c->p.head_dim, 1)) != PE_OK) return st;
  if ((st = pe__check_flags(fn, flags, PE_ROPE_INVERSE)) != PE_OK) return st;
  if (n_axes < 1 || n_axes > PE_MAX_AXES)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: n_axes %d must be in [1, %d]", fn, (int)n_axes,
                    PE_MAX_AXES);
  for (int32_t i = 0; i < c->half; i++)
    if (axis_of_freq[i] >= n_axes)
      return pe__fail(PE_ERR_INVALID_ARGUMENT,
                      "%s: axis_of_freq[%d] = %d, must be < n_axes %d (rotary_dim/2 = %d entries)",
                      fn, (int)i, (int)axis_of_freq[i], (int)n_axes, (int)c->half);
  if ((!q || pe__tensor_empty(q)) && (!k || pe__tensor_empty(k))) return PE_OK;
  const pe_tensor *any = q ? q : k;
  int64_t batch = any->shape[0], tokens = any->shape[2];
  const pe_rope_cache *const caches[1] = {c};
  for (int32_t a = 0; a < n_axes; a++) {
    char name[24];
    snprintf(name, sizeof name, "axis %d, ", (int)a);
    pe__pos_check pc = {.fn = fn, .name = "position", .axis = name, .owner = "cache",
                        .pos = positions ? positions + a * batch * tokens : NULL,
                        .batch = batch, .tokens = tokens, .null_is_index = 1,
                        .bound = pe__rope_bound(c)};
    if ((st = pe__check_positions(&pc)) != PE_OK) return st;
  }
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  pe__rope_plan p;
  pe__rope_plan_init(&p, c, q, k, flags, PE_SOURCE_AXES);
  p.caches = caches;
  p.pos = positions;
  p.n_axes = n_axes;
  p.axis_of_freq = axis_of_freq;
  pe__rope_run(&p, pool);
  return PE_OK;
}

/* Sections: each >= 0, sum in [1, n_freq]; *sum set. */
static pe_status check_sections(const char *fn, const int32_t *s, int32_t n_sections, int32_t lo,
                                int32_t n_freq, const uint8_t *out, int64_t *sum) {
  if (!s) return pe__fail(PE_ERR_NULL_POINTER, "%s: sections is NULL", fn);
  if (!out) return pe__fail(PE_ERR_NULL_POINTER, "%s: axis_of_freq is NULL", fn);
  if (n_sections < lo || n_sections > PE_MAX_AXES)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: n_sections %d must be in [%d, %d]", fn,
                    (int)n_sections, (int)lo, PE_MAX_AXES);
  if (n_freq < 1)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: n_freq %d must be >= 1", fn, (int)n_freq);
  int64_t total = 0;
  for (int32_t j = 0; j < n_sections; j++) {
    if (s[j] < 0)
      return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: sections[%d] = %d is negative", fn, (int)j,
                      (int)s[j]);
    total += s[j];
  }
  if (total < 1 || total > n_freq)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: the sections sum to %" PRId64 ", must be in [1, n_freq = %d]", fn, total,
                    (int)n_freq);
  *sum = total;
  return PE_OK;
}

PE_API pe_status pe_axis_map_sections(const int32_t *sections, int32_t n_sections,
                                      int32_t n_freq, uint8_t *axis_of_freq) {
  int64_t sum;
  pe_status st =
      check_sections("pe_axis_map_sections", sections, n_sections, 1, n_freq, axis_of_freq, &sum);
  if (st != PE_OK) return st;
  for (int32_t i = 0; i < n_freq; i++) {
    int64_t j = i % sum, end = 0;
    int a = 0;
    while (a < n_sections - 1 && j >= end + sections[a]) end += sections[a++];
    axis_of_freq[i] = (uint8_t)a;
  }
  return PE_OK;
}

PE_API pe_status pe_axis_map_interleaved(const int32_t *sections, int32_t n_sections,
                                         int32_t n_freq, uint8_t *axis_of_freq) {
  int64_t sum;
  pe_status st = check_sections("pe_axis_map_interleaved", sections, n_sections, 3, n_freq,
                                axis_of_freq, &sum);
  if (st != PE_OK) return st;
  for (int32_t i = 0; i < n_freq; i++) {
    int64_t j = i % sum;
    int a;
    if (j % 3 == 1 && j < 3 * (int64_t)sections[1]) a = 1;
    else if (j % 3 == 2 && j < 3 * (int64_t)sections[2]) a = 2;
    else if (n_sections == 4 && !(j % 3 == 0 && j < 3 * (int64_t)sections[0])) a = 3;
    else a = 0;
    axis_of_freq[i] = (uint8_t)a;
  }
  return PE_OK;
}

PE_API pe_status pe_axis_map_ernie45_vl(int32_t t_freqs, int32_t n_freq, uint8_t *axis_of_freq) {
  static const char fn[] = "pe_axis_map_ernie45_vl";
  if (!axis_of_freq) return pe__fail(PE_ERR_NULL_POINTER, "%s: axis_of_freq is NULL", fn);
  if (n_freq < 1 || t_freqs < 0 || t_freqs > n_freq || (n_freq - t_freqs) % 2)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: t_freqs %d, n_freq %d: need 0 <= t_freqs <= n_freq, n_freq >= 1 and "
                    "n_freq - t_freqs even (h and w alternate)",
                    fn, (int)t_freqs, (int)n_freq);
  int32_t hw = n_freq - t_freqs;
  for (int32_t i = 0; i < n_freq; i++) axis_of_freq[i] = (uint8_t)(i >= hw ? 0 : 1 + i % 2);
  return PE_OK;
}
