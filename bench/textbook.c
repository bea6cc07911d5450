/* textbook.c - the loop most codebases start from (HF's rotate_half written
 * in C): NeoX pairing, a precomputed float table of cos and sin per
 * position, no blocking, no intrinsics, heads and tokens walked in the order
 * they lie in memory, and for f16/bf16 the obvious scalar conversions to
 * float and back (round to nearest even) around the same float arithmetic:
 * a _Float16 cast where the compiler has the type, shifts for bf16.
 *
 * pe-bench builds this file twice (bench/CMakeLists.txt): as itself with the
 * project's flags (-O3, the baseline ISA: the 'x textbook loop' column), and
 * through textbook_native.c, which defines PB_TEXTBOOK_PREFIX, with
 * -O3 -march=native (the 'x textbook-native' column: what a user compiling
 * this loop for their own machine gets for free). */
#include <math.h>
#include <string.h>

#include "bench.h"

#ifndef PB_TEXTBOOK_PREFIX
#define PB_TEXTBOOK_PREFIX pb_textbook_
#endif
#define PB_CAT_(a, b) a##b
#define PB_CAT(a, b) PB_CAT_(a, b)
#define PB_TB(name) PB_CAT(PB_TEXTBOOK_PREFIX, name)

static inline float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

#if defined(__FLT16_MAX__)
/* The compiler has _Float16 (GCC 12+ on x86-64, aarch64): the obvious code
 * is a cast, which -march=native turns into the CPU's conversion
 * instructions (F16C, AVX512-FP16, NEON) and the baseline build into
 * libgcc's conversion calls. */
static inline float f16_to_f32(uint16_t h) {
  _Float16 f;
  memcpy(&f, &h, 2);
  return (float)f;
}

static inline uint16_t f32_to_f16(float f) {
  _Float16 x = (_Float16)f;
  uint16_t h;
  memcpy(&h, &x, 2);
  return h;
}
#else
/* No _Float16: the conversions by hand, round to nearest even. */
static inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
  if (e == 0x1f) {
    u = sign | 0x7f800000u | (m << 13);
  } else if (e) {
    u = sign | ((e + 112) << 23) | (m << 13);
  } else if (!m) {
    u = sign;
  } else { /* subnormal: m * 2^-24 */
    uint32_t sh = 0;
    while (!(m & 0x400)) m <<= 1, sh++;
    u = sign | ((113 - sh) << 23) | ((m & 0x3ff) << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00);       /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);      /* rounds to infinity */
  if (a >= 0x38800000u) {                                      /* normal: rebias, round */
    uint32_t r = a - 0x38000000u;
    return (uint16_t)(sign | ((r + 0x0fffu + ((r >> 13) & 1)) >> 13));
  }
  if (a < 0x33000000u) return (uint16_t)sign;                  /* below 2^-25: zero */
  uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e; /* 14..24 */
  uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1))) q++;
  return (uint16_t)(sign | q);
}
#endif

/* Every row of x[B,H,T,D] in memory order: heads outer for [B,H,T,D]
 * (stride[1] > stride[2]), tokens outer for [B,T,H,D]. ROW rotates one
 * row, row, with the cos c and sin s of its position. */
#define TB_WALK(T, ROW)                                                          \
  for (int64_t b = 0; b < shape[0]; b++) {                                       \
    if (stride[1] >= stride[2]) {                                                \
      for (int64_t h = 0; h < shape[1]; h++)                                     \
        for (int64_t t = 0; t < shape[2]; t++) {                                 \
          T *row = x + b * stride[0] + h * stride[1] + t * stride[2];            \
          int64_t p = pos ? pos[b * shape[2] + t] : t;                           \
          const float *c = cos_t + p * half, *s = sin_t + p * half;              \
          ROW;                                                                   \
        }                                                                        \
    } else {                                                                     \
      for (int64_t t = 0; t < shape[2]; t++) {                                   \
        int64_t p = pos ? pos[b * shape[2] + t] : t;                             \
        const float *c = cos_t + p * half, *s = sin_t + p * half;                \
        for (int64_t h = 0; h < shape[1]; h++) {                                 \
          T *row = x + b * stride[0] + h * stride[1] + t * stride[2];            \
          ROW;                                                                   \
        }                                                                        \
      }                                                                          \
    }                                                                            \
  }

