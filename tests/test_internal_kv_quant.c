/* test_internal_kv_quant.c - the quantized KV-cache formats (isa.h's
 * kv_quant / kv_dequant kernels):
 *   - OCP FP8 e4m3fn and e5m2 against a reference written here from the OCP
 *     8-bit Floating Point Specification (OFP8 rev. 1.0): every code's value
 *     from sign/exponent/mantissa, round to nearest even over the sorted
 *     finite values, saturation to the largest finite magnitude, NaN;
 *     every code round-trips; every float32 class (zero, subnormal, normal,
 *     each binade's boundary, every halfway point between neighbouring
 *     codes and its neighbours, overflow, Inf, NaN) quantizes to the
 *     reference's code;
 *   - Q8_0 bytes against a transcription of ggml's quantize_row_q8_0_ref
 *     (ggml-quants.c) and its fp32 -> fp16 (ggml-impl.h's
 *     ggml_compute_fp32_to_fp16) for random rows, all-zero blocks and +-amax
 *     ties; dequantization against ggml's dequantize_row_q8_0;
 *   - the FP8 scales' amax (isa.h's amax): scalar against the largest |x|
 *     (every NaN passed over, from +0), every vector ISA against scalar;
 *   - every vector ISA against scalar, bit for bit (memcmp, guard bytes).
 * A vector path the build or CPU lacks is a cmocka skip, never a pass. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/internal.h"
#include "kernels/isa.h"

#include "internal_isa.h"

#include "kv_quant_ref.h"

static const pe_isa *const ref = &pe__isa_scalar;

static uint64_t rng_s = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { return splitmix64(&rng_s); }

/* ---- scalar vs reference ---- */

static void test_fp8_every_code(void **state) {
  (void)state;
  for (int f = E4M3; f <= E5M2; f++) {
    uint8_t codes[256], back[256];
    float vals[256];
    for (int c = 0; c < 256; c++) codes[c] = (uint8_t)c;
    ref->kv_dequant[f][PE_F32](codes, vals, 256, 1.0f);
    for (int c = 0; c < 256; c++) {
      float want = ref_decode(f, (unsigned)c);
      if (isnan(want)) {
        assert_true(isnan(vals[c]));
        assert_int_equal(f32_bits(vals[c]) >> 31, (unsigned)c >> 7);
      } else {
        assert_int_equal(f32_bits(vals[c]), f32_bits(want));
      }
    }
    ref->kv_quant[f][PE_F32](vals, back, 256, 1.0f);
    for (int c = 0; c < 256; c++) {
      int k = code_class(f, (unsigned)c);
      unsigned want = (unsigned)c;
      /* e5m2 only: Inf saturates, the NaN codes come back as the quiet one */
      if (k == 1) want = (c & 0x80) | 0x7b;
      if (k == 2) want = (c & 0x80) | (f == E4M3 ? 0x7f : 0x7e);
      if (back[c] != want) fail_msg("format %d code 0x%02x -> %g -> 0x%02x, want 0x%02x", f, c,
                                    (double)vals[c], back[c], want);
    }
    /* a power-of-two scale keeps every finite code exact */
    float scaled[256];
    ref->kv_dequant[f][PE_F32](codes, scaled, 256, 0.125f);
    ref->kv_quant[f][PE_F32](scaled, back, 256, 0.125f);
    for (int c = 0; c < 256; c++)
      if (code_class(f, (unsigned)c) == 0) assert_int_equal(back[c], c);
  }
}

/* Every float32 class: the 2^20 patterns of sign, exponent and top 11
 * mantissa bits, each with low 12 bits in {0, 1, 0x7ff, 0x800, 0x801, 0xfff}:
 * every fp8 value, every halfway point between neighbouring fp8 values (a
 * tie has at most 4 significant mantissa bits), their float32 neighbours,
 * every binade boundary, subnormals, overflow, Inf, NaN. */
static const uint32_t lows[] = {0, 1, 0x7ff, 0x800, 0x801, 0xfff};

