/* test_concurrency.c - the header's thread-safety promises, under TSan in
 * scripts/ci-reliability.sh:
 *   - one pe_rope_cache used by many threads at once (apply, inverse, shift,
 *     rerotate, the fused store into a per-thread k_cache, M-RoPE, the
 *     multi-cache call, accessors, the M-RoPE config parser), each on its own
 *     tensors: results bit-identical to a serial run;
 *   - one pool shared by many threads: a call either runs or is refused with
 *     PE_ERR_BUSY having written nothing - never a
 *     deadlock, never a mixed result;
 *   - pe_last_error() is per thread. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "posenc.h"

#include "test_util.h"

#define N_THREADS 8
#define ROUNDS 20
#define B 2
#define HQ 4
#define HK 2
#define T 16
#define D 64

typedef struct work {
  int id;
  const pe_rope_cache *table, *fly;
  pe_threadpool *pool;         /* shared by every thread, or NULL */
  float q[B * HQ * T * D], k[B * HK * T * D];
  float kc[4 * HK * 16 * D];   /* k_cache [4 blocks, HK, block_size 16, D] */
  int64_t pos[B * T], deltas[B * T], slots[B * T], mpos[3 * B * T];
  long busy;                   /* refusals of the shared pool */
  int failed;
  char why[256];
} work;

static void fill(work *w, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < sizeof w->q / sizeof w->q[0]; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    w->q[i] = (float)((int64_t)(s >> 40) - (1 << 23)) / (float)(1 << 22);
  }
  for (size_t i = 0; i < sizeof w->k / sizeof w->k[0]; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    w->k[i] = (float)((int64_t)(s >> 40) - (1 << 23)) / (float)(1 << 22);
  }
  for (int i = 0; i < B * T; i++) {
    w->pos[i] = (int64_t)((seed * 131 + (uint64_t)i * 7) % 1000);
    w->deltas[i] = (int64_t)(i % 9) - 4;
    /* 32 distinct slots of 64, and one padding token */
    w->slots[i] = i == 5 ? -1 : (int64_t)((seed + (uint64_t)i * 3) % 64);
  }
  for (int a = 0; a < 3; a++)
    for (int i = 0; i < B * T; i++) w->mpos[a * B * T + i] = (w->pos[i] + a * 17) % 1000;
  memset(w->kc, 0, sizeof w->kc);
}

static void set_fail(work *w, const char *what, pe_status st) {
  if (w->failed) return;
  w->failed = 1;
  snprintf(w->why, sizeof w->why, "thread %d: %s returned %s: %s", w->id, what,
           pe_status_string(st), pe_last_error());
}

/* With a shared pool, a busy refusal must leave the tensors untouched; the
 * call is then repeated. */
#define CALL(w, what, expr, snapshot_a, snapshot_b)                                      \
  do {                                                                                  \
    memcpy(snap_c, (w)->kc, sizeof (w)->kc);                                            \
    for (;;) {                                                                          \
      pe_status st_ = (expr);                                                           \
      if (st_ == PE_OK) break;                                                          \
      if (st_ == PE_ERR_BUSY && (w)->pool &&                                            \
          !memcmp((w)->q, snapshot_a, sizeof (w)->q) &&                                 \
          !memcmp((w)->k, snapshot_b, sizeof (w)->k) &&                                 \
          !memcmp((w)->kc, snap_c, sizeof (w)->kc)) {                                   \
        (w)->busy++;                                                                    \
        continue;                                                                       \
      }                                                                                 \
      set_fail(w, what, st_);                                                           \
      return;                                                                           \
    }                                                                                   \
  } while (0)

