/* hf_config.c - pe_rope_cache_create_from_hf_config: read a HuggingFace
 * config.json with cJSON and derive the RoPE parameters exactly as
 * transformers does (../shared/ROPE_SCALING.md §1-§3, v5 plus the legacy keys
 * that v5 still accepts).
 *
 * Mapping of config keys onto pe_rope_params:
 *   rope_parameters (v5) | rope_scaling (legacy)   the scaling dict ("dict")
 *   dict.rope_type | dict.type                     scaling ("su" -> longrope;
 *                                                  Phi-3 also "yarn" -> longrope)
 *   dict.rope_theta | rope_theta | rotary_emb_base base (default 10000)
 *   qk_rope_head_dim | head_dim | hidden_size / num_attention_heads
 *     (GPT-J: n_embd / n_head)                     head_dim
 *   dict.partial_rotary_factor | partial_rotary_factor | rotary_pct (GPT-NeoX)
 *                                                  rotary_dim = int(head_dim * prf)
 *   rotary_dim (GPT-J, CodeGen)                    rotary_dim
 *   max_position_embeddings | n_positions          M: seq_len default; dynamic's
 *                                                  original_max_positions
 *   original_max_position_embeddings (top level wins over dict, else M)
 *                                                  M0: original_max_positions
 *                                                  (yarn, longrope, llama3)
 *   dict.factor (yarn/longrope: absent = M/M0)     factor
 *   dict.attention_factor, beta_fast, beta_slow, mscale, mscale_all_dim,
 *   truncate, low_freq_factor, high_freq_factor, short_factor, long_factor
 *                                                  the fields of the same name
 *   model_type gptj, codegen, glm, glm4, helium, deepseek_v2/v3 (unless
 *   rope_interleave is false)                      style PE_ROPE_GPTJ, else NEOX
 *
 * Where HF's model classes differ from modeling_rope_utils we follow the
 * model class:
 * - The default rope ("default"/no dict) is computed by each model class. Llama
 *   and the models copied from it ignore partial_rotary_factor (d = head_dim);
 *   phi, phi3 (Phi-4-mini), gpt_neox, stablelm, persimmon, glm, glm4, glm4_moe
 *   and qwen3_next
 *   apply it.
 *   Every scaled type goes through modeling_rope_utils, which applies it.
 * - An odd d = int(head_dim * prf) keeps its odd exponent denominator and HF
 *   produces ceil(d/2) frequencies; the NeoX-style apply then rotates the
 *   first 2*ceil(d/2) = d+1 channels (it splits on cos.shape[-1]). We build
 *   exactly that: CUSTOM frequencies B^(-2i/d) (scaled as the type says) on
 *   rotary_dim d+1. The cache then reports PE_ROPE_SCALING_CUSTOM. YaRN and
 *   LongRoPE with an odd d fail inside HF (a d//2 ramp or factor list against
 *   ceil(d/2) frequencies), so they are PE_ERR_UNSUPPORTED here.
 * - proportional (Gemma-4) keeps all head_dim channels in the rotation and
 *   gives the pairs past int(prf*head_dim//2) frequency 0; with prf < 1 that is
 *   not a partial rotary (the pairs are (j, j + head_dim/2)), so it is built
 *   as CUSTOM frequencies on rotary_dim = head_dim.
 * - DeepSeek-V2/V3 rotate only the qk_rope_head_dim tail of each 192-channel
 *   head: the cache's head_dim is qk_rope_head_dim, and callers pass that
 *   slice of q/k (a view through pe_tensor strides). HF de-interleaves the
 *   output of the interleaved rotation; it permutes q and k alike, so q.k is
 *   the same as with PE_ROPE_GPTJ's in-place pairs.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rope_internal.h"

static const char FN[] = "pe_rope_cache_create_from_hf_config";

/* A key that is absent or JSON null is "not set", as getattr(..., None) and
 * dict.get() see it in transformers. */
static const cJSON *get(const cJSON *obj, const char *key) {
  if (!obj) return NULL;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return (v && !cJSON_IsNull(v)) ? v : NULL;
}

