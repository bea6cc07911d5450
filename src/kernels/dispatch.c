/* dispatch.c - pick one struct pe_isa for the process: the best path the
 * CPU runs (cpu.c), or the one named by PE_ISA / pe_force_isa(). Every kernel
 * is reached through that one pointer (kernels/isa.h). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/isa.h"

typedef struct isa_entry {
  const char *name; /* its PE_ISA name */
  unsigned needs;   /* PE_CPU_* bits the path requires */
} isa_entry;

/* Every path the library knows, best first: the first one this build has and
 * this CPU runs is the default. */
static const isa_entry isa_entries[] = {
    {"avx512bf16", PE_CPU_AVX512 | PE_CPU_AVX512BF16},
    {"avx512", PE_CPU_AVX512},
    {"avx2", PE_CPU_AVX2},
    {"neon", PE_CPU_NEON},
    {"scalar", 0},
};
#define N_ISA (sizeof isa_entries / sizeof isa_entries[0])

/* The struct of entry i, NULL when this build does not compile it. */
static const pe_isa *compiled(size_t i) {
  switch (i) {
#if defined(PE_HAVE_AVX512BF16)
    case 0: return &pe__isa_avx512bf16;
#endif
#if defined(PE_HAVE_AVX512)
    case 1: return &pe__isa_avx512;
#endif
#if defined(PE_HAVE_AVX2)
    case 2: return &pe__isa_avx2;
#endif
#if defined(PE_HAVE_NEON)
    case 3: return &pe__isa_neon;
#endif
    case 4: return &pe__isa_scalar;
    default: return NULL;
  }
}

static _Atomic(const pe_isa *) selected;

static const pe_isa *best_available(void) {
  unsigned have = pe__cpu_features();
  for (size_t i = 0; i < N_ISA; i++)
    if (compiled(i) && (isa_entries[i].needs & have) == isa_entries[i].needs) return compiled(i);
  return &pe__isa_scalar;
}

/* `who` names the caller in the message. */
static pe_status select_by_name(const char *who, const char *name, const pe_isa **out) {
  if (!strcmp(name, "auto") || !*name) {
    *out = best_available();
    return PE_OK;
  }
  size_t i = 0;
  while (i < N_ISA && strcmp(isa_entries[i].name, name)) i++;
  if (i == N_ISA)
    return pe__fail(PE_ERR_INVALID_ARGUMENT,
                    "%s: unknown ISA \"%.64s\" (expected scalar, avx2, avx512, avx512bf16, neon "
                    "or auto)",
                    who, name);
  if (!compiled(i))
    return pe__fail(PE_ERR_UNSUPPORTED, "%s: the %s path is not compiled into this build", who,
                    name);
  unsigned missing = isa_entries[i].needs & ~pe__cpu_features();
  if (missing) {
    char what[160];
    pe__cpu_describe(missing, what, sizeof what);
    return pe__fail(PE_ERR_UNSUPPORTED, "%s: this CPU cannot run the %s path: it has no %s", who,
                    name, what);
  }
  *out = compiled(i);
  return PE_OK;
}

const pe_isa *pe__isa_lookup(const char *name) {
  const pe_isa *k = NULL;
  return select_by_name("pe__isa_lookup", name, &k) == PE_OK ? k : NULL;
}

const pe_isa *pe__isa(void) {
  const pe_isa *k = atomic_load_explicit(&selected, memory_order_acquire);
  if (k) return k;
  const char *env = getenv("PE_ISA");
  const pe_isa *chosen = NULL;
  /* An unusable PE_ISA falls back to the best path: a library must not fail
   * every call because of an environment variable. */
  if (!env || select_by_name("PE_ISA", env, &chosen) != PE_OK) chosen = best_available();
  const pe_isa *expected = NULL;
  if (!atomic_compare_exchange_strong(&selected, &expected, chosen)) return expected;
  return chosen;
}

PE_API const char *pe_isa_name(void) { return pe__isa()->name; }

PE_API pe_status pe_force_isa(const char *name) {
  if (!name) return pe__fail(PE_ERR_NULL_POINTER, "pe_force_isa: name is NULL");
  const pe_isa *k;
  pe_status st = select_by_name("pe_force_isa", name, &k);
  if (st != PE_OK) return st;
  atomic_store_explicit(&selected, k, memory_order_release);
  return PE_OK;
}
