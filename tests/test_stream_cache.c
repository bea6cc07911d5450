/* test_stream_cache.c - PE_ROPE_STREAM_CACHE on pe_qk_norm_rope_store: the
 * bytes it stores are the bytes stored without it.
 *
 * What is checked against what: one call with the flag and one without, on
 * the same inputs, on the path in use and with pools of 2 and 3 threads;
 * q and every byte of both cache buffers (the sentinel bytes of rows nobody
 * maps, the padding between rows and blocks, the bytes before the cache's
 * first row) equal. Every k/v format (plain f32, f16 and bf16 caches,
 * which stream; FP8 e4m3 and e5m2 with their scales, Q8_0 and the
 * row-scaled FP8, which the flag leaves to ordinary stores, alone and
 * beside a plain cache), NHD and HND caches, caches whose rows
 * start at every kind of offset from a 64-byte line (the cache base moved
 * by a few bytes, rows padded to lengths that are not multiples of 64),
 * head rows shorter and longer than a line, the norm on and off, v on and
 * off, slots -1, decode (one token of many sequences; one token of one,
 * below and at the 8 KiB a call must write to stream) and prefill shapes,
 * 40 kv heads (more normed rows than a block stage holds: the engine's head
 * groups), and the rows the flag does not stream (a cache computed on the
 * fly, PE_ROPE_INVERSE). Every path this build and CPU run, each on its own.
 * The stored values themselves are test_rope_store.c's, test_qk_norm.c's
 * and test_kv_quant.c's business; the flag with pe_apply_rope_qk_store is
 * also checked against its definition there, and with pe_mla_rope_store in
 * test_mla.c. */
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

#define TEST_RNG_SEED 0x3c6ef372fe94f82bull
#include "isa_compare.h"
#include "test_util.h"

typedef struct scen {
  const char *name;
  int32_t head_dim, rotary_dim; /* rotary 0: head_dim */
  pe_dtype dt;                  /* q, k, v */
  pe_dtype cd;                  /* plain caches' dtype */
  uint32_t kq, vq;              /* pe_kv_quant of k and v */
  int hnd;                      /* [NB, H, BS, row] (else [NB, BS, H, row]) */
  int64_t batch, tokens, hq, hk, nb, bs;
  int64_t base_off, row_pad;    /* bytes before the cache, bytes after each row */
  int norm, with_v;
  int64_t max_positions;        /* 0: on the fly */
  uint32_t flags;               /* besides the flag under test */
} scen;

static int64_t row_bytes(uint32_t q, int64_t d, pe_dtype cd) {
  switch (q) {
    case PE_KV_FP8_E4M3:
    case PE_KV_FP8_E5M2:
    case PE_KV_FP8_E4M3_ROWSCALE: return d;
    case PE_KV_Q8_0: return d / 32 * 34;
    default: return d * (cd == PE_F32 ? 4 : 2);
  }
}

/* A cache tensor of format q over mem + base_off (strides in elements for
 * plain rows, in bytes for quantized ones), and its bytes from mem. */
static pe_tensor cache_tensor(const scen *s, void *mem, uint32_t q, size_t *bytes) {
  const int64_t d = s->head_dim, es = q ? 1 : (s->cd == PE_F32 ? 4 : 2);
  int64_t row = row_bytes(q, d, s->cd) + s->row_pad; /* bytes from one row to the next */
  pe_tensor t;
  memset(&t, 0, sizeof t);
  t.data = (char *)mem + s->base_off;
  t.dtype = s->cd;
  t.shape[0] = s->nb, t.shape[1] = s->hk, t.shape[2] = s->bs, t.shape[3] = d;
  t.stride[3] = 1;
  int64_t block;
  if (q == PE_KV_FP8_E4M3_ROWSCALE) { /* one head, block-major, scales after the rows */
    t.stride[2] = d, t.stride[1] = d;
    block = s->bs * (d + 4) + 24;
  } else if (s->hnd) {
    t.stride[2] = row / es, t.stride[1] = s->bs * row / es;
    block = s->hk * s->bs * row;
  } else {
    t.stride[1] = row / es, t.stride[2] = s->hk * row / es;
    block = s->bs * s->hk * row;
  }
  t.stride[0] = block / es;
  *bytes = (size_t)(s->base_off + s->nb * block + 64);
  return t;
}

typedef struct run_ctx {
  const scen *s;
  uint32_t flags;
  size_t qbytes, kbytes, vbytes;
} run_ctx;

/* The call on inputs rebuilt from the seed: out = q, then the k cache's
 * bytes, then the v cache's. */
