/* pe-ab - two builds of libposenc in one process, timed alternately on the
 * same buffers, and their outputs compared byte for byte.
 *
 * The machines the library is measured on are shared virtual machines
 * whose speed moves by tens of percent between two runs of a program (and
 * within one). pe-bench's rows, and scripts/bench-compare.py's rounds of
 * them, compare runs of separate processes, so a change of a few percent
 * drowns in that drift. Here both libraries are loaded at once (each from a
 * private copy of its file, so that a build can be compared with itself),
 * one call pattern is chosen, and the samples alternate: base, new, new,
 * base, ... each sample a run of back-to-back calls on the same tensors and
 * caches. A slow spell of the machine lands on both sides of a pair, so the
 * ratio of each pair, and its median over the samples, keeps what the
 * change did. Before timing, each library runs once from the same inputs
 * and the bytes they write are compared: a change that claims to keep every
 * result bit can be checked here too (--same-bytes makes a difference an
 * error).
 *
 * The samples re-run the same buffers, so a call whose bytes fit the caches
 * is timed from them. --evict N writes a line of every 64 bytes of an N MiB
 * buffer before each call (one call a sample) and times the call alone:
 * with N well above the last-level cache the call's rows come from memory,
 * as a long prefill's do the first time they are touched (the difference
 * prefetching makes there does not show with warm caches). --fresh-cache K
 * gives the caches K times the slots and each call the next K-th of them
 * in turn: the rows it writes were last touched K calls before, as a
 * prefill writes slots no call has touched lately, while its q, k and v
 * stay warm.
 *
 * The calls, with a published model's attention shapes (default Qwen3-8B:
 * 32 q / 8 kv heads of 128, NeoX, theta 1e6):
 *   qknorm  pe_qk_norm_rope_store: per-head RMSNorm (weights +-1; --norm
 *           rms-token: over each token's heads, OLMo 2's; rms1: Gemma 3's
 *           x * r * (1 + w), weights 0 or -2; l2: Llama 4's x * r, no
 *           weight; none: no norm),
 *           RoPE, k and v into a paged NHD cache of 16-token
 *           blocks (--kv: plain rows of the dtype, FP8 with a per-tensor
 *           scale, k 0.05 and v 0.02 as pe-bench's kvquant suite, or Q8_0),
 *           q/k/v views of one packed QKV buffer [B, T, (hq + 2*hkv) * hd]
 *           (pe-bench's qknorm and kvquant suites)
 *   store   pe_apply_rope_qk_store: q rotated in place, k into the cache
 *   rope    pe_apply_rope_qk: q and k rotated in place
 *   mrope   pe_apply_mrope_qk: q and k rotated in place at three axes'
 *           positions, Qwen2-VL's sections (16/24/24 of 64 pairs, the same
 *           shares of other widths), a 16-token text prefix, a 32x32 image
 *           and text after it, as pe-bench's fused suite
 * --no-q leaves q NULL (store, rope, mrope): k alone, e.g. the cache write
 * of a k-only call.
 * Decode (--tokens 1) puts sequence b at position 4000 + 7b, as pe-bench. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mrope_case.h"
#include "posenc.h"

typedef struct lib {
  const char *path;
  char copy[4096];
  void *h;
  void (*params_init)(pe_rope_params *);
  pe_status (*cache_create)(const pe_rope_params *, pe_rope_cache **);
  void (*cache_destroy)(pe_rope_cache *);
  pe_status (*apply)(const pe_rope_cache *, const pe_tensor *, const pe_tensor *, const int64_t *,
                     uint32_t, pe_threadpool *);
  pe_status (*mrope)(const pe_rope_cache *, const pe_tensor *, const pe_tensor *, const int64_t *,
                     const int32_t *, uint32_t, pe_threadpool *);
  pe_status (*store)(const pe_rope_cache *, const pe_tensor *, const pe_tensor *,
                     const pe_tensor *, const int64_t *, const int64_t *, uint32_t,
                     pe_threadpool *);
  pe_status (*qk_norm_store)(const pe_rope_cache *, const pe_qk_norm *, const pe_tensor *,
                             const pe_tensor *, const pe_tensor *, const pe_kv_cache *,
                             const int64_t *, const int64_t *, uint32_t, pe_threadpool *);
  void (*norm_init)(pe_qk_norm *);
  void (*kv_init)(pe_kv_cache *);
  const char *(*last_error)(void);
  const char *(*isa_name)(void);
  pe_status (*force_isa)(const char *);
  pe_rope_cache *cache;
  pe_qk_norm norm;
  pe_kv_cache kv;
} lib;

enum { CASE_QKNORM, CASE_STORE, CASE_ROPE, CASE_MROPE, N_CASES };
static const char *const case_names[N_CASES] = {"qknorm", "store", "rope", "mrope"};

static struct {
  const char *base, *new_, *base_isa, *new_isa; /* --base-isa/--new-isa: NULL = as loaded */
  int kase, dtype, gptj, bhtd, layout_given, same_bytes, no_norm, norm_token, kv_given, no_q;
  pe_qk_norm_kind norm_kind; /* --norm: RMS (rms, rms-token), RMS_UNIT_OFFSET (rms1), L2 */
  uint32_t kv;
  int64_t tokens, batch, heads, kv_heads, head_dim, samples, evict_mib, fresh;
  double theta;
} opt = {NULL, NULL, NULL, NULL, CASE_QKNORM, PE_F32, 0, 0, 0, 0, 0, 0, 0, 0, PE_QK_NORM_RMS,
           PE_KV_PLAIN, 512, 1, 32, 8, 128, 100, 0, 1, 1e6};

