/* test_contract.c - the calling contract of posenc.h that every entry point
 * shares, written to the header's text, not to the code:
 *
 * 1. Overlap. Any overlap between two tensors one call writes (q and k; the
 *    fused store's k_cache and q or k; a learned table and x, since x is
 *    written while the table is read) is refused with PE_ERR_SHAPE and
 *    nothing written - not only equal base pointers. Disjoint views of one
 *    buffer are fine: q and k as interleaved heads of one packed QKV row
 *    ([B, T, H_total, D], q heads 0..3, k heads 4..5, the same strides) are
 *    accepted and rotated exactly as separate copies are.
 * 2. Flags. Each family has its own bits (RoPE 0-7, masks 8-15, sinusoidal
 *    16-23) and every call refuses bits that are not its own:
 *    PE_ERR_INVALID_ARGUMENT, nothing written.
 * 3. Empty calls. Zero batch, heads or tokens is PE_OK with nothing touched,
 *    for every entry point (an empty chunk of a continuously batched step; a
 *    no-op in NumPy and PyTorch); pe_sinusoidal_table with n_positions 0 too.
 *    shape[3] (head_dim, d_model, k_len) must stay > 0 and data non-NULL.
 * 4. Bounded stack. Every entry point runs on a thread with a 64 KiB stack
 *    (pthread_attr_setstacksize), without a pool and with a pool of 2, and
 *    gives the bytes the main thread gives. This runs in a forked child, so a
 *    stack overflow (SIGSEGV) is reported as this test's failure instead of
 *    killing the other tests. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "posenc.h"

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_state;
static void seed(uint64_t s) { rng_state = s * 0x9e3779b97f4a7c15ull + 1; }
static uint32_t rnd(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}
/* Values in [-2, 2), multiples of 2^-10: exact in f32, f16 and bf16 range. */
static float rval(void) { return (float)((int32_t)(rnd() % 4096) - 2048) / 1024.0f; }
static void fill_f32(float *p, size_t n, uint64_t s) {
  seed(s);
  for (size_t i = 0; i < n; i++) p[i] = rval();
}

static pe_rope_cache *make_cache(int32_t head_dim, int64_t max_positions, double base) {
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = head_dim;
  p.max_positions = max_positions;
  p.base = base;
  pe_rope_cache *c = NULL;
  pe_status st = pe_rope_cache_create(&p, &c);
  if (st != PE_OK) fail_msg("pe_rope_cache_create: %s", pe_last_error());
  return c;
}

/* [b, h, t, d] with the given element strides (stride[3] = 1). */
static pe_tensor view(void *data, pe_dtype dt, int64_t b, int64_t h, int64_t t, int64_t d,
                      int64_t sb, int64_t sh, int64_t st) {
  pe_tensor x = {data, dt, {b, h, t, d}, {sb, sh, st, 1}};
  return x;
}
/* Dense [b, h, t, d] (BHTD) float32. */
static pe_tensor dense(void *data, int64_t b, int64_t h, int64_t t, int64_t d) {
  return view(data, PE_F32, b, h, t, d, h * t * d, t * d, d);
}

/* M-RoPE section for rotary_dim/2 = half: three non-negative counts. */
static void section_for(int32_t half, int32_t s[3]) {
  s[1] = half / 3;
  s[2] = half / 3;
  s[0] = half - s[1] - s[2];
}

/* The call must be refused with `want` and a message, and the `n` bytes at
 * `mem` must equal `snap`. */
