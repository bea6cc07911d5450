/* version.c - the version of the library that is actually loaded. */
#include "base/internal.h"

#define PE_STR2(x) #x
#define PE_STR(x) PE_STR2(x)

PE_API const char *pe_version_string(void) {
  return PE_STR(PE_VERSION_MAJOR) "." PE_STR(PE_VERSION_MINOR) "." PE_STR(PE_VERSION_PATCH);
}
