"""posenc against a PyTorch transcription of HuggingFace's Llama rotary
embedding (LlamaRotaryEmbedding + rotate_half + apply_rotary_pos_emb), written
here from the formulas: float32 inv_freq, a float32 angle, cos/sin cast to the
activation dtype, q*cos + rotate_half(q)*sin in that dtype.

HF rounds the angle to float32, posenc computes it in double; both are within
2^-24*|angle| + 2.4e-7 of the exact cos/sin (float32 angles as transformers forms them), which
sets the tolerances below."""
import math

import numpy as np
import pytest

import posenc
from conftest import rope_reference, f32_to_bf16_bits, bf16_bits_to_f32

torch = pytest.importorskip("torch")


def hf_default_inv_freq(base, dim):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def hf_llama3_inv_freq(base, dim, factor, low_freq_factor, high_freq_factor, original_max):
    inv_freq = hf_default_inv_freq(base, dim)
    low_wavelen = original_max / low_freq_factor
    high_wavelen = original_max / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_llama = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_max / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, inv_llama)


def hf_cos_sin(inv_freq, position_ids, attention_scaling, dtype):
    inv = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * attention_scaling
    sin = emb.sin() * attention_scaling
    return cos.to(dtype), sin.to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def angle_tol(max_pos, mag):
    return (2.0**-24 * max_pos + 2.4e-7) * mag * 4


def test_default_inv_freq_matches_hf():
    for base, dim in ((10000.0, 128), (500000.0, 128), (1e6, 64), (10000.0, 80)):
        cache = posenc.RopeCache(head_dim=dim, rope_theta=base, max_positions=16)
        hf = hf_default_inv_freq(base, dim).numpy()
        # libposenc rounds the double frequency once; HF rounds three times
        np.testing.assert_allclose(cache.inv_freq, hf, rtol=4e-7)


def test_llama3_inv_freq_matches_hf():
    rs = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    cache = posenc.RopeCache(head_dim=128, rope_theta=500000.0, max_positions=16, rope_scaling=rs)
    hf = hf_llama3_inv_freq(500000.0, 128, 8.0, 1.0, 4.0, 8192).numpy()
    np.testing.assert_allclose(cache.inv_freq, hf, rtol=4e-6)
    assert cache.attention_factor == 1.0


@pytest.mark.parametrize("max_pos", [64, 4096])
def test_llama_attention_float32_gqa(rng, max_pos):
    B, Hq, Hk, T, D = 2, 8, 2, 12, 128
    base = 500000.0
    cache = posenc.RopeCache(head_dim=D, rope_theta=base, max_positions=max_pos)
    q = rng.standard_normal((B, Hq, T, D), dtype=np.float32)
    k = rng.standard_normal((B, Hk, T, D), dtype=np.float32)
    pos = rng.integers(0, max_pos, size=(B, T))
    cos, sin = hf_cos_sin(hf_default_inv_freq(base, D), torch.from_numpy(pos), 1.0, torch.float32)
    hq, hk = apply_rotary_pos_emb(torch.from_numpy(q), torch.from_numpy(k), cos, sin)
    q0 = q.copy()
    cache.apply_(q, k, positions=pos)
    tol = angle_tol(max_pos, 5.0)
    np.testing.assert_allclose(q, hq.numpy(), atol=tol)
    np.testing.assert_allclose(k, hk.numpy(), atol=tol)
    # posenc's angles are exact in double: its distance to the float64
    # reference does not grow with the position the way HF's does
    inv64 = base ** (-(2.0 * np.arange(D // 2)) / D)
    want = rope_reference(q0, inv64, pos)
    np.testing.assert_allclose(q, want, atol=2e-5)
    assert np.max(np.abs(q - want)) <= np.max(np.abs(hq.numpy() - want)) + 1e-6


def test_llama_bf16_no_worse_than_hf(rng):
    B, H, T, D = 1, 4, 32, 64
    cache = posenc.RopeCache(head_dim=D, rope_theta=10000.0, max_positions=2048)
    xf = rng.standard_normal((B, H, T, D), dtype=np.float32)
    bits = f32_to_bf16_bits(xf)
    x_exact = bf16_bits_to_f32(bits)
    pos = rng.integers(0, 2048, size=(B, T))
    inv64 = 10000.0 ** (-(2.0 * np.arange(D // 2)) / D)
    want = rope_reference(x_exact, inv64, pos)

    xt = torch.from_numpy(x_exact).to(torch.bfloat16)
    cos, sin = hf_cos_sin(hf_default_inv_freq(10000.0, D), torch.from_numpy(pos), 1.0,
                          torch.bfloat16)
    hf, _ = apply_rotary_pos_emb(xt, xt, cos, sin)
    hf = hf.float().numpy().astype(np.float64)

    cache.apply_(bits, positions=pos, dtype="bf16")
    ours = bf16_bits_to_f32(bits).astype(np.float64)
    # posenc rounds once (<= half a bf16 ulp); HF rounds cos, sin, two products and a sum
    assert np.max(np.abs(ours - want)) <= np.max(np.abs(hf - want))
    np.testing.assert_allclose(ours, hf, atol=0.1)
    assert np.all(np.abs(ours - want) <= np.abs(want) * 2.0**-8 + 1e-5)


def test_llama_strided_bthd_layout(rng):
    # HF projects to [B, T, H*D] and views as [B, T, H, D] before transposing;
    # posenc takes the transposed view without a copy.
    B, T, H, D = 2, 5, 4, 64
    cache = posenc.RopeCache(head_dim=D, max_positions=128)
    proj = rng.standard_normal((B, T, H * D), dtype=np.float32)
    hq = torch.from_numpy(proj.copy()).view(B, T, H, D).transpose(1, 2)
    pos = np.broadcast_to(np.arange(T), (B, T))
    cos, sin = hf_cos_sin(hf_default_inv_freq(10000.0, D), torch.from_numpy(np.array(pos)),
                          1.0, torch.float32)
    want, _ = apply_rotary_pos_emb(hq, hq, cos, sin)
    view = proj.reshape(B, T, H, D).transpose(0, 2, 1, 3)
    assert np.shares_memory(view, proj)
    cache.apply_(view)
    np.testing.assert_allclose(proj.reshape(B, T, H, D).transpose(0, 2, 1, 3), want.numpy(),
                               atol=angle_tol(T, 5.0))
