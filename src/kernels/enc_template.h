/* enc_template.h - the kernels of ALiBi, T5, sinusoidal and learned written
 * once for the vector ISAs: VL elements a step with the same single float
 * operation per element as enc_common.h (no FMA: -ffp-contract=off, and
 * these operations never fuse), the tails through enc_common.h's element
 * loops. Loads are convert.h's exact widening (vld_exact): an f16 signaling
 * NaN stays signaling, as in the element loops, since which NaN an add
 * returns when both operands are NaN depends on it on Arm (a signaling one
 * wins) and load_row stores the widened value itself. */

/* The element loops' dtype: avx512.c's PE_BF16_CVT (bf16 rounded by
 * AVX512-BF16's conversion) stands for bf16. */
#if defined(PE_DT)
#define ENC_DT(dt) PE_DT(dt)
#else
#define ENC_DT(dt) ((pe_dtype)(dt))
#endif
/* With PE_BF16_CVT two vectors a step, rounded by one vcvtne2ps2bf16 into
 * one 64-byte store (vstw) instead of a vcvtneps2bf16 and its subnormal
 * check per vector. */
#if defined(PE_BF16_CVT)
#define ENC_PAIRS(dt) ((dt) == PE_BF16_CVT)
#else
#define ENC_PAIRS(dt) 0
#endif

/* add_row's load of the row. On x86 an add of two NaNs returns the first
 * operand's, quieted, whichever is signaling (SSE/AVX), so the row's NaN
 * wins either way and a quieted load gives the same bits: vld, one
 * vcvtph2ps for f16, instead of the exact load's five more operations per
 * vector. On Arm a signaling second operand would win: the exact load. */
#if defined(__x86_64__) || defined(__i386__)
#define ENC_ADD_LD(dt, p) vld(dt, p, VL)
#else
#define ENC_ADD_LD(dt, p) vld_exact(dt, p)
#endif

/* Where the ISA has a partial vector store (vec_avx512.h's vst_part), the
 * last n % VL elements as one masked vector, the body's operations with
 * lanes [0, m) loaded (zeros past them) and stored, instead of
 * enc_common.h's element loop, whose software f16/bf16 conversions made it
 * ~30 % of alibi_row's time in a 512-key causal prefill (rows of qpos + 1
 * keys; perf, AMD EPYC Zen 4). */
#if defined(VEC_PART_STORE)
#define ENC_VTAIL 1
#endif

/* Two vectors to 2*VL contiguous elements at p: one vcvtne2ps2bf16 and one
 * 64-byte store with PE_BF16_CVT (vstw), two vst otherwise. */
PE_AI void enc_st2(int dt, void *p, vf a, vf b) {
  if (ENC_PAIRS(dt)) {
    vstw(dt, p, a, b);
    return;
  }
  vst(dt, p, a);
  vst(dt, PE_AT((char *)p, VL, pe__esize(dt)), b);
}

PE_AI void add_row_gen(int dt, void *row, const float *v, int64_t n) {
  char *r = row;
  const int64_t es = pe__esize(dt);
  int64_t j = 0;
  if (ENC_PAIRS(dt))
    for (; j + 2 * VL <= n; j += 2 * VL)
      enc_st2(dt, PE_AT(r, j, es), vf_add(ENC_ADD_LD(dt, PE_AT(r, j, es)), vf_load(v + j)),
              vf_add(ENC_ADD_LD(dt, PE_AT(r, j + VL, es)), vf_load(v + j + VL)));
  for (; j + VL <= n; j += VL)
    vst(dt, PE_AT(r, j, es), vf_add(ENC_ADD_LD(dt, PE_AT(r, j, es)), vf_load(v + j)));
#if defined(ENC_VTAIL)
  if (j < n) {
    const int32_t m = (int32_t)(n - j); /* in [1, VL) */
    if (m >= VL) __builtin_unreachable();
    vst_part(dt, PE_AT(r, j, es), m, vf_add(vld(dt, PE_AT(r, j, es), m), vf_loadn(v + j, m)));
  }
#else
  pe__enc_add(ENC_DT(dt), PE_AT(r, j, es), v + j, n - j);
#endif
}

/* Distances as int32 lanes when qpos and n fit in int32; longer rows or
 * farther queries take the element loop. bias = neg_slope * d (float
 * multiply), then x + bias (float add), as pe__alibi_bias. The bias is never
 * NaN, so the quieting load gives the element loop's result. Two vectors a
 * step (PE_BF16_CVT's pairs, and two plain stores for the others: pe-bench
 * ALiBi decode 1x32x1x4096 f16 on AMD EPYC Zen 4, fastest of 101, 12.8 ->
 * 11.9 us). */
