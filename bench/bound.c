/* bound.c - the bound every pe-bench figure is compared with: an in-place
 * streaming read-modify-write (x = x*a + b) over the bytes a kernel reads and
 * writes, laid out like its tensor (or, for rows a kernel reads and writes
 * elsewhere, y = x*a + b into a second buffer), walked as one stream or as
 * PB_STREAMS (measure.c takes the faster). Built with -O3 -march=native
 * (bench/CMakeLists.txt): it is the measuring instrument, so it may use the
 * widest vectors of this machine; the library is never built that way. */
#include <stddef.h>

#include "bench.h"

#if defined(__AVX512F__)
#include <immintrin.h>
/* Explicit 512-bit loop with a masked tail: rows of RoPE with a partial
 * rotary dimension are short (24 floats for GPT-NeoX-20B), and the
 * compiler's scalar epilogue would make the bound, not the kernel, slow.
 * Each vector is loaded before it is stored: y may be x. */
static void rmw_to(const float *x, float *y, int64_t n, float a, float b) {
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(_mm512_loadu_ps(x + i), va, vb));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), va, vb));
  }
}
static void rmw(float *x, int64_t n, float a, float b) { rmw_to(x, x, n, a, b); }
#else
/* Two loops the compiler vectorizes: in place, and into another buffer
 * (one loop for both would be versioned on the two pointers' distance and
 * run the in-place case scalar). */
static void rmw(float *restrict x, int64_t n, float a, float b) {
  for (int64_t i = 0; i < n; i++) x[i] = x[i] * a + b;
}
static void rmw_to(const float *restrict x, float *restrict y, int64_t n, float a, float b) {
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * a + b;
}
#endif
/* In place (dd 0), or into the float dd bytes on. */
static inline void rmw_at(char *x, ptrdiff_t dd, int64_t n, float a, float b) {
  if (dd)
    rmw_to((const float *)(void *)x, (float *)(void *)(x + dd), n, a, b);
  else
    rmw((float *)(void *)x, n, a, b);
}

int64_t pb_rows_count(const pb_rows *r) {
  int64_t c = 1;
  for (int d = 0; d < r->nd; d++) c *= r->n[d];
  return c;
}

void pb_rows_normalise(pb_rows *r) {
  int64_t n[3], s[3];
  int nd = 0;
  for (int d = 0; d < r->nd; d++)
    if (r->n[d] > 1) n[nd] = r->n[d], s[nd] = r->stride[d], nd++;
  /* insertion sort by stride, largest first */
  for (int i = 1; i < nd; i++)
    for (int j = i; j > 0 && s[j] > s[j - 1]; j--) {
      int64_t tn = n[j], ts = s[j];
      n[j] = n[j - 1], s[j] = s[j - 1], n[j - 1] = tn, s[j - 1] = ts;
    }
  /* innermost dimension contiguous with the rows: longer rows */
  while (nd > 0 && s[nd - 1] == r->row_bytes) {
    r->row_bytes *= n[nd - 1];
    nd--;
  }
  r->nd = nd;
  for (int d = 0; d < nd; d++) r->n[d] = n[d], r->stride[d] = s[d];
}

void pb_bound_rmw_rows(const pb_rows *r, int64_t begin, int64_t end, float a, float b) {
  /* Three dimensions (missing outer ones of size 1), walked with a running
   * pointer: per-row index arithmetic through memory would cost more than a
   * short row's work and make the bound, not the kernel, the slow one. */
  int64_t n[3] = {1, 1, 1}, s3[3] = {0, 0, 0};
  for (int d = 0; d < r->nd; d++) n[3 - r->nd + d] = r->n[d], s3[3 - r->nd + d] = r->stride[d];
  int64_t i2 = begin % n[2], i1 = begin / n[2] % n[1], i0 = begin / n[2] / n[1];
  char *row = r->base + i0 * s3[0] + i1 * s3[1] + i2 * s3[2];
  const int64_t floats = r->row_bytes / 4, n1 = n[1], n2 = n[2];
  const ptrdiff_t dd = r->dst ? r->dst - r->base : 0; /* where a row's results go */
  const int64_t s0 = s3[0], s1 = s3[1], s2 = s3[2];
  for (int64_t k = begin; k < end; k++) {
    rmw_at(row, dd, floats, a, b);
    if (++i2 < n2) {
      row += s2;
      continue;
    }
    i2 = 0;
    row -= (n2 - 1) * s2;
    if (++i1 < n1) {
      row += s1;
      continue;
    }
    i1 = 0;
    row += s0 - (n1 - 1) * s1;
  }
}

