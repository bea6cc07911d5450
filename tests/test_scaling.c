/* test_scaling.c - every pe_rope_scaling type against the formulas of
 * HuggingFace transformers' modeling_rope_utils.py (the _compute_*_parameters
 * function of each rope_type), evaluated here in
 * float64 and written independently of src/rope_scaling.c, plus the numbers
 * published for real models (DeepSeek-V3's softmax factor 1.87385, Phi-3's
 * attention factor 1.190238, Llama-3's frequency bands).
 *
 * Frequencies: the library returns its double frequencies rounded to float32;
 * the reference is the float64 formula. Two float64 evaluations of the same
 * formula differ by a few double ulps, which can move the float32 rounding by
 * one step, so the check is |lib - ref| <= 1 float32 ulp of ref. A wrong
 * formula (a wrong band, a factor applied to the wrong index, the wrong
 * exponent denominator) is off by far more than one ulp.
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

#include "test_util.h"

#define PI_D 3.14159265358979323846
#define TWO_PI (2.0 * PI_D)
#define MAXH 512

/* ---------------------------------------------------------------------- */
/* helpers                                                                */
/* ---------------------------------------------------------------------- */

/* A table of 64 rows, NeoX, the rest pe_rope_params_init's. */
static pe_rope_params base_params(int head_dim, int rotary_dim, double base) {
  return rope_params(head_dim, rotary_dim, PE_ROPE_NEOX, base, 64);
}

/* ---------------------------------------------------------------------- */
/* default, linear, static NTK, dynamic NTK                                */
/* ---------------------------------------------------------------------- */

static void test_none(void **state) {
  (void)state;
  static const struct { int hd, rd; double base; } cfg[] = {
      {128, 0, 10000.0}, {128, 0, 500000.0}, {64, 0, 1e6}, {128, 32, 10000.0}, {96, 24, 10000.0},
      {2, 0, 10000.0}};
  for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
    pe_rope_params p = base_params(cfg[k].hd, cfg[k].rd, cfg[k].base);
    pe_rope_cache *c = new_cache(&p);
    int d = cfg[k].rd ? cfg[k].rd : cfg[k].hd;
    double ref[MAXH];
    for (int i = 0; i < d / 2; i++) ref[i] = ref_default(cfg[k].base, i, d);
    expect_inv(c, ref, d / 2, "default");
    assert_true(pe_rope_cache_attention_factor(c) == 1.0);
    assert_true(pe_rope_cache_softmax_scale(c) == 1.0);
    pe_rope_cache_destroy(c);
  }
}

static void test_linear(void **state) {
  (void)state;
  static const struct { int d; double base, s; } cfg[] = {
      {128, 10000.0, 1.0}, {128, 10000.0, 2.0}, {64, 1e6, 4.0}, {96, 10000.0, 8.0}};
  for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
    pe_rope_params p = base_params(cfg[k].d, 0, cfg[k].base);
    p.scaling = PE_ROPE_SCALING_LINEAR;
    p.factor = cfg[k].s;
    pe_rope_cache *c = new_cache(&p);
    double ref[MAXH];
    for (int i = 0; i < cfg[k].d / 2; i++) ref[i] = ref_default(cfg[k].base, i, cfg[k].d) / cfg[k].s;
    expect_inv(c, ref, cfg[k].d / 2, "linear");
    assert_true(pe_rope_cache_attention_factor(c) == 1.0);
    pe_rope_cache_destroy(c);
  }
}

static void test_ntk(void **state) {
  (void)state;
  static const struct { int hd, rd; double base, s; } cfg[] = {
      {128, 0, 10000.0, 1.0}, {128, 0, 10000.0, 2.0}, {64, 0, 500000.0, 8.0}, {128, 64, 10000.0, 4.0}};
  for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
    pe_rope_params p = base_params(cfg[k].hd, cfg[k].rd, cfg[k].base);
    p.scaling = PE_ROPE_SCALING_NTK;
    p.factor = cfg[k].s;
    pe_rope_cache *c = new_cache(&p);
    int d = cfg[k].rd ? cfg[k].rd : cfg[k].hd;
    double b2 = cfg[k].base * pow(cfg[k].s, (double)d / (double)(d - 2));
    double ref[MAXH];
    for (int i = 0; i < d / 2; i++) ref[i] = ref_default(b2, i, d);
    expect_inv(c, ref, d / 2, "ntk");
    assert_true(pe_rope_cache_attention_factor(c) == 1.0);
    pe_rope_cache_destroy(c);
  }
  /* Published check: with s = 8 and d = 128 the new base is B * 8^(64/63). */
  pe_rope_params p = base_params(128, 0, 10000.0);
  p.scaling = PE_ROPE_SCALING_NTK;
  p.factor = 8.0;
  pe_rope_cache *c = new_cache(&p);
  float got[64];
  pe_rope_cache_inv_freq(c, got);
  /* the last frequency is B'^(-126/128) */
  expect_close(got[63], pow(10000.0 * pow(8.0, 128.0 / 126.0), -126.0 / 128.0), 1e-12, "ntk last");
  pe_rope_cache_destroy(c);
}

/* HF dynamic NTK: L = max(seq_len, M), seq_len unset = M,
 * B' = B * (s*L/M - (s-1))^(d/(d-2)). M maps to original_max_positions. */
static double ref_dynamic_base(double base, double s, int64_t seq_len, int64_t m, int d) {
  double len = (double)(seq_len == 0 ? m : seq_len);
  if (len < (double)m) len = (double)m;
  return base * pow(s * len / (double)m - (s - 1.0), (double)d / (double)(d - 2));
}

static void test_dynamic(void **state) {
  (void)state;
  static const struct { int hd, rd; double base, s; int64_t m, seq; } cfg[] = {
      {128, 0, 10000.0, 2.0, 4096, 0},      /* unset: the base stays B */
      {128, 0, 10000.0, 2.0, 4096, 100},    /* clamp: shorter than M is M */
      {128, 0, 10000.0, 2.0, 4096, 4096},   /* exactly M: B */
      {128, 0, 10000.0, 2.0, 4096, 4097},   /* one past: grows */
      {128, 0, 10000.0, 2.0, 4096, 16384},  /* 4x */
      {64, 0, 500000.0, 4.0, 8192, 100000}, /* another model */
      {80, 32, 10000.0, 8.0, 2048, 65536}}; /* partial rotary: d = 32 */
  for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
    pe_rope_params p = base_params(cfg[k].hd, cfg[k].rd, cfg[k].base);
    p.scaling = PE_ROPE_SCALING_DYNAMIC;
    p.factor = cfg[k].s;
    p.original_max_positions = cfg[k].m;
    p.seq_len = cfg[k].seq;
    pe_rope_cache *c = new_cache(&p);
    int d = cfg[k].rd ? cfg[k].rd : cfg[k].hd;
    double b2 = ref_dynamic_base(cfg[k].base, cfg[k].s, cfg[k].seq, cfg[k].m, d);
    if (cfg[k].seq <= cfg[k].m) assert_true(b2 == cfg[k].base); /* the clamp */
    double ref[MAXH];
    for (int i = 0; i < d / 2; i++) ref[i] = ref_default(b2, i, d);
    expect_inv(c, ref, d / 2, "dynamic");
    assert_true(pe_rope_cache_attention_factor(c) == 1.0);
    pe_rope_cache_destroy(c);
  }
}

