"""libposenc for PyTorch users: a transformers-shaped rotary embedding that
rotates q and k in place, on the CPU, without copies.

In a Llama/Qwen/Mistral attention forward, transformers does

    cos, sin = self.rotary_emb(value_states, position_ids)        # [B, T, D]
    q, k = apply_rotary_pos_emb(q, k, cos, sin)                   # q * cos + rotate_half(q) * sin

With posenc.torch:

    from posenc.torch import RotaryEmbedding, apply_rotary_pos_emb
    rotary = RotaryEmbedding(model.config)          # the same config.json loader as C
    q, k = rotary(q, k, position_ids, unsqueeze_dim=1)   # in place; returns the same tensors
    # or, shaped like transformers' function:
    q, k = apply_rotary_pos_emb(q, k, position_ids, rotary, unsqueeze_dim=1)

The layout is stated by unsqueeze_dim, as in transformers: 1 for
[batch, heads, tokens, head_dim] (transformers' layout after .transpose(1, 2)),
2 for [batch, tokens, heads, head_dim]. Left out (None), it is read from the
shapes where they tell it - q and k of different head counts (GQA), or
positions whose tokens match one reading only - and refused (ValueError)
where they cannot: q and k with the same heads and tokens (MHA) or as many
tokens as heads, with nothing else to tell; a guess there could rotate
along the heads. k has its own head count (GQA). float32, float16 or
bfloat16 CPU tensors, any strides
with a contiguous last dimension - the views transformers makes, q/k slices
of a packed QKV projection - that do not require grad (call under
torch.no_grad() / torch.inference_mode(), as generation does).
attention_scaling (YaRN, LongRoPE) is applied to the rotation, as
transformers multiplies cos and sin by it. Computation is in float32 with
one rounding to the tensor's dtype.

TorchScript: the same calls are operators (registered with torch.library
when this module is imported), which take the cache as an integer,
op_id(rotary) - a scripted model keeps that number; the RotaryEmbedding (or
RopeCache) itself must stay alive:
    torch.ops.posenc.rope_(q, k, position_ids, cache_id, unsqueeze_dim)
        = apply_rotary_pos_emb(q, k, position_ids, rotary, unsqueeze_dim)
    torch.ops.posenc.rope_store_(q, k, k_cache, slot_mapping, positions, cache_id)
        = posenc.apply_rope_qk_store_(cache, k, k_cache, slot_mapping, q, positions)
Through the dispatcher (to a Python kernel) a call costs about 4 us more.

Multi-head latent attention (DeepSeek-V2/V3/V3.2, Kimi-K2, GLM-5,
DeepSeek-V4): mla_rope_store_ is posenc.mla_rope_store_ with q in either
layout (unsqueeze_dim); for DeepSeek-V4, deepseek_v4_q_ norms (weightless
RMS) and rotates q heads on their last 64 channels, and derotate_output_
rotates the attention output's rope slice back before o_proj:

    mla = posenc.MLA.from_model(model_rope, i, kv_weight=attn.kv_norm.weight,
                                format="fp8_ds_v4")
    rope = model_rope.layer(i)
    mla_rope_store_(rope, mla, q, kv, kv_cache, slot_mapping, position_ids, block_size=64)
    o = attention(q, kv_cache)                    # [batch, heads, tokens, 512]
    derotate_output_(o, rope, position_ids)

This module imports torch; the rest of posenc does not need it.
"""
import functools
import itertools
import weakref

import torch

from . import _lib
from ._arrays import layout_of
from ._ext import ext
from .mla import MLA
from .model import slice_view
from .rope import RopeCache

_LAYOUTS = {None: -1, 1: 0, 2: 1}

__all__ = ["RotaryEmbedding", "apply_rotary_pos_emb", "op_id", "mla_rope_store_",
           "deepseek_v4_q_", "derotate_output_"]


class RotaryEmbedding(torch.nn.Module):
    __doc__ = """The rotary embedding of a model, from its config: a transformers
    PretrainedConfig, a config.json path or model directory, a dict or JSON
    text - read by the library's loader (pe_rope_cache_create_from_hf_config),
    the same as posenc.RopeCache.from_hf_config.

    %s
    seq_len: the context the frequencies serve (dynamic, longrope); 0 =
    max_position_embeddings.

    forward(q, k, position_ids=None, unsqueeze_dim=None) rotates q and k in
    place at position_ids ([batch, tokens], [1, tokens] or [tokens]; None =
    0..tokens-1) and returns (q, k). Either of q, k may be None.
    unsqueeze_dim: the layout, as apply_rotary_pos_emb takes it.
    """ % _lib.MAX_POSITIONS_DOC

    def __init__(self, config, max_positions=None, seq_len=0):
        super().__init__()
        self.cache = RopeCache.from_hf_config(config, max_positions=max_positions,
                                              seq_len=seq_len)

    @property
    def attention_scaling(self):
        """transformers' attention_scaling: cos and sin are multiplied by it."""
        return self.cache.attention_factor

    @property
    def inv_freq(self):
        """The frequencies (rotary_dim/2, float32), transformers' inv_freq buffer."""
        return torch.from_numpy(self.cache.inv_freq)

    @property
    def head_dim(self):
        return self.cache.head_dim

    @property
    def op_id(self):
        """The integer torch.ops.posenc.* take for this module's cache (op_id)."""
        return op_id(self)

    def forward(self, q, k=None, position_ids=None, unsqueeze_dim=None):
        return apply_rotary_pos_emb(q, k, position_ids, self, unsqueeze_dim=unsqueeze_dim)

    def extra_repr(self):
        p = self.cache.params
        return "head_dim=%d, rotary_dim=%d, style=%s, scaling=%s, base=%g, max_positions=%d" % (
            p["head_dim"], p["rotary_dim"], p["style"], p["scaling"], p["base"],
            p["max_positions"])


