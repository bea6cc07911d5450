"""ModelRope: the RoPE of every layer of a model, from its config.json
(pe_model_rope)."""
import collections
import ctypes

import numpy as np

from . import _lib
from ._arrays import int_arg, INT32, INT64
from .rope import RopeCache

__all__ = ["ModelRope", "Heads", "NopeTemperature", "SharedCache"]

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
        by_address, layers, shared = {}, [], []
        for i in range(n):
            h = _lib.lib.pe_model_rope_layer(model, i)
            if h is None:
                layers.append(None)
                continue
            if h not in by_address:
                by_address[h] = len(shared)
                shared.append((RopeCache._borrowed(ctypes.c_void_p(h), model), []))
            cache, users = shared[by_address[h]]
            users.append(i)
            layers.append(cache)
        self._layers = tuple(layers)
        self._shared = tuple(SharedCache(c, tuple(u)) for c, u in shared)
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

    def layer(self, layer):
        """The RopeCache that layer `layer` (0-based) rotates q and k with,
        or None for a layer without RoPE (NoPE attention, linear attention).
        Layers with equal parameters get the same object. IndexError outside
        [0, num_layers)."""
        self._check_open()
        return self._layers[self._index(layer, "layer")]

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

    def caches(self):
        """The distinct caches, in the order of their first layer: a list of
        SharedCache(cache, layers) with the ascending layers using each."""
        self._check_open()
        return list(self._shared)

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
        for shared in self._shared:
            shared.cache._release()       # borrowed: becomes closed, frees nothing
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
        for cache, users in self._shared:
            p = cache.params
            kind = p["scaling"] if p["scaling"] == "default" else \
                "%s x%g" % (p["scaling"], p["factor"])
            lines.append("  %s base=%g attention_factor=%g style=%s head_dim=%d rotary_dim=%d: "
                         "%d layer%s [%s]"
                         % (kind, p["base"], p["attention_factor"], p["style"], p["head_dim"],
                            p["rotary_dim"], len(users), "" if len(users) == 1 else "s",
                            _ranges(users)))
        nope = self.nope_layers
        if nope:
            lines.append("  no RoPE: %d layer%s [%s]"
                         % (len(nope), "" if len(nope) == 1 else "s", _ranges(nope)))
        return "\n".join(lines) + ">"
