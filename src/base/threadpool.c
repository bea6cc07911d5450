/* threadpool.c - a pool of persistent workers placed with hwloc, and the work
 * splitting every in-place entry point goes through (pe__pool_run).
 *
 * Design
 * ------
 * - n_threads - 1 workers are created once, in pe_threadpool_create; the
 *   calling thread of each call runs the first chunk itself, so a pool of N
 *   uses N cores and nothing is created, allocated or locked per call.
 * - A call is cut into contiguous chunks (a few per thread, each a multiple
 *   of the caller's grain), dealt out in contiguous runs: thread i owns run
 *   i, so repeated calls on one tensor keep each part in the same core's
 *   cache. Each run has one atomic claim word (call number, end, next chunk).
 *   The caller publishes the runs, bumps the sequence word of each worker it
 *   wants, then claims chunks like any worker: its own run first, then
 *   whatever is left in the others'. A worker that is late (asleep, or
 *   preempted on a shared machine) therefore costs little: the caller takes
 *   its chunks, and waits only for chunks already claimed. Workers that a
 *   call does not need are not woken.
 * - Waiting (workers for work, the caller for claimed chunks) spins a bounded
 *   number of iterations with a pause instruction, then sleeps on a futex
 *   (Linux) or a condition variable (elsewhere). The waker makes the system
 *   call only when the waiter announced it is asleep: back-to-back calls (the
 *   layers of a prefill) never enter the kernel, and an idle pool sleeps.
 * - Every unit is computed by exactly one thread with the same kernel, and
 *   the kernels' results do not depend on how the range is cut, so results
 *   are bit-identical for any pool size and any interleaving.
 * - Placement (hwloc): workers are bound one per physical core, the cores of
 *   the caller's NUMA node first, starting after the caller's current core
 *   (which is left to the caller), then the rest of the machine; more
 *   threads than cores wrap around. Only CPUs the process may use count:
 *   hwloc's process binding, the union of its threads' CPU masks, so
 *   taskset and cgroup limits are respected. A single-threaded caller that
 *   pinned itself to one CPU before creating the pool therefore gets its
 *   workers on that CPU (as OpenMP runtimes do with the initial thread's
 *   mask): pin after creating the pool. n_threads 0 counts those cores.
 *   Without hwloc (build or run time), threads are not pinned and
 *   n_threads 0 counts the CPUs in the caller's affinity mask.
 * - Calls whose n * bytes_per_unit is below a measured cut-over run on the
 *   calling thread alone (see PE_POOL_MIN_BYTES_HOT / _COLD).
 *
 * Thread-safety
 * -------------
 * - pe_threadpool_create and pe_threadpool_size may be called from any thread.
 * - A pool serves one call at a time. pe__pool_acquire takes an atomic busy
 *   flag; a second thread entering a busy pool gets PE_ERR_BUSY
 *   with nothing written, never a deadlock. Separate pools are independent.
 * - pe_threadpool_destroy must not run concurrently with a call on the same
 *   pool (the caller owns the pool's lifetime, as with any handle).
 * - Workers only run the kernels of the call that was handed to them; they
 *   never call back into the public API.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#define PE_USE_FUTEX 1
#endif

#if defined(PE_HAVE_HWLOC)
#include <hwloc.h>
#endif

#include "base/internal.h"

/* Cut-over: a call moves to the workers only when every thread gets at least
 * this many bytes (read + written). Below it, handing work over costs more
 * than the work. Two figures, because the hand-off costs two very different
 * amounts: a worker still spinning from the previous call answers after a
 * cache-line round trip (~1 us on the KVM guest measured), a sleeping one
 * after a futex wake: on that guest the FUTEX_WAKE call alone takes ~12 us
 * of the caller's time (an IPI through the hypervisor) and the woken thread
 * runs 0.3-0.4 ms later when the machine is loaded. The
 * caller looks at whether the first worker is asleep (one relaxed load) and
 * picks the figure. Consequence: after an idle spell, medium calls stay on
 * the caller until a large call wakes the workers (an isolated medium call
 * between other work loses when split; the figures below say by how much).
 *
 * Measured with
 *     build/bench/pe-bench --suite cutover --reps 21
 * (Llama-3-8B heads, f32, 40 KiB per token, 2-thread pool with the cut-over
 * disabled by PE_POOL_MIN_BYTES=0, against the calling thread alone; hot =
 * back-to-back calls, cold = 2 ms asleep before each call), on the 2-core
 * Xeon (Sapphire/Emerald Rapids, KVM) shared with other jobs, load average
 * 6-7, range over 4 runs of the median speed-up (2 threads / 1 thread):
 *     tokens (total KiB)   2 (80)    8 (320)   16 (640)  24 (960)  32 (1280)  64 (2560)  128 (5120)
 *     hot                  0.19-0.67 0.68-0.84 0.52-0.64 0.70-1.54 1.55-1.66  1.19-1.71  2.38-2.59
 *     cold                 0.15-0.18 0.31-0.33 0.45-0.49 0.47-0.56 0.52-0.69  0.73-1.01  1.17-1.29
 * Hot splitting pays from about 1 MiB per call, cold from 3-5 MiB: hence
 * 512 KiB and 1.5 MiB per thread. A decode step (40 KiB) always stays on the
 * caller. PE_POOL_MIN_BYTES in the environment overrides both at pool
 * creation (0: always split; for that measurement and the tests). */
