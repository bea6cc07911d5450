/* enc_scalar.c - reference kernels of the non-RoPE encodings. */
#include "enc_kernels.h"

const pe_enc_kernels pe__enc_kernels_scalar = {.name = "scalar"};