static const char *json_type(const cJSON *v) {
  if (cJSON_IsBool(v)) return "a boolean";
  if (cJSON_IsString(v)) return "a string";
  if (cJSON_IsArray(v)) return "an array";
  if (cJSON_IsObject(v)) return "an object";
  if (cJSON_IsNumber(v)) return "a number";
  return "not a number";
}

/* The value of where.key as a double. *found = 0 when it is not set. */
static pe_status get_number(const cJSON *obj, const char *where, const char *key, double *out,
                            int *found) {
  const cJSON *v = get(obj, key);
  *found = v != NULL;
  if (!v) return PE_OK;
  if (!cJSON_IsNumber(v))
    return pe__fail(PE_ERR_PARSE, "%s: %s%s must be a number, got %s", FN, where, key, json_type(v));
  if (!isfinite(v->valuedouble))
    return pe__fail(PE_ERR_PARSE, "%s: %s%s is not finite", FN, where, key);
  *out = v->valuedouble;
  return PE_OK;
}

/* An integer key: a JSON number with no fraction, in [1, 2^53]. */
static pe_status get_count(const cJSON *obj, const char *where, const char *key, int64_t *out,
                           int *found) {
  double d = 0.0;
  pe_status st = get_number(obj, where, key, &d, found);
  if (st != PE_OK || !*found) return st;
  if (d != floor(d) || d < 1.0 || d > 9007199254740992.0)
    return pe__fail(PE_ERR_PARSE, "%s: %s%s must be a positive integer, got %g", FN, where, key, d);
  *out = (int64_t)d;
  return PE_OK;
}

static pe_status need(int found, const char *where, const char *key, const char *why) {
  if (found) return PE_OK;
  return pe__fail(PE_ERR_PARSE, "%s: config.json lacks %s%s (%s)", FN, where, key, why);
}

/* Everything read from the file, before it becomes a pe_rope_params. */
typedef struct hf_rope {
  const cJSON *root, *dict;
  char where[32];             /* "rope_parameters." or "rope_scaling." */
  const char *model_type;
  const char *type_name;
  pe_rope_scaling scaling;
  double base, prf;
  int32_t head_dim, d;        /* d may be odd (see the header comment) */
  int64_t m, m0;              /* 0 = absent */
  pe_rope_style style;
} hf_rope;

static int is_model(const hf_rope *h, const char *const *names) {
  for (; *names; names++)
    if (strcmp(h->model_type, *names) == 0) return 1;
  return 0;
}

static pe_status read_dict(hf_rope *h) {
  const cJSON *rp = get(h->root, "rope_parameters");
  const char *key = rp ? "rope_parameters" : "rope_scaling";
  const cJSON *dict = rp ? rp : get(h->root, "rope_scaling");
  if (dict && !cJSON_IsObject(dict))
    return pe__fail(PE_ERR_PARSE, "%s: %s must be an object, got %s", FN, key, json_type(dict));
  snprintf(h->where, sizeof h->where, "%s.", key);
  h->dict = dict;
  if (!dict) return PE_OK;
  /* v5 per-layer-type dicts ({"full_attention": {...}, "sliding_attention":
   * {...}}) hold one rope per layer type: one cache cannot represent them. */
  if (!get(dict, "rope_type") && !get(dict, "type") && !get(dict, "rope_theta") && dict->child &&
      cJSON_IsObject(dict->child))
    return pe__fail(PE_ERR_UNSUPPORTED,
                    "%s: %s is per layer type (key \"%s\"): build one cache per layer type", FN,
                    key, dict->child->string ? dict->child->string : "?");
  return PE_OK;
}