#define PE_POOL_MIN_BYTES_HOT (INT64_C(512) * 1024)
#define PE_POOL_MIN_BYTES_COLD (INT64_C(1536) * 1024)

/* Spin budget before sleeping. A pause costs ~10 cycles on older x86 and
 * ~140 on Skylake and later, so 4096 of them are ~10-250 us: long enough to
 * bridge the gap between consecutive kernels of one layer, short enough that
 * an idle pool stops burning cores almost at once. */
#define PE_POOL_SPIN 4096

#define PE_POOL_MAX_THREADS 1024

/* Chunks per thread taking part in a call: enough that a late thread's share
 * is taken by the others in pieces, few enough that claiming (one
 * compare-and-swap on a shared line) stays negligible. */
#define PE_POOL_CHUNKS_PER_THREAD 4

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield" ::: "memory");
#else
  atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* ---- sleeping on a 32-bit word ----------------------------------------- */

typedef struct pool_sync {
#if !defined(PE_USE_FUTEX)
  pthread_mutex_t mu;
  pthread_cond_t cv;
#endif
  int unused;
} pool_sync;

/* Sleep while *w == expected (may return spuriously: callers loop). */
static void word_wait(pool_sync *s, _Atomic uint32_t *w, uint32_t expected) {
#if defined(PE_USE_FUTEX)
  (void)s;
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
#else
  pthread_mutex_lock(&s->mu);
  while (atomic_load(w) == expected) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
#endif
}

static void word_wake(pool_sync *s, _Atomic uint32_t *w) {
#if defined(PE_USE_FUTEX)
  (void)s;
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
#else
  /* The lock orders this wake after a waiter's check of the word. */
  pthread_mutex_lock(&s->mu);
  pthread_mutex_unlock(&s->mu);
  pthread_cond_broadcast(&s->cv);
  (void)w;
#endif
}

/* ---- the pool ----------------------------------------------------------- */

/* The chunks of one thread's run: call number << 32 | end << 16 | next. The
 * call number makes a claim read from an earlier call fail. */
typedef struct pool_run {
  _Alignas(64) _Atomic uint64_t claim;
} pool_run;

typedef struct pool_worker {
  atomic_int stop;         /* set before the last seq bump: exit. Atomic: a
                              worker woken late may read it during destroy */
  _Atomic uint32_t seq;    /* bumped to call the worker */
  _Atomic uint32_t asleep; /* 1 while the worker may be in word_wait */
  struct pe_threadpool *pool;
  int32_t index;
  pthread_t thread;
  int started;
#if defined(PE_HAVE_HWLOC)
  hwloc_bitmap_t cpuset; /* NULL: unpinned */
#endif
} __attribute__((aligned(64))) pool_worker;

struct pe_threadpool {
  int32_t n_threads; /* workers + the caller */
  int64_t min_bytes_hot, min_bytes_cold; /* per thread, see the cut-over */
  atomic_int busy;
  uint32_t call_number; /* the caller's; tags the claim words */
  /* The current call: written by the caller before the claim words are
   * published (release), read only by threads that claimed one of its
   * chunks (acquire), and not rewritten before every chunk is done. */
  pe_range_fn fn;
  void *ctx;
  int64_t n, grain, blocks;
  /* call number << 32 | threads << 16 | chunks: which runs to look at. */
  _Alignas(64) _Atomic uint64_t call;
  pool_run *runs; /* n_threads claim words, one cache line each */
  /* Chunks finished: written by every thread, on its own cache line. */
  _Alignas(64) _Atomic uint32_t done;
  _Atomic uint32_t caller_asleep; /* 1 while the caller may be in word_wait */
  _Alignas(64) pool_sync sync;
  pool_worker *workers;           /* n_threads - 1, 64-byte aligned */
  atomic_int pinned;              /* workers bound to a core (diagnostics) */
#if defined(PE_HAVE_HWLOC)
  hwloc_topology_t topo;          /* NULL: hwloc unavailable at run time */
#endif
};

