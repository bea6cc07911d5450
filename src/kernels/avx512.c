/* avx512.c - the AVX-512 (F/BW/DQ/VL) kernels: the templates instantiated
 * over vec_avx512.h. Compiled twice (CMakeLists.txt): on its own with
 * -mavx512f -mavx512bw -mavx512dq -mavx512vl, the path "avx512"
 * (pe__isa_avx512, reached when cpu.c reports PE_CPU_AVX512), and through
 * avx512bf16.c with -mavx512bf16 added, the path "avx512bf16"
 * (pe__isa_avx512bf16, reached when it also reports PE_CPU_AVX512BF16),
 * whose kernels that write bf16 (in-place rows, cache-store rows, convert,
 * norm_row, kv_dequant, add_row, alibi_row) round with vcvtne2ps2bf16: on
 * Zen 4 it halves the cost of the rounding (69 -> 37 cycles per 128-channel
 * in-place row). Both give the scalar path's bits; two structs rather than a
 * choice per call, so that on a CPU with AVX512-BF16 each path can be forced
 * (PE_ISA) and tested, and no call pays for a second dispatch. */
#include "vec_avx512.h"

#include "isa_template.h"
