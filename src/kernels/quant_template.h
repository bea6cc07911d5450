/* quant_template.h - the quantized KV-cache row kernels (isa.h's kv_quant /
 * kv_dequant) written once for the vector ISAs: FP8 e4m3fn / e5m2 and Q8_0,
 * VL lanes a step. None of these CPUs has FP8 conversions, so the code is
 * quant_common.h's definition in integer and float lane operations, written
 * with GCC/clang generic vectors of VL lanes (bit casts of the ISA's vf),
 * which each ISA file compiles to its own instructions; bytes move through
 * the ISA's vb_load_u8 / vb_load_s8 / vb_store_u8 (vec_<isa>.h: compilers
 * scalarize generic conversions between 8- and 32-bit lanes). Bit-identical to
 * scalar.c by construction: the same integer operations, the same float
 * divide / add / multiply per lane; the per-block steps of Q8_0 (d, 1/d, the
 * f16 of d) are quant_common.h's scalar code itself. Tails: lanes past n are
 * computed on zeros and never stored. Included by isa_template.h after
 * rope_template.h. */

typedef float qf __attribute__((vector_size(VL * 4)));
typedef int32_t qi __attribute__((vector_size(VL * 4)));
typedef uint32_t qu __attribute__((vector_size(VL * 4)));

PE_AI qu q_sel(qi m, qu a, qu b) { return ((qu)m & a) | (~(qu)m & b); }
#define QU1(c) ((qu){0} + (uint32_t)(c)) /* every lane c */

/* n lanes (n <= VL) of dtype dt widened to float32 (zeros past n). */
PE_AI qf q_load(int dt, const void *p, int32_t n) { return (qf)vld(dt, p, n); }

/* ---- FP8 ---- */

/* quant_common.h's pe_fp8_from_f32, lane by lane. */
PE_AI qu fp8_encode(int fmt, qf y) {
  qu u = (qu)y, sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  qi nan = (qi)(a > 0x7f800000u);
  a = (qu)vb_min_u32((vbi)a, (vbi)QU1(PE_FP8_MAXB(fmt)));
  qi sub = (qi)(a < PE_FP8_MINNB(fmt));
  qf magic = (qf){0} + PE_FP8_MAGIC(fmt);
  qu ms = (qu)((qf)a + magic) - (qu)magic; /* bits(|y| + MAGIC) - bits(MAGIC) */
  qu r = a - PE_FP8_REBIAS(fmt);
  r += (1u << (PE_FP8_SHIFT(fmt) - 1)) - 1u + ((r >> PE_FP8_SHIFT(fmt)) & 1u);
  qu m = q_sel(sub, ms, r >> PE_FP8_SHIFT(fmt));
  return q_sel(nan, QU1(PE_FP8_NAN(fmt)), m) | sign;
}

/* The ISA's own encoder where it has one (vec_<isa>.h: the same bits). */
#if defined(VEC_FP8_ENCODE)
#define FP8_ENCODE_(fmt, y) vb_fp8_encode(fmt, (vf)(y))
#else
#define FP8_ENCODE_(fmt, y) (vbi)fp8_encode(fmt, y)
#endif

/* The codes of n values from in: y = x / scale, or, when scale is a power
 * of two (quant_common.h's PE_FP8_POW2_SCALE; inv a constant), y = x * r
 * with r = 1/scale exact: the same real number, so the same rounded float
 * (subnormal, overflow, NaN, Inf and zero signs alike); a multiply costs a
 * fraction of a divide. Tails: as everywhere, zeros past n never stored. */
PE_AI void kvq_fp8_rows(int fmt, int sd, int inv, const char *in, uint8_t *out, int64_t n,
                        qf vs) {
  const int64_t ses = pe__esize(sd);
#define FP8_Y_(x) (inv ? (x) * vs : (x) / vs)
  int64_t j = 0;
#define FP8_AT_(k) FP8_ENCODE_(fmt, FP8_Y_(q_load(sd, PE_AT(in, j + (k) * VL, ses), VL)))
  for (; j + 4 * VL <= n; j += 4 * VL) /* four vectors narrowed together */
    vb_store_u8x4(out + j, FP8_AT_(0), FP8_AT_(1), FP8_AT_(2), FP8_AT_(3));
#undef FP8_AT_
  for (; j + VL <= n; j += VL)
    vb_store_u8(out + j, FP8_ENCODE_(fmt, FP8_Y_(q_load(sd, PE_AT(in, j, ses), VL))));
  if (j < n) {
    uint8_t b[VL];
    vb_store_u8(b, FP8_ENCODE_(fmt, FP8_Y_(q_load(sd, PE_AT(in, j, ses), (int32_t)(n - j)))));
    memcpy(out + j, b, (size_t)(n - j));
  }
#undef FP8_Y_
}

