/* floor_avx512bf16_eo.c - floor_avx512.c built a third time, with
 * AVX512-BF16 and the bf16 rows in even/odd order (PB_FLOOR_BF16_EO):
 * pe-bench times it beside floor_avx512bf16.c's natural order and takes the
 * faster (bench/CMakeLists.txt builds it only when the compiler has the
 * flag). */
#define PB_FLOOR_BF16 1
#define PB_FLOOR_BF16_EO 1
#include "floor_avx512.c"
