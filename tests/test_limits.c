/* test_limits.c - arguments at the edges of int64/size_t and of memory:
 * shapes and positions at INT64_MIN/MAX, element counts and byte extents that
 * overflow, strides reaching below address 0, tables larger than memory.
 * The serving entry points (fused store, M-RoPE and its config parser,
 * multi-cache) get the same treatment. Each must come back as a clear error
 * (a status and a sentence) with every buffer unchanged - never a crash, a wrap-around or a partial write.
 * Prints "bad inputs tried: N" for the CI summary. */
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

#define P53 ((int64_t)1 << 53)

static int bad_inputs;

/* A float buffer with its snapshot, to prove a refused call wrote nothing. */
typedef struct buf {
  float *data, *snap;
  size_t n;
} buf;

static buf buf_new(size_t n) {
  buf b = {malloc(n * sizeof(float)), malloc(n * sizeof(float)), n};
  assert_non_null(b.data);
  assert_non_null(b.snap);
  for (size_t i = 0; i < n; i++) b.data[i] = (float)i * 0.25f - 3.0f;
  memcpy(b.snap, b.data, n * sizeof(float));
  return b;
}
static void buf_unchanged(const buf *b) { assert_memory_equal(b->data, b->snap, b->n * sizeof(float)); }
static void buf_free(buf *b) {
  free(b->data);
  free(b->snap);
}

/* Expect a refusal with one of two statuses and a non-empty message. */
static void refused(pe_status st, pe_status want1, pe_status want2) {
  if (st != want1 && st != want2)
    fail_msg("got %s, wanted %s or %s (last error: %s)", pe_status_string(st),
             pe_status_string(want1), pe_status_string(want2), pe_last_error());
  assert_true(strlen(pe_last_error()) > 0);
  bad_inputs++;
}

static pe_rope_cache *make_cache(int32_t head_dim, int64_t max_positions) {
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = head_dim;
  p.max_positions = max_positions;
  pe_rope_cache *c = NULL;
  assert_int_equal(pe_rope_cache_create(&p, &c), PE_OK);
  return c;
}

/* Dense strides; computed with wrap-around because some cases then replace
 * a dimension or use huge ones on purpose (the library must reject them). */
static pe_tensor dense(void *data, int64_t b, int64_t h, int64_t t, int64_t d) {
  uint64_t uh = (uint64_t)h, ut = (uint64_t)t, ud = (uint64_t)d;
  pe_tensor x = {data, PE_F32, {b, h, t, d}, {(int64_t)(uh * ut * ud), (int64_t)(ut * ud), d, 1}};
  return x;
}

/* Shape values no valid call can carry: negative, or so large that the
 * element count or byte extent of a small tensor overflows int64. (A large
 * value that still fits, e.g. 2^32 rows, describes a valid tensor the library
 * cannot know is missing, so it is not among them.) 0 is among them only for
 * shape[3] (head_dim, d_model, k_len): zero batch, heads or tokens is an
 * empty call, PE_OK with nothing touched (an empty chunk of a continuously
 * batched step; a no-op in NumPy and PyTorch). */
static const int64_t edges[] = {0, -1, INT64_MIN, INT64_MIN + 1, INT64_MAX, INT64_MAX - 1,
                                 (int64_t)1 << 62, -((int64_t)1 << 62)};
#define N_EDGES (sizeof edges / sizeof edges[0])

/* ---- shapes and strides ---- */

static void test_shape_edges(void **state) {
  (void)state;
  pe_rope_cache *c = make_cache(16, 64);
  buf b = buf_new(4096);
  for (int dim = 0; dim < 4; dim++)
    for (size_t e = 0; e < N_EDGES; e++) {
      if (edges[e] == 0 && dim < 3) continue; /* empty: test_zero_sizes_are_empty_calls */
      pe_tensor q = dense(b.data, 1, 2, 4, 16);
      q.shape[dim] = edges[e];
      pe_status st = pe_apply_rope_qk(c, &q, NULL, NULL, 0, NULL);
      /* A huge dimension either overflows or is too large for the table or
       * head_dim; nothing of it exists, so any acceptance would be a bug. */
      if (st == PE_OK) fail_msg("shape[%d] = %lld accepted", dim, (long long)edges[e]);
      assert_true(strlen(pe_last_error()) > 0);
      bad_inputs++;
      buf_unchanged(&b);
    }
  buf_free(&b);
  pe_rope_cache_destroy(c);
}

static void test_element_count_overflow(void **state) {
  (void)state;
  pe_rope_cache *c = make_cache(16, 0);
  buf b = buf_new(64);
  /* 2^20 * 2^20 * 2^20 * 16 = 2^64 elements: count overflows int64. */
  pe_tensor q = {b.data, PE_F32, {(int64_t)1 << 20, (int64_t)1 << 20, (int64_t)1 << 20, 16},
                 {0, 0, 0, 1}};
  refused(pe_apply_rope_qk(c, &q, NULL, NULL, 0, NULL), PE_ERR_OVERFLOW, PE_ERR_SHAPE);
  /* 2^62 tokens of 16 floats: count 2^66. */
  pe_tensor k = dense(b.data, 1, 1, (int64_t)1 << 62, 16);
  refused(pe_rope_shift_k(c, &k, (const int64_t *)b.data, NULL), PE_ERR_OVERFLOW, PE_ERR_SHAPE);
  buf_unchanged(&b);
  buf_free(&b);
  pe_rope_cache_destroy(c);
}

