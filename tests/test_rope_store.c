/* test_rope_store.c - pe_apply_rope_qk_store: RoPE fused into the KV-cache
 * write.
 *
 * What is checked against what:
 * - The definition: every cache row the call writes equals, bit for bit,
 *   "widen k exactly to float32, pe_apply_rope_qk on that copy, round once to
 *   the cache dtype" (the rounding written here, independently of the
 *   library); for k_cache's dtype equal to k's, also equals pe_apply_rope_qk
 *   on k followed by a plain copy. All 9 dtype pairs, both styles, partial
 *   rotary, table and on-the-fly caches, PE_ROPE_INVERSE, NHD and HND paged
 *   layouts, [B,T,H,D] activations. q equals pe_apply_rope_qk's q.
 * - Accuracy: f32 cache rows against a float64 rotation written here.
 * - Slots -1 leave their rows untouched; every row nobody maps is untouched
 *   (the whole cache buffer is compared).
 * - Errors: each leaves q, k and the cache byte for byte unchanged and names
 *   the argument and value (out-of-range and duplicate slots among them,
 *   including duplicates far apart in a mapping of more than 512 runs).
 * - Bit-identity of every SIMD path with scalar (isa_compare.h: the paths
 *   the build or CPU lacks are said in the log, not compared) on inputs that include NaN, Inf,
 *   subnormals and values that overflow the half types, for head sizes with
 *   vector tails; and across pool sizes.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "posenc.h"

#define TEST_RNG_SEED 0x6a09e667f3bcc909ull
#include "isa_compare.h"
#include "test_util.h"

static size_t esize(pe_dtype d) { return d == PE_F32 ? 4 : 2; }

/* ---- conversions written here (not convert.h): via double arithmetic ---- */
static float h2f(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) return bits_f32(((uint32_t)(h & 0x8000) << 16) | 0x7f800000u | ((uint32_t)m << 13));
  v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
  return (float)((h & 0x8000) ? -v : v);
}
static uint16_t f2h(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  if (isnan(f)) return (uint16_t)(sign | 0x7e00 | ((u >> 13) & 0x3ff));
  double a = fabs((double)f);
  if (a >= 65520.0) return (uint16_t)(sign | 0x7c00);
  if (a < 0x1p-14) return (uint16_t)(sign | (uint16_t)nearbyint(a * 0x1p24));
  int e;
  frexp(a, &e); /* a = m * 2^e, m in [0.5, 1): exponent e - 1 */
  e -= 1;
  double m = nearbyint(ldexp(a, 10 - e));
  if (m == 2048.0) m = 1024.0, e++;
  if (e > 15) return (uint16_t)(sign | 0x7c00);
  return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)(m - 1024.0));
}
static float load_el(const void *p, pe_dtype d, int64_t i) {
  if (d == PE_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return d == PE_F16 ? h2f(h) : bf16_to_f32(h);
}
static void store_el(void *p, pe_dtype d, int64_t i, float v) {
  if (d == PE_F32) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = d == PE_F16 ? f2h(v) : bf16_rne(v);
}

/* A value of any bit pattern class (NaN, Inf, subnormal, overflow) or finite. */
static void fill_any(void *p, pe_dtype d, int64_t i, int wild) {
  uint64_t r = rnd();
  if (!wild) {
    store_el(p, d, i, uniform());
    return;
  }
  if (d == PE_F32) {
    uint32_t u;
    switch ((r >> 60) & 7) {
    case 0: u = (uint32_t)r; break;
    case 1: u = ((uint32_t)r & 0x807fffffu) | 0x7f800000u; break;
    case 2: u = (uint32_t)r & 0x807fffffu; break;
    case 3: u = ((uint32_t)r & 0x807fffffu) | (uint32_t)(100 + (r >> 40) % 43) << 23; break;
    default: u = f32_bits(uniform()); break;
    }
    ((uint32_t *)p)[i] = u;
  } else {
    ((uint16_t *)p)[i] = (uint16_t)(r >> 16);
  }
}

/* ---- tensors ---- */
static pe_tensor tensor4(void *data, pe_dtype d, int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                         int64_t st0, int64_t st1, int64_t st2) {
  pe_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = d;
  t.shape[0] = s0, t.shape[1] = s1, t.shape[2] = s2, t.shape[3] = s3;
  t.stride[0] = st0, t.stride[1] = st1, t.stride[2] = st2, t.stride[3] = 1;
  return t;
}
static int64_t off4(const pe_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] + d;
}

