"""ALiBi, T5 relative bias, sinusoidal and learned embeddings against float64
NumPy transcriptions of the papers' / HF's formulas."""
import math

import numpy as np
import pytest

import posenc
from conftest import Sub, f32_to_bf16_bits, bf16_bits_to_f32


# ---- ALiBi -------------------------------------------------------------------

def alibi_slopes_reference(n, max_bias=8.0):
    c = 2 ** int(math.floor(math.log2(n)))
    slopes = [2.0 ** (-max_bias * k / c) for k in range(1, c + 1)]
    if c != n:
        slopes += [2.0 ** (-max_bias * k / (2 * c)) for k in range(1, 2 * (n - c), 2)]
    return np.array(slopes)


def alibi_reference(scores, slopes, q_positions=None, causal=False):
    B, H, Q, K = scores.shape
    qpos = (np.broadcast_to(np.arange(K - Q, K), (B, Q)) if q_positions is None
            else np.broadcast_to(q_positions, (B, Q)))
    j = np.arange(K)
    dist = np.abs(qpos[:, None, :, None] - j)
    out = scores.astype(np.float64) - np.asarray(slopes, np.float64)[None, :, None, None] * dist
    if causal:
        out = np.where(j > qpos[:, None, :, None], -np.inf, out)
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 8, 12, 16, 24, 40, 96])
def test_alibi_slopes(n):
    np.testing.assert_allclose(posenc.alibi_slopes(n), alibi_slopes_reference(n), rtol=2e-7)
    np.testing.assert_allclose(posenc.alibi_slopes(n, max_bias=4.0),
                               alibi_slopes_reference(n, 4.0), rtol=2e-7)


def test_alibi_slopes_bloom_values():
    # Press et al. (ALiBi), BLOOM's build_alibi_tensor: n=1 -> 2^-8; n=3 -> [2^-4, 2^-8, 2^-2]
    assert posenc.alibi_slopes(1).tolist() == [2.0 ** -8]
    assert posenc.alibi_slopes(3).tolist() == [2.0 ** -4, 2.0 ** -8, 2.0 ** -2]
    with pytest.raises(posenc.PosencError) as e:
        posenc.alibi_slopes(0)
    assert e.value.status == posenc.Status.ERR_INVALID_ARGUMENT


@pytest.mark.parametrize("causal", [False, True])
def test_alibi_add_bias(rng, causal):
    s = rng.standard_normal((2, 12, 5, 9), dtype=np.float32)
    want = alibi_reference(s, alibi_slopes_reference(12), causal=causal)
    posenc.alibi_add_bias_(s, causal=causal)
    np.testing.assert_allclose(s, want, rtol=1e-6, atol=1e-6)


def test_alibi_add_bias_positions_slopes_and_strides(rng):
    # [B, Q, H, K] buffer viewed as [B, H, Q, K]; continuous-batching positions;
    # a head shard's own slopes.
    buf = rng.standard_normal((2, 3, 4, 16), dtype=np.float32)
    view = buf.transpose(0, 2, 1, 3)
    before = view.copy()
    slopes = np.array([0.5, 0.25, 0.125, 0.0625])
    qpos = np.array([[3, 7, 15], [0, 1, 2]])
    posenc.alibi_add_bias_(view, slopes=slopes, q_positions=qpos, causal=True)
    np.testing.assert_allclose(view, alibi_reference(before, slopes, qpos, True), atol=1e-6)


def test_alibi_f16_bf16(rng):
    s32 = rng.standard_normal((1, 4, 2, 8), dtype=np.float32)
    want = alibi_reference(s32.astype(np.float16), alibi_slopes_reference(4))
    s16 = s32.astype(np.float16)
    posenc.alibi_add_bias_(s16)
    np.testing.assert_allclose(s16, want, rtol=1e-3, atol=1e-3)
    bits = f32_to_bf16_bits(s32)
    want = alibi_reference(bf16_bits_to_f32(bits), alibi_slopes_reference(4))
    posenc.alibi_add_bias_(bits, dtype="bf16")
    np.testing.assert_allclose(bf16_bits_to_f32(bits), want, rtol=2.0**-8, atol=1e-6)


def test_alibi_errors_write_nothing(rng):
    s = rng.standard_normal((1, 4, 2, 8), dtype=np.float32)
    s0 = s.copy()
    with pytest.raises(ValueError):
        posenc.alibi_add_bias_(s, slopes=[1.0, 2.0])  # 2 slopes for 4 heads
    with pytest.raises(posenc.PosencError) as e:
        posenc.alibi_add_bias_(s, q_positions=[[0, -1]])
    assert e.value.status == posenc.Status.ERR_POSITION_OUT_OF_RANGE
    assert np.array_equal(s, s0)