static void test_stride_extent_overflow(void **state) {
  (void)state;
  pe_rope_cache *c = make_cache(16, 0);
  buf b = buf_new(256);
  const int64_t strides[] = {INT64_MAX, INT64_MIN, INT64_MAX / 2 + 1, -(INT64_MAX / 2) - 1,
                             INT64_MAX / 4, (int64_t)1 << 61, -((int64_t)1 << 61)};
  for (int dim = 0; dim < 3; dim++)
    for (size_t s = 0; s < sizeof strides / sizeof strides[0]; s++) {
      pe_tensor q = dense(b.data, 3, 3, 3, 16);
      q.stride[dim] = strides[s];
      /* shape 3 along dim: 2 * stride elements * 4 bytes overflows int64. */
      refused(pe_apply_rope_qk(c, &q, NULL, NULL, 0, NULL), PE_ERR_OVERFLOW, PE_ERR_SHAPE);
      buf_unchanged(&b);
    }
  /* stride[3] must be 1, whatever it is. */
  for (size_t e = 0; e < N_EDGES; e++) {
    pe_tensor q = dense(b.data, 1, 1, 2, 16);
    q.stride[3] = edges[e];
    refused(pe_apply_rope_qk(c, &q, NULL, NULL, 0, NULL), PE_ERR_SHAPE, PE_ERR_SHAPE);
  }
  buf_unchanged(&b);
  buf_free(&b);
  pe_rope_cache_destroy(c);
}

/* The last element's offset is exactly INT64_MAX: the element count (2^62)
 * and every span fit, but one past the end does not. Found by fuzz_t5: the
 * byte-extent check computed (hi + 1) before checking it. */
static void test_extent_ending_at_int64_max(void **state) {
  (void)state;
  buf b = buf_new(64);
  const int64_t d = (int64_t)1 << 61;
  pe_tensor s = {b.data, PE_F32, {1, 1, 2, d}, {0, 0, INT64_MAX - d + 1, 1}};
  pe_rope_cache *c = make_cache(16, 0);
  refused(pe_apply_rope_qk(c, &s, NULL, NULL, 0, NULL), PE_ERR_OVERFLOW, PE_ERR_SHAPE);
  refused(pe_alibi_add_bias(&s, NULL, NULL, 0, NULL), PE_ERR_OVERFLOW, PE_ERR_SHAPE);
  buf_unchanged(&b);
  buf_free(&b);
  pe_rope_cache_destroy(c);
}

/* A reversed tensor spans memory below data: one whose span would start
 * below address 0 is impossible and must be refused before any access. */
static void test_negative_stride_below_address_zero(void **state) {
  (void)state;
  pe_rope_cache *c = make_cache(16, 0);
  pe_tensor q = {(void *)(uintptr_t)4096, PE_F32, {1, 1, 4, 16}, {0, 0, -4096, 1}};
  refused(pe_apply_rope_qk(c, &q, NULL, NULL, 0, NULL), PE_ERR_OVERFLOW, PE_ERR_SHAPE);
  /* And one reaching past the top of the address space. */
  pe_tensor k = {(void *)(UINTPTR_MAX - 4095), PE_F32, {1, 1, 4, 16}, {0, 0, 4096, 1}};
  refused(pe_rope_shift_k(c, &k, (const int64_t[4]){1, 2, 3, 4}, NULL), PE_ERR_OVERFLOW,
          PE_ERR_SHAPE);
  pe_rope_cache_destroy(c);
}

/* Tensors on both sides of the shapes (2^15) and strides (+-2^31) below
 * which the library skips the per-product overflow tests, at addresses
 * where the span ends below 0, past the top of the address space, or fits
 * (some exactly at those edges): each refused with PE_ERR_OVERFLOW exactly
 * when its byte range, computed here in 128 bits, leaves [0, 2^64). A
 * tensor that fits is refused by its positions (one past the table), so no
 * call touches these addresses. */
static void test_extent_at_the_fast_path_limits(void **state) {
  (void)state;
  pe_rope_cache *c = make_cache(16, 4);
  const int64_t shapes[] = {((int64_t)1 << 15) - 1, (int64_t)1 << 15};
  const int64_t strides[] = {((int64_t)1 << 31) - 1, (int64_t)1 << 31, -((int64_t)1 << 31),
                             -((int64_t)1 << 31) - 1, 16, -16};
  const uintptr_t bases[] = {(uintptr_t)1 << 20, (uintptr_t)1 << 46, (uintptr_t)1 << 50,
                             UINTPTR_MAX - ((uintptr_t)1 << 20) + 1,
                             UINTPTR_MAX - ((uintptr_t)1 << 47) + 1};
  const size_t n_bases = sizeof bases / sizeof bases[0];
  int64_t *pos = malloc(((size_t)1 << 15) * sizeof *pos);
  assert_non_null(pos);
  for (size_t i = 0; i < (size_t)1 << 15; i++) pos[i] = 4; /* max_positions: out of range */
  int fits = 0, overflows = 0;
  for (int dim = 0; dim < 3; dim++)
    for (size_t n = 0; n < sizeof shapes / sizeof shapes[0]; n++)
      for (size_t s = 0; s < sizeof strides / sizeof strides[0]; s++)
        for (size_t a = 0; a < n_bases + 4; a++) {
          /* The byte range from data: [below, above). */
          __int128 span = (__int128)(shapes[n] - 1) * strides[s];
          __int128 below = (span < 0 ? span : 0) * 4, above = (16 + (span > 0 ? span : 0)) * 4;
          /* A fixed address, or one at an edge: the range starting at 0 or
           * 4 bytes below it, ending at the top (2^64 - 1) or at 2^64. */
          __int128 top = (__int128)UINTPTR_MAX + 1;
          const __int128 at[4] = {-below, -below - 4, top - 4 - above, top - above};
          __int128 data = a < n_bases ? (__int128)bases[a] : at[a - n_bases];
          if (data <= 0 || data >= top) continue; /* NULL is another error */
          pe_tensor q = {(void *)(uintptr_t)data, PE_F32, {1, 1, 1, 16}, {16, 16, 16, 1}};
          q.shape[dim] = shapes[n];
          q.stride[dim] = strides[s];
          __int128 lo = data + below, hi = data + above;
          int ok = lo >= 0 && hi <= (__int128)UINTPTR_MAX;
          pe_status st = pe_apply_rope_qk(c, &q, NULL, pos, 0, NULL);
          if (st != (ok ? PE_ERR_POSITION_OUT_OF_RANGE : PE_ERR_OVERFLOW))
            fail_msg("dim %d shape %lld stride %lld data %#llx: %s (%s), wanted %s", dim,
                     (long long)shapes[n], (long long)strides[s], (unsigned long long)data,
                     pe_status_string(st), pe_last_error(),
                     ok ? "the positions refused" : "PE_ERR_OVERFLOW");
          fits += ok;
          overflows += !ok;
          bad_inputs++;
        }
  assert_true(fits > 0 && overflows > 0);
  free(pos);
  pe_rope_cache_destroy(c);
}

