/* rope_cache.c - the RoPE cache: parameters, frequencies (rope_scaling.c),
 * the cos/sin table, and the accessors. The rotations are in
 * rope_engine.c and the entry points rope_apply.c, rope_store.c, mrope.c. */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/isa.h"
#include "rope/cache.h"

/* Oldest struct_size accepted: everything up to and including max_positions. */
#define ROPE_PARAMS_MIN_SIZE (offsetof(pe_rope_params, max_positions) + sizeof(int64_t))

/* A smaller struct_size is an older caller's sizeof: it ends on a field
 * boundary (or in the padding after one). A size that cuts a field - half a
 * pointer - would copy a meaningless value, so it is refused. */
#define FIELD_SPAN(f) {offsetof(pe_rope_params, f), offsetof(pe_rope_params, f) + sizeof(((pe_rope_params *)0)->f)}
static int rope_params_size_whole(size_t n) {
  static const size_t spans[][2] = {
      FIELD_SPAN(struct_size), FIELD_SPAN(head_dim), FIELD_SPAN(rotary_dim), FIELD_SPAN(style),
      FIELD_SPAN(base), FIELD_SPAN(max_positions), FIELD_SPAN(scaling), FIELD_SPAN(factor),
      FIELD_SPAN(original_max_positions), FIELD_SPAN(seq_len), FIELD_SPAN(attention_factor),
      FIELD_SPAN(beta_fast), FIELD_SPAN(beta_slow), FIELD_SPAN(mscale), FIELD_SPAN(mscale_all_dim),
      FIELD_SPAN(truncate), FIELD_SPAN(low_freq_factor), FIELD_SPAN(high_freq_factor),
      FIELD_SPAN(short_factor), FIELD_SPAN(long_factor), FIELD_SPAN(inv_freq)};
  for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++)
    if (n > spans[i][0] && n < spans[i][1]) return 0;
  return 1;
}
#undef FIELD_SPAN

PE_API void pe_rope_params_init(pe_rope_params *p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  p->struct_size = (uint32_t)sizeof *p;
  p->head_dim = 128;
  p->rotary_dim = 0;
  p->style = PE_ROPE_NEOX;
  p->base = 10000.0;
  p->max_positions = 4096;
  p->scaling = PE_ROPE_SCALING_NONE;
  p->factor = 1.0;
  p->truncate = 1;
  p->low_freq_factor = 1.0;
  p->high_freq_factor = 4.0;
}

static void cache_free(pe_rope_cache *c) {
  if (!c) return;
  pe__free(c->inv_freq);
  pe__free(c->inv_freq_f32);
  pe__free(c->short_factor);
  pe__free(c->long_factor);
  pe__free(c->custom_inv_freq);
  pe__free(c->table);
  pe__free(c);
}

PE_API void pe_rope_cache_destroy(pe_rope_cache *c) { cache_free(c); }

static pe_status validate_geometry(const char *fn, const pe_rope_params *p, int32_t *rotary_dim) {
  if (p->head_dim < 2 || p->head_dim > PE_MAX_HEAD_DIM)
    return pe__fail(PE_ERR_SHAPE, "%s: head_dim %d must be in [2, %d]", fn, (int)p->head_dim,
                    PE_MAX_HEAD_DIM);
  int32_t rd = p->rotary_dim ? p->rotary_dim : p->head_dim;
  if (!p->rotary_dim && (rd & 1))
    return pe__fail(PE_ERR_SHAPE,
                    "%s: head_dim %d is odd, so it cannot be rotated whole (rotary_dim 0 means "
                    "head_dim): set rotary_dim to an even value < head_dim",
                    fn, (int)p->head_dim);
  if (rd < 2 || rd > p->head_dim || (rd & 1))
    return pe__fail(PE_ERR_SHAPE,
                    "%s: rotary_dim %d must be even and in [2, head_dim %d] (0 = head_dim)", fn,
                    (int)p->rotary_dim, (int)p->head_dim);
  if (p->style != PE_ROPE_NEOX && p->style != PE_ROPE_GPTJ)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: style %d is not PE_ROPE_NEOX or PE_ROPE_GPTJ",
                    fn, (int)p->style);
  if (p->scaling != PE_ROPE_SCALING_CUSTOM && (!isfinite(p->base) || p->base <= 0.0))
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: base %g must be finite and > 0", fn, p->base);
  if (p->max_positions < 0 || p->max_positions > PE_MAX_POSITION)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: max_positions %" PRId64 " must be in [0, 2^53]",
                    fn, p->max_positions);
  if ((unsigned)p->scaling > (unsigned)PE_ROPE_SCALING_CUSTOM)
    return pe__fail(PE_ERR_UNSUPPORTED, "%s: scaling %d is not a pe_rope_scaling value", fn,
                    (int)p->scaling);
  if (!(p->attention_factor >= 0.0) || !isfinite(p->attention_factor))
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: attention_factor %g must be finite and >= 0 (0 = the type's default)", fn,
                    p->attention_factor);
  *rotary_dim = rd;
  return PE_OK;
}

