"""Thread pools and kernel-path selection."""
import ctypes

from . import _lib
from ._arrays import int_arg


class ThreadPool(_lib.Handle):
    """A libposenc thread pool: n_threads - 1 workers plus the calling thread
    (0 = one per physical core of the caller's NUMA node).

    Pass it as pool= to any apply/add call. A pool runs one call at a time; a
    second Python thread using a busy pool gets PosencError (BusyError once
    the library reports PE_ERR_BUSY). Use it as a context manager, or call
    close(); it is also freed with the object.
    """

    _destroy = "pe_threadpool_destroy"

    def __init__(self, n_threads=0):
        n = int_arg(n_threads, "n_threads", 0, 1024)
        handle = ctypes.c_void_p()
        _lib.check(_lib.fn("pe_threadpool_create")(n, ctypes.byref(handle)))
        self._set_handle(handle)

    @property
    def n_threads(self):
        """Threads taking part in a call (workers + the caller)."""
        return int(_lib.lib.pe_threadpool_size(self._as_parameter_))

    size = n_threads

    def __repr__(self):
        return "<posenc.ThreadPool %s>" % ("closed" if self.closed else "%d threads" % self.n_threads)


def isa_name():
    """The kernel path in use: 'avx512bf16', 'avx512', 'avx2', 'neon' or
    'scalar'."""
    return _lib.lib.pe_isa_name().decode()


def force_isa(name="auto"):
    """Select the kernel path ('scalar', 'avx2', 'avx512',
    'avx512bf16', 'neon', 'auto').
    PosencError(ERR_UNSUPPORTED) if this CPU/build lacks it. Process-wide and
    not thread-safe: for tests and benchmarks."""
    if not isinstance(name, str):
        raise TypeError("name must be a str")
    _lib.check(_lib.lib.pe_force_isa(name.encode()))
