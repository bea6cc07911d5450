/* test_qk_norm.c - pe_qk_norm_rope and pe_qk_norm_rope_store: QK-norm, RoPE
 * and the K/V cache write in one pass.
 *
 * What is checked against what:
 * - Values (f32): against float64 references written here from
 *   transformers' Qwen3RMSNorm (x * rsqrt(mean(x^2) + eps) * w over head_dim),
 *   Gemma3RMSNorm (* (1 + w)), Llama4TextL2Norm (no weight) and Olmo2's
 *   q_norm/k_norm (Olmo2RMSNorm over the whole projection, heads*head_dim),
 *   each followed by apply_rotary_pos_emb (q*cos + rotate_half(q)*sin, cos
 *   and sin of position * base^(-2i/rotary_dim) in float64; GPT-J pairs as
 *   rotate_every_two), within the
 *   bound posenc.h states: 1.5 * 2^-24 * v (the table's cos/sin, each within
 *   1.5 float32 ulp of its own value, so within 1.5 * 2^-24, times |n_x| and
 *   |n_y|) + half a float32 ulp of v (the one rounding), v = |n_x| + |n_y|
 *   (n_x, n_y the pair's normed values): below 2 float32 ulps of v; past
 *   rotary_dim half an ulp of |n| (correctly rounded but for the double
 *   arithmetic's ~2^-50 relative), plus 2^-45 of the magnitude in both for the
 *   float64 steps (the sum of squares, the scale, the weight, the rotation).
 * - bf16/f16: bit for bit the float32 call's result on the widened inputs,
 *   rounded once (the rounding written here, via double arithmetic).
 * - Store: q as the in-place call gives it; every k cache row the float32
 *   result rounded to the cache dtype (bit for bit the in-place k when the
 *   dtypes match); v cache rows v converted; k and v unchanged; every cache
 *   byte no slot maps (and those of -1 slots) untouched.
 * - PE_QK_NORM_NONE is pe_apply_rope_qk / pe_apply_rope_qk_store bit for bit.
 * - Errors: each leaves every buffer byte for byte unchanged and names the
 *   function and the argument.
 * - Bit identity across ISAs (every path pe_force_isa accepts here, against
 *   scalar) on inputs with NaN, Inf, subnormals and overflowing squares, with
 *   vector tails, both styles, every kind and scope, every dtype; and across
 *   pool sizes (NULL and 2 threads). A token with more head rows than the
 *   engine's norm stage holds at once (1100 heads) is checked too.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "posenc.h"

#define TEST_RNG_SEED 0x243f6a8885a308d3ull
#include "isa_compare.h"
#include "test_util.h"

static double uni(void) { return unit_double(rnd()) * 2.0 - 1.0; } /* [-1, 1) */

/* ---- conversions written here, via double arithmetic ---- */
static size_t esz(pe_dtype d) { return d == PE_F32 ? 4 : 2; }

/* Round |a| (finite, >= 0) to a binary format with p-bit significands and
 * minimum normal exponent emin, to nearest even. */
static double round_fmt(double a, int p, int emin) {
  if (a == 0) return 0;
  int e;
  frexp(a, &e);
  e -= 1; /* a in [2^e, 2^(e+1)) */
  if (e < emin) e = emin;
  double q = ldexp(1.0, e - (p - 1));
  return nearbyint(a / q) * q;
}
static uint16_t f2bf(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  if (isinf(f)) return (uint16_t)(sign | 0x7f80);
  double r = round_fmt(fabs((double)f), 8, -126);
  if (r >= 0x1p128) return (uint16_t)(sign | 0x7f80);
  return (uint16_t)(sign | (f32_bits((float)r) >> 16));
}
static float bf2f(uint16_t h) { return bits_f32((uint32_t)h << 16); }
static uint16_t f2h(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  if (isnan(f)) return (uint16_t)(sign | 0x7e00 | ((u >> 13) & 0x3ff));
  if (isinf(f)) return (uint16_t)(sign | 0x7c00);
  double r = round_fmt(fabs((double)f), 11, -14);
  if (r >= 65536.0) return (uint16_t)(sign | 0x7c00);
  if (r < 0x1p-14) return (uint16_t)(sign | (uint16_t)(r * 0x1p24));
  int e;
  double m = frexp(r, &e); /* r = m 2^e, m in [0.5, 1) */
  return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)(m * 2048.0 - 1024.0));
}
static float h2f(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  if (e == 31) return bits_f32(((uint32_t)(h & 0x8000) << 16) | 0x7f800000u | ((uint32_t)m << 13));
  double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
  return (float)((h & 0x8000) ? -v : v);
}
static float get(pe_dtype d, const void *b, size_t i) {
  if (d == PE_F32) return ((const float *)b)[i];
  uint16_t h = ((const uint16_t *)b)[i];
  return d == PE_F16 ? h2f(h) : bf2f(h);
}
static void set(pe_dtype d, void *b, size_t i, float v) {
  if (d == PE_F32) ((float *)b)[i] = v;
  else ((uint16_t *)b)[i] = d == PE_F16 ? f2h(v) : f2bf(v);
}
/* The element's bits, widened to 32 for comparison. */
static uint32_t bits(pe_dtype d, const void *b, size_t i) {
  return d == PE_F32 ? ((const uint32_t *)b)[i] : ((const uint16_t *)b)[i];
}
/* f32 value v rounded to dtype d, as bits. */
static uint32_t round_bits(pe_dtype d, float v) {
  return d == PE_F32 ? f32_bits(v) : d == PE_F16 ? f2h(v) : f2bf(v);
}

/* ---- a scenario: packed QKV [B, T, Hq*hd + Hk*hd + Hk*vd], NHD caches ---- */
typedef struct scen {
  int32_t hd, rd;
  pe_rope_style style;
  double base;
  int64_t maxp; /* 0: no table */
  pe_qk_norm_kind kind;
  pe_qk_norm_scope scope;
  float eps;
  pe_dtype dt, kcd, vcd;
  int64_t B, T, Hq, Hk, vd, nb, bs;
  int wild;
} scen;

typedef struct run {
  int64_t row, n;      /* elements per token row; rows */
  void *qkv, *kc, *vc; /* buffers */
  size_t qkv_bytes, kc_bytes, vc_bytes;
  float *qw, *kw;
  int64_t *pos, *slots;
  pe_tensor q, k, v, tkc, tvc;
  pe_rope_cache *c;
  pe_qk_norm norm;
  pe_kv_cache kv;
} run;

static float draw(int wild) {
  double mag = ldexp(1.0, (int)(rnd() % 9) - 4);
  if (wild) {
    switch (rnd() % 40) {
      case 0: return NAN;
      case 1: return -INFINITY;
      case 2: return 1e-41f;
      case 3: return 3e19f; /* its square overflows */
      case 4: return bits_f32(0x7fa00001u); /* signaling NaN */
      case 5: return -0.0f;
      default: break;
    }
  }
  return (float)(uni() * mag);
}

