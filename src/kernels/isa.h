/* isa.h - every kernel of one instruction set, in one struct.
 *
 * src/kernels/<isa>.c (scalar, avx2, avx512, neon) each define one
 * `const pe_isa pe__isa_<isa>`; dispatch.c selects one of them for the
 * process (pe__isa()). The portable code (the RoPE engine, the encodings)
 * calls kernels only through that struct.
 *
 * Contract every ISA follows: results bit-identical to the scalar struct for
 * every tensor input (NaN payloads and signs, Inf, subnormals included),
 * provided the operands that are not tensor elements (cos/sin rows,
 * add_row's v) are not NaN. The engine's rows never are; and when two
 * operands of one add or multiply are NaN, which one comes out follows their
 * order in the instruction, which the compiler may commute (x*c as c*x), so
 * no C code can promise it. The
 * arithmetic each kernel must perform is spelled out below; the scalar file
 * is its readable reference.
 *
 * What is not a kernel: anything that depends on positions, shapes or
 * validation. Kernels never fail, never allocate and never read or write an
 * element outside the ranges described here. */
#ifndef PE_KERNELS_ISA_H
#define PE_KERNELS_ISA_H

#include <math.h>
#include <stdint.h>

#include "base/internal.h"

/* PE_OPAQUE(v): an empty asm that claims to change v. Every ISA computes
 * x' = fmaf(x, c, -(y*s)) with the negation applied to the product as
 * written; clang (LLVM treats a NaN's sign as unspecified) would otherwise
 * fold the negation into the FMA (vfmsub/fmls), which propagates y*s's NaN
 * without the sign flip, so the paths would disagree on the sign bit of a
 * NaN. gcc does not fold it; the barrier costs nothing there. */
#if defined(__x86_64__) || defined(__i386__)
#define PE_OPAQUE(v) __asm__("" : "+v"(v))
#elif defined(__aarch64__)
#define PE_OPAQUE(v) __asm__("" : "+w"(v))
#else
#define PE_OPAQUE(v) ((void)0)
#endif

/* ------------------------------------------------------------------------ */
/* RoPE                                                                     */
/* ------------------------------------------------------------------------ */

/* Rows of cos/sin for positions pos0, pos0+1, ..., pos0+n-1 and the
 * frequencies freq[0..n_freq) (plus freq_lo[0..n_freq) when freq_lo is not
 * NULL: the frequency is the double-double freq[i] + freq_lo[i], e.g. the
 * exact difference of two frequencies). Row r is out[r*2*n_freq .. +n_freq)
 * = cos, out[r*2*n_freq + n_freq .. +n_freq) = sin of the angle
 * p*(freq[i] + freq_lo[i]), p = (double)(pos0 + r) (exact: |p| < 2^53),
 * times scale (float multiply, skipped when scale == 1). Algorithm,
 * identical on every ISA (constants in sincos_consts.h):
 *   th = p * f;  tl = fma(p, f, -th)       th + tl == p*f exactly
 *   (freq_lo:)   tl = fma(p, flo, tl)
 *   k = nearbyint(th * PE_INV_2PI)
 *   r = fma(-k, PE_2PI_HI, th)             exact (sincos_consts.h)
 *   r = r + tl
 *   r = fma(-k, PE_2PI_LO, r)
 *   if !(|r| <= PE_REDUCED_MAX) r = 0
 *   rf = (float)r; dr = (float)(r - rf)
 *   (s, c) = SLEEF sincosf u10 (FMA variant) of rf
 *   c' = fmaf(-s, dr, c); s' = fmaf(c, dr, s) (first-order fix of rf's rounding)
 * r is within ~2e-15 of the exact p*f mod 2pi for every |p*f| < 2^52 * 2pi
 * (all positions < 2^53 with frequencies up to 3), so
 * cos/sin are within SLEEF's float accuracy of the exact values for the
 * double frequency whatever the position. Every value depends only on (p,
 * freq[i], freq_lo[i], scale): a row computed in chunks of frequencies
 * equals the row computed whole. pos0 may be negative (shift by a negative
 * delta). n_freq >= 1. */
