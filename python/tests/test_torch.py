"""torch tensors in place (no copy) and the transformers drop-in posenc.torch.

The reference is a transcription of transformers' modeling_rope_utils
(_compute_default_rope_parameters, _compute_llama3_parameters,
_compute_yarn_parameters, whose ramp is conftest's yarn_inv_freq) and modeling_llama
(LlamaRotaryEmbedding.forward, rotate_half, apply_rotary_pos_emb), evaluated
in float64 (the exact numbers) and in bfloat16 (what transformers computes
for a bf16 model: cos/sin cast to bf16, products and sum in bf16).
"""
import math

import numpy as np
import pytest

import posenc
from conftest import rope_reference, default_inv_freq, yarn_inv_freq

torch = pytest.importorskip("torch")
import posenc.torch as pt  # noqa: E402


# ---- the transcription ---------------------------------------------------------

def hf_inv_freq(cfg):
    """(inv_freq float64, attention_scaling) as transformers' init functions."""
    rs = cfg.get("rope_scaling") or {}
    rtype = rs.get("rope_type", rs.get("type", "default"))
    base = cfg["rope_theta"]
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    inv = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    if rtype == "default":
        return inv, 1.0
    if rtype == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / lo, old / hi
        wavelen = 2 * math.pi / inv
        inv_llama = np.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, inv_llama), 1.0
    if rtype == "yarn":
        factor = rs.get("factor")
        m0 = rs.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
        if factor is None:
            factor = cfg["max_position_embeddings"] / m0

        def get_mscale(scale, mscale=1):
            return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0
        attn = rs.get("attention_factor")
        if attn is None:
            ms, msa = rs.get("mscale"), rs.get("mscale_all_dim")
            attn = get_mscale(factor, ms) / get_mscale(factor, msa) if ms and msa else \
                get_mscale(factor)
        inv = yarn_inv_freq(base, dim, factor, m0, rs.get("beta_fast") or 32,
                            rs.get("beta_slow") or 1, rs.get("truncate", True))
        return inv, float(attn)
    raise AssertionError(rtype)


def hf_cos_sin(inv_freq, attention_scaling, position_ids, dtype):
    """LlamaRotaryEmbedding.forward: [B, T, D] cos and sin in `dtype`."""
    freqs = position_ids.to(torch.float64)[:, :, None] * torch.from_numpy(inv_freq)[None, None]
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * attention_scaling).to(dtype), (emb.sin() * attention_scaling).to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


CONFIGS = {
    "default": {"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 8,
                "num_key_value_heads": 2, "rope_theta": 500000.0,
                "max_position_embeddings": 4096},
    "llama3": {"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 8,
               "num_key_value_heads": 2, "rope_theta": 500000.0,
               "max_position_embeddings": 131072,
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192}},
    "yarn": {"model_type": "qwen2", "hidden_size": 1024, "num_attention_heads": 8,
             "num_key_value_heads": 2, "rope_theta": 1000000.0,
             "max_position_embeddings": 32768,
             "rope_scaling": {"type": "yarn", "factor": 4.0,
                              "original_max_position_embeddings": 32768}},
}


def bf16_of(x):
    """float32 tensor -> bf16, correctly rounded (torch's .to is nearest-even)."""
    return x.to(torch.bfloat16)


# ---- tensors in place ---------------------------------------------------------

@pytest.fixture
def gen():
    return torch.Generator().manual_seed(20261201)