static pe_status read_type(hf_rope *h) {
  static const struct { const char *name; pe_rope_scaling s; } types[] = {
      {"default", PE_ROPE_SCALING_NONE},   {"linear", PE_ROPE_SCALING_LINEAR},
      {"dynamic", PE_ROPE_SCALING_DYNAMIC}, {"yarn", PE_ROPE_SCALING_YARN},
      {"longrope", PE_ROPE_SCALING_LONGROPE}, {"su", PE_ROPE_SCALING_LONGROPE},
      {"llama3", PE_ROPE_SCALING_LLAMA3},  {"proportional", PE_ROPE_SCALING_PROPORTIONAL}};
  const char *key = "rope_type";
  const cJSON *t = get(h->dict, key);
  if (!t) t = get(h->dict, key = "type");
  h->scaling = PE_ROPE_SCALING_NONE;
  h->type_name = "default";
  if (!t) return PE_OK;
  if (!cJSON_IsString(t))
    return pe__fail(PE_ERR_PARSE, "%s: %s%s must be a string, got %s", FN, h->where, key, json_type(t));
  h->type_name = t->valuestring;
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    if (strcmp(t->valuestring, types[i].name) == 0) {
      h->scaling = types[i].s;
      /* Phi3Config renames its legacy "su" and "yarn" to "longrope". */
      if (h->scaling == PE_ROPE_SCALING_YARN && strcmp(h->model_type, "phi3") == 0)
        h->scaling = PE_ROPE_SCALING_LONGROPE;
      return PE_OK;
    }
  }
  return pe__fail(PE_ERR_UNSUPPORTED, "%s: %s%s \"%s\" is not a rope type libposenc knows (default, "
                  "linear, dynamic, yarn, longrope/su, llama3, proportional)",
                  FN, h->where, key, t->valuestring);
}

static pe_status read_geometry(hf_rope *h) {
  pe_status st;
  int found;
  int64_t v = 0;
  /* DeepSeek: the rotated part of a head is qk_rope_head_dim (its config
   * class sets head_dim to it). */
  if ((st = get_count(h->root, "", "qk_rope_head_dim", &v, &found)) != PE_OK) return st;
  if (!found) {
    /* HF: `config.head_dim or hidden // heads`, so head_dim 0 falls back too. */
    double hd = 0.0;
    if ((st = get_number(h->root, "", "head_dim", &hd, &found)) != PE_OK) return st;
    if (found && hd == 0.0) found = 0;
    if (found && (st = get_count(h->root, "", "head_dim", &v, &found)) != PE_OK) return st;
  }
  if (!found) {
    /* head_dim = hidden_size // num_attention_heads (GPT-J: n_embd, n_head). */
    int64_t hidden = 0, heads = 0;
    const char *hk = "hidden_size", *nk = "num_attention_heads";
    if ((st = get_count(h->root, "", hk, &hidden, &found)) != PE_OK) return st;
    if (!found && (st = get_count(h->root, "", hk = "n_embd", &hidden, &found)) != PE_OK) return st;
    if ((st = need(found, "", "hidden_size", "no head_dim either")) != PE_OK) return st;
    if ((st = get_count(h->root, "", nk, &heads, &found)) != PE_OK) return st;
    if (!found && (st = get_count(h->root, "", nk = "n_head", &heads, &found)) != PE_OK) return st;
    if ((st = need(found, "", "num_attention_heads", "no head_dim either")) != PE_OK) return st;
    v = hidden / heads;
  }
  if (v < 2 || v > PE_MAX_HEAD_DIM)
    return pe__fail(PE_ERR_PARSE, "%s: head_dim %" PRId64 " is outside [2, %d]", FN, v, PE_MAX_HEAD_DIM);
  h->head_dim = (int32_t)v;

  /* partial_rotary_factor: v5 dict, then top level, then GPT-NeoX rotary_pct. */
  const char *pk = "partial_rotary_factor", *pw = h->where;
  h->prf = 1.0;
  if ((st = get_number(h->dict, pw, pk, &h->prf, &found)) != PE_OK) return st;
  if (!found && (st = get_number(h->root, pw = "", pk, &h->prf, &found)) != PE_OK) return st;
  if (!found && (st = get_number(h->root, pw = "", pk = "rotary_pct", &h->prf, &found)) != PE_OK)
    return st;
  if (!(h->prf > 0.0 && h->prf <= 1.0))
    return pe__fail(PE_ERR_PARSE, "%s: %s%s %g must be in (0, 1]", FN, pw, pk, h->prf);

  static const char *const applies_prf[] = {"phi", "phi3", "gpt_neox", "stablelm", "persimmon", "glm",
                                            "glm4", "glm4_moe", "qwen3_next", NULL};
  static const char *const gptj_family[] = {"gptj", "codegen", NULL};
  int64_t rd = h->head_dim;
  if (is_model(h, gptj_family)) {
    /* GPT-J and CodeGen: rotary_dim channels (null = all). */
    if ((st = get_count(h->root, "", "rotary_dim", &rd, &found)) != PE_OK) return st;
    if (!found) rd = h->head_dim;
  } else if (h->scaling != PE_ROPE_SCALING_NONE || is_model(h, applies_prf)) {
    rd = (int64_t)(h->head_dim * h->prf); /* Python int(): truncation */
  }
  if (rd < 2 || rd > h->head_dim)
    return pe__fail(PE_ERR_PARSE,
                    "%s: the rotary dim %" PRId64 " (head_dim %d, partial rotary %g) is outside [2, "
                    "head_dim]",
                    FN, rd, (int)h->head_dim, h->prf);
  h->d = (int32_t)rd;

  h->style = PE_ROPE_NEOX;
  /* Models whose HF apply rotates pairs (2i, 2i+1): rotate_every_two (GPT-J,
   * CodeGen), repeat_interleave'd cos/sin (GLM, GLM-4, Helium), DeepSeek's
   * rope_interleave (default true). */
  static const char *const interleaved[] = {"gptj", "codegen", "glm", "glm4", "helium", NULL};
  static const char *const deepseek[] = {"deepseek_v2", "deepseek_v3", NULL};
  if (is_model(h, interleaved)) h->style = PE_ROPE_GPTJ;
  if (is_model(h, deepseek)) {
    const cJSON *ri = get(h->root, "rope_interleave");
    h->style = (ri && cJSON_IsFalse(ri)) ? PE_ROPE_NEOX : PE_ROPE_GPTJ;
  }
  return PE_OK;
}

