/* t5.c - T5's relative position buckets and the learned per-bucket, per-head
 * bias added in place to attention scores. */
#include <inttypes.h>
#include <math.h>

#include "encodings/scores.h"

/* Keys handled per pass of a row: the runs of buckets and the bias row of
 * one pass live on the stack (24 KiB). */
#define T5_CHUNK 2048

/* Precomputed per call: everything of the bucket formula that does not depend
 * on the relative position. */
typedef struct t5_geometry {
  int32_t bidirectional;
  int32_t per_dir;   /* buckets per direction: num_buckets, halved when bidirectional */
  int32_t exact;     /* max_exact = per_dir / 2: distances below are their own bucket */
  int64_t max_distance;
  float log_ratio;   /* (float)ln(max_distance / max_exact), as T5's math.log */
} t5_geometry;

static pe_status t5_geometry_init(const char *fn, int32_t bidirectional, int32_t num_buckets,
                                  int32_t max_distance, t5_geometry *g) {
  if (bidirectional) {
    if (num_buckets < 4 || (num_buckets & 1))
      return pe__fail(PE_ERR_INVALID_ARGUMENT,
                      "%s: num_buckets %d must be even and >= 4 when bidirectional (half the "
                      "buckets per direction, each half needing an exact bucket)",
                      fn, (int)num_buckets);
  } else if (num_buckets < 2) {
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: num_buckets %d must be >= 2", fn,
                    (int)num_buckets);
  }
  g->bidirectional = bidirectional != 0;
  g->per_dir = bidirectional ? num_buckets / 2 : num_buckets;
  g->exact = g->per_dir / 2;
  if (max_distance <= g->exact)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: max_distance %d must be > max_exact %d (half the %d buckets per "
                    "direction): the log-spaced buckets need ln(max_distance / max_exact) > 0",
                    fn, (int)max_distance, (int)g->exact, (int)g->per_dir);
  g->max_distance = max_distance;
  g->log_ratio = (float)log((double)max_distance / (double)g->exact);
  return PE_OK;
}

/* T5's _relative_position_bucket, in T5's float32 arithmetic for the
 * log-spaced part: E + trunc(f32(ln(n / E)) / f32(ln(md / E)) * (nb - E)),
 * capped at nb - 1. Distances >= max_distance go straight to the last
 * bucket, which is what the formula gives there (the ratio is >= 1 up to an
 * ulp, and the cap absorbs the ulp). */
static int32_t t5_bucket(const t5_geometry *g, int64_t rel) {
  int32_t bucket = 0;
  int64_t n;
  if (g->bidirectional) {
    if (rel > 0) bucket = g->per_dir;
    n = rel > 0 ? rel : (rel == INT64_MIN ? INT64_MAX : -rel);
  } else {
    n = rel < 0 ? (rel == INT64_MIN ? INT64_MAX : -rel) : 0;
  }
  if (n < g->exact) return bucket + (int32_t)n;
  if (n >= g->max_distance) return bucket + g->per_dir - 1;
  float r = logf((float)n / (float)g->exact);
  r = r / g->log_ratio;
  r = r * (float)(g->per_dir - g->exact);
  int64_t large = g->exact + (int64_t)r;
  if (large > g->per_dir - 1) large = g->per_dir - 1;
  return bucket + (int32_t)large;
}

PE_API int32_t pe_t5_bucket(int64_t relative_position, int32_t bidirectional, int32_t num_buckets,
                            int32_t max_distance) {
  t5_geometry g = {0};
  if (t5_geometry_init("pe_t5_bucket", bidirectional, num_buckets, max_distance, &g) != PE_OK)
    return -1;
  return t5_bucket(&g, relative_position);
}

typedef struct t5_job {
  pe__scores s;
  const float *table; /* [num_buckets][heads] */
  t5_geometry g;
} t5_job;

/* Relative positions whose bucket is not the far one of their side, at most
 * (max_distance - 1 each way): the near window of t5_range_line. */
#define T5_WIN 512
/* Keys per add_row of t5_range_line: the far parts of its line are this long,
 * so building a head's line costs ~2 * T5_PIECE + window stores (a decode
 * row of 4096 keys is still cut in pieces, not copied into a line per head). */
#define T5_PIECE 512


