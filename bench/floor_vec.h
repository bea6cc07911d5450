/* floor_vec.h - the floor kernels (floor.h) written once for the vector
 * ISAs. The includer (floor_avx2.c, floor_avx512.c) defines VL (float lanes),
 * vf, FLOOR_FN (the entry point's name) and these primitives, each the
 * shortest sequence its ISA has for the operation (docs/compute-floor.md
 * counts them):
 *   vf   f_ld(dt, p)            VL elements of dtype dt widened to float32
 *   void f_st(dt, p, v)         VL floats rounded to dt (nearest even) and stored
 *   void f_st2(dt, p, a, b)     2*VL floats, a then b (narrowed together)
 *   vf   f_ldf(p), f_set1(x), f_mul, f_add, f_div
 *   vf   f_fmadd(a, b, c)       a*b + c       f_fmsub(a, b, c)  a*b - c
 *   vf   f_fmaddsub(a, b, c)    a*b - c in even lanes, a*b + c in odd lanes
 *   vf   f_swap(v)              lanes 2i and 2i+1 exchanged
 *   vf   f_dup(p)               p[0], p[0], p[1], p[1], ... (VL/2 floats)
 *   float f_hsum(v)
 *   void f_fp8_st4(out, y0..y3) 4*VL e4m3 codes of y (already scaled)
 *   void f_fp8_st1(out, y)      VL codes
 *   void f_q8_block(out, v)     one Q8_0 block (34 bytes) of v[0 .. 32/VL)
 *   void f_q8_ld(in, v)         one Q8_0 block dequantized into v[0 .. 32/VL)
 *   void f_copy(dst, src, n)    n bytes (a multiple of the vector size)
 * Every helper here is inlined with constant dtype, style, output and norm
 * arguments (the entry point's switch), so each stage's loop is the straight
 * sequence of those primitives. */

#define FA static inline __attribute__((always_inline))

enum { O_F32 = PE_F32, O_F16 = PE_F16, O_BF16 = PE_BF16, O_FP8 = 3, O_Q8 = 4 };
enum { QV = 32 / VL }; /* vectors per Q8_0 block */

FA int64_t esz(int dt) { return dt == PE_F32 ? 4 : 2; }

/* A row's element at channel e (dtype dt), or a Q8_0 row's block. */
#define AT(p, e, dt) ((p) + (int64_t)(e) * esz(dt))

/* x (optionally normed: (x * r) * w) of VL channels at e. */
FA vf ld_x(int dt, const char *row, int e, int norm, vf r, const float *w) {
  vf x = f_ld(dt, AT(row, e, dt));
  return norm ? f_mul(f_mul(x, r), f_ldf(w + e)) : x;
}

/* Outputs of k vectors at channels e, e + VL, ...: narrowed to the dtype
 * out, or fp8 codes (scaled by y = x * inv or x / scale first). */
FA vf fp8_y(vf x, vf vs, int mul) { return mul ? f_mul(x, vs) : f_div(x, vs); }

FA void emit(int out, char *dst, int e, const vf *o, int k, vf vs, int mul) {
  if (out == O_FP8) {
    uint8_t *p = (uint8_t *)dst + e;
    int i = 0;
    for (; i + 4 <= k; i += 4)
      f_fp8_st4(p + i * VL, fp8_y(o[i], vs, mul), fp8_y(o[i + 1], vs, mul),
                fp8_y(o[i + 2], vs, mul), fp8_y(o[i + 3], vs, mul));
    for (; i < k; i++) f_fp8_st1(p + i * VL, fp8_y(o[i], vs, mul));
  } else if (out == O_Q8) {
    for (int i = 0; i < k; i += QV) f_q8_block((uint8_t *)dst + (e + i * VL) / 32 * 34, o + i);
  } else {
    int i = 0;
    for (; i + 2 <= k; i += 2) f_st2(out, AT(dst, e + i * VL, out), o[i], o[i + 1]);
    for (; i < k; i++) f_st(out, AT(dst, e + i * VL, out), o[i]);
  }
}

