/* test_hf_config.c - pe_rope_cache_create_from_hf_config on the config.json
 * of real models (tests/data/configs) and on small configs written here.
 *
 * Every expected value comes from the config's numbers and the formulas of
 * transformers' modeling_rope_utils, evaluated in float64 in this file (independent of
 * src/), or from published constants: Phi-3's attention factor 1.190238,
 * DeepSeek-V3's softmax factor 1.87385, YaRN's 0.1 ln s + 1.
 *
 * Fixture provenance: written from the public config.json of each model on
 * the HuggingFace Hub (key for key; only the keys are reproduced, never code).
 * Phi-3-mini-128k-instruct: the short/long factor lists are those of the
 * April-2024 ("type": "su") revision as found in a public copy of that file
 * (the OmniGen repository embeds it); the current Hub revision (June 2024,
 * "longrope") has different lists, which could not be retrieved here. The
 * test reads the lists below, so the check does not depend on which revision
 * is right: it verifies that the loader reads 48 factors of each list, picks
 * the right one and applies them as HF does.
 *
 * Frequencies are compared to the float64 formula within 1 float32 ulp (the
 * library rounds its double frequencies once to float32).
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

#include "config_fixture.h"
#include "test_util.h"

#define PI_D 3.14159265358979323846
#define MAXH 512

/* ---------------------------------------------------------------------- */
/* helpers                                                                */
/* ---------------------------------------------------------------------- */

static pe_rope_cache *load(const char *name, int64_t max_positions, int64_t seq_len) {
  size_t len;
  char *buf = read_fixture(name, &len);
  pe_rope_cache *c = NULL;
  pe_status st = pe_rope_cache_create_from_hf_config(buf, len, max_positions, seq_len, 0, &c);
  free(buf);
  if (st != PE_OK) fail_msg("%s: %s / %s", name, pe_status_string(st), pe_last_error());
  return c;
}

static pe_rope_cache *load_text(const char *json, int64_t seq_len) {
  pe_rope_cache *c = NULL;
  /* PE_CONFIG_GUESS: these configs test how keys are read, most without a
   * model_type; a known model_type is not affected by the flag. */
  pe_status st = pe_rope_cache_create_from_hf_config(json, strlen(json), 0, seq_len, PE_CONFIG_GUESS, &c);
  if (st != PE_OK) fail_msg("%s / %s\n%s", pe_status_string(st), pe_last_error(), json);
  return c;
}

static pe_rope_params params_of(const pe_rope_cache *c) {
  pe_rope_params p;
  pe_rope_params_init(&p);
  assert_int_equal(pe_rope_cache_params(c, &p), PE_OK);
  return p;
}

static void expect_geometry(const pe_rope_cache *c, int hd, int rd, pe_rope_style style,
                            pe_rope_scaling scaling, double base, const char *what) {
  pe_rope_params p = params_of(c);
  if (p.head_dim != hd || p.rotary_dim != rd || p.style != style || p.scaling != scaling ||
      p.base != base)
    fail_msg("%s: head_dim %d rotary_dim %d style %d scaling %d base %g; expected %d %d %d %d %g",
             what, (int)p.head_dim, (int)p.rotary_dim, (int)p.style, (int)p.scaling, p.base, hd, rd,
             (int)style, (int)scaling, base);
}

/* A config text and the cache it must give: the geometry, and (n > 0) its
 * n frequencies, HF's default set B^(-2i/dim) divided by div for i < n_rot,
 * 0 past it. */
typedef struct text_case {
  const char *what, *json;
  int hd, rd;
  pe_rope_style style;
  pe_rope_scaling scaling;
  double base;
  struct {
    double base;
    int dim;
    double div;
    int n_rot, n;
  } inv;
} text_case;

static void check_text_cases(const text_case *cases, size_t n_cases) {
  for (size_t k = 0; k < n_cases; k++) {
    const text_case *t = &cases[k];
    pe_rope_cache *c = load_text(t->json, 0);
    expect_geometry(c, t->hd, t->rd, t->style, t->scaling, t->base, t->what);
    double ref[MAXH];
    for (int i = 0; i < t->inv.n; i++)
      ref[i] = i < t->inv.n_rot ? ref_default(t->inv.base, i, t->inv.dim) / t->inv.div : 0.0;
    if (t->inv.n) expect_inv(c, ref, t->inv.n, t->what);
    pe_rope_cache_destroy(c);
  }
}
#define N_CASES(a) (sizeof(a) / sizeof((a)[0]))
#define NO_INV {0.0, 0, 0.0, 0, 0} /* the geometry only */

static double ref_mscale(double s, double m) { return s <= 1.0 ? 1.0 : 0.1 * m * log(s) + 1.0; }

/* HF yarn (transformers' _compute_yarn_parameters), d/2 frequencies into inv. */
static void ref_yarn(int d, double base, double s, double m0, int truncate, double *inv) {
  double lo, hi;
  ref_yarn_range(d, base, s, m0, 32.0, 1.0, truncate, inv, &lo, &hi);
}

/* The error of loading a config: status and that the message holds `needle`. */
static void expect_refused(const char *json, pe_status want, const char *needle) {
  pe_rope_cache *c = NULL;
  pe_status st = pe_rope_cache_create_from_hf_config(json, strlen(json), 0, 0, 0, &c);
  if (st != want || !strstr(pe_last_error(), needle))
    fail_msg("%s: got %s / %s, expected %s naming \"%s\"", json, pe_status_string(st),
             pe_last_error(), pe_status_string(want), needle);
  assert_null(c);
}

/* ---------------------------------------------------------------------- */
/* real models                                                            */
/* ---------------------------------------------------------------------- */

static void test_llama31(void **state) {
  (void)state;
  pe_rope_cache *c = load("llama-3.1-8b.json", 0, 0);
  expect_geometry(c, 128, 128, PE_ROPE_NEOX, PE_ROPE_SCALING_LLAMA3, 500000.0, "llama-3.1");
  pe_rope_params p = params_of(c);
  assert_true(p.factor == 8.0 && p.original_max_positions == 8192);
  assert_true(p.low_freq_factor == 1.0 && p.high_freq_factor == 4.0);
  double ref[64];
  for (int i = 0; i < 64; i++) {
    double f = ref_default(500000.0, i, 128), lam = 2.0 * PI_D / f;
    if (lam < 8192.0 / 4.0)
      ref[i] = f;
    else if (lam > 8192.0 / 1.0)
      ref[i] = f / 8.0;
    else {
      double sm = (8192.0 / lam - 1.0) / (4.0 - 1.0);
      ref[i] = (1.0 - sm) * f / 8.0 + sm * f;
    }
    /* transformers' _compute_llama3_parameters: i <= 28 unchanged, 29..34 smoothed, >= 35 divided by 8 */
    if (i <= 28) assert_true(ref[i] == f);
    if (i >= 35) assert_true(ref[i] == f / 8.0);
    if (i >= 29 && i <= 34) assert_true(ref[i] < f && ref[i] > f / 8.0);
  }
  expect_inv(c, ref, 64, "llama-3.1");
  assert_true(pe_rope_cache_attention_factor(c) == 1.0);
  assert_true(pe_rope_cache_softmax_scale(c) == 1.0);
  pe_rope_cache_destroy(c);
}

