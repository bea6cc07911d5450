/* test_rope_axes.c - pe_apply_rope_axes_qk (multi-axis RoPE with any
 * per-frequency axis map) and the map helpers.
 *
 * References written here from the published code, never from the library:
 * - Qwen2-VL (transformers modeling_qwen2_vl.py, apply_multimodal_rotary_pos_emb):
 *   cos.split(mrope_section * 2)[j] taken from axis j % 3, so channel ch < half
 *   follows the axis of its chunk (qwen2_vl_axis).
 * - Qwen3-VL (modeling_qwen3_vl.py, apply_interleaved_mrope): freqs_t, then
 *   freqs[..., dim : 3*s[dim] : 3] = freqs_dim for dim in (1, 2).
 * - ggml (ggml-cpu ops.cpp, ggml_mrope_cache_init): sector = i % sum of 4
 *   sections; MROPE: sector < s0 -> t, < s0+s1 -> h, < s0+s1+s2 -> w, else e;
 *   IMROPE: sector % 3 == 1 && sector < 3*s1 -> h, % 3 == 2 && < 3*s2 -> w,
 *   % 3 == 0 && < 3*s0 -> t, else e.
 * - Ernie-4.5-VL (transformers modeling_ernie4_5_vl_moe, the "ernie_3d"
 *   inv_freq and Ernie4_5_VL_MoeTextRotaryEmbedding.recomposition_to_3d):
 *   inv_freq_3d[:hw] = cat(inv_freq[:hw][0::2], inv_freq[:hw][1::2]); the
 *   angles split into [hw/2, hw/2, t] taken from axes (1, 2, 0), h and w
 *   stacked pairwise, then t; repeat_interleave(2); x*cos + rotate_half_text(x)*sin
 *   with rotate_half_text = stack(-x[1::2], x[0::2]). Written literally in
 *   float64 (ernie_reference).
 * The 4-axis case is checked against float64 angles pos[axis]*inv_freq with
 * ggml's MROPE rule above. Tolerance: test_mrope.c's, 2.5e-7 * (|x| + |y|).
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

#define TEST_RNG_SEED 0x3c6ef372fe94f82bull
#include "test_util.h"

/* [n_axes][B][T]: a text prefix (all axes equal), then grid patches. */
static int64_t *positions(int n_axes, int64_t B, int64_t T, int64_t limit) {
  int64_t *p = malloc((size_t)(n_axes * B * T) * sizeof(int64_t));
  assert_non_null(p);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++)
      for (int a = 0; a < n_axes; a++) {
        int64_t v = t < T / 3 ? t : T / 3 + (a == 0 ? 0 : (int64_t)(rnd() % 40));
        p[a * B * T + b * T + t] = v < limit ? v : limit - 1;
      }
  return p;
}

/* ---- the published rules, literally ---- */

static int qwen2_vl_axis(const int32_t s[3], int32_t ch) {
  const int32_t sec2[6] = {s[0], s[1], s[2], s[0], s[1], s[2]};
  int32_t start = 0;
  for (int j = 0; j < 6; j++) {
    if (ch < start + sec2[j]) return j % 3;
    start += sec2[j];
  }
  return -1;
}

static void qwen3_vl_axes(const int32_t s[3], int32_t half, int *axis) {
  for (int32_t i = 0; i < half; i++) axis[i] = 0; /* freqs_t */
  for (int dim = 1; dim <= 2; dim++)
    for (int32_t i = dim; i < 3 * s[dim] && i < half; i += 3) axis[i] = dim;
}

static int ggml_mrope_axis(const int32_t s[4], int32_t i) {
  int sect_dims = s[0] + s[1] + s[2] + s[3], sec_w = s[0] + s[1];
  int sector = i % sect_dims;
  if (sector < s[0]) return 0;
  if (sector < sec_w) return 1;
  if (sector < sec_w + s[2]) return 2;
  return 3;
}

static int ggml_imrope_axis(const int32_t s[4], int32_t i) {
  int sector = i % (s[0] + s[1] + s[2] + s[3]);
  if (sector % 3 == 1 && sector < 3 * s[1]) return 1;
  if (sector % 3 == 2 && sector < 3 * s[2]) return 2;
  if (sector % 3 == 0 && sector < 3 * s[0]) return 0;
  return 3;
}

