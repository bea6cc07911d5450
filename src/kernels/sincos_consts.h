/* sincos_consts.h - constants of the angle reduction shared by every ISA
 * (the algorithm: isa.h, pe_rope_sincos_fn).
 *
 * PE_2PI_HI is 2pi rounded to double (a multiple of 2^-50), PE_2PI_LO the
 * double nearest 2pi - PE_2PI_HI, so |2pi - HI - LO| < 2^-105. The angle
 * p*f is the double-double th + tl (tl = fma(p, f, -th), exact).
 *   fma(-k, HI, th) is exact: |th| >= 4 is a multiple of 2^-50 (below 4,
 *   of 2^-52, and |k| <= 1), k*HI a multiple of 2^-50, and their exact
 *   difference is below 2^3: k = nearbyint(th*INV_2PI) is within 1 of
 *   th/2pi while |th/2pi| < 2^52 (the product's relative error is 2^-53),
 *   so |th - k*HI| <= 2pi + 2^-48 - a multiple of 2^-50 below 2^3 has at
 *   most 53 significant bits.
 *   The rest is three roundings of values below 8 (2^-51 each) and k times
 *   the error of HI + LO (2^52 * 2^-105 = 2^-53).
 * So r is p*f mod 2pi to about 2e-15 for |p*f| < 2^52 * 2pi - no further parts of
 * 2pi are needed with an FMA, and no Payne-Hanek: a Cody-Waite split into
 * short parts (each k*part exact without an FMA) would only add operations.
 * Measured against mpmath (tests/gen_exact_angles.py): the float results are
 * within SLEEF's accuracy at every position < 2^53. */
#ifndef PE_SINCOS_CONSTS_H
#define PE_SINCOS_CONSTS_H
#define PE_2PI_HI 6.28318530717958623199592693708837032318115234375
#define PE_2PI_LO 2.44929359829470635445213186455000211641949889184615632812572417997256069650684234136e-16
#define PE_INV_2PI 0.159154943091895345608222100963757839053869247436523437500
/* A correct reduction gives |r| <= pi (up to 2pi when the quotient's
 * rounding moves k by one, possible from |p*f| ~ 2^51 * 2pi). Beyond |k| ~ 2^53 the quotient th*INV_2PI is off
 * by more than one; beyond 2^1023 radians p*f overflows to Inf: r (or theta
 * itself) is then meaningless and the first-order fix would blow up. Such r
 * is replaced by 0 (cos 1, sin 0): bounded, and the same on every ISA. */
#define PE_REDUCED_MAX 8.0
#endif
