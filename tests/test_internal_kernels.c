/* test_internal_kernels.c - every kernel of every struct pe_isa this build
 * and CPU run (src/kernels/isa.h), called directly on the same random inputs
 * as pe__isa_scalar and compared bit for bit: whole buffers, gaps and guard
 * elements included. A vector path the build or the CPU lacks is reported as
 * a cmocka skip, never as a pass. The scalar reference itself is checked
 * against float64 arithmetic and IEEE conversion formulas written here.
 *
 * Inputs are random bit patterns mixed with the values that decide bit
 * identity: signed zeros, Inf, quiet and signaling NaNs with payloads (in
 * the tensor data; cos/sin and add_row's v are never NaN, isa.h),
 * subnormals (inputs and rotation results, which send AVX512-BF16's
 * conversion to its integer fallback), overflow to Inf in the narrow types. */
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
#include "kernels/isa.h"

#include "internal_isa.h"
#include "test_util.h"

static const pe_isa *const ref = &pe__isa_scalar;

/* ---- random inputs ---- */

static uint64_t rng_s = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) { return splitmix64(&rng_s); }
static uint32_t rnd_below(uint32_t n) { return (uint32_t)(rnd() % n); }


/* float32 bit patterns: 1/8 random bits, 1/8 special values, 1/8
 * subnormals, the rest of moderate magnitude (2^-20 .. 2^8, random sign). */
static uint32_t gen_f32(void) {
  static const uint32_t special[] = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc12345u,
      0x7f800001u, 0xff812345u, 0x7fbfffffu, 0x00000001u, 0x807fffffu, 0x00800000u,
      0x7f7fffffu, 0xff7fffffu, 0x3f800000u, 0xbf7fffffu, 0x477ff000u, 0x477fefffu,
      0x33000000u, 0x33000001u, 0x3f808000u, 0x3f818000u, 0xc7800000u, 0x387fe000u};
  uint32_t r = (uint32_t)rnd();
  switch (rnd_below(8)) {
    case 0: return r;
    case 1: return special[rnd_below(sizeof special / sizeof special[0])];
    case 2: return (r & 0x807fffffu);
    default: return (r & 0x807fffffu) | ((107u + rnd_below(29)) << 23);
  }
}
/* binary16 bit patterns, the same mix. */
static uint16_t gen_f16(void) {
  static const uint16_t special[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01,
                                     0xfd55, 0x7dff, 0x0001, 0x83ff, 0x0400, 0x7bff, 0xfbff,
                                     0x3c00, 0xbbff};
  uint16_t r = (uint16_t)rnd();
  switch (rnd_below(8)) {
    case 0: return r;
    case 1: return special[rnd_below(sizeof special / sizeof special[0])];
    case 2: return (uint16_t)(r & 0x83ffu);
    default: return (uint16_t)((r & 0x83ffu) | ((5u + rnd_below(18)) << 10));
  }
}
static uint16_t gen_bf16(void) { return (uint16_t)(gen_f32() >> 16); }
/* The same mix without NaN (Inf kept): operands that are never NaN. */
static uint32_t gen_f32_no_nan(void) {
  uint32_t u;
  do u = gen_f32();
  while ((u & 0x7fffffffu) > 0x7f800000u);
  return u;
}

static size_t esz(int dt) { return dt == PE_F32 ? 4 : 2; }

/* A QK-norm scale: mostly as pe__norm_scale makes them (1/sqrt of a mean
 * square, rounded per operation), now and then any float32 but NaN (Inf, 0,
 * subnormals, huge: the kernels take it as given). */
static float gen_scale(void) {
  if (rnd_below(8)) return 1.0f / sqrtf(0.01f + (float)rnd_below(1u << 20) / 4096.0f);
  return bits_f32(gen_f32_no_nan());
}

static void fill(void *p, int dt, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (dt == PE_F32) {
      uint32_t u = gen_f32();
      memcpy((char *)p + 4 * i, &u, 4);
    } else {
      uint16_t h = dt == PE_F16 ? gen_f16() : gen_bf16();
      memcpy((char *)p + 2 * i, &h, 2);
    }
  }
}

/* cos/sin of a token: mostly true cos/sin of an angle (optionally scaled, as
 * the attention factor does), sometimes arbitrary non-NaN float32 patterns
 * (isa.h: cos/sin are never NaN; which of several NaN operands an x86
 * instruction returns depends on the operand order the compiler picks). */
static void fill_cs(float *c, float *s, int32_t n) {
  int mode = (int)rnd_below(4);
  float scale = rnd_below(2) ? 1.0f : 1.0f + (float)rnd_below(1000) / 1000.0f;
  for (int32_t i = 0; i < n; i++) {
    if (mode == 0) {
      c[i] = bits_f32(gen_f32_no_nan());
      s[i] = bits_f32(gen_f32_no_nan());
    } else {
      double a = (double)(rnd() >> 11) * 0x1p-53 * 64.0 - 32.0;
      c[i] = (float)cos(a) * scale;
      s[i] = (float)sin(a) * scale;
      if (mode == 1) s[i] = -s[i]; /* the inverse rotation's rows */
    }
  }
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  assert_non_null(p);
  return p;
}

/* memcmp, with the first differing element (of es bytes) named on failure. */
static void assert_same(const void *a, const void *b, size_t n, size_t es, const char *what) {
  if (!memcmp(a, b, n)) return;
  size_t i = 0;
  while (((const unsigned char *)a)[i] == ((const unsigned char *)b)[i]) i++;
  i /= es;
  uint64_t x = 0, y = 0; /* elements of up to 8 bytes */
  memcpy(&x, (const char *)a + i * es, es < 8 ? es : 8);
  memcpy(&y, (const char *)b + i * es, es < 8 ? es : 8);
  fail_msg("%s: element %zu of %zu differs (scalar 0x%llx, simd 0x%llx)", what, i, n / es,
           (unsigned long long)x, (unsigned long long)y);
}
#define assert_same_bytes(a, b, n, what) assert_same(a, b, n, 1, what)

/* ---- rope_sincos ---- */

static void test_rope_sincos(void **state) {
  const pe_isa *isa = isa_or_skip(test_path(state));
  static const int64_t pos0s[] = {0, 1, -7, -1000003, 65535, (int64_t)1 << 31,
                                  ((int64_t)1 << 40) + 12345, ((int64_t)1 << 52) - 3,
                                  -((int64_t)1 << 52)};
  static const float scales[] = {1.0f, 0.70710678f, 1.2f};
  int64_t cases = 0;
  for (int32_t nf = 1; nf <= 300; nf++) {
    double *freq = xmalloc((size_t)nf * sizeof(double));
    for (int32_t i = 0; i < nf; i++) {
      freq[i] = pow(10000.0, -(double)i / nf) * (1.0 + (double)rnd_below(100) / 1000.0);
      uint32_t odd = rnd_below(40);
      if (odd == 0) freq[i] = 0.0;
      if (odd == 1) freq[i] = 1e300; /* theta overflows to Inf: the reduction gives 0 */
      if (odd == 2) freq[i] = -freq[i];
      if (odd == 3) freq[i] = 3.0e7; /* |theta| far past 2^55 at large positions */
    }
    /* every other case a double-double frequency (the re-rotation's exact
     * difference): a low part below half an ulp of freq, either sign */
    double *lo = NULL;
    if (nf % 2) {
      lo = xmalloc((size_t)nf * sizeof(double));
      for (int32_t i = 0; i < nf; i++)
        lo[i] = freq[i] * ldexp((double)rnd_below(2001) - 1000.0, -64);
    }
    int64_t pos0 = pos0s[rnd_below(sizeof pos0s / sizeof pos0s[0])];
    int64_t n = 1 + rnd_below(3);
    float scale = scales[rnd_below(3)];
    size_t len = (size_t)(n * 2 * nf + 8);
    float *a = xmalloc(len * sizeof(float)), *b = xmalloc(len * sizeof(float));
    for (size_t i = 0; i < len; i++) a[i] = b[i] = bits_f32(0x7fa5a5a5u);
    ref->rope_sincos(pos0, n, freq, lo, nf, scale, a);
    isa->rope_sincos(pos0, n, freq, lo, nf, scale, b);
    char what[112];
    snprintf(what, sizeof what, "rope_sincos n_freq %d pos0 %lld scale %g freq_lo %s", (int)nf,
             (long long)pos0, (double)scale, lo ? "yes" : "NULL");
    assert_same(a, b, len * sizeof(float), 4, what);
    free(lo);
    free(a);
    free(b);
    free(freq);
    cases++;
  }
  /* Tables (>= 8 rows) of ordinary frequencies and positions: the path
   * that leaves out the range check it proves unneeded (|p*f| <= 2^40) */
  for (int32_t c = 0; c < 120; c++) {
    /* every tenth past rope_template.h's chunk of 256 frequencies */
    int32_t nf = c % 10 ? 1 + (int32_t)rnd_below(80) : 250 + (int32_t)rnd_below(300);
    int64_t n = 8 + rnd_below(40);
    static const int64_t starts[] = {0, 1, -7, 65535, -1000003, (int64_t)1 << 31};
    int64_t pos0 = starts[rnd_below(sizeof starts / sizeof starts[0])];
    double *freq = xmalloc((size_t)nf * sizeof(double)), *lo = NULL;
    for (int32_t i = 0; i < nf; i++)
      freq[i] = pow(500000.0, -(double)i / nf) * (rnd_below(2) ? 1.0 : -1.0) *
                (1.0 + (double)rnd_below(100) / 1000.0);
    if (c % 2) {
      lo = xmalloc((size_t)nf * sizeof(double));
      for (int32_t i = 0; i < nf; i++)
        lo[i] = freq[i] * ldexp((double)rnd_below(2001) - 1000.0, -64);
    }
    float scale = c % 3 ? 1.0f : 0.70710678f;
    size_t len = (size_t)(n * 2 * nf + 8);
    float *a = xmalloc(len * sizeof(float)), *b = xmalloc(len * sizeof(float));
    for (size_t i = 0; i < len; i++) a[i] = b[i] = bits_f32(0x7fa5a5a5u);
    ref->rope_sincos(pos0, n, freq, lo, nf, scale, a);
    isa->rope_sincos(pos0, n, freq, lo, nf, scale, b);
    char what[112];
    snprintf(what, sizeof what, "rope_sincos table n %lld n_freq %d pos0 %lld freq_lo %s",
             (long long)n, (int)nf, (long long)pos0, lo ? "yes" : "NULL");
    assert_same(a, b, len * sizeof(float), 4, what);
    free(lo);
    free(a);
    free(b);
    free(freq);
    cases++;
  }
  /* The table pe_rope_cache_create builds by default (head_dim 128, base
   * 10000, 4096 positions): 262144 pairs of SLEEF's float sincos, whose
   * entry point differs between the ISAs (scalar.c, vec_<isa>.h). */
  {
    enum { TN = 4096, TF = 64 };
    double freq[TF];
    for (int32_t i = 0; i < TF; i++) freq[i] = pow(10000.0, -2.0 * i / (2 * TF));
    size_t len = (size_t)TN * 2 * TF;
    float *a = xmalloc(len * sizeof(float)), *b = xmalloc(len * sizeof(float));
    ref->rope_sincos(0, TN, freq, NULL, TF, 1.0f, a);
    isa->rope_sincos(0, TN, freq, NULL, TF, 1.0f, b);
    assert_same(a, b, len * sizeof(float), 4, "rope_sincos default table 4096 x 64");
    free(a);
    free(b);
    cases++;
  }
  printf("# %s rope_sincos: %lld cases\n", isa->name, (long long)cases);
}