static void run_call(void *ctx, pe_threadpool *pool, void *out) {
  const run_ctx *r = ctx;
  const scen *s = r->s;
  uint64_t seed = 0x510e527fade682d1ull;
  const int64_t B = s->batch, T = s->tokens, D = s->head_dim, es = s->dt == PE_F32 ? 4 : 2;
  const int64_t nq = B * T * s->hq * D, nk = B * T * s->hk * D;
  char *q = malloc((size_t)(nq * es)), *k = malloc((size_t)(nk * es)), *v = malloc((size_t)(nk * es));
  uint8_t *kc = malloc(r->kbytes), *vc = malloc(r->vbytes ? r->vbytes : 1);
  assert_true(q && k && v && kc && vc);
  float w[256];
  for (int i = 0; i < 256; i++) w[i] = 0.5f + (float)unit_double(xorshift64s(&seed));
  char *bufs[3] = {q, k, v};
  const int64_t counts[3] = {nq, nk, nk};
  for (int b = 0; b < 3; b++)
    for (int64_t i = 0; i < counts[b]; i++) {
      float x = (float)(unit_double(xorshift64s(&seed)) * 8.0 - 4.0);
      if (s->dt == PE_F32) ((float *)bufs[b])[i] = x;
      else if (s->dt == PE_BF16) ((uint16_t *)bufs[b])[i] = bf16_rne(x);
      else ((uint16_t *)bufs[b])[i] = (uint16_t)(0x3800 + (xorshift64s(&seed) & 0x07ff)); /* f16 in [0.5, 1) */
    }
  for (size_t i = 0; i < r->kbytes; i++) kc[i] = (uint8_t)(i * 131 + 7); /* sentinels */
  for (size_t i = 0; i < r->vbytes; i++) vc[i] = (uint8_t)(i * 37 + 3);
  size_t kb, vb;
  pe_tensor tkc = cache_tensor(s, kc, s->kq, &kb), tvc = cache_tensor(s, vc, s->vq, &vb);
  pe_tensor tq = tensor_bthd(q, s->dt, B, s->hq, T, D), tk = tensor_bthd(k, s->dt, B, s->hk, T, D),
            tv = tensor_bthd(v, s->dt, B, s->hk, T, D);
  int64_t *pos = malloc((size_t)(B * T) * sizeof *pos), *slots = malloc((size_t)(B * T) * sizeof *slots);
  assert_true(pos && slots);
  const int64_t n_slots = s->nb * s->bs;
  for (int64_t i = 0; i < B * T; i++) {
    pos[i] = (T == 1 ? 3000 + 5 * i : i % T);
    /* distinct slots spread through the cache (a stride prime to the slot
     * count), every seventh token padding */
    slots[i] = i % 7 == 3 ? -1 : (i * 37 + 11) % n_slots;
  }
  pe_rope_params p = rope_params(D, s->rotary_dim, PE_ROPE_NEOX, 10000.0, s->max_positions);
  pe_rope_cache *c = new_cache(&p);
  pe_qk_norm n;
  pe_qk_norm_init(&n);
  if (s->norm) {
    n.kind = PE_QK_NORM_RMS;
    n.eps = 1e-6f;
    n.q_weight = w;
    n.k_weight = w + 128 - D / 2;
  }
  float ks = 0.05f, vs = 0.03f;
  pe_kv_cache kv;
  pe_kv_cache_init(&kv);
  kv.k = &tkc;
  kv.v = s->with_v ? &tvc : NULL;
  kv.k_quant = s->kq;
  kv.v_quant = s->with_v ? s->vq : PE_KV_PLAIN;
  if (s->kq == PE_KV_FP8_E4M3 || s->kq == PE_KV_FP8_E5M2) kv.k_scale = &ks;
  if (s->with_v && (s->vq == PE_KV_FP8_E4M3 || s->vq == PE_KV_FP8_E5M2)) kv.v_scale = &vs;
  pe_status st = pe_qk_norm_rope_store(c, &n, &tq, &tk, s->with_v ? &tv : NULL, &kv, slots, pos,
                                       s->flags | r->flags, pool);
  if (st != PE_OK) fail_msg("%s: %s", s->name, pe_last_error());
  memcpy(out, q, r->qbytes);
  memcpy((char *)out + r->qbytes, kc, r->kbytes);
  memcpy((char *)out + r->qbytes + r->kbytes, vc, r->vbytes);
  pe_rope_cache_destroy(c);
  free(q), free(k), free(v), free(kc), free(vc), free(pos), free(slots);
}

typedef struct path_ctx {
  const scen *s;
  pe_threadpool *pools[2];
} path_ctx;