static void test_fp8_float_classes(void **state) {
  (void)state;
  enum { N = 1 << 14 };
  static float in[N];
  static uint8_t out[N];
  /* a reference that scans 128 codes per value is slow: the 2^20 * 6 inputs
   * are checked through a sorted table of the non-negative finite values */
  for (int f = E4M3; f <= E5M2; f++) {
    double v[128];
    unsigned vc[128];
    int nv = 0;
    for (unsigned c = 0; c < 0x80; c++)
      if (code_class(f, c) == 0) v[nv] = code_value(f, c), vc[nv] = c, nv++;
    /* the codes are already sorted by value (OCP: monotone magnitudes) */
    for (int i = 1; i < nv; i++) assert_true(v[i] > v[i - 1]);
    long checked = 0;
    for (uint32_t hi = 0; hi < (1u << 20); hi += N / 6) {
      int n = 0;
      for (uint32_t h = hi; h < hi + N / 6 && h < (1u << 20); h++)
        for (int l = 0; l < 6; l++) in[n++] = bits_f32((h << 12) | lows[l]);
      ref->kv_quant[f][PE_F32](in, out, n, 1.0f);
      for (int i = 0; i < n; i++) {
        float y = in[i];
        unsigned want;
        unsigned sign = (f32_bits(y) >> 24) & 0x80;
        if (isnan(y)) {
          want = sign | (f == E4M3 ? 0x7f : 0x7e);
        } else {
          double a = fabs((double)y);
          if (a >= v[nv - 1]) {
            want = sign | vc[nv - 1];
          } else {
            int lo = 0, hi2 = nv - 1; /* v[lo] <= a < v[hi2] */
            while (hi2 - lo > 1) {
              int mid = (lo + hi2) / 2;
              if (v[mid] <= a) lo = mid;
              else hi2 = mid;
            }
            double dl = a - v[lo], dh = v[hi2] - a;
            unsigned c = dl < dh ? vc[lo] : dh < dl ? vc[hi2] : (vc[lo] & 1) ? vc[hi2] : vc[lo];
            want = sign | c;
          }
        }
        if (out[i] != want)
          fail_msg("format %d: %a (0x%08x) -> 0x%02x, want 0x%02x", f, (double)y, f32_bits(y),
                   out[i], want);
        checked++;
      }
    }
    assert_int_equal(checked, 6L << 20);
    /* the slow reference on a sample, so the fast one is checked too */
    for (int i = 0; i < 4096; i++) {
      float y = bits_f32((uint32_t)rnd());
      uint8_t o;
      ref->kv_quant[f][PE_F32](&y, &o, 1, 1.0f);
      assert_int_equal(o, ref_encode(f, y));
    }
  }
}

/* A scale: stored = RNE(x / scale) with the float32 divide. */
static void test_fp8_scale(void **state) {
  (void)state;
  const float scales[] = {0.0173f, 3.5f, 1e-3f, 1e3f, 0x1p-20f};
  for (int f = E4M3; f <= E5M2; f++)
    for (size_t s = 0; s < sizeof scales / sizeof scales[0]; s++) {
      float x[512], back[512];
      uint8_t q[512];
      for (int i = 0; i < 512; i++)
        x[i] = ldexpf((float)(int64_t)(rnd() % 2000001) / 1e6f - 1.0f, (int)(rnd() % 24) - 12) *
               scales[s];
      ref->kv_quant[f][PE_F32](x, q, 512, scales[s]);
      ref->kv_dequant[f][PE_F32](q, back, 512, scales[s]);
      for (int i = 0; i < 512; i++) {
        assert_int_equal(q[i], ref_encode(f, x[i] / scales[s]));
        float want = (float)(code_value(f, q[i]) * (double)scales[s]); /* exact product, one rounding */
        assert_int_equal(f32_bits(back[i]), f32_bits(want));
      }
    }
}

/* Block kinds: random magnitudes, all zero, +-amax ties (both signs of the
 * maximum), halfway cases (amax 127: d = 1, values k + 0.5), tiny (d in f16
 * subnormals or 0), huge (d overflows f16). */
