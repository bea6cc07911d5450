/* cpu.h - CPU feature probe (cpu.c). */
#ifndef PE_CPU_H
#define PE_CPU_H
#include "base/internal.h"

#define PE_CPU_KNOWN 0x80000000u /* set once probed: "no features" != "not probed" */
#define PE_CPU_AVX2 0x1u         /* AVX2 + FMA + F16C, YMM state enabled by the OS */
#define PE_CPU_AVX512 0x2u       /* AVX-512 F/BW/DQ/VL, ZMM/opmask state enabled */
#define PE_CPU_AVX512FP16 0x4u
#define PE_CPU_AVX512BF16 0x8u
#define PE_CPU_NEON 0x10u        /* AdvSIMD (always on aarch64) */

/* The features found, less those PE_CPU_DISABLE hides (cpu.c), with
 * PE_CPU_KNOWN set. */
PE_HIDDEN unsigned pe__cpu_features(void);
/* `bits` (PE_CPU_*) in words, for an error message: "AVX-512F/BW/DQ/VL with
 * ZMM state enabled by the OS, AVX512-BF16", each marked when the CPU has it
 * but PE_CPU_DISABLE hides it. */
PE_HIDDEN void pe__cpu_describe(unsigned bits, char *out, size_t cap);

/* Bytes of the L2 cache of one core, probed once (PE_CPU_L2_DEFAULT when the
 * system does not say): the engine sizes the blocks whose cos/sin rows it
 * keeps in L2 from it, so no CPU's cache size is built in. */
#define PE_CPU_L2_DEFAULT (256 * 1024) /* the smallest per-core L2 of current server cores */
PE_HIDDEN int64_t pe__cpu_l2_bytes(void);

/* Bytes of the L3 cache the calling core shares (Linux's sysfs), probed
 * once, PE_CPU_LLC_DEFAULT when the system does not list one: the engine
 * walks calls too large for it in several memory streams (engine.c's
 * block_streams). */
#define PE_CPU_LLC_DEFAULT (32 * 1024 * 1024)
PE_HIDDEN int64_t pe__cpu_llc_bytes(void);

/* The family of an AMD x86 CPU (cpuid leaf 1, base plus extended family:
 * 0x17 Zen 1/2, 0x19 Zen 3/4, 0x1a Zen 5), 0 for other vendors and ISAs,
 * probed once: the engine's walk of calls larger than the last-level cache
 * follows what each generation's prefetchers were measured to prefer
 * (engine.c's run_walk). */
PE_HIDDEN int pe__cpu_amd_family(void);
#endif
