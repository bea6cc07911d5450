"""The post-projection step in one pass: QK-norm (Qwen3, Gemma 3, OLMo 2,
Llama 4), RoPE, and k and v into a paged KV cache.

    import numpy as np, posenc
    cache = posenc.RopeCache(head_dim=128, rope_theta=1e6, max_positions=8192)
    qkv = np.random.randn(1, 16, 48, 128).astype(np.float32)  # [batch, tokens, heads, dim]
    q, k, v = (qkv[:, :, a:b].transpose(0, 2, 1, 3) for a, b in ((0, 32), (32, 40), (40, 48)))
    w = np.ones(128, np.float32)                               # Qwen3 q_norm / k_norm weights
    kc = np.zeros((64, 16, 8, 128), np.float32)                # [blocks, block_size, heads, dim]
    vc = np.zeros_like(kc)
    posenc.qk_norm_rope_store_(cache, k, kc.transpose(0, 2, 1, 3), np.arange(16), q=q,
                               v=v, v_cache=vc.transpose(0, 2, 1, 3),
                               kind="rms", q_weight=w, k_weight=w)

kind: "none", "rms" (x * r * w: Qwen3, OLMo 2), "rms_unit_offset" (x * r * (1 + w):
Gemma 3) or "l2" (x * r, no weight: Llama 4), r = 1/sqrt(mean(x^2) + eps) over
each head's row (scope "head") or each token's heads (scope "token": OLMo 2).
The arithmetic (float32, in the header's fixed order) is posenc.h's; arrays follow RopeCache.apply_'s rules.
"""
from . import _lib
from ._arrays import tensor, int64_grid, norm_weight
from ._ext import ext
from .rope import RopeCache, _INVERSE

__all__ = ["qk_norm_rope_", "qk_norm_rope_store_"]

KINDS = {"none": 0, "rms": 1, "rms_unit_offset": 2, "l2": 3}
SCOPES = {"head": 0, "token": 1}
_WEIGHTED = (KINDS["rms"], KINDS["rms_unit_offset"])


def _kind_scope(kind, scope):
    if kind not in KINDS:
        raise ValueError("kind %r is not one of %s" % (kind, ", ".join(KINDS)))
    if scope not in SCOPES:
        raise ValueError("scope %r is not one of %s" % (scope, ", ".join(SCOPES)))
    return KINDS[kind], SCOPES[scope]


def _check_weights_given(kind, q_weight, k_weight, q, k):
    """A weight given to a kind without one, or missing."""
    weighted = KINDS[kind] in _WEIGHTED
    for w, x, name in ((q_weight, q, "q_weight"), (k_weight, k, "k_weight")):
        if w is not None and not weighted:
            raise ValueError("%s is given but this kind has no weight" % name)
        if weighted and x is not None and w is None:
            raise ValueError("kind %r needs %s" % (kind, name))


def _check_weight_sizes(scope, q_weight, k_weight, q, k, head_dim):
    """The weights' sizes (run when the library refuses a call)."""
    for w, x, name in ((q_weight, q, "q_weight"), (k_weight, k, "k_weight")):
        if w is not None:
            norm_weight(w, name, head_dim * (x.shape[1] if x is not None and scope == 1 else 1),
                        scope == 1)


def _check_cache(cache):
    if not isinstance(cache, RopeCache):
        raise TypeError("cache must be a posenc.RopeCache, got %s" % type(cache).__name__)


def qk_norm_rope_(cache, q=None, k=None, *, kind="rms", scope="head", eps=1e-6,
                  q_weight=None, k_weight=None, positions=None, inverse=False, pool=None,
                  dtype=None):
    """QK-norm then RoPE, q and k in place ([batch, heads, tokens, head_dim],
    either may be None). Every channel of a normed row is written."""
    _check_cache(cache)
    kd, sc = _kind_scope(kind, scope)
    _check_weights_given(kind, q_weight, k_weight, q, k)
    try:
        ext.qk_norm_rope(cache, q, k, kd, sc, float(eps), q_weight, k_weight, positions,
                         _INVERSE if inverse else 0, pool, dtype)
    except _lib.PosencError:
        if q is None and k is None:
            raise ValueError("q and k cannot both be None") from None
        tq = tensor(q, "q", dtype=dtype) if q is not None else None
        tk = tensor(k, "k", dtype=dtype) if k is not None else None
        first = tq if tq is not None else tk
        _check_weight_sizes(sc, q_weight, k_weight, tq, tk, first.shape[3])
        int64_grid(positions, first.shape[0], first.shape[2], "positions")
        raise


def qk_norm_rope_store_(cache, k, k_cache, slot_mapping, q=None, v=None, v_cache=None, *,
                        kind="rms", scope="head", eps=1e-6, q_weight=None, k_weight=None,
                        positions=None, inverse=False, pool=None, dtype=None, cache_dtype=None,
                        v_cache_dtype=None, stream_cache=False):
    """q normed and rotated in place (if given); k normed, rotated and written
    at slot_mapping into k_cache ([num_blocks, kv_heads, block_size, head_dim],
    any strides and dtype); v ([batch, kv_heads, tokens, v_head_dim]) converted
    into v_cache at the same slots (both or neither). k and v are only read;
    slot -1 skips a token. stream_cache: the cache rows written with
    streaming stores (PE_ROPE_STREAM_CACHE: the same bytes, not read first
    nor kept in the CPU's caches; for rows not read again soon). Errors raise
    PosencError with nothing written."""
    _check_cache(cache)
    if k is None:
        raise ValueError("qk_norm_rope_store_: k is required")
    if (v is None) != (v_cache is None):
        raise ValueError("v and v_cache go together")
    if slot_mapping is None:
        raise ValueError("qk_norm_rope_store_: slot_mapping is required")
    kd, sc = _kind_scope(kind, scope)
    _check_weights_given(kind, q_weight, k_weight, q, k)
    try:
        ext.qk_norm_rope_store(cache, q, k, v, k_cache, v_cache, slot_mapping, kd, sc,
                               float(eps), q_weight, k_weight, positions,
                               (_INVERSE if inverse else 0) |
                               (_lib.PE_ROPE_STREAM_CACHE if stream_cache else 0),
                               pool, dtype, cache_dtype,
                               v_cache_dtype)
    except _lib.PosencError:
        tq = tensor(q, "q", dtype=dtype) if q is not None else None
        tk = tensor(k, "k", dtype=dtype, writable=False)
        if v is not None:
            tensor(v, "v", dtype=dtype, writable=False)
        tensor(k_cache, "k_cache", dtype=cache_dtype)
        if v_cache is not None:
            tensor(v_cache, "v_cache", dtype=v_cache_dtype)
        _check_weight_sizes(sc, q_weight, k_weight, tq, tk, tk.shape[3])
        int64_grid(slot_mapping, tk.shape[0], tk.shape[2], "slot_mapping")
        int64_grid(positions, tk.shape[0], tk.shape[2], "positions")
        raise
