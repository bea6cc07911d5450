"""posenc - Python binding of libposenc (positional encodings for transformer
inference on the CPU).

    import numpy as np, posenc
    cache = posenc.RopeCache(head_dim=128, rope_theta=500000.0, max_positions=8192,
                             rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                           "original_max_position_embeddings": 8192})
    q = np.random.randn(1, 32, 16, 128).astype(np.float32)   # [batch, heads, tokens, dim]
    k = np.random.randn(1, 8, 16, 128).astype(np.float32)
    cache.apply_(q, k, positions=np.arange(100, 116))       # in place, no copy

A model whose layers differ (Gemma 3's local and global layers, NoPE layers):
posenc.ModelRope.from_hf_config(config) and m.layer(i), a RopeCache or None;
m.layer(i, posenc.ROLE_INDEXER) and m.slice(i) give a layer's other
rotations and where their channels sit (DeepSeek's MLA: q[..., 128:192]).

Arrays are [batch, heads, tokens, head_dim] numpy arrays or CPU torch
tensors of float32, float16 or bfloat16 (numpy: uint16 arrays with
dtype="bf16", or ml_dtypes.bfloat16), any strides with a contiguous last
dimension (e.g. x.transpose(1, 2) of a [batch, tokens, heads, dim] tensor, or
q and k slices of one packed QKV projection). They are modified in place,
without a copy; an array that cannot be (read-only, wrong dtype or shape, a
CUDA tensor, a tensor that requires grad, q and k sharing elements) raises
TypeError/ValueError before anything is written, and a failure inside the
library raises PosencError (nothing written either). torch is optional;
posenc.torch holds a transformers-shaped rotary module.

The in-place calls go through the compiled module posenc._posenc (the
arrays described in C, the GIL released during the kernel): a few
microseconds over the C call itself (python -m posenc.bench). Creating caches
and reading configs go through ctypes.

The library is found through $POSENC_LIBRARY, then next to this package (an
installed package carries its own), then the build/ of the source checkout
around it, then an installed libposenc.so.0 (the dynamic loader); see
posenc._lib.

Table rows: every max_positions parameter defaults to DEFAULT_MAX_POSITIONS,
the C library's 4096 (2 MiB at rotary_dim 128), never a config's
max_position_embeddings unless given MAX_POSITIONS_FROM_CONFIG.

posenc.tools holds what is built on the binding: the figures
(python -m posenc.tools.explore) and the encoding picker
(python -m posenc.tools.pick).
"""
import sys as _sys

try:
    import numpy as _numpy  # noqa: F401  (every module of the binding needs it)
except ImportError as _e:
    raise ImportError(
        "posenc needs numpy, which this Python (%s) cannot import (%s): install it (Debian: "
        "apt-get install python3-numpy, then, in a venv, a .pth file naming "
        "/usr/lib/python3/dist-packages - README, section Python; or pip install numpy)"
        % (_sys.executable, _e)) from None

from ._lib import (PosencError, BusyError, Status, library_path, has_symbol as _has_symbol,
                   DEFAULT_MAX_POSITIONS, MAX_POSITIONS_FROM_CONFIG)
from . import _lib, _ext
from .rope import RopeCache, rerotate_k_
from .model import (ModelRope, RopeSlice, QKNorm, slice_view, ROLE_ATTENTION, ROLE_INDEXER,
                    ROLE_COMPRESSOR)
from .threads import ThreadPool, isa_name, force_isa
from .encodings import (alibi_slopes, alibi_add_bias_, t5_bucket, t5_add_bias_,
                        sinusoidal_table, sinusoidal_add_, learned_add_)
from .rope_ext import (apply_rope_qk_store_, apply_mrope_, apply_rope_qk_multi_,
                       mrope_section_from_hf_config)
from .qk_norm import qk_norm_rope_, qk_norm_rope_store_
from .mla import MLA, mla_rope_store_, mla_cache_read

_ext.bind()

__all__ = [
    "version", "library_path", "PosencError", "BusyError", "Status",
    "RopeCache", "rerotate_k_", "ModelRope", "ThreadPool", "isa_name", "force_isa",
    "alibi_slopes", "alibi_add_bias_", "t5_bucket", "t5_add_bias_",
    "sinusoidal_table", "sinusoidal_add_", "learned_add_",
    "apply_rope_qk_store_", "apply_mrope_", "apply_rope_qk_multi_",
    "mrope_section_from_hf_config", "qk_norm_rope_", "qk_norm_rope_store_",
    "DEFAULT_MAX_POSITIONS", "MAX_POSITIONS_FROM_CONFIG",
    "RopeSlice", "QKNorm", "slice_view", "ROLE_ATTENTION", "ROLE_INDEXER", "ROLE_COMPRESSOR",
    "MLA", "mla_rope_store_", "mla_cache_read",
]

def version():
    """The loaded library's version, "MAJOR.MINOR.PATCH"."""
    return _lib.version()


#: The binding has no version of its own: it is released with the library,
#: whose header (PE_VERSION_*) is the one place the number is written (the
#: package metadata is read from it at build time, see setup.py).
__version__ = version()
