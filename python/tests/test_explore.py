"""Tests of posenc.explore: every figure command writes a file, and the
numbers behind each figure are what the figure claims they are.

Run: POSENC_LIBRARY=<build>/libposenc.so PYTHONPATH=python /usr/bin/python3 -m pytest -q python/tests
"""
import glob
import importlib.util
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import posenc
from posenc.tools import explore

from conftest import REPO, PACKAGE

PYDIR = str(PACKAGE.parent)   # what PYTHONPATH needs for the posenc under test
FIXTURES = sorted(glob.glob(os.path.join(REPO, "tests", "data", "configs", "*.json")))

# One float32 ulp relative to the value (2^-23): the tolerance for "equal"
# frequencies the library computes in double and rounds once.
ULP = 2.0 ** -23


def _have_matplotlib():
    return importlib.util.find_spec("matplotlib") is not None


needs_mpl = pytest.mark.skipif(not _have_matplotlib(),
                               reason="matplotlib missing: scripts/install-deps.sh plots")
needs_hf = pytest.mark.skipif(
    not posenc._has_symbol("pe_rope_cache_create_from_hf_config"),
    reason="the library does not export pe_rope_cache_create_from_hf_config yet")


@pytest.fixture(scope="session")
def mpl_dir(tmp_path_factory):
    """One matplotlib config/font-cache directory for every subprocess (a
    fresh one per run would rebuild the font cache each time)."""
    return str(tmp_path_factory.mktemp("mplconfig"))


@pytest.fixture
def run(tmp_path, mpl_dir):
    def go(args):
        return _run(args, tmp_path, mpl_dir)
    return go


def _run(args, tmp_path, mpl_dir=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYDIR + os.pathsep + env.get("PYTHONPATH", "")
    env["MPLBACKEND"] = "Agg"
    if mpl_dir:
        env["MPLCONFIGDIR"] = mpl_dir
    return subprocess.run([sys.executable, "-m", "posenc.tools.explore"] + args, cwd=str(tmp_path),
                          env=env, capture_output=True, text=True, timeout=300)


def _llama_yarn_config(path):
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
           "max_position_embeddings": 131072, "rope_theta": 1000000.0,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                            "original_max_position_embeddings": 32768}}
    path.write_text(json.dumps(cfg))
    return str(path)


# ---------------------------------------------------------------------------
# every figure command runs and writes a non-empty file
# ---------------------------------------------------------------------------

FIGURE_COMMANDS = [
    ("decay.png", ["decay", "--max-distance", "256", "--pairs", "16", "--alibi"]),
    ("decay.svg", ["decay", "--bases", "10000", "--max-distance", "64", "--no-sinusoidal",
                   "--log-x"]),
    ("heatmap.png", ["heatmap", "--positions", "128", "--d-model", "64"]),
    ("heatmap.svg", ["heatmap", "--positions", "64", "--d-model", "32", "--concat"]),
    ("scaling_llama3.png", ["scaling", "--model", "llama3-8b", "--target-context", "65536"]),
    ("scaling_qwen.svg", ["scaling", "--model", "qwen2.5-7b"]),
    ("scaling_phi3.png", ["scaling", "--model", "phi3-mini-128k"]),
    ("scaling_mistral.png", ["scaling", "--model", "mistral-7b", "--target-context", "131072"]),
    ("scaling_deepseek.png", ["scaling", "--model", "deepseek-v3"]),
    ("extrapolation.png", ["extrapolation", "--model", "llama2-7b", "--target-context", "16384"]),
    ("extrapolation_yarn.svg", ["extrapolation", "--model", "llama2-7b", "--target-context",
                                "16384", "--scaling", "yarn"]),
    ("extrapolation_native.png", ["extrapolation", "--model", "llama3.1-8b", "--scaling",
                                  "native"]),
]


