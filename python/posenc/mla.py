"""Multi-head latent attention (MLA): the step after the projections of an
MLA layer (DeepSeek-V2/V3/V3.1/V3.2, Kimi-K2, GLM-5; DeepSeek-V4) in one
pass - pe_mla_rope_store.

transformers' DeepseekV3Attention, after its projections, does

    kv_c = kv_a_layernorm(kv_a[..., :kv_lora_rank])    RMSNorm with weight
    k_pe = RoPE(kv_a[..., kv_lora_rank:])              one rope head, shared
    q_pe = RoPE(q[..., qk_nope_head_dim:])             every q head

and an engine keeps the row [kv_c | k_pe] (576 values for DeepSeek-V3) at
the token's cache slot. mla_rope_store_ does it all: each kv row read once,
normed and rotated in float32, written once into its cache row; each q
head's rope slice rotated in place.

    import numpy as np, posenc
    m = posenc.ModelRope.from_hf_config("DeepSeek-V3/config.json")
    mla = posenc.MLA.from_model(m, 0, kv_weight=kv_a_layernorm_weight)   # 512 floats
    q = np.zeros((4, 128, 1, 192), np.float32)    # [batch, heads, tokens, 128 nope + 64 rope]
    kv = np.zeros((4, 1, 576), np.float32)        # [batch, tokens, 512 latent + 64 k_pe]
    cache = np.zeros((16, 64, 576), np.float32)   # [num_blocks, block_size, 576]
    posenc.mla_rope_store_(m.layer(0), mla, q, kv, cache, slot_mapping=[[7], [90], [300], [1000]],
                           positions=[[7], [130], [1031], [4000]])

DeepSeek-V4 is the same step with other numbers (MLA.from_model reads them):
a 512-channel kv row normed whole and rotated on its last 64, q heads of
512 normed without a weight and rotated on their last 64, and the attention
output's rope slice rotated back before o_proj (posenc.torch.derotate_output_).

Pairing: the rope cache's (DeepSeek's interleaved pairs, style "gptj"),
rotated in place as vLLM, sglang and llama.cpp store them; transformers
de-interleaves q_pe and k_pe alike (even channels first), so q.k is the
same - compare cache rows with transformers' after that permutation.

Cache formats (MLA.format) and the arrays that hold them:
  "plain"      the row in the array's dtype: float32 / float16 / bfloat16
               [num_blocks, block_size, kv_dim] (or [num_blocks, 1,
               block_size, kv_dim]), any strides with a contiguous last
               dimension;
  "fp8_e4m3"   uint8 [num_blocks, block_size, kv_dim]: byte i = e4m3(x_i /
               scale), one per-tensor scale (vLLM kv_cache_dtype "fp8");
  "fp8_ds"     uint8 [num_blocks, block_size, 656]: vLLM's "fp8_ds_mla"
               (DeepSeek-V3.2): 512 e4m3 codes in tiles of 128, each tile's
               float32 scale, then the 64 rotated channels as bfloat16;
  "fp8_ds_v4"  uint8 [num_blocks, block_bytes] and block_size=: DeepSeek-V4
               (FlashMLA's layout), block-major: block_size rows of 448
               e4m3 codes + 64 bfloat16, then each row's 8 scale bytes
               (UE8M0 per 64 channels and a zero byte).
MLA.cache_shape(num_blocks, block_size) gives each shape. The bytes are
posenc.h's (pe_mla_rope_store), vLLM's byte for byte.

Errors: a library refusal raises PosencError with its sentence (naming the
argument and the values), nothing written; arrays the binding cannot
describe raise TypeError / ValueError, nothing written either.
"""
import ctypes

import numpy as np

from . import _lib
from ._arrays import (INT32, View, _read_only_error, _struct, _via_dlpack, as_array, int_arg,
                      is_torch, tensor_view, MAP_ROWS, integers)
from ._ext import ext
from .qk_norm import KINDS
from .rope import RopeCache

__all__ = ["MLA", "mla_rope_store_", "mla_cache_read", "FORMATS", "ORDERS"]

