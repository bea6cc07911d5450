/* rope_decode.c - a decode loop over a RoPE'd KV cache, with a context shift.
 *
 * One sequence, GQA (8 query heads sharing 2 KV heads), head_dim 64. Each
 * step makes a new query and key (random here; a model's projections in
 * practice), rotates both at the token's position, appends the key to the
 * cache and computes attention scores of the query against every cached
 * key.
 *
 * The cache holds WINDOW tokens. When it is full, StreamingLLM-style, the
 * first N_SINK tokens ("attention sinks") stay, the next EVICT tokens are
 * dropped, and the rest move down by EVICT slots. Their keys were rotated at
 * their old positions, so pe_rope_shift_k rotates them by delta = -EVICT
 * (sinks: delta 0) in place, without the raw keys - which a KV cache does not
 * keep. New tokens then continue at position = cache length.
 *
 * Check: after every shift, the attention scores of the current query
 * against the shifted cache equal those against a cache whose keys are
 * rotated directly at their new positions, within TOLERANCE (float32: each
 * shift adds about one rounding of |k| ~ 1e-7 relative; scores are O(1)).
 *
 * Build: cc rope_decode.c $(pkg-config --cflags --libs posenc) -lm
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <posenc.h>

enum {
  HEAD_DIM = 64,
  N_Q_HEADS = 8,
  N_KV_HEADS = 2,
  WINDOW = 48,   /* cache capacity in tokens */
  N_SINK = 4,    /* first tokens kept forever */
  EVICT = 16,    /* tokens dropped per shift */
  STEPS = 200    /* tokens generated */
};
#define TOLERANCE 1e-5

