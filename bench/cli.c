/* cli.c - pe-bench's command line: the options, their checks (a bad value
 * stops the program with status 2 and one sentence naming it, before
 * anything is measured), --help, and main: where the threads are placed,
 * which suites run, which output is printed.
 *
 * pe-bench is the instrument every performance statement of libposenc comes
 * from. Each case times one entry point on one shape, repeated after a
 * warm-up, and reports the median, the interquartile range (p25..p75, which
 * decides whether the row is flagged as disturbed) and the full spread
 * (min..max) of the repetitions. In the same repetitions, interleaved with
 * the kernel's samples so that a busy machine slows both alike, it times the
 * bound: an in-place streaming read-modify-write over the same number of
 * bytes laid out like the tensor (bound.c), the faster of one stream and
 * four, with as many threads as the case uses; for RoPE also a textbook scalar loop over a precomputed float table
 * (textbook.c), built twice: with the project's flags (-O3) and with -O3
 * -march=native; for the serving suites the unfused sequence of calls an
 * engine makes without the fused one. Shapes that fit in L1/L2 are measured
 * warm, and so is their bound. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pe_bench.h"

options opt;

static const char *const all_suites[] = {"rope",    "table", "alibi",  "t5",     "sinusoidal",
                                         "learned", "cutover", "fused", "qknorm", "kvquant", "mla"};
#define N_SUITES (int)(sizeof all_suites / sizeof all_suites[0])
#define DEFAULT_SUITES "rope,table,alibi,t5,sinusoidal,learned"
#define ALL_SUITES DEFAULT_SUITES ",cutover,fused,qknorm,kvquant,mla"

static void usage(FILE *f) {
  fprintf(f,
          "usage: pe-bench [options]\n"
          "Times libposenc's entry points against an in-place streaming read-modify-write\n"
          "over the same bytes (the bound: the faster of one stream and four), measured in\n"
          "the same run.\n"
          "\n"
          "  --suite LIST       comma list of rope,table,alibi,t5,sinusoidal,learned,cutover,\n"
          "                     fused (serving entry points against their unfused\n"
          "                     equivalent), qknorm (QK-norm + RoPE + K/V into the cache:\n"
          "                     Qwen3-8B's per-head norm, OLMo 2's per-token one, Gemma 3's\n"
          "                     unit offset, Llama 4's L2, against the unfused sequence),\n"
          "                     kvquant (RoPE + K/V\n"
          "                     into fp8/q8_0 caches and the q8_0 shift, Llama-3-8B, against\n"
          "                     the unfused libposenc calls), mla (DeepSeek-V3's MLA step:\n"
          "                     the latent's RMSNorm, RoPE of k_pe and q's rope slices, the\n"
          "                     row into a paged cache, plain and fp8, against the unfused\n"
          "                     sequence) or all\n"
          "                     (default: " DEFAULT_SUITES ")\n"
          "  --model NAME       a published model's heads, kv heads, head_dim, rotary_dim,\n"
          "                     pairing and rope (default llama3-8b); --model list: the names;\n"
          "                     qknorm: olmo2-7b, gemma-3-27b or llama4-scout its cases\n"
          "                     alone, any other Qwen3-8B's\n"
          "  --heads N          query heads (overrides the model; the cases are then named\n"
          "                     \"custom\", their shape in the shape column)\n"
          "  --kv-heads N       key heads\n"
          "  --head-dim N       channels per head (rotary_dim follows unless given)\n"
          "  --rotary-dim N     rotated channels (even, <= head_dim)\n"
          "  --style neox|gptj  pairing\n"
          "  --tokens N         one case of N tokens instead of the suite's cases\n"
          "  --batch N          sequences (default 1)\n"
          "  --dtype f32|f16|bf16  tensor dtype (default: f32, plus f16/bf16 at 512 tokens)\n"
          "  --layout bhtd|bthd memory order of q/k: [B,H,T,D] or [B,T,H,D] (default: the\n"
          "                     rope suite runs every prefill case in both, its case names\n"
          "                     end in the layout; decode, one token, is the same memory\n"
          "                     in both; cutover uses bhtd)\n"
          "  --isa NAME|all     force scalar, avx2, avx512, avx512bf16, neon (or auto);\n"
          "                     all = each one this CPU runs\n"
          "  --threads LIST     thread counts, e.g. 1,2 (default 1,2; 1 = no pool), at most\n"
          "                     the CPUs this process may use\n"
          "  --hf-config FILE   rope cache from a HuggingFace config.json (heads from it too)\n"
          "  --fresh-cache K|auto  fused (store), qknorm, kvquant (store), mla: caches of\n"
          "                     K times the slots, each call (and each walk of the bound)\n"
          "                     writing the next K-th: cold cache rows, as a serving\n"
          "                     step's; auto: per case, K calls' rows twice the last-level\n"
          "                     cache, so they come from memory (default 1: the same rows)\n"
          "  --stream-cache     fused (store), qknorm, kvquant (store), mla: the fused\n"
          "                     calls write their cache rows with streaming stores\n"
          "                     (PE_ROPE_STREAM_CACHE; their unfused sequences as before)\n"
          "  --floor-data l1|call  the rows the floor's kernels walk: l1 (default) a\n"
          "                     few L1-resident rows, cycled; call as many rows as the\n"
          "                     call has, so the floor's own instructions meet the\n"
          "                     caches (or memory) the call's bytes come from\n"
          "  --reps N           timed repetitions (default 15)\n"
          "  --warmup N         untimed repetitions first (default 2)\n"
          "  --max-positions N  rope suite: cos/sin table rows (default max(8192, the\n"
          "                     positions used)); 0 = no table, cos/sin computed on the fly\n"
          "  --wide             the table with every column (default: the essential ones)\n"
          "  --json | --csv     machine-readable output, every field, instead of the table\n"
          "  --no-pin           leave the calling thread unpinned (default: pinned to the\n"
          "                     CPU it starts on; the pool's workers take the other cores)\n"
          "  -h, --help         this text\n"
          "\n"
          "The table has one block per suite and thread count, titled with its rows'\n"
          "shape: case, dtype, ns/call, x stream bound, floor, x floor, and where the rows\n"
          "have them x textbook or x unfused, x native, x 1 thread, and a note number\n"
          "(the notes under the block; '!' before it: measured while disturbed).\n"
          "--wide prints every column in one table, under these names (--csv/--json fields\n"
          "in brackets):\n"
          "Every figure is the median of --reps repetitions ['ns/call (median)', ns_median];\n"
          "'spread (min..max ns)' is the fastest and slowest of them, 'IQR p25..p75 (%% of\n"
          "median)' [iqr_fraction] = (p75 - p25) / median, the quartiles interpolated\n"
          "between sorted samples (as numpy.percentile does).\n"
          "GB/s counts bytes read + written in the tensors (the RoPE cos/sin table is not\n"
          "counted; learned counts the table rows it gathers); 'x stream bound'\n"
          "[ratio_bound] = bound time / kernel time with the same threads\n"
          "(1.0 = as fast as streaming the bytes once; with N threads the bound is the\n"
          "faster of an N-thread and a 1-thread stream); 'floor' [floor_ns_median] = the\n"
          "compute floor: the shortest instruction sequence the row's arithmetic needs on\n"
          "the library's ISA (widening loads, the rotation's multiplies and FMAs, the norm,\n"
          "the narrowing stores, the quantizer), timed on L1-resident data interleaved with\n"
          "the kernel's samples (docs/compute-floor.md; rope rows with a cos/sin table,\n"
          "fused, qknorm, kvquant, mla); 'x floor' [ratio_floor] = max(bound, floor) /\n"
          "kernel time: 1.0 = as fast as the slower of moving the bytes and doing the\n"
          "arithmetic; 'x textbook loop' [ratio_textbook]\n"
          "= baseline time / kernel time: for rope (NeoX, one thread, each dtype and\n"
          "layout) a plain C loop over a float cos/sin table built with the project's flags\n"
          "and -O3 ('x textbook'), for fused, qknorm, kvquant and mla the unfused sequence\n"
          "the note names ('x unfused'); 'x textbook-native' [ratio_textbook_native] ('x\n"
          "native') = the textbook loop's source built -O3 -march=native -ffp-contract=fast\n"
          "(what a user's compiler makes of it for this CPU; the library is not built\n"
          "native) / kernel time; for qknorm the step written as one C loop per token\n"
          "(each head row's sum of squares in 16 partial sums, its norm and rotation, k\n"
          "into its slot, v copied), built the same way and checked against the\n"
          "library's output first; 'x 1 thread' [speedup_vs_1_thread] = the same case's\n"
          "one-thread time / this time. The bound is compiled -O3 -march=native.\n"
          "A '!' marks a row measured while disturbed: the IQR of the kernel's (or the\n"
          "floor's) samples above 25 %% of the median (not max - min: a few preempted samples widen\n"
          "min..max but neither the IQR nor, beyond a rank each, the median; with 15 reps\n"
          "3 outliers at either end leave the IQR alone), the 1-minute load average above\n"
          "the CPU count, the run queue (runnable threads of the machine, ours included,\n"
          "sampled after every repetition: the load average without its minute of lag)\n"
          "averaging above the CPU count, or the calling thread waiting for its CPU more\n"
          "than 10 %% of the time. A row flagged for its IQR alone is sampled again, up\n"
          "to 3 times in all (the note says how often); the last sampling is reported.\n"
          "The cutover suite times RoPE calls of 1..512 tokens on the caller alone and on\n"
          "a pool with its cut-over disabled (PE_POOL_MIN_BYTES=0), workers hot (calls\n"
          "back to back) and cold (2 ms asleep between calls): where a pool starts to pay.\n"
          "\n"
          "Models (--model NAME):\n");
  models_list(f);
}

/* ---- checks ---------------------------------------------------------------- */

