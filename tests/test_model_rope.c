/* test_model_rope.c - pe_model_rope_from_hf_config on the published
 * config.json of models whose layers differ (tests/data/configs, provenance in
 * tests/data/configs/README.md), and the Gemma-4 layout of
 * PE_ROPE_SCALING_PROPORTIONAL.
 *
 * Expected values are written here from transformers' source, never from
 * src/: which layers have RoPE and with which base/type per model class
 * (Gemma3TextConfig, ModernBertConfig, Cohere2Attention, Llama4TextConfig
 * no_rope_layers, Exaone4Attention, Qwen3NextConfig layer_types, GptOssConfig)
 * and the frequencies of modeling_rope_utils' _compute_*_parameters,
 * evaluated in float64 below: default B^(-2i/d), linear /s, llama3 bands,
 * yarn's ramp, proportional's head_dim denominator with zero tail.
 * Frequencies are compared within 1 float32 ulp (the library rounds its
 * double frequencies once).
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
/* float64 references (transformers' formulas)                            */
/* ---------------------------------------------------------------------- */

typedef enum ref_kind { R_DEFAULT, R_LINEAR, R_LLAMA3, R_YARN_NOTRUNC } ref_kind;

typedef struct ref_rope {
  ref_kind kind;
  double base;
  int d;          /* the exponent's denominator: rotary dim */
  double s;       /* factor */
  double m0;      /* original_max_position_embeddings */
  double low, high;
} ref_rope;

static double ref_inv(const ref_rope *r, int i) {
  double f = pow(r->base, -(2.0 * i) / r->d);
  switch (r->kind) {
    case R_DEFAULT:
      return f;
    case R_LINEAR:
      return f / r->s;
    case R_LLAMA3: {
      /* _compute_llama3_parameters */
      double wl = 2.0 * PI_D / f, lo_wl = r->m0 / r->low, hi_wl = r->m0 / r->high;
      if (wl > lo_wl) return f / r->s;
      if (wl < hi_wl) return f;
      double sm = (r->m0 / wl - r->low) / (r->high - r->low);
      return (1.0 - sm) * f / r->s + sm * f;
    }
    case R_YARN_NOTRUNC: {
      /* _compute_yarn_parameters, beta_fast 32, beta_slow 1, truncate False */
      double lo = r->d * log(r->m0 / (32.0 * 2.0 * PI_D)) / (2.0 * log(r->base));
      double hi = r->d * log(r->m0 / (1.0 * 2.0 * PI_D)) / (2.0 * log(r->base));
      if (lo < 0) lo = 0;
      if (hi > r->d - 1) hi = r->d - 1;
      double ramp = (i - lo) / (hi - lo);
      ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
      double extrap = 1.0 - ramp;
      return f / r->s * (1.0 - extrap) + f * extrap;
    }
  }
  return NAN;
}

/* ---------------------------------------------------------------------- */
/* loading                                                                */
/* ---------------------------------------------------------------------- */

/* What transformers gives one layer. */
typedef struct want {
  int head_dim, rotary_dim;
  pe_rope_style style;
  pe_rope_scaling scaling;
  double factor;     /* checked when scaling != NONE */
  double attention;  /* attention factor */
  ref_rope ref;
} want;

static void expect_layer(const char *what, const pe_model_rope *m, int layer, const want *w) {
  const pe_rope_cache *c = pe_model_rope_layer(m, layer);
  if (!c) fail_msg("%s layer %d: no RoPE, expected base %g", what, layer, w->ref.base);
  pe_rope_params p;
  pe_rope_params_init(&p);
  assert_int_equal(pe_rope_cache_params(c, &p), PE_OK);
  if (p.head_dim != w->head_dim || p.rotary_dim != w->rotary_dim || p.style != w->style ||
      p.scaling != w->scaling || p.base != w->ref.base)
    fail_msg("%s layer %d: head_dim %d rotary_dim %d style %d scaling %d base %g; expected %d %d "
             "%d %d %g",
             what, layer, p.head_dim, p.rotary_dim, p.style, p.scaling, p.base, w->head_dim,
             w->rotary_dim, w->style, w->scaling, w->ref.base);
  if (w->scaling != PE_ROPE_SCALING_NONE && p.factor != w->factor)
    fail_msg("%s layer %d: factor %g, expected %g", what, layer, p.factor, w->factor);
  double af = pe_rope_cache_attention_factor(c);
  if (fabs(af - w->attention) > 1e-12 * w->attention)
    fail_msg("%s layer %d: attention factor %.17g, expected %.17g", what, layer, af, w->attention);
  float got[MAXH / 2];
  assert_int_equal(pe_rope_cache_inv_freq(c, got), PE_OK);
  for (int i = 0; i < p.rotary_dim / 2; i++) {
    double ref = ref_inv(&w->ref, i);
    if (fabs((double)got[i] - ref) > ulp_f32(ref))
      fail_msg("%s layer %d: inv_freq[%d] = %.9g, transformers %.17g", what, layer, i,
               (double)got[i], ref);
  }
}

static void expect_nope(const char *what, const pe_model_rope *m, int layer) {
  if (pe_model_rope_layer(m, layer) != NULL) fail_msg("%s layer %d: has RoPE, expected none", what, layer);
}

static int distinct_caches(const pe_model_rope *m) {
  const pe_rope_cache *seen[64];
  int n = 0;
  for (int i = 0; i < pe_model_rope_num_layers(m); i++) {
    const pe_rope_cache *c = pe_model_rope_layer(m, i);
    if (!c) continue;
    int k;
    for (k = 0; k < n; k++)
      if (seen[k] == c) break;
    if (k == n) {
      assert_true(n < 64);
      seen[n++] = c;
    }
  }
  return n;
}

/* ---------------------------------------------------------------------- */
/* Gemma                                                                  */
/* ---------------------------------------------------------------------- */

/* Gemma3TextConfig: layer i is global iff (i + 1) % sliding_window_pattern
 * == 0 (6); globals take rope_theta and rope_scaling, locals the default rope
 * at rope_local_base_freq. */
static void check_gemma3(const char *name, int layers, int head_dim, int scaled) {
  pe_model_rope *m = model_file(name);
  assert_int_equal(pe_model_rope_num_layers(m), layers);
  assert_int_equal(pe_model_rope_pairing_guessed(m), 0);
  want local = {head_dim, head_dim, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1.0, 1.0,
                {R_DEFAULT, 10000.0, head_dim, 1, 0, 0, 0}};
  want global = {head_dim, head_dim, PE_ROPE_NEOX,
                 scaled ? PE_ROPE_SCALING_LINEAR : PE_ROPE_SCALING_NONE, 8.0, 1.0,
                 {scaled ? R_LINEAR : R_DEFAULT, 1000000.0, head_dim, 8.0, 0, 0, 0}};
  for (int i = 0; i < layers; i++) expect_layer(name, m, i, (i + 1) % 6 ? &local : &global);
  /* Two caches: every local layer shares one, every global one. */
  assert_int_equal(distinct_caches(m), 2);
  assert_ptr_equal(pe_model_rope_layer(m, 0), pe_model_rope_layer(m, 4));
  assert_ptr_equal(pe_model_rope_layer(m, 5), pe_model_rope_layer(m, 11));
  pe_model_rope_destroy(m);
}