/* The call's tensors: q, k (and v) as views, the caches, positions, slots. */
static struct {
  void *qkv, *q, *k, *kc, *vc; /* qknorm: qkv; store/rope: q, k */
  size_t qkv_bytes, q_bytes, k_bytes, cache_bytes;
  pe_tensor tq, tk, tv, tkc, tvc;
  int64_t *pos, *slots, *slot_sets; /* slots: the call's; slot_sets: --fresh-cache's K */
  int64_t *pos3;                     /* mrope: [3][batch][tokens] */
  int32_t section[3];
  int64_t region;                    /* the next call's K-th of the caches */
  float *qw, *kw, k_scale, v_scale;
} t;

static char tmpdir[] = "/tmp/pe-ab.XXXXXX";

static void cleanup(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/base.so", tmpdir);
  unlink(path);
  snprintf(path, sizeof path, "%s/new.so", tmpdir);
  unlink(path);
  rmdir(tmpdir);
}

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "pe-ab: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(2);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: pe-ab --base LIB --new LIB [options]\n"
          "Times two builds of libposenc in one process, alternately on the same\n"
          "buffers, after comparing the bytes each writes from the same inputs.\n\n"
          "  --base LIB, --new LIB  the two libposenc.so files (each loaded from a\n"
          "                     private copy: a build can be compared with itself)\n"
          "  --base-isa NAME, --new-isa NAME  that side's kernel path (scalar, avx2,\n"
          "                     avx512, avx512bf16, neon; default: as PE_ISA or the\n"
          "                     CPU chooses): two paths of one build, paired\n"
          "  --case NAME        qknorm (pe_qk_norm_rope_store, default), store\n"
          "                     (pe_apply_rope_qk_store), rope (pe_apply_rope_qk) or\n"
          "                     mrope (pe_apply_mrope_qk: Qwen2-VL's sections and a\n"
          "                     32x32 image after 16 text tokens)\n"
          "  --no-q             store, rope, mrope: q NULL (k alone)\n"
          "  --tokens N         tokens per sequence (default 512; 1: decode)\n"
          "  --batch N          sequences (default 1)\n"
          "  --dtype f32|f16|bf16  tensor and cache dtype (default f32)\n"
          "  --layout bhtd|bthd q and k of store, rope and mrope as [B,H,T,D] or [B,T,H,D]\n"
          "                     (default bthd; qknorm's are views of a packed buffer)\n"
          "  --kv plain|fp8e4m3|fp8e5m2|q8_0  qknorm's cache format (default plain)\n"
          "  --norm rms|rms-token|rms1|l2|none  qknorm's norm (default rms, per head;\n"
          "                     rms-token: per token, OLMo 2's; rms1: x * r * (1 + w),\n"
          "                     Gemma 3's; l2: x * r, Llama 4's)\n"
          "  --heads N, --kv-heads N, --head-dim N, --style neox|gptj, --theta X\n"
          "                     the shapes (default Qwen3-8B: 32, 8, 128, neox, 1e6)\n"
          "  --samples N        timed samples per library (default 100)\n"
          "  --fresh-cache K    qknorm, store: caches of K times the slots, each call\n"
          "                     writing the next K-th in turn (cold cache rows)\n"
          "  --evict N          before each call write every cache line of an N MiB\n"
          "                     buffer (one call a sample): the call from memory\n"
          "                     when N is well above the last-level cache\n"
          "  --same-bytes       exit 1 when the two builds write different bytes\n"
          "  -h, --help         this text\n\n"
          "Prints each side's fastest and median time per call and new/base: the\n"
          "median of the per-pair ratios (with its quartiles), the ratio of the\n"
          "fastest samples and of the medians. Below 1: new is faster.\n");
}

