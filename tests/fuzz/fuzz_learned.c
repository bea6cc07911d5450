/* fuzz_learned.c - pe_learned_add: x and table of any layout and dtype
 * (mixes allowed), sometimes views of one allocation, positions at and past
 * the table's end. The table is read only: no byte of it may change. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  pe_threadpool *pool = fz_choose(&f);
  fz_tensors ts;
  memset(&ts, 0, sizeof ts);
  int64_t *xs = ts.v[0].t.shape, *tab = ts.v[1].t.shape;
  int64_t d = fz_range(&f, 1, 130);
  fz_shape(&f, xs, 3, 1, 9, d);
  if ((fz_u8(&f) & 15) == 0) xs[1] = fz_range(&f, 1, 3);
  int64_t max_len = fz_range(&f, 1, 64);
  tab[0] = 1, tab[1] = 1, tab[2] = max_len, tab[3] = d;
  if ((fz_u8(&f) & 15) == 0) tab[fz_u8(&f) & 3] = fz_range(&f, 1, 4); /* wrong table shapes */
  if ((fz_u8(&f) & 31) == 0) tab[fz_u8(&f) & 3] = fz_edge_i64(&f);
  ts.v[0].t.dtype = fz_dtype(&f);
  ts.v[1].t.dtype = fz_dtype(&f);
  fz_strides(&f, xs, ts.v[0].t.stride);
  fz_strides(&f, tab, ts.v[1].t.stride);
  int share = (fz_u8(&f) & 7) == 0;
  const int64_t c0[2] = {0, 0}, c1[2] = {INT64_MAX, 0}; /* the table is never written */
  if (!fz_place(&f, &ts, 2, share, c0, c1, fz_bits(&f, 8))) {
    fz_tensors_free(&ts);
    return 0;
  }
  int bad_pos = 0;
  int64_t *pos = fz_positions(&f, xs[0], xs[2], tab[2], &bad_pos, 1);
  const pe_tensor *x = (fz_u8(&f) & 63) ? &ts.v[0].t : NULL;
  const pe_tensor *t = (fz_u8(&f) & 63) ? &ts.v[1].t : NULL;
  int must_fail = 0;
  const char *why = NULL;
  FZ_MUST_FAIL_IF(!x || !t);
  FZ_MUST_FAIL_IF(!ts.v[0].valid_desc || ts.v[0].aliased || !ts.v[1].valid_desc);
  /* default positions 0..tokens-1 past the table; with no batch row no
   * position is read (an empty call, posenc.h) */
  FZ_MUST_FAIL_IF(bad_pos || (!pos && xs[0] > 0 && xs[2] > tab[2]));
  /* x is written while the table is read: no shared element */
  FZ_MUST_FAIL_IF(x && t && fz_views_overlap(&ts, 0, 1, share) == 1);
  fz_set_sentinel();
  pe_status st = pe_learned_add(x, t, pos, pool);
  fz_check_call("pe_learned_add", st, must_fail, why, &ts);
  free(pos);
  fz_tensors_free(&ts);
  return 0;
}