static void test_gemma3(void **state) {
  (void)state;
  check_gemma3("per_layer/gemma-3-1b-it.json", 26, 256, 0);
  /* 4b: minimal text_config - head_dim, heads and rope_theta from
   * Gemma3TextConfig's defaults (256, 8, 1e6). */
  check_gemma3("per_layer/gemma-3-4b-it.json", 34, 256, 1);
  /* 12b: hidden 3840 / 16 heads would be 240; the class default head_dim 256 wins. */
  check_gemma3("per_layer/gemma-3-12b-it.json", 48, 256, 1);
  check_gemma3("per_layer/gemma-3-27b-it.json", 62, 128, 1);
  size_t len;
  char *buf = read_fixture("per_layer/gemma-3-4b-it.json", &len);
  pe_model_rope *m = NULL;
  assert_int_equal(pe_model_rope_from_hf_config(buf, len, 0, 0, 0, &m), PE_OK);
  int32_t h = 0, kv = 0;
  assert_int_equal(pe_model_rope_heads(m, &h, &kv), PE_OK);
  assert_int_equal(h, 8); /* text_config's defaults, not the vision tower's 16 */
  assert_int_equal(kv, 4);
  pe_model_rope_destroy(m);
  /* The one-cache loader refuses it by name instead of one base for all. */
  pe_rope_cache *c = (pe_rope_cache *)&len, *sentinel = c;
  assert_int_equal(pe_rope_cache_create_from_hf_config(buf, len, 0, 0, 0, &c), PE_ERR_UNSUPPORTED);
  assert_ptr_equal(c, sentinel);
  assert_non_null(strstr(pe_last_error(), "pe_model_rope_from_hf_config"));
  free(buf);
}

static void test_gemma3n(void **state) {
  (void)state;
  /* layer_types as shipped: full every 5th layer (i = 4, 9, ...). */
  pe_model_rope *m = model_file("per_layer/gemma-3n-e4b-it.json");
  assert_int_equal(pe_model_rope_num_layers(m), 35);
  want local = {256, 256, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 10000.0, 256, 1, 0, 0, 0}};
  want global = {256, 256, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 1e6, 256, 1, 0, 0, 0}};
  for (int i = 0; i < 35; i++) expect_layer("gemma-3n-E4B", m, i, (i + 1) % 5 ? &local : &global);
  assert_int_equal(distinct_caches(m), 2);
  pe_model_rope_destroy(m);
}

/* transformers v5 rope_parameters keyed by layer type, with layer_types. */
static void test_v5_per_layer_type(void **state) {
  (void)state;
  pe_model_rope *m = model_text(
      "{\"model_type\":\"gemma3_text\",\"head_dim\":64,\"num_hidden_layers\":4,"
      "\"layer_types\":[\"sliding_attention\",\"full_attention\",\"sliding_attention\","
      "\"full_attention\"],\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"linear\","
      "\"factor\":4.0,\"rope_theta\":500000.0},\"sliding_attention\":{\"rope_type\":\"default\","
      "\"rope_theta\":10000.0}}}", 0);
  want sl = {64, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 10000.0, 64, 1, 0, 0, 0}};
  want fu = {64, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_LINEAR, 4, 1, {R_LINEAR, 500000.0, 64, 4, 0, 0, 0}};
  for (int i = 0; i < 4; i++) expect_layer("v5", m, i, i % 2 ? &fu : &sl);
  pe_model_rope_destroy(m);
}

/* Layers share a cache only when they rotate alike AND report the same
 * parameters: layer types differing in one scaling field the frequencies
 * may not show (a LongRoPE long_factor, a YaRN beta_fast whose correction
 * range rounds to the same channels, a llama3 low_freq_factor no
 * wavelength reaches) each keep their own values. */
static void expect_two_types(const char *what, int max_pos, const char *full, const char *sliding,
                             void (*check)(const char *, int, const pe_rope_params *)) {
  char json[1024];
  snprintf(json, sizeof json,
           "{\"model_type\":\"gemma3_text\",\"head_dim\":8,\"num_hidden_layers\":2,"
           "\"max_position_embeddings\":%d,\"layer_types\":[\"sliding_attention\","
           "\"full_attention\"],\"rope_parameters\":{\"full_attention\":%s,"
           "\"sliding_attention\":%s}}",
           max_pos, full, sliding);
  pe_model_rope *m = model_text(json, 0);
  for (int i = 0; i < 2; i++) {
    pe_rope_params p;
    pe_rope_params_init(&p);
    assert_int_equal(pe_rope_cache_params(pe_model_rope_layer(m, i), &p), PE_OK);
    check(what, i, &p); /* layer 0 sliding, layer 1 full */
  }
  assert_int_equal(distinct_caches(m), 2);
  pe_model_rope_destroy(m);
}

static void check_long(const char *what, int layer, const pe_rope_params *p) {
  const float want_short[4] = {1, 1, 1, 1}, want_long[2][4] = {{1, 2, 3, 4}, {1, 2, 3, 5}};
  assert_int_equal(p->scaling, PE_ROPE_SCALING_LONGROPE);
  for (int i = 0; i < 4; i++)
    if (p->short_factor[i] != want_short[i] || p->long_factor[i] != want_long[layer][i])
      fail_msg("%s layer %d: short/long_factor[%d] = %g / %g, the config says %g / %g", what,
               layer, i, p->short_factor[i], p->long_factor[i], want_short[i],
               want_long[layer][i]);
}

static void check_beta(const char *what, int layer, const pe_rope_params *p) {
  assert_int_equal(p->scaling, PE_ROPE_SCALING_YARN);
  if (p->beta_fast != (layer ? 33.0 : 32.0))
    fail_msg("%s layer %d: beta_fast %g, the config says %g", what, layer, p->beta_fast,
             layer ? 33.0 : 32.0);
}

static void check_linear1(const char *what, int layer, const pe_rope_params *p) {
  if (p->scaling != (layer ? PE_ROPE_SCALING_LINEAR : PE_ROPE_SCALING_NONE))
    fail_msg("%s layer %d: scaling %d, the config says %s", what, layer, p->scaling,
             layer ? "linear" : "default");
}

static void check_low(const char *what, int layer, const pe_rope_params *p) {
  assert_int_equal(p->scaling, PE_ROPE_SCALING_LLAMA3);
  if (p->low_freq_factor != (layer ? 2.0 : 1.0))
    fail_msg("%s layer %d: low_freq_factor %g, the config says %g", what, layer,
             p->low_freq_factor, layer ? 2.0 : 1.0);
}

