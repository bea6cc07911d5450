/* suite_rope.c - the rope suite (pe_apply_rope_qk on a model's heads:
 * decode and prefill, each layout, against the bound and the textbook loop
 * in both builds) and the cutover suite (where a pool starts to pay). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pe_bench.h"

typedef struct rope_state {
  pe_rope_cache *cache;
  pe_tensor q, k;
  int64_t *pos;
  int64_t tokens;
  float *cos_t, *sin_t; /* textbook table, NeoX only */
  int32_t half;
} rope_state;

static pe_status rope_call(bench_case *c) {
  rope_state *s = c->st;
  return pe_apply_rope_qk(s->cache, &s->q, &s->k, s->pos, 0, c->pool);
}

/* The textbook loop on q then k, in the tensor's dtype: the -O3 build
 * (native 0) or the -O3 -march=native one (native 1). */
static void rope_textbook_on(rope_state *s, pe_tensor *x, int native) {
  switch (x->dtype) {
  case PE_F16:
    (native ? pb_textbook_native_rope_neox_f16 : pb_textbook_rope_neox_f16)(
        x->data, x->shape, x->stride, s->half, s->pos, s->cos_t, s->sin_t);
    break;
  case PE_BF16:
    (native ? pb_textbook_native_rope_neox_bf16 : pb_textbook_rope_neox_bf16)(
        x->data, x->shape, x->stride, s->half, s->pos, s->cos_t, s->sin_t);
    break;
  default:
    (native ? pb_textbook_native_rope_neox_f32 : pb_textbook_rope_neox_f32)(
        x->data, x->shape, x->stride, s->half, s->pos, s->cos_t, s->sin_t);
  }
}

static void rope_textbook(bench_case *c) {
  rope_state *s = c->st;
  rope_textbook_on(s, &s->q, 0);
  rope_textbook_on(s, &s->k, 0);
}

static void rope_textbook_native(bench_case *c) {
  rope_state *s = c->st;
  rope_textbook_on(s, &s->q, 1);
  rope_textbook_on(s, &s->k, 1);
}

