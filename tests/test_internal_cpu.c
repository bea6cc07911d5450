/* test_internal_cpu.c - the CPU probes the engine's walks read (base/cpu.c):
 * the AMD family against cpuid decoded here and, where the process sees the
 * host's CPU, against what Linux reports in /proc/cpuinfo (vendor_id and
 * "cpu family", the kernel's own decoding), and the cache sizes' contract
 * (positive, the L3 not below the L2 it backs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* /proc/cpuinfo's first vendor_id (into vendor, "" if none) and "cpu
 * family"; 0 unless the file gives both. */
static int cpuinfo_read(char vendor[64], int *family) {
  char line[512];
  vendor[0] = 0;
  *family = -1;
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return 0;
  while (fgets(line, sizeof line, f) && (!vendor[0] || *family < 0)) {
    if (!vendor[0] && sscanf(line, "vendor_id : %63s", vendor) == 1) continue;
    if (*family < 0 && sscanf(line, "cpu family : %d", family) == 1) continue;
  }
  fclose(f);
  return vendor[0] && *family >= 0;
}

/* The vendor string and display family of the cpuid this process sees
 * (under valgrind: its synthetic CPU, not the host's), decoded as the
 * Intel and AMD manuals give it: base family, plus the extended family
 * when the base is 0xf. */
static void cpuid_read(char vendor[13], int *family) {
  unsigned a, b, c, d;
  __cpuid(0, a, b, c, d);
  memcpy(vendor, &b, 4);
  memcpy(vendor + 4, &d, 4);
  memcpy(vendor + 8, &c, 4);
  vendor[12] = 0;
  __cpuid(1, a, b, c, d);
  const int base = (int)((a >> 8) & 0xf), ext = (int)((a >> 20) & 0xff);
  *family = base == 0xf ? base + ext : base;
}
#endif

static void test_amd_family(void **state) {
  (void)state;
  const int got = pe__cpu_amd_family();
  print_message("# AMD family: %#x (0: not AMD)\n", (unsigned)got);
#if defined(__x86_64__) || defined(__i386__)
  char vendor[13], info_vendor[64];
  int family, info_family;
  cpuid_read(vendor, &family);
  assert_int_equal(got, strcmp(vendor, "AuthenticAMD") == 0 ? family : 0);
  /* Linux's own decoding of the same CPU, where this process sees it too
   * (not under an emulator that reports another vendor) */
  if (cpuinfo_read(info_vendor, &info_family) && strcmp(info_vendor, vendor) == 0)
    assert_int_equal(got, strcmp(vendor, "AuthenticAMD") == 0 ? info_family : 0);
  else
    print_message("# /proc/cpuinfo says %s, cpuid here %s: compared with cpuid only\n",
                  info_vendor[0] ? info_vendor : "nothing", vendor);
#else
  assert_int_equal(got, 0); /* other ISAs: no AMD x86 family, whatever the host says */
#endif
  assert_int_equal(pe__cpu_amd_family(), got); /* probed once, the same after */
}

static void test_cache_sizes(void **state) {
  (void)state;
  const int64_t l2 = pe__cpu_l2_bytes(), llc = pe__cpu_llc_bytes();
  print_message("# L2 %lld bytes, last-level cache %lld bytes\n", (long long)l2, (long long)llc);
  assert_true(l2 > 0);
  assert_true(llc >= l2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_amd_family),
      cmocka_unit_test(test_cache_sizes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
