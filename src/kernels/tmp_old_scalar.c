/* TEMPORARY bring-up shim. */
#include "kernels.h"
#include "enc_kernels.h"
pe_rope_sincos_fn pe__tmp_sincos(void);
pe_rope_sincos_fn pe__tmp_sincos(void) { return pe__kernels()->rope_sincos; }
