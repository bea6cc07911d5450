/* cpu.c - probe CPU features once. On x86 cpuid alone is not enough: the OS
 * must have enabled the register state (XCR0), as BLAKE3 and libdeflate check. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t read_xcr0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

static unsigned probe(void) {
  unsigned a, b, c, d, f = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  int has_osxsave = (c >> 27) & 1, has_fma = (c >> 12) & 1, has_f16c = (c >> 29) & 1;
  if (!has_osxsave) return 0;
  uint64_t xcr0 = read_xcr0();
  int ymm_ok = (xcr0 & 0x6) == 0x6;     /* XMM (bit 1) and YMM (bit 2) state */
  int zmm_ok = (xcr0 & 0xe6) == 0xe6;   /* + opmask, ZMM_Hi256, Hi16_ZMM (5,6,7) */
  if (__get_cpuid_max(0, NULL) < 7) return 0;
  __cpuid_count(7, 0, a, b, c, d);
  int avx2 = (b >> 5) & 1;
  int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1,
      avx512vl = (b >> 31) & 1;
  int avx512fp16 = (d >> 23) & 1;
  if (ymm_ok && avx2 && has_fma && has_f16c) f |= PE_CPU_AVX2;
  if (zmm_ok && (f & PE_CPU_AVX2) && avx512f && avx512dq && avx512bw && avx512vl) {
    f |= PE_CPU_AVX512;
    if (avx512fp16) f |= PE_CPU_AVX512FP16;
    unsigned a1, b1, c1, d1;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    if ((a1 >> 5) & 1) f |= PE_CPU_AVX512BF16;
  }
  return f;
}
#elif defined(__aarch64__)
static unsigned probe(void) { return PE_CPU_NEON; } /* AdvSIMD is mandatory on AArch64 */
#else
static unsigned probe(void) { return 0; }
#endif

/* The features PE_CPU_DISABLE names (a comma- or space-separated list of
 * avx2, avx512, avx512bf16, avx512fp16, neon), with what each implies: a CPU
 * without AVX2 is given no AVX-512, one without AVX-512 none of its
 * extensions. So a test run, a benchmark or a user who suspects a path can
 * see the library as it behaves on an older CPU. Unknown names are ignored
 * (a library does not fail over an environment variable); the path then in
 * use is pe_isa_name(). */
static const struct {
  const char *name;
  unsigned bits;
} disable_names[] = {
    {"avx2", PE_CPU_AVX2 | PE_CPU_AVX512 | PE_CPU_AVX512FP16 | PE_CPU_AVX512BF16},
    {"avx512", PE_CPU_AVX512 | PE_CPU_AVX512FP16 | PE_CPU_AVX512BF16},
    {"avx512bf16", PE_CPU_AVX512BF16},
    {"avx512fp16", PE_CPU_AVX512FP16},
    {"neon", PE_CPU_NEON},
};

static unsigned disabled_by_env(void) {
  const char *env = getenv("PE_CPU_DISABLE");
  unsigned off = 0;
  if (!env) return 0;
  while (*env) {
    size_t n = strcspn(env, ", ");
    for (size_t i = 0; i < sizeof disable_names / sizeof disable_names[0]; i++)
      if (n == strlen(disable_names[i].name) && !strncmp(env, disable_names[i].name, n))
        off |= disable_names[i].bits;
    env += n;
    env += strspn(env, ", ");
  }
  return off;
}

static _Atomic unsigned features, hidden;

unsigned pe__cpu_features(void) {
  unsigned f = atomic_load_explicit(&features, memory_order_relaxed);
  if (!(f & PE_CPU_KNOWN)) {
    unsigned found = probe(), off = disabled_by_env();
    atomic_store_explicit(&hidden, found & off, memory_order_relaxed);
    f = (found & ~off) | PE_CPU_KNOWN;
    atomic_store_explicit(&features, f, memory_order_relaxed);
  }
  return f;
}

