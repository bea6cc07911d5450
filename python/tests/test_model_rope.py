"""posenc.ModelRope on the published config.json of models whose layers
differ (tests/data/configs/per_layer, provenance in tests/data/configs/README.md).

The expected layer layouts are those of transformers' config classes and
attention modules (Gemma3TextConfig's layer_types from sliding_window_pattern,
Gemma3nTextConfig's layer_types, ModernBertConfig's global_attn_every_n_layers,
Cohere2Attention and Exaone4Attention rotating only on sliding layers,
Llama4TextAttention's use_rope from no_rope_layers, Qwen3NextConfig's
full_attention_interval), and the frequencies are those of
modeling_rope_utils' _compute_default_rope_parameters,
_compute_linear_scaling_rope_parameters, _compute_llama3_parameters and
_compute_yarn_parameters, written out below in float64 - never read from
the library under test.
"""
import gc
import json
import math
import weakref

import numpy as np
import pytest

import posenc
from posenc import _lib
from conftest import REPO, rope_reference, yarn_inv_freq

CONFIGS = REPO / "tests" / "data" / "configs"
PER_LAYER = CONFIGS / "per_layer"


# ---- float64 references (transformers' modeling_rope_utils) --------------------

def inv_default(base, dim):
    # 1 / base ** (arange(0, dim, 2) / dim)
    return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def inv_linear(base, dim, factor):
    return inv_default(base, dim) / factor


def inv_llama3(base, dim, factor, low, high, m0):
    inv = inv_default(base, dim)
    out = np.empty_like(inv)
    lo_wl, hi_wl = m0 / low, m0 / high
    for i, f in enumerate(inv):
        wl = 2 * math.pi / f
        if wl > lo_wl:
            out[i] = f / factor
        elif wl < hi_wl:
            out[i] = f
        else:
            s = (m0 / wl - low) / (high - low)
            out[i] = (1 - s) * f / factor + s * f
    return out


def f32_ulp(v):
    _, e = np.frexp(np.abs(np.asarray(v, dtype=np.float64)))
    return np.ldexp(1.0, e - 24)


def expect_cache(what, cache, *, head_dim, inv, style="neox", scaling="default", factor=None,
                 attention=1.0, base):
    assert cache is not None, "%s: no RoPE, expected base %g" % (what, base)
    p = cache.params
    got = (p["head_dim"], p["rotary_dim"], p["style"], p["scaling"], p["base"])
    want = (head_dim, 2 * len(inv), style, scaling, base)
    assert got == want, "%s: %s, expected %s" % (what, got, want)
    if factor is not None:
        assert p["factor"] == factor, what
    assert cache.attention_factor == pytest.approx(attention, rel=1e-12), what
    err = np.abs(cache.inv_freq.astype(np.float64) - inv)
    bad = np.nonzero(err > f32_ulp(inv))[0]
    assert bad.size == 0, "%s: inv_freq[%d] = %.9g, transformers %.17g" % (
        what, bad[0], cache.inv_freq[bad[0]], inv[bad[0]])


def load(name, **kw):
    kw.setdefault("max_positions", 0)
    return posenc.ModelRope.from_hf_config(PER_LAYER / name, **kw)


def layers_of(m):
    """{id(cache): [layers]} - the layers sharing each cache object."""
    out = {}
    for i in range(len(m)):
        c = m.layer(i)
        if c is not None:
            out.setdefault(id(c), []).append(i)
    return out


# ---- Gemma ------------------------------------------------------------------------

# file, layers, head_dim, global linear factor (None: rope_scaling null), heads
GEMMA3 = [
    ("gemma-3-1b-it.json", 26, 256, None, (4, 1)),
    # minimal text_config: head_dim 256, 8 heads / 4 kv, rope_theta 1e6 are
    # Gemma3TextConfig's defaults
    ("gemma-3-4b-it.json", 34, 256, 8.0, (8, 4)),
    # hidden 3840 / 16 heads would be 240; the class default head_dim 256 applies
    ("gemma-3-12b-it.json", 48, 256, 8.0, (16, 8)),
    ("gemma-3-27b-it.json", 62, 128, 8.0, (32, 16)),
]


