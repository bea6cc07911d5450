/* alibi.c - ALiBi (Press et al., "Train Short, Test Long"): per-head slopes and
 * the linear distance bias added in place to attention scores. */
#include <inttypes.h>
#include <math.h>

#include "encodings/scores.h"

#define ALIBI_MAX_HEADS 65536

/* Slope of head h (0-based) of n: with c the largest power of two <= n,
 * heads 0..c-1 get 2^(-max_bias*(h+1)/c) (Press et al.), and heads c..n-1
 * get the odd powers 2^(-max_bias*(2m+1)/(2c)), m = h - c: the slopes of a
 * 2c-head model that the first c did not use (BLOOM's build_alibi_tensor and
 * MPT's slopes[1::2] ++ slopes[::2] are both this sequence). Computed in
 * double and rounded once, so each slope is the correctly rounded formula up
 * to exp2's last double bit; BLOOM's float32 pow can differ by a few ulp. */
static float alibi_slope(int32_t n, int32_t h, double max_bias) {
  int32_t c = 1;
  while (c <= n / 2) c *= 2;
  if (h < c) return (float)exp2(-max_bias * (double)(h + 1) / (double)c);
  return (float)exp2(-max_bias * (double)(2 * (h - c) + 1) / (2.0 * (double)c));
}

static pe_status check_max_bias(const char *fn, int32_t n_heads, double max_bias) {
  if (n_heads < 1 || n_heads > ALIBI_MAX_HEADS)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: n_heads %d must be in [1, %d]", fn,
                    (int)n_heads, ALIBI_MAX_HEADS);
  if (!isfinite(max_bias) || !(max_bias > 0.0))
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: max_bias %g must be finite and > 0 (8 is standard)",
                    fn, max_bias);
  return PE_OK;
}

PE_API pe_status pe_alibi_slopes(int32_t n_heads, double max_bias, float *out) {
  static const char fn[] = "pe_alibi_slopes";
  if (!out) return pe__fail(PE_ERR_NULL_POINTER, "%s: out is NULL", fn);
  pe_status st = check_max_bias(fn, n_heads, max_bias);
  if (st != PE_OK) return st;
  for (int32_t h = 0; h < n_heads; h++) out[h] = alibi_slope(n_heads, h, max_bias);
  return PE_OK;
}

typedef struct alibi_job {
  pe__scores s;
  const float *slopes; /* NULL: the standard slopes with max_bias 8 */
} alibi_job;

/* Score row (b, h, i). */
static char *alibi_row_at(const alibi_job *j, int64_t b, int64_t h, int64_t i) {
  return j->s.data + (b * j->s.s_batch + h * j->s.s_head + i * j->s.s_query) * (int64_t)j->s.esize;
}

/* Query positions and k_len below this use a per-head line of biases. */
#define ALIBI_LINE 2048
/* Rows of one head a range must hold for the line to pay for itself. */
#define ALIBI_LINE_ROWS 8

/* The bias of key j for query qpos depends only on qpos - j, so the rows of
 * one head can share a line line[m] = neg_slope * (float)|C - m| (C =
 * ALIBI_LINE), built once (alibi_row on a row of -0.0f: -0 + b = b for every
 * b, -0 included) and each row becomes add_row(row, line + C - qpos, n): the
 * same x + bias, but without converting distances per row (alibi_row f16 on
 * AMD EPYC Zen 4: 1.3 ns per 16 keys against add_row's 1.05; pe-bench ALiBi
 * prefill 1x32x512x512 causal f16, fastest of 51, 510-513 -> 451-457 us,
 * x stream bound 0.62 -> 0.67; bf16 and f32 about the same). Only
 * line[lo, hi), the part the rows read, is built. Returns 0 (nothing
 * written) when some query of the rows is at or past C. */
