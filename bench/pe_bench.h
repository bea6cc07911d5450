/* pe_bench.h - the types and functions pe-bench's files share (a program's
 * internal header, not installed). The program is in pieces:
 *   cli.c          options, their checks, --help, main (where every thread
 *                  is placed, which suites run);
 *   model.c        the model presets, the geometry a case uses (preset,
 *                  overrides or --hf-config) and the rope cache built from it;
 *   measure.c      timing, statistics, the disturbed-run detector, the bound
 *                  sampled interleaved with the kernel, the bound's thread
 *                  team, the library's pools, buffers and the result rows;
 *   suite_rope.c   rope (both layouts, the textbook loops) and cutover;
 *   suite_table.c  the cos/sin table build;
 *   suite_enc.c    alibi, t5, sinusoidal, learned;
 *   suite_fused.c  fused (store, mrope, multi) and kvquant;
 *   suite_qknorm.c qknorm, and the packed QKV buffer kvquant shares;
 *   suite_mla.c    mla (DeepSeek-V3's MLA step, pe_mla_rope_store);
 *   report.c       the table (narrow or --wide), --csv and --json;
 *   floor*.c       the compute floor (floor.h).
 * bench.h declares the pieces built with other flags (bound.c, textbook.c). */
#ifndef PE_BENCH_INTERNAL_H
#define PE_BENCH_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "floor.h"
#include "posenc.h"

#define MAX_THREADS 64
#define MAX_THREAD_COUNTS 8

/* ---- models (model.c) ------------------------------------------------- */

/* Multi-head latent attention (DeepSeek-V2/V3): the shapes an `mla` case
 * needs beyond the rope suites' heads/head_dim/rotary_dim. Zero: not MLA. */
typedef struct mla_shape {
  int q_lora_rank;       /* q's compressed row (0: q projected directly) */
  int kv_lora_rank;      /* the latent part of the kv_a row */
  int qk_nope_head_dim;  /* channels of a q/k head without RoPE */
  int qk_rope_head_dim;  /* channels with RoPE (k's are one head shared by all) */
  int v_head_dim;
} mla_shape;

typedef struct model_preset {
  const char *name;
  int heads, kv_heads, head_dim, rotary_dim;
  pe_rope_style style;
  double base;
  pe_rope_scaling scaling; /* NONE, or the published rope_scaling: */
  double factor;
  int64_t original_max_positions;
  double beta_fast, beta_slow, mscale, mscale_all_dim; /* yarn */
  mla_shape mla;
  const char *source; /* the published config.json it comes from */
  const char *remark; /* what the rope suites take of it, or NULL */
} model_preset;

extern const model_preset pb_models[];
extern const int pb_n_models;
const model_preset *model_find(const char *name);
void models_list(FILE *f);

typedef struct rope_geom {
  int heads, kv_heads, head_dim, rotary_dim;
  pe_rope_style style;
  double base;
  const model_preset *scaled; /* the preset whose rope_scaling applies, or NULL */
} rope_geom;

/* The preset with the overrides applied. */
rope_geom geometry(void);
/* Did an override change the preset's shape (the cases are then "custom")? */
int geometry_overridden(void);
/* The model named in case names: the preset, "custom", or the config file. */
const char *model_label(void);
/* "32q/8kv x128 neox", "16q/16kv x256 rot64 gptj". */
void geometry_shape(const rope_geom *g, char *out, size_t len);

/* --hf-config: load and describe the model (0, or 1 after one error line). */
int hf_load(void);
void hf_free(void);
/* The rope cache of a case: from --hf-config (the cache most layers use),
 * or from the geometry and the preset's scaling. */
pe_status rope_cache_for(rope_geom *g, int64_t max_positions, pe_rope_cache **out, char *why,
                         size_t why_len);
/* The rope cache of a geometry and its preset's scaling (never --hf-config). */
pe_status rope_cache_preset(const rope_geom *g, int64_t max_positions, pe_rope_cache **out,
                            char *why, size_t why_len);

/* ---- options (cli.c) -------------------------------------------------- */

enum { FMT_TABLE, FMT_JSON, FMT_CSV };

typedef struct options {
  char suites[256];
  const model_preset *model;
  int model_given;
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
  int wide;
  int no_pin;
  double sample_ns; /* a timed sample lasts at least this long */
  int stream_cache;    /* --stream-cache: the serving calls with PE_ROPE_STREAM_CACHE */
  int64_t fresh_cache; /* --fresh-cache K: serving suites' cache rows in K sets (1: one;
                        * 0: auto, per case, fresh_begin) */
  int64_t max_positions; /* rope suite's table rows; -1: max(8192, tokens) */
  int floor_call;        /* --floor-data call: the floor's kernels over as many rows as the
                          * call has (floor_alloc's n_rows), not L1-resident ones */
} options;

extern options opt;
int suite_selected(const char *name);

/* ---- time, statistics, progress (measure.c) ---------------------------- */

double now_ns(void);
void sleep_us(long us);

typedef struct stats {
  double med, min, max, p25, p75;
} stats;

