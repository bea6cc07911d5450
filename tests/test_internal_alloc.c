/* test_internal_alloc.c - allocation failure injection at every allocation of
 * every create call. For n = 1, 2, ... the n-th library allocation fails
 * (pe__alloc_fail_after, src/alloc.c) until the call succeeds with no failure
 * injected. Each injected failure must return PE_ERR_OUT_OF_MEMORY with a
 * message, leave *out untouched, leak nothing (this test runs under ASan and
 * valgrind in scripts/ci-reliability.sh), and leave the library working.
 * Prints "faults injected: N" for the CI summary. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/internal.h"

static long faults_injected;

typedef pe_status (*create_fn)(void *ctx, void **out);

/* The library still works: a fresh cache rotates a small tensor. */
static void library_still_works(void) {
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = 8;
  p.max_positions = 16;
  pe_rope_cache *c = NULL;
  assert_int_equal(pe_rope_cache_create(&p, &c), PE_OK);
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  pe_tensor t = {x, PE_F32, {1, 1, 1, 8}, {8, 8, 8, 1}};
  int64_t pos = 3;
  assert_int_equal(pe_apply_rope_qk(c, &t, NULL, &pos, 0, NULL), PE_OK);
  assert_true(x[0] != 1.0f);
  pe_rope_cache_destroy(c);
}

/* Fail allocation n for n = 1.. until the call needs no more than n-1. */
static void inject_every(const char *what, create_fn create, void *ctx, void (*destroy)(void *)) {
  void *const untouched = (void *)(uintptr_t)0xdeadbeef;
  long n;
  for (n = 1; n < 10000; n++) {
    void *out = untouched;
    (void)pe__alloc_fail_after(n);
    pe_status st = create(ctx, &out);
    long allocs = pe__alloc_fail_after(0); /* allocations made by the call */
    if (allocs < n) {
      /* The n-th allocation never came: the call ran to completion. */
      if (st != PE_OK)
        fail_msg("%s: failed with %s without an injected fault: %s", what, pe_status_string(st),
                 pe_last_error());
      assert_ptr_not_equal(out, untouched);
      destroy(out);
      break;
    }
    faults_injected++;
    if (st != PE_ERR_OUT_OF_MEMORY)
      fail_msg("%s: allocation %ld of %ld failed but the call returned %s", what, n, allocs,
               pe_status_string(st));
    assert_ptr_equal(out, untouched);
    assert_true(strlen(pe_last_error()) > 0);
    library_still_works();
  }
  printf("%s: %ld allocations, each failed once\n", what, n - 1);
  assert_true(n > 1); /* every create call allocates */
}

/* ---- pe_rope_cache_create for every scaling type ---- */

typedef struct rope_case {
  pe_rope_params p;
  float factors[2][32];
  double inv[32];
} rope_case;

static pe_status rope_create(void *ctx, void **out) {
  return pe_rope_cache_create(&((rope_case *)ctx)->p, (pe_rope_cache **)out);
}
static void rope_destroy(void *c) { pe_rope_cache_destroy(c); }

static void setup_case(rope_case *rc, pe_rope_scaling s, int64_t max_positions) {
  memset(rc, 0, sizeof *rc);
  pe_rope_params_init(&rc->p);
  rc->p.head_dim = 64;
  rc->p.max_positions = max_positions;
  rc->p.scaling = s;
  rc->p.factor = 4.0;
  rc->p.original_max_positions = 4096;
  rc->p.seq_len = 8192;
  for (int i = 0; i < 32; i++) {
    rc->factors[0][i] = 1.0f + (float)i / 32.0f;
    rc->factors[1][i] = 2.0f + (float)i / 8.0f;
    rc->inv[i] = pow(10000.0, -(double)i / 32.0);
  }
  if (s == PE_ROPE_SCALING_LONGROPE) {
    rc->p.short_factor = rc->factors[0];
    rc->p.long_factor = rc->factors[1];
  }
  if (s == PE_ROPE_SCALING_CUSTOM) rc->p.inv_freq = rc->inv;
  if (s == PE_ROPE_SCALING_YARN) {
    rc->p.mscale = 1.0;
    rc->p.mscale_all_dim = 1.0;
  }
}