static void test_qwen25_yarn(void **state) {
  (void)state;
  pe_rope_cache *c = load("qwen2.5-7b-instruct-yarn.json", 0, 0);
  /* head_dim = 3584 / 28 = 128 */
  expect_geometry(c, 128, 128, PE_ROPE_NEOX, PE_ROPE_SCALING_YARN, 1e6, "qwen2.5");
  pe_rope_params p = params_of(c);
  assert_true(p.factor == 4.0 && p.original_max_positions == 32768 && p.truncate == 1);
  double ref[64];
  ref_yarn(128, 1e6, 4.0, 32768.0, 1, ref);
  expect_inv(c, ref, 64, "qwen2.5 yarn");
  expect_close(pe_rope_cache_attention_factor(c), 0.1 * log(4.0) + 1.0, 1e-12, "qwen2.5 attention");
  expect_close(pe_rope_cache_attention_factor(c), 1.138629, 1e-6, "qwen2.5 attention literal");
  assert_true(pe_rope_cache_softmax_scale(c) == 1.0);
  pe_rope_cache_destroy(c);
}

static const double phi3_long[48] = {
    1.0299999713897705, 1.0499999523162842, 1.0499999523162842, 1.0799999237060547,
    1.2299998998641968, 1.2299998998641968, 1.2999999523162842, 1.4499999284744263,
    1.5999999046325684, 1.6499998569488525, 1.8999998569488525, 2.859999895095825,
    3.68999981880188,   5.419999599456787,  5.489999771118164,  5.489999771118164,
    9.09000015258789,   11.579999923706055, 15.65999984741211,  15.769999504089355,
    15.789999961853027, 18.360000610351562, 21.989999771118164, 23.079999923706055,
    30.009998321533203, 32.35000228881836,  32.590003967285156, 35.56000518798828,
    39.95000457763672,  53.840003967285156, 56.20000457763672,  57.95000457763672,
    59.29000473022461,  59.77000427246094,  59.920005798339844, 61.190006256103516,
    61.96000671386719,  62.50000762939453,  63.3700065612793,   63.48000717163086,
    63.48000717163086,  63.66000747680664,  63.850006103515625, 64.08000946044922,
    64.760009765625,    64.80001068115234,  64.81001281738281,  64.81001281738281};
static const double phi3_short[48] = {
    1.05, 1.05, 1.05, 1.1, 1.1, 1.1, 1.2500000000000002, 1.2500000000000002, 1.4000000000000004,
    1.4500000000000004, 1.5500000000000005, 1.8500000000000008, 1.9000000000000008,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001, 2.1000000000000005,
    2.1000000000000005, 2.2, 2.3499999999999996, 2.3499999999999996, 2.3499999999999996,
    2.3499999999999996, 2.3999999999999995, 2.3999999999999995, 2.6499999999999986,
    2.6999999999999984, 2.8999999999999977, 2.9499999999999975, 3.049999999999997,
    3.049999999999997, 3.049999999999997};

static void test_phi3_longrope(void **state) {
  (void)state;
  /* seq_len: 0 = max_position_embeddings 131072 (> M0: long), 4096 = M0
   * (short: the switch is strict), 4097 (long). */
  static const struct { int64_t seq; int use_long; } cases[] = {{0, 1}, {4096, 0}, {4097, 1}, {1, 0}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    pe_rope_cache *c = load("phi-3-mini-128k-instruct.json", 0, cases[k].seq);
    /* "su" is longrope; head_dim 3072/32 = 96; M0 from the top level. */
    expect_geometry(c, 96, 96, PE_ROPE_NEOX, PE_ROPE_SCALING_LONGROPE, 10000.0, "phi-3");
    pe_rope_params p = params_of(c);
    assert_true(p.original_max_positions == 4096);
    assert_true(p.factor == 32.0); /* no factor key: M / M0 = 131072 / 4096 */
    const double *ext = cases[k].use_long ? phi3_long : phi3_short;
    double ref[48];
    for (int i = 0; i < 48; i++)
      ref[i] = 1.0 / ((double)(float)ext[i] * pow(10000.0, (double)(2 * i) / 96));
    expect_inv(c, ref, 48, cases[k].use_long ? "phi-3 long" : "phi-3 short");
    expect_close(pe_rope_cache_attention_factor(c), sqrt(1.0 + log(32.0) / log(4096.0)), 1e-12,
                 "phi-3 attention");
    expect_close(pe_rope_cache_attention_factor(c), 1.190238, 1e-6, "phi-3 published 1.190238");
    pe_rope_cache_destroy(c);
  }
}

static void test_deepseek_v3(void **state) {
  (void)state;
  pe_rope_cache *c = load("deepseek-v3.json", 0, 0);
  /* The rope part of a head is qk_rope_head_dim = 64, interleaved. */
  expect_geometry(c, 64, 64, PE_ROPE_GPTJ, PE_ROPE_SCALING_YARN, 10000.0, "deepseek-v3");
  pe_rope_params p = params_of(c);
  assert_true(p.factor == 40.0 && p.original_max_positions == 4096);
  assert_true(p.mscale == 1.0 && p.mscale_all_dim == 1.0);
  double ref[32];
  ref_yarn(64, 10000.0, 40.0, 4096.0, 1, ref);
  expect_inv(c, ref, 32, "deepseek-v3 yarn");
  assert_true(pe_rope_cache_attention_factor(c) == 1.0);
  double m = ref_mscale(40.0, 1.0);
  expect_close(pe_rope_cache_softmax_scale(c), m * m, 1e-12, "deepseek-v3 softmax");
  expect_close(pe_rope_cache_softmax_scale(c), 1.87385, 1e-5, "deepseek-v3 published 1.87385");
  pe_rope_cache_destroy(c);
}