static void test_v5_layer_types_differing_in_one_field(void **state) {
  (void)state;
  /* Up to M0 positions the caches rotate by short_factor alone. */
  expect_two_types("longrope", 4096,
                   "{\"rope_type\":\"longrope\",\"rope_theta\":10000.0,"
                   "\"original_max_position_embeddings\":4096,\"short_factor\":[1,1,1,1],"
                   "\"long_factor\":[1,2,3,5]}",
                   "{\"rope_type\":\"longrope\",\"rope_theta\":10000.0,"
                   "\"original_max_position_embeddings\":4096,\"short_factor\":[1,1,1,1],"
                   "\"long_factor\":[1,2,3,4]}",
                   check_long);
  /* linear x1 rotates as the default rope, and says it is linear */
  expect_two_types("linear x1", 32768, "{\"rope_type\":\"linear\",\"factor\":1.0,\"rope_theta\":1e4}",
                   "{\"rope_type\":\"default\",\"rope_theta\":1e4}", check_linear1);
  /* head_dim 8, base 1e4, M0 4096: D(32) = 1.31 and D(33) = 1.30 both floor
   * to channel 1 (truncate), the same frequencies. */
  expect_two_types("yarn", 32768,
                   "{\"rope_type\":\"yarn\",\"rope_theta\":10000.0,\"factor\":8.0,"
                   "\"original_max_position_embeddings\":4096,\"beta_fast\":33.0}",
                   "{\"rope_type\":\"yarn\",\"rope_theta\":10000.0,\"factor\":8.0,"
                   "\"original_max_position_embeddings\":4096,\"beta_fast\":32.0}",
                   check_beta);
  /* Wavelengths 2 pi 1e4^(2i/8) <= 6284 are all below M0 / high_freq_factor
   * (262144 / 4): no channel is scaled at either low_freq_factor. */
  expect_two_types("llama3", 32768,
                   "{\"rope_type\":\"llama3\",\"rope_theta\":10000.0,\"factor\":8.0,"
                   "\"original_max_position_embeddings\":262144,\"low_freq_factor\":2.0,"
                   "\"high_freq_factor\":4.0}",
                   "{\"rope_type\":\"llama3\",\"rope_theta\":10000.0,\"factor\":8.0,"
                   "\"original_max_position_embeddings\":262144,\"low_freq_factor\":1.0,"
                   "\"high_freq_factor\":4.0}",
                   check_low);
}

/* ---------------------------------------------------------------------- */
/* ModernBERT, Cohere2, Llama 4, EXAONE 4, Qwen3-Next, gpt-oss, Qwen-VL    */
/* ---------------------------------------------------------------------- */

static void test_modernbert(void **state) {
  (void)state;
  /* ModernBertConfig: global iff i % global_attn_every_n_layers == 0 (3). */
  pe_model_rope *m = model_file("per_layer/modernbert-base.json");
  assert_int_equal(pe_model_rope_num_layers(m), 22);
  want local = {64, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 10000.0, 64, 1, 0, 0, 0}};
  want global = {64, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 160000.0, 64, 1, 0, 0, 0}};
  for (int i = 0; i < 22; i++) expect_layer("ModernBERT-base", m, i, i % 3 ? &local : &global);
  assert_int_equal(distinct_caches(m), 2);
  pe_model_rope_destroy(m);
}

static void test_cohere2(void **state) {
  (void)state;
  /* Cohere2Attention rotates only on sliding layers (sliding iff
   * (i+1) % 4 != 0), interleaved pairs (rotate_half on x[..., ::2]). */
  pe_model_rope *m = model_file("per_layer/c4ai-command-r7b-12-2024.json");
  assert_int_equal(pe_model_rope_num_layers(m), 32);
  want w = {128, 128, PE_ROPE_GPTJ, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 50000.0, 128, 1, 0, 0, 0}};
  for (int i = 0; i < 32; i++) {
    if ((i + 1) % 4)
      expect_layer("Command-R7B", m, i, &w);
    else
      expect_nope("Command-R7B", m, i);
  }
  assert_int_equal(distinct_caches(m), 1);
  double fs, as;
  assert_int_equal(pe_model_rope_nope_temperature(m, 3, &fs, &as), PE_OK);
  assert_true(as == 0.0); /* no temperature tuning outside Llama 4 */
  pe_model_rope_destroy(m);
  /* Cohere (Command-R): one rope, interleaved, from the one-cache loader too. */
  const char *cr = "{\"model_type\":\"cohere\",\"hidden_size\":8192,\"num_attention_heads\":64,"
                   "\"num_hidden_layers\":40,\"rope_theta\":8000000.0}";
  pe_rope_cache *c = NULL;
  assert_int_equal(pe_rope_cache_create_from_hf_config(cr, strlen(cr), 0, 0, 0, &c), PE_OK);
  pe_rope_params p;
  pe_rope_params_init(&p);
  assert_int_equal(pe_rope_cache_params(c, &p), PE_OK);
  assert_int_equal(p.style, PE_ROPE_GPTJ);
  assert_int_equal(p.head_dim, 128);
  pe_rope_cache_destroy(c);
  /* The one-cache loader refuses Cohere2's NoPE layers by name. */
  size_t len;
  char *buf = read_fixture("per_layer/c4ai-command-r7b-12-2024.json", &len);
  c = NULL;
  assert_int_equal(pe_rope_cache_create_from_hf_config(buf, len, 0, 0, 0, &c), PE_ERR_UNSUPPORTED);
  assert_null(c);
  assert_non_null(strstr(pe_last_error(), "attention layers without RoPE"));
  assert_non_null(strstr(pe_last_error(), "pe_model_rope_from_hf_config"));
  free(buf);
}

static void test_llama4(void **state) {
  (void)state;
  /* no_rope_layers[i] == 1: RoPE (Llama4TextAttention.use_rope); llama3 with
   * low_freq_factor == high_freq_factor == 1: no band. */
  pe_model_rope *m = model_file("per_layer/llama-4-scout-17b-16e-instruct.json");
  assert_int_equal(pe_model_rope_num_layers(m), 48);
  want w = {128, 128, PE_ROPE_GPTJ, PE_ROPE_SCALING_LLAMA3, 16, 1,
            {R_LLAMA3, 500000.0, 128, 16.0, 8192.0, 1.0, 1.0}};
  for (int i = 0; i < 48; i++) {
    double fs = -1, as = -1;
    assert_int_equal(pe_model_rope_nope_temperature(m, i, &fs, &as), PE_OK);
    if ((i + 1) % 4) {
      expect_layer("Llama-4-Scout", m, i, &w);
      assert_true(fs == 1.0 && as == 0.0);
    } else {
      expect_nope("Llama-4-Scout", m, i);
      /* attn_temperature_tuning 4 (truthy): floor_scale 8192, attn_scale 0.1 */
      assert_true(fs == 8192.0 && as == 0.1);
    }
  }
  int32_t h, kv;
  assert_int_equal(pe_model_rope_heads(m, &h, &kv), PE_OK);
  assert_int_equal(h, 40);
  assert_int_equal(kv, 8);
  pe_model_rope_destroy(m);
  /* A list that is not every 4th layer is read as it is (1 = RoPE), by
   * Llama 4 and by SmolLM3 (SmolLM3Attention.use_rope). */
  static const char *const lists[] = {
      "{\"model_type\":\"llama4_text\",\"num_hidden_layers\":8,\"no_rope_layers\":[1,0,0,1,1,1,"
      "1,1],\"attn_temperature_tuning\":false,\"rope_theta\":500000.0}",
      "{\"model_type\":\"smollm3\",\"hidden_size\":2048,\"num_attention_heads\":16,"
      "\"num_hidden_layers\":8,\"rope_theta\":500000.0,\"no_rope_layers\":[1,0,0,1,1,1,1,1]}"};
  for (int k = 0; k < 2; k++) {
    m = model_text(lists[k], 0);
    want r = {128, 128, k ? PE_ROPE_NEOX : PE_ROPE_GPTJ, PE_ROPE_SCALING_NONE, 1, 1,
              {R_DEFAULT, 500000.0, 128, 1, 0, 0, 0}};
    for (int i = 0; i < 8; i++) {
      if (i == 1 || i == 2) expect_nope(lists[k], m, i);
      else expect_layer(lists[k], m, i, &r);
    }
    pe_model_rope_destroy(m);
  }
  /* An empty no_rope_layers means every 4th layer (no_rope_layer_interval). */
  m = model_text("{\"model_type\":\"llama4_text\",\"num_hidden_layers\":8,\"no_rope_layers\":[],"
                "\"attn_temperature_tuning\":false,\"rope_theta\":500000.0}", 0);
  want d = {128, 128, PE_ROPE_GPTJ, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 500000.0, 128, 1, 0, 0, 0}};
  for (int i = 0; i < 8; i++) {
    if ((i + 1) % 4) expect_layer("llama4 interval", m, i, &d);
    else expect_nope("llama4 interval", m, i);
    double fs, as;
    assert_int_equal(pe_model_rope_nope_temperature(m, i, &fs, &as), PE_OK);
    assert_true(as == 0.0); /* tuning off */
  }
  pe_model_rope_destroy(m);
}

