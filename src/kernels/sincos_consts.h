/* sincos_consts.h - constants of the angle reduction shared by every ISA. */
#ifndef PE_SINCOS_CONSTS_H
#define PE_SINCOS_CONSTS_H
/* 2*pi split in two doubles: with fma, (theta - k*hi) - k*lo is the reduced
 * angle to ~2^-100 relative for any k a position can produce. */
#define PE_2PI_HI 6.28318530717958623199592693708837032318115234375
#define PE_2PI_LO 2.44929359829470635445213186455000211641949889184615632812572417997256069650684234136e-16
#define PE_INV_2PI 0.159154943091895345608222100963757839053869247436523437500
#endif