static pe_rope_cache *make_cache(int32_t head_dim, int32_t rotary_dim, pe_rope_style style,
                                 int64_t max_positions, double attention_factor) {
  pe_rope_params p = rope_params(head_dim, rotary_dim, style, 10000.0, max_positions);
  p.attention_factor = attention_factor;
  return new_cache(&p);
}

/* One scenario: batch x tokens of [B,T,H,D] q and k, a paged cache. */
typedef struct scen {
  int32_t head_dim, rotary_dim;
  pe_rope_style style;
  int64_t max_positions;
  pe_dtype kd, cd;
  int hnd; /* cache layout [NB, H, BS, D] (else [NB, BS, H, D]) */
  int64_t batch, tokens, hq, hk, nb, bs;
  uint32_t flags;
  int wild;
} scen;

typedef struct bufs {
  void *q, *k, *cache;
  size_t qb, kb, cb;
  pe_tensor tq, tk, tc;
  int64_t *pos, *slots;
} bufs;

static void bufs_make(const scen *s, bufs *b) {
  int64_t B = s->batch, T = s->tokens, D = s->head_dim;
  memset(b, 0, sizeof *b);
  b->qb = (size_t)(B * T * s->hq * D) * esize(s->kd);
  b->kb = (size_t)(B * T * s->hk * D) * esize(s->kd);
  b->cb = (size_t)(s->nb * s->bs * s->hk * D) * esize(s->cd);
  b->q = malloc(b->qb);
  b->k = malloc(b->kb);
  b->cache = malloc(b->cb);
  assert_true(b->q && b->k && b->cache);
  for (int64_t i = 0; i < (int64_t)(b->qb / esize(s->kd)); i++) fill_any(b->q, s->kd, i, s->wild);
  for (int64_t i = 0; i < (int64_t)(b->kb / esize(s->kd)); i++) fill_any(b->k, s->kd, i, s->wild);
  for (size_t i = 0; i < b->cb; i++) ((uint8_t *)b->cache)[i] = (uint8_t)rnd(); /* sentinel */
  b->tq = tensor4(b->q, s->kd, B, s->hq, T, D, T * s->hq * D, D, s->hq * D);
  b->tk = tensor4(b->k, s->kd, B, s->hk, T, D, T * s->hk * D, D, s->hk * D);
  if (s->hnd)
    b->tc = tensor4(b->cache, s->cd, s->nb, s->hk, s->bs, D, s->hk * s->bs * D, s->bs * D, D);
  else
    b->tc = tensor4(b->cache, s->cd, s->nb, s->hk, s->bs, D, s->bs * s->hk * D, D, s->hk * D);
  b->pos = malloc((size_t)(B * T) * sizeof(int64_t));
  b->slots = malloc((size_t)(B * T) * sizeof(int64_t));
  int64_t lim = s->max_positions ? s->max_positions : 100000;
  for (int64_t i = 0; i < B * T; i++) b->pos[i] = (int64_t)(rnd() % (uint64_t)lim);
  /* Distinct slots: a random permutation prefix, with some -1 (padding). */
  int64_t n_slots = s->nb * s->bs;
  int64_t *perm = malloc((size_t)n_slots * sizeof(int64_t));
  for (int64_t i = 0; i < n_slots; i++) perm[i] = i;
  for (int64_t i = n_slots - 1; i > 0; i--) {
    int64_t j = (int64_t)(rnd() % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  assert_true(n_slots >= B * T);
  for (int64_t i = 0; i < B * T; i++) b->slots[i] = (rnd() % 7 == 0) ? -1 : perm[i];
  free(perm);
}

static void bufs_free(bufs *b) {
  free(b->q), free(b->k), free(b->cache), free(b->pos), free(b->slots);
}

/* The expected cache: widen k to a dense f32 [B,H,T,D] copy, apply there,
 * round each element of the mapped rows to the cache dtype. Also the
 * expected q: pe_apply_rope_qk on a copy. */
static void expected(const scen *s, pe_rope_cache *c, const bufs *b, void *cache_out,
                     void *q_out) {
  int64_t B = s->batch, T = s->tokens, H = s->hk, D = s->head_dim;
  float *kf = malloc((size_t)(B * H * T * D) * sizeof(float));
  pe_tensor tkf = tensor4(kf, PE_F32, B, H, T, D, H * T * D, T * D, D);
  for (int64_t bb = 0; bb < B; bb++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < D; i++)
          kf[off4(&tkf, bb, h, t, i)] = load_el(b->k, s->kd, off4(&b->tk, bb, h, t, i));
  /* PE_ROPE_STREAM_CACHE changes how the rows are written, not what */
  const uint32_t rope_flags = s->flags & ~PE_ROPE_STREAM_CACHE;
  assert_int_equal(pe_apply_rope_qk(c, NULL, &tkf, b->pos, rope_flags, NULL), PE_OK);
  memcpy(cache_out, b->cache, b->cb);
  for (int64_t bb = 0; bb < B; bb++)
    for (int64_t t = 0; t < T; t++) {
      int64_t slot = b->slots[bb * T + t];
      if (slot < 0) continue;
      for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < D; i++)
          store_el(cache_out, s->cd, off4(&b->tc, slot / s->bs, h, slot % s->bs, i),
                   kf[off4(&tkf, bb, h, t, i)]);
    }
  free(kf);
  memcpy(q_out, b->q, b->qb);
  pe_tensor tq = b->tq;
  tq.data = q_out;
  assert_int_equal(pe_apply_rope_qk(c, &tq, NULL, b->pos, rope_flags, NULL), PE_OK);
}

static void run_definition_case(const scen *s) {
  pe_rope_cache *c = make_cache(s->head_dim, s->rotary_dim, s->style, s->max_positions, 0.0);
  bufs b;
  bufs_make(s, &b);
  void *want_cache = malloc(b.cb), *want_q = malloc(b.qb), *k_before = malloc(b.kb);
  memcpy(k_before, b.k, b.kb);
  expected(s, c, &b, want_cache, want_q);
  assert_int_equal(pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, s->flags, NULL),
                   PE_OK);
  if (memcmp(b.cache, want_cache, b.cb) != 0 || memcmp(b.q, want_q, b.qb) != 0) {
    print_error("case head_dim %d rotary %d style %d maxpos %lld k %d cache %d hnd %d flags %u\n",
                s->head_dim, s->rotary_dim, s->style, (long long)s->max_positions, s->kd, s->cd,
                s->hnd, s->flags);
    fail();
  }
  assert_memory_equal(b.k, k_before, b.kb); /* k is only read */
  free(want_cache), free(want_q), free(k_before);
  bufs_free(&b);
  pe_rope_cache_destroy(c);
}

