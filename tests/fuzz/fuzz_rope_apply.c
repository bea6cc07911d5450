/* fuzz_rope_apply.c - pe_apply_rope_qk: the fuzzer chooses the cache
 * (every scaling type), q and k shapes, strides (reversed, padded, packed
 * QKV, overlapping, overflowing), dtypes, positions, flags, ISA and pool. */
#include "fuzz_rope_params.h"

static const char FN[] = "pe_apply_rope_qk";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_rope_target r;
  if (!fz_rope_begin(&r, data, size, FN)) return 0; /* creation is fuzzed by fuzz_rope_cache */
  fz_qk v;
  if (!fz_qk_views(&r.f, &v, 3, r.hd, r.rd, 1)) {
    pe_rope_cache_destroy(r.c);
    return 0;
  }
  int bad_pos = 0;
  int64_t *pos = fz_positions(&r.f, v.batch, v.tokens, r.maxp, &bad_pos, 1);
  uint32_t flags = (fz_u8(&r.f) & 7) == 0 ? (uint32_t)fz_bits(&r.f, 4) : (fz_u8(&r.f) & 1);

  /* What the API requires to be refused. */
  const char *why = NULL;
  int must_fail = fz_qk_must_fail(&v, r.hd, &why);
  FZ_MUST_FAIL_IF(flags & ~PE_ROPE_INVERSE);
  FZ_MUST_FAIL_IF(bad_pos);
  FZ_MUST_FAIL_IF(!pos && r.maxp > 0 && v.batch > 0 && v.tokens > r.maxp);
  /* Positions were sized for batch x tokens; a call that must fail on shapes
   * may not read them, a call that may succeed reads exactly that many. */

  fz_set_sentinel();
  pe_status st = pe_apply_rope_qk(r.c, v.q, v.k, pos, flags, r.pool);
  fz_check_call(FN, st, must_fail, why, &v.b);

  free(pos);
  fz_tensors_free(&v.b);
  pe_rope_cache_destroy(r.c);
  return 0;
}
