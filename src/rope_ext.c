/* rope_ext.c - RoPE for serving engines: the rotation fused into the KV-cache
 * write (pe_apply_rope_qk_store), multi-axis RoPE (pe_apply_mrope_qk) and one
 * call over sequences with different frequency sets (pe_apply_rope_qk_multi).
 *
 * All three are one engine: for a block of tokens of one sequence, assemble
 * each token's [cos | sin] row (a table row of the sequence's cache, a row
 * computed on the fly, or, for M-RoPE, a row gathered frequency by frequency
 * from the rows of the three axis positions), then hand the block to the
 * rotation kernels or, for the cache write, to the rotate-and-store kernels
 * (kernels/isa.h). The rows are exact copies of
 * what pe_apply_rope_qk uses, so results are bit-identical to it wherever the
 * operations coincide, and across ISAs because every kernel is. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/isa.h"
#include "rope_internal.h"

/* ---- the engine ---- */

/* Tokens per block and the L1 budget of their cos/sin rows: rope.c's values,
 * for the same reason (rows reused by every head of q and k). */
#define EXT_BLOCK_TOKENS 32
#define EXT_BLOCK_FLOATS 4096
/* Frequencies per on-the-fly M-RoPE chunk (three rows of it on the stack). */
#define MROPE_CHUNK 64

typedef struct ext_operand {
  char *data; /* NULL: absent */
  pe_dtype dtype;
  int64_t esize, heads;
  int64_t s_batch, s_head, s_token; /* elements */
} ext_operand;

typedef struct ext_job {
  const pe_isa *kern;
  const pe_rope_cache *const *caches; /* caches[cache_index[b]] (index NULL: caches[0]) */
  const int32_t *cache_index;
  int32_t half, head_dim, style, inverse;
  int64_t batch, tokens;
  const int64_t *pos;   /* [batch][tokens], or [3][batch][tokens] with M-RoPE; NULL = t */
  const uint8_t *axis;  /* M-RoPE: axis (0 t, 1 h, 2 w) of each frequency; NULL = plain */
  ext_operand q, k;     /* rotated in place (k: unless stored) */
  /* Cache write: k is read, its rotation written to the slot rows of dst. */
  const int64_t *slots; /* [batch][tokens]; NULL: no store */
  char *dst;
  pe_dtype dst_dtype;
  int64_t dst_esize, dst_block, dst_s_block, dst_s_head, dst_s_slot;
} ext_job;

/* The [cos | sin] row of one token, either a pointer into a table or
 * computed into `scratch` (2*half floats). */
static const float *plain_row(const ext_job *j, const pe_rope_cache *c, int64_t p,
                              float *scratch) {
  if (c->table) return c->table + p * 2 * (int64_t)j->half;
  j->kern->rope_sincos(p, 1, c->inv_freq, j->half, (float)c->attention_factor, scratch);
  return scratch;
}

/* M-RoPE: frequency i takes cos/sin at the position of its axis. With a
 * table that is a gather from three rows; on the fly, each chunk of
 * frequencies is computed at the three positions (rope_sincos is elementwise,
 * so a chunk's values equal the full row's) and gathered. */
static const float *mrope_row(const ext_job *j, const pe_rope_cache *c, const int64_t p[3],
                              float *out) {
  if (p[0] == p[1] && p[1] == p[2]) return plain_row(j, c, p[0], out); /* text token */
  const int32_t half = j->half;
  const uint8_t *axis = j->axis;
  if (c->table) {
    const float *r[3];
    for (int a = 0; a < 3; a++) r[a] = c->table + p[a] * 2 * (int64_t)half;
    for (int32_t i = 0; i < half; i++) {
      const float *src = r[axis[i]];
      out[i] = src[i];
      out[half + i] = src[half + i];
    }
    return out;
  }
  float tmp[3][2 * MROPE_CHUNK];
  for (int32_t i0 = 0; i0 < half; i0 += MROPE_CHUNK) {
    int32_t n = half - i0 < MROPE_CHUNK ? half - i0 : MROPE_CHUNK;
    int need[3] = {0, 0, 0};
    for (int32_t i = 0; i < n; i++) need[axis[i0 + i]] = 1;
    for (int a = 0; a < 3; a++)
      if (need[a])
        j->kern->rope_sincos(p[a], 1, c->inv_freq + i0, n, (float)c->attention_factor, tmp[a]);
    for (int32_t i = 0; i < n; i++) {
      const float *src = tmp[axis[i0 + i]];
      out[i0 + i] = src[i];
      out[half + i0 + i] = src[n + i];
    }
  }
  return out;
}

