/* model_layers.c - what a config.json says about a model's layers, before
 * any cache is built: its model type's census row, the position keys it may
 * carry, each layer's type (full, sliding, linear attention, NoPE) and the
 * rope parameters it reads, and the second rotations of a layer (the
 * sparse-attention indexer's pairing and layers, DeepSeek-V4's compressor).
 * model_rope.c builds the caches from these. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/model_layers.h"

/* An integer pattern key (the first of the names present), or dflt. */
static pe_status pattern_key(const cJSON *root, const char *const *names, int64_t dflt,
                             int64_t *out, const char **which) {
  for (; *names; names++) {
    int found;
    pe_status st = pe__json_count(root, "", *names, out, &found);
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
  const cJSON *a = pe__json_get(root, key);
  if (!cJSON_IsArray(a))
    return pe__fail(PE_ERR_PARSE, "%s: %s must be an array, got %s", FN, key, pe__json_type(a));
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
pe_status pe__layer_types(const cJSON *root, const char *mt, int32_t n, const char **types) {
  static const char FULL[] = "full_attention", SLIDING[] = "sliding_attention",
                    LINEAR[] = "linear_attention";
  const cJSON *lt = pe__json_get(root, "layer_types");
  if (lt) {
    if (!cJSON_IsArray(lt))
      return pe__fail(PE_ERR_PARSE, "%s: layer_types must be an array, got %s", FN, pe__json_type(lt));
    int k = cJSON_GetArraySize(lt);
    if (k != n)
      return pe__fail(PE_ERR_PARSE, "%s: layer_types has %d entries, num_hidden_layers is %d", FN, k,
                      (int)n);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, lt) {
      if (!cJSON_IsString(e))
        return pe__fail(PE_ERR_PARSE, "%s: layer_types[%d] must be a string, got %s", FN, i,
                        pe__json_type(e));
      types[i++] = e->valuestring;
    }
    return PE_OK;
  }
  static const char *const gemma3[] = {"gemma3_text", "gemma3", "gemma3n_text", "gemma3n", NULL};
  static const char *const qwen_hybrid[] = {"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                                            "qwen3_5_moe_text", NULL};
  static const char SWA[] = "sliding_attention", CSA[] = "compressed_sparse_attention",
                    HCA[] = "heavily_compressed_attention";
  pe_status st;
  int64_t every = 0;
  const char *which = NULL;
  for (int32_t i = 0; i < n; i++) types[i] = FULL;
  if (strcmp(mt, "deepseek_v4") == 0) {
    /* DeepseekV4Config: the legacy per-layer compress_ratios (0 sliding, 4
     * CSA, 128 HCA; the list may be longer than the layers: cut to them),
     * else 2 HCA layers then CSA / HCA alternating. */
    const cJSON *cr = pe__json_get(root, "compress_ratios");
    if (cr) {
      if (!cJSON_IsArray(cr))
        return pe__fail(PE_ERR_PARSE, "%s: compress_ratios must be an array, got %s", FN,
                        pe__json_type(cr));
      if (cJSON_GetArraySize(cr) < n)
        return pe__fail(PE_ERR_PARSE, "%s: compress_ratios has %d entries, num_hidden_layers is %d",
                        FN, cJSON_GetArraySize(cr), (int)n);
      for (int32_t i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(cr, i);
        double r = cJSON_IsNumber(e) ? e->valuedouble : -1.0;
        if (r != 0.0 && r != 4.0 && r != 128.0)
          return pe__fail(PE_ERR_PARSE, "%s: compress_ratios[%d] must be 0, 4 or 128 (the ratios "
                          "DeepseekV4Config maps to layer types)", FN, (int)i);
        types[i] = r == 0.0 ? SWA : r == 4.0 ? CSA : HCA;
      }
    } else {
      for (int32_t i = 0; i < n; i++) types[i] = i < 2 ? HCA : ((i - 2) % 2 ? CSA : HCA);
    }
    return PE_OK;
  }
  if (pe__str_in(mt, gemma3) || strcmp(mt, "cohere2") == 0) {
    /* Gemma3TextConfig: sliding_window_pattern (6), v5 _sliding_window_pattern;
     * Cohere2Config: sliding_window_pattern (4). Sliding iff (i+1) % p != 0. */
    static const char *const keys[] = {"sliding_window_pattern", "_sliding_window_pattern", NULL};
    if ((st = pattern_key(root, keys, mt[0] == 'g' ? 6 : 4, &every, &which)) != PE_OK) return st;
    for (int32_t i = 0; i < n; i++) types[i] = (i + 1) % every ? SLIDING : FULL;
  } else if (strcmp(mt, "exaone4") == 0) {
    /* Exaone4Config: an int pattern as above (4), or a string of L and G
     * repeated, the last layer always global. */
    const cJSON *sp = pe__json_get(root, "sliding_window_pattern");
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
  } else if (pe__json_get(root, "hybrid_layer_pattern")) {
    /* MiMo-V2-Flash: 0 = full attention, 1 = sliding window (transformers'
     * MiMoV2FlashConfig turns it into layer_types the same way). */
    static const char *const mimo[] = {"mimo_v2_flash", "mimo_v2", NULL};
    if (!pe__str_in(mt, mimo))
      return pe__fail(PE_ERR_UNSUPPORTED,
                      "%s: hybrid_layer_pattern of model_type \"%s\" is not one libposenc has "
                      "checked (it reads MiMo-V2's: 0 full, 1 sliding)", FN, mt);
    return int_pattern(root, "hybrid_layer_pattern", n, FULL, SLIDING, types);
  } else if (pe__json_get(root, "attn_type_list")) {
    /* MiniMax-01 (MiniMaxConfig): 0 = lightning (linear) attention, 1 = softmax attention. */
    return int_pattern(root, "attn_type_list", n, LINEAR, FULL, types);
  } else if (pe__str_in(mt, qwen_hybrid)) {
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
  return pe__str_in(type, t);
}

/* Resolve one layer: its dict, base, NoPE. */
pe_status pe__resolve_layer(const cJSON *root, const char *mt, const char *type, int32_t i,
                               const cJSON *no_rope, layer_rope *lr) {
  pe_status st;
  int found;
  memset(lr, 0, sizeof *lr);
  lr->style_override = -1;
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
  const cJSON *rp = pe__json_get(root, "rope_parameters");
  const char *key = rp ? "rope_parameters" : "rope_scaling";
  const cJSON *dict = rp ? rp : pe__json_get(root, "rope_scaling");
  if (dict && !cJSON_IsObject(dict))
    return pe__fail(PE_ERR_PARSE, "%s: %s must be an object, got %s", FN, key, pe__json_type(dict));
  if (pe__hf_is_per_layer_type(dict)) {
    const cJSON *sub = pe__json_get(dict, type);
    if (!sub)
      return pe__fail(PE_ERR_PARSE, "%s: config.json lacks %s.%s (layer %d is a %s layer)", FN, key,
                      type, (int)i, type);
    if (!cJSON_IsObject(sub))
      return pe__fail(PE_ERR_PARSE, "%s: %s.%s must be an object, got %s", FN, key, type,
                      pe__json_type(sub));
    lr->dict = sub;
    snprintf(lr->where, sizeof lr->where, "%s.%s.", key, type);
  } else {
    lr->dict = dict;
    snprintf(lr->where, sizeof lr->where, "%s.", key);
    if (pe__str_in(mt, gemma3) && !full) {
      /* Gemma 3 / 3n local layers: default rope at rope_local_base_freq;
       * rope_scaling is for the global layers only. */
      double b = 10000.0; /* Gemma3TextConfig rope_local_base_freq */
      if ((st = pe__json_number(root, "", "rope_local_base_freq", &b, &found)) != PE_OK) return st;
      lr->base_override = b;
      lr->force_default = 1;
    } else if (!full && pe__json_get(root, "swa_rope_theta")) {
      /* MiMo-V2-Flash: the sliding layers rotate at swa_rope_theta, default
       * rope (MiMoV2FlashConfig's sliding_attention parameters). */
      double b = 0.0;
      if ((st = pe__json_number(root, "", "swa_rope_theta", &b, &found)) != PE_OK) return st;
      lr->base_override = b;
      lr->force_default = 1;
    } else if (strcmp(mt, "modernbert") == 0) {
      /* ModernBertConfig: rope_scaling for both, the base per layer type. */
      double b = full ? 160000.0 : 10000.0;
      if ((st = pe__json_number(root, "", full ? "global_rope_theta" : "local_rope_theta", &b, &found)) !=
          PE_OK)
        return st;
      lr->base_override = b;
    }
  }
  if (pe__str_in(mt, gemma4) && full && pe__json_get(root, "global_head_dim")) lr->head_dim_key = "global_head_dim";
  return PE_OK;
}

/* ---- which model type ------------------------------------------------- */

/* The census row of the config: the text model's model_type, the top
 * level's, text_config's, then the class named by architectures[0] (text
 * model's, then top level's). *name: the type for messages (the first
 * model_type found, else the architecture). NULL row: not in the table. */
const model_info *pe__resolve_type(const cJSON *root, const cJSON *tr, const char **name) {
  const cJSON *cands[3] = {tr, root, pe__json_get(root, "text_config")};
  *name = NULL;
  for (int i = 0; i < 3; i++) {
    const cJSON *mt = cJSON_IsObject(cands[i]) ? pe__json_get(cands[i], "model_type") : NULL;
    if (!(mt && cJSON_IsString(mt) && mt->valuestring[0])) continue;
    if (!*name) *name = mt->valuestring;
    const model_info *mi = pe__model_find(mt->valuestring);
    if (mi) {
      *name = mi->type;
      return mi;
    }
  }
  for (int i = 0; i < 2; i++) {
    const cJSON *ar = pe__json_get(cands[i], "architectures");
    const cJSON *a0 = cJSON_IsArray(ar) ? cJSON_GetArrayItem(ar, 0) : NULL;
    if (!(a0 && cJSON_IsString(a0))) continue;
    if (!*name) *name = a0->valuestring;
    const model_info *mi = pe__model_find_arch(a0->valuestring);
    if (mi) {
      *name = mi->type;
      return mi;
    }
  }
  if (!*name) *name = "";
  return NULL;
}

/* ---- keys that set positions ------------------------------------------ */

/* Whether model row mi (NULL: a guessed type) reads or knowingly ignores key. */
static int key_understood(const model_info *mi, const char *key) {
  static const char *const common[] = {"rope_theta", "rope_scaling", "rope_parameters", "layer_types",
                                       "original_max_position_embeddings",
                                       "partial_rotary_factor", NULL};
  if (pe__str_in(key, common)) return 1;
  if (!mi) {
    /* A guess reads the generic keys only. */
    static const char *const generic[] = {"rotary_dim", "rotary_pct", "qk_rope_head_dim", "mla_use_nope",
                                          NULL};
    return pe__str_in(key, generic);
  }
  static const char *const dsa[] = {"index_head_dim", "index_n_heads", "index_topk",
                                    "indexer_rope_interleave", NULL};
  static const char *const glm5[] = {"indexer_types", "index_topk_pattern", "index_topk_freq",
                                     "index_skip_topk_offset", NULL};
  static const char *const v4[] = {"qk_rope_head_dim", "index_head_dim", "index_n_heads",
                                   "index_topk", "compress_ratios", "compress_rope_theta",
                                   "compress_rates", "compress_rope_parameters", NULL};
  /* mla_use_nope is Kimi-Linear's (remote code, read under a guess): the
   * MLA classes of this table rotate whatever it says, so true is refused
   * by name and false is harmless (key_harmless). */
  static const char *const mla[] = {"qk_rope_head_dim", "rope_interleave", NULL};
  switch (mi->width) {
    case WIDTH_ROTARY_DIM:
    case WIDTH_MINIMAX_M2:
      if (strcmp(key, "rotary_dim") == 0) return 1;
      break;
    case WIDTH_MLA:
    case WIDTH_MLA_PRF:
      if (pe__str_in(key, mla)) return 1;
      break;
    default:
      break;
  }
  if (strcmp(mi->type, "gpt_neox") == 0 && (strcmp(key, "rotary_pct") == 0 ||
                                            strcmp(key, "rotary_emb_base") == 0))
    return 1;
  if ((mi->roles == ROLES_DSA_V32 || mi->roles == ROLES_DSA_GLM5) && pe__str_in(key, dsa)) return 1;
  if (mi->roles == ROLES_DSA_GLM5 && pe__str_in(key, glm5)) return 1;
  if (mi->roles == ROLES_V4 && pe__str_in(key, v4)) return 1;
  switch (mi->layers_rule) {
    case LAYERS_GEMMA3:
      return strcmp(key, "sliding_window_pattern") == 0 ||
             strcmp(key, "_sliding_window_pattern") == 0 || strcmp(key, "rope_local_base_freq") == 0;
    case LAYERS_COHERE2:
    case LAYERS_EXAONE4:
      return strcmp(key, "sliding_window_pattern") == 0;
    case LAYERS_MODERNBERT:
      return strcmp(key, "global_rope_theta") == 0 || strcmp(key, "local_rope_theta") == 0 ||
             strcmp(key, "global_attn_every_n_layers") == 0;
    case LAYERS_LLAMA4:
      return strcmp(key, "no_rope_layers") == 0 || strcmp(key, "no_rope_layer_interval") == 0;
    case LAYERS_QWEN_HYBRID:
      return strcmp(key, "full_attention_interval") == 0;
    case LAYERS_MIMO:
      return strcmp(key, "hybrid_layer_pattern") == 0 || strcmp(key, "swa_rope_theta") == 0;
    case LAYERS_MINIMAX01:
      return strcmp(key, "attn_type_list") == 0;
    case LAYERS_PER_TYPE:
      return strcmp(key, "global_head_dim") == 0;
    case LAYERS_GRANITE_HYBRID:
      return strcmp(key, "position_embedding_type") == 0;
    case LAYERS_FALCON:
      return strcmp(key, "alibi") == 0;
    default:
      return 0;
  }
}

/* A value that says what the class does anyway: a full rotary fraction,
 * alibi / mla_use_nope false, Cohere's own name for its interleaved rope; and
 * keys a class is known to carry without reading (ModernBERT's BERT-era
 * position_embedding_type: ModernBertConfig has no such attribute, every
 * layer rotates). */
static int key_harmless(const model_info *mi, const char *key, const cJSON *v) {
  if ((strcmp(key, "rotary_pct") == 0 || strcmp(key, "partial_rotary_factor") == 0) &&
      cJSON_IsNumber(v) && v->valuedouble == 1.0)
    return 1;
  if ((strcmp(key, "alibi") == 0 || strcmp(key, "mla_use_nope") == 0) && cJSON_IsFalse(v)) return 1;
  if (!mi) return 0;
  if (strcmp(key, "position_embedding_type") == 0) {
    if (strcmp(mi->type, "modernbert") == 0) return 1;
    if (mi->pair == PAIR_GPTJ && cJSON_IsString(v) && strcmp(v->valuestring, "rope_gptj") == 0)
      return 1;
  }
  return 0;
}

pe_status pe__check_position_keys(const cJSON *tr, const model_info *mi, const char *name) {
  /* models.def's PE_POSITION_KEY list: a config may carry one only where the
   * row's classes read it or are known to ignore it. */
  for (const char *const *k = pe__position_keys; *k; k++) {
    const cJSON *v = pe__json_get(tr, *k);
    if (!v || key_understood(mi, *k) || key_harmless(mi, *k, v)) continue;
    if (!mi)
      return pe__fail(PE_ERR_UNSUPPORTED,
                      "%s: config.json has %s, which sets positions in some model types, and its "
                      "model_type \"%s\" is not in libposenc's table (docs/pages/models.md): even "
                      "a guess cannot say how its class reads %s", FN, *k, name, *k);
    return pe__fail(PE_ERR_UNSUPPORTED,
                    "%s: config.json has %s, which model_type \"%s\"'s classes (%s) are not known "
                    "to read: libposenc will not drop a key that may set positions; remove it if "
                    "the model does not use it", FN, *k, name, mi->source);
  }
  return PE_OK;
}

/* The attention applies no positional encoding, whatever rope_theta says. */
int pe__attention_has_no_rope(const cJSON *tr, const model_info *mi) {
  if (mi && mi->pair == PAIR_NONE) return 1; /* NemotronHAttention, JambaAttention */
  if (mi && mi->layers_rule == LAYERS_GRANITE_HYBRID) {
    /* GraniteMoeHybridModel builds its rotary embedding only for
     * position_embedding_type "rope" (the config class's default is None;
     * Granite-4.0-H ships "nope"). */
    const cJSON *pe = pe__json_get(tr, "position_embedding_type");
    return !(pe && cJSON_IsString(pe) && strcmp(pe->valuestring, "rope") == 0);
  }
  /* FalconAttention: alibi replaces the rotary embedding. */
  if (mi && mi->layers_rule == LAYERS_FALCON) return pe__json_flag(tr, "alibi", 0);
  /* MLA without its rope part (Kimi-Linear): mla_use_nope. */
  const cJSON *nope = pe__json_get(tr, "mla_use_nope");
  return nope && cJSON_IsTrue(nope);
}

/* ---- roles: indexers and compressors ----------------------------------- */

/* indexer_rope_interleave (default per model type) as a style. */
pe_status pe__indexer_style(const cJSON *tr, int dflt_interleave, int *style) {
  const cJSON *v = pe__json_get(tr, "indexer_rope_interleave");
  if (v && !cJSON_IsBool(v))
    return pe__fail(PE_ERR_PARSE, "%s: indexer_rope_interleave must be true or false, got %s", FN,
                    pe__json_type(v));
  int il = v ? cJSON_IsTrue(v) : dflt_interleave;
  *style = il ? PE_ROPE_GPTJ : PE_ROPE_NEOX;
  return PE_OK;
}

/* GlmMoeDsaConfig.__post_init__: which layers run their indexer ("full")
 * and which reuse the previous top-k ("shared"): indexer_types, else
 * index_topk_pattern ("FS..." or a list), else full iff max(i - offset + 1,
 * 0) % freq == 0 (index_topk_freq 1, index_skip_topk_offset 2). */
pe_status pe__glm5_indexer_layers(const cJSON *tr, int32_t n, unsigned char *full) {
  pe_status st;
  int found;
  const cJSON *it = pe__json_get(tr, "indexer_types");
  const char *key = "indexer_types";
  if (!it) it = pe__json_get(tr, key = "index_topk_pattern");
  if (it && cJSON_IsString(it)) {
    if ((int)strlen(it->valuestring) < n)
      return pe__fail(PE_ERR_PARSE, "%s: %s \"%s\" has fewer than %d letters", FN, key,
                      it->valuestring, (int)n);
    for (int32_t i = 0; i < n; i++) {
      char c = it->valuestring[i];
      if (c != 'F' && c != 'S')
        return pe__fail(PE_ERR_PARSE, "%s: %s must be made of F and S, got '%c'", FN, key, c);
      full[i] = c == 'F';
    }
    return PE_OK;
  }
  if (it) {
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) < n)
      return pe__fail(PE_ERR_PARSE, "%s: %s must be an array of %d \"full\" / \"shared\"", FN, key,
                      (int)n);
    for (int32_t i = 0; i < n; i++) {
      const cJSON *e = cJSON_GetArrayItem(it, i);
      if (!cJSON_IsString(e) ||
          (strcmp(e->valuestring, "full") != 0 && strcmp(e->valuestring, "shared") != 0))
        return pe__fail(PE_ERR_PARSE, "%s: %s[%d] must be \"full\" or \"shared\"", FN, key, (int)i);
      full[i] = strcmp(e->valuestring, "full") == 0;
    }
    return PE_OK;
  }
  int64_t freq = 1, offset = 2;
  double f = 1.0;
  if ((st = pe__json_number(tr, "", "index_topk_freq", &f, &found)) != PE_OK) return st;
  freq = f >= 1.0 ? (int64_t)f : 1;
  double o = 2.0;
  if ((st = pe__json_number(tr, "", "index_skip_topk_offset", &o, &found)) != PE_OK) return st;
  offset = (int64_t)o;
  for (int32_t i = 0; i < n; i++) {
    int64_t t = (int64_t)i - offset + 1;
    full[i] = (t > 0 ? t : 0) % freq == 0;
  }
  return PE_OK;
}

/* DeepseekV4Config's two rotations: "main" (sliding layers: default rope at
 * rope_theta) and "compress" (compressed layers, their compressor and
 * indexer: the YaRN dict at compress_rope_theta, attention factor 1 unless
 * the dict says). Three forms: rope_parameters {"main", "compress"} (a
 * re-save by the transformers that nests them), rope_parameters +
 * compress_rope_parameters (flat re-saves), or DeepSeek's official
 * rope_theta, compress_rope_theta and rope_scaling. */
pe_status pe__v4_specs(const cJSON *tr, layer_rope *main_lr, layer_rope *comp_lr) {
  pe_status st;
  int found;
  memset(main_lr, 0, sizeof *main_lr);
  memset(comp_lr, 0, sizeof *comp_lr);
  main_lr->style_override = comp_lr->style_override = -1;
  main_lr->attention = comp_lr->attention = 1;
  comp_lr->attn_default = 1.0;
  const cJSON *rp = pe__json_get(tr, "rope_parameters");
  const cJSON *mn = rp ? pe__json_get(rp, "main") : NULL, *cp = rp ? pe__json_get(rp, "compress") : NULL;
  if (rp && !cJSON_IsObject(rp))
    return pe__fail(PE_ERR_PARSE, "%s: rope_parameters must be an object, got %s", FN, pe__json_type(rp));
  double ctheta = 160000.0; /* DeepseekV4Config.compress_rope_theta */
  if ((st = pe__json_number(tr, "", "compress_rope_theta", &ctheta, &found)) != PE_OK) return st;
  const cJSON *crp = pe__json_get(tr, "compress_rope_parameters");
  const cJSON *main_d = NULL, *comp_d = NULL;
  const char *main_w = "", *comp_w = "";
  if (mn || cp) {
    if (!cJSON_IsObject(mn) || !cJSON_IsObject(cp))
      return pe__fail(PE_ERR_PARSE, "%s: rope_parameters must hold both \"main\" and \"compress\" "
                      "objects (DeepseekV4Config's nested form)", FN);
    main_d = mn, main_w = "rope_parameters.main.";
    comp_d = cp, comp_w = "rope_parameters.compress.";
  } else if (crp) {
    if (!cJSON_IsObject(crp))
      return pe__fail(PE_ERR_PARSE, "%s: compress_rope_parameters must be an object, got %s", FN,
                      pe__json_type(crp));
    main_d = rp, main_w = "rope_parameters.";
    comp_d = crp, comp_w = "compress_rope_parameters.";
  }
  if (comp_d) {
    /* A re-save: each rope's own dict (its rope_theta wins). */
    main_lr->dict = main_d;
    snprintf(main_lr->where, sizeof main_lr->where, "%s", main_w);
    comp_lr->dict = comp_d;
    snprintf(comp_lr->where, sizeof comp_lr->where, "%s", comp_w);
    comp_lr->base_override = ctheta;
    return PE_OK;
  }
  /* Official: the main rope is the default one at rope_theta; the YaRN
   * dict (rope_scaling, or a flat rope_parameters) is the compressed one's. */
  main_lr->force_default = 1;
  snprintf(main_lr->where, sizeof main_lr->where, "rope_scaling.");
  comp_lr->dict = rp ? rp : pe__json_get(tr, "rope_scaling");
  if (comp_lr->dict && !cJSON_IsObject(comp_lr->dict))
    return pe__fail(PE_ERR_PARSE, "%s: rope_scaling must be an object, got %s", FN,
                    pe__json_type(comp_lr->dict));
  snprintf(comp_lr->where, sizeof comp_lr->where, rp ? "rope_parameters." : "rope_scaling.");
  /* DeepseekV4Config writes compress_rope_theta over a flat dict's own
   * rope_theta (that one is the main rope's). */
  comp_lr->base_forced = ctheta;
  return PE_OK;
}

/* ---- the model --------------------------------------------------------- */

