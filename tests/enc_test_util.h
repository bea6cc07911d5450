/* enc_test_util.h - helpers shared by the tests of the non-RoPE encodings
 * (test_alibi.c, test_t5.c, test_sinusoidal.c, test_learned.c): a PRNG,
 * reference half-type conversions written independently of the library,
 * strided test tensors, one shared pool and the bit-identity checks. Include after
 * <cmocka.h> and "posenc.h". */
#ifndef PE_ENC_TEST_UTIL_H
#define PE_ENC_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isa_compare.h"
#include "test_util.h"

/* ---- helpers: rng, half types, tensors ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static inline uint64_t rng_next(void) { return splitmix64(&rng_state); }
static inline float rng_uniform(float lo, float hi) {
  return lo + (hi - lo) * (float)((rng_next() >> 40) * (1.0 / 16777216.0));
}

/* Independent of the library's convert.h: binary16 decoded and encoded with
 * ldexp/nearbyint in double (exact scalings, the default round-to-nearest-
 * even), and bf16 as the float32 rounded to 8 significant bits by comparing
 * the two neighbours in double. */
static inline float h2f(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return (float)((h & 0x8000) ? -v : v);
}
static inline uint16_t f2h(float f) {
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  double a = fabs((double)f);
  if (isnan(f)) return (uint16_t)(sign | 0x7e00);
  if (a < 0x1p-14) return (uint16_t)(sign | (uint16_t)nearbyint(a * 0x1p24)); /* 1024 = min normal */
  int e = ilogb(a);
  double m = nearbyint(ldexp(a, 10 - e));
  if (m == 2048) m = 1024, e++;
  if (e > 15) return (uint16_t)(sign | 0x7c00);
  return (uint16_t)(sign | ((e + 15) << 10) | ((int)m - 1024));
}
static inline float b2f(uint16_t b) { return bits_f32((uint32_t)b << 16); }
static inline uint16_t f2b(float f) {
  uint32_t u = f32_bits(f);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
  float flo = bits_f32(lo), fhi = bits_f32(hi);
  double dl = fabs((double)f - (double)flo), dh = fabs((double)fhi - (double)f);
  if (isinf(f)) return (uint16_t)(u >> 16);
  if (dh < dl || (dh == dl && ((lo >> 16) & 1))) return (uint16_t)(hi >> 16);
  return (uint16_t)(lo >> 16);
}

static inline size_t esize(pe_dtype d) { return d == PE_F32 ? 4 : 2; }
static inline double get_elem(const pe_tensor *t, int64_t off) {
  const char *p = (const char *)t->data + off * (int64_t)esize(t->dtype);
  if (t->dtype == PE_F32) {
    float f;
    memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, p, 2);
  return t->dtype == PE_F16 ? h2f(h) : b2f(h);
}
static inline void set_elem(pe_tensor *t, int64_t off, float v) {
  char *p = (char *)t->data + off * (int64_t)esize(t->dtype);
  if (t->dtype == PE_F32) {
    memcpy(p, &v, 4);
  } else {
    uint16_t h = t->dtype == PE_F16 ? f2h(v) : f2b(v);
    memcpy(p, &h, 2);
  }
}
/* Relative rounding unit of a dtype. */
static inline double dtype_eps(pe_dtype d) {
  return d == PE_F32 ? 0x1p-23 : d == PE_F16 ? 0x1p-10 : 0x1p-7;
}

/* A tensor of logical shape s with dimensions 0..2 laid out in the physical
 * order perm (outermost first), rows padded by pad elements, and dimension
 * `reversed` (or -1) walked backwards through a negative stride. */
