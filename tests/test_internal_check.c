/* test_internal_check.c - the validation layer's element-exact overlap test
 * (pe__tensors_overlap, src/check/tensor.c) against a brute-force one.
 *
 * Every entry point that writes refuses two tensors sharing an element, and
 * accepts views of one buffer that interleave without sharing one (the rows
 * of a packed QKV projection). The library decides it by a lattice search
 * over the strides; this test enumerates every element of both tensors and
 * compares: random small views of one buffer (any of the four dimensions
 * longer than one, strides positive, negative, zero on a broadcast
 * dimension, of either sign order), and the cases where only one dimension
 * of one tensor makes the overlap (b before a, a before b, by the outer
 * dimension of either). Views on one element grid must be answered exactly;
 * views off it (elements of different sizes, or a byte offset that is not a
 * multiple of the element) may be answered "overlap" whenever their byte
 * ranges meet, never "no overlap" when an element is shared. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/internal.h"
#include "check/check.h"

#define TEST_RNG_SEED 0x243f6a8885a308d3ull
#include "test_util.h"

static int64_t rnd_in(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

enum { BUF = 1 << 14 };
static unsigned char buf[BUF];

/* Marks the bytes of every element of t in mark (offsets from buf). */
static void mark_bytes(const pe_tensor *t, unsigned char *mark) {
  const int64_t es = (int64_t)pe__dtype_size(t->dtype);
  for (int64_t i0 = 0; i0 < t->shape[0]; i0++)
    for (int64_t i1 = 0; i1 < t->shape[1]; i1++)
      for (int64_t i2 = 0; i2 < t->shape[2]; i2++)
        for (int64_t i3 = 0; i3 < t->shape[3]; i3++) {
          int64_t e = i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] + i3;
          const unsigned char *p = (const unsigned char *)t->data + e * es;
          assert_true(p >= buf && p + es <= buf + BUF);
          memset(mark + (p - buf), 1, (size_t)es);
        }
}

/* Do a and b share a byte? (On one element grid: an element.) */
static int brute_overlap(const pe_tensor *a, const pe_tensor *b) {
  static unsigned char ma[BUF], mb[BUF];
  memset(ma, 0, sizeof ma);
  memset(mb, 0, sizeof mb);
  mark_bytes(a, ma);
  mark_bytes(b, mb);
  for (int i = 0; i < BUF; i++)
    if (ma[i] && mb[i]) return 1;
  return 0;
}

/* A random view: shape 1..4 per dimension, stride[3] 1, the others in
 * [-span, span] elements (0 only on a dimension of one, or as a broadcast
 * when bcast), placed at a random element offset inside buf. */
static pe_tensor random_view(pe_dtype dt, int64_t span, int bcast, int64_t byte_skew) {
  pe_tensor t = {.dtype = dt};
  t.shape[3] = rnd_in(1, 4);
  t.stride[3] = 1;
  for (int d = 0; d < 3; d++) {
    t.shape[d] = rnd_in(1, 4);
    int64_t s = rnd_in(-span, span);
    if (s == 0 && !bcast) s = t.shape[3] + rnd_in(0, 3);
    t.stride[d] = s;
  }
  const int64_t es = (int64_t)pe__dtype_size(dt);
  int64_t lo = 0, hi = t.shape[3] - 1;
  for (int d = 0; d < 3; d++) {
    int64_t ext = (t.shape[d] - 1) * t.stride[d];
    if (ext < 0) lo += ext;
    else hi += ext;
  }
  /* the first element at least -lo elements in, the last inside buf */
  int64_t room = BUF / es - (hi - lo) - 2;
  assert_true(room > 0);
  int64_t at = -lo + rnd_in(0, room < 96 ? room : 96);
  t.data = buf + at * es + byte_skew;
  return t;
}

