/* hf_rope.c - one rotation from a HuggingFace config.json (cJSON): the RoPE
 * parameters of one layer type, exactly as transformers derives them
 * (modeling_rope_utils.py: rope_config_validation, standardize_rope_params
 * and the _compute_*_parameters functions; v5 plus the legacy keys that v5
 * still accepts). model_rope.c decides which layer has which type.
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
 *   model_type (the census, models.def)            style, rotated width, and the
 *                                                  config class's defaults for
 *                                                  omitted keys
 *
 * Where HF's model classes differ from modeling_rope_utils we follow the
 * model class:
 * - The default rope ("default"/no dict) is computed by each model class:
 *   the census row's width rule says whether it applies
 *   partial_rotary_factor (WIDTH_PRF: phi, phi3, gpt_neox, glm, qwen3_next,
 *   ...), ignores it (WIDTH_HEAD: Llama and the models copied from it), or
 *   reads rotary_dim (GPT-J, CodeGen, MiniMax-M2). Every scaled type goes
 *   through modeling_rope_utils, which applies the factor.
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
 * - MLA (DeepSeek-V2/V3 and the classes built on them) rotates only the
 *   qk_rope_head_dim tail of each head, DeepSeek-V4 the last
 *   int(head_dim * partial_rotary_factor) channels: the cache's head_dim is
 *   that span, and callers pass that slice of q/k (a view through pe_tensor
 *   strides; pe_model_rope_layer_slice gives the offsets). HF
 *   de-interleaves the output of the interleaved rotation; it permutes q and
 *   k alike, so q.k is the same as with PE_ROPE_GPTJ's in-place pairs.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/hf_rope.h"


/* A v5 per-layer-type dict ({"full_attention": {...}, "sliding_attention":
 * {...}}) rather than one rope's parameters. */
int pe__hf_is_per_layer_type(const cJSON *dict) {
  if (!dict || !dict->child || pe__json_get(dict, "rope_type") || pe__json_get(dict, "type") ||
      pe__json_get(dict, "rope_theta"))
    return 0;
  /* Every entry a layer type's dict: one scalar among them (a stray
   * "factor") makes it one rope's parameters, as standardize_rope_params
   * reads it, not a per-layer dict with a key dropped. */
  for (const cJSON *e = dict->child; e; e = e->next)
    if (!cJSON_IsObject(e)) return 0;
  return 1;
}

static pe_status read_type(hf_rope *h) {
  static const struct { const char *name; pe_rope_scaling s; } types[] = {
      {"default", PE_ROPE_SCALING_NONE},   {"linear", PE_ROPE_SCALING_LINEAR},
      {"dynamic", PE_ROPE_SCALING_DYNAMIC}, {"yarn", PE_ROPE_SCALING_YARN},
      {"longrope", PE_ROPE_SCALING_LONGROPE}, {"su", PE_ROPE_SCALING_LONGROPE},
      {"llama3", PE_ROPE_SCALING_LLAMA3},  {"proportional", PE_ROPE_SCALING_PROPORTIONAL},
      /* Qwen2-VL / Qwen2.5-VL ship "type": "mrope"; transformers reads it as
       * "default" (the sections only change which position each frequency
       * uses: pe_mrope_section_from_hf_config). */
      {"mrope", PE_ROPE_SCALING_NONE}};
  const char *key = "rope_type";
  const cJSON *t = pe__json_get(h->dict, key);
  if (!t) t = pe__json_get(h->dict, key = "type");
  h->scaling = PE_ROPE_SCALING_NONE;
  h->type_name = "default";
  if (!t) return PE_OK;
  if (!cJSON_IsString(t))
    return pe__fail(PE_ERR_PARSE, "%s: %s%s must be a string, got %s", FN, h->where, key, pe__json_type(t));
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
                  "linear, dynamic, yarn, longrope/su, llama3, proportional, mrope)",
                  FN, h->where, key, t->valuestring);
}

