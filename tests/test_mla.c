/* test_mla.c - pe_mla_rope_store and pe_mla_cache_read: the MLA step of
 * DeepSeek-V3 (kv_a_layernorm on the 512-channel latent, RoPE of the 64
 * k_pe channels and of every q head's rope slice, the [kv_c | k_pe] row into
 * a paged cache) and of DeepSeek-V4 (a 512-channel kv row normed whole and
 * rotated on its last 64, q heads normed without weight and rotated on their
 * last 64), in every cache format.
 *
 * What is checked against what:
 * - f32 values: against float64 formulas written here from transformers'
 *   DeepseekV3RMSNorm (x * rsqrt(mean(x^2) + eps) * w) and its interleaved
 *   rotation (pairs (2j, 2j + 1), angle position * 10000^(-2j/64)), kept in
 *   pair order (GPT-J, as vLLM stores k_pe), within 8 float32 ulps of the
 *   magnitude (2.9 measured with the QK-norm's float32 arithmetic; its
 *   first-order bound for a 512-channel norm, posenc.h, is 21.5 * 2^-24 of
 *   it plus half an ulp); q's channels outside the rope slice bit for bit
 *   untouched (no q norm), or normed as the formula says (V4).
 * - bf16 caches and inputs: bit for bit the float32 result rounded once (the
 *   rounding written here).
 * - The rotated slices where the API lets them sit: kv rows with them first
 *   (no norm), and q and kv rows with them inside, normed on both sides.
 * - PE_MLA_ROPE_FIRST: the latent-first row with its channels moved.
 * - FP8 formats: every byte from an encoder written here from each format's
 *   definition (the OCP e4m3 reference of kv_quant_ref.h; vLLM's tile scale
 *   max(amax / 448, FLT_MIN) for PE_MLA_FP8_DS; the bf16 round trip, the
 *   exact power-of-two exponent and the clamp for PE_MLA_FP8_DS_V4) applied
 *   to the float32 plain result; scale bytes and the V4 pad byte; bf16 rope.
 * - pe_mla_cache_read: each format's decoding written here.
 * - Slots: -1 and unmapped rows untouched, every byte.
 * - Bit identity across every ISA path and pool size; errors write nothing.
 */
#include <float.h>
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

#define TEST_RNG_SEED 0x9e3779b97f4a7c15ull
#include "isa_compare.h"
#include "kv_quant_ref.h"
#include "test_util.h"

static double uni(void) { return unit_double(rnd()) * 2.0 - 1.0; }

/* ---- the layer shapes ---- */

enum { B = 2, T = 5, QH = 4, R = 64 };
#define BASE 10000.0

/* q_norm: q heads normed whole without weight (DeepSeek-V4's); v4: the
 * layer whose cache formats are PE_MLA_FP8_DS_V4's (else PE_MLA_FP8_DS's) */
typedef struct layer {
  int q_dim, q_off, kv_dim, kv_off, norm_dim, q_norm, v4;
} layer;
static const layer V3 = {192, 128, 576, 512, 512, 0, 0};
static const layer V4 = {512, 448, 512, 448, 512, 1, 1};
/* kv rows whose rotated channels come first and are not normed (kv_norm
 * NONE: a layout an engine may choose; kv_rope_offset 0) */
static const layer RF = {192, 128, 576, 0, 0, 0, 0};
/* rotated slices inside the rows, where the API lets them sit: q normed on
 * both sides of its slice, the kv norm reaching past the kv slice (the
 * channels before, the slice and some after it normed, the rest not) */
static const layer MID = {192, 64, 576, 256, 448, 1, 0};

static pe_rope_cache *mla_cache(int max_positions) {
  return rope_cache(R, R, PE_ROPE_GPTJ, BASE, max_positions);
}

static void fill_mla(pe_mla *m, const layer *L, const float *w, pe_mla_format f, pe_mla_order o,
                     const float *scale) {
  pe_mla_init(m);
  m->rope_dim = R;
  m->kv_norm_dim = L->norm_dim;
  m->kv_rope_offset = L->kv_off;
  m->q_rope_offset = L->q_off;
  m->kv_weight = w;
  m->kv_eps = 1e-6f;
  if (!L->norm_dim) m->kv_norm = PE_QK_NORM_NONE, m->kv_weight = NULL;
  if (L->q_norm) {
    m->q_norm = PE_QK_NORM_L2;
    m->q_eps = 1e-6f;
  }
  m->format = (uint32_t)f;
  m->order = (uint32_t)o;
  m->scale = scale;
}

/* Test data: q [B, QH, T, q_dim], kv [B, 1, T, kv_dim] (f32), positions,
 * weights around 1. */
typedef struct data {
  const layer *L;
  float *q, *kv, w[1024];
  int64_t pos[B * T], slots[B * T];
} data;

static void make_data(data *d, const layer *L) {
  d->L = L;
  d->q = malloc(sizeof(float) * B * QH * T * L->q_dim);
  d->kv = malloc(sizeof(float) * B * T * L->kv_dim);
  for (int i = 0; i < B * QH * T * L->q_dim; i++) d->q[i] = (float)(uni() * 4.0);
  for (int i = 0; i < B * T * L->kv_dim; i++) d->kv[i] = (float)(uni() * 3.0);
  for (int i = 0; i < 1024; i++) d->w[i] = (float)(1.0 + 0.3 * uni());
  for (int i = 0; i < B * T; i++) d->pos[i] = 3 + 97 * i;
  /* slots of a cache of 4 blocks of 4 rows: token (b, t) at a scattered
   * slot, one token skipped */
  static const int64_t slots[B * T] = {13, 2, 7, -1, 0, 15, 9, 4, 11, 6};
  memcpy(d->slots, slots, sizeof slots);
}
static void free_data(data *d) {
  free(d->q);
  free(d->kv);
}

static pe_tensor q_tensor(float *q, const layer *L, pe_dtype dt) {
  return (pe_tensor){q, dt, {B, QH, T, L->q_dim},
                     {(int64_t)QH * T * L->q_dim, (int64_t)T * L->q_dim, L->q_dim, 1}};
}
static pe_tensor kv_tensor(float *kv, const layer *L, pe_dtype dt) {
  return (pe_tensor){kv, dt, {B, 1, T, L->kv_dim}, {(int64_t)T * L->kv_dim, 0, L->kv_dim, 1}};
}

enum { NB = 4, BS = 4 };
/* A plain cache [NB, 1, BS, kv_dim] of dtype dt with padded rows. */
static pe_tensor plain_cache(void *mem, const layer *L, pe_dtype dt) {
  int64_t row = L->kv_dim + 8;
  return (pe_tensor){mem, dt, {NB, 1, BS, L->kv_dim}, {BS * row, 0, row, 1}};
}

/* ---- the float64 reference ---- */