static void run_sequence(work *w) {
  /* Per-thread snapshots (busy refusals are checked against them). */
  float *snap_q = malloc(sizeof w->q), *snap_k = malloc(sizeof w->k), *snap_c = malloc(sizeof w->kc);
  if (!snap_q || !snap_k || !snap_c) {
    set_fail(w, "malloc", PE_ERR_OUT_OF_MEMORY);
    free(snap_q);
    free(snap_k);
    free(snap_c);
    return;
  }
  pe_tensor kc = {w->kc, PE_F32, {4, HK, 16, D}, {HK * 16 * D, 16 * D, D, 1}};
  const pe_rope_cache *caches[2] = {w->table, w->fly};
  const int32_t index[B] = {1, 0};
  static const int32_t section[3] = {16, 8, 8}; /* sums to D/2 */
  static const char qwen2_vl[] =
      "{\"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [16, 24, 24]}}";
  pe_tensor q = {w->q, PE_F32, {B, HQ, T, D}, {HQ * T * D, T * D, D, 1}};
  pe_tensor k = {w->k, PE_F32, {B, HK, T, D}, {HK * T * D, T * D, D, 1}};
  pe_status st_sec;
  for (int r = 0; r < ROUNDS; r++) {
    memcpy(snap_q, w->q, sizeof w->q);
    memcpy(snap_k, w->k, sizeof w->k);
    CALL(w, "apply", pe_apply_rope_qk(w->table, &q, &k, w->pos, 0, w->pool), snap_q, snap_k);
    memcpy(snap_q, w->q, sizeof w->q);
    memcpy(snap_k, w->k, sizeof w->k);
    CALL(w, "apply on the fly", pe_apply_rope_qk(w->fly, &q, NULL, w->pos, PE_ROPE_INVERSE, w->pool),
         snap_q, snap_k);
    memcpy(snap_q, w->q, sizeof w->q);
    memcpy(snap_k, w->k, sizeof w->k);
    CALL(w, "shift", pe_rope_shift_k(w->table, &k, w->deltas, w->pool), snap_q, snap_k);
    memcpy(snap_q, w->q, sizeof w->q);
    memcpy(snap_k, w->k, sizeof w->k);
    CALL(w, "rerotate", pe_rope_rerotate_k(w->table, w->fly, &k, w->pos, w->pool), snap_q, snap_k);
    memcpy(snap_q, w->q, sizeof w->q);
    memcpy(snap_k, w->k, sizeof w->k);
    CALL(w, "store", pe_apply_rope_qk_store(w->table, &q, &k, &kc, w->slots, w->pos, 0, w->pool),
         snap_q, snap_k);
    memcpy(snap_q, w->q, sizeof w->q);
    memcpy(snap_k, w->k, sizeof w->k);
    CALL(w, "mrope", pe_apply_mrope_qk(w->table, &q, &k, w->mpos, section,
                                       r & 1 ? PE_ROPE_MROPE_INTERLEAVED : 0, w->pool),
         snap_q, snap_k);
    memcpy(snap_q, w->q, sizeof w->q);
    memcpy(snap_k, w->k, sizeof w->k);
    CALL(w, "multi", pe_apply_rope_qk_multi(caches, 2, index, &q, &k, w->pos, 0, w->pool), snap_q,
         snap_k);
    int32_t sec[3] = {0, 0, 0};
    uint32_t sflags = 7;
    st_sec = pe_mrope_section_from_hf_config(qwen2_vl, sizeof qwen2_vl - 1, sec, &sflags);
    if (st_sec != PE_OK || sec[0] != 16 || sec[1] != 24 || sec[2] != 24 || sflags != 0)
      set_fail(w, "pe_mrope_section_from_hf_config", st_sec);
    /* Accessors read the same cache meanwhile. */
    float cs[D / 2], sn[D / 2];
    pe_status st = pe_rope_cache_cos_sin(w->table, w->pos[r % (B * T)], cs, sn);
    if (st != PE_OK) set_fail(w, "cos_sin", st);
    /* A per-thread error message. */
    int64_t bad = -1000 - w->id;
    pe_tensor one = {w->q, PE_F32, {1, 1, 1, D}, {D, D, D, 1}};
    if (pe_apply_rope_qk(w->table, &one, NULL, &bad, 0, NULL) != PE_ERR_POSITION_OUT_OF_RANGE)
      set_fail(w, "negative position", PE_OK);
    char want[32];
    snprintf(want, sizeof want, "%lld", (long long)bad);
    if (!strstr(pe_last_error(), want)) {
      set_fail(w, "pe_last_error() of another thread", PE_OK);
    }
  }
  free(snap_q);
  free(snap_k);
  free(snap_c);
}

static void *thread_main(void *arg) {
  run_sequence(arg);
  return NULL;
}

static void run_threads(work *ws, int n) {
  pthread_t th[N_THREADS];
  for (int i = 0; i < n; i++) assert_int_equal(pthread_create(&th[i], NULL, thread_main, &ws[i]), 0);
  for (int i = 0; i < n; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
  for (int i = 0; i < n; i++)
    if (ws[i].failed) fail_msg("%s", ws[i].why);
}

static pe_rope_cache *cache(int64_t max_positions, pe_rope_scaling s) {
  pe_rope_params p = rope_params(D, 0, PE_ROPE_NEOX, 10000.0, max_positions);
  p.scaling = s;
  p.factor = 2.0;
  return new_cache(&p);
}

/* Serial reference, then the same work on N_THREADS threads at once. */
static void check_against_serial(pe_threadpool *shared_pool, pe_threadpool *ref_pool) {
  pe_rope_cache *table = cache(1024, PE_ROPE_SCALING_NONE), *fly = cache(0, PE_ROPE_SCALING_LINEAR);
  work *ref = calloc(N_THREADS, sizeof *ref), *par = calloc(N_THREADS, sizeof *par);
  assert_non_null(ref);
  assert_non_null(par);
  for (int i = 0; i < N_THREADS; i++) {
    ref[i].id = par[i].id = i;
    ref[i].table = par[i].table = table;
    ref[i].fly = par[i].fly = fly;
    ref[i].pool = ref_pool;
    par[i].pool = shared_pool;
    fill(&ref[i], (uint64_t)i + 1);
    fill(&par[i], (uint64_t)i + 1);
  }
  for (int i = 0; i < N_THREADS; i++) {
    run_sequence(&ref[i]);
    if (ref[i].failed) fail_msg("%s", ref[i].why);
  }
  run_threads(par, N_THREADS);
  long busy = 0;
  for (int i = 0; i < N_THREADS; i++) {
    assert_memory_equal(par[i].q, ref[i].q, sizeof ref[i].q);
    assert_memory_equal(par[i].k, ref[i].k, sizeof ref[i].k);
    assert_memory_equal(par[i].kc, ref[i].kc, sizeof ref[i].kc);
    busy += par[i].busy;
  }
  if (shared_pool) printf("shared pool: %ld busy refusals, each retried\n", busy);
  free(ref);
  free(par);
  pe_rope_cache_destroy(table);
  pe_rope_cache_destroy(fly);
}

static void test_shared_cache_no_pool(void **state) {
  (void)state;
  check_against_serial(NULL, NULL);
}

/* Results must not depend on the pool, and a pool shared by 8 threads
 * either runs a call or refuses it cleanly. */
static void test_shared_cache_shared_pool(void **state) {
  (void)state;
  pe_threadpool *pool = NULL;
  assert_int_equal(pe_threadpool_create(2, &pool), PE_OK);
  check_against_serial(pool, NULL);
  pe_threadpool_destroy(pool);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shared_cache_no_pool),
      cmocka_unit_test(test_shared_cache_shared_pool),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