#define REFUSED(call, want, mem, snap, n)                                                  \
  do {                                                                                     \
    pe_status st_ = (call);                                                                \
    if (st_ != (want))                                                                     \
      fail_msg("%s:%d: %s returned %s, expected %s (%s)", __FILE__, __LINE__, #call,       \
               pe_status_string(st_), pe_status_string(want), pe_last_error());            \
    if (memcmp((mem), (snap), (n)))                                                        \
      fail_msg("%s:%d: %s was refused but wrote memory", __FILE__, __LINE__, #call);       \
  } while (0)

#define MUST_OK(call)                                                                      \
  do {                                                                                     \
    pe_status st_ = (call);                                                                \
    if (st_ != PE_OK)                                                                      \
      fail_msg("%s:%d: %s returned %s, expected PE_OK: %s", __FILE__, __LINE__, #call,     \
               pe_status_string(st_), pe_last_error());                                    \
  } while (0)

static pe_threadpool *pool2;

/* ---- 1. overlap --------------------------------------------------------- */

/* q = heads 0-1, k = heads 1-2 of one [1, 3, T, D] buffer: head 1 would be
 * rotated twice (a data race with a pool). */
static void test_partial_qk_overlap_refused(void **state) {
  (void)state;
  enum { T = 5, D = 64, N = 3 * T * D + D };
  pe_rope_cache *c = make_cache(D, 64, 10000.0);
  const pe_rope_cache *one[1] = {c};
  int32_t sec[3];
  section_for(D / 2, sec);
  static float buf[N], snap[N];
  fill_f32(buf, N, 1);
  memcpy(snap, buf, sizeof buf);
  pe_threadpool *pools[2] = {NULL, pool2};
  for (int pi = 0; pi < 2; pi++) {
    pe_threadpool *pool = pools[pi];
    /* heads 0-1 and 1-2 of [1, 3, T, D] */
    pe_tensor q = dense(buf, 1, 2, T, D), k = dense(buf + T * D, 1, 2, T, D);
    REFUSED(pe_apply_rope_qk(c, &q, &k, NULL, 0, pool), PE_ERR_SHAPE, buf, snap, sizeof buf);
    REFUSED(pe_apply_rope_qk(c, &k, &q, NULL, 0, pool), PE_ERR_SHAPE, buf, snap, sizeof buf);
    REFUSED(pe_apply_mrope_qk(c, &q, &k, NULL, sec, 0, pool), PE_ERR_SHAPE, buf, snap, sizeof buf);
    REFUSED(pe_apply_rope_qk_multi(one, 1, NULL, &q, &k, NULL, 0, pool), PE_ERR_SHAPE, buf, snap,
            sizeof buf);
    /* the same heads as rows of [1, T, 3, D] (BTHD): interleaved and overlapping */
    q = view(buf, PE_F32, 1, 2, T, D, T * 3 * D, D, 3 * D);
    k = view(buf + D, PE_F32, 1, 2, T, D, T * 3 * D, D, 3 * D);
    REFUSED(pe_apply_rope_qk(c, &q, &k, NULL, PE_ROPE_INVERSE, pool), PE_ERR_SHAPE, buf, snap,
            sizeof buf);
    REFUSED(pe_apply_mrope_qk(c, &q, &k, NULL, sec, 0, pool), PE_ERR_SHAPE, buf, snap, sizeof buf);
    REFUSED(pe_apply_rope_qk_multi(one, 1, NULL, &q, &k, NULL, 0, pool), PE_ERR_SHAPE, buf, snap,
            sizeof buf);
    /* one shared element: k's first is q's last */
    q = dense(buf, 1, 2, T, D);
    k = dense(buf + 2 * T * D - 1, 1, 1, T, D);
    REFUSED(pe_apply_rope_qk(c, &q, &k, NULL, 0, pool), PE_ERR_SHAPE, buf, snap, sizeof buf);
    REFUSED(pe_apply_rope_qk_multi(one, 1, NULL, &q, &k, NULL, 0, pool), PE_ERR_SHAPE, buf, snap,
            sizeof buf);
    /* the fused store: q and k overlapping (k is read, q written) */
    static float kc[4 * 1 * 8 * D];
    static float kc_snap[sizeof kc / sizeof kc[0]];
    memset(kc, 0x5a, sizeof kc);
    memcpy(kc_snap, kc, sizeof kc);
    pe_tensor tc = dense(kc, 4, 1, 8, D);
    pe_tensor q2 = dense(buf, 1, 2, T, D), k2 = dense(buf + T * D, 1, 1, T, D);
    const int64_t slots[T] = {0, 3, 9, 17, 31};
    REFUSED(pe_apply_rope_qk_store(c, &q2, &k2, &tc, slots, NULL, 0, pool), PE_ERR_SHAPE, buf, snap,
            sizeof buf);
    assert_memory_equal(kc, kc_snap, sizeof kc);
  }
  pe_rope_cache_destroy(c);
}

/* The rows of a packed QKV projection: [B, T, H_total = 8, D], q = heads
 * 0..3, k = heads 4..5, v = heads 6..7. q and k are interleaved in memory but
 * share no element: accepted, and rotated exactly as separate copies. */
static void test_packed_qkv_views_accepted(void **state) {
  (void)state;
  enum { B = 2, T = 7, H = 8, D = 64, HQ = 4, HK = 2, N = B * T * H * D };
  pe_rope_cache *tab = make_cache(D, 64, 10000.0), *fly = make_cache(D, 0, 500000.0);
  const pe_rope_cache *two[2] = {tab, fly};
  const int32_t idx[B] = {1, 0};
  int32_t sec[3];
  section_for(D / 2, sec);
  int64_t pos[B * T], mpos[3 * B * T];
  for (int i = 0; i < B * T; i++) pos[i] = (i * 7) % 64;
  for (int a = 0; a < 3; a++)
    for (int i = 0; i < B * T; i++) mpos[a * B * T + i] = (i * (a + 3)) % 64;
  int64_t slots[B * T];
  for (int i = 0; i < B * T; i++) slots[i] = i == 5 ? -1 : (i * 5) % 32;
  static float qkv[N], orig[N], qd[B * HQ * T * D], kd[B * HK * T * D];
  static float kc_ref[4 * HK * 8 * D], kc_got[4 * HK * 8 * D];
  fill_f32(orig, N, 2);
  const int64_t sb = T * H * D, sh = D, st = H * D;
  for (int op = 0; op < 4; op++)
    for (int pi = 0; pi < 2; pi++) {
      pe_threadpool *pool = pi ? pool2 : NULL;
      memcpy(qkv, orig, sizeof qkv);
      pe_tensor q = view(qkv, PE_F32, B, HQ, T, D, sb, sh, st);
      pe_tensor k = view(qkv + HQ * D, PE_F32, B, HK, T, D, sb, sh, st);
      /* the reference: dense copies, rotated as separate buffers */
      for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
          for (int h = 0; h < HQ; h++)
            memcpy(qd + ((b * HQ + h) * T + t) * D, orig + b * sb + h * sh + t * st, D * 4);
          for (int h = 0; h < HK; h++)
            memcpy(kd + ((b * HK + h) * T + t) * D, orig + b * sb + (HQ + h) * sh + t * st, D * 4);
        }
      pe_tensor tq = dense(qd, B, HQ, T, D), tk = dense(kd, B, HK, T, D);
      pe_tensor cref = dense(kc_ref, 4, HK, 8, D), cgot = dense(kc_got, 4, HK, 8, D);
      memset(kc_ref, 0, sizeof kc_ref);
      memset(kc_got, 0, sizeof kc_got);
      switch (op) {
      case 0:
        MUST_OK(pe_apply_rope_qk(tab, &tq, &tk, pos, 0, NULL));
        MUST_OK(pe_apply_rope_qk(tab, &q, &k, pos, 0, pool));
        break;
      case 1:
        MUST_OK(pe_apply_mrope_qk(tab, &tq, &tk, mpos, sec, 0, NULL));
        MUST_OK(pe_apply_mrope_qk(tab, &q, &k, mpos, sec, 0, pool));
        break;
      case 2:
        MUST_OK(pe_apply_rope_qk_multi(two, 2, idx, &tq, &tk, pos, 0, NULL));
        MUST_OK(pe_apply_rope_qk_multi(two, 2, idx, &q, &k, pos, 0, pool));
        break;
      default:
        MUST_OK(pe_apply_rope_qk_store(fly, &tq, &tk, &cref, slots, pos, 0, NULL));
        MUST_OK(pe_apply_rope_qk_store(fly, &q, &k, &cgot, slots, pos, 0, pool));
        assert_memory_equal(kc_ref, kc_got, sizeof kc_ref);
        break;
      }
      for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
          for (int h = 0; h < HQ; h++)
            if (memcmp(qd + ((b * HQ + h) * T + t) * D, qkv + b * sb + h * sh + t * st, D * 4))
              fail_msg("op %d pool %d: packed q [%d,%d,%d] differs from the separate copy", op, pi,
                       b, h, t);
          for (int h = 0; h < HK; h++)
            if (memcmp(kd + ((b * HK + h) * T + t) * D, qkv + b * sb + (HQ + h) * sh + t * st,
                       D * 4))
              fail_msg("op %d pool %d: packed k [%d,%d,%d] differs from the separate copy", op, pi,
                       b, h, t);
          /* v heads untouched */
          const float *v = qkv + b * sb + (HQ + HK) * sh + t * st;
          assert_memory_equal(v, orig + (v - qkv), 2 * D * 4);
        }
    }
  pe_rope_cache_destroy(tab);
  pe_rope_cache_destroy(fly);
}