PE_AI void kvq_fp8_gen(int fmt, int sd, const void *src, void *dst, int64_t n, float scale) {
  if (PE_FP8_POW2_SCALE(scale))
    kvq_fp8_rows(fmt, sd, 1, src, dst, n, (qf)vf_set1(1.0f / scale));
  else
    kvq_fp8_rows(fmt, sd, 0, src, dst, n, (qf)vf_set1(scale));
}

/* quant_common.h's pe_fp8_to_f32 through the f16 with the code's bits: an
 * e5m2 code is the top byte of the f16 of its value; an e4m3fn code c as
 * f16 bits (c & 0x80) << 8 | (c & 0x7f) << 7 is its value * 2^-8 (exponent
 * field E, bias 15 instead of 7; subnormals alike), widened exactly and
 * multiplied by 2^8 (exact). The NaN codes (e4m3fn 0x7f: 480 here; e5m2: the
 * f16 NaNs) become sign | 0x7fc00000. About ten lane operations instead of
 * the integer decoding's twenty. */
typedef uint16_t qh __attribute__((vector_size(VL * 2)));
PE_AI qf fp8_decode_h(int fmt, qh c) {
  qi nan;
  qf v;
  if (fmt == PE_KVQ_E4M3) {
    qh h = c << 7; /* the sign lands on bit 14: adding it moves it to bit 15 */
    v = (qf)vf_from_f16((vh)(h + (h & 0x4000))) * 256.0f;
    nan = (qi)(((qu)v & 0x7fffffffu) == 0x43f00000u);      /* +-480 */
    return (qf)((qu)v ^ ((qu)nan & (0x43f00000u ^ 0x7fc00000u))); /* -> sign | 0x7fc00000 */
  }
  v = (qf)vf_from_f16((vh)(c << 8));
  nan = (qi)(v != v);
  return (qf)q_sel(nan, ((qu)v & 0x80000000u) | 0x7fc00000u, (qu)v);
}

PE_AI void kvd_fp8_gen(int fmt, int dd, const void *src, void *dst, int64_t n, float scale) {
  const uint8_t *in = src;
  char *out = dst;
  const int64_t des = pe__esize(dd);
  const qf vs = (qf)vf_set1(scale);
  int64_t j = 0;
  for (; j + VL <= n; j += VL)
    vst(dd, PE_AT(out, j, des), (vf)(fp8_decode_h(fmt, (qh)vh_load_u8(in + j)) * vs));
  if (j < n) {
    int32_t m = (int32_t)(n - j);
    uint8_t b[VL] = {0};
    memcpy(b, in + j, (size_t)m);
    vf y = (vf)(fp8_decode_h(fmt, (qh)vh_load_u8(b)) * vs);
    vst2(dd, PE_AT(out, j, des), m, y, PE_AT(out, j, des), 0, y);
  }
}

/* ---- Q8_0 ---- */

enum { QV = PE_Q8_0_BLOCK / VL }; /* vectors per block */

/* roundf(q) (half away from zero) of lanes with |q| < 2^22 as int32:
 * trunc(q + copysign(0x1.fffffep-2f, q)), the largest float below 0.5. The
 * add is exact or rounds only where it cannot move q across an integer
 * (checked against roundf for every float32 of magnitude below 2^22), and
 * the conversion truncates: one add, one or, one conversion per lane. */
PE_AI qi q_roundf(qf q) {
  qf h = (qf)(((qu)q & 0x80000000u) | 0x3effffffu);
  return __builtin_convertvector(q + h, qi);
}

/* roundf of x * id as int32 (the ISA's own where it has one: the same bits). */
#if defined(VEC_Q8_ROUND)
#define Q8_ROUND_(q) (qu)vb_q8_round((vf)(q))
#else
#define Q8_ROUND_(q) (qu)q_roundf(q)
#endif

typedef float q4f __attribute__((vector_size(16)));
typedef int32_t q4i __attribute__((vector_size(16)));
typedef uint32_t q4u __attribute__((vector_size(16)));