#define NO_STATS ((stats){NAN, NAN, NAN, NAN, NAN})

/* Sorts v[0..n) and returns its median, quartiles, min and max. */
stats summarise(double *v, int n);
int64_t iterations_for(double ns_per_call);

extern double run_start;
void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void progress_done(void);
double load_average(void);

/* ---- cases and results (measure.c) ------------------------------------- */

typedef struct bench_case bench_case;
struct bench_case {
  const char *suite;
  char name[48];
  char shape[48];                      /* heads and dims: geometry_shape() or the suite's */
  int dtype;
  int threads;
  pe_threadpool *pool;
  double bytes;                        /* read + written per call */
  pe_status (*call)(bench_case *);     /* one call of the kernel */
  void (*textbook)(bench_case *);      /* NULL: no textbook column */
  void (*textbook_native)(bench_case *); /* NULL: no textbook-native column */
  pb_rows probe[2];                    /* the bound's rows (a mirror buffer) */
  int n_probe;
  floor_stage floor[FL_STAGES];        /* the compute floor's stages (floor.h) */
  int n_floor;
  void *st;                            /* suite state */
  char note[96];
};

typedef struct result {
  char suite[16], name[48], shape[48], dtype[8], isa[16];
  int threads;
  double bytes;
  stats ns, bound, textbook, textbook_native, floor;
  double speedup_1t; /* NAN: no one-thread row */
  double load_max;   /* highest 1-minute load average seen while it ran */
  double wait_frac;  /* time its threads waited for a CPU / its wall time */
  double run_queue;  /* mean runnable threads of the machine (ours included) */
  char flag[160];    /* non-empty: measured while disturbed, and why */
  unsigned flags;    /* the reasons: FLAGGED_* bits */
  int attempts;      /* samplings of the row (more than one: its IQR was retried) */
  char note[96];
  char error[200]; /* non-empty: not measured */
} result;

extern result *results;
extern int n_results;

result *new_result(const bench_case *c);
/* A result row saying a suite could not run, and why. */
void not_available(const char *suite, const char *what);
/* Time a case: warm-up, then --reps samples of the kernel, its baselines and
 * the bound, interleaved; the row is flagged if the run was disturbed. */
result *measure(bench_case *c);
/* 'x 1 thread': each multi-thread row against its one-thread twin. */
void link_speedups(void);

/* The disturbed-run detector, for suites that time their own samples. */
typedef struct disturbance {
  double t0, wait0, load_max;
  long running_sum, running_n;
} disturbance;
disturbance disturbance_start(void);
void disturbance_sample(disturbance *d);
void disturbance_end(disturbance *d, result *r);

#define FLAG_IQR 0.25
#define FLAG_WAIT 0.10
enum { FLAGGED_IQR = 1, FLAGGED_FLOOR_IQR = 2, FLAGGED_LOAD = 4, FLAGGED_RUN_QUEUE = 8,
       FLAGGED_WAIT = 16 };

/* A stage of the case's compute floor (floor.h), when it has a kernel. */
void floor_add(bench_case *c, floor_stage st);
/* The floor kernels this run uses and their name, or NULL (floor.c). */
extern const char *pb_floor_name;

/* ---- threads (measure.c) ------------------------------------------------ */

/* The library's pool of `threads` (NULL for 1), created once. */
pe_threadpool *pool_for(int threads);
void pools_destroy(void);
/* The bound's team of n threads, created once; members pinned to
 * pb_team_cpus (set by main) when it is not empty. */
void team_prepare(int n);
void teams_stop(void);
extern int pb_team_cpus[MAX_THREADS * 4], pb_n_team_cpus;

/* ---- buffers (measure.c) ------------------------------------------------ */

float frand(void);
void *xalloc(size_t bytes);
void fill(void *p, int d, size_t n);
const char *dtype_name(int d);
size_t dtype_size(int d);
/* A [b, h, t, d] tensor of dtype dt, filled (bthd: token-major storage). */
pe_tensor make_tensor(int dt, int64_t b, int64_t h, int64_t t, int64_t d, int bthd);
size_t tensor_bytes(const pe_tensor *x);
/* The bound's rows for the first row_elems elements of every row of x, in a
 * mirror buffer; probe_flat: a contiguous one of traffic / 2 bytes. The
 * _to forms read those rows and write a second buffer of the same size
 * (rows a call reads and writes elsewhere: as much memory as it touches). */
pb_rows probe_like(const pe_tensor *x, int64_t row_elems);
pb_rows probe_flat(double traffic);
pb_rows probe_like_to(const pe_tensor *x, int64_t row_elems);
pb_rows probe_flat_to(double traffic);
void free_probes(bench_case *c);
/* The bound of rows read and results written into cache rows, read_bytes +
 * written_bytes in all: with --fresh-cache, half of them read and half
 * written into a second buffer of K sets (probe_flat_to: the destination
 * cold, as the kernel's); without, one buffer read and written in place. */
pb_rows probe_sink(double read_bytes, double written_bytes);

