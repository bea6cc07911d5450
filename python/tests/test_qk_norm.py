"""posenc.qk_norm_rope_ and qk_norm_rope_store_ against float64 references
written here from transformers' Qwen3RMSNorm / Gemma3RMSNorm /
Llama4TextL2Norm / Olmo2 q_norm followed by apply_rotary_pos_emb."""
import numpy as np
import pytest

import posenc
from conftest import bf16_bits_to_f32, f32_to_bf16_bits


def hf_norm(x, kind, w, eps, scope):
    """x: [batch, heads, tokens, dim] float64; the norm over the last dim
    (per head) or over heads*dim of each token (OLMo 2's q_norm)."""
    if kind == "none":
        return x
    if scope == "token":
        b, h, t, d = x.shape
        flat = x.transpose(0, 2, 1, 3).reshape(b, t, h * d)
        out = hf_norm(flat[:, np.newaxis], kind, w, eps, "head")[:, 0]
        return out.reshape(b, t, h, d).transpose(0, 2, 1, 3)
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    f = {"rms": w, "rms_unit_offset": 1.0 + w, "l2": 1.0}[kind]
    return x * r * f


def hf_rope(x, pos, base):
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, np.newaxis].astype(np.float64) * inv  # [tokens, d/2]
    cos = np.concatenate([np.cos(ang)] * 2, -1)
    sin = np.concatenate([np.sin(ang)] * 2, -1)
    half = d // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)  # rotate_half
    return x * cos + rot * sin


@pytest.mark.parametrize("kind,scope", [("rms", "head"), ("rms_unit_offset", "head"),
                                        ("l2", "head"), ("rms", "token")])
def test_values_against_hf(rng, kind, scope):
    hd, hq, hk, t, base = 64, 4, 2, 6, 1e6
    cache = posenc.RopeCache(head_dim=hd, rope_theta=base, max_positions=4096)
    q = rng.standard_normal((1, hq, t, hd)).astype(np.float32)
    k = rng.standard_normal((1, hk, t, hd)).astype(np.float32)
    qw = (1 + 0.3 * rng.standard_normal(hd * (hq if scope == "token" else 1))).astype(np.float32)
    kw = (1 + 0.3 * rng.standard_normal(hd * (hk if scope == "token" else 1))).astype(np.float32)
    weighted = kind != "l2"
    pos = rng.integers(0, 4096, t)
    # per token the weight is head-major over heads*head_dim, as the projection's output
    want_q = hf_rope(hf_norm(q.astype(np.float64), kind, qw.astype(np.float64), 1e-6, scope),
                     pos, base)
    want_k = hf_rope(hf_norm(k.astype(np.float64), kind, kw.astype(np.float64), 1e-6, scope),
                     pos, base)
    posenc.qk_norm_rope_(cache, q, k, kind=kind, scope=scope, q_weight=qw if weighted else None,
                         k_weight=kw if weighted else None, positions=pos)
    # posenc.h: a few float32 ulps of |n_x| + |n_y| (a looser, absolute check here)
    for got, want in ((q, want_q), (k, want_k)):
        np.testing.assert_allclose(got, want, rtol=0, atol=4e-6 * np.abs(want).max())


@pytest.mark.parametrize("stream_cache", [False, True])
def test_store_matches_in_place(rng, stream_cache):
    hd, hq, hk, t = 128, 4, 2, 5
    cache = posenc.RopeCache(head_dim=hd, rope_theta=1e6, max_positions=4096)
    qkv = rng.standard_normal((1, t, hq + 2 * hk, hd)).astype(np.float32)
    q, k, v = (qkv[:, :, a:b].transpose(0, 2, 1, 3)
               for a, b in ((0, hq), (hq, hq + hk), (hq + hk, hq + 2 * hk)))
    w = (1 + 0.1 * rng.standard_normal(hd)).astype(np.float32)
    kc = np.full((2, 4, hk, hd), 7.0, np.float32)  # [blocks, block_size, heads, dim]
    vc = np.full_like(kc, 7.0)
    slots = np.array([5, -1, 0, 3, 7])
    ref_q, ref_k = q.copy(), k.copy()
    posenc.qk_norm_rope_(cache, ref_q, ref_k, q_weight=w, k_weight=w)
    k_before, v_before = k.copy(), v.copy()
    k.flags.writeable = v.flags.writeable = False   # only read: read-only views are taken
    posenc.qk_norm_rope_store_(cache, k, kc.transpose(0, 2, 1, 3), slots, q=q, v=v,
                               v_cache=vc.transpose(0, 2, 1, 3), q_weight=w, k_weight=w,
                               stream_cache=stream_cache)
    np.testing.assert_array_equal(q, ref_q)
    np.testing.assert_array_equal(k, k_before)
    flat_k, flat_v = kc.reshape(8, hk, hd), vc.reshape(8, hk, hd)
    for i, s in enumerate(slots):
        if s >= 0:
            np.testing.assert_array_equal(flat_k[s], ref_k[0, :, i])
            np.testing.assert_array_equal(flat_v[s], v_before[0, :, i])
    untouched = [s for s in range(8) if s not in slots]
    assert (flat_k[untouched] == 7.0).all() and (flat_v[untouched] == 7.0).all()


