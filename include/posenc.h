/*
 * posenc.h - libposenc: positional encodings for transformer inference on the CPU.
 *
 * The whole public API of libposenc.so (SONAME libposenc.so.0). C11, no
 * dependencies in this header. Every symbol is prefixed pe_ / PE_.
 *
 * Conventions that hold for every function below
 * ------------------------------------------------
 * - Fallible functions return pe_status (PE_OK == 0). On any error NO caller
 *   memory is modified: every argument (pointers, shapes, strides, positions,
 *   ranges, parameter fields) is validated before the first write.
 * - pe_last_error() returns a thread-local sentence about the last failure on
 *   the calling thread, naming the function, the argument and the values.
 * - Tensors are described by pe_tensor (data, dtype, shape[4], stride[4]);
 *   stride[3] must be 1, the other strides are arbitrary (any dimension order,
 *   rows of a packed QKV buffer, negative strides for reversed views), in
 *   elements. A tensor that is written must not have two indices naming the
 *   same element, and must share no element with any other tensor of the
 *   call (checked exactly, so disjoint interleaved views of one packed QKV
 *   buffer are fine and partly overlapping ones are refused: PE_ERR_SHAPE).
 * - A zero batch, head or token count (shape[0..2] == 0: an empty chunk of a
 *   continuously batched step) is valid: the call returns PE_OK and touches
 *   nothing. Its other arguments are still checked (flags, shapes, and the
 *   [batch][tokens] arrays when only the head count is zero); shape[3]
 *   (head_dim, d_model, k_len) must be > 0, and data must not be NULL.
 * - f16 and bf16 tensors are converted to float32, computed in float32 and
 *   rounded once to nearest-even on store; NaN stays NaN (quiet), Inf stays
 *   Inf, subnormals are kept (never flushed).
 * - Results are bit-identical whatever the ISA path (scalar, AVX2, AVX-512,
 *   NEON) and whatever the thread pool size.
 * - Positions are `const int64_t *` arrays of shape [batch][tokens], row major
 *   (each sequence of a continuously batched step has its own), or NULL for
 *   0..tokens-1 in every batch row. Negative positions are an error.
 * - Apply/add functions take a pe_threadpool *: NULL runs on the calling
 *   thread. They never allocate, lock or make system calls on their hot path.
 * - Stack: a call uses at most about 48 KiB of the calling thread's stack
 *   whatever head_dim or d_model (rows too long for that are processed in
 *   chunks), so threads with small stacks (musl's 128 KiB default, 64 KiB
 *   tested) can call every function.
 * - Parameter structs are size-prefixed: call the *_init() function first.
 *
 * Thread-safety
 * -------------
 * - A pe_rope_cache is immutable after creation: any number of threads may use
 *   one cache concurrently (apply, accessors) as long as none destroys it.
 * - Two calls may run concurrently when the tensors they write do not overlap.
 * - A pe_threadpool runs one call at a time: a second thread entering a pool
 *   that is busy gets PE_ERR_BUSY with nothing written (never a deadlock);
 *   it may retry, or use its own pool. Several pools may coexist.
 * - pe_force_isa() changes process-wide state: call it before other threads
 *   use the library (tests and benchmarks only).
 */
#ifndef POSENC_H
#define POSENC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(PE_BUILDING_LIBRARY)
#define PE_API __declspec(dllexport)
#elif defined(__GNUC__)
#define PE_API __attribute__((visibility("default")))
#else
#define PE_API
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                  */
/* ------------------------------------------------------------------------ */

#define PE_VERSION_MAJOR 0
#define PE_VERSION_MINOR 1
#define PE_VERSION_PATCH 0
/* Encoded as MAJOR*10000 + MINOR*100 + PATCH, comparable at compile time. */
#define PE_VERSION_NUMBER (PE_VERSION_MAJOR * 10000 + PE_VERSION_MINOR * 100 + PE_VERSION_PATCH)

/* The version of the library actually loaded, "MAJOR.MINOR.PATCH" (compare
 * with PE_VERSION_* to detect a header/library mismatch). Thread-safe. */
PE_API const char *pe_version_string(void);

/* ------------------------------------------------------------------------ */
/* Status and errors                                                        */
/* ------------------------------------------------------------------------ */

/* Values are fixed and never reused. */
typedef enum pe_status {
  PE_OK = 0,
  PE_ERR_NULL_POINTER = 1,        /* a required pointer is NULL */
  PE_ERR_INVALID_ARGUMENT = 2,    /* a value out of its domain (or a flag of another family) */
  PE_ERR_SHAPE = 3,               /* shapes, strides or head_dim do not fit */
  PE_ERR_DTYPE = 4,               /* unknown or unsupported dtype */
  PE_ERR_POSITION_OUT_OF_RANGE = 5, /* negative, or >= a table's length */
  PE_ERR_OUT_OF_MEMORY = 6,       /* an allocation in a create call failed */
  PE_ERR_OVERFLOW = 7,            /* a size or byte count overflows int64/size_t */
  PE_ERR_UNSUPPORTED = 8,         /* not available on this CPU/build, unknown type */
  PE_ERR_PARSE = 9,               /* malformed or incomplete config.json */
  PE_ERR_BUSY = 10                /* the pool is running another call: retry (nothing written) */
} pe_status;

/* A static string "PE_ERR_SHAPE: shapes or strides do not fit" for every
 * status; "PE_ERR_UNKNOWN" for values outside the enum. Thread-safe. */
PE_API const char *pe_status_string(pe_status s);

/* The detail of the last failure on the calling thread, e.g.
 * "pe_apply_rope_qk: position 9000 at [batch 1, token 3] >= cache max_positions 8192".
 * Never NULL; "" if no call on this thread has failed yet. Valid until the
 * next libposenc call on the same thread. Successful calls do not clear it. */
PE_API const char *pe_last_error(void);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                  */
/* ------------------------------------------------------------------------ */

typedef enum pe_dtype {
  PE_F32 = 0,   /* IEEE binary32 */
  PE_F16 = 1,   /* IEEE binary16 */
  PE_BF16 = 2   /* bfloat16 (upper half of a binary32) */
} pe_dtype;

typedef struct pe_tensor {
  void *data;          /* element [0,0,0,0], aligned to the element size
                          (4 bytes f32, 2 bytes f16/bf16): else PE_ERR_INVALID_ARGUMENT */
  pe_dtype dtype;
  int64_t shape[4];    /* [batch, heads, tokens, head_dim] for Q/K/X;
                          [batch, heads, q_len, k_len] for attention scores */
  int64_t stride[4];   /* in elements; stride[3] must be 1; any order of the
                          other three: [B,T,H,D] and packed QKV rows are
                          expressed by strides, not by copies */
} pe_tensor;

/* Opaque handles. */
typedef struct pe_rope_cache pe_rope_cache;
typedef struct pe_threadpool pe_threadpool;

/* ------------------------------------------------------------------------ */
/* RoPE                                                                     */
/* ------------------------------------------------------------------------ */

typedef enum pe_rope_style {
  PE_ROPE_NEOX = 0, /* HF rotate_half: pairs (i, i + rotary_dim/2) - Llama, Qwen, Mistral, NeoX */
  PE_ROPE_GPTJ = 1  /* interleaved pairs (2i, 2i+1) - GPT-J, RoFormer, DeepSeek, ggml "NORM" */
} pe_rope_style;

/* Frequency schemes; the HF transformers rope_type name is in quotes. d is
 * rotary_dim, M0 original_max_positions, s factor. Every scheme is computed
 * as transformers computes it (modeling_rope_utils.py), in double.
 * Stricter than HF, which only warns: factor < 1 (linear, ntk, dynamic, yarn,
 * longrope, llama3) and missing M0 are errors. YaRN's betas may come in any
 * order (HF warns and computes: beta_fast == beta_slow, as Kimi-K2 ships,
 * gives a one-step ramp between the floor and ceil of one correction dim). */
typedef enum pe_rope_scaling {
  PE_ROPE_SCALING_NONE = 0,     /* "default": inv_i = base^(-2i/d), attention factor 1 */
  PE_ROPE_SCALING_LINEAR = 1,   /* "linear" (Position Interpolation): inv_i / s */
  PE_ROPE_SCALING_NTK = 2,      /* static NTK-aware: base' = base * s^(d/(d-2)) */
  PE_ROPE_SCALING_DYNAMIC = 3,  /* "dynamic" (dynamic NTK) for the context seq_len:
                                   base' = base * (s*L/M - (s-1))^(d/(d-2)), L = max(seq_len, M),
                                   where M is HF's max_position_embeddings, passed in
                                   original_max_positions (the context before extension) */
  PE_ROPE_SCALING_YARN = 4,     /* "yarn": NTK-by-parts ramp over [D(beta_fast), D(beta_slow)]
                                   (floor/ceil when truncate), attention factor
                                   0.1 ln s + 1, or mscale(s,mscale)/mscale(s,mscale_all_dim)
                                   (DeepSeek), or attention_factor if given */
  PE_ROPE_SCALING_LONGROPE = 5, /* "longrope" (Phi-3): long_factor when seq_len > M0
                                   (strictly), else short_factor; attention factor
                                   sqrt(1 + ln s / ln M0) unless given */
  PE_ROPE_SCALING_LLAMA3 = 6,   /* "llama3": wavelengths > M0/low_freq_factor divided by s,
                                   < M0/high_freq_factor kept, smooth band between (inclusive);
                                   low_freq_factor == high_freq_factor (Llama-4-Scout) is
                                   accepted: no band, as in transformers */
  PE_ROPE_SCALING_PROPORTIONAL = 7, /* "proportional" (Gemma-4 family), transformers' and vLLM's
                                   numbers: the cache is laid out on ALL head_dim channels,
                                   pairs (j, j + head_dim/2) (NEOX), with frequency
                                   base^(-2j/head_dim) / s for j < rotary_dim/2 and exactly 0
                                   for rotary_dim/2 <= j < head_dim/2. Set rotary_dim to
                                   2 * int(partial_rotary_factor * head_dim / 2) (HF's
                                   2 * rope_angles; 0 = head_dim). pe_rope_cache_params then
                                   reports rotary_dim = head_dim (the channels the cache
                                   pairs). A zero frequency gives cos = attention factor and
                                   sin = 0, so with attention factor 1 those channels come out
                                   bit for bit as they went in (x*1 - y*0 = x), except that -0
                                   may become +0 and an inf/NaN partner makes them NaN - as in
                                   transformers, which rotates them the same way. */
  PE_ROPE_SCALING_CUSTOM = 8    /* the caller supplies inv_freq[rotary_dim/2] (finite, >= 0) */
} pe_rope_scaling;

/* Parameters of a RoPE cache. Size-prefixed: call pe_rope_params_init(),
 * then set the fields you need. The library reads only the first struct_size
 * bytes: an older caller with a smaller struct gets the defaults for the
 * fields it does not know; a larger struct is accepted only if the bytes the
 * library does not know are all zero. */
typedef struct pe_rope_params {
  uint32_t struct_size;           /* sizeof(pe_rope_params), set by init */
  int32_t head_dim;               /* channels per head, > 0 */
  int32_t rotary_dim;             /* rotated channels: even, <= head_dim; 0 = head_dim.
                                     Channels rotary_dim..head_dim-1 pass through. */
  pe_rope_style style;            /* pairing, default PE_ROPE_NEOX */
  double base;                    /* theta, default 10000; finite and > 0 */
  int64_t max_positions;          /* rows of the cos/sin table, default 4096;
                                     0 = no table: cos/sin computed on the fly
                                     per token, any position < 2^53 allowed.
                                     A table costs rotary_dim * 4 bytes per row
                                     (131072 rows at rotary_dim 128: 64 MiB),
                                     built once at create time; a position >=
                                     max_positions fails the call with
                                     PE_ERR_POSITION_OUT_OF_RANGE, nothing
                                     written. Set it to the longest context
                                     served, not to the model's maximum by
                                     default (README: "Choosing max_positions") */
  pe_rope_scaling scaling;        /* default PE_ROPE_SCALING_NONE */
  double factor;                  /* linear, ntk, dynamic, yarn, longrope, llama3,
                                     proportional; default 1 */
  int64_t original_max_positions; /* context before extension: HF
                                     original_max_position_embeddings for yarn,
                                     longrope, llama3; HF max_position_embeddings for
                                     dynamic; 0 = unset */
  int64_t seq_len;                /* context the frequencies serve (dynamic,
                                     longrope); 0 = unset */
  double attention_factor;        /* multiplies cos and sin, at most 1e30; 0 = the type's default */
  double beta_fast, beta_slow;    /* yarn: 0 = HF defaults 32 and 1 */
  double mscale, mscale_all_dim;  /* yarn (DeepSeek-V2/V3); 0 = unset */
  int32_t truncate;               /* yarn: 1 = floor/ceil the correction range
                                     (HF default), 0 = not (gpt-oss) */
  double low_freq_factor, high_freq_factor; /* llama3: default 1 and 4 */
  const float *short_factor, *long_factor;  /* longrope: rotary_dim/2 each (copied) */
  const double *inv_freq;         /* custom: rotary_dim/2 frequencies (copied) */
} pe_rope_params;