static void ext_range(void *ctx, int64_t begin, int64_t end) {
  const ext_job *j = ctx;
  const int64_t row_floats = 2 * (int64_t)j->half;
  const int64_t bt = j->batch * j->tokens;
  float rows[PE_MAX_HEAD_DIM]; /* assembled rows: block * row_floats <= max(4096, head_dim) */
  const float *cs[EXT_BLOCK_TOKENS];
  const void *src[EXT_BLOCK_TOKENS];
  void *dst[EXT_BLOCK_TOKENS];
  const float *dcs[EXT_BLOCK_TOKENS], *sn[EXT_BLOCK_TOKENS], *dsn[EXT_BLOCK_TOKENS];
  int64_t block = EXT_BLOCK_FLOATS / row_floats;
  if (block > EXT_BLOCK_TOKENS) block = EXT_BLOCK_TOKENS;
  if (block < 1) block = 1;
  for (int64_t u = begin; u < end;) {
    int64_t b = u / j->tokens, t0 = u % j->tokens;
    int64_t n = block;
    if (n > j->tokens - t0) n = j->tokens - t0; /* a block never crosses a sequence */
    if (n > end - u) n = end - u;
    const pe_rope_cache *c = j->caches[j->cache_index ? j->cache_index[b] : 0];
    for (int64_t i = 0; i < n; i++) {
      float *scratch = rows + i * row_floats;
      if (j->axis) {
        int64_t p[3];
        for (int a = 0; a < 3; a++) p[a] = j->pos ? j->pos[a * bt + u + i] : t0 + i;
        cs[i] = mrope_row(j, c, p, scratch);
      } else {
        cs[i] = plain_row(j, c, j->pos ? j->pos[u + i] : t0 + i, scratch);
      }
      /* Inverse: rows with sin negated, once per token, and the kernels run
       * their forward form. sin is never NaN (the reduction is bounded), so
       * the sign flip equals the kernels' own multiply by -1 bit for bit. */
      if (j->inverse) {
        if (cs[i] != scratch) memcpy(scratch, cs[i], (size_t)row_floats * sizeof(float));
        for (int64_t r = j->half; r < row_floats; r++) scratch[r] = -scratch[r];
        cs[i] = scratch;
      }
    }
    const ext_operand *q = &j->q, *k = &j->k;
    for (int64_t i = 0; i < n; i++) sn[i] = cs[i] + j->half;
    pe_rope_block rb = {.cos = cs, .sin = sn, .n_tokens = n, .n_pairs = j->half,
                         .pair_dist = j->half, .style = j->style};
    if (q->data) {
      char *base = q->data + (b * q->s_batch + t0 * q->s_token) * q->esize;
      rb.n_heads = q->heads;
      j->kern->rope_rows[q->dtype](&rb, base, q->s_head, q->s_token);
    }
    if (k->data && !j->slots) {
      char *base = k->data + (b * k->s_batch + t0 * k->s_token) * k->esize;
      rb.n_heads = k->heads;
      j->kern->rope_rows[k->dtype](&rb, base, k->s_head, k->s_token);
    } else if (k->data) {
      int64_t m = 0;
      for (int64_t i = 0; i < n; i++) {
        int64_t s = j->slots[u + i];
        if (s < 0) continue; /* -1: padding, nothing stored */
        int64_t blk = s / j->dst_block, off = s % j->dst_block;
        src[m] = k->data + (b * k->s_batch + (t0 + i) * k->s_token) * k->esize;
        dst[m] = j->dst + (blk * j->dst_s_block + off * j->dst_s_slot) * j->dst_esize;
        dcs[m] = cs[i];
        dsn[m] = sn[i];
        m++;
      }
      if (m) {
        pe_rope_block sb = {.cos = dcs, .sin = dsn, .n_tokens = m, .n_heads = k->heads,
                            .n_pairs = j->half, .pair_dist = j->half, .style = j->style};
        j->kern->rope_store_rows[k->dtype][j->dst_dtype](&sb, src, k->s_head, dst, j->dst_s_head);
        /* channels past the rotation: converted (a same-dtype copy keeps the bits) */
        int64_t rot = 2 * (int64_t)j->half, rest = j->head_dim - rot;
        for (int64_t t = 0; rest > 0 && t < m; t++)
          for (int64_t h = 0; h < k->heads; h++)
            j->kern->convert[k->dtype][j->dst_dtype](
                (const char *)src[t] + (h * k->s_head + rot) * k->esize,
                (char *)dst[t] + (h * j->dst_s_head + rot) * j->dst_esize, rest);
      }
    }
    u += n;
  }
}