static pe_status read_geometry(hf_rope *h) {
  pe_status st;
  int found;
  int64_t v = 0;
  const model_info *mi = h->info;
  const char *hdk = h->head_dim_key ? h->head_dim_key : "head_dim";
  /* The class's width rule; a model type not in the table (loaded with
   * PE_CONFIG_GUESS) takes the file's keys at their word. */
  int guess = mi == NULL;
  model_width w = mi ? mi->width : WIDTH_PRF;
  found = 0;
  if (w == WIDTH_MLA || w == WIDTH_MLA_PRF || (guess && pe__json_get(h->root, "qk_rope_head_dim"))) {
    /* MLA: the rotated part of a head is qk_rope_head_dim (its config class
     * sets head_dim to it). */
    if ((st = pe__json_count(h->root, "", "qk_rope_head_dim", &v, &found)) != PE_OK) return st;
    if ((st = pe__json_need(found, "", "qk_rope_head_dim", "the rotated part of an MLA head")) != PE_OK)
      return st;
  }
  if (!found) {
    /* HF: `config.head_dim or hidden // heads`, so head_dim 0 falls back too. */
    double hd = 0.0;
    if ((st = pe__json_number(h->root, "", hdk, &hd, &found)) != PE_OK) return st;
    if (found && hd == 0.0) found = 0;
    if (found && (st = pe__json_count(h->root, "", hdk, &v, &found)) != PE_OK) return st;
    if (!found && h->head_dim_key && (st = pe__json_count(h->root, "", "head_dim", &v, &found)) != PE_OK)
      return st;
    if (!found && mi && mi->head_dim > 0) v = mi->head_dim, found = 1;
  }
  if (!found) {
    /* head_dim = hidden_size // num_attention_heads (GPT-J: n_embd, n_head),
     * with the config class's defaults for an omitted key. */
    int64_t hidden = 0, heads = 0;
    const char *hk = "hidden_size", *nk = "num_attention_heads";
    if ((st = pe__json_count(h->root, "", hk, &hidden, &found)) != PE_OK) return st;
    if (!found && (st = pe__json_count(h->root, "", hk = "n_embd", &hidden, &found)) != PE_OK) return st;
    if (!found && mi && mi->hidden > 0) hidden = mi->hidden, found = 1;
    if ((st = pe__json_need(found, "", "hidden_size", "no head_dim either")) != PE_OK) return st;
    if ((st = pe__json_count(h->root, "", nk, &heads, &found)) != PE_OK) return st;
    if (!found && (st = pe__json_count(h->root, "", nk = "n_head", &heads, &found)) != PE_OK) return st;
    if (!found && mi && mi->heads > 0) heads = mi->heads, found = 1;
    if ((st = pe__json_need(found, "", "num_attention_heads", "no head_dim either")) != PE_OK) return st;
    v = hidden / heads;
  }
  if (v < 2 || v > PE_MAX_HEAD_DIM)
    return pe__fail(PE_ERR_PARSE, "%s: head_dim %" PRId64 " is outside [2, %d]", FN, v, PE_MAX_HEAD_DIM);
  h->head_dim = (int32_t)v;

  /* partial_rotary_factor: v5 dict, then top level, then GPT-NeoX rotary_pct. */
  const char *pk = "partial_rotary_factor", *pw = h->where;
  h->prf = 1.0;
  if ((st = pe__json_number(h->dict, pw, pk, &h->prf, &found)) != PE_OK) return st;
  if (!found && (st = pe__json_number(h->root, pw = "", pk, &h->prf, &found)) != PE_OK) return st;
  if (!found && (st = pe__json_number(h->root, pw = "", pk = "rotary_pct", &h->prf, &found)) != PE_OK)
    return st;
  if (!found && w == WIDTH_V4) {
    /* DeepseekV4Config: qk_rope_head_dim / head_dim, default 64 / 512. */
    int64_t r = 64;
    if ((st = pe__json_count(h->root, "", "qk_rope_head_dim", &r, &found)) != PE_OK) return st;
    h->prf = found ? (double)r / (double)h->head_dim : 64.0 / 512.0;
    pw = "";
    pk = found ? "qk_rope_head_dim" : "partial_rotary_factor";
  }
  if (!(h->prf > 0.0 && h->prf <= 1.0))
    return pe__fail(PE_ERR_PARSE, "%s: %s%s %g must be in (0, 1]", FN, pw, pk, h->prf);

  int64_t rd = h->head_dim;
  int scaled = h->scaling != PE_ROPE_SCALING_NONE;
  if (h->scaling == PE_ROPE_SCALING_PROPORTIONAL) {
    /* HF: rope_angles = int(prf * head_dim // 2) rotate, on head_dim pairs. */
    rd = 2 * (int64_t)floor(h->prf * h->head_dim / 2.0);
  } else if (w == WIDTH_ROTARY_DIM || (guess && pe__json_get(h->root, "rotary_dim"))) {
    /* GPT-J and CodeGen: rotary_dim channels (null = all); a model type
     * libposenc does not know: a rotary_dim key is taken as the width. */
    if ((st = pe__json_count(h->root, "", "rotary_dim", &rd, &found)) != PE_OK) return st;
    if (!found) rd = h->head_dim;
  } else if (w == WIDTH_MINIMAX_M2) {
    /* MiniMaxM2Config.convert_rope_params_to_dict: partial_rotary_factor =
     * rotary_dim (default head_dim // 2) / head_dim, overwriting any
     * partial_rotary_factor of the file; the rotary embedding then takes
     * int(head_dim * that factor). */
    int64_t r = h->head_dim / 2;
    if ((st = pe__json_count(h->root, "", "rotary_dim", &r, &found)) != PE_OK) return st;
    h->prf = (double)r / (double)h->head_dim;
    rd = (int64_t)(h->head_dim * h->prf);
  } else if (w == WIDTH_PRF || w == WIDTH_MLA_PRF || w == WIDTH_V4 || scaled) {
    /* Python int(): truncation. Every scaled type goes through
     * modeling_rope_utils, which applies the factor. */
    rd = (int64_t)(h->head_dim * h->prf);
  }
  if (rd < 2 || rd > h->head_dim)
    return pe__fail(PE_ERR_PARSE,
                    "%s: the rotary dim %" PRId64 " (head_dim %d, partial rotary %g) is outside [2, "
                    "head_dim]",
                    FN, rd, (int)h->head_dim, h->prf);
  h->d = (int32_t)rd;
  /* DeepSeek-V4 rotates the LAST d channels of its head: the cache spans
   * exactly those (the slice's offset places the view). */
  if (w == WIDTH_V4) h->head_dim = h->d;

  h->style = mi ? mi->style : PE_ROPE_NEOX;
  /* DeepseekV3Attention and the MLA classes built on it: rope_interleave
   * (default true) picks the interleaved apply; false is rotate_half. */
  if (mi && mi->pair == PAIR_MLA) {
    const cJSON *ri = pe__json_get(h->root, "rope_interleave");
    if (ri && !cJSON_IsBool(ri))
      return pe__fail(PE_ERR_PARSE, "%s: rope_interleave must be true or false, got %s", FN,
                      pe__json_type(ri));
    h->style = (ri && cJSON_IsFalse(ri)) ? PE_ROPE_NEOX : PE_ROPE_GPTJ;
  }
  if (h->style_override >= 0) h->style = (pe_rope_style)h->style_override;
  return PE_OK;
}

