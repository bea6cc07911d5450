/* measure.c - how pe-bench measures: the clock, the statistics of the
 * samples, the disturbed-run detector, the bound and the compute floor
 * sampled interleaved with the kernel (and their thread team), the
 * library's pools, the buffers every suite fills, and the result rows the
 * report prints. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pe_bench.h"

/* ------------------------------------------------------------------------ */
/* time, statistics, progress                                               */
/* ------------------------------------------------------------------------ */

double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Quantile q of sorted v[0..n): linear interpolation between the samples
 * at ranks floor and ceil of q*(n-1) (numpy.percentile's default). */
static double quantile(const double *v, int n, double q) {
  double at = q * (n - 1);
  int i = (int)at;
  return i + 1 < n ? v[i] + (at - i) * (v[i + 1] - v[i]) : v[n - 1];
}

stats summarise(double *v, int n) {
  stats s = NO_STATS;
  if (n <= 0) return s;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  s.min = v[0];
  s.max = v[n - 1];
  s.med = quantile(v, n, 0.5);
  s.p25 = quantile(v, n, 0.25);
  s.p75 = quantile(v, n, 0.75);
  return s;
}

double run_start;
static int progress_shown;

void progress(const char *fmt, ...) {
  if (now_ns() - run_start < 1e9) return;
  char line[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (isatty(2))
    fprintf(stderr, "\r\033[K%s", line);
  else
    fprintf(stderr, "%s\n", line);
  progress_shown = 1;
}

void progress_done(void) {
  if (progress_shown && isatty(2)) fprintf(stderr, "\r\033[K");
}

/* ------------------------------------------------------------------------ */
/* a team of threads for the multi-threaded bound                           */
/* ------------------------------------------------------------------------ */

typedef void (*team_fn)(void *arg, int index, int n);

typedef struct team {
  int n;
  pthread_t th[MAX_THREADS];
  _Atomic unsigned gen;
  atomic_int done;
  team_fn fn;
  void *arg;
  int stop;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int index_next;
} team;

static team *teams[MAX_THREADS + 1];

typedef struct team_arg {
  team *t;
  int index;
} team_arg;

static team_arg team_args[MAX_THREADS + 1][MAX_THREADS];

/* Team members spin briefly between samples, then sleep on the condition
 * variable, so that they do not take a core from the library's pool while
 * the kernel is measured. */
static void *team_main(void *p) {
  team_arg *ta = p;
  team *t = ta->t;
  unsigned seen = 0;
  for (;;) {
    unsigned g;
    int spins = 0;
    while ((g = atomic_load(&t->gen)) == seen && spins < 2000) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      spins++;
    }
    if (g == seen) {
      pthread_mutex_lock(&t->mu);
      while ((g = atomic_load(&t->gen)) == seen) pthread_cond_wait(&t->cv, &t->mu);
      pthread_mutex_unlock(&t->mu);
    }
    seen = g;
    if (t->stop) break;
    t->fn(t->arg, ta->index, t->n);
    atomic_fetch_add(&t->done, 1);
  }
  return NULL;
}

/* CPUs a team member may be pinned to: the process's CPUs other than the
 * one the caller runs on (filled in main; empty: team threads unpinned). */
int pb_team_cpus[MAX_THREADS * 4], pb_n_team_cpus;

static team *team_get(int n) {
  if (teams[n]) return teams[n];
  team *t = calloc(1, sizeof *t);
  if (!t) abort();
  t->n = n;
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, NULL);
  for (int i = 1; i < n; i++) {
    team_args[n][i] = (team_arg){t, i};
    if (pthread_create(&t->th[i], NULL, team_main, &team_args[n][i]) != 0) abort();
    if (pb_n_team_cpus > 0) {
      /* Pinned, so that a member never shares the caller's core: the bound
       * is the machine's, not the scheduler's. */
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(pb_team_cpus[(i - 1) % pb_n_team_cpus], &set);
      pthread_setaffinity_np(t->th[i], sizeof set, &set);
    }
  }
  teams[n] = t;
  return t;
}

