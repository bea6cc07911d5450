"""numpy arrays -> pe_tensor views (no copy) and int64 position arrays.

Every check here runs before the C call, so a rejected array is never
written: wrong type -> TypeError, wrong shape/stride/writability -> ValueError.
"""
import operator

import numpy as np

from . import _lib
from ._lib import Tensor, PE_F32, PE_F16, PE_BF16

try:  # optional: a real bfloat16 numpy dtype
    import ml_dtypes as _ml_dtypes
    _BF16 = np.dtype(_ml_dtypes.bfloat16)
except Exception:  # pragma: no cover - depends on the environment
    _BF16 = None

_DTYPE_NAMES = {
    "f32": PE_F32, "float32": PE_F32,
    "f16": PE_F16, "float16": PE_F16, "half": PE_F16,
    "bf16": PE_BF16, "bfloat16": PE_BF16,
}
_PE_NAMES = {PE_F32: "float32", PE_F16: "float16", PE_BF16: "bfloat16"}


def _requested(dtype):
    if dtype is None:
        return None
    if isinstance(dtype, str) and dtype.lower() in _DTYPE_NAMES:
        return _DTYPE_NAMES[dtype.lower()]
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise TypeError("dtype %r: expected 'float32', 'float16' or 'bf16'" % (dtype,)) from None
    if d == np.float32:
        return PE_F32
    if d == np.float16:
        return PE_F16
    if _BF16 is not None and d == _BF16:
        return PE_BF16
    raise TypeError("dtype %r: expected 'float32', 'float16' or 'bf16'" % (dtype,))


def pe_dtype_of(arr, name, dtype=None):
    """The pe_dtype of a numpy array; `dtype` says how to read it ('bf16'
    for uint16 arrays holding bfloat16 bits) or asserts what it must be."""
    want = _requested(dtype)
    d = arr.dtype
    if d == np.float32:
        have = PE_F32
    elif d == np.float16:
        have = PE_F16
    elif _BF16 is not None and d == _BF16:
        have = PE_BF16
    elif d == np.uint16 and want == PE_BF16:
        have = PE_BF16
    elif d == np.uint16:
        raise TypeError("%s is a uint16 array: pass dtype='bf16' to use it as bfloat16 bits" % name)
    else:
        raise TypeError("%s has dtype %s: expected float32, float16 or bfloat16 "
                        "(uint16 with dtype='bf16'%s)"
                        % (name, d, ", or ml_dtypes.bfloat16" if _BF16 is not None else ""))
    if want is not None and want != have:
        raise TypeError("%s has dtype %s, but dtype=%r was requested" % (name, d, dtype))
    if not d.isnative:
        raise TypeError("%s has non-native byte order %s" % (name, d))
    return have


def tensor(arr, name, *, dtype=None, writable=True, ndim=4):
    """A pe_tensor describing `arr` in place. Returns the ctypes struct; the
    caller keeps `arr` alive for the duration of the call."""
    if not isinstance(arr, np.ndarray):
        raise TypeError("%s must be a numpy.ndarray, got %s" % (name, type(arr).__name__))
    pe_dtype = pe_dtype_of(arr, name, dtype)
    if arr.ndim != ndim:
        raise ValueError("%s must have %d dimensions, got shape %s" % (name, ndim, arr.shape))
    if writable and not arr.flags.writeable:
        raise ValueError("%s is read-only: it is modified in place" % name)
    if not arr.flags.aligned:
        raise ValueError("%s is not aligned to its itemsize" % name)
    size = arr.itemsize
    strides = []
    for i, (n, s) in enumerate(zip(arr.shape, arr.strides)):
        if n == 1:
            # Never stepped over: any stride describes the same memory.
            strides.append(1 if i == ndim - 1 else (s // size if s % size == 0 else 0))
            continue
        if s % size:
            raise ValueError("%s: stride %d bytes of dimension %d is not a multiple of the "
                             "itemsize %d" % (name, s, i, size))
        strides.append(s // size)
    if strides[-1] != 1:
        raise ValueError("%s: the last dimension must be contiguous (stride 1 element, got %d); "
                         "other dimensions may have any stride" % (name, strides[-1]))
    t = Tensor()
    t.data = arr.ctypes.data
    t.dtype = pe_dtype
    t.shape[:] = [int(n) for n in arr.shape] + [1] * (4 - ndim)
    t.stride[:] = strides + [1] * (4 - ndim)
    return t


def as_4d(arr, name, ndims=(3, 4)):
    """Accept [batch, tokens, d] for [batch, 1, tokens, d] (a view, no copy)."""
    if not isinstance(arr, np.ndarray):
        raise TypeError("%s must be a numpy.ndarray, got %s" % (name, type(arr).__name__))
    if arr.ndim == 3 and 3 in ndims:
        return arr[:, np.newaxis]
    if arr.ndim == 2 and 2 in ndims:
        return arr[np.newaxis, np.newaxis]
    if arr.ndim != 4:
        raise ValueError("%s must have %s dimensions, got shape %s"
                         % (name, " or ".join(map(str, ndims)), arr.shape))
    return arr


def int64_grid(values, batch, tokens, name, *, scalar_ok=False):
    """A C-contiguous int64 [batch, tokens] array (a copy) from None, a
    [batch, tokens] or [tokens] (same for every batch row) integer array, or
    (scalar_ok) one integer for every token."""
    if values is None:
        return None
    a = np.asarray(values)
    if a.dtype == np.bool_ or a.dtype.kind not in "iu":
        raise TypeError("%s must be integers, got dtype %s" % (name, a.dtype))
    if a.dtype.kind == "u" and a.size and a.max() > np.iinfo(np.int64).max:
        raise ValueError("%s: a value exceeds the int64 range" % name)
    if a.ndim == 0 and not scalar_ok:
        raise ValueError("%s must be an array of shape [batch, tokens] or [tokens] "
                         "(for a start offset p use np.arange(p, p + tokens))" % name)
    if a.ndim > 2 or (a.ndim == 2 and a.shape != (batch, tokens)) or \
            (a.ndim == 1 and a.shape[0] != tokens):
        raise ValueError("%s has shape %s, expected [batch %d, tokens %d] or [%d]"
                         % (name, a.shape, batch, tokens, tokens))
    return np.ascontiguousarray(np.broadcast_to(a.astype(np.int64, copy=False), (batch, tokens)))


def ptr(arr):
    """The data pointer of an optional array (None -> NULL)."""
    return None if arr is None else arr.ctypes.data


def float_vector(values, n, name, ctype=np.float32):
    """A contiguous 1-D float array of length n (a copy when needed)."""
    a = np.asarray(values)
    if a.dtype.kind not in "fiu" or a.dtype == np.bool_:
        raise TypeError("%s must be real numbers, got dtype %s" % (name, a.dtype))
    a = np.ascontiguousarray(a, dtype=ctype)
    if a.shape != (n,):
        raise ValueError("%s has shape %s, expected (%d,)" % (name, a.shape, n))
    return a


def int_arg(value, name, lo, hi):
    """An integer argument checked against the range of its C type."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError("%s must be an integer, got %s" % (name, type(value).__name__)) from None
    if not lo <= v <= hi:
        raise ValueError("%s = %d is outside [%d, %d]" % (name, v, lo, hi))
    return v


INT32 = (-2**31, 2**31 - 1)
INT64 = (-2**63, 2**63 - 1)


def pool_handle(pool):
    if pool is None:
        return None
    from .threads import ThreadPool
    if not isinstance(pool, ThreadPool):
        raise TypeError("pool must be a posenc.ThreadPool or None, got %s" % type(pool).__name__)
    return pool._as_parameter_