static void operand_from(ext_operand *op, const pe_tensor *t) {
  memset(op, 0, sizeof *op);
  if (!t) return;
  op->data = t->data;
  op->dtype = t->dtype;
  op->esize = (int64_t)pe__dtype_size(t->dtype);
  op->heads = t->shape[1];
  op->s_batch = pe__stride(t, 0);
  op->s_head = pe__stride(t, 1);
  op->s_token = pe__stride(t, 2);
}

static void run_job(ext_job *j, pe_threadpool *pool) {
  int64_t bytes = 0;
  if (j->q.data) bytes += j->q.heads * j->head_dim * j->q.esize * 2;
  if (j->k.data)
    bytes += j->k.heads * j->head_dim * (j->k.esize + (j->slots ? j->dst_esize : j->k.esize));
  pe__pool_run(pool, j->batch * j->tokens, 1, bytes, ext_range, j);
}

/* ---- validation shared by the entry points ---- */

static pe_status check_operand(const char *fn, const char *name, const pe_tensor *t,
                               int32_t head_dim, int writable) {
  pe_status st = pe__check_tensor(fn, name, t, writable);
  if (st != PE_OK) return st;
  if (t->shape[3] != head_dim)
    return pe__fail(PE_ERR_SHAPE, "%s: %s head_dim (shape[3]) %" PRId64 " != cache head_dim %d",
                    fn, name, t->shape[3], (int)head_dim);
  return PE_OK;
}

/* q and/or k (not both NULL), k read-only when it is only a source. */
static pe_status check_qk(const char *fn, const pe_tensor *q, const pe_tensor *k, int32_t head_dim,
                          int k_writable) {
  pe_status st;
  if (!q && !k) return pe__fail(PE_ERR_NULL_POINTER, "%s: q and k are both NULL", fn);
  if (q && (st = check_operand(fn, "q", q, head_dim, 1)) != PE_OK) return st;
  if (k && (st = check_operand(fn, "k", k, head_dim, k_writable)) != PE_OK) return st;
  if (q && k) {
    if (q->shape[0] != k->shape[0] || q->shape[2] != k->shape[2])
      return pe__fail(PE_ERR_SHAPE,
                      "%s: q [batch %" PRId64 ", tokens %" PRId64 "] and k [batch %" PRId64
                      ", tokens %" PRId64 "] must match",
                      fn, q->shape[0], q->shape[2], k->shape[0], k->shape[2]);
    if (pe__same_storage(q, k))
      return pe__fail(PE_ERR_SHAPE, "%s: q and k start at the same address: they would be rotated twice",
                      fn);
  }
  return PE_OK;
}

