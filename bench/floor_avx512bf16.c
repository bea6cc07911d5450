/* floor_avx512bf16.c - floor_avx512.c built again with -mavx512bf16: the
 * bf16 rows narrowed by vcvtne2ps2bf16 / vcvtneps2bf16 (bench/CMakeLists.txt
 * builds it only when the compiler has the flag). */
#define PB_FLOOR_BF16 1
#include "floor_avx512.c"
