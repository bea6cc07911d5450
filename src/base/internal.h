/* internal.h - declarations shared by the library's portable sources.
 * Nothing here is exported: only pe_* functions marked PE_API in posenc.h are. */
#ifndef PE_INTERNAL_H
#define PE_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "posenc.h"

#define PE_HIDDEN __attribute__((visibility("hidden")))

/* The largest head_dim (and d_model for per-row scratch) the library accepts.
 * On-the-fly cos/sin rows live on the stack, never on the heap, so a bound is
 * needed; 16384 covers every published model (the largest head_dim is 512). */
#define PE_MAX_HEAD_DIM 16384
/* Positions must be exactly representable as double for the angle. */
#define PE_MAX_POSITION (INT64_C(1) << 53)

/* ---- errors (error.c) ---- */
/* Format the thread-local last error and return s. */
PE_HIDDEN pe_status pe__fail(pe_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- allocation (alloc.c): every library allocation goes through here so
 * tests can inject failures (PE_TESTING builds). ---- */
PE_HIDDEN void *pe__malloc(size_t n);
PE_HIDDEN void *pe__aligned_alloc(size_t n); /* 64-byte aligned, n rounded up */
PE_HIDDEN void pe__free(void *p);
/* Test hook: fail the n-th allocation from now (1 = the next); 0 disables.
 * Returns the number of allocations counted since the last call. */
PE_HIDDEN long pe__alloc_fail_after(long n);

/* ---- tensors ---- */
/* Bytes per element of a dtype (0 for a value that is not a pe_dtype). */
static inline size_t pe__dtype_size(pe_dtype d) {
  return d == PE_F32 ? 4 : d == PE_F16 || d == PE_BF16 ? 2 : 0;
}
/* The stride of dimension d as kernels may use it: 0 for a size-1 dimension,
 * whose stride is never stepped and so may be anything (NumPy and PyTorch
 * produce arbitrary ones), even a value that overflows when scaled to bytes. */
static inline int64_t pe__stride(const pe_tensor *t, int d) {
  return t->shape[d] == 1 ? 0 : t->stride[d];
}

/* ---- threading (threadpool.c) ---- */
/* Run fn(ctx, begin, end) over [0, n) split into chunks of at least `grain`
 * units. pool NULL or a call too small: on the calling thread. Returns
 * PE_ERR_INVALID_ARGUMENT (nothing run) if the pool is busy with another call.
 * Use pe__pool_acquire first so validation errors and busy pools are reported
 * before anything is written. */
typedef void (*pe_range_fn)(void *ctx, int64_t begin, int64_t end);
PE_HIDDEN pe_status pe__pool_acquire(const char *fn, pe_threadpool *pool);
/* Runs the range and releases a pool acquired with pe__pool_acquire. */
PE_HIDDEN void pe__pool_run(pe_threadpool *pool, int64_t n, int64_t grain,
                            int64_t bytes_per_unit, pe_range_fn fn, void *ctx);

#endif
