"""ModelRope: the RoPE of every layer of a model, from its config.json
(pe_model_rope)."""
import collections
import ctypes

import numpy as np

from . import _lib
from ._arrays import int_arg, INT32, INT64
from .rope import RopeCache

__all__ = ["ModelRope", "Heads", "NopeTemperature", "SharedCache", "RopeSlice", "QKNorm",
           "slice_view", "ROLE_ATTENTION", "ROLE_INDEXER", "ROLE_COMPRESSOR", "ROLES"]

#: The rotations of one layer (pe_rope_role): the attention's q and k; the
#: sparse-attention indexer's q and k (DeepSeek-V3.2, GLM-5, DeepSeek-V4's
#: CSA layers); DeepSeek-V4's compressed KV entries (no query).
ROLE_ATTENTION = _lib.PE_ROPE_ROLE_ATTENTION
ROLE_INDEXER = _lib.PE_ROPE_ROLE_INDEXER
ROLE_COMPRESSOR = _lib.PE_ROPE_ROLE_COMPRESSOR
ROLES = {"attention": ROLE_ATTENTION, "indexer": ROLE_INDEXER, "compressor": ROLE_COMPRESSOR}
_ROLE_NAMES = {v: k for k, v in ROLES.items()}

#: pe_model_rope_heads: the config's query and key/value head counts (0 when
#: the config has none).
Heads = collections.namedtuple("Heads", "num_attention_heads num_key_value_heads")

#: One distinct cache of a model and the layers (0-based, ascending) that use it.
SharedCache = collections.namedtuple("SharedCache", "cache layers")


class NopeTemperature(collections.namedtuple("NopeTemperature", "floor_scale attn_scale")):
    """Llama 4's attention temperature tuning of one layer
    (pe_model_rope_nope_temperature): on a NoPE layer with
    attn_temperature_tuning, the engine multiplies each query at position p
    by log1p(floor((p + 1) / floor_scale)) * attn_scale + 1 before the
    attention scores (transformers' Llama4TextAttention). Every other layer
    has floor_scale 1 and attn_scale 0: the multiplier is 1."""

    __slots__ = ()

    def multiplier(self, positions):
        """The query multiplier at each position (float64, the shape of
        positions)."""
        p = np.asarray(positions, dtype=np.float64)
        return np.log1p(np.floor((p + 1.0) / self.floor_scale)) * self.attn_scale + 1.0


def slice_view(x, offset, width):
    """x[..., offset:offset + width]: the channels a rotation covers, as a
    view of x (numpy array or torch tensor: the same memory, last dimension
    still contiguous) to pass to RopeCache.apply_ & co. - the C API's
    "data = head + offset elements, shape[3] = the cache's head_dim". width
    may be a RopeCache (its head_dim). ValueError when the span does not fit
    in x's last dimension."""
    if isinstance(width, RopeCache):
        width = width.head_dim
    off = int_arg(offset, "offset", *INT32)
    w = int_arg(width, "width", *INT32)
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) < 1:
        raise TypeError("slice_view: x must be a numpy array or a torch tensor, got %s"
                        % type(x).__name__)
    n = int(shape[-1])
    if off < 0 or w < 1 or off + w > n:
        raise ValueError("slice_view: channels [%d, %d + %d) are outside the last dimension of "
                         "%d" % (off, off, w, n))
    return x[..., off:off + w]


