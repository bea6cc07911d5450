/* sincosf_template.h - SLEEF's float sincos u10 (Sleef_sincosf*_u10, the
 * FMA builds of SLEEF 3.5's xsincosf_u1) written with the vf_ primitives,
 * for arguments |d| < 125 (SLEEF's TRIGRANGEMAX2f: its Cody-Waite path; the
 * table build passes |d| <= PE_REDUCED_MAX). Operation for operation what
 * the library's avx512f, avx2, advsimd and purecfma variants execute on that
 * path (read from their disassembly: same constants, same order, every add
 * and multiply rounded once, fma where SLEEF uses one), so the results are
 * the library's bits; scalar.c keeps calling SLEEF itself and
 * test_internal_kernels compares the two. Inlined, the call costs nothing:
 * the library's out-of-line call spilled every vector register of the
 * caller, returned through memory and tested the range for the slow path
 * (about a quarter of the table build's instructions).
 *
 * The ISA header defines, besides the usual vf_ operations: vf_sub, vf_fms
 * (a*b - c, one rounding), vf_rint (to nearest even) and
 * vf_sincosf_finish(d, u, rx, ry, &s, &c) (-0 kept for rx, then the
 * quadrant q = (int)u: sin = q even ? rx : ry, cos the other, with the sign
 * flips of bit 1 of q and of q + 1). */

#define PE_SCF_(bits) vf_set1(pe_bits_f32(bits))
/* Each statement for the N (a constant) vectors in turn: N independent
 * chains side by side, so the out-of-order window holds more than one (the
 * reduction and SLEEF's float-float steps are ~40 dependent operations). */
#define PE_EACH_(i) _Pragma("GCC unroll 8") for (int i = 0; i < N; i++)

/* (sin, cos) of d[0..N), |d| < 125. */
PE_AI void vf_sincosf_u10(int N, const vf *d, vf *s_out, vf *c_out) {
  vf u[SINCOS_UNITS], v[SINCOS_UNITS], b[SINCOS_UNITS], sx[SINCOS_UNITS], sy[SINCOS_UNITS];
  vf tx[SINCOS_UNITS], ty[SINCOS_UNITS], s[SINCOS_UNITS], rx[SINCOS_UNITS], ry[SINCOS_UNITS];
  /* u = rint(d * 2/pi); t = d - u*pi/2 as a float-float, pi/2 in 3 parts */
  PE_EACH_(i) u[i] = vf_rint(vf_mul(d[i], PE_SCF_(0x3f22f983u)));
  PE_EACH_(i) v[i] = vf_fma(u[i], PE_SCF_(0xbfc90e00u), d[i]);
  PE_EACH_(i) b[i] = vf_mul(u[i], PE_SCF_(0xb86d5000u));
  PE_EACH_(i) { /* dfadd2(v, b) */
    sx[i] = vf_add(v[i], b[i]);
    vf bv = vf_sub(sx[i], v[i]);
    sy[i] = vf_add(vf_sub(b[i], bv), vf_sub(v[i], vf_sub(sx[i], bv)));
  }
  PE_EACH_(i) { /* dfadd((sx, sy), u * pi/2's third part) */
    vf c3 = vf_mul(u[i], PE_SCF_(0xb0885a31u));
    tx[i] = vf_add(c3, sx[i]);
    ty[i] = vf_add(vf_add(c3, vf_sub(sx[i], tx[i])), sy[i]);
  }
  PE_EACH_(i) { /* s = t^2 as a float */
    vf txy = vf_mul(tx[i], ty[i]);
    s[i] = vf_fma(tx[i], tx[i], vf_add(txy, txy));
  }
  PE_EACH_(i) { /* sin: t + t*s*P(s) */
    vf ps = vf_fma(s[i], PE_SCF_(0xb94ca65bu), PE_SCF_(0x3c08839au));
    ps = vf_fma(s[i], ps, PE_SCF_(0xbe2aaaa2u));
    ps = vf_mul(vf_mul(tx[i], s[i]), ps);
    vf xx = vf_add(tx[i], ps);
    vf xy = vf_add(vf_add(ps, vf_sub(tx[i], xx)), ty[i]);
    rx[i] = vf_add(xx, xy);
  }
  PE_EACH_(i) { /* cos: 1 + s*Q(s), the product as a float-float */
    vf pc = vf_fma(s[i], PE_SCF_(0xb491ed89u), PE_SCF_(0x37d0078bu));
    pc = vf_fma(s[i], pc, PE_SCF_(0xbab60b58u));
    pc = vf_fma(s[i], pc, PE_SCF_(0x3d2aaaaau));
    pc = vf_fma(s[i], pc, vf_set1(-0.5f));
    vf mx = vf_mul(s[i], pc);
    vf my = vf_fms(s[i], pc, mx);
    vf one = vf_set1(1.0f);
    vf ox = vf_add(mx, one);
    ry[i] = vf_add(ox, vf_add(my, vf_add(mx, vf_sub(one, ox))));
  }
  PE_EACH_(i) vf_sincosf_finish(d[i], u[i], rx[i], ry[i], &s_out[i], &c_out[i]);
}

#undef PE_SCF_
