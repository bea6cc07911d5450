/* test_mrope.c - pe_apply_mrope_qk (multi-axis RoPE of Qwen2-VL, Qwen2.5-VL
 * and, interleaved, Qwen3-VL).
 *
 * References written here:
 * - HF's formula in float64 (transformers modeling_qwen2_vl.py,
 *   apply_multimodal_rotary_pos_emb): per axis a in (t, h, w),
 *   freqs_a = pos_a * inv_freq (rotary_dim/2 values), emb_a = cat(freqs_a,
 *   freqs_a); mrope_section * 2 splits the head_dim channels into six chunks
 *   [s0, s1, s2, s0, s1, s2], chunk j taken from axis j % 3; then
 *   out = x * cos(emb) + rotate_half(x) * sin(emb).
 *   Interleaved (modeling_qwen3_vl.py, apply_interleaved_mrope): freqs =
 *   freqs_t, then for dim in (1, 2): freqs[offset=dim : 3*s[dim] : 3] =
 *   freqs_dim at those indices; emb = cat(freqs, freqs).
 *   Written literally below (hf_mrope_angles), then compared to the library
 *   with the float32 tolerance of test_rope.c.
 * - Bit-exact: each channel pair rotated with the cos/sin that
 *   pe_rope_cache_cos_sin returns at its axis position, by the formula of
 *   the header (fmaf(x, c, -(y*s)), fmaf(y, c, x*s)).
 * Properties: text tokens (t == h == w) are rotated bit for bit as
 * pe_apply_rope_qk rotates them; a table and on-the-fly cache agree bit for
 * bit; every ISA and pool size agrees with scalar bit for bit; errors leave
 * q and k unchanged and name the argument.
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

#define TEST_RNG_SEED 0xbb67ae8584caa73bull
#include "isa_compare.h"
#include "test_util.h"

/* Vision-like positions [3][B][T]: a text prefix (t = h = w), an image grid
 * (t fixed, h and w walking the grid), then text again. */
static int64_t *vl_positions(int64_t B, int64_t T, int64_t limit) {
  int64_t *p = malloc((size_t)(3 * B * T) * sizeof(int64_t));
  assert_non_null(p);
  for (int64_t b = 0; b < B; b++) {
    int64_t start = (int64_t)(rnd() % 16), grid_w = 2 + (int64_t)(rnd() % 5);
    for (int64_t t = 0; t < T; t++) {
      int64_t *pt = p + b * T + t, *ph = pt + B * T, *pw = ph + B * T;
      if (t < T / 4 || t >= 3 * T / 4) { /* text */
        *pt = *ph = *pw = start + t;
      } else { /* image patch i of a grid */
        int64_t i = t - T / 4;
        *pt = start + T / 4;
        *ph = start + T / 4 + i / grid_w;
        *pw = start + T / 4 + i % grid_w;
      }
      if (*pt >= limit) *pt = limit - 1;
      if (*ph >= limit) *ph = limit - 1;
      if (*pw >= limit) *pw = limit - 1;
    }
  }
  return p;
}

/* ---- HF's angles, literally ---- */

/* emb[D'] for one token: D' = rotary_dim, the NeoX layout cat(f, f). */
static void hf_mrope_angles(const double *inv_freq, int32_t half, const int64_t pos[3],
                            const int32_t s[3], int interleaved, double *emb) {
  double freqs[3][4096];
  for (int a = 0; a < 3; a++)
    for (int32_t i = 0; i < half; i++) freqs[a][i] = (double)pos[a] * inv_freq[i];
  if (!interleaved) {
    /* emb_a = cat(freqs_a, freqs_a); split by mrope_section * 2; chunk j from axis j % 3 */
    int32_t sec2[6] = {s[0], s[1], s[2], s[0], s[1], s[2]};
    int32_t ch = 0;
    for (int j = 0; j < 6; j++)
      for (int32_t k = 0; k < sec2[j]; k++, ch++) {
        int a = j % 3;
        emb[ch] = ch < half ? freqs[a][ch] : freqs[a][ch - half];
      }
  } else {
    double f[4096];
    for (int32_t i = 0; i < half; i++) f[i] = freqs[0][i];
    for (int dim = 1; dim <= 2; dim++) /* slice(offset=dim, length=3*s[dim], step 3) */
      for (int32_t i = dim; i < 3 * s[dim] && i < half; i += 3) f[i] = freqs[dim][i];
    for (int32_t i = 0; i < half; i++) emb[i] = emb[i + half] = f[i];
  }
}