def layouts(gen, dtype, B=2, T=7, Hq=4, Hk=2, D=64):
    """(name, q, k, keep-alive buffer) in the layouts transformers makes."""
    out = []
    q = torch.randn(B, Hq, T, D, generator=gen).to(dtype)
    k = torch.randn(B, Hk, T, D, generator=gen).to(dtype)
    out.append(("contiguous", q, k, None))
    qb = torch.randn(B, T, Hq, D, generator=gen).to(dtype)
    kb = torch.randn(B, T, Hk, D, generator=gen).to(dtype)
    out.append(("BTHD.transpose(1,2)", qb.transpose(1, 2), kb.transpose(1, 2), None))
    qkv = torch.randn(B, T, (Hq + 2 * Hk) * D, generator=gen).to(dtype)
    q = qkv[..., :Hq * D].view(B, T, Hq, D).transpose(1, 2)
    k = qkv[..., Hq * D:(Hq + Hk) * D].view(B, T, Hk, D).transpose(1, 2)
    out.append(("packed QKV", q, k, qkv))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_tensors_rotate_in_place(gen, dtype):
    cache = posenc.RopeCache(head_dim=64, rope_theta=10000.0, max_positions=256)
    inv64 = default_inv_freq(10000.0, 64)
    for name, q, k, buf in layouts(gen, dtype):
        pos = torch.randint(0, 256, (q.shape[0], q.shape[2]), generator=gen)
        q0, k0 = q.double().numpy(), k.double().numpy()
        v0 = None if buf is None else buf[..., (4 + 2) * 64:].clone()
        ptrs = (q.data_ptr(), k.data_ptr())
        rq, rk = cache.apply_(q, k, positions=pos)
        assert rq is q and rk is k
        assert (q.data_ptr(), k.data_ptr()) == ptrs, name
        assert q.dtype == dtype
        for got, x0 in ((q, q0), (k, k0)):
            want = rope_reference(x0, inv64, pos.numpy())
            got64 = got.double().numpy()
            if dtype == torch.float32:
                np.testing.assert_allclose(got64, want, atol=2e-6, err_msg=name)
            else:
                # one rounding from float32: within half an ulp of the dtype
                # (at most 2^-8 |x| for bf16, 2^-11 |x| for f16) plus the float32 error
                rel = 2.0**-8 if dtype == torch.bfloat16 else 2.0**-11
                assert np.all(np.abs(got64 - want) <= np.abs(want) * rel + 4e-6), name
        if v0 is not None:  # the V part of the packed buffer is untouched
            assert torch.equal(buf[..., (4 + 2) * 64:], v0)


def test_bf16_is_the_float32_result_rounded_once(gen):
    cache = posenc.RopeCache(head_dim=128, rope_theta=500000.0, max_positions=1024)
    x = torch.randn(2, 4, 9, 128, generator=gen).to(torch.bfloat16)
    pos = torch.randint(0, 1024, (2, 9), generator=gen)
    f32 = x.float()
    cache.apply_(f32, positions=pos)
    cache.apply_(x, positions=pos)
    assert torch.equal(x, bf16_of(f32))


def test_numpy_and_torch_agree(gen):
    cache = posenc.RopeCache(head_dim=32, max_positions=64)
    t = torch.randn(1, 2, 5, 32, generator=gen)
    a = t.numpy().copy()
    cache.apply_(t)
    cache.apply_(a)
    assert np.array_equal(t.numpy(), a)


def unchanged_after(exc, fn, *tensors):
    before = [t.clone() for t in tensors]
    with pytest.raises(exc) as e:
        fn()
    for t, b in zip(tensors, before):
        assert torch.equal(t, b), "a tensor was written before the error"
    return e.value


def test_rejections_write_nothing(gen):
    cache = posenc.RopeCache(head_dim=16, max_positions=32)
    q = torch.randn(1, 2, 3, 16, generator=gen)
    k = torch.randn(1, 1, 3, 16, generator=gen)
    # a tensor not in CPU memory (no GPU here: the meta device stands for CUDA)
    meta = torch.empty(1, 1, 3, 16, device="meta")
    e = unchanged_after(TypeError, lambda: cache.apply_(q, meta), q)
    assert "device meta" in str(e) and "CPU" in str(e)
    # requires grad: an in-place write autograd cannot record
    g = torch.randn(1, 1, 3, 16, requires_grad=True)
    e = unchanged_after(ValueError, lambda: cache.apply_(q, g), q, g.detach())
    assert "requires grad" in str(e)
    # non-contiguous last dimension
    wide = torch.randn(1, 1, 3, 32, generator=gen)
    e = unchanged_after(ValueError, lambda: cache.apply_(wide[..., ::2]), wide)
    assert "last dimension must be contiguous" in str(e)
    # q and k sharing elements
    e = unchanged_after(ValueError, lambda: cache.apply_(q, q[:, :1]), q)
    assert "share elements" in str(e)
    # dtypes the library has no kernel for
    for bad in (q.double(), q.to(torch.int32)):
        unchanged_after(TypeError, lambda: cache.apply_(bad), bad)
    # floating positions
    unchanged_after(TypeError, lambda: cache.apply_(q, positions=torch.zeros(1, 3)), q)
    # shape checks run on tensors too
    unchanged_after(ValueError, lambda: cache.apply_(q, torch.randn(1, 1, 2, 16)), q)


