/* qwen3_store.c - one decode step of a Qwen3 attention layer, 4 sequences:
 * q, k and v are views of the packed QKV projection rows; q and k are normed
 * (q_norm / k_norm) and rotated, k and v written into a paged KV cache, in one
 * call - once in the NHD layout and once in the HND layout. The rope, the
 * norm's kind and eps come from config.json (one parse); the result is
 * checked against the float64 formulas of transformers' Qwen3Attention.
 * Usage: qwen3_store [config.json]   (default: Qwen3-8B's config, inline)
 * Build: cc qwen3_store.c $(pkg-config --cflags --libs posenc) -lm */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <posenc.h>

static const char qwen3_8b[] =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"bos_token_id\": 151643, \"eos_token_id\": 151645,"
    " \"head_dim\": 128, \"hidden_act\": \"silu\", \"hidden_size\": 4096,"
    " \"initializer_range\": 0.02, \"intermediate_size\": 12288,"
    " \"max_position_embeddings\": 40960, \"max_window_layers\": 36, \"model_type\": \"qwen3\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 36, \"num_key_value_heads\": 8,"
    " \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000,"
    " \"sliding_window\": null, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.51.0\", \"use_cache\": true, \"use_sliding_window\": false,"
    " \"vocab_size\": 151936}";

enum { SEQS = 4, BLOCKS = 16, BLOCK = 16 };
#define FAIL(msg) return fprintf(stderr, "qwen3_store: %s\n", msg), 1

/* Row (slot, head) of a cache tensor [BLOCKS, kv_heads, BLOCK, head_dim] with strides st. */
static float *cache_row(float *data, const int64_t *st, int64_t slot, int64_t head) {
  return data + slot / BLOCK * st[0] + head * st[1] + slot % BLOCK * st[2];
}

