/* validate.c - argument checks shared by every entry point. Each check either
 * passes or returns a status with a sentence naming the function, the
 * argument and the values; none of them writes caller memory. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

size_t pe__dtype_size(pe_dtype d) {
  switch (d) {
    case PE_F32: return 4;
    case PE_F16:
    case PE_BF16: return 2;
  }
  return 0;
}

const char *pe__dtype_name(pe_dtype d) {
  switch (d) {
    case PE_F32: return "f32";
    case PE_F16: return "f16";
    case PE_BF16: return "bf16";
  }
  return "unknown";
}

static const char *const dim_names[4] = {"0", "1", "2", "3"};

pe_status pe__check_tensor(const char *fn, const char *name, const pe_tensor *t, int writable) {
  if (!t) return pe__fail(PE_ERR_NULL_POINTER, "%s: %s is NULL", fn, name);
  if (!t->data) return pe__fail(PE_ERR_NULL_POINTER, "%s: %s->data is NULL", fn, name);
  size_t es = pe__dtype_size(t->dtype);
  if (!es)
    return pe__fail(PE_ERR_DTYPE, "%s: %s->dtype %d is not PE_F32, PE_F16 or PE_BF16", fn, name,
                    (int)t->dtype);
  if ((uintptr_t)t->data % es)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: %s->data %p is not aligned to its %zu-byte elements", fn, name, t->data, es);
  for (int i = 0; i < 4; i++)
    if (t->shape[i] <= 0)
      return pe__fail(PE_ERR_SHAPE, "%s: %s->shape[%s] = %" PRId64 " must be > 0", fn, name,
                      dim_names[i], t->shape[i]);
  if (t->stride[3] != 1)
    return pe__fail(PE_ERR_SHAPE, "%s: %s->stride[3] = %" PRId64 " must be 1 (unit inner stride)",
                    fn, name, t->stride[3]);
  /* Element count and byte extent must be representable. */
  int64_t count = 1, lo = 0, hi = t->shape[3] - 1;
  for (int i = 0; i < 4; i++) {
    if (__builtin_mul_overflow(count, t->shape[i], &count))
      return pe__fail(PE_ERR_OVERFLOW, "%s: %s element count overflows int64", fn, name);
  }
  for (int i = 0; i < 3; i++) {
    int64_t s = t->stride[i], span;
    if (s == INT64_MIN || __builtin_mul_overflow(t->shape[i] - 1, s < 0 ? -s : s, &span))
      return pe__fail(PE_ERR_OVERFLOW,
                      "%s: %s extent (shape[%d] - 1) * stride[%d] = (%" PRId64 " - 1) * %" PRId64
                      " overflows int64",
                      fn, name, i, i, t->shape[i], s);
    if (s < 0 ? __builtin_sub_overflow(lo, span, &lo) : __builtin_add_overflow(hi, span, &hi))
      return pe__fail(PE_ERR_OVERFLOW, "%s: %s extent overflows int64", fn, name);
  }
  int64_t blo, bhi;
  if (hi == INT64_MAX || __builtin_mul_overflow(lo, (int64_t)es, &blo) ||
      __builtin_mul_overflow(hi + 1, (int64_t)es, &bhi))
    return pe__fail(PE_ERR_OVERFLOW, "%s: %s byte extent overflows int64", fn, name);
  uintptr_t base = (uintptr_t)t->data, end;
  if ((uintptr_t)(-blo) > base || __builtin_add_overflow(base, (uintptr_t)bhi, &end))
    return pe__fail(PE_ERR_OVERFLOW, "%s: %s spans past the address space (strides too large)", fn,
                    name);
  if (writable) {
    /* No two indices may name one element: sorted by |stride|, each dimension
     * must step over everything the inner ones span. Sufficient, and true of
     * every layout produced by slicing a dense tensor (incl. packed QKV). */
    int order[3] = {0, 1, 2};
    int64_t mag[3];
    for (int i = 0; i < 3; i++) mag[i] = t->stride[i] < 0 ? -t->stride[i] : t->stride[i];
    for (int a = 0; a < 3; a++)
      for (int b = a + 1; b < 3; b++)
        if (mag[order[b]] < mag[order[a]]) {
          int tmp = order[a];
          order[a] = order[b];
          order[b] = tmp;
        }
    int64_t covered = t->shape[3];
    for (int k = 0; k < 3; k++) {
      int d = order[k];
      if (t->shape[d] == 1) continue;
      if (mag[d] < covered)
        return pe__fail(PE_ERR_SHAPE,
                        "%s: %s is written in place but its strides alias elements: |stride[%d]| = "
                        "%" PRId64 " < %" PRId64 " elements spanned by the inner dimensions",
                        fn, name, d, mag[d], covered);
      covered += (t->shape[d] - 1) * mag[d];
    }
  }
  return PE_OK;
}

