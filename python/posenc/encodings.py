"""ALiBi, T5 relative bias, sinusoidal and learned absolute embeddings."""

import numpy as np

from . import _lib
from ._arrays import (tensor, disjoint, as_4d, int64_grid, integers, ptr, float_vector,
                      float_table, int_arg, INT32, INT64)
from ._ext import ext


def _one_head(x4):
    if x4.shape[1] != 1:
        raise ValueError("x must be [batch, tokens, d] or [batch, 1, tokens, d], got shape %s"
                         % (x4.shape,))


def alibi_slopes(n_heads, max_bias=8.0):
    """ALiBi slopes for n_heads heads (Press et al.; BLOOM interleaving when
    n_heads is not a power of two), float32."""
    n = int_arg(n_heads, "n_heads", *INT32)
    # A real buffer even for n <= 0, so that the library reports the count.
    out = np.empty(max(n, 1), dtype=np.float32)
    _lib.check(_lib.fn("pe_alibi_slopes")(n, float(max_bias), ptr(out)))
    return out[:n]


def _check_scores(scores, dtype, q_positions):
    """The binding's checks of a score bias call's scores and q_positions
    (run when the library refuses the call); returns the scores' View."""
    t = tensor(scores, "scores", dtype=dtype)
    int64_grid(q_positions, t.shape[0], t.shape[2], "q_positions")
    return t


def alibi_add_bias_(scores, slopes=None, q_positions=None, causal=False, pool=None, *,
                    dtype=None):
    """scores[b,h,i,j] += -slopes[h] * |qpos(b,i) - j| in place.

    scores: [batch, heads, q_len, k_len]. slopes: heads floats (None = the
    standard slopes). q_positions: [batch, q_len] or [q_len]; None = the last
    q_len positions (k_len - q_len + i). causal: also set -inf where j > qpos.
    """
    try:
        ext.alibi_add_bias(scores, slopes, q_positions, _lib.PE_MASK_CAUSAL if causal else 0,
                           pool, dtype)
    except _lib.PosencError:
        t = _check_scores(scores, dtype, q_positions)
        if slopes is not None:
            float_vector(slopes, t.shape[1], "slopes")
        raise
    return scores


def t5_bucket(rel, bidirectional=True, num_buckets=32, max_distance=128):
    """T5's relative_position_bucket of rel = key - query (an int, or an
    integer array: an int32 array of the same shape)."""
    f = _lib.fn("pe_t5_bucket")
    nb = int_arg(num_buckets, "num_buckets", *INT32)
    md = int_arg(max_distance, "max_distance", *INT32)
    bd = 1 if bidirectional else 0

    def one(r):
        b = f(int_arg(r, "rel", *INT64), bd, nb, md)
        if b < 0:
            raise _lib.PosencError(_lib.Status.ERR_INVALID_ARGUMENT, _lib.last_error())
        return b

    if np.ndim(rel) == 0:
        return one(rel)
    a = integers(rel, "rel")
    out = np.empty(a.shape, dtype=np.int32)
    for idx, r in np.ndenumerate(a):
        out[idx] = one(int(r))
    return out


def t5_add_bias_(scores, table, bidirectional=True, num_buckets=None, max_distance=128,
                 q_positions=None, causal=False, pool=None, *, dtype=None):
    """scores[b,h,i,j] += table[bucket(j - qpos(b,i)), h] in place.

    table: [num_buckets, heads] (T5's relative_attention_bias weight),
    converted to float32. num_buckets defaults to table.shape[0].
    q_positions and causal as for alibi_add_bias_."""
    if num_buckets is not None:
        int_arg(num_buckets, "num_buckets", *INT32)
    md = int_arg(max_distance, "max_distance", *INT32)
    try:
        ext.t5_add_bias(scores, table, bool(bidirectional), num_buckets, md, q_positions,
                        _lib.PE_MASK_CAUSAL if causal else 0, pool, dtype)
    except _lib.PosencError:
        t = _check_scores(scores, dtype, q_positions)
        float_table(table, num_buckets, t.shape[1])
        raise
    return scores


def sinusoidal_table(n_positions, d_model, base=10000.0, concat=False):
    """The sinusoidal table for positions 0..n_positions-1, float32
    [n_positions, d_model]. concat=False: the paper's interleaved sin/cos;
    True: [sin | cos] halves (fairseq, M2M100)."""
    n = int_arg(n_positions, "n_positions", *INT64)
    d = int_arg(d_model, "d_model", *INT32)
    out = np.empty((max(n, 1), max(d, 1)), dtype=np.float32)
    flags = _lib.PE_SINUSOIDAL_CONCAT if concat else 0
    _lib.check(_lib.fn("pe_sinusoidal_table")(n, d, float(base), flags, ptr(out)))
    return out[:n, :d]


def _check_rows(x, dtype, positions):
    """The binding's checks of x and positions of the absolute embeddings
    (run when the library refuses the call); returns x as 4-D and its View."""
    x4 = as_4d(x, "x")
    t = tensor(x4, "x", dtype=dtype)
    _one_head(x4)
    int64_grid(positions, x4.shape[0], x4.shape[2], "positions")
    return x4, t


def sinusoidal_add_(x, positions=None, base=10000.0, concat=False, pool=None, *, dtype=None):
    """x[b,t,:] += PE(positions[b,t]) in place. x: [batch, tokens, d_model]
    or [batch, 1, tokens, d_model]. positions: None = 0..tokens-1."""
    try:
        ext.sinusoidal_add(x, positions, float(base),
                           _lib.PE_SINUSOIDAL_CONCAT if concat else 0, pool, dtype)
    except _lib.PosencError:
        _check_rows(x, dtype, positions)
        raise
    return x


def learned_add_(x, table, positions=None, pool=None, *, dtype=None, table_dtype=None):
    """x[b,t,:] += table[positions[b,t], :] in place (learned absolute
    embeddings). x: [batch, tokens, d] or [batch, 1, tokens, d]; table:
    [max_len, d] or [1, 1, max_len, d], float32/float16/bfloat16, read only.
    A position >= max_len raises PosencError(ERR_POSITION_OUT_OF_RANGE)."""
    try:
        ext.learned_add(x, table, positions, pool, dtype, table_dtype)
    except _lib.PosencError:
        x4, tx = _check_rows(x, dtype, positions)
        tab4 = as_4d(table, "table", ndims=(2, 4))
        tt = tensor(tab4, "table", dtype=table_dtype, writable=False)
        if tab4.shape[:2] != (1, 1):
            raise ValueError("table must be [max_len, d] or [1, 1, max_len, d], got shape %s"
                             % (tab4.shape,)) from None
        if tab4.shape[3] != x4.shape[3]:
            raise ValueError("table has d_model %d, x %d" % (tab4.shape[3], x4.shape[3])) from None
        disjoint(("x", tx), ("table", tt))
        raise
    return x