@pytest.mark.parametrize("name,layers,head_dim,factor,heads", GEMMA3)
def test_gemma3(name, layers, head_dim, factor, heads):
    m = load(name)
    assert len(m) == m.num_layers == layers
    assert m.nope_layers == ()
    assert m.pairing_guessed is False
    assert m.heads == heads
    assert m.heads.num_attention_heads == heads[0]
    local_inv = inv_default(10000.0, head_dim)
    global_inv = inv_default(1e6, head_dim) if factor is None else \
        inv_linear(1e6, head_dim, factor)
    for i in range(layers):
        if (i + 1) % 6:      # Gemma3TextConfig: sliding unless (i + 1) % pattern == 0
            expect_cache("%s layer %d" % (name, i), m.layer(i), head_dim=head_dim,
                         inv=local_inv, base=10000.0)
        else:
            expect_cache("%s layer %d" % (name, i), m.layer(i), head_dim=head_dim,
                         inv=global_inv, base=1e6,
                         scaling="default" if factor is None else "linear", factor=factor)
    # one object per distinct cache, in Python too
    assert m.layer(0) is m.layer(4) is m[1]
    assert m.layer(5) is m.layer(11)
    assert m.layer(0) is not m.layer(5)
    local = [i for i in range(layers) if (i + 1) % 6]
    glob = [i for i in range(layers) if not (i + 1) % 6]
    caches = m.caches()
    assert [c.layers for c in caches] == [tuple(local), tuple(glob)]
    assert caches[0].cache is m.layer(0) and caches[1].cache is m.layer(5)
    assert sorted(layers_of(m).values()) == sorted([local, glob])
    assert list(m) == [m.layer(i) for i in range(layers)]


def test_gemma3_repr_names_each_cache():
    m = load("gemma-3-4b-it.json")
    text = repr(m)
    assert text.startswith("<posenc.ModelRope 34 layers, 2 caches")
    lines = text.splitlines()
    assert "default base=10000 " in lines[1] and "29 layers [0-4, 6-10," in lines[1]
    assert "linear x8 base=1e+06 " in lines[2] and "attention_factor=1 " in lines[2]
    assert "5 layers [5, 11, 17, 23, 29]" in lines[2]
    assert "no RoPE" not in text


def test_gemma3n_layer_types():
    cfg = json.loads((PER_LAYER / "gemma-3n-e4b-it.json").read_text())
    types = cfg["text_config"]["layer_types"]
    m = load("gemma-3n-e4b-it.json")
    assert len(m) == len(types) == 35
    for i, t in enumerate(types):
        if t == "sliding_attention":
            expect_cache("gemma-3n %d" % i, m.layer(i), head_dim=256,
                         inv=inv_default(10000.0, 256), base=10000.0)
        else:
            assert t == "full_attention"
            expect_cache("gemma-3n %d" % i, m.layer(i), head_dim=256,
                         inv=inv_default(1e6, 256), base=1e6)
    assert len(m.caches()) == 2


def rotate_and_compare(cache, inv, style, rng, max_pos):
    q = rng.standard_normal((2, 4, 7, cache.head_dim)).astype(np.float32)
    k = rng.standard_normal((2, 2, 7, cache.head_dim)).astype(np.float32)   # GQA
    pos = rng.integers(0, max_pos, size=(2, 7))
    want_q = rope_reference(q, inv, pos, style)
    want_k = rope_reference(k, inv, pos, style)
    cache.apply_(q, k, positions=pos)
    np.testing.assert_allclose(q, want_q, atol=2e-5)
    np.testing.assert_allclose(k, want_k, atol=2e-5)


@pytest.mark.parametrize("max_positions", [4096, 0])
def test_gemma3_rotation_local_and_global(rng, max_positions):
    # gemma-3-4b: layer 0 local (base 1e4, no scaling), layer 5 global
    # (base 1e6, linear x8), q [2, 4, 7, 256] and GQA k at random positions,
    # against the float64 rotate_half of the frequencies above.
    m = load("gemma-3-4b-it.json", max_positions=max_positions)
    rotate_and_compare(m.layer(0), inv_default(1e4, 256), "neox", rng, 4096)
    rotate_and_compare(m.layer(5), inv_linear(1e6, 256, 8.0), "neox", rng, 4096)