#: pe_mla_format: how a cache row is stored.
FORMATS = {"plain": _lib.PE_MLA_PLAIN, "fp8_e4m3": _lib.PE_MLA_FP8_E4M3,
           "fp8_ds": _lib.PE_MLA_FP8_DS, "fp8_ds_v4": _lib.PE_MLA_FP8_DS_V4}
#: pe_mla_order: where the rotated channels sit in a "plain" / "fp8_e4m3" row.
ORDERS = {"latent_first": _lib.PE_MLA_LATENT_FIRST, "rope_first": _lib.PE_MLA_ROPE_FIRST}
_FLOAT_P = ctypes.POINTER(ctypes.c_float)


def _name(value, table, what):
    if value not in table:
        raise ValueError("MLA: %s %r is not one of %s" % (what, value, ", ".join(table)))
    return table[value]


def _float_array(values, name):
    """A read-only contiguous float32 copy (numpy, torch or a sequence)."""
    if is_torch(values):
        values = values.detach().cpu().float().numpy()
    a = np.asarray(values)
    if a.dtype.kind not in "fiu" or a.dtype == np.bool_:
        raise TypeError("MLA: %s must be real numbers, got dtype %s" % (name, a.dtype))
    a = np.array(a, dtype=np.float32, order="C", copy=True).reshape(-1)
    a.flags.writeable = False
    return a


