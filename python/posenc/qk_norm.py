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
The arithmetic (float64, one rounding) is posenc.h's; arrays follow RopeCache.apply_'s rules.
"""
import ctypes

import numpy as np

from . import _lib
from ._arrays import tensor, int64_grid, ptr, ref
from .threads import pool_handle
from .rope import RopeCache

__all__ = ["qk_norm_rope_", "qk_norm_rope_store_"]

KINDS = {"none": 0, "rms": 1, "rms_unit_offset": 2, "l2": 3}
SCOPES = {"head": 0, "token": 1}


class QkNorm(ctypes.Structure):
    """struct pe_qk_norm."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("kind", ctypes.c_int),
        ("scope", ctypes.c_int),
        ("eps", ctypes.c_float),
        ("q_weight", ctypes.c_void_p),
        ("k_weight", ctypes.c_void_p),
    ]


class KvCache(ctypes.Structure):
    """struct pe_kv_cache."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("k", ctypes.POINTER(_lib.Tensor)),
        ("v", ctypes.POINTER(_lib.Tensor)),
        ("k_quant", ctypes.c_uint32),
        ("v_quant", ctypes.c_uint32),
        ("k_scale", ctypes.c_void_p),
        ("v_scale", ctypes.c_void_p),
    ]


_T = ctypes.POINTER(_lib.Tensor)
_p, _st = ctypes.c_void_p, ctypes.c_int
_PROTOTYPES = {
    "pe_qk_norm_init": (None, [ctypes.POINTER(QkNorm)]),
    "pe_kv_cache_init": (None, [ctypes.POINTER(KvCache)]),
    "pe_qk_norm_rope": (_st, [_p, ctypes.POINTER(QkNorm), _T, _T, _p, ctypes.c_uint32, _p]),
    "pe_qk_norm_rope_store": (_st, [_p, ctypes.POINTER(QkNorm), _T, _T, _T,
                                    ctypes.POINTER(KvCache), _p, _p, ctypes.c_uint32, _p]),
}
for _name, (_res, _args) in _PROTOTYPES.items():
    _f = getattr(_lib.lib, _name, None)
    if _f is not None:
        _f.restype = _res
        _f.argtypes = _args


def _weight(w, name, needed, n_heads, head_dim, scope):
    if w is None:
        return None
    if not needed:
        raise ValueError("%s is given but this kind has no weight" % name)
    a = np.ascontiguousarray(np.asarray(w), dtype=np.float32)
    want = head_dim * (n_heads if scope == 1 else 1)
    if a.size != want:
        raise ValueError("%s has %d values, expected %d (%s)" %
                         (name, a.size, want, "heads * head_dim" if scope == 1 else "head_dim"))
    return a.reshape(-1)


def _norm(kind, scope, eps, q_weight, k_weight, q, k, head_dim):
    if kind not in KINDS:
        raise ValueError("kind %r is not one of %s" % (kind, ", ".join(KINDS)))
    if scope not in SCOPES:
        raise ValueError("scope %r is not one of %s" % (scope, ", ".join(SCOPES)))
    n = QkNorm()
    _lib.fn("pe_qk_norm_init")(ctypes.byref(n))
    n.kind, n.scope, n.eps = KINDS[kind], SCOPES[scope], float(eps)
    weighted = kind in ("rms", "rms_unit_offset")
    qw = _weight(q_weight, "q_weight", weighted, q.shape[1] if q is not None else 0, head_dim,
                 n.scope)
    kw = _weight(k_weight, "k_weight", weighted, k.shape[1] if k is not None else 0, head_dim,
                 n.scope)
    for w, arr, name in ((qw, q, "q_weight"), (kw, k, "k_weight")):
        if weighted and arr is not None and w is None:
            raise ValueError("kind %r needs %s" % (kind, name))
    n.q_weight, n.k_weight = ptr(qw), ptr(kw)
    return n, (qw, kw)  # the arrays stay alive with the caller's reference


def _check_cache(cache):
    if not isinstance(cache, RopeCache):
        raise TypeError("cache must be a posenc.RopeCache, got %s" % type(cache).__name__)


def qk_norm_rope_(cache, q=None, k=None, *, kind="rms", scope="head", eps=1e-6,
                  q_weight=None, k_weight=None, positions=None, inverse=False, pool=None,
                  dtype=None):
    """QK-norm then RoPE, q and k in place ([batch, heads, tokens, head_dim],
    either may be None). Every channel of a normed row is written."""
    _check_cache(cache)
    if q is None and k is None:
        raise ValueError("q and k cannot both be None")
    tq = tensor(q, "q", dtype=dtype) if q is not None else None
    tk = tensor(k, "k", dtype=dtype) if k is not None else None
    head_dim = (q if q is not None else k).shape[3]
    norm, keep = _norm(kind, scope, eps, q_weight, k_weight, q, k, head_dim)
    first = q if q is not None else k
    pos = int64_grid(positions, first.shape[0], first.shape[2], "positions")
    flags = _lib.PE_ROPE_INVERSE if inverse else 0
    _lib.check(_lib.fn("pe_qk_norm_rope")(cache._as_parameter_, ctypes.byref(norm), ref(tq),
                                          ref(tk), ptr(pos), flags, pool_handle(pool)))
    del keep


def qk_norm_rope_store_(cache, k, k_cache, slot_mapping, q=None, v=None, v_cache=None, *,
                        kind="rms", scope="head", eps=1e-6, q_weight=None, k_weight=None,
                        positions=None, inverse=False, pool=None, dtype=None, cache_dtype=None,
                        v_cache_dtype=None):
    """q normed and rotated in place (if given); k normed, rotated and written
    at slot_mapping into k_cache ([num_blocks, kv_heads, block_size, head_dim],
    any strides and dtype); v ([batch, kv_heads, tokens, v_head_dim]) converted
    into v_cache at the same slots (both or neither). k and v are only read;
    slot -1 skips a token. Errors raise PosencError with nothing written."""
    _check_cache(cache)
    if k is None:
        raise ValueError("qk_norm_rope_store_: k is required")
    if (v is None) != (v_cache is None):
        raise ValueError("v and v_cache go together")
    tq = tensor(q, "q", dtype=dtype) if q is not None else None
    tk = tensor(k, "k", dtype=dtype, writable=False)
    tv = tensor(v, "v", dtype=dtype, writable=False) if v is not None else None
    tkc = tensor(k_cache, "k_cache", dtype=cache_dtype)
    tvc = tensor(v_cache, "v_cache", dtype=v_cache_dtype) if v_cache is not None else None
    norm, keep = _norm(kind, scope, eps, q_weight, k_weight, q, k, k.shape[3])
    kv = KvCache()
    _lib.fn("pe_kv_cache_init")(ctypes.byref(kv))
    kv.k = ctypes.pointer(tkc.t)
    if tvc is not None:
        kv.v = ctypes.pointer(tvc.t)
    slots = int64_grid(slot_mapping, k.shape[0], k.shape[2], "slot_mapping")
    if slots is None:
        raise ValueError("qk_norm_rope_store_: slot_mapping is required")
    pos = int64_grid(positions, k.shape[0], k.shape[2], "positions")
    flags = _lib.PE_ROPE_INVERSE if inverse else 0
    _lib.check(_lib.fn("pe_qk_norm_rope_store")(
        cache._as_parameter_, ctypes.byref(norm), ref(tq), ref(tk), ref(tv),
        ctypes.byref(kv), ptr(slots), ptr(pos), flags, pool_handle(pool)))
    del keep
