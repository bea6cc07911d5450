/* fuzz_rope_shift.c - pe_rope_shift_k and pe_rope_rerotate_k: caches of any
 * scaling type (a `to` cache that mostly shares the geometry of `from`), key
 * tensors of any layout and dtype, deltas and positions at the edges. */
#include "fuzz_rope_params.h"

static pe_rope_cache *make_cache(pe_rope_params *p, pe_rope_params *got) {
  pe_rope_cache *c = NULL;
  if (pe_rope_cache_create(p, &c) != PE_OK) return NULL;
  pe_rope_params_init(got);
  if (pe_rope_cache_params(c, got) != PE_OK) fz_die("pe_rope_cache_params", "failed on a cache");
  return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  pe_threadpool *pool = fz_choose(&f);
  fz_rope_arrays arr_from, arr_to;
  pe_rope_params *pf = fz_rope_params(&f, &arr_from, 1, 0);
  pe_rope_params *pt = fz_rope_params(&f, &arr_to, 1, 0);
  pe_rope_cache *from = NULL, *to = NULL;
  pe_rope_params gf, gt;
  if (pf && pt) {
    /* Mostly the same geometry, so the rotation itself is reached. */
    if (fz_u8(&f) & 7) {
      pt->head_dim = pf->head_dim;
      pt->rotary_dim = pf->rotary_dim;
      pt->style = pf->style;
      /* The factor arrays must match the geometry (rotary_dim/2 entries). */
      pt->short_factor = pf->short_factor;
      pt->long_factor = pf->long_factor;
      pt->inv_freq = pf->inv_freq;
    }
    from = make_cache(pf, &gf);
    to = make_cache(pt, &gt);
  }
  fz_rope_arrays_free(&arr_from);
  fz_rope_arrays_free(&arr_to);
  if (!from || !to) goto out;

  int rerotate = fz_u8(&f) & 1;
  const char *fn = rerotate ? "pe_rope_rerotate_k" : "pe_rope_shift_k";
  fz_tensors ts;
  memset(&ts, 0, sizeof ts);
  fz_shape(&f, ts.v[0].t.shape, 3, 4, 6, gf.head_dim);
  ts.v[0].t.dtype = fz_dtype(&f);
  fz_strides(&f, ts.v[0].t.shape, ts.v[0].t.stride);
  const int64_t c0[1] = {0}, c1[1] = {gf.rotary_dim};
  if (!fz_place(&f, &ts, 1, 0, c0, c1, fz_bits(&f, 8))) {
    fz_tensors_free(&ts);
    goto out;
  }
  const pe_tensor *k = (fz_u8(&f) & 63) ? &ts.v[0].t : NULL;
  int64_t batch = ts.v[0].t.shape[0], tokens = ts.v[0].t.shape[2];
  int must_fail = !k || fz_tensors_must_fail(&ts, 1) || ts.v[0].t.shape[3] != gf.head_dim;
  int bad = 0;
  pe_status st;
  fz_set_sentinel();
  if (rerotate) {
    int64_t *pos = fz_positions(&f, batch, tokens, 0, &bad, 1);
    if (gf.head_dim != gt.head_dim || gf.rotary_dim != gt.rotary_dim || gf.style != gt.style)
      must_fail = 1;
    must_fail |= bad;
    fz_set_sentinel();
    st = pe_rope_rerotate_k(from, to, k, pos, pool);
    free(pos);
  } else {
    /* Deltas: any sign; |delta| >= 2^53 must be refused; NULL is an error. */
    int64_t *d = NULL;
    if (batch > 0 && tokens > 0 && batch <= 4096 && tokens <= 4096 && batch * tokens <= 4096 &&
        (fz_u8(&f) & 31)) {
      d = malloc((size_t)(batch * tokens) * sizeof *d);
      if (!d) goto out_ts;
      int64_t base = fz_range(&f, -100000, 100000);
      for (int64_t i = 0; i < batch * tokens; i++) d[i] = base + i;
      if ((fz_u8(&f) & 3) == 0) d[fz_range(&f, 0, batch * tokens - 1)] = fz_edge_i64(&f);
      for (int64_t i = 0; i < batch * tokens; i++)
        if (d[i] <= -((int64_t)1 << 53) || d[i] >= ((int64_t)1 << 53)) bad = 1;
    }
    if (!d) must_fail = 1;
    must_fail |= bad;
    fz_set_sentinel();
    st = pe_rope_shift_k(from, k, d, pool);
    free(d);
  }
  fz_check_call(fn, st, must_fail, NULL, &ts);
out_ts:
  fz_tensors_free(&ts);
out:
  pe_rope_cache_destroy(from);
  pe_rope_cache_destroy(to);
  return 0;
}
