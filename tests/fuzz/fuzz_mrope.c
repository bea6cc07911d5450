/* fuzz_mrope.c - pe_apply_mrope_qk: the cache, q and k as for
 * fuzz_rope_apply (layouts, shared buffers, dtypes), positions [3][B][T]
 * with an edge value on any axis, mrope_section (valid splits of
 * rotary_dim/2, negative counts, int32 edges, sums that wrap), flags
 * (PE_ROPE_INVERSE, PE_ROPE_MROPE_INTERLEAVED, foreign bits), ISA and pool. */
#include "fuzz_rope_params.h"

static const char FN[] = "pe_apply_mrope_qk";

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

  uint32_t which = fz_u8(&f) % 8;
  int use_q = which != 1 && which != 7, use_k = which != 0 && which != 7;
  int share = (fz_u8(&f) & 3) == 0;
  fz_tensors b;
  memset(&b, 0, sizeof b);
  int64_t *qs = b.v[0].t.shape, *ks = b.v[1].t.shape;
  fz_shape(&f, qs, 3, 4, 6, hd);
  memcpy(ks, qs, 4 * sizeof(int64_t));
  ks[1] = fz_range(&f, 1, 4);
  if ((fz_u8(&f) & 15) == 0) ks[fz_u8(&f) % 4] = fz_range(&f, 1, 5);
  b.v[0].t.dtype = fz_dtype(&f);
  b.v[1].t.dtype = (fz_u8(&f) & 1) ? b.v[0].t.dtype : fz_dtype(&f);
  fz_strides(&f, qs, b.v[0].t.stride);
  fz_strides(&f, ks, b.v[1].t.stride);
  const int64_t c0[2] = {0, 0}, c1[2] = {rd, rd};
  if (!fz_place(&f, &b, 2, share, c0, c1, fz_bits(&f, 8))) {
    fz_tensors_free(&b);
    pe_rope_cache_destroy(c);
    return 0;
  }
  const pe_tensor *q = use_q ? &b.v[0].t : NULL, *k = use_k ? &b.v[1].t : NULL;
  int64_t batch = use_q ? qs[0] : ks[0], tokens = use_q ? qs[2] : ks[2];

  /* positions [3][batch][tokens], exactly that long, or NULL */
  int64_t *pos = NULL;
  int bad_pos = 0;
  if ((fz_u8(&f) & 3) != 0 && batch > 0 && tokens > 0 && batch <= 1024 && tokens <= 1024 &&
      batch * tokens <= 1024) {
    int64_t n = batch * tokens;
    pos = malloc((size_t)(3 * n) * sizeof *pos);
    if (!pos) goto out;
    int64_t top = maxp > 0 ? maxp - 1 : 1000000;
    for (int a = 0; a < 3; a++) {
      int64_t start = fz_range(&f, 0, top);
      for (int64_t i = 0; i < n; i++) {
        int64_t v = start + (i % tokens) * (a + 1) / 2;
        pos[a * n + i] = v > top ? top : v;
      }
    }
    if ((fz_u8(&f) & 3) == 0) {
      int64_t at = fz_range(&f, 0, 3 * n - 1);
      pos[at] = (fz_u8(&f) & 1) ? fz_edge_i64(&f) : maxp;
    }
    for (int64_t i = 0; i < 3 * n; i++)
      if (pos[i] < 0 || (maxp > 0 && pos[i] >= maxp) || pos[i] >= ((int64_t)1 << 53)) bad_pos = 1;
  }
  if (!pos && maxp > 0 && batch > 0 && tokens > maxp) bad_pos = 1;

  /* mrope_section: a valid split mostly */
  int32_t sec[3];
  int32_t half = rd / 2;
  uint32_t smode = fz_u8(&f) % 8;
  if (smode < 5) {
    sec[1] = (int32_t)fz_range(&f, 0, half);
    sec[2] = (int32_t)fz_range(&f, 0, half - sec[1]);
    sec[0] = half - sec[1] - sec[2];
  } else if (smode == 5) {
    for (int i = 0; i < 3; i++) sec[i] = (int32_t)fz_edge_i64(&f);
  } else {
    for (int i = 0; i < 3; i++) sec[i] = (int32_t)fz_range(&f, -4, half + 4);
  }
  const int32_t *section = (fz_u8(&f) & 63) ? sec : NULL;
  int bad_sec = !section;
  if (section) {
    int64_t sum = 0;
    for (int i = 0; i < 3; i++) {
      if (sec[i] < 0) bad_sec = 1;
      sum += sec[i];
    }
    if (sum != half) bad_sec = 1;
  }
  uint32_t flags = (fz_u8(&f) & 7) == 0 ? (uint32_t)fz_bits(&f, 4) : (fz_u8(&f) & 3);

  int must_fail = 0;
  const char *why = NULL;
  FZ_MUST_FAIL_IF(!q && !k);
  FZ_MUST_FAIL_IF(bad_pos);
  FZ_MUST_FAIL_IF(bad_sec);
  FZ_MUST_FAIL_IF(q && (!b.v[0].valid_desc || b.v[0].aliased || qs[3] != hd));
  FZ_MUST_FAIL_IF(k && (!b.v[1].valid_desc || b.v[1].aliased || ks[3] != hd));
  FZ_MUST_FAIL_IF(q && k && (qs[0] != ks[0] || qs[2] != ks[2]));
  FZ_MUST_FAIL_IF(q && k && fz_views_overlap(&b, 0, 1, share) == 1);
  FZ_MUST_FAIL_IF(flags & ~(PE_ROPE_INVERSE | PE_ROPE_MROPE_INTERLEAVED));

  fz_set_sentinel();
  pe_status st = pe_apply_mrope_qk(c, q, k, pos, section, flags, pool);
  if (st != PE_OK) fz_check_error_message(FN, st);
  if (st == PE_OK && must_fail) fz_die(FN, why);
  fz_tensors_check(&b, st, FN);
out:
  free(pos);
  fz_tensors_free(&b);
  pe_rope_cache_destroy(c);
  return 0;
}
