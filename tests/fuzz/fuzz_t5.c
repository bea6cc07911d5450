/* fuzz_t5.c - pe_t5_bucket over all int64 relative positions and bucket
 * settings, and pe_t5_add_bias with score tensors of any layout and dtype. */
#include "fuzz_common.h"

static int32_t fz_buckets(fz *f) {
  return (fz_u8(f) & 7) ? (int32_t)fz_range(f, -2, 64) : (int32_t)fz_edge_i64(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  pe_threadpool *pool = fz_choose(&f);
  int32_t bidi = (int32_t)fz_range(&f, -1, 2);
  int32_t nb = fz_buckets(&f);
  int32_t maxd = (fz_u8(&f) & 7) ? (int32_t)fz_range(&f, -2, 1000) : (int32_t)fz_edge_i64(&f);
  for (int i = 0; i < 4; i++) {
    int64_t rel = (fz_u8(&f) & 1) ? fz_edge_i64(&f) : fz_range(&f, -5000, 5000);
    int32_t b = pe_t5_bucket(rel, bidi, nb, maxd);
    if (b != -1 && (b < 0 || b >= nb)) fz_die("pe_t5_bucket", "bucket outside [0, num_buckets)");
    if (nb < 2 && b != -1) fz_die("pe_t5_bucket", "accepted num_buckets < 2");
  }

  fz_tensors ts;
  memset(&ts, 0, sizeof ts);
  int64_t *shape = ts.v[0].t.shape;
  fz_shape(&f, shape, 3, 5, 9, 1);
  shape[3] = fz_range(&f, 1, 40);
  if (!fz_place_written(&f, &ts)) return 0;
  int64_t heads = shape[1];
  /* The table is [num_buckets][heads], exactly (over-reads are ASan reports). */
  float *table = NULL;
  if (nb > 0 && nb <= 4096 && heads > 0 && heads <= 4096 && (fz_u8(&f) & 31)) {
    table = malloc((size_t)nb * (size_t)heads * sizeof *table);
    if (!table) goto out;
    uint64_t s = fz_bits(&f, 8);
    for (int64_t i = 0; i < nb * heads; i++) table[i] = fz_stream_float(&s);
  }
  int bad_pos = 0;
  int64_t *qpos = fz_positions(&f, shape[0], shape[2], 0, &bad_pos, 1);
  uint32_t flags = (fz_u8(&f) & 7) == 0 ? (uint32_t)fz_bits(&f, 4) : (fz_u8(&f) & 1);
  int must_fail = fz_tensors_must_fail(&ts, 1) || !table || nb < 2 || (flags & ~PE_MASK_CAUSAL) || bad_pos;
  fz_set_sentinel();
  pe_status st = pe_t5_add_bias(&ts.v[0].t, table, bidi, nb, maxd, qpos, flags, pool);
  fz_check_call("pe_t5_add_bias", st, must_fail, NULL, &ts);
  free(qpos);
out:
  free(table);
  fz_tensors_free(&ts);
  return 0;
}