#define ROW_F32                                                                  \
  for (int32_t i = 0; i < half; i++) {                                           \
    float x0 = row[i], x1 = row[i + half];                                       \
    row[i] = x0 * c[i] - x1 * s[i];                                              \
    row[i + half] = x1 * c[i] + x0 * s[i];                                       \
  }

#define ROW_16(to_f32, from_f32)                                                 \
  for (int32_t i = 0; i < half; i++) {                                           \
    float x0 = to_f32(row[i]), x1 = to_f32(row[i + half]);                       \
    row[i] = from_f32(x0 * c[i] - x1 * s[i]);                                    \
    row[i + half] = from_f32(x1 * c[i] + x0 * s[i]);                             \
  }
#define ROW_F16 ROW_16(f16_to_f32, f32_to_f16)
#define ROW_BF16 ROW_16(bf16_to_f32, f32_to_bf16)

void PB_TB(rope_neox_f32)(float *x, const int64_t shape[4], const int64_t stride[4],
                          int32_t half, const int64_t *pos, const float *cos_t,
                          const float *sin_t) {
  TB_WALK(float, ROW_F32)
}

void PB_TB(rope_neox_f16)(uint16_t *x, const int64_t shape[4], const int64_t stride[4],
                          int32_t half, const int64_t *pos, const float *cos_t,
                          const float *sin_t) {
  TB_WALK(uint16_t, ROW_F16)
}

void PB_TB(rope_neox_bf16)(uint16_t *x, const int64_t shape[4], const int64_t stride[4],
                           int32_t half, const int64_t *pos, const float *cos_t,
                           const float *sin_t) {
  TB_WALK(uint16_t, ROW_BF16)
}

/* The qknorm suite's step as one pass (bench.h's pb_qknorm): per token,
 * each head row widened to float into a row of its own, its sum of squares
 * in 16 partial sums (one float chain per lane, as anyone who wants the
 * loop vectorized writes it), r = 1 / sqrtf(mean + eps), then x * r * w
 * (or x * r * (1 + w), or x * r) rotated as ROW_F32 (NeoX pairs, or GPT-J's
 * as the interleaved loop writes them) and stored (f16/bf16 rounded to nearest even); per
 * token, the rows' sums first, then one r for the token's q rows and one
 * for its k rows. pe-bench times the native build ('x native' of the
 * qknorm rows). */
#define TB_AI static inline __attribute__((always_inline))
TB_AI float tb_load(const void *row, int dtype, int64_t e) {
  if (dtype == 0) return ((const float *)row)[e];
  uint16_t h = ((const uint16_t *)row)[e];
  return dtype == 2 ? bf16_to_f32(h) : f16_to_f32(h);
}

TB_AI void tb_store(void *row, int dtype, int64_t e, float v) {
  if (dtype == 0) ((float *)row)[e] = v;
  else ((uint16_t *)row)[e] = dtype == 2 ? f32_to_bf16(v) : f32_to_f16(v);
}

/* The sum of squares of hd widened values, in 16 partial sums. */
TB_AI float tb_sum16(const float *x, int64_t hd) {
  float acc[16] = {0};
  for (int64_t e = 0; e < hd; e += 16)
    for (int i = 0; i < 16; i++) acc[i] += x[e + i] * x[e + i];
  float ss = 0.0f;
  for (int i = 0; i < 16; i++) ss += acc[i];
  return ss;
}
/* ... of a head row in memory (a per-token norm's first pass). */
TB_AI float tb_sumsq(const pb_qknorm *a, int dt, const void *src) {
  float x[256];
  for (int64_t e = 0; e < a->hd; e++) x[e] = tb_load(src, dt, e);
  return tb_sum16(x, a->hd);
}

/* x normed by r and its weight w as PB_QKN_* says. */
TB_AI float tb_norm(int norm, float x, float r, float w) {
  return norm == PB_QKN_L2 ? x * r : norm == PB_QKN_OFFSET ? x * r * (1.0f + w) : x * r * w;
}
/* A head row normed (scale r: per token, the caller's; else the row's own,
 * r < 0) and rotated into dst, the norm (PB_QKN_*) and pairing constants. */