/* Duplicate n elements of size es into owned memory (NULL stays NULL). */
static pe_status dup_array(const void *src, size_t n, size_t es, void **dst) {
  *dst = NULL;
  if (!src) return PE_OK;
  *dst = pe__malloc(n * es);
  if (!*dst) return PE_ERR_OUT_OF_MEMORY;
  memcpy(*dst, src, n * es);
  return PE_OK;
}

PE_API pe_status pe_rope_cache_create(const pe_rope_params *user, pe_rope_cache **out) {
  static const char fn[] = "pe_rope_cache_create";
  if (!user) return pe__fail(PE_ERR_NULL_POINTER, "%s: params is NULL", fn);
  if (!out) return pe__fail(PE_ERR_NULL_POINTER, "%s: out is NULL", fn);
  if (user->struct_size < ROPE_PARAMS_MIN_SIZE)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: params struct_size %u is smaller than the oldest layout (%zu bytes): call "
                    "pe_rope_params_init()",
                    fn, (unsigned)user->struct_size, ROPE_PARAMS_MIN_SIZE);
  if (user->struct_size < sizeof(pe_rope_params) && !rope_params_size_whole(user->struct_size))
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: params struct_size %u ends inside a field: no layout of pe_rope_params "
                    "has that size",
                    fn, (unsigned)user->struct_size);
  pe_rope_params p;
  pe_rope_params_init(&p);
  pe_status st = pe__copy_sized(fn, &p, sizeof p, user, user->struct_size);
  if (st != PE_OK) return st;
  p.struct_size = (uint32_t)sizeof p;
  int32_t rd = 0;
  if ((st = validate_geometry(fn, &p, &rd)) != PE_OK) return st;
  /* PROPORTIONAL (Gemma-4) is laid out on head_dim channels; p.rotary_dim
   * keeps the caller's value until the frequencies are computed. */
  rd = pe__rope_proportional_rotary_dim(&p, rd);
  int32_t half = rd / 2;

  size_t table_bytes = 0;
  if (p.max_positions > 0) {
    size_t row = (size_t)rd * sizeof(float);
    if ((uint64_t)p.max_positions > (SIZE_MAX / 2) / row)
      return pe__fail(PE_ERR_OVERFLOW,
                      "%s: a table of max_positions %" PRId64 " x rotary_dim %d floats overflows "
                      "size_t (use max_positions 0 for on-the-fly cos/sin)",
                      fn, p.max_positions, (int)rd);
    table_bytes = (size_t)p.max_positions * row;
  }

  pe_rope_cache *c = pe__malloc(sizeof *c);
  if (!c) return pe__fail(PE_ERR_OUT_OF_MEMORY, "%s: cannot allocate the cache", fn);
  memset(c, 0, sizeof *c);
  c->half = half;
  c->inv_freq = pe__malloc((size_t)half * sizeof(double));
  c->inv_freq_f32 = pe__malloc((size_t)half * sizeof(float));
  int oom = !c->inv_freq || !c->inv_freq_f32;
  if (!oom && p.scaling == PE_ROPE_SCALING_LONGROPE) {
    oom |= dup_array(p.short_factor, (size_t)half, sizeof(float), (void **)&c->short_factor) != PE_OK;
    oom |= dup_array(p.long_factor, (size_t)half, sizeof(float), (void **)&c->long_factor) != PE_OK;
  }
  if (!oom && p.scaling == PE_ROPE_SCALING_CUSTOM)
    oom |= dup_array(p.inv_freq, (size_t)half, sizeof(double), (void **)&c->custom_inv_freq) != PE_OK;
  if (oom) {
    cache_free(c);
    return pe__fail(PE_ERR_OUT_OF_MEMORY, "%s: cannot allocate the frequency arrays", fn);
  }
  /* The scaling code reads the caller's arrays through p (validated there);
   * the cache keeps its own copies. */
  st = pe__rope_frequencies(fn, &p, rd, c->inv_freq, &c->attention_factor, &c->softmax_scale);
  if (st != PE_OK) {
    cache_free(c);
    return st;
  }
  p.rotary_dim = rd;
  for (int32_t i = 0; i < half; i++) {
    if (!isfinite(c->inv_freq[i])) {
      double bad = c->inv_freq[i];
      cache_free(c);
      return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: frequency %d is %g, not finite", fn, (int)i,
                      bad);
    }
    c->inv_freq_f32[i] = (float)c->inv_freq[i];
  }
  if (!isfinite(c->attention_factor) || c->attention_factor <= 0.0 || c->attention_factor > 1e30) {
    double bad = c->attention_factor;
    cache_free(c);
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: the attention factor %g must be finite, > 0 and at "
                    "most 1e+30 (it scales float32 cos and sin)", fn, bad);
  }
  if (!isfinite(c->softmax_scale) || c->softmax_scale <= 0.0) {
    /* mscale(factor, mscale_all_dim)^2 overflows for an absurd mscale_all_dim */
    double bad = c->softmax_scale;
    cache_free(c);
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: the softmax scale %g (from mscale_all_dim %g) is not a finite positive "
                    "number", fn, bad, p.mscale_all_dim);
  }
  p.short_factor = c->short_factor;
  p.long_factor = c->long_factor;
  p.inv_freq = c->custom_inv_freq;
  c->p = p;
  if (table_bytes) {
    c->table = pe__aligned_alloc(table_bytes);
    if (!c->table) {
      cache_free(c);
      return pe__fail(PE_ERR_OUT_OF_MEMORY,
                      "%s: cannot allocate the %zu-byte cos/sin table (max_positions %" PRId64 ")",
                      fn, table_bytes, p.max_positions);
    }
    pe__isa()->rope_sincos(0, p.max_positions, c->inv_freq, NULL, half, (float)c->attention_factor,
                               c->table);
  }
  /* Probe the cache sizes here, off the hot path: they read sysfs (the L2
   * on aarch64, the last level everywhere; fopen allocates), which a first
   * apply call must not do. */
  (void)pe__cpu_l2_bytes();
  (void)pe__cpu_llc_bytes();
  *out = c;
  return PE_OK;
}

