"""ModelRope's rotations beside the attention (roles), where their channels
sit (slices), the QK-norm each applies and the MLA latent norm's eps, on the
configs of tests/data/configs (provenance in its README.md): DeepSeek-V3
and DeepSeek-V3.2 (published), DeepSeek-V4-Flash (built to the published
key set, in its three spellings).

Expected numbers are the ones include/posenc.h states for each model
(pe_model_rope_layer_slice, pe_model_rope_layer_role,
pe_model_rope_layer_qk_norm, pe_model_rope_latent_norm_eps) and the
fixtures' own keys (qk_nope_head_dim, kv_lora_rank, compress_ratios...)."""
import ctypes
import json
import re

import numpy as np
import pytest

import posenc
from posenc import _lib
from conftest import REPO

CONFIGS = REPO / "tests" / "data" / "configs"
V4_FILES = ("deepseek-v4-flash.json", "deepseek-v4-flash-nested.json",
            "deepseek-v4-flash-flat.json")
F32_1E6 = float(np.float32(1e-6))     # an eps as the library holds it (float32)


def load(name, **kw):
    return posenc.ModelRope.from_hf_config(CONFIGS / name, **kw)


def test_role_constants_and_structs_match_the_header():
    header = (REPO / "include" / "posenc.h").read_text()

    def enum(first, last):
        body = header[header.index(first):]
        body = body[:body.index(last) + len(last) + 6]
        return {n: int(v) for n, v in re.findall(r"(PE_\w+) = (\d+)", body)}
    assert enum("PE_ROPE_ROLE_ATTENTION = 0", "PE_ROPE_ROLE_COMPRESSOR") == {
        "PE_ROPE_ROLE_ATTENTION": posenc.ROLE_ATTENTION, "PE_ROPE_ROLE_INDEXER":
        posenc.ROLE_INDEXER, "PE_ROPE_ROLE_COMPRESSOR": posenc.ROLE_COMPRESSOR}
    assert (posenc.ROLE_ATTENTION, posenc.ROLE_INDEXER, posenc.ROLE_COMPRESSOR) == (0, 1, 2)
    for name in ("PE_QK_NORM_NONE", "PE_QK_NORM_RMS", "PE_QK_NORM_RMS_UNIT_OFFSET",
                 "PE_QK_NORM_L2", "PE_QK_NORM_PER_HEAD", "PE_QK_NORM_PER_TOKEN", "PE_MLA_PLAIN",
                 "PE_MLA_FP8_E4M3", "PE_MLA_FP8_DS", "PE_MLA_FP8_DS_V4", "PE_MLA_LATENT_FIRST",
                 "PE_MLA_ROPE_FIRST"):
        assert int(re.search(r"\b%s = (\d+)" % name, header).group(1)) == getattr(_lib, name)
    flag = re.search(r"#define PE_SLICE_DEROTATE_OUTPUT (\d+)u", header).group(1)
    assert int(flag) == _lib.PE_SLICE_DEROTATE_OUTPUT
    # the ctypes structs have the C sizes (each init writes its sizeof)
    for struct, init in ((_lib.RopeSlice, "pe_rope_slice_init"), (_lib.QKNorm, "pe_qk_norm_init"),
                         (_lib.MLAParams, "pe_mla_init")):
        s = struct()
        getattr(_lib.lib, init)(ctypes.byref(s))
        assert s.struct_size == ctypes.sizeof(struct), struct.__name__
    m = _lib.MLAParams()
    _lib.lib.pe_mla_init(ctypes.byref(m))
    # pe_mla_init's defaults, field by field: "kv_norm RMS, eps 1e-6, q_norm NONE,
    # plain format, latent first, every other field 0 / NULL"
    assert (m.kv_norm, m.kv_eps, m.q_norm, m.q_eps, m.format, m.order) == \
        (_lib.PE_QK_NORM_RMS, F32_1E6, _lib.PE_QK_NORM_NONE, F32_1E6, 0, 0)
    assert (m.rope_dim, m.kv_norm_dim, m.kv_rope_offset, m.q_rope_offset) == (0, 0, 0, 0)
    assert not m.kv_weight and not m.scale


