/* fuzz_rope_store.c - pe_apply_rope_qk_store: q rotated in place (optional),
 * k read only, rotated k written into a paged k_cache of any layout and
 * dtype at the slots of slot_mapping. The fuzzer chooses the cache, shapes,
 * strides, dtypes, whether the three tensors share one buffer (packed QKV,
 * overlapping views, a k_cache inside q or k), the slots (padding -1,
 * duplicates, out of range, int64 edges), positions, flags, ISA and pool.
 * A successful call may write only q's rotated channels and the k_cache rows
 * of the slots used; k is never written. */
#include "fuzz_rope_params.h"

static const char FN[] = "pe_apply_rope_qk_store";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_rope_target r;
  pe_rope_cache *c = fz_rope_begin(&r, data, size, FN);
  if (!c) return 0;
  fz f = r.f; /* the bytes after the cache */
  const int32_t hd = r.hd, rd = r.rd;

  int use_q = (fz_u8(&f) & 3) != 0, use_k = (fz_u8(&f) & 63) != 0;
  int share = (fz_u8(&f) & 3) == 0;
  fz_tensors b;
  memset(&b, 0, sizeof b);
  int64_t *qs = b.v[0].t.shape, *ks = b.v[1].t.shape, *cs = b.v[2].t.shape;
  fz_shape(&f, qs, 3, 4, 6, hd);
  memcpy(ks, qs, 4 * sizeof(int64_t));
  ks[1] = fz_range(&f, 1, 3);
  if ((fz_u8(&f) & 15) == 0) ks[fz_u8(&f) % 4] = fz_range(&f, 0, 5); /* mismatches, empties */
  /* k_cache [num_blocks, kv_heads, block_size, head_dim] */
  cs[0] = fz_range(&f, 1, 4);
  cs[1] = ks[1];
  cs[2] = fz_range(&f, 1, 16);
  cs[3] = hd;
  if ((fz_u8(&f) & 15) == 0) cs[fz_u8(&f) % 4] = (fz_u8(&f) & 1) ? fz_edge_i64(&f) : fz_range(&f, 0, 5);
  for (int i = 0; i < 3; i++) b.v[i].t.dtype = (fz_u8(&f) & 1) ? PE_F32 : fz_dtype(&f);
  for (int i = 0; i < 3; i++) fz_strides(&f, b.v[i].t.shape, b.v[i].t.stride);
  /* q: its rotated channels; k: nothing; k_cache: rows marked below */
  const int64_t c0[3] = {0, 0, 0}, c1[3] = {rd, 0, 0};
  if (!fz_place(&f, &b, 3, share, c0, c1, fz_bits(&f, 8))) {
    fz_tensors_free(&b);
    pe_rope_cache_destroy(c);
    return 0;
  }
  const pe_tensor *q = use_q ? &b.v[0].t : NULL, *k = use_k ? &b.v[1].t : NULL, *kc = &b.v[2].t;
  int64_t batch = ks[0], tokens = ks[2];

  /* slot_mapping [batch][tokens], exactly that long */
  int64_t *slots = NULL, n = 0;
  int bad_slot = 0;
  if (!fz_slot_mapping(&f, cs, batch, tokens, &slots, &n, &bad_slot)) goto out;
  int bad_pos = 0;
  int64_t *pos = fz_positions(&f, batch, tokens, r.maxp, &bad_pos, 1);
  uint32_t flags = (fz_u8(&f) & 7) == 0 ? (uint32_t)fz_bits(&f, 4)
                                         : (fz_u8(&f) & (PE_ROPE_INVERSE | PE_ROPE_STREAM_CACHE));

  int must_fail = 0;
  const char *why = NULL;
  FZ_MUST_FAIL_IF(!k);
  FZ_MUST_FAIL_IF(!slots);
  FZ_MUST_FAIL_IF(bad_slot);
  FZ_MUST_FAIL_IF(bad_pos);
  for (int i = 0; i < 3; i++) {
    if (i == 0 && !q) continue;
    FZ_MUST_FAIL_IF(!b.v[i].valid_desc || b.v[i].t.shape[3] != hd);
    FZ_MUST_FAIL_IF(i != 1 && b.v[i].aliased); /* written tensors */
  }
  FZ_MUST_FAIL_IF(q && (qs[0] != ks[0] || qs[2] != ks[2]));
  FZ_MUST_FAIL_IF(cs[1] != ks[1]);
  FZ_MUST_FAIL_IF(flags & ~(PE_ROPE_INVERSE | PE_ROPE_STREAM_CACHE));
  FZ_MUST_FAIL_IF(!pos && r.maxp > 0 && batch > 0 && tokens > r.maxp);
  /* no element shared between a written tensor and another */
  FZ_MUST_FAIL_IF(q && k && fz_views_overlap(&b, 0, 1, share) == 1);
  FZ_MUST_FAIL_IF(k && fz_views_overlap(&b, 1, 2, share) == 1);
  FZ_MUST_FAIL_IF(q && fz_views_overlap(&b, 0, 2, share) == 1);

  /* The cache rows a successful call may write: those of the slots used. */
  if (!must_fail && b.v[2].walked && !b.v[2].empty)
    fz_mark_slot_rows(share ? &b.arena[0] : &b.arena[2], kc, slots, n);

  fz_set_sentinel();
  pe_status st = pe_apply_rope_qk_store(c, q, k, kc, slots, pos, flags, r.pool);
  fz_check_call(FN, st, must_fail, why, &b);
  free(pos);
out:
  free(slots);
  fz_tensors_free(&b);
  pe_rope_cache_destroy(c);
  return 0;
}
