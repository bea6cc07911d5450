/* test_model_roles.c - the rotations of one layer beside its attention
 * (pe_model_rope_layer_role), where their channels sit
 * (pe_model_rope_layer_slice), the QK-norm each applies
 * (pe_model_rope_layer_qk_norm) and the MLA latent norm's epsilon, on the
 * configs of DeepSeek-V3.2 (published), GLM-5 and DeepSeek-V4 (built to the
 * published key sets; tests/data/configs/README.md), and the views those
 * slices give to pe_apply_rope_qk.
 *
 * Expected values are written here from transformers' classes and formulas,
 * never from src/: DeepseekV32Indexer (half-split on the first
 * qk_rope_head_dim channels of index_head_dim, the attention's cos/sin),
 * GlmMoeDsaConfig (indexer_types from index_topk_freq /
 * index_skip_topk_offset), DeepseekV4Config / DeepseekV4Attention (main rope
 * default at rope_theta on sliding layers; compress rope YaRN at
 * compress_rope_theta with attention factor 1 on compressed layers, their
 * compressor and their indexer; interleaved pairs on the trailing 64 of 512
 * channels; the output de-rotated), and modeling_rope_utils' default and
 * YaRN frequencies evaluated in float64 below.
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

#define PI_D 3.14159265358979323846





static double mscale(double s, double m) { return s <= 1.0 ? 1.0 : 0.1 * m * log(s) + 1.0; }

/* transformers' _compute_yarn_parameters (truncate true), d/2 frequencies. */
static void ref_yarn(int d, double base, double s, double m0, double bf, double bs, double *inv) {
  double lo, hi;
  ref_yarn_range(d, base, s, m0, bf, bs, 1, inv, &lo, &hi);
}

/* HF's default set, d/2 frequencies. */
static void default_freqs(int d, double base, double *inv) {
  for (int i = 0; i < d / 2; i++) inv[i] = pow(base, -(2.0 * i) / d);
}

/* One rotation as transformers builds it. */
typedef struct want {
  int head_dim, rotary_dim;
  pe_rope_style style;
  pe_rope_scaling scaling;
  double base, factor, attention;
  const double *inv; /* rotary_dim / 2 */
} want;

static void expect_cache(const char *what, int layer, const pe_rope_cache *c, const want *w) {
  if (!c) fail_msg("%s layer %d: no rotation", what, layer);
  pe_rope_params p;
  pe_rope_params_init(&p);
  assert_int_equal(pe_rope_cache_params(c, &p), PE_OK);
  if (p.head_dim != w->head_dim || p.rotary_dim != w->rotary_dim || p.style != w->style ||
      p.scaling != w->scaling || p.base != w->base)
    fail_msg("%s layer %d: head_dim %d rotary_dim %d style %d scaling %d base %g; expected %d %d "
             "%d %d %g", what, layer, p.head_dim, p.rotary_dim, p.style, p.scaling, p.base,
             w->head_dim, w->rotary_dim, w->style, w->scaling, w->base);
  if (w->scaling != PE_ROPE_SCALING_NONE && p.factor != w->factor)
    fail_msg("%s layer %d: factor %g, expected %g", what, layer, p.factor, w->factor);
  double af = pe_rope_cache_attention_factor(c);
  if (fabs(af - w->attention) > 1e-12 * w->attention)
    fail_msg("%s layer %d: attention factor %.17g, expected %.17g", what, layer, af, w->attention);
  float got[256];
  assert_int_equal(pe_rope_cache_inv_freq(c, got), PE_OK);
  for (int i = 0; i < p.rotary_dim / 2; i++)
    if (fabs((double)got[i] - w->inv[i]) > ulp_f32(w->inv[i]))
      fail_msg("%s layer %d: inv_freq[%d] = %.9g, transformers %.17g", what, layer, i,
               (double)got[i], w->inv[i]);
}

static void expect_slice(const char *what, const pe_model_rope *m, int layer, int role, int qhd,
                         int qoff, int khd, int koff, int rd, uint32_t flags) {
  pe_rope_slice s;
  pe_rope_slice_init(&s);
  assert_int_equal(pe_model_rope_layer_slice(m, layer, role, &s), PE_OK);
  if (s.q_head_dim != qhd || s.q_offset != qoff || s.k_head_dim != khd || s.k_offset != koff ||
      s.rotary_dim != rd || s.flags != flags)
    fail_msg("%s layer %d role %d: q %d@%d k %d@%d rotary %d flags %u; expected q %d@%d k %d@%d "
             "rotary %d flags %u", what, layer, role, s.q_head_dim, s.q_offset, s.k_head_dim,
             s.k_offset, s.rotary_dim, s.flags, qhd, qoff, khd, koff, rd, flags);
}

static void expect_qk(const char *what, const pe_model_rope *m, int layer, int role,
                      pe_qk_norm_kind kind, pe_qk_norm_scope scope, double eps) {
  pe_qk_norm n;
  pe_qk_norm_init(&n);
  pe_status st = pe_model_rope_layer_qk_norm(m, layer, role, &n);
  if (st != PE_OK) fail_msg("%s layer %d role %d: %s", what, layer, role, pe_last_error());
  if (n.kind != kind || n.scope != scope || (kind != PE_QK_NORM_NONE && n.eps != (float)eps) ||
      n.q_weight || n.k_weight)
    fail_msg("%s layer %d role %d: kind %d scope %d eps %g; expected %d %d %g", what, layer, role,
             n.kind, n.scope, (double)n.eps, kind, scope, eps);
}

static void expect_qk_refused(const char *what, const pe_model_rope *m, int layer, int role,
                              const char *needle) {
  pe_qk_norm n;
  pe_qk_norm_init(&n);
  n.kind = PE_QK_NORM_L2; /* untouched on error */
  assert_int_equal(pe_model_rope_layer_qk_norm(m, layer, role, &n), PE_ERR_UNSUPPORTED);
  if (!strstr(pe_last_error(), needle))
    fail_msg("%s: \"%s\" lacks \"%s\"", what, pe_last_error(), needle);
  assert_int_equal(n.kind, PE_QK_NORM_L2);
}

/* ---------------------------------------------------------------------- */
/* DeepSeek-V3.2 (published config)                                       */
/* ---------------------------------------------------------------------- */