/* ---------------------------------------------------------------------- */
/* YaRN                                                                    */
/* ---------------------------------------------------------------------- */

static double ref_mscale(double s, double m) { return s <= 1.0 ? 1.0 : 0.1 * m * log(s) + 1.0; }

typedef struct yarn_cfg {
  int d;
  double base, s;
  int64_t m0;
  double bf, bs; /* 0 = default */
  int truncate;
  double mscale, mscale_all_dim, attn; /* attn 0 = derived */
} yarn_cfg;

/* lo and hi of the correction range as transformers' _compute_yarn_parameters (find_correction_range) writes them. */
static void ref_yarn_range(const yarn_cfg *y, double *lo, double *hi) {
  double bf = y->bf ? y->bf : 32.0, bs = y->bs ? y->bs : 1.0;
  double l = y->d * log((double)y->m0 / (bf * 2.0 * PI_D)) / (2.0 * log(y->base));
  double h = y->d * log((double)y->m0 / (bs * 2.0 * PI_D)) / (2.0 * log(y->base));
  if (y->truncate) {
    l = floor(l);
    h = ceil(h);
  }
  l = fmax(l, 0.0);
  h = fmin(h, (double)(y->d - 1));
  if (l == h) h += 0.001;
  *lo = l;
  *hi = h;
}

static void ref_yarn(const yarn_cfg *y, double *inv) {
  double lo, hi;
  ref_yarn_range(y, &lo, &hi);
  for (int i = 0; i < y->d / 2; i++) {
    double ramp = fmin(fmax(((double)i - lo) / (hi - lo), 0.0), 1.0);
    double extrap_w = 1.0 - ramp;
    double pf = pow(y->base, (double)(2 * i) / y->d);
    inv[i] = 1.0 / (y->s * pf) * (1.0 - extrap_w) + 1.0 / pf * extrap_w;
  }
}

static pe_rope_cache *make_yarn(const yarn_cfg *y) {
  pe_rope_params p = base_params(y->d, 0, y->base);
  p.scaling = PE_ROPE_SCALING_YARN;
  p.factor = y->s;
  p.original_max_positions = y->m0;
  p.beta_fast = y->bf;
  p.beta_slow = y->bs;
  p.truncate = y->truncate;
  p.mscale = y->mscale;
  p.mscale_all_dim = y->mscale_all_dim;
  p.attention_factor = y->attn;
  p.max_positions = 0;
  return new_cache(&p);
}

static void check_yarn(const yarn_cfg *y, double want_attn, double want_softmax, const char *what) {
  pe_rope_cache *c = make_yarn(y);
  double ref[MAXH];
  ref_yarn(y, ref);
  expect_inv(c, ref, y->d / 2, what);
  expect_close(pe_rope_cache_attention_factor(c), want_attn, 1e-12, what);
  expect_close(pe_rope_cache_softmax_scale(c), want_softmax, 1e-12, what);
  pe_rope_cache_destroy(c);
}

static void test_yarn_models(void **state) {
  (void)state;
  /* Qwen2.5-7B-Instruct with its model card's rope_scaling: factor 4, M0 32768. */
  yarn_cfg qwen = {128, 1e6, 4.0, 32768, 0, 0, 1, 0, 0, 0};
  check_yarn(&qwen, 0.1 * log(4.0) + 1.0, 1.0, "qwen2.5 yarn");
  expect_close(0.1 * log(4.0) + 1.0, 1.1386294361, 1e-10, "qwen2.5 mscale literal");
  /* gpt-oss-20b: factor 32, M0 4096, base 150000, truncate false. */
  yarn_cfg oss = {64, 150000.0, 32.0, 4096, 32, 1, 0, 0, 0, 0};
  check_yarn(&oss, 0.1 * log(32.0) + 1.0, 1.0, "gpt-oss yarn");
  expect_close(0.1 * log(32.0) + 1.0, 1.3465735903, 1e-10, "gpt-oss mscale literal");
  /* DeepSeek-V3: factor 40, M0 4096, mscale = mscale_all_dim = 1, rope dim 64:
   * attention factor 1, softmax multiplier mscale(40, 1)^2 = 1.87385 (published). */
  yarn_cfg ds = {64, 10000.0, 40.0, 4096, 32, 1, 1, 1.0, 1.0, 0};
  double m = ref_mscale(40.0, 1.0);
  check_yarn(&ds, 1.0, m * m, "deepseek-v3 yarn");
  pe_rope_cache *c = make_yarn(&ds);
  expect_close(pe_rope_cache_softmax_scale(c), 1.87385, 1e-5, "deepseek-v3 published softmax");
  assert_true(pe_rope_cache_attention_factor(c) == 1.0);
  pe_rope_cache_destroy(c);
}

static void test_yarn_attention(void **state) {
  (void)state;
  /* A lone mscale is ignored (HF needs both to form the ratio). */
  yarn_cfg lone = {128, 10000.0, 16.0, 4096, 0, 0, 1, 0.707, 0, 0};
  check_yarn(&lone, ref_mscale(16.0, 1.0), 1.0, "yarn lone mscale");
  /* Both set and different: ratio, and the softmax factor from mscale_all_dim. */
  yarn_cfg both = {128, 10000.0, 16.0, 4096, 0, 0, 1, 1.0, 0.8, 0};
  double m08 = ref_mscale(16.0, 0.8);
  check_yarn(&both, ref_mscale(16.0, 1.0) / m08, m08 * m08, "yarn mscale ratio");
  /* Only mscale_all_dim: attention from s alone, softmax from mscale_all_dim. */
  yarn_cfg alld = {128, 10000.0, 16.0, 4096, 0, 0, 1, 0, 0.707, 0};
  double m707 = ref_mscale(16.0, 0.707);
  check_yarn(&alld, ref_mscale(16.0, 1.0), m707 * m707, "yarn mscale_all_dim only");
  /* An explicit attention_factor wins; the softmax factor is independent of it. */
  yarn_cfg expl = {128, 10000.0, 16.0, 4096, 0, 0, 1, 1.0, 1.0, 0.25};
  double m1 = ref_mscale(16.0, 1.0);
  check_yarn(&expl, 0.25, m1 * m1, "yarn explicit attention_factor");
  /* factor 1: mscale is 1 and every frequency is the original. */
  yarn_cfg one = {128, 10000.0, 1.0, 4096, 0, 0, 1, 0, 0, 0};
  check_yarn(&one, 1.0, 1.0, "yarn factor 1");
}

