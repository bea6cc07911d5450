/* test_isa.c - every kernel path against the scalar reference, bit for bit.
 *
 * 1. Differential: the same inputs rotated under "scalar" and under every
 *    other path this build and CPU run (pe_force_isa), compared with memcmp
 *    over the whole buffer (so untouched channels and gaps are checked too).
 *    Caches are created under the path being tested, so its table build is
 *    compared as well. Each check is one cmocka test per path; a path the
 *    CPU or build lacks is reported SKIPPED (cmocka skip()), not passed.
 * 2. Tables: pe_rope_cache_cos_sin per path against scalar, and against a
 *    float64 reference (the exact double angle p*inv_freq, libm cos/sin) at
 *    positions up to 2^24. Measured: at most 1.32 ulp of float32 at the
 *    value's own exponent (about 0.1% of values exceed 1 ulp: SLEEF's u10
 *    sincosf is itself up to 1 ulp, and the correction's fma rounds once
 *    more), 7.9e-8 absolute. Asserted: what posenc.h states for
 *    pe_rope_cache_create, 1.5 ulp and 1e-7 absolute (ABS_BOUND).
 * 2b. Large positions: cos_sin, apply, shift (+-delta) and
 *    rerotate at positions 2^31 .. 2^53-1 against mpmath's cos/sin of the
 *    exact angle for the double frequencies (tests/data/exact_angles.h, from
 *    tests/gen_exact_angles.py): within ABS_BOUND (6.3e-8 measured).
 * 3. Golden: outputs for deterministic inputs (integer PRNG, no libm), written
 *    by the x86-64 build to tests/data/golden/rope.bin and checked byte for
 *    byte on every path, including NEON under qemu. Inputs are finite: NaN
 *    payloads and the default NaN legitimately differ between x86 and Arm.
 *    To regenerate (only when the arithmetic is changed on purpose):
 *      PE_GOLDEN_WRITE=1 <x86-64 build dir>/tests/test_isa   (written by scalar)
 *    then check that every other path and the aarch64 build still pass.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "posenc.h"

#define TEST_RNG_SEED 0x243f6a8885a308d3ull
#include "isa_compare.h"
#include "test_util.h"

/* Each test below exists once per path (see PATH_TESTS). A path this build
 * or CPU cannot run has nothing to compare: its tests report a cmocka skip
 * (visible in the log as SKIPPED), never a pass. Any other failure to force
 * it is a failure (isa_compare.h). */
static void require_path(const char *name) {
  if (!pe_test_use_path(name)) skip();
}

/* ---- deterministic integer PRNG (test_util.h: identical on every
 * architecture) ---- */
static uint32_t rnd_below(uint32_t n) { return (uint32_t)((rnd() >> 32) % n); }

/* A value of the dtype, as bits. kind 0: finite, moderate magnitudes built
 * from integers only; kind 1: anything, including NaN (any payload), Inf,
 * subnormals, zeros and values that overflow or round at the half types'
 * limits. */
static void fill_value(uint8_t *p, pe_dtype dt, int kind) {
  uint64_t r = rnd();
  if (dt == PE_F32) {
    uint32_t u;
    if (kind == 0) {
      u = (uint32_t)(r >> 32) & 0x807fffffu;          /* sign + mantissa */
      u |= (uint32_t)(118 + (r >> 8) % 12) << 23;      /* 2^-9 .. 2^2 */
    } else {
      switch ((r >> 60) & 7) {
      case 0: u = (uint32_t)r; break;                                  /* any bits */
      case 1: u = ((uint32_t)r & 0x807fffffu) | 0x7f800000u; break;    /* Inf/NaN */
      case 2: u = (uint32_t)r & 0x807fffffu; break;                    /* subnormal/0 */
      case 3: u = ((uint32_t)r & 0x807fffffu) | (uint32_t)(100 + (r >> 40) % 43) << 23; break;
      default: u = ((uint32_t)r & 0x807fffffu) | (uint32_t)(118 + (r >> 40) % 12) << 23; break;
      }
    }
    memcpy(p, &u, 4);
  } else {
    uint16_t h;
    if (kind == 0) {
      if (dt == PE_F16)
        h = (uint16_t)(((r >> 32) & 0x83ffu) | (uint16_t)((6 + (r >> 8) % 11) << 10));
      else
        h = (uint16_t)(((r >> 32) & 0x807fu) | (uint16_t)((118 + (r >> 8) % 12) << 7));
    } else {
      h = (uint16_t)(r >> 16); /* every pattern: NaN, Inf, subnormal, zero */
    }
    memcpy(p, &h, 2);
  }
}