def test_expanded_tensor_is_refused_by_the_library(gen):
    cache = posenc.RopeCache(head_dim=16, max_positions=32)
    base = torch.randn(1, 1, 3, 16, generator=gen)
    view = base.expand(1, 4, 3, 16)  # heads alias one another (stride 0)
    e = unchanged_after(posenc.PosencError, lambda: cache.apply_(view), base)
    assert e.status == posenc.Status.ERR_SHAPE


def test_under_no_grad_from_a_linear(gen):
    proj = torch.nn.Linear(32, 4 * 16)
    cache = posenc.RopeCache(head_dim=16, max_positions=32)
    with torch.no_grad():
        q = proj(torch.randn(1, 5, 32, generator=gen)).view(1, 5, 4, 16).transpose(1, 2)
        want = rope_reference(q.double().numpy(), default_inv_freq(1e4, 16),
                              np.arange(5)[None])
        cache.apply_(q)
    np.testing.assert_allclose(q.double().numpy(), want, atol=2e-6)


def test_other_in_place_functions_take_tensors(gen):
    scores = torch.zeros(1, 4, 3, 5)
    posenc.alibi_add_bias_(scores)
    want = torch.from_numpy(np.zeros((1, 4, 3, 5), np.float32))
    posenc.alibi_add_bias_(want.numpy())
    assert torch.equal(scores, want)
    x = torch.zeros(2, 6, 16, dtype=torch.bfloat16)
    posenc.sinusoidal_add_(x)
    tab = torch.from_numpy(posenc.sinusoidal_table(6, 16))
    assert torch.equal(x[0], tab.to(torch.bfloat16)) and torch.equal(x[1], x[0])


# ---- the transformers drop-in -----------------------------------------------------

@pytest.mark.parametrize("max_positions", [None, 0])
@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_drop_in_equals_the_transcription(gen, kind, max_positions):
    cfg = CONFIGS[kind]
    inv, attn = hf_inv_freq(cfg)
    rotary = pt.RotaryEmbedding(cfg, max_positions=max_positions)
    assert rotary.attention_scaling == pytest.approx(attn, rel=1e-15)
    np.testing.assert_allclose(rotary.inv_freq.double().numpy(), inv, rtol=2**-23)
    B, T, Hq, Hk, D = 2, 6, 8, 2, 128
    position_ids = torch.randint(0, 4000, (B, T), generator=gen)
    q = torch.rand(B, T, Hq, D, generator=gen).mul_(2).sub_(1).transpose(1, 2)
    k = torch.rand(B, T, Hk, D, generator=gen).mul_(2).sub_(1).transpose(1, 2)

    # float64: the exact numbers
    cos, sin = hf_cos_sin(inv, attn, position_ids, torch.float64)
    want_q, want_k = hf_apply_rotary_pos_emb(q.double(), k.double(), cos, sin)

    qb, kb = bf16_of(q), bf16_of(k)       # bf16 copies, rotated below
    q32, k32 = q.clone(), k.clone()       # float32 copies of the bf16 values
    q32b, k32b = qb.float(), kb.float()

    out = rotary(q32, k32, position_ids)
    assert out[0] is q32 and out[1] is k32
    assert (q32 - want_q).abs().max().item() <= 2e-6
    assert (k32 - want_k).abs().max().item() <= 2e-6

    # bf16: correctly rounded from the float32 result on the same inputs
    rotary(q32b, k32b, position_ids)
    ptrs = (qb.data_ptr(), kb.data_ptr())
    pt.apply_rotary_pos_emb(qb, kb, position_ids, rotary)
    assert (qb.data_ptr(), kb.data_ptr()) == ptrs
    assert torch.equal(qb, bf16_of(q32b)) and torch.equal(kb, bf16_of(k32b))
    # ... and never further from the exact result than transformers' bf16 path
    cos_b, sin_b = hf_cos_sin(inv, attn, position_ids, torch.bfloat16)
    hq, _ = hf_apply_rotary_pos_emb(bf16_of(q), bf16_of(k), cos_b, sin_b)
    exact_q, _ = hf_apply_rotary_pos_emb(bf16_of(q).double(), bf16_of(k).double(), cos, sin)
    assert (qb.double() - exact_q).abs().max() <= (hq.double() - exact_q).abs().max()


