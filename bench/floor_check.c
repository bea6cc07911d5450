/* floor_check.c - the compute floor (floor.h) computes each row's own
 * arithmetic, so its time is that arithmetic's and not a shortcut's:
 *  1. every floor kernel this CPU runs gives the scalar floor kernel's bytes
 *     on the same rows (a normed row within norm_ulps of the output dtype:
 *     the sum of squares is added in another order), and on bf16
 *     rows of subnormals;
 *  2. the scalar floor kernel gives the library's bytes: the rotation
 *     (pe_apply_rope_qk) with the cache's cos/sin row, the fused rotation
 *     into fp8 and q8_0 rows (pe_qk_norm_rope_store), v quantized
 *     (pe_kv_write), a q8_0 key shifted (pe_rope_shift_k_cache), an MLA kv
 *     row into its cache row in each format (pe_mla_rope_store), rows
 *     under Gemma 3's unit-offset and Llama 4's weightless norms, and a
 *     token's rows under OLMo 2's per-token norm (each of them); a normed
 *     row, whose sum of squares the library adds in another order, within
 *     norm_ulps of the output dtype (an fp8 code: the same or its
 *     neighbour).
 * And the bound (bench.h): both its walks, one stream and PB_STREAMS, in
 * one part or several, scale every float of the probe's rows exactly once
 * and touch nothing else.
 * Prints one line per failure and a summary; exit status 1 on any failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "floor.h"
#include "posenc.h"

static int failures, checks;

static const char *dt_name(int dt) { return dt == PE_F32 ? "f32" : dt == PE_F16 ? "f16" : "bf16"; }

static void describe(const floor_stage *st, char *out, size_t len) {
  static const char *const kinds[] = {"rot", "norm+rot", "copy", "quant", "shift", "mla"};
  static const char *const weights[] = {"", " (1 + w)", " (no weight)"};
  snprintf(out, len, "%s%s%s %s%s%s%s %s w%d r%d%s", kinds[st->kind],
           st->kind == FL_NORM_ROT ? weights[st->norm_w] : "",
           st->norm_token ? " (per token)" : "", dt_name(st->src),
           st->fmt == FL_FP8 ? (st->fp8_mul ? " -> fp8 (x 1/scale)" : " -> fp8 (/ scale)") : "",
           st->fmt == FL_Q8_0 ? " -> q8_0" : "", st->fmt == FL_FP8_DS ? " -> fp8_ds" : "",
           st->style == PE_ROPE_GPTJ ? "gptj" : "neox", st->width, st->rot,
           st->inplace ? " in place" : "");
}

/* The bytes a stage writes in its data (src rows in place, else dst). */
static const char *out_rows(const floor_stage *st, const floor_data *d) {
  return st->inplace || st->kind == FL_SHIFT ? d->src : d->dst;
}
static int64_t out_stride(const floor_stage *st, const floor_data *d) {
  return st->inplace || st->kind == FL_SHIFT ? d->src_stride : d->dst_stride;
}

/* An MLA row's fp8 codes of a normed latent (FL_FP8, FL_FP8_DS) against
 * the reference's: each code the same or its neighbour of the same sign
 * (the magnitudes' codes are in order), an FP8_DS tile scale within 8 ulp
 * (the amax of normed values), the rope channels the same bytes. */
static void compare_codes(const char *what, const char *desc, const floor_stage *st,
                          const char *a, const char *b) {
  const int64_t lat = st->width - st->rot, n = floor_out_bytes(st);
  const int64_t codes = st->fmt == FL_FP8_DS ? lat : st->width;
  for (int64_t i = 0; i < n; i++) {
    const unsigned ca = (unsigned char)a[i], cb = (unsigned char)b[i];
    int ok = ca == cb;
    if (!ok && i < lat) /* a normed value: its neighbour */
      ok = (ca & 0x80) == (cb & 0x80) &&
           ((ca & 0x7f) + 1 == (cb & 0x7f) || (cb & 0x7f) + 1 == (ca & 0x7f));
    if (!ok && i >= codes && i < codes + 4 * (lat / 128)) { /* FP8_DS: a tile's scale */
      const int64_t k = (i - codes) / 4;
      float x, y;
      memcpy(&x, a + codes + 4 * k, 4);
      memcpy(&y, b + codes + 4 * k, 4);
      ok = fabsf(x - y) <= 8 * 0x1p-23f * fabsf(y);
    }
    if (!ok) {
      printf("FAIL %s: %s: byte %lld is 0x%02x, the reference's 0x%02x\n", what, desc,
             (long long)i, ca, cb);
      failures++;
      return;
    }
  }
}