/* The byte range [lo, hi) a (validated) tensor spans. */
static void byte_span(const pe_tensor *t, uintptr_t *lo, uintptr_t *hi) {
  int64_t es = (int64_t)pe__dtype_size(t->dtype), a = 0, b = t->shape[3];
  for (int i = 0; i < 3; i++) {
    int64_t span = (t->shape[i] - 1) * t->stride[i];
    if (span < 0) a += span;
    else b += span;
  }
  *lo = (uintptr_t)t->data - (uintptr_t)(-a * es);
  *hi = (uintptr_t)t->data + (uintptr_t)(b * es);
}

static int spans_overlap(const pe_tensor *x, const pe_tensor *y) {
  uintptr_t xl, xh, yl, yh;
  byte_span(x, &xl, &xh);
  byte_span(y, &yl, &yh);
  return xl < yh && yl < xh;
}

/* Positions of one axis (or the plain [batch][tokens] array): every entry of
 * batch row b below the limit of that row's cache. */
static pe_status check_positions(const char *fn, const char *axis_name, const int64_t *pos,
                                 int64_t batch, int64_t tokens,
                                 const pe_rope_cache *const *caches, const int32_t *cache_index) {
  for (int64_t b = 0; b < batch; b++) {
    int32_t ci = cache_index ? cache_index[b] : 0;
    const pe_rope_cache *c = caches[ci];
    int64_t limit = c->table ? c->p.max_positions : PE_MAX_POSITION;
    const char *what = c->table ? "max_positions" : "2^53";
    if (!pos) {
      if (tokens > limit)
        return pe__fail(PE_ERR_POSITION_OUT_OF_RANGE,
                        "%s: positions NULL means 0..%" PRId64 ", past cache %d %s %" PRId64, fn,
                        tokens - 1, (int)ci, what, limit);
      continue;
    }
    for (int64_t t = 0; t < tokens; t++) {
      int64_t p = pos[b * tokens + t];
      if (p < 0)
        return pe__fail(PE_ERR_POSITION_OUT_OF_RANGE,
                        "%s: position %" PRId64 " at [%sbatch %" PRId64 ", token %" PRId64
                        "] is negative",
                        fn, p, axis_name, b, t);
      if (p >= limit)
        return pe__fail(PE_ERR_POSITION_OUT_OF_RANGE,
                        "%s: position %" PRId64 " at [%sbatch %" PRId64 ", token %" PRId64
                        "] >= cache %d %s %" PRId64,
                        fn, p, axis_name, b, t, (int)ci, what, limit);
    }
  }
  return PE_OK;
}

/* ---- pe_apply_rope_qk_store: slot validation ---- */

/* A run of consecutive tokens whose slots are consecutive: [lo, hi) slots,
 * starting at flat token index `first`. Prefill slot mappings are a few runs
 * (one per cache block), so duplicates are looked for among runs. */
typedef struct slot_run {
  int64_t lo, hi, first;
} slot_run;

/* The next run at or after flat token u (slots -1 skipped); returns the flat
 * index after it, or n when there is none (r->lo = -1). */
static int64_t next_run(const int64_t *slots, int64_t n, int64_t u, slot_run *r) {
  while (u < n && slots[u] < 0) u++;
  r->lo = -1;
  if (u >= n) return n;
  r->lo = slots[u];
  r->first = u;
  int64_t v = u + 1;
  while (v < n && slots[v] == slots[v - 1] + 1) v++;
  r->hi = r->lo + (v - u);
  return v;
}

static void sift_down(slot_run *a, int64_t i, int64_t n) {
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && a[c + 1].lo > a[c].lo) c++;
    if (a[c].lo <= a[i].lo) return;
    slot_run t = a[i];
    a[i] = a[c];
    a[c] = t;
    i = c;
  }
}

/* Heapsort by lo: in place, no allocation (qsort may allocate). */
static void sort_runs(slot_run *a, int64_t n) {
  for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(a, i, n);
  for (int64_t e = n - 1; e > 0; e--) {
    slot_run t = a[0];
    a[0] = a[e];
    a[e] = t;
    sift_down(a, 0, e);
  }
}