def test_drop_in_layouts_and_broadcast_positions(gen):
    cfg = CONFIGS["llama3"]
    rotary = pt.RotaryEmbedding(cfg, max_positions=0)
    inv, attn = hf_inv_freq(cfg)
    B, T, H, D = 3, 4, 2, 128
    position_ids = torch.arange(100, 100 + T)[None]          # [1, T], as generate() passes
    x = torch.randn(B, T, H, D, generator=gen)
    cos, sin = hf_cos_sin(inv, attn, position_ids, torch.float64)
    want, _ = hf_apply_rotary_pos_emb(x.double(), x.double(), cos, sin, unsqueeze_dim=2)
    y = x.clone()
    pt.apply_rotary_pos_emb(y, None, position_ids, rotary, unsqueeze_dim=2)   # [B, T, H, D]
    assert (y - want).abs().max().item() <= 2e-6
    z = x.clone().transpose(1, 2)
    rotary(z, None, position_ids)                                             # [B, H, T, D]
    assert torch.equal(z.transpose(1, 2), y)


def test_drop_in_from_a_config_object_and_a_file(tmp_path):
    class Config:  # what a transformers PretrainedConfig offers the module
        def __init__(self, d):
            self._d = d

        def to_dict(self):
            return dict(self._d)
    cfg = CONFIGS["yarn"]
    a = pt.RotaryEmbedding(Config(cfg), max_positions=16)
    path = tmp_path / "config.json"
    import json
    path.write_text(json.dumps(cfg))
    b = pt.RotaryEmbedding(tmp_path, max_positions=16)
    assert torch.equal(a.inv_freq, b.inv_freq)
    assert a.cache.max_positions == 16
    assert pt.RotaryEmbedding(cfg).cache.max_positions == posenc.DEFAULT_MAX_POSITIONS
    assert pt.RotaryEmbedding(cfg, max_positions=posenc.MAX_POSITIONS_FROM_CONFIG) \
        .cache.max_positions == cfg["max_position_embeddings"]
    with pytest.raises(TypeError):
        pt.apply_rotary_pos_emb(torch.zeros(1, 1, 1, 128), None, None, "not a rotary")