/* HF's Ernie recomposition on (axis, frequency index) slots: slot j of the
 * half-size cos vector gets frequency freq[j] at axis[j]. */
static void ernie_slots(int32_t half, int32_t t_dim, int *axis, int *freq) {
  int32_t hw = half - t_dim;
  int idx3d[4096];
  /* inv_freq_3d[:hw] = cat(inv_freq[:hw][0::2], inv_freq[:hw][1::2]); [hw:] unchanged */
  int32_t n = 0;
  for (int32_t i = 0; i < hw; i += 2) idx3d[n++] = i;
  for (int32_t i = 1; i < hw; i += 2) idx3d[n++] = i;
  for (int32_t i = hw; i < half; i++) idx3d[n++] = i;
  /* split [hw/2, hw/2, t]: m[(i+1) % 3] -> h from axis 1, w from axis 2, t from axis 0;
   * freq_hw = stack([h, w], -1).flatten(-2); cat(freq_hw, t) */
  for (int32_t j = 0; j < hw / 2; j++) {
    axis[2 * j] = 1, freq[2 * j] = idx3d[j];
    axis[2 * j + 1] = 2, freq[2 * j + 1] = idx3d[hw / 2 + j];
  }
  for (int32_t j = 0; j < t_dim; j++) axis[hw + j] = 0, freq[hw + j] = idx3d[hw + j];
}

/* ---- the maps ---- */

static void test_map_sections_qwen2_vl(void **state) {
  (void)state;
  const int32_t sets[][3] = {{16, 24, 24}, {3, 0, 6}, {0, 0, 9}};
  for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
    int32_t half = sets[k][0] + sets[k][1] + sets[k][2];
    uint8_t map[64];
    assert_int_equal(pe_axis_map_sections(sets[k], 3, half, map), PE_OK);
    for (int32_t i = 0; i < half; i++) assert_int_equal(map[i], qwen2_vl_axis(sets[k], i));
  }
}

static void test_map_sections_ggml_cyclic(void **state) {
  (void)state;
  const int32_t sets[][4] = {{5, 6, 7, 3}, {2, 2, 2, 2}, {4, 3, 2, 0}, {11, 0, 5, 16}};
  for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
    uint8_t map[32];
    assert_int_equal(pe_axis_map_sections(sets[k], 4, 32, map), PE_OK);
    for (int32_t i = 0; i < 32; i++) assert_int_equal(map[i], ggml_mrope_axis(sets[k], i));
  }
}

static void test_map_interleaved(void **state) {
  (void)state;
  const int32_t q3[][3] = {{24, 20, 20}, {5, 3, 2}, {1, 4, 1}};
  for (size_t k = 0; k < sizeof q3 / sizeof q3[0]; k++) {
    int32_t half = q3[k][0] + q3[k][1] + q3[k][2];
    uint8_t map[64];
    int want[64];
    assert_int_equal(pe_axis_map_interleaved(q3[k], 3, half, map), PE_OK);
    qwen3_vl_axes(q3[k], half, want);
    for (int32_t i = 0; i < half; i++) assert_int_equal(map[i], want[i]);
  }
  const int32_t g4[][4] = {{24, 20, 20, 0}, {4, 4, 4, 4}, {2, 5, 3, 1}};
  for (size_t k = 0; k < sizeof g4 / sizeof g4[0]; k++) {
    uint8_t map[64];
    assert_int_equal(pe_axis_map_interleaved(g4[k], 4, 64, map), PE_OK);
    for (int32_t i = 0; i < 64; i++) assert_int_equal(map[i], ggml_imrope_axis(g4[k], i));
  }
}

/* HF's pre-rotation and recomposition put frequency j at slot j (so a plain
 * cache works), on the axis the map gives. */
static void test_map_ernie45_vl(void **state) {
  (void)state;
  const int32_t cases[][2] = {{64, 20}, {64, 0}, {10, 4}, {6, 6}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int32_t half = cases[k][0], t = cases[k][1];
    uint8_t map[64];
    int axis[64], freq[64];
    assert_int_equal(pe_axis_map_ernie45_vl(t, half, map), PE_OK);
    ernie_slots(half, t, axis, freq);
    for (int32_t j = 0; j < half; j++) {
      assert_int_equal(freq[j], j);
      assert_int_equal(map[j], axis[j]);
    }
  }
}