static size_t esize(pe_dtype dt) { return dt == PE_F32 ? 4 : 2; }

/* ---- one differential case ---- */
enum { OP_APPLY, OP_INVERSE, OP_SHIFT, OP_REROTATE };
enum { LAYOUT_BHTD, LAYOUT_BTHD, LAYOUT_QKV, LAYOUT_PADDED };

typedef struct rcase {
  int32_t head_dim, rotary_dim, style;
  int64_t max_positions; /* 0: on the fly */
  double attention_factor;
  pe_dtype dtype;
  int layout, op, kind, null_positions;
  int64_t batch, tokens, hq, hk;
} rcase;

typedef struct rbuf {
  uint8_t *data;
  size_t bytes;
  pe_tensor q, k; /* q.data NULL: k only */
  int64_t *pos;
} rbuf;

static void make_tensor(pe_tensor *t, void *data, pe_dtype dt, int64_t b, int64_t h, int64_t tk,
                        int64_t d, int64_t sb, int64_t sh, int64_t st) {
  t->data = data;
  t->dtype = dt;
  t->shape[0] = b, t->shape[1] = h, t->shape[2] = tk, t->shape[3] = d;
  t->stride[0] = sb, t->stride[1] = sh, t->stride[2] = st, t->stride[3] = 1;
}

/* Lay out q and k for the case; fill everything (including gaps and V) with
 * values of the case's kind. */
static void build(const rcase *c, rbuf *rb) {
  int64_t B = c->batch, T = c->tokens, Hq = c->hq, Hk = c->hk, D = c->head_dim;
  int k_only = c->op == OP_SHIFT || c->op == OP_REROTATE;
  size_t es = esize(c->dtype);
  int64_t elems;
  if (c->layout == LAYOUT_QKV) elems = B * T * (Hq + 2 * Hk) * D;
  else if (c->layout == LAYOUT_PADDED) elems = B * (Hq + Hk) * T * (D + 5);
  else elems = B * (Hq + Hk) * T * D;
  rb->bytes = (size_t)elems * es;
  rb->data = malloc(rb->bytes);
  assert_non_null(rb->data);
  for (int64_t i = 0; i < elems; i++) fill_value(rb->data + i * es, c->dtype, c->kind);
  uint8_t *q = rb->data, *k;
  switch (c->layout) {
  case LAYOUT_BHTD:
    k = q + (size_t)(B * Hq * T * D) * es;
    make_tensor(&rb->q, q, c->dtype, B, Hq, T, D, Hq * T * D, T * D, D);
    make_tensor(&rb->k, k, c->dtype, B, Hk, T, D, Hk * T * D, T * D, D);
    break;
  case LAYOUT_BTHD:
    k = q + (size_t)(B * Hq * T * D) * es;
    make_tensor(&rb->q, q, c->dtype, B, Hq, T, D, T * Hq * D, D, Hq * D);
    make_tensor(&rb->k, k, c->dtype, B, Hk, T, D, T * Hk * D, D, Hk * D);
    break;
  case LAYOUT_QKV: { /* rows [q heads | k heads | v heads] per token */
    int64_t row = (Hq + 2 * Hk) * D;
    k = q + (size_t)(Hq * D) * es;
    make_tensor(&rb->q, q, c->dtype, B, Hq, T, D, T * row, D, row);
    make_tensor(&rb->k, k, c->dtype, B, Hk, T, D, T * row, D, row);
    break;
  }
  default: { /* [B,H,T,D+5]: five foreign channels after every row */
    int64_t D5 = D + 5;
    k = q + (size_t)(B * Hq * T * D5) * es;
    make_tensor(&rb->q, q, c->dtype, B, Hq, T, D, Hq * T * D5, T * D5, D5);
    make_tensor(&rb->k, k, c->dtype, B, Hk, T, D, Hk * T * D5, T * D5, D5);
    break;
  }
  }
  if (k_only) rb->q.data = NULL;
  rb->pos = malloc((size_t)(B * T) * sizeof(int64_t));
  assert_non_null(rb->pos);
  for (int64_t i = 0; i < B * T; i++) {
    if (c->op == OP_SHIFT) rb->pos[i] = (int64_t)rnd_below(2000001) - 1000000;
    else if (c->max_positions) rb->pos[i] = rnd_below((uint32_t)c->max_positions);
    else rb->pos[i] = (int64_t)(rnd() >> 30); /* up to 2^34 */
  }
}

static pe_rope_cache *make_cache(const rcase *c, double base, int64_t max_positions) {
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = c->head_dim;
  p.rotary_dim = c->rotary_dim;
  p.style = c->style;
  p.base = base;
  p.max_positions = max_positions;
  p.attention_factor = c->attention_factor;
  pe_rope_cache *cache = NULL;
  assert_int_equal(pe_rope_cache_create(&p, &cache), PE_OK);
  return cache;
}