static void test_yarn_range(void **state) {
  (void)state;
  /* Non-default betas, untruncated and truncated, odd-looking dims. */
  yarn_cfg a = {96, 10000.0, 8.0, 2048, 16, 2, 0, 0, 0, 0};
  check_yarn(&a, ref_mscale(8.0, 1.0), 1.0, "yarn betas 16/2 untruncated");
  yarn_cfg b = {96, 10000.0, 8.0, 2048, 16, 2, 1, 0, 0, 0};
  check_yarn(&b, ref_mscale(8.0, 1.0), 1.0, "yarn betas 16/2 truncated");
  /* A correction range past d/2: HF clamps hi to d-1 (not d/2-1), so with
   * M0 = 10^6 and B = 10^4 the ramp ends at 42 and never reaches index 31. */
  yarn_cfg wide = {64, 10000.0, 16.0, 1000000, 0, 0, 1, 0, 0, 0};
  double wlo, whi;
  ref_yarn_range(&wide, &wlo, &whi);
  assert_true(whi > 31.0 && whi <= 63.0);
  check_yarn(&wide, ref_mscale(16.0, 1.0), 1.0, "yarn range past d/2");
  /* The bands: i <= lo keeps the original frequency, i >= hi is divided by s. */
  yarn_cfg q = {128, 1e6, 4.0, 32768, 0, 0, 1, 0, 0, 0};
  double lo, hi;
  ref_yarn_range(&q, &lo, &hi);
  assert_true(lo >= 1.0 && hi <= 63.0 && lo < hi);
  pe_rope_cache *c = make_yarn(&q);
  float got[64];
  pe_rope_cache_inv_freq(c, got);
  for (int i = 0; i < 64; i++) {
    double orig = ref_default(1e6, i, 128);
    if (i <= lo) expect_close(got[i], orig, ulp_f32(orig), "yarn band: original");
    if (i >= hi) expect_close(got[i], orig / 4.0, ulp_f32(orig / 4.0), "yarn band: interpolated");
  }
  pe_rope_cache_destroy(c);
  /* lo == hi: with M0 = 5 both correction dims are negative, floor/clamp give
   * lo = 0 and ceil gives hi = 0, so HF widens hi to 0.001: index 0 keeps its
   * frequency and every other index is divided by s. */
  yarn_cfg e = {64, 10000.0, 4.0, 5, 0, 0, 1, 0, 0, 0};
  ref_yarn_range(&e, &lo, &hi);
  assert_true(lo == 0.0 && hi == 0.001);
  check_yarn(&e, ref_mscale(4.0, 1.0), 1.0, "yarn lo == hi");
  /* beta_fast == beta_slow (Kimi-K2: 1 and 1, rope dim 64, base 50000, M0
   * 4096, factor 32): one correction dim, 64 ln(4096 / 2pi) / (2 ln 50000) =
   * 19.16, whose floor and ceil make the range [19, 20]: a one-step ramp,
   * indices <= 19 original, >= 20 divided by 32. transformers computes it
   * (it only warns about the order), and so must the library. */
  yarn_cfg kimi = {64, 50000.0, 32.0, 4096, 1, 1, 1, 1.0, 1.0, 0};
  ref_yarn_range(&kimi, &lo, &hi);
  assert_true(lo == 19.0 && hi == 20.0);
  double mk = ref_mscale(32.0, 1.0);
  check_yarn(&kimi, 1.0, mk * mk, "yarn beta_fast == beta_slow (Kimi-K2)");
  c = make_yarn(&kimi);
  pe_rope_cache_inv_freq(c, got);
  for (int i = 0; i < 32; i++) {
    double orig = ref_default(50000.0, i, 64), want = i <= 19 ? orig : orig / 32.0;
    expect_close(got[i], want, ulp_f32(want), "kimi step ramp");
  }
  pe_rope_cache_destroy(c);
  /* Untruncated equal betas: lo == hi exactly, so the 0.001 guard decides. */
  yarn_cfg eq = {64, 50000.0, 32.0, 4096, 1, 1, 0, 0, 0, 0};
  ref_yarn_range(&eq, &lo, &hi);
  assert_true(hi - lo > 0.0009 && hi - lo < 0.0011);
  check_yarn(&eq, ref_mscale(32.0, 1.0), 1.0, "yarn equal betas untruncated");
  /* beta_fast < beta_slow (1 and 2; the default 32 against 40): lo > hi, the
   * ramp's slope is negative, computed as transformers does. */
  yarn_cfg rev = {64, 10000.0, 4.0, 4096, 1, 2, 1, 0, 0, 0};
  ref_yarn_range(&rev, &lo, &hi);
  assert_true(lo > hi);
  check_yarn(&rev, ref_mscale(4.0, 1.0), 1.0, "yarn beta_fast 1 < beta_slow 2");
  yarn_cfg rev2 = {128, 10000.0, 4.0, 4096, 0, 40, 1, 0, 0, 0};
  check_yarn(&rev2, ref_mscale(4.0, 1.0), 1.0, "yarn beta_slow 40 > default beta_fast 32");
  c = make_yarn(&e);
  pe_rope_cache_inv_freq(c, got);
  expect_close(got[0], 1.0, 0.0, "yarn lo == hi: index 0");
  for (int i = 1; i < 32; i++)
    expect_close(got[i], ref_default(10000.0, i, 64) / 4.0, ulp_f32(ref_default(10000.0, i, 64) / 4.0),
                 "yarn lo == hi: index >= 1");
  pe_rope_cache_destroy(c);
}

/* ---------------------------------------------------------------------- */
/* LongRoPE                                                                */
/* ---------------------------------------------------------------------- */

static float lr_short[48], lr_long[48];

static void fill_longrope_factors(void) {
  for (int i = 0; i < 48; i++) {
    lr_short[i] = 1.0f + 0.05f * (float)i;
    lr_long[i] = 1.0f + 1.3f * (float)i;
  }
}

static pe_rope_cache *make_longrope(int64_t seq_len, double factor, double attn) {
  pe_rope_params p = base_params(96, 0, 10000.0);
  p.scaling = PE_ROPE_SCALING_LONGROPE;
  p.factor = factor;
  p.original_max_positions = 4096;
  p.seq_len = seq_len;
  p.short_factor = lr_short;
  p.long_factor = lr_long;
  p.attention_factor = attn;
  p.max_positions = 0; /* on the fly: any position (re-rotation tests) */
  return new_cache(&p);
}

