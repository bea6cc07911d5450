/* model_rope.c - the rotation of every layer of a model from its
 * config.json (pe_model_rope_from_hf_config and its accessors), and the
 * one-rotation loader pe_rope_cache_create_from_hf_config, which is the
 * same build for a model whose layers all rotate alike. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/hf_rope.h"

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
static pe_status layer_types(const cJSON *root, const char *mt, int32_t n, const char **types) {
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
  pe_status st;
  int64_t every = 0;
  const char *which = NULL;
  for (int32_t i = 0; i < n; i++) types[i] = FULL;
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
  if (pe__str_in(mt, none)) return 1;
  /* GraniteMoeHybridModel builds its rotary embedding only for
   * position_embedding_type "rope" (the config class's default is None;
   * Granite-4.0-H ships "nope"). */
  if (strcmp(mt, "granitemoehybrid") == 0) {
    const cJSON *pe = pe__json_get(root, "position_embedding_type");
    return !(pe && cJSON_IsString(pe) && strcmp(pe->valuestring, "rope") == 0);
  }
  /* Kimi-Linear's MLA layers: mla_use_nope. */
  const cJSON *nope = pe__json_get(root, "mla_use_nope");
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
    if (pe__json_get(root, *k)) v4 = *k;
  if (v4)
    return pe__fail(PE_ERR_UNSUPPORTED,
                    "%s: model_type \"%s\" (%s): DeepSeek-V4's layers rotate a compressor beside "
                    "the attention (GPT-J pairs on the last 64 channels of a 512-channel head, "
                    "YaRN at compress_rope_theta on the compressed layers) and de-rotate the "
                    "attention output, which this loader cannot describe yet", FN, mt, v4);
  for (const char *const *k = indexer_keys; *k; k++)
    if (pe__json_get(root, *k))
      return pe__fail(PE_ERR_UNSUPPORTED,
                      "%s: model_type \"%s\" has %s: its sparse-attention indexer rotates a "
                      "second slice per layer (the first qk_rope_head_dim channels of "
                      "index_head_dim, paired as indexer_rope_interleave says) that this loader "
                      "cannot describe yet; the attention's cache must not be used for it", FN, mt,
                      *k);
  static const char *const dsa[] = {"deepseek_v32", "glm_moe_dsa", NULL};
  if (pe__str_in(mt, dsa))
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
  if ((st = pe__json_parse(json, len, &root)) != PE_OK) return st;
  const char *mt;
  const cJSON *tr = pe__json_text_root(root, &mt);
  const model_info *mi = pe__model_find(mt);
  int found;
  int64_t n = 0;
  if ((st = unexpressible(tr, mt)) != PE_OK) goto done;
  int no_pe = attention_has_no_rope(tr, mt);
  if ((st = pe__json_count(tr, "", "num_hidden_layers", &n, &found)) != PE_OK) goto done;
  if (!found && (st = pe__json_count(tr, "", "n_layer", &n, &found)) != PE_OK) goto done;
  if (!found && (st = pe__json_count(tr, "", "num_layers", &n, &found)) != PE_OK) goto done;
  if (!found && mi && mi->layers > 0) n = mi->layers, found = 1;
  if (!found && single) n = 1, found = 1;
  if ((st = pe__json_need(found, "", "num_hidden_layers", "the number of layers")) != PE_OK) goto done;
  if (n > PE_MAX_LAYERS) {
    st = pe__fail(PE_ERR_PARSE, "%s: num_hidden_layers %" PRId64 " is more than %d", FN, n,
                  PE_MAX_LAYERS);
    goto done;
  }
  /* Llama 4 / SmolLM3: no_rope_layers (empty = every no_rope_layer_interval-th layer NoPE). */
  const cJSON *no_rope = pe__json_get(tr, "no_rope_layers");
  static const char *const nope_interval[] = {"llama4_text", "llama4", "smollm3", NULL};
  int build_no_rope = 0;
  int64_t interval = 4;
  if (no_rope && (!cJSON_IsArray(no_rope))) {
    st = pe__fail(PE_ERR_PARSE, "%s: no_rope_layers must be an array, got %s", FN, pe__json_type(no_rope));
    goto done;
  }
  if (no_rope && cJSON_GetArraySize(no_rope) == 0) no_rope = NULL;
  if (no_rope && cJSON_GetArraySize(no_rope) < n) {
    st = pe__fail(PE_ERR_PARSE, "%s: no_rope_layers has %d entries, num_hidden_layers is %d", FN,
                  cJSON_GetArraySize(no_rope), (int)n);
    goto done;
  }
  if (!no_rope && pe__str_in(mt, nope_interval)) {
    build_no_rope = 1;
    if ((st = pe__json_count(tr, "", "no_rope_layer_interval", &interval, &found)) != PE_OK) goto done;
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
  if ((st = pe__json_count(tr, "", "num_attention_heads", &v, &found)) != PE_OK) goto done;
  if (!found && (st = pe__json_count(tr, "", "n_head", &v, &found)) != PE_OK) goto done;
  if (!found && mi && mi->heads > 0) v = mi->heads, found = 1;
  m->heads = found && v <= INT32_MAX ? (int32_t)v : 0;
  if ((st = pe__json_count(tr, "", "num_key_value_heads", &v, &found)) != PE_OK) goto done;
  if (!found && mi && mi->kv_heads > 0) v = mi->kv_heads, found = 1;
  m->kv_heads = found && v <= INT32_MAX ? (int32_t)v : m->heads;
  /* Llama 4: attn_temperature_tuning (Llama4TextConfig default true), floor_scale 8192, attn_scale 0.1. */
  int tuning = pe__str_in(mt, nope_interval) && strncmp(mt, "llama4", 6) == 0 &&
               pe__json_flag(tr, "attn_temperature_tuning", 1);
  m->floor_scale = 8192.0;
  m->attn_scale = 0.1;
  if (tuning) {
    if ((st = pe__json_number(tr, "", "floor_scale", &m->floor_scale, &found)) != PE_OK) goto done;
    if (!found) m->floor_scale = 8192.0;
    if ((st = pe__json_number(tr, "", "attn_scale", &m->attn_scale, &found)) != PE_OK) goto done;
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
    if ((st = pe__hf_cache_for(tr, mt, &specs[i], max_positions, seq_len, &c)) != PE_OK) goto done;
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
                    : pe__json_get(tr, "mla_use_nope") ? ": mla_use_nope" : "");
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

PE_API pe_status pe_rope_cache_create_from_hf_config(const char *json, size_t len,
                                                     int64_t max_positions, int64_t seq_len,
                                                     pe_rope_cache **out) {
  pe__hf_fn = "pe_rope_cache_create_from_hf_config";
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
  pe__hf_fn = "pe_model_rope_from_hf_config";
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
  pe__hf_fn = "pe_rope_cache_create_from_hf_config";
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
