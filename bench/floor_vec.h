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
FA int group(int out) { return out == O_Q8 ? QV : out == O_F32 ? 2 : 4; }

/* The cos and sin of k vectors of pairs from pair j (NeoX) or channel j
 * (GPT-J: each duplicated to both lanes of its pair): loaded once for all
 * the heads of a token, which share the table row. */
FA void cs_chunk(int style, const float *cs, int half, int j, int k, vf *c, vf *s) {
  for (int i = 0; i < k; i++) {
    if (style == PE_ROPE_NEOX)
      c[i] = f_ldf(cs + j + i * VL), s[i] = f_ldf(cs + half + j + i * VL);
    else
      c[i] = f_dup(cs + (j + i * VL) / 2), s[i] = f_dup(cs + half + (j + i * VL) / 2);
  }
}

/* k vectors of one head's pairs with the chunk's c, s: NeoX from pair j (x
 * at channel j, y at half + j), GPT-J from channel j. */
FA void rot_chunk(int sd, int out, int style, int norm, int mul, const char *src, char *dst,
                  int half, int j, int k, const vf *c, const vf *s, const float *w, vf r, vf vs) {
  vf xo[4], yo[4];
  for (int i = 0; i < k; i++) {
    const int e = j + i * VL;
    if (style == PE_ROPE_NEOX) {
      vf x = ld_x(sd, src, e, norm, r, w), y = ld_x(sd, src, half + e, norm, r, w);
      xo[i] = f_fmsub(x, c[i], f_mul(y, s[i]));
      yo[i] = f_fmadd(y, c[i], f_mul(x, s[i]));
    } else {
      vf v = ld_x(sd, src, e, norm, r, w);
      xo[i] = f_fmaddsub(v, c[i], f_mul(f_swap(v), s[i]));
    }
  }
  emit(out, dst, j, xo, k, vs, mul);
  if (style == PE_ROPE_NEOX) emit(out, dst, half + j, yo, k, vs, mul);
}

/* The float32 RMSNorm scale of a row: 1 / sqrt(sum(x^2) / width + eps). */
FA float norm_scale(int sd, const char *src, int width, float eps) {
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
  return 1.0f / sqrtf(f_hsum(f_add(a0, a1)) / (float)width + eps);
}

#define FL_HEADS 256 /* heads of a token sharing one load of a cos/sin chunk, at most */

/* Rows of FL_ROT / FL_NORM_ROT, cycling through the data's rows, a token's
 * heads (st->heads rows) at a time: its norms first, then each chunk of
 * group(out) vectors of pairs (then single vectors; not for Q8_0, whose
 * blocks floor_supported requires whole) with c and s loaded once for the
 * heads, then the channels past rot (normed too, or copied where the row
 * goes to another buffer). */
FA void rot_rows(const floor_stage *st, floor_data *d, int64_t rows, int sd, int out, int style,
                 int norm, int mul) {
  const vf vs = f_set1(mul ? 1.0f / d->scale : d->scale), one = f_set1(1.0f);
  const int rot = st->rot, width = st->width, half = rot / 2, g = group(out);
  const int n = style == PE_ROPE_NEOX ? half : rot;
  const int heads = st->heads < 1 ? 1 : st->heads > FL_HEADS ? FL_HEADS : st->heads;
  float rs[FL_HEADS];
  int i = 0;
#define ROW(h) (d->src + (i + (h)) % d->n_rows * d->src_stride)
#define DST(h) (st->inplace ? (char *)ROW(h) : d->dst + (i + (h)) % d->n_rows * d->dst_stride)
  for (int64_t n0 = 0; n0 < rows; n0 += heads) {
    const int hn = rows - n0 < heads ? (int)(rows - n0) : heads;
    if (norm)
      for (int h = 0; h < hn; h++) rs[h] = norm_scale(sd, ROW(h), width, d->eps);
    vf c[4], s[4];
    int j = 0;
    for (; j + g * VL <= n; j += g * VL) {
      cs_chunk(style, d->cs, half, j, g, c, s);
      for (int h = 0; h < hn; h++)
        rot_chunk(sd, out, style, norm, mul, ROW(h), DST(h), half, j, g, c, s, d->w,
                  norm ? f_set1(rs[h]) : one, vs);
    }
    for (; out != O_Q8 && j < n; j += VL) {
      cs_chunk(style, d->cs, half, j, 1, c, s);
      for (int h = 0; h < hn; h++)
        rot_chunk(sd, out, style, norm, mul, ROW(h), DST(h), half, j, 1, c, s, d->w,
                  norm ? f_set1(rs[h]) : one, vs);
    }
    for (int h = 0; h < hn && rot < width; h++) {
      if (norm)
        for (int e = rot; e < width; e += VL)
          f_st(out, AT(DST(h), e, out), ld_x(sd, ROW(h), e, 1, f_set1(rs[h]), d->w));
      else if (!st->inplace)
        f_copy(AT(DST(h), rot, out), AT(ROW(h), rot, sd), (width - rot) * esz(sd));
    }
    i = (i + hn) % d->n_rows;
  }
#undef ROW
#undef DST
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

/* FL_SHIFT: Q8_0 rows in place, the heads sharing a delta (st->heads rows)
 * at a time: for each chunk of 32 pairs, c and s loaded once, then each
 * row's blocks of the chunk (NeoX: x's block and y's; GPT-J: one block)
 * dequantized, rotated, quantized again. */
FA void shift_rows(const floor_stage *st, floor_data *d, int64_t rows, int style) {
  const int half = st->rot / 2, n = style == PE_ROPE_NEOX ? half : st->rot;
  const int heads = st->heads < 1 ? 1 : st->heads > FL_HEADS ? FL_HEADS : st->heads;
  int i = 0;
  for (int64_t n0 = 0; n0 < rows; n0 += heads) {
    const int hn = rows - n0 < heads ? (int)(rows - n0) : heads;
    for (int j = 0; j < n; j += 32) {
      vf c[QV], s[QV];
      cs_chunk(style, d->cs, half, j, QV, c, s);
      for (int h = 0; h < hn; h++) {
        uint8_t *row = (uint8_t *)d->src + (i + h) % d->n_rows * d->src_stride;
        uint8_t *xb = row + j / 32 * 34, *yb = row + (half + j) / 32 * 34;
        vf x[QV], y[QV], xo[QV], yo[QV];
        f_q8_ld(xb, x);
        if (style == PE_ROPE_NEOX) f_q8_ld(yb, y);
        for (int k = 0; k < QV; k++) {
          if (style == PE_ROPE_NEOX) {
            xo[k] = f_fmsub(x[k], c[k], f_mul(y[k], s[k]));
            yo[k] = f_fmadd(y[k], c[k], f_mul(x[k], s[k]));
          } else {
            xo[k] = f_fmaddsub(x[k], c[k], f_mul(f_swap(x[k]), s[k]));
          }
        }
        f_q8_block(xb, xo);
        if (style == PE_ROPE_NEOX) f_q8_block(yb, yo);
      }
    }
    i = (i + hn) % d->n_rows;
  }
}

#include "floor_entry.h"