static int alibi_line_rows(const alibi_job *j, int64_t b, int64_t h, int64_t i0, int64_t rows,
                           float ns, float *line) {
  const int64_t C = ALIBI_LINE;
  int64_t lo = 2 * C, hi = 0;
  for (int64_t i = i0; i < i0 + rows; i++) {
    int64_t qpos = pe__query_pos(j->s.q_positions, b, i, j->s.q_len, j->s.k_len);
    if (qpos >= C) return 0;
    int64_t n = pe__biased_keys(qpos, j->s.k_len, j->s.causal);
    if (C - qpos < lo) lo = C - qpos;
    if (C - qpos + n > hi) hi = C - qpos + n;
  }
  for (int64_t m = lo; m < hi; m++) line[m] = -0.0f;
  j->s.k->alibi_row[PE_F32](line + lo, hi - lo, C - lo, ns);
  for (int64_t i = i0; i < i0 + rows; i++) {
    char *row = alibi_row_at(j, b, h, i);
    int64_t qpos = pe__query_pos(j->s.q_positions, b, i, j->s.q_len, j->s.k_len);
    int64_t n = pe__biased_keys(qpos, j->s.k_len, j->s.causal);
    j->s.k->add_row[j->s.dtype](row, line + (C - qpos), n);
    pe__scores_mask_rest(&j->s, row, n);
  }
  return 1;
}

/* Units are score rows in [batch][head][query] order. */
static void alibi_range(void *ctx, int64_t begin, int64_t end) {
  const alibi_job *j = ctx;
  float line[2 * ALIBI_LINE];
  for (int64_t u = begin; u < end;) {
    int64_t i0 = u % j->s.q_len, h = (u / j->s.q_len) % j->s.heads, b = u / (j->s.q_len * j->s.heads);
    int64_t rows = end - u < j->s.q_len - i0 ? end - u : j->s.q_len - i0; /* of head (b, h) */
    float slope = j->slopes ? j->slopes[h] : alibi_slope((int32_t)j->s.heads, (int32_t)h, 8.0);
    u += rows;
    if (rows >= ALIBI_LINE_ROWS && j->s.k_len <= ALIBI_LINE &&
        alibi_line_rows(j, b, h, i0, rows, -slope, line))
      continue;
    for (int64_t i = i0; i < i0 + rows; i++) {
      char *row = alibi_row_at(j, b, h, i);
      int64_t qpos = pe__query_pos(j->s.q_positions, b, i, j->s.q_len, j->s.k_len);
      int64_t n = pe__biased_keys(qpos, j->s.k_len, j->s.causal);
      j->s.k->alibi_row[j->s.dtype](row, n, qpos, -slope);
      pe__scores_mask_rest(&j->s, row, n);
    }
  }
}

PE_API pe_status pe_alibi_add_bias(const pe_tensor *scores, const float *slopes,
                                   const int64_t *q_positions, uint32_t flags,
                                   pe_threadpool *pool) {
  static const char fn[] = "pe_alibi_add_bias";
  pe_status st = pe__check_scores(fn, scores, q_positions, flags);
  if (st != PE_OK) return st;
  int64_t heads = scores->shape[1];
  if (slopes) {
    for (int64_t h = 0; h < heads; h++)
      if (!isfinite(slopes[h]))
        return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: slopes[%" PRId64 "] = %g is not finite", fn,
                        h, (double)slopes[h]);
  } else if (heads > ALIBI_MAX_HEADS) {
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: slopes NULL (standard slopes) supports up to %d heads, scores have %" PRId64,
                    fn, ALIBI_MAX_HEADS, heads);
  }
  if (pe__tensor_empty(scores)) return PE_OK;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  alibi_job j = {.s = pe__scores_of(scores, q_positions, flags), .slopes = slopes};
  int64_t rows = scores->shape[0] * heads * j.s.q_len;
  /* read + written per row */
  pe__pool_run(pool, rows, 1, 2 * j.s.k_len * (int64_t)j.s.esize, alibi_range, &j);
  return PE_OK;
}