static void definition_cases(void *ctx, const char *path) {
  (void)ctx, (void)path;
  const pe_dtype dts[3] = {PE_F32, PE_F16, PE_BF16};
  for (int kd = 0; kd < 3; kd++)
    for (int cd = 0; cd < 3; cd++)
      for (int style = 0; style < 2; style++)
        for (int variant = 0; variant < 8; variant++) {
          /* 4..7: with PE_ROPE_STREAM_CACHE - streamed rows in 4 (NHD) and
           * 5 (HND, partial rotary); 6 (on the fly) and 7 (inverse) write
           * theirs as usual */
          const int v = variant & 3;
          scen s = {.head_dim = 64, .rotary_dim = v == 1 || variant == 7 ? 40 : 0,
                    .style = (pe_rope_style)style, .max_positions = v == 2 ? 0 : 512,
                    .kd = dts[kd], .cd = dts[cd], .hnd = variant & 1, .batch = 2,
                    .tokens = variant >= 4 ? 26 : 13, /* streamed: 8 KiB of rows at least */
                    .hq = 4, .hk = 2, .nb = 5, .bs = 16,
                    .flags = (v == 3 ? PE_ROPE_INVERSE : 0u) |
                             (variant >= 4 ? PE_ROPE_STREAM_CACHE : 0u)};
          run_definition_case(&s);
        }
}

