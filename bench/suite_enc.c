/* suite_enc.c - the encodings that are not RoPE: ALiBi and T5 biases
 * added to attention scores (decode and causal prefill), sinusoidal and
 * learned absolute embeddings added to activations. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pe_bench.h"

/* ------------------------------------------------------------------------ */
/* alibi and t5                                                             */
/* ------------------------------------------------------------------------ */

typedef struct bias_state {
  pe_tensor scores;
  float *slopes, *t5_table;
  uint32_t flags;
} bias_state;

static pe_status alibi_call(bench_case *c) {
  bias_state *s = c->st;
  return pe_alibi_add_bias(&s->scores, s->slopes, NULL, s->flags, c->pool);
}

static pe_status t5_call(bench_case *c) {
  bias_state *s = c->st;
  return pe_t5_add_bias(&s->scores, s->t5_table, 0, 32, 128, NULL, s->flags, c->pool);
}

void suite_bias(const char *suite) {
  int is_t5 = !strcmp(suite, "t5");
  bias_state s;
  memset(&s, 0, sizeof s);
  int heads = geometry().heads;
  s.slopes = xalloc((size_t)heads * sizeof(float));
  if (!is_t5 && pe_alibi_slopes(heads, 8.0, s.slopes) != PE_OK) {
    not_available(suite, pe_last_error());
    free(s.slopes);
    return;
  }
  s.t5_table = xalloc((size_t)32 * (size_t)heads * sizeof(float));
  for (int i = 0; i < 32 * heads; i++) s.t5_table[i] = frand();
  static const struct { const char *name; int64_t q, k; uint32_t flags; } shapes[] = {
      {"decode 1x%dx1x4096", 1, 4096, 0}, {"prefill 1x%dx512x512 causal", 512, 512, PE_MASK_CAUSAL}};
  int dts[3] = {PE_F32, PE_F16, PE_BF16}, n_dt = 3;
  if (opt.dtype >= 0) dts[0] = opt.dtype, n_dt = 1;
  for (int ti = 0; ti < opt.n_threads; ti++)
    for (int si = 0; si < 2; si++)
      for (int di = 0; di < n_dt; di++) {
        int dt = dts[di];
        if (dt != PE_F32 && si == 0 && opt.dtype < 0) continue; /* decode: f32 only by default */
        bench_case c;
        memset(&c, 0, sizeof c);
        c.suite = suite;
        snprintf(c.name, sizeof c.name, shapes[si].name, heads);
        snprintf(c.shape, sizeof c.shape, "%d heads", heads);
        c.dtype = dt;
        c.threads = opt.threads[ti];
        c.pool = pool_for(c.threads);
        s.scores = make_tensor(dt, 1, heads, shapes[si].q, shapes[si].k, 0);
        s.flags = shapes[si].flags;
        c.bytes = 2.0 * (double)tensor_bytes(&s.scores);
        c.call = is_t5 ? t5_call : alibi_call;
        c.st = &s;
        c.probe[0] = probe_like(&s.scores, shapes[si].k);
        c.n_probe = 1;
        progress("[%.0fs] %s %s %s %d thr", (now_ns() - run_start) / 1e9, suite, c.name,
                 dtype_name(dt), c.threads);
        measure(&c);
        free_probes(&c);
        free(s.scores.data);
      }
  free(s.slopes);
  free(s.t5_table);
}

/* ------------------------------------------------------------------------ */
/* sinusoidal and learned                                                   */
/* ------------------------------------------------------------------------ */

typedef struct embed_state {
  pe_tensor x, table;
  int64_t *pos;
} embed_state;

static pe_status sinusoidal_call(bench_case *c) {
  embed_state *s = c->st;
  return pe_sinusoidal_add(&s->x, s->pos, 10000.0, 0, c->pool);
}

static pe_status learned_call(bench_case *c) {
  embed_state *s = c->st;
  return pe_learned_add(&s->x, &s->table, s->pos, c->pool);
}

void suite_embed(const char *suite) {
  int is_learned = !strcmp(suite, "learned");
  embed_state s;
  memset(&s, 0, sizeof s);
  rope_geom g = geometry();
  int64_t d_model = (int64_t)g.heads * g.head_dim;
  if (is_learned) s.table = make_tensor(PE_F32, 1, 1, LEARNED_MAX_LEN, d_model, 0);
  int64_t token_counts[2] = {1, 512};
  int n_cases = 2;
  if (opt.tokens) token_counts[0] = opt.tokens, n_cases = 1;
  int dts[3] = {PE_F32, PE_F16, PE_BF16}, n_dt = 3;
  if (opt.dtype >= 0) dts[0] = opt.dtype, n_dt = 1;
  for (int ti = 0; ti < opt.n_threads; ti++)
    for (int ci = 0; ci < n_cases; ci++)
      for (int di = 0; di < n_dt; di++) {
        int dt = dts[di];
        int64_t T = token_counts[ci];
        if (dt != PE_F32 && T == 1 && opt.dtype < 0) continue;
        bench_case c;
        memset(&c, 0, sizeof c);
        c.suite = suite;
        snprintf(c.name, sizeof c.name, "%s %" PRId64 " tok x %" PRId64, T == 1 ? "decode" : "prefill",
                 T, d_model);
        snprintf(c.shape, sizeof c.shape, "d_model %" PRId64, d_model);
        c.dtype = dt;
        c.threads = opt.threads[ti];
        c.pool = pool_for(c.threads);
        s.x = make_tensor(dt, opt.batch, 1, T, d_model, 0);
        s.pos = NULL;
        if (T == 1) {
          s.pos = xalloc((size_t)opt.batch * sizeof *s.pos);
          for (int64_t b = 0; b < opt.batch; b++) s.pos[b] = 1000 + b;
        }
        c.bytes = 2.0 * (double)tensor_bytes(&s.x);
        if (is_learned) c.bytes += (double)(opt.batch * T * d_model) * 4; /* table rows read */
        c.call = is_learned ? learned_call : sinusoidal_call;
        c.st = &s;
        if (is_learned)
          c.probe[0] = probe_flat(c.bytes);
        else
          c.probe[0] = probe_like(&s.x, d_model);
        c.n_probe = 1;
        if (is_learned) snprintf(c.note, sizeof c.note, "table f32 [%d][%" PRId64 "]", LEARNED_MAX_LEN, d_model);
        progress("[%.0fs] %s %s %s %d thr", (now_ns() - run_start) / 1e9, suite, c.name,
                 dtype_name(dt), c.threads);
        measure(&c);
        free_probes(&c);
        free(s.x.data);
        free(s.pos);
      }
  free(s.table.data);
}
