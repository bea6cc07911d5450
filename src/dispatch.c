/* dispatch.c - pick one struct pe_isa for the process: the best path the
 * CPU runs (cpu.c), or the one named by PE_ISA / pe_force_isa(). Every kernel
 * is reached through that one pointer (kernels/isa.h). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kernels/isa.h"

typedef struct isa_entry {
  const pe_isa *isa; /* compiled into this build; isa->name is its PE_ISA name */
  unsigned needs;    /* PE_CPU_* bits the path requires */
} isa_entry;

static const isa_entry isa_entries[] = {
#if defined(PE_HAVE_AVX512)
    {&pe__isa_avx512, PE_CPU_AVX512},
#endif
#if defined(PE_HAVE_AVX2)
    {&pe__isa_avx2, PE_CPU_AVX2},
#endif
#if defined(PE_HAVE_NEON)
    {&pe__isa_neon, PE_CPU_NEON},
#endif
    {&pe__isa_scalar, 0},
};
#define N_ISA (sizeof isa_entries / sizeof isa_entries[0])

static _Atomic(const pe_isa *) selected;

static const pe_isa *best_available(void) {
  unsigned have = pe__cpu_features();
  for (size_t i = 0; i < N_ISA; i++)
    if ((isa_entries[i].needs & have) == isa_entries[i].needs) return isa_entries[i].isa;
  return &pe__isa_scalar;
}

static pe_status select_by_name(const char *name, const pe_isa **out) {
  if (!strcmp(name, "auto") || !*name) {
    *out = best_available();
    return PE_OK;
  }
  static const char *const known[] = {"scalar", "avx2", "avx512", "neon"};
  int is_known = 0;
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) is_known |= !strcmp(name, known[i]);
  if (!is_known)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "pe_force_isa: unknown ISA \"%.64s\" (expected scalar, avx2, avx512, neon or auto)",
                    name);
  unsigned have = pe__cpu_features();
  for (size_t i = 0; i < N_ISA; i++)
    if (!strcmp(isa_entries[i].isa->name, name)) {
      if ((isa_entries[i].needs & have) != isa_entries[i].needs)
        return pe__fail(PE_ERR_UNSUPPORTED, "pe_force_isa: this CPU cannot run the %s path", name);
      *out = isa_entries[i].isa;
      return PE_OK;
    }
  return pe__fail(PE_ERR_UNSUPPORTED, "pe_force_isa: the %s path is not compiled into this build",
                  name);
}

const pe_isa *pe__isa(void) {
  const pe_isa *k = atomic_load_explicit(&selected, memory_order_acquire);
  if (k) return k;
  const char *env = getenv("PE_ISA");
  const pe_isa *chosen = NULL;
  /* An unusable PE_ISA falls back to the best path: a library must not fail
   * every call because of an environment variable. */
  if (!env || select_by_name(env, &chosen) != PE_OK) chosen = best_available();
  const pe_isa *expected = NULL;
  if (!atomic_compare_exchange_strong(&selected, &expected, chosen)) return expected;
  return chosen;
}

PE_API const char *pe_isa_name(void) { return pe__isa()->name; }

PE_API pe_status pe_force_isa(const char *name) {
  if (!name) return pe__fail(PE_ERR_NULL_POINTER, "pe_force_isa: name is NULL");
  const pe_isa *k;
  pe_status st = select_by_name(name, &k);
  if (st != PE_OK) return st;
  atomic_store_explicit(&selected, k, memory_order_release);
  return PE_OK;
}
