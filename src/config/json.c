/* json.c - the JSON reading every config loader shares (cJSON): keys as
 * transformers sees them (absent and null alike), numbers and counts with
 * messages naming the key, the config's text model, the entry point's name
 * in messages. */
#include <math.h>
#include <string.h>

#include "config/json.h"

/* The entry point named in error sentences: the loaders share the code. */
_Thread_local const char *pe__hf_fn = "pe_rope_cache_create_from_hf_config";

/* A key that is absent or JSON null is "not set", as getattr(..., None) and
 * dict.pe__json_get() see it in transformers. */
const cJSON *pe__json_get(const cJSON *obj, const char *key) {
  if (!obj) return NULL;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return (v && !cJSON_IsNull(v)) ? v : NULL;
}

const char *pe__json_type(const cJSON *v) {
  if (cJSON_IsBool(v)) return "a boolean";
  if (cJSON_IsString(v)) return "a string";
  if (cJSON_IsArray(v)) return "an array";
  if (cJSON_IsObject(v)) return "an object";
  if (cJSON_IsNumber(v)) return "a number";
  return "not a number";
}

/* The value of where.key as a double. *found = 0 when it is not set. */
pe_status pe__json_number(const cJSON *obj, const char *where, const char *key, double *out,
                            int *found) {
  const cJSON *v = pe__json_get(obj, key);
  *found = v != NULL;
  if (!v) return PE_OK;
  if (!cJSON_IsNumber(v))
    return pe__fail(PE_ERR_PARSE, "%s: %s%s must be a number, got %s", FN, where, key, pe__json_type(v));
  if (!isfinite(v->valuedouble))
    return pe__fail(PE_ERR_PARSE, "%s: %s%s is not finite", FN, where, key);
  *out = v->valuedouble;
  return PE_OK;
}

/* An integer key: a JSON number with no fraction, in [1, 2^53]. */
pe_status pe__json_count(const cJSON *obj, const char *where, const char *key, int64_t *out,
                           int *found) {
  double d = 0.0;
  pe_status st = pe__json_number(obj, where, key, &d, found);
  if (st != PE_OK || !*found) return st;
  if (d != floor(d) || d < 1.0 || d > 9007199254740992.0)
    return pe__fail(PE_ERR_PARSE, "%s: %s%s must be a positive integer, got %g", FN, where, key, d);
  *out = (int64_t)d;
  return PE_OK;
}

pe_status pe__json_need(int found, const char *where, const char *key, const char *why) {
  if (found) return PE_OK;
  return pe__fail(PE_ERR_PARSE, "%s: config.json lacks %s%s (%s)", FN, where, key, why);
}

/* Parse len bytes of config.json into *root (an object). */
pe_status pe__json_parse(const char *json, size_t len, cJSON **root) {
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
                            pe__json_type(r));
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
const cJSON *pe__json_text_root(const cJSON *root, const char **model_type) {
  const cJSON *r = root;
  const cJSON *tc = pe__json_get(root, "text_config");
  if (tc && cJSON_IsObject(tc) && !pe__json_get(root, "rope_parameters") && !pe__json_get(root, "rope_scaling") &&
      !pe__json_get(root, "rope_theta") && !pe__json_get(root, "hidden_size") && !pe__json_get(root, "head_dim"))
    r = tc;
  const cJSON *mt = pe__json_get(r, "model_type");
  if (!(mt && cJSON_IsString(mt))) mt = pe__json_get(root, "model_type");
  *model_type = (mt && cJSON_IsString(mt)) ? mt->valuestring : "";
  return r;
}

/* A boolean-ish key (true/false or a number: Llama-4-Scout ships
 * "attn_temperature_tuning": 4, which Python treats as true). */
int pe__json_flag(const cJSON *obj, const char *key, int dflt) {
  const cJSON *v = pe__json_get(obj, key);
  if (!v) return dflt;
  if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
  if (cJSON_IsNumber(v)) return v->valuedouble != 0.0;
  return dflt;
}

int pe__str_in(const char *model_type, const char *const *names) {
  for (; *names; names++)
    if (strcmp(model_type, *names) == 0) return 1;
  return 0;
}

