/* fuzz_common.h - shared pieces of the libFuzzer targets: a reader that turns
 * the fuzzer's bytes into arguments, and guarded tensors whose every byte is
 * checked after the call.
 *
 * The contract every target enforces (posenc.h, "Conventions"):
 *   - a call that returns PE_OK writes only the elements of the tensors it was
 *     given (a per-byte write mask built by walking every index);
 *   - a call that fails writes nothing at all (the whole allocation, guard
 *     bytes included, is compared with a snapshot) and leaves a non-empty
 *     pe_last_error() that is not the sentinel set before the call;
 *   - arguments the API documents as errors are refused: among them any two
 *     tensors of one call that share an element when one of them is written
 *     (q and k, k_cache and q or k, a learned table and x);
 *   - zero batch, heads or tokens is a valid, empty call (it may succeed, and
 *     then must write nothing).
 * A violation aborts with a sentence, which libFuzzer records as a crash. */
#ifndef PE_FUZZ_COMMON_H
#define PE_FUZZ_COMMON_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "posenc.h"

#define FZ_GUARD 64                    /* canary bytes on each side of an arena */
#define FZ_MAX_ARENA (1u << 20)        /* largest tensor arena the targets build */
#define FZ_MAX_MASKED_ELEMS (1u << 16) /* index walks are bounded for speed */

static inline void fz_die(const char *what, const char *detail) {
  fprintf(stderr, "FUZZ CONTRACT VIOLATION: %s%s%s\n", what, detail ? ": " : "",
          detail ? detail : "");
  abort();
}

/* ---- reading arguments from the fuzzer's bytes ---- */

typedef struct fz {
  const uint8_t *p;
  size_t n;
} fz;

static inline uint64_t fz_bits(fz *f, int nbytes) {
  uint64_t v = 0;
  for (int i = 0; i < nbytes; i++) {
    v <<= 8;
    if (f->n) {
      v |= *f->p++;
      f->n--;
    }
  }
  return v;
}

static inline uint32_t fz_u8(fz *f) { return (uint32_t)fz_bits(f, 1); }

/* Uniform-ish in [lo, hi]; both inclusive, hi >= lo. */
static inline int64_t fz_range(fz *f, int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)hi - (uint64_t)lo;
  int nb = span < 0x100 ? 1 : span < 0x10000 ? 2 : span < 0x100000000ull ? 4 : 8;
  uint64_t v = fz_bits(f, nb);
  if (span != UINT64_MAX) v %= span + 1;
  return (int64_t)((uint64_t)lo + v);
}

/* Integers at the edges the validators must get right. */
static inline int64_t fz_edge_i64(fz *f) {
  static const int64_t edges[] = {0,
                                  1,
                                  -1,
                                  2,
                                  3,
                                  7,
                                  8,
                                  63,
                                  64,
                                  4095,
                                  4096,
                                  8192,
                                  131072,
                                  INT32_MAX,
                                  INT32_MIN,
                                  (int64_t)1 << 31,
                                  ((int64_t)1 << 32) + 1,
                                  ((int64_t)1 << 53) - 1,
                                  (int64_t)1 << 53,
                                  ((int64_t)1 << 53) + 1,
                                  (int64_t)1 << 62,
                                  INT64_MAX / 2 + 1,
                                  INT64_MAX - 1,
                                  INT64_MAX,
                                  INT64_MIN,
                                  INT64_MIN + 1,
                                  -((int64_t)1 << 53),
                                  -((int64_t)1 << 62)};
  uint32_t sel = fz_u8(f);
  if (sel < sizeof edges / sizeof edges[0]) return edges[sel];
  return (int64_t)fz_bits(f, 8);
}