static pe_status duplicate_error(const char *fn, int64_t tokens, const slot_run *x,
                                 const slot_run *y) {
  int64_t s = x->lo > y->lo ? x->lo : y->lo; /* the first slot both runs hold */
  int64_t ux = x->first + (s - x->lo), uy = y->first + (s - y->lo);
  if (ux > uy) {
    int64_t t = ux;
    ux = uy;
    uy = t;
  }
  return pe__fail(PE_ERR_INVALID_ARGUMENT,
                  "%s: slot_mapping has slot %" PRId64 " twice, at [batch %" PRId64
                  ", token %" PRId64 "] and [batch %" PRId64 ", token %" PRId64
                  "] (the stored key would depend on the order of writes)",
                  fn, s, ux / tokens, ux % tokens, uy / tokens, uy % tokens);
}

/* Runs sorted per group of RUNS_CAP on the stack; each group is checked
 * within itself and against every later run by binary search. One group (one
 * pass) for any realistic mapping; a pathological one costs a pass per group. */
#define RUNS_CAP 512

static pe_status check_slots(const char *fn, const int64_t *slots, int64_t batch, int64_t tokens,
                             int64_t n_slots) {
  if (!slots) return pe__fail(PE_ERR_NULL_POINTER, "%s: slot_mapping is NULL", fn);
  int64_t n = batch * tokens;
  for (int64_t u = 0; u < n; u++)
    if (slots[u] < -1 || slots[u] >= n_slots)
      return pe__fail(PE_ERR_INVALID_ARGUMENT,
                      "%s: slot_mapping %" PRId64 " at [batch %" PRId64 ", token %" PRId64
                      "] is outside [0, %" PRId64 ") (num_blocks * block_size of k_cache; -1 skips the token)",
                      fn, slots[u], u / tokens, u % tokens, n_slots);
  slot_run g[RUNS_CAP];
  for (int64_t group_start = 0;;) { /* group_start: flat index where the group's runs begin */
    int64_t m = 0, u = group_start;
    slot_run r;
    while (m < RUNS_CAP) {
      u = next_run(slots, n, u, &r);
      if (r.lo < 0) break;
      g[m++] = r;
    }
    if (m == 0) return PE_OK;
    sort_runs(g, m);
    for (int64_t i = 1; i < m; i++)
      if (g[i].lo < g[i - 1].hi) return duplicate_error(fn, tokens, &g[i - 1], &g[i]);
    /* Later runs against the group: the last run starting before r.hi. */
    for (int64_t v = u;;) {
      v = next_run(slots, n, v, &r);
      if (r.lo < 0) break;
      int64_t a = 0, b = m; /* first index with lo >= r.hi */
      while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if (g[mid].lo < r.hi) a = mid + 1;
        else b = mid;
      }
      if (a > 0 && g[a - 1].hi > r.lo) return duplicate_error(fn, tokens, &g[a - 1], &r);
    }
    if (u >= n) return PE_OK;
    group_start = u;
  }
}

/* ---- entry points ---- */