static void ref_rotate(double *x, int64_t pos) {
  for (int j = 0; j < R / 2; j++) {
    double f = pow(BASE, -2.0 * j / R), a = (double)pos * f;
    double c = cos(a), s = sin(a), x0 = x[2 * j], x1 = x[2 * j + 1];
    x[2 * j] = x0 * c - x1 * s;
    x[2 * j + 1] = x0 * s + x1 * c;
  }
}
/* kv row -> its normed and rotated row (kv order), double. */
static void ref_kv(const data *d, int b, int t, double *out) {
  const layer *L = d->L;
  const float *x = d->kv + ((int64_t)b * T + t) * L->kv_dim;
  double ss = 0;
  for (int i = 0; i < L->norm_dim; i++) ss += (double)x[i] * x[i];
  double r = L->norm_dim ? 1.0 / sqrt(ss / L->norm_dim + 1e-6) : 1.0;
  for (int i = 0; i < L->kv_dim; i++) out[i] = i < L->norm_dim ? x[i] * r * d->w[i] : x[i];
  ref_rotate(out + L->kv_off, d->pos[b * T + t]);
}
/* q head (b, h, t) of q0 (the input) -> its row after the step, double. */
static void ref_q(const data *d, const float *q0, int b, int h, int t, double *out) {
  const layer *L = d->L;
  const float *x = q0 + (((int64_t)b * QH + h) * T + t) * L->q_dim;
  double r = 1;
  if (L->q_norm) {
    double ss = 0;
    for (int i = 0; i < L->q_dim; i++) ss += (double)x[i] * x[i];
    r = 1.0 / sqrt(ss / L->q_dim + 1e-6);
  }
  for (int i = 0; i < L->q_dim; i++) out[i] = x[i] * r;
  ref_rotate(out + L->q_off, d->pos[b * T + t]);
}

static void near(double got, double ref, double mag, const char *what, int i) {
  double tol = 8 * 0x1p-24 * mag + 1e-30;
  if (!(fabs(got - ref) <= tol))
    fail_msg("%s[%d]: %.9g, reference %.9g (tolerance %.3g)", what, i, got, ref, tol);
}

/* ---- f32, plain, DeepSeek-V3 and V4 ---- */

static void check_values(const layer *L) {
  data d;
  make_data(&d, L);
  float *q0 = malloc(sizeof(float) * B * QH * T * L->q_dim);
  memcpy(q0, d.q, sizeof(float) * B * QH * T * L->q_dim);
  pe_rope_cache *c = mla_cache(4096);
  size_t cbytes = sizeof(float) * NB * BS * (L->kv_dim + 8);
  float *cache = malloc(cbytes);
  memset(cache, 0xa5, cbytes);
  unsigned char *cache0 = malloc(cbytes);
  memcpy(cache0, cache, cbytes);
  pe_mla m;
  fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
  pe_tensor q = q_tensor(d.q, L, PE_F32), kv = kv_tensor(d.kv, L, PE_F32);
  pe_tensor ct = plain_cache(cache, L, PE_F32);
  assert_int_equal(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_OK);
  double ref[1024];
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      for (int h = 0; h < QH; h++) {
        ref_q(&d, q0, b, h, t, ref);
        const float *got = d.q + (((int64_t)b * QH + h) * T + t) * L->q_dim;
        const float *was = q0 + (((int64_t)b * QH + h) * T + t) * L->q_dim;
        for (int i = 0; i < L->q_dim; i++) {
          int rope = i >= L->q_off && i < L->q_off + R;
          if (!rope && !L->q_norm) { /* the nope channels: untouched */
            assert_memory_equal(&got[i], &was[i], 4);
            continue;
          }
          int pi = rope ? L->q_off + ((i - L->q_off) & ~1) : i;
          double mag = fabs(ref[pi]) + (rope ? fabs(ref[pi + 1]) : 0);
          near(got[i], ref[i], mag, "q", i);
        }
      }
      int64_t s = d.slots[b * T + t];
      if (s < 0) continue;
      ref_kv(&d, b, t, ref);
      const float *row = cache + (s / BS) * BS * (L->kv_dim + 8) + (s % BS) * (L->kv_dim + 8);
      for (int i = 0; i < L->kv_dim; i++) {
        int rope = i >= L->kv_off && i < L->kv_off + R;
        int pi = rope ? L->kv_off + ((i - L->kv_off) & ~1) : i;
        double mag = fabs(ref[pi]) + (rope ? fabs(ref[pi + 1]) : 0);
        near(row[i], ref[i], mag, "cache row", i);
      }
    }
  /* every row no slot maps, and each row's padding: untouched */
  for (int64_t r = 0; r < NB * BS; r++) {
    int mapped = 0;
    for (int i = 0; i < B * T; i++) mapped |= d.slots[i] == r;
    size_t off = (size_t)r * (L->kv_dim + 8) * 4;
    if (!mapped) assert_memory_equal((char *)cache + off, cache0 + off, (size_t)(L->kv_dim + 8) * 4);
    assert_memory_equal((char *)cache + off + L->kv_dim * 4, cache0 + off + L->kv_dim * 4, 32);
  }
  /* read back: each mapped token's row as stored (f32 to f32: the same
   * bits), a skipped token's row untouched */
  size_t on = (size_t)B * T * L->kv_dim;
  float *out = malloc(on * 4);
  memset(out, 0x5a, on * 4);
  pe_tensor ot = kv_tensor(out, L, PE_F32);
  assert_int_equal(pe_mla_cache_read(&m, &ct, &ot, d.slots), PE_OK);
  for (int i = 0; i < B * T; i++) {
    int64_t s = d.slots[i];
    const float *got = out + (size_t)i * L->kv_dim;
    if (s < 0) {
      for (int j = 0; j < L->kv_dim; j++) {
        uint32_t u;
        memcpy(&u, got + j, 4);
        assert_int_equal(u, 0x5a5a5a5au);
      }
      continue;
    }
    assert_memory_equal(got, cache + (s / BS) * BS * (L->kv_dim + 8) + (s % BS) * (L->kv_dim + 8),
                        (size_t)L->kv_dim * 4);
  }
  free(out);
  free(cache);
  free(cache0);
  free(q0);
  pe_rope_cache_destroy(c);
  free_data(&d);
}
/* DeepSeek-V4's normed q with more heads than the norm takes in one group
 * (1024): 1030 heads of 512 channels, one token; each head normed and
 * rotated as the reference says, and nothing past the tensor written. */