static pe_status read_lengths(hf_rope *h) {
  pe_status st;
  int found;
  double theta = 10000.0;
  if ((st = get_number(h->dict, h->where, "rope_theta", &theta, &found)) != PE_OK) return st;
  if (!found && (st = get_number(h->root, "", "rope_theta", &theta, &found)) != PE_OK) return st;
  if (!found && (st = get_number(h->root, "", "rotary_emb_base", &theta, &found)) != PE_OK) return st;
  h->base = theta;
  h->m = 0;
  if ((st = get_count(h->root, "", "max_position_embeddings", &h->m, &found)) != PE_OK) return st;
  if (!found && (st = get_count(h->root, "", "n_positions", &h->m, &found)) != PE_OK) return st;
  /* M0: a top-level value wins (Phi-3), then the dict's, then M. */
  h->m0 = 0;
  if ((st = get_count(h->root, "", "original_max_position_embeddings", &h->m0, &found)) != PE_OK)
    return st;
  if (!found &&
      (st = get_count(h->dict, h->where, "original_max_position_embeddings", &h->m0, &found)) != PE_OK)
    return st;
  if (!found) h->m0 = h->m;
  return PE_OK;
}

/* dict.key as a number, required. */
static pe_status dict_number(const hf_rope *h, const char *key, double *out) {
  int found;
  pe_status st = get_number(h->dict, h->where, key, out, &found);
  if (st != PE_OK) return st;
  return need(found, h->where, key, h->type_name);
}

/* dict.key as a number, optional (0 when not set: the params' "unset"). */
static pe_status dict_optional(const hf_rope *h, const char *key, double *out) {
  int found;
  *out = 0.0;
  return get_number(h->dict, h->where, key, out, &found);
}