#define PE_POOL_MAX_CHUNKS 0xffff

/* First unit of chunk c of `chunks`, on a grain boundary. */
static int64_t chunk_start(const struct pe_threadpool *p, uint32_t c, uint32_t chunks) {
  if (c >= chunks) return p->n;
  int64_t b = p->blocks / chunks * c + p->blocks % chunks * c / chunks; /* no overflow */
  int64_t u = b * p->grain;
  return u < p->n ? u : p->n;
}

/* Claim and run chunks of the published call until none is left: thread
 * `self`'s own run first, then the others'. */
static void run_chunks(struct pe_threadpool *p, int32_t self) {
  uint64_t call = atomic_load_explicit(&p->call, memory_order_acquire);
  uint32_t number = (uint32_t)(call >> 32), t = (uint32_t)((call >> 16) & 0xffff),
           chunks = (uint32_t)(call & 0xffff);
  for (uint32_t k = 0; k < t; k++) {
    pool_run *r = &p->runs[((uint32_t)self + k) % t];
    uint64_t c = atomic_load_explicit(&r->claim, memory_order_acquire);
    for (;;) {
      uint32_t next = (uint32_t)(c & 0xffff), end = (uint32_t)((c >> 16) & 0xffff);
      if ((uint32_t)(c >> 32) != number || next >= end) break;
      if (!atomic_compare_exchange_weak_explicit(&r->claim, &c, c + 1, memory_order_acq_rel,
                                                 memory_order_acquire))
        continue; /* c now holds the current word */
      p->fn(p->ctx, chunk_start(p, next, chunks), chunk_start(p, next + 1, chunks));
      if (atomic_fetch_add(&p->done, 1) + 1 == chunks && atomic_load(&p->caller_asleep))
        word_wake(&p->sync, &p->done);
      c = atomic_load_explicit(&r->claim, memory_order_acquire);
    }
  }
}

/* Wait until w->seq differs from seen; spin first, then sleep. The asleep
 * flag and seq are both seq_cst: either the waker sees asleep == 1 and wakes,
 * or this thread sees the new seq before sleeping (futex re-checks it too). */
static uint32_t worker_wait(pool_worker *w, uint32_t seen) {
  uint32_t s;
  for (int i = 0; i < PE_POOL_SPIN; i++) {
    if ((s = atomic_load_explicit(&w->seq, memory_order_acquire)) != seen) return s;
    cpu_relax();
  }
  for (;;) {
    atomic_store(&w->asleep, 1);
    if ((s = atomic_load(&w->seq)) != seen) break;
    word_wait(&w->pool->sync, &w->seq, seen);
    if ((s = atomic_load(&w->seq)) != seen) break;
  }
  atomic_store(&w->asleep, 0);
  return s;
}

static void *worker_main(void *arg) {
  pool_worker *w = arg;
#if defined(PE_HAVE_HWLOC)
  /* A failed bind (container, cgroup limits) leaves the thread unpinned. */
  if (w->cpuset && w->pool->topo &&
      hwloc_set_cpubind(w->pool->topo, w->cpuset, HWLOC_CPUBIND_THREAD) == 0)
    atomic_fetch_add(&w->pool->pinned, 1);
#endif
  uint32_t seen = 0;
  for (;;) {
    seen = worker_wait(w, seen);
    if (atomic_load_explicit(&w->stop, memory_order_relaxed)) break;
    run_chunks(w->pool, w->index);
  }
  return NULL;
}

static void command(struct pe_threadpool *p, pool_worker *w) {
  atomic_fetch_add(&w->seq, 1);
  if (atomic_load(&w->asleep)) word_wake(&p->sync, &w->seq);
}

/* Wait until every one of `chunks` chunks is done (the caller has claimed
 * whatever was left, so only chunks other threads are running remain). */