def _check_image(path):
    assert os.path.getsize(path) > 1000, path
    with open(path, "rb") as f:
        head = f.read(512)
    if path.endswith(".png"):
        assert head.startswith(b"\x89PNG\r\n\x1a\n")
    else:
        assert b"<svg" in head or b"<?xml" in head


@needs_mpl
@pytest.mark.parametrize("out,args", FIGURE_COMMANDS, ids=[c[0] for c in FIGURE_COMMANDS])
def test_figure_command_writes_file(tmp_path, run, out, args):
    r = run(args + ["-o", out])
    assert r.returncode == 0, r.stderr
    _check_image(str(tmp_path / out))


@needs_mpl
@needs_hf
def test_scaling_from_hf_config(tmp_path, run):
    cfg = _llama_yarn_config(tmp_path / "config.json")
    r = run(["scaling", "--hf-config", cfg, "--target-context", "131072", "-o", "s.png"])
    assert r.returncode == 0, r.stderr
    _check_image(str(tmp_path / "s.png"))


@needs_mpl
@needs_hf
@pytest.mark.skipif(not FIXTURES, reason="no config fixtures in tests/data/configs yet")
@pytest.mark.parametrize("config", FIXTURES, ids=[os.path.basename(p) for p in FIXTURES])
def test_scaling_on_fixture_configs(tmp_path, config):
    try:
        spec = explore.model_spec(hf_config=config)
    except (posenc.PosencError, ValueError, KeyError) as e:
        pytest.skip("%s is not a RoPE config the library builds: %s" % (
            os.path.basename(config), e))
    # in-process (the same main() as the command line): 9 configs x a fresh
    # interpreter with matplotlib would dominate the test time
    out = str(tmp_path / "f.png")
    assert explore.main(["scaling", "--hf-config", config, "--target-context",
                         str(4 * spec.context), "-o", out]) == 0
    _check_image(out)


def test_bad_output_suffix(tmp_path, run):
    r = run(["heatmap", "-o", "x.txt"])
    assert r.returncode == 2
    assert not (tmp_path / "x.txt").exists()


def test_unknown_model(tmp_path, run):
    r = run(["scaling", "--model", "no-such-model", "-o", "x.png"])
    assert r.returncode == 1
    assert "unknown model" in r.stderr


# ---------------------------------------------------------------------------
# decay
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_rope_decay_invariant_to_shifting_both_positions(base):
    # q.k of RoPE depends only on the distance: moving query and key by the
    # same offset changes the curve by float32 rounding only.
    _, a = explore.decay_numbers("rope", base, 64, 256, 24, seed=1, offset=0)
    for off in (1, 3000, 1000000):
        _, b = explore.decay_numbers("rope", base, 64, 256, 24, seed=1, offset=off)
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-4 * 64)


def test_rope_decay_is_the_sum_of_cosines():
    # mean q.k(delta) = mean over pairs of sum_i (x_i^2 + x_{i+h}^2) cos(delta*theta_i)
    # (NeoX pairs), with theta_i the library's own frequencies.
    d, pairs = 64, 16
    dist, qk = explore.decay_numbers("rope", 10000.0, d, 200, pairs, seed=3)
    x = explore._same_content(pairs, 1, d, 3)[:, 0, 0, :].astype(np.float64)
    h = d // 2
    w = (x[:, :h] ** 2 + x[:, h:] ** 2).mean(axis=0)
    theta = posenc.RopeCache(head_dim=d, max_positions=0).inv_freq.astype(np.float64)
    ref = np.cos(np.outer(dist, theta)) @ w
    np.testing.assert_allclose(qk, ref, rtol=0, atol=2e-3 * d)
    assert qk[0] == pytest.approx(w.sum(), rel=1e-5)   # rotation keeps |x|^2
    assert qk[50:].mean() < 0.6 * qk[0]                 # and it decays