/* One sentence on stderr; parse_args then returns -1 (status 2). */
static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("pe-bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return -1;
}

static int parse_int(const char *name, const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || end == v || x < lo || x > hi)
    return bad("%s expects an integer in [%ld, %ld], got \"%s\"", name, lo, hi, v);
  *out = x;
  return 0;
}

static int known_suite(const char *name) {
  for (int i = 0; i < N_SUITES; i++)
    if (!strcmp(name, all_suites[i])) return 1;
  return 0;
}

int suite_selected(const char *name) {
  char buf[256], *save = NULL;
  snprintf(buf, sizeof buf, "%s", opt.suites);
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
    if (!strcmp(t, name)) return 1;
  return 0;
}

/* --suite LIST: known names, none empty; "all" anywhere selects every one. */
static int set_suites(const char *v) {
  if (strlen(v) >= sizeof opt.suites) return bad("--suite \"%.40s...\" is too long", v);
  if (!*v) return bad("--suite \"\" names no suite (choose from %s, or all)", ALL_SUITES);
  int all = 0;
  for (const char *p = v;;) {
    size_t n = strcspn(p, ",");
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), p);
    if (!n) return bad("--suite \"%s\" has an empty name (a comma too many)", v);
    if (!strcmp(name, "all"))
      all = 1;
    else if (!known_suite(name))
      return bad("--suite: unknown suite \"%s\" (the suites: %s, or all)", name, ALL_SUITES);
    if (!p[n]) break;
    p += n + 1;
  }
  if (all) {
    opt.suites[0] = 0;
    for (int i = 0; i < N_SUITES; i++)
      snprintf(opt.suites + strlen(opt.suites), sizeof opt.suites - strlen(opt.suites), "%s%s",
               i ? "," : "", all_suites[i]);
  } else {
    snprintf(opt.suites, sizeof opt.suites, "%s", v);
  }
  return 0;
}