static void test_map_errors(void **state) {
  (void)state;
  uint8_t map[8], snap[8];
  memset(map, 0xab, sizeof map);
  memcpy(snap, map, sizeof map);
  const int32_t neg[3] = {2, -1, 3}, big[3] = {4, 4, 4}, zero[3] = {0, 0, 0}, ok[4] = {2, 2, 2, 2};
  assert_int_equal(pe_axis_map_sections(NULL, 3, 8, map), PE_ERR_NULL_POINTER);
  assert_int_equal(pe_axis_map_sections(ok, 3, 8, NULL), PE_ERR_NULL_POINTER);
  assert_int_equal(pe_axis_map_sections(neg, 3, 8, map), PE_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(pe_last_error(), "pe_axis_map_sections"));
  assert_non_null(strstr(pe_last_error(), "sections[1] = -1"));
  assert_int_equal(pe_axis_map_sections(big, 3, 8, map), PE_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(pe_last_error(), "sum to 12"));
  assert_int_equal(pe_axis_map_sections(zero, 3, 8, map), PE_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(pe_last_error(), "sum to 0"));
  /* The smallest sum, 1: i % 1 == 0 lies in the one non-empty section, so
   * every frequency takes axis 1. */
  const int32_t one[3] = {0, 1, 0};
  uint8_t map1[8];
  memset(map1, 0xab, sizeof map1);
  assert_int_equal(pe_axis_map_sections(one, 3, 8, map1), PE_OK);
  for (int i = 0; i < 8; i++) assert_int_equal(map1[i], 1);
  assert_int_equal(pe_axis_map_sections(ok, 0, 8, map), PE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pe_axis_map_sections(ok, 5, 8, map), PE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pe_axis_map_sections(ok, 4, 0, map), PE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pe_axis_map_interleaved(ok, 2, 8, map), PE_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(pe_last_error(), "n_sections 2"));
  assert_int_equal(pe_axis_map_interleaved(big, 3, 8, map), PE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pe_axis_map_ernie45_vl(3, 8, map), PE_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(pe_last_error(), "pe_axis_map_ernie45_vl"));
  assert_int_equal(pe_axis_map_ernie45_vl(9, 8, map), PE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pe_axis_map_ernie45_vl(-2, 8, map), PE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pe_axis_map_ernie45_vl(2, 8, NULL), PE_ERR_NULL_POINTER);
  assert_memory_equal(map, snap, sizeof map);
}

/* ---- through the general entry point: bit for bit pe_apply_mrope_qk ---- */

static void same_as_mrope(int interleaved, const int32_t s[3], int64_t max_positions,
                          uint32_t inverse) {
  const int64_t B = 2, T = 37, Hq = 4, Hk = 2, D = 128;
  pe_rope_cache *c = rope_cache((int32_t)D, 0, PE_ROPE_NEOX, 1000000.0, max_positions);
  int64_t lim = max_positions ? max_positions : 100000;
  int64_t *pos = positions(3, B, T, lim);
  float *q0 = random_f32(B * T * Hq * D), *k0 = random_f32(B * T * Hk * D);
  size_t qb = (size_t)(B * T * Hq * D) * sizeof(float), kb = (size_t)(B * T * Hk * D) * sizeof(float);
  float *q1 = malloc(qb), *k1 = malloc(kb);
  memcpy(q1, q0, qb), memcpy(k1, k0, kb);
  pe_tensor tq0 = tensor_bthd(q0, PE_F32, B, Hq, T, D), tk0 = tensor_bthd(k0, PE_F32, B, Hk, T, D);
  pe_tensor tq1 = tensor_bthd(q1, PE_F32, B, Hq, T, D), tk1 = tensor_bthd(k1, PE_F32, B, Hk, T, D);
  uint32_t fl = (interleaved ? PE_ROPE_MROPE_INTERLEAVED : 0u) | inverse;
  assert_int_equal(pe_apply_mrope_qk(c, &tq0, &tk0, pos, s, fl, NULL), PE_OK);
  uint8_t map[64];
  if (interleaved) assert_int_equal(pe_axis_map_interleaved(s, 3, 64, map), PE_OK);
  else assert_int_equal(pe_axis_map_sections(s, 3, 64, map), PE_OK);
  assert_int_equal(pe_apply_rope_axes_qk(c, &tq1, &tk1, pos, 3, map, inverse, NULL), PE_OK);
  assert_memory_equal(q0, q1, qb);
  assert_memory_equal(k0, k1, kb);
  free(q0), free(k0), free(q1), free(k1), free(pos);
  pe_rope_cache_destroy(c);
}

