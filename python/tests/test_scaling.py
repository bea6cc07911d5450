"""HF rope_scaling dicts -> pe_rope_params, and the frequencies/attention
factors each type produces, against float64 NumPy transcriptions of the HF
formulas (transformers' modeling_rope_utils.py, _compute_*_parameters)."""
import math

import numpy as np
import pytest

import posenc
from conftest import default_inv_freq, yarn_inv_freq


def cache(rope_scaling, head_dim=128, base=10000.0, **kw):
    kw.setdefault("max_positions", 16)
    return posenc.RopeCache(head_dim=head_dim, rope_theta=base, rope_scaling=rope_scaling, **kw)


def close(got, want, rtol=3e-7):
    np.testing.assert_allclose(got, np.asarray(want, dtype=np.float64), rtol=rtol, atol=0)


def test_scaling_names_hold_the_headers_values():
    # pe_rope_scaling in posenc.h, and each HF type a cache is made with
    # reports its own name back
    header = {"default": 0, "none": 0, "linear": 1, "ntk": 2, "dynamic": 3, "yarn": 4,
              "longrope": 5, "su": 5, "llama3": 6, "proportional": 7, "custom": 8}
    assert posenc.rope.SCALINGS == header
    made = {
        "linear": {"factor": 2.0}, "dynamic": {"factor": 2.0}, "yarn": {"factor": 4.0},
        "longrope": {"short_factor": [1.0] * 64, "long_factor": [2.0] * 64, "factor": 4.0},
        "llama3": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
        "ntk": {"factor": 2.0},
    }
    for name, keys in made.items():
        c = cache(dict(keys, rope_type=name), max_position_embeddings=4096)
        assert c.params["scaling"] == name, (name, c.params["scaling"])


def test_default_and_none_values():
    c = cache({"rope_type": "default", "factor": None})
    close(c.inv_freq, default_inv_freq(1e4, 128))
    assert c.params["scaling"] == "default"


def test_linear():
    c = cache({"type": "linear", "factor": 4.0})  # legacy "type" key
    close(c.inv_freq, default_inv_freq(1e4, 128) / 4)
    assert c.params["scaling"] == "linear" and c.params["factor"] == 4.0


def test_ntk():
    s, d = 2.0, 64
    c = cache({"rope_type": "ntk", "factor": s}, head_dim=d)
    close(c.inv_freq, default_inv_freq(1e4 * s ** (d / (d - 2)), d), rtol=1e-6)


@pytest.mark.parametrize("seq_len", [None, 1024, 4096, 10000])
def test_dynamic(seq_len):
    s, d, M = 2.0, 128, 4096
    c = cache({"rope_type": "dynamic", "factor": s}, head_dim=d, seq_len=seq_len,
              max_position_embeddings=M)
    L = max(seq_len or M, M)
    base = 1e4 * (s * L / M - (s - 1)) ** (d / (d - 2))
    close(c.inv_freq, default_inv_freq(base, d), rtol=1e-6)
    assert c.params["original_max_positions"] == M


@pytest.mark.parametrize("truncate", [True, False])
def test_yarn(truncate):
    c = cache({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
               "truncate": truncate}, head_dim=128, base=1e6)
    close(c.inv_freq, yarn_inv_freq(1e6, 128, 4.0, 32768, truncate=truncate), rtol=1e-6)
    assert c.attention_factor == pytest.approx(0.1 * math.log(4.0) + 1)
    assert c.softmax_scale == 1.0


def test_yarn_deepseek_mscale():
    rs = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
          "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
    c = cache(rs, head_dim=64, style="gptj")
    close(c.inv_freq, yarn_inv_freq(1e4, 64, 40.0, 4096), rtol=1e-6)
    assert c.attention_factor == pytest.approx(1.0)
    assert c.softmax_scale == pytest.approx((0.1 * math.log(40) + 1) ** 2)
    assert c.style == "gptj"


def test_yarn_factor_defaults_to_m_over_m0():
    c = cache({"rope_type": "yarn", "original_max_position_embeddings": 4096},
              max_position_embeddings=16384)
    assert c.params["factor"] == 4.0


def phi3_factors(n, seed):
    g = np.random.default_rng(seed)
    return list(1.0 + g.random(n) * 20)


