/* threadpool.c - work splitting. The hwloc-placed pool comes with the threads
 * issue; until then every call runs on the calling thread. */
#include "internal.h"

struct pe_threadpool {
  int32_t n_threads;
};

PE_API pe_status pe_threadpool_create(int32_t n_threads, pe_threadpool **out) {
  (void)n_threads;
  if (!out) return pe__fail(PE_ERR_NULL_POINTER, "pe_threadpool_create: out is NULL");
  return pe__fail(PE_ERR_UNSUPPORTED, "pe_threadpool_create: thread pools are not built yet");
}

PE_API void pe_threadpool_destroy(pe_threadpool *p) { (void)p; }

PE_API int32_t pe_threadpool_size(const pe_threadpool *p) { return p ? p->n_threads : 1; }

pe_status pe__pool_acquire(const char *fn, pe_threadpool *pool) {
  (void)fn;
  (void)pool;
  return PE_OK;
}

void pe__pool_run(pe_threadpool *pool, int64_t n, int64_t grain, int64_t bytes_per_unit,
                  pe_range_fn fn, void *ctx) {
  (void)pool;
  (void)grain;
  (void)bytes_per_unit;
  if (n > 0) fn(ctx, 0, n);
}
