/* indexer_v32.c - one decode step of DeepSeek-V3.2's sparse-attention indexer,
 * 4 sequences: its query heads and its key rotated on their rope slice, and
 * the keys stored as FP8 with a power-of-two scale per row into a paged
 * indexer cache laid out as vLLM's indexer_k_quant_and_cache writes it. The
 * rotation and where it sits come from config.json (one parse); the result is
 * checked against float64 formulas and an e4m3 encoder written here.
 * Usage: indexer_v32 [config.json]   (default: DeepSeek-V3.2's keys, inline)
 * Build: cc indexer_v32.c $(pkg-config --cflags --libs posenc) -lm */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <posenc.h>

static const char deepseek_v32[] =
    "{\"model_type\": \"deepseek_v32\", \"num_hidden_layers\": 61, \"hidden_size\": 7168,"
    " \"num_attention_heads\": 128, \"num_key_value_heads\": 128, \"kv_lora_rank\": 512,"
    " \"q_lora_rank\": 1536, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64,"
    " \"v_head_dim\": 128, \"index_n_heads\": 64, \"index_head_dim\": 128, \"index_topk\": 2048,"
    " \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000, \"max_position_embeddings\": 163840,"
    " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40, \"beta_fast\": 32, \"beta_slow\": 1,"
    " \"mscale\": 1.0, \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 4096}}";

enum { SEQS = 4, IHEADS = 64 /* index_n_heads */, BLOCKS = 16, BLOCK = 64 };

/* The value of an OCP e4m3fn code's magnitude bits (0 .. 0x7e). */
static double e4m3_value(int c) {
  int e = c >> 3, m = c & 7;
  return e ? ldexp(8 + m, e - 10) : ldexp(m, -9);
}

/* x as e4m3fn: the nearest finite magnitude, ties to the even code (round to
 * nearest even), so anything past 448 saturates to 448 (0x7e); sign bit 0x80. */
static uint8_t e4m3_encode(double x) {
  double best = INFINITY;
  int code = 0;
  for (int c = 0; c <= 0x7e; c++) {
    double d = fabs(e4m3_value(c) - fabs(x));
    if (d < best || (d == best && !(c & 1))) best = d, code = c;
  }
  return (uint8_t)(code | (signbit(x) ? 0x80 : 0));
}