static void check_against_hf(int interleaved, const int32_t s[3], int32_t head_dim) {
  const int64_t B = 2, T = 24, H = 3;
  const int32_t half = head_dim / 2;
  const double base = 1000000.0; /* Qwen2-VL's rope_theta */
  pe_rope_cache *c = rope_cache(head_dim, 0, PE_ROPE_NEOX, base, 512);
  float *x = random_f32(B * T * H * head_dim);
  float *y = malloc((size_t)(B * T * H * head_dim) * sizeof(float));
  memcpy(y, x, (size_t)(B * T * H * head_dim) * sizeof(float));
  int64_t *pos = vl_positions(B, T, 512);
  pe_tensor tq = tensor_bthd(y, PE_F32, B, H, T, head_dim);
  assert_int_equal(pe_apply_mrope_qk(c, &tq, NULL, pos, s,
                                     interleaved ? PE_ROPE_MROPE_INTERLEAVED : 0u, NULL),
                   PE_OK);
  double inv[4096], emb[8192];
  for (int32_t i = 0; i < half; i++) inv[i] = pow(base, -2.0 * i / head_dim);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      int64_t p3[3] = {pos[b * T + t], pos[B * T + b * T + t], pos[2 * B * T + b * T + t]};
      hf_mrope_angles(inv, half, p3, s, interleaved, emb);
      for (int64_t h = 0; h < H; h++) {
        const float *in = x + t * H * head_dim + b * T * H * head_dim + h * head_dim;
        const float *out = y + t * H * head_dim + b * T * H * head_dim + h * head_dim;
        for (int32_t ch = 0; ch < head_dim; ch++) {
          /* rotate_half(x) = cat(-x2, x1) */
          double rh = ch < half ? -(double)in[ch + half] : (double)in[ch - half];
          double want = (double)in[ch] * cos(emb[ch]) + rh * sin(emb[ch]);
          double tol = 2.5e-7 * (fabs(in[ch]) + fabs(rh)) + 1e-30;
          if (!(fabs(out[ch] - want) <= tol)) {
            print_error("b %lld t %lld h %lld ch %d: %.9g vs HF %.9g\n", (long long)b,
                        (long long)t, (long long)h, ch, out[ch], want);
            fail();
          }
        }
      }
    }
  free(x), free(y), free(pos);
  pe_rope_cache_destroy(c);
}

static void test_mrope_qwen2_vl_hf_formula(void **state) {
  (void)state;
  const int32_t qwen2_vl[3] = {16, 24, 24}; /* Qwen2-VL / Qwen2.5-VL, head_dim 128 */
  check_against_hf(0, qwen2_vl, 128);
  const int32_t odd[3] = {3, 0, 6}; /* an empty section and odd sizes */
  check_against_hf(0, odd, 18);
}

static void test_mrope_qwen3_vl_interleaved_hf_formula(void **state) {
  (void)state;
  const int32_t qwen3_vl[3] = {24, 20, 20}; /* Qwen3-VL, head_dim 128 */
  check_against_hf(1, qwen3_vl, 128);
  const int32_t small[3] = {5, 3, 2};
  check_against_hf(1, small, 20);
}

/* ---- bit-exact: the rotation of the header with cos/sin at the axis positions ---- */

static int axis_of(int32_t i, const int32_t s[3], int interleaved) {
  if (interleaved) return (i % 3 == 1 && i < 3 * s[1]) ? 1 : (i % 3 == 2 && i < 3 * s[2]) ? 2 : 0;
  return i < s[0] ? 0 : i < s[0] + s[1] ? 1 : 2;
}

