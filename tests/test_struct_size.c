/* test_struct_size.c - the size-prefixed parameter struct rule
 * (include/posenc.h, pe_rope_params; CHANGELOG.md on the ABI): an older caller with a smaller struct gets the
 * defaults for the fields it does not know; a newer caller's larger struct is
 * accepted when the unknown tail is zero and refused otherwise; a size below
 * the oldest layout is refused. The same rule for pe_rope_cache_params, which
 * writes only struct_size bytes. */
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

static int bad_inputs;

/* Older layouts: every prefix that ends on a field boundary from
 * max_positions (the oldest one the library accepts) onward. */
static const size_t old_sizes[] = {
    offsetof(pe_rope_params, max_positions) + sizeof(int64_t),
    offsetof(pe_rope_params, scaling) + sizeof(pe_rope_scaling),
    offsetof(pe_rope_params, factor) + sizeof(double),
    offsetof(pe_rope_params, seq_len) + sizeof(int64_t),
    offsetof(pe_rope_params, attention_factor) + sizeof(double),
    offsetof(pe_rope_params, mscale_all_dim) + sizeof(double),
    offsetof(pe_rope_params, high_freq_factor) + sizeof(double),
    offsetof(pe_rope_params, long_factor) + sizeof(void *),
};

static void cos_sin_of(const pe_rope_cache *c, int64_t pos, float *cs, float *sn) {
  assert_int_equal(pe_rope_cache_cos_sin(c, pos, cs, sn), PE_OK);
}

/* A caller compiled against an older header: its struct ends early, and the
 * bytes after it in memory are garbage that must not be read as fields. */
static void test_older_caller_gets_defaults(void **state) {
  (void)state;
  pe_rope_params ref;
  pe_rope_params_init(&ref);
  ref.head_dim = 64;
  ref.max_positions = 128;
  pe_rope_cache *want = NULL;
  assert_int_equal(pe_rope_cache_create(&ref, &want), PE_OK);
  float wc[32], ws[32], gc[32], gs[32];
  cos_sin_of(want, 77, wc, ws);

  for (size_t i = 0; i < sizeof old_sizes / sizeof old_sizes[0]; i++) {
    unsigned char *buf = malloc(sizeof(pe_rope_params) + 64);
    assert_non_null(buf);
    memset(buf, 0xA5, sizeof(pe_rope_params) + 64); /* garbage past the old struct */
    pe_rope_params p;
    pe_rope_params_init(&p);
    p.head_dim = 64;
    p.max_positions = 128;
    p.struct_size = (uint32_t)old_sizes[i];
    memcpy(buf, &p, old_sizes[i]);
    pe_rope_cache *c = NULL;
    assert_int_equal(pe_rope_cache_create((const pe_rope_params *)(void *)buf, &c), PE_OK);
    cos_sin_of(c, 77, gc, gs);
    assert_memory_equal(gc, wc, sizeof gc);
    assert_memory_equal(gs, ws, sizeof gs);
    /* The resolved parameters show the defaults for the missing tail. */
    pe_rope_params got;
    pe_rope_params_init(&got);
    assert_int_equal(pe_rope_cache_params(c, &got), PE_OK);
    assert_int_equal(got.scaling, PE_ROPE_SCALING_NONE);
    assert_true(got.factor == 1.0);
    assert_true(got.low_freq_factor == 1.0 && got.high_freq_factor == 4.0);
    assert_int_equal(got.truncate, 1);
    pe_rope_cache_destroy(c);
    free(buf);
  }
  pe_rope_cache_destroy(want);
}