static void team_run(team *t, team_fn fn, void *arg) {
  t->fn = fn;
  t->arg = arg;
  atomic_store(&t->done, 0);
  pthread_mutex_lock(&t->mu);
  atomic_fetch_add(&t->gen, 1);
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
  fn(arg, 0, t->n);
  while (atomic_load(&t->done) < t->n - 1) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

void team_prepare(int n) {
  if (n > 1) team_get(n);
}

void teams_stop(void) {
  for (int n = 2; n <= MAX_THREADS; n++) {
    team *t = teams[n];
    if (!t) continue;
    t->stop = 1;
    pthread_mutex_lock(&t->mu);
    atomic_fetch_add(&t->gen, 1);
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    for (int i = 1; i < n; i++) pthread_join(t->th[i], NULL);
    free(t);
    teams[n] = NULL;
  }
}

/* ------------------------------------------------------------------------ */
/* cases, measurement and results                                           */
/* ------------------------------------------------------------------------ */

result *results;
int n_results;
static int cap_results;

result *new_result(const bench_case *c) {
  if (n_results == cap_results) {
    cap_results = cap_results ? 2 * cap_results : 64;
    results = realloc(results, (size_t)cap_results * sizeof *results);
    if (!results) abort();
  }
  result *r = &results[n_results++];
  memset(r, 0, sizeof *r);
  snprintf(r->suite, sizeof r->suite, "%s", c->suite);
  snprintf(r->name, sizeof r->name, "%s", c->name);
  snprintf(r->shape, sizeof r->shape, "%s", c->shape);
  snprintf(r->dtype, sizeof r->dtype, "%s", c->dtype >= 0 ? dtype_name(c->dtype) : "-");
  snprintf(r->isa, sizeof r->isa, "%s", pe_isa_name());
  r->threads = c->threads;
  r->bytes = c->bytes;
  r->ns = r->bound = r->textbook = r->textbook_native = r->floor = NO_STATS;
  r->run_queue = NAN;
  r->speedup_1t = NAN;
  r->load_max = r->wait_frac = NAN;
  return r;
}

typedef struct probe_job {
  const bench_case *c;
  int64_t iters;
  int streams; /* pb_bound_rmw_streams rather than one stream */
  int64_t first; /* --fresh-cache: the walk's first destination set */
} probe_job;

static void probe_part(void *arg, int index, int n) {
  const probe_job *j = arg;
  for (int64_t it = 0; it < j->iters; it++)
    for (int p = 0; p < j->c->n_probe; p++) {
      pb_rows r = j->c->probe[p];
      if (r.dst && r.dst_sets > 1) r.dst += (j->first + it) % r.dst_sets * r.dst_span;
      if (j->streams)
        pb_bound_rmw_streams(&r, index, n, 0.999f, 0.001f);
      else
        pb_bound_rmw_part(&r, index, n, 0.999f, 0.001f);
    }
}

/* The bound with `threads` threads (a team of them when > 1), as one
 * stream per thread or PB_STREAMS; with --fresh-cache each walk into the
 * next of the destinations, as each call of the kernel into the next set
 * of slots. */
static double time_bound_walk(const bench_case *c, int64_t iters, int threads, int streams) {
  static int64_t walks;
  probe_job j = {c, iters, streams, walks};
  walks += iters;
  double t0 = now_ns();
  if (threads > 1)
    team_run(team_get(threads), probe_part, &j);
  else
    probe_part(&j, 0, 1);
  return (now_ns() - t0) / (double)iters;
}

/* The faster of the two walks (each after a call that leaves the bytes
 * where the other left them). */
static double time_bound_n(const bench_case *c, int64_t iters, int threads) {
  double one = time_bound_walk(c, iters, threads, 0);
  time_bound_walk(c, 1, threads, 1);
  double several = time_bound_walk(c, iters, threads, 1);
  return several < one ? several : one;
}

static double time_bound(const bench_case *c, int64_t iters) {
  return time_bound_n(c, iters, c->threads);
}

/* The compute floor: each thread runs its part of every stage's rows on
 * its own L1-resident rows (floor.c). */
typedef struct floor_job {
  const bench_case *c;
  floor_fn fn, alt; /* alt: floor_select's other order of bf16 rows, or NULL */
  floor_data *d; /* [thread * FL_STAGES + stage] */
  int64_t iters;
} floor_job;

/* Thread index's share of a stage's rows among n threads. */
static int64_t floor_share(const floor_stage *st, int index, int n) {
  return st->rows * (index + 1) / n - st->rows * index / n;
}

static void floor_part(void *arg, int index, int n) {
  const floor_job *j = arg;
  for (int64_t it = 0; it < j->iters; it++)
    for (int s = 0; s < j->c->n_floor; s++) {
      const floor_stage *st = &j->c->floor[s];
      int64_t part = floor_share(st, index, n);
      if (part > 0) j->fn(st, &j->d[index * FL_STAGES + s], part);
    }
}

/* Whether one of a row's stages has bf16 rows in and out, where
 * floor_select's two sequences differ (floor.c). */
static int floor_has_bf16(const bench_case *c) {
  for (int s = 0; s < c->n_floor; s++)
    if (floor_bf16_rows(&c->floor[s])) return 1;
  return 0;
}

/* The floor with `threads` threads, as the bound. */
static double time_floor_n(floor_job *j, int64_t iters, int threads) {
  j->iters = iters;
  double t0 = now_ns();
  if (threads > 1)
    team_run(team_get(threads), floor_part, j);
  else
    floor_part(j, 0, 1);
  return (now_ns() - t0) / (double)iters;
}

const char *pb_floor_name;

void floor_add(bench_case *c, floor_stage st) {
  if (c->n_floor < 0 || st.rows <= 0) return;
  if (c->n_floor == FL_STAGES || !floor_supported(&st))
    c->n_floor = -1; /* a stage without a kernel: no floor for the row */
  else
    c->floor[c->n_floor++] = st;
}

static double time_kernel(bench_case *c, int64_t iters) {
  double t0 = now_ns();
  for (int64_t i = 0; i < iters; i++) c->call(c);
  return (now_ns() - t0) / (double)iters;
}

static double time_textbook(bench_case *c, void (*fn)(bench_case *), int64_t iters) {
  double t0 = now_ns();
  for (int64_t i = 0; i < iters; i++) fn(c);
  return (now_ns() - t0) / (double)iters;
}

int64_t iterations_for(double ns_per_call) {
  if (!(ns_per_call > 0)) return 1;
  double it = opt.sample_ns / ns_per_call;
  return it < 1 ? 1 : it > 1e6 ? 1000000 : (int64_t)it;
}

/* ---- was the row disturbed? ----------------------------------------------
 * A row gets a '!' (and the reason, in the note) when its figures cannot be
 * trusted as the machine's: the interquartile range of its kernel samples
 * (p75 - p25) exceeds 25 % of the median, the 1-minute load average exceeded
 * the CPU count while it ran, the run queue (runnable threads of the whole
 * machine, ours included, from /proc/loadavg, sampled after every repetition
 * while our helper threads sleep) averaged above the CPU count, or the
 * calling thread spent more than 10 % of its wall time runnable but waiting
 * for its CPU (run_delay in /proc/thread-self/schedstat: the direct measure
 * of other processes taking our core). The load average lags by a minute;
 * the run queue is its instantaneous form, and catches what the CPU wait
 * cannot: other processes busy on the other CPUs only (sharing the core's
 * SMT sibling or the memory, a row then ran 1.5x slower with no wait). */
/* Why the IQR and not max - min: the reported figure is the median, which
 * always lies between p25 and p75 and moves by at most one rank for each
 * sample a disturbance slows (on a shared VM one rep in 15 preempted by
 * another guest is routine, and max - min then flags a row whose median is
 * fine). With 15 reps the IQR spans the sorted samples 4..12 (of 1..15), so
 * up to 3 outliers at either end leave it alone; it widens when more are off,
 * that is when the median itself is no longer pinned down to within 25 %.
 * A machine slow for the whole row widens neither: that is what the
 * load-average and CPU-wait checks are for. */
#define MEASURE_ATTEMPTS 3

/* Untimed calls before each sample of the kernel and of the bound, each of
 * which follows the other's pass over its own buffer: at least WARM_CALLS
 * and at least WARM_NS of them (warm_calls). One pass does not bring back a
 * case the size of the L3 (Zen 4, 32 MiB L3, RoPE 512 tokens, 21 MB: the
 * first of two identical samples after the bound's stream took 1.4-1.8x
 * the second's with one warm call, 1.07-1.12x with three), and three did
 * not on AMD Zen 5 (32 MiB L3): Gemma-3-27B's bf16 QK-norm step of 512
 * tokens (12.6 MB, 0.3 ms a call), four runs alternated, 0.35-0.42 ms with
 * three warm calls, 0.30-0.32 with 3 ms of them (10 calls), 0.29-0.31 with
 * 12, 24 or 48 calls (x floor 0.64-0.77, 0.84-0.89, 0.86-0.99; hence 5
 * ms, 16 of those calls), its bound, warmed alike, 0.11 ms either way (the
 * bounds of the f32 steps of 17-42 MB came out 0.80-0.93 of their earlier
 * times). The textbook loops follow the kernel's own passes over the same
 * tensors: with one warm call, 'x textbook' figures of such cases favoured
 * the textbook. */
#define WARM_CALLS 3
#define WARM_NS 5e6
static int64_t warm_calls(double ns_per_call) {
  double n = ns_per_call > 0 ? WARM_NS / ns_per_call : WARM_CALLS;
  return n < WARM_CALLS ? WARM_CALLS : n > 1e6 ? 1000000 : (int64_t)n;
}

/* Nanoseconds the calling thread has waited on a run queue, or NAN. Only
 * the caller's: it is pinned to its own CPU, so its waits are other
 * processes' doing, while the pool's workers and the bound's team, which
 * take turns on the other CPUs, also wait for each other. */
static double run_wait_ns(void) {
  FILE *f = fopen("/proc/thread-self/schedstat", "r");
  if (!f) return NAN;
  unsigned long long run, wait;
  int ok = fscanf(f, "%llu %llu", &run, &wait) == 2;
  fclose(f);
  return ok ? (double)wait : NAN;
}

/* Runnable threads of the whole machine now (the 4th field of /proc/loadavg,
 * "running/total"; the reader itself is one of them), or -1. */
static int run_queue_now(void) {
  FILE *f = fopen("/proc/loadavg", "r");
  if (!f) return -1;
  int running = -1;
  if (fscanf(f, "%*f %*f %*f %d/", &running) != 1) running = -1;
  fclose(f);
  return running;
}

void disturbance_sample(disturbance *d) {
  int r = run_queue_now();
  if (r >= 0) d->running_sum += r, d->running_n++;
}

disturbance disturbance_start(void) {
  disturbance d = {now_ns(), run_wait_ns(), load_average(), 0, 0};
  disturbance_sample(&d);
  return d;
}

/* A reason the row is flagged: its bit, and its words after the others. */
static void add_reason(result *r, unsigned bit, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void add_reason(result *r, unsigned bit, const char *fmt, ...) {
  size_t n = strlen(r->flag);
  r->flags |= bit;
  if (n && n + 2 < sizeof r->flag) memcpy(r->flag + n, ", ", 3), n += 2;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->flag + n, sizeof r->flag - n, fmt, ap);
  va_end(ap);
}

void disturbance_end(disturbance *d, result *r) {
  disturbance_sample(d);
  double wall = now_ns() - d->t0, load = load_average();
  r->load_max = isnan(load) || load < d->load_max ? d->load_max : load;
  r->wait_frac = (run_wait_ns() - d->wait0) / wall;
  r->run_queue = d->running_n ? (double)d->running_sum / (double)d->running_n : NAN;
  double iqr = (r->ns.p75 - r->ns.p25) / r->ns.med;
  double fiqr = (r->floor.p75 - r->floor.p25) / r->floor.med; /* NAN: no floor */
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  r->flag[0] = 0;
  r->flags = 0;
  if (iqr > FLAG_IQR) add_reason(r, FLAGGED_IQR, "IQR %.0f %% of the median", 100 * iqr);
  if (fiqr > FLAG_IQR)
    add_reason(r, FLAGGED_FLOOR_IQR, "floor IQR %.0f %% of its median", 100 * fiqr);
  if (r->load_max > (double)cpus)
    add_reason(r, FLAGGED_LOAD, "load %.1f > %ld CPUs", r->load_max, cpus);
  if (r->run_queue > (double)cpus)
    add_reason(r, FLAGGED_RUN_QUEUE, "run queue %.1f > %ld CPUs", r->run_queue, cpus);
  if (r->wait_frac > FLAG_WAIT)
    add_reason(r, FLAGGED_WAIT, "waited %.0f %% for its CPU", 100 * r->wait_frac);
}

/* Time a case: warm-up, then --reps samples of kernel, textbook, bound and
 * compute floor, interleaved. Pauses between them let the other side's spinning threads
 * fall asleep (the library's workers spin ~0.1 ms after a call). */
result *measure(bench_case *c) {
  result *r = new_result(c);
  snprintf(r->note, sizeof r->note, "%s", c->note);
  pe_status st = c->call(c);
  if (st != PE_OK) {
    snprintf(r->error, sizeof r->error, "not available: %.180s", pe_last_error());
    return r;
  }
  /* Calibrate on a second call: the first one wakes sleeping threads. */
  time_kernel(c, 1);
  double k0 = time_kernel(c, 1);
  int64_t ik = iterations_for(k0);
  for (int w = 0; w < opt.warmup; w++) time_kernel(c, ik);
  time_bound(c, 1);
  const double b0 = time_bound(c, 1);
  int64_t ib = iterations_for(b0);
  for (int w = 0; w < opt.warmup; w++) time_bound(c, ib);
  int64_t ib1 = c->threads > 1 ? iterations_for(time_bound_n(c, 1, 1)) : ib;
  int64_t it = 0, itn = 0;
  if (c->textbook) {
    it = iterations_for(time_textbook(c, c->textbook, 1));
    for (int w = 0; w < opt.warmup; w++) time_textbook(c, c->textbook, it);
  }
  if (c->textbook_native) {
    itn = iterations_for(time_textbook(c, c->textbook_native, 1));
    for (int w = 0; w < opt.warmup; w++) time_textbook(c, c->textbook_native, itn);
  }
  /* The floor's kernels for the library's path, its rows for each thread. */
  floor_job fj = {c, NULL, NULL, NULL, 0};
  int64_t ifl = 0, ifl1 = 0;
  double f0 = 0;
  const char *fname = NULL;
  floor_fn alt = NULL;
  if (c->n_floor > 0 && (fj.fn = floor_select(&fname, &alt))) {
    if (!floor_has_bf16(c)) alt = NULL;
    pb_floor_name = fname;
    fj.d = calloc((size_t)c->threads * FL_STAGES, sizeof *fj.d);
    if (!fj.d) abort();
    for (int th = 0; th < c->threads; th++)
      for (int s = 0; s < c->n_floor; s++) {
        /* --floor-data call: each thread's rows as many as its share of
         * the call's (floor_part), so the floor walks a working set of the
         * call's size */
        const int64_t share = floor_share(&c->floor[s], th, c->threads);
        if (floor_alloc(&c->floor[s], &fj.d[th * FL_STAGES + s],
                        opt.floor_call ? (share > 0 ? share : 1) : 0))
          abort();
      }
    time_floor_n(&fj, 1, c->threads);
    f0 = time_floor_n(&fj, 1, c->threads);
    ifl = iterations_for(f0);
    for (int w = 0; w < opt.warmup; w++) time_floor_n(&fj, ifl, c->threads);
    ifl1 = c->threads > 1 ? iterations_for(time_floor_n(&fj, 1, 1)) : ifl;
    fj.alt = alt;
  }
  double *k = calloc((size_t)opt.reps * 6, sizeof *k), *b = k + opt.reps, *t = b + opt.reps;
  double *tn = t + opt.reps, *f = tn + opt.reps, *f2 = f + opt.reps; /* f2: fj.alt's */
  if (!k) abort();
  /* A row disturbed by an IQR alone, the kernel's or the floor's (a shared
   * VM's timing noise with nothing else running), is measured again, up to MEASURE_ATTEMPTS times in
   * all; the last attempt is reported, flagged if it still is. Load and CPU
   * waits are the machine's state, so those rows are not retried. */
  for (int attempt = 1;; attempt++) {
  disturbance dist = disturbance_start();
  for (int rep = 0; rep < opt.reps; rep++) {
    /* Leave the data where the previous sample did, and wake the pool's
     * workers (a woken thread may take 0.3-0.4 ms to run on a loaded
     * machine, and the pool splits a call only once its workers are
     * awake): warm_calls, as the bound gets below. */
    time_kernel(c, warm_calls(k0));
    k[rep] = time_kernel(c, ik);
    if (c->textbook) t[rep] = time_textbook(c, c->textbook, it);
    if (c->textbook_native) tn[rep] = time_textbook(c, c->textbook_native, itn);
    if (c->threads > 1) sleep_us(300);
    time_bound(c, warm_calls(b0));
    b[rep] = time_bound(c, ib);
    if (c->threads > 1) {
      /* The bound for N threads is the faster of streaming with N threads
       * and with one: a small tensor streams faster than a team can start. */
      double one = time_bound_n(c, ib1, 1);
      if (one < b[rep]) b[rep] = one;
      sleep_us(300);
    }
    if (fj.fn) { /* the floor likewise, its rows warm again first (L1 rows: one pass) */
      for (int v = 0; v < (fj.alt ? 2 : 1); v++) { /* both sequences (floor_select) */
        floor_job fv = fj;
        double *fs = v ? f2 : f;
        if (v) fv.fn = fj.alt;
        time_floor_n(&fv, opt.floor_call ? warm_calls(f0) : 1, c->threads);
        fs[rep] = time_floor_n(&fv, ifl, c->threads);
        if (c->threads > 1) {
          double one = time_floor_n(&fv, ifl1, 1);
          if (one < fs[rep]) fs[rep] = one;
          sleep_us(300);
        }
      }
    }
    disturbance_sample(&dist); /* our helper threads asleep: the caller is ours */
  }
  r->ns = summarise(k, opt.reps);
  r->bound = summarise(b, opt.reps);
  if (c->textbook) r->textbook = summarise(t, opt.reps);
  if (c->textbook_native) r->textbook_native = summarise(tn, opt.reps);
  if (fj.fn) { /* the faster sequence's samples */
    r->floor = summarise(f, opt.reps);
    if (fj.alt) {
      stats s2 = summarise(f2, opt.reps);
      if (s2.med < r->floor.med) r->floor = s2;
    }
  }
  disturbance_end(&dist, r);
  r->attempts = attempt;
  int iqr_only = r->flags && !(r->flags & ~(unsigned)(FLAGGED_IQR | FLAGGED_FLOOR_IQR));
  if (!iqr_only || attempt >= MEASURE_ATTEMPTS) break;
  }
  free(k);
  if (fj.d) {
    for (int th = 0; th < c->threads; th++)
      for (int s = 0; s < c->n_floor; s++) floor_free(&fj.d[th * FL_STAGES + s]);
    free(fj.d);
  }
  return r;
}

/* The one-thread row of the same case, for 'x 1 thr'. */
void link_speedups(void) {
  for (int i = 0; i < n_results; i++) {
    result *r = &results[i];
    if (r->threads == 1 || r->error[0]) continue;
    for (int j = 0; j < n_results; j++) {
      result *o = &results[j];
      if (o->threads == 1 && !o->error[0] && !strcmp(o->suite, r->suite) &&
          !strcmp(o->name, r->name) && !strcmp(o->dtype, r->dtype) && !strcmp(o->isa, r->isa))
        r->speedup_1t = o->ns.med / r->ns.med;
    }
  }
}

/* ------------------------------------------------------------------------ */
/* buffers                                                                  */
/* ------------------------------------------------------------------------ */

const char *dtype_name(int d) { return d == PE_F32 ? "f32" : d == PE_F16 ? "f16" : "bf16"; }
size_t dtype_size(int d) { return d == PE_F32 ? 4 : 2; }

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
float frand(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

void *xalloc(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
    fprintf(stderr, "pe-bench: cannot allocate %zu bytes\n", bytes);
    exit(1);
  }
  return p;
}

/* n elements of dtype d with values in [-1, 1). */
void fill(void *p, int d, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float f = frand();
    if (d == PE_F32) {
      ((float *)p)[i] = f;
    } else {
      uint32_t u;
      memcpy(&u, &f, 4);
      if (d == PE_BF16) {
        ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
      } else { /* f16 from the float's sign, a small exponent and the mantissa */
        uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
        uint16_t h = (uint16_t)(sign | (uint16_t)(0x3800 | ((u >> 13) & 0x3ff)));
        ((uint16_t *)p)[i] = h;
      }
    }
  }
}

