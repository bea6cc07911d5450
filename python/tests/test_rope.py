"""RopeCache.apply_/shift_k_/rerotate_k_ against a float64 NumPy reference,
with every dtype and strided views."""
import numpy as np
import pytest

import posenc
from conftest import (rope_reference, default_inv_freq, grid, f32_to_bf16_bits,
                      bf16_bits_to_f32)

F32_TOL = 2e-5  # float32 data, |x| <~ 5: a few roundings of the product


@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("rotary_dim", [None, 32, 2])      # 2: one pair, the least there is
def test_inv_freq_and_apply_match_reference(rng, style, rotary_dim):
    cache = posenc.RopeCache(head_dim=64, rotary_dim=rotary_dim, style=style,
                             rope_theta=10000.0, max_positions=1024)
    rd = rotary_dim or 64
    inv = default_inv_freq(10000.0, rd)
    np.testing.assert_allclose(cache.inv_freq, inv.astype(np.float32), rtol=2e-7)
    assert cache.attention_factor == 1.0 and cache.softmax_scale == 1.0

    q = rng.standard_normal((2, 4, 7, 64), dtype=np.float32)
    k = rng.standard_normal((2, 2, 7, 64), dtype=np.float32)  # GQA: 2 KV heads
    pos = rng.integers(0, 1024, size=(2, 7))
    want_q = rope_reference(q, inv, pos, style, rd)
    want_k = rope_reference(k, inv, pos, style, rd)
    cache.apply_(q, k, positions=pos)
    np.testing.assert_allclose(q, want_q, atol=F32_TOL)
    np.testing.assert_allclose(k, want_k, atol=F32_TOL)
    # partial rotary: the tail channels are untouched bit for bit
    if rotary_dim:
        assert np.array_equal(q[..., rd:], want_q[..., rd:].astype(np.float32))


def test_positions_forms(rng):
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    inv = default_inv_freq(10000.0, 16)
    x = rng.standard_normal((3, 2, 5, 16), dtype=np.float32)
    # int64 arrays are read in place (C-contiguous [B, T], [1, T] and [T]);
    # the others (lists, other integer types, strided views) converted first
    for positions in (None, np.arange(10, 15), [[1, 2, 3, 4, 5]] * 3, np.arange(20, 25)[None],
                      np.arange(15).reshape(3, 5), np.arange(30).reshape(3, 10)[:, ::2],
                      np.arange(15, dtype=np.int32).reshape(3, 5), np.arange(5, dtype=np.uint8)):
        y = x.copy()
        cache.apply_(y, positions=positions)
        want = rope_reference(x, inv, grid(positions, 3, 5))
        np.testing.assert_allclose(y, want, atol=F32_TOL)


def test_k_only_and_inverse_round_trip(rng):
    cache = posenc.RopeCache(head_dim=32, max_positions=256)
    k = rng.standard_normal((1, 3, 9, 32), dtype=np.float32)
    k0 = k.copy()
    pos = np.arange(100, 109)
    cache.apply_(None, k, positions=pos)
    assert not np.allclose(k, k0)
    cache.apply_(None, k, positions=pos, inverse=True)
    np.testing.assert_allclose(k, k0, atol=F32_TOL)


def test_strided_views_transpose_packed_qkv_and_negative(rng):
    cache = posenc.RopeCache(head_dim=32, max_positions=512)
    inv = default_inv_freq(10000.0, 32)
    B, T, H, D = 2, 6, 4, 32
    # A [B, T, 3, H, D] packed QKV buffer: q and k are strided views.
    qkv = rng.standard_normal((B, T, 3, H, D), dtype=np.float32)
    orig = qkv.copy()
    q = qkv[:, :, 0].transpose(0, 2, 1, 3)   # [B, H, T, D], not contiguous
    k = qkv[:, :, 1].transpose(0, 2, 1, 3)
    assert not q.flags.c_contiguous
    pos = rng.integers(0, 512, size=(B, T))
    cache.apply_(q, k, positions=pos)
    want_q = rope_reference(orig[:, :, 0].transpose(0, 2, 1, 3), inv, pos)
    want_k = rope_reference(orig[:, :, 1].transpose(0, 2, 1, 3), inv, pos)
    np.testing.assert_allclose(qkv[:, :, 0].transpose(0, 2, 1, 3), want_q, atol=F32_TOL)
    np.testing.assert_allclose(qkv[:, :, 1].transpose(0, 2, 1, 3), want_k, atol=F32_TOL)
    assert np.array_equal(qkv[:, :, 2], orig[:, :, 2])  # v untouched

    # Reversed tokens (negative stride) and every other head.
    x = rng.standard_normal((1, 8, T, D), dtype=np.float32)
    x0 = x.copy()
    view = x[:, ::2, ::-1]
    cache.apply_(view, positions=np.arange(T))
    want = rope_reference(x0[:, ::2, ::-1], inv, grid(np.arange(T), 1, T))
    np.testing.assert_allclose(x[:, ::2, ::-1], want, atol=F32_TOL)
    assert np.array_equal(x[:, 1::2], x0[:, 1::2])