static void test_gpt_oss(void **state) {
  (void)state;
  pe_rope_cache *c = load("gpt-oss-20b.json", 0, 0);
  /* head_dim 64 from the key (hidden_size / heads would be 45). */
  expect_geometry(c, 64, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_YARN, 150000.0, "gpt-oss");
  pe_rope_params p = params_of(c);
  assert_true(p.truncate == 0 && p.factor == 32.0 && p.original_max_positions == 4096);
  double ref[32];
  ref_yarn(64, 150000.0, 32.0, 4096.0, 0, ref);
  expect_inv(c, ref, 32, "gpt-oss yarn (truncate false)");
  expect_close(pe_rope_cache_attention_factor(c), 0.1 * log(32.0) + 1.0, 1e-12, "gpt-oss attention");
  pe_rope_cache_destroy(c);
}

static void test_unscaled_models(void **state) {
  (void)state;
  static const struct {
    const char *file;
    int hd, rd;
    pe_rope_style style;
    double base;
  } m[] = {
      {"gpt-neox-20b.json", 96, 24, PE_ROPE_NEOX, 10000.0},  /* rotary_pct 0.25 of 6144/64 */
      {"gpt-j-6b.json", 256, 64, PE_ROPE_GPTJ, 10000.0},     /* n_embd/n_head, rotary_dim 64 */
      {"mistral-7b-v0.1.json", 128, 128, PE_ROPE_NEOX, 10000.0},
      {"codellama-7b.json", 128, 128, PE_ROPE_NEOX, 1e6},    /* rope_scaling null, theta 1e6 */
  };
  for (size_t k = 0; k < sizeof m / sizeof m[0]; k++) {
    for (int table = 0; table < 2; table++) {
      pe_rope_cache *c = load(m[k].file, table ? 128 : 0, 0);
      expect_geometry(c, m[k].hd, m[k].rd, m[k].style, PE_ROPE_SCALING_NONE, m[k].base, m[k].file);
      double ref[MAXH];
      for (int i = 0; i < m[k].rd / 2; i++) ref[i] = ref_default(m[k].base, i, m[k].rd);
      expect_inv(c, ref, m[k].rd / 2, m[k].file);
      assert_true(pe_rope_cache_attention_factor(c) == 1.0);
      pe_rope_params p = params_of(c);
      assert_int_equal(p.max_positions, table ? 128 : 0);
      pe_rope_cache_destroy(c);
    }
  }
}

/* ---------------------------------------------------------------------- */
/* config plumbing on small configs                                       */
/* ---------------------------------------------------------------------- */

static void test_v5_rope_parameters(void **state) {
  (void)state;
  static const text_case cases[] = {
      /* v5: rope_theta inside rope_parameters wins over a top-level one. */
      {"v5 linear",
       "{\"model_type\":\"llama\",\"hidden_size\":2048,\"num_attention_heads\":16,"
       "\"max_position_embeddings\":4096,\"rope_theta\":10000.0,"
       "\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":2.0,\"rope_theta\":50000.0}}",
       128, 128, PE_ROPE_NEOX, PE_ROPE_SCALING_LINEAR, 50000.0, {50000.0, 128, 2.0, 64, 64}},
      /* rope_parameters wins over a legacy rope_scaling next to it. */
      {"v5 default",
       "{\"model_type\":\"llama\",\"head_dim\":64,\"max_position_embeddings\":4096,"
       "\"rope_scaling\":{\"type\":\"linear\",\"factor\":4.0},"
       "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000.0}}",
       64, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 10000.0, NO_INV},
      /* An empty dict is no scaling at the top-level rope_theta:
       * transformers' standardize_rope_params takes rope_parameters == {} as
       * one global dict and fills rope_type "default" and rope_theta. */
      {"empty rope_scaling",
       "{\"model_type\":\"llama\",\"hidden_size\":2048,\"num_attention_heads\":16,"
       "\"max_position_embeddings\":4096,\"rope_theta\":50000.0,\"rope_scaling\":{}}",
       128, 128, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 50000.0, NO_INV},
      {"empty rope_parameters",
       "{\"model_type\":\"llama\",\"head_dim\":64,\"max_position_embeddings\":4096,"
       "\"rope_theta\":50000.0,\"rope_parameters\":{}}",
       64, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 50000.0, NO_INV},
  };
  check_text_cases(cases, N_CASES(cases));
}

static void test_dynamic_uses_m(void **state) {
  (void)state;
  /* HF dynamic NTK scales relative to max_position_embeddings (M), never the
   * original_max_position_embeddings (here 2048, a decoy). */
  const char *cfg = "{\"model_type\":\"llama\",\"hidden_size\":4096,\"num_attention_heads\":32,"
                    "\"max_position_embeddings\":4096,\"original_max_position_embeddings\":2048,"
                    "\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2.0}}";
  static const int64_t seqs[] = {0, 1000, 4096, 16384};
  for (size_t k = 0; k < sizeof seqs / sizeof seqs[0]; k++) {
    pe_rope_cache *c = load_text(cfg, seqs[k]);
    expect_geometry(c, 128, 128, PE_ROPE_NEOX, PE_ROPE_SCALING_DYNAMIC, 10000.0, "dynamic");
    pe_rope_params p = params_of(c);
    assert_int_equal(p.original_max_positions, 4096);
    double len = seqs[k] > 4096 ? (double)seqs[k] : 4096.0;
    double b = 10000.0 * pow(2.0 * len / 4096.0 - 1.0, 128.0 / 126.0);
    double ref[64];
    for (int i = 0; i < 64; i++) ref[i] = ref_default(b, i, 128);
    expect_inv(c, ref, 64, "dynamic");
    pe_rope_cache_destroy(c);
  }
}

