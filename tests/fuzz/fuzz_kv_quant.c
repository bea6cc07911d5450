/* fuzz_kv_quant.c - the quantized-cache entry points (posenc.h, pe_kv_cache):
 * pe_qk_norm_rope_store into FP8 / Q8_0 / FP8-with-row-scales / plain caches,
 * pe_kv_read, pe_rope_shift_k_cache and pe_rope_rerotate_k_cache, with fuzzed formats
 * (including values that are not a pe_kv_quant), scales (valid, 0, negative,
 * NaN, Inf, missing, given to a format without one), head_dim (multiples of
 * 32 and not), byte strides, cache placements (the v cache may share bytes
 * with the k cache), slots (out of range, duplicates, -1) and the ISA/pool.
 * Enforced (fuzz_common.h's contract):
 *   - refused arguments: Q8_0 with head_dim % 32, row scales with more than
 *     one kv head, a bad format or scale, a slot outside [-1, n) or twice
 *     (store, shift), caches sharing bytes;
 *   - a failing call writes nothing (whole arenas with guards compared) and
 *     sets pe_last_error();
 *   - a successful call writes only the cache rows (or output rows) of the
 *     given slots, and the bytes equal the scalar path's (the call is run
 *     again on the snapshot with PE_ISA scalar). */
#include "fuzz_common.h"

enum { OP_STORE, OP_READ, OP_SHIFT, OP_REROTATE };

static int64_t rowb(uint32_t q, int64_t d) {
  return q == PE_KV_Q8_0 ? d / 32 * 34 : (q >= 1 && q <= 2) || q == PE_KV_FP8_E4M3_ROWSCALE ? d : 4 * d;
}

/* Bytes of one block [bs][heads][row]: PE_KV_FP8_E4M3_ROWSCALE's float32
 * scales of its bs tokens follow the rows. */
static int64_t blockb(uint32_t q, int64_t h, int64_t bs, int64_t d) {
  return bs * h * rowb(q, d) + (q == PE_KV_FP8_E4M3_ROWSCALE ? 4 * bs : 0);
}

/* A cache [nb, heads, bs, d] laid out [nb][bs][heads][row] at base;
 * strides in bytes for a quantized format, in float32 elements for plain. */
static pe_tensor cache_at(unsigned char *base, uint32_t q, int64_t nb, int64_t h, int64_t bs,
                          int64_t d) {
  int64_t rb = rowb(q, d), u = (q >= 1 && q <= 4) ? 1 : 4;
  pe_tensor t = {.data = base, .dtype = PE_F32, .shape = {nb, h, bs, d},
                 .stride = {blockb(q, h, bs, d) / u, rb / u, h * rb / u, 1}};
  return t;
}