static void wait_chunks(struct pe_threadpool *p, uint32_t chunks) {
  uint32_t v;
  /* The caller is blocked in the call anyway, and what it waits for is a
   * chunk another thread is running: it spins longer than an idle worker,
   * because sleeping here would add a futex wake, and on a loaded machine a
   * wait for a turn on the CPU, to the end of every call. */
  for (int i = 0; i < PE_POOL_SPIN * 16; i++) {
    if (atomic_load_explicit(&p->done, memory_order_acquire) == chunks) return;
    cpu_relax();
  }
  atomic_store(&p->caller_asleep, 1);
  while ((v = atomic_load(&p->done)) != chunks) word_wait(&p->sync, &p->done, v);
  atomic_store(&p->caller_asleep, 0);
}

/* ---- placement ---------------------------------------------------------- */

#if defined(PE_HAVE_HWLOC)
/* Physical cores to place threads on, restricted to the CPUs this process may
 * run on (taskset, cgroups): the cores of the caller's NUMA node first,
 * starting after the caller's current core so the workers leave that one to
 * the caller, then the other cores of the machine. Each entry of sets[] is
 * a new bitmap (the core's CPUs this process may use). Returns the number
 * written (at most max) and the number inside the node in *in_node; 0 if
 * hwloc cannot tell. */
static int hwloc_cores(hwloc_topology_t topo, hwloc_bitmap_t *sets, int max, int *in_node) {
  int n_all = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  hwloc_bitmap_t here = hwloc_bitmap_alloc(), node_set = hwloc_bitmap_alloc(),
                 allowed = hwloc_bitmap_alloc();
  int n = 0;
  *in_node = 0;
  if (n_all <= 0 || !here || !node_set || !allowed) goto done;
  hwloc_const_bitmap_t all = hwloc_topology_get_topology_cpuset(topo);
  if (hwloc_get_cpubind(topo, allowed, HWLOC_CPUBIND_PROCESS) != 0 || !hwloc_bitmap_intersects(allowed, all))
    hwloc_bitmap_copy(allowed, all);
  if (hwloc_get_last_cpu_location(topo, here, HWLOC_CPUBIND_THREAD) != 0 || hwloc_bitmap_iszero(here))
    hwloc_bitmap_copy(here, allowed);
  /* The NUMA node(s) holding the caller's CPU; the whole machine if none. */
  hwloc_obj_t node = NULL;
  while ((node = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, node)) != NULL)
    if (node->cpuset && hwloc_bitmap_intersects(node->cpuset, here))
      hwloc_bitmap_or(node_set, node_set, node->cpuset);
  if (hwloc_bitmap_iszero(node_set)) hwloc_bitmap_copy(node_set, all);

  int first = -1;
  for (int i = 0; i < n_all && first < 0; i++) {
    hwloc_obj_t c = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i);
    if (c && c->cpuset && hwloc_bitmap_intersects(c->cpuset, here)) first = i;
  }
  /* Pass 0: the node's cores from the one after the caller's, wrapping, the
   * caller's own core last; pass 1: every other core. */
  int start = first < 0 ? 0 : first + 1;
  for (int pass = 0; pass < 2; pass++) {
    for (int k = 0; k < n_all && n < max; k++) {
      hwloc_obj_t c = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)((start + k) % n_all));
      if (!c || !c->cpuset || !hwloc_bitmap_intersects(c->cpuset, allowed)) continue;
      if (hwloc_bitmap_isincluded(c->cpuset, node_set) != (pass == 0)) continue;
      hwloc_bitmap_t set = hwloc_bitmap_alloc();
      if (!set) break;
      hwloc_bitmap_and(set, c->cpuset, allowed);
      sets[n++] = set;
    }
    if (pass == 0) *in_node = n;
  }
done:
  hwloc_bitmap_free(here);
  hwloc_bitmap_free(node_set);
  hwloc_bitmap_free(allowed);
  return n;
}
#endif

/* Threads for n_threads == 0 without hwloc: the CPUs this process may use
 * (logical CPUs: without a topology physical cores cannot be told apart). */
static int32_t online_cpus(void) {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int32_t)(n < PE_POOL_MAX_THREADS ? n : PE_POOL_MAX_THREADS) : 1;
}

/* PE_POOL_MIN_BYTES=<bytes per thread>, or -1 when unset or malformed. */
static int64_t min_bytes_from_env(void) {
  const char *s = getenv("PE_POOL_MIN_BYTES");
  if (s && *s) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*end == '\0' && v >= 0) return (int64_t)v;
  }
  return -1;
}