static void test_deepseek_v32(void **state) {
  (void)state;
  pe_model_rope *m = model_file("per_layer/deepseek-v3.2.json");
  assert_int_equal(pe_model_rope_num_layers(m), 61);
  /* YaRN factor 40, M0 4096, betas 32 / 1, mscale = mscale_all_dim = 1:
   * attention factor 1 (the ratio), softmax factor mscale(40, 1)^2. */
  double inv[32];
  ref_yarn(64, 10000.0, 40.0, 4096.0, 32.0, 1.0, inv);
  want att = {64, 64, PE_ROPE_GPTJ, PE_ROPE_SCALING_YARN, 10000.0, 40.0, 1.0, inv};
  want idx = att;
  idx.style = PE_ROPE_NEOX; /* DeepseekV32Indexer: apply_rotary_pos_emb (rotate_half) */
  const pe_rope_cache *a0 = pe_model_rope_layer_role(m, 0, PE_ROPE_ROLE_ATTENTION);
  const pe_rope_cache *x0 = pe_model_rope_layer_role(m, 0, PE_ROPE_ROLE_INDEXER);
  for (int l = 0; l < 61; l++) {
    const pe_rope_cache *a = pe_model_rope_layer_role(m, l, PE_ROPE_ROLE_ATTENTION);
    const pe_rope_cache *x = pe_model_rope_layer_role(m, l, PE_ROPE_ROLE_INDEXER);
    expect_cache("v3.2 attention", l, a, &att);
    expect_cache("v3.2 indexer", l, x, &idx);
    assert_ptr_equal(a, pe_model_rope_layer(m, l));
    assert_ptr_equal(a, a0); /* every layer alike: one cache per role */
    assert_ptr_equal(x, x0);
    assert_null(pe_model_rope_layer_role(m, l, PE_ROPE_ROLE_COMPRESSOR));
    /* MLA: q head 128 + 64, rope after the nope part; kv_a_proj_with_mqa's
     * row 512 + 64, k_pe after the latent. Indexer: 128-channel heads,
     * rope first. */
    expect_slice("v3.2 attention", m, l, PE_ROPE_ROLE_ATTENTION, 192, 128, 576, 512, 64, 0);
    expect_slice("v3.2 indexer", m, l, PE_ROPE_ROLE_INDEXER, 128, 0, 128, 0, 64, 0);
    expect_slice("v3.2 compressor", m, l, PE_ROPE_ROLE_COMPRESSOR, 0, 0, 0, 0, 0, 0);
    expect_qk("v3.2 attention", m, l, PE_ROPE_ROLE_ATTENTION, PE_QK_NORM_NONE, PE_QK_NORM_PER_HEAD, 0);
    expect_qk_refused("v3.2 indexer k_norm", m, l, PE_ROPE_ROLE_INDEXER, "LayerNorm");
  }
  assert_true(a0 != x0);
  double m40 = mscale(40.0, 1.0);
  assert_true(fabs(pe_rope_cache_softmax_scale(a0) - m40 * m40) < 1e-12);
  double le = -1.0;
  assert_int_equal(pe_model_rope_latent_norm_eps(m, &le), PE_OK);
  assert_true(le == 1e-6); /* kv_a_layernorm = RMSNorm(kv_lora_rank): its default eps */
  pe_model_rope_destroy(m);

  /* indexer_rope_interleave true: the indexer pairs like the MLA and shares its cache. */
  m = model_text("{\"model_type\":\"deepseek_v32\",\"qk_rope_head_dim\":64,\"rope_theta\":10000.0,"
                "\"num_hidden_layers\":2,\"indexer_rope_interleave\":true}", 0);
  assert_ptr_equal(pe_model_rope_layer_role(m, 1, PE_ROPE_ROLE_INDEXER), pe_model_rope_layer(m, 1));
  pe_model_rope_destroy(m);
  /* rope_interleave false: half-split MLA; the indexer (default) too. */
  m = model_text("{\"model_type\":\"deepseek_v32\",\"qk_rope_head_dim\":64,\"rope_theta\":10000.0,"
                "\"num_hidden_layers\":2,\"rope_interleave\":false}", 0);
  default_freqs(64, 10000.0, inv);
  want neox = {64, 64, PE_ROPE_NEOX, PE_ROPE_SCALING_NONE, 10000.0, 1.0, 1.0, inv};
  expect_cache("v3.2 rope_interleave false", 0, pe_model_rope_layer(m, 0), &neox);
  expect_cache("v3.2 indexer", 0, pe_model_rope_layer_role(m, 0, PE_ROPE_ROLE_INDEXER), &neox);
  pe_model_rope_destroy(m);
  /* The widest heads taken: a q head of qk_nope_head_dim + qk_rope_head_dim
   * = 16384 channels, an indexer head of only the rotated channels
   * (index_head_dim == qk_rope_head_dim); one channel more or less is
   * refused. */
  m = model_text("{\"model_type\":\"deepseek_v32\",\"qk_rope_head_dim\":64,\"rope_theta\":1e4,"
                 "\"num_hidden_layers\":1,\"qk_nope_head_dim\":16320,\"index_head_dim\":64}", 0);
  pe_rope_slice sl;
  pe_rope_slice_init(&sl);
  assert_int_equal(pe_model_rope_layer_slice(m, 0, PE_ROPE_ROLE_ATTENTION, &sl), PE_OK);
  assert_true(sl.q_head_dim == 16384 && sl.q_offset == 16320 && sl.rotary_dim == 64);
  assert_int_equal(pe_model_rope_layer_slice(m, 0, PE_ROPE_ROLE_INDEXER, &sl), PE_OK);
  assert_true(sl.q_head_dim == 64 && sl.q_offset == 0 && sl.k_head_dim == 64);
  pe_model_rope_destroy(m);
  static const char *const wide[] = {"\"qk_nope_head_dim\":16321", "\"index_head_dim\":63"};
  for (int i = 0; i < 2; i++) {
    char cfg[256];
    snprintf(cfg, sizeof cfg, "{\"model_type\":\"deepseek_v32\",\"qk_rope_head_dim\":64,"
             "\"rope_theta\":1e4,\"num_hidden_layers\":1,%s}", wide[i]);
    pe_model_rope *out = NULL;
    assert_int_equal(pe_model_rope_from_hf_config(cfg, strlen(cfg), 0, 0, 0, &out), PE_ERR_PARSE);
    assert_non_null(strstr(pe_last_error(), "do not make heads of at most 16384 channels"));
    assert_null(out);
  }
  /* The one-cache loader cannot give two rotations: refused, naming the way. */
  size_t len;
  char *buf = read_fixture("per_layer/deepseek-v3.2.json", &len);
  pe_rope_cache *c = NULL;
  assert_int_equal(pe_rope_cache_create_from_hf_config(buf, len, 0, 0, 0, &c), PE_ERR_UNSUPPORTED);
  assert_non_null(strstr(pe_last_error(), "pe_model_rope_layer_role"));
  assert_null(c);
  free(buf);
}

/* ---------------------------------------------------------------------- */
/* GLM-5 (glm_moe_dsa)                                                    */
/* ---------------------------------------------------------------------- */

/* GlmMoeDsaConfig.__post_init__: full iff max(i - offset + 1, 0) % freq == 0. */
static int glm5_full(int i, int freq, int offset) {
  int t = i - offset + 1;
  return (t > 0 ? t : 0) % freq == 0;
}