static void fill_q8_block(float *x, int kind) {
  int e = (int)(rnd() % 40) - 20;
  for (int j = 0; j < 32; j++) x[j] = ldexpf((float)((int64_t)(rnd() % 2000001) - 1000000) / 1e6f, e);
  switch (kind) {
    case 1: memset(x, 0, 32 * sizeof(float)); x[rnd() % 32] = -0.0f; break;
    case 2: {
      float a = ldexpf(1.0f + (float)(rnd() % 1000) / 1000.0f, e);
      x[rnd() % 32] = a;
      x[rnd() % 32] = -a;
      break;
    }
    case 3:
      for (int j = 0; j < 32; j++) x[j] = (float)((int)(rnd() % 254) - 127) + 0.5f;
      x[rnd() % 32] = 127.0f;
      x[rnd() % 32] = -126.5f;
      break;
    case 4:
      for (int j = 0; j < 32; j++) x[j] = ldexpf(x[j], -20 - (int)(rnd() % 4));
      break;
    case 5:
      for (int j = 0; j < 32; j++) x[j] = x[j] * 1e7f;
      x[3] = 9e6f;
      break;
    default: break;
  }
}

static void test_q8_0_ggml(void **state) {
  (void)state;
  enum { K = 32 * 16 };
  float x[K], got[K], want[K];
  uint8_t q[K / 32 * 34], g[K / 32 * 34];
  for (int it = 0; it < 2000; it++) {
    for (int b = 0; b < K / 32; b++) fill_q8_block(x + 32 * b, (int)(rnd() % 6));
    ref->kv_quant[Q8_0][PE_F32](x, q, K, 0.0f);
    ggml_quantize_row_q8_0_ref(x, g, K);
    if (memcmp(q, g, sizeof q)) {
      for (size_t i = 0; i < sizeof q; i++)
        if (q[i] != g[i]) fail_msg("iteration %d: byte %zu (block %zu) 0x%02x, ggml 0x%02x", it, i, i / 34, q[i], g[i]);
    }
    ref->kv_dequant[Q8_0][PE_F32](q, got, K, 0.0f);
    ggml_dequantize_row_q8_0(g, want, K);
    assert_memory_equal(got, want, sizeof got);
  }
  /* the stated ties: amax 127 -> d = 1, 2.5 -> 3, -3.5 -> -4, -127 -> -127 */
  for (int j = 0; j < 32; j++) x[j] = 0.0f;
  x[0] = 127.0f, x[1] = 2.5f, x[2] = -3.5f, x[3] = -127.0f, x[4] = 0.5f, x[5] = -0.5f;
  ref->kv_quant[Q8_0][PE_F32](x, q, 32, 0.0f);
  assert_int_equal(q[0] | q[1] << 8, 0x3c00); /* f16 1.0 */
  assert_int_equal((int8_t)q[2], 127);
  assert_int_equal((int8_t)q[3], 3);
  assert_int_equal((int8_t)q[4], -4);
  assert_int_equal((int8_t)q[5], -127);
  assert_int_equal((int8_t)q[6], 1);
  assert_int_equal((int8_t)q[7], -1);
  /* an all-zero block: d 0, qs 0 */
  memset(x, 0, 32 * sizeof(float));
  ref->kv_quant[Q8_0][PE_F32](x, q, 32, 0.0f);
  for (int i = 0; i < 34; i++) assert_int_equal(q[i], 0);
}

/* What the header defines where ggml's C is not defined: a block with a NaN
 * or an Inf is d = 0x7e00 (f16 NaN), qs 0; a non-finite x*id (1/d
 * overflowing for amax below 127 * 2^-128) gives qs 0. */