static pe_status read_lengths(hf_rope *h) {
  pe_status st;
  int found;
  double theta = 0.0;
  /* The dict's rope_theta, the layer type's own base (Gemma 3
   * rope_local_base_freq, ModernBERT global/local_rope_theta), the top-level
   * rope_theta or GPT-NeoX rotary_emb_base, then the config class's
   * default: never a guessed 10000. */
  if (h->base_forced > 0.0) {
    theta = h->base_forced, found = 1;
  } else if ((st = pe__json_number(h->dict, h->where, "rope_theta", &theta, &found)) != PE_OK) {
    return st;
  }
  if (!found && h->base_override > 0.0) theta = h->base_override, found = 1;
  if (!found && (st = pe__json_number(h->root, "", "rope_theta", &theta, &found)) != PE_OK) return st;
  if (!found && (st = pe__json_number(h->root, "", "rotary_emb_base", &theta, &found)) != PE_OK) return st;
  if (!found && h->info && h->info->theta > 0.0) theta = h->info->theta, found = 1;
  if (!found) {
    if (h->info)
      return pe__fail(PE_ERR_PARSE,
                      "%s: config.json lacks rope_theta, and libposenc has not checked the default "
                      "of model_type \"%s\"'s transformers config class: add rope_theta", FN,
                      h->model_type);
    return pe__fail(PE_ERR_PARSE,
                    "%s: config.json lacks rope_theta, and its model_type \"%s\" is not one "
                    "libposenc knows, so the default base (which transformers takes from the "
                    "model's config class) is unknown: add rope_theta", FN, h->model_type);
  }
  h->base = theta;
  h->m = 0;
  if ((st = pe__json_count(h->root, "", "max_position_embeddings", &h->m, &found)) != PE_OK) return st;
  if (!found && (st = pe__json_count(h->root, "", "n_positions", &h->m, &found)) != PE_OK) return st;
  /* An omitted max_position_embeddings takes the config class's default
   * (Gemma3TextConfig: 131072), as transformers does. */
  if (!found && h->info && h->info->max_pos) h->m = h->info->max_pos;
  /* M0: a top-level value wins (Phi-3), then the dict's, then M. */
  h->m0 = 0;
  if ((st = pe__json_count(h->root, "", "original_max_position_embeddings", &h->m0, &found)) != PE_OK)
    return st;
  if (!found &&
      (st = pe__json_count(h->dict, h->where, "original_max_position_embeddings", &h->m0, &found)) != PE_OK)
    return st;
  if (!found) h->m0 = h->m;
  return PE_OK;
}