static void test_mrope_bit_exact_gather(void **state) {
  (void)state;
  const int64_t B = 2, T = 20, H = 2;
  for (int style = 0; style < 2; style++)
    for (int interleaved = 0; interleaved < 2; interleaved++)
      for (int otf = 0; otf < 2; otf++) {
        const int32_t D = 80, rd = 64, half = 32, s[3] = {12, 10, 10};
        pe_rope_cache *c = rope_cache(D, rd, (pe_rope_style)style, 10000.0, otf ? 0 : 256);
        float *x = random_f32(B * T * H * D), *y = malloc((size_t)(B * T * H * D) * 4);
        memcpy(y, x, (size_t)(B * T * H * D) * 4);
        int64_t *pos = vl_positions(B, T, 256);
        pe_tensor tk = tensor_bthd(y, PE_F32, B, H, T, D);
        uint32_t fl = (interleaved ? PE_ROPE_MROPE_INTERLEAVED : 0u) | (style ? PE_ROPE_INVERSE : 0u);
        assert_int_equal(pe_apply_mrope_qk(c, NULL, &tk, pos, s, fl, NULL), PE_OK);
        for (int64_t b = 0; b < B; b++)
          for (int64_t t = 0; t < T; t++) {
            float cs[3][2][32];
            for (int a = 0; a < 3; a++)
              assert_int_equal(pe_rope_cache_cos_sin(c, pos[a * B * T + b * T + t], cs[a][0], cs[a][1]),
                               PE_OK);
            for (int64_t h = 0; h < H; h++) {
              int64_t o = b * T * H * D + t * H * D + h * D;
              for (int32_t i = 0; i < half; i++) {
                int a = axis_of(i, s, interleaved);
                float co = cs[a][0][i], si = (style ? -1.0f : 1.0f) * cs[a][1][i];
                int64_t ix = style ? 2 * i : i, iy = style ? 2 * i + 1 : i + half;
                float xv = x[o + ix], yv = x[o + iy];
                float xo = fmaf(xv, co, -(yv * si)), yo = fmaf(yv, co, xv * si);
                assert_memory_equal(&y[o + ix], &xo, 4);
                assert_memory_equal(&y[o + iy], &yo, 4);
              }
              assert_memory_equal(&y[o + rd], &x[o + rd], (size_t)(D - rd) * 4); /* pass-through */
            }
          }
        free(x), free(y), free(pos);
        pe_rope_cache_destroy(c);
      }
}

/* ---- text tokens: plain RoPE bit for bit ---- */

static void test_mrope_text_equals_plain_rope(void **state) {
  (void)state;
  const int64_t B = 3, T = 33, Hq = 4, Hk = 2;
  const pe_dtype dts[3] = {PE_F32, PE_F16, PE_BF16};
  for (int d = 0; d < 3; d++)
    for (int style = 0; style < 2; style++)
      for (int otf = 0; otf < 2; otf++)
        for (int interleaved = 0; interleaved < 2; interleaved++) {
          const int32_t D = 128, s[3] = {16, 24, 24};
          pe_rope_cache *c = rope_cache(D, 0, (pe_rope_style)style, 1000000.0, otf ? 0 : 4096);
          size_t es = dts[d] == PE_F32 ? 4 : 2;
          size_t nq = (size_t)(B * T * Hq * D), nk = (size_t)(B * T * Hk * D);
          uint8_t *a = malloc((nq + nk) * es), *b2 = malloc((nq + nk) * es);
          for (size_t i = 0; i < (nq + nk) * es; i += 2) {
            uint16_t h = bf16_rne(uniform());
            if (dts[d] == PE_F16) h = (uint16_t)(0x3000 + (rnd() & 0x0fff)); /* finite halves */
            memcpy(a + i, &h, 2);
          }
          memcpy(b2, a, (nq + nk) * es);
          int64_t *pos3 = malloc((size_t)(3 * B * T) * sizeof(int64_t));
          for (int64_t i = 0; i < B * T; i++)
            pos3[i] = pos3[B * T + i] = pos3[2 * B * T + i] = (int64_t)(rnd() % 4096);
          pe_tensor q1 = tensor_bthd(a, dts[d], B, Hq, T, D), k1 = tensor_bthd(a + nq * es, dts[d], B, Hk, T, D);
          pe_tensor q2 = tensor_bthd(b2, dts[d], B, Hq, T, D), k2 = tensor_bthd(b2 + nq * es, dts[d], B, Hk, T, D);
          assert_int_equal(pe_apply_mrope_qk(c, &q1, &k1, pos3, s,
                                             interleaved ? PE_ROPE_MROPE_INTERLEAVED : 0u, NULL),
                           PE_OK);
          assert_int_equal(pe_apply_rope_qk(c, &q2, &k2, pos3, 0, NULL), PE_OK);
          assert_memory_equal(a, b2, (nq + nk) * es);
          /* NULL positions: 0..T-1 on every axis, as pe_apply_rope_qk's NULL */
          assert_int_equal(pe_apply_mrope_qk(c, &q1, &k1, NULL, s, 0u, NULL), PE_OK);
          assert_int_equal(pe_apply_rope_qk(c, &q2, &k2, NULL, 0, NULL), PE_OK);
          assert_memory_equal(a, b2, (nq + nk) * es);
          free(a), free(b2), free(pos3);
          pe_rope_cache_destroy(c);
        }
}