class MLA:
    """One MLA layer's step (pe_mla): where the rope slices sit, the norms,
    and the cache row's format. Immutable; replace(**changes) makes another.

    MLA(rope_dim, kv_norm_dim, kv_rope_offset, q_rope_offset, *, kv_norm="rms",
        kv_eps=1e-6, kv_weight=None, q_norm="none", q_eps=1e-6, format="plain",
        order="latent_first", scale=None)

    rope_dim: R, the rotated channels (qk_rope_head_dim, 64): the rope
      cache's head_dim, all of it rotated.
    kv rows ([batch, tokens, kv_dim], kv_a_proj_with_mqa's output): channels
      [0, kv_norm_dim) normed (kv_norm: "rms" with kv_weight, kv_a_layernorm;
      "none" for rows that come normed, kv_norm_dim 0), channels
      [kv_rope_offset, kv_rope_offset + R) rotated - after the norm when
      inside it (V4), as they are otherwise (V3: k_pe after the 512-channel
      latent); every other channel copied.
    q heads ([batch, heads, tokens, q_head_dim]): channels [q_rope_offset,
      q_rope_offset + R) rotated in place, after q_norm ("none", DeepSeek-V3;
      "l2", V4: x * rsqrt(mean(x^2) + q_eps) over each head, no weight).
    kv_weight: kv_norm_dim values (a float32 copy is kept: a bf16
      checkpoint's weight widened exactly). kv_eps, q_eps: float32.
    format: "plain", "fp8_e4m3" (needs scale, one float), "fp8_ds",
      "fp8_ds_v4" (module docstring); order: "latent_first" ([kv_c | k_pe]:
      vLLM, sglang, llama.cpp) or "rope_first" (llama.cpp's earlier caches).

    The library checks the rest at the call (PosencError naming the field):
    DeepSeek-V3 is MLA(64, 512, 512, 128, kv_weight=w); MLA.from_model reads
    every number from a ModelRope.
    """

    __slots__ = ("_c", "_kv_weight", "_scale", "_fields")

    def __init__(self, rope_dim, kv_norm_dim, kv_rope_offset, q_rope_offset, *, kv_norm="rms",
                 kv_eps=1e-6, kv_weight=None, q_norm="none", q_eps=1e-6, format="plain",
                 order="latent_first", scale=None):
        c = _lib.MLAParams()
        _lib.fn("pe_mla_init")(c)
        c.rope_dim = int_arg(rope_dim, "rope_dim", *INT32)
        c.kv_norm_dim = int_arg(kv_norm_dim, "kv_norm_dim", *INT32)
        c.kv_rope_offset = int_arg(kv_rope_offset, "kv_rope_offset", *INT32)
        c.q_rope_offset = int_arg(q_rope_offset, "q_rope_offset", *INT32)
        c.kv_norm = _name(kv_norm, KINDS, "kv_norm")
        c.q_norm = _name(q_norm, KINDS, "q_norm")
        c.kv_eps = float(kv_eps)
        c.q_eps = float(q_eps)
        c.format = _name(format, FORMATS, "format")
        c.order = _name(order, ORDERS, "order")
        w = None
        if kv_weight is not None:
            w = _float_array(kv_weight, "kv_weight")
            if w.size != c.kv_norm_dim:
                raise ValueError("MLA: kv_weight has %d values, kv_norm_dim is %d"
                                 % (w.size, c.kv_norm_dim))
            c.kv_weight = w.ctypes.data_as(_FLOAT_P) if w.size else None
        sc = None
        if scale is not None:
            sc = _float_array([scale], "scale")
            c.scale = sc.ctypes.data_as(_FLOAT_P)
        self._c, self._kv_weight, self._scale = c, w, sc
        self._fields = dict(rope_dim=c.rope_dim, kv_norm_dim=c.kv_norm_dim,
                            kv_rope_offset=c.kv_rope_offset, q_rope_offset=c.q_rope_offset,
                            kv_norm=kv_norm, kv_eps=float(c.kv_eps), kv_weight=w, q_norm=q_norm,
                            q_eps=float(c.q_eps), format=format, order=order,
                            scale=None if sc is None else float(sc[0]))

    @classmethod
    def from_model(cls, model, layer, kv_weight=None, **fields):
        """The MLA of layer `layer` of a ModelRope, every number from the
        model (its attention slice, QK-norm and latent eps):
        - DeepSeek-V3 / V3.1 / V3.2, Kimi-K2, GLM-4.7-Flash, GLM-5 (a latent
          norm, no QK-norm): rope_dim = the slice's rotary_dim (64),
          q_rope_offset = q_offset (qk_nope_head_dim, 128), kv_rope_offset =
          kv_norm_dim = k_offset (kv_lora_rank, 512), kv_norm "rms" at
          model.latent_norm_eps (1e-6);
        - DeepSeek-V4 (the attention's QK-norm RMS per head): the 512-channel
          kv row normed whole (kv_norm_dim = k_head_dim) at the QK-norm's
          eps, q_norm "l2" at the same eps, offsets 448.
        kv_weight: the layer's kv_a_layernorm.weight (V4: kv_norm.weight),
        kv_norm_dim values; fields: format, order, scale, or any other MLA
        field to override (kv_norm="none" for rows that come normed).
        ValueError for a layer that is not MLA."""
        from .model import ModelRope, ROLE_ATTENTION
        if not isinstance(model, ModelRope):
            raise TypeError("MLA.from_model: model must be a posenc.ModelRope, got %s"
                            % type(model).__name__)
        s = model.slice(layer, ROLE_ATTENTION)
        cache = model.layer(layer)
        if cache is None or not s.rotary_dim:
            raise ValueError("MLA.from_model: layer %s has no rotation" % (layer,))
        if cache.rotary_dim != cache.head_dim:
            raise ValueError("MLA.from_model: layer %s rotates %d of its %d rope channels; an "
                             "MLA rope slice is rotated whole" % (layer, cache.rotary_dim,
                                                                  cache.head_dim))
        norm = model.qk_norm(layer, ROLE_ATTENTION)
        latent = model.latent_norm_eps
        if norm.kind == "none" and latent > 0:         # kv_a_layernorm on the latent
            kw = dict(kv_norm_dim=s.k_offset, kv_norm="rms", kv_eps=latent, q_norm="none")
        elif norm.kind == "rms" and norm.scope == "head" and s.q_head_dim == s.k_head_dim:
            # the kv row normed whole (DeepSeek-V4's kv_norm), q without weight
            kw = dict(kv_norm_dim=s.k_head_dim, kv_norm="rms", kv_eps=norm.eps, q_norm="l2",
                      q_eps=norm.eps)
        else:
            raise ValueError("MLA.from_model: layer %s is not multi-head latent attention (latent "
                             "norm eps %g, QK-norm %s per %s, q heads %d, k rows %d)"
                             % (layer, latent, norm.kind, norm.scope, s.q_head_dim,
                                s.k_head_dim))
        kw.update(rope_dim=cache.head_dim, kv_rope_offset=s.k_offset, q_rope_offset=s.q_offset,
                  kv_weight=kv_weight)
        if fields.get("kv_norm") == "none":
            kw.update(kv_norm_dim=0)
        kw.update(fields)
        return cls(**kw)

    def replace(self, **changes):
        """A copy with some fields changed (e.g. format="fp8_ds")."""
        kw = dict(self._fields)
        kw.update(changes)
        return MLA(**kw)

    rope_dim = property(lambda self: self._fields["rope_dim"])
    kv_norm_dim = property(lambda self: self._fields["kv_norm_dim"])
    kv_rope_offset = property(lambda self: self._fields["kv_rope_offset"])
    q_rope_offset = property(lambda self: self._fields["q_rope_offset"])
    kv_norm = property(lambda self: self._fields["kv_norm"])
    kv_eps = property(lambda self: self._fields["kv_eps"])
    #: the float32 copy the library reads (read-only), or None
    kv_weight = property(lambda self: self._fields["kv_weight"])
    q_norm = property(lambda self: self._fields["q_norm"])
    q_eps = property(lambda self: self._fields["q_eps"])
    format = property(lambda self: self._fields["format"])
    order = property(lambda self: self._fields["order"])
    scale = property(lambda self: self._fields["scale"])

    def _row_bytes(self, kv_dim):
        ro, r, fmt = self.kv_rope_offset, self.rope_dim, self.format
        if fmt == "fp8_ds":
            return ro + 4 * (ro // 128) + 2 * r
        if fmt == "fp8_ds_v4":
            return ro + 2 * r
        return kv_dim

    def cache_shape(self, num_blocks, block_size, kv_dim=None):
        """The shape of a cache of num_blocks blocks of block_size rows in
        this format: "plain" [num_blocks, block_size, kv_dim] (any float
        dtype), "fp8_e4m3" the same in uint8, "fp8_ds" [num_blocks,
        block_size, 656] uint8, "fp8_ds_v4" [num_blocks, block_bytes] uint8
        with block_bytes = block_size * (576 + 8) rounded up to a multiple of
        the 576-byte row as FlashMLA pads it (pass block_size= to the calls).
        kv_dim: the kv row's channels; the DS formats' is kv_rope_offset +
        rope_dim."""
        nb = int_arg(num_blocks, "num_blocks", 0, 2**62)
        bs = int_arg(block_size, "block_size", 1, 2**31 - 1)
        if self.format in ("fp8_ds", "fp8_ds_v4"):
            kv_dim = self.kv_rope_offset + self.rope_dim
        elif kv_dim is None:
            raise ValueError("MLA.cache_shape: kv_dim is needed for format %r" % self.format)
        row = self._row_bytes(int_arg(kv_dim, "kv_dim", 1, 2**31 - 1))
        if self.format != "fp8_ds_v4":
            return (nb, bs, row)
        block = bs * (row + self.kv_rope_offset // 64 + 1)
        return (nb, -(-block // row) * row)

    def __repr__(self):
        f = self._fields
        norm = lambda kind, eps: kind if kind == "none" else "%s eps=%g" % (kind, eps)  # noqa: E731
        return ("<posenc.MLA rope_dim=%d q_rope_offset=%d kv_rope_offset=%d kv_norm_dim=%d "
                "kv_norm=%s%s q_norm=%s format=%s%s order=%s>"
                % (f["rope_dim"], f["q_rope_offset"], f["kv_rope_offset"], f["kv_norm_dim"],
                   norm(f["kv_norm"], f["kv_eps"]),
                   "" if f["kv_weight"] is None else " (weight)", norm(f["q_norm"], f["q_eps"]),
                   f["format"], "" if f["scale"] is None else " scale=%g" % f["scale"],
                   f["order"]))


def cache_view(obj, name, mla, block_size, writable):
    """The View of a byte cache (posenc._posenc's helper for what it does
    not describe itself, and the TypeError / ValueError of what does not
    fit). The descriptor: shape [num_blocks, 1, block_size, kv_dim] in
    channels, strides in bytes, as posenc.h's pe_mla_rope_store reads it."""
    if block_size is not None and mla.format != "fp8_ds_v4":
        raise ValueError("%s: block_size is for fp8_ds_v4 caches; a %s cache's is its shape"
                         % (name, mla.format))
    obj = as_array(obj, name)
    read_only = False
    if is_torch(obj):
        import torch
        if obj.dtype != torch.uint8:
            raise TypeError("%s has dtype %s: a %s cache is bytes (torch.uint8)"
                            % (name, obj.dtype, mla.format))
        if obj.device.type != "cpu" or obj.layout != torch.strided:
            raise TypeError("%s must be a dense CPU tensor, got device %s layout %s"
                            % (name, obj.device, obj.layout))
        shape, strides, ptr = tuple(obj.shape), tuple(obj.stride()), obj.data_ptr()
    else:
        if obj.dtype != np.uint8:
            raise TypeError("%s has dtype %s: a %s cache is bytes (numpy.uint8)"
                            % (name, obj.dtype, mla.format))
        # numpy's view of a DLPack producer (read-only before numpy 2.1):
        # what else does not fit is named first
        read_only = writable and not obj.flags.writeable
        if read_only and not _via_dlpack(obj):
            raise _read_only_error(obj, name, "written in place")
        shape, strides, ptr = obj.shape, obj.strides, obj.ctypes.data
    ro, r, fmt = mla.kv_rope_offset, mla.rope_dim, mla.format
    v4 = fmt == "fp8_ds_v4"
    want = "[num_blocks, block_bytes]" if v4 else \
        "[num_blocks, block_size, row_bytes] or [num_blocks, 1, block_size, row_bytes]"
    if len(shape) not in ((2,) if v4 else (3, 4)):
        raise ValueError("%s has shape %s: a %s cache is %s" % (name, shape, fmt, want))
    if shape[-1] > 1 and strides[-1] != 1:
        raise ValueError("%s: the bytes of a row must be contiguous (stride 1, got %d)"
                         % (name, strides[-1]))
    if v4:
        bs = int_arg(block_size if block_size is not None else 0, "block_size", *INT32)
        if bs < 1:
            raise ValueError("%s: a fp8_ds_v4 cache needs block_size (the rows of a block), got "
                             "%s" % (name, block_size))
        row = ro + 2 * r
        need = bs * (row + ro // 64 + 1)
        if shape[1] < need and ro % 64 == 0:
            raise ValueError("%s has blocks of %d bytes: %d rows of %d bytes and their %d scale "
                             "bytes need %d" % (name, shape[1], bs, row, ro // 64 + 1, need))
        if read_only:
            raise _read_only_error(obj, name, "written in place")
        return View(obj, _struct(ptr, 0, (shape[0], 1, bs, ro + r), (strides[0], 0, row, 1), 4),
                    (shape[0], 1, bs, ro + r), None, writable)
    s4 = (shape[0], 1) + tuple(shape[1:]) if len(shape) == 3 else tuple(shape)
    st4 = (strides[0], 0) + tuple(strides[1:]) if len(shape) == 3 else tuple(strides)
    dim = s4[3]
    if fmt == "fp8_ds" and ro % 128 == 0:
        row = mla._row_bytes(None)
        if dim != row:
            raise ValueError("%s has rows of %d bytes: fp8_ds rows of kv_rope_offset %d and "
                             "rope_dim %d are %d bytes (%d e4m3 codes, %d float32 tile scales, "
                             "%d bfloat16)" % (name, dim, ro, r, row, ro, ro // 128, r))
        dim = ro + r
    elif fmt == "fp8_ds":
        dim = ro + r                  # the library names kv_rope_offset
    st = [s if n > 1 else 0 for n, s in zip(s4, st4)]
    st[3] = 1
    if read_only:
        raise _read_only_error(obj, name, "written in place")
    return View(obj, _struct(ptr, 0, (s4[0], s4[1], s4[2], dim), st, 4), (s4[0], s4[1], s4[2], dim),
                None, writable)


def _check(cache, mla):
    if not isinstance(cache, RopeCache):
        raise TypeError("cache must be a posenc.RopeCache, got %s" % type(cache).__name__)
    if not isinstance(mla, MLA):
        raise TypeError("mla must be a posenc.MLA, got %s" % type(mla).__name__)


def mla_rope_store_(cache, mla, q, kv, mla_cache, slot_mapping, positions=None, pool=None, *,
                    dtype=None, cache_dtype=None, block_size=None, stream_cache=False):
    """The MLA step (pe_mla_rope_store): q's rope slices rotated in place
    (normed first under mla.q_norm); each kv row normed, rotated and written
    at its slot into mla_cache in mla.format (kv is only read).

    cache: the layer's RopeCache (ModelRope.layer(i): head_dim = rotary_dim
      = rope_dim, interleaved pairs for DeepSeek).
    mla: a posenc.MLA (MLA.from_model).
    q: [batch, heads, tokens, q_head_dim] float32 / float16 / bfloat16 (any
      strides, last contiguous), or None (kv only).
    kv: [batch, tokens, kv_dim] (or [batch, 1, tokens, kv_dim]), or None (q
      only: then mla_cache and slot_mapping are None too).
    mla_cache: the paged cache, its shape by format (the module docstring,
      MLA.cache_shape); block_size: the rows of a block for "fp8_ds_v4".
    slot_mapping: int [batch, tokens] or [tokens], each in [-1, num_blocks *
      block_size), no slot twice; -1 skips a token's kv row (its q is still
      rotated).
    positions: int [batch, tokens] or [tokens]; None = 0..tokens-1.
    dtype / cache_dtype: "bf16" to read uint16 numpy arrays as bfloat16.
    stream_cache: write the cache rows with streaming stores
      (PE_ROPE_STREAM_CACHE: the same bytes, not read first nor kept in the
      CPU's caches; for rows not read again soon).
    Everything in float32, rounded once to each output's dtype (or
    quantized). A refusal raises PosencError with the library's sentence,
    nothing written."""
    _check(cache, mla)
    ext.mla_rope_store(cache, mla, q, kv, mla_cache, slot_mapping, positions, pool, dtype,
                       cache_dtype, block_size, 0,
                       _lib.PE_ROPE_STREAM_CACHE if stream_cache else 0)


def _read_shape(mla, mla_cache, slot_mapping, block_size, cache_dtype):
    slots = integers(slot_mapping, "slot_mapping")
    if slots.ndim not in (1, 2):
        raise ValueError("slot_mapping has shape %s, expected [batch, tokens] or [tokens]"
                         % (slots.shape,))
    batch, tokens = (1, slots.shape[0]) if slots.ndim == 1 else slots.shape
    if mla.format in ("fp8_ds", "fp8_ds_v4"):
        kv_dim = mla.kv_rope_offset + mla.rope_dim
    elif mla.format == "plain":
        kv_dim = tensor_view(mla_cache, "mla_cache", cache_dtype, False, MAP_ROWS).shape[3]
    else:
        kv_dim = cache_view(mla_cache, "mla_cache", mla, block_size, False).shape[3]
    return batch, tokens, kv_dim


def mla_cache_read(mla, mla_cache, slot_mapping, out=None, *, dtype=None, cache_dtype=None,
                   block_size=None):
    """The cache rows at slot_mapping read back as kv rows
    (pe_mla_cache_read), in kv order whatever the cache's order, dequantized
    and rounded once to out's dtype: out [batch, tokens, kv_dim] (or [batch,
    1, tokens, kv_dim]) float32 / float16 / bfloat16, or None for a new
    float32 array (torch tensor for a torch cache) of zeros. slot -1 leaves
    its row untouched; a slot may repeat. mla gives the format, order,
    rope_dim, kv_rope_offset and scale (its norms are not read). Returns
    out."""
    if not isinstance(mla, MLA):
        raise TypeError("mla must be a posenc.MLA, got %s" % type(mla).__name__)
    if out is None:
        shape = _read_shape(mla, mla_cache, slot_mapping, block_size, cache_dtype)
        if is_torch(mla_cache):
            import torch
            out = torch.zeros(shape, dtype=torch.float32)
        else:
            out = np.zeros(shape, np.float32)
    ext.mla_cache_read(mla, mla_cache, out, slot_mapping, dtype, cache_dtype, block_size)
    return out

