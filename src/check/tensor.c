/* tensor.c - the checks of tensors (shape, strides, extent, aliasing,
 * overlap between two), of flags and size-prefixed structs, and of a call's
 * q/k pair (check.h). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "check/check.h"

const char *pe__dtype_name(pe_dtype d) {
  switch (d) {
    case PE_F32: return "f32";
    case PE_F16: return "f16";
    case PE_BF16: return "bf16";
  }
  return "unknown";
}

static const char *const dim_names[4] = {"0", "1", "2", "3"};

/* No two indices of a written tensor may name one element (or byte, for a
 * quantized cache): sorted by |stride|, each dimension must step over
 * everything the inner ones span (row units, the innermost row's extent).
 * Sufficient, and true of every layout produced by slicing a dense tensor
 * (incl. packed QKV). The extent must already be known not to overflow. */
pe_status pe__check_no_alias(const char *fn, const char *name, const pe_tensor *t, int64_t row,
                             const char *unit) {
  /* The dimensions sorted by |stride| (compare-swaps (0,1), (0,2), (1,2))
   * in scalars: swapping through an index array on the stack chained
   * store-to-load forwards (Zen 4, a RoPE decode step of 32q/8kv x 128 f32:
   * 7 % -> 2 % of its profile samples, fastest of 100 calls 298-302 -> 294-299
   * ns). */
  int64_t m0 = t->stride[0] < 0 ? -t->stride[0] : t->stride[0];
  int64_t m1 = t->stride[1] < 0 ? -t->stride[1] : t->stride[1];
  int64_t m2 = t->stride[2] < 0 ? -t->stride[2] : t->stride[2];
  int d0 = 0, d1 = 1, d2 = 2;
#define CSWAP_(a, b)                                                                             \
  if (m##b < m##a) {                                                                             \
    int64_t tm = m##a;                                                                           \
    int td = d##a;                                                                               \
    m##a = m##b, d##a = d##b, m##b = tm, d##b = td;                                              \
  }
  CSWAP_(0, 1)
  CSWAP_(0, 2)
  CSWAP_(1, 2)
#undef CSWAP_
  const int order[3] = {d0, d1, d2};
  const int64_t mag[3] = {m0, m1, m2}; /* sorted: mag[k] is |stride[order[k]]| */
  int64_t covered = row;
  for (int k = 0; k < 3; k++) {
    int d = order[k];
    if (t->shape[d] == 1) continue;
    if (mag[k] < covered)
      return pe__fail(PE_ERR_SHAPE,
                      "%s: %s is written in place but its strides alias elements: |stride[%d]| = "
                      "%" PRId64 " < %" PRId64 " %s spanned by the inner dimensions",
                      fn, name, d, mag[k], covered, unit);
    covered += (t->shape[d] - 1) * mag[k];
  }
  return PE_OK;
}

pe_status pe__check_shape(const char *fn, const char *name, const pe_tensor *t) {
  for (int i = 0; i < 3; i++)
    if (t->shape[i] < 0)
      return pe__fail(PE_ERR_SHAPE, "%s: %s->shape[%s] = %" PRId64 " must be >= 0", fn, name,
                      dim_names[i], t->shape[i]);
  if (t->shape[3] <= 0)
    return pe__fail(PE_ERR_SHAPE, "%s: %s->shape[3] = %" PRId64 " must be > 0", fn, name,
                    t->shape[3]);
  if (t->stride[3] != 1)
    return pe__fail(PE_ERR_SHAPE, "%s: %s->stride[3] = %" PRId64 " must be 1 (unit inner stride)",
                    fn, name, t->stride[3]);
  return PE_OK;
}

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
  pe_status st = pe__check_shape(fn, name, t);
  if (st != PE_OK) return st;
  /* An empty tensor (a zero batch, head or token count) is valid and is
   * never dereferenced: its strides mean nothing. */
  if (!t->shape[0] || !t->shape[1] || !t->shape[2]) {
    if (t->shape[3] > INT64_MAX / (int64_t)es) /* one row must still be addressable */
      return pe__fail(PE_ERR_OVERFLOW, "%s: %s row of shape[3] = %" PRId64 " elements overflows int64 bytes",
                      fn, name, t->shape[3]);
    return PE_OK;
  }
  /* Element count and byte extent must be representable: [blo, bhi) the
   * bytes from data the tensor spans. */
  int64_t blo, bhi, ulo, uhi;
  if (pe__extent_small(t, t->shape[3], &ulo, &uhi)) {
    blo = ulo * (int64_t)es;
    bhi = uhi * (int64_t)es;
  } else {
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
    if (hi == INT64_MAX || __builtin_mul_overflow(lo, (int64_t)es, &blo) ||
        __builtin_mul_overflow(hi + 1, (int64_t)es, &bhi))
      return pe__fail(PE_ERR_OVERFLOW, "%s: %s byte extent overflows int64", fn, name);
  }
  uintptr_t base = (uintptr_t)t->data, end;
  if ((uintptr_t)(-blo) > base || __builtin_add_overflow(base, (uintptr_t)bhi, &end))
    return pe__fail(PE_ERR_OVERFLOW, "%s: %s spans past the address space (strides too large)", fn,
                    name);
  if (writable) return pe__check_no_alias(fn, name, t, t->shape[3], "elements");
  return PE_OK;
}