/* On every path: each must meet the definition on its own. */
static void test_store_equals_apply_then_convert(void **state) {
  (void)state;
  pe_on_every_path(definition_cases, NULL);
}

/* Same dtype: the cache rows are exactly what apply-in-place + copy gives. */
static void test_store_same_dtype_is_apply_plus_copy(void **state) {
  (void)state;
  const pe_dtype dts[3] = {PE_F32, PE_F16, PE_BF16};
  for (int d = 0; d < 3; d++) {
    scen s = {.head_dim = 128, .style = PE_ROPE_NEOX, .max_positions = 4096, .kd = dts[d],
              .cd = dts[d], .batch = 1, .tokens = 37, .hq = 8, .hk = 2, .nb = 4, .bs = 16};
    pe_rope_cache *c = make_cache(128, 0, PE_ROPE_NEOX, 4096, 0.0);
    bufs b;
    bufs_make(&s, &b);
    void *k2 = malloc(b.kb), *want = malloc(b.cb);
    memcpy(k2, b.k, b.kb);
    memcpy(want, b.cache, b.cb);
    pe_tensor tk2 = b.tk;
    tk2.data = k2;
    assert_int_equal(pe_apply_rope_qk(c, NULL, &tk2, b.pos, 0, NULL), PE_OK);
    size_t es = esize(dts[d]);
    for (int64_t t = 0; t < s.tokens; t++) {
      int64_t slot = b.slots[t];
      if (slot < 0) continue;
      for (int64_t h = 0; h < s.hk; h++)
        memcpy((char *)want + (size_t)off4(&b.tc, slot / s.bs, h, slot % s.bs, 0) * es,
               (char *)k2 + (size_t)off4(&tk2, 0, h, t, 0) * es, (size_t)s.head_dim * es);
    }
    assert_int_equal(pe_apply_rope_qk_store(c, NULL, &b.tk, &b.tc, b.slots, b.pos, 0, NULL), PE_OK);
    assert_memory_equal(b.cache, want, b.cb);
    free(k2), free(want);
    bufs_free(&b);
    pe_rope_cache_destroy(c);
  }
}

/* f32 rows against a float64 rotation (HF rotate_half, default frequencies). */
static void test_store_float64_reference(void **state) {
  (void)state;
  const int32_t D = 64, half = 32;
  scen s = {.head_dim = D, .style = PE_ROPE_NEOX, .max_positions = 0, .kd = PE_F32, .cd = PE_F32,
            .batch = 2, .tokens = 9, .hq = 1, .hk = 3, .nb = 3, .bs = 8};
  pe_rope_cache *c = make_cache(D, 0, PE_ROPE_NEOX, 0, 0.0);
  bufs b;
  bufs_make(&s, &b);
  assert_int_equal(pe_apply_rope_qk_store(c, NULL, &b.tk, &b.tc, b.slots, b.pos, 0, NULL), PE_OK);
  const float *k = b.k, *cache = b.cache;
  for (int64_t bb = 0; bb < s.batch; bb++)
    for (int64_t t = 0; t < s.tokens; t++) {
      int64_t slot = b.slots[bb * s.tokens + t];
      if (slot < 0) continue;
      double p = (double)b.pos[bb * s.tokens + t];
      for (int64_t h = 0; h < s.hk; h++)
        for (int32_t i = 0; i < half; i++) {
          double f = pow(10000.0, -2.0 * i / D), a = p * f;
          double x = k[off4(&b.tk, bb, h, t, i)], y = k[off4(&b.tk, bb, h, t, i + half)];
          double xo = x * cos(a) - y * sin(a), yo = y * cos(a) + x * sin(a);
          double tol = 2.5e-7 * (fabs(x) + fabs(y)) + 1e-30;
          assert_true(fabs(cache[off4(&b.tc, slot / s.bs, h, slot % s.bs, i)] - xo) <= tol);
          assert_true(fabs(cache[off4(&b.tc, slot / s.bs, h, slot % s.bs, i + half)] - yo) <= tol);
        }
    }
  bufs_free(&b);
  pe_rope_cache_destroy(c);
}