/* A row of a (the floor under test) against b (the reference): the same
 * bytes, or, for a normed row (ulps > 0), each element within `ulps` units
 * of the dtype's last place at the row's scale, max(|b|, 1): the normed
 * values are about 1, and a scale r rounded another way moves an output by
 * the rounding of its inputs, not of itself (x*c - y*s may cancel). */
static void compare(const char *what, const floor_stage *st, const char *a, const char *b,
                    int ulps) {
  char desc[96];
  describe(st, desc, sizeof desc);
  checks++;
  int64_t n = floor_out_bytes(st);
  if (!ulps) {
    for (int64_t i = 0; i < n; i++)
      if (a[i] != b[i]) {
        printf("FAIL %s: %s: byte %lld is 0x%02x, the reference's 0x%02x\n", what, desc,
               (long long)i, (unsigned char)a[i], (unsigned char)b[i]);
        failures++;
        return;
      }
    return;
  }
  if (st->fmt) { /* an MLA row's codes */
    compare_codes(what, desc, st, a, b);
    return;
  }
  const int dt = st->dst;
  const float step = dt == PE_F32 ? 0x1p-23f : dt == PE_F16 ? 0x1p-10f : 0x1p-7f;
  for (int e = 0; e < st->width; e++) {
    float x = floor_widen(dt, a, e), y = floor_widen(dt, b, e);
    if (!(fabsf(x - y) <= ulps * step * fmaxf(fabsf(y), 1.0f))) {
      printf("FAIL %s: %s: element %d is %.9g, the reference's %.9g\n", what, desc, e, x, y);
      failures++;
      return;
    }
  }
}

/* compare's ulps for a normed row (FL_NORM_ROT, FL_MLA) in dtype dt. The
 * sum of squares is added in a different order by each: the scalar floor
 * kernel in one chain (as a plain loop), the vector ones in 2 to 4
 * accumulators of VL lanes, the library in 16 lanes and a fixed tree; the
 * scales r they give differ by a few float32 units (up to 5 ulp of the
 * output seen on 128 to 576 channels), which a float32 output carries
 * whole, and a half-precision one within a rounding of its own. A missing
 * weight, a scale over another count of channels or an unnormed row is off
 * by far more. */
static int norm_ulps(int dt) { return dt == PE_F32 ? 16 : 4; }

static void clone(const floor_data *from, floor_data *to) {
  *to = *from;
  char *mem = malloc(from->bytes);
  if (!mem) abort();
  memcpy(mem, from->src, from->bytes);
  to->src = mem;
  to->dst = mem + (from->dst - from->src);
  to->cs = (const float *)(const void *)(mem + ((const char *)from->cs - from->src));
  to->w = (const float *)(const void *)(mem + ((const char *)from->w - from->src));
  to->scratch = (float *)(void *)(mem + ((char *)from->scratch - from->src));
}

/* 1. a vector kernel against the scalar one, every row of the data once;
 * with `subnormal`, on bf16 rows of subnormals (each element +-k * 2^-133,
 * k in 1..127), whose rotated values are subnormal too: vcvtne2ps2bf16
 * reads those as zero, and only the floor's +-0 test (floor_avx512.c)
 * keeps such a row exact, so a floor without it fails here. */
static int subnormal_stage(const floor_stage *st) {
  return st->kind == FL_ROT && st->src == PE_BF16 && st->dst == PE_BF16 && st->fmt == FL_NONE;
}
static void check_isa(floor_fn fn, const char *name, const floor_stage *st, int subnormal) {
  floor_data d, ref, got;
  if (floor_alloc(st, &d, 0)) abort();
  unsigned k = 12345;
  for (int r = 0; subnormal && r < d.n_rows; r++)
    for (int e = 0; e < st->width; e++) {
      k = k * 1103515245u + 12345u;
      const uint16_t h = (uint16_t)(((k >> 16) & 0x8000u) | (1u + (k >> 8) % 127u));
      memcpy(d.src + r * d.src_stride + 2 * e, &h, 2);
    }
  clone(&d, &ref);
  clone(&d, &got);
  pb_floor_scalar(st, &ref, ref.n_rows);
  fn(st, &got, got.n_rows);
  char what[80];
  snprintf(what, sizeof what, "%s against scalar%s", name, subnormal ? " (subnormal bf16)" : "");
  for (int r = 0; r < d.n_rows; r++)
    compare(what, st, out_rows(st, &got) + r * out_stride(st, &got),
            out_rows(st, &ref) + r * out_stride(st, &ref),
            st->kind == FL_NORM_ROT || st->kind == FL_MLA ? norm_ulps(st->dst) : 0);
  floor_free(&d);
  free(ref.src);
  free(got.src);
}

