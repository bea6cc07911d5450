"""numpy arrays and torch tensors -> pe_tensor views (no copy), and int64
position arrays.

Every check here runs before the C call, so a rejected array is never
written: wrong type -> TypeError, wrong shape/stride/writability/overlap ->
ValueError.

torch is optional: a torch.Tensor can only exist once torch has been
imported, so it is recognised through sys.modules and never imported here.
"""
import ctypes
import operator
import sys

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
_ITEMSIZE = {PE_F32: 4, PE_F16: 2, PE_BF16: 2}
_INT64_MAX = np.iinfo(np.int64).max
_TooHardError = getattr(np, "exceptions", np).TooHardError


def _torch_module():
    """The torch module if it has been imported (and is real), else None."""
    t = sys.modules.get("torch")
    return t if t is not None and hasattr(t, "Tensor") else None


def is_torch(x):
    t = _torch_module()
    return t is not None and isinstance(x, t.Tensor)


def _requested(dtype):
    if dtype is None:
        return None
    if isinstance(dtype, str) and dtype.lower() in _DTYPE_NAMES:
        return _DTYPE_NAMES[dtype.lower()]
    t = _torch_module()
    if t is not None and isinstance(dtype, t.dtype):
        m = {t.float32: PE_F32, t.float16: PE_F16, t.bfloat16: PE_BF16}
        if dtype in m:
            return m[dtype]
        raise TypeError("dtype %s: expected float32, float16 or bfloat16" % dtype)
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


class View:
    """What the C call needs of one array: the pe_tensor struct (`.t`), the
    shape, and a numpy view of the same memory (`.np()`, for the overlap
    check; built only when needed). Holds the original object so its memory
    stays alive."""
    __slots__ = ("obj", "t", "shape", "_np", "writable")

    def __init__(self, obj, t, shape, np_view, writable):
        self.obj, self.t, self.shape, self._np, self.writable = obj, t, shape, np_view, writable

    def np(self):
        if callable(self._np):
            self._np = self._np()
        return self._np

    def byte_range(self):
        """[lo, hi) of the bytes the tensor spans."""
        size = _ITEMSIZE[self.t.dtype]
        lo = hi = int(self.t.data)
        for n, st in zip(self.t.shape, self.t.stride):
            ext = (n - 1) * st * size
            lo, hi = (lo + ext, hi) if ext < 0 else (lo, hi + ext)
        return lo, hi + size


def _strides_in_elements(shape, byte_strides, size, name, ndim):
    strides = []
    for i, (n, s) in enumerate(zip(shape, byte_strides)):
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
    return strides


def _struct(ptr, pe_dtype, shape, strides, ndim):
    t = Tensor()
    t.data = ptr
    t.dtype = pe_dtype
    t.shape[:] = [int(n) for n in shape] + [1] * (4 - ndim)
    t.stride[:] = [int(s) for s in strides] + [1] * (4 - ndim)
    return t


class _Interface:
    """A numpy view of raw memory (no copy) through __array_interface__."""

    def __init__(self, ptr, shape, byte_strides, typestr):
        self.__array_interface__ = {"data": (ptr, False), "shape": tuple(shape),
                                    "strides": tuple(byte_strides), "typestr": typestr,
                                    "version": 3}


def _torch_view(x, name, dtype, writable, ndim):
    torch = _torch_module()
    m = {torch.float32: PE_F32, torch.float16: PE_F16, torch.bfloat16: PE_BF16}
    if x.dtype not in m:
        raise TypeError("%s has dtype %s: expected torch.float32, torch.float16 or "
                        "torch.bfloat16" % (name, x.dtype))
    have = m[x.dtype]
    want = _requested(dtype)
    if want is not None and want != have:
        raise TypeError("%s has dtype %s, but dtype=%r was requested" % (name, x.dtype, dtype))
    if x.device.type != "cpu":
        raise TypeError("%s is on device %s: libposenc runs on the CPU (move it with .cpu(), "
                        "or keep GPU tensors on the GPU's own rotary)" % (name, x.device))
    if x.layout != torch.strided:
        raise TypeError("%s has layout %s: expected a dense (strided) tensor" % (name, x.layout))
    if x.dim() != ndim:
        raise ValueError("%s must have %d dimensions, got shape %s"
                         % (name, ndim, tuple(x.shape)))
    if writable and x.requires_grad:
        raise ValueError("%s requires grad: libposenc writes it in place, which autograd cannot "
                         "record (call it under torch.no_grad() on a tensor that does not need "
                         "grad, or .detach() it)" % name)
    if writable and (x.is_conj() or x.is_neg()):
        raise ValueError("%s is a lazy conj/neg view: materialise it first" % name)
    size = x.element_size()
    shape = tuple(int(n) for n in x.shape)
    byte_strides = [int(s) * size for s in x.stride()]
    strides = _strides_in_elements(shape, byte_strides, size, name, ndim)
    ptr = int(x.data_ptr())
    if ptr % size:
        raise ValueError("%s is not aligned to its itemsize" % name)
    def view():
        return np.asarray(_Interface(ptr, shape, byte_strides, "<u%d" % size))
    return View(x, _struct(ptr, have, shape, strides, ndim), shape, view, writable)


