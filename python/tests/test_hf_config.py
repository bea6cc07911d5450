"""RopeCache.from_hf_config on real model configs (tests/data/configs) agrees
with RopeCache(...) built from the same values by hand, and accepts a path,
a model directory, a dict, JSON text or bytes."""
import json
import shutil

import numpy as np
import pytest

import posenc
from conftest import REPO, default_inv_freq, grid, rope_reference

CONFIGS = REPO / "tests" / "data" / "configs"


def phi3_dict():
    c = json.loads((CONFIGS / "phi-3-mini-128k-instruct.json").read_text())
    rs = dict(c["rope_scaling"])
    rs["original_max_position_embeddings"] = c["original_max_position_embeddings"]
    return rs


# config file -> the RopeCache arguments a user would derive from it by hand
BY_HAND = {
    "codellama-7b.json": lambda: dict(head_dim=128, rope_theta=1e6),
    "mistral-7b-v0.1.json": lambda: dict(head_dim=128, rope_theta=1e4),
    "llama-3.1-8b.json": lambda: dict(
        head_dim=128, rope_theta=5e5,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "gpt-j-6b.json": lambda: dict(head_dim=256, rotary_dim=64, style="gptj"),
    "gpt-neox-20b.json": lambda: dict(head_dim=96, rotary_dim=24),
    "deepseek-v3.json": lambda: dict(
        head_dim=64, style="gptj", max_position_embeddings=163840,
        rope_scaling={"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                      "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}),
    "gpt-oss-20b.json": lambda: dict(
        head_dim=64, rope_theta=150000.0,
        rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                      "original_max_position_embeddings": 4096, "truncate": False}),
    "qwen2.5-7b-instruct-yarn.json": lambda: dict(
        head_dim=128, rope_theta=1e6,
        rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
    # seq_len 0 in from_hf_config means max_position_embeddings: past M0, long factors
    "phi-3-mini-128k-instruct.json": lambda: dict(
        head_dim=96, seq_len=131072, max_position_embeddings=131072, rope_scaling=phi3_dict()),
}


def config_files():
    return sorted(p.name for p in CONFIGS.glob("*.json")) if CONFIGS.is_dir() else []


@pytest.mark.parametrize("name", config_files())
def test_config_matches_constructor(name):
    from_file = posenc.RopeCache.from_hf_config(CONFIGS / name, max_positions=64)
    if name not in BY_HAND:
        pytest.skip("no hand-derived parameters for %s" % name)
    by_hand = posenc.RopeCache(max_positions=64, **BY_HAND[name]())
    assert from_file.head_dim == by_hand.head_dim
    assert from_file.rotary_dim == by_hand.rotary_dim
    assert from_file.style == by_hand.style
    np.testing.assert_array_equal(from_file.inv_freq, by_hand.inv_freq)
    assert from_file.attention_factor == pytest.approx(by_hand.attention_factor, rel=1e-12)
    assert from_file.softmax_scale == pytest.approx(by_hand.softmax_scale, rel=1e-12)


def test_every_input_form(tmp_path):
    src = CONFIGS / "llama-3.1-8b.json"
    if not src.exists():
        pytest.skip("no test configs")
    text = src.read_text()
    model_dir = tmp_path / "Llama-3.1-8B"
    model_dir.mkdir()
    shutil.copy(src, model_dir / "config.json")
    forms = [src, str(src), model_dir, str(model_dir), json.loads(text), text, text.encode()]
    caches = [posenc.RopeCache.from_hf_config(f, max_positions=32) for f in forms]
    for c in caches[1:]:
        np.testing.assert_array_equal(c.inv_freq, caches[0].inv_freq)
    assert caches[0].params["scaling"] == "llama3"


def test_seq_len_selects_longrope_factors():
    src = CONFIGS / "phi-3-mini-128k-instruct.json"
    if not src.exists():
        pytest.skip("no test configs")
    short = posenc.RopeCache.from_hf_config(src, max_positions=16, seq_len=4096)
    long = posenc.RopeCache.from_hf_config(src, max_positions=16)
    assert not np.array_equal(short.inv_freq, long.inv_freq)
    # the attention factor is the init value for short contexts too (HF)
    assert short.attention_factor == long.attention_factor


def test_usable_for_apply(rng):
    # transformers' LlamaConfig: head_dim = hidden_size / num_attention_heads,
    # rope_theta 10000 when absent, NeoX rotate_half pairing.
    cache = posenc.RopeCache.from_hf_config({"model_type": "llama", "hidden_size": 256,
                                             "num_attention_heads": 4,
                                             "max_position_embeddings": 128}, max_positions=128)
    assert (cache.head_dim, cache.rotary_dim, cache.max_positions) == (64, 64, 128)
    assert cache.params["base"] == 10000.0
    inv = default_inv_freq(10000.0, 64)
    np.testing.assert_allclose(cache.inv_freq, inv, rtol=1e-7, atol=0)
    q = rng.standard_normal((1, 4, 5, 64), dtype=np.float32)
    x = q.copy()
    cache.apply_(q)
    # the float64 rotation of the same values, 1e-5 (a few float32 ulps of |x| < 6)
    ref = rope_reference(x, inv, grid(None, 1, 5))
    np.testing.assert_allclose(q, ref, rtol=0, atol=1e-5)
    # position 0 is the identity, bit for bit; the others really rotate
    np.testing.assert_array_equal(q[:, :, 0], x[:, :, 0])
    assert np.abs(q[:, :, 1:] - x[:, :, 1:]).max() > 0.1


def test_errors():
    with pytest.raises(posenc.PosencError) as e:
        posenc.RopeCache.from_hf_config('{"hidden_size": 4096,', max_positions=8)
    assert e.value.status == posenc.Status.ERR_PARSE
    with pytest.raises(posenc.PosencError) as e:
        posenc.RopeCache.from_hf_config({"model_type": "llama", "hidden_size": 64,
                                         "num_attention_heads": 2,
                                         "max_position_embeddings": 128,
                                         "rope_scaling": {"rope_type": "warp-drive"}})
    assert e.value.status == posenc.Status.ERR_UNSUPPORTED
    assert "warp-drive" in e.value.message or "rope_type" in e.value.message
    # a model_type the library does not know: refused unless guess=True
    with pytest.raises(posenc.PosencError) as e:
        posenc.RopeCache.from_hf_config({"model_type": "brand_new_lm", "head_dim": 64,
                                         "rope_theta": 1e4})
    assert e.value.status == posenc.Status.ERR_UNSUPPORTED
    assert "brand_new_lm" in e.value.message and "PE_CONFIG_GUESS" in e.value.message
    c = posenc.RopeCache.from_hf_config({"model_type": "brand_new_lm", "head_dim": 64,
                                         "rope_theta": 1e4}, guess=True)
    assert c.params["head_dim"] == 64
    with pytest.raises(TypeError):
        posenc.RopeCache.from_hf_config(42)
    with pytest.raises(FileNotFoundError):
        posenc.RopeCache.from_hf_config("/nonexistent/config.json")
