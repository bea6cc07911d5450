"""posenc.MLA, posenc.mla_rope_store_ and posenc.mla_cache_read on numpy
arrays: the MLA step of DeepSeek-V3 (and V4's numbers) against float64
references, every cache format's bytes, the arrays each format takes, and
errors that write nothing.

References, written here:
- transformers' DeepseekV3Attention after its projections:
  kv_c = DeepseekV3RMSNorm(kv_a[..., :512]) = x * rsqrt(mean(x^2) + eps) * w;
  k_pe, q_pe = apply_rotary_pos_emb_interleave(...): the 64 channels
  de-interleaved (q.view(..., 32, 2).transpose(-1, -2)), then q * cos +
  rotate_half(q) * sin with cos = cat(freqs, freqs).cos() * attention_scaling
  and DeepSeek's YaRN (conftest's yarn_inv_freq; attention factor
  mscale(40, 1) / mscale(40, 1) = 1). The library keeps the pairs in place
  (posenc.h: "compare cache rows with transformers' after that
  permutation"): the reference is permuted back to pair order.
- DeepSeek-V4 (posenc.h's MLA section): the 512-channel kv row normed whole
  with its weight, q heads normed without one, both rotated on their last 64.
- The cache formats, byte for byte, from posenc.h's definitions: OCP e4m3
  (round to nearest even, saturating at 448) by search over the 256 codes;
  fp8_ds tiles of 128 with float32 scale max(amax / 448, FLT_MIN);
  fp8_ds_v4's bf16 round trip, power-of-two exponent, UE8M0 bytes, block-major
  rows - each applied to the float32 result of a plain call (itself checked
  against float64).
"""
import math

import numpy as np
import pytest

import posenc
from conftest import Sub, yarn_inv_freq, f32_to_bf16_bits, bf16_bits_to_f32, REPO

F32_ULP = 2.0 ** -24
B, H, T = 2, 4, 3
NB, BS = 4, 4
POS = np.array([[5, 4095, 1031], [0, 77, 2048]], np.int64)
SLOTS = np.array([[13, 2, -1], [0, 15, 9]], np.int64)     # scattered, one token skipped


def v3_model():
    return posenc.ModelRope.from_hf_config(REPO / "tests" / "data" / "configs" /
                                           "deepseek-v3.json", max_positions=4096)


def v3_inv_freq():
    def mscale(s, m):
        return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
    return yarn_inv_freq(10000.0, 64, 40.0, 4096.0), mscale(40, 1.0) / mscale(40, 1.0)


# ---- float64 references -------------------------------------------------------------

def rms(x, w, eps):
    x = x.astype(np.float64)
    r = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return x * r * (1.0 if w is None else w.astype(np.float64))