@pytest.mark.parametrize("seq_len,long", [(None, False), (4096, False), (4097, True)])
def test_longrope(seq_len, long):
    d, M, m0 = 96, 131072, 4096
    short, longf = phi3_factors(d // 2, 1), phi3_factors(d // 2, 2)
    rs = {"type": "longrope", "short_factor": short, "long_factor": longf,
          "original_max_position_embeddings": m0}
    c = cache(rs, head_dim=d, seq_len=seq_len, max_position_embeddings=M)
    ext = np.float32(longf if long else short).astype(np.float64)
    close(c.inv_freq, 1 / (ext * 1e4 ** (2.0 * np.arange(d // 2) / d)), rtol=1e-6)
    s = M / m0
    assert c.params["factor"] == s  # HF: factor absent -> M / M0
    assert c.attention_factor == pytest.approx(math.sqrt(1 + math.log(s) / math.log(m0)))


def test_su_is_longrope():
    rs = {"type": "su", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
          "original_max_position_embeddings": 4096, "factor": 1.0}
    assert cache(rs, head_dim=16).params["scaling"] == "longrope"


def test_llama3():
    d, base, s, m0 = 128, 500000.0, 8.0, 8192
    c = cache({"rope_type": "llama3", "factor": s, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": m0},
              head_dim=d, base=base)
    inv = default_inv_freq(base, d)
    lam = 2 * math.pi / inv
    lo, hi = m0 / 1.0, m0 / 4.0
    smooth = (m0 / lam - 1.0) / (4.0 - 1.0)
    want = np.where(lam > lo, inv / s, np.where(lam < hi, inv, (1 - smooth) * inv / s + smooth * inv))
    close(c.inv_freq, want, rtol=1e-6)
    got = c.inv_freq
    # transformers' _compute_llama3_parameters: i <= 28 unchanged, 29..34 smoothed, >= 35 divided by 8
    close(got[:29], inv[:29], rtol=1e-6)
    close(got[35:], inv[35:] / 8, rtol=1e-6)


def test_proportional_with_partial_factor():
    d = 256
    c = cache({"rope_type": "proportional", "factor": 2.0, "partial_rotary_factor": 0.25,
               "rope_theta": 1e6}, head_dim=d)
    k = int(0.25 * d // 2)
    want = np.zeros(d // 2)
    want[:k] = 1e6 ** (-(2.0 * np.arange(k)) / d) / 2.0
    assert c.rotary_dim == d
    close(c.inv_freq[:k], want[:k], rtol=1e-6)
    assert not c.inv_freq[k:].any()


def test_proportional_full():
    c = cache({"rope_type": "proportional", "factor": 2.0}, head_dim=64)
    close(c.inv_freq, default_inv_freq(1e4, 64) / 2, rtol=1e-6)


def test_custom():
    inv = np.linspace(1.0, 1e-3, 32)
    c = cache({"rope_type": "custom", "inv_freq": inv}, head_dim=64)
    close(c.inv_freq, inv)


def test_v5_rope_parameters_keys():
    c = cache({"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5},
              head_dim=128)
    assert c.rotary_dim == 64 and c.params["base"] == 1e6
    close(c.inv_freq, default_inv_freq(1e6, 64))


def test_attention_factor_override():
    c = cache({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
               "attention_factor": 0.8})
    assert c.attention_factor == pytest.approx(0.8)
    # cos/sin rows carry it
    cs, sn = c.cos_sin(3)
    np.testing.assert_allclose(cs ** 2 + sn ** 2, 0.64, rtol=1e-6)


@pytest.mark.parametrize("rtype", ["dynamic", "yarn", "llama3"])
def test_missing_context_is_a_value_error(rtype):
    with pytest.raises(ValueError, match="max_position_embeddings"):
        cache({"rope_type": rtype, "factor": 2.0})


ONE_MAPPING = [
    dict(head_dim=64, rope_scaling={"rope_type": "linear", "factor": 4.0}),
    dict(head_dim=64, rope_scaling={"rope_type": "dynamic", "factor": 2.0},
         max_position_embeddings=2048, seq_len=8192),
    dict(head_dim=128, rope_theta=5e5, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}),
    dict(head_dim=64, rope_theta=1.5e5, rope_scaling={
        "rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096,
        "truncate": False}),
    dict(head_dim=64, style="gptj", rope_scaling={
        "type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "mscale": 1.0,
        "mscale_all_dim": 1.0}, max_position_embeddings=163840),
    dict(head_dim=96, rotary_dim=24, rope_scaling={"rope_type": "linear", "factor": 2.0}),
    dict(head_dim=256, rope_theta=1e6, rope_scaling={
        "rope_type": "proportional", "factor": 2.0, "partial_rotary_factor": 0.25}),
]


@pytest.mark.parametrize("kw", ONE_MAPPING)
def test_one_mapping_with_the_loader(kw):
    # RopeCache(rope_scaling=...) is the library's config.json loader fed the
    # arguments as a config: the same numbers as from_hf_config on that config.
    from posenc.rope import rope_config, STYLES
    c = posenc.RopeCache(max_positions=8, **kw)
    cfg = rope_config(kw["head_dim"], kw.get("rotary_dim"), STYLES[kw.get("style", "neox")],
                      kw.get("rope_theta", 10000.0), kw["rope_scaling"],
                      kw.get("max_position_embeddings"))
    f = posenc.RopeCache.from_hf_config(cfg, max_positions=8, seq_len=kw.get("seq_len", 0))
    assert np.array_equal(c.inv_freq, f.inv_freq)
    assert c.params == f.params


def test_partial_factor_from_rotary_dim_is_exact():
    # int(head_dim * prf) must give rotary_dim back for every even rotary_dim
    from posenc.rope import _prf_for
    for hd in (64, 80, 96, 100, 128, 192, 256):
        for rd in range(2, hd + 1, 2):
            assert int(hd * _prf_for(rd, hd)) == rd
    assert posenc.RopeCache(head_dim=100, rotary_dim=58, max_positions=4,
                            rope_scaling={"rope_type": "linear", "factor": 2.0}).rotary_dim == 58
