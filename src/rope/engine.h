/* rope_engine.h - the one RoPE engine every rotation entry point runs on.
 *
 * An entry point validates its arguments, describes the call as a plan and
 * hands it to pe__rope_run. The engine walks blocks of up to
 * PE_ENGINE_BLOCK_TOKENS tokens of one sequence (the pool splits tokens;
 * a direct [B,H,T,D] walk, groups of heads: rope_engine.c's group_range),
 * and for each block:
 *   row source -> the block's cos/sin rows (a frequency chunk of them)
 *   stage      -> (optional) the QK-norm scale of each q/k row (rows_norm)
 *   sinks      -> q and/or k rotated in place, or k rotated into a cache row,
 *                 and v converted into its cache row
 * Sources: a cache's table row or on-the-fly row at each position (one cache,
 * or one per batch row), the rows of several axes gathered per frequency
 * (M-RoPE), a shift by a delta, the difference of two caches' frequencies
 * (re-rotation). The inverse rotation is a source property: its rows carry
 * -sin, so every sink and kernel only ever rotates forward.
 *
 * A stage between them normalizes rows before their rotation (QK-norm), and
 * a second cache sink converts v into its cache rows.
 *
 * A direct walk - q and/or k rotated in place from table rows, nothing
 * else - skips the stages: its blocks hold pointers into the table only,
 * kept in the scratch, and in [B,H,T,D] they are as long as a quarter of
 * the L2 holds (the kernel's groups of heads each walk the whole block).
 *
 * Stack: one block's scratch rows (PE_ENGINE_SCRATCH_FLOATS floats, 16 KiB)
 * and the norm stage's scales (PE_ENGINE_NORM_ROWS doubles, 8 KiB) plus a few
 * hundred bytes, whatever head_dim: rows that do not fit are computed in
 * chunks of frequencies. */
#ifndef PE_ROPE_ENGINE_H
#define PE_ROPE_ENGINE_H

#include "base/internal.h"
#include "kernels/isa.h"
#include "rope/cache.h"

#define PE_ENGINE_BLOCK_TOKENS 32
#define PE_ENGINE_SCRATCH_FLOATS 4096
#define PE_ENGINE_MAX_AXES 4 /* position rows of PE_SOURCE_AXES */

/* A tensor as the engine walks it: strides in elements, 0 for size-1
 * dimensions (pe__stride). data NULL: absent. */
typedef struct pe__rope_operand {
  char *data;
  pe_dtype dtype;
  int64_t esize, heads;
  int64_t s_batch, s_head, s_token;
} pe__rope_operand;

typedef enum pe__rope_source {
  PE_SOURCE_POSITIONS = 0, /* the row cache's table row, or its on-the-fly row */
  PE_SOURCE_AXES = 1,      /* multi-axis: frequency i at the position of its axis */
  PE_SOURCE_SHIFT = 2,     /* on the fly at deltas, scale 1 */
  PE_SOURCE_REROTATE = 3   /* on the fly at positions, to - from frequencies */
} pe__rope_source;

typedef struct pe__rope_plan {
  const pe_isa *isa;
  int32_t half, head_dim, style, inverse;
  int64_t batch, tokens;

  /* row source */
  pe__rope_source source;
  const pe_rope_cache *const *caches; /* row b uses caches[cache_index[b]] (index NULL: [0]) */
  const int32_t *cache_index;
  const pe_rope_cache *from, *to;     /* PE_SOURCE_REROTATE */
  const int64_t *pos;                 /* [n_axes][batch][tokens]; NULL = token index */
  int32_t n_axes;                     /* PE_SOURCE_AXES: 1..PE_ENGINE_MAX_AXES position rows */
  const uint8_t *axis_of_freq;        /* [half], each < n_axes; NULL: M-RoPE's rule from */
  int32_t mrope_section[3];           /* Qwen2-VL sections or */
  int32_t mrope_interleaved;          /* Qwen3-VL interleaving (n_axes 3) */

  /* sinks: q and k in place, unless slots is set: then k is read and its
   * rotation written to the cache rows at slots */
  pe__rope_operand q, k;
  const int64_t *slots;               /* [batch][tokens]; -1 skips the token */
  char *dst;
  pe_dtype dst_dtype;
  int64_t dst_esize, dst_block, dst_s_block, dst_s_head, dst_s_slot;

  /* stage: the QK-norm of q's and k's rows before they are rotated (mode
   * PE_NORM_OFF: none). Every channel of a normed row is written (those past
   * rotary_dim normed too). */
  int32_t norm_mode;                  /* PE_NORM_* (isa.h) */
  int32_t norm_per_token;             /* 0: one scale per head row; 1: per token */
  float norm_eps;
  const float *q_weight, *k_weight;   /* mode W/W1: head_dim or heads*head_dim floats */

  /* sink: v converted into the v cache rows at slots (v.data NULL: none);
   * v_dst's geometry has dst's block size */
  pe__rope_operand v;
  int64_t v_dim;
  char *v_dst;
  pe_dtype v_dst_dtype;
  int64_t v_dst_esize, v_dst_s_block, v_dst_s_head, v_dst_s_slot;

  /* quantized cache sinks (pe_kv_quant; PE_KV_PLAIN 0: none): the cache's
   * esize is then 1 and its strides are bytes. k: each stored row rotated
   * (and normed) in float32 into a stack row, then quantized; v quantized
   * from its row. A quantized k needs the whole row's frequencies in one
   * chunk (head_dim <= PE_KV_QUANT_MAX_DIM, so a block's rows fit). */
  uint32_t dst_quant, v_dst_quant;
  float dst_scale, v_dst_scale;

  /* sink: the cache rows at slots rotated in place (k.data = the cache, its
   * rows addressed through dst/slots; q and v absent): plain rows by
   * rope_rows, quantized rows dequantized into a stack row, rotated in
   * float32 and quantized again. */
  int32_t cache_in_place;
} pe__rope_plan;

