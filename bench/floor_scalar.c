/* floor_scalar.c - the floor kernels (floor.h) for the library's scalar
 * path: one element at a time, with the project's flags (fmaf is libm's
 * where the baseline ISA has no FMA, as for the library's scalar kernels),
 * the same stages as floor_vec.h (docs/compute-floor.md). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "floor.h"
#include "posenc.h"

#define FS static inline __attribute__((always_inline))

/* Element e of a row of dtype dt, widened exactly (floor.h). */
#define ld(dt, p, e) floor_widen(dt, p, e)

FS void store(int dt, char *p, int e, float f) {
  if (dt == PE_F32) {
    ((float *)(void *)p)[e] = f;
    return;
  }
  uint32_t u, a;
  memcpy(&u, &f, 4);
  a = u & 0x7fffffffu;
  uint16_t h;
  if (dt == PE_BF16) {
    h = a > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40)
                        : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  } else if (a > 0x7f800000u) {
    h = (uint16_t)((u >> 16 & 0x8000u) | 0x7e00u);
  } else if (a >= 0x477ff000u) {
    h = (uint16_t)((u >> 16 & 0x8000u) | 0x7c00u);
  } else if (a < 0x38800000u) { /* subnormal f16: a multiple of 2^-24 */
    float v;
    memcpy(&v, &a, 4);
    h = (uint16_t)((u >> 16 & 0x8000u) | (uint16_t)(int)rintf(v * 0x1p24f));
  } else {
    h = (uint16_t)((u >> 16 & 0x8000u) | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));
  }
  ((uint16_t *)(void *)p)[e] = h;
}

FS uint8_t fp8(float y) {
  uint32_t u, a, m;
  memcpy(&u, &y, 4);
  a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint8_t)((u >> 24 & 0x80u) | 0x7fu);
  if (a > 0x43e00000u) a = 0x43e00000u;
  if (a < 0x3c800000u) {
    float f, g;
    memcpy(&f, &a, 4);
    g = f + 16384.0f;
    memcpy(&m, &g, 4);
    m -= 0x46800000u;
  } else {
    uint32_t r = a - (120u << 23);
    m = (r + (1u << 19) - 1u + ((r >> 20) & 1u)) >> 20;
  }
  return (uint8_t)((u >> 24 & 0x80u) | m);
}

FS void q8_block(uint8_t *out, const float *x) {
  float amax = 0.0f;
  for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
  float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  uint16_t d16;
  store(PE_F16, (char *)&d16, 0, d);
  memcpy(out, &d16, 2);
  for (int i = 0; i < 32; i++) out[2 + i] = (uint8_t)(int8_t)roundf(x[i] * id);
}

FS void q8_ld(const uint8_t *in, float *x) {
  float d = ld(PE_F16, (const char *)in, 0);
  for (int i = 0; i < 32; i++) x[i] = (float)(int8_t)in[2 + i] * d;
}

/* The stage loops, inlined with constant dtype, output, pairing, norm and
 * fp8 multiply (as floor_vec.h's): out is a dtype, O_FP8 or O_Q8. */
enum { O_FP8 = 3, O_Q8 = 4, O_DS = 5 };

FS void put(int out, int mul, char *dst, int e, float v, float *qrow, float scale) {
  if (out == O_FP8) ((uint8_t *)dst)[e] = fp8(mul ? v * scale : v / scale);
  else if (out == O_Q8) qrow[e] = v; /* quantized once the row's blocks are complete */
  else store(out, dst, e, v);
}

/* x normed by r and its weight w (floor.h's FN_*; FN_NONE: x). */
FS float nrm(int norm, float x, float r, float w) {
  const float xr = x * r;
  return norm == FN_NONE ? x : norm == FN_MUL ? xr * w : norm == FN_OFFSET ? fmaf(xr, w, xr) : xr;
}

FS void rot_rows(const floor_stage *st, floor_data *d, int64_t rows, int sd, int out, int style,
                 int norm, int mul) {
  const int half = st->rot / 2, w = st->width;
  const float scale = mul ? 1.0f / d->scale : d->scale; /* mul: the reciprocal, exact */
  float q[4096]; /* a q8_0 row before its blocks are written (width <= 4096) */
  int i = 0;
  /* a per-token norm: one scale for a token's heads rows (the last token
   * of the call may have fewer), each row with its head's weights */
  const int heads = st->norm_token && st->heads > 1 ? st->heads : 1;
  float r = 1.0f;
  for (int64_t n = 0; n < rows; n++) {
    char *src = d->src + i * d->src_stride, *dst = st->inplace ? src : d->dst + i * d->dst_stride;
    const int h = (int)(n % heads);
    const float *wt = d->w + (int64_t)h * w;
    if (norm && h == 0) { /* every token's rows read before any is written */
      const int64_t hn = rows - n < heads ? rows - n : heads;
      float ss = 0.0f;
      for (int64_t k = 0, ii = i; k < hn; k++, ii = ii + 1 == d->n_rows ? 0 : ii + 1)
        for (int e = 0; e < w; e++) {
          const char *row = d->src + ii * d->src_stride;
          ss = fmaf(ld(sd, row, e), ld(sd, row, e), ss);
        }
      r = 1.0f / sqrtf(ss / ((float)hn * (float)w) + d->eps);
    }
    for (int j = 0; j < half; j++) {
      const int ex = style == PE_ROPE_NEOX ? j : 2 * j;
      const int ey = style == PE_ROPE_NEOX ? half + j : 2 * j + 1;
      float x = ld(sd, src, ex), y = ld(sd, src, ey), c = d->cs[j], sn = d->cs[half + j];
      x = nrm(norm, x, r, wt[ex]), y = nrm(norm, y, r, wt[ey]);
      put(out, mul, dst, ex, fmaf(x, c, -(y * sn)), q, scale);
      put(out, mul, dst, ey, fmaf(y, c, x * sn), q, scale);
    }
    for (int e = st->rot; e < w; e++) {
      if (norm) store(out, dst, e, nrm(norm, ld(sd, src, e), r, wt[e]));
      else if (!st->inplace) store(out, dst, e, ld(sd, src, e));
    }
    if (out == O_Q8)
      for (int b = 0; b < w / 32; b++) q8_block((uint8_t *)dst + 34 * b, q + 32 * b);
    if (++i == d->n_rows) i = 0;
  }
}

