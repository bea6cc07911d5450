/* deepseek_v4.c - DeepSeek-V4 from one parse of config.json: its sliding layers
 * (rope_theta) and compressed ones (YaRN at compress_rope_theta); one decode step
 * of a compressed layer, 4 sequences: q heads normed and rotated on their last
 * 64 channels, the kv row normed and rotated into paged caches (float32, and
 * V4's FP8 + bf16 rows), the attention output's rope channels rotated back
 * before o_proj. Checked against float64 formulas, YaRN frequencies included.
 * Usage: deepseek_v4 [config.json]   (default: DeepSeek-V4-Flash's keys, inline)
 * Build: cc deepseek_v4.c $(pkg-config --cflags --libs posenc) -lm */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <posenc.h>

static const char deepseek_v4[] =
    "{\"model_type\": \"deepseek_v4\", \"num_hidden_layers\": 43, \"hidden_size\": 4096,"
    " \"num_attention_heads\": 64, \"num_key_value_heads\": 1, \"head_dim\": 512,"
    " \"qk_rope_head_dim\": 64, \"q_lora_rank\": 1024, \"o_lora_rank\": 1024, \"o_groups\": 8,"
    " \"index_n_heads\": 64, \"index_head_dim\": 128, \"index_topk\": 512, \"sliding_window\": 128,"
    " \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000, \"compress_rope_theta\": 160000,"
    " \"max_position_embeddings\": 1048576, \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 16,"
    " \"beta_fast\": 32, \"beta_slow\": 1, \"original_max_position_embeddings\": 65536},"
    " \"compress_ratios\": [0, 0, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128,"
    " 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4,"
    " 128, 4, 0]}";

enum { SEQS = 4, HEADS = 64, BLOCKS = 16, BLOCK = 64 };

/* Frequency i of a rope in float64: base^(-2i/d), under YaRN blended towards
 * base^(-2i/d) / factor across the correction range, as DeepSeek's
 * precompute_freqs_cis does (cos and sin unscaled: attention factor 1). */
static double inv_freq(const pe_rope_params *p, int i) {
  const double d = p->rotary_dim, f = pow(p->base, -2.0 * i / d), two_pi = 2.0 * acos(-1.0);
  if (p->scaling != PE_ROPE_SCALING_YARN) return f;
  double lo = floor(d * log(p->original_max_positions / (p->beta_fast * two_pi)) / (2 * log(p->base)));
  double hi = ceil(d * log(p->original_max_positions / (p->beta_slow * two_pi)) / (2 * log(p->base)));
  lo = fmax(lo, 0), hi = fmin(hi, d - 1);
  double r = fmin(fmax((i - lo) / (hi == lo ? 0.001 : hi - lo), 0), 1);
  return f / p->factor * r + f * (1 - r);
}

/* The largest |y - ref| over a row, ref in float64: x normed over its n
 * channels (RMS, times w when given), its GPT-J pairs (off + 2j, off + 2j +
 * 1), j < R/2, rotated by the angles of cs/sn, and the whole times k. */
static double check(const float *y, const float *x, int n, const float *w, double eps, int off,
                    int R, const double *cs, const double *sn, double k) {
  double ss = 0, ref[512], m = 0;
  for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
  for (int i = 0; i < n; i++) ref[i] = x[i] / sqrt(ss / n + eps) * (w ? w[i] : 1.0) * k;
  for (int j = 0; j < R / 2; j++) {
    double a = ref[off + 2 * j], b = ref[off + 2 * j + 1];
    ref[off + 2 * j] = a * cs[j] - b * sn[j], ref[off + 2 * j + 1] = a * sn[j] + b * cs[j];
  }
  for (int i = 0; i < n; i++) m = fmax(m, fabs(y[i] - ref[i]));
  return m;
}

/* x rounded to bfloat16 (to nearest even): the value, and its 16 bits in *b. */
static float bf16(float x, uint16_t *b) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u, *b = (uint16_t)(u >> 16);
  memcpy(&x, &u, 4);
  return x;
}