void pe__cpu_describe(unsigned bits, char *out, size_t cap) {
  static const struct {
    unsigned bit;
    const char *what;
  } names[] = {
      {PE_CPU_AVX2, "AVX2+FMA+F16C with YMM state enabled by the OS"},
      {PE_CPU_AVX512, "AVX-512F/BW/DQ/VL with ZMM state enabled by the OS"},
      {PE_CPU_AVX512BF16, "AVX512-BF16"},
      {PE_CPU_AVX512FP16, "AVX512-FP16"},
      {PE_CPU_NEON, "AdvSIMD (NEON)"},
  };
  unsigned off = (pe__cpu_features(), atomic_load_explicit(&hidden, memory_order_relaxed));
  size_t used = 0;
  out[0] = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!(bits & names[i].bit) || used >= cap) continue;
    int w = snprintf(out + used, cap - used, "%s%s%s", used ? ", " : "", names[i].what,
                     off & names[i].bit ? " (hidden by PE_CPU_DISABLE)" : "");
    if (w > 0) used += (size_t)w;
  }
}

/* The size of cache level `level` (2 or 3) of cpu0 in Linux's sysfs (the
 * index whose level file says `level`), 0 when it says nothing. */
static int64_t sysfs_cache(int level) {
  for (int i = 0; i < 8; i++) {
    char path[64];
    int lv = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    if (fscanf(f, "%d", &lv) != 1) lv = 0;
    fclose(f);
    if (lv != level) continue;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    if (!(f = fopen(path, "r"))) return 0;
    long n = 0;
    char unit = 0;
    int64_t v = 0;
    if (fscanf(f, "%ld%c", &n, &unit) >= 1 && n > 0)
      v = unit == 'K' ? (int64_t)n << 10 : unit == 'M' ? (int64_t)n << 20 : n;
    fclose(f);
    return v;
  }
  return 0;
}

/* The L2 from the C library (glibc reads cpuid on x86), else sysfs
 * (aarch64 glibc reports 0), else PE_CPU_L2_DEFAULT. */
static int64_t probe_l2(void) {
  long v = -1;
#if defined(_SC_LEVEL2_CACHE_SIZE)
  v = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
  if (v > 0) return v;
  int64_t s = sysfs_cache(2);
  return s > 0 ? s : PE_CPU_L2_DEFAULT;
}

static _Atomic int64_t l2_bytes;

int64_t pe__cpu_l2_bytes(void) {
  int64_t v = atomic_load_explicit(&l2_bytes, memory_order_relaxed);
  if (!v) {
    v = probe_l2();
    atomic_store_explicit(&l2_bytes, v, memory_order_relaxed);
  }
  return v;
}

static _Atomic int64_t llc_bytes;

int64_t pe__cpu_llc_bytes(void) {
  int64_t v = atomic_load_explicit(&llc_bytes, memory_order_relaxed);
  if (!v) {
    /* sysfs: the L3 one core shares (AMD EPYC Zen 3: 32 MiB, where glibc's
     * sysconf reported the socket's 256 MiB). Arm servers often list no
     * L3 there though they have a system cache: then the default, not the
     * L2, which would send mid-sized calls to the memory-stream walk. */
    v = sysfs_cache(3);
    if (v <= 0) v = PE_CPU_LLC_DEFAULT;
    atomic_store_explicit(&llc_bytes, v, memory_order_relaxed);
  }
  return v;
}

#if defined(__x86_64__) || defined(__i386__)
static int probe_amd_family(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
  /* "AuthenticAMD" in ebx, edx, ecx */
  if (b != 0x68747541u || d != 0x69746e65u || c != 0x444d4163u) return 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  int family = (int)((a >> 8) & 0xf);
  return family == 0xf ? family + (int)((a >> 20) & 0xff) : family;
}
#else
static int probe_amd_family(void) { return 0; }
#endif

static _Atomic int amd_family = -1;

int pe__cpu_amd_family(void) {
  int v = atomic_load_explicit(&amd_family, memory_order_relaxed);
  if (v < 0) {
    v = probe_amd_family();
    atomic_store_explicit(&amd_family, v, memory_order_relaxed);
  }
  return v;
}
