/* enc_kernels.h - kernel table of the non-RoPE encodings (ALiBi, T5,
 * sinusoidal, learned): one instance per ISA in src/kernels/enc_<isa>.c,
 * selected together with the RoPE table (dispatch.c). Every ISA must be
 * bit-identical to enc_scalar.c. */
#ifndef PE_ENC_KERNELS_H
#define PE_ENC_KERNELS_H

#include <stdint.h>

#include "../internal.h"

typedef struct pe_enc_kernels {
  const char *name;
  /* Filled by the encodings issue. */
  int reserved;
} pe_enc_kernels;

extern PE_HIDDEN const pe_enc_kernels pe__enc_kernels_scalar;
/* Weak: an ISA whose enc_<isa>.c is not built falls back to scalar. */
extern PE_HIDDEN const pe_enc_kernels pe__enc_kernels_avx2 __attribute__((weak));
extern PE_HIDDEN const pe_enc_kernels pe__enc_kernels_avx512 __attribute__((weak));
extern PE_HIDDEN const pe_enc_kernels pe__enc_kernels_neon __attribute__((weak));

/* The table of the selected ISA (same selection as pe__kernels()). */
PE_HIDDEN const pe_enc_kernels *pe__enc_kernels(void);

#endif