/* Run the case's operation under the selected path on a copy of `in`. */
static void run_case(const rcase *c, const rbuf *in, uint8_t *out) {
  memcpy(out, in->data, in->bytes);
  pe_tensor q = in->q, k = in->k;
  ptrdiff_t shift = out - in->data;
  if (q.data) q.data = (uint8_t *)q.data + shift;
  k.data = (uint8_t *)k.data + shift;
  pe_rope_cache *cache = make_cache(c, 10000.0, c->max_positions);
  pe_status st;
  switch (c->op) {
  case OP_APPLY:
  case OP_INVERSE:
    st = pe_apply_rope_qk(cache, &q, &k, c->null_positions ? NULL : in->pos,
                          c->op == OP_INVERSE ? PE_ROPE_INVERSE : 0, NULL);
    break;
  case OP_SHIFT:
    st = pe_rope_shift_k(cache, &k, in->pos, NULL);
    break;
  default: {
    pe_rope_cache *to = make_cache(c, 500000.0, 0);
    st = pe_rope_rerotate_k(cache, to, &k, in->pos, NULL);
    pe_rope_cache_destroy(to);
    break;
  }
  }
  if (st != PE_OK) fail_msg("call failed: %s", pe_last_error());
  pe_rope_cache_destroy(cache);
}

static void describe(const rcase *c, char *s, size_t n) {
  static const char *const ops[] = {"apply", "inverse", "shift", "rerotate"};
  static const char *const layouts[] = {"BHTD", "BTHD", "QKV", "padded"};
  static const char *const dts[] = {"f32", "f16", "bf16"};
  snprintf(s, n, "%s %s hd %d rd %d %s %s %s B %lld T %lld Hq %lld Hk %lld %s%s",
           ops[c->op], dts[c->dtype], (int)c->head_dim, (int)c->rotary_dim,
           c->style == PE_ROPE_GPTJ ? "gptj" : "neox", c->max_positions ? "table" : "on-the-fly",
           layouts[c->layout], (long long)c->batch, (long long)c->tokens, (long long)c->hq,
           (long long)c->hk, c->kind ? "special values" : "finite values",
           c->null_positions ? " positions NULL" : "");
}

/* Scalar once, then `path`; returns the number of cases run. */
static long compare_case(const rcase *c, const char *path) {
  rbuf in;
  build(c, &in);
  uint8_t *ref = malloc(in.bytes), *got = malloc(in.bytes);
  assert_non_null(ref);
  assert_non_null(got);
  assert_int_equal(pe_force_isa("scalar"), PE_OK);
  run_case(c, &in, ref);
  assert_int_equal(pe_force_isa(path), PE_OK);
  run_case(c, &in, got);
  char s[256];
  describe(c, s, sizeof s);
  pe_test_same_bytes(s, "scalar", path, ref, got, in.bytes, NULL);
  free(ref);
  free(got);
  free(in.data);
  free(in.pos);
  return 1;
}

static const int32_t head_dims[] = {4, 6, 18, 64, 80, 96, 128, 256};

static void differential(const char *path, pe_dtype dt) {
  require_path(path);
  long n = 0;
  for (size_t h = 0; h < sizeof head_dims / sizeof head_dims[0]; h++)
    for (int partial = 0; partial < 2; partial++)
      for (int style = 0; style < 2; style++)
        for (int table = 0; table < 2; table++)
          for (int op = 0; op < 4; op++)
            for (int layout = 0; layout < 4; layout++)
              for (int kind = 0; kind < 2; kind++) {
                if (table && (op == OP_SHIFT || op == OP_REROTATE) && layout != LAYOUT_QKV)
                  continue; /* shift/rerotate compute on the fly either way */
                int32_t hd = head_dims[h];
                rcase c = {.head_dim = hd, .rotary_dim = partial ? (hd * 3 / 4) & ~1 : 0,
                           .style = style, .max_positions = table ? 3000 : 0,
                           .attention_factor = (layout & 1) ? 0.8125 : 0.0, .dtype = dt,
                           .layout = layout, .op = op, .kind = kind,
                           .null_positions = op <= OP_INVERSE && layout == LAYOUT_BTHD,
                           .batch = 2, .tokens = hd <= 18 ? 37 : 11, .hq = 3,
                           .hk = layout == LAYOUT_QKV ? 2 : 1};
                n += compare_case(&c, path);
              }
  printf("# %s: %ld cases equal to scalar\n", path, n);
  assert_true(n > 0);
}

