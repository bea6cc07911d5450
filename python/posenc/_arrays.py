"""numpy arrays and torch tensors -> pe_tensor views (no copy), and int64
position arrays: the binding's argument checks, in Python.

The compiled module (posenc._posenc) describes the common arguments itself;
it calls the helpers here for any argument it does not take as it is (a list
of positions, a read-only or oddly strided array, an ml_dtypes bfloat16
array), and the binding's functions run these checks again when the library
refuses a call, so that the argument at fault raises the same TypeError or
ValueError it always did: wrong type -> TypeError, wrong
shape/stride/writability/overlap -> ValueError. Nothing is written before
any of them.

Another DLPack producer the compiled module declined is read as
numpy.from_dlpack reads it (as_array), so its checks are a numpy array's.

torch is optional: a torch.Tensor can only exist once torch has been
imported, so it is recognised through sys.modules and never imported here.
"""
import operator
import sys

import numpy as np

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


def as_array(arr, name):
    """arr itself when it is a numpy array or a torch tensor. Any other
    DLPack producer (JAX, CuPy, ... on the CPU) reaches the helpers only when
    the compiled module did not take it as it is: it is read as numpy reads
    it (numpy.from_dlpack: a view of the same memory, read-only before numpy
    2.1), so that the checks that follow name what does not fit - its dtype,
    shape or strides - as they do for a numpy array. TypeError for anything
    else, and for a producer numpy cannot read (another device, a dtype
    numpy lacks)."""
    if isinstance(arr, np.ndarray) or is_torch(arr):
        return arr
    if hasattr(arr, "__dlpack__") and hasattr(np, "from_dlpack"):
        try:
            return np.from_dlpack(arr)
        except Exception as e:
            raise TypeError("%s: a %s (DLPack) that neither the binding nor numpy can read "
                            "(%s: %s); pass a numpy.ndarray or a torch.Tensor"
                            % (name, type(arr).__name__, type(e).__name__, e)) from None
    raise TypeError("%s must be a numpy.ndarray, a torch.Tensor or a DLPack tensor, got %s"
                    % (name, type(arr).__name__))


def _via_dlpack(arr):
    """Whether a numpy array is numpy's view of a DLPack producer's memory."""
    owner = arr
    while isinstance(owner, np.ndarray):
        owner = owner.base
    return type(owner).__name__ == "PyCapsule"