static void pool_free(struct pe_threadpool *p) {
  if (!p) return;
  int32_t nw = p->n_threads - 1;
  if (p->workers) {
    for (int32_t i = 0; i < nw; i++) {
      pool_worker *w = &p->workers[i];
      if (w->started) {
        atomic_store_explicit(&w->stop, 1, memory_order_relaxed);
        command(p, w);
        pthread_join(w->thread, NULL);
      }
#if defined(PE_HAVE_HWLOC)
      if (w->cpuset) hwloc_bitmap_free(w->cpuset);
#endif
    }
    pe__free(p->workers);
  }
  pe__free(p->runs);
#if defined(PE_HAVE_HWLOC)
  if (p->topo) hwloc_topology_destroy(p->topo);
#endif
#if !defined(PE_USE_FUTEX)
  pthread_cond_destroy(&p->sync.cv);
  pthread_mutex_destroy(&p->sync.mu);
#endif
  pe__free(p);
}

PE_API pe_status pe_threadpool_create(int32_t n_threads, pe_threadpool **out) {
  static const char fn[] = "pe_threadpool_create";
  if (!out) return pe__fail(PE_ERR_NULL_POINTER, "%s: out is NULL", fn);
  if (n_threads < 0 || n_threads > PE_POOL_MAX_THREADS)
    return pe__fail(PE_ERR_INVALID_ARGUMENT, "%s: n_threads %d must be in [0, %d] (0 = one per core)",
                    fn, (int)n_threads, PE_POOL_MAX_THREADS);
  struct pe_threadpool *p = pe__aligned_alloc(sizeof *p); /* 64-byte members */
  if (!p) return pe__fail(PE_ERR_OUT_OF_MEMORY, "%s: cannot allocate the pool", fn);
  memset(p, 0, sizeof *p);
  p->n_threads = 1;
  int64_t env_min = min_bytes_from_env();
  p->min_bytes_hot = env_min >= 0 ? env_min : PE_POOL_MIN_BYTES_HOT;
  p->min_bytes_cold = env_min >= 0 ? env_min : PE_POOL_MIN_BYTES_COLD;
#if !defined(PE_USE_FUTEX)
  pthread_mutex_init(&p->sync.mu, NULL);
  pthread_cond_init(&p->sync.cv, NULL);
#endif

  int32_t want = n_threads;
  int n_cores = 0, in_node = 0;
#if defined(PE_HAVE_HWLOC)
  hwloc_bitmap_t cores[PE_POOL_MAX_THREADS];
  /* hwloc failing (no /sys, odd topology) is not an error: threads run unpinned. */
  if (hwloc_topology_init(&p->topo) == 0) {
    if (hwloc_topology_load(p->topo) == 0) {
      n_cores = hwloc_cores(p->topo, cores, PE_POOL_MAX_THREADS, &in_node);
    } else {
      hwloc_topology_destroy(p->topo);
      p->topo = NULL;
    }
  } else {
    p->topo = NULL;
  }
#endif
  (void)n_cores;
  if (want == 0) want = in_node > 0 ? in_node : online_cpus();
  if (want < 1) want = 1;

  int32_t nw = want - 1;
  if (nw > 0) {
    p->workers = pe__aligned_alloc((size_t)nw * sizeof(pool_worker));
    if (p->workers) memset(p->workers, 0, (size_t)nw * sizeof(pool_worker));
    p->runs = pe__aligned_alloc((size_t)want * sizeof(pool_run));
    if (p->runs) memset(p->runs, 0, (size_t)want * sizeof(pool_run));
  }
#if defined(PE_HAVE_HWLOC)
  /* Worker i takes core i of the list (the caller keeps its own, the last of
   * its node); more threads than cores wrap around. */
  for (int32_t i = 0; p->workers && i < nw && n_cores > 0; i++)
    p->workers[i].cpuset = hwloc_bitmap_dup(cores[i % n_cores]);
  for (int i = 0; i < n_cores; i++) hwloc_bitmap_free(cores[i]);
#endif
  if (nw > 0 && (!p->workers || !p->runs)) {
#if defined(PE_HAVE_HWLOC)
    for (int32_t i = 0; p->workers && i < nw; i++)
      if (p->workers[i].cpuset) hwloc_bitmap_free(p->workers[i].cpuset);
#endif
    pool_free(p); /* n_threads is still 1: no worker to stop */
    return pe__fail(PE_ERR_OUT_OF_MEMORY, "%s: cannot allocate %d workers", fn, (int)nw);
  }
  /* n_threads counts the started workers + 1, so that pool_free stops and
   * joins exactly those if a later one cannot be started. */
  for (int32_t i = 0; i < nw; i++) {
    pool_worker *w = &p->workers[i];
    w->pool = p;
    w->index = i + 1;
    int err = pthread_create(&w->thread, NULL, worker_main, w);
    if (err != 0) {
#if defined(PE_HAVE_HWLOC)
      for (int32_t j = i; j < nw; j++)
        if (p->workers[j].cpuset) hwloc_bitmap_free(p->workers[j].cpuset);
#endif
      pool_free(p);
      return pe__fail(PE_ERR_OUT_OF_MEMORY, "%s: cannot start worker thread %d of %d: %s", fn,
                      (int)(i + 1), (int)nw, strerror(err));
    }
    w->started = 1;
    p->n_threads = i + 2;
  }
  *out = p;
  return PE_OK;
}