typedef void (*pe_rope_sincos_fn)(int64_t pos0, int64_t n, const double *freq,
                                  const double *freq_lo, int32_t n_freq, float scale, float *out);

/* A block of rows that one kernel call rotates: n_tokens tokens x n_heads
 * heads, and the first n_pairs pairs of each row (the engine passes a row
 * pointer already advanced to the first pair of a frequency chunk).
 *   Pair j of a row r (element pointer) is
 *     NEOX: x = r[j], y = r[pair_dist + j]   (pair_dist = rotary_dim/2)
 *     GPTJ: x = r[2j], y = r[2j + 1]         (pair_dist unused)
 *   Its cos is cos[t][j] and its sin sin[t][j] for token t of the block.
 * Rotation, the definition every ISA follows (no other form; the inverse
 * rotation arrives as rows whose sin is negated, never as a flag):
 *   ys = y*s; nys = -ys;  x' = fmaf(x, c, nys);  y' = fmaf(y, c, x*s)
 * (PE_OPAQUE on ys and nys in every ISA, see above.) Half types are widened
 * exactly to float32 (f16: a signaling NaN comes out quiet, as F16C and
 * FCVTL do) and rounded once on store (convert.h). Elements outside the
 * pairs are neither read nor written. */
typedef struct pe_rope_block {
  const float *const *cos; /* [n_tokens] */
  const float *const *sin; /* [n_tokens] */
  int64_t n_tokens, n_heads;
  int32_t n_pairs;         /* >= 1 */
  int32_t pair_dist;       /* NEOX: offset of y from x, in elements */
  int32_t style;           /* PE_ROPE_NEOX or PE_ROPE_GPTJ */
  /* The QK-norm stage (norm PE_NORM_OFF, the zero value: none; the fields
   * below unused). Otherwise each element is normed as PE_NORM_* below says,
   * with r = scale[t][h * scale_head_stride] and the weight of element e of
   * the row (e counted as in the row, from the row pointer the kernel gets)
   * at weight[h * weight_head_stride + e], and the normed pair rotated as
   * above. rope_rows and rope_store_rows hand a normed block to kernels of
   * their own (noinline, one per dtype pair: the plain rows' code is not
   * touched by the norm). */
  int32_t norm;            /* PE_NORM_* */
  const float *const *scale; /* [n_tokens] */
  int64_t scale_head_stride; /* 1 per head, 0 per token (one scale per token) */
  const float *weight;       /* PE_NORM_W, PE_NORM_W1: float32; else unused */
  int64_t weight_head_stride; /* 0 (one weight row for every head) or head_dim */
  /* Normed blocks: bytes from each row the kernel reads to a row it may
   * prefetch meanwhile (the next block's row of the same head, which the
   * norm stage reads next); 0: none. A hint, never dereferenced. */
  int64_t prefetch;
  /* Plain rows in place walked heads inner (each token's heads adjacent):
   * streams > 1 cuts the block's tokens into that many runs
   * of consecutive tokens and walks them together, a row of each run's
   * token in turn, so that a call too large for the caches reads and
   * writes memory as several streams, which go faster than one
   * (isa_template.h's rows_streams). 0 or 1: token by token.
   * The order only: the bytes written are the same. */
  int32_t streams;
  /* Plain whole rows in place walked token by token (heads inner): 1 when
   * the call's rows are more than this core's L2 holds, so they come from
   * L3 or memory, and each row prefetches its counterpart a few KiB on
   * (isa_template.h's stream_ahead); 0: none (rows in L2, where the
   * prefetches cost more than they save). A hint: the bytes are the same. */
  int32_t stream_pf;
} pe_rope_block;

