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

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fz_setup();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  pe_threadpool *pool = fz_choose(&f);
  int32_t hd = 0, rd = 0;
  int64_t maxp = 0;
  pe_rope_cache *c = fz_cache(&f, FN, &hd, &rd, &maxp);
  if (!c) return 0;

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
  __int128 nslots128 = (__int128)cs[0] * cs[2];
  int64_t nslots = nslots128 > INT64_MAX ? INT64_MAX : nslots128 < 0 ? 0 : (int64_t)nslots128;
  int small = batch >= 0 && tokens >= 0 && batch <= 4096 && tokens <= 4096;
  int64_t *slots = NULL, n = small ? batch * tokens : 0;
  int bad_slot = 0;
  uint32_t smode = fz_u8(&f) % 16;
  if (smode != 0 && small && n <= 4096) {
    slots = malloc((size_t)(n ? n : 1) * sizeof *slots);
    if (!slots) goto out;
    if (!n) slots[0] = -7; /* never read by an empty call */
    int64_t start = fz_range(&f, 0, 255), step = 2 * fz_range(&f, 0, 7) + 1;
    for (int64_t i = 0; i < n; i++) {
      /* distinct while i < nslots (step is odd; nslots may be even: then
       * the harness detects the duplicates below) */
      slots[i] = i < nslots && nslots > 0 ? (start + i * step) % nslots : -1;
      if ((fz_u8(&f) & 7) == 0) slots[i] = -1;
    }
    if (smode == 1 && n) slots[fz_range(&f, 0, n - 1)] = fz_edge_i64(&f);
    if (smode == 2 && n > 1) slots[fz_range(&f, 1, n - 1)] = slots[0];
    if (smode == 3 && n) slots[fz_range(&f, 0, n - 1)] = nslots;
    for (int64_t i = 0; i < n; i++) {
      if (slots[i] < -1 || slots[i] >= nslots) bad_slot = 1;
      for (int64_t j = 0; j < i && !bad_slot; j++)
        if (slots[i] >= 0 && slots[i] == slots[j]) bad_slot = 1;
    }
  }
  int bad_pos = 0;
  int64_t *pos = fz_positions(&f, batch, tokens, maxp, &bad_pos, 1);
  uint32_t flags = (fz_u8(&f) & 7) == 0 ? (uint32_t)fz_bits(&f, 4) : (fz_u8(&f) & 1);

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
  FZ_MUST_FAIL_IF(flags & ~PE_ROPE_INVERSE);
  FZ_MUST_FAIL_IF(!pos && maxp > 0 && batch > 0 && tokens > maxp);
  /* no element shared between a written tensor and another */
  FZ_MUST_FAIL_IF(q && k && fz_views_overlap(&b, 0, 1, share) == 1);
  FZ_MUST_FAIL_IF(k && fz_views_overlap(&b, 1, 2, share) == 1);
  FZ_MUST_FAIL_IF(q && fz_views_overlap(&b, 0, 2, share) == 1);

  /* The cache rows a successful call may write: those of the slots used. */
  if (!must_fail && b.v[2].walked && !b.v[2].empty) {
    fz_arena *a = share ? &b.arena[0] : &b.arena[2];
    size_t es = fz_esize(kc->dtype);
    for (int64_t i = 0; i < n; i++) {
      if (slots[i] < 0) continue;
      int64_t blk = slots[i] / cs[2], row = slots[i] % cs[2];
      for (int64_t h = 0; h < cs[1]; h++) {
        int64_t off = blk * kc->stride[0] + h * kc->stride[1] + row * kc->stride[2];
        unsigned char *p = (unsigned char *)kc->data + off * (int64_t)es;
        memset(a->mask + (p - a->mem), 1, (size_t)hd * es);
      }
    }
  }

  fz_set_sentinel();
  pe_status st = pe_apply_rope_qk_store(c, q, k, kc, slots, pos, flags, pool);
  if (st != PE_OK) fz_check_error_message(FN, st);
  if (st == PE_OK && must_fail) fz_die(FN, why);
  fz_tensors_check(&b, st, FN);
  free(pos);
out:
  free(slots);
  fz_tensors_free(&b);
  pe_rope_cache_destroy(c);
  return 0;
}