def hf_rope_interleave(x, inv_freq, positions, attn=1.0, inverse=False):
    """transformers' apply_rotary_pos_emb_interleave on x [..., T, 64] with
    positions [B, T] (broadcast over the heads), in float64; the result in
    transformers' (de-interleaved) order."""
    x = np.asarray(x, np.float64)
    d = x.shape[-1]
    y = x.reshape(x.shape[:-1] + (d // 2, 2)).swapaxes(-1, -2).reshape(x.shape)
    freqs = positions.astype(np.float64)[:, None, :, None] * inv_freq
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb) * attn, np.sin(emb) * attn
    if inverse:
        sin = -sin
    if x.ndim == 3:                                   # [B, T, d]: one shared head
        cos, sin = cos[:, 0], sin[:, 0]
    rot = np.concatenate([-y[..., d // 2:], y[..., :d // 2]], -1)
    return y * cos + rot * sin


def to_pairs(y):
    """transformers' de-interleaved channels back in pair order (2j, 2j + 1)."""
    d = y.shape[-1]
    out = np.empty_like(y)
    out[..., 0::2], out[..., 1::2] = y[..., :d // 2], y[..., d // 2:]
    return out


def pair_magnitude(x):
    """|a| + |b| of each channel's pair (2j, 2j + 1): what bounds the
    rotation's error (posenc.h)."""
    m = np.abs(x[..., 0::2]) + np.abs(x[..., 1::2])
    return np.repeat(m, 2, axis=-1)


def assert_ulps(got, want, mag, ulps=8, what=""):
    err = np.abs(np.asarray(got, np.float64) - want)
    bound = ulps * F32_ULP * mag
    assert np.all(err <= bound), "%s: worst %.3g ulps" % (what, (err / np.maximum(mag, 1e-300)
                                                                 / F32_ULP).max())


def v3_reference(q, kv, w, eps, positions):
    """(q, the cache rows [B, T, 576]) in float64, q's nope part untouched."""
    inv, attn = v3_inv_freq()
    q_out = q.astype(np.float64)
    q_out[..., 128:] = to_pairs(hf_rope_interleave(q[..., 128:], inv, positions, attn))
    rows = np.empty(kv.shape, np.float64)
    rows[..., :512] = rms(kv[..., :512], w, eps)
    rows[..., 512:] = to_pairs(hf_rope_interleave(kv[..., 512:], inv, positions, attn))
    return q_out, rows


def v3_data(rng):
    q = (rng.standard_normal((B, H, T, 192)) * 2).astype(np.float32)
    kv = (rng.standard_normal((B, T, 576)) * 3).astype(np.float32)
    w = (1.0 + 0.3 * rng.uniform(-1, 1, 512)).astype(np.float32)
    return q, kv, w


def slot_rows(cache_rows, slots=SLOTS):
    """The [B, T, ...] rows of a [NB, BS, ...] cache at slots (-1 -> NaN)."""
    flat = cache_rows.reshape((NB * BS,) + cache_rows.shape[2:])
    return flat[np.maximum(slots, 0)]


# ---- MLA and from_model ----------------------------------------------------------------

def test_from_model_reads_every_number():
    m = v3_model()
    w = np.ones(512, np.float32)
    mla = posenc.MLA.from_model(m, 0, kv_weight=w)
    # "DeepSeek-V3: q_offset 128, k_offset 512 = kv_norm_dim, rope 64"; the latent eps
    assert (mla.rope_dim, mla.q_rope_offset, mla.kv_rope_offset, mla.kv_norm_dim) == \
        (64, 128, 512, 512)
    assert (mla.kv_norm, mla.kv_eps, mla.q_norm) == ("rms", float(np.float32(1e-6)), "none")
    assert (mla.format, mla.order, mla.scale) == ("plain", "latent_first", None)
    np.testing.assert_array_equal(mla.kv_weight, w)
    assert not mla.kv_weight.flags.writeable           # the library reads this copy
    w[0] = 7                                           # the caller's array may change
    assert mla.kv_weight[0] == 1
    m4 = posenc.ModelRope.from_hf_config(REPO / "tests" / "data" / "configs" / "per_layer" /
                                         "deepseek-v4-flash.json")
    v4 = posenc.MLA.from_model(m4, 2, kv_weight=np.ones(512), format="fp8_ds_v4")
    # V4: "a 512-channel kv row normed as a whole ... whose last 64 channels are
    # rotated, and q heads of 512 channels normed without a weight"
    assert (v4.rope_dim, v4.q_rope_offset, v4.kv_rope_offset, v4.kv_norm_dim) == \
        (64, 448, 448, 512)
    assert (v4.kv_norm, v4.q_norm, v4.kv_eps, v4.q_eps, v4.format) == \
        ("rms", "l2", float(np.float32(1e-6)), float(np.float32(1e-6)), "fp8_ds_v4")
    normed = posenc.MLA.from_model(m, 3, kv_norm="none")
    assert (normed.kv_norm, normed.kv_norm_dim, normed.kv_weight) == ("none", 0, None)
    e4 = mla.replace(format="fp8_e4m3", scale=0.5, order="rope_first")
    assert (e4.format, e4.scale, e4.order, e4.kv_rope_offset) == ("fp8_e4m3", 0.5, "rope_first",
                                                                   512)
    assert "format=fp8_e4m3 scale=0.5" in repr(e4)
    llama = posenc.ModelRope.from_hf_config(REPO / "tests" / "data" / "configs" /
                                            "llama-3.1-8b.json")
    with pytest.raises(ValueError, match="not multi-head latent attention"):
        posenc.MLA.from_model(llama, 0, kv_weight=np.ones(8))
    with pytest.raises(TypeError, match="ModelRope"):
        posenc.MLA.from_model(llama.layer(0), 0)


def test_mla_arguments_are_checked_where_the_library_cannot():
    with pytest.raises(ValueError, match="kv_weight has 511 values, kv_norm_dim is 512"):
        posenc.MLA(64, 512, 512, 128, kv_weight=np.ones(511))
    with pytest.raises(ValueError, match="format 'fp8' is not one of plain, fp8_e4m3"):
        posenc.MLA(64, 512, 512, 128, format="fp8")
    with pytest.raises(ValueError, match="q_norm 'rmsnorm'"):
        posenc.MLA(64, 512, 512, 128, q_norm="rmsnorm")
    with pytest.raises(ValueError, match="rope_dim = 4294967296 is outside"):
        posenc.MLA(2**32, 512, 512, 128)
    with pytest.raises(TypeError, match="kv_weight must be real numbers"):
        posenc.MLA(64, 2, 512, 128, kv_weight=["a", "b"])
    mla = posenc.MLA(64, 0, 448, 448, kv_norm="none", format="fp8_ds_v4")
    # FlashMLA's block: block_size rows of 448 + 2 * 64 bytes and 448/64 + 1 scale
    # bytes each, padded to a multiple of the 576-byte row
    assert mla.cache_shape(3, 64) == (3, 65 * 576)
    assert mla.cache_shape(3, 80) == (3, 82 * 576)       # 80 * 584 = 46720 bytes: 81.1 rows
    assert mla.cache_shape(1, 1) == (1, 2 * 576)
    assert mla.replace(format="fp8_ds", kv_rope_offset=512).cache_shape(2, 16) == (2, 16, 656)
    assert mla.replace(format="plain").cache_shape(2, 16, 512) == (2, 16, 512)
    with pytest.raises(ValueError, match="kv_dim is needed"):
        mla.replace(format="fp8_e4m3", scale=1.0).cache_shape(2, 16)
    for kv_dim in (0, 2**31):          # pe_mla's int32 dims
        with pytest.raises(ValueError, match=r"^kv_dim = %d is outside \[1, 2147483647\]$"
                                             % kv_dim):
            mla.replace(format="plain").cache_shape(2, 16, kv_dim)
    assert mla.replace(format="plain").cache_shape(2, 2**31 - 1, 2**31 - 1) == \
        (2, 2**31 - 1, 2**31 - 1)                        # the largest of each
    with pytest.raises(ValueError, match=r"^block_size = 2147483648 is outside "
                                         r"\[1, 2147483647\]$"):
        mla.replace(format="plain").cache_shape(2, 2**31, 576)


# ---- values -------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["blocks", "padded", "4d"])
def test_v3_step_against_transformers_float64(rng, layout):
    m = v3_model()
    q, kv, w = v3_data(rng)
    kv.flags.writeable = False   # kv is only read: a read-only array is taken as it is
    q0 = q.copy()
    mla = posenc.MLA.from_model(m, 7, kv_weight=w)
    if layout == "padded":       # rows of 600 floats, the row a view of 576
        store = np.full((NB, BS, 600), -7.0, np.float32)
        cache = store[..., :576]
    elif layout == "4d":         # [num_blocks, 1, block_size, 576]
        store = np.full((NB, 1, BS, 576), -7.0, np.float32)
        cache = store
    else:
        store = cache = np.full((NB, BS, 576), -7.0, np.float32)
    before = store.copy()
    posenc.mla_rope_store_(m.layer(7), mla, q, kv, cache, SLOTS, POS)
    q_ref, rows_ref = v3_reference(q0, kv, w, mla.kv_eps, POS)
    # q: the nope channels bit for bit, the rope slice within 8 ulps of its pairs
    np.testing.assert_array_equal(q[..., :128], q0[..., :128])
    assert_ulps(q[..., 128:], q_ref[..., 128:], pair_magnitude(q0[..., 128:].astype(np.float64)),
                what="q_pe")
    got = slot_rows(cache.reshape(NB, BS, 576))
    kept = SLOTS >= 0
    normed = rms(kv[..., :512], w, mla.kv_eps)
    assert_ulps(got[kept][:, :512], rows_ref[kept][:, :512], np.abs(normed[kept]) + 1e-30,
                what="kv_c")
    assert_ulps(got[kept][:, 512:], rows_ref[kept][:, 512:],
                pair_magnitude(kv[kept][:, 512:].astype(np.float64)), what="k_pe")
    # every other cache element untouched (the skipped token's slot too)
    written = np.zeros(NB * BS, bool)
    written[SLOTS[kept]] = True
    flat_after = store.reshape(NB * BS, -1)
    flat_before = before.reshape(NB * BS, -1)
    np.testing.assert_array_equal(flat_after[~written], flat_before[~written])
    if layout == "padded":
        np.testing.assert_array_equal(store[..., 576:], before[..., 576:])
    # read back: the rows as they are
    out = posenc.mla_cache_read(mla, cache, SLOTS)
    assert out.shape == (B, T, 576) and out.dtype == np.float32
    np.testing.assert_array_equal(out[kept], got[kept])
    assert not out[~kept].any()                   # a new array: -1 rows left at 0


def test_stream_cache_same_bytes(rng):
    # PE_ROPE_STREAM_CACHE changes how the rows are written, not what
    cache = posenc.RopeCache(head_dim=64, style="gptj", max_positions=4096)
    w = (1.0 + 0.3 * rng.uniform(-1, 1, 512)).astype(np.float32)
    mla = posenc.MLA(64, 512, 448, 448, kv_weight=w, q_norm="l2", q_eps=1e-6, kv_eps=1e-6)
    q = (rng.standard_normal((B, H, T, 512)) * 2).astype(np.float32)
    kv = (rng.standard_normal((B, T, 512)) * 3).astype(np.float32)
    out = []
    for stream in (False, True):
        qs, rows = q.copy(), np.full((NB, BS, 512), 5.0, np.float32)
        posenc.mla_rope_store_(cache, mla, qs, kv, rows, SLOTS, POS, stream_cache=stream)
        out.append((qs, rows))
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])


def test_v4_step_against_the_formulas(rng):
    # V4's numbers (MLA.from_model's) on a rope of 64 interleaved channels at base 10000
    cache = posenc.RopeCache(head_dim=64, style="gptj", max_positions=4096)
    inv = 10000.0 ** (-np.arange(0, 64, 2) / 64.0)
    w = (1.0 + 0.3 * rng.uniform(-1, 1, 512)).astype(np.float32)
    mla = posenc.MLA(64, 512, 448, 448, kv_weight=w, q_norm="l2", q_eps=1e-6, kv_eps=1e-6)
    q = (rng.standard_normal((B, H, T, 512)) * 2).astype(np.float32)
    kv = (rng.standard_normal((B, T, 512)) * 3).astype(np.float32)
    q0 = q.copy()
    rows = np.zeros((NB, BS, 512), np.float32)
    posenc.mla_rope_store_(cache, mla, q, kv, rows, SLOTS, POS)
    qn = rms(q0, None, mla.q_eps)
    q_ref = qn.copy()
    q_ref[..., 448:] = to_pairs(hf_rope_interleave(qn[..., 448:], inv, POS))
    assert_ulps(q[..., :448], q_ref[..., :448], np.abs(qn[..., :448]), what="q normed")
    assert_ulps(q[..., 448:], q_ref[..., 448:], pair_magnitude(qn[..., 448:]), what="q rope")
    kn = rms(kv, w, mla.kv_eps)
    k_ref = kn.copy()
    k_ref[..., 448:] = to_pairs(hf_rope_interleave(kn[..., 448:], inv, POS))
    kept = SLOTS >= 0
    got = slot_rows(rows)
    assert_ulps(got[kept][:, :448], k_ref[kept][:, :448], np.abs(kn[kept][:, :448]),
                what="kv normed")
    assert_ulps(got[kept][:, 448:], k_ref[kept][:, 448:], pair_magnitude(kn[kept][:, 448:]),
                what="kv rope")


def test_bf16_numpy_bits_are_the_float32_result_rounded_once(rng):
    m = v3_model()
    q, kv, w = v3_data(rng)
    qb, kvb = f32_to_bf16_bits(q), f32_to_bf16_bits(kv)
    mla = posenc.MLA.from_model(m, 0, kv_weight=w)
    # the float32 step on the bf16 values (exactly widened) ...
    qf, kvf = bf16_bits_to_f32(qb), bf16_bits_to_f32(kvb)
    cf = np.zeros((NB, BS, 576), np.float32)
    posenc.mla_rope_store_(m.layer(0), mla, qf, kvf, cf, SLOTS, POS)
    # ... and on the bf16 bits themselves, into a bf16 cache: the same, rounded once
    cb = np.zeros((NB, BS, 576), np.uint16)
    posenc.mla_rope_store_(m.layer(0), mla, qb, kvb, cb, SLOTS, POS, dtype="bf16",
                           cache_dtype="bf16")
    np.testing.assert_array_equal(qb, f32_to_bf16_bits(qf))
    np.testing.assert_array_equal(cb, f32_to_bf16_bits(cf))
    out = posenc.mla_cache_read(mla, cb, SLOTS, cache_dtype="bf16")
    kept = SLOTS >= 0
    np.testing.assert_array_equal(out[kept], bf16_bits_to_f32(slot_rows(cb)[kept]))


def test_q_only_kv_only_and_rope_first(rng):
    m = v3_model()
    q, kv, w = v3_data(rng)
    mla = posenc.MLA.from_model(m, 0, kv_weight=w)
    both_q, both_c = q.copy(), np.zeros((NB, BS, 576), np.float32)
    posenc.mla_rope_store_(m.layer(0), mla, both_q, kv, both_c, SLOTS, POS)
    q_only = q.copy()
    posenc.mla_rope_store_(m.layer(0), mla, q_only, None, None, None, POS)
    np.testing.assert_array_equal(q_only, both_q)
    kv_only = np.zeros((NB, BS, 576), np.float32)
    posenc.mla_rope_store_(m.layer(0), mla, None, kv, kv_only, SLOTS, POS)
    np.testing.assert_array_equal(kv_only, both_c)
    # [k_pe | kv_c]: the same row, the rotated channels first
    rf = np.zeros((NB, BS, 576), np.float32)
    mla_rf = mla.replace(order="rope_first")
    posenc.mla_rope_store_(m.layer(0), mla_rf, None, kv, rf, SLOTS, POS)
    np.testing.assert_array_equal(rf[..., :64], both_c[..., 512:])
    np.testing.assert_array_equal(rf[..., 64:], both_c[..., :512])
    # read back in kv order whatever the cache's
    np.testing.assert_array_equal(posenc.mla_cache_read(mla_rf, rf, SLOTS),
                                  posenc.mla_cache_read(mla, both_c, SLOTS))
    # positions None = 0..tokens-1; slot_mapping and positions as [tokens]
    a, b = q[:1].copy(), q[:1].copy()
    posenc.mla_rope_store_(m.layer(0), mla, a, None, None, None)
    posenc.mla_rope_store_(m.layer(0), mla, b, None, None, None, [0, 1, 2])
    np.testing.assert_array_equal(a, b)


# ---- the byte formats ------------------------------------------------------------------

def _e4m3_table():
    """The finite magnitudes of e4m3fn's codes 0..0x7e (OCP: bias 7, 3
    mantissa bits, subnormals below 2^-6; 0x7f is NaN)."""
    c = np.arange(0x7f)
    e, m = c >> 3, c & 7
    return np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))


E4M3 = _e4m3_table()


def e4m3(x):
    """Codes of float32 values x: round to nearest, ties to the even code,
    saturating at 448 (0x7e), NaN = sign | 0x7f."""
    x = np.asarray(x, np.float32).astype(np.float64)
    a = np.abs(x)
    hi = np.clip(np.searchsorted(E4M3, a), 1, 0x7e)
    lo = hi - 1
    dlo, dhi = a - E4M3[lo], E4M3[hi] - a
    code = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    code = np.where(a >= 448.0, 0x7e, code)
    code = np.where(np.isnan(x), 0x7f, code)
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def e4m3_value(codes):
    c = np.asarray(codes, np.int64)
    v = E4M3[np.minimum(c & 0x7f, 0x7e)].astype(np.float32)
    v = np.where(c & 0x80, -v, v)
    return np.where((c & 0x7f) == 0x7f, np.float32(np.nan), v).astype(np.float32)


def bf16_bytes(x):
    return f32_to_bf16_bits(x).astype("<u2").view(np.uint8)


def encode_ds(row):
    """vLLM fp8_ds_mla: 656 bytes from a 576-float row."""
    out = bytearray()
    scales = []
    for k in range(4):
        t = row[128 * k:128 * k + 128]
        s = np.float32(max(np.float32(np.abs(t).max()) / np.float32(448.0),
                           np.finfo(np.float32).tiny))
        out += e4m3(t / s).tobytes()
        scales.append(s)
    out += np.array(scales, "<f4").tobytes() + bf16_bytes(row[512:]).tobytes()
    return np.frombuffer(bytes(out), np.uint8)


def encode_v4(row):
    """DeepSeek-V4: (576 bytes of codes and bf16 rope, 8 scale bytes)."""
    xb = bf16_bits_to_f32(f32_to_bf16_bits(row))
    codes, sb = [], []
    for k in range(7):
        t = xb[64 * k:64 * k + 64]
        amax = max(np.float32(np.abs(t).max()), np.float32(1e-4))
        y = np.float32(amax) / np.float32(448.0)
        e = math.ceil(math.log2(y))
        while 2.0 ** (e - 1) >= y:       # the smallest e with 2^e >= y, exactly
            e -= 1
        while 2.0 ** e < y:
            e += 1
        codes.append(e4m3(np.clip(t * np.float32(2.0 ** -e), -448, 448)))
        sb.append(e + 127)
    body = np.concatenate(codes + [bf16_bytes(xb[448:])])
    return body, np.array(sb + [0], np.uint8)


def _plain_rows(m, mla, q, kv):
    """The float32 rows of a plain call (the values every format quantizes)."""
    c = np.zeros((NB, BS, kv.shape[-1]), np.float32)
    posenc.mla_rope_store_(m, mla.replace(format="plain", scale=None, order="latent_first"),
                           q.copy(), kv, c, SLOTS, POS)
    return c.reshape(NB * BS, -1)


@pytest.mark.parametrize("via", ["numpy", "helper", "dlpack"])
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e4m3 rope_first", "fp8_ds", "fp8_ds_v4"])
def test_byte_formats_byte_for_byte(rng, fmt, via):
    fmt, _, order = fmt.partition(" ")
    v4 = fmt == "fp8_ds_v4"
    if v4:
        cache_rope = posenc.RopeCache(head_dim=64, style="gptj", max_positions=4096)
        w = (1.0 + 0.3 * rng.uniform(-1, 1, 512)).astype(np.float32)
        mla = posenc.MLA(64, 512, 448, 448, kv_weight=w, q_norm="l2", format=fmt)
        q = rng.standard_normal((B, H, T, 512)).astype(np.float32)
        kv = (rng.standard_normal((B, T, 512)) * 3).astype(np.float32)
    else:
        m = v3_model()
        cache_rope = m.layer(0)
        q, kv, w = v3_data(rng)
        mla = posenc.MLA.from_model(m, 0, kv_weight=w, format=fmt, order=order or "latent_first",
                                    scale=0.75 if fmt == "fp8_e4m3" else None)
    plain = _plain_rows(cache_rope, mla, q, kv)
    shape = mla.cache_shape(NB, BS, kv.shape[-1])
    store = np.full(shape, 0x5a, np.uint8)
    want = store.copy()
    cache = store.view(Sub) if via == "helper" else store
    if via == "dlpack":
        from test_compiled import DLPackOnly
        cache = DLPackOnly(store)
    kw = {"block_size": BS} if v4 else {}
    posenc.mla_rope_store_(cache_rope, mla, q, kv, cache, SLOTS, POS, **kw)
    for s in SLOTS[SLOTS >= 0]:
        x = plain[s]
        blk, t = divmod(int(s), BS)
        if fmt == "fp8_e4m3":
            row = np.concatenate([x[512:], x[:512]]) if order == "rope_first" else x
            want[blk, t] = e4m3(row / np.float32(0.75))
        elif fmt == "fp8_ds":
            want[blk, t] = encode_ds(x)
        else:
            body, sb = encode_v4(x)
            want[blk, t * 576:(t + 1) * 576] = body
            want[blk, BS * 576 + 8 * t:BS * 576 + 8 * t + 8] = sb
    np.testing.assert_array_equal(store, want)     # every byte, the untouched ones too
    # read back: each format's decoding
    out = np.full((B, T, kv.shape[-1]), -7.0, np.float32)
    posenc.mla_cache_read(mla, cache, SLOTS, out, **kw)
    for (b, t), s in np.ndenumerate(SLOTS):
        if s < 0:
            assert (out[b, t] == -7).all()
            continue
        blk, r = divmod(int(s), BS)
        if fmt == "fp8_e4m3":
            v = e4m3_value(store[blk, r]) * np.float32(0.75)
            if order == "rope_first":
                v = np.concatenate([v[64:], v[:64]])
        elif fmt == "fp8_ds":
            sc = store[blk, r, 512:528].view("<f4")
            v = np.concatenate([e4m3_value(store[blk, r, :512]) * np.repeat(sc, 128),
                                bf16_bits_to_f32(store[blk, r, 528:656].view("<u2"))])
        else:
            row = store[blk, r * 576:(r + 1) * 576]
            sb = store[blk, BS * 576 + 8 * r:BS * 576 + 8 * r + 7].astype(np.int64)
            v = np.concatenate([e4m3_value(row[:448]) *
                                np.repeat(2.0 ** (sb - 127), 64).astype(np.float32),
                                bf16_bits_to_f32(row[448:].view("<u2"))])
        np.testing.assert_array_equal(out[b, t], v.astype(np.float32))


def test_the_helper_describes_byte_caches_as_the_module_does(rng):
    # posenc.mla's helper (a numpy subclass goes to it) and the compiled
    # module give the library the same rows: fp8_e4m3 rows with channels
    # after the rotated ones, a DeepSeek-V4 cache of one-row blocks, a 4-D
    # cache with its unit dimension
    rope = posenc.RopeCache(head_dim=16, max_positions=4096)
    q = rng.standard_normal((B, H, T, 16), dtype=np.float32)
    e4 = posenc.MLA(16, 0, 16, 0, kv_norm="none", format="fp8_e4m3", scale=0.5)
    kv = rng.standard_normal((B, T, 48), dtype=np.float32)       # [x | rope | x]
    v4 = posenc.MLA(64, 0, 448, 0, kv_norm="none", format="fp8_ds_v4")
    kv4 = (rng.standard_normal((B, T, 512)) * 3).astype(np.float32)
    rope64 = posenc.RopeCache(head_dim=64, style="gptj", max_positions=4096)
    q64 = rng.standard_normal((B, H, T, 64), dtype=np.float32)
    cases = [(rope, e4, q, kv, (NB, BS, 48), {}),
             (rope, e4, q, kv, (NB, 1, BS, 48), {}),
             (rope64, v4, q64, kv4, (NB * BS, 576 + 8), {"block_size": 1})]
    for cache_rope, mla, qq, rows, shape, kw in cases:
        want = np.full(shape, 0x5a, np.uint8)
        got = want.copy()
        posenc.mla_rope_store_(cache_rope, mla, qq.copy(), rows, want, SLOTS, POS, **kw)
        posenc.mla_rope_store_(cache_rope, mla, qq.copy(), rows, got.view(Sub), SLOTS, POS, **kw)
        assert (want != 0x5a).any() and got.tobytes() == want.tobytes(), (mla.format, shape)
        outs = [posenc.mla_cache_read(mla, c, SLOTS, **kw) for c in (want, got.view(Sub))]
        assert outs[0].shape == (B, T, rows.shape[-1])
        assert outs[0].tobytes() == outs[1].tobytes()


# ---- errors: the library's sentence, nothing written -------------------------------------

def _snapshot(*arrays):
    return [None if a is None else a.copy() for a in arrays]


def _unchanged(arrays, before):
    for a, b in zip(arrays, before):
        if a is not None:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("case", [
    "duplicate slot", "slot outside", "position past the table", "rope_dim", "no weight",
    "no scale", "bad scale", "q_norm rms", "cache row", "kv heads", "q and kv overlap",
    "tokens differ", "scale where none is read", "rope_first fp8_ds"])
def test_errors_raise_the_librarys_sentence_and_write_nothing(rng, case):
    m = v3_model()
    q, kv, w = v3_data(rng)
    mla = posenc.MLA.from_model(m, 0, kv_weight=w)
    cache = np.zeros((NB, BS, 576), np.float32)
    slots, pos, rope = SLOTS.copy(), POS.copy(), m.layer(0)
    status, words = posenc.Status.ERR_INVALID_ARGUMENT, []
    if case == "duplicate slot":
        slots[1, 2] = 13
        words = ["slot", "13"]
    elif case == "slot outside":
        slots[0, 1] = NB * BS
        words = ["16"]
    elif case == "position past the table":
        pos[1, 1] = 4096
        status, words = posenc.Status.ERR_POSITION_OUT_OF_RANGE, ["4096"]
    elif case == "rope_dim":
        mla = mla.replace(rope_dim=32)
        status, words = posenc.Status.ERR_SHAPE, ["rope_dim 32", "head_dim 64"]
    elif case == "no weight":
        mla = mla.replace(kv_weight=None)
        status, words = posenc.Status.ERR_NULL_POINTER, ["kv_weight"]
    elif case == "no scale":
        mla, cache = mla.replace(format="fp8_e4m3"), np.zeros((NB, BS, 576), np.uint8)
        status, words = posenc.Status.ERR_NULL_POINTER, ["scale"]
    elif case == "bad scale":
        mla, cache = mla.replace(format="fp8_e4m3", scale=-1.0), np.zeros((NB, BS, 576), np.uint8)
        words = ["scale -1"]
    elif case == "q_norm rms":
        mla = mla.replace(q_norm="rms")
        words = ["q_norm 1", "weight"]
    elif case == "cache row":
        cache = np.zeros((NB, BS, 512), np.float32)
        status, words = posenc.Status.ERR_SHAPE, ["shape[3] 512", "576"]
    elif case == "kv heads":
        kv = np.zeros((B, 2, T, 576), np.float32)
        status, words = posenc.Status.ERR_SHAPE, ["kv shape[1] 2"]
    elif case == "q and kv overlap":
        both = np.zeros((B, T, 576 + H * 192), np.float32)
        kv, q = both[..., :576], both[..., 100:100 + H * 192].reshape(B, T, H, 192).transpose(
            0, 2, 1, 3)
        status, words = posenc.Status.ERR_SHAPE, ["q and kv overlap"]
    elif case == "tokens differ":
        kv = kv[:, :2]
        slots, pos = slots[:, :2], pos[:, :2]
        status, words = posenc.Status.ERR_SHAPE, ["tokens 3", "tokens 2"]
    elif case == "scale where none is read":
        mla = mla.replace(scale=2.0)
        words = ["scale is set", "PE_MLA_PLAIN"]
    elif case == "rope_first fp8_ds":
        mla, cache = mla.replace(format="fp8_ds", order="rope_first"), \
            np.zeros((NB, BS, 656), np.uint8)
        words = ["PE_MLA_ROPE_FIRST"]
    before = _snapshot(q, kv, cache)
    with pytest.raises(posenc.PosencError) as e:
        posenc.mla_rope_store_(rope, mla, q, kv, cache, slots, pos)
    assert e.value.status == status, e.value.message
    assert e.value.message.startswith("pe_mla_rope_store: ")
    for word in words:
        assert word in e.value.message, (word, e.value.message)
    _unchanged((q, kv, cache), before)


def test_arrays_the_binding_refuses(rng):
    m = v3_model()
    q, kv, w = v3_data(rng)
    mla = posenc.MLA.from_model(m, 0, kv_weight=w)
    rope = m.layer(0)
    ds = mla.replace(format="fp8_ds")
    v4 = posenc.MLA(64, 0, 512, 128, kv_norm="none", format="fp8_ds_v4")
    cases = [
        (TypeError, "mla must be a posenc.MLA, got dict",
         lambda: posenc.mla_rope_store_(rope, {}, q, kv, np.zeros((NB, BS, 576), np.float32),
                                        SLOTS, POS)),
        (TypeError, "cache must be a posenc.RopeCache",
         lambda: posenc.mla_rope_store_(mla, mla, q, kv, np.zeros((NB, BS, 576), np.float32),
                                        SLOTS, POS)),
        (TypeError, "mla_cache has dtype float32: a fp8_ds cache is bytes",
         lambda: posenc.mla_rope_store_(rope, ds, q, kv, np.zeros((NB, BS, 656), np.float32),
                                        SLOTS, POS)),
        (TypeError, "mla_cache has dtype int8: a fp8_ds cache is bytes (numpy.uint8)",
         lambda: posenc.mla_rope_store_(rope, ds, q, kv, np.zeros((NB, BS, 656), np.int8),
                                        SLOTS, POS)),
        (ValueError, "rows of 576 bytes: fp8_ds rows of kv_rope_offset 512 and rope_dim 64 "
                     "are 656 bytes",
         lambda: posenc.mla_rope_store_(rope, ds, q, kv, np.zeros((NB, BS, 576), np.uint8),
                                        SLOTS, POS)),
        (ValueError, "needs block_size",
         lambda: posenc.mla_rope_store_(rope, v4, q, kv, np.zeros((NB, 4096), np.uint8),
                                        SLOTS, POS)),
        (ValueError, "blocks of 2000 bytes: 4 rows of 640 bytes and their 9 scale bytes need "
                     "2596",
         lambda: posenc.mla_rope_store_(rope, v4, q, kv, np.zeros((NB, 2000), np.uint8),
                                        SLOTS, POS, block_size=4)),
        (ValueError, "blocks of 2590 bytes: 4 rows of 640 bytes and their 9 scale bytes need "
                     "2596",       # short by less than a row's scales
         lambda: posenc.mla_rope_store_(rope, v4, q, kv, np.zeros((NB, 2590), np.uint8),
                                        SLOTS, POS, block_size=4)),
        (ValueError, "a fp8_ds_v4 cache is [num_blocks, block_bytes]",
         lambda: posenc.mla_rope_store_(rope, v4, q, kv, np.zeros((NB, BS, 656), np.uint8),
                                        SLOTS, POS, block_size=4)),
        (ValueError, "has shape (16, 656): a fp8_ds cache is [num_blocks, block_size, "
                     "row_bytes]",      # rows of the right bytes, but no blocks
         lambda: posenc.mla_rope_store_(rope, ds, q, kv, np.zeros((NB * BS, 656), np.uint8),
                                        SLOTS, POS)),
        (ValueError, "has shape (16, 576): a fp8_e4m3 cache is [num_blocks, block_size, "
                     "row_bytes]",
         lambda: posenc.mla_rope_store_(rope, mla.replace(format="fp8_e4m3", scale=1.0), q, kv,
                                        np.zeros((NB * BS, 576), np.uint8), SLOTS, POS)),
        (ValueError, "block_size is for fp8_ds_v4 caches",
         lambda: posenc.mla_rope_store_(rope, ds, q, kv, np.zeros((NB, BS, 656), np.uint8),
                                        SLOTS, POS, block_size=4)),
        (ValueError, "mla_cache is read-only",
         lambda: posenc.mla_rope_store_(rope, ds, q, kv, _readonly(np.zeros((NB, BS, 656),
                                                                            np.uint8)),
                                        SLOTS, POS)),
        (ValueError, "slot_mapping has shape (4,), expected [batch 2, tokens 3]",
         lambda: posenc.mla_rope_store_(rope, mla, q, kv, np.zeros((NB, BS, 576), np.float32),
                                        np.arange(4), POS)),
    ]
    for exc, text, call in cases:
        before = _snapshot(q, kv)
        with pytest.raises(exc) as e:
            call()
        assert text in str(e.value), (text, str(e.value))
        _unchanged((q, kv), before)


def _readonly(a):
    a.flags.writeable = False
    return a