/* Fill *p with struct_size = sizeof(pe_rope_params) and the defaults:
 * head_dim 128, rotary_dim 0, NEOX, base 10000, max_positions 4096, NONE,
 * factor 1, truncate 1, low/high_freq_factor 1/4, everything else 0/NULL.
 * NULL is a no-op. Thread-safe. */
PE_API void pe_rope_params_init(pe_rope_params *p);

/* Compute the frequencies and attention factor of *p and, when
 * max_positions > 0, the table of cos and sin (rotary_dim/2 of each per
 * position, already multiplied by the attention factor). The angle p*inv_freq
 * is formed exactly (a double-double: the product and its FMA rounding
 * error) and reduced mod 2*pi in double-double arithmetic, so the accuracy
 * does not depend on the position: every entry is within 1e-7 of cos/sin of
 * the exact angle for the double inv_freq at every position < 2^53 (7.8e-8
 * measured up to position 2^24, 6.3e-8 at positions 2^31 .. 2^53-1 on the
 * on-the-fly, shift and re-rotation paths: below FLT_EPSILON, one float32 ulp
 * of 1.0), and within 1.5 ulp of its own value (1.31 measured; one more
 * rounding when the attention factor is not 1). This holds while
 * |p*inv_freq| < 2^52 * 2*pi (every position with inv_freq <= 3); beyond, the
 * result is bounded but not accurate. HF's float32 angles are off by ~2e-3
 * at position 131071.
 * Returns PE_ERR_NULL_POINTER, PE_ERR_INVALID_ARGUMENT (a field out of its
 * domain: the message names it), PE_ERR_SHAPE (head_dim/rotary_dim),
 * PE_ERR_OVERFLOW (table size), PE_ERR_OUT_OF_MEMORY, PE_ERR_UNSUPPORTED.
 * On error *out is left unchanged. Thread-safe. */
PE_API pe_status pe_rope_cache_create(const pe_rope_params *p, pe_rope_cache **out);

/* Build a cache from the text of a HuggingFace config.json (need not be
 * NUL-terminated; len bytes are read), as transformers derives it:
 * rope_parameters (v5) or legacy rope_scaling, with rope_type or type
 * ("mrope" reads as "default"); rope_theta; max_position_embeddings;
 * original_max_position_embeddings (inside the dict or top level as in
 * Phi-3); head_dim or hidden_size/num_attention_heads; partial_rotary_factor;
 * GPT-NeoX rotary_pct and rotary_emb_base; GPT-J rotary_dim; DeepSeek
 * qk_rope_head_dim; the keys of text_config for vision-language models.
 * Pairing (style) and the defaults of omitted keys come from model_type, per
 * transformers' modeling and config classes (table in docs/pages/models.md);
 * the model type is model_type, else text_config's model_type, else the
 * first of architectures (e.g. "DeepseekV3ForCausalLM" -> deepseek_v3). A
 * model type not in that table is PE_ERR_UNSUPPORTED naming it unless flags
 * has PE_CONFIG_GUESS (then NEOX pairs, and a partial_rotary_factor or
 * rotary_dim of the file is the rotated width: check the model's modeling
 * file). A config without rope_theta of a type whose default libposenc has
 * not checked is PE_ERR_PARSE naming rope_theta - never a silent 10000. A key
 * that sets positions in some model type (docs/pages/models.md lists them)
 * and that this model type's class is not known to read or to ignore is
 * PE_ERR_UNSUPPORTED naming the key.
 * Models that rotate a second slice per layer (DeepSeek-V3.2 and GLM-5's
 * sparse-attention indexer, DeepSeek-V4's compressor: index_n_heads,
 * index_head_dim, index_topk, compress_* keys) are PE_ERR_UNSUPPORTED here,
 * naming the key: pe_model_rope_from_hf_config gives each of those rotations
 * (pe_model_rope_layer_role); attention without
 * positional encoding (Nemotron-H, Jamba, Granite-4.0-H, mla_use_nope) is
 * PE_ERR_UNSUPPORTED here and NULL for every layer there.
 * For ONE-cache models only: a model whose layers use different ropes
 * (Gemma 3, ModernBERT) or whose attention layers include NoPE ones
 * (Cohere2, Llama 4, EXAONE 4) is PE_ERR_UNSUPPORTED with a message naming
 * pe_model_rope_from_hf_config. Layers that are not softmax attention
 * (Qwen3-Next's linear attention) do not count: their one cache is returned.
 * max_positions: table rows, >= 0 (0 = on the fly); seq_len 0 =
 * max_position_embeddings; flags: 0 or PE_CONFIG_GUESS (other bits:
 * PE_ERR_INVALID_ARGUMENT). PE_ERR_PARSE for malformed JSON or missing keys,
 * PE_ERR_UNSUPPORTED for an unknown rope type (the key is named in
 * pe_last_error()). Thread-safe. */
PE_API pe_status pe_rope_cache_create_from_hf_config(const char *json, size_t len,
                                                     int64_t max_positions, int64_t seq_len,
                                                     uint32_t flags, pe_rope_cache **out);

/* Free a cache. NULL is a no-op. Not concurrently with its use. */
PE_API void pe_rope_cache_destroy(pe_rope_cache *c);

/* The resolved parameters of a cache (rotary_dim filled in, defaults
 * applied). Pointer fields point into the cache and live as long as it.
 * out->struct_size must be set by the caller (pe_rope_params_init); only
 * that many bytes are written. PE_ERR_NULL_POINTER, PE_ERR_INVALID_ARGUMENT
 * (struct_size too small). Thread-safe. */
PE_API pe_status pe_rope_cache_params(const pe_rope_cache *c, pe_rope_params *out);

/* The rotary_dim/2 frequencies in radians per position, rounded to float32
 * (the cache works with their double values). Thread-safe. */
PE_API pe_status pe_rope_cache_inv_freq(const pe_rope_cache *c, float *out);

/* The factor cos and sin are multiplied by (YaRN mscale, LongRoPE scale);
 * 1.0 for most schemes; NaN if c is NULL. Thread-safe. */
PE_API double pe_rope_cache_attention_factor(const pe_rope_cache *c);

/* The extra multiplier DeepSeek-style YaRN applies to the attention softmax
 * scale: mscale(factor, mscale_all_dim)^2 when mscale_all_dim is set, else 1.0;
 * NaN if c is NULL. Thread-safe. */
PE_API double pe_rope_cache_softmax_scale(const pe_rope_cache *c);

/* cos and sin (times the attention factor) for one position, rotary_dim/2
 * of each: the table row, or computed exactly as the on-the-fly path does.
 * PE_ERR_POSITION_OUT_OF_RANGE for pos < 0 or pos >= max_positions (when
 * there is a table). Thread-safe. */
PE_API pe_status pe_rope_cache_cos_sin(const pe_rope_cache *c, int64_t pos,
                                       float *cos_out, float *sin_out);

/* Flags: each family has its own bits, and every call refuses bits that are
 * not its own (PE_ERR_INVALID_ARGUMENT, nothing written), so a flag passed to
 * the wrong family is an error, never a different meaning:
 *   RoPE (PE_ROPE_*)   bits 0-7     PE_ROPE_INVERSE, PE_ROPE_MROPE_INTERLEAVED
 *   masks (PE_MASK_*)  bits 8-15    PE_MASK_CAUSAL (ALiBi, T5)
 *   sinusoidal         bits 16-23   PE_SINUSOIDAL_CONCAT
 *   config loaders     bits 24-31   PE_CONFIG_GUESS */

/* Rotate by -angle instead of +angle: undoes pe_apply_rope_qk up to the
 * attention factor squared, which is applied again (use pe_rope_shift_k to
 * move keys without it). */
#define PE_ROPE_INVERSE 1u

/* The calls that write cache rows (pe_apply_rope_qk_store,
 * pe_qk_norm_rope_store, pe_mla_rope_store): write them with streaming
 * (non-temporal) stores. The bytes stored are the same; what changes is the
 * way there. A cache row that no call touched lately - a new token's row,
 * which a serving step always writes - is otherwise first read from memory
 * (the CPU owns a line before it writes it) and then kept in the caches;
 * streamed, each whole 64-byte line of a row goes to memory without either
 * (the partial lines at a row's ends are written as usual). Set it when the
 * rows are not read again soon: a decode step's (the next step reads them,
 * after every other layer) and a prefill whose attention takes the new
 * tokens' k and v from the projection's output (vLLM's and sglang's
 * prefill); leave it off when the same layer's attention reads the rows from
 * the cache right after (llama.cpp), where they would come back from memory.
 * Measured on an Intel Xeon (family 6 model 207), one thread, Qwen3-8B's
 * pe_qk_norm_rope_store into cold cache rows: README. x86-64 only (SSE2,
 * AVX2 or AVX-512 streaming stores, fenced before the call returns); on
 * other targets the flag is accepted and the rows are written as usual.
 * The rows are computed into a 16 KiB stack stage first (a few tokens at a
 * time), so the flag takes effect for plain rows (f32, f16, bf16 caches; an
 * MLA step's PE_MLA_PLAIN rows) when the rows' cos/sin come from the
 * cache's table (max_positions > 0), PE_ROPE_INVERSE is not given, a
 * token's k and v rows take at most 16 KiB together and the call writes at
 * least 8 KiB of rows (a streamed call ends waiting for its stores to reach
 * memory, which costs more than a few KiB of ordinary stores); otherwise,
 * and for every FP8 and Q8_0 format (streamed, they measured slower than
 * ordinary stores: README), the rows are written as usual. */
#define PE_ROPE_STREAM_CACHE 4u

/* Rotate q and/or k in place at their positions.
 * q, k: [batch, heads, tokens, head_dim] (any strides, stride[3] == 1); either
 * may be NULL, not both. Batch and token counts of q and k must match; head
 * counts may differ (GQA/MQA); head_dim must equal the cache's. Channels
 * [rotary_dim, head_dim) are left untouched. q and k must not share elements
 * (PE_ERR_SHAPE, nothing written); views of one packed QKV buffer are fine.
 * positions: [batch][tokens] or NULL (0..tokens-1). flags: PE_ROPE_INVERSE.
 * NEOX: o_j = x_j c_j - x_{j+h} s_j, o_{j+h} = x_{j+h} c_j + x_j s_j (h = rotary_dim/2);
 * GPTJ: the same on pairs (2j, 2j+1). Computed as fmaf(x, c, -(y*s)) and
 * fmaf(y, c, x*s) on every ISA.
 * Errors: PE_ERR_NULL_POINTER, PE_ERR_SHAPE, PE_ERR_DTYPE, PE_ERR_OVERFLOW,
 * PE_ERR_POSITION_OUT_OF_RANGE (negative, or >= max_positions with a table),
 * PE_ERR_INVALID_ARGUMENT (unknown flag), PE_ERR_BUSY (busy pool). Thread-safe
 * as above. */
PE_API pe_status pe_apply_rope_qk(const pe_rope_cache *c, const pe_tensor *q,
                                  const pe_tensor *k, const int64_t *positions,
                                  uint32_t flags, pe_threadpool *pool);

/* Move cached keys by a position delta (context shift, "KV cache shift"): k was
 * rotated at p, afterwards it is as if rotated at p + delta. deltas is
 * [batch][tokens] (may be negative; NULL is an error); |delta| < 2^53. The
 * rotation by delta*inv_freq is computed on the fly in double precision and
 * the attention factor is NOT applied again (unlike apply + inverse). Same
 * tensor rules and errors as pe_apply_rope_qk. */