int main(int argc, char **argv) {
  static char buf[1 << 20];
  const char *json = qwen3_8b;
  size_t len = strlen(qwen3_8b);
  if (argc > 1) {
    FILE *f = fopen(argv[1], "rb");
    if (!f) return perror(argv[1]), 1;
    len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    json = buf;
  }
  /* One parse: layer 0's rope (a table of 4096 positions: the longest context
   * served here), its QK-norm (kind, scope, eps), the head counts. */
  pe_model_rope *model;
  if (pe_model_rope_from_hf_config(json, len, 4096, 0, 0, &model) != PE_OK) FAIL(pe_last_error());
  const pe_rope_cache *rope = pe_model_rope_layer(model, 0);
  pe_qk_norm norm;
  pe_qk_norm_init(&norm);
  pe_rope_params rp;
  pe_rope_params_init(&rp);
  int32_t H, KVH;
  if (!rope || pe_model_rope_layer_qk_norm(model, 0, PE_ROPE_ROLE_ATTENTION, &norm) != PE_OK ||
      pe_rope_cache_params(rope, &rp) != PE_OK || pe_model_rope_heads(model, &H, &KVH) != PE_OK)
    FAIL(pe_last_error());
  if (norm.kind != PE_QK_NORM_RMS || norm.scope != PE_QK_NORM_PER_HEAD ||
      rp.style != PE_ROPE_NEOX || rp.scaling != PE_ROPE_SCALING_NONE)
    FAIL("the reference below is Qwen3's: RMS q/k norm per head, NeoX pairs, unscaled rope");
  const int D = rp.head_dim, R = rp.rotary_dim, W = (H + 2 * KVH) * D;
  if (argc == 1 && (rp.base != 1e6 || norm.eps != 1e-6f || H != 32 || KVH != 8 || D != 128))
    FAIL("Qwen3-8B's theta 1e6, eps 1e-6, 32 / 8 heads of 128 were not read");
  if (D > 512) FAIL("head_dim above 512");

  /* The projection's output: one row of W = (32 + 2*8) * 128 = 6144 floats per
   * token, [q heads | k heads | v heads]. A decode step has one token per
   * sequence, so batch = SEQS and tokens = 1; the views share the row stride W:
   *   q [SEQS, 32, 1, 128] at qkv + 0,        strides {W, 128, W, 1}
   *   k [SEQS,  8, 1, 128] at qkv + 32*128,   strides {W, 128, W, 1}
   *   v [SEQS,  8, 1, 128] at qkv + 40*128,   strides {W, 128, W, 1}
   * q is normed and rotated in place; k and v are only read. */
  float *qkv = malloc(sizeof(float) * SEQS * W), *qkv0 = malloc(sizeof(float) * SEQS * W);
  float *w = malloc(sizeof(float) * 2 * D); /* q_norm.weight, k_norm.weight (made up) */
  for (int s = 0; s < SEQS; s++) /* rows at scales 1 .. 1e-3: the last has mean(x^2) ~ eps */
    for (int i = 0; i < W; i++)
      qkv0[s * W + i] = qkv[s * W + i] = powf(10.f, (float)-s) * sinf(0.37f * (float)i + (float)s);
  for (int i = 0; i < 2 * D; i++) w[i] = 1.0f + 0.25f * cosf(0.71f * (float)i);
  norm.q_weight = w;
  norm.k_weight = w + D;
  pe_tensor q = {qkv, PE_F32, {SEQS, H, 1, D}, {W, D, W, 1}};
  pe_tensor k = {qkv + H * D, PE_F32, {SEQS, KVH, 1, D}, {W, D, W, 1}};
  pe_tensor v = {qkv + (H + KVH) * D, PE_F32, {SEQS, KVH, 1, D}, {W, D, W, 1}};

  /* The caches: pe_kv_cache tensors are always [num_blocks, kv_heads, block_size,
   * head_dim]; the memory layout is in the strides.
   *   NHD (vLLM's FlashAttention backend, FlashInfer kv_layout "NHD"): memory
   *     [blocks, block_size, kv_heads, head_dim], strides {BLOCK*KVH*D, D, KVH*D, 1}
   *   HND (FlashInfer kv_layout "HND"): memory [blocks, kv_heads, block_size, head_dim],
   *     strides {KVH*BLOCK*D, BLOCK*D, D, 1} */
  const size_t cache_n = (size_t)BLOCKS * BLOCK * KVH * D;
  float *mem = calloc(4 * cache_n, sizeof(float)); /* k NHD, v NHD, k HND, v HND */
  const int64_t nhd[4] = {(int64_t)BLOCK * KVH * D, D, (int64_t)KVH * D, 1};
  const int64_t hnd[4] = {(int64_t)KVH * BLOCK * D, (int64_t)BLOCK * D, D, 1};
  const int64_t *strides[4] = {nhd, nhd, hnd, hnd};
  pe_tensor cache[4]; /* k NHD, v NHD, k HND, v HND */
  for (int c = 0; c < 4; c++) {
    const int64_t *st = strides[c];
    cache[c] = (pe_tensor){mem + c * cache_n, PE_F32, {BLOCKS, KVH, BLOCK, D},
                           {st[0], st[1], st[2], 1}};
  }
  /* Each sequence's next position and the slot the engine's block table gives
   * it: slot = block * BLOCK + position % BLOCK (vLLM's slot_mapping). */
  const int64_t pos[SEQS] = {7, 130, 1031, 4000}, block_of[SEQS] = {2, 5, 9, 14};
  int64_t slots[SEQS];
  for (int s = 0; s < SEQS; s++) slots[s] = block_of[s] * BLOCK + pos[s] % BLOCK;

  /* The step: q normed + rotated in place, k normed + rotated into the k cache,
   * v copied into the v cache, all at once. The HND call passes q = NULL:
   * q is done (a real engine makes one call, into its one cache). */
  for (int l = 0; l < 2; l++) {
    pe_kv_cache kv;
    pe_kv_cache_init(&kv);
    kv.k = &cache[2 * l];
    kv.v = &cache[2 * l + 1];
    const pe_tensor *ql = l ? NULL : &q;
    if (pe_qk_norm_rope_store(rope, &norm, ql, &k, &v, &kv, slots, pos, 0, NULL) != PE_OK)
      FAIL(pe_last_error());
  }

  /* The float64 reference: Qwen3RMSNorm over head_dim, x * rsqrt(mean(x^2) + eps) * w,
   * then rotate_half RoPE: pairs (j, j + R/2), angle pos * theta^(-2j/R).
   * The difference is in float32 ulps (u = 2^-24) of the pair's size v = |n_j| +
   * |n_j+R/2| (n the exact normed values). posenc.h bounds it by (M/2 + 3.5) u v
   * plus half an ulp of the result (<= u v), M = ceil(D/16) + 4 roundings in the
   * sum of squares: 10.5 ulps of v for head_dim 128 (about 3 measured). */
  const double tol = (D + 15) / 16 / 2.0 + 2.0 + 4.5;
  double worst = 0, nv[512], out[512];
  int differ = 0;
  for (int s = 0; s < SEQS; s++)
    for (int h = 0; h < H + KVH; h++) { /* q heads, then k heads */
      const float *x = qkv0 + s * W + h * D, *wt = h < H ? w : w + D;
      const float *got = h < H ? qkv + s * W + h * D : cache_row(mem, nhd, slots[s], h - H);
      double ss = 0;
      for (int i = 0; i < D; i++) ss += (double)x[i] * x[i];
      double r = 1.0 / sqrt(ss / D + norm.eps);
      for (int i = 0; i < D; i++) out[i] = nv[i] = x[i] * r * wt[i];
      for (int j = 0; j < R / 2; j++) {
        double a = pos[s] * pow(rp.base, -2.0 * j / R), c = cos(a), sn = sin(a);
        out[j] = nv[j] * c - nv[j + R / 2] * sn;
        out[j + R / 2] = nv[j + R / 2] * c + nv[j] * sn;
      }
      for (int i = 0; i < D; i++) { /* past R (a partial rotary): v = |n_i| */
        double vv = i < R ? fabs(nv[i % (R / 2)]) + fabs(nv[i % (R / 2) + R / 2]) : fabs(nv[i]);
        double d = fabs(got[i] - out[i]);
        worst = fmax(worst, vv > 0 ? d / (vv * 0x1p-24) : d > 0 ? INFINITY : 0);
      }
    }
  /* Both layouts hold the same k rows, v's rows are the projection's bits, and
   * nothing else was written: clear the rows checked, then all must be 0. */
  for (int s = 0; s < SEQS; s++)
    for (int h = 0; h < KVH; h++) {
      const float *v0 = qkv0 + s * W + (H + KVH + h) * D;
      float *row[4]; /* k NHD, v NHD, k HND, v HND */
      for (int c = 0; c < 4; c++) row[c] = cache_row(mem + c * cache_n, strides[c], slots[s], h);
      differ += memcmp(row[0], row[2], sizeof(float) * D) != 0;
      differ += memcmp(row[1], v0, sizeof(float) * D) != 0;
      differ += memcmp(row[3], v0, sizeof(float) * D) != 0;
      for (int c = 0; c < 4; c++) memset(row[c], 0, sizeof(float) * D);
    }
  for (size_t i = 0; i < 4 * cache_n; i++) differ += mem[i] != 0;
  printf("qwen3_store: %d sequences, %d q / %d kv heads of %d, NHD and HND caches: largest "
         "difference from float64 %.3g float32 ulps (bound %.1f), %d cache mismatches\n",
         SEQS, H, KVH, D, worst, tol, differ);
  free(qkv), free(qkv0), free(w), free(mem);
  pe_model_rope_destroy(model);
  return worst <= tol && differ == 0 ? 0 : 1;
}