/* The CPUs this process may run on. */
static int usable_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static int set_threads(const char *v) {
  long x = 0;
  opt.n_threads = 0;
  opt.threads_given = 1;
  if (!*v) return bad("--threads \"\" names no thread count (e.g. 1 or 1,2)");
  int cpus = usable_cpus();
  for (const char *p = v;;) {
    size_t n = strcspn(p, ",");
    char tok[32];
    snprintf(tok, sizeof tok, "%.*s", (int)(n < 31 ? n : 31), p);
    if (!n) return bad("--threads \"%s\" has an empty count (a comma too many)", v);
    if (opt.n_threads == MAX_THREAD_COUNTS)
      return bad("--threads \"%s\" lists more than %d counts", v, MAX_THREAD_COUNTS);
    if (parse_int("--threads", tok, 1, MAX_THREADS, &x)) return -1;
    if (x > cpus)
      return bad("--threads %ld: this process may run on %d CPU%s (more threads than CPUs "
                 "time the scheduler, not the kernel)",
                 x, cpus, cpus == 1 ? "" : "s");
    for (int i = 0; i < opt.n_threads; i++)
      if (opt.threads[i] == x) return bad("--threads \"%s\" lists %ld twice", v, x);
    opt.threads[opt.n_threads++] = (int)x;
    if (!p[n]) break;
    p += n + 1;
  }
  return 0;
}

