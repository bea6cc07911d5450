/* fuzz_mla.c - pe_mla_rope_store and pe_mla_cache_read. The fuzzer chooses
 * the layer's numbers (rope_dim, offsets, the normed channels, norm kinds,
 * eps, weight and scale presence, struct_size), the cache format and order,
 * shapes and dtypes of q, kv, the cache and its strides (in elements or
 * bytes), the slots (padding -1, duplicates, out of range, int64 edges),
 * positions, ISA and pool, and sometimes places kv inside the cache.
 * A successful store may write only q (its rope slices; every channel
 * under a q norm) and the cache rows of the slots used (with a V4 row's
 * scale bytes); kv and the weight are never written. A successful read
 * writes only out's rows of slots >= 0. A failing call writes nothing. */
#include "fuzz_common.h"

static const char FN[] = "pe_mla_rope_store";

/* The kv norm's weights: kv_norm_dim floats, which reaches kv_dim + 2 = 235
 * on plain rows and 256 on a DeepSeek tile row (lat 256). Checked below, so
 * a harness change that widens the rows stops here rather than reading past
 * the array as if the library had. The call gets the array's last
 * kv_norm_dim floats: a read past them is in ASan's redzone. */
#define MAX_WEIGHTS 320

static void fill_floats(unsigned char *p, size_t n, pe_dtype dt, uint64_t seed) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++) {
    float x = fz_stream_float(&s);
    if (dt == PE_F32) {
      memcpy(p + 4 * i, &x, 4);
    } else {
      uint32_t u;
      memcpy(&u, &x, 4);
      uint16_t h = (uint16_t)(u >> 16);
      memcpy(p + 2 * i, &h, 2);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  pe_threadpool *pool = fz_choose(&f);
  /* the rope cache: rope_dim channels, all rotated (sometimes not) */
  static const int32_t ropes[] = {2, 4, 8, 16, 32, 64};
  int32_t R = ropes[fz_u8(&f) % 6];
  pe_rope_params rp;
  pe_rope_params_init(&rp);
  rp.head_dim = R;
  rp.rotary_dim = (fz_u8(&f) & 15) == 0 ? R / 2 - (R / 2) % 2 : R;
  rp.style = (pe_rope_style)(fz_u8(&f) & 1);
  rp.max_positions = (fz_u8(&f) & 3) ? fz_range(&f, 1, 64) : 0;
  pe_rope_cache *c = NULL;
  if (pe_rope_cache_create(&rp, &c) != PE_OK) return 0;
  pe_rope_params made;
  pe_rope_params_init(&made);
  if (pe_rope_cache_params(c, &made) != PE_OK) fz_die(FN, "pe_rope_cache_params failed");

  /* the layer */
  unsigned char mraw[sizeof(pe_mla) + 16];
  memset(mraw, 0, sizeof mraw);
  pe_mla *m = (pe_mla *)(void *)mraw;
  pe_mla_init(m);
  if ((fz_u8(&f) & 31) == 0) m->struct_size = (uint32_t)fz_range(&f, 0, sizeof mraw);
  if ((fz_u8(&f) & 31) == 0) mraw[sizeof(pe_mla) + fz_u8(&f) % 16] = 1;
  int64_t lat = 2 * fz_range(&f, 0, 80), kv_dim = lat + R;
  if ((fz_u8(&f) & 7) == 0) kv_dim += fz_range(&f, 0, 9);
  int64_t q_dim = R + fz_range(&f, 0, 40);
  m->rope_dim = (fz_u8(&f) & 31) == 0 ? (int32_t)fz_range(&f, -2, 70) : R;
  m->kv_rope_offset = (fz_u8(&f) & 15) == 0 ? (int32_t)fz_range(&f, -2, (int32_t)kv_dim) : (int32_t)lat;
  m->q_rope_offset = (int32_t)((fz_u8(&f) & 15) == 0 ? fz_range(&f, -2, q_dim) : q_dim - R);
  m->kv_norm = (pe_qk_norm_kind)(fz_u8(&f) % 5);
  m->kv_norm_dim = (int32_t)((fz_u8(&f) & 3) ? (m->kv_norm ? fz_range(&f, 0, kv_dim) : 0) : fz_range(&f, -2, kv_dim + 2));
  m->q_norm = (pe_qk_norm_kind)(fz_u8(&f) % 5);
  if ((fz_u8(&f) & 15) == 0) m->kv_eps = (float)fz_double(&f);
  if ((fz_u8(&f) & 15) == 0) m->q_eps = (float)fz_double(&f);
  m->format = fz_u8(&f) % 5;
  m->order = fz_u8(&f) % 3;
  float w[MAX_WEIGHTS], scale = (float)fz_double(&f);
  uint64_t ws = fz_bits(&f, 8);
  for (int i = 0; i < MAX_WEIGHTS; i++) w[i] = fz_stream_float(&ws);
  int use_w = fz_u8(&f) % 4 != 0; /* the pointer is set below, once kv_norm_dim is final */
  if (fz_u8(&f) % 4) m->scale = &scale;
  if (m->format == PE_MLA_FP8_DS) {
    lat = 128 * fz_range(&f, 1, 2);
    kv_dim = lat + R;
    m->kv_rope_offset = (int32_t)lat;
    if (m->kv_norm_dim > kv_dim) m->kv_norm_dim = (int32_t)lat;
  }
  if (m->format == PE_MLA_FP8_DS_V4) {
    lat = 64 * fz_range(&f, 1, 3);
    kv_dim = lat + R;
    m->kv_rope_offset = (int32_t)lat;
    if (m->kv_norm_dim > kv_dim) m->kv_norm_dim = (int32_t)kv_dim;
  }
  if (m->kv_norm_dim > MAX_WEIGHTS) fz_die(FN, "harness: kv_norm_dim past the weight array");
  if (use_w) m->kv_weight = w + MAX_WEIGHTS - (m->kv_norm_dim > 0 ? m->kv_norm_dim : 0);

  /* tensors: q [B, H, T, q_dim], kv [B, 1|2, T, kv_dim], cache [NB, 1, BS, kv_dim] */
  int64_t B = fz_range(&f, 0, 3), H = fz_range(&f, 1, 3), T = fz_range(&f, 0, 5);
  int64_t kvh = (fz_u8(&f) & 15) == 0 ? 2 : 1, NB = fz_range(&f, 1, 3), BS = fz_range(&f, 1, 5);
  pe_dtype qdt = fz_u8(&f) % 3 == 0 ? PE_F32 : (pe_dtype)(fz_u8(&f) % 3);
  pe_dtype kdt = fz_u8(&f) % 3 == 0 ? PE_F32 : (pe_dtype)(fz_u8(&f) % 3);
  pe_dtype cdt = (pe_dtype)(fz_u8(&f) % 3);
  int use_q = fz_u8(&f) % 4 != 0, use_kv = fz_u8(&f) % 4 != 0, kv_in_cache = (fz_u8(&f) & 31) == 0;
  size_t qes = fz_esize(qdt), kes = fz_esize(kdt);
  int byte_fmt = m->format >= PE_MLA_FP8_E4M3 && m->format <= PE_MLA_FP8_DS_V4;
  int64_t row = m->format == PE_MLA_FP8_E4M3 ? kv_dim
                : m->format == PE_MLA_FP8_DS ? lat + 4 * (lat / 128) + 2 * R
                : m->format == PE_MLA_FP8_DS_V4 ? lat + 2 * R
                                                : kv_dim * (int64_t)fz_esize(cdt);
  int64_t sbytes = m->format == PE_MLA_FP8_DS_V4 ? lat / 64 + 1 : 0;
  int64_t pad = fz_range(&f, 0, 3) * (byte_fmt ? 1 : (int64_t)fz_esize(cdt));
  int64_t sstride = m->format == PE_MLA_FP8_DS_V4 ? row : row + pad; /* bytes */
  int64_t bstride = BS * sstride + BS * sbytes + fz_range(&f, 0, 7);
  if ((fz_u8(&f) & 31) == 0) bstride = fz_range(&f, 0, bstride); /* blocks overlap */
  if (!byte_fmt) bstride -= bstride % (int64_t)fz_esize(cdt); /* whole elements */
  fz_arena qa, ka, ca;
  memset(&qa, 0, sizeof qa);
  memset(&ka, 0, sizeof ka);
  size_t qbytes = (size_t)(B * H * T * q_dim) * qes, kbytes = (size_t)(B * kvh * T * kv_dim) * kes;
  /* the extent the cache describes: its last block whole */
  size_t cbytes = (size_t)((NB - 1) * bstride + BS * (sstride + sbytes)) + 64;
  if (!fz_arena_alloc(&ca, cbytes, fz_bits(&f, 8))) goto out_c;
  if (!fz_arena_alloc(&qa, qbytes + 8, fz_bits(&f, 8)) || !fz_arena_alloc(&ka, kbytes + 8, fz_bits(&f, 8)))
    goto out;
  fill_floats(qa.mem + FZ_GUARD, qbytes / qes, qdt, 1);
  fill_floats(ka.mem + FZ_GUARD, kbytes / kes, kdt, 2);
  unsigned char *cbase = ca.mem + FZ_GUARD;
  pe_tensor q = {qa.mem + FZ_GUARD, qdt, {B, H, T, q_dim}, {H * T * q_dim, T * q_dim, q_dim, 1}};
  pe_tensor kv = {kv_in_cache ? cbase : ka.mem + FZ_GUARD, kdt, {B, kvh, T, kv_dim},
                  {kvh * T * kv_dim, T * kv_dim, kv_dim, 1}};
  int64_t es = byte_fmt ? 1 : (int64_t)fz_esize(cdt);
  pe_tensor cache = {cbase, cdt, {NB, 1, BS, kv_dim}, {bstride / es, 0, sstride / es, 1}};
  int rows_alias = 0; /* cache rows that overlap: refused */
  if ((fz_u8(&f) & 31) == 0 && BS > 1) {
    cache.stride[2] = fz_range(&f, 0, row / es - 1);
    rows_alias = 1;
  }

  /* slots */
  int64_t n = B * T, nslots = NB * BS, *slots = malloc((size_t)(n ? n : 1) * sizeof *slots);
  if (!slots) goto out;
  int bad_slot = 0;
  for (int64_t i = 0; i < n; i++) slots[i] = (fz_u8(&f) & 7) == 0 ? -1 : (i * 3 + 1) % nslots;
  uint32_t smode = fz_u8(&f) % 8;
  if (smode == 1 && n) slots[fz_range(&f, 0, n - 1)] = fz_edge_i64(&f);
  if (smode == 2 && n > 1) slots[1] = slots[0];
  for (int64_t i = 0; i < n; i++) {
    if (slots[i] < -1 || slots[i] >= nslots) bad_slot = 1;
    for (int64_t j = 0; j < i; j++)
      if (slots[i] >= 0 && slots[i] == slots[j]) bad_slot = 1;
  }
  int bad_pos = 0;
  int64_t *pos = fz_positions(&f, B, T, rp.max_positions, &bad_pos, 1);
  uint32_t flags = (fz_u8(&f) & 15) == 0 ? (uint32_t)fz_bits(&f, 1)
                                          : (fz_u8(&f) & 1 ? PE_ROPE_STREAM_CACHE : 0u);
  const pe_tensor *qp = use_q ? &q : NULL, *kvp = use_kv ? &kv : NULL;
  const pe_tensor *cp = use_kv || (fz_u8(&f) & 7) == 0 ? &cache : NULL;
  const int64_t *sp = cp || (fz_u8(&f) & 7) == 0 ? slots : NULL;

  /* what must be refused (a subset: the rest is checked by the contract) */
  int must_fail = 0;
  const char *why = NULL;
  FZ_MUST_FAIL_IF(!qp && !kvp);
  FZ_MUST_FAIL_IF(kvp && !cp);
  FZ_MUST_FAIL_IF(cp && !kvp);
  FZ_MUST_FAIL_IF(flags & ~PE_ROPE_STREAM_CACHE);
  FZ_MUST_FAIL_IF(m->struct_size < sizeof(pe_mla));
  FZ_MUST_FAIL_IF(m->rope_dim != R || made.rotary_dim != R);
  FZ_MUST_FAIL_IF(m->format > 3 || m->order > 1);
  FZ_MUST_FAIL_IF(m->q_norm == 1 || m->q_norm == 2 || m->q_norm > 3 || m->kv_norm > 3);
  FZ_MUST_FAIL_IF((m->format == PE_MLA_FP8_E4M3) != (m->scale != NULL));
  FZ_MUST_FAIL_IF(m->format == PE_MLA_FP8_E4M3 && !(isfinite(scale) && scale > 0));
  FZ_MUST_FAIL_IF(!isfinite(m->kv_eps) || m->kv_eps < 0 || !isfinite(m->q_eps) || m->q_eps < 0);
  FZ_MUST_FAIL_IF(qp && (m->q_rope_offset < 0 || m->q_rope_offset + R > q_dim));
  FZ_MUST_FAIL_IF(kvp && (kvh != 1 || m->kv_rope_offset < 0 || m->kv_rope_offset + R > kv_dim));
  FZ_MUST_FAIL_IF(kvp && bad_slot);
  FZ_MUST_FAIL_IF(bad_pos && (qp || kvp));
  FZ_MUST_FAIL_IF(kvp && kv_in_cache && n > 0);
  FZ_MUST_FAIL_IF(cp && kvp && rows_alias && NB > 0);

  /* what a successful store may write */
  if (!must_fail) {
    for (int64_t i = 0; qp && i < B * H * T; i++) {
      int64_t a = m->q_norm ? 0 : m->q_rope_offset, e = m->q_norm ? q_dim : m->q_rope_offset + R;
      if (a >= 0 && e <= q_dim) memset(qa.mask + FZ_GUARD + (size_t)(i * q_dim + a) * qes, 1, (size_t)(e - a) * qes);
    }
    for (int64_t i = 0; cp && sp && i < n; i++) {
      int64_t s = slots[i];
      if (s < 0 || s >= nslots) continue;
      size_t off = (size_t)((s / BS) * bstride + (s % BS) * sstride);
      if (off + (size_t)row <= cbytes) memset(ca.mask + FZ_GUARD + off, 1, (size_t)row);
      size_t so = (size_t)((s / BS) * bstride + BS * sstride + (s % BS) * sbytes);
      if (sbytes && so + (size_t)sbytes <= cbytes) memset(ca.mask + FZ_GUARD + so, 1, (size_t)sbytes);
    }
  }
  fz_arena_snapshot(&qa);
  fz_arena_snapshot(&ka);
  fz_arena_snapshot(&ca);
  fz_set_sentinel();
  pe_status st = pe_mla_rope_store(c, m, qp, kvp, cp, sp, pos, flags, pool);
  fz_check_call(FN, st, must_fail, why, NULL);
  fz_arena_check(&qa, st, FN);
  fz_arena_check(&ca, st, FN);
  fz_arena_check_unchanged(&ka, FN); /* kv is only read */

  /* the read back: out [B, 1, T, kv_dim] */
  if (cp && (fz_u8(&f) & 1)) {
    fz_arena oa;
    pe_dtype odt = (pe_dtype)(fz_u8(&f) % 3);
    size_t oes = fz_esize(odt), obytes = (size_t)(B * T * kv_dim) * oes;
    if (fz_arena_alloc(&oa, obytes + 8, fz_bits(&f, 8))) {
      pe_tensor out = {oa.mem + FZ_GUARD, odt, {B, 1, T, kv_dim}, {T * kv_dim, 0, kv_dim, 1}};
      for (int64_t i = 0; i < n; i++)
        if (slots[i] >= 0) memset(oa.mask + FZ_GUARD + (size_t)(i * kv_dim) * oes, 1, (size_t)kv_dim * oes);
      fz_arena_snapshot(&oa);
      fz_arena_snapshot(&ca);
      fz_set_sentinel();
      st = pe_mla_cache_read(m, cp, &out, sp);
      int bad_range = 0;
      for (int64_t i = 0; sp && bad_slot && i < n; i++) bad_range |= slots[i] < -1 || slots[i] >= nslots;
      fz_check_call("pe_mla_cache_read", st, bad_range, "accepted a slot out of range", NULL);
      fz_arena_check(&oa, st, "pe_mla_cache_read");
      fz_arena_check_unchanged(&ca, "pe_mla_cache_read");
      fz_arena_free(&oa);
    }
  }
  free(pos);
  free(slots);
out:
  fz_arena_free(&qa);
  fz_arena_free(&ka);
out_c:
  fz_arena_free(&ca);
  pe_rope_cache_destroy(c);
  return 0;
}
