"""Loading libposenc and declaring its C API for ctypes: statuses,
exceptions, structs, flags, prototypes, the handle base class, the
config.json reader and the table-size rule - each written once, here.

ctypes serves the calls made once per model (creating caches and pools,
reading configs, accessors); the in-place calls, made once per layer and
step, go through the compiled module posenc._posenc (see _ext.py), which
this module's loader also binds: both use the one library loaded here.

The library is looked up, in order:
  1. the POSENC_LIBRARY environment variable (a file, or a directory holding
     libposenc.so.0); if set, nothing else is tried;
  2. next to this package: posenc/libposenc.so.0, the copy an installed
     package carries (pip builds it with the package);
  3. the build/ directory of the source checkout around python/posenc/
     (running from the tree with PYTHONPATH=python), if that build exists;
  4. an installed library: "libposenc.so.0" through the dynamic loader
     (LD_LIBRARY_PATH, the ld.so cache), then ctypes.util.find_library.
A library whose major version is not this binding's is refused at import
(posenc._ext also refuses one older than the header the package was built
with).

Functions the loaded library does not export (an older 0.x library) are
reported by has_symbol() and raise PosencError(UNSUPPORTED) when called.
"""
import ctypes
import ctypes.util
import enum
import os

__all__ = ["Status", "PosencError", "BusyError", "lib", "fn", "has_symbol", "check",
           "library_path", "RopeParams", "Tensor", "RopeSlice", "QKNorm", "MLAParams",
           "SONAME_MAJOR", "Handle", "config_text"]

#: The major version (ABI) this binding is written for; the SONAME carries it.
SONAME_MAJOR = 0
_SONAME = "libposenc.so.%d" % SONAME_MAJOR

c_enum = ctypes.c_int  # C enums are int-sized on every ABI libposenc targets


class Status(enum.IntEnum):
    """pe_status values (fixed numbers, never reused)."""
    OK = 0
    ERR_NULL_POINTER = 1
    ERR_INVALID_ARGUMENT = 2
    ERR_SHAPE = 3
    ERR_DTYPE = 4
    ERR_POSITION_OUT_OF_RANGE = 5
    ERR_OUT_OF_MEMORY = 6
    ERR_OVERFLOW = 7
    ERR_UNSUPPORTED = 8
    ERR_PARSE = 9
    ERR_BUSY = 10


class PosencError(RuntimeError):
    """A libposenc call failed.

    .status is the pe_status (a Status member, or an int for a value newer
    than this binding) and .message the library's pe_last_error() sentence,
    which names the function, the argument and the values. Nothing was
    written to the caller's arrays.
    """

    def __init__(self, status, message):
        try:
            status = Status(status)
        except ValueError:
            status = int(status)
        self.status = status
        self.message = message
        super().__init__(message)

    def __str__(self):
        name = self.status.name if isinstance(self.status, Status) else str(self.status)
        return "%s (PE_%s)" % (self.message, name) if self.message else "PE_" + name


class BusyError(PosencError):
    """PE_ERR_BUSY: the thread pool is running another call (one call at a
    time per pool); retry, or give each thread its own pool."""


# ---- structs: field for field the layout of include/posenc.h ---------------

class RopeParams(ctypes.Structure):
    """struct pe_rope_params. struct_size is set to ctypes.sizeof(RopeParams);
    tests compare it with what pe_rope_params_init() writes."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("head_dim", ctypes.c_int32),
        ("rotary_dim", ctypes.c_int32),
        ("style", c_enum),                       # pe_rope_style
        ("base", ctypes.c_double),
        ("max_positions", ctypes.c_int64),
        ("scaling", c_enum),                     # pe_rope_scaling
        ("factor", ctypes.c_double),
        ("original_max_positions", ctypes.c_int64),
        ("seq_len", ctypes.c_int64),
        ("attention_factor", ctypes.c_double),
        ("beta_fast", ctypes.c_double),
        ("beta_slow", ctypes.c_double),
        ("mscale", ctypes.c_double),
        ("mscale_all_dim", ctypes.c_double),
        ("truncate", ctypes.c_int32),
        ("low_freq_factor", ctypes.c_double),
        ("high_freq_factor", ctypes.c_double),
        ("short_factor", ctypes.POINTER(ctypes.c_float)),
        ("long_factor", ctypes.POINTER(ctypes.c_float)),
        ("inv_freq", ctypes.POINTER(ctypes.c_double)),
    ]


class Tensor(ctypes.Structure):
    """struct pe_tensor: strides in elements."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", c_enum),                       # pe_dtype
        ("shape", ctypes.c_int64 * 4),
        ("stride", ctypes.c_int64 * 4),
    ]