static void check_library_token(const floor_stage *st);

/* A cache of the stage's geometry (MLA: its rope channels'), the stage's
 * data with the cache's cos/sin row of position 37, and lib, a copy of the
 * data before a floor kernel writes it (the library's input). */
static pe_rope_cache *stage_cache(const floor_stage *st, floor_data *d, floor_data *lib) {
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = st->kind == FL_MLA ? st->rot : st->width;
  p.rotary_dim = st->rot ? st->rot : st->width;
  p.style = (pe_rope_style)st->style;
  p.max_positions = 64;
  pe_rope_cache *cache = NULL;
  if (pe_rope_cache_create(&p, &cache) != PE_OK) abort();
  if (floor_alloc(st, d, 0)) abort();
  const int half = st->rot / 2;
  if (half)
    pe_rope_cache_cos_sin(cache, 37, (float *)(void *)d->cs, (float *)(void *)(d->cs + half));
  clone(d, lib);
  return cache;
}

/* The library's norm of a stage (FL_NORM_ROT) on k, with the data's
 * weights (none: PB_QKN_L2). */
static void stage_norm(const floor_stage *st, const floor_data *d, pe_qk_norm *norm) {
  pe_qk_norm_init(norm);
  norm->kind = st->norm_w == PB_QKN_OFFSET ? PE_QK_NORM_RMS_UNIT_OFFSET
               : st->norm_w == PB_QKN_L2 ? PE_QK_NORM_L2
                                          : PE_QK_NORM_RMS;
  norm->scope = st->norm_token ? PE_QK_NORM_PER_TOKEN : PE_QK_NORM_PER_HEAD;
  norm->eps = d->eps;
  norm->k_weight = st->norm_w == PB_QKN_L2 ? NULL : d->w;
}

/* 2. the scalar kernel against the library on row 0, at position (or
 * delta) 37 of a cache of the stage's geometry. */