pe_status pe__check_flags(const char *fn, uint32_t flags, uint32_t known) {
  if (flags & ~known)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: flags 0x%x has unknown bits 0x%x", fn,
                    (unsigned)flags, (unsigned)(flags & ~known));
  return PE_OK;
}


/* The byte range [lo, hi) a validated, non-empty tensor spans. */
static void byte_span(const pe_tensor *t, intptr_t *lo, intptr_t *hi) {
  int64_t es = (int64_t)pe__dtype_size(t->dtype), a = 0, b = t->shape[3];
  for (int i = 0; i < 3; i++) {
    int64_t span = (t->shape[i] - 1) * pe__stride(t, i);
    if (span < 0) a += span;
    else b += span;
  }
  *lo = (intptr_t)t->data + (intptr_t)(a * es);
  *hi = (intptr_t)t->data + (intptr_t)(b * es);
}

/* Is there an integer vector v, lo[m] <= v[m] <= hi[m], with
 * sum v[m]*w[m] == r (w[m] > 0, ascending)? Branch and bound from the
 * largest w: at each level only the v that leave r reachable by the inner
 * terms are tried, so views of one dense buffer (where each stride steps
 * over everything the inner ones span) cost one or two candidates per
 * level. *budget bounds the nodes visited; when it runs out the answer is
 * "maybe" (-1). */
typedef struct lattice_term {
  int64_t w, lo, hi;
} lattice_term;

static int lattice_hit(const lattice_term *t, int m, const int64_t *inner_lo,
                       const int64_t *inner_hi, int64_t r, long *budget) {
  if (--*budget < 0) return -1;
  if (m < 0) return r == 0;
  int64_t w = t[m].w;
  /* need r - v*w in [inner_lo[m], inner_hi[m]]: v*w in [a, b] */
  int64_t a = r - inner_hi[m], b = r - inner_lo[m];
  int64_t vlo = a >= 0 ? (a + w - 1) / w : -((-a) / w); /* ceil(a/w) */
  int64_t vhi = b >= 0 ? b / w : -((-b + w - 1) / w);   /* floor(b/w) */
  if (vlo < t[m].lo) vlo = t[m].lo;
  if (vhi > t[m].hi) vhi = t[m].hi;
  int maybe = 0;
  for (int64_t v = vlo; v <= vhi; v++) {
    int h = lattice_hit(t, m - 1, inner_lo, inner_hi, r - v * w, budget);
    if (h == 1) return 1;
    if (h < 0) {
      maybe = 1;
      if (*budget < 0) break;
    }
  }
  return maybe ? -1 : 0;
}