static void test_qwen2_vl_same_bits(void **state) {
  (void)state;
  const int32_t s[3] = {16, 24, 24};
  same_as_mrope(0, s, 4096, 0);
  same_as_mrope(0, s, 0, 0);
  same_as_mrope(0, s, 0, PE_ROPE_INVERSE);
}

static void test_qwen3_vl_same_bits(void **state) {
  (void)state;
  const int32_t s[3] = {24, 20, 20};
  same_as_mrope(1, s, 4096, 0);
  same_as_mrope(1, s, 0, 0);
  same_as_mrope(1, s, 4096, PE_ROPE_INVERSE);
}

/* Text tokens (every axis at one position) are pe_apply_rope_qk's bits. */
static void test_equal_axes_are_plain_rope(void **state) {
  (void)state;
  const int64_t B = 1, T = 20, H = 2, D = 64;
  pe_rope_cache *c = rope_cache((int32_t)D, 0, PE_ROPE_GPTJ, 10000.0, 0);
  int64_t pos[4 * 20], plain[20];
  for (int64_t t = 0; t < T; t++) {
    plain[t] = t * 1000003;
    for (int a = 0; a < 4; a++) pos[a * T + t] = plain[t];
  }
  float *x0 = random_f32(B * T * H * D);
  size_t bytes = (size_t)(B * T * H * D) * sizeof(float);
  float *x1 = malloc(bytes);
  memcpy(x1, x0, bytes);
  pe_tensor t0 = tensor_bthd(x0, PE_F32, B, H, T, D), t1 = tensor_bthd(x1, PE_F32, B, H, T, D);
  uint8_t map[32];
  for (int i = 0; i < 32; i++) map[i] = (uint8_t)((i * 7) % 4);
  assert_int_equal(pe_apply_rope_qk(c, &t0, NULL, plain, 0, NULL), PE_OK);
  assert_int_equal(pe_apply_rope_axes_qk(c, &t1, NULL, pos, 4, map, 0, NULL), PE_OK);
  assert_memory_equal(x0, x1, bytes);
  free(x0), free(x1);
  pe_rope_cache_destroy(c);
}

/* ---- float64 references ---- */

/* out vs the rotation of in by angle[i] on pair i (NeoX or GPT-J). */
static void check_rows(const float *in, const float *out, int64_t rows, int32_t D, int gptj,
                       const double *angle /* [rows][D/2] */) {
  int32_t half = D / 2;
  for (int64_t r = 0; r < rows; r++)
    for (int32_t i = 0; i < half; i++) {
      int32_t ix = gptj ? 2 * i : i, iy = gptj ? 2 * i + 1 : i + half;
      double x = in[r * D + ix], y = in[r * D + iy], a = angle[r * half + i];
      double wx = x * cos(a) - y * sin(a), wy = y * cos(a) + x * sin(a);
      double tol = 2.5e-7 * (fabs(x) + fabs(y)) + 1e-30;
      if (!(fabs(out[r * D + ix] - wx) <= tol) || !(fabs(out[r * D + iy] - wy) <= tol)) {
        print_error("row %lld pair %d: (%.9g, %.9g) vs (%.9g, %.9g)\n", (long long)r, i,
                    out[r * D + ix], out[r * D + iy], wx, wy);
        fail();
      }
    }
}

/* ggml's 4-section layout (cyclic: the sections sum to 21 of 32), NeoX,
 * table and on the fly, against pos[axis] * base^(-2i/D) in float64. */