static void check_library(const floor_stage *st) {
  if (st->kind == FL_COPY) return; /* a copy */
  if (st->norm_token) {
    check_library_token(st);
    return;
  }
  floor_data d, lib;
  pe_rope_cache *cache = stage_cache(st, &d, &lib);
  pb_floor_scalar(st, &d, 1);

  const int64_t w = st->width, pos = 37, slot = 0;
  const int64_t qbytes = floor_row_bytes(0, st->kind == FL_SHIFT ? FL_Q8_0 : st->fmt, (int)w);
  char *out = calloc(1, (size_t)(w * 4 + 64));
  if (!out) abort();
  pe_tensor row = {lib.src, (pe_dtype)st->src, {1, 1, 1, w}, {w, w, w, 1}};
  pe_tensor qc = {st->kind == FL_SHIFT ? lib.src : out, PE_F32, {1, 1, 1, w},
                  {qbytes, qbytes, qbytes, 1}};
  pe_kv_cache kv;
  pe_kv_cache_init(&kv);
  float scale = st->scale;
  pe_status s = PE_OK;
  const char *ref = out;
  int ulps = 0;
  if (st->kind == FL_ROT && !st->fmt) { /* in place, the channels past rot kept */
    s = pe_apply_rope_qk(cache, &row, NULL, &pos, 0, NULL);
    ref = lib.src;
  } else if (st->kind == FL_ROT || st->kind == FL_NORM_ROT) {
    pe_qk_norm norm;
    pe_qk_norm_init(&norm);
    if (st->kind == FL_NORM_ROT) {
      stage_norm(st, &d, &norm);
      ulps = norm_ulps(st->dst);
    }
    pe_tensor plain = {out, (pe_dtype)st->src, {1, 1, 1, w}, {w, w, w, 1}};
    kv.k = st->fmt ? &qc : &plain;
    kv.k_quant = st->fmt == FL_FP8 ? PE_KV_FP8_E4M3 : st->fmt == FL_Q8_0 ? PE_KV_Q8_0 : PE_KV_PLAIN;
    if (st->fmt == FL_FP8) kv.k_scale = &scale;
    s = pe_qk_norm_rope_store(cache, &norm, NULL, &row, NULL, &kv, &slot, &pos, 0, NULL);
  } else if (st->kind == FL_QUANT) {
    kv.k = &qc;
    kv.k_quant = st->fmt == FL_FP8 ? PE_KV_FP8_E4M3 : PE_KV_Q8_0;
    if (st->fmt == FL_FP8) kv.k_scale = &scale;
    s = pe_kv_write(&kv, &row, NULL, &slot);
  } else if (st->kind == FL_MLA) { /* pe_mla_rope_store of the kv row alone */
    const int64_t rb = floor_out_bytes(st);
    pe_mla m;
    pe_mla_init(&m);
    m.rope_dim = st->rot;
    m.kv_norm_dim = m.kv_rope_offset = (int32_t)(w - st->rot);
    m.kv_eps = d.eps;
    m.kv_weight = d.w;
    m.format = st->fmt == FL_FP8 ? PE_MLA_FP8_E4M3 : st->fmt == FL_FP8_DS ? PE_MLA_FP8_DS
                                                                          : PE_MLA_PLAIN;
    if (st->fmt == FL_FP8) m.scale = &scale;
    pe_tensor cache_row = {out, (pe_dtype)st->src, {1, 1, 1, w}, {w, w, w, 1}};
    if (st->fmt) cache_row.stride[0] = cache_row.stride[1] = cache_row.stride[2] = rb;
    s = pe_mla_rope_store(cache, &m, NULL, &row, &cache_row, &slot, &pos, 0, NULL);
    ulps = norm_ulps(st->src);
  } else { /* FL_SHIFT: the q8_0 row in place */
    kv.k = &qc;
    kv.k_quant = PE_KV_Q8_0;
    s = pe_rope_shift_k_cache(cache, &kv, &slot, &pos, 1, NULL);
    ref = lib.src;
  }
  char desc[96];
  describe(st, desc, sizeof desc);
  if (s != PE_OK) {
    printf("FAIL library: %s: %s\n", desc, pe_last_error());
    failures++;
  } else {
    compare("scalar against the library", st, out_rows(st, &d), ref, ulps);
  }
  free(out);
  free(lib.src);
  floor_free(&d);
  pe_rope_cache_destroy(cache);
}

/* 2b. a per-token norm (OLMo 2): the scalar kernel's rows of one token
 * against the library's, k's `heads` rows normed as one into a plain cache
 * (pe_qk_norm_rope_store, PE_QK_NORM_PER_TOKEN, each head its own weights),
 * within norm_ulps. */
static void check_library_token(const floor_stage *st) {
  floor_data d, lib;
  pe_rope_cache *cache = stage_cache(st, &d, &lib);
  const int64_t h_n = st->heads, w = st->width, es = st->src == PE_F32 ? 4 : 2;
  if (d.n_rows < h_n) abort(); /* the token's rows are distinct rows of the data */
  pb_floor_scalar(st, &d, h_n);
  char *out = calloc(1, (size_t)(h_n * w * es + 64));
  if (!out) abort();
  const int64_t rs = d.src_stride / es, pos = 37, slot = 0;
  pe_tensor k = {lib.src, (pe_dtype)st->src, {1, h_n, 1, w}, {h_n * rs, rs, h_n * rs, 1}};
  pe_tensor kc = {out, (pe_dtype)st->src, {1, h_n, 1, w}, {h_n * w, w, h_n * w, 1}};
  pe_kv_cache kv;
  pe_kv_cache_init(&kv);
  kv.k = &kc;
  pe_qk_norm norm;
  stage_norm(st, &d, &norm);
  pe_status s = pe_qk_norm_rope_store(cache, &norm, NULL, &k, NULL, &kv, &slot, &pos, 0, NULL);
  if (s != PE_OK) {
    char desc[96];
    describe(st, desc, sizeof desc);
    printf("FAIL library: %s (per-token norm): %s\n", desc, pe_last_error());
    failures++;
  } else {
    for (int64_t h = 0; h < h_n; h++)
      compare("scalar against the library (per-token norm)", st,
              out_rows(st, &d) + h * out_stride(st, &d), out + h * w * es, norm_ulps(st->dst));
  }
  free(out);
  free(lib.src);
  floor_free(&d);
  pe_rope_cache_destroy(cache);
}