static void test_q_norm_past_1024_heads(void **state) {
  (void)state;
  enum { H = 1030, D = 512 };
  const layer *L = &V4;
  float *q = malloc(sizeof(float) * (H * D + 64)), *q0 = malloc(sizeof(float) * H * D);
  for (int i = 0; i < H * D + 64; i++) q[i] = (float)(uni() * 4.0);
  memcpy(q0, q, sizeof(float) * H * D);
  float tail[64];
  memcpy(tail, q + H * D, sizeof tail);
  data d; /* the kv row, weights and positions of the usual data */
  make_data(&d, L);
  pe_rope_cache *c = mla_cache(4096);
  size_t cbytes = sizeof(float) * NB * BS * (L->kv_dim + 8);
  float *cache = malloc(cbytes);
  memset(cache, 0xa5, cbytes);
  pe_mla m;
  fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
  pe_tensor qt = {q, PE_F32, {1, H, 1, D}, {(int64_t)H * D, D, D, 1}};
  pe_tensor kv = {d.kv, PE_F32, {1, 1, 1, L->kv_dim}, {L->kv_dim, 0, L->kv_dim, 1}};
  pe_tensor ct = plain_cache(cache, L, PE_F32);
  const int64_t slot = 5, pos = 1234;
  assert_int_equal(pe_mla_rope_store(c, &m, &qt, &kv, &ct, &slot, &pos, 0, NULL), PE_OK);
  assert_memory_equal(q + H * D, tail, sizeof tail);
  double ref[D];
  for (int h = 0; h < H; h++) {
    const float *x = q0 + (int64_t)h * D, *got = q + (int64_t)h * D;
    double ss = 0;
    for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
    double r = 1.0 / sqrt(ss / D + 1e-6);
    for (int i = 0; i < D; i++) ref[i] = x[i] * r;
    ref_rotate(ref + L->q_off, pos);
    for (int i = 0; i < D; i++) {
      int rope = i >= L->q_off;
      int pi = rope ? L->q_off + ((i - L->q_off) & ~1) : i;
      near(got[i], ref[i], fabs(ref[pi]) + (rope ? fabs(ref[pi + 1]) : 0), "q past 1024 heads",
           h * D + i);
    }
  }
  free(cache);
  pe_rope_cache_destroy(c);
  free_data(&d);
  free(q0);
  free(q);
}

static void test_values_v3(void **s) { (void)s; check_values(&V3); }
static void test_values_v4(void **s) { (void)s; check_values(&V4); }
static void test_values_rope_first_kv(void **s) { (void)s; check_values(&RF); }
static void test_values_slices_inside(void **s) { (void)s; check_values(&MID); }

/* ---- every format against the f32 plain row ---- */

/* The f32 plain rows (latent first) and q of layer L into out_cache/out_q. */
static void f32_result(const data *d0, float *out_cache, float *out_q) {
  const layer *L = d0->L;
  data d = *d0;
  size_t qn = (size_t)B * QH * T * L->q_dim;
  memcpy(out_q, d0->q, qn * 4);
  d.q = out_q;
  pe_rope_cache *c = mla_cache(4096);
  pe_mla m;
  fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
  pe_tensor q = q_tensor(d.q, L, PE_F32), kv = kv_tensor(d.kv, L, PE_F32);
  pe_tensor ct = plain_cache(out_cache, L, PE_F32);
  assert_int_equal(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_OK);
  pe_rope_cache_destroy(c);
}

static const float *f32_row(const float *cache, const layer *L, int64_t s) {
  return cache + (s / BS) * BS * (L->kv_dim + 8) + (s % BS) * (L->kv_dim + 8);
}

/* Byte layout of a quantized cache used below: rows of `row` bytes at
 * stride `sstride`, blocks at bstride. */
typedef struct qlayout {
  int64_t row, sstride, bstride, scale_at, scale_bytes;
} qlayout;

static qlayout layout_of(const layer *L, pe_mla_format f) {
  int64_t lat = L->kv_dim - R;
  qlayout q = {0, 0, 0, 0, 0};
  if (f == PE_MLA_FP8_E4M3) q.row = L->kv_dim, q.sstride = q.row + 3;
  if (f == PE_MLA_FP8_DS) q.row = lat + 4 * (lat / 128) + 2 * R, q.sstride = q.row + 5;
  if (f == PE_MLA_FP8_DS_V4) {
    q.row = q.sstride = lat + 2 * R;
    q.scale_at = BS * q.row;
    q.scale_bytes = lat / 64 + 1;
  }
  q.bstride = BS * q.sstride + BS * q.scale_bytes + 40; /* padded blocks */
  return q;
}

/* The bytes of one row of format f from the f32 result x (kv order). */
static void encode_row(pe_mla_format f, pe_mla_order o, const layer *L, const float *x,
                       float scale, uint8_t *row, uint8_t *scales) {
  const int64_t dim = L->kv_dim, lat = dim - R, ro = L->kv_off;
  if (f == PE_MLA_FP8_E4M3) {
    for (int64_t i = 0; i < dim; i++) {
      int64_t at = o == PE_MLA_ROPE_FIRST ? (i >= ro && i < ro + R ? i - ro : i < ro ? i + R : i) : i;
      row[at] = (uint8_t)ref_encode(E4M3, x[i] / scale);
    }
    return;
  }
  if (f == PE_MLA_FP8_DS) {
    for (int64_t k = 0; k < lat / 128; k++) {
      float amax = 0;
      for (int i = 0; i < 128; i++)
        if (fabsf(x[128 * k + i]) > amax) amax = fabsf(x[128 * k + i]);
      float s = amax / 448.0f;
      if (s < FLT_MIN) s = FLT_MIN;
      for (int i = 0; i < 128; i++) row[128 * k + i] = (uint8_t)ref_encode(E4M3, x[128 * k + i] / s);
      memcpy(row + lat + 4 * k, &s, 4);
    }
    for (int64_t i = 0; i < R; i++) {
      uint16_t h = bf16_rne(x[lat + i]);
      memcpy(row + lat + 4 * (lat / 128) + 2 * i, &h, 2);
    }
    return;
  }
  /* PE_MLA_FP8_DS_V4 */
  float xb[1024];
  for (int64_t i = 0; i < dim; i++) xb[i] = bf16_to_f32(bf16_rne(x[i]));
  for (int64_t k = 0; k < lat / 64; k++) {
    float amax = 1e-4f;
    for (int i = 0; i < 64; i++)
      if (fabsf(xb[64 * k + i]) > amax) amax = fabsf(xb[64 * k + i]);
    float y = amax / 448.0f;
    int e = -200;
    while (ldexp(1.0, e) < y) e++; /* the smallest e with 2^e >= y */
    for (int i = 0; i < 64; i++) {
      double v = xb[64 * k + i] * ldexp(1.0, -e);
      if (v > 448) v = 448;
      if (v < -448) v = -448;
      row[64 * k + i] = (uint8_t)ref_encode(E4M3, (float)v);
    }
    scales[k] = (uint8_t)(e + 127);
  }
  scales[lat / 64] = 0;
  for (int64_t i = 0; i < R; i++) {
    uint16_t h = bf16_rne(xb[lat + i]);
    memcpy(row + lat + 2 * i, &h, 2);
  }
}