static void test_longrope(void **state) {
  (void)state;
  fill_longrope_factors();
  /* Phi-3-mini-128k geometry: d = 96, M0 = 4096, s = 131072/4096 = 32. */
  static const struct { int64_t seq; int use_long; } cases[] = {
      {0, 0}, {1, 0}, {4095, 0}, {4096, 0} /* == M0: still short (strict) */, {4097, 1}, {131072, 1}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    pe_rope_cache *c = make_longrope(cases[k].seq, 32.0, 0.0);
    const float *ext = cases[k].use_long ? lr_long : lr_short;
    double ref[48];
    for (int i = 0; i < 48; i++) ref[i] = 1.0 / ((double)ext[i] * pow(10000.0, (double)(2 * i) / 96));
    expect_inv(c, ref, 48, cases[k].use_long ? "longrope long" : "longrope short");
    /* The attention factor is the same for short and long (HF keeps the init value). */
    double a = sqrt(1.0 + log(32.0) / log(4096.0));
    expect_close(pe_rope_cache_attention_factor(c), a, 1e-12, "longrope attention");
    expect_close(pe_rope_cache_attention_factor(c), 1.190238, 1e-6, "phi-3 published 1.190238");
    assert_true(pe_rope_cache_softmax_scale(c) == 1.0);
    pe_rope_cache_destroy(c);
  }
  /* s = 1: attention factor 1; another s: the formula. */
  pe_rope_cache *c = make_longrope(0, 1.0, 0.0);
  assert_true(pe_rope_cache_attention_factor(c) == 1.0);
  pe_rope_cache_destroy(c);
  c = make_longrope(0, 16.0, 0.0);
  expect_close(pe_rope_cache_attention_factor(c), sqrt(1.0 + log(16.0) / log(4096.0)), 1e-12,
               "longrope s=16");
  pe_rope_cache_destroy(c);
  /* Explicit attention_factor wins. */
  c = make_longrope(8192, 32.0, 1.5);
  assert_true(pe_rope_cache_attention_factor(c) == 1.5);
  pe_rope_cache_destroy(c);
}

/* ---------------------------------------------------------------------- */
/* Llama 3                                                                 */
/* ---------------------------------------------------------------------- */

static double ref_llama3(double base, int i, int d, double s, double m0, double lo, double hi) {
  double f = ref_default(base, i, d);
  double lam = TWO_PI / f;
  if (lam < m0 / hi) return f;                 /* high frequency: unchanged */
  if (lam > m0 / lo) return f / s;             /* low frequency: interpolated */
  double sm = (m0 / lam - lo) / (hi - lo);     /* medium, bounds inclusive */
  return (1.0 - sm) * f / s + sm * f;
}

static pe_rope_cache *make_llama3(int d, double base, double s, int64_t m0, double lo, double hi) {
  pe_rope_params p = base_params(d, 0, base);
  p.scaling = PE_ROPE_SCALING_LLAMA3;
  p.factor = s;
  p.original_max_positions = m0;
  p.low_freq_factor = lo;
  p.high_freq_factor = hi;
  return new_cache(&p);
}

static void test_llama3(void **state) {
  (void)state;
  static const struct { int d; double base, s; int64_t m0; double lo, hi; } cfg[] = {
      {128, 500000.0, 8.0, 8192, 1.0, 4.0},   /* Llama-3.1 */
      {64, 500000.0, 32.0, 8192, 1.0, 4.0},   /* Llama-3.2 1B */
      {128, 10000.0, 4.0, 2048, 2.0, 8.0}};   /* other band edges */
  for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
    pe_rope_cache *c = make_llama3(cfg[k].d, cfg[k].base, cfg[k].s, cfg[k].m0, cfg[k].lo, cfg[k].hi);
    double ref[MAXH];
    for (int i = 0; i < cfg[k].d / 2; i++)
      ref[i] = ref_llama3(cfg[k].base, i, cfg[k].d, cfg[k].s, (double)cfg[k].m0, cfg[k].lo, cfg[k].hi);
    expect_inv(c, ref, cfg[k].d / 2, "llama3");
    assert_true(pe_rope_cache_attention_factor(c) == 1.0);
    pe_rope_cache_destroy(c);
  }
  /* transformers' _compute_llama3_parameters: d = 128, B = 5e5, M0 = 8192, low 1, high 4, s = 8:
   * i <= 28 unchanged, 29..34 smoothed (strictly between), >= 35 divided by 8. */
  pe_rope_cache *c = make_llama3(128, 500000.0, 8.0, 8192, 1.0, 4.0);
  float got[64];
  pe_rope_cache_inv_freq(c, got);
  for (int i = 0; i < 64; i++) {
    double f = ref_default(500000.0, i, 128);
    if (i <= 28) {
      expect_close(got[i], f, ulp_f32(f), "llama3 high band");
    } else if (i <= 34) {
      if (!((double)got[i] < f * (1 - 1e-6) && (double)got[i] > f / 8.0 * (1 + 1e-6)))
        fail_msg("llama3 index %d = %g is not strictly between %g and %g", i, (double)got[i], f / 8, f);
    } else {
      expect_close(got[i], f / 8.0, ulp_f32(f / 8.0), "llama3 low band");
    }
  }
  pe_rope_cache_destroy(c);
}

/* ---------------------------------------------------------------------- */
/* proportional, custom                                                   */
/* ---------------------------------------------------------------------- */

static void test_proportional(void **state) {
  (void)state;
  static const struct { int hd, rd; double base, s; } cfg[] = {
      {256, 0, 1e6, 1.0}, {256, 0, 1e6, 8.0}, {256, 64, 1e6, 1.0}, {128, 32, 10000.0, 2.0}};
  for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
    pe_rope_params p = base_params(cfg[k].hd, cfg[k].rd, cfg[k].base);
    p.scaling = PE_ROPE_SCALING_PROPORTIONAL;
    p.factor = cfg[k].s;
    pe_rope_cache *c = new_cache(&p);
    int d = cfg[k].rd ? cfg[k].rd : cfg[k].hd;
    double ref[MAXH];
    /* HF proportional: the exponent denominator is head_dim, whatever is rotated. */
    for (int i = 0; i < d / 2; i++) ref[i] = ref_default(cfg[k].base, i, cfg[k].hd) / cfg[k].s;
    expect_inv(c, ref, d / 2, "proportional");
    assert_true(pe_rope_cache_attention_factor(c) == 1.0);
    pe_rope_cache_destroy(c);
  }
}

static void test_custom(void **state) {
  (void)state;
  double f[32];
  for (int i = 0; i < 32; i++) f[i] = i == 31 ? 0.0 : 1.0 / (1.0 + i * i); /* 0 allowed: identity pair */
  pe_rope_params p = base_params(64, 0, 10000.0);
  p.scaling = PE_ROPE_SCALING_CUSTOM;
  p.inv_freq = f;
  pe_rope_cache *c = new_cache(&p);
  expect_inv(c, f, 32, "custom");
  f[0] = 99.0; /* the cache has its own copy */
  float got[32];
  pe_rope_cache_inv_freq(c, got);
  assert_true(got[0] == 1.0f);
  float cs[32], sn[32];
  assert_int_equal(pe_rope_cache_cos_sin(c, 63, cs, sn), PE_OK);
  assert_true(cs[31] == 1.0f && sn[31] == 0.0f);
  pe_rope_cache_destroy(c);
}

/* attention_factor multiplies the stored cos and sin: at position 0 the row
 * is cos = a, sin = 0 for every frequency, table or on the fly. */