FS void quant_rows(const floor_stage *st, floor_data *d, int64_t rows, int sd, int out, int mul) {
  const float scale = mul ? 1.0f / d->scale : d->scale;
  float q[4096];
  int i = 0;
  for (int64_t n = 0; n < rows; n++) {
    char *src = d->src + i * d->src_stride, *dst = d->dst + i * d->dst_stride;
    for (int e = 0; e < st->width; e++) put(out, mul, dst, e, ld(sd, src, e), q, scale);
    if (out == O_Q8)
      for (int b = 0; b < st->width / 32; b++) q8_block((uint8_t *)dst + 34 * b, q + 32 * b);
    if (++i == d->n_rows) i = 0;
  }
}

FS void shift_rows(const floor_stage *st, floor_data *d, int64_t rows, int style) {
  const int half = st->rot / 2, w = st->width;
  float x[4096];
  int i = 0;
  for (int64_t n = 0; n < rows; n++) {
    uint8_t *row = (uint8_t *)d->src + i * d->src_stride;
    for (int b = 0; b < w / 32; b++) q8_ld(row + 34 * b, x + 32 * b);
    for (int j = 0; j < half; j++) {
      const int ex = style == PE_ROPE_NEOX ? j : 2 * j;
      const int ey = style == PE_ROPE_NEOX ? half + j : 2 * j + 1;
      float c = d->cs[j], sn = d->cs[half + j], a = x[ex], b = x[ey];
      x[ex] = fmaf(a, c, -(b * sn));
      x[ey] = fmaf(b, c, a * sn);
    }
    for (int b = 0; b < w / 32; b++) q8_block(row + 34 * b, x + 32 * b);
    if (++i == d->n_rows) i = 0;
  }
}

/* FL_MLA (floor_vec.h's mla_rows): the latent normed, converted or coded,
 * the rope channels rotated; O_DS through a float32 row per tile for its
 * amax. */
FS void mla_rows(const floor_stage *st, floor_data *d, int64_t rows, int sd, int out, int style,
                 int mul) {
  const int rot = st->rot, lat = st->width - rot, half = rot / 2;
  const int lout = out == O_DS ? O_FP8 : out, rout = out == O_DS ? PE_BF16 : out;
  const int64_t lb = lout == O_FP8 ? 1 : (lout == PE_F32 ? 4 : 2);
  const int64_t ro = out == O_DS ? lat + 4 * (lat / 128) : lat * lb;
  const float scale = mul ? 1.0f / d->scale : d->scale;
  int i = 0;
  for (int64_t n = 0; n < rows; n++) {
    const char *src = d->src + i * d->src_stride;
    char *dst = d->dst + i * d->dst_stride;
    float ss = 0.0f;
    for (int e = 0; e < lat; e++) ss = fmaf(ld(sd, src, e), ld(sd, src, e), ss);
    const float r = 1.0f / sqrtf(ss / (float)lat + d->eps);
    if (out == O_DS) {
      float *x = d->scratch;
      for (int t = 0; t < lat; t += 128) {
        float amax = 0.0f;
        for (int e = t; e < t + 128; e++) {
          x[e] = ld(sd, src, e) * r * d->w[e];
          amax = fmaxf(amax, fabsf(x[e]));
        }
        const float sc = fmaxf(amax / 448.0f, FLT_MIN);
        for (int e = t; e < t + 128; e++) ((uint8_t *)dst)[e] = fp8(x[e] / sc);
        memcpy(dst + lat + 4 * (t / 128), &sc, 4);
      }
    } else {
      for (int e = 0; e < lat; e++)
        put(lout, mul, dst, e, ld(sd, src, e) * r * d->w[e], NULL, scale);
    }
    const char *rs = src + (int64_t)lat * (sd == PE_F32 ? 4 : 2);
    char *rd = dst + ro;
    for (int j = 0; j < half; j++) {
      const int ex = style == PE_ROPE_NEOX ? j : 2 * j;
      const int ey = style == PE_ROPE_NEOX ? half + j : 2 * j + 1;
      float x = ld(sd, rs, ex), y = ld(sd, rs, ey), c = d->cs[j], sn = d->cs[half + j];
      put(rout, mul, rd, ex, fmaf(x, c, -(y * sn)), NULL, scale);
      put(rout, mul, rd, ey, fmaf(y, c, x * sn), NULL, scale);
    }
    if (++i == d->n_rows) i = 0;
  }
}

FS void f_copy(void *dst, const void *src, int64_t n) { memcpy(dst, src, (size_t)n); }

#define FLOOR_FN pb_floor_scalar
#include "floor_entry.h"