static inline double fz_double(fz *f) {
  static const double edges[] = {0.0,   -0.0,    1.0,    -1.0,    0.5,     2.0,    4.0,
                                 8.0,   16.0,    32.0,   40.0,    64.0,    0.1,    0.707,
                                 1e-300, 4.9e-324, DBL_MIN, DBL_MAX, -DBL_MAX, 1e300, 1e-9,
                                 10000.0, 500000.0, 1e6,  1e9,     1e15,    1e30,   1e40,
                                 3.4e38, 2.0e38, -10000.0};
  uint32_t sel = fz_u8(f);
  if (sel < sizeof edges / sizeof edges[0]) return edges[sel];
  if (sel == 0xf0) return INFINITY;
  if (sel == 0xf1) return -INFINITY;
  if (sel == 0xf2) return NAN;
  if (sel < 0xc0) return (double)fz_range(f, -100000, 100000) / (double)(1 + fz_u8(f));
  uint64_t bits = fz_bits(f, 8);
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

/* A deterministic stream for bulk contents (tensor data, factor arrays). */
static inline uint64_t fz_mix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Floats that are mostly ordinary, sometimes Inf/NaN/subnormal/huge. */
static inline float fz_stream_float(uint64_t *s) {
  uint64_t r = fz_mix(s);
  switch (r & 31) {
    case 0: return INFINITY;
    case 1: return NAN;
    case 2: return 1e-40f;
    case 3: return 3e38f;
    case 4: {
      uint32_t b = (uint32_t)(r >> 32);
      float x;
      memcpy(&x, &b, sizeof x);
      return x;
    }
    default: return (float)((double)(int32_t)(r >> 32) / 1073741824.0);
  }
}

static inline void fz_fill_bytes(unsigned char *p, size_t n, uint64_t seed) {
  uint64_t s = seed;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = fz_mix(&s);
    memcpy(p + i, &v, 8);
  }
  if (i < n) {
    uint64_t v = fz_mix(&s);
    memcpy(p + i, &v, n - i);
  }
}

/* ---- what must be refused, and why ---- */

