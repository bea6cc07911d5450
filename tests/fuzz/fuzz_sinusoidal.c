/* fuzz_sinusoidal.c - pe_sinusoidal_table (guarded output, sizes up to the
 * int64 edge) and pe_sinusoidal_add (x of any layout and dtype). */
#include "fuzz_common.h"

static void fuzz_table(fz *f) {
  int64_t n = (fz_u8(f) & 7) ? fz_range(f, -2, 300) : fz_edge_i64(f);
  int32_t d = (fz_u8(f) & 7) ? (int32_t)fz_range(f, -2, 300) : (int32_t)fz_edge_i64(f);
  double base = (fz_u8(f) & 1) ? 10000.0 : fz_double(f);
  uint32_t flags = (fz_u8(f) & 7) == 0 ? (uint32_t)fz_bits(f, 4) : (fz_u8(f) & 1);
  __int128 elems = (n > 0 && d > 0) ? (__int128)n * d : 0;
  int overflow = elems * 4 > (__int128)INT64_MAX;
  /* A valid table too large for the budget cannot be backed: skip it. */
  if (!overflow && elems * 4 > FZ_MAX_ARENA) return;
  size_t bytes = elems > 0 && !overflow ? (size_t)elems * 4 : 64;
  fz_arena a;
  float *out = fz_guarded(&a, bytes, overflow ? 0 : (size_t)elems * 4, 9);
  if (!out) return;
  if (!(fz_u8(f) & 31)) out = NULL;
  /* n_positions 0 is an empty table (the header does not forbid it). */
  int must_fail = (!out && n > 0) || n < 0 || d <= 0 || overflow || !isfinite(base) || !(base > 0) ||
                  (flags & ~PE_SINUSOIDAL_CONCAT) || ((flags & PE_SINUSOIDAL_CONCAT) && d < 4);
  fz_set_sentinel();
  pe_status st = pe_sinusoidal_table(n, d, base, flags, out);
  if (st != PE_OK) fz_check_error_message("pe_sinusoidal_table", st);
  if (st == PE_OK && must_fail) {
    char msg[160];
    snprintf(msg, sizeof msg, "accepted n %lld d_model %d base %g flags %#x out %p",
             (long long)n, (int)d, base, (unsigned)flags, (void *)out);
    fz_die("pe_sinusoidal_table", msg);
  }
  fz_arena_check(&a, st, "pe_sinusoidal_table");
  fz_arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  pe_threadpool *pool = fz_choose(&f);
  if (fz_u8(&f) & 1) {
    fuzz_table(&f);
    return 0;
  }
  fz_tensors ts;
  memset(&ts, 0, sizeof ts);
  int64_t *shape = ts.v[0].t.shape;
  fz_shape(&f, shape, 3, 1, 9, 1);
  if ((fz_u8(&f) & 15) == 0) shape[1] = fz_range(&f, 1, 3); /* [B,1,T,D] is required */
  shape[3] = fz_range(&f, 1, 130);
  if (!fz_place_written(&f, &ts)) return 0;
  int bad_pos = 0;
  int64_t *pos = fz_positions(&f, shape[0], shape[2], 0, &bad_pos, 1);
  double base = (fz_u8(&f) & 1) ? 10000.0 : fz_double(&f);
  uint32_t flags = (fz_u8(&f) & 7) == 0 ? (uint32_t)fz_bits(&f, 4) : (fz_u8(&f) & 1);
  int must_fail = fz_tensors_must_fail(&ts, 1) || bad_pos || (flags & ~PE_SINUSOIDAL_CONCAT) ||
                  !isfinite(base) || !(base > 0);
  fz_set_sentinel();
  pe_status st = pe_sinusoidal_add(&ts.v[0].t, pos, base, flags, pool);
  fz_check_call("pe_sinusoidal_add", st, must_fail, NULL, &ts);
  free(pos);
  fz_tensors_free(&ts);
  return 0;
}