static void test_glm5(void **state) {
  (void)state;
  pe_model_rope *m = model_file("per_layer/glm-moe-dsa-shape.json");
  assert_int_equal(pe_model_rope_num_layers(m), 78);
  double inv[32];
  default_freqs(64, 1e6, inv);
  want att = {64, 64, PE_ROPE_GPTJ, PE_ROPE_SCALING_NONE, 1e6, 1.0, 1.0, inv};
  int n_full = 0;
  for (int l = 0; l < 78; l++) {
    const pe_rope_cache *a = pe_model_rope_layer(m, l);
    expect_cache("glm-5 attention", l, a, &att);
    /* GLM-5: qk_nope_head_dim 192 + 64 per q head; latent 512 + 64. */
    expect_slice("glm-5 attention", m, l, PE_ROPE_ROLE_ATTENTION, 256, 192, 576, 512, 64, 0);
    const pe_rope_cache *x = pe_model_rope_layer_role(m, l, PE_ROPE_ROLE_INDEXER);
    if (glm5_full(l, 4, 3)) {
      /* indexer_rope_interleave true: the attention's pairs and cache. */
      assert_ptr_equal(x, a);
      expect_slice("glm-5 indexer", m, l, PE_ROPE_ROLE_INDEXER, 128, 0, 128, 0, 64, 0);
      n_full++;
    } else {
      /* "shared": the layer reuses the previous top-k, no indexer rotation. */
      assert_null(x);
      expect_slice("glm-5 shared layer", m, l, PE_ROPE_ROLE_INDEXER, 0, 0, 0, 0, 0, 0);
    }
  }
  /* 0, 1, 2, then every 4th from 6 to 74: 3 + 18. */
  assert_int_equal(n_full, 21);
  assert_true(glm5_full(6, 4, 3) && glm5_full(74, 4, 3) && !glm5_full(3, 4, 3) && !glm5_full(7, 4, 3));
  pe_model_rope_destroy(m);
  /* indexer_types and index_topk_pattern say it directly; the default
   * (no freq / offset) runs the indexer in every layer; half-split when
   * indexer_rope_interleave is false. */
  m = model_text("{\"model_type\":\"glm_moe_dsa\",\"qk_rope_head_dim\":64,\"rope_theta\":1e6,"
                "\"num_hidden_layers\":3,\"indexer_types\":[\"full\",\"shared\",\"full\"]}", 0);
  assert_non_null(pe_model_rope_layer_role(m, 0, PE_ROPE_ROLE_INDEXER));
  assert_null(pe_model_rope_layer_role(m, 1, PE_ROPE_ROLE_INDEXER));
  assert_non_null(pe_model_rope_layer_role(m, 2, PE_ROPE_ROLE_INDEXER));
  pe_model_rope_destroy(m);
  m = model_text("{\"model_type\":\"glm_moe_dsa\",\"qk_rope_head_dim\":64,\"rope_theta\":1e6,"
                "\"num_hidden_layers\":3,\"index_topk_pattern\":\"FSS\"}", 0);
  assert_non_null(pe_model_rope_layer_role(m, 0, PE_ROPE_ROLE_INDEXER));
  assert_null(pe_model_rope_layer_role(m, 2, PE_ROPE_ROLE_INDEXER));
  pe_model_rope_destroy(m);
  m = model_text("{\"model_type\":\"glm_moe_dsa\",\"qk_rope_head_dim\":64,\"rope_theta\":1e6,"
                "\"num_hidden_layers\":3,\"indexer_rope_interleave\":false}", 0);
  want half = att;
  half.style = PE_ROPE_NEOX;
  for (int l = 0; l < 3; l++)
    expect_cache("glm-5 half-split indexer", l, pe_model_rope_layer_role(m, l, PE_ROPE_ROLE_INDEXER),
                 &half);
  expect_cache("glm-5 attention", 0, pe_model_rope_layer(m, 0), &att);
  pe_model_rope_destroy(m);
  expect_model_refused("{\"model_type\":\"glm_moe_dsa\",\"qk_rope_head_dim\":64,\"rope_theta\":1e6,"
                       "\"num_hidden_layers\":2,\"indexer_types\":[\"full\",\"sometimes\"]}",
                       0, PE_ERR_PARSE, "indexer_types[1]");
}

/* ---------------------------------------------------------------------- */
/* DeepSeek-V4                                                            */
/* ---------------------------------------------------------------------- */

static void check_v4(const char *name) {
  pe_model_rope *m = model_file(name);
  assert_int_equal(pe_model_rope_num_layers(m), 43);
  /* compress_ratios [0, 0, 4, 128, 4, 128, ...] (44 entries for 43 layers:
   * DeepseekV4Config keeps the first 43). */
  double main_inv[32], comp_inv[32];
  default_freqs(64, 10000.0, main_inv);
  ref_yarn(64, 160000.0, 16.0, 65536.0, 32.0, 1.0, comp_inv);
  /* Sliding layers: default rope at rope_theta; compressed ones: YaRN at
   * compress_rope_theta with attention factor 1 (not 0.1 ln 16 + 1). */
  want mainw = {64, 64, PE_ROPE_GPTJ, PE_ROPE_SCALING_NONE, 10000.0, 1.0, 1.0, main_inv};
  want compw = {64, 64, PE_ROPE_GPTJ, PE_ROPE_SCALING_YARN, 160000.0, 16.0, 1.0, comp_inv};
  for (int l = 0; l < 43; l++) {
    int sliding = l < 2, csa = !sliding && (l - 2) % 2 == 0;
    const pe_rope_cache *a = pe_model_rope_layer_role(m, l, PE_ROPE_ROLE_ATTENTION);
    const pe_rope_cache *c = pe_model_rope_layer_role(m, l, PE_ROPE_ROLE_COMPRESSOR);
    const pe_rope_cache *x = pe_model_rope_layer_role(m, l, PE_ROPE_ROLE_INDEXER);
    expect_cache(name, l, a, sliding ? &mainw : &compw);
    /* The last 64 of 512 channels (q and the shared kv), output de-rotated. */
    expect_slice(name, m, l, PE_ROPE_ROLE_ATTENTION, 512, 448, 512, 448, 64,
                 PE_SLICE_DEROTATE_OUTPUT);
    expect_qk(name, m, l, PE_ROPE_ROLE_ATTENTION, PE_QK_NORM_RMS, PE_QK_NORM_PER_HEAD, 1e-6);
    if (sliding) {
      assert_null(c);
      assert_null(x);
      continue;
    }
    /* Every compressed layer: a compressor on the same compress rope (no
     * query; an entry's last 64 of 512); CSA layers also an indexer (last
     * 64 of index_head_dim 128). */
    assert_ptr_equal(c, a);
    expect_slice(name, m, l, PE_ROPE_ROLE_COMPRESSOR, 0, 0, 512, 448, 64, 0);
    expect_qk(name, m, l, PE_ROPE_ROLE_COMPRESSOR, PE_QK_NORM_RMS, PE_QK_NORM_PER_HEAD, 1e-6);
    if (csa) {
      assert_ptr_equal(x, a);
      expect_slice(name, m, l, PE_ROPE_ROLE_INDEXER, 128, 64, 128, 64, 64, 0);
    } else {
      assert_null(x);
    }
  }
  double le = -1.0;
  assert_int_equal(pe_model_rope_latent_norm_eps(m, &le), PE_OK);
  assert_true(le == 0.0);
  pe_model_rope_destroy(m);
}