def test_every_in_place_function_takes_tensors(gen):
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    inv = default_inv_freq(1e4, 16)
    # rope_qk_store: k rotated into a [num_slots, heads, dim] torch cache
    k = torch.randn(1, 2, 3, 16, generator=gen)
    kv = torch.zeros(8, 2, 16)
    posenc.apply_rope_qk_store_(cache, k, kv, slot_mapping=torch.tensor([5, 0, 2]),
                                positions=torch.tensor([[7, 8, 9]]))
    want = rope_reference(k.double().numpy(), inv, np.array([[7, 8, 9]]))
    np.testing.assert_allclose(kv[[5, 0, 2]].permute(1, 0, 2).double().numpy(), want[0],
                               atol=2e-6)
    # mrope with equal sections of positions == plain rope
    q = torch.randn(1, 2, 3, 16, generator=gen)
    q2 = q.clone()
    pos = torch.arange(3)
    posenc.apply_mrope_(cache, q, positions=torch.stack([pos, pos, pos]), mrope_section=[2, 3, 3])
    cache.apply_(q2, positions=pos)
    assert torch.equal(q, q2)
    # multi-cache, shift, rerotate, learned
    x = torch.randn(2, 2, 3, 16, generator=gen)
    y = x.clone()
    posenc.apply_rope_qk_multi_([cache, cache], torch.tensor([1, 0]), x)
    cache.apply_(y)
    assert torch.equal(x, y)
    cache.shift_k_(x, 3)
    posenc.rerotate_k_(cache, cache, y)
    e = torch.zeros(1, 3, 16, dtype=torch.float16)
    table = torch.randn(10, 16, generator=gen)
    posenc.learned_add_(e, table, positions=torch.tensor([4, 1, 9]))
    assert torch.equal(e[0], table[[4, 1, 9]].half())
    s = torch.zeros(1, 2, 3, 3)
    posenc.t5_add_bias_(s, torch.randn(32, 2, generator=gen))
    with pytest.raises(ValueError, match="share elements"):
        posenc.learned_add_(table[None, :3], table)


# ---- the layout: stated by unsqueeze_dim, or told by the shapes -------------------

def _bthd_reference(x, positions):
    """RoPE of a [B, T, H, D] tensor in float64 (head_dim 16, base 1e4)."""
    xt = x.double().numpy().transpose(0, 2, 1, 3)
    return rope_reference(xt, default_inv_freq(1e4, 16), positions).transpose(0, 2, 1, 3)


def test_layout_told_by_the_shapes_is_used(gen):
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    B, T, Hq, Hk = 2, 5, 4, 2
    pos = torch.arange(7, 7 + T).expand(B, T)
    for hk, positions in ((Hk, None), (Hk, pos), (Hq, pos), (Hq, pos[:1]), (Hq, pos[0])):
        # GQA: only [B, T, H, D] makes q and k agree; MHA: positions of T != H tokens
        q = torch.randn(B, T, Hq, 16, generator=gen)
        k = torch.randn(B, T, hk, 16, generator=gen)
        at = pos.numpy() if positions is not None else np.arange(T)[None].repeat(B, 0)
        want_q, want_k = (_bthd_reference(x, at) for x in (q, k))
        pt.apply_rotary_pos_emb(q, k, positions, cache)
        np.testing.assert_allclose(q.double().numpy(), want_q, atol=2e-6)
        np.testing.assert_allclose(k.double().numpy(), want_k, atol=2e-6)
    # [B, H, T, D] likewise, and positions given as a list
    q = torch.randn(B, Hq, T, 16, generator=gen)
    k = torch.randn(B, Hk, T, 16, generator=gen)
    want = rope_reference(q.double().numpy(), default_inv_freq(1e4, 16), pos.numpy())
    pt.apply_rotary_pos_emb(q, k, pos.tolist(), cache)
    np.testing.assert_allclose(q.double().numpy(), want, atol=2e-6)


def test_layout_the_shapes_cannot_tell_is_refused(gen):
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    mha = torch.randn(2, 5, 4, 16, generator=gen)            # q and k alike: MHA
    square = torch.randn(2, 4, 4, 16, generator=gen)         # as many tokens as heads
    for q, k, positions in ((mha, mha.clone(), None), (mha, None, None),
                            (square, square.clone(), torch.arange(4)),
                            (square, None, [[0, 1, 2, 3]] * 2)):
        e = unchanged_after(ValueError, lambda: pt.apply_rotary_pos_emb(q, k, positions, cache),
                            *[x for x in (q, k) if x is not None])
        assert "cannot tell the layout" in str(e)
        assert "unsqueeze_dim=1" in str(e) and "unsqueeze_dim=2" in str(e)
        # stated, the same call runs
        pt.apply_rotary_pos_emb(q, k, positions, cache, unsqueeze_dim=2)
    with pytest.raises(ValueError, match="unsqueeze_dim must be"):
        pt.apply_rotary_pos_emb(mha, None, None, cache, unsqueeze_dim=3)
    # 1 head of 4 tokens or 4 heads of 1: a 0-d positions tensor has no
    # tokens to tell them apart by (and is no [batch, tokens] either)
    one = torch.randn(2, 1, 4, 16, generator=gen)
    e = unchanged_after(ValueError, lambda: pt.apply_rotary_pos_emb(one, one.clone(),
                                                                    torch.tensor(3), cache), one)
    assert "cannot tell the layout" in str(e) and "with positions ()" in str(e)


