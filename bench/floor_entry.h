/* floor_entry.h - the entry point of a floor kernel file (floor_vec.h for
 * the vector ISAs, floor_scalar.c): one instantiation of the includer's
 * rot_rows / quant_rows / shift_rows / mla_rows per (dtype, output,
 * pairing, norm, fp8 multiply) a stage can have, so that each loop is
 * compiled with them constant; FL_COPY through the includer's f_copy. The
 * includer defines FLOOR_FN, O_FP8, O_Q8 and O_DS. */

#define BY_STYLE(call, ...)                                                                        \
  (st->style == PE_ROPE_NEOX ? call(__VA_ARGS__, PE_ROPE_NEOX) : call(__VA_ARGS__, PE_ROPE_GPTJ))
#define ROT_(sd, out, norm, mul, style) rot_rows(st, d, rows, sd, out, style, norm, mul)
#define ROT_DT(sd)                                                                                 \
  do {                                                                                             \
    if (st->kind == FL_NORM_ROT && st->norm_w == PB_QKN_OFFSET)                                    \
      BY_STYLE(ROT_, sd, sd, FN_OFFSET, 0);                                                        \
    else if (st->kind == FL_NORM_ROT && st->norm_w == PB_QKN_L2)                                   \
      BY_STYLE(ROT_, sd, sd, FN_UNIT, 0);                                                          \
    else if (st->kind == FL_NORM_ROT)                                                              \
      BY_STYLE(ROT_, sd, sd, FN_MUL, 0);                                                           \
    else if (st->fmt == FL_Q8_0)                                                                   \
      BY_STYLE(ROT_, sd, O_Q8, 0, 0);                                                              \
    else if (st->fmt == FL_FP8 && st->fp8_mul)                                                     \
      BY_STYLE(ROT_, sd, O_FP8, 0, 1);                                                             \
    else if (st->fmt == FL_FP8)                                                                    \
      BY_STYLE(ROT_, sd, O_FP8, 0, 0);                                                             \
    else                                                                                           \
      BY_STYLE(ROT_, sd, sd, 0, 0);                                                                \
  } while (0)
#define QUANT_DT(sd)                                                                               \
  (st->fmt == FL_Q8_0 ? quant_rows(st, d, rows, sd, O_Q8, 0)                                       \
   : st->fp8_mul      ? quant_rows(st, d, rows, sd, O_FP8, 1)                                      \
                      : quant_rows(st, d, rows, sd, O_FP8, 0))
#define SHIFT_(unused, style) shift_rows(st, d, rows, style)
#define MLA_(sd, out, mul, style) mla_rows(st, d, rows, sd, out, style, mul)
#define MLA_DT(sd)                                                                                 \
  do {                                                                                             \
    if (st->fmt == FL_FP8_DS)                                                                      \
      BY_STYLE(MLA_, sd, O_DS, 0);                                                                 \
    else if (st->fmt == FL_FP8 && st->fp8_mul)                                                     \
      BY_STYLE(MLA_, sd, O_FP8, 1);                                                                \
    else if (st->fmt == FL_FP8)                                                                    \
      BY_STYLE(MLA_, sd, O_FP8, 0);                                                                \
    else                                                                                           \
      BY_STYLE(MLA_, sd, sd, 0);                                                                   \
  } while (0)

void FLOOR_FN(const floor_stage *st, floor_data *d, int64_t rows) {
  switch (st->kind) {
  case FL_ROT:
  case FL_NORM_ROT:
    if (st->src == PE_F32) ROT_DT(PE_F32);
    else if (st->src == PE_F16) ROT_DT(PE_F16);
    else ROT_DT(PE_BF16);
    break;
  case FL_QUANT:
    if (st->src == PE_F32) QUANT_DT(PE_F32);
    else if (st->src == PE_F16) QUANT_DT(PE_F16);
    else QUANT_DT(PE_BF16);
    break;
  case FL_COPY: {
    const int64_t bytes = (int64_t)st->width * (st->src == PE_F32 ? 4 : 2);
    int i = 0;
    for (int64_t n = 0; n < rows; n++) {
      f_copy(d->dst + i * d->dst_stride, d->src + i * d->src_stride, bytes);
      if (++i == d->n_rows) i = 0;
    }
    break;
  }
  case FL_SHIFT:
    BY_STYLE(SHIFT_, 0);
    break;
  case FL_MLA:
    if (st->src == PE_F32) MLA_DT(PE_F32);
    else if (st->src == PE_F16) MLA_DT(PE_F16);
    else MLA_DT(PE_BF16);
    break;
  }
}