/* The fused store: a k_cache that overlaps q or k in any element is
 * refused, whether or not its base pointer equals theirs. */
static void test_store_cache_overlap_refused(void **state) {
  (void)state;
  enum { T = 4, D = 32, N = 4096 };
  pe_rope_cache *c = make_cache(D, 64, 10000.0);
  static float buf[N], snap[N];
  fill_f32(buf, N, 3);
  memcpy(snap, buf, sizeof buf);
  const int64_t slots[T] = {0, 1, 2, 3};
  float *qb = buf, *kb = buf + 1024;
  pe_tensor q = dense(qb, 1, 2, T, D), k = dense(kb, 1, 1, T, D);
  struct {
    float *at;
    const char *what;
  } places[] = {
      {qb + T * D, "q's head 1"},       {qb + 2 * T * D - D, "q's last row"},
      {qb + 5, "inside q's first row"}, {kb + D, "k's second row"},
      {kb - 4 * D + 1, "ending inside k"},
  };
  for (int pi = 0; pi < 2; pi++)
    for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
      /* [num_blocks 1, kv_heads 1, block_size 4, D] */
      pe_tensor tc = dense(places[i].at, 1, 1, 4, D);
      pe_status st = pe_apply_rope_qk_store(c, &q, &k, &tc, slots, NULL, 0, pi ? pool2 : NULL);
      if (st != PE_ERR_SHAPE)
        fail_msg("k_cache at %s: %s, expected PE_ERR_SHAPE (%s)", places[i].what,
                 pe_status_string(st), pe_last_error());
      assert_memory_equal(buf, snap, sizeof buf);
      /* and without q: k_cache against k only */
      st = pe_apply_rope_qk_store(c, NULL, &k, &tc, slots, NULL, 0, pi ? pool2 : NULL);
      if (places[i].at >= kb - 4 * D && st != PE_ERR_SHAPE)
        fail_msg("k_cache at %s (no q): %s, expected PE_ERR_SHAPE", places[i].what,
                 pe_status_string(st));
      if (places[i].at < kb - 4 * D) {
        /* disjoint from k once q is gone: accepted, and k stays unchanged */
        if (st != PE_OK) fail_msg("k_cache at %s (no q): %s", places[i].what, pe_last_error());
        memcpy(buf, snap, sizeof buf);
      }
      assert_memory_equal(buf, snap, sizeof buf);
    }
  pe_rope_cache_destroy(c);
}

/* pe_learned_add writes x and reads the table: a table sharing any element
 * with x would be read after it has been written. */
static void test_learned_table_overlap_refused(void **state) {
  (void)state;
  enum { T = 6, D = 16, L = 32, N = 2048 };
  static float buf[N], snap[N];
  fill_f32(buf, N, 4);
  memcpy(snap, buf, sizeof buf);
  pe_tensor x = dense(buf, 1, 1, T, D);
  const int64_t pos[T] = {0, 1, 2, 3, 4, 5};
  const int64_t offsets[] = {0, D, T * D - 1, -(L * D) + 1, 3};
  for (int pi = 0; pi < 2; pi++)
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
      float *at = buf + 1024 + offsets[i];
      pe_tensor xx = dense(buf + 1024, 1, 1, T, D), tab = dense(at, 1, 1, L, D);
      REFUSED(pe_learned_add(&xx, &tab, pos, pi ? pool2 : NULL), PE_ERR_SHAPE, buf, snap,
              sizeof buf);
    }
  /* disjoint: accepted */
  pe_tensor tab = dense(buf + 1024, 1, 1, L, D);
  MUST_OK(pe_learned_add(&x, &tab, pos, NULL));
  for (int i = 0; i < T * D; i++) assert_true(buf[i] == snap[i] + snap[1024 + i]);
}

/* ---- 2. flags ----------------------------------------------------------- */

_Static_assert(PE_ROPE_INVERSE == 0x1u && PE_ROPE_MROPE_INTERLEAVED == 0x2u &&
                   PE_ROPE_STREAM_CACHE == 0x4u,
               "RoPE flags: bits 0-7");
_Static_assert(PE_MASK_CAUSAL == 0x100u, "mask flags: bits 8-15");
_Static_assert(PE_SINUSOIDAL_CONCAT == 0x10000u, "sinusoidal flags: bits 16-23");

static void test_flag_values_are_distinct(void **state) {
  (void)state;
  const uint32_t rope = PE_ROPE_INVERSE | PE_ROPE_MROPE_INTERLEAVED | PE_ROPE_STREAM_CACHE;
  assert_int_equal(rope & PE_MASK_CAUSAL, 0);
  assert_int_equal(rope & PE_SINUSOIDAL_CONCAT, 0);
  assert_int_equal(PE_MASK_CAUSAL & PE_SINUSOIDAL_CONCAT, 0);
  assert_true(rope <= 0xffu);
  assert_true(PE_MASK_CAUSAL >= 0x100u && PE_MASK_CAUSAL <= 0xff00u);
  assert_true(PE_SINUSOIDAL_CONCAT >= 0x10000u && PE_SINUSOIDAL_CONCAT <= 0xff0000u);
}

