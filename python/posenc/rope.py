"""RoPE: RopeCache and the in-place rotations."""
import ctypes
import json
import math
import warnings

import numpy as np

from . import _lib
from ._arrays import (tensor, disjoint, int64_grid, float_vector, int_arg, swap12,
                      mismatch_hint, BHTD, BTHD, INT32, INT64)
from ._ext import ext

_INVERSE = _lib.PE_ROPE_INVERSE
#: How a caller of the numpy-shaped functions passes [B, T, H, D] arrays.
_HOW_BTHD = ("pass views in [batch, heads, tokens, head_dim] order (numpy .transpose(0, 2, 1, "
             "3), torch .transpose(1, 2): no copy)")

STYLES = {"neox": 0, "gptj": 1}

#: pe_rope_scaling values, by the names RopeCache accepts. The HF rope types
#: (default, linear, dynamic, yarn, longrope/su, llama3, proportional) are
#: read by the library's config.json loader; "ntk" (static NTK-aware) and
#: "custom" (your own inv_freq) are libposenc's own and set the fields directly.
SCALINGS = {
    "default": 0, "none": 0, "linear": 1, "ntk": 2, "dynamic": 3, "yarn": 4,
    "longrope": 5, "su": 5, "llama3": 6, "proportional": 7, "custom": 8,
}
_SCALING_NAMES = {0: "default", 1: "linear", 2: "ntk", 3: "dynamic", 4: "yarn", 5: "longrope",
                  6: "llama3", 7: "proportional", 8: "custom"}
_OWN_TYPES = ("ntk", "custom")

#: rope_scaling keys the library's loader reads (others are ignored, with a warning).
_LOADER_KEYS = {
    "rope_type", "type", "rope_theta", "partial_rotary_factor", "factor",
    "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale",
    "mscale_all_dim", "truncate", "low_freq_factor", "high_freq_factor", "short_factor",
    "long_factor", "mrope_section", "mrope_interleaved",
}
_OWN_KEYS = {"rope_type", "type", "factor", "inv_freq", "rope_theta"}


def _params_dict(p, handle):
    out = {}
    for name, _ in _lib.RopeParams._fields_:
        if name in ("struct_size", "short_factor", "long_factor", "inv_freq"):
            continue
        out[name] = getattr(p, name)
    out["style"] = {v: k for k, v in STYLES.items()}.get(out["style"], out["style"])
    out["scaling"] = _SCALING_NAMES.get(out["scaling"], out["scaling"])
    # The resolved factors (YaRN's 0.1*ln(s)+1, LongRoPE's), not the 0 = "derive
    # it" the parameters hold.
    out["attention_factor"] = float(_lib.lib.pe_rope_cache_attention_factor(handle))
    out["softmax_scale"] = float(_lib.lib.pe_rope_cache_softmax_scale(handle))
    return out