static void test_partial_rotary(void **state) {
  (void)state;
  static const text_case cases[] = {
      /* Llama's default rope ignores partial_rotary_factor... */
      {"llama ignores prf",
       "{\"model_type\":\"llama\",\"hidden_size\":4096,\"num_attention_heads\":32,"
       "\"partial_rotary_factor\":0.5}",
       128, 128, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 10000.0, NO_INV},
      /* ...Phi (phi-2: 2560/32 = 80, prf 0.4 -> 32) applies it... */
      {"phi prf",
       "{\"model_type\":\"phi\",\"hidden_size\":2560,\"num_attention_heads\":32,"
       "\"partial_rotary_factor\":0.4,\"max_position_embeddings\":2048}",
       80, 32, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 10000.0, {10000.0, 32, 1.0, 16, 16}},
      /* GLM: half the head, interleaved pairs (HF repeat_interleaves cos/sin). */
      {"glm prf",
       "{\"model_type\":\"glm\",\"hidden_size\":4096,\"num_attention_heads\":32,"
       "\"partial_rotary_factor\":0.5}",
       128, 64, PE_ROPE_GPTJ, PE_ROPE_SCALING_NONE, 10000.0, NO_INV},
      /* ...and every scaled type applies it, Llama included (modeling_rope_utils). */
      {"scaled prf",
       "{\"model_type\":\"llama\",\"head_dim\":128,\"partial_rotary_factor\":0.5,"
       "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0}}",
       128, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_LINEAR, 10000.0, NO_INV},
      /* The narrowest rotation: int(128 * 1/64) = 2 channels, one pair. */
      {"prf to 2 channels",
       "{\"model_type\":\"glm\",\"hidden_size\":4096,\"num_attention_heads\":32,"
       "\"partial_rotary_factor\":0.015625}",
       128, 2, PE_ROPE_GPTJ, PE_ROPE_SCALING_NONE, 10000.0, {10000.0, 2, 1.0, 1, 1}},
  };
  check_text_cases(cases, N_CASES(cases));
}

static void test_odd_rotary_dim(void **state) {
  (void)state;
  static const text_case cases[] = {
      /* GPT-NeoX with rotary_pct 0.3 of 64: d = int(19.2) = 19. HF computes
       * arange(0,19,2)/19 -> 10 frequencies B^(-2i/19) and rotates the first
       * 20 channels (NeoX splits on cos.shape[-1]). */
      {"odd d = 19",
       "{\"model_type\":\"gpt_neox\",\"hidden_size\":2048,\"num_attention_heads\":32,"
       "\"rotary_pct\":0.3,\"rotary_emb_base\":10000,\"max_position_embeddings\":2048}",
       64, 20, PE_ROPE_NEOX, PE_ROPE_SCALING_CUSTOM, 10000.0, {10000.0, 19, 1.0, 10, 10}},
      /* The same with linear scaling: the type still applies to the
       * 19-denominator set. */
      {"odd d = 19, linear",
       "{\"model_type\":\"gpt_neox\",\"hidden_size\":2048,\"num_attention_heads\":32,"
       "\"rotary_pct\":0.3,\"rope_scaling\":{\"type\":\"linear\",\"factor\":4.0}}",
       64, 20, PE_ROPE_NEOX, PE_ROPE_SCALING_CUSTOM, 10000.0, {10000.0, 19, 4.0, 10, 10}},
      /* The widest odd d: rotary_pct 0.875 of 8 = 7, whose 4 frequencies
       * B^(-2i/7) make cos 8 wide - the whole head, which HF rotates. */
      {"odd d = head_dim - 1",
       "{\"model_type\":\"gpt_neox\",\"hidden_size\":256,\"num_attention_heads\":32,"
       "\"rotary_pct\":0.875,\"rotary_emb_base\":10000}",
       8, 8, PE_ROPE_NEOX, PE_ROPE_SCALING_CUSTOM, 10000.0, {10000.0, 7, 1.0, 4, 4}},
  };
  check_text_cases(cases, N_CASES(cases));
}

static void test_proportional(void **state) {
  (void)state;
  static const text_case cases[] = {
      /* Gemma-4 style: head_dim 256, prf 0.25 -> int(0.25*256//2) = 32
       * rotated angles B^(-2i/256), the other 96 pairs get 0; all divided by
       * factor 8. */
      {"proportional partial",
       "{\"model_type\":\"gemma4_text\",\"head_dim\":256,\"rope_parameters\":{\"rope_type\":"
       "\"proportional\",\"rope_theta\":1000000.0,\"partial_rotary_factor\":0.25,\"factor\":8.0}}",
       256, 256, PE_ROPE_NEOX, PE_ROPE_SCALING_PROPORTIONAL, 1e6, {1e6, 256, 8.0, 32, 128}},
      {"proportional full",
       "{\"model_type\":\"gemma4_text\",\"head_dim\":256,"
       "\"rope_parameters\":{\"rope_type\":\"proportional\",\"rope_theta\":1000000.0}}",
       256, 256, PE_ROPE_NEOX, PE_ROPE_SCALING_PROPORTIONAL, 1e6, {1e6, 256, 1.0, 128, 128}},
  };
  check_text_cases(cases, N_CASES(cases));
}

static void test_style_and_legacy_names(void **state) {
  (void)state;
  static const text_case cases[] = {
      /* DeepSeek with rope_interleave false is NeoX-style. */
      {"rope_interleave false",
       "{\"model_type\":\"deepseek_v3\",\"qk_rope_head_dim\":64,\"head_dim\":64,"
       "\"rope_interleave\":false}",
       64, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 10000.0, NO_INV},
      {"deepseek_v2",
       "{\"model_type\":\"deepseek_v2\",\"qk_rope_head_dim\":64,\"hidden_size\":5120,"
       "\"num_attention_heads\":128}",
       64, 64, PE_ROPE_GPTJ, PE_ROPE_SCALING_NONE, 10000.0, NO_INV},
  };
  check_text_cases(cases, N_CASES(cases));
  /* Phi3Config renames a legacy "yarn" to longrope; M0 inside the dict. */
  pe_rope_cache *c = load_text("{\"model_type\":\"phi3\",\"hidden_size\":64,\"num_attention_heads\":8,"
                "\"max_position_embeddings\":1024,\"rope_scaling\":{\"type\":\"yarn\","
                "\"original_max_position_embeddings\":256,"
                "\"short_factor\":[1,1,1,1],\"long_factor\":[2,3,4,5]}}",
                0);
  expect_geometry(c, 8, 8, PE_ROPE_NEOX, PE_ROPE_SCALING_LONGROPE, 10000.0, "phi3 yarn");
  double ref[4];
  for (int i = 0; i < 4; i++) ref[i] = 1.0 / ((i + 2.0) * pow(10000.0, (double)(2 * i) / 8));
  expect_inv(c, ref, 4, "phi3 yarn = longrope, long");
  expect_close(pe_rope_cache_attention_factor(c), sqrt(1.0 + log(4.0) / log(256.0)), 1e-12,
               "phi3 yarn attention");
  pe_rope_cache_destroy(c);
  /* A top-level original_max_position_embeddings wins over the dict's. */
  c = load_text("{\"rope_theta\":10000.0,\"head_dim\":64,\"max_position_embeddings\":32768,"
                "\"original_max_position_embeddings\":4096,\"rope_scaling\":{\"rope_type\":"
                "\"yarn\",\"factor\":8,\"original_max_position_embeddings\":2048}}",
                0);
  assert_int_equal(params_of(c).original_max_positions, 4096);
  double yref[32];
  ref_yarn(64, 10000.0, 8.0, 4096.0, 1, yref);
  expect_inv(c, yref, 32, "yarn top-level M0");
  pe_rope_cache_destroy(c);
  /* Explicit attention_factor in a yarn dict wins; null keys are "not set". */
  c = load_text("{\"rope_theta\":10000.0,\"head_dim\":64,\"max_position_embeddings\":8192,\"rope_scaling\":"
                "{\"rope_type\":\"yarn\",\"factor\":null,\"attention_factor\":0.8,"
                "\"beta_fast\":null,\"original_max_position_embeddings\":2048}}",
                0);
  pe_rope_params p = params_of(c);
  assert_true(p.factor == 4.0); /* null factor: M / M0 */
  assert_true(pe_rope_cache_attention_factor(c) == 0.8);
  pe_rope_cache_destroy(c);
}