# ---- ModernBERT, Cohere2, Llama 4, EXAONE 4, Qwen3-Next, gpt-oss, Qwen-VL ---------

def test_modernbert_global_and_local_thetas():
    m = load("modernbert-base.json")
    assert len(m) == 22
    assert m.heads == (12, 12)     # no num_key_value_heads: the query heads
    for i in range(22):
        # ModernBertConfig: global iff i % global_attn_every_n_layers (3) == 0;
        # head_dim = hidden_size 768 / 12 heads
        base = 160000.0 if i % 3 == 0 else 10000.0
        expect_cache("ModernBERT %d" % i, m.layer(i), head_dim=64, inv=inv_default(base, 64),
                     base=base)
    assert [c.layers for c in m.caches()] == [tuple(range(0, 22, 3)),
                                              tuple(i for i in range(22) if i % 3)]


def test_cohere2_nope_globals_and_interleaved_pairs(rng):
    m = load("c4ai-command-r7b-12-2024.json")
    assert len(m) == 32
    nope = tuple(i for i in range(32) if (i + 1) % 4 == 0)
    assert m.nope_layers == nope
    for i in range(32):
        if i in nope:
            assert m.layer(i) is None
            assert m[i] is None
        else:
            # Cohere2's rotate_half pairs x[..., ::2] with x[..., 1::2]: gptj
            expect_cache("Command-R7B %d" % i, m.layer(i), head_dim=128, style="gptj",
                         inv=inv_default(50000.0, 128), base=50000.0)
    assert len(m.caches()) == 1 and m.caches()[0].layers == tuple(
        i for i in range(32) if i not in nope)
    assert m.nope_temperature(3) == (1.0, 0.0)     # no temperature tuning outside Llama 4
    assert "no RoPE: 8 layers [3, 7, 11," in repr(m)
    # the rotation really is interleaved
    m = load("c4ai-command-r7b-12-2024.json", max_positions=64)
    rotate_and_compare(m.layer(0), inv_default(50000.0, 128), "gptj", rng, 64)


def test_one_cache_loader_points_to_model_rope():
    with pytest.raises(posenc.PosencError) as e:
        posenc.RopeCache.from_hf_config(PER_LAYER / "c4ai-command-r7b-12-2024.json")
    assert e.value.status == posenc.Status.ERR_UNSUPPORTED
    assert "pe_model_rope_from_hf_config" in e.value.message


def test_llama4_scout_no_rope_layers_and_temperature():
    cfg = json.loads((PER_LAYER / "llama-4-scout-17b-16e-instruct.json").read_text())
    flags = cfg["text_config"]["no_rope_layers"]      # 1 = this layer uses RoPE
    # max_positions 0: the config's 10485760 rows would be 5 GiB of table
    m = load("llama-4-scout-17b-16e-instruct.json")
    assert len(m) == len(flags) == 48
    assert m.heads == (40, 8)
    inv = inv_llama3(500000.0, 128, 16.0, 1.0, 1.0, 8192.0)
    assert 0 < np.count_nonzero(inv != inv_default(500000.0, 128)) < 64  # both sides of the cut
    for i, use_rope in enumerate(flags):
        t = m.nope_temperature(i)
        if use_rope:
            expect_cache("Llama-4-Scout %d" % i, m.layer(i), head_dim=128, style="gptj",
                         scaling="llama3", factor=16.0, inv=inv, base=500000.0)
            assert t == (1.0, 0.0)
            assert t.multiplier([0, 10**6]).tolist() == [1.0, 1.0]
        else:
            assert m.layer(i) is None
            assert (t.floor_scale, t.attn_scale) == (8192.0, 0.1)
            # Llama4TextAttention: log1p(floor((p + 1) / floor_scale)) * attn_scale + 1
            want = [math.log1p(math.floor((p + 1) / 8192.0)) * 0.1 + 1 for p in (0, 8191, 10**6)]
            np.testing.assert_allclose(t.multiplier([0, 8191, 10**6]), want, rtol=1e-15)
    assert m.nope_layers == tuple(i for i, f in enumerate(flags) if not f)


