/* check.h - the one validation layer: every check of a caller's argument
 * that more than one entry point makes. Each check passes or returns a
 * status with a sentence naming the function, the argument and the values
 * (pe_last_error), and none of them writes caller memory, so an entry point
 * that has checked everything before its first write changes nothing when
 * it fails.
 *
 * Layer: above base/ and kernels/ (the formats' byte layouts), below the
 * engine and the entry points. It knows tensors, positions, slots, cache
 * descriptors, norms and score matrices, not RoPE caches: what a check needs
 * of one (head_dim, a position bound) the caller passes as numbers.
 *   tensor.c     tensors, overlap, flags, size-prefixed structs, q/k pairs
 *   positions.c  positions (the one checker), deltas, slot mappings
 *   store.c      cache formats and tensors, the QK-norm descriptor, the
 *                whole cache-store call, score matrices
 *   mla.c        an MLA step and an MLA cache read */
#ifndef PE_CHECK_H
#define PE_CHECK_H

#include <string.h>

#include "base/internal.h"

/* ---- tensors (tensor.c) ---- */

PE_HIDDEN const char *pe__dtype_name(pe_dtype d);
/* shape[0..2] >= 0, shape[3] > 0, stride[3] == 1. */
PE_HIDDEN pe_status pe__check_shape(const char *fn, const char *name, const pe_tensor *t);
/* A tensor description: non-NULL, known dtype, shapes >= 0 (shape[3] > 0),
 * stride[3] == 1, byte extent representable; if writable, no two indices
 * alias one element. fn and name are used in the error sentence. */
PE_HIDDEN pe_status pe__check_tensor(const char *fn, const char *name, const pe_tensor *t,
                                     int writable);
/* The span of a tensor (shapes already checked >= 0, non-empty) in its
 * stride units, found without a test of each product and sum when none can
 * overflow: shapes below 2^15, strides within [-2^31, 2^31) and rows of
 * fewer than 2^31 units keep the element count (< 2^60), each dimension's
 * span (< 2^46) and the extent (< 2^50 bytes) in int64. Then 1, with the
 * tensor's units at [*lo, *hi) from data (*hi counting the row of `row`
 * units); else 0 and the caller takes the checked arithmetic. The tensors
 * of a decode step and of prefill chunks under 32768 tokens take this
 * path. The tests it skips are a dependent chain of multiplies and
 * branches per tensor: without them a one-token Qwen3-8B
 * pe_qk_norm_rope_store (five tensors) took 0.94-0.97 of the time (bf16,
 * AMD EPYC Zen 5, avx512bf16 path, `pe-ab --case qknorm --tokens 1`, four
 * runs). */
static inline int pe__extent_small(const pe_tensor *t, int64_t row, int64_t *lo, int64_t *hi) {
  const uint64_t shapes = (uint64_t)(t->shape[0] | t->shape[1] | t->shape[2] | t->shape[3]);
  const uint64_t bias = (uint64_t)1 << 31; /* [-2^31, 2^31) -> [0, 2^32) */
  const uint64_t strides = ((uint64_t)t->stride[0] + bias) | ((uint64_t)t->stride[1] + bias) |
                           ((uint64_t)t->stride[2] + bias);
  if ((shapes >> 15) || (strides >> 32) || (uint64_t)row >= bias) return 0;
  int64_t a = 0, b = row;
  for (int i = 0; i < 3; i++) {
    int64_t span = (t->shape[i] - 1) * t->stride[i];
    if (span < 0) a += span;
    else b += span;
  }
  *lo = a;
  *hi = b;
  return 1;
}
/* Fail unless the three outer dimensions of t step over disjoint rows of row
 * units (elements, or bytes for a quantized cache); strides in the same units.
 * Call only once the extent is known to be representable. */
PE_HIDDEN pe_status pe__check_no_alias(const char *fn, const char *name, const pe_tensor *t,
                                       int64_t row, const char *unit);
/* True when a tensor has no elements (NULL, or a zero batch, head, token
 * count). */
static inline int pe__tensor_empty(const pe_tensor *t) {
  return !t || !t->shape[0] || !t->shape[1] || !t->shape[2] || !t->shape[3];
}
/* True when two validated tensors may share an element: decided exactly for
 * tensors of one dtype on one element grid (so disjoint interleaved views of
 * a packed QKV buffer are told apart from partly overlapping ones), and by
 * their byte ranges otherwise. Empty tensors overlap nothing. */
PE_HIDDEN int pe__tensors_overlap(const pe_tensor *a, const pe_tensor *b);
/* Reject flag bits outside `known`. */
PE_HIDDEN pe_status pe__check_flags(const char *fn, uint32_t flags, uint32_t known);
/* Copy a caller's struct of caller_size bytes into dst (known_size bytes,
 * already holding the defaults): a smaller caller keeps the defaults for the
 * tail, a larger one must have an all-zero unknown tail. */