/* The text need not be NUL-terminated: only len bytes are read. */
static void test_not_nul_terminated(void **state) {
  (void)state;
  const char *cfg = "{\"head_dim\":64,\"rope_theta\":20000.0}";
  size_t n = strlen(cfg);
  char *buf = malloc(n + 8);
  memcpy(buf, cfg, n);
  memcpy(buf + n, "garbage!", 8); /* beyond len, no NUL anywhere */
  pe_rope_cache *c = NULL;
  assert_int_equal(pe_rope_cache_create_from_hf_config(buf, n, 0, 0, PE_CONFIG_GUESS, &c), PE_OK);
  expect_geometry(c, 64, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 20000.0, "not NUL-terminated");
  pe_rope_cache_destroy(c);
  free(buf);
}

/* ---------------------------------------------------------------------- */
/* errors                                                                 */
/* ---------------------------------------------------------------------- */

static void expect_error(const char *json, size_t len, int64_t seq_len, pe_status want,
                         const char *needle) {
  pe_rope_cache *sentinel = (pe_rope_cache *)&want, *out = sentinel;
  pe_status st = pe_rope_cache_create_from_hf_config(json, len, 0, seq_len, PE_CONFIG_GUESS, &out);
  if (st != want)
    fail_msg("status %s, expected %s (%s) for\n%s", pe_status_string(st), pe_status_string(want),
             pe_last_error(), json ? json : "(null)");
  assert_ptr_equal(out, sentinel);
  if (!strstr(pe_last_error(), needle))
    fail_msg("message \"%s\" lacks \"%s\"", pe_last_error(), needle);
}

#define EXPECT(json, st, needle) expect_error(json, strlen(json), 0, st, needle)

static void test_errors(void **state) {
  (void)state;
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\": 64, ", PE_ERR_PARSE, "not valid JSON");
  EXPECT("", PE_ERR_PARSE, "not valid JSON");
  /* The message points at the offending character: ']' is byte 36 (from 0),
   * the 'x' after a whole object byte 36. */
  EXPECT("{\"model_type\":\"llama\",\"rope_theta\": ]}", PE_ERR_PARSE,
         "not valid JSON (error near byte 36 of 38)");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64}x", PE_ERR_PARSE,
         "trailing characters at byte 36 of 37");
  EXPECT("[1, 2]", PE_ERR_PARSE, "must be a JSON object");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64} {", PE_ERR_PARSE, "trailing characters");
  EXPECT("{\"model_type\":\"llama\"}", PE_ERR_PARSE, "hidden_size");
  EXPECT("{\"rope_theta\":10000.0,\"hidden_size\":4096}", PE_ERR_PARSE, "num_attention_heads");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":\"128\"}", PE_ERR_PARSE, "head_dim must be a number, got a string");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64.5}", PE_ERR_PARSE, "head_dim must be a positive integer");
  /* No silent 10000: a config of no known model type without rope_theta. */
  EXPECT("{\"head_dim\":64,\"rope_scaling\":{\"type\":\"mrope\"}}", PE_ERR_PARSE,
         "config.json lacks rope_theta");
  EXPECT("{\"model_type\":\"my_new_model\",\"head_dim\":64}", PE_ERR_PARSE,
         "lacks rope_theta, and its model_type \"my_new_model\" is not one libposenc knows");
  /* A known type whose default libposenc has not checked is refused too. */
  EXPECT("{\"model_type\":\"qwen3\",\"head_dim\":64}", PE_ERR_PARSE,
         "lacks rope_theta, and libposenc has not checked the default of model_type \"qwen3\"");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"rope_parameters\":{\"rope_type\":\"ntk-by-parts\"}}", PE_ERR_UNSUPPORTED,
         "rope_parameters.rope_type \"ntk-by-parts\"");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"rope_scaling\":{\"type\":7}}", PE_ERR_PARSE,
         "rope_scaling.type must be a string");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"rope_scaling\":[1]}", PE_ERR_PARSE, "rope_scaling must be an object");
  /* Per layer type, but this (one full-attention) layer's type is missing. */
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"rope_parameters\":"
         "{\"sliding_attention\":{\"rope_type\":\"default\"}}}",
         PE_ERR_PARSE, "lacks rope_parameters.full_attention");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"num_hidden_layers\":2,\"layer_types\":"
         "[\"sliding_attention\",\"full_attention\"],\"rope_parameters\":{\"full_attention\":"
         "{\"rope_type\":\"default\",\"rope_theta\":1e6},\"sliding_attention\":{\"rope_type\":"
         "\"default\",\"rope_theta\":1e4}}}",
         PE_ERR_UNSUPPORTED, "use pe_model_rope_from_hf_config");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"rope_scaling\":{\"type\":\"linear\"}}", PE_ERR_PARSE,
         "rope_scaling.factor");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"rope_scaling\":{\"type\":\"linear\",\"factor\":\"2\"}}", PE_ERR_PARSE,
         "rope_scaling.factor must be a number");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2}}", PE_ERR_PARSE,
         "max_position_embeddings");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"max_position_embeddings\":8192,\"rope_scaling\":{\"rope_type\":"
         "\"llama3\",\"factor\":8,\"high_freq_factor\":4,\"original_max_position_embeddings\":8192}}",
         PE_ERR_PARSE, "rope_scaling.low_freq_factor");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}", PE_ERR_PARSE,
         "original_max_position_embeddings");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":8,\"max_position_embeddings\":1024,\"original_max_position_embeddings\":"
         "256,\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":[1,1,1,1],"
         "\"long_factor\":[1,2,3]}}",
         PE_ERR_PARSE, "rope_scaling.long_factor has 3 entries");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":8,\"max_position_embeddings\":1024,\"original_max_position_embeddings\":"
         "256,\"rope_scaling\":{\"type\":\"longrope\",\"long_factor\":[1,1,1,1]}}",
         PE_ERR_PARSE, "rope_scaling.short_factor");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":8,\"max_position_embeddings\":1024,\"original_max_position_embeddings\":"
         "256,\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":[1,1,\"x\",1],"
         "\"long_factor\":[1,1,1,1]}}",
         PE_ERR_PARSE, "rope_scaling.short_factor[2] must be a number");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"partial_rotary_factor\":1.5}", PE_ERR_PARSE,
         "partial_rotary_factor 1.5");
  EXPECT("{\"model_type\":\"phi\",\"head_dim\":64,\"partial_rotary_factor\":0.01}", PE_ERR_PARSE,
         "rotary dim 0");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"rotary_pct\":0.3,\"max_position_embeddings\":4096,"
         "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4}}",
         PE_ERR_UNSUPPORTED, "odd rotary dim 19");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4,\"truncate\":\"no\","
         "\"original_max_position_embeddings\":4096}}",
         PE_ERR_PARSE, "rope_scaling.truncate must be a boolean");
  /* Values the config carries but the method rejects: the library's checks. */
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"max_position_embeddings\":8192,\"rope_scaling\":{\"rope_type\":"
         "\"llama3\",\"factor\":8,\"low_freq_factor\":4,\"high_freq_factor\":1,"
         "\"original_max_position_embeddings\":8192}}",
         PE_ERR_INVALID_ARGUMENT, "high_freq_factor 1");
  EXPECT("{\"rope_theta\":10000.0,\"head_dim\":64,\"rope_scaling\":{\"type\":\"linear\",\"factor\":0.5}}",
         PE_ERR_INVALID_ARGUMENT, "factor >= 1, got 0.5");
  /* Arguments. */
  expect_error(NULL, 10, 0, PE_ERR_NULL_POINTER, "json is NULL");
  expect_error("{\"head_dim\":64}", 15, -1, PE_ERR_INVALID_ARGUMENT, "seq_len -1");
  assert_int_equal(pe_rope_cache_create_from_hf_config("{}", 2, 0, 0, 0, NULL), PE_ERR_NULL_POINTER);
  /* A truncated real config (cut in the middle of the factor lists). */
  size_t len;
  char *buf = read_fixture("phi-3-mini-128k-instruct.json", &len);
  expect_error(buf, len / 2, 0, PE_ERR_PARSE, "not valid JSON");
  free(buf);
}