PE_API pe_status pe_rope_shift_k(const pe_rope_cache *c, const pe_tensor *k,
                                 const int64_t *deltas, pe_threadpool *pool);

/* Re-rotate cached keys from one frequency set to another in one pass
 * (LongRoPE short->long switch, dynamic-NTK growth): k was rotated by `from`
 * at positions; afterwards it is as if rotated by `to`, including the ratio of
 * attention factors. Both caches must have the same head_dim, rotary_dim and
 * style (PE_ERR_SHAPE / PE_ERR_INVALID_ARGUMENT otherwise). Positions are not
 * limited by max_positions (angles computed on the fly in double). */
PE_API pe_status pe_rope_rerotate_k(const pe_rope_cache *from, const pe_rope_cache *to,
                                    const pe_tensor *k, const int64_t *positions,
                                    pe_threadpool *pool);

/* ------------------------------------------------------------------------ */
/* ALiBi (Press et al.; BLOOM, MPT, Falcon-RW)                               */
/* ------------------------------------------------------------------------ */

/* Slopes for n_heads heads (1..65536): Press et al.'s geometric sequence
 * 2^(-max_bias*k/n) for powers of two n, and the BLOOM interleaving
 * otherwise (n = 12, 24, 40, 96...). max_bias > 0, finite; 8 is standard.
 * out: n_heads floats. Thread-safe. */
PE_API pe_status pe_alibi_slopes(int32_t n_heads, double max_bias, float *out);

/* Also set the score to -inf where the key position is after the query
 * position (a fused causal mask). */
#define PE_MASK_CAUSAL 0x100u

/* scores[b,h,i,j] += -slopes[h] * |qpos(b,i) - j|, in place.
 * scores: [batch, heads, q_len, k_len], any strides with stride[3] == 1.
 * slopes: heads floats; NULL = pe_alibi_slopes(heads, 8). A caller that
 * shards heads across devices passes its own slice: slopes + head_offset.
 * q_positions: [batch][q_len]; NULL = k_len - q_len + i (the queries are the
 * last positions: decode with a KV cache). flags: PE_MASK_CAUSAL.
 * Relation to BLOOM's `+slope*j` bias: under a causal mask the two differ by
 * slope*qpos, a constant per row, so softmax gives identical probabilities;
 * without a mask they are not equivalent. */
PE_API pe_status pe_alibi_add_bias(const pe_tensor *scores, const float *slopes,
                                   const int64_t *q_positions, uint32_t flags,
                                   pe_threadpool *pool);

/* ------------------------------------------------------------------------ */
/* T5 relative position bias                                                */
/* ------------------------------------------------------------------------ */

/* T5's relative_position_bucket for relative_position = key - query:
 * exact buckets for small distances, log-spaced up to max_distance, one far
 * bucket beyond; half the buckets per direction when bidirectional (non-zero).
 * Valid arguments: num_buckets even and >= 4 when bidirectional, >= 2
 * otherwise; max_distance > max_exact (a quarter of num_buckets when
 * bidirectional, half otherwise). Returns the bucket in [0, num_buckets),
 * or -1 for invalid arguments (the reason in pe_last_error()). Thread-safe. */
PE_API int32_t pe_t5_bucket(int64_t relative_position, int32_t bidirectional,
                            int32_t num_buckets, int32_t max_distance);

/* scores[b,h,i,j] += table[bucket(j - qpos(b,i))][h], in place.
 * table: [num_buckets][heads] float32 (the layout of T5's nn.Embedding
 * weight), every entry finite (PE_ERR_INVALID_ARGUMENT otherwise). Its row
 * stride is the full head count, so heads cannot be sharded by offsetting
 * the pointer: pass the slice's own [num_buckets][heads_slice] table.
 * q_positions and flags as for pe_alibi_add_bias (with q_positions NULL,
 * q_len > k_len is PE_ERR_SHAPE). */
PE_API pe_status pe_t5_add_bias(const pe_tensor *scores, const float *table,
                                int32_t bidirectional, int32_t num_buckets,
                                int32_t max_distance, const int64_t *q_positions,
                                uint32_t flags, pe_threadpool *pool);

/* ------------------------------------------------------------------------ */
/* Sinusoidal (Vaswani et al.) and learned absolute embeddings              */
/* ------------------------------------------------------------------------ */

/* [sin | cos] halves with frequencies exp(-i*ln(base)/(half-1)) and a zero
 * column for odd d_model (fairseq, tensor2tensor, M2M100). The default is the
 * paper's interleaving: PE[p,2i] = sin(p*base^(-2i/d)), PE[p,2i+1] = cos(...). */
#define PE_SINUSOIDAL_CONCAT 0x10000u

/* Write the table for positions 0..n_positions-1 into out
 * ([n_positions][d_model] float32). Angles in double precision: each
 * frequency is the double product of two pow/exp results (a few double ulps
 * from base^(-2i/d); d/64 + 64 calls per call, not d/2), the same bits on
 * every ISA.
 * d_model >= 1 (>= 4 with PE_SINUSOIDAL_CONCAT); base > 0, finite. */
PE_API pe_status pe_sinusoidal_table(int64_t n_positions, int32_t d_model, double base,
                                     uint32_t flags, float *out);

/* x[b,0,t,:] += PE(positions[b][t]) in place; x: [batch, 1, tokens, d_model]. */
PE_API pe_status pe_sinusoidal_add(const pe_tensor *x, const int64_t *positions,
                                   double base, uint32_t flags, pe_threadpool *pool);

/* x[b,0,t,:] += table[0,0,positions[b][t],:] in place; table: [1,1,max_len,d_model]
 * of any dtype (mixes allowed). A position >= max_len is
 * PE_ERR_POSITION_OUT_OF_RANGE with nothing written: learned embeddings
 * cannot extrapolate, and this reports it instead of reading past the table. */
PE_API pe_status pe_learned_add(const pe_tensor *x, const pe_tensor *table,
                                const int64_t *positions, pe_threadpool *pool);

/* ------------------------------------------------------------------------ */
/* Threads and dispatch                                                     */
/* ------------------------------------------------------------------------ */

/* A pool of n_threads - 1 persistent workers plus the calling thread
 * (n_threads 0 = one per physical core of the caller's NUMA node, via hwloc),
 * each worker bound to its core when hwloc allows (unpinned otherwise).
 * n_threads in [0, 1024]. Thread-safe. */
PE_API pe_status pe_threadpool_create(int32_t n_threads, pe_threadpool **out);

/* Stop and join the workers. NULL is a no-op. Not while a call uses the pool. */
PE_API void pe_threadpool_destroy(pe_threadpool *p);

/* Threads taking part in a call (workers + the caller); 1 for NULL. */
PE_API int32_t pe_threadpool_size(const pe_threadpool *p);

/* The kernel path in use: "avx512bf16", "avx512", "avx2", "neon" or
 * "scalar". "avx512bf16" is the AVX-512 path whose bf16 rounding is
 * AVX512-BF16's instruction; every path gives the same bits. Thread-safe. */
PE_API const char *pe_isa_name(void);

/* Select a kernel path by name ("scalar", "avx2", "avx512", "avx512bf16",
 * "neon", or "auto" for the best the CPU runs). The environment variable
 * PE_ISA does the same at first use. PE_ERR_UNSUPPORTED if the CPU or build
 * lacks it (pe_last_error() names the missing CPU features),
 * PE_ERR_INVALID_ARGUMENT for an unknown name. Not thread-safe: for tests and
 * benchmarks, before concurrent use. A PE_ISA naming a path this CPU or build
 * cannot run (or an unknown name) is ignored and the best path is used: a
 * library must not fail every call because of an environment variable. The
 * test programs check instead: each compares PE_ISA with pe_isa_name() at
 * start and exits non-zero when they differ.
 *
 * The environment variable PE_CPU_DISABLE (read once, at the first call that
 * needs the CPU's features) hides features from the library as if the CPU
 * lacked them: a comma-separated list of avx2, avx512, avx512bf16,
 * avx512fp16, neon (avx2 hides AVX-512 too; avx512 its extensions; unknown
 * names are ignored). E.g. PE_CPU_DISABLE=avx512 runs a machine with AVX-512
 * as an AVX2-only one, for tests, benchmarks and bug reports. */
PE_API pe_status pe_force_isa(const char *name);

/* ------------------------------------------------------------------------ */
/* RoPE for serving engines                                                 */
/* ------------------------------------------------------------------------ */

/* Rotate q in place and write the rotated k straight into a (paged) KV cache,
 * converting to the cache's dtype in the same pass: k is read once and each
 * cache row written once, instead of rotate-k-in-place + copy (vLLM's
 * rotary_embedding followed by reshape_and_cache).
 *
 * c: the RoPE cache (frequencies, table, style).
 * q: [batch, q_heads, tokens, head_dim], rotated in place; may be NULL.
 * k: [batch, kv_heads, tokens, head_dim], read only (not modified).
 * k_cache: [num_blocks, kv_heads, block_size, head_dim], any strides with
 *   stride[3] == 1 and any dtype (f32/f16/bf16, need not be k's): slot s is
 *   block s / block_size, row s % block_size. A flat cache of num_slots rows
 *   is num_blocks 1, block_size num_slots (or the reverse); vLLM/FlashInfer
 *   "NHD" [num_blocks, block_size, kv_heads, head_dim] and "HND"
 *   [num_blocks, kv_heads, block_size, head_dim] layouts are both strides.
 *   Must not overlap q or k.
 * slot_mapping: [batch][tokens] int64: the cache slot of each token's key,
 *   in [0, num_blocks * block_size), or -1 to skip the token (padding; as
 *   in vLLM): its cache rows are not touched (its q is still rotated). A slot
 *   given to two tokens is an error, since the stored key would depend on
 *   the order of the writes (and on the thread schedule).
 * positions: [batch][tokens] or NULL (0..tokens-1), as pe_apply_rope_qk.
 * flags: PE_ROPE_INVERSE, PE_ROPE_STREAM_CACHE.
 * Stored value, per element: k widened exactly to float32, rotated exactly
 * as pe_apply_rope_qk does, rounded once to k_cache's dtype; channels
 * [rotary_dim, head_dim) converted (bits copied when the dtypes match). So
 * for k_cache's dtype equal to k's, or k f32, the cache holds bit for bit
 * what pe_apply_rope_qk on k followed by a converting copy would give; for a
 * half-type k and a wider cache it keeps the float32 result instead of
 * rounding it to k's dtype first. Bit-identical across ISAs and pool sizes.
 * Errors (nothing written on any): PE_ERR_NULL_POINTER (c, k, k_cache,
 * slot_mapping, data), PE_ERR_SHAPE (head_dim != the cache's, heads of k and
 * k_cache differ, q/k batch or tokens differ, k_cache overlaps q or k,
 * aliasing strides), PE_ERR_DTYPE, PE_ERR_OVERFLOW,
 * PE_ERR_POSITION_OUT_OF_RANGE, PE_ERR_INVALID_ARGUMENT (a slot < -1 or
 * >= num_blocks * block_size, a duplicate slot, unknown flags), PE_ERR_BUSY
 * (busy pool).
 * Thread-safety: as pe_apply_rope_qk; two concurrent calls must not write
 * the same cache rows. */
PE_API pe_status pe_apply_rope_qk_store(const pe_rope_cache *c, const pe_tensor *q,
                                        const pe_tensor *k, const pe_tensor *k_cache,
                                        const int64_t *slot_mapping, const int64_t *positions,
                                        uint32_t flags, pe_threadpool *pool);

/* pe_apply_mrope_qk: use Qwen3-VL's interleaved assignment of frequencies to
 * axes instead of Qwen2-VL's contiguous sections. */
#define PE_ROPE_MROPE_INTERLEAVED 2u