/* Record the first reason a call must be refused (printed if it is not). */
static inline int fz_reason(const char **why, const char *r) {
  if (!*why) *why = r;
  return 1;
}
/* Needs `int must_fail` and `const char *why` in scope. */
#define FZ_MUST_FAIL_IF(cond)                                                       \
  do {                                                                              \
    if (cond) must_fail = fz_reason(&why, "accepted, but must be refused: " #cond); \
  } while (0)

/* ---- pe_last_error() check ---- */

/* Make the thread's last error a known sentence that no target call produces
 * (pe_rope_cache_params(NULL, NULL)), so a failing call must replace it. */
static char fz_sentinel[600];
static inline void fz_set_sentinel(void) {
  (void)pe_rope_cache_params(NULL, NULL);
  snprintf(fz_sentinel, sizeof fz_sentinel, "%s", pe_last_error());
}

static inline void fz_check_error_message(const char *fn, pe_status st) {
  const char *e = pe_last_error();
  if (!e) fz_die(fn, "pe_last_error() returned NULL");
  if (!e[0]) fz_die(fn, "failed but pe_last_error() is empty");
  if (!strcmp(e, fz_sentinel)) fz_die(fn, "failed but did not set pe_last_error()");
  if ((int)st < 0 || (int)st > 64) fz_die(fn, "returned a status outside the enum");
}

/* ---- guarded memory ---- */

/* One allocation that holds one or more tensor views, with FZ_GUARD canary
 * bytes before and after, a snapshot taken before the call and a mask of the
 * bytes a successful call may change. */
typedef struct fz_arena {
  unsigned char *mem, *snap, *mask;
  size_t bytes; /* whole allocation, guards included */
} fz_arena;

static inline void fz_arena_free(fz_arena *a) {
  free(a->mem);
  free(a->snap);
  free(a->mask);
  memset(a, 0, sizeof *a);
}

static inline int fz_arena_alloc(fz_arena *a, size_t payload, uint64_t seed) {
  memset(a, 0, sizeof *a);
  a->bytes = payload + 2 * FZ_GUARD;
  a->mem = malloc(a->bytes);
  a->snap = malloc(a->bytes);
  a->mask = calloc(a->bytes, 1);
  if (!a->mem || !a->snap || !a->mask) {
    fz_arena_free(a);
    return 0;
  }
  fz_fill_bytes(a->mem, a->bytes, seed);
  return 1;
}

static inline void fz_arena_snapshot(fz_arena *a) { memcpy(a->snap, a->mem, a->bytes); }

static inline void fz_arena_check_unchanged(const fz_arena *a, const char *fn) {
  if (!a->mem) return;
  if (memcmp(a->mem, a->snap, a->bytes)) {
    char msg[160];
    size_t i = 0;
    while (a->mem[i] == a->snap[i]) i++;
    snprintf(msg, sizeof msg, "memory changed by a failing call (byte %zu of %zu)", i, a->bytes);
    fz_die(fn, msg);
  }
}

static inline void fz_arena_check_mask(const fz_arena *a, const char *fn) {
  if (!a->mem) return;
  for (size_t i = 0; i < a->bytes; i++)
    if (a->mem[i] != a->snap[i] && !a->mask[i]) {
      char msg[160];
      snprintf(msg, sizeof msg, "byte %zu of %zu written outside the elements it may write", i,
               a->bytes);
      fz_die(fn, msg);
    }
}

/* After a call: a success wrote only the masked bytes, a failure nothing. */
static inline void fz_arena_check(const fz_arena *a, pe_status st, const char *fn) {
  if (st == PE_OK)
    fz_arena_check_mask(a, fn);
  else
    fz_arena_check_unchanged(a, fn);
}

/* An output array of `bytes` bytes between FZ_GUARD canary bytes, its first
 * `writable` bytes writable, the snapshot taken. NULL if out of memory. */
static inline void *fz_guarded(fz_arena *a, size_t bytes, size_t writable, uint64_t seed) {
  if (!fz_arena_alloc(a, bytes, seed)) return NULL;
  memset(a->mask + FZ_GUARD, 1, writable);
  fz_arena_snapshot(a);
  return a->mem + FZ_GUARD;
}

/* What the fuzzer built, and what it knows about it. */
typedef struct fz_view {
  pe_tensor t;
  int valid_desc;    /* dtype known, shapes >= 0 with shape[3] > 0, stride[3] == 1,
                        extent fits int64 */
  int empty;         /* valid, and shape[0], [1] or [2] is 0: no elements */
  int aliased;       /* two indices name one element (only known if walked) */
  int walked;        /* the element walk ran (small enough) */
  int64_t lo, hi;    /* element offsets spanned (when valid_desc) */
} fz_view;

static inline size_t fz_esize(pe_dtype d) {
  return d == PE_F32 ? 4 : (d == PE_F16 || d == PE_BF16) ? 2 : 0;
}

/* Classify a description: 1 if valid and its byte extent is computed into
 * lo and hi (elements relative to data); 2 if valid and empty (a zero batch,
 * head or token count: lo 0, hi -1); 0 if the API requires it be refused. */
static inline int fz_describe(const pe_tensor *t, int64_t *lo, int64_t *hi) {
  size_t es = fz_esize(t->dtype);
  if (!es) return 0;
  if (t->shape[3] <= 0) return 0;
  for (int i = 0; i < 3; i++)
    if (t->shape[i] < 0) return 0;
  if (t->stride[3] != 1) return 0;
  if (t->shape[0] == 0 || t->shape[1] == 0 || t->shape[2] == 0) {
    /* no element is ever addressed, so no stride can overflow; the
     * extent of one row (shape[3]) must still fit */
    if ((__int128)t->shape[3] * (__int128)es > INT64_MAX) return 0;
    *lo = 0;
    *hi = -1;
    return 2;
  }
  __int128 count = 1, l = 0, h = t->shape[3] - 1;
  for (int i = 0; i < 4; i++) {
    count *= t->shape[i];
    if (count > INT64_MAX) return 0;
  }
  for (int i = 0; i < 3; i++) {
    __int128 span = (__int128)(t->shape[i] - 1) * t->stride[i];
    /* each span and running sum stays within int64 (the library refuses
     * more), so the sums below cannot overflow even __int128 */
    if (span > INT64_MAX || span < -(__int128)INT64_MAX) return 0;
    if (span < 0) l += span; else h += span;
    if (l < INT64_MIN || h > INT64_MAX) return 0;
  }
  if (l * (__int128)es < INT64_MIN || (h + 1) * (__int128)es > INT64_MAX) return 0;
  *lo = (int64_t)l;
  *hi = (int64_t)h;
  return 1;
}

/* Mark the bytes of every element of channels [c0, c1) of v (data already
 * placed inside a). Returns 1 if some element is named by two indices. */
static inline int fz_mark(fz_arena *a, const fz_view *v, int64_t c0, int64_t c1, unsigned char *seen) {
  size_t es = fz_esize(v->t.dtype);
  const pe_tensor *t = &v->t;
  int alias = 0;
  for (int64_t i0 = 0; i0 < t->shape[0]; i0++)
    for (int64_t i1 = 0; i1 < t->shape[1]; i1++)
      for (int64_t i2 = 0; i2 < t->shape[2]; i2++) {
        int64_t row = i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2];
        for (int64_t c = 0; c < t->shape[3]; c++) {
          unsigned char *p = (unsigned char *)t->data + (row + c) * (int64_t)es;
          size_t off = (size_t)(p - a->mem);
          if (seen) {
            if (seen[off] == 2) alias = 1;
            seen[off] = 2;
          }
          if (c >= c0 && c < c1) memset(a->mask + off, 1, es);
        }
      }
  return alias;
}