static void run_make(run *r, const scen *s, uint64_t seed) {
  memset(r, 0, sizeof *r);
  rng = seed | 1;
  r->row = (s->Hq + s->Hk) * s->hd + s->Hk * s->vd;
  r->n = s->B * s->T;
  r->qkv_bytes = (size_t)(r->n * r->row) * esz(s->dt);
  r->qkv = malloc(r->qkv_bytes + 1);
  for (int64_t i = 0; i < r->n * r->row; i++) set(s->dt, r->qkv, (size_t)i, draw(s->wild));
  int64_t slots = s->nb * s->bs;
  r->kc_bytes = (size_t)(slots * s->Hk * s->hd) * esz(s->kcd);
  r->vc_bytes = (size_t)(slots * s->Hk * (s->vd ? s->vd : 1)) * esz(s->vcd);
  r->kc = malloc(r->kc_bytes);
  r->vc = malloc(r->vc_bytes);
  memset(r->kc, 0xa5, r->kc_bytes);
  memset(r->vc, 0xa5, r->vc_bytes);
  int64_t wq = s->scope == PE_QK_NORM_PER_TOKEN ? s->Hq * s->hd : s->hd;
  int64_t wk = s->scope == PE_QK_NORM_PER_TOKEN ? s->Hk * s->hd : s->hd;
  r->qw = malloc((size_t)wq * 4);
  r->kw = malloc((size_t)wk * 4);
  double center = s->kind == PE_QK_NORM_RMS_UNIT_OFFSET ? 0.0 : 1.0;
  for (int64_t i = 0; i < wq; i++) r->qw[i] = (float)(center + 0.5 * uni());
  for (int64_t i = 0; i < wk; i++) r->kw[i] = (float)(center + 0.5 * uni());
  r->pos = malloc((size_t)r->n * 8);
  int64_t lim = s->maxp ? s->maxp : 100000;
  for (int64_t i = 0; i < r->n; i++) r->pos[i] = (int64_t)(rnd() % (uint64_t)lim);
  /* slots: a random injection into [0, slots), about one in six -1 */
  r->slots = malloc((size_t)r->n * 8);
  int64_t *perm = malloc((size_t)slots * 8);
  for (int64_t i = 0; i < slots; i++) perm[i] = i;
  for (int64_t i = slots - 1; i > 0; i--) {
    int64_t j = (int64_t)(rnd() % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (int64_t i = 0; i < r->n; i++) r->slots[i] = i < slots && rnd() % 6 ? perm[i] : -1;
  free(perm);
  int64_t T = s->T, row = r->row;
  r->q = (pe_tensor){r->qkv, s->dt, {s->B, s->Hq, T, s->hd}, {T * row, s->hd, row, 1}};
  r->k = (pe_tensor){(char *)r->qkv + (size_t)(s->Hq * s->hd) * esz(s->dt), s->dt,
                     {s->B, s->Hk, T, s->hd}, {T * row, s->hd, row, 1}};
  r->v = (pe_tensor){(char *)r->qkv + (size_t)((s->Hq + s->Hk) * s->hd) * esz(s->dt), s->dt,
                     {s->B, s->Hk, T, s->vd}, {T * row, s->vd ? s->vd : 1, row, 1}};
  r->tkc = (pe_tensor){r->kc, s->kcd, {s->nb, s->Hk, s->bs, s->hd},
                       {s->bs * s->Hk * s->hd, s->hd, s->Hk * s->hd, 1}};
  r->tvc = (pe_tensor){r->vc, s->vcd, {s->nb, s->Hk, s->bs, s->vd},
                       {s->bs * s->Hk * s->vd, s->vd ? s->vd : 1, s->Hk * s->vd, 1}};
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = s->hd;
  p.rotary_dim = s->rd;
  p.style = s->style;
  p.base = s->base;
  p.max_positions = s->maxp;
  assert_int_equal(pe_rope_cache_create(&p, &r->c), PE_OK);
  pe_qk_norm_init(&r->norm);
  r->norm.kind = s->kind;
  r->norm.scope = s->scope;
  r->norm.eps = s->eps;
  int weighted = s->kind == PE_QK_NORM_RMS || s->kind == PE_QK_NORM_RMS_UNIT_OFFSET;
  r->norm.q_weight = weighted ? r->qw : NULL;
  r->norm.k_weight = weighted ? r->kw : NULL;
  pe_kv_cache_init(&r->kv);
  r->kv.k = &r->tkc;
  r->kv.v = s->vd ? &r->tvc : NULL;
}

static void run_free(run *r) {
  free(r->qkv);
  free(r->kc);
  free(r->vc);
  free(r->qw);
  free(r->kw);
  free(r->pos);
  free(r->slots);
  pe_rope_cache_destroy(r->c);
}

/* The same inputs widened to float32 (run a2 made from the same scenario). */
static void widen_into(run *f32, const run *r, const scen *s) {
  for (int64_t i = 0; i < r->n * r->row; i++)
    ((float *)f32->qkv)[i] = get(s->dt, r->qkv, (size_t)i);
}

/* ---- the float64 reference: HF's norm, then apply_rotary_pos_emb ---- */

/* One float32 ulp of v > 0 (normal range; the float32 minimum quantum
 * below it). */
static double ulp32(double v) {
  if (!(v >= 0x1p-126)) return 0x1p-149;
  return ldexp(1.0, ilogb(v) - 23);
}

/* The largest error seen, in float32 ulps of v = |n_x| + |n_y| (printed at
 * the end: the measured figure the header quotes). */
static double worst_ulps, worst_rel;
static void note_worst(double err, double v) {
  if (!(v >= 0x1p-100) || !isfinite(v)) return;
  if (err / ulp32(v) > worst_ulps) worst_ulps = err / ulp32(v);
  if (err / (0x1p-24 * v) > worst_rel) worst_rel = err / (0x1p-24 * v);
}

/* Row of n doubles normed in place: Qwen3RMSNorm / Olmo2RMSNorm (w),
 * Gemma3RMSNorm (1 + w), Llama4TextL2Norm (none). */
static void ref_norm(double *x, int64_t n, const scen *s, const float *w) {
  if (s->kind == PE_QK_NORM_NONE) return;
  double ss = 0;
  for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
  double r = 1.0 / sqrt(ss / (double)n + (double)s->eps);
  for (int64_t i = 0; i < n; i++) {
    double f = s->kind == PE_QK_NORM_RMS ? w[i]
               : s->kind == PE_QK_NORM_RMS_UNIT_OFFSET ? 1.0 + (double)w[i]
                                                       : 1.0;
    x[i] = x[i] * r * f;
  }
}

/* posenc.h's bound, in units of u = 2^-24: the scale r is within M/2 + 0.5
 * of its exact value, M the roundings a square can meet in the sum (the
 * terms of the fullest of the 16 lanes, the 4 levels of the lanes' tree,
 * and for a per-token norm the ceil(log2(heads)) levels of the rows'
 * pairwise sum; r itself is computed in float64 and rounded once); the
 * normed element within that plus half a unit per rounding of the norm (x*r
 * and *w or the fma of (1+w): 1; unit: 0.5); a rotated pair within that plus 1.5
 * (the table's cos/sin) and 0.5 (n_y*s) times v, plus half an ulp of the
 * result. First-order figures: 0.01 of slack covers the rest. */
static double bound_r(const scen *s, int64_t H) {
  int64_t hd = s->hd, lvl = 0;
  while (s->scope == PE_QK_NORM_PER_TOKEN && ((int64_t)1 << lvl) < H) lvl++;
  return (double)((hd + 15) / 16 + 4 + lvl) / 2.0 + 0.5;
}
static double norm_ops(const scen *s) {
  return s->kind == PE_QK_NORM_L2 ? 0.5 : 1.0;
}

/* Check heads [0, H) of token u (input `in`, output `out`, tensor t's offsets)
 * against the reference; weights w. */
static void check_token(const scen *s, const run *r, const void *in, const void *out,
                        const pe_tensor *t, const float *w, int64_t u) {
  int64_t H = t->shape[1], hd = s->hd, rd = s->rd ? s->rd : hd, half = rd / 2;
  int64_t b = u / s->T, tok = u % s->T;
  size_t base = (size_t)(((char *)t->data - (char *)r->qkv) / (ptrdiff_t)esz(s->dt));
  int per_token = s->scope == PE_QK_NORM_PER_TOKEN;
  const double kn = bound_r(s, H) + norm_ops(s) + 0.01, kp = kn + 2.0;
  double *x = malloc((size_t)(H * hd) * sizeof(double));
  for (int64_t h = 0; h < H; h++)
    for (int64_t e = 0; e < hd; e++)
      x[h * hd + e] = get(s->dt, in, base + (size_t)(b * t->stride[0] + tok * t->stride[2] +
                                                     h * t->stride[1] + e));
  if (per_token) ref_norm(x, H * hd, s, w);
  else
    for (int64_t h = 0; h < H; h++) ref_norm(x + h * hd, hd, s, w);
  double pos = (double)r->pos[u];
  for (int64_t h = 0; h < H; h++) {
    const double *n = x + h * hd;
    size_t o = base + (size_t)(b * t->stride[0] + tok * t->stride[2] + h * t->stride[1]);
    for (int64_t j = 0; j < half; j++) {
      /* NeoX pairs (j, j + half); GPT-J (2j, 2j + 1), HF's rotate_every_two */
      int64_t ix = s->style == PE_ROPE_GPTJ ? 2 * j : j, iy = s->style == PE_ROPE_GPTJ ? 2 * j + 1 : j + half;
      double f = pow(s->base, -(double)(2 * j) / (double)rd), c = cos(pos * f), sn = sin(pos * f);
      /* HF: q*cos + rotate_half(q)*sin, rotate_half(q) = cat(-q2, q1) */
      double xo = n[ix] * c + (-n[iy]) * sn, yo = n[iy] * c + n[ix] * sn;
      double v = fabs(n[ix]) + fabs(n[iy]);
      double tol = kp * 0x1p-24 * v + 0.5 * ulp32(v) + 1e-38;
      double gx = get(s->dt, out, o + (size_t)ix), gy = get(s->dt, out, o + (size_t)iy);
      note_worst(fabs(gx - xo), v);
      note_worst(fabs(gy - yo), v);
      if (!(fabs(gx - xo) <= tol) || !(fabs(gy - yo) <= tol)) {
        printf("token %lld head %lld pair %lld: got %.9g %.9g want %.9g %.9g tol %.3g\n",
               (long long)u, (long long)h, (long long)j, gx, gy, xo, yo, tol);
        fail();
      }
    }
    for (int64_t e = rd; e < hd; e++) {
      double g = get(s->dt, out, o + (size_t)e);
      double tol = kn * 0x1p-24 * fabs(n[e]) + 1e-38;
      if (!(fabs(g - n[e]) <= tol)) {
        printf("token %lld head %lld channel %lld: got %.9g want %.9g\n", (long long)u,
               (long long)h, (long long)e, g, n[e]);
        fail();
      }
    }
  }
  free(x);
}

static void check_values(const scen *s0) {
  scen s = *s0;
  s.dt = PE_F32;
  run r;
  run_make(&r, &s, 11);
  void *in = malloc(r.qkv_bytes);
  memcpy(in, r.qkv, r.qkv_bytes);
  assert_int_equal(pe_qk_norm_rope(r.c, &r.norm, &r.q, &r.k, r.pos, 0, NULL), PE_OK);
  for (int64_t u = 0; u < r.n; u++) {
    check_token(&s, &r, in, r.qkv, &r.q, r.qw, u);
    check_token(&s, &r, in, r.qkv, &r.k, r.kw, u);
  }
  /* the half types: the float32 result on the widened inputs, rounded once */
  for (int d = 1; d <= 2; d++) {
    scen h = s;
    h.dt = (pe_dtype)d;
    run rh, rf;
    run_make(&rh, &h, 12);
    run_make(&rf, &s, 12);
    widen_into(&rf, &rh, &h);
    assert_int_equal(pe_qk_norm_rope(rh.c, &rh.norm, &rh.q, &rh.k, rh.pos, 0, NULL), PE_OK);
    assert_int_equal(pe_qk_norm_rope(rf.c, &rf.norm, &rf.q, &rf.k, rf.pos, 0, NULL), PE_OK);
    for (int64_t i = 0; i < rh.n * rh.row; i++)
      if (bits(h.dt, rh.qkv, (size_t)i) != round_bits(h.dt, ((float *)rf.qkv)[i])) {
        printf("dtype %d element %lld: %#x, want %#x\n", d, (long long)i,
               bits(h.dt, rh.qkv, (size_t)i), round_bits(h.dt, ((float *)rf.qkv)[i]));
        fail();
      }
    run_free(&rh);
    run_free(&rf);
  }
  free(in);
  run_free(&r);
}

static const scen qwen3 = {.hd = 128, .style = PE_ROPE_NEOX, .base = 1e6, .maxp = 4096,
                           .kind = PE_QK_NORM_RMS, .eps = 1e-6f, .B = 2, .T = 5, .Hq = 4,
                           .Hk = 2, .vd = 128, .nb = 4, .bs = 4};

static void test_qwen3(void **state) {
  (void)state;
  check_values(&qwen3);
  scen s = qwen3;
  s.maxp = 0; /* on the fly */
  s.T = 40;   /* more than one block */
  check_values(&s);
}

static void test_gemma3(void **state) {
  (void)state;
  scen s = qwen3;
  s.hd = 256, s.base = 10000, s.kind = PE_QK_NORM_RMS_UNIT_OFFSET, s.Hq = 2, s.Hk = 1;
  check_values(&s);
}

static void test_llama4_l2(void **state) {
  (void)state;
  scen s = qwen3;
  s.base = 500000, s.kind = PE_QK_NORM_L2, s.eps = 1e-5f;
  check_values(&s);
}

static void test_olmo2_per_token(void **state) {
  (void)state;
  scen s = qwen3;
  s.hd = 64, s.base = 500000, s.scope = PE_QK_NORM_PER_TOKEN, s.Hq = 4, s.Hk = 4;
  check_values(&s);
}

static void test_partial_rotary_and_tails(void **state) {
  (void)state;
  scen s = qwen3;
  s.hd = 72, s.rd = 40, s.Hq = 3, s.Hk = 1;
  check_values(&s);
  s.kind = PE_QK_NORM_RMS_UNIT_OFFSET, s.scope = PE_QK_NORM_PER_TOKEN, s.hd = 34, s.rd = 0;
  check_values(&s);
  s.style = PE_ROPE_GPTJ, s.hd = 64, s.rd = 32, s.kind = PE_QK_NORM_L2; /* GPT-J pairs */
  check_values(&s);
  s.hd = 130, s.rd = 0, s.kind = PE_QK_NORM_RMS, s.scope = PE_QK_NORM_PER_HEAD;
  check_values(&s);
  /* A token's heads share their cos/sin row and weights and go through the
   * vector paths chunk by chunk, 2*VL pairs then VL: 48 pairs end in one
   * VL step with 16 lanes, 40 pairs with 8; x's and y's weights differ. */
  s.style = PE_ROPE_NEOX, s.hd = 96, s.rd = 0;
  check_values(&s);
  s.hd = 112, s.rd = 80;
  check_values(&s);
}

/* ---- the error against transformers' own float32 modules ---- */

/* The sum of n float32 squares (each already rounded, as x.pow(2) gives
 * them) as PyTorch's CPU sum reduces a contiguous row (aten's SumKernel.cpp,
 * cascade_sum -> vectorized_inner_sum -> row_sum -> multi_row_sum), for
 * 8-lane vectors (its AVX2 build): vectors of 8 consecutive squares, vector
 * i into accumulator i % 4 (one of 4 "rows" of the ilp factor) through up to
 * four cascade levels of 16 vectors each, the accumulators added in order,
 * the squares past the last whole vector added one by one, then the 8 lanes
 * one by one. It gives torch 1.13's bits (Debian's python3-torch on an AVX2
 * CPU) for every length checked (8 .. 8192), and mean(-1) is this sum
 * divided by n. */
static float torch_sum8(const float *sq, int64_t n) {
  enum { V = 8, ILP = 4, LEVELS = 4 };
  const int64_t nvec = n / V, size = nvec / ILP;
  int64_t cl = 0; /* CeilLog2(size) */
  while (((int64_t)1 << cl) < size) cl++;
  const int64_t lp = cl / LEVELS > 4 ? cl / LEVELS : 4, step = (int64_t)1 << lp;
  float acc[LEVELS][ILP][V];
  memset(acc, 0, sizeof acc);
#define ADD_VEC_(dst, i)                                                                          \
  for (int l_ = 0; l_ < V; l_++) (dst)[l_] += sq[(i) * V + l_]
  int64_t i = 0;
  while (i + step <= size) {
    for (int64_t j = 0; j < step; j++, i++)
      for (int k = 0; k < ILP; k++) ADD_VEC_(acc[0][k], i * ILP + k);
    for (int j = 1; j < LEVELS; j++) {
      for (int k = 0; k < ILP; k++)
        for (int l = 0; l < V; l++) {
          acc[j][k][l] += acc[j - 1][k][l];
          acc[j - 1][k][l] = 0;
        }
      if (i & ((step - 1) << (j * lp))) break;
    }
  }
  for (; i < size; i++)
    for (int k = 0; k < ILP; k++) ADD_VEC_(acc[0][k], i * ILP + k);
  for (int j = 1; j < LEVELS; j++)
    for (int k = 0; k < ILP; k++)
      for (int l = 0; l < V; l++) acc[0][k][l] += acc[j][k][l];
  for (int64_t v = size * ILP; v < nvec; v++) ADD_VEC_(acc[0][0], v);
  for (int k = 1; k < ILP; k++)
    for (int l = 0; l < V; l++) acc[0][0][l] += acc[0][k][l];
#undef ADD_VEC_
  float total = 0;
  for (int64_t e = nvec * V; e < n; e++) total += sq[e];
  for (int l = 0; l < V; l++) total += acc[0][0][l];
  return total;
}

/* A row normed in float32 as transformers' modules do it, each operation
 * rounded: squares x*x, their sum (torch_sum8, or a plain left-to-right sum
 * when `plain`), mean = sum / n, r = 1 / sqrt(mean + eps) (torch.rsqrt on
 * the CPU: a divide of a square root), then x * r and: Qwen3RMSNorm and
 * Olmo2RMSNorm w * (x * r), Gemma3RMSNorm (x * r) * (1 + w),
 * Llama4TextL2Norm nothing more. */
static void hf_norm_f32(float *x, int64_t n, const scen *s, const float *w, int plain) {
  float *sq = malloc((size_t)n * sizeof(float));
  for (int64_t i = 0; i < n; i++) sq[i] = x[i] * x[i];
  float sum = 0;
  if (plain)
    for (int64_t i = 0; i < n; i++) sum += sq[i];
  else
    sum = torch_sum8(sq, n);
  free(sq);
  float r = 1.0f / sqrtf(sum / (float)n + s->eps);
  for (int64_t i = 0; i < n; i++) {
    float h = x[i] * r;
    x[i] = s->kind == PE_QK_NORM_RMS ? w[i] * h
           : s->kind == PE_QK_NORM_RMS_UNIT_OFFSET ? h * (1.0f + w[i])
                                                   : h;
  }
}

typedef struct err_stats {
  double max, sum2;
  int64_t count;
} err_stats;
static void err_note(err_stats *e, double err, double v) {
  double u = err / ulp32(v);
  if (u > e->max) e->max = u;
  e->sum2 += u * u;
  e->count++;
}
static double err_rms(const err_stats *e) { return sqrt(e->sum2 / (double)e->count); }

/* One model's norm on T tokens of H heads x hd (f32, [1, H, T, hd]), every
 * row (per head) or token (per token) drawn at its own scale 10^U(-3, 3):
 * this library's result and the two transformers emulations (with the
 * table's own cos/sin, the same inputs: only the arithmetic differs; then
 * apply_rotary_pos_emb in float32, (q * cos) + (rotate_half(q) * sin), each
 * product and the sum rounded), each against the float64 formula with exact
 * cos/sin, in float32 ulps of v = |n_x| + |n_y|. */
static void measure_vs_hf(const scen *s, int64_t H, int64_t T, uint64_t seed, err_stats *ours,
                          err_stats *hf, err_stats *hf_plain) {
  const int64_t hd = s->hd, half = hd / 2, n = H * T * hd;
  const int per_token = s->scope == PE_QK_NORM_PER_TOKEN;
  rng = seed | 1;
  float *q = malloc((size_t)n * sizeof(float)), *q0 = malloc((size_t)n * sizeof(float));
  int64_t wn = per_token ? H * hd : hd;
  float *w = malloc((size_t)wn * sizeof(float));
  double center = s->kind == PE_QK_NORM_RMS_UNIT_OFFSET ? 0.0 : 1.0;
  for (int64_t i = 0; i < wn; i++) w[i] = (float)(center + 0.5 * uni());
  for (int64_t t = 0; t < T; t++) {
    double scale = pow(10.0, 3.0 * uni());
    for (int64_t h = 0; h < H; h++) {
      if (!per_token) scale = pow(10.0, 3.0 * uni());
      for (int64_t e = 0; e < hd; e++) q[(h * T + t) * hd + e] = (float)(scale * uni());
    }
  }
  memcpy(q0, q, (size_t)n * sizeof(float));
  int64_t *pos = malloc((size_t)T * sizeof(int64_t));
  for (int64_t t = 0; t < T; t++) pos[t] = (int64_t)(rnd() % 4096);
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = (int32_t)hd;
  p.style = s->style;
  p.base = s->base;
  p.max_positions = 4096;
  pe_rope_cache *c;
  assert_int_equal(pe_rope_cache_create(&p, &c), PE_OK);
  pe_qk_norm norm;
  pe_qk_norm_init(&norm);
  norm.kind = s->kind;
  norm.scope = s->scope;
  norm.eps = s->eps;
  norm.q_weight = s->kind == PE_QK_NORM_L2 ? NULL : w;
  pe_tensor tq = {q, PE_F32, {1, H, T, hd}, {H * T * hd, T * hd, hd, 1}};
  assert_int_equal(pe_qk_norm_rope(c, &norm, &tq, NULL, pos, 0, NULL), PE_OK);
  float *cs = malloc((size_t)hd * sizeof(float));
  double *x = malloc((size_t)(H * hd) * sizeof(double)), *ec = malloc((size_t)hd * sizeof(double));
  double *fr = malloc((size_t)half * sizeof(double));
  for (int64_t j = 0; j < half; j++) fr[j] = pow(s->base, -(double)(2 * j) / (double)hd);
  float *f[2];
  f[0] = malloc((size_t)(H * hd) * sizeof(float));
  f[1] = malloc((size_t)(H * hd) * sizeof(float));
  for (int64_t t = 0; t < T; t++) {
    assert_int_equal(pe_rope_cache_cos_sin(c, pos[t], cs, cs + half), PE_OK);
    for (int64_t j = 0; j < half; j++) { /* exact cos/sin of the token's angles */
      ec[j] = cos((double)pos[t] * fr[j]);
      ec[half + j] = sin((double)pos[t] * fr[j]);
    }
    for (int64_t h = 0; h < H; h++)
      for (int64_t e = 0; e < hd; e++)
        x[h * hd + e] = f[0][h * hd + e] = f[1][h * hd + e] = q0[(h * T + t) * hd + e];
    for (int k = 0; k < 2; k++) {
      if (per_token) hf_norm_f32(f[k], H * hd, s, w, k);
      else
        for (int64_t h = 0; h < H; h++) hf_norm_f32(f[k] + h * hd, hd, s, w, k);
    }
    if (per_token) ref_norm(x, H * hd, s, w);
    else
      for (int64_t h = 0; h < H; h++) ref_norm(x + h * hd, hd, s, w);
    for (int64_t h = 0; h < H; h++)
      for (int64_t j = 0; j < half; j++) {
        int64_t ix = s->style == PE_ROPE_GPTJ ? 2 * j : j;
        int64_t iy = s->style == PE_ROPE_GPTJ ? 2 * j + 1 : j + half;
        const double *nv = x + h * hd, ca = ec[j], sa = ec[half + j];
        double xo = nv[ix] * ca - nv[iy] * sa, yo = nv[iy] * ca + nv[ix] * sa;
        double v = fabs(nv[ix]) + fabs(nv[iy]);
        const float *g = q + (h * T + t) * hd;
        err_note(ours, fabs(g[ix] - xo), v);
        err_note(ours, fabs(g[iy] - yo), v);
        for (int k = 0; k < 2; k++) {
          const float *m = f[k] + h * hd;
          float c0 = cs[j], s0 = cs[half + j];
          float hx = m[ix] * c0 + (-m[iy]) * s0, hy = m[iy] * c0 + m[ix] * s0;
          err_note(k ? hf_plain : hf, fabs(hx - xo), v);
          err_note(k ? hf_plain : hf, fabs(hy - yo), v);
        }
      }
  }
  free(f[0]);
  free(f[1]);
  free(x);
  free(ec);
  free(fr);
  free(cs);
  free(pos);
  free(w);
  free(q);
  free(q0);
  pe_rope_cache_destroy(c);
}

/* posenc.h's figures: for each model's norm, this library's largest error
 * at most 4 float32 ulps of |n_x| + |n_y|, and its largest and its RMS
 * error no larger than transformers' float32 module gives on the same
 * inputs (PyTorch's cascaded sum; a plain sum is printed too). */
static void test_error_vs_hf_float32(void **state) {
  (void)state;
  static const struct {
    const char *name;
    pe_qk_norm_kind kind;
    pe_qk_norm_scope scope;
    pe_rope_style style;
    int32_t hd;
    int64_t H, T;
    double base;
    float eps;
  } cases[] = {
      {"Qwen3RMSNorm (per head)", PE_QK_NORM_RMS, PE_QK_NORM_PER_HEAD, PE_ROPE_NEOX, 128, 8, 256, 1e6, 1e-6f},
      {"Gemma3RMSNorm (per head)", PE_QK_NORM_RMS_UNIT_OFFSET, PE_QK_NORM_PER_HEAD, PE_ROPE_NEOX, 256, 4, 256, 1e4, 1e-6f},
      {"Llama4TextL2Norm (per head)", PE_QK_NORM_L2, PE_QK_NORM_PER_HEAD, PE_ROPE_NEOX, 128, 8, 256, 5e5, 1e-5f},
      {"Olmo2RMSNorm (per token)", PE_QK_NORM_RMS, PE_QK_NORM_PER_TOKEN, PE_ROPE_NEOX, 128, 32, 64, 5e5, 1e-6f},
      {"RMS, GPT-J pairs (per head)", PE_QK_NORM_RMS, PE_QK_NORM_PER_HEAD, PE_ROPE_GPTJ, 64, 8, 256, 1e4, 1e-6f},
  };
  err_stats all = {0}, all_hf = {0};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    scen s = qwen3;
    s.kind = cases[i].kind, s.scope = cases[i].scope, s.style = cases[i].style;
    s.hd = cases[i].hd, s.base = cases[i].base, s.eps = cases[i].eps;
    err_stats ours = {0}, hf = {0}, plain = {0};
    for (uint64_t seed = 1; seed <= 4; seed++)
      measure_vs_hf(&s, cases[i].H, cases[i].T, 1000 * (i + 1) + seed, &ours, &hf, &plain);
    printf("# %-28s float32 ulps of |n_x|+|n_y|, max / rms over %lld values: posenc %.2f / %.3f,"
           " transformers float32 %.2f / %.3f (plain sum %.2f / %.3f)\n",
           cases[i].name, (long long)ours.count, ours.max, err_rms(&ours), hf.max, err_rms(&hf),
           plain.max, err_rms(&plain));
    assert_true(ours.max <= 4.0);
    assert_true(ours.max <= hf.max);
    assert_true(err_rms(&ours) <= err_rms(&hf));
    if (ours.max > all.max) all.max = ours.max;
    if (hf.max > all_hf.max) all_hf.max = hf.max;
  }
  printf("# worst: posenc %.2f, transformers float32 %.2f float32 ulps\n", all.max, all_hf.max);
}

static void check_store(const scen *s);

/* More head rows per token than the norm stage holds at once. */
static void test_many_heads(void **state) {
  (void)state;
  scen s = qwen3;
  s.hd = 8, s.Hq = 1100, s.Hk = 3, s.T = 2, s.B = 1;
  check_values(&s);
  /* the store, k's heads in groups too */
  s.Hq = 600, s.Hk = 600, s.vd = 8, s.nb = 1, s.bs = 4, s.dt = PE_BF16, s.kcd = PE_F32;
  check_store(&s);
}

/* ---- the store ---- */

static void check_store(const scen *s) {
  run st, ip, f32;
  scen sf = *s;
  sf.dt = PE_F32;
  run_make(&st, s, 21);
  run_make(&ip, s, 21);
  run_make(&f32, &sf, 21);
  widen_into(&f32, &st, s);
  void *orig = malloc(st.qkv_bytes);
  memcpy(orig, st.qkv, st.qkv_bytes);
  assert_int_equal(pe_qk_norm_rope_store(st.c, &st.norm, &st.q, &st.k, s->vd ? &st.v : NULL,
                                         &st.kv, st.slots, st.pos, 0, NULL),
                   PE_OK);
  assert_int_equal(pe_qk_norm_rope(ip.c, &ip.norm, &ip.q, &ip.k, ip.pos, 0, NULL), PE_OK);
  assert_int_equal(pe_qk_norm_rope(f32.c, &f32.norm, &f32.q, &f32.k, f32.pos, 0, NULL), PE_OK);
  size_t es = esz(s->dt), qn = (size_t)(s->Hq * s->hd);
  unsigned char *kc_mark = calloc(st.kc_bytes, 1), *vc_mark = calloc(st.vc_bytes, 1);
  for (int64_t u = 0; u < st.n; u++) {
    size_t rowo = (size_t)(u * st.row);
    /* q: the in-place call's; k and v: unchanged */
    assert_memory_equal((char *)st.qkv + rowo * es, (char *)ip.qkv + rowo * es, qn * es);
    assert_memory_equal((char *)st.qkv + (rowo + qn) * es, (char *)orig + (rowo + qn) * es,
                        (size_t)(st.row - (int64_t)qn) * es);
    int64_t slot = st.slots[u];
    if (slot < 0) continue;
    int64_t blk = slot / s->bs, off = slot % s->bs;
    for (int64_t h = 0; h < s->Hk; h++) {
      size_t co = (size_t)(blk * st.tkc.stride[0] + h * st.tkc.stride[1] + off * st.tkc.stride[2]);
      size_t ko = rowo + qn + (size_t)(h * s->hd);
      for (int64_t e = 0; e < s->hd; e++) {
        uint32_t got = bits(s->kcd, st.kc, co + (size_t)e);
        assert_int_equal(got, round_bits(s->kcd, ((float *)f32.qkv)[ko + (size_t)e]));
        if (s->kcd == s->dt) assert_int_equal(got, bits(s->dt, ip.qkv, ko + (size_t)e));
      }
      memset(kc_mark + co * esz(s->kcd), 1, (size_t)s->hd * esz(s->kcd));
      if (!s->vd) continue;
      size_t vo = (size_t)(blk * st.tvc.stride[0] + h * st.tvc.stride[1] + off * st.tvc.stride[2]);
      size_t so = rowo + (size_t)((s->Hq + s->Hk) * s->hd + h * s->vd);
      for (int64_t e = 0; e < s->vd; e++) {
        uint32_t want = s->vcd == s->dt ? bits(s->dt, orig, so + (size_t)e)
                                        : round_bits(s->vcd, get(s->dt, orig, so + (size_t)e));
        assert_int_equal(bits(s->vcd, st.vc, vo + (size_t)e), want);
      }
      memset(vc_mark + vo * esz(s->vcd), 1, (size_t)s->vd * esz(s->vcd));
    }
  }
  for (size_t i = 0; i < st.kc_bytes; i++)
    if (!kc_mark[i]) assert_int_equal(((unsigned char *)st.kc)[i], 0xa5);
  for (size_t i = 0; i < st.vc_bytes; i++)
    if (!vc_mark[i]) assert_int_equal(((unsigned char *)st.vc)[i], 0xa5);
  free(kc_mark);
  free(vc_mark);
  free(orig);
  run_free(&st);
  run_free(&ip);
  run_free(&f32);
}

static void test_store_all_dtypes(void **state) {
  (void)state;
  for (int kd = 0; kd < 3; kd++)
    for (int cd = 0; cd < 3; cd++) {
      scen s = qwen3;
      s.dt = (pe_dtype)kd, s.kcd = (pe_dtype)cd, s.vcd = (pe_dtype)((cd + 1) % 3);
      s.T = 9, s.nb = 5;
      check_store(&s);
      s.hd = 40, s.rd = 24, s.vd = 24, s.scope = PE_QK_NORM_PER_TOKEN, s.style = PE_ROPE_GPTJ;
      check_store(&s);
      s.vd = 0; /* no v */
      s.kind = PE_QK_NORM_L2;
      check_store(&s);
    }
}

/* PE_QK_NORM_NONE: the existing calls, bit for bit. */
static void test_none_is_rope(void **state) {
  (void)state;
  scen s = qwen3;
  s.kind = PE_QK_NORM_NONE, s.dt = PE_BF16, s.kcd = PE_F16, s.vd = 0, s.hd = 80, s.rd = 64;
  run a, b;
  run_make(&a, &s, 5);
  run_make(&b, &s, 5);
  assert_int_equal(pe_qk_norm_rope(a.c, &a.norm, &a.q, &a.k, a.pos, PE_ROPE_INVERSE, NULL), PE_OK);
  assert_int_equal(pe_apply_rope_qk(b.c, &b.q, &b.k, b.pos, PE_ROPE_INVERSE, NULL), PE_OK);
  assert_memory_equal(a.qkv, b.qkv, a.qkv_bytes);
  run_free(&a);
  run_free(&b);
  run_make(&a, &s, 6);
  run_make(&b, &s, 6);
  assert_int_equal(
      pe_qk_norm_rope_store(a.c, &a.norm, &a.q, &a.k, NULL, &a.kv, a.slots, a.pos, 0, NULL), PE_OK);
  assert_int_equal(pe_apply_rope_qk_store(b.c, &b.q, &b.k, &b.tkc, b.slots, b.pos, 0, NULL), PE_OK);
  assert_memory_equal(a.qkv, b.qkv, a.qkv_bytes);
  assert_memory_equal(a.kc, b.kc, a.kc_bytes);
  run_free(&a);
  run_free(&b);
}

/* ---- errors: nothing written ---- */

typedef struct snap {
  void *qkv, *kc, *vc;
} snap;
static snap take(const run *r) {
  snap s = {malloc(r->qkv_bytes), malloc(r->kc_bytes), malloc(r->vc_bytes)};
  memcpy(s.qkv, r->qkv, r->qkv_bytes);
  memcpy(s.kc, r->kc, r->kc_bytes);
  memcpy(s.vc, r->vc, r->vc_bytes);
  return s;
}
static void expect_error(pe_status got, pe_status want, const char *fn, const char *text,
                         const run *r, snap *s) {
  if (got != want || !strstr(pe_last_error(), fn) || !strstr(pe_last_error(), text)) {
    printf("status %d (want %d), message \"%s\" (want \"%s\", \"%s\")\n", (int)got, (int)want,
           pe_last_error(), fn, text);
    fail();
  }
  assert_memory_equal(r->qkv, s->qkv, r->qkv_bytes);
  assert_memory_equal(r->kc, s->kc, r->kc_bytes);
  assert_memory_equal(r->vc, s->vc, r->vc_bytes);
}

static void test_errors_write_nothing(void **state) {
  (void)state;
  static const char S[] = "pe_qk_norm_rope_store", I[] = "pe_qk_norm_rope";
  run r;
  run_make(&r, &qwen3, 31);
  snap s = take(&r);
  pe_qk_norm n = r.norm;
  pe_kv_cache kv = r.kv;
#define STORE(nn, vv, kvp, sl, ps, fl) \
  pe_qk_norm_rope_store(r.c, nn, &r.q, &r.k, vv, kvp, sl, ps, fl, NULL)
  expect_error(STORE(NULL, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_NULL_POINTER, S, "norm is NULL", &r, &s);
  expect_error(pe_qk_norm_rope(r.c, NULL, &r.q, &r.k, r.pos, 0, NULL), PE_ERR_NULL_POINTER, I,
               "norm is NULL", &r, &s);
  n.kind = (pe_qk_norm_kind)7;
  expect_error(STORE(&n, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_INVALID_ARGUMENT, S, "kind 7", &r, &s);
  expect_error(pe_qk_norm_rope(r.c, &n, &r.q, &r.k, r.pos, 0, NULL), PE_ERR_INVALID_ARGUMENT, I,
               "kind 7", &r, &s);
  n = r.norm, n.scope = (pe_qk_norm_scope)2;
  expect_error(STORE(&n, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_INVALID_ARGUMENT, S, "scope 2", &r, &s);
  n = r.norm, n.eps = -1e-6f;
  expect_error(STORE(&n, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_INVALID_ARGUMENT, S, "eps", &r, &s);
  n.eps = NAN;
  expect_error(pe_qk_norm_rope(r.c, &n, &r.q, &r.k, r.pos, 0, NULL), PE_ERR_INVALID_ARGUMENT, I,
               "eps", &r, &s);
  n = r.norm, n.k_weight = NULL;
  expect_error(STORE(&n, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_NULL_POINTER, S, "k_weight is NULL", &r, &s);
  n = r.norm, n.kind = PE_QK_NORM_L2;
  expect_error(STORE(&n, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_INVALID_ARGUMENT, S, "q_weight is set", &r, &s);
  n = r.norm, n.q_weight = (const float *)r.qkv; /* inside q, which is written */
  expect_error(pe_qk_norm_rope(r.c, &n, &r.q, &r.k, r.pos, 0, NULL), PE_ERR_SHAPE, I,
               "q_weight", &r, &s);
  n = r.norm, n.k_weight = (const float *)r.kc; /* inside the k cache */
  expect_error(STORE(&n, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_SHAPE, S, "k_weight", &r, &s);
  struct {
    pe_qk_norm n;
    uint32_t extra;
  } big = {r.norm, 1};
  big.n.struct_size = sizeof big;
  expect_error(STORE(&big.n, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_INVALID_ARGUMENT, S,
               "struct_size", &r, &s);
  n = r.norm, n.struct_size = 0; /* not initialised */
  expect_error(pe_qk_norm_rope(r.c, &n, &r.q, &r.k, r.pos, 0, NULL), PE_ERR_INVALID_ARGUMENT, I,
               "struct_size 0", &r, &s);
  kv.struct_size = (uint32_t)offsetof(pe_kv_cache, k_quant);
  expect_error(STORE(&r.norm, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_INVALID_ARGUMENT, S,
               "kv_cache struct_size", &r, &s);
  kv = r.kv;
  expect_error(STORE(&r.norm, &r.v, NULL, r.slots, r.pos, 0), PE_ERR_NULL_POINTER, S, "kv_cache is NULL", &r, &s);
  kv.k_quant = 1; /* PE_KV_FP8_E4M3 without its scale */
  expect_error(STORE(&r.norm, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_NULL_POINTER, S, "k_scale", &r, &s);
  kv = r.kv, kv.k_quant = 5; /* past the last pe_kv_quant */
  expect_error(STORE(&r.norm, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_INVALID_ARGUMENT, S, "pe_kv_quant", &r, &s);
  kv = r.kv, kv.v_scale = r.qw; /* a scale for a plain cache */
  expect_error(STORE(&r.norm, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_INVALID_ARGUMENT, S, "v_scale", &r, &s);
  kv = r.kv, kv.k = NULL;
  expect_error(STORE(&r.norm, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_NULL_POINTER, S, "kv_cache->k", &r, &s);
  kv = r.kv, kv.v = NULL;
  expect_error(STORE(&r.norm, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_NULL_POINTER, S, "v cache is NULL", &r, &s);
  kv = r.kv;
  expect_error(STORE(&r.norm, NULL, &kv, r.slots, r.pos, 0), PE_ERR_NULL_POINTER, S, "v is NULL", &r, &s);
  pe_tensor v2 = r.v;
  v2.shape[3] = 64;
  expect_error(STORE(&r.norm, &v2, &kv, r.slots, r.pos, 0), PE_ERR_SHAPE, S, "v_cache head_dim", &r, &s);
  v2 = r.v, v2.shape[1] = 1;
  expect_error(STORE(&r.norm, &v2, &kv, r.slots, r.pos, 0), PE_ERR_SHAPE, S, "must match k's", &r, &s);
  pe_tensor vc2 = r.tvc;
  vc2.shape[2] = 2;
  kv.v = &vc2;
  expect_error(STORE(&r.norm, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_SHAPE, S, "must match k_cache's", &r, &s);
  vc2 = r.tkc; /* the v cache is the k cache */
  expect_error(STORE(&r.norm, &r.v, &kv, r.slots, r.pos, 0), PE_ERR_SHAPE, S, "v_cache and k_cache overlap", &r, &s);
  kv = r.kv;
  int64_t dup[10];
  memcpy(dup, r.slots, sizeof dup);
  dup[3] = 7, dup[8] = 7;
  expect_error(STORE(&r.norm, &r.v, &kv, dup, r.pos, 0), PE_ERR_INVALID_ARGUMENT, S, "slot 7 twice", &r, &s);
  int64_t badpos[10];
  memcpy(badpos, r.pos, sizeof badpos);
  badpos[9] = 4096;
  expect_error(STORE(&r.norm, &r.v, &kv, r.slots, badpos, 0), PE_ERR_POSITION_OUT_OF_RANGE, S,
               "4096", &r, &s);
  expect_error(pe_qk_norm_rope(r.c, &r.norm, &r.q, &r.k, badpos, 0, NULL),
               PE_ERR_POSITION_OUT_OF_RANGE, I, "4096", &r, &s);
  expect_error(STORE(&r.norm, &r.v, &kv, r.slots, r.pos, 0x100), PE_ERR_INVALID_ARGUMENT, S, "flag", &r, &s);
  expect_error(STORE(&r.norm, &r.v, &kv, NULL, r.pos, 0), PE_ERR_NULL_POINTER, S, "slot_mapping", &r, &s);
  v2 = r.v, v2.shape[3] = 64; /* as k: not the cache's head_dim */
  expect_error(pe_qk_norm_rope_store(r.c, &r.norm, &r.q, &v2, &r.v, &kv, r.slots, r.pos, 0, NULL),
               PE_ERR_SHAPE, S, "head_dim", &r, &s);
  /* q overlapping v (q written, v read) */
  pe_tensor q2 = r.q;
  q2.data = r.v.data;
  q2.shape[1] = 1;
  expect_error(pe_qk_norm_rope_store(r.c, &r.norm, &q2, &r.k, &r.v, &kv, r.slots, r.pos, 0, NULL),
               PE_ERR_SHAPE, S, "q and v overlap", &r, &s);
#undef STORE
  /* zero tokens: OK, nothing written */
  pe_tensor q0 = r.q, k0 = r.k, v0 = r.v;
  q0.shape[2] = k0.shape[2] = v0.shape[2] = 0;
  assert_int_equal(pe_qk_norm_rope_store(r.c, &r.norm, &q0, &k0, &v0, &kv, r.slots, NULL, 0, NULL), PE_OK);
  assert_int_equal(pe_qk_norm_rope(r.c, &r.norm, &q0, &k0, NULL, 0, NULL), PE_OK);
  assert_memory_equal(r.qkv, s.qkv, r.qkv_bytes);
  assert_memory_equal(r.kc, s.kc, r.kc_bytes);
  free(s.qkv);
  free(s.kc);
  free(s.vc);
  run_free(&r);
}

/* ---- bit identity across ISAs and pool sizes ---- */

/* Both calls on the scenario (store first on one copy, in place on another),
 * under the path in use: the store's qkv, k cache and v cache, then the
 * in-place call's qkv, concatenated into out (results_bytes long). */
static size_t results_bytes(const scen *s) {
  int64_t n = s->B * s->T, row = (s->Hq + s->Hk) * s->hd + s->Hk * s->vd, slots = s->nb * s->bs;
  return 2 * (size_t)(n * row) * esz(s->dt) + (size_t)(slots * s->Hk * s->hd) * esz(s->kcd) +
         (size_t)(slots * s->Hk * (s->vd ? s->vd : 1)) * esz(s->vcd);
}

static void results(void *ctx, pe_threadpool *pool, void *out) {
  const scen *s = ctx;
  run a, b;
  run_make(&a, s, 41);
  run_make(&b, s, 41);
  assert_int_equal(pe_qk_norm_rope_store(a.c, &a.norm, &a.q, &a.k, s->vd ? &a.v : NULL, &a.kv,
                                         a.slots, a.pos, 0, pool),
                   PE_OK);
  assert_int_equal(pe_qk_norm_rope(b.c, &b.norm, &b.q, &b.k, b.pos, 0, pool), PE_OK);
  assert_int_equal(a.qkv_bytes + a.kc_bytes + a.vc_bytes + b.qkv_bytes, results_bytes(s));
  unsigned char *p = out;
  memcpy(p, a.qkv, a.qkv_bytes), p += a.qkv_bytes;
  memcpy(p, a.kc, a.kc_bytes), p += a.kc_bytes;
  memcpy(p, a.vc, a.vc_bytes), p += a.vc_bytes;
  memcpy(p, b.qkv, b.qkv_bytes);
  run_free(&a);
  run_free(&b);
}

static void test_bit_identical_across_isas(void **state) {
  (void)state;
  if (!pe_test_any_simd_path()) skip(); /* only scalar here: nothing to compare */
  const int32_t dims[][2] = {{8, 0}, {34, 0}, {40, 24}, {72, 0}, {128, 0}, {130, 96}, {96, 0},
                             {112, 80}};
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
    for (int kind = 0; kind < 4; kind++)
      for (int dt = 0; dt < 3; dt++) {
        scen s = qwen3;
        s.hd = dims[d][0], s.rd = dims[d][1], s.vd = dims[d][0] / 2;
        s.kind = (pe_qk_norm_kind)kind, s.scope = (pe_qk_norm_scope)((d + kind) & 1);
        s.style = (pe_rope_style)((d + dt) & 1), s.dt = (pe_dtype)dt;
        s.kcd = (pe_dtype)((dt + kind) % 3), s.vcd = (pe_dtype)((dt + 2) % 3);
        s.maxp = (d & 1) ? 0 : 4096, s.Hq = 3, s.T = 7, s.wild = 1;
        char what[128];
        snprintf(what, sizeof what, "head_dim %d rotary %d kind %d dtype %d", (int)s.hd,
                 (int)s.rd, kind, dt);
        pe_isa_compare(what, results_bytes(&s), results, &s);
      }
}

static void test_pool_sizes(void **state) {
  (void)state;
  pe_threadpool *pool = NULL;
  assert_int_equal(pe_threadpool_create(2, &pool), PE_OK);
  scen s = qwen3;
  s.B = 4, s.T = 300, s.Hq = 8, s.nb = 80, s.bs = 16, s.dt = PE_BF16, s.kcd = PE_BF16,
  s.vcd = PE_BF16;
  for (int scope = 0; scope < 2; scope++) {
    s.scope = (pe_qk_norm_scope)scope;
    pe_pool_compare(scope ? "per token" : "per head", results_bytes(&s), results, &s, pool);
  }
  pe_threadpool_destroy(pool);
}

static void test_init(void **state) {
  (void)state;
  pe_qk_norm n;
  memset(&n, 0xff, sizeof n);
  pe_qk_norm_init(&n);
  assert_int_equal(n.struct_size, sizeof n);
  assert_int_equal(n.kind, PE_QK_NORM_NONE);
  assert_int_equal(n.scope, PE_QK_NORM_PER_HEAD);
  assert_true(n.eps == 1e-6f);
  assert_null(n.q_weight);
  assert_null(n.k_weight);
  pe_kv_cache kv;
  memset(&kv, 0xff, sizeof kv);
  pe_kv_cache_init(&kv);
  assert_int_equal(kv.struct_size, sizeof kv);
  assert_null(kv.k);
  assert_null(kv.v);
  assert_int_equal(kv.k_quant | kv.v_quant, 0);
  assert_null(kv.k_scale);
  assert_null(kv.v_scale);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_init),
      cmocka_unit_test(test_qwen3),
      cmocka_unit_test(test_gemma3),
      cmocka_unit_test(test_llama4_l2),
      cmocka_unit_test(test_olmo2_per_token),
      cmocka_unit_test(test_partial_rotary_and_tails),
      cmocka_unit_test(test_error_vs_hf_float32),
      cmocka_unit_test(test_many_heads),
      cmocka_unit_test(test_store_all_dtypes),
      cmocka_unit_test(test_none_is_rope),
      cmocka_unit_test(test_errors_write_nothing),
      cmocka_unit_test(test_bit_identical_across_isas),
      cmocka_unit_test(test_pool_sizes),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  printf("worst f32 error: %.3f float32 ulps of v = |n_x| + |n_y| (%.3f * 2^-24 * v)\n",
         worst_ulps, worst_rel);
  return rc;
}