def test_deepseek_v3_mla_slice():
    cfg = json.loads((CONFIGS / "deepseek-v3.json").read_text())
    nope, rope, rank = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["kv_lora_rank"]
    m = load("deepseek-v3.json")
    for i in (0, 30, 60):
        # "q head = qk_nope_head_dim + qk_rope_head_dim (128 + 64 = 192), q_offset
        # 128; k row = kv_lora_rank + qk_rope_head_dim (512 + 64 = 576), k_offset 512"
        s = m.slice(i)
        assert s == (nope + rope, nope, rank + rope, rank, rope, 0) == (192, 128, 576, 512, 64, 0)
        assert not s.derotate_output
        assert m.slice(i, posenc.ROLE_ATTENTION) == s == m.slice(i, "attention")
        assert m.layer(i, posenc.ROLE_ATTENTION) is m.layer(i)
        assert m.layer(i, "indexer") is None and m.layer(i, posenc.ROLE_COMPRESSOR) is None
        assert m.slice(i, posenc.ROLE_INDEXER) == (0,) * 6
        assert m.qk_norm(i) == ("none", "head", m.qk_norm(i).eps)
        # "The cache rotates all 64 channels, pairs (2i, 2i+1)"
        c = m.layer(i)
        assert (c.head_dim, c.rotary_dim, c.style) == (64, 64, "gptj")
    # kv_a_layernorm: transformers' RMSNorm default, not rms_norm_eps
    assert m.latent_norm_eps == 1e-6
    assert m.caches(posenc.ROLE_INDEXER) == [] and len(m.caches()) == 1


def test_deepseek_v32_indexer_has_its_own_half_split_cache():
    cfg = json.loads((CONFIGS / "per_layer" / "deepseek-v3.2.json").read_text())
    m = load("per_layer/deepseek-v3.2.json")
    n = cfg["num_hidden_layers"]
    assert len(m) == n
    idx = m.layer(0, posenc.ROLE_INDEXER)
    for i in range(n):
        assert m.slice(i) == (192, 128, 576, 512, 64, 0)
        # "q head index_head_dim (128) of index_n_heads heads, offset 0; k row
        # index_head_dim, offset 0; 64 channels, ... V3.2: half-split, unlike its MLA"
        assert m.slice(i, "indexer") == (cfg["index_head_dim"], 0, cfg["index_head_dim"], 0,
                                         cfg["qk_rope_head_dim"], 0)
        assert m.layer(i, "indexer") is idx            # one cache for every layer's indexer
        assert m.layer(i, "compressor") is None
        assert m.slice(i, "compressor") == (0,) * 6
    assert idx is not m.layer(0)                       # "their pairings differ"
    assert (idx.style, m.layer(0).style) == ("neox", "gptj")
    assert idx.head_dim == idx.rotary_dim == 64
    np.testing.assert_array_equal(idx.inv_freq, m.layer(0).inv_freq)   # the same frequencies
    assert m.caches("indexer") == [posenc.model.SharedCache(idx, tuple(range(n)))]
    assert "indexer: yarn x40" in repr(m)
    # the indexer's k_norm is a LayerNorm (mean-subtracting): refused with the
    # library's sentence, never reported as none
    with pytest.raises(posenc.PosencError) as e:
        m.qk_norm(5, posenc.ROLE_INDEXER)
    assert e.value.status == posenc.Status.ERR_UNSUPPORTED
    assert "LayerNorm" in e.value.message and "pe_model_rope_layer_qk_norm" in e.value.message
    assert m.qk_norm(5).kind == "none"
    assert m.latent_norm_eps == 1e-6