/* Larger shapes: several token blocks, and a decode step with many heads. */
static void differential_shapes(const char *path) {
  require_path(path);
  long n = 0;
  static const int64_t shapes[][4] = {{1, 97, 5, 3}, {3, 1, 33, 7}, {1, 65, 1, 1}, {2, 130, 4, 2}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int dt = 0; dt < 3; dt++)
      for (int layout = 0; layout < 4; layout++)
        for (int style = 0; style < 2; style++) {
          rcase c = {.head_dim = 128, .style = style, .max_positions = s & 1 ? 0 : 4096,
                     .dtype = (pe_dtype)dt, .layout = layout, .op = OP_APPLY,
                     .batch = shapes[s][0], .tokens = shapes[s][1], .hq = shapes[s][2],
                     .hk = shapes[s][3]};
          n += compare_case(&c, path);
        }
  printf("# %s: %ld larger shapes equal to scalar\n", path, n);
  assert_true(n > 0);
}

/* ---- tables ---- */

/* posenc.h (pe_rope_cache_create): every cos/sin entry within 1e-7 of
 * cos/sin of the exact angle for the double frequency, at every position
 * below 2^53. */
#define ABS_BOUND 1e-7

static void cos_sin(const pe_rope_cache *c, int64_t pos, float *out, int32_t half) {
  assert_int_equal(pe_rope_cache_cos_sin(c, pos, out, out + half), PE_OK);
}

/* The path's table rows and on-the-fly rows equal scalar's. */
static void table_rows(const char *path) {
  require_path(path);
  static const int32_t dims[] = {4, 6, 18, 34, 64, 80, 96, 128, 256};
  static const int64_t far[] = {0, 1, 7, 4095, 65535, 1000003, 16777215, 16777216,
                                INT64_C(1) << 31, INT64_C(123456789012), (INT64_C(1) << 53) - 1};
  /* tiny bases give frequencies up to 1e300: angles past any useful
   * reduction, or Inf; they must still agree (and stay bounded) */
  static const double bases[] = {10000.0, 1e-30, 7.2911220195563975e-304};
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
    for (int af = 0; af < 2 * 3; af++) {
      rcase c = {.head_dim = dims[d], .attention_factor = af & 1 ? 0.7 : 0.0};
      double base = bases[af / 2];
      int32_t half = dims[d] / 2;
      float ref[256], got[256];
      assert_int_equal(pe_force_isa("scalar"), PE_OK);
      pe_rope_cache *t_ref = make_cache(&c, base, 4096), *f_ref = make_cache(&c, base, 0);
      {
        assert_int_equal(pe_force_isa(path), PE_OK);
        pe_rope_cache *t = make_cache(&c, base, 4096), *f = make_cache(&c, base, 0);
        for (int64_t p = 0; p < 4096; p++) {
          cos_sin(t_ref, p, ref, half);
          cos_sin(t, p, got, half);
          if (memcmp(ref, got, (size_t)half * 8))
            fail_msg("%s table row %lld differs from scalar (head_dim %d)", path,
                     (long long)p, (int)dims[d]);
        }
        for (size_t k = 0; k < sizeof far / sizeof far[0]; k++) {
          assert_int_equal(pe_force_isa("scalar"), PE_OK);
          cos_sin(f_ref, far[k], ref, half);
          assert_int_equal(pe_force_isa(path), PE_OK);
          cos_sin(f, far[k], got, half);
          if (memcmp(ref, got, (size_t)half * 8))
            fail_msg("%s on-the-fly row at %lld differs from scalar (head_dim %d)", path,
                     (long long)far[k], (int)dims[d]);
          for (int32_t j = 0; j < 2 * half; j++)
            if (!(fabsf(got[j]) <= 1.0f))
              fail_msg("%s: cos/sin %g at %lld (base %g) is not in [-1, 1]", path,
                       (double)got[j], (long long)far[k], base);
        }
        pe_rope_cache_destroy(t);
        pe_rope_cache_destroy(f);
        assert_int_equal(pe_force_isa("scalar"), PE_OK);
      }
      pe_rope_cache_destroy(t_ref);
      pe_rope_cache_destroy(f_ref);
    }
}

/* |got - ref| in units of the float32 ulp at ref. */
static double ulp_error(float got, double ref) {
  double a = fabs(ref);
  if (a < 0x1p-126) a = 0x1p-126; /* subnormal range: fixed ulp */
  int e;
  frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  double ulp = ldexp(1.0, e - 24);
  return fabs((double)got - ref) / ulp;
}