static int64_t int_arg(const char *name, const char *v, int64_t lo, int64_t hi) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    die("%s expects an integer in [%" PRId64 ", %" PRId64 "], got \"%s\"", name, lo, hi, v);
  return (int64_t)x;
}

static void parse(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    }
    if (!strcmp(a, "--no-q")) {
      opt.no_q = 1;
      continue;
    }
    if (!strcmp(a, "--same-bytes")) {
      opt.same_bytes = 1;
      continue;
    }
    if (i + 1 >= argc) die("%s needs a value (pe-ab --help)", a);
    const char *v = argv[++i];
    if (!strcmp(a, "--base")) opt.base = v;
    else if (!strcmp(a, "--new")) opt.new_ = v;
    else if (!strcmp(a, "--base-isa")) opt.base_isa = v;
    else if (!strcmp(a, "--new-isa")) opt.new_isa = v;
    else if (!strcmp(a, "--case")) {
      int k = 0;
      while (k < N_CASES && strcmp(v, case_names[k])) k++;
      if (k == N_CASES) die("--case expects qknorm, store, rope or mrope, got \"%s\"", v);
      opt.kase = k;
    } else if (!strcmp(a, "--tokens")) opt.tokens = int_arg(a, v, 1, 1 << 20);
    else if (!strcmp(a, "--batch")) opt.batch = int_arg(a, v, 1, 4096);
    else if (!strcmp(a, "--heads")) opt.heads = int_arg(a, v, 1, 1024);
    else if (!strcmp(a, "--kv-heads")) opt.kv_heads = int_arg(a, v, 1, 1024);
    else if (!strcmp(a, "--head-dim")) opt.head_dim = int_arg(a, v, 2, 1024);
    else if (!strcmp(a, "--samples")) opt.samples = int_arg(a, v, 3, 100000);
    else if (!strcmp(a, "--evict")) opt.evict_mib = int_arg(a, v, 1, 1 << 16);
    else if (!strcmp(a, "--fresh-cache")) opt.fresh = int_arg(a, v, 1, 4096);
    else if (!strcmp(a, "--dtype")) {
      if (!strcmp(v, "f32")) opt.dtype = PE_F32;
      else if (!strcmp(v, "f16")) opt.dtype = PE_F16;
      else if (!strcmp(v, "bf16")) opt.dtype = PE_BF16;
      else die("--dtype expects f32, f16 or bf16, got \"%s\"", v);
    } else if (!strcmp(a, "--layout")) {
      if (strcmp(v, "bhtd") && strcmp(v, "bthd"))
        die("--layout expects bhtd or bthd, got \"%s\"", v);
      opt.bhtd = !strcmp(v, "bhtd");
      opt.layout_given = 1;
    } else if (!strcmp(a, "--kv")) {
      static const char *const f[] = {"plain", "fp8e4m3", "fp8e5m2", "q8_0"};
      static const uint32_t q[] = {PE_KV_PLAIN, PE_KV_FP8_E4M3, PE_KV_FP8_E5M2, PE_KV_Q8_0};
      int k = 0;
      while (k < 4 && strcmp(v, f[k])) k++;
      if (k == 4) die("--kv expects plain, fp8e4m3, fp8e5m2 or q8_0, got \"%s\"", v);
      opt.kv = q[k];
      opt.kv_given = 1;
    } else if (!strcmp(a, "--norm")) {
      if (strcmp(v, "rms") && strcmp(v, "rms-token") && strcmp(v, "rms1") && strcmp(v, "l2") &&
          strcmp(v, "none"))
        die("--norm expects rms, rms-token, rms1, l2 or none, got \"%s\"", v);
      opt.no_norm = !strcmp(v, "none");
      opt.norm_kind = !strcmp(v, "rms1") ? PE_QK_NORM_RMS_UNIT_OFFSET
                      : !strcmp(v, "l2") ? PE_QK_NORM_L2
                                         : PE_QK_NORM_RMS;
      opt.norm_token = !strcmp(v, "rms-token");
      opt.kv_given = 1;
    } else if (!strcmp(a, "--style")) {
      if (strcmp(v, "neox") && strcmp(v, "gptj")) die("--style expects neox or gptj, got \"%s\"", v);
      opt.gptj = !strcmp(v, "gptj");
    } else if (!strcmp(a, "--theta")) {
      char *end;
      opt.theta = strtod(v, &end);
      if (end == v || *end || !(opt.theta > 1.0) || !isfinite(opt.theta))
        die("--theta expects a finite number above 1, got \"%s\"", v);
    } else {
      die("unknown option %s (pe-ab --help)", a);
    }
  }
  if (!opt.base || !opt.new_) die("give both --base LIB and --new LIB (pe-ab --help)");
  if (opt.head_dim % 2) die("--head-dim %" PRId64 " is odd: RoPE rotates pairs", opt.head_dim);
  if (opt.kase == CASE_QKNORM && opt.layout_given)
    die("--layout shapes store, rope and mrope: qknorm's q, k and v are views of one packed "
        "buffer");
  if (opt.kase == CASE_QKNORM && opt.no_q)
    die("--no-q shapes store, rope and mrope (--case qknorm rotates q, k and v of one buffer)");
  if (opt.kase != CASE_QKNORM && opt.kv_given)
    die("--kv and --norm shape qknorm only (--case %s)", case_names[opt.kase]);
  if ((opt.kase == CASE_ROPE || opt.kase == CASE_MROPE) && opt.fresh > 1)
    die("--fresh-cache shapes the caches of qknorm and store (--case %s)", case_names[opt.kase]);
  if (opt.kase == CASE_MROPE && opt.head_dim < 8)
    die("--case mrope needs --head-dim 8 or more (three sections of its pairs), got %" PRId64,
        opt.head_dim);
  if (opt.kv == PE_KV_Q8_0 && opt.head_dim % 32)
    die("--kv q8_0 needs --head-dim a multiple of 32 (blocks of 32), got %" PRId64, opt.head_dim);
  /* the buffers, their copies for the bytes check, and --fresh-cache's
   * further cache parts (k and v, each copied twice by that check) */
  double bytes = (double)(opt.batch * opt.tokens) * (double)(opt.heads + 2 * opt.kv_heads) *
                 (double)opt.head_dim * 4.0 * 5.0 +
                 (double)(opt.batch * opt.tokens) * 2.0 * (double)opt.kv_heads *
                     (double)opt.head_dim * 4.0 * 3.0 * (double)(opt.fresh - 1);
  double have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  bytes += (double)opt.evict_mib * 1048576.0;
  if (have > 0 && bytes > have / 2)
    die("--tokens %" PRId64 " --batch %" PRId64 ": about %.1f GiB of buffers, more than half of "
        "this machine's %.1f GiB", opt.tokens, opt.batch, bytes / 1073741824.0,
        have / 1073741824.0);
}

