"""Version, library lookup, struct layout, dispatch, errors of the binding itself."""
import ctypes
import re

import numpy as np
import pytest

import posenc
from posenc import _lib
from conftest import REPO


def test_version_matches_header():
    header = (REPO / "include" / "posenc.h").read_text()
    parts = [re.search(r"#define PE_VERSION_%s (\d+)" % p, header).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    assert posenc.version() == ".".join(parts)


def test_library_path_is_a_loaded_file():
    path = posenc.library_path()
    assert "libposenc.so" in path


def test_rope_params_struct_matches_c_sizeof():
    # pe_rope_params_init writes sizeof(pe_rope_params) as the C compiler
    # laid it out; the ctypes Structure must have the same size...
    p = _lib.RopeParams()
    _lib.lib.pe_rope_params_init(ctypes.byref(p))
    assert p.struct_size == ctypes.sizeof(_lib.RopeParams)
    # ...and the header's defaults land in the fields of the same names.
    assert (p.head_dim, p.rotary_dim, p.style, p.base, p.max_positions) == (128, 0, 0, 10000.0, 4096)
    assert (p.scaling, p.factor, p.truncate) == (0, 1.0, 1)
    assert (p.low_freq_factor, p.high_freq_factor) == (1.0, 4.0)
    assert not p.short_factor and not p.long_factor and not p.inv_freq


def test_rope_params_round_trip_every_field():
    # Distinct values in every numeric field, through the C API directly: a
    # field at the wrong offset would come back in another field's place.
    p = _lib.RopeParams()
    _lib.lib.pe_rope_params_init(ctypes.byref(p))
    for name, value in (("head_dim", 96), ("rotary_dim", 64), ("style", 1), ("base", 12345.0),
                        ("max_positions", 77), ("scaling", 4), ("factor", 4.0),
                        ("original_max_positions", 2048), ("seq_len", 5000),
                        ("attention_factor", 1.25), ("beta_fast", 24.0), ("beta_slow", 2.0),
                        ("mscale", 0.5), ("mscale_all_dim", 0.75), ("truncate", 0),
                        ("low_freq_factor", 1.5), ("high_freq_factor", 3.5)):
        setattr(p, name, value)
    h = ctypes.c_void_p()
    _lib.check(_lib.lib.pe_rope_cache_create(ctypes.byref(p), ctypes.byref(h)))
    try:
        out = _lib.RopeParams()
        _lib.lib.pe_rope_params_init(ctypes.byref(out))
        _lib.check(_lib.lib.pe_rope_cache_params(h, ctypes.byref(out)))
        for name, _ in _lib.RopeParams._fields_:
            if name not in ("struct_size", "short_factor", "long_factor", "inv_freq"):
                assert getattr(out, name) == getattr(p, name), name
        assert _lib.lib.pe_rope_cache_attention_factor(h) == 1.25
    finally:
        _lib.lib.pe_rope_cache_destroy(h)


def test_params_show_resolved_attention_factor():
    # YaRN without attention_factor derives 0.1*ln(s)+1; params
    # shows that value, not the 0 ("derive it") of the parameter struct.
    cache = posenc.RopeCache(head_dim=64, max_positions=8,
                             rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                           "original_max_position_embeddings": 4096})
    assert cache.params["attention_factor"] == pytest.approx(0.1 * np.log(4.0) + 1, rel=1e-15)
    assert cache.params["attention_factor"] == cache.attention_factor


def test_status_values_match_header():
    header = (REPO / "include" / "posenc.h").read_text()
    enum = header[header.index("PE_OK = 0"):]
    enum = enum[:enum.index("}")]
    in_header = {n: int(v) for n, v in re.findall(r"PE_(\w+) = (\d+)", enum)}
    assert in_header == {st.name: int(st) for st in posenc.Status}
    assert issubclass(posenc.BusyError, posenc.PosencError)


def test_isa_name_and_force_isa():
    assert posenc.isa_name() in ("scalar", "avx2", "avx512", "avx512bf16", "neon")
    before = posenc.isa_name()  # PE_ISA may have chosen it: restore it, not "auto"
    try:
        posenc.force_isa("scalar")
        assert posenc.isa_name() == "scalar"
        posenc.force_isa("auto")
        assert posenc.isa_name() in ("scalar", "avx2", "avx512", "avx512bf16", "neon")
    finally:
        posenc.force_isa(before)
    assert posenc.isa_name() == before
    with pytest.raises(posenc.PosencError) as e:
        posenc.force_isa("sse9")
    assert e.value.status == posenc.Status.ERR_INVALID_ARGUMENT
    assert "sse9" in e.value.message