static void test_attention_factor_in_table(void **state) {
  (void)state;
  yarn_cfg q = {128, 1e6, 4.0, 32768, 0, 0, 1, 0, 0, 0};
  for (int onfly = 0; onfly < 2; onfly++) {
    pe_rope_params p = base_params(128, 0, 1e6);
    p.scaling = PE_ROPE_SCALING_YARN;
    p.factor = q.s;
    p.original_max_positions = q.m0;
    p.max_positions = onfly ? 0 : 16;
    pe_rope_cache *c = new_cache(&p);
    float cs[64], sn[64];
    assert_int_equal(pe_rope_cache_cos_sin(c, 0, cs, sn), PE_OK);
    float a = (float)(0.1 * log(4.0) + 1.0);
    for (int i = 0; i < 64; i++) {
      assert_true(cs[i] == a);
      assert_true(sn[i] == 0.0f);
    }
    /* position 1, frequency 0 (inv 1 for every scheme): a*cos(1), a*sin(1) */
    assert_int_equal(pe_rope_cache_cos_sin(c, 1, cs, sn), PE_OK);
    expect_close(cs[0], (double)a * cos(1.0), 3e-7, "a*cos(1)");
    expect_close(sn[0], (double)a * sin(1.0), 3e-7, "a*sin(1)");
    pe_rope_cache_destroy(c);
  }
  /* The smallest original_max_positions each type takes: 2 for longrope
   * (log M0 divides), 1 for yarn and llama3 (refused below, test_errors). */
  {
    fill_longrope_factors();
    pe_rope_params p = base_params(96, 0, 10000.0);
    p.scaling = PE_ROPE_SCALING_LONGROPE;
    p.factor = 32;
    p.original_max_positions = 2;
    p.short_factor = lr_short;
    p.long_factor = lr_long;
    pe_rope_cache_destroy(new_cache(&p));
    static const pe_rope_scaling one[2] = {PE_ROPE_SCALING_YARN, PE_ROPE_SCALING_LLAMA3};
    for (int k = 0; k < 2; k++) {
      p = base_params(96, 0, 10000.0);
      p.scaling = one[k];
      p.factor = 4;
      p.original_max_positions = 1;
      pe_rope_cache_destroy(new_cache(&p));
    }
  }
  /* The largest attention factor taken (1e31 is refused, test_errors). */
  for (int onfly = 0; onfly < 2; onfly++) {
    pe_rope_params p = base_params(128, 0, 1e6);
    p.attention_factor = 1e30;
    p.max_positions = onfly ? 0 : 16;
    pe_rope_cache *c = new_cache(&p);
    float cs[64], sn[64];
    assert_int_equal(pe_rope_cache_cos_sin(c, 0, cs, sn), PE_OK);
    for (int i = 0; i < 64; i++) assert_true(cs[i] == (float)1e30 && sn[i] == 0.0f);
    pe_rope_cache_destroy(c);
  }
}

/* ---------------------------------------------------------------------- */
/* errors                                                                  */
/* ---------------------------------------------------------------------- */

typedef void (*mutate_fn)(pe_rope_params *p);

static double nan_d(void) { return nan(""); }
static float bad_short[48], bad_long[48];
static double bad_inv[64];

#define M(name, body) \
  static void name(pe_rope_params *p) { body; }
M(linear_factor_small, p->scaling = PE_ROPE_SCALING_LINEAR; p->factor = 0.5)
M(linear_factor_nan, p->scaling = PE_ROPE_SCALING_LINEAR; p->factor = nan_d())
M(ntk_factor_small, p->scaling = PE_ROPE_SCALING_NTK; p->factor = 0.9)
M(ntk_dim2, p->scaling = PE_ROPE_SCALING_NTK; p->factor = 2; p->rotary_dim = 2)
M(dyn_factor_inf, p->scaling = PE_ROPE_SCALING_DYNAMIC; p->factor = INFINITY; p->original_max_positions = 4096)
M(dyn_no_m, p->scaling = PE_ROPE_SCALING_DYNAMIC; p->factor = 2)
M(dyn_neg_seq, p->scaling = PE_ROPE_SCALING_DYNAMIC; p->factor = 2; p->original_max_positions = 4096; p->seq_len = -1)
M(dyn_dim2, p->scaling = PE_ROPE_SCALING_DYNAMIC; p->factor = 2; p->original_max_positions = 4096; p->rotary_dim = 2)
M(yarn_factor_small, p->scaling = PE_ROPE_SCALING_YARN; p->factor = 0.5; p->original_max_positions = 4096)
M(yarn_no_m0, p->scaling = PE_ROPE_SCALING_YARN; p->factor = 4)
M(yarn_base1, p->scaling = PE_ROPE_SCALING_YARN; p->factor = 4; p->original_max_positions = 4096; p->base = 1.0)
M(yarn_beta_neg, p->scaling = PE_ROPE_SCALING_YARN; p->factor = 4; p->original_max_positions = 4096; p->beta_fast = -3)
M(yarn_beta_slow_nan, p->scaling = PE_ROPE_SCALING_YARN; p->factor = 4; p->original_max_positions = 4096; p->beta_slow = nan_d())
M(yarn_mscale_neg, p->scaling = PE_ROPE_SCALING_YARN; p->factor = 4; p->original_max_positions = 4096; p->mscale = -1)
M(yarn_mscale_all_inf, p->scaling = PE_ROPE_SCALING_YARN; p->factor = 4; p->original_max_positions = 4096; p->mscale_all_dim = INFINITY)
M(yarn_truncate, p->scaling = PE_ROPE_SCALING_YARN; p->factor = 4; p->original_max_positions = 4096; p->truncate = 7)
M(lr_factor_small, p->scaling = PE_ROPE_SCALING_LONGROPE; p->factor = 0.5; p->original_max_positions = 4096; p->short_factor = lr_short; p->long_factor = lr_long)
M(lr_m0_one, p->scaling = PE_ROPE_SCALING_LONGROPE; p->factor = 32; p->original_max_positions = 1; p->short_factor = lr_short; p->long_factor = lr_long)
M(lr_no_short, p->scaling = PE_ROPE_SCALING_LONGROPE; p->factor = 32; p->original_max_positions = 4096; p->long_factor = lr_long)
M(lr_no_long, p->scaling = PE_ROPE_SCALING_LONGROPE; p->factor = 32; p->original_max_positions = 4096; p->short_factor = lr_short)
M(lr_short_zero, p->scaling = PE_ROPE_SCALING_LONGROPE; p->factor = 32; p->original_max_positions = 4096; p->short_factor = bad_short; p->long_factor = lr_long)
M(lr_long_nan, p->scaling = PE_ROPE_SCALING_LONGROPE; p->factor = 32; p->original_max_positions = 4096; p->short_factor = lr_short; p->long_factor = bad_long)
M(lr_neg_seq, p->scaling = PE_ROPE_SCALING_LONGROPE; p->factor = 32; p->original_max_positions = 4096; p->short_factor = lr_short; p->long_factor = lr_long; p->seq_len = -5)
M(l3_factor_small, p->scaling = PE_ROPE_SCALING_LLAMA3; p->factor = 0.5; p->original_max_positions = 8192)
M(l3_no_m0, p->scaling = PE_ROPE_SCALING_LLAMA3; p->factor = 8)
M(l3_low_zero, p->scaling = PE_ROPE_SCALING_LLAMA3; p->factor = 8; p->original_max_positions = 8192; p->low_freq_factor = 0)
M(l3_high_le_low, p->scaling = PE_ROPE_SCALING_LLAMA3; p->factor = 8; p->original_max_positions = 8192; p->low_freq_factor = 4; p->high_freq_factor = 2)
M(prop_factor_zero, p->scaling = PE_ROPE_SCALING_PROPORTIONAL; p->factor = 0)
M(custom_null, p->scaling = PE_ROPE_SCALING_CUSTOM)
M(custom_neg, p->scaling = PE_ROPE_SCALING_CUSTOM; p->inv_freq = bad_inv)
M(scaling_unknown, p->scaling = (pe_rope_scaling)42)
/* mscale(40, 1e200)^2 = (0.1 * 1e200 * ln 40 + 1)^2 overflows a double; the
 * attention factor, their ratio, stays 1. */
