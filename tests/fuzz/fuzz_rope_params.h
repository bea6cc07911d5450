/* fuzz_rope_params.h - pe_rope_params chosen by the fuzzer: every scaling
 * type, sizes, styles, factor arrays, struct sizes. Shared by the RoPE
 * targets. */
#ifndef PE_FUZZ_ROPE_PARAMS_H
#define PE_FUZZ_ROPE_PARAMS_H

#include <stddef.h>

#include "fuzz_common.h"

/* Owned arrays the params point to; exactly rotary_dim/2 long so an over-read
 * is an ASan report. */
typedef struct fz_rope_arrays {
  float *short_factor, *long_factor;
  double *inv_freq;
  unsigned char *raw; /* params in a larger buffer (struct_size experiments) */
} fz_rope_arrays;

static inline void fz_rope_arrays_free(fz_rope_arrays *a) {
  free(a->short_factor);
  free(a->long_factor);
  free(a->inv_freq);
  free(a->raw);
  memset(a, 0, sizeof *a);
}

static inline int32_t fz_head_dim(fz *f, int wild) {
  static const int32_t dims[] = {2, 4, 6, 8, 16, 18, 32, 34, 64, 80, 96, 128, 256};
  uint32_t sel = fz_u8(f);
  if (!wild || sel < 0xf0) return dims[sel % (sizeof dims / sizeof dims[0])];
  if (sel == 0xf0) return 16384;
  if (sel == 0xf1) return 16386;
  return (int32_t)fz_bits(f, 4);
}

/* Fill *p (already initialised). `small` bounds the table so that apply
 * targets stay fast; otherwise max_positions may be anything, but a table
 * that would really be allocated is kept below 8 MiB (the fuzzer's RSS budget). */
