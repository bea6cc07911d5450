/* fuzz_alibi.c - pe_alibi_slopes and pe_alibi_add_bias: head counts, biases,
 * score tensors of any layout and dtype, slopes, query positions, flags. */
#include "fuzz_common.h"

static void fuzz_slopes(fz *f) {
  int32_t n = (fz_u8(f) & 7) ? (int32_t)fz_range(f, -2, 300) : (int32_t)fz_edge_i64(f);
  double bias = (fz_u8(f) & 1) ? 8.0 : fz_double(f);
  size_t cap = n > 0 && n <= 65536 ? (size_t)n : 16;
  fz_arena a;
  float *out = fz_guarded(&a, cap * sizeof(float), cap * sizeof(float), 3);
  if (!out) return;
  if (!(fz_u8(f) & 31)) out = NULL;
  int must_fail = !out || n < 1 || n > 65536 || !isfinite(bias) || !(bias > 0);
  fz_set_sentinel();
  pe_status st = pe_alibi_slopes(n, bias, out);
  fz_check_call("pe_alibi_slopes", st, must_fail, NULL, NULL);
  fz_arena_check(&a, st, "pe_alibi_slopes");
  if (st == PE_OK) {
    for (int32_t i = 0; i < n; i++)
      /* 2^(-max_bias k / n) may underflow to 0 for a huge max_bias. */
      if (!(out[i] >= 0.0f) || !(out[i] <= 1.0f)) {
        char msg[160];
        snprintf(msg, sizeof msg, "n_heads %d max_bias %g: slope[%d] = %g not in [0, 1]", (int)n,
                 bias, (int)i, (double)out[i]);
        fz_die("pe_alibi_slopes", msg);
      }
  }
  fz_arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  pe_threadpool *pool = fz_choose(&f);
  if (fz_u8(&f) & 1) {
    fuzz_slopes(&f);
    return 0;
  }
  fz_tensors ts;
  memset(&ts, 0, sizeof ts);
  int64_t *shape = ts.v[0].t.shape;
  fz_shape(&f, shape, 3, 5, 9, 1);
  shape[3] = fz_range(&f, 1, 40); /* k_len */
  if ((fz_u8(&f) & 31) == 0) shape[3] = fz_edge_i64(&f);
  if (!fz_place_written(&f, &ts)) return 0;
  int64_t batch = shape[0], heads = shape[1], q_len = shape[2];
  /* Slopes: NULL (standard) or exactly `heads` floats. */
  float *slopes = NULL;
  if ((fz_u8(&f) & 1) && heads > 0 && heads <= 4096) {
    slopes = malloc((size_t)heads * sizeof *slopes);
    if (!slopes) goto out;
    uint64_t s = fz_bits(&f, 8);
    for (int64_t h = 0; h < heads; h++)
      slopes[h] = (fz_u8(&f) & 3) ? (float)(h + 1) / 16.0f : fz_stream_float(&s);
  }
  int bad_pos = 0;
  int64_t *qpos = fz_positions(&f, batch, q_len, 0, &bad_pos, 1);
  uint32_t flags = (fz_u8(&f) & 7) == 0 ? (uint32_t)fz_bits(&f, 4) : (fz_u8(&f) & 1);
  int must_fail = fz_tensors_must_fail(&ts, 1) || (flags & ~PE_MASK_CAUSAL) || bad_pos;
  fz_set_sentinel();
  pe_status st = pe_alibi_add_bias(&ts.v[0].t, slopes, qpos, flags, pool);
  fz_check_call("pe_alibi_add_bias", st, must_fail, NULL, &ts);
  free(qpos);
out:
  free(slopes);
  fz_tensors_free(&ts);
  return 0;
}