typedef struct tbuf {
  pe_tensor t;
  void *mem;
  size_t bytes;
} tbuf;
static inline tbuf make_tensor(pe_dtype d, const int64_t s[4], const int perm[3], int64_t pad,
                        int reversed) {
  tbuf b;
  memset(&b, 0, sizeof b);
  b.t.dtype = d;
  memcpy(b.t.shape, s, sizeof b.t.shape);
  int64_t st[4];
  st[3] = 1;
  int64_t span = s[3] + pad;
  for (int k = 2; k >= 0; k--) {
    st[perm[k]] = span;
    span *= s[perm[k]];
  }
  b.bytes = (size_t)span * esize(d);
  b.mem = malloc(b.bytes);
  assert_non_null(b.mem);
  for (size_t i = 0; i < b.bytes; i++) ((unsigned char *)b.mem)[i] = (unsigned char)rng_next();
  char *base = b.mem;
  if (reversed >= 0) {
    base += (s[reversed] - 1) * st[reversed] * (int64_t)esize(d);
    st[reversed] = -st[reversed];
  }
  memcpy(b.t.stride, st, sizeof st);
  b.t.data = base;
  return b;
}
static inline int64_t offset_of(const pe_tensor *t, int64_t a, int64_t b, int64_t c, int64_t e) {
  return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + e * t->stride[3];
}
/* Fill every logical element with uniform values in [lo, hi). */
static inline void fill_uniform(tbuf *b, float lo, float hi) {
  const pe_tensor *t = &b->t;
  for (int64_t a = 0; a < t->shape[0]; a++)
    for (int64_t h = 0; h < t->shape[1]; h++)
      for (int64_t i = 0; i < t->shape[2]; i++)
        for (int64_t j = 0; j < t->shape[3]; j++)
          set_elem(&b->t, offset_of(t, a, h, i, j), rng_uniform(lo, hi));
}
static inline tbuf clone(const tbuf *src) {
  tbuf b = *src;
  b.mem = malloc(src->bytes);
  assert_non_null(b.mem);
  memcpy(b.mem, src->mem, src->bytes);
  b.t.data = (char *)b.mem + ((char *)src->t.data - (char *)src->mem);
  return b;
}

/* One 3-thread pool for the whole file (creating pools per case, with their
 * hwloc topology and threads, is slow under qemu). PE_POOL_MIN_BYTES=0 makes
 * even the small test tensors split across the threads. */
static pe_threadpool *shared_pool;
/* 1: the bit-identity cases compare pool against no pool instead of ISAs. */
static int pool_mode;
static inline pe_threadpool *test_pool(void) {
  if (!shared_pool) {
    setenv("PE_POOL_MIN_BYTES", "0", 1);
    assert_int_equal(pe_threadpool_create(3, &shared_pool), PE_OK);
  }
  return shared_pool;
}
static inline int destroy_pool(void **state) {
  (void)state;
  pe_threadpool_destroy(shared_pool);
  shared_pool = NULL;
  return 0;
}

/* A copy of in's storage in out (in->bytes long): the same view of it. */
static inline pe_tensor copy_into(const tbuf *in, void *out) {
  memcpy(out, in->mem, in->bytes);
  pe_tensor t = in->t;
  t.data = (char *)out + ((const char *)in->t.data - (const char *)in->mem);
  return t;
}

/* One bit-identity case: every SIMD path against scalar, or (pool_mode) the
 * shared pool against one thread. */
static inline void identity_check(const char *what, size_t bytes, pe_test_run_fn fn, void *ctx) {
  if (pool_mode)
    pe_pool_compare(what, bytes, fn, ctx, test_pool());
  else
    pe_isa_compare(what, bytes, fn, ctx);
}

/* The two tests over a file's identity cases (`cases` runs them all through
 * identity_check). The pool test is its own test so that PE_TEST_FILTER
 * (test_env.h) can leave it out where threads are slow (qemu). */
#define IDENTITY_TESTS(cases)                                                        \
  static void test_simd_matches_scalar(void **state) {                               \
    (void)state;                                                                     \
    if (!pe_test_any_simd_path()) skip(); /* only scalar here: nothing to compare */ \
    pool_mode = 0;                                                                   \
    cases();                                                                         \
  }                                                                                  \
  static void test_pool_matches_single_thread(void **state) {                        \
    (void)state;                                                                     \
    pool_mode = 1;                                                                   \
    cases();                                                                         \
    pool_mode = 0;                                                                   \
  }

/* ---- additive score biases (ALiBi, T5) against float64 ---- */

/* The layout of variant 0..5 of the bias tests' scores [B, H, Q, K]: dense,
 * [B, Q, H, K], or [Q, H, B] outermost first; variants 3..5 pad each row by 3
 * elements, 4 and 5 walk dimension 1, 2 backwards. */