def test_exaone4_nope_full_layers():
    m = load("exaone-4.0-32b.json")
    assert len(m) == 64
    inv = inv_llama3(1e6, 128, 16.0, 1.0, 4.0, 8192.0)
    for i in range(64):
        if (i + 1) % 4:
            expect_cache("EXAONE-4 %d" % i, m.layer(i), head_dim=128, scaling="llama3",
                         factor=16.0, inv=inv, base=1e6)
        else:
            assert m.layer(i) is None
    assert len(m.caches()) == 1


def test_qwen3_next_linear_attention_has_no_rope():
    m = posenc.ModelRope.from_hf_config(CONFIGS / "qwen3-next-80b-a3b-instruct.json",
                                        max_positions=0)
    assert len(m) == 48
    for i in range(48):
        if (i + 1) % 4:      # linear_attention
            assert m.layer(i) is None
        else:                # partial_rotary_factor 0.25 of head_dim 256
            expect_cache("Qwen3-Next %d" % i, m.layer(i), head_dim=256,
                         inv=inv_default(1e7, 64), base=1e7)


def test_gpt_oss_one_yarn_cache():
    m = posenc.ModelRope.from_hf_config(CONFIGS / "gpt-oss-20b.json", max_positions=0)
    assert len(m) == 24 and m.nope_layers == ()
    inv = yarn_inv_freq(150000.0, 64, 32.0, 4096.0, truncate=False)
    for i in range(24):
        expect_cache("gpt-oss %d" % i, m.layer(i), head_dim=64, scaling="yarn", factor=32.0,
                     attention=0.1 * math.log(32.0) + 1.0, inv=inv, base=150000.0)
    (shared,) = m.caches()
    assert shared.layers == tuple(range(24))
    assert "yarn x32 base=150000 attention_factor=1.34657" in repr(m)


@pytest.mark.parametrize("name", ["qwen2-vl-7b-instruct.json", "qwen2.5-vl-7b-instruct.json"])
def test_qwen_vl_mrope_is_default_frequencies(name):
    m = posenc.ModelRope.from_hf_config(CONFIGS / name, max_positions=0)
    assert len(m) == 28 and m.heads == (28, 4)
    for i in range(28):
        expect_cache("%s %d" % (name, i), m.layer(i), head_dim=128, inv=inv_default(1e6, 128),
                     base=1e6)


def test_one_cache_config_works_too():
    path = CONFIGS / "llama-3.1-8b.json"
    m = posenc.ModelRope.from_hf_config(path, max_positions=0)
    assert len(m) == 32 and m.nope_layers == () and not m.pairing_guessed
    (shared,) = m.caches()
    assert shared.layers == tuple(range(32))
    expect_cache("Llama-3.1-8B", shared.cache, head_dim=128, scaling="llama3", factor=8.0,
                 inv=inv_llama3(500000.0, 128, 8.0, 1.0, 4.0, 8192.0), base=500000.0)
    one = posenc.RopeCache.from_hf_config(path, max_positions=0)
    np.testing.assert_array_equal(shared.cache.inv_freq, one.inv_freq)


# ---- inputs, max_positions, errors ----------------------------------------------

def test_every_input_form(tmp_path):
    path = PER_LAYER / "gemma-3-1b-it.json"
    text = path.read_text()

    class FakePretrainedConfig:       # what config_text reads of a transformers config
        def to_dict(self):
            return json.loads(text)

    (tmp_path / "config.json").write_text(text)
    forms = [path, str(path), tmp_path, json.loads(text), text, text.encode(),
             FakePretrainedConfig()]
    for form in forms:
        m = posenc.ModelRope.from_hf_config(form, max_positions=0)
        assert [c.layers for c in m.caches()] == [
            tuple(i for i in range(26) if (i + 1) % 6), tuple(range(5, 26, 6))]
        np.testing.assert_array_equal(m.layer(5).inv_freq,
                                      load("gemma-3-1b-it.json").layer(5).inv_freq)
    with pytest.raises(TypeError):
        posenc.ModelRope.from_hf_config(3.5)