class RopeSlice(collections.namedtuple(
        "RopeSlice", "q_head_dim q_offset k_head_dim k_offset rotary_dim flags")):
    """Where one rotation of a layer sits (pe_rope_slice): a q head has
    q_head_dim channels, rotated on [q_offset, q_offset + span); a k row
    k_head_dim channels, rotated on [k_offset, k_offset + span) - span being
    the cache's head_dim, of which the first rotary_dim channels rotate.
    q_head_dim 0: the role has no query (DeepSeek-V4's compressor);
    rotary_dim 0: the layer has no such rotation (every field 0). flags:
    PE_SLICE_DEROTATE_OUTPUT (.derotate_output)."""

    __slots__ = ()

    @property
    def derotate_output(self):
        """True when the model rotates its attention output back on the
        span (DeepSeek-V4: k = v, so v's span carries the keys' rotation):
        posenc.torch.derotate_output_, or RopeCache.apply_(..., inverse=True)
        on q_view(o, cache)."""
        return bool(self.flags & _lib.PE_SLICE_DEROTATE_OUTPUT)

    def _view(self, x, cache, dim, offset, what):
        if not self.rotary_dim:
            raise ValueError("RopeSlice.%s_view: the layer has no such rotation" % what)
        if what == "q" and not dim:
            raise ValueError("RopeSlice.q_view: this rotation has no query (k only)")
        shape = getattr(x, "shape", None)
        if shape is not None and len(shape) and int(shape[-1]) != dim:
            raise ValueError("RopeSlice.%s_view: %s's last dimension is %d, the model's %s has %d "
                             "channels" % (what, what, int(shape[-1]),
                                           "q head" if what == "q" else "k row", dim))
        return slice_view(x, offset, cache)

    def q_view(self, q, cache):
        """q[..., q_offset:q_offset + cache.head_dim], a view (q's last
        dimension must be q_head_dim)."""
        return self._view(q, cache, self.q_head_dim, self.q_offset, "q")

    def k_view(self, k, cache):
        """k[..., k_offset:k_offset + cache.head_dim], a view (k's last
        dimension must be k_head_dim)."""
        return self._view(k, cache, self.k_head_dim, self.k_offset, "k")


#: The QK-norm a rotation applies first (pe_model_rope_layer_qk_norm), in
#: the names qk_norm_rope_ takes: kind "none" | "rms" | "rms_unit_offset" |
#: "l2", scope "head" | "token", eps (the float32 value the library holds).
#: The weights are the model's own: qk_norm_rope_(cache, q, k, **n._asdict(),
#: q_weight=..., k_weight=...).
QKNorm = collections.namedtuple("QKNorm", "kind scope eps")


class _ModelHandle(_lib.Handle):
    """The pe_model_rope itself. The layer caches borrow from it (each holds
    a reference), so it outlives the ModelRope while a layer cache is kept."""

    _destroy = "pe_model_rope_destroy"


def _ranges(layers):
    """[0, 1, 2, 4, 6, 7] -> "0-2, 4, 6-7"."""
    out, i = [], 0
    while i < len(layers):
        j = i
        while j + 1 < len(layers) and layers[j + 1] == layers[j] + 1:
            j += 1
        out.append(str(layers[i]) if i == j else "%d-%d" % (layers[i], layers[j]))
        i = j + 1
    return ", ".join(out)