def test_posenc_error_carries_last_error():
    with pytest.raises(posenc.PosencError) as e:
        posenc.RopeCache(head_dim=16, rotary_dim=8, max_positions=-1)
    assert e.value.status == posenc.Status.ERR_INVALID_ARGUMENT
    assert e.value.message == _lib.last_error()
    assert "max_positions" in e.value.message
    assert isinstance(e.value, RuntimeError)


def test_odd_head_dim_names_head_dim():
    # not "rotary_dim 0", a field the user never set
    with pytest.raises(ValueError, match="head_dim 127 must be even"):
        posenc.RopeCache(head_dim=127)
    with pytest.raises(ValueError, match="rotary_dim 7 must be even"):
        posenc.RopeCache(head_dim=16, rotary_dim=7)


def test_missing_symbol_is_reported_not_crashing():
    # What a function newer than the loaded library does when called.
    assert not _lib.has_symbol("pe_no_such_function")
    with pytest.raises(posenc.PosencError) as e:
        _lib.fn("pe_no_such_function")
    assert e.value.status == posenc.Status.ERR_UNSUPPORTED
    assert "pe_no_such_function" in e.value.message


def test_int_arguments_are_range_checked():
    with pytest.raises(ValueError):
        posenc.RopeCache(head_dim=2**40)
    with pytest.raises(TypeError):
        posenc.RopeCache(head_dim=64.0)


def test_cache_context_manager_and_close():
    with posenc.RopeCache(head_dim=8, max_positions=4) as c:
        assert len(c.inv_freq) == 4
    with pytest.raises(ValueError):
        c.inv_freq
    c.close()  # idempotent


def test_flag_values_match_header():
    # _lib holds the binding's only copy of the header's flag values.
    header = (REPO / "include" / "posenc.h").read_text()
    for name in ("PE_ROPE_INVERSE", "PE_ROPE_MROPE_INTERLEAVED", "PE_ROPE_STREAM_CACHE",
                 "PE_MASK_CAUSAL", "PE_SINUSOIDAL_CONCAT"):
        m = re.search(r"#define %s ([^\n/]+)" % name, header)
        assert m, name
        expr = re.sub(r"\b(0x[0-9a-fA-F]+|\d+)[uU]\b", r"\1", m.group(1).strip())
        assert re.fullmatch(r"[0-9a-fA-Fx()<>| ]+", expr), expr   # a constant expression
        assert eval(expr, {"__builtins__": {}}) == getattr(_lib, name), name


def test_one_default_for_table_rows():
    # The C library's default (the header: "rows of the cos/sin table,
    # default 4096") everywhere in the binding, never a config's
    # max_position_embeddings unless asked for.
    header = (REPO / "include" / "posenc.h").read_text()
    default = int(re.search(r"rows of the cos/sin table, default (\d+)", header).group(1))
    assert posenc.DEFAULT_MAX_POSITIONS == default
    cfg = {"model_type": "llama", "head_dim": 16, "num_attention_heads": 2,
           "num_hidden_layers": 1, "rope_theta": 1e4, "max_position_embeddings": 100}
    assert posenc.RopeCache(head_dim=16).max_positions == default
    assert posenc.RopeCache.from_hf_config(cfg).max_positions == default
    assert posenc.ModelRope.from_hf_config(cfg).layer(0).max_positions == default
    assert posenc.RopeCache.from_hf_config(
        cfg, max_positions=posenc.MAX_POSITIONS_FROM_CONFIG).max_positions == 100
    del cfg["max_position_embeddings"]
    with pytest.raises(ValueError, match="has no max_position_embeddings"):
        posenc.RopeCache.from_hf_config(cfg, max_positions=posenc.MAX_POSITIONS_FROM_CONFIG)
    # the docstrings state the rule and its memory: 4 bytes a rotated channel a row
    doc = " ".join(posenc.RopeCache.__doc__.split())
    assert "%d, the C library's default" % default in doc
    assert "%g MiB at rotary_dim 128" % (default * 128 * 4 / 2**20) in doc
