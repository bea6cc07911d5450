/* floor_q8.h - the per-block steps of Q8_0 (ggml's quantize_row_q8_0) in
 * the floor kernels of every x86 vector ISA (floor_avx2.c, floor_avx512.c):
 * from a block's amax bits (the integer maximum of its magnitudes' bits,
 * NaN and Inf above every finite value), d = amax / 127, id = 1 / d (0
 * where d is 0 or 1/d overflows), the f16 of d; for one block in scalar,
 * for four in 4-lane vectors (two vdivps, one vcvtps2ph). Needs F16C. */

/* One block: a NaN or an Inf gives d 0x7e00 and id 0 (every qs 0). */
static inline __attribute__((always_inline)) void q8_scale1(uint32_t ab, uint16_t *d16, float *id) {
  *d16 = 0x7e00;
  *id = 0.0f;
  if (ab < 0x7f800000u) {
    float amax, d;
    memcpy(&amax, &ab, 4);
    d = amax / 127.0f;
    *d16 = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    *id = d != 0.0f ? 1.0f / d : 0.0f;
  }
}

/* Four blocks from their four amax bits h; bad: a block holds a NaN or an
 * Inf (it then takes the one-block path). */
typedef struct fq8s {
  __m128 id;
  uint64_t d16;
  int bad;
} fq8s;

static inline __attribute__((always_inline)) fq8s q8_scale4(__m128i h) {
  const __m128 one = _mm_set1_ps(1.0f);
  fq8s sc;
  sc.bad = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(h, _mm_set1_epi32(0x7f7fffff))));
  __m128 d = _mm_div_ps(_mm_castsi128_ps(h), _mm_set1_ps(127.0f));
  __m128 dz = _mm_cmpeq_ps(d, _mm_setzero_ps());
  __m128 id = _mm_andnot_ps(dz, _mm_div_ps(one, _mm_blendv_ps(d, one, dz)));
  sc.id = _mm_and_ps(id, _mm_cmple_ps(id, _mm_set1_ps(0x1.fffffep127f))); /* 1/d overflowed: 0 */
  sc.d16 = (uint64_t)_mm_cvtsi128_si64(_mm_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT));
  return sc;
}
