/* sinusoidal.c - absolute position embeddings: the fixed sinusoidal table of
 * Vaswani et al. (both column conventions) and gathers from a caller's learned
 * table (BERT, GPT-2), added in place. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "check/check.h"
#include "kernels/isa.h"

/* The geometry of one call. Angles are formed in double precision as the
 * reference codebases write them (a division by base^(2k/d) for the paper's
 * layout, a multiplication by exp(-k ln(base)/(half-1)) for fairseq's), then
 * sin/cos in double (SLEEF, vectorized), rounded once to float32.
 *
 * The frequencies are w_k = hi[k / 64] * lo[k % 64], with hi[i] and lo[j]
 * the formula (pow or exp, as above) at k = 64i and k = j: one double
 * multiply away from the formula at k (within ~2 ulp of double, against
 * pow's own 0.5 ulp and the rounding of its exponent 2k/d, itself up to ~4
 * ulp of the result; far below the float32 output's ulp at any position
 * < 2^53 in what it does to the angle). So a call evaluates pow/exp
 * n_freq/64 + 64 times, not n_freq times per chunk of every thread (26 us
 * per decode step of d_model 4096 when each of the 2048 frequencies was a
 * pow). Frequencies are then formed a chunk of SIN_CHUNK at a time, so the
 * stack holds one chunk whatever d_model is; a call walks its rows once per
 * chunk. */
#define SIN_LO 64
#define SIN_HI ((PE_MAX_HEAD_DIM / 2 + SIN_LO - 1) / SIN_LO)
typedef struct sin_geometry {
  int32_t d_model;
  int32_t concat;  /* PE_SINUSOIDAL_CONCAT */
  int32_t n_freq;  /* interleaved: ceil(d/2) pairs (odd d ends in a sin); concat: d/2 */
  double base, step; /* concat: w_k = exp(-k*step) */
  double hi[SIN_HI], lo[SIN_LO]; /* w_k = hi[k / SIN_LO] * lo[k % SIN_LO] */
} sin_geometry;

#define SIN_CHUNK 256

/* The formula at k: interleaved the divisor base^(2k/d), concat exp(-k*step). */
static double sin_formula(const sin_geometry *g, int32_t k) {
  return g->concat ? exp((double)k * -g->step)
                   : pow(g->base, (double)(2 * k) / (double)g->d_model);
}

static pe_status sin_geometry_init(const char *fn, int32_t d_model, double base, uint32_t flags,
                                   sin_geometry *g) {
  pe_status st = pe__check_flags(fn, flags, PE_SINUSOIDAL_CONCAT);
  if (st != PE_OK) return st;
  int concat = (flags & PE_SINUSOIDAL_CONCAT) != 0;
  int32_t min_d = concat ? 4 : 1;
  if (d_model < min_d || d_model > PE_MAX_HEAD_DIM)
    return pe__fail(PE_ERR_SHAPE, "%s: d_model %d must be in [%d, %d]%s", fn, (int)d_model,
                    (int)min_d, PE_MAX_HEAD_DIM,
                    concat ? " (PE_SINUSOIDAL_CONCAT divides by d_model/2 - 1)" : "");
  if (!isfinite(base) || !(base > 0.0))
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: base %g must be finite and > 0 (10000 is standard)",
                    fn, base);
  g->d_model = d_model;
  g->concat = concat;
  g->base = base;
  /* fairseq/tensor2tensor: the denominator half - 1 makes the last
   * frequency exactly 1/base. DistilBERT: pos / np.power(base, 2*(j//2)/dim). */
  g->n_freq = concat ? d_model / 2 : (d_model + 1) / 2;
  g->step = concat ? log(base) / (double)(d_model / 2 - 1) : 0.0;
  int32_t n_lo = g->n_freq < SIN_LO ? g->n_freq : SIN_LO;
  for (int32_t j = 0; j < n_lo; j++) g->lo[j] = sin_formula(g, j);
  for (int32_t i = 0; i * SIN_LO < g->n_freq; i++) g->hi[i] = sin_formula(g, i * SIN_LO);
  return PE_OK;
}

/* Frequencies [k0, k0+n) (interleaved: the divisors base^(2k/d)). */
static void sin_freqs(const sin_geometry *g, int32_t k0, int32_t n, double *freq) {
  for (int32_t i = 0; i < n; i++) {
    int32_t k = k0 + i;
    freq[i] = g->hi[k / SIN_LO] * g->lo[k % SIN_LO];
  }
}