/* ---- rope_rows ---- */

static const int32_t pair_counts[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12,  13,  14,
                                      15, 16, 17, 19, 23, 24, 31, 32, 33, 40, 47, 48,  63,  64,
                                      65, 79, 96, 100, 127, 128, 129, 131, 140};
#define N_COUNTS (sizeof pair_counts / sizeof pair_counts[0])

typedef struct rows_case {
  int dt, style;
  int32_t n_pairs, pair_dist;
  int64_t tokens, heads;
  int head_major, neg_head, neg_token;
  int norm, norm_per_token, weight_shared; /* the QK-norm stage (PE_NORM_*; 0: none) */
  int wide; /* rows >= 4 KiB apart: a decode step's walk depends on it (isa_template.h) */
  int cs_layout; /* where the cos/sin rows lie (cs_offsets): the grouped walk depends on it */
  int streams;   /* the tested struct's pe_rope_block.streams (the reference's: 0) */
  int stream_pf; /* ... and its stream_pf (whole rows of several tokens prefetch ahead) */
  int packed;    /* rows with no guard elements between them (whole rows: stream_pf's) */
} rows_case;

/* Where token t's cos and sin rows start in a buffer of cs_floats(tokens, n)
 * floats: as a table's rows for consecutive positions (0, evenly spaced: the
 * grouped walk steps through such runs, rope_template.h's even_run), or not.
 * 1: evenly spaced downwards; 2: even but the last token's rows, one float
 * further; 3: cos and sin rows in two regions, each evenly spaced but by
 * different steps; 4: sin rows evenly spaced, cos rows not. */
enum { N_CS_LAYOUTS = 5 };
static int64_t cs_floats(int64_t tokens, int32_t n) { return (2 * tokens + 24) * ((int64_t)n + 4); }
static void cs_offsets(int layout, int64_t tokens, int32_t n, int64_t t, int64_t *co, int64_t *so) {
  const int64_t n2 = 2 * (int64_t)n;
  switch (layout) {
  case 1: *co = (tokens - 1 - t) * n2; *so = *co + n; break;
  case 2: *co = t * n2 + (t == tokens - 1 ? 1 : 0); *so = *co + n; break;
  case 3: *co = t * n; *so = tokens * n + 7 + t * (n + 3); break;
  case 4: *so = t * n; *co = tokens * n + 5 + t * (t + 1) / 2 * (n + 1); break;
  default: *co = t * n2; *so = *co + n; break;
  }
}

/* One case of rope_rows on both structs: rows of `extent` elements (the
 * pairs, the gap between the x and y chunks for NEOX, `gap` guard elements),
 * laid out [T, H] or [H, T] with either stride negated. */
static void run_rows(const pe_isa *isa, const rows_case *k) {
  const size_t es = esz(k->dt);
  int64_t extent = k->style == PE_ROPE_GPTJ ? 2 * (int64_t)k->n_pairs
                                            : (int64_t)k->pair_dist + k->n_pairs;
  /* row pitch: guard elements between rows, or none (the rows a walk
   * prefetches ahead under stream_pf; the buffer's tail guard remains) */
  int64_t rs = extent + (k->packed ? 0 : 1 + rnd_below(5));
  if (k->wide) rs += 2048;
  int64_t hs = k->head_major ? rs * k->tokens : rs, ts = k->head_major ? rs : rs * k->heads;
  int64_t total = rs * k->tokens * k->heads + 16;
  /* base: the element of token 0, head 0; negative strides walk down */
  int64_t base = 8 + (k->neg_head ? (k->heads - 1) * hs : 0) + (k->neg_token ? (k->tokens - 1) * ts : 0);
  if (k->neg_head) hs = -hs;
  if (k->neg_token) ts = -ts;
  if (k->heads == 1 && rnd_below(2)) hs = 0;   /* a size-1 dimension's stride is never stepped */
  if (k->tokens == 1 && rnd_below(2)) ts = 0;
  char *a = xmalloc((size_t)total * es), *b = xmalloc((size_t)total * es);
  fill(a, k->dt, total);
  memcpy(b, a, (size_t)total * es);
  float *cs = xmalloc((size_t)cs_floats(k->tokens, k->n_pairs) * sizeof(float));
  const float *cp[8], *sp[8];
  for (int64_t t = 0; t < k->tokens; t++) {
    int64_t co, so;
    cs_offsets(k->cs_layout, k->tokens, k->n_pairs, t, &co, &so);
    cp[t] = cs + co;
    sp[t] = cs + so;
    fill_cs(cs + co, cs + so, k->n_pairs);
  }
  pe_rope_block blk = {.cos = cp, .sin = sp, .n_tokens = k->tokens, .n_heads = k->heads,
                       .n_pairs = k->n_pairs, .pair_dist = k->pair_dist, .style = k->style};
  /* under a norm: a scale per row (or per token) and weights per element of
   * each head's row (or one row of weights for every head), never NaN */
  float *scales = xmalloc((size_t)(k->tokens * k->heads) * sizeof(float));
  float *weights = xmalloc((size_t)(extent * k->heads) * sizeof(float));
  const float *scp[8];
  for (int64_t i = 0; i < k->tokens * k->heads; i++) scales[i] = gen_scale();
  for (int64_t i = 0; i < extent * k->heads; i++) weights[i] = bits_f32(gen_f32_no_nan());
  for (int64_t t = 0; t < k->tokens; t++) scp[t] = scales + t * k->heads;
  if (k->norm) {
    blk.norm = k->norm;
    blk.scale = scp;
    blk.scale_head_stride = k->norm_per_token ? 0 : 1;
    /* a unit norm has no weights: NULL, as the engine passes it (a kernel
     * must not touch the pointer, nor offset it) */
    blk.weight = k->norm == PE_NORM_UNIT ? NULL : weights;
    blk.weight_head_stride = k->weight_shared ? 0 : extent;
    /* a prefetch hint (the kernels read nothing there): the results are the same */
    blk.prefetch = rnd_below(2) ? (int64_t)rnd_below(4096) - 2048 : 0;
  }
  /* the reference token by token; the tested walk (and the reference's
   * own, on a third copy) in k->streams runs: every row once, same bits */
  char *c = xmalloc((size_t)total * es);
  memcpy(c, a, (size_t)total * es);
  pe_rope_block sblk = blk;
  sblk.streams = k->streams;
  sblk.stream_pf = k->stream_pf;
  ref->rope_rows[k->dt](&blk, a + base * (int64_t)es, hs, ts);
  isa->rope_rows[k->dt](&sblk, b + base * (int64_t)es, hs, ts);
  ref->rope_rows[k->dt](&sblk, c + base * (int64_t)es, hs, ts);
  char what[180];
  snprintf(what, sizeof what,
           "rope_rows dtype %d style %d n_pairs %d pair_dist %d tokens %lld heads %lld hs %lld "
           "ts %lld norm %d cs layout %d streams %d stream_pf %d",
           k->dt, k->style, (int)k->n_pairs, (int)k->pair_dist, (long long)k->tokens,
           (long long)k->heads, (long long)hs, (long long)ts, k->norm, k->cs_layout, k->streams,
           k->stream_pf);
  assert_same(a, b, (size_t)total * es, es, what);
  assert_same(a, c, (size_t)total * es, es, what);
  free(c);
  free(scales);
  free(weights);
  free(a);
  free(b);
  free(cs);
}

