/* textbook.c - the loop most codebases start from (HF's rotate_half written
 * in C): float32, NeoX pairing, a precomputed table of cos and sin per
 * position, no blocking, no intrinsics. pe-bench reports how many times
 * faster the library is than this, compiled with the project's own flags. */
#include "bench.h"

void pb_textbook_rope_neox_f32(float *x, const int64_t shape[4], const int64_t stride[4],
                               int32_t half, const int64_t *pos, const float *cos_t,
                               const float *sin_t) {
  for (int64_t b = 0; b < shape[0]; b++)
    for (int64_t h = 0; h < shape[1]; h++)
      for (int64_t t = 0; t < shape[2]; t++) {
        float *row = x + b * stride[0] + h * stride[1] + t * stride[2];
        int64_t p = pos ? pos[b * shape[2] + t] : t;
        const float *c = cos_t + p * half, *s = sin_t + p * half;
        for (int32_t i = 0; i < half; i++) {
          float x0 = row[i], x1 = row[i + half];
          row[i] = x0 * c[i] - x1 * s[i];
          row[i + half] = x1 * c[i] + x0 * s[i];
        }
      }
}