/* max_distance <= T5_WIN. The bias of a key depends only on rel = key - qpos
 * and is one constant per side for |rel| >= max_distance (the last bucket of
 * each direction; unidirectional: bucket 0 for every rel > 0). So each head
 * gets one line of biases indexed by rel + CH + W (W = max_distance - 1):
 *   [far-negative x CH | rel = -W .. W | far-positive x CH]
 * and every chunk of <= CH keys of every row of the range is one slice of it,
 * added by add_row: no bucket per key and no bias row rebuilt per (row,
 * head), which was half the time of a 512-token causal prefill (perf, AMD
 * EPYC Zen 4). Heads outer, rows inner: a head's rows are adjacent in
 * [B, H, Q, K]. The same biases as t5_range_runs, element for element. */
/* The line index where the piece of keys [k0, k0 + CH) of a row with query
 * qpos starts. rel0 = k0 - qpos < -W - CH: every key is far-negative, as is
 * line[0, CH); rel0 > W: every key far-positive, as line[CH + wlen, +CH). */
static int64_t t5_line_start(int64_t CH, int64_t W, int64_t k0, int64_t qpos) {
  int64_t start = CH + W + (k0 - qpos);
  if (start < 0) start = 0;
  if (start > CH + 2 * W + 1) start = CH + 2 * W + 1;
  return start;
}

static void t5_range_line(const t5_job *j, int64_t begin, int64_t end) {
  const int64_t W = j->g.max_distance - 1, wlen = 2 * W + 1;
  const int64_t CH = j->s.k_len < T5_PIECE ? j->s.k_len : T5_PIECE;
  float line[2 * T5_PIECE + 2 * T5_WIN - 1];
  int32_t wb[2 * T5_WIN - 1];
  /* Only the part [lo, hi) of the line that the range's pieces read is built
   * per head: a causal row never reads its far-positive part nor the window's
   * rel > 0 half (keys past the query are masked), and a 4096-key decode row
   * reads line[0, CH + W + 1). Building the whole line (~2 * CH + wlen
   * stores, wlen of them gathered from the table) was half the time of a
   * causal f16 decode call, 1x32x1x4096 (perf, AMD EPYC Zen 4). */
  int64_t lo = 2 * CH + wlen, hi = 0;
  for (int64_t u = begin; u < end; u++) {
    int64_t b = u / j->s.q_len, i = u % j->s.q_len;
    int64_t qpos = pe__query_pos(j->s.q_positions, b, i, j->s.q_len, j->s.k_len);
    int64_t n = pe__biased_keys(qpos, j->s.k_len, j->s.causal);
    for (int64_t k0 = 0; k0 < n; k0 += CH) {
      int64_t len = n - k0 < CH ? n - k0 : CH, start = t5_line_start(CH, W, k0, qpos);
      if (start < lo) lo = start;
      if (start + len > hi) hi = start + len;
    }
  }
  /* [lo, hi) split over the three parts: t in [n0, n1) far-negative, window
   * r in [w0, w1), far-positive t in [p0, p1) (all empty if hi <= lo) */
  const int64_t n0 = lo < CH ? lo : CH, n1 = hi < CH ? hi : CH;
  const int64_t w0 = lo - CH < 0 ? 0 : lo - CH > wlen ? wlen : lo - CH;
  const int64_t w1 = hi - CH < 0 ? 0 : hi - CH > wlen ? wlen : hi - CH;
  const int64_t p0 = lo - CH - wlen < 0 ? 0 : lo - CH - wlen, p1 = hi - CH - wlen < 0 ? 0 : hi - CH - wlen;
  for (int64_t r = w0; r < w1; r++) wb[r] = t5_bucket(&j->g, r - W);
  const int32_t bneg = t5_bucket(&j->g, -W - 1), bpos = t5_bucket(&j->g, W + 1);
  const int64_t es = (int64_t)j->s.esize;
  for (int64_t h = 0; h < j->s.heads; h++) {
    const float fneg = j->table[bneg * j->s.heads + h], fpos = j->table[bpos * j->s.heads + h];
    for (int64_t t = n0; t < n1; t++) line[t] = fneg;
    for (int64_t r = w0; r < w1; r++) line[CH + r] = j->table[wb[r] * j->s.heads + h];
    for (int64_t t = p0; t < p1; t++) line[CH + wlen + t] = fpos;
    for (int64_t u = begin; u < end; u++) {
      int64_t b = u / j->s.q_len, i = u % j->s.q_len;
      int64_t qpos = pe__query_pos(j->s.q_positions, b, i, j->s.q_len, j->s.k_len);
      int64_t n = pe__biased_keys(qpos, j->s.k_len, j->s.causal);
      char *row = j->s.data + (b * j->s.s_batch + h * j->s.s_head + i * j->s.s_query) * es;
      for (int64_t k0 = 0; k0 < n; k0 += CH) {
        int64_t len = n - k0 < CH ? n - k0 : CH;
        j->s.k->add_row[j->s.dtype](row + k0 * es, line + t5_line_start(CH, W, k0, qpos), len);
      }
      pe__scores_mask_rest(&j->s, row, n);
    }
  }
}