static void test_too_small_refused(void **state) {
  (void)state;
  const size_t oldest = offsetof(pe_rope_params, max_positions) + sizeof(int64_t);
  for (uint32_t sz = 0; sz < oldest; sz++) {
    pe_rope_params p;
    pe_rope_params_init(&p);
    p.struct_size = sz;
    pe_rope_cache *c = (pe_rope_cache *)(uintptr_t)0x1234;
    assert_int_equal(pe_rope_cache_create(&p, &c), PE_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(c, (pe_rope_cache *)(uintptr_t)0x1234);
    assert_true(strlen(pe_last_error()) > 0);
    bad_inputs++;
  }
}

/* A newer caller: our struct plus fields we do not know. */
typedef struct newer_params {
  pe_rope_params known;
  uint64_t future[4];
} newer_params;

static void test_larger_zero_tail_accepted(void **state) {
  (void)state;
  newer_params np;
  memset(&np, 0, sizeof np);
  pe_rope_params_init(&np.known);
  np.known.struct_size = (uint32_t)sizeof np;
  np.known.max_positions = 16;
  pe_rope_cache *c = NULL;
  assert_int_equal(pe_rope_cache_create(&np.known, &c), PE_OK);
  assert_non_null(c);
  pe_rope_cache_destroy(c);
  /* Sizes that are not a multiple of anything are fine too. */
  for (uint32_t extra = 1; extra <= sizeof np.future; extra++) {
    np.known.struct_size = (uint32_t)sizeof np.known + extra;
    c = NULL;
    assert_int_equal(pe_rope_cache_create(&np.known, &c), PE_OK);
    pe_rope_cache_destroy(c);
  }
}

static void test_larger_nonzero_tail_refused(void **state) {
  (void)state;
  for (size_t byte = 0; byte < sizeof(((newer_params *)0)->future); byte++) {
    newer_params np;
    memset(&np, 0, sizeof np);
    pe_rope_params_init(&np.known);
    np.known.struct_size = (uint32_t)sizeof np;
    ((unsigned char *)np.future)[byte] = 0x01;
    pe_rope_cache *c = (pe_rope_cache *)(uintptr_t)0x1234;
    assert_int_equal(pe_rope_cache_create(&np.known, &c), PE_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(c, (pe_rope_cache *)(uintptr_t)0x1234);
    char want[64]; /* the first non-zero byte, counted from the struct's start */
    snprintf(want, sizeof want, "byte %zu of the unknown tail", sizeof np.known + byte);
    if (!strstr(pe_last_error(), "struct_size") || !strstr(pe_last_error(), want))
      fail_msg("message \"%s\" lacks \"%s\"", pe_last_error(), want);
    bad_inputs++;
    /* A non-zero byte beyond struct_size is not the caller's struct: ignored. */
    np.known.struct_size = (uint32_t)(sizeof np.known + byte);
    c = NULL;
    assert_int_equal(pe_rope_cache_create(&np.known, &c), PE_OK);
    pe_rope_cache_destroy(c);
  }
}

/* pe_rope_cache_params writes exactly out->struct_size bytes. */
static void test_params_out_writes_only_struct_size(void **state) {
  (void)state;
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = 32;
  pe_rope_cache *c = NULL;
  assert_int_equal(pe_rope_cache_create(&p, &c), PE_OK);
  const size_t oldest = offsetof(pe_rope_params, max_positions) + sizeof(int64_t);
  for (size_t sz = 0; sz <= sizeof(pe_rope_params) + 16; sz++) {
    unsigned char buf[sizeof(pe_rope_params) + 32], before[sizeof buf];
    memset(buf, 0x5A, sizeof buf);
    uint32_t s32 = (uint32_t)sz;
    memcpy(buf, &s32, sizeof s32);
    memcpy(before, buf, sizeof buf);
    pe_status st = pe_rope_cache_params(c, (pe_rope_params *)(void *)buf);
    if (sz < oldest) {
      assert_int_equal(st, PE_ERR_INVALID_ARGUMENT);
      assert_memory_equal(buf, before, sizeof buf);
      bad_inputs++;
      continue;
    }
    assert_int_equal(st, PE_OK);
    size_t written = sz < sizeof(pe_rope_params) ? sz : sizeof(pe_rope_params);
    assert_memory_equal(buf + written, before + written, sizeof buf - written);
    pe_rope_params got;
    memcpy(&got, buf, sizeof got);
    assert_int_equal(got.struct_size, (uint32_t)sz);
    assert_int_equal(got.head_dim, 32);
    assert_int_equal(got.rotary_dim, 32);
  }
  pe_rope_cache_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_older_caller_gets_defaults),
      cmocka_unit_test(test_too_small_refused),
      cmocka_unit_test(test_larger_zero_tail_accepted),
      cmocka_unit_test(test_larger_nonzero_tail_refused),
      cmocka_unit_test(test_params_out_writes_only_struct_size),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  printf("test_struct_size: bad inputs tried: %d\n", bad_inputs);
  return rc;
}
