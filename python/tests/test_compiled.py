"""The compiled module posenc._posenc itself: the kinds of array it reads
(DLPack producers besides numpy and torch), its timing entry point, the GIL
released around the kernel, and a library that lacks a function."""
import sys
import threading
import time

import numpy as np
import pytest

import posenc
from posenc import _arrays, _ext, _lib
from posenc.mla import cache_view as mla_cache_view
from conftest import rope_reference, default_inv_freq, f32_to_bf16_bits


class DLPackOnly:
    """An array that speaks DLPack and nothing else (as JAX, CuPy, ... do)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_a_dlpack_producer_is_rotated_in_place(rng):
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    base = rng.standard_normal((2, 6, 3, 16), dtype=np.float32)
    q = base.transpose(0, 2, 1, 3)                   # strided: [B, H, T, D] of a [B, T, H, D]
    want = rope_reference(q, default_inv_freq(1e4, 16), np.arange(6)[None].repeat(2, 0))
    cache.apply_(DLPackOnly(q))
    np.testing.assert_allclose(q, want, atol=2e-5)


def test_a_dlpack_producer_of_float16_is_rotated_and_of_int32_refused(rng):
    # the capsule's dtype code and bits read together: float16 is 2-byte
    # floats, int32 is not a float32 tensor of the same size
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    q = rng.standard_normal((1, 2, 3, 16)).astype(np.float16)
    want = q.copy()
    cache.apply_(want)
    cache.apply_(DLPackOnly(q))
    assert q.tobytes() == want.tobytes()
    ints = np.arange(96, dtype=np.int32).reshape(1, 2, 3, 16)
    with pytest.raises(TypeError, match="^q has dtype int32: expected float32, float16 or "
                                        "bfloat16"):    # what a numpy array of int32 is told
        cache.apply_(DLPackOnly(ints))
    assert (ints == np.arange(96).reshape(1, 2, 3, 16)).all()


def test_a_dlpack_producer_follows_the_dtype_argument(rng):
    # uint16 with dtype='bf16' is bfloat16 bits, as a numpy array's are; a
    # float16 producer where float32 is asked for is refused
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    bits = f32_to_bf16_bits(rng.standard_normal((1, 2, 3, 16)))
    want = bits.copy()
    cache.apply_(want, dtype="bf16")
    cache.apply_(DLPackOnly(bits), dtype="bf16")
    assert bits.tobytes() == want.tobytes() and not (bits == 0).all()
    for ints in (bits, bits.view(np.int16)):      # without dtype='bf16': integers, refused
        with pytest.raises(TypeError):
            cache.apply_(DLPackOnly(ints))
    assert bits.tobytes() == want.tobytes()
    half = rng.standard_normal((1, 2, 3, 16)).astype(np.float16)
    before = half.copy()
    with pytest.raises(TypeError):
        cache.apply_(DLPackOnly(half), dtype="f32")
    assert half.tobytes() == before.tobytes()


def test_bind_takes_two_dicts():
    for args in (({}, None), (None, {}), ({},)):
        with pytest.raises(TypeError, match=r"_bind\(functions: dict, objects: dict\)"):
            _ext.ext._bind(*args)


def test_an_entry_point_names_itself_when_its_arguments_are_miscounted():
    with pytest.raises(TypeError, match=r"^apply_rope_qk takes 8 arguments \(1 given\)$"):
        _ext.ext.apply_rope_qk(None)


def test_a_dlpack_producer_that_cannot_export_is_refused(rng):
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    q = rng.standard_normal((1, 1, 2, 16), dtype=np.float32)
    q.flags.writeable = False                        # numpy will not export it
    with pytest.raises(TypeError, match="^q: a DLPackOnly \\(DLPack\\) that neither the binding nor "
                                        "numpy can read \\(BufferError: .*\\); pass a "
                                        "numpy.ndarray or a torch.Tensor$"):
        cache.apply_(DLPackOnly(q))
    with pytest.raises(TypeError, match="^q must be a numpy.ndarray, a torch.Tensor or a DLPack "
                                        "tensor, got list$"):
        cache.apply_([[[[0.0] * 16]]])


def test_a_dlpack_producer_the_module_declines_is_read_as_numpy_reads_it(rng):
    # What the compiled module does not take as it is goes to the Python
    # helpers, which see the producer through numpy.from_dlpack: the message
    # names what does not fit, as it would for a numpy array, and what numpy
    # can read (integer positions, a cache's shape) is read.
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    raw = bytearray(4 * 48 + 1)
    odd = np.frombuffer(raw, np.float32, count=48, offset=1).reshape(1, 1, 3, 16)
    with pytest.raises(ValueError, match="^q is not aligned to its itemsize$"):
        cache.apply_(DLPackOnly(odd))
    assert raw == bytearray(4 * 48 + 1)
    q = rng.standard_normal((2, 3, 4, 16), dtype=np.float32)
    want, got = q.copy(), q.copy()
    pos = np.array([[3, 9, 1, 0], [5, 2, 8, 7]])
    cache.apply_(want, positions=pos)
    cache.apply_(got, positions=DLPackOnly(pos))          # positions: the helper's to read
    assert got.tobytes() == want.tobytes()
    with pytest.raises(TypeError, match="^positions must be integers, got dtype float64$"):
        cache.apply_(got, positions=DLPackOnly(pos.astype(np.float64)))
    assert got.tobytes() == want.tobytes()
    k = q[:, :1].copy()
    ints = np.zeros((2, 1, 4, 16), np.int32)
    with pytest.raises(TypeError, match="^k_cache has dtype int32"):
        posenc.apply_rope_qk_store_(cache, k, DLPackOnly(ints), np.arange(8).reshape(2, 4))
    assert not ints.any()
    # numpy's view of a producer is read-only before numpy 2.1; written in
    # place, the helper says so only when nothing else is wrong
    ro = np.from_dlpack(DLPackOnly(q))
    if not ro.flags.writeable:
        with pytest.raises(ValueError, match="^q is read-only as numpy .* reads it through "
                                             "DLPack, and the binding could not take it"):
            _arrays.tensor(ro, "q")
        with pytest.raises(ValueError, match="^q is not aligned"):
            _arrays.tensor(np.from_dlpack(DLPackOnly(odd)), "q")
    # an MLA cache: the shape of a new out, and the byte cache's refusals
    slots = np.array([[0, 5, -1, 2], [7, 1, 4, 3]])
    for fmt, dt in (("plain", np.float32), ("fp8_e4m3", np.uint8)):
        mla = posenc.MLA(16, 0, 48, 48, kv_norm="none", format=fmt,
                         scale=0.5 if dt is np.uint8 else None)
        mc = np.zeros((2, 4, 64), dt)
        posenc.mla_rope_store_(cache, mla, rng.standard_normal((2, 3, 4, 64), dtype=np.float32),
                               rng.standard_normal((2, 4, 64), dtype=np.float32), mc, slots, pos)
        want = np.zeros((2, 4, 64), np.float32)
        posenc.mla_cache_read(mla, mc, slots, want)
        assert np.abs(want).sum() > 0
        for c in (mc, DLPackOnly(mc)):
            got = posenc.mla_cache_read(mla, c, slots)
            assert isinstance(got, np.ndarray) and got.dtype == np.float32
            assert got.shape == (2, 4, 64) and got.tobytes() == want.tobytes()
    with pytest.raises(ValueError, match=r"^mla_cache has shape \(8, 64\): a fp8_e4m3 cache is "):
        posenc.mla_cache_read(mla, DLPackOnly(mc.reshape(8, 64)), slots)
    flat = mc.reshape(8, 64)         # written in place: the shape named before numpy's read-only
    with pytest.raises(ValueError, match=r"^mla_cache has shape \(8, 64\): a fp8_e4m3 cache is "):
        posenc.mla_rope_store_(cache, mla, rng.standard_normal((2, 3, 4, 64), dtype=np.float32),
                               rng.standard_normal((2, 4, 64), dtype=np.float32),
                               DLPackOnly(flat), slots, pos)
    if not np.from_dlpack(DLPackOnly(mc)).flags.writeable:
        with pytest.raises(ValueError, match="^mla_cache is read-only as numpy .* through DLPack"):
            mla_cache_view(np.from_dlpack(DLPackOnly(mc)), "mla_cache", mla, None, True)


def test_timed_runs_the_call_reps_times(rng):
    # Rotating 3 times by the angle at p is rotating once by the angle at 3p.
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    x = rng.standard_normal((1, 2, 4, 16), dtype=np.float32)
    pos = np.array([[1, 2, 5, 7]])
    want = rope_reference(x, default_inv_freq(1e4, 16), 3 * pos)
    for clock in ("cpu", "wall"):
        y = x.copy()
        ns = _ext.ext.timed(clock, "apply_rope_qk", 3, cache, y, None, pos, 0, None, None, 0)
        assert isinstance(ns, int) and ns > 0
        np.testing.assert_allclose(y, want, atol=2e-5)
    with pytest.raises(ValueError, match="no entry point"):
        _ext.ext.timed("apply_nothing", 1)
    for bad in ((), ("wall",), ("apply_rope_qk",), (1, 2), ("cpu", 3, 2)):   # no name, no reps
        with pytest.raises(TypeError, match=r"^timed\(\[clock,\] name, reps, \*args\)$"):
            _ext.ext.timed(*bad)
    with pytest.raises(posenc.PosencError, match="max_positions"):   # errors as a call's
        _ext.ext.timed("apply_rope_qk", 2, cache, x, None, pos * 100, 0, None, None, 0)


def test_the_gil_is_released_during_the_kernel():
    # A pool runs one call at a time: another thread that finds the pool
    # busy (BusyError) ran while this thread was inside the library - which
    # it cannot do unless the call let go of the GIL. (A busy machine may
    # need several tries to show it; a call holding the GIL never can.)
    cache = posenc.RopeCache(head_dim=128, max_positions=0)    # cos/sin per token: slow
    x = np.ones((1, 32, 2048, 128), dtype=np.float32)
    pos = np.arange(10**6, 10**6 + 2048)
    small = np.ones((1, 1, 1, 128), dtype=np.float32)
    busy, done = [], threading.Event()

    with posenc.ThreadPool(2) as pool:
        def other():
            while not done.is_set() and not busy:
                try:
                    cache.apply_(small, pool=pool)
                except posenc.BusyError:
                    busy.append(True)

        t = threading.Thread(target=other)
        t.start()
        try:
            # Calls for up to 30 s, not a count: on a machine whose cores are
            # taken by other work (a parallel build) the other thread may get
            # a CPU only seconds apart, and 200 calls once ended first.
            deadline, calls = time.monotonic() + 30.0, 0
            while not busy and time.monotonic() < deadline:
                try:
                    cache.apply_(x, positions=pos, pool=pool)
                except posenc.BusyError:     # the other thread's call holds the pool
                    pass
                calls += 1
            if not busy:
                pytest.fail(f"no other thread ran during {calls} calls (30 s): the GIL was held")
        finally:
            done.set()
            t.join()


def test_a_function_the_library_lacks_is_named(monkeypatch, rng):
    # An older library without pe_learned_add: the call says so, as the
    # ctypes binding always has (PosencError UNSUPPORTED), nothing written.
    monkeypatch.setattr(_lib, "has_symbol", lambda name: name != "pe_learned_add")
    _ext.bind()
    try:
        x = np.zeros((1, 2, 4), np.float32)
        with pytest.raises(posenc.PosencError) as e:
            posenc.learned_add_(x, np.ones((4, 4), np.float32))
        assert e.value.status == posenc.Status.ERR_UNSUPPORTED
        assert "pe_learned_add" in e.value.message
        assert not x.any()
    finally:
        monkeypatch.undo()
        _ext.bind()
    posenc.learned_add_(x, np.ones((4, 4), np.float32))
    assert (x == 1).all()


def _torch_importable():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def test_bench_prints_every_row(capsys):
    from posenc import bench
    have_torch = _torch_importable()
    assert bench.main(["--reps", "3", "--rounds", "1", "--case", "decode"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if line.startswith("decode")]
    # f32 and bf16; numpy's 5 calls (rope, store, qk_norm_store, mla, mla_fp8_ds), torch's 7
    assert len(rows) == 2 * (5 + (7 if have_torch else 0))
    for row in rows:
        c, p, over, pct = (float(x) for x in row[4:8])
        assert 0 < c < 1e5 and 0 < p < 1e5 and over == pytest.approx(p - c, abs=0.011)  # us
        # the printed us have 2 decimals: the % they give is known that closely
        assert pct == pytest.approx(100 * (p - c) / c, abs=0.5 * (1 + p / c) / c + 0.051)


def test_bench_runs_the_rounds_its_help_names(capsys, monkeypatch):
    from posenc import bench
    seen = []
    monkeypatch.setattr(bench, "measure", lambda *a: seen.append(a[3:5]) or (1.0, 2.0))
    assert bench.main(["--case", "decode,prefill", "--arrays", "numpy", "--op", "rope",
                       "--dtype", "f32"]) == 0
    out = capsys.readouterr().out
    # as --help says: 15 rounds, calls per round 2000 for decode and 50 for prefill
    assert seen == [(2000, 15), (50, 15)] and "fastest of 15 alternated rounds" in out
    seen.clear()
    assert bench.main(["--case", "decode,prefill", "--arrays", "numpy", "--op", "rope",
                       "--dtype", "f32", "--reps", "7", "--rounds", "2"]) == 0
    assert seen == [(7, 2), (7, 2)]


def test_bench_without_torch_runs_the_numpy_rows(capsys, monkeypatch):
    from posenc import bench
    monkeypatch.setitem(sys.modules, "torch", None)     # import torch raises ImportError
    seen = []
    monkeypatch.setattr(bench, "measure", lambda *a: seen.append(a[0]) or (1.0, 2.0))
    assert bench.main(["--case", "decode", "--arrays", "numpy,torch", "--op",
                       "rope,torch.apply_rotary_pos_emb", "--dtype", "f32"]) == 0
    out = capsys.readouterr().out
    assert "torch is not installed: numpy arrays only" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("decode")]
    assert [r[2] for r in rows] == ["numpy"] and len(seen) == 1


def test_bench_arrays_are_of_the_dtype_their_row_names():
    from posenc import bench
    a = bench.Arrays("numpy", "bf16", 1, 2)
    assert a.dtype == "bf16"
    for x in (a.q, a.k, a.k_cache, a.mla_q, a.mla_kv, a.mla_cache):
        assert x.dtype == np.uint16
    f = bench.Arrays("numpy", "f32", 1, 2)
    assert f.dtype is None and all(x.dtype == np.float32 for x in (f.q, f.k_cache, f.mla_kv))
    # the same data: bfloat16 bits are the float32 values' upper halves
    for x, y in ((a.q, f.q), (a.mla_kv, f.mla_kv)):
        assert np.array_equal(x, (np.ascontiguousarray(y).view(np.uint32) >> 16).astype(np.uint16))
    if _torch_importable():
        import torch
        for name, t in (("bf16", torch.bfloat16), ("f32", torch.float32)):
            a = bench.Arrays("torch", name, 1, 2)
            for x in (a.q, a.k, a.k_cache, a.q_bthd, a.mla_q, a.mla_kv, a.mla_cache):
                assert x.dtype == t, (name, x.dtype)


def test_dtype_names_read_in_c_mean_what_the_binding_says():
    # posenc._posenc reads the lower-case dtype names itself; each must
    # accept exactly the arrays posenc._arrays maps it to.
    from posenc._arrays import _DTYPE_NAMES
    cache = posenc.RopeCache(head_dim=16, max_positions=8)
    ones = {_lib.PE_F32: np.ones(16, np.float32), _lib.PE_F16: np.ones(16, np.float16),
            _lib.PE_BF16: np.full(16, 0x3F80, np.uint16)}      # bfloat16 bits of 1.0
    for name, pe in _DTYPE_NAMES.items():
        for kind, row in ones.items():
            x = np.tile(row, (1, 1, 2, 1))
            if kind == pe:
                cache.apply_(x, dtype=name)
                assert not np.array_equal(x[0, 0, 1], row), name   # position 1 rotated
            else:
                with pytest.raises(TypeError):
                    cache.apply_(x, dtype=name)
                assert np.array_equal(x[0, 0, 1], row)


#: Every Python helper the compiled module can hand an argument to (the
#: binding's slow path): the attribute of the module bind() reads it from.
_HELPERS = (("_arrays", "tensor_view"), ("_arrays", "int64_grid"),
            ("_arrays", "mrope_positions"), ("_arrays", "int32_vector"),
            ("_arrays", "float_vector"), ("_arrays", "float_table"),
            ("_arrays", "norm_weight"), ("_arrays", "layout_of"), ("mla", "cache_view"))


@pytest.fixture
def helper_calls(monkeypatch):
    """The compiled module re-bound to counting wrappers of every helper:
    a dict name -> calls, restored (and re-bound) afterwards."""
    import importlib
    calls = {name: 0 for _, name in _HELPERS}
    for mod, name in _HELPERS:
        m = importlib.import_module("posenc." + mod)
        real = getattr(m, name)

        def counted(*a, _real=real, _name=name, **kw):
            calls[_name] += 1
            return _real(*a, **kw)
        monkeypatch.setattr(m, name, counted)
    _ext.bind()
    yield calls
    monkeypatch.undo()
    _ext.bind()


def test_the_common_arguments_never_leave_c(helper_calls, rng):
    # What the module's comment promises: arrays of the dtypes and shapes an
    # engine passes are read in C. Any of these reaching its Python helper
    # is a slow path taken where the fast one should be (the results are
    # the same, so no other test sees it).
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    B, H, T = 2, 3, 5
    pos = rng.integers(0, 64, (B, T))
    for dt, kw in ((np.float32, {}), (np.float16, {}), (np.uint16, {"dtype": "bf16"})):
        q = rng.standard_normal((B, H, T, 16)).astype(np.float32).astype(dt)
        k = q[:, :1].copy()
        for p in (pos, pos[0], pos[:1], None):               # [B, T], [T], [1, T], none
            cache.apply_(q, k, positions=p, **kw)
    cache.shift_k_(k, 3, dtype="bf16")                       # k: the bf16 bits of the last pass
    posenc.apply_rope_qk_multi_([cache, cache], np.array([1, 0], np.int32), q, k, pos,
                                dtype="bf16")
    q = rng.standard_normal((B, H, T, 16)).astype(np.float32)
    posenc.qk_norm_rope_(cache, q, q[:, :1].copy(), q_weight=np.ones(16, np.float32),
                         k_weight=np.ones(16, np.float32), positions=pos)
    kc = np.zeros((4, 1, 4, 16), np.float32)
    posenc.apply_rope_qk_store_(cache, q[:, :1].copy(), kc, np.arange(B * T).reshape(B, T),
                                q=q, positions=pos)
    posenc.apply_mrope_(cache, q, positions=np.stack([pos, pos, pos]), mrope_section=(2, 3, 3))
    scores = np.zeros((B, H, T, 8), np.float32)
    posenc.alibi_add_bias_(scores, np.array([0.5, 0.25, 0.125], np.float32), q_positions=pos)
    table = rng.standard_normal((32, H)).astype(np.float32)
    posenc.t5_add_bias_(scores, table)
    posenc.t5_add_bias_(scores, table, num_buckets=32, max_distance=16)
    x = np.zeros((B, T, 16), np.float32)
    posenc.sinusoidal_add_(x, positions=pos)
    posenc.learned_add_(x, rng.standard_normal((64, 16)).astype(np.float32), positions=pos)
    for fmt, dt in (("plain", np.float32), ("fp8_e4m3", np.uint8)):   # MLA: rows and bytes
        mla = posenc.MLA(16, 0, 48, 48, kv_norm="none", format=fmt,
                         scale=1.0 if dt is np.uint8 else None)
        mc = np.zeros((2, 8, 64), dt)
        posenc.mla_rope_store_(cache, mla, np.zeros((B, H, T, 64), np.float32),
                               np.zeros((B, T, 64), np.float32), mc, np.arange(B * T).reshape(B, T),
                               pos)
        posenc.mla_cache_read(mla, mc, np.arange(B * T).reshape(B, T), np.zeros((B, T, 64),
                                                                                np.float32))
    assert all(n == 0 for n in helper_calls.values()), helper_calls
    # the counting is live: a list of positions is the helper's to read
    cache.apply_(q, positions=pos.tolist())
    assert helper_calls["int64_grid"] == 1


def test_the_common_torch_arguments_never_leave_c(helper_calls):
    torch = pytest.importorskip("torch")
    import posenc.torch as pt
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    g = torch.Generator().manual_seed(3)
    B, T, H = 2, 5, 4
    pos = torch.randint(0, 64, (B, T), generator=g)
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        q = torch.randn(B, T, H, 16, generator=g).to(dt)    # MHA: the positions tell the layout
        pt.apply_rotary_pos_emb(q, q.clone(), pos, cache)
        pt.apply_rotary_pos_emb(q.transpose(1, 2), None, pos, cache, unsqueeze_dim=1)
        pt.apply_rotary_pos_emb(q, q[:, :, :2].clone(), None, cache)   # GQA tells the layout
        pt.apply_rotary_pos_emb(q, q.clone(), pos[0].clone(), cache)    # [T] positions tell it
    cache.apply_(torch.zeros(B, H, T, 16, dtype=torch.bfloat16), dtype="bf16")
    assert all(n == 0 for n in helper_calls.values()), helper_calls


def test_a_torch_tensor_of_another_dtype_than_asked_is_refused():
    torch = pytest.importorskip("torch")
    cache = posenc.RopeCache(head_dim=16, max_positions=64)
    for t, name in ((torch.ones(1, 2, 3, 16, dtype=torch.float16), "f32"),
                    (torch.ones(1, 2, 3, 16), "bf16")):
        with pytest.raises(TypeError):
            cache.apply_(t, dtype=name)
        assert (t == 1).all()