PE_API pe_status pe_apply_rope_qk_store(const pe_rope_cache *c, const pe_tensor *q,
                                        const pe_tensor *k, const pe_tensor *k_cache,
                                        const int64_t *slot_mapping, const int64_t *positions,
                                        uint32_t flags, pe_threadpool *pool) {
  static const char fn[] = "pe_apply_rope_qk_store";
  pe_status st;
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is NULL", fn);
  if (!k) return pe__fail(PE_ERR_NULL_POINTER, "%s: k is NULL (use pe_apply_rope_qk for q alone)", fn);
  if (!k_cache) return pe__fail(PE_ERR_NULL_POINTER, "%s: k_cache is NULL", fn);
  int32_t hd = c->p.head_dim;
  if ((st = check_qk(fn, q, k, hd, 0)) != PE_OK) return st;
  if ((st = check_operand(fn, "k_cache", k_cache, hd, 1)) != PE_OK) return st;
  if (k_cache->shape[1] != k->shape[1])
    return pe__fail(PE_ERR_SHAPE, "%s: k_cache heads (shape[1]) %" PRId64 " != k heads %" PRId64,
                    fn, k_cache->shape[1], k->shape[1]);
  if (spans_overlap(k_cache, k))
    return pe__fail(PE_ERR_SHAPE, "%s: k_cache and k overlap in memory", fn);
  if (q && spans_overlap(k_cache, q))
    return pe__fail(PE_ERR_SHAPE, "%s: k_cache and q overlap in memory", fn);
  if ((st = pe__check_flags(fn, flags, PE_ROPE_INVERSE)) != PE_OK) return st;
  int64_t batch = k->shape[0], tokens = k->shape[2];
  const pe_rope_cache *const caches[1] = {c};
  if ((st = check_positions(fn, "", positions, batch, tokens, caches, NULL)) != PE_OK) return st;
  if ((st = check_slots(fn, slot_mapping, batch, tokens, k_cache->shape[0] * k_cache->shape[2])) !=
      PE_OK)
    return st;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  ext_job j = {.kern = pe__isa(), .caches = caches,
               .half = c->half, .head_dim = hd, .style = c->p.style,
               .inverse = (flags & PE_ROPE_INVERSE) != 0, .batch = batch, .tokens = tokens,
               .pos = positions, .slots = slot_mapping, .dst = k_cache->data,
               .dst_dtype = k_cache->dtype, .dst_esize = (int64_t)pe__dtype_size(k_cache->dtype),
               .dst_block = k_cache->shape[2], .dst_s_block = pe__stride(k_cache, 0),
               .dst_s_head = pe__stride(k_cache, 1), .dst_s_slot = pe__stride(k_cache, 2)};
  operand_from(&j.q, q);
  operand_from(&j.k, k);
  run_job(&j, pool);
  return PE_OK;
}

/* Axis of each frequency i < half. Sectioned (Qwen2-VL): the first s[0]
 * frequencies follow t, the next s[1] h, the last s[2] w. Interleaved
 * (Qwen3-VL): i % 3 == 1 and i < 3*s[1] -> h, i % 3 == 2 and i < 3*s[2] -> w,
 * everything else t. */
static void mrope_axes(const int32_t s[3], int interleaved, int32_t half, uint8_t *axis) {
  for (int32_t i = 0; i < half; i++) {
    if (interleaved)
      axis[i] = (uint8_t)((i % 3 == 1 && i < 3 * (int64_t)s[1])   ? 1
                          : (i % 3 == 2 && i < 3 * (int64_t)s[2]) ? 2
                                                                   : 0);
    else
      axis[i] = (uint8_t)(i < s[0] ? 0 : i < s[0] + s[1] ? 1 : 2);
  }
}

PE_API pe_status pe_apply_mrope_qk(const pe_rope_cache *c, const pe_tensor *q, const pe_tensor *k,
                                   const int64_t *positions, const int32_t *mrope_section,
                                   uint32_t flags, pe_threadpool *pool) {
  static const char fn[] = "pe_apply_mrope_qk";
  static const char *const axis_names[3] = {"axis 0 (t), ", "axis 1 (h), ", "axis 2 (w), "};
  pe_status st;
  if (!c) return pe__fail(PE_ERR_NULL_POINTER, "%s: cache is NULL", fn);
  if (!mrope_section) return pe__fail(PE_ERR_NULL_POINTER, "%s: mrope_section is NULL", fn);
  int32_t hd = c->p.head_dim, half = c->half;
  if ((st = check_qk(fn, q, k, hd, 1)) != PE_OK) return st;
  if ((st = pe__check_flags(fn, flags, PE_ROPE_INVERSE | PE_ROPE_MROPE_INTERLEAVED)) != PE_OK)
    return st;
  const int32_t *s = mrope_section;
  if (s[0] < 0 || s[1] < 0 || s[2] < 0 || (int64_t)s[0] + s[1] + s[2] != half)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: mrope_section {%d, %d, %d} must be >= 0 and sum to rotary_dim/2 = %d", fn,
                    (int)s[0], (int)s[1], (int)s[2], (int)half);
  const pe_tensor *any = q ? q : k;
  int64_t batch = any->shape[0], tokens = any->shape[2];
  const pe_rope_cache *const caches[1] = {c};
  for (int a = 0; a < 3; a++)
    if ((st = check_positions(fn, axis_names[a], positions ? positions + a * batch * tokens : NULL,
                              batch, tokens, caches, NULL)) != PE_OK)
      return st;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  uint8_t axis[PE_MAX_HEAD_DIM / 2];
  mrope_axes(s, (flags & PE_ROPE_MROPE_INTERLEAVED) != 0, half, axis);
  ext_job j = {.kern = pe__isa(), .caches = caches, .half = half, .head_dim = hd,
               .style = c->p.style, .inverse = (flags & PE_ROPE_INVERSE) != 0, .batch = batch,
               .tokens = tokens, .pos = positions, .axis = axis};
  operand_from(&j.q, q);
  operand_from(&j.k, k);
  run_job(&j, pool);
  return PE_OK;
}