static void check_format(const layer *L, pe_mla_format f, pe_mla_order o) {
  data d;
  make_data(&d, L);
  float *ref_cache = malloc(sizeof(float) * NB * BS * (L->kv_dim + 8));
  float *ref_q = malloc(sizeof(float) * B * QH * T * L->q_dim);
  f32_result(&d, ref_cache, ref_q);
  qlayout ql = layout_of(L, f);
  size_t bytes = (size_t)(NB * ql.bstride);
  uint8_t *cache = malloc(bytes), *want = malloc(bytes);
  memset(cache, 0x5a, bytes);
  memcpy(want, cache, bytes);
  float scale = 0.75f;
  pe_mla m;
  fill_mla(&m, L, d.w, f, o, f == PE_MLA_FP8_E4M3 ? &scale : NULL);
  pe_rope_cache *c = mla_cache(4096);
  pe_tensor q = q_tensor(d.q, L, PE_F32), kv = kv_tensor(d.kv, L, PE_F32);
  pe_tensor ct = {cache, PE_F32, {NB, 1, BS, L->kv_dim}, {ql.bstride, 0, ql.sstride, 1}};
  assert_int_equal(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_OK);
  assert_memory_equal(d.q, ref_q, sizeof(float) * B * QH * T * L->q_dim);
  for (int i = 0; i < B * T; i++) {
    int64_t s = d.slots[i];
    if (s < 0) continue;
    uint8_t *row = want + (s / BS) * ql.bstride + (s % BS) * ql.sstride;
    uint8_t *sc = want + (s / BS) * ql.bstride + ql.scale_at + (s % BS) * ql.scale_bytes;
    encode_row(f, o, L, f32_row(ref_cache, L, s), scale, row, sc);
  }
  assert_memory_equal(cache, want, bytes); /* every byte: rows, scales, untouched ones */
  /* read back: each format's decoding written here */
  float out[B * T * 1024];
  for (int i = 0; i < B * T * 1024; i++) out[i] = -7.0f;
  pe_tensor ot = {out, PE_F32, {B, 1, T, L->kv_dim}, {(int64_t)T * L->kv_dim, 0, L->kv_dim, 1}};
  assert_int_equal(pe_mla_cache_read(&m, &ct, &ot, d.slots), PE_OK);
  const int64_t lat = L->kv_dim - R;
  for (int i = 0; i < B * T; i++) {
    int64_t s = d.slots[i];
    const float *got = out + (int64_t)i * L->kv_dim;
    if (s < 0) {
      for (int k = 0; k < L->kv_dim; k++) assert_true(got[k] == -7.0f);
      continue;
    }
    const uint8_t *row = cache + (s / BS) * ql.bstride + (s % BS) * ql.sstride;
    const uint8_t *sc = cache + (s / BS) * ql.bstride + ql.scale_at + (s % BS) * ql.scale_bytes;
    for (int64_t k = 0; k < L->kv_dim; k++) {
      float v;
      if (f == PE_MLA_FP8_E4M3) {
        int64_t at = o == PE_MLA_ROPE_FIRST ? (k >= L->kv_off && k < L->kv_off + R ? k - L->kv_off : k < L->kv_off ? k + R : k) : k;
        v = ref_decode(E4M3, row[at]) * scale;
      } else if (k >= lat) {
        uint16_t h;
        memcpy(&h, row + (f == PE_MLA_FP8_DS ? lat + 4 * (lat / 128) : lat) + 2 * (k - lat), 2);
        v = bf16_to_f32(h);
      } else if (f == PE_MLA_FP8_DS) {
        float ts;
        memcpy(&ts, row + lat + 4 * (k / 128), 4);
        v = ref_decode(E4M3, row[k]) * ts;
      } else {
        v = (float)(ref_decode(E4M3, row[k]) * ldexp(1.0, sc[k / 64] - 127));
      }
      if (memcmp(&v, &got[k], 4)) fail_msg("read back row %d channel %d: %g, want %g", i, (int)k, got[k], v);
    }
  }
  pe_rope_cache_destroy(c);
  free(cache);
  free(want);
  free(ref_cache);
  free(ref_q);
  free_data(&d);
}
static void test_fp8_e4m3(void **s) {
  (void)s;
  check_format(&V3, PE_MLA_FP8_E4M3, PE_MLA_LATENT_FIRST);
  check_format(&V3, PE_MLA_FP8_E4M3, PE_MLA_ROPE_FIRST);
}
/* The FP8 formats' rows: at most 1024 channels (posenc.h), stored and read
 * back at the limit; one more refused with nothing written. */