@pytest.mark.parametrize("name", V4_FILES)
def test_deepseek_v4_roles(name):
    ratios = json.loads((CONFIGS / "per_layer" / "deepseek-v4-flash.json").read_text())[
        "compress_ratios"]
    m = load("per_layer/" + name)
    assert len(m) == 43
    for i in range(43):
        a = m.layer(i)
        # "q head 512, k (the shared kv row) 512, offsets 448: the LAST 64
        # channels, interleaved; flags PE_SLICE_DEROTATE_OUTPUT"
        s = m.slice(i)
        assert s == (512, 448, 512, 448, 64, _lib.PE_SLICE_DEROTATE_OUTPUT) and s.derotate_output
        assert a.style == "gptj" and a.head_dim == a.rotary_dim == 64
        # "DeepSeek-V4 attention RMS per head"
        assert m.qk_norm(i) == ("rms", "head", F32_1E6)
        comp, idx = m.layer(i, "compressor"), m.layer(i, "indexer")
        if ratios[i] == 0:          # a sliding layer: no compressor, no indexer
            assert comp is None and idx is None
            assert m.slice(i, "compressor") == (0,) * 6 == m.slice(i, "indexer")
            continue
        # "Compressor: no query; k = a compressed entry (512), offset 448";
        # "DeepSeek-V4's compressor and indexer" share the layer's cache
        assert comp is a
        assert m.slice(i, "compressor") == (0, 0, 512, 448, 64, 0)
        assert m.qk_norm(i, "compressor") == ("rms", "head", F32_1E6)
        if ratios[i] == 4:          # CSA: an indexer too, "q head 128, offset 64"
            assert idx is a
            assert m.slice(i, "indexer") == (128, 64, 128, 64, 64, 0)
        else:                       # HCA (128): none
            assert idx is None
    assert m.latent_norm_eps == 0.0      # no latent: the kv row is normed whole


def test_role_arguments_and_lifetime():
    m = load("per_layer/deepseek-v3.2.json")
    for bad in (3, -1, "queries"):
        with pytest.raises(ValueError, match="ROLE_ATTENTION"):
            m.layer(0, bad)
        with pytest.raises(ValueError, match="ROLE_ATTENTION"):
            m.slice(0, bad)
    with pytest.raises(TypeError, match="role must be an integer"):
        m.qk_norm(0, 1.0)
    with pytest.raises(IndexError, match="layer 61 is outside"):
        m.slice(61, "indexer")
    idx = m.layer(3, "indexer")
    m.close()
    assert idx.closed                     # a role's cache is closed with its model
    with pytest.raises(ValueError, match="closed"):
        m.slice(0)
    with pytest.raises(ValueError, match="closed"):
        m.latent_norm_eps


def test_an_older_library_without_roles_says_so(monkeypatch):
    real = _lib.has_symbol
    monkeypatch.setattr(_lib, "has_symbol", lambda n: n != "pe_model_rope_layer_role" and real(n))
    m = load("deepseek-v3.json")
    assert m.layer(0) is not None
    with pytest.raises(posenc.PosencError) as e:
        m.layer(0, "indexer")
    assert e.value.status == posenc.Status.ERR_UNSUPPORTED
    assert "pe_model_rope_layer_role" in e.value.message


def test_qk_norm_of_gqa_models_names_the_kwargs_of_qk_norm_rope(rng):
    # Qwen3: RMS per head (rms_norm_eps); usable as qk_norm_rope_'s keywords
    m = posenc.ModelRope.from_hf_config(CONFIGS / "built" / "qwen3.json", max_positions=64)
    n = m.qk_norm(0)
    assert n.kind == "rms" and n.scope == "head"
    cfg = json.loads((CONFIGS / "built" / "qwen3.json").read_text())
    assert n.eps == float(np.float32(cfg["rms_norm_eps"]))
    cache = m.layer(0)
    q = rng.standard_normal((1, 2, 3, cache.head_dim), dtype=np.float32)
    posenc.qk_norm_rope_(cache, q, **n._asdict(), q_weight=np.ones(cache.head_dim, np.float32))
    np.testing.assert_allclose(np.sqrt((q.astype(np.float64) ** 2).mean(-1)), 1.0, rtol=1e-5)
    # the whole head: offsets 0
    s = m.slice(0)
    assert s == (cache.head_dim, 0, cache.head_dim, 0, cache.rotary_dim, 0)