PE_API pe_status pe_apply_rope_qk_multi(const pe_rope_cache *const *caches, int32_t n_caches,
                                        const int32_t *cache_index, const pe_tensor *q,
                                        const pe_tensor *k, const int64_t *positions,
                                        uint32_t flags, pe_threadpool *pool) {
  static const char fn[] = "pe_apply_rope_qk_multi";
  pe_status st;
  if (!caches) return pe__fail(PE_ERR_NULL_POINTER, "%s: caches is NULL", fn);
  if (n_caches < 1)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: n_caches %d must be >= 1", fn, (int)n_caches);
  for (int32_t i = 0; i < n_caches; i++)
    if (!caches[i]) return pe__fail(PE_ERR_NULL_POINTER, "%s: caches[%d] is NULL", fn, (int)i);
  const pe_rope_cache *c0 = caches[0];
  for (int32_t i = 1; i < n_caches; i++) {
    const pe_rope_cache *c = caches[i];
    if (c->p.head_dim != c0->p.head_dim || c->p.rotary_dim != c0->p.rotary_dim)
      return pe__fail(PE_ERR_SHAPE,
                      "%s: caches[%d] has head_dim %d rotary_dim %d, caches[0] head_dim %d "
                      "rotary_dim %d: all must match",
                      fn, (int)i, (int)c->p.head_dim, (int)c->p.rotary_dim, (int)c0->p.head_dim,
                      (int)c0->p.rotary_dim);
    if (c->p.style != c0->p.style)
      return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: caches[%d] has style %d, caches[0] style %d",
                      fn, (int)i, (int)c->p.style, (int)c0->p.style);
  }
  if ((st = check_qk(fn, q, k, c0->p.head_dim, 1)) != PE_OK) return st;
  if ((st = pe__check_flags(fn, flags, PE_ROPE_INVERSE)) != PE_OK) return st;
  const pe_tensor *any = q ? q : k;
  int64_t batch = any->shape[0], tokens = any->shape[2];
  if (!cache_index && n_caches > 1)
    return pe__fail(PE_ERR_NULL_POINTER, "%s: cache_index is NULL with n_caches %d > 1", fn,
                    (int)n_caches);
  if (cache_index)
    for (int64_t b = 0; b < batch; b++)
      if (cache_index[b] < 0 || cache_index[b] >= n_caches)
        return pe__fail(PE_ERR_INVALID_ARGUMENT,
                        "%s: cache_index %d at [batch %" PRId64 "] is outside [0, n_caches %d)", fn,
                        (int)cache_index[b], b, (int)n_caches);
  if ((st = check_positions(fn, "", positions, batch, tokens, caches, cache_index)) != PE_OK)
    return st;
  if ((st = pe__pool_acquire(fn, pool)) != PE_OK) return st;
  ext_job j = {.kern = pe__isa(), .caches = caches, .cache_index = cache_index,
               .half = c0->half, .head_dim = c0->p.head_dim, .style = c0->p.style,
               .inverse = (flags & PE_ROPE_INVERSE) != 0, .batch = batch, .tokens = tokens,
               .pos = positions};
  operand_from(&j.q, q);
  operand_from(&j.k, k);
  run_job(&j, pool);
  return PE_OK;
}