/* A flag of one family passed to a call of another: refused, nothing written. */
static void test_foreign_flags_refused(void **state) {
  (void)state;
  enum { T = 4, D = 32, N = 4096 };
  pe_rope_cache *c = make_cache(D, 64, 10000.0);
  const pe_rope_cache *one[1] = {c};
  int32_t sec[3];
  section_for(D / 2, sec);
  static float buf[N], snap[N], kc[4 * 8 * D], kc_snap[4 * 8 * D];
  fill_f32(buf, N, 5);
  memcpy(snap, buf, sizeof buf);
  memset(kc, 0, sizeof kc);
  memcpy(kc_snap, kc, sizeof kc);
  pe_tensor q = dense(buf, 1, 2, T, D), k = dense(buf + 1024, 1, 1, T, D);
  pe_tensor tc = dense(kc, 4, 1, 8, D);
  pe_tensor scores = dense(buf + 2048, 1, 2, T, 8), x = dense(buf + 3072, 1, 1, T, D);
  const int64_t slots[T] = {0, 1, 2, 3}, deltas[T] = {1, 2, 3, 4};
  float t5_table[32 * 2];
  for (int i = 0; i < 64; i++) t5_table[i] = (float)i * 0.125f;
  const uint32_t not_rope[] = {PE_MASK_CAUSAL, PE_SINUSOIDAL_CONCAT,
                               PE_ROPE_INVERSE | PE_MASK_CAUSAL, 0x80000000u};
  for (size_t i = 0; i < sizeof not_rope / sizeof not_rope[0]; i++) {
    uint32_t f = not_rope[i];
    REFUSED(pe_apply_rope_qk(c, &q, &k, NULL, f, NULL), PE_ERR_INVALID_ARGUMENT, buf, snap,
            sizeof buf);
    REFUSED(pe_apply_rope_qk(c, &q, &k, NULL, f, pool2), PE_ERR_INVALID_ARGUMENT, buf, snap,
            sizeof buf);
    REFUSED(pe_apply_rope_qk_store(c, &q, &k, &tc, slots, NULL, f, NULL), PE_ERR_INVALID_ARGUMENT,
            buf, snap, sizeof buf);
    assert_memory_equal(kc, kc_snap, sizeof kc);
    REFUSED(pe_apply_mrope_qk(c, &q, &k, NULL, sec, f, NULL), PE_ERR_INVALID_ARGUMENT, buf, snap,
            sizeof buf);
    REFUSED(pe_apply_rope_qk_multi(one, 1, NULL, &q, &k, NULL, f, NULL), PE_ERR_INVALID_ARGUMENT,
            buf, snap, sizeof buf);
  }
  /* M-RoPE's own flag is not pe_apply_rope_qk's */
  REFUSED(pe_apply_rope_qk(c, &q, &k, NULL, PE_ROPE_MROPE_INTERLEAVED, NULL),
          PE_ERR_INVALID_ARGUMENT, buf, snap, sizeof buf);
  REFUSED(pe_apply_rope_qk_store(c, &q, &k, &tc, slots, NULL, PE_ROPE_MROPE_INTERLEAVED, NULL),
          PE_ERR_INVALID_ARGUMENT, buf, snap, sizeof buf);
  (void)deltas;
  const uint32_t not_mask[] = {PE_ROPE_INVERSE, PE_SINUSOIDAL_CONCAT, PE_ROPE_MROPE_INTERLEAVED,
                               PE_MASK_CAUSAL | PE_ROPE_INVERSE};
  for (size_t i = 0; i < sizeof not_mask / sizeof not_mask[0]; i++) {
    uint32_t f = not_mask[i];
    REFUSED(pe_alibi_add_bias(&scores, NULL, NULL, f, NULL), PE_ERR_INVALID_ARGUMENT, buf, snap,
            sizeof buf);
    REFUSED(pe_alibi_add_bias(&scores, NULL, NULL, f, pool2), PE_ERR_INVALID_ARGUMENT, buf, snap,
            sizeof buf);
    REFUSED(pe_t5_add_bias(&scores, t5_table, 1, 32, 128, NULL, f, NULL), PE_ERR_INVALID_ARGUMENT,
            buf, snap, sizeof buf);
  }
  const uint32_t not_sin[] = {PE_ROPE_INVERSE, PE_MASK_CAUSAL, PE_SINUSOIDAL_CONCAT | PE_MASK_CAUSAL};
  for (size_t i = 0; i < sizeof not_sin / sizeof not_sin[0]; i++) {
    uint32_t f = not_sin[i];
    REFUSED(pe_sinusoidal_add(&x, NULL, 10000.0, f, NULL), PE_ERR_INVALID_ARGUMENT, buf, snap,
            sizeof buf);
    REFUSED(pe_sinusoidal_table(4, D, 10000.0, f, buf), PE_ERR_INVALID_ARGUMENT, buf, snap,
            sizeof buf);
  }
  /* each family's own flags are accepted */
  MUST_OK(pe_apply_rope_qk(c, &q, &k, NULL, PE_ROPE_INVERSE, NULL));
  MUST_OK(pe_apply_mrope_qk(c, &q, &k, NULL, sec, PE_ROPE_INVERSE | PE_ROPE_MROPE_INTERLEAVED, NULL));
  MUST_OK(pe_alibi_add_bias(&scores, NULL, NULL, PE_MASK_CAUSAL, NULL));
  MUST_OK(pe_t5_add_bias(&scores, t5_table, 1, 32, 128, NULL, PE_MASK_CAUSAL, NULL));
  MUST_OK(pe_sinusoidal_add(&x, NULL, 10000.0, PE_SINUSOIDAL_CONCAT, NULL));
  pe_rope_cache_destroy(c);
}

/* ---- 3. empty calls ----------------------------------------------------- */

/* Every tensor of these calls points into one arena; an empty call must
 * leave all of it as it was. */
enum { ARENA = 1 << 16 };
static float arena[ARENA], arena_snap[ARENA];

#define EMPTY_OK(call, what)                                                               \
  do {                                                                                     \
    pe_status st_ = (call);                                                                \
    if (st_ != PE_OK)                                                                      \
      fail_msg("%s with %s = 0: %s, expected PE_OK (an empty call): %s", what, dims[z],    \
               pe_status_string(st_), pe_last_error());                                    \
    if (memcmp(arena, arena_snap, sizeof arena))                                           \
      fail_msg("%s with %s = 0 returned PE_OK but wrote memory", what, dims[z]);           \
    n_empty++;                                                                             \
  } while (0)

