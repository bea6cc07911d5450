/* floor.c - which floor kernels run (the library's path, the CPU's
 * features, what this build compiled), which stages they handle, and the
 * L1-resident rows each thread's kernels cycle through. measure.c times
 * them interleaved with the kernel's samples. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "floor.h"
#include "posenc.h"

#if defined(__x86_64__) && defined(PB_FLOOR_AVX2)
#include <cpuid.h>

/* F16C, which not every compiler's __builtin_cpu_supports names (CPUID 1,
 * ECX bit 29; AVX2's check has made sure the OS saves the vector state). */
static int has_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

int64_t floor_row_bytes(int dt, int fmt, int width) {
  if (fmt == FL_Q8_0) return (int64_t)width / 32 * 34;
  if (fmt == FL_FP8) return width;
  return (int64_t)width * (dt == PE_F32 ? 4 : 2);
}

int64_t floor_out_bytes(const floor_stage *st) {
  if (st->kind == FL_SHIFT) return floor_row_bytes(0, FL_Q8_0, st->width);
  if (st->kind == FL_MLA && st->fmt == FL_FP8_DS) { /* codes, a scale per tile, bf16 rope */
    const int64_t lat = st->width - st->rot;
    return lat + 4 * (lat / 128) + 2 * (int64_t)st->rot;
  }
  return floor_row_bytes(st->inplace ? st->src : st->dst, st->kind == FL_COPY ? FL_NONE : st->fmt,
                         st->width);
}

int floor_supported(const floor_stage *st) {
  const int w = st->width, rot = st->rot, half = rot / 2;
  if (w <= 0 || w % 16 || rot < 0 || rot % 2 || rot > w || (w - rot) % 16) return 0;
  if (st->kind == FL_MLA) { /* a latent and rope channels; DS: tiles of 128 */
    if (rot == w || w > 4096 || st->fmt == FL_Q8_0) return 0;
    if (st->fmt == FL_FP8_DS && (w - rot) % 128) return 0;
  } else if (st->fmt == FL_FP8_DS) {
    return 0;
  }
  const int rotates = st->kind != FL_COPY && st->kind != FL_QUANT;
  if (rotates && (st->style == PE_ROPE_NEOX ? half % 16 : rot % 16)) return 0;
  if (st->kind == FL_SHIFT || st->fmt == FL_Q8_0) { /* whole 32-value blocks of outputs */
    if (w % 128 || w > 4096) return 0; /* groups of four blocks (floor_vec.h) */
    if (rotates && (rot != w || (st->style == PE_ROPE_NEOX ? half % 32 : rot % 32)))
      return 0;
  }
  if (st->fmt == FL_FP8 && w > 4096) return 0;
  if (st->norm_token && (st->kind != FL_NORM_ROT || st->heads < 1 || st->heads > 256 ||
                         (int64_t)st->heads * w > 32768))
    return 0; /* a token's rows (floor_vec.h's FL_HEADS), its weights */
  if ((st->kind == FL_ROT || st->kind == FL_NORM_ROT || st->kind == FL_MLA) && !st->fmt &&
      st->dst != st->src)
    return 0;
  return 1;
}

int floor_bf16_rows(const floor_stage *st) {
  if (st->src != PE_BF16) return 0;
  switch (st->kind) {
  case FL_NORM_ROT: return 1;             /* normed back into bf16 rows */
  case FL_ROT: return st->fmt == FL_NONE; /* bf16 to bf16 (floor_supported: dst == src) */
  case FL_MLA: return st->fmt != FL_FP8;  /* bf16 rows, or fp8_ds's bf16 rope channels */
  default: return 0;                      /* copies and quantized outputs */
  }
}

