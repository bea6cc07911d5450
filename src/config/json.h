/* json.h - JSON helpers of the config loaders (json.c). */
#ifndef PE_CONFIG_JSON_H
#define PE_CONFIG_JSON_H

#include <cjson/cJSON.h>

#include "check/check.h"

/* The public entry point a message names (set by each loader on entry). */
extern PE_HIDDEN _Thread_local const char *pe__hf_fn;
#define FN pe__hf_fn

/* obj.key, or NULL when absent or JSON null (getattr(..., None)). */
PE_HIDDEN const cJSON *pe__json_get(const cJSON *obj, const char *key);
/* "a string", "an array", ... for messages. */
PE_HIDDEN const char *pe__json_type(const cJSON *v);
/* where.key as a finite double; *found 0 when not set. */
PE_HIDDEN pe_status pe__json_number(const cJSON *obj, const char *where, const char *key,
                                    double *out, int *found);
/* where.key as an integer in [1, 2^53]; *found 0 when not set. */
PE_HIDDEN pe_status pe__json_count(const cJSON *obj, const char *where, const char *key,
                                   int64_t *out, int *found);
/* PE_ERR_PARSE "config.json lacks where.key (why)" unless found. */
PE_HIDDEN pe_status pe__json_need(int found, const char *where, const char *key, const char *why);
/* A boolean-ish key: true/false or a number (non-zero true); dflt when not set. */
PE_HIDDEN int pe__json_flag(const cJSON *obj, const char *key, int dflt);
/* Parse len bytes of config.json into *root (an object). */
PE_HIDDEN pe_status pe__json_parse(const char *json, size_t len, cJSON **root);
/* The object holding the language model's keys (the top level or
 * text_config), and its model_type ("" when none). */
PE_HIDDEN const cJSON *pe__json_text_root(const cJSON *root, const char **model_type);
/* s is one of the NULL-terminated names. */
PE_HIDDEN int pe__str_in(const char *s, const char *const *names);

#endif