static void test_rope_rows(void **state) {
  const pe_isa *isa = isa_or_skip(test_path(state));
  /* heads: the vector walks take rows in groups of 4 (rope_template.h),
   * two groups at once, the second PE_ROPE_LAG (2) tokens behind, an odd
   * group alone, and a remainder group */
  static const int64_t tok[] = {1, 2, 3, 5, 7, 8}, hd[] = {1, 2, 3, 4, 5, 9, 12, 13};
  int64_t cases = 0;
  for (int dt = 0; dt < 3; dt++)
    for (int style = 0; style < 2; style++)
      for (size_t ci = 0; ci < N_COUNTS; ci++)
        for (int rep = 0; rep < 6; rep++) {
          rows_case k = {.dt = dt, .style = style, .n_pairs = pair_counts[ci]};
          /* pair_dist == n_pairs (whole rotary half) or > (a frequency chunk) */
          k.pair_dist = k.n_pairs + (rep & 1 ? (int32_t)rnd_below(70) + 1 : 0);
          k.tokens = tok[rnd_below(6)];
          k.streams = (int)rnd_below(6); /* 0, 1: token by token; 2-5 runs */
          k.stream_pf = (int)rnd_below(2);
          k.packed = rnd_below(3) == 0;
          k.heads = hd[rnd_below(8)];
          k.norm = rnd_below(2) ? 0 : (int)rnd_below(4); /* PE_NORM_OFF..PE_NORM_UNIT */
          k.norm_per_token = (int)rnd_below(2);
          k.weight_shared = (int)rnd_below(2);
          k.head_major = rep >> 1 & 1;
          k.neg_head = (int)rnd_below(2);
          k.neg_token = rep >= 4;
          k.wide = rnd_below(4) == 0;
          k.cs_layout = (int)rnd_below(N_CS_LAYOUTS);
          run_rows(isa, &k);
          cases++;
        }
  printf("# %s rope_rows: %lld cases\n", isa->name, (long long)cases);
}

/* ---- rope_store_rows ---- */

static void run_store(const pe_isa *isa, int sd, int dd, int style, int32_t n_pairs,
                      int32_t pair_dist, int64_t tokens, int64_t heads, int norm, int streams) {
  const size_t ses = esz(sd), des = esz(dd);
  int64_t extent = style == PE_ROPE_GPTJ ? 2 * (int64_t)n_pairs : (int64_t)pair_dist + n_pairs;
  int64_t shs = extent + rnd_below(4), dhs = extent + rnd_below(4);
  if (rnd_below(4) == 0) shs = -shs; /* heads may run down in the source */
  int64_t sblock = (extent + 3) * heads + 4, dblock = (extent + 3) * heads + 4;
  int64_t stotal = sblock * tokens, dtotal = dblock * tokens;
  char *src = xmalloc((size_t)stotal * ses), *src0 = xmalloc((size_t)stotal * ses);
  char *da = xmalloc((size_t)dtotal * des), *db = xmalloc((size_t)dtotal * des);
  fill(src, sd, stotal);
  memcpy(src0, src, (size_t)stotal * ses);
  fill(da, dd, dtotal);
  memcpy(db, da, (size_t)dtotal * des);
  float *cs = xmalloc((size_t)tokens * 2 * (size_t)n_pairs * sizeof(float));
  const float *cp[8], *sp[8];
  const void *s[8];
  void *d0[8], *d1[8];
  for (int64_t t = 0; t < tokens; t++) {
    float *c = cs + t * 2 * n_pairs;
    fill_cs(c, c + n_pairs, n_pairs);
    cp[t] = c;
    sp[t] = c + n_pairs;
    /* tokens in reverse slot order: each token's rows are found by pointer */
    int64_t slot = tokens - 1 - t;
    int64_t soff = t * sblock + 2 + (shs < 0 ? (heads - 1) * -shs : 0);
    s[t] = src + soff * (int64_t)ses;
    d0[t] = da + (slot * dblock + 2) * (int64_t)des;
    d1[t] = db + (slot * dblock + 2) * (int64_t)des;
  }
  pe_rope_block blk = {.cos = cp, .sin = sp, .n_tokens = tokens, .n_heads = heads,
                       .n_pairs = n_pairs, .pair_dist = pair_dist, .style = style};
  /* under a norm (the normed kernels): scales per row or per token, weights
   * per head or shared, as in run_rows */
  float scales[8 * 4];
  const float *scp[8];
  float *weights = xmalloc((size_t)(extent * heads) * sizeof(float));
  for (int64_t i = 0; i < tokens * heads; i++) scales[i] = gen_scale();
  for (int64_t i = 0; i < extent * heads; i++) weights[i] = bits_f32(gen_f32_no_nan());
  for (int64_t t = 0; t < tokens; t++) scp[t] = scales + t * heads;
  if (norm) {
    blk.norm = norm;
    blk.scale = scp;
    blk.scale_head_stride = rnd_below(2);
    blk.weight = norm == PE_NORM_UNIT ? NULL : weights; /* as the engine passes it */
    blk.weight_head_stride = rnd_below(2) ? 0 : extent;
    blk.prefetch = rnd_below(2) ? (int64_t)rnd_below(4096) - 2048 : 0;
  }
  /* the reference token by token, the tested walk (and the reference's own,
   * into a third copy) with pe_rope_block.streams set: the cache writes
   * keep token order today, and whatever order they take must write the
   * same bytes */
  char *dc = xmalloc((size_t)dtotal * des);
  memcpy(dc, da, (size_t)dtotal * des);
  void *d2[8];
  for (int64_t t = 0; t < tokens; t++) d2[t] = dc + ((char *)d0[t] - da);
  pe_rope_block sblk = blk;
  sblk.streams = streams;
  ref->rope_store_rows[sd][dd](&blk, s, shs, d0, dhs);
  isa->rope_store_rows[sd][dd](&sblk, s, shs, d1, dhs);
  ref->rope_store_rows[sd][dd](&sblk, s, shs, d2, dhs);
  char what[160];
  snprintf(what, sizeof what,
           "rope_store_rows %d -> %d style %d n_pairs %d pair_dist %d tokens %lld heads %lld norm "
           "%d streams %d",
           sd, dd, style, (int)n_pairs, (int)pair_dist, (long long)tokens, (long long)heads, norm,
           streams);
  assert_same(da, db, (size_t)dtotal * des, des, what);
  assert_same(da, dc, (size_t)dtotal * des, des, what);
  free(dc);
  assert_same_bytes(src0, src, (size_t)stotal * ses, "rope_store_rows wrote its source");
  free(weights);
  free(src);
  free(src0);
  free(da);
  free(db);
  free(cs);
}

static void test_rope_store_rows(void **state) {
  const pe_isa *isa = isa_or_skip(test_path(state));
  int64_t cases = 0;
  for (int sd = 0; sd < 3; sd++)
    for (int dd = 0; dd < 3; dd++)
      for (int style = 0; style < 2; style++)
        for (size_t ci = 0; ci < N_COUNTS; ci++)
          for (int rep = 0; rep < 2; rep++) {
            int32_t n = pair_counts[ci];
            int32_t dist = n + (rep ? (int32_t)rnd_below(40) + 1 : 0);
            run_store(isa, sd, dd, style, n, dist, 1 + rnd_below(8), 1 + rnd_below(3),
                      rnd_below(2) ? 0 : (int)rnd_below(4), (int)rnd_below(6));
            cases++;
          }
  printf("# %s rope_store_rows: %lld cases\n", isa->name, (long long)cases);
}

/* ---- special values in every lane position ---- */

/* The element patterns that decide bit identity, per dtype: signed zeros,
 * Inf, quiet and signaling NaNs with payloads and both signs, the largest
 * finite values, subnormals; f16 and bf16 also 1.0 and its odd neighbour
 * and the smallest normals, f32 exact bf16 rounding ties of both parities,
 * the f16 overflow boundary (65520) and a value just above half the
 * smallest f16 subnormal. */
static const uint32_t lane_f32[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                    0x7fc00000u, 0xffc12345u, 0x7f800001u, 0xff812345u,
                                    0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x807fffffu,
                                    0x3f808000u, 0x3f818000u, 0x477ff000u, 0x33000001u};
static const uint16_t lane_f16[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe01,
                                    0x7c01, 0xfd55, 0x7bff, 0xfbff, 0x0001, 0x83ff,
                                    0x3c00, 0x3c01, 0x0400, 0x8400};
static const uint16_t lane_bf16[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc1,
                                     0x7f81, 0xff81, 0x7f7f, 0xff7f, 0x0001, 0x807f,
                                     0x3f80, 0x3f81, 0x0080, 0x8080};
enum { N_LANE_SPECIALS = 16 };
/* cos/sin of one pair (never NaN, isa.h): Inf with a finite partner (Inf
 * results; Inf*0 when the element is 0), huge values (overflow, Inf - Inf),
 * zeros, subnormals, and multipliers that make exact ties of 1.0 for bf16
 * (1 + 2^-8, 1 + 3*2^-8) and f16 (1 + 2^-11, 1 + 3*2^-11) with sin 0. */
static const uint32_t lane_cs[][2] = {
    {0x7f800000u, 0x3f000000u}, {0x3f000000u, 0xff800000u}, {0x00000000u, 0x7f800000u},
    {0x7f61e1c6u, 0x7f61e1c6u}, {0xff61e1c6u, 0x7f61e1c6u}, {0x80000000u, 0x00000000u},
    {0x00000001u, 0x807fffffu}, {0x3f808000u, 0x00000000u}, {0x3f818000u, 0x00000000u},
    {0x3f801000u, 0x00000000u}, {0x3f803000u, 0x80000000u}};