# ---- T5 ----------------------------------------------------------------------

def t5_bucket_reference(rp, bidirectional=True, nb=32, md=128):
    ret = 0
    if bidirectional:
        nb //= 2
        ret += nb if rp > 0 else 0
        n = abs(rp)
    else:
        n = max(-rp, 0)
    exact = nb // 2
    if n < exact:
        return ret + n
    large = exact + int(math.log(n / exact) / math.log(md / exact) * (nb - exact))
    return ret + min(large, nb - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("nb,md", [(32, 128), (64, 256), (8, 20)])
def test_t5_bucket(bidirectional, nb, md):
    rel = np.arange(-300, 301)
    want = [t5_bucket_reference(int(r), bidirectional, nb, md) for r in rel]
    got = posenc.t5_bucket(rel, bidirectional, nb, md)
    assert got.dtype == np.int32 and got.tolist() == want
    assert posenc.t5_bucket(-5, bidirectional, nb, md) == t5_bucket_reference(-5, bidirectional, nb, md)
    assert posenc.t5_bucket(10**12, bidirectional, nb, md) == t5_bucket_reference(10**12, bidirectional, nb, md)


def test_t5_bucket_defaults_are_t5s():
    # T5Config: relative_attention_num_buckets 32, relative_attention_max_distance 128
    rel = np.arange(-300, 301)
    assert posenc.t5_bucket(rel).tolist() == [t5_bucket_reference(int(r)) for r in rel]


def test_t5_bucket_invalid():
    with pytest.raises(posenc.PosencError):
        posenc.t5_bucket(3, True, num_buckets=1)


@pytest.mark.parametrize("bidirectional,causal", [(True, False), (False, False), (False, True)])
def test_t5_add_bias(rng, bidirectional, causal):
    B, H, Q, K, nb, md = 2, 3, 4, 40, 32, 128
    scores = rng.standard_normal((B, H, Q, K), dtype=np.float32)
    table = rng.standard_normal((nb, H)).astype(np.float32)
    qpos = rng.integers(0, K, size=(B, Q))
    want = scores.astype(np.float64)
    for b in range(B):
        for i in range(Q):
            for j in range(K):
                bucket = t5_bucket_reference(j - int(qpos[b, i]), bidirectional, nb, md)
                want[b, :, i, j] += table[bucket]
                if causal and j > qpos[b, i]:
                    want[b, :, i, j] = -np.inf
    posenc.t5_add_bias_(scores, table, bidirectional=bidirectional, max_distance=md,
                        q_positions=qpos, causal=causal)
    np.testing.assert_allclose(scores, want, rtol=1e-6, atol=1e-6)


def test_alibi_slopes_of_another_length_are_refused():
    scores = np.zeros((1, 3, 2, 4), np.float32)
    for n in (2, 4):              # float32, read in place: the length is checked all the same
        with pytest.raises(ValueError, match=r"slopes has shape \(%d,\), expected \(3,\)" % n):
            posenc.alibi_add_bias_(scores, np.ones(n, np.float32))
    for bad in (np.ones(3, np.complex64), np.array(["1", "2", "3"]), np.ones(3, bool)):
        with pytest.raises(TypeError, match=r"^slopes must be real numbers, got dtype %s$"
                                            % bad.dtype):
            posenc.alibi_add_bias_(scores, bad)
    assert not scores.any()


def test_t5_add_bias_table_shape_checked(rng):
    scores = np.zeros((1, 3, 2, 4), np.float32)
    with pytest.raises(ValueError):
        posenc.t5_add_bias_(scores, np.zeros((32, 4)))   # 4 heads in table, 3 in scores
    with pytest.raises(ValueError):
        posenc.t5_add_bias_(scores, np.zeros((32, 3)), num_buckets=16)
    # float32 tables, read in place by the compiled module: the rows must be
    # num_buckets, not any count (nor max_distance, 128 here)
    for rows, nb in ((16, 32), (128, 32), (32, 0)):
        with pytest.raises(ValueError, match=r"table has shape \(%d, 3\), expected "
                           r"\[num_buckets %d, heads 3\]" % (rows, nb)):
            posenc.t5_add_bias_(scores, np.ones((rows, 3), np.float32), num_buckets=nb)
    assert not scores.any()


# ---- sinusoidal --------------------------------------------------------------

def sinusoidal_reference(n, d, base=10000.0, concat=False):
    p = np.arange(n, dtype=np.float64)[:, None]
    out = np.zeros((n, d))
    if not concat:
        j = np.arange(d)
        ang = p * base ** (-(2.0 * (j // 2)) / d)
        out[:] = np.where(j % 2 == 0, np.sin(ang), np.cos(ang))
    else:
        h = d // 2
        w = np.exp(-np.arange(h) * math.log(base) / (h - 1))
        out[:, :h] = np.sin(p * w)
        out[:, h:2 * h] = np.cos(p * w)
    return out


@pytest.mark.parametrize("d", [4, 7, 64, 512])
@pytest.mark.parametrize("concat", [False, True])
def test_sinusoidal_table(d, concat):
    got = posenc.sinusoidal_table(200, d, concat=concat)
    assert got.shape == (200, d) and got.dtype == np.float32
    np.testing.assert_allclose(got, sinusoidal_reference(200, d, concat=concat), atol=2e-7)


def test_sinusoidal_add_3d_and_4d(rng):
    x = rng.standard_normal((2, 6, 32), dtype=np.float32)
    x0 = x.astype(np.float64)
    pos = np.array([[0, 1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 15]])
    posenc.sinusoidal_add_(x, positions=pos)  # [B, T, D] view as [B, 1, T, D]
    table = sinusoidal_reference(16, 32)
    np.testing.assert_allclose(x, x0 + table[pos], atol=1e-6)
    y = rng.standard_normal((1, 1, 4, 33), dtype=np.float32)
    y0 = y.astype(np.float64)
    posenc.sinusoidal_add_(y, concat=True, base=500.0)
    np.testing.assert_allclose(y[0, 0], y0[0, 0] + sinusoidal_reference(4, 33, 500.0, True),
                               atol=1e-6)
    # both shapes read by the Python helper (a numpy subclass) as by the compiled module
    for shape in ((2, 6, 32), (2, 1, 6, 32)):
        want = rng.standard_normal(shape, dtype=np.float32)
        got = want.copy()
        posenc.sinusoidal_add_(want, positions=pos)
        posenc.sinusoidal_add_(got.view(Sub), positions=pos)
        assert got.tobytes() == want.tobytes()


# ---- learned -----------------------------------------------------------------

def test_learned_add(rng):
    table = rng.standard_normal((50, 24)).astype(np.float32)
    x = rng.standard_normal((3, 5, 24), dtype=np.float32)
    x0 = x.copy()
    pos = rng.integers(0, 50, size=(3, 5))
    posenc.learned_add_(x, table, pos)
    np.testing.assert_allclose(x, x0 + table[pos], rtol=1e-6)
    # positions None = 0..T-1; a read-only f16 table
    t16 = table.astype(np.float16)
    t16.flags.writeable = False
    z = x0.copy()
    posenc.learned_add_(z, t16)
    np.testing.assert_allclose(z, x0 + t16[:5].astype(np.float32)[None], rtol=1e-6)


def test_learned_add_out_of_range_writes_nothing(rng):
    table = np.ones((8, 4), np.float32)
    x = np.zeros((1, 3, 4), np.float32)
    with pytest.raises(posenc.PosencError) as e:
        posenc.learned_add_(x, table, [5, 6, 8])
    assert e.value.status == posenc.Status.ERR_POSITION_OUT_OF_RANGE
    assert "8" in e.value.message
    assert not x.any()
    with pytest.raises(ValueError):
        posenc.learned_add_(x, np.ones((8, 5), np.float32))
    with pytest.raises(ValueError, match=r"^table must have 2 or 4 dimensions, got shape "
                                         r"\(1, 8, 4\)$"):     # [batch, tokens, d] is not a table
        posenc.learned_add_(x, np.ones((1, 8, 4), np.float32))
    assert not x.any()


def test_absolute_shape_errors_write_nothing(rng):
    x = rng.standard_normal((2, 3, 4, 8), dtype=np.float32)  # 3 "heads": not [B,1,T,D]
    x0 = x.copy()
    with pytest.raises(ValueError):
        posenc.sinusoidal_add_(x)
    with pytest.raises(ValueError):
        posenc.learned_add_(x, np.ones((16, 8), np.float32))
    with pytest.raises(ValueError):
        posenc.learned_add_(x[:, :1], np.ones((2, 1, 16, 8), np.float32))
    with pytest.raises(ValueError, match=r"^x must have 3 or 4 dimensions, got shape \(8,\)$"):
        posenc.sinusoidal_add_(x[0, 0, 0])  # 1-D
    assert np.array_equal(x, x0)