def tensor(arr, name, *, dtype=None, writable=True, ndim=4):
    """A View describing `arr` (a numpy array, or a CPU torch.Tensor) in
    place. `.t` is the pe_tensor; the caller keeps the View alive for the
    duration of the call."""
    if is_torch(arr):
        return _torch_view(arr, name, dtype, writable, ndim)
    if not isinstance(arr, np.ndarray):
        raise TypeError("%s must be a numpy.ndarray or a torch.Tensor, got %s"
                        % (name, type(arr).__name__))
    pe_dtype = pe_dtype_of(arr, name, dtype)
    if arr.ndim != ndim:
        raise ValueError("%s must have %d dimensions, got shape %s" % (name, ndim, arr.shape))
    if writable and not arr.flags.writeable:
        raise ValueError("%s is read-only: it is modified in place" % name)
    if not arr.flags.aligned:
        raise ValueError("%s is not aligned to its itemsize" % name)
    strides = _strides_in_elements(arr.shape, arr.strides, arr.itemsize, name, ndim)
    return View(arr, _struct(arr.ctypes.data, pe_dtype, arr.shape, strides, ndim),
                tuple(arr.shape), arr, writable)


def disjoint(*views):
    """ValueError if two of the given Views (None skipped), one of them
    written, share an element (np.shares_memory: exact, not a span test, so
    q and k views of one packed QKV buffer pass)."""
    vs = [(n, v) for n, v in views if v is not None]
    for i in range(len(vs)):
        for j in range(i + 1, len(vs)):
            (na, a), (nb, b) = vs[i], vs[j]
            if not (a.writable or b.writable):
                continue
            (alo, ahi), (blo, bhi) = a.byte_range(), b.byte_range()
            if ahi <= blo or bhi <= alo:
                continue   # disjoint spans: no element in common
            try:
                shared = np.shares_memory(a.np(), b.np(), max_work=10**6)
            except _TooHardError:  # not decided within max_work: refuse rather than guess
                shared = True
            if shared:
                raise ValueError("%s and %s share elements: pass views of disjoint memory (%s is "
                                 "written in place)" % (na, nb, na if a.writable else nb))


def as_4d(arr, name, ndims=(3, 4)):
    """Accept [batch, tokens, d] for [batch, 1, tokens, d] (a view, no copy);
    numpy arrays and torch tensors alike."""
    if not (isinstance(arr, np.ndarray) or is_torch(arr)):
        raise TypeError("%s must be a numpy.ndarray or a torch.Tensor, got %s"
                        % (name, type(arr).__name__))
    if arr.ndim == 3 and 3 in ndims:
        return arr[:, None]
    if arr.ndim == 2 and 2 in ndims:
        return arr[None, None]
    if arr.ndim != 4:
        raise ValueError("%s must have %s dimensions, got shape %s"
                         % (name, " or ".join(map(str, ndims)), tuple(arr.shape)))
    return arr


def swap12(arr):
    """arr with axes 1 and 2 swapped (a view): numpy or torch."""
    return arr.transpose(1, 2) if is_torch(arr) else arr.transpose(0, 2, 1, 3)


def integers(values, name):
    """A numpy integer array (a view where possible) from a list, a numpy
    array or a CPU torch integer tensor; every value must fit int64."""
    if is_torch(values):
        if values.device.type != "cpu":
            raise TypeError("%s is on device %s: pass CPU positions" % (name, values.device))
        if values.dtype.is_floating_point or values.dtype.is_complex:
            raise TypeError("%s must be integers, got dtype %s" % (name, values.dtype))
        values = values.detach().numpy()
    a = np.asarray(values)
    if a.dtype == np.bool_ or a.dtype.kind not in "iu":
        raise TypeError("%s must be integers, got dtype %s" % (name, a.dtype))
    # numpy compares uint64 with a Python int through float64 (2**63 would
    # pass as int64 max): compare in uint64.
    if a.dtype.kind == "u" and a.size and a.max() > np.uint64(_INT64_MAX):
        big = a.reshape(-1)[np.argmax(a.reshape(-1) > np.uint64(_INT64_MAX))]
        raise ValueError("%s: the value %d exceeds the int64 range (at most 2**63 - 1)"
                         % (name, int(big)))
    return a


def int64_grid(values, batch, tokens, name, *, scalar_ok=False):
    """A C-contiguous int64 [batch, tokens] array (a copy) from None, a
    [batch, tokens], [1, tokens] or [tokens] (same for every batch row)
    integer array (numpy, list or torch), or (scalar_ok) one integer for
    every token."""
    if values is None:
        return None
    a = integers(values, name)
    if a.ndim == 0 and not scalar_ok:
        raise ValueError("%s must be an array of shape [batch, tokens] or [tokens] "
                         "(for a start offset p use np.arange(p, p + tokens))" % name)
    if a.ndim > 2 or (a.ndim == 2 and a.shape not in ((batch, tokens), (1, tokens))) or \
            (a.ndim == 1 and a.shape[0] != tokens):
        raise ValueError("%s has shape %s, expected [batch %d, tokens %d], [1, %d] or [%d]"
                         % (name, a.shape, batch, tokens, tokens, tokens))
    return np.ascontiguousarray(np.broadcast_to(a.astype(np.int64, copy=False), (batch, tokens)))


def ptr(arr):
    """The data pointer of an optional array (None -> NULL)."""
    return None if arr is None else arr.ctypes.data


def ref(view):
    """A pointer to an optional View's pe_tensor (None -> NULL)."""
    return None if view is None else ctypes.byref(view.t)


def float_vector(values, n, name, ctype=np.float32):
    """A contiguous 1-D float array of length n (a copy when needed)."""
    if is_torch(values):
        values = values.detach().cpu().float().numpy()
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


def handle_of(obj, kind, name):
    """The C handle of a posenc object of class `kind` (None -> NULL)."""
    if obj is None:
        return None
    if not isinstance(obj, kind):
        raise TypeError("%s must be a posenc.%s or None, got %s"
                        % (name, kind.__name__, type(obj).__name__))
    return obj._as_parameter_