/* A [b, h, t, d] tensor (bthd: token-major storage). */
pe_tensor make_tensor(int dt, int64_t b, int64_t h, int64_t t, int64_t d, int bthd) {
  pe_tensor x;
  memset(&x, 0, sizeof x);
  size_t n = (size_t)(b * h * t * d);
  x.data = xalloc(n * dtype_size(dt));
  fill(x.data, dt, n);
  x.dtype = (pe_dtype)dt;
  x.shape[0] = b, x.shape[1] = h, x.shape[2] = t, x.shape[3] = d;
  x.stride[3] = 1;
  if (bthd)
    x.stride[0] = t * h * d, x.stride[1] = d, x.stride[2] = h * d;
  else
    x.stride[0] = h * t * d, x.stride[1] = t * d, x.stride[2] = d;
  return x;
}

size_t tensor_bytes(const pe_tensor *x) {
  return (size_t)(x->shape[0] * x->shape[1] * x->shape[2] * x->shape[3]) * dtype_size(x->dtype);
}

/* The bound's rows for the first row_elems elements of every row of x, in a
 * mirror buffer of the same size (floats, so no denormal or NaN slows it). */
pb_rows probe_like(const pe_tensor *x, int64_t row_elems) {
  size_t bytes = tensor_bytes(x);
  float *m = xalloc(bytes);
  for (size_t i = 0; i < bytes / 4; i++) m[i] = 1.0f;
  size_t es = dtype_size(x->dtype);
  pb_rows r = {.base = (char *)m, .nd = 3, .row_bytes = row_elems * (int64_t)es};
  for (int d = 0; d < 3; d++) r.n[d] = x->shape[d], r.stride[d] = x->stride[d] * (int64_t)es;
  pb_rows_normalise(&r);
  return r;
}