static void test_exaone4(void **state) {
  (void)state;
  /* Exaone4Attention: rope iff sliding_window is None or the layer slides. */
  pe_model_rope *m = model_file("per_layer/exaone-4.0-32b.json");
  assert_int_equal(pe_model_rope_num_layers(m), 64);
  want w = {128, 128, PE_ROPE_NEOX, PE_ROPE_SCALING_LLAMA3, 16, 1,
            {R_LLAMA3, 1e6, 128, 16.0, 8192.0, 1.0, 4.0}};
  for (int i = 0; i < 64; i++) {
    if ((i + 1) % 4) expect_layer("EXAONE-4.0-32B", m, i, &w);
    else expect_nope("EXAONE-4.0-32B", m, i);
  }
  pe_model_rope_destroy(m);
  /* sliding_window null (EXAONE-4.0-1.2B style): every layer rotates. */
  m = model_text("{\"model_type\":\"exaone4\",\"num_hidden_layers\":4,\"head_dim\":64,"
                "\"sliding_window\":null,\"layer_types\":[\"full_attention\",\"full_attention\","
                "\"full_attention\",\"full_attention\"],\"rope_theta\":1000000}", 0);
  want d = {64, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 1e6, 64, 1, 0, 0, 0}};
  for (int i = 0; i < 4; i++) expect_layer("exaone4 global rope", m, i, &d);
  pe_model_rope_destroy(m);
  /* A pattern string: L local, G global, the last layer global. */
  m = model_text("{\"model_type\":\"exaone4\",\"num_hidden_layers\":6,\"head_dim\":64,"
                "\"sliding_window\":4096,\"sliding_window_pattern\":\"LLG\",\"rope_theta\":1000000}", 0);
  for (int i = 0; i < 6; i++) {
    if (i == 2 || i == 5) expect_nope("exaone4 LLG", m, i);
    else expect_layer("exaone4 LLG", m, i, &d);
  }
  pe_model_rope_destroy(m);
}

static void test_qwen3_next(void **state) {
  (void)state;
  /* Qwen3NextConfig layer_types: full attention iff (i+1) % 4 == 0, the
   * rest linear attention (no RoPE); partial_rotary_factor 0.25 of 256. */
  pe_model_rope *m = model_file("qwen3-next-80b-a3b-instruct.json");
  assert_int_equal(pe_model_rope_num_layers(m), 48);
  want w = {256, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 1e7, 64, 1, 0, 0, 0}};
  for (int i = 0; i < 48; i++) {
    if ((i + 1) % 4) expect_nope("Qwen3-Next", m, i);
    else expect_layer("Qwen3-Next", m, i, &w);
  }
  pe_model_rope_destroy(m);
  /* The one-cache loader returns that cache: linear attention has nothing to rotate. */
  size_t len;
  char *buf = read_fixture("qwen3-next-80b-a3b-instruct.json", &len);
  pe_rope_cache *c = NULL;
  assert_int_equal(pe_rope_cache_create_from_hf_config(buf, len, 0, 0, 0, &c), PE_OK);
  pe_rope_params p;
  pe_rope_params_init(&p);
  assert_int_equal(pe_rope_cache_params(c, &p), PE_OK);
  assert_int_equal(p.rotary_dim, 64);
  pe_rope_cache_destroy(c);
  free(buf);
}

static void test_gpt_oss(void **state) {
  (void)state;
  pe_model_rope *m = model_file("gpt-oss-20b.json");
  assert_int_equal(pe_model_rope_num_layers(m), 24);
  want w = {64, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_YARN, 32, 0.1 * log(32.0) + 1.0,
            {R_YARN_NOTRUNC, 150000.0, 64, 32.0, 4096.0, 0, 0}};
  for (int i = 0; i < 24; i++) expect_layer("gpt-oss-20b", m, i, &w);
  assert_int_equal(distinct_caches(m), 1);
  pe_model_rope_destroy(m);
}

static void check_qwen_vl(const char *name) {
  pe_model_rope *m = model_file(name);
  assert_int_equal(pe_model_rope_num_layers(m), 28);
  want w = {128, 128, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 1e6, 128, 1, 0, 0, 0}};
  for (int i = 0; i < 28; i++) expect_layer(name, m, i, &w);
  pe_model_rope_destroy(m);
  size_t len;
  char *buf = read_fixture(name, &len);
  pe_rope_cache *c = NULL;
  assert_int_equal(pe_rope_cache_create_from_hf_config(buf, len, 0, 0, 0, &c), PE_OK);
  int32_t sec[3] = {0, 0, 0};
  uint32_t flags = 99;
  assert_int_equal(pe_mrope_section_from_hf_config(buf, len, sec, &flags), PE_OK);
  assert_int_equal(sec[0], 16);
  assert_int_equal(sec[1], 24);
  assert_int_equal(sec[2], 24);
  assert_int_equal(flags, 0);
  pe_rope_cache_destroy(c);
  free(buf);
}

static void test_qwen_vl(void **state) {
  (void)state;
  /* "rope_scaling": {"type": "mrope", ...} as shipped: default frequencies. */
  check_qwen_vl("qwen2-vl-7b-instruct.json");
  check_qwen_vl("qwen2.5-vl-7b-instruct.json");
}