static void test_deepseek_v4(void **state) {
  (void)state;
  /* DeepSeek's official keys (rope_theta, compress_rope_theta, rope_scaling,
   * compress_ratios) and the two forms transformers re-saves (nested
   * rope_parameters {main, compress}; flat rope_parameters and
   * compress_rope_parameters), with layer_types: the same model. */
  check_v4("per_layer/deepseek-v4-flash.json");
  check_v4("per_layer/deepseek-v4-flash-nested.json");
  check_v4("per_layer/deepseek-v4-flash-flat.json");
  /* Without compress_ratios: 2 heavily compressed layers, then CSA / HCA
   * alternating (DeepseekV4Config's default). */
  pe_model_rope *m = model_text("{\"model_type\":\"deepseek_v4\",\"num_hidden_layers\":5}", 0);
  static const int csa[5] = {0, 0, 0, 1, 0}; /* "compressed_sparse_attention" if i % 2, i = l - 2 */
  for (int l = 0; l < 5; l++) {
    assert_non_null(pe_model_rope_layer_role(m, l, PE_ROPE_ROLE_COMPRESSOR));
    assert_true((pe_model_rope_layer_role(m, l, PE_ROPE_ROLE_INDEXER) != NULL) == csa[l]);
  }
  pe_model_rope_destroy(m);
  /* A flat YaRN dict's own rope_theta is the main rope's: DeepseekV4Config
   * writes compress_rope_theta over it for the compressed rope. */
  m = model_text("{\"model_type\":\"deepseek_v4\",\"num_hidden_layers\":3,\"rope_theta\":10000,"
                "\"compress_ratios\":[0,4,128],\"rope_scaling\":{\"type\":\"yarn\",\"factor\":16,"
                "\"original_max_position_embeddings\":65536,\"rope_theta\":5}}", 0);
  pe_rope_params p;
  pe_rope_params_init(&p);
  assert_int_equal(pe_rope_cache_params(pe_model_rope_layer(m, 1), &p), PE_OK);
  assert_true(p.base == 160000.0 && p.scaling == PE_ROPE_SCALING_YARN);
  assert_int_equal(pe_rope_cache_params(pe_model_rope_layer(m, 0), &p), PE_OK);
  assert_true(p.base == 10000.0 && p.scaling == PE_ROPE_SCALING_NONE);
  pe_model_rope_destroy(m);
  /* index_head_dim: from the 64 rotated channels up to the library's
   * 16384-channel rows */
  m = model_text("{\"model_type\":\"deepseek_v4\",\"num_hidden_layers\":4,\"index_head_dim\":16384}", 0);
  pe_model_rope_destroy(m);
  const char *bad[] = {
      "{\"model_type\":\"deepseek_v4\",\"num_hidden_layers\":3,\"compress_ratios\":[0,4]}",
      "{\"model_type\":\"deepseek_v4\",\"num_hidden_layers\":2,\"compress_ratios\":[0,8]}",
      "{\"model_type\":\"deepseek_v4\",\"num_hidden_layers\":4,\"index_head_dim\":16385}",
      "{\"model_type\":\"deepseek_v4\",\"num_hidden_layers\":4,\"index_head_dim\":63}"};
  const char *needle[] = {"compress_ratios has 2 entries", "compress_ratios[1]",
                          "index_head_dim 16385 is above 16384", "index_head_dim 63 cannot hold"};
  for (int i = 0; i < 4; i++) {
    pe_model_rope *out = NULL;
    pe_status st = pe_model_rope_from_hf_config(bad[i], strlen(bad[i]), 0, 0, 0, &out);
    assert_true(st == PE_ERR_PARSE || st == PE_ERR_UNSUPPORTED);
    if (!strstr(pe_last_error(), needle[i])) fail_msg("\"%s\" lacks \"%s\"", pe_last_error(), needle[i]);
    assert_null(out);
  }
}

/* ---------------------------------------------------------------------- */
/* the views the slices give                                              */
/* ---------------------------------------------------------------------- */

/* Rotate the span of each row of x (rows of `row` channels, span at `off`,
 * d channels rotated) as GPT-J pairs at position p, in float64. */
static void ref_rotate_gptj(const float *x, double *out, int row, int off, int d,
                            const double *inv, int64_t p, int sign) {
  for (int j = 0; j < row; j++) out[j] = x[j];
  for (int i = 0; i < d / 2; i++) {
    double a = (double)p * (double)inv[i], c = cos(a), s = sign * sin(a);
    double x0 = x[off + 2 * i], x1 = x[off + 2 * i + 1];
    out[off + 2 * i] = x0 * c - x1 * s;
    out[off + 2 * i + 1] = x1 * c + x0 * s;
  }
}