/* A contiguous bound of `bytes` bytes (kernels whose traffic is not one
 * tensor read and written: the table build, learned rows). */
pb_rows probe_flat(double traffic) {
  int64_t bytes = ((int64_t)(traffic / 2) + 63) & ~(int64_t)63;
  float *m = xalloc((size_t)bytes);
  for (int64_t i = 0; i < bytes / 4; i++) m[i] = 1.0f;
  pb_rows r = {.base = (char *)m, .nd = 0, .row_bytes = bytes};
  return r;
}

/* r read, its results written into a second buffer of the same size: the
 * bound of rows a call reads and writes elsewhere (k into its cache rows),
 * as much memory as the call touches. */
static pb_rows with_dst(pb_rows r, size_t bytes) {
  /* --fresh-cache's K destinations, each on pages of its own */
  const size_t span = (bytes + 4095) & ~(size_t)4095, all = span * (size_t)pb_fresh;
  float *d = xalloc(all);
  for (size_t i = 0; i < all / 4; i++) d[i] = 1.0f;
  r.dst = (char *)d;
  r.dst_sets = pb_fresh;
  r.dst_span = (int64_t)span;
  return r;
}
pb_rows probe_like_to(const pe_tensor *x, int64_t row_elems) {
  return with_dst(probe_like(x, row_elems), tensor_bytes(x));
}
pb_rows probe_flat_to(double traffic) {
  pb_rows r = probe_flat(traffic);
  return with_dst(r, (size_t)r.row_bytes);
}

