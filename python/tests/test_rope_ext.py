"""posenc.rope_ext: the fused KV-cache store, M-RoPE and per-sequence caches
through the binding, against float64 NumPy references and against the
binding's own RopeCache.apply_ (bit for bit where the library promises it)."""
import numpy as np
import pytest

import posenc
from posenc import rope_ext
from conftest import Sub, f32_to_bf16_bits, default_inv_freq, rope_reference


def _cache(**kw):
    kw.setdefault("head_dim", 64)
    kw.setdefault("max_positions", 1024)
    return posenc.RopeCache(**kw)


# ---- the fused store ----------------------------------------------------------

def test_store_f32_to_bf16_paged_equals_apply_then_round(rng):
    cache = _cache(rope_theta=500000.0)
    B, H, T, D, BS, NB = 2, 4, 12, 64, 8, 6
    k = rng.standard_normal((B, T, H, D)).astype(np.float32).transpose(0, 2, 1, 3)  # [B,H,T,D] view
    q = rng.standard_normal((B, 8, T, D)).astype(np.float32)
    kv = np.full((NB, BS, H, D), 0x7fc1, np.uint16)  # vLLM layout, bf16 bits, a sentinel
    slots = rng.permutation(NB * BS)[:B * T].reshape(B, T)
    slots[0, 3] = -1
    pos = rng.integers(0, 1024, (B, T))
    k_before, q_ref, k_ref = k.copy(), q.copy(), k.copy()
    cache.apply_(q_ref, k_ref, positions=pos)
    rope_ext.apply_rope_qk_store_(cache, k, kv.transpose(0, 2, 1, 3), slots, q=q, positions=pos,
                                  cache_dtype="bf16")
    np.testing.assert_array_equal(k, k_before)            # k is only read
    np.testing.assert_array_equal(q, q_ref)               # q as apply_ rotates it
    want = np.full_like(kv, 0x7fc1)
    for b in range(B):
        for t in range(T):
            s = slots[b, t]
            if s >= 0:
                want[s // BS, s % BS] = f32_to_bf16_bits(k_ref[b, :, t, :])
    np.testing.assert_array_equal(kv, want)


def test_store_flat_cache_float64(rng):
    cache = _cache(max_positions=0)
    B, H, T, D = 1, 2, 9, 64
    k = rng.standard_normal((B, H, T, D)).astype(np.float32)
    kv = np.zeros((20, H, D), np.float32)                 # [num_slots, heads, dim]
    slots = np.arange(5, 5 + T)
    pos = np.arange(100, 100 + T)
    rope_ext.apply_rope_qk_store_(cache, k, kv, slots, positions=pos)
    ref = rope_reference(k, default_inv_freq(10000.0, D), pos[None, :])
    np.testing.assert_allclose(kv[5:5 + T].transpose(1, 0, 2), ref[0], rtol=0, atol=2e-6)
    assert not kv[:5].any() and not kv[5 + T:].any()


def test_store_flat_cache_through_the_helper_is_the_same(rng):
    # [num_slots, heads, dim] read by posenc._arrays (a view with heads and
    # slots swapped) rather than by the compiled module: the same bytes
    cache = _cache()
    k = rng.standard_normal((1, 2, 9, 64)).astype(np.float32)
    slots, pos = rng.permutation(20)[:9], np.arange(40, 49)
    want, got = np.zeros((20, 2, 64), np.float32), np.zeros((20, 2, 64), np.float32)
    rope_ext.apply_rope_qk_store_(cache, k, want, slots, positions=pos)
    rope_ext.apply_rope_qk_store_(cache, k, got.view(Sub), slots, positions=pos)
    assert want.any() and got.tobytes() == want.tobytes()


def test_store_duplicate_slot_raises_and_writes_nothing(rng):
    cache = _cache()
    k = rng.standard_normal((1, 2, 4, 64)).astype(np.float32)
    q = rng.standard_normal((1, 2, 4, 64)).astype(np.float32)
    kv = rng.standard_normal((1, 2, 8, 64)).astype(np.float32)
    q0, kv0 = q.copy(), kv.copy()
    with pytest.raises(posenc.PosencError) as e:
        rope_ext.apply_rope_qk_store_(cache, k, kv, [0, 1, 2, 1], q=q)
    assert e.value.status == posenc.Status.ERR_INVALID_ARGUMENT
    assert "slot 1 twice" in str(e.value)
    with pytest.raises(posenc.PosencError, match="outside"):
        rope_ext.apply_rope_qk_store_(cache, k, kv, [0, 1, 2, 8], q=q)
    np.testing.assert_array_equal(q, q0)
    np.testing.assert_array_equal(kv, kv0)
    with pytest.raises(ValueError):
        rope_ext.apply_rope_qk_store_(cache, k, kv[:, :1], [0, 1, 2, 3])  # heads differ


# ---- M-RoPE -----------------------------------------------------------------

def _hf_mrope(x, inv_freq, pos3, section, interleaved):
    """transformers' Qwen2-VL / Qwen3-VL rotation in float64; x [B,H,T,D],
    pos3 [3,B,T]."""
    x = x.astype(np.float64)
    freqs = pos3[:, :, :, None].astype(np.float64) * inv_freq  # [3,B,T,half]
    if interleaved:
        f = freqs[0].copy()
        for dim, offset in ((1, 1), (2, 2)):
            f[..., offset:section[dim] * 3:3] = freqs[dim][..., offset:section[dim] * 3:3]
        emb = np.concatenate([f, f], -1)
    else:
        emb3 = np.concatenate([freqs, freqs], -1)
        chunks = np.split(emb3, np.cumsum(list(section) * 2)[:-1], axis=-1)
        emb = np.concatenate([c[i % 3] for i, c in enumerate(chunks)], -1)
    cos, sin = np.cos(emb)[:, None], np.sin(emb)[:, None]
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


@pytest.mark.parametrize("interleaved,section", [(False, (16, 24, 24)), (True, (24, 20, 20))])
def test_mrope_against_hf(rng, interleaved, section):
    cache = _cache(head_dim=128, rope_theta=1000000.0, max_positions=512)
    B, H, T = 2, 3, 20
    q = rng.standard_normal((B, H, T, 128)).astype(np.float32)
    pos3 = rng.integers(0, 512, (3, B, T))
    want = _hf_mrope(q, default_inv_freq(1000000.0, 128), pos3, section, interleaved)
    rope_ext.apply_mrope_(cache, q, positions=pos3, mrope_section=section, interleaved=interleaved)
    np.testing.assert_allclose(q, want, rtol=0, atol=3e-6)


def test_mrope_text_tokens_equal_plain_rope(rng):
    cache = _cache(head_dim=128, max_positions=2048)
    q = rng.standard_normal((1, 4, 30, 128)).astype(np.float16)
    k = rng.standard_normal((1, 2, 30, 128)).astype(np.float16)
    q2, k2 = q.copy(), k.copy()
    p = rng.integers(0, 2048, 30)
    rope_ext.apply_mrope_(cache, q, k, positions=np.stack([p, p, p]), mrope_section=(16, 24, 24))
    cache.apply_(q2, k2, positions=p)
    assert q.tobytes() == q2.tobytes() and k.tobytes() == k2.tobytes()


def test_mrope_bad_section():
    cache = _cache()
    q = np.zeros((1, 1, 2, 64), np.float32)
    with pytest.raises(posenc.PosencError, match="sum to rotary_dim/2 = 32"):
        rope_ext.apply_mrope_(cache, q, mrope_section=(10, 10, 10))
    with pytest.raises(ValueError):
        rope_ext.apply_mrope_(cache, q, positions=np.zeros((2, 2), int), mrope_section=(8, 12, 12))


def test_mrope_positions_of_another_batch_are_refused():
    # int64 [3, 1, tokens] for a batch of 2 is not [3, tokens]: refused, not
    # read past its end for the second row
    cache = _cache()
    q = np.ones((2, 1, 4, 64), np.float32)
    for pos in (np.zeros((3, 1, 4), np.int64), np.zeros((3, 3, 4), np.int64)):
        with pytest.raises(ValueError, match=r"positions has shape \(3, %d, 4\), expected "
                           r"\[3, batch 2, tokens 4\]" % pos.shape[1]):
            rope_ext.apply_mrope_(cache, q, positions=pos, mrope_section=(8, 12, 12))
    for rows in (2, 4):                      # 2-D, but not one row per axis (t, h, w)
        with pytest.raises(ValueError, match=r"positions has shape \(%d, 4\), expected "
                           r"\[3, batch 2, tokens 4\] or \[3, 4\]" % rows):
            rope_ext.apply_mrope_(cache, q, positions=np.zeros((rows, 4), np.int64),
                                  mrope_section=(8, 12, 12))
    assert (q == 1).all()


# ---- per-sequence caches ----------------------------------------------------------

def test_multi_rows_equal_their_caches(rng):
    caches = [_cache(), _cache(rope_scaling={"rope_type": "linear", "factor": 4.0}),
              _cache(max_positions=0, rope_theta=500000.0)]
    idx = np.array([2, 0, 1, 1])
    B, T = 4, 7
    q = rng.standard_normal((B, 4, T, 64)).astype(np.float32)
    k = rng.standard_normal((B, 2, T, 64)).astype(np.float32)
    pos = rng.integers(0, 1024, (B, T))
    q2, k2 = q.copy(), k.copy()
    rope_ext.apply_rope_qk_multi_(caches, idx, q, k, positions=pos)
    for b in range(B):
        qb, kb = q2[b:b + 1].copy(), k2[b:b + 1].copy()
        caches[idx[b]].apply_(qb, kb, positions=pos[b:b + 1])
        assert qb.tobytes() == q[b:b + 1].tobytes() and kb.tobytes() == k[b:b + 1].tobytes()


def test_multi_errors():
    a, b = _cache(), _cache(head_dim=32)
    q = np.zeros((2, 1, 3, 64), np.float32)
    with pytest.raises(ValueError):
        rope_ext.apply_rope_qk_multi_([a], [0, 1], q)
    with pytest.raises(posenc.PosencError, match="caches\\[1\\] has head_dim 32"):
        rope_ext.apply_rope_qk_multi_([a, b], [0, 1], q)


def test_mrope_section_from_hf_config():
    qwen2_vl = {"model_type": "qwen2_vl", "rope_theta": 1000000.0,
                "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}
    assert rope_ext.mrope_section_from_hf_config(qwen2_vl) == ((16, 24, 24), False)
    qwen3_vl = {"text_config": {"rope_scaling": {"mrope_interleaved": True,
                                                 "mrope_section": [24, 20, 20],
                                                 "rope_type": "default"}}}
    assert rope_ext.mrope_section_from_hf_config(qwen3_vl) == ((24, 20, 20), True)
    with pytest.raises(posenc.PosencError, match="no mrope_section"):
        rope_ext.mrope_section_from_hf_config({"rope_theta": 10000.0})