def test_k_alone_in_either_layout(gen):
    # q None: k is still read in the layout stated (or told by the shapes)
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    B, T, H = 2, 5, 3
    pos = torch.randint(0, 64, (B, T), generator=gen)
    k0 = torch.randn(B, T, H, 16, generator=gen)
    want = _bthd_reference(k0, pos.numpy())
    for unsqueeze_dim in (2, None):                   # stated; told by positions (T != H)
        k = k0.clone()
        pt.apply_rotary_pos_emb(None, k, pos, cache, unsqueeze_dim=unsqueeze_dim)
        np.testing.assert_allclose(k.double().numpy(), want, atol=2e-6)
    k = k0.transpose(1, 2).clone()                    # [B, H, T, D]
    pt.apply_rotary_pos_emb(None, k, pos, cache, unsqueeze_dim=1)
    np.testing.assert_allclose(k.transpose(1, 2).double().numpy(), want, atol=2e-6)


def test_one_tensor_refused_in_the_layout_its_shapes_tell(gen):
    # q or k alone in [B, T, H, D] (told by positions: T != H), a position
    # past the table: the refusal names that position, not a positions
    # shape that fits only the other layout
    cache = posenc.RopeCache(head_dim=16, max_positions=8)
    x = torch.randn(1, 5, 2, 16, generator=gen)
    pos = torch.tensor([[0, 1, 2, 3, 100]])
    for q, k in ((x, None), (None, x)):
        e = unchanged_after(posenc.PosencError,
                            lambda: pt.apply_rotary_pos_emb(q, k, pos, cache), x)
        assert "position 100 at [batch 0, token 4] >= cache max_positions 8" in str(e)


def test_strided_positions_are_read_as_their_values(gen):
    # int64 tensors that are views (every other column, a transpose, a row
    # of a wider one) give the bits of their contiguous copies
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    B, H, T = 2, 3, 5
    q0 = torch.randn(B, H, T, 16, generator=gen)
    wide = torch.randint(0, 64, (B, 2 * T), generator=gen)
    views = (wide[:, ::2], wide[:, :T].t().contiguous().t(), wide[:1, 1::2], wide[0, ::2])
    for pos in views:
        assert not pos.is_contiguous()
        got, copy = q0.clone(), q0.clone()
        pt.apply_rotary_pos_emb(got, None, pos, cache, unsqueeze_dim=1)
        pt.apply_rotary_pos_emb(copy, None, pos.contiguous(), cache, unsqueeze_dim=1)
        assert torch.equal(got, copy), pos.stride()
        at = pos.expand(B, T).numpy()
        want = rope_reference(q0.double().numpy(), default_inv_freq(1e4, 16), at)
        np.testing.assert_allclose(got.double().numpy(), want, atol=2e-6)


def test_a_stated_layout_that_does_not_fit_names_the_other(gen):
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    q = torch.randn(2, 5, 4, 16, generator=gen)              # [B, T, H, D], GQA
    k = torch.randn(2, 5, 2, 16, generator=gen)
    e = unchanged_after(ValueError, lambda: pt.apply_rotary_pos_emb(q, k, None, cache,
                                                                     unsqueeze_dim=1), q, k)
    assert "q (2, 5, 4, 16) and k (2, 5, 2, 16) differ in batch or tokens as [batch, heads, " \
           "tokens, head_dim]; they look like [batch, tokens, heads, head_dim]: pass " \
           "unsqueeze_dim=2" in str(e)
    qt, kt = q.transpose(1, 2), k.transpose(1, 2)            # [B, H, T, D]
    e = unchanged_after(ValueError, lambda: pt.apply_rotary_pos_emb(qt, kt, None, cache,
                                                                     unsqueeze_dim=2), q, k)
    assert "look like [batch, heads, tokens, head_dim]: pass unsqueeze_dim=1" in str(e)
    # the numpy-shaped call says how to pass its layout
    e = unchanged_after(ValueError, lambda: cache.apply_(q, k), q, k)
    assert "look like [batch, tokens, heads, head_dim]" in str(e) and "transpose(1, 2)" in str(e)