pb_rows probe_sink(double read_bytes, double written_bytes) {
  return pb_fresh > 1 ? probe_flat_to(read_bytes + written_bytes)
                             : probe_flat(read_bytes + written_bytes);
}

int64_t pb_fresh = 1;
uint32_t pb_store_flags;

double pb_llc_bytes(void) {
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE); /* 0 or -1 where glibc cannot tell */
  return llc > 0 ? (double)llc : 256.0 * 1048576.0;
}

int64_t fresh_begin(double cache_bytes) {
  int64_t k = cache_bytes > 0 ? opt.fresh_cache : 1;
  if (k == 0) {
    k = (int64_t)ceil(2.0 * pb_llc_bytes() / cache_bytes);
    if (k < 2) k = 2;
  }
  return pb_fresh = k;
}

int64_t *fresh_init(fresh_slots *f, int64_t *slots, int64_t n, int64_t span) {
  f->n = n, f->k = pb_fresh, f->next = 0;
  f->sets = xalloc((size_t)(n * f->k) * sizeof *f->sets);
  for (int64_t r = 0; r < f->k; r++)
    for (int64_t i = 0; i < n; i++)
      f->sets[r * n + i] = slots[i] < 0 ? slots[i] : slots[i] + r * span;
  free(slots);
  return f->sets;
}