def test_max_positions_default_and_from_config():
    cfg = {"model_type": "llama", "head_dim": 16, "num_hidden_layers": 2, "rope_theta": 1e4,
           "max_position_embeddings": 48}
    assert _lib.PE_MAX_POSITIONS_FROM_CONFIG == -1 == posenc.MAX_POSITIONS_FROM_CONFIG
    # The binding's one default (the C library's), not the config's 48.
    assert posenc.ModelRope.from_hf_config(cfg).layer(0).max_positions == 4096
    for m in (posenc.ModelRope.from_hf_config(cfg, max_positions=posenc.MAX_POSITIONS_FROM_CONFIG),
              posenc.ModelRope.from_hf_config(cfg, max_positions=-1)):
        assert m.layer(0).max_positions == 48
        m.layer(1).cos_sin(47)
        with pytest.raises(posenc.PosencError) as e:
            m.layer(1).cos_sin(48)
        assert e.value.status == posenc.Status.ERR_POSITION_OUT_OF_RANGE
    assert posenc.ModelRope.from_hf_config(cfg, max_positions=8).layer(0).max_positions == 8
    del cfg["max_position_embeddings"]
    with pytest.raises(posenc.PosencError) as e:
        posenc.ModelRope.from_hf_config(cfg, max_positions=posenc.MAX_POSITIONS_FROM_CONFIG)
    assert e.value.status == posenc.Status.ERR_PARSE
    assert "max_position_embeddings" in e.value.message
    assert posenc.ModelRope.from_hf_config(cfg, max_positions=0).layer(0).max_positions == 0


def test_header_constant_matches():
    import re
    header = (REPO / "include" / "posenc.h").read_text()
    v = re.search(r"#define PE_MAX_POSITIONS_FROM_CONFIG \((-?\d+)\)", header)
    assert v and int(v.group(1)) == _lib.PE_MAX_POSITIONS_FROM_CONFIG


def test_broken_configs_raise_the_librarys_message():
    cases = [
        # unknown model type: refused unless the caller asks for a guess
        ({"model_type": "brand_new_lm", "head_dim": 64, "num_hidden_layers": 2},
         posenc.Status.ERR_UNSUPPORTED, ["brand_new_lm", "PE_CONFIG_GUESS"]),
        ('{"model_type": "llama", "head_dim": 16,', posenc.Status.ERR_PARSE,
         ["pe_model_rope_from_hf_config"]),
        ({"model_type": "llama", "head_dim": 16, "rope_theta": 1e4},
         posenc.Status.ERR_PARSE, ["num_hidden_layers"]),
        ({"model_type": "llama", "head_dim": 16, "rope_theta": 1e4, "num_hidden_layers": 3,
          "layer_types": ["full_attention"]},
         posenc.Status.ERR_PARSE, ["layer_types has 1 entries, num_hidden_layers is 3"]),
    ]
    for cfg, status, words in cases:
        with pytest.raises(posenc.PosencError) as e:
            posenc.ModelRope.from_hf_config(cfg, max_positions=0)
        assert e.value.status == status, cfg
        assert e.value.message == _lib.last_error()
        for w in words:
            assert w in e.value.message, (cfg, e.value.message)
    cfg = {"model_type": "llama", "head_dim": 16, "rope_theta": 1e4, "num_hidden_layers": 3}
    with pytest.raises(posenc.PosencError) as e:
        posenc.ModelRope.from_hf_config(cfg, max_positions=-2)
    assert e.value.status == posenc.Status.ERR_INVALID_ARGUMENT
    assert "max_positions -2" in e.value.message
    with pytest.raises(posenc.PosencError) as e:
        posenc.ModelRope.from_hf_config(cfg, max_positions=0, seq_len=-1)
    assert e.value.status == posenc.Status.ERR_INVALID_ARGUMENT


