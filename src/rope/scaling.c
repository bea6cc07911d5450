/* rope_scaling.c - RoPE frequencies and attention factors for every scaling
 * type, as HuggingFace transformers computes them (modeling_rope_utils.py,
 * transformers 5.16.0.dev0), but in double precision: HF rounds every step to
 * float32, we round once, when the caller asks for float32 frequencies.
 *
 * Mapping of HF's config quantities onto pe_rope_params:
 *   B  (rope_theta)                        -> base
 *   d  (int(head_dim * partial_rotary))    -> the rotary_dim argument
 *   s  (factor)                            -> factor
 *   M0 (original_max_position_embeddings)  -> original_max_positions
 *                                             (yarn, longrope, llama3)
 *   M  (max_position_embeddings) of a dynamic-NTK model -> original_max_positions
 *      HF's dynamic NTK scales relative to M, the context the model was
 *      trained with, and never reads M0. In this struct that "context before
 *      extension" is original_max_positions; max_positions is only the number
 *      of table rows the caller wants, which is unrelated to the model.
 *   seq_len (dynamic: max(position_ids)+1; longrope: the same) -> seq_len
 *
 * Each type validates only the fields it reads, before anything is written,
 * so the outputs are written only on success. Every check names the field and
 * its value in pe_last_error(). */
#include <math.h>
#include <stdint.h>

#include "rope/cache.h"

/* M_PI is POSIX, not C11. */
#define PE_PI 3.14159265358979323846

static pe_status check_factor(const char *fn, const char *type, double factor, double min) {
  if (!isfinite(factor) || factor < min)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: %s scaling needs factor >= %g, got %g", fn, type,
                    min, factor);
  return PE_OK;
}

static pe_status check_positive_factor(const char *fn, const char *type, double factor) {
  if (!isfinite(factor) || !(factor > 0.0))
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: %s scaling needs a finite factor > 0, got %g", fn,
                    type, factor);
  return PE_OK;
}

/* hf_name: the HF config key this field stands for in the type. */
static pe_status check_original(const char *fn, const char *type, int64_t m0, int64_t min,
                                const char *hf_name) {
  if (m0 < min)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: %s scaling needs original_max_positions >= %lld (HF %s), got %lld", fn,
                    type, (long long)min, hf_name, (long long)m0);
  return PE_OK;
}

static pe_status check_seq_len(const char *fn, const char *type, int64_t seq_len) {
  if (seq_len < 0)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: %s scaling needs seq_len >= 0 (0 = unset), got %lld",
                    fn, type, (long long)seq_len);
  return PE_OK;
}

/* NTK rescales the base by x^(d/(d-2)); HF divides by d-2 in Python, which
 * raises for d == 2, so we refuse it too instead of producing inf. */
static pe_status check_ntk_dim(const char *fn, const char *type, int32_t d) {
  if (d <= 2)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: %s scaling needs rotary_dim > 2 (the base exponent is d/(d-2)), got %d", fn,
                    type, (int)d);
  return PE_OK;
}

/* A factor array must exist and every entry must be a usable divisor. */
static pe_status check_factor_array(const char *fn, const char *name, const float *a, int32_t n) {
  if (!a)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: longrope scaling needs %s (rotary_dim/2 = %d floats), got NULL",
                    fn, name, (int)n);
  for (int32_t i = 0; i < n; i++)
    if (!isfinite(a[i]) || !(a[i] > 0.0f))
      return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: longrope %s[%d] is %g, must be finite and > 0",
                      fn, name, (int)i, (double)a[i]);
  return PE_OK;
}

/* B^(-2i/d). d may be odd when hf_config.c reproduces HF's odd
 * int(head_dim * partial_rotary_factor); the exponent keeps that denominator. */
static double default_inv(double base, int32_t i, int32_t d) { return pow(base, -(2.0 * i) / d); }

static void default_frequencies(double base, int32_t d, int32_t half, double *inv) {
  for (int32_t i = 0; i < half; i++) inv[i] = default_inv(base, i, d);
}

/* YaRN's mscale: 0.1 * m * ln(s) + 1, and 1 for s <= 1. */
static double yarn_mscale(double s, double m) { return s <= 1.0 ? 1.0 : 0.1 * m * log(s) + 1.0; }

/* The dimension index at which the wavelength makes r full turns over M0. */
static double yarn_correction_dim(double r, int32_t d, double base, double m0) {
  return (d * log(m0 / (r * 2.0 * PE_PI))) / (2.0 * log(base));
}