/* The options that shape only some suites: one given to a run of none of
 * them would change nothing, and is refused. */
static const struct {
  const char *option, *suites;
} scope[] = {
    {"--tokens", "rope,sinusoidal,learned,fused,qknorm,kvquant,mla"},
    {"--batch", "rope,sinusoidal,learned,fused,qknorm,kvquant,mla"},
    {"--max-positions", "rope"},
    {"--fresh-cache", "fused,qknorm,kvquant,mla"},
    {"--layout", "rope,cutover"},
    {"--model", "rope,cutover,fused,alibi,t5,sinusoidal,learned,qknorm"},
    {"--heads", "rope,cutover,fused,alibi,t5,sinusoidal,learned"},
    {"--kv-heads", "rope,cutover,fused"},
    {"--head-dim", "rope,cutover,fused,sinusoidal,learned"},
    {"--rotary-dim", "rope,cutover,fused"},
    {"--style", "rope,cutover,fused"},
    {"--hf-config", "rope,cutover,fused"},
    {"--dtype", "rope,alibi,t5,sinusoidal,learned,fused,qknorm,kvquant,mla"},
};

static int check_scope(const char *option) {
  for (size_t i = 0; i < sizeof scope / sizeof scope[0]; i++) {
    if (strcmp(scope[i].option, option)) continue;
    char buf[128], *save = NULL;
    snprintf(buf, sizeof buf, "%s", scope[i].suites);
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
      if (suite_selected(t)) return 0;
    int one = !strchr(scope[i].suites, ',');
    return bad("%s shapes the %s suite%s only, and --suite %s selects %s", option, scope[i].suites,
               one ? "" : "s", opt.suites, one ? "not it" : "none of them");
  }
  return 0;
}

static const char *const with_value[] = {
    "--suite", "--suites", "--model", "--heads", "--kv-heads", "--head-dim", "--rotary-dim",
    "--style", "--tokens", "--batch", "--dtype", "--layout", "--isa", "--threads", "--hf-config",
    "--reps", "--warmup", "--max-positions", "--fresh-cache", "--floor-data"};
#define N_WITH (int)(sizeof with_value / sizeof with_value[0])
static const char *given_values[N_WITH]; /* each option's value as given, once */

static const char *given(const char *option) {
  for (int k = 0; k < N_WITH; k++)
    if (!strcmp(with_value[k], option)) return given_values[k];
  return NULL;
}