static inline pe_rope_params *fz_rope_params(fz *f, fz_rope_arrays *arr, int small, int wild) {
  memset(arr, 0, sizeof *arr);
  /* Room for a caller whose struct is 64 bytes larger than ours. */
  arr->raw = calloc(1, sizeof(pe_rope_params) + 64);
  if (!arr->raw) return NULL;
  pe_rope_params *p = (pe_rope_params *)(void *)arr->raw;
  pe_rope_params_init(p);

  p->head_dim = fz_head_dim(f, wild);
  uint32_t rsel = fz_u8(f) % 8;
  if (rsel < 3) p->rotary_dim = 0;
  else if (rsel < 6) p->rotary_dim = 2 * (int32_t)fz_range(f, 1, p->head_dim > 1 ? p->head_dim / 2 : 1);
  else if (rsel == 6) { /* around head_dim, in int64: a wild head_dim may be INT32_MAX */
    int64_t r = fz_range(f, -3, (int64_t)p->head_dim + 3);
    p->rotary_dim = r > INT32_MAX ? INT32_MAX : (int32_t)r;
  }
  else p->rotary_dim = (int32_t)fz_bits(f, 4);
  uint32_t ssel = fz_u8(f);
  p->style = ssel < 250 ? (pe_rope_style)(ssel & 1) : (pe_rope_style)(int)(ssel - 248);
  if (fz_u8(f) & 1) p->base = fz_double(f);
  if (small) {
    p->max_positions = (fz_u8(f) & 3) == 0 ? 0 : fz_range(f, 1, 96);
  } else {
    uint32_t m = fz_u8(f) % 4;
    p->max_positions = m == 0 ? 0 : m < 3 ? fz_range(f, 1, 2048) : fz_edge_i64(f);
  }
  uint32_t sc = fz_u8(f);
  p->scaling = sc < 240 ? (pe_rope_scaling)(sc % 9) : (pe_rope_scaling)(int)(sc - 230);
  if (fz_u8(f) & 1) p->factor = fz_double(f);
  else p->factor = (double)fz_range(f, 1, 64);
  if (fz_u8(f) & 1) p->original_max_positions = (fz_u8(f) & 1) ? fz_edge_i64(f) : fz_range(f, 1, 65536);
  if (fz_u8(f) & 1) p->seq_len = (fz_u8(f) & 1) ? fz_edge_i64(f) : fz_range(f, 1, 262144);
  if ((fz_u8(f) & 3) == 0) p->attention_factor = fz_double(f);
  if ((fz_u8(f) & 3) == 0) p->beta_fast = fz_double(f);
  if ((fz_u8(f) & 3) == 0) p->beta_slow = fz_double(f);
  if ((fz_u8(f) & 3) == 0) p->mscale = fz_double(f);
  if ((fz_u8(f) & 3) == 0) p->mscale_all_dim = fz_double(f);
  if ((fz_u8(f) & 3) == 0) p->truncate = (int32_t)fz_range(f, -1, 2);
  if ((fz_u8(f) & 3) == 0) p->low_freq_factor = fz_double(f);
  if ((fz_u8(f) & 3) == 0) p->high_freq_factor = fz_double(f);

  /* Factor arrays of exactly rotary_dim/2 entries (when that is sane). */
  int32_t rd = p->rotary_dim ? p->rotary_dim : p->head_dim;
  int32_t half = rd / 2;
  if (half >= 1 && half <= 8192) {
    uint64_t seed = fz_bits(f, 8);
    uint32_t which = fz_u8(f);
    if ((which & 3) != 0) {
      arr->short_factor = malloc((size_t)half * sizeof(float));
      arr->long_factor = malloc((size_t)half * sizeof(float));
      arr->inv_freq = malloc((size_t)half * sizeof(double));
      if (!arr->short_factor || !arr->long_factor || !arr->inv_freq) return NULL;
      uint64_t s = seed;
      int plain = (which & 4) != 0; /* ordinary positive values mostly */
      for (int32_t i = 0; i < half; i++) {
        float a = fz_stream_float(&s), b = fz_stream_float(&s);
        arr->short_factor[i] = plain ? 1.0f + (float)(fz_mix(&s) % 64) / 8.0f : a;
        arr->long_factor[i] = plain ? 1.0f + (float)(fz_mix(&s) % 256) / 4.0f : b;
        arr->inv_freq[i] = plain ? 1.0 / (double)(1 + fz_mix(&s) % 100000) : (double)a;
      }
      p->short_factor = (which & 8) ? NULL : arr->short_factor;
      p->long_factor = (which & 16) ? NULL : arr->long_factor;
      p->inv_freq = (which & 32) ? NULL : arr->inv_freq;
    }
  }

  /* Keep real tables within budget; sizes that must overflow are kept. */
  if (rd >= 2 && rd <= 16384 && p->max_positions > 0) {
    __int128 bytes = (__int128)p->max_positions * rd * (__int128)sizeof(float);
    __int128 cap = small ? 256 * 1024 : 8 * 1024 * 1024;
    if (bytes > cap && bytes <= (__int128)(SIZE_MAX / 2)) p->max_positions = fz_range(f, 1, 64);
  }

  /* struct_size: ours, an older (smaller) one, or a newer one with a tail. */
  uint32_t zs = fz_u8(f);
  if (zs >= 0xf0) {
    uint32_t extra = (uint32_t)fz_range(f, 1, 64);
    p->struct_size = (uint32_t)sizeof *p + extra;
    if (zs & 1) arr->raw[sizeof *p + fz_range(f, 0, extra - 1)] = (unsigned char)(1 + fz_u8(f) % 255);
  } else if (zs >= 0xe0) {
    /* An older caller's struct ends on a field boundary. A size inside a
     * field (half a pointer) is left out: posenc.h does not say what it does
     * (the library refuses it), so the contract here cannot require it. */
    static const size_t ends[] = {
        0, 1, 4, offsetof(pe_rope_params, head_dim) + 4, offsetof(pe_rope_params, style) + 4,
        offsetof(pe_rope_params, base) + 8, offsetof(pe_rope_params, max_positions) + 8,
        offsetof(pe_rope_params, scaling) + 4, offsetof(pe_rope_params, factor) + 8,
        offsetof(pe_rope_params, original_max_positions) + 8, offsetof(pe_rope_params, seq_len) + 8,
        offsetof(pe_rope_params, attention_factor) + 8, offsetof(pe_rope_params, beta_slow) + 8,
        offsetof(pe_rope_params, mscale_all_dim) + 8, offsetof(pe_rope_params, truncate) + 4,
        offsetof(pe_rope_params, high_freq_factor) + 8, offsetof(pe_rope_params, short_factor) + 8,
        offsetof(pe_rope_params, long_factor) + 8, sizeof(pe_rope_params)};
    p->struct_size = (uint32_t)ends[fz_u8(f) % (sizeof ends / sizeof ends[0])];
  }
  return p;
}