#define N_LANE_CS (sizeof lane_cs / sizeof lane_cs[0])

/* Ordinary finite values (magnitude 2^-20 .. 2^8, either sign) of each
 * dtype, made once: the rows are copied from them. */
enum { LANE_POOL = 4096 };
static char lane_pool[3][LANE_POOL * 4];
static float lane_cos[LANE_POOL], lane_sin[LANE_POOL]; /* fill_cs's rows, made once */
static void lane_pool_init(void) {
  for (int i = 0; i < LANE_POOL; i += 256) fill_cs(lane_cos + i, lane_sin + i, 256);
  for (int i = 0; i < LANE_POOL; i++) {
    uint32_t u = (uint32_t)((rnd() & 0x807fffffu) | ((107u + rnd_below(29)) << 23));
    uint16_t h = (uint16_t)((rnd() & 0x83ffu) | ((5u + rnd_below(18)) << 10));
    uint16_t b = (uint16_t)(u >> 16);
    memcpy(lane_pool[PE_F32] + 4 * i, &u, 4);
    memcpy(lane_pool[PE_F16] + 2 * i, &h, 2);
    memcpy(lane_pool[PE_BF16] + 2 * i, &b, 2);
  }
}
/* Elements [0, n) of a row of dtype dt: ordinary values, or 1.0 (ones). */
static void put_row(void *p, int dt, int64_t n, int ones) {
  const size_t es = esz(dt);
  if (ones) {
    for (int64_t i = 0; i < n; i++) {
      uint32_t u = 0x3f800000u;
      uint16_t h = dt == PE_F16 ? 0x3c00 : 0x3f80;
      memcpy((char *)p + (size_t)i * es, dt == PE_F32 ? (void *)&u : (void *)&h, es);
    }
    return;
  }
  memcpy(p, lane_pool[dt] + rnd_below((uint32_t)(LANE_POOL - n)) * es, (size_t)n * es);
}
/* Element i of a row of dtype dt set to special k. */
static void put_special(void *p, int dt, int64_t i, int k) {
  if (dt == PE_F32)
    memcpy((char *)p + 4 * i, &lane_f32[k], 4);
  else
    memcpy((char *)p + 2 * i, dt == PE_F16 ? &lane_f16[k] : &lane_bf16[k], 2);
}

/* The block shapes the walks tell apart (isa_template.h, rope_template.h):
 * a decode step with rows near (token_heads, token_rows, the groups) and 4
 * KiB or more apart (the groups), tokens with heads inner ([B,T,H,D]) and
 * heads outer ([B,H,T,D]: two groups, one a token behind, and a remainder
 * group). */
typedef struct lane_walk {
  int64_t tokens, heads;
  int head_major, wide;
} lane_walk;
static const lane_walk lane_walks[] = {{1, 12, 0, 0}, {1, 8, 0, 1}, {3, 4, 0, 0}, {3, 9, 1, 0}};

/* One call of rope_rows (sd == dd) or rope_store_rows of the walk w on both
 * structs: row r's element at pos[r] set to special spec[r] (pos -1: none;
 * ones: every element 1.0), token t's pair cpair[t] (-1: none) given the
 * cos/sin lane_cs[cspec[t]]. */
static void lane_call(const pe_isa *isa, int store, int sd, int dd, int style, int32_t n,
                      const lane_walk *w, const int64_t *pos, const int *spec, int ones,
                      const int32_t *cpair, const int *cspec) {
  const size_t ses = esz(sd), des = esz(dd);
  const int64_t T = w->tokens, H = w->heads, R = T * H;
  const int64_t extent = 2 * (int64_t)n; /* NeoX: pair_dist == n */
  int64_t rs = extent + 3 + (w->wide ? 2048 : 0);
  int64_t hs = w->head_major ? rs * T : rs, ts = w->head_major ? rs : rs * H;
  const int64_t total = rs * R + 8;
  char *a = xmalloc((size_t)total * ses), *b = xmalloc((size_t)total * ses);
  char *da = xmalloc((size_t)total * des), *db = xmalloc((size_t)total * des);
  memset(a, 0xa5, (size_t)total * ses); /* gaps and guards: any pattern, kept by both */
  for (int64_t t = 0; t < T; t++)
    for (int64_t h = 0; h < H; h++) {
      const int64_t r = t * H + h;
      char *row = a + (4 + t * ts + h * hs) * (int64_t)ses;
      put_row(row, sd, extent, ones);
      if (pos[r] >= 0) put_special(row, sd, pos[r], spec[r]);
    }
  memcpy(b, a, (size_t)total * ses);
  memset(da, 0x5a, (size_t)total * des);
  memset(db, 0x5a, (size_t)total * des);
  float *cs = xmalloc((size_t)T * 2 * (size_t)n * sizeof(float));
  const float *cp[3], *sp[3];
  const void *src[3];
  void *d0[3], *d1[3];
  for (int64_t t = 0; t < T; t++) {
    float *c = cs + t * 2 * n;
    const uint32_t o = rnd_below((uint32_t)(LANE_POOL - n));
    memcpy(c, lane_cos + o, (size_t)n * sizeof(float));
    memcpy(c + n, lane_sin + o, (size_t)n * sizeof(float));
    if (cpair[t] >= 0) {
      c[cpair[t]] = bits_f32(lane_cs[cspec[t]][0]);
      c[n + cpair[t]] = bits_f32(lane_cs[cspec[t]][1]);
    }
    cp[t] = c;
    sp[t] = c + n;
    src[t] = a + (4 + t * ts) * (int64_t)ses;
    d0[t] = da + (4 + t * ts) * (int64_t)des;
    d1[t] = db + (4 + t * ts) * (int64_t)des;
  }
  pe_rope_block blk = {.cos = cp, .sin = sp, .n_tokens = T, .n_heads = H, .n_pairs = n,
                       .pair_dist = n, .style = style};
  char what[160];
  snprintf(what, sizeof what, "%s %d -> %d style %d n_pairs %d tokens %lld heads %lld hs %lld",
           store ? "rope_store_rows" : "rope_rows", sd, dd, style, (int)n, (long long)T,
           (long long)H, (long long)hs);
  if (store) {
    ref->rope_store_rows[sd][dd](&blk, src, hs, d0, hs);
    isa->rope_store_rows[sd][dd](&blk, src, hs, d1, hs);
    assert_same(da, db, (size_t)total * des, des, what);
  } else {
    ref->rope_rows[sd](&blk, a + 4 * (int64_t)ses, hs, ts);
    isa->rope_rows[sd](&blk, b + 4 * (int64_t)ses, hs, ts);
    assert_same(a, b, (size_t)total * ses, ses, what);
  }
  free(a);
  free(b);
  free(da);
  free(db);
  free(cs);
}

/* Every special at every lane offset of the vectors (positions taken
 * modulo 32 elements: AVX-512's 32-element even/odd words, AVX2's two
 * chunks) and every position of the row (a row of p positions modulo 32
 * takes each special over ceil(16 / p) rounds), and every (pair, cos/sin
 * special) of the tokens; a few rows per call. */
static int64_t lane_cases(const pe_isa *isa, int store, int sd, int dd, int style, int32_t n,
                          const lane_walk *w) {
  const int64_t T = w->tokens, R = T * w->heads, extent = 2 * (int64_t)n;
  const int64_t per = (extent + 31) / 32, rounds = (N_LANE_SPECIALS + per - 1) / per;
  int64_t pos[32], calls = 0; /* R <= 32 rows (lane_walks) */
  int spec[32] = {0}, cspec[3] = {0, 0, 0};
  int32_t cpair[3] = {-1, -1, -1};
  for (int64_t k = 0; k * R < extent * rounds; k++, calls++) {
    for (int64_t r = 0; r < R; r++) {
      const int64_t c = k * R + r, p = c % extent, round = c / extent;
      pos[r] = c < extent * rounds ? p : -1;
      spec[r] = (int)((p / 32 + round * per) % N_LANE_SPECIALS);
    }
    lane_call(isa, store, sd, dd, style, n, w, pos, spec, 0, cpair, cspec);
  }
  /* cos/sin specials the same way, pairs modulo 16 */
  const int64_t cper = (n + 15) / 16, crounds = ((int64_t)N_LANE_CS + cper - 1) / cper;
  for (int64_t r = 0; r < R; r++) pos[r] = -1;
  for (int64_t k = 0; k * T < n * crounds; k++, calls++) {
    int ones = 0;
    for (int64_t t = 0; t < T; t++) {
      const int64_t c = k * T + t, j = c % n, round = c / n;
      cpair[t] = c < n * crounds ? (int32_t)j : -1;
      cspec[t] = (int)((j / 16 + round * cper) % (int64_t)N_LANE_CS);
      if ((lane_cs[cspec[t]][1] & 0x7fffffffu) == 0) ones = 1; /* the ties: x = y = 1.0 */
    }
    lane_call(isa, store, sd, dd, style, n, w, pos, spec, ones, cpair, cspec);
  }
  return calls;
}

