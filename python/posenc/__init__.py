"""posenc - Python binding of libposenc (positional encodings for transformer
inference on the CPU), pure ctypes: nothing to compile.

    import numpy as np, posenc
    cache = posenc.RopeCache(head_dim=128, rope_theta=500000.0, max_positions=8192,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                           "original_max_position_embeddings": 8192})
    q = np.random.randn(1, 32, 16, 128).astype(np.float32)   # [batch, heads, tokens, dim]
    k = np.random.randn(1, 8, 16, 128).astype(np.float32)
    cache.apply_(q, k, positions=np.arange(100, 116))       # in place, no copy

Arrays are numpy [batch, heads, tokens, head_dim] of float32, float16 or
bfloat16 (uint16 arrays with dtype="bf16", or ml_dtypes.bfloat16), any
strides with a contiguous last dimension (e.g. x.transpose(0, 2, 1, 3) of a
[batch, tokens, heads, dim] buffer). They are modified in place; an array
that cannot be (read-only, wrong dtype or shape) raises TypeError/ValueError
before anything is written, and a failure inside the library raises
PosencError (nothing written either).

The library is found through $POSENC_LIBRARY, then next to this package, then
the system's dynamic loader (libposenc.so.0).
"""
from ._lib import PosencError, Status, library_path, has_symbol as _has_symbol
from . import _lib
from .rope import RopeCache, rerotate_k_
from .threads import ThreadPool, isa_name, force_isa
from .encodings import (alibi_slopes, alibi_add_bias_, t5_bucket, t5_add_bias_,
                        sinusoidal_table, sinusoidal_add_, learned_add_)
from .rope_ext import (apply_rope_qk_store_, apply_mrope_, apply_rope_qk_multi_,
                       mrope_section_from_hf_config)
from .qk_norm import qk_norm_rope_, qk_norm_rope_store_  # noqa: F401  (issue 16)

__all__ = [
    "version", "library_path", "PosencError", "Status",
    "RopeCache", "rerotate_k_", "ThreadPool", "isa_name", "force_isa",
    "alibi_slopes", "alibi_add_bias_", "t5_bucket", "t5_add_bias_",
    "sinusoidal_table", "sinusoidal_add_", "learned_add_",
    "apply_rope_qk_store_", "apply_mrope_", "apply_rope_qk_multi_",
    "mrope_section_from_hf_config",
]

__version__ = "0.1.0"  # of the binding; version() is the loaded library's


def version():
    """The loaded library's version, "MAJOR.MINOR.PATCH"."""
    return _lib.version()
