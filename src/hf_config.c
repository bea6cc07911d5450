/* hf_config.c - pe_rope_cache_create_from_hf_config: read a HuggingFace
 * config.json with cJSON and derive the RoPE parameters exactly as
 * transformers does (modeling_rope_utils.py: rope_config_validation,
 * standardize_rope_params and the _compute_*_parameters functions; v5 plus the
 * legacy keys that v5 still accepts), and pe_model_rope_from_hf_config: the
 * same for every layer of a model whose layers differ (model_rope section at
 * the end of this file).
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
 *   model_type (the table `models` below)          style, and the config class's
 *                                                  defaults for omitted keys
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

#include "rope/cache.h"

/* The entry point named in error sentences: both loaders share the code. */
static _Thread_local const char *hf_fn = "pe_rope_cache_create_from_hf_config";
#define FN hf_fn

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

/* ---- model types ------------------------------------------------------ */

/* Every model_type transformers ships with RoPE that libposenc has checked,
 * with its pairing read from the modeling file and the defaults of its config
 * class for the keys a config.json may omit.
 *
 * Pairing: PE_ROPE_GPTJ where the model rotates (2i, 2i+1): rotate_every_two
 * (GPT-J, CodeGen), rotate_half on x[..., ::2] / x[..., 1::2] with
 * repeat_interleave'd cos/sin (Cohere, Cohere2, GLM, GLM-4, Helium, ERNIE
 * 4.5), complex multiplication of view_as_complex'd pairs (Llama 4),
 * DeepSeek-V2/V3's rope_interleave (default true). PE_ROPE_NEOX where it is
 * rotate_half on the two halves (Llama and everything copied from it).
 *
 * theta: the rope_theta (v5 default_theta) the config class uses when the
 * file has none; 0 = not checked here, and a config of that type without
 * rope_theta is refused rather than given a guessed base. head_dim, heads,
 * hidden, layers, max_pos: the class defaults (0 = none: the key is
 * required, or head_dim is hidden_size / num_attention_heads; kv_heads 0 =
 * the query heads). */
typedef struct model_info {
  const char *type;
  pe_rope_style style;
  double theta;
  int32_t head_dim, heads, kv_heads;
  int64_t hidden, layers, max_pos;
} model_info;

#define G PE_ROPE_GPTJ
#define N PE_ROPE_NEOX
static const model_info models[] = {
    /* interleaved pairs */
    {"gptj", G, 10000.0, 0, 0, 0, 0, 0, 0},        /* GPTJAttention: base 10000 */
    {"codegen", G, 10000.0, 0, 0, 0, 0, 0, 0},     /* CodeGenAttention: base 10000 */
    {"cohere", G, 10000.0, 0, 0, 0, 0, 0, 0},      /* CohereConfig */
    {"cohere2", G, 10000.0, 0, 64, 0, 8192, 40, 8192}, /* Cohere2Config */
    {"glm", G, 10000.0, 0, 0, 0, 0, 0, 0},         /* GlmConfig */
    {"glm4", G, 10000.0, 0, 0, 0, 0, 0, 0},        /* Glm4Config */
    {"helium", G, 0.0, 0, 0, 0, 0, 0, 0},
    {"ernie4_5", G, 0.0, 0, 0, 0, 0, 0, 0},
    {"ernie4_5_moe", G, 0.0, 0, 0, 0, 0, 0, 0},
    {"llama4_text", G, 500000.0, 128, 40, 8, 5120, 48, 131072}, /* Llama4TextConfig */
    {"llama4", G, 500000.0, 128, 40, 8, 5120, 48, 131072},
    {"deepseek_v2", G, 10000.0, 0, 0, 0, 0, 0, 0}, /* DeepseekV2Config */
    {"deepseek_v3", G, 10000.0, 0, 0, 0, 0, 0, 0}, /* DeepseekV3Config */
    /* Kimi-K2 / K2.5's text model: DeepSeek-V3's config class and modeling
     * code (its config.json's auto_map), model_type renamed. */
    {"kimi_k2", G, 10000.0, 0, 0, 0, 0, 0, 0},
    /* MLA of DeepseekV32Attention / GlmMoeDsaAttention (rope_interleave) and
     * Glm4MoeLiteAttention (DeepseekV3Attention); DeepSeek-V4's attention.
     * V3.2, GLM-5 and V4 also rotate a sparse-attention indexer (and V4 a
     * compressor): see unexpressible() below. */
    {"deepseek_v32", G, 10000.0, 0, 0, 0, 0, 0, 0}, /* DeepseekV32Config */
    {"glm_moe_dsa", G, 0.0, 0, 0, 0, 0, 0, 0},
    {"glm4_moe_lite", G, 0.0, 0, 0, 0, 0, 0, 0},
    {"deepseek_v4", G, 10000.0, 0, 0, 0, 0, 0, 0}, /* DeepseekV4Config */
    /* halves */
    {"llama", N, 10000.0, 0, 0, 0, 0, 0, 0},       /* LlamaConfig */
    {"mistral", N, 10000.0, 0, 0, 0, 0, 0, 0},     /* MistralConfig */
    {"mixtral", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"qwen2", N, 10000.0, 0, 0, 0, 0, 0, 0},       /* Qwen2Config */
    {"qwen2_moe", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"qwen3", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"qwen3_moe", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"qwen3_next", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"qwen3_5", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"qwen3_5_text", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"qwen3_5_moe", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"qwen3_5_moe_text", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"qwen2_vl", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"qwen2_vl_text", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"qwen2_5_vl", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"qwen2_5_vl_text", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"qwen3_vl", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"qwen3_vl_text", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"gemma", N, 10000.0, 0, 0, 0, 0, 0, 0},       /* GemmaConfig */
    {"gemma2", N, 10000.0, 0, 0, 0, 0, 0, 0},      /* Gemma2Config */
    {"gemma3_text", N, 1000000.0, 256, 8, 4, 2304, 26, 131072}, /* Gemma3TextConfig */
    {"gemma3", N, 1000000.0, 256, 8, 4, 2304, 26, 131072},
    {"gemma3n_text", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"gemma3n", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"gemma4_text", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"gemma4", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"gpt_neox", N, 10000.0, 0, 0, 0, 0, 0, 0},    /* GPTNeoXConfig: rotary_emb_base */
    {"phi", N, 10000.0, 0, 0, 0, 0, 0, 0},         /* PhiConfig */
    {"phi3", N, 10000.0, 0, 0, 0, 0, 0, 0},        /* Phi3Config */
    {"phimoe", N, 1000000.0, 0, 0, 0, 0, 0, 0},    /* PhimoeConfig default_theta */
    {"stablelm", N, 10000.0, 0, 0, 0, 0, 0, 0},    /* StableLmConfig */
    {"persimmon", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"falcon", N, 10000.0, 0, 0, 0, 0, 0, 0},      /* FalconConfig */
    {"starcoder2", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"olmo", N, 10000.0, 0, 0, 0, 0, 0, 0},        /* OlmoConfig */
    {"olmo2", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"olmo3", N, 500000.0, 0, 0, 0, 0, 0, 0},      /* Olmo3Config default_theta */
    {"granite", N, 10000.0, 0, 0, 0, 0, 0, 0},     /* GraniteConfig */
    {"smollm3", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"exaone4", N, 10000.0, 0, 32, 32, 4096, 32, 2048}, /* Exaone4Config */
    {"glm4_moe", N, 0.0, 0, 0, 0, 0, 0, 0},        /* Glm4MoeAttention: rotate_half, partial */
    /* MiniMaxM2Config: default_theta 5e6, rotary_dim (default head_dim / 2)
     * becomes partial_rotary_factor whatever the file says. */
    {"minimax_m2", N, 5000000.0, 128, 48, 8, 3072, 62, 196608},
    /* MiMo-V2-Flash (transformers mimo_v2_flash; the Hub files say mimo_v2):
     * hybrid_layer_pattern, swa_rope_theta, partial_rotary_factor. */
    {"mimo_v2_flash", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"mimo_v2", N, 0.0, 0, 0, 0, 0, 0, 0},
    /* Attention without any positional encoding (the layers get NULL; see
     * attention_has_no_rope): Nemotron-H, Jamba. */
    {"nemotron_h", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"jamba", N, 0.0, 0, 0, 0, 0, 0, 0},
    {"gpt_oss", N, 150000.0, 64, 64, 8, 2880, 36, 131072}, /* GptOssConfig */
    {"modernbert", N, 0.0, 0, 12, 0, 768, 22, 8192}, /* ModernBertConfig (thetas per layer type) */
};
#undef G
#undef N