/* A table and on-the-fly cos/sin give the same bits (bf16 data). head_dim
 * 8192: the block's frequencies come in two chunks (a block's scratch rows
 * hold 4096 floats), the second starting inside section 1, which the
 * table's gather copies section by section. */
static void test_mrope_table_equals_on_the_fly(void **state) {
  (void)state;
  static const struct {
    int64_t B, T, H;
    int32_t D, s[3];
    int64_t table_rows;
  } cases[] = {{2, 40, 4, 256, {40, 44, 44}, 1024}, {1, 12, 2, 8192, {1500, 1298, 1298}, 64}};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
  for (int interleaved = 0; interleaved < 2; interleaved++) {
    const int64_t B = cases[ci].B, T = cases[ci].T, H = cases[ci].H;
    const int32_t D = cases[ci].D, *s = cases[ci].s;
    pe_rope_cache *ct = rope_cache(D, 0, PE_ROPE_NEOX, 5000000.0, cases[ci].table_rows);
    pe_rope_cache *cf = rope_cache(D, 0, PE_ROPE_NEOX, 5000000.0, 0);
    size_t n = (size_t)(B * T * H * D);
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    for (size_t i = 0; i < n; i++) a[i] = bf16_rne(uniform());
    memcpy(b, a, n * 2);
    int64_t *pos = vl_positions(B, T, cases[ci].table_rows);
    pe_tensor ta = tensor_bthd(a, PE_BF16, B, H, T, D), tb = tensor_bthd(b, PE_BF16, B, H, T, D);
    uint32_t fl = interleaved ? PE_ROPE_MROPE_INTERLEAVED : 0u;
    assert_int_equal(pe_apply_mrope_qk(ct, &ta, NULL, pos, s, fl, NULL), PE_OK);
    assert_int_equal(pe_apply_mrope_qk(cf, &tb, NULL, pos, s, fl, NULL), PE_OK);
    assert_memory_equal(a, b, n * 2);
    free(a), free(b), free(pos);
    pe_rope_cache_destroy(ct);
    pe_rope_cache_destroy(cf);
  }
}

/* ---- every ISA and a pool against scalar ---- */

/* f16 q then bf16 k in one buffer, every 16-bit pattern (NaN and Inf too),
 * rotated under the path in use. */
typedef struct mrope_run {
  int interleaved;
  int64_t max_positions;
  uint64_t seed;
} mrope_run;
enum { ID_B = 3, ID_T = 50, ID_H = 5, ID_D = 72, ID_BYTES = ID_B * ID_T * ID_H * ID_D * 4 };