class RopeSlice(ctypes.Structure):
    """struct pe_rope_slice: where a rotation's channels sit in q and k."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("q_head_dim", ctypes.c_int32),
        ("q_offset", ctypes.c_int32),
        ("k_head_dim", ctypes.c_int32),
        ("k_offset", ctypes.c_int32),
        ("rotary_dim", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
    ]


class QKNorm(ctypes.Structure):
    """struct pe_qk_norm (the binding's hot calls fill it in C; the model
    reports one through this)."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("kind", c_enum),                        # pe_qk_norm_kind
        ("scope", c_enum),                       # pe_qk_norm_scope
        ("eps", ctypes.c_float),
        ("q_weight", ctypes.POINTER(ctypes.c_float)),
        ("k_weight", ctypes.POINTER(ctypes.c_float)),
    ]


class MLAParams(ctypes.Structure):
    """struct pe_mla: one MLA layer's step (posenc.MLA keeps one, and
    posenc._posenc reads it through its buffer)."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("rope_dim", ctypes.c_int32),
        ("kv_norm_dim", ctypes.c_int32),
        ("kv_rope_offset", ctypes.c_int32),
        ("q_rope_offset", ctypes.c_int32),
        ("kv_norm", c_enum),                     # pe_qk_norm_kind
        ("kv_eps", ctypes.c_float),
        ("kv_weight", ctypes.POINTER(ctypes.c_float)),
        ("q_norm", c_enum),                      # pe_qk_norm_kind
        ("q_eps", ctypes.c_float),
        ("format", ctypes.c_uint32),             # pe_mla_format
        ("order", ctypes.c_uint32),              # pe_mla_order
        ("scale", ctypes.POINTER(ctypes.c_float)),
    ]


# ---- prototypes ---------------------------------------------------------------

_p = ctypes.c_void_p          # handles and array pointers (numpy .ctypes.data)
_st = ctypes.c_int            # pe_status
_i32, _i64, _u32, _dbl = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint32, ctypes.c_double
_T = ctypes.POINTER(Tensor)
_PROTOTYPES = {
    "pe_version_string": (ctypes.c_char_p, []),
    "pe_status_string": (ctypes.c_char_p, [_st]),
    "pe_last_error": (ctypes.c_char_p, []),
    "pe_rope_params_init": (None, [ctypes.POINTER(RopeParams)]),
    "pe_rope_cache_create": (_st, [ctypes.POINTER(RopeParams), ctypes.POINTER(_p)]),
    "pe_rope_cache_create_from_hf_config": (_st, [ctypes.c_char_p, ctypes.c_size_t, _i64, _i64,
                                                  _u32, ctypes.POINTER(_p)]),
    "pe_rope_cache_destroy": (None, [_p]),
    "pe_rope_cache_params": (_st, [_p, ctypes.POINTER(RopeParams)]),
    "pe_rope_cache_inv_freq": (_st, [_p, _p]),
    "pe_rope_cache_attention_factor": (_dbl, [_p]),
    "pe_rope_cache_softmax_scale": (_dbl, [_p]),
    "pe_rope_cache_cos_sin": (_st, [_p, _i64, _p, _p]),
    "pe_apply_rope_qk": (_st, [_p, _T, _T, _p, _u32, _p]),
    "pe_rope_shift_k": (_st, [_p, _T, _p, _p]),
    "pe_rope_rerotate_k": (_st, [_p, _p, _T, _p, _p]),
    "pe_alibi_slopes": (_st, [_i32, _dbl, _p]),
    "pe_alibi_add_bias": (_st, [_T, _p, _p, _u32, _p]),
    "pe_t5_bucket": (_i32, [_i64, _i32, _i32, _i32]),
    "pe_t5_add_bias": (_st, [_T, _p, _i32, _i32, _i32, _p, _u32, _p]),
    "pe_sinusoidal_table": (_st, [_i64, _i32, _dbl, _u32, _p]),
    "pe_sinusoidal_add": (_st, [_T, _p, _dbl, _u32, _p]),
    "pe_learned_add": (_st, [_T, _T, _p, _p]),
    "pe_threadpool_create": (_st, [_i32, ctypes.POINTER(_p)]),
    "pe_threadpool_destroy": (None, [_p]),
    "pe_threadpool_size": (_i32, [_p]),
    "pe_isa_name": (ctypes.c_char_p, []),
    "pe_force_isa": (_st, [ctypes.c_char_p]),
    "pe_apply_rope_qk_store": (_st, [_p, _T, _T, _T, _p, _p, _u32, _p]),
    "pe_apply_mrope_qk": (_st, [_p, _T, _T, _p, _p, _u32, _p]),
    "pe_apply_rope_qk_multi": (_st, [_p, _i32, _p, _T, _T, _p, _u32, _p]),
    "pe_mrope_section_from_hf_config": (_st, [ctypes.c_char_p, ctypes.c_size_t, _p,
                                              ctypes.POINTER(_u32)]),
    "pe_model_rope_from_hf_config": (_st, [ctypes.c_char_p, ctypes.c_size_t, _i64, _i64, _u32,
                                           ctypes.POINTER(_p)]),
    "pe_model_rope_num_layers": (_i32, [_p]),
    "pe_model_rope_layer": (_p, [_p, _i32]),
    "pe_model_rope_pairing_guessed": (_i32, [_p]),
    "pe_model_rope_heads": (_st, [_p, ctypes.POINTER(_i32), ctypes.POINTER(_i32)]),
    "pe_model_rope_nope_temperature": (_st, [_p, _i32, ctypes.POINTER(_dbl),
                                             ctypes.POINTER(_dbl)]),
    "pe_model_rope_destroy": (None, [_p]),
    "pe_model_rope_layer_role": (_p, [_p, _i32, _i32]),
    "pe_rope_slice_init": (None, [ctypes.POINTER(RopeSlice)]),
    "pe_model_rope_layer_slice": (_st, [_p, _i32, _i32, ctypes.POINTER(RopeSlice)]),
    "pe_qk_norm_init": (None, [ctypes.POINTER(QKNorm)]),
    "pe_model_rope_layer_qk_norm": (_st, [_p, _i32, _i32, ctypes.POINTER(QKNorm)]),
    "pe_model_rope_latent_norm_eps": (_st, [_p, ctypes.POINTER(_dbl)]),
    "pe_mla_init": (None, [ctypes.POINTER(MLAParams)]),
}

# Flags and enum values of include/posenc.h: the only copy in the binding
# (test_basics.py checks them against the header). PE_MASK_CAUSAL and
# PE_SINUSOIDAL_CONCAT: flag families have distinct bits.
PE_ROPE_INVERSE = 0x1
PE_ROPE_MROPE_INTERLEAVED = 0x2
PE_ROPE_STREAM_CACHE = 0x4
PE_MASK_CAUSAL = 0x100
PE_SINUSOIDAL_CONCAT = 0x10000
PE_CONFIG_GUESS = 0x1000000
PE_F32, PE_F16, PE_BF16 = 0, 1, 2
PE_MAX_POSITIONS_FROM_CONFIG = -1
PE_ROPE_ROLE_ATTENTION, PE_ROPE_ROLE_INDEXER, PE_ROPE_ROLE_COMPRESSOR = 0, 1, 2
PE_SLICE_DEROTATE_OUTPUT = 0x1
PE_QK_NORM_NONE, PE_QK_NORM_RMS, PE_QK_NORM_RMS_UNIT_OFFSET, PE_QK_NORM_L2 = 0, 1, 2, 3
PE_QK_NORM_PER_HEAD, PE_QK_NORM_PER_TOKEN = 0, 1
PE_MLA_PLAIN, PE_MLA_FP8_E4M3, PE_MLA_FP8_DS, PE_MLA_FP8_DS_V4 = 0, 1, 2, 3
PE_MLA_LATENT_FIRST, PE_MLA_ROPE_FIRST = 0, 1


# ---- loading ------------------------------------------------------------------

def _package_dir():
    return os.path.dirname(os.path.abspath(__file__))


def source_checkout():
    """The source checkout around this package, or None: the directory above
    python/posenc/ when it holds include/posenc.h (an installed package is
    never in one: it carries its library)."""
    here = _package_dir()
    root = os.path.dirname(os.path.dirname(here))
    if os.path.basename(os.path.dirname(here)) == "python" and \
            os.path.isfile(os.path.join(root, "include", "posenc.h")):
        return root
    return None


def _candidates():
    env = os.environ.get("POSENC_LIBRARY")
    if env:
        if os.path.isdir(env):
            return [os.path.join(env, n) for n in (_SONAME, "libposenc.so")], True
        return [env], True
    here = _package_dir()
    local = [os.path.join(here, n) for n in (_SONAME, "libposenc.so")]
    root = source_checkout()
    if root:
        local.append(os.path.join(root, "build", _SONAME))
    found = ctypes.util.find_library("posenc")
    return [p for p in local if os.path.exists(p)] + [_SONAME] + ([found] if found else []), False


def _load():
    names, from_env = _candidates()
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            errors.append("  %s: %s" % (name, e))
    where = ("POSENC_LIBRARY=%s" % os.environ["POSENC_LIBRARY"]) if from_env else \
        ("next to the posenc package, the source checkout's build/ (%s), %s through the "
         "dynamic loader, find_library('posenc')" % (source_checkout() or "none", _SONAME))
    raise ImportError("posenc: cannot load libposenc (tried %s):\n%s\n"
                      "Build it (make build), install it (make install; ldconfig), or set "
                      "POSENC_LIBRARY to the path of libposenc.so.%d."
                      % (where, "\n".join(errors), SONAME_MAJOR))


lib, _loaded_name = _load()

for _name, (_res, _args) in _PROTOTYPES.items():
    _f = getattr(lib, _name, None)
    if _f is not None:
        _f.restype = _res
        _f.argtypes = _args


def has_symbol(name):
    """True if the loaded library exports the C function `name`."""
    return hasattr(lib, name)


def missing(name):
    """The PosencError(UNSUPPORTED) for a C function the loaded library
    does not export (an older library)."""
    return PosencError(Status.ERR_UNSUPPORTED,
                       "%s: not exported by %s (version %s): a newer libposenc is needed"
                       % (name, library_path(), version()))


def fn(name):
    """The declared C function, or PosencError(UNSUPPORTED) if the loaded
    library predates it."""
    f = getattr(lib, name, None)
    if f is None:
        raise missing(name)
    return f


def last_error():
    return lib.pe_last_error().decode("utf-8", "replace")


def check(status):
    """Raise PosencError (BusyError for PE_ERR_BUSY) for a non-zero pe_status."""
    if status != 0:
        raise (BusyError if status == Status.ERR_BUSY else PosencError)(status, last_error())


def version():
    return lib.pe_version_string().decode()


def library_path():
    """The file the library was loaded from (resolved through /proc/self/maps
    when the dynamic loader found it by name)."""
    if os.path.sep in _loaded_name:
        return os.path.abspath(_loaded_name)
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[-1].strip()
                if os.path.basename(path).startswith("libposenc.so"):
                    return path
    except OSError:
        pass
    return _loaded_name


_major = int(version().split(".")[0])
if _major != SONAME_MAJOR:
    raise ImportError("posenc: %s is version %s, this binding needs major version %d"
                      % (library_path(), version(), SONAME_MAJOR))


# ---- one base class for the C objects -------------------------------------------

class Handle:
    """A C object, passed to ctypes as itself (_as_parameter_) and to
    posenc._posenc as its address (_ptr, None once closed).

    Owned (the default): Python frees it with the function `_destroy` names,
    at close() (idempotent), at the end of a with block or when collected.
    Borrowed (_set_handle(h, owner=...)): the C object belongs to `owner`,
    another Handle (a ModelRope's layer caches belong to its pe_model_rope).
    A borrowed handle holds a reference to its owner, so the C object lives
    as long as either; it is never destroyed through the borrowed handle -
    its close() and finalizer do nothing - and the owner's side calls
    _release() on it before freeing the C object (see ModelRope.close)."""

    _destroy = None   # "pe_..._destroy", set by the subclass
    _handle = None
    _ptr = None       # the address as an int, for posenc._posenc
    _owner = None     # the Handle a borrowed handle belongs to; None = owned

    def _set_handle(self, handle, owner=None):
        self._handle = handle
        self._ptr = handle.value if isinstance(handle, ctypes.c_void_p) else handle
        self._owner = owner

    @property
    def _as_parameter_(self):
        if self._handle is None:
            raise ValueError("the %s is closed" % type(self).__name__)
        return self._handle

    @property
    def closed(self):
        return self._handle is None

    @property
    def borrowed(self):
        """True if the C object belongs to another object (a ModelRope's
        layer cache): close() leaves it to its owner."""
        return self._owner is not None

    def close(self):
        """Free the C object. Idempotent. A borrowed one is not freed here:
        it is closed with its owner (nothing happens)."""
        if self._owner is not None:
            return
        h, self._handle, self._ptr = self._handle, None, None
        if h is not None:
            getattr(lib, self._destroy)(h)

    def _release(self):
        """The owner's side, before it frees the C object: a borrowed handle
        lets go of it and becomes closed."""
        self._handle = None
        self._ptr = None
        self._owner = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass


# ---- one config.json reader -------------------------------------------------------

def config_text(config):
    """The bytes of a HuggingFace config.json given as a path (or a model
    directory holding config.json), a dict, a transformers PretrainedConfig
    (anything with to_dict()), the JSON text, or bytes."""
    import json
    if isinstance(config, dict):
        return json.dumps(config).encode()
    if isinstance(config, bytes):
        return config
    if isinstance(config, (str, os.PathLike)):
        s = os.fspath(config)
        if isinstance(config, str) and s.lstrip().startswith("{"):
            return s.encode()
        if os.path.isdir(s):
            s = os.path.join(s, "config.json")
        with open(s, "rb") as f:
            return f.read()
    if callable(getattr(config, "to_dict", None)):
        return json.dumps(config.to_dict(), default=str).encode()
    raise TypeError("config must be a path, a dict, a PretrainedConfig or JSON text, got %s"
                    % type(config).__name__)


def config_max_position_embeddings(text):
    """max_position_embeddings of a config.json's text (top level or
    text_config), or None."""
    import json
    try:
        cfg = json.loads(text)
    except ValueError:
        return None
    for c in (cfg, cfg.get("text_config") if isinstance(cfg, dict) else None):
        if isinstance(c, dict) and isinstance(c.get("max_position_embeddings"), int):
            return c["max_position_embeddings"]
    return None


# ---- table rows --------------------------------------------------------------------

import textwrap as _textwrap


def _library_default_max_positions():
    p = RopeParams()
    lib.pe_rope_params_init(ctypes.byref(p))
    return int(p.max_positions)


#: The one default for the rows of a cos/sin table, everywhere in the binding
#: (RopeCache, RopeCache.from_hf_config, ModelRope, posenc.torch): the C
#: library's own (pe_rope_params_init), 4096 rows - rotary_dim * 4 bytes a
#: row, 2 MiB at rotary_dim 128 - and never a config's max_position_embeddings
#: unless asked for (MAX_POSITIONS_FROM_CONFIG): Llama-3.1's 131072 rows are
#: 64 MiB per cache. A position past the table fails the call with
#: PE_ERR_POSITION_OUT_OF_RANGE, nothing written.
DEFAULT_MAX_POSITIONS = _library_default_max_positions()

#: max_positions=MAX_POSITIONS_FROM_CONFIG: one row per position up to the
#: config's max_position_embeddings (the C API's PE_MAX_POSITIONS_FROM_CONFIG).
MAX_POSITIONS_FROM_CONFIG = PE_MAX_POSITIONS_FROM_CONFIG

#: The sentence every max_positions parameter's docstring uses (wrapped
#: for a class docstring's indentation).
MAX_POSITIONS_DOC = _textwrap.fill(
    "rows of the cos/sin table: None = DEFAULT_MAX_POSITIONS (%d, the C "
    "library's default: rotary_dim * 4 bytes a row, %g MiB at rotary_dim 128); "
    "0 = no table (cos/sin computed per token, any position, a little slower); "
    "posenc.MAX_POSITIONS_FROM_CONFIG = the config's max_position_embeddings "
    "(Llama-3.1: 131072 rows, 64 MiB). Set it to the longest context you serve: "
    "a position past the table raises PosencError(ERR_POSITION_OUT_OF_RANGE), "
    "nothing written." % (DEFAULT_MAX_POSITIONS, DEFAULT_MAX_POSITIONS * 128 * 4 / 2**20),
    width=76, initial_indent="    max_positions: ", subsequent_indent="    ").lstrip()


def max_positions_arg(max_positions, config_text=None):
    """max_positions as the C calls take it: None -> DEFAULT_MAX_POSITIONS;
    MAX_POSITIONS_FROM_CONFIG -> the config's max_position_embeddings (with
    config_text; ValueError when it has none), else kept for the C API
    (ModelRope, whose C loader reads it)."""
    if max_positions is None:
        return DEFAULT_MAX_POSITIONS
    import operator
    try:
        mp = operator.index(max_positions)
    except TypeError:
        raise TypeError("max_positions must be an integer or None, got %s"
                        % type(max_positions).__name__) from None
    if mp == MAX_POSITIONS_FROM_CONFIG and config_text is not None:
        m = config_max_position_embeddings(config_text)
        if m is None:
            raise ValueError("max_positions=MAX_POSITIONS_FROM_CONFIG: the config has no "
                             "max_position_embeddings")
        return m
    if not -2**63 <= mp < 2**63:
        raise ValueError("max_positions = %d is outside the int64 range" % mp)
    return mp
