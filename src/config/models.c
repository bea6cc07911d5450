/* models.c - the table of model types (models.h). */
#include <string.h>

#include "config/models.h"


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

const model_info *pe__model_find(const char *type) {
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    if (strcmp(models[i].type, type) == 0) return &models[i];
  return NULL;
}