/* The QK-norm: modes (equal to the public pe_qk_norm_kind values) and the
 * element operation, the definition every ISA follows, in float32, one
 * rounding per operation: x is the element widened as the rotation loads
 * it, r the row's scale (pe__norm_scale), w its float32 weight, xr = x * r:
 *   PE_NORM_W:    n = xr * w                   (Qwen3, OLMo 2)
 *   PE_NORM_W1:   n = fmaf(xr, w, xr)          (Gemma 3's xr * (1 + w))
 *   PE_NORM_UNIT: n = xr                       (Llama 4 L2Norm)
 * (transformers' float32 modules round 1 + w too). A pair (n_x, n_y)
 * is then rotated exactly as a plain pair (x, y) above,
 *   ys = n_y*s; nys = -ys;  x' = fmaf(n_x, c, nys);  y' = fmaf(n_y, c, n_x*s),
 * and x', y' stored as every rotation stores (float32, or rounded once to
 * bf16/f16, convert.h). Past rotary_dim n itself is stored so. */
#define PE_NORM_OFF 0
#define PE_NORM_W 1
#define PE_NORM_W1 2
#define PE_NORM_UNIT 3

/* Sums of squares of `rows` rows of n elements (row r at src + r*row_stride
 * elements of the kernel's dtype, widened as the rotation loads them), in
 * float32 and in the fixed order every ISA reproduces. A row's sum: 16 float
 * lanes start at +0; element e of the row does
 *   lane[e % 16] = fmaf(x_e, x_e, lane[e % 16])    in increasing e
 * (the square exact inside the fma: one rounding per element); then the
 * lanes are added as a tree:
 *   lane[i] += lane[i + 8] (i < 8), then += lane[i + 4] (i < 4), +2, +1
 * (float adds, pe__tree16f) and lane[0] is the sum, a NaN sum replaced by
 * the quiet NaN of <math.h>'s NAN (its payload would depend on the order the
 * compiler gives the operands; any NaN makes the scale 0). A vector ISA
 * holds the lanes as 16/VL accumulators, lane i in accumulator i / VL, or in
 * any order of its own that it adds back as this tree. combine 0: each row's
 * sum to out[r]. combine 1 (a per-token norm: every head of the token): the
 * rows' sums added pairwise, as a binary counter adds them (pe__sum_stack:
 * aligned blocks of 2^k rows as (first half) + (second half), then the
 * blocks of rows' binary digits, largest first, added from the last:
 * B_0 + (B_1 + (... + B_last))), the total to out[0]: 32 rows of 128 are as
 * accurate as PyTorch's cascaded sum of the 4096 squares, where 16 lanes of
 * 256 were not. Any row or slice of one works (n >= 1). */
typedef void (*pe_norm_sumsq_fn)(const void *src, int64_t n, int64_t rows, int64_t row_stride,
                                 int combine, float *out);

/* dst[e] = the element n of PE_NORM_* (mode, x_e, r, w[e]) in float32,
 * stored in dst's dtype (rounded once for bf16/f16), for e in [0, n) (mode
 * not PE_NORM_OFF): src of the first dtype index, dst of the second; dst may
 * be src (in place), otherwise they do not overlap. The channels past
 * rotary_dim of a normed row (or any slice of a row). */
typedef void (*pe_norm_row_fn)(const void *src, void *dst, int64_t n, float r, const float *w,
                               int32_t mode);

/* out[i] = pe__norm_scale(sums[i], n, eps) for i in [0, count): the scales
 * of rows of n elements from their sums of squares (out may be sums). */
typedef void (*pe_norm_scale_fn)(const float *sums, int64_t count, int64_t n, float eps,
                                 float *out);

/* In place: the row of token t, head h starts at (element) data +
 * t*token_stride + h*head_stride (strides in elements of the kernel's dtype,
 * either sign; a stride may be 0 when its count is 1). The kernel chooses the
 * walk order (rows never alias: the entry points check it). */
typedef void (*pe_rope_rows_fn)(const pe_rope_block *b, void *data, int64_t head_stride,
                                int64_t token_stride);

/* Rotate from src into dst (the fused KV-cache write). Token t's head-0 row
 * is src[t] (source dtype: first index of the table) and dst[t] (destination
 * dtype: second index); head h adds h*src_head_stride / h*dst_head_stride
 * elements of the respective dtype. Only the pairs are written; src is only
 * read; src and dst never overlap. Same arithmetic as pe_rope_rows_fn, the
 * result rounded once to the destination dtype. */
