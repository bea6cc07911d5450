"""ThreadPool: results identical to the calling thread alone, lifetime."""
import threading

import numpy as np
import pytest

import posenc


def make_pool(n):
    try:
        return posenc.ThreadPool(n)
    except posenc.PosencError as e:  # a library built before the pool landed
        if e.status == posenc.Status.ERR_UNSUPPORTED:
            pytest.skip(e.message)
        raise


@pytest.mark.parametrize("n", [1, 2, 3, 0])
def test_pool_results_bit_identical(rng, n):
    cache = posenc.RopeCache(head_dim=64, max_positions=512)
    q = rng.standard_normal((3, 8, 33, 64), dtype=np.float32)
    k = rng.standard_normal((3, 2, 33, 64), dtype=np.float32)
    pos = rng.integers(0, 512, size=(3, 33))
    q1, k1 = q.copy(), k.copy()
    cache.apply_(q1, k1, positions=pos)
    with make_pool(n) as pool:
        assert pool.n_threads >= 1
        if n:
            assert pool.n_threads == n
        cache.apply_(q, k, positions=pos, pool=pool)
        assert np.array_equal(q, q1) and np.array_equal(k, k1)
        k2 = k1.copy()
        cache.shift_k_(k1, -7)
        cache.shift_k_(k2, -7, pool=pool)
        assert np.array_equal(k1, k2)
        if posenc._lib.has_symbol("pe_alibi_add_bias"):
            s = rng.standard_normal((2, 8, 16, 64), dtype=np.float32)
            s1 = s.copy()
            posenc.alibi_add_bias_(s, causal=True)
            posenc.alibi_add_bias_(s1, causal=True, pool=pool)
            assert np.array_equal(s, s1)
    assert pool.closed
    with pytest.raises(ValueError):
        cache.apply_(q, pool=pool)


def test_pool_close_idempotent_and_repr():
    pool = make_pool(2)
    assert "2 threads" in repr(pool)
    pool.close()
    pool.close()
    assert "closed" in repr(pool)


def test_pool_bad_size():
    with pytest.raises(ValueError):
        posenc.ThreadPool(-1)
    with pytest.raises(ValueError):
        posenc.ThreadPool(5000)


def test_python_threads_share_a_cache(rng):
    # A cache is immutable: concurrent apply_ from Python threads (ctypes
    # releases the GIL) gives the same result as one thread.
    cache = posenc.RopeCache(head_dim=32, max_positions=128)
    xs = [rng.standard_normal((1, 4, 64, 32), dtype=np.float32) for _ in range(8)]
    want = [x.copy() for x in xs]
    for w in want:
        cache.apply_(w)
    threads = [threading.Thread(target=cache.apply_, args=(x,)) for x in xs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, w in zip(xs, want):
        assert np.array_equal(x, w)


def test_every_call_reads_its_pool_argument(rng):
    # A closed pool is refused by each call that takes one, before anything
    # is written: the pool given is the one read (not another argument).
    pool = make_pool(2)
    pool.close()
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    other = posenc.RopeCache(head_dim=16, rope_theta=5e5, max_positions=64)
    B, H, T = 1, 2, 3
    q = rng.standard_normal((B, H, T, 16)).astype(np.float32)
    k = q[:, :1].copy()
    pos = np.arange(T)[None]
    ones = np.ones(16, np.float32)
    scores = np.zeros((B, H, T, 8), np.float32)
    x = np.zeros((B, T, 16), np.float32)
    kc = np.zeros((2, 1, 4, 16), np.float32)
    slots = np.arange(T)[None]
    mla = posenc.MLA(16, 0, 48, 48, kv_norm="none")
    mq = np.zeros((B, H, T, 64), np.float32)
    mkv = np.zeros((B, T, 64), np.float32)
    mc = np.zeros((2, 4, 64), np.float32)
    calls = {
        "apply_": lambda p: cache.apply_(q, k, pos, pool=p),
        "shift_k_": lambda p: cache.shift_k_(k, 2, pool=p),
        "rerotate_k_": lambda p: posenc.RopeCache.rerotate_k_(cache, other, k, pos, pool=p),
        "apply_mrope_": lambda p: posenc.apply_mrope_(cache, q, k, np.stack([pos] * 3),
                                                      (2, 3, 3), pool=p),
        "apply_rope_qk_multi_": lambda p: posenc.apply_rope_qk_multi_([cache], [0], q, k, pos,
                                                                      pool=p),
        "apply_rope_qk_store_": lambda p: posenc.apply_rope_qk_store_(cache, k, kc, slots, q=q,
                                                                      positions=pos, pool=p),
        "qk_norm_rope_": lambda p: posenc.qk_norm_rope_(cache, q, k, q_weight=ones,
                                                        k_weight=ones, pool=p),
        "qk_norm_rope_store_": lambda p: posenc.qk_norm_rope_store_(
            cache, k, kc, slots, q=q, q_weight=ones, k_weight=ones, pool=p),
        "alibi_add_bias_": lambda p: posenc.alibi_add_bias_(scores, pool=p),
        "t5_add_bias_": lambda p: posenc.t5_add_bias_(scores, np.ones((32, H), np.float32),
                                                      pool=p),
        "sinusoidal_add_": lambda p: posenc.sinusoidal_add_(x, pool=p),
        "learned_add_": lambda p: posenc.learned_add_(x, np.ones((8, 16), np.float32), pool=p),
        "mla_rope_store_": lambda p: posenc.mla_rope_store_(cache, mla, mq, mkv, mc, slots,
                                                            pool=p),
    }
    arrays = (q, k, scores, x, kc, mq, mc)
    for name, call in calls.items():
        before = [a.copy() for a in arrays]
        with pytest.raises(ValueError, match="closed"):
            call(pool)
        for a, b in zip(arrays, before):
            assert np.array_equal(a, b), name + " wrote before refusing the pool"
        call(None)                                   # the same call runs without it
