"""RoPE: RopeCache and the in-place rotations."""
import ctypes
import json
import os
import warnings

import numpy as np

from . import _lib
from ._arrays import tensor, int64_grid, ptr, pool_handle, float_vector, int_arg, INT32, INT64

STYLES = {"neox": 0, "gptj": 1}

#: HF rope_type (or legacy "type") -> pe_rope_scaling. "ntk" (static
#: NTK-aware) and "custom" are libposenc's own; "su" is Phi-3's old name
#: for longrope.
SCALINGS = {
    "default": 0, "none": 0, "linear": 1, "ntk": 2, "dynamic": 3, "yarn": 4,
    "longrope": 5, "su": 5, "llama3": 6, "proportional": 7, "custom": 8,
}

# rope_scaling keys -> pe_rope_params float/int fields, copied when present
# and not None.
_FLOAT_KEYS = {
    "factor": "factor", "attention_factor": "attention_factor",
    "beta_fast": "beta_fast", "beta_slow": "beta_slow",
    "mscale": "mscale", "mscale_all_dim": "mscale_all_dim",
    "low_freq_factor": "low_freq_factor", "high_freq_factor": "high_freq_factor",
}
_HANDLED_KEYS = set(_FLOAT_KEYS) | {
    "rope_type", "type", "rope_theta", "partial_rotary_factor",
    "original_max_position_embeddings", "truncate", "short_factor", "long_factor", "inv_freq",
}


def _ref(t):
    return None if t is None else ctypes.byref(t)


def _params_dict(p):
    out = {}
    for name, _ in _lib.RopeParams._fields_:
        if name in ("struct_size", "short_factor", "long_factor", "inv_freq"):
            continue
        out[name] = getattr(p, name)
    out["style"] = {v: k for k, v in STYLES.items()}.get(out["style"], out["style"])
    names = {0: "default", 1: "linear", 2: "ntk", 3: "dynamic", 4: "yarn", 5: "longrope",
             6: "llama3", 7: "proportional", 8: "custom"}
    out["scaling"] = names.get(out["scaling"], out["scaling"])
    return out


