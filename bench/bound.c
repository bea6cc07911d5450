/* bound.c - the bound every pe-bench figure is compared with: an in-place
 * streaming read-modify-write (x = x*a + b) over the bytes a kernel reads and
 * writes, laid out like its tensor. Built with -O3 -march=native
 * (bench/CMakeLists.txt): it is the measuring instrument, so it may use the
 * widest vectors of this machine; the library is never built that way. */
#include "bench.h"

static void rmw(float *restrict x, int64_t n, float a, float b) {
  for (int64_t i = 0; i < n; i++) x[i] = x[i] * a + b;
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
  int64_t idx[3] = {0, 0, 0}, rem = begin;
  for (int d = r->nd - 1; d >= 0; d--) idx[d] = rem % r->n[d], rem /= r->n[d];
  int64_t floats = r->row_bytes / 4;
  for (int64_t row = begin; row < end; row++) {
    int64_t off = 0;
    for (int d = 0; d < r->nd; d++) off += idx[d] * r->stride[d];
    rmw((float *)(void *)(r->base + (off & ~(int64_t)3)), floats, a, b);
    for (int d = r->nd - 1; d >= 0; d--) {
      if (++idx[d] < r->n[d]) break;
      idx[d] = 0;
    }
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
  if (end > begin) rmw((float *)(void *)r->base + begin, end - begin, a, b);
}
