/* avx2.c - the AVX2 + FMA + F16C kernels: the templates instantiated over
 * vec_avx2.h. Compiled with -mavx2 -mfma -mf16c (CMakeLists.txt); reached
 * only when cpu.c reports PE_CPU_AVX2. */
#include "vec_avx2.h"

#include "isa_template.h"
