/* mrope_case.h - the M-RoPE call pe-bench's fused suite and pe-ab time, in
 * one place: Qwen2-VL's three axes over a 16-token text prefix, a 32x32
 * image (1024 tokens: t at 16, h and w at 16 plus the patch's row and
 * column) and text after it (from 32 on, every axis alike), and
 * Qwen2-VL-7B's sections, 16/24/24 of its 64 pairs (other widths: the same
 * shares). */
#ifndef PB_MROPE_CASE_H
#define PB_MROPE_CASE_H
#include <stdint.h>

/* pos3[a * batch * tokens + b * tokens + t]: axis a of token t of sequence b. */
static inline void mrope_case_positions(int64_t *pos3, int64_t batch, int64_t tokens) {
  const int64_t n = batch * tokens;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t t = 0; t < tokens; t++) {
      const int64_t i = b * tokens + t, img = t >= 16 && t < 16 + 1024 ? t - 16 : -1;
      pos3[i] = img >= 0 ? 16 : t < 16 ? t : t - 1024 + 32;
      pos3[n + i] = img >= 0 ? 16 + img / 32 : pos3[i];
      pos3[2 * n + i] = img >= 0 ? 16 + img % 32 : pos3[i];
    }
}

/* The sections of half = rotary_dim / 2 pairs (half >= 4). */
static inline void mrope_case_sections(int32_t half, int32_t section[3]) {
  section[0] = half / 4;
  section[1] = (half - half / 4) / 2;
  section[2] = half - section[0] - section[1];
}
#endif
