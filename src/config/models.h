/* models.h - the model types the config loaders know (models.c). */
#ifndef PE_CONFIG_MODELS_H
#define PE_CONFIG_MODELS_H

#include "config/json.h"

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

/* The entry of model type `type`, or NULL. */
PE_HIDDEN const model_info *pe__model_find(const char *type);

#endif