int main(int argc, char **argv) {
  static char buf[1 << 20];
  const char *json = deepseek_v4;
  size_t len = strlen(deepseek_v4);
  if (argc > 1) {
    FILE *f = fopen(argv[1], "rb");
    if (!f) return perror(argv[1]), 1;
    len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    json = buf;
  }
  pe_model_rope *model;
  pe_status st = pe_model_rope_from_hf_config(json, len, 4096, 0, 0, &model);
  if (st != PE_OK) return fprintf(stderr, "%s\n", pe_last_error()), 1;
  /* A compressed layer has a compressor rotation (a CSA layer, ratio 4, an
   * indexer too); a sliding-window layer (ratio 0) has neither. */
  int swa = -1, cmp = -1;
  for (int l = 0; l < pe_model_rope_num_layers(model); l++)
    if (pe_model_rope_layer_role(model, l, PE_ROPE_ROLE_COMPRESSOR) ? cmp < 0 : swa < 0)
      *(pe_model_rope_layer_role(model, l, PE_ROPE_ROLE_COMPRESSOR) ? &cmp : &swa) = l;
  if (swa < 0 || cmp < 0) return fprintf(stderr, "no sliding or no compressed layer\n"), 1;
  const pe_rope_cache *rope = pe_model_rope_layer(model, cmp);
  pe_rope_params ps, pc;
  pe_rope_params_init(&ps), pe_rope_params_init(&pc);
  pe_rope_cache_params(pe_model_rope_layer(model, swa), &ps), pe_rope_cache_params(rope, &pc);
  const double af = pe_rope_cache_attention_factor(rope); /* 1: DeepSeek's cos/sin are unscaled */
  printf("deepseek_v4: layer %d sliding only: rope theta %g, %s; layer %d compressed: theta %g, "
         "%s factor %g, attention factor %g\n", swa, ps.base, ps.scaling ? "scaled" : "unscaled",
         cmp, pc.base, pc.scaling == PE_ROPE_SCALING_YARN ? "YaRN" : "not YaRN", pc.factor, af);

  /* Where the compressed layer rotates - q heads of 512, kv rows of 512 (k =
   * v), both on channels [448, 512) - and its norms' eps (rms_norm_eps). */
  pe_rope_slice sl;
  pe_qk_norm qn;
  pe_rope_slice_init(&sl), pe_qk_norm_init(&qn);
  if (pe_model_rope_layer_slice(model, cmp, PE_ROPE_ROLE_ATTENTION, &sl) != PE_OK ||
      pe_model_rope_layer_qk_norm(model, cmp, PE_ROPE_ROLE_ATTENTION, &qn) != PE_OK)
    return fprintf(stderr, "%s\n", pe_last_error()), 1;
  const int qd = sl.q_head_dim, kvd = sl.k_head_dim, R = sl.rotary_dim, lat = sl.k_offset;
  if (qd > 512 || kvd > 512 || R > 64) return fprintf(stderr, "rows past this example's arrays\n"), 1;

  /* q [SEQS, HEADS, 1, 512], kv [SEQS, 1, 1, 512], cache [BLOCKS, 1, BLOCK, 512] */
  float *q = malloc(sizeof(float) * SEQS * HEADS * qd), *q0 = malloc(sizeof(float) * SEQS * HEADS * qd);
  float *kv = malloc(sizeof(float) * SEQS * kvd), *w = malloc(sizeof(float) * kvd);
  float *cache = calloc((size_t)BLOCKS * BLOCK * kvd, sizeof(float));
  float *o = malloc(sizeof(float) * SEQS * HEADS * qd); /* the attention output */
  for (int i = 0; i < SEQS * HEADS * qd; i++) q0[i] = q[i] = sinf(0.37f * (float)i);
  for (int i = 0; i < SEQS * kvd; i++) kv[i] = cosf(0.11f * (float)i);
  for (int i = 0; i < kvd; i++) w[i] = 1.0f + 0.001f * (float)(i % 17); /* kv_norm.weight */
  pe_tensor qt = {q, PE_F32, {SEQS, HEADS, 1, qd}, {(int64_t)HEADS * qd, qd, qd, 1}};
  pe_tensor kvt = {kv, PE_F32, {SEQS, 1, 1, kvd}, {kvd, kvd, kvd, 1}};
  pe_tensor ct = {cache, PE_F32, {BLOCKS, 1, BLOCK, kvd}, {(int64_t)BLOCK * kvd, 0, kvd, 1}};
  const int64_t pos[SEQS] = {7, 130, 1031, 4000}, slots[SEQS] = {7, 194, 583, 1000};

  pe_mla mla;
  pe_mla_init(&mla);
  mla.rope_dim = R;                 /* 64 */
  mla.kv_norm_dim = kvd;            /* kv_norm over the whole 512-channel row, with weight, */
  mla.kv_rope_offset = sl.k_offset; /* then kv[..., 448:512] rotated */
  mla.q_rope_offset = sl.q_offset;  /* q[..., 448:512] */
  mla.kv_eps = mla.q_eps = qn.eps;
  mla.kv_weight = w;
  mla.q_norm = PE_QK_NORM_L2;       /* q * rsqrt(mean(q^2) + eps) per head, no weight */
  st = pe_mla_rope_store(rope, &mla, &qt, &kvt, &ct, slots, pos, 0, NULL);
  /* The same kv rows into DeepSeek-V4's FP8 cache, a tensor of BYTES: block b
   * at b * bstride holds BLOCK rows of 576 bytes (448 e4m3 codes, then the 64
   * rotated channels as bf16), then 8 bytes per row: 7 UE8M0 exponents (e +
   * 127, one per 64-channel tile) and a zero; bstride padded to 576 bytes. */
  const int rowb = lat + 2 * R, tiles = lat / 64;
  const int64_t bstride = ((int64_t)BLOCK * (rowb + tiles + 1) + 575) / 576 * 576;
  uint8_t *c8 = calloc((size_t)BLOCKS * bstride, 1);
  pe_tensor c8t = {c8, PE_F32, {BLOCKS, 1, BLOCK, kvd}, {bstride, 0, rowb, 1}};
  pe_mla m8 = mla;
  m8.format = PE_MLA_FP8_DS_V4;
  if (st == PE_OK) st = pe_mla_rope_store(rope, &m8, NULL, &kvt, &c8t, slots, pos, 0, NULL);
  if (st != PE_OK) return fprintf(stderr, "%s\n", pe_last_error()), 1;

  /* The attention output o [SEQS, HEADS, 1, 512]: here head h attends to its
   * sequence's new token alone, o = that cache row / (h + 1). Its rope
   * channels carry the key's rotation (v = k); o_proj wants them rotated back
   * at the query's position: PE_ROPE_INVERSE on the view of q's slice. */
  for (int i = 0; i < SEQS * HEADS * qd; i++)
    o[i] = cache[slots[i / (HEADS * qd)] * kvd + i % qd] / (float)(i / qd % HEADS + 1);
  pe_tensor o_pe = {o + sl.q_offset, PE_F32, {SEQS, HEADS, 1, R}, {(int64_t)HEADS * qd, qd, qd, 1}};
  if (pe_apply_rope_qk(rope, &o_pe, NULL, pos, PE_ROPE_INVERSE, NULL) != PE_OK)
    return fprintf(stderr, "%s\n", pe_last_error()), 1;

  /* float64: the rows at cos/sin of pos * inv_freq; o rotated back = the
   * normed row unrotated; each FP8 row decoded from its bytes, within e4m3's
   * rounding (1/16 of the value, 2^(e-10) below e4m3's normals, after bf16's
   * 1/512), its exponents the least that fit and its bf16 channels exact. */
  double worst = 0, back = 0, cs[32], sn[32];
  int fp8_bad = 0;
  for (int s = 0; s < SEQS; s++) {
    for (int j = 0; j < R / 2; j++)
      cs[j] = cos(pos[s] * inv_freq(&pc, j)), sn[j] = sin(pos[s] * inv_freq(&pc, j));
    const float *row = cache + slots[s] * kvd;
    worst = fmax(worst, check(row, kv + s * kvd, kvd, w, qn.eps, lat, R, cs, sn, 1));
    for (int h = 0; h < HEADS; h++) {
      const int at = (s * HEADS + h) * qd;
      worst = fmax(worst, check(q + at, q0 + at, qd, NULL, qn.eps, sl.q_offset, R, cs, sn, 1));
      back = fmax(back, check(o + at, kv + s * kvd, kvd, w, qn.eps, lat, 0, cs, sn, 1.0 / (h + 1)));
    }
    const uint8_t *blk = c8 + slots[s] / BLOCK * bstride, *codes = blk + slots[s] % BLOCK * rowb;
    const uint8_t *ex = blk + BLOCK * rowb + slots[s] % BLOCK * (tiles + 1);
    uint16_t b;
    for (int i = 0; i < R; i++) bf16(row[lat + i], &b), fp8_bad += memcmp(codes + lat + 2 * i, &b, 2) != 0;
    fp8_bad += ex[tiles] != 0;
    for (int i = 0; i < lat; i++) {
      const int e = ex[i / 64] - 127, c = codes[i] & 0x7f, m = c & 7; /* e4m3fn: 4 exponent bits, bias 7 */
      double v = ldexp(c >> 3 ? 8 + m : m, (c >> 3 ? (c >> 3) - 10 : -9) + e) * (codes[i] & 0x80 ? -1 : 1);
      fp8_bad += fabs(v - row[i]) > fabs(row[i]) / 15 + ldexp(1, e - 10);
      float amax = 1e-4f;
      for (int t = i; i % 64 == 0 && t < i + 64; t++) amax = fmaxf(amax, bf16(fabsf(row[t]), &b));
      fp8_bad += i % 64 == 0 && !(ldexp(1, e) >= amax / 448.0f && ldexp(1, e - 1) < amax / 448.0f);
    }
  }
  printf("deepseek_v4: layer %d, %d sequences, %d q heads of %d, rope on %d..%d: largest difference "
         "from float64 %.2e, output rotated back %.2e, %d FP8 values off\n", cmp, SEQS, HEADS, qd,
         sl.q_offset, sl.q_offset + R - 1, worst, back, fp8_bad);
  free(q), free(q0), free(kv), free(w), free(cache), free(c8), free(o);
  pe_model_rope_destroy(model);
  return ps.scaling == PE_ROPE_SCALING_NONE && pc.scaling == PE_ROPE_SCALING_YARN &&
         af == 1.0 && worst < 1e-5 && back < 1e-5 && !fp8_bad ? 0 : 1;
}