typedef void (*pe_rope_store_rows_fn)(const pe_rope_block *b, const void *const *src,
                                      int64_t src_head_stride, void *const *dst,
                                      int64_t dst_head_stride);

/* dst[i] = src[i] for i in [0, n), converting: same dtype copies the bits
 * (memcpy semantics, signaling NaNs kept); otherwise widen exactly to float32
 * (convert.h, no quieting) and round once to the destination (convert.h).
 * Used for channels a rotation does not touch when they go to another buffer
 * (partial rotary in the cache write; V into the cache). */
typedef void (*pe_convert_fn)(const void *src, void *dst, int64_t n);

/* ------------------------------------------------------------------------ */
/* The other encodings (ALiBi, T5, sinusoidal, learned)                      */
/* ------------------------------------------------------------------------ */

/* row[j] = round(load(row[j]) + v[j]) for j in [0, n). row is of the
 * kernel's dtype (the table index), v is float32. The add is `x + v` with x
 * the tensor element as the first operand. Used by T5 (v = gathered bias),
 * sinusoidal (v = PE row) and learned (v = table row). */
typedef void (*pe_add_row_fn)(void *row, const float *v, int64_t n);

/* ALiBi on one row of scores, j in [0, n):
 *   d    = (float)|qpos - j|         (one rounding from the exact integer)
 *   bias = neg_slope * d             (float multiply; neg_slope = -slope)
 *   row[j] = round(load(row[j]) + bias)   (float add, then one rounding)
 * qpos in [0, 2^53), n <= 2^53. The causal mask (-inf for j > qpos) is not
 * the kernel's business: the caller passes n <= qpos + 1 and fills the rest. */
typedef void (*pe_alibi_row_fn)(void *row, int64_t n, int64_t qpos, float neg_slope);

/* row[j] = -inf for j in [0, n): the bits 0xff800000 (f32), 0xfc00 (f16),
 * 0xff80 (bf16), nothing else written. The causal mask that alibi.c and
 * t5.c fuse into their rows (keys past the query). */
typedef void (*pe_mask_row_fn)(void *row, int64_t n);

/* out[j] = (float)src[j] for j in [0, n): exact widening of a row of the
 * kernel's dtype (learned embeddings whose table dtype differs from x). */
typedef void (*pe_load_row_fn)(float *out, const void *src, int64_t n);

/* sin and cos of n double angles: SLEEF's double-precision sincos (u35, the
 * FMA variant, which gives the same bits on every ISA), each rounded once to
 * float32. The sinusoidal tables use it (DistilBERT computes them in
 * float64 and casts). */
typedef void (*pe_sincos_f64_fn)(const double *angle, int32_t n, float *sin_out,
                                 float *cos_out);

/* ------------------------------------------------------------------------ */
/* Quantized KV-cache rows (quant_common.h defines each element)            */
/* ------------------------------------------------------------------------ */

/* Formats, the first index of kv_quant / kv_dequant (the public PE_KV_*
 * value minus one): PE_KVQ_E4M3 0, PE_KVQ_E5M2 1, PE_KVQ_Q8_0 2
 * (quant_common.h).
 *
 * kv_quant[fmt][sd]: n elements of src (dtype sd, widened to float32) into
 * dst, which never overlaps src.
 *   FP8 (e4m3fn, e5m2): dst[i] = pe_fp8_from_f32(fmt, x_i / scale), one
 *     byte each: the float32 divide (correctly rounded), then the code
 *     rounded to nearest even, saturating to +-448 / +-57344 (Inf included),
 *     NaN -> sign | 0x7f (e4m3fn) or sign | 0x7e (e5m2). scale finite > 0.
 *   Q8_0: n % 32 == 0 (scale unused); block b (values x[32b .. 32b+32)) is
 *     34 bytes at dst + 34b: f16 d little-endian, then 32 int8 qs. ggml's
 *     quantize_row_q8_0_ref: amax = max |x| (float32), d = amax / 127.0f,
 *     id = d != 0 ? 1.0f/d : 0, d stored f16 RNE (pe_f32_to_f16), qs =
 *     roundf(x * id) (half away from zero; 0 where x * id is not finite).
 *     A block holding a NaN or an Inf: d = 0x7e00 (f16 NaN), every qs 0.
 * kv_dequant[fmt][dd]: the inverse: n elements into dst of dtype dd, each
 *   the float32 value (FP8: pe_fp8_to_f32(fmt, c) * scale; Q8_0: (float)qs *
 *   (float)d, ggml's dequantize_row_q8_0) rounded once to dd (convert.h). */