PE_HIDDEN pe_status pe__copy_sized(const char *fn, void *dst, size_t known_size,
                                   const void *src, size_t caller_size);
/* A q/k operand: pe__check_tensor plus shape[3] == head_dim. */
PE_HIDDEN pe_status pe__check_operand(const char *fn, const char *name, const pe_tensor *t,
                                      int32_t head_dim, int writable);
/* q and/or k (not both NULL): each checked, batch and tokens equal, no
 * element shared (q is written; k is written unless k_writable is 0, and
 * even then q must not overlap what is read). */
PE_HIDDEN pe_status pe__check_qk(const char *fn, const pe_tensor *q, const pe_tensor *k,
                                 int32_t head_dim, int k_writable);
/* Rotations usable together (several caches, a re-rotation): head_dim,
 * rotary_dim and style of b equal a's; `what` names b. */
PE_HIDDEN pe_status pe__check_same_rotation(const char *fn, const char *what, int32_t a_head_dim,
                                            int32_t a_rotary_dim, int32_t a_style,
                                            int32_t b_head_dim, int32_t b_rotary_dim,
                                            int32_t b_style);

/* ---- positions (positions.c) ---- */

/* What positions must stay below, and how a message names it
 * ("max_positions", "max_len"); what NULL: limit PE_MAX_POSITION, the
 * largest position exact in double ("2^53 (not exact in double)"). */
typedef struct pe__pos_bound {
  int64_t limit;
  const char *what;
} pe__pos_bound;
#define PE_POS_ANY ((pe__pos_bound){PE_MAX_POSITION, NULL})

/* One positions array of [batch][tokens], each entry in [0, bound).
 *   name        the array's name in messages ("position", "q_position")
 *   axis        "" or a multi-axis row's name, e.g. "axis 1 (h), "
 *   pos         NULL: 0..tokens-1 when null_is_index (checked against the
 *               bound), else nothing to check
 *   bound       every row's bound, unless bound_of is set: then row b's is
 *               bound_of(items[i]) with i = index ? index[b] : 0 (one RoPE
 *               cache per batch row)
 *   owner       what the bound belongs to in messages ("cache": ">= cache
 *               max_positions 100", with index set "cache 1 max_positions
 *               10"), or NULL (">= max_len 512") */
typedef struct pe__pos_check {
  const char *fn, *name, *axis, *owner;
  const int64_t *pos;
  int64_t batch, tokens;
  int null_is_index;
  pe__pos_bound bound;
  pe__pos_bound (*bound_of)(const void *item);
  const void *const *items;
  const int32_t *index;
} pe__pos_check;
PE_HIDDEN pe_status pe__check_positions(const pe__pos_check *c);
/* A [batch][tokens] delta array: non-NULL, |delta| < 2^53. */
PE_HIDDEN pe_status pe__check_deltas(const char *fn, const int64_t *d, int64_t batch,
                                     int64_t tokens);
/* A slot_mapping ([batch][tokens]): non-NULL, each in [-1, n_slots) (-1
 * skips the token); with distinct, no slot twice (a written slot would
 * depend on the order of writes; reads may repeat). */
PE_HIDDEN pe_status pe__check_slots(const char *fn, const int64_t *slots, int64_t batch,
                                    int64_t tokens, int64_t n_slots, int distinct);
/* The slots of a paged cache [num_blocks, heads, block_size, ...]:
 * num_blocks * block_size, INT64_MAX when the product does not fit (such a
 * cache may still be valid when another of its extents is 0). */
static inline int64_t pe__cache_slots(const pe_tensor *t) {
  int64_t n;
  return __builtin_mul_overflow(t->shape[0], t->shape[2], &n) ? INT64_MAX : n;
}

/* ---- caches, norms, the store call, scores (store.c) ---- */

/* The defaults of the size-prefixed descriptors: what pe_qk_norm_init and
 * pe_kv_cache_init give, and what a smaller (older) caller's struct keeps
 * for the fields it lacks. */
static inline void pe__qk_norm_defaults(pe_qk_norm *n) {
  memset(n, 0, sizeof *n);
  n->struct_size = (uint32_t)sizeof *n;
  n->kind = PE_QK_NORM_NONE;
  n->scope = PE_QK_NORM_PER_HEAD;
  n->eps = 1e-6f;
}
static inline void pe__kv_cache_defaults(pe_kv_cache *kv) {
  memset(kv, 0, sizeof *kv);
  kv->struct_size = (uint32_t)sizeof *kv;
}

/* The caller's pe_kv_cache descriptor (size-prefixed; the first layout is
 * the oldest, so a smaller struct_size is an uninitialised struct), copied. */
PE_HIDDEN pe_status pe__copy_kv_cache(const char *fn, const pe_kv_cache *user, pe_kv_cache *kv);
/* A descriptor's <which>_quant and _scale ("k" or "v"): a pe_kv_quant, and
 * a scale (non-NULL, finite > 0) exactly for the FP8 formats; *out the scale
 * (1 for the others). */
