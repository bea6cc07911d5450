/* cache.c - KV caches as the caller describes them (pe_kv_cache): the
 * descriptor's defaults, and pe_kv_read / pe_kv_write (rows at slots,
 * dequantized or quantized, converted). The stores of rotated keys are the
 * engine's cache sinks (rope/store.c); the position operations on a cache
 * are in shift.c. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "check/check.h"
#include "kernels/isa.h"
#include "kernels/kv_format.h"

PE_API void pe_kv_cache_init(pe_kv_cache *kv) {
  if (kv) pe__kv_cache_defaults(kv);
}

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
  if ((st = pe__check_kv_tensor(fn, cn, cache, quant, -1)) != PE_OK) return st;
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
      if (quant == PE_KV_FP8_E4M3_ROWSCALE) { /* one head, the row's own scale */
        float row[PE_KV_QUANT_MAX_DIM] __attribute__((aligned(64))), sc;
        char *sa = pe__kv_rowscale_at(crow - (s % bs) * pe__stride(cache, 2), bs, dim, s % bs);
        pe_kv_quant_fn q8 = isa->kv_quant[PE_KV_FP8_E4M3 - 1][PE_F32];
        if (write) {
          isa->convert[t->dtype][PE_F32](trow, row, dim);
          sc = pe__kv_rowscale_of(isa->amax(row, dim));
          q8(row, crow, dim, sc);
          memcpy(sa, &sc, 4);
        } else {
          memcpy(&sc, sa, 4);
          isa->kv_dequant[PE_KV_FP8_E4M3 - 1][t->dtype](crow, trow, dim, sc);
        }
        continue;
      }
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
  pe_status st = pe__copy_kv_cache(fn, kv_cache, &kv);
  if (st != PE_OK) return st;
  const char *io = write ? "in" : "out";
  if (!kt && !vt) return pe__fail(PE_ERR_NULL_POINTER, "%s: k_%s and v_%s are both NULL", fn, io, io);
  float ks = 1.0f, vs = 1.0f;
  if (kt) {
    if ((st = pe__check_kv_format(fn, "k", kv.k_quant, kv.k_scale, &ks)) != PE_OK) return st;
    if ((st = check_rows(fn, "k", kv.k, kv.k_quant, kt, write)) != PE_OK) return st;
  }
  if (vt) {
    if ((st = pe__check_kv_format(fn, "v", kv.v_quant, kv.v_scale, &vs)) != PE_OK) return st;
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
  int64_t batch = any->shape[0], tokens = any->shape[2], n_slots = pe__cache_slots(cache);
  /* a slot written twice would depend on the order of writes; reads may repeat */
  if ((st = pe__check_slots(fn, slot_mapping, batch, tokens, n_slots, write)) != PE_OK) return st;
  if (kt) move_rows(kv.k, kv.k_quant, ks, kt, slot_mapping, write);
  if (vt) move_rows(kv.v, kv.v_quant, vs, vt, slot_mapping, write);
  return PE_OK;
}

PE_API pe_status pe_kv_read(const pe_kv_cache *kv_cache, const pe_tensor *k_out,
                            const pe_tensor *v_out, const int64_t *slot_mapping) {
  return kv_move("pe_kv_read", kv_cache, k_out, v_out, slot_mapping, 0);
}

PE_API pe_status pe_kv_write(const pe_kv_cache *kv_cache, const pe_tensor *k_in,
                             const pe_tensor *v_in, const int64_t *slot_mapping) {
  return kv_move("pe_kv_write", kv_cache, k_in, v_in, slot_mapping, 1);
}