static void run_mrope(void *ctx, pe_threadpool *pool, void *out_) {
  const mrope_run *r = ctx;
  uint8_t *out = out_;
  const int32_t s[3] = {10, 10, 10};
  rng = r->seed;
  pe_rope_cache *c = rope_cache(ID_D, 60, r->interleaved ? PE_ROPE_NEOX : PE_ROPE_GPTJ, 10000.0,
                                r->max_positions);
  size_t nq = (size_t)(ID_B * ID_T * ID_H * ID_D);
  for (size_t i = 0; i < nq; i++) {
    uint16_t h = (uint16_t)(rnd() >> 48);
    memcpy(out + 2 * i, &h, 2);
    uint16_t g = (uint16_t)(rnd() >> 48);
    memcpy(out + 2 * nq + 2 * i, &g, 2);
  }
  int64_t *pos = vl_positions(ID_B, ID_T, 300);
  pe_tensor tq = tensor_bthd(out, PE_F16, ID_B, ID_H, ID_T, ID_D);
  pe_tensor tk = tensor_bthd(out + 2 * nq, PE_BF16, ID_B, ID_H, ID_T, ID_D);
  assert_int_equal(pe_apply_mrope_qk(c, &tq, &tk, pos, s,
                                     r->interleaved ? PE_ROPE_MROPE_INTERLEAVED : 0u, pool),
                   PE_OK);
  free(pos);
  pe_rope_cache_destroy(c);
}

static void test_mrope_bit_identical_across_isas(void **state) {
  (void)state;
  if (!pe_test_any_simd_path()) skip(); /* only scalar here: nothing to compare */
  for (int interleaved = 0; interleaved < 2; interleaved++)
    for (int otf = 0; otf < 2; otf++) {
      mrope_run r = {interleaved, otf ? 0 : 300, 42 + (uint64_t)otf};
      pe_isa_compare(interleaved ? (otf ? "interleaved, on the fly" : "interleaved, table")
                                 : (otf ? "sections, on the fly" : "sections, table"),
                     ID_BYTES, run_mrope, &r);
    }
}

/* A pool cuts the tokens differently; the bits must not change. */
static void test_mrope_pool_sizes(void **state) {
  (void)state;
  pe_threadpool *pool = NULL;
  assert_int_equal(pe_threadpool_create(3, &pool), PE_OK);
  for (int interleaved = 0; interleaved < 2; interleaved++) {
    mrope_run r = {interleaved, 300, 9};
    pe_pool_compare(interleaved ? "interleaved" : "sections", ID_BYTES, run_mrope, &r, pool);
  }
  pe_threadpool_destroy(pool);
}

/* ---- errors: nothing written, the argument named ---- */