/* Multi-axis RoPE (M-RoPE) of Qwen2-VL / Qwen2.5-VL / Qwen3-VL: each
 * frequency is rotated by the position of one of three axes (temporal,
 * height, width), in place on q and/or k.
 * c: the cache (its frequencies, table, attention factor and style; for the
 *   Qwen-VL models NeoX, default frequencies). Any cache works: M-RoPE only
 *   changes which position each frequency uses.
 * q, k: as pe_apply_rope_qk (either may be NULL, not both).
 * positions: [3][batch][tokens] int64 (HF's position_ids of shape
 *   (3, batch, tokens): t, h, w), each < max_positions with a table; NULL =
 *   0..tokens-1 on every axis.
 * mrope_section: 3 counts of frequencies (HF rope_scaling["mrope_section"]),
 *   >= 0, summing to rotary_dim/2. Frequency i (0 <= i < rotary_dim/2) uses
 *   - by default (Qwen2-VL): axis t for i < s0, h for s0 <= i < s0+s1, w
 *     after (HF: cos.split(mrope_section * 2)[j] taken from axis j % 3);
 *   - with PE_ROPE_MROPE_INTERLEAVED (Qwen3-VL): h when i % 3 == 1 and
 *     i < 3*s1, w when i % 3 == 2 and i < 3*s2, t otherwise
 *     (HF apply_interleaved_mrope).
 *   Both halves of the NeoX pair (or the GPT-J pair) use frequency i's angle.
 * flags: PE_ROPE_INVERSE, PE_ROPE_MROPE_INTERLEAVED.
 * A token whose three positions are equal (text) is rotated bit for bit as
 * pe_apply_rope_qk rotates it at that position. The same bits as
 * pe_apply_rope_axes_qk with 3 axes and the map of pe_axis_map_sections
 * (or pe_axis_map_interleaved) of mrope_section.
 * Errors (nothing written): PE_ERR_NULL_POINTER, PE_ERR_SHAPE, PE_ERR_DTYPE,
 * PE_ERR_OVERFLOW, PE_ERR_POSITION_OUT_OF_RANGE (names the axis),
 * PE_ERR_INVALID_ARGUMENT (mrope_section, flags), PE_ERR_BUSY (busy pool).
 * Thread-safe as pe_apply_rope_qk. */
PE_API pe_status pe_apply_mrope_qk(const pe_rope_cache *c, const pe_tensor *q, const pe_tensor *k,
                                   const int64_t *positions, const int32_t *mrope_section,
                                   uint32_t flags, pe_threadpool *pool);

/* The M-RoPE arguments of a HuggingFace config.json (len bytes, need not be
 * NUL-terminated): mrope_section[3] from rope_parameters or rope_scaling,
 * at the top level (Qwen2-VL, Qwen2.5-VL) or in text_config (Qwen3-VL), and
 * *flags = PE_ROPE_MROPE_INTERLEAVED when "mrope_interleaved" is true, else
 * 0 (OR in PE_ROPE_INVERSE yourself when needed). The outputs are written
 * only on success. The sum is checked by pe_apply_mrope_qk against the
 * cache. Errors: PE_ERR_NULL_POINTER, PE_ERR_PARSE (invalid JSON, no
 * mrope_section, not 3 non-negative integers). Thread-safe. */
PE_API pe_status pe_mrope_section_from_hf_config(const char *json, size_t len,
                                                 int32_t *mrope_section, uint32_t *flags);

/* ------------------------------------------------------------------------ */
/* Multi-axis RoPE, any layout                                              */
/* ------------------------------------------------------------------------ */

/* The most axes pe_apply_rope_axes_qk takes (ggml's rope_multi has 4
 * position rows: t, h, w and an extra one). */
#define PE_MAX_AXES 4

/* Rotate q and/or k in place, each frequency by the position of its own
 * axis: the general form of pe_apply_mrope_qk (which is this function with
 * the map of pe_axis_map_sections or pe_axis_map_interleaved, bit for bit).
 * c: the cache (frequencies, table or on the fly, attention factor, style).
 * q, k: as pe_apply_rope_qk (either may be NULL, not both).
 * positions: [n_axes][batch][tokens] int64, each < max_positions with a
 *   table (< 2^53 without); NULL = 0..tokens-1 on every axis.
 * n_axes: 1..PE_MAX_AXES.
 * axis_of_freq: [rotary_dim/2] (rotary_dim as pe_rope_cache_params reports
 *   it), each < n_axes: frequency i (both halves of its NeoX or GPT-J pair)
 *   rotates by positions[axis_of_freq[i]]. The caller's array, read during
 *   the call only; build it with the helpers below or by hand (openPangu's
 *   or any other per-frequency order).
 * flags: PE_ROPE_INVERSE.
 * A token whose axes all hold the same position is rotated bit for bit as
 * pe_apply_rope_qk rotates it there.
 * 2-D vision RoPE is a CUSTOM cache plus a two-axis map, positions
 * [h or y][w or x]:
 *   - Qwen2-VL / Qwen2.5-VL vision towers (VisionRotaryEmbedding(head_dim/2),
 *     NeoX over all head_dim channels): inv_freq[i] = theta^(-4i/head_dim)
 *     for i < head_dim/4, repeated once (inv_freq[head_dim/4 + i] =
 *     inv_freq[i]), map sections {head_dim/4, head_dim/4}: the first half
 *     of the frequencies at the row (h), the second at the column (w).
 *   - Llama-4 vision (Llama4VisionRotaryEmbedding, GPT-J pairs): the same
 *     with freq_dim = head_dim/2, inv_freq[i] = theta^(-2i/freq_dim) for
 *     i < freq_dim/2, repeated once, sections {freq_dim/2, freq_dim/2},
 *     positions x + 1 then y + 1 (HF's frequencies_x then frequencies_y;
 *     the CLS token, whose angles HF masks to 0, at 0 and 0).
 * Errors (nothing written): PE_ERR_NULL_POINTER (c, axis_of_freq, q and k),
 * PE_ERR_SHAPE, PE_ERR_DTYPE, PE_ERR_OVERFLOW, PE_ERR_POSITION_OUT_OF_RANGE
 * (names the axis), PE_ERR_INVALID_ARGUMENT (n_axes, an axis_of_freq entry,
 * flags), PE_ERR_BUSY (busy pool). No tokens: PE_OK. Thread-safe as
 * pe_apply_rope_qk. */
PE_API pe_status pe_apply_rope_axes_qk(const pe_rope_cache *c, const pe_tensor *q,
                                       const pe_tensor *k, const int64_t *positions,
                                       int32_t n_axes, const uint8_t *axis_of_freq,
                                       uint32_t flags, pe_threadpool *pool);

/* axis_of_freq[0..n_freq) for contiguous sections (Qwen2-VL's
 * mrope_section; ggml's GGML_ROPE_TYPE_MROPE with up to 4 sections):
 * sections[0..n_sections) >= 0 with sum S in [1, n_freq]; frequency i is in
 * section j when s_0 + .. + s_{j-1} <= i % S < s_0 + .. + s_j, i.e. the
 * sections repeat cyclically when S < n_freq (as ggml's rope_multi does).
 * With S == n_freq and 3 sections this is HF's Qwen2-VL
 * (cos.split(mrope_section * 2)[j] from axis j % 3). n_sections 1..4 (the
 * n_axes to pass). Errors (nothing written): PE_ERR_NULL_POINTER,
 * PE_ERR_INVALID_ARGUMENT. Thread-safe. */
PE_API pe_status pe_axis_map_sections(const int32_t *sections, int32_t n_sections,
                                      int32_t n_freq, uint8_t *axis_of_freq);

/* axis_of_freq[0..n_freq) for interleaved sections (Qwen3-VL's
 * apply_interleaved_mrope; ggml's GGML_ROPE_TYPE_IMROPE): with
 * j = i % S (S = the sum, in [1, n_freq]): axis 1 when j % 3 == 1 and
 * j < 3*s_1, axis 2 when j % 3 == 2 and j < 3*s_2, else axis 0 - except,
 * with 4 sections (ggml), axis 3 for the j that are not (j % 3 == 0 and
 * j < 3*s_0). n_sections 3 or 4. With 3 sections summing to n_freq it is
 * HF's Qwen3-VL exactly. Errors (nothing written): PE_ERR_NULL_POINTER,
 * PE_ERR_INVALID_ARGUMENT. Thread-safe. */
PE_API pe_status pe_axis_map_interleaved(const int32_t *sections, int32_t n_sections,
                                         int32_t n_freq, uint8_t *axis_of_freq);

/* axis_of_freq[0..n_freq) for Ernie-4.5-VL (HF's Ernie4_5_VL rope "ernie_3d",
 * vLLM's Ernie4_5_VLRotaryEmbedding): the first n_freq - t_freqs
 * frequencies alternate h (axis 1, even i) and w (axis 2, odd i), the last
 * t_freqs follow t (axis 0); positions [t][h][w] as HF's position_ids.
 * t_freqs is the config's freq_allocation (mrope_section[2] of HF's
 * rope_parameters, e.g. {22, 22, 20} for head_dim 128), 0 <= t_freqs <=
 * n_freq with n_freq - t_freqs even. The model uses GPT-J pairs and default
 * frequencies (base 500000): HF's pre-rotated inv_freq and vLLM's cache both
 * reduce to frequency i at pair i. Errors (nothing written):
 * PE_ERR_NULL_POINTER, PE_ERR_INVALID_ARGUMENT. Thread-safe. */
PE_API pe_status pe_axis_map_ernie45_vl(int32_t t_freqs, int32_t n_freq, uint8_t *axis_of_freq);

/* Rotate a batch whose sequences use different frequency sets, in one call:
 * batch row b uses caches[cache_index[b]] (its table or on-the-fly
 * frequencies and its attention factor). For per-request dynamic-NTK
 * contexts, LongRoPE short/long factors per sequence, per-adapter scaling.
 * caches: n_caches >= 1 non-NULL caches with the same head_dim, rotary_dim
 *   and style.
 * cache_index: [batch] int32 in [0, n_caches); NULL only when n_caches == 1.
 * q, k, positions, flags: as pe_apply_rope_qk; each position is checked
 *   against its own row's cache (max_positions when it has a table).
 * Each batch row is rotated bit for bit as pe_apply_rope_qk with its cache
 * would rotate it. Errors (nothing written): PE_ERR_NULL_POINTER,
 * PE_ERR_SHAPE (caches or tensors differ in geometry), PE_ERR_DTYPE,
 * PE_ERR_OVERFLOW, PE_ERR_POSITION_OUT_OF_RANGE, PE_ERR_INVALID_ARGUMENT
 * (n_caches, a cache_index value, styles differ, flags), PE_ERR_BUSY (busy
 * pool).
 * Thread-safe as pe_apply_rope_qk. */
PE_API pe_status pe_apply_rope_qk_multi(const pe_rope_cache *const *caches, int32_t n_caches,
                                        const int32_t *cache_index, const pe_tensor *q,
                                        const pe_tensor *k, const int64_t *positions,
                                        uint32_t flags, pe_threadpool *pool);

/* ------------------------------------------------------------------------ */
/* The post-projection step: QK-norm + RoPE + K and V into the cache          */
/* ------------------------------------------------------------------------ */