/* The bound's walks over r (rows in a buffer of `floats` floats, 1.0
 * everywhere): x = 2x + 0 in `parts` parts, one stream or PB_STREAMS, in
 * place or into dst (a second such buffer); every float inside a row of
 * the buffer written must read 2, every other float of both 1. */
static void check_bound(const char *what, pb_rows r, int64_t floats, const char *in_row,
                        float *dst) {
  for (int to = 0; to < 2; to++)
    for (int streams = 0; streams < 2; streams++)
      for (int parts = 1; parts <= 3; parts++) {
        float *x = (float *)(void *)r.base;
        r.dst = to ? (char *)dst : NULL;
        for (int64_t i = 0; i < floats; i++) x[i] = dst[i] = 1.0f;
        for (int p = 0; p < parts; p++) {
          if (streams)
            pb_bound_rmw_streams(&r, p, parts, 2.0f, 0.0f);
          else
            pb_bound_rmw_part(&r, p, parts, 2.0f, 0.0f);
        }
        checks++;
        const float *w = to ? dst : x, *other = to ? x : dst;
        for (int64_t i = 0; i < floats; i++)
          if (w[i] != (in_row[i] ? 2.0f : 1.0f) || other[i] != 1.0f) {
            printf("FAIL bound %s, %s, %s, %d part(s): float %lld is %g, %g in the other buffer\n",
                   what, to ? "into a second buffer" : "in place",
                   streams ? "streams" : "one stream", parts, (long long)i, (double)w[i],
                   (double)other[i]);
            failures++;
            break;
          }
      }
}

/* Probes as pe-bench makes them: contiguous runs (a multiple of 16 floats
 * or not, shorter than one piece of a stream or many), and rows with gaps
 * in 1 to 3 dimensions, outer strides either way round. */
static void check_bounds(void) {
  enum { CAP = 1 << 16 };
  float *buf = malloc(CAP * sizeof(float)), *dst = malloc(CAP * sizeof(float));
  char *in_row = malloc(CAP);
  if (!buf || !dst || !in_row) abort();
  static const int64_t flat[] = {16, 48, 1024, 4096 + 16, 10000};
  for (size_t k = 0; k < sizeof flat / sizeof flat[0]; k++) {
    pb_rows r = {.base = (char *)buf, .nd = 0, .row_bytes = flat[k] * 4};
    memset(in_row, 0, CAP);
    memset(in_row, 1, (size_t)flat[k]);
    char what[48];
    snprintf(what, sizeof what, "%lld contiguous floats", (long long)flat[k]);
    check_bound(what, r, flat[k] + 64, in_row, dst);
  }
  /* [n0][n1][n2] rows of `row` floats at strides s0, s1, s2 (floats) */
  static const int64_t shapes[][7] = {{1, 1, 9, 24, 0, 0, 30},     {1, 5, 3, 128, 0, 400, 130},
                                      {2, 3, 7, 64, 1500, 66, 200}, {3, 2, 5, 8, 120, 9, 24},
                                      {1, 1, 1, 96, 0, 0, 0},       {1, 4, 13, 32, 0, 34, 140}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    const int64_t *g = shapes[k];
    pb_rows r = {.base = (char *)buf, .nd = 3, .n = {g[0], g[1], g[2]},
                 .stride = {g[4] * 4, g[5] * 4, g[6] * 4}, .row_bytes = g[3] * 4};
    memset(in_row, 0, CAP);
    int64_t last = 0;
    for (int64_t a = 0; a < g[0]; a++)
      for (int64_t b = 0; b < g[1]; b++)
        for (int64_t c = 0; c < g[2]; c++) {
          int64_t o = a * g[4] + b * g[5] + c * g[6];
          memset(in_row + o, 1, (size_t)g[3]);
          if (o + g[3] > last) last = o + g[3];
        }
    pb_rows_normalise(&r);
    char what[64];
    snprintf(what, sizeof what, "rows [%lld][%lld][%lld] x %lld", (long long)g[0],
             (long long)g[1], (long long)g[2], (long long)g[3]);
    check_bound(what, r, last + 64, in_row, dst);
  }
  free(buf);
  free(dst);
  free(in_row);
}