static void test_rope_special_lanes(void **state) {
  const pe_isa *isa = isa_or_skip(test_path(state));
  /* pairs: AVX2's even/odd chunks of 16 and token_rows_eo's 16 and 32,
   * eo_token's pieces of 128 with a chunk and a tail after them, tails of
   * every step width */
  static const int32_t ns[] = {16, 32, 64, 67, 136};
  int64_t calls = 0;
  lane_pool_init();
  for (int dt = 0; dt < 3; dt++)
    for (int style = 0; style < 2; style++)
      for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t w = 0; w < sizeof lane_walks / sizeof lane_walks[0]; w++)
          calls += lane_cases(isa, 0, dt, dt, style, ns[i], &lane_walks[w]);
  for (int sd = 0; sd < 3; sd++) /* the cache write: a whole chunk, a tail, two pieces */
    for (int dd = 0; dd < 3; dd++)
      for (int style = 0; style < 2; style++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
          if (ns[i] != 32 && ns[i] != 64)
            calls += lane_cases(isa, 1, sd, dd, style, ns[i], &lane_walks[2]);
  printf("# %s special lanes: %lld calls\n", isa->name, (long long)calls);
}

/* ---- convert ---- */

static const int64_t lengths[] = {0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 100, 1000};
#define N_LENGTHS (sizeof lengths / sizeof lengths[0])

/* ---- the QK-norm's other kernels: norm_sumsq, norm_row ---- */

static void test_norm_kernels(void **state) {
  const pe_isa *isa = isa_or_skip(test_path(state));
  static const int64_t lens[] = {1, 2, 3, 7, 15, 16, 17, 31, 33, 64, 80, 128, 130};
  int64_t cases = 0;
  char what[128];
  for (int dt = 0; dt < 3; dt++)
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
      for (int rep = 0; rep < 6; rep++) {
        /* sums of squares: rows 1..21 at a pitch past n (several blocks of
         * rows summed at once, the rest one by one), each row or combined */
        int64_t n = lens[li], rows = 1 + rnd_below(21), rs = n + rnd_below(5);
        int combine = rep & 1;
        int64_t total = rs * rows + 8;
        char *src = xmalloc((size_t)total * esz(dt));
        fill(src, dt, total);
        float a[21], b[21];
        memset(a, 0x5a, sizeof a);
        memset(b, 0x5a, sizeof b);
        ref->norm_sumsq[dt](src, n, rows, rs, combine, a);
        isa->norm_sumsq[dt](src, n, rows, rs, combine, b);
        snprintf(what, sizeof what, "norm_sumsq dtype %d n %lld rows %lld combine %d", dt,
                 (long long)n, (long long)rows, combine);
        assert_same(a, b, sizeof a, 4, what);
        /* a normed row past rotary_dim into every dtype, and in place */
        for (int dd = 0; dd < 3; dd++) {
          int mode = 1 + (int)rnd_below(3);
          float r = gen_scale();
          float w[130];
          for (int64_t i = 0; i < n; i++) w[i] = bits_f32(gen_f32_no_nan());
          char *da = xmalloc((size_t)(n + 8) * esz(dd)), *db = xmalloc((size_t)(n + 8) * esz(dd));
          fill(da, dd, n + 8);
          memcpy(db, da, (size_t)(n + 8) * esz(dd));
          ref->norm_row[dt][dd](src, da, n, r, w, mode);
          isa->norm_row[dt][dd](src, db, n, r, w, mode);
          snprintf(what, sizeof what, "norm_row %d -> %d n %lld mode %d", dt, dd, (long long)n,
                   mode);
          assert_same(da, db, (size_t)(n + 8) * esz(dd), esz(dd), what);
          if (dd == dt) {
            memcpy(da, src, (size_t)n * esz(dt));
            memcpy(db, src, (size_t)n * esz(dt));
            ref->norm_row[dt][dd](da, da, n, r, w, mode);
            isa->norm_row[dt][dd](db, db, n, r, w, mode);
            assert_same(da, db, (size_t)n * esz(dd), esz(dd), "norm_row in place");
          }
          free(da);
          free(db);
        }
        /* scales from sums (any float32: NaN, Inf, negative, subnormal), in place too */
        {
          static const float epss[] = {0.0f, 1e-6f, 1e-5f, 0x1p-149f};
          static const int64_t ns[] = {1, 3, 72, 128, 256, 4096, 5120};
          float sums[130], sa[130], sb[130];
          for (int64_t i = 0; i < n; i++)
            sums[i] = rnd_below(2) ? bits_f32(gen_f32())
                                   : (float)((double)(rnd() >> 11) * 0x1p-53 * 1e3);
          int64_t nn = ns[rnd_below(7)];
          float eps = epss[rnd_below(4)];
          ref->norm_scale(sums, n, nn, eps, sa);
          isa->norm_scale(sums, n, nn, eps, sb);
          snprintf(what, sizeof what, "norm_scale count %lld n %lld eps %g", (long long)n,
                   (long long)nn, (double)eps);
          assert_same(sa, sb, (size_t)n * 4, 4, what);
          memcpy(sb, sums, (size_t)n * 4);
          isa->norm_scale(sb, n, nn, eps, sb);
          assert_same(sa, sb, (size_t)n * 4, 4, "norm_scale in place");
        }
        free(src);
        cases++;
      }
  printf("# %s norm_sumsq / norm_row / norm_scale: %lld cases\n", isa->name, (long long)cases);
}

/* norm_scale where its float64 quotient 1/sqrt(s/n + eps) lies on or next
 * to a float32 rounding midpoint (its 29 discarded bits within 2 of half of
 * 2^29), where any path that approximates the quotient rounds the wrong
 * way unless it falls back to the exact square root and divide. Found by
 * scanning every float32 sum from 2^-10 to 2^24 against the formula below
 * for n 64, 96, 128, 256 and eps 0, 1e-6, 1e-5; the test checks that each
 * is still such a case. Each sits in every lane position of a vector of
 * sums, at every count up to 17. */
static void test_norm_scale_midpoints(void **state) {
  const pe_isa *isa = isa_or_skip(test_path(state));
  static const struct {
    float s;
    int64_t n;
    float eps;
  } cases[] = {
      {0x1.d9a87p+5f, 128, 1e-5f},       {0x1.aae742p+10f, 128, 1e-5f},
      {0x1.204efp-8f, 128, 1e-5f},       {0x1.7431c6p+0f, 128, 0.0f},
      {0x1.7431c6p+10f, 128, 0.0f},      {0x1.d9a87p+4f, 64, 1e-5f},
      {0x1.aae742p+9f, 64, 1e-5f},       {0x1.d9a87p+6f, 256, 1e-5f},
      {0x1.633e54p+5f, 96, 1e-5f},       {0x1.eceb46p+16f, 96, 1e-5f},
      {0x1.1e9ffap+12f, 96, 1e-6f},      {0x1.f617c4p+17f, 96, 1e-6f},
      {0x1.7431c6p-9f, 64, 0.0f},        {0x1.7431c6p+23f, 256, 0.0f},
  };
  int64_t checked = 0;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const double q = 1.0 / sqrt((double)cases[c].s * (1.0 / (double)cases[c].n) +
                                (double)cases[c].eps);
    uint64_t qb;
    memcpy(&qb, &q, sizeof qb);
    const int64_t off = (int64_t)(qb & 0x1fffffffu) - ((int64_t)1 << 28);
    assert_true(off >= -2 && off <= 2);
    const float want = (float)q;
    for (int64_t count = 1; count <= 17; count++)
      for (int64_t at = 0; at < count; at++) {
        float sums[17], got[17];
        for (int64_t i = 0; i < count; i++)
          sums[i] = (float)(0.5 + (double)(rnd() >> 11) * 0x1p-53) * (float)cases[c].n;
        sums[at] = cases[c].s;
        isa->norm_scale(sums, count, cases[c].n, cases[c].eps, got);
        if (f32_bits(got[at]) != f32_bits(want))
          fail_msg("%s norm_scale(%a, n %lld, eps %a) at lane %lld of %lld: %a, want %a",
                   isa->name, (double)cases[c].s, (long long)cases[c].n, (double)cases[c].eps,
                   (long long)at, (long long)count, (double)got[at], (double)want);
        for (int64_t i = 0; i < count; i++) {
          const double o = 1.0 / sqrt((double)sums[i] * (1.0 / (double)cases[c].n) +
                                      (double)cases[c].eps);
          assert_int_equal(f32_bits(got[i]), f32_bits((float)o));
        }
        checked++;
      }
  }
  printf("# %s norm_scale near float32 midpoints: %lld vectors\n", isa->name, (long long)checked);
}

static void test_convert(void **state) {
  const pe_isa *isa = isa_or_skip(test_path(state));
  int64_t cases = 0;
  for (int sd = 0; sd < 3; sd++)
    for (int dd = 0; dd < 3; dd++)
      for (size_t li = 0; li < N_LENGTHS; li++) {
        int64_t n = lengths[li], off = rnd_below(3), total = n + off + 8;
        char *src = xmalloc((size_t)total * esz(sd));
        char *a = xmalloc((size_t)total * esz(dd)), *b = xmalloc((size_t)total * esz(dd));
        fill(src, sd, total);
        fill(a, dd, total);
        memcpy(b, a, (size_t)total * esz(dd));
        ref->convert[sd][dd](src + off * (int64_t)esz(sd), a + off * (int64_t)esz(dd), n);
        isa->convert[sd][dd](src + off * (int64_t)esz(sd), b + off * (int64_t)esz(dd), n);
        char what[64];
        snprintf(what, sizeof what, "convert %d -> %d n %lld", sd, dd, (long long)n);
        assert_same(a, b, (size_t)total * esz(dd), esz(dd), what);
        free(src);
        free(a);
        free(b);
        cases++;
      }
  printf("# %s convert: %lld cases\n", isa->name, (long long)cases);
}

