/* kernel_common.h - what every src/kernels/<isa>.c shares: the interface
 * (isa.h), the conversions (convert.h), the per-element definitions of the
 * encodings (enc_common.h), the angle constants, and a few macros the
 * templates are written with. Not included by portable code. */
#ifndef PE_KERNEL_COMMON_H
#define PE_KERNEL_COMMON_H

#include <stdint.h>
#include <string.h>

#include "convert.h"
#include "enc_common.h"
#include "isa.h"
#include "quant_common.h"
#include "sincos_consts.h"

/* Every helper the kernels are built from is forced inline, so a dtype or
 * style passed as a constant (the `dt`, `sd`, `dd`, `style` parameters of the
 * templates) selects one path at compile time: each kernel of struct pe_isa
 * is one loop with its row body inlined, no per-element or per-row branch on
 * the dtype, and no call per row (a decode step is ~40 rows of a few
 * vectors each, where a call costs as much as the rotation). */
#define PE_AI static inline __attribute__((always_inline))

#define PE_CAT_(a, b) a##b
#define PE_CAT(a, b) PE_CAT_(a, b)
#define PE_STR_(a) #a
#define PE_STR(a) PE_STR_(a)

/* Bytes of one element of dtype dt (PE_F32, PE_F16, PE_BF16 or an ISA's
 * private variant of bf16 > PE_BF16). */
PE_AI int64_t pe__esize(int dt) { return dt == PE_F32 ? 4 : 2; }

/* The QK-norm's weight pointer advanced by k elements, only for the modes
 * that have weights (mode a constant; otherwise w may be NULL and stays so). */
PE_AI const float *wat(int mode, const float *w, int64_t k) {
  return mode == PE_NORM_W || mode == PE_NORM_W1 ? w + k : w;
}

/* Pointer to element i of a row of elements of es bytes. */
#define PE_AT(p, i, es) ((p) + (int64_t)(i) * (es))

#endif