static void test_q8_0_nonfinite(void **state) {
  (void)state;
  float x[32];
  uint8_t q[34];
  float specials[] = {NAN, -NAN, INFINITY, -INFINITY};
  for (int s = 0; s < 4; s++) {
    for (int j = 0; j < 32; j++) x[j] = (float)j - 16.0f;
    x[(s * 7) % 32] = specials[s];
    ref->kv_quant[Q8_0][PE_F32](x, q, 32, 0.0f);
    assert_int_equal(q[0] | q[1] << 8, 0x7e00);
    for (int j = 0; j < 32; j++) assert_int_equal(q[2 + j], 0);
  }
  /* amax = 2^-140: d = 2^-140/127 > 0, 1/d = Inf: qs 0, d f16 0 */
  for (int j = 0; j < 32; j++) x[j] = 0x1p-140f * (float)(j % 3);
  x[5] = 0x1p-140f;
  ref->kv_quant[Q8_0][PE_F32](x, q, 32, 0.0f);
  for (int i = 0; i < 34; i++) assert_int_equal(q[i], 0);
}

/* ---- every ISA vs scalar ---- */

/* float32 patterns: every class, mostly values an fp8 can hold. */
static uint32_t gen_f32(void) {
  static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                     0x7fc00000u, 0xffc12345u, 0x7f800001u, 0x00000001u,
                                     0x807fffffu, 0x43e00000u, 0x43e80000u, 0x43f00000u,
                                     0x47600000u, 0x47700000u, 0x3b000000u, 0x37800000u};
  uint32_t r = (uint32_t)rnd();
  switch (rnd() % 8) {
    case 0: return r;
    case 1: return special[rnd() % (sizeof special / sizeof special[0])];
    case 2: return r & 0x807fffffu;
    default: return (r & 0x807fffffu) | ((100u + (uint32_t)(rnd() % 48)) << 23);
  }
}
static size_t esz(int dt) { return dt == PE_F32 ? 4 : 2; }

static void fill_dt(void *p, int dt, int64_t n, int finite_blocks) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t u = gen_f32();
    if (finite_blocks) u = (u & 0x807fffffu) | ((110u + (uint32_t)(rnd() % 30)) << 23);
    if (dt == PE_F32) {
      memcpy((char *)p + 4 * i, &u, 4);
    } else {
      uint16_t h = dt == PE_F16 ? (uint16_t)(((u >> 16) & 0x8000u) | (rnd() & 0x7fffu))
                                : (uint16_t)(u >> 16);
      memcpy((char *)p + 2 * i, &h, 2);
    }
  }
}

