/* model.c - the models pe-bench knows by name, the geometry a case uses
 * (a preset, its overrides, or a HuggingFace config.json loaded by the
 * library) and the rope cache built from it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pe_bench.h"

/* Published configurations: each row's numbers are those of the config.json
 * of the model named in `source` on the Hugging Face hub. heads/kv_heads are
 * the query and key heads a RoPE call rotates, head_dim their channels,
 * rotary_dim the rotated ones (the first rotary_dim of a head). */
#define NO_SCALING PE_ROPE_SCALING_NONE, 1.0, 0, 0, 0, 0, 0, {0, 0, 0, 0, 0}
const model_preset pb_models[] = {
    {"llama3-8b", 32, 8, 128, 128, PE_ROPE_NEOX, 500000.0, NO_SCALING, "Meta-Llama-3-8B", NULL},
    {"llama3-70b", 64, 8, 128, 128, PE_ROPE_NEOX, 500000.0, NO_SCALING, "Meta-Llama-3-70B", NULL},
    {"qwen2.5-7b", 28, 4, 128, 128, PE_ROPE_NEOX, 1000000.0, NO_SCALING, "Qwen2.5-7B", NULL},
    {"qwen3-8b", 32, 8, 128, 128, PE_ROPE_NEOX, 1000000.0, NO_SCALING, "Qwen3-8B", NULL},
    {"mistral-7b", 32, 8, 128, 128, PE_ROPE_NEOX, 1000000.0, NO_SCALING, "Mistral-7B-v0.3", NULL},
    {"phi3-mini", 32, 32, 96, 96, PE_ROPE_NEOX, 10000.0, NO_SCALING, "Phi-3-mini-4k-instruct",
     NULL},
    {"gemma-3-27b", 32, 16, 128, 128, PE_ROPE_NEOX, 1000000.0, PE_ROPE_SCALING_LINEAR, 8.0, 0, 0, 0,
     0, 0, {0, 0, 0, 0, 0}, "gemma-3-27b-it (text_config)",
     "the global layers' rope (rope_theta 1e6, Gemma3TextConfig's default, linear x8); the "
     "sliding-window layers (5 of 6) use theta 1e4 unscaled, at the same cost"},
    {"deepseek-v3", 128, 1, 192, 64, PE_ROPE_GPTJ, 10000.0, PE_ROPE_SCALING_YARN, 40.0, 4096, 32.0,
     1.0, 1.0, 1.0, {1536, 512, 128, 64, 128}, "DeepSeek-V3",
     "MLA: q heads of qk_nope 128 + qk_rope 64 = 192 channels, 64 rotated (interleaved pairs); "
     "k's rope part is one 64-channel head shared by the 128 heads (kv_a row: 512 latent + 64)"},
    {"olmo2-7b", 32, 32, 128, 128, PE_ROPE_NEOX, 500000.0, NO_SCALING, "OLMo-2-1124-7B",
     "q_norm and k_norm: RMSNorms over each token's 4096 q and 4096 k channels (the qknorm "
     "suite's per-token norm)"},
    {"llama4-scout", 40, 8, 128, 128, PE_ROPE_GPTJ, 500000.0, NO_SCALING,
     "Llama-4-Scout-17B-16E (text_config)",
     "interleaved pairs; its rope_scaling (llama3, factor 16, low/high_freq_factor 1) changes "
     "the table's values, not the cost, and is left out; every 4th layer has no rope; the "
     "qknorm suite's L2 QK-norm (no weight)"},
    {"gpt-j", 16, 16, 256, 64, PE_ROPE_GPTJ, 10000.0, NO_SCALING, "GPT-J-6B (rotary_dim 64)", NULL},
    {"neox-20b", 64, 64, 96, 24, PE_ROPE_NEOX, 10000.0, NO_SCALING,
     "GPT-NeoX-20B (rotary_pct 0.25)", NULL},
};
const int pb_n_models = (int)(sizeof pb_models / sizeof pb_models[0]);

const model_preset *model_find(const char *name) {
  for (int m = 0; m < pb_n_models; m++)
    if (!strcmp(name, pb_models[m].name)) return &pb_models[m];
  return NULL;
}