/* cos/sin of the exact angle p*f for the double f: p*f = th + tl exactly
 * (tl = fma(p, f, -th)), then the angle-addition formula in double (tl is
 * below 2^-29 here, libm's cos/sin of th are good to the double's ulp). */
static void exact_cs_ref(int64_t p, double f, double *c, double *s) {
  double th = (double)p * f, tl = fma((double)p, f, -th);
  double ct = cos(th), st = sin(th), cl = cos(tl), sl = sin(tl);
  *c = ct * cl - st * sl;
  *s = st * cl + ct * sl;
}

/* The path within 1.5 ulp of float32 of the exact cos/sin of the angle for
 * the double frequency (the library's definition) for positions up to 2^24;
 * head_dim 128, and 512 (Gemma 4's global layers), whose 256 frequencies
 * an on-the-fly cos_sin computes in two pieces. */
static void table_accuracy(const char *path) {
  require_path(path);
  static const double bases[] = {10000.0, 500000.0, 1e6};
  {
    double worst = 0.0, worst_abs = 0.0;
    long samples = 0, over1 = 0;
    for (size_t b = 0; b < 2 * sizeof bases / sizeof bases[0]; b++) {
      const int hd = b & 1 ? 512 : 128, nf = hd / 2;
      /* custom frequencies: the reference uses exactly the library's doubles */
      double inv[256];
      float row[512];
      for (int j = 0; j < nf; j++) inv[j] = 1.0 / pow(bases[b / 2], (double)(2 * j) / hd);
      pe_rope_params prm;
      pe_rope_params_init(&prm);
      prm.head_dim = hd;
      prm.max_positions = 0;
      prm.scaling = PE_ROPE_SCALING_CUSTOM;
      prm.inv_freq = inv;
      pe_rope_cache *cache = NULL;
      assert_int_equal(pe_rope_cache_create(&prm, &cache), PE_OK);
      for (int s = 0; s < (hd == 128 ? 3000 : 1200); s++) {
        int64_t p = s < 1000 ? s : s == 1000 ? (1 << 24) : (int64_t)rnd_below(1u << 24);
        cos_sin(cache, p, row, nf);
        for (int j = 0; j < nf; j++) {
          double rc, rs;
          exact_cs_ref(p, inv[j], &rc, &rs);
          double ec = ulp_error(row[j], rc), es = ulp_error(row[nf + j], rs);
          double ac = fabs((double)row[j] - rc), as = fabs((double)row[nf + j] - rs);
          if (ec > worst) worst = ec;
          if (es > worst) worst = es;
          if (ac > worst_abs) worst_abs = ac;
          if (as > worst_abs) worst_abs = as;
          over1 += (ec > 1.0) + (es > 1.0);
          samples += 2;
        }
      }
      pe_rope_cache_destroy(cache);
    }
    printf("# %s: max table error %.3f ulp of float32 (%.3g absolute) over %ld values at "
           "positions <= 2^24; %ld above 1 ulp\n",
           path, worst, worst_abs, samples, over1);
    assert_true(worst <= 1.5);
    assert_true(worst_abs <= ABS_BOUND);
  }
  assert_int_equal(pe_force_isa("scalar"), PE_OK);
}

/* ---- large positions: the exact angle for the double frequency ---- */

#include "data/exact_angles.h" /* tests/gen_exact_angles.py (mpmath) */

/* Largest |got - exact| per position over cos and sin of every frequency:
 * got[t][0..NF) cos, got[t][NF..2NF) sin (a NeoX row of head_dim 2*NF that
 * held x = 1, y = 0 before the rotation, or a cos_sin row). sign -1: the
 * negated angle (a negative shift). */
static void exact_errors(const float *got, const double (*ref)[EXACT_NF][2], double sign,
                         double *err) {
  for (int t = 0; t < EXACT_NP; t++)
    for (int i = 0; i < EXACT_NF; i++) {
      double ec = fabs((double)got[t * 2 * EXACT_NF + i] - ref[t][i][0]);
      double es = fabs((double)got[t * 2 * EXACT_NF + EXACT_NF + i] - sign * ref[t][i][1]);
      if (ec > err[t]) err[t] = ec;
      if (es > err[t]) err[t] = es;
    }
}

static pe_rope_cache *exact_cache(const double *freq) {
  pe_rope_params prm;
  pe_rope_params_init(&prm);
  prm.head_dim = 2 * EXACT_NF;
  prm.max_positions = 0;
  prm.scaling = PE_ROPE_SCALING_CUSTOM;
  prm.inv_freq = freq;
  prm.attention_factor = 1.0;
  pe_rope_cache *cache = NULL;
  assert_int_equal(pe_rope_cache_create(&prm, &cache), PE_OK);
  return cache;
}

