/* test_kv_quant.c - quantized KV caches through the public API (posenc.h's
 * pe_kv_cache formats):
 *   - pe_qk_norm_rope_store into FP8 e4m3fn / e5m2 and Q8_0 caches: every
 *     written row's bytes are what norm + RoPE in float32 (pe_qk_norm_rope
 *     on a float32 copy of k, itself checked against float64 in
 *     test_qk_norm) then the reference quantizer of kv_quant_ref.h (the OCP
 *     FP8 definition, ggml's quantize_row_q8_0_ref) give; v's rows the
 *     reference quantization of v; rows without a token untouched;
 *   - pe_kv_read: the reference dequantization, rounded to f32/f16/bf16;
 *   - the same bytes on every ISA and pool size;
 *   - every error writes nothing. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kv_quant_ref.h"
#include "posenc.h"

#include "isa_compare.h"

static uint64_t rng_s = 0x1234567887654321ull;
static uint64_t rnd(void) { return splitmix64(&rng_s); }
/* uniform in [-a, a) */
static float urand(float a) { return (float)(unit_double(rnd()) * 2.0 - 1.0) * a; }

/* f16 / bf16 from float32, round to nearest even: binary16 through
 * kv_quant_ref.h's transcription of ggml's fp16 conversions (the FP16
 * library's, not the library's convert.h), bfloat16 written here. */
static uint16_t to_f16(float f) { return ggml_fp32_to_fp16(f); }
static float from_f16(uint16_t u) { return ggml_fp16_to_fp32(u); }
static uint16_t to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static size_t esz(pe_dtype d) { return d == PE_F32 ? 4 : 2; }
static float load_elem(pe_dtype d, const void *p, int64_t i) {
  if (d == PE_F32) return ((const float *)p)[i];
  uint16_t u = ((const uint16_t *)p)[i];
  return d == PE_F16 ? from_f16(u) : bits_f32((uint32_t)u << 16);
}
static void store_elem(pe_dtype d, void *p, int64_t i, float v) {
  if (d == PE_F32) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = d == PE_F16 ? to_f16(v) : to_bf16(v);
}

static int64_t row_bytes(uint32_t quant, int64_t dim) {
  return quant == PE_KV_Q8_0 ? dim / 32 * 34 : dim;
}

/* ---- a store problem ---- */

enum { B = 2, T = 23, HK = 4, HQ = 8, NB = 8, BS = 16 };

typedef struct prob {
  int32_t hd, rot, vd;
  pe_dtype kd;
  uint32_t kq, vq;
  float kscale, vscale;
  pe_rope_cache *c;
  pe_qk_norm norm;
  float kw[256];
  void *q, *k, *v;          /* [B, T, H, D] */
  pe_tensor qt, kt, vt;
  uint8_t *kc, *vc;         /* [NB, BS, HK, row] bytes: strides in bytes */
  pe_tensor kct, vct;
  pe_kv_cache kv;
  int64_t slots[B * T], pos[B * T];
} prob;

static pe_tensor bthd(void *data, pe_dtype dt, int64_t h, int64_t d) {
  pe_tensor t = {.data = data, .dtype = dt, .shape = {B, h, T, d},
                 .stride = {T * h * d, d, h * d, 1}};
  return t;
}
static pe_tensor cache_tensor(uint8_t *data, uint32_t quant, int64_t d) {
  int64_t rb = row_bytes(quant, d);
  pe_tensor t = {.data = data, .dtype = PE_F32, .shape = {NB, HK, BS, d},
                 .stride = {BS * HK * rb, rb, HK * rb, 1}};
  return t;
}