static void test_mimo_v2(void **state) {
  (void)state;
  /* MiMo-V2 (hybrid_layer_pattern: 0 full attention, 1 sliding window):
   * full layers default rope at rope_theta, sliding ones at swa_rope_theta;
   * both rotate int(192 * 0.334) = 64 channels, half-split. */
  pe_model_rope *m = model_file("per_layer/mimo-v2.6-flash.json");
  assert_int_equal(pe_model_rope_num_layers(m), 48);
  assert_int_equal(pe_model_rope_pairing_guessed(m), 0);
  want full = {192, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 1e7, 64, 1, 0, 0, 0}};
  want swa = {192, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 1e4, 64, 1, 0, 0, 0}};
  static const int pattern[6] = {1, 1, 1, 1, 1, 0}; /* after layer 0..5's 0,1,1,1,1,0 */
  for (int i = 0; i < 48; i++) {
    int sliding = i < 6 ? (i != 0 && i != 5) : pattern[(i - 6) % 6];
    expect_layer("mimo-v2", m, i, sliding ? &swa : &full);
  }
  assert_int_equal(distinct_caches(m), 2);
  pe_model_rope_destroy(m);
  /* A pattern of the wrong length is named. */
  expect_model_refused("{\"model_type\":\"mimo_v2_flash\",\"head_dim\":192,\"num_hidden_layers\":3,"
                       "\"rope_theta\":1e7,\"swa_rope_theta\":1e4,\"hybrid_layer_pattern\":[0,1]}",
                       0, PE_ERR_PARSE, "hybrid_layer_pattern has 2 entries");
  /* On a model type whose pattern libposenc has not read: refused, even
   * when the caller accepts a guess (the key is named). */
  const char *other = "{\"model_type\":\"other_lm\",\"head_dim\":64,\"num_hidden_layers\":2,"
                      "\"rope_theta\":1e4,\"hybrid_layer_pattern\":[0,1]}";
  expect_model_refused(other, 0, PE_ERR_UNSUPPORTED, "\"other_lm\" is not in libposenc's table");
  expect_model_refused(other, PE_CONFIG_GUESS, PE_ERR_UNSUPPORTED, "hybrid_layer_pattern");
  /* A known type whose class does not read it: named too. */
  expect_model_refused("{\"model_type\":\"llama\",\"head_dim\":64,\"num_hidden_layers\":2,"
                       "\"rope_theta\":1e4,\"swa_rope_theta\":1e4}",
                       0, PE_ERR_UNSUPPORTED, "swa_rope_theta");
}

static void test_neox_keys_elsewhere(void **state) {
  (void)state;
  /* GPT-NeoX's own names for the rotary fraction and base are read on
   * GPT-NeoX only (GPTNeoXConfig); LlamaConfig reads neither (a Llama config
   * with rotary_pct 0.5 must not load with half its rotary width), and
   * GPTNeoXConfig does not read GPT-J's rotary_dim. Each refusal names the
   * key. */
  expect_model_refused("{\"model_type\":\"llama\",\"head_dim\":64,\"num_hidden_layers\":2,"
                       "\"rope_theta\":1e4,\"rotary_pct\":0.5}",
                       0, PE_ERR_UNSUPPORTED, "rotary_pct");
  expect_model_refused("{\"model_type\":\"llama\",\"head_dim\":64,\"num_hidden_layers\":2,"
                       "\"rope_theta\":1e4,\"rotary_emb_base\":20000}",
                       0, PE_ERR_UNSUPPORTED, "rotary_emb_base");
  expect_model_refused("{\"model_type\":\"gpt_neox\",\"hidden_size\":512,\"num_attention_heads\":8,"
                       "\"num_hidden_layers\":2,\"rotary_pct\":0.25,\"rotary_emb_base\":1e4,"
                       "\"rotary_dim\":16}",
                       0, PE_ERR_UNSUPPORTED, "rotary_dim");
  /* Llama4TextConfig reads its no_rope keys, not Gemma 3's local base. */
  expect_model_refused("{\"model_type\":\"llama4_text\",\"num_hidden_layers\":4,"
                       "\"rope_theta\":5e5,\"rope_local_base_freq\":1e4}",
                       0, PE_ERR_UNSUPPORTED, "rope_local_base_freq");
  /* "alibi": false says what a RoPE class does anyway; true is ALiBi, which
   * LlamaAttention does not apply (Falcon's class does: no RoPE then), and
   * DeepseekV3Attention has no NoPE switch for its rotated slice. */
  expect_model_refused("{\"model_type\":\"llama\",\"head_dim\":64,\"num_hidden_layers\":2,"
                       "\"rope_theta\":1e4,\"alibi\":true}",
                       0, PE_ERR_UNSUPPORTED, "has alibi");
  pe_model_rope *m = model_text("{\"model_type\":\"llama\",\"head_dim\":64,"
                                "\"num_hidden_layers\":2,\"rope_theta\":1e4,\"alibi\":false}", 0);
  assert_non_null(pe_model_rope_layer(m, 1));
  pe_model_rope_destroy(m);
  m = model_text("{\"model_type\":\"falcon\",\"hidden_size\":4544,\"num_attention_heads\":71,"
                 "\"num_hidden_layers\":2,\"alibi\":true}", 0);
  for (int i = 0; i < 2; i++) expect_nope("falcon alibi", m, i);
  pe_model_rope_destroy(m);
  expect_model_refused("{\"model_type\":\"deepseek_v3\",\"num_hidden_layers\":2,\"qk_rope_head_dim\":64,"
                       "\"rope_theta\":1e4,\"mla_use_nope\":true}",
                       0, PE_ERR_UNSUPPORTED, "has mla_use_nope");
  m = model_text("{\"model_type\":\"deepseek_v3\",\"num_hidden_layers\":2,\"rope_theta\":1e4,"
                 "\"qk_rope_head_dim\":64,\"mla_use_nope\":false}", 0);
  for (int i = 0; i < 2; i++) assert_non_null(pe_model_rope_layer(m, i));
  pe_model_rope_destroy(m);
  /* false is harmless for those two keys only. */
  expect_model_refused("{\"model_type\":\"llama\",\"head_dim\":64,\"num_hidden_layers\":2,"
                       "\"rope_theta\":1e4,\"swa_rope_theta\":false}",
                       0, PE_ERR_UNSUPPORTED, "has swa_rope_theta");
}

/* A config with the language model's keys at the top level is read there,
 * whatever a text_config beside them says (LlamaConfig has no text_config;
 * it is read only when the top level has none of those keys). */
static void test_top_level_keys_win_over_text_config(void **state) {
  (void)state;
  pe_model_rope *m = model_text(
      "{\"model_type\":\"llama\",\"hidden_size\":4096,\"num_attention_heads\":32,"
      "\"num_hidden_layers\":2,\"rope_theta\":500000.0,\"text_config\":{\"model_type\":"
      "\"llama\",\"hidden_size\":2048,\"num_attention_heads\":32,\"num_hidden_layers\":2,"
      "\"rope_theta\":10000.0}}", 0);
  want w = {128, 128, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 500000.0, 128, 1, 0, 0, 0}};
  for (int i = 0; i < 2; i++) expect_layer("top level beside text_config", m, i, &w);
  pe_model_rope_destroy(m);
}

