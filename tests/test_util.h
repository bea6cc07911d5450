/* test_util.h - small pieces the test programs share: deterministic
 * generators (integer arithmetic only, so every architecture draws the same
 * values), float32 bit casts, tensor views in the layouts the tests use, a
 * RoPE cache from its common fields and the frequency checks (the config
 * files of tests/data/configs: config_fixture.h). Include after <cmocka.h>
 * and "posenc.h".
 *
 * A file that defines TEST_RNG_SEED before including it also gets the
 * xorshift64* stream most tests draw from: the state `rng` (a test may
 * reseed it), rnd() and uniform(). */
#ifndef PE_TEST_UTIL_H
#define PE_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "posenc.h"

/* ---- generators ---- */

/* Marsaglia's xorshift64* (the state must not be 0). */
static inline uint64_t xorshift64s(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545f4914f6cdd1dull;
}

/* SplitMix64 (any state). */
static inline uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The top 53 bits of r as a double in [0, 1). */
static inline double unit_double(uint64_t r) { return (double)(r >> 11) * 0x1p-53; }

#ifdef TEST_RNG_SEED
static uint64_t rng = TEST_RNG_SEED;
static inline uint64_t rnd(void) { return xorshift64s(&rng); }
/* Uniform in [-2, 2). */
static inline float uniform(void) { return (float)(unit_double(rnd()) * 4.0 - 2.0); }
static inline float *random_f32(int64_t n) {
  float *x = malloc((size_t)n * sizeof(float));
  assert_non_null(x);
  for (int64_t i = 0; i < n; i++) x[i] = uniform();
  return x;
}
#endif

/* ---- float32 bits ---- */

static inline float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* bfloat16 (the top half of a binary32): exact widening, and narrowing
 * rounded to nearest even on the 16 dropped bits (a NaN stays a quiet NaN
 * with its sign and top payload bits). */
static inline float bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }
static inline uint16_t bf16_rne(float f) {
  uint32_t u = f32_bits(f);
  if (f != f) return (uint16_t)((u >> 16) | 0x40);
  uint32_t lower = u & 0xffff, upper = u >> 16;
  if (lower > 0x8000 || (lower == 0x8000 && (upper & 1))) upper++;
  return (uint16_t)upper;
}

/* ---- tensors and caches ---- */

/* Logical [B, H, T, D] stored [B, T, H, D], as engines hold activations. */
static inline pe_tensor tensor_bthd(void *data, pe_dtype d, int64_t B, int64_t H, int64_t T,
                                    int64_t D) {
  pe_tensor t = {.data = data, .dtype = d, .shape = {B, H, T, D},
                 .stride = {T * H * D, D, H * D, 1}};
  return t;
}

/* Logical [B, H, T, D] stored densely in that order. */
static inline pe_tensor tensor_bhtd(void *data, pe_dtype d, int64_t B, int64_t H, int64_t T,
                                    int64_t D) {
  pe_tensor t = {.data = data, .dtype = d, .shape = {B, H, T, D},
                 .stride = {H * T * D, T * D, D, 1}};
  return t;
}

/* A cache from *p; a refusal fails the test with the library's message. */
static inline pe_rope_cache *new_cache(const pe_rope_params *p) {
  pe_rope_cache *c = NULL;
  pe_status st = pe_rope_cache_create(p, &c);
  if (st != PE_OK) fail_msg("pe_rope_cache_create: %s", pe_last_error());
  assert_non_null(c);
  return c;
}

/* Parameters with the fields most tests set, the rest pe_rope_params_init's. */
static inline pe_rope_params rope_params(int32_t head_dim, int32_t rotary_dim, pe_rope_style style,
                                         double base, int64_t max_positions) {
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = head_dim;
  p.rotary_dim = rotary_dim;
  p.style = style;
  p.base = base;
  p.max_positions = max_positions;
  return p;
}

static inline pe_rope_cache *rope_cache(int32_t head_dim, int32_t rotary_dim, pe_rope_style style,
                                        double base, int64_t max_positions) {
  pe_rope_params p = rope_params(head_dim, rotary_dim, style, base, max_positions);
  return new_cache(&p);
}

/* ---- frequencies ---- */

/* One float32 ulp at |v| (the subnormal spacing below 2^-126). */
static inline double ulp_f32(double v) {
  v = fabs(v);
  if (v < 0x1p-126) return 0x1p-149;
  int e;
  frexp(v, &e);
  return ldexp(1.0, e - 1 - 23);
}

/* HF's default frequency, written as HF writes it: 1 / B^(2i/d). */
static inline double ref_default(double base, int i, int d) {
  return 1.0 / pow(base, (double)(2 * i) / d);
}

/* The cache's float32 frequencies [0, n) within 1 ulp of ref (the library
 * rounds its double frequencies once). */
static inline void expect_inv(const pe_rope_cache *c, const double *ref, int n, const char *what) {
  pe_rope_params p;
  pe_rope_params_init(&p);
  assert_int_equal(pe_rope_cache_params(c, &p), PE_OK);
  assert_true(n <= p.rotary_dim / 2);
  float *got = malloc(sizeof(float) * (size_t)(p.rotary_dim / 2));
  assert_non_null(got);
  assert_int_equal(pe_rope_cache_inv_freq(c, got), PE_OK);
  for (int i = 0; i < n; i++) {
    double err = fabs((double)got[i] - ref[i]);
    if (err > ulp_f32(ref[i]))
      fail_msg("%s: inv_freq[%d] = %.9g, expected %.17g (%.2f ulp)", what, i, (double)got[i], ref[i],
               err / ulp_f32(ref[i]));
  }
  free(got);
}

static inline void expect_close(double got, double want, double tol, const char *what) {
  if (!(fabs(got - want) <= tol)) fail_msg("%s: got %.12g, expected %.12g (tol %g)", what, got, want, tol);
}

#endif /* PE_TEST_UTIL_H */
