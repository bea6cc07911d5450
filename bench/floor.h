/* floor.h - the compute floor of a row (docs/compute-floor.md): the time of
 * the shortest instruction sequence its arithmetic needs on the ISA the
 * library runs, measured on L1-resident data, beside the stream bound (the
 * time of its memory traffic). A row is a list of stages; each stage is
 * `rows` rows of one kind of work:
 *   FL_ROT       rotate the first `rot` channels of each row (x' = x*c - y*s,
 *                y' = y*c + x*s: one multiply and one FMA per output), read
 *                in src's dtype, written in dst's dtype (in place when src ==
 *                dst) or quantized (fmt);
 *   FL_NORM_ROT  the same after a float32 RMSNorm of the whole row (a sum of
 *                squares, a scale, a weight: (x * r) * w; with norm_w
 *                PB_QKN_OFFSET Gemma 3's fma(x * r, w, x * r), PB_QKN_L2
 *                Llama 4's x * r), the channels past `rot` normed too;
 *                with norm_token, one RMSNorm over a token's `heads` rows
 *                taken as one (OLMo 2), each head's row with weights of
 *                its own;
 *   FL_COPY      copy `width` channels (a V row or the channels past rot
 *                into a cache of the same dtype);
 *   FL_QUANT     quantize `width` channels of src (fmt);
 *   FL_SHIFT     a q8_0 row dequantized, rotated and quantized again in
 *                place (the context shift of a quantized key cache);
 *   FL_MLA       an MLA kv row (DeepSeek-V3's kv_a row: width - rot latent
 *                channels, then rot rope channels) into its cache row: the
 *                latent RMSNorm'd in float32 (sum of squares, scale,
 *                weight) and converted, the rope channels rotated; or every
 *                channel as fp8 codes (FL_FP8), or vLLM's fp8_ds_mla row
 *                (FL_FP8_DS: the latent as e4m3 codes in tiles of 128
 *                channels with a float32 scale each, the rope channels as
 *                bf16).
 * The kernels are written per ISA (floor_avx2.c, floor_avx512.c - built a
 * second time with AVX512-BF16 as floor_avx512bf16.c and a third, its bf16
 * rows in even/odd order, as floor_avx512bf16_eo.c - and floor_scalar.c)
 * and chosen at run time by the library's path and the CPU's features. */
#ifndef PE_BENCH_FLOOR_H
#define PE_BENCH_FLOOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bench.h"

enum { FL_ROT, FL_NORM_ROT, FL_COPY, FL_QUANT, FL_SHIFT, FL_MLA };
/* quantized outputs (fmt); FL_FP8_DS: FL_MLA only */
enum { FL_NONE = 0, FL_FP8 = 1, FL_Q8_0 = 2, FL_FP8_DS = 3 };
/* the kernels' norm argument (a constant in each instantiation): none, or
 * the row normed with the stage's weight use (norm_w, bench.h's PB_QKN_*) */
enum {
  FN_NONE = 0,
  FN_MUL = 1 + PB_QKN_RMS,
  FN_OFFSET = 1 + PB_QKN_OFFSET,
  FN_UNIT = 1 + PB_QKN_L2
};

#define FL_STAGES 4

typedef struct floor_stage {
  int kind;
  int src, dst;   /* pe_dtype of the rows read and written (dst unused when fmt) */
  int fmt;        /* FL_NONE, or the quantized format written (FL_ROT, FL_QUANT) */
  int fp8_mul;    /* FL_FP8: the scale's reciprocal is exact: a multiply, not a divide */
  int style;      /* PE_ROPE_NEOX or PE_ROPE_GPTJ */
  int inplace;    /* FL_ROT, FL_NORM_ROT: the row is written where it was read */
  int width, rot; /* channels of a row; rotated channels (even, <= width) */
  float scale;    /* FL_FP8: the quantizer's scale */
  int heads;      /* consecutive rows sharing one cos/sin row (the heads of a token) */
  int norm_token; /* FL_NORM_ROT: one norm over the token's heads rows, heads * width weights */
  int norm_w;     /* FL_NORM_ROT: the weight's use, bench.h's PB_QKN_* (0: x * r * w) */
  int64_t rows;   /* rows of one call */
} floor_stage;

/* cs_eo[FL_EO_IX(VL)] and w_eo[...]: the even/odd layouts for kernels of
 * VL float lanes that take bf16 rows in even/odd order (FL_EO: floor_avx2.c,
 * 8 lanes; floor_avx512.c, 16). */