/* The caller's struct had a non-zero byte past this library's struct. */
static inline int fz_params_bad_tail(const pe_rope_params *p) {
  const unsigned char *raw = (const unsigned char *)p;
  for (size_t i = sizeof *p; i < p->struct_size; i++)
    if (raw[i]) return 1;
  return 0;
}

/* A cache from fuzz bytes and its resolved geometry (NULL when the
 * parameters are refused): the common start of the rotation targets. */
static inline pe_rope_cache *fz_cache(fz *f, const char *fn, int32_t *head_dim, int32_t *rotary_dim,
                                      int64_t *max_pos) {
  fz_rope_arrays arr;
  pe_rope_params *p = fz_rope_params(f, &arr, 1, 0);
  pe_rope_cache *c = NULL;
  if (p && pe_rope_cache_create(p, &c) == PE_OK) {
    pe_rope_params got;
    pe_rope_params_init(&got);
    if (pe_rope_cache_params(c, &got) != PE_OK) fz_die(fn, "pe_rope_cache_params failed on a cache");
    *head_dim = got.head_dim;
    *rotary_dim = got.rotary_dim;
    *max_pos = got.max_positions;
  }
  fz_rope_arrays_free(&arr);
  return c;
}

/* The start of the rotation targets: the ISA and pool, then a cache from the
 * fuzz bytes with its resolved geometry. */
typedef struct fz_rope_target {
  fz f;
  pe_threadpool *pool;
  pe_rope_cache *c; /* NULL: the parameters were refused, skip the input */
  int32_t hd, rd;
  int64_t maxp;
} fz_rope_target;

static inline pe_rope_cache *fz_rope_begin(fz_rope_target *r, const uint8_t *data, size_t size,
                                           const char *fn) {
  r->f = (fz){data, size};
  r->pool = fz_choose(&r->f);
  r->hd = r->rd = 0;
  r->maxp = 0;
  r->c = fz_cache(&r->f, fn, &r->hd, &r->rd, &r->maxp);
  return r->c;
}

/* q and k of a rotation call, as the fuzzer chooses them: which are given
 * (q only, k only, both, neither), whether they are views of one allocation
 * (packed QKV, overlapping), q's shape (batch up to max_batch) and k's from
 * it with its own head count and sometimes another dimension, dtypes,
 * strides. Only the rotated channels [0, rd) may change. */
typedef struct fz_qk {
  fz_tensors b; /* v[0] q, v[1] k */
  int share;
  const pe_tensor *q, *k; /* NULL when not given */
  int64_t batch, tokens;  /* the call's: q's, else k's */
} fz_qk;

/* 0 when the views cannot be backed (the input is skipped; nothing to
 * free). other_dim: sometimes give q and k a head_dim of 1..300 instead of
 * the cache's. */