/* Strides for a view of the given shape, chosen by the fuzzer: dense
 * [B,H,T,D] or [B,T,H,D], padded rows, reversed (negative) dimensions,
 * overlapping (aliasing) ones, or raw edge values. */
static inline void fz_strides(fz *f, const int64_t shape[4], int64_t stride[4]) {
  uint32_t mode = fz_u8(f) % 8;
  /* Shapes may be edge values: wrap instead of overflowing (the products
   * only matter when the shape is small and valid). */
  uint64_t d = (uint64_t)shape[3], h = (uint64_t)shape[1], t = (uint64_t)shape[2];
  uint64_t pad = (uint64_t)fz_range(f, 0, 7);
  stride[3] = 1;
  switch (mode) {
    case 0: /* dense BHTD */
    case 1:
      stride[2] = (int64_t)d;
      stride[1] = (int64_t)(t * d);
      stride[0] = (int64_t)(h * t * d);
      break;
    case 2: /* BTHD (one token's heads contiguous), padded head rows */
      stride[1] = (int64_t)(d + pad);
      stride[2] = (int64_t)(h * (d + pad));
      stride[0] = (int64_t)(t * h * (d + pad));
      break;
    case 3: /* packed QKV rows: each token row holds 3 times the heads */
      stride[1] = (int64_t)d;
      stride[2] = (int64_t)(3 * h * d + pad);
      stride[0] = (int64_t)(t * (3 * h * d + pad));
      break;
    case 4: /* some dimensions reversed */
      stride[2] = (int64_t)(d + pad);
      stride[1] = (int64_t)(t * (d + pad));
      stride[0] = (int64_t)(h * t * (d + pad));
      for (int i = 0; i < 3; i++)
        if (fz_u8(f) & 1) stride[i] = (int64_t)(0 - (uint64_t)stride[i]);
      break;
    case 5: /* small arbitrary strides: overlapping and aliasing layouts */
      for (int i = 0; i < 3; i++) {
        int64_t m = d < 4096 ? (int64_t)d : 4096;
        stride[i] = fz_range(f, -2 * m - 2, 2 * m + 2);
      }
      break;
    case 6: /* broadcast-like zero strides */
      stride[2] = (int64_t)d;
      stride[1] = (fz_u8(f) & 1) ? 0 : (int64_t)(t * d);
      stride[0] = (fz_u8(f) & 1) ? 0 : (int64_t)(h * t * d);
      break;
    default: /* edge values: overflowing extents, stride[3] != 1 */
      for (int i = 0; i < 3; i++) stride[i] = (fz_u8(f) & 1) ? fz_edge_i64(f) : fz_range(f, -64, 64);
      if ((fz_u8(f) & 7) == 0) stride[3] = fz_edge_i64(f);
      break;
  }
}

