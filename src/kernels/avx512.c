/* avx512.c - the AVX-512 (F/BW/DQ/VL) kernels: the templates instantiated
 * over vec_avx512.h. Compiled with -mavx512f -mavx512bw -mavx512dq
 * -mavx512vl (CMakeLists.txt); reached only when cpu.c reports
 * PE_CPU_AVX512. The in-place bf16 rows round with AVX512-BF16's conversion
 * when the CPU has it (probed apart from the base AVX-512 set), with the
 * integer rounding otherwise; both give the same bits. */
#include "../cpu.h"
#include "vec_avx512.h"

static void rope_rows_bf16_select(const pe_rope_block *b, void *data, int64_t hs, int64_t ts);
#define ISA_ROPE_ROWS_BF16 rope_rows_bf16_select

#include "isa_template.h"

BF16_TARGET static void rope_rows_bf16cvt(const pe_rope_block *b, void *data, int64_t hs,
                                          int64_t ts) {
  rows_gen(PE_BF16_CVT, b, data, hs, ts);
}

static void rope_rows_bf16_select(const pe_rope_block *b, void *data, int64_t hs, int64_t ts) {
  if (pe__cpu_features() & PE_CPU_AVX512BF16)
    rope_rows_bf16cvt(b, data, hs, ts);
  else
    rope_rows_bf16_avx512(b, data, hs, ts);
}