/* dict.key as a number, required. */
static pe_status dict_number(const hf_rope *h, const char *key, double *out) {
  int found;
  pe_status st = pe__json_number(h->dict, h->where, key, out, &found);
  if (st != PE_OK) return st;
  return pe__json_need(found, h->where, key, h->type_name);
}

/* dict.key as a number, optional (0 when not set: the params' "unset"). */
static pe_status dict_optional(const hf_rope *h, const char *key, double *out) {
  int found;
  *out = 0.0;
  return pe__json_number(h->dict, h->where, key, out, &found);
}

/* factor for yarn and longrope: absent means M / M0. */
static pe_status factor_or_ratio(const hf_rope *h, double *out) {
  int found;
  pe_status st = pe__json_number(h->dict, h->where, "factor", out, &found);
  if (st != PE_OK || found) return st;
  if ((st = pe__json_need(h->m != 0, "", "max_position_embeddings", "factor is absent: it is M/M0")) != PE_OK)
    return st;
  *out = (double)h->m / (double)h->m0;
  return PE_OK;
}

/* A list of n float factors, copied into *out (pe__malloc). */
static pe_status read_factor_list(const hf_rope *h, const char *key, int32_t n, float **out) {
  const cJSON *a = pe__json_get(h->dict, key);
  pe_status st = pe__json_need(a != NULL, h->where, key, h->type_name);
  if (st != PE_OK) return st;
  if (!cJSON_IsArray(a))
    return pe__fail(PE_ERR_PARSE, "%s: %s%s must be an array, got %s", FN, h->where, key, pe__json_type(a));
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
                      pe__json_type(e));
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
      if ((st = pe__json_need(h->m != 0, "", "max_position_embeddings", "dynamic scales relative to it")) != PE_OK)
        return st;
      p->original_max_positions = h->m;
      p->seq_len = seq_len;
      return PE_OK;
    case PE_ROPE_SCALING_YARN:
      if ((st = pe__json_need(h->m0 != 0, "", "original_max_position_embeddings", "or max_position_embeddings")) != PE_OK)
        return st;
      p->original_max_positions = h->m0;
      if ((st = factor_or_ratio(h, &p->factor)) != PE_OK) return st;
      if ((st = dict_optional(h, "attention_factor", &p->attention_factor)) != PE_OK) return st;
      if (p->attention_factor == 0.0 && h->attn_default > 0.0) p->attention_factor = h->attn_default;
      if ((st = dict_optional(h, "beta_fast", &p->beta_fast)) != PE_OK) return st;
      if ((st = dict_optional(h, "beta_slow", &p->beta_slow)) != PE_OK) return st;
      if ((st = dict_optional(h, "mscale", &p->mscale)) != PE_OK) return st;
      if ((st = dict_optional(h, "mscale_all_dim", &p->mscale_all_dim)) != PE_OK) return st;
      {
        const cJSON *t = pe__json_get(h->dict, "truncate");
        p->truncate = 1; /* HF default True */
        if (t && cJSON_IsBool(t))
          p->truncate = cJSON_IsTrue(t) ? 1 : 0;
        else if (t && cJSON_IsNumber(t))
          p->truncate = t->valuedouble != 0.0;
        else if (t)
          return pe__fail(PE_ERR_PARSE, "%s: %struncate must be a boolean, got %s", FN, h->where,
                          pe__json_type(t));
      }
      return PE_OK;
    case PE_ROPE_SCALING_LONGROPE:
      if ((st = pe__json_need(h->m0 != 0, "", "original_max_position_embeddings", "or max_position_embeddings")) != PE_OK)
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
      if ((st = pe__json_need(h->m0 != 0, "", "original_max_position_embeddings", "or max_position_embeddings")) != PE_OK)
        return st;
      p->original_max_positions = h->m0;
      if ((st = dict_number(h, "factor", &p->factor)) != PE_OK) return st;
      if ((st = dict_number(h, "low_freq_factor", &p->low_freq_factor)) != PE_OK) return st;
      return dict_number(h, "high_freq_factor", &p->high_freq_factor);
    case PE_ROPE_SCALING_PROPORTIONAL:
      p->factor = 1.0;
      if ((st = pe__json_number(h->dict, h->where, "factor", &v, &found)) != PE_OK) return st;
      if (found) p->factor = v;
      return PE_OK;
  }
  return pe__fail(PE_ERR_UNSUPPORTED, "%s: internal: scaling %d", FN, (int)h->scaling);
}