static void test_slice_views(void **state) {
  (void)state;
  /* DeepSeek-V3.2: q [B=1, H=2, T=3, 192] with the rope part at 128; k =
   * kv_a_proj_with_mqa's rows [1, 1, 3, 576] with k_pe at 512. The views
   * data + offset, shape[3] = the cache's head_dim (64), the model's strides. */
  pe_model_rope *m = model_file("per_layer/deepseek-v3.2.json");
  const pe_rope_cache *c = pe_model_rope_layer(m, 5);
  pe_rope_slice s;
  pe_rope_slice_init(&s);
  assert_int_equal(pe_model_rope_layer_slice(m, 5, PE_ROPE_ROLE_ATTENTION, &s), PE_OK);
  enum { H = 2, T = 3 };
  float q[H * T * 192], k[T * 576], q0[H * T * 192], k0[T * 576];
  for (int i = 0; i < H * T * 192; i++) q[i] = q0[i] = (float)sin(0.37 * i + 0.1);
  for (int i = 0; i < T * 576; i++) k[i] = k0[i] = (float)cos(0.23 * i + 0.4);
  pe_tensor qv = {q + s.q_offset, PE_F32, {1, H, T, 64}, {(int64_t)H * T * s.q_head_dim,
                                                          (int64_t)T * s.q_head_dim, s.q_head_dim, 1}};
  pe_tensor kv = {k + s.k_offset, PE_F32, {1, 1, T, 64}, {(int64_t)T * s.k_head_dim,
                                                          (int64_t)T * s.k_head_dim, s.k_head_dim, 1}};
  int64_t pos[T] = {7, 100, 4000};
  assert_int_equal(pe_apply_rope_qk(c, &qv, &kv, pos, 0, NULL), PE_OK);
  double inv[32];
  ref_yarn(64, 10000.0, 40.0, 4096.0, 32.0, 1.0, inv);
  double ref[576];
  for (int h = 0; h < H; h++)
    for (int t = 0; t < T; t++) {
      size_t o = ((size_t)h * T + t) * 192;
      ref_rotate_gptj(q0 + o, ref, 192, 128, 64, inv, pos[t], 1);
      for (int j = 0; j < 192; j++)
        if (fabs(q[o + j] - ref[j]) > 1e-6) fail_msg("q[%d,%d,%d] = %.9g, expected %.9g", h, t, j, q[o + j], ref[j]);
    }
  for (int t = 0; t < T; t++) {
    ref_rotate_gptj(k0 + (size_t)t * 576, ref, 576, 512, 64, inv, pos[t], 1);
    for (int j = 0; j < 576; j++)
      if (fabs(k[(size_t)t * 576 + j] - ref[j]) > 1e-6) fail_msg("k[%d,%d] = %.9g, expected %.9g", t, j, k[(size_t)t * 576 + j], ref[j]);
  }
  pe_model_rope_destroy(m);

  /* DeepSeek-V4: the last 64 of 512; the output's span de-rotated with
   * PE_ROPE_INVERSE at the query's position (attention factor 1). */
  m = model_file("per_layer/deepseek-v4-flash.json");
  c = pe_model_rope_layer(m, 3);
  assert_int_equal(pe_model_rope_layer_slice(m, 3, PE_ROPE_ROLE_ATTENTION, &s), PE_OK);
  assert_true(s.flags & PE_SLICE_DEROTATE_OUTPUT);
  float o[T * 512], o0[T * 512];
  for (int i = 0; i < T * 512; i++) o[i] = o0[i] = (float)sin(0.11 * i);
  pe_tensor ov = {o + s.q_offset, PE_F32, {1, 1, T, 64}, {(int64_t)T * 512, (int64_t)T * 512, 512, 1}};
  ref_yarn(64, 160000.0, 16.0, 65536.0, 32.0, 1.0, inv); /* layer 3: a compressed layer */
  assert_int_equal(pe_apply_rope_qk(c, &ov, NULL, pos, PE_ROPE_INVERSE, NULL), PE_OK);
  for (int t = 0; t < T; t++) {
    ref_rotate_gptj(o0 + (size_t)t * 512, ref, 512, 448, 64, inv, pos[t], -1);
    for (int j = 0; j < 512; j++)
      if (fabs(o[(size_t)t * 512 + j] - ref[j]) > 1e-6) fail_msg("out[%d,%d] = %.9g, expected %.9g", t, j, o[(size_t)t * 512 + j], ref[j]);
  }
  pe_model_rope_destroy(m);
}

/* ---------------------------------------------------------------------- */
/* QK-norms, head-first slices, model types by architecture               */
/* ---------------------------------------------------------------------- */

