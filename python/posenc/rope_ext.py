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

import numpy as np

from . import _lib
from ._arrays import tensor, int64_grid, ptr, pool_handle, int_arg, INT32
from .rope import RopeCache

__all__ = ["apply_rope_qk_store_", "apply_mrope_", "apply_rope_qk_multi_", "mrope_positions",
           "mrope_section_from_hf_config"]

PE_ROPE_MROPE_INTERLEAVED = 2

_T = ctypes.POINTER(_lib.Tensor)
_p, _st = ctypes.c_void_p, ctypes.c_int
_PROTOTYPES = {
    "pe_apply_rope_qk_store": (_st, [_p, _T, _T, _T, _p, _p, ctypes.c_uint32, _p]),
    "pe_apply_mrope_qk": (_st, [_p, _T, _T, _p, _p, ctypes.c_uint32, _p]),
    "pe_apply_rope_qk_multi": (_st, [_p, ctypes.c_int32, _p, _T, _T, _p, ctypes.c_uint32, _p]),
    "pe_mrope_section_from_hf_config": (_st, [ctypes.c_char_p, ctypes.c_size_t, _p,
                                              ctypes.POINTER(ctypes.c_uint32)]),
}
for _name, (_res, _args) in _PROTOTYPES.items():
    _f = getattr(_lib.lib, _name, None)
    if _f is not None:
        _f.restype = _res
        _f.argtypes = _args


def _ref(t):
    return None if t is None else ctypes.byref(t)


def _cache(c, name="cache"):
    if not isinstance(c, RopeCache):
        raise TypeError("%s must be a posenc.RopeCache, got %s" % (name, type(c).__name__))
    return c


def _qk(cache, q, k, dtype, k_writable=True):
    if q is None and k is None:
        raise ValueError("q and k cannot both be None")
    tq = tensor(q, "q", dtype=dtype) if q is not None else None
    tk = tensor(k, "k", dtype=dtype, writable=k_writable) if k is not None else None
    for arr, name in ((q, "q"), (k, "k")):
        if arr is not None:
            cache._check_head_dim(arr, name)
    if q is not None and k is not None and (q.shape[0], q.shape[2]) != (k.shape[0], k.shape[2]):
        raise ValueError("q %s and k %s differ in batch or tokens" % (q.shape, k.shape))
    ref = q if q is not None else k
    return tq, tk, ref.shape[0], ref.shape[2]