/* Q8_0 in groups of g <= 4 blocks, in two steps. q8_scan: each block's |x|
 * bits reduced to one vector (unsigned max: the float order, NaN and Inf
 * above every finite value), the four maxima formed together
 * (vb_hmax4_u32), then quant_common.h's pe_q8_0_inv in four float lanes (the
 * same divides: d = amax / 127.0f, id = 1.0f / d where d != 0; the f16 of d
 * by vb_f16x4, pe_f32_to_f16's bits for every finite d). A non-finite block
 * (amax bits above FLT_MAX) is d 0x7e00, qs 0; a block whose 1/d overflows
 * gets id 0, so its qs come out 0 (every x finite). Lanes of the blocks past
 * g are zeros and never stored. q8_emit: the d and the qs. */
typedef struct q8_scale {
  q4f id;
  q4i bad;
  uint64_t h; /* the four f16 d */
} q8_scale;

/* bf16 rows as pairs (the ISA stores qs from 16-bit lanes: vb_store_q8w2):
 * 2 * VL bf16 loaded as VL 32-bit lanes u, element 2i in u's low half, 2i + 1
 * in its high half (little-endian, as the d stores below and q8_dgroup
 * assume); u << 16 and u & 0xffff0000 are the two elements as
 * float32, exactly (bf16 is the top half of a float32), with integer ops
 * instead of the widening shuffles of q_load. */
#if defined(VEC_Q8_PAIRS)
#define Q8_PAIRS_(sd) ((sd) == PE_BF16)
PE_AI qu q8_pairs(const char *p, int64_t e) {
  qu u;
  memcpy(&u, p + 2 * e, sizeof u);
  return u;
}
#else
#define Q8_PAIRS_(sd) 0
#endif

PE_AI q8_scale q8_scan(int sd, const char *p, int64_t ses, int g) {
  vbi am[4];
  q4u m;
#if defined(VEC_Q8_PAIRS)
  if (Q8_PAIRS_(sd)) {
    /* a = |both|; max(a, a << 16) has max(|x_2i|, |x_2i+1|) in its top half
     * (the low half is cleared once, after the reduction) */
    for (int k = 0; k < 4; k++) {
      am[k] = (vbi)QU1(0);
      for (int i = 0; i < QV / 2 && k < g; i++) {
        qu a = q8_pairs(p, k * PE_Q8_0_BLOCK + i * 2 * VL) & 0x7fff7fffu;
        vbi b = vb_max_u32((vbi)a, (vbi)(a << 16));
        am[k] = i ? vb_max_u32(am[k], b) : b;
      }
    }
    m = (q4u)vb_hmax4_u32(am[0], am[1], am[2], am[3]) & 0xffff0000u;
  } else
#endif
  {
    for (int k = 0; k < 4; k++) {
      am[k] = (vbi)QU1(0);
      for (int i = 0; i < QV && k < g; i++) {
        vbi a = (vbi)((qu)q_load(sd, PE_AT(p, k * PE_Q8_0_BLOCK + i * VL, ses), VL) & 0x7fffffffu);
        am[k] = i ? vb_max_u32(am[k], a) : a;
      }
    }
    m = (q4u)vb_hmax4_u32(am[0], am[1], am[2], am[3]);
  }
  q8_scale r;
  r.bad = (q4i)(m > 0x7f7fffffu);                /* a NaN or an Inf in the block */
  q4f d = (q4f)(m & ~(q4u)r.bad) / 127.0f;        /* finite, >= 0 */
  q4i dz = (q4i)(d == 0.0f);
  q4f one = {1.0f, 1.0f, 1.0f, 1.0f};
  q4f id = one / (q4f)(((q4u)d & ~(q4u)dz) | ((q4u)one & (q4u)dz)); /* no 1/0 */
  q4i ok = ~dz & ~r.bad & (q4i)(id <= 0x1.fffffep127f);
  r.id = (q4f)((q4u)id & (q4u)ok);
  /* a bad block's d is the quiet NaN 0x7fc00000, whose f16 is
   * PE_Q8_0_NONFINITE_D (0x7e00); every finite d's f16 is at most 0x7c00
   * (Inf), so h + 0x0200 per lane carries into bit 15 only for bad blocks:
   * one scalar test for the whole group (q8_any_bad) */
  r.h = vb_f16x4((vf4)(((q4u)d & ~(q4u)r.bad) | (0x7fc00000u & (q4u)r.bad)));
  return r;
}