PE_API void pe_threadpool_destroy(pe_threadpool *p) { pool_free(p); }

PE_API int32_t pe_threadpool_size(const pe_threadpool *p) { return p ? p->n_threads : 1; }

pe_status pe__pool_acquire(const char *fn, pe_threadpool *pool) {
  if (!pool) return PE_OK;
  int expected = 0;
  if (!atomic_compare_exchange_strong_explicit(&pool->busy, &expected, 1, memory_order_acquire,
                                               memory_order_relaxed))
    return pe__fail(PE_ERR_BUSY,
                    "%s: the thread pool is busy with a call from another thread; a pe_threadpool "
                    "runs one call at a time (give each calling thread its own pool)",
                    fn);
  return PE_OK;
}

/* Threads worth using for n units of bytes_per_unit bytes, cut in chunks of
 * at least grain units. */
static int32_t threads_for(const struct pe_threadpool *p, int64_t n, int64_t grain,
                           int64_t bytes_per_unit) {
  int64_t t = p->n_threads;
  int64_t by_grain = (n + grain - 1) / grain;
  if (by_grain < t) t = by_grain;
  if (t <= 1) return 1;
  /* A sleeping first worker means the pool has been idle: waking costs more. */
  int64_t min = atomic_load_explicit(&p->workers[0].asleep, memory_order_relaxed)
                    ? p->min_bytes_cold
                    : p->min_bytes_hot;
  if (min > 0) {
    /* In double: n * bytes_per_unit may exceed int64, and only the order of
     * magnitude matters here. */
    double bpu = bytes_per_unit > 0 ? (double)bytes_per_unit : 1.0;
    double by_bytes = (double)n * bpu / (double)min;
    if (by_bytes < (double)t) t = (int64_t)by_bytes;
  }
  return t < 1 ? 1 : (int32_t)t;
}

void pe__pool_run(pe_threadpool *pool, int64_t n, int64_t grain, int64_t bytes_per_unit,
                  pe_range_fn fn, void *ctx) {
  if (n <= 0) {
    if (pool) atomic_store_explicit(&pool->busy, 0, memory_order_release);
    return;
  }
  if (grain < 1) grain = 1;
  int32_t t = pool ? threads_for(pool, n, grain, bytes_per_unit) : 1;
  if (t <= 1) {
    fn(ctx, 0, n);
    if (pool) atomic_store_explicit(&pool->busy, 0, memory_order_release);
    return;
  }
  /* A few chunks per thread, so that a late worker's share can be taken by
   * the others in pieces; each a multiple of the grain. */
  int64_t blocks = (n + grain - 1) / grain;
  int64_t chunks = (int64_t)t * PE_POOL_CHUNKS_PER_THREAD;
  if (chunks > blocks) chunks = blocks;
  if (chunks > PE_POOL_MAX_CHUNKS) chunks = PE_POOL_MAX_CHUNKS;
  pool->fn = fn;
  pool->ctx = ctx;
  pool->n = n;
  pool->grain = grain;
  pool->blocks = blocks;
  uint32_t number = ++pool->call_number;
  atomic_store_explicit(&pool->done, 0, memory_order_relaxed);
  for (int32_t i = 0; i < t; i++) {
    uint64_t first = (uint64_t)(chunks * i / t), end = (uint64_t)(chunks * (i + 1) / t);
    atomic_store_explicit(&pool->runs[i].claim, (uint64_t)number << 32 | end << 16 | first,
                          memory_order_release);
  }
  atomic_store_explicit(&pool->call, (uint64_t)number << 32 | (uint64_t)t << 16 | (uint64_t)chunks,
                        memory_order_release);
  for (int32_t w = 0; w < t - 1; w++) command(pool, &pool->workers[w]);
  run_chunks(pool, 0);
  wait_chunks(pool, (uint32_t)chunks);
  atomic_store_explicit(&pool->busy, 0, memory_order_release);
}