void pb_bound_rmw_part(const pb_rows *r, int index, int n, float a, float b) {
  if (r->nd > 0) {
    int64_t rows = pb_rows_count(r);
    pb_bound_rmw_rows(r, rows * index / n, rows * (index + 1) / n, a, b);
    return;
  }
  /* One contiguous run: cut it at 64-byte boundaries. */
  int64_t floats = r->row_bytes / 4;
  int64_t begin = (floats * index / n) & ~(int64_t)15;
  int64_t end = index == n - 1 ? floats : (floats * (index + 1) / n) & ~(int64_t)15;
  const ptrdiff_t dd = r->dst ? r->dst - r->base : 0;
  if (end > begin) rmw_at(r->base + begin * 4, dd, end - begin, a, b);
}

/* A cursor over the rows of pb_bound_rmw_rows' walk: row `k` of r and its
 * index in each dimension, advanced one row at a time without division. */
typedef struct cursor {
  char *row;
  int64_t i1, i2;
} cursor;

static cursor cursor_at(const pb_rows *r, const int64_t *n, const int64_t *s3, int64_t k) {
  int64_t i2 = k % n[2], i1 = k / n[2] % n[1], i0 = k / n[2] / n[1];
  cursor c = {r->base + i0 * s3[0] + i1 * s3[1] + i2 * s3[2], i1, i2};
  return c;
}

static inline void cursor_next(cursor *c, const int64_t *n, const int64_t *s3) {
  if (++c->i2 < n[2]) {
    c->row += s3[2];
    return;
  }
  c->i2 = 0;
  c->row -= (n[2] - 1) * s3[2];
  if (++c->i1 < n[1]) {
    c->row += s3[1];
    return;
  }
  c->i1 = 0;
  c->row += s3[0] - (n[1] - 1) * s3[1];
}

void pb_bound_rmw_streams(const pb_rows *r, int index, int n, float a, float b) {
  enum { S = PB_STREAMS, PIECE = PB_STREAM_PIECE / 4 };
  if (r->nd == 0) { /* one contiguous run: S runs of it, PIECE floats at a turn */
    int64_t floats = r->row_bytes / 4;
    int64_t begin = (floats * index / n) & ~(int64_t)15;
    int64_t end = index == n - 1 ? floats : (floats * (index + 1) / n) & ~(int64_t)15;
    int64_t run = ((end - begin + S - 1) / S + PIECE - 1) / PIECE * PIECE;
    const ptrdiff_t dd = r->dst ? r->dst - r->base : 0;
    for (int64_t k = 0; k < run; k += PIECE)
      for (int i = 0; i < S; i++) {
        int64_t p = begin + i * run + k, q = p + PIECE < begin + (i + 1) * run ? p + PIECE
                                                                               : begin + (i + 1) * run;
        if (q > end) q = end;
        if (q > p) rmw_at(r->base + p * 4, dd, q - p, a, b);
      }
    return;
  }
  int64_t dims[3] = {1, 1, 1}, s3[3] = {0, 0, 0};
  for (int d = 0; d < r->nd; d++) dims[3 - r->nd + d] = r->n[d], s3[3 - r->nd + d] = r->stride[d];
  int64_t rows = pb_rows_count(r), begin = rows * index / n, end = rows * (index + 1) / n;
  int64_t run = (end - begin + S - 1) / S;
  if (run == 0) return;
  cursor c[S];
  int live = 0;
  for (int i = 0; i < S && begin + i * run < end; i++, live++)
    c[i] = cursor_at(r, dims, s3, begin + i * run);
  const int64_t floats = r->row_bytes / 4;
  const ptrdiff_t dd = r->dst ? r->dst - r->base : 0;
  for (int64_t k = 0; k < run; k++)
    for (int i = 0; i < live; i++) {
      if (begin + i * run + k >= end) continue; /* the last run's end */
      rmw_at(c[i].row, dd, floats, a, b);
      cursor_next(&c[i], dims, s3);
    }
}