static inline int fz_qk_views(fz *f, fz_qk *v, int64_t max_batch, int32_t hd, int32_t rd,
                              int other_dim) {
  uint32_t which = fz_u8(f) % 8;
  int use_q = which != 1 && which != 7, use_k = which != 0 && which != 7;
  v->share = (fz_u8(f) & 3) == 0;
  memset(&v->b, 0, sizeof v->b);
  int64_t *qs = v->b.v[0].t.shape, *ks = v->b.v[1].t.shape;
  fz_shape(f, qs, max_batch, 4, 6, hd);
  memcpy(ks, qs, 4 * sizeof(int64_t));
  ks[1] = fz_range(f, 1, 4);
  if ((fz_u8(f) & 15) == 0) ks[fz_u8(f) % 4] = fz_range(f, 1, 5); /* mismatches */
  if (other_dim && (fz_u8(f) & 31) == 0) qs[3] = ks[3] = fz_range(f, 1, 300);
  v->b.v[0].t.dtype = fz_dtype(f);
  v->b.v[1].t.dtype = (fz_u8(f) & 1) ? v->b.v[0].t.dtype : fz_dtype(f);
  fz_strides(f, qs, v->b.v[0].t.stride);
  fz_strides(f, ks, v->b.v[1].t.stride);
  const int64_t c0[2] = {0, 0}, c1[2] = {rd, rd};
  if (!fz_place(f, &v->b, 2, v->share, c0, c1, fz_bits(f, 8))) {
    fz_tensors_free(&v->b);
    return 0;
  }
  v->q = use_q ? &v->b.v[0].t : NULL;
  v->k = use_k ? &v->b.v[1].t : NULL;
  v->batch = use_q ? qs[0] : ks[0];
  v->tokens = use_q ? qs[2] : ks[2];
  return 1;
}

/* What every rotation call must refuse about q and k, for a cache of
 * head_dim hd (written tensors: no aliasing, no shared element). */
static inline int fz_qk_must_fail(const fz_qk *v, int32_t hd, const char **reason) {
  int must_fail = 0;
  const char *why = *reason;
  const int64_t *qs = v->b.v[0].t.shape, *ks = v->b.v[1].t.shape;
  const pe_tensor *q = v->q, *k = v->k;
  FZ_MUST_FAIL_IF(!q && !k);
  FZ_MUST_FAIL_IF(q && (!v->b.v[0].valid_desc || v->b.v[0].aliased || qs[3] != hd));
  FZ_MUST_FAIL_IF(k && (!v->b.v[1].valid_desc || v->b.v[1].aliased || ks[3] != hd));
  FZ_MUST_FAIL_IF(q && k && (qs[0] != ks[0] || qs[2] != ks[2]));
  /* q and k may be views of one buffer (packed QKV) but share no element */
  FZ_MUST_FAIL_IF(q && k && fz_views_overlap(&v->b, 0, 1, v->share) == 1);
  *reason = why;
  return must_fail;
}

/* Positions [n_axes][batch][tokens] of a multi-axis call, exactly that long,
 * into *out: NULL for one input in four and for large shapes, else each axis
 * counting from its own start (capped below maxp, when the cache has a
 * table), sometimes with an edge value on any axis. *bad: an entry the API
 * must refuse. 0 when out of memory. */
static inline int fz_axis_positions(fz *f, int n_axes, int64_t batch, int64_t tokens, int64_t maxp,
                                    int64_t **out, int *bad) {
  *out = NULL;
  *bad = 0;
  if ((fz_u8(f) & 3) == 0 || batch <= 0 || tokens <= 0 || batch > 1024 || tokens > 1024 ||
      batch * tokens > 1024)
    return 1;
  int64_t n = batch * tokens;
  int64_t *pos = malloc((size_t)(n_axes * n) * sizeof *pos);
  if (!pos) return 0;
  int64_t top = maxp > 0 ? maxp - 1 : 1000000;
  for (int a = 0; a < n_axes; a++) {
    int64_t start = fz_range(f, 0, top);
    for (int64_t i = 0; i < n; i++) {
      int64_t v = start + (i % tokens) * (a + 1) / 2;
      pos[a * n + i] = v > top ? top : v;
    }
  }
  if ((fz_u8(f) & 3) == 0) {
    int64_t at = fz_range(f, 0, n_axes * n - 1);
    pos[at] = (fz_u8(f) & 1) ? fz_edge_i64(f) : maxp;
  }
  for (int64_t i = 0; i < n_axes * n; i++)
    if (pos[i] < 0 || (maxp > 0 && pos[i] >= maxp) || pos[i] >= ((int64_t)1 << 53)) *bad = 1;
  *out = pos;
  return 1;
}

#endif