int pe__tensors_overlap(const pe_tensor *a, const pe_tensor *b) {
  if (pe__tensor_empty(a) || pe__tensor_empty(b)) return 0;
  intptr_t alo, ahi, blo, bhi;
  byte_span(a, &alo, &ahi);
  byte_span(b, &blo, &bhi);
  if (!(alo < bhi && blo < ahi)) return 0;
  size_t es = pe__dtype_size(a->dtype);
  intptr_t d = (intptr_t)b->data - (intptr_t)a->data;
  /* Elements of different sizes, or not on one grid: the byte ranges meet. */
  if (es != pe__dtype_size(b->dtype) || d % (intptr_t)es) return 1;
  /* An element of a at index i meets one of b at index j iff
   * sum_k i_k*sa_k - sum_k j_k*sb_k == d (in elements). Terms of equal |w|
   * merge into one (i_k - j_k over [-(nb-1), na-1] when the strides agree),
   * which makes views sharing their strides one candidate per level. */
  lattice_term t[8];
  int m = 0;
  for (int k = 0; k < 8; k++) {
    const pe_tensor *x = k < 4 ? a : b;
    int dim = k & 3;
    if (x->shape[dim] <= 1) continue;
    int64_t w = dim == 3 ? 1 : pe__stride(x, dim), n = x->shape[dim] - 1;
    if (w == 0) continue; /* a broadcast (read-only) dimension adds nothing */
    if (k >= 4) w = -w; /* b's terms are subtracted */
    int64_t lo = 0, hi = n;
    if (w < 0) {
      w = -w;
      lo = -n;
      hi = 0;
    }
    int i = 0;
    while (i < m && t[i].w != w) i++;
    if (i == m) t[m++] = (lattice_term){w, 0, 0};
    t[i].lo += lo;
    t[i].hi += hi;
  }
  for (int i = 1; i < m; i++) /* ascending w */
    for (int j = i; j > 0 && t[j - 1].w > t[j].w; j--) {
      lattice_term tmp = t[j - 1];
      t[j - 1] = t[j];
      t[j] = tmp;
    }
  int64_t inner_lo[8], inner_hi[8], lo = 0, hi = 0;
  for (int i = 0; i < m; i++) {
    inner_lo[i] = lo;
    inner_hi[i] = hi;
    lo += t[i].w * t[i].lo; /* fit: validated byte extents */
    hi += t[i].w * t[i].hi;
  }
  long budget = 1L << 16;
  int h = lattice_hit(t, m - 1, inner_lo, inner_hi, (int64_t)(d / (intptr_t)es), &budget);
  return h != 0; /* "maybe" counts as overlap */
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

pe_status pe__check_operand(const char *fn, const char *name, const pe_tensor *t, int32_t head_dim,
                            int writable) {
  pe_status st = pe__check_tensor(fn, name, t, writable);
  if (st != PE_OK) return st;
  if (t->shape[3] != head_dim)
    return pe__fail(PE_ERR_SHAPE, "%s: %s head_dim (shape[3]) %" PRId64 " != cache head_dim %d",
                    fn, name, t->shape[3], (int)head_dim);
  return PE_OK;
}

pe_status pe__check_qk(const char *fn, const pe_tensor *q, const pe_tensor *k, int32_t head_dim,
                       int k_writable) {
  pe_status st;
  if (!q && !k) return pe__fail(PE_ERR_NULL_POINTER, "%s: q and k are both NULL", fn);
  if (q && (st = pe__check_operand(fn, "q", q, head_dim, 1)) != PE_OK) return st;
  if (k && (st = pe__check_operand(fn, "k", k, head_dim, k_writable)) != PE_OK) return st;
  if (q && k) {
    if (q->shape[0] != k->shape[0] || q->shape[2] != k->shape[2])
      return pe__fail(PE_ERR_SHAPE,
                      "%s: q [batch %" PRId64 ", tokens %" PRId64 "] and k [batch %" PRId64
                      ", tokens %" PRId64 "] must match",
                      fn, q->shape[0], q->shape[2], k->shape[0], k->shape[2]);
    if (pe__tensors_overlap(q, k))
      return pe__fail(PE_ERR_SHAPE,
                      "%s: q and k overlap in memory (%p and %p): a shared element would be %s", fn,
                      q->data, k->data, k_writable ? "rotated twice" : "read after it is rotated");
  }
  return PE_OK;
}

pe_status pe__check_same_rotation(const char *fn, const char *what, int32_t a_head_dim,
                                  int32_t a_rotary_dim, int32_t a_style, int32_t b_head_dim,
                                  int32_t b_rotary_dim, int32_t b_style) {
  if (a_head_dim != b_head_dim || a_rotary_dim != b_rotary_dim)
    return pe__fail(PE_ERR_SHAPE,
                    "%s: %s has head_dim %d rotary_dim %d, the first cache head_dim %d rotary_dim "
                    "%d: all must match",
                    fn, what, (int)b_head_dim, (int)b_rotary_dim, (int)a_head_dim,
                    (int)a_rotary_dim);
  if (a_style != b_style)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: %s has style %d, the first cache style %d", fn,
                    what, (int)b_style, (int)a_style);
  return PE_OK;
}