def apply_rotary_pos_emb(q, k, position_ids, rotary, unsqueeze_dim=None, pool=None):
    """Rotate q and k in place at position_ids with `rotary` (a
    RotaryEmbedding or a posenc.RopeCache); returns (q, k), the same tensors.

    The shape of transformers' apply_rotary_pos_emb(q, k, cos, sin,
    unsqueeze_dim) with position_ids in place of cos/sin: unsqueeze_dim=1 for
    [batch, heads, tokens, head_dim], 2 for [batch, tokens, heads, head_dim];
    None reads it from the shapes where they tell it and raises ValueError
    where they cannot (see the module's docstring).
    """
    cache = rotary.cache if isinstance(rotary, RotaryEmbedding) else rotary
    if not isinstance(cache, RopeCache):
        raise TypeError("rotary must be a posenc.torch.RotaryEmbedding or a posenc.RopeCache, "
                        "got %s" % type(rotary).__name__)
    layout = _LAYOUTS.get(unsqueeze_dim, None) if isinstance(unsqueeze_dim, (int, type(None))) \
        else None
    if layout is None:
        raise ValueError("unsqueeze_dim must be 1 ([B, H, T, D]), 2 ([B, T, H, D]) or None (read "
                         "from the shapes), got %r" % (unsqueeze_dim,))
    try:
        ext.apply_rope_qk(cache, q, k, position_ids, 0, pool, None, layout)
    except _lib.PosencError:
        if layout < 0 and (q is not None or k is not None):
            layout = layout_of(q, k, position_ids)
        cache._check_apply(q, k, position_ids, None, bthd=layout == 1,
                           how_other="pass unsqueeze_dim=%d" % (1 if layout == 1 else 2))
        raise
    return q, k


# ---- multi-head latent attention ------------------------------------------------

def _rope_cache(rotary):
    cache = rotary.cache if isinstance(rotary, RotaryEmbedding) else rotary
    if not isinstance(cache, RopeCache):
        raise TypeError("cache must be a posenc.RopeCache or a posenc.torch.RotaryEmbedding, got %s"
                        % type(rotary).__name__)
    return cache


def _fixed_layout(unsqueeze_dim):
    """0 for [B, H, T, D] (unsqueeze_dim 1), 1 for [B, T, H, D] (2)."""
    if unsqueeze_dim not in (1, 2) or isinstance(unsqueeze_dim, bool):
        raise ValueError("unsqueeze_dim must be 1 ([B, H, T, D]) or 2 ([B, T, H, D]), got %r"
                         % (unsqueeze_dim,))
    return unsqueeze_dim - 1


def mla_rope_store_(cache, mla, q, kv, mla_cache, slot_mapping, positions=None, pool=None, *,
                    unsqueeze_dim=1, block_size=None):
    """posenc.mla_rope_store_ (the MLA step: q's rope slices rotated in
    place, each kv row normed, rotated and written at its slot) for torch
    tensors: q float32 / float16 / bfloat16 in transformers' layout
    [batch, heads, tokens, q_head_dim] (unsqueeze_dim=1, DeepseekV3Attention's
    q_states after .transpose(1, 2)) or [batch, tokens, heads, q_head_dim]
    (unsqueeze_dim=2, the projection's .view()), or None; kv [batch, tokens,
    kv_dim] (kv_a_proj_with_mqa's output) or None; mla_cache a float tensor
    or, for a quantized format, a torch.uint8 tensor (posenc.mla); positions
    and slot_mapping int64 [batch, tokens] or [tokens]. cache may be a
    RotaryEmbedding. Under torch.no_grad(): q is written in place."""
    cache = _rope_cache(cache)
    if not isinstance(mla, MLA):
        raise TypeError("mla must be a posenc.MLA, got %s" % type(mla).__name__)
    ext.mla_rope_store(cache, mla, q, kv, mla_cache, slot_mapping, positions, pool, None, None,
                       block_size, _fixed_layout(unsqueeze_dim), 0)


@functools.lru_cache(maxsize=64)
def _v4_q(rope_dim, q_rope_offset, eps):
    return MLA(rope_dim, 0, 0, q_rope_offset, kv_norm="none", q_norm="l2", q_eps=eps)


