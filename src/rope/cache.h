/* rope_internal.h - the RoPE cache layout, shared by rope.c, rope_scaling.c,
 * hf_config.c and the tests that inspect it. */
#ifndef PE_ROPE_INTERNAL_H
#define PE_ROPE_INTERNAL_H

#include "base/internal.h"

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