/* ---------------------------------------------------------------------- */
/* HF's own float32 numbers                                               */
/* ---------------------------------------------------------------------- */

/* HF's float32 inv_freq, in the order of operations of transformers' _compute_default_rope_parameters / _compute_yarn_parameters
 * records (e_i = f32(f32(2i)/d), P_i = powf(f32(B), e_i), 1/P_i; the scaled
 * types' tensor ops in float32 with Python scalars rounded to float). §7:
 * this matches torch bit for bit for bases 1e4 and 5e5. */
typedef enum { HF_DEFAULT, HF_YARN, HF_LLAMA3, HF_LONGROPE } hf_kind;

static float hf_pos_freq(double base, int i, int d) {
  float e = (float)(2 * i) / (float)d;
  return powf((float)base, e);
}

static void hf_f32_inv(hf_kind kind, int d, double base, double s, double m0, int truncate,
                       const double *ext, float *out) {
  int half = d / 2;
  double lo = 0, hi = 0;
  if (kind == HF_YARN) yarn_range(d, base, m0, 32.0, 1.0, truncate, &lo, &hi);
  for (int i = 0; i < half; i++) {
    float pf = hf_pos_freq(base, i, d);
    float inv = 1.0f / pf;
    if (kind == HF_YARN) {
      float ramp = ((float)i - (float)lo) / (float)(hi - lo);
      ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
      float e = 1.0f - ramp;
      float interp = 1.0f / ((float)s * pf);
      inv = interp * (1.0f - e) + inv * e;
    } else if (kind == HF_LLAMA3) {
      float lam = (1.0f / inv) * (float)(2.0 * PI_D);
      float lo_w = (float)(m0 / 1.0), hi_w = (float)(m0 / 4.0);
      float inv2 = lam > lo_w ? inv / (float)s : inv;
      float sm = ((1.0f / lam) * (float)m0 - 1.0f) / (float)(4.0 - 1.0);
      float smoothed = (1.0f - sm) * inv2 / (float)s + sm * inv2;
      if (!(lam < hi_w) && !(lam > lo_w)) inv2 = smoothed;
      inv = inv2;
    } else if (kind == HF_LONGROPE) {
      inv = 1.0f / ((float)ext[i] * pf);
    }
    out[i] = inv;
  }
}

/* HF's float32 exponent e_i is off by up to 2^-24 relative, which moves
 * B^e by ln(B) * e * 2^-24 relative; powf, the reciprocal and the scaled
 * types' few float32 operations add a handful of 2^-24, and our own
 * rounding half an ulp. The library (double, rounded once) must sit within
 * that budget of HF's float32 value: (ln B * e_i + 8) * 2^-24 relative. */
static double hf_check(const char *file, int64_t seq, hf_kind kind, int d, double base, double s,
                       double m0, int truncate, const double *ext) {
  pe_rope_cache *c = load(file, 0, seq);
  float got[MAXH], hf[MAXH];
  assert_int_equal(pe_rope_cache_inv_freq(c, got), PE_OK);
  hf_f32_inv(kind, d, base, s, m0, truncate, ext, hf);
  double worst = 0.0;
  for (int i = 0; i < d / 2; i++) {
    double e = (double)(2 * i) / d;
    double budget = (log(base) * e + 8.0) * 0x1p-24 * fabs((double)hf[i]);
    double err = fabs((double)got[i] - (double)hf[i]);
    if (err / budget > worst) worst = err / budget;
    if (err > budget)
      fail_msg("%s: inv_freq[%d] = %.9g, HF float32 %.9g (%.1f ulp, budget %.1f)", file, i,
               (double)got[i], (double)hf[i], err / ulp_f32(hf[i]), budget / ulp_f32(hf[i]));
  }
  pe_rope_cache_destroy(c);
  return worst;
}

