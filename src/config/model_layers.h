/* model_layers.h - a model's layers as its config.json describes them, before
 * any cache is built (model_layers.c); model_rope.c builds on it. */
#ifndef PE_CONFIG_MODEL_LAYERS_H
#define PE_CONFIG_MODEL_LAYERS_H

#include "config/hf_rope.h"

/* More layers than any published model (the largest have ~128). */
#define PE_MAX_LAYERS 4096

/* The census row of the config: the text model's model_type, the top
 * level's, text_config's, then the class named by architectures[0]. *name:
 * the type for messages. NULL: not in the table. */
PE_HIDDEN const model_info *pe__resolve_type(const cJSON *root, const cJSON *tr,
                                             const char **name);
/* Every top-level key that sets positions in some census row is one this
 * row's classes read or are known to ignore; otherwise PE_ERR_UNSUPPORTED
 * naming it. */
PE_HIDDEN pe_status pe__check_position_keys(const cJSON *tr, const model_info *mi,
                                            const char *name);
/* The attention applies no positional encoding, whatever rope_theta says. */
PE_HIDDEN int pe__attention_has_no_rope(const cJSON *tr, const model_info *mi);
/* The layer type of every one of the n layers (HF layer_types, or what the
 * config class derives when the file has none); types[i] points into the
 * JSON or to a literal. */
PE_HIDDEN pe_status pe__layer_types(const cJSON *root, const char *mt, int32_t n,
                                    const char **types);
/* One layer of type `type`: its dict, base, NoPE (no_rope: Llama 4's
 * no_rope_layers, or NULL). */
PE_HIDDEN pe_status pe__resolve_layer(const cJSON *root, const char *mt, const char *type,
                                      int32_t i, const cJSON *no_rope, layer_rope *lr);
/* indexer_rope_interleave (default dflt_interleave) as a pe_rope_style. */
PE_HIDDEN pe_status pe__indexer_style(const cJSON *tr, int dflt_interleave, int *style);
/* GLM-5: full[i] = 1 for the layers that run their indexer, 0 for those that
 * reuse the previous top-k. */
PE_HIDDEN pe_status pe__glm5_indexer_layers(const cJSON *tr, int32_t n, unsigned char *full);
/* DeepSeek-V4: the attention rope of the compressed layers and their
 * compressor's, from any of the config's three forms. */
PE_HIDDEN pe_status pe__v4_specs(const cJSON *tr, layer_rope *main_lr, layer_rope *comp_lr);

#endif