static void test_rope_cache_create_every_scaling(void **state) {
  (void)state;
  static const char *const names[] = {"none",  "linear", "ntk",          "dynamic", "yarn",
                                      "longrope", "llama3", "proportional", "custom"};
  for (int s = PE_ROPE_SCALING_NONE; s <= PE_ROPE_SCALING_CUSTOM; s++)
    for (int table = 0; table < 2; table++) {
      rope_case rc;
      setup_case(&rc, (pe_rope_scaling)s, table ? 256 : 0);
      pe_rope_cache *probe = NULL;
      pe_status st = pe_rope_cache_create(&rc.p, &probe);
      /* Every scheme exists: a create that fails without an injected fault
       * is a failure, never a skipped case. */
      if (st != PE_OK)
        fail_msg("pe_rope_cache_create %s %s: %s: %s", names[s], table ? "with table" : "on the fly",
                 pe_status_string(st), pe_last_error());
      pe_rope_cache_destroy(probe);
      char what[96];
      snprintf(what, sizeof what, "pe_rope_cache_create %s %s", names[s],
               table ? "with table" : "on the fly");
      inject_every(what, rope_create, &rc, rope_destroy);
    }
}

/* ---- the config loader ---- */

static const char llama3_config[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 4096, \"num_attention_heads\": 32,"
    " \"max_position_embeddings\": 131072, \"rope_theta\": 500000.0,"
    " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
    " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}";
static const char phi3_config[] =
    "{\"model_type\": \"phi3\", \"hidden_size\": 3072, \"num_attention_heads\": 32,"
    " \"max_position_embeddings\": 131072, \"original_max_position_embeddings\": 4096,"
    " \"rope_theta\": 10000.0, \"partial_rotary_factor\": 0.5,"
    " \"rope_scaling\": {\"type\": \"longrope\","
    " \"short_factor\": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"
    " \"long_factor\": [2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2]}}";

typedef struct hf_case {
  const char *json;
  int64_t max_positions;
} hf_case;

static pe_status hf_create(void *ctx, void **out) {
  hf_case *h = ctx;
  return pe_rope_cache_create_from_hf_config(h->json, strlen(h->json), h->max_positions, 0, 0,
                                             (pe_rope_cache **)out);
}

static void test_create_from_hf_config(void **state) {
  (void)state;
  hf_case cases[] = {{llama3_config, 512}, {llama3_config, 0}, {phi3_config, 64}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pe_rope_cache *probe = NULL;
    pe_status st = hf_create(&cases[i], (void **)&probe);
    if (st != PE_OK)
      fail_msg("config %zu: %s: %s", i, pe_status_string(st), pe_last_error());
    pe_rope_cache_destroy(probe);
    char what[64];
    snprintf(what, sizeof what, "pe_rope_cache_create_from_hf_config case %zu", i);
    inject_every(what, hf_create, &cases[i], rope_destroy);
  }
}

/* ---- the thread pool ---- */

static pe_status pool_create(void *ctx, void **out) {
  return pe_threadpool_create(*(int32_t *)ctx, (pe_threadpool **)out);
}
static void pool_destroy(void *p) { pe_threadpool_destroy(p); }

static void test_threadpool_create(void **state) {
  (void)state;
  const int32_t sizes[] = {1, 2, 4};
  for (size_t i = 0; i < 3; i++) {
    pe_threadpool *probe = NULL;
    pe_status st = pe_threadpool_create(sizes[i], &probe);
    if (st != PE_OK)
      fail_msg("pe_threadpool_create(%d): %s: %s", (int)sizes[i], pe_status_string(st),
               pe_last_error());
    pe_threadpool_destroy(probe);
    char what[64];
    snprintf(what, sizeof what, "pe_threadpool_create(%d)", (int)sizes[i]);
    inject_every(what, pool_create, (void *)&sizes[i], pool_destroy);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rope_cache_create_every_scaling),
      cmocka_unit_test(test_create_from_hf_config),
      cmocka_unit_test(test_threadpool_create),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  printf("test_internal_alloc: faults injected: %ld\n", faults_injected);
  return rc;
}
