/* internal_isa.h - for the test_internal_* programs, which call the kernels
 * of a struct pe_isa (src/kernels/isa.h) directly: the struct of a SIMD path
 * by its PE_ISA name, and one cmocka test per SIMD path of test_env.h's list
 * and check. A path this build or CPU lacks is a cmocka skip, never a pass.
 * Include after <cmocka.h> and "kernels/isa.h". */
#ifndef PE_INTERNAL_ISA_H
#define PE_INTERNAL_ISA_H

#include <stdio.h>

#include "isa_compare.h"

/* The struct of path `name`, or a cmocka skip with the library's reason
 * (not compiled in, the CPU features it lacks, or a name it does not know). */
static inline const pe_isa *isa_or_skip(const char *name) {
  const pe_isa *isa = pe__isa_lookup(name);
  if (!isa) {
    print_message("# %s: %s: skipped\n", name, pe_last_error());
    skip();
  }
  assert_string_equal(isa->name, name);
  return isa;
}

/* The path of a test added by add_path_tests. */
static inline const char *test_path(void **state) {
  return pe_test_simd_path(*(const size_t *)*state);
}

typedef struct path_check {
  const char *what;
  CMUnitTestFunction fn; /* reads its path with test_path(state) */
} path_check;

/* Appends one test a SIMD path and check, named "<path>_<what>", to tests
 * (names: room for PE_TEST_N_SIMD_PATHS * n_checks of them); returns the
 * number appended. */
static inline size_t add_path_tests(struct CMUnitTest *tests, char (*names)[48],
                                    const path_check *checks, size_t n_checks) {
  static const size_t ids[PE_TEST_N_SIMD_PATHS] = {0, 1, 2, 3};
  size_t n = 0;
  for (size_t i = 0; i < PE_TEST_N_SIMD_PATHS; i++)
    for (size_t k = 0; k < n_checks; k++, n++) {
      snprintf(names[n], sizeof names[n], "%s_%s", pe_test_simd_path(i), checks[k].what);
      tests[n] = (struct CMUnitTest){names[n], checks[k].fn, NULL, NULL, (void *)&ids[i]};
    }
  return n;
}

#endif /* PE_INTERNAL_ISA_H */