/* After the QKV projection a decoder layer may norm each q and k row (QK-norm),
 * rotate q and k, and write k and v into the KV cache. These calls do all of
 * it in one pass over the bytes: every element of q, k and v is read once and
 * every output written once.
 *
 * The norm, in transformers' terms (r is the row's scale):
 *   PE_QK_NORM_RMS             x * r * w        Qwen3RMSNorm (Qwen3, Qwen3-MoE
 *                                               q_norm/k_norm), Olmo2RMSNorm
 *   PE_QK_NORM_RMS_UNIT_OFFSET x * r * (1 + w)  Gemma3RMSNorm (Gemma 3)
 *   PE_QK_NORM_L2              x * r            Llama4TextL2Norm (Llama 4)
 *   with r = 1 / sqrt(mean(x^2) + eps) over the row: the head's head_dim
 *   channels (PE_QK_NORM_PER_HEAD: HF's q_norm/k_norm over head_dim, one weight
 *   of head_dim floats shared by every head) or the token's heads * head_dim
 *   channels (PE_QK_NORM_PER_TOKEN: OLMo 2's q_norm/k_norm over the whole
 *   projection, a weight of heads * head_dim floats, head-major as the
 *   projection's output), every channel including those past rotary_dim.
 *
 * Exact arithmetic (float32 as transformers' float32 modules compute it,
 * one rounding per operation; the same bits on every ISA and pool size):
 * each element x (widened exactly to float32) adds its square to its row's
 * sum - element e of the row into lane e % 16, lane = fmaf(x, x, lane) (the
 * square exact inside the fma), in increasing e - and the 16 lanes are added
 * pairwise (lane i += lane i+8, then +4, +2, +1); a per-token row adds its
 * heads' sums pairwise (aligned blocks of 2^k heads as (first half) +
 * (second half), then the blocks of the head count's binary digits, largest
 * first, added from the last). r = 1 / sqrt(s / n + eps) (n channels) is
 * computed from the float32 sum s in float64 (s * (1/n), + eps, sqrt, 1 /
 * that) and rounded once to float32: one scalar per row, where
 * transformers' float32 rsqrt of the mean rounds four times. r = 0 when it
 * is NaN (an element is NaN: that element stays NaN, the others become 0, as
 * a row holding an Inf does in HF too; HF would make the whole row NaN).
 * Each element, with xr = x * r: n = xr * w (RMS), fmaf(xr, w, xr) (unit
 * offset: xr * (1 + w) rounded once) or xr (L2), in float32; the pair is
 * then rotated as pe_apply_rope_qk rotates a pair, x' = fmaf(n_x, c,
 * -(n_y*s)), y' = fmaf(n_y, c, n_x*s) with the table's float32 cos/sin, and
 * stored as every rotation stores (float32, or rounded once to bf16/f16).
 * Channels past rotary_dim: n stored the same way. As in transformers'
 * float32 modules, a row whose sum of squares overflows float32 (elements
 * of magnitude ~1.8e19 / sqrt(n) or more) gets r = 0 (its finite elements
 * become 0, Inf and NaN NaN), and with eps = 0 an all-zero row gets r = Inf
 * (its elements NaN).
 *
 * Error bound (float32 outputs), against the float64 formulas with exact
 * cos/sin, in units of u = 2^-24 (first order): a square meets at most M
 * roundings in the sum (M = ceil(head_dim/16) + 4: the fullest lane's fmas
 * and the tree; per token + ceil(log2(heads)) for the heads' pairwise sum),
 * so r is within (M/2 + 0.5) u of its exact value; a normed element within
 * (M/2 + 1.5) u of |n| (RMS kinds; L2 M/2 + 1), and that is the bound past
 * rotary_dim; a rotated pair's outputs within (M/2 + 3.5) u * v + half an
 * ulp of the result (c and s within 1.5 float32 ulp each, n_y*s rounded; L2
 * M/2 + 3), v = |n_x| + |n_y| (n_x, n_y the pair's exact normed values):
 * for head_dim 128, 9.5 u * v + ulp/2, below 10 float32 ulps of v. Measured
 * (tests/test_qk_norm.c, random rows at scales 1e-3 .. 1e3, the worst of
 * 0.5-1 million outputs per model, the same inputs and cos/sin through an
 * emulation of transformers' float32 modules, PyTorch's own sum order
 * included): Qwen3RMSNorm 2.73 float32 ulps of v (transformers 3.52),
 * Gemma3RMSNorm (head_dim 256) 3.06 (3.72), Llama4TextL2Norm 2.70 (2.93),
 * OLMo 2 per token (32 heads x 128) 3.04 (3.14), GPT-J pairs 2.72 (3.62);
 * the RMS error 0.38-0.43 ulps against transformers' 0.46-0.54 (a plain
 * left-to-right float32 sum, as a naive loop does: 4.9-19 ulps). (The
 * float64 arithmetic this replaced was within 2 ulps, 1.26 measured, and
 * took 2-2.9x the time; the results' low bits changed with this.)
 *
 * How that relates to HF's rounding for bf16/f16 models: HF upcasts x to
 * float32 for the mean and r, as this library does. Gemma3RMSNorm
 * multiplies by (1 + w) in float32 and casts once to the input dtype,
 * Llama4TextL2Norm casts x * r once; Qwen3RMSNorm and OLMo 2 cast x * r to
 * the input dtype before multiplying by the weight (a bf16 product, rounded
 * again), and apply_rotary_pos_emb then rounds q*cos, rotate_half(q)*sin and
 * their sum to bf16 again (with cos/sin cast to bf16). This library keeps
 * float32 to the end and rounds to the dtype once, so its bf16/f16 output
 * is the float32 result correctly rounded: within half a bf16 ulp (plus the
 * float32 result's few float32 ulps) of the exact value, where HF's is
 * within a few bf16 ulps.
 *
 * The weights are float32 (convert a bf16 checkpoint's weight once with an
 * exact widening; it is read on every call, not copied). A NaN weight gives
 * NaN outputs whose payload may differ between ISAs (the one exception to
 * bit identity). */
typedef enum pe_qk_norm_kind {
  PE_QK_NORM_NONE = 0,            /* no norm: RoPE only */
  PE_QK_NORM_RMS = 1,             /* x * r * w (Qwen3, OLMo 2) */
  PE_QK_NORM_RMS_UNIT_OFFSET = 2, /* x * r * (1 + w) (Gemma 3) */
  PE_QK_NORM_L2 = 3               /* x * r, no weight (Llama 4 L2Norm) */
} pe_qk_norm_kind;

typedef enum pe_qk_norm_scope {
  PE_QK_NORM_PER_HEAD = 0,  /* over each head's head_dim channels */
  PE_QK_NORM_PER_TOKEN = 1  /* over each token's heads * head_dim channels (OLMo 2) */
} pe_qk_norm_scope;

/* The QK-norm of a layer. Size-prefixed like pe_rope_params: call
 * pe_qk_norm_init(), then set the fields. The weights are the caller's
 * (read during each call, not copied); they must not overlap a tensor the
 * call writes. */
typedef struct pe_qk_norm {
  uint32_t struct_size;     /* sizeof(pe_qk_norm), set by init */
  pe_qk_norm_kind kind;     /* default PE_QK_NORM_NONE */
  pe_qk_norm_scope scope;   /* default PE_QK_NORM_PER_HEAD */
  float eps;                /* finite and >= 0; default 1e-6 (HF rms_norm_eps) */
  const float *q_weight;    /* RMS kinds: head_dim (per head) or q_heads*head_dim
                               (per token) floats, required when q is given;
                               NONE and L2: must be NULL */
  const float *k_weight;    /* the same for k (kv_heads*head_dim per token) */
} pe_qk_norm;

/* struct_size = sizeof(pe_qk_norm), kind NONE, per head, eps 1e-6, no
 * weights. */
PE_API void pe_qk_norm_init(pe_qk_norm *n);

/* Cache element formats (pe_kv_cache's k_quant / v_quant). Values fixed. */
typedef enum pe_kv_quant {
  PE_KV_PLAIN = 0,    /* rows of the tensor's dtype (f32/f16/bf16) */
  PE_KV_FP8_E4M3 = 1, /* OCP FP8 e4m3fn, 1 byte per element, per-tensor scale */
  PE_KV_FP8_E5M2 = 2, /* OCP FP8 e5m2, 1 byte per element, per-tensor scale */
  PE_KV_Q8_0 = 3,     /* ggml's block_q8_0: 34 bytes per 32 elements */
  PE_KV_FP8_E4M3_ROWSCALE = 4 /* e4m3 with a power-of-two float32 scale per row, the
                                 scales after the block's rows: the DeepSeek-V3.2 /
                                 GLM-5 indexer key cache (vLLM), below */
} pe_kv_quant;

/* The KV cache a store call writes: one descriptor for every cache format.
 * Size-prefixed: call pe_kv_cache_init(), then set k, v and, for a
 * quantized cache, its format and scale.
 * k: [num_blocks, kv_heads, block_size, head_dim], as pe_apply_rope_qk_store's
 *   k_cache (any strides with stride[3] == 1, any dtype) when k_quant is
 *   PE_KV_PLAIN.
 * v: NULL (no v written), or [num_blocks, kv_heads, block_size, v_head_dim]
 *   with k's num_blocks, kv_heads and block_size, any strides and dtype;
 *   v_head_dim may differ from head_dim.
 *
 * Quantized caches (k_quant / v_quant not PE_KV_PLAIN; each tensor has its
 * own format). The tensor keeps its shape in elements ([num_blocks, kv_heads,
 * block_size, head_dim], shape[3] the channels) but is a tensor of BYTES:
 * data is the byte address of row [0,0,0], stride[0..2] are in bytes (any
 * order and sign; as for a plain cache, no two rows may overlap), stride[3]
 * must be 1, no alignment is required and its dtype field is not read. One row (block, head, slot) is:
 *   PE_KV_FP8_E4M3 / E5M2: head_dim bytes, byte i the code of channel i:
 *     code = round-to-nearest-even(x / scale) in the format (x the float32
 *     value, the float32 divide), saturating to the largest finite magnitude
 *     (e4m3fn 448 = 0x7e, e5m2 57344 = 0x7b; Inf saturates too), NaN stored
 *     as sign | 0x7f (e4m3fn, its only NaN) or sign | 0x7e (e5m2's quiet
 *     NaN). Read back as value(code) * scale (float32 multiply), value() the
 *     OCP definition (e5m2's 0x7c is Inf, 0x7d..0x7f NaN).
 *   PE_KV_Q8_0: head_dim / 32 blocks of 34 bytes, block j channels [32j,
 *     32j+32): a little-endian f16 d then 32 int8 qs, the bytes of ggml's
 *     quantize_row_q8_0_ref: amax = max |x| (float32), d = amax / 127.0f,
 *     id = d != 0 ? 1.0f / d : 0, d stored as f16 (nearest even, overflow to
 *     Inf), qs = roundf(x * id) (half away from zero; 0 where x * id is not
 *     finite, i.e. 1/d overflowed). A block holding a NaN or an Inf stores d =
 *     0x7e00 (f16 NaN) and qs 0: it reads back as NaN. Read back as (float)qs
 *     * (float)d (ggml's dequantize_row_q8_0). head_dim (v_head_dim for v)
 *     must be a multiple of 32 (PE_ERR_SHAPE).
 *   PE_KV_FP8_E4M3_ROWSCALE: block-major, one head (kv_heads 1), vLLM's
 *     indexer_k_quant_and_cache with ue8m0 scales (DeepSeek-V3.2's and
 *     GLM-5's sparse-attention indexer keys, 128 channels): block b at data +
 *     b * stride[0]; its token rows of head_dim e4m3 codes at t * stride[2]
 *     (stride[2] == head_dim when block_size > 1), then the block's float32
 *     scales (little-endian) at block_size * head_dim + 4t. A row's scale is
 *     2^e, e the smallest integer with 2^e >= fmaxf(amax, 1e-4) / 448 (amax
 *     the largest |x| of the row's float32 values, NaN ignored; DeepSeek's
 *     exact ceil, where vLLM's ceilf(log2f()) can be one lower just above a
 *     power of two); code = e4m3(x / 2^e) as PE_KV_FP8_E4M3. stride[0] >=
 *     block_size * (head_dim + 4). The scale field must be NULL (each row
 *     has its own). A shift or re-rotation on such a cache re-quantizes each
 *     row with the scale of its new values.
 * The value quantized is the float32 result of the call's arithmetic (the
 * rotation, the norm; v's element widened exactly), never first rounded to
 * another dtype. k_scale / v_scale: FP8 formats: the address of one float,
 * finite and > 0 (a per-tensor scale, vLLM's k_scale / v_scale); PE_KV_PLAIN
 * and PE_KV_Q8_0: NULL. A quantized tensor must not share any byte range
 * with q, k, v or the other cache tensor (PE_ERR_SHAPE), and head_dim must
 * be at most 4096 (PE_ERR_SHAPE). */
typedef struct pe_kv_cache {
  uint32_t struct_size;     /* sizeof(pe_kv_cache), set by init */
  const pe_tensor *k;
  const pe_tensor *v;
  uint32_t k_quant, v_quant;        /* pe_kv_quant; default PE_KV_PLAIN */
  const float *k_scale, *v_scale;   /* FP8: one float each; else NULL */
} pe_kv_cache;

/* struct_size = sizeof(pe_kv_cache), everything else zero. */
PE_API void pe_kv_cache_init(pe_kv_cache *kv);