static void test_zero_sizes_are_empty_calls(void **state) {
  (void)state;
  enum { D = 64 };
  static const char *const dims[3] = {"batch", "heads", "tokens"};
  fill_f32(arena, ARENA, 6);
  memcpy(arena_snap, arena, sizeof arena);
  pe_rope_cache *tab = make_cache(D, 64, 10000.0), *fly = make_cache(D, 0, 10000.0),
                *other = make_cache(D, 0, 500000.0);
  const pe_rope_cache *two[2] = {tab, fly};
  int32_t sec[3];
  section_for(D / 2, sec);
  /* [batch][tokens] arrays (three axes for M-RoPE): still checked when
   * only the head count is zero, so valid and distinct (slots) */
  int64_t any[3 * 2 * 5];
  for (int i = 0; i < 3 * 2 * 5; i++) any[i] = i;
  const int32_t idx[16] = {0};
  float t5_table[32 * 4];
  for (int i = 0; i < 32 * 4; i++) t5_table[i] = 1.0f;
  float slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
  uint8_t axis_of[D / 2];
  for (int i = 0; i < D / 2; i++) axis_of[i] = (uint8_t)(i % 3);
  pe_qk_norm l2;
  pe_qk_norm_init(&l2);
  l2.kind = PE_QK_NORM_L2;
  long n_empty = 0;
  for (int pi = 0; pi < 2; pi++)
    for (int z = 0; z < 3; z++) {
      pe_threadpool *pool = pi ? pool2 : NULL;
      int64_t sh[4] = {2, 4, 5, D};
      sh[z] = 0;
      pe_tensor q = view(arena, PE_F32, sh[0], sh[1], sh[2], D, 4 * 5 * D, 5 * D, D);
      pe_tensor k = view(arena + 8192, PE_F32, sh[0], sh[1] ? 2 : 0, sh[2], D, 2 * 5 * D, 5 * D, D);
      pe_tensor kb = k;
      kb.dtype = PE_BF16;
      /* k_cache [num_blocks 4, kv_heads as k, block_size 8, D] */
      pe_tensor kc = view(arena + 16384, PE_F16, 4, k.shape[1], 8, D, 2 * 8 * D, 8 * D, D);
      EMPTY_OK(pe_apply_rope_qk(tab, &q, &k, NULL, 0, pool), "pe_apply_rope_qk");
      EMPTY_OK(pe_apply_rope_qk(tab, &q, &k, any, 0, pool), "pe_apply_rope_qk (positions)");
      EMPTY_OK(pe_apply_rope_qk(fly, NULL, &kb, any, PE_ROPE_INVERSE, pool),
               "pe_apply_rope_qk (k only, inverse, bf16)");
      EMPTY_OK(pe_apply_rope_qk(fly, &q, NULL, NULL, 0, pool), "pe_apply_rope_qk (q only)");
      EMPTY_OK(pe_rope_shift_k(tab, &k, any, pool), "pe_rope_shift_k");
      EMPTY_OK(pe_rope_rerotate_k(tab, other, &k, any, pool), "pe_rope_rerotate_k");
      EMPTY_OK(pe_rope_rerotate_k(fly, other, &kb, NULL, pool), "pe_rope_rerotate_k (bf16)");
      EMPTY_OK(pe_apply_rope_qk_store(tab, &q, &k, &kc, any, any, 0, pool), "pe_apply_rope_qk_store");
      EMPTY_OK(pe_apply_rope_qk_store(fly, NULL, &kb, &kc, any, NULL, 0, pool),
               "pe_apply_rope_qk_store (no q)");
      EMPTY_OK(pe_apply_mrope_qk(tab, &q, &k, any, sec, 0, pool), "pe_apply_mrope_qk");
      EMPTY_OK(pe_apply_mrope_qk(fly, &q, NULL, NULL, sec, PE_ROPE_MROPE_INTERLEAVED, pool),
               "pe_apply_mrope_qk (interleaved, q only)");
      EMPTY_OK(pe_apply_rope_qk_multi(two, 2, idx, &q, &k, any, 0, pool), "pe_apply_rope_qk_multi");
      EMPTY_OK(pe_apply_rope_qk_multi(two, 1, NULL, &q, &k, NULL, 0, pool),
               "pe_apply_rope_qk_multi (one cache)");
      /* three axes, positions [axis][batch][tokens] */
      EMPTY_OK(pe_apply_rope_axes_qk(tab, &q, &k, any, 3, axis_of, 0, pool), "pe_apply_rope_axes_qk");
      EMPTY_OK(pe_apply_rope_axes_qk(fly, NULL, &kb, any, 3, axis_of, PE_ROPE_INVERSE, pool),
               "pe_apply_rope_axes_qk (k only)");
      /* the norms, and the whole step into a k and a v cache */
      pe_tensor v = view(arena + 4096, PE_F32, sh[0], k.shape[1], sh[2], D, 2 * 5 * D, 5 * D, D);
      pe_tensor vc = view(arena + 20480, PE_F16, 4, k.shape[1], 8, D, 2 * 8 * D, 8 * D, D);
      pe_kv_cache kvc;
      pe_kv_cache_init(&kvc);
      kvc.k = &kc;
      kvc.v = &vc;
      EMPTY_OK(pe_qk_norm_rope(tab, &l2, &q, &k, any, 0, pool), "pe_qk_norm_rope");
      EMPTY_OK(pe_qk_norm_rope(fly, &l2, &q, NULL, NULL, 0, pool), "pe_qk_norm_rope (q only)");
      EMPTY_OK(pe_qk_norm_rope_store(tab, &l2, &q, &k, &v, &kvc, any, any, 0, pool),
               "pe_qk_norm_rope_store");
      pe_kv_cache kvk = kvc;
      kvk.v = NULL;
      EMPTY_OK(pe_qk_norm_rope_store(fly, &l2, NULL, &k, NULL, &kvk, any, NULL, 0, pool),
               "pe_qk_norm_rope_store (k only)");
      EMPTY_OK(pe_kv_read(&kvc, &k, &v, any), "pe_kv_read");
      EMPTY_OK(pe_kv_write(&kvk, &k, NULL, any), "pe_kv_write (k only)");
      /* MLA: q's heads (rotated whole), kv's [latent 64 | rope 64] rows, one
       * per token (so no zero-head kv) */
      pe_mla mla;
      pe_mla_init(&mla);
      mla.rope_dim = D;
      mla.kv_rope_offset = D;
      mla.kv_norm = PE_QK_NORM_NONE;
      mla.q_norm = PE_QK_NORM_L2;
      pe_tensor kvm = view(arena + 24576, PE_F32, sh[0], 1, sh[2], 2 * D, 5 * 2 * D, 5 * 2 * D, 2 * D);
      pe_tensor cm = view(arena + 26624, PE_F32, 4, 1, 8, 2 * D, 8 * 2 * D, 8 * 2 * D, 2 * D);
      pe_tensor om = view(arena + 51200, PE_F32, sh[0], 1, sh[2], 2 * D, 5 * 2 * D, 5 * 2 * D, 2 * D);
      EMPTY_OK(pe_mla_rope_store(tab, &mla, &q, NULL, NULL, NULL, any, 0, pool),
               "pe_mla_rope_store (q only)");
      if (z != 1) {
        EMPTY_OK(pe_mla_rope_store(tab, &mla, &q, &kvm, &cm, any, any, 0, pool), "pe_mla_rope_store");
        EMPTY_OK(pe_mla_rope_store(fly, &mla, NULL, &kvm, &cm, any, NULL, 0, pool),
                 "pe_mla_rope_store (kv only)");
        EMPTY_OK(pe_mla_cache_read(&mla, &cm, &om, any), "pe_mla_cache_read");
      }
      /* no slots */
      EMPTY_OK(pe_rope_shift_k_cache(tab, &kvc, any, any, 0, pool), "pe_rope_shift_k_cache");
      EMPTY_OK(pe_rope_rerotate_k_cache(tab, other, &kvc, any, any, 0, pool),
               "pe_rope_rerotate_k_cache");
      /* scores [batch, heads, q_len, k_len 8] */
      pe_tensor s = view(arena + 32768, PE_F32, sh[0], sh[1], sh[2], 8, 4 * 5 * 8, 5 * 8, 8);
      EMPTY_OK(pe_alibi_add_bias(&s, NULL, NULL, 0, pool), "pe_alibi_add_bias");
      EMPTY_OK(pe_alibi_add_bias(&s, slopes, any, PE_MASK_CAUSAL, pool),
               "pe_alibi_add_bias (causal)");
      EMPTY_OK(pe_t5_add_bias(&s, t5_table, 1, 32, 128, NULL, 0, pool), "pe_t5_add_bias");
      EMPTY_OK(pe_t5_add_bias(&s, t5_table, 0, 32, 128, any, PE_MASK_CAUSAL, pool),
               "pe_t5_add_bias (causal)");
      if (z != 1) { /* x: [batch, 1, tokens, d_model] */
        pe_tensor x = view(arena + 40960, PE_F32, sh[0], 1, sh[2], D, 5 * D, 5 * D, D);
        pe_tensor table = dense(arena + 49152, 1, 1, 16, D);
        EMPTY_OK(pe_sinusoidal_add(&x, NULL, 10000.0, 0, pool), "pe_sinusoidal_add");
        EMPTY_OK(pe_sinusoidal_add(&x, any, 10000.0, PE_SINUSOIDAL_CONCAT, pool),
                 "pe_sinusoidal_add (concat)");
        EMPTY_OK(pe_learned_add(&x, &table, any, pool), "pe_learned_add");
        EMPTY_OK(pe_learned_add(&x, &table, NULL, pool), "pe_learned_add (positions NULL)");
      }
    }
  /* no positions: an empty table */
  {
    int z = 2;
    EMPTY_OK(pe_sinusoidal_table(0, D, 10000.0, 0, arena), "pe_sinusoidal_table n_positions");
    EMPTY_OK(pe_sinusoidal_table(0, D, 10000.0, PE_SINUSOIDAL_CONCAT, arena),
             "pe_sinusoidal_table (concat) n_positions");
  }
  print_message("%ld empty calls returned PE_OK with nothing written\n", n_empty);
  pe_rope_cache_destroy(tab);
  pe_rope_cache_destroy(fly);
  pe_rope_cache_destroy(other);
}