/* A chunk of one row: sin and cos of frequencies [k0, k0+n) at pos, as
 * the columns they occupy. Interleaved: v[0..ncol) holds columns
 * [2*k0, 2*k0 + ncol). Concat: v[0..n) columns [k0, k0+n) (sin) and
 * v[n..2n) columns [half + k0, ...) (cos). */
static int32_t sin_chunk(const pe_isa *isa, const sin_geometry *g, const double *freq, int32_t k0,
                         int32_t n, int64_t pos, float *v) {
  double p = (double)pos, angle[SIN_CHUNK];
  if (n <= 0) return 0; /* never: callers pass a chunk; tells gcc angle[] is written */
  float sv[SIN_CHUNK], cv[SIN_CHUNK];
  if (g->concat)
    for (int32_t i = 0; i < n; i++) angle[i] = p * freq[i];
  else
    for (int32_t i = 0; i < n; i++) angle[i] = p / freq[i];
  isa->sincos(angle, n, sv, cv);
  if (g->concat) {
    memcpy(v, sv, (size_t)n * sizeof(float));
    memcpy(v + n, cv, (size_t)n * sizeof(float));
    return n;
  }
  int32_t ncol = 0;
  for (int32_t i = 0; i < n; i++) {
    v[ncol++] = sv[i];
    if (2 * (k0 + i) + 1 < g->d_model) v[ncol++] = cv[i]; /* odd d ends in a sin */
  }
  return ncol;
}

/* Apply a chunk to a row: out = v (table) or row += v (add_row). */
typedef void (*sin_put_fn)(const pe_isa *isa, pe_dtype dt, char *row, int64_t esize, int64_t col,
                           const float *v, int64_t n);
static void put_store(const pe_isa *isa, pe_dtype dt, char *row, int64_t esize, int64_t col,
                      const float *v, int64_t n) {
  (void)isa;
  (void)dt;
  memcpy(row + col * esize, v, (size_t)n * sizeof(float));
}
static void put_add(const pe_isa *isa, pe_dtype dt, char *row, int64_t esize, int64_t col,
                    const float *v, int64_t n) {
  isa->add_row[dt](row + col * esize, v, n);
}

/* A chunk computed by sin_chunk (ncol values) into row's columns (put). */
static void sin_apply(const pe_isa *isa, const sin_geometry *g, int32_t k0, int32_t n,
                      const float *v, int32_t ncol, char *row, pe_dtype dt, int64_t esize,
                      sin_put_fn put) {
  if (!g->concat) {
    put(isa, dt, row, esize, 2 * (int64_t)k0, v, ncol);
    return;
  }
  put(isa, dt, row, esize, k0, v, n);
  put(isa, dt, row, esize, g->n_freq + (int64_t)k0, v + n, n);
  if ((g->d_model & 1) && k0 + n == g->n_freq) { /* odd d: a zero column last */
    static const float zero = 0.0f;
    put(isa, dt, row, esize, g->d_model - 1, &zero, 1);
  }
}

PE_API pe_status pe_sinusoidal_table(int64_t n_positions, int32_t d_model, double base,
                                     uint32_t flags, float *out) {
  static const char fn[] = "pe_sinusoidal_table";
  if (!out) return pe__fail(PE_ERR_NULL_POINTER, "%s: out is NULL", fn);
  if (n_positions < 0 || n_positions > PE_MAX_POSITION)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: n_positions %" PRId64 " must be in [0, 2^53]",
                    fn, n_positions);
  sin_geometry g;
  pe_status st = sin_geometry_init(fn, d_model, base, flags, &g);
  if (st != PE_OK) return st;
  /* No object is larger than PTRDIFF_MAX bytes: a larger table cannot be
   * the caller's buffer (the fuzzer found 2^53 x 256, 2^63 bytes). */
  if ((uint64_t)n_positions > (uint64_t)PTRDIFF_MAX / sizeof(float) / (uint64_t)d_model)
    return pe__fail(PE_ERR_OVERFLOW,
                    "%s: %" PRId64 " x %d floats exceed the largest possible object (PTRDIFF_MAX bytes)",
                    fn, n_positions, (int)d_model);
  const pe_isa *isa = pe__isa();
  double freq[SIN_CHUNK];
  for (int32_t k0 = 0; k0 < g.n_freq; k0 += SIN_CHUNK) {
    int32_t n = g.n_freq - k0 < SIN_CHUNK ? g.n_freq - k0 : SIN_CHUNK;
    sin_freqs(&g, k0, n, freq);
    for (int64_t p = 0; p < n_positions; p++) {
      float v[2 * SIN_CHUNK];
      int32_t ncol = sin_chunk(isa, &g, freq, k0, n, p, v);
      sin_apply(isa, &g, k0, n, v, ncol, (char *)(out + p * d_model), PE_F32, 4, put_store);
    }
  }
  return PE_OK;
}