def apply_rope_qk_store_(cache, k, k_cache, slot_mapping, q=None, positions=None,
                         inverse=False, pool=None, *, dtype=None, cache_dtype=None):
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
    """
    _cache(cache)
    tq, tk, batch, tokens = _qk(cache, q, k, dtype, k_writable=False)
    if tk is None:
        raise ValueError("apply_rope_qk_store_: k is required")
    if not isinstance(k_cache, np.ndarray):
        raise TypeError("k_cache must be a numpy.ndarray, got %s" % type(k_cache).__name__)
    if k_cache.ndim == 3:  # [num_slots, heads, dim] -> [1, heads, num_slots, dim], a view
        k_cache = k_cache[np.newaxis].transpose(0, 2, 1, 3)
    tc = tensor(k_cache, "k_cache", dtype=cache_dtype)
    cache._check_head_dim(k_cache, "k_cache")
    if k_cache.shape[1] != k.shape[1]:
        raise ValueError("k_cache has %d heads (shape[1]), k %d" % (k_cache.shape[1], k.shape[1]))
    slots = int64_grid(slot_mapping, batch, tokens, "slot_mapping")
    if slots is None:
        raise ValueError("apply_rope_qk_store_: slot_mapping is required")
    pos = int64_grid(positions, batch, tokens, "positions")
    flags = _lib.PE_ROPE_INVERSE if inverse else 0
    _lib.check(_lib.fn("pe_apply_rope_qk_store")(
        cache._as_parameter_, _ref(tq), _ref(tk), ctypes.byref(tc), ptr(slots), ptr(pos), flags,
        pool_handle(pool)))


def mrope_positions(positions, batch, tokens):
    """A C-contiguous int64 [3, batch, tokens] array from [3, batch, tokens]
    or [3, tokens] (same for every batch row) integers; None stays None."""
    if positions is None:
        return None
    a = np.asarray(positions)
    if a.dtype == np.bool_ or a.dtype.kind not in "iu":
        raise TypeError("positions must be integers, got dtype %s" % a.dtype)
    if a.ndim == 2 and a.shape == (3, tokens):
        a = np.broadcast_to(a[:, np.newaxis, :], (3, batch, tokens))
    if a.shape != (3, batch, tokens):
        raise ValueError("positions has shape %s, expected [3, batch %d, tokens %d] or [3, %d] "
                         "(t, h, w)" % (a.shape, batch, tokens, tokens))
    if a.dtype.kind == "u" and a.size and a.max() > np.iinfo(np.int64).max:
        raise ValueError("positions: a value exceeds the int64 range")
    return np.ascontiguousarray(a, dtype=np.int64)


def apply_mrope_(cache, q, k=None, positions=None, mrope_section=None, interleaved=False,
                 inverse=False, pool=None, *, dtype=None):
    """Multi-axis RoPE in place (Qwen2-VL; interleaved=True for Qwen3-VL).

    positions: int [3, batch, tokens] or [3, tokens] (t, h, w; HF's
    position_ids), None = 0..tokens-1 on every axis. mrope_section: three
    frequency counts summing to rotary_dim/2 (HF rope_scaling['mrope_section']).
    """
    _cache(cache)
    if mrope_section is None:
        raise ValueError("apply_mrope_: mrope_section is required")
    sec = [int_arg(v, "mrope_section[%d]" % i, *INT32) for i, v in enumerate(mrope_section)]
    if len(sec) != 3:
        raise ValueError("mrope_section must have 3 entries, got %d" % len(sec))
    sec = (ctypes.c_int32 * 3)(*sec)
    tq, tk, batch, tokens = _qk(cache, q, k, dtype)
    pos = mrope_positions(positions, batch, tokens)
    flags = (_lib.PE_ROPE_INVERSE if inverse else 0) | (PE_ROPE_MROPE_INTERLEAVED if interleaved else 0)
    _lib.check(_lib.fn("pe_apply_mrope_qk")(
        cache._as_parameter_, _ref(tq), _ref(tk), ptr(pos), ctypes.cast(sec, ctypes.c_void_p),
        flags, pool_handle(pool)))


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
    tq, tk, batch, tokens = _qk(caches[0], q, k, dtype)
    idx = np.asarray(cache_index)
    if idx.dtype == np.bool_ or idx.dtype.kind not in "iu":
        raise TypeError("cache_index must be integers, got dtype %s" % idx.dtype)
    if idx.shape != (batch,):
        raise ValueError("cache_index has shape %s, expected [batch %d]" % (idx.shape, batch))
    if idx.size and (idx.min() < 0 or idx.max() >= len(caches)):
        raise ValueError("cache_index values must be in [0, %d)" % len(caches))
    idx = np.ascontiguousarray(idx, dtype=np.int32)
    handles = (ctypes.c_void_p * len(caches))(*[c._as_parameter_ for c in caches])
    pos = int64_grid(positions, batch, tokens, "positions")
    flags = _lib.PE_ROPE_INVERSE if inverse else 0
    _lib.check(_lib.fn("pe_apply_rope_qk_multi")(
        ctypes.cast(handles, ctypes.c_void_p), len(caches), ptr(idx), _ref(tq), _ref(tk),
        ptr(pos), flags, pool_handle(pool)))


def mrope_section_from_hf_config(config):
    """(mrope_section, interleaved) of an M-RoPE model's config.json: a path
    (or model directory), a dict or the JSON text. Raises PosencError
    (ERR_PARSE) for a config without rope_scaling.mrope_section."""
    import json
    import os
    if isinstance(config, dict):
        text = json.dumps(config).encode()
    elif isinstance(config, bytes):
        text = config
    elif isinstance(config, (str, os.PathLike)):
        s = os.fspath(config)
        if isinstance(config, str) and s.lstrip().startswith("{"):
            text = s.encode()
        else:
            if os.path.isdir(s):
                s = os.path.join(s, "config.json")
            with open(s, "rb") as f:
                text = f.read()
    else:
        raise TypeError("config must be a path, a dict or JSON text, got %s" % type(config).__name__)
    sec = (ctypes.c_int32 * 3)()
    flags = ctypes.c_uint32()
    _lib.check(_lib.fn("pe_mrope_section_from_hf_config")(
        text, len(text), ctypes.cast(sec, ctypes.c_void_p), ctypes.byref(flags)))
    return tuple(sec), bool(flags.value & PE_ROPE_MROPE_INTERLEAVED)