/* factor for yarn and longrope: absent means M / M0. */
static pe_status factor_or_ratio(const hf_rope *h, double *out) {
  int found;
  pe_status st = get_number(h->dict, h->where, "factor", out, &found);
  if (st != PE_OK || found) return st;
  if ((st = need(h->m != 0, "", "max_position_embeddings", "factor is absent: it is M/M0")) != PE_OK)
    return st;
  *out = (double)h->m / (double)h->m0;
  return PE_OK;
}

/* A list of n float factors, copied into *out (pe__malloc). */
static pe_status read_factor_list(const hf_rope *h, const char *key, int32_t n, float **out) {
  const cJSON *a = get(h->dict, key);
  pe_status st = need(a != NULL, h->where, key, h->type_name);
  if (st != PE_OK) return st;
  if (!cJSON_IsArray(a))
    return pe__fail(PE_ERR_PARSE, "%s: %s%s must be an array, got %s", FN, h->where, key, json_type(a));
  int len = cJSON_GetArraySize(a);
  if (len != n)
    return pe__fail(PE_ERR_PARSE, "%s: %s%s has %d entries, the rotary dim %d needs %d", FN,
                    h->where, key, len, (int)h->d, (int)n);
  float *f = pe__malloc((size_t)n * sizeof *f);
  if (!f) return pe__fail(PE_ERR_OUT_OF_MEMORY, "%s: cannot allocate %s%s", FN, h->where, key);
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, a) {
    if (!cJSON_IsNumber(e)) {
      pe__free(f);
      return pe__fail(PE_ERR_PARSE, "%s: %s%s[%d] must be a number, got %s", FN, h->where, key, i,
                      json_type(e));
    }
    f[i++] = (float)e->valuedouble; /* HF holds them as a float32 tensor */
  }
  *out = f;
  return PE_OK;
}

/* The fields of the scaling type. Arrays it allocates go to *short_f, *long_f. */
static pe_status fill_scaling(const hf_rope *h, int64_t seq_len, pe_rope_params *p, float **short_f,
                              float **long_f) {
  pe_status st;
  double v = 0.0;
  int found;
  p->scaling = h->scaling;
  switch (h->scaling) {
    case PE_ROPE_SCALING_NONE:
    case PE_ROPE_SCALING_NTK: /* no HF rope_type maps here */
    case PE_ROPE_SCALING_CUSTOM:
      return PE_OK;
    case PE_ROPE_SCALING_LINEAR:
      return dict_number(h, "factor", &p->factor);
    case PE_ROPE_SCALING_DYNAMIC:
      if ((st = dict_number(h, "factor", &p->factor)) != PE_OK) return st;
      /* HF's dynamic NTK scales relative to M, never M0. */
      if ((st = need(h->m != 0, "", "max_position_embeddings", "dynamic scales relative to it")) != PE_OK)
        return st;
      p->original_max_positions = h->m;
      p->seq_len = seq_len;
      return PE_OK;
    case PE_ROPE_SCALING_YARN:
      if ((st = need(h->m0 != 0, "", "original_max_position_embeddings", "or max_position_embeddings")) != PE_OK)
        return st;
      p->original_max_positions = h->m0;
      if ((st = factor_or_ratio(h, &p->factor)) != PE_OK) return st;
      if ((st = dict_optional(h, "attention_factor", &p->attention_factor)) != PE_OK) return st;
      if ((st = dict_optional(h, "beta_fast", &p->beta_fast)) != PE_OK) return st;
      if ((st = dict_optional(h, "beta_slow", &p->beta_slow)) != PE_OK) return st;
      if ((st = dict_optional(h, "mscale", &p->mscale)) != PE_OK) return st;
      if ((st = dict_optional(h, "mscale_all_dim", &p->mscale_all_dim)) != PE_OK) return st;
      {
        const cJSON *t = get(h->dict, "truncate");
        p->truncate = 1; /* HF default True */
        if (t && cJSON_IsBool(t))
          p->truncate = cJSON_IsTrue(t) ? 1 : 0;
        else if (t && cJSON_IsNumber(t))
          p->truncate = t->valuedouble != 0.0;
        else if (t)
          return pe__fail(PE_ERR_PARSE, "%s: %struncate must be a boolean, got %s", FN, h->where,
                          json_type(t));
      }
      return PE_OK;
    case PE_ROPE_SCALING_LONGROPE:
      if ((st = need(h->m0 != 0, "", "original_max_position_embeddings", "or max_position_embeddings")) != PE_OK)
        return st;
      p->original_max_positions = h->m0;
      if ((st = factor_or_ratio(h, &p->factor)) != PE_OK) return st;
      if ((st = dict_optional(h, "attention_factor", &p->attention_factor)) != PE_OK) return st;
      if ((st = read_factor_list(h, "short_factor", h->d / 2, short_f)) != PE_OK) return st;
      if ((st = read_factor_list(h, "long_factor", h->d / 2, long_f)) != PE_OK) return st;
      p->short_factor = *short_f;
      p->long_factor = *long_f;
      p->seq_len = seq_len;
      return PE_OK;
    case PE_ROPE_SCALING_LLAMA3:
      if ((st = need(h->m0 != 0, "", "original_max_position_embeddings", "or max_position_embeddings")) != PE_OK)
        return st;
      p->original_max_positions = h->m0;
      if ((st = dict_number(h, "factor", &p->factor)) != PE_OK) return st;
      if ((st = dict_number(h, "low_freq_factor", &p->low_freq_factor)) != PE_OK) return st;
      return dict_number(h, "high_freq_factor", &p->high_freq_factor);
    case PE_ROPE_SCALING_PROPORTIONAL:
      p->factor = 1.0;
      if ((st = get_number(h->dict, h->where, "factor", &v, &found)) != PE_OK) return st;
      if (found) p->factor = v;
      return PE_OK;
  }
  return pe__fail(PE_ERR_UNSUPPORTED, "%s: internal: scaling %d", FN, (int)h->scaling);
}