int main(void) {
  check_bounds();
  floor_fn fns[8];
  const char *names[8];
  int n_fns = floor_kernels(fns, names, 8);
  floor_stage sts[200];
  int n = 0;
  static const int dts[3] = {PE_F32, PE_F16, PE_BF16};
  for (int i = 0; i < 3; i++)
    for (int style = PE_ROPE_NEOX; style <= PE_ROPE_GPTJ; style++) {
      const int dt = dts[i];
      /* 3 heads a token: a cos/sin chunk shared by several rows */
      floor_stage b = {.src = dt, .dst = dt, .style = style, .width = 128, .rot = 128, .heads = 3};
      floor_stage s;
      s = b, s.kind = FL_ROT, s.inplace = 1, sts[n++] = s;
      s = b, s.kind = FL_ROT, s.width = 96, s.rot = 96, s.inplace = 1, sts[n++] = s; /* tails */
      s = b, s.kind = FL_ROT, s.width = 256, s.rot = 64, sts[n++] = s; /* the rest copied */
      s = b, s.kind = FL_ROT, s.fmt = FL_FP8, s.scale = 0.05f, sts[n++] = s;
      s = b, s.kind = FL_ROT, s.fmt = FL_FP8, s.scale = 0.5f, s.fp8_mul = 1, sts[n++] = s;
      s = b, s.kind = FL_ROT, s.fmt = FL_Q8_0, sts[n++] = s;
      s = b, s.kind = FL_NORM_ROT, s.inplace = 1, sts[n++] = s;
      s = b, s.kind = FL_NORM_ROT, sts[n++] = s;
      s = b, s.kind = FL_NORM_ROT, s.width = 96, s.rot = 96, s.inplace = 1, sts[n++] = s;
      /* Gemma 3's unit-offset weights, Llama 4's none; past rot too */
      s = b, s.kind = FL_NORM_ROT, s.norm_w = PB_QKN_OFFSET, s.inplace = 1, sts[n++] = s;
      s = b, s.kind = FL_NORM_ROT, s.norm_w = PB_QKN_OFFSET, s.width = 256, sts[n++] = s;
      s = b, s.kind = FL_NORM_ROT, s.norm_w = PB_QKN_L2, s.inplace = 1, sts[n++] = s;
      s = b, s.kind = FL_NORM_ROT, s.norm_w = PB_QKN_L2, s.rot = 64, sts[n++] = s;
      /* OLMo 2's per-token norm: one scale for a token's 3 rows */
      s = b, s.kind = FL_NORM_ROT, s.norm_token = 1, s.inplace = 1, sts[n++] = s;
      s = b, s.kind = FL_NORM_ROT, s.norm_token = 1, sts[n++] = s;
      if (style == PE_ROPE_NEOX) {
        s = b, s.kind = FL_QUANT, s.fmt = FL_FP8, s.scale = 0.02f, s.rot = 0, sts[n++] = s;
        s = b, s.kind = FL_QUANT, s.fmt = FL_FP8, s.scale = 1.0f, s.fp8_mul = 1, s.rot = 0,
        sts[n++] = s;
        s = b, s.kind = FL_QUANT, s.fmt = FL_Q8_0, s.rot = 0, sts[n++] = s;
        s = b, s.kind = FL_COPY, s.rot = 0, sts[n++] = s;
      }
      if (i == 0) s = b, s.kind = FL_SHIFT, sts[n++] = s;
      /* MLA: DeepSeek-V3's q rope slices (64 channels in place) and kv rows
       * (512 latent + 64 rope) into each cache format */
      s = b, s.kind = FL_ROT, s.width = 64, s.rot = 64, s.inplace = 1, sts[n++] = s;
      b.kind = FL_MLA, b.width = 576, b.rot = 64, b.heads = 1;
      s = b, sts[n++] = s;
      s = b, s.fmt = FL_FP8, s.scale = 0.05f, sts[n++] = s;
      s = b, s.fmt = FL_FP8, s.scale = 1.0f, s.fp8_mul = 1, sts[n++] = s;
      s = b, s.fmt = FL_FP8_DS, sts[n++] = s;
    }
  for (int k = 0; k < n; k++) {
    if (!floor_supported(&sts[k])) {
      char desc[96];
      describe(&sts[k], desc, sizeof desc);
      printf("FAIL floor_supported refuses %s\n", desc);
      failures++;
      continue;
    }
    for (int f = 1; f < n_fns; f++) {
      check_isa(fns[f], names[f], &sts[k], 0);
      if (subnormal_stage(&sts[k])) check_isa(fns[f], names[f], &sts[k], 1);
    }
    check_library(&sts[k]);
  }
  printf("%d stages, kernels:", n);
  for (int f = 0; f < n_fns; f++) printf(" %s", names[f]);
  printf("; %d checks, %d failed\n", checks, failures);
  return failures != 0;
}
