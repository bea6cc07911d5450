/* suite_table.c - the table suite: pe_rope_cache_create building a
 * 131072-position table (Llama-3.1's context) of 64 frequencies, against a
 * stream writing the same bytes, with the table's largest error against
 * cos/sin of the exact angle in the note. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pe_bench.h"

#define TABLE_POSITIONS 131072
#define TABLE_HEAD_DIM 128

static pe_rope_params table_params(void) {
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = TABLE_HEAD_DIM;
  p.max_positions = TABLE_POSITIONS;
  return p;
}

static pe_status table_call(bench_case *c) {
  (void)c;
  pe_rope_params p = table_params();
  pe_rope_cache *cache = NULL;
  pe_status st = pe_rope_cache_create(&p, &cache);
  pe_rope_cache_destroy(cache);
  return st;
}

/* Largest |table - exact| over every 5th position and the last 64, against
 * cos/sin of the double angle p * base^(-2i/d). */
static double table_max_error(void) {
  pe_rope_params p = table_params();
  pe_rope_cache *cache = NULL;
  if (pe_rope_cache_create(&p, &cache) != PE_OK) return NAN;
  int half = TABLE_HEAD_DIM / 2;
  float cs[TABLE_HEAD_DIM];
  double freq[TABLE_HEAD_DIM / 2], err = 0;
  for (int i = 0; i < half; i++) freq[i] = pow(p.base, -2.0 * i / TABLE_HEAD_DIM);
  for (int64_t pos = 0; pos < TABLE_POSITIONS; pos += (pos >= TABLE_POSITIONS - 64 ? 1 : 5)) {
    pe_rope_cache_cos_sin(cache, pos, cs, cs + half);
    for (int i = 0; i < half; i++) {
      double a = (double)pos * freq[i];
      double e1 = fabs(cs[i] - cos(a)), e2 = fabs(cs[half + i] - sin(a));
      if (e1 > err) err = e1;
      if (e2 > err) err = e2;
    }
  }
  pe_rope_cache_destroy(cache);
  return err;
}

void suite_table(void) {
  bench_case c;
  memset(&c, 0, sizeof c);
  c.suite = "table";
  snprintf(c.name, sizeof c.name, "build %dx%d", TABLE_POSITIONS, TABLE_HEAD_DIM / 2);
  snprintf(c.shape, sizeof c.shape, "head_dim %d", TABLE_HEAD_DIM);
  c.dtype = PE_F32;
  c.threads = 1;
  c.bytes = (double)TABLE_POSITIONS * TABLE_HEAD_DIM * 4; /* written */
  c.call = table_call;
  c.probe[0] = probe_flat(c.bytes);
  c.n_probe = 1;
  progress("[%.0fs] table build", (now_ns() - run_start) / 1e9);
  result *r = measure(&c);
  if (!r->error[0]) {
    double pairs = (double)TABLE_POSITIONS * (TABLE_HEAD_DIM / 2);
    snprintf(r->note, sizeof r->note, "%.3f ns/pair, max err %.2e", r->ns.med / pairs,
             table_max_error());
  }
  free_probes(&c);
}
