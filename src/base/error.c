/* error.c - status strings and the thread-local last-error sentence. */
#include <stdio.h>

#include "base/internal.h"

static _Thread_local char last_error[512];

PE_API const char *pe_status_string(pe_status s) {
  switch (s) {
    case PE_OK: return "PE_OK: success";
    case PE_ERR_NULL_POINTER: return "PE_ERR_NULL_POINTER: a required pointer is NULL";
    case PE_ERR_INVALID_ARGUMENT: return "PE_ERR_INVALID_ARGUMENT: an argument is out of its domain";
    case PE_ERR_SHAPE: return "PE_ERR_SHAPE: shapes or strides do not fit";
    case PE_ERR_DTYPE: return "PE_ERR_DTYPE: unknown or unsupported dtype";
    case PE_ERR_POSITION_OUT_OF_RANGE: return "PE_ERR_POSITION_OUT_OF_RANGE: a position is negative or past the table";
    case PE_ERR_OUT_OF_MEMORY: return "PE_ERR_OUT_OF_MEMORY: an allocation failed";
    case PE_ERR_OVERFLOW: return "PE_ERR_OVERFLOW: a size overflows";
    case PE_ERR_UNSUPPORTED: return "PE_ERR_UNSUPPORTED: not supported: an ISA path this CPU or build lacks, or a rope type, scaling or config libposenc does not implement";
    case PE_ERR_PARSE: return "PE_ERR_PARSE: malformed or incomplete configuration";
    case PE_ERR_BUSY: return "PE_ERR_BUSY: the pool is running another call: retry";
  }
  return "PE_ERR_UNKNOWN: not a pe_status value";
}

PE_API const char *pe_last_error(void) { return last_error; }

pe_status pe__fail(pe_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return s;
}