static void prob_make(prob *p, int32_t hd, int32_t rot, int32_t vd, pe_dtype kd, uint32_t kq,
                      uint32_t vq, pe_qk_norm_kind kind) {
  memset(p, 0, sizeof *p);
  p->hd = hd, p->rot = rot, p->vd = vd, p->kd = kd, p->kq = kq, p->vq = vq;
  p->kscale = 0.0371f, p->vscale = 2.5f;
  pe_rope_params rp;
  pe_rope_params_init(&rp);
  rp.head_dim = hd;
  rp.rotary_dim = rot;
  rp.base = 500000.0;
  assert_int_equal(pe_rope_cache_create(&rp, &p->c), PE_OK);
  pe_qk_norm_init(&p->norm);
  p->norm.kind = kind;
  for (int i = 0; i < 256; i++) p->kw[i] = 0.5f + urand(0.5f);
  if (kind == PE_QK_NORM_RMS) p->norm.k_weight = p->norm.q_weight = p->kw;
  p->q = calloc((size_t)(B * T * HQ * hd), esz(kd));
  p->k = calloc((size_t)(B * T * HK * hd), esz(kd));
  p->v = calloc((size_t)(B * T * HK * vd), esz(kd));
  float mag = kind == PE_QK_NORM_NONE ? 3.0f : 40.0f;
  for (int64_t i = 0; i < B * T * HQ * hd; i++) store_elem(kd, p->q, i, urand(mag));
  for (int64_t i = 0; i < B * T * HK * hd; i++) store_elem(kd, p->k, i, urand(mag));
  for (int64_t i = 0; i < B * T * HK * vd; i++) store_elem(kd, p->v, i, urand(mag));
  /* a zero block and a +-amax tie in k's and v's first rows */
  for (int i = 0; i < 32 && i < hd; i++) store_elem(kd, p->k, i, 0.0f);
  store_elem(kd, p->v, 1, 2.0f), store_elem(kd, p->v, 2, -2.0f);
  p->qt = bthd(p->q, kd, HQ, hd);
  p->kt = bthd(p->k, kd, HK, hd);
  p->vt = bthd(p->v, kd, HK, vd);
  size_t kb = (size_t)(NB * BS * HK * row_bytes(kq, hd)), vb = (size_t)(NB * BS * HK * row_bytes(vq, vd));
  if (!kq) kb = (size_t)(NB * BS * HK * hd) * 4;
  p->kc = malloc(kb), p->vc = malloc(vb);
  memset(p->kc, 0xa5, kb), memset(p->vc, 0x5a, vb);
  p->kct = cache_tensor(p->kc, kq, hd);
  p->vct = cache_tensor(p->vc, vq, vd);
  pe_kv_cache_init(&p->kv);
  p->kv.k = &p->kct, p->kv.v = &p->vct;
  p->kv.k_quant = kq, p->kv.v_quant = vq;
  p->kv.k_scale = kq == PE_KV_FP8_E4M3 || kq == PE_KV_FP8_E5M2 ? &p->kscale : NULL;
  p->kv.v_scale = vq == PE_KV_FP8_E4M3 || vq == PE_KV_FP8_E5M2 ? &p->vscale : NULL;
  /* a permutation of slots, some tokens skipped */
  int64_t perm[NB * BS];
  for (int i = 0; i < NB * BS; i++) perm[i] = i;
  for (int i = NB * BS - 1; i > 0; i--) {
    int j = (int)(rnd() % (uint64_t)(i + 1));
    int64_t t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  for (int u = 0; u < B * T; u++) {
    p->slots[u] = rnd() % 7 == 0 ? -1 : perm[u];
    p->pos[u] = 100 + u % T + (u / T) * 37;
  }
}
static void prob_free(prob *p) {
  pe_rope_cache_destroy(p->c);
  free(p->q), free(p->k), free(p->v), free(p->kc), free(p->vc);
}
static size_t kc_bytes(const prob *p) { return (size_t)(NB * BS * HK * row_bytes(p->kq, p->hd)); }
static size_t vc_bytes(const prob *p) { return (size_t)(NB * BS * HK * row_bytes(p->vq, p->vd)); }

static pe_status prob_store(prob *p, pe_threadpool *pool) {
  return pe_qk_norm_rope_store(p->c, &p->norm, &p->qt, &p->kt, &p->vt, &p->kv, p->slots, p->pos,
                               0, pool);
}

/* The expected cache rows: k widened to float32, pe_qk_norm_rope on that
 * copy, each row through ref_quant_row; v widened, ref_quant_row. */
static void check_rows(const prob *p) {
  int64_t nk = B * T * HK * p->hd;
  float *k32 = malloc((size_t)nk * 4);
  for (int64_t i = 0; i < nk; i++) k32[i] = load_elem(p->kd, p->k, i);
  pe_tensor k32t = bthd(k32, PE_F32, HK, p->hd);
  assert_int_equal(pe_qk_norm_rope(p->c, &p->norm, NULL, &k32t, p->pos, 0, NULL), PE_OK);
  int64_t krb = row_bytes(p->kq, p->hd), vrb = row_bytes(p->vq, p->vd);
  uint8_t want[4096];
  float vrow[512];
  int written[NB * BS] = {0};
  for (int u = 0; u < B * T; u++) {
    int64_t s = p->slots[u];
    if (s < 0) continue;
    written[s] = 1;
    int64_t b = u / T, t = u % T;
    for (int h = 0; h < HK; h++) {
      const float *kr = k32 + ((b * T + t) * HK + h) * p->hd;
      ref_quant_row((int)p->kq - 1, kr, want, p->hd, p->kscale);
      const uint8_t *got = p->kc + ((s / BS) * BS * HK + (s % BS) * HK + h) * krb;
      if (memcmp(got, want, (size_t)krb))
        for (int64_t i = 0; i < krb; i++)
          if (got[i] != want[i])
            fail_msg("k format %u dtype %d slot %lld head %d byte %lld: 0x%02x, want 0x%02x",
                     (unsigned)p->kq, (int)p->kd, (long long)s, h, (long long)i, got[i], want[i]);
      for (int i = 0; i < p->vd; i++)
        vrow[i] = load_elem(p->kd, p->v, ((b * T + t) * HK + h) * p->vd + i);
      ref_quant_row((int)p->vq - 1, vrow, want, p->vd, p->vscale);
      const uint8_t *gv = p->vc + ((s / BS) * BS * HK + (s % BS) * HK + h) * vrb;
      assert_memory_equal(gv, want, (size_t)vrb);
    }
  }
  for (int s = 0; s < NB * BS; s++)
    if (!written[s])
      for (int h = 0; h < HK; h++) {
        const uint8_t *g = p->kc + ((s / BS) * BS * HK + (s % BS) * HK + h) * krb;
        for (int64_t i = 0; i < krb; i++) assert_int_equal(g[i], 0xa5);
      }
  free(k32);
}

static const uint32_t formats[] = {PE_KV_FP8_E4M3, PE_KV_FP8_E5M2, PE_KV_Q8_0};

static void test_store_rows(void **state) {
  (void)state;
  const pe_dtype dts[] = {PE_F32, PE_F16, PE_BF16};
  const pe_qk_norm_kind kinds[] = {PE_QK_NORM_NONE, PE_QK_NORM_RMS};
  int cases = 0;
  for (int kf = 0; kf < 3; kf++)
    for (int d = 0; d < 3; d++)
      for (int n = 0; n < 2; n++) {
        prob p;
        /* full rotary 128 (Llama), partial 64 of 128 with v_head_dim 64 */
        int partial = (kf + d + n) % 2;
        prob_make(&p, 128, partial ? 64 : 128, partial ? 64 : 128, dts[d], formats[kf],
                  formats[(kf + 1 + d) % 3], kinds[n]);
        assert_int_equal(prob_store(&p, NULL), PE_OK);
        check_rows(&p);
        prob_free(&p);
        cases++;
      }
  assert_int_equal(cases, 18);
}

/* pe_kv_read: the reference dequantization of the stored bytes. */
static void test_read(void **state) {
  (void)state;
  for (int kf = 0; kf < 3; kf++) {
    prob p;
    prob_make(&p, 64, 64, 96, PE_F32, formats[kf], formats[(kf + 2) % 3], PE_QK_NORM_NONE);
    assert_int_equal(prob_store(&p, NULL), PE_OK);
    for (int od = PE_F32; od <= PE_BF16; od++) {
      size_t kn = (size_t)(B * HK * T * p.hd), vn = (size_t)(B * HK * T * p.vd);
      void *ko = malloc(kn * 4), *vo = malloc(vn * 4);
      memset(ko, 0x77, kn * 4), memset(vo, 0x77, vn * 4);
      pe_tensor kot = bthd(ko, (pe_dtype)od, HK, p.hd), vot = bthd(vo, (pe_dtype)od, HK, p.vd);
      assert_int_equal(pe_kv_read(&p.kv, &kot, &vot, p.slots), PE_OK);
      float want[128];
      for (int u = 0; u < B * T; u++) {
        int64_t s = p.slots[u];
        for (int h = 0; h < HK; h++) {
          const uint8_t *kr = p.kc + ((s / BS) * BS * HK + (s % BS) * HK + h) * row_bytes(p.kq, p.hd);
          const uint8_t *vr = p.vc + ((s / BS) * BS * HK + (s % BS) * HK + h) * row_bytes(p.vq, p.vd);
          int64_t ko_off = ((int64_t)u * HK + h) * p.hd, vo_off = ((int64_t)u * HK + h) * p.vd;
          if (s < 0) { /* untouched */
            assert_int_equal(((uint8_t *)ko)[ko_off * (int64_t)esz((pe_dtype)od)], 0x77);
            continue;
          }
          ref_dequant_row((int)p.kq - 1, kr, want, p.hd, p.kscale);
          for (int i = 0; i < p.hd; i++) {
            float g = load_elem((pe_dtype)od, ko, ko_off + i);
            float w = od == PE_F32 ? want[i] : od == PE_F16 ? from_f16(to_f16(want[i]))
                                                            : bits_f32((uint32_t)to_bf16(want[i]) << 16);
            assert_int_equal(f32_bits(g), f32_bits(w));
          }
          ref_dequant_row((int)p.vq - 1, vr, want, p.vd, p.vscale);
          for (int i = 0; i < p.vd; i++) {
            float g = load_elem((pe_dtype)od, vo, vo_off + i);
            float w = od == PE_F32 ? want[i] : od == PE_F16 ? from_f16(to_f16(want[i]))
                                                            : bits_f32((uint32_t)to_bf16(want[i]) << 16);
            assert_int_equal(f32_bits(g), f32_bits(w));
          }
        }
      }
      free(ko), free(vo);
    }
    /* pe_kv_write of v's rows: the reference quantization (v's cache as
     * the store left it: the same bytes), and k's stored rows read back
     * then written again come back unchanged for FP8 */
    memset(p.vc, 0x5a, vc_bytes(&p));
    assert_int_equal(pe_kv_write(&p.kv, NULL, &p.vt, p.slots), PE_OK);
    {
      float vrow[128];
      uint8_t want[256];
      int64_t vrb = row_bytes(p.vq, p.vd);
      for (int u = 0; u < B * T; u++) {
        int64_t s = p.slots[u];
        if (s < 0) continue;
        for (int h = 0; h < HK; h++) {
          for (int i = 0; i < p.vd; i++)
            vrow[i] = ((float *)p.v)[(((int64_t)u / T * T + u % T) * HK + h) * p.vd + i];
          ref_quant_row((int)p.vq - 1, vrow, want, p.vd, p.vscale);
          assert_memory_equal(p.vc + ((s / BS) * BS * HK + (s % BS) * HK + h) * vrb, want,
                              (size_t)vrb);
        }
      }
      int64_t dup[B * T];
      memcpy(dup, p.slots, sizeof dup);
      dup[3] = dup[1] >= 0 ? dup[1] : dup[2];
      uint8_t *snap = malloc(vc_bytes(&p));
      memcpy(snap, p.vc, vc_bytes(&p));
      if (dup[3] >= 0) {
        assert_int_equal(pe_kv_write(&p.kv, NULL, &p.vt, dup), PE_ERR_INVALID_ARGUMENT);
        assert_memory_equal(p.vc, snap, vc_bytes(&p));
      }
      free(snap);
    }
    prob_free(&p);
  }
}

/* Pools of 1..3 threads for the ISA-and-pool comparisons. */
static pe_threadpool *pools[3];
static int make_pools(void **state) {
  (void)state;
  for (int i = 0; i < 3; i++)
    if (pe_threadpool_create(i + 1, &pools[i]) != PE_OK) return -1;
  return 0;
}
static int destroy_pools(void **state) {
  (void)state;
  for (int i = 0; i < 3; i++) pe_threadpool_destroy(pools[i]), pools[i] = NULL;
  return 0;
}

/* The store into fresh caches: k cache then v cache bytes. */
static void run_store(void *ctx, pe_threadpool *pool, void *out) {
  prob *p = ctx;
  memset(p->kc, 0xa5, kc_bytes(p)), memset(p->vc, 0x5a, vc_bytes(p));
  assert_int_equal(prob_store(p, pool), PE_OK);
  memcpy(out, p->kc, kc_bytes(p));
  memcpy((uint8_t *)out + kc_bytes(p), p->vc, vc_bytes(p));
}

/* The same bytes on every ISA this CPU runs and with pools of 1..3 threads. */
static void test_isa_and_pools(void **state) {
  (void)state;
  size_t compared = 0;
  for (int kf = 0; kf < 3; kf++) {
    prob p;
    prob_make(&p, 128, 128, 128, PE_BF16, formats[kf], formats[2 - kf], PE_QK_NORM_RMS);
    pe_pools_run r = {run_store, &p, kc_bytes(&p) + vc_bytes(&p), pools, 3};
    compared += pe_isa_compare(kf == 0 ? "store, k e4m3 v q8_0" : kf == 1 ? "store, k e5m2 v e5m2"
                                                                          : "store, k q8_0 v e4m3",
                               r.bytes, pe_on_every_pool, &r);
    prob_free(&p);
  }
  if (!compared) skip(); /* only scalar here: nothing to compare */
}

/* Errors: the status, the message naming the argument, nothing written. */
static void expect_err(prob *p, pe_status want, const char *needle) {
  uint8_t *sk = malloc(kc_bytes(p)), *sv = malloc(vc_bytes(p));
  memcpy(sk, p->kc, kc_bytes(p)), memcpy(sv, p->vc, vc_bytes(p));
  pe_status st = prob_store(p, NULL);
  if (st != want || !strstr(pe_last_error(), needle))
    fail_msg("status %d (want %d), message \"%s\" (want \"%s\")", (int)st, (int)want,
             pe_last_error(), needle);
  assert_memory_equal(p->kc, sk, kc_bytes(p));
  assert_memory_equal(p->vc, sv, vc_bytes(p));
  free(sk), free(sv);
}

static void test_errors_write_nothing(void **state) {
  (void)state;
  prob p;
  prob_make(&p, 128, 128, 128, PE_F32, PE_KV_FP8_E4M3, PE_KV_Q8_0, PE_QK_NORM_NONE);
  float bad[] = {0.0f, -1.0f, NAN, INFINITY};
  for (int i = 0; i < 4; i++) {
    p.kscale = bad[i];
    expect_err(&p, PE_ERR_INVALID_ARGUMENT, "k_scale");
  }
  p.kscale = 0.0371f;
  p.kv.k_scale = NULL;
  expect_err(&p, PE_ERR_NULL_POINTER, "k_scale");
  p.kv.k_scale = &p.kscale;
  p.kv.v_scale = &p.vscale; /* Q8_0 has no scale */
  expect_err(&p, PE_ERR_INVALID_ARGUMENT, "v_scale");
  p.kv.v_scale = NULL;
  p.kv.v_quant = 5; /* past the last pe_kv_quant */
  expect_err(&p, PE_ERR_INVALID_ARGUMENT, "pe_kv_quant");
  p.kv.v_quant = PE_KV_Q8_0;
  /* Q8_0 needs whole blocks: a v cache of 48 channels */
  pe_tensor v48 = bthd(p.v, PE_F32, HK, 48), vc48 = cache_tensor(p.vc, PE_KV_Q8_0, 48);
  p.vt = v48, p.kv.v = &vc48;
  expect_err(&p, PE_ERR_SHAPE, "v_cache head_dim 48 is not a multiple of 32");
  p.vt = bthd(p.v, PE_F32, HK, 128), p.kv.v = &p.vct;
  /* the k cache's bytes inside the v cache */
  pe_tensor kin = cache_tensor(p.vc + 1000, PE_KV_FP8_E4M3, 128); /* inside vc's bytes */
  p.kv.k = &kin;
  expect_err(&p, PE_ERR_SHAPE, "overlap");
  p.kv.k = &p.kct;
  pe_tensor ks = p.kct;
  ks.stride[3] = 2;
  p.kv.k = &ks;
  expect_err(&p, PE_ERR_SHAPE, "stride[3]");
  p.kv.k = &p.kct;
  /* Slots that alias one row (a zero block stride), and the fuzz_rope_store
   * find: 2^62 blocks of 2^62 slots, all at one address, whose slot count
   * num_blocks * block_size overflowed int64 before anything refused it. */
  pe_tensor ka = p.kct;
  ka.stride[0] = 0;
  p.kv.k = &ka;
  expect_err(&p, PE_ERR_SHAPE, "alias");
  ka.shape[0] = ka.shape[2] = (int64_t)1 << 62;
  ka.stride[0] = ka.stride[2] = 0;
  expect_err(&p, PE_ERR_SHAPE, "alias");
  int64_t one_slot[1] = {0}, one_delta[1] = {1};
  assert_int_equal(pe_rope_shift_k_cache(p.c, &p.kv, one_slot, one_delta, 1, NULL), PE_ERR_SHAPE);
  assert_non_null(strstr(pe_last_error(), "alias"));
  p.kv.k = &p.kct;
  /* still fine afterwards */
  assert_int_equal(prob_store(&p, NULL), PE_OK);
  check_rows(&p);
  /* pe_kv_read errors: nothing written */
  float out[B * HK * T * 128];
  memset(out, 0, sizeof out);
  pe_tensor ot = bthd(out, PE_F32, HK, 128);
  int64_t bad_slots[B * T];
  memcpy(bad_slots, p.slots, sizeof bad_slots);
  bad_slots[5] = NB * BS;
  assert_int_equal(pe_kv_read(&p.kv, &ot, NULL, bad_slots), PE_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(pe_last_error(), "slot_mapping"));
  pe_tensor o64 = bthd(out, PE_F32, HK, 64);
  assert_int_equal(pe_kv_read(&p.kv, &o64, NULL, p.slots), PE_ERR_SHAPE);
  assert_int_equal(pe_kv_read(&p.kv, NULL, NULL, p.slots), PE_ERR_NULL_POINTER);
  /* k_out and v_out of another batch, or of other tokens, each alone */
  static float vout[B * HK * T * 128];
  memset(vout, 0, sizeof vout);
  for (int dim = 0; dim <= 2; dim += 2) {
    pe_tensor vt = bthd(vout, PE_F32, HK, 128);
    vt.shape[dim] -= 1;
    assert_int_equal(pe_kv_read(&p.kv, &ot, &vt, p.slots), PE_ERR_SHAPE);
    assert_non_null(strstr(pe_last_error(), "must match"));
  }
  for (size_t i = 0; i < sizeof vout / sizeof vout[0]; i++) assert_int_equal(f32_bits(vout[i]), 0);
  for (size_t i = 0; i < sizeof out / sizeof out[0]; i++) assert_int_equal(f32_bits(out[i]), 0);
  prob_free(&p);
}

/* pe_kv_write of k and v in one call: the bytes of two calls, one each;
 * caches that share memory refused for a write (nothing written), allowed for
 * a read (the same rows read twice). */
static void test_write_k_and_v_together(void **state) {
  (void)state;
  for (int kf = 0; kf < 3; kf++) {
    prob p;
    prob_make(&p, 128, 128, 128, PE_F32, formats[kf], formats[(kf + 1) % 3], PE_QK_NORM_NONE);
    size_t kb = kc_bytes(&p), vb = vc_bytes(&p);
    assert_int_equal(pe_kv_write(&p.kv, &p.kt, &p.vt, p.slots), PE_OK);
    uint8_t *k1 = malloc(kb), *v1 = malloc(vb);
    memcpy(k1, p.kc, kb), memcpy(v1, p.vc, vb);
    memset(p.kc, 0xa5, kb), memset(p.vc, 0x5a, vb);
    assert_int_equal(pe_kv_write(&p.kv, &p.kt, NULL, p.slots), PE_OK);
    assert_int_equal(pe_kv_write(&p.kv, NULL, &p.vt, p.slots), PE_OK);
    assert_memory_equal(p.kc, k1, kb);
    assert_memory_equal(p.vc, v1, vb);
    int written = 0; /* and they wrote rows */
    for (size_t i = 0; i < kb && !written; i++) written = p.kc[i] != 0xa5;
    assert_true(written);
    /* v's descriptor on k's memory, in k's format */
    pe_kv_cache same = p.kv;
    same.v = &p.kct, same.v_quant = p.kv.k_quant, same.v_scale = p.kv.k_scale;
    assert_int_equal(pe_kv_write(&same, &p.kt, &p.vt, p.slots), PE_ERR_SHAPE);
    assert_non_null(strstr(pe_last_error(), "overlap"));
    assert_memory_equal(p.kc, k1, kb);
    size_t on = (size_t)(B * HK * T * 128);
    float *ko = calloc(on, 4), *vo = calloc(on, 4);
    pe_tensor kot = bthd(ko, PE_F32, HK, 128), vot = bthd(vo, PE_F32, HK, 128);
    assert_int_equal(pe_kv_read(&same, &kot, &vot, p.slots), PE_OK);
    assert_memory_equal(ko, vo, on * 4);
    free(ko), free(vo), free(k1), free(v1);
    prob_free(&p);
  }
}

/* ---- position operations on a quantized cache ---- */

/* The stored slots of a problem (distinct) and a delta for each. */
static int64_t stored_slots(const prob *p, int64_t *slots) {
  int64_t n = 0;
  for (int u = 0; u < B * T; u++)
    if (p->slots[u] >= 0) slots[n++] = p->slots[u];
  return n;
}
/* rows [1, HK, n, dim] float32 of the cache at slots (pe_kv_read, checked
 * above against the reference dequantization). */
static void read_k(const prob *p, const int64_t *slots, int64_t n, float *out) {
  pe_tensor o = {.data = out, .dtype = PE_F32, .shape = {1, HK, n, p->hd},
                 .stride = {HK * n * p->hd, n * p->hd, p->hd, 1}};
  assert_int_equal(pe_kv_read(&p->kv, &o, NULL, slots), PE_OK);
}

/* The FP8 spacing at magnitude r (scaled): 2^(max(e, emin) - M) * scale. */
static double fp8_step(int f, double r, double scale) {
  int emin = f == E4M3 ? -6 : -14, m = f == E4M3 ? 3 : 2;
  int e = r > 0 ? (int)floor(log2(r / scale)) : emin;
  if (e < emin) e = emin;
  return ldexp(1.0, e - m) * scale;
}

/* The shift from the stored cache bytes c0: the k cache after it. */
typedef struct shift_run {
  prob *p;
  const uint8_t *c0;
  const int64_t *slots, *deltas;
  int64_t n;
} shift_run;

static void run_shift(void *ctx, pe_threadpool *pool, void *out) {
  const shift_run *r = ctx;
  memcpy(r->p->kc, r->c0, kc_bytes(r->p));
  assert_int_equal(pe_rope_shift_k_cache(r->p->c, &r->p->kv, r->slots, r->deltas, r->n, pool), PE_OK);
  memcpy(out, r->p->kc, kc_bytes(r->p));
}

/* Shift by +d: each row is, byte for byte, the reference dequantization,
 * pe_rope_shift_k on those float32 rows, the reference quantization. Then
 * -d: every value within the stated bound of the original:
 *   FP8: |x'' - x| <= sqrt(2) * step(rho), rho the radius of x's pair
 *     (sqrt(x^2 + y^2), invariant under the rotation) and step(rho) the
 *     format's spacing there: the first quantization errs by at most half a
 *     step per component, so by step/sqrt(2) in the pair; the rotation back
 *     keeps that length; the nearest code to a value within step/sqrt(2) of
 *     the original code x is within twice that of x;
 *   Q8_0: |x'' - x| <= 1.5 * D, D the largest block d of the row before,
 *     between and after: each quantization errs by <= 0.5 d plus 127 d
 *     2^-11 for d's f16 rounding (< 0.57 d), sqrt(2) of that in the pair
 *     after the rotation, plus the second quantization: < 1.38 D.
 * Channels past rotary_dim: FP8 codes unchanged. Nothing written on errors;
 * the same bytes on every ISA and pool size. */
static void test_shift_cache(void **state) {
  (void)state;
  /* head_dim x rotary_dim: 128 full and partial, and (the Q8_0 kernel that
   * rotates the blocks in place: one or four block pairs a row) 64 and 256 */
  static const int32_t shapes[4][2] = {{128, 128}, {128, 64}, {64, 64}, {256, 256}};
  for (int kf = 0; kf < 3; kf++)
    for (int sh = 0; sh < 4; sh++) {
      prob p;
      prob_make(&p, shapes[sh][0], shapes[sh][1], 64, PE_F32, formats[kf], PE_KV_Q8_0,
                PE_QK_NORM_NONE);
      assert_int_equal(prob_store(&p, NULL), PE_OK);
      int64_t slots[B * T], deltas[B * T], neg[B * T];
      int64_t n = stored_slots(&p, slots);
      for (int64_t i = 0; i < n; i++) deltas[i] = (int64_t)(rnd() % 601) - 300, neg[i] = -deltas[i];
      size_t nf = (size_t)(HK * n * p.hd);
      float *x0 = malloc(nf * 4), *x1 = malloc(nf * 4), *x2 = malloc(nf * 4), *d0 = malloc(nf * 4);
      uint8_t *c0 = malloc(kc_bytes(&p));
      memcpy(c0, p.kc, kc_bytes(&p));
      read_k(&p, slots, n, x0);
      /* +d against dequantize, pe_rope_shift_k, quantize */
      assert_int_equal(pe_rope_shift_k_cache(p.c, &p.kv, slots, deltas, n, NULL), PE_OK);
      memcpy(d0, x0, nf * 4);
      pe_tensor dt = {.data = d0, .dtype = PE_F32, .shape = {1, HK, n, p.hd},
                      .stride = {HK * n * p.hd, n * p.hd, p.hd, 1}};
      assert_int_equal(pe_rope_shift_k(p.c, &dt, deltas, NULL), PE_OK);
      int64_t rb = row_bytes(p.kq, p.hd);
      uint8_t want[512]; /* a row: up to 256 fp8 codes or 8 q8_0 blocks (272 bytes) */
      for (int64_t i = 0; i < n; i++)
        for (int h = 0; h < HK; h++) {
          ref_quant_row((int)p.kq - 1, d0 + ((int64_t)h * n + i) * p.hd, want, p.hd, p.kscale);
          const uint8_t *g = p.kc + ((slots[i] / BS) * BS * HK + (slots[i] % BS) * HK + h) * rb;
          assert_memory_equal(g, want, (size_t)rb);
          if (p.kq != PE_KV_Q8_0)
            for (int64_t j = p.rot; j < p.hd; j++)
              assert_int_equal(g[j], c0[(g - p.kc) + j]);
        }
      read_k(&p, slots, n, x1);
      /* the same bytes on every ISA and pool as on the path in use */
      uint8_t *c1 = malloc(kc_bytes(&p));
      memcpy(c1, p.kc, kc_bytes(&p));
      shift_run sr = {&p, c0, slots, deltas, n};
      pe_pools_run pr = {run_shift, &sr, kc_bytes(&p), pools, 2};
      pe_isa_compare("shift", pr.bytes, pe_on_every_pool, &pr);
      assert_memory_equal(p.kc, c1, kc_bytes(&p));
      /* -d: within the bound */
      assert_int_equal(pe_rope_shift_k_cache(p.c, &p.kv, slots, neg, n, NULL), PE_OK);
      read_k(&p, slots, n, x2);
      int32_t half = p.rot / 2;
      double worst = 0;
      for (int64_t r = 0; r < HK * n; r++) {
        const float *a = x0 + r * p.hd, *m = x1 + r * p.hd, *z = x2 + r * p.hd;
        double D = 0;
        for (int j = 0; j < p.hd; j++) { /* plain ifs: gcc 12 for aarch64 ICEs on an fmax chain here */
          double v3[3] = {fabs(a[j]), fabs(m[j]), fabs(z[j])};
          for (int e = 0; e < 3; e++)
            if (v3[e] > D) D = v3[e];
        }
        D /= 127.0 * (1.0 - 0x1p-10); /* every block's d <= amax_row / 127, f16 rounding */
        for (int j = 0; j < p.rot; j++) {
          int pj = j < half ? j + half : j - half;
          double rho = hypot(a[j], a[pj]);
          double bound = p.kq == PE_KV_Q8_0 ? 1.5 * D : 1.4142135623730951 * fp8_step((int)p.kq - 1, rho * (1 + 1e-6), p.kscale) + 1e-6 * rho;
          double err = fabs((double)z[j] - a[j]);
          if (err > bound)
            fail_msg("format %u row %lld ch %d: %g -> %g, error %g > bound %g", (unsigned)p.kq,
                     (long long)r, j, (double)a[j], (double)z[j], err, bound);
          if (bound > 0 && err / bound > worst) worst = err / bound;
        }
      }
      printf("# format %u head_dim %d rotary %d: worst error / bound %.3f\n", (unsigned)p.kq, (int)p.hd, (int)p.rot, worst);
      /* errors write nothing */
      memcpy(c1, p.kc, kc_bytes(&p));
      int64_t dup[3] = {slots[0], slots[1], slots[0]}, dd[3] = {1, 2, 3};
      assert_int_equal(pe_rope_shift_k_cache(p.c, &p.kv, dup, dd, 3, NULL), PE_ERR_INVALID_ARGUMENT);
      assert_non_null(strstr(pe_last_error(), "twice"));
      assert_int_equal(pe_rope_shift_k_cache(p.c, &p.kv, slots, NULL, n, NULL), PE_ERR_NULL_POINTER);
      float bad = -1.0f;
      pe_kv_cache kb = p.kv;
      if (kb.k_scale) kb.k_scale = &bad;
      else kb.k_scale = &p.kscale;
      assert_int_equal(pe_rope_shift_k_cache(p.c, &kb, slots, deltas, n, NULL), PE_ERR_INVALID_ARGUMENT);
      assert_int_equal(pe_rope_rerotate_k_cache(p.c, p.c, &p.kv, slots, NULL, n, NULL), PE_ERR_NULL_POINTER);
      assert_memory_equal(p.kc, c1, kc_bytes(&p));
      free(x0), free(x1), free(x2), free(d0), free(c0), free(c1);
      prob_free(&p);
    }
}

/* A shift whose deltas come in runs (llama.cpp's K-shift moves every key by
 * one delta; the engine then computes a block's cos/sin row once and gives it
 * to the run's tokens): byte for byte what one call per slot writes (a call
 * of one slot has one row of its own), for runs that cross the engine's
 * blocks of tokens, a run of one, and deltas that repeat after a different
 * one. */
static void test_shift_cache_runs(void **state) {
  (void)state;
  for (int kf = 0; kf < 3; kf++) {
    prob p;
    prob_make(&p, 128, 128, 64, PE_F32, formats[kf], PE_KV_Q8_0, PE_QK_NORM_NONE);
    assert_int_equal(prob_store(&p, NULL), PE_OK);
    int64_t slots[B * T], deltas[B * T];
    int64_t n = stored_slots(&p, slots);
    for (int pat = 0; pat < 3; pat++) {
      for (int64_t i = 0; i < n; i++)
        deltas[i] = pat == 0 ? -256                                  /* one delta for all */
                    : pat == 1 ? (i / 5) % 2 ? 37 : -300             /* runs of 5, alternating */
                               : i % 7 == 3 ? 11 : (i / 9) * 13 - 40; /* runs of 9 broken by singles */
      uint8_t *c0 = malloc(kc_bytes(&p)), *want = malloc(kc_bytes(&p));
      memcpy(c0, p.kc, kc_bytes(&p));
      for (int64_t i = 0; i < n; i++)
        assert_int_equal(pe_rope_shift_k_cache(p.c, &p.kv, slots + i, deltas + i, 1, NULL), PE_OK);
      memcpy(want, p.kc, kc_bytes(&p));
      assert_memory_not_equal(want, c0, kc_bytes(&p));
      memcpy(p.kc, c0, kc_bytes(&p));
      assert_int_equal(pe_rope_shift_k_cache(p.c, &p.kv, slots, deltas, n, NULL), PE_OK);
      assert_memory_equal(p.kc, want, kc_bytes(&p));
      memcpy(p.kc, c0, kc_bytes(&p));
      free(c0), free(want);
    }
    prob_free(&p);
  }
}

/* A cache of more kv heads than the shift takes at once (a quantized row is
 * dequantized into a 4096-float buffer: 32 heads of 128 channels; OLMo 2
 * 13B has 40 kv heads of 128, a multi-head-attention model): byte for byte
 * what the same shift writes through 40 views of one head each (the same
 * bytes, one head's rows at a time, each call one group of one head), in
 * the three formats, with and without a pool. */
static void test_shift_cache_many_heads(void **state) {
  (void)state;
  enum { H = 40, D = 128, NB2 = 2, N = NB2 * BS };
  pe_rope_params rp;
  pe_rope_params_init(&rp);
  rp.head_dim = D;
  rp.base = 500000.0;
  pe_rope_cache *c;
  assert_int_equal(pe_rope_cache_create(&rp, &c), PE_OK);
  float *k = malloc((size_t)H * N * D * 4);
  for (int64_t i = 0; i < (int64_t)H * N * D; i++) k[i] = urand(3.0f);
  pe_tensor kt = {.data = k, .dtype = PE_F32, .shape = {1, H, N, D},
                  .stride = {(int64_t)H * N * D, (int64_t)N * D, D, 1}};
  int64_t slots[N], deltas[N];
  for (int i = 0; i < N; i++) slots[i] = (i * 7) % N, deltas[i] = (int64_t)(rnd() % 601) - 300;
  slots[5] = -1;
  float scale = 0.0371f;
  for (int kf = 0; kf < 3; kf++) {
    const uint32_t kq = formats[kf];
    const int64_t rb = row_bytes(kq, D);
    const size_t bytes = (size_t)(NB2 * BS * H * rb);
    uint8_t *kc = malloc(bytes), *c0 = malloc(bytes), *whole = malloc(bytes);
    memset(kc, 0xa5, bytes);
    /* [NB2, BS, H, row] bytes */
    pe_tensor ct = {.data = kc, .dtype = PE_F32, .shape = {NB2, H, BS, D},
                    .stride = {BS * H * rb, rb, H * rb, 1}};
    pe_kv_cache kv;
    pe_kv_cache_init(&kv);
    kv.k = &ct;
    kv.k_quant = kq;
    kv.k_scale = kq == PE_KV_Q8_0 ? NULL : &scale;
    int64_t all[N];
    for (int i = 0; i < N; i++) all[i] = i;
    assert_int_equal(pe_kv_write(&kv, &kt, NULL, all), PE_OK);
    memcpy(c0, kc, bytes);
    for (int pi = 0; pi < 2; pi++) {
      pe_threadpool *pool = pi ? pools[1] : NULL;
      memcpy(kc, c0, bytes);
      assert_int_equal(pe_rope_shift_k_cache(c, &kv, slots, deltas, N, pool), PE_OK);
      memcpy(whole, kc, bytes);
      assert_memory_not_equal(whole, c0, bytes);
      memcpy(kc, c0, bytes);
      for (int h = 0; h < H; h++) {
        pe_tensor one = ct;
        one.data = kc + h * rb;
        one.shape[1] = 1;
        pe_kv_cache kv1 = kv;
        kv1.k = &one;
        assert_int_equal(pe_rope_shift_k_cache(c, &kv1, slots, deltas, N, pool), PE_OK);
      }
      if (memcmp(kc, whole, bytes)) {
        size_t i = 0;
        while (kc[i] == whole[i]) i++;
        fail_msg("format %u pool %d: the 40-head shift differs from 40 one-head shifts at slot "
                 "%lld head %lld", (unsigned)kq, pi, (long long)(i / (size_t)(H * rb)),
                 (long long)(i / (size_t)rb % H));
      }
    }
    free(kc), free(c0), free(whole);
  }
  free(k);
  pe_rope_cache_destroy(c);
}

/* Re-rotation from one cache's frequencies to another's on a quantized
 * cache: byte for byte the reference dequantization, pe_rope_rerotate_k on
 * the float32 rows, the reference quantization. */
static void test_rerotate_cache(void **state) {
  (void)state;
  for (int kf = 0; kf < 3; kf++) {
    prob p;
    prob_make(&p, 64, 64, 64, PE_F32, formats[kf], PE_KV_Q8_0, PE_QK_NORM_NONE);
    assert_int_equal(prob_store(&p, NULL), PE_OK);
    pe_rope_params rp;
    pe_rope_params_init(&rp);
    rp.head_dim = 64;
    rp.base = 500000.0;
    rp.scaling = PE_ROPE_SCALING_LINEAR;
    rp.factor = 4.0;
    pe_rope_cache *to;
    assert_int_equal(pe_rope_cache_create(&rp, &to), PE_OK);
    int64_t slots[B * T], pos[B * T];
    int64_t n = stored_slots(&p, slots);
    for (int64_t i = 0; i < n; i++) pos[i] = (int64_t)(rnd() % 5000);
    size_t nf = (size_t)(HK * n * p.hd);
    float *x = malloc(nf * 4);
    read_k(&p, slots, n, x);
    assert_int_equal(pe_rope_rerotate_k_cache(p.c, to, &p.kv, slots, pos, n, NULL), PE_OK);
    pe_tensor xt = {.data = x, .dtype = PE_F32, .shape = {1, HK, n, p.hd},
                    .stride = {HK * n * p.hd, n * p.hd, p.hd, 1}};
    assert_int_equal(pe_rope_rerotate_k(p.c, to, &xt, pos, NULL), PE_OK);
    int64_t rb = row_bytes(p.kq, p.hd);
    uint8_t want[256];
    for (int64_t i = 0; i < n; i++)
      for (int h = 0; h < HK; h++) {
        ref_quant_row((int)p.kq - 1, x + ((int64_t)h * n + i) * p.hd, want, p.hd, p.kscale);
        const uint8_t *g = p.kc + ((slots[i] / BS) * BS * HK + (slots[i] % BS) * HK + h) * rb;
        assert_memory_equal(g, want, (size_t)rb);
      }
    free(x);
    pe_rope_cache_destroy(to);
    prob_free(&p);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_rows),
      cmocka_unit_test(test_read),
      cmocka_unit_test(test_write_k_and_v_together),
      cmocka_unit_test(test_isa_and_pools),
      cmocka_unit_test(test_errors_write_nothing),
      cmocka_unit_test(test_shift_cache),
      cmocka_unit_test(test_shift_cache_runs),
      cmocka_unit_test(test_shift_cache_many_heads),
      cmocka_unit_test(test_rerotate_cache),
  };
  return cmocka_run_group_tests(tests, make_pools, destroy_pools);
}