/* What stays an error in an empty call: NULL data, shape[3] = 0, negative
 * sizes, NULL required pointers. */
static void test_empty_calls_still_checked(void **state) {
  (void)state;
  enum { D = 64 };
  fill_f32(arena, ARENA, 7);
  memcpy(arena_snap, arena, sizeof arena);
  pe_rope_cache *c = make_cache(D, 64, 10000.0);
  pe_tensor q = dense(arena, 1, 2, 0, D);
  pe_tensor nul = q;
  nul.data = NULL;
  REFUSED(pe_apply_rope_qk(c, &nul, NULL, NULL, 0, NULL), PE_ERR_NULL_POINTER, arena, arena_snap,
          sizeof arena);
  REFUSED(pe_rope_shift_k(c, &nul, (const int64_t[1]){0}, NULL), PE_ERR_NULL_POINTER, arena,
          arena_snap, sizeof arena);
  REFUSED(pe_rope_shift_k(c, &q, NULL, NULL), PE_ERR_NULL_POINTER, arena, arena_snap, sizeof arena);
  pe_tensor s = dense(arena, 1, 2, 0, 0); /* k_len 0 */
  REFUSED(pe_alibi_add_bias(&s, NULL, NULL, 0, NULL), PE_ERR_SHAPE, arena, arena_snap,
          sizeof arena);
  pe_tensor hd0 = dense(arena, 1, 2, 0, 0);
  REFUSED(pe_apply_rope_qk(c, &hd0, NULL, NULL, 0, NULL), PE_ERR_SHAPE, arena, arena_snap,
          sizeof arena);
  pe_tensor x0 = dense(arena, 0, 1, 4, 0);
  REFUSED(pe_sinusoidal_add(&x0, NULL, 10000.0, 0, NULL), PE_ERR_SHAPE, arena, arena_snap,
          sizeof arena);
  REFUSED(pe_sinusoidal_table(0, 0, 10000.0, 0, arena), PE_ERR_SHAPE, arena, arena_snap,
          sizeof arena);
  REFUSED(pe_sinusoidal_table(0, D, 10000.0, 0, NULL), PE_ERR_NULL_POINTER, arena, arena_snap,
          sizeof arena);
  pe_tensor neg = dense(arena, 1, -1, 0, D);
  pe_status st = pe_apply_rope_qk(c, &neg, NULL, NULL, 0, NULL);
  assert_int_not_equal(st, PE_OK);
  assert_memory_equal(arena, arena_snap, sizeof arena);
  pe_rope_cache_destroy(c);
}

/* ---- 4. a 64 KiB stack ---------------------------------------------------- */

/* ASan's redzones around the locals make frames larger; the bound there is
 * twice the plain one (valgrind and UBSan add none): on-the-fly rows of
 * PE_MAX_HEAD_DIM floats plus a row of double differences alone take that
 * much, so the unbounded code still fails there. */
#if defined(__SANITIZE_ADDRESS__)
#define PE_SMALL_STACK (2 * 65536)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PE_SMALL_STACK (2 * 65536)
#endif
#endif
#ifndef PE_SMALL_STACK
#define PE_SMALL_STACK 65536
#endif

typedef struct run {
  pe_threadpool *pool;
  uint8_t *out;
  size_t cap, used;
  char why[512]; /* first failure */
} run;

static void put(run *r, const void *p, size_t n) {
  if (r->used + n > r->cap) {
    if (!r->why[0]) snprintf(r->why, sizeof r->why, "output buffer too small");
    return;
  }
  memcpy(r->out + r->used, p, n);
  r->used += n;
}

#define RUN_OK(r, call)                                                                    \
  do {                                                                                     \
    pe_status st_ = (call);                                                                \
    if (st_ != PE_OK && !(r)->why[0])                                                      \
      snprintf((r)->why, sizeof (r)->why, "%s returned %s: %s", #call, pe_status_string(st_), \
               pe_last_error());                                                           \
  } while (0)

/* Every entry point on deterministic inputs; the outputs appended to r->out.
 * Heap buffers only: the thread's own stack is what is being measured. */