/* ---- M-RoPE parameters from a HuggingFace config.json ---- */

/* The rope dict holding mrope_section: rope_parameters (transformers v5) or
 * rope_scaling, at the top level (Qwen2-VL, Qwen2.5-VL) or in text_config
 * (Qwen3-VL). */
static const cJSON *find_mrope_dict(const cJSON *root, const char **where) {
  static const char *const parents[2] = {NULL, "text_config"};
  static const char *const keys[2] = {"rope_parameters", "rope_scaling"};
  static const char *const names[2][2] = {{"rope_parameters", "rope_scaling"},
                                          {"text_config.rope_parameters", "text_config.rope_scaling"}};
  for (int p = 0; p < 2; p++) {
    const cJSON *obj = parents[p] ? cJSON_GetObjectItemCaseSensitive(root, parents[p]) : root;
    if (!cJSON_IsObject(obj)) continue;
    for (int k = 0; k < 2; k++) {
      const cJSON *d = cJSON_GetObjectItemCaseSensitive(obj, keys[k]);
      if (cJSON_IsObject(d) && cJSON_GetObjectItemCaseSensitive(d, "mrope_section")) {
        *where = names[p][k];
        return d;
      }
    }
  }
  return NULL;
}

PE_API pe_status pe_mrope_section_from_hf_config(const char *json, size_t len,
                                                 int32_t *mrope_section, uint32_t *flags) {
  static const char fn[] = "pe_mrope_section_from_hf_config";
  if (!json) return pe__fail(PE_ERR_NULL_POINTER, "%s: json is NULL", fn);
  if (!mrope_section) return pe__fail(PE_ERR_NULL_POINTER, "%s: mrope_section is NULL", fn);
  if (!flags) return pe__fail(PE_ERR_NULL_POINTER, "%s: flags is NULL", fn);
  cJSON *root = cJSON_ParseWithLengthOpts(json, len, NULL, 0);
  if (!root) return pe__fail(PE_ERR_PARSE, "%s: the text is not valid JSON", fn);
  pe_status st = PE_OK;
  const char *where = "";
  const cJSON *dict = find_mrope_dict(root, &where);
  int32_t sec[3] = {0, 0, 0};
  uint32_t fl = 0;
  if (!dict) {
    st = pe__fail(PE_ERR_PARSE,
                  "%s: no mrope_section in rope_parameters or rope_scaling (top level or "
                  "text_config): not an M-RoPE model",
                  fn);
    goto done;
  }
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(dict, "mrope_section");
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != 3) {
    st = pe__fail(PE_ERR_PARSE, "%s: %s.mrope_section must be an array of 3 integers", fn, where);
    goto done;
  }
  for (int i = 0; i < 3; i++) {
    const cJSON *v = cJSON_GetArrayItem(arr, i);
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1.0;
    if (!(d >= 0.0 && d <= 1048576.0) || d != floor(d)) {
      st = pe__fail(PE_ERR_PARSE, "%s: %s.mrope_section[%d] must be an integer >= 0", fn, where, i);
      goto done;
    }
    sec[i] = (int32_t)d;
  }
  const cJSON *il = cJSON_GetObjectItemCaseSensitive(dict, "mrope_interleaved");
  if (il && !cJSON_IsBool(il)) {
    st = pe__fail(PE_ERR_PARSE, "%s: %s.mrope_interleaved must be true or false", fn, where);
    goto done;
  }
  if (cJSON_IsTrue(il)) fl |= PE_ROPE_MROPE_INTERLEAVED;
  memcpy(mrope_section, sec, sizeof sec);
  *flags = fl;
done:
  cJSON_Delete(root);
  return st;
}