/* Frequencies HF produces that are not a plain even-rotary_dim cache: odd d,
 * or proportional with fewer rotated angles than head_dim/2. Computes them
 * with the type's own code and rewrites *p as CUSTOM; *freq owns them. */
static pe_status to_custom(const hf_rope *h, pe_rope_params *p, double **freq, double *softmax) {
  pe_status st;
  int32_t rd, n;
  if (h->scaling == PE_ROPE_SCALING_PROPORTIONAL) {
    rd = h->head_dim;
    n = rd / 2;
  } else {
    rd = h->d + 1; /* NeoX apply rotates 2 * ceil(d/2) channels */
    n = (h->d + 1) / 2;
    if (h->scaling == PE_ROPE_SCALING_YARN || h->scaling == PE_ROPE_SCALING_LONGROPE)
      return pe__fail(PE_ERR_UNSUPPORTED,
                      "%s: %s with the odd rotary dim %d (head_dim %d x partial_rotary_factor %g) "
                      "fails in transformers too (d//2 entries against ceil(d/2) frequencies)",
                      FN, h->type_name, (int)h->d, (int)h->head_dim, h->prf);
    if (rd > h->head_dim)
      return pe__fail(PE_ERR_UNSUPPORTED, "%s: the odd rotary dim %d equals head_dim %d: HF's cos "
                      "would be wider than the head", FN, (int)h->d, (int)h->head_dim);
  }
  double *f = pe__malloc((size_t)n * sizeof *f);
  if (!f) return pe__fail(PE_ERR_OUT_OF_MEMORY, "%s: cannot allocate %d frequencies", FN, (int)n);
  double attn = 1.0, smax = 1.0;
  st = pe__rope_frequencies(FN, p, h->scaling == PE_ROPE_SCALING_PROPORTIONAL ? rd : h->d, f, &attn,
                            &smax);
  if (st != PE_OK) {
    pe__free(f);
    return st;
  }
  if (h->scaling == PE_ROPE_SCALING_PROPORTIONAL) {
    /* int(prf * head_dim // 2) angles rotate; the rest get frequency 0. */
    int32_t k = (int32_t)floor(h->prf * h->head_dim / 2.0);
    for (int32_t i = k; i < n; i++) f[i] = 0.0;
  }
  p->scaling = PE_ROPE_SCALING_CUSTOM;
  p->rotary_dim = rd;
  p->inv_freq = f;
  p->attention_factor = attn;
  *freq = f;
  *softmax = smax;
  return PE_OK;
}