PE_API pe_status pe_rope_cache_params(const pe_rope_cache *c, pe_rope_params *out) {
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "pe_rope_cache_params: cache is NULL");
  if (!out) return pe__fail(PE_ERR_NULL_POINTER, "pe_rope_cache_params: out is NULL");
  uint32_t n = out->struct_size;
  if (n < ROPE_PARAMS_MIN_SIZE)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "pe_rope_cache_params: out->struct_size %u < %zu: call pe_rope_params_init()",
                    (unsigned)n, ROPE_PARAMS_MIN_SIZE);
  memcpy(out, &c->p, n < sizeof c->p ? n : sizeof c->p);
  out->struct_size = n;
  return PE_OK;
}

PE_API pe_status pe_rope_cache_inv_freq(const pe_rope_cache *c, float *out) {
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "pe_rope_cache_inv_freq: cache is NULL");
  if (!out) return pe__fail(PE_ERR_NULL_POINTER, "pe_rope_cache_inv_freq: out is NULL");
  memcpy(out, c->inv_freq_f32, (size_t)c->half * sizeof(float));
  return PE_OK;
}

PE_API double pe_rope_cache_attention_factor(const pe_rope_cache *c) {
  return c ? c->attention_factor : NAN;
}

PE_API double pe_rope_cache_softmax_scale(const pe_rope_cache *c) {
  return c ? c->softmax_scale : NAN;
}

PE_API pe_status pe_rope_cache_cos_sin(const pe_rope_cache *c, int64_t pos, float *cos_out,
                                       float *sin_out) {
  static const char fn[] = "pe_rope_cache_cos_sin";
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is NULL", fn);
  if (!cos_out || !sin_out) return pe__fail(PE_ERR_NULL_POINTER, "%s: cos_out or sin_out is NULL", fn);
  if (pos < 0 || pos >= PE_MAX_POSITION)
    return pe__fail(PE_ERR_POSITION_OUT_OF_RANGE, "%s: position %" PRId64 " is outside [0, 2^53)",
                    fn, pos);
  if (c->table && pos >= c->p.max_positions)
    return pe__fail(PE_ERR_POSITION_OUT_OF_RANGE, "%s: position %" PRId64 " >= cache max_positions %" PRId64,
                    fn, pos, c->p.max_positions);
  /* On the fly in pieces (bounded stack): the values are elementwise, so a
   * piece equals the whole row's. */
  const int32_t half = c->half;
  if (c->table) {
    const float *r = pe__rope_table_row(c, pos);
    memcpy(cos_out, r, (size_t)half * sizeof(float));
    memcpy(sin_out, r + half, (size_t)half * sizeof(float));
    return PE_OK;
  }
  enum { PIECE = 128 };
  float tmp[2 * PIECE];
  for (int32_t i = 0; i < half; i += PIECE) {
    int32_t n = half - i < PIECE ? half - i : PIECE;
    pe__isa()->rope_sincos(pos, 1, c->inv_freq + i, NULL, n, (float)c->attention_factor, tmp);
    memcpy(cos_out + i, tmp, (size_t)n * sizeof(float));
    memcpy(sin_out + i, tmp + n, (size_t)n * sizeof(float));
  }
  return PE_OK;
}

pe__pos_bound pe__rope_bound_of(const void *cache) {
  return pe__rope_bound((const pe_rope_cache *)cache);
}