static void test_fp8_row_limit(void **state) {
  (void)state;
  static const layer L1024 = {192, 128, 1024, 960, 960, 0, 0}, L1025 = {192, 128, 1025, 961, 961, 0, 0};
  check_format(&L1024, PE_MLA_FP8_E4M3, PE_MLA_LATENT_FIRST);
  data d;
  make_data(&d, &L1025);
  size_t bytes = (size_t)NB * BS * 1032;
  uint8_t *cache = malloc(bytes), *c0 = malloc(bytes);
  memset(cache, 0x5a, bytes);
  memcpy(c0, cache, bytes);
  float scale = 0.75f;
  pe_mla m;
  fill_mla(&m, &L1025, d.w, PE_MLA_FP8_E4M3, PE_MLA_LATENT_FIRST, &scale);
  pe_rope_cache *c = mla_cache(4096);
  pe_tensor kv = kv_tensor(d.kv, &L1025, PE_F32);
  pe_tensor ct = {cache, PE_F32, {NB, 1, BS, 1025}, {BS * 1032, 0, 1032, 1}};
  assert_int_equal(pe_mla_rope_store(c, &m, NULL, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_SHAPE);
  assert_non_null(strstr(pe_last_error(), "at most 1024"));
  assert_memory_equal(cache, c0, bytes);
  pe_rope_cache_destroy(c);
  free(cache);
  free(c0);
  free_data(&d);
}
static void test_fp8_ds(void **s) { (void)s; check_format(&V3, PE_MLA_FP8_DS, PE_MLA_LATENT_FIRST); }
static void test_fp8_ds_v4(void **s) { (void)s; check_format(&V4, PE_MLA_FP8_DS_V4, PE_MLA_LATENT_FIRST); }

/* PE_MLA_FP8_DS_V4's edges, with rows that come normed (kv_norm NONE), so
 * the values are the input's: a tile whose amax / 448 is exactly a power of
 * two takes that exponent (DeepSeek's exact ceil), one just above it the
 * next; a NaN is stored as -448 (vLLM's clamp); the floor 1e-4 of amax. */
static void test_fp8_ds_v4_edges(void **state) {
  (void)state;
  float kvr[512] = {0};
  for (int i = 0; i < 64; i++) kvr[i] = (float)(i % 7) - 3.0f; /* tile 0: amax 56 below */
  kvr[5] = 56.0f;                                           /* 56 / 448 = 2^-3 */
  for (int i = 64; i < 128; i++) kvr[i] = 1.0f;
  kvr[70] = 56.5f;                                          /* tile 1: 56.5 / 448 > 2^-3 */
  kvr[130] = NAN;                                           /* tile 2: NaN, amax 2 */
  kvr[131] = 2.0f;
  /* tile 3: all zero: amax floored at 1e-4 */
  for (int i = 256; i < 448; i++) kvr[i] = 0.5f;
  uint8_t cache[2 * 1024];
  memset(cache, 0x11, sizeof cache);
  pe_mla m;
  pe_mla_init(&m);
  m.rope_dim = R;
  m.kv_norm = PE_QK_NORM_NONE;
  m.kv_rope_offset = 448;
  m.format = PE_MLA_FP8_DS_V4;
  pe_rope_cache *c = mla_cache(16);
  pe_tensor kv = {kvr, PE_F32, {1, 1, 1, 512}, {512, 512, 512, 1}};
  pe_tensor ct = {cache, PE_F32, {1, 1, 1, 512}, {1024, 0, 576, 1}}; /* one block of one row */
  int64_t slot = 0, pos = 0;
  assert_int_equal(pe_mla_rope_store(c, &m, NULL, &kv, &ct, &slot, &pos, 0, NULL), PE_OK);
  const uint8_t *sc = cache + 576;
  assert_int_equal(sc[0], 127 - 3);
  assert_int_equal(sc[1], 127 - 2);
  assert_int_equal(sc[2], 127 - 7); /* 2 / 448 in (2^-8, 2^-7] */
  assert_int_equal(sc[3], 127 - 22); /* 1e-4 / 448 in (2^-23, 2^-22] */
  assert_int_equal(sc[7], 0);       /* the pad byte */
  assert_int_equal(cache[5], 0x7e); /* 56 * 2^3 = 448 */
  assert_int_equal(cache[130], 0xfe); /* NaN -> -448 */
  assert_int_equal(cache[3], 0);    /* 0 */
  /* a block_size whose bytes (rows and scale bytes) overflow int64: refused,
   * named, the cache untouched */
  uint8_t before[sizeof cache];
  memcpy(before, cache, sizeof cache);
  pe_tensor huge = ct;
  huge.shape[2] = (int64_t)1 << 60;
  assert_int_equal(pe_mla_rope_store(c, &m, NULL, &kv, &huge, &slot, &pos, 0, NULL), PE_ERR_OVERFLOW);
  if (!strstr(pe_last_error(), "block_size 1152921504606846976 overflows"))
    fail_msg("message \"%s\" lacks the block_size", pe_last_error());
  assert_memory_equal(cache, before, sizeof cache);
  pe_rope_cache_destroy(c);
}

/* ---- indexer keys: PE_KV_FP8_E4M3_ROWSCALE ---- */

/* The row-scale FP8 definition: the scale 2^e, e the smallest with 2^e >=
 * max(amax, 1e-4) / 448. */
static float rowscale_of(const float *x, int n) {
  float amax = 1e-4f;
  for (int j = 0; j < n; j++)
    if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
  int e = -200;
  while (ldexp(1.0, e) < amax / 448.0f) e++;
  return (float)ldexp(1.0, e);
}
/* Row x of n channels as slot s of a row-scale cache: codes at (s % bs) * n
 * of its block (blocks bstride bytes apart), the scale after the bs rows. */
static void rowscale_put(const float *x, int n, int64_t s, int bs, int64_t bstride, uint8_t *cache) {
  float sc = rowscale_of(x, n);
  uint8_t *blk = cache + (s / bs) * bstride;
  for (int j = 0; j < n; j++) blk[(s % bs) * n + j] = (uint8_t)ref_encode(E4M3, x[j] / sc);
  memcpy(blk + bs * n + 4 * (s % bs), &sc, 4);
}

/* DeepSeek-V3.2 / GLM-5's indexer keys (128 channels, the first 64 rotated)
 * stored by pe_qk_norm_rope_store into a row-scale FP8 cache: every byte
 * from the plain f32 store's rows by the definition (scale 2^e, e the
 * smallest with 2^e >= max(amax, 1e-4) / 448, code e4m3(x / 2^e); codes at
 * t * 128 of the block, the float32 scales after the block's rows); read
 * back by pe_kv_read; a shift on the cache re-quantizes with the new rows'
 * scales; v rows stored beside them into a row-scale v cache. */
static void test_indexer_rowscale(void **state) {
  (void)state;
  enum { D = 128, IB = 3, IBS = 4 };
  pe_rope_params rp;
  pe_rope_params_init(&rp);
  rp.head_dim = D;
  rp.rotary_dim = 64;
  rp.style = PE_ROPE_NEOX; /* DeepSeek-V3.2's indexer (GLM-5's: GPT-J) */
  rp.base = BASE;
  rp.max_positions = 4096;
  pe_rope_cache *c = NULL;
  assert_int_equal(pe_rope_cache_create(&rp, &c), PE_OK);
  float k[B * T * D];
  for (int i = 0; i < B * T * D; i++) k[i] = (float)(uni() * 5.0);
  k[7] = 0.0f;
  int64_t pos[B * T], slots[B * T] = {3, 0, 9, -1, 11, 2, 5, 8, 1, 6};
  for (int i = 0; i < B * T; i++) pos[i] = 17 * i + 1;
  pe_tensor kt = {k, PE_F32, {B, 1, T, D}, {T * D, 0, D, 1}};
  /* the plain f32 result */
  float plain[IB * IBS * D];
  pe_tensor pt = {plain, PE_F32, {IB, 1, IBS, D}, {IBS * D, 0, D, 1}};
  assert_int_equal(pe_apply_rope_qk_store(c, NULL, &kt, &pt, slots, pos, 0, NULL), PE_OK);
  /* the row-scale cache: blocks padded past their scales */
  const int64_t bstride = IBS * (D + 4) + 24;
  uint8_t cache[IB * bstride], want[IB * bstride];
  memset(cache, 0x77, sizeof cache);
  memcpy(want, cache, sizeof cache);
  pe_tensor ct = {cache, PE_F32, {IB, 1, IBS, D}, {bstride, 0, D, 1}};
  pe_kv_cache kv;
  pe_kv_cache_init(&kv);
  kv.k = &ct;
  kv.k_quant = PE_KV_FP8_E4M3_ROWSCALE;
  pe_qk_norm none;
  pe_qk_norm_init(&none);
  assert_int_equal(pe_qk_norm_rope_store(c, &none, NULL, &kt, NULL, &kv, slots, pos, 0, NULL), PE_OK);
  for (int i = 0; i < B * T; i++) {
    int64_t s = slots[i];
    if (s < 0) continue;
    rowscale_put(plain + s * D, D, s, IBS, bstride, want);
  }
  assert_memory_equal(cache, want, sizeof cache);
  /* read back */
  float out[B * T * D];
  pe_tensor ot = {out, PE_F32, {B, 1, T, D}, {T * D, 0, D, 1}};
  assert_int_equal(pe_kv_read(&kv, &ot, NULL, slots), PE_OK);
  for (int i = 0; i < B * T; i++) {
    int64_t s = slots[i];
    if (s < 0) continue;
    float sc;
    memcpy(&sc, cache + (s / IBS) * bstride + IBS * D + 4 * (s % IBS), 4);
    for (int j = 0; j < D; j++) {
      float v = ref_decode(E4M3, cache[(s / IBS) * bstride + (s % IBS) * D + j]) * sc;
      assert_memory_equal(&out[i * D + j], &v, 4);
    }
  }
  /* a shift by 5 of two rows: dequantized, rotated, re-quantized with the
   * rotated row's own scale */
  int64_t ss[2] = {9, 2}, dd[2] = {5, 5};
  float before[2][D];
  for (int r = 0; r < 2; r++) {
    float sc;
    memcpy(&sc, cache + (ss[r] / IBS) * bstride + IBS * D + 4 * (ss[r] % IBS), 4);
    for (int j = 0; j < D; j++)
      before[r][j] = ref_decode(E4M3, cache[(ss[r] / IBS) * bstride + (ss[r] % IBS) * D + j]) * sc;
  }
  assert_int_equal(pe_rope_shift_k_cache(c, &kv, ss, dd, 2, NULL), PE_OK);
  for (int r = 0; r < 2; r++) {
    float rot[D];
    memcpy(rot, before[r], sizeof rot);
    pe_tensor one = {rot, PE_F32, {1, 1, 1, D}, {D, D, D, 1}};
    int64_t d5 = 5;
    assert_int_equal(pe_rope_shift_k(c, &one, &d5, NULL), PE_OK);
    float sc = rowscale_of(rot, D), got;
    memcpy(&got, cache + (ss[r] / IBS) * bstride + IBS * D + 4 * (ss[r] % IBS), 4);
    assert_true(got == sc);
    for (int j = 0; j < D; j++)
      assert_int_equal(cache[(ss[r] / IBS) * bstride + (ss[r] % IBS) * D + j], ref_encode(E4M3, rot[j] / sc));
  }
  /* v rows into a row-scale v cache beside the keys: each row quantized
   * with its own scale by the same definition, from v's values as given */
  float v[B * T * D];
  for (int i = 0; i < B * T * D; i++) v[i] = (float)(uni() * 3.0);
  pe_tensor vt = {v, PE_F32, {B, 1, T, D}, {T * D, 0, D, 1}};
  uint8_t vcache[IB * bstride], vwant[IB * bstride];
  memset(vcache, 0x77, sizeof vcache);
  memcpy(vwant, vcache, sizeof vcache);
  pe_tensor vct = ct;
  vct.data = vcache;
  kv.v = &vct;
  kv.v_quant = PE_KV_FP8_E4M3_ROWSCALE;
  assert_int_equal(pe_qk_norm_rope_store(c, &none, NULL, &kt, &vt, &kv, slots, pos, 0, NULL), PE_OK);
  for (int i = 0; i < B * T; i++) {
    int64_t s = slots[i];
    if (s < 0) continue;
    rowscale_put(v + i * D, D, s, IBS, bstride, vwant);
  }
  assert_memory_equal(vcache, vwant, sizeof vcache);
  kv.v = NULL;
  kv.v_quant = PE_KV_PLAIN;
  /* two heads, a scale pointer, a short block stride: refused */
  const float one_scale = 1.0f;
  kv.k_scale = &one_scale; /* each row has its own */
  assert_int_equal(pe_qk_norm_rope_store(c, &none, NULL, &kt, NULL, &kv, slots, pos, 0, NULL), PE_ERR_INVALID_ARGUMENT);
  kv.k_scale = NULL;
  pe_tensor shortb = ct;
  shortb.stride[0] = IBS * (D + 4) - 1;
  kv.k = &shortb;
  assert_int_equal(pe_qk_norm_rope_store(c, &none, NULL, &kt, NULL, &kv, slots, pos, 0, NULL), PE_ERR_SHAPE);
  assert_non_null(strstr(pe_last_error(), "stride[0]"));
  pe_rope_cache_destroy(c);
}

/* ---- bf16, rope first ---- */

static void test_bf16_and_order(void **state) {
  (void)state;
  const layer *L = &V3;
  data d;
  make_data(&d, L);
  size_t n32 = (size_t)NB * BS * (L->kv_dim + 8);
  float *ref_cache = malloc(n32 * 4), *ref_q = malloc(sizeof(float) * B * QH * T * L->q_dim);
  f32_result(&d, ref_cache, ref_q);
  pe_rope_cache *c = mla_cache(4096);
  /* bf16 cache from f32 inputs: the f32 result rounded once */
  uint16_t *cb = malloc(n32 * 2);
  memset(cb, 0, n32 * 2);
  pe_mla m;
  fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
  pe_tensor kv = kv_tensor(d.kv, L, PE_F32), ct = plain_cache(cb, L, PE_BF16);
  assert_int_equal(pe_mla_rope_store(c, &m, NULL, &kv, &ct, d.slots, d.pos, 0, NULL), PE_OK);
  /* the same rows rope first: the channels moved */
  float *cr = malloc(n32 * 4);
  memset(cr, 0, n32 * 4);
  fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_ROPE_FIRST, NULL);
  pe_tensor crt = plain_cache(cr, L, PE_F32);
  assert_int_equal(pe_mla_rope_store(c, &m, NULL, &kv, &crt, d.slots, d.pos, 0, NULL), PE_OK);
  for (int i = 0; i < B * T; i++) {
    int64_t s = d.slots[i];
    if (s < 0) continue;
    const float *x = f32_row(ref_cache, L, s), *y = f32_row(cr, L, s);
    const uint16_t *hb = cb + (s / BS) * BS * (L->kv_dim + 8) + (s % BS) * (L->kv_dim + 8);
    for (int k = 0; k < L->kv_dim; k++) assert_int_equal(hb[k], bf16_rne(x[k]));
    assert_memory_equal(y, x + L->kv_off, R * 4);
    assert_memory_equal(y + R, x, (size_t)L->kv_off * 4);
  }
  /* bf16 q and kv: the f32 call on the widened inputs, rounded once */
  size_t qn = (size_t)B * QH * T * L->q_dim, kn = (size_t)B * T * L->kv_dim;
  uint16_t *qb = malloc(qn * 2), *kb = malloc(kn * 2);
  for (size_t i = 0; i < qn; i++) d.q[i] = bf16_to_f32(qb[i] = bf16_rne(d.q[i]));
  for (size_t i = 0; i < kn; i++) d.kv[i] = bf16_to_f32(kb[i] = bf16_rne(d.kv[i]));
  f32_result(&d, ref_cache, ref_q);
  fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
  pe_tensor qt = q_tensor((float *)(void *)qb, L, PE_BF16), kvt = kv_tensor((float *)(void *)kb, L, PE_BF16);
  assert_int_equal(pe_mla_rope_store(c, &m, &qt, &kvt, &ct, d.slots, d.pos, 0, NULL), PE_OK);
  for (size_t i = 0; i < qn; i++) assert_int_equal(qb[i], bf16_rne(ref_q[i]));
  for (int i = 0; i < B * T; i++) {
    int64_t s = d.slots[i];
    if (s < 0) continue;
    const float *x = f32_row(ref_cache, L, s);
    const uint16_t *hb = cb + (s / BS) * BS * (L->kv_dim + 8) + (s % BS) * (L->kv_dim + 8);
    for (int k = 0; k < L->kv_dim; k++) assert_int_equal(hb[k], bf16_rne(x[k]));
  }
  free(qb);
  free(kb);
  free(cb);
  free(cr);
  free(ref_cache);
  free(ref_q);
  pe_rope_cache_destroy(c);
  free_data(&d);
}