/* Shapes: small ones mostly; edge values sometimes (which must be refused or,
 * if they describe a small valid tensor, are used). */
static inline void fz_shape(fz *f, int64_t shape[4], int64_t maxb, int64_t maxh, int64_t maxt, int64_t d) {
  shape[0] = fz_range(f, 1, maxb);
  shape[1] = fz_range(f, 1, maxh);
  shape[2] = fz_range(f, 1, maxt);
  shape[3] = d;
  if ((fz_u8(f) & 15) == 0) shape[fz_u8(f) & 3] = fz_edge_i64(f);
}

static inline pe_dtype fz_dtype(fz *f) {
  uint32_t v = fz_u8(f);
  if (v < 250) return (pe_dtype)(v % 3);
  return (pe_dtype)(int)(v == 250 ? 3 : v == 251 ? -1 : 7 + (int)v);
}

/* Build up to n views in one arena. When `share` is set the views are placed
 * at fuzzer-chosen offsets of one allocation (packed QKV, overlapping q/k);
 * otherwise each view gets its own arena. Views whose description the API
 * must refuse get a small arena and data in its middle. A valid view whose
 * extent exceeds FZ_MAX_ARENA cannot be backed: *ok is 0 and the caller
 * skips the input. Channels [c0, c1) of each view are marked writable. */
typedef struct fz_tensors {
  fz_arena arena[4];
  fz_view v[4];
  int n;
} fz_tensors;

static inline void fz_tensors_free(fz_tensors *ts) {
  for (int i = 0; i < 4; i++) fz_arena_free(&ts->arena[i]);
}