def test_store_reads_bf16_inputs_by_dtype(rng):
    # dtype names q, k and v's element type, cache_dtype the caches': bf16
    # inputs into a float32 cache give the rows of the same values in float32
    hd, t = 64, 3
    cache = posenc.RopeCache(head_dim=hd, max_positions=64)
    bits = f32_to_bf16_bits(rng.standard_normal((3, 1, 2, t, hd)))
    exact = bf16_bits_to_f32(bits)                                # the same values in float32
    w = np.ones(hd, np.float32)
    slots = np.array([2, 0, 5])
    got = np.zeros((2, 2, 4, hd), np.float32)
    want = np.zeros_like(got)
    posenc.qk_norm_rope_store_(cache, bits[1], got, slots, q=bits[0].copy(), v=bits[2],
                               v_cache=np.zeros_like(got), q_weight=w, k_weight=w, dtype="bf16")
    posenc.qk_norm_rope_store_(cache, exact[1], want, slots, q=exact[0].copy(), v=exact[2],
                               v_cache=np.zeros_like(want), q_weight=w, k_weight=w)
    assert got.tobytes() == want.tobytes() and got.any()


def test_store_reads_each_cache_by_its_dtype(rng):
    # cache_dtype names k_cache's element type, v_cache_dtype v_cache's: a
    # bf16 k cache beside a float32 v cache
    hd, t = 64, 3
    cache = posenc.RopeCache(head_dim=hd, max_positions=64)
    k = rng.standard_normal((1, 2, t, hd)).astype(np.float32)
    v = rng.standard_normal((1, 2, t, hd)).astype(np.float32)
    w = np.ones(hd, np.float32)
    slots = np.array([2, 0, 5])
    kb = np.zeros((2, 2, 4, hd), np.uint16)
    vc = np.zeros((2, 2, 4, hd), np.float32)
    kf = np.zeros_like(vc)
    posenc.qk_norm_rope_store_(cache, k, kb, slots, v=v, v_cache=vc, k_weight=w,
                               cache_dtype="bf16")
    posenc.qk_norm_rope_store_(cache, k, kf, slots, k_weight=w)
    np.testing.assert_array_equal(kb, f32_to_bf16_bits(kf))   # the float32 rows rounded once
    for i, s in enumerate(slots):         # [num_blocks, kv_heads, block_size, head_dim]
        np.testing.assert_array_equal(vc[s // 4, :, s % 4], v[0, :, i])


def test_errors_write_nothing(rng):
    cache = posenc.RopeCache(head_dim=64, max_positions=64)
    q = rng.standard_normal((1, 2, 3, 64)).astype(np.float32)
    k = rng.standard_normal((1, 1, 3, 64)).astype(np.float32)
    kc = np.zeros((1, 1, 4, 64), np.float32)
    before = q.copy(), kc.copy()
    w = np.ones(64, np.float32)
    with pytest.raises(posenc.PosencError, match="slot 1 twice"):
        posenc.qk_norm_rope_store_(cache, k, kc, [1, 1, 2], q=q, q_weight=w, k_weight=w)
    with pytest.raises(posenc.PosencError, match="eps"):
        posenc.qk_norm_rope_(cache, q, k, eps=-1.0, q_weight=w, k_weight=w)
    with pytest.raises(ValueError, match="needs k_weight"):
        posenc.qk_norm_rope_(cache, q, k, q_weight=w)
    with pytest.raises(ValueError, match="no weight"):
        posenc.qk_norm_rope_(cache, q, k, kind="l2", q_weight=w)
    for n in (32, 65):            # float32 weights of another length, short or long
        with pytest.raises(ValueError, match="k_weight has %d values, expected 64" % n):
            posenc.qk_norm_rope_(cache, q, k, q_weight=w, k_weight=np.ones(n, np.float32))
    np.testing.assert_array_equal(q, before[0])
    np.testing.assert_array_equal(kc, before[1])