def _read_only_error(arr, name, what):
    """The ValueError of an array written in place that cannot be."""
    if not _via_dlpack(arr):
        return ValueError("%s is read-only: it is %s" % (name, what))
    return ValueError("%s is read-only as numpy %s reads it through DLPack, and the binding "
                      "could not take it directly: pass a numpy.ndarray or a torch.Tensor"
                      % (name, np.__version__))


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
    if x.is_conj() or x.is_neg():
        # Its memory holds the values negated: reading it as it is would be wrong too.
        raise ValueError("%s is a lazy conj/neg view: materialise it first (.resolve_neg())"
                         % name)
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
    arr = as_array(arr, name)
    if is_torch(arr):
        return _torch_view(arr, name, dtype, writable, ndim)
    pe_dtype = pe_dtype_of(arr, name, dtype)
    if arr.ndim != ndim:
        raise ValueError("%s must have %d dimensions, got shape %s" % (name, ndim, arr.shape))
    # numpy's view of a DLPack producer is read-only before numpy 2.1: what
    # else does not fit is named first
    read_only = writable and not arr.flags.writeable
    if read_only and not _via_dlpack(arr):
        raise _read_only_error(arr, name, "modified in place")
    if not arr.flags.aligned:
        raise ValueError("%s is not aligned to its itemsize" % name)
    strides = _strides_in_elements(arr.shape, arr.strides, arr.itemsize, name, ndim)
    if read_only:
        raise _read_only_error(arr, name, "modified in place")
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
    numpy arrays and torch tensors alike (a DLPack producer as_array reads)."""
    arr = as_array(arr, name)
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
    elif hasattr(values, "__dlpack__"):
        values = as_array(values, name)
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


def int64_grid(values, batch, tokens, name, scalar_ok=False):
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


# ---- the compiled module's helpers --------------------------------------------

# How posenc._posenc maps an argument of fewer dimensions (its MAP_* values).
MAP_4D, MAP_SLOTS, MAP_ROWS, MAP_TABLE = 0, 1, 2, 3


def tensor_view(obj, name, dtype, writable, mapping):
    """The View of an argument posenc._posenc does not describe itself (or
    the error it deserves): mapping says how fewer dimensions are read -
    MAP_SLOTS a flat [slots, heads, dim] KV cache as [1, heads, slots, dim],
    MAP_ROWS [batch, tokens, d] as [batch, 1, tokens, d], MAP_TABLE
    [max_len, d] as [1, 1, max_len, d]."""
    if mapping == MAP_SLOTS:
        obj = kv_cache_4d(obj, name)
    elif mapping == MAP_ROWS:
        obj = as_4d(obj, name)
    elif mapping == MAP_TABLE:
        obj = as_4d(obj, name, ndims=(2, 4))
    return tensor(obj, name, dtype=dtype, writable=bool(writable))


def kv_cache_4d(k_cache, name="k_cache"):
    """[num_blocks, heads, block_size, dim] as it is; a flat [num_slots,
    heads, dim] cache as [1, heads, num_slots, dim] (a view)."""
    k_cache = as_array(k_cache, name)
    return swap12(k_cache[None]) if k_cache.ndim == 3 else k_cache


def mrope_positions(positions, batch, tokens):
    """A C-contiguous int64 [3, batch, tokens] array from [3, batch, tokens]
    or [3, tokens] (same for every batch row) integers; None stays None."""
    if positions is None:
        return None
    a = integers(positions, "positions")
    if a.ndim == 2 and a.shape == (3, tokens):
        a = np.broadcast_to(a[:, np.newaxis, :], (3, batch, tokens))
    if a.shape != (3, batch, tokens):
        raise ValueError("positions has shape %s, expected [3, batch %d, tokens %d] or [3, %d] "
                         "(t, h, w)" % (a.shape, batch, tokens, tokens))
    return np.ascontiguousarray(a, dtype=np.int64)


def int32_vector(values, n, limit, name):
    """A contiguous int32 [n] array of integers in [0, limit) (the cache
    index of each batch row)."""
    idx = integers(values, name)
    if idx.shape != (n,):
        raise ValueError("%s has shape %s, expected [batch %d]" % (name, idx.shape, n))
    if idx.size and (idx.min() < 0 or idx.max() >= limit):
        raise ValueError("%s values must be in [0, %d)" % (name, limit))
    return np.ascontiguousarray(idx, dtype=np.int32)


def float_table(table, num_buckets, heads):
    """T5's bias table as a contiguous float32 [num_buckets, heads] array
    (num_buckets None: the table's rows); a torch tensor (an nn.Embedding
    weight) is converted."""
    if hasattr(table, "detach"):
        table = table.detach().cpu().float().numpy()
    tab = np.asarray(table)
    if tab.ndim != 2:
        raise ValueError("table must be [num_buckets, heads], got shape %s" % (tab.shape,))
    nb = tab.shape[0] if num_buckets is None else int_arg(num_buckets, "num_buckets", *INT32)
    if tab.shape != (nb, heads):
        raise ValueError("table has shape %s, expected [num_buckets %d, heads %d]"
                         % (tab.shape, nb, heads))
    if tab.dtype.kind != "f":
        raise TypeError("table must be floating point, got dtype %s" % tab.dtype)
    return np.ascontiguousarray(tab, dtype=np.float32)


def norm_weight(w, name, n, per_token):
    """A QK-norm weight as a contiguous float32 [n] array: head_dim values
    (per head) or heads * head_dim (per token), in any shape holding them."""
    if is_torch(w):
        w = w.detach().cpu().float().numpy()
    a = np.ascontiguousarray(np.asarray(w), dtype=np.float32)
    if a.size != n:
        raise ValueError("%s has %d values, expected %d (%s)" %
                         (name, a.size, n, "heads * head_dim" if per_token else "head_dim"))
    return a.reshape(-1)


# ---- layouts ----------------------------------------------------------------------

BHTD = "[batch, heads, tokens, head_dim]"
BTHD = "[batch, tokens, heads, head_dim]"


def _layout_fits(qs, ks, ps, bthd):
    """q and k (shapes, k may be None) agree in batch and tokens read as
    [B, T, H, D] (bthd) or [B, H, T, D], and positions (shape or None) have
    that many tokens."""
    t = 1 if bthd else 2
    if ks is not None and (qs[0] != ks[0] or qs[t] != ks[t]):
        return False
    return ps is None or len(ps) not in (1, 2) or ps[-1] == qs[t]


def layout_of(q, k, positions):
    """posenc.torch's unsqueeze_dim=None: 0 ([B, H, T, D]) or 1 ([B, T, H,
    D]) when only one of them fits the shapes of q, k and positions; 0 when
    neither does (the call then reports what does not fit); ValueError when
    both do: the shapes cannot tell the layout (q and k with the same heads
    and tokens, or as many tokens as heads) and a guess could rotate along
    the heads."""
    if q is None:
        q, k = k, None
    qs = tuple(q.shape)
    ks = None if k is None else tuple(k.shape)
    ps = None if positions is None else np.shape(positions.detach().cpu().numpy()
                                                 if is_torch(positions) else positions)
    fits = [_layout_fits(qs, ks, ps, bthd) for bthd in (False, True)]
    if fits[0] and fits[1]:
        raise ValueError(
            "posenc.torch: cannot tell the layout of q %s%s%s: it fits %s and %s alike, and a "
            "guess could rotate along the heads: pass unsqueeze_dim=1 for %s (transformers' "
            "layout after .transpose(1, 2)) or unsqueeze_dim=2 for %s"
            % (qs, "" if ks is None else " and k %s" % (ks,),
               "" if ps is None else " with positions %s" % (ps,), BHTD, BTHD, BHTD, BTHD))
    return 1 if fits[1] and not fits[0] else 0


def mismatch_hint(qs, ks, bthd, how):
    """The end of the message for q and k (shapes) that differ in batch or
    tokens in the layout the caller stated: how to state the other one
    ([B, T, H, D] when bthd) when they fit that way, else nothing."""
    if _layout_fits(qs, ks, None, bthd):
        return "; they look like %s: %s" % (BTHD if bthd else BHTD, how)
    return ""