static void test_four_axes_float64(void **state) {
  (void)state;
  const int64_t B = 2, T = 19, H = 3, D = 64;
  const int32_t s[4] = {5, 6, 7, 3};
  for (int table = 0; table < 2; table++) {
    pe_rope_cache *c = rope_cache((int32_t)D, 0, PE_ROPE_NEOX, 10000.0, table ? 2048 : 0);
    int64_t *pos = positions(4, B, T, 2048);
    for (int64_t i = 0; i < B * T; i++) pos[3 * B * T + i] = (int64_t)(rnd() % 2048);
    float *x = random_f32(B * T * H * D);
    size_t bytes = (size_t)(B * T * H * D) * sizeof(float);
    float *y = malloc(bytes);
    memcpy(y, x, bytes);
    uint8_t map[32];
    assert_int_equal(pe_axis_map_sections(s, 4, 32, map), PE_OK);
    pe_tensor ty = tensor_bthd(y, PE_F32, B, H, T, D);
    assert_int_equal(pe_apply_rope_axes_qk(c, &ty, NULL, pos, 4, map, 0, NULL), PE_OK);
    double *ang = malloc((size_t)(B * T * H * 32) * sizeof(double));
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++)
          for (int32_t i = 0; i < 32; i++) {
            int a = ggml_mrope_axis(s, i);
            ang[((b * T + t) * H + h) * 32 + i] =
                (double)pos[a * B * T + b * T + t] * pow(10000.0, -2.0 * i / (double)D);
          }
    check_rows(x, y, B * T * H, (int32_t)D, 0, ang);
    free(x), free(y), free(pos), free(ang);
    pe_rope_cache_destroy(c);
  }
}

/* Ernie-4.5-VL-28B-A3B's text attention: head_dim 128, rope_theta 500000,
 * freq_allocation 20, GPT-J pairs; HF's code in float64. */
static void test_ernie45_vl_float64(void **state) {
  (void)state;
  const int64_t B = 1, T = 30, H = 2, D = 128;
  const int32_t half = 64, t_dim = 20, hw = half - t_dim;
  pe_rope_cache *c = rope_cache((int32_t)D, 0, PE_ROPE_GPTJ, 500000.0, 0);
  int64_t *pos = positions(3, B, T, 1 << 20);
  float *x = random_f32(B * T * H * D);
  size_t bytes = (size_t)(B * T * H * D) * sizeof(float);
  float *y = malloc(bytes);
  memcpy(y, x, bytes);
  uint8_t map[64];
  assert_int_equal(pe_axis_map_ernie45_vl(t_dim, half, map), PE_OK);
  pe_tensor ty = tensor_bthd(y, PE_F32, B, H, T, D);
  assert_int_equal(pe_apply_rope_axes_qk(c, &ty, NULL, pos, 3, map, 0, NULL), PE_OK);
  /* HF: inv_freq = 1/base^(arange(0, D, 2)/D), pre-rotated (inv_freq_3d) */
  double inv[64], inv3d[64];
  for (int32_t i = 0; i < half; i++) inv[i] = 1.0 / pow(500000.0, (double)(2 * i) / (double)D);
  int32_t n = 0;
  for (int32_t i = 0; i < hw; i += 2) inv3d[n++] = inv[i];
  for (int32_t i = 1; i < hw; i += 2) inv3d[n++] = inv[i];
  for (int32_t i = hw; i < half; i++) inv3d[n++] = inv[i];
  for (int64_t t = 0; t < T; t++) {
    double freqs[3][64], hwt[64];
    for (int a = 0; a < 3; a++)
      for (int32_t i = 0; i < half; i++) freqs[a][i] = (double)pos[a * B * T + t] * inv3d[i];
    /* recomposition_to_3d: sections [hw/2, hw/2, t] from axes (1, 2, 0) */
    for (int32_t j = 0; j < hw / 2; j++) {
      hwt[2 * j] = freqs[1][j];
      hwt[2 * j + 1] = freqs[2][hw / 2 + j];
    }
    for (int32_t j = 0; j < t_dim; j++) hwt[hw + j] = freqs[0][hw + j];
    for (int64_t h = 0; h < H; h++) {
      const float *in = x + (t * H + h) * D;
      const float *out = y + (t * H + h) * D;
      for (int32_t ch = 0; ch < D; ch++) {
        double a = hwt[ch / 2]; /* repeat_interleave(2) */
        /* rotate_half_text: stack(-x[1::2], x[0::2]).flatten */
        double rh = ch % 2 == 0 ? -(double)in[ch + 1] : (double)in[ch - 1];
        double want = (double)in[ch] * cos(a) + rh * sin(a);
        double tol = 2.5e-7 * (fabs(in[ch]) + fabs(rh)) + 1e-30;
        if (!(fabs(out[ch] - want) <= tol)) {
          print_error("t %lld h %lld ch %d: %.9g vs HF %.9g\n", (long long)t, (long long)h, ch,
                      out[ch], want);
          fail();
        }
      }
    }
  }
  free(x), free(y), free(pos);
  pe_rope_cache_destroy(c);
}