PE_AI void alibi_row_gen(int dt, void *row, int64_t n, int64_t qpos, float ns) {
  char *r = row;
  const int64_t es = pe__esize(dt);
  int64_t j = 0;
  if (qpos <= INT32_MAX && n <= INT32_MAX) {
    const vf vns = vf_set1(ns);
    vdist d = vdist_init((int32_t)qpos);
    for (; j + 2 * VL <= n; j += 2 * VL) {
      vf b0 = vf_mul(vns, vdist_f(d));
      vf b1 = vf_mul(vns, vdist_f(vdist_step(d, VL)));
      d = vdist_step(d, 2 * VL);
      enc_st2(dt, PE_AT(r, j, es), vf_add(vld(dt, PE_AT(r, j, es), VL), b0),
              vf_add(vld(dt, PE_AT(r, j + VL, es), VL), b1));
    }
    for (; j + VL <= n; j += VL) {
      vf bias = vf_mul(vns, vdist_f(d));
      d = vdist_step(d, VL);
      vst(dt, PE_AT(r, j, es), vf_add(vld(dt, PE_AT(r, j, es), VL), bias));
    }
#if defined(ENC_VTAIL)
    if (j < n) { /* lanes past n: distances wrap in int32, never stored */
      const int32_t m = (int32_t)(n - j);
      if (m >= VL) __builtin_unreachable();
      vf bias = vf_mul(vns, vdist_f(d));
      vst_part(dt, PE_AT(r, j, es), m, vf_add(vld(dt, PE_AT(r, j, es), m), bias));
      return;
    }
#endif
  }
  pe__enc_alibi(ENC_DT(dt), PE_AT(r, j, es), j, n - j, qpos, ns);
}

/* The causal -inf (isa.h mask_row): on x86 whole vectors of the bit pattern
 * (two 16-bit -inf per 32-bit lane), the first at the row's start, then at
 * VMASK_BYTES boundaries (64 AVX-512, 32 AVX2: a store within one cache
 * line), the last ending at the row's end (stores overlapping by whole
 * elements rewrite the same bits);
 * AVX-512 writes a row of under 64 bytes with one masked store. The element
 * loop compiled for baseline x86-64 made 16-byte stores: on AMD EPYC Zen 4,
 * filling rows of 256 / 512 / 4096 f16 in a 16 MiB buffer took 17.0 / 47.4 /
 * 275 ns a row, 64-byte stores 9.7 / 14.4 / 107. NEON keeps the element loop
 * (its compiled form already stores 16-byte vectors, its widest). */
#if defined(VMASK_BYTES)
PE_AI void mask_row_gen(int dt, void *row, int64_t n) {
  char *r = row;
  const int64_t bytes = n * pe__esize(dt); /* rows are aligned to their elements */
  const uint32_t w = dt == PE_F32 ? 0xff800000u : dt == PE_F16 ? 0xfc00fc00u : 0xff80ff80u;
  const vmask k = vmask_set1(w);
  if (bytes < VMASK_BYTES) {
#if defined(VMASK_WORDS)
    if (bytes > 0) vmask_store_words(r, bytes / 2, k);
#else
    pe__enc_fill_neg_inf(row, ENC_DT(dt), n);
#endif
    return;
  }
  char *const e = r + bytes;
  vmask_store(r, k);
  for (char *p = r + VMASK_BYTES - ((uintptr_t)r & (VMASK_BYTES - 1)); p + VMASK_BYTES <= e;
       p += VMASK_BYTES)
    vmask_store(p, k);
  vmask_store(e - VMASK_BYTES, k);
}
#else
PE_AI void mask_row_gen(int dt, void *row, int64_t n) {
  pe__enc_fill_neg_inf(row, ENC_DT(dt), n);
}
#endif

/* dt f16 or bf16 (f32 is a copy, isa_template.h). */
PE_AI void load_row_gen(int dt, float *out, const void *src, int64_t n) {
  const char *p = src;
  const int64_t es = pe__esize(dt);
  int64_t j = 0;
  for (; j + VL <= n; j += VL) vf_store(out + j, vld_exact(dt, PE_AT(p, j, es)));
  pe__enc_convert(ENC_DT(dt), PE_AT(p, j, es), PE_F32, out + j, n - j);
}

/* SLEEF's double sincos, VDL angles a step, each rounded once to float. */
static void FN(sincos)(const double *angle, int32_t n, float *s, float *c) {
  int32_t i = 0;
  for (; i + VDL <= n; i += VDL) {
    __typeof__(VEC_SINCOSD(vd_load(angle))) r = VEC_SINCOSD(vd_load(angle + i));
    vd_store_f32(s + i, r.x);
    vd_store_f32(c + i, r.y);
  }
  for (; i < n; i++) pe__sincos_f64_one(angle[i], &s[i], &c[i]);
}