def test_unknown_model_type_says_it_guessed():
    # a guess without rope_theta: never a silent 10000
    with pytest.raises(posenc.PosencError) as e:
        posenc.ModelRope.from_hf_config({"model_type": "brand_new_lm", "head_dim": 64,
                                         "num_hidden_layers": 2}, max_positions=0, guess=True)
    assert e.value.status == posenc.Status.ERR_PARSE
    assert "lacks rope_theta" in e.value.message and "brand_new_lm" in e.value.message
    m = posenc.ModelRope.from_hf_config({"model_type": "brand_new_lm", "head_dim": 64,
                                         "num_hidden_layers": 2, "rope_theta": 20000.0},
                                        max_positions=0, guess=True)
    assert m.pairing_guessed is True
    assert "pairing guessed" in repr(m).splitlines()[0]
    expect_cache("guessed", m.layer(1), head_dim=64, inv=inv_default(20000.0, 64),
                 base=20000.0)


def test_layer_index_errors():
    m = posenc.ModelRope.from_hf_config({"model_type": "llama", "head_dim": 16,
                                         "rope_theta": 1e4, "num_hidden_layers": 3},
                                        max_positions=0)
    assert m.heads == (0, 0)      # the config has no heads
    for bad in (3, -1, 2**40):
        with pytest.raises((IndexError, ValueError)):
            m.layer(bad)
        with pytest.raises((IndexError, ValueError)):
            m.nope_temperature(bad)
    with pytest.raises(IndexError, match=r"layer 3 is outside \[0, 3\)"):
        m.layer(3)
    with pytest.raises(TypeError):
        m.layer("0")
    assert m[-1] is m.layer(2)
    with pytest.raises(IndexError):
        m[-4]


# ---- lifetime -------------------------------------------------------------------

def test_layer_cache_outlives_the_model(rng):
    m = load("gemma-3-4b-it.json", max_positions=64)
    local, glob = m.layer(0), m.layer(5)
    assert local.borrowed and glob.borrowed
    owner = weakref.ref(m._model)
    del m
    gc.collect()
    assert owner() is not None             # kept alive by the layer caches
    rotate_and_compare(glob, inv_linear(1e6, 256, 8.0), "neox", rng, 64)
    local.close()                          # not its own: nothing happens
    assert not local.closed
    rotate_and_compare(local, inv_default(1e4, 256), "neox", rng, 64)
    del local, glob
    gc.collect()
    assert owner() is None                 # the last layer cache let go of the model


def test_layer_caches_are_never_destroyed_by_themselves(monkeypatch):
    # A layer cache's finalizer and close() must not pe_rope_cache_destroy a
    # cache the pe_model_rope owns (it would be freed twice).
    destroyed = []
    real = _lib.lib.pe_rope_cache_destroy
    monkeypatch.setattr(_lib.lib, "pe_rope_cache_destroy",
                        lambda h: (destroyed.append(h), real(h)))
    m = load("gemma-3-1b-it.json")
    keep = m.layer(0)
    keep.close()
    del m                 # drops the global cache's Python object: its finalizer runs
    gc.collect()
    del keep              # the last one: the model is freed (pe_model_rope_destroy)
    gc.collect()
    assert destroyed == []
    own = posenc.RopeCache(head_dim=16, max_positions=4)   # an owned cache still is freed
    h = own._handle
    own.close()
    assert destroyed == [h]


def test_close_closes_every_layer_cache(rng):
    q = rng.standard_normal((1, 1, 2, 256)).astype(np.float32)
    with load("gemma-3-1b-it.json") as m:
        c = m.layer(5)
        c.apply_(q)
    assert m.closed and c.closed
    with pytest.raises(ValueError, match="closed"):
        c.apply_(q)
    with pytest.raises(ValueError, match="closed"):
        m.layer(0)
    with pytest.raises(ValueError, match="closed"):
        m.caches()
    m.close()             # idempotent
    assert repr(m) == "<posenc.ModelRope closed>"
    assert repr(c) == "<posenc.RopeCache closed>"
