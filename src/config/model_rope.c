/* model_rope.c - the rotation of every layer of a model from its
 * config.json (pe_model_rope_from_hf_config and its accessors), and the
 * one-rotation loader pe_rope_cache_create_from_hf_config, which is the
 * same build for a model whose layers all rotate alike. */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config/model_layers.h"

/* ======================================================================== */
/* RoPE per layer                                                           */
/* ======================================================================== */

/* The roles a layer may rotate (pe_rope_role). */
#define N_ROLES 3

/* How one role's QK-norm reads (model-wide; per layer only Llama 4's
 * RoPE-layers-only rule). refusal: why pe_qk_norm cannot express it. */
typedef struct role_qk {
  pe_qk_norm_kind kind;
  pe_qk_norm_scope scope;
  double eps;
  int rope_layers_only;
  const char *refusal;
  char eps_problem[128];    /* why the config gives no eps ("" = none): "lacks ..." */
} role_qk;

struct pe_model_rope {
  int32_t n_layers, n_caches;
  pe_rope_cache **caches;    /* the distinct caches */
  int32_t *role_cache;       /* [n_layers * N_ROLES]: index into caches, -1 = no rotation */
  unsigned char *tuned;      /* [n_layers]: Llama 4 temperature tuning */
  unsigned char *attention;  /* [n_layers]: softmax attention (not linear attention, mamba) */
  int32_t heads, kv_heads;   /* 0 = not in the config */
  int pairing_guessed;
  double floor_scale, attn_scale;
  /* Where each role's channels sit (q_head_dim, q_offset, k_head_dim,
   * k_offset) and its slice flags; the rotary_dim is the layer's cache's. */
  int32_t slice[N_ROLES][4];
  uint32_t slice_flags[N_ROLES];
  role_qk qk[N_ROLES];
  double latent_eps;
};

static void model_free(pe_model_rope *m) {
  if (!m) return;
  for (int32_t i = 0; m->caches && i < m->n_caches; i++) pe_rope_cache_destroy(m->caches[i]);
  pe__free(m->caches);
  pe__free(m->role_cache);
  pe__free(m->tuned);
  pe__free(m->attention);
  pe__free(m);
}