static pe_status yarn_validate(const char *fn, const pe_rope_params *p) {
  pe_status st;
  if ((st = check_factor(fn, "yarn", p->factor, 1.0)) != PE_OK) return st;
  if ((st = check_original(fn, "yarn", p->original_max_positions, 1,
                                "original_max_position_embeddings")) != PE_OK) return st;
  if (!(p->base > 1.0))
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: yarn scaling needs base > 1 (the correction range divides by ln base), got %g",
                    fn, p->base);
  if (!isfinite(p->beta_fast) || p->beta_fast < 0.0)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: yarn beta_fast %g must be finite and >= 0 (0 = 32)",
                    fn, p->beta_fast);
  if (!isfinite(p->beta_slow) || p->beta_slow < 0.0)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: yarn beta_slow %g must be finite and >= 0 (0 = 1)",
                    fn, p->beta_slow);
  /* No order between the betas: transformers only warns when beta_fast <
   * beta_slow and computes the ramp anyway (Kimi-K2 ships beta_fast ==
   * beta_slow == 1: the floor and ceil of one correction dim make a
   * one-step ramp; see yarn_frequencies), so it is computed here too. */
  if (!isfinite(p->mscale) || p->mscale < 0.0)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: yarn mscale %g must be finite and >= 0 (0 = unset)",
                    fn, p->mscale);
  if (!isfinite(p->mscale_all_dim) || p->mscale_all_dim < 0.0)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: yarn mscale_all_dim %g must be finite and >= 0 (0 = unset)", fn,
                    p->mscale_all_dim);
  if (p->truncate != 0 && p->truncate != 1)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: yarn truncate must be 0 or 1, got %d", fn,
                    (int)p->truncate);
  return PE_OK;
}

/* HF _compute_yarn_parameters: blend of interpolated (1/(s*P)) and
 * extrapolated (1/P) frequencies along a linear ramp over the correction
 * range [lo, hi] of dimension indices. */
static void yarn_frequencies(const pe_rope_params *p, int32_t d, int32_t half, double *inv,
                             double *attn, double *smax) {
  double s = p->factor, base = p->base, m0 = (double)p->original_max_positions;
  double bf = p->beta_fast != 0.0 ? p->beta_fast : 32.0; /* HF: beta or default */
  double bs = p->beta_slow != 0.0 ? p->beta_slow : 1.0;
  double lo = yarn_correction_dim(bf, d, base, m0);
  double hi = yarn_correction_dim(bs, d, base, m0);
  if (p->truncate) {
    lo = floor(lo);
    hi = ceil(hi);
  }
  /* HF clamps to d-1, not half-1: indices past half are never reached. */
  if (lo < 0.0) lo = 0.0;
  if (hi > d - 1) hi = d - 1;
  if (lo == hi) hi += 0.001; /* HF's guard against a zero-width ramp */
  for (int32_t i = 0; i < half; i++) {
    double r = (i - lo) / (hi - lo);
    if (r < 0.0) r = 0.0;
    if (r > 1.0) r = 1.0;
    double extrap = 1.0 - r; /* weight of the original frequency */
    double pf = pow(base, (2.0 * i) / d);
    inv[i] = (1.0 / (s * pf)) * (1.0 - extrap) + (1.0 / pf) * extrap;
  }
  /* A lone mscale is ignored, as in HF: only the pair forms a ratio. */
  if (p->mscale != 0.0 && p->mscale_all_dim != 0.0)
    *attn = yarn_mscale(s, p->mscale) / yarn_mscale(s, p->mscale_all_dim);
  else
    *attn = yarn_mscale(s, 1.0);
  /* DeepSeek-V2/V3 multiply the softmax scale by mscale(s, mscale_all_dim)^2. */
  if (p->mscale_all_dim != 0.0) {
    double m = yarn_mscale(s, p->mscale_all_dim);
    *smax = m * m;
  }
}

static pe_status longrope_validate(const char *fn, const pe_rope_params *p, int32_t half) {
  pe_status st;
  if ((st = check_factor(fn, "longrope", p->factor, 1.0)) != PE_OK) return st;
  /* ln M0 is a divisor of the default attention factor: M0 = 1 gives 0. */
  if ((st = check_original(fn, "longrope", p->original_max_positions, 2,
                                "original_max_position_embeddings")) != PE_OK) return st;
  if ((st = check_seq_len(fn, "longrope", p->seq_len)) != PE_OK) return st;
  if ((st = check_factor_array(fn, "short_factor", p->short_factor, half)) != PE_OK) return st;
  return check_factor_array(fn, "long_factor", p->long_factor, half);
}

/* HF _compute_longrope_parameters. The long factors apply only when the
 * context is strictly longer than M0 (seq_len == M0 stays short). */
