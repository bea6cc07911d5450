"""posenc.torch's MLA calls on torch tensors: mla_rope_store_ (both q
layouts, float32 / bfloat16, plain and byte caches), DeepSeek-V4's query
step deepseek_v4_q_ and its output de-rotation derotate_output_.

float32 results are the numpy path's bit for bit (test_mla.py checks those
against float64); bfloat16 results are checked against the float64
references of test_mla.py (transformers' DeepseekV3Attention formulas):
within half a bfloat16 ulp of the exact value plus the float32 result's
8 ulps - the float32 result rounded once."""
import math

import numpy as np
import pytest

import posenc
from conftest import f32_to_bf16_bits
from test_mla import (B, H, T, NB, BS, POS, SLOTS, F32_ULP, v3_model, v3_data, v3_reference,
                      slot_rows, rms, to_pairs, hf_rope_interleave, pair_magnitude, assert_ulps)

torch = pytest.importorskip("torch")
import posenc.torch as pt  # noqa: E402

V4_INV = 10000.0 ** (-np.arange(0, 64, 2) / 64.0)


def v4_rope():
    return posenc.RopeCache(head_dim=64, style="gptj", max_positions=4096)


def assert_bf16(got, want, mag, what):
    """got (bfloat16) within half a bfloat16 ulp of want (float64) plus 8
    float32 ulps of mag."""
    g = got.float().numpy().astype(np.float64)
    a = np.abs(want)
    half_ulp = np.where(a > 0, 2.0 ** (np.floor(np.log2(np.maximum(a, 1e-300))) - 8), 0)
    err = np.abs(g - want)
    assert np.all(err <= half_ulp + 8 * F32_ULP * mag + 1e-40), \
        "%s: worst excess %.3g" % (what, (err - half_ulp - 8 * F32_ULP * mag).max())


@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_f32_is_the_numpy_step_bit_for_bit(rng, unsqueeze_dim):
    m = v3_model()
    q, kv, w = v3_data(rng)
    mla = posenc.MLA.from_model(m, 0, kv_weight=w)
    qn, cn = q.copy(), np.zeros((NB, BS, 576), np.float32)
    posenc.mla_rope_store_(m.layer(0), mla, qn, kv, cn, SLOTS, POS)
    # q as the projection's [B, T, H, D] view (unsqueeze_dim=2) or its transpose
    proj = torch.from_numpy(np.ascontiguousarray(q.transpose(0, 2, 1, 3))).reshape(B, T, H * 192)
    q_bthd = proj.view(B, T, H, 192)
    qt = q_bthd if unsqueeze_dim == 2 else q_bthd.transpose(1, 2)
    ct = torch.zeros(NB, BS, 576)
    ptr = proj.data_ptr()
    with torch.no_grad():
        pt.mla_rope_store_(m.layer(0), mla, qt, torch.from_numpy(kv), ct,
                           torch.from_numpy(SLOTS), torch.from_numpy(POS),
                           unsqueeze_dim=unsqueeze_dim)
    assert proj.data_ptr() == ptr                       # in place
    np.testing.assert_array_equal(q_bthd.transpose(1, 2).numpy(), qn)
    np.testing.assert_array_equal(ct.numpy(), cn)
    # posenc.mla_rope_store_ takes the same tensors ([B, H, T, D])
    c2 = torch.zeros(NB, BS, 576)
    posenc.mla_rope_store_(m.layer(0), mla, None, torch.from_numpy(kv), c2, SLOTS, POS)
    np.testing.assert_array_equal(c2.numpy(), cn)
    out = posenc.mla_cache_read(mla, ct, SLOTS)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_array_equal(out.numpy()[SLOTS >= 0], slot_rows(cn)[SLOTS >= 0])