const int64_t *fresh_next(fresh_slots *f) {
  const int64_t *s = f->sets + f->next * f->n;
  f->next = f->next + 1 < f->k ? f->next + 1 : 0;
  return s;
}

void fresh_free(fresh_slots *f) {
  free(f->sets);
  f->sets = NULL;
}

void free_probes(bench_case *c) {
  for (int p = 0; p < c->n_probe; p++) {
    free(c->probe[p].base);
    free(c->probe[p].dst);
  }
  c->n_probe = 0;
}

/* ------------------------------------------------------------------------ */
/* pools                                                                    */
/* ------------------------------------------------------------------------ */

static pe_threadpool *pools[MAX_THREADS + 1];

pe_threadpool *pool_for(int threads) {
  if (threads <= 1) return NULL;
  if (!pools[threads] && pe_threadpool_create(threads, &pools[threads]) != PE_OK) {
    fprintf(stderr, "pe-bench: pe_threadpool_create(%d): %s\n", threads, pe_last_error());
    exit(1);
  }
  return pools[threads];
}

void pools_destroy(void) {
  for (int i = 0; i <= MAX_THREADS; i++) pe_threadpool_destroy(pools[i]), pools[i] = NULL;
}

/* A result row saying a suite could not run, and why. */
void not_available(const char *suite, const char *what) {
  bench_case c;
  memset(&c, 0, sizeof c);
  c.suite = suite;
  c.dtype = -1;
  c.threads = 1;
  snprintf(c.name, sizeof c.name, "-");
  result *r = new_result(&c);
  snprintf(r->error, sizeof r->error, "not available: %.180s", what);
}

/* The machine's 1-minute load average when the run ended: on a shared
 * machine it says how much the figures may have been disturbed. */
double load_average(void) {
  double l = NAN;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1) l = NAN;
    fclose(f);
  }
  return l;
}

int64_t positions_used(int64_t batch, int64_t tokens) {
  return tokens == 1 ? 4000 + 7 * (batch - 1) + 1 : tokens;
}

char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) buf[n] = 0, *len = (size_t)n;
  return buf;
}