/* ---- every ISA path and pool size, bit for bit ---- */

static void run_all(const layer *L, pe_mla_format f, pe_dtype dt, pe_threadpool *pool,
                    uint8_t *cache, size_t cbytes, void *qout, const data *d, uint32_t flags,
                    int max_positions) {
  size_t qn = (size_t)B * QH * T * L->q_dim, kn = (size_t)B * T * L->kv_dim;
  void *q = malloc(qn * 4), *kv = malloc(kn * 4);
  for (size_t i = 0; i < qn; i++) {
    if (dt == PE_F32) ((float *)q)[i] = d->q[i];
    else ((uint16_t *)q)[i] = bf16_rne(d->q[i]);
  }
  for (size_t i = 0; i < kn; i++) {
    if (dt == PE_F32) ((float *)kv)[i] = d->kv[i];
    else ((uint16_t *)kv)[i] = bf16_rne(d->kv[i]);
  }
  memset(cache, 0x33, cbytes);
  float scale = 1.5f;
  pe_mla m;
  fill_mla(&m, L, d->w, f, PE_MLA_LATENT_FIRST, f == PE_MLA_FP8_E4M3 ? &scale : NULL);
  pe_rope_cache *c = mla_cache(max_positions); /* 0: on the fly, the other row source */
  qlayout ql = layout_of(L, f);
  pe_tensor ct = f == PE_MLA_PLAIN ? plain_cache(cache, L, dt)
                                   : (pe_tensor){cache, PE_F32, {NB, 1, BS, L->kv_dim}, {ql.bstride, 0, ql.sstride, 1}};
  pe_tensor qt = q_tensor(q, L, dt), kvt = kv_tensor(kv, L, dt);
  assert_int_equal(pe_mla_rope_store(c, &m, &qt, &kvt, &ct, d->slots, d->pos, flags, pool), PE_OK);
  memcpy(qout, q, qn * (dt == PE_F32 ? 4 : 2));
  pe_rope_cache_destroy(c);
  free(q);
  free(kv);
}