def test_qk_norm_eps_of_a_config_without_the_key_is_the_config_class_default():
    # google/gemma-3-27b-it as published: its text_config has no rms_norm_eps,
    # so transformers' Gemma3TextConfig default (1e-6) holds on every layer
    cfg = json.loads((CONFIGS / "per_layer" / "gemma-3-27b-it.json").read_text())
    assert "rms_norm_eps" not in cfg["text_config"] and "rms_norm_eps" not in cfg
    m = load("per_layer/gemma-3-27b-it.json", max_positions=64)
    assert len(m) == 62
    assert {m.qk_norm(i) for i in range(len(m))} == {("rms_unit_offset", "head", F32_1E6)}
    # OLMo 2: Olmo2Config's rms_norm_eps default is 1e-5; the config's own wins
    olmo2 = dict(model_type="olmo2", head_dim=128, rope_theta=5e5, num_hidden_layers=1)
    n = posenc.ModelRope.from_hf_config(olmo2, max_positions=64).qk_norm(0)
    assert n == ("rms", "token", float(np.float32(1e-5)))
    n = posenc.ModelRope.from_hf_config(dict(olmo2, rms_norm_eps=3e-6), max_positions=64).qk_norm(0)
    assert n == ("rms", "token", float(np.float32(3e-6)))
    # a value that cannot be an eps: the key and the value named
    bad = posenc.ModelRope.from_hf_config(dict(olmo2, rms_norm_eps=-1e-6), max_positions=64)
    with pytest.raises(posenc.PosencError) as e:
        bad.qk_norm(0)
    assert e.value.status == posenc.Status.ERR_PARSE
    assert "rms_norm_eps -1e-06, not a finite float32 >= 0" in e.value.message


def test_slice_views_are_views_of_the_model_tensors(rng):
    m = load("deepseek-v3.json", max_positions=64)
    s, c = m.slice(0), m.layer(0)
    q = rng.standard_normal((2, 4, 3, 192), dtype=np.float32)
    kv = rng.standard_normal((2, 3, 576), dtype=np.float32)
    qv, kvv = s.q_view(q, c), s.k_view(kv, c)
    # data + offset elements, the last dimension the cache's head_dim, q's strides
    assert qv.shape == (2, 4, 3, 64) and kvv.shape == (2, 3, 64)
    assert qv.ctypes.data == q.ctypes.data + 128 * 4 and qv.strides == q.strides
    assert kvv.ctypes.data == kv.ctypes.data + 512 * 4 and kvv.strides == kv.strides
    want = q.copy()
    c.apply_(qv, positions=np.array([1, 2, 3]))       # rotates q's rope slice in place
    assert not np.array_equal(q[..., 128:], want[..., 128:])
    np.testing.assert_array_equal(q[..., :128], want[..., :128])
    assert np.array_equal(posenc.slice_view(kv, 512, 64), kvv)
    with pytest.raises(ValueError, match="last dimension is 576, the model's q head has 192"):
        s.q_view(kv, c)
    with pytest.raises(ValueError, match=r"channels \[540, 540 \+ 64\) are outside"):
        posenc.slice_view(kv, 540, 64)
    with pytest.raises(ValueError, match="no query"):
        load("per_layer/deepseek-v4-flash.json").slice(2, "compressor").q_view(q, c)
    with pytest.raises(ValueError, match="no such rotation"):
        m.slice(0, "indexer").k_view(kv, c)
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        posenc.slice_view([1, 2], 0, 1)
    row = kv[1, 2]                                     # one row: 1-D
    assert posenc.slice_view(row, 512, 64).ctypes.data == row.ctypes.data + 512 * 4
    assert posenc.slice_view(row, 575, 1).tolist() == [row[575]]    # one channel
    with pytest.raises(TypeError, match="numpy array or a torch tensor, got float32"):
        posenc.slice_view(row[0], 0, 1)                # a scalar has no last dimension