/* x must be [batch, 1, tokens, d_model], written in place. */
static pe_status check_embeddings(const char *fn, const pe_tensor *x) {
  pe_status st = pe__check_tensor(fn, "x", x, 1);
  if (st != PE_OK) return st;
  if (x->shape[1] != 1)
    return pe__fail(PE_ERR_SHAPE, "%s: x->shape[1] = %" PRId64 " must be 1 ([batch, 1, tokens, d_model])",
                    fn, x->shape[1]);
  return PE_OK;
}

typedef struct embed_job {
  const pe_isa *k;
  char *data;
  size_t esize;
  pe_dtype dtype;
  int64_t batch, tokens, d_model;
  int64_t s_batch, s_token;
  const int64_t *positions;
  /* sinusoidal */
  const sin_geometry *g;
  /* learned */
  const char *table;
  size_t t_esize;
  pe_dtype t_dtype;
  int64_t t_stride;
} embed_job;

/* Units: tokens when positions is NULL (one row serves every batch row),
 * else (batch, token) pairs. Chunk-major: each chunk's frequencies are
 * computed once per range. */
static void sinusoidal_range(void *ctx, int64_t begin, int64_t end) {
  const embed_job *j = ctx;
  const sin_geometry *g = j->g;
  double freq[SIN_CHUNK];
  float v[2 * SIN_CHUNK];
  for (int32_t k0 = 0; k0 < g->n_freq; k0 += SIN_CHUNK) {
    int32_t n = g->n_freq - k0 < SIN_CHUNK ? g->n_freq - k0 : SIN_CHUNK;
    sin_freqs(g, k0, n, freq);
    for (int64_t u = begin; u < end; u++) {
      int64_t b0 = j->positions ? u / j->tokens : 0, t = j->positions ? u % j->tokens : u;
      int64_t b1 = j->positions ? b0 + 1 : j->batch; /* one row of values for every batch row */
      int32_t ncol = sin_chunk(j->k, g, freq, k0, n, j->positions ? j->positions[u] : u, v);
      for (int64_t b = b0; b < b1; b++)
        sin_apply(j->k, g, k0, n, v, ncol,
                  j->data + (b * j->s_batch + t * j->s_token) * (int64_t)j->esize, j->dtype,
                  (int64_t)j->esize, put_add);
    }
  }
}

PE_API pe_status pe_sinusoidal_add(const pe_tensor *x, const int64_t *positions, double base,
                                   uint32_t flags, pe_threadpool *pool) {
  static const char fn[] = "pe_sinusoidal_add";
  pe_status st = check_embeddings(fn, x);
  if (st != PE_OK) return st;
  if (x->shape[3] > PE_MAX_HEAD_DIM)
    return pe__fail(PE_ERR_SHAPE, "%s: d_model (x->shape[3]) %" PRId64 " must be <= %d", fn,
                    x->shape[3], PE_MAX_HEAD_DIM);
  sin_geometry g;
  if ((st = sin_geometry_init(fn, (int32_t)x->shape[3], base, flags, &g)) != PE_OK) return st;
  int64_t batch = x->shape[0], tokens = x->shape[2];
  pe__pos_check pc = {.fn = fn, .name = "position", .axis = "", .pos = positions,
                      .batch = batch, .tokens = tokens, .bound = PE_POS_ANY};
  if ((st = pe__check_positions(&pc)) != PE_OK) return st;
  if (pe__tensor_empty(x)) return PE_OK;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  embed_job j = {.k = pe__isa(), .data = x->data, .esize = pe__dtype_size(x->dtype),
                 .dtype = x->dtype, .batch = batch, .tokens = tokens, .d_model = x->shape[3],
                 .s_batch = pe__stride(x, 0), .s_token = pe__stride(x, 2), .positions = positions,
                 .g = &g};
  int64_t units = positions ? batch * tokens : tokens;
  int64_t rows_per_unit = positions ? 1 : batch;
  pe__pool_run(pool, units, 1, 2 * rows_per_unit * j.d_model * (int64_t)j.esize,
               sinusoidal_range, &j);
  return PE_OK;
}