static const model_info *find_model(const char *type) {
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    if (strcmp(models[i].type, type) == 0) return &models[i];
  return NULL;
}

/* Everything read from the file, before it becomes a pe_rope_params. */
typedef struct hf_rope {
  const cJSON *root, *dict;
  char where[96];             /* "rope_parameters." or "rope_scaling." (or a layer type's) */
  const char *model_type;
  const model_info *info;     /* NULL: a model type the table does not know */
  const char *type_name;
  pe_rope_scaling scaling;
  double base, prf;
  int32_t head_dim, d;        /* d may be odd (see the header comment) */
  int64_t m, m0;              /* 0 = absent */
  pe_rope_style style;
  /* Set by the per-layer loader for one layer type: */
  double base_override;       /* > 0: the base unless the dict has rope_theta */
  const char *head_dim_key;   /* NULL = "head_dim" (Gemma-4 global layers: global_head_dim) */
  int force_default;          /* 1: no scaling dict (Gemma 3 local layers) */
} hf_rope;

static int is_model(const hf_rope *h, const char *const *names) {
  for (; *names; names++)
    if (strcmp(h->model_type, *names) == 0) return 1;
  return 0;
}

/* A v5 per-layer-type dict ({"full_attention": {...}, "sliding_attention":
 * {...}}) rather than one rope's parameters. */
static int is_per_layer_type(const cJSON *dict) {
  return dict && !get(dict, "rope_type") && !get(dict, "type") && !get(dict, "rope_theta") &&
         dict->child && cJSON_IsObject(dict->child);
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
                  "linear, dynamic, yarn, longrope/su, llama3, proportional, mrope)",
                  FN, h->where, key, t->valuestring);
}