TB_AI void tb_qknorm_row_as(const pb_qknorm *a, int dt, const void *src, void *dst,
                            const float *w, const float *c, const float *s, float r, int norm,
                            int gptj) {
  const int64_t hd = a->hd, half = hd / 2;
  float x[256];
  for (int64_t e = 0; e < hd; e++) x[e] = tb_load(src, dt, e);
  if (r < 0.0f) r = 1.0f / sqrtf(tb_sum16(x, hd) / (float)hd + a->eps);
  for (int64_t i = 0; i < half; i++) {
    const int64_t i0 = gptj ? 2 * i : i, i1 = gptj ? 2 * i + 1 : i + half;
    float x0 = tb_norm(norm, x[i0], r, w[i0]), x1 = tb_norm(norm, x[i1], r, w[i1]);
    tb_store(dst, dt, i0, x0 * c[i] - x1 * s[i]);
    tb_store(dst, dt, i1, x1 * c[i] + x0 * s[i]);
  }
}
#define TB_QKN_ROW(norm, gptj) tb_qknorm_row_as(a, dt, src, dst, w, c, s, r, norm, gptj)
TB_AI void tb_qknorm_row(const pb_qknorm *a, int dt, const void *src, void *dst, const float *w,
                         const float *c, const float *s, float r) {
  switch (a->norm + 3 * !!a->gptj) {
  case PB_QKN_OFFSET: TB_QKN_ROW(PB_QKN_OFFSET, 0); break;
  case PB_QKN_L2: TB_QKN_ROW(PB_QKN_L2, 0); break;
  case 3 + PB_QKN_RMS: TB_QKN_ROW(PB_QKN_RMS, 1); break;
  case 3 + PB_QKN_OFFSET: TB_QKN_ROW(PB_QKN_OFFSET, 1); break;
  case 3 + PB_QKN_L2: TB_QKN_ROW(PB_QKN_L2, 1); break;
  default: TB_QKN_ROW(PB_QKN_RMS, 0);
  }
}
#undef TB_QKN_ROW

/* Every token of a, its dtype dt a constant (each dtype its own loops). */
TB_AI void tb_qknorm_tokens(const pb_qknorm *a, int dt) {
  const int64_t hd = a->hd, half = hd / 2, es = dt ? 2 : 4;
  const int64_t row = (a->hq + 2 * a->hkv) * hd * es, head = hd * es;
  for (int64_t b = 0; b < a->batch; b++)
    for (int64_t t = 0; t < a->tokens; t++) {
      const int64_t u = b * a->tokens + t, slot = a->slots[u];
      char *tok = (char *)a->qkv + u * row;
      const float *c = a->cos_t + a->pos[u] * half, *s = a->sin_t + a->pos[u] * half;
      /* per token: one scale from every head row's squares (q's, then k's) */
      float rq = -1.0f, rk = -1.0f;
      if (a->per_token) {
        float sq = 0.0f, sk = 0.0f;
        for (int64_t h = 0; h < a->hq; h++) sq += tb_sumsq(a, dt, tok + h * head);
        for (int64_t h = 0; h < a->hkv; h++) sk += tb_sumsq(a, dt, tok + (a->hq + h) * head);
        rq = 1.0f / sqrtf(sq / (float)(a->hq * hd) + a->eps);
        rk = 1.0f / sqrtf(sk / (float)(a->hkv * hd) + a->eps);
      }
      const int64_t wh = a->per_token ? hd : 0; /* a head's weights */
      for (int64_t h = 0; h < a->hq; h++)
        tb_qknorm_row(a, dt, tok + h * head, tok + h * head, a->q_weight + h * wh, c, s, rq);
      if (slot < 0) continue;
      for (int64_t h = 0; h < a->hkv; h++) {
        const int64_t to = (slot * a->hkv + h) * head;
        tb_qknorm_row(a, dt, tok + (a->hq + h) * head, (char *)a->k_cache + to,
                      a->k_weight + h * wh, c, s, rk);
        memcpy((char *)a->v_cache + to, tok + (a->hq + a->hkv + h) * head, (size_t)head);
      }
    }
}

void PB_TB(qknorm_store)(const pb_qknorm *a) {
  if (a->dtype == 0) tb_qknorm_tokens(a, 0);
  else if (a->dtype == 1) tb_qknorm_tokens(a, 1);
  else tb_qknorm_tokens(a, 2);
}