typedef void (*pe_kv_quant_fn)(const void *src, void *dst, int64_t n, float scale);
typedef void (*pe_kv_dequant_fn)(const void *src, void *dst, int64_t n, float scale);

/* amax(x, n): the largest |x_i| of n float32 values, NaN ignored -
 * kv_format.h's pe__amax, the maximum of the magnitudes' bits (an exact
 * result: every ISA returns the same float). The FP8 scales of a tile or a
 * row (DeepSeek-V3.2's fp8_ds_mla tiles, V4's UE8M0 tiles,
 * PE_KV_FP8_E4M3_ROWSCALE rows) start from it. */
typedef float (*pe_amax_fn)(const float *x, int64_t n);

/* stream_copy(dst, src, bytes): bytes copied, the 64-byte lines of dst that
 * the range covers whole written with streaming (non-temporal) stores - not
 * read first, not kept in the caches - and its partial lines at either end
 * with ordinary ones; on targets without such stores (NEON here), all
 * ordinary. Streaming stores are weakly ordered: the caller fences
 * (pe__stream_fence, engine.h) before another thread may read the bytes.
 * PE_ROPE_STREAM_CACHE's cache rows. */
typedef void (*pe_stream_copy_fn)(void *dst, const void *src, int64_t bytes);

/* ------------------------------------------------------------------------ */
/* The struct                                                               */
/* ------------------------------------------------------------------------ */

typedef struct pe_isa {
  const char *name;                         /* "scalar", "avx2", "avx512", "neon" */
  pe_rope_sincos_fn rope_sincos;
  pe_rope_rows_fn rope_rows[3];             /* [pe_dtype] */
  pe_rope_store_rows_fn rope_store_rows[3][3]; /* [src pe_dtype][dst pe_dtype] */
  pe_convert_fn convert[3][3];              /* [src pe_dtype][dst pe_dtype] */
  pe_sincos_f64_fn sincos;
  pe_add_row_fn add_row[3];                 /* [pe_dtype of row] */
  pe_alibi_row_fn alibi_row[3];             /* [pe_dtype of row] */
  pe_mask_row_fn mask_row[3];               /* [pe_dtype of row] */
  pe_load_row_fn load_row[3];               /* [pe_dtype of src] */
  pe_norm_sumsq_fn norm_sumsq[3];           /* [pe_dtype of src] */
  pe_norm_row_fn norm_row[3][3];            /* [src pe_dtype][dst pe_dtype] */
  pe_norm_scale_fn norm_scale;
  pe_kv_quant_fn kv_quant[3][3];            /* [PE_KVQ_* format][src pe_dtype] */
  pe_kv_dequant_fn kv_dequant[3][3];        /* [PE_KVQ_* format][dst pe_dtype] */
  pe_amax_fn amax;
  pe_stream_copy_fn stream_copy;
} pe_isa;

/* The scale of a normed row from its sum of squares s (pe_norm_sumsq) over n
 * elements, the definition every ISA's norm_scale follows:
 *   r = (float)(1.0 / sqrt((double)s * (1.0 / (double)n) + (double)eps))
 * in float64, each operation rounded (the mean's multiply by the double
 * 1/n, the add, the square root, the divide), then rounded once to float32:
 * within half a float32 ulp (and ~2^-50 relative) of 1/sqrt(s/n + eps) for
 * the float32 sum s, where transformers' float32 rsqrt of the mean rounds
 * four times. r = 0 when it is NaN (a NaN element: the row's NaNs stay NaN
 * and its other elements become 0, as an Inf row does in HF). A sum that
 * overflowed float32 (an element beyond ~1.8e19, or a row of them) gives
 * r = 0, as in HF's float32 modules. Per row, not per element; a vector
 * ISA may reach the same float32 another way (AVX-512: vd_rsqrt_f32eq, a
 * Newton estimate kept only where it cannot round differently). */