static pe_status read_geometry(hf_rope *h) {
  pe_status st;
  int found;
  int64_t v = 0;
  const model_info *mi = h->info;
  const char *hdk = h->head_dim_key ? h->head_dim_key : "head_dim";
  /* DeepSeek: the rotated part of a head is qk_rope_head_dim (its config
   * class sets head_dim to it). */
  if ((st = get_count(h->root, "", "qk_rope_head_dim", &v, &found)) != PE_OK) return st;
  if (!found) {
    /* HF: `config.head_dim or hidden // heads`, so head_dim 0 falls back too. */
    double hd = 0.0;
    if ((st = get_number(h->root, "", hdk, &hd, &found)) != PE_OK) return st;
    if (found && hd == 0.0) found = 0;
    if (found && (st = get_count(h->root, "", hdk, &v, &found)) != PE_OK) return st;
    if (!found && h->head_dim_key && (st = get_count(h->root, "", "head_dim", &v, &found)) != PE_OK)
      return st;
    if (!found && mi && mi->head_dim > 0) v = mi->head_dim, found = 1;
  }
  if (!found) {
    /* head_dim = hidden_size // num_attention_heads (GPT-J: n_embd, n_head),
     * with the config class's defaults for an omitted key. */
    int64_t hidden = 0, heads = 0;
    const char *hk = "hidden_size", *nk = "num_attention_heads";
    if ((st = get_count(h->root, "", hk, &hidden, &found)) != PE_OK) return st;
    if (!found && (st = get_count(h->root, "", hk = "n_embd", &hidden, &found)) != PE_OK) return st;
    if (!found && mi && mi->hidden > 0) hidden = mi->hidden, found = 1;
    if ((st = need(found, "", "hidden_size", "no head_dim either")) != PE_OK) return st;
    if ((st = get_count(h->root, "", nk, &heads, &found)) != PE_OK) return st;
    if (!found && (st = get_count(h->root, "", nk = "n_head", &heads, &found)) != PE_OK) return st;
    if (!found && mi && mi->heads > 0) heads = mi->heads, found = 1;
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
                                            "glm4", "glm4_moe", "glm4_moe_lite", "qwen3_next",
                                            "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                                            "qwen3_5_moe_text", "mimo_v2_flash", "mimo_v2", NULL};
  static const char *const gptj_family[] = {"gptj", "codegen", NULL};
  int64_t rd = h->head_dim;
  if (is_model(h, gptj_family)) {
    /* GPT-J and CodeGen: rotary_dim channels (null = all). */
    if ((st = get_count(h->root, "", "rotary_dim", &rd, &found)) != PE_OK) return st;
    if (!found) rd = h->head_dim;
  } else if (strcmp(h->model_type, "minimax_m2") == 0) {
    /* MiniMaxM2Config.convert_rope_params_to_dict: partial_rotary_factor =
     * rotary_dim (default head_dim // 2) / head_dim, overwriting any
     * partial_rotary_factor of the file; the rotary embedding then takes
     * int(head_dim * that factor). */
    int64_t r = h->head_dim / 2;
    if ((st = get_count(h->root, "", "rotary_dim", &r, &found)) != PE_OK) return st;
    h->prf = (double)r / (double)h->head_dim;
    rd = (int64_t)(h->head_dim * h->prf);
  } else if (!h->info && get(h->root, "rotary_dim")) {
    /* A model type libposenc does not know (the pairing is a guess too):
     * a rotary_dim key is taken as the rotated width. */
    if ((st = get_count(h->root, "", "rotary_dim", &rd, &found)) != PE_OK) return st;
  } else if (h->scaling == PE_ROPE_SCALING_PROPORTIONAL) {
    /* HF: rope_angles = int(prf * head_dim // 2) rotate, on head_dim pairs. */
    rd = 2 * (int64_t)floor(h->prf * h->head_dim / 2.0);
  } else if (h->scaling != PE_ROPE_SCALING_NONE || is_model(h, applies_prf) || !h->info) {
    /* Python int(): truncation. An unknown model type: a partial factor in
     * the file is taken to apply (the classes that ignore it are known). */
    rd = (int64_t)(h->head_dim * h->prf);
  }
  if (rd < 2 || rd > h->head_dim)
    return pe__fail(PE_ERR_PARSE,
                    "%s: the rotary dim %" PRId64 " (head_dim %d, partial rotary %g) is outside [2, "
                    "head_dim]",
                    FN, rd, (int)h->head_dim, h->prf);
  h->d = (int32_t)rd;

  h->style = mi ? mi->style : PE_ROPE_NEOX;
  /* DeepseekV3Attention and the MLA classes built on it: rope_interleave
   * (default true) picks the interleaved apply; false is rotate_half. */
  static const char *const deepseek[] = {"deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32",
                                         "glm_moe_dsa", "glm4_moe_lite", NULL};
  if (is_model(h, deepseek)) {
    const cJSON *ri = get(h->root, "rope_interleave");
    h->style = (ri && cJSON_IsFalse(ri)) ? PE_ROPE_NEOX : PE_ROPE_GPTJ;
  }
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
  if ((st = get_number(h->dict, h->where, "rope_theta", &theta, &found)) != PE_OK) return st;
  if (!found && h->base_override > 0.0) theta = h->base_override, found = 1;
  if (!found && (st = get_number(h->root, "", "rope_theta", &theta, &found)) != PE_OK) return st;
  if (!found && (st = get_number(h->root, "", "rotary_emb_base", &theta, &found)) != PE_OK) return st;
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
  if ((st = get_count(h->root, "", "max_position_embeddings", &h->m, &found)) != PE_OK) return st;
  if (!found && (st = get_count(h->root, "", "n_positions", &h->m, &found)) != PE_OK) return st;
  /* An omitted max_position_embeddings takes the config class's default
   * (Gemma3TextConfig: 131072), as transformers does. */
  if (!found && h->info && h->info->max_pos) h->m = h->info->max_pos;
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

/* Parse len bytes of config.json into *root (an object). */
static pe_status parse_config(const char *json, size_t len, cJSON **root) {
  const char *end = NULL;
  cJSON *r = cJSON_ParseWithLengthOpts(json, len, &end, 0);
  if (!r) {
    size_t at = (end && end >= json && end <= json + len) ? (size_t)(end - json) : 0;
    /* cJSON cannot tell an allocation failure from bad text: both are NULL. */
    return pe__fail(PE_ERR_PARSE, "%s: config.json is not valid JSON (error near byte %zu of %zu)",
                    FN, at, len);
  }
  /* cJSON stops after the first value; anything but whitespace after it is
   * not a config.json either. */
  for (const char *q = end; q && q < json + len; q++) {
    if (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r' || *q == '\0') continue;
    cJSON_Delete(r);
    return pe__fail(PE_ERR_PARSE, "%s: config.json has trailing characters at byte %zu of %zu", FN,
                    (size_t)(q - json), len);
  }
  if (!cJSON_IsObject(r)) {
    pe_status st = pe__fail(PE_ERR_PARSE, "%s: config.json must be a JSON object, got %s", FN,
                            json_type(r));
    cJSON_Delete(r);
    return st;
  }
  *root = r;
  return PE_OK;
}

/* The object holding the language model's keys: the top level, or
 * text_config (vision-language models: Gemma 3 4b+, Llama 4, Qwen3-VL) when
 * the top level has none of them. *model_type: the text model's, else the
 * top level's, else "". */
static const cJSON *text_root(const cJSON *root, const char **model_type) {
  const cJSON *r = root;
  const cJSON *tc = get(root, "text_config");
  if (tc && cJSON_IsObject(tc) && !get(root, "rope_parameters") && !get(root, "rope_scaling") &&
      !get(root, "rope_theta") && !get(root, "hidden_size") && !get(root, "head_dim"))
    r = tc;
  const cJSON *mt = get(r, "model_type");
  if (!(mt && cJSON_IsString(mt))) mt = get(root, "model_type");
  *model_type = (mt && cJSON_IsString(mt)) ? mt->valuestring : "";
  return r;
}

/* One layer type's rope, as the per-layer loader resolved it. */
typedef struct layer_rope {
  int nope;                 /* no RoPE in this layer */
  int attention;            /* a softmax attention layer (not linear attention, mamba, conv) */
  const cJSON *dict;        /* its scaling dict, or NULL */
  char where[96];           /* the dict's name in messages, with a trailing '.' */
  double base_override;     /* see hf_rope */
  const char *head_dim_key;
  int force_default;
  int tuned;                /* Llama 4 attn_temperature_tuning on this NoPE layer */
} layer_rope;

/* The cache of one layer type. max_positions < 0 = max_position_embeddings. */
static pe_status cache_for(const cJSON *root, const char *model_type, const layer_rope *lr,
                           int64_t max_positions, int64_t seq_len, pe_rope_cache **out) {
  pe_status st;
  float *short_f = NULL, *long_f = NULL;
  double *freq = NULL, softmax = 1.0;
  pe_rope_cache *c = NULL;
  hf_rope h;
  memset(&h, 0, sizeof h);
  h.root = root;
  h.model_type = model_type;
  h.info = find_model(model_type);
  h.dict = lr->force_default ? NULL : lr->dict;
  snprintf(h.where, sizeof h.where, "%s", lr->where);
  h.base_override = lr->base_override;
  h.head_dim_key = lr->head_dim_key;
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
    if ((st = need(h.m != 0, "", "max_position_embeddings",
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

/* ======================================================================== */
/* RoPE per layer                                                           */
/* ======================================================================== */

/* More layers than any published model (the largest have ~128). */
#define PE_MAX_LAYERS 4096

struct pe_model_rope {
  int32_t n_layers, n_caches;
  pe_rope_cache **caches;    /* the distinct caches */
  int32_t *layer_cache;      /* [n_layers]: index into caches, -1 = no RoPE */
  unsigned char *tuned;      /* [n_layers]: Llama 4 temperature tuning */
  int32_t heads, kv_heads;   /* 0 = not in the config */
  int pairing_guessed;
  double floor_scale, attn_scale;
};

static void model_free(pe_model_rope *m) {
  if (!m) return;
  for (int32_t i = 0; m->caches && i < m->n_caches; i++) pe_rope_cache_destroy(m->caches[i]);
  pe__free(m->caches);
  pe__free(m->layer_cache);
  pe__free(m->tuned);
  pe__free(m);
}

/* A boolean-ish key (true/false or a number: Llama-4-Scout ships
 * "attn_temperature_tuning": 4, which Python treats as true). */
static int get_flag(const cJSON *obj, const char *key, int dflt) {
  const cJSON *v = get(obj, key);
  if (!v) return dflt;
  if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
  if (cJSON_IsNumber(v)) return v->valuedouble != 0.0;
  return dflt;
}

static int type_is(const char *model_type, const char *const *names) {
  for (; *names; names++)
    if (strcmp(model_type, *names) == 0) return 1;
  return 0;
}

/* An integer pattern key (the first of the names present), or dflt. */
static pe_status pattern_key(const cJSON *root, const char *const *names, int64_t dflt,
                             int64_t *out, const char **which) {
  for (; *names; names++) {
    int found;
    pe_status st = get_count(root, "", *names, out, &found);
    if (st != PE_OK) return st;
    if (found) {
      *which = *names;
      return PE_OK;
    }
  }
  *out = dflt;
  *which = NULL;
  return PE_OK;
}

/* A per-layer list of 0/1 (key) as layer types: 0 -> zero, 1 -> one. */
static pe_status int_pattern(const cJSON *root, const char *key, int32_t n, const char *zero,
                             const char *one, const char **types) {
  const cJSON *a = get(root, key);
  if (!cJSON_IsArray(a))
    return pe__fail(PE_ERR_PARSE, "%s: %s must be an array, got %s", FN, key, json_type(a));
  if (cJSON_GetArraySize(a) != n)
    return pe__fail(PE_ERR_PARSE, "%s: %s has %d entries, num_hidden_layers is %d", FN, key,
                    cJSON_GetArraySize(a), (int)n);
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, a) {
    if (!cJSON_IsNumber(e) || (e->valuedouble != 0.0 && e->valuedouble != 1.0))
      return pe__fail(PE_ERR_PARSE, "%s: %s[%d] must be 0 or 1", FN, key, i);
    types[i++] = e->valuedouble == 0.0 ? zero : one;
  }
  return PE_OK;
}

/* The layer type of every layer (HF layer_types, or what the config class
 * derives when the file has none). types[i] points into the JSON or to a
 * literal. */
static pe_status layer_types(const cJSON *root, const char *mt, int32_t n, const char **types) {
  static const char FULL[] = "full_attention", SLIDING[] = "sliding_attention",
                    LINEAR[] = "linear_attention";
  const cJSON *lt = get(root, "layer_types");
  if (lt) {
    if (!cJSON_IsArray(lt))
      return pe__fail(PE_ERR_PARSE, "%s: layer_types must be an array, got %s", FN, json_type(lt));
    int k = cJSON_GetArraySize(lt);
    if (k != n)
      return pe__fail(PE_ERR_PARSE, "%s: layer_types has %d entries, num_hidden_layers is %d", FN, k,
                      (int)n);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, lt) {
      if (!cJSON_IsString(e))
        return pe__fail(PE_ERR_PARSE, "%s: layer_types[%d] must be a string, got %s", FN, i,
                        json_type(e));
      types[i++] = e->valuestring;
    }
    return PE_OK;
  }
  static const char *const gemma3[] = {"gemma3_text", "gemma3", "gemma3n_text", "gemma3n", NULL};
  static const char *const qwen_hybrid[] = {"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                                            "qwen3_5_moe_text", NULL};
  pe_status st;
  int64_t every = 0;
  const char *which = NULL;
  for (int32_t i = 0; i < n; i++) types[i] = FULL;
  if (type_is(mt, gemma3) || strcmp(mt, "cohere2") == 0) {
    /* Gemma3TextConfig: sliding_window_pattern (6), v5 _sliding_window_pattern;
     * Cohere2Config: sliding_window_pattern (4). Sliding iff (i+1) % p != 0. */
    static const char *const keys[] = {"sliding_window_pattern", "_sliding_window_pattern", NULL};
    if ((st = pattern_key(root, keys, mt[0] == 'g' ? 6 : 4, &every, &which)) != PE_OK) return st;
    for (int32_t i = 0; i < n; i++) types[i] = (i + 1) % every ? SLIDING : FULL;
  } else if (strcmp(mt, "exaone4") == 0) {
    /* Exaone4Config: an int pattern as above (4), or a string of L and G
     * repeated, the last layer always global. */
    const cJSON *sp = get(root, "sliding_window_pattern");
    if (sp && cJSON_IsString(sp) && sp->valuestring[0]) {
      size_t k = strlen(sp->valuestring);
      for (int32_t i = 0; i < n; i++) {
        char ch = sp->valuestring[(size_t)i % k];
        if (ch != 'L' && ch != 'G')
          return pe__fail(PE_ERR_PARSE, "%s: sliding_window_pattern \"%s\" must be made of L and G",
                          FN, sp->valuestring);
        types[i] = ch == 'L' && i != n - 1 ? SLIDING : FULL;
      }
    } else {
      static const char *const keys[] = {"sliding_window_pattern", NULL};
      if ((st = pattern_key(root, keys, 4, &every, &which)) != PE_OK) return st;
      for (int32_t i = 0; i < n; i++) types[i] = (i + 1) % every ? SLIDING : FULL;
    }
  } else if (strcmp(mt, "modernbert") == 0) {
    /* ModernBertConfig: global (full) iff i % global_attn_every_n_layers == 0 (3). */
    static const char *const keys[] = {"global_attn_every_n_layers", NULL};
    if ((st = pattern_key(root, keys, 3, &every, &which)) != PE_OK) return st;
    for (int32_t i = 0; i < n; i++) types[i] = i % every ? SLIDING : FULL;
  } else if (get(root, "hybrid_layer_pattern")) {
    /* MiMo-V2-Flash: 0 = full attention, 1 = sliding window (transformers'
     * MiMoV2FlashConfig turns it into layer_types the same way). */
    static const char *const mimo[] = {"mimo_v2_flash", "mimo_v2", NULL};
    if (!type_is(mt, mimo))
      return pe__fail(PE_ERR_UNSUPPORTED,
                      "%s: hybrid_layer_pattern of model_type \"%s\" is not one libposenc has "
                      "checked (it reads MiMo-V2's: 0 full, 1 sliding)", FN, mt);
    return int_pattern(root, "hybrid_layer_pattern", n, FULL, SLIDING, types);
  } else if (get(root, "attn_type_list")) {
    /* MiniMax-01 (MiniMaxConfig): 0 = lightning (linear) attention, 1 = softmax attention. */
    return int_pattern(root, "attn_type_list", n, LINEAR, FULL, types);
  } else if (type_is(mt, qwen_hybrid)) {
    /* Qwen3NextConfig: full attention iff (i+1) % full_attention_interval == 0 (4). */
    static const char *const keys[] = {"full_attention_interval", NULL};
    if ((st = pattern_key(root, keys, 4, &every, &which)) != PE_OK) return st;
    for (int32_t i = 0; i < n; i++) types[i] = (i + 1) % every ? LINEAR : FULL;
  }
  return PE_OK;
}

/* Layer types whose layers are not softmax attention and rotate nothing. */
static int no_attention(const char *type) {
  static const char *const t[] = {"linear_attention", "mamba", "conv", "linear", NULL};
  return type_is(type, t);
}

/* Resolve one layer: its dict, base, NoPE. */
static pe_status resolve_layer(const cJSON *root, const char *mt, const char *type, int32_t i,
                               const cJSON *no_rope, layer_rope *lr) {
  pe_status st;
  int found;
  memset(lr, 0, sizeof *lr);
  lr->attention = !no_attention(type);
  if (!lr->attention) {
    lr->nope = 1;
    return PE_OK;
  }
  static const char *const gemma3[] = {"gemma3_text", "gemma3", "gemma3n_text", "gemma3n", NULL};
  static const char *const gemma4[] = {"gemma4_text", "gemma4", NULL};
  int full = strcmp(type, "full_attention") == 0;
  /* NoPE layers. */
  if (strcmp(mt, "cohere2") == 0 && full) lr->nope = 1; /* Cohere2Attention: rope iff sliding */
  if (strcmp(mt, "exaone4") == 0 && full) {
    /* Exaone4Attention: `if self.sliding_window is None or self.is_sliding`;
     * Exaone4Config's sliding_window defaults to 4096, null turns it off. */
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
    if (!(sw && cJSON_IsNull(sw))) lr->nope = 1;
  }
  if (no_rope) {
    /* Llama 4, SmolLM3: no_rope_layers[i] == 1 means the layer HAS rope. */
    const cJSON *e = cJSON_GetArrayItem(no_rope, i);
    if (!e || !cJSON_IsNumber(e))
      return pe__fail(PE_ERR_PARSE, "%s: no_rope_layers[%d] must be 0 or 1", FN, (int)i);
    if (e->valuedouble == 0.0) lr->nope = 1;
  }
  if (lr->nope) return PE_OK;

  /* The scaling dict. */
  const cJSON *rp = get(root, "rope_parameters");
  const char *key = rp ? "rope_parameters" : "rope_scaling";
  const cJSON *dict = rp ? rp : get(root, "rope_scaling");
  if (dict && !cJSON_IsObject(dict))
    return pe__fail(PE_ERR_PARSE, "%s: %s must be an object, got %s", FN, key, json_type(dict));
  if (is_per_layer_type(dict)) {
    const cJSON *sub = get(dict, type);
    if (!sub)
      return pe__fail(PE_ERR_PARSE, "%s: config.json lacks %s.%s (layer %d is a %s layer)", FN, key,
                      type, (int)i, type);
    if (!cJSON_IsObject(sub))
      return pe__fail(PE_ERR_PARSE, "%s: %s.%s must be an object, got %s", FN, key, type,
                      json_type(sub));
    lr->dict = sub;
    snprintf(lr->where, sizeof lr->where, "%s.%s.", key, type);
  } else {
    lr->dict = dict;
    snprintf(lr->where, sizeof lr->where, "%s.", key);
    if (type_is(mt, gemma3) && !full) {
      /* Gemma 3 / 3n local layers: default rope at rope_local_base_freq;
       * rope_scaling is for the global layers only. */
      double b = 10000.0; /* Gemma3TextConfig rope_local_base_freq */
      if ((st = get_number(root, "", "rope_local_base_freq", &b, &found)) != PE_OK) return st;
      lr->base_override = b;
      lr->force_default = 1;
    } else if (!full && get(root, "swa_rope_theta")) {
      /* MiMo-V2-Flash: the sliding layers rotate at swa_rope_theta, default
       * rope (MiMoV2FlashConfig's sliding_attention parameters). */
      double b = 0.0;
      if ((st = get_number(root, "", "swa_rope_theta", &b, &found)) != PE_OK) return st;
      lr->base_override = b;
      lr->force_default = 1;
    } else if (strcmp(mt, "modernbert") == 0) {
      /* ModernBertConfig: rope_scaling for both, the base per layer type. */
      double b = full ? 160000.0 : 10000.0;
      if ((st = get_number(root, "", full ? "global_rope_theta" : "local_rope_theta", &b, &found)) !=
          PE_OK)
        return st;
      lr->base_override = b;
    }
  }
  if (type_is(mt, gemma4) && full && get(root, "global_head_dim")) lr->head_dim_key = "global_head_dim";
  return PE_OK;
}

static int same_layer_spec(const layer_rope *a, const layer_rope *b) {
  return a->dict == b->dict && a->base_override == b->base_override &&
         a->force_default == b->force_default && a->head_dim_key == b->head_dim_key &&
         strcmp(a->where, b->where) == 0;
}

/* Two caches that rotate identically and report the same parameters. */
static int same_cache(const pe_rope_cache *a, const pe_rope_cache *b) {
  const pe_rope_params *p = &a->p, *q = &b->p;
  if (p->head_dim != q->head_dim || p->rotary_dim != q->rotary_dim || p->style != q->style ||
      p->base != q->base || p->max_positions != q->max_positions || p->scaling != q->scaling ||
      p->factor != q->factor || p->original_max_positions != q->original_max_positions ||
      p->seq_len != q->seq_len || p->attention_factor != q->attention_factor ||
      p->beta_fast != q->beta_fast || p->beta_slow != q->beta_slow || p->mscale != q->mscale ||
      p->mscale_all_dim != q->mscale_all_dim || p->truncate != q->truncate ||
      p->low_freq_factor != q->low_freq_factor || p->high_freq_factor != q->high_freq_factor ||
      a->attention_factor != b->attention_factor || a->softmax_scale != b->softmax_scale ||
      a->half != b->half)
    return 0;
  if (memcmp(a->inv_freq, b->inv_freq, (size_t)a->half * sizeof(double)) != 0) return 0;
  if ((a->short_factor == NULL) != (b->short_factor == NULL)) return 0;
  if (a->short_factor && (memcmp(a->short_factor, b->short_factor, (size_t)a->half * sizeof(float)) ||
                          memcmp(a->long_factor, b->long_factor, (size_t)a->half * sizeof(float))))
    return 0;
  return 1;
}

/* Architectures whose attention applies no positional encoding although
 * their config may carry rope_theta: every layer is NULL. */
static int attention_has_no_rope(const cJSON *root, const char *mt) {
  /* NemotronHAttention, JambaAttention: no rotary embedding at all. */
  static const char *const none[] = {"nemotron_h", "jamba", NULL};
  if (type_is(mt, none)) return 1;
  /* GraniteMoeHybridModel builds its rotary embedding only for
   * position_embedding_type "rope" (the config class's default is None;
   * Granite-4.0-H ships "nope"). */
  if (strcmp(mt, "granitemoehybrid") == 0) {
    const cJSON *pe = get(root, "position_embedding_type");
    return !(pe && cJSON_IsString(pe) && strcmp(pe->valuestring, "rope") == 0);
  }
  /* Kimi-Linear's MLA layers: mla_use_nope. */
  const cJSON *nope = get(root, "mla_use_nope");
  return nope && cJSON_IsTrue(nope);
}

/* A config whose layers rotate something this loader cannot describe: a
 * second rotation per layer (the sparse-attention indexer of DeepSeek-V3.2
 * and GLM-5, DeepSeek-V4's compressor). Refused with the key, so an engine
 * never applies the attention's cache to the other rotation. */
static pe_status unexpressible(const cJSON *root, const char *mt) {
  static const char *const indexer_keys[] = {"index_n_heads", "index_head_dim", "index_topk", NULL};
  static const char *const v4_keys[] = {"compress_ratios", "compress_rope_theta", "compress_rates",
                                        "compress_rope_parameters", NULL};
  const char *v4 = strcmp(mt, "deepseek_v4") == 0 ? "model_type" : NULL;
  for (const char *const *k = v4_keys; *k && !v4; k++)
    if (get(root, *k)) v4 = *k;
  if (v4)
    return pe__fail(PE_ERR_UNSUPPORTED,
                    "%s: model_type \"%s\" (%s): DeepSeek-V4's layers rotate a compressor beside "
                    "the attention (GPT-J pairs on the last 64 channels of a 512-channel head, "
                    "YaRN at compress_rope_theta on the compressed layers) and de-rotate the "
                    "attention output, which this loader cannot describe yet", FN, mt, v4);
  for (const char *const *k = indexer_keys; *k; k++)
    if (get(root, *k))
      return pe__fail(PE_ERR_UNSUPPORTED,
                      "%s: model_type \"%s\" has %s: its sparse-attention indexer rotates a "
                      "second slice per layer (the first qk_rope_head_dim channels of "
                      "index_head_dim, paired as indexer_rope_interleave says) that this loader "
                      "cannot describe yet; the attention's cache must not be used for it", FN, mt,
                      *k);
  static const char *const dsa[] = {"deepseek_v32", "glm_moe_dsa", NULL};
  if (type_is(mt, dsa))
    return pe__fail(PE_ERR_UNSUPPORTED,
                    "%s: model_type \"%s\" rotates a sparse-attention indexer (index_head_dim, "
                    "default 128) beside its attention, which this loader cannot describe yet",
                    FN, mt);
  return PE_OK;
}

/* Build the model. single: called for pe_rope_cache_create_from_hf_config
 * (a missing num_hidden_layers is then one layer). */
static pe_status model_build(const char *json, size_t len, int64_t max_positions, int64_t seq_len,
                             int single, pe_model_rope **out) {
  pe_status st;
  cJSON *root = NULL;
  pe_model_rope *m = NULL;
  const char **types = NULL;
  layer_rope *specs = NULL;
  if ((st = parse_config(json, len, &root)) != PE_OK) return st;
  const char *mt;
  const cJSON *tr = text_root(root, &mt);
  const model_info *mi = find_model(mt);
  int found;
  int64_t n = 0;
  if ((st = unexpressible(tr, mt)) != PE_OK) goto done;
  int no_pe = attention_has_no_rope(tr, mt);
  if ((st = get_count(tr, "", "num_hidden_layers", &n, &found)) != PE_OK) goto done;
  if (!found && (st = get_count(tr, "", "n_layer", &n, &found)) != PE_OK) goto done;
  if (!found && (st = get_count(tr, "", "num_layers", &n, &found)) != PE_OK) goto done;
  if (!found && mi && mi->layers > 0) n = mi->layers, found = 1;
  if (!found && single) n = 1, found = 1;
  if ((st = need(found, "", "num_hidden_layers", "the number of layers")) != PE_OK) goto done;
  if (n > PE_MAX_LAYERS) {
    st = pe__fail(PE_ERR_PARSE, "%s: num_hidden_layers %" PRId64 " is more than %d", FN, n,
                  PE_MAX_LAYERS);
    goto done;
  }
  /* Llama 4 / SmolLM3: no_rope_layers (empty = every no_rope_layer_interval-th layer NoPE). */
  const cJSON *no_rope = get(tr, "no_rope_layers");
  static const char *const nope_interval[] = {"llama4_text", "llama4", "smollm3", NULL};
  int build_no_rope = 0;
  int64_t interval = 4;
  if (no_rope && (!cJSON_IsArray(no_rope))) {
    st = pe__fail(PE_ERR_PARSE, "%s: no_rope_layers must be an array, got %s", FN, json_type(no_rope));
    goto done;
  }
  if (no_rope && cJSON_GetArraySize(no_rope) == 0) no_rope = NULL;
  if (no_rope && cJSON_GetArraySize(no_rope) < n) {
    st = pe__fail(PE_ERR_PARSE, "%s: no_rope_layers has %d entries, num_hidden_layers is %d", FN,
                  cJSON_GetArraySize(no_rope), (int)n);
    goto done;
  }
  if (!no_rope && type_is(mt, nope_interval)) {
    build_no_rope = 1;
    if ((st = get_count(tr, "", "no_rope_layer_interval", &interval, &found)) != PE_OK) goto done;
    if (!found) interval = 4;
  }

  m = pe__malloc(sizeof *m);
  types = pe__malloc((size_t)n * sizeof *types);
  specs = pe__malloc((size_t)n * sizeof *specs);
  if (m) memset(m, 0, sizeof *m);
  if (m) m->caches = pe__malloc((size_t)n * sizeof *m->caches);
  if (m) m->layer_cache = pe__malloc((size_t)n * sizeof *m->layer_cache);
  if (m) m->tuned = pe__malloc((size_t)n);
  if (!m || !types || !specs || !m->caches || !m->layer_cache || !m->tuned) {
    st = pe__fail(PE_ERR_OUT_OF_MEMORY, "%s: cannot allocate the model of %d layers", FN, (int)n);
    goto done;
  }
  m->n_layers = (int32_t)n;
  m->pairing_guessed = mi == NULL;
  int64_t v;
  if ((st = get_count(tr, "", "num_attention_heads", &v, &found)) != PE_OK) goto done;
  if (!found && (st = get_count(tr, "", "n_head", &v, &found)) != PE_OK) goto done;
  if (!found && mi && mi->heads > 0) v = mi->heads, found = 1;
  m->heads = found && v <= INT32_MAX ? (int32_t)v : 0;
  if ((st = get_count(tr, "", "num_key_value_heads", &v, &found)) != PE_OK) goto done;
  if (!found && mi && mi->kv_heads > 0) v = mi->kv_heads, found = 1;
  m->kv_heads = found && v <= INT32_MAX ? (int32_t)v : m->heads;
  /* Llama 4: attn_temperature_tuning (Llama4TextConfig default true), floor_scale 8192, attn_scale 0.1. */
  int tuning = type_is(mt, nope_interval) && strncmp(mt, "llama4", 6) == 0 &&
               get_flag(tr, "attn_temperature_tuning", 1);
  m->floor_scale = 8192.0;
  m->attn_scale = 0.1;
  if (tuning) {
    if ((st = get_number(tr, "", "floor_scale", &m->floor_scale, &found)) != PE_OK) goto done;
    if (!found) m->floor_scale = 8192.0;
    if ((st = get_number(tr, "", "attn_scale", &m->attn_scale, &found)) != PE_OK) goto done;
    if (!found) m->attn_scale = 0.1;
    if (!(m->floor_scale > 0.0)) {
      st = pe__fail(PE_ERR_PARSE, "%s: floor_scale %g must be > 0", FN, m->floor_scale);
      goto done;
    }
  }
  if ((st = layer_types(tr, mt, (int32_t)n, types)) != PE_OK) goto done;
  for (int32_t i = 0; i < (int32_t)n; i++) {
    const cJSON *nr = no_rope;
    if ((st = resolve_layer(tr, mt, types[i], i, nr, &specs[i])) != PE_OK) goto done;
    if (no_pe) specs[i].nope = 1;
    if (build_no_rope && (i + 1) % interval == 0) specs[i].nope = 1;
    m->tuned[i] = (unsigned char)(tuning && specs[i].nope && specs[i].attention);
    m->layer_cache[i] = -1;
    if (specs[i].nope) continue;
    int32_t j;
    for (j = 0; j < i; j++)
      if (!specs[j].nope && same_layer_spec(&specs[i], &specs[j])) break;
    if (j < i) {
      m->layer_cache[i] = m->layer_cache[j];
      continue;
    }
    pe_rope_cache *c = NULL;
    if ((st = cache_for(tr, mt, &specs[i], max_positions, seq_len, &c)) != PE_OK) goto done;
    int32_t k;
    for (k = 0; k < m->n_caches; k++)
      if (same_cache(c, m->caches[k])) break;
    if (k < m->n_caches) {
      pe_rope_cache_destroy(c);
    } else {
      m->caches[m->n_caches++] = c;
    }
    m->layer_cache[i] = k;
  }
  if (single) {
    if (no_pe) {
      st = pe__fail(PE_ERR_UNSUPPORTED,
                    "%s: model_type \"%s\": its attention applies no positional encoding (no "
                    "rotary embedding in transformers' attention class%s), so there is no cache "
                    "to build", FN, mt,
                    strcmp(mt, "granitemoehybrid") == 0 ? ": position_embedding_type is not \"rope\""
                    : get(tr, "mla_use_nope") ? ": mla_use_nope" : "");
      goto done;
    }
    int nope_attention = 0;
    for (int32_t i = 0; i < (int32_t)n; i++) nope_attention |= specs[i].nope && specs[i].attention;
    if (m->n_caches > 1 || nope_attention) {
      st = pe__fail(PE_ERR_UNSUPPORTED,
                    "%s: model_type \"%s\" uses %d different ropes%s over its %d layers: one cache "
                    "cannot represent it; use pe_model_rope_from_hf_config, which gives each "
                    "layer its cache", FN, mt, (int)m->n_caches,
                    nope_attention ? " and attention layers without RoPE" : "", (int)n);
      goto done;
    }
    if (m->n_caches == 0) {
      st = pe__fail(PE_ERR_PARSE, "%s: no layer of this config.json uses RoPE", FN);
      goto done;
    }
  }
  *out = m;
  m = NULL;
done:
  model_free(m);
  pe__free(types);
  pe__free(specs);
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

PE_API pe_status pe_rope_cache_create_from_hf_config(const char *json, size_t len,
                                                     int64_t max_positions, int64_t seq_len,
                                                     pe_rope_cache **out) {
  hf_fn = "pe_rope_cache_create_from_hf_config";
  if (!json) return pe__fail(PE_ERR_NULL_POINTER, "%s: json is NULL", FN);
  if (!out) return pe__fail(PE_ERR_NULL_POINTER, "%s: out is NULL", FN);
  if (seq_len < 0)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: seq_len %" PRId64 " must be >= 0 (0 = "
                    "max_position_embeddings)", FN, seq_len);
  if (max_positions < 0 || max_positions > PE_MAX_POSITION)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: max_positions %" PRId64 " must be in [0, 2^53]",
                    FN, max_positions);
  pe_model_rope *m = NULL;
  pe_status st = model_build(json, len, max_positions, seq_len, 1, &m);
  if (st != PE_OK) return st;
  /* Exactly one cache: hand it over. */
  *out = m->caches[0];
  m->n_caches = 0;
  model_free(m);
  return PE_OK;
}

PE_API pe_status pe_model_rope_from_hf_config(const char *json, size_t len, int64_t max_positions,
                                              int64_t seq_len, pe_model_rope **out) {
  hf_fn = "pe_model_rope_from_hf_config";
  if (!json) return pe__fail(PE_ERR_NULL_POINTER, "%s: json is NULL", FN);
  if (!out) return pe__fail(PE_ERR_NULL_POINTER, "%s: out is NULL", FN);
  if (seq_len < 0)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: seq_len %" PRId64 " must be >= 0 (0 = "
                    "max_position_embeddings)", FN, seq_len);
  if ((max_positions < 0 && max_positions != PE_MAX_POSITIONS_FROM_CONFIG) ||
      max_positions > PE_MAX_POSITION)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: max_positions %" PRId64 " must be in [0, 2^53] or "
                    "PE_MAX_POSITIONS_FROM_CONFIG (-1)", FN, max_positions);
  pe_status st = model_build(json, len, max_positions, seq_len, 0, out);
  hf_fn = "pe_rope_cache_create_from_hf_config";
  return st;
}

PE_API int32_t pe_model_rope_num_layers(const pe_model_rope *m) { return m ? m->n_layers : -1; }

PE_API const pe_rope_cache *pe_model_rope_layer(const pe_model_rope *m, int32_t layer) {
  if (!m) {
    pe__fail(PE_ERR_NULL_POINTER, "pe_model_rope_layer: model is NULL");
    return NULL;
  }
  if (layer < 0 || layer >= m->n_layers) {
    pe__fail(PE_ERR_INVALID_ARGUMENT, "pe_model_rope_layer: layer %d is outside [0, %d)", (int)layer,
             (int)m->n_layers);
    return NULL;
  }
  int32_t k = m->layer_cache[layer];
  return k < 0 ? NULL : m->caches[k];
}

PE_API int32_t pe_model_rope_pairing_guessed(const pe_model_rope *m) {
  return m ? m->pairing_guessed : -1;
}

PE_API pe_status pe_model_rope_heads(const pe_model_rope *m, int32_t *num_attention_heads,
                                     int32_t *num_key_value_heads) {
  if (!m) return pe__fail(PE_ERR_NULL_POINTER, "pe_model_rope_heads: model is NULL");
  if (!num_attention_heads || !num_key_value_heads)
    return pe__fail(PE_ERR_NULL_POINTER, "pe_model_rope_heads: %s is NULL",
                    num_attention_heads ? "num_key_value_heads" : "num_attention_heads");
  *num_attention_heads = m->heads;
  *num_key_value_heads = m->kv_heads;
  return PE_OK;
}

PE_API pe_status pe_model_rope_nope_temperature(const pe_model_rope *m, int32_t layer,
                                                double *floor_scale, double *attn_scale) {
  static const char fn[] = "pe_model_rope_nope_temperature";
  if (!m) return pe__fail(PE_ERR_NULL_POINTER, "%s: model is NULL", fn);
  if (!floor_scale || !attn_scale)
    return pe__fail(PE_ERR_NULL_POINTER, "%s: %s is NULL", fn, floor_scale ? "attn_scale" : "floor_scale");
  if (layer < 0 || layer >= m->n_layers)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: layer %d is outside [0, %d)", fn, (int)layer,
                    (int)m->n_layers);
  *floor_scale = m->tuned[layer] ? m->floor_scale : 1.0;
  *attn_scale = m->tuned[layer] ? m->attn_scale : 0.0;
  return PE_OK;
}

PE_API void pe_model_rope_destroy(pe_model_rope *m) { model_free(m); }
