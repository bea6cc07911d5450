/* avx512bf16.c - avx512.c compiled a second time, with -mavx512bf16
 * (CMakeLists.txt): the path "avx512bf16" (vec_avx512.h picks the struct's
 * name and the bf16 rounding from __AVX512BF16__). */
#include "avx512.c"
