/* models.h - the model types the config loaders know: the census table
 * (models.def, one PE_MODEL row per model_type; its header comment says
 * what each column means) as C data. */
#ifndef PE_CONFIG_MODELS_H
#define PE_CONFIG_MODELS_H

#include "config/json.h"

typedef enum model_pair { PAIR_GPTJ, PAIR_NEOX, PAIR_MLA, PAIR_NONE } model_pair;
typedef enum model_width {
  WIDTH_HEAD, WIDTH_PRF, WIDTH_ROTARY_DIM, WIDTH_MINIMAX_M2, WIDTH_MLA, WIDTH_MLA_PRF, WIDTH_V4
} model_width;
typedef enum model_layers {
  LAYERS_ALL, LAYERS_GEMMA3, LAYERS_PER_TYPE, LAYERS_COHERE2, LAYERS_LLAMA4, LAYERS_EXAONE4,
  LAYERS_MODERNBERT, LAYERS_QWEN_HYBRID, LAYERS_MIMO, LAYERS_MINIMAX01, LAYERS_V4,
  LAYERS_GRANITE_HYBRID, LAYERS_FALCON
} model_layers;
typedef enum model_roles { ROLES_ATTN, ROLES_DSA_V32, ROLES_DSA_GLM5, ROLES_V4 } model_roles;
typedef enum model_slice { SLICE_HEAD_FIRST, SLICE_MLA, SLICE_V4 } model_slice;
typedef enum model_qk {
  QK_NONE, QK_RMS, QK_RMS_UNIT, QK_L2, QK_V4, QK_LAYERNORM, QK_AFTER_ROPE, QK_UNREAD
} model_qk;
typedef enum model_qk_scope { QKS_HEAD, QKS_TOKEN } model_qk_scope;

/* One census row. style: the pairing as a pe_rope_style (PAIR_MLA's
 * default, GPTJ; PAIR_NONE: unused). The defaults (theta .. max_pos, and
 * qk_eps_default for qk_eps_key) are the config class's for omitted keys,
 * 0 = none. */
typedef struct model_info {
  const char *type, *arch;
  model_pair pair;
  model_width width;
  pe_rope_style style;
  double theta;
  int32_t head_dim, heads, kv_heads;
  int64_t hidden, layers, max_pos;
  model_layers layers_rule;
  model_roles roles;
  model_slice slice;
  model_qk qk;
  model_qk_scope qk_scope;
  const char *qk_eps_key;
  double qk_eps_default;
  const char *qk_when;
  int qk_when_default;
  double latent_eps;
  const char *source;
} model_info;

/* Every top-level key that sets positions in some row (models.def's
 * PE_POSITION_KEY list), NULL-terminated. */
extern PE_HIDDEN const char *const pe__position_keys[];

/* The row of model type `type`, or NULL. */
PE_HIDDEN const model_info *pe__model_find(const char *type);
/* The row whose arch prefix names architecture class `cls` (prefix + a
 * class suffix such as ForCausalLM), or NULL. */
PE_HIDDEN const model_info *pe__model_find_arch(const char *cls);

#endif