/* Every token padding: nothing in the cache changes, q is still rotated. */
static void test_store_all_padding(void **state) {
  (void)state;
  scen s = {.head_dim = 32, .style = PE_ROPE_GPTJ, .max_positions = 64, .kd = PE_BF16,
            .cd = PE_BF16, .batch = 3, .tokens = 5, .hq = 2, .hk = 1, .nb = 2, .bs = 8};
  pe_rope_cache *c = make_cache(32, 0, PE_ROPE_GPTJ, 64, 0.0);
  bufs b;
  bufs_make(&s, &b);
  for (int64_t i = 0; i < 15; i++) b.slots[i] = -1;
  void *before = malloc(b.cb), *q_before = malloc(b.qb);
  memcpy(before, b.cache, b.cb);
  memcpy(q_before, b.q, b.qb);
  assert_int_equal(pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, 0, NULL), PE_OK);
  assert_memory_equal(b.cache, before, b.cb);
  assert_memory_not_equal(b.q, q_before, b.qb);
  free(before), free(q_before);
  bufs_free(&b);
  pe_rope_cache_destroy(c);
}

/* Decode: many sequences of one token each, each to its own slot. */
static void test_store_decode_shape(void **state) {
  (void)state;
  const pe_dtype dts[3] = {PE_F32, PE_F16, PE_BF16};
  for (int d = 0; d < 3; d++) {
    scen s = {.head_dim = 128, .style = PE_ROPE_NEOX, .max_positions = 8192, .kd = PE_BF16,
              .cd = dts[d], .hnd = d & 1, .batch = 8, .tokens = 1, .hq = 32, .hk = 8, .nb = 9,
              .bs = 16};
    run_definition_case(&s);
  }
}

/* A reversed view of k (negative token stride) with reversed slots and
 * positions writes the same cache as the forward view. */
static void test_store_negative_stride(void **state) {
  (void)state;
  scen s = {.head_dim = 64, .style = PE_ROPE_GPTJ, .max_positions = 256, .kd = PE_F32,
            .cd = PE_F16, .batch = 1, .tokens = 20, .hq = 1, .hk = 2, .nb = 3, .bs = 8};
  pe_rope_cache *c = make_cache(64, 0, PE_ROPE_GPTJ, 256, 0.0);
  bufs b;
  bufs_make(&s, &b);
  void *c0 = malloc(b.cb);
  memcpy(c0, b.cache, b.cb);
  assert_int_equal(pe_apply_rope_qk_store(c, NULL, &b.tk, &b.tc, b.slots, b.pos, 0, NULL), PE_OK);
  void *fwd = malloc(b.cb);
  memcpy(fwd, b.cache, b.cb);
  memcpy(b.cache, c0, b.cb);
  pe_tensor rev = b.tk;
  rev.data = (float *)b.k + (s.tokens - 1) * b.tk.stride[2];
  rev.stride[2] = -b.tk.stride[2];
  int64_t rs[20], rp[20];
  for (int i = 0; i < 20; i++) rs[i] = b.slots[19 - i], rp[i] = b.pos[19 - i];
  assert_int_equal(pe_apply_rope_qk_store(c, NULL, &rev, &b.tc, rs, rp, 0, NULL), PE_OK);
  assert_memory_equal(b.cache, fwd, b.cb);
  free(c0), free(fwd);
  bufs_free(&b);
  pe_rope_cache_destroy(c);
}

/* ---- errors ---- */