#define CHECK(call)                                                                   \
  do {                                                                                \
    pe_status st_ = (call);                                                           \
    if (st_ != PE_OK) {                                                               \
      fprintf(stderr, "%s failed: %s\n  %s\n", #call, pe_status_string(st_), pe_last_error()); \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

/* Deterministic N(0,1)-ish numbers, so every run checks the same thing. */
static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static float rand_normal(void) {
  float s = 0.0f;
  for (int i = 0; i < 4; i++) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    s += (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) - 0.5f;
  }
  return s * 1.7320508f; /* variance of a sum of 4 uniforms is 1/3 */
}

/* The cache is token-major, [token][kv_head][dim] - appending or moving a
 * token is one contiguous copy - and is described to libposenc as
 * [batch 1, heads, tokens, dim] by its strides. */
static pe_tensor kv_view(float *data, int64_t tokens) {
  pe_tensor t = {.data = data, .dtype = PE_F32,
                 .shape = {1, N_KV_HEADS, tokens, HEAD_DIM},
                 .stride = {(int64_t)WINDOW * N_KV_HEADS * HEAD_DIM, HEAD_DIM,
                            N_KV_HEADS * HEAD_DIM, 1}};
  return t;
}

/* scores[h][j] = q_h . k_{j, h / group} / sqrt(head_dim) */
static void attention_scores(const float *q, const float *cache, int64_t len, float *scores) {
  const int group = N_Q_HEADS / N_KV_HEADS;
  for (int h = 0; h < N_Q_HEADS; h++)
    for (int64_t j = 0; j < len; j++) {
      const float *k = cache + (j * N_KV_HEADS + h / group) * HEAD_DIM;
      double dot = 0.0;
      for (int d = 0; d < HEAD_DIM; d++) dot += (double)q[h * HEAD_DIM + d] * k[d];
      scores[h * WINDOW + j] = (float)(dot / sqrt((double)HEAD_DIM));
    }
}

int main(void) {
  printf("libposenc %s (%s kernels)\n", pe_version_string(), pe_isa_name());

  pe_rope_params params;
  pe_rope_params_init(&params);
  params.head_dim = HEAD_DIM;
  params.base = 10000.0;
  params.max_positions = WINDOW; /* positions never leave the window */
  pe_rope_cache *rope = NULL;
  CHECK(pe_rope_cache_create(&params, &rope));

  static float cache[WINDOW * N_KV_HEADS * HEAD_DIM]; /* rotated keys */
  /* Only for the check: the raw keys of the cached tokens, moved with them,
   * and a cache rebuilt from them at the current positions. */
  static float raw[WINDOW * N_KV_HEADS * HEAD_DIM];
  static float direct[WINDOW * N_KV_HEADS * HEAD_DIM];
  static float scores[N_Q_HEADS * WINDOW], scores_direct[N_Q_HEADS * WINDOW];
  const size_t row = (size_t)N_KV_HEADS * HEAD_DIM; /* floats per cached token */

  int64_t len = 0;  /* tokens in the cache = position of the next token */
  int shifts = 0;
  double worst = 0.0;
  for (int step = 0; step < STEPS; step++) {
    if (len == WINDOW) {
      /* Evict tokens [N_SINK, N_SINK + EVICT) and slide the rest down. */
      memmove(cache + N_SINK * row, cache + (N_SINK + EVICT) * row,
              (size_t)(WINDOW - N_SINK - EVICT) * row * sizeof(float));
      memmove(raw + N_SINK * row, raw + (N_SINK + EVICT) * row,
              (size_t)(WINDOW - N_SINK - EVICT) * row * sizeof(float));
      len = WINDOW - EVICT;
      int64_t deltas[WINDOW];
      for (int64_t j = 0; j < len; j++) deltas[j] = j < N_SINK ? 0 : -EVICT;
      pe_tensor kc = kv_view(cache, len);
      CHECK(pe_rope_shift_k(rope, &kc, deltas, NULL));
      shifts++;
    }

    /* This step's projections, [1, heads, 1 token, HEAD_DIM]. */
    float q[N_Q_HEADS * HEAD_DIM];
    float *k_new = cache + len * row; /* rotated in place inside the cache */
    for (int i = 0; i < N_Q_HEADS * HEAD_DIM; i++) q[i] = rand_normal();
    for (size_t i = 0; i < row; i++) raw[len * row + i] = k_new[i] = rand_normal();

    pe_tensor qt = {.data = q, .dtype = PE_F32, .shape = {1, N_Q_HEADS, 1, HEAD_DIM},
                    .stride = {N_Q_HEADS * HEAD_DIM, HEAD_DIM, HEAD_DIM, 1}};
    pe_tensor kt = kv_view(k_new, 1);
    const int64_t pos = len;
    CHECK(pe_apply_rope_qk(rope, &qt, &kt, &pos, 0, NULL));
    len++;

    attention_scores(q, cache, len, scores);
    if (shifts > 0) {
      /* Reference: the raw keys rotated directly at positions 0..len-1. */
      memcpy(direct, raw, (size_t)len * row * sizeof(float));
      pe_tensor dt = kv_view(direct, len);
      CHECK(pe_apply_rope_qk(rope, NULL, &dt, NULL, 0, NULL));
      attention_scores(q, direct, len, scores_direct);
      for (int h = 0; h < N_Q_HEADS; h++)
        for (int64_t j = 0; j < len; j++) {
          double e = fabs((double)scores[h * WINDOW + j] - scores_direct[h * WINDOW + j]);
          if (e > worst) worst = e;
        }
    }
  }
  pe_rope_cache_destroy(rope);

  printf("%d tokens decoded through a %d-token window: %d context shifts "
         "(%d sink tokens kept, %d evicted each time)\n",
         STEPS, WINDOW, shifts, N_SINK, EVICT);
  printf("max |score(shifted cache) - score(cache rotated at new positions)| = %.3g "
         "(tolerance %.0e)\n", worst, TOLERANCE);
  if (shifts == 0 || !(worst <= TOLERANCE)) {
    fprintf(stderr, "rope_decode: FAILED\n");
    return 1;
  }
  printf("rope_decode: OK\n");
  return 0;
}