/* Scales the norm stage holds per block (q's rows then k's): blocks are cut
 * so n_tokens * (rows of q + rows of k) fit; a token with more head rows than
 * this (per-head norm of > PE_ENGINE_NORM_ROWS heads) runs in head groups. */
#define PE_ENGINE_NORM_ROWS 1024

/* A plan over q and/or k with the geometry of cache c (batch and tokens
 * from q, else k), flags' PE_ROPE_INVERSE, and the given source; the
 * caller fills in the source's and the sinks' other fields. */
PE_HIDDEN void pe__rope_plan_init(pe__rope_plan *p, const pe_rope_cache *c, const pe_tensor *q,
                                  const pe_tensor *k, uint32_t flags, pe__rope_source source);

/* Run a validated plan (pool acquired with pe__pool_acquire, released here). */
PE_HIDDEN void pe__rope_run(const pe__rope_plan *plan, pe_threadpool *pool);

/* ---- validation shared by the RoPE entry points (rope_engine.c) ---- */

PE_HIDDEN void pe__rope_operand_from(pe__rope_operand *op, const pe_tensor *t);

/* A q/k/cache tensor: pe__check_tensor plus shape[3] == head_dim. */
PE_HIDDEN pe_status pe__rope_check_operand(const char *fn, const char *name, const pe_tensor *t,
                                           int32_t head_dim, int writable);

/* q and/or k (not both NULL): each checked, batch and tokens equal, no
 * element shared (q is written; k is written unless k_writable is 0, and
 * even then q must not overlap what is read). */
PE_HIDDEN pe_status pe__rope_check_qk(const char *fn, const pe_tensor *q, const pe_tensor *k,
                                      int32_t head_dim, int k_writable);

/* Positions of one axis ([batch][tokens], NULL = 0..tokens-1): each entry
 * >= 0 and below the limit of its row's cache (its max_positions when it has
 * a table, 2^53 otherwise). caches NULL: the 2^53 limit only. axis_name is
 * "" or e.g. "axis 1 (h), " for messages. */
PE_HIDDEN pe_status pe__rope_check_positions(const char *fn, const char *axis_name,
                                             const int64_t *pos, int64_t batch, int64_t tokens,
                                             const pe_rope_cache *const *caches,
                                             const int32_t *cache_index);

/* Caches usable together (multi-cache, rerotate): same head_dim, rotary_dim
 * and style as caches[0]. */
PE_HIDDEN pe_status pe__rope_check_same_geometry(const char *fn, const char *what,
                                                 const pe_rope_cache *a, const pe_rope_cache *b);

/* slot_mapping ([batch][tokens]): each in [-1, n_slots), no slot twice
 * (rope_store.c). */
PE_HIDDEN pe_status pe__rope_check_slots(const char *fn, const int64_t *slots, int64_t batch,
                                         int64_t tokens, int64_t n_slots);

/* The cache store every entry point shares (qk_norm.c): validation, then one
 * engine run. norm NULL: no norm; v and v_cache NULL: no v; formats NULL:
 * plain caches, else its k_quant/v_quant and scales (already copied from
 * the caller's struct). */
PE_HIDDEN pe_status pe__rope_store(const char *fn, const pe_rope_cache *c, const pe_qk_norm *norm,
                                   const pe_tensor *q, const pe_tensor *k, const pe_tensor *v,
                                   const pe_tensor *k_cache, const pe_tensor *v_cache,
                                   const int64_t *slot_mapping, const int64_t *positions,
                                   uint32_t flags, pe_threadpool *pool,
                                   const pe_kv_cache *formats);

/* ---- quantized caches (kv_quant.c) ---- */

/* Longest quantized row: a token's whole cos/sin row fits the scratch. */
#define PE_KV_QUANT_MAX_DIM 4096

/* Bytes of one cache row of dim channels in format quant (dtype dt when
 * PE_KV_PLAIN). */
PE_HIDDEN int64_t pe__kv_row_bytes(uint32_t quant, int64_t dim, pe_dtype dt);

/* kv_cache's <which>_quant and _scale ("k" or "v"): a pe_kv_quant, and a
 * scale (finite > 0) exactly for the FP8 formats; *out the scale (1 else). */
PE_HIDDEN pe_status pe__kv_format(const char *fn, const char *which, uint32_t quant,
                                  const float *scale, float *out);

/* A cache tensor of format quant: plain: pe__check_tensor; quantized: the
 * byte tensor of posenc.h (stride[3] 1, byte extent representable, Q8_0
 * dim % 32, dim <= PE_KV_QUANT_MAX_DIM). dim >= 0: shape[3] must equal it. */
PE_HIDDEN pe_status pe__kv_check_tensor(const char *fn, const char *name, const pe_tensor *t,
                                        uint32_t quant, int64_t dim);

/* Do a and b (formats qa, qb) share memory? Two plain tensors: the exact
 * element test (pe__tensors_overlap); otherwise their byte ranges meet. */
PE_HIDDEN int pe__kv_overlap(const pe_tensor *a, uint32_t qa, const pe_tensor *b, uint32_t qb);

#endif
