/* fuzz_rope_apply.c - pe_apply_rope_qk: the fuzzer chooses the cache
 * (every scaling type), q and k shapes, strides (reversed, padded, packed
 * QKV, overlapping, overflowing), dtypes, positions, flags, ISA and pool. */
#include "fuzz_rope_params.h"

static const char FN[] = "pe_apply_rope_qk";

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
  if (!c) return 0; /* creation is fuzzed by fuzz_rope_cache */

  /* Which operands: q only, k only, both, neither. */
  uint32_t which = fz_u8(&f) % 8;
  int use_q = which != 1 && which != 7, use_k = which != 0 && which != 7;
  int share = (fz_u8(&f) & 3) == 0;
  fz_tensors built;
  memset(&built, 0, sizeof built);
  int64_t qshape[4], kshape[4];
  fz_shape(&f, qshape, 3, 4, 6, hd);
  memcpy(kshape, qshape, sizeof kshape);
  kshape[1] = fz_range(&f, 1, 4);
  if ((fz_u8(&f) & 15) == 0) kshape[fz_u8(&f) % 4] = fz_range(&f, 1, 5); /* mismatches */
  if ((fz_u8(&f) & 31) == 0) qshape[3] = kshape[3] = fz_range(&f, 1, 300);
  memcpy(built.v[0].t.shape, qshape, sizeof qshape);
  memcpy(built.v[1].t.shape, kshape, sizeof kshape);
  built.v[0].t.dtype = fz_dtype(&f);
  built.v[1].t.dtype = (fz_u8(&f) & 1) ? built.v[0].t.dtype : fz_dtype(&f);
  fz_strides(&f, qshape, built.v[0].t.stride);
  fz_strides(&f, kshape, built.v[1].t.stride);
  /* Only channels [0, rotary_dim) may change: partial rotary passes through. */
  const int64_t c0[2] = {0, 0}, c1[2] = {rd, rd};
  uint64_t seed = fz_bits(&f, 8);
  if (!fz_place(&f, &built, 2, share, c0, c1, seed)) {
    fz_tensors_free(&built);
    pe_rope_cache_destroy(c);
    return 0;
  }
  pe_tensor *q = use_q ? &built.v[0].t : NULL, *k = use_k ? &built.v[1].t : NULL;
  int64_t batch = qshape[0], tokens = qshape[2];
  if (!use_q) batch = kshape[0], tokens = kshape[2];
  int bad_pos = 0;
  int64_t *pos = fz_positions(&f, batch, tokens, maxp, &bad_pos, 1);
  uint32_t flags = (fz_u8(&f) & 7) == 0 ? (uint32_t)fz_bits(&f, 4) : (fz_u8(&f) & 1);

  /* What the API requires to be refused. */
  int must_fail = 0;
  const char *why = NULL;
  FZ_MUST_FAIL_IF(!q && !k);
  FZ_MUST_FAIL_IF(q && (!built.v[0].valid_desc || built.v[0].aliased || qshape[3] != hd));
  FZ_MUST_FAIL_IF(k && (!built.v[1].valid_desc || built.v[1].aliased || kshape[3] != hd));
  FZ_MUST_FAIL_IF(q && k && (qshape[0] != kshape[0] || qshape[2] != kshape[2]));
  /* q and k may be views of one buffer (packed QKV) but share no element */
  FZ_MUST_FAIL_IF(q && k && fz_views_overlap(&built, 0, 1, share) == 1);
  FZ_MUST_FAIL_IF(flags & ~PE_ROPE_INVERSE);
  FZ_MUST_FAIL_IF(bad_pos);
  FZ_MUST_FAIL_IF(!pos && maxp > 0 && batch > 0 && tokens > maxp);
  /* Positions were sized for batch x tokens; a call that must fail on shapes
   * may not read them, a call that may succeed reads exactly that many. */

  fz_set_sentinel();
  pe_status st = pe_apply_rope_qk(c, q, k, pos, flags, pool);
  if (st != PE_OK) fz_check_error_message(FN, st);
  if (st == PE_OK && must_fail) fz_die(FN, why);
  fz_tensors_check(&built, st, FN);

  free(pos);
  fz_tensors_free(&built);
  pe_rope_cache_destroy(c);
  return 0;
}