static void *sym(lib *l, const char *name) {
  void *p = dlsym(l->h, name);
  if (!p) die("%s has no %s: not a libposenc build this tool knows", l->path, name);
  return p;
}

/* A private copy of the file (dlopen returns the loaded object again for a
 * path it has seen), loaded with its own symbols. */
static void load(lib *l, const char *path, const char *as) {
  l->path = path;
  snprintf(l->copy, sizeof l->copy, "%s/%s", tmpdir, as);
  FILE *in = fopen(path, "rb");
  if (!in) die("cannot read %s: %s", path, strerror(errno));
  FILE *out = fopen(l->copy, "wb");
  if (!out) die("cannot write %s: %s", l->copy, strerror(errno));
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0)
    if (fwrite(buf, 1, n, out) != n) die("cannot write %s", l->copy);
  fclose(in);
  if (fclose(out)) die("cannot write %s", l->copy);
  l->h = dlopen(l->copy, RTLD_NOW | RTLD_LOCAL);
  if (!l->h) die("cannot load %s: %s", path, dlerror());
  *(void **)&l->params_init = sym(l, "pe_rope_params_init");
  *(void **)&l->cache_create = sym(l, "pe_rope_cache_create");
  *(void **)&l->cache_destroy = sym(l, "pe_rope_cache_destroy");
  *(void **)&l->apply = sym(l, "pe_apply_rope_qk");
  *(void **)&l->mrope = sym(l, "pe_apply_mrope_qk");
  *(void **)&l->store = sym(l, "pe_apply_rope_qk_store");
  *(void **)&l->qk_norm_store = sym(l, "pe_qk_norm_rope_store");
  *(void **)&l->norm_init = sym(l, "pe_qk_norm_init");
  *(void **)&l->kv_init = sym(l, "pe_kv_cache_init");
  *(void **)&l->last_error = sym(l, "pe_last_error");
  *(void **)&l->isa_name = sym(l, "pe_isa_name");
  *(void **)&l->force_isa = sym(l, "pe_force_isa");
}

