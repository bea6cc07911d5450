/* fuzz_mrope_section.c - pe_mrope_section_from_hf_config on arbitrary text.
 * The text is copied into an allocation of exactly len bytes with no NUL
 * after it, so a read past len is an ASan report. On failure neither output
 * may change and pe_last_error() must be set; on success the section is
 * three non-negative counts and the flags are 0 or PE_ROPE_MROPE_INTERLEAVED.
 * Use with fuzz_mrope_section.dict. */
#include "fuzz_common.h"

static const char FN[] = "pe_mrope_section_from_hf_config";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *json = malloc(size ? size : 1);
  if (!json) return 0;
  memcpy(json, data, size);
  int32_t sec[3] = {-0x5151, -0x5151, -0x5151};
  uint32_t flags = 0xa5a5a5a5u;
  fz_set_sentinel();
  pe_status st = pe_mrope_section_from_hf_config(json, size, sec, &flags);
  free(json);
  if (st != PE_OK) {
    fz_check_error_message(FN, st);
    if (st != PE_ERR_PARSE) fz_die(FN, "text refused with a status other than PE_ERR_PARSE");
    for (int i = 0; i < 3; i++)
      if (sec[i] != -0x5151) fz_die(FN, "failed but wrote mrope_section");
    if (flags != 0xa5a5a5a5u) fz_die(FN, "failed but wrote flags");
    return 0;
  }
  for (int i = 0; i < 3; i++)
    if (sec[i] < 0) fz_die(FN, "returned a negative count");
  if (flags != 0 && flags != PE_ROPE_MROPE_INTERLEAVED) fz_die(FN, "returned unknown flags");
  return 0;
}