def test_lazily_negated_views_are_refused(gen):
    # Their memory holds -x: read or written as it is, the result would be wrong.
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    x = torch.randn(1, 1, 3, 16, generator=gen)
    neg = torch._neg_view(x)
    assert neg.is_neg() and neg.data_ptr() == x.data_ptr()
    e = unchanged_after(ValueError, lambda: cache.apply_(neg), x)
    assert "neg view" in str(e)
    kv = torch.zeros(4, 1, 16)
    e = unchanged_after(ValueError, lambda: posenc.apply_rope_qk_store_(
        cache, neg, kv, slot_mapping=[0, 1, 2]), x, kv)
    assert "neg view" in str(e)


# ---- torch.ops.posenc (TorchScript) --------------------------------------------------

class ScriptedRope(torch.nn.Module):
    """What a TorchScript model keeps: the cache's op id, an int."""

    def __init__(self, cache_id: int):
        super().__init__()
        self.cache_id = cache_id

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor):
        torch.ops.posenc.rope_(q, k, positions, self.cache_id, 2)
        return q, k


def test_operators_equal_the_python_calls_and_script(gen):
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    q = torch.randn(2, 3, 4, 16, generator=gen)              # [B, T, H, D]
    k = torch.randn(2, 3, 2, 16, generator=gen)
    pos = torch.randint(0, 64, (2, 3), generator=gen)
    want_q, want_k = q.clone(), k.clone()
    pt.apply_rotary_pos_emb(want_q, want_k, pos, cache, unsqueeze_dim=2)
    for run in (lambda a, b: torch.ops.posenc.rope_(a, b, pos, pt.op_id(cache), 2),
                lambda a, b: torch.ops.posenc.rope_(a, b, pos, pt.op_id(cache)),   # told
                lambda a, b: torch.jit.script(ScriptedRope(pt.op_id(cache)))(a, b, pos)):
        a, b = q.clone(), k.clone()
        run(a, b)
        assert torch.equal(a, want_q) and torch.equal(b, want_k)
    # the store
    kv, want_kv = torch.zeros(8, 2, 16), torch.zeros(8, 2, 16)
    slots = torch.tensor([[5, 0, 2], [1, 3, 4]])
    kt = k.transpose(1, 2)
    posenc.apply_rope_qk_store_(cache, kt, want_kv, slots, positions=pos)
    torch.ops.posenc.rope_store_(None, kt, kv, slots, pos, pt.op_id(cache))
    assert torch.equal(kv, want_kv) and kv.abs().sum() > 0
    rotary = pt.RotaryEmbedding(CONFIGS["llama3"], max_positions=8)
    assert rotary.op_id == pt.op_id(rotary.cache) != pt.op_id(cache)


def test_operator_with_a_freed_cache_is_refused(gen):
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    n = pt.op_id(cache)
    assert pt.op_id(cache) == n                               # one number per cache
    q = torch.randn(1, 2, 3, 16, generator=gen)
    e = unchanged_after(posenc.PosencError, lambda: torch.ops.posenc.rope_(     # errors pass
        q, None, torch.tensor([1, 2, 64]), n, 1), q)
    assert e.status == posenc.Status.ERR_POSITION_OUT_OF_RANGE
    cache.close()
    with pytest.raises(ValueError, match="no live cache has op id %d" % n):
        torch.ops.posenc.rope_(q, None, None, n, 1)
    other = posenc.RopeCache(head_dim=16, max_positions=64)
    del cache
    assert pt.op_id(other) != n                               # numbers are not reused
    with pytest.raises(TypeError):
        pt.op_id("a cache")