static void test_hybrid_without_rope(void **state) {
  (void)state;
  /* MiniMax-01's attn_type_list: 0 = lightning (linear) attention, no RoPE. */
  pe_model_rope *m = model_text("{\"model_type\":\"minimax\",\"head_dim\":128,\"num_hidden_layers\":4,"
                               "\"rope_theta\":10000000,\"attn_type_list\":[0,0,0,1]}", 0);
  for (int i = 0; i < 3; i++) expect_nope("minimax attn_type_list", m, i);
  want w = {128, 128, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 1e7, 128, 1, 0, 0, 0}};
  expect_layer("minimax attn_type_list", m, 3, &w);
  pe_model_rope_destroy(m);
  /* Attention without positional encoding: every layer NULL, not a rotation
   * at the config's rope_theta. */
  static const char *const cfgs[] = {
      "{\"model_type\":\"nemotron_h\",\"head_dim\":128,\"num_hidden_layers\":6,\"rope_theta\":10000}",
      "{\"model_type\":\"jamba\",\"hidden_size\":4096,\"num_attention_heads\":32,\"num_hidden_layers\":8}",
      "{\"model_type\":\"granitemoehybrid\",\"head_dim\":128,\"num_hidden_layers\":4,"
      "\"rope_theta\":10000,\"position_embedding_type\":\"nope\"}",
      "{\"model_type\":\"kimi_linear\",\"qk_rope_head_dim\":64,\"num_hidden_layers\":4,"
      "\"rope_theta\":10000,\"mla_use_nope\":true}"};
  for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
    /* Kimi-Linear is not in the table: its NoPE is read under PE_CONFIG_GUESS. */
    m = model_text(cfgs[k], strstr(cfgs[k], "kimi_linear") ? PE_CONFIG_GUESS : 0);
    for (int i = 0; i < pe_model_rope_num_layers(m); i++) expect_nope(cfgs[k], m, i);
    pe_model_rope_destroy(m);
  }
}

/* ---------------------------------------------------------------------- */
/* defaults, guesses, errors                                              */
/* ---------------------------------------------------------------------- */

static void test_unknown_model_type(void **state) {
  (void)state;
  /* A model type libposenc does not know is refused unless the caller asks
   * for a guess, with the type named. */
  const char *known = "{\"model_type\":\"brand_new_lm\",\"head_dim\":64,\"num_hidden_layers\":2,"
                      "\"rope_theta\":20000.0}";
  pe_model_rope *m = (pe_model_rope *)&known, *sentinel = m;
  assert_int_equal(pe_model_rope_from_hf_config(known, strlen(known), 0, 0, 0, &m), PE_ERR_UNSUPPORTED);
  assert_ptr_equal(m, sentinel);
  assert_non_null(strstr(pe_last_error(), "\"brand_new_lm\" is not in libposenc's table"));
  assert_non_null(strstr(pe_last_error(), "PE_CONFIG_GUESS"));
  /* Unknown bits of flags: refused. */
  assert_int_equal(pe_model_rope_from_hf_config(known, strlen(known), 0, 0, 2, &m),
                   PE_ERR_INVALID_ARGUMENT);
  assert_ptr_equal(m, sentinel);
  /* A guess without rope_theta: refused with the key named; never a silent 10000. */
  const char *cfg = "{\"model_type\":\"brand_new_lm\",\"head_dim\":64,\"num_hidden_layers\":2}";
  assert_int_equal(pe_model_rope_from_hf_config(cfg, strlen(cfg), 0, 0, PE_CONFIG_GUESS, &m),
                   PE_ERR_PARSE);
  assert_ptr_equal(m, sentinel);
  assert_non_null(strstr(pe_last_error(), "pe_model_rope_from_hf_config: config.json lacks rope_theta"));
  assert_non_null(strstr(pe_last_error(), "\"brand_new_lm\""));
  /* With rope_theta it loads, half-split pairing, and says it guessed. */
  m = model_text(known, PE_CONFIG_GUESS);
  assert_int_equal(pe_model_rope_pairing_guessed(m), 1);
  want w = {64, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 20000.0, 64, 1, 0, 0, 0}};
  expect_layer("guessed", m, 1, &w);
  pe_model_rope_destroy(m);
  /* A known model type's class default applies (Llama4TextConfig 500000). */
  m = model_text("{\"model_type\":\"llama4_text\",\"num_hidden_layers\":1}", 0);
  assert_int_equal(pe_model_rope_pairing_guessed(m), 0);
  want l4 = {128, 128, PE_ROPE_GPTJ, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 500000.0, 128, 1, 0, 0, 0}};
  expect_layer("llama4 defaults", m, 0, &l4);
  pe_model_rope_destroy(m);
}

static void test_max_positions_from_config(void **state) {
  (void)state;
  const char *cfg = "{\"model_type\":\"llama\",\"head_dim\":16,\"num_hidden_layers\":2,"
                    "\"max_position_embeddings\":48}";
  pe_model_rope *m = NULL;
  assert_int_equal(pe_model_rope_from_hf_config(cfg, strlen(cfg), PE_MAX_POSITIONS_FROM_CONFIG, 0, 0, &m),
                   PE_OK);
  pe_rope_params p;
  pe_rope_params_init(&p);
  assert_int_equal(pe_rope_cache_params(pe_model_rope_layer(m, 0), &p), PE_OK);
  assert_int_equal(p.max_positions, 48);
  float cs[8], sn[8];
  assert_int_equal(pe_rope_cache_cos_sin(pe_model_rope_layer(m, 1), 47, cs, sn), PE_OK);
  assert_int_equal(pe_rope_cache_cos_sin(pe_model_rope_layer(m, 1), 48, cs, sn),
                   PE_ERR_POSITION_OUT_OF_RANGE);
  pe_model_rope_destroy(m);
  const char *nomax = "{\"model_type\":\"llama\",\"head_dim\":16,\"num_hidden_layers\":2}";
  m = NULL;
  assert_int_equal(pe_model_rope_from_hf_config(nomax, strlen(nomax), -1, 0, 0, &m), PE_ERR_PARSE);
  assert_null(m);
  assert_non_null(strstr(pe_last_error(), "max_position_embeddings"));
  assert_int_equal(pe_model_rope_from_hf_config(cfg, strlen(cfg), -2, 0, 0, &m), PE_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(pe_last_error(), "max_positions -2"));
  /* 2^53 positions is a valid argument (a table no memory holds); one more
   * is not exact in a double and is refused as the argument. */
  const int64_t p53 = (int64_t)1 << 53;
  assert_int_equal(pe_model_rope_from_hf_config(cfg, strlen(cfg), p53, 0, 0, &m),
                   PE_ERR_OUT_OF_MEMORY);
  assert_non_null(strstr(pe_last_error(), "cos/sin table (max_positions 9007199254740992)"));
  assert_int_equal(pe_model_rope_from_hf_config(cfg, strlen(cfg), p53 + 1, 0, 0, &m),
                   PE_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(pe_last_error(), "max_positions 9007199254740993 must be in [0, 2^53]"));
  assert_null(m);
  /* A key the config omits takes its config class's default: transformers'
   * Gemma3TextConfig has max_position_embeddings = 131072. */
  const char *gemma = "{\"model_type\":\"gemma3_text\",\"head_dim\":16,\"num_hidden_layers\":6,"
                      "\"rope_theta\":1000000.0,\"rope_local_base_freq\":10000.0}";
  m = NULL;
  assert_int_equal(pe_model_rope_from_hf_config(gemma, strlen(gemma), -1, 0, 0, &m), PE_OK);
  pe_rope_params_init(&p);
  assert_int_equal(pe_rope_cache_params(pe_model_rope_layer(m, 5), &p), PE_OK);
  assert_int_equal(p.max_positions, 131072);
  pe_model_rope_destroy(m);
}