/* k = rows (x = 1, y = 0) of EXACT_NP tokens, one head. */
static void unit_rows(float *buf, pe_tensor *t, int64_t tokens) {
  for (int64_t r = 0; r < tokens; r++)
    for (int i = 0; i < 2 * EXACT_NF; i++) buf[r * 2 * EXACT_NF + i] = i < EXACT_NF ? 1.0f : 0.0f;
  make_tensor(t, buf, PE_F32, 1, 1, tokens, 2 * EXACT_NF, tokens * 2 * EXACT_NF,
              tokens * 2 * EXACT_NF, 2 * EXACT_NF);
}

/* At positions 2^31 .. 2^53-1 every on-the-fly path (cos_sin,
 * apply, shift by +-delta, rerotate) is within ABS_BOUND of cos/sin of the
 * exact angle (mpmath), not of the rounded double product p*f. */
static void large_positions(const char *path) {
  require_path(path);
  pe_rope_cache *c = exact_cache(exact_freq), *to = exact_cache(exact_to);
  float rows[2 * EXACT_NP][2 * EXACT_NF];
  double err[4][EXACT_NP] = {{0}}, err_neg[EXACT_NP] = {0};
  static const char *const what[4] = {"cos_sin", "apply", "shift", "rerotate"};
  /* cos_sin */
  for (int t = 0; t < EXACT_NP; t++)
    assert_int_equal(pe_rope_cache_cos_sin(c, exact_pos[t], rows[t], rows[t] + EXACT_NF), PE_OK);
  exact_errors(&rows[0][0], exact_cs, 1.0, err[0]);
  /* apply on unit vectors: x' = c, y' = s exactly (fmaf(1, c, -(0*s))) */
  pe_tensor k;
  unit_rows(&rows[0][0], &k, EXACT_NP);
  assert_int_equal(pe_apply_rope_qk(c, NULL, &k, exact_pos, 0, NULL), PE_OK);
  exact_errors(&rows[0][0], exact_cs, 1.0, err[1]);
  /* shift by +delta and -delta */
  int64_t deltas[2 * EXACT_NP];
  for (int t = 0; t < EXACT_NP; t++) deltas[t] = exact_pos[t], deltas[EXACT_NP + t] = -exact_pos[t];
  unit_rows(&rows[0][0], &k, 2 * EXACT_NP);
  assert_int_equal(pe_rope_shift_k(c, &k, deltas, NULL), PE_OK);
  exact_errors(&rows[0][0], exact_cs, 1.0, err[2]);
  exact_errors(&rows[EXACT_NP][0], exact_cs, -1.0, err_neg);
  for (int t = 0; t < EXACT_NP; t++) err[2][t] = fmax(err[2][t], err_neg[t]);
  /* rerotate from exact_freq to exact_to: the angle p*(to - from) */
  unit_rows(&rows[0][0], &k, EXACT_NP);
  assert_int_equal(pe_rope_rerotate_k(c, to, &k, exact_pos, NULL), PE_OK);
  exact_errors(&rows[0][0], exact_rr_cs, 1.0, err[3]);
  int bad = 0;
  for (int w = 0; w < 4; w++) {
    printf("# %s %-8s max |error| vs exact:", path, what[w]);
    for (int t = 0; t < EXACT_NP; t++) {
      printf(" p=%lld %.3g", (long long)exact_pos[t], err[w][t]);
      bad |= !(err[w][t] <= ABS_BOUND);
    }
    printf("\n");
  }
  pe_rope_cache_destroy(c);
  pe_rope_cache_destroy(to);
  assert_int_equal(pe_force_isa("scalar"), PE_OK);
  if (bad) fail_msg("path %s: an error above %g at a large position (listed above)", path, ABS_BOUND);
}

/* ---- golden file ---- */

#define GOLDEN_PATH PE_TEST_DATA_DIR "/golden/rope.bin"

/* The golden cases: every dtype and style, table and on the fly, partial
 * rotary and tails, inverse and shift, a non-unit attention factor. */
static size_t golden_outputs(uint8_t **out) {
  static const int32_t hds[] = {18, 80, 128};
  size_t cap = 1 << 22, used = 0;
  uint8_t *buf = malloc(cap);
  assert_non_null(buf);
  rng = 0x0123456789abcdefull; /* the inputs depend on nothing but this file */
  for (int dt = 0; dt < 3; dt++)
    for (int style = 0; style < 2; style++)
      for (int table = 0; table < 2; table++)
        for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++)
          for (int op = 0; op < 3; op++) {
            if (op == OP_SHIFT && table) continue;
            rcase c = {.head_dim = hds[h], .rotary_dim = h == 1 ? 64 : 0, .style = style,
                       .max_positions = table ? 2048 : 0, .attention_factor = h == 2 ? 0.875 : 0,
                       .dtype = (pe_dtype)dt, .layout = (int)h % 3, .op = op, .kind = 0,
                       .batch = 1, .tokens = 4, .hq = 2, .hk = 1};
            rbuf in;
            build(&c, &in);
            assert_true(used + in.bytes <= cap);
            run_case(&c, &in, buf + used);
            used += in.bytes;
            free(in.data);
            free(in.pos);
          }
  *out = buf;
  return used;
}