def test_float16(rng):
    cache = posenc.RopeCache(head_dim=64, max_positions=2048)
    inv = default_inv_freq(10000.0, 64)
    x = rng.standard_normal((1, 4, 16, 64)).astype(np.float16)
    pos = rng.integers(0, 2048, size=(1, 16))
    want = rope_reference(x, inv, pos)
    cache.apply_(x, positions=pos)
    # computed in float32, rounded once: within half an f16 ulp (+ f32 noise)
    err = np.abs(x.astype(np.float64) - want)
    ulp = np.spacing(np.abs(want).astype(np.float16)).astype(np.float64)
    assert np.all(err <= 0.5 * ulp + 1e-5)


def test_bfloat16_as_uint16(rng):
    cache = posenc.RopeCache(head_dim=64, max_positions=2048)
    inv = default_inv_freq(10000.0, 64)
    xf = rng.standard_normal((2, 2, 8, 64), dtype=np.float32)
    bits = f32_to_bf16_bits(xf)
    pos = rng.integers(0, 2048, size=(2, 8))
    want = rope_reference(bf16_bits_to_f32(bits), inv, pos)
    cache.apply_(bits, positions=pos, dtype="bf16")
    got = bf16_bits_to_f32(bits).astype(np.float64)
    # rounded once to bfloat16 (8 significant bits)
    assert np.all(np.abs(got - want) <= np.abs(want) * 2.0**-8 + 1e-5)
    # the same through the f32 path, then rounded: identical bits
    y = bf16_bits_to_f32(f32_to_bf16_bits(xf))
    cache.apply_(y, positions=pos)
    assert np.array_equal(f32_to_bf16_bits(y), bits)