PE_AI int q8_any_bad(q8_scale sc) {
  return ((sc.h + 0x0200020002000200ull) & 0x8000800080008000ull) != 0;
}

PE_AI void q8_emit(int sd, const char *p, int64_t ses, uint8_t *blk, int g, q8_scale sc) {
  for (int k = 0; k < g; k++) {
    uint8_t *b = blk + k * PE_Q8_0_BYTES;
    uint16_t d16 = sc.bad[k] ? PE_Q8_0_NONFINITE_D : (uint16_t)(sc.h >> (16 * k));
    b[0] = (uint8_t)(d16 & 0xffu);
    b[1] = (uint8_t)(d16 >> 8);
    if (sc.bad[k]) {
      memset(b + 2, 0, PE_Q8_0_BLOCK);
      continue;
    }
    const qf iv = (qf)vf_set1(sc.id[k]);
    vbi q[QV];
    for (int i = 0; i < QV; i++)
      q[i] = (vbi)Q8_ROUND_(q_load(sd, PE_AT(p, k * PE_Q8_0_BLOCK + i * VL, ses), VL) * iv);
    vb_store_q8(b + 2, q);
  }
}

/* Two blocks' 2 * QV vectors of qs stored at p0 and p1 (the ISA's own where
 * it narrows both together). */
#if defined(VEC_Q8_STORE2)
#define Q8_STORE2_(p0, p1, q) vb_store_q8x2(p0, p1, q)
#else
#define Q8_STORE2_(p0, p1, q) (vb_store_q8(p0, q), vb_store_q8(p1, (q) + QV))
#endif

/* q8_emit of a full group of four finite blocks (!q8_any_bad): no per-block
 * test, each d one 16-bit store, the qs of two blocks narrowed together. */
PE_AI void q8_emit4(int sd, const char *p, int64_t ses, uint8_t *blk, q8_scale sc) {
  for (int k = 0; k < 4; k++) {
    uint16_t d16 = (uint16_t)(sc.h >> (16 * k));
    memcpy(blk + k * PE_Q8_0_BYTES, &d16, 2); /* little-endian */
  }
#if defined(VEC_Q8_PAIRS)
  if (Q8_PAIRS_(sd)) {
    /* each pair's two qs as the low and high 16 bits of a lane: element order */
    for (int k = 0; k < 4; k += 2) {
      vbi w[QV];
      for (int j = 0; j < 2; j++) {
        const qf iv = (qf)vf_set1(sc.id[k + j]);
        for (int i = 0; i < QV / 2; i++) {
          qu u = q8_pairs(p, (k + j) * PE_Q8_0_BLOCK + i * 2 * VL);
          qu qe = Q8_ROUND_((qf)(u << 16) * iv), qo = Q8_ROUND_((qf)(u & 0xffff0000u) * iv);
          w[j * (QV / 2) + i] = (vbi)((qe & 0xffffu) | (qo << 16));
        }
      }
      vb_store_q8w2(blk + k * PE_Q8_0_BYTES + 2, blk + (k + 1) * PE_Q8_0_BYTES + 2, w);
    }
    return;
  }
#endif
  for (int k = 0; k < 4; k += 2) {
    vbi q[2 * QV];
    for (int j = 0; j < 2; j++) {
      const qf iv = (qf)vf_set1(sc.id[k + j]);
      for (int i = 0; i < QV; i++)
        q[j * QV + i] =
            (vbi)Q8_ROUND_(q_load(sd, PE_AT(p, (k + j) * PE_Q8_0_BLOCK + i * VL, ses), VL) * iv);
    }
    Q8_STORE2_(blk + k * PE_Q8_0_BYTES + 2, blk + (k + 1) * PE_Q8_0_BYTES + 2, q);
  }
}

/* Groups of four blocks, software-pipelined: the scales of the group two
 * ahead (whose two dependent divides are the long chain) are started before
 * this group's qs, so the divides overlap the qs work instead of stalling
 * it (one ahead: 210 -> 183 us for the fused 512-key shift on Zen 4, two:
 * 180); then the short last group. The values are loaded again for the qs
 * (from L1). */