static void test_kernels_match_scalar(void **state) {
  const pe_isa *isa = isa_or_skip(test_path(state));
  enum { MAXN = 32 * 12, G = 64 };
  /* element-aligned: the kernels' float/half rows are (the API requires it) */
  static _Alignas(64) uint8_t src[MAXN * 4 + G], a[MAXN * 4 + G], b[MAXN * 4 + G];
  /* powers of two (the vector kernels multiply by the exact reciprocal
   * there) from the smallest normal to the largest, whose quotients of
   * random bits reach every subnormal, overflow and zero case; and others */
  const float scales[] = {1.0f, 0.0173f, 3.5f, 0x1p-12f, 0x1p-126f, 0x1p127f, 0.5f, 0x1p100f,
                          0x1p-100f, 448.0f / 3.0f};
  const int n_scales = (int)(sizeof scales / sizeof scales[0]);
  for (int f = E4M3; f <= Q8_0; f++)
    for (int dt = PE_F32; dt <= PE_BF16; dt++)
      for (int it = 0; it < 1000; it++) {
        int64_t n = f == Q8_0 ? 32 * (1 + (int64_t)(rnd() % 12)) : 1 + (int64_t)(rnd() % MAXN);
        float sc = scales[rnd() % (uint64_t)n_scales];
        int off = (int)(rnd() % 4); /* unaligned starts */
        fill_dt(src + 4 * off, dt, n, f == Q8_0 && rnd() % 4 != 0);
        /* quantize */
        int64_t qbytes = f == Q8_0 ? n / 32 * 34 : n;
        memset(a, 0xa5, sizeof a);
        memset(b, 0xa5, sizeof b);
        ref->kv_quant[f][dt](src + 4 * off, a + off, n, sc);
        isa->kv_quant[f][dt](src + 4 * off, b + off, n, sc);
        if (memcmp(a, b, sizeof a)) {
          for (int64_t i = 0; i < (int64_t)sizeof a; i++)
            if (a[i] != b[i])
              fail_msg("%s kv_quant[%d][%d] n %lld: byte %lld scalar 0x%02x, %s 0x%02x",
                       isa->name, f, dt, (long long)n, (long long)(i - off), a[i], isa->name, b[i]);
        }
        for (int64_t i = qbytes + off; i < (int64_t)sizeof a; i++) assert_int_equal(b[i], 0xa5);
        /* dequantize random bytes (every code, every block bit pattern) */
        for (int64_t i = 0; i < qbytes; i++) src[off + i] = (uint8_t)rnd();
        memset(a, 0x5a, sizeof a);
        memset(b, 0x5a, sizeof b);
        const int64_t oo = off * (dt == PE_F32 ? 4 : 2); /* an element-aligned output start */
        ref->kv_dequant[f][dt](src + off, a + oo, n, sc);
        isa->kv_dequant[f][dt](src + off, b + oo, n, sc);
        if (memcmp(a, b, sizeof a)) {
          for (int64_t i = 0; i < (int64_t)sizeof a; i++)
            if (a[i] != b[i])
              fail_msg("%s kv_dequant[%d][%d] n %lld: byte %lld scalar 0x%02x, %s 0x%02x",
                       isa->name, f, dt, (long long)n, (long long)(i - oo), a[i],
                       isa->name, b[i]);
        }
        for (int64_t i = n * (int64_t)esz(dt) + oo; i < (int64_t)sizeof a; i++)
          assert_int_equal(b[i], 0x5a);
      }
  /* Q8_0 blocks whose d is an f16 subnormal or 0, whose 1/d is huge or
   * overflows (qs 0), and ties at +-amax */
  {
    static const float amaxes[] = {0x1p-140f, 0x1p-135f, 0x1p-128f, 0x1p-126f, 0x1p-20f, 1e-9f,
                                   127.0f, 9e6f};
    float x[32 * 8];
    uint8_t qa[34 * 8], qv[34 * 8];
    for (int r = 0; r < 50; r++) {
      for (int k = 0; k < 8; k++) {
        for (int j = 0; j < 32; j++)
          x[32 * k + j] = amaxes[k] * (float)((int)(rnd() % 255) - 127) / 127.0f;
        x[32 * k + (int)(rnd() % 32)] = amaxes[k];
        x[32 * k + (int)(rnd() % 32)] = -amaxes[k];
      }
      ref->kv_quant[Q8_0][PE_F32](x, qa, 32 * 8, 0.0f);
      isa->kv_quant[Q8_0][PE_F32](x, qv, 32 * 8, 0.0f);
      assert_memory_equal(qa, qv, sizeof qa);
    }
  }
  /* Q8_0 rows of mixed blocks (the vector paths quantize four blocks at
   * once and widen four d at once): each block normal, all zero, holding a
   * NaN or an Inf, d an f16 subnormal, 1/d overflowing (qs 0), d
   * overflowing f16, or +-amax tied, in every order, 1 to 11 blocks (the
   * short last group); every source dtype, and the rows read back */
  {
    enum { NB = 11 };
    static const float kinds_amax[] = {1.0f, 0.0f, 1.0f, 1.0f, 0x1p-128f, 0x1p-140f, 9e6f, 3.5f};
    float x[32 * NB];
    uint8_t xs[32 * NB * 4];
    uint8_t qa[34 * NB], qv[34 * NB];
    for (int r = 0; r < 400; r++) {
      int nb = 1 + (int)(rnd() % NB);
      for (int k = 0; k < nb; k++) {
        int kind = (int)(rnd() % 8);
        float am = kinds_amax[kind];
        for (int j = 0; j < 32; j++)
          x[32 * k + j] = am * (float)((int)(rnd() % 255) - 127) / 127.0f;
        if (kind == 2) x[32 * k + (int)(rnd() % 32)] = rnd() % 2 ? NAN : -NAN;
        if (kind == 3) x[32 * k + (int)(rnd() % 32)] = rnd() % 2 ? INFINITY : -INFINITY;
        if (kind == 7) {
          x[32 * k + (int)(rnd() % 32)] = am;
          x[32 * k + (int)(rnd() % 32)] = -am;
        }
      }
      int n = 32 * nb;
      for (int dt = PE_F32; dt <= PE_BF16; dt++) {
        for (int i = 0; i < n; i++) {
          uint32_t u = f32_bits(x[i]);
          if (dt == PE_F32) {
            memcpy(xs + 4 * i, &u, 4);
          } else {
            /* bf16: the top half; f16: the value's f16 (NaN/Inf kept) */
            uint16_t h = dt == PE_BF16 ? (uint16_t)(u >> 16) : ggml_fp32_to_fp16(x[i]);
            memcpy(xs + 2 * i, &h, 2);
          }
        }
        ref->kv_quant[Q8_0][dt](xs, qa, n, 0.0f);
        isa->kv_quant[Q8_0][dt](xs, qv, n, 0.0f);
        if (memcmp(qa, qv, (size_t)(34 * nb)))
          fail_msg("%s q8_0 mixed blocks dtype %d, %d blocks: bytes differ", isa->name, dt, nb);
        float ya[32 * NB], yv[32 * NB];
        ref->kv_dequant[Q8_0][PE_F32](qa, ya, n, 0.0f);
        isa->kv_dequant[Q8_0][PE_F32](qa, yv, n, 0.0f);
        assert_memory_equal(ya, yv, (size_t)n * 4);
      }
    }
  }
  /* the FP8 float classes through the vector path too */
  for (int f = E4M3; f <= E5M2; f++) {
    enum { N = 6 * 4096 };
    static float in[N];
    static uint8_t qa[N], qb[N];
    for (uint32_t hi = 0; hi < (1u << 20); hi += 4096) {
      int n = 0;
      for (uint32_t h = hi; h < hi + 4096; h++)
        for (int l = 0; l < 6; l++) in[n++] = bits_f32((h << 12) | lows[l]);
      ref->kv_quant[f][PE_F32](in, qa, n, 1.0f);
      isa->kv_quant[f][PE_F32](in, qb, n, 1.0f);
      assert_memory_equal(qa, qb, (size_t)n);
    }
  }
}