def _jsonable(v, key):
    if hasattr(v, "tolist"):            # numpy arrays and scalars, torch tensors
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        return [_jsonable(x, key) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError("rope_scaling[%r] = %r is not finite" % (key, v))
    return v


def _prf_for(rotary_dim, head_dim):
    """A partial_rotary_factor whose int(head_dim * prf) is rotary_dim in
    double arithmetic, the loader's (and transformers') rule."""
    prf = rotary_dim / head_dim
    while int(head_dim * prf) < rotary_dim:
        prf = math.nextafter(prf, 2.0)
    return prf


def rope_config(head_dim, rotary_dim, style, rope_theta, rope_scaling, max_position_embeddings):
    """The config.json (a dict) that gives RopeCache's keyword arguments to
    the library's loader (pe_rope_cache_create_from_hf_config). model_type
    selects the pairing: "gptj" (interleaved, with its rotary_dim key),
    "gpt_neox" (half split, partial rotary) or "llama" (half split)."""
    d = {k: _jsonable(v, k) for k, v in rope_scaling.items() if v is not None}
    rtype = str(d.get("rope_type", d.get("type", "default"))).lower()
    # head_dim three ways (head_dim; hidden_size / heads; GPT-J's n_embd / n_head),
    # so that whichever the loader reads for the model type, it is head_dim.
    cfg = {"head_dim": head_dim, "hidden_size": head_dim, "num_attention_heads": 1,
           "n_embd": head_dim, "n_head": 1, "rope_theta": float(rope_theta)}
    if max_position_embeddings is not None:
        cfg["max_position_embeddings"] = max_position_embeddings
    elif rtype == "dynamic" and d.get("original_max_position_embeddings") is not None:
        # Without M, the dict's M0 stands for the context dynamic NTK scales from.
        cfg["max_position_embeddings"] = d["original_max_position_embeddings"]
    if rotary_dim is not None and rtype != "proportional":
        d.pop("partial_rotary_factor", None)
    if style == STYLES["gptj"]:
        cfg["model_type"] = "gptj"
        if rotary_dim is None and "partial_rotary_factor" in d:
            rotary_dim = int(head_dim * float(d.pop("partial_rotary_factor")))
        cfg["rotary_dim"] = head_dim if rotary_dim is None else rotary_dim
    elif (rotary_dim is not None and rotary_dim != head_dim) or "partial_rotary_factor" in d:
        cfg["model_type"] = "gpt_neox"   # a model type that applies the partial factor
        if rotary_dim is not None and rotary_dim != head_dim:
            cfg["partial_rotary_factor"] = cfg["rotary_pct"] = _prf_for(rotary_dim, head_dim)
    else:
        cfg["model_type"] = "llama"
    cfg["rope_scaling"] = d
    return cfg


class RopeCache(_lib.Handle):
    __doc__ = """A RoPE frequency set and cos/sin table (pe_rope_cache).

    RopeCache(head_dim=128, rotary_dim=None, style="neox", rope_theta=10000.0,
              max_positions=None, rope_scaling=None)

    rope_scaling is a HuggingFace rope_scaling / rope_parameters dict:
    {"rope_type" (or "type"): "linear" | "dynamic" | "yarn" | "longrope" |
    "llama3" | "proportional", "factor": ..., "original_max_position_embeddings",
    "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
    "truncate", "low_freq_factor", "high_freq_factor", "short_factor" /
    "long_factor" (lists of rotary_dim/2), and the v5 keys "rope_theta" and
    "partial_rotary_factor"}; keys set to None count as absent. These are
    read by the library's own config.json loader (the arguments become a
    config.json), so RopeCache(rope_scaling=...) and from_hf_config() give
    the same numbers by construction. libposenc's own types: {"rope_type":
    "ntk", "factor": s} (static NTK-aware) and {"rope_type": "custom",
    "inv_freq": rotary_dim/2 frequencies}.

    %s

    max_position_embeddings: the model's M (config.json's
    max_position_embeddings), used where transformers derives a value from
    it (factor = M / M0 for yarn/longrope without a factor; M0 = M when
    original_max_position_embeddings is missing; dynamic NTK scales relative
    to M). For "dynamic" without it, original_max_position_embeddings in the
    dict stands for M. seq_len: the context the frequencies serve (dynamic,
    longrope); None = as transformers initialises them (dynamic: M; longrope:
    the short factors).
    """ % _lib.MAX_POSITIONS_DOC

    _destroy = "pe_rope_cache_destroy"

    def __init__(self, head_dim=128, rotary_dim=None, style="neox", rope_theta=10000.0,
                 max_positions=None, rope_scaling=None, *, seq_len=None,
                 max_position_embeddings=None):
        hd = int_arg(head_dim, "head_dim", *INT32)
        if hd < 2 or hd % 2:
            raise ValueError("RopeCache: head_dim %d must be even and >= 2 (RoPE rotates pairs "
                             "of channels)" % hd)
        rd = None
        if rotary_dim is not None:
            rd = int_arg(rotary_dim, "rotary_dim", *INT32)
            if rd < 2 or rd % 2 or rd > hd:
                raise ValueError("RopeCache: rotary_dim %d must be even and in [2, head_dim %d]"
                                 % (rd, hd))
        if isinstance(style, str):
            if style.lower() not in STYLES:
                raise ValueError("style %r: expected 'neox' or 'gptj'" % style)
            st = STYLES[style.lower()]
        else:
            st = int_arg(style, "style", *INT32)
            if st not in STYLES.values():
                raise ValueError("style %d: expected 0 (neox) or 1 (gptj)" % st)
        base = float(rope_theta)
        mp = _lib.max_positions_arg(max_positions)
        sl = None if seq_len is None else int_arg(seq_len, "seq_len", 0, INT64[1])
        m = None if max_position_embeddings is None else \
            int_arg(max_position_embeddings, "max_position_embeddings", 1, 2**53)
        if rope_scaling is not None and not isinstance(rope_scaling, dict):
            raise TypeError("rope_scaling must be a dict or None, got %s"
                            % type(rope_scaling).__name__)
        d = {k: v for k, v in (rope_scaling or {}).items() if v is not None}
        rtype = str(d.get("rope_type", d.get("type", "default"))).lower()
        if rtype not in SCALINGS:
            raise ValueError("rope_scaling type %r: expected one of %s"
                             % (rtype, ", ".join(sorted(SCALINGS))))
        unknown = sorted(set(d) - (_OWN_KEYS if rtype in _OWN_TYPES else _LOADER_KEYS))
        if unknown:
            warnings.warn("posenc.RopeCache: rope_scaling keys ignored: %s" % ", ".join(unknown),
                          stacklevel=2)
        handle = ctypes.c_void_p()
        if not d or rtype in _OWN_TYPES:
            self._create(hd, rd, st, float(d.get("rope_theta", base)), mp, sl, rtype, d, handle)
        else:
            if rtype in ("yarn", "longrope", "su", "llama3") and m is None and \
                    d.get("original_max_position_embeddings") is None:
                raise ValueError("rope_scaling %r needs the model's context: pass "
                                 "max_position_embeddings=M or original_max_position_embeddings "
                                 "in the dict" % rtype)
            if rtype == "dynamic" and m is None and \
                    d.get("original_max_position_embeddings") is None:
                raise ValueError("rope_scaling 'dynamic' needs the model's context: pass "
                                 "max_position_embeddings=M")
            if sl is None and rtype in ("longrope", "su"):
                # transformers initialises LongRoPE with seq_len None: the short
                # factors; the loader's 0 would mean M (the long ones).
                sl = d.get("original_max_position_embeddings") or m
            text = json.dumps(rope_config(hd, rd, st, base, d, m)).encode()
            try:
                _lib.check(_lib.fn("pe_rope_cache_create_from_hf_config")(
                    text, len(text), mp, sl or 0, 0, ctypes.byref(handle)))
            except _lib.PosencError as e:
                raise type(e)(e.status, "RopeCache(rope_scaling=%s): %s"
                              % (json.dumps(d), e.message)) from None
        self._init_from_handle(handle)

    @staticmethod
    def _create(hd, rd, st, base, mp, sl, rtype, d, handle):
        p = _lib.RopeParams()
        _lib.lib.pe_rope_params_init(ctypes.byref(p))
        p.struct_size = ctypes.sizeof(_lib.RopeParams)
        p.head_dim, p.style, p.base, p.max_positions = hd, st, base, mp
        if rd is not None:
            p.rotary_dim = rd
        if sl is not None:
            p.seq_len = sl
        p.scaling = SCALINGS[rtype]
        keep = None
        if "factor" in d:
            p.factor = float(d["factor"])
        if rtype == "custom":
            if "inv_freq" not in d:
                raise ValueError("rope_scaling 'custom' needs inv_freq (rotary_dim/2 frequencies)")
            keep = float_vector(d["inv_freq"], (rd or hd) // 2, "rope_scaling['inv_freq']",
                                np.float64)
            p.inv_freq = keep.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        _lib.check(_lib.lib.pe_rope_cache_create(ctypes.byref(p), ctypes.byref(handle)))

    def _init_from_handle(self, handle, owner=None):
        self._set_handle(handle, owner)
        p = _lib.RopeParams()
        _lib.lib.pe_rope_params_init(ctypes.byref(p))
        _lib.check(_lib.lib.pe_rope_cache_params(handle, ctypes.byref(p)))
        self._params = _params_dict(p, handle)

    @classmethod
    def _borrowed(cls, handle, owner):
        """A cache over a C cache that `owner` (a Handle) owns: keeps owner
        alive, never destroys the cache (ModelRope's layers)."""
        self = cls.__new__(cls)
        self._init_from_handle(handle, owner)
        return self

    @classmethod
    def from_hf_config(cls, config, max_positions=None, seq_len=0, guess=False):
        """A cache from a HuggingFace config.json, as transformers derives it
        (the library's loader, pe_rope_cache_create_from_hf_config).

        config: a path to config.json (or to a model directory holding one), a
        dict, a transformers PretrainedConfig, or the JSON text / bytes.
        max_positions: table rows, as RopeCache() takes them: None =
        posenc.DEFAULT_MAX_POSITIONS (4096), not the config's
        max_position_embeddings unless you pass posenc.MAX_POSITIONS_FROM_CONFIG.
        seq_len: the context the frequencies serve; 0 = max_position_embeddings.
        A model whose layers differ (Gemma 2/3, ModernBERT, Cohere2, Llama 4,
        EXAONE 4, ...) is refused with PosencError(UNSUPPORTED) naming the C
        per-layer loader: load it with posenc.ModelRope.from_hf_config.
        guess: load a model_type that is not in the library's table
        (PE_CONFIG_GUESS: half-split pairs, the file's partial factor); without
        it such a config is refused naming its model_type.
        """
        text = _lib.config_text(config)
        handle = ctypes.c_void_p()
        _lib.check(_lib.fn("pe_rope_cache_create_from_hf_config")(
            text, len(text), _lib.max_positions_arg(max_positions, text),
            int_arg(seq_len or 0, "seq_len", *INT64), _lib.PE_CONFIG_GUESS if guess else 0,
            ctypes.byref(handle)))
        self = cls.__new__(cls)
        self._init_from_handle(handle)
        return self

    def __repr__(self):
        if self.closed:
            return "<posenc.RopeCache closed>"
        p = self._params
        return ("<posenc.RopeCache head_dim=%d rotary_dim=%d style=%s scaling=%s base=%g "
                "max_positions=%d>" % (p["head_dim"], p["rotary_dim"], p["style"],
                                       p["scaling"], p["base"], p["max_positions"]))

    # ---- properties ----

    @property
    def params(self):
        """The resolved parameters (defaults applied, rotary_dim filled in,
        attention_factor and softmax_scale as the cache applies them)."""
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

    def _check_head_dim(self, view, name):
        if view.shape[3] != self.head_dim:
            raise ValueError("%s has head_dim (shape[3]) %d, the cache %d"
                             % (name, view.shape[3], self.head_dim))

    def _qk(self, q, k, dtype, k_writable=True, bthd=False, how_other=_HOW_BTHD):
        """Views of q and k (either may be None), checked against the cache
        and each other; returns (vq, vk, batch, tokens). bthd: q and k are
        [batch, tokens, heads, head_dim] (posenc.torch's unsqueeze_dim=2).
        how_other: how the caller passes the other layout, for the message
        about q and k that differ in batch or tokens but would fit as it."""
        if q is None and k is None:
            raise ValueError("q and k cannot both be None")
        vq = tensor(swap12(q) if bthd else q, "q", dtype=dtype) if q is not None else None
        vk = tensor(swap12(k) if bthd else k, "k", dtype=dtype, writable=k_writable) \
            if k is not None else None
        for v, name in ((vq, "q"), (vk, "k")):
            if v is not None:
                self._check_head_dim(v, name)
        if vq is not None and vk is not None and \
                (vq.shape[0], vq.shape[2]) != (vk.shape[0], vk.shape[2]):
            qs, ks = tuple(q.shape), tuple(k.shape)
            raise ValueError("q %s and k %s differ in batch or tokens as %s%s"
                             % (qs, ks, BTHD if bthd else BHTD,
                                mismatch_hint(qs, ks, not bthd, how_other)))
        disjoint(("q", vq), ("k", vk))
        v = vq if vq is not None else vk
        return vq, vk, v.shape[0], v.shape[2]

    def _check_apply(self, q, k, positions, dtype, bthd=False, how_other=_HOW_BTHD):
        """The binding's checks of apply_'s arguments (run when the library
        refuses the call, so that the argument at fault is named)."""
        _, _, batch, tokens = self._qk(q, k, dtype, bthd=bthd, how_other=how_other)
        int64_grid(positions, batch, tokens, "positions")

    def apply_(self, q, k=None, positions=None, inverse=False, pool=None, *, dtype=None):
        """Rotate q and/or k in place: [batch, heads, tokens, head_dim] numpy
        arrays or CPU torch tensors of float32, float16 or bfloat16 (numpy:
        uint16 with dtype='bf16'), any strides with a contiguous last
        dimension (a [B, T, H, D] buffer's .transpose(1, 2) view, q and k
        slices of one packed QKV buffer). k may have fewer heads (GQA).
        positions: int [batch, tokens], [1, tokens] or [tokens] (numpy, list
        or torch), None = 0..tokens-1. inverse=True rotates by -angle.
        Returns (q, k), the same objects."""
        try:
            ext.apply_rope_qk(self, q, k, positions, _INVERSE if inverse else 0, pool, dtype, 0)
        except _lib.PosencError:
            self._check_apply(q, k, positions, dtype)
            raise
        return q, k

    def shift_k_(self, k, deltas, pool=None, *, dtype=None):
        """Move rotated keys by a position delta in place (KV-cache context
        shift): afterwards k is as if rotated at p + delta. deltas: one int,
        [tokens] or [batch, tokens]; may be negative."""
        if deltas is None:
            raise ValueError("shift_k_: deltas is required")
        try:
            ext.rope_shift_k(self, k, deltas, pool, dtype)
        except _lib.PosencError:
            vk = tensor(k, "k", dtype=dtype)
            self._check_head_dim(vk, "k")
            raise
        return k

    @staticmethod
    def rerotate_k_(from_cache, to_cache, k, positions=None, pool=None, *, dtype=None):
        """Re-rotate keys rotated by from_cache at positions as if rotated by
        to_cache (LongRoPE short->long, dynamic-NTK growth), in place."""
        for c, name in ((from_cache, "from_cache"), (to_cache, "to_cache")):
            if not isinstance(c, RopeCache):
                raise TypeError("%s must be a RopeCache" % name)
        try:
            ext.rope_rerotate_k(from_cache, to_cache, k, positions, pool, dtype)
        except _lib.PosencError:
            from_cache._check_head_dim(tensor(k, "k", dtype=dtype), "k")
            raise
        return k


rerotate_k_ = RopeCache.rerotate_k_