static void test_qk_norms(void **state) {
  (void)state;
  /* Qwen3Attention: q_norm / k_norm RMS per head, eps rms_norm_eps. */
  pe_model_rope *m = model_text("{\"model_type\":\"qwen3\",\"head_dim\":128,\"rope_theta\":1e6,"
                               "\"num_hidden_layers\":2,\"rms_norm_eps\":1e-6}", 0);
  expect_qk("qwen3", m, 1, PE_ROPE_ROLE_ATTENTION, PE_QK_NORM_RMS, PE_QK_NORM_PER_HEAD, 1e-6);
  expect_slice("qwen3", m, 1, PE_ROPE_ROLE_ATTENTION, 128, 0, 128, 0, 128, 0);
  double le = -1.0;
  assert_int_equal(pe_model_rope_latent_norm_eps(m, &le), PE_OK);
  assert_true(le == 0.0);
  pe_model_rope_destroy(m);
  /* One layer's norm per model: OLMo 2, OLMoE and MiniMax-M2 over all of a
   * token's heads; GLM-4.5 per head only with use_qk_norm; Llama 4 without
   * use_qk_norm none. */
  static const struct {
    const char *json;
    pe_qk_norm_kind kind;
    pe_qk_norm_scope scope;
    double eps;
  } one[] = {
      {"{\"model_type\":\"olmo2\",\"head_dim\":128,\"rope_theta\":5e5,\"num_hidden_layers\":1,"
       "\"rms_norm_eps\":1e-6}", PE_QK_NORM_RMS, PE_QK_NORM_PER_TOKEN, 1e-6},
      {"{\"model_type\":\"olmoe\",\"head_dim\":128,\"rope_theta\":1e4,\"num_hidden_layers\":1,"
       "\"rms_norm_eps\":1e-5}", PE_QK_NORM_RMS, PE_QK_NORM_PER_TOKEN, 1e-5},
      {"{\"model_type\":\"minimax_m2\",\"rms_norm_eps\":1e-6,\"num_hidden_layers\":1}",
       PE_QK_NORM_RMS, PE_QK_NORM_PER_TOKEN, 1e-6},
      {"{\"model_type\":\"glm4_moe\",\"head_dim\":128,\"partial_rotary_factor\":0.5,"
       "\"rope_theta\":1e6,\"num_hidden_layers\":1,\"rms_norm_eps\":1e-5,\"use_qk_norm\":true}",
       PE_QK_NORM_RMS, PE_QK_NORM_PER_HEAD, 1e-5},
      {"{\"model_type\":\"glm4_moe\",\"head_dim\":128,\"partial_rotary_factor\":0.5,"
       "\"rope_theta\":1e6,\"num_hidden_layers\":1,\"rms_norm_eps\":1e-5}",
       PE_QK_NORM_NONE, PE_QK_NORM_PER_HEAD, 0},
      {"{\"model_type\":\"llama4_text\",\"num_hidden_layers\":4,\"rms_norm_eps\":1e-5,"
       "\"use_qk_norm\":false}", PE_QK_NORM_NONE, PE_QK_NORM_PER_HEAD, 0},
      {"{\"model_type\":\"cohere\",\"head_dim\":128,\"num_hidden_layers\":1}",
       PE_QK_NORM_NONE, PE_QK_NORM_PER_HEAD, 0}};
  for (size_t k = 0; k < sizeof one / sizeof one[0]; k++) {
    m = model_text(one[k].json, 0);
    expect_qk(one[k].json, m, 0, PE_ROPE_ROLE_ATTENTION, one[k].kind, one[k].scope, one[k].eps);
    pe_model_rope_destroy(m);
  }
  m = model_text("{\"model_type\":\"minimax_m2\",\"rms_norm_eps\":1e-6,\"num_hidden_layers\":1}", 0);
  expect_slice("minimax-m2", m, 0, PE_ROPE_ROLE_ATTENTION, 128, 0, 128, 0, 64, 0);
  pe_model_rope_destroy(m);
  /* Gemma 3: (1 + w) per head; Qwen3-Next the same, on its 64 of 256. */
  m = model_text("{\"model_type\":\"gemma3_text\",\"num_hidden_layers\":6,\"rms_norm_eps\":1e-6}", 0);
  for (int l = 0; l < 6; l++)
    expect_qk("gemma3", m, l, PE_ROPE_ROLE_ATTENTION, PE_QK_NORM_RMS_UNIT_OFFSET,
              PE_QK_NORM_PER_HEAD, 1e-6);
  pe_model_rope_destroy(m);
  m = model_text("{\"model_type\":\"qwen3_next\",\"head_dim\":256,\"partial_rotary_factor\":0.25,"
                "\"rope_theta\":1e7,\"num_hidden_layers\":4,\"rms_norm_eps\":1e-6}", 0);
  expect_qk("qwen3-next", m, 3, PE_ROPE_ROLE_ATTENTION, PE_QK_NORM_RMS_UNIT_OFFSET,
            PE_QK_NORM_PER_HEAD, 1e-6);
  expect_slice("qwen3-next", m, 3, PE_ROPE_ROLE_ATTENTION, 256, 0, 256, 0, 64, 0);
  expect_slice("qwen3-next linear layer", m, 0, PE_ROPE_ROLE_ATTENTION, 0, 0, 0, 0, 0, 0);
  /* A linear-attention layer has no q / k norm of this kind (GatedDeltaNet). */
  expect_qk("qwen3-next linear layer", m, 0, PE_ROPE_ROLE_ATTENTION, PE_QK_NORM_NONE,
            PE_QK_NORM_PER_HEAD, 0);
  pe_model_rope_destroy(m);
  /* EXAONE 4: q_norm / k_norm on every layer, RoPE on the sliding ones only. */
  m = model_text("{\"model_type\":\"exaone4\",\"head_dim\":128,\"num_hidden_layers\":4,"
                "\"rms_norm_eps\":1e-5}", 0);
  assert_null(pe_model_rope_layer(m, 3));
  for (int l = 0; l < 4; l++)
    expect_qk("exaone4", m, l, PE_ROPE_ROLE_ATTENTION, PE_QK_NORM_RMS, PE_QK_NORM_PER_HEAD, 1e-5);
  pe_model_rope_destroy(m);
  /* Llama 4: L2 on the RoPE layers only (use_qk_norm, default true). */
  m = model_text("{\"model_type\":\"llama4_text\",\"num_hidden_layers\":4,\"rms_norm_eps\":1e-5}", 0);
  for (int l = 0; l < 4; l++)
    expect_qk("llama4", m, l, PE_ROPE_ROLE_ATTENTION, l == 3 ? PE_QK_NORM_NONE : PE_QK_NORM_L2,
              PE_QK_NORM_PER_HEAD, 1e-5);
  pe_model_rope_destroy(m);
  /* Cohere's use_qk_norm is a LayerNorm: said, not approximated. */
  m = model_text("{\"model_type\":\"cohere\",\"head_dim\":128,\"num_hidden_layers\":1,"
                "\"use_qk_norm\":true,\"layer_norm_eps\":1e-5}", 0);
  expect_qk_refused("cohere", m, 0, PE_ROPE_ROLE_ATTENTION, "LayerNorm");
  pe_model_rope_destroy(m);
  /* A norm the census has not read is said to be unknown, never none. */
  m = model_text("{\"model_type\":\"gemma4_text\",\"head_dim\":256,\"rope_theta\":1e6,"
                 "\"num_hidden_layers\":1}", 0);
  expect_qk_refused("gemma4", m, 0, PE_ROPE_ROLE_ATTENTION, "not known");
  pe_model_rope_destroy(m);
}

/* A config without the norm's epsilon key gets its config class's default
 * for it, as transformers' class does (the dataclass field default, which a
 * config dict without the key leaves in place); with the key, its value. */