static void same_bytes_on_path(void *ctx, const char *path) {
  const path_ctx *pc = ctx;
  const scen *s = pc->s;
  size_t kb, vb;
  uint8_t dummy[1];
  cache_tensor(s, dummy, s->kq, &kb);
  cache_tensor(s, dummy, s->vq, &vb);
  run_ctx r = {s, 0, (size_t)(s->batch * s->tokens * s->hq * s->head_dim) * (s->dt == PE_F32 ? 4 : 2),
               kb, s->with_v ? vb : 0};
  const size_t bytes = r.qbytes + r.kbytes + r.vbytes;
  uint8_t *ref = malloc(bytes), *got = malloc(bytes);
  assert_true(ref && got);
  run_call(&r, NULL, ref);
  r.flags = PE_ROPE_STREAM_CACHE;
  for (int p = 0; p < 3; p++) {
    memset(got, 0xa5, bytes);
    run_call(&r, p ? pc->pools[p - 1] : NULL, got);
    char what[160];
    snprintf(what, sizeof what, "%s on %s%s (q, k cache, v cache)", s->name, path,
             p == 0 ? "" : p == 1 ? ", pool of 2" : ", pool of 3");
    pe_test_same_bytes(what, "without the flag", "PE_ROPE_STREAM_CACHE", ref, got, bytes, NULL);
  }
  free(ref);
  free(got);
}

static void check(const scen *s, pe_threadpool *const pools[2]) {
  path_ctx pc = {s, {pools[0], pools[1]}};
  pe_on_every_path(same_bytes_on_path, &pc);
}

static void with_pools(void (*fn)(pe_threadpool *const pools[2])) {
  pe_threadpool *pools[2] = {NULL, NULL};
  assert_int_equal(pe_threadpool_create(2, &pools[0]), PE_OK);
  assert_int_equal(pe_threadpool_create(3, &pools[1]), PE_OK);
  fn(pools);
  pe_threadpool_destroy(pools[0]);
  pe_threadpool_destroy(pools[1]);
}

/* Plain caches: every tensor/cache dtype pair of serving, both layouts,
 * offsets and paddings that put rows across lines. */
static void plain_cases(pe_threadpool *const pools[2]) {
  static const pe_dtype dts[3] = {PE_F32, PE_F16, PE_BF16};
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++)
      for (int hnd = 0; hnd < 2; hnd++) {
        char name[96];
        snprintf(name, sizeof name, "plain %d->%d %s", a, b, hnd ? "HND" : "NHD");
        scen s = {.name = name, .head_dim = 64 + 32 * hnd, .dt = dts[a], .cd = dts[b],
                  .hnd = hnd, .batch = 2, .tokens = 9, .hq = 4, .hk = 2, .nb = 6, .bs = 4,
                  .base_off = 4 * (a + b + 1), .row_pad = hnd ? 12 : 0, .norm = (a + b) & 1,
                  .with_v = 1, .max_positions = 512};
        check(&s, pools);
      }
}
static void test_plain(void **state) {
  (void)state;
  with_pools(plain_cases);
}

/* Quantized caches, which the flag leaves to ordinary stores: each format
 * for k and v, partial rotary, decode and prefill, plain k with a
 * quantized v and the reverse. */
static void quant_cases(pe_threadpool *const pools[2]) {
  static const uint32_t fmts[] = {PE_KV_FP8_E4M3, PE_KV_FP8_E5M2, PE_KV_Q8_0};
  for (int f = 0; f < 3; f++)
    for (int g = 0; g < 3; g++)
      for (int decode = 0; decode < 2; decode++) {
        char name[96];
        snprintf(name, sizeof name, "k %u v %u %s", fmts[f], fmts[g], decode ? "decode" : "prefill");
        scen s = {.name = name, .head_dim = 128, .rotary_dim = f == 1 ? 64 : 0, .dt = PE_BF16,
                  .cd = PE_BF16, .kq = fmts[f], .vq = fmts[g], .hnd = g == 2,
                  .batch = decode ? 11 : 1, .tokens = decode ? 1 : 21, .hq = 4, .hk = 2,
                  .nb = 8, .bs = 4, .base_off = 5 + f, .row_pad = 3 * g, .norm = g != 1,
                  .with_v = 1, .max_positions = 4096};
        check(&s, pools);
      }
}
static void mixed_cases(pe_threadpool *const pools[2]) {
  for (int kq = 0; kq < 2; kq++) {
    scen s = {.name = kq ? "k q8_0, v plain" : "k plain, v fp8", .head_dim = 128, .dt = PE_BF16,
              .cd = PE_BF16, .kq = kq ? PE_KV_Q8_0 : PE_KV_PLAIN,
              .vq = kq ? PE_KV_PLAIN : PE_KV_FP8_E4M3, .batch = 1, .tokens = 17, .hq = 4, .hk = 2,
              .nb = 6, .bs = 4, .norm = 1, .with_v = 1, .max_positions = 512};
    check(&s, pools);
  }
}
static void test_quantized(void **state) {
  (void)state;
  with_pools(quant_cases);
  with_pools(mixed_cases);
}

