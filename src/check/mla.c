/* mla.c - the checks of an MLA step (pe_mla_rope_store) and of an MLA cache
 * read (pe_mla_cache_read): every argument in one pass (check.h). */
#include <inttypes.h>
#include <math.h>

#include "check/check.h"
#include "kernels/kv_format.h"

static const char *const format_names[] = {"PE_MLA_PLAIN", "PE_MLA_FP8_E4M3", "PE_MLA_FP8_DS",
                                           "PE_MLA_FP8_DS_V4"};

static void mla_defaults(pe_mla *m) {
  memset(m, 0, sizeof *m);
  m->struct_size = (uint32_t)sizeof *m;
  m->kv_norm = PE_QK_NORM_RMS;
  m->kv_eps = 1e-6f;
  m->q_norm = PE_QK_NORM_NONE;
  m->q_eps = 1e-6f;
}

void pe__mla_defaults(pe_mla *m) { mla_defaults(m); }

/* The caller's descriptor, copied; its format, order and scale checked
 * (what both calls read). */
static pe_status read_mla(const char *fn, const pe_mla *user, pe_mla *m, float *scale) {
  if (!user) return pe__fail(PE_ERR_NULL_POINTER, "%s: mla is NULL", fn);
  if (user->struct_size < sizeof(pe_mla)) /* today's layout is the oldest */
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: mla struct_size %u is smaller than the oldest layout (%zu bytes): call "
                    "pe_mla_init()",
                    fn, (unsigned)user->struct_size, sizeof(pe_mla));
  mla_defaults(m);
  pe_status st = pe__copy_sized(fn, m, sizeof *m, user, user->struct_size);
  if (st != PE_OK) return st;
  if (m->format > PE_MLA_FP8_DS_V4)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: mla format %u is not a pe_mla_format (0 plain, 1 fp8 e4m3, 2 fp8_ds, 3 "
                    "fp8_ds_v4)",
                    fn, (unsigned)m->format);
  if (m->order > PE_MLA_ROPE_FIRST)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: mla order %u is not a pe_mla_order (0 latent first, 1 rope first)", fn,
                    (unsigned)m->order);
  if (m->order == PE_MLA_ROPE_FIRST && m->format >= PE_MLA_FP8_DS)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: mla order PE_MLA_ROPE_FIRST with %s, whose layout puts the rotated "
                    "channels last",
                    fn, format_names[m->format]);
  *scale = 1.0f;
  if (m->format != PE_MLA_FP8_E4M3) {
    if (m->scale)
      return pe__fail(PE_ERR_INVALID_ARGUMENT,
                      "%s: mla scale is set (%p) but %s has no per-tensor scale", fn,
                      (const void *)m->scale, format_names[m->format]);
    return PE_OK;
  }
  if (!m->scale)
    return pe__fail(PE_ERR_NULL_POINTER, "%s: mla scale is NULL (PE_MLA_FP8_E4M3 needs one float)",
                    fn);
  if (!isfinite(*m->scale) || !(*m->scale > 0.0f))
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: mla scale %g must be finite and > 0", fn,
                    (double)*m->scale);
  *scale = *m->scale;
  return PE_OK;
}

/* The cache tensor of m's format for rows of kv_dim channels, rope of them
 * rotated at m->kv_rope_offset. */
