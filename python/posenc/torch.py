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

This module imports torch; the rest of posenc does not need it.
"""
import torch

from . import _lib
from ._arrays import layout_of
from ._ext import ext
from .rope import RopeCache

_LAYOUTS = {None: -1, 1: 0, 2: 1}

__all__ = ["RotaryEmbedding", "apply_rotary_pos_emb"]


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