def test_bf16_against_transformers_float64(rng):
    m = v3_model()
    q, kv, w = v3_data(rng)
    mla = posenc.MLA.from_model(m, 0, kv_weight=w)
    qb = torch.from_numpy(q).bfloat16()
    kvb = torch.from_numpy(kv).bfloat16()
    q0, kv0 = qb.float().numpy(), kvb.float().numpy()     # the bf16 values, exactly
    cb = torch.zeros(NB, BS, 576, dtype=torch.bfloat16)
    with torch.no_grad():
        pt.mla_rope_store_(m.layer(0), mla, qb, kvb, cb, SLOTS, POS)
    q_ref, rows_ref = v3_reference(q0, kv0, w, mla.kv_eps, POS)
    assert torch.equal(qb[..., :128], torch.from_numpy(q0[..., :128]).bfloat16())
    assert_bf16(qb[..., 128:], q_ref[..., 128:], pair_magnitude(q0[..., 128:].astype(np.float64)),
                "q_pe")
    kept = torch.from_numpy(SLOTS >= 0)
    got = torch.from_numpy(slot_rows(cb.view(torch.int16).numpy())).view(torch.bfloat16)[kept]
    want = rows_ref[SLOTS >= 0]
    normed = rms(kv0[..., :512], w, mla.kv_eps)[SLOTS >= 0]
    assert_bf16(got[:, :512], want[:, :512], np.abs(normed), "kv_c")
    assert_bf16(got[:, 512:], want[:, 512:],
                pair_magnitude(kv0[SLOTS >= 0][:, 512:].astype(np.float64)), "k_pe")
    # and exactly the float32 result rounded once (numpy's bf16 bits)
    cn = np.zeros((NB, BS, 576), np.uint16)
    posenc.mla_rope_store_(m.layer(0), mla, f32_to_bf16_bits(q0), f32_to_bf16_bits(kv0), cn,
                           SLOTS, POS, dtype="bf16", cache_dtype="bf16")
    np.testing.assert_array_equal(cb.view(torch.int16).numpy().view(np.uint16), cn)


def test_a_torch_byte_cache_is_numpys(rng):
    m = v3_model()
    q, kv, w = v3_data(rng)
    mla = posenc.MLA.from_model(m, 0, kv_weight=w, format="fp8_ds")
    cn = np.zeros(mla.cache_shape(NB, BS), np.uint8)
    posenc.mla_rope_store_(m.layer(0), mla, q.copy(), kv, cn, SLOTS, POS)
    ct = torch.zeros(mla.cache_shape(NB, BS), dtype=torch.uint8)
    with torch.no_grad():
        pt.mla_rope_store_(m.layer(0), mla, torch.from_numpy(q.copy()), torch.from_numpy(kv), ct,
                           SLOTS, POS)
    np.testing.assert_array_equal(ct.numpy(), cn)
    v4 = posenc.MLA(64, 512, 448, 448, kv_weight=np.ones(512), q_norm="l2", format="fp8_ds_v4")
    kv4 = torch.randn(B, T, 512, generator=torch.Generator().manual_seed(3))
    c4 = torch.zeros(v4.cache_shape(NB, BS), dtype=torch.uint8)
    n4 = np.zeros(v4.cache_shape(NB, BS), np.uint8)
    pt.mla_rope_store_(v4_rope(), v4, None, kv4, c4, SLOTS, POS, block_size=BS)
    posenc.mla_rope_store_(v4_rope(), v4, None, kv4.numpy(), n4, SLOTS, POS, block_size=BS)
    assert c4.any() and np.array_equal(c4.numpy(), n4)
    back = posenc.mla_cache_read(v4, c4, SLOTS, block_size=BS)
    assert isinstance(back, torch.Tensor)
    np.testing.assert_array_equal(back.numpy(), posenc.mla_cache_read(v4, n4, SLOTS,
                                                                      block_size=BS))
    # fp8_e4m3: a new out takes its width from the torch cache's rows
    e4 = mla.replace(format="fp8_e4m3", scale=0.5)
    ce = torch.zeros(NB, BS, 576, dtype=torch.uint8)
    pt.mla_rope_store_(m.layer(0), e4, None, torch.from_numpy(kv), ce, SLOTS, POS)
    back = posenc.mla_cache_read(e4, ce, SLOTS)
    assert isinstance(back, torch.Tensor) and tuple(back.shape) == (B, T, 576)
    np.testing.assert_array_equal(back.numpy(), posenc.mla_cache_read(e4, ce.numpy(), SLOTS))
    # a torch byte cache the compiled module does not take is refused by what is wrong
    wide = torch.zeros(NB, BS, 1152, dtype=torch.uint8)[..., ::2]
    with pytest.raises(ValueError, match=r"^mla_cache: the bytes of a row must be contiguous "
                                         r"\(stride 1, got 2\)$"):
        pt.mla_rope_store_(m.layer(0), e4, None, torch.from_numpy(kv), wide, SLOTS, POS)
    assert not wide.any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_deepseek_v4_q_and_output_derotation(rng, dtype, unsqueeze_dim):
    rope = v4_rope()
    x = (rng.standard_normal((B, H, T, 512)) * 2).astype(np.float32)
    q = torch.from_numpy(x).to(dtype)
    x0 = q.float().numpy().copy()          # (float() of a float32 tensor is itself)
    qv = q if unsqueeze_dim == 1 else q.transpose(1, 2)      # the same memory, [B, T, H, D]
    with torch.no_grad():
        assert pt.deepseek_v4_q_(qv, rope, torch.from_numpy(POS), eps=1e-6,
                                 unsqueeze_dim=unsqueeze_dim) is qv
    # each head normed without a weight, then its last 64 rotated
    qn = rms(x0, None, float(np.float32(1e-6)))
    want = qn.copy()
    want[..., 448:] = to_pairs(hf_rope_interleave(qn[..., 448:], V4_INV, POS))
    mag = np.abs(qn)
    mag[..., 448:] = pair_magnitude(qn[..., 448:])
    if dtype == torch.float32:
        assert_ulps(q.numpy(), want, mag, what="q")
    else:
        assert_bf16(q, want, mag, "q")
    # the attention output: its last 64 rotated back at the query positions
    o = torch.from_numpy((rng.standard_normal((B, H, T, 512))).astype(np.float32)).to(dtype)
    o0 = o.float().numpy().copy()
    ov = o if unsqueeze_dim == 1 else o.transpose(1, 2)
    with torch.no_grad():
        assert pt.derotate_output_(ov, rope, POS, unsqueeze_dim=unsqueeze_dim) is ov
    assert torch.equal(o[..., :448], torch.from_numpy(o0[..., :448]).to(dtype))
    want_o = to_pairs(hf_rope_interleave(o0[..., 448:], V4_INV, POS, inverse=True))
    if dtype == torch.float32:
        assert_ulps(o[..., 448:].numpy(), want_o, pair_magnitude(o0[..., 448:]), what="o")
    else:
        assert_bf16(o[..., 448:], want_o, pair_magnitude(o0[..., 448:].astype(np.float64)), "o")


