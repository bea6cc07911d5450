/* test_internal_cpu.c - the CPU probes the engine's walks read (base/cpu.c):
 * the AMD family against what Linux reports in /proc/cpuinfo (vendor_id and
 * "cpu family", which the kernel computes from cpuid leaf 1 itself), and the
 * cache sizes' contract (positive, the L3 not below the L2 it backs). */
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
/* The AMD family of /proc/cpuinfo's first processor: its "cpu family" when
 * vendor_id is AuthenticAMD, 0 for another vendor; -1 when the file says
 * neither (a skip). */
static int cpuinfo_amd_family(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return -1;
  char line[512], vendor[64] = "";
  int family = -1;
  while (fgets(line, sizeof line, f) && (!vendor[0] || family < 0)) {
    if (!vendor[0] && sscanf(line, "vendor_id : %63s", vendor) == 1) continue;
    if (family < 0 && sscanf(line, "cpu family : %d", &family) == 1) continue;
  }
  fclose(f);
  if (!vendor[0]) return -1;
  return strcmp(vendor, "AuthenticAMD") == 0 ? family : 0;
}
#endif

static void test_amd_family(void **state) {
  (void)state;
  const int got = pe__cpu_amd_family();
#if defined(__x86_64__) || defined(__i386__)
  const int want = cpuinfo_amd_family();
  if (want < 0) {
    print_message("# /proc/cpuinfo names no vendor: nothing to compare\n");
    skip();
  }
  print_message("# AMD family: %#x (0: not AMD)\n", (unsigned)got);
  assert_int_equal(got, want);
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
