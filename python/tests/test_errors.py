"""Bad arguments raise TypeError/ValueError (checked in Python) or PosencError
(checked by the library) - and in every case nothing has been written."""
import numpy as np
import pytest

import posenc


@pytest.fixture
def cache():
    return posenc.RopeCache(head_dim=16, max_positions=32)


@pytest.fixture
def qk(rng):
    q = rng.standard_normal((2, 4, 3, 16), dtype=np.float32)
    k = rng.standard_normal((2, 2, 3, 16), dtype=np.float32)
    return q, k


def unchanged_after(exc, fn, *arrays):
    before = [a.copy() for a in arrays]
    with pytest.raises(exc) as e:
        fn()
    for a, b in zip(arrays, before):
        assert np.array_equal(a, b, equal_nan=True), "an array was written before the error"
    return e.value


def test_read_only(cache, qk):
    q, k = qk
    k.flags.writeable = False
    unchanged_after(ValueError, lambda: cache.apply_(q, k), q, k)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.uint16, np.complex64, np.uint8,
                                   np.int8])
def test_wrong_dtype(cache, qk, dtype):
    q, k = qk
    bad = k.astype(dtype)
    unchanged_after(TypeError, lambda: cache.apply_(q, bad), q, bad)


def test_dtype_argument_mismatch(cache, qk):
    q, _ = qk
    unchanged_after(TypeError, lambda: cache.apply_(q, dtype="bf16"), q)
    unchanged_after(TypeError, lambda: cache.apply_(q, dtype="float16"), q)
    unchanged_after(TypeError, lambda: cache.apply_(q, dtype="int8"), q)


def test_not_an_ndarray(cache):
    with pytest.raises(TypeError):
        cache.apply_([[[[0.0] * 16]]])


def test_wrong_ndim_and_head_dim(cache, qk, rng):
    q, k = qk
    unchanged_after(ValueError, lambda: cache.apply_(q, k[0]), q, k)
    other = rng.standard_normal((2, 2, 3, 8), dtype=np.float32)
    unchanged_after(ValueError, lambda: cache.apply_(q, other), q, other)


def test_five_dimensions_are_refused(cache, rng):
    # q and k are 4-D; a 5-D array is not read as its first four dimensions
    # (here a valid q of 16 channels)
    q5 = rng.standard_normal((1, 2, 3, 16, 1), dtype=np.float32)
    e = unchanged_after(ValueError, lambda: cache.apply_(q5), q5)
    assert "q must have 4 dimensions, got shape (1, 2, 3, 16, 1)" in str(e)


def test_strided_positions_are_read_as_their_values(cache, qk):
    q, k = qk
    want_q, want_k = q.copy(), k.copy()
    pos = np.array([[0, 5, 9], [30, 2, 17]])
    cache.apply_(want_q, want_k, positions=pos)
    wide = np.zeros((2, 6), np.int64)
    wide[:, ::2] = pos
    for view in (wide[:, ::2], np.ascontiguousarray(pos.T).T,     # strided, transposed,
                 pos.astype(">i8")):                               # big-endian
        a, b = q.copy(), k.copy()
        cache.apply_(a, b, positions=view)
        assert a.tobytes() == want_q.tobytes() and b.tobytes() == want_k.tobytes()


def test_batch_or_tokens_mismatch(cache, qk):
    q, k = qk
    k2 = np.ascontiguousarray(k[:, :, :2])
    e = unchanged_after(ValueError, lambda: cache.apply_(q, k2), q, k2)
    assert "differ in batch or tokens" in str(e) and "look like" not in str(e)
    # [batch, tokens, heads, head_dim] arrays: the message says how to pass them
    bq, bk = q.transpose(0, 2, 1, 3).copy(), k.transpose(0, 2, 1, 3).copy()
    e = unchanged_after(ValueError, lambda: cache.apply_(bq, bk), bq, bk)
    assert "q (2, 3, 4, 16) and k (2, 3, 2, 16) differ in batch or tokens as [batch, heads, " \
           "tokens, head_dim]; they look like [batch, tokens, heads, head_dim]" in str(e)
    assert ".transpose(0, 2, 1, 3)" in str(e)


def test_inner_stride_not_one(cache, rng):
    buf = rng.standard_normal((1, 1, 2, 32), dtype=np.float32)
    view = buf[..., ::2]
    err = unchanged_after(ValueError, lambda: cache.apply_(view), buf)
    assert str(err) == ("q: the last dimension must be contiguous (stride 1 element, got 2); "
                        "other dimensions may have any stride")
    # a stride that is not a multiple of the itemsize (a byte-offset view)
    raw = np.zeros(256, dtype=np.uint8)
    odd = np.ndarray((1, 1, 2, 16), dtype=np.float32, buffer=raw, strides=(0, 0, 66, 4))
    with pytest.raises(ValueError, match="^q is not aligned to its itemsize$"):
        cache.apply_(odd)
    assert not raw.any()


def test_positions_errors(cache, qk):
    q, k = qk
    unchanged_after(TypeError, lambda: cache.apply_(q, k, positions=np.zeros((2, 3))), q, k)
    unchanged_after(ValueError, lambda: cache.apply_(q, k, positions=np.zeros((3, 2), int)), q, k)
    # [3, tokens] int64 for a batch of 2: neither [batch, tokens] nor one row
    three = np.zeros((3, 3), np.int64)
    e = unchanged_after(ValueError, lambda: cache.apply_(q, k, positions=three), q, k)
    assert "(3, 3)" in str(e)
    unchanged_after(ValueError, lambda: cache.apply_(q, k, positions=5), q, k)
    unchanged_after(ValueError, lambda: cache.apply_(q, k, positions=[2**64 - 1] * 3), q, k)


