/* rope_scaling.c - RoPE frequencies and attention factors for every scaling
 * type, as HuggingFace transformers computes them (../shared/ROPE_SCALING.md),
 * but in double precision. Each type validates its own fields. */
#include <math.h>

#include "rope_internal.h"

static pe_status check_factor(const char *fn, const char *type, double factor, double min) {
  if (!isfinite(factor) || factor < min)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: %s scaling needs factor >= %g, got %g", fn, type,
                    min, factor);
  return PE_OK;
}

/* inv_i = base^(-2i/d) for i < half. */
static void default_frequencies(double base, int32_t d, int32_t half, double *inv) {
  for (int32_t i = 0; i < half; i++) inv[i] = pow(base, -(2.0 * i) / d);
}

pe_status pe__rope_frequencies(const char *fn, const pe_rope_params *p, int32_t rotary_dim,
                               double *inv_freq, double *attention_factor, double *softmax_scale) {
  int32_t half = rotary_dim / 2;
  double attn = 1.0, smax = 1.0;
  pe_status st;
  switch (p->scaling) {
    case PE_ROPE_SCALING_NONE:
      default_frequencies(p->base, rotary_dim, half, inv_freq);
      break;
    case PE_ROPE_SCALING_LINEAR:
      if ((st = check_factor(fn, "linear", p->factor, 1.0)) != PE_OK) return st;
      default_frequencies(p->base, rotary_dim, half, inv_freq);
      for (int32_t i = 0; i < half; i++) inv_freq[i] /= p->factor;
      break;
    default:
      return pe__fail(PE_ERR_UNSUPPORTED, "%s: scaling type %d is not supported yet", fn,
                      (int)p->scaling);
  }
  if (p->attention_factor != 0.0) attn = p->attention_factor;
  *attention_factor = attn;
  *softmax_scale = smax;
  return PE_OK;
}