/* --fresh-cache K: a serving case's slots in K sets, set r the slots + r *
 * span (a cache region of its own: the cache holds K times the rows); each
 * call of the kernel and of its unfused sequence takes the next set
 * (fresh_next), so that the cache rows it writes were last written K calls
 * before - cold, as a serving step's rows are (a new token's row has not
 * been touched since its block was allocated). Without the option (K = 1)
 * every call rewrites the same warm rows. */
typedef struct fresh_slots {
  int64_t *sets, n, k, next;
} fresh_slots;
/* A serving case's K, before its caches and probes are made: --fresh-cache
 * K, or with auto the least K >= 2 for which K calls write at least twice
 * the last-level cache (cache_bytes: the rows one call writes); 1 for a
 * case whose rows are not fresh (cache_bytes 0). fresh_init and the _to
 * probes take it. */
extern int64_t pb_fresh;
/* The last-level cache's bytes (sysconf; 256 MiB where glibc cannot tell). */
double pb_llc_bytes(void);
/* The flags of the serving rows' fused calls (--stream-cache). */
extern uint32_t pb_store_flags;
int64_t fresh_begin(double cache_bytes);
/* The sets of slots[0..n) (K = pb_fresh), span slots apart; takes slots
 * (xalloc'd: freed here) and returns the first set. */
int64_t *fresh_init(fresh_slots *f, int64_t *slots, int64_t n, int64_t span);
const int64_t *fresh_next(fresh_slots *f);
void fresh_free(fresh_slots *f);
char *read_file(const char *path, size_t *len);
/* The table rows a case of `tokens` tokens for `batch` sequences needs:
 * prefill uses positions 0..tokens-1; decode (one token) puts sequence b at
 * 4000 + 7b, past a long context. */
int64_t positions_used(int64_t batch, int64_t tokens);

/* ---- suites ------------------------------------------------------------- */

void suite_rope(void);
void suite_cutover(void);
int cutover_threads(void);
void cutover_prepare(void);
void cutover_free(void);
void suite_table(void);
void suite_bias(const char *suite); /* alibi, t5 */
void suite_embed(const char *suite); /* sinusoidal, learned */
void suite_fused(void);
void suite_kvquant(void);
void suite_qknorm(void);
void suite_mla(void);

#define FUSED_BLOCK 16 /* paged cache block size (tokens), vLLM's default */
#define LEARNED_MAX_LEN 2048 /* rows of the learned suite's table */

/* The setup the qknorm and kvquant suites share (suite_qknorm.c). */
int packed_qkv(const char *suite, int64_t hq, int64_t hkv, int64_t hd, pe_rope_style style,
               double theta, int64_t batch, int64_t tokens, int dt, pe_rope_cache **cache,
               void **qkv, pe_tensor *q, pe_tensor *k, pe_tensor *v);

/* The conversions of the unfused sequences' plain RMSNorm loops (qknorm,
 * mla): bf16 by shifts (round to nearest even; no NaN in these tensors),
 * f16 as textbook.c converts it: the compiler's _Float16 where it has the
 * type, else the exact bit-level conversion. Inline, as a loop written in
 * the engine's own file would have them. */
static inline float pb_load(int dt, const void *p, int64_t i) {
  if (dt == PE_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  uint32_t u = (uint32_t)h << 16; /* bf16 */
  if (dt == PE_F16) {
#if defined(__FLT16_MAX__)
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
#else
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    if (e == 0) return (sign ? -1.0f : 1.0f) * (float)m * 0x1p-24f;
    u = sign | (e == 31 ? 0x7f800000u : (e + 112) << 23) | m << 13;
#endif
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline void pb_store(int dt, void *p, int64_t i, float f) {
  if (dt == PE_F32) {
    ((float *)p)[i] = f;
    return;
  }
  uint32_t u;
  memcpy(&u, &f, 4);
  if (dt == PE_F16) {
#if defined(__FLT16_MAX__)
    _Float16 x = (_Float16)f;
    memcpy((uint16_t *)p + i, &x, 2);
#else
    uint32_t a = u & 0x7fffffffu;
    uint16_t h;
    if (a > 0x7f800000u) {
      h = 0x7e00; /* NaN */
    } else if (a >= 0x477ff000u) {
      h = 0x7c00; /* |f| >= 65520 rounds to Inf */
    } else if (a < 0x38800000u) { /* below 2^-14: subnormal, an exact multiple of 2^-24 */
      float v;
      memcpy(&v, &a, 4);
      h = (uint16_t)(int)rintf(v * 0x1p24f);
    } else {
      h = (uint16_t)((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13);
    }
    ((uint16_t *)p)[i] = (uint16_t)((u >> 16 & 0x8000u) | h);
#endif
    return;
  }
  ((uint16_t *)p)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* RNE, no NaN here */
}

/* ---- report (report.c) -------------------------------------------------- */

void cpu_model(char *out, size_t len);
void print_table(const char *cpu, const char *cmdline);
void print_json(const char *cpu, const char *cmdline);
void print_csv(void);

#endif