/* run_all as one computation: the cache bytes, then q's. */
typedef struct mla_run {
  const layer *L;
  pe_mla_format f;
  pe_dtype dt;
  const data *d;
  size_t cbytes;
  uint32_t flags;
  int max_positions;
} mla_run;

static void run_mla(void *ctx, pe_threadpool *pool, void *out) {
  const mla_run *r = ctx;
  run_all(r->L, r->f, r->dt, pool, out, r->cbytes, (uint8_t *)out + r->cbytes, r->d, r->flags,
          r->max_positions);
}

/* Each layer (V3, V4), cache format it has and activation dtype (f32,
 * bf16), on data with NaN, Inf, subnormal and huge inputs in some rows:
 * fn(the run of that case (no flags, on the fly), its bytes, ctx). */
static void each_case(void (*fn)(const mla_run *m, size_t bytes, void *ctx), void *ctx) {
  static const pe_mla_format fmts[] = {PE_MLA_PLAIN, PE_MLA_FP8_E4M3, PE_MLA_FP8_DS, PE_MLA_FP8_DS_V4};
  for (int li = 0; li < 2; li++) {
    const layer *L = li ? &V4 : &V3;
    data d;
    make_data(&d, L);
    d.kv[3] = NAN;
    d.kv[L->kv_dim + 7] = INFINITY;
    d.kv[2 * L->kv_dim + 1] = 1e-40f;
    d.q[5] = 3e38f;
    for (int fi = 0; fi < 4; fi++) {
      pe_mla_format f = fmts[fi];
      if (f == PE_MLA_FP8_DS && L->v4) continue;
      if (f == PE_MLA_FP8_DS_V4 && !L->v4) continue;
      for (int di = 0; di < 2; di++) {
        pe_dtype dt = di ? PE_BF16 : PE_F32;
        mla_run m = {L, f, dt, &d, (size_t)NB * BS * (L->kv_dim + 8) * 4 + 4096, 0, 0};
        fn(&m, m.cbytes + (size_t)B * QH * T * L->q_dim * (dt == PE_F32 ? 4 : 2), ctx);
      }
    }
    free_data(&d);
  }
}

static void isa_identity_case(const mla_run *m, size_t bytes, void *ctx) {
  pe_threadpool *pool = ctx;
  pe_pools_run r = {run_mla, (void *)m, bytes, &pool, 1};
  char what[64];
  snprintf(what, sizeof what, "layer %s format %d dtype %d (cache, then q)",
           m->L->v4 ? "V4" : "V3", (int)m->f, (int)m->dt);
  pe_isa_compare(what, r.bytes, pe_on_every_pool, &r);
}

static void test_isa_identity(void **state) {
  (void)state;
  if (!pe_test_any_simd_path()) skip(); /* only scalar here: nothing to compare */
  pe_threadpool *pool = NULL;
  assert_int_equal(pe_threadpool_create(2, &pool), PE_OK);
  each_case(isa_identity_case, pool);
  pe_threadpool_destroy(pool);
}

/* ---- PE_ROPE_STREAM_CACHE: the same bytes ---- */

/* Every format and layer, with the cache's table (the rows the flag streams:
 * plain ones; the FP8 formats' are left to ordinary stores): the cache
 * (every byte, the padding between rows and blocks included) and q with the
 * flag equal those without it, on every path, without and with a pool. */
typedef struct stream_ctx {
  mla_run m;
  size_t bytes;
  pe_threadpool *pool;
} stream_ctx;

static void stream_on_path(void *ctx, const char *path) {
  stream_ctx *c = ctx;
  uint8_t *ref = malloc(c->bytes), *got = malloc(c->bytes);
  assert_non_null(ref);
  assert_non_null(got);
  mla_run m = c->m;
  m.flags = 0;
  run_mla(&m, NULL, ref);
  m.flags = PE_ROPE_STREAM_CACHE;
  for (int p = 0; p < 2; p++) {
    memset(got, 0, c->bytes);
    run_mla(&m, p ? c->pool : NULL, got);
    char what[96];
    snprintf(what, sizeof what, "%s: layer %s format %d dtype %d%s (cache, then q)", path,
             m.L->v4 ? "V4" : "V3", (int)m.f, (int)m.dt, p ? ", pool" : "");
    pe_test_same_bytes(what, "without the flag", "PE_ROPE_STREAM_CACHE", ref, got, c->bytes, NULL);
  }
  free(ref);
  free(got);
}

static void stream_case(const mla_run *m, size_t bytes, void *ctx) {
  stream_ctx c = {*m, bytes, ctx};
  c.m.max_positions = 4096; /* a table: the rows the flag streams */
  pe_on_every_path(stream_on_path, &c);
}

static void test_stream_same_bytes(void **state) {
  (void)state;
  pe_threadpool *pool = NULL;
  assert_int_equal(pe_threadpool_create(2, &pool), PE_OK);
  each_case(stream_case, pool);
  pe_threadpool_destroy(pool);
}

/* ---- errors: a sentence, nothing written ---- */

