/* fuzz_rope_axes.c - pe_apply_rope_axes_qk: the cache, q and k as for
 * fuzz_mrope (layouts, shared buffers, dtypes), n_axes (1..4 and out of
 * range), positions [n_axes][B][T] with an edge value on any axis, an
 * axis_of_freq map from one of the helpers (sections, interleaved, Ernie) or
 * raw bytes (entries >= n_axes), flags (PE_ROPE_INVERSE, foreign bits), ISA
 * and pool. A helper's own refusal is checked too: it writes nothing. */
#include "fuzz_rope_params.h"

static const char FN[] = "pe_apply_rope_axes_qk";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_rope_target r;
  if (!fz_rope_begin(&r, data, size, FN)) return 0;
  fz f = r.f; /* the bytes after the cache */
  int32_t hd = r.hd, rd = r.rd;
  int64_t maxp = r.maxp;
  fz_qk v;
  if (!fz_qk_views(&f, &v, 3, hd, rd, 0)) {
    pe_rope_cache_destroy(r.c);
    return 0;
  }
  const int64_t *qs = v.b.v[0].t.shape, *ks = v.b.v[1].t.shape;
  const pe_tensor *q = v.q, *k = v.k;

  int32_t n_axes = (fz_u8(&f) & 15) == 0 ? (int32_t)fz_range(&f, -1, 6) : (int32_t)fz_range(&f, 1, 4);
  int bad_axes = n_axes < 1 || n_axes > 4;
  int32_t na = bad_axes ? 4 : n_axes; /* rows allocated */

  /* positions [n_axes][batch][tokens], exactly that long, or NULL (an entry
   * out of range only matters with a valid n_axes) */
  int64_t *pos = NULL;
  uint8_t *map = NULL;
  int bad_pos = 0;
  if (!fz_axis_positions(&f, na, v.batch, v.tokens, maxp, &pos, &bad_pos)) goto out;
  if (!pos && maxp > 0 && v.tokens > maxp) bad_pos = 1;

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

  const char *why = NULL;
  int must_fail = fz_qk_must_fail(&v, hd, &why);
  /* positions are only read when there is something to rotate */
  int empty = (!q || !qs[0] || !qs[1] || !qs[2] || !qs[3]) && (!k || !ks[0] || !ks[1] || !ks[2] || !ks[3]);
  FZ_MUST_FAIL_IF(bad_pos && !empty);
  FZ_MUST_FAIL_IF(bad_axes);
  FZ_MUST_FAIL_IF(bad_map);
  FZ_MUST_FAIL_IF(flags & ~PE_ROPE_INVERSE);

  fz_set_sentinel();
  pe_status st = pe_apply_rope_axes_qk(r.c, q, k, pos, n_axes, axis_of_freq, flags, r.pool);
  fz_check_call(FN, st, must_fail, why, &v.b);
out:
  free(pos);
  free(map);
  fz_tensors_free(&v.b);
  pe_rope_cache_destroy(r.c);
  return 0;
}