M(yarn_softmax_inf, p->scaling = PE_ROPE_SCALING_YARN; p->factor = 40; p->original_max_positions = 4096; p->mscale = 1e200; p->mscale_all_dim = 1e200)
M(attn_too_big, p->attention_factor = 1e31)
#undef M

static void test_errors(void **state) {
  (void)state;
  fill_longrope_factors();
  memcpy(bad_short, lr_short, sizeof bad_short);
  bad_short[7] = 0.0f;
  memcpy(bad_long, lr_long, sizeof bad_long);
  bad_long[47] = nanf("");
  for (int i = 0; i < 64; i++) bad_inv[i] = 0.01;
  bad_inv[5] = -1e-3;
  static const struct { mutate_fn f; pe_status st; const char *needle; } cases[] = {
      {linear_factor_small, PE_ERR_INVALID_ARGUMENT, "factor >= 1, got 0.5"},
      {linear_factor_nan, PE_ERR_INVALID_ARGUMENT, "factor"},
      {ntk_factor_small, PE_ERR_INVALID_ARGUMENT, "factor >= 1, got 0.9"},
      {ntk_dim2, PE_ERR_INVALID_ARGUMENT, "rotary_dim > 2"},
      {dyn_factor_inf, PE_ERR_INVALID_ARGUMENT, "factor"},
      {dyn_no_m, PE_ERR_INVALID_ARGUMENT, "original_max_positions"},
      {dyn_neg_seq, PE_ERR_INVALID_ARGUMENT, "seq_len >= 0 (0 = unset), got -1"},
      {dyn_dim2, PE_ERR_INVALID_ARGUMENT, "rotary_dim > 2"},
      {yarn_factor_small, PE_ERR_INVALID_ARGUMENT, "yarn scaling needs factor >= 1"},
      {yarn_no_m0, PE_ERR_INVALID_ARGUMENT, "original_max_positions >= 1"},
      {yarn_base1, PE_ERR_INVALID_ARGUMENT, "base > 1"},
      {yarn_beta_neg, PE_ERR_INVALID_ARGUMENT, "beta_fast -3"},
      {yarn_beta_slow_nan, PE_ERR_INVALID_ARGUMENT, "beta_slow"},
      {yarn_mscale_neg, PE_ERR_INVALID_ARGUMENT, "mscale -1"},
      {yarn_mscale_all_inf, PE_ERR_INVALID_ARGUMENT, "mscale_all_dim inf"},
      {yarn_truncate, PE_ERR_INVALID_ARGUMENT, "truncate must be 0 or 1, got 7"},
      {lr_factor_small, PE_ERR_INVALID_ARGUMENT, "longrope scaling needs factor >= 1"},
      {lr_m0_one, PE_ERR_INVALID_ARGUMENT, "original_max_positions >= 2"},
      {lr_no_short, PE_ERR_INVALID_ARGUMENT, "short_factor"},
      {lr_no_long, PE_ERR_INVALID_ARGUMENT, "long_factor"},
      {lr_short_zero, PE_ERR_INVALID_ARGUMENT, "short_factor[7] is 0"},
      {lr_long_nan, PE_ERR_INVALID_ARGUMENT, "long_factor[47] is nan"},
      {lr_neg_seq, PE_ERR_INVALID_ARGUMENT, "seq_len"},
      {l3_factor_small, PE_ERR_INVALID_ARGUMENT, "llama3 scaling needs factor"},
      {l3_no_m0, PE_ERR_INVALID_ARGUMENT, "original_max_positions"},
      {l3_low_zero, PE_ERR_INVALID_ARGUMENT, "low_freq_factor 0"},
      {l3_high_le_low, PE_ERR_INVALID_ARGUMENT, "high_freq_factor 2 must be"},
      {prop_factor_zero, PE_ERR_INVALID_ARGUMENT, "proportional scaling needs a finite factor > 0"},
      {custom_null, PE_ERR_INVALID_ARGUMENT, "inv_freq"},
      {custom_neg, PE_ERR_INVALID_ARGUMENT, "inv_freq[5]"},
      {scaling_unknown, PE_ERR_UNSUPPORTED, "scaling 42"},
      {yarn_softmax_inf, PE_ERR_INVALID_ARGUMENT, "softmax scale inf (from mscale_all_dim 1e+200)"},
      {attn_too_big, PE_ERR_INVALID_ARGUMENT, "attention factor 1e+31 must be finite, > 0 and at most 1e+30"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    pe_rope_params p = base_params(96, 0, 10000.0);
    cases[k].f(&p);
    pe_rope_cache *sentinel = (pe_rope_cache *)&p, *out = sentinel;
    pe_status st = pe_rope_cache_create(&p, &out);
    if (st != cases[k].st)
      fail_msg("case %zu: status %s, expected %s (%s)", k, pe_status_string(st),
               pe_status_string(cases[k].st), pe_last_error());
    assert_ptr_equal(out, sentinel);
    if (!strstr(pe_last_error(), cases[k].needle))
      fail_msg("case %zu: message \"%s\" lacks \"%s\"", k, pe_last_error(), cases[k].needle);
  }
}

/* ---------------------------------------------------------------------- */
/* table accuracy at 2^24                                                  */
/* ---------------------------------------------------------------------- */

/* The reference is sinl/cosl (x87, 64-bit mantissa) of the exact angle
 * p*f (exact_cos_sin), with f the very double the library uses (passed as CUSTOM
 * frequencies, so no formula drift enters): "the float64 value of the same
 * frequencies", good to ~2^-64.
 *
 * Threshold: 1.5 float32 ulp per entry, and the worst error may not grow with
 * the position, as posenc.h states for pe_rope_cache_create. Why not 1 ulp: the
 * kernel reduces the angle in double (exact to ~2^-100 here), rounds the
 * reduced angle to float with a first-order correction, calls SLEEF's u10
 * sincosf (<= 1.0 ulp by SLEEF's spec) and rounds once more in the fmaf
 * correction, so its design bound is 1.0 + 0.5 ulp. Measured over 2.56e7
 * entries: worst 1.28 ulp at positions < 4096 and 1.34 ulp up to 2^24, with
 * 0.1% of entries above 1 ulp at ANY position, so the excess comes from the
 * float32 sincos, not from large positions. A float32 angle (HF) is off by
 * ~1e-3 absolute at 2^17, i.e. >10^4 ulp, and float32 frequencies are off by
 * up to p * 2^-24 * f radians at 2^24; either fails this bound by orders of
 * magnitude. */
#define TABLE_ULP_BOUND 1.5

/* cos and sin of the exact angle pos*f (f the double frequency): pos*f is
 * the double-double th + tl (tl = fma(pos, f, -th), exact), and
 * cos(th + tl) = cos th cos tl - sin th sin tl in long double. */
static void exact_cos_sin(int64_t pos, double f, long double *c, long double *s) {
  double th = (double)pos * f, tl = fma((double)pos, f, -th);
  long double ct = cosl((long double)th), st = sinl((long double)th);
  long double cl = cosl((long double)tl), sl = sinl((long double)tl);
  *c = ct * cl - st * sl;
  *s = st * cl + ct * sl;
}

static void check_row_ulps(const pe_rope_cache *c, const double *f, int half, int64_t pos,
                           double *worst, long *over1) {
  float cs[MAXH], sn[MAXH];
  assert_int_equal(pe_rope_cache_cos_sin(c, pos, cs, sn), PE_OK);
  for (int i = 0; i < half; i++) {
    long double lc, ls;
    exact_cos_sin(pos, f[i], &lc, &ls); /* the exact angle for the double frequency */
    double rc = (double)lc, rs = (double)ls;
    double ec = fabs((double)cs[i] - rc) / ulp_f32(rc), es = fabs((double)sn[i] - rs) / ulp_f32(rs);
    if (ec > *worst) *worst = ec;
    if (es > *worst) *worst = es;
    *over1 += (ec > 1.0) + (es > 1.0);
    if (ec > TABLE_ULP_BOUND || es > TABLE_ULP_BOUND)
      fail_msg("pos %lld freq %d: cos %.9g vs %.17g (%.2f ulp), sin %.9g vs %.17g (%.2f ulp)",
               (long long)pos, i, (double)cs[i], rc, ec, (double)sn[i], rs, es);
  }
}

static void test_table_accuracy_2_24(void **state) {
  (void)state;
  /* Frequencies of three real schemes computed from the formulas in double. */
  double sets[3][64];
  for (int i = 0; i < 64; i++) {
    sets[0][i] = ref_llama3(500000.0, i, 128, 8.0, 8192.0, 1.0, 4.0);
    sets[1][i] = ref_default(1e6, i, 128);
  }
  yarn_cfg ds = {64, 10000.0, 40.0, 4096, 32, 1, 1, 1.0, 1.0, 0};
  ref_yarn(&ds, sets[2]);
  const int halves[3] = {64, 64, 32};
  uint64_t rng = 0x243f6a8885a308d3ull;
  double worst_small = 0.0, worst_large = 0.0;
  long over1 = 0, entries = 0;
  for (int s = 0; s < 3; s++) {
    for (int table = 0; table < 2; table++) {
      pe_rope_params p = base_params(2 * halves[s], 0, 10000.0);
      p.scaling = PE_ROPE_SCALING_CUSTOM;
      p.inv_freq = sets[s];
      /* A table cannot hold 2^24 rows cheaply: on the fly for the large
       * positions, a 4096-row table for the small ones (both paths). */
      p.max_positions = table ? 4096 : 0;
      pe_rope_cache *c = new_cache(&p);
      static const int64_t fixed[] = {0, 1, 2, 3, 1000, 4095, 4096, 8191, 65535, 131071, 1000000,
                                      (1 << 23) + 1, (1 << 24) - 1, 1 << 24};
      for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++)
        if (!table || fixed[k] < 4096) {
          check_row_ulps(c, sets[s], halves[s], fixed[k],
                         fixed[k] < 4096 ? &worst_small : &worst_large, &over1);
          entries += 2 * halves[s];
        }
      for (int k = 0; k < 2000; k++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        int64_t pos = (int64_t)(rng % (table ? 4096u : (1u << 24) + 1u));
        check_row_ulps(c, sets[s], halves[s], pos, pos < 4096 ? &worst_small : &worst_large,
                       &over1);
        entries += 2 * halves[s];
      }
      pe_rope_cache_destroy(c);
    }
  }
  print_message("table accuracy: worst %.3f ulp below 4096, %.3f ulp up to 2^24; %ld of %ld "
                "entries above 1 ulp\n",
                worst_small, worst_large, over1, entries);
  /* No drift with the position: large positions are as accurate as small. */
  assert_true(worst_large <= TABLE_ULP_BOUND && worst_small <= TABLE_ULP_BOUND);
}

