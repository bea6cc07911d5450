#!/usr/bin/env python3
"""rope_numpy.py - the Python binding on NumPy arrays, end to end.

Llama-3.1-style RoPE on q and k kept in a [batch, tokens, heads, dim] buffer
(rotated through transposed views, no copy), a decode step at per-sequence
positions, an inverse rotation that restores the input, and ALiBi biases.

Run with the package installed (pip install ./python), or from the tree
after `make build python`:
  PYTHONPATH=python python3 examples/rope_numpy.py
"""
import numpy as np

import posenc

print("libposenc", posenc.version(), "from", posenc.library_path(), "-", posenc.isa_name())

cache = posenc.RopeCache(
    head_dim=128, rope_theta=500000.0, max_positions=8192,
    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
print(cache, "attention_factor", cache.attention_factor)

rng = np.random.default_rng(0)
batch, tokens, n_heads, n_kv = 2, 16, 32, 8
q_buf = rng.standard_normal((batch, tokens, n_heads, 128), dtype=np.float32)
k_buf = rng.standard_normal((batch, tokens, n_kv, 128), dtype=np.float32)
q0, k0 = q_buf.copy(), k_buf.copy()
q = q_buf.transpose(0, 2, 1, 3)   # [batch, heads, tokens, dim] views of the buffers
k = k_buf.transpose(0, 2, 1, 3)

# Prefill: sequence 0 starts at position 0, sequence 1 continues at 100.
positions = np.stack([np.arange(tokens), np.arange(100, 100 + tokens)])
with posenc.ThreadPool(2) as pool:
    cache.apply_(q, k, positions=positions, pool=pool)
    assert not np.allclose(q_buf, q0)
    cache.apply_(q, k, positions=positions, inverse=True, pool=pool)
err = max(np.abs(q_buf - q0).max(), np.abs(k_buf - k0).max())
print("rotate then inverse-rotate: max |error| = %.2g" % err)
assert err < 1e-5

# Errors are raised before anything is written.
before = q_buf.copy()
try:
    cache.apply_(q, positions=np.full((batch, tokens), 9000))
    raise SystemExit("position 9000 past max_positions 8192 was accepted")
except posenc.PosencError as e:
    print("PosencError as expected:", e.message)
assert np.array_equal(q_buf, before)

scores = np.zeros((1, 8, 1, 10), dtype=np.float32)   # one decode query, 10 keys
posenc.alibi_add_bias_(scores)
print("ALiBi bias of head 0 for the newest token:", np.round(scores[0, 0, 0], 3))
print("rope_numpy: OK")
