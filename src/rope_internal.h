/* rope_internal.h - the RoPE cache layout, shared by rope.c, rope_scaling.c,
 * hf_config.c and the tests that inspect it. */
#ifndef PE_ROPE_INTERNAL_H
#define PE_ROPE_INTERNAL_H

#include "internal.h"

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
 * as HuggingFace transformers does (docs/rope_scaling.md). Writes only
 * the outputs, and only on success. fn names the entry point in errors. */
PE_HIDDEN pe_status pe__rope_frequencies(const char *fn, const pe_rope_params *p,
                                         int32_t rotary_dim, double *inv_freq,
                                         double *attention_factor, double *softmax_scale);

#endif