static inline int fz_place(fz *f, fz_tensors *ts, int n, int share, const int64_t c0[], const int64_t c1[],
                    uint64_t seed) {
  /* The caller filled ts->v[i].t (shape, stride, dtype); the rest is ours. */
  memset(ts->arena, 0, sizeof ts->arena);
  for (int i = 0; i < 4; i++)
    ts->v[i].valid_desc = ts->v[i].empty = ts->v[i].aliased = ts->v[i].walked = 0;
  ts->n = n;
  int64_t base_off[4] = {0, 0, 0, 0}; /* byte offset of data within the shared payload */
  int64_t glo = 0, ghi = 0;
  for (int i = 0; i < n; i++) {
    fz_view *v = &ts->v[i];
    int d = fz_describe(&v->t, &v->lo, &v->hi);
    v->valid_desc = d != 0;
    v->empty = d == 2;
    if (!v->valid_desc || v->empty) continue;
    size_t es = fz_esize(v->t.dtype);
    __int128 span = ((__int128)v->hi - v->lo + 1) * (__int128)es;
    if (span > FZ_MAX_ARENA) return 0;
    if (share) {
      /* Multiples of 4 bytes: every view stays aligned to its element size
       * (posenc.h refuses misaligned data; these targets fuzz the rest). */
      base_off[i] = i == 0 ? 0 : fz_range(f, -2048, 2048) * 4;
      int64_t l = base_off[i] + v->lo * (int64_t)es, h = base_off[i] + (v->hi + 1) * (int64_t)es;
      if (i == 0 || l < glo) glo = l;
      if (i == 0 || h > ghi) ghi = h;
    }
  }
  /* Keep the shared payload's origin 4-byte aligned too (f16 views can start
   * at an odd multiple of 2 bytes below their data). */
  glo -= ((glo % 4) + 4) % 4;
  for (int i = 0; i < n; i++) {
    fz_view *v = &ts->v[i];
    fz_arena *a = share ? &ts->arena[0] : &ts->arena[i];
    size_t es = fz_esize(v->t.dtype);
    if (!a->mem) {
      size_t payload = share                          ? (size_t)(ghi - glo)
                       : v->valid_desc && !v->empty ? (size_t)(v->hi - v->lo + 1) * es
                                                    : 256;
      if (share && payload == 0) payload = 256;
      if (!fz_arena_alloc(a, payload, seed + (uint64_t)i)) return 0;
    }
    if (!v->valid_desc || v->empty) {
      /* inside the arena (an empty call may check the pointer), 4-aligned */
      v->t.data = a->mem + (a->bytes / 2 & ~(size_t)3);
      continue;
    }
    if (share)
      v->t.data = a->mem + FZ_GUARD + (base_off[i] - glo);
    else
      v->t.data = a->mem + FZ_GUARD - v->lo * (int64_t)es;
  }
  /* Alias detection and the write mask: walk each small view. */
  for (int i = 0; i < n; i++) {
    fz_view *v = &ts->v[i];
    if (!v->valid_desc || v->empty) continue;
    fz_arena *a = share ? &ts->arena[0] : &ts->arena[i];
    __int128 count = (__int128)v->t.shape[0] * v->t.shape[1] * v->t.shape[2] * v->t.shape[3];
    if (count > FZ_MAX_MASKED_ELEMS) {
      /* Too many indices to walk: allow the whole extent (still catches
       * writes into the guards and outside the tensor's span). */
      size_t es = fz_esize(v->t.dtype);
      unsigned char *p = (unsigned char *)v->t.data + v->lo * (int64_t)es;
      memset(a->mask + (p - a->mem), 1, (size_t)(v->hi - v->lo + 1) * es);
      continue;
    }
    unsigned char *seen = calloc(a->bytes, 1);
    if (!seen) return 0;
    v->aliased = fz_mark(a, v, c0[i], c1[i], seen);
    v->walked = 1;
    free(seen);
  }
  for (int i = 0; i < 4; i++)
    if (ts->arena[i].mem) fz_arena_snapshot(&ts->arena[i]);
  return 1;
}

/* Whether views i and j share a byte: 1 yes, 0 no, -1 unknown (a view too
 * large to walk whose extent meets the other's). Views in separate arenas
 * never do. */
static inline int fz_views_overlap(const fz_tensors *ts, int i, int j, int share) {
  const fz_view *a = &ts->v[i], *b = &ts->v[j];
  if (!share || !a->valid_desc || !b->valid_desc || a->empty || b->empty) return 0;
  size_t ea = fz_esize(a->t.dtype), eb = fz_esize(b->t.dtype);
  const unsigned char *alo = (const unsigned char *)a->t.data + a->lo * (int64_t)ea;
  const unsigned char *ahi = (const unsigned char *)a->t.data + (a->hi + 1) * (int64_t)ea;
  const unsigned char *blo = (const unsigned char *)b->t.data + b->lo * (int64_t)eb;
  const unsigned char *bhi = (const unsigned char *)b->t.data + (b->hi + 1) * (int64_t)eb;
  if (ahi <= blo || bhi <= alo) return 0;
  if (!a->walked || !b->walked) return -1;
  const fz_arena *ar = &ts->arena[0];
  unsigned char *seen = calloc(ar->bytes, 1);
  if (!seen) return -1;
  int hit = 0;
  for (int pass = 0; pass < 2 && !hit; pass++) {
    const pe_tensor *t = pass ? &b->t : &a->t;
    size_t es = pass ? eb : ea;
    for (int64_t i0 = 0; i0 < t->shape[0] && !hit; i0++)
      for (int64_t i1 = 0; i1 < t->shape[1] && !hit; i1++)
        for (int64_t i2 = 0; i2 < t->shape[2] && !hit; i2++) {
          int64_t row = i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2];
          size_t off = (size_t)((const unsigned char *)t->data + row * (int64_t)es - ar->mem);
          for (size_t byte = 0; byte < (size_t)t->shape[3] * es; byte++) {
            if (pass == 0) seen[off + byte] = 1;
            else if (seen[off + byte]) { hit = 1; break; }
          }
        }
  }
  free(seen);
  return hit;
}