static void check_pair(const pe_tensor *a, const pe_tensor *b, int exact, long *hits) {
  int want = brute_overlap(a, b), got = pe__tensors_overlap(a, b);
  if (exact ? got != want : (want && !got)) {
    fail_msg("overlap %d, expected %d: a at +%td shape {%lld,%lld,%lld,%lld} stride "
             "{%lld,%lld,%lld}, b at +%td shape {%lld,%lld,%lld,%lld} stride {%lld,%lld,%lld}",
             got, want, (const unsigned char *)a->data - buf, (long long)a->shape[0],
             (long long)a->shape[1], (long long)a->shape[2], (long long)a->shape[3],
             (long long)a->stride[0], (long long)a->stride[1], (long long)a->stride[2],
             (const unsigned char *)b->data - buf, (long long)b->shape[0], (long long)b->shape[1],
             (long long)b->shape[2], (long long)b->shape[3], (long long)b->stride[0],
             (long long)b->stride[1], (long long)b->stride[2]);
  }
  *hits += want;
  /* symmetric */
  assert_int_equal(pe__tensors_overlap(b, a) != 0, got != 0);
}

/* Random views of one element grid: the answer is exact. */
static void test_random_views_exact(void **state) {
  (void)state;
  long hits = 0, n = 0;
  for (int i = 0; i < 40000; i++, n++) {
    const pe_dtype dt = (pe_dtype)(i % 3 == 0 ? PE_F32 : i % 3 == 1 ? PE_F16 : PE_BF16);
    const int64_t span = i % 2 ? 12 : 40;
    pe_tensor a = random_view(dt, span, i % 5 == 0, 0), b = random_view(dt, span, i % 7 == 0, 0);
    check_pair(&a, &b, 1, &hits);
  }
  /* both answers are common, so neither side is tested by luck */
  assert_true(hits > n / 20 && hits < n - n / 20);
  printf("# %ld pairs, %ld overlapping\n", n, hits);
}

/* Off the grid (f32 against a 16-bit dtype, or a byte offset of 1-3): a
 * shared byte is never missed. */
static void test_random_views_off_grid(void **state) {
  (void)state;
  long hits = 0;
  for (int i = 0; i < 20000; i++) {
    pe_tensor a = random_view(PE_F32, 16, 0, 0);
    pe_tensor b = i % 2 ? random_view(PE_BF16, 16, 0, 0) : random_view(PE_F32, 16, 0, rnd_in(1, 3));
    check_pair(&a, &b, 0, &hits);
  }
  assert_true(hits > 0);
}

/* Two rows of 8 elements with a gap of 8 between them, along one outer
 * dimension (shape 2 there, 1 elsewhere: stride 16), and the same view
 * k * 8 elements further on, k in [-3, 3]: the rows interleave with the
 * gaps for odd k and share a row for k = 0 and +-2 - for k = -2 only
 * through the earlier tensor's outer index 1 meeting the later one's 0,
 * with b before a. Each strides' sign order too. */
static void test_outer_dimension(void **state) {
  (void)state;
  long hits = 0;
  for (int dim = 0; dim < 3; dim++)
    for (int k = -3; k <= 3; k++)
      for (int neg = 0; neg < 4; neg++) {
        pe_tensor a = {.dtype = PE_F32, .shape = {1, 1, 1, 8}, .stride = {8, 8, 8, 1}};
        a.shape[dim] = 2;
        a.stride[dim] = 16;
        pe_tensor b = a;
        a.data = buf + 1024;
        b.data = buf + 1024 + k * 8 * 4;
        /* neg bit 0: a walked backwards, bit 1: b (the same elements) */
        if (neg & 1) a.data = (char *)a.data + 16 * 4, a.stride[dim] = -16;
        if (neg & 2) b.data = (char *)b.data + 16 * 4, b.stride[dim] = -16;
        const int want = k == 0 || k == 2 || k == -2;
        long before = hits;
        check_pair(&a, &b, 1, &hits);
        assert_int_equal(hits - before, want);
      }
  assert_int_equal(hits, 3 * 3 * 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_views_exact),
      cmocka_unit_test(test_random_views_off_grid),
      cmocka_unit_test(test_outer_dimension),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