/* ---- the encodings' kernels ---- */

static void test_enc_rows(void **state) {
  const pe_isa *isa = isa_or_skip(test_path(state));
  static const int64_t qposs[] = {0, 3, 40, 999, INT32_MAX, (int64_t)INT32_MAX + 5,
                                  (int64_t)1 << 40, ((int64_t)1 << 53) - 1};
  static const float slopes[] = {-0.5f, -0.0625f, -0.33333334f, -0.00390625f, -1.0f};
  int64_t cases = 0;
  for (int dt = 0; dt < 3; dt++)
    for (size_t li = 0; li < N_LENGTHS; li++) {
      int64_t n = lengths[li], total = n + 8;
      size_t bytes = (size_t)total * esz(dt);
      char *a = xmalloc(bytes), *b = xmalloc(bytes);
      float *v = xmalloc((size_t)total * sizeof(float));
      float *fa = xmalloc((size_t)total * sizeof(float)), *fb = xmalloc((size_t)total * sizeof(float));
      char what[80];

      fill(a, dt, total);
      for (int64_t i = 0; i < total; i++) v[i] = bits_f32(gen_f32_no_nan());
      memcpy(b, a, bytes);
      ref->add_row[dt](a + 2 * esz(dt), v, n);
      isa->add_row[dt](b + 2 * esz(dt), v, n);
      snprintf(what, sizeof what, "add_row dtype %d n %lld", dt, (long long)n);
      assert_same(a, b, bytes, esz(dt), what);

      int64_t qpos = qposs[rnd_below(sizeof qposs / sizeof qposs[0])];
      if (rnd_below(2) && n > 0) qpos = n - 1; /* the causal row's last biased key */
      float ns = slopes[rnd_below(sizeof slopes / sizeof slopes[0])];
      fill(a, dt, total);
      memcpy(b, a, bytes);
      ref->alibi_row[dt](a + 2 * esz(dt), n, qpos, ns);
      isa->alibi_row[dt](b + 2 * esz(dt), n, qpos, ns);
      snprintf(what, sizeof what, "alibi_row dtype %d n %lld qpos %lld", dt, (long long)n,
               (long long)qpos);
      assert_same(a, b, bytes, esz(dt), what);

      fill(a, dt, total);
      fill(fa, PE_F32, total);
      memcpy(fb, fa, (size_t)total * sizeof(float));
      ref->load_row[dt](fa + 1, a, n);
      isa->load_row[dt](fb + 1, a, n);
      snprintf(what, sizeof what, "load_row dtype %d n %lld", dt, (long long)n);
      assert_same(fa, fb, (size_t)total * sizeof(float), 4, what);

      free(a);
      free(b);
      free(v);
      free(fa);
      free(fb);
      cases += 3;
    }
  /* Every length up to two AVX-512 vectors and one past (the vector tails
   * start at each lane) over rows made only of NaN (quiet and signaling, both
   * signs), +-Inf, subnormals and +-0, every element of the row taking each of
   * them in turn, between guard elements that must stay untouched. */
  static const uint32_t sp32[] = {0x7fc00000u, 0xffc12345u, 0x7f800001u, 0xff812345u,
                                  0x7f800000u, 0xff800000u, 0x00000001u, 0x807fffffu,
                                  0x00000000u, 0x80000000u};
  static const uint16_t sp16[] = {0x7e00, 0xfe01, 0x7c01, 0xfd55, 0x7c00, 0xfc00,
                                  0x0001, 0x83ff, 0x0000, 0x8000};
  static const uint16_t spb16[] = {0x7fc0, 0xffc1, 0x7f81, 0xff85, 0x7f80, 0xff80,
                                   0x0001, 0x807f, 0x0000, 0x8000};
  enum { NSP = sizeof sp32 / sizeof sp32[0] };
  for (int dt = 0; dt < 3; dt++)
    for (int64_t n = 1; n <= 33; n++)
      for (int ph = 0; ph < NSP; ph++) {
        char a[48 * 4], b[48 * 4], what[80];
        float v[48];
        const size_t es = esz(dt), bytes = (size_t)(n + 8) * es;
        for (int64_t i = 0; i < n + 8; i++) {
          int k = (int)((i + ph) % NSP);
          if (dt == PE_F32)
            memcpy(a + 4 * i, &sp32[k], 4);
          else
            memcpy(a + 2 * i, dt == PE_F16 ? &sp16[k] : &spb16[k], 2);
          v[i] = bits_f32(sp32[4 + (i + ph) % (NSP - 4)]); /* Inf, subnormal, +-0: no NaN */
        }
        memcpy(b, a, bytes);
        ref->add_row[dt](a + 2 * es, v, n);
        isa->add_row[dt](b + 2 * es, v, n);
        snprintf(what, sizeof what, "add_row specials dtype %d n %lld", dt, (long long)n);
        assert_same(a, b, bytes, es, what);
        memcpy(b, a, bytes);
        ref->alibi_row[dt](a + 2 * es, n, ph % 2 ? n - 1 : n / 2, -0.0625f);
        isa->alibi_row[dt](b + 2 * es, n, ph % 2 ? n - 1 : n / 2, -0.0625f);
        snprintf(what, sizeof what, "alibi_row specials dtype %d n %lld", dt, (long long)n);
        assert_same(a, b, bytes, es, what);
        cases += 2;
      }
  /* sincos of double angles */
  for (int32_t n = 0; n <= 70; n += (n < 20 ? 1 : 7)) {
    double *ang = xmalloc((size_t)(n + 1) * sizeof(double));
    for (int32_t i = 0; i < n; i++) {
      double u = (double)(rnd() >> 11) * 0x1p-53;
      uint32_t kind = rnd_below(6);
      ang[i] = kind == 0 ? u * 1e6 : kind == 1 ? -u * 1e15 : kind == 2 ? u * 1e-300 : (u - 0.5) * 200.0;
      if (rnd_below(16) == 0) ang[i] = rnd_below(2) ? INFINITY : -NAN;
    }
    float sa[80], ca[80], sb[80], cb[80];
    for (int i = 0; i < 80; i++) sa[i] = ca[i] = sb[i] = cb[i] = bits_f32(0x7fa5a5a5u);
    ref->sincos(ang, n, sa, ca);
    isa->sincos(ang, n, sb, cb);
    assert_same_bytes(sa, sb, sizeof sa, "sincos: sin");
    assert_same_bytes(ca, cb, sizeof ca, "sincos: cos");
    free(ang);
    cases++;
  }
  printf("# %s add_row, alibi_row, load_row, sincos: %lld cases\n", isa->name, (long long)cases);
}

/* mask_row: every length to 200 elements and a few long rows, each row start
 * at every offset of a 64-byte line, over rows of random elements (NaN, Inf,
 * subnormals, +-0 among them) between guards: elements [0, n) must be the
 * dtype's -inf bits (isa.h), in the scalar struct and in the ISA's, and
 * nothing else may change. */
static void test_mask_rows(void **state) {
  const pe_isa *isa = isa_or_skip(test_path(state));
  static const uint32_t ninf[3] = {0xff800000u, 0xfc00u, 0xff80u}; /* [pe_dtype] */
  int64_t cases = 0;
  for (int dt = 0; dt < 3; dt++) {
    const int64_t es = (int64_t)esz(dt), lines = 64 / es;
    for (int64_t n = 0; n <= 4200; n += n < 200 ? 1 : n < 1100 ? 137 : 1031) {
      const int64_t total = n + lines + 16;
      char *orig = xmalloc((size_t)(total * es + 64)), *a = xmalloc((size_t)(total * es + 64));
      char *b = xmalloc((size_t)(total * es + 64));
      /* line-aligned bases: the row starts at element off of a 64-byte line */
      char *oa = orig + (64 - (uintptr_t)orig % 64) % 64, *pa = a + (64 - (uintptr_t)a % 64) % 64;
      char *pb = b + (64 - (uintptr_t)b % 64) % 64;
      fill(oa, dt, total);
      for (int64_t off = 1; off <= lines; off += n < 200 || off == lines ? 1 : 5) {
        memcpy(pa, oa, (size_t)(total * es));
        memcpy(pb, oa, (size_t)(total * es));
        ref->mask_row[dt](pa + off * es, n);
        isa->mask_row[dt](pb + off * es, n);
        char what[80];
        snprintf(what, sizeof what, "mask_row dtype %d n %lld at element %lld", dt, (long long)n,
                 (long long)off);
        for (int64_t i = 0; i < total; i++) {
          uint32_t want = 0, got = 0;
          if (i >= off && i < off + n)
            want = ninf[dt];
          else
            memcpy(&want, oa + i * es, (size_t)es);
          memcpy(&got, pa + i * es, (size_t)es);
          if (got != want) {
            print_error("ERROR: scalar %s: element %lld is 0x%x, not 0x%x\n", what, (long long)i,
                        (unsigned)got, (unsigned)want);
            fail();
          }
        }
        assert_same(pa, pb, (size_t)(total * es), (size_t)es, what);
        cases++;
      }
      free(orig);
      free(a);
      free(b);
    }
  }
  printf("# %s mask_row: %lld cases\n", isa->name, (long long)cases);
}

/* ---- the scalar reference against float64 and IEEE formulas ---- */

/* Round a double (exactly representable in float, or not) to binary16 and
 * bfloat16 by the definition: the nearer neighbour, ties to the even one. */