PE_HIDDEN pe_status pe__check_kv_format(const char *fn, const char *which, uint32_t quant,
                                        const float *scale, float *out);
/* A cache tensor of format quant: plain: pe__check_tensor (writable);
 * quantized: the byte tensor of posenc.h (stride[3] 1, byte extent
 * representable, Q8_0 dim % 32, dim <= PE_KV_QUANT_MAX_DIM). dim >= 0:
 * shape[3] must equal it. */
PE_HIDDEN pe_status pe__check_kv_tensor(const char *fn, const char *name, const pe_tensor *t,
                                        uint32_t quant, int64_t dim);
/* A tensor of bytes (a quantized cache): shape[0..2] >= 0, shape[3] > 0
 * (its channels), stride[3] == 1, stride[0..2] in bytes, rows of row_bytes
 * that do not overlap, the extent representable. */
PE_HIDDEN pe_status pe__check_byte_tensor(const char *fn, const char *name, const pe_tensor *t,
                                          int64_t row_bytes);
/* Do a and b (formats qa, qb) share memory? Two plain tensors: the exact
 * element test (pe__tensors_overlap); otherwise their byte ranges meet. */
PE_HIDDEN int pe__kv_overlap(const pe_tensor *a, uint32_t qa, const pe_tensor *b, uint32_t qb);

/* A rotation call that may norm its rows and store k (and v) into a cache:
 * pe_qk_norm_rope (no cache), pe_apply_rope_qk_store (no norm, no v),
 * pe_qk_norm_rope_store. to_cache: k (and v) go to the caches of kv (the
 * caller's descriptor, with its formats) or, kv NULL, to k_cache/v_cache
 * (plain); else q and k are rotated in place. */
typedef struct pe__store_call {
  const char *fn;
  int to_cache;
  int kv_desc;           /* 1: the call takes a descriptor (kv; NULL is an error) */
  int32_t head_dim;      /* the RoPE cache's */
  pe__pos_bound bound;   /* its positions' */
  const pe_qk_norm *norm; /* NULL: no norm stage */
  int norm_required;      /* 1: norm NULL is an error (the norm entry points) */
  const pe_tensor *q, *k, *v;
  const pe_tensor *k_cache, *v_cache;
  const pe_kv_cache *kv;
  const int64_t *slot_mapping, *positions;
  uint32_t flags;
} pe__store_call;
/* What the checks resolved: the caches and their formats, the norm (kind
 * PE_QK_NORM_NONE without one), and whether there is nothing to do. */
typedef struct pe__store_checked {
  const pe_tensor *k_cache, *v_cache; /* NULL: no cache (in place) */
  uint32_t k_quant, v_quant;
  float k_scale, v_scale;
  pe_qk_norm norm;
  int64_t batch, tokens;
  int empty;
} pe__store_checked;
/* Every argument of such a call, in one pass, before anything is written. */
PE_HIDDEN pe_status pe__check_store(const pe__store_call *c, pe__store_checked *out);

/* ---- MLA (mla.c) ---- */

/* pe_mla_init's defaults. */
PE_HIDDEN void pe__mla_defaults(pe_mla *m);
/* An MLA step (pe_mla_rope_store) as its entry point was given it. */
typedef struct pe__mla_call {
  const char *fn;
  int32_t head_dim, rotary_dim; /* the rope cache's */
  pe__pos_bound bound;          /* its positions' */
  const pe_mla *mla;
  const pe_tensor *q, *kv, *cache;
  const int64_t *slot_mapping, *positions;
  uint32_t flags;
} pe__mla_call;
typedef struct pe__mla_checked {
  pe_mla mla;     /* the caller's, copied */
  float scale;    /* PE_MLA_FP8_E4M3's, else 1 */
  int64_t batch, tokens;
  int empty;
} pe__mla_checked;
/* Every argument of an MLA step, in one pass, before anything is written. */
PE_HIDDEN pe_status pe__check_mla(const pe__mla_call *c, pe__mla_checked *out);
/* pe_mla_cache_read's arguments; *m the caller's descriptor copied, *scale
 * its FP8 scale (1 for the other formats). */
PE_HIDDEN pe_status pe__check_mla_read(const char *fn, const pe_mla *user, const pe_tensor *cache,
                                       const pe_tensor *out, const int64_t *slot_mapping,
                                       pe_mla *m, float *scale);

/* Scores ([batch, heads, q_len, k_len], written in place), q_positions
 * ([batch][q_len], NULL = k_len - q_len + i, which needs q_len <= k_len) and
 * flags (PE_MASK_CAUSAL): the score-bias entry points (ALiBi, T5). */
PE_HIDDEN pe_status pe__check_scores(const char *fn, const pe_tensor *scores,
                                     const int64_t *q_positions, uint32_t flags);

#endif