/* The same limits for a quantized cache (a tensor of bytes: FP8 rows of
 * head_dim bytes, Q8_0 rows of head_dim / 32 blocks of 34), through
 * pe_qk_norm_rope_store. Nothing is dereferenced: k and the cache sit at
 * made-up addresses and the positions are refused after both. A cache that
 * fits is refused for overlapping k when its byte range holds k's, else
 * for the positions. */
static void test_kv_extent_at_the_fast_path_limits(void **state) {
  (void)state;
  pe_rope_cache *c = make_cache(128, 4);
  const int64_t shapes[] = {((int64_t)1 << 15) - 1, (int64_t)1 << 15};
  const uintptr_t k_at = (uintptr_t)1 << 28;
  pe_tensor k = {(void *)k_at, PE_F32, {1, 1, 1, 128}, {128, 128, 128, 1}};
  int64_t pos = 4, slot = 0; /* max_positions: out of range */
  float scale = 1.0f;
  pe_qk_norm none;
  pe_qk_norm_init(&none); /* PE_QK_NORM_NONE */
  const uint32_t formats[2] = {PE_KV_FP8_E4M3, PE_KV_Q8_0};
  const int64_t row_bytes[2] = {128, 128 / 32 * 34};
  int fits = 0, overflows = 0, overlaps = 0;
  for (int f = 0; f < 2; f++) {
    const int64_t row = row_bytes[f];
    const int64_t strides[] = {((int64_t)1 << 31) - 1, (int64_t)1 << 31, -((int64_t)1 << 31),
                               -((int64_t)1 << 31) - 1, row, -row};
    for (int dim = 0; dim < 3; dim += 2) /* blocks, slots (heads must be k's) */
      for (size_t n = 0; n < sizeof shapes / sizeof shapes[0]; n++)
        for (size_t s = 0; s < sizeof strides / sizeof strides[0]; s++)
          for (int a = 0; a < 6; a++) {
            __int128 span = (__int128)(shapes[n] - 1) * strides[s];
            __int128 below = span < 0 ? span : 0, above = row + (span > 0 ? span : 0);
            __int128 top = (__int128)UINTPTR_MAX + 1;
            /* (byte tensors need no alignment: the edges to the byte) */
            const __int128 at[6] = {(__int128)1 << 50, top - ((__int128)1 << 47), -below,
                                    -below - 1, top - 1 - above, top - above};
            __int128 data = at[a];
            if (data <= 0 || data >= top) continue;
            pe_tensor kc = {(void *)(uintptr_t)data, PE_F32, {1, 1, 1, 128}, {row, row, row, 1}};
            kc.shape[dim] = shapes[n];
            kc.stride[dim] = strides[s];
            pe_kv_cache kv;
            pe_kv_cache_init(&kv);
            kv.k = &kc;
            kv.k_quant = formats[f];
            kv.k_scale = formats[f] == PE_KV_FP8_E4M3 ? &scale : NULL;
            __int128 lo = data + below, hi = data + above;
            int ok = lo >= 0 && hi <= (__int128)UINTPTR_MAX;
            int meets = ok && lo < (__int128)k_at + 512 && (__int128)k_at < hi;
            pe_status want = !ok ? PE_ERR_OVERFLOW
                             : meets ? PE_ERR_SHAPE
                                     : PE_ERR_POSITION_OUT_OF_RANGE;
            pe_status st = pe_qk_norm_rope_store(c, &none, NULL, &k, NULL, &kv, &slot, &pos, 0, NULL);
            if (st != want || (meets && !strstr(pe_last_error(), "overlap")))
              fail_msg("format %u dim %d shape %lld stride %lld data %#llx: %s (%s), wanted %s",
                       (unsigned)formats[f], dim, (long long)shapes[n], (long long)strides[s],
                       (unsigned long long)data, pe_status_string(st), pe_last_error(),
                       pe_status_string(want));
            fits += ok && !meets;
            overflows += !ok;
            overlaps += meets;
            bad_inputs++;
          }
  }
  assert_true(fits > 0 && overflows > 0 && overlaps > 0);
  pe_rope_cache_destroy(c);
}

/* A dimension of size 1 may carry any stride (it is never stepped): the
 * call is valid and must touch exactly the elements of the other dims. */