static void longrope_frequencies(const pe_rope_params *p, int32_t d, int32_t half, double *inv,
                                 double *attn) {
  double m0 = (double)p->original_max_positions, s = p->factor;
  const float *ext = p->seq_len > p->original_max_positions ? p->long_factor : p->short_factor;
  for (int32_t i = 0; i < half; i++) inv[i] = 1.0 / ((double)ext[i] * pow(p->base, (2.0 * i) / d));
  *attn = s <= 1.0 ? 1.0 : sqrt(1.0 + log(s) / log(m0));
}

static pe_status llama3_validate(const char *fn, const pe_rope_params *p) {
  pe_status st;
  if ((st = check_factor(fn, "llama3", p->factor, 1.0)) != PE_OK) return st;
  if ((st = check_original(fn, "llama3", p->original_max_positions, 1,
                                "original_max_position_embeddings")) != PE_OK) return st;
  if (!isfinite(p->low_freq_factor) || !(p->low_freq_factor > 0.0))
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: llama3 low_freq_factor %g must be finite and > 0",
                    fn, p->low_freq_factor);
  /* Equal factors are accepted, as transformers does (Llama-4-Scout ships
   * low_freq_factor == high_freq_factor == 1): the smoothing band
   * [M0/high, M0/low] is then one wavelength wide and the division by
   * high - low is never reached (see llama3_frequencies). */
  if (!isfinite(p->high_freq_factor) || !(p->high_freq_factor >= p->low_freq_factor))
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: llama3 high_freq_factor %g must be finite and >= low_freq_factor %g",
                    fn, p->high_freq_factor, p->low_freq_factor);
  return PE_OK;
}

/* HF _compute_llama3_parameters: wavelengths above M0/low are divided by s,
 * below M0/high kept, and in between (both bounds inclusive) interpolated. */
static void llama3_frequencies(const pe_rope_params *p, int32_t d, int32_t half, double *inv) {
  double s = p->factor, m0 = (double)p->original_max_positions;
  double low = p->low_freq_factor, high = p->high_freq_factor;
  double lam_lo = m0 / low, lam_hi = m0 / high;
  for (int32_t i = 0; i < half; i++) {
    double f = default_inv(p->base, i, d);
    double lam = 2.0 * PE_PI / f;
    if (lam > lam_lo) {
      f /= s;
    } else if (lam >= lam_hi && high != low) {
      /* HF: is_medium_freq = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen);
       * with high == low it holds only for lam == M0/low exactly, where HF's
       * smooth factor is 0/0 = NaN. No power of a finite base lands there in
       * practice; the band is empty here and such a wavelength is kept. */
      double smooth = (m0 / lam - low) / (high - low);
      f = (1.0 - smooth) * f / s + smooth * f;
    }
    inv[i] = f;
  }
}

static pe_status custom_validate(const char *fn, const pe_rope_params *p, int32_t half) {
  if (!p->inv_freq)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: custom scaling needs inv_freq (rotary_dim/2 = %d doubles), got NULL", fn,
                    (int)half);
  for (int32_t i = 0; i < half; i++)
    if (!isfinite(p->inv_freq[i]) || p->inv_freq[i] < 0.0)
      return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: custom inv_freq[%d] is %g, must be finite and >= 0",
                      fn, (int)i, p->inv_freq[i]);
  return PE_OK;
}

/* Everything a type reads is checked here, before the first output write. */
static pe_status validate(const char *fn, const pe_rope_params *p, int32_t d, int32_t half) {
  pe_status st;
  switch (p->scaling) {
    case PE_ROPE_SCALING_NONE:
      return PE_OK;
    case PE_ROPE_SCALING_LINEAR:
      return check_factor(fn, "linear", p->factor, 1.0);
    case PE_ROPE_SCALING_NTK:
      if ((st = check_factor(fn, "ntk", p->factor, 1.0)) != PE_OK) return st;
      return check_ntk_dim(fn, "ntk", d);
    case PE_ROPE_SCALING_DYNAMIC:
      if ((st = check_factor(fn, "dynamic", p->factor, 1.0)) != PE_OK) return st;
      if ((st = check_ntk_dim(fn, "dynamic", d)) != PE_OK) return st;
      if ((st = check_original(fn, "dynamic", p->original_max_positions, 1,
                                "max_position_embeddings: the context before extension")) != PE_OK) return st;
      return check_seq_len(fn, "dynamic", p->seq_len);
    case PE_ROPE_SCALING_YARN:
      return yarn_validate(fn, p);
    case PE_ROPE_SCALING_LONGROPE:
      return longrope_validate(fn, p, half);
    case PE_ROPE_SCALING_LLAMA3:
      return llama3_validate(fn, p);
    case PE_ROPE_SCALING_PROPORTIONAL:
      if (p->head_dim < d)
        return pe__fail(PE_ERR_INVALID_ARGUMENT,
                        "%s: proportional scaling needs head_dim %d >= rotary_dim %d", fn,
                        (int)p->head_dim, (int)d);
      return check_positive_factor(fn, "proportional", p->factor);
    case PE_ROPE_SCALING_CUSTOM:
      return custom_validate(fn, p, half);
  }
  return pe__fail(PE_ERR_UNSUPPORTED, "%s: scaling %d is not a pe_rope_scaling value", fn,
                  (int)p->scaling);
}

