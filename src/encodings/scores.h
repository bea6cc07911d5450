/* scores.h - a score matrix as the bias entry points (alibi.c, t5.c) walk
 * it: its rows, queries and flags, and the kernels of the path in use. */
#ifndef PE_ENCODINGS_SCORES_H
#define PE_ENCODINGS_SCORES_H

#include "check/check.h"
#include "kernels/enc_common.h"
#include "kernels/isa.h"

typedef struct pe__scores {
  const pe_isa *k;
  char *data;
  size_t esize;
  pe_dtype dtype;
  int64_t heads, q_len, k_len;
  int64_t s_batch, s_head, s_query;
  const int64_t *q_positions;
  int causal;
} pe__scores;

/* A validated scores tensor (pe__check_scores), its queries and flags. */
static inline pe__scores pe__scores_of(const pe_tensor *t, const int64_t *q_positions,
                                       uint32_t flags) {
  return (pe__scores){.k = pe__isa(), .data = t->data, .esize = pe__dtype_size(t->dtype),
                      .dtype = t->dtype, .heads = t->shape[1], .q_len = t->shape[2],
                      .k_len = t->shape[3], .s_batch = pe__stride(t, 0),
                      .s_head = pe__stride(t, 1), .s_query = pe__stride(t, 2),
                      .q_positions = q_positions, .causal = (flags & PE_MASK_CAUSAL) != 0};
}

/* The causal -inf past a row's n biased keys. */
static inline void pe__scores_mask_rest(const pe__scores *s, char *row, int64_t n) {
  if (n < s->k_len) s->k->mask_row[s->dtype](row + n * (int64_t)s->esize, s->k_len - n);
}

#endif