static int same_layer_spec(const layer_rope *a, const layer_rope *b) {
  return a->dict == b->dict && a->base_override == b->base_override &&
         a->force_default == b->force_default && a->head_dim_key == b->head_dim_key &&
         a->style_override == b->style_override && a->attn_default == b->attn_default &&
         a->base_forced == b->base_forced &&
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

/* One (layer, role) rotation to build. */
typedef struct role_spec {
  int32_t layer, role;
  layer_rope lr;
} role_spec;

/* The index of spec's cache in m->caches, building it (or finding an equal
 * one) once per distinct spec. built[k] holds the spec cache k came from. */
static pe_status cache_of(pe_model_rope *m, const cJSON *tr, const char *mt, const layer_rope *lr,
                          layer_rope *built, int32_t *n_built, int32_t *built_cache,
                          int64_t max_positions, int64_t seq_len, int32_t *out) {
  for (int32_t j = 0; j < *n_built; j++)
    if (same_layer_spec(lr, &built[j])) {
      *out = built_cache[j];
      return PE_OK;
    }
  pe_rope_cache *c = NULL;
  pe_status st = pe__hf_cache_for(tr, mt, lr, max_positions, seq_len, &c);
  if (st != PE_OK) return st;
  int32_t k;
  for (k = 0; k < m->n_caches; k++)
    if (same_cache(c, m->caches[k])) break;
  if (k < m->n_caches)
    pe_rope_cache_destroy(c);
  else
    m->caches[m->n_caches++] = c;
  built[*n_built] = *lr;
  built_cache[(*n_built)++] = k;
  *out = k;
  return PE_OK;
}

/* A count key with the class default dflt. */
static pe_status count_or(const cJSON *tr, const char *key, int64_t dflt, int64_t *out) {
  int found;
  pe_status st = pe__json_count(tr, "", key, out, &found);
  if (st == PE_OK && !found) *out = dflt;
  return st;
}

/* Where each role's channels sit (pe_rope_slice without rotary_dim). */
static pe_status fill_slices(pe_model_rope *m, const cJSON *tr, const model_info *mi) {
  pe_status st;
  int64_t nope = 128, rope = 64, latent = 512, ihd = 128, hd = 512;
  if (!mi || mi->slice == SLICE_HEAD_FIRST) return PE_OK; /* from the cache at query time */
  if (mi->slice == SLICE_MLA) {
    /* DeepseekV3Config: qk_nope_head_dim 128, kv_lora_rank 512;
     * GlmMoeDsaConfig / Glm4MoeLiteConfig: 192, 512; index_head_dim 128. */
    int glm = strcmp(mi->type, "glm_moe_dsa") == 0 || strcmp(mi->type, "glm4_moe_lite") == 0;
    if ((st = count_or(tr, "qk_nope_head_dim", glm ? 192 : 128, &nope)) != PE_OK) return st;
    if ((st = count_or(tr, "qk_rope_head_dim", 64, &rope)) != PE_OK) return st;
    if ((st = count_or(tr, "kv_lora_rank", 512, &latent)) != PE_OK) return st;
    if ((st = count_or(tr, "index_head_dim", 128, &ihd)) != PE_OK) return st;
    if (nope + rope > PE_MAX_HEAD_DIM || latent + rope > PE_MAX_HEAD_DIM || ihd < rope ||
        ihd > PE_MAX_HEAD_DIM)
      return pe__fail(PE_ERR_PARSE, "%s: qk_nope_head_dim %" PRId64 ", kv_lora_rank %" PRId64
                      ", index_head_dim %" PRId64 " with qk_rope_head_dim %" PRId64
                      " do not make heads of at most %d channels holding the rope part", FN, nope,
                      latent, ihd, rope, PE_MAX_HEAD_DIM);
    int32_t *a = m->slice[PE_ROPE_ROLE_ATTENTION], *x = m->slice[PE_ROPE_ROLE_INDEXER];
    a[0] = (int32_t)(nope + rope), a[1] = (int32_t)nope, a[2] = (int32_t)(latent + rope), a[3] = (int32_t)latent;
    x[0] = (int32_t)ihd, x[1] = 0, x[2] = (int32_t)ihd, x[3] = 0;
    return PE_OK;
  }
  /* DeepSeek-V4: the last span channels of head_dim (512) and of
   * index_head_dim (128); the span is the caches' head_dim. */
  if ((st = count_or(tr, "head_dim", mi->head_dim, &hd)) != PE_OK) return st;
  if ((st = count_or(tr, "index_head_dim", 128, &ihd)) != PE_OK) return st;
  int32_t span = 0;
  for (int32_t i = 0; i < m->n_layers * N_ROLES && !span; i++)
    if (m->role_cache[i] >= 0) span = m->caches[m->role_cache[i]]->p.head_dim;
  if (ihd < span)
    return pe__fail(PE_ERR_PARSE, "%s: index_head_dim %" PRId64 " cannot hold the %d rotated "
                    "channels", FN, ihd, (int)span);
  if (ihd > PE_MAX_HEAD_DIM)
    return pe__fail(PE_ERR_PARSE, "%s: index_head_dim %" PRId64 " is above %d, the longest row "
                    "this library rotates", FN, ihd, PE_MAX_HEAD_DIM);
  int32_t *a = m->slice[PE_ROPE_ROLE_ATTENTION], *x = m->slice[PE_ROPE_ROLE_INDEXER],
          *c = m->slice[PE_ROPE_ROLE_COMPRESSOR];
  a[0] = a[2] = (int32_t)hd, a[1] = a[3] = (int32_t)hd - span;
  x[0] = x[2] = (int32_t)ihd, x[1] = x[3] = (int32_t)ihd - span;
  c[0] = c[1] = 0, c[2] = (int32_t)hd, c[3] = (int32_t)hd - span;
  m->slice_flags[PE_ROPE_ROLE_ATTENTION] = PE_SLICE_DEROTATE_OUTPUT;
  return PE_OK;
}

/* Role q's epsilon: the config's `key`, or dflt (its config class's
 * default, models.def qk_eps_default) when the config does not set it
 * (absent or null, as everywhere in the loaders). A config without it whose
 * class has no default (dflt 0), or a value that is not a finite float32
 * >= 0, leaves a phrase in q->eps_problem, which pe_model_rope_layer_qk_norm
 * refuses with. */
static void qk_eps(const cJSON *tr, const char *key, double dflt, role_qk *q) {
  char *why = q->eps_problem;
  size_t n = sizeof q->eps_problem;
  const cJSON *v = pe__json_get(tr, key);
  if (!v) {
    if (dflt > 0.0)
      q->eps = dflt;
    else
      snprintf(why, n, "lacks %s and its config class has no default for it", key);
  } else if (cJSON_IsString(v)) {
    snprintf(why, n, "has %s \"%.40s\" (a string), not a number", key, v->valuestring);
  } else if (cJSON_IsBool(v)) {
    snprintf(why, n, "has %s %s, not a number", key, cJSON_IsTrue(v) ? "true" : "false");
  } else if (!cJSON_IsNumber(v)) {
    snprintf(why, n, "has %s as %s, not a number", key, pe__json_type(v));
  } else if (!(v->valuedouble >= 0.0 && v->valuedouble <= FLT_MAX)) {
    snprintf(why, n, "has %s %g, not a finite float32 >= 0", key, v->valuedouble);
  } else {
    q->eps = v->valuedouble;
  }
}

/* The QK-norm of each role. */
static void fill_qk(pe_model_rope *m, const cJSON *tr, const model_info *mi) {
  for (int r = 0; r < N_ROLES; r++) {
    m->qk[r].kind = PE_QK_NORM_NONE;
    m->qk[r].scope = PE_QK_NORM_PER_HEAD;
    m->qk[r].eps = 1e-6;
  }
  if (!mi) return;
  role_qk *a = &m->qk[PE_ROPE_ROLE_ATTENTION];
  const char *eps_key = mi->qk_eps_key;
  int on = mi->qk_when ? pe__json_flag(tr, mi->qk_when, mi->qk_when_default) : 1;
  if (on) {
    switch (mi->qk) {
      case QK_NONE: break;
      case QK_RMS: a->kind = PE_QK_NORM_RMS; break;
      case QK_RMS_UNIT: a->kind = PE_QK_NORM_RMS_UNIT_OFFSET; break;
      case QK_L2: a->kind = PE_QK_NORM_L2; break;
      case QK_V4: a->kind = PE_QK_NORM_RMS; break;
      case QK_LAYERNORM:
        a->refusal = "a LayerNorm of q and k per head (mean subtracted), which pe_qk_norm does not "
                     "compute";
        break;
      case QK_AFTER_ROPE:
        a->refusal = "an RMS norm applied after the rotation, the reverse of pe_qk_norm_rope's order";
        break;
      case QK_UNREAD:
        a->refusal = "not known: libposenc's census has not read this model type's attention "
                     "class for it";
        break;
    }
    a->scope = mi->qk_scope == QKS_TOKEN ? PE_QK_NORM_PER_TOKEN : PE_QK_NORM_PER_HEAD;
    a->rope_layers_only = mi->layers_rule == LAYERS_LLAMA4 && mi->qk == QK_L2;
  }
  if (mi->roles == ROLES_DSA_V32 || mi->roles == ROLES_DSA_GLM5)
    m->qk[PE_ROPE_ROLE_INDEXER].refusal =
        "the indexer's k_norm, a LayerNorm (mean subtracted, with bias, eps 1e-6), which "
        "pe_qk_norm does not compute; its q has none";
  if (mi->roles == ROLES_V4) {
    /* The compressors' kv_norm: RMS with weight over the entry (no query),
     * DeepseekV4RMSNorm(eps=config.rms_norm_eps) like the attention's: the
     * same key and DeepseekV4Config's default for it. */
    m->qk[PE_ROPE_ROLE_COMPRESSOR].kind = PE_QK_NORM_RMS;
    m->qk[PE_ROPE_ROLE_INDEXER].kind = PE_QK_NORM_RMS;
    eps_key = "rms_norm_eps";
  }
  for (int r = 0; r < N_ROLES; r++)
    if (m->qk[r].kind != PE_QK_NORM_NONE && eps_key)
      qk_eps(tr, eps_key, mi->qk_eps_default, &m->qk[r]);
}

/* Build the model. single: called for pe_rope_cache_create_from_hf_config
 * (a missing num_hidden_layers is then one layer). */
static pe_status model_build(const char *json, size_t len, int64_t max_positions, int64_t seq_len,
                             uint32_t flags, int single, pe_model_rope **out) {
  pe_status st;
  cJSON *root = NULL;
  pe_model_rope *m = NULL;
  const char **types = NULL;
  layer_rope *specs = NULL, *built = NULL;
  int32_t *built_cache = NULL;
  unsigned char *glm5_full = NULL;
  if ((st = pe__json_parse(json, len, &root)) != PE_OK) return st;
  const char *dummy;
  const cJSON *tr = pe__json_text_root(root, &dummy);
  const char *mt;
  const model_info *mi = pe__resolve_type(root, tr, &mt);
  int found;
  int64_t n = 0;
  if (!mi && !(flags & PE_CONFIG_GUESS)) {
    st = pe__fail(PE_ERR_UNSUPPORTED,
                  "%s: model_type \"%s\" is not in libposenc's table (docs/pages/models.md), so its "
                  "pairing, rotated width and layer layout are not known: pass PE_CONFIG_GUESS to "
                  "load it with half-split pairs and the file's partial_rotary_factor / rotary_dim, "
                  "after checking its modeling code", FN, mt);
    goto done;
  }
  if ((st = pe__check_position_keys(tr, mi, mt)) != PE_OK) goto done;
  int no_pe = pe__attention_has_no_rope(tr, mi);
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
  int llama4_rule = mi && mi->layers_rule == LAYERS_LLAMA4;
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
  if (!no_rope && llama4_rule) {
    build_no_rope = 1;
    if ((st = pe__json_count(tr, "", "no_rope_layer_interval", &interval, &found)) != PE_OK) goto done;
    if (!found) interval = 4;
  }

  size_t cap = (size_t)n * N_ROLES;
  m = pe__malloc(sizeof *m);
  types = pe__malloc((size_t)n * sizeof *types);
  specs = pe__malloc((size_t)n * sizeof *specs);
  built = pe__malloc(cap * sizeof *built);
  built_cache = pe__malloc(cap * sizeof *built_cache);
  glm5_full = pe__malloc((size_t)n);
  if (m) memset(m, 0, sizeof *m);
  if (m) m->caches = pe__malloc(cap * sizeof *m->caches);
  if (m) m->role_cache = pe__malloc(cap * sizeof *m->role_cache);
  if (m) m->tuned = pe__malloc((size_t)n);
  if (m) m->attention = pe__malloc((size_t)n);
  if (!m || !types || !specs || !built || !built_cache || !glm5_full || !m->caches ||
      !m->role_cache || !m->tuned || !m->attention) {
    st = pe__fail(PE_ERR_OUT_OF_MEMORY, "%s: cannot allocate the model of %d layers", FN, (int)n);
    goto done;
  }
  for (size_t i = 0; i < cap; i++) m->role_cache[i] = -1;
  m->n_layers = (int32_t)n;
  m->pairing_guessed = mi == NULL;
  m->latent_eps = mi ? mi->latent_eps : 0.0;
  /* Head counts: a value above INT32_MAX is refused by name (pe_model_rope_heads
   * reports int32_t counts; no real model comes near). */
  int64_t v;
  const char *hk = "num_attention_heads";
  if ((st = pe__json_count(tr, "", hk, &v, &found)) != PE_OK) goto done;
  if (!found && (st = pe__json_count(tr, "", hk = "n_head", &v, &found)) != PE_OK) goto done;
  if (!found && mi && mi->heads > 0) v = mi->heads, found = 1;
  if (found && v > INT32_MAX) {
    st = pe__fail(PE_ERR_PARSE, "%s: %s %" PRId64 " is above %d", FN, hk, v, INT32_MAX);
    goto done;
  }
  m->heads = found ? (int32_t)v : 0;
  if ((st = pe__json_count(tr, "", "num_key_value_heads", &v, &found)) != PE_OK) goto done;
  if (!found && mi && mi->kv_heads > 0) v = mi->kv_heads, found = 1;
  if (found && v > INT32_MAX) {
    st = pe__fail(PE_ERR_PARSE, "%s: num_key_value_heads %" PRId64 " is above %d", FN, v, INT32_MAX);
    goto done;
  }
  m->kv_heads = found ? (int32_t)v : m->heads;
  /* Llama 4: attn_temperature_tuning (Llama4TextConfig default true), floor_scale 8192, attn_scale 0.1. */
  int tuning = llama4_rule && strncmp(mt, "llama4", 6) == 0 &&
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
  if ((st = pe__layer_types(tr, mt, (int32_t)n, types)) != PE_OK) goto done;

  /* The roles beside the attention. */
  model_roles roles = mi ? mi->roles : ROLES_ATTN;
  int idx_style = -1;
  if (roles == ROLES_DSA_V32 && (st = pe__indexer_style(tr, 0, &idx_style)) != PE_OK) goto done;
  if (roles == ROLES_DSA_GLM5) {
    if ((st = pe__indexer_style(tr, 1, &idx_style)) != PE_OK) goto done;
    if ((st = pe__glm5_indexer_layers(tr, (int32_t)n, glm5_full)) != PE_OK) goto done;
  }
  layer_rope v4_main, v4_comp;
  if (roles == ROLES_V4 && (st = pe__v4_specs(tr, &v4_main, &v4_comp)) != PE_OK) goto done;

  int32_t n_built = 0;
  for (int32_t i = 0; i < (int32_t)n; i++) {
    if (roles == ROLES_V4) {
      /* V4's rotations are v4_main / v4_comp (its rope_parameters are keyed
       * by rope, not by layer type). */
      memset(&specs[i], 0, sizeof specs[i]);
      specs[i].attention = 1;
      specs[i].style_override = -1;
    } else if ((st = pe__resolve_layer(tr, mt, types[i], i, no_rope, &specs[i])) != PE_OK) {
      goto done;
    }
    if (no_pe) specs[i].nope = 1;
    if (build_no_rope && (i + 1) % interval == 0) specs[i].nope = 1;
    m->tuned[i] = (unsigned char)(tuning && specs[i].nope && specs[i].attention);
    m->attention[i] = (unsigned char)(specs[i].attention != 0);
    if (specs[i].nope) continue;
    int32_t *rc = &m->role_cache[(size_t)i * N_ROLES];
    if (roles == ROLES_V4) {
      int sliding = strcmp(types[i], "sliding_attention") == 0;
      int csa = strcmp(types[i], "compressed_sparse_attention") == 0;
      if (!sliding && !csa && strcmp(types[i], "heavily_compressed_attention") != 0) {
        st = pe__fail(PE_ERR_PARSE, "%s: layer_types[%d] \"%s\" is not a DeepSeek-V4 layer type "
                      "(sliding_attention, compressed_sparse_attention, "
                      "heavily_compressed_attention)", FN, (int)i, types[i]);
        goto done;
      }
      const layer_rope *att = sliding ? &v4_main : &v4_comp;
      if ((st = cache_of(m, tr, mt, att, built, &n_built, built_cache, max_positions, seq_len,
                         &rc[PE_ROPE_ROLE_ATTENTION])) != PE_OK)
        goto done;
      if (!sliding && (st = cache_of(m, tr, mt, &v4_comp, built, &n_built, built_cache,
                                     max_positions, seq_len, &rc[PE_ROPE_ROLE_COMPRESSOR])) != PE_OK)
        goto done;
      if (csa && (st = cache_of(m, tr, mt, &v4_comp, built, &n_built, built_cache, max_positions,
                                seq_len, &rc[PE_ROPE_ROLE_INDEXER])) != PE_OK)
        goto done;
      continue;
    }
    if ((st = cache_of(m, tr, mt, &specs[i], built, &n_built, built_cache, max_positions, seq_len,
                       &rc[PE_ROPE_ROLE_ATTENTION])) != PE_OK)
      goto done;
    if (roles == ROLES_DSA_V32 || (roles == ROLES_DSA_GLM5 && glm5_full[i])) {
      /* The indexer rotates with the attention's cos/sin (same rope
       * parameters), paired as indexer_rope_interleave says. */
      layer_rope x = specs[i];
      x.style_override = idx_style;
      if ((st = cache_of(m, tr, mt, &x, built, &n_built, built_cache, max_positions, seq_len,
                         &rc[PE_ROPE_ROLE_INDEXER])) != PE_OK)
        goto done;
    }
  }
  if ((st = fill_slices(m, tr, mi)) != PE_OK) goto done;
  fill_qk(m, tr, mi);
  if (single) {
    if (no_pe) {
      st = pe__fail(PE_ERR_UNSUPPORTED,
                    "%s: model_type \"%s\": its attention applies no positional encoding (no "
                    "rotary embedding in transformers' attention class%s), so there is no cache "
                    "to build", FN, mt,
                    mi && mi->layers_rule == LAYERS_GRANITE_HYBRID
                        ? ": position_embedding_type is not \"rope\""
                    : mi && mi->layers_rule == LAYERS_FALCON ? ": alibi is true"
                    : pe__json_get(tr, "mla_use_nope") ? ": mla_use_nope" : "");
      goto done;
    }
    if (roles != ROLES_ATTN) {
      st = pe__fail(PE_ERR_UNSUPPORTED,
                    "%s: model_type \"%s\" rotates %s beside its attention in each layer: one "
                    "cache cannot represent it; use pe_model_rope_from_hf_config and "
                    "pe_model_rope_layer_role / pe_model_rope_layer_slice", FN, mt,
                    roles == ROLES_V4 ? "a compressor and an indexer (index_head_dim)"
                                      : "a sparse-attention indexer (index_head_dim)");
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
  pe__free(built);
  pe__free(built_cache);
  pe__free(glm5_full);
  cJSON_Delete(root);
  return st;
}

static pe_status check_flags(uint32_t flags) {
  if (flags & ~(uint32_t)PE_CONFIG_GUESS)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: flags 0x%x has bits other than PE_CONFIG_GUESS "
                    "(0x%x)", FN, (unsigned)flags, (unsigned)PE_CONFIG_GUESS);
  return PE_OK;
}

PE_API pe_status pe_rope_cache_create_from_hf_config(const char *json, size_t len,
                                                     int64_t max_positions, int64_t seq_len,
                                                     uint32_t flags, pe_rope_cache **out) {
  pe__hf_fn = "pe_rope_cache_create_from_hf_config";
  if (!json) return pe__fail(PE_ERR_NULL_POINTER, "%s: json is NULL", FN);
  if (!out) return pe__fail(PE_ERR_NULL_POINTER, "%s: out is NULL", FN);
  if (seq_len < 0)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: seq_len %" PRId64 " must be >= 0 (0 = "
                    "max_position_embeddings)", FN, seq_len);
  if (max_positions < 0 || max_positions > PE_MAX_POSITION)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: max_positions %" PRId64 " must be in [0, 2^53]",
                    FN, max_positions);
  pe_status st = check_flags(flags);
  if (st != PE_OK) return st;
  pe_model_rope *m = NULL;
  st = model_build(json, len, max_positions, seq_len, flags, 1, &m);
  if (st != PE_OK) return st;
  /* Exactly one cache: hand it over. */
  *out = m->caches[0];
  m->n_caches = 0;
  model_free(m);
  return PE_OK;
}

PE_API pe_status pe_model_rope_from_hf_config(const char *json, size_t len, int64_t max_positions,
                                              int64_t seq_len, uint32_t flags,
                                              pe_model_rope **out) {
  pe__hf_fn = "pe_model_rope_from_hf_config";
  pe_status st = PE_OK;
  if (!json) st = pe__fail(PE_ERR_NULL_POINTER, "%s: json is NULL", FN);
  else if (!out) st = pe__fail(PE_ERR_NULL_POINTER, "%s: out is NULL", FN);
  else if (seq_len < 0)
    st = pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: seq_len %" PRId64 " must be >= 0 (0 = "
                  "max_position_embeddings)", FN, seq_len);
  else if ((max_positions < 0 && max_positions != PE_MAX_POSITIONS_FROM_CONFIG) ||
           max_positions > PE_MAX_POSITION)
    st = pe__fail(PE_ERR_INVALID_ARGUMENT,
                  "%s: max_positions %" PRId64 " must be in [0, 2^53] or "
                  "PE_MAX_POSITIONS_FROM_CONFIG (-1)", FN, max_positions);
  else if ((st = check_flags(flags)) == PE_OK)
    st = model_build(json, len, max_positions, seq_len, flags, 0, out);
  pe__hf_fn = "pe_rope_cache_create_from_hf_config";
  return st;
}

PE_API int32_t pe_model_rope_num_layers(const pe_model_rope *m) { return m ? m->n_layers : -1; }

/* m non-NULL, layer and role in range; else the reason in pe_last_error(). */
static pe_status check_layer_role(const char *fn, const pe_model_rope *m, int32_t layer,
                                  int32_t role) {
  if (!m) return pe__fail(PE_ERR_NULL_POINTER, "%s: model is NULL", fn);
  if (layer < 0 || layer >= m->n_layers)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: layer %d is outside [0, %d)", fn, (int)layer,
                    (int)m->n_layers);
  if (role < 0 || role >= N_ROLES)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: role %d is not a pe_rope_role (0 attention, 1 "
                    "indexer, 2 compressor)", fn, (int)role);
  return PE_OK;
}