static pe_status check_cache(const char *fn, const pe_mla *m, const pe_tensor *t, int64_t kv_dim,
                             int64_t rope) {
  pe_status st;
  if (!t) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is NULL", fn);
  if (t->shape[3] != kv_dim)
    return pe__fail(PE_ERR_SHAPE,
                    "%s: cache shape[3] %" PRId64 " must be the kv row's %" PRId64 " channels", fn,
                    t->shape[3], kv_dim);
  if (t->shape[1] != 1)
    return pe__fail(PE_ERR_SHAPE,
                    "%s: cache shape[1] %" PRId64 " must be 1 ([num_blocks, 1, block_size, row])",
                    fn, t->shape[1]);
  const int64_t lat = kv_dim - rope, ro = m->kv_rope_offset;
  if (m->format == PE_MLA_PLAIN) return pe__check_tensor(fn, "cache", t, 1);
  if (kv_dim > PE_MLA_MAX_DIM)
    return pe__fail(PE_ERR_SHAPE, "%s: %s rows of %" PRId64 " channels: at most %d", fn,
                    format_names[m->format], kv_dim, PE_MLA_MAX_DIM);
  if (m->format == PE_MLA_FP8_DS || m->format == PE_MLA_FP8_DS_V4) {
    const int64_t tile = m->format == PE_MLA_FP8_DS ? PE_MLA_DS_TILE : PE_MLA_V4_TILE;
    if (ro != lat || lat % tile)
      return pe__fail(PE_ERR_SHAPE,
                      "%s: %s rows are %" PRId64 "-channel tiles then the rotated channels: "
                      "kv_rope_offset %d must be kv_dim - R = %" PRId64 " and a multiple of %" PRId64,
                      fn, format_names[m->format], tile, (int)ro, lat, tile);
  }
  const int64_t row = pe__mla_row_bytes(m->format, lat, rope, PE_F32);
  if (m->format == PE_MLA_FP8_DS_V4) {
    /* token rows at stride[2] exactly, then the block's scale bytes */
    if (t->stride[2] != row && t->shape[2] > 1)
      return pe__fail(PE_ERR_SHAPE,
                      "%s: PE_MLA_FP8_DS_V4 cache stride[2] %" PRId64 " must be the token row's %" PRId64
                      " bytes (the block's scale bytes follow its rows)",
                      fn, t->stride[2], row);
    int64_t block;
    if (__builtin_mul_overflow(t->shape[2], row + pe__mla_v4_scale_bytes(lat), &block))
      return pe__fail(PE_ERR_OVERFLOW, "%s: cache block_size %" PRId64 " overflows", fn,
                      t->shape[2]);
    if (t->shape[0] > 1 && (t->stride[0] < 0 ? -t->stride[0] : t->stride[0]) < block)
      return pe__fail(PE_ERR_SHAPE,
                      "%s: PE_MLA_FP8_DS_V4 cache stride[0] %" PRId64 " is below a block's %" PRId64
                      " bytes (block_size * (%" PRId64 " + %" PRId64 "))",
                      fn, t->stride[0], block, row, pe__mla_v4_scale_bytes(lat));
    /* the token rows, then the blocks whole (rows and scale bytes) */
    if ((st = pe__check_byte_tensor(fn, "cache", t, row)) != PE_OK) return st;
    pe_tensor blocks = {.data = t->data, .shape = {t->shape[0], 1, 1, 1},
                        .stride = {t->stride[0], 0, 0, 1}};
    return t->shape[2] ? pe__check_byte_tensor(fn, "cache", &blocks, block) : PE_OK;
  }
  return pe__check_byte_tensor(fn, "cache", t, row);
}

/* The byte range of a validated cache (PE_MLA_FP8_DS_V4: with its scale
 * bytes) as a tensor pe__kv_overlap compares. */
static int cache_overlaps(const pe_mla *m, const pe_tensor *cache, int64_t rope,
                          const pe_tensor *other) {
  if (!other || pe__tensor_empty(other) || pe__tensor_empty(cache)) return 0;
  if (m->format == PE_MLA_PLAIN) return pe__tensors_overlap(cache, other);
  const int64_t lat = cache->shape[3] - rope;
  int64_t bytes = pe__mla_row_bytes(m->format, lat, rope, PE_F32);
  if (m->format == PE_MLA_FP8_DS_V4) bytes += cache->shape[2] * pe__mla_v4_scale_bytes(lat);
  pe_tensor b = *cache;
  b.shape[3] = bytes; /* a byte tensor of rows this long: pe__kv_overlap's span */
  return pe__kv_overlap(&b, PE_KV_FP8_E4M3, other, PE_KV_PLAIN);
}