static void run_everything(run *r) {
  enum { B = 2, HQ = 4, HK = 2, T = 9 };
  static const int32_t dims[2] = {128, 256};
  pe_threadpool *pool = r->pool;
  for (int di = 0; di < 2; di++) {
    const int32_t D = dims[di];
    const size_t nq = (size_t)B * HQ * T * D, nk = (size_t)B * HK * T * D;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *kc = malloc((size_t)4 * HK * 8 * D * 4);
    float *cs = malloc((size_t)D * 4);
    int64_t pos[B * T], big[B * T], deltas[B * T], slots[B * T], mpos[3 * B * T];
    for (int i = 0; i < B * T; i++) {
      pos[i] = (i * 13) % 64;
      big[i] = (int64_t)1 << 40 | (int64_t)(i * 977);
      deltas[i] = (i % 5) - 2;
      slots[i] = i == 3 ? -1 : (i * 7) % 32;
    }
    for (int a = 0; a < 3; a++)
      for (int i = 0; i < B * T; i++) mpos[a * B * T + i] = (i * (a + 1)) % 64;
    if (!q || !k || !kc || !cs) {
      snprintf(r->why, sizeof r->why, "malloc failed");
      free(q), free(k), free(kc), free(cs);
      return;
    }
    pe_rope_params p;
    pe_rope_params_init(&p);
    p.head_dim = D;
    p.max_positions = 64;
    pe_rope_cache *tab = NULL, *fly = NULL, *yarn = NULL;
    RUN_OK(r, pe_rope_cache_create(&p, &tab));
    p.max_positions = 0;
    RUN_OK(r, pe_rope_cache_create(&p, &fly));
    p.scaling = PE_ROPE_SCALING_YARN;
    p.factor = 4.0;
    p.original_max_positions = 4096;
    RUN_OK(r, pe_rope_cache_create(&p, &yarn));
    if (!tab || !fly || !yarn) {
      pe_rope_cache_destroy(tab), pe_rope_cache_destroy(fly), pe_rope_cache_destroy(yarn);
      free(q), free(k), free(kc), free(cs);
      return;
    }
    pe_rope_cache *caches[2] = {tab, fly};
    int32_t sec[3];
    section_for(D / 2, sec);
    pe_tensor tq = dense(q, B, HQ, T, D), tk = dense(k, B, HK, T, D);
    pe_tensor tkc = view(kc, PE_F32, 4, HK, 8, D, HK * 8 * D, 8 * D, D);
    for (int ci = 0; ci < 3; ci++) {
      pe_rope_cache *c = ci == 0 ? tab : ci == 1 ? fly : yarn;
      const int64_t *pp = ci == 0 ? pos : big;
      fill_f32(q, nq, 10 + (uint64_t)ci), fill_f32(k, nk, 20 + (uint64_t)ci);
      RUN_OK(r, pe_apply_rope_qk(c, &tq, &tk, pp, 0, pool));
      RUN_OK(r, pe_apply_rope_qk(c, NULL, &tk, pp, PE_ROPE_INVERSE, pool));
      put(r, q, nq * 4), put(r, k, nk * 4);
      for (int j = 0; j < 3; j++) {
        RUN_OK(r, pe_rope_cache_cos_sin(c, pp[j], cs, cs + D / 2));
        put(r, cs, (size_t)D * 4);
      }
    }
    fill_f32(k, nk, 30);
    RUN_OK(r, pe_rope_shift_k(tab, &tk, deltas, pool));
    put(r, k, nk * 4);
    RUN_OK(r, pe_rope_rerotate_k(fly, yarn, &tk, big, pool));
    put(r, k, nk * 4);
    fill_f32(q, nq, 40), fill_f32(k, nk, 41);
    memset(kc, 0, (size_t)4 * HK * 8 * D * 4);
    RUN_OK(r, pe_apply_rope_qk_store(fly, &tq, &tk, &tkc, slots, big, 0, pool));
    put(r, q, nq * 4), put(r, kc, (size_t)4 * HK * 8 * D * 4);
    {
      /* QK-norm + RoPE with k into a Q8_0 cache and v into an fp8 one: the
       * quantizing sink's float row is the deepest stack use of all */
      const size_t qrow = (size_t)D / 32 * 34, nslot = (size_t)4 * HK * 8;
      unsigned char *kq = calloc(nslot, qrow), *vq = calloc(nslot, (size_t)D);
      float *v = malloc(nk * 4), *w = malloc((size_t)D * 4);
      if (kq && vq && v && w) {
        for (int i = 0; i < D; i++) w[i] = 1.0f + (float)i / (float)D;
        fill_f32(v, nk, 42), fill_f32(q, nq, 43), fill_f32(k, nk, 44);
        pe_tensor tkq = {kq, PE_F32, {4, HK, 8, D},
                         {(int64_t)(HK * 8 * qrow), (int64_t)(8 * qrow), (int64_t)qrow, 1}};
        pe_tensor tvq = {vq, PE_F32, {4, HK, 8, D}, {HK * 8 * D, 8 * D, D, 1}};
        pe_tensor tv = dense(v, B, HK, T, D);
        static const float vscale = 0.05f;
        pe_kv_cache kv;
        pe_kv_cache_init(&kv);
        kv.k = &tkq, kv.v = &tvq, kv.k_quant = PE_KV_Q8_0, kv.v_quant = PE_KV_FP8_E4M3;
        kv.v_scale = &vscale;
        pe_qk_norm nrm;
        pe_qk_norm_init(&nrm);
        nrm.kind = PE_QK_NORM_RMS, nrm.q_weight = w, nrm.k_weight = w;
        RUN_OK(r, pe_qk_norm_rope_store(tab, &nrm, &tq, &tk, &tv, &kv, slots, pos, 0, pool));
        put(r, q, nq * 4), put(r, kq, nslot * qrow), put(r, vq, nslot * (size_t)D);
      } else if (!r->why[0]) {
        snprintf(r->why, sizeof r->why, "malloc failed");
      }
      free(kq), free(vq), free(v), free(w);
    }
    RUN_OK(r, pe_apply_mrope_qk(tab, &tq, &tk, mpos, sec, 0, pool));
    RUN_OK(r, pe_apply_mrope_qk(fly, &tq, &tk, mpos, sec, PE_ROPE_MROPE_INTERLEAVED, pool));
    put(r, q, nq * 4), put(r, k, nk * 4);
    const int32_t idx[B] = {1, 0};
    RUN_OK(r, pe_apply_rope_qk_multi((const pe_rope_cache *const *)caches, 2, idx, &tq, &tk, pos, 0,
                                     pool));
    put(r, q, nq * 4), put(r, k, nk * 4);
    /* the encodings, with d_model / k_len = D */
    float *scores = malloc((size_t)B * HQ * T * D * 4), *x = malloc((size_t)B * T * D * 4);
    float *table = malloc((size_t)64 * D * 4), *t5 = malloc((size_t)32 * HQ * 4);
    if (scores && x && table && t5) {
      pe_tensor s = dense(scores, B, HQ, T, D), tx = dense(x, B, 1, T, D), tt = dense(table, 1, 1, 64, D);
      fill_f32(scores, (size_t)B * HQ * T * D, 50);
      fill_f32(t5, (size_t)32 * HQ, 51);
      RUN_OK(r, pe_alibi_add_bias(&s, NULL, NULL, PE_MASK_CAUSAL, pool));
      RUN_OK(r, pe_t5_add_bias(&s, t5, 1, 32, 128, pos, 0, pool));
      put(r, scores, (size_t)B * HQ * T * D * 4);
      fill_f32(x, (size_t)B * T * D, 52);
      fill_f32(table, (size_t)64 * D, 53);
      RUN_OK(r, pe_sinusoidal_add(&tx, pos, 10000.0, 0, pool));
      RUN_OK(r, pe_sinusoidal_add(&tx, NULL, 10000.0, PE_SINUSOIDAL_CONCAT, pool));
      RUN_OK(r, pe_learned_add(&tx, &tt, pos, pool));
      put(r, x, (size_t)B * T * D * 4);
      RUN_OK(r, pe_sinusoidal_table(64, D, 10000.0, 0, table));
      put(r, table, (size_t)64 * D * 4);
    } else if (!r->why[0]) {
      snprintf(r->why, sizeof r->why, "malloc failed");
    }
    free(scores), free(x), free(table), free(t5);
    pe_rope_cache_destroy(tab), pe_rope_cache_destroy(fly), pe_rope_cache_destroy(yarn);
    free(q), free(k), free(kc), free(cs);
  }
}