pe_status pe__check_positions(const char *fn, const char *name, const int64_t *pos, int64_t batch,
                              int64_t tokens, int64_t limit, const char *limit_what) {
  if (!pos) return PE_OK;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t t = 0; t < tokens; t++) {
      int64_t p = pos[b * tokens + t];
      if (p < 0)
        return pe__fail(PE_ERR_POSITION_OUT_OF_RANGE,
                        "%s: %s %" PRId64 " at [batch %" PRId64 ", token %" PRId64 "] is negative",
                        fn, name, p, b, t);
      if (limit > 0 && p >= limit)
        return pe__fail(PE_ERR_POSITION_OUT_OF_RANGE,
                        "%s: %s %" PRId64 " at [batch %" PRId64 ", token %" PRId64 "] >= %s %" PRId64,
                        fn, name, p, b, t, limit_what, limit);
      if (limit <= 0 && p >= PE_MAX_POSITION)
        return pe__fail(PE_ERR_POSITION_OUT_OF_RANGE,
                        "%s: %s %" PRId64 " at [batch %" PRId64 ", token %" PRId64
                        "] >= 2^53 (not exact in double)",
                        fn, name, p, b, t);
    }
  return PE_OK;
}

pe_status pe__check_deltas(const char *fn, const int64_t *d, int64_t batch, int64_t tokens) {
  if (!d) return pe__fail(PE_ERR_NULL_POINTER, "%s: deltas is NULL", fn);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t t = 0; t < tokens; t++) {
      int64_t v = d[b * tokens + t];
      if (v <= -PE_MAX_POSITION || v >= PE_MAX_POSITION)
        return pe__fail(PE_ERR_POSITION_OUT_OF_RANGE,
                        "%s: delta %" PRId64 " at [batch %" PRId64 ", token %" PRId64
                        "] has magnitude >= 2^53",
                        fn, v, b, t);
    }
  return PE_OK;
}

pe_status pe__check_flags(const char *fn, uint32_t flags, uint32_t known) {
  if (flags & ~known)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: flags 0x%x has unknown bits 0x%x", fn,
                    (unsigned)flags, (unsigned)(flags & ~known));
  return PE_OK;
}

int pe__same_storage(const pe_tensor *a, const pe_tensor *b) {
  return a && b && a->data == b->data;
}

pe_status pe__copy_sized(const char *fn, void *dst, size_t known_size, const void *src,
                         size_t caller_size) {
  if (caller_size > known_size) {
    const unsigned char *tail = (const unsigned char *)src + known_size;
    for (size_t i = 0; i < caller_size - known_size; i++)
      if (tail[i])
        return pe__fail(PE_ERR_INVALID_ARGUMENT,
                        "%s: struct_size %zu is larger than this library's %zu and byte %zu of the "
                        "unknown tail is not zero (a newer field this version does not support)",
                        fn, caller_size, known_size, known_size + i);
    caller_size = known_size;
  }
  memcpy(dst, src, caller_size);
  return PE_OK;
}
