/* alloc.c - the library's only allocator, with a failure-injection hook for
 * tests (every create call must survive any allocation failing). Never used
 * on apply/add hot paths. */
#include <stdatomic.h>
#include <stdlib.h>

#include "base/internal.h"

static _Atomic long fail_countdown; /* 0: off; n: the n-th allocation fails */
static _Atomic long alloc_count;

static int inject_failure(void) {
  atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
  long n = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
  if (n <= 0) return 0;
  n = atomic_fetch_sub_explicit(&fail_countdown, 1, memory_order_relaxed);
  return n == 1;
}

long pe__alloc_fail_after(long n) {
  atomic_store(&fail_countdown, n < 0 ? 0 : n);
  return atomic_exchange(&alloc_count, 0);
}

void *pe__malloc(size_t n) {
  if (inject_failure()) return NULL;
  return malloc(n ? n : 1);
}

void *pe__aligned_alloc(size_t n) {
  if (inject_failure()) return NULL;
  size_t rounded = (n + 63) & ~(size_t)63;
  if (rounded < n) return NULL;
  return aligned_alloc(64, rounded ? rounded : 64);
}

void pe__free(void *p) { free(p); }
