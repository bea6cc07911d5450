/* pe_bench.c - pe-bench, the instrument every performance statement of
 * libposenc comes from.
 *
 * Each case times one entry point on one shape, repeated after a warm-up,
 * and reports the median, the interquartile range (p25..p75, which decides
 * whether the row is flagged as disturbed) and the full spread (min..max)
 * of the repetitions. In the
 * same repetitions, interleaved with the kernel's samples so that a busy
 * machine slows both alike, it times the bound: an in-place streaming
 * read-modify-write over the same number of bytes laid out like the tensor
 * (bound.c), with as many threads as the case uses. For RoPE it also times a
 * textbook scalar loop over a precomputed float table (textbook.c), built
 * twice: with the project's flags (-O3) and with -O3 -march=native.
 * Shapes that fit in L1/L2 are measured warm, and so is their bound.
 *
 * The optional entry points (ALiBi, T5, sinusoidal, learned, HF config) are
 * looked up with dlsym so that this file builds and runs against a library
 * that does not have them yet: their suites then print "not available". */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
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

#include "bench.h"
#include "posenc.h"

#define MAX_THREADS 64
#define MAX_THREAD_COUNTS 8

/* ------------------------------------------------------------------------ */
/* options                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct model_preset {
  const char *name;
  int heads, kv_heads, head_dim, rotary_dim;
  pe_rope_style style;
  double base;
  const char *source;
} model_preset;

/* Published configurations (config.json of each model on the HF hub). */
static const model_preset models[] = {
    {"llama3-8b", 32, 8, 128, 128, PE_ROPE_NEOX, 500000.0, "Meta-Llama-3-8B"},
    {"llama3-70b", 64, 8, 128, 128, PE_ROPE_NEOX, 500000.0, "Meta-Llama-3-70B"},
    {"qwen2.5-7b", 28, 4, 128, 128, PE_ROPE_NEOX, 1000000.0, "Qwen2.5-7B"},
    {"mistral-7b", 32, 8, 128, 128, PE_ROPE_NEOX, 1000000.0, "Mistral-7B-v0.3"},
    {"phi3-mini", 32, 32, 96, 96, PE_ROPE_NEOX, 10000.0, "Phi-3-mini-4k-instruct"},
    {"gpt-j", 16, 16, 256, 64, PE_ROPE_GPTJ, 10000.0, "GPT-J-6B (rotary_dim 64)"},
    {"neox-20b", 64, 64, 96, 24, PE_ROPE_NEOX, 10000.0, "GPT-NeoX-20B (rotary_pct 0.25)"},
};
#define N_MODELS (int)(sizeof models / sizeof models[0])

enum { FMT_TABLE, FMT_JSON, FMT_CSV };

typedef struct options {
  char suites[256];
  const model_preset *model;
  int heads, kv_heads, head_dim, rotary_dim; /* 0: from the model */
  int style;                                 /* -1: from the model */
  int64_t tokens, batch;                     /* tokens 0: the suite's cases */
  int dtype;                                 /* -1: the suite's defaults */
  int layouts; /* rope suite: bit 0 [B,H,T,D], bit 1 [B,T,H,D] (default both) */
  int bthd;    /* the other suites: --layout bthd given */
  const char *isa;
  int threads[MAX_THREAD_COUNTS], n_threads, threads_given;
  const char *hf_config;
  int reps, warmup;
  int fmt;
  int no_pin;
  double sample_ns; /* a timed sample lasts at least this long */
  int64_t max_positions; /* rope suite's table rows; -1: max(8192, tokens) */
} options;

static options opt;

static void usage(FILE *f) {
  fprintf(f,
          "usage: pe-bench [options]\n"
          "Times libposenc's entry points against an in-place streaming read-modify-write\n"
          "over the same bytes (the bound), measured in the same run.\n"
          "\n"
          "  --suite LIST       comma list of rope,table,alibi,t5,sinusoidal,learned,cutover,\n"
          "                     fused (serving entry points against their unfused\n"
          "                     equivalent: the 'x textbook loop' column), qknorm (QK-norm +\n"
          "                     RoPE + K/V into the cache, Qwen3-8B, against the unfused\n"
          "                     sequence), kvquant (RoPE + K/V into fp8/q8_0 caches and the\n"
          "                     q8_0 shift, Llama-3-8B, against the unfused libposenc calls)\n"
          "                     or all (default: rope,table,alibi,t5,sinusoidal,learned)\n"
          "  --model NAME       llama3-8b (default), llama3-70b, qwen2.5-7b, mistral-7b,\n"
          "                     phi3-mini, gpt-j, neox-20b: heads, kv heads, head_dim,\n"
          "                     rotary_dim and style of the published model\n"
          "  --heads N          query heads (overrides the model)\n"
          "  --kv-heads N       key heads\n"
          "  --head-dim N       channels per head\n"
          "  --rotary-dim N     rotated channels (even, <= head_dim)\n"
          "  --style neox|gptj  pairing\n"
          "  --tokens N         one case of N tokens instead of the suite's cases\n"
          "  --batch N          sequences (default 1)\n"
          "  --dtype f32|f16|bf16  tensor dtype (default: f32, plus f16/bf16 at 512 tokens)\n"
          "  --layout bhtd|bthd memory order of q/k: [B,H,T,D] or [B,T,H,D] (default: the\n"
          "                     rope suite runs every prefill case in both, its case names\n"
          "                     end in the layout; decode, one token, is the same memory\n"
          "                     in both; the other suites use bhtd)\n"
          "  --isa NAME|all     force scalar, avx2, avx512, neon; all = each this CPU runs\n"
          "  --threads LIST     thread counts, e.g. 1,2 (default 1,2; 1 = no pool)\n"
          "  --hf-config FILE   rope cache from a HuggingFace config.json (heads from it too)\n"
          "  --reps N           timed repetitions (default 15)\n"
          "  --warmup N         untimed repetitions first (default 2)\n"
          "  --max-positions N  rope suite: cos/sin table rows (default max(8192, tokens));\n"
          "                     0 = no table, cos/sin computed on the fly\n"
          "  --json | --csv     machine-readable output instead of the table\n"
          "  --no-pin           leave the calling thread unpinned (default: pinned to the\n"
          "                     CPU it starts on; the pool's workers take the other cores)\n"
          "  -h, --help         this text\n"
          "\n"
          "Every figure is the median of --reps repetitions; 'spread (min..max ns)' is the\n"
          "fastest and slowest of them, 'IQR p25..p75 (%% of median)' = (p75 - p25) / median,\n"
          "the quartiles interpolated between sorted samples (as numpy.percentile does).\n"
          "GB/s counts bytes read + written in the tensors (the RoPE cos/sin table is not\n"
          "counted; learned counts the table rows it gathers); 'x stream bound' = bound\n"
          "time / kernel time with the same threads\n"
          "(1.0 = as fast as streaming the bytes once; with N threads the bound is the\n"
          "faster of an N-thread and a 1-thread stream); 'x textbook loop' = textbook loop\n"
          "time / kernel time (RoPE, NeoX, one thread, each dtype and layout: a plain C loop\n"
          "over a float cos/sin table, built with the project's flags and -O3);\n"
          "'x textbook-native' = the same loop's source built -O3 -march=native\n"
          "-ffp-contract=fast (what a user's compiler makes of it for this CPU; the library\n"
          "is not built native) / kernel time; 'x 1 thread' = the same case's one-thread\n"
          "time / this time. The bound is compiled -O3 -march=native.\n"
          "A '!' in the note marks a row measured while disturbed: the IQR of the kernel's\n"
          "samples above 25 %% of the median (not max - min: a few preempted samples widen\n"
          "min..max but neither the IQR nor, beyond a rank each, the median; with 15 reps\n"
          "3 outliers at either end leave the IQR alone), the 1-minute load average above\n"
          "the CPU count, the run queue (runnable threads of the machine, ours included,\n"
          "sampled after every repetition: the load average without its minute of lag)\n"
          "averaging above the CPU count, or the calling thread waiting for its CPU more\n"
          "than 10 %% of the time. A row flagged for its IQR alone is sampled again, up\n"
          "to 3 times in all (the note says how often); the last sampling is reported.\n"
          "The cutover suite times RoPE calls of 1..512 tokens on the caller alone and on\n"
          "a pool with its cut-over disabled (PE_POOL_MIN_BYTES=0), workers hot (calls\n"
          "back to back) and cold (2 ms asleep between calls): where a pool starts to pay.\n");
}

static int parse_dtype(const char *s) {
  if (!strcmp(s, "f32")) return PE_F32;
  if (!strcmp(s, "f16")) return PE_F16;
  if (!strcmp(s, "bf16")) return PE_BF16;
  return -1;
}

static const char *dtype_name(int d) { return d == PE_F32 ? "f32" : d == PE_F16 ? "f16" : "bf16"; }
static size_t dtype_size(int d) { return d == PE_F32 ? 4 : 2; }

static int parse_int(const char *name, const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || end == v || x < lo || x > hi) {
    fprintf(stderr, "pe-bench: %s expects an integer in [%ld, %ld], got \"%s\"\n", name, lo, hi, v);
    return -1;
  }
  *out = x;
  return 0;
}

static int parse_args(int argc, char **argv) {
  memset(&opt, 0, sizeof opt);
  snprintf(opt.suites, sizeof opt.suites, "rope,table,alibi,t5,sinusoidal,learned");
  opt.model = &models[0];
  opt.style = -1;
  opt.dtype = -1;
  opt.layouts = 3;
  opt.batch = 1;
  opt.threads[0] = 1, opt.threads[1] = 2, opt.n_threads = 2;
  opt.reps = 15;
  opt.warmup = 2;
  opt.sample_ns = 5e5;
  opt.max_positions = -1;
  for (int i = 1; i < argc; i++) {
    char *a = argv[i], *val = NULL;
    char key[64];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    }
    if (!strcmp(a, "--json")) { opt.fmt = FMT_JSON; continue; }
    if (!strcmp(a, "--no-pin")) { opt.no_pin = 1; continue; }
    if (!strcmp(a, "--csv")) { opt.fmt = FMT_CSV; continue; }
    if (strncmp(a, "--", 2) != 0) goto bad;
    static const char *const with_value[] = {"--max-positions", "--suite", "--suites", "--model", "--heads",
                                             "--kv-heads", "--head-dim", "--rotary-dim",
                                             "--style", "--tokens", "--batch", "--dtype",
                                             "--layout", "--isa", "--threads", "--hf-config",
                                             "--reps", "--warmup"};
    size_t klen = strcspn(a, "=");
    int known = 0;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
      known |= strlen(with_value[k]) == klen && !strncmp(a, with_value[k], klen);
    if (!known) goto bad;
    char *eq = strchr(a, '=');
    if (eq) {
      snprintf(key, sizeof key, "%.*s", (int)(eq - a), a);
      val = eq + 1;
    } else {
      snprintf(key, sizeof key, "%s", a);
      if (i + 1 >= argc) {
        fprintf(stderr, "pe-bench: %s needs a value\n", key);
        return -1;
      }
      val = argv[++i];
    }
    long x;
    if (!strcmp(key, "--suite") || !strcmp(key, "--suites")) {
      if (!strcmp(val, "all"))
        snprintf(opt.suites, sizeof opt.suites, "rope,table,alibi,t5,sinusoidal,learned,cutover,fused,qknorm,kvquant");
      else
        snprintf(opt.suites, sizeof opt.suites, "%s", val);
    } else if (!strcmp(key, "--model")) {
      opt.model = NULL;
      for (int m = 0; m < N_MODELS; m++)
        if (!strcmp(val, models[m].name)) opt.model = &models[m];
      if (!opt.model) {
        fprintf(stderr, "pe-bench: unknown model \"%s\" (see --help)\n", val);
        return -1;
      }
    } else if (!strcmp(key, "--heads")) {
      if (parse_int(key, val, 1, 4096, &x)) return -1;
      opt.heads = (int)x;
    } else if (!strcmp(key, "--kv-heads")) {
      if (parse_int(key, val, 1, 4096, &x)) return -1;
      opt.kv_heads = (int)x;
    } else if (!strcmp(key, "--head-dim")) {
      if (parse_int(key, val, 2, 16384, &x)) return -1;
      opt.head_dim = (int)x;
    } else if (!strcmp(key, "--rotary-dim")) {
      if (parse_int(key, val, 2, 16384, &x)) return -1;
      opt.rotary_dim = (int)x;
    } else if (!strcmp(key, "--style")) {
      if (!strcmp(val, "neox")) opt.style = PE_ROPE_NEOX;
      else if (!strcmp(val, "gptj")) opt.style = PE_ROPE_GPTJ;
      else { fprintf(stderr, "pe-bench: --style neox|gptj\n"); return -1; }
    } else if (!strcmp(key, "--tokens")) {
      if (parse_int(key, val, 1, 1 << 22, &x)) return -1;
      opt.tokens = x;
    } else if (!strcmp(key, "--batch")) {
      if (parse_int(key, val, 1, 4096, &x)) return -1;
      opt.batch = x;
    } else if (!strcmp(key, "--dtype")) {
      if ((opt.dtype = parse_dtype(val)) < 0) {
        fprintf(stderr, "pe-bench: --dtype f32|f16|bf16\n");
        return -1;
      }
    } else if (!strcmp(key, "--layout")) {
      if (!strcmp(val, "bhtd")) opt.bthd = 0, opt.layouts = 1;
      else if (!strcmp(val, "bthd")) opt.bthd = 1, opt.layouts = 2;
      else { fprintf(stderr, "pe-bench: --layout bhtd|bthd\n"); return -1; }
    } else if (!strcmp(key, "--isa")) {
      opt.isa = val;
    } else if (!strcmp(key, "--threads")) {
      opt.n_threads = 0;
      opt.threads_given = 1;
      char buf[128];
      snprintf(buf, sizeof buf, "%s", val);
      for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (opt.n_threads == MAX_THREAD_COUNTS || parse_int(key, tok, 1, MAX_THREADS, &x)) return -1;
        opt.threads[opt.n_threads++] = (int)x;
      }
      if (!opt.n_threads) return -1;
    } else if (!strcmp(key, "--hf-config")) {
      opt.hf_config = val;
    } else if (!strcmp(key, "--reps")) {
      if (parse_int(key, val, 1, 100000, &x)) return -1;
      opt.reps = (int)x;
    } else if (!strcmp(key, "--warmup")) {
      if (parse_int(key, val, 0, 100000, &x)) return -1;
      opt.warmup = (int)x;
    } else if (!strcmp(key, "--max-positions")) {
      if (parse_int(key, val, 0, 1L << 30, &x)) return -1;
      opt.max_positions = x;
    } else {
      goto bad;
    }
    continue;
  bad:
    fprintf(stderr, "pe-bench: unknown option \"%s\" (see --help)\n", a);
    return -1;
  }
  return 0;
}

