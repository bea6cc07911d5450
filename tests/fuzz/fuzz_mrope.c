/* fuzz_mrope.c - pe_apply_mrope_qk: the cache, q and k as for
 * fuzz_rope_apply (layouts, shared buffers, dtypes), positions [3][B][T]
 * with an edge value on any axis, mrope_section (valid splits of
 * rotary_dim/2, negative counts, int32 edges, sums that wrap), flags
 * (PE_ROPE_INVERSE, PE_ROPE_MROPE_INTERLEAVED, foreign bits), ISA and pool. */
#include "fuzz_rope_params.h"

static const char FN[] = "pe_apply_mrope_qk";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_rope_target r;
  if (!fz_rope_begin(&r, data, size, FN)) return 0;
  fz_qk v;
  if (!fz_qk_views(&r.f, &v, 3, r.hd, r.rd, 0)) {
    pe_rope_cache_destroy(r.c);
    return 0;
  }
  /* positions [3][batch][tokens], exactly that long, or NULL */
  int64_t *pos = NULL;
  int bad_pos = 0;
  if (!fz_axis_positions(&r.f, 3, v.batch, v.tokens, r.maxp, &pos, &bad_pos)) goto out;
  if (!pos && r.maxp > 0 && v.batch > 0 && v.tokens > r.maxp) bad_pos = 1;

  /* mrope_section: a valid split mostly */
  int32_t sec[3];
  int32_t half = r.rd / 2;
  uint32_t smode = fz_u8(&r.f) % 8;
  if (smode < 5) {
    sec[1] = (int32_t)fz_range(&r.f, 0, half);
    sec[2] = (int32_t)fz_range(&r.f, 0, half - sec[1]);
    sec[0] = half - sec[1] - sec[2];
  } else if (smode == 5) {
    for (int i = 0; i < 3; i++) sec[i] = (int32_t)fz_edge_i64(&r.f);
  } else {
    for (int i = 0; i < 3; i++) sec[i] = (int32_t)fz_range(&r.f, -4, half + 4);
  }
  const int32_t *section = (fz_u8(&r.f) & 63) ? sec : NULL;
  int bad_sec = !section;
  if (section) {
    int64_t sum = 0;
    for (int i = 0; i < 3; i++) {
      if (sec[i] < 0) bad_sec = 1;
      sum += sec[i];
    }
    if (sum != half) bad_sec = 1;
  }
  uint32_t flags = (fz_u8(&r.f) & 7) == 0 ? (uint32_t)fz_bits(&r.f, 4) : (fz_u8(&r.f) & 3);

  const char *why = NULL;
  int must_fail = fz_qk_must_fail(&v, r.hd, &why);
  FZ_MUST_FAIL_IF(bad_pos);
  FZ_MUST_FAIL_IF(bad_sec);
  FZ_MUST_FAIL_IF(flags & ~(PE_ROPE_INVERSE | PE_ROPE_MROPE_INTERLEAVED));

  fz_set_sentinel();
  pe_status st = pe_apply_mrope_qk(r.c, v.q, v.k, pos, section, flags, r.pool);
  fz_check_call(FN, st, must_fail, why, &v.b);
out:
  free(pos);
  fz_tensors_free(&v.b);
  pe_rope_cache_destroy(r.c);
  return 0;
}
