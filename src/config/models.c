/* models.c - the census table (models.def) as model_info rows. */
#include <string.h>

#include "config/models.h"

#define PE_MODEL(type, arch, pair, width, theta, head_dim, heads, kv_heads, hidden, layers,      \
                 max_pos, layers_rule, roles, slice, qk, qk_scope, qk_eps_key, qk_eps_default,   \
                 qk_when, qk_when_default, latent_eps, source)                                   \
  {type, arch, pair, width, (pair) == PAIR_GPTJ || (pair) == PAIR_MLA ? PE_ROPE_GPTJ : PE_ROPE_NEOX, \
   theta, head_dim, heads, kv_heads, hidden, layers, max_pos, layers_rule, roles, slice, qk,      \
   qk_scope, qk_eps_key, qk_eps_default, qk_when, qk_when_default, latent_eps, source},
#define PE_POSITION_KEY(key)
static const model_info models[] = {
#include "config/models.def"
};
#undef PE_MODEL
#undef PE_POSITION_KEY

#define PE_MODEL(...)
#define PE_POSITION_KEY(key) key,
const char *const pe__position_keys[] = {
#include "config/models.def"
    NULL};
#undef PE_MODEL
#undef PE_POSITION_KEY

const model_info *pe__model_find(const char *type) {
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    if (strcmp(models[i].type, type) == 0) return &models[i];
  return NULL;
}

const model_info *pe__model_find_arch(const char *cls) {
  static const char *const suffixes[] = {"ForCausalLM", "ForConditionalGeneration", "Model",
                                         "LMHeadModel", "ForMaskedLM", NULL};
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    const char *a = models[i].arch;
    size_t n = a ? strlen(a) : 0;
    if (!a || strncmp(cls, a, n) != 0) continue;
    for (const char *const *s = suffixes; *s; s++)
      if (strcmp(cls + n, *s) == 0) return &models[i];
  }
  return NULL;
}
