/* engine.h - the one RoPE engine every rotation entry point runs on.
 *
 * An entry point validates its arguments, describes the call as a plan and
 * hands it to pe__rope_run. The engine walks blocks of up to
 * PE_ENGINE_BLOCK_TOKENS tokens of one sequence (the pool splits tokens;
 * a direct [B,H,T,D] walk, groups of heads: engine.c's group_range),
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
 * and the norm stage's scales (PE_ENGINE_NORM_ROWS floats, 4 KiB) plus a few
 * hundred bytes, whatever head_dim: rows that do not fit are computed in
 * chunks of frequencies. */
#ifndef PE_ROPE_ENGINE_H
#define PE_ROPE_ENGINE_H

#include "check/check.h"
#include "kernels/isa.h"
#include "kernels/kv_format.h"
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

  /* sink: an MLA step's kv rows into their cache rows, and q's whole heads
   * under a q norm (mla.c; NULL: none). slots is the step's slot_mapping. */
  const struct pe__mla_plan *mla;

  /* set by pe__rope_run: the runs of tokens its blocks' whole rows in place
   * walk together (pe_rope_block.streams; 1: token by token), whether
   * they prefetch ahead as one stream (pe_rope_block.stream_pf), and
   * whether a normed block prefetches its successor's rows (norm_pf) */
  int32_t streams, stream_pf, norm_pf;

  /* PE_ROPE_STREAM_CACHE: the cache rows through a stack stage and out by
   * streaming stores (isa.h's stream_copy; engine.c's run_block, mla.c).
   * pe__rope_plan_init sets it from the flags, pe__rope_run clears it where
   * the rows cannot be staged. staged: set in a block's plan whose sinks
   * write the stage, where token i of the block has slot i
   * (pe__sink_slot). */
  int32_t stream, staged;
} pe__rope_plan;

/* The slot of token i of the block at unit u: the cache's (-1: none), or i
 * when the block's sinks write the stage. */
static inline int64_t pe__sink_slot(const pe__rope_plan *p, int64_t u, int64_t i) {
  const int64_t s = p->slots[u + i];
  return s < 0 || !p->staged ? s : i;
}

/* After streaming stores, before the rows may be read by another thread
 * (the end of each thread's share of a call): their ordering fence. */
#if defined(__SSE2__)
#include <emmintrin.h>
static inline void pe__stream_fence(void) { _mm_sfence(); }
#else
static inline void pe__stream_fence(void) {}
#endif

/* The stage's bytes (engine.c: the scratch of a thread's engine_range): a
 * block's cache rows under PE_ROPE_STREAM_CACHE. */
#define PE_ENGINE_STAGE_BYTES (PE_ENGINE_SCRATCH_FLOATS * 4)

/* The MLA sink's part of a plan (mla.c): the step's descriptor, validated;
 * q's whole heads (only under a q norm: otherwise the plan's q is the view
 * of q's rope slices, rotated by the engine's q sink); the kv rows; the
 * cache (PE_MLA_PLAIN: elements of cache_dtype; the FP8 formats: bytes,
 * c_esize 1). */
typedef struct pe__mla_plan {
  pe_mla m;
  float scale;
  pe__rope_operand qh;
  int64_t q_dim;
  pe__rope_operand kv;
  int64_t kv_dim;
  char *cache;
  pe_dtype cache_dtype;
  int64_t c_esize, block, s_block, s_slot;
} pe__mla_plan;

/* The MLA sink on tokens [t0, t0 + n) of batch row b (u: the first's flat
 * index), with the block's cos/sin rows for every frequency; stage: the
 * thread's PE_ENGINE_STAGE_BYTES for streamed rows (plan.stream). */
PE_HIDDEN void pe__mla_block(const pe__rope_plan *p, int64_t b, int64_t u, int64_t t0,
                             const pe_rope_block *blk, char *stage);

/* Scales the norm stage holds per block (q's rows then k's): blocks are cut
 * so n_tokens * (rows of q + rows of k) fit; a token with more head rows than
 * this (per-head norm of > PE_ENGINE_NORM_ROWS heads) runs in head groups. */
#define PE_ENGINE_NORM_ROWS 1024

/* A plan over q and/or k with the geometry of cache c (batch and tokens
 * from q, else k), flags' PE_ROPE_INVERSE, and the given source; the
 * caller fills in the source's and the sinks' other fields. */
PE_HIDDEN void pe__rope_plan_init(pe__rope_plan *p, const pe_rope_cache *c, const pe_tensor *q,
                                  const pe_tensor *k, uint32_t flags, pe__rope_source source);

/* Run a validated plan (pool acquired with pe__pool_acquire, released here);
 * sets plan->streams, plan->stream_pf and plan->norm_pf. */
PE_HIDDEN void pe__rope_run(pe__rope_plan *plan, pe_threadpool *pool);

/* The operand of tensor t as the engine walks it (t NULL or empty: absent). */
PE_HIDDEN void pe__rope_operand_from(pe__rope_operand *op, const pe_tensor *t);

/* The cache store every norm/store entry point shares (store.c): the rope
 * cache c (NULL: an error), then every argument of *call checked in one pass
 * (check.h's pe__check_store, which fills in call's head_dim and bound from
 * c), then one engine run. */
PE_HIDDEN pe_status pe__rope_store(const pe_rope_cache *c, pe__store_call *call,
                                   pe_threadpool *pool);

#endif