static double round_to_bits(double v, int mant_bits, int min_exp) {
  if (v == 0 || isnan(v) || isinf(v)) return v;
  int e = ilogb(v);
  if (e < min_exp) e = min_exp; /* subnormal range: a fixed quantum */
  double q = ldexp(1.0, e - mant_bits);
  return nearbyint(v / q) * q; /* default rounding: to nearest, ties to even */
}

static double load_ref(int dt, const void *p, int64_t i) {
  if (dt == PE_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  if (dt == PE_BF16) return bits_f32((uint32_t)h << 16);
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}
/* The float64 rotation x*c - y*s, y*c + x*s rounded to the dtype, within one
 * unit of the dtype's precision: the kernel rounds y*s to float before a
 * fused multiply-add, and then once more to the dtype. */
static void test_scalar_rotate_reference(void **state) {
  (void)state;
  for (int dt = 0; dt < 3; dt++)
    for (int style = 0; style < 2; style++)
      for (int rep = 0; rep < 200; rep++) {
        int32_t n = 1 + (int32_t)rnd_below(40);
        int64_t len = 2 * (int64_t)n;
        char row[2 * 40 * 4], orig[2 * 40 * 4];
        for (int64_t i = 0; i < len; i++) {
          float v = (float)((double)(rnd() >> 11) * 0x1p-53 * 8.0 - 4.0);
          if (dt == PE_F32) ((float *)row)[i] = v;
          else if (dt == PE_BF16) ((uint16_t *)row)[i] = (uint16_t)(f32_bits(v) >> 16);
          else ((uint16_t *)row)[i] = (uint16_t)(0x3c00 + rnd_below(0x0800)) | (rnd_below(2) ? 0x8000 : 0);
        }
        memcpy(orig, row, sizeof row);
        float c[40], s[40];
        const float *cp = c, *sp = s;
        for (int32_t j = 0; j < n; j++) {
          double a = (double)rnd_below(100000) / 1000.0;
          c[j] = (float)cos(a);
          s[j] = (float)sin(a);
        }
        pe_rope_block blk = {.cos = &cp, .sin = &sp, .n_tokens = 1, .n_heads = 1,
                             .n_pairs = n, .pair_dist = n, .style = style};
        ref->rope_rows[dt](&blk, row, 0, 0);
        double ulp = dt == PE_F32 ? 0x1p-23 : dt == PE_F16 ? 0x1p-10 : 0x1p-7;
        for (int32_t j = 0; j < n; j++) {
          int64_t ix = style == PE_ROPE_GPTJ ? 2 * j : j, iy = style == PE_ROPE_GPTJ ? 2 * j + 1 : n + j;
          double x = load_ref(dt, orig, ix), y = load_ref(dt, orig, iy);
          double xr = x * c[j] - y * s[j], yr = y * c[j] + x * s[j];
          double xk = load_ref(dt, row, ix), yk = load_ref(dt, row, iy);
          /* |x|, |y| < 8: one unit of the dtype at magnitude 8, plus float's share */
          assert_true(fabs(xk - xr) <= 8.0 * ulp + 64 * 0x1p-23);
          assert_true(fabs(yk - yr) <= 8.0 * ulp + 64 * 0x1p-23);
        }
      }
  /* exact cases: the pair (x, y) = (1.5, -2.25) by (c, s) = (0.5, 0.75):
   * x' = 0.75 + 1.6875, y' = -1.125 + 1.125; and (1, 0) turns into (c, s) */
  float r[4] = {1.5f, 1.0f, -2.25f, 0.0f}, c2[2] = {0.5f, 0.8f}, s2[2] = {0.75f, 0.6f};
  const float *cp = c2, *sp = s2;
  pe_rope_block blk = {.cos = &cp, .sin = &sp, .n_tokens = 1, .n_heads = 1, .n_pairs = 2,
                       .pair_dist = 2, .style = PE_ROPE_NEOX};
  ref->rope_rows[PE_F32](&blk, r, 0, 0);
  assert_true(r[0] == 2.4375f && r[2] == 0.0f && r[1] == 0.8f && r[3] == 0.6f);
  /* the inverse is the rotation by -sin: with c^2 + s^2 = 0.8125 and 1 it
   * returns the first pair scaled by 0.8125 (exactly) and the second pair */
  float s3[2] = {-0.75f, -0.6f};
  sp = s3;
  ref->rope_rows[PE_F32](&blk, r, 0, 0);
  assert_true(r[0] == 1.21875f && r[2] == -1.828125f);
  assert_true(fabs(r[1] - 1.0) < 1e-6 && fabs(r[3]) < 1e-6);
}

/* Every dtype pair on values whose conversion follows from IEEE 754's
 * definitions: round to nearest even (ties both ways), subnormals, overflow
 * to Inf, NaN quieted (bf16: bit 6, f16: bit 9) or kept bit for bit. */
static void test_scalar_convert_reference(void **state) {
  (void)state;
  /* f32 -> bf16 */
  static const uint32_t fb_in[] = {0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f808001u,
                                   0x7f800001u, 0xff800000u, 0x00000001u, 0x7f7fffffu};
  static const uint16_t fb_out[] = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0x7fc0, 0xff80, 0x0000, 0x7f80};
  uint16_t h[8];
  ref->convert[PE_F32][PE_BF16](fb_in, h, 8);
  for (int i = 0; i < 8; i++) assert_int_equal(h[i], fb_out[i]);
  /* f32 -> f16: 65504 = max, 65520 rounds up to Inf, 2^-24 = min subnormal,
   * 2^-25 is the tie between 0 and it (to 0), 1.5*2^-25 rounds to it, 1 + 2^-11
   * is the tie between 1 and 1 + 2^-10 (to 1), NaN payload's top bits kept */
  float f16_in[8] = {65504.0f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 1.0f + 0x1p-11f,
                     -0.0f, bits_f32(0x7f802000u)};
  static const uint16_t f16_out[] = {0x7bff, 0x7c00, 0x0001, 0x0000, 0x0001, 0x3c00, 0x8000, 0x7e01};
  ref->convert[PE_F32][PE_F16](f16_in, h, 8);
  for (int i = 0; i < 8; i++) assert_int_equal(h[i], f16_out[i]);
  /* f16 -> f32 exact, a signaling NaN kept signaling; bf16 -> f32 the top half */
  static const uint16_t hin[] = {0x0001, 0x03ff, 0x7bff, 0x7c01, 0xfe00, 0x3555};
  float out[6];
  ref->convert[PE_F16][PE_F32](hin, out, 6);
  assert_true(out[0] == 0x1p-24f && out[1] == 1023 * 0x1p-24f && out[2] == 65504.0f);
  assert_int_equal(f32_bits(out[3]), 0x7f802000u);
  assert_int_equal(f32_bits(out[4]), 0xffc00000u);
  assert_true(out[5] == (float)load_ref(PE_F16, hin, 5));
  ref->convert[PE_BF16][PE_F32](hin, out, 6);
  for (int i = 0; i < 6; i++) assert_int_equal(f32_bits(out[i]), (uint32_t)hin[i] << 16);
  /* same dtype: the bits, signaling NaNs included */
  uint16_t cp[6];
  ref->convert[PE_F16][PE_F16](hin, cp, 6);
  assert_memory_equal(cp, hin, sizeof cp);
  /* random values against the rounding definition (no NaN: checked above) */
  for (int rep = 0; rep < 20000; rep++) {
    float v = bits_f32(gen_f32());
    if (isnan(v)) continue;
    uint16_t b, f;
    ref->convert[PE_F32][PE_BF16](&v, &b, 1);
    ref->convert[PE_F32][PE_F16](&v, &f, 1);
    double eb = round_to_bits(v, 7, -126), ef = round_to_bits(v, 10, -14);
    if (fabs(eb) >= 0x1p128) eb = copysign(INFINITY, v); /* past the largest bf16 */
    if (fabs(ef) > 65504.0) ef = copysign(INFINITY, v);
    assert_true(load_ref(PE_BF16, &b, 0) == eb || (isinf(eb) && ((b & 0x7fff) == 0x7f80)));
    double gf = (f & 0x7c00) == 0x7c00 ? copysign(INFINITY, v) : load_ref(PE_F16, &f, 0);
    assert_true(gf == ef);
    assert_true(!signbit(load_ref(PE_BF16, &b, 0)) == !signbit(v));
  }
}

/* rope_sincos against cos/sin in double of the double angle p*f (the
 * reduction and SLEEF's u10 float sincos: within 2^-22 absolute for |values|
 * <= 1), times the scale; ALiBi and add on integers, where float arithmetic
 * is exact: row + (-slope) * |qpos - j|. */
static void test_scalar_sincos_alibi_reference(void **state) {
  (void)state;
  static const int64_t ps[] = {0, 1, 17, 4095, 123456, -77, (int64_t)1 << 30};
  double freq[64];
  for (int i = 0; i < 64; i++) freq[i] = pow(10000.0, -i / 64.0);
  float out[2 * 64];
  for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
    ref->rope_sincos(ps[k], 1, freq, NULL, 64, 0.5f, out);
    for (int i = 0; i < 64; i++) {
      double a = (double)ps[k] * freq[i];
      assert_true(fabs(out[i] - 0.5 * cos(a)) <= 0x1p-22);
      assert_true(fabs(out[64 + i] - 0.5 * sin(a)) <= 0x1p-22);
    }
  }
  float row[10];
  for (int j = 0; j < 10; j++) row[j] = (float)(100 + j);
  ref->alibi_row[PE_F32](row, 10, 6, -0.25f);
  for (int j = 0; j < 10; j++) assert_true(row[j] == (float)(100 + j) - 0.25f * (float)abs(6 - j));
  uint16_t hrow[3] = {0x3c00, 0x4000, 0xc000}; /* f16 1, 2, -2 */
  const float v[3] = {0.5f, -3.0f, 2.0f};
  ref->add_row[PE_F16](hrow, v, 3);
  assert_int_equal(hrow[0], 0x3e00); /* 1.5 */
  assert_int_equal(hrow[1], 0xbc00); /* -1 */
  assert_int_equal(hrow[2], 0x0000); /* +0 */
  uint16_t brow[2] = {0x3f80, 0xc080}; /* bf16 1, -4 */
  float wide[2];
  ref->load_row[PE_BF16](wide, brow, 2);
  assert_true(wide[0] == 1.0f && wide[1] == -4.0f);
}