pe_status pe__check_mla(const pe__mla_call *c, pe__mla_checked *out) {
  const char *fn = c->fn;
  const pe_tensor *q = c->q, *kv = c->kv, *cache = c->cache;
  const int32_t R = c->head_dim;
  pe_status st;
  memset(out, 0, sizeof *out);
  pe_mla *m = &out->mla;
  if ((st = read_mla(fn, c->mla, m, &out->scale)) != PE_OK) return st;
  if (m->rope_dim != R)
    return pe__fail(PE_ERR_SHAPE, "%s: mla rope_dim %d must be the rope cache's head_dim %d", fn,
                    (int)m->rope_dim, (int)R);
  if (!q && !kv) return pe__fail(PE_ERR_NULL_POINTER, "%s: q and kv are both NULL", fn);
  if (kv && !cache) return pe__fail(PE_ERR_NULL_POINTER, "%s: kv is given but cache is NULL", fn);
  if (!kv && cache) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is given but kv is NULL", fn);
  if (cache && !c->slot_mapping) return pe__fail(PE_ERR_NULL_POINTER, "%s: slot_mapping is NULL", fn);
  if (!cache && c->slot_mapping)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: slot_mapping is set but there is no cache", fn);
  if ((st = pe__check_flags(fn, c->flags, PE_ROPE_STREAM_CACHE)) != PE_OK) return st;
  if (c->rotary_dim != R)
    return pe__fail(PE_ERR_SHAPE,
                    "%s: the rope cache rotates %d of its %d channels; an MLA rope slice is rotated "
                    "whole (make the cache with head_dim = rotary_dim = qk_rope_head_dim)",
                    fn, (int)c->rotary_dim, (int)R);
  /* the norms */
  if ((unsigned)m->q_norm > PE_QK_NORM_L2)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: mla q_norm %d is not a pe_qk_norm_kind (0..3)",
                    fn, (int)m->q_norm);
  if (m->q_norm == PE_QK_NORM_RMS || m->q_norm == PE_QK_NORM_RMS_UNIT_OFFSET)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: mla q_norm %d needs a weight, which pe_mla does not carry: "
                    "PE_QK_NORM_NONE or PE_QK_NORM_L2 (DeepSeek-V4)",
                    fn, (int)m->q_norm);
  if ((unsigned)m->kv_norm > PE_QK_NORM_L2)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: mla kv_norm %d is not a pe_qk_norm_kind (0..3)",
                    fn, (int)m->kv_norm);
  if (!isfinite(m->q_eps) || m->q_eps < 0 || !isfinite(m->kv_eps) || m->kv_eps < 0)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: mla q_eps %g and kv_eps %g must be finite and >= 0",
                    fn, (double)m->q_eps, (double)m->kv_eps);
  const int weighted = m->kv_norm == PE_QK_NORM_RMS || m->kv_norm == PE_QK_NORM_RMS_UNIT_OFFSET;
  if (!weighted && m->kv_weight)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: mla kv_weight is set but kv_norm %d has no weight",
                    fn, (int)m->kv_norm);
  /* q */
  int64_t batch = 0, tokens = 0;
  if (q) {
    if ((st = pe__check_tensor(fn, "q", q, 1)) != PE_OK) return st;
    if (m->q_rope_offset < 0 || (int64_t)m->q_rope_offset + R > q->shape[3])
      return pe__fail(PE_ERR_SHAPE,
                      "%s: q's rope slice [q_rope_offset %d, +%d) is outside its %" PRId64
                      "-channel heads",
                      fn, (int)m->q_rope_offset, (int)R, q->shape[3]);
    batch = q->shape[0];
    tokens = q->shape[2];
  }
  /* kv and its cache */
  if (kv) {
    if ((st = pe__check_tensor(fn, "kv", kv, 0)) != PE_OK) return st;
    const int64_t dim = kv->shape[3];
    if (kv->shape[1] != 1)
      return pe__fail(PE_ERR_SHAPE, "%s: kv shape[1] %" PRId64 " must be 1 (one kv row per token)",
                      fn, kv->shape[1]);
    if (m->kv_rope_offset < 0 || (int64_t)m->kv_rope_offset + R > dim)
      return pe__fail(PE_ERR_SHAPE,
                      "%s: kv's rope slice [kv_rope_offset %d, +%d) is outside its %" PRId64
                      "-channel rows",
                      fn, (int)m->kv_rope_offset, (int)R, dim);
    if (m->kv_norm != PE_QK_NORM_NONE && (m->kv_norm_dim < 1 || m->kv_norm_dim > dim))
      return pe__fail(PE_ERR_INVALID_ARGUMENT,
                      "%s: mla kv_norm_dim %d must be in [1, %" PRId64 "] with kv_norm %d "
                      "(kv_lora_rank; PE_QK_NORM_NONE for rows that come normed)",
                      fn, (int)m->kv_norm_dim, dim, (int)m->kv_norm);
    if (m->kv_norm == PE_QK_NORM_NONE && m->kv_norm_dim != 0)
      return pe__fail(PE_ERR_INVALID_ARGUMENT,
                      "%s: mla kv_norm_dim %d is set but kv_norm is PE_QK_NORM_NONE", fn,
                      (int)m->kv_norm_dim);
    if (m->kv_norm != PE_QK_NORM_NONE && m->kv_rope_offset < m->kv_norm_dim &&
        (int64_t)m->kv_rope_offset + R > m->kv_norm_dim)
      return pe__fail(PE_ERR_SHAPE,
                      "%s: kv's rope slice [%d, +%d) straddles the end of the normed channels "
                      "(kv_norm_dim %d): it must lie inside them (DeepSeek-V4) or after them (V3)",
                      fn, (int)m->kv_rope_offset, (int)R, (int)m->kv_norm_dim);
    if (weighted && !m->kv_weight)
      return pe__fail(PE_ERR_NULL_POINTER, "%s: mla kv_weight is NULL (kv_norm %d needs %d floats)",
                      fn, (int)m->kv_norm, (int)m->kv_norm_dim);
    if (q && (kv->shape[0] != batch || kv->shape[2] != tokens))
      return pe__fail(PE_ERR_SHAPE,
                      "%s: q [batch %" PRId64 ", tokens %" PRId64 "] and kv [batch %" PRId64
                      ", tokens %" PRId64 "] must match",
                      fn, batch, tokens, kv->shape[0], kv->shape[2]);
    batch = kv->shape[0];
    tokens = kv->shape[2];
    if ((st = check_cache(fn, m, cache, dim, R)) != PE_OK) return st;
    if (q && pe__tensors_overlap(q, kv))
      return pe__fail(PE_ERR_SHAPE, "%s: q and kv overlap in memory: kv would be read after q is written", fn);
    if (cache_overlaps(m, cache, R, q) || cache_overlaps(m, cache, R, kv))
      return pe__fail(PE_ERR_SHAPE, "%s: the cache overlaps %s in memory", fn,
                      cache_overlaps(m, cache, R, q) ? "q" : "kv");
    if (m->kv_weight) {
      pe_tensor w = {.data = (void *)m->kv_weight, .dtype = PE_F32,
                     .shape = {1, 1, 1, m->kv_norm_dim}, .stride = {m->kv_norm_dim, m->kv_norm_dim, m->kv_norm_dim, 1}};
      if ((q && pe__tensors_overlap(&w, q)) || cache_overlaps(m, cache, R, &w))
        return pe__fail(PE_ERR_SHAPE, "%s: mla kv_weight overlaps a tensor the call writes", fn);
    }
  }
  out->batch = batch;
  out->tokens = tokens;
  pe__pos_check pc = {.fn = fn, .name = "position", .axis = "", .owner = "cache",
                      .pos = c->positions, .batch = batch, .tokens = tokens, .null_is_index = 1,
                      .bound = c->bound};
  if ((st = pe__check_positions(&pc)) != PE_OK) return st;
  if (cache && (st = pe__check_slots(fn, c->slot_mapping, batch, tokens,
                                     pe__cache_slots(cache), 1)) != PE_OK)
    return st;
  out->empty = (!q || pe__tensor_empty(q)) && (!kv || pe__tensor_empty(kv));
  return PE_OK;
}