/* A float of a random class: zero, subnormal, normal of any binade, the
 * largest finite, Inf or NaN (payload random), either sign. */
static float any_class(void) {
  uint32_t sign = (uint32_t)(rnd() & 1) << 31, m = (uint32_t)rnd() & 0x7fffffu;
  switch (rnd() % 8) {
    case 0: return bits_f32(sign);
    case 1: return bits_f32(sign | (m ? m : 1));
    case 2: return bits_f32(sign | 0x7f7fffffu);
    case 3: return bits_f32(sign | 0x7f800000u);
    case 4: return bits_f32(sign | 0x7f800000u | (m ? m : 1)); /* NaN */
    default: return bits_f32(sign | (uint32_t)(1 + rnd() % 254) << 23 | m);
  }
}

/* n values for an amax: a third of rows of any class, a third of ordinary
 * values, a third ordinary but for one of any class. */
static void amax_row(float *x, int64_t n) {
  int mostly = (int)(rnd() % 3);
  for (int64_t i = 0; i < n; i++)
    x[i] = mostly ? (float)((double)(int64_t)(rnd() % 2001 - 1000) * 1e-3) : any_class();
  if (mostly == 2 && n) x[rnd() % (uint64_t)n] = any_class();
}

/* The amax the definition gives: the largest |x_i| from +0, every NaN
 * passed over - CUDA's fmaxf in vLLM's kernels, which returns the other
 * operand of any NaN. (glibc's fmaxf returns a NaN for a signaling one, so
 * it is not the definition.) */
static float amax_def(const float *x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; i++) {
    float a = fabsf(x[i]);
    if (!isnan(a) && a > m) m = a;
  }
  return m;
}

