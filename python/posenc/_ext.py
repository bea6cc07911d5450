"""posenc._posenc, the compiled hot path of the in-place calls, and its
binding to the library posenc._lib loaded.

The module does not link libposenc: it is given the address of each C
function here, so it calls the very copy ctypes loaded (POSENC_LIBRARY, the
package's own, a checkout's build/ or the system's - _lib's search order).
Its entry points take the binding's objects (RopeCache, ThreadPool) and
arrays as they come; see _posenc.c for what it reads directly and what it
hands to posenc._arrays.
"""
import ctypes
import importlib.machinery
import os
import sys

from . import _lib

try:
    from . import _posenc as ext
except ImportError as e:  # not built for this interpreter
    _here = os.path.dirname(os.path.abspath(__file__))
    raise ImportError(
        "posenc: the compiled module posenc._posenc%s is missing from %s (%s). From a source "
        "checkout, build it for this Python with `make python PYTHON=%s` (or `%s "
        "python/build_backend/posenc_build.py --inplace`); or install the package: "
        "`pip install ./python`."
        % (importlib.machinery.EXTENSION_SUFFIXES[0], _here, e, sys.executable,
           sys.executable)) from None

#: The library functions the compiled module calls.
FUNCTIONS = (
    "pe_last_error", "pe_apply_rope_qk", "pe_rope_shift_k", "pe_rope_rerotate_k",
    "pe_apply_rope_qk_multi", "pe_apply_mrope_qk", "pe_apply_rope_qk_store",
    "pe_qk_norm_init", "pe_kv_cache_init", "pe_qk_norm_rope", "pe_qk_norm_rope_store",
    "pe_alibi_add_bias", "pe_t5_add_bias", "pe_sinusoidal_add", "pe_learned_add",
    "pe_mla_rope_store", "pe_mla_cache_read",
)


def _version_tuple(v):
    return tuple(int(x) for x in v.split("."))


def bind():
    """Give the compiled module the library's functions and the binding's
    classes and helpers (called once, by posenc/__init__.py, when they all
    exist). ImportError for a library older than the header the module was
    compiled with: it may lack what the package calls."""
    import numpy as np
    from . import _arrays
    from .rope import RopeCache
    from .threads import ThreadPool
    from .mla import MLA, cache_view
    for name, size, struct in (("pe_tensor", ext.SIZEOF_TENSOR, _lib.Tensor),
                               ("pe_mla", ext.SIZEOF_MLA, _lib.MLAParams)):
        if size != ctypes.sizeof(struct):
            raise ImportError("posenc: posenc._posenc was built with a %s of %d bytes, "
                              "posenc._lib declares %d: rebuild the package"
                              % (name, size, ctypes.sizeof(struct)))
    if _version_tuple(_lib.version()) < _version_tuple(ext.HEADER_VERSION):
        raise ImportError("posenc: %s is libposenc %s, older than the %s this package was built "
                          "with: install libposenc %s or newer, or set POSENC_LIBRARY to one"
                          % (_lib.library_path(), _lib.version(), ext.HEADER_VERSION,
                             ext.HEADER_VERSION))
    functions = {name: ctypes.cast(getattr(_lib.lib, name), ctypes.c_void_p).value
                 for name in FUNCTIONS if _lib.has_symbol(name)}
    ext._bind(functions, {
        "ndarray": np.ndarray, "RopeCache": RopeCache, "ThreadPool": ThreadPool, "MLA": MLA,
        "PosencError": _lib.PosencError, "BusyError": _lib.BusyError,
        "tensor": _arrays.tensor_view, "int64_grid": _arrays.int64_grid,
        "mrope_positions": _arrays.mrope_positions, "int32_vector": _arrays.int32_vector,
        "float_vector": _arrays.float_vector, "float_table": _arrays.float_table,
        "weight": _arrays.norm_weight, "handle_of": _arrays.handle_of,
        "requested": _arrays._requested, "missing": _lib.missing,
        "layout_error": _arrays.layout_of, "mla_cache": cache_view,
    })