static void test_errors(void **state) {
  (void)state;
  pe_model_rope *m = NULL;
  assert_int_equal(pe_model_rope_from_hf_config(NULL, 0, 0, 0, 0, &m), PE_ERR_NULL_POINTER);
  assert_int_equal(pe_model_rope_from_hf_config("{}", 2, 0, 0, 0, NULL), PE_ERR_NULL_POINTER);
  assert_int_equal(pe_model_rope_from_hf_config("{}", 2, 0, -1, 0, &m), PE_ERR_INVALID_ARGUMENT);
  const char *nolayers = "{\"model_type\":\"llama\",\"head_dim\":16,\"rope_theta\":1e4}";
  assert_int_equal(pe_model_rope_from_hf_config(nolayers, strlen(nolayers), 0, 0, 0, &m), PE_ERR_PARSE);
  assert_non_null(strstr(pe_last_error(), "num_hidden_layers"));
  const char *badtypes = "{\"model_type\":\"llama\",\"head_dim\":16,\"rope_theta\":1e4,"
                         "\"num_hidden_layers\":3,\"layer_types\":[\"full_attention\"]}";
  assert_int_equal(pe_model_rope_from_hf_config(badtypes, strlen(badtypes), 0, 0, 0, &m), PE_ERR_PARSE);
  assert_non_null(strstr(pe_last_error(), "layer_types has 1 entries, num_hidden_layers is 3"));
  const char *missing = "{\"model_type\":\"gemma3_text\",\"num_hidden_layers\":2,\"layer_types\":"
                        "[\"sliding_attention\",\"full_attention\"],\"rope_parameters\":"
                        "{\"full_attention\":{\"rope_theta\":1e6}}}";
  assert_int_equal(pe_model_rope_from_hf_config(missing, strlen(missing), 0, 0, 0, &m), PE_ERR_PARSE);
  assert_non_null(strstr(pe_last_error(), "rope_parameters.sliding_attention"));
  assert_null(m);
  m = model_text("{\"model_type\":\"llama\",\"head_dim\":16,\"rope_theta\":1e4,\"num_hidden_layers\":3}", 0);
  assert_int_equal(pe_model_rope_num_layers(m), 3);
  assert_null(pe_model_rope_layer(m, 3));
  assert_non_null(strstr(pe_last_error(), "layer 3 is outside [0, 3)"));
  assert_null(pe_model_rope_layer(m, -1));
  assert_null(pe_model_rope_layer(NULL, 0));
  assert_int_equal(pe_model_rope_num_layers(NULL), -1);
  assert_int_equal(pe_model_rope_pairing_guessed(NULL), -1);
  double a, b;
  assert_int_equal(pe_model_rope_nope_temperature(m, 3, &a, &b), PE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pe_model_rope_nope_temperature(m, 0, NULL, &b), PE_ERR_NULL_POINTER);
  int32_t h;
  assert_int_equal(pe_model_rope_heads(m, &h, NULL), PE_ERR_NULL_POINTER);
  assert_int_equal(distinct_caches(m), 1);
  pe_model_rope_destroy(m);
  pe_model_rope_destroy(NULL);

  /* Head counts are int32_t: 2^31 - 1 loads as written, 2^31 is refused
   * by the key's name (it used to fall back to 0 or the query heads). */
  static const struct {
    const char *keys, *msg;
  } heads[] = {
      {"\"num_attention_heads\":2147483647,\"num_key_value_heads\":2147483647", NULL},
      {"\"num_attention_heads\":8,\"num_key_value_heads\":2147483648",
       "num_key_value_heads 2147483648 is above 2147483647"},
      {"\"num_attention_heads\":2147483648", "num_attention_heads 2147483648 is above 2147483647"},
      {"\"n_head\":4294967296", "n_head 4294967296 is above 2147483647"},
  };
  for (size_t i = 0; i < sizeof heads / sizeof *heads; i++) {
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"llama\",\"head_dim\":16,\"rope_theta\":1e4,"
             "\"num_hidden_layers\":2,%s}",
             heads[i].keys);
    pe_model_rope *hm = (pe_model_rope *)&h, *sentinel = hm;
    pe_status st = pe_model_rope_from_hf_config(cfg, strlen(cfg), 0, 0, 0, &hm);
    if (!heads[i].msg) {
      int32_t kv = 0;
      assert_int_equal(st, PE_OK);
      assert_int_equal(pe_model_rope_heads(hm, &h, &kv), PE_OK);
      assert_int_equal(h, INT32_MAX);
      assert_int_equal(kv, INT32_MAX);
      pe_model_rope_destroy(hm);
      continue;
    }
    assert_int_equal(st, PE_ERR_PARSE);
    assert_ptr_equal(hm, sentinel);
    if (!strstr(pe_last_error(), heads[i].msg)) fail_msg("%s: %s", cfg, pe_last_error());
  }
}

/* ---------------------------------------------------------------------- */
/* PROPORTIONAL = transformers' Gemma-4 rotation                          */
/* ---------------------------------------------------------------------- */

static uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static void test_proportional_gemma4(void **state) {
  (void)state;
  /* head_dim 256, partial_rotary_factor 0.25: rope_angles = int(0.25*256//2)
   * = 32, rotary_dim 2*32 = 64 in the params. transformers
   * (_compute_proportional_rope_parameters + rotate_half on head_dim):
   * inv[j] = B^(-2j/256)/s for j < 32, 0 for 32 <= j < 128; emb = cat(freqs,
   * freqs) over all 256 channels, so channel j pairs with j + 128. */
  enum { HD = 256, HALF = 128, ANG = 32, T = 9 };
  const double base = 1e6, s = 2.0;
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = HD;
  p.rotary_dim = 2 * ANG;
  p.base = base;
  p.scaling = PE_ROPE_SCALING_PROPORTIONAL;
  p.factor = s;
  p.max_positions = 0;
  pe_rope_cache *c = NULL;
  assert_int_equal(pe_rope_cache_create(&p, &c), PE_OK);
  pe_rope_params r;
  pe_rope_params_init(&r);
  assert_int_equal(pe_rope_cache_params(c, &r), PE_OK);
  assert_int_equal(r.rotary_dim, HD); /* laid out on every channel */
  assert_int_equal(r.scaling, PE_ROPE_SCALING_PROPORTIONAL);
  double inv[HALF];
  for (int j = 0; j < HALF; j++) inv[j] = j < ANG ? pow(base, -(2.0 * j) / HD) / s : 0.0;
  float f[HALF];
  assert_int_equal(pe_rope_cache_inv_freq(c, f), PE_OK);
  for (int j = 0; j < HALF; j++)
    if (fabs((double)f[j] - inv[j]) > ulp_f32(inv[j]))
      fail_msg("inv_freq[%d] = %.9g, transformers %.17g", j, (double)f[j], inv[j]);

  /* Rotate q [1, 1, T, 256] at positions 0..T-1 and compare with the
   * float64 rotation. */
  static float q[T * HD], q0[T * HD];
  uint32_t seed = 12345;
  for (int i = 0; i < T * HD; i++) {
    seed = seed * 1664525u + 1013904223u;
    q0[i] = q[i] = (float)((double)(seed >> 8) / 16777216.0 * 4.0 - 2.0);
  }
  int64_t pos[T] = {0, 1, 2, 7, 100, 1000, 4095, 65535, 131071};
  pe_tensor tq = {q, PE_F32, {1, 1, T, HD}, {T * HD, T * HD, HD, 1}};
  assert_int_equal(pe_apply_rope_qk(c, &tq, NULL, pos, 0, NULL), PE_OK);
  for (int t = 0; t < T; t++) {
    for (int j = 0; j < HALF; j++) {
      double x = q0[t * HD + j], y = q0[t * HD + j + HALF];
      double a = (double)pos[t] * inv[j];
      double wx = x * cos(a) - y * sin(a), wy = y * cos(a) + x * sin(a);
      float gx = q[t * HD + j], gy = q[t * HD + j + HALF];
      if (j >= ANG) {
        /* frequency 0: the channels come out bit for bit as they went in */
        if (bits(gx) != bits(q0[t * HD + j]) || bits(gy) != bits(q0[t * HD + j + HALF]))
          fail_msg("pos %lld pair %d: %a %a changed to %a %a", (long long)pos[t], j, x, y,
                   (double)gx, (double)gy);
      } else if (fabs(gx - wx) > 4e-7 * (fabs(x) + fabs(y)) + 2e-7 ||
                 fabs(gy - wy) > 4e-7 * (fabs(x) + fabs(y)) + 2e-7) {
        fail_msg("pos %lld pair %d: %.9g %.9g, transformers (float64) %.17g %.17g",
                 (long long)pos[t], j, (double)gx, (double)gy, wx, wy);
      }
    }
  }
  pe_rope_cache_destroy(c);

  /* With a cos/sin table: the zero-frequency channels are still untouched. */
  p.max_positions = 64;
  assert_int_equal(pe_rope_cache_create(&p, &c), PE_OK);
  memcpy(q, q0, sizeof q);
  assert_int_equal(pe_apply_rope_qk(c, &tq, NULL, NULL, 0, NULL), PE_OK);
  for (int t = 0; t < T; t++)
    for (int j = ANG; j < HALF; j++)
      if (bits(q[t * HD + j]) != bits(q0[t * HD + j]) ||
          bits(q[t * HD + j + HALF]) != bits(q0[t * HD + j + HALF]))
        fail_msg("table: token %d pair %d changed", t, j);
  pe_rope_cache_destroy(c);

  /* The same from a Gemma-4 config (v5 rope_parameters per layer type). */
  pe_model_rope *m = model_text(
      "{\"model_type\":\"gemma4_text\",\"head_dim\":256,\"num_hidden_layers\":2,"
      "\"layer_types\":[\"sliding_attention\",\"full_attention\"],\"rope_parameters\":{"
      "\"full_attention\":{\"rope_type\":\"proportional\",\"partial_rotary_factor\":0.25,"
      "\"rope_theta\":1000000.0,\"factor\":2.0},\"sliding_attention\":{\"rope_type\":\"default\","
      "\"rope_theta\":10000.0}}}", 0);
  const pe_rope_cache *g = pe_model_rope_layer(m, 1);
  assert_non_null(g);
  assert_int_equal(pe_rope_cache_inv_freq(g, f), PE_OK);
  for (int j = 0; j < HALF; j++)
    if (fabs((double)f[j] - inv[j]) > ulp_f32(inv[j]))
      fail_msg("config: inv_freq[%d] = %.9g, transformers %.17g", j, (double)f[j], inv[j]);
  want sl = {256, 256, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 1, 1, {R_DEFAULT, 10000.0, 256, 1, 0, 0, 0}};
  expect_layer("gemma4 sliding", m, 0, &sl);
  pe_model_rope_destroy(m);

  /* Gemma 4's global layers use global_head_dim (Gemma4 rotary embedding's
   * head_dim_key): 512 channels, int(0.25 * 512 // 2) = 64 rotated angles of
   * B^(-2j/512). */
  m = model_text("{\"model_type\":\"gemma4_text\",\"head_dim\":256,\"global_head_dim\":512,"
                "\"num_hidden_layers\":2,\"layer_types\":[\"sliding_attention\",\"full_attention\"],"
                "\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"proportional\","
                "\"partial_rotary_factor\":0.25,\"rope_theta\":1000000.0},\"sliding_attention\":{"
                "\"rope_type\":\"default\",\"rope_theta\":10000.0}}}", 0);
  expect_layer("gemma4 sliding", m, 0, &sl);
  g = pe_model_rope_layer(m, 1);
  assert_non_null(g);
  pe_rope_params_init(&r);
  assert_int_equal(pe_rope_cache_params(g, &r), PE_OK);
  assert_int_equal(r.head_dim, 512);
  assert_int_equal(r.rotary_dim, 512);
  float f512[256];
  assert_int_equal(pe_rope_cache_inv_freq(g, f512), PE_OK);
  for (int j = 0; j < 256; j++) {
    double ref = j < 64 ? pow(1e6, -(2.0 * j) / 512) : 0.0;
    if (fabs((double)f512[j] - ref) > ulp_f32(ref))
      fail_msg("global_head_dim: inv_freq[%d] = %.9g, transformers %.17g", j, (double)f512[j], ref);
  }
  pe_model_rope_destroy(m);
}

/* LLAMA3 with low == high from the enum: wavelengths above M0/low divided by
 * s, the others kept (no band), as _compute_llama3_parameters gives. */
static void test_llama3_equal_band(void **state) {
  (void)state;
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = 128;
  p.base = 500000.0;
  p.scaling = PE_ROPE_SCALING_LLAMA3;
  p.factor = 16.0;
  p.original_max_positions = 8192;
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 1.0;
  p.max_positions = 0;
  pe_rope_cache *c = NULL;
  assert_int_equal(pe_rope_cache_create(&p, &c), PE_OK);
  ref_rope r = {R_LLAMA3, 500000.0, 128, 16.0, 8192.0, 1.0, 1.0};
  float f[64];
  assert_int_equal(pe_rope_cache_inv_freq(c, f), PE_OK);
  int scaled = 0;
  for (int i = 0; i < 64; i++) {
    double ref = ref_inv(&r, i);
    scaled += ref != pow(500000.0, -(2.0 * i) / 128);
    if (fabs((double)f[i] - ref) > ulp_f32(ref)) fail_msg("inv_freq[%d] %.9g vs %.17g", i, (double)f[i], ref);
  }
  assert_true(scaled > 0 && scaled < 64); /* both sides of the cut occur */
  pe_rope_cache_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemma3),
      cmocka_unit_test(test_gemma3n),
      cmocka_unit_test(test_v5_per_layer_type),
      cmocka_unit_test(test_v5_layer_types_differing_in_one_field),
      cmocka_unit_test(test_modernbert),
      cmocka_unit_test(test_cohere2),
      cmocka_unit_test(test_llama4),
      cmocka_unit_test(test_exaone4),
      cmocka_unit_test(test_qwen3_next),
      cmocka_unit_test(test_gpt_oss),
      cmocka_unit_test(test_qwen_vl),
      cmocka_unit_test(test_mimo_v2), cmocka_unit_test(test_neox_keys_elsewhere),
      cmocka_unit_test(test_top_level_keys_win_over_text_config),
      cmocka_unit_test(test_hybrid_without_rope),
      cmocka_unit_test(test_unknown_model_type),
      cmocka_unit_test(test_max_positions_from_config),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_proportional_gemma4),
      cmocka_unit_test(test_llama3_equal_band),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