static void test_qk_norm_eps_defaults(void **state) {
  (void)state;
  /* The defaults, each read from transformers' configuration class in
   * src/transformers/models/<dir>/configuration_<dir>.py:
   *   qwen3        Qwen3Config            rms_norm_eps: float = 1e-6
   *   qwen3_moe    Qwen3MoeConfig         rms_norm_eps: float = 1e-6
   *   qwen3_next   Qwen3NextConfig        rms_norm_eps: float = 1e-6
   *   qwen3_5      Qwen3_5TextConfig      rms_norm_eps: float = 1e-6
   *   qwen3_5_moe  Qwen3_5MoeTextConfig   rms_norm_eps: float = 1e-6
   *   qwen3_vl     Qwen3VLTextConfig      rms_norm_eps = 1e-6
   *   gemma3       Gemma3TextConfig       rms_norm_eps = 1e-6
   *   gemma3n      Gemma3nTextConfig      rms_norm_eps: float = 1e-6
   *   olmo2        Olmo2Config            rms_norm_eps: float = 1e-5
   *                (Olmo3Config subclasses Olmo2Config: modular_olmo3.py)
   *   olmoe        OlmoeConfig            rms_norm_eps: float = 1e-05
   *   exaone4      Exaone4Config          rms_norm_eps: float = 1e-5
   *   glm4_moe     Glm4MoeConfig          rms_norm_eps: float = 1e-5
   *   minimax_m2   MiniMaxM2Config        rms_norm_eps: float = 1e-06
   *   llama4       Llama4TextConfig       rms_norm_eps: float = 1e-5
   *   deepseek_v4  DeepseekV4Config       rms_norm_eps: float = 1.0e-6
   * The composite configs (qwen3_5, qwen3_vl, gemma3, gemma3n, llama4) build
   * their text_config with the text class, so its default holds there too. */
  /* The keys the loader needs besides model_type (no eps): */
#define HEAD_128 "\"head_dim\":128,\"rope_theta\":1e6,\"num_hidden_layers\":1"
#define HYBRID "\"head_dim\":256,\"partial_rotary_factor\":0.25,\"rope_theta\":1e7,\"num_hidden_layers\":4"
#define GEMMA3N "\"head_dim\":256,\"rope_theta\":1e6,\"rope_local_base_freq\":1e4,\"num_hidden_layers\":5"
  static const struct {
    const char *type, *body;
    int layer, role;
    pe_qk_norm_kind kind;
    pe_qk_norm_scope scope;
    double dflt;
  } row[] = {
      {"qwen3", HEAD_128, 0, 0, PE_QK_NORM_RMS, PE_QK_NORM_PER_HEAD, 1e-6},
      {"qwen3_moe", HEAD_128, 0, 0, PE_QK_NORM_RMS, PE_QK_NORM_PER_HEAD, 1e-6},
      /* the hybrids' layer 3 is the first full-attention layer */
      {"qwen3_next", HYBRID, 3, 0, PE_QK_NORM_RMS_UNIT_OFFSET, PE_QK_NORM_PER_HEAD, 1e-6},
      {"qwen3_5", HYBRID, 3, 0, PE_QK_NORM_RMS_UNIT_OFFSET, PE_QK_NORM_PER_HEAD, 1e-6},
      {"qwen3_5_text", HYBRID, 3, 0, PE_QK_NORM_RMS_UNIT_OFFSET, PE_QK_NORM_PER_HEAD, 1e-6},
      {"qwen3_5_moe", HYBRID, 3, 0, PE_QK_NORM_RMS_UNIT_OFFSET, PE_QK_NORM_PER_HEAD, 1e-6},
      {"qwen3_5_moe_text", HYBRID, 3, 0, PE_QK_NORM_RMS_UNIT_OFFSET, PE_QK_NORM_PER_HEAD, 1e-6},
      {"qwen3_vl", HEAD_128, 0, 0, PE_QK_NORM_RMS, PE_QK_NORM_PER_HEAD, 1e-6},
      {"qwen3_vl_text", HEAD_128, 0, 0, PE_QK_NORM_RMS, PE_QK_NORM_PER_HEAD, 1e-6},
      {"gemma3_text", "\"num_hidden_layers\":6", 5, 0, PE_QK_NORM_RMS_UNIT_OFFSET,
       PE_QK_NORM_PER_HEAD, 1e-6},
      {"gemma3", "\"num_hidden_layers\":6", 0, 0, PE_QK_NORM_RMS_UNIT_OFFSET, PE_QK_NORM_PER_HEAD,
       1e-6},
      {"gemma3n_text", GEMMA3N, 4, 0, PE_QK_NORM_RMS, PE_QK_NORM_PER_HEAD, 1e-6},
      {"gemma3n", GEMMA3N, 0, 0, PE_QK_NORM_RMS, PE_QK_NORM_PER_HEAD, 1e-6},
      {"olmo2", HEAD_128, 0, 0, PE_QK_NORM_RMS, PE_QK_NORM_PER_TOKEN, 1e-5},
      {"olmo3", "\"head_dim\":128,\"num_hidden_layers\":4", 3, 0, PE_QK_NORM_RMS,
       PE_QK_NORM_PER_TOKEN, 1e-5},
      {"olmoe", HEAD_128, 0, 0, PE_QK_NORM_RMS, PE_QK_NORM_PER_TOKEN, 1e-5},
      /* EXAONE 4's global layer 3 norms without rotating */
      {"exaone4", "\"head_dim\":128,\"num_hidden_layers\":4", 3, 0, PE_QK_NORM_RMS,
       PE_QK_NORM_PER_HEAD, 1e-5},
      {"glm4_moe", HEAD_128 ",\"partial_rotary_factor\":0.5,\"use_qk_norm\":true", 0, 0,
       PE_QK_NORM_RMS, PE_QK_NORM_PER_HEAD, 1e-5},
      {"minimax_m2", "\"num_hidden_layers\":1", 0, 0, PE_QK_NORM_RMS, PE_QK_NORM_PER_TOKEN, 1e-6},
      {"llama4_text", "\"num_hidden_layers\":4", 0, 0, PE_QK_NORM_L2, PE_QK_NORM_PER_HEAD, 1e-5},
      {"llama4", "\"num_hidden_layers\":4", 2, 0, PE_QK_NORM_L2, PE_QK_NORM_PER_HEAD, 1e-5},
      /* V4: the attention and the compressor of HCA layer 0, the indexer of
       * CSA layer 3 (DeepseekV4Config's default layer_types) */
      {"deepseek_v4", "\"num_hidden_layers\":4", 0, PE_ROPE_ROLE_ATTENTION, PE_QK_NORM_RMS,
       PE_QK_NORM_PER_HEAD, 1e-6},
      {"deepseek_v4", "\"num_hidden_layers\":4", 0, PE_ROPE_ROLE_COMPRESSOR, PE_QK_NORM_RMS,
       PE_QK_NORM_PER_HEAD, 1e-6},
      {"deepseek_v4", "\"num_hidden_layers\":4", 3, PE_ROPE_ROLE_INDEXER, PE_QK_NORM_RMS,
       PE_QK_NORM_PER_HEAD, 1e-6},
  };
#undef HEAD_128
#undef HYBRID
#undef GEMMA3N
  char json[512], what[64];
  for (size_t k = 0; k < sizeof row / sizeof row[0]; k++) {
    snprintf(json, sizeof json, "{\"model_type\":\"%s\",%s}", row[k].type, row[k].body);
    snprintf(what, sizeof what, "%s without rms_norm_eps", row[k].type);
    pe_model_rope *m = model_text(json, 0);
    expect_qk(what, m, row[k].layer, row[k].role, row[k].kind, row[k].scope, row[k].dflt);
    pe_model_rope_destroy(m);
    /* JSON null is "not set", as for every key the loaders read */
    snprintf(json, sizeof json, "{\"model_type\":\"%s\",%s,\"rms_norm_eps\":null}", row[k].type,
             row[k].body);
    m = model_text(json, 0);
    expect_qk(json, m, row[k].layer, row[k].role, row[k].kind, row[k].scope, row[k].dflt);
    pe_model_rope_destroy(m);
    /* the config's own value, whatever the default */
    snprintf(json, sizeof json, "{\"model_type\":\"%s\",%s,\"rms_norm_eps\":2.5e-7}", row[k].type,
             row[k].body);
    m = model_text(json, 0);
    expect_qk(json, m, row[k].layer, row[k].role, row[k].kind, row[k].scope, 2.5e-7);
    pe_model_rope_destroy(m);
  }
  /* The published google/gemma-3 configs: their text_config has no
   * rms_norm_eps, so every layer's QK-norm is Gemma3TextConfig's 1e-6. */
  static const struct {
    const char *file;
    int layers;
  } gemma[] = {{"per_layer/gemma-3-4b-it.json", 34},
               {"per_layer/gemma-3-12b-it.json", 48},
               {"per_layer/gemma-3-27b-it.json", 62}};
  for (size_t k = 0; k < sizeof gemma / sizeof gemma[0]; k++) {
    pe_model_rope *m = model_file(gemma[k].file);
    assert_int_equal(pe_model_rope_num_layers(m), gemma[k].layers);
    for (int l = 0; l < gemma[k].layers; l++)
      expect_qk(gemma[k].file, m, l, PE_ROPE_ROLE_ATTENTION, PE_QK_NORM_RMS_UNIT_OFFSET,
                PE_QK_NORM_PER_HEAD, 1e-6);
    pe_model_rope_destroy(m);
  }
}

