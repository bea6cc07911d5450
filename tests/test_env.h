/* test_env.h - checks every test program makes at start, before any test.
 *
 * PE_ISA: the library falls back to the best path when PE_ISA names a path
 * this CPU or build cannot run (or no path at all), because a library must
 * not fail every call over an environment variable. A test run must not
 * fall back silently: `PE_ISA=neon ctest` on x86-64 would otherwise test
 * avx512 while its log claims neon. So every test program runs
 * pe_test_check_env() at start, before main(): tests/CMakeLists.txt
 * force-includes this header into every tests/test_*.c (-include), so no
 * test program can leave the check out. When PE_ISA is set, the path in use
 * (pe_isa_name(), which makes the first-use selection) must be the one it
 * names ("auto" accepts any), else the program exits with status 2 and a
 * message on stderr; when it matches, "# ISA path in use: <name>" is printed
 * so the log says which path ran.
 *
 * It runs once, at program start (a constructor: libposenc.so is loaded and
 * initialised before the executable's constructors run): a test that then
 * calls pe_force_isa() itself (test_isa.c) changes the path afterwards as it
 * likes.
 *
 * PE_TEST_FILTER: a cmocka name pattern ('*' and '?'); every test program
 * then runs only the tests it matches, e.g. PE_TEST_FILTER='*isas*' for the
 * ISA comparisons without the pool tests where threads are slow (qemu), or
 * 'identity_*_neon' in test_isa. */
#ifndef PE_TEST_ENV_H
#define PE_TEST_ENV_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "posenc.h"

/* cmocka's (this header comes before <cmocka.h>). */
void cmocka_set_test_filter(const char *pattern);

__attribute__((constructor)) static void pe_test_check_env(void) {
  const char *filter = getenv("PE_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  const char *want = getenv("PE_ISA");
  if (!want) return;
  const char *got = pe_isa_name();
  if (!got || (strcmp(want, "auto") != 0 && strcmp(want, got) != 0)) {
    fprintf(stderr,
            "FATAL: PE_ISA=\"%s\" but the library runs the \"%s\" path (the path is not "
            "available on this CPU or build, or the name is unknown); refusing to run tests "
            "that would claim to test \"%s\"\n",
            want, got ? got : "(null)", want);
    fflush(stderr);
    exit(2);
  }
  printf("# ISA path in use: %s\n", got);
  fflush(stdout);
}

/* The SIMD kernel paths, by their PE_ISA names, that the tests compare with
 * scalar (tests/isa_compare.h) in this order. A name this library does not
 * know yet (pe_force_isa: PE_ERR_INVALID_ARGUMENT) counts as a path this
 * build lacks, like one it knows but this build or CPU cannot run
 * (PE_ERR_UNSUPPORTED). */
#define PE_TEST_N_SIMD_PATHS 4
static inline const char *pe_test_simd_path(size_t i) {
  static const char *const names[PE_TEST_N_SIMD_PATHS] = {"avx2", "avx512", "avx512bf16", "neon"};
  return i < PE_TEST_N_SIMD_PATHS ? names[i] : NULL;
}

/* The path in use, forced again: pe_isa_name() names a path this process
 * runs, so it must come back. */
static inline void pe_test_restore_path(const char *name) {
  if (pe_force_isa(name) != PE_OK) {
    fprintf(stderr, "FATAL: cannot restore ISA path %s: %s\n", name, pe_last_error());
    exit(2);
  }
}

/* 1 if this build and CPU run a SIMD path besides scalar, else 0; the path
 * in use is left as it was. A test comparing SIMD paths with scalar calls
 * skip() when it is 0: nothing to compare is a reported skip, never a pass. */
static inline int pe_test_any_simd_path(void) {
  char was[32];
  snprintf(was, sizeof was, "%s", pe_isa_name());
  int any = 0;
  for (size_t i = 0; i < PE_TEST_N_SIMD_PATHS; i++)
    if (pe_force_isa(pe_test_simd_path(i)) == PE_OK) any = 1;
  pe_test_restore_path(was);
  return any;
}

#endif /* PE_TEST_ENV_H */