static inline float pe__norm_scale(float s, int64_t n, float eps) {
  float r = (float)(1.0 / sqrt((double)s * (1.0 / (double)n) + (double)eps));
  return r != r ? 0.0f : r;
}

/* isa.h's tree of 16 float lanes (pe_norm_sumsq_fn), shared by every ISA. */
static inline float pe__tree16f(const float *a) {
  float s0 = a[0] + a[8], s1 = a[1] + a[9], s2 = a[2] + a[10], s3 = a[3] + a[11];
  float s4 = a[4] + a[12], s5 = a[5] + a[13], s6 = a[6] + a[14], s7 = a[7] + a[15];
  float t0 = s0 + s4, t1 = s1 + s5, t2 = s2 + s6, t3 = s3 + s7;
  float u0 = t0 + t2, u1 = t1 + t3, r = u0 + u1;
  return r != r ? (float)NAN : r; /* one NaN: which payload wins follows instruction order */
}

/* isa.h's pairwise combination of row sums (pe_norm_sumsq_fn, combine 1): a
 * binary counter over the rows, a partial sum per binary digit. n counts
 * the rows pushed; the partial sums held are its set bits, the lowest on
 * top. Set up with pe__sum_init (the sums need no zeroing: a 320-byte
 * initializer's `rep stos` and the per-sum levels it replaces were a
 * quarter of a per-token norm's sums, OLMo 2's shapes). */
typedef struct pe__sum_stack {
  float sum[64];
  uint64_t n;
  int top;
} pe__sum_stack;
static inline void pe__sum_init(pe__sum_stack *k) {
  k->n = 0;
  k->top = 0;
}
/* The sum of a block of 2^l rows, added pairwise within the block (as
 * pushing them one by one adds them), pushed where the rows pushed so far
 * are a multiple of 2^l. */
static inline void pe__sum_push_block(pe__sum_stack *k, float s, int l) {
  for (uint64_t n = k->n >> l; n & 1; n >>= 1) s = k->sum[--k->top] + s; /* the earlier first */
  k->sum[k->top++] = s;
  k->n += (uint64_t)1 << l;
}
static inline void pe__sum_push(pe__sum_stack *k, float s) { pe__sum_push_block(k, s, 0); }
static inline float pe__sum_total(const pe__sum_stack *k) {
  float t = k->sum[k->top - 1];
  for (int i = k->top - 2; i >= 0; i--) t = k->sum[i] + t;
  return t != t ? (float)NAN : t;
}

extern PE_HIDDEN const pe_isa pe__isa_scalar;
#if defined(PE_HAVE_AVX2)
extern PE_HIDDEN const pe_isa pe__isa_avx2;
#endif
#if defined(PE_HAVE_AVX512)
extern PE_HIDDEN const pe_isa pe__isa_avx512;
#endif
#if defined(PE_HAVE_AVX512BF16)
extern PE_HIDDEN const pe_isa pe__isa_avx512bf16;
#endif
#if defined(PE_HAVE_NEON)
extern PE_HIDDEN const pe_isa pe__isa_neon;
#endif

/* The selected struct: probed once (cpu.c), or named by PE_ISA /
 * pe_force_isa(). Never NULL. */
PE_HIDDEN const pe_isa *pe__isa(void);

/* The struct of the path called `name` ("scalar", "avx2", ...) if this build
 * has it and this CPU runs it; else NULL with pe_last_error() saying which
 * (unknown name, not compiled in, or the CPU features it lacks). Selects
 * nothing: for tests that compare paths struct by struct. */
PE_HIDDEN const pe_isa *pe__isa_lookup(const char *name);

#endif