/* Read cache rows back as floats (an attention kernel that wants them, or a
 * test): for every [b, t] with slot_mapping[b * tokens + t] = s >= 0, row s
 * of kv_cache->k (and ->v) of every head, dequantized as the descriptor's
 * format says (PE_KV_PLAIN: converted, bits copied when the dtypes match),
 * rounded once to the output's dtype, into k_out[b, :, t, :] (v_out[b, :, t,
 * :]). s = -1 leaves the output row untouched; a slot may repeat.
 * k_out: [batch, kv_heads, tokens, head_dim] (f32, f16 or bf16, any strides
 * with stride[3] == 1) or NULL; v_out: the same with v_head_dim, or NULL;
 * not both NULL; both: equal batch and tokens. Single-threaded.
 * Errors (nothing written): PE_ERR_NULL_POINTER (kv_cache, both outputs, the
 * cache of a given output, slot_mapping, a required scale),
 * PE_ERR_INVALID_ARGUMENT (a format or scale as pe_qk_norm_rope_store
 * refuses it with that status, a slot outside [-1, num_blocks *
 * block_size), struct_size),
 * PE_ERR_SHAPE (heads or dim differ from the cache's, Q8_0 dim % 32, outputs
 * overlapping each other or a cache), PE_ERR_DTYPE, PE_ERR_OVERFLOW. No
 * allocation. Thread-safe (reads the caches only). */
PE_API pe_status pe_kv_read(const pe_kv_cache *kv_cache, const pe_tensor *k_out,
                            const pe_tensor *v_out, const int64_t *slot_mapping);

/* The inverse of pe_kv_read: rows of k_in / v_in (f32, f16 or bf16,
 * [batch, kv_heads, tokens, dim], either may be NULL, not both) written at
 * slot_mapping into kv_cache->k / ->v in the descriptor's format (quantized
 * from the exactly widened float32 value, or converted for PE_KV_PLAIN),
 * for rows that are not rotated here (already-rotated keys, v alone). A slot
 * may not repeat; -1 skips. Errors (nothing written) as pe_kv_read, and
 * PE_ERR_INVALID_ARGUMENT for a repeated slot, PE_ERR_SHAPE for caches or
 * inputs that overlap. No allocation. Single-threaded. */
PE_API pe_status pe_kv_write(const pe_kv_cache *kv_cache, const pe_tensor *k_in,
                             const pe_tensor *v_in, const int64_t *slot_mapping);

/* pe_rope_shift_k and pe_rope_rerotate_k on the cache rows at slots of
 * kv_cache->k (a plain or quantized cache; kv_cache->v is not read):
 * slots[i] (distinct, in [-1, num_blocks * block_size), -1 skips) is moved
 * by deltas[i] / re-rotated at positions[i], i < n_slots. Each row is
 * rotated once: a plain row in place in its dtype, exactly as
 * pe_rope_shift_k / pe_rope_rerotate_k on a tensor of those rows; a
 * quantized row dequantized (posenc.h's pe_kv_cache formats, its scale),
 * rotated in float32 and quantized again in the same pass (every channel of
 * the row re-quantized; an FP8 code past rotary_dim whose value times the
 * scale is a normal float32 comes back unchanged). Bit-identical on every ISA and pool size. Errors (nothing
 * written): as pe_rope_shift_k / pe_rope_rerotate_k, and those of the
 * descriptor (pe_qk_norm_rope_store), PE_ERR_NULL_POINTER (slots, deltas,
 * positions), PE_ERR_INVALID_ARGUMENT (a slot outside the range or twice),
 * PE_ERR_SHAPE (n_slots < 0, the cache's head_dim). No allocation.
 * Thread-safe as pe_rope_shift_k. */
PE_API pe_status pe_rope_shift_k_cache(const pe_rope_cache *c, const pe_kv_cache *kv_cache,
                                       const int64_t *slots, const int64_t *deltas,
                                       int64_t n_slots, pe_threadpool *pool);
PE_API pe_status pe_rope_rerotate_k_cache(const pe_rope_cache *from, const pe_rope_cache *to,
                                          const pe_kv_cache *kv_cache, const int64_t *slots,
                                          const int64_t *positions, int64_t n_slots,
                                          pe_threadpool *pool);

/* QK-norm then RoPE, q and k in place (either may be NULL, not both). q, k,
 * positions, flags (PE_ROPE_INVERSE, rotating the normed rows backwards) and
 * the layouts are pe_apply_rope_qk's: strided views of one packed QKV buffer
 * are fine. Every channel of a normed row is written (those past rotary_dim
 * are normed, not rotated); with PE_QK_NORM_NONE the call is
 * pe_apply_rope_qk, bit for bit. The result per element is the norm's exact
 * arithmetic above, rounded once to the tensor's dtype.
 * Errors (nothing written on any): PE_ERR_NULL_POINTER (c, norm, q and k,
 * a required weight, data), PE_ERR_INVALID_ARGUMENT (kind, scope, eps, a
 * weight given to NONE or L2, struct_size with a non-zero unknown tail,
 * flags, a struct_size below sizeof(pe_qk_norm) of this first layout),
 * PE_ERR_SHAPE (as pe_apply_rope_qk; a weight overlapping q or k),
 * PE_ERR_DTYPE, PE_ERR_OVERFLOW, PE_ERR_POSITION_OUT_OF_RANGE, PE_ERR_BUSY
 * (busy pool). No allocation. Thread-safe as pe_apply_rope_qk. */
PE_API pe_status pe_qk_norm_rope(const pe_rope_cache *c, const pe_qk_norm *norm,
                                 const pe_tensor *q, const pe_tensor *k,
                                 const int64_t *positions, uint32_t flags, pe_threadpool *pool);

/* The whole post-projection step: q normed and rotated in place; k normed,
 * rotated and written at slot_mapping into kv_cache->k; v converted into
 * kv_cache->v at the same slots; k and v only read.
 * q: [batch, q_heads, tokens, head_dim] or NULL; k: [batch, kv_heads, tokens,
 *   head_dim]; v: [batch, kv_heads, tokens, v_head_dim], or NULL exactly
 *   when kv_cache->v is NULL.
 * kv_cache: the cache descriptor above; slot_mapping, positions and flags
 *   as pe_apply_rope_qk_store (-1 skips a token: its k and v rows are not
 *   written, its q is still normed and rotated; a duplicate slot is an
 *   error).
 * Stored values: k's row normed and rotated in float32 (the arithmetic
 * above) and rounded once from there to the k cache's dtype (so, for a cache of k's
 * dtype, bit for bit what pe_qk_norm_rope on k and a copy give; a wider cache
 * keeps the float32 result); channels past rotary_dim normed and rounded; v's elements
 * converted exactly as pe_apply_rope_qk_store converts (bits copied when the
 * dtypes match). With PE_QK_NORM_NONE and no v this is
 * pe_apply_rope_qk_store.
 * Errors (nothing written on any): those of pe_qk_norm_rope and of
 * pe_apply_rope_qk_store, and PE_ERR_NULL_POINTER (kv_cache, its k; v
 * without kv_cache->v or the reverse; an FP8 format's k_scale / v_scale),
 * PE_ERR_SHAPE (v's batch, heads or
 * tokens differ from k's, v_head_dim differs from the v cache's, the v cache's
 * num_blocks, kv_heads or block_size differ from the k cache's, the v cache
 * overlaps q, k, v or the k cache, k_cache overlaps v; a quantized tensor as
 * described above), PE_ERR_INVALID_ARGUMENT (k_quant / v_quant not a
 * pe_kv_quant, a scale not finite and > 0, or given to a format without
 * one; kv_cache struct_size below this first layout's). Quantized
 * caches: each stored row is quantized in the same pass (no heap buffer; one
 * token's rows are staged in a 16 KiB stack buffer), bit-identical on every
 * ISA and pool size. No allocation. Thread-safety: as
 * pe_apply_rope_qk_store. */
PE_API pe_status pe_qk_norm_rope_store(const pe_rope_cache *c, const pe_qk_norm *norm,
                                       const pe_tensor *q, const pe_tensor *k,
                                       const pe_tensor *v, const pe_kv_cache *kv_cache,
                                       const int64_t *slot_mapping, const int64_t *positions,
                                       uint32_t flags, pe_threadpool *pool);

/* ------------------------------------------------------------------------ */
/* Multi-head latent attention (MLA): the step after the projections        */
/* ------------------------------------------------------------------------ */

/* An MLA layer (DeepSeek-V2/V3/V3.1/V3.2, Kimi-K2, GLM-5; DeepSeek-V4) keeps
 * one cache row per token instead of per-head keys and values. After its
 * projections, transformers' DeepseekV3Attention does
 *   kv_c = kv_a_layernorm(kv_a[..., :kv_lora_rank])      RMSNorm with weight
 *   k_pe = RoPE(kv_a[..., kv_lora_rank:])                one shared rope head
 *   q_pe = RoPE(q[..., qk_nope_head_dim:])               every q head
 * and an engine caches the row [kv_c | k_pe] (576 values for DeepSeek-V3) at
 * its slot. pe_mla_rope_store does all of it in one pass: each kv row is read
 * once, normed and rotated in float32 and written once into its cache row,
 * and each q head's rope slice is rotated in place.
 *
 * DeepSeek-V4 is the same step with other numbers: a 512-channel kv row
 * normed as a whole (kv_norm, with weight) whose last 64 channels are
 * rotated, and q heads of 512 channels normed without a weight (per head)
 * and rotated on their last 64; its cache keeps 448 channels as FP8 and the
 * rotated 64 as bf16 (PE_MLA_FP8_DS_V4). The attention output's rope slice
 * is rotated back before o_proj: pe_apply_rope_qk with PE_ROPE_INVERSE on
 * the view described at pe_mla_rope_store.
 *
 * Pairing: the rope cache's style. transformers' DeepSeek models rotate
 * interleaved pairs (PE_ROPE_GPTJ; config rope_interleave, default true),
 * and its apply_rotary_pos_emb_interleave leaves q_pe and k_pe
 * de-interleaved: channel j < 32 of its result is pair j's first element,
 * channel 32 + j the second. This library rotates the pairs in place (GPT-J
 * order: channel 2j and 2j + 1), as vLLM, sglang and llama.cpp store them.
 * q.k is the same either way (q and k are permuted alike); compare cache
 * rows with transformers' after that permutation. */

/* The cache row's format (pe_mla.format). Values fixed. */
typedef enum pe_mla_format {
  PE_MLA_PLAIN = 0,     /* the row in the cache tensor's dtype (f32, f16, bf16) */
  PE_MLA_FP8_E4M3 = 1,  /* every channel e4m3(x / scale), one per-tensor scale:
                           vLLM kv_cache_dtype "fp8" */
  PE_MLA_FP8_DS = 2,    /* vLLM "fp8_ds_mla" (DeepSeek-V3.2 sparse MLA, FlashMLA's
                           V32 FP8 layout): 656-byte rows, below */
  PE_MLA_FP8_DS_V4 = 3  /* DeepSeek-V4 (FlashMLA's MODEL1 layout): block-major
                           rows of 448 FP8 + 64 bf16, then UE8M0 scales, below */
} pe_mla_format;

/* Where the rotated channels sit in a PE_MLA_PLAIN / PE_MLA_FP8_E4M3 row
 * (pe_mla.order). Values fixed. */
typedef enum pe_mla_order {
  PE_MLA_LATENT_FIRST = 0, /* [kv_c | k_pe]: vLLM, sglang, llama.cpp since 2026-01 */
  PE_MLA_ROPE_FIRST = 1    /* [k_pe | kv_c]: llama.cpp's caches before 2026-01 */
} pe_mla_order;

/* One MLA layer's step. Size-prefixed: call pe_mla_init(), then set the
 * fields. R below is rope_dim, the rope cache's head_dim, all of it
 * rotated (rotary_dim == head_dim: qk_rope_head_dim, 64).
 * kv rows ([batch, 1, tokens, kv_dim]: the kv_a projection's output):
 *   channels [0, kv_norm_dim) are normed (kv_norm) and channels
 *   [kv_rope_offset, kv_rope_offset + R) rotated - after the norm when they
 *   are inside its range (V4), as they are (V3: the norm covers the latent,
 *   [0, 512), and k_pe = [512, 576) is rotated, not normed). Every other
 *   channel is copied (converted). kv_rope_offset + R <= kv_dim.
 * q heads ([batch, q_heads, tokens, q_head_dim]): channels [q_rope_offset,
 *   q_rope_offset + R) rotated in place, after q_norm over the whole head
 *   when it is not NONE (V4); the other channels are left alone, or normed
 *   in place under q_norm. */