/* ---- errors write nothing; no tokens is PE_OK ---- */

static void test_errors(void **state) {
  (void)state;
  const int64_t B = 1, T = 4, H = 2, D = 16;
  pe_rope_cache *c = rope_cache((int32_t)D, 0, PE_ROPE_NEOX, 10000.0, 64);
  float *x = random_f32(B * T * H * D);
  size_t bytes = (size_t)(B * T * H * D) * sizeof(float);
  float *snap = malloc(bytes);
  memcpy(snap, x, bytes);
  pe_tensor tx = tensor_bthd(x, PE_F32, B, H, T, D);
  uint8_t map[8] = {0, 1, 2, 0, 1, 2, 0, 1};
  int64_t pos[3 * 4] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
  assert_int_equal(pe_apply_rope_axes_qk(NULL, &tx, NULL, pos, 3, map, 0, NULL),
                   PE_ERR_NULL_POINTER);
  assert_int_equal(pe_apply_rope_axes_qk(c, &tx, NULL, pos, 3, NULL, 0, NULL),
                   PE_ERR_NULL_POINTER);
  assert_non_null(strstr(pe_last_error(), "axis_of_freq is NULL"));
  assert_int_equal(pe_apply_rope_axes_qk(c, NULL, NULL, pos, 3, map, 0, NULL),
                   PE_ERR_NULL_POINTER);
  assert_int_equal(pe_apply_rope_axes_qk(c, &tx, NULL, pos, 0, map, 0, NULL),
                   PE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pe_apply_rope_axes_qk(c, &tx, NULL, pos, 5, map, 0, NULL),
                   PE_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(pe_last_error(), "n_axes 5"));
  assert_int_equal(pe_apply_rope_axes_qk(c, &tx, NULL, pos, 2, map, 0, NULL),
                   PE_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(pe_last_error(), "axis_of_freq[2] = 2"));
  assert_int_equal(pe_apply_rope_axes_qk(c, &tx, NULL, pos, 3, map, PE_ROPE_MROPE_INTERLEAVED, NULL),
                   PE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pe_apply_rope_axes_qk(c, &tx, NULL, pos, 3, map, PE_MASK_CAUSAL, NULL),
                   PE_ERR_INVALID_ARGUMENT);
  int64_t bad[3 * 4] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 64, 3};
  assert_int_equal(pe_apply_rope_axes_qk(c, &tx, NULL, bad, 3, map, 0, NULL),
                   PE_ERR_POSITION_OUT_OF_RANGE);
  assert_non_null(strstr(pe_last_error(), "axis 2"));
  bad[10] = -1;
  assert_int_equal(pe_apply_rope_axes_qk(c, &tx, NULL, bad, 3, map, 0, NULL),
                   PE_ERR_POSITION_OUT_OF_RANGE);
  pe_tensor wrong = tx;
  wrong.shape[3] = 8;
  assert_int_equal(pe_apply_rope_axes_qk(c, &wrong, NULL, pos, 3, map, 0, NULL), PE_ERR_SHAPE);
  assert_memory_equal(x, snap, bytes);
  /* no tokens: PE_OK, nothing read from positions */
  pe_tensor empty = tx;
  empty.shape[2] = 0;
  assert_int_equal(pe_apply_rope_axes_qk(c, &empty, NULL, NULL, 3, map, 0, NULL), PE_OK);
  assert_int_equal(pe_apply_rope_axes_qk(c, &empty, NULL, bad, 3, map, 0, NULL), PE_OK);
  assert_memory_equal(x, snap, bytes);
  free(x), free(snap);
  pe_rope_cache_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_map_sections_qwen2_vl),
      cmocka_unit_test(test_map_sections_ggml_cyclic),
      cmocka_unit_test(test_map_interleaved),
      cmocka_unit_test(test_map_ernie45_vl),
      cmocka_unit_test(test_map_errors),
      cmocka_unit_test(test_qwen2_vl_same_bits),
      cmocka_unit_test(test_qwen3_vl_same_bits),
      cmocka_unit_test(test_equal_axes_are_plain_rope),
      cmocka_unit_test(test_four_axes_float64),
      cmocka_unit_test(test_ernie45_vl_float64),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