/* Any max_distance. Units are (batch, query) pairs: the buckets of a row are
 * computed once and serve every head. */
static void t5_range_runs(const t5_job *j, int64_t begin, int64_t end) {
  /* A row's buckets come in runs (one per bucket on each side of the query,
   * the far bucket covering most of a long row): they are found once per
   * chunk, then each head's bias row is filled run by run, with no gather. */
  int32_t run_start[T5_CHUNK + 1], run_bucket[T5_CHUNK];
  float bias[T5_CHUNK];
  for (int64_t u = begin; u < end; u++) {
    int64_t b = u / j->s.q_len, i = u % j->s.q_len;
    int64_t qpos = pe__query_pos(j->s.q_positions, b, i, j->s.q_len, j->s.k_len);
    int64_t n = pe__biased_keys(qpos, j->s.k_len, j->s.causal);
    char *row0 = j->s.data + (b * j->s.s_batch + i * j->s.s_query) * (int64_t)j->s.esize;
    for (int64_t k0 = 0; k0 < n; k0 += T5_CHUNK) {
      int32_t len = (int32_t)(n - k0 < T5_CHUNK ? n - k0 : T5_CHUNK), runs = 0;
      for (int32_t t = 0; t < len; t++) {
        int32_t bk = t5_bucket(&j->g, k0 + t - qpos);
        if (runs == 0 || bk != run_bucket[runs - 1]) {
          run_start[runs] = t;
          run_bucket[runs++] = bk;
        }
      }
      run_start[runs] = len;
      for (int64_t h = 0; h < j->s.heads; h++) {
        for (int32_t r = 0; r < runs; r++) {
          float v = j->table[run_bucket[r] * j->s.heads + h];
          for (int32_t t = run_start[r]; t < run_start[r + 1]; t++) bias[t] = v;
        }
        char *row = row0 + (h * j->s.s_head + k0) * (int64_t)j->s.esize;
        j->s.k->add_row[j->s.dtype](row, bias, len);
      }
    }
    for (int64_t h = 0; h < j->s.heads; h++)
      pe__scores_mask_rest(&j->s, row0 + h * j->s.s_head * (int64_t)j->s.esize, n);
  }
}

static void t5_range(void *ctx, int64_t begin, int64_t end) {
  const t5_job *j = ctx;
  if (j->g.max_distance <= T5_WIN)
    t5_range_line(j, begin, end);
  else
    t5_range_runs(j, begin, end);
}

PE_API pe_status pe_t5_add_bias(const pe_tensor *scores, const float *table,
                                int32_t bidirectional, int32_t num_buckets,
                                int32_t max_distance, const int64_t *q_positions,
                                uint32_t flags, pe_threadpool *pool) {
  static const char fn[] = "pe_t5_add_bias";
  pe_status st = pe__check_scores(fn, scores, q_positions, flags);
  if (st != PE_OK) return st;
  if (!table) return pe__fail(PE_ERR_NULL_POINTER, "%s: table is NULL", fn);
  t5_job j = {.g = {0}};
  if ((st = t5_geometry_init(fn, bidirectional, num_buckets, max_distance, &j.g)) != PE_OK)
    return st;
  int64_t heads = scores->shape[1], entries;
  if (__builtin_mul_overflow(heads, (int64_t)num_buckets, &entries))
    return pe__fail(PE_ERR_OVERFLOW, "%s: table of %d buckets x %" PRId64 " heads overflows", fn,
                    (int)num_buckets, heads);
  /* A non-finite bias would only spread NaN/Inf through a softmax; checking
   * the (small) table keeps the result independent of which NaN an add
   * propagates. */
  for (int64_t e = 0; e < entries; e++)
    if (!isfinite(table[e]))
      return pe__fail(PE_ERR_INVALID_ARGUMENT,
                      "%s: table[bucket %" PRId64 "][head %" PRId64 "] = %g is not finite", fn,
                      e / heads, e % heads, (double)table[e]);
  if (pe__tensor_empty(scores)) return PE_OK;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  j.s = pe__scores_of(scores, q_positions, flags);
  j.table = table;
  pe__pool_run(pool, scores->shape[0] * j.s.q_len, 1, 2 * heads * j.s.k_len * (int64_t)j.s.esize,
               t5_range, &j);
  return PE_OK;
}
