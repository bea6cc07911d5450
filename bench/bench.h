/* bench.h - pieces of pe-bench that live in their own translation units
 * because they are compiled with different flags:
 *   bound.c     the hardware bound: an in-place streaming read-modify-write
 *               (as one stream, and as PB_STREAMS taking turns),
 *               compiled -O3 -march=native (a measuring instrument may use
 *               the best the machine has; the library itself never does);
 *   textbook.c  the baseline a reader would write: a plain C RoPE loop over a
 *               precomputed float cos/sin table, compiled with the project's
 *               flags (baseline ISA, -O3): pb_textbook_*;
 *   textbook_native.c  the same source compiled -O3 -march=native
 *               -ffp-contract=fast: pb_textbook_native_* (and the qknorm
 *               suite's one-pass loop, pb_textbook_native_qknorm_store). */
#ifndef PE_BENCH_H
#define PE_BENCH_H

#include <stdint.h>

/* Rows of bytes in memory: up to 3 outer dimensions (outermost first, strides
 * in bytes) of rows of row_bytes contiguous bytes each. */
typedef struct pb_rows {
  char *base;
  char *dst; /* NULL: in place; else each float's result goes to the same
              * offset from dst (a cache row written from rows read) */
  int nd;
  int64_t n[3];
  int64_t stride[3];
  int64_t row_bytes;
  /* --fresh-cache: dst is dst_sets buffers dst_span bytes apart, each walk
   * writing the next in turn (measure.c; 0 or 1: one) */
  int64_t dst_sets, dst_span;
} pb_rows;

/* Normalise: drop size-1 dimensions, order by stride (outermost first),
 * merge dimensions that are contiguous with their rows. */
void pb_rows_normalise(pb_rows *r);
int64_t pb_rows_count(const pb_rows *r);

/* x = x * a + b over rows [begin, end) of r, as floats (row_bytes / 4 each);
 * with r->dst, the results into dst's rows. */
void pb_bound_rmw_rows(const pb_rows *r, int64_t begin, int64_t end, float a, float b);

/* Part `index` of `n` of the rows of r (contiguous pieces), as above. */
void pb_bound_rmw_part(const pb_rows *r, int index, int n, float a, float b);

/* The same part in PB_STREAMS streams: its rows (one contiguous run: its
 * bytes) cut into that many runs, walked together a row (PB_STREAM_PIECE
 * bytes) of each in turn. Memory may serve several streams faster than
 * one: the bound is the faster of the two walks. */
#define PB_STREAMS 4
#define PB_STREAM_PIECE 512
void pb_bound_rmw_streams(const pb_rows *r, int index, int n, float a, float b);

/* The textbook loop: NeoX RoPE on x[B,H,T,D] (strides in elements, unit
 * inner stride, either layout), pairs (i, i + half) for i < half, angle row
 * pos[b*T+t] (or t when pos is NULL) of cos_t/sin_t ([max_pos][half] each);
 * f16/bf16 converted to float and back (round to nearest even). Declared for
 * both builds of textbook.c: PREFIX pb_textbook_ (-O3) and
 * pb_textbook_native_ (-O3 -march=native). */
#define PB_TEXTBOOK_DECLARE(PREFIX)                                                             \
  void PREFIX##rope_neox_f32(float *x, const int64_t shape[4], const int64_t stride[4],        \
                             int32_t half, const int64_t *pos, const float *cos_t,               \
                             const float *sin_t);                                                \
  void PREFIX##rope_neox_f16(uint16_t *x, const int64_t shape[4], const int64_t stride[4],     \
                             int32_t half, const int64_t *pos, const float *cos_t,               \
                             const float *sin_t);                                                \
  void PREFIX##rope_neox_bf16(uint16_t *x, const int64_t shape[4], const int64_t stride[4],    \
                              int32_t half, const int64_t *pos, const float *cos_t,              \
                              const float *sin_t);

/* The QK-norm step of the qknorm suite as an engine's own C code writes it,
 * one pass over each token (textbook.c): a packed QKV buffer [B, T, (hq +
 * 2*hkv) * hd] (q's heads, k's, v's; f32, f16 or bf16), each q head row normed
 * (x * r * w, r = 1/sqrt(mean of squares + eps); PB_QKN_OFFSET x * r * (1 +
 * w), PB_QKN_L2 x * r) and rotated in place (NeoX pairs, or GPT-J's with
 * gptj), each k head row the same into its slot of the k cache, each v row
 * copied into the v cache; caches of the same dtype, paged NHD
 * ([blocks][block tokens][hkv][hd]): slot s's head rows at s * hkv * hd.
 * per_token (OLMo 2): one r for a token's q rows and one for its k rows,
 * from the squares of all of them, and a weight per channel of the token. */
/* the weight's use of a normed row: here and in the floor's stages
 * (floor.h's norm_w) */
enum { PB_QKN_RMS = 0, PB_QKN_OFFSET = 1, PB_QKN_L2 = 2 };
typedef struct pb_qknorm {
  void *qkv;
  int64_t batch, tokens, hq, hkv, hd; /* hd a multiple of 16, at most 256 */
  int dtype;                          /* pe_dtype: 0 f32, 1 f16, 2 bf16 */
  void *k_cache, *v_cache;
  const int64_t *slots, *pos; /* [B*T] */
  const float *q_weight, *k_weight, *cos_t, *sin_t; /* weights [hd] ([heads*hd] per token);
                                                     * tables [pos][hd/2] */
  float eps;
  int per_token;
  int norm; /* PB_QKN_*: the weight's use */
  int gptj; /* pairs (2i, 2i + 1), else (i, i + hd/2) */
} pb_qknorm;
#define PB_TEXTBOOK_DECLARE_QKNORM(PREFIX) void PREFIX##qknorm_store(const pb_qknorm *a);

PB_TEXTBOOK_DECLARE(pb_textbook_)
PB_TEXTBOOK_DECLARE(pb_textbook_native_)
PB_TEXTBOOK_DECLARE_QKNORM(pb_textbook_)
PB_TEXTBOOK_DECLARE_QKNORM(pb_textbook_native_)

#endif