/* Mark (or test) the bytes of the rows at the used slots, and their scales. */
static void mark_rows(fz_arena *a, const unsigned char *base, uint32_t q, int64_t h, int64_t bs,
                      int64_t d, const int64_t *slots, int64_t n) {
  int64_t rb = rowb(q, d), blk = blockb(q, h, bs, d);
  for (int64_t i = 0; i < n; i++) {
    if (slots[i] < 0) continue;
    int64_t s = slots[i];
    size_t block = (size_t)(base - a->mem) + (size_t)((s / bs) * blk);
    for (int64_t hh = 0; hh < h; hh++)
      memset(a->mask + block + (size_t)(((s % bs) * h + hh) * rb), 1, (size_t)rb);
    if (q == PE_KV_FP8_E4M3_ROWSCALE)
      memset(a->mask + block + (size_t)(bs * h * rb + 4 * (s % bs)), 1, 4);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  pe_threadpool *pool = fz_choose(&f);
  int op = (int)(fz_u8(&f) & 3);
  /* PLAIN, E4M3, E5M2, Q8_0, E4M3_ROWSCALE (block-major, its scales after
   * the block's rows) or 255 (not a pe_kv_quant) */
  uint32_t kq = fz_u8(&f) % 6, vq = fz_u8(&f) % 6;
  if (kq == 5) kq = 255;
  if (vq == 5) vq = 255;
  static const int64_t dims[] = {32, 64, 96, 128, 48, 40, 2, 16};
  int64_t hd = dims[fz_u8(&f) & 7], vd = dims[fz_u8(&f) & 7];
  int64_t rot = (fz_u8(&f) & 1) ? hd : (hd / 2) & ~(int64_t)1;
  if (rot < 2) rot = hd;
  int64_t B = fz_range(&f, 0, 2), H = fz_range(&f, 1, 3), T = fz_range(&f, 0, 5);
  int64_t nb = fz_range(&f, 1, 3), bs = fz_range(&f, 1, 4), n_slots_cache = nb * bs;
  static const float scales[] = {0.03f, 1.0f, 250.0f, 0.0f, -1.0f, NAN, INFINITY, 1e-30f};
  float ks = scales[fz_u8(&f) & 7], vs = scales[fz_u8(&f) & 7];
  int kscale_mode = (int)(fz_u8(&f) % 3), vscale_mode = (int)(fz_u8(&f) % 3); /* 0 given if fp8, 1 NULL, 2 given */
  uint64_t seed = fz_bits(&f, 4);

  pe_rope_params rp;
  pe_rope_params_init(&rp);
  rp.head_dim = (int32_t)hd;
  rp.rotary_dim = (int32_t)rot;
  rp.max_positions = 64;
  pe_rope_cache *c = NULL, *c2 = NULL;
  if (pe_rope_cache_create(&rp, &c) != PE_OK) return 0;
  rp.base = 1e6;
  if (pe_rope_cache_create(&rp, &c2) != PE_OK) {
    pe_rope_cache_destroy(c);
    return 0;
  }

  /* inputs: k, v f32 [B, H, T, d]; outputs of pe_kv_read the same */
  int64_t nk = B * H * T * hd, nv = B * H * T * vd;
  fz_arena in, cc, out;
  size_t kcb = (size_t)(nb * blockb(kq, H, bs, hd)), vcb = (size_t)(nb * blockb(vq, H, bs, vd));
  int64_t voff = fz_range(&f, 0, 2) == 0 ? (int64_t)(kcb / 2) : (int64_t)kcb; /* may share bytes */
  if (!fz_arena_alloc(&in, (size_t)(nk + nv) * 4, seed) ||
      !fz_arena_alloc(&cc, (size_t)voff + vcb > kcb ? (size_t)voff + vcb : kcb, seed + 1) ||
      !fz_arena_alloc(&out, (size_t)(nk + nv) * 4, seed + 2))
    abort();
  float *k = (float *)(in.mem + FZ_GUARD), *v = k + nk;
  uint64_t s = seed;
  for (int64_t i = 0; i < nk + nv; i++) k[i] = fz_stream_float(&s);
  pe_tensor kt = {k, PE_F32, {B, H, T, hd}, {H * T * hd, T * hd, hd, 1}};
  pe_tensor vt = {v, PE_F32, {B, H, T, vd}, {H * T * vd, T * vd, vd, 1}};
  float *ko = (float *)(out.mem + FZ_GUARD), *vo = ko + nk;
  pe_tensor kot = {ko, PE_F32, {B, H, T, hd}, {H * T * hd, T * hd, hd, 1}};
  pe_tensor vot = {vo, PE_F32, {B, H, T, vd}, {H * T * vd, T * vd, vd, 1}};
  unsigned char *kcbase = cc.mem + FZ_GUARD, *vcbase = kcbase + voff;
  pe_tensor kct = cache_at(kcbase, kq, nb, H, bs, hd), vct = cache_at(vcbase, vq, nb, H, bs, vd);

  pe_kv_cache kv;
  pe_kv_cache_init(&kv);
  kv.k = &kct, kv.v = &vct, kv.k_quant = kq, kv.v_quant = vq;
  int kfp8 = kq == 1 || kq == 2, vfp8 = vq == 1 || vq == 2;
  kv.k_scale = kscale_mode == 2 || (kscale_mode == 0 && kfp8) ? &ks : NULL;
  kv.v_scale = vscale_mode == 2 || (vscale_mode == 0 && vfp8) ? &vs : NULL;

  /* slots: [B][T] for store/read, [n] for shift/rerotate */
  int64_t n = op >= OP_SHIFT ? fz_range(&f, 0, 6) : B * T;
  int64_t slots[16], deltas[16];
  int bad_slot = 0, dup = 0;
  for (int64_t i = 0; i < n; i++) {
    slots[i] = fz_range(&f, -2, n_slots_cache);
    deltas[i] = fz_range(&f, -50, 50);
    if (slots[i] < -1 || slots[i] >= n_slots_cache) bad_slot = 1;
    for (int64_t j = 0; j < i; j++)
      if (slots[i] >= 0 && slots[i] == slots[j]) dup = 1;
  }

  int must_fail = 0;
  const char *why = NULL;
  int kbad = kq > 4 || (kfp8 && (!kv.k_scale || !(ks > 0) || !isfinite(ks))) ||
             (!kfp8 && kv.k_scale) || (kq == 3 && hd % 32) || (kq == 4 && H != 1);
  int vbad = vq > 4 || (vfp8 && (!kv.v_scale || !(vs > 0) || !isfinite(vs))) ||
             (!vfp8 && kv.v_scale) || (vq == 3 && vd % 32) || (vq == 4 && H != 1);
  int share = voff < (int64_t)kcb && (kq || vq) && kcb && vcb && B && T;
  int empty = op >= OP_SHIFT ? n == 0 : (B == 0 || T == 0);

  fz_set_sentinel();
  fz_arena_snapshot(&in);
  fz_arena_snapshot(&cc);
  fz_arena_snapshot(&out);
  pe_status st;
  const char *fn;
  pe_qk_norm nm;
  pe_qk_norm_init(&nm);
  nm.kind = (fz_u8(&f) & 1) ? PE_QK_NORM_L2 : PE_QK_NORM_NONE;
  int64_t pos[16];
  for (int i = 0; i < 16; i++) pos[i] = i * 3 % 64;
#define CALL()                                                                                   \
  (op == OP_STORE   ? pe_qk_norm_rope_store(c, &nm, NULL, &kt, &vt, &kv, slots, NULL, 0, pool)    \
   : op == OP_READ  ? pe_kv_read(&kv, &kot, &vot, slots)                                          \
   : op == OP_SHIFT ? pe_rope_shift_k_cache(c, &kv, slots, deltas, n, pool)                       \
                    : pe_rope_rerotate_k_cache(c, c2, &kv, slots, pos, n, pool))
  static const char *const names[4] = {"pe_qk_norm_rope_store", "pe_kv_read",
                                       "pe_rope_shift_k_cache", "pe_rope_rerotate_k_cache"};
  fn = names[op];
  st = CALL();
  if (op == OP_STORE || op == OP_READ) {
    FZ_MUST_FAIL_IF(kbad);
    FZ_MUST_FAIL_IF(vbad);
    FZ_MUST_FAIL_IF(!empty && bad_slot);
  } else {
    FZ_MUST_FAIL_IF(kbad);
    FZ_MUST_FAIL_IF(!empty && (bad_slot || dup));
  }
  FZ_MUST_FAIL_IF(op == OP_STORE && !empty && dup);
  FZ_MUST_FAIL_IF(op == OP_STORE && share);
  if (st == PE_OK && must_fail) fz_die(fn, why);
  if (st != PE_OK) {
    fz_check_error_message(fn, st);
    fz_arena_check_unchanged(&in, fn);
    fz_arena_check_unchanged(&cc, fn);
    fz_arena_check_unchanged(&out, fn);
  } else {
    fz_arena_check_unchanged(&in, fn);
    if (op == OP_READ) {
      fz_arena_check_unchanged(&cc, fn);
      for (int64_t u = 0; u < B * T; u++) {
        if (slots[u] < 0) continue;
        int64_t b = u / T, t = u % T;
        for (int64_t h = 0; h < H; h++) {
          memset(out.mask + FZ_GUARD + ((b * H + h) * T + t) * hd * 4, 1, (size_t)hd * 4);
          memset(out.mask + FZ_GUARD + (nk + ((b * H + h) * T + t) * vd) * 4, 1, (size_t)vd * 4);
        }
      }
      fz_arena_check_mask(&out, fn);
    } else {
      fz_arena_check_unchanged(&out, fn);
      mark_rows(&cc, kcbase, kq, H, bs, hd, slots, n);
      if (op == OP_STORE) mark_rows(&cc, vcbase, vq, H, bs, vd, slots, n);
      fz_arena_check_mask(&cc, fn);
    }
    /* the scalar path gives the same bytes */
    unsigned char *got = malloc(cc.bytes), *gout = malloc(out.bytes);
    if (!got || !gout) abort();
    memcpy(got, cc.mem, cc.bytes);
    memcpy(gout, out.mem, out.bytes);
    memcpy(cc.mem, cc.snap, cc.bytes);
    memcpy(out.mem, out.snap, out.bytes);
    (void)pe_force_isa("scalar");
    if (CALL() != PE_OK) fz_die(fn, "accepted on one ISA, refused on scalar");
    if (memcmp(got, cc.mem, cc.bytes) || memcmp(gout, out.mem, out.bytes))
      fz_die(fn, "the bytes differ from the scalar path's");
    free(got);
    free(gout);
  }
#undef CALL
  fz_arena_free(&in);
  fz_arena_free(&cc);
  fz_arena_free(&out);
  pe_rope_cache_destroy(c);
  pe_rope_cache_destroy(c2);
  return 0;
}