def test_larger_base_decays_slower():
    _, small = explore.decay_numbers("rope", 10000.0, 128, 512, 40, seed=0)
    _, large = explore.decay_numbers("rope", 500000.0, 128, 512, 40, seed=0)
    assert large[64:].mean() > small[64:].mean()


def test_sinusoidal_decay_matches_the_table():
    # q.k = |x|^2/2 + (x/sqrt2).(PE(p+delta) + PE(p)) + PE(p+delta).PE(p),
    # using the table the heatmap shows: sinusoidal_add_ and sinusoidal_table agree.
    d, pairs, dmax, off = 64, 12, 100, 7
    dist, qk = explore.decay_numbers("sinusoidal", 10000.0, d, dmax, pairs, seed=5, offset=off)
    x = explore._same_content(pairs, 1, d, 5, scale=1 / math.sqrt(2))[:, 0, 0, :]
    x = x.astype(np.float64)
    table = explore.heatmap_numbers(off + dmax + 1, d).astype(np.float64)
    pe_q, pe_k = table[off:off + dmax + 1], table[off]
    ref = ((x ** 2).sum(1).mean() + (x.mean(0) * (pe_q + pe_k)).sum(1) + pe_q @ pe_k)
    np.testing.assert_allclose(qk, ref, rtol=0, atol=1e-3)


def test_sinusoidal_position_part_is_relative():
    # PE(p+delta).PE(p) = sum_i cos(delta*w_i): the same at every p.
    t = explore.heatmap_numbers(1200, 64).astype(np.float64)
    a = t[0:200] @ t[0]
    b = t[1000:1200] @ t[1000]
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)


def test_alibi_overlay_is_minus_slope_times_distance():
    dist, bias, slopes = explore.alibi_numbers(8, 300)
    np.testing.assert_array_equal(slopes, 2.0 ** -np.arange(1, 9, dtype=np.float32))
    ref = -np.outer(slopes.astype(np.float64), dist)
    np.testing.assert_allclose(bias, ref, rtol=1e-6, atol=0)


# ---------------------------------------------------------------------------
# heatmap
# ---------------------------------------------------------------------------

def test_heatmap_is_the_sinusoidal_table():
    d = 32
    t = explore.heatmap_numbers(50, d)
    p = np.arange(50)[:, None].astype(np.float64)
    w = 10000.0 ** (-np.arange(0, d, 2) / d)
    np.testing.assert_allclose(t[:, 0::2], np.sin(p * w), atol=1e-6)
    np.testing.assert_allclose(t[:, 1::2], np.cos(p * w), atol=1e-6)


