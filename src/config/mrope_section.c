/* mrope_section.c - pe_mrope_section_from_hf_config: Qwen2-VL / Qwen2.5-VL /
 * Qwen3-VL's M-RoPE sections and interleaving from a config.json. */
#include <math.h>
#include <string.h>

#include "config/json.h"

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

