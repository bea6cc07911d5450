/* quickstart.c - rotate q and k of a Llama-3-8B layer (the README's "Use it from C").
 * Build: cc quickstart.c $(pkg-config --cflags --libs posenc) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <posenc.h>

int main(void) {
  enum { B = 2, T = 4, HQ = 32, HKV = 8, D = 128 }; /* batch, tokens, q/kv heads, head_dim */
  pe_rope_params p;
  pe_rope_params_init(&p); /* always first: defaults (NeoX, base 10000, 4096 rows) */
  p.head_dim = D;
  p.base = 500000.0;       /* Llama-3's rope_theta */
  p.max_positions = 8192;  /* table rows: positions 0..8191 (0 = no table, on the fly) */
  pe_rope_cache *cache;
  if (pe_rope_cache_create(&p, &cache) != PE_OK) {
    fprintf(stderr, "%s\n", pe_last_error());
    return 1;
  }

  /* q and k stored [B, T, H, D] (as a linear layer writes them), f32; the
   * tensors are [B, H, T, D] views of that memory: strides in elements. */
  float *q = calloc((size_t)B * T * HQ * D, sizeof *q);
  float *k = calloc((size_t)B * T * HKV * D, sizeof *k);
  if (!q || !k) return 1;
  for (int i = 0; i < B * T * HQ * D; i++) q[i] = (float)(i % 7) - 3.0f;
  for (int i = 0; i < B * T * HKV * D; i++) k[i] = (float)(i % 5) - 2.0f;
  pe_tensor qt = {q, PE_F32, {B, HQ, T, D}, {T * HQ * D, D, HQ * D, 1}};
  pe_tensor kt = {k, PE_F32, {B, HKV, T, D}, {T * HKV * D, D, HKV * D, 1}};

  /* Positions: B * T int64 values, row b at positions + b * T (or NULL for
   * 0..T-1 in every row). Sequence 0 is a prefill, sequence 1 continues at 100. */
  static const int64_t pos[B * T] = {0, 1, 2, 3, 100, 101, 102, 103};
  const int64_t *positions = pos;

  pe_status st = pe_apply_rope_qk(cache, &qt, &kt, positions, 0, NULL /* pool: this thread */);
  if (st != PE_OK) {
    fprintf(stderr, "%s: %s\n", pe_status_string(st), pe_last_error());
    return 1;
  }
  printf("quickstart: q[0,0,1,0] = %.6f, k[1,0,3,0] = %.6f (%s)\n", q[HQ * D],
         k[(size_t)(T + 3) * HKV * D], pe_isa_name());
  free(q);
  free(k);
  pe_rope_cache_destroy(cache);
  return 0;
}