/* What the options mean together, once all are read. */
static int check_options(void) {
  int rope_family = suite_selected("rope") || suite_selected("cutover") || suite_selected("fused");
  if (opt.hf_config && opt.model_given)
    return bad("--model %s and --hf-config %s: give one of them (the model of the run)",
               opt.model->name, opt.hf_config);
  static const char *const from_file[] = {"--head-dim", "--rotary-dim", "--style"};
  for (int i = 0; i < 3; i++)
    if (opt.hf_config && given(from_file[i]))
      return bad("%s %s with --hf-config: head_dim, rotary_dim and the pairing come from %s",
                 from_file[i], given(from_file[i]), opt.hf_config);
  if (rope_family && !opt.hf_config) {
    rope_geom g = geometry();
    char whose[48];
    if (opt.head_dim)
      snprintf(whose, sizeof whose, "--head-dim %d", g.head_dim);
    else
      snprintf(whose, sizeof whose, "%s's head_dim %d", opt.model->name, g.head_dim);
    if (g.rotary_dim > g.head_dim)
      return bad("--rotary-dim %d is more than %s", g.rotary_dim, whose);
    if (g.rotary_dim % 2)
      return opt.rotary_dim
                 ? bad("--rotary-dim %d is odd: RoPE rotates pairs of channels", g.rotary_dim)
                 : bad("--head-dim %d is odd and rotary_dim follows it: give an even "
                       "--rotary-dim (RoPE rotates pairs of channels)",
                       g.head_dim);
  }
  if (opt.max_positions > 0) { /* the rope suite's positions must be in its table */
    int64_t need = opt.tokens ? positions_used(opt.batch, opt.tokens)
                              : positions_used(opt.batch, 1) > 4096 ? positions_used(opt.batch, 1)
                                                                    : 4096;
    if (opt.max_positions < need)
      return bad("--max-positions %" PRId64 " is fewer than the %" PRId64 " positions the rope "
                 "cases use (%s)",
                 opt.max_positions, need,
                 opt.tokens > 1 ? "--tokens"
                 : need > 4096  ? "decode puts sequence b of --batch at position 4000 + 7b"
                                : "prefill 4096 tokens");
  }
  if (opt.stream_cache && !suite_selected("fused") && !suite_selected("qknorm") &&
      !suite_selected("kvquant") && !suite_selected("mla"))
    return bad("--stream-cache shapes the fused,qknorm,kvquant,mla suites only, and --suite %s "
               "selects none of them",
               opt.suites);
  if (suite_selected("learned")) {
    if (opt.tokens > LEARNED_MAX_LEN)
      return bad("--tokens %" PRId64 " with the learned suite: its table has %d rows "
                 "(positions 0..%d)",
                 opt.tokens, LEARNED_MAX_LEN, LEARNED_MAX_LEN - 1);
    if ((opt.tokens <= 1) && 1000 + opt.batch - 1 >= LEARNED_MAX_LEN)
      return bad("--batch %" PRId64 " with the learned suite: its decode puts sequence b at "
                 "position 1000 + b, past its %d-row table from --batch %d on",
                 opt.batch, LEARNED_MAX_LEN, LEARNED_MAX_LEN - 1000 + 1);
  }
  if (given("--tokens") || given("--batch") || opt.fresh_cache != 1) {
    /* the largest case must fit in memory */
    rope_geom g = geometry();
    double per_token = (double)(g.heads + g.kv_heads) * g.head_dim;
    if (per_token < 48.0 * 128) per_token = 48.0 * 128; /* the packed QKV rows of qknorm/kvquant */
    if (suite_selected("mla")) { /* DeepSeek-V3's q, 128 heads of 192 channels */
      const model_preset *ds = model_find("deepseek-v3");
      double q = (double)ds->heads * (ds->mla.qk_nope_head_dim + ds->mla.qk_rope_head_dim);
      if (per_token < q) per_token = q;
    }
    double tokens = (double)opt.batch * (double)(opt.tokens ? opt.tokens : 4096);
    double need = tokens * per_token * 4 * 3; /* f32 tensors, the bound's copy, caches */
    /* --fresh-cache: K - 1 more cache rows per token (k and v, or an MLA
     * row), for the kernel and for the bound's destination */
    double rows = 2.0 * (g.kv_heads > 8 ? g.kv_heads : 8) * (g.head_dim > 128 ? g.head_dim : 128);
    if (rows < 576) rows = 576;
    if (opt.fresh_cache > 1) {
      need += tokens * rows * 4 * 2 * (double)(opt.fresh_cache - 1);
    } else if (opt.fresh_cache == 0) { /* auto: twice the last-level cache, twice */
      need += 4.0 * pb_llc_bytes() + tokens * rows * 4 * 2;
    }
    double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (have > 0 && need > have)
      return bad("--tokens %" PRId64 " --batch %" PRId64 "%s: the largest case needs about %.1f "
                 "GiB, this machine has %.1f GiB",
                 opt.tokens ? opt.tokens : 4096, opt.batch,
                 opt.fresh_cache != 1 ? " --fresh-cache" : "", need / 1073741824.0,
                 have / 1073741824.0);
  }
  return 0;
}

/* The library's kernel paths, as pe_force_isa names them (--isa takes
 * these, "auto", or "all": each one this CPU runs). */