static void test_mrope_errors_change_nothing(void **state) {
  (void)state;
  const int64_t B = 2, T = 6, H = 2;
  const int32_t D = 32;
  pe_rope_cache *c = rope_cache(D, 0, PE_ROPE_NEOX, 10000.0, 100);
  float *x = random_f32(B * T * H * D), *x0 = malloc((size_t)(B * T * H * D) * 4);
  memcpy(x0, x, (size_t)(B * T * H * D) * 4);
  pe_tensor tq = tensor_bthd(x, PE_F32, B, H, T, D);
  int64_t pos[3 * 12];
  for (int i = 0; i < 36; i++) pos[i] = i % 12;
  const int32_t ok[3] = {4, 6, 6}, bad_sum[3] = {4, 6, 5}, neg[3] = {-2, 10, 8};
  /* one negative entry in each place, the sum still 16 */
  const int32_t neg1[3] = {10, -2, 8}, neg2[3] = {10, 8, -2};
  struct {
    const int32_t *s;
    uint32_t flags;
    pe_status want;
    const char *needle;
  } cases[] = {
      {NULL, 0, PE_ERR_NULL_POINTER, "mrope_section is NULL"},
      {bad_sum, 0, PE_ERR_INVALID_ARGUMENT, "mrope_section {4, 6, 5} must be >= 0 and sum to rotary_dim/2 = 16"},
      {neg, 0, PE_ERR_INVALID_ARGUMENT, "mrope_section {-2, 10, 8}"},
      {neg1, 0, PE_ERR_INVALID_ARGUMENT, "mrope_section {10, -2, 8} must be >= 0"},
      {neg2, 0, PE_ERR_INVALID_ARGUMENT, "mrope_section {10, 8, -2} must be >= 0"},
      {ok, 8u, PE_ERR_INVALID_ARGUMENT, "unknown bits 0x8"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_int_equal(pe_apply_mrope_qk(c, &tq, NULL, pos, cases[i].s, cases[i].flags, NULL),
                     cases[i].want);
    assert_non_null(strstr(pe_last_error(), cases[i].needle));
    assert_memory_equal(x, x0, (size_t)(B * T * H * D) * 4);
  }
  /* the w position of [batch 1, token 5] past the table */
  pos[2 * 12 + 11] = 100;
  assert_int_equal(pe_apply_mrope_qk(c, &tq, NULL, pos, ok, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE);
  assert_non_null(strstr(pe_last_error(),
                         "position 100 at [axis 2 (w), batch 1, token 5] >= cache max_positions 100"));
  pos[2 * 12 + 11] = 5;
  pos[12 + 0] = -3; /* h of [batch 0, token 0] */
  assert_int_equal(pe_apply_mrope_qk(c, &tq, NULL, pos, ok, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE);
  assert_non_null(strstr(pe_last_error(), "position -3 at [axis 1 (h), batch 0, token 0] is negative"));
  pos[12] = 0;
  assert_memory_equal(x, x0, (size_t)(B * T * H * D) * 4);
  assert_int_equal(pe_apply_mrope_qk(NULL, &tq, NULL, pos, ok, 0, NULL), PE_ERR_NULL_POINTER);
  assert_int_equal(pe_apply_mrope_qk(c, NULL, NULL, pos, ok, 0, NULL), PE_ERR_NULL_POINTER);
  pe_tensor wrong = tq;
  wrong.shape[3] = 16;
  assert_int_equal(pe_apply_mrope_qk(c, &wrong, NULL, pos, ok, 0, NULL), PE_ERR_SHAPE);
  assert_memory_equal(x, x0, (size_t)(B * T * H * D) * 4);
  assert_int_equal(pe_apply_mrope_qk(c, &tq, NULL, pos, ok, 0, NULL), PE_OK);
  free(x), free(x0);
  pe_rope_cache_destroy(c);
}

/* ---- mrope_section from config.json (excerpts of the published configs) ---- */

static void test_mrope_section_from_hf_config(void **state) {
  (void)state;
  static const char qwen2_vl[] =
      "{\"model_type\": \"qwen2_vl\", \"hidden_size\": 3584, \"num_attention_heads\": 28,"
      " \"rope_theta\": 1000000.0, \"rope_scaling\": {\"type\": \"mrope\","
      " \"mrope_section\": [16, 24, 24]}}";
  static const char qwen3_vl[] =
      "{\"model_type\": \"qwen3_vl\", \"text_config\": {\"head_dim\": 128, \"rope_scaling\":"
      " {\"mrope_interleaved\": true, \"mrope_section\": [24, 20, 20], \"rope_type\": \"default\"},"
      " \"rope_theta\": 5000000}}";
  static const char llama[] = "{\"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": \"llama3\"}}";
  static const char bad[] = "{\"rope_scaling\": {\"mrope_section\": [16, 24.5, 24]}}";
  int32_t s[3] = {-1, -1, -1};
  uint32_t fl = 99;
  assert_int_equal(pe_mrope_section_from_hf_config(qwen2_vl, sizeof qwen2_vl - 1, s, &fl), PE_OK);
  assert_int_equal(s[0], 16), assert_int_equal(s[1], 24), assert_int_equal(s[2], 24);
  assert_int_equal(fl, 0);
  assert_int_equal(pe_mrope_section_from_hf_config(qwen3_vl, sizeof qwen3_vl - 1, s, &fl), PE_OK);
  assert_int_equal(s[0], 24), assert_int_equal(s[1], 20), assert_int_equal(s[2], 20);
  assert_int_equal(fl, PE_ROPE_MROPE_INTERLEAVED);
  assert_int_equal(pe_mrope_section_from_hf_config(llama, sizeof llama - 1, s, &fl), PE_ERR_PARSE);
  assert_non_null(strstr(pe_last_error(), "no mrope_section"));
  assert_int_equal(pe_mrope_section_from_hf_config(bad, sizeof bad - 1, s, &fl), PE_ERR_PARSE);
  assert_non_null(strstr(pe_last_error(), "rope_scaling.mrope_section[1] must be an integer"));
  assert_int_equal(pe_mrope_section_from_hf_config("{", 1, s, &fl), PE_ERR_PARSE);
  assert_int_equal(pe_mrope_section_from_hf_config(NULL, 0, s, &fl), PE_ERR_NULL_POINTER);
  /* the outputs are untouched by the failures */
  assert_int_equal(s[0], 24), assert_int_equal(fl, PE_ROPE_MROPE_INTERLEAVED);
}

/* End to end from config.json: the cache and the sections of the same file. */
static void test_mrope_cache_from_hf_config(void **state) {
  (void)state;
  static const char qwen2_vl[] =
      "{\"model_type\": \"qwen2_vl\", \"hidden_size\": 3584, \"num_attention_heads\": 28,"
      " \"max_position_embeddings\": 32768, \"rope_theta\": 1000000.0,"
      " \"rope_scaling\": {\"type\": \"mrope\", \"rope_type\": \"default\","
      " \"mrope_section\": [16, 24, 24]}}"; /* as transformers saves it */
  static const char qwen3_vl[] =
      "{\"model_type\": \"qwen3_vl\", \"text_config\": {\"model_type\": \"qwen3_vl_text\","
      " \"head_dim\": 128, \"hidden_size\": 4096, \"num_attention_heads\": 32,"
      " \"max_position_embeddings\": 262144, \"rope_theta\": 5000000, \"rope_scaling\":"
      " {\"mrope_interleaved\": true, \"mrope_section\": [24, 20, 20], \"rope_type\": \"default\"}}}";
  const char *cfg[2] = {qwen2_vl, qwen3_vl};
  const double base[2] = {1000000.0, 5000000.0};
  for (int i = 0; i < 2; i++) {
    pe_rope_cache *c = NULL;
    assert_int_equal(pe_rope_cache_create_from_hf_config(cfg[i], strlen(cfg[i]), 512, 0, 0, &c), PE_OK);
    pe_rope_params p;
    pe_rope_params_init(&p);
    assert_int_equal(pe_rope_cache_params(c, &p), PE_OK);
    assert_int_equal(p.head_dim, 128);
    assert_int_equal(p.rotary_dim, 128);
    assert_true(p.base == base[i]);
    assert_int_equal(p.scaling, PE_ROPE_SCALING_NONE);
    int32_t s[3];
    uint32_t fl;
    assert_int_equal(pe_mrope_section_from_hf_config(cfg[i], strlen(cfg[i]), s, &fl), PE_OK);
    float *x = random_f32(2 * 4 * 128);
    pe_tensor t = tensor_bthd(x, PE_F32, 1, 2, 4, 128);
    int64_t pos[12] = {0, 1, 2, 2, 0, 1, 3, 4, 0, 1, 5, 6};
    assert_int_equal(pe_apply_mrope_qk(c, &t, NULL, pos, s, fl, NULL), PE_OK);
    free(x);
    pe_rope_cache_destroy(c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mrope_qwen2_vl_hf_formula),
      cmocka_unit_test(test_mrope_qwen3_vl_interleaved_hf_formula),
      cmocka_unit_test(test_mrope_bit_exact_gather),
      cmocka_unit_test(test_mrope_text_equals_plain_rope),
      cmocka_unit_test(test_mrope_table_equals_on_the_fly),
      cmocka_unit_test(test_mrope_bit_identical_across_isas),
      cmocka_unit_test(test_mrope_pool_sizes),
      cmocka_unit_test(test_mrope_errors_change_nothing),
      cmocka_unit_test(test_mrope_section_from_hf_config),
      cmocka_unit_test(test_mrope_cache_from_hf_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