class RopeCache:
    """A RoPE frequency set and cos/sin table (pe_rope_cache).

    RopeCache(head_dim=128, rotary_dim=None, style="neox", rope_theta=10000.0,
              max_positions=8192, rope_scaling=None)

    rope_scaling is a HuggingFace rope_scaling / rope_parameters dict:
    {"rope_type" (or "type"): "linear" | "ntk" | "dynamic" | "yarn" |
    "longrope" | "llama3" | "proportional" | "custom", "factor": ...,
    "original_max_position_embeddings": ..., "attention_factor", "beta_fast",
    "beta_slow", "mscale", "mscale_all_dim", "truncate", "low_freq_factor",
    "high_freq_factor", "short_factor"/"long_factor" (lists of rotary_dim/2),
    "inv_freq" (custom), and the v5 keys "rope_theta" and
    "partial_rotary_factor"}. Keys set to None count as absent.

    max_positions: rows of the cos/sin table (0 = none: computed per token,
    any position). seq_len: the context the frequencies serve (dynamic,
    longrope). max_position_embeddings: the model's M, used where HF derives a
    value from it (factor = M / M0 for yarn/longrope without a factor; M0 = M
    when original_max_position_embeddings is missing; dynamic NTK scales
    relative to M). For "dynamic" without it, original_max_position_embeddings
    in the dict stands for M.
    """

    def __init__(self, head_dim=128, rotary_dim=None, style="neox", rope_theta=10000.0,
                 max_positions=8192, rope_scaling=None, *, seq_len=None,
                 max_position_embeddings=None):
        p = _lib.RopeParams()
        _lib.lib.pe_rope_params_init(ctypes.byref(p))
        p.struct_size = ctypes.sizeof(_lib.RopeParams)
        p.head_dim = int_arg(head_dim, "head_dim", *INT32)
        if isinstance(style, str):
            if style.lower() not in STYLES:
                raise ValueError("style %r: expected 'neox' or 'gptj'" % style)
            p.style = STYLES[style.lower()]
        else:
            p.style = int_arg(style, "style", *INT32)
        p.base = float(rope_theta)
        p.max_positions = int_arg(max_positions, "max_positions", *INT64)
        if seq_len is not None:
            p.seq_len = int_arg(seq_len, "seq_len", *INT64)
        keep = []  # arrays the struct points into, alive until create returns
        rd = rotary_dim
        if rope_scaling is not None:
            rd = self._apply_scaling(p, dict(rope_scaling), rd, max_position_embeddings, keep)
        if rd is not None:
            p.rotary_dim = int_arg(rd, "rotary_dim", *INT32)
        handle = ctypes.c_void_p()
        _lib.check(_lib.lib.pe_rope_cache_create(ctypes.byref(p), ctypes.byref(handle)))
        self._init_from_handle(handle)

    @staticmethod
    def _apply_scaling(p, d, rotary_dim, max_pos_emb, keep):
        d = {k: v for k, v in d.items() if v is not None}
        unknown = sorted(set(d) - _HANDLED_KEYS)
        if unknown:
            warnings.warn("posenc.RopeCache: rope_scaling keys ignored: %s" % ", ".join(unknown),
                          stacklevel=3)
        rtype = str(d.get("rope_type", d.get("type", "default"))).lower()
        if rtype not in SCALINGS:
            raise ValueError("rope_scaling type %r: expected one of %s"
                             % (rtype, ", ".join(sorted(SCALINGS))))
        p.scaling = SCALINGS[rtype]
        if "rope_theta" in d:
            p.base = float(d["rope_theta"])
        for key, field in _FLOAT_KEYS.items():
            if key in d:
                setattr(p, field, float(d[key]))
        prf = d.get("partial_rotary_factor")
        if rtype == "proportional" and prf is not None and rotary_dim is None:
            # Gemma-4: every head_dim channel stays in the rotation, pairs past
            # int(prf*head_dim//2) get frequency 0 - not a partial rotary (the
            # pairs are (j, j + head_dim/2)), so custom frequencies on head_dim.
            base = float(d.get("rope_theta", p.base))
            factor = float(d.get("factor", 1.0))
            half = p.head_dim // 2
            n_rot = int(float(prf) * p.head_dim // 2)
            inv = np.zeros(half, np.float64)
            i = np.arange(min(n_rot, half))
            inv[i] = base ** (-(2.0 * i) / p.head_dim) / factor
            keep.append(inv)
            p.scaling = SCALINGS["custom"]
            p.base = base
            p.inv_freq = inv.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
            return p.head_dim
        if prf is not None and rotary_dim is None:
            rotary_dim = int(p.head_dim * float(prf))
        if "truncate" in d:
            p.truncate = 1 if d["truncate"] else 0
        m0 = d.get("original_max_position_embeddings")
        if rtype == "dynamic" and max_pos_emb is not None:
            # HF's dynamic NTK scales relative to M and never reads M0; the
            # library takes that pre-extension context in original_max_positions.
            m0 = max_pos_emb
        elif m0 is None and max_pos_emb is not None and rtype in ("yarn", "longrope", "su",
                                                                  "llama3"):
            m0 = max_pos_emb  # HF: setdefault(original_max_position_embeddings, M)
        if m0 is not None:
            p.original_max_positions = int_arg(m0, "original_max_position_embeddings", *INT64)
        elif rtype in ("dynamic", "yarn", "longrope", "su", "llama3"):
            raise ValueError("rope_scaling %r needs the model's context: pass "
                             "max_position_embeddings=M%s"
                             % (rtype, "" if rtype == "dynamic" else
                                " or original_max_position_embeddings in the dict"))
        if "factor" not in d and rtype in ("yarn", "longrope", "su") and max_pos_emb and m0:
            p.factor = float(max_pos_emb) / float(m0)  # HF: factor defaults to M / M0
        half = (rotary_dim if rotary_dim else p.head_dim) // 2
        for key in ("short_factor", "long_factor"):
            if key in d:
                a = float_vector(d[key], half, "rope_scaling[%r]" % key, np.float32)
                keep.append(a)
                setattr(p, key, a.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        if "inv_freq" in d:
            a = float_vector(d["inv_freq"], half, "rope_scaling['inv_freq']", np.float64)
            keep.append(a)
            p.inv_freq = a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        return rotary_dim

    def _init_from_handle(self, handle):
        self._handle = handle
        p = _lib.RopeParams()
        _lib.lib.pe_rope_params_init(ctypes.byref(p))
        _lib.check(_lib.lib.pe_rope_cache_params(handle, ctypes.byref(p)))
        self._params = _params_dict(p)

    @classmethod
    def from_hf_config(cls, config, max_positions=8192, seq_len=0):
        """A cache from a HuggingFace config.json, as transformers derives it.

        config: a path to config.json (or to a model directory holding one), a
        dict, or the JSON text. max_positions: table rows (0 = on the fly).
        seq_len: the context the frequencies serve; 0 = max_position_embeddings.
        """
        if isinstance(config, dict):
            text = json.dumps(config).encode()
        elif isinstance(config, bytes):
            text = config
        elif isinstance(config, (str, os.PathLike)):
            s = os.fspath(config)
            if isinstance(config, str) and s.lstrip().startswith("{"):
                text = s.encode()
            else:
                if os.path.isdir(s):
                    s = os.path.join(s, "config.json")
                with open(s, "rb") as f:
                    text = f.read()
        else:
            raise TypeError("config must be a path, a dict or JSON text, got %s"
                            % type(config).__name__)
        handle = ctypes.c_void_p()
        _lib.check(_lib.fn("pe_rope_cache_create_from_hf_config")(
            text, len(text), int_arg(max_positions, "max_positions", *INT64),
            int_arg(seq_len or 0, "seq_len", *INT64), ctypes.byref(handle)))
        self = cls.__new__(cls)
        self._init_from_handle(handle)
        return self

    # ---- lifetime ----

    @property
    def _as_parameter_(self):
        if self._handle is None:
            raise ValueError("the RopeCache is closed")
        return self._handle

    def close(self):
        """Free the C cache. Idempotent."""
        h, self._handle = getattr(self, "_handle", None), None
        if h is not None:
            _lib.lib.pe_rope_cache_destroy(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def __repr__(self):
        p = self._params
        return ("<posenc.RopeCache head_dim=%d rotary_dim=%d style=%s scaling=%s base=%g "
                "max_positions=%d>" % (p["head_dim"], p["rotary_dim"], p["style"],
                                       p["scaling"], p["base"], p["max_positions"]))

    # ---- properties ----

    @property
    def params(self):
        """The resolved parameters (defaults applied, rotary_dim filled in)."""
        return dict(self._params)

    head_dim = property(lambda self: self._params["head_dim"])
    rotary_dim = property(lambda self: self._params["rotary_dim"])
    style = property(lambda self: self._params["style"])
    max_positions = property(lambda self: self._params["max_positions"])

    @property
    def inv_freq(self):
        """The rotary_dim/2 frequencies (radians per position), float32."""
        out = np.empty(self.rotary_dim // 2, dtype=np.float32)
        _lib.check(_lib.lib.pe_rope_cache_inv_freq(self._as_parameter_, out.ctypes.data))
        return out

    @property
    def attention_factor(self):
        """The factor cos and sin are multiplied by (YaRN mscale, LongRoPE)."""
        return float(_lib.lib.pe_rope_cache_attention_factor(self._as_parameter_))

    @property
    def softmax_scale(self):
        """Extra multiplier of the attention softmax scale (DeepSeek YaRN), else 1."""
        return float(_lib.lib.pe_rope_cache_softmax_scale(self._as_parameter_))

    def cos_sin(self, position):
        """(cos, sin) for one position, rotary_dim/2 float32 each, already
        multiplied by the attention factor."""
        half = self.rotary_dim // 2
        c, s = np.empty(half, np.float32), np.empty(half, np.float32)
        _lib.check(_lib.lib.pe_rope_cache_cos_sin(
            self._as_parameter_, int_arg(position, "position", *INT64), c.ctypes.data,
            s.ctypes.data))
        return c, s

    # ---- in-place operations ----

    def _check_head_dim(self, arr, name):
        if arr.shape[3] != self.head_dim:
            raise ValueError("%s has head_dim (shape[3]) %d, the cache %d"
                             % (name, arr.shape[3], self.head_dim))

    def apply_(self, q, k=None, positions=None, inverse=False, pool=None, *, dtype=None):
        """Rotate q and/or k in place: numpy [batch, heads, tokens, head_dim]
        arrays of float32, float16 or bfloat16 (uint16 with dtype='bf16'),
        any strides with a contiguous last dimension. k may have fewer heads
        (GQA). positions: int [batch, tokens] or [tokens], None = 0..tokens-1.
        inverse=True rotates by -angle."""
        if q is None and k is None:
            raise ValueError("apply_: q and k cannot both be None")
        tq = tensor(q, "q", dtype=dtype) if q is not None else None
        tk = tensor(k, "k", dtype=dtype) if k is not None else None
        for arr, name in ((q, "q"), (k, "k")):
            if arr is not None:
                self._check_head_dim(arr, name)
        if q is not None and k is not None and (q.shape[0], q.shape[2]) != (k.shape[0], k.shape[2]):
            raise ValueError("q %s and k %s differ in batch or tokens" % (q.shape, k.shape))
        ref = q if q is not None else k
        pos = int64_grid(positions, ref.shape[0], ref.shape[2], "positions")
        flags = _lib.PE_ROPE_INVERSE if inverse else 0
        _lib.check(_lib.lib.pe_apply_rope_qk(
            self._as_parameter_, _ref(tq), _ref(tk), ptr(pos),
            flags, pool_handle(pool)))

    def shift_k_(self, k, deltas, pool=None, *, dtype=None):
        """Move rotated keys by a position delta in place (KV-cache context
        shift): afterwards k is as if rotated at p + delta. deltas: one int,
        [tokens] or [batch, tokens]; may be negative."""
        tk = tensor(k, "k", dtype=dtype)
        self._check_head_dim(k, "k")
        d = int64_grid(deltas, k.shape[0], k.shape[2], "deltas", scalar_ok=True)
        if d is None:
            raise ValueError("shift_k_: deltas is required")
        _lib.check(_lib.lib.pe_rope_shift_k(self._as_parameter_, ctypes.byref(tk), ptr(d),
                                            pool_handle(pool)))

    @staticmethod
    def rerotate_k_(from_cache, to_cache, k, positions=None, pool=None, *, dtype=None):
        """Re-rotate keys rotated by from_cache at positions as if rotated by
        to_cache (LongRoPE short->long, dynamic-NTK growth), in place."""
        for c, name in ((from_cache, "from_cache"), (to_cache, "to_cache")):
            if not isinstance(c, RopeCache):
                raise TypeError("%s must be a RopeCache" % name)
        tk = tensor(k, "k", dtype=dtype)
        from_cache._check_head_dim(k, "k")
        pos = int64_grid(positions, k.shape[0], k.shape[2], "positions")
        _lib.check(_lib.lib.pe_rope_rerotate_k(from_cache._as_parameter_, to_cache._as_parameter_,
                                               ctypes.byref(tk), ptr(pos), pool_handle(pool)))


rerotate_k_ = RopeCache.rerotate_k_
