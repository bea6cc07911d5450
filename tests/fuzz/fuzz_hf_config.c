/* fuzz_hf_config.c - pe_rope_cache_create_from_hf_config and
 * pe_model_rope_from_hf_config on arbitrary text.
 * The text is copied into an allocation of exactly len bytes with no NUL
 * after it, so a read past len is an ASan report. On failure *out must be
 * untouched and pe_last_error() set; on success the cache must be usable.
 * Use with fuzz_hf_config.dict (the keys transformers reads). */
#include "fuzz_common.h"

/* The per-layer loader on the same text (tables kept small: -1 would ask
 * for max_position_embeddings rows). Same rules: *out untouched and an
 * error set on failure; every layer's cache valid on success. */
static void fuzz_model(const char *json, size_t len, int64_t max_positions, int64_t seq_len) {
  pe_model_rope *const sentinel = (pe_model_rope *)(uintptr_t)0x5252;
  pe_model_rope *m = sentinel;
  fz_set_sentinel();
  pe_status st = pe_model_rope_from_hf_config(json, len, max_positions > 0 ? max_positions : 0,
                                              seq_len, 0, &m);
  if (st != PE_OK) {
    fz_check_error_message("pe_model_rope_from_hf_config", st);
    if (m != sentinel) fz_die("pe_model_rope_from_hf_config", "failed but changed *out");
    return;
  }
  if (!m || m == sentinel) fz_die("pe_model_rope_from_hf_config", "succeeded without a model");
  int32_t n = pe_model_rope_num_layers(m);
  if (n < 1) fz_die("pe_model_rope_num_layers", "a model without layers");
  for (int32_t i = 0; i < n; i++) {
    const pe_rope_cache *c = pe_model_rope_layer(m, i);
    pe_rope_params p;
    pe_rope_params_init(&p);
    if (c && (pe_rope_cache_params(c, &p) != PE_OK || p.rotary_dim < 2 || p.rotary_dim > p.head_dim ||
              (p.rotary_dim & 1)))
      fz_die("pe_model_rope_layer", "a layer's cache has invalid geometry");
  }
  if (pe_model_rope_layer(m, n) != NULL) fz_die("pe_model_rope_layer", "returned a layer past the end");
  pe_model_rope_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  (void)fz_choose(&f);
  /* Table rows stay small (head_dim may be up to 16384 per row); negative
   * and past-2^53 values must be refused before any allocation. */
  uint32_t m = fz_u8(&f);
  int64_t max_positions = m < 64 ? 0 : m < 250 ? (int64_t)(m & 63) : m == 250 ? -1 : m == 251 ? INT64_MIN : m == 252 ? INT64_MAX : ((int64_t)1 << 53) + 1;
  uint32_t s = fz_u8(&f);
  int64_t seq_len = s < 128 ? 0 : s < 250 ? (int64_t)s * 37 : s == 250 ? -1 : s == 251 ? INT64_MIN : INT64_MAX;
  size_t len = f.n;
  char *json = malloc(len ? len : 1);
  if (!json) return 0;
  memcpy(json, f.p, len);
  pe_rope_cache *const sentinel = (pe_rope_cache *)(uintptr_t)0x5151;
  pe_rope_cache *c = sentinel;
  fz_set_sentinel();
  pe_status st = pe_rope_cache_create_from_hf_config(json, len, max_positions, seq_len, 0, &c);
  int must_fail = max_positions < 0 || max_positions > ((int64_t)1 << 53) || seq_len < 0;
  if (st != PE_OK) {
    fz_check_error_message("pe_rope_cache_create_from_hf_config", st);
    if (c != sentinel) fz_die("pe_rope_cache_create_from_hf_config", "failed but changed *out");
  }
  fuzz_model(json, len, max_positions, seq_len);
  free(json); /* neither the cache nor the model may keep pointers into the text */
  if (st != PE_OK) return 0;
  if (must_fail) fz_die("pe_rope_cache_create_from_hf_config", "accepted arguments it must refuse");
  if (!c || c == sentinel) fz_die("pe_rope_cache_create_from_hf_config", "succeeded without a cache");
  pe_rope_params p;
  pe_rope_params_init(&p);
  if (pe_rope_cache_params(c, &p) != PE_OK) fz_die("pe_rope_cache_params", "failed on a cache");
  if (p.head_dim < 2 || p.rotary_dim < 2 || p.rotary_dim > p.head_dim || (p.rotary_dim & 1))
    fz_die("pe_rope_cache_create_from_hf_config", "made a cache with invalid geometry");
  float *cs = malloc((size_t)p.rotary_dim / 2 * sizeof(float));
  float *sn = malloc((size_t)p.rotary_dim / 2 * sizeof(float));
  if (cs && sn && pe_rope_cache_cos_sin(c, 0, cs, sn) != PE_OK)
    fz_die("pe_rope_cache_cos_sin", "position 0 refused on a fresh cache");
  if (cs && sn) {
    double af = pe_rope_cache_attention_factor(c);
    for (int32_t j = 0; j < p.rotary_dim / 2; j++)
      if (!(fabsf(cs[j]) <= (float)af * 1.0001f) || !(fabsf(sn[j]) <= (float)af * 1.0001f))
        fz_die("pe_rope_cache_cos_sin", "cos/sin larger than the attention factor");
  }
  free(cs);
  free(sn);
  pe_rope_cache_destroy(c);
  return 0;
}