/* The model named in case names: the preset, or the config file's name. */
static const char *model_label(void) {
  static char label[32];
  if (!opt.hf_config) return opt.model->name;
  const char *base = strrchr(opt.hf_config, '/');
  base = base ? base + 1 : opt.hf_config;
  snprintf(label, sizeof label, "%.*s", (int)(strcspn(base, ".") < 24 ? strcspn(base, ".") : 24), base);
  return label;
}

static int suite_selected(const char *name) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", opt.suites);
  for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","))
    if (!strcmp(t, name)) return 1;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* time, statistics, progress                                               */
/* ------------------------------------------------------------------------ */

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct stats {
  double med, min, max, p25, p75;
} stats;

#define NO_STATS ((stats){NAN, NAN, NAN, NAN, NAN})

/* Quantile q of sorted v[0..n): linear interpolation between the samples
 * at ranks floor and ceil of q*(n-1) (numpy.percentile's default). */
static double quantile(const double *v, int n, double q) {
  double at = q * (n - 1);
  int i = (int)at;
  return i + 1 < n ? v[i] + (at - i) * (v[i + 1] - v[i]) : v[n - 1];
}

static stats summarise(double *v, int n) {
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

static double run_start;
static int progress_shown;

static void progress(const char *fmt, ...) {
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

static void progress_done(void) {
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
static int team_cpus[MAX_THREADS * 4], n_team_cpus;

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
    if (n_team_cpus > 0) {
      /* Pinned, so that a member never shares the caller's core: the bound
       * is the machine's, not the scheduler's. */
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(team_cpus[(i - 1) % n_team_cpus], &set);
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

static void teams_stop(void) {
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

typedef struct bench_case bench_case;
struct bench_case {
  const char *suite;
  char name[48];
  int dtype;
  int threads;
  pe_threadpool *pool;
  double bytes;                        /* read + written per call */
  pe_status (*call)(bench_case *);     /* one call of the kernel */
  void (*textbook)(bench_case *);      /* NULL: no textbook column */
  void (*textbook_native)(bench_case *); /* NULL: no textbook-native column */
  pb_rows probe[2];                    /* the bound's rows (a mirror buffer) */
  int n_probe;
  void *st;                            /* suite state */
  char note[96];
};

typedef struct result {
  char suite[16], name[48], dtype[8], isa[8];
  int threads;
  double bytes;
  stats ns, bound, textbook, textbook_native;
  double speedup_1t; /* NAN: no one-thread row */
  double load_max;   /* highest 1-minute load average seen while it ran */
  double wait_frac;  /* time its threads waited for a CPU / its wall time */
  double run_queue;  /* mean runnable threads of the machine (ours included) */
  char flag[120];    /* non-empty: measured while disturbed, and why */
  int attempts;      /* samplings of the row (more than one: its IQR was retried) */
  char note[96];
  char error[200]; /* non-empty: not measured */
} result;

static result *results;
static int n_results, cap_results;

static result *new_result(const bench_case *c) {
  if (n_results == cap_results) {
    cap_results = cap_results ? 2 * cap_results : 64;
    results = realloc(results, (size_t)cap_results * sizeof *results);
    if (!results) abort();
  }
  result *r = &results[n_results++];
  memset(r, 0, sizeof *r);
  snprintf(r->suite, sizeof r->suite, "%s", c->suite);
  snprintf(r->name, sizeof r->name, "%s", c->name);
  snprintf(r->dtype, sizeof r->dtype, "%s", c->dtype >= 0 ? dtype_name(c->dtype) : "-");
  snprintf(r->isa, sizeof r->isa, "%s", pe_isa_name());
  r->threads = c->threads;
  r->bytes = c->bytes;
  r->ns = r->bound = r->textbook = r->textbook_native = NO_STATS;
  r->run_queue = NAN;
  r->speedup_1t = NAN;
  r->load_max = r->wait_frac = NAN;
  return r;
}

typedef struct probe_job {
  const bench_case *c;
  int64_t iters;
} probe_job;

static void probe_part(void *arg, int index, int n) {
  const probe_job *j = arg;
  for (int64_t it = 0; it < j->iters; it++)
    for (int p = 0; p < j->c->n_probe; p++) pb_bound_rmw_part(&j->c->probe[p], index, n, 0.999f, 0.001f);
}

/* The bound with `threads` threads (a team of them when > 1). */
static double time_bound_n(const bench_case *c, int64_t iters, int threads) {
  probe_job j = {c, iters};
  double t0 = now_ns();
  if (threads > 1)
    team_run(team_get(threads), probe_part, &j);
  else
    probe_part(&j, 0, 1);
  return (now_ns() - t0) / (double)iters;
}

static double time_bound(const bench_case *c, int64_t iters) {
  return time_bound_n(c, iters, c->threads);
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

static int64_t iterations_for(double ns_per_call) {
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
#define FLAG_IQR 0.25
#define FLAG_WAIT 0.10
#define MEASURE_ATTEMPTS 3

/* Untimed calls before each sample of the kernel and of the bound, each of
 * which follows the other's pass over its own buffer. One pass does not
 * bring back a case the size of the L3 (Zen 4, 32 MiB L3, RoPE 512 tokens,
 * 21 MB: the first of two identical samples after the bound's stream took
 * 1.4-1.8x the second's with one warm call, 1.07-1.12x with three), while the
 * textbook loops follow the kernel's own passes over the same tensors: with
 * one, 'x textbook' figures of such cases favoured the textbook. */
#define WARM_CALLS 3

static double load_average(void);

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

typedef struct disturbance {
  double t0, wait0, load_max;
  long running_sum, running_n;
} disturbance;

static void disturbance_sample(disturbance *d) {
  int r = run_queue_now();
  if (r >= 0) d->running_sum += r, d->running_n++;
}

static disturbance disturbance_start(void) {
  disturbance d = {now_ns(), run_wait_ns(), load_average(), 0, 0};
  disturbance_sample(&d);
  return d;
}

static void disturbance_end(disturbance *d, result *r) {
  disturbance_sample(d);
  double wall = now_ns() - d->t0, load = load_average();
  r->load_max = isnan(load) || load < d->load_max ? d->load_max : load;
  r->wait_frac = (run_wait_ns() - d->wait0) / wall;
  r->run_queue = d->running_n ? (double)d->running_sum / (double)d->running_n : NAN;
  double iqr = (r->ns.p75 - r->ns.p25) / r->ns.med;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  size_t n = 0;
  r->flag[0] = 0;
  if (iqr > FLAG_IQR)
    n += (size_t)snprintf(r->flag + n, sizeof r->flag - n, "IQR %.0f %% of the median", 100 * iqr);
  if (r->load_max > (double)cpus && n < sizeof r->flag)
    n += (size_t)snprintf(r->flag + n, sizeof r->flag - n, "%sload %.1f > %ld CPUs", n ? ", " : "",
                          r->load_max, cpus);
  if (r->run_queue > (double)cpus && n < sizeof r->flag)
    n += (size_t)snprintf(r->flag + n, sizeof r->flag - n, "%srun queue %.1f > %ld CPUs",
                          n ? ", " : "", r->run_queue, cpus);
  if (r->wait_frac > FLAG_WAIT && n < sizeof r->flag)
    snprintf(r->flag + n, sizeof r->flag - n, "%swaited %.0f %% for its CPU", n ? ", " : "",
             100 * r->wait_frac);
}

/* Time a case: warm-up, then --reps samples of kernel, textbook and bound,
 * interleaved. Pauses between them let the other side's spinning threads
 * fall asleep (the library's workers spin ~0.1 ms after a call). */
static result *measure(bench_case *c) {
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
  int64_t ib = iterations_for(time_bound(c, 1));
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
  double *k = calloc((size_t)opt.reps * 4, sizeof *k), *b = k + opt.reps, *t = b + opt.reps;
  double *tn = t + opt.reps;
  if (!k) abort();
  /* A row disturbed by its IQR alone (a shared VM's timing noise with
   * nothing else running) is measured again, up to MEASURE_ATTEMPTS times in
   * all; the last attempt is reported, flagged if it still is. Load and CPU
   * waits are the machine's state, so those rows are not retried. */
  for (int attempt = 1;; attempt++) {
  disturbance dist = disturbance_start();
  for (int rep = 0; rep < opt.reps; rep++) {
    /* Wake the pool's workers and leave the data where the previous sample
     * did: at least two calls and 2 ms of them (a woken thread may take
     * 0.3-0.4 ms to run on a loaded machine, and the pool splits a call
     * only once its workers are awake), and at least WARM_CALLS, as the
     * bound gets below. */
    int64_t warm = c->threads > 1 ? 2 + (int64_t)(2e6 / (k0 > 0 ? k0 : 2e6)) : 1;
    time_kernel(c, warm > WARM_CALLS ? warm : WARM_CALLS);
    k[rep] = time_kernel(c, ik);
    if (c->textbook) t[rep] = time_textbook(c, c->textbook, it);
    if (c->textbook_native) tn[rep] = time_textbook(c, c->textbook_native, itn);
    if (c->threads > 1) sleep_us(300);
    time_bound(c, WARM_CALLS);
    b[rep] = time_bound(c, ib);
    if (c->threads > 1) {
      /* The bound for N threads is the faster of streaming with N threads
       * and with one: a small tensor streams faster than a team can start. */
      double one = time_bound_n(c, ib1, 1);
      if (one < b[rep]) b[rep] = one;
      sleep_us(300);
    }
    disturbance_sample(&dist); /* our helper threads asleep: the caller is ours */
  }
  r->ns = summarise(k, opt.reps);
  r->bound = summarise(b, opt.reps);
  if (c->textbook) r->textbook = summarise(t, opt.reps);
  if (c->textbook_native) r->textbook_native = summarise(tn, opt.reps);
  disturbance_end(&dist, r);
  r->attempts = attempt;
  int iqr_only = r->flag[0] && !strchr(r->flag, ',') && !strncmp(r->flag, "IQR", 3);
  if (!iqr_only || attempt >= MEASURE_ATTEMPTS) break;
  }
  free(k);
  return r;
}

/* The one-thread row of the same case, for 'x 1 thr'. */
static void link_speedups(void) {
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

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static float frand(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void *xalloc(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
    fprintf(stderr, "pe-bench: cannot allocate %zu bytes\n", bytes);
    exit(1);
  }
  return p;
}

/* n elements of dtype d with values in [-1, 1). */
static void fill(void *p, int d, size_t n) {
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
static pe_tensor make_tensor(int dt, int64_t b, int64_t h, int64_t t, int64_t d, int bthd) {
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

static size_t tensor_bytes(const pe_tensor *x) {
  return (size_t)(x->shape[0] * x->shape[1] * x->shape[2] * x->shape[3]) * dtype_size(x->dtype);
}

/* The bound's rows for the first row_elems elements of every row of x, in a
 * mirror buffer of the same size (floats, so no denormal or NaN slows it). */
static pb_rows probe_like(const pe_tensor *x, int64_t row_elems) {
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
static pb_rows probe_flat(double traffic) {
  int64_t bytes = ((int64_t)(traffic / 2) + 63) & ~(int64_t)63;
  float *m = xalloc((size_t)bytes);
  for (int64_t i = 0; i < bytes / 4; i++) m[i] = 1.0f;
  pb_rows r = {.base = (char *)m, .nd = 0, .row_bytes = bytes};
  return r;
}

static void free_probes(bench_case *c) {
  for (int p = 0; p < c->n_probe; p++) free(c->probe[p].base);
  c->n_probe = 0;
}

/* ------------------------------------------------------------------------ */
/* pools                                                                    */
/* ------------------------------------------------------------------------ */

static pe_threadpool *pools[MAX_THREADS + 1];

static pe_threadpool *pool_for(int threads) {
  if (threads <= 1) return NULL;
  if (!pools[threads] && pe_threadpool_create(threads, &pools[threads]) != PE_OK) {
    fprintf(stderr, "pe-bench: pe_threadpool_create(%d): %s\n", threads, pe_last_error());
    exit(1);
  }
  return pools[threads];
}

/* ------------------------------------------------------------------------ */
/* optional entry points                                                    */
/* ------------------------------------------------------------------------ */

typedef pe_status (*alibi_slopes_fn)(int32_t, double, float *);
typedef pe_status (*alibi_fn)(const pe_tensor *, const float *, const int64_t *, uint32_t,
                              pe_threadpool *);
typedef pe_status (*t5_fn)(const pe_tensor *, const float *, int32_t, int32_t, int32_t,
                           const int64_t *, uint32_t, pe_threadpool *);
typedef pe_status (*sin_fn)(const pe_tensor *, const int64_t *, double, uint32_t, pe_threadpool *);
typedef pe_status (*learned_fn)(const pe_tensor *, const pe_tensor *, const int64_t *,
                                pe_threadpool *);

static void *optional_symbol(const char *name) { return dlsym(RTLD_DEFAULT, name); }

/* A result row saying a suite could not run, and why. */
static void not_available(const char *suite, const char *what) {
  bench_case c;
  memset(&c, 0, sizeof c);
  c.suite = suite;
  c.dtype = -1;
  c.threads = 1;
  snprintf(c.name, sizeof c.name, "-");
  result *r = new_result(&c);
  snprintf(r->error, sizeof r->error, "not available: %.180s", what);
}

/* ------------------------------------------------------------------------ */
/* rope                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct rope_geom {
  int heads, kv_heads, head_dim, rotary_dim;
  pe_rope_style style;
  double base;
} rope_geom;

typedef struct rope_state {
  pe_rope_cache *cache;
  pe_tensor q, k;
  int64_t *pos;
  int64_t tokens;
  float *cos_t, *sin_t; /* textbook table, NeoX only */
  int32_t half;
} rope_state;

static pe_status rope_call(bench_case *c) {
  rope_state *s = c->st;
  return pe_apply_rope_qk(s->cache, &s->q, &s->k, s->pos, 0, c->pool);
}

/* The textbook loop on q then k, in the tensor's dtype: the -O3 build
 * (native 0) or the -O3 -march=native one (native 1). */
static void rope_textbook_on(rope_state *s, pe_tensor *x, int native) {
  switch (x->dtype) {
  case PE_F16:
    (native ? pb_textbook_native_rope_neox_f16 : pb_textbook_rope_neox_f16)(
        x->data, x->shape, x->stride, s->half, s->pos, s->cos_t, s->sin_t);
    break;
  case PE_BF16:
    (native ? pb_textbook_native_rope_neox_bf16 : pb_textbook_rope_neox_bf16)(
        x->data, x->shape, x->stride, s->half, s->pos, s->cos_t, s->sin_t);
    break;
  default:
    (native ? pb_textbook_native_rope_neox_f32 : pb_textbook_rope_neox_f32)(
        x->data, x->shape, x->stride, s->half, s->pos, s->cos_t, s->sin_t);
  }
}

static void rope_textbook(bench_case *c) {
  rope_state *s = c->st;
  rope_textbook_on(s, &s->q, 0);
  rope_textbook_on(s, &s->k, 0);
}

static void rope_textbook_native(bench_case *c) {
  rope_state *s = c->st;
  rope_textbook_on(s, &s->q, 1);
  rope_textbook_on(s, &s->k, 1);
}

static double elem_value(const pe_tensor *x, size_t i) {
  if (x->dtype == PE_F32) return ((const float *)x->data)[i];
  uint16_t h = ((const uint16_t *)x->data)[i];
  if (x->dtype == PE_F16) { /* finite values only: fill() makes no others */
    int e = (h >> 10) & 0x1f;
    double m = e ? 1024 + (h & 0x3ff) : (h & 0x3ff);
    return (h & 0x8000 ? -1 : 1) * ldexp(m, (e ? e : 1) - 25);
  }
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Does the baseline compute what the library computes? One call of each
 * build of the textbook loop and of the library on copies of q, compared
 * element by element: within 2^-20 relative for f32 (the library rounds
 * fmaf(x, c, -(y*s)), the loop x*c - y*s, contracted or not), within one
 * unit in the last place for f16/bf16 (that difference, rounded). NULL: they
 * agree; otherwise the first element that differs (the case then has no
 * textbook columns, and its note says why). */
static const char *textbook_mismatch(bench_case *c) {
  static char why[128];
  rope_state *s = c->st;
  size_t n = (size_t)(s->q.shape[0] * s->q.shape[1] * s->q.shape[2] * s->q.shape[3]);
  size_t bytes = tensor_bytes(&s->q);
  void *orig = xalloc(bytes), *lib = xalloc(bytes);
  memcpy(orig, s->q.data, bytes);
  pe_tensor q_lib = s->q;
  q_lib.data = lib;
  memcpy(lib, orig, bytes);
  pe_status st = pe_apply_rope_qk(s->cache, &q_lib, NULL, s->pos, 0, NULL);
  double tol = s->q.dtype == PE_F32 ? 0x1p-20 : s->q.dtype == PE_F16 ? 0x1p-10 : 0x1p-7;
  why[0] = 0;
  for (int native = 0; native < 2 && st == PE_OK && !why[0]; native++) {
    memcpy(s->q.data, orig, bytes);
    rope_textbook_on(s, &s->q, native);
    for (size_t i = 0; i < n; i++) {
      double a = elem_value(&s->q, i), b = elem_value(&q_lib, i);
      if (!(fabs(a - b) <= tol * (fabs(b) > 0.25 ? fabs(b) : 0.25))) {
        snprintf(why, sizeof why, "textbook%s loop: element %zu is %.7g, the library's %.7g",
                 native ? "-native" : "", i, a, b);
        break;
      }
    }
  }
  if (st != PE_OK) snprintf(why, sizeof why, "pe_apply_rope_qk: %.70s", pe_last_error());
  memcpy(s->q.data, orig, bytes);
  free(orig);
  free(lib);
  return why[0] ? why : NULL;
}

static char *read_file(const char *path, size_t *len) {
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

static rope_geom geometry(void) {
  const model_preset *m = opt.model;
  rope_geom g = {m->heads, m->kv_heads, m->head_dim, m->rotary_dim, m->style, m->base};
  if (opt.heads) g.heads = opt.heads;
  if (opt.kv_heads) g.kv_heads = opt.kv_heads;
  if (opt.head_dim) g.head_dim = opt.head_dim, g.rotary_dim = opt.head_dim;
  if (opt.rotary_dim) g.rotary_dim = opt.rotary_dim;
  if (opt.style >= 0) g.style = (pe_rope_style)opt.style;
  return g;
}

/* --hf-config: the model the library loads from the file, kept for the run
 * (hf_load, before any suite). */
static pe_model_rope *hf_model;

static const char *scaling_name(pe_rope_scaling s) {
  static const char *const names[] = {"default", "linear", "ntk", "dynamic", "yarn",
                                      "longrope", "llama3", "proportional", "custom"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

/* Layers [0, n) for which pick(i) holds, as "0-4,6,8-10". */
static void layer_list(const pe_model_rope *m, const pe_rope_cache *which, int nope, char *out,
                       size_t len) {
  int32_t n = pe_model_rope_num_layers(m);
  size_t at = 0;
  out[0] = 0;
  for (int32_t i = 0; i < n;) {
    const pe_rope_cache *c = pe_model_rope_layer(m, i);
    if (nope ? c != NULL : c != which) {
      i++;
      continue;
    }
    int32_t j = i;
    while (j + 1 < n && (nope ? pe_model_rope_layer(m, j + 1) == NULL
                              : pe_model_rope_layer(m, j + 1) == which))
      j++;
    int k = j > i ? snprintf(out + at, len - at, "%s%d-%d", at ? "," : "", (int)i, (int)j)
                  : snprintf(out + at, len - at, "%s%d", at ? "," : "", (int)i);
    if (k < 0 || (size_t)k >= len - at) {
      if (len > 4) snprintf(out + len - 4, 4, "...");
      return;
    }
    at += (size_t)k;
    i = j + 1;
  }
}

/* Load --hf-config with the library and print what it loaded, per cache:
 * type, base, factor, attention factor, how many layers use it (and which),
 * then the NoPE layers. On stdout with the table output, on stderr with
 * --json/--csv (their stdout is the machine-readable result). Returns 0, or
 * 1 after one error line when the file cannot be read or used. */
static int hf_load(void) {
  FILE *f = fopen(opt.hf_config, "rb");
  if (!f) {
    fprintf(stderr, "pe-bench: --hf-config %s: %s\n", opt.hf_config, strerror(errno));
    return 1;
  }
  fclose(f);
  size_t len = 0;
  char *json = read_file(opt.hf_config, &len);
  if (!json) {
    fprintf(stderr, "pe-bench: --hf-config %s: cannot read the file\n", opt.hf_config);
    return 1;
  }
  pe_status st = pe_model_rope_from_hf_config(json, len, 0, 0, &hf_model);
  free(json);
  if (st != PE_OK) {
    fprintf(stderr, "pe-bench: --hf-config %s: %s\n", opt.hf_config, pe_last_error());
    return 1;
  }
  FILE *o = opt.fmt == FMT_TABLE ? stdout : stderr;
  int32_t n = pe_model_rope_num_layers(hf_model), heads = 0, kv = 0;
  pe_model_rope_heads(hf_model, &heads, &kv);
  fprintf(o, "hf-config %s: %d layers, %d query heads, %d kv heads%s\n", opt.hf_config, (int)n,
          (int)heads, (int)kv,
          pe_model_rope_pairing_guessed(hf_model) == 1 ? " (model_type unknown: pairing guessed)" : "");
  const pe_rope_cache *seen[64];
  int n_seen = 0, nope = 0;
  char list[160];
  for (int32_t i = 0; i < n; i++) {
    const pe_rope_cache *c = pe_model_rope_layer(hf_model, i);
    if (!c) {
      nope++;
      continue;
    }
    int k;
    for (k = 0; k < n_seen; k++)
      if (seen[k] == c) break;
    if (k < n_seen || n_seen == 64) continue;
    seen[n_seen++] = c;
    int uses = 0;
    for (int32_t j = 0; j < n; j++) uses += pe_model_rope_layer(hf_model, j) == c;
    pe_rope_params p;
    pe_rope_params_init(&p);
    pe_rope_cache_params(c, &p);
    layer_list(hf_model, c, 0, list, sizeof list);
    fprintf(o, "  rope %d: %s, base %g, factor %g, attention factor %.9g, head_dim %d, rotary_dim "
               "%d, %s pairs; %d layer%s (%s)\n",
            n_seen, scaling_name(p.scaling), p.base, p.factor, pe_rope_cache_attention_factor(c),
            (int)p.head_dim, (int)p.rotary_dim, p.style == PE_ROPE_GPTJ ? "interleaved" : "half-split",
            uses, uses == 1 ? "" : "s", list);
  }
  if (nope) {
    layer_list(hf_model, NULL, 1, list, sizeof list);
    fprintf(o, "  no RoPE: %d layer%s (%s)\n", nope, nope == 1 ? "" : "s", list);
  } else {
    fprintf(o, "  no RoPE: none\n");
  }
  return 0;
}

/* The rope cache for the run: from --hf-config (the cache most of the
 * model's layers use, with this case's table size), or from the geometry. */
static pe_status rope_cache_for(rope_geom *g, int64_t max_positions, pe_rope_cache **out,
                                char *why, size_t why_len) {
  if (opt.hf_config) {
    const pe_rope_cache *best = NULL;
    int best_uses = 0;
    int32_t n = pe_model_rope_num_layers(hf_model);
    for (int32_t i = 0; i < n; i++) {
      const pe_rope_cache *c = pe_model_rope_layer(hf_model, i);
      int uses = 0;
      for (int32_t j = 0; c && j < n; j++) uses += pe_model_rope_layer(hf_model, j) == c;
      if (uses > best_uses) best = c, best_uses = uses;
    }
    if (!best) {
      snprintf(why, why_len, "no layer of %s uses RoPE", opt.hf_config);
      return PE_ERR_UNSUPPORTED;
    }
    pe_rope_params p;
    pe_rope_params_init(&p);
    pe_rope_cache_params(best, &p);
    /* A PROPORTIONAL cache reports its head_dim layout, not the rotated
     * count: rebuild it from its frequencies (exact zeros) instead. */
    double inv[4096];
    if (p.scaling == PE_ROPE_SCALING_PROPORTIONAL && p.rotary_dim / 2 <= 4096) {
      float f[4096];
      pe_rope_cache_inv_freq(best, f);
      for (int32_t i = 0; i < p.rotary_dim / 2; i++) inv[i] = f[i];
      p.scaling = PE_ROPE_SCALING_CUSTOM;
      p.inv_freq = inv;
    }
    p.max_positions = max_positions;
    pe_status st = pe_rope_cache_create(&p, out);
    if (st != PE_OK) {
      snprintf(why, why_len, "%s", pe_last_error());
      return st;
    }
    int32_t heads = 0, kv = 0;
    pe_model_rope_heads(hf_model, &heads, &kv);
    if (!opt.heads && heads > 0) g->heads = heads;
    if (!opt.kv_heads && kv > 0) g->kv_heads = kv;
    g->head_dim = p.head_dim;
    g->rotary_dim = p.rotary_dim;
    g->style = p.style;
    return PE_OK;
  }
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = g->head_dim;
  p.rotary_dim = g->rotary_dim;
  p.style = g->style;
  p.base = g->base;
  p.max_positions = max_positions;
  pe_status st = pe_rope_cache_create(&p, out);
  if (st != PE_OK) snprintf(why, why_len, "%s", pe_last_error());
  return st;
}

static void rope_case(const char *name, int64_t tokens, int dt, int threads, int bthd) {
  rope_geom g = geometry();
  rope_state s;
  memset(&s, 0, sizeof s);
  /* tb_pos: rows of the textbook loop's table, which always has one. */
  int64_t tb_pos = tokens > 8192 ? tokens : 8192;
  int64_t max_pos = opt.max_positions >= 0 ? opt.max_positions : tb_pos;
  char why[200] = "";
  if (rope_cache_for(&g, max_pos, &s.cache, why, sizeof why) != PE_OK) {
    not_available("rope", why);
    return;
  }
  int64_t B = opt.batch;
  s.tokens = tokens;
  s.half = g.rotary_dim / 2;
  s.q = make_tensor(dt, B, g.heads, tokens, g.head_dim, bthd);
  s.k = make_tensor(dt, B, g.kv_heads, tokens, g.head_dim, bthd);
  /* Decode: each sequence at its own position past a long context; prefill:
   * 0..T-1 (positions NULL). */
  if (tokens == 1) {
    s.pos = xalloc((size_t)B * sizeof *s.pos);
    for (int64_t b = 0; b < B; b++) s.pos[b] = 4000 + 7 * b;
  }
  bench_case c;
  memset(&c, 0, sizeof c);
  c.suite = "rope";
  snprintf(c.name, sizeof c.name, "%s", name);
  c.dtype = dt;
  c.threads = threads;
  c.pool = pool_for(threads);
  c.bytes = 2.0 * (double)(B * (g.heads + g.kv_heads) * tokens) * g.rotary_dim * (double)dtype_size(dt);
  c.call = rope_call;
  c.st = &s;
  c.probe[0] = probe_like(&s.q, g.rotary_dim);
  c.probe[1] = probe_like(&s.k, g.rotary_dim);
  c.n_probe = 2;
  snprintf(c.note, sizeof c.note, "%dq/%dkv x %d (rot %d) %s %s", g.heads, g.kv_heads, g.head_dim,
           g.rotary_dim, g.style == PE_ROPE_NEOX ? "neox" : "gptj", bthd ? "bthd" : "bhtd");
  if (opt.max_positions >= 0) {
    size_t l = strlen(c.note);
    if (max_pos)
      snprintf(c.note + l, sizeof c.note - l, " table %" PRId64, max_pos);
    else
      snprintf(c.note + l, sizeof c.note - l, " on the fly");
  }
  if (g.style == PE_ROPE_NEOX && threads == 1) {
    s.cos_t = xalloc((size_t)tb_pos * (size_t)s.half * sizeof(float));
    s.sin_t = xalloc((size_t)tb_pos * (size_t)s.half * sizeof(float));
    float *cs = xalloc((size_t)s.half * 2 * sizeof(float));
    for (int64_t p = 0; p < tb_pos; p++) {
      pe_rope_cache_cos_sin(s.cache, p, cs, cs + s.half);
      memcpy(s.cos_t + p * s.half, cs, (size_t)s.half * sizeof(float));
      memcpy(s.sin_t + p * s.half, cs + s.half, (size_t)s.half * sizeof(float));
    }
    free(cs);
    const char *bad = textbook_mismatch(&c);
    if (bad) {
      size_t l = strlen(c.note);
      snprintf(c.note + l, sizeof c.note - l, "; no textbook: %s", bad);
    } else {
      c.textbook = rope_textbook;
      c.textbook_native = rope_textbook_native;
    }
  }
  progress("[%.0fs] rope %s %s %d thr", (now_ns() - run_start) / 1e9, c.name, dtype_name(dt), threads);
  measure(&c);
  free_probes(&c);
  free(s.q.data);
  free(s.k.data);
  free(s.pos);
  free(s.cos_t);
  free(s.sin_t);
  pe_rope_cache_destroy(s.cache);
}

/* One rope case in each layout --layout selects (both by default), its
 * name followed by the layout; decode (one token: both layouts are the
 * same memory) once, in bhtd unless --layout bthd. */
static void rope_layouts(const char *name, int64_t tokens, int dt, int threads) {
  if (tokens == 1) {
    rope_case(name, tokens, dt, threads, opt.layouts == 2);
    return;
  }
  for (int l = 0; l < 2; l++) {
    if (!(opt.layouts & (1 << l))) continue;
    char full[48];
    snprintf(full, sizeof full, "%.42s %s", name, l ? "bthd" : "bhtd");
    rope_case(full, tokens, dt, threads, l);
  }
}

static void suite_rope(void) {
  for (int ti = 0; ti < opt.n_threads; ti++) {
    int th = opt.threads[ti];
    if (opt.tokens) {
      char name[48];
      snprintf(name, sizeof name, "%s %" PRId64 " tok x%" PRId64, model_label(), opt.tokens, opt.batch);
      rope_layouts(name, opt.tokens, opt.dtype >= 0 ? opt.dtype : PE_F32, th);
      continue;
    }
    static const struct { const char *name; int64_t tokens; } cases[] = {
        {"decode", 1}, {"prefill 32", 32}, {"prefill 512", 512}, {"prefill 4096", 4096}};
    for (int i = 0; i < 4; i++) {
      char name[48];
      snprintf(name, sizeof name, "%s %s", model_label(), cases[i].name);
      if (opt.dtype >= 0) {
        rope_layouts(name, cases[i].tokens, opt.dtype, th);
      } else {
        rope_layouts(name, cases[i].tokens, PE_F32, th);
        if (cases[i].tokens == 512) {
          rope_layouts(name, 512, PE_F16, th);
          rope_layouts(name, 512, PE_BF16, th);
        }
      }
    }
  }
}

/* ------------------------------------------------------------------------ */
/* table                                                                    */
/* ------------------------------------------------------------------------ */

#define TABLE_POSITIONS 131072
#define TABLE_HEAD_DIM 128

static pe_rope_params table_params(void) {
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = TABLE_HEAD_DIM;
  p.max_positions = TABLE_POSITIONS;
  return p;
}

static pe_status table_call(bench_case *c) {
  (void)c;
  pe_rope_params p = table_params();
  pe_rope_cache *cache = NULL;
  pe_status st = pe_rope_cache_create(&p, &cache);
  pe_rope_cache_destroy(cache);
  return st;
}

/* Largest |table - exact| over every 5th position and the last 64, against
 * cos/sin of the double angle p * base^(-2i/d). */
static double table_max_error(void) {
  pe_rope_params p = table_params();
  pe_rope_cache *cache = NULL;
  if (pe_rope_cache_create(&p, &cache) != PE_OK) return NAN;
  int half = TABLE_HEAD_DIM / 2;
  float cs[TABLE_HEAD_DIM];
  double freq[TABLE_HEAD_DIM / 2], err = 0;
  for (int i = 0; i < half; i++) freq[i] = pow(p.base, -2.0 * i / TABLE_HEAD_DIM);
  for (int64_t pos = 0; pos < TABLE_POSITIONS; pos += (pos >= TABLE_POSITIONS - 64 ? 1 : 5)) {
    pe_rope_cache_cos_sin(cache, pos, cs, cs + half);
    for (int i = 0; i < half; i++) {
      double a = (double)pos * freq[i];
      double e1 = fabs(cs[i] - cos(a)), e2 = fabs(cs[half + i] - sin(a));
      if (e1 > err) err = e1;
      if (e2 > err) err = e2;
    }
  }
  pe_rope_cache_destroy(cache);
  return err;
}

static void suite_table(void) {
  bench_case c;
  memset(&c, 0, sizeof c);
  c.suite = "table";
  snprintf(c.name, sizeof c.name, "build %dx%d", TABLE_POSITIONS, TABLE_HEAD_DIM / 2);
  c.dtype = PE_F32;
  c.threads = 1;
  c.bytes = (double)TABLE_POSITIONS * TABLE_HEAD_DIM * 4; /* written */
  c.call = table_call;
  c.probe[0] = probe_flat(c.bytes);
  c.n_probe = 1;
  progress("[%.0fs] table build", (now_ns() - run_start) / 1e9);
  result *r = measure(&c);
  if (!r->error[0]) {
    double pairs = (double)TABLE_POSITIONS * (TABLE_HEAD_DIM / 2);
    snprintf(r->note, sizeof r->note, "%.3f ns/pair, max err %.2e", r->ns.med / pairs,
             table_max_error());
  }
  free_probes(&c);
}

/* ------------------------------------------------------------------------ */
/* alibi and t5                                                             */
/* ------------------------------------------------------------------------ */

typedef struct bias_state {
  pe_tensor scores;
  float *slopes, *t5_table;
  uint32_t flags;
  alibi_fn alibi;
  t5_fn t5;
} bias_state;

static pe_status alibi_call(bench_case *c) {
  bias_state *s = c->st;
  return s->alibi(&s->scores, s->slopes, NULL, s->flags, c->pool);
}

static pe_status t5_call(bench_case *c) {
  bias_state *s = c->st;
  return s->t5(&s->scores, s->t5_table, 0, 32, 128, NULL, s->flags, c->pool);
}

static void bias_suite(const char *suite) {
  int is_t5 = !strcmp(suite, "t5");
  bias_state s;
  memset(&s, 0, sizeof s);
  if (is_t5)
    s.t5 = (t5_fn)optional_symbol("pe_t5_add_bias");
  else
    s.alibi = (alibi_fn)optional_symbol("pe_alibi_add_bias");
  alibi_slopes_fn slopes_fn = (alibi_slopes_fn)optional_symbol("pe_alibi_slopes");
  if ((is_t5 && !s.t5) || (!is_t5 && (!s.alibi || !slopes_fn))) {
    not_available(suite, is_t5 ? "pe_t5_add_bias is not in this library"
                               : "pe_alibi_add_bias is not in this library");
    return;
  }
  int heads = geometry().heads;
  s.slopes = xalloc((size_t)heads * sizeof(float));
  if (!is_t5 && slopes_fn(heads, 8.0, s.slopes) != PE_OK)
    for (int h = 0; h < heads; h++) s.slopes[h] = exp2f(-8.0f * (float)(h + 1) / (float)heads);
  s.t5_table = xalloc((size_t)32 * (size_t)heads * sizeof(float));
  for (int i = 0; i < 32 * heads; i++) s.t5_table[i] = frand();
  static const struct { const char *name; int64_t q, k; uint32_t flags; } shapes[] = {
      {"decode 1x%dx1x4096", 1, 4096, 0}, {"prefill 1x%dx512x512 causal", 512, 512, PE_MASK_CAUSAL}};
  int dts[3] = {PE_F32, PE_F16, PE_BF16}, n_dt = 3;
  if (opt.dtype >= 0) dts[0] = opt.dtype, n_dt = 1;
  for (int ti = 0; ti < opt.n_threads; ti++)
    for (int si = 0; si < 2; si++)
      for (int di = 0; di < n_dt; di++) {
        int dt = dts[di];
        if (dt != PE_F32 && si == 0 && opt.dtype < 0) continue; /* decode: f32 only by default */
        bench_case c;
        memset(&c, 0, sizeof c);
        c.suite = suite;
        snprintf(c.name, sizeof c.name, shapes[si].name, heads);
        c.dtype = dt;
        c.threads = opt.threads[ti];
        c.pool = pool_for(c.threads);
        s.scores = make_tensor(dt, 1, heads, shapes[si].q, shapes[si].k, 0);
        s.flags = shapes[si].flags;
        c.bytes = 2.0 * (double)tensor_bytes(&s.scores);
        c.call = is_t5 ? t5_call : alibi_call;
        c.st = &s;
        c.probe[0] = probe_like(&s.scores, shapes[si].k);
        c.n_probe = 1;
        progress("[%.0fs] %s %s %s %d thr", (now_ns() - run_start) / 1e9, suite, c.name,
                 dtype_name(dt), c.threads);
        measure(&c);
        free_probes(&c);
        free(s.scores.data);
      }
  free(s.slopes);
  free(s.t5_table);
}

/* ------------------------------------------------------------------------ */
/* sinusoidal and learned                                                   */
/* ------------------------------------------------------------------------ */

typedef struct embed_state {
  pe_tensor x, table;
  int64_t *pos;
  sin_fn sinusoidal;
  learned_fn learned;
} embed_state;

static pe_status sinusoidal_call(bench_case *c) {
  embed_state *s = c->st;
  return s->sinusoidal(&s->x, s->pos, 10000.0, 0, c->pool);
}

static pe_status learned_call(bench_case *c) {
  embed_state *s = c->st;
  return s->learned(&s->x, &s->table, s->pos, c->pool);
}

#define LEARNED_MAX_LEN 2048

static void embed_suite(const char *suite) {
  int is_learned = !strcmp(suite, "learned");
  embed_state s;
  memset(&s, 0, sizeof s);
  if (is_learned)
    s.learned = (learned_fn)optional_symbol("pe_learned_add");
  else
    s.sinusoidal = (sin_fn)optional_symbol("pe_sinusoidal_add");
  if (!s.learned && !s.sinusoidal) {
    not_available(suite, is_learned ? "pe_learned_add is not in this library"
                                    : "pe_sinusoidal_add is not in this library");
    return;
  }
  rope_geom g = geometry();
  int64_t d_model = (int64_t)g.heads * g.head_dim;
  if (is_learned) s.table = make_tensor(PE_F32, 1, 1, LEARNED_MAX_LEN, d_model, 0);
  int64_t token_counts[2] = {1, 512};
  int n_cases = 2;
  if (opt.tokens) token_counts[0] = opt.tokens, n_cases = 1;
  int dts[3] = {PE_F32, PE_F16, PE_BF16}, n_dt = 3;
  if (opt.dtype >= 0) dts[0] = opt.dtype, n_dt = 1;
  for (int ti = 0; ti < opt.n_threads; ti++)
    for (int ci = 0; ci < n_cases; ci++)
      for (int di = 0; di < n_dt; di++) {
        int dt = dts[di];
        int64_t T = token_counts[ci];
        if (is_learned && T > LEARNED_MAX_LEN) continue;
        if (dt != PE_F32 && T == 1 && opt.dtype < 0) continue;
        bench_case c;
        memset(&c, 0, sizeof c);
        c.suite = suite;
        snprintf(c.name, sizeof c.name, "%s %" PRId64 " tok x %" PRId64, T == 1 ? "decode" : "prefill",
                 T, d_model);
        c.dtype = dt;
        c.threads = opt.threads[ti];
        c.pool = pool_for(c.threads);
        s.x = make_tensor(dt, opt.batch, 1, T, d_model, 0);
        s.pos = NULL;
        if (T == 1) {
          s.pos = xalloc((size_t)opt.batch * sizeof *s.pos);
          for (int64_t b = 0; b < opt.batch; b++) s.pos[b] = 1000 + b;
        }
        c.bytes = 2.0 * (double)tensor_bytes(&s.x);
        if (is_learned) c.bytes += (double)(opt.batch * T * d_model) * 4; /* table rows read */
        c.call = is_learned ? learned_call : sinusoidal_call;
        c.st = &s;
        if (is_learned)
          c.probe[0] = probe_flat(c.bytes);
        else
          c.probe[0] = probe_like(&s.x, d_model);
        c.n_probe = 1;
        if (is_learned) snprintf(c.note, sizeof c.note, "table f32 [%d][%" PRId64 "]", LEARNED_MAX_LEN, d_model);
        progress("[%.0fs] %s %s %s %d thr", (now_ns() - run_start) / 1e9, suite, c.name,
                 dtype_name(dt), c.threads);
        measure(&c);
        free_probes(&c);
        free(s.x.data);
        free(s.pos);
      }
  free(s.table.data);
}

/* ------------------------------------------------------------------------ */
/* cutover: where a pool starts to pay                                      */
/* ------------------------------------------------------------------------ */

/* ns of one call (median and min of `samples`), each after `gap_us` of sleep
 * (0: back to back, several calls per sample). */
static stats rope_call_ns(rope_state *s, pe_threadpool *pool, long gap_us, int samples) {
  double *v = calloc((size_t)samples, sizeof *v);
  if (!v) abort();
  int64_t iters = 1;
  if (!gap_us) {
    pe_apply_rope_qk(s->cache, &s->q, &s->k, NULL, 0, pool);
    double t0 = now_ns();
    pe_apply_rope_qk(s->cache, &s->q, &s->k, NULL, 0, pool);
    iters = iterations_for(now_ns() - t0);
  }
  for (int i = 0; i < samples; i++) {
    if (gap_us) {
      sleep_us(gap_us);
    } else {
      pe_apply_rope_qk(s->cache, &s->q, &s->k, NULL, 0, pool);
    }
    double t0 = now_ns();
    for (int64_t it = 0; it < iters; it++) pe_apply_rope_qk(s->cache, &s->q, &s->k, NULL, 0, pool);
    v[i] = (now_ns() - t0) / (double)iters;
  }
  stats st = summarise(v, samples);
  free(v);
  return st;
}

static pe_threadpool *cutover_raw; /* cut-over disabled */

static int cutover_threads(void) {
  return opt.threads_given && opt.threads[opt.n_threads - 1] > 1 ? opt.threads[opt.n_threads - 1] : 2;
}

static void cutover_prepare(void) {
  setenv("PE_POOL_MIN_BYTES", "0", 1);
  if (pe_threadpool_create(cutover_threads(), &cutover_raw) != PE_OK) cutover_raw = NULL;
  unsetenv("PE_POOL_MIN_BYTES");
}

static void suite_cutover(void) {
  int th = cutover_threads();
  pe_threadpool *raw = cutover_raw, *dflt = pool_for(th);
  if (!raw) {
    not_available("cutover", "pe_threadpool_create failed");
    return;
  }
  rope_geom g = geometry();
  static const int64_t toks[] = {1, 2, 4, 8, 12, 16, 24, 32, 64, 128, 256, 512};
  for (size_t i = 0; i < sizeof toks / sizeof toks[0]; i++) {
    rope_state s;
    memset(&s, 0, sizeof s);
    char why[200];
    if (rope_cache_for(&g, 8192, &s.cache, why, sizeof why) != PE_OK) {
      not_available("cutover", why);
      break;
    }
    s.q = make_tensor(PE_F32, 1, g.heads, toks[i], g.head_dim, opt.bthd);
    s.k = make_tensor(PE_F32, 1, g.kv_heads, toks[i], g.head_dim, opt.bthd);
    progress("[%.0fs] cutover %" PRId64 " tokens", (now_ns() - run_start) / 1e9, toks[i]);
    double bytes = 2.0 * (double)((g.heads + g.kv_heads) * toks[i]) * g.rotary_dim * 4;
    int cold_samples = opt.reps * 3;
    disturbance dist = disturbance_start();
    /* Interleaved per sample round so that load from other processes hits
     * the three variants alike. */
    stats hot1 = rope_call_ns(&s, NULL, 0, opt.reps), hotp = rope_call_ns(&s, raw, 0, opt.reps);
    stats hotd = rope_call_ns(&s, dflt, 0, opt.reps);
    stats cold1 = rope_call_ns(&s, NULL, 2000, cold_samples);
    stats coldp = rope_call_ns(&s, raw, 2000, cold_samples);
    stats coldd = rope_call_ns(&s, dflt, 2000, cold_samples);
    bench_case c;
    memset(&c, 0, sizeof c);
    c.suite = "cutover";
    snprintf(c.name, sizeof c.name, "%s %" PRId64 " tok (%.0f KiB)", model_label(), toks[i],
             bytes / 1024);
    c.dtype = PE_F32;
    c.threads = th;
    c.bytes = bytes;
    result *r = new_result(&c);
    r->ns = hotp;
    r->speedup_1t = hot1.med / hotp.med;
    disturbance_end(&dist, r);
    /* x = one thread's time / the pool's: median (best of the samples) */
    snprintf(r->note, sizeof r->note,
             "split hot x%.2f (%.2f) cold x%.2f (%.2f); cut-over hot x%.2f cold x%.2f",
             hot1.med / hotp.med, hot1.min / hotp.min, cold1.med / coldp.med, cold1.min / coldp.min,
             hot1.med / hotd.med, cold1.med / coldd.med);
    free(s.q.data);
    free(s.k.data);
    pe_rope_cache_destroy(s.cache);
  }
}

/* ------------------------------------------------------------------------ */
/* fused: RoPE for serving engines (issue 10)                               */
/* ------------------------------------------------------------------------ */

/* Each case's baseline is what an engine does without the fused entry
 * point, timed interleaved with it in the same run; its ratio is the
 * "x textbook loop" column (baseline ns / kernel ns):
 *   store   pe_apply_rope_qk_store  vs  pe_apply_rope_qk + copying k's rows
 *           into their cache slots (vLLM's rotary_embedding + reshape_and_cache);
 *   mrope   pe_apply_mrope_qk       vs  pe_apply_rope_qk (plain RoPE, same shape);
 *   multi   pe_apply_rope_qk_multi  vs  one pe_apply_rope_qk per batch row. */
typedef pe_status (*store_fn)(const pe_rope_cache *, const pe_tensor *, const pe_tensor *,
                              const pe_tensor *, const int64_t *, const int64_t *, uint32_t,
                              pe_threadpool *);
typedef pe_status (*mrope_fn)(const pe_rope_cache *, const pe_tensor *, const pe_tensor *,
                              const int64_t *, const int32_t *, uint32_t, pe_threadpool *);
typedef pe_status (*multi_fn)(const pe_rope_cache *const *, int32_t, const int32_t *,
                              const pe_tensor *, const pe_tensor *, const int64_t *, uint32_t,
                              pe_threadpool *);

#define FUSED_BLOCK 16 /* cache block size (tokens), vLLM's default */
#define FUSED_CACHES 4

typedef struct fused_state {
  pe_rope_cache *cache, *caches[FUSED_CACHES];
  pe_tensor q, k, kv;  /* kv: [blocks, kv_heads, FUSED_BLOCK, head_dim], NHD storage */
  pe_tensor *qp;       /* &q or NULL (k only) */
  int64_t *slots, *pos, *pos3;
  int32_t *index;
  int32_t section[3];
  store_fn store;
  mrope_fn mrope;
  multi_fn multi;
} fused_state;

static pe_status fused_store_call(bench_case *c) {
  fused_state *s = c->st;
  return s->store(s->cache, s->qp, &s->k, &s->kv, s->slots, s->pos, 0, c->pool);
}

/* The unfused pair: rotate k (and q) in place, then copy each token's rows
 * to its slot (same dtype: memcpy per head row). */
static void fused_store_baseline(bench_case *c) {
  fused_state *s = c->st;
  pe_apply_rope_qk(s->cache, s->qp, &s->k, s->pos, 0, c->pool);
  size_t es = dtype_size(s->k.dtype), row = (size_t)s->k.shape[3] * es;
  for (int64_t b = 0; b < s->k.shape[0]; b++)
    for (int64_t t = 0; t < s->k.shape[2]; t++) {
      int64_t slot = s->slots[b * s->k.shape[2] + t];
      if (slot < 0) continue;
      const char *src = (const char *)s->k.data + (b * s->k.stride[0] + t * s->k.stride[2]) * (int64_t)es;
      char *dst = (char *)s->kv.data +
                  ((slot / FUSED_BLOCK) * s->kv.stride[0] + (slot % FUSED_BLOCK) * s->kv.stride[2]) * (int64_t)es;
      for (int64_t h = 0; h < s->k.shape[1]; h++)
        memcpy(dst + h * s->kv.stride[1] * (int64_t)es, src + h * s->k.stride[1] * (int64_t)es, row);
    }
}

static pe_status fused_mrope_call(bench_case *c) {
  fused_state *s = c->st;
  return s->mrope(s->cache, &s->q, &s->k, s->pos3, s->section, 0, c->pool);
}
static void fused_mrope_baseline(bench_case *c) {
  fused_state *s = c->st;
  pe_apply_rope_qk(s->cache, &s->q, &s->k, s->pos, 0, c->pool);
}

static pe_status fused_multi_call(bench_case *c) {
  fused_state *s = c->st;
  return s->multi((const pe_rope_cache *const *)s->caches, FUSED_CACHES, s->index, &s->q, &s->k,
                  s->pos, 0, c->pool);
}
static void fused_multi_baseline(bench_case *c) {
  fused_state *s = c->st;
  for (int64_t b = 0; b < s->q.shape[0]; b++) {
    pe_tensor q = s->q, k = s->k;
    q.data = (char *)q.data + b * q.stride[0] * (int64_t)dtype_size(q.dtype);
    k.data = (char *)k.data + b * k.stride[0] * (int64_t)dtype_size(k.dtype);
    q.shape[0] = k.shape[0] = 1;
    pe_apply_rope_qk(s->caches[s->index[b]], &q, &k, s->pos + b * q.shape[2], 0, c->pool);
  }
}

static void fused_free(fused_state *s) {
  free(s->q.data);
  free(s->k.data);
  free(s->kv.data);
  free(s->slots);
  free(s->pos);
  free(s->pos3);
  free(s->index);
  pe_rope_cache_destroy(s->cache);
  for (int i = 0; i < FUSED_CACHES; i++) pe_rope_cache_destroy(s->caches[i]);
}

/* kind: 0 store k, 1 store q+k, 2 mrope, 3 multi. */
static void fused_case(int kind, int64_t batch, int64_t tokens, int dt, int threads) {
  static const char *const kinds[4] = {"store k", "store q+k", "mrope", "multi"};
  fused_state s;
  memset(&s, 0, sizeof s);
  s.store = (store_fn)optional_symbol("pe_apply_rope_qk_store");
  s.mrope = (mrope_fn)optional_symbol("pe_apply_mrope_qk");
  s.multi = (multi_fn)optional_symbol("pe_apply_rope_qk_multi");
  if ((kind <= 1 && !s.store) || (kind == 2 && !s.mrope) || (kind == 3 && !s.multi)) {
    not_available("fused", kind <= 1 ? "pe_apply_rope_qk_store is not in this library"
                           : kind == 2 ? "pe_apply_mrope_qk is not in this library"
                                       : "pe_apply_rope_qk_multi is not in this library");
    return;
  }
  rope_geom g = geometry();
  if (kind == 2) { /* Qwen2-VL-7B's text model: 28q/4kv x 128, theta 1e6, sections 16/24/24 */
    g.heads = 28, g.kv_heads = 4, g.head_dim = 128, g.rotary_dim = 128, g.style = PE_ROPE_NEOX;
    g.base = 1000000.0;
  }
  int64_t max_pos = tokens + 64 > 8192 ? tokens + 64 : 8192;
  char why[200] = "";
  if (rope_cache_for(&g, max_pos, &s.cache, why, sizeof why) != PE_OK) {
    not_available("fused", why);
    return;
  }
  s.q = make_tensor(dt, batch, g.heads, tokens, g.head_dim, 1);
  s.k = make_tensor(dt, batch, g.kv_heads, tokens, g.head_dim, 1);
  s.pos = xalloc((size_t)(batch * tokens) * sizeof *s.pos);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t t = 0; t < tokens; t++) s.pos[b * tokens + t] = (tokens == 1 ? 4000 + 7 * b : 0) + t;
  bench_case c;
  memset(&c, 0, sizeof c);
  c.suite = "fused";
  snprintf(c.name, sizeof c.name, "%s %s %" PRId64 "x%" PRId64, kinds[kind],
           kind == 2 ? "qwen2-vl-7b" : model_label(), batch, tokens);
  c.dtype = dt;
  c.threads = threads;
  c.pool = pool_for(threads);
  c.st = &s;
  double es = (double)dtype_size(dt), qb = (double)(batch * g.heads * tokens) * g.head_dim * es,
         kb = (double)(batch * g.kv_heads * tokens) * g.head_dim * es;
  if (kind <= 1) {
    int64_t blocks = (batch * tokens + FUSED_BLOCK - 1) / FUSED_BLOCK + 2;
    s.kv.data = xalloc((size_t)(blocks * FUSED_BLOCK * g.kv_heads * g.head_dim) * dtype_size(dt));
    memset(s.kv.data, 0, (size_t)(blocks * FUSED_BLOCK * g.kv_heads * g.head_dim) * dtype_size(dt));
    s.kv.dtype = (pe_dtype)dt;
    s.kv.shape[0] = blocks, s.kv.shape[1] = g.kv_heads, s.kv.shape[2] = FUSED_BLOCK;
    s.kv.shape[3] = g.head_dim;
    s.kv.stride[0] = FUSED_BLOCK * g.kv_heads * g.head_dim, s.kv.stride[1] = g.head_dim;
    s.kv.stride[2] = g.kv_heads * g.head_dim, s.kv.stride[3] = 1;
    s.slots = xalloc((size_t)(batch * tokens) * sizeof *s.slots);
    for (int64_t i = 0; i < batch * tokens; i++) s.slots[i] = FUSED_BLOCK + i; /* block 0 unused */
    s.qp = kind == 1 ? &s.q : NULL;
    c.call = fused_store_call;
    c.textbook = fused_store_baseline;
    c.bytes = 2.0 * kb + (kind == 1 ? 2.0 * qb : 0.0); /* k read + cache written (+ q r/w) */
    c.probe[0] = probe_like(&s.k, g.head_dim);
    c.n_probe = 1;
    if (kind == 1) c.probe[c.n_probe++] = probe_like(&s.q, g.head_dim);
    snprintf(c.note, sizeof c.note, "x textbook loop = vs apply + copy to the cache; %dq/%dkv x %d",
             g.heads, g.kv_heads, g.head_dim);
  } else if (kind == 2) {
    s.section[0] = 16, s.section[1] = 24, s.section[2] = 24;
    s.pos3 = xalloc((size_t)(3 * batch * tokens) * sizeof *s.pos3);
    /* a 32x32 image grid after a text prefix, then text */
    for (int64_t b = 0; b < batch; b++)
      for (int64_t t = 0; t < tokens; t++) {
        int64_t i = b * tokens + t, img = t >= 16 && t < 16 + 1024 ? t - 16 : -1;
        s.pos3[i] = img >= 0 ? 16 : t < 16 ? t : t - 1024 + 32;
        s.pos3[batch * tokens + i] = img >= 0 ? 16 + img / 32 : s.pos3[i];
        s.pos3[2 * batch * tokens + i] = img >= 0 ? 16 + img % 32 : s.pos3[i];
      }
    c.call = fused_mrope_call;
    c.textbook = fused_mrope_baseline;
    c.bytes = 2.0 * (qb + kb);
    c.probe[0] = probe_like(&s.q, g.head_dim);
    c.probe[1] = probe_like(&s.k, g.head_dim);
    c.n_probe = 2;
    snprintf(c.note, sizeof c.note, "x textbook loop = vs plain RoPE; Qwen2-VL 28q/4kv x 128, 32x32 image");
  } else {
    static const double factors[FUSED_CACHES] = {1.0, 2.0, 4.0, 8.0};
    for (int i = 0; i < FUSED_CACHES; i++) {
      pe_rope_params p;
      pe_rope_params_init(&p);
      p.head_dim = g.head_dim, p.rotary_dim = g.rotary_dim, p.style = g.style, p.base = g.base;
      p.max_positions = max_pos;
      p.scaling = i ? PE_ROPE_SCALING_DYNAMIC : PE_ROPE_SCALING_NONE;
      p.factor = factors[i];
      p.original_max_positions = 8192;
      p.seq_len = (int64_t)(8192 * factors[i]);
      if (pe_rope_cache_create(&p, &s.caches[i]) != PE_OK) {
        not_available("fused", pe_last_error());
        fused_free(&s);
        return;
      }
    }
    s.index = xalloc((size_t)batch * sizeof *s.index);
    for (int64_t b = 0; b < batch; b++) s.index[b] = (int32_t)(b % FUSED_CACHES);
    c.call = fused_multi_call;
    c.textbook = fused_multi_baseline;
    c.bytes = 2.0 * (qb + kb);
    c.probe[0] = probe_like(&s.q, g.head_dim);
    c.probe[1] = probe_like(&s.k, g.head_dim);
    c.n_probe = 2;
    snprintf(c.note, sizeof c.note, "x textbook loop = vs one call per row; %d dynamic-NTK caches", FUSED_CACHES);
  }
  progress("[%.0fs] fused %s %s %d thr", (now_ns() - run_start) / 1e9, c.name, dtype_name(dt), threads);
  measure(&c);
  free_probes(&c);
  fused_free(&s);
}

static void suite_fused(void) {
  for (int ti = 0; ti < opt.n_threads; ti++) {
    int th = opt.threads[ti];
    int64_t T = opt.tokens ? opt.tokens : 4096;
    for (int d = 0; d < 2; d++) {
      int dt = opt.dtype >= 0 ? opt.dtype : d ? PE_BF16 : PE_F32;
      fused_case(0, opt.batch, T, dt, th);
      fused_case(1, opt.batch, T, dt, th);
      if (opt.dtype >= 0) break;
    }
    int dt = opt.dtype >= 0 ? opt.dtype : PE_BF16;
    fused_case(2, 1, opt.tokens ? opt.tokens : 2048, dt, th);
    fused_case(3, 8, 1, dt, th);     /* decode: 8 sequences, 4 frequency sets */
    fused_case(3, 4, 512, dt, th);   /* prefill chunks of 4 sequences */
  }
}

/* ------------------------------------------------------------------------ */
/* qknorm: QK-norm + RoPE + K and V into the paged cache (issue 16)          */
/* ------------------------------------------------------------------------ */

/* Qwen3-8B's attention (32 q / 8 kv heads x 128, NeoX, theta 1e6, per-head
 * RMSNorm eps 1e-6) on a packed QKV buffer [B, T, (32 + 2*8) * 128] and an
 * NHD paged cache of the same dtype. The call is pe_qk_norm_rope_store; the
 * "x textbook" column is the unfused sequence an engine runs without it,
 * timed interleaved: a plain C RMSNorm loop over each q and k head row (in
 * place, float32 sum), pe_apply_rope_qk, then memcpy of each token's k and v
 * rows into their slots. The bound streams the bytes the fused call touches
 * once: q read and written, k and v read, their cache rows written. */
typedef pe_status (*qkn_store_fn)(const pe_rope_cache *, const pe_qk_norm *, const pe_tensor *,
                                  const pe_tensor *, const pe_tensor *, const pe_kv_cache *,
                                  const int64_t *, const int64_t *, uint32_t, pe_threadpool *);

typedef struct qkn_state {
  pe_rope_cache *cache;
  pe_qk_norm norm;
  pe_kv_cache kv;
  pe_tensor q, k, v, kc, vc;
  float *qw, *kw;
  void *qkv;
  int64_t *slots, *pos;
  qkn_store_fn store;
} qkn_state;

static pe_status qkn_call(bench_case *c) {
  qkn_state *s = c->st;
  return s->store(s->cache, &s->norm, &s->q, &s->k, &s->v, &s->kv, s->slots, s->pos, 0, c->pool);
}

static float qkn_load(int dt, const void *p, int64_t i) {
  if (dt == PE_F32) return ((const float *)p)[i];
  uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16; /* bf16 */
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static void qkn_store(int dt, void *p, int64_t i, float f) {
  if (dt == PE_F32) {
    ((float *)p)[i] = f;
    return;
  }
  uint32_t u;
  memcpy(&u, &f, 4);
  ((uint16_t *)p)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* RNE, no NaN here */
}

/* The plain RMSNorm of every head row of x, in place (Qwen3RMSNorm). */
static void qkn_rmsnorm(const pe_tensor *x, const float *w, float eps) {
  int dt = x->dtype;
  int64_t hd = x->shape[3], es = (int64_t)dtype_size(dt);
  for (int64_t b = 0; b < x->shape[0]; b++)
    for (int64_t t = 0; t < x->shape[2]; t++)
      for (int64_t h = 0; h < x->shape[1]; h++) {
        char *row = (char *)x->data + (b * x->stride[0] + t * x->stride[2] + h * x->stride[1]) * es;
        float ss = 0;
        for (int64_t e = 0; e < hd; e++) {
          float v = qkn_load(dt, row, e);
          ss += v * v;
        }
        float r = 1.0f / sqrtf(ss / (float)hd + eps);
        for (int64_t e = 0; e < hd; e++) qkn_store(dt, row, e, qkn_load(dt, row, e) * r * w[e]);
      }
}

/* Each token's rows of x copied to its slot of cache (same dtype). */
static void qkn_copy_rows(const pe_tensor *x, const pe_tensor *cache, const int64_t *slots) {
  size_t es = dtype_size(x->dtype), row = (size_t)x->shape[3] * es;
  for (int64_t b = 0; b < x->shape[0]; b++)
    for (int64_t t = 0; t < x->shape[2]; t++) {
      int64_t slot = slots[b * x->shape[2] + t];
      if (slot < 0) continue;
      const char *src = (const char *)x->data + (b * x->stride[0] + t * x->stride[2]) * (int64_t)es;
      char *dst = (char *)cache->data + ((slot / FUSED_BLOCK) * cache->stride[0] +
                                         (slot % FUSED_BLOCK) * cache->stride[2]) * (int64_t)es;
      for (int64_t h = 0; h < x->shape[1]; h++)
        memcpy(dst + h * cache->stride[1] * (int64_t)es, src + h * x->stride[1] * (int64_t)es, row);
    }
}

static void qkn_unfused(bench_case *c) {
  qkn_state *s = c->st;
  qkn_rmsnorm(&s->q, s->qw, s->norm.eps);
  qkn_rmsnorm(&s->k, s->kw, s->norm.eps);
  pe_apply_rope_qk(s->cache, &s->q, &s->k, s->pos, 0, c->pool);
  qkn_copy_rows(&s->k, &s->kc, s->slots);
  qkn_copy_rows(&s->v, &s->vc, s->slots);
}

/* The setup the qknorm and kvquant suites share: a NeoX rope cache of
 * head_dim hd and base theta covering `tokens` positions, and a packed QKV
 * buffer [batch, tokens, (hq + 2*hkv) * hd] of dtype dt, filled, with q, k and
 * v as [B, H, T, D] views of it. 0, or -1 after not_available(suite, ...). */
static int packed_qkv(const char *suite, int64_t hq, int64_t hkv, int64_t hd, double theta,
                      int64_t batch, int64_t tokens, int dt, pe_rope_cache **cache, void **qkv,
                      pe_tensor *q, pe_tensor *k, pe_tensor *v) {
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = (int32_t)hd, p.style = PE_ROPE_NEOX, p.base = theta;
  p.max_positions = tokens + 64 > 8192 ? tokens + 64 : 8192;
  if (pe_rope_cache_create(&p, cache) != PE_OK) {
    not_available(suite, pe_last_error());
    return -1;
  }
  int64_t row = (hq + 2 * hkv) * hd, n = batch * tokens, es = (int64_t)dtype_size(dt);
  *qkv = xalloc((size_t)(n * row * es));
  fill(*qkv, dt, (size_t)(n * row));
  pe_tensor base = {*qkv, (pe_dtype)dt, {batch, hq, tokens, hd}, {tokens * row, hd, row, 1}};
  *q = *k = *v = base;
  k->shape[1] = v->shape[1] = hkv;
  k->data = (char *)*qkv + hq * hd * es;
  v->data = (char *)*qkv + (hq + hkv) * hd * es;
  return 0;
}

static void qkn_case(int64_t batch, int64_t tokens, int dt, int threads) {
  enum { HQ = 32, HKV = 8, HD = 128 };
  qkn_state s;
  memset(&s, 0, sizeof s);
  s.store = (qkn_store_fn)optional_symbol("pe_qk_norm_rope_store");
  if (!s.store) {
    not_available("qknorm", "pe_qk_norm_rope_store is not in this library");
    return;
  }
  if (packed_qkv("qknorm", HQ, HKV, HD, 1000000.0, batch, tokens, dt, &s.cache, &s.qkv, &s.q, &s.k,
                 &s.v))
    return;
  int64_t row = (HQ + 2 * HKV) * HD, n = batch * tokens, es = (int64_t)dtype_size(dt);
  int64_t blocks = (n + FUSED_BLOCK - 1) / FUSED_BLOCK + 2;
  size_t cache_elems = (size_t)(blocks * FUSED_BLOCK * HKV * HD);
  pe_tensor kc = {xalloc(cache_elems * (size_t)es), (pe_dtype)dt, {blocks, HKV, FUSED_BLOCK, HD},
                  {FUSED_BLOCK * HKV * HD, HD, HKV * HD, 1}};
  memset(kc.data, 0, cache_elems * (size_t)es);
  s.kc = s.vc = kc;
  s.vc.data = xalloc(cache_elems * (size_t)es);
  memset(s.vc.data, 0, cache_elems * (size_t)es);
  s.qw = xalloc(HD * sizeof(float));
  s.kw = xalloc(HD * sizeof(float));
  /* Weights of magnitude 1 (random signs): every timed call norms the same
   * tensors again in place, and weights 1 + rand/8 multiplied the channels'
   * ratios call after call until half the bf16 values were subnormal (4000
   * calls), which sent the bf16 rounding to its slow exact path: a figure of
   * the benchmark's data, not of a layer's (0.074 vs 0.11-0.13 of the bound
   * on fresh data, Zen 4 bf16 decode). A weight's value costs nothing. */
  for (int i = 0; i < HD; i++)
    s.qw[i] = frand() < 0 ? -1.0f : 1.0f, s.kw[i] = frand() < 0 ? -1.0f : 1.0f;
  pe_qk_norm_init(&s.norm);
  s.norm.kind = PE_QK_NORM_RMS;
  s.norm.eps = 1e-6f;
  s.norm.q_weight = s.qw;
  s.norm.k_weight = s.kw;
  pe_kv_cache_init(&s.kv);
  s.kv.k = &s.kc;
  s.kv.v = &s.vc;
  s.slots = xalloc((size_t)n * sizeof *s.slots);
  s.pos = xalloc((size_t)n * sizeof *s.pos);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t t = 0; t < tokens; t++) {
      s.slots[b * tokens + t] = FUSED_BLOCK + b * tokens + t; /* block 0 unused */
      s.pos[b * tokens + t] = (tokens == 1 ? 4000 + 7 * b : 0) + t;
    }
  bench_case c;
  memset(&c, 0, sizeof c);
  c.suite = "qknorm";
  snprintf(c.name, sizeof c.name, "qwen3-8b %s %" PRId64 "x%" PRId64,
           tokens == 1 ? "decode" : "prefill", batch, tokens);
  c.dtype = dt;
  c.threads = threads;
  c.pool = pool_for(threads);
  c.st = &s;
  c.call = qkn_call;
  c.textbook = qkn_unfused;
  /* q read + written, k and v read, their cache rows written */
  c.bytes = 2.0 * (double)(n * row * es);
  c.probe[0] = probe_flat(c.bytes);
  c.n_probe = 1;
  snprintf(c.note, sizeof c.note, "x textbook = vs RMSNorm loop + apply + copy k, v; 32q/8kv x 128");
  progress("[%.0fs] qknorm %s %s %d thr", (now_ns() - run_start) / 1e9, c.name, dtype_name(dt),
           threads);
  measure(&c);
  free_probes(&c);
  free(s.qkv);
  free(s.kc.data);
  free(s.vc.data);
  free(s.qw);
  free(s.kw);
  free(s.slots);
  free(s.pos);
  pe_rope_cache_destroy(s.cache);
}

static void suite_qknorm(void) {
  for (int ti = 0; ti < opt.n_threads; ti++)
    for (int d = 0; d < 2; d++) {
      int dt = opt.dtype >= 0 ? opt.dtype : d ? PE_BF16 : PE_F32;
      if (opt.tokens) {
        qkn_case(opt.batch, opt.tokens, dt, opt.threads[ti]);
      } else {
        qkn_case(1, 1, dt, opt.threads[ti]);     /* decode, one sequence */
        qkn_case(32, 1, dt, opt.threads[ti]);    /* decode, a batch of 32 */
        qkn_case(1, 512, dt, opt.threads[ti]);   /* prefill */
      }
      if (opt.dtype >= 0) break;
    }
}

/* ------------------------------------------------------------------------ */
/* kvquant: RoPE + K and V into quantized caches (issue 17)                  */
/* ------------------------------------------------------------------------ */

/* Llama-3-8B's attention (32 q / 8 kv heads x 128, NeoX, theta 500000) on a
 * packed QKV buffer [B, T, (32 + 2*8) * 128] of the tensor dtype and NHD
 * paged caches of one quantized format (FP8 e4m3 with per-tensor scales, or
 * Q8_0), k and v alike. "store": pe_qk_norm_rope_store (no norm: RoPE, k
 * quantized into its rows, v quantized), against the unfused libposenc
 * sequence in the 'x textbook' column: pe_apply_rope_qk (q and k in place),
 * then pe_kv_write (a separate quantize pass over k and v). "shift": a
 * context shift of every cached key of one sequence on a q8_0 cache,
 * pe_rope_shift_k_cache, against pe_kv_read (dequantize to f32) +
 * pe_rope_shift_k + pe_kv_write. The bound streams the bytes the fused call
 * touches once: store: q read and written, k and v read, their quantized
 * rows written; shift: the quantized rows read and written. */
typedef pe_status (*kvq_io_fn)(const pe_kv_cache *, const pe_tensor *, const pe_tensor *,
                               const int64_t *);
typedef pe_status (*kvq_shift_fn)(const pe_rope_cache *, const pe_kv_cache *, const int64_t *,
                                  const int64_t *, int64_t, pe_threadpool *);

typedef struct kvq_state {
  pe_rope_cache *cache;
  pe_qk_norm norm;
  pe_kv_cache kv;
  pe_tensor q, k, v, kc, vc, tmp; /* tmp: shift's f32 rows [1, 8, n, 128] */
  void *qkv;
  int64_t *slots, *pos, *deltas, n;
  int with_q; /* store: q rotated in the same call (else only the kv heads) */
  float kscale, vscale;
  qkn_store_fn store;
  kvq_io_fn read, write;
  kvq_shift_fn shift;
} kvq_state;

static pe_status kvq_store_call(bench_case *c) {
  kvq_state *s = c->st;
  return s->store(s->cache, &s->norm, s->with_q ? &s->q : NULL, &s->k, &s->v, &s->kv, s->slots,
                  s->pos, 0, c->pool);
}
static void kvq_store_unfused(bench_case *c) {
  kvq_state *s = c->st;
  pe_apply_rope_qk(s->cache, s->with_q ? &s->q : NULL, &s->k, s->pos, 0, c->pool);
  s->write(&s->kv, &s->k, &s->v, s->slots);
}
static pe_status kvq_shift_call(bench_case *c) {
  kvq_state *s = c->st;
  return s->shift(s->cache, &s->kv, s->slots, s->deltas, s->n, c->pool);
}
static void kvq_shift_unfused(bench_case *c) {
  kvq_state *s = c->st;
  s->read(&s->kv, &s->tmp, NULL, s->slots);
  pe_rope_shift_k(s->cache, &s->tmp, s->deltas, c->pool);
  s->write(&s->kv, &s->tmp, NULL, s->slots);
}

/* kind 0: store of batch x tokens (q, k and v); 2: the same with the kv
 * heads alone (q not passed: what the quantizing store itself adds over a
 * rope pass and a quantize pass); 1: shift of `tokens` cached keys, the
 * unfused side's f32 rows head-major [1, 8, n, 128] (one pe_kv_read /
 * pe_kv_write kernel call per 128-value row); 3: the same shift with those
 * rows token-major (the cache's own order: the 8 heads of a slot adjacent,
 * one kernel call per slot each way, the faster unfused sequence). fp8_scale:
 * the fp8 k and v scales (0: 0.05 and 0.02; a power of two such as 1.0,
 * vLLM's uncalibrated k_scale, takes the vector kernels' multiply-by-
 * reciprocal path instead of the divide). */
static void kvq_case(int kind, uint32_t fmt, int64_t batch, int64_t tokens, int dt, int threads,
                     float fp8_scale) {
  const int with_q = kind == 0, tok_major = kind == 3;
  if (kind == 2) kind = 0;
  if (kind == 3) kind = 1;
  enum { HQ = 32, HKV = 8, HD = 128 };
  kvq_state s;
  memset(&s, 0, sizeof s);
  s.store = (qkn_store_fn)optional_symbol("pe_qk_norm_rope_store");
  s.read = (kvq_io_fn)optional_symbol("pe_kv_read");
  s.write = (kvq_io_fn)optional_symbol("pe_kv_write");
  s.shift = (kvq_shift_fn)optional_symbol("pe_rope_shift_k_cache");
  if (!s.store || !s.read || !s.write || !s.shift) {
    not_available("kvquant", "the quantized-cache calls are not in this library");
    return;
  }
  if (packed_qkv("kvquant", HQ, HKV, HD, 500000.0, batch, tokens, dt, &s.cache, &s.qkv, &s.q,
                 &s.k, &s.v))
    return;
  int64_t n = batch * tokens, es = (int64_t)dtype_size(dt);
  int64_t rb = fmt == PE_KV_Q8_0 ? HD / 32 * 34 : HD;
  int64_t blocks = (n + FUSED_BLOCK - 1) / FUSED_BLOCK + 2;
  size_t cache_bytes = (size_t)(blocks * FUSED_BLOCK * HKV * rb);
  pe_tensor kc = {xalloc(cache_bytes), PE_F32, {blocks, HKV, FUSED_BLOCK, HD},
                  {FUSED_BLOCK * HKV * rb, rb, HKV * rb, 1}}; /* bytes: dtype not read */
  memset(kc.data, 0, cache_bytes);
  s.kc = s.vc = kc;
  s.vc.data = xalloc(cache_bytes);
  memset(s.vc.data, 0, cache_bytes);
  pe_qk_norm_init(&s.norm);
  s.kscale = fp8_scale > 0 ? fp8_scale : 0.05f, s.vscale = fp8_scale > 0 ? fp8_scale : 0.02f;
  pe_kv_cache_init(&s.kv);
  s.kv.k = &s.kc;
  s.kv.v = &s.vc;
  s.kv.k_quant = s.kv.v_quant = fmt;
  if (fmt != PE_KV_Q8_0) s.kv.k_scale = &s.kscale, s.kv.v_scale = &s.vscale;
  s.n = n;
  s.with_q = with_q;
  s.slots = xalloc((size_t)n * sizeof *s.slots);
  s.pos = xalloc((size_t)n * sizeof *s.pos);
  s.deltas = xalloc((size_t)n * sizeof *s.deltas);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t t = 0; t < tokens; t++) {
      s.slots[b * tokens + t] = FUSED_BLOCK + b * tokens + t; /* block 0 unused */
      s.pos[b * tokens + t] = (tokens == 1 ? 4000 + 7 * b : 0) + t;
      s.deltas[b * tokens + t] = -256;
    }
  /* the cache holds real rows (the shift reads them) */
  if (s.store(s.cache, &s.norm, NULL, &s.k, &s.v, &s.kv, s.slots, s.pos, 0, NULL) != PE_OK) {
    not_available("kvquant", pe_last_error());
    goto out;
  }
  pe_tensor tmp = {NULL, PE_F32, {1, HKV, n, HD}, {HKV * n * HD, n * HD, HD, 1}};
  if (tok_major) tmp.stride[1] = HD, tmp.stride[2] = HKV * HD;
  if (kind == 1) tmp.data = xalloc((size_t)(HKV * n * HD) * sizeof(float));
  s.tmp = tmp;
  bench_case c;
  memset(&c, 0, sizeof c);
  c.suite = "kvquant";
  const char *fname = fmt == PE_KV_Q8_0 ? "q8_0" : "fp8e4m3";
  char sc_name[24] = "";
  if (fmt != PE_KV_Q8_0 && fp8_scale > 0) snprintf(sc_name, sizeof sc_name, " scale %g", fp8_scale);
  if (kind == 0)
    snprintf(c.name, sizeof c.name, "store %s %s %" PRId64 "x%" PRId64 "%s%s", fname,
             tokens == 1 ? "decode" : "prefill", batch, tokens, with_q ? "" : " kv", sc_name);
  else
    snprintf(c.name, sizeof c.name, "shift %s %" PRId64 " keys%s", fname, n,
             tok_major ? " tok-major" : "");
  c.dtype = dt;
  c.threads = threads;
  c.pool = pool_for(threads);
  c.st = &s;
  c.call = kind == 0 ? kvq_store_call : kvq_shift_call;
  c.textbook = kind == 0 ? kvq_store_unfused : kvq_shift_unfused;
  c.bytes = kind == 0 ? (double)(n * ((with_q ? 2 * HQ * HD * es : 0) + 2 * HKV * HD * es +
                                       2 * HKV * rb))
                      : (double)(2 * n * HKV * rb);
  c.probe[0] = probe_flat(c.bytes);
  c.n_probe = 1;
  snprintf(c.note, sizeof c.note, "%s",
           kind == 0 ? (with_q ? "x textbook = vs pe_apply_rope_qk + pe_kv_write (k, v)"
                               : "kv heads only (q NULL); x textbook = vs pe_apply_rope_qk(k) "
                                 "+ pe_kv_write (k, v)")
                     : tok_major ? "x textbook = vs pe_kv_read + pe_rope_shift_k + pe_kv_write, "
                                   "f32 rows token-major [n, 8, 128]"
                                 : "x textbook = vs pe_kv_read + pe_rope_shift_k + pe_kv_write, "
                                   "f32 rows head-major [8, n, 128]");
  progress("[%.0fs] kvquant %s %s %d thr", (now_ns() - run_start) / 1e9, c.name, dtype_name(dt),
           threads);
  measure(&c);
  free_probes(&c);
  free(s.tmp.data);
out:
  free(s.qkv);
  free(s.kc.data);
  free(s.vc.data);
  free(s.slots);
  free(s.pos);
  free(s.deltas);
  pe_rope_cache_destroy(s.cache);
}

static void suite_kvquant(void) {
  static const uint32_t fmts[2] = {PE_KV_FP8_E4M3, PE_KV_Q8_0};
  for (int ti = 0; ti < opt.n_threads; ti++) {
    int dt = opt.dtype >= 0 ? opt.dtype : PE_BF16;
    for (int f = 0; f < 2; f++) {
      if (opt.tokens) {
        kvq_case(0, fmts[f], opt.batch, opt.tokens, dt, opt.threads[ti], 0);
        continue;
      }
      kvq_case(0, fmts[f], 32, 1, dt, opt.threads[ti], 0);  /* decode, a batch of 32 */
      kvq_case(0, fmts[f], 1, 512, dt, opt.threads[ti], 0); /* prefill */
      kvq_case(2, fmts[f], 32, 1, dt, opt.threads[ti], 0);  /* the same, kv heads alone */
      kvq_case(2, fmts[f], 1, 512, dt, opt.threads[ti], 0);
      if (fmts[f] != PE_KV_Q8_0) /* a power-of-two scale (vLLM's default 1.0) */
        kvq_case(2, fmts[f], 1, 512, dt, opt.threads[ti], 1.0f);
    }
    if (!opt.tokens) {
      kvq_case(1, PE_KV_Q8_0, 1, 512, dt, opt.threads[ti], 0);  /* shift 512 keys */
      kvq_case(3, PE_KV_Q8_0, 1, 512, dt, opt.threads[ti], 0);  /* f32 rows token-major */
      kvq_case(1, PE_KV_Q8_0, 1, 4096, dt, opt.threads[ti], 0); /* shift a 4096 context */
      kvq_case(3, PE_KV_Q8_0, 1, 4096, dt, opt.threads[ti], 0);
    }
  }
}

/* ------------------------------------------------------------------------ */
/* output                                                                   */
/* ------------------------------------------------------------------------ */

static void cpu_model(char *out, size_t len) {
  snprintf(out, len, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "model name", 10)) {
      char *p = strchr(line, ':');
      if (p) {
        p++;
        while (*p == ' ') p++;
        p[strcspn(p, "\n")] = 0;
        snprintf(out, len, "%s", p);
      }
      break;
    }
  }
  fclose(f);
}

/* The machine's 1-minute load average when the run ended: on a shared
 * machine it says how much the figures may have been disturbed. */
static double load_average(void) {
  double l = NAN;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1) l = NAN;
    fclose(f);
  }
  return l;
}

static void fmt_num(char *out, size_t len, double v, int digits) {
  if (isnan(v))
    snprintf(out, len, "-");
  else if (fabs(v) >= 100000)
    snprintf(out, len, "%.4g", v);
  else
    snprintf(out, len, "%.*f", digits, v);
}

static void fmt_ns(char *out, size_t len, double v) {
  if (isnan(v))
    snprintf(out, len, "-");
  else if (v >= 1e6)
    snprintf(out, len, "%.0f", v);
  else if (v >= 100)
    snprintf(out, len, "%.0f", v);
  else
    snprintf(out, len, "%.1f", v);
}

#define N_COLS 15
#define COL_NOTE 14
/* The README's Results tables use these names (a subset of the columns:
 * scripts/bench-results.sh writes them from --csv). */
static const char *const col_names[N_COLS] = {
    "suite", "case", "dtype", "isa", "threads", "GB/s", "ns/call (median)", "spread (min..max ns)",
    "IQR p25..p75 (% of median)", "bound GB/s", "x stream bound", "x textbook loop",
    "x textbook-native", "x 1 thread", "note"};

static void result_cells(const result *r, char cells[N_COLS][256]) {
  snprintf(cells[0], 256, "%s", r->suite);
  snprintf(cells[1], 256, "%s", r->name);
  snprintf(cells[2], 256, "%s", r->dtype);
  snprintf(cells[3], 256, "%s", r->isa);
  snprintf(cells[4], 256, "%d", r->threads);
  for (int i = 5; i < N_COLS; i++) snprintf(cells[i], 256, "-");
  if (r->error[0]) {
    snprintf(cells[COL_NOTE], 256, "%.200s", r->error);
    return;
  }
  fmt_num(cells[5], 256, r->bytes / r->ns.med, 1);
  fmt_ns(cells[6], 256, r->ns.med);
  if (!isnan(r->ns.min) && r->ns.min != r->ns.max) {
    char a[32], b[32];
    fmt_ns(a, sizeof a, r->ns.min);
    fmt_ns(b, sizeof b, r->ns.max);
    snprintf(cells[7], 256, "%.32s..%.32s", a, b);
  }
  fmt_num(cells[8], 256, 100 * (r->ns.p75 - r->ns.p25) / r->ns.med, 0);
  if (!isnan(r->bound.med)) {
    fmt_num(cells[9], 256, r->bytes / r->bound.med, 1);
    fmt_num(cells[10], 256, r->bound.med / r->ns.med, 2);
  }
  fmt_num(cells[11], 256, r->textbook.med / r->ns.med, 2);
  fmt_num(cells[12], 256, r->textbook_native.med / r->ns.med, 2);
  fmt_num(cells[13], 256, r->speedup_1t, 2);
  char tries[32] = "";
  if (r->attempts > 1) snprintf(tries, sizeof tries, " (sampled %d times)", r->attempts);
  if (r->flag[0])
    snprintf(cells[COL_NOTE], 256, "! %s%s%s%.96s", r->flag, tries, r->note[0] ? "; " : "", r->note);
  else
    snprintf(cells[COL_NOTE], 256, "%s%s%s", r->note, r->note[0] && tries[0] ? ";" : "", tries);
}

static int n_flagged(void) {
  int n = 0;
  for (int i = 0; i < n_results; i++) n += results[i].flag[0] != 0 && !results[i].error[0];
  return n;
}

static void print_table(const char *cpu, const char *cmdline) {
  int width[N_COLS];
  char cells[N_COLS][256];
  for (int i = 0; i < N_COLS; i++) width[i] = (int)strlen(col_names[i]);
  for (int r = 0; r < n_results; r++) {
    result_cells(&results[r], cells);
    for (int i = 0; i < N_COLS; i++)
      if ((int)strlen(cells[i]) > width[i]) width[i] = (int)strlen(cells[i]);
  }
  printf("pe-bench %s on %s, %ld CPUs; library path %s; command: %s\n", pe_version_string(), cpu,
         sysconf(_SC_NPROCESSORS_ONLN), pe_isa_name(), cmdline);
  printf("median of %d runs after %d warm-up; bound = in-place x=x*a+b stream over the same bytes, "
         "same threads, same run; load average %.2f at the end\n\n",
         opt.reps, opt.warmup, load_average());
  for (int i = 0; i < N_COLS; i++) printf("| %-*s ", width[i], col_names[i]);
  printf("|\n");
  for (int i = 0; i < N_COLS; i++) {
    printf("|");
    for (int j = 0; j < width[i] + 2; j++) putchar(i >= 4 && i < COL_NOTE && j == width[i] + 1 ? ':' : '-');
  }
  printf("|\n");
  for (int r = 0; r < n_results; r++) {
    result_cells(&results[r], cells);
    for (int i = 0; i < N_COLS; i++) {
      if (i >= 4 && i < COL_NOTE)
        printf("| %*s ", width[i], cells[i]);
      else
        printf("| %-*s ", width[i], cells[i]);
    }
    printf("|\n");
  }
  int nf = n_flagged();
  if (nf)
    printf("\n! %d of %d rows measured while disturbed (the reason is in the note): the "
           "interquartile range of the samples (p75 - p25) above %.0f %% of the median, the "
           "1-minute load average or the run queue (runnable threads, sampled every repetition) "
           "above the %ld CPUs, or the calling thread waiting more than %.0f %% of the time for "
           "its CPU. Their figures are not the machine's: rerun on a quiet machine.\n",
           nf, n_results, 100 * FLAG_IQR, sysconf(_SC_NPROCESSORS_ONLN), 100 * FLAG_WAIT);
  else
    printf("\nNo row disturbed: every interquartile range (p75 - p25) within %.0f %% of the "
           "median, load average and run queue at most the CPU count, CPU waits under %.0f %%.\n",
           100 * FLAG_IQR, 100 * FLAG_WAIT);
}

static void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') printf("\\%c", *s);
    else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
    else putchar(*s);
  }
  putchar('"');
}

static void json_number(double v) {
  if (isnan(v) || isinf(v)) printf("null");
  else printf("%.6g", v);
}

static void print_json(const char *cpu, const char *cmdline) {
  printf("{\"version\": ");
  json_string(pe_version_string());
  printf(", \"cpu\": ");
  json_string(cpu);
  printf(", \"isa\": ");
  json_string(pe_isa_name());
  printf(", \"command\": ");
  json_string(cmdline);
  printf(", \"reps\": %d, \"warmup\": %d, \"loadavg\": ", opt.reps, opt.warmup);
  json_number(load_average());
  printf(",\n \"results\": [\n");
  for (int i = 0; i < n_results; i++) {
    const result *r = &results[i];
    printf("  {\"suite\": ");
    json_string(r->suite);
    printf(", \"case\": ");
    json_string(r->name);
    printf(", \"dtype\": ");
    json_string(r->dtype);
    printf(", \"isa\": ");
    json_string(r->isa);
    printf(", \"threads\": %d", r->threads);
    if (r->error[0]) {
      printf(", \"error\": ");
      json_string(r->error);
    } else {
      printf(", \"bytes\": %.0f, \"gbps\": ", r->bytes);
      json_number(r->bytes / r->ns.med);
      printf(", \"ns_median\": ");
      json_number(r->ns.med);
      printf(", \"ns_min\": ");
      json_number(r->ns.min);
      printf(", \"ns_max\": ");
      json_number(r->ns.max);
      printf(", \"ns_p25\": ");
      json_number(r->ns.p25);
      printf(", \"ns_p75\": ");
      json_number(r->ns.p75);
      printf(", \"iqr_fraction\": ");
      json_number((r->ns.p75 - r->ns.p25) / r->ns.med);
      printf(", \"bound_ns_median\": ");
      json_number(r->bound.med);
      printf(", \"ratio_bound\": ");
      json_number(r->bound.med / r->ns.med);
      printf(", \"textbook_ns_median\": ");
      json_number(r->textbook.med);
      printf(", \"ratio_textbook\": ");
      json_number(r->textbook.med / r->ns.med);
      printf(", \"textbook_native_ns_median\": ");
      json_number(r->textbook_native.med);
      printf(", \"ratio_textbook_native\": ");
      json_number(r->textbook_native.med / r->ns.med);
      printf(", \"speedup_vs_1_thread\": ");
      json_number(r->speedup_1t);
      printf(", \"note\": ");
      json_string(r->note);
      printf(", \"loadavg_max\": ");
      json_number(r->load_max);
      printf(", \"cpu_wait_fraction\": ");
      json_number(r->wait_frac);
      printf(", \"run_queue_mean\": ");
      json_number(r->run_queue);
      printf(", \"flag\": ");
      json_string(r->flag);
    }
    printf("}%s\n", i + 1 < n_results ? "," : "");
  }
  printf(" ]}\n");
}

static void csv_field(const char *s) {
  if (strpbrk(s, ",\"\n")) {
    putchar('"');
    for (; *s; s++) {
      if (*s == '"') putchar('"');
      putchar(*s);
    }
    putchar('"');
  } else {
    fputs(s, stdout);
  }
}

static void print_csv(void) {
  printf("suite,case,dtype,isa,threads,bytes,gbps,ns_median,ns_min,ns_max,ns_p25,ns_p75,"
         "iqr_fraction,bound_ns_median,ratio_bound,textbook_ns_median,ratio_textbook,"
         "textbook_native_ns_median,ratio_textbook_native,speedup_vs_1_thread,note,"
         "loadavg_max,cpu_wait_fraction,run_queue_mean,flag\n");
  for (int i = 0; i < n_results; i++) {
    const result *r = &results[i];
    csv_field(r->suite), putchar(',');
    csv_field(r->name), putchar(',');
    csv_field(r->dtype), putchar(',');
    csv_field(r->isa), putchar(',');
    printf("%d,", r->threads);
    if (r->error[0]) {
      printf(",,,,,,,,,,,,,,,");
      csv_field(r->error);
      printf(",,,,");
    } else {
      double v[14] = {r->bytes / r->ns.med, r->ns.med, r->ns.min, r->ns.max, r->ns.p25, r->ns.p75,
                      (r->ns.p75 - r->ns.p25) / r->ns.med, r->bound.med, r->bound.med / r->ns.med,
                      r->textbook.med, r->textbook.med / r->ns.med, r->textbook_native.med,
                      r->textbook_native.med / r->ns.med, r->speedup_1t};
      printf("%.0f,", r->bytes);
      for (int j = 0; j < 14; j++) {
        if (!isnan(v[j])) printf("%.6g", v[j]);
        putchar(',');
      }
      csv_field(r->note);
      putchar(',');
      if (!isnan(r->load_max)) printf("%.2f", r->load_max);
      putchar(',');
      if (!isnan(r->wait_frac)) printf("%.4f", r->wait_frac);
      putchar(',');
      if (!isnan(r->run_queue)) printf("%.2f", r->run_queue);
      putchar(',');
      csv_field(r->flag);
    }
    putchar('\n');
  }
}

/* ------------------------------------------------------------------------ */

static void run_suites(void) {
  if (suite_selected("rope")) suite_rope();
  if (suite_selected("table")) suite_table();
  if (suite_selected("alibi")) bias_suite("alibi");
  if (suite_selected("t5")) bias_suite("t5");
  if (suite_selected("sinusoidal")) embed_suite("sinusoidal");
  if (suite_selected("learned")) embed_suite("learned");
  if (suite_selected("cutover")) suite_cutover();
  if (suite_selected("fused")) suite_fused();
  if (suite_selected("qknorm")) suite_qknorm();
  if (suite_selected("kvquant")) suite_kvquant();
}

int main(int argc, char **argv) {
  run_start = now_ns(); /* progress lines are stamped with the seconds since */
  if (parse_args(argc, argv) != 0) return 2;
  if (opt.hf_config && hf_load() != 0) return 1;
  static const char *const known[] = {"rope", "table", "alibi", "t5", "sinusoidal", "learned", "cutover",
                                      "fused", "qknorm", "kvquant"};
  {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", opt.suites);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
      int ok = 0;
      for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) ok |= !strcmp(t, known[i]);
      if (!ok) {
        fprintf(stderr, "pe-bench: unknown suite \"%s\" (see --help)\n", t);
        return 2;
      }
    }
  }
  /* Keep freed memory in the process: the table suite's 64 MiB cache is
   * allocated per repetition, and the kernel, not the OS's page faults, is
   * what it measures. */
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);

  char cmdline[512] = "pe-bench";
  for (int i = 1; i < argc; i++) {
    size_t l = strlen(cmdline);
    snprintf(cmdline + l, sizeof cmdline - l, " %s", argv[i]);
  }
  char cpu[128];
  cpu_model(cpu, sizeof cpu);
  /* The caller stays on one core, so the pool (which places its workers on
   * the other cores) and the bound's team measure the same placement every
   * time. */
  /* Placement: the caller is pinned to the CPU it runs on, the bound's team
   * members to the other CPUs, and the pools are created last: a pool puts
   * its workers on cores other than the caller's, within the CPUs the
   * process's threads may use (the team keeps those the whole machine).
   * Creating the pools before pinning would race with the caller migrating
   * and could put a worker on the caller's own CPU for the whole run. */
  int main_cpu = opt.no_pin ? -1 : sched_getcpu();
  if (main_cpu >= 0) {
    cpu_set_t all;
    if (sched_getaffinity(0, sizeof all, &all) == 0)
      for (int c = 0; c < CPU_SETSIZE && n_team_cpus < MAX_THREADS * 4; c++)
        if (CPU_ISSET(c, &all) && c != main_cpu) team_cpus[n_team_cpus++] = c;
  }
  for (int i = 0; i < opt.n_threads; i++)
    if (opt.threads[i] > 1) team_get(opt.threads[i]);
  if (suite_selected("cutover")) team_get(cutover_threads());
  if (main_cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(main_cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
  }
  for (int i = 0; i < opt.n_threads; i++)
    if (opt.threads[i] > 1) pool_for(opt.threads[i]);
  if (suite_selected("cutover")) pool_for(cutover_threads()), cutover_prepare();

  if (opt.isa && !strcmp(opt.isa, "all")) {
    static const char *const isas[] = {"scalar", "avx2", "avx512", "neon"};
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++)
      if (pe_force_isa(isas[i]) == PE_OK) run_suites();
  } else {
    if (opt.isa && pe_force_isa(opt.isa) != PE_OK) {
      fprintf(stderr, "pe-bench: --isa %s: %s\n", opt.isa, pe_last_error());
      return 2;
    }
    run_suites();
  }
  link_speedups();
  progress_done();
  if (opt.fmt == FMT_JSON)
    print_json(cpu, cmdline);
  else if (opt.fmt == FMT_CSV)
    print_csv();
  else
    print_table(cpu, cmdline);
  teams_stop();
  for (int i = 0; i <= MAX_THREADS; i++) pe_threadpool_destroy(pools[i]);
  pe_threadpool_destroy(cutover_raw);
  free(results);
  pe_model_rope_destroy(hf_model);
  return 0;
}