static void expect_unchanged_error(pe_status got, pe_status want, const char *needle,
                                   const bufs *b, const void *q0, const void *k0, const void *c0) {
  if (got != want) print_error("status %d, wanted %d: %s\n", got, want, pe_last_error());
  assert_int_equal(got, want);
  if (!strstr(pe_last_error(), needle)) print_error("message \"%s\" lacks \"%s\"\n", pe_last_error(), needle);
  assert_non_null(strstr(pe_last_error(), needle));
  assert_memory_equal(b->q, q0, b->qb);
  assert_memory_equal(b->k, k0, b->kb);
  assert_memory_equal(b->cache, c0, b->cb);
}

static void test_store_errors_change_nothing(void **state) {
  (void)state;
  scen s = {.head_dim = 64, .style = PE_ROPE_NEOX, .max_positions = 128, .kd = PE_F32,
            .cd = PE_BF16, .batch = 2, .tokens = 8, .hq = 4, .hk = 2, .nb = 4, .bs = 8};
  pe_rope_cache *c = make_cache(64, 0, PE_ROPE_NEOX, 128, 0.0);
  bufs b;
  bufs_make(&s, &b);
  for (int64_t i = 0; i < 16; i++) b.slots[i] = i; /* no padding: every slot counts */
  void *q0 = malloc(b.qb), *k0 = malloc(b.kb), *c0 = malloc(b.cb);
  memcpy(q0, b.q, b.qb), memcpy(k0, b.k, b.kb), memcpy(c0, b.cache, b.cb);
  pe_status st;

  st = pe_apply_rope_qk_store(NULL, &b.tq, &b.tk, &b.tc, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_NULL_POINTER, "cache is NULL", &b, q0, k0, c0);
  st = pe_apply_rope_qk_store(c, &b.tq, NULL, &b.tc, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_NULL_POINTER, "k is NULL", &b, q0, k0, c0);
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, NULL, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_NULL_POINTER, "k_cache is NULL", &b, q0, k0, c0);
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, NULL, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_NULL_POINTER, "slot_mapping is NULL", &b, q0, k0, c0);

  /* slot out of range (the last token: everything before is valid) */
  b.slots[15] = 32;
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_INVALID_ARGUMENT, "slot_mapping 32 at [batch 1, token 7]", &b,
                         q0, k0, c0);
  b.slots[15] = -2;
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_INVALID_ARGUMENT, "slot_mapping -2", &b, q0, k0, c0);
  /* duplicate: token [1, 7] takes the slot of [0, 3] */
  b.slots[15] = 3;
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_INVALID_ARGUMENT,
                         "slot 3 twice, at [batch 0, token 3] and [batch 1, token 7]", &b, q0, k0, c0);
  b.slots[15] = 15;

  /* position past the table (last token) */
  int64_t p0 = b.pos[15];
  b.pos[15] = 128;
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_POSITION_OUT_OF_RANGE, "position 128 at [batch 1, token 7]", &b,
                         q0, k0, c0);
  b.pos[15] = -1;
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_POSITION_OUT_OF_RANGE, "is negative", &b, q0, k0, c0);
  b.pos[15] = p0;

  /* flags, shapes, dtypes, overlap */
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, 8u, NULL);
  expect_unchanged_error(st, PE_ERR_INVALID_ARGUMENT, "unknown bits 0x8", &b, q0, k0, c0);
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, PE_ROPE_MROPE_INTERLEAVED, NULL);
  expect_unchanged_error(st, PE_ERR_INVALID_ARGUMENT, "unknown bits 0x2", &b, q0, k0, c0);
  pe_tensor bad = b.tc;
  bad.shape[1] = 1;
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &bad, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_SHAPE, "k_cache heads (shape[1]) 1 != k heads 2", &b, q0, k0, c0);
  bad = b.tc;
  bad.shape[3] = 32;
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &bad, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_SHAPE, "k_cache head_dim (shape[3]) 32", &b, q0, k0, c0);
  bad = b.tc;
  bad.dtype = (pe_dtype)7;
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &bad, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_DTYPE, "k_cache->dtype 7", &b, q0, k0, c0);
  bad = b.tc;
  bad.stride[2] = 1; /* slots alias within a row */
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &bad, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_SHAPE, "k_cache is written in place but its strides alias", &b,
                         q0, k0, c0);
  bad = b.tk; /* a cache view over k's own memory */
  bad.shape[0] = 1;
  bad.dtype = PE_F32;
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &bad, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_SHAPE, "k_cache and k overlap", &b, q0, k0, c0);
  bad = b.tq;
  bad.shape[0] = 1;
  bad.shape[1] = 2;
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &bad, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_SHAPE, "k_cache and q overlap", &b, q0, k0, c0);
  bad = b.tq;
  bad.shape[2] = 7;
  st = pe_apply_rope_qk_store(c, &bad, &b.tk, &b.tc, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_SHAPE, "must match", &b, q0, k0, c0);

  /* and the valid call still works afterwards */
  assert_int_equal(pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, 0, NULL), PE_OK);
  free(q0), free(k0), free(c0);
  bufs_free(&b);
  pe_rope_cache_destroy(c);
}