/* Frequencies HF produces that are not a plain even-rotary_dim cache: an odd
 * d. Computes them with the type's own code and rewrites *p as CUSTOM; *freq
 * owns them. (Gemma-4's proportional layout is PE_ROPE_SCALING_PROPORTIONAL
 * itself: pe_rope_cache_create lays it out on head_dim channels.) */
static pe_status to_custom(const hf_rope *h, pe_rope_params *p, double **freq, double *softmax) {
  pe_status st;
  int32_t rd = h->d + 1; /* NeoX apply rotates 2 * ceil(d/2) channels */
  int32_t n = (h->d + 1) / 2;
  if (h->scaling == PE_ROPE_SCALING_YARN || h->scaling == PE_ROPE_SCALING_LONGROPE)
    return pe__fail(PE_ERR_UNSUPPORTED,
                    "%s: %s with the odd rotary dim %d (head_dim %d x partial_rotary_factor %g) "
                    "fails in transformers too (d//2 entries against ceil(d/2) frequencies)",
                    FN, h->type_name, (int)h->d, (int)h->head_dim, h->prf);
  if (rd > h->head_dim)
    return pe__fail(PE_ERR_UNSUPPORTED, "%s: the odd rotary dim %d equals head_dim %d: HF's cos "
                    "would be wider than the head", FN, (int)h->d, (int)h->head_dim);
  double *f = pe__malloc((size_t)n * sizeof *f);
  if (!f) return pe__fail(PE_ERR_OUT_OF_MEMORY, "%s: cannot allocate %d frequencies", FN, (int)n);
  double attn = 1.0, smax = 1.0;
  st = pe__rope_frequencies(FN, p, h->d, f, &attn, &smax);
  if (st != PE_OK) {
    pe__free(f);
    return st;
  }
  p->scaling = PE_ROPE_SCALING_CUSTOM;
  p->rotary_dim = rd;
  p->inv_freq = f;
  p->attention_factor = attn;
  *freq = f;
  *softmax = smax;
  return PE_OK;
}



/* The cache of one layer type. max_positions < 0 = max_position_embeddings. */
pe_status pe__hf_cache_for(const cJSON *root, const char *model_type, const layer_rope *lr,
                           int64_t max_positions, int64_t seq_len, pe_rope_cache **out) {
  pe_status st;
  float *short_f = NULL, *long_f = NULL;
  double *freq = NULL, softmax = 1.0;
  pe_rope_cache *c = NULL;
  hf_rope h;
  memset(&h, 0, sizeof h);
  h.root = root;
  h.model_type = model_type;
  h.info = pe__model_find(model_type);
  h.dict = lr->force_default ? NULL : lr->dict;
  snprintf(h.where, sizeof h.where, "%s", lr->where);
  h.base_override = lr->base_override;
  h.head_dim_key = lr->head_dim_key;
  h.style_override = lr->style_override;
  h.attn_default = lr->attn_default;
  h.base_forced = lr->base_forced;
  if ((st = read_type(&h)) != PE_OK) return st;
  if ((st = read_geometry(&h)) != PE_OK) return st;
  if ((st = read_lengths(&h)) != PE_OK) return st;

  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = h.head_dim;
  p.rotary_dim = h.d;
  p.style = h.style;
  p.base = h.base;
  if (max_positions < 0) {
    if ((st = pe__json_need(h.m != 0, "", "max_position_embeddings",
                   "max_positions PE_MAX_POSITIONS_FROM_CONFIG asks for it")) != PE_OK)
      return st;
    max_positions = h.m;
  }
  p.max_positions = max_positions;
  /* seq_len 0 = M (HF: seq_len None is M for dynamic; the whole context). */
  if (seq_len == 0) seq_len = h.m;
  if ((st = fill_scaling(&h, seq_len, &p, &short_f, &long_f)) != PE_OK) goto done;
  if ((h.d & 1) && h.scaling != PE_ROPE_SCALING_PROPORTIONAL &&
      (st = to_custom(&h, &p, &freq, &softmax)) != PE_OK)
    goto done;
  if ((st = pe_rope_cache_create(&p, &c)) != PE_OK) goto done;
  if (freq) c->softmax_scale = softmax; /* CUSTOM has none of its own */
  *out = c;
done:
  pe__free(freq);
  pe__free(short_f);
  pe__free(long_f);
  return st;
}