static void test_kimi_k2(void **state) {
  (void)state;
  /* model_type kimi_k2 runs DeepSeek-V3's code (auto_map): interleaved pairs
   * on the 64-channel rope slice; YaRN with beta_fast == beta_slow == 1,
   * which transformers computes: the correction dim 64 ln(4096 / 2pi) /
   * (2 ln 50000) = 19.16 gives the range [floor, ceil] = [19, 20]. */
  pe_rope_cache *c = load("kimi-k2-instruct-0905.json", 0, 0);
  expect_geometry(c, 64, 64, PE_ROPE_GPTJ, PE_ROPE_SCALING_YARN, 50000.0, "kimi-k2");
  pe_rope_params p = params_of(c);
  assert_true(p.factor == 64.0 && p.original_max_positions == 4096);
  assert_true(p.beta_fast == 1.0 && p.beta_slow == 1.0);
  double ref[32], lo, hi;
  ref_yarn_range(64, 50000.0, 64.0, 4096.0, 1.0, 1.0, 1, ref, &lo, &hi);
  assert_true(lo == 19.0 && hi == 20.0);
  expect_inv(c, ref, 32, "kimi-k2 yarn");
  for (int i = 0; i < 32; i++) /* the step: original up to 19, divided by 64 from 20 */
    assert_true(ref[i] == (i <= 19 ? ref_default(50000.0, i, 64)
                                   : 1.0 / (64.0 * pow(50000.0, (double)(2 * i) / 64))));
  /* mscale == mscale_all_dim: attention factor 1; DeepSeek's softmax factor mscale(64, 1)^2. */
  assert_true(pe_rope_cache_attention_factor(c) == 1.0);
  double m = ref_mscale(64.0, 1.0);
  expect_close(pe_rope_cache_softmax_scale(c), m * m, 1e-12, "kimi-k2 softmax");
  pe_rope_cache_destroy(c);
  /* Kimi-K2.5 nests the same text model in text_config. */
  c = load_text("{\"model_type\":\"kimi_k25\",\"text_config\":{\"model_type\":\"kimi_k2\","
                "\"qk_rope_head_dim\":64,\"rope_theta\":50000.0,\"max_position_embeddings\":262144}}",
                0);
  expect_geometry(c, 64, 64, PE_ROPE_GPTJ, PE_ROPE_SCALING_NONE, 50000.0, "kimi-k2.5 text_config");
  pe_rope_cache_destroy(c);
}

static void test_mla_pairing(void **state) {
  (void)state;
  /* DeepseekV3Attention and the classes built on it pair interleaved unless
   * rope_interleave is false: GLM-4.7-Flash (glm4_moe_lite). */
  static const char *const types[] = {"deepseek_v3", "kimi_k2", "glm4_moe_lite"};
  for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
    char cfg[256];
    snprintf(cfg, sizeof cfg, "{\"model_type\":\"%s\",\"qk_rope_head_dim\":64,\"rope_theta\":10000.0}",
             types[k]);
    pe_rope_cache *c = load_text(cfg, 0);
    expect_geometry(c, 64, 64, PE_ROPE_GPTJ, PE_ROPE_SCALING_NONE, 10000.0, types[k]);
    pe_rope_cache_destroy(c);
    snprintf(cfg, sizeof cfg, "{\"model_type\":\"%s\",\"qk_rope_head_dim\":64,\"rope_theta\":10000.0,"
             "\"rope_interleave\":false}", types[k]);
    c = load_text(cfg, 0);
    expect_geometry(c, 64, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 10000.0, types[k]);
    pe_rope_cache_destroy(c);
  }
}

static void test_second_rotation_refused(void **state) {
  (void)state;
  /* DeepSeek-V3.2 and GLM-5 rotate a sparse-attention indexer beside the MLA
   * (the first qk_rope_head_dim channels of index_head_dim); DeepSeek-V4 a
   * compressor. One cache cannot say that: refused, the key named, rather
   * than a cache an engine would also apply to the indexer. */
  expect_refused("{\"model_type\":\"deepseek_v32\",\"qk_rope_head_dim\":64,\"rope_theta\":10000.0,"
                 "\"index_head_dim\":128,\"index_n_heads\":64,\"index_topk\":2048}",
                 PE_ERR_UNSUPPORTED, "pe_model_rope_layer_role");
  expect_refused("{\"model_type\":\"deepseek_v32\",\"qk_rope_head_dim\":64,\"rope_theta\":10000.0}",
                 PE_ERR_UNSUPPORTED, "indexer");
  expect_refused("{\"model_type\":\"glm_moe_dsa\",\"qk_rope_head_dim\":64,\"rope_theta\":1e6,"
                 "\"index_topk\":2048}", PE_ERR_UNSUPPORTED, "indexer");
  expect_refused("{\"model_type\":\"deepseek_v4\",\"head_dim\":512,\"rope_theta\":10000.0}",
                 PE_ERR_UNSUPPORTED, "compressor");
  expect_refused("{\"model_type\":\"deepseek_v4\",\"head_dim\":512,\"rope_theta\":10000.0,"
                 "\"compress_rope_theta\":160000.0}", PE_ERR_UNSUPPORTED, "compressor");
  /* The indexer keys on a type whose class has no indexer: named, not dropped. */
  expect_refused("{\"model_type\":\"deepseek_v3\",\"qk_rope_head_dim\":64,\"rope_theta\":10000.0,"
                 "\"index_head_dim\":128}", PE_ERR_UNSUPPORTED, "index_head_dim");
}