/* Output vectors per step: a Q8_0 block, four fp8 vectors, two halves. */
FA int group(int out) { return out == O_Q8 ? QV : out == O_FP8 ? 4 : 2; }

/* k vectors of NeoX pairs from pair j: x at channel j, y at half + j. */
FA void neox_step(int sd, int out, int norm, int mul, const char *src, char *dst, int half, int j,
                  int k, const float *cs, const float *w, vf r, vf vs) {
  vf xo[4], yo[4];
  for (int i = 0; i < k; i++) {
    const int e = j + i * VL;
    vf x = ld_x(sd, src, e, norm, r, w), y = ld_x(sd, src, half + e, norm, r, w);
    vf c = f_ldf(cs + e), s = f_ldf(cs + half + e);
    xo[i] = f_fmsub(x, c, f_mul(y, s));
    yo[i] = f_fmadd(y, c, f_mul(x, s));
  }
  emit(out, dst, j, xo, k, vs, mul);
  emit(out, dst, half + j, yo, k, vs, mul);
}

/* k vectors of GPT-J pairs from channel e0 (pairs e0/2 ...). */
FA void gptj_step(int sd, int out, int norm, int mul, const char *src, char *dst, int half, int e0,
                  int k, const float *cs, const float *w, vf r, vf vs) {
  vf o[4];
  for (int i = 0; i < k; i++) {
    const int e = e0 + i * VL;
    vf v = ld_x(sd, src, e, norm, r, w);
    o[i] = f_fmaddsub(v, f_dup(cs + e / 2), f_mul(f_swap(v), f_dup(cs + half + e / 2)));
  }
  emit(out, dst, e0, o, k, vs, mul);
}

/* One row: the NeoX or GPT-J rotation of its first rot channels, x and y
 * normed first when norm (r: the row's scale), outputs in out at dst;
 * groups of group(out) vectors, then single vectors (not for Q8_0, whose
 * blocks floor_supported requires whole). */
FA void rot_row(int sd, int out, int style, int norm, int mul, const char *src, char *dst, int rot,
                const float *cs, const float *w, vf r, vf vs) {
  const int half = rot / 2, g = group(out), n = style == PE_ROPE_NEOX ? half : rot;
  int j = 0;
  for (; j + g * VL <= n; j += g * VL) {
    if (style == PE_ROPE_NEOX)
      neox_step(sd, out, norm, mul, src, dst, half, j, g, cs, w, r, vs);
    else
      gptj_step(sd, out, norm, mul, src, dst, half, j, g, cs, w, r, vs);
  }
  for (; out != O_Q8 && j < n; j += VL) {
    if (style == PE_ROPE_NEOX)
      neox_step(sd, out, norm, mul, src, dst, half, j, 1, cs, w, r, vs);
    else
      gptj_step(sd, out, norm, mul, src, dst, half, j, 1, cs, w, r, vs);
  }
}

/* The float32 RMSNorm scale of a row: 1 / sqrt(sum(x^2) / width + eps). */
FA vf norm_scale(int sd, const char *src, int width, float eps) {
  vf a0 = f_set1(0.0f), a1 = f_set1(0.0f);
  int e = 0;
  for (; e + 2 * VL <= width; e += 2 * VL) {
    vf x0 = f_ld(sd, AT(src, e, sd)), x1 = f_ld(sd, AT(src, e + VL, sd));
    a0 = f_fmadd(x0, x0, a0);
    a1 = f_fmadd(x1, x1, a1);
  }
  if (e < width) { /* width a multiple of VL only */
    vf x0 = f_ld(sd, AT(src, e, sd));
    a0 = f_fmadd(x0, x0, a0);
  }
  return f_set1(1.0f / sqrtf(f_hsum(f_add(a0, a1)) / (float)width + eps));
}