static inline void fz_tensors_check(const fz_tensors *ts, pe_status st, const char *fn) {
  for (int i = 0; i < 4; i++) fz_arena_check(&ts->arena[i], st, fn);
}

/* Any view the API requires to be refused (bad description, or a written
 * tensor whose indices alias). */
static inline int fz_tensors_must_fail(const fz_tensors *ts, int written) {
  for (int i = 0; i < ts->n; i++) {
    if (!ts->v[i].valid_desc) return 1;
    if (written && ts->v[i].aliased) return 1;
  }
  return 0;
}

/* Positions: NULL, in range, or edge values (negative, INT64_MAX, limit). */
static inline int64_t *fz_positions(fz *f, int64_t batch, int64_t tokens, int64_t limit, int *has_bad,
                             int allow_null) {
  *has_bad = 0;
  uint32_t mode = fz_u8(f) % 4;
  if (allow_null && mode == 0) return NULL;
  if (batch <= 0 || tokens <= 0 || batch > 4096 || tokens > 4096 || batch * tokens > 4096)
    return NULL;
  int64_t n = batch * tokens;
  int64_t *p = malloc((size_t)n * sizeof *p); /* exact size: ASan sees over-reads */
  if (!p) return NULL;
  int64_t top = limit > 0 ? limit - 1 : 1000000;
  int64_t start = fz_range(f, 0, top);
  for (int64_t i = 0; i < n; i++) {
    p[i] = start + i % tokens;
    if (p[i] > top) p[i] = top;
  }
  if (mode == 3) {
    int64_t k = fz_range(f, 0, n - 1);
    p[k] = (fz_u8(f) & 1) ? fz_edge_i64(f) : limit;
  }
  for (int64_t i = 0; i < n; i++) {
    if (p[i] < 0) *has_bad = 1;
    if (limit > 0 && p[i] >= limit) *has_bad = 1;
    if (limit <= 0 && p[i] >= ((int64_t)1 << 53)) *has_bad = 1;
  }
  return p;
}

/* slot_mapping of a paged-cache store into a cache of shape cache_shape
 * ([num_blocks, kv_heads, block_size, head_dim]): batch x tokens entries
 * exactly (*n of them), or NULL (one input in 16, and large shapes).
 * Distinct slots mostly, some -1 (padding), sometimes an int64 edge, a
 * duplicate or one past the last slot: *bad when the API must refuse them.
 * 0 when out of memory. */