static void test_size_one_dim_with_huge_stride(void **state) {
  (void)state;
  pe_rope_cache *c = make_cache(16, 0);
  buf b = buf_new(64), ref = buf_new(64);
  const int64_t huge[] = {INT64_MAX / 2, INT64_MIN / 2, (int64_t)8029759185026510703};
  for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++)
    for (int dim = 0; dim < 3; dim++) {
      memcpy(b.data, b.snap, 64 * sizeof(float));
      memcpy(ref.data, ref.snap, 64 * sizeof(float));
      pe_tensor q = dense(b.data, 1, 1, 1, 16), r = dense(ref.data, 1, 1, 1, 16);
      q.stride[dim] = huge[i];
      int64_t pos = 5;
      assert_int_equal(pe_apply_rope_qk(c, &q, NULL, &pos, 0, NULL), PE_OK);
      assert_int_equal(pe_apply_rope_qk(c, &r, NULL, &pos, 0, NULL), PE_OK);
      assert_memory_equal(b.data, ref.data, 64 * sizeof(float));
    }
  buf_free(&b);
  buf_free(&ref);
  pe_rope_cache_destroy(c);
}

/* ---- tables larger than memory ---- */

static void test_table_larger_than_memory(void **state) {
  (void)state;
  struct {
    int64_t max_positions;
    int32_t head_dim;
  } cases[] = {
      {P53, 16384},                      /* 2^53 rows of 64 KiB: overflows size_t */
      {P53, 2},                          /* 2^56 bytes: overflows or cannot exist */
      {(int64_t)1 << 40, 128},           /* 512 TiB */
      {(int64_t)1 << 36, 16384},         /* 4 EiB */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pe_rope_params p;
    pe_rope_params_init(&p);
    p.max_positions = cases[i].max_positions;
    p.head_dim = cases[i].head_dim;
    pe_rope_cache *c = (pe_rope_cache *)(uintptr_t)0x77;
    refused(pe_rope_cache_create(&p, &c), PE_ERR_OVERFLOW, PE_ERR_OUT_OF_MEMORY);
    assert_ptr_equal(c, (pe_rope_cache *)(uintptr_t)0x77);
  }
  /* Past 2^53 positions: not exact in double, refused as an argument. */
  const int64_t bad_max[] = {P53 + 1, INT64_MAX, -1, INT64_MIN};
  for (size_t i = 0; i < 4; i++) {
    pe_rope_params p;
    pe_rope_params_init(&p);
    p.max_positions = bad_max[i];
    pe_rope_cache *c = (pe_rope_cache *)(uintptr_t)0x77;
    refused(pe_rope_cache_create(&p, &c), PE_ERR_INVALID_ARGUMENT, PE_ERR_OVERFLOW);
    assert_ptr_equal(c, (pe_rope_cache *)(uintptr_t)0x77);
  }
  /* head_dim / rotary_dim at the int32 edges. */
  const int32_t dims[] = {0, -1, INT32_MIN, INT32_MAX, 16386, 1, 3};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
    pe_rope_params p;
    pe_rope_params_init(&p);
    p.head_dim = dims[i];
    pe_rope_cache *c = NULL;
    refused(pe_rope_cache_create(&p, &c), PE_ERR_SHAPE, PE_ERR_INVALID_ARGUMENT);
    pe_rope_params_init(&p);
    p.rotary_dim = dims[i] == 0 ? 129 : dims[i];
    refused(pe_rope_cache_create(&p, &c), PE_ERR_SHAPE, PE_ERR_INVALID_ARGUMENT);
    assert_null(c);
  }
}

/* Tiny positive bases make frequencies of 1e35 and more: every cos/sin the
 * library returns must still be a cosine and a sine (|v| <= 1), or the cache
 * must be refused. Found by fuzz_rope_cache. */
static void test_huge_frequencies_stay_bounded(void **state) {
  (void)state;
  const double bases[] = {7.2911220195563975e-304, 1e-30, 1e-10};
  for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++)
    for (int64_t maxp = 0; maxp <= 256; maxp += 256) {
      pe_rope_params p;
      pe_rope_params_init(&p);
      p.head_dim = 34;
      p.style = PE_ROPE_GPTJ;
      p.base = bases[i];
      p.max_positions = maxp;
      pe_rope_cache *c = NULL;
      if (pe_rope_cache_create(&p, &c) != PE_OK) {
        bad_inputs++;
        continue;
      }
      float cs[17], sn[17];
      const int64_t positions[] = {1, 255, 211837, P53 - 1};
      for (size_t k = 0; k < 4; k++) {
        if (pe_rope_cache_cos_sin(c, positions[k], cs, sn) != PE_OK) continue;
        for (int j = 0; j < 17; j++)
          if (!(fabsf(cs[j]) <= 1.0f) || !(fabsf(sn[j]) <= 1.0f))
            fail_msg("base %g max_positions %lld: cos_sin(%lld)[%d] = (%g, %g), not in [-1, 1]",
                     bases[i], (long long)maxp, (long long)positions[k], j, (double)cs[j],
                     (double)sn[j]);
      }
      pe_rope_cache_destroy(c);
    }
}

/* ---- positions and deltas ---- */

