/* test_nomalloc.c - no allocation on the apply/add hot paths (posenc.h:
 * "They never allocate, lock or make system calls on their hot path").
 *
 * The allocator is interposed in this executable: malloc, calloc, realloc,
 * free, aligned_alloc, posix_memalign, memalign and valloc are defined here
 * and forward to glibc's __libc_* entry points; while `counting` is set each
 * call is counted, from any thread (pool workers included). Under ASan/TSan
 * the runtime owns those symbols, so the sanitizer's allocation hooks count
 * instead. Caches and pools are created before counting starts; every
 * apply/add/shift/rerotate entry point (and the serving ones: the fused
 * store, QK-norm + RoPE and its cache store, M-RoPE, multi-cache) is then
 * called, with and without a pool of 2
 * threads, on success and on error paths, and must allocate nothing. Each
 * call must also return the status it is meant to (PE_OK, or the error of
 * the error-path cases): a call that fails early would allocate nothing
 * while testing nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "posenc.h"

static atomic_int counting;
static atomic_long n_calls;

/* Who allocated: the caller's address and thread of the first counted calls,
 * printed with dladdr() when the test fails. */
static void *volatile culprit[4];
static volatile long culprit_tid[4];

#define count() count_from(__builtin_return_address(0))
static inline void count_from(void *caller) {
  if (atomic_load_explicit(&counting, memory_order_relaxed)) {
    long i = atomic_fetch_add_explicit(&n_calls, 1, memory_order_relaxed);
    if (i < 4) {
      culprit[i] = caller;
      culprit_tid[i] = (long)syscall(SYS_gettid);
    }
  }
}

static void print_culprits(long n) {
  for (long i = 0; i < n && i < 4; i++) {
    Dl_info info;
    memset(&info, 0, sizeof info);
    dladdr(culprit[i], &info);
    printf("  allocator call %ld from %s (%s+%#lx), thread %ld (main %ld)\n", i,
           info.dli_fname ? info.dli_fname : "?", info.dli_sname ? info.dli_sname : "?",
           (unsigned long)((char *)culprit[i] - (char *)(info.dli_saddr ? info.dli_saddr : info.dli_fbase)),
           culprit_tid[i], (long)getpid());
  }
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PE_SANITIZER_HOOKS 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PE_SANITIZER_HOOKS 1
#endif

#ifdef PE_SANITIZER_HOOKS
/* Declared here: gcc does not install sanitizer/allocator_interface.h, but
 * both its and clang's ASan/TSan runtimes export the function. */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
static void on_malloc(const volatile void *p, size_t n) {
  (void)p;
  (void)n;
  count();
}
static void on_free(const volatile void *p) {
  if (p) count();
}
static void install_counter(void) {
  assert_int_not_equal(__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free), 0);
}
#else
/* glibc's own entry points: forwarding to them avoids dlsym's bootstrap
 * problem (dlsym itself may call calloc). */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);

void *malloc(size_t n) {
  count();
  return __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
  count();
  return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  count();
  return __libc_realloc(p, n);
}
void free(void *p) {
  if (p) count();
  __libc_free(p);
}
void *aligned_alloc(size_t align, size_t n) {
  count();
  return __libc_memalign(align, n);
}
void *memalign(size_t align, size_t n) {
  count();
  return __libc_memalign(align, n);
}
void *valloc(size_t n) {
  count();
  return __libc_valloc(n);
}
int posix_memalign(void **out, size_t align, size_t n) {
  count();
  if (align < sizeof(void *) || (align & (align - 1))) return 22; /* EINVAL */
  void *p = __libc_memalign(align, n);
  if (!p) return 12; /* ENOMEM */
  *out = p;
  return 0;
}
static void install_counter(void) {
  /* Prove the interposition is live: a counted malloc must register. */
  atomic_store(&counting, 1);
  void *volatile p = malloc(16);
  atomic_store(&counting, 0);
  free(p);
  assert_true(atomic_exchange(&n_calls, 0) >= 1);
}
#endif

static void start(void) {
  atomic_store(&n_calls, 0);
  atomic_store(&counting, 1);
}
static long stop(void) {
  atomic_store(&counting, 0);
  return atomic_exchange(&n_calls, 0);
}