def test_position_out_of_range_from_library(cache, qk):
    q, k = qk
    pos = np.array([[0, 1, 2], [3, 31, 32]])
    err = unchanged_after(posenc.PosencError, lambda: cache.apply_(q, k, positions=pos), q, k)
    assert err.status == posenc.Status.ERR_POSITION_OUT_OF_RANGE
    assert "32" in err.message and "max_positions" in err.message
    err = unchanged_after(posenc.PosencError, lambda: cache.apply_(q, k, positions=-pos), q, k)
    assert err.status == posenc.Status.ERR_POSITION_OUT_OF_RANGE
    assert str(err) == err.message + " (PE_ERR_POSITION_OUT_OF_RANGE)"


def test_an_error_without_a_sentence_is_named_by_its_status():
    assert str(posenc.PosencError(3, "")) == "PE_ERR_SHAPE"
    assert str(posenc.PosencError(99, None)) == "PE_99"      # a status newer than the binding


def test_aliasing_q_and_k(cache, qk):
    q, _ = qk
    err = unchanged_after(ValueError, lambda: cache.apply_(q, q), q)
    assert "q and k share elements" in str(err)
    # overlapping, not identical: k is q shifted by one token
    buf = np.random.default_rng(1).standard_normal((1, 1, 5, 16), dtype=np.float32)
    unchanged_after(ValueError, lambda: cache.apply_(buf[:, :, :4], buf[:, :, 1:]), buf)
    # a view with a negative stride spans the bytes below its start
    rev = buf[:, :, ::-1]
    err = unchanged_after(ValueError, lambda: cache.apply_(rev[:, :, :2], buf[:, :, 3:]), buf)
    assert "q and k share elements" in str(err)


def test_packed_qkv_views_are_not_overlap(cache, rng):
    # q and k columns of one [B, T, (Hq + 2 Hk) * D] projection interleave in
    # memory but share no element: accepted (an exact test, not a span test).
    B, T, Hq, Hk, D = 2, 3, 4, 2, 16
    qkv = rng.standard_normal((B, T, (Hq + 2 * Hk) * D), dtype=np.float32)
    q = qkv[..., :Hq * D].reshape(B, T, Hq, D).transpose(0, 2, 1, 3)
    k = qkv[..., Hq * D:(Hq + Hk) * D].reshape(B, T, Hk, D).transpose(0, 2, 1, 3)
    v0 = qkv[..., (Hq + Hk) * D:].copy()
    assert np.shares_memory(q, qkv) and np.shares_memory(k, qkv)
    cache.apply_(q, k)
    assert np.array_equal(qkv[..., (Hq + Hk) * D:], v0)


def test_uint64_position_beyond_int64_is_named(cache, qk):
    # 2**63 must not become a negative int64 before the check
    q, _ = qk
    big = np.full((2, 3), 2**63, dtype=np.uint64)
    err = unchanged_after(ValueError, lambda: cache.apply_(q, positions=big), q)
    assert "9223372036854775808" in str(err) and "int64" in str(err)
    unchanged_after(ValueError, lambda: cache.shift_k_(q, np.uint64(2**63)), q)


def test_aliasing_strides(cache):
    buf = np.zeros((1, 4, 16), np.float32)
    # heads overlap in memory: stride 8 elements < 16 spanned per head
    view = np.lib.stride_tricks.as_strided(buf, shape=(1, 3, 2, 16), strides=(256, 32, 64, 4))
    err = unchanged_after(posenc.PosencError, lambda: cache.apply_(view), buf)
    assert err.status == posenc.Status.ERR_SHAPE


def test_shift_k_errors(cache, qk):
    _, k = qk
    unchanged_after(ValueError, lambda: cache.shift_k_(k, None), k)
    unchanged_after(TypeError, lambda: cache.shift_k_(k, 1.5), k)
    unchanged_after(ValueError, lambda: cache.shift_k_(k, np.zeros((2, 4), int)), k)


def test_bad_rope_scaling(recwarn):
    with pytest.raises(ValueError):
        posenc.RopeCache(head_dim=16, rope_scaling={"rope_type": "nonsense"})
    with pytest.raises(ValueError):
        posenc.RopeCache(head_dim=16, style="sideways")
    with pytest.raises(posenc.PosencError, match="short_factor has 3 entries"):
        posenc.RopeCache(head_dim=16, rope_scaling={"rope_type": "longrope",
                                                    "original_max_position_embeddings": 64, "factor": 1.0,
                                                    "short_factor": [1.0] * 3,
                                                    "long_factor": [1.0] * 8})
    with pytest.warns(UserWarning, match="factr") as seen:
        posenc.RopeCache(head_dim=16, max_positions=8,
                         rope_scaling={"rope_type": "linear", "factor": 2.0, "factr": 2.0})
    assert seen[0].filename == __file__   # the warning points at the caller's line
    with pytest.raises(posenc.PosencError) as e:
        posenc.RopeCache(head_dim=16, rope_scaling={"rope_type": "linear", "factor": 0.5})
    assert e.value.status == posenc.Status.ERR_INVALID_ARGUMENT
    assert "factor" in e.value.message


def test_closed_objects(qk):
    q, _ = qk
    c = posenc.RopeCache(head_dim=16, max_positions=8)
    c.close()
    with pytest.raises(ValueError):
        c.apply_(q)
    with pytest.raises(TypeError):
        posenc.RopeCache(head_dim=16, max_positions=8).apply_(q, pool="4 threads")