PE_API pe_status pe_rope_cache_create_from_hf_config(const char *json, size_t len,
                                                     int64_t max_positions, int64_t seq_len,
                                                     pe_rope_cache **out) {
  if (!json) return pe__fail(PE_ERR_NULL_POINTER, "%s: json is NULL", FN);
  if (!out) return pe__fail(PE_ERR_NULL_POINTER, "%s: out is NULL", FN);
  if (seq_len < 0)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: seq_len %" PRId64 " must be >= 0 (0 = "
                    "max_position_embeddings)", FN, seq_len);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
  if (!root) {
    size_t at = (end && end >= json && end <= json + len) ? (size_t)(end - json) : 0;
    /* cJSON cannot tell an allocation failure from bad text: both are NULL. */
    return pe__fail(PE_ERR_PARSE, "%s: config.json is not valid JSON (error near byte %zu of %zu)",
                    FN, at, len);
  }
  /* cJSON stops after the first value; anything but whitespace after it is
   * not a config.json either. */
  for (const char *q = end; q && q < json + len; q++) {
    if (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r' || *q == '\0') continue;
    cJSON_Delete(root);
    return pe__fail(PE_ERR_PARSE, "%s: config.json has trailing characters at byte %zu of %zu", FN,
                    (size_t)(q - json), len);
  }
  pe_status st;
  float *short_f = NULL, *long_f = NULL;
  double *freq = NULL, softmax = 1.0;
  pe_rope_cache *c = NULL;
  hf_rope h;
  memset(&h, 0, sizeof h);
  h.root = root;
  h.model_type = "";
  if (!cJSON_IsObject(root)) {
    st = pe__fail(PE_ERR_PARSE, "%s: config.json must be a JSON object, got %s", FN, json_type(root));
    goto done;
  }
  /* Vision-language configs (Qwen3-VL) keep the language model's keys in
   * text_config: read them there when the top level has none. */
  const cJSON *tc = get(root, "text_config");
  if (tc && cJSON_IsObject(tc) && !get(root, "rope_parameters") && !get(root, "rope_scaling") &&
      !get(root, "rope_theta") && !get(root, "hidden_size") && !get(root, "head_dim"))
    h.root = tc;
  const cJSON *mt = get(h.root, "model_type");
  if (mt && cJSON_IsString(mt)) h.model_type = mt->valuestring;
  if ((st = read_dict(&h)) != PE_OK) goto done;
  if ((st = read_type(&h)) != PE_OK) goto done;
  if ((st = read_geometry(&h)) != PE_OK) goto done;
  if ((st = read_lengths(&h)) != PE_OK) goto done;

  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = h.head_dim;
  p.rotary_dim = h.d;
  p.style = h.style;
  p.base = h.base;
  p.max_positions = max_positions;
  /* seq_len 0 = M (HF: seq_len None is M for dynamic; the whole context). */
  if (seq_len == 0) seq_len = h.m;
  if ((st = fill_scaling(&h, seq_len, &p, &short_f, &long_f)) != PE_OK) goto done;
  int proportional_partial = h.scaling == PE_ROPE_SCALING_PROPORTIONAL &&
                             (int32_t)floor(h.prf * h.head_dim / 2.0) != h.head_dim / 2;
  if (h.scaling == PE_ROPE_SCALING_PROPORTIONAL) p.rotary_dim = h.head_dim;
  if ((h.d & 1) || proportional_partial) {
    if ((st = to_custom(&h, &p, &freq, &softmax)) != PE_OK) goto done;
  }
  if ((st = pe_rope_cache_create(&p, &c)) != PE_OK) goto done;
  if (freq) c->softmax_scale = softmax; /* CUSTOM has none of its own */
  *out = c;
done:
  pe__free(freq);
  pe__free(short_f);
  pe__free(long_f);
  cJSON_Delete(root);
  return st;
}

/* ---- M-RoPE parameters from a HuggingFace config.json ---- */

/* The rope dict holding mrope_section: rope_parameters (transformers v5) or
 * rope_scaling, at the top level (Qwen2-VL, Qwen2.5-VL) or in text_config
 * (Qwen3-VL). */
static const cJSON *find_mrope_dict(const cJSON *root, const char **where) {
  static const char *const parents[2] = {NULL, "text_config"};
  static const char *const keys[2] = {"rope_parameters", "rope_scaling"};
  static const char *const names[2][2] = {{"rope_parameters", "rope_scaling"},
                                          {"text_config.rope_parameters", "text_config.rope_scaling"}};
  for (int p = 0; p < 2; p++) {
    const cJSON *obj = parents[p] ? cJSON_GetObjectItemCaseSensitive(root, parents[p]) : root;
    if (!cJSON_IsObject(obj)) continue;
    for (int k = 0; k < 2; k++) {
      const cJSON *d = cJSON_GetObjectItemCaseSensitive(obj, keys[k]);
      if (cJSON_IsObject(d) && cJSON_GetObjectItemCaseSensitive(d, "mrope_section")) {
        *where = names[p][k];
        return d;
      }
    }
  }
  return NULL;
}

PE_API pe_status pe_mrope_section_from_hf_config(const char *json, size_t len,
                                                 int32_t *mrope_section, uint32_t *flags) {
  static const char fn[] = "pe_mrope_section_from_hf_config";
  if (!json) return pe__fail(PE_ERR_NULL_POINTER, "%s: json is NULL", fn);
  if (!mrope_section) return pe__fail(PE_ERR_NULL_POINTER, "%s: mrope_section is NULL", fn);
  if (!flags) return pe__fail(PE_ERR_NULL_POINTER, "%s: flags is NULL", fn);
  cJSON *root = cJSON_ParseWithLengthOpts(json, len, NULL, 0);
  if (!root) return pe__fail(PE_ERR_PARSE, "%s: the text is not valid JSON", fn);
  pe_status st = PE_OK;
  const char *where = "";
  const cJSON *dict = find_mrope_dict(root, &where);
  int32_t sec[3] = {0, 0, 0};
  uint32_t fl = 0;
  if (!dict) {
    st = pe__fail(PE_ERR_PARSE,
                  "%s: no mrope_section in rope_parameters or rope_scaling (top level or "
                  "text_config): not an M-RoPE model",
                  fn);
    goto done;
  }
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(dict, "mrope_section");
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != 3) {
    st = pe__fail(PE_ERR_PARSE, "%s: %s.mrope_section must be an array of 3 integers", fn, where);
    goto done;
  }
  for (int i = 0; i < 3; i++) {
    const cJSON *v = cJSON_GetArrayItem(arr, i);
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1.0;
    if (!(d >= 0.0 && d <= 1048576.0) || d != floor(d)) {
      st = pe__fail(PE_ERR_PARSE, "%s: %s.mrope_section[%d] must be an integer >= 0", fn, where, i);
      goto done;
    }
    sec[i] = (int32_t)d;
  }
  const cJSON *il = cJSON_GetObjectItemCaseSensitive(dict, "mrope_interleaved");
  if (il && !cJSON_IsBool(il)) {
    st = pe__fail(PE_ERR_PARSE, "%s: %s.mrope_interleaved must be true or false", fn, where);
    goto done;
  }
  if (cJSON_IsTrue(il)) fl |= PE_ROPE_MROPE_INTERLEAVED;
  memcpy(mrope_section, sec, sizeof sec);
  *flags = fl;
done:
  cJSON_Delete(root);
  return st;
}
