/* fuzz_qk_norm.c - pe_qk_norm_rope (QK-norm + RoPE in place) and
 * pe_qk_norm_rope_store (q in place, k normed and rotated into a paged
 * k cache, v converted into a v cache). The fuzzer chooses the call and its
 * tensors (in place: q, k; store: q, k, k_cache; or k, v, k_cache, v_cache),
 * shapes, strides, dtypes, whether they share one buffer, the norm (kind,
 * scope, eps, weights: missing, present, inside a written tensor, invalid
 * values), the cache descriptor's reserved fields, slots, positions, flags,
 * ISA and pool. A successful call may write only q's and (in place) k's
 * channels (all of them under a norm, the rotated ones without) and the cache
 * rows of the slots used; k and v are never written by the store. */
#include "fuzz_rope_params.h"

static const char FN_IP[] = "pe_qk_norm_rope", FN_ST[] = "pe_qk_norm_rope_store";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_rope_target r;
  pe_rope_cache *c = fz_rope_begin(&r, data, size, FN_ST);
  if (!c) return 0;
  fz f = r.f; /* the bytes after the cache */
  const int32_t hd = r.hd, rd = r.rd;

  /* mode 0: in place [q, k]; 1: store [q, k, k_cache]; 2: store [v, k, k_cache, v_cache] */
  int mode = (int)(fz_u8(&f) % 3);
  const char *FN = mode ? FN_ST : FN_IP;
  int use_q = mode == 2 ? 0 : (fz_u8(&f) & 3) != 0, use_k = (fz_u8(&f) & 63) != 0;
  int share = (fz_u8(&f) & 3) == 0;
  fz_tensors b;
  memset(&b, 0, sizeof b);
  int nv = mode == 0 ? 2 : mode == 1 ? 3 : 4;
  int64_t *ks = b.v[1].t.shape;
  fz_shape(&f, ks, 3, 4, 6, hd);
  if (mode == 2) { /* v: k's batch/heads/tokens, its own head_dim */
    memcpy(b.v[0].t.shape, ks, 4 * sizeof(int64_t));
    b.v[0].t.shape[3] = fz_range(&f, 1, 40);
    if ((fz_u8(&f) & 15) == 0) b.v[0].t.shape[fz_u8(&f) % 4] = fz_range(&f, 0, 5);
  } else { /* q: more heads */
    memcpy(b.v[0].t.shape, ks, 4 * sizeof(int64_t));
    b.v[0].t.shape[1] = fz_range(&f, 1, 6);
    if ((fz_u8(&f) & 15) == 0) b.v[0].t.shape[fz_u8(&f) % 4] = fz_range(&f, 0, 5);
  }
  if (mode) { /* k_cache [num_blocks, kv_heads, block_size, head_dim] */
    int64_t *cs = b.v[2].t.shape;
    cs[0] = fz_range(&f, 1, 4);
    cs[1] = ks[1];
    cs[2] = fz_range(&f, 1, 16);
    cs[3] = hd;
    if ((fz_u8(&f) & 15) == 0) cs[fz_u8(&f) % 4] = (fz_u8(&f) & 1) ? fz_edge_i64(&f) : fz_range(&f, 0, 5);
    if (mode == 2) {
      int64_t *vs = b.v[3].t.shape;
      memcpy(vs, cs, 3 * sizeof(int64_t));
      vs[3] = b.v[0].t.shape[3];
      if ((fz_u8(&f) & 15) == 0) vs[fz_u8(&f) % 4] = fz_range(&f, 0, 5);
    }
  }
  for (int i = 0; i < nv; i++) b.v[i].t.dtype = (fz_u8(&f) & 1) ? PE_F32 : fz_dtype(&f);
  for (int i = 0; i < nv; i++) fz_strides(&f, b.v[i].t.shape, b.v[i].t.stride);

  /* the norm (decided before placing: it sets which channels are written) */
  pe_qk_norm nm;
  pe_qk_norm_init(&nm);
  uint32_t kb = fz_u8(&f);
  nm.kind = (pe_qk_norm_kind)(kb < 250 ? kb % 4 : kb);
  nm.scope = (pe_qk_norm_scope)((fz_u8(&f) & 31) == 0 ? 2 + fz_u8(&f) % 3 : fz_u8(&f) & 1);
  nm.eps = (fz_u8(&f) & 3) ? 1e-6f : (float)fz_double(&f);
  int weighted = nm.kind == PE_QK_NORM_RMS || nm.kind == PE_QK_NORM_RMS_UNIT_OFFSET;
  int normed = nm.kind != PE_QK_NORM_NONE;
  /* q: every channel under a norm, else the rotated ones; k in place likewise */
  const int64_t c0[4] = {0, 0, 0, 0};
  int64_t c1[4] = {normed ? hd : rd, normed ? hd : rd, 0, 0};
  if (mode) c1[1] = 0; /* the store never writes k */
  if (mode == 2) c1[0] = 0; /* nor v */
  if (!fz_place(&f, &b, nv, share, c0, c1, fz_bits(&f, 8))) {
    fz_tensors_free(&b);
    pe_rope_cache_destroy(c);
    return 0;
  }
  const pe_tensor *q = mode != 2 && use_q ? &b.v[0].t : NULL, *k = use_k ? &b.v[1].t : NULL;
  const pe_tensor *v = mode == 2 ? &b.v[0].t : NULL;
  const pe_tensor *kc = mode ? &b.v[2].t : NULL, *vc = mode == 2 ? &b.v[3].t : NULL;
  /* the call's batch and tokens: k's, else q's */
  const pe_tensor *any = k ? k : q;
  int64_t batch = any ? any->shape[0] : 0, tokens = any ? any->shape[2] : 0;
  /* every tensor given is empty: a valid empty call, positions and slots unread */
  int all_empty = (!q || b.v[0].empty) && (!k || b.v[1].empty) && (!v || b.v[0].empty);

  /* weights: exact length (ASan sees over-reads), absent, or inside a tensor */
  float *wbuf[2] = {NULL, NULL};
  int bad_weight = 0, weight_overlap = 0;
  const pe_tensor *wt[2] = {q, k};
  for (int i = 0; i < 2; i++) {
    uint32_t wm = fz_u8(&f) % 16;
    const float **slot = i ? &nm.k_weight : &nm.q_weight;
    int64_t len = hd;
    if (nm.scope == PE_QK_NORM_PER_TOKEN && wt[i])
      len = wt[i]->shape[1] >= 0 && wt[i]->shape[1] <= 65536 ? wt[i]->shape[1] * hd : -1;
    if (wm == 0) {
      *slot = NULL;
    } else if (wm == 1 && nm.scope == PE_QK_NORM_PER_HEAD && b.v[0].valid_desc &&
               !b.v[0].empty && b.v[0].t.dtype == PE_F32 && b.v[0].t.shape[3] >= hd) {
      *slot = (const float *)b.v[0].t.data; /* row 0 of q (or v): hd floats inside it */
    } else if (len > 0 && len <= 65536) {
      wbuf[i] = malloc((size_t)len * sizeof(float));
      if (!wbuf[i]) goto out_w;
      uint64_t seed = fz_bits(&f, 4);
      for (int64_t j = 0; j < len; j++) wbuf[i][j] = fz_stream_float(&seed);
      *slot = wbuf[i];
    }
    if (!weighted && *slot) bad_weight = 1;
    if (weighted && wt[i] && !*slot) bad_weight = 1;
    if (weighted && wt[i] && q && *slot && !wbuf[i]) weight_overlap = 1; /* inside q, written */
  }

  pe_kv_cache kv;
  pe_kv_cache_init(&kv);
  kv.k = kc;
  kv.v = vc;
  int bad_reserved = 0;
  if ((fz_u8(&f) & 31) == 0) kv.k_quant = 1, bad_reserved = 1;
  if ((fz_u8(&f) & 31) == 0) kv.v_scale = wbuf[0] ? wbuf[0] : (const float *)&kv, bad_reserved = 1;

  /* slot_mapping [batch][tokens], exactly that long */
  int64_t *slots = NULL, n = 0;
  int bad_slot = 0;
  if (mode && !fz_slot_mapping(&f, b.v[2].t.shape, batch, tokens, &slots, &n, &bad_slot)) goto out_w;
  int bad_pos = 0;
  int64_t *pos = fz_positions(&f, batch, tokens, r.maxp, &bad_pos, 1);
  uint32_t flags = (fz_u8(&f) & 7) == 0 ? (uint32_t)fz_bits(&f, 4)
                                         : (fz_u8(&f) & (PE_ROPE_INVERSE | PE_ROPE_STREAM_CACHE));

  int must_fail = 0;
  const char *why = NULL;
  FZ_MUST_FAIL_IF(nm.kind > PE_QK_NORM_L2);
  FZ_MUST_FAIL_IF(nm.scope > PE_QK_NORM_PER_TOKEN);
  FZ_MUST_FAIL_IF(!(nm.eps >= 0) || isinf(nm.eps));
  FZ_MUST_FAIL_IF(nm.kind <= PE_QK_NORM_L2 && nm.scope <= PE_QK_NORM_PER_TOKEN && bad_weight);
  FZ_MUST_FAIL_IF(flags & ~(PE_ROPE_INVERSE | (mode ? PE_ROPE_STREAM_CACHE : 0u)));
  FZ_MUST_FAIL_IF(!all_empty && bad_pos);
  FZ_MUST_FAIL_IF(!all_empty && !pos && r.maxp > 0 && tokens > r.maxp);
  FZ_MUST_FAIL_IF(!q && !k);
  for (int i = 0; i < nv; i++) {
    if (i == 0 && mode != 2 && !q) continue;
    if (i == 1 && !k) continue;
    FZ_MUST_FAIL_IF(!b.v[i].valid_desc);
    FZ_MUST_FAIL_IF(i != 3 && i != 0 && b.v[i].t.shape[3] != hd); /* k, k_cache */
    FZ_MUST_FAIL_IF(i == 0 && mode != 2 && b.v[i].t.shape[3] != hd);
    FZ_MUST_FAIL_IF(b.v[i].aliased && (i == 2 || i == 3 || (i == 0 && mode != 2) || (i == 1 && !mode)));
  }
  FZ_MUST_FAIL_IF(q && k && (q->shape[0] != k->shape[0] || q->shape[2] != k->shape[2]));
  FZ_MUST_FAIL_IF(q && k && fz_views_overlap(&b, 0, 1, share) == 1);
  if (mode) {
    FZ_MUST_FAIL_IF(!k);
    FZ_MUST_FAIL_IF(!slots);
    FZ_MUST_FAIL_IF(!all_empty && bad_slot);
    FZ_MUST_FAIL_IF(bad_reserved);
    FZ_MUST_FAIL_IF(kc->shape[1] != ks[1]);
    FZ_MUST_FAIL_IF(k && fz_views_overlap(&b, 1, 2, share) == 1);
    FZ_MUST_FAIL_IF((q || v) && fz_views_overlap(&b, 0, 2, share) == 1); /* q or v, k_cache */
  }
  if (mode == 2) {
    for (int d = 0; d < 3; d++) {
      FZ_MUST_FAIL_IF(k && v->shape[d] != ks[d]);
      FZ_MUST_FAIL_IF(vc->shape[d] != kc->shape[d]);
    }
    FZ_MUST_FAIL_IF(vc->shape[3] != v->shape[3]);
    for (int i = 0; i < 3; i++) FZ_MUST_FAIL_IF(fz_views_overlap(&b, 3, i, share) == 1);
  }
  FZ_MUST_FAIL_IF(weight_overlap);

  if (!must_fail && mode) {
    fz_arena *a = share ? &b.arena[0] : &b.arena[2];
    if (b.v[2].walked && !b.v[2].empty) fz_mark_slot_rows(a, kc, slots, n);
    if (mode == 2 && b.v[3].walked && !b.v[3].empty)
      fz_mark_slot_rows(share ? &b.arena[0] : &b.arena[3], vc, slots, n);
  }

  fz_set_sentinel();
  pe_status st = mode ? pe_qk_norm_rope_store(c, &nm, q, k, v, &kv, slots, pos, flags, r.pool)
                      : pe_qk_norm_rope(c, &nm, q, k, pos, flags, r.pool);
  fz_check_call(FN, st, must_fail, why, &b);
  free(pos);
  free(slots);
out_w:
  free(wbuf[0]);
  free(wbuf[1]);
  fz_tensors_free(&b);
  pe_rope_cache_destroy(c);
  return 0;
}