int main(int argc, char **argv) {
  static char buf[1 << 20];
  const char *json = deepseek_v32;
  size_t len = strlen(deepseek_v32);
  if (argc > 1) {
    FILE *f = fopen(argv[1], "rb");
    if (!f) return perror(argv[1]), 1;
    len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    json = buf;
  }
  /* One parse; the indexer's rotation is a role of each layer, beside the MLA
   * attention's (interleaved pairs on q[..., 128:192] and kv_a[..., 512:576]). */
  pe_model_rope *model;
  pe_status st = pe_model_rope_from_hf_config(json, len, 4096, 0, 0, &model);
  if (st != PE_OK) return fprintf(stderr, "%s\n", pe_last_error()), 1;
  const pe_rope_cache *rope = pe_model_rope_layer_role(model, 0, PE_ROPE_ROLE_INDEXER);
  pe_rope_slice sl;
  pe_rope_slice_init(&sl);
  pe_rope_params rp;
  pe_rope_params_init(&rp);
  if (!rope || pe_model_rope_layer_slice(model, 0, PE_ROPE_ROLE_INDEXER, &sl) != PE_OK ||
      pe_rope_cache_params(rope, &rp) != PE_OK)
    return fprintf(stderr, "no indexer rotation: %s\n", pe_last_error()), 1;
  /* 128-channel heads (index_head_dim), rotated on [0, 64): NeoX pairs (j, j + 32) */
  const int qd = sl.q_head_dim, kd = sl.k_head_dim, span = rp.head_dim, R = sl.rotary_dim;
  const int h = R / 2, row = kd + 4; /* a cache row: kd e4m3 codes + its float32 scale */
  if (R > 128) return fprintf(stderr, "rotary_dim %d past this example's arrays\n", R), 1;

  /* q [SEQS, IHEADS, 1, 128] and k [SEQS, 1, 1, 128]: the indexer's wq_b and
   * k_norm(wk) outputs (that LayerNorm is the engine's); the cache: bytes */
  float *q = malloc(sizeof(float) * SEQS * IHEADS * qd), *k = malloc(sizeof(float) * SEQS * kd);
  float *q0 = malloc(sizeof(float) * SEQS * IHEADS * qd), *k0 = malloc(sizeof(float) * SEQS * kd);
  uint8_t *cache = calloc((size_t)BLOCKS * BLOCK * row, 1), *want = calloc((size_t)BLOCKS * BLOCK * row, 1);
  for (int i = 0; i < SEQS * IHEADS * qd; i++) q0[i] = q[i] = sinf(0.37f * (float)i);
  for (int i = 0; i < SEQS * kd; i++) k0[i] = k[i] = 3.0f * cosf(0.11f * (float)i);
  for (int s = 0; s < SEQS; s++) /* e4m3 ties at any power-of-two scale: 21 * 2^n, -23 * 2^n */
    k0[s * kd + kd - 1] = k[s * kd + kd - 1] = 2.625f, k0[s * kd + kd - 2] = k[s * kd + kd - 2] = -2.875f;
  const int64_t pos[SEQS] = {7, 130, 1031, 4000}, slots[SEQS] = {7, 194, 583, 1000};

  /* The rope slices: data at the slice's offset, shape[3] the cache's
   * head_dim (64), the strides of the whole 128-channel heads. */
  pe_tensor q_pe = {q + sl.q_offset, PE_F32, {SEQS, IHEADS, 1, span}, {(int64_t)IHEADS * qd, qd, qd, 1}};
  pe_tensor k_pe = {k + sl.k_offset, PE_F32, {SEQS, 1, 1, span}, {kd, kd, kd, 1}};
  st = pe_apply_rope_qk(rope, &q_pe, &k_pe, pos, 0, NULL);
  if (st != PE_OK) return fprintf(stderr, "%s\n", pe_last_error()), 1;

  /* (DeepSeek's reference code applies a Hadamard transform to q and k here,
   * before quantizing; an engine that does so runs it between the calls.)
   * The indexer cache, a tensor of BYTES [BLOCKS, 1, BLOCK, 128]: block b at
   * b * BLOCK * 132 bytes holds BLOCK rows of 128 e4m3 codes (stride[2] =
   * 128), then the BLOCK rows' float32 scales at BLOCK * 128 + 4 * t. The
   * whole 128-channel key is quantized with one scale, so it is written
   * after the rotation of its slice, at the tokens' slots. */
  pe_tensor kt = {k, PE_F32, {SEQS, 1, 1, kd}, {kd, kd, kd, 1}};
  pe_tensor ct = {cache, PE_F32, {BLOCKS, 1, BLOCK, kd}, {(int64_t)BLOCK * row, 0, kd, 1}};
  pe_kv_cache kv;
  pe_kv_cache_init(&kv);
  kv.k = &ct;
  kv.k_quant = PE_KV_FP8_E4M3_ROWSCALE;
  st = pe_kv_write(&kv, &kt, NULL, slots);
  if (st != PE_OK) return fprintf(stderr, "%s\n", pe_last_error()), 1;

  /* float64 NeoX rotation of pairs (j, j + 32) of the slice, at the layer's
   * YaRN cos/sin (the cache's: tests/test_scaling.c checks them); every other
   * channel untouched; each stored row against the encoder above. */
  double worst = 0;
  int moved = 0, bad = 0;
  for (int s = 0; s < SEQS; s++) {
    float cs[64], sn[64]; /* rotary_dim / 2 each */
    pe_rope_cache_cos_sin(rope, pos[s], cs, sn);
    for (int hd = 0; hd <= IHEADS; hd++) { /* the IHEADS q heads, then k */
      const float *x0 = hd < IHEADS ? q0 + (s * IHEADS + hd) * qd : k0 + s * kd;
      const float *x = hd < IHEADS ? q + (s * IHEADS + hd) * qd : k + s * kd;
      const int off = hd < IHEADS ? sl.q_offset : sl.k_offset, dim = hd < IHEADS ? qd : kd;
      for (int j = 0; j < h; j++) {
        double a = x0[off + j], b = x0[off + j + h];
        worst = fmax(worst, fabs(x[off + j] - (a * cs[j] - b * sn[j])));
        worst = fmax(worst, fabs(x[off + j + h] - (b * cs[j] + a * sn[j])));
      }
      for (int i = 0; i < dim; i++) moved += (i < off || i >= off + R) && x[i] != x0[i];
    }
    const float *x = k + s * kd;
    float amax = 0;
    for (int i = 0; i < kd; i++) amax = fmaxf(amax, fabsf(x[i]));
    int e; /* the scale 2^e: the smallest e with 2^e >= max(amax, 1e-4) / 448 */
    if (frexp(fmaxf(amax, 1e-4f) / 448.0f, &e) == 0.5) e--;
    float scale = (float)ldexp(1.0, e);
    uint8_t *blk = want + (slots[s] / BLOCK) * BLOCK * row;
    for (int i = 0; i < kd; i++) blk[(slots[s] % BLOCK) * kd + i] = e4m3_encode(x[i] / scale);
    memcpy(blk + BLOCK * kd + 4 * (slots[s] % BLOCK), &scale, 4); /* little-endian hosts */
  }
  for (int i = 0; i < BLOCKS * BLOCK * row; i++) bad += cache[i] != want[i];
  printf("indexer_v32: %d sequences, %d indexer heads of %d, NeoX pairs on channels %d..%d: "
         "largest difference from float64 %.2e, %d other channels changed, %d of %d cache "
         "bytes differ from the e4m3 encoder\n", SEQS, IHEADS, qd, sl.q_offset,
         sl.q_offset + R - 1, worst, moved, bad, BLOCKS * BLOCK * row);
  free(q), free(q0), free(k), free(k0), free(cache), free(want);
  pe_model_rope_destroy(model);
  return worst < 1e-5 && moved == 0 && bad == 0 ? 0 : 1;
}