static inline tbuf make_variant_tensor(pe_dtype d, const int64_t s[4], int variant) {
  static const int perms[3][3] = {{0, 1, 2}, {0, 2, 1}, {2, 1, 0}};
  return make_tensor(d, s, perms[variant % 3], variant >= 3 ? 3 : 0,
                     variant == 4 ? 1 : variant == 5 ? 2 : -1);
}

/* n positions in [0, limit) (caller frees). */
static inline int64_t *random_positions(int64_t n, int64_t limit) {
  int64_t *p = malloc(sizeof(int64_t) * (size_t)n);
  assert_non_null(p);
  for (int64_t k = 0; k < n; k++) p[k] = (int64_t)(rng_next() % (uint64_t)limit);
  return p;
}

/* The bias a scheme adds to head h's score of the query at position q and
 * key j. */
typedef double (*score_bias_fn)(const void *ctx, int64_t h, int64_t q, int64_t j);

/* after = before + bias(h, q, j) element by element in double, within two
 * roundings of the dtype; -inf where the causal mask hides key j (j > q);
 * NaN scores stay NaN. Query i of batch row b is at qp[b * Q + i], or at
 * K - Q + i when qp is NULL. */
static inline void check_score_bias(const tbuf *before, const tbuf *after, const int64_t *qp,
                                    int causal, score_bias_fn bias_of, const void *ctx) {
  const pe_tensor *t = &before->t;
  int64_t B = t->shape[0], H = t->shape[1], Q = t->shape[2], K = t->shape[3];
  double eps = dtype_eps(t->dtype);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t i = 0; i < Q; i++) {
        int64_t q = qp ? qp[b * Q + i] : K - Q + i;
        for (int64_t j = 0; j < K; j++) {
          int64_t off = offset_of(t, b, h, i, j);
          double s = get_elem(&before->t, off), g = get_elem(&after->t, off);
          if (causal && j > q) {
            if (!(isinf(g) && g < 0))
              fail_msg("[%ld,%ld,%ld,%ld] = %g, want -inf", (long)b, (long)h, (long)i, (long)j, g);
            continue;
          }
          if (isnan(s)) {
            if (!isnan(g)) fail_msg("[%ld,%ld,%ld,%ld]: NaN score became %g", (long)b, (long)h, (long)i, (long)j, g);
            continue;
          }
          double bias = bias_of(ctx, h, q, j), want = s + bias;
          double tol = 2 * eps * (fabs(s) + fabs(bias)) + 1e-30;
          if (!(fabs(g - want) <= tol))
            fail_msg("[%ld,%ld,%ld,%ld] qpos %ld: got %.9g, want %.9g (score %.9g, bias %.9g)",
                     (long)b, (long)h, (long)i, (long)j, (long)q, g, want, s, bias);
        }
      }
}

static inline void expect_error(pe_status got, pe_status want, const char *needle) {
  assert_int_equal(got, want);
  const char *msg = pe_last_error();
  if (!strstr(msg, needle)) fail_msg("error \"%s\" does not mention \"%s\"", msg, needle);
}

/* Random scores with NaN, +-Inf, subnormals, zeros of both signs. */
static inline void fill_special(tbuf *b) {
  const pe_tensor *t = &b->t;
  static const float specials[] = {NAN, -NAN, INFINITY, -INFINITY, 0x1p-140f, -0x1p-149f,
                                   0.0f, -0.0f, 65504.0f, 1e-7f, 3e38f, -6e-5f};
  for (int64_t a = 0; a < t->shape[0]; a++)
    for (int64_t h = 0; h < t->shape[1]; h++)
      for (int64_t i = 0; i < t->shape[2]; i++)
        for (int64_t j = 0; j < t->shape[3]; j++) {
          uint64_t r = rng_next();
          float v = (r & 7) == 0 ? specials[(r >> 8) % 12] : rng_uniform(-100.0f, 100.0f);
          set_elem(&b->t, offset_of(t, a, h, i, j), v);
        }
  /* Signalling NaNs straight into the storage too. */
  if (t->dtype == PE_F32) {
    uint32_t snan = 0x7f800001u;
    memcpy(t->data, &snan, 4);
  } else {
    uint16_t snan = t->dtype == PE_F16 ? 0x7c01u : 0x7f81u;
    memcpy(t->data, &snan, 2);
  }
}

#endif