pe_status pe__check_mla_read(const char *fn, const pe_mla *user, const pe_tensor *cache,
                             const pe_tensor *out, const int64_t *slot_mapping, pe_mla *m,
                             float *scale) {
  pe_status st;
  if ((st = read_mla(fn, user, m, scale)) != PE_OK) return st;
  const int32_t rope = m->rope_dim;
  if ((st = pe__check_tensor(fn, "out", out, 1)) != PE_OK) return st;
  if (out->shape[1] != 1)
    return pe__fail(PE_ERR_SHAPE, "%s: out shape[1] %" PRId64 " must be 1 (one kv row per token)",
                    fn, out->shape[1]);
  const int64_t dim = out->shape[3];
  if (rope < 1 || rope > dim)
    return pe__fail(PE_ERR_SHAPE, "%s: mla rope_dim %d must be in [1, %" PRId64 "]", fn, (int)rope,
                    dim);
  if (m->kv_rope_offset < 0 || (int64_t)m->kv_rope_offset + rope > dim)
    return pe__fail(PE_ERR_SHAPE,
                    "%s: the rope slice [kv_rope_offset %d, +%d) is outside the %" PRId64
                    "-channel rows",
                    fn, (int)m->kv_rope_offset, (int)rope, dim);
  if ((st = check_cache(fn, m, cache, dim, rope)) != PE_OK) return st;
  if (cache_overlaps(m, cache, rope, out))
    return pe__fail(PE_ERR_SHAPE, "%s: out and the cache overlap in memory", fn);
  if (pe__tensor_empty(out)) return PE_OK;
  return pe__check_slots(fn, slot_mapping, out->shape[0], out->shape[2],
                         pe__cache_slots(cache), 0);
}
