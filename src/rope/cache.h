/* cache.h - the RoPE cache's layout (struct pe_rope_cache), shared by the
 * rope/ sources, the config loaders and the tests that inspect it. */
#ifndef PE_ROPE_CACHE_H
#define PE_ROPE_CACHE_H

#include "check/check.h"

struct pe_rope_cache {
  pe_rope_params p;          /* resolved: rotary_dim filled, pointers into this cache */
  int32_t half;              /* rotary_dim / 2 frequencies */
  double *inv_freq;          /* [half], radians per position, double */
  float *inv_freq_f32;       /* [half], rounded */
  float *short_factor;       /* owned copies (longrope), or NULL */
  float *long_factor;
  double *custom_inv_freq;   /* owned copy (custom), or NULL */
  double attention_factor;
  double softmax_scale;
  float *table;              /* [max_positions][2][half]: cos row then sin row,
                                times attention_factor; NULL when max_positions 0 */
};

/* Position pos's table row: rotary_dim/2 cos values, then as many sin
 * values (c->table set, pos < max_positions). */
static inline const float *pe__rope_table_row(const pe_rope_cache *c, int64_t pos) {
  return c->table + pos * 2 * (int64_t)c->half;
}

/* What positions of a call on c must stay below: its table's rows, or, on
 * the fly, the largest position exact in double. */
static inline pe__pos_bound pe__rope_bound(const pe_rope_cache *c) {
  return c->table ? (pe__pos_bound){c->p.max_positions, "max_positions"} : PE_POS_ANY;
}
/* The same for one item of a cache array (pe__pos_check's bound_of). */
PE_HIDDEN pe__pos_bound pe__rope_bound_of(const void *cache);

/* Validate the scaling fields of p for rotary_dim and compute the frequencies
 * (double, [rotary_dim/2]), the attention factor and the softmax multiplier,
 * as HuggingFace transformers does (modeling_rope_utils.py). Writes only
 * the outputs, and only on success. fn names the entry point in errors. */
PE_HIDDEN pe_status pe__rope_frequencies(const char *fn, const pe_rope_params *p,
                                         int32_t rotary_dim, double *inv_freq,
                                         double *attention_factor, double *softmax_scale);

/* The rotary_dim a cache of *p is laid out on, given the validated
 * rotary_dim r: head_dim for PROPORTIONAL (Gemma-4 pairs (j, j + head_dim/2)
 * and zeroes the frequencies past r/2), r otherwise. pe_rope_cache_create
 * calls it once, right after validating the geometry, and must call
 * pe__rope_frequencies with p->rotary_dim still r and the returned value as
 * its rotary_dim. */
PE_HIDDEN int32_t pe__rope_proportional_rotary_dim(const pe_rope_params *p, int32_t rotary_dim);

#endif
