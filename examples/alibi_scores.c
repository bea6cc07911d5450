/* alibi_scores.c - ALiBi attention biases, for prefill and for decode.
 *
 * BLOOM-style model with 12 heads (not a power of two: the slopes interleave
 * two geometric sequences). Prefill: 6 query tokens attend to 6 keys with a
 * fused causal mask. Decode: 1 query (the last position) attends to 10 cached
 * keys. Every biased score is checked against
 *   scores[b,h,i,j] = raw - slope[h] * |qpos(i) - j|   (-inf for j > qpos(i))
 * computed here, and one head is printed.
 *
 * Build: cc alibi_scores.c $(pkg-config --cflags --libs posenc) -lm
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <posenc.h>

enum { N_HEADS = 12, MAX_LEN = 10 };

#define CHECK(call)                                                                   \
  do {                                                                                \
    pe_status st_ = (call);                                                           \
    if (st_ != PE_OK) {                                                               \
      fprintf(stderr, "%s failed: %s\n  %s\n", #call, pe_status_string(st_), pe_last_error()); \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

/* Scores [1, N_HEADS, q_len, k_len], dense. The raw q.k scores are made up
 * (0.01 * (i + j)) so that the bias is visible in the output. */
static pe_tensor scores_tensor(float *data, int64_t q_len, int64_t k_len) {
  for (int64_t h = 0; h < N_HEADS; h++)
    for (int64_t i = 0; i < q_len; i++)
      for (int64_t j = 0; j < k_len; j++) data[(h * q_len + i) * k_len + j] = 0.01f * (float)(i + j);
  pe_tensor t = {.data = data, .dtype = PE_F32, .shape = {1, N_HEADS, q_len, k_len},
                 .stride = {N_HEADS * q_len * k_len, q_len * k_len, k_len, 1}};
  return t;
}

/* Largest deviation from the formula; mask errors count as infinite. */
static double check(const float *s, const float *slopes, int64_t q_len, int64_t k_len, int causal) {
  double worst = 0.0;
  for (int64_t h = 0; h < N_HEADS; h++)
    for (int64_t i = 0; i < q_len; i++) {
      int64_t qpos = k_len - q_len + i; /* NULL q_positions: queries are the last tokens */
      for (int64_t j = 0; j < k_len; j++) {
        float got = s[(h * q_len + i) * k_len + j];
        if (causal && j > qpos) {
          if (!(isinf(got) && got < 0)) return INFINITY;
          continue;
        }
        double want = 0.01 * (double)(i + j) - (double)slopes[h] * (double)llabs(qpos - j);
        double e = fabs(got - want);
        if (e > worst) worst = e;
      }
    }
  return worst;
}

static void print_head(const float *s, int64_t h, int64_t q_len, int64_t k_len) {
  for (int64_t i = 0; i < q_len; i++) {
    printf("    ");
    for (int64_t j = 0; j < k_len; j++) printf(" %7.3f", s[(h * q_len + i) * k_len + j]);
    printf("\n");
  }
}

int main(void) {
  float slopes[N_HEADS];
  CHECK(pe_alibi_slopes(N_HEADS, 8.0, slopes));
  printf("ALiBi slopes for %d heads:", N_HEADS);
  for (int h = 0; h < N_HEADS; h++) printf(" %.5g", slopes[h]);
  printf("\n");

  static float buf[N_HEADS * MAX_LEN * MAX_LEN];
  int failed = 0;

  /* Prefill: 6 x 6 with the causal mask fused in. slopes NULL = the
   * standard slopes for the tensor's head count, the same as above. */
  pe_tensor prefill = scores_tensor(buf, 6, 6);
  CHECK(pe_alibi_add_bias(&prefill, NULL, NULL, PE_MASK_CAUSAL, NULL));
  double e1 = check(buf, slopes, 6, 6, 1);
  printf("prefill (causal), head 0:\n");
  print_head(buf, 0, 6, 6);
  printf("  max |error| = %.3g\n", e1);
  failed |= !(e1 <= 1e-6);

  /* Decode: the newest token (position 9) against 10 cached keys. */
  pe_tensor decode = scores_tensor(buf, 1, 10);
  CHECK(pe_alibi_add_bias(&decode, slopes, NULL, 0, NULL));
  double e2 = check(buf, slopes, 1, 10, 0);
  printf("decode, head %d (slope %.5g):\n", N_HEADS - 1, slopes[N_HEADS - 1]);
  print_head(buf, N_HEADS - 1, 1, 10);
  printf("  max |error| = %.3g\n", e2);
  failed |= !(e2 <= 1e-6);

  printf("alibi_scores: %s\n", failed ? "FAILED" : "OK");
  return failed;
}
