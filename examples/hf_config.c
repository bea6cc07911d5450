/* hf_config.c - a model's own rotation from its config.json (the README's "Long context").
 * Usage: hf_config [config.json]   (default: Llama-3.1-8B's rope settings, inline)
 * Build: cc hf_config.c $(pkg-config --cflags --libs posenc) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <posenc.h>

static const char llama31[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 4096, \"num_attention_heads\": 32,"
    " \"max_position_embeddings\": 131072, \"rope_theta\": 500000.0,"
    " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
    " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}";

int main(int argc, char **argv) {
  static char buf[1 << 20];
  const char *json_text = llama31;
  size_t json_len = strlen(llama31);
  if (argc > 1) {
    FILE *f = fopen(argv[1], "rb");
    if (!f) return perror(argv[1]), 1;
    json_len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    json_text = buf;
  }

  pe_rope_cache *cache;
  pe_status st = pe_rope_cache_create_from_hf_config(json_text, json_len,
                                                     8192 /* table rows; 0 = on the fly */,
                                                     0 /* seq_len: 0 = max_position_embeddings */,
                                                     0 /* flags: PE_CONFIG_GUESS for an unknown model_type */,
                                                     &cache);
  if (st != PE_OK) {
    fprintf(stderr, "%s: %s\n", pe_status_string(st), pe_last_error());
    return 1;
  }
  pe_rope_params p;
  pe_rope_params_init(&p); /* sets struct_size, which pe_rope_cache_params reads */
  if (pe_rope_cache_params(cache, &p) != PE_OK) return 1;
  printf("hf_config: head_dim %d, rotary_dim %d, base %g, scaling %d, factor %g, "
         "attention factor %g\n",
         (int)p.head_dim, (int)p.rotary_dim, p.base, (int)p.scaling, p.factor,
         pe_rope_cache_attention_factor(cache));
  pe_rope_cache_destroy(cache);
  return 0;
}
