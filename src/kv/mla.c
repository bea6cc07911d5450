/* mla.c - pe_mla_cache_read: MLA cache rows (posenc.h's pe_mla_format)
 * read back as kv rows, dequantized; the inverse of the rows
 * pe_mla_rope_store writes (rope/mla.c). */
#include <math.h>
#include <string.h>

#include "check/check.h"
#include "kernels/isa.h"
#include "kernels/kv_format.h"

/* Row `slot` of the cache (PE_MLA_FP8_DS_V4: the token row; *scales its
 * scale bytes). */
static const char *row_at(const pe_mla *m, const pe_tensor *c, int64_t slot, int64_t lat,
                          const char **scales) {
  const int64_t bs = c->shape[2], blk = slot / bs, t = slot % bs;
  if (m->format == PE_MLA_FP8_DS_V4) {
    const int64_t row = pe__mla_row_bytes(m->format, lat, m->rope_dim, PE_F32);
    const char *base = (const char *)c->data + blk * pe__stride(c, 0);
    *scales = base + bs * row + t * pe__mla_v4_scale_bytes(lat);
    return base + t * row;
  }
  const int64_t es = m->format == PE_MLA_PLAIN ? (int64_t)pe__dtype_size(c->dtype) : 1;
  return (const char *)c->data + (blk * pe__stride(c, 0) + t * pe__stride(c, 2)) * es;
}

/* One quantized cache row into row (float32, kv order). */
static void read_row(const pe_isa *isa, const pe_mla *m, float scale, const char *src,
                     const char *scales, int64_t dim, float *row) {
  const int64_t R = m->rope_dim, ro = m->kv_rope_offset, lat = dim - R;
  pe_kv_dequant_fn e4m3 = isa->kv_dequant[PE_KV_FP8_E4M3 - 1][PE_F32];
  uint16_t rope16[PE_MLA_MAX_DIM] __attribute__((aligned(64)));
  switch (m->format) {
    case PE_MLA_FP8_E4M3: {
      /* pieces of the row in cache order: [rope | before | after] or the kv order */
      const int64_t from[3] = {0, R, R + ro}, to[3] = {ro, 0, ro + R}, len[3] = {R, ro, dim - ro - R};
      for (int k = 0; k < 3; k++)
        if (len[k]) e4m3(src + (m->order == PE_MLA_ROPE_FIRST ? from[k] : to[k]), row + to[k], len[k], scale);
      return;
    }
    case PE_MLA_FP8_DS:
      for (int64_t k = 0; k < lat / PE_MLA_DS_TILE; k++) {
        float s;
        memcpy(&s, src + lat + 4 * k, 4);
        e4m3(src + k * PE_MLA_DS_TILE, row + k * PE_MLA_DS_TILE, PE_MLA_DS_TILE, s);
      }
      memcpy(rope16, src + lat + 4 * (lat / PE_MLA_DS_TILE), (size_t)R * 2);
      isa->convert[PE_BF16][PE_F32](rope16, row + lat, R);
      return;
    default: /* PE_MLA_FP8_DS_V4 */
      for (int64_t k = 0; k < lat / PE_MLA_V4_TILE; k++)
        e4m3(src + k * PE_MLA_V4_TILE, row + k * PE_MLA_V4_TILE, PE_MLA_V4_TILE,
             ldexpf(1.0f, (int)(unsigned char)scales[k] - 127));
      memcpy(rope16, src + lat, (size_t)R * 2);
      isa->convert[PE_BF16][PE_F32](rope16, row + lat, R);
      return;
  }
}

PE_API pe_status pe_mla_cache_read(const pe_mla *mla, const pe_tensor *cache,
                                   const pe_tensor *out, const int64_t *slot_mapping) {
  static const char fn[] = "pe_mla_cache_read";
  pe_mla m;
  float scale;
  pe_status st = pe__check_mla_read(fn, mla, cache, out, slot_mapping, &m, &scale);
  if (st != PE_OK || pe__tensor_empty(out)) return st;
  const pe_isa *isa = pe__isa();
  const int64_t dim = out->shape[3], lat = dim - m.rope_dim, tokens = out->shape[2];
  const int64_t oes = (int64_t)pe__dtype_size(out->dtype);
  float row[PE_MLA_MAX_DIM] __attribute__((aligned(64)));
  for (int64_t b = 0; b < out->shape[0]; b++)
    for (int64_t t = 0; t < tokens; t++) {
      int64_t s = slot_mapping[b * tokens + t];
      if (s < 0) continue;
      char *dst = (char *)out->data + (b * pe__stride(out, 0) + t * pe__stride(out, 2)) * oes;
      const char *scales = NULL;
      const char *src = row_at(&m, cache, s, lat, &scales);
      if (m.format == PE_MLA_PLAIN) { /* converted piece by piece, no staging */
        const int64_t R = m.rope_dim, ro = m.kv_rope_offset, ces = (int64_t)pe__dtype_size(cache->dtype);
        const int64_t from[3] = {0, R, R + ro}, to[3] = {ro, 0, ro + R}, len[3] = {R, ro, dim - ro - R};
        for (int k = 0; k < 3; k++)
          if (len[k])
            isa->convert[cache->dtype][out->dtype](
                src + (m.order == PE_MLA_ROPE_FIRST ? from[k] : to[k]) * ces, dst + to[k] * oes,
                len[k]);
        continue;
      }
      read_row(isa, &m, scale, src, scales, dim, row);
      isa->convert[PE_F32][out->dtype](row, dst, dim);
    }
  return PE_OK;
}