static void test_position_edges(void **state) {
  (void)state;
  pe_rope_cache *with_table = make_cache(16, 4096), *no_table = make_cache(16, 0);
  buf b = buf_new(16 * 4 * 2);
  const int64_t bad[] = {-1, INT64_MIN, INT64_MAX, P53, P53 + 1, -P53};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    for (int slot = 0; slot < 4; slot++) {
      int64_t pos[4] = {0, 1, 2, 3};
      pos[slot] = bad[i];
      pe_tensor q = dense(b.data, 1, 2, 4, 16);
      refused(pe_apply_rope_qk(no_table, &q, NULL, pos, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE,
              PE_ERR_POSITION_OUT_OF_RANGE);
      refused(pe_apply_rope_qk(with_table, NULL, &q, pos, PE_ROPE_INVERSE, NULL),
              PE_ERR_POSITION_OUT_OF_RANGE, PE_ERR_POSITION_OUT_OF_RANGE);
      refused(pe_rope_rerotate_k(no_table, no_table, &q, pos, NULL), PE_ERR_POSITION_OUT_OF_RANGE,
              PE_ERR_POSITION_OUT_OF_RANGE);
      buf_unchanged(&b);
    }
  /* Table limits: max_positions itself is one past the end. */
  int64_t pos[4] = {0, 1, 2, 4096};
  pe_tensor q = dense(b.data, 1, 2, 4, 16);
  refused(pe_apply_rope_qk(with_table, &q, NULL, pos, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE,
          PE_ERR_POSITION_OUT_OF_RANGE);
  buf_unchanged(&b);
  /* The largest exact position is fine without a table. */
  pos[3] = P53 - 1;
  assert_int_equal(pe_apply_rope_qk(no_table, &q, NULL, pos, 0, NULL), PE_OK);

  float cs[8], sn[8], cs0[8], sn0[8];
  memset(cs, 0x3c, sizeof cs);
  memset(sn, 0x3c, sizeof sn);
  memcpy(cs0, cs, sizeof cs);
  memcpy(sn0, sn, sizeof sn);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    refused(pe_rope_cache_cos_sin(no_table, bad[i], cs, sn), PE_ERR_POSITION_OUT_OF_RANGE,
            PE_ERR_POSITION_OUT_OF_RANGE);
    refused(pe_rope_cache_cos_sin(with_table, bad[i], cs, sn), PE_ERR_POSITION_OUT_OF_RANGE,
            PE_ERR_POSITION_OUT_OF_RANGE);
  }
  refused(pe_rope_cache_cos_sin(with_table, 4096, cs, sn), PE_ERR_POSITION_OUT_OF_RANGE,
          PE_ERR_POSITION_OUT_OF_RANGE);
  assert_memory_equal(cs, cs0, sizeof cs);
  assert_memory_equal(sn, sn0, sizeof sn);
  buf_free(&b);
  pe_rope_cache_destroy(with_table);
  pe_rope_cache_destroy(no_table);
}

static void test_delta_edges(void **state) {
  (void)state;
  pe_rope_cache *c = make_cache(16, 64);
  buf b = buf_new(16 * 4);
  const int64_t bad[] = {INT64_MIN, INT64_MAX, P53, -P53, INT64_MIN + 1};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int64_t d[4] = {0, -5, 7, 0};
    d[i % 4] = bad[i];
    pe_tensor k = dense(b.data, 1, 1, 4, 16);
    refused(pe_rope_shift_k(c, &k, d, NULL), PE_ERR_POSITION_OUT_OF_RANGE, PE_ERR_INVALID_ARGUMENT);
    buf_unchanged(&b);
  }
  pe_tensor k = dense(b.data, 1, 1, 4, 16);
  refused(pe_rope_shift_k(c, &k, NULL, NULL), PE_ERR_NULL_POINTER, PE_ERR_NULL_POINTER);
  int64_t ok[4] = {P53 - 1, -(P53 - 1), 0, -1};
  assert_int_equal(pe_rope_shift_k(c, &k, ok, NULL), PE_OK);
  buf_free(&b);
  pe_rope_cache_destroy(c);
}

/* ---- the other encodings ---- */