PE_AI void kvq_q8_gen(int sd, const void *src, void *dst, int64_t n) {
  const char *in = src;
  uint8_t *out = dst;
  const int64_t ses = pe__esize(sd), nb = n / PE_Q8_0_BLOCK, nf = nb / 4;
#define Q8_IN_(f) PE_AT(in, (f) * 4 * PE_Q8_0_BLOCK, ses)
  if (nf) {
    q8_scale sc = q8_scan(sd, Q8_IN_(0), ses, 4), s1 = sc;
    if (nf > 1) s1 = q8_scan(sd, Q8_IN_(1), ses, 4);
    for (int64_t f = 0; f < nf; f++) {
      q8_scale s2 = s1;
      if (f + 2 < nf) s2 = q8_scan(sd, Q8_IN_(f + 2), ses, 4);
      if (__builtin_expect(q8_any_bad(sc), 0))
        q8_emit(sd, Q8_IN_(f), ses, out + f * 4 * PE_Q8_0_BYTES, 4, sc);
      else
        q8_emit4(sd, Q8_IN_(f), ses, out + f * 4 * PE_Q8_0_BYTES, sc);
      sc = s1;
      s1 = s2;
    }
  }
  if (nb > 4 * nf) {
    int g = (int)(nb - 4 * nf);
    q8_emit(sd, Q8_IN_(nf), ses, out + nf * 4 * PE_Q8_0_BYTES, g, q8_scan(sd, Q8_IN_(nf), ses, g));
  }
#undef Q8_IN_
}

/* g <= 4 blocks (four at a time): their f16 d widened together
 * (vb_f32x4_f16: exact, pe_f16_to_f32's value; a signaling NaN comes out
 * quiet, which the product (float)qs * d does to it anyway), then the qs. */
PE_AI void q8_dgroup(int dd, const uint8_t *in, char *out, int64_t des, int g) {
  uint16_t hs[4] = {0, 0, 0, 0};
  for (int k = 0; k < g; k++) memcpy(&hs[k], in + k * PE_Q8_0_BYTES, 2); /* little-endian */
  uint64_t h;
  memcpy(&h, hs, 8);
  q4f d = (q4f)vb_f32x4_f16(h);
  for (int k = 0; k < g; k++) {
    const uint8_t *blk = in + k * PE_Q8_0_BYTES;
    const qf dv = (qf)vf_set1(d[k]);
    for (int i = 0; i < QV; i++) {
      qf y = __builtin_convertvector((qi)vb_load_s8(blk + 2 + i * VL), qf) * dv;
      vst(dd, PE_AT(out, (k * PE_Q8_0_BLOCK + i * VL), des), (vf)y);
    }
  }
}

PE_AI void kvd_q8_gen(int dd, const void *src, void *dst, int64_t n) {
  const uint8_t *in = src;
  char *out = dst;
  const int64_t des = pe__esize(dd), nb = n / PE_Q8_0_BLOCK;
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4)
    q8_dgroup(dd, in + b * PE_Q8_0_BYTES, PE_AT(out, b * PE_Q8_0_BLOCK, des), des, 4);
  if (b < nb)
    q8_dgroup(dd, in + b * PE_Q8_0_BYTES, PE_AT(out, b * PE_Q8_0_BLOCK, des), des, (int)(nb - b));
}

/* ---- the FP8 scales' amax ---- */

/* kv_format.h's pe__amax, VL lanes a step: each |x| as its bits (sign
 * cleared), NaN lanes (bits above +Inf's) as 0, the lanes' unsigned maximum,
 * then the four-way reduction of Q8_0's scan; a tail of n % VL values
 * through pe__amax itself. The same maximum of the same bits in any order:
 * every ISA returns scalar.c's float. */
PE_AI float amax_gen(const float *x, int64_t n) {
  qu m = QU1(0);
  int64_t i = 0;
  for (; i + VL <= n; i += VL) {
    qu a;
    memcpy(&a, x + i, sizeof a);
    a &= 0x7fffffffu;
    a &= (qu)((qi)a <= (qi)QU1(0x7f800000u)); /* a < 2^31: signed compare */
    m = (qu)vb_max_u32((vbi)m, (vbi)a);
  }
  q4u h = (q4u)vb_hmax4_u32((vbi)m, (vbi)m, (vbi)m, (vbi)m);
  uint32_t r = h[0];
  if (i < n) {
    float t = pe__amax(x + i, n - i);
    uint32_t tb;
    memcpy(&tb, &t, 4);
    r = tb > r ? tb : r;
  }
  float f;
  memcpy(&f, &r, 4);
  return f;
}
