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