static const char *const isa_paths[] = {"scalar", "avx2", "avx512", "avx512bf16", "neon"};
enum { N_ISA_PATHS = sizeof isa_paths / sizeof isa_paths[0] };

static int parse_args(int argc, char **argv) {
  memset(&opt, 0, sizeof opt);
  snprintf(opt.suites, sizeof opt.suites, DEFAULT_SUITES);
  opt.model = &pb_models[0];
  opt.style = -1;
  opt.dtype = -1;
  opt.layouts = 3;
  opt.batch = 1;
  opt.threads[0] = 1, opt.threads[1] = 2, opt.n_threads = 2;
  opt.reps = 15;
  opt.warmup = 2;
  opt.sample_ns = 5e5;
  opt.max_positions = -1;
  opt.fresh_cache = 1;
  const char *format = NULL;
  for (int i = 1; i < argc; i++) {
    char *a = argv[i], *val = NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    }
    if (!strcmp(a, "--json") || !strcmp(a, "--csv")) {
      if (format && strcmp(format, a))
        return bad("%s and %s: choose one output", format, a);
      format = a;
      opt.fmt = a[2] == 'j' ? FMT_JSON : FMT_CSV;
      continue;
    }
    if (!strcmp(a, "--no-pin")) { opt.no_pin = 1; continue; }
    if (!strcmp(a, "--wide")) { opt.wide = 1; continue; }
    if (!strcmp(a, "--stream-cache")) {
      opt.stream_cache = 1;
      pb_store_flags = PE_ROPE_STREAM_CACHE;
      continue;
    }
    size_t klen = strcspn(a, "=");
    int k = 0;
    while (k < N_WITH && !(strlen(with_value[k]) == klen && !strncmp(a, with_value[k], klen))) k++;
    if (strncmp(a, "--", 2) != 0 || k == N_WITH)
      return bad("unknown option \"%s\" (see --help)", a);
    char key[32];
    snprintf(key, sizeof key, "%.*s", (int)klen, a);
    if (a[klen] == '=') {
      val = a + klen + 1;
    } else {
      if (i + 1 >= argc) return bad("%s needs a value", key);
      val = argv[++i];
    }
    if (!strcmp(key, "--suites")) k = 0, snprintf(key, sizeof key, "--suite");
    if (given_values[k])
      return bad("%s given twice (\"%s\", then \"%s\")", key, given_values[k], val);
    given_values[k] = val;
    long x;
    if (!strcmp(key, "--suite")) {
      if (set_suites(val)) return -1;
    } else if (!strcmp(key, "--model")) {
      if (!strcmp(val, "list")) {
        models_list(stdout);
        exit(0);
      }
      if (!(opt.model = model_find(val))) {
        char names[256] = "";
        for (int m = 0; m < pb_n_models; m++)
          snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", m ? ", " : "",
                   pb_models[m].name);
        return bad("--model \"%s\": unknown model (the models: %s; --model list)", val, names);
      }
      opt.model_given = 1;
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
      else return bad("--style \"%s\": expected neox (pairs i, i + rotary_dim/2) or gptj "
                      "(pairs 2i, 2i+1)", val);
    } else if (!strcmp(key, "--tokens")) {
      if (parse_int(key, val, 1, 1 << 22, &x)) return -1;
      opt.tokens = x;
    } else if (!strcmp(key, "--batch")) {
      if (parse_int(key, val, 1, 4096, &x)) return -1;
      opt.batch = x;
    } else if (!strcmp(key, "--dtype")) {
      if (!strcmp(val, "f32")) opt.dtype = PE_F32;
      else if (!strcmp(val, "f16")) opt.dtype = PE_F16;
      else if (!strcmp(val, "bf16")) opt.dtype = PE_BF16;
      else return bad("--dtype \"%s\": expected f32, f16 or bf16 (the tensors' dtype; the "
                      "kvquant suite's fp8 and q8_0 caches are its cases)", val);
    } else if (!strcmp(key, "--layout")) {
      if (!strcmp(val, "bhtd")) opt.bthd = 0, opt.layouts = 1;
      else if (!strcmp(val, "bthd")) opt.bthd = 1, opt.layouts = 2;
      else return bad("--layout \"%s\": expected bhtd ([B,H,T,D]) or bthd ([B,T,H,D])", val);
    } else if (!strcmp(key, "--isa")) {
      int n = 0;
      while (n < N_ISA_PATHS && strcmp(val, isa_paths[n])) n++;
      if (n == N_ISA_PATHS && strcmp(val, "auto") && strcmp(val, "all"))
        return bad("--isa \"%s\": expected scalar, avx2, avx512, avx512bf16, neon, auto or all",
                   val);
      opt.isa = val;
    } else if (!strcmp(key, "--threads")) {
      if (set_threads(val)) return -1;
    } else if (!strcmp(key, "--hf-config")) {
      if (!*val) return bad("--hf-config \"\" names no file");
      opt.hf_config = val;
    } else if (!strcmp(key, "--reps")) {
      if (parse_int(key, val, 1, 100000, &x)) return -1;
      opt.reps = (int)x;
    } else if (!strcmp(key, "--warmup")) {
      if (parse_int(key, val, 0, 100000, &x)) return -1;
      opt.warmup = (int)x;
    } else if (!strcmp(key, "--fresh-cache")) {
      char *end;
      errno = 0;
      long kk = strtol(val, &end, 10);
      if (!strcmp(val, "auto"))
        opt.fresh_cache = 0;
      else if (errno || *end || end == val || kk < 1 || kk > 1L << 20)
        return bad("--fresh-cache expects auto or an integer in [1, 1048576], got \"%s\"", val);
      else
        opt.fresh_cache = kk;
    } else if (!strcmp(key, "--floor-data")) {
      if (strcmp(val, "l1") && strcmp(val, "call"))
        return bad("--floor-data expects l1 or call, got \"%s\"", val);
      opt.floor_call = !strcmp(val, "call");
    } else if (!strcmp(key, "--max-positions")) {
      if (parse_int(key, val, 0, 1L << 30, &x)) return -1;
      opt.max_positions = x;
    }
  }
  if (opt.wide && opt.fmt != FMT_TABLE)
    return bad("--wide and %s: --wide widens the table; %s always has every field", format,
               format);
  for (int k = 0; k < N_WITH; k++)
    if (given_values[k] && check_scope(with_value[k])) return -1;
  return check_options();
}