/* An on-the-fly row is computed in pieces of 128 frequencies: rows whose
 * last piece is shorter (rotary_dim 260 and 384: 2 and 64 frequencies after
 * the first 128) hold every frequency within the table's bound, and nothing
 * is written past rotary_dim/2. */
static void test_cos_sin_row_in_pieces(void **state) {
  (void)state;
  static const int dims[] = {260, 384, 512};
  for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
    const int half = dims[k] / 2;
    double f[MAXH / 2];
    for (int i = 0; i < half; i++) f[i] = ref_default(10000.0, i, dims[k]);
    pe_rope_params p = base_params(dims[k], 0, 10000.0);
    p.max_positions = 0;
    pe_rope_cache *c = new_cache(&p);
    float cs[MAXH + 8], sn[MAXH + 8];
    for (int i = 0; i < MAXH + 8; i++) cs[i] = sn[i] = -7.0f;
    const int64_t pos = 123457;
    double worst = 0.0;
    long over1 = 0;
    check_row_ulps(c, f, half, pos, &worst, &over1); /* every frequency within the bound */
    assert_int_equal(pe_rope_cache_cos_sin(c, pos, cs, sn), PE_OK);
    for (int i = half; i < MAXH + 8; i++)
      if (cs[i] != -7.0f || sn[i] != -7.0f)
        fail_msg("rotary_dim %d: entry %d of %d written", dims[k], i, half);
    pe_rope_cache_destroy(c);
  }
}

/* With an attention factor a the stored value is round(cos_f32 * (float)a):
 * on top of the <= 1.5 ulp of cos, (float)a is off by <= 0.5 ulp relative
 * and the product is rounded once more, so the bound is 2.5 ulp of a*cos.
 * Measured: worst 2.36 ulp (a = 0.8), 2.14 (YaRN's 1.3466), 2.03 (Phi-3's
 * 1.1902), over 1.28e7 entries each, at any position. */
#define SCALED_ULP_BOUND 2.5