static const char *scaling_name(pe_rope_scaling s) {
  static const char *const names[] = {"default", "linear", "ntk", "dynamic", "yarn",
                                      "longrope", "llama3", "proportional", "custom"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

void models_list(FILE *f) {
  fprintf(f, "%-12s %5s %4s %8s %7s %5s %8s  %-10s %s\n", "--model", "heads", "kv", "head_dim",
          "rotary", "pairs", "theta", "scaling", "config.json of");
  for (int i = 0; i < pb_n_models; i++) {
    const model_preset *m = &pb_models[i];
    char sc[16] = "-";
    if (m->scaling != PE_ROPE_SCALING_NONE)
      snprintf(sc, sizeof sc, "%s x%g", scaling_name(m->scaling), m->factor);
    fprintf(f, "%-12s %5d %4d %8d %7d %5s %8g  %-10s %s\n", m->name, m->heads, m->kv_heads,
            m->head_dim, m->rotary_dim, m->style == PE_ROPE_GPTJ ? "gptj" : "neox", m->base, sc,
            m->source);
    for (const char *r = m->remark; r && *r;) { /* wrapped at 100 columns */
      int n = (int)strlen(r);
      if (n > 86) {
        n = 86;
        while (n > 0 && r[n] != ' ') n--;
      }
      fprintf(f, "%-13s%.*s\n", "", n, r);
      r += n;
      while (*r == ' ') r++;
    }
  }
}

rope_geom geometry(void) {
  const model_preset *m = opt.model;
  rope_geom g = {m->heads, m->kv_heads, m->head_dim, m->rotary_dim, m->style, m->base,
                 m->scaling != PE_ROPE_SCALING_NONE ? m : NULL};
  if (opt.heads) g.heads = opt.heads;
  if (opt.kv_heads) g.kv_heads = opt.kv_heads;
  if (opt.head_dim) g.head_dim = opt.head_dim, g.rotary_dim = opt.head_dim;
  if (opt.rotary_dim) g.rotary_dim = opt.rotary_dim;
  if (opt.style >= 0) g.style = (pe_rope_style)opt.style;
  return g;
}

int geometry_overridden(void) {
  const model_preset *m = opt.model;
  rope_geom g = geometry();
  return g.heads != m->heads || g.kv_heads != m->kv_heads || g.head_dim != m->head_dim ||
         g.rotary_dim != m->rotary_dim || g.style != m->style;
}

const char *model_label(void) {
  static char label[32];
  if (!opt.hf_config) return geometry_overridden() ? "custom" : opt.model->name;
  const char *base = strrchr(opt.hf_config, '/');
  base = base ? base + 1 : opt.hf_config;
  size_t n = strcspn(base, ".");
  snprintf(label, sizeof label, "%.*s", (int)(n < 24 ? n : 24), base);
  return label;
}

void geometry_shape(const rope_geom *g, char *out, size_t len) {
  char rot[16] = "";
  if (g->rotary_dim != g->head_dim) snprintf(rot, sizeof rot, " rot%d", g->rotary_dim);
  snprintf(out, len, "%dq/%dkv x%d%s %s", g->heads, g->kv_heads, g->head_dim, rot,
           g->style == PE_ROPE_NEOX ? "neox" : "gptj");
}

/* --hf-config: the model the library loads from the file, kept for the run
 * (hf_load, before any suite). */
static pe_model_rope *hf_model;

/* Layers [0, n) for which pick(i) holds, as "0-4,6,8-10". */
static void layer_list(const pe_model_rope *m, const pe_rope_cache *which, int nope, char *out,
                       size_t len) {
  int32_t n = pe_model_rope_num_layers(m);
  size_t at = 0;
  out[0] = 0;
  for (int32_t i = 0; i < n;) {
    const pe_rope_cache *c = pe_model_rope_layer(m, i);
    if (nope ? c != NULL : c != which) {
      i++;
      continue;
    }
    int32_t j = i;
    while (j + 1 < n && (nope ? pe_model_rope_layer(m, j + 1) == NULL
                              : pe_model_rope_layer(m, j + 1) == which))
      j++;
    int k = j > i ? snprintf(out + at, len - at, "%s%d-%d", at ? "," : "", (int)i, (int)j)
                  : snprintf(out + at, len - at, "%s%d", at ? "," : "", (int)i);
    if (k < 0 || (size_t)k >= len - at) {
      if (len > 4) snprintf(out + len - 4, 4, "...");
      return;
    }
    at += (size_t)k;
    i = j + 1;
  }
}

/* Load --hf-config with the library and print what it loaded, per cache:
 * type, base, factor, attention factor, how many layers use it (and which),
 * then the NoPE layers. On stdout with the table output, on stderr with
 * --json/--csv (their stdout is the machine-readable result). Returns 0, or
 * 1 after one error line when the file cannot be read or used. */
int hf_load(void) {
  FILE *f = fopen(opt.hf_config, "rb");
  if (!f) {
    fprintf(stderr, "pe-bench: --hf-config %s: %s\n", opt.hf_config, strerror(errno));
    return 1;
  }
  fclose(f);
  size_t len = 0;
  char *json = read_file(opt.hf_config, &len);
  if (!json) {
    fprintf(stderr, "pe-bench: --hf-config %s: cannot read the file\n", opt.hf_config);
    return 1;
  }
  pe_status st = pe_model_rope_from_hf_config(json, len, 0, 0, 0, &hf_model);
  free(json);
  if (st != PE_OK) {
    fprintf(stderr, "pe-bench: --hf-config %s: %s\n", opt.hf_config, pe_last_error());
    return 1;
  }
  FILE *o = opt.fmt == FMT_TABLE ? stdout : stderr;
  int32_t n = pe_model_rope_num_layers(hf_model), heads = 0, kv = 0;
  pe_model_rope_heads(hf_model, &heads, &kv);
  fprintf(o, "hf-config %s: %d layers, %d query heads, %d kv heads%s\n", opt.hf_config, (int)n,
          (int)heads, (int)kv,
          pe_model_rope_pairing_guessed(hf_model) == 1 ? " (model_type unknown: pairing guessed)" : "");
  const pe_rope_cache *seen[64];
  int n_seen = 0, nope = 0;
  char list[160];
  for (int32_t i = 0; i < n; i++) {
    const pe_rope_cache *c = pe_model_rope_layer(hf_model, i);
    if (!c) {
      nope++;
      continue;
    }
    int k;
    for (k = 0; k < n_seen; k++)
      if (seen[k] == c) break;
    if (k < n_seen || n_seen == 64) continue;
    seen[n_seen++] = c;
    int uses = 0;
    for (int32_t j = 0; j < n; j++) uses += pe_model_rope_layer(hf_model, j) == c;
    pe_rope_params p;
    pe_rope_params_init(&p);
    pe_rope_cache_params(c, &p);
    layer_list(hf_model, c, 0, list, sizeof list);
    fprintf(o, "  rope %d: %s, base %g, factor %g, attention factor %.9g, head_dim %d, rotary_dim "
               "%d, %s pairs; %d layer%s (%s)\n",
            n_seen, scaling_name(p.scaling), p.base, p.factor, pe_rope_cache_attention_factor(c),
            (int)p.head_dim, (int)p.rotary_dim, p.style == PE_ROPE_GPTJ ? "interleaved" : "half-split",
            uses, uses == 1 ? "" : "s", list);
  }
  if (nope) {
    layer_list(hf_model, NULL, 1, list, sizeof list);
    fprintf(o, "  no RoPE: %d layer%s (%s)\n", nope, nope == 1 ? "" : "s", list);
  } else {
    fprintf(o, "  no RoPE: none\n");
  }
  return 0;
}

void hf_free(void) {
  pe_model_rope_destroy(hf_model);
  hf_model = NULL;
}

/* The rope cache of a case: from --hf-config (the cache most of the
 * model's layers use, with this case's table size), or from the geometry
 * and the preset's scaling. */
pe_status rope_cache_for(rope_geom *g, int64_t max_positions, pe_rope_cache **out, char *why,
                         size_t why_len) {
  if (opt.hf_config) {
    const pe_rope_cache *best = NULL;
    int best_uses = 0;
    int32_t n = pe_model_rope_num_layers(hf_model);
    for (int32_t i = 0; i < n; i++) {
      const pe_rope_cache *c = pe_model_rope_layer(hf_model, i);
      int uses = 0;
      for (int32_t j = 0; c && j < n; j++) uses += pe_model_rope_layer(hf_model, j) == c;
      if (uses > best_uses) best = c, best_uses = uses;
    }
    if (!best) {
      snprintf(why, why_len, "no layer of %s uses RoPE", opt.hf_config);
      return PE_ERR_UNSUPPORTED;
    }
    pe_rope_params p;
    pe_rope_params_init(&p);
    pe_rope_cache_params(best, &p);
    /* A PROPORTIONAL cache reports its head_dim layout, not the rotated
     * count: rebuild it from its frequencies (exact zeros) instead. */
    double inv[4096];
    if (p.scaling == PE_ROPE_SCALING_PROPORTIONAL && p.rotary_dim / 2 <= 4096) {
      float f[4096];
      pe_rope_cache_inv_freq(best, f);
      for (int32_t i = 0; i < p.rotary_dim / 2; i++) inv[i] = f[i];
      p.scaling = PE_ROPE_SCALING_CUSTOM;
      p.inv_freq = inv;
    }
    p.max_positions = max_positions;
    pe_status st = pe_rope_cache_create(&p, out);
    if (st != PE_OK) {
      snprintf(why, why_len, "%s", pe_last_error());
      return st;
    }
    int32_t heads = 0, kv = 0;
    pe_model_rope_heads(hf_model, &heads, &kv);
    if (!opt.heads && heads > 0) g->heads = heads;
    if (!opt.kv_heads && kv > 0) g->kv_heads = kv;
    g->head_dim = p.head_dim;
    g->rotary_dim = p.rotary_dim;
    g->style = p.style;
    return PE_OK;
  }
  return rope_cache_preset(g, max_positions, out, why, why_len);
}

pe_status rope_cache_preset(const rope_geom *g, int64_t max_positions, pe_rope_cache **out,
                            char *why, size_t why_len) {
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = g->head_dim;
  p.rotary_dim = g->rotary_dim;
  p.style = g->style;
  p.base = g->base;
  p.max_positions = max_positions;
  const model_preset *m = g->scaled;
  if (m) { /* the published frequencies (they cost nothing in a call) */
    p.scaling = m->scaling;
    p.factor = m->factor;
    p.original_max_positions = m->original_max_positions;
    p.beta_fast = m->beta_fast, p.beta_slow = m->beta_slow;
    p.mscale = m->mscale, p.mscale_all_dim = m->mscale_all_dim;
  }
  pe_status st = pe_rope_cache_create(&p, out);
  if (st != PE_OK) snprintf(why, why_len, "%s", pe_last_error());
  return st;
}
