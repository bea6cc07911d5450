/* sincos_consts.h - constants of the angle reduction shared by every ISA. */
#ifndef PE_SINCOS_CONSTS_H
#define PE_SINCOS_CONSTS_H
/* 2*pi split in two doubles: with fma, (theta - k*hi) - k*lo is the reduced
 * angle to ~2^-100 relative for any k a position can produce. */
#define PE_2PI_HI 6.28318530717958623199592693708837032318115234375
#define PE_2PI_LO 2.44929359829470635445213186455000211641949889184615632812572417997256069650684234136e-16
#define PE_INV_2PI 0.159154943091895345608222100963757839053869247436523437500
/* A correct reduction gives |r| <= pi (plus rounding). Beyond ~2^55 radians
 * the double angle's ulp exceeds 2*pi: it carries no information about its
 * remainder, k*2pi no longer cancels, and r (or theta itself, when p*freq
 * overflows to Inf) is meaningless; the first-order fix would then blow up.
 * Such r is replaced by 0 (cos 1, sin 0): bounded, and the same on every ISA. */
#define PE_REDUCED_MAX 8.0
#endif
