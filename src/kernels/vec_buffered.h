/* vec_buffered.h - partial-vector loads and stores for ISAs without masked
 * 16-bit memory operations (AVX2, AdvSIMD): a tail goes through a small
 * zero-padded buffer and the same full-vector code, so only the row's own
 * elements are read and written. n (lanes) >= VL is the full operation; the
 * main loops pass the constant VL, so the test folds away there.
 *
 * The ISA header defines first: VL, VDL (double lanes), vf, vd, vf_load,
 * vf_store, vd_load, vldf(dt, p) and vstf(dt, p, v) (full vectors of dtype
 * dt), and with VEC_LD2 (structure loads, AdvSIMD) vldif(dt, p, &x, &y) and
 * vstif(dt, p, x, y) (VL interleaved pairs). */
#ifndef PE_VEC_BUFFERED_H
#define PE_VEC_BUFFERED_H

/* Bytes of lanes [0, n) of dtype dt (none for n <= 0). */
PE_AI size_t vbytes(int dt, int32_t n) { return n <= 0 ? 0 : (size_t)n * (size_t)pe__esize(dt); }

PE_AI vf vf_loadn(const float *p, int32_t n) {
  if (n >= VL) return vf_load(p);
  float b[VL] = {0};
  memcpy(b, p, vbytes(PE_F32, n));
  return vf_load(b);
}
PE_AI void vf_storen(float *p, int32_t n, vf v) {
  if (n >= VL) {
    vf_store(p, v);
    return;
  }
  float b[VL];
  vf_store(b, v);
  memcpy(p, b, vbytes(PE_F32, n));
}
PE_AI vd vd_loadn(const double *p, int32_t n) {
  if (n >= VDL) return vd_load(p);
  double b[VDL] = {0};
  if (n > 0) memcpy(b, p, (size_t)n * sizeof(double)); /* the upper half may have none */
  return vd_load(b);
}

/* n lanes of dtype dt (zeros past n). */
PE_AI vf vld(int dt, const void *p, int32_t n) {
  if (n >= VL) return vldf(dt, p);
  float b[VL] = {0}; /* room for VL lanes of any dtype */
  memcpy(b, p, vbytes(dt, n));
  return vldf(dt, b);
}
PE_AI void vstn(int dt, void *p, int32_t n, vf v) {
  if (n >= VL) {
    vstf(dt, p, v);
    return;
  }
  float b[VL];
  vstf(dt, b, v);
  memcpy(p, b, vbytes(dt, n));
}
/* a to pa (na lanes), b to pb (nb lanes). With VEC_BF16_PAIR the ISA
 * rounds two vectors to bf16 at once (bf16_st2, bf16_stw). */
PE_AI void vst2(int dt, void *pa, int32_t na, vf a, void *pb, int32_t nb, vf b) {
#if defined(VEC_BF16_PAIR)
  if (dt == PE_BF16 && nb > 0) {
    bf16_st2(pa, na, a, pb, nb, b);
    return;
  }
#endif
  vstn(dt, pa, na, a);
  vstn(dt, pb, nb, b);
}
/* 2*VL contiguous lanes a | b (the cache write's whole-line store). */
PE_AI void vstw(int dt, void *p, vf a, vf b) {
#if defined(VEC_BF16_PAIR)
  if (dt == PE_BF16) {
    bf16_stw(p, a, b);
    return;
  }
#endif
  vstf(dt, p, a);
  vstf(dt, (char *)p + VL * pe__esize(dt), b);
}
PE_AI void vst(int dt, void *p, vf v) { vstf(dt, p, v); }

#if defined(VEC_LD2)
/* n interleaved pairs (2n elements) split into x and y, and back. */
PE_AI void vldi(int dt, const void *p, int32_t n, vf *x, vf *y) {
  if (n >= VL) {
    vldif(dt, p, x, y);
    return;
  }
  float b[2 * VL] = {0};
  memcpy(b, p, vbytes(dt, 2 * n));
  vldif(dt, b, x, y);
}
PE_AI void vsti(int dt, void *p, int32_t n, vf x, vf y) {
  if (n >= VL) {
    vstif(dt, p, x, y);
    return;
  }
  float b[2 * VL];
  vstif(dt, b, x, y);
  memcpy(p, b, vbytes(dt, 2 * n));
}
#endif

#endif