static void check_golden(const char *path) {
  uint8_t *got;
  size_t n = golden_outputs(&got);
  const char *w = getenv("PE_GOLDEN_WRITE");
  if (w && *w && *w != '0') {
    FILE *f = fopen(GOLDEN_PATH, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(got, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    printf("# wrote %zu bytes to %s with path %s\n", n, GOLDEN_PATH, path);
    free(got);
    return;
  }
  FILE *f = fopen(GOLDEN_PATH, "rb");
  if (!f) fail_msg("cannot open %s (regenerate: PE_GOLDEN_WRITE=1)", GOLDEN_PATH);
  uint8_t *want = malloc(n + 1);
  assert_non_null(want);
  size_t len = fread(want, 1, n + 1, f);
  fclose(f);
  if (len != n) fail_msg("%s holds %zu bytes, expected %zu", GOLDEN_PATH, len, n);
  if (memcmp(want, got, n)) {
    size_t at = 0;
    while (want[at] == got[at]) at++;
    fail_msg("path %s differs from the golden file at byte %zu", path, at);
  }
  printf("# path %s matches the golden file (%zu bytes)\n", path, n);
  free(want);
  free(got);
}

static void golden(const char *path) {
  const char *w = getenv("PE_GOLDEN_WRITE");
  if (w && *w && *w != '0') {
    if (strcmp(path, "scalar")) skip(); /* the reference writes it */
    assert_int_equal(pe_force_isa("scalar"), PE_OK);
    check_golden("scalar");
    return;
  }
  require_path(path);
  check_golden(path);
  assert_int_equal(pe_force_isa("scalar"), PE_OK);
}

/* One cmocka test per path and check, so that a path this machine cannot
 * run shows up as SKIPPED under its own name (e.g. identity_f32_neon). */
#define PATH_TESTS(p)                                                                \
  static void identity_f32_##p(void **s) { (void)s; differential(#p, PE_F32); }      \
  static void identity_f16_##p(void **s) { (void)s; differential(#p, PE_F16); }      \
  static void identity_bf16_##p(void **s) { (void)s; differential(#p, PE_BF16); }    \
  static void identity_shapes_##p(void **s) { (void)s; differential_shapes(#p); }    \
  static void table_rows_##p(void **s) { (void)s; table_rows(#p); }                  \
  static void table_accuracy_##p(void **s) { (void)s; table_accuracy(#p); }          \
  static void golden_##p(void **s) { (void)s; golden(#p); }                          \
  static void large_positions_##p(void **s) { (void)s; large_positions(#p); }
PATH_TESTS(avx2)
PATH_TESTS(avx512)
PATH_TESTS(avx512bf16)
PATH_TESTS(neon)
static void table_accuracy_scalar(void **s) { (void)s; table_accuracy("scalar"); }
static void golden_scalar(void **s) { (void)s; golden("scalar"); }
static void large_positions_scalar(void **s) { (void)s; large_positions("scalar"); }
#define PATH_ENTRIES(p)                                                              \
  cmocka_unit_test(identity_f32_##p), cmocka_unit_test(identity_f16_##p),            \
      cmocka_unit_test(identity_bf16_##p), cmocka_unit_test(identity_shapes_##p),    \
      cmocka_unit_test(table_rows_##p), cmocka_unit_test(table_accuracy_##p),        \
      cmocka_unit_test(golden_##p), cmocka_unit_test(large_positions_##p)

/* Forcing a path this CPU or build lacks is reported, never a crash: for
 * every path posenc.h names (test_env.h's list), PE_OK (and that path in
 * use) or PE_ERR_UNSUPPORTED; an unknown name is PE_ERR_INVALID_ARGUMENT. */
static void test_force_isa(void **state) {
  (void)state;
  assert_int_equal(pe_force_isa("scalar"), PE_OK);
  assert_string_equal(pe_isa_name(), "scalar");
  assert_int_equal(pe_force_isa("sse9"), PE_ERR_INVALID_ARGUMENT);
  for (size_t i = 0; i < PE_TEST_N_SIMD_PATHS; i++) {
    pe_status st = pe_force_isa(pe_test_simd_path(i));
    assert_true(st == PE_OK || st == PE_ERR_UNSUPPORTED);
    if (st == PE_OK) assert_string_equal(pe_isa_name(), pe_test_simd_path(i));
  }
  assert_int_equal(pe_force_isa("auto"), PE_OK);
}

/* PE_CPU_DISABLE (the CTest entry test_isa_cpu_disable sets it to
 * "avx2,neon"): every SIMD path is then refused with a sentence that says
 * so (or, for a path this build or CPU lacks anyway, why), and the automatic
 * choice is the scalar path, as on a CPU without them. Without the variable
 * there is nothing to check: a visible skip. */
/* PE_CPU_DISABLE's value when it is `value` (the CTest entry `entry` sets
 * it); otherwise a visible skip. */
static const char *cpu_disable_is(const char *value, const char *entry) {
  const char *env = getenv("PE_CPU_DISABLE");
  if (!env || strcmp(env, value) != 0) {
    printf("# PE_CPU_DISABLE is not \"%s\": run as %s\n", value, entry);
    skip();
  }
  return env;
}

static void test_cpu_disable(void **state) {
  (void)state;
  cpu_disable_is("avx2,neon", "test_isa_cpu_disable");
  for (size_t i = 0; i < PE_TEST_N_SIMD_PATHS; i++) {
    assert_int_equal(pe_force_isa(pe_test_simd_path(i)), PE_ERR_UNSUPPORTED);
    const char *why = pe_last_error();
    printf("# %s refused: %s\n", pe_test_simd_path(i), why);
    assert_true(strstr(why, "hidden by PE_CPU_DISABLE") || strstr(why, "not compiled") ||
                strstr(why, "AVX-512F"));
  }
#if defined(__x86_64__)
  /* This project's CI CPUs all have AVX2: hidden, it must be said so. */
  assert_int_equal(pe_force_isa("avx2"), PE_ERR_UNSUPPORTED);
  assert_non_null(strstr(pe_last_error(), "hidden by PE_CPU_DISABLE"));
#elif defined(__aarch64__)
  assert_int_equal(pe_force_isa("neon"), PE_ERR_UNSUPPORTED);
  assert_non_null(strstr(pe_last_error(), "hidden by PE_CPU_DISABLE"));
#endif
  assert_int_equal(pe_force_isa("auto"), PE_OK);
  assert_string_equal(pe_isa_name(), "scalar");
}

/* PE_CPU_DISABLE names whole features, nothing else: the CTest entry
 * test_isa_cpu_disable_names sets it to "neon,avx,avx512bf" - on x86-64 a
 * feature these CPUs lack and two prefixes of names ("avx" of avx2,
 * "avx512bf" of avx512bf16), which hide nothing; so every x86 path is
 * refused, if at all, for its own reason, avx2 is forced and the automatic
 * choice is a SIMD path. On aarch64 NEON is hidden. */
static void test_cpu_disable_names(void **state) {
  (void)state;
  const char *env = cpu_disable_is("neon,avx,avx512bf", "test_isa_cpu_disable_names");
  (void)env; /* named in the x86-64 failure message only */
#if defined(__x86_64__)
  for (size_t i = 0; i < PE_TEST_N_SIMD_PATHS; i++) {
    const char *path = pe_test_simd_path(i);
    if (!strcmp(path, "neon")) continue;
    if (pe_force_isa(path) != PE_OK && strstr(pe_last_error(), "hidden by PE_CPU_DISABLE"))
      fail_msg("PE_CPU_DISABLE=%s hid %s: %s", env, path, pe_last_error());
  }
  assert_int_equal(pe_force_isa("avx2"), PE_OK); /* every CI CPU has it */
  assert_int_equal(pe_force_isa("auto"), PE_OK);
  assert_string_not_equal(pe_isa_name(), "scalar");
#elif defined(__aarch64__)
  assert_int_equal(pe_force_isa("neon"), PE_ERR_UNSUPPORTED);
  assert_non_null(strstr(pe_last_error(), "hidden by PE_CPU_DISABLE"));
#endif
  assert_int_equal(pe_force_isa("auto"), PE_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_force_isa),
      cmocka_unit_test(test_cpu_disable),
      cmocka_unit_test(test_cpu_disable_names),
      cmocka_unit_test(table_accuracy_scalar),
      cmocka_unit_test(golden_scalar),
      cmocka_unit_test(large_positions_scalar),
      PATH_ENTRIES(avx512bf16),
      PATH_ENTRIES(avx512),
      PATH_ENTRIES(avx2),
      PATH_ENTRIES(neon),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