#define NO_ALLOC_STATUS(label, want, call)                                                 \
  do {                                                                                     \
    start();                                                                               \
    pe_status st_ = (call);                                                                \
    long n_ = stop();                                                                      \
    if (n_) {                                                                              \
      print_culprits(n_);                                                                  \
      fail_msg("%s (%s): %ld allocator calls", label, pe_status_string(st_), n_);          \
    }                                                                                      \
    if (st_ != (want))                                                                     \
      fail_msg("%s returned %s, expected %s: %s", label, pe_status_string(st_),            \
               pe_status_string(want), pe_last_error());                                   \
    checked++;                                                                             \
  } while (0)
/* A call that must succeed without allocating. */
#define NO_ALLOC(label, call) NO_ALLOC_STATUS(label, PE_OK, call)

static int checked;

typedef struct fixture {
  pe_rope_cache *table, *fly, *other;
  pe_threadpool *pool;
  float *q, *k, *scores, *x, *learned, *t5, *kcache;
  int64_t pos[2 * 64];
  int64_t deltas[2 * 64];
  int64_t slots[2 * 64];     /* fused store: a permutation of 2*64 of 256 slots, some -1 */
  int64_t mpos[3 * 2 * 64];  /* M-RoPE: [3][2][64] */
} fixture;

