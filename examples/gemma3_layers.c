/* gemma3_layers.c - an engine walking the layers of Gemma 3: each layer's
 * rope (local sliding-window layers at rope_local_base_freq, global layers
 * at rope_theta with linear scaling) and QK-norm (Gemma3RMSNorm, 1 + w) come
 * from config.json (one parse); q and k of a 3-token chunk of 2 sequences are
 * normed and rotated in place on every layer and checked against the float64
 * formulas of transformers' Gemma3Attention.
 * Usage: gemma3_layers [config.json]   (default: gemma-3-27b-it's config, inline)
 * Build: cc gemma3_layers.c $(pkg-config --cflags --libs posenc) -lm */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <posenc.h>

/* google/gemma-3-27b-it's config.json without vision_config and token ids. The
 * keys it leaves out take Gemma3TextConfig's defaults, as in transformers:
 * rope_theta 1e6, rope_local_base_freq 10000, max_position_embeddings 131072
 * and rms_norm_eps 1e-6 (the QK-norm's epsilon). */
static const char gemma3_27b[] =
    "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"model_type\": \"gemma3\","
    " \"text_config\": {\"head_dim\": 128, \"hidden_size\": 5376, \"intermediate_size\": 21504,"
    " \"model_type\": \"gemma3_text\", \"num_attention_heads\": 32, \"num_hidden_layers\": 62,"
    " \"num_key_value_heads\": 16, \"query_pre_attn_scalar\": 168,"
    " \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"}, \"sliding_window\": 1024,"
    " \"sliding_window_pattern\": 6}, \"torch_dtype\": \"bfloat16\"}";

enum { SEQS = 2, TOKENS = 3 };
#define FAIL(msg) return fprintf(stderr, "gemma3_layers: %s\n", msg), 1

/* The float64 reference of one head's row: Gemma3RMSNorm over head_dim,
 * x * rsqrt(mean(x^2) + eps) * (1 + w) (HF: in float32, one cast at the end), then
 * rotate_half RoPE, pairs (j, j + R/2), angle (pos / factor) * base^(-2j/R)
 * (linear scaling divides the positions). Returns the largest difference of
 * got from it in float32 ulps (u = 2^-24) of the pair's size |n_j| + |n_j+R/2|
 * (n the exact normed values), the measure posenc.h bounds. */
static double check_row(const float *x, const float *got, const float *w, int D, int R, double eps,
                        double pos, double base, double factor) {
  double n[512], out[512], ss = 0, worst = 0;
  for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
  const double r = 1.0 / sqrt(ss / D + eps);
  for (int i = 0; i < D; i++) out[i] = n[i] = x[i] * r * (1.0 + w[i]);
  for (int j = 0; j < R / 2; j++) {
    double a = pos / factor * pow(base, -2.0 * j / R), c = cos(a), s = sin(a);
    out[j] = n[j] * c - n[j + R / 2] * s;
    out[j + R / 2] = n[j + R / 2] * c + n[j] * s;
  }
  for (int i = 0; i < D; i++) {
    double v = i < R ? fabs(n[i % (R / 2)]) + fabs(n[i % (R / 2) + R / 2]) : fabs(n[i]);
    double d = fabs(got[i] - out[i]);
    worst = fmax(worst, v > 0 ? d / (v * 0x1p-24) : d > 0 ? INFINITY : 0);
  }
  return worst;
}

