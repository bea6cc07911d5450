"""libposenc for PyTorch users: a transformers-shaped rotary embedding that
rotates q and k in place, on the CPU, without copies.

In a Llama/Qwen/Mistral attention forward, transformers does

    cos, sin = self.rotary_emb(value_states, position_ids)        # [B, T, D]
    q, k = apply_rotary_pos_emb(q, k, cos, sin)                   # q * cos + rotate_half(q) * sin

With posenc.torch:

    from posenc.torch import RotaryEmbedding, apply_rotary_pos_emb
    rotary = RotaryEmbedding(model.config)          # the same config.json loader as C
    q, k = rotary(q, k, position_ids)               # in place; returns the same tensors
    # or, shaped like transformers' function:
    q, k = apply_rotary_pos_emb(q, k, position_ids, rotary)

q: [batch, heads, tokens, head_dim] (transformers' layout after .transpose(1, 2);
unsqueeze_dim=2 for [batch, tokens, heads, head_dim]), k the same with its
own head count (GQA). float32, float16 or bfloat16 CPU tensors, any strides
with a contiguous last dimension - the views transformers makes, q/k slices
of a packed QKV projection - that do not require grad (call under
torch.no_grad() / torch.inference_mode(), as generation does).
attention_scaling (YaRN, LongRoPE) is applied to the rotation, as
transformers multiplies cos and sin by it. Computation is in float32 with
one rounding to the tensor's dtype.

This module imports torch; the rest of posenc does not need it.
"""
import json

import torch

from . import _lib
from ._arrays import swap12
from .rope import RopeCache

__all__ = ["RotaryEmbedding", "apply_rotary_pos_emb"]


def _max_position_embeddings(text):
    try:
        cfg = json.loads(text)
    except ValueError:
        return None
    for c in (cfg, cfg.get("text_config") if isinstance(cfg, dict) else None):
        if isinstance(c, dict) and isinstance(c.get("max_position_embeddings"), int):
            return c["max_position_embeddings"]
    return None


class RotaryEmbedding(torch.nn.Module):
    """The rotary embedding of a model, from its config: a transformers
    PretrainedConfig, a config.json path or model directory, a dict or JSON
    text - read by the library's loader (pe_rope_cache_create_from_hf_config),
    the same as posenc.RopeCache.from_hf_config.

    max_positions: rows of the cos/sin table; None = the config's
    max_position_embeddings (Llama-3.1: 131072 rows x 64 frequencies x 8
    bytes = 64 MiB), 0 = no table (angles per token: any position, a little
    slower). seq_len: the context the frequencies serve (dynamic, longrope);
    0 = max_position_embeddings.

    forward(q, k, position_ids=None, unsqueeze_dim=1) rotates q and k in place
    at position_ids ([batch, tokens], [1, tokens] or [tokens]; None =
    0..tokens-1) and returns (q, k). Either of q, k may be None.
    """

    def __init__(self, config, max_positions=None, seq_len=0):
        super().__init__()
        text = _lib.config_text(config)
        if max_positions is None:
            max_positions = _max_position_embeddings(text) or 8192
        self.cache = RopeCache.from_hf_config(text, max_positions=max_positions, seq_len=seq_len)

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

    def forward(self, q, k=None, position_ids=None, unsqueeze_dim=1):
        return apply_rotary_pos_emb(q, k, position_ids, self, unsqueeze_dim=unsqueeze_dim)

    def extra_repr(self):
        p = self.cache.params
        return "head_dim=%d, rotary_dim=%d, style=%s, scaling=%s, base=%g, max_positions=%d" % (
            p["head_dim"], p["rotary_dim"], p["style"], p["scaling"], p["base"],
            p["max_positions"])


def apply_rotary_pos_emb(q, k, position_ids, rotary, unsqueeze_dim=1, pool=None):
    """Rotate q and k in place at position_ids with `rotary` (a
    RotaryEmbedding or a posenc.RopeCache); returns (q, k), the same tensors.

    The shape of transformers' apply_rotary_pos_emb(q, k, cos, sin,
    unsqueeze_dim) with position_ids in place of cos/sin: unsqueeze_dim=1 for
    [batch, heads, tokens, head_dim], 2 for [batch, tokens, heads, head_dim].
    """
    cache = rotary.cache if isinstance(rotary, RotaryEmbedding) else rotary
    if not isinstance(cache, RopeCache):
        raise TypeError("rotary must be a posenc.torch.RotaryEmbedding or a posenc.RopeCache, "
                        "got %s" % type(rotary).__name__)
    if unsqueeze_dim not in (1, 2):
        raise ValueError("unsqueeze_dim must be 1 ([B, H, T, D]) or 2 ([B, T, H, D]), got %r"
                         % (unsqueeze_dim,))
    qv = q if q is None or unsqueeze_dim == 1 else swap12(q)
    kv = k if k is None or unsqueeze_dim == 1 else swap12(k)
    cache.apply_(qv, kv, positions=position_ids, pool=pool)
    return q, k