/* --base-isa / --new-isa: that copy's kernel path (pe_force_isa; each copy
 * has its own), so two paths of one build can be paired on this CPU. */
static void force(lib *l, const char *isa) {
  if (isa && l->force_isa(isa) != PE_OK) die("%s: %s", l->path, l->last_error());
}

static int64_t max_position(void) {
  if (opt.kase == CASE_MROPE) return opt.tokens + 64; /* pos3's text after the image */
  return opt.tokens == 1 ? 4000 + 7 * (opt.batch - 1) : opt.tokens - 1;
}

static void setup_lib(lib *l) {
  pe_rope_params p;
  memset(&p, 0, sizeof p);
  l->params_init(&p);
  p.head_dim = (int32_t)opt.head_dim;
  p.style = opt.gptj ? PE_ROPE_GPTJ : PE_ROPE_NEOX;
  p.base = opt.theta;
  p.max_positions = max_position() + 1 > 8192 ? max_position() + 1 : 8192;
  if (l->cache_create(&p, &l->cache) != PE_OK)
    die("%s: pe_rope_cache_create: %s", l->path, l->last_error());
  memset(&l->norm, 0, sizeof l->norm);
  l->norm_init(&l->norm);
  if (!opt.no_norm) {
    l->norm.kind = opt.norm_kind;
    l->norm.eps = 1e-6f;
    l->norm.scope = opt.norm_token ? PE_QK_NORM_PER_TOKEN : PE_QK_NORM_PER_HEAD;
    if (opt.norm_kind != PE_QK_NORM_L2) {
      l->norm.q_weight = t.qw;
      l->norm.k_weight = t.kw;
    }
  }
  memset(&l->kv, 0, sizeof l->kv);
  l->kv_init(&l->kv);
  l->kv.k = &t.tkc;
  l->kv.v = &t.tvc;
  l->kv.k_quant = l->kv.v_quant = opt.kv;
  if (opt.kv == PE_KV_FP8_E4M3 || opt.kv == PE_KV_FP8_E5M2)
    l->kv.k_scale = &t.k_scale, l->kv.v_scale = &t.v_scale;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float rnd(void) { /* in [-1, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void *fill(size_t elems, int dt) {
  size_t es = dt == PE_F32 ? 4 : 2;
  void *p = NULL;
  if (posix_memalign(&p, 64, elems ? elems * es : 64)) die("out of memory");
  for (size_t i = 0; i < elems; i++) {
    float f = rnd();
    uint32_t u;
    memcpy(&u, &f, 4);
    if (dt == PE_F32) {
      memcpy((char *)p + 4 * i, &f, 4);
    } else {
      uint16_t h;
      if (dt == PE_BF16) {
        h = (uint16_t)(u >> 16);
      } else { /* |f| < 1: an f16 of its top bits (2^-14 and above), else 0 */
        uint32_t a = u & 0x7fffffffu;
        h = (uint16_t)(u >> 16 & 0x8000u);
        if (a >= 0x38800000u) h |= (uint16_t)((a - 0x38000000u) >> 13);
      }
      memcpy((char *)p + 2 * i, &h, 2);
    }
  }
  return p;
}

enum { BLOCK = 16 };

