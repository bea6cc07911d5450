/* store_template.h - the fused "rotate k and write it into the KV cache"
 * rows and the dtype conversion, written once for the vector ISAs (after
 * rope_template.h, whose steps they use). "Apply, then convert", computed
 * once: load the source dtype, widen exactly, rotate as isa.h says, round
 * once to the destination dtype. Only the pairs are written; the engine
 * converts any pass-through channels with `convert`. */

/* One row: src (dtype sd) -> dst (dtype dd). A cache row is written, not
 * updated: with VEC_WHOLE_LINES, NeoX takes 2*VL pairs a step and GPT-J
 * stores each full step as 2*VL contiguous elements, so every 64-byte line
 * is covered by whole stores and the CPU can skip reading it first (two
 * masked halves would each need the read). */
PE_AI void store_row(int sd, int dd, int style, const void *src, void *dst, const float *c,
                     const float *s, int32_t n, int32_t dist) {
  const char *in = src;
  char *out = dst;
  const int64_t ses = pe__esize(sd), des = pe__esize(dd);
  int32_t j = 0;
  if (style == PE_ROPE_GPTJ) {
    for (; j + VL <= n; j += VL)
      gptj_step(sd, dd, in + 2 * j * ses, out + 2 * j * des, c + j, s + j, VL, 1);
    if (j < n) gptj_step(sd, dd, in + 2 * j * ses, out + 2 * j * des, c + j, s + j, n - j, 0);
    return;
  }
  const char *iy = in + dist * ses;
  char *oy = out + dist * des;
#if VEC_WHOLE_LINES
  for (; j + 2 * VL <= n; j += 2 * VL) {
    vf xa, ya, xb, yb;
    rotate(vld(sd, PE_AT(in, j, ses), VL), vld(sd, PE_AT(iy, j, ses), VL), vf_load(c + j),
           vf_load(s + j), &xa, &ya);
    rotate(vld(sd, PE_AT(in, j + VL, ses), VL), vld(sd, PE_AT(iy, j + VL, ses), VL),
           vf_load(c + j + VL), vf_load(s + j + VL), &xb, &yb);
    vstw(dd, PE_AT(out, j, des), xa, xb);
    vstw(dd, PE_AT(oy, j, des), ya, yb);
  }
#endif
  for (; j + VL <= n; j += VL)
    neox_step(sd, dd, PE_AT(in, j, ses), PE_AT(iy, j, ses), PE_AT(out, j, des), PE_AT(oy, j, des),
              c + j, s + j, VL);
  if (j < n)
    neox_step(sd, dd, PE_AT(in, j, ses), PE_AT(iy, j, ses), PE_AT(out, j, des), PE_AT(oy, j, des),
              c + j, s + j, n - j);
}

/* VL elements of dtype dt widened as convert.h does: exactly, an f16
 * signaling NaN kept signaling (unlike the rotation's load, vld). */
PE_AI vf vld_exact(int dt, const void *p) { return dt == PE_F16 ? vld_f16_exact(p) : vld(dt, p, VL); }

/* sd != dd: VL elements a step through the exact loads and the stores, the
 * tail element by element (enc_common.h, the same semantics). */
PE_AI void convert_row(int sd, int dd, const void *src, void *dst, int64_t n) {
  const char *in = src;
  char *out = dst;
  const int64_t ses = pe__esize(sd), des = pe__esize(dd);
  int64_t j = 0;
  for (; j + VL <= n; j += VL) vst(dd, PE_AT(out, j, des), vld_exact(sd, PE_AT(in, j, ses)));
#if defined(PE_DT)
  pe__enc_convert(PE_DT(sd), PE_AT(in, j, ses), PE_DT(dd), PE_AT(out, j, des), n - j);
#else
  pe__enc_convert((pe_dtype)sd, PE_AT(in, j, ses), (pe_dtype)dd, PE_AT(out, j, des), n - j);
#endif
}