typedef struct pe_mla {
  uint32_t struct_size;     /* sizeof(pe_mla), set by init */
  int32_t rope_dim;         /* R: the rotated channels (qk_rope_head_dim, 64); the rope
                               cache's head_dim */
  int32_t kv_norm_dim;      /* channels normed from 0 (512: kv_lora_rank; V4 512) */
  int32_t kv_rope_offset;   /* first rotated kv channel (512: kv_lora_rank; V4 448) */
  int32_t q_rope_offset;    /* first rotated q channel (128: qk_nope_head_dim; V4 448) */
  pe_qk_norm_kind kv_norm;  /* PE_QK_NORM_RMS (kv_a_layernorm, V4 kv_norm) or NONE
                               (the kv rows come normed); default RMS */
  float kv_eps;             /* default 1e-6 (transformers' kv_a_layernorm default) */
  const float *kv_weight;   /* kv_norm_dim float32 weights (RMS), else NULL */
  pe_qk_norm_kind q_norm;   /* PE_QK_NORM_NONE (DeepSeek-V3: q_a_layernorm acts before
                               q_b_proj) or PE_QK_NORM_L2 (V4: x * rsqrt(mean(x^2) +
                               eps) over each head, no weight); default NONE */
  float q_eps;              /* default 1e-6 */
  uint32_t format;          /* pe_mla_format, default PE_MLA_PLAIN */
  uint32_t order;           /* pe_mla_order, default PE_MLA_LATENT_FIRST */
  const float *scale;       /* PE_MLA_FP8_E4M3: one float, finite > 0; else NULL */
} pe_mla;

/* struct_size = sizeof(pe_mla), kv_norm RMS, eps 1e-6, q_norm NONE, plain
 * format, latent first, every other field 0 / NULL (rope_dim, kv_norm_dim,
 * kv_rope_offset and q_rope_offset must be set). */
PE_API void pe_mla_init(pe_mla *m);

/* The MLA step in one pass, bit-identical on every ISA and pool size.
 * c: the rope cache of the layer's rope slice (head_dim == rotary_dim == R,
 *   its style and scaling; pe_model_rope_layer gives it).
 * q: [batch, q_heads, tokens, q_head_dim] (f32/f16/bf16, any strides with
 *   stride[3] == 1), its rope slices rotated in place (and, under q_norm,
 *   every channel normed), or NULL (kv only).
 * kv: [batch, 1, tokens, kv_dim], the kv_a projection's output, read only;
 *   or NULL (q only: then cache and slot_mapping are NULL too).
 * cache: the paged MLA cache, [num_blocks, 1, block_size, kv_dim] (the
 *   channels of a row; shape[3] == kv_dim), one row per slot:
 *   PE_MLA_PLAIN: elements of the tensor's dtype, any strides with stride[3]
 *     == 1: the kv row's channels, each converted (rounded once from the
 *     float32 result), in kv order (PE_MLA_LATENT_FIRST) or with the rotated
 *     R channels first and the others after them in order
 *     (PE_MLA_ROPE_FIRST).
 *   The other formats: a tensor of BYTES as pe_kv_cache's quantized caches
 *   (data the byte address of slot 0's row, stride[0..2] in bytes, stride[3]
 *   1, dtype not read), rows of at most 1024 channels (kv_dim):
 *   PE_MLA_FP8_E4M3: kv_dim bytes, in the order above, byte i = e4m3(x_i /
 *     scale) as pe_kv_cache's PE_KV_FP8_E4M3 (round to nearest even,
 *     saturating at 448, NaN 0x7f with its sign), k_pe's channels too.
 *   PE_MLA_FP8_DS (kv_dim == kv_rope_offset + R, kv_rope_offset a multiple of
 *     128; DeepSeek-V3.2: 512 + 64): a row of kv_rope_offset + 4 *
 *     kv_rope_offset / 128 + 2 * R bytes (656): the latent as e4m3 codes in
 *     tiles of 128 channels, tile k's float32 scale (little-endian) at byte
 *     kv_rope_offset + 4k, then the R rotated channels as bf16. Tile scale =
 *     fmaxf(amax / 448.0f, FLT_MIN) (amax the largest |x| of the tile's
 *     float32 values, NaN ignored; the divide in float32), code = e4m3(x /
 *     scale) as above - vLLM's concat_and_cache_ds_mla, byte for byte.
 *     stride[2] >= 656.
 *   PE_MLA_FP8_DS_V4 (kv_dim == kv_rope_offset + R, kv_rope_offset a
 *     multiple of 64; DeepSeek-V4: 448 + 64): block-major. Block b starts
 *     at data + b * stride[0]; token t's row at t * stride[2] within it holds
 *     kv_rope_offset e4m3 codes then the R rotated channels as bf16
 *     (stride[2] == kv_rope_offset + 2 * R: 576); the block's scale bytes
 *     start after block_size such rows: token t's at block_size * stride[2]
 *     + t * (kv_rope_offset / 64 + 1), one UE8M0 byte (exponent + 127) per
 *     64-channel tile and one zero byte. stride[0] >= block_size *
 *     (stride[2] + kv_rope_offset / 64 + 1) (FlashMLA pads it to a multiple
 *     of 576). Every value is first rounded to bf16 (x_b), then per tile:
 *     amax = fmaxf(largest |x_b|, 1e-4), e = the smallest integer with 2^e >=
 *     amax / 448 (the float32 quotient; DeepSeek's exact ceil, where vLLM's
 *     ceilf(log2f()) can be one lower just above a power of two), code =
 *     e4m3(fminf(fmaxf(x_b * 2^-e, -448), 448)) - vLLM's
 *     fused_deepseek_v4_qnorm_rope_kv_insert, byte for byte but for that
 *     rounding of the exponent (a NaN is stored as -448, as there).
 * slot_mapping: [batch][tokens], each in [-1, num_blocks * block_size), no
 *   slot twice; -1 skips the token's kv row (its q is still rotated).
 * positions: [batch][tokens] or NULL (0..tokens-1), as pe_apply_rope_qk.
 * flags: 0 or PE_ROPE_STREAM_CACHE (plain rows streamed; the FP8 formats'
 *   rows written as usual).
 * Arithmetic: the norms are the QK-norm's (pe_qk_norm above: RMS with
 * weight, or L2 without) over their channels; the rotation the rope cache's;
 * everything in float32 and rounded once to the output's dtype (PE_MLA_FP8_*:
 * the float32 result quantized; PE_MLA_FP8_DS_V4: through bf16 as said).
 * The output of V4's attention, o [batch, heads, tokens, 512], is rotated
 * back on its last 64 channels by pe_apply_rope_qk(c, &o_pe, NULL, positions,
 * PE_ROPE_INVERSE, pool) with o_pe the view {o.data + 448 elements, shape
 * [batch, heads, tokens, 64], o's strides}.
 * Errors (nothing written on any): PE_ERR_NULL_POINTER (c, mla, q and kv
 * both, kv without cache or the reverse, slot_mapping with a cache, a
 * required weight or scale), PE_ERR_INVALID_ARGUMENT (a field out of range,
 * kinds, format, order, flags, a slot outside the range or twice, a weight
 * or scale given where none is read, struct_size), PE_ERR_SHAPE (a slice
 * outside its row, the rope cache not rotating all of its head_dim, batch or
 * tokens differing, kv with more than one head, the cache's shape, strides
 * or row size, overlapping tensors), PE_ERR_DTYPE, PE_ERR_OVERFLOW,
 * PE_ERR_POSITION_OUT_OF_RANGE, PE_ERR_BUSY. No allocation. Thread-safe for
 * distinct outputs; q, kv and the cache must not be written concurrently. */
PE_API pe_status pe_mla_rope_store(const pe_rope_cache *c, const pe_mla *mla, const pe_tensor *q,
                                   const pe_tensor *kv, const pe_tensor *cache,
                                   const int64_t *slot_mapping, const int64_t *positions,
                                   uint32_t flags, pe_threadpool *pool);

/* The cache rows at slot_mapping read back as kv rows (kv order, whatever
 * the cache's order): out [batch, 1, tokens, kv_dim] (f32/f16/bf16),
 * dequantized (PE_MLA_FP8_E4M3: code * scale; PE_MLA_FP8_DS: code * its
 * tile's scale; PE_MLA_FP8_DS_V4: code * 2^e; the bf16 channels widened)
 * and rounded once to out's dtype. mla's format, order, rope_dim,
 * kv_rope_offset and scale describe the cache (its norms are not read). -1 leaves out's row
 * untouched; a slot may repeat. Errors (nothing written): as
 * pe_mla_rope_store's for the arguments it shares. Single-threaded;
 * thread-safe (reads the cache only). */
PE_API pe_status pe_mla_cache_read(const pe_mla *mla, const pe_tensor *cache,
                                   const pe_tensor *out, const int64_t *slot_mapping);

/* ------------------------------------------------------------------------ */
/* RoPE per layer (model configs)                                           */
/* ------------------------------------------------------------------------ */

/* max_positions for pe_model_rope_from_hf_config: one table row per
 * position up to the config's max_position_embeddings. */
#define PE_MAX_POSITIONS_FROM_CONFIG (-1)

/* Config loaders (pe_rope_cache_create_from_hf_config,
 * pe_model_rope_from_hf_config): load a model type that is not in libposenc's
 * table, guessing what its classes do (half-split pairs; a
 * partial_rotary_factor or rotary_dim of the file as the rotated width). Without
 * it such a config is PE_ERR_UNSUPPORTED naming its model_type. */
#define PE_CONFIG_GUESS 0x1000000u

/* The RoPE of every layer of a model, from its config.json. Immutable after
 * creation: any number of threads may use one model and its caches
 * concurrently, as long as none destroys it. */
typedef struct pe_model_rope pe_model_rope;

/* Read a HuggingFace config.json (len bytes, need not be NUL-terminated) and
 * build the cache of every layer, as transformers builds that model:
 * - v5 rope_parameters keyed by layer type ({"full_attention": {...},
 *   "sliding_attention": {...}}) with layer_types;
 * - Gemma 2/3/3n: local (sliding) layers default rope at
 *   rope_local_base_freq (10000), global layers rope_theta with rope_scaling
 *   (linear x8 for Gemma 3 4b-27b); pattern from layer_types,
 *   sliding_window_pattern or _sliding_window_pattern (Gemma3TextConfig: 6);
 * - ModernBERT: global layers (i % global_attn_every_n_layers == 0) at
 *   global_rope_theta (160000), the others at local_rope_theta (10000);
 * - Cohere2 / Command-R7B / Command-A: interleaved pairs, NO RoPE on the
 *   full_attention layers (every sliding_window_pattern-th, 4);
 * - Llama 4: no_rope_layers (1 = RoPE; empty = every
 *   no_rope_layer_interval-th layer, 4, is NoPE), interleaved pairs, llama3
 *   scaling; see pe_model_rope_nope_temperature for the NoPE layers;
 * - EXAONE 4: NoPE on the full_attention layers unless sliding_window is
 *   null (Exaone4Attention);
 * - Qwen3-Next / Qwen3.5: partial_rotary_factor; linear_attention layers
 *   have no RoPE (NULL) - and no attention to rotate;
 * - MiMo-V2: hybrid_layer_pattern (1 = sliding, at swa_rope_theta);
 *   MiniMax-01: attn_type_list (0 = linear attention, NULL);
 * - Nemotron-H, Jamba, Granite-4.0-H, Kimi-Linear, Falcon with alibi: NULL
 *   for every layer (their attention applies no positional encoding);
 * - MLA (DeepSeek-V2/V3, Kimi-K2, GLM-4.7-Flash): the qk_rope_head_dim slice;
 *   DeepSeek-V3.2 and GLM-5 also an indexer rotation, DeepSeek-V4 a
 *   compressor and an indexer (pe_model_rope_layer_role), each with where its
 *   channels sit (pe_model_rope_layer_slice);
 * - gpt-oss: layer_types, one cache for every layer;
 * - vision-language configs: the keys of text_config when the top level has
 *   none (Gemma 3 4b+, Llama 4, Qwen3-VL); Qwen2-VL's "type": "mrope" is
 *   default frequencies (pe_mrope_section_from_hf_config gives the sections);
 * - any other model: every layer the one rope that
 *   pe_rope_cache_create_from_hf_config derives (same keys and defaults).
 * Layers whose parameters are equal share one cache (Gemma 3 has two: local
 * and global; gpt-oss one), so comparing the pointers pe_model_rope_layer
 * returns tells which layers share.
 * json, len: the text. max_positions: table rows of every cache, >= 0 (0 =
 *   cos/sin on the fly), or PE_MAX_POSITIONS_FROM_CONFIG for
 *   max_position_embeddings (PE_ERR_PARSE if the config has none; beware
 *   10485760 for Llama-4-Scout: 5 GiB of table per cache).
 * seq_len: context for dynamic/longrope frequencies, >= 0 (0 =
 *   max_position_embeddings).
 * flags: 0 or PE_CONFIG_GUESS.
 * out: receives the model; untouched on error.
 * Errors: PE_ERR_NULL_POINTER (json, out), PE_ERR_INVALID_ARGUMENT
 * (max_positions, seq_len), PE_ERR_PARSE (malformed JSON, a missing key -
 * num_hidden_layers, rope_theta of a model type whose default is not known,
 * layer_types of the wrong length -: the message names it),
 * PE_ERR_UNSUPPORTED (unknown rope type; a model type not in the table
 * without PE_CONFIG_GUESS; a position key the model type's class is not known
 * to read or ignore - the message names it), PE_ERR_OUT_OF_MEMORY, and the
 * errors of pe_rope_cache_create. Thread-safe. */