static inline int fz_slot_mapping(fz *f, const int64_t cache_shape[4], int64_t batch, int64_t tokens,
                                  int64_t **out, int64_t *n, int *bad) {
  __int128 ns = (__int128)cache_shape[0] * cache_shape[2];
  int64_t nslots = ns > INT64_MAX ? INT64_MAX : ns < 0 ? 0 : (int64_t)ns;
  int small = batch >= 0 && tokens >= 0 && batch <= 4096 && tokens <= 4096;
  int64_t *slots = NULL;
  *n = small ? batch * tokens : 0;
  *out = NULL;
  *bad = 0;
  uint32_t smode = fz_u8(f) % 16;
  if (smode == 0 || !small || *n > 4096) return 1;
  slots = malloc((size_t)(*n ? *n : 1) * sizeof *slots);
  if (!slots) return 0;
  if (!*n) slots[0] = -7; /* never read by an empty call */
  int64_t start = fz_range(f, 0, 255), step = 2 * fz_range(f, 0, 7) + 1;
  for (int64_t i = 0; i < *n; i++) {
    /* distinct while i < nslots (step is odd; nslots may be even: then the
     * harness detects the duplicates below) */
    slots[i] = i < nslots && nslots > 0 ? (start + i * step) % nslots : -1;
    if ((fz_u8(f) & 7) == 0) slots[i] = -1;
  }
  if (smode == 1 && *n) slots[fz_range(f, 0, *n - 1)] = fz_edge_i64(f);
  if (smode == 2 && *n > 1) slots[fz_range(f, 1, *n - 1)] = slots[0];
  if (smode == 3 && *n) slots[fz_range(f, 0, *n - 1)] = nslots;
  for (int64_t i = 0; i < *n; i++) {
    if (slots[i] < -1 || slots[i] >= nslots) *bad = 1;
    for (int64_t j = 0; j < i && !*bad; j++)
      if (slots[i] >= 0 && slots[i] == slots[j]) *bad = 1;
  }
  *out = slots;
  return 1;
}

/* The rows of cache view t (its data inside arena a) that the n slots
 * used (>= 0) name, every head: writable by a successful store. */
static inline void fz_mark_slot_rows(fz_arena *a, const pe_tensor *t, const int64_t *slots, int64_t n) {
  size_t es = fz_esize(t->dtype);
  for (int64_t i = 0; i < n; i++) {
    if (slots[i] < 0) continue;
    int64_t blk = slots[i] / t->shape[2], row = slots[i] % t->shape[2];
    for (int64_t h = 0; h < t->shape[1]; h++) {
      int64_t off = blk * t->stride[0] + h * t->stride[1] + row * t->stride[2];
      unsigned char *p = (unsigned char *)t->data + off * (int64_t)es;
      memset(a->mask + (p - a->mem), 1, (size_t)t->shape[3] * es);
    }
  }
}

/* ISA and pool: the first byte of every input chooses the kernel path, so the
 * SIMD kernels are fuzzed with the same inputs as the scalar one, and
 * whether the call gets the 2-thread pool that every target makes once, in
 * libFuzzer's initialisation (made later, it would look like a leak of the
 * first input). */
static pe_threadpool *fz_pool;
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  (void)pe_threadpool_create(2, &fz_pool);
  return 0;
}

static inline pe_threadpool *fz_choose(fz *f) {
  static const char *const isas[] = {"scalar", "avx2", "avx512", "auto"};
  uint32_t b = fz_u8(f);
  (void)pe_force_isa(isas[b & 3]); /* an ISA the CPU lacks is refused, fine */
  return (b & 4) ? fz_pool : NULL;
}

/* One written view (ts->v[0], its shape set), every channel writable: its
 * dtype and strides from the fuzz bytes, then placed. 0 when it cannot be
 * backed (the input is skipped; nothing to free). */
static inline int fz_place_written(fz *f, fz_tensors *ts) {
  ts->v[0].t.dtype = fz_dtype(f);
  fz_strides(f, ts->v[0].t.shape, ts->v[0].t.stride);
  const int64_t c0[1] = {0}, c1[1] = {INT64_MAX};
  if (fz_place(f, ts, 1, 0, c0, c1, fz_bits(f, 8))) return 1;
  fz_tensors_free(ts);
  return 0;
}

/* The contract after a call made with fz_set_sentinel() just before it: a
 * failure sets its own error message; a call that must be refused (why,
 * when known, says which rule) is; the bytes of ts (when given) are as
 * fz_tensors_check requires. */
static inline void fz_check_call(const char *fn, pe_status st, int must_fail, const char *why,
                                 const fz_tensors *ts) {
  if (st != PE_OK) fz_check_error_message(fn, st);
  if (st == PE_OK && must_fail) fz_die(fn, why ? why : "accepted arguments it must refuse");
  if (ts) fz_tensors_check(ts, st, fn);
}

#endif