static void *small_stack_main(void *arg) {
  run_everything(arg);
  return NULL;
}

/* In the forked child: 0 when equal, 1 (with a message) otherwise; a stack
 * overflow ends it with SIGSEGV. No cmocka assertion here. */
static int child_compare(int with_pool) {
  enum { CAP = 1 << 23 };
  run main_run = {0}, small = {0};
  main_run.cap = small.cap = CAP;
  main_run.out = malloc(CAP);
  small.out = malloc(CAP);
  if (!main_run.out || !small.out) return 1;
  pe_threadpool *pool = NULL;
  if (with_pool && pe_threadpool_create(2, &pool) != PE_OK) {
    printf("pe_threadpool_create(2): %s\n", pe_last_error());
    return 1;
  }
  main_run.pool = small.pool = pool;
  run_everything(&main_run);
  if (main_run.why[0]) {
    printf("main thread: %s\n", main_run.why);
    return 1;
  }
  pthread_attr_t attr;
  pthread_t th;
  /* The smallest stack the platform allows, if it is larger (aarch64 glibc:
   * PTHREAD_STACK_MIN is 128 KiB, for its 64 KiB pages). */
  long min = sysconf(_SC_THREAD_STACK_MIN);
  size_t size = min > PE_SMALL_STACK ? (size_t)min : PE_SMALL_STACK;
  if (pthread_attr_init(&attr) || pthread_attr_setstacksize(&attr, size)) {
    printf("pthread_attr_setstacksize(%zu) failed\n", size);
    return 1;
  }
  printf("# running every entry point on a %zu KiB stack, %s\n", size / 1024,
         with_pool ? "with a pool of 2" : "without a pool");
  fflush(stdout);
  if (pthread_create(&th, &attr, small_stack_main, &small)) {
    printf("pthread_create failed\n");
    return 1;
  }
  pthread_join(th, NULL);
  pthread_attr_destroy(&attr);
  pe_threadpool_destroy(pool);
  if (small.why[0]) {
    printf("%d KiB-stack thread: %s\n", PE_SMALL_STACK / 1024, small.why);
    return 1;
  }
  if (small.used != main_run.used || memcmp(small.out, main_run.out, main_run.used)) {
    size_t at = 0;
    while (at < small.used && at < main_run.used && small.out[at] == main_run.out[at]) at++;
    printf("%d KiB-stack thread: output differs from the main thread's at byte %zu of %zu\n",
           PE_SMALL_STACK / 1024, at, main_run.used);
    return 1;
  }
  printf("# %zu bytes of output equal to the main thread's\n", main_run.used);
  free(main_run.out);
  free(small.out);
  return 0;
}

static void small_stack(int with_pool) {
  fflush(stdout);
  fflush(stderr);
#if defined(__aarch64__)
  /* Under qemu-user (how this build is tested) a forked child that starts
   * threads trips qemu's own assertions: run in this process. A crash then
   * fails the whole program, which ctest reports just the same. */
  if (child_compare(with_pool)) fail_msg("the small-stack run (%s) failed (message above)",
                                         with_pool ? "pool of 2" : "no pool");
  return;
#endif
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int rc = child_compare(with_pool);
    fflush(stdout);
    _exit(rc);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (WIFSIGNALED(status))
    fail_msg("the %d KiB-stack thread (%s) was killed by signal %d: the entry points need more "
             "stack than that",
             PE_SMALL_STACK / 1024, with_pool ? "pool of 2" : "no pool", WTERMSIG(status));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("the %d KiB-stack run (%s) failed (exit %d, message above)", PE_SMALL_STACK / 1024,
             with_pool ? "pool of 2" : "no pool", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

static void test_small_stack_without_pool(void **state) {
  (void)state;
  small_stack(0);
}
static void test_small_stack_with_pool(void **state) {
  (void)state;
  small_stack(1);
}

static int setup(void **state) {
  (void)state;
  /* even the small shapes here are split across the pool's threads */
  setenv("PE_POOL_MIN_BYTES", "0", 1);
  return pe_threadpool_create(2, &pool2) == PE_OK ? 0 : -1;
}
static int teardown(void **state) {
  (void)state;
  pe_threadpool_destroy(pool2);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_partial_qk_overlap_refused),
      cmocka_unit_test(test_packed_qkv_views_accepted),
      cmocka_unit_test(test_store_cache_overlap_refused),
      cmocka_unit_test(test_learned_table_overlap_refused),
      cmocka_unit_test(test_flag_values_are_distinct),
      cmocka_unit_test(test_foreign_flags_refused),
      cmocka_unit_test(test_zero_sizes_are_empty_calls),
      cmocka_unit_test(test_empty_calls_still_checked),
      cmocka_unit_test(test_small_stack_without_pool),
      cmocka_unit_test(test_small_stack_with_pool),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