PE_API const pe_rope_cache *pe_model_rope_layer_role(const pe_model_rope *m, int32_t layer,
                                                     int32_t role) {
  if (check_layer_role("pe_model_rope_layer_role", m, layer, role) != PE_OK) return NULL;
  int32_t k = m->role_cache[(size_t)layer * N_ROLES + (size_t)role];
  return k < 0 ? NULL : m->caches[k];
}

PE_API const pe_rope_cache *pe_model_rope_layer(const pe_model_rope *m, int32_t layer) {
  if (check_layer_role("pe_model_rope_layer", m, layer, PE_ROPE_ROLE_ATTENTION) != PE_OK) return NULL;
  int32_t k = m->role_cache[(size_t)layer * N_ROLES];
  return k < 0 ? NULL : m->caches[k];
}

PE_API void pe_rope_slice_init(pe_rope_slice *s) {
  if (!s) return;
  memset(s, 0, sizeof *s);
  s->struct_size = (uint32_t)sizeof *s;
}

/* An accessor's arguments: the layer and role, and an out struct whose
 * first field is its struct_size, at least `need` bytes (its init: `init`). */
static pe_status check_out(const char *fn, const pe_model_rope *m, int32_t layer, int32_t role,
                           const uint32_t *out_size, size_t need, const char *init) {
  pe_status st = check_layer_role(fn, m, layer, role);
  if (st != PE_OK) return st;
  if (!out_size) return pe__fail(PE_ERR_NULL_POINTER, "%s: out is NULL", fn);
  if (*out_size < need)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: out->struct_size %u is below this layout's %zu "
                    "(call %s)", fn, (unsigned)*out_size, need, init);
  return PE_OK;
}