floor_fn floor_select(const char **name, floor_fn *alt) {
  const char *isa = pe_isa_name();
  *name = isa;
  *alt = NULL;
#if defined(__x86_64__)
  __builtin_cpu_init();
  /* The library's "avx512bf16" path rounds bf16 with vcvtne2ps2bf16, its
   * "avx512" path (CPUs without AVX512-BF16, or PE_ISA=avx512 on one with
   * it) in integer operations: each has the floor of its own instructions. */
#if defined(PB_FLOOR_AVX512BF16)
  if (!strcmp(isa, "avx512bf16") && __builtin_cpu_supports("avx512bf16")) {
    *name = "avx512-bf16";
#if defined(PB_FLOOR_AVX512BF16_EO)
    *alt = pb_floor_avx512bf16_eo;
#endif
    return pb_floor_avx512bf16;
  }
#endif
#if defined(PB_FLOOR_AVX512)
  if (!strcmp(isa, "avx512") && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return pb_floor_avx512;
#endif
#if defined(PB_FLOOR_AVX2)
  if (!strcmp(isa, "avx2") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      has_f16c())
    return pb_floor_avx2;
#endif
#endif
  if (!strcmp(isa, "scalar")) return pb_floor_scalar;
  return NULL;
}

int floor_kernels(floor_fn *fns, const char **names, int max) {
  int n = 0;
#define ADD(fn, name)                                                                              \
  do {                                                                                             \
    if (n < max) fns[n] = fn, names[n++] = name;                                                   \
  } while (0)
  ADD(pb_floor_scalar, "scalar");
#if defined(__x86_64__)
  __builtin_cpu_init();
#if defined(PB_FLOOR_AVX2)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c())
    ADD(pb_floor_avx2, "avx2");
#endif
#if defined(PB_FLOOR_AVX512)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    ADD(pb_floor_avx512, "avx512");
#endif
#if defined(PB_FLOOR_AVX512BF16)
  if (__builtin_cpu_supports("avx512bf16")) ADD(pb_floor_avx512bf16, "avx512-bf16");
#endif
#if defined(PB_FLOOR_AVX512BF16_EO)
  if (__builtin_cpu_supports("avx512bf16")) ADD(pb_floor_avx512bf16_eo, "avx512-bf16-eo");
#endif
#endif
#undef ADD
  return n;
}

static uint64_t floor_rng = 0x9e3779b97f4a7c15ull;
static float floor_rand(void) { /* in [-1, 1), its own sequence: the suites' data stay theirs */
  floor_rng ^= floor_rng << 13;
  floor_rng ^= floor_rng >> 7;
  floor_rng ^= floor_rng << 17;
  return (float)((double)(floor_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* x in [-1, 1) as dtype dt at element e of p (f16: exact for these values,
 * which are multiples of 2^-24 rounded down to 11 significant bits). */
static void put(int dt, char *p, int64_t e, float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if (dt == PE_F32) {
    memcpy(p + 4 * e, &x, 4);
  } else if (dt == PE_BF16) {
    uint16_t h = (uint16_t)(u >> 16);
    memcpy(p + 2 * e, &h, 2);
  } else { /* sign, and |x| >= 2^-14 or 0, truncated to an f16 */
    uint32_t a = u & 0x7fffffffu;
    uint16_t h = (uint16_t)(u >> 16 & 0x8000u);
    if (a >= 0x38800000u) h |= (uint16_t)((a - 0x38000000u) >> 13);
    memcpy(p + 2 * e, &h, 2);
  }
}

int floor_alloc(const floor_stage *st, floor_data *d, int64_t rows) {
  memset(d, 0, sizeof *d);
  const int w = st->width;
  const int64_t sb = st->kind == FL_SHIFT ? floor_row_bytes(0, FL_Q8_0, w)
                                          : floor_row_bytes(st->src, FL_NONE, w);
  const int64_t db = floor_out_bytes(st);
  d->src_stride = (sb + 63) & ~(int64_t)63;
  d->dst_stride = (db + 63) & ~(int64_t)63;
  /* A token's heads each their own row where they fit in 8 KiB (a quarter
   * of a 32 KiB L1, which an SMT sibling may share; a head rotated in place
   * is then not read back right after its store), at least 8 rows where
   * those fit. */
  const int64_t per_row = sb + (st->inplace ? 0 : db);
  int64_t want = st->heads > 8 ? st->heads : 8, fit = per_row > 0 ? 8192 / per_row : want;
  if (want > 64) want = 64;
  d->n_rows = (int)(fit < 1 ? 1 : fit < want ? fit : want);
  if (rows > 0) {
    if (rows > INT32_MAX) return -1;
    d->n_rows = (int)rows;
  }
  /* the weights: one row of them, or each head's under a per-token norm */
  const int64_t nw = st->norm_token && st->heads > 1 ? (int64_t)st->heads * w : w;
  size_t bytes = (size_t)(d->n_rows * (d->src_stride + d->dst_stride)) +
                 (size_t)(5 * w + 3 * nw) * 4 + 128;
  char *mem = NULL;
  if (posix_memalign((void **)&mem, 64, bytes)) return -1;
  d->bytes = bytes;
  memset(mem, 0, bytes);
  d->src = mem;
  d->dst = mem + d->n_rows * d->src_stride;
  /* cs, cs_eo for 8 lanes and for 16, the scratch rows, then the weights
   * and w_eo for 8 lanes and for 16 */
  float *cs = (float *)(void *)(d->dst + d->n_rows * d->dst_stride), *wt = cs + 5 * w;
  d->cs = cs;
  d->w = wt;
  d->scratch = cs + 3 * w;
  for (int k = 0; k < 2; k++) {
    d->cs_eo[k] = cs + (1 + k) * w;
    d->w_eo[k] = wt + (1 + k) * nw;
  }
  /* weights of magnitude 1 as applied, so that rows normed in place call
   * after call keep their scale; a unit offset multiplies by 1 + w (w 0 or
   * -2: with +-1 a third of the channels became exact zeros, whose bf16
   * rounding takes the +-0 test's slow path, and the floor of Gemma 3's
   * bf16 rows came out 2x the library's time) */
  const float w0 = st->kind == FL_NORM_ROT && st->norm_w == PB_QKN_OFFSET ? -1.0f : 0.0f;
  for (int64_t e = 0; e < nw; e++) wt[e] = w0 + (e % 3 ? 1.0f : -1.0f);
  for (int j = 0; j < st->rot / 2; j++) {
    float a = 0.3f * (float)j + 0.1f;
    cs[j] = cosf(a), cs[st->rot / 2 + j] = sinf(a);
  }
  /* even/odd order: element i of each block of 2 * vl to i / 2 (even i) or
   * vl + i / 2 (odd i) of its block; whole blocks only */
  for (int vl = 8; vl <= 16; vl *= 2) {
    float *cse = (float *)d->cs_eo[FL_EO_IX(vl)], *wte = (float *)d->w_eo[FL_EO_IX(vl)];
    const int half = st->rot / 2, b2 = 2 * vl;
    for (int j = 0; j < half - half % b2; j++) {
      const int blk = j - j % b2, at = blk + (j % 2 ? vl : 0) + (j % b2) / 2;
      cse[at] = cs[j], cse[half + at] = cs[half + j];
    }
    for (int64_t r = 0; r < nw; r += w) /* each head's weights: whole blocks of its row */
      for (int e = 0; e < w - w % b2; e++) {
        const int blk = e - e % b2;
        wte[r + blk + (e % 2 ? vl : 0) + (e % b2) / 2] = wt[r + e];
      }
  }
  for (int r = 0; r < d->n_rows; r++) {
    char *row = d->src + r * d->src_stride;
    if (st->kind == FL_SHIFT) { /* q8_0 blocks: d = f16 0.01, qs in [-100, 100] */
      for (int b = 0; b < w / 32; b++) {
        uint16_t d16 = 0x211f;
        memcpy(row + 34 * b, &d16, 2);
        for (int i = 0; i < 32; i++) row[34 * b + 2 + i] = (char)(int)(100.0f * floor_rand());
      }
    } else {
      for (int e = 0; e < w; e++) put(st->src, row, e, floor_rand());
    }
  }
  d->scale = st->scale > 0 ? st->scale : 1.0f;
  d->eps = 1e-6f;
  return 0;
}

void floor_free(floor_data *d) { free(d->src); }