static void test_other_encodings_edges(void **state) {
  (void)state;
  buf b = buf_new(4096);
  {
    const int32_t heads[] = {0, -1, INT32_MIN, INT32_MAX, 65537};
    for (size_t i = 0; i < 5; i++)
      refused(pe_alibi_slopes(heads[i], 8.0, b.data), PE_ERR_INVALID_ARGUMENT, PE_ERR_SHAPE);
    const double biases[] = {0.0, -1.0, NAN, INFINITY};
    for (size_t i = 0; i < 4; i++)
      refused(pe_alibi_slopes(8, biases[i], b.data), PE_ERR_INVALID_ARGUMENT, PE_ERR_INVALID_ARGUMENT);
    buf_unchanged(&b);
  }
  {
    for (int dim = 0; dim < 4; dim++)
      for (size_t e = 0; e < N_EDGES; e++) {
        if (edges[e] == 0 && dim < 3) continue; /* empty: test_zero_sizes_are_empty_calls */
        pe_tensor s = dense(b.data, 1, 2, 4, 8);
        s.shape[dim] = edges[e];
        pe_status st = pe_alibi_add_bias(&s, NULL, NULL, 0, NULL);
        if (st == PE_OK) fail_msg("alibi: shape[%d] = %lld accepted", dim, (long long)edges[e]);
        bad_inputs++;
        buf_unchanged(&b);
      }
    int64_t qpos[4] = {0, 1, INT64_MAX, 3};
    pe_tensor s = dense(b.data, 1, 2, 4, 8);
    qpos[2] = -1;
    refused(pe_alibi_add_bias(&s, NULL, qpos, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE,
            PE_ERR_INVALID_ARGUMENT);
    qpos[2] = INT64_MIN;
    refused(pe_alibi_add_bias(&s, NULL, qpos, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE,
            PE_ERR_INVALID_ARGUMENT);
    buf_unchanged(&b);
  }
  {
    /* Must not overflow negating INT64_MIN, whatever bucket it picks. */
    const int64_t rel[] = {INT64_MIN, INT64_MAX, INT64_MIN + 1, 0, -1};
    for (size_t i = 0; i < 5; i++) {
      int32_t bk = pe_t5_bucket(rel[i], 1, 32, 128);
      assert_true(bk >= 0 && bk < 32);
      bk = pe_t5_bucket(rel[i], 0, 32, 128);
      assert_true(bk >= 0 && bk < 32);
    }
    const int32_t nb[] = {0, 1, -2, INT32_MIN};
    for (size_t i = 0; i < 4; i++) {
      assert_int_equal(pe_t5_bucket(5, 1, nb[i], 128), -1);
      bad_inputs++;
    }
    assert_int_equal(pe_t5_bucket(5, 1, 32, INT32_MIN), -1);
    bad_inputs++;
  }
  {
    /* A table whose size overflows: nothing may be written to out. */
    refused(pe_sinusoidal_table(INT64_MAX, 16384, 10000.0, 0, b.data), PE_ERR_OVERFLOW,
            PE_ERR_INVALID_ARGUMENT);
    refused(pe_sinusoidal_table((int64_t)1 << 62, 8, 10000.0, 0, b.data), PE_ERR_OVERFLOW,
            PE_ERR_INVALID_ARGUMENT);
    refused(pe_sinusoidal_table(-1, 8, 10000.0, 0, b.data), PE_ERR_INVALID_ARGUMENT, PE_ERR_SHAPE);
    refused(pe_sinusoidal_table(4, INT32_MIN, 10000.0, 0, b.data), PE_ERR_INVALID_ARGUMENT,
            PE_ERR_SHAPE);
    refused(pe_sinusoidal_table(4, 8, -1.0, 0, b.data), PE_ERR_INVALID_ARGUMENT, PE_ERR_INVALID_ARGUMENT);
    buf_unchanged(&b);
  }
  {
    int64_t pos[4] = {0, 1, INT64_MAX, 3};
    pe_tensor x = dense(b.data, 1, 1, 4, 8);
    refused(pe_sinusoidal_add(&x, pos, 10000.0, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE,
            PE_ERR_INVALID_ARGUMENT);
    pos[2] = -7;
    refused(pe_sinusoidal_add(&x, pos, 10000.0, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE,
            PE_ERR_INVALID_ARGUMENT);
    buf_unchanged(&b);
  }
  {
    buf table = buf_new(8 * 16);
    pe_tensor x = dense(b.data, 1, 1, 4, 8), t = dense(table.data, 1, 1, 16, 8);
    const int64_t bad[] = {16, -1, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < 4; i++) {
      int64_t pos[4] = {0, 1, 2, 3};
      pos[i] = bad[i];
      refused(pe_learned_add(&x, &t, pos, NULL), PE_ERR_POSITION_OUT_OF_RANGE,
              PE_ERR_POSITION_OUT_OF_RANGE);
    }
    buf_unchanged(&b);
    buf_unchanged(&table);
    buf_free(&table);
  }
  buf_free(&b);
}

/* Zero batch, heads or tokens (shape[0..2] = 0) is an empty call: PE_OK
 * with nothing touched, whatever the other dimensions' strides (every entry
 * point: test_contract.c). shape[3] = 0 stays refused (above). */
static void test_zero_sizes_are_empty_calls(void **state) {
  (void)state;
  pe_rope_cache *c = make_cache(16, 64);
  buf b = buf_new(4096);
  for (int dim = 0; dim < 3; dim++) {
    pe_tensor q = dense(b.data, 1, 2, 4, 16);
    q.shape[dim] = 0;
    pe_status st = pe_apply_rope_qk(c, &q, NULL, NULL, 0, NULL);
    if (st != PE_OK)
      fail_msg("pe_apply_rope_qk: shape[%d] = 0 (an empty call) returned %s, expected PE_OK: %s",
               dim, pe_status_string(st), pe_last_error());
    buf_unchanged(&b);
    pe_tensor s = dense(b.data, 1, 2, 4, 8);
    s.shape[dim] = 0;
    st = pe_alibi_add_bias(&s, NULL, NULL, 0, NULL);
    if (st != PE_OK)
      fail_msg("pe_alibi_add_bias: shape[%d] = 0 (an empty call) returned %s, expected PE_OK: %s",
               dim, pe_status_string(st), pe_last_error());
    buf_unchanged(&b);
  }
  buf_free(&b);
  pe_rope_cache_destroy(c);
}

/* ---- serving entry points: fused store, M-RoPE, multi-cache ---- */

/* q [1,2,4,16], k [1,1,4,16], k_cache [4,1,4,16] (16 slots): every shape edge
 * of each tensor, every slot, position, section, n_caches and cache_index
 * edge refused with all three buffers unchanged. */
static void test_serving_edges(void **state) {
  (void)state;
  pe_rope_cache *c = make_cache(16, 64), *fly = make_cache(16, 0);
  buf q = buf_new(2 * 4 * 16), k = buf_new(4 * 16), kc = buf_new(4 * 4 * 16);
  const int64_t slots_ok[4] = {0, 5, 9, 15};
  const int64_t pos_ok[3 * 4] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
  const int32_t section_ok[3] = {2, 3, 3}; /* sums to rotary_dim/2 = 8 */
  const pe_rope_cache *caches[2] = {c, fly};
  const int32_t index_ok[1] = {1};
#define UNCHANGED()      \
  do {                   \
    buf_unchanged(&q);   \
    buf_unchanged(&k);   \
    buf_unchanged(&kc);  \
  } while (0)
  /* The valid calls first, so that every refusal below is the edge's doing. */
  {
    buf q2 = buf_new(2 * 4 * 16), k2 = buf_new(4 * 16), kc2 = buf_new(4 * 4 * 16);
    pe_tensor tq = dense(q2.data, 1, 2, 4, 16), tk = dense(k2.data, 1, 1, 4, 16),
              tc = dense(kc2.data, 4, 1, 4, 16);
    assert_int_equal(pe_apply_rope_qk_store(c, &tq, &tk, &tc, slots_ok, pos_ok, 0, NULL), PE_OK);
    assert_int_equal(pe_apply_mrope_qk(c, &tq, &tk, pos_ok, section_ok, 0, NULL), PE_OK);
    assert_int_equal(pe_apply_rope_qk_multi(caches, 2, index_ok, &tq, &tk, pos_ok, 0, NULL), PE_OK);
    buf_free(&q2);
    buf_free(&k2);
    buf_free(&kc2);
  }
  for (int dim = 0; dim < 4; dim++)
    for (size_t e = 0; e < N_EDGES; e++)
      for (int which = 0; which < 3; which++) {
        /* zero batch/heads/tokens of q or k alone is an empty or mismatched
         * call (test_contract.c covers empty calls); k_cache edges all bad */
        if (edges[e] == 0 && dim < 3 && which < 2) continue;
        pe_tensor tq = dense(q.data, 1, 2, 4, 16), tk = dense(k.data, 1, 1, 4, 16),
                  tc = dense(kc.data, 4, 1, 4, 16);
        pe_tensor *t = which == 0 ? &tq : which == 1 ? &tk : &tc;
        t->shape[dim] = edges[e];
        pe_status st = pe_apply_rope_qk_store(c, &tq, &tk, &tc, slots_ok, pos_ok, 0, NULL);
        if (st == PE_OK)
          fail_msg("store: tensor %d shape[%d] = %lld accepted", which, dim, (long long)edges[e]);
        assert_true(strlen(pe_last_error()) > 0);
        bad_inputs++;
        UNCHANGED();
        if (which == 2) continue;
        st = pe_apply_mrope_qk(c, &tq, &tk, pos_ok, section_ok, 0, NULL);
        if (st == PE_OK)
          fail_msg("mrope: tensor %d shape[%d] = %lld accepted", which, dim, (long long)edges[e]);
        bad_inputs++;
        UNCHANGED();
        st = pe_apply_rope_qk_multi(caches, 2, index_ok, &tq, &tk, pos_ok, 0, NULL);
        if (st == PE_OK)
          fail_msg("multi: tensor %d shape[%d] = %lld accepted", which, dim, (long long)edges[e]);
        bad_inputs++;
        UNCHANGED();
      }
  pe_tensor tq = dense(q.data, 1, 2, 4, 16), tk = dense(k.data, 1, 1, 4, 16),
            tc = dense(kc.data, 4, 1, 4, 16);
  /* slots: below -1, at and past num_blocks * block_size, the int64 edges */
  const int64_t bad_slots[] = {-2, INT64_MIN, INT64_MIN + 1, 16, INT64_MAX, (int64_t)1 << 62};
  for (size_t i = 0; i < sizeof bad_slots / sizeof bad_slots[0]; i++)
    for (int at = 0; at < 4; at++) {
      int64_t sl[4];
      memcpy(sl, slots_ok, sizeof sl);
      sl[at] = bad_slots[i];
      refused(pe_apply_rope_qk_store(c, &tq, &tk, &tc, sl, pos_ok, 0, NULL),
              PE_ERR_INVALID_ARGUMENT, PE_ERR_INVALID_ARGUMENT);
      UNCHANGED();
    }
  /* positions: per token for the store and multi, per axis for M-RoPE */
  const int64_t bad_pos[] = {-1, INT64_MIN, INT64_MAX, P53, 64};
  for (size_t i = 0; i < sizeof bad_pos / sizeof bad_pos[0]; i++)
    for (int at = 0; at < 12; at++) {
      int64_t pp[12];
      memcpy(pp, pos_ok, sizeof pp);
      pp[at] = bad_pos[i];
      if (at < 4) {
        refused(pe_apply_rope_qk_store(c, &tq, &tk, &tc, slots_ok, pp, 0, NULL),
                PE_ERR_POSITION_OUT_OF_RANGE, PE_ERR_POSITION_OUT_OF_RANGE);
        UNCHANGED();
        const int32_t idx0[1] = {0}; /* the table cache: 64 is past it */
        refused(pe_apply_rope_qk_multi(caches, 2, idx0, &tq, &tk, pp, 0, NULL),
                PE_ERR_POSITION_OUT_OF_RANGE, PE_ERR_POSITION_OUT_OF_RANGE);
        UNCHANGED();
      }
      refused(pe_apply_mrope_qk(c, &tq, &tk, pp, section_ok, 0, NULL), PE_ERR_POSITION_OUT_OF_RANGE,
              PE_ERR_POSITION_OUT_OF_RANGE);
      UNCHANGED();
    }
  /* mrope_section: negative, int32 edges, and sums that wrap to 8 in int32 */
  const int32_t bad_sections[][3] = {{-1, 4, 5},         {INT32_MIN, 4, 4},  {INT32_MAX, 1, 1},
                                     {INT32_MAX, INT32_MAX, 10}, {INT32_MIN, INT32_MIN, 8},
                                     {0, 0, 0},          {8, 0, 1},          {-8, 8, 8}};
  for (size_t i = 0; i < sizeof bad_sections / sizeof bad_sections[0]; i++) {
    refused(pe_apply_mrope_qk(c, &tq, &tk, pos_ok, bad_sections[i], 0, NULL),
            PE_ERR_INVALID_ARGUMENT, PE_ERR_INVALID_ARGUMENT);
    UNCHANGED();
  }
  /* n_caches and cache_index at the int32 edges */
  const int32_t bad_n[] = {0, -1, INT32_MIN};
  for (size_t i = 0; i < 3; i++) {
    refused(pe_apply_rope_qk_multi(caches, bad_n[i], index_ok, &tq, &tk, pos_ok, 0, NULL),
            PE_ERR_INVALID_ARGUMENT, PE_ERR_INVALID_ARGUMENT);
    UNCHANGED();
  }
  const int32_t bad_index[] = {-1, 2, INT32_MIN, INT32_MAX};
  for (size_t i = 0; i < 4; i++) {
    refused(pe_apply_rope_qk_multi(caches, 2, &bad_index[i], &tq, &tk, pos_ok, 0, NULL),
            PE_ERR_INVALID_ARGUMENT, PE_ERR_INVALID_ARGUMENT);
    UNCHANGED();
  }
#undef UNCHANGED
  buf_free(&q);
  buf_free(&k);
  buf_free(&kc);
  pe_rope_cache_destroy(c);
  pe_rope_cache_destroy(fly);
}

/* config.json values at the edges of int32/int64/double: PE_ERR_PARSE, and
 * neither output written. */
static void test_mrope_section_json_edges(void **state) {
  (void)state;
  static const char *const bad[] = {
      "{\"rope_scaling\": {\"mrope_section\": [9223372036854775807, 1, 1]}}",
      "{\"rope_scaling\": {\"mrope_section\": [2147483648, 1, 1]}}",
      "{\"rope_scaling\": {\"mrope_section\": [-2147483649, 1, 1]}}",
      "{\"rope_scaling\": {\"mrope_section\": [1e308, 1, 1]}}",
      "{\"rope_scaling\": {\"mrope_section\": [1e999, 1, 1]}}",
      "{\"rope_scaling\": {\"mrope_section\": [-1, 1, 1]}}",
      "{\"rope_scaling\": {\"mrope_section\": [1.5, 1, 1]}}",
      "{\"rope_scaling\": {\"mrope_section\": [1, 1]}}",
      "{\"rope_scaling\": {\"mrope_section\": [1, 1, 1, 1]}}",
      "{\"rope_scaling\": {\"mrope_section\": [\"16\", 24, 24]}}",
      "{\"rope_scaling\": {\"mrope_section\": null}}",
      "{\"rope_scaling\": {\"mrope_section\": []}}",
      "{\"rope_scaling\": []}",
      "[]",
      "",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int32_t sec[3] = {-77, -77, -77};
    uint32_t fl = 0xdeadu;
    refused(pe_mrope_section_from_hf_config(bad[i], strlen(bad[i]), sec, &fl), PE_ERR_PARSE,
            PE_ERR_PARSE);
    assert_int_equal(sec[0], -77);
    assert_int_equal(sec[1], -77);
    assert_int_equal(sec[2], -77);
    assert_int_equal(fl, 0xdeadu);
  }
  /* len shorter than the text: only len bytes are read, so a cut is an error */
  const char *good = "{\"rope_scaling\": {\"mrope_section\": [16, 24, 24]}}";
  int32_t sec[3] = {-77, -77, -77};
  uint32_t fl = 0xdeadu;
  for (size_t len = 0; len < strlen(good); len++) {
    refused(pe_mrope_section_from_hf_config(good, len, sec, &fl), PE_ERR_PARSE, PE_ERR_PARSE);
    assert_int_equal(sec[0], -77);
    assert_int_equal(fl, 0xdeadu);
  }
  assert_int_equal(pe_mrope_section_from_hf_config(good, strlen(good), sec, &fl), PE_OK);
  assert_int_equal(sec[0], 16);
  assert_int_equal(sec[1], 24);
  assert_int_equal(sec[2], 24);
  assert_int_equal(fl, 0u);
  /* an empty section is a non-negative integer (posenc.h): every frequency
   * on the other axes; the sum is pe_apply_mrope_qk's to check */
  const char *zero = "{\"rope_scaling\": {\"mrope_section\": [0, 32, 0]}}";
  assert_int_equal(pe_mrope_section_from_hf_config(zero, strlen(zero), sec, &fl), PE_OK);
  assert_int_equal(sec[0], 0);
  assert_int_equal(sec[1], 32);
  assert_int_equal(sec[2], 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shape_edges),
      cmocka_unit_test(test_element_count_overflow),
      cmocka_unit_test(test_stride_extent_overflow),
      cmocka_unit_test(test_extent_ending_at_int64_max),
      cmocka_unit_test(test_negative_stride_below_address_zero),
      cmocka_unit_test(test_extent_at_the_fast_path_limits),
      cmocka_unit_test(test_kv_extent_at_the_fast_path_limits),
      cmocka_unit_test(test_size_one_dim_with_huge_stride),
      cmocka_unit_test(test_table_larger_than_memory),
      cmocka_unit_test(test_huge_frequencies_stay_bounded),
      cmocka_unit_test(test_position_edges),
      cmocka_unit_test(test_delta_edges),
      cmocka_unit_test(test_other_encodings_edges),
      cmocka_unit_test(test_zero_sizes_are_empty_calls),
      cmocka_unit_test(test_serving_edges),
      cmocka_unit_test(test_mrope_section_json_edges),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  printf("test_limits: bad inputs tried: %d\n", bad_inputs);
  return rc;
}