/* Rows of FL_ROT / FL_NORM_ROT, cycling through the data's rows. */
FA void rot_rows(const floor_stage *st, floor_data *d, int64_t rows, int sd, int out, int style,
                 int norm, int mul) {
  const vf vs = f_set1(mul ? 1.0f / d->scale : d->scale), one = f_set1(1.0f);
  const int rot = st->rot, width = st->width;
  int i = 0;
  for (int64_t n = 0; n < rows; n++) {
    const char *src = d->src + i * d->src_stride;
    char *dst = st->inplace ? (char *)src : d->dst + i * d->dst_stride;
    vf r = norm ? norm_scale(sd, src, width, d->eps) : one;
    rot_row(sd, out, style, norm, mul, src, dst, rot, d->cs, d->w, r, vs);
    if (norm) /* the channels past rot are normed too */
      for (int e = rot; e < width; e += VL)
        f_st(out, AT(dst, e, out), ld_x(sd, src, e, 1, r, d->w));
    else if (!st->inplace && rot < width) /* and copied where the row goes elsewhere */
      f_copy(AT(dst, rot, out), AT(src, rot, sd), (width - rot) * esz(sd));
    if (++i == d->n_rows) i = 0;
  }
}

/* FL_QUANT: width channels of src quantized (v into a quantized cache). */
FA void quant_rows(const floor_stage *st, floor_data *d, int64_t rows, int sd, int out, int mul) {
  const vf vs = f_set1(mul ? 1.0f / d->scale : d->scale);
  const int g = group(out);
  int i = 0;
  for (int64_t n = 0; n < rows; n++) {
    const char *src = d->src + i * d->src_stride;
    char *dst = d->dst + i * d->dst_stride;
    int e = 0;
    for (; e + g * VL <= st->width; e += g * VL) {
      vf o[4];
      for (int k = 0; k < g; k++) o[k] = f_ld(sd, AT(src, e + k * VL, sd));
      emit(out, dst, e, o, g, vs, mul);
    }
    if (out != O_Q8)
      for (; e < st->width; e += VL) {
        vf o = f_ld(sd, AT(src, e, sd));
        emit(out, dst, e, &o, 1, vs, mul);
      }
    if (++i == d->n_rows) i = 0;
  }
}

/* FL_SHIFT: a Q8_0 row in place: each block pair (NeoX: x's block and y's)
 * or block (GPT-J) dequantized, rotated, quantized again. */
FA void shift_rows(const floor_stage *st, floor_data *d, int64_t rows, int style) {
  const int half = st->rot / 2;
  const float *cs = d->cs;
  int i = 0;
  for (int64_t n = 0; n < rows; n++) {
    uint8_t *row = (uint8_t *)d->src + i * d->src_stride;
    if (style == PE_ROPE_NEOX) {
      for (int j = 0; j < half; j += 32) {
        uint8_t *xb = row + j / 32 * 34, *yb = row + (half + j) / 32 * 34;
        vf x[QV], y[QV], xo[QV], yo[QV];
        f_q8_ld(xb, x);
        f_q8_ld(yb, y);
        for (int k = 0; k < QV; k++) {
          vf c = f_ldf(cs + j + k * VL), s = f_ldf(cs + half + j + k * VL);
          xo[k] = f_fmsub(x[k], c, f_mul(y[k], s));
          yo[k] = f_fmadd(y[k], c, f_mul(x[k], s));
        }
        f_q8_block(xb, xo);
        f_q8_block(yb, yo);
      }
    } else {
      for (int e = 0; e < st->rot; e += 32) {
        uint8_t *b = row + e / 32 * 34;
        vf v[QV], o[QV];
        f_q8_ld(b, v);
        for (int k = 0; k < QV; k++)
          o[k] = f_fmaddsub(v[k], f_dup(cs + (e + k * VL) / 2),
                            f_mul(f_swap(v[k]), f_dup(cs + half + (e + k * VL) / 2)));
        f_q8_block(b, o);
      }
    }
    if (++i == d->n_rows) i = 0;
  }
}

#include "floor_entry.h"