/* An epsilon the config sets to something that is not one is refused when
 * asked for, with the key and the value named and nothing written; the
 * rotation itself still loads. */
static void test_qk_norm_eps_refused(void **state) {
  (void)state;
  static const struct {
    const char *value, *needle;
  } bad[] = {
      {"\"1e-6\"", "rms_norm_eps \"1e-6\" (a string), not a number"},
      {"true", "rms_norm_eps true, not a number"},
      {"[1e-6]", "rms_norm_eps as an array, not a number"},
      {"{\"eps\":1e-6}", "rms_norm_eps as an object, not a number"},
      {"-1e-6", "rms_norm_eps -1e-06, not a finite float32 >= 0"},
      {"1e999", "rms_norm_eps inf, not a finite float32 >= 0"},  /* overflows a double */
      {"1e39", "rms_norm_eps 1e+39, not a finite float32 >= 0"}, /* overflows a float32 */
  };
  char json[256];
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    snprintf(json, sizeof json,
             "{\"model_type\":\"qwen3\",\"head_dim\":128,\"rope_theta\":1e6,"
             "\"num_hidden_layers\":2,\"rms_norm_eps\":%s}", bad[k].value);
    pe_model_rope *m = model_text(json, 0);
    assert_non_null(pe_model_rope_layer(m, 1));
    pe_qk_norm n;
    pe_qk_norm_init(&n);
    n.kind = PE_QK_NORM_L2; /* untouched on error */
    assert_int_equal(pe_model_rope_layer_qk_norm(m, 1, PE_ROPE_ROLE_ATTENTION, &n), PE_ERR_PARSE);
    assert_int_equal(n.kind, PE_QK_NORM_L2);
    const char *e = pe_last_error();
    if (!strstr(e, bad[k].needle) || !strstr(e, "layer 1's QK norm"))
      fail_msg("%s: \"%s\" lacks \"%s\"", json, e, bad[k].needle);
    pe_model_rope_destroy(m);
  }
  /* V4's compressor reads the same key. */
  pe_model_rope *m =
      model_text("{\"model_type\":\"deepseek_v4\",\"num_hidden_layers\":1,\"rms_norm_eps\":-1}", 0);
  pe_qk_norm n;
  pe_qk_norm_init(&n);
  assert_int_equal(pe_model_rope_layer_qk_norm(m, 0, PE_ROPE_ROLE_COMPRESSOR, &n), PE_ERR_PARSE);
  if (!strstr(pe_last_error(), "layer 0's compressor norm: config.json has rms_norm_eps -1,"))
    fail_msg("\"%s\"", pe_last_error());
  pe_model_rope_destroy(m);
}

static void test_architectures(void **state) {
  (void)state;
  /* No model_type: architectures[0] names the class. */
  pe_model_rope *m = model_text("{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"qk_rope_head_dim\":64,"
                               "\"rope_theta\":10000.0,\"num_hidden_layers\":1}", 0);
  assert_int_equal(pe_model_rope_pairing_guessed(m), 0);
  pe_rope_params p;
  pe_rope_params_init(&p);
  assert_int_equal(pe_rope_cache_params(pe_model_rope_layer(m, 0), &p), PE_OK);
  assert_int_equal(p.style, PE_ROPE_GPTJ);
  expect_slice("by architecture", m, 0, PE_ROPE_ROLE_ATTENTION, 192, 128, 576, 512, 64, 0);
  pe_model_rope_destroy(m);
  /* A text_config's model_type when the top level's is not in the table. */
  m = model_text("{\"model_type\":\"kimi_k25\",\"text_config\":{\"model_type\":\"kimi_k2\","
                "\"qk_rope_head_dim\":64,\"rope_theta\":50000.0,\"num_hidden_layers\":1}}", 0);
  assert_int_equal(pe_model_rope_pairing_guessed(m), 0);
  pe_model_rope_destroy(m);
  const char *unknown = "{\"architectures\":[\"WarpDriveForCausalLM\"],\"head_dim\":64,"
                        "\"rope_theta\":1e4,\"num_hidden_layers\":1}";
  pe_model_rope *out = NULL;
  assert_int_equal(pe_model_rope_from_hf_config(unknown, strlen(unknown), 0, 0, 0, &out),
                   PE_ERR_UNSUPPORTED);
  assert_non_null(strstr(pe_last_error(), "WarpDriveForCausalLM"));
  assert_null(out);
}

static void test_accessor_errors(void **state) {
  (void)state;
  pe_model_rope *m = model_file("per_layer/deepseek-v3.2.json");
  pe_rope_slice s;
  pe_rope_slice_init(&s);
  assert_int_equal(s.struct_size, sizeof s);
  assert_null(pe_model_rope_layer_role(m, 0, 3));
  assert_non_null(strstr(pe_last_error(), "role 3"));
  assert_null(pe_model_rope_layer_role(m, 61, 0));
  assert_null(pe_model_rope_layer_role(NULL, 0, 0));
  assert_int_equal(pe_model_rope_layer_slice(m, 0, -1, &s), PE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pe_model_rope_layer_slice(m, -1, 0, &s), PE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pe_model_rope_layer_slice(m, 0, 0, NULL), PE_ERR_NULL_POINTER);
  assert_int_equal(pe_model_rope_layer_slice(NULL, 0, 0, &s), PE_ERR_NULL_POINTER);
  s.struct_size = 8;
  s.q_head_dim = 77;
  assert_int_equal(pe_model_rope_layer_slice(m, 0, 0, &s), PE_ERR_INVALID_ARGUMENT);
  assert_int_equal(s.q_head_dim, 77); /* nothing written */
  pe_qk_norm n;
  pe_qk_norm_init(&n);
  assert_int_equal(pe_model_rope_layer_qk_norm(m, 0, 5, &n), PE_ERR_INVALID_ARGUMENT);
  assert_int_equal(pe_model_rope_layer_qk_norm(m, 0, 0, NULL), PE_ERR_NULL_POINTER);
  n.struct_size = 4;
  assert_int_equal(pe_model_rope_layer_qk_norm(m, 0, 0, &n), PE_ERR_INVALID_ARGUMENT);
  double e;
  assert_int_equal(pe_model_rope_latent_norm_eps(NULL, &e), PE_ERR_NULL_POINTER);
  assert_int_equal(pe_model_rope_latent_norm_eps(m, NULL), PE_ERR_NULL_POINTER);
  pe_rope_slice_init(NULL); /* a no-op */
  pe_model_rope_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_deepseek_v32),    cmocka_unit_test(test_glm5),
      cmocka_unit_test(test_deepseek_v4),     cmocka_unit_test(test_slice_views),
      cmocka_unit_test(test_qk_norms),        cmocka_unit_test(test_qk_norm_eps_defaults),
      cmocka_unit_test(test_qk_norm_eps_refused), cmocka_unit_test(test_architectures),
      cmocka_unit_test(test_accessor_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