static double elem_value(const pe_tensor *x, size_t i) {
  if (x->dtype == PE_F32) return ((const float *)x->data)[i];
  uint16_t h = ((const uint16_t *)x->data)[i];
  if (x->dtype == PE_F16) { /* finite values only: fill() makes no others */
    int e = (h >> 10) & 0x1f;
    double m = e ? 1024 + (h & 0x3ff) : (h & 0x3ff);
    return (h & 0x8000 ? -1 : 1) * ldexp(m, (e ? e : 1) - 25);
  }
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Does the baseline compute what the library computes? One call of each
 * build of the textbook loop and of the library on copies of q, compared
 * element by element: within 2^-20 relative for f32 (the library rounds
 * fmaf(x, c, -(y*s)), the loop x*c - y*s, contracted or not), within one
 * unit in the last place for f16/bf16 (that difference, rounded). NULL: they
 * agree; otherwise the first element that differs (the case then has no
 * textbook columns, and its note says why). */
static const char *textbook_mismatch(bench_case *c) {
  static char why[128];
  rope_state *s = c->st;
  size_t n = (size_t)(s->q.shape[0] * s->q.shape[1] * s->q.shape[2] * s->q.shape[3]);
  size_t bytes = tensor_bytes(&s->q);
  void *orig = xalloc(bytes), *lib = xalloc(bytes);
  memcpy(orig, s->q.data, bytes);
  pe_tensor q_lib = s->q;
  q_lib.data = lib;
  memcpy(lib, orig, bytes);
  pe_status st = pe_apply_rope_qk(s->cache, &q_lib, NULL, s->pos, 0, NULL);
  double tol = s->q.dtype == PE_F32 ? 0x1p-20 : s->q.dtype == PE_F16 ? 0x1p-10 : 0x1p-7;
  why[0] = 0;
  for (int native = 0; native < 2 && st == PE_OK && !why[0]; native++) {
    memcpy(s->q.data, orig, bytes);
    rope_textbook_on(s, &s->q, native);
    for (size_t i = 0; i < n; i++) {
      double a = elem_value(&s->q, i), b = elem_value(&q_lib, i);
      if (!(fabs(a - b) <= tol * (fabs(b) > 0.25 ? fabs(b) : 0.25))) {
        snprintf(why, sizeof why, "textbook%s loop: element %zu is %.7g, the library's %.7g",
                 native ? "-native" : "", i, a, b);
        break;
      }
    }
  }
  if (st != PE_OK) snprintf(why, sizeof why, "pe_apply_rope_qk: %.70s", pe_last_error());
  memcpy(s->q.data, orig, bytes);
  free(orig);
  free(lib);
  return why[0] ? why : NULL;
}

static void rope_case(const char *name, int64_t tokens, int dt, int threads, int bthd) {
  rope_geom g = geometry();
  rope_state s;
  memset(&s, 0, sizeof s);
  /* tb_pos: rows of the textbook loop's table, which always has one. */
  int64_t used = positions_used(opt.batch, tokens), tb_pos = used > 8192 ? used : 8192;
  int64_t max_pos = opt.max_positions >= 0 ? opt.max_positions : tb_pos;
  char why[200] = "";
  if (rope_cache_for(&g, max_pos, &s.cache, why, sizeof why) != PE_OK) {
    not_available("rope", why);
    return;
  }
  int64_t B = opt.batch;
  s.tokens = tokens;
  s.half = g.rotary_dim / 2;
  s.q = make_tensor(dt, B, g.heads, tokens, g.head_dim, bthd);
  s.k = make_tensor(dt, B, g.kv_heads, tokens, g.head_dim, bthd);
  /* Decode: each sequence at its own position past a long context; prefill:
   * 0..T-1 (positions NULL). */
  if (tokens == 1) {
    s.pos = xalloc((size_t)B * sizeof *s.pos);
    for (int64_t b = 0; b < B; b++) s.pos[b] = 4000 + 7 * b;
  }
  bench_case c;
  memset(&c, 0, sizeof c);
  c.suite = "rope";
  snprintf(c.name, sizeof c.name, "%s", name);
  c.dtype = dt;
  c.threads = threads;
  c.pool = pool_for(threads);
  c.bytes = 2.0 * (double)(B * (g.heads + g.kv_heads) * tokens) * g.rotary_dim * (double)dtype_size(dt);
  c.call = rope_call;
  c.st = &s;
  c.probe[0] = probe_like(&s.q, g.rotary_dim);
  c.probe[1] = probe_like(&s.k, g.rotary_dim);
  c.n_probe = 2;
  if (max_pos > 0) /* cos/sin from the table (on the fly: sines, not a fixed sequence) */
    floor_add(&c, (floor_stage){.kind = FL_ROT, .src = dt, .dst = dt, .style = g.style,
                                .inplace = 1, .width = g.head_dim, .rot = g.rotary_dim,
                                .heads = g.heads + g.kv_heads,
                                .rows = B * (g.heads + g.kv_heads) * tokens});
  geometry_shape(&g, c.shape, sizeof c.shape);
  if (opt.max_positions > 0)
    snprintf(c.note, sizeof c.note, "table %" PRId64 " rows", max_pos);
  else if (opt.max_positions == 0)
    snprintf(c.note, sizeof c.note, "cos/sin on the fly");
  if (g.style == PE_ROPE_NEOX && threads == 1) {
    s.cos_t = xalloc((size_t)tb_pos * (size_t)s.half * sizeof(float));
    s.sin_t = xalloc((size_t)tb_pos * (size_t)s.half * sizeof(float));
    float *cs = xalloc((size_t)s.half * 2 * sizeof(float));
    for (int64_t p = 0; p < tb_pos; p++) {
      pe_rope_cache_cos_sin(s.cache, p, cs, cs + s.half);
      memcpy(s.cos_t + p * s.half, cs, (size_t)s.half * sizeof(float));
      memcpy(s.sin_t + p * s.half, cs + s.half, (size_t)s.half * sizeof(float));
    }
    free(cs);
    const char *bad = textbook_mismatch(&c);
    if (bad) {
      size_t l = strlen(c.note);
      snprintf(c.note + l, sizeof c.note - l, "%sno textbook: %s", l ? "; " : "", bad);
    } else {
      c.textbook = rope_textbook;
      c.textbook_native = rope_textbook_native;
    }
  }
  progress("[%.0fs] rope %s %s %d thr", (now_ns() - run_start) / 1e9, c.name, dtype_name(dt), threads);
  measure(&c);
  free_probes(&c);
  free(s.q.data);
  free(s.k.data);
  free(s.pos);
  free(s.cos_t);
  free(s.sin_t);
  pe_rope_cache_destroy(s.cache);
}

/* One rope case in each layout --layout selects (both by default), its
 * name followed by the layout; decode (one token: both layouts are the
 * same memory) once, in bhtd unless --layout bthd. */
static void rope_layouts(const char *name, int64_t tokens, int dt, int threads) {
  if (tokens == 1) {
    rope_case(name, tokens, dt, threads, opt.layouts == 2);
    return;
  }
  for (int l = 0; l < 2; l++) {
    if (!(opt.layouts & (1 << l))) continue;
    char full[48];
    snprintf(full, sizeof full, "%.42s %s", name, l ? "bthd" : "bhtd");
    rope_case(full, tokens, dt, threads, l);
  }
}

void suite_rope(void) {
  for (int ti = 0; ti < opt.n_threads; ti++) {
    int th = opt.threads[ti];
    if (opt.tokens) {
      char name[48];
      snprintf(name, sizeof name, "%s %" PRId64 " tok x%" PRId64, model_label(), opt.tokens, opt.batch);
      rope_layouts(name, opt.tokens, opt.dtype >= 0 ? opt.dtype : PE_F32, th);
      continue;
    }
    static const struct { const char *name; int64_t tokens; } cases[] = {
        {"decode", 1}, {"prefill 32", 32}, {"prefill 512", 512}, {"prefill 4096", 4096}};
    for (int i = 0; i < 4; i++) {
      char name[48];
      snprintf(name, sizeof name, "%s %s", model_label(), cases[i].name);
      if (opt.dtype >= 0) {
        rope_layouts(name, cases[i].tokens, opt.dtype, th);
      } else {
        rope_layouts(name, cases[i].tokens, PE_F32, th);
        if (cases[i].tokens == 512) {
          rope_layouts(name, 512, PE_F16, th);
          rope_layouts(name, 512, PE_BF16, th);
        }
      }
    }
  }
}

/* ------------------------------------------------------------------------ */
/* cutover: where a pool starts to pay                                      */
/* ------------------------------------------------------------------------ */

/* ns of one call (median and min of `samples`), each after `gap_us` of sleep
 * (0: back to back, several calls per sample). */
static stats rope_call_ns(rope_state *s, pe_threadpool *pool, long gap_us, int samples) {
  double *v = calloc((size_t)samples, sizeof *v);
  if (!v) abort();
  int64_t iters = 1;
  if (!gap_us) {
    pe_apply_rope_qk(s->cache, &s->q, &s->k, NULL, 0, pool);
    double t0 = now_ns();
    pe_apply_rope_qk(s->cache, &s->q, &s->k, NULL, 0, pool);
    iters = iterations_for(now_ns() - t0);
  }
  for (int i = 0; i < samples; i++) {
    if (gap_us) {
      sleep_us(gap_us);
    } else {
      pe_apply_rope_qk(s->cache, &s->q, &s->k, NULL, 0, pool);
    }
    double t0 = now_ns();
    for (int64_t it = 0; it < iters; it++) pe_apply_rope_qk(s->cache, &s->q, &s->k, NULL, 0, pool);
    v[i] = (now_ns() - t0) / (double)iters;
  }
  stats st = summarise(v, samples);
  free(v);
  return st;
}

static pe_threadpool *cutover_raw; /* cut-over disabled */

int cutover_threads(void) {
  return opt.threads_given && opt.threads[opt.n_threads - 1] > 1 ? opt.threads[opt.n_threads - 1] : 2;
}

void cutover_prepare(void) {
  setenv("PE_POOL_MIN_BYTES", "0", 1);
  if (pe_threadpool_create(cutover_threads(), &cutover_raw) != PE_OK) cutover_raw = NULL;
  unsetenv("PE_POOL_MIN_BYTES");
}

void cutover_free(void) {
  pe_threadpool_destroy(cutover_raw);
  cutover_raw = NULL;
}

void suite_cutover(void) {
  int th = cutover_threads();
  pe_threadpool *raw = cutover_raw, *dflt = pool_for(th);
  if (!raw) {
    not_available("cutover", "pe_threadpool_create failed");
    return;
  }
  rope_geom g = geometry();
  static const int64_t toks[] = {1, 2, 4, 8, 12, 16, 24, 32, 64, 128, 256, 512};
  for (size_t i = 0; i < sizeof toks / sizeof toks[0]; i++) {
    rope_state s;
    memset(&s, 0, sizeof s);
    char why[200];
    if (rope_cache_for(&g, 8192, &s.cache, why, sizeof why) != PE_OK) {
      not_available("cutover", why);
      break;
    }
    s.q = make_tensor(PE_F32, 1, g.heads, toks[i], g.head_dim, opt.bthd);
    s.k = make_tensor(PE_F32, 1, g.kv_heads, toks[i], g.head_dim, opt.bthd);
    progress("[%.0fs] cutover %" PRId64 " tokens", (now_ns() - run_start) / 1e9, toks[i]);
    double bytes = 2.0 * (double)((g.heads + g.kv_heads) * toks[i]) * g.rotary_dim * 4;
    int cold_samples = opt.reps * 3;
    disturbance dist = disturbance_start();
    /* Interleaved per sample round so that load from other processes hits
     * the three variants alike. */
    stats hot1 = rope_call_ns(&s, NULL, 0, opt.reps), hotp = rope_call_ns(&s, raw, 0, opt.reps);
    stats hotd = rope_call_ns(&s, dflt, 0, opt.reps);
    stats cold1 = rope_call_ns(&s, NULL, 2000, cold_samples);
    stats coldp = rope_call_ns(&s, raw, 2000, cold_samples);
    stats coldd = rope_call_ns(&s, dflt, 2000, cold_samples);
    bench_case c;
    memset(&c, 0, sizeof c);
    c.suite = "cutover";
    snprintf(c.name, sizeof c.name, "%s %" PRId64 " tok (%.0f KiB)", model_label(), toks[i],
             bytes / 1024);
    geometry_shape(&g, c.shape, sizeof c.shape);
    c.dtype = PE_F32;
    c.threads = th;
    c.bytes = bytes;
    result *r = new_result(&c);
    r->ns = hotp;
    r->speedup_1t = hot1.med / hotp.med;
    disturbance_end(&dist, r);
    /* x = one thread's time / the pool's: median (best of the samples) */
    snprintf(r->note, sizeof r->note,
             "split hot x%.2f (%.2f) cold x%.2f (%.2f); cut-over hot x%.2f cold x%.2f",
             hot1.med / hotp.med, hot1.min / hotp.min, cold1.med / coldp.med, cold1.min / coldp.min,
             hot1.med / hotd.med, cold1.med / coldd.med);
    free(s.q.data);
    free(s.k.data);
    pe_rope_cache_destroy(s.cache);
  }
}