/* What the flag leaves to ordinary stores, and the engine's edges: the
 * row-scaled FP8 cache (one head), a cache computed on the fly, the
 * inverse rotation, no v, a token's rows past the stage (40 kv heads of
 * 128 f32: 40 KiB), head rows shorter than a line. */
static void edge_cases(pe_threadpool *const pools[2]) {
  const scen cases[] = {
      {.name = "rowscale k", .head_dim = 128, .dt = PE_BF16, .cd = PE_BF16,
       .kq = PE_KV_FP8_E4M3_ROWSCALE, .batch = 1, .tokens = 10, .hq = 2, .hk = 1, .nb = 4,
       .bs = 4, .norm = 1, .max_positions = 512},
      {.name = "on the fly", .head_dim = 64, .dt = PE_F32, .cd = PE_F32, .batch = 1,
       .tokens = 12, .hq = 2, .hk = 2, .nb = 4, .bs = 4, .with_v = 1, .norm = 1},
      {.name = "inverse", .head_dim = 64, .dt = PE_F32, .cd = PE_BF16, .batch = 2, .tokens = 5,
       .hq = 2, .hk = 2, .nb = 4, .bs = 4, .with_v = 1, .max_positions = 512,
       .flags = PE_ROPE_INVERSE},
      {.name = "no v", .head_dim = 64, .dt = PE_BF16, .cd = PE_F32, .batch = 3, .tokens = 12,
       .hq = 2, .hk = 2, .nb = 16, .bs = 4, .base_off = 8, .max_positions = 512},
      {.name = "one token, 4 KiB (below the bytes streamed)", .head_dim = 128, .dt = PE_BF16,
       .cd = PE_BF16, .batch = 1, .tokens = 1, .hq = 32, .hk = 8, .nb = 2, .bs = 4, .with_v = 1,
       .norm = 1, .max_positions = 4096},
      {.name = "one token, 8 KiB", .head_dim = 128, .dt = PE_F32, .cd = PE_F32, .batch = 1,
       .tokens = 1, .hq = 32, .hk = 8, .nb = 2, .bs = 4, .with_v = 1, .norm = 1,
       .max_positions = 4096},
      {.name = "40 kv heads f32", .head_dim = 128, .dt = PE_F32, .cd = PE_F32, .batch = 1,
       .tokens = 3, .hq = 40, .hk = 40, .nb = 2, .bs = 4, .with_v = 1, .norm = 1,
       .max_positions = 512},
      {.name = "8 kv heads f32, norm", .head_dim = 128, .dt = PE_F32, .cd = PE_F32, .batch = 1,
       .tokens = 19, .hq = 32, .hk = 8, .nb = 6, .bs = 4, .with_v = 1, .norm = 1,
       .max_positions = 512},
      {.name = "short rows", .head_dim = 16, .dt = PE_BF16, .cd = PE_BF16, .batch = 5,
       .tokens = 40, .hq = 3, .hk = 3, .nb = 64, .bs = 4, .base_off = 2, .row_pad = 2,
       .with_v = 1, .max_positions = 512},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check(&cases[i], pools);
}
static void test_edges(void **state) {
  (void)state;
  with_pools(edge_cases);
}

/* The flag is a store's: pe_qk_norm_rope (in place, no cache) refuses it,
 * as it refuses any flag it does not take, and writes nothing. */
static void test_refused_without_cache(void **state) {
  (void)state;
  pe_rope_cache *c = rope_cache(64, 0, PE_ROPE_NEOX, 10000.0, 64);
  float q[2 * 64], q0[2 * 64];
  for (int i = 0; i < 2 * 64; i++) q[i] = q0[i] = (float)i;
  pe_tensor tq = tensor_bthd(q, PE_F32, 1, 2, 1, 64);
  pe_qk_norm n;
  pe_qk_norm_init(&n);
  assert_int_equal(pe_qk_norm_rope(c, &n, &tq, NULL, NULL, PE_ROPE_STREAM_CACHE, NULL),
                   PE_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(pe_last_error(), "unknown bits 0x4"));
  assert_memory_equal(q, q0, sizeof q);
  pe_rope_cache_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plain),
      cmocka_unit_test(test_quantized),
      cmocka_unit_test(test_edges),
      cmocka_unit_test(test_refused_without_cache),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