int main(int argc, char **argv) {
  static char buf[1 << 20];
  const char *json = gemma3_27b;
  size_t len = strlen(gemma3_27b);
  if (argc > 1) {
    FILE *f = fopen(argv[1], "rb");
    if (!f) return perror(argv[1]), 1;
    len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    json = buf;
  }
  /* One parse for every layer. max_positions 0: cos/sin computed per token, so
   * any position works; a table for all 131072 positions would take 64 MiB
   * per cache (pass the longest context you serve instead). */
  pe_model_rope *model;
  int32_t H, KVH;
  if (pe_model_rope_from_hf_config(json, len, 0, 0, 0, &model) != PE_OK ||
      pe_model_rope_heads(model, &H, &KVH) != PE_OK)
    FAIL(pe_last_error());
  const int L = pe_model_rope_num_layers(model);
  const pe_rope_cache *local = pe_model_rope_layer(model, 0); /* layer 0 is a sliding one */
  pe_rope_params rp;
  pe_rope_params_init(&rp);
  if (!local || pe_rope_cache_params(local, &rp) != PE_OK) FAIL(pe_last_error());
  const int D = rp.head_dim;
  if (D > 512) FAIL("head_dim above 512");

  /* q_proj and k_proj outputs as the model computes them, [SEQS, TOKENS, heads * D]:
   *   q view [SEQS, 32, TOKENS, 128], strides {TOKENS*32*128, 128, 32*128, 1}
   *   k view [SEQS, 16, TOKENS, 128], strides {TOKENS*16*128, 128, 16*128, 1}
   * (HF's .view(..., heads, head_dim).transpose(1, 2), as strides, no copy). */
  const size_t nq = (size_t)SEQS * TOKENS * H * D, nk = (size_t)SEQS * TOKENS * KVH * D;
  float *x0 = malloc(sizeof(float) * (nq + nk)), *x = malloc(sizeof(float) * (nq + nk));
  float *w = malloc(sizeof(float) * 2 * D); /* this layer's q_norm.weight, k_norm.weight */
  for (size_t i = 0; i < nq + nk; i++) /* head rows at scales 1 .. 1e-3: mean(x^2) down to ~eps */
    x0[i] = powf(10.f, -(float)(i / D % 4)) * sinf(0.37f * (float)i);
  pe_tensor q = {x, PE_F32, {SEQS, H, TOKENS, D}, {(int64_t)TOKENS * H * D, D, (int64_t)H * D, 1}};
  pe_tensor k = {x + nq, PE_F32, {SEQS, KVH, TOKENS, D},
                 {(int64_t)TOKENS * KVH * D, D, (int64_t)KVH * D, 1}};
  /* Sequence 0 starts a prompt, sequence 1 is 100000 tokens into its context. */
  const int64_t pos[SEQS * TOKENS] = {0, 1, 2, 100000, 100001, 100002};

  /* posenc.h's bound: (M/2 + 3.5) u v plus half an ulp of the result (<= u v),
   * M = ceil(D/16) + 4: 10.5 ulps for head_dim 128, 14.5 for 256 (~3 measured). */
  const double tol = (D + 15) / 16 / 2.0 + 2.0 + 4.5;
  double worst = 0, local_base = rp.base, global_base = 0, global_factor = 0;
  int n_global = 0, wrong = 0;
  char globals[512] = "";
  for (int l = 0; l < L; l++) {
    const pe_rope_cache *rope = pe_model_rope_layer(model, l);
    pe_qk_norm norm;
    pe_qk_norm_init(&norm);
    if (!rope || pe_rope_cache_params(rope, &rp) != PE_OK ||
        pe_model_rope_layer_qk_norm(model, l, PE_ROPE_ROLE_ATTENTION, &norm) != PE_OK)
      FAIL(pe_last_error());
    if (norm.kind != PE_QK_NORM_RMS_UNIT_OFFSET || norm.scope != PE_QK_NORM_PER_HEAD ||
        rp.style != PE_ROPE_NEOX ||
        (rp.scaling != PE_ROPE_SCALING_NONE && rp.scaling != PE_ROPE_SCALING_LINEAR))
      FAIL("the reference is Gemma 3's: RMS (1 + w) per head, NeoX pairs, default or linear rope");
    const double factor = rp.scaling == PE_ROPE_SCALING_LINEAR ? rp.factor : 1.0;
    const int global = rope != local; /* two caches: compare the pointers */
    if (global) {
      n_global++, global_base = rp.base, global_factor = factor;
      snprintf(globals + strlen(globals), sizeof globals - strlen(globals), " %d", l);
    }
    /* The published 27b: every 6th layer global at 1e6 / 8, the others at 10000. */
    if (argc == 1 && (global != ((l + 1) % 6 == 0) || rp.base != (global ? 1e6 : 1e4) ||
                      factor != (global ? 8.0 : 1.0) || norm.eps != 1e-6f || H != 32 ||
                      KVH != 16 || D != 128))
      wrong++;

    /* The checkpoint's per-layer weights (made up here), then the step: q and k
     * normed and rotated in place (pe_qk_norm_rope_store would also write k
     * and v into a paged cache: examples/qwen3_store.c). */
    for (int i = 0; i < D; i++) {
      w[i] = 0.5f * sinf(0.3f * (float)i + (float)l);
      w[D + i] = 0.5f * cosf(0.2f * (float)i - (float)l);
    }
    norm.q_weight = w;
    norm.k_weight = w + D;
    memcpy(x, x0, sizeof(float) * (nq + nk));
    if (pe_qk_norm_rope(rope, &norm, &q, &k, pos, 0, NULL) != PE_OK) FAIL(pe_last_error());

    for (int s = 0; s < SEQS; s++)
      for (int t = 0; t < TOKENS; t++)
        for (int h = 0; h < H + KVH; h++) { /* q heads, then k heads */
          size_t o = h < H ? (((size_t)s * TOKENS + t) * H + h) * D
                           : nq + (((size_t)s * TOKENS + t) * KVH + h - H) * D;
          double e = check_row(x0 + o, x + o, h < H ? w : w + D, D, rp.rotary_dim, norm.eps,
                               (double)pos[s * TOKENS + t], rp.base, factor);
          worst = fmax(worst, e);
        }
  }
  /* The attention itself (not this step) scales scores by query_pre_attn_scalar^-0.5
   * (168 on the 27b, not head_dim) and masks local layers to sliding_window. */
  printf("gemma3_layers: %d layers, %d local (theta %g), %d global (theta %g, linear factor %g):%s\n", L,
         L - n_global, local_base, n_global, global_base, global_factor, globals);
  printf("gemma3_layers: %d q / %d kv heads of %d, %d x %d tokens per layer: largest difference "
         "from float64 %.3g float32 ulps (bound %.1f)%s\n", H, KVH, D, SEQS, TOKENS, worst, tol,
         wrong ? "; the published 27b values were not read" : "");
  free(x0), free(x), free(w);
  pe_model_rope_destroy(model);
  return worst <= tol && !wrong ? 0 : 1;
}