def test_bfloat16_ml_dtypes(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    cache = posenc.RopeCache(head_dim=32, max_positions=64)
    x = rng.standard_normal((1, 2, 4, 32), dtype=np.float32).astype(ml_dtypes.bfloat16)
    bits = x.view(np.uint16).copy()
    cache.apply_(x)
    cache.apply_(bits, dtype="bf16")
    assert np.array_equal(x.view(np.uint16), bits)


def test_shift_k_equals_rotation_at_shifted_positions(rng):
    cache = posenc.RopeCache(head_dim=64, max_positions=4096)
    raw = rng.standard_normal((2, 2, 10, 64), dtype=np.float32)
    pos = rng.integers(500, 1000, size=(2, 10))
    deltas = rng.integers(-400, 400, size=(2, 10))
    k = raw.copy()
    cache.apply_(None, k, positions=pos)
    cache.shift_k_(k, deltas)
    direct = raw.copy()
    cache.apply_(None, direct, positions=pos + deltas)
    np.testing.assert_allclose(k, direct, atol=F32_TOL)
    # one scalar delta for every token (a context shift of the whole cache)
    k2 = direct.copy()
    cache.shift_k_(k2, -100)
    again = raw.copy()
    cache.apply_(None, again, positions=pos + deltas - 100)
    np.testing.assert_allclose(k2, again, atol=F32_TOL)


def test_rerotate_k(rng):
    a = posenc.RopeCache(head_dim=32, rope_theta=10000.0, max_positions=0)
    b = posenc.RopeCache(head_dim=32, rope_theta=10000.0, max_positions=0,
                         rope_scaling={"rope_type": "linear", "factor": 4.0})
    raw = rng.standard_normal((1, 2, 5, 32), dtype=np.float32)
    pos = np.arange(3000, 3005)
    k = raw.copy()
    a.apply_(None, k, positions=pos)
    posenc.rerotate_k_(a, b, k, positions=pos)
    want = rope_reference(raw, default_inv_freq(1e4, 32) / 4, grid(pos, 1, 5))
    np.testing.assert_allclose(k, want, atol=5e-5)
    assert posenc.RopeCache.rerotate_k_ is posenc.rerotate_k_


def test_on_the_fly_cache_allows_large_positions(rng):
    cache = posenc.RopeCache(head_dim=16, max_positions=0)
    x = rng.standard_normal((1, 1, 3, 16), dtype=np.float32)
    pos = np.array([10**6, 10**7, 2**40])
    want = rope_reference(x, default_inv_freq(1e4, 16), grid(pos, 1, 3))
    cache.apply_(x, positions=pos)
    np.testing.assert_allclose(x, want, atol=1e-4)


def test_cos_sin_row():
    cache = posenc.RopeCache(head_dim=8, max_positions=16)
    c, s = cache.cos_sin(5)
    inv = default_inv_freq(1e4, 8)
    np.testing.assert_allclose(c, np.cos(5 * inv), atol=1e-7)
    np.testing.assert_allclose(s, np.sin(5 * inv), atol=1e-7)
    with pytest.raises(posenc.PosencError) as e:
        cache.cos_sin(16)
    assert e.value.status == posenc.Status.ERR_POSITION_OUT_OF_RANGE
    # int64 arguments: the range named before ctypes sees the value
    with pytest.raises(ValueError, match=r"^position = 9223372036854775808 is outside "
                                         r"\[-9223372036854775808, 9223372036854775807\]$"):
        cache.cos_sin(2**63)
    with pytest.raises(ValueError, match=r"^max_positions = 9223372036854775808 is outside the "
                                         r"int64 range$"):
        posenc.RopeCache(head_dim=8, max_positions=2**63)


def test_rerotate_longrope_short_to_long(rng):
    # Phi-3: keys cached with the short factors must move to the long ones
    # when the context passes original_max_position_embeddings.
    half = 16
    rs = {"rope_type": "longrope", "original_max_position_embeddings": 64,
          "short_factor": list(1.0 + np.arange(half) * 0.1),
          "long_factor": list(1.0 + np.arange(half) * 0.5)}
    short = posenc.RopeCache(head_dim=32, max_positions=0, rope_scaling=rs, seq_len=64,
                             max_position_embeddings=1024)
    long = posenc.RopeCache(head_dim=32, max_positions=0, rope_scaling=rs, seq_len=65,
                            max_position_embeddings=1024)
    assert not np.array_equal(short.inv_freq, long.inv_freq)
    raw = rng.standard_normal((1, 2, 40, 32), dtype=np.float32)
    pos = np.arange(40)
    k = raw.copy()
    short.apply_(None, k, positions=pos)
    posenc.rerotate_k_(short, long, k, positions=pos)
    direct = raw.copy()
    long.apply_(None, direct, positions=pos)
    np.testing.assert_allclose(k, direct, atol=5e-5)


def test_busy_pool_from_two_python_threads(rng):
    # A pool runs one call at a time: the loser gets PosencError, never a hang.
    import threading
    try:
        pool = posenc.ThreadPool(2)
    except posenc.PosencError as e:
        pytest.skip(e.message)
    cache = posenc.RopeCache(head_dim=128, max_positions=4096)
    xs = [rng.standard_normal((4, 16, 512, 128), dtype=np.float32) for _ in range(2)]
    errors, start = [], threading.Barrier(2)

    def work(x):
        start.wait()
        for _ in range(20):
            try:
                cache.apply_(x, pool=pool)
            except posenc.PosencError as e:
                errors.append(e)

    threads = [threading.Thread(target=work, args=(x,)) for x in xs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    for e in errors:
        assert e.status == posenc.Status.ERR_BUSY and "busy" in e.message.lower()
        assert isinstance(e, posenc.BusyError)
    pool.close()