/* Table rows are widened to float32 in chunks of this many elements when the
 * table is not float32 (stack buffer, 16 KiB). */
#define LEARNED_CHUNK 4096

static void learned_range(void *ctx, int64_t begin, int64_t end) {
  const embed_job *j = ctx;
  float buf[LEARNED_CHUNK];
  for (int64_t u = begin; u < end; u++) {
    int64_t b = u / j->tokens, t = u % j->tokens;
    int64_t p = j->positions ? j->positions[u] : t;
    char *row = j->data + (b * j->s_batch + t * j->s_token) * (int64_t)j->esize;
    const char *src = j->table + p * j->t_stride * (int64_t)j->t_esize;
    if (j->t_dtype == PE_F32) {
      j->k->add_row[j->dtype](row, (const float *)src, j->d_model);
      continue;
    }
    for (int64_t c0 = 0; c0 < j->d_model; c0 += LEARNED_CHUNK) {
      int64_t len = j->d_model - c0 < LEARNED_CHUNK ? j->d_model - c0 : LEARNED_CHUNK;
      j->k->load_row[j->t_dtype](buf, src + c0 * (int64_t)j->t_esize, len);
      j->k->add_row[j->dtype](row + c0 * (int64_t)j->esize, buf, len);
    }
  }
}

PE_API pe_status pe_learned_add(const pe_tensor *x, const pe_tensor *table,
                                const int64_t *positions, pe_threadpool *pool) {
  static const char fn[] = "pe_learned_add";
  pe_status st = check_embeddings(fn, x);
  if (st != PE_OK) return st;
  if ((st = pe__check_tensor(fn, "table", table, 0)) != PE_OK) return st;
  if (table->shape[0] != 1 || table->shape[1] != 1)
    return pe__fail(PE_ERR_SHAPE,
                    "%s: table shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                    "] must be [1, 1, max_len, d_model]",
                    fn, table->shape[0], table->shape[1], table->shape[2], table->shape[3]);
  if (table->shape[3] != x->shape[3])
    return pe__fail(PE_ERR_SHAPE, "%s: table d_model (shape[3]) %" PRId64 " != x d_model %" PRId64,
                    fn, table->shape[3], x->shape[3]);
  if (pe__tensors_overlap(x, table))
    return pe__fail(PE_ERR_SHAPE, "%s: x and table share memory: the table would be modified", fn);
  int64_t batch = x->shape[0], tokens = x->shape[2], max_len = table->shape[2];
  if (max_len == 0 && batch && tokens)
    return pe__fail(PE_ERR_POSITION_OUT_OF_RANGE,
                    "%s: the table has no rows (max_len 0): no position can be looked up", fn);
  /* learned embeddings cannot extrapolate: positions past the table are refused */
  pe__pos_check pc = {.fn = fn, .name = "position", .axis = "", .owner = "table",
                      .pos = positions, .batch = batch, .tokens = tokens, .null_is_index = 1,
                      .bound = {max_len, "max_len"}};
  if ((st = pe__check_positions(&pc)) != PE_OK) return st;
  if (pe__tensor_empty(x)) return PE_OK;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  embed_job j = {.k = pe__isa(), .data = x->data, .esize = pe__dtype_size(x->dtype),
                 .dtype = x->dtype, .batch = batch, .tokens = tokens, .d_model = x->shape[3],
                 .s_batch = pe__stride(x, 0), .s_token = pe__stride(x, 2), .positions = positions,
                 .table = table->data, .t_esize = pe__dtype_size(table->dtype),
                 .t_dtype = table->dtype, .t_stride = pe__stride(table, 2)};
  pe__pool_run(pool, batch * tokens, 1,
               j.d_model * (int64_t)(2 * j.esize + j.t_esize), learned_range, &j);
  return PE_OK;
}