PE_API pe_status pe_model_rope_from_hf_config(const char *json, size_t len, int64_t max_positions,
                                              int64_t seq_len, uint32_t flags,
                                              pe_model_rope **out);

/* The number of layers (num_hidden_layers, or the config class's default);
 * -1 for NULL. Thread-safe. */
PE_API int32_t pe_model_rope_num_layers(const pe_model_rope *m);

/* The cache layer `layer` (0-based) rotates q and k with, owned by m (valid
 * until pe_model_rope_destroy; do not destroy it), or NULL for a layer
 * without RoPE (NoPE attention, linear attention). Also NULL, with the
 * reason in pe_last_error(), for m NULL or layer outside
 * [0, num_layers). Thread-safe. */
PE_API const pe_rope_cache *pe_model_rope_layer(const pe_model_rope *m, int32_t layer);

/* The rotations of one layer. Values fixed. */
typedef enum pe_rope_role {
  PE_ROPE_ROLE_ATTENTION = 0,  /* the attention's q and k (pe_model_rope_layer) */
  PE_ROPE_ROLE_INDEXER = 1,    /* the sparse-attention indexer's q and k
                                  (DeepSeek-V3.2, GLM-5, DeepSeek-V4's CSA layers) */
  PE_ROPE_ROLE_COMPRESSOR = 2  /* DeepSeek-V4's compressed KV entries (CSA and
                                  HCA layers; no query) */
} pe_rope_role;

/* The cache role `role` of layer `layer` rotates with, owned by m, or NULL
 * when the layer has no such rotation (a model without an indexer, a GLM-5
 * layer whose indexer_types entry is "shared", a sliding DeepSeek-V4 layer's
 * compressor; pe_last_error() is not touched). Also NULL, with the reason in
 * pe_last_error(), for m NULL, layer outside [0, num_layers) or an unknown
 * role. Layers and roles whose parameters are equal share one cache (a
 * DeepSeek-V3.2 layer's indexer and attention do not: their pairings differ;
 * DeepSeek-V4's compressor and indexer do). role PE_ROPE_ROLE_ATTENTION is
 * pe_model_rope_layer. Thread-safe. */
PE_API const pe_rope_cache *pe_model_rope_layer_role(const pe_model_rope *m, int32_t layer,
                                                     int32_t role);

/* Where a rotation's channels sit in the tensors the model computes. A q
 * head has q_head_dim channels and the rotated ones are [q_offset, q_offset
 * + span); a k row has k_head_dim channels, rotated [k_offset, k_offset +
 * span), span being the cache's head_dim (pe_rope_cache_params). The rotation
 * itself covers rotary_dim channels from the start of that span (the cache's
 * rotary_dim; equal to the span except for a partial rotary, which rotates
 * the first rotary_dim channels of the head and leaves the rest).
 * So the view to pass pe_apply_rope_qk & co is: data = head + offset
 * elements, shape[3] = the cache's head_dim, the head and token strides of
 * the model's tensor. Size-prefixed: call pe_rope_slice_init(), then
 * pe_model_rope_layer_slice(). */
typedef struct pe_rope_slice {
  uint32_t struct_size;    /* sizeof(pe_rope_slice), set by init */
  int32_t q_head_dim;      /* channels of a q head (0: the role rotates no query) */
  int32_t q_offset;        /* first channel of the span in a q head */
  int32_t k_head_dim;      /* channels of a k row as the model computes it */
  int32_t k_offset;        /* first channel of the span in a k row */
  int32_t rotary_dim;      /* channels rotated (0: the layer has no such rotation) */
  uint32_t flags;          /* PE_SLICE_DEROTATE_OUTPUT */
} pe_rope_slice;

/* The model de-rotates the attention output's span at the query position
 * (DeepSeek-V4: k = v, so v's span carried the keys' rotation): apply the
 * layer's cache with PE_ROPE_INVERSE to the output heads' span (the same view
 * as q's) before the output projection. */
#define PE_SLICE_DEROTATE_OUTPUT 1u

/* struct_size = sizeof(pe_rope_slice), every other field 0. */
PE_API void pe_rope_slice_init(pe_rope_slice *s);

/* Where role `role` of layer `layer` rotates (see pe_rope_slice). For a
 * layer without that rotation every field but struct_size is 0. The views,
 * model by model (q: [.., heads, tokens, q_head_dim], k as the model
 * computes its row):
 * - Llama, Qwen, Mistral, Gemma 3 (GQA, q_norm / k_norm first where the
 *   model has them): q_head_dim = k_head_dim = head_dim, offsets 0: the whole
 *   head; rotary_dim < head_dim for a partial rotary (Qwen3-Next: 64 of 256,
 *   MiMo-V2: 64 of 192; the rest passes through).
 * - Gemma 4's proportional layers: the whole head_dim (512) is the span and
 *   rotary_dim; the pairs past int(partial_rotary_factor * head_dim / 2) have
 *   frequency 0 and come out unchanged.
 * - DeepSeek-V3 MLA (Kimi-K2, GLM-4.7-Flash alike): q head = qk_nope_head_dim
 *   + qk_rope_head_dim (128 + 64 = 192), q_offset 128; k row = the output of
 *   kv_a_proj_with_mqa, kv_lora_rank + qk_rope_head_dim (512 + 64 = 576),
 *   k_offset 512 (k_pe, one head shared by all heads: kv heads 1). The cache
 *   rotates all 64 channels, pairs (2i, 2i+1) in place; transformers
 *   de-interleaves them (even channels first, then odd) in q and k alike, so
 *   q.k is the same (docs/pages/serving.md).
 * - DeepSeek-V3.2 / GLM-5 indexer: q head index_head_dim (128) of
 *   index_n_heads heads, offset 0; k row index_head_dim, offset 0 (one k per
 *   token); 64 channels, pairs as indexer_rope_interleave says (V3.2:
 *   half-split, unlike its MLA; GLM-5: interleaved).
 * - DeepSeek-V4 attention: q head 512, k (the shared kv row) 512, offsets
 *   448: the LAST 64 channels, interleaved; flags PE_SLICE_DEROTATE_OUTPUT.
 *   Compressor: no query; k = a compressed entry (512), offset 448, at
 *   position window * compress_rate (the first token of its window).
 *   Indexer: q head index_head_dim (128), offset 64; k = the indexer's
 *   compressed entry (128), offset 64, at its window's first position.
 * PE_ERR_NULL_POINTER (m, out), PE_ERR_INVALID_ARGUMENT (layer, role,
 * out->struct_size below this first layout: nothing written). Thread-safe. */
PE_API pe_status pe_model_rope_layer_slice(const pe_model_rope *m, int32_t layer, int32_t role,
                                           pe_rope_slice *out);

/* The QK-norm role `role` of layer `layer` applies before its rotation, as
 * a pe_qk_norm: kind, scope and eps from the config (rms_norm_eps or the
 * model's key, its class default when absent), weights NULL (the caller's;
 * out->struct_size must be set, pe_qk_norm_init). PE_QK_NORM_NONE for a
 * layer or role without one. Kinds per model: Qwen3 / Qwen3-VL / EXAONE 4 /
 * GLM-4.5 (use_qk_norm) RMS per head; Gemma 3 and Qwen3-Next / Qwen3.5 RMS
 * with (1 + w) per head; Gemma 3n RMS per head (no offset); OLMo 2 / 3 and
 * MiniMax-M2 RMS per token over all heads; Llama 4 (use_qk_norm) L2 on its
 * RoPE layers only; DeepSeek-V4 attention RMS per head (q has no weight:
 * pass a q_weight of ones; k's weight is kv_norm's), its compressor RMS on k
 * only (call with q NULL). Norms pe_qk_norm_rope does not compute are
 * PE_ERR_UNSUPPORTED with the model's norm named, out untouched: a
 * mean-subtracting LayerNorm (Cohere use_qk_norm, Phi / StableLM /
 * Persimmon qk_layernorm, the V3.2 / GLM-5 indexer's k_norm), and a norm the
 * census has not read (Gemma 4) is PE_ERR_UNSUPPORTED too, never reported as
 * none. PE_ERR_PARSE (out untouched, key and value named) when the config
 * sets the eps key to something that is not a finite float32 >= 0 (a JSON
 * null is not set: the default). PE_ERR_NULL_POINTER,
 * PE_ERR_INVALID_ARGUMENT (layer, role, struct_size). Thread-safe. */
PE_API pe_status pe_model_rope_layer_qk_norm(const pe_model_rope *m, int32_t layer, int32_t role,
                                             pe_qk_norm *out);

/* Multi-head latent attention: *latent_eps = the epsilon of the RMS norm
 * of the kv latent (kv_a_layernorm; transformers builds it with its
 * RMSNorm's default 1e-6, not rms_norm_eps) and 0 for a model without a
 * latent. PE_ERR_NULL_POINTER. Thread-safe. */
PE_API pe_status pe_model_rope_latent_norm_eps(const pe_model_rope *m, double *latent_eps);

/* 1 when the config's model_type is not in libposenc's table
 * (docs/pages/models.md) and the pairing was guessed (PE_ROPE_NEOX, the half-split
 * of transformers' rotate_half: check the model's modeling file); 0 when it
 * comes from the table; -1 for NULL. Thread-safe. */
PE_API int32_t pe_model_rope_pairing_guessed(const pe_model_rope *m);

/* The query and key/value head counts of the config (num_attention_heads or
 * the config class's default; num_key_value_heads, default the query heads);
 * 0 when the config has none (a count above INT32_MAX is refused when the
 * config is loaded). Both outputs are written on success.
 * PE_ERR_NULL_POINTER. Thread-safe. */
PE_API pe_status pe_model_rope_heads(const pe_model_rope *m, int32_t *num_attention_heads,
                                     int32_t *num_key_value_heads);

/* Llama 4's attention temperature tuning, which applies to the NoPE layers
 * when attn_temperature_tuning is set (Llama4TextConfig default true; the
 * published Scout config has 4, which counts as true): the engine multiplies
 * each query of such a layer, at position p, by
 *     log1p(floor((p + 1) / floor_scale)) * attn_scale + 1
 * before the attention scores (transformers' Llama4TextAttention; vLLM
 * applies it only with attn_temperature_tuning in the generation config or
 * long contexts). libposenc does not apply it: the layer has no cache. For
 * such a layer *floor_scale and *attn_scale get the config's values
 * (defaults 8192 and 0.1); for every other layer 1 and 0 (the multiplier is
 * 1). PE_ERR_NULL_POINTER, PE_ERR_INVALID_ARGUMENT (layer out of range).
 * Thread-safe. */
PE_API pe_status pe_model_rope_nope_temperature(const pe_model_rope *m, int32_t layer,
                                                double *floor_scale, double *attn_scale);

/* Free the model and its caches. NULL is a no-op. Not concurrently with the
 * use of the model or of any cache it returned. */
PE_API void pe_model_rope_destroy(pe_model_rope *m);

#ifdef __cplusplus
}
#endif

#endif /* POSENC_H */