pe_status pe__rope_frequencies(const char *fn, const pe_rope_params *p, int32_t rotary_dim,
                               double *inv_freq, double *attention_factor, double *softmax_scale) {
  /* ceil(d/2): HF's arange(0, d, 2) also has that many entries for odd d. */
  const int32_t d = rotary_dim, half = (rotary_dim + 1) / 2;
  double attn = 1.0, smax = 1.0;
  pe_status st = validate(fn, p, d, half);
  if (st != PE_OK) return st;
  switch (p->scaling) {
    case PE_ROPE_SCALING_NONE:
      default_frequencies(p->base, d, half, inv_freq);
      break;
    case PE_ROPE_SCALING_LINEAR:
      default_frequencies(p->base, d, half, inv_freq);
      for (int32_t i = 0; i < half; i++) inv_freq[i] /= p->factor;
      break;
    case PE_ROPE_SCALING_NTK:
      /* Static NTK-aware scaling: the base that dynamic NTK reaches at s*M. */
      default_frequencies(p->base * pow(p->factor, (double)d / (d - 2)), d, half, inv_freq);
      break;
    case PE_ROPE_SCALING_DYNAMIC: {
      /* HF: L = max(seq_len, M), seq_len unset = M, so up to M the base is B. */
      double m = (double)p->original_max_positions;
      double len = p->seq_len > p->original_max_positions ? (double)p->seq_len : m;
      double grow = (p->factor * len / m) - (p->factor - 1.0);
      default_frequencies(p->base * pow(grow, (double)d / (d - 2)), d, half, inv_freq);
      break;
    }
    case PE_ROPE_SCALING_YARN:
      yarn_frequencies(p, d, half, inv_freq, &attn, &smax);
      break;
    case PE_ROPE_SCALING_LONGROPE:
      longrope_frequencies(p, d, half, inv_freq, &attn);
      break;
    case PE_ROPE_SCALING_LLAMA3:
      llama3_frequencies(p, d, half, inv_freq);
      break;
    case PE_ROPE_SCALING_PROPORTIONAL: {
      /* Gemma-4 (HF _compute_proportional_rope_parameters): the exponent's
       * denominator is head_dim, not rotary_dim; the first p->rotary_dim/2
       * angles rotate (0 = all), the rest of the `half` frequencies are 0.
       * pe_rope_cache_create passes half = head_dim/2 (see
       * pe__rope_proportional_rotary_dim). */
      int32_t angles = p->rotary_dim ? p->rotary_dim / 2 : half;
      if (angles > half) angles = half;
      default_frequencies(p->base, p->head_dim, angles, inv_freq);
      for (int32_t i = 0; i < angles; i++) inv_freq[i] /= p->factor;
      for (int32_t i = angles; i < half; i++) inv_freq[i] = 0.0;
      break;
    }
    case PE_ROPE_SCALING_CUSTOM:
      for (int32_t i = 0; i < half; i++) inv_freq[i] = p->inv_freq[i];
      break;
  }
  /* An explicit attention factor wins for every type (HF: yarn, longrope). */
  if (p->attention_factor != 0.0) attn = p->attention_factor;
  *attention_factor = attn;
  *softmax_scale = smax;
  return PE_OK;
}

int32_t pe__rope_proportional_rotary_dim(const pe_rope_params *p, int32_t rotary_dim) {
  /* Gemma-4 in transformers and vLLM keeps every head_dim channel in the
   * rotation, pairing (j, j + head_dim/2), and gives the pairs past
   * int(prf*head_dim/2) frequency 0. So a PROPORTIONAL cache with
   * rotary_dim r < head_dim is laid out on head_dim channels: r/2 rotated
   * angles, head_dim/2 - r/2 angles of frequency exactly 0 (cos 1, sin 0
   * before the attention factor). The caller computes the frequencies with
   * p->rotary_dim still r (pe__rope_frequencies reads the count from it),
   * and only then stores this widened value in the cache's params. */
  /* An odd head_dim keeps its last channel out of the rotation (as for any
   * rotary_dim), so the layout spans its even part: the fuzzer found that
   * the odd width made half disagree with pe__rope_frequencies' ceil. */
  int32_t even = p->head_dim & ~1;
  if (p->scaling == PE_ROPE_SCALING_PROPORTIONAL && rotary_dim < even) return even;
  return rotary_dim;
}