class ModelRope:
    """The RoPE of every layer of a model, as transformers builds it from the
    model's config.json (the library's pe_model_rope_from_hf_config).

        m = posenc.ModelRope.from_hf_config("gemma-3-1b-it/config.json")
        len(m)            # 26 layers
        m.layer(0)        # RopeCache: default rope, base 10000 (local layer)
        m.layer(5)        # RopeCache: base 1e6 (global layer)
        m.layer(3)        # None on a layer without RoPE (Cohere2, Llama 4, ...)

    Layers whose parameters are equal share one RopeCache object:
    m.layer(0) is m.layer(4). The layer caches belong to the model
    (RopeCache.borrowed is True): each keeps the C model alive, so a layer
    cache kept after the ModelRope is dropped stays valid, and its own
    close() does nothing. ModelRope.close() (or the end of a with block)
    frees the model now and closes every layer cache with it (using one
    afterwards raises ValueError). Immutable: threads may share it.

    The configs covered (Gemma 2/3/3n, ModernBERT, Cohere2, Llama 4, EXAONE 4,
    Qwen3-Next, gpt-oss, transformers v5 rope_parameters per layer type,
    vision-language text_config, and every one-cache model) are those of
    pe_model_rope_from_hf_config in include/posenc.h.
    """

    def __init__(self, config, max_positions=None, seq_len=0, guess=False):
        """See from_hf_config."""
        text = _lib.config_text(config)
        mp = _lib.max_positions_arg(max_positions)
        sl = int_arg(seq_len or 0, "seq_len", *INT64)
        handle = ctypes.c_void_p()
        _lib.check(_lib.fn("pe_model_rope_from_hf_config")(
            text, len(text), mp, sl, _lib.PE_CONFIG_GUESS if guess else 0, ctypes.byref(handle)))
        model = _ModelHandle()
        model._set_handle(handle)
        self._model = model
        n = int(_lib.lib.pe_model_rope_num_layers(model))
        # One RopeCache per distinct C cache, whichever layers and roles use
        # it (DeepSeek-V4's compressor rotates with its attention's cache).
        by_address = {}

        def cache_at(h):
            if h is None:
                return None
            if h not in by_address:
                by_address[h] = RopeCache._borrowed(ctypes.c_void_p(h), model)
            return by_address[h]

        with_roles = _lib.has_symbol("pe_model_rope_layer_role")
        roles = {}
        for role in ROLES.values():
            if role != ROLE_ATTENTION and not with_roles:
                roles[role] = None   # an older library: no roles to report
                continue
            roles[role] = tuple(
                cache_at(_lib.lib.pe_model_rope_layer(model, i) if role == ROLE_ATTENTION
                         else _lib.lib.pe_model_rope_layer_role(model, i, role))
                for i in range(n))
        self._roles = roles
        self._layers = roles[ROLE_ATTENTION]
        self._all_caches = tuple(by_address.values())
        shared = {}
        for i, c in enumerate(self._layers):
            if c is not None:
                shared.setdefault(id(c), (c, []))[1].append(i)
        self._shared = tuple(SharedCache(c, tuple(u)) for c, u in shared.values())
        self._pairing_guessed = bool(_lib.lib.pe_model_rope_pairing_guessed(model))
        h, kv = ctypes.c_int32(), ctypes.c_int32()
        _lib.check(_lib.lib.pe_model_rope_heads(model, ctypes.byref(h), ctypes.byref(kv)))
        self._heads = Heads(h.value, kv.value)

    @classmethod
    def from_hf_config(cls, config, max_positions=None, seq_len=0, guess=False):
        """Every layer's RoPE from a HuggingFace config.json.

        config: a path to config.json (or to a model directory holding one), a
        dict, a transformers PretrainedConfig, or the JSON text / bytes - what
        RopeCache.from_hf_config accepts.
        max_positions: the table rows of every cache, as RopeCache takes
        them: None = posenc.DEFAULT_MAX_POSITIONS (4096, 2 MiB a cache at
        rotary_dim 128), 0 = computed per token (any position),
        posenc.MAX_POSITIONS_FROM_CONFIG = the config's
        max_position_embeddings (PosencError(PARSE) if it has none; mind long
        contexts: Llama-4-Scout's 10485760 positions are 5 GiB of table).
        seq_len: the context the frequencies serve (dynamic, longrope); 0 =
        max_position_embeddings.
        A config the library cannot use raises PosencError with its message
        (which names the key and the values).
        """
        return cls(config, max_positions=max_positions, seq_len=seq_len, guess=guess)

    # ---- layers ----

    def _index(self, layer, what):
        i = int_arg(layer, "layer", *INT32)
        if not 0 <= i < len(self._layers):
            raise IndexError("ModelRope.%s: layer %d is outside [0, %d)"
                             % (what, i, len(self._layers)))
        return i

    def _check_open(self):
        if self._model.closed:
            raise ValueError("the ModelRope is closed")

    @property
    def num_layers(self):
        """The number of layers (num_hidden_layers, or the config class's default)."""
        return len(self._layers)

    def __len__(self):
        return len(self._layers)

    def _role(self, role, what):
        """A role's number from a posenc.ROLE_* value or its name."""
        if isinstance(role, str):
            r = ROLES.get(role)
        else:
            r = int_arg(role, "role", *INT32)
        if r not in self._roles:
            raise ValueError("ModelRope.%s: role %r is not one of posenc.ROLE_ATTENTION (0), "
                             "ROLE_INDEXER (1), ROLE_COMPRESSOR (2) or their names %s"
                             % (what, role, ", ".join(ROLES)))
        if self._roles[r] is None:
            raise _lib.missing("pe_model_rope_layer_role")
        return r

    def layer(self, layer, role=ROLE_ATTENTION):
        """The RopeCache that rotation `role` of layer `layer` (0-based)
        uses, or None for a layer without it (NoPE attention, linear
        attention; a model without an indexer; a GLM-5 layer whose indexer
        is "shared"; a sliding DeepSeek-V4 layer's compressor).
        role: posenc.ROLE_ATTENTION (the default: q and k of the attention),
        ROLE_INDEXER or ROLE_COMPRESSOR, or their names "attention",
        "indexer", "compressor". Layers and roles with equal parameters get
        the same object (DeepSeek-V4's compressor and indexer use their
        attention's cache; DeepSeek-V3.2's indexer pairs differently and has
        its own). IndexError outside [0, num_layers)."""
        self._check_open()
        i = self._index(layer, "layer")
        return self._roles[self._role(role, "layer")][i]

    def slice(self, layer, role=ROLE_ATTENTION):
        """RopeSlice: where rotation `role` of layer `layer` sits in the
        model's q heads and k rows (pe_model_rope_layer_slice): DeepSeek-V3's
        MLA q head 192 with the rope at 128, its kv row 576 with k_pe at 512;
        DeepSeek-V4 the last 64 of 512 (output de-rotated); the whole head
        for GQA models. Every field 0 for a layer without that rotation.
        .q_view(q, cache) / .k_view(k, cache) give the views to rotate."""
        self._check_open()
        i = self._index(layer, "slice")
        r = self._role(role, "slice")
        out = _lib.RopeSlice()
        _lib.fn("pe_rope_slice_init")(ctypes.byref(out))
        _lib.check(_lib.fn("pe_model_rope_layer_slice")(self._model, i, r, ctypes.byref(out)))
        return RopeSlice(out.q_head_dim, out.q_offset, out.k_head_dim, out.k_offset,
                         out.rotary_dim, out.flags)

    def qk_norm(self, layer, role=ROLE_ATTENTION):
        """QKNorm(kind, scope, eps): the QK-norm rotation `role` of layer
        `layer` applies before it rotates (pe_model_rope_layer_qk_norm), in
        the names posenc.qk_norm_rope_ takes; kind "none" for a layer or
        role without one. eps is the config's (rms_norm_eps or the model's
        key), its config class's default when the config has none; a value
        that cannot be one raises PosencError(ERR_PARSE) naming it. The
        weights are the checkpoint's. A norm the library does not compute
        (a mean-subtracting LayerNorm: Cohere, Phi, StableLM, the
        DeepSeek-V3.2 / GLM-5 indexer's k_norm; a norm it has not read)
        raises PosencError(ERR_UNSUPPORTED) with the library's sentence
        naming it - never reported as none."""
        from .qk_norm import KINDS, SCOPES
        self._check_open()
        i = self._index(layer, "qk_norm")
        r = self._role(role, "qk_norm")
        out = _lib.QKNorm()
        _lib.fn("pe_qk_norm_init")(ctypes.byref(out))
        _lib.check(_lib.fn("pe_model_rope_layer_qk_norm")(self._model, i, r, ctypes.byref(out)))
        kinds = {v: k for k, v in KINDS.items()}
        scopes = {v: k for k, v in SCOPES.items()}
        return QKNorm(kinds.get(out.kind, out.kind), scopes.get(out.scope, out.scope),
                      float(out.eps))

    @property
    def latent_norm_eps(self):
        """The epsilon of a multi-head latent attention's kv latent RMSNorm
        (kv_a_layernorm: transformers builds it with its RMSNorm default
        1e-6, not rms_norm_eps); 0.0 for a model without a latent
        (pe_model_rope_latent_norm_eps). posenc.MLA.from_model reads it."""
        self._check_open()
        eps = ctypes.c_double()
        _lib.check(_lib.fn("pe_model_rope_latent_norm_eps")(self._model, ctypes.byref(eps)))
        return eps.value

    def __getitem__(self, layer):
        if isinstance(layer, slice):
            raise TypeError("ModelRope indices must be integers (use m.layer(i))")
        i = int_arg(layer, "layer", *INT32)
        return self.layer(i + len(self._layers) if i < 0 else i)

    def __iter__(self):
        self._check_open()
        return iter(self._layers)

    @property
    def nope_layers(self):
        """The layers without RoPE, ascending (empty for most models)."""
        return tuple(i for i, c in enumerate(self._layers) if c is None)

    def caches(self, role=ROLE_ATTENTION):
        """The distinct caches of a role (default the attention's), in the
        order of their first layer: a list of SharedCache(cache, layers)
        with the ascending layers using each."""
        self._check_open()
        r = self._role(role, "caches")
        if r == ROLE_ATTENTION:
            return list(self._shared)
        shared = {}
        for i, c in enumerate(self._roles[r]):
            if c is not None:
                shared.setdefault(id(c), (c, []))[1].append(i)
        return [SharedCache(c, tuple(u)) for c, u in shared.values()]

    @property
    def pairing_guessed(self):
        """True when the config's model_type is not in libposenc's table and
        the pairing is transformers' default rotate_half (style "neox"):
        check the model's modeling file."""
        return self._pairing_guessed

    @property
    def heads(self):
        """Heads(num_attention_heads, num_key_value_heads) of the config
        (or its class's defaults; 0 when it has none)."""
        return self._heads

    def nope_temperature(self, layer):
        """NopeTemperature(floor_scale, attn_scale) of a layer: Llama 4's
        query temperature on its NoPE layers (the library does not apply it;
        .multiplier(positions) gives the factor). (1.0, 0.0) for every other
        layer."""
        self._check_open()
        i = self._index(layer, "nope_temperature")
        fs, a = ctypes.c_double(), ctypes.c_double()
        _lib.check(_lib.lib.pe_model_rope_nope_temperature(self._model, i, ctypes.byref(fs),
                                                           ctypes.byref(a)))
        return NopeTemperature(fs.value, a.value)

    # ---- lifetime ----

    @property
    def closed(self):
        return self._model.closed

    def close(self):
        """Free the model and its caches now; every layer cache is closed
        with it (using one afterwards raises ValueError). Idempotent."""
        for cache in self._all_caches:
            cache._release()              # borrowed: becomes closed, frees nothing
        self._model.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        if self.closed:
            return "<posenc.ModelRope closed>"
        n = len(self._layers)
        lines = ["<posenc.ModelRope %d layers, %d cache%s, heads=%d kv_heads=%d, pairing %s"
                 % (n, len(self._shared), "" if len(self._shared) == 1 else "s",
                    self._heads.num_attention_heads, self._heads.num_key_value_heads,
                    "guessed (model_type unknown)" if self._pairing_guessed
                    else "from model_type")]
        for role, name in sorted(_ROLE_NAMES.items()):
            if role != ROLE_ATTENTION and not self._roles.get(role):
                continue
            for cache, users in self.caches(role):
                p = cache.params
                kind = p["scaling"] if p["scaling"] == "default" else \
                    "%s x%g" % (p["scaling"], p["factor"])
                lines.append("  %s%s base=%g attention_factor=%g style=%s head_dim=%d "
                             "rotary_dim=%d: %d layer%s [%s]"
                             % ("" if role == ROLE_ATTENTION else name + ": ", kind, p["base"],
                                p["attention_factor"], p["style"], p["head_dim"],
                                p["rotary_dim"], len(users), "" if len(users) == 1 else "s",
                                _ranges(users)))
        nope = self.nope_layers
        if nope:
            lines.append("  no RoPE: %d layer%s [%s]"
                         % (len(nope), "" if len(nope) == 1 else "s", _ranges(nope)))
        return "\n".join(lines) + ">"