static void test_scaled_table_accuracy_2_24(void **state) {
  (void)state;
  static const double factors[] = {1.190238, 1.3465735902799727, 0.8};
  double f[64];
  for (int i = 0; i < 64; i++) f[i] = ref_default(1e6, i, 128);
  uint64_t rng = 0x13198a2e03707344ull;
  double worst = 0.0;
  for (size_t a = 0; a < sizeof factors / sizeof factors[0]; a++) {
    pe_rope_params p = base_params(128, 0, 1e6);
    p.scaling = PE_ROPE_SCALING_CUSTOM;
    p.inv_freq = f;
    p.attention_factor = factors[a];
    p.max_positions = 0;
    pe_rope_cache *c = new_cache(&p);
    for (int k = 0; k < 1000; k++) {
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      int64_t pos = k == 0 ? (INT64_C(1) << 24) : (int64_t)(rng % ((1u << 24) + 1u));
      float cs[64], sn[64];
      assert_int_equal(pe_rope_cache_cos_sin(c, pos, cs, sn), PE_OK);
      for (int i = 0; i < 64; i++) {
        long double lc, ls;
        exact_cos_sin(pos, f[i], &lc, &ls);
        double rc = (double)(factors[a] * lc), rs = (double)(factors[a] * ls);
        double ec = fabs((double)cs[i] - rc) / ulp_f32(rc), es = fabs((double)sn[i] - rs) / ulp_f32(rs);
        worst = fmax(worst, fmax(ec, es));
        if (ec > SCALED_ULP_BOUND || es > SCALED_ULP_BOUND)
          fail_msg("a %g pos %lld freq %d: cos %.9g vs %.17g (%.2f ulp), sin %.9g vs %.17g (%.2f ulp)",
                   factors[a], (long long)pos, i, (double)cs[i], rc, ec, (double)sn[i], rs, es);
      }
    }
    pe_rope_cache_destroy(c);
  }
  print_message("scaled table accuracy: worst %.3f ulp of a*cos, a*sin up to 2^24\n", worst);
}

/* ---------------------------------------------------------------------- */
/* re-rotation between scaled frequency sets                              */
/* ---------------------------------------------------------------------- */

/* Keys rotated with `from` and re-rotated to `to` must equal the unrotated
 * keys rotated by the float64 formula of `to`, times its attention factor
 * (NeoX pairs (j, j+half)). Tolerance: each pass has cos/sin within ~1.3
 * ulp and one fmaf rounding, so two passes stay below 1e-6 * (|x|+|y|); a
 * wrong frequency set or a missing attention ratio is off by O(|x|). */
static void check_rerotate(pe_rope_cache *from, pe_rope_cache *to, const double *f_to, double a_to,
                           int d, const char *what) {
  enum { H = 2, T = 8 };
  const int half = d / 2;
  float *k = malloc(sizeof(float) * H * T * (size_t)d), *x0 = malloc(sizeof(float) * H * T * (size_t)d);
  assert_non_null(k);
  assert_non_null(x0);
  uint64_t r = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < H * T * d; i++) {
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    x0[i] = k[i] = (float)((double)(r >> 11) * 0x1p-53 * 4.0 - 2.0);
  }
  int64_t pos[T] = {0, 1, 4095, 4096, 4097, 30000, 100000, 131071};
  pe_tensor t = {.data = k, .dtype = PE_F32, .shape = {1, H, T, d}, .stride = {H * T * d, T * d, d, 1}};
  assert_int_equal(pe_apply_rope_qk(from, NULL, &t, pos, 0, NULL), PE_OK);
  assert_int_equal(pe_rope_rerotate_k(from, to, &t, pos, NULL), PE_OK);
  for (int h = 0; h < H; h++)
    for (int tk = 0; tk < T; tk++)
      for (int j = 0; j < half; j++) {
        size_t o = ((size_t)h * T + tk) * (size_t)d;
        double x = x0[o + j], y = x0[o + j + half], th = (double)pos[tk] * f_to[j];
        double ex = a_to * (x * cos(th) - y * sin(th)), ey = a_to * (y * cos(th) + x * sin(th));
        double tol = 1e-6 * a_to * (fabs(x) + fabs(y));
        if (fabs(k[o + j] - ex) > tol || fabs(k[o + j + half] - ey) > tol)
          fail_msg("%s: head %d pos %lld pair %d: (%g, %g) expected (%g, %g)", what, h,
                   (long long)pos[tk], j, (double)k[o + j], (double)k[o + j + half], ex, ey);
      }
  free(k);
  free(x0);
}

static void test_rerotate_scaled(void **state) {
  (void)state;
  fill_longrope_factors();
  /* LongRoPE short -> long once the context passes M0 (both carry 1.19). */
  pe_rope_cache *from = make_longrope(4096, 32.0, 0.0), *to = make_longrope(4097, 32.0, 0.0);
  double f[64];
  for (int i = 0; i < 48; i++) f[i] = 1.0 / ((double)lr_long[i] * pow(10000.0, (double)(2 * i) / 96));
  check_rerotate(from, to, f, sqrt(1.0 + log(32.0) / log(4096.0)), 96, "longrope short->long");
  pe_rope_cache_destroy(from);
  pe_rope_cache_destroy(to);
  /* Dynamic NTK growth from M = 4096 to a 32768 context. */
  pe_rope_params p = base_params(128, 0, 10000.0);
  p.scaling = PE_ROPE_SCALING_DYNAMIC;
  p.factor = 4.0;
  p.original_max_positions = 4096;
  p.seq_len = 4096;
  p.max_positions = 0;
  from = new_cache(&p);
  p.seq_len = 32768;
  to = new_cache(&p);
  double b = ref_dynamic_base(10000.0, 4.0, 32768, 4096, 128);
  for (int i = 0; i < 64; i++) f[i] = ref_default(b, i, 128);
  check_rerotate(from, to, f, 1.0, 128, "dynamic growth");
  pe_rope_cache_destroy(from);
  pe_rope_cache_destroy(to);
  /* Default -> YaRN (attention factor 1 -> 1.1386): the ratio is applied. */
  p = base_params(128, 0, 1e6);
  p.max_positions = 0;
  from = new_cache(&p);
  yarn_cfg q = {128, 1e6, 4.0, 32768, 0, 0, 1, 0, 0, 0};
  to = make_yarn(&q);
  ref_yarn(&q, f);
  check_rerotate(from, to, f, 0.1 * log(4.0) + 1.0, 128, "default -> yarn");
  pe_rope_cache_destroy(from);
  pe_rope_cache_destroy(to);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_none),
      cmocka_unit_test(test_linear),
      cmocka_unit_test(test_ntk),
      cmocka_unit_test(test_dynamic),
      cmocka_unit_test(test_yarn_models),
      cmocka_unit_test(test_yarn_attention),
      cmocka_unit_test(test_yarn_range),
      cmocka_unit_test(test_longrope),
      cmocka_unit_test(test_llama3),
      cmocka_unit_test(test_proportional),
      cmocka_unit_test(test_custom),
      cmocka_unit_test(test_attention_factor_in_table),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_table_accuracy_2_24),
      cmocka_unit_test(test_cos_sin_row_in_pieces),
      cmocka_unit_test(test_scaled_table_accuracy_2_24),
      cmocka_unit_test(test_rerotate_scaled),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