@pytest.mark.parametrize("concat", [False, True])
def test_heatmap_stripes_widen_with_dimension(concat):
    d = 64
    t = explore.heatmap_numbers(512, d, concat=concat)
    widths = explore.stripe_widths(t)
    families = (widths[:d // 2], widths[d // 2:]) if concat else (widths[0::2], widths[1::2])
    for fam in families:   # sin columns and cos columns, fastest first
        assert np.all(np.diff(fam) >= -1e-9), fam
        assert fam[-1] > 50 * fam[0]
    # where a column has many stripes, their width is half the wavelength
    w = 10000.0 ** (-np.arange(0, d, 2) / d) if not concat else \
        np.exp(-np.arange(d // 2) * math.log(10000.0) / (d // 2 - 1))
    sin_widths = families[0]
    many = (math.pi / w) < 512 / 8
    np.testing.assert_allclose(sin_widths[many], (math.pi / w)[many], rtol=0.25)


# ---------------------------------------------------------------------------
# scaling
# ---------------------------------------------------------------------------

def _yarn_bounds(d, base, m0, beta_fast=32.0, beta_slow=1.0):
    def dim(r):
        return d * math.log(m0 / (2 * math.pi * r)) / (2 * math.log(base))
    return max(math.floor(dim(beta_fast)), 0), min(math.ceil(dim(beta_slow)), d - 1)


PRESET_TARGETS = [("llama2-7b", 16384), ("llama3-8b", 65536), ("qwen2.5-7b", 131072),
                  ("mistral-7b", 131072), ("phi3.5-mini", 131072), ("deepseek-v3", 163840),
                  ("phi3-mini-128k", 131072),
                  ("llama3-8b", 12288)]


@pytest.fixture(scope="module")
def scaled():
    return {(m, t): explore.scaling_numbers(explore.model_spec(m), t) for m, t in PRESET_TARGETS}


@pytest.mark.parametrize("model,target", PRESET_TARGETS)
def test_ntk_equals_linear_at_the_lowest_frequency(scaled, model, target):
    # base' = base*s^(d/(d-2)) makes theta_{d/2-1} = base^(-(d-2)/d)/s exactly,
    # which is the linear (PI) value: equal within one float32 ulp.
    m = scaled[(model, target)]["methods"]
    lin, ntk = m["linear"]["inv_freq"], m["ntk"]["inv_freq"]
    assert abs(ntk[-1] - lin[-1]) <= ULP * lin[-1]
    # and the highest frequency (i = 0, theta = 1) is unchanged under NTK
    assert ntk[0] == m["original"]["inv_freq"][0] == 1.0
    # in between, NTK interpolates less than linear
    assert np.all(m["ntk"]["stretch"][1:-1] < m["linear"]["stretch"][1:-1])


@pytest.mark.parametrize("model,target", PRESET_TARGETS)
def test_linear_divides_every_frequency(scaled, model, target):
    r = scaled[(model, target)]
    np.testing.assert_allclose(r["methods"]["linear"]["stretch"], r["factor"], rtol=ULP * 2)
    np.testing.assert_array_equal(r["methods"]["original"]["stretch"], 1.0)


@pytest.mark.parametrize("model,target", PRESET_TARGETS)
def test_yarn_keeps_high_and_divides_low_frequencies(scaled, model, target):
    r = scaled[(model, target)]
    spec, y = r["spec"], r["methods"]["yarn"]
    rs = y["rope_scaling"]
    s = rs["factor"]
    lo, hi = _yarn_bounds(spec.rotary_dim, spec.rope_theta, rs["original_max_position_embeddings"],
                          rs.get("beta_fast", 32.0), rs.get("beta_slow", 1.0))
    st = y["stretch"]
    i = r["index"]
    np.testing.assert_allclose(st[i <= lo], 1.0, rtol=ULP * 2)
    np.testing.assert_allclose(st[i >= hi], s, rtol=ULP * 4)
    # monotone from 1 to s, up to the float32 rounding of the two frequencies
    assert np.all(np.diff(st) >= -4 * ULP * st[1:])
    assert st.min() >= 1 - 2 * ULP and st.max() <= s * (1 + 4 * ULP)
    assert y["attention_factor"] == pytest.approx(
        1.0 if rs.get("mscale_all_dim") else 0.1 * math.log(s) + 1, rel=1e-9)


@pytest.mark.parametrize("model,target", PRESET_TARGETS)
def test_llama3_split_by_wavelength(scaled, model, target):
    r = scaled[(model, target)]
    m0 = r["spec"].context
    wl = r["methods"]["original"]["wavelength"]
    st = r["methods"]["llama3"]["stretch"]
    s = r["methods"]["llama3"]["rope_scaling"]["factor"]
    np.testing.assert_allclose(st[wl < m0 / 4.0 * 0.999], 1.0, rtol=ULP * 2)
    np.testing.assert_allclose(st[wl > m0 * 1.001], s, rtol=ULP * 4)


@pytest.mark.parametrize("model,target", PRESET_TARGETS)
def test_dynamic_at_target_is_ntk_with_hf_scale(scaled, model, target):
    # HF: base' = base*(s*L/M - s + 1)^(d/(d-2)) at L = target = s*M, so the
    # slowest frequency is divided by s^2 - s + 1 and the fastest is kept.
    r = scaled[(model, target)]
    s = r["factor"]
    st = r["methods"]["dynamic"]["stretch"]
    assert st[0] == 1.0
    assert st[-1] == pytest.approx(s * s - s + 1, rel=1e-6)


def test_longrope_uses_long_factors_beyond_the_original_context(scaled):
    r = scaled[("phi3.5-mini", 131072)]
    lr = r["methods"]["longrope"]
    assert lr["native"]
    np.testing.assert_allclose(lr["stretch"], np.float32(explore._PHI35_LONG), rtol=ULP * 4)
    assert lr["attention_factor"] == pytest.approx(
        math.sqrt(1 + math.log(32) / math.log(4096)), rel=1e-9)


PRESET_FIXTURES = {"llama3.1-8b": "llama-3.1-8b.json",
                   "qwen2.5-7b": "qwen2.5-7b-instruct-yarn.json",
                   "deepseek-v3": "deepseek-v3.json",
                   "phi3-mini-128k": "phi-3-mini-128k-instruct.json"}


@needs_hf
@pytest.mark.parametrize("preset", sorted(PRESET_FIXTURES))
def test_preset_matches_the_published_config(preset):
    # each preset is the model's config.json: the library parsing the config
    # fixture gives the same frequencies and attention factor
    path = os.path.join(REPO, "tests", "data", "configs", PRESET_FIXTURES[preset])
    if not os.path.exists(path):
        pytest.skip("fixture %s not present" % PRESET_FIXTURES[preset])
    spec = explore.model_spec(preset)
    from_cfg = explore.model_spec(hf_config=path)
    assert (from_cfg.head_dim, from_cfg.rotary_dim, from_cfg.rope_theta, from_cfg.style) == \
        (spec.head_dim, spec.rotary_dim, spec.rope_theta, spec.style)
    assert from_cfg.context == spec.context
    for seq_len in (spec.context, spec.max_context):
        a = spec.cache(seq_len=seq_len, native=True)
        b = posenc.RopeCache.from_hf_config(path, max_positions=0, seq_len=seq_len)
        np.testing.assert_array_equal(a.inv_freq, b.inv_freq)
        assert a.attention_factor == b.attention_factor


def test_native_scaling_replaces_the_generic_one(scaled):
    r = scaled[("qwen2.5-7b", 131072)]
    assert r["methods"]["yarn"]["native"]
    assert r["methods"]["yarn"]["attention_factor"] == pytest.approx(0.1 * math.log(4) + 1)
    assert not r["methods"]["linear"]["native"]
    assert "longrope" not in r["methods"]   # no factors for Qwen: not drawn


@needs_hf
def test_hf_config_spec_uses_the_library_parse(tmp_path):
    cfg = _llama_yarn_config(tmp_path / "config.json")
    spec = explore.model_spec(hf_config=cfg)
    assert (spec.head_dim, spec.rotary_dim, spec.rope_theta, spec.context) == \
        (128, 128, 1000000.0, 32768)
    r = explore.scaling_numbers(spec, 131072)
    own = r["methods"]["yarn"]
    assert own["native"]
    ref = posenc.RopeCache.from_hf_config(cfg, max_positions=0).inv_freq
    np.testing.assert_array_equal(own["inv_freq"], ref.astype(np.float64))
    # the preset with the same numbers gives the same curve
    q = explore.scaling_numbers(explore.model_spec("qwen2.5-7b"), 131072)
    np.testing.assert_array_equal(q["methods"]["yarn"]["inv_freq"], own["inv_freq"])


# ---------------------------------------------------------------------------
# extrapolation
# ---------------------------------------------------------------------------

def test_extrapolation_turns():
    spec = explore.model_spec("llama2-7b")
    r = explore.extrapolation_numbers(spec, 16384)
    inv = posenc.RopeCache(head_dim=128, rope_theta=10000.0, max_positions=0).inv_freq
    np.testing.assert_allclose(r["turns_train"], 4096 * inv.astype(np.float64) / (2 * math.pi))
    np.testing.assert_allclose(r["turns_target"], 4 * r["turns_train"])
    # wavelength 2*pi*10000^(2i/128) > 4096 for i >= 46: 18 of 64 frequencies
    # never complete a turn in 4k tokens
    assert r["unseen"].sum() == 18 and np.all(r["unseen"][46:]) and not r["unseen"][45]


@pytest.mark.parametrize("method", ["linear", "yarn", "llama3"])
def test_extrapolation_scaling_brings_slow_frequencies_back(method):
    spec = explore.model_spec("llama2-7b")
    r = explore.extrapolation_numbers(spec, 16384, scaling=method)
    u = r["unseen"]
    # the frequencies that never turned in training make at the target the
    # same turns they made at the training context
    np.testing.assert_allclose(r["turns_scaled"][u], r["turns_train"][u], rtol=ULP * 4)
    if method == "yarn":   # and the fast ones are left alone
        np.testing.assert_allclose(r["turns_scaled"][:10], r["turns_target"][:10], rtol=ULP)


def test_extrapolation_train_context_override():
    # a model trained at 2048 instead: the generic methods extend from 2048
    spec = explore.model_spec("llama2-7b")
    r = explore.extrapolation_numbers(spec, 16384, train_context=2048, scaling="linear")
    np.testing.assert_allclose(r["turns_scaled"], r["turns_train"], rtol=ULP * 4)
    np.testing.assert_allclose(r["turns_target"], 8 * r["turns_train"])
    assert spec.context == 4096   # the caller's spec is not changed


def test_extrapolation_rejects_unknown_scaling():
    with pytest.raises(ValueError):
        explore.extrapolation_numbers(explore.model_spec("llama2-7b"), 8192, scaling="magic")
    with pytest.raises(ValueError):
        explore.extrapolation_numbers(explore.model_spec("llama2-7b"), 8192, scaling="native")


def test_target_shorter_than_context_is_an_error(tmp_path):
    out = str(tmp_path / "x.png")
    assert explore.main(["scaling", "--model", "llama3-8b", "--target-context", "4096",
                         "-o", out]) == 1
    assert not os.path.exists(out)


def test_linear_scaled_config_original_context_is_m_over_factor(tmp_path):
    # a linear x4 model declaring max_position_embeddings 16384 was
    # trained at 4096; that, not 16384, is its original context.
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096,
                               "num_attention_heads": 32, "rope_theta": 10000.0,
                               "max_position_embeddings": 16384,
                               "rope_scaling": {"type": "linear", "factor": 4.0}}))
    spec = explore.model_spec(hf_config=str(cfg))
    assert spec.context == 4096 and spec.max_context == 16384


def test_heatmap_defaults_to_concat_halves(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(explore, "draw_heatmap",
                        lambda table, out, base, concat: seen.update(concat=concat))
    assert explore.main(["heatmap", "--positions", "8", "--d-model", "8", "-o",
                         str(tmp_path / "h.png")]) == 0
    assert seen["concat"] is True
    assert explore.main(["heatmap", "--positions", "8", "--d-model", "8", "--interleaved", "-o",
                         str(tmp_path / "h.png")]) == 0
    assert seen["concat"] is False


@pytest.mark.parametrize("alias", ["posenc.explore", "posenc.pick"])
def test_old_module_commands_still_work(tmp_path, alias):
    args = ["heatmap", "--positions", "8", "--d-model", "8", "-o", "h.png"] \
        if alias == "posenc.explore" else ["--train-context", "4096", "--target-context",
                                           "16384", "--no-check"]
    env = dict(os.environ, PYTHONPATH=PYDIR, MPLBACKEND="Agg")
    r = subprocess.run([sys.executable, "-m", alias] + args, cwd=str(tmp_path), env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
