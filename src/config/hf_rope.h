/* hf_rope.h - one rotation's parameters from a config.json (hf_rope.c). */
#ifndef PE_CONFIG_HF_ROPE_H
#define PE_CONFIG_HF_ROPE_H

#include "config/models.h"
#include "rope/cache.h"

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
  int style_override;         /* >= 0: this pairing (an indexer's), else the model's */
  double attn_default;        /* > 0: YaRN's attention factor when the dict has none */
  double base_forced;         /* > 0: the base, whatever the dict says */
} hf_rope;

/* One layer type's rope, as the per-layer loader resolved it. */
typedef struct layer_rope {
  int nope;                 /* no RoPE in this layer */
  int attention;            /* a softmax attention layer (not linear attention, mamba, conv) */
  const cJSON *dict;        /* its scaling dict, or NULL */
  char where[96];           /* the dict's name in messages, with a trailing '.' */
  double base_override;     /* see hf_rope */
  const char *head_dim_key;
  int force_default;
  int style_override;       /* see hf_rope; -1 = none */
  double attn_default;      /* see hf_rope */
  double base_forced;       /* see hf_rope */
  int tuned;                /* Llama 4 attn_temperature_tuning on this NoPE layer */
} layer_rope;

/* A v5 per-layer-type dict ({"full_attention": {...}, ...}) rather than one
 * rope's parameters. */
PE_HIDDEN int pe__hf_is_per_layer_type(const cJSON *dict);
/* The cache of one layer type. max_positions < 0 = max_position_embeddings. */
PE_HIDDEN pe_status pe__hf_cache_for(const cJSON *root, const char *model_type,
                                     const layer_rope *lr, int64_t max_positions,
                                     int64_t seq_len, pe_rope_cache **out);

#endif
