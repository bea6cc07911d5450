/* isa_compare.h - the one harness of the tests that hold the SIMD kernel
 * paths to the scalar one: a computation runs under "scalar" (the
 * reference), then under every SIMD path of test_env.h's list that this
 * build and CPU run, and each result must equal scalar's bit for bit.
 * Include after <cmocka.h> and "posenc.h".
 *
 * A path this build or CPU lacks (pe_force_isa: PE_ERR_UNSUPPORTED), or a
 * name this library does not know yet (PE_ERR_INVALID_ARGUMENT), is not
 * compared, and the test log says so (a cmocka message, once per path and
 * program). A test whose whole point is the comparison starts with
 * `if (!pe_test_any_simd_path()) skip();`: a machine with no SIMD path
 * reports a skip, never a pass. Any other refusal fails the test. The path
 * in use when a helper is called is in use again when it returns, and when
 * a comparison fails. */
#ifndef PE_ISA_COMPARE_H
#define PE_ISA_COMPARE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "posenc.h"
#include "test_env.h"

/* Force `path`: 1 if it runs now, 0 if this build or CPU lacks it (said in
 * the log the first time). */
static inline int pe_test_use_path(const char *path) {
  static unsigned reported; /* bit i: pe_test_simd_path(i) said to be missing */
  pe_status st = pe_force_isa(path);
  if (st == PE_OK) return 1;
  if (st != PE_ERR_UNSUPPORTED && st != PE_ERR_INVALID_ARGUMENT)
    fail_msg("pe_force_isa(\"%s\") returned %s: %s", path, pe_status_string(st), pe_last_error());
  unsigned bit = 0;
  for (size_t i = 0; i < PE_TEST_N_SIMD_PATHS; i++)
    if (!strcmp(path, pe_test_simd_path(i))) bit = 1u << i;
  if (!(reported & bit) || !bit)
    print_message("# path %s: not compared, %s (%s)\n", path,
                  st == PE_ERR_UNSUPPORTED ? "this build or CPU lacks it"
                                           : "this library does not know the name",
                  pe_last_error());
  reported |= bit;
  return 0;
}

/* A computation under test: run on the path in use (and with `pool`, or
 * NULL), its whole result written to out, `bytes` long as given to the
 * helper. Inputs must come from ctx (or be rebuilt from the same seed), not
 * from the path. */
typedef void (*pe_test_run_fn)(void *ctx, pe_threadpool *pool, void *out);

/* Fails the test at the first byte where got differs from want, after
 * forcing `restore` again (when not NULL). */
static inline void pe_test_same_bytes(const char *what, const char *ref_name, const char *got_name,
                                      const void *want, const void *got, size_t bytes,
                                      const char *restore) {
  const unsigned char *w = want, *g = got;
  if (!memcmp(w, g, bytes)) return;
  size_t at = 0, n = 0;
  while (w[at] == g[at]) at++;
  for (size_t i = at; i < bytes; i++) n += w[i] != g[i];
  /* the aligned 4 bytes around it: one float32 or two 16-bit elements */
  size_t w0 = at & ~(size_t)3;
  uint32_t ww = 0, gw = 0;
  memcpy(&ww, w + w0, bytes - w0 < 4 ? bytes - w0 : 4);
  memcpy(&gw, g + w0, bytes - w0 < 4 ? bytes - w0 : 4);
  if (restore) pe_test_restore_path(restore);
  fail_msg("%s: %s differs from %s at byte %zu of %zu (%zu differing bytes; the 4 bytes at %zu: "
           "%s %#010x, %s %#010x)",
           what, got_name, ref_name, at, bytes, n, w0, ref_name, (unsigned)ww, got_name,
           (unsigned)gw);
}

/* fn under scalar, then under every SIMD path this build and CPU run, each
 * result equal to scalar's bit for bit; `what` names the case in a failure.
 * Returns the number of SIMD paths compared. */
static inline size_t pe_isa_compare(const char *what, size_t bytes, pe_test_run_fn fn, void *ctx) {
  static unsigned said; /* bit i: pe_test_simd_path(i) said to be compared */
  char was[32];
  snprintf(was, sizeof was, "%s", pe_isa_name());
  unsigned char *ref = malloc(bytes ? bytes : 1), *got = malloc(bytes ? bytes : 1);
  assert_non_null(ref);
  assert_non_null(got);
  assert_int_equal(pe_force_isa("scalar"), PE_OK);
  fn(ctx, NULL, ref);
  size_t compared = 0;
  for (size_t i = 0; i < PE_TEST_N_SIMD_PATHS; i++) {
    const char *path = pe_test_simd_path(i);
    if (!pe_test_use_path(path)) continue;
    fn(ctx, NULL, got);
    pe_test_same_bytes(what, "scalar", path, ref, got, bytes, was);
    if (!(said & 1u << i)) print_message("# path %s: compared with scalar\n", path);
    said |= 1u << i;
    compared++;
  }
  pe_test_restore_path(was);
  free(ref);
  free(got);
  return compared;
}

/* fn without a pool, then with `pool`, on the path in use: the same bytes
 * (a pool cuts the work differently; the result must not change). */
static inline void pe_pool_compare(const char *what, size_t bytes, pe_test_run_fn fn, void *ctx,
                                   pe_threadpool *pool) {
  unsigned char *ref = malloc(bytes ? bytes : 1), *got = malloc(bytes ? bytes : 1);
  assert_non_null(ref);
  assert_non_null(got);
  fn(ctx, NULL, ref);
  fn(ctx, pool, got);
  char name[48];
  snprintf(name, sizeof name, "a pool of %d threads", (int)pe_threadpool_size(pool));
  pe_test_same_bytes(what, "one thread", name, ref, got, bytes, NULL);
  free(ref);
  free(got);
}

/* Every pool size against one thread on the path in use, as one
 * computation for pe_isa_compare: fn without a pool, then with each of
 * pools[0..n_pools), all the same bytes (else the test fails), the result in
 * out. Compared on every path, every path and pool size then equals scalar
 * without a pool. */
typedef struct pe_pools_run {
  pe_test_run_fn fn;
  void *ctx;
  size_t bytes;
  pe_threadpool *const *pools;
  int n_pools;
} pe_pools_run;

static inline void pe_on_every_pool(void *ctx, pe_threadpool *unused, void *out) {
  (void)unused;
  const pe_pools_run *r = ctx;
  for (int i = 0; i < r->n_pools; i++) pe_pool_compare(pe_isa_name(), r->bytes, r->fn, r->ctx, r->pools[i]);
  r->fn(r->ctx, NULL, out);
}

/* fn(ctx, path) with each path in force: scalar, then every SIMD path this
 * build and CPU run. For checks each path must pass on its own (not against
 * scalar). Returns the number of paths run, scalar included. */
static inline size_t pe_on_every_path(void (*fn)(void *ctx, const char *path), void *ctx) {
  char was[32];
  snprintf(was, sizeof was, "%s", pe_isa_name());
  assert_int_equal(pe_force_isa("scalar"), PE_OK);
  fn(ctx, "scalar");
  size_t n = 1;
  for (size_t i = 0; i < PE_TEST_N_SIMD_PATHS; i++)
    if (pe_test_use_path(pe_test_simd_path(i))) fn(ctx, pe_test_simd_path(i)), n++;
  pe_test_restore_path(was);
  return n;
}

#endif /* PE_ISA_COMPARE_H */