static void test_amax_scalar(void **state) {
  (void)state;
  enum { MAXN = 600 };
  static float x[MAXN];
  for (int it = 0; it < 20000; it++) {
    int64_t n = (int64_t)(rnd() % MAXN);
    amax_row(x, n);
    float want = amax_def(x, n), got = ref->amax(x, n);
    if (f32_bits(got) != f32_bits(want))
      fail_msg("scalar amax of %lld values: 0x%08x, want 0x%08x", (long long)n, f32_bits(got),
               f32_bits(want));
  }
}

static void test_amax_match_scalar(void **state) {
  const pe_isa *isa = isa_or_skip(test_path(state));
  enum { MAXN = 700 };
  static _Alignas(64) float x[MAXN + 16];
  for (int it = 0; it < 20000; it++) {
    int64_t n = (int64_t)(rnd() % MAXN);
    int off = (int)(rnd() % 16); /* starts off the vector alignment */
    amax_row(x + off, n);
    if (n && rnd() % 4 == 0) /* the largest in the tail, or in the last full vector */
      x[off + n - 1 - (int64_t)(rnd() % (n < 20 ? (uint64_t)n : 20))] = 3e38f;
    float a = ref->amax(x + off, n), b = isa->amax(x + off, n);
    if (f32_bits(a) != f32_bits(b))
      fail_msg("%s amax of %lld values at +%d: 0x%08x, scalar 0x%08x", isa->name, (long long)n,
               off, f32_bits(b), f32_bits(a));
  }
}

/* isa.h's stream_copy on one path: the bytes memcpy would copy, at every
 * start and end relative to a 64-byte line (partial lines at both ends,
 * none, a range within one line, empty), and not one byte outside them. */
static void stream_copy_check(const pe_isa *isa) {
  enum { N = 1024 };
  static _Alignas(64) unsigned char src[N], dst[N], want[N];
  for (int i = 0; i < N; i++) src[i] = (unsigned char)(rnd() >> 24);
  for (int it = 0; it < 20000; it++) {
    int64_t d = (int64_t)(rnd() % 192), s = (int64_t)(rnd() % 192);
    int64_t n = (int64_t)(rnd() % 4 == 0 ? rnd() % 130 : rnd() % (N - 192));
    unsigned char fill = (unsigned char)rnd();
    memset(dst, fill, N);
    memset(want, fill, N);
    memcpy(want + d, src + s, (size_t)n);
    isa->stream_copy(dst + d, src + s, n);
    if (memcmp(dst, want, N)) {
      int64_t at = 0;
      while (dst[at] == want[at]) at++;
      fail_msg("%s stream_copy of %lld bytes to +%lld from +%lld: byte %lld is 0x%02x, want 0x%02x",
               isa->name, (long long)n, (long long)d, (long long)s, (long long)at, dst[at], want[at]);
    }
  }
}
static void test_stream_copy_scalar(void **state) {
  (void)state;
  stream_copy_check(ref);
}
static void test_stream_copy(void **state) { stream_copy_check(isa_or_skip(test_path(state))); }

int main(void) {
  static const path_check checks[] = {{"kv_quant", test_kernels_match_scalar},
                                      {"amax", test_amax_match_scalar},
                                      {"stream_copy", test_stream_copy}};
  static char names[3 * PE_TEST_N_SIMD_PATHS][48];
  struct CMUnitTest tests[7 + 3 * PE_TEST_N_SIMD_PATHS] = {
      cmocka_unit_test(test_fp8_every_code), cmocka_unit_test(test_fp8_float_classes),
      cmocka_unit_test(test_fp8_scale),      cmocka_unit_test(test_q8_0_ggml),
      cmocka_unit_test(test_q8_0_nonfinite), cmocka_unit_test(test_amax_scalar),
      cmocka_unit_test(test_stream_copy_scalar),
  };
  size_t n = 7 + add_path_tests(tests + 7, names, checks, 3);
  return _cmocka_run_group_tests("kv_quant", tests, n, NULL, NULL);
}
