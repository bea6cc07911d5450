/* fuzz_rope_axes.c - pe_apply_rope_axes_qk: the cache, q and k as for
 * fuzz_mrope (layouts, shared buffers, dtypes), n_axes (1..4 and out of
 * range), positions [n_axes][B][T] with an edge value on any axis, an
 * axis_of_freq map from one of the helpers (sections, interleaved, Ernie) or
 * raw bytes (entries >= n_axes), flags (PE_ROPE_INVERSE, foreign bits), ISA
 * and pool. A helper's own refusal is checked too: it writes nothing. */
#include "fuzz_rope_params.h"

static const char FN[] = "pe_apply_rope_axes_qk";

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

  int32_t n_axes = (fz_u8(&f) & 15) == 0 ? (int32_t)fz_range(&f, -1, 6) : (int32_t)fz_range(&f, 1, 4);
  int bad_axes = n_axes < 1 || n_axes > 4;
  int32_t na = bad_axes ? 4 : n_axes; /* rows allocated */

  /* positions [n_axes][batch][tokens], exactly that long, or NULL */
  int64_t *pos = NULL;
  uint8_t *map = NULL;
  int bad_pos = 0;
  if ((fz_u8(&f) & 3) != 0 && batch > 0 && tokens > 0 && batch <= 1024 && tokens <= 1024 &&
      batch * tokens <= 1024) {
    int64_t n = batch * tokens;
    pos = malloc((size_t)(na * n) * sizeof *pos);
    if (!pos) goto out;
    int64_t top = maxp > 0 ? maxp - 1 : 1000000;
    for (int a = 0; a < na; a++) {
      int64_t start = fz_range(&f, 0, top);
      for (int64_t i = 0; i < n; i++) {
        int64_t v = start + (i % tokens) * (a + 1) / 2;
        pos[a * n + i] = v > top ? top : v;
      }
    }
    if ((fz_u8(&f) & 3) == 0) {
      int64_t at = fz_range(&f, 0, na * n - 1);
      pos[at] = (fz_u8(&f) & 1) ? fz_edge_i64(&f) : maxp;
    }
    if (!bad_axes)
      for (int64_t i = 0; i < na * n; i++)
        if (pos[i] < 0 || (maxp > 0 && pos[i] >= maxp) || pos[i] >= ((int64_t)1 << 53)) bad_pos = 1;
  }
  if (!pos && maxp > 0 && tokens > maxp) bad_pos = 1;

  /* the map: a helper's, or raw bytes */
  int32_t half = rd / 2;
  map = malloc((size_t)half + 1);
  if (!map) goto out;
  memset(map, 0, (size_t)half + 1);
  uint32_t mmode = fz_u8(&f) % 4;
  if (mmode == 3) {
    for (int32_t i = 0; i < half; i++) map[i] = (uint8_t)fz_u8(&f) % 6;
  } else {
    int32_t sec[4];
    int32_t ns = mmode == 1 ? 3 + (int32_t)(fz_u8(&f) & 1) : (int32_t)fz_range(&f, 1, 4);
    for (int i = 0; i < 4; i++) sec[i] = (int32_t)fz_range(&f, -1, half);
    int32_t tf = (int32_t)fz_range(&f, -1, half + 1);
    memset(map, 0xcd, (size_t)half + 1);
    fz_set_sentinel();
    pe_status hs = mmode == 0   ? pe_axis_map_sections(sec, ns, half, map)
                   : mmode == 1 ? pe_axis_map_interleaved(sec, ns, half, map)
                                : pe_axis_map_ernie45_vl(tf, half, map);
    int64_t sum = 0;
    int neg = 0;
    for (int i = 0; i < ns; i++) sum += sec[i], neg |= sec[i] < 0;
    int helper_bad = half < 1 || (mmode == 2 ? (tf < 0 || tf > half || (half - tf) % 2)
                                             : (neg || sum < 1 || sum > half));
    if ((hs == PE_OK) == helper_bad) fz_die(FN, "an axis-map helper accepted bad sections or refused good ones");
    if (hs != PE_OK) {
      fz_check_error_message("pe_axis_map helper", hs);
      for (int32_t i = 0; i <= half; i++)
        if (map[i] != 0xcd) fz_die(FN, "a refused axis-map helper wrote its output");
      memset(map, 0, (size_t)half + 1);
    } else if (map[half] != 0xcd) {
      fz_die(FN, "an axis-map helper wrote past n_freq");
    }
  }
  int bad_map = 0;
  for (int32_t i = 0; i < half; i++)
    if (map[i] >= (bad_axes ? 0 : n_axes)) bad_map = 1;
  const uint8_t *axis_of_freq = (fz_u8(&f) & 63) ? map : NULL;
  if (!axis_of_freq) bad_map = 1;
  uint32_t flags = (fz_u8(&f) & 7) == 0 ? (uint32_t)fz_bits(&f, 4) : (fz_u8(&f) & 1);

  int must_fail = 0;
  const char *why = NULL;
  FZ_MUST_FAIL_IF(!q && !k);
  /* positions are only read when there is something to rotate */
  int empty = (!q || !qs[0] || !qs[1] || !qs[2] || !qs[3]) && (!k || !ks[0] || !ks[1] || !ks[2] || !ks[3]);
  FZ_MUST_FAIL_IF(bad_pos && !empty);
  FZ_MUST_FAIL_IF(bad_axes);
  FZ_MUST_FAIL_IF(bad_map);
  FZ_MUST_FAIL_IF(q && (!b.v[0].valid_desc || b.v[0].aliased || qs[3] != hd));
  FZ_MUST_FAIL_IF(k && (!b.v[1].valid_desc || b.v[1].aliased || ks[3] != hd));
  FZ_MUST_FAIL_IF(q && k && (qs[0] != ks[0] || qs[2] != ks[2]));
  FZ_MUST_FAIL_IF(q && k && fz_views_overlap(&b, 0, 1, share) == 1);
  FZ_MUST_FAIL_IF(flags & ~PE_ROPE_INVERSE);

  fz_set_sentinel();
  pe_status st = pe_apply_rope_axes_qk(c, q, k, pos, n_axes, axis_of_freq, flags, pool);
  if (st != PE_OK) fz_check_error_message(FN, st);
  if (st == PE_OK && must_fail) fz_die(FN, why);
  fz_tensors_check(&b, st, FN);
out:
  free(pos);
  free(map);
  fz_tensors_free(&b);
  pe_rope_cache_destroy(c);
  return 0;
}