static void fixture_setup(fixture *f) {
  memset(f, 0, sizeof *f);
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = 128;
  p.max_positions = 1024;
  assert_int_equal(pe_rope_cache_create(&p, &f->table), PE_OK);
  p.max_positions = 0;
  assert_int_equal(pe_rope_cache_create(&p, &f->fly), PE_OK);
  p.scaling = PE_ROPE_SCALING_LINEAR;
  p.factor = 2.0;
  assert_int_equal(pe_rope_cache_create(&p, &f->other), PE_OK);
  assert_int_equal(pe_threadpool_create(2, &f->pool), PE_OK);
  /* q: [2, 8, 64, 128], k: [2, 2, 64, 128]; big enough that a pool splits it. */
  f->q = calloc(2 * 8 * 64 * 128, sizeof(float));
  f->k = calloc(2 * 2 * 64 * 128, sizeof(float));
  f->scores = calloc(2 * 8 * 64 * 64, sizeof(float));
  f->x = calloc(2 * 64 * 128, sizeof(float));
  f->learned = calloc(256 * 128, sizeof(float));
  f->t5 = calloc(32 * 8, sizeof(float));
  /* k_cache: [num_blocks 16, kv_heads 2, block_size 16, 128] = 256 slots. */
  f->kcache = calloc(16 * 2 * 16 * 128, sizeof(float));
  assert_non_null(f->q);
  assert_non_null(f->k);
  assert_non_null(f->scores);
  assert_non_null(f->x);
  assert_non_null(f->learned);
  assert_non_null(f->t5);
  assert_non_null(f->kcache);
  for (int i = 0; i < 2 * 64; i++) {
    f->pos[i] = 3 + i % 64;
    f->deltas[i] = (i % 7) - 3;
    f->slots[i] = i % 9 == 4 ? -1 : (int64_t)((i * 37) % 256); /* 37 odd: distinct */
  }
  for (int a = 0; a < 3; a++)
    for (int i = 0; i < 2 * 64; i++) f->mpos[a * 128 + i] = (i % 64) + 2 * a;
  /* Pool workers pin themselves (hwloc allocates) after pe_threadpool_create
   * has returned, and nothing in the API lets a caller wait for that. Calls
   * that every worker takes part in, then a pause, let it finish, so the
   * counts below see only the calls themselves (reported as a finding). */
  {
    pe_tensor q = {f->q, PE_F32, {2, 8, 64, 128}, {8 * 64 * 128, 64 * 128, 128, 1}};
    for (int i = 0; i < 4; i++)
      assert_int_equal(pe_apply_rope_qk(f->table, &q, NULL, NULL, 0, f->pool), PE_OK);
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

static void fixture_teardown(fixture *f) {
  pe_rope_cache_destroy(f->table);
  pe_rope_cache_destroy(f->fly);
  pe_rope_cache_destroy(f->other);
  pe_threadpool_destroy(f->pool);
  free(f->q);
  free(f->k);
  free(f->scores);
  free(f->x);
  free(f->learned);
  free(f->t5);
  free(f->kcache);
}

static pe_tensor tensor(void *data, pe_dtype dt, int64_t b, int64_t h, int64_t t, int64_t d) {
  pe_tensor x = {data, dt, {b, h, t, d}, {h * t * d, t * d, d, 1}};
  return x;
}

static void run_all(fixture *f, pe_threadpool *pool) {
  static const pe_dtype dts[] = {PE_F32, PE_F16, PE_BF16};
  for (int di = 0; di < 3; di++) {
    pe_dtype dt = dts[di];
    pe_tensor q = tensor(f->q, dt, 2, 8, 64, 128), k = tensor(f->k, dt, 2, 2, 64, 128);
    NO_ALLOC("apply q,k table", pe_apply_rope_qk(f->table, &q, &k, f->pos, 0, pool));
    NO_ALLOC("apply q,k on the fly", pe_apply_rope_qk(f->fly, &q, &k, NULL, 0, pool));
    NO_ALLOC("apply k inverse", pe_apply_rope_qk(f->table, NULL, &k, f->pos, PE_ROPE_INVERSE, pool));
    NO_ALLOC("shift k", pe_rope_shift_k(f->table, &k, f->deltas, pool));
    NO_ALLOC("rerotate k", pe_rope_rerotate_k(f->table, f->other, &k, f->pos, pool));
    pe_tensor s = tensor(f->scores, dt, 2, 8, 64, 64);
    NO_ALLOC("alibi", pe_alibi_add_bias(&s, NULL, NULL, PE_MASK_CAUSAL, pool));
    NO_ALLOC("alibi positions", pe_alibi_add_bias(&s, NULL, f->pos, 0, pool));
    NO_ALLOC("t5", pe_t5_add_bias(&s, f->t5, 1, 32, 128, NULL, 0, pool));
    pe_tensor x = tensor(f->x, dt, 2, 1, 64, 128);
    NO_ALLOC("sinusoidal", pe_sinusoidal_add(&x, f->pos, 10000.0, 0, pool));
    NO_ALLOC("sinusoidal concat", pe_sinusoidal_add(&x, NULL, 10000.0, PE_SINUSOIDAL_CONCAT, pool));
    pe_tensor tab = tensor(f->learned, PE_F32, 1, 1, 256, 128);
    NO_ALLOC("learned", pe_learned_add(&x, &tab, f->pos, pool));

    /* Serving entry points. The cache's dtype need not be k's: every one. */
    for (int ci = 0; ci < 3; ci++) {
      pe_tensor kc = tensor(f->kcache, dts[ci], 16, 2, 16, 128);
      NO_ALLOC("store table", pe_apply_rope_qk_store(f->table, &q, &k, &kc, f->slots, f->pos, 0, pool));
      NO_ALLOC("store on the fly, no q",
               pe_apply_rope_qk_store(f->fly, NULL, &k, &kc, f->slots, NULL, PE_ROPE_INVERSE, pool));
    }
    /* QK-norm + RoPE (+ k and v into the caches): v read from the learned
     * table's buffer, the v cache in the scores' buffer (both big enough). */
    static float qw[8 * 128], kw[2 * 128];
    for (int i = 0; i < 8 * 128; i++) qw[i] = 1.0f + (float)(i % 5) / 8;
    for (int i = 0; i < 2 * 128; i++) kw[i] = (float)(i % 3) / 4;
    pe_tensor v = tensor(f->learned, dt, 2, 2, 64, 128);
    for (int kind = 0; kind < 4; kind++)
      for (int scope = 0; scope < 2; scope++) {
        pe_qk_norm nm;
        pe_qk_norm_init(&nm);
        nm.kind = (pe_qk_norm_kind)kind;
        nm.scope = (pe_qk_norm_scope)scope;
        int weighted = kind == PE_QK_NORM_RMS || kind == PE_QK_NORM_RMS_UNIT_OFFSET;
        nm.q_weight = weighted ? qw : NULL;
        nm.k_weight = weighted ? kw : NULL;
        NO_ALLOC("qk_norm_rope", pe_qk_norm_rope(f->table, &nm, &q, &k, f->pos, 0, pool));
        pe_tensor kc = tensor(f->kcache, dts[(di + kind) % 3], 16, 2, 16, 128);
        pe_tensor vc = tensor(f->scores, dts[(di + scope) % 3], 16, 2, 16, 128);
        pe_kv_cache kv;
        pe_kv_cache_init(&kv);
        kv.k = &kc;
        kv.v = &vc;
        NO_ALLOC("qk_norm_rope_store",
                 pe_qk_norm_rope_store(f->fly, &nm, &q, &k, &v, &kv, f->slots, f->pos, 0, pool));
        nm.eps = -1.0f;
        NO_ALLOC_STATUS("qk_norm_rope_store bad eps", PE_ERR_INVALID_ARGUMENT,
                        pe_qk_norm_rope_store(f->fly, &nm, &q, &k, &v, &kv, f->slots, f->pos, 0,
                                              pool));
      }
    static const int32_t section[3] = {16, 24, 24}; /* Qwen2-VL: sums to 64 */
    NO_ALLOC("mrope", pe_apply_mrope_qk(f->table, &q, &k, f->mpos, section, 0, pool));
    NO_ALLOC("mrope interleaved on the fly",
             pe_apply_mrope_qk(f->fly, &q, NULL, f->mpos, section, PE_ROPE_MROPE_INTERLEAVED, pool));
    NO_ALLOC("mrope NULL positions", pe_apply_mrope_qk(f->fly, NULL, &k, NULL, section, 0, pool));
    uint8_t axis_map[64];
    for (int i = 0; i < 64; i++) axis_map[i] = (uint8_t)(i % 3);
    NO_ALLOC("axes table", pe_apply_rope_axes_qk(f->table, &q, &k, f->mpos, 3, axis_map, 0, pool));
    NO_ALLOC("axes on the fly inverse",
             pe_apply_rope_axes_qk(f->fly, &q, NULL, f->mpos, 3, axis_map, PE_ROPE_INVERSE, pool));
    NO_ALLOC("axes NULL positions", pe_apply_rope_axes_qk(f->fly, NULL, &k, NULL, 3, axis_map, 0, pool));
    NO_ALLOC("axis map sections", pe_axis_map_sections(section, 3, 64, axis_map));
    NO_ALLOC("axis map interleaved", pe_axis_map_interleaved(section, 3, 64, axis_map));
    NO_ALLOC("axis map ernie", pe_axis_map_ernie45_vl(20, 64, axis_map));
    const pe_rope_cache *caches[3] = {f->table, f->fly, f->other};
    const int32_t index[2] = {2, 0};
    NO_ALLOC("multi", pe_apply_rope_qk_multi(caches, 3, index, &q, &k, f->pos, 0, pool));
    NO_ALLOC("multi one cache", pe_apply_rope_qk_multi(caches + 1, 1, NULL, &q, &k, NULL,
                                                       PE_ROPE_INVERSE, pool));
    /* Quantized caches (byte tensors: strides in bytes): the fused store,
     * the read back and the position operations on the cache. */
    static const uint32_t fmts[3] = {PE_KV_FP8_E4M3, PE_KV_FP8_E5M2, PE_KV_Q8_0};
    static float kscale = 0.05f, vscale = 3.0f;
    for (int fi = 0; fi < 3; fi++) {
      uint32_t kq = fmts[fi], vq = fmts[(fi + 1) % 3];
      int64_t krb = kq == PE_KV_Q8_0 ? 136 : 128, vrb = vq == PE_KV_Q8_0 ? 136 : 128;
      pe_tensor kc = {f->kcache, PE_F32, {16, 2, 16, 128}, {2 * 16 * krb, 16 * krb, krb, 1}};
      pe_tensor vc = {f->scores, PE_F32, {16, 2, 16, 128}, {2 * 16 * vrb, 16 * vrb, vrb, 1}};
      pe_kv_cache kv;
      pe_kv_cache_init(&kv);
      kv.k = &kc, kv.v = &vc, kv.k_quant = kq, kv.v_quant = vq;
      kv.k_scale = kq == PE_KV_Q8_0 ? NULL : &kscale;
      kv.v_scale = vq == PE_KV_Q8_0 ? NULL : &vscale;
      pe_qk_norm nm;
      pe_qk_norm_init(&nm);
      nm.kind = PE_QK_NORM_L2;
      NO_ALLOC("qk_norm_rope_store quantized",
               pe_qk_norm_rope_store(f->table, &nm, &q, &k, &v, &kv, f->slots, f->pos, 0, pool));
      pe_tensor ko = tensor(f->x, dt, 2, 2, 32, 128);
      pe_tensor vo = tensor(f->learned, dt, 2, 2, 32, 128);
      NO_ALLOC("kv_read", pe_kv_read(&kv, &ko, &vo, f->slots));
      int64_t sl[64];
      for (int i = 0; i < 64; i++) sl[i] = (i * 37) % 256;
      NO_ALLOC("shift k cache", pe_rope_shift_k_cache(f->table, &kv, sl, f->deltas, 64, pool));
      NO_ALLOC("rerotate k cache",
               pe_rope_rerotate_k_cache(f->table, f->other, &kv, sl, f->pos, 64, pool));
      sl[9] = sl[3];
      NO_ALLOC_STATUS("shift k cache duplicate slot", PE_ERR_INVALID_ARGUMENT,
                      pe_rope_shift_k_cache(f->table, &kv, sl, f->deltas, 64, pool));
      kv.k_scale = kq == PE_KV_Q8_0 ? &kscale : NULL;
      NO_ALLOC_STATUS("qk_norm_rope_store bad scale",
                      kq == PE_KV_Q8_0 ? PE_ERR_INVALID_ARGUMENT : PE_ERR_NULL_POINTER,
                      pe_qk_norm_rope_store(f->table, &nm, &q, &k, &v, &kv, f->slots, f->pos, 0, pool));
    }
  }
  /* Error paths format a message: still no allocation. */
  pe_tensor q = tensor(f->q, PE_F32, 2, 8, 64, 128);
  int64_t bad[2 * 64];
  memcpy(bad, f->pos, sizeof bad);
  bad[77] = -5;
  NO_ALLOC_STATUS("apply bad position", PE_ERR_POSITION_OUT_OF_RANGE,
                  pe_apply_rope_qk(f->table, &q, NULL, bad, 0, pool));
  pe_tensor wrong = tensor(f->q, PE_F32, 2, 8, 64, 64);
  NO_ALLOC_STATUS("apply wrong head_dim", PE_ERR_SHAPE,
                  pe_apply_rope_qk(f->table, &wrong, NULL, NULL, 0, pool));
  NO_ALLOC_STATUS("shift NULL deltas", PE_ERR_NULL_POINTER, pe_rope_shift_k(f->table, &q, NULL, pool));
  pe_tensor k = tensor(f->k, PE_F32, 2, 2, 64, 128), kc = tensor(f->kcache, PE_F32, 16, 2, 16, 128);
  int64_t dup[2 * 64];
  memcpy(dup, f->slots, sizeof dup);
  dup[100] = dup[3];
  NO_ALLOC_STATUS("store duplicate slot", PE_ERR_INVALID_ARGUMENT,
                  pe_apply_rope_qk_store(f->table, &q, &k, &kc, dup, f->pos, 0, pool));
  dup[100] = 256;
  NO_ALLOC_STATUS("store slot past the cache", PE_ERR_INVALID_ARGUMENT,
                  pe_apply_rope_qk_store(f->table, &q, &k, &kc, dup, f->pos, 0, pool));
  int64_t mbad[3 * 2 * 64];
  memcpy(mbad, f->mpos, sizeof mbad);
  mbad[2 * 128 + 5] = 1024; /* width axis past the table */
  static const int32_t section[3] = {16, 24, 24}, bad_section[3] = {16, 24, 25};
  NO_ALLOC_STATUS("mrope position past the table", PE_ERR_POSITION_OUT_OF_RANGE,
                  pe_apply_mrope_qk(f->table, &q, &k, mbad, section, 0, pool));
  NO_ALLOC_STATUS("mrope bad section", PE_ERR_INVALID_ARGUMENT,
                  pe_apply_mrope_qk(f->table, &q, &k, f->mpos, bad_section, 0, pool));
  uint8_t bad_map[64] = {0};
  bad_map[40] = 3;
  NO_ALLOC_STATUS("axes map entry >= n_axes", PE_ERR_INVALID_ARGUMENT,
                  pe_apply_rope_axes_qk(f->table, &q, &k, f->mpos, 3, bad_map, 0, pool));
  bad_map[40] = 2;
  NO_ALLOC_STATUS("axes position past the table", PE_ERR_POSITION_OUT_OF_RANGE,
                  pe_apply_rope_axes_qk(f->table, &q, &k, mbad, 3, bad_map, 0, pool));
  const pe_rope_cache *caches[2] = {f->table, f->fly};
  const int32_t bad_index[2] = {0, 2};
  NO_ALLOC_STATUS("multi bad cache_index", PE_ERR_INVALID_ARGUMENT,
                  pe_apply_rope_qk_multi(caches, 2, bad_index, &q, &k, f->pos, 0, pool));
}

static void test_no_allocation_without_pool(void **state) {
  fixture *f = *state;
  install_counter();
  run_all(f, NULL);
}

static void test_no_allocation_with_pool(void **state) {
  fixture *f = *state;
  assert_non_null(f->pool);
  install_counter();
  run_all(f, f->pool);
}

static int setup(void **state) {
  static fixture f;
  fixture_setup(&f);
  *state = &f;
  return 0;
}
static int teardown(void **state) {
  fixture_teardown(*state);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_allocation_without_pool),
      cmocka_unit_test(test_no_allocation_with_pool),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  printf("test_nomalloc: %d calls checked, 0 allocations allowed\n", checked);
  return rc;
}
