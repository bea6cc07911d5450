"""RoPE for serving engines: the rotation fused into the KV-cache write,
multi-axis RoPE (Qwen2-VL / Qwen3-VL) and one call over sequences that use
different RopeCaches.

    import numpy as np, posenc
    cache = posenc.RopeCache(head_dim=128, rope_theta=500000.0, max_positions=8192)
    q = np.random.randn(1, 32, 16, 128).astype(np.float32)
    k = np.random.randn(1, 8, 16, 128).astype(np.float32)
    kv = np.zeros((64, 16, 8, 128), np.float16)      # [blocks, block_size, heads, dim]
    posenc.apply_rope_qk_store_(cache, k, kv.transpose(0, 2, 1, 3),
                                slot_mapping=np.arange(16), q=q)

Arrays follow the rules of RopeCache.apply_ (numpy, float32/float16/bf16,
any strides with a contiguous last dimension); everything is checked before
the C call, and a failure inside the library raises PosencError with nothing
written.
"""
import ctypes

from . import _lib
from ._arrays import (tensor, disjoint, int64_grid, int_arg, INT32, kv_cache_4d,
                      mrope_positions, int32_vector)
from ._ext import ext
from .rope import RopeCache, _INVERSE

__all__ = ["apply_rope_qk_store_", "apply_mrope_", "apply_rope_qk_multi_", "mrope_positions",
           "mrope_section_from_hf_config"]


def _cache(c, name="cache"):
    if not isinstance(c, RopeCache):
        raise TypeError("%s must be a posenc.RopeCache, got %s" % (name, type(c).__name__))
    return c


def apply_rope_qk_store_(cache, k, k_cache, slot_mapping, q=None, positions=None,
                         inverse=False, pool=None, *, dtype=None, cache_dtype=None,
                         stream_cache=False):
    """Rotate k and write it into a KV cache in one pass (k is not modified);
    rotate q in place if given.

    k: [batch, kv_heads, tokens, head_dim]. k_cache: the cache, either
    [num_blocks, kv_heads, block_size, head_dim] (any strides: a vLLM
    [blocks, block_size, heads, dim] array is kv.transpose(0, 2, 1, 3)) or a
    flat [num_slots, kv_heads, head_dim] array; its dtype may differ from
    k's (the conversion is fused). slot_mapping: int [batch, tokens] or
    [tokens]: the cache slot of each token, -1 skips it (padding). A slot
    used twice, or outside the cache, raises PosencError with nothing written.
    dtype / cache_dtype: 'bf16' to read uint16 arrays as bfloat16.
    stream_cache: write the cache rows with streaming stores
    (PE_ROPE_STREAM_CACHE: the same bytes, not read first nor kept in the
    CPU's caches; for rows not read again soon, as a decode step's).
    """
    _cache(cache)
    if k is None:
        raise ValueError("apply_rope_qk_store_: k is required")
    if slot_mapping is None:
        raise ValueError("apply_rope_qk_store_: slot_mapping is required")
    try:
        ext.apply_rope_qk_store(cache, q, k, k_cache, slot_mapping, positions,
                                (_INVERSE if inverse else 0) |
                                (_lib.PE_ROPE_STREAM_CACHE if stream_cache else 0),
                                pool, dtype, cache_dtype)
    except _lib.PosencError:
        vq, vk, batch, tokens = cache._qk(q, k, dtype, k_writable=False)
        vc = tensor(kv_cache_4d(k_cache), "k_cache", dtype=cache_dtype)
        cache._check_head_dim(vc, "k_cache")
        if vc.shape[1] != vk.shape[1]:
            raise ValueError("k_cache has %d heads (shape[1]), k %d" % (vc.shape[1], vk.shape[1]))
        disjoint(("k_cache", vc), ("q", vq))
        disjoint(("k_cache", vc), ("k", vk))
        int64_grid(slot_mapping, batch, tokens, "slot_mapping")
        int64_grid(positions, batch, tokens, "positions")
        raise


def _sections(mrope_section):
    if mrope_section is None:
        raise ValueError("apply_mrope_: mrope_section is required")
    sec = [int_arg(v, "mrope_section[%d]" % i, *INT32) for i, v in enumerate(mrope_section)]
    if len(sec) != 3:
        raise ValueError("mrope_section must have 3 entries, got %d" % len(sec))
    return sec


def apply_mrope_(cache, q, k=None, positions=None, mrope_section=None, interleaved=False,
                 inverse=False, pool=None, *, dtype=None):
    """Multi-axis RoPE in place (Qwen2-VL; interleaved=True for Qwen3-VL).

    positions: int [3, batch, tokens] or [3, tokens] (t, h, w; HF's
    position_ids), None = 0..tokens-1 on every axis. mrope_section: three
    frequency counts summing to rotary_dim/2 (HF rope_scaling['mrope_section']).
    """
    _cache(cache)
    s0, s1, s2 = _sections(mrope_section)
    flags = (_INVERSE if inverse else 0) | (_lib.PE_ROPE_MROPE_INTERLEAVED if interleaved else 0)
    try:
        ext.apply_mrope_qk(cache, q, k, positions, s0, s1, s2, flags, pool, dtype)
    except _lib.PosencError:
        _, _, batch, tokens = cache._qk(q, k, dtype)
        mrope_positions(positions, batch, tokens)
        raise


def apply_rope_qk_multi_(caches, cache_index, q, k=None, positions=None, inverse=False,
                         pool=None, *, dtype=None):
    """Rotate a batch whose rows use different RopeCaches, in place: row b
    uses caches[cache_index[b]]. The caches must share head_dim, rotary_dim
    and style. cache_index: int [batch]."""
    caches = list(caches)
    if not caches:
        raise ValueError("apply_rope_qk_multi_: caches is empty")
    for i, c in enumerate(caches):
        _cache(c, "caches[%d]" % i)
    try:
        ext.apply_rope_qk_multi(caches, cache_index, q, k, positions,
                                _INVERSE if inverse else 0, pool, dtype)
    except _lib.PosencError:
        _, _, batch, tokens = caches[0]._qk(q, k, dtype)
        int32_vector(cache_index, batch, len(caches), "cache_index")
        int64_grid(positions, batch, tokens, "positions")
        raise


def mrope_section_from_hf_config(config):
    """(mrope_section, interleaved) of an M-RoPE model's config.json: a path
    (or model directory), a dict or the JSON text. Raises PosencError
    (ERR_PARSE) for a config without rope_scaling.mrope_section."""
    text = _lib.config_text(config)
    sec = (ctypes.c_int32 * 3)()
    flags = ctypes.c_uint32()
    _lib.check(_lib.fn("pe_mrope_section_from_hf_config")(
        text, len(text), ctypes.cast(sec, ctypes.c_void_p), ctypes.byref(flags)))
    return tuple(sec), bool(flags.value & _lib.PE_ROPE_MROPE_INTERLEAVED)
