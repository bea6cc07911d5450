"""Shared helpers for the posenc binding tests.

Run from the repository root (make test-python):
  POSENC_LIBRARY=build/libposenc.so PYTHONPATH=python python3 -m pytest -q python/tests
or, against an installed package, from an unpacked sdist (whose libposenc/
holds the header and the test configs), from any other directory:
  python -m pytest -q posenc-X.Y.Z/tests
"""
import math
import os
import pathlib
import sys

if os.environ.get("POSENC_TEST_NO_TORCH"):
    # The second pass of `make test-python`: torch is not importable (import
    # torch raises ImportError), as on a machine without it; posenc must work.
    sys.modules["torch"] = None

import numpy as np
import pytest

import posenc  # noqa: F401  (the package under test, loaded once)

HERE = pathlib.Path(__file__).resolve().parent
#: The repository (tests in its python/tests), or the C sources an sdist
#: carries (its libposenc/): include/posenc.h and tests/data/configs.
REPO = next((p for p in (HERE.parents[1], HERE.parent / "libposenc")
             if (p / "include" / "posenc.h").is_file()), HERE.parents[1])
#: The directory of the posenc package under test (the tree's, or the installed one).
PACKAGE = pathlib.Path(posenc.__file__).resolve().parent


@pytest.fixture
def rng():
    return np.random.default_rng(20261130)


# ---- bfloat16 as uint16 bits -------------------------------------------------

def f32_to_bf16_bits(x):
    """Round float32 to bfloat16 (nearest-even), as uint16 bit patterns."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    out = rounded.astype(np.uint16)
    out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)  # quiet NaN
    return out


def bf16_bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


# ---- the binding's Python helpers ------------------------------------------------

class Sub(np.ndarray):
    """A numpy subclass: posenc._posenc takes only exact ndarrays itself and
    hands this to the Python helpers (posenc._arrays, posenc.mla), so
    `a.view(Sub)` is how a test compares the helpers' reading of an argument
    with the compiled module's."""


# ---- float64 references ------------------------------------------------------

def default_inv_freq(base, d):
    return base ** (-(2.0 * np.arange(d // 2)) / d)


def yarn_inv_freq(base, dim, factor, m0, beta_fast=32.0, beta_slow=1.0, truncate=True):
    """YaRN's frequencies in float64, transcribed from transformers'
    _compute_yarn_parameters (the NTK-by-parts ramp between the correction
    dimensions of beta_fast and beta_slow)."""
    def corr_dim(rot):
        return dim * math.log(m0 / (rot * 2 * math.pi)) / (2 * math.log(base))
    low, high = corr_dim(beta_fast), corr_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrap = 1 - ramp
    pos = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    return (1 / (factor * pos)) * (1 - extrap) + (1 / pos) * extrap


def rope_reference(x, inv_freq, positions, style="neox", rotary_dim=None, attn=1.0,
                   inverse=False):
    """RoPE in float64: x [B,H,T,D] (any float dtype), positions [B,T]."""
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    rd = rotary_dim or d
    half = rd // 2
    inv = np.asarray(inv_freq, dtype=np.float64)[:half]
    ang = np.asarray(positions, dtype=np.float64)[:, None, :, None] * inv
    c, s = np.cos(ang) * attn, np.sin(ang) * attn
    if inverse:
        s = -s
    out = x.copy()
    if style == "neox":
        a, b = x[..., :half], x[..., half:rd]
        out[..., :half] = a * c - b * s
        out[..., half:rd] = b * c + a * s
    else:
        a, b = x[..., 0:rd:2], x[..., 1:rd:2]
        out[..., 0:rd:2] = a * c - b * s
        out[..., 1:rd:2] = b * c + a * s
    return out


def grid(positions, batch, tokens):
    if positions is None:
        return np.broadcast_to(np.arange(tokens), (batch, tokens))
    return np.broadcast_to(np.asarray(positions), (batch, tokens))