/* The scalar QK-norm kernels against isa.h's float32 definitions written
 * here, bit for bit (this file is built with -ffp-contract=off, so each
 * operation below is rounded as written):
 * - norm_sumsq: 16 float lanes, element e into lane e % 16 by fmaf(x, x,
 *   lane), then the tree (i + 8, + 4, + 2, + 1); combined rows: their sums
 *   in aligned power-of-two blocks, each (first half) + (second half), the
 *   blocks of the row count's binary digits added from the last; integer
 *   rows, whose sums are exact in float32 in any order, equal the exact sum;
 *   a row holding a NaN sums to NAN's bits, one whose squares overflow to
 *   +Inf.
 * - the normed rotation and norm_row: xr = x*r, n = xr*w (fmaf(xr, w, xr),
 *   xr) in float32, then ys = n_y*s, x' = fmaf(n_x, c, -ys), y' =
 *   fmaf(n_y, c, n_x*s). */
/* The same bits, or both NaN (which NaN an operation on a NaN gives depends
 * on the operand order the compiler picks: isa.h). */
static int same_f32(float a, float b) { return f32_bits(a) == f32_bits(b) || (a != a && b != b); }
static float spec_tree16(const float *l) {
  float a[16];
  memcpy(a, l, sizeof a);
  for (int w = 8; w >= 1; w /= 2)
    for (int i = 0; i < w; i++) a[i] += a[i + w];
  return a[0];
}
/* Rows [0, len) of s, len a power of two: (first half) + (second half). */
static float spec_block(const float *s, int64_t len) {
  return len == 1 ? s[0] : spec_block(s, len / 2) + spec_block(s + len / 2, len / 2);
}
/* The combined sum of `rows` row sums: blocks of the binary digits of rows,
 * largest first, added from the last. */
static float spec_combine(const float *s, int64_t rows) {
  float b[64];
  int nb = 0;
  int64_t at = 0;
  for (int k = 62; k >= 0; k--)
    if (rows >> k & 1) {
      b[nb++] = spec_block(s + at, (int64_t)1 << k);
      at += (int64_t)1 << k;
    }
  float t = b[nb - 1];
  for (int i = nb - 2; i >= 0; i--) t = b[i] + t;
  return t;
}
static void test_scalar_norm_reference(void **state) {
  (void)state;
  for (int rep = 0; rep < 300; rep++) {
    int64_t n = 1 + rnd_below(60), rows = 1 + rnd_below(40);
    float x[2400];
    for (int64_t i = 0; i < n * rows; i++) x[i] = bits_f32(gen_f32_no_nan());
    if (rep % 5 == 0) x[rnd_below((uint32_t)(n * rows))] = 3e19f; /* its square overflows */
    /* each row alone, and the rows combined */
    float got[40], want[40];
    for (int64_t r = 0; r < rows; r++) {
      float own[16] = {0};
      for (int64_t e = 0; e < n; e++) own[e % 16] = fmaf(x[r * n + e], x[r * n + e], own[e % 16]);
      want[r] = spec_tree16(own);
    }
    ref->norm_sumsq[PE_F32](x, n, rows, n, 0, got);
    for (int64_t r = 0; r < rows; r++) assert_int_equal(f32_bits(got[r]), f32_bits(want[r]));
    ref->norm_sumsq[PE_F32](x, n, rows, n, 1, got);
    assert_int_equal(f32_bits(got[0]), f32_bits(spec_combine(want, rows)));
    /* a NaN element: the quiet NaN of NAN, whatever its payload */
    x[rnd_below((uint32_t)n)] = bits_f32(0xffa00001u);
    ref->norm_sumsq[PE_F32](x, n, 1, n, 0, got);
    float nan = NAN;
    assert_int_equal(f32_bits(got[0]), f32_bits(nan));
    float k[2400];
    float exact = 0;
    for (int64_t i = 0; i < n * rows; i++) {
      k[i] = (float)((int)rnd_below(101) - 50); /* every partial sum < 2^24: exact */
      exact += k[i] * k[i];
    }
    ref->norm_sumsq[PE_F32](k, n * rows, 1, n * rows, 0, got);
    assert_true(got[0] == exact);
    ref->norm_sumsq[PE_F32](k, n, rows, n, 1, got);
    assert_true(got[0] == exact);
  }
  /* norm_scale: (float)(1.0 / sqrt((double)s * (1.0 / n) + eps)), NaN -> 0 */
  for (int rep = 0; rep < 2000; rep++) {
    float sum = rnd_below(4) ? (float)((double)(rnd() >> 11) * 0x1p-53 * 1e4) : bits_f32(gen_f32());
    int64_t n = 1 + rnd_below(5000);
    float eps = rnd_below(2) ? 1e-6f : 0.0f, got;
    ref->norm_scale(&sum, 1, n, eps, &got);
    double want = 1.0 / sqrt((double)sum * (1.0 / (double)n) + (double)eps);
    float wf = want != want ? 0.0f : (float)want;
    if (f32_bits(got) != f32_bits(wf))
      fail_msg("norm_scale(%a, %lld, %a): %a, want %a", (double)sum, (long long)n, (double)eps,
               (double)got, (double)wf);
  }
  for (int mode = 1; mode <= 3; mode++)
    for (int style = 0; style < 2; style++)
      for (int rep = 0; rep < 200; rep++) {
        int32_t np = 1 + (int32_t)rnd_below(40);
        float row[80], orig[80], w[80], c[40], s[40];
        for (int i = 0; i < 2 * np; i++) {
          row[i] = orig[i] = bits_f32(gen_f32_no_nan());
          w[i] = rnd_below(4) ? (float)(0.5 + (double)(rnd() >> 11) * 0x1p-53)
                              : bits_f32(gen_f32_no_nan());
        }
        for (int32_t j = 0; j < np; j++) {
          double a = (double)rnd_below(100000) / 1000.0;
          c[j] = (float)cos(a);
          s[j] = (float)sin(a);
        }
        float r = gen_scale();
        const float *cp = c, *sp = s, *rp = &r;
        pe_rope_block blk = {.cos = &cp, .sin = &sp, .n_tokens = 1, .n_heads = 1,
                             .n_pairs = np, .pair_dist = np, .style = style, .norm = mode,
                             .scale = &rp, .weight = w};
        ref->rope_rows[PE_F32](&blk, row, 0, 0);
        float nv[80];
        for (int i = 0; i < 2 * np; i++) {
          float xr = orig[i] * r;
          nv[i] = mode == 1 ? xr * w[i] : mode == 2 ? fmaf(xr, w[i], xr) : xr;
        }
        for (int32_t j = 0; j < np; j++) {
          int gptj = style == PE_ROPE_GPTJ, ix = gptj ? 2 * j : j, iy = gptj ? 2 * j + 1 : np + j;
          float ys = nv[iy] * s[j];
          float xo = fmaf(nv[ix], c[j], -ys), yo = fmaf(nv[iy], c[j], nv[ix] * s[j]);
          if (!same_f32(row[ix], xo) || !same_f32(row[iy], yo))
            fail_msg("normed pair %d mode %d style %d: %a %a, want %a %a", (int)j, mode, style,
                     (double)row[ix], (double)row[iy], (double)xo, (double)yo);
        }
        /* norm_row: the same elements, unrotated */
        float out[80];
        ref->norm_row[PE_F32][PE_F32](orig, out, 2 * np, r, w, mode);
        for (int i = 0; i < 2 * np; i++)
          if (!same_f32(out[i], nv[i]))
            fail_msg("norm_row element %d mode %d: %a, want %a", i, mode, (double)out[i],
                     (double)nv[i]);
      }
}

int main(void) {
  static const path_check checks[] = {{"rope_sincos", test_rope_sincos},
                                      {"rope_rows", test_rope_rows},
                                      {"rope_store_rows", test_rope_store_rows},
                                      {"rope_special_lanes", test_rope_special_lanes},
                                      {"convert", test_convert},
                                      {"norm_kernels", test_norm_kernels},
                                      {"norm_scale_midpoints", test_norm_scale_midpoints},
                                      {"enc_rows", test_enc_rows},
                                      {"mask_rows", test_mask_rows}};
  enum { N_CHECKS = sizeof checks / sizeof checks[0] };
  static char names[N_CHECKS * PE_TEST_N_SIMD_PATHS][48];
  struct CMUnitTest tests[N_CHECKS * PE_TEST_N_SIMD_PATHS + 4];
  size_t n = add_path_tests(tests, names, checks, N_CHECKS);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_scalar_rotate_reference);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_scalar_convert_reference);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_scalar_sincos_alibi_reference);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_scalar_norm_reference);
  return _cmocka_run_group_tests("kernels", tests, n, NULL, NULL);
}