static void setup_tensors(void) {
  const int64_t B = opt.batch, T = opt.tokens, H = opt.heads, K = opt.kv_heads, D = opt.head_dim;
  const int64_t n = B * T;
  const size_t es = opt.dtype == PE_F32 ? 4 : 2;
  const pe_dtype dt = (pe_dtype)opt.dtype;
  if (opt.kase == CASE_QKNORM) {
    const int64_t row = (H + 2 * K) * D;
    t.qkv = fill((size_t)(n * row), opt.dtype);
    t.qkv_bytes = (size_t)(n * row) * es;
    pe_tensor base = {t.qkv, dt, {B, H, T, D}, {T * row, D, row, 1}};
    t.tq = t.tk = t.tv = base;
    t.tk.shape[1] = t.tv.shape[1] = K;
    t.tk.data = (char *)t.qkv + H * D * es;
    t.tv.data = (char *)t.qkv + (H + K) * D * es;
  } else {
    t.q = fill((size_t)(n * H * D), opt.dtype);
    t.k = fill((size_t)(n * K * D), opt.dtype);
    t.q_bytes = (size_t)(n * H * D) * es;
    t.k_bytes = (size_t)(n * K * D) * es;
    pe_tensor q = {t.q, dt, {B, H, T, D}, {H * T * D, T * D, D, 1}};
    if (!opt.bhtd) q.stride[1] = D, q.stride[2] = H * D;
    pe_tensor k = q;
    k.data = t.k;
    k.shape[1] = K;
    k.stride[0] = K * T * D;
    if (opt.bhtd) k.stride[1] = T * D;
    else k.stride[2] = K * D;
    t.tq = q, t.tk = k;
  }
  /* paged NHD caches of BLOCK-token blocks, block 0 unused; quantized rows
   * are bytes (strides in bytes) */
  const int64_t region = (n + BLOCK - 1) / BLOCK + 2, blocks = region * opt.fresh;
  const int64_t rb = opt.kv == PE_KV_PLAIN ? D : opt.kv == PE_KV_Q8_0 ? D / 32 * 34 : D;
  const size_t ces = opt.kv == PE_KV_PLAIN ? es : 1;
  t.cache_bytes = (size_t)(blocks * BLOCK * K * rb) * ces;
  t.kc = calloc(1, t.cache_bytes);
  t.vc = calloc(1, t.cache_bytes);
  if (!t.kc || !t.vc) die("out of memory");
  /* every page written now: calloc's are mapped at their first write, which
   * would land in the timed calls (--fresh-cache's parts, one call each) */
  memset(t.kc, 0, t.cache_bytes);
  memset(t.vc, 0, t.cache_bytes);
  t.k_scale = 0.05f, t.v_scale = 0.02f;
  pe_tensor kc = {t.kc, opt.kv == PE_KV_PLAIN ? dt : PE_F32, {blocks, K, BLOCK, D},
                  {BLOCK * K * rb, rb, K * rb, 1}};
  t.tkc = t.tvc = kc;
  t.tvc.data = t.vc;
  t.pos = malloc((size_t)n * sizeof *t.pos);
  t.slot_sets = malloc((size_t)(n * opt.fresh) * sizeof *t.slot_sets);
  t.slots = t.slot_sets;
  t.pos3 = malloc((size_t)(3 * n) * sizeof *t.pos3); /* mrope (mrope_case.h) */
  if (!t.pos3) die("out of memory");
  mrope_case_positions(t.pos3, B, T);
  mrope_case_sections((int32_t)(D / 2), t.section);
  /* per head: head_dim weights; per token: one per channel of the token */
  const int64_t nqw = opt.norm_token ? opt.heads * D : D, nkw = opt.norm_token ? opt.kv_heads * D : D;
  t.qw = malloc((size_t)nqw * sizeof *t.qw);
  t.kw = malloc((size_t)nkw * sizeof *t.kw);
  if (!t.pos || !t.slot_sets || !t.qw || !t.kw) die("out of memory");
  for (int64_t b = 0; b < B; b++)
    for (int64_t i = 0; i < T; i++) {
      t.pos[b * T + i] = T == 1 ? 4000 + 7 * b : i;
      for (int64_t r = 0; r < opt.fresh; r++) /* block 0 of each K-th unused */
        t.slot_sets[r * n + b * T + i] = (r * region + 1) * BLOCK + b * T + i;
    }
  /* magnitude 1 as applied: rms1 multiplies by 1 + w */
  const float w0 = opt.norm_kind == PE_QK_NORM_RMS_UNIT_OFFSET ? -1.0f : 0.0f;
  for (int64_t e = 0; e < nqw; e++) t.qw[e] = w0 + (rnd() < 0 ? -1.0f : 1.0f);
  for (int64_t e = 0; e < nkw; e++) t.kw[e] = w0 + (rnd() < 0 ? -1.0f : 1.0f);
}