/* More than 512 runs (a shuffled mapping): the duplicate search spans
 * several groups; a duplicate between the first and the last token is found,
 * a permutation passes. */
static void test_store_duplicate_far_apart(void **state) {
  (void)state;
  scen s = {.head_dim = 16, .style = PE_ROPE_NEOX, .max_positions = 16, .kd = PE_F32,
            .cd = PE_F32, .batch = 3, .tokens = 700, .hq = 1, .hk = 1, .nb = 2200, .bs = 1};
  pe_rope_cache *c = make_cache(16, 0, PE_ROPE_NEOX, 16, 0.0);
  bufs b;
  bufs_make(&s, &b);
  for (int64_t i = 0; i < 2100; i++) b.pos[i] = i % 16;
  /* a permutation of 0..2099 in strided order: 2100 runs of length 1 */
  for (int64_t i = 0; i < 2100; i++) b.slots[i] = (i * 1009) % 2100;
  void *q0 = malloc(b.qb), *k0 = malloc(b.kb), *c0 = malloc(b.cb);
  memcpy(q0, b.q, b.qb), memcpy(k0, b.k, b.kb), memcpy(c0, b.cache, b.cb);
  int64_t keep = b.slots[2099];
  b.slots[2099] = b.slots[0];
  pe_status st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, 0, NULL);
  char want[128];
  snprintf(want, sizeof want, "slot %lld twice, at [batch 0, token 0] and [batch 2, token 699]",
           (long long)b.slots[0]);
  expect_unchanged_error(st, PE_ERR_INVALID_ARGUMENT, want, &b, q0, k0, c0);
  /* a duplicate inside the second group */
  b.slots[2099] = keep;
  int64_t keep2 = b.slots[1500];
  b.slots[1500] = b.slots[1400];
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_INVALID_ARGUMENT, "twice", &b, q0, k0, c0);
  b.slots[1500] = keep2;
  /* overlapping runs: [10, 20) from token 0 and a run through 15 later */
  for (int64_t i = 0; i < 2100; i++) b.slots[i] = i;
  b.slots[2000] = 15, b.slots[2001] = 16;
  st = pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, 0, NULL);
  expect_unchanged_error(st, PE_ERR_INVALID_ARGUMENT, "slot 15 twice, at [batch 0, token 15] and [batch 2, token 600]",
                         &b, q0, k0, c0);
  for (int64_t i = 0; i < 2100; i++) b.slots[i] = (i * 1009) % 2100;
  assert_int_equal(pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, 0, NULL), PE_OK);
  free(q0), free(k0), free(c0);
  bufs_free(&b);
  pe_rope_cache_destroy(c);
}

/* ---- every ISA and pool size against scalar, bit for bit ---- */

/* The scenario's cache then q after the call under the path in use (the
 * path's own table build), inputs from the same seed every time. */
typedef struct store_run {
  const scen *s;
  uint64_t seed;
} store_run;

static size_t store_bytes(const scen *s) {
  return (size_t)(s->nb * s->bs * s->hk * s->head_dim) * esize(s->cd) +
         (size_t)(s->batch * s->tokens * s->hq * s->head_dim) * esize(s->kd);
}