#define FL_EO_IX(vl) ((vl) == 16)

/* The L1-resident rows a stage's kernel cycles through (one set per thread). */
typedef struct floor_data {
  char *src, *dst;          /* n_rows rows each, src_stride / dst_stride bytes apart */
  int64_t src_stride, dst_stride;
  int n_rows;
  const float *cs;          /* the cos/sin row: rot/2 cos, then rot/2 sin */
  const float *w;           /* width weights (FL_NORM_ROT; heads * width under norm_token) */
  const float *cs_eo[2];    /* cs in even/odd order for 8 and 16 lanes (FL_EO_IX): per
                             * block of 2*VL pairs from pair 0, the cos of its even pairs
                             * then of its odd ones, then the sin the same way from
                             * rot/2; whole blocks */
  const float *w_eo[2];     /* w in that order (blocks of 2*VL channels; each head's row of
                             * weights in turn under norm_token) */
  float scale;              /* FL_FP8: the scale (dst = x / scale) */
  float eps;                /* FL_NORM_ROT */
  float *scratch;           /* two rows of width floats (Q8_0 outputs: rotated, then quantized) */
  size_t bytes;             /* of the one allocation src points to (all of the above) */
} floor_data;

typedef void (*floor_fn)(const floor_stage *st, floor_data *d, int64_t rows);

/* Element e of a row of pe_dtype dt (0 f32, 1 f16, 2 bf16) widened exactly
 * to float32 (the scalar kernels' load, and the check's). */
static inline float floor_widen(int dt, const void *row, int64_t e) {
  float f;
  uint32_t u;
  if (dt == 0) {
    memcpy(&f, (const char *)row + 4 * e, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, (const char *)row + 2 * e, 2);
  if (dt == 2) {
    u = (uint32_t)h << 16;
  } else {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, ex = (h >> 10) & 0x1f, m = h & 0x3ffu;
    if (ex == 0) return (sign ? -1.0f : 1.0f) * (float)m * 0x1p-24f;
    u = sign | (ex == 31 ? 0x7f800000u : (ex + 112) << 23) | m << 13;
  }
  memcpy(&f, &u, 4);
  return f;
}

/* The kernels of each ISA; a NULL entry where the compiler cannot build it. */
void pb_floor_scalar(const floor_stage *st, floor_data *d, int64_t rows);
void pb_floor_avx2(const floor_stage *st, floor_data *d, int64_t rows);
void pb_floor_avx512(const floor_stage *st, floor_data *d, int64_t rows);
void pb_floor_avx512bf16(const floor_stage *st, floor_data *d, int64_t rows);
void pb_floor_avx512bf16_eo(const floor_stage *st, floor_data *d, int64_t rows);

/* Whether a stage has a floor kernel (e.g. q8_0 needs whole 32-channel
 * blocks of rotated outputs). */
int floor_supported(const floor_stage *st);

/* The kernels for the library's path on this CPU, and their name ("avx2",
 * "avx512", "avx512-bf16", "scalar"), or NULL: no floor (NEON, or an ISA
 * this build has no kernels for). *alt: another sequence of the same
 * instructions for the same stages, whose bf16 rows go in even/odd order
 * ("avx512-bf16" only: which order is faster depends on the CPU's vpermw),
 * or NULL; the floor is the faster of the two. */
floor_fn floor_select(const char **name, floor_fn *alt);

/* Whether a stage writes bf16 rows from bf16 rows (floor_entry.h's
 * dispatch), the only stages whose sequence differs between floor_select's
 * kernel and its *alt. */
int floor_bf16_rows(const floor_stage *st);

/* Every floor kernel this build has that this CPU runs (the scalar one
 * first), at most max: their count. */
int floor_kernels(floor_fn *fns, const char **names, int max);

/* Bytes of a row of `width` channels in dtype dt, or quantized (fmt). */
int64_t floor_row_bytes(int dt, int fmt, int width);
/* Bytes of a row a stage writes (in place: its src rows). */
int64_t floor_out_bytes(const floor_stage *st);

/* A stage's L1 rows for one thread (values in [-1, 1), a cos/sin row,
 * weights); 0, or -1 when out of memory. floor_free releases them. rows > 0:
 * that many rows instead (pe-bench --floor-data call: a thread's share of
 * the call's rows, wherever in the caches they then live). */
int floor_alloc(const floor_stage *st, floor_data *d, int64_t rows);
void floor_free(floor_data *d);

#endif