static pe_status call(lib *l) {
  t.slots = t.slot_sets + t.region * opt.batch * opt.tokens;
  t.region = t.region + 1 < opt.fresh ? t.region + 1 : 0;
  const pe_tensor *q = opt.no_q ? NULL : &t.tq;
  switch (opt.kase) {
  case CASE_QKNORM:
    return l->qk_norm_store(l->cache, &l->norm, &t.tq, &t.tk, &t.tv, &l->kv, t.slots, t.pos, 0,
                            NULL);
  case CASE_STORE:
    return l->store(l->cache, q, &t.tk, &t.tkc, t.slots, t.pos, 0, NULL);
  case CASE_MROPE:
    return l->mrope(l->cache, q, &t.tk, t.pos3, t.section, 0, NULL);
  default:
    return l->apply(l->cache, q, &t.tk, t.pos, 0, NULL);
  }
}

/* The buffers a call writes, in order: (address, bytes). */
static int written(void **p, size_t *n) {
  int m = 0;
  if (opt.kase == CASE_QKNORM) {
    p[m] = t.qkv, n[m++] = t.qkv_bytes;
  } else {
    p[m] = t.q, n[m++] = t.q_bytes;
    p[m] = t.k, n[m++] = t.k_bytes;
  }
  if (opt.kase == CASE_STORE || opt.kase == CASE_QKNORM) p[m] = t.kc, n[m++] = t.cache_bytes;
  if (opt.kase == CASE_QKNORM) p[m] = t.vc, n[m++] = t.cache_bytes;
  return m;
}

static const char *const buffer_names[2][4] = {{"q/k/v", "k cache", "v cache", ""},
                                               {"q", "k", "k cache", ""}};

/* Each library once from the same inputs; 1 when they wrote the same bytes
 * (the first difference printed otherwise). The inputs are restored. */