static void test_rotary_width(void **state) {
  (void)state;
  /* MiniMaxM2Config: partial_rotary_factor = rotary_dim / head_dim whatever
   * the file says (default rotary_dim head_dim // 2); then int(head_dim * it). */
  pe_rope_cache *c = load("minimax-m2.json", 0, 0);
  expect_geometry(c, 128, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 5e6, "minimax-m2");
  double ref[64];
  for (int i = 0; i < 32; i++) ref[i] = ref_default(5e6, i, 64);
  expect_inv(c, ref, 32, "minimax-m2");
  pe_rope_cache_destroy(c);
  static const struct { const char *extra; int rd; } mm[] = {
      {"\"partial_rotary_factor\":0.5", 64},  /* no rotary_dim: head_dim // 2 */
      {"\"partial_rotary_factor\":1.0", 64},  /* overwritten by the default */
      {"\"rotary_dim\":32,\"partial_rotary_factor\":0.5", 32},
      {"\"rotary_dim\":128", 128}};
  for (size_t k = 0; k < sizeof mm / sizeof mm[0]; k++) {
    char cfg[256];
    snprintf(cfg, sizeof cfg, "{\"model_type\":\"minimax_m2\",\"head_dim\":128,%s}", mm[k].extra);
    c = load_text(cfg, 0);
    expect_geometry(c, 128, mm[k].rd, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 5e6, cfg);
    pe_rope_cache_destroy(c);
  }
  /* MiMo-V2-Flash: int(192 * 0.334) = int(64.128) = 64. */
  assert_int_equal((int)(192 * 0.334), 64);
  c = load_text("{\"model_type\":\"mimo_v2_flash\",\"head_dim\":192,\"partial_rotary_factor\":0.334,"
                "\"rope_theta\":5e6}", 0);
  expect_geometry(c, 192, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 5e6, "mimo-v2-flash");
  for (int i = 0; i < 32; i++) ref[i] = ref_default(5e6, i, 64);
  expect_inv(c, ref, 32, "mimo-v2-flash");
  pe_rope_cache_destroy(c);
  /* A model type libposenc does not know: the file's partial factor (or
   * rotary_dim) is the width; the pairing is reported as guessed. */
  c = load_text("{\"model_type\":\"brand_new_lm\",\"head_dim\":128,\"partial_rotary_factor\":0.5,"
                "\"rope_theta\":10000.0}", 0);
  expect_geometry(c, 128, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 10000.0, "unknown prf");
  pe_rope_cache_destroy(c);
  c = load_text("{\"model_type\":\"brand_new_lm\",\"head_dim\":128,\"rotary_dim\":32,"
                "\"rope_theta\":10000.0}", 0);
  expect_geometry(c, 128, 32, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 10000.0, "unknown rotary_dim");
  pe_rope_cache_destroy(c);
}

static void test_no_positional_encoding(void **state) {
  (void)state;
  /* Attention classes without a rotary embedding, whatever the config's
   * rope_theta: NemotronHAttention, JambaAttention, GraniteMoeHybrid unless
   * position_embedding_type is "rope", Kimi-Linear's mla_use_nope. */
  expect_refused("{\"model_type\":\"nemotron_h\",\"head_dim\":128,\"rope_theta\":10000.0,"
                 "\"num_hidden_layers\":4}", PE_ERR_UNSUPPORTED, "no positional encoding");
  expect_refused("{\"model_type\":\"jamba\",\"head_dim\":128,\"num_hidden_layers\":4}",
                 PE_ERR_UNSUPPORTED, "no positional encoding");
  expect_refused("{\"model_type\":\"granitemoehybrid\",\"head_dim\":128,\"rope_theta\":10000.0,"
                 "\"position_embedding_type\":\"nope\"}", PE_ERR_UNSUPPORTED, "position_embedding_type");
  expect_refused("{\"model_type\":\"granitemoehybrid\",\"head_dim\":128,\"rope_theta\":10000.0}",
                 PE_ERR_UNSUPPORTED, "position_embedding_type");
  const char *kl = "{\"model_type\":\"kimi_linear\",\"qk_rope_head_dim\":64,\"rope_theta\":10000.0,"
                   "\"mla_use_nope\":true}";
  pe_rope_cache *kc = NULL;
  assert_int_equal(pe_rope_cache_create_from_hf_config(kl, strlen(kl), 0, 0, PE_CONFIG_GUESS, &kc),
                   PE_ERR_UNSUPPORTED);
  assert_non_null(strstr(pe_last_error(), "mla_use_nope"));
  assert_null(kc);
  pe_rope_cache *c = load_text("{\"model_type\":\"granitemoehybrid\",\"head_dim\":128,"
                               "\"rope_theta\":10000.0,\"position_embedding_type\":\"rope\"}", 0);
  expect_geometry(c, 128, 128, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 10000.0, "granite rope");
  pe_rope_cache_destroy(c);
}

static void test_matches_hf_float32(void **state) {
  (void)state;
  double w = 0.0;
  w = fmax(w, hf_check("llama-3.1-8b.json", 0, HF_LLAMA3, 128, 500000.0, 8.0, 8192.0, 1, NULL));
  w = fmax(w, hf_check("qwen2.5-7b-instruct-yarn.json", 0, HF_YARN, 128, 1e6, 4.0, 32768.0, 1, NULL));
  w = fmax(w, hf_check("deepseek-v3.json", 0, HF_YARN, 64, 10000.0, 40.0, 4096.0, 1, NULL));
  w = fmax(w, hf_check("gpt-oss-20b.json", 0, HF_YARN, 64, 150000.0, 32.0, 4096.0, 0, NULL));
  w = fmax(w, hf_check("phi-3-mini-128k-instruct.json", 0, HF_LONGROPE, 96, 10000.0, 32.0, 4096.0, 1,
                       phi3_long));
  w = fmax(w, hf_check("phi-3-mini-128k-instruct.json", 4096, HF_LONGROPE, 96, 10000.0, 32.0, 4096.0,
                       1, phi3_short));
  w = fmax(w, hf_check("gpt-neox-20b.json", 0, HF_DEFAULT, 24, 10000.0, 1, 0, 1, NULL));
  w = fmax(w, hf_check("gpt-j-6b.json", 0, HF_DEFAULT, 64, 10000.0, 1, 0, 1, NULL));
  w = fmax(w, hf_check("mistral-7b-v0.1.json", 0, HF_DEFAULT, 128, 10000.0, 1, 0, 1, NULL));
  w = fmax(w, hf_check("codellama-7b.json", 0, HF_DEFAULT, 128, 1e6, 1, 0, 1, NULL));
  print_message("HF float32 agreement: worst %.2f of the float32 budget\n", w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_llama31),
      cmocka_unit_test(test_qwen25_yarn),
      cmocka_unit_test(test_phi3_longrope),
      cmocka_unit_test(test_deepseek_v3),
      cmocka_unit_test(test_gpt_oss),
      cmocka_unit_test(test_unscaled_models),
      cmocka_unit_test(test_v5_rope_parameters),
      cmocka_unit_test(test_dynamic_uses_m),
      cmocka_unit_test(test_partial_rotary),
      cmocka_unit_test(test_odd_rotary_dim),
      cmocka_unit_test(test_proportional),
      cmocka_unit_test(test_style_and_legacy_names),
      cmocka_unit_test(test_not_nul_terminated),
      cmocka_unit_test(test_kimi_k2),
      cmocka_unit_test(test_mla_pairing),
      cmocka_unit_test(test_second_rotation_refused),
      cmocka_unit_test(test_rotary_width),
      cmocka_unit_test(test_no_positional_encoding),
      cmocka_unit_test(test_matches_hf_float32),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