def test_derotate_undoes_the_rotation_and_takes_an_offset(rng):
    rope = v4_rope()
    o = torch.from_numpy(rng.standard_normal((1, 2, 3, 192)).astype(np.float32))
    o0 = o.clone()
    pos = torch.tensor([[9, 100, 4000]])
    rope.apply_(o[..., 128:], positions=pos)           # as q's rope slice was rotated
    pt.derotate_output_(o, rope, pos, offset=128)
    assert torch.equal(o[..., :128], o0[..., :128])
    np.testing.assert_allclose(o.numpy(), o0.numpy(), atol=4e-6)


def test_torch_errors_name_what_is_wrong(rng):
    m = v3_model()
    q, kv, w = v3_data(rng)
    mla = posenc.MLA.from_model(m, 0, kv_weight=w)
    qt = torch.from_numpy(q).requires_grad_()
    with pytest.raises(ValueError, match="requires grad"):
        pt.mla_rope_store_(m.layer(0), mla, qt, None, None, None, POS)
    with pytest.raises(ValueError, match="unsqueeze_dim must be 1"):
        pt.mla_rope_store_(m.layer(0), mla, torch.from_numpy(q), None, None, None, POS,
                           unsqueeze_dim=0)
    with pytest.raises(TypeError, match="posenc.MLA"):
        pt.mla_rope_store_(m.layer(0), "mla", torch.from_numpy(q), None, None, None, POS)
    with pytest.raises(TypeError, match="RopeCache or a posenc.torch.RotaryEmbedding"):
        pt.derotate_output_(torch.zeros(1, 1, 1, 64), mla, None)
    # the library's sentence, nothing written: a position past the table
    qq = torch.from_numpy(q.copy())
    before = qq.clone()
    bad = POS.copy()
    bad[0, 0] = 5000
    with pytest.raises(posenc.PosencError, match="5000"):
        pt.mla_rope_store_(m.layer(0), mla, qq, None, None, None, bad)
    assert torch.equal(qq, before)
    with pytest.raises(posenc.PosencError, match="5000"):
        pt.derotate_output_(qq, m.layer(0), bad)
    assert torch.equal(qq, before)
    with pytest.raises(posenc.PosencError, match="5000"):
        pt.deepseek_v4_q_(qq, m.layer(0), bad)
    assert torch.equal(qq, before)
    assert math.isfinite(qq.sum().item())