static void run_store(void *ctx, pe_threadpool *pool, void *out) {
  const store_run *r = ctx;
  const scen *s = r->s;
  rng = r->seed;
  pe_rope_cache *c = make_cache(s->head_dim, s->rotary_dim, s->style, s->max_positions, 0.7);
  bufs b;
  bufs_make(s, &b);
  assert_int_equal(pe_apply_rope_qk_store(c, &b.tq, &b.tk, &b.tc, b.slots, b.pos, s->flags, pool),
                   PE_OK);
  assert_int_equal(b.cb + b.qb, store_bytes(s));
  memcpy(out, b.cache, b.cb);
  memcpy((char *)out + b.cb, b.q, b.qb);
  pe_rope_cache_destroy(c);
  bufs_free(&b);
}

static void describe(const scen *s, char *what, size_t n) {
  snprintf(what, n, "head_dim %d rotary %d style %d k %d cache %d hnd %d flags %u wild %d (cache "
           "bytes, then q)", s->head_dim, s->rotary_dim, s->style, s->kd, s->cd, s->hnd,
           s->flags, s->wild);
}

static void test_store_bit_identical_across_isas(void **state) {
  (void)state;
  if (!pe_test_any_simd_path()) skip(); /* only scalar here: nothing to compare */
  const pe_dtype dts[3] = {PE_F32, PE_F16, PE_BF16};
  const int32_t dims[][2] = {{2, 0}, {10, 0}, {34, 0}, {46, 30}, {64, 0}, {128, 96}, {80, 0}};
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
    for (int kd = 0; kd < 3; kd++)
      for (int cd = 0; cd < 3; cd++)
        for (int style = 0; style < 2; style++) {
          scen s = {.head_dim = dims[d][0], .rotary_dim = dims[d][1],
                    .style = (pe_rope_style)style, .max_positions = (d & 1) ? 0 : 300,
                    .kd = dts[kd], .cd = dts[cd], .hnd = style, .batch = 2, .tokens = 7,
                    .hq = 3, .hk = 2, .nb = 3, .bs = 8,
                    .flags = ((d % 3 == 2) ? PE_ROPE_INVERSE : 0u) |
                             (((int)d + kd + cd) & 1 ? PE_ROPE_STREAM_CACHE : 0u),
                    .wild = (kd + cd + (int)d) & 1};
          store_run r = {&s, rng};
          char what[160];
          describe(&s, what, sizeof what);
          pe_isa_compare(what, store_bytes(&s), run_store, &r);
        }
}

/* Larger calls (300 tokens, 80 blocks): a pool against one thread, and
 * every path against scalar. */
static void test_store_pool_sizes(void **state) {
  (void)state;
  pe_threadpool *pool = NULL;
  assert_int_equal(pe_threadpool_create(4, &pool), PE_OK);
  scen s = {.head_dim = 128, .style = PE_ROPE_NEOX, .max_positions = 4096, .kd = PE_BF16,
            .cd = PE_BF16, .batch = 4, .tokens = 300, .hq = 8, .hk = 4, .nb = 80, .bs = 16};
  for (int i = 0; i < 3; i++) {
    store_run r = {&s, rng};
    char what[160];
    describe(&s, what, sizeof what);
    pe_pool_compare(what, store_bytes(&s), run_store, &r, pool);
    pe_isa_compare(what, store_bytes(&s), run_store, &r);
    s.kd = PE_F32, s.cd = PE_F16, s.max_positions = i ? 4096 : 0;
    s.flags = PE_ROPE_STREAM_CACHE; /* the third: streamed rows */
  }
  pe_threadpool_destroy(pool);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_equals_apply_then_convert),
      cmocka_unit_test(test_store_same_dtype_is_apply_plus_copy),
      cmocka_unit_test(test_store_float64_reference),
      cmocka_unit_test(test_store_all_padding),
      cmocka_unit_test(test_store_decode_shape),
      cmocka_unit_test(test_store_negative_stride),
      cmocka_unit_test(test_store_errors_change_nothing),
      cmocka_unit_test(test_store_duplicate_far_apart),
      cmocka_unit_test(test_store_bit_identical_across_isas),
      cmocka_unit_test(test_store_pool_sizes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