static void test_errors(void **state) {
  (void)state;
  const layer *L = &V3;
  data d;
  make_data(&d, L);
  size_t n32 = (size_t)NB * BS * (L->kv_dim + 8);
  float *cache = calloc(n32, 4);
  size_t qn = (size_t)B * QH * T * L->q_dim, kn = (size_t)B * T * L->kv_dim;
  float *q0 = malloc(qn * 4), *kv0 = malloc(kn * 4), *c0 = malloc(n32 * 4);
  memcpy(q0, d.q, qn * 4);
  memcpy(kv0, d.kv, kn * 4);
  memcpy(c0, cache, n32 * 4);
  pe_rope_cache *c = mla_cache(4096);
  pe_tensor q = q_tensor(d.q, L, PE_F32), kv = kv_tensor(d.kv, L, PE_F32), ct = plain_cache(cache, L, PE_F32);
  pe_mla m;
#define EXPECT(call, status, text)                                                            \
  do {                                                                                        \
    assert_int_equal((call), (status));                                                       \
    if (!strstr(pe_last_error(), (text))) fail_msg("message \"%s\" lacks \"%s\"", pe_last_error(), (text)); \
    assert_memory_equal(d.q, q0, qn * 4);                                                     \
    assert_memory_equal(d.kv, kv0, kn * 4);                                                   \
    assert_memory_equal(cache, c0, n32 * 4);                                                  \
  } while (0)
  fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
  EXPECT(pe_mla_rope_store(c, NULL, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_NULL_POINTER, "mla is NULL");
  EXPECT(pe_mla_rope_store(NULL, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_NULL_POINTER, "cache is NULL");
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv, NULL, d.slots, d.pos, 0, NULL), PE_ERR_NULL_POINTER, "cache is NULL");
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, NULL, d.pos, 0, NULL), PE_ERR_NULL_POINTER, "slot_mapping");
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 1, NULL), PE_ERR_INVALID_ARGUMENT, "flags");
  m.rope_dim = 32;
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_SHAPE, "rope_dim 32");
  fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
  m.kv_norm_dim = 540; /* through the rope slice */
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_SHAPE, "straddles");
  fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
  m.kv_weight = NULL;
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_NULL_POINTER, "kv_weight");
  fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
  m.q_rope_offset = 130; /* past the 192-channel head */
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_SHAPE,
         "q's rope slice [q_rope_offset 130, +64) is outside its 192-channel heads");
  fill_mla(&m, L, d.w, PE_MLA_FP8_E4M3, PE_MLA_LATENT_FIRST, NULL);
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_NULL_POINTER, "scale");
  fill_mla(&m, L, d.w, PE_MLA_FP8_DS, PE_MLA_ROPE_FIRST, NULL);
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_INVALID_ARGUMENT, "ROPE_FIRST");
  fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
  int64_t dup[B * T];
  memcpy(dup, d.slots, sizeof dup);
  dup[9] = dup[0];
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, dup, d.pos, 0, NULL), PE_ERR_INVALID_ARGUMENT, "twice");
  int64_t far[B * T];
  memcpy(far, d.pos, sizeof far);
  far[4] = 4096;
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, far, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE, "max_positions 4096");
  pe_tensor kv_over = kv;
  kv_over.data = cache; /* kv inside the cache */
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv_over, &ct, d.slots, d.pos, 0, NULL), PE_ERR_SHAPE, "overlaps");
  /* the weights inside a tensor the call writes: the cache's rows, or q's heads */
  m.kv_weight = cache + 3 * L->kv_dim;
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_SHAPE, "kv_weight overlaps");
  m.kv_weight = d.q + 100;
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_SHAPE, "kv_weight overlaps");
  /* eps: finite and >= 0, each of the two */
  static const float bad_eps[3] = {-1e-6f, NAN, INFINITY};
  for (int i = 0; i < 6; i++) {
    fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
    *(i < 3 ? &m.kv_eps : &m.q_eps) = bad_eps[i % 3];
    EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_INVALID_ARGUMENT,
           "must be finite and >= 0");
  }
  fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
  pe_mla big = m;
  big.struct_size = 4;
  EXPECT(pe_mla_rope_store(c, &big, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_INVALID_ARGUMENT, "struct_size");
  /* kv's rope slice past the row's end, or before its start */
  static const int32_t bad_off[2] = {520, -1};
  for (int i = 0; i < 2; i++) {
    fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
    m.kv_rope_offset = bad_off[i];
    EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_SHAPE, "outside");
  }
  /* the normed channels: at least one, at most the row; none without a norm */
  static const int32_t bad_norm[3] = {0, 577, 512};
  for (int i = 0; i < 3; i++) {
    fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
    m.kv_norm_dim = bad_norm[i];
    if (i == 2) m.kv_norm = PE_QK_NORM_NONE, m.kv_weight = NULL;
    EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_INVALID_ARGUMENT,
           i < 2 ? "must be in [1, 576]" : "kv_norm is PE_QK_NORM_NONE");
  }
  /* DeepSeek-V3.2's tiles: the rotated channels must follow the latent */
  fill_mla(&m, L, d.w, PE_MLA_FP8_DS, PE_MLA_LATENT_FIRST, NULL);
  m.kv_rope_offset = 448;
  m.kv_norm_dim = 448;
  EXPECT(pe_mla_rope_store(c, &m, &q, &kv, &ct, d.slots, d.pos, 0, NULL), PE_ERR_SHAPE, "kv_rope_offset 448 must be kv_dim - R");
#undef EXPECT
  /* pe_mla_cache_read: the rope slice outside the rows, a rope_dim past
   * them, out with more than one row per token; out untouched */
  size_t on = (size_t)B * T * L->kv_dim;
  float *out = malloc(on * 4), *out0 = malloc(on * 4);
  memset(out, 0x5a, on * 4);
  memcpy(out0, out, on * 4);
  pe_tensor ot = kv_tensor(out, L, PE_F32);
  for (int i = 0; i < 4; i++) {
    fill_mla(&m, L, d.w, PE_MLA_PLAIN, PE_MLA_LATENT_FIRST, NULL);
    pe_tensor o = ot;
    const char *want = "outside";
    if (i < 2) m.kv_rope_offset = bad_off[i];
    else if (i == 2) m.rope_dim = 1000, want = "rope_dim 1000";
    else /* tokens 0-1 and 2-3 of each sequence as two rows: refused before any write */
      o.shape[1] = 2, o.shape[2] = 2, o.stride[1] = 2 * L->kv_dim, want = "shape[1] 2";
    assert_int_equal(pe_mla_cache_read(&m, &ct, &o, d.slots), PE_ERR_SHAPE);
    if (!strstr(pe_last_error(), want)) fail_msg("message \"%s\" lacks \"%s\"", pe_last_error(), want);
    assert_memory_equal(out, out0, on * 4);
  }
  free(out);
  free(out0);
  pe_rope_cache_destroy(c);
  free(cache);
  free(q0);
  free(kv0);
  free(c0);
  free_data(&d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_values_v3),     cmocka_unit_test(test_values_v4),
      cmocka_unit_test(test_q_norm_past_1024_heads),
      cmocka_unit_test(test_values_rope_first_kv), cmocka_unit_test(test_values_slices_inside),
      cmocka_unit_test(test_fp8_e4m3),      cmocka_unit_test(test_fp8_row_limit),
      cmocka_unit_test(test_fp8_ds),
      cmocka_unit_test(test_fp8_ds_v4),     cmocka_unit_test(test_fp8_ds_v4_edges),
      cmocka_unit_test(test_indexer_rowscale), cmocka_unit_test(test_bf16_and_order),
      cmocka_unit_test(test_isa_identity),
      cmocka_unit_test(test_stream_same_bytes),  cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
