/* fuzz_rope_multi.c - pe_apply_rope_qk_multi: up to four caches that mostly
 * share one geometry (head_dim, rotary_dim, style) and differ in base, table
 * length and scaling; sometimes a cache of another geometry or a NULL entry.
 * cache_index per batch row (edges included), n_caches at the edges,
 * positions checked against each row's own cache, q and k as for
 * fuzz_rope_apply, flags, ISA and pool. */
#include "fuzz_rope_params.h"

static const char FN[] = "pe_apply_rope_qk_multi";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  pe_threadpool *pool = fz_choose(&f);
  fz_rope_arrays arr;
  pe_rope_params *p = fz_rope_params(&f, &arr, 1, 0);
  pe_rope_cache *own[4] = {NULL, NULL, NULL, NULL};
  pe_rope_params got[4];
  int n = (int)fz_range(&f, 1, 4), geometry_differs = 0;
  if (!p || pe_rope_cache_create(p, &own[0]) != PE_OK) {
    fz_rope_arrays_free(&arr);
    return 0;
  }
  for (int i = 1; i < n; i++) {
    pe_rope_params v = *p;
    v.struct_size = (uint32_t)sizeof v; /* p may say larger: its tail is not in v */
    static const double bases[] = {10000.0, 500000.0, 1e6, 7.0};
    uint32_t m = fz_u8(&f);
    v.base = bases[m & 3];
    v.max_positions = (m & 4) ? 0 : fz_range(&f, 1, 96);
    if (m & 8) v.scaling = PE_ROPE_SCALING_NONE;
    if ((m & 0x30) == 0x30) v.factor = (double)fz_range(&f, 1, 16);
    if ((m & 0xc0) == 0xc0) { /* another geometry: must be refused */
      v.style = v.style == PE_ROPE_NEOX ? PE_ROPE_GPTJ : PE_ROPE_NEOX;
      v.short_factor = v.long_factor = NULL;
      v.inv_freq = NULL;
      v.scaling = PE_ROPE_SCALING_NONE;
    }
    if (pe_rope_cache_create(&v, &own[i]) != PE_OK) own[i] = NULL;
  }
  fz_rope_arrays_free(&arr);
  for (int i = 0; i < n; i++) {
    if (!own[i]) continue;
    pe_rope_params_init(&got[i]);
    if (pe_rope_cache_params(own[i], &got[i]) != PE_OK) fz_die(FN, "pe_rope_cache_params failed");
    if (got[i].head_dim != got[0].head_dim || got[i].rotary_dim != got[0].rotary_dim ||
        got[i].style != got[0].style)
      geometry_differs = 1;
  }
  /* exactly n entries, so a read past n_caches is an ASan report */
  const pe_rope_cache **caches = malloc((size_t)n * sizeof *caches);
  if (!caches) goto done;
  int null_cache = 0;
  for (int i = 0; i < n; i++) {
    caches[i] = own[i];
    if (!own[i]) null_cache = 1;
  }
  int32_t n_caches = n;
  uint32_t nm = fz_u8(&f);
  if (nm == 0xff) n_caches = 0;
  else if (nm == 0xfe) n_caches = -1;
  else if (nm == 0xfd) n_caches = INT32_MIN;
  else if (nm >= 0xf8 && n > 1) n_caches = (int32_t)fz_range(&f, 1, n - 1); /* fewer: valid */
  int bad_n = n_caches < 1;
  int used = n_caches < 1 ? 0 : n_caches;
  if (!bad_n) {
    null_cache = 0;
    geometry_differs = 0;
    for (int i = 0; i < used; i++) {
      if (!caches[i]) null_cache = 1;
      else if (caches[0] && (got[i].head_dim != got[0].head_dim ||
                             got[i].rotary_dim != got[0].rotary_dim || got[i].style != got[0].style))
        geometry_differs = 1;
    }
  }
  int32_t hd = got[0].head_dim, rd = got[0].rotary_dim;

  fz_qk qk;
  int32_t *index = NULL;
  int64_t *pos = NULL;
  if (!fz_qk_views(&f, &qk, 4, hd, rd, 0)) goto out;
  int64_t batch = qk.batch, tokens = qk.tokens;
  int small = batch >= 0 && tokens >= 0 && batch <= 64 && tokens <= 64;

  /* cache_index [batch]: NULL is allowed only with one cache */
  int bad_index = 0;
  if ((fz_u8(&f) & 7) != 0 && small) {
    index = malloc((size_t)(batch ? batch : 1) * sizeof *index);
    if (!index) goto out;
    for (int64_t i = 0; i < batch; i++) {
      index[i] = used ? (int32_t)fz_range(&f, 0, used - 1) : 0;
      if ((fz_u8(&f) & 31) == 0) index[i] = (int32_t)fz_edge_i64(&f);
      if (index[i] < 0 || index[i] >= n_caches) bad_index = 1;
    }
  } else if (n_caches != 1) {
    bad_index = 1;
  }
  /* positions [batch][tokens], checked against each row's cache */
  int bad_pos = 0;
  if ((fz_u8(&f) & 3) != 0 && small) {
    int64_t cnt = batch * tokens;
    pos = malloc((size_t)(cnt ? cnt : 1) * sizeof *pos);
    if (!pos) goto out;
    for (int64_t i = 0; i < cnt; i++) {
      pos[i] = fz_range(&f, 0, 100);
      if ((fz_u8(&f) & 31) == 0) pos[i] = fz_edge_i64(&f);
    }
  }
  if (!bad_n && !null_cache && !bad_index && small)
    for (int64_t bi = 0; bi < batch; bi++) {
      int ci = index ? index[bi] : 0;
      int64_t mp = got[ci].max_positions;
      for (int64_t t = 0; t < tokens; t++) {
        int64_t v = pos ? pos[bi * tokens + t] : t;
        if (v < 0 || v >= ((int64_t)1 << 53) || (mp > 0 && v >= mp)) bad_pos = 1;
      }
    }
  /* larger shapes: no index (one cache) and positions 0..tokens-1 */
  if (!bad_n && !null_cache && !bad_index && !small && got[0].max_positions > 0 && batch > 0 &&
      tokens > got[0].max_positions)
    bad_pos = 1;
  uint32_t flags = (fz_u8(&f) & 7) == 0 ? (uint32_t)fz_bits(&f, 4) : (fz_u8(&f) & 1);

  const char *why = NULL;
  int must_fail = fz_qk_must_fail(&qk, hd, &why);
  FZ_MUST_FAIL_IF(bad_n);
  FZ_MUST_FAIL_IF(null_cache);
  FZ_MUST_FAIL_IF(geometry_differs);
  FZ_MUST_FAIL_IF(bad_index);
  FZ_MUST_FAIL_IF(bad_pos);
  FZ_MUST_FAIL_IF(flags & ~PE_ROPE_INVERSE);

  fz_set_sentinel();
  pe_status st = pe_apply_rope_qk_multi(caches, n_caches, index, qk.q, qk.k, pos, flags, pool);
  fz_check_call(FN, st, must_fail, why, &qk.b);
out:
  free(index);
  free(pos);
  fz_tensors_free(&qk.b);
  free(caches);
done:
  for (int i = 0; i < 4; i++) pe_rope_cache_destroy(own[i]);
  return 0;
}