PE_API pe_status pe_model_rope_layer_slice(const pe_model_rope *m, int32_t layer, int32_t role,
                                           pe_rope_slice *out) {
  pe_status st = check_out("pe_model_rope_layer_slice", m, layer, role,
                           out ? &out->struct_size : NULL, sizeof *out, "pe_rope_slice_init");
  if (st != PE_OK) return st;
  pe_rope_slice s;
  memset(&s, 0, sizeof s);
  s.struct_size = (uint32_t)sizeof s;
  int32_t k = m->role_cache[(size_t)layer * N_ROLES + (size_t)role];
  if (k >= 0) {
    const pe_rope_params *p = &m->caches[k]->p;
    const int32_t *sl = m->slice[role];
    if (sl[2] == 0) {
      /* The head is the span: offsets 0. */
      s.q_head_dim = s.k_head_dim = p->head_dim;
    } else {
      s.q_head_dim = sl[0], s.q_offset = sl[1], s.k_head_dim = sl[2], s.k_offset = sl[3];
    }
    s.rotary_dim = p->rotary_dim;
    s.flags = m->slice_flags[role];
  }
  memcpy(out, &s, sizeof s);
  return PE_OK;
}

PE_API pe_status pe_model_rope_layer_qk_norm(const pe_model_rope *m, int32_t layer, int32_t role,
                                             pe_qk_norm *out) {
  static const char fn[] = "pe_model_rope_layer_qk_norm";
  pe_status st = check_out(fn, m, layer, role, out ? &out->struct_size : NULL, sizeof *out,
                           "pe_qk_norm_init");
  if (st != PE_OK) return st;
  const role_qk *q = &m->qk[role];
  int rotates = m->role_cache[(size_t)layer * N_ROLES + (size_t)role] >= 0;
  /* The attention's norm also runs on its layers without RoPE (EXAONE 4's
   * global layers), except Llama 4's, which norms its RoPE layers only;
   * never on a layer that is not softmax attention. */
  int applies = rotates || (role == PE_ROPE_ROLE_ATTENTION && !q->rope_layers_only &&
                            m->attention[layer]);
  if (q->refusal && rotates)
    return pe__fail(PE_ERR_UNSUPPORTED, "%s: layer %d's %s norm is %s", fn, (int)layer,
                    role == PE_ROPE_ROLE_INDEXER ? "indexer" : "QK", q->refusal);
  pe_qk_norm n;
  pe_qk_norm_init(&n);
  if (applies && q->kind != PE_QK_NORM_NONE) {
    if (q->eps_problem[0])
      return pe__fail(PE_ERR_PARSE, "%s: the epsilon of layer %d's %s norm: config.json %s", fn,
                      (int)layer, role == PE_ROPE_ROLE_ATTENTION ? "QK"
                                  : role == PE_ROPE_ROLE_INDEXER ? "indexer" : "compressor",
                      q->eps_problem);
    n.kind = q->kind;
    n.scope = q->scope;
    n.eps = (float)q->eps;
  }
  memcpy(out, &n, sizeof n);
  return PE_OK;
}

PE_API pe_status pe_model_rope_latent_norm_eps(const pe_model_rope *m, double *latent_eps) {
  if (!m) return pe__fail(PE_ERR_NULL_POINTER, "pe_model_rope_latent_norm_eps: model is NULL");
  if (!latent_eps) return pe__fail(PE_ERR_NULL_POINTER, "pe_model_rope_latent_norm_eps: latent_eps is NULL");
  *latent_eps = m->latent_eps;
  return PE_OK;
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
