/* mla_decode.c - one decode step of an MLA layer (DeepSeek-V3), 4 sequences,
 * into a paged [kv_c | k_pe] cache: the README's "MLA" recipe. The layer's
 * rotation, where it sits and the latent norm's eps come from config.json
 * (one parse); the result is checked against the float64 formulas of
 * transformers' DeepseekV3Attention.
 * Usage: mla_decode [config.json]   (default: DeepSeek-V3's keys, inline)
 * Build: cc mla_decode.c $(pkg-config --cflags --libs posenc) -lm */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <posenc.h>

static const char deepseek_v3[] =
    "{\"model_type\": \"deepseek_v3\", \"num_hidden_layers\": 61, \"hidden_size\": 7168,"
    " \"num_attention_heads\": 128, \"num_key_value_heads\": 128, \"kv_lora_rank\": 512,"
    " \"q_lora_rank\": 1536, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64,"
    " \"v_head_dim\": 128, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000,"
    " \"max_position_embeddings\": 163840, \"rope_scaling\": {\"type\": \"yarn\","
    " \"factor\": 40, \"beta_fast\": 32, \"beta_slow\": 1, \"mscale\": 1.0,"
    " \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096}}";

enum { SEQS = 4, HEADS = 128, BLOCKS = 16, BLOCK = 64 };

int main(int argc, char **argv) {
  static char buf[1 << 20];
  const char *json = deepseek_v3;
  size_t len = strlen(deepseek_v3);
  if (argc > 1) {
    FILE *f = fopen(argv[1], "rb");
    if (!f) return perror(argv[1]), 1;
    len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    json = buf;
  }
  /* One parse: the layer's rope cache, where its channels sit, the latent eps. */
  pe_model_rope *model;
  pe_status st = pe_model_rope_from_hf_config(json, len, 4096, 0, 0, &model);
  if (st != PE_OK) return fprintf(stderr, "%s\n", pe_last_error()), 1;
  const pe_rope_cache *rope = pe_model_rope_layer(model, 0);
  pe_rope_slice sl;
  pe_rope_slice_init(&sl);
  double eps;
  if (!rope || pe_model_rope_layer_slice(model, 0, PE_ROPE_ROLE_ATTENTION, &sl) != PE_OK ||
      pe_model_rope_latent_norm_eps(model, &eps) != PE_OK)
    return fprintf(stderr, "%s\n", pe_last_error()), 1;
  const int qd = sl.q_head_dim, kvd = sl.k_head_dim, lat = sl.k_offset, R = sl.rotary_dim;

  /* q [SEQS, HEADS, 1, 192], kv_a [SEQS, 1, 1, 576], the cache [BLOCKS, 1, BLOCK, 576] */
  float *q = malloc(sizeof(float) * SEQS * HEADS * qd), *kv = malloc(sizeof(float) * SEQS * kvd);
  float *cache = calloc((size_t)BLOCKS * BLOCK * kvd, sizeof(float)), *w = malloc(sizeof(float) * lat);
  float *q0 = malloc(sizeof(float) * SEQS * HEADS * qd);
  for (int i = 0; i < SEQS * HEADS * qd; i++) q0[i] = q[i] = sinf(0.37f * (float)i);
  for (int i = 0; i < SEQS * kvd; i++) kv[i] = cosf(0.11f * (float)i);
  for (int i = 0; i < lat; i++) w[i] = 1.0f + 0.001f * (float)(i % 17); /* kv_a_layernorm.weight */
  pe_tensor qt = {q, PE_F32, {SEQS, HEADS, 1, qd}, {(int64_t)HEADS * qd, qd, qd, 1}};
  pe_tensor kvt = {kv, PE_F32, {SEQS, 1, 1, kvd}, {kvd, kvd, kvd, 1}};
  pe_tensor ct = {cache, PE_F32, {BLOCKS, 1, BLOCK, kvd}, {(int64_t)BLOCK * kvd, 0, kvd, 1}};
  const int64_t pos[SEQS] = {7, 130, 1031, 4000}, slots[SEQS] = {7, 194, 583, 1000};

  pe_mla mla;
  pe_mla_init(&mla);
  mla.rope_dim = R;                /* 64: k_pe and each q head's rope slice */
  mla.kv_norm_dim = lat;           /* kv_a_layernorm over the 512-channel latent */
  mla.kv_rope_offset = sl.k_offset; /* k_pe = kv_a[..., 512:576] */
  mla.q_rope_offset = sl.q_offset;  /* q_pe = q[..., 128:192] */
  mla.kv_eps = (float)eps;
  mla.kv_weight = w;
  st = pe_mla_rope_store(rope, &mla, &qt, &kvt, &ct, slots, pos, 0, NULL);
  if (st != PE_OK) return fprintf(stderr, "%s\n", pe_last_error()), 1;

  /* The float64 reference: RMSNorm, then the rotation of pairs (2i, 2i+1). */
  double worst = 0;
  for (int s = 0; s < SEQS; s++) {
    const float *x = kv + s * kvd, *row = cache + slots[s] * kvd;
    double ss = 0;
    for (int i = 0; i < lat; i++) ss += (double)x[i] * x[i];
    double r = 1.0 / sqrt(ss / lat + eps);
    for (int i = 0; i < lat; i++) worst = fmax(worst, fabs(row[i] - x[i] * r * w[i]));
    float cs[64], sn[64]; /* this position's YaRN cos/sin (the cache's: tests/test_scaling.c checks them) */
    pe_rope_cache_cos_sin(rope, pos[s], cs, sn);
    for (int j = 0; j < R / 2; j++) {
      double a = x[lat + 2 * j], b = x[lat + 2 * j + 1];
      worst = fmax(worst, fabs(row[lat + 2 * j] - (a * cs[j] - b * sn[j])));
      worst = fmax(worst, fabs(row[lat + 2 * j + 1] - (a * sn[j] + b * cs[j])));
      for (int h = 0; h < HEADS; h++) {
        const float *qh = q + (s * HEADS + h) * qd, *qi = q0 + (s * HEADS + h) * qd;
        double c = qi[sl.q_offset + 2 * j], d = qi[sl.q_offset + 2 * j + 1];
        worst = fmax(worst, fabs(qh[sl.q_offset + 2 * j] - (c * cs[j] - d * sn[j])));
        worst = fmax(worst, fabs(qh[sl.q_offset + 2 * j + 1] - (c * sn[j] + d * cs[j])));
      }
    }
  }
  printf("mla_decode: %d sequences, %d q heads of %d, rows of %d (latent %d + rope %d): "
         "largest difference from float64 %.2e\n", SEQS, HEADS, qd, kvd, lat, R, worst);
  free(q), free(q0), free(kv), free(cache), free(w);
  pe_model_rope_destroy(model);
  return worst < 1e-5 ? 0 : 1;
}
