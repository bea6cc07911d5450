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

/* ---- validation (validate.c) ---- */
PE_HIDDEN size_t pe__dtype_size(pe_dtype d);
PE_HIDDEN const char *pe__dtype_name(pe_dtype d);
/* Check a tensor description: non-NULL, known dtype, shapes > 0, stride[3] == 1,
 * byte extent representable; if writable, no two indices alias one element.
 * fn and name are used in the error sentence. */
PE_HIDDEN pe_status pe__check_tensor(const char *fn, const char *name, const pe_tensor *t,
                                     int writable);
/* Fail unless the three outer dimensions of t step over disjoint rows of row
 * units (elements, or bytes for a quantized cache); strides in the same units.
 * Call only once the extent is known to be representable. */
PE_HIDDEN pe_status pe__check_no_alias(const char *fn, const char *name, const pe_tensor *t,
                                       int64_t row, const char *unit);
/* The stride of dimension d as kernels may use it: 0 for a size-1 dimension,
 * whose stride is never stepped and so may be anything (NumPy and PyTorch
 * produce arbitrary ones), even a value that overflows when scaled to bytes. */
static inline int64_t pe__stride(const pe_tensor *t, int d) {
  return t->shape[d] == 1 ? 0 : t->stride[d];
}
/* Check a [batch][tokens] positions array: every entry in [0, limit) (limit
 * <= 0: in [0, PE_MAX_POSITION)). limit_what names the limit in messages. */
PE_HIDDEN pe_status pe__check_positions(const char *fn, const char *name, const int64_t *pos,
                                        int64_t batch, int64_t tokens, int64_t limit,
                                        const char *limit_what);
/* Check a [batch][tokens] delta array: |delta| < PE_MAX_POSITION. */
PE_HIDDEN pe_status pe__check_deltas(const char *fn, const int64_t *d, int64_t batch,
                                     int64_t tokens);
/* Reject flag bits outside `known`. */
PE_HIDDEN pe_status pe__check_flags(const char *fn, uint32_t flags, uint32_t known);
/* True when a tensor has no elements (a zero batch, head, token count). */
PE_HIDDEN int pe__tensor_empty(const pe_tensor *t);
/* True when two validated tensors may share an element: decided exactly for
 * tensors of one dtype on one element grid (so disjoint interleaved views of
 * a packed QKV buffer are told apart from partly overlapping ones), and by
 * their byte ranges otherwise. Empty tensors overlap nothing. */
PE_HIDDEN int pe__tensors_overlap(const pe_tensor *a, const pe_tensor *b);

/* ---- size-prefixed structs (validate.c) ---- */
/* Copy a caller's struct of caller_size bytes into dst (known_size bytes,
 * already holding the defaults): a smaller caller keeps the defaults for the
 * tail, a larger one must have an all-zero unknown tail. */
PE_HIDDEN pe_status pe__copy_sized(const char *fn, void *dst, size_t known_size,
                                   const void *src, size_t caller_size);

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