static void run_suites(void) {
  if (suite_selected("rope")) suite_rope();
  if (suite_selected("table")) suite_table();
  if (suite_selected("alibi")) suite_bias("alibi");
  if (suite_selected("t5")) suite_bias("t5");
  if (suite_selected("sinusoidal")) suite_embed("sinusoidal");
  if (suite_selected("learned")) suite_embed("learned");
  if (suite_selected("cutover")) suite_cutover();
  if (suite_selected("fused")) suite_fused();
  if (suite_selected("qknorm")) suite_qknorm();
  if (suite_selected("kvquant")) suite_kvquant();
  if (suite_selected("mla")) suite_mla();
}

int main(int argc, char **argv) {
  run_start = now_ns(); /* progress lines are stamped with the seconds since */
  if (parse_args(argc, argv) != 0) return 2;
  if (opt.hf_config && hf_load() != 0) return 1;
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
      for (int c = 0; c < CPU_SETSIZE && pb_n_team_cpus < MAX_THREADS * 4; c++)
        if (CPU_ISSET(c, &all) && c != main_cpu) pb_team_cpus[pb_n_team_cpus++] = c;
  }
  for (int i = 0; i < opt.n_threads; i++) team_prepare(opt.threads[i]);
  if (suite_selected("cutover")) team_prepare(cutover_threads());
  if (main_cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(main_cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
  }
  for (int i = 0; i < opt.n_threads; i++) pool_for(opt.threads[i]);
  if (suite_selected("cutover")) pool_for(cutover_threads()), cutover_prepare();

  if (opt.isa && !strcmp(opt.isa, "all")) {
    for (int i = 0; i < N_ISA_PATHS; i++)
      if (pe_force_isa(isa_paths[i]) == PE_OK) run_suites();
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
  pools_destroy();
  cutover_free();
  free(results);
  hf_free();
  return 0;
}
