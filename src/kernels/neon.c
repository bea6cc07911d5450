/* neon.c - the AArch64 AdvSIMD kernels: the templates instantiated over
 * vec_neon.h. AdvSIMD is baseline on AArch64: no extra flags, no probe. */
#include "vec_neon.h"

#include "isa_template.h"