def deepseek_v4_q_(q, cache, positions=None, *, eps=1e-6, unsqueeze_dim=1, pool=None):
    """DeepSeek-V4's query step, in place: each q head normed without a
    weight, x * rsqrt(mean(x^2) + eps) over its head_dim channels, then its
    last cache.head_dim (64) channels rotated at positions (the layer's
    rope: posenc.ModelRope.layer(i)). q [batch, heads, tokens, head_dim]
    (unsqueeze_dim=1) or [batch, tokens, heads, head_dim] (2). The same as
    mla_rope_store_ with kv None and an MLA of q_norm "l2"; float32
    arithmetic, one rounding. Returns q."""
    cache = _rope_cache(cache)
    layout = _fixed_layout(unsqueeze_dim)
    if not isinstance(q, torch.Tensor):
        raise TypeError("q must be a torch.Tensor, got %s" % type(q).__name__)
    r = cache.head_dim
    mla = _v4_q(r, max(int(q.shape[-1]) - r, 0) if q.dim() else 0, float(eps))
    ext.mla_rope_store(cache, mla, q, None, None, None, positions, pool, None, None, None, layout,
                       0)
    return q


def derotate_output_(o, cache, positions=None, *, offset=None, unsqueeze_dim=1, pool=None):
    """Rotate the attention output's rope slice back, in place
    (PE_SLICE_DEROTATE_OUTPUT: DeepSeek-V4, whose k is its v, so v's rope
    slice carried the keys' rotation): o[..., offset:offset + R] rotated by
    -angle at the query positions (PE_ROPE_INVERSE), R = cache.head_dim,
    before o_proj. offset: the slice's (RopeSlice.q_offset,
    MLA.q_rope_offset); None = the last R channels (V4: 448 of 512).
    o [batch, heads, tokens, head_dim] (unsqueeze_dim=1) or [batch, tokens,
    heads, head_dim] (2), float32 / float16 / bfloat16. Returns o."""
    cache = _rope_cache(cache)
    layout = _fixed_layout(unsqueeze_dim)
    if not isinstance(o, torch.Tensor):
        raise TypeError("o must be a torch.Tensor, got %s" % type(o).__name__)
    r = cache.head_dim
    view = slice_view(o, int(o.shape[-1]) - r if offset is None else offset, r)
    try:
        ext.apply_rope_qk(cache, view, None, positions, _lib.PE_ROPE_INVERSE, pool, None, layout)
    except _lib.PosencError:
        cache._check_apply(view, None, positions, None, bthd=layout == 1,
                           how_other="pass unsqueeze_dim=%d" % (1 if layout == 1 else 2))
        raise
    return o


# ---- torch.ops.posenc: the calls as operators (TorchScript) ----------------------

_ops_caches = {}               # op id -> weakref to the RopeCache
_ops_ids = weakref.WeakKeyDictionary()
_ops_counter = itertools.count(1)


def op_id(rotary):
    """The integer that names `rotary`'s cache (a RotaryEmbedding or a
    RopeCache) to torch.ops.posenc.rope_ / rope_store_. Numbers are never
    reused; the cache is not kept alive by it: an operator given the number
    of a cache that has been freed or closed raises ValueError."""
    cache = rotary.cache if isinstance(rotary, RotaryEmbedding) else rotary
    if not isinstance(cache, RopeCache):
        raise TypeError("op_id: expected a posenc.torch.RotaryEmbedding or a posenc.RopeCache, "
                        "got %s" % type(rotary).__name__)
    if cache not in _ops_ids:
        n = next(_ops_counter)
        _ops_ids[cache] = n
        _ops_caches[n] = weakref.ref(cache, lambda _, n=n: _ops_caches.pop(n, None))
    return _ops_ids[cache]


def _op_cache(n):
    ref = _ops_caches.get(n)
    cache = ref() if ref is not None else None
    if cache is None or cache.closed:
        raise ValueError("torch.ops.posenc: no live cache has op id %d (freed or closed, or "
                         "not from posenc.torch.op_id)" % n)
    return cache


def _op_rope(q, k, positions, cache, unsqueeze_dim=None):
    apply_rotary_pos_emb(q, k, positions, _op_cache(cache), unsqueeze_dim=unsqueeze_dim)


def _op_rope_store(q, k, k_cache, slot_mapping, positions, cache):
    from .rope_ext import apply_rope_qk_store_
    apply_rope_qk_store_(_op_cache(cache), k, k_cache, slot_mapping, q=q, positions=positions)


def _register_ops():
    lib = torch.library.Library("posenc", "DEF")
    lib.define("rope_(Tensor(a!)? q, Tensor(b!)? k, Tensor? positions, int cache, "
               "int? unsqueeze_dim=None) -> ()")
    lib.define("rope_store_(Tensor(a!)? q, Tensor k, Tensor(b!) k_cache, Tensor slot_mapping, "
               "Tensor? positions, int cache) -> ()")
    lib.impl("rope_", _op_rope, "CPU")
    lib.impl("rope_store_", _op_rope_store, "CPU")
    return lib


_ops_library = _register_ops()   # the registration lasts as long as this object