static int same_bytes(lib *a, lib *b) {
  void *p[4];
  size_t n[4];
  int m = written(p, n);
  void *orig[4], *out[4];
  for (int i = 0; i < m; i++) {
    orig[i] = malloc(n[i]);
    out[i] = malloc(n[i]);
    if (!orig[i] || !out[i]) die("out of memory");
    memcpy(orig[i], p[i], n[i]);
  }
  t.region = 0; /* both into the same slots */
  if (call(a) != PE_OK) die("%s: %s", a->path, a->last_error());
  for (int i = 0; i < m; i++) memcpy(out[i], p[i], n[i]), memcpy(p[i], orig[i], n[i]);
  t.region = 0;
  if (call(b) != PE_OK) die("%s: %s", b->path, b->last_error());
  int same = 1;
  for (int i = 0; i < m && same; i++)
    for (size_t j = 0; j < n[i]; j++)
      if (((unsigned char *)p[i])[j] != ((unsigned char *)out[i])[j]) {
        printf("bytes differ: %s, byte %zu of %zu: base 0x%02x, new 0x%02x\n",
               buffer_names[opt.kase != CASE_QKNORM][i], j, n[i], ((unsigned char *)out[i])[j],
               ((unsigned char *)p[i])[j]);
        same = 0;
        break;
      }
  for (int i = 0; i < m; i++) {
    memcpy(p[i], orig[i], n[i]);
    free(orig[i]);
    free(out[i]);
  }
  return same;
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* --evict: the buffer whose lines are written before each call. */
static volatile unsigned char *evict_buf;
static size_t evict_bytes;

static void evict(void) {
  for (size_t j = 0; j < evict_bytes; j += 64) evict_buf[j]++;
}

static double timed(lib *l, int64_t calls) {
  if (evict_buf) evict();
  double t0 = now_ns();
  for (int64_t i = 0; i < calls; i++)
    if (call(l) != PE_OK) die("%s: %s", l->path, l->last_error());
  return (now_ns() - t0) / (double)calls;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The q-th quantile of sorted v[0..n), interpolated (numpy's default). */
static double quantile(const double *v, int64_t n, double q) {
  double at = q * (double)(n - 1);
  int64_t i = (int64_t)at;
  return i + 1 < n ? v[i] + (at - (double)i) * (v[i + 1] - v[i]) : v[n - 1];
}

int main(int argc, char **argv) {
  parse(argc, argv);
  if (!mkdtemp(tmpdir)) die("cannot make a directory under /tmp: %s", strerror(errno));
  atexit(cleanup);
  lib L[2];
  memset(L, 0, sizeof L);
  load(&L[0], opt.base, "base.so");
  load(&L[1], opt.new_, "new.so");
  force(&L[0], opt.base_isa);
  force(&L[1], opt.new_isa);
  setup_tensors();
  setup_lib(&L[0]);
  setup_lib(&L[1]);
  static const char *const kv_names[] = {"plain", "fp8e4m3", "fp8e5m2", "q8_0"};
  char extra[64];
  if (opt.kase == CASE_QKNORM)
    snprintf(extra, sizeof extra, ", %s cache, %s norm", kv_names[opt.kv],
             opt.no_norm                                     ? "no"
             : opt.norm_token                                ? "per-token rms"
             : opt.norm_kind == PE_QK_NORM_RMS_UNIT_OFFSET ? "rms (1 + w)"
             : opt.norm_kind == PE_QK_NORM_L2               ? "l2"
                                                             : "rms");
  else
    snprintf(extra, sizeof extra, ", %s%s", opt.bhtd ? "bhtd" : "bthd", opt.no_q ? ", k only" : "");
  printf("pe-ab: %s, %" PRId64 "q/%" PRId64 "kv x%" PRId64 " %s, %" PRId64 "x%" PRId64
         " tokens, %s%s; base %s (%s), new %s (%s)\n",
         case_names[opt.kase], opt.heads, opt.kv_heads, opt.head_dim, opt.gptj ? "gptj" : "neox",
         opt.batch, opt.tokens,
         opt.dtype == PE_F32 ? "f32" : opt.dtype == PE_F16 ? "f16" : "bf16", extra, opt.base,
         L[0].isa_name(), opt.new_, L[1].isa_name());
  int same = same_bytes(&L[0], &L[1]);
  if (same) printf("same bytes: yes\n");
  /* warm both, then calls per sample for >= 0.2 ms (at least 1) */
  for (int w = 0; w < 3; w++) timed(&L[0], 1), timed(&L[1], 1);
  double one = timed(&L[0], 1);
  int64_t calls = one > 0 ? (int64_t)(2e5 / one) : 1;
  if (calls < 1) calls = 1;
  if (opt.evict_mib) { /* one call a sample, each after the eviction */
    evict_bytes = (size_t)opt.evict_mib << 20;
    unsigned char *e = malloc(evict_bytes);
    if (!e) die("--evict %" PRId64 ": out of memory", opt.evict_mib);
    memset(e, 1, evict_bytes);
    evict_buf = e;
    calls = 1;
  }
  const int64_t S = opt.samples;
  double *v = malloc((size_t)S * 3 * sizeof *v), *vb = v, *vn = v + S, *r = v + 2 * S;
  if (!v) die("out of memory");
  for (int64_t i = 0; i < S; i++) {
    int first = (int)(i & 1); /* base, new, new, base, ... */
    double x[2];
    x[first] = timed(&L[first], calls);
    x[1 - first] = timed(&L[1 - first], calls);
    vb[i] = x[0], vn[i] = x[1], r[i] = x[1] / x[0];
  }
  qsort(vb, (size_t)S, sizeof *v, cmp);
  qsort(vn, (size_t)S, sizeof *v, cmp);
  qsort(r, (size_t)S, sizeof *v, cmp);
  printf("%" PRId64 " samples a side, %" PRId64 " call%s each, alternated%s", S, calls,
         calls == 1 ? "" : "s", evict_buf ? ", each call after an eviction" : "");
  if (opt.fresh > 1) printf(", each call into the next of %" PRId64 " cache parts", opt.fresh);
  printf("\n");
  printf("      fastest ns/call  median ns/call\n");
  printf("base  %15.0f  %14.0f\n", vb[0], quantile(vb, S, 0.5));
  printf("new   %15.0f  %14.0f\n", vn[0], quantile(vn, S, 0.5));
  printf("new/base: %.3f, the median of the pairs' ratios (quartiles %.3f..%.3f); fastest %.3f, "
         "medians %.3f\n",
         quantile(r, S, 0.5), quantile(r, S, 0.25), quantile(r, S, 0.75), vn[0] / vb[0],
         quantile(vn, S, 0.5) / quantile(vb, S, 0.5));
  free(v);
  free((void *)evict_buf);
  for (int i = 0; i < 2; i++) L[i].cache_destroy(L[i].cache);
  if (!same && opt.same_bytes) return 1;
  return 0;
}
